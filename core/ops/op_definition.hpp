// What every operator family's definition is written with: attribute readers, index helpers,
// the shape-rule and backward-rule helpers, and the table the families register into.
//
// Internal to core/ops: an operator family (ops_*.cpp) holds, for its operators together, the shape
// rule, the semantics in both algebras (SymAlgebra for proofs, NumAlgebra for replay), the backward
// rule (VJP) and the registration; registry.cpp holds what is shared by all (the registry, the
// attribute types, checkOp). The families register in the order of OpKind (registry.cpp), the
// order the operators were always registered in: an OpKind is an index into that table.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/registry.hpp"
#include "ops/symbolic.hpp"

namespace tv::opdef {

using json = nlohmann::json;

// ===== helpers ================================================================================

inline std::int64_t attrInt(const json& a, const char* key, std::int64_t def = 0) {
    auto it = a.find(key);
    return it != a.end() && it->is_number_integer() ? it->get<std::int64_t>() : def;
}
inline std::string attrString(const json& a, const char* k, const std::string& def) {
    auto it = a.find(k);
    return it == a.end() || !it->is_string() ? def : it->get<std::string>();
}
inline bool attrBool(const json& a, const char* key, bool def = false) {
    auto it = a.find(key);
    return it != a.end() && it->is_boolean() ? it->get<bool>() : def;
}
inline std::optional<Rational> ratOf(const json& v) {
    // An unsigned number above INT64_MAX would wrap to a negative one: refused.
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    if (v.is_number_integer()) return Rational(v.get<std::int64_t>());
    if (v.is_number_float()) return Rational::parse(v.dump());
    if (v.is_string()) return Rational::parse(v.get<std::string>());
    return std::nullopt;
}
inline Rational attrRat(const json& a, const char* key, Rational def = Rational(0)) {
    auto it = a.find(key);
    if (it == a.end()) return def;
    auto r = ratOf(*it);
    return r ? *r : def;
}
inline std::vector<std::int64_t> attrInts(const json& a, const char* key) {
    std::vector<std::int64_t> out;
    auto it = a.find(key);
    if (it == a.end()) return out;
    if (it->is_number_integer()) return {it->get<std::int64_t>()};
    if (it->is_array())
        for (const auto& x : *it)
            if (x.is_number_integer()) out.push_back(x.get<std::int64_t>());
    return out;
}
inline std::int64_t normDim(std::int64_t d, std::size_t rank) { return d < 0 ? d + static_cast<std::int64_t>(rank) : d; }
inline std::string dimName(const char* what, std::size_t i) { return std::string(what) + " dim " + std::to_string(i); }

/// The full (unreduced) size a size-dependent operator normalizes by. Shape reduction shrinks
/// how many elements are summed, never the constants: a mean's 1/n, a norm's 1/H and a loss's
/// 1/tokens are the full plan's, so they compare with literal constants (a 1/4 written in the
/// parallel plan) exactly as they would at full size (docs/soundness.md, "Size constants").
inline std::int64_t fullCount(std::span<const Shape> orig, std::size_t operand, const std::vector<bool>& mask, const Shape& actual) {
    const Shape& s = operand < orig.size() && orig[operand].size() == actual.size() ? orig[operand] : actual;
    std::int64_t count = 1;
    for (std::size_t i = 0; i < mask.size() && i < s.size(); ++i)
        if (mask[i]) count *= s[i];
    return count;
}
inline std::int64_t fullLast(std::span<const Shape> orig, std::size_t operand, const Shape& actual) {
    std::vector<bool> mask(actual.size(), false);
    if (!mask.empty()) mask.back() = true;
    return fullCount(orig, operand, mask, actual);
}
inline std::int64_t fullRows(std::span<const Shape> orig, std::size_t operand, const Shape& actual) {
    std::vector<bool> mask(actual.size(), true);
    if (!mask.empty()) mask.back() = false;
    return fullCount(orig, operand, mask, actual);
}

template <class A, class S>
void initOut(const A& alg, Value<S>& o) {
    o.v.assign(static_cast<std::size_t>(numel(o.shape)), alg.zero());
}

/// Calls f(index vector, flat offset) for every element of `shape` in row-major order.
template <class F>
void forEachIndex(const Shape& shape, F&& f) {
    std::int64_t n = numel(shape);
    std::vector<std::int64_t> idx(shape.size(), 0);
    for (std::int64_t flat = 0; flat < n; ++flat) {
        f(idx, flat);
        for (std::size_t d = shape.size(); d-- > 0;) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

inline std::int64_t offsetOf(const std::vector<std::int64_t>& idx, const std::vector<std::int64_t>& strides) {
    std::int64_t off = 0;
    for (std::size_t i = 0; i < idx.size(); ++i) off += idx[i] * strides[i];
    return off;
}

/// Data movement: every output element is one input element. Works for float and index tensors.
template <class S, class F>
void moveInto(std::span<const Value<S>* const> in, Value<S>& out, F&& source) {
    out.isInt = !in.empty() && in[0]->isInt;
    auto n = static_cast<std::size_t>(numel(out.shape));
    out.v.clear();
    out.v.reserve(n);
    forEachIndex(out.shape, [&](const std::vector<std::int64_t>& idx, std::int64_t) {
        auto [which, off] = source(idx);
        out.v.push_back(in[which]->v[off]);
    });
}

template <class C>
using Dims = typename C::Dims;


// ===== shared by several families: the element-wise shape rule, broadcasting offsets, rows,
// concatenation (all_gather is one) =====

template <class C>
void shapeSame(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    for (std::size_t k = 0; k < out.size(); ++k) {
        if (!c.require(out[k].size() == in[0].size(), "output " + std::to_string(k) + " must have the rank of input 0")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i) c.eq(out[k][i], in[0][i], dimName("output", i));
    }
    for (std::size_t k = 1; k < in.size(); ++k) {
        if (!c.require(in[k].size() == in[0].size(), "input " + std::to_string(k) + " must have the shape of input 0")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i) c.eq(in[k][i], in[0][i], "input " + std::to_string(k) + " dim " + std::to_string(i));
    }
}

/// Flat offset into a broadcast operand for an output index.
inline std::int64_t bcastOffset(const std::vector<std::int64_t>& outIdx, const Shape& s, const std::vector<std::int64_t>& st) {
    std::int64_t off = 0;
    std::size_t shift = outIdx.size() - s.size();
    for (std::size_t i = 0; i < s.size(); ++i)
        if (s[i] != 1) off += outIdx[i + shift] * st[i];
    return off;
}

/// Iterates the "rows" of a tensor along one dim: f(outer offset list of that row).
template <class F>
void forEachRow(const Shape& s, std::size_t dim, F&& f) {
    auto st = stridesOf(s);
    Shape outer = s;
    outer[dim] = 1;
    forEachIndex(outer, [&](const std::vector<std::int64_t>& idx, std::int64_t) {
        std::vector<std::int64_t> offs;
        auto base = offsetOf(idx, st);
        for (std::int64_t k = 0; k < s[dim]; ++k) offs.push_back(base + k * st[dim]);
        f(offs, idx);
    });
}

struct ConcatOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), in[0]->shape.size()));
        std::vector<std::int64_t> starts;
        std::int64_t acc = 0;
        for (auto* x : in) {
            starts.push_back(acc);
            acc += x->shape[d];
        }
        moveInto<typename A::S>(in, out[0], [&](const std::vector<std::int64_t>& idx) {
            std::size_t k = starts.size() - 1;
            while (idx[d] < starts[k]) --k;
            auto j = idx;
            j[d] -= starts[k];
            return std::pair<std::size_t, std::int64_t>{k, offsetOf(j, stridesOf(in[k]->shape))};
        });
    }
};

// ===== backward-rule helpers =================================================================

using H = GradBuilder::Handle;

inline json dimAttr(const json& a) {
    json j = json::object();
    for (const char* k : {"dims", "keepdim", "dim"})
        if (a.contains(k)) j[k] = a[k];
    return j;
}

inline H sumToShape(GradBuilder& b, H g, const Shape& target) {
    if (b.shapeOf(g) == target) return g;
    return b.emitOp1("sum_to", {g}, json::object(), target);
}


/// The attribute `reduce` of an operator that sums or averages (reduce_scatter).
inline std::string checkReduceAttr(const json& a, const std::vector<Shape>&, const std::vector<Shape>&) {
    if (!a.contains("reduce")) return {};
    const auto& v = a["reduce"];
    return v.is_string() && (v == "sum" || v == "mean") ? std::string() : "attribute reduce must be \"sum\" or \"mean\"";
}

// ===== registration ==========================================================================

#define TV_SHAPE(spec, fn)                                                  \
    (spec).shapeConcrete = [](ConcreteShapes& c, const auto& i, const auto& o, const json& a) {                    \
        fn(c, std::vector<ConcreteShapes::Dims>(i.begin(), i.end()), std::vector<ConcreteShapes::Dims>(o.begin(), o.end()), a); \
    };                                                                                                                 \
    (spec).shapeSymbolic = [](SymbolicShapes& c, const auto& i, const auto& o, const json& a) { fn(c, i, o, a); }

template <class Op>
void setEval(OpSpec& s) {
    s.evalNum = &Op::template eval<NumAlgebra>;
    s.evalSym = &Op::template eval<SymAlgebra>;
}

/// The operator table under construction: each family appends its operators, in OpKind order.
class OpTable {
public:
    explicit OpTable(std::vector<OpSpec>& specs) : specs_(specs) {}

    OpSpec* add(OpSpec s) {
        specs_.push_back(std::move(s));
        return &specs_.back();
    }
    /// The operator added last.
    OpSpec& back() { return specs_.back(); }

    /// Any other operator: its class, operand counts (-1: variadic), semantics `Op` and VJP; the
    /// caller sets its shape rule (TV_SHAPE) and what else it needs.
    template <class Op>
    OpSpec* generic(std::string_view name, OpClass cls, int minIn, int maxIn, int nOut, Op, VjpFn vjp, std::string_view summary,
                    std::vector<std::string_view> req = {}, std::vector<std::string_view> opt = {});

private:
    std::vector<OpSpec>& specs_;
};

// The families, in OpKind order.
void registerElementwise(OpTable& t);
void registerLinearAlgebra(OpTable& t);
void registerReductions(OpTable& t);
void registerRouting(OpTable& t);
void registerNormalization(OpTable& t);
void registerMovement(OpTable& t);
void registerEmbeddingAndLoss(OpTable& t);
void registerOptimizers(OpTable& t);
void registerCollectives(OpTable& t);

template <class Op>
OpSpec* OpTable::generic(std::string_view name, OpClass cls, int minIn, int maxIn, int nOut, Op, VjpFn vjp, std::string_view summary,
                         std::vector<std::string_view> req, std::vector<std::string_view> opt) {
    OpSpec s;
    s.name = name;
    s.cls = cls;
    s.minInputs = minIn;
    s.maxInputs = maxIn;
    s.numOutputs = nOut;
    s.keepsDtype = cls == OpClass::Movement || cls == OpClass::Collective;
    s.summary = summary;
    s.vjp = vjp;
    s.requiredAttrs = std::move(req);
    s.optionalAttrs = std::move(opt);
    setEval<Op>(s);
    return add(std::move(s));
}

}  // namespace tv::opdef
