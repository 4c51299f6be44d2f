#include "ops/registry.hpp"

#include <algorithm>
#include <numeric>

namespace tv {

using json = nlohmann::json;

// ===== shape contexts =========================================================================

void ConcreteShapes::eq(D a, D b, const std::string& what) {
    if (a != b && error.empty()) error = what + ": expected " + std::to_string(b) + ", got " + std::to_string(a);
}
void ConcreteShapes::ratio(D part, D whole, std::int64_t num, std::int64_t den, const std::string& what) {
    if (part * den != whole * num && error.empty())
        error = what + ": " + std::to_string(part) + " is not " + std::to_string(num) + "/" + std::to_string(den) + " of " +
                std::to_string(whole);
}
bool ConcreteShapes::require(bool ok, const std::string& what) {
    if (!ok && error.empty()) error = what;
    return ok;
}
void SymbolicShapes::ratio(const D& part, const D& whole, std::int64_t num, std::int64_t den, const std::string&) {
    // Lowest terms keep the constraint linear and small: part * den == whole * num.
    auto g = std::gcd(num, den);
    if (g > 1) num /= g, den /= g;
    if (num == den) {
        constraints.push_back(part.e == whole.e);
        return;
    }
    auto lhs = den == 1 ? part.e : part.e * c_.int_val(static_cast<int64_t>(den));
    auto rhs = num == 1 ? whole.e : whole.e * c_.int_val(static_cast<int64_t>(num));
    constraints.push_back(lhs == rhs);
}
void SymbolicShapes::divides(const D& whole, std::int64_t num, std::int64_t den) {
    if (num % den == 0) return;
    // whole * num is a multiple of den  <=>  whole is a multiple of den / gcd(num, den).
    auto step = den / std::gcd(num, den);
    if (step == 1) return;
    constraints.push_back(z3::mod(whole.e, c_.int_val(static_cast<int64_t>(step))) == 0);
}

std::vector<std::int64_t> stridesOf(const Shape& s) {
    std::vector<std::int64_t> st(s.size(), 1);
    for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
    return st;
}

namespace {

// ===== helpers ================================================================================

std::int64_t attrInt(const json& a, const char* key, std::int64_t def = 0) {
    auto it = a.find(key);
    return it != a.end() && it->is_number_integer() ? it->get<std::int64_t>() : def;
}
std::string attrString(const json& a, const char* k, const std::string& def) {
    auto it = a.find(k);
    return it == a.end() || !it->is_string() ? def : it->get<std::string>();
}
bool attrBool(const json& a, const char* key, bool def = false) {
    auto it = a.find(key);
    return it != a.end() && it->is_boolean() ? it->get<bool>() : def;
}
std::optional<Rational> ratOf(const json& v) {
    // An unsigned number above INT64_MAX would wrap to a negative one: refused.
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    if (v.is_number_integer()) return Rational(v.get<std::int64_t>());
    if (v.is_number_float()) return Rational::parse(v.dump());
    if (v.is_string()) return Rational::parse(v.get<std::string>());
    return std::nullopt;
}
Rational attrRat(const json& a, const char* key, Rational def = Rational(0)) {
    auto it = a.find(key);
    if (it == a.end()) return def;
    auto r = ratOf(*it);
    return r ? *r : def;
}
std::vector<std::int64_t> attrInts(const json& a, const char* key) {
    std::vector<std::int64_t> out;
    auto it = a.find(key);
    if (it == a.end()) return out;
    if (it->is_number_integer()) return {it->get<std::int64_t>()};
    if (it->is_array())
        for (const auto& x : *it)
            if (x.is_number_integer()) out.push_back(x.get<std::int64_t>());
    return out;
}
std::int64_t normDim(std::int64_t d, std::size_t rank) { return d < 0 ? d + static_cast<std::int64_t>(rank) : d; }
std::string dimName(const char* what, std::size_t i) { return std::string(what) + " dim " + std::to_string(i); }

/// The full (unreduced) size a size-dependent operator normalizes by. Shape reduction shrinks
/// how many elements are summed, never the constants: a mean's 1/n, a norm's 1/H and a loss's
/// 1/tokens are the full plan's, so they compare with literal constants (a 1/4 written in the
/// parallel plan) exactly as they would at full size (docs/soundness.md, "Size constants").
std::int64_t fullCount(std::span<const Shape> orig, std::size_t operand, const std::vector<bool>& mask, const Shape& actual) {
    const Shape& s = operand < orig.size() && orig[operand].size() == actual.size() ? orig[operand] : actual;
    std::int64_t count = 1;
    for (std::size_t i = 0; i < mask.size() && i < s.size(); ++i)
        if (mask[i]) count *= s[i];
    return count;
}
std::int64_t fullLast(std::span<const Shape> orig, std::size_t operand, const Shape& actual) {
    std::vector<bool> mask(actual.size(), false);
    if (!mask.empty()) mask.back() = true;
    return fullCount(orig, operand, mask, actual);
}
std::int64_t fullRows(std::span<const Shape> orig, std::size_t operand, const Shape& actual) {
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

std::int64_t offsetOf(const std::vector<std::int64_t>& idx, const std::vector<std::int64_t>& strides) {
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

// ===== element-wise ===========================================================================

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

/// Numpy broadcasting: dimensions aligned from the right; a size-1 dimension stretches.
template <class C>
void shapeBroadcast(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& a = in[0];
    const auto& b = in[1];
    std::size_t r = std::max(a.size(), b.size());
    if (!c.require(out[0].size() == r, "output rank must be " + std::to_string(r))) return;
    for (std::size_t i = 0; i < r; ++i) {
        const typename C::D* da = i < r - a.size() ? nullptr : &a[i - (r - a.size())];
        const typename C::D* db = i < r - b.size() ? nullptr : &b[i - (r - b.size())];
        auto what = dimName("output", i);
        if (da && db) {
            if (c.orig(*da) == 1 && c.orig(*db) != 1) {
                c.eq(*da, c.cst(1), what);
                c.eq(out[0][i], *db, what);
            } else if (c.orig(*db) == 1 && c.orig(*da) != 1) {
                c.eq(*db, c.cst(1), what);
                c.eq(out[0][i], *da, what);
            } else {
                if (!c.require(c.orig(*da) == c.orig(*db), "inputs do not broadcast at output dim " + std::to_string(i))) return;
                c.eq(*da, *db, what);
                c.eq(out[0][i], *da, what);
            }
        } else {
            c.eq(out[0][i], da ? *da : *db, what);
        }
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

enum class Bin { Add, Sub, Mul, Div };
template <Bin K>
struct Binary {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        auto& o = out[0];
        initOut(alg, o);
        auto sa = stridesOf(in[0]->shape), sb = stridesOf(in[1]->shape);
        forEachIndex(o.shape, [&](const std::vector<std::int64_t>& idx, std::int64_t flat) {
            const auto& x = in[0]->v[bcastOffset(idx, in[0]->shape, sa)];
            const auto& y = in[1]->v[bcastOffset(idx, in[1]->shape, sb)];
            if constexpr (K == Bin::Add) o.v[flat] = alg.add(x, y);
            else if constexpr (K == Bin::Sub) o.v[flat] = alg.sub(x, y);
            else if constexpr (K == Bin::Mul) o.v[flat] = alg.mul(x, y);
            else o.v[flat] = alg.div(x, y);
        });
    }
};

#define TV_UNARY(NAME, BODY)                                                                                  \
    struct NAME {                                                                                            \
        template <class A>                                                                                   \
        static typename A::S f(const A& alg, const typename A::S& x, const json& attrs) {                    \
            (void)attrs;                                                                                     \
            BODY                                                                                             \
        }                                                                                                    \
    };

TV_UNARY(FNeg, return alg.neg(x);)
TV_UNARY(FExp, return alg.exp(x);)
TV_UNARY(FLog, return alg.log(x);)
TV_UNARY(FSqrt, return alg.sqrt(x);)
TV_UNARY(FRsqrt, return alg.rsqrt(x);)
TV_UNARY(FSigmoid, return alg.sigmoid(x);)
TV_UNARY(FTanh, return alg.tanh(x);)
TV_UNARY(FErf, return alg.erf(x);)
TV_UNARY(FRelu, return alg.ite(alg.gt(x, alg.zero()), x, alg.zero());)
// Global-norm gradient clipping's factor, as torch.nn.utils.clip_grad_norm_ computes it:
// min(1, max_norm / (norm + eps)).
TV_UNARY(FClipCoeff, auto r = alg.div(alg.num(attrRat(attrs, "max_norm")), alg.add(x, alg.num(attrRat(attrs, "eps", Rational(1, 1000000)))));
         return alg.ite(alg.ge(r, alg.one()), alg.one(), r);)
TV_UNARY(FSilu, return alg.mul(x, alg.sigmoid(x));)
TV_UNARY(FGelu, return alg.mul(alg.mul(alg.num(Rational(1, 2)), x),
                               alg.add(alg.one(), alg.erf(alg.mul(x, alg.rsqrt(alg.num(2))))));)
TV_UNARY(FAddScalar, return alg.add(x, alg.num(attrRat(attrs, "value")));)
TV_UNARY(FMulScalar, return alg.mul(x, alg.num(attrRat(attrs, "value")));)
// x / sqrt(n) for an integer n: the attention score scale 1/sqrt(head_dim), exact through the rsqrt UF.
TV_UNARY(FDivSqrt, return alg.mul(x, alg.rsqrt(alg.num(Rational(attrInt(attrs, "n", 1)))));)
TV_UNARY(FPow, return power(alg, x, attrRat(attrs, "exponent"));)
TV_UNARY(FIdentity, (void)alg; return x;)

template <class F>
struct Unary {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto& o = out[0];
        if (in[0]->isInt) {
            // Only identity accepts index tensors (checkOp): they pass through unchanged.
            o.isInt = true;
            o.v = in[0]->v;
            return;
        }
        initOut(alg, o);
        for (std::size_t i = 0; i < o.v.size(); ++i) o.v[i] = F::f(alg, in[0]->v[i], ctx.attrs);
    }
};

// Backward of unary functions: inputs (x, dy), output dx = f'(x) * dy.
#define TV_UNARY_BW(NAME, BODY)                                                                               \
    struct NAME {                                                                                            \
        template <class A>                                                                                   \
        static typename A::S f(const A& alg, const typename A::S& x, const typename A::S& dy) {              \
            BODY                                                                                             \
        }                                                                                                    \
    };

TV_UNARY_BW(BRelu, return alg.ite(alg.gt(x, alg.zero()), dy, alg.zero());)
TV_UNARY_BW(BSigmoid, auto s = alg.sigmoid(x); return alg.mul(dy, alg.mul(s, alg.sub(alg.one(), s)));)
TV_UNARY_BW(BTanh, auto t = alg.tanh(x); return alg.mul(dy, alg.sub(alg.one(), alg.mul(t, t)));)
TV_UNARY_BW(BSilu, auto s = alg.sigmoid(x);
            return alg.mul(dy, alg.add(s, alg.mul(x, alg.mul(s, alg.sub(alg.one(), s)))));)
TV_UNARY_BW(BErf, return alg.mul(dy, alg.mul(alg.mul(alg.num(2), alg.rsqrt(alg.pi())),
                                             alg.exp(alg.neg(alg.mul(x, x)))));)
TV_UNARY_BW(BGelu,
            auto cdf = alg.mul(alg.num(Rational(1, 2)), alg.add(alg.one(), alg.erf(alg.mul(x, alg.rsqrt(alg.num(2))))));
            auto pdf = alg.mul(alg.exp(alg.mul(alg.num(Rational(-1, 2)), alg.mul(x, x))),
                               alg.rsqrt(alg.mul(alg.num(2), alg.pi())));
            return alg.mul(dy, alg.add(cdf, alg.mul(x, pdf)));)

template <class F>
struct UnaryBackward {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        auto& o = out[0];
        initOut(alg, o);
        for (std::size_t i = 0; i < o.v.size(); ++i) o.v[i] = F::f(alg, in[0]->v[i], in[1]->v[i]);
    }
};

// ===== reductions ============================================================================

std::vector<bool> reducedMask(const json& a, std::size_t rank) {
    std::vector<bool> m(rank, false);
    auto dims = attrInts(a, "dims");
    if (dims.empty() && !a.contains("dims")) m.assign(rank, true);
    for (auto d : dims) {
        auto n = normDim(d, rank);
        if (n >= 0 && static_cast<std::size_t>(n) < rank) m[n] = true;
    }
    return m;
}

/// The output shape of reducing `in` over the masked dims (keepdim keeps them as 1).
template <class C>
void shapeReduce(C& c, const Dims<C>& in, const Dims<C>& out, const std::vector<bool>& mask, bool keepdim) {
    std::size_t j = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (mask[i]) {
            c.min2(in[i]);
            if (keepdim) {
                if (!c.require(j < out.size(), "reduced output has too few dims")) return;
                c.eq(out[j], c.cst(1), dimName("output", j));
                ++j;
            }
        } else {
            if (!c.require(j < out.size(), "reduced output has too few dims")) return;
            c.eq(out[j], in[i], dimName("output", j));
            ++j;
        }
    }
    c.require(j == out.size(), "reduced output has too many dims");
}

template <class C>
void shapeSum(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    shapeReduce(c, in[0], out[0], reducedMask(a, in[0].size()), attrBool(a, "keepdim"));
}
// sum_backward / mean_backward: input dy (reduced shape), output the original shape.
template <class C>
void shapeSumBackward(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    shapeReduce(c, out[0], in[0], reducedMask(a, out[0].size()), attrBool(a, "keepdim"));
}
template <class C>
void shapeMax(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    std::vector<bool> m(in[0].size(), false);
    auto d = normDim(attrInt(a, "dim", -1), in[0].size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    m[d] = true;
    shapeReduce(c, in[0], out[0], m, attrBool(a, "keepdim"));
}
template <class C>
void shapeMaxBackward(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    std::vector<bool> m(in[0].size(), false);
    auto d = normDim(attrInt(a, "dim", -1), in[0].size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    m[d] = true;
    shapeReduce(c, in[0], in[1], m, attrBool(a, "keepdim"));
    if (!c.require(out[0].size() == in[0].size(), "output must have the shape of input 0")) return;
    for (std::size_t i = 0; i < in[0].size(); ++i) c.eq(out[0][i], in[0][i], dimName("output", i));
}

/// Maps an index of the full tensor to the flat offset in the reduced tensor.
std::int64_t reducedOffset(const std::vector<std::int64_t>& idx, const std::vector<bool>& mask, bool keepdim,
                           const std::vector<std::int64_t>& redStrides) {
    std::int64_t off = 0;
    std::size_t j = 0;
    for (std::size_t i = 0; i < idx.size(); ++i) {
        if (mask[i]) {
            if (keepdim) ++j;
        } else {
            off += idx[i] * redStrides[j++];
        }
    }
    return off;
}

template <bool Mean>
struct SumOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto& o = out[0];
        const auto& x = *in[0];
        auto mask = reducedMask(ctx.attrs, x.shape.size());
        bool keep = attrBool(ctx.attrs, "keepdim");
        std::vector<std::vector<typename A::S>> parts(static_cast<std::size_t>(numel(o.shape)));
        auto ost = stridesOf(o.shape);
        const std::int64_t count = fullCount(ctx.origInputs, 0, mask, x.shape);
        forEachIndex(x.shape, [&](const std::vector<std::int64_t>& idx, std::int64_t flat) {
            parts[reducedOffset(idx, mask, keep, ost)].push_back(x.v[flat]);
        });
        o.v.clear();
        for (auto& p : parts) {
            auto s = alg.sum(p);
            o.v.push_back(Mean ? alg.mul(s, alg.num(Rational(1, count))) : s);
        }
    }
};

template <bool Mean>
struct SumBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto& o = out[0];
        initOut(alg, o);
        auto mask = reducedMask(ctx.attrs, o.shape.size());
        bool keep = attrBool(ctx.attrs, "keepdim");
        auto rst = stridesOf(in[0]->shape);
        const std::int64_t count = fullCount(ctx.origOutputs, 0, mask, o.shape);
        forEachIndex(o.shape, [&](const std::vector<std::int64_t>& idx, std::int64_t flat) {
            const auto& g = in[0]->v[reducedOffset(idx, mask, keep, rst)];
            o.v[flat] = Mean ? alg.mul(g, alg.num(Rational(1, count))) : g;
        });
    }
};

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

struct MaxOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", -1), x.shape.size()));
        out[0].v.clear();
        forEachRow(x.shape, d, [&](const std::vector<std::int64_t>& offs, const std::vector<std::int64_t>&) {
            auto m = x.v[offs[0]];
            for (std::size_t k = 1; k < offs.size(); ++k) m = alg.ite(alg.ge(m, x.v[offs[k]]), m, x.v[offs[k]]);
            out[0].v.push_back(m);
        });
    }
};

/// Gradient flows to the first index holding the maximum (PyTorch's max(dim) semantics).
struct MaxBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        const auto& dy = *in[1];
        auto& o = out[0];
        initOut(alg, o);
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", -1), x.shape.size()));
        std::size_t row = 0;
        forEachRow(x.shape, d, [&](const std::vector<std::int64_t>& offs, const std::vector<std::int64_t>&) {
            auto m = x.v[offs[0]];
            for (std::size_t k = 1; k < offs.size(); ++k) m = alg.ite(alg.ge(m, x.v[offs[k]]), m, x.v[offs[k]]);
            auto notYet = alg.btrue();
            for (std::size_t k = 0; k < offs.size(); ++k) {
                auto hit = alg.land(notYet, alg.eq(x.v[offs[k]], m));
                o.v[offs[k]] = alg.ite(hit, dy.v[row], alg.zero());
                notYet = alg.land(notYet, alg.lnot(alg.eq(x.v[offs[k]], m)));
            }
            ++row;
        });
    }
};

// ===== routing =================================================================================

/// Mixture-of-experts routing: along the last dim (the experts), 1 for the k experts with the
/// highest scores and 0 for the rest, ties to the lower index. With "groups" G and "topk_groups"
/// TG, the experts form G equal groups, each scored by its best expert ("group_score": "max") or
/// its best two ("top2"), and only the TG best groups are eligible (DeepSeek's group-limited
/// routing). Exact on numbers; an uninterpreted function of the token's scores in proofs
/// (RouteSpec, algebra.hpp).
RouteSpec routeSpecOf(const json& a) {
    RouteSpec r;
    r.k = attrInt(a, "k", 1);
    r.groups = attrInt(a, "groups", 1);
    r.topkGroups = attrInt(a, "topk_groups", r.groups);
    r.top2 = attrString(a, "group_score", "max") == "top2";
    return r;
}

template <class C>
void shapeTopkMask(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    if (!c.require(!in[0].empty(), "topk_mask needs the experts as the last dim")) return;
    const auto& e = in[0].back();
    const auto E = c.orig(e);
    const auto r = routeSpecOf(a);
    const auto k = r.k, G = r.groups, TG = r.topkGroups;
    if (!c.require(k >= 1 && G >= 1 && TG >= 1 && TG <= G, "attributes k, groups, topk_groups must be positive, topk_groups <= groups")) return;
    if (!c.require(E % G == 0, "the " + std::to_string(E) + " experts do not form " + std::to_string(G) + " equal groups")) return;
    if (!c.require(k <= E / G * TG, "k = " + std::to_string(k) + " exceeds the experts of the eligible groups")) return;
    if (!c.require(attrString(a, "group_score", "max") == "max" || (attrString(a, "group_score", "max") == "top2" && E / G >= 2),
                   "attribute group_score must be \"max\" or \"top2\" (groups of two or more)"))
        return;
    c.fixed(e);  // which experts win depends on how many there are: never reduced
    shapeSame(c, in, out, a);
}

struct TopkMaskOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        auto& o = out[0];
        initOut(alg, o);
        const auto r = routeSpecOf(ctx.attrs);
        forEachRow(x.shape, x.shape.size() - 1, [&](const std::vector<std::int64_t>& offs, const std::vector<std::int64_t>&) {
            std::vector<typename A::S> row;
            for (auto off : offs) row.push_back(x.v[static_cast<std::size_t>(off)]);
            auto m = alg.route(row, r);
            for (std::size_t e = 0; e < offs.size(); ++e) o.v[static_cast<std::size_t>(offs[e])] = m[e];
        });
    }
};

template <class C>
void shapeSoftmax(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto d = normDim(attrInt(a, "dim", -1), in[0].size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    c.min2(in[0][d]);
    shapeSame(c, in, out, a);
}

struct SoftmaxOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        auto& o = out[0];
        initOut(alg, o);
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", -1), x.shape.size()));
        forEachRow(x.shape, d, [&](const std::vector<std::int64_t>& offs, const std::vector<std::int64_t>&) {
            std::vector<typename A::S> e;
            for (auto off : offs) e.push_back(alg.exp(x.v[off]));
            auto z = alg.sum(e);
            for (std::size_t k = 0; k < offs.size(); ++k) o.v[offs[k]] = alg.div(e[k], z);
        });
    }
};

/// inputs (y, dy): dx = y * (dy - sum(dy * y)).
struct SoftmaxBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& y = *in[0];
        const auto& dy = *in[1];
        auto& o = out[0];
        initOut(alg, o);
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", -1), y.shape.size()));
        forEachRow(y.shape, d, [&](const std::vector<std::int64_t>& offs, const std::vector<std::int64_t>&) {
            std::vector<typename A::S> p;
            for (auto off : offs) p.push_back(alg.mul(dy.v[off], y.v[off]));
            auto s = alg.sum(p);
            for (auto off : offs) o.v[off] = alg.mul(y.v[off], alg.sub(dy.v[off], s));
        });
    }
};

// ===== linear algebra ========================================================================

template <class C>
void shapeMatmul(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    const auto& A = in[0];
    const auto& B = in[1];
    if (!c.require(A.size() >= 2 && B.size() >= 2, "matmul operands need rank >= 2")) return;
    if (!c.require(B.size() == 2 || B.size() == A.size(), "input 1 must be 2-D or have the rank of input 0")) return;
    if (!c.require(out[0].size() == A.size(), "output must have the rank of input 0")) return;
    bool ta = attrBool(a, "transpose_a"), tb = attrBool(a, "transpose_b");
    std::size_t r = A.size();
    const auto& m = ta ? A[r - 1] : A[r - 2];
    const auto& k1 = ta ? A[r - 2] : A[r - 1];
    std::size_t rb = B.size();
    const auto& k2 = tb ? B[rb - 1] : B[rb - 2];
    const auto& n = tb ? B[rb - 2] : B[rb - 1];
    if (!c.require(c.orig(k1) == c.orig(k2), "contracted dims differ: " + std::to_string(c.orig(k1)) + " vs " +
                                                  std::to_string(c.orig(k2)))) return;
    c.eq(k1, k2, "contracted dim");
    c.min2(k1);
    for (std::size_t i = 0; i + 2 < r; ++i) {
        if (rb == r) c.eq(B[i], A[i], dimName("input 1 batch", i));
        c.eq(out[0][i], A[i], dimName("output", i));
    }
    c.eq(out[0][r - 2], m, dimName("output", r - 2));
    c.eq(out[0][r - 1], n, dimName("output", r - 1));
}

struct MatmulOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& a = *in[0];
        const auto& b = *in[1];
        auto& o = out[0];
        initOut(alg, o);
        bool ta = attrBool(ctx.attrs, "transpose_a"), tb = attrBool(ctx.attrs, "transpose_b");
        std::size_t r = a.shape.size(), rb = b.shape.size();
        std::int64_t M = o.shape[r - 2], N = o.shape[r - 1];
        std::int64_t K = ta ? a.shape[r - 2] : a.shape[r - 1];
        std::int64_t batch = numel(o.shape) / (M * N);
        std::int64_t aMat = a.shape[r - 2] * a.shape[r - 1], bMat = b.shape[rb - 2] * b.shape[rb - 1];
        std::vector<typename A::S> terms;
        for (std::int64_t bi = 0; bi < batch; ++bi)
            for (std::int64_t i = 0; i < M; ++i)
                for (std::int64_t j = 0; j < N; ++j) {
                    terms.clear();
                    for (std::int64_t k = 0; k < K; ++k) {
                        auto ai = bi * aMat + (ta ? k * M + i : i * K + k);
                        auto bj = (rb == 2 ? 0 : bi * bMat) + (tb ? j * K + k : k * N + j);
                        terms.push_back(alg.mul(a.v[ai], b.v[bj]));
                    }
                    o.v[(bi * M + i) * N + j] = alg.sum(terms);
                }
    }
};

template <class C>
void shapeLinear(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& x = in[0];
    const auto& w = in[1];
    if (!c.require(x.size() >= 1 && w.size() == 2, "linear needs x [..., in] and weight [out, in]")) return;
    if (!c.require(c.orig(x.back()) == c.orig(w[1]), "input features differ: x has " + std::to_string(c.orig(x.back())) +
                                                         ", weight has " + std::to_string(c.orig(w[1])))) return;
    c.eq(x.back(), w[1], "input features");
    c.min2(w[1]);
    if (in.size() == 3) {
        if (!c.require(in[2].size() == 1, "bias must be 1-D")) return;
        c.eq(in[2][0], w[0], "bias size");
    }
    if (!c.require(out[0].size() == x.size(), "output must have the rank of x")) return;
    for (std::size_t i = 0; i + 1 < x.size(); ++i) c.eq(out[0][i], x[i], dimName("output", i));
    c.eq(out[0].back(), w[0], "output features");
}

struct LinearOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        const auto& x = *in[0];
        const auto& w = *in[1];
        auto& o = out[0];
        initOut(alg, o);
        std::int64_t K = w.shape[1], N = w.shape[0];
        std::int64_t rows = numel(x.shape) / K;
        std::vector<typename A::S> terms;
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t j = 0; j < N; ++j) {
                terms.clear();
                for (std::int64_t k = 0; k < K; ++k) terms.push_back(alg.mul(x.v[r * K + k], w.v[j * K + k]));
                if (in.size() == 3) terms.push_back(in[2]->v[j]);
                o.v[r * N + j] = alg.sum(terms);
            }
    }
};

// ===== normalisation =========================================================================

template <class C>
void shapeNorm(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& x = in[0];
    if (!c.require(!x.empty(), "normalised input needs rank >= 1")) return;
    c.min2(x.back());
    for (std::size_t k = 1; k < in.size(); ++k) {
        if (k == 1 || in.size() <= 3 || k < in.size() - 1) {
            // weight/bias (forward) or weight (backward) are [H]; the backward's dy has x's shape.
        }
    }
    for (std::size_t k = 0; k < out.size(); ++k) {
        if (!c.require(out[k].size() == x.size() || out[k].size() == 1, "output " + std::to_string(k) + " rank")) return;
        if (out[k].size() == x.size())
            for (std::size_t i = 0; i < x.size(); ++i) c.eq(out[k][i], x[i], dimName("output", i));
        else
            c.eq(out[k][0], x.back(), "parameter gradient size");
    }
}

template <class C>
void shapeNormForward(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    for (std::size_t k = 1; k < in.size(); ++k) {
        if (!c.require(in[k].size() == 1, "input " + std::to_string(k) + " must be 1-D [hidden]")) return;
        c.eq(in[k][0], in[0].back(), "input " + std::to_string(k) + " size");
    }
    if (!c.require(out[0].size() == in[0].size(), "output must have the shape of x")) return;
    shapeNorm(c, in, out, a);
}

template <class C>
void shapeNormBackward(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    // inputs: x, w, dy
    if (!c.require(in[1].size() == 1, "input 1 (weight) must be 1-D")) return;
    c.eq(in[1][0], in[0].back(), "weight size");
    if (!c.require(in[2].size() == in[0].size(), "input 2 (dy) must have the shape of x")) return;
    for (std::size_t i = 0; i < in[0].size(); ++i) c.eq(in[2][i], in[0][i], dimName("input 2", i));
    if (!c.require(out[0].size() == in[0].size(), "output 0 (dx) must have the shape of x")) return;
    for (std::size_t k = 1; k < out.size(); ++k)
        if (!c.require(out[k].size() == 1, "parameter gradients must be 1-D")) return;
    shapeNorm(c, in, out, a);
}

struct RmsNormOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        const auto& w = *in[1];
        auto& o = out[0];
        initOut(alg, o);
        auto eps = alg.num(attrRat(ctx.attrs, "eps"));
        std::int64_t H = x.shape.back(), rows = numel(x.shape) / H;
        const std::int64_t Hfull = fullLast(ctx.origInputs, 0, x.shape);
        for (std::int64_t r = 0; r < rows; ++r) {
            std::vector<typename A::S> sq;
            for (std::int64_t i = 0; i < H; ++i) sq.push_back(alg.mul(x.v[r * H + i], x.v[r * H + i]));
            auto rs = alg.rsqrt(alg.add(alg.mul(alg.sum(sq), alg.num(Rational(1, Hfull))), eps));
            for (std::int64_t i = 0; i < H; ++i) o.v[r * H + i] = alg.mul(alg.mul(x.v[r * H + i], rs), w.v[i]);
        }
    }
};

/// inputs (x, w, dy) -> (dx, dw). r = rsqrt(mean(x^2)+eps);
/// dx_i = r w_i dy_i - (r^3 / H) x_i sum_j dy_j w_j x_j;  dw_i = sum_rows dy_i x_i r.
struct RmsNormBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        const auto& w = *in[1];
        const auto& dy = *in[2];
        auto& dx = out[0];
        auto& dw = out[1];
        initOut(alg, dx);
        auto eps = alg.num(attrRat(ctx.attrs, "eps"));
        std::int64_t H = x.shape.back(), rows = numel(x.shape) / H;
        const std::int64_t Hfull = fullLast(ctx.origInputs, 0, x.shape);
        std::vector<std::vector<typename A::S>> dwTerms(static_cast<std::size_t>(H));
        for (std::int64_t r = 0; r < rows; ++r) {
            std::vector<typename A::S> sq, dot;
            for (std::int64_t i = 0; i < H; ++i) {
                sq.push_back(alg.mul(x.v[r * H + i], x.v[r * H + i]));
                dot.push_back(alg.mul(alg.mul(dy.v[r * H + i], w.v[i]), x.v[r * H + i]));
            }
            auto rs = alg.rsqrt(alg.add(alg.mul(alg.sum(sq), alg.num(Rational(1, Hfull))), eps));
            auto r3 = alg.mul(alg.mul(rs, rs), rs);
            auto coef = alg.mul(alg.mul(r3, alg.num(Rational(1, Hfull))), alg.sum(dot));
            for (std::int64_t i = 0; i < H; ++i) {
                dx.v[r * H + i] = alg.sub(alg.mul(alg.mul(rs, w.v[i]), dy.v[r * H + i]), alg.mul(x.v[r * H + i], coef));
                dwTerms[i].push_back(alg.mul(alg.mul(dy.v[r * H + i], x.v[r * H + i]), rs));
            }
        }
        dw.v.clear();
        for (auto& t : dwTerms) dw.v.push_back(alg.sum(t));
    }
};

template <class A>
void layerNormRow(const A& alg, const std::vector<typename A::S>& xs, const typename A::S& eps, std::int64_t H,
                  std::vector<typename A::S>& xhat, typename A::S& rstd) {
    auto mu = alg.mul(alg.sum(xs), alg.num(Rational(1, H)));
    std::vector<typename A::S> centered, sq;
    for (const auto& v : xs) centered.push_back(alg.sub(v, mu));
    for (const auto& v : centered) sq.push_back(alg.mul(v, v));
    rstd = alg.rsqrt(alg.add(alg.mul(alg.sum(sq), alg.num(Rational(1, H))), eps));
    xhat.clear();
    for (const auto& v : centered) xhat.push_back(alg.mul(v, rstd));
}

struct LayerNormOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        auto& o = out[0];
        initOut(alg, o);
        auto eps = alg.num(attrRat(ctx.attrs, "eps"));
        std::int64_t H = x.shape.back(), rows = numel(x.shape) / H;
        const std::int64_t Hfull = fullLast(ctx.origInputs, 0, x.shape);
        for (std::int64_t r = 0; r < rows; ++r) {
            std::vector<typename A::S> xs(x.v.begin() + r * H, x.v.begin() + (r + 1) * H), xhat;
            typename A::S rstd = alg.zero();
            layerNormRow(alg, xs, eps, Hfull, xhat, rstd);
            for (std::int64_t i = 0; i < H; ++i) o.v[r * H + i] = alg.add(alg.mul(xhat[i], in[1]->v[i]), in[2]->v[i]);
        }
    }
};

/// inputs (x, w, dy) -> (dx, dw, db).
/// dxhat = dy*w; dx = rstd/H * (H*dxhat - sum(dxhat) - xhat*sum(dxhat*xhat)).
struct LayerNormBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        const auto& w = *in[1];
        const auto& dy = *in[2];
        auto& dx = out[0];
        initOut(alg, dx);
        auto eps = alg.num(attrRat(ctx.attrs, "eps"));
        std::int64_t H = x.shape.back(), rows = numel(x.shape) / H;
        const std::int64_t Hfull = fullLast(ctx.origInputs, 0, x.shape);
        std::vector<std::vector<typename A::S>> dwT(static_cast<std::size_t>(H)), dbT(static_cast<std::size_t>(H));
        for (std::int64_t r = 0; r < rows; ++r) {
            std::vector<typename A::S> xs(x.v.begin() + r * H, x.v.begin() + (r + 1) * H), xhat, dxh, dxhx;
            typename A::S rstd = alg.zero();
            layerNormRow(alg, xs, eps, Hfull, xhat, rstd);
            for (std::int64_t i = 0; i < H; ++i) {
                dxh.push_back(alg.mul(dy.v[r * H + i], w.v[i]));
                dxhx.push_back(alg.mul(dxh.back(), xhat[i]));
                dwT[i].push_back(alg.mul(dy.v[r * H + i], xhat[i]));
                dbT[i].push_back(dy.v[r * H + i]);
            }
            auto s1 = alg.sum(dxh), s2 = alg.sum(dxhx);
            auto scale = alg.mul(rstd, alg.num(Rational(1, Hfull)));
            for (std::int64_t i = 0; i < H; ++i)
                dx.v[r * H + i] =
                    alg.mul(scale, alg.sub(alg.sub(alg.mul(alg.num(Hfull), dxh[i]), s1), alg.mul(xhat[i], s2)));
        }
        out[1].v.clear();
        out[2].v.clear();
        for (auto& t : dwT) out[1].v.push_back(alg.sum(t));
        for (auto& t : dbT) out[2].v.push_back(alg.sum(t));
    }
};

// ===== data movement =========================================================================

/// Groups the non-unit dims of two shapes with equal element counts into minimal runs with equal
/// products (the dims a reshape merges or splits). Returns false if the shapes cannot be grouped.
bool reshapeGroups(const Shape& a, const Shape& b,
                   std::vector<std::pair<std::vector<std::size_t>, std::vector<std::size_t>>>& groups) {
    std::vector<std::size_t> ia, ib;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i] != 1) ia.push_back(i);
    for (std::size_t i = 0; i < b.size(); ++i)
        if (b[i] != 1) ib.push_back(i);
    std::size_t i = 0, j = 0;
    while (i < ia.size() || j < ib.size()) {
        if (i >= ia.size() || j >= ib.size()) return false;
        std::vector<std::size_t> ga{ia[i]}, gb{ib[j]};
        std::int64_t pa = a[ia[i++]], pb = b[ib[j++]];
        while (pa != pb) {
            if (pa < pb) {
                if (i >= ia.size()) return false;
                ga.push_back(ia[i]);
                pa *= a[ia[i++]];
            } else {
                if (j >= ib.size()) return false;
                gb.push_back(ib[j]);
                pb *= b[ib[j++]];
            }
        }
        groups.emplace_back(std::move(ga), std::move(gb));
    }
    return true;
}

template <class C>
void shapeReshape(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    Shape a, b;
    for (const auto& d : in[0]) a.push_back(c.orig(d));
    for (const auto& d : out[0]) b.push_back(c.orig(d));
    if (!c.require(numel(a) == numel(b), "reshape changes the element count: " + std::to_string(numel(a)) + " vs " +
                                             std::to_string(numel(b)))) return;
    std::vector<std::pair<std::vector<std::size_t>, std::vector<std::size_t>>> groups;
    if (!c.require(reshapeGroups(a, b, groups), "reshape dims cannot be grouped")) return;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i] == 1) c.eq(in[0][i], c.cst(1), dimName("input", i));
    for (std::size_t i = 0; i < b.size(); ++i)
        if (b[i] == 1) c.eq(out[0][i], c.cst(1), dimName("output", i));
    for (const auto& [ga, gb] : groups) {
        if (ga.size() == 1 && gb.size() == 1) {
            c.eq(out[0][gb[0]], in[0][ga[0]], dimName("output", gb[0]));
            continue;
        }
        auto pa = in[0][ga[0]];
        for (std::size_t k = 1; k < ga.size(); ++k) pa = c.mul(pa, in[0][ga[k]]);
        auto pb = out[0][gb[0]];
        for (std::size_t k = 1; k < gb.size(); ++k) pb = c.mul(pb, out[0][gb[k]]);
        c.eq(pb, pa, "reshaped group size");
        for (auto k : ga) c.min2(in[0][k]);
        for (auto k : gb) c.min2(out[0][k]);
    }
}

struct ReshapeOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        out[0].isInt = in[0]->isInt;
        out[0].v = in[0]->v;
    }
};

std::vector<std::int64_t> permOf(const json& a, std::size_t rank) {
    std::vector<std::int64_t> p(rank);
    std::iota(p.begin(), p.end(), 0);
    if (a.contains("dims")) {
        auto d = attrInts(a, "dims");
        for (std::size_t i = 0; i < d.size() && i < rank; ++i) p[i] = normDim(d[i], rank);
    } else {
        auto d0 = normDim(attrInt(a, "dim0", 0), rank), d1 = normDim(attrInt(a, "dim1", 1), rank);
        if (d0 >= 0 && d1 >= 0 && static_cast<std::size_t>(d0) < rank && static_cast<std::size_t>(d1) < rank)
            std::swap(p[d0], p[d1]);
    }
    return p;
}

template <class C>
void shapePermute(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto p = permOf(a, in[0].size());
    auto sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i)
        if (!c.require(sorted[i] == static_cast<std::int64_t>(i), "attribute dims is not a permutation")) return;
    if (!c.require(out[0].size() == in[0].size(), "output must have the rank of the input")) return;
    for (std::size_t i = 0; i < p.size(); ++i) c.eq(out[0][i], in[0][p[i]], dimName("output", i));
}

struct PermuteOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto p = permOf(ctx.attrs, in[0]->shape.size());
        auto st = stridesOf(in[0]->shape);
        moveInto<typename A::S>(in, out[0], [&](const std::vector<std::int64_t>& idx) {
            std::int64_t off = 0;
            for (std::size_t i = 0; i < p.size(); ++i) off += idx[i] * st[p[i]];
            return std::pair<std::size_t, std::int64_t>{0, off};
        });
    }
};

template <class C>
void sliceRule(C& c, const Dims<C>& full, const Dims<C>& part, const json& a, const char* partName) {
    auto d = normDim(attrInt(a, "dim", 0), full.size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < full.size(), "attribute dim is out of range")) return;
    if (!c.require(part.size() == full.size(), std::string(partName) + " must have the rank of the full tensor")) return;
    auto start = attrInt(a, "start"), end = attrInt(a, "end");
    auto D = c.orig(full[d]);
    if (!c.require(0 <= start && start < end && end <= D, "slice bounds [" + std::to_string(start) + ", " +
                                                              std::to_string(end) + ") are outside dim of size " +
                                                              std::to_string(D))) return;
    for (std::size_t i = 0; i < full.size(); ++i)
        if (static_cast<std::int64_t>(i) != d) c.eq(part[i], full[i], dimName(partName, i));
    c.ratio(part[d], full[d], end - start, D, dimName(partName, static_cast<std::size_t>(d)));
    c.divides(full[d], start, D);
}

template <class C>
void shapeSlice(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    sliceRule(c, in[0], out[0], a, "output");
}
template <class C>
void shapeSliceBackward(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    sliceRule(c, out[0], in[0], a, "input");
}

struct SliceOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), x.shape.size()));
        auto start = ctx.scale(attrInt(ctx.attrs, "start"), ctx.origInputs[0][d], x.shape[d]);
        auto st = stridesOf(x.shape);
        moveInto<typename A::S>(in, out[0], [&](const std::vector<std::int64_t>& idx) {
            auto off = offsetOf(idx, st) + start * st[d];
            return std::pair<std::size_t, std::int64_t>{0, off};
        });
    }
};

/// inputs (dy) -> dx of the full shape: dy placed at [start, end) along dim, zeros elsewhere.
struct SliceBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto& o = out[0];
        initOut(alg, o);
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), o.shape.size()));
        auto start = ctx.scale(attrInt(ctx.attrs, "start"), ctx.origOutputs[0][d], o.shape[d]);
        auto len = in[0]->shape[d];
        auto st = stridesOf(in[0]->shape);
        forEachIndex(o.shape, [&](const std::vector<std::int64_t>& idx, std::int64_t flat) {
            if (idx[d] < start || idx[d] >= start + len) {
                o.v[flat] = alg.zero();
                return;
            }
            auto j = idx;
            j[d] -= start;
            o.v[flat] = in[0]->v[offsetOf(j, st)];
        });
    }
};

template <class C>
void shapeConcat(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto d = normDim(attrInt(a, "dim", 0), in[0].size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    if (!c.require(out[0].size() == in[0].size(), "output must have the rank of the inputs")) return;
    auto total = in[0][d];
    for (std::size_t k = 0; k < in.size(); ++k) {
        if (!c.require(in[k].size() == in[0].size(), "input " + std::to_string(k) + " has a different rank")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i)
            if (static_cast<std::int64_t>(i) != d) c.eq(in[k][i], in[0][i], dimName(("input " + std::to_string(k)).c_str(), i));
        if (k) total = c.add(total, in[k][d]);
    }
    for (std::size_t i = 0; i < in[0].size(); ++i)
        c.eq(out[0][i], static_cast<std::int64_t>(i) == d ? total : in[0][i], dimName("output", i));
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

template <class C>
void shapeSplit(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto d = normDim(attrInt(a, "dim", 0), in[0].size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    auto sizes = attrInts(a, "sizes");
    if (!c.require(sizes.size() == out.size(), "attribute sizes must have one entry per output")) return;
    std::int64_t total = 0;
    for (auto s : sizes) total += s;
    if (!c.require(total == c.orig(in[0][d]), "split sizes add up to " + std::to_string(total) + ", dim has " +
                                                  std::to_string(c.orig(in[0][d])))) return;
    std::int64_t start = 0;
    for (std::size_t k = 0; k < out.size(); ++k) {
        if (!c.require(out[k].size() == in[0].size(), "output " + std::to_string(k) + " has a different rank")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i)
            if (static_cast<std::int64_t>(i) != d) c.eq(out[k][i], in[0][i], dimName(("output " + std::to_string(k)).c_str(), i));
        c.ratio(out[k][d], in[0][d], sizes[k], total, dimName(("output " + std::to_string(k)).c_str(), static_cast<std::size_t>(d)));
        c.divides(in[0][d], start, total);
        start += sizes[k];
    }
}

struct SplitOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), in[0]->shape.size()));
        auto st = stridesOf(in[0]->shape);
        std::int64_t start = 0;
        for (auto& o : out) {
            moveInto<typename A::S>(in, o, [&](const std::vector<std::int64_t>& idx) {
                return std::pair<std::size_t, std::int64_t>{0, offsetOf(idx, st) + start * st[d]};
            });
            start += o.shape[d];
        }
    }
};

template <class C>
void shapeChunk(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto d = normDim(attrInt(a, "dim", 0), in[0].size());
    auto parts = attrInt(a, "parts", 1), index = attrInt(a, "index", 0);
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    if (!c.require(parts >= 1 && index >= 0 && index < parts, "attribute index must be in [0, parts)")) return;
    if (!c.require(c.orig(in[0][d]) % parts == 0, "dim " + std::to_string(d) + " of size " +
                                                      std::to_string(c.orig(in[0][d])) + " does not divide into " +
                                                      std::to_string(parts) + " parts")) return;
    if (!c.require(out[0].size() == in[0].size(), "output must have the rank of the input")) return;
    for (std::size_t i = 0; i < in[0].size(); ++i)
        if (static_cast<std::int64_t>(i) != d) c.eq(out[0][i], in[0][i], dimName("output", i));
    c.ratio(out[0][d], in[0][d], 1, parts, dimName("output", static_cast<std::size_t>(d)));
}

struct ChunkOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), in[0]->shape.size()));
        auto start = attrInt(ctx.attrs, "index") * out[0].shape[d];
        auto st = stridesOf(in[0]->shape);
        moveInto<typename A::S>(in, out[0], [&](const std::vector<std::int64_t>& idx) {
            return std::pair<std::size_t, std::int64_t>{0, offsetOf(idx, st) + start * st[d]};
        });
    }
};

/// expand: input dims of size 1 stretch to the output; leading output dims are new.
/// sum_to: the reverse (reduce a gradient to the shape of a broadcast operand).
template <class C>
void broadcastTo(C& c, const Dims<C>& small, const Dims<C>& big, const char* smallName) {
    if (!c.require(small.size() <= big.size(), std::string(smallName) + " has more dims than the broadcast shape")) return;
    std::size_t shift = big.size() - small.size();
    for (std::size_t i = 0; i < small.size(); ++i) {
        if (c.orig(small[i]) == 1 && c.orig(big[i + shift]) != 1) c.eq(small[i], c.cst(1), dimName(smallName, i));
        else c.eq(small[i], big[i + shift], dimName(smallName, i));
    }
}
template <class C>
void shapeExpand(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    broadcastTo(c, in[0], out[0], "input");
}
template <class C>
void shapeSumTo(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    broadcastTo(c, out[0], in[0], "output");
}

struct ExpandOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        auto st = stridesOf(in[0]->shape);
        moveInto<typename A::S>(in, out[0], [&](const std::vector<std::int64_t>& idx) {
            return std::pair<std::size_t, std::int64_t>{0, bcastOffset(idx, in[0]->shape, st)};
        });
    }
};

struct SumToOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        auto& o = out[0];
        auto st = stridesOf(o.shape);
        std::vector<std::vector<typename A::S>> parts(static_cast<std::size_t>(numel(o.shape)));
        forEachIndex(in[0]->shape, [&](const std::vector<std::int64_t>& idx, std::int64_t flat) {
            parts[bcastOffset(idx, o.shape, st)].push_back(in[0]->v[flat]);
        });
        o.v.clear();
        for (auto& p : parts) o.v.push_back(alg.sum(p));
    }
};

// ===== embedding, loss, dropout ==============================================================

template <class C>
void shapeEmbedding(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& ids = in[0];
    const auto& w = in[1];
    if (!c.require(w.size() == 2, "weight must be [vocab, hidden]")) return;
    if (!c.require(out[0].size() == ids.size() + 1, "output must be [..ids.., hidden]")) return;
    c.min2(w[0]);
    for (std::size_t i = 0; i < ids.size(); ++i) c.eq(out[0][i], ids[i], dimName("output", i));
    c.eq(out[0].back(), w[1], "output hidden");
}
template <class C>
void shapeEmbeddingBackward(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& ids = in[0];
    const auto& dy = in[1];
    if (!c.require(out[0].size() == 2, "output must be [vocab, hidden]")) return;
    if (!c.require(dy.size() == ids.size() + 1, "input 1 must be [..ids.., hidden]")) return;
    c.min2(out[0][0]);
    for (std::size_t i = 0; i < ids.size(); ++i) c.eq(dy[i], ids[i], dimName("input 1", i));
    c.eq(dy.back(), out[0][1], "hidden");
}

/// A vocabulary part (vocab-parallel embedding and cross-entropy): the op holds classes
/// [index * n, (index + 1) * n) of parts * n, n being its own class count.
///
/// Ids and labels are values like any other (symbolic in a proof, numbers in replay): the op
/// compares each with the class numbers it holds, so a check covers every value of the index
/// data, not one pattern. An id that no class of the whole vocabulary matches (out of range, or
/// not an integer) selects nothing: its embedding row, label logit and one-hot row are zero, in
/// every part alike, so the logical op and its vocabulary-parallel form agree on it as on any id.
struct VocabPart {
    std::int64_t parts = 1, index = 0;
    explicit VocabPart(const json& a) : parts(attrInt(a, "parts", 1)), index(attrInt(a, "index", 0)) {}
    /// [id == class r of this part (of n classes)]: 1 or 0.
    template <class A>
    typename A::S hit(const A& alg, const typename A::S& id, std::int64_t r, std::int64_t n) const {
        return alg.hit(id, index * n + r);
    }
    /// sum_r [id == class r] * value(r): the value of the class `id` names, 0 if it is not here.
    template <class A, class F>
    typename A::S select(const A& alg, const typename A::S& id, std::int64_t n, F&& value) const {
        std::vector<typename A::S> terms;
        terms.reserve(static_cast<std::size_t>(n));
        for (std::int64_t r = 0; r < n; ++r) terms.push_back(alg.mul(hit(alg, id, r, n), value(r)));
        return alg.sum(terms);
    }
};

std::string checkVocabPart(const json& a, std::size_t, std::size_t) {
    if (a.contains("parts") != a.contains("index")) return "attributes parts and index go together";
    VocabPart p(a);
    if (p.parts < 1 || p.index < 0 || p.index >= p.parts) return "attribute index must be in [0, parts)";
    return {};
}

struct EmbeddingOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& ids = *in[0];
        const auto& w = *in[1];
        auto& o = out[0];
        std::int64_t V = w.shape[0], H = w.shape[1];
        const VocabPart part(ctx.attrs);
        o.v.clear();
        for (const auto& id : ids.v)
            for (std::int64_t h = 0; h < H; ++h)
                o.v.push_back(part.select(alg, id, V, [&](std::int64_t r) { return w.v[static_cast<std::size_t>(r * H + h)]; }));
    }
};

struct EmbeddingBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& ids = *in[0];
        const auto& dy = *in[1];
        auto& o = out[0];
        std::int64_t V = o.shape[0], H = o.shape[1];
        const VocabPart part(ctx.attrs);
        std::vector<std::vector<typename A::S>> parts(static_cast<std::size_t>(V * H));
        for (std::size_t i = 0; i < ids.v.size(); ++i)
            for (std::int64_t r = 0; r < V; ++r) {
                auto hit = part.hit(alg, ids.v[i], r, V);
                for (std::int64_t h = 0; h < H; ++h)
                    parts[static_cast<std::size_t>(r * H + h)].push_back(alg.mul(hit, dy.v[i * static_cast<std::size_t>(H) + static_cast<std::size_t>(h)]));
            }
        o.v.clear();
        for (auto& p : parts) o.v.push_back(alg.sum(p));
    }
};

template <class C>
void shapeCrossEntropy(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& logits = in[0];
    const auto& labels = in[1];
    if (!c.require(logits.size() == labels.size() + 1, "logits must be [..labels.., classes]")) return;
    for (std::size_t i = 0; i < labels.size(); ++i) {
        c.eq(labels[i], logits[i], dimName("labels", i));
        c.min2(logits[i]);
    }
    c.min2(logits.back());
    if (out.size() == 1 && in.size() == 2) {
        c.require(out[0].empty(), "the loss is a scalar (shape [])");
        return;
    }
    // backward: inputs (logits, labels, dloss) -> dlogits
    if (!c.require(in[2].empty(), "input 2 (dloss) must be a scalar")) return;
    if (!c.require(out[0].size() == logits.size(), "output must have the shape of the logits")) return;
    for (std::size_t i = 0; i < logits.size(); ++i) c.eq(out[0][i], logits[i], dimName("output", i));
}

/// Mean cross-entropy: (1/N) sum_i (log sum_j exp(l_ij) - l_{i,y_i}), N the full token count.
struct CrossEntropyOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& l = *in[0];
        const auto& y = *in[1];
        std::int64_t C = l.shape.back(), N = numel(l.shape) / C;
        const VocabPart all(json::object());
        std::vector<typename A::S> terms;
        for (std::int64_t i = 0; i < N; ++i) {
            std::vector<typename A::S> e;
            for (std::int64_t j = 0; j < C; ++j) e.push_back(alg.exp(l.v[static_cast<std::size_t>(i * C + j)]));
            auto picked = all.select(alg, y.v[static_cast<std::size_t>(i)], C, [&](std::int64_t j) { return l.v[static_cast<std::size_t>(i * C + j)]; });
            terms.push_back(alg.sub(alg.log(alg.sum(e)), picked));
        }
        out[0].v = {alg.mul(alg.sum(terms), alg.num(Rational(1, fullRows(ctx.origInputs, 0, l.shape))))};
    }
};

/// dlogits_ij = dloss / N * (softmax_ij - [j == y_i]), N the full token count.
struct CrossEntropyBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& l = *in[0];
        const auto& y = *in[1];
        const auto& g = in[2]->v[0];
        auto& o = out[0];
        initOut(alg, o);
        std::int64_t C = l.shape.back(), N = numel(l.shape) / C;
        const VocabPart all(json::object());
        auto scale = alg.mul(g, alg.num(Rational(1, fullRows(ctx.origInputs, 0, l.shape))));
        for (std::int64_t i = 0; i < N; ++i) {
            std::vector<typename A::S> e;
            for (std::int64_t j = 0; j < C; ++j) e.push_back(alg.exp(l.v[static_cast<std::size_t>(i * C + j)]));
            auto z = alg.sum(e);
            for (std::int64_t j = 0; j < C; ++j) {
                auto p = alg.div(e[static_cast<std::size_t>(j)], z);
                auto hit = all.hit(alg, y.v[static_cast<std::size_t>(i)], j, C);
                o.v[static_cast<std::size_t>(i * C + j)] = alg.mul(scale, alg.sub(p, hit));
            }
        }
    }
};

template <class C>
void shapeTargetLogit(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& logits = in[0];
    const auto& labels = in[1];
    if (!c.require(logits.size() == labels.size() + 1, "logits must be [..labels.., classes]")) return;
    if (!c.require(out[0].size() == labels.size(), "output must have the shape of the labels")) return;
    for (std::size_t i = 0; i < labels.size(); ++i) {
        c.eq(labels[i], logits[i], dimName("labels", i));
        c.eq(out[0][i], labels[i], dimName("output", i));
    }
    c.min2(logits.back());
}

/// (logits, labels) -> the logit of each label, or 0 where another vocabulary part holds it.
struct TargetLogitOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& l = *in[0];
        const auto& y = *in[1];
        const VocabPart part(ctx.attrs);
        std::int64_t C = l.shape.back();
        out[0].v.clear();
        for (std::size_t i = 0; i < y.v.size(); ++i)
            out[0].v.push_back(part.select(alg, y.v[i], C, [&](std::int64_t r) { return l.v[i * static_cast<std::size_t>(C) + static_cast<std::size_t>(r)]; }));
    }
};

template <class C>
void shapeOneHot(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& labels = in[0];
    if (!c.require(out[0].size() == labels.size() + 1, "output must be [..labels.., classes]")) return;
    for (std::size_t i = 0; i < labels.size(); ++i) c.eq(out[0][i], labels[i], dimName("output", i));
    c.min2(out[0].back());
}

/// labels -> 1 at each label's class, 0 elsewhere (within this vocabulary part).
struct OneHotOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& y = *in[0];
        const VocabPart part(ctx.attrs);
        std::int64_t C = out[0].shape.back();
        out[0].v.clear();
        for (const auto& id : y.v)
            for (std::int64_t j = 0; j < C; ++j) out[0].v.push_back(part.hit(alg, id, j, C));
    }
};

struct DropoutOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto& o = out[0];
        initOut(alg, o);
        auto keep = Rational(1) - attrRat(ctx.attrs, "p");
        auto inv = alg.num(Rational(1) / keep);
        for (std::size_t i = 0; i < o.v.size(); ++i) o.v[i] = alg.mul(alg.mul(in[0]->v[i], in[1]->v[i]), inv);
    }
};

// ===== optimizers ============================================================================

struct SgdOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto& o = out[0];
        initOut(alg, o);
        auto lr = alg.num(attrRat(ctx.attrs, "lr"));
        auto wd = attrRat(ctx.attrs, "weight_decay");
        for (std::size_t i = 0; i < o.v.size(); ++i) {
            auto g = in[1]->v[i];
            if (!wd.isZero()) g = alg.add(g, alg.mul(alg.num(wd), in[0]->v[i]));
            o.v[i] = alg.sub(in[0]->v[i], alg.mul(lr, g));
        }
    }
};

/// PyTorch AdamW: w <- w (1 - lr wd); m <- b1 m + (1-b1) g; v <- b2 v + (1-b2) g^2;
/// w <- w - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
struct AdamWOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        for (auto& o : out) initOut(alg, o);
        const auto& a = ctx.attrs;
        auto b1 = attrRat(a, "beta1", Rational(9, 10)), b2 = attrRat(a, "beta2", Rational(999, 1000));
        auto lr = attrRat(a, "lr"), eps = attrRat(a, "eps", Rational(1, 100000000)), wd = attrRat(a, "weight_decay");
        auto t = attrInt(a, "step", 1);
        auto bc1 = alg.sub(alg.one(), power(alg, alg.num(b1), Rational(t)));
        auto bc2 = alg.sub(alg.one(), power(alg, alg.num(b2), Rational(t)));
        for (std::size_t i = 0; i < out[0].v.size(); ++i) {
            const auto& w = in[0]->v[i];
            const auto& g = in[1]->v[i];
            auto m = alg.add(alg.mul(alg.num(b1), in[2]->v[i]), alg.mul(alg.num(Rational(1) - b1), g));
            auto v = alg.add(alg.mul(alg.num(b2), in[3]->v[i]), alg.mul(alg.num(Rational(1) - b2), alg.mul(g, g)));
            auto decayed = alg.mul(w, alg.num(Rational(1) - lr * wd));
            auto step = alg.div(alg.div(m, bc1), alg.add(alg.sqrt(alg.div(v, bc2)), alg.num(eps)));
            out[0].v[i] = alg.sub(decayed, alg.mul(alg.num(lr), step));
            out[1].v[i] = m;
            out[2].v[i] = v;
        }
    }
};

// ===== collectives ===========================================================================

int groupN(int n) { return n; }
int one(int) { return 1; }

template <class C>
void shapeAllReduce(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    shapeSame(c, in, out, a);
}

template <class C>
void shapeAllGather(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto d = normDim(attrInt(a, "dim", 0), in[0].size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    auto n = static_cast<std::int64_t>(in.size());
    for (std::size_t k = 0; k < in.size(); ++k) {
        if (!c.require(in[k].size() == in[0].size() && out[k].size() == in[0].size(), "members differ in rank")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i) {
            c.eq(in[k][i], in[0][i], dimName(("input " + std::to_string(k)).c_str(), i));
            if (static_cast<std::int64_t>(i) == d) c.ratio(in[0][i], out[k][i], 1, n, dimName(("output " + std::to_string(k)).c_str(), i));
            else c.eq(out[k][i], in[0][i], dimName(("output " + std::to_string(k)).c_str(), i));
        }
    }
}

template <class C>
void shapeReduceScatter(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    shapeAllGather(c, out, in, a);
}

template <class C>
void shapeAllToAll(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto r = in[0].size();
    auto sd = normDim(attrInt(a, "split_dim", 0), r), cd = normDim(attrInt(a, "concat_dim", 0), r);
    if (!c.require(sd >= 0 && cd >= 0 && static_cast<std::size_t>(sd) < r && static_cast<std::size_t>(cd) < r,
                   "attributes split_dim/concat_dim are out of range")) return;
    auto n = static_cast<std::int64_t>(in.size());
    if (!c.require(c.orig(in[0][sd]) % n == 0, "split dim does not divide by the group size")) return;
    for (std::size_t k = 0; k < in.size(); ++k) {
        if (!c.require(in[k].size() == r && out[k].size() == r, "members differ in rank")) return;
        for (std::size_t i = 0; i < r; ++i) {
            auto what = dimName(("output " + std::to_string(k)).c_str(), i);
            c.eq(in[k][i], in[0][i], dimName(("input " + std::to_string(k)).c_str(), i));
            if (sd == cd || (static_cast<std::int64_t>(i) != sd && static_cast<std::int64_t>(i) != cd)) c.eq(out[k][i], in[0][i], what);
            else if (static_cast<std::int64_t>(i) == sd) c.ratio(out[k][i], in[0][i], 1, n, what);
            else c.ratio(in[0][i], out[k][i], 1, n, what);
        }
    }
}

template <class C>
void shapeBroadcastOp(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    for (std::size_t k = 0; k < out.size(); ++k) {
        if (!c.require(out[k].size() == in[0].size(), "output " + std::to_string(k) + " has a different rank")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i) c.eq(out[k][i], in[0][i], dimName(("output " + std::to_string(k)).c_str(), i));
    }
}

struct AllReduceOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto reduce = ctx.attrs.value("reduce", std::string("sum"));
        const bool mean = reduce == "mean";
        auto n = static_cast<std::int64_t>(in.size());
        for (auto& o : out) initOut(alg, o);
        for (std::size_t i = 0; i < out[0].v.size(); ++i) {
            if (reduce == "max") {
                auto m = in[0]->v[i];
                for (std::size_t k = 1; k < in.size(); ++k) m = alg.ite(alg.ge(m, in[k]->v[i]), m, in[k]->v[i]);
                for (auto& o : out) o.v[i] = m;
                continue;
            }
            std::vector<typename A::S> terms;
            for (auto* x : in) terms.push_back(x->v[i]);
            auto s = alg.sum(terms);
            if (mean) s = alg.mul(s, alg.num(Rational(1, n)));
            for (auto& o : out) o.v[i] = s;
        }
    }
};

struct AllGatherOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        for (auto& o : out) ConcatOp::eval(alg, in, std::span<Value<typename A::S>>(&o, 1), ctx);
    }
};

struct ReduceScatterOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        Value<typename A::S> total;
        total.shape = in[0]->shape;
        AllReduceOp::eval(alg, in, std::span<Value<typename A::S>>(&total, 1), ctx);
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), total.shape.size()));
        auto st = stridesOf(total.shape);
        const Value<typename A::S>* src[] = {&total};
        for (std::size_t k = 0; k < out.size(); ++k) {
            auto start = static_cast<std::int64_t>(k) * out[k].shape[d];
            moveInto<typename A::S>(std::span<const Value<typename A::S>* const>(src, 1), out[k],
                                    [&](const std::vector<std::int64_t>& idx) {
                                        return std::pair<std::size_t, std::int64_t>{0, offsetOf(idx, st) + start * st[d]};
                                    });
        }
    }
};

/// Member i's output = concat over j (along concat_dim) of chunk i of member j's input (split_dim).
struct AllToAllOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto r = in[0]->shape.size();
        auto sd = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "split_dim", 0), r));
        auto cd = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "concat_dim", 0), r));
        auto n = static_cast<std::int64_t>(in.size());
        auto chunk = in[0]->shape[sd] / n;
        auto st = stridesOf(in[0]->shape);
        for (std::size_t i = 0; i < out.size(); ++i) {
            moveInto<typename A::S>(in, out[i], [&](const std::vector<std::int64_t>& idx) {
                auto j = idx;
                std::size_t src = 0;
                if (sd == cd) {
                    src = static_cast<std::size_t>(idx[cd] / chunk);
                    j[sd] = static_cast<std::int64_t>(i) * chunk + idx[cd] % chunk;
                } else {
                    auto per = in[0]->shape[cd];
                    src = static_cast<std::size_t>(idx[cd] / per);
                    j[cd] = idx[cd] % per;
                    j[sd] = static_cast<std::int64_t>(i) * chunk + idx[sd];
                }
                return std::pair<std::size_t, std::int64_t>{src, offsetOf(j, st)};
            });
        }
    }
};

struct CopyToAllOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        for (auto& o : out) {
            o.isInt = in[0]->isInt;
            o.v = in[0]->v;
        }
    }
};

// ===== backward rules ========================================================================

using H = GradBuilder::Handle;

json dimAttr(const json& a) {
    json j = json::object();
    for (const char* k : {"dims", "keepdim", "dim"})
        if (a.contains(k)) j[k] = a[k];
    return j;
}

H sumToShape(GradBuilder& b, H g, const Shape& target) {
    if (b.shapeOf(g) == target) return g;
    return b.emitOp1("sum_to", {g}, json::object(), target);
}

std::vector<H> vjpAdd(GradBuilder& b, const VjpArgs& a) {
    auto g = a.outGrads[0];
    return {sumToShape(b, g, b.shapeOf(a.inputs[0])), sumToShape(b, g, b.shapeOf(a.inputs[1]))};
}
std::vector<H> vjpSub(GradBuilder& b, const VjpArgs& a) {
    auto g = a.outGrads[0];
    auto ng = b.emitOp1("neg", {g}, json::object(), b.shapeOf(g));
    return {sumToShape(b, g, b.shapeOf(a.inputs[0])), sumToShape(b, ng, b.shapeOf(a.inputs[1]))};
}
std::vector<H> vjpMul(GradBuilder& b, const VjpArgs& a) {
    auto g = a.outGrads[0];
    auto os = b.shapeOf(g);
    auto ga = b.emitOp1("mul", {g, a.inputs[1]}, json::object(), os);
    auto gb = b.emitOp1("mul", {g, a.inputs[0]}, json::object(), os);
    return {sumToShape(b, ga, b.shapeOf(a.inputs[0])), sumToShape(b, gb, b.shapeOf(a.inputs[1]))};
}
std::vector<H> vjpDiv(GradBuilder& b, const VjpArgs& a) {
    auto g = a.outGrads[0];
    auto os = b.shapeOf(g);
    auto ga = b.emitOp1("div", {g, a.inputs[1]}, json::object(), os);      // g / y
    auto t = b.emitOp1("mul", {ga, a.outputs[0]}, json::object(), os);     // g x / y^2 = (g/y) * (x/y)
    auto gb = b.emitOp1("neg", {t}, json::object(), os);
    return {sumToShape(b, ga, b.shapeOf(a.inputs[0])), sumToShape(b, gb, b.shapeOf(a.inputs[1]))};
}
std::vector<H> vjpNeg(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("neg", {a.outGrads[0]}, json::object(), b.shapeOf(a.outGrads[0]))};
}
std::vector<H> vjpPassThrough(GradBuilder&, const VjpArgs& a) { return {a.outGrads[0]}; }
std::vector<H> vjpMulScalar(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("mul_scalar", {a.outGrads[0]}, json{{"value", a.attrs.at("value")}}, b.shapeOf(a.outGrads[0]))};
}
std::vector<H> vjpDivSqrt(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("div_sqrt", {a.outGrads[0]}, json{{"n", a.attrs.at("n")}}, b.shapeOf(a.outGrads[0]))};
}
std::vector<H> vjpExp(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("mul", {a.outGrads[0], a.outputs[0]}, json::object(), b.shapeOf(a.outGrads[0]))};
}
std::vector<H> vjpLog(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("div", {a.outGrads[0], a.inputs[0]}, json::object(), b.shapeOf(a.outGrads[0]))};
}
std::vector<H> vjpSqrt(GradBuilder& b, const VjpArgs& a) {
    auto s = b.shapeOf(a.outGrads[0]);
    auto t = b.emitOp1("div", {a.outGrads[0], a.outputs[0]}, json::object(), s);
    return {b.emitOp1("mul_scalar", {t}, json{{"value", "1/2"}}, s)};
}
std::vector<H> vjpRsqrt(GradBuilder& b, const VjpArgs& a) {
    // d/dx x^(-1/2) = -1/2 y^3
    auto s = b.shapeOf(a.outGrads[0]);
    auto y2 = b.emitOp1("mul", {a.outputs[0], a.outputs[0]}, json::object(), s);
    auto y3 = b.emitOp1("mul", {y2, a.outputs[0]}, json::object(), s);
    auto t = b.emitOp1("mul", {a.outGrads[0], y3}, json::object(), s);
    return {b.emitOp1("mul_scalar", {t}, json{{"value", "-1/2"}}, s)};
}
std::vector<H> vjpPow(GradBuilder& b, const VjpArgs& a) {
    auto s = b.shapeOf(a.outGrads[0]);
    auto e = attrRat(a.attrs, "exponent");
    auto p = b.emitOp1("pow", {a.inputs[0]}, json{{"exponent", (e - Rational(1)).toString()}}, s);
    auto t = b.emitOp1("mul", {a.outGrads[0], p}, json::object(), s);
    return {b.emitOp1("mul_scalar", {t}, json{{"value", e.toString()}}, s)};
}
template <const char* Name>
std::vector<H> vjpUnaryBackward(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1(Name, {a.inputs[0], a.outGrads[0]}, json::object(), b.shapeOf(a.inputs[0]))};
}
constexpr char kReluBw[] = "relu_backward";
constexpr char kSigmoidBw[] = "sigmoid_backward";
constexpr char kTanhBw[] = "tanh_backward";
constexpr char kSiluBw[] = "silu_backward";
constexpr char kGeluBw[] = "gelu_backward";
constexpr char kErfBw[] = "erf_backward";

std::vector<H> vjpLinear(GradBuilder& b, const VjpArgs& a) {
    auto g = a.outGrads[0];
    const auto& xs = b.shapeOf(a.inputs[0]);
    const auto& ws = b.shapeOf(a.inputs[1]);
    auto dx = b.emitOp1("matmul", {g, a.inputs[1]}, json::object(), xs);
    H g2 = g, x2 = a.inputs[0];
    if (xs.size() != 2) {
        std::int64_t rows = numel(xs) / xs.back();
        g2 = b.emitOp1("reshape", {g}, json::object(), Shape{rows, ws[0]});
        x2 = b.emitOp1("reshape", {a.inputs[0]}, json::object(), Shape{rows, ws[1]});
    }
    auto dw = b.emitOp1("matmul", {g2, x2}, json{{"transpose_a", true}}, ws);
    std::vector<H> r{dx, dw};
    if (a.inputs.size() == 3) r.push_back(sumToShape(b, g, b.shapeOf(a.inputs[2])));
    return r;
}

std::vector<H> vjpMatmul(GradBuilder& b, const VjpArgs& a) {
    auto g = a.outGrads[0];
    bool ta = attrBool(a.attrs, "transpose_a"), tb = attrBool(a.attrs, "transpose_b");
    Shape as = b.shapeOf(a.inputs[0]), bs = b.shapeOf(a.inputs[1]);
    H da = ta ? b.emitOp1("matmul", {a.inputs[1], g}, json{{"transpose_a", tb}, {"transpose_b", true}}, as)
              : b.emitOp1("matmul", {g, a.inputs[1]}, json{{"transpose_b", !tb}}, as);
    H aa = a.inputs[0], gg = g;
    if (bs.size() == 2 && as.size() > 2) {
        // b is shared across the batch: flatten the batch into rows before contracting.
        Shape gs = b.shapeOf(g);
        std::int64_t rowsA = numel(as) / as.back(), rowsG = numel(gs) / gs.back();
        aa = b.emitOp1("reshape", {aa}, json::object(), Shape{rowsA, as.back()});
        gg = b.emitOp1("reshape", {gg}, json::object(), Shape{rowsG, gs.back()});
    }
    H db = tb ? b.emitOp1("matmul", {gg, aa}, json{{"transpose_a", true}, {"transpose_b", ta}}, bs)
              : b.emitOp1("matmul", {aa, gg}, json{{"transpose_a", !ta}}, bs);
    return {da, db};
}

std::vector<H> vjpSum(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("sum_backward", {a.outGrads[0]}, dimAttr(a.attrs), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpMean(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("mean_backward", {a.outGrads[0]}, dimAttr(a.attrs), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpMax(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("max_backward", {a.inputs[0], a.outGrads[0]}, dimAttr(a.attrs), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpSoftmax(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("softmax_backward", {a.outputs[0], a.outGrads[0]}, dimAttr(a.attrs), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpRmsNorm(GradBuilder& b, const VjpArgs& a) {
    return b.emitOp("rmsnorm_backward", {a.inputs[0], a.inputs[1], a.outGrads[0]}, json{{"eps", a.attrs.at("eps")}},
                  {b.shapeOf(a.inputs[0]), b.shapeOf(a.inputs[1])});
}
std::vector<H> vjpLayerNorm(GradBuilder& b, const VjpArgs& a) {
    return b.emitOp("layernorm_backward", {a.inputs[0], a.inputs[1], a.outGrads[0]}, json{{"eps", a.attrs.at("eps")}},
                  {b.shapeOf(a.inputs[0]), b.shapeOf(a.inputs[1]), b.shapeOf(a.inputs[2])});
}
std::vector<H> vjpReshape(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("reshape", {a.outGrads[0]}, json::object(), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpPermute(GradBuilder& b, const VjpArgs& a) {
    auto p = permOf(a.attrs, b.shapeOf(a.inputs[0]).size());
    std::vector<std::int64_t> inv(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<std::int64_t>(i);
    return {b.emitOp1("permute", {a.outGrads[0]}, json{{"dims", inv}}, b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpSlice(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("slice_backward", {a.outGrads[0]}, a.attrs, b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpSliceBackward(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("slice", {a.outGrads[0]}, a.attrs, b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpConcat(GradBuilder& b, const VjpArgs& a) {
    std::vector<Shape> shapes;
    std::vector<std::int64_t> sizes;
    auto d = normDim(attrInt(a.attrs, "dim", 0), b.shapeOf(a.inputs[0]).size());
    for (auto h : a.inputs) {
        shapes.push_back(b.shapeOf(h));
        sizes.push_back(shapes.back()[d]);
    }
    return b.emitOp("split", {a.outGrads[0]}, json{{"dim", d}, {"sizes", sizes}}, shapes);
}
std::vector<H> vjpSplit(GradBuilder& b, const VjpArgs& a) {
    std::vector<H> gs(a.outGrads.begin(), a.outGrads.end());
    for (std::size_t k = 0; k < gs.size(); ++k)
        if (gs[k] < 0) gs[k] = b.emitOp1("zeros_like", {a.outputs[k]}, json::object(), b.shapeOf(a.outputs[k]));
    return {b.emitOp1("concat", gs, json{{"dim", attrInt(a.attrs, "dim", 0)}}, b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpExpand(GradBuilder& b, const VjpArgs& a) { return {sumToShape(b, a.outGrads[0], b.shapeOf(a.inputs[0]))}; }
std::vector<H> vjpSumTo(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("expand", {a.outGrads[0]}, json::object(), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpChunk(GradBuilder& b, const VjpArgs& a) {
    const auto& full = b.shapeOf(a.inputs[0]);
    auto d = normDim(attrInt(a.attrs, "dim", 0), full.size());
    auto len = full[d] / attrInt(a.attrs, "parts", 1);
    auto start = attrInt(a.attrs, "index") * len;
    return {b.emitOp1("slice_backward", {a.outGrads[0]}, json{{"dim", d}, {"start", start}, {"end", start + len}}, full)};
}
std::vector<H> vjpEmbedding(GradBuilder& b, const VjpArgs& a) {
    json attrs = json::object();
    for (const char* k : {"parts", "index"})
        if (a.attrs.contains(k)) attrs[k] = a.attrs.at(k);
    return {-1, b.emitOp1("embedding_backward", {a.inputs[0], a.outGrads[0]}, attrs, b.shapeOf(a.inputs[1]))};
}
std::vector<H> vjpCrossEntropy(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("cross_entropy_backward", {a.inputs[0], a.inputs[1], a.outGrads[0]}, json::object(),
                    b.shapeOf(a.inputs[0])),
            -1};
}
/// A selection (a mask) is piecewise constant: no gradient flows through it.
std::vector<H> vjpNone(GradBuilder&, const VjpArgs& a) { return std::vector<H>(a.inputs.size(), -1); }
std::vector<H> vjpDropout(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("dropout", {a.outGrads[0], a.inputs[1]}, a.attrs, b.shapeOf(a.inputs[0])), -1};
}

template <class C>
void shapeZerosLike(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    shapeSame(c, in, out, a);
}
struct ZerosLikeOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const>, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        initOut(alg, out[0]);
        for (auto& v : out[0].v) v = alg.zero();
    }
};

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

std::string checkReduceAttr(const json& a, std::size_t, std::size_t) {
    if (!a.contains("reduce")) return {};
    const auto& v = a["reduce"];
    return v.is_string() && (v == "sum" || v == "mean") ? std::string() : "attribute reduce must be \"sum\" or \"mean\"";
}
std::string checkAllReduceAttr(const json& a, std::size_t, std::size_t) {
    if (!a.contains("reduce")) return {};
    const auto& v = a["reduce"];
    return v.is_string() && (v == "sum" || v == "mean" || v == "max") ? std::string()
                                                                      : "attribute reduce must be \"sum\", \"mean\" or \"max\"";
}

/// Attribute value types by name, shared by every operator.
std::string checkAttrTypes(const json& a, std::size_t rank) {
    static const char* ints[] = {"dim", "dim0", "dim1", "start", "end", "parts", "index", "split_dim", "concat_dim", "step", "k", "groups", "topk_groups"};
    static const char* dimKeys[] = {"dim", "dim0", "dim1", "split_dim", "concat_dim"};
    static const char* bools[] = {"keepdim", "transpose_a", "transpose_b"};
    static const char* lists[] = {"dims", "sizes"};
    auto r = static_cast<std::int64_t>(rank);
    for (const char* k : ints)
        if (a.contains(k) && !a[k].is_number_integer()) return std::string("attribute ") + k + " must be an integer";
    for (const char* k : dimKeys)
        if (a.contains(k)) {
            auto d = a[k].get<std::int64_t>();
            if (d < -r || d >= std::max<std::int64_t>(r, 1)) return std::string("attribute ") + k + " = " + std::to_string(d) + " is out of range for rank " + std::to_string(r);
        }
    for (const char* k : bools)
        if (a.contains(k) && !a[k].is_boolean()) return std::string("attribute ") + k + " must be true or false";
    for (const char* k : lists) {
        if (!a.contains(k)) continue;
        if (!a[k].is_array()) return std::string("attribute ") + k + " must be an array of integers";
        for (const auto& v : a[k])
            if (!v.is_number_integer()) return std::string("attribute ") + k + " must be an array of integers";
    }
    if (a.contains("dims")) {
        for (const auto& v : a["dims"]) {
            auto d = v.get<std::int64_t>();
            if (d < -r || d >= r) return "attribute dims has " + std::to_string(d) + ", out of range for rank " + std::to_string(r);
        }
    }
    if (a.contains("sizes"))
        for (const auto& v : a["sizes"])
            if (v.get<std::int64_t>() < 1) return "attribute sizes must be positive";
    return {};
}
std::string checkRationalAttrs(const json& a, std::size_t, std::size_t) {
    for (const char* k : {"value", "exponent", "eps", "p", "lr", "beta1", "beta2", "weight_decay", "max_norm"})
        if (a.contains(k) && !ratOf(a[k])) return std::string("attribute ") + k + " must be a number or a rational string";
    if (a.contains("p")) {
        auto p = *ratOf(a["p"]);
        if (!(Rational(0) < Rational(1) - p) || p < Rational(0)) return "attribute p must be in [0, 1)";
    }
    if (a.contains("step") && (!a["step"].is_number_integer() || a["step"].get<std::int64_t>() < 1 ||
                               a["step"].get<std::int64_t>() > 1000000))
        return "attribute step must be a positive integer";
    return {};
}

}  // namespace

OpRegistry::OpRegistry() {
    auto add = [&](OpSpec s) { specs_.push_back(std::move(s)); return &specs_.back(); };
    auto unary = [&](std::string_view name, auto f, VjpFn vjp, std::string_view summary,
                     std::vector<std::string_view> req = {}) {
        OpSpec s;
        s.name = name;
        s.cls = OpClass::Elementwise;
        s.requiredAttrs = std::move(req);
        s.summary = summary;
        s.vjp = vjp;
        TV_SHAPE(s, shapeSame);
        using F = decltype(f);
        setEval<Unary<F>>(s);
        add(std::move(s));
    };
    auto unaryBw = [&](std::string_view name, auto f, std::string_view summary) {
        OpSpec s;
        s.name = name;
        s.cls = OpClass::Elementwise;
        s.minInputs = s.maxInputs = 2;
        s.summary = summary;
        TV_SHAPE(s, shapeSame);
        setEval<UnaryBackward<decltype(f)>>(s);
        add(std::move(s));
    };
    auto binary = [&](std::string_view name, auto op, VjpFn vjp, std::string_view summary) {
        OpSpec s;
        s.name = name;
        s.cls = OpClass::Elementwise;
        s.minInputs = s.maxInputs = 2;
        s.summary = summary;
        s.vjp = vjp;
        TV_SHAPE(s, shapeBroadcast);
        setEval<decltype(op)>(s);
        add(std::move(s));
    };
    auto generic = [&](std::string_view name, OpClass cls, int minIn, int maxIn, int nOut, auto op, VjpFn vjp,
                       std::string_view summary, std::vector<std::string_view> req = {},
                       std::vector<std::string_view> opt = {}) -> OpSpec* {
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
        setEval<decltype(op)>(s);
        return add(std::move(s));
    };

    binary("add", Binary<Bin::Add>{}, vjpAdd, "a + b with broadcasting");
    binary("sub", Binary<Bin::Sub>{}, vjpSub, "a - b with broadcasting");
    binary("mul", Binary<Bin::Mul>{}, vjpMul, "a * b with broadcasting");
    binary("div", Binary<Bin::Div>{}, vjpDiv, "a / b with broadcasting");
    unary("add_scalar", FAddScalar{}, vjpPassThrough, "x + value", {"value"});
    unary("mul_scalar", FMulScalar{}, vjpMulScalar, "x * value", {"value"});
    {
        unary("div_sqrt", FDivSqrt{}, vjpDivSqrt, "x / sqrt(n), n a positive integer (the attention scale)", {"n"});
        specs_.back().checkAttrs = [](const json& a, std::size_t, std::size_t) -> std::string {
            if (!a.at("n").is_number_integer() || a.at("n").get<std::int64_t>() < 1) return "attribute n must be a positive integer";
            return {};
        };
    }
    unary("pow", FPow{}, vjpPow, "x ^ exponent (integer: exact product; otherwise uninterpreted)", {"exponent"});
    unary("neg", FNeg{}, vjpNeg, "-x");
    unary("exp", FExp{}, vjpExp, "exp(x) (uninterpreted)");
    unary("log", FLog{}, vjpLog, "log(x) (uninterpreted)");
    unary("sqrt", FSqrt{}, vjpSqrt, "sqrt(x) (uninterpreted)");
    unary("rsqrt", FRsqrt{}, vjpRsqrt, "1/sqrt(x) (uninterpreted)");
    unary("sigmoid", FSigmoid{}, vjpUnaryBackward<kSigmoidBw>, "sigmoid(x) (uninterpreted)");
    unary("tanh", FTanh{}, vjpUnaryBackward<kTanhBw>, "tanh(x) (uninterpreted)");
    unary("erf", FErf{}, vjpUnaryBackward<kErfBw>, "erf(x) (uninterpreted)");
    unary("relu", FRelu{}, vjpUnaryBackward<kReluBw>, "max(x, 0)");
    {
        unary("clip_coeff", FClipCoeff{}, nullptr, "min(1, max_norm / (x + eps)): the gradient clipping factor of a global norm x",
              {"max_norm"});
        specs_.back().optionalAttrs = {"eps"};
        specs_.back().checkAttrs = [](const json& a, std::size_t, std::size_t) -> std::string {
            if (!(Rational(0) < *ratOf(a.at("max_norm")))) return "attribute max_norm must be positive";
            if (a.contains("eps") && *ratOf(a.at("eps")) < Rational(0)) return "attribute eps must not be negative";
            return {};
        };
    }
    unary("silu", FSilu{}, vjpUnaryBackward<kSiluBw>, "x * sigmoid(x)");
    unary("gelu", FGelu{}, vjpUnaryBackward<kGeluBw>, "x/2 * (1 + erf(x/sqrt(2)))");
    unary("identity", FIdentity{}, vjpPassThrough, "x (a local copy)");
    specs_.back().keepsDtype = true;
    unaryBw("relu_backward", BRelu{}, "(x, dy) -> dy where x > 0");
    unaryBw("sigmoid_backward", BSigmoid{}, "(x, dy) -> dy * s(1-s)");
    unaryBw("tanh_backward", BTanh{}, "(x, dy) -> dy * (1 - tanh^2)");
    unaryBw("silu_backward", BSilu{}, "(x, dy) -> dy * (s + x s (1-s))");
    unaryBw("gelu_backward", BGelu{}, "(x, dy) -> dy * (Phi(x) + x phi(x))");
    unaryBw("erf_backward", BErf{}, "(x, dy) -> dy * 2/sqrt(pi) exp(-x^2)");

    { auto* s = generic("linear", OpClass::Compute, 2, 3, 1, LinearOp{}, vjpLinear, "x @ weight^T (+ bias)"); TV_SHAPE(*s, shapeLinear); }
    { auto* s = generic("matmul", OpClass::Compute, 2, 2, 1, MatmulOp{}, vjpMatmul, "batched a @ b", {}, {"transpose_a", "transpose_b"}); TV_SHAPE(*s, shapeMatmul); }
    { auto* s = generic("sum", OpClass::Reduction, 1, 1, 1, SumOp<false>{}, vjpSum, "sum over dims", {}, {"dims", "keepdim"}); TV_SHAPE(*s, shapeSum); }
    { auto* s = generic("mean", OpClass::Reduction, 1, 1, 1, SumOp<true>{}, vjpMean, "mean over dims", {}, {"dims", "keepdim"}); TV_SHAPE(*s, shapeSum); }
    { auto* s = generic("sum_backward", OpClass::Reduction, 1, 1, 1, SumBackwardOp<false>{}, nullptr, "broadcast dy back over the summed dims", {}, {"dims", "keepdim"}); TV_SHAPE(*s, shapeSumBackward); }
    { auto* s = generic("mean_backward", OpClass::Reduction, 1, 1, 1, SumBackwardOp<true>{}, nullptr, "broadcast dy/count back over the averaged dims", {}, {"dims", "keepdim"}); TV_SHAPE(*s, shapeSumBackward); }
    { auto* s = generic("max", OpClass::Reduction, 1, 1, 1, MaxOp{}, vjpMax, "max over one dim", {"dim"}, {"keepdim"}); TV_SHAPE(*s, shapeMax); }
    { auto* s = generic("max_backward", OpClass::Reduction, 2, 2, 1, MaxBackwardOp{}, nullptr, "(x, dy) -> dy at the first argmax", {"dim"}, {"keepdim"}); TV_SHAPE(*s, shapeMaxBackward); }
    { auto* s = generic("softmax", OpClass::Normalization, 1, 1, 1, SoftmaxOp{}, vjpSoftmax, "exp(x)/sum(exp(x)) over dim", {"dim"}); TV_SHAPE(*s, shapeSoftmax); }
    { auto* s = generic("softmax_backward", OpClass::Normalization, 2, 2, 1, SoftmaxBackwardOp{}, nullptr, "(y, dy) -> y (dy - sum(dy y))", {"dim"}); TV_SHAPE(*s, shapeSoftmax); }
    { auto* s = generic("topk_mask", OpClass::Normalization, 1, 1, 1, TopkMaskOp{}, vjpNone,
                        "1 for the k highest scores along the last dim (the experts), else 0; optionally only in the topk_groups best of groups equal groups (group_score max or top2)",
                        {"k"}, {"groups", "topk_groups", "group_score"});
      TV_SHAPE(*s, shapeTopkMask); }
    { auto* s = generic("rmsnorm", OpClass::Normalization, 2, 2, 1, RmsNormOp{}, vjpRmsNorm, "x rsqrt(mean(x^2)+eps) w over the last dim", {"eps"}); TV_SHAPE(*s, shapeNormForward); }
    { auto* s = generic("rmsnorm_backward", OpClass::Normalization, 3, 3, 2, RmsNormBackwardOp{}, nullptr, "(x, w, dy) -> (dx, dw)", {"eps"}); TV_SHAPE(*s, shapeNormBackward); }
    { auto* s = generic("layernorm", OpClass::Normalization, 3, 3, 1, LayerNormOp{}, vjpLayerNorm, "(x - mean) rsqrt(var+eps) w + b over the last dim", {"eps"}); TV_SHAPE(*s, shapeNormForward); }
    { auto* s = generic("layernorm_backward", OpClass::Normalization, 3, 3, 3, LayerNormBackwardOp{}, nullptr, "(x, w, dy) -> (dx, dw, db)", {"eps"}); TV_SHAPE(*s, shapeNormBackward); }
    { auto* s = generic("reshape", OpClass::Movement, 1, 1, 1, ReshapeOp{}, vjpReshape, "same elements, the output tensor's shape"); TV_SHAPE(*s, shapeReshape); }
    { auto* s = generic("view", OpClass::Movement, 1, 1, 1, ReshapeOp{}, vjpReshape, "alias of reshape"); TV_SHAPE(*s, shapeReshape); }
    { auto* s = generic("transpose", OpClass::Movement, 1, 1, 1, PermuteOp{}, vjpPermute, "swap dim0 and dim1", {"dim0", "dim1"}); TV_SHAPE(*s, shapePermute); }
    { auto* s = generic("permute", OpClass::Movement, 1, 1, 1, PermuteOp{}, vjpPermute, "reorder dims", {"dims"}); TV_SHAPE(*s, shapePermute); }
    { auto* s = generic("slice", OpClass::Movement, 1, 1, 1, SliceOp{}, vjpSlice, "x[start:end] along dim", {"dim", "start", "end"}); TV_SHAPE(*s, shapeSlice); }
    { auto* s = generic("slice_backward", OpClass::Movement, 1, 1, 1, SliceBackwardOp{}, vjpSliceBackward, "dy placed at [start:end) along dim, zeros elsewhere", {"dim", "start", "end"}); TV_SHAPE(*s, shapeSliceBackward); }
    { auto* s = generic("concat", OpClass::Movement, 1, -1, 1, ConcatOp{}, vjpConcat, "concatenate along dim", {"dim"}); TV_SHAPE(*s, shapeConcat); }
    { auto* s = generic("split", OpClass::Movement, 1, 1, -1, SplitOp{}, vjpSplit, "split along dim into sizes", {"dim", "sizes"}); TV_SHAPE(*s, shapeSplit); }
    { auto* s = generic("chunk", OpClass::Movement, 1, 1, 1, ChunkOp{}, vjpChunk, "part index of parts equal parts along dim (a local shard)", {"dim", "parts", "index"}); TV_SHAPE(*s, shapeChunk); }
    { auto* s = generic("expand", OpClass::Movement, 1, 1, 1, ExpandOp{}, vjpExpand, "broadcast to the output tensor's shape"); TV_SHAPE(*s, shapeExpand); }
    { auto* s = generic("sum_to", OpClass::Reduction, 1, 1, 1, SumToOp{}, vjpSumTo, "sum a broadcast gradient down to the output tensor's shape"); TV_SHAPE(*s, shapeSumTo); }
    { auto* s = generic("zeros_like", OpClass::Elementwise, 1, 1, 1, ZerosLikeOp{}, nullptr, "zeros of the input's shape"); TV_SHAPE(*s, shapeZerosLike); }
    { auto* s = generic("embedding", OpClass::Compute, 2, 2, 1, EmbeddingOp{}, vjpEmbedding, "(ids, weight) -> weight[ids]; with parts/index, a vocabulary part: rows of other parts are 0", {}, {"parts", "index"}); s->intInputs = {0}; s->checkAttrs = checkVocabPart; TV_SHAPE(*s, shapeEmbedding); }
    { auto* s = generic("embedding_backward", OpClass::Compute, 2, 2, 1, EmbeddingBackwardOp{}, nullptr, "(ids, dy) -> scatter-add of dy rows into [vocab, hidden] (its vocabulary part)", {}, {"parts", "index"}); s->intInputs = {0}; s->checkAttrs = checkVocabPart; TV_SHAPE(*s, shapeEmbeddingBackward); }
    { auto* s = generic("target_logit", OpClass::Loss, 2, 2, 1, TargetLogitOp{}, nullptr, "(logits, labels) -> each label's logit, 0 where another vocabulary part holds it", {}, {"parts", "index"}); s->intInputs = {1}; s->checkAttrs = checkVocabPart; TV_SHAPE(*s, shapeTargetLogit); }
    { auto* s = generic("one_hot", OpClass::Loss, 1, 1, 1, OneHotOp{}, nullptr, "labels -> 1 at each label's class (in this vocabulary part), else 0", {}, {"parts", "index"}); s->intInputs = {0}; s->checkAttrs = checkVocabPart; TV_SHAPE(*s, shapeOneHot); }
    { auto* s = generic("cross_entropy", OpClass::Loss, 2, 2, 1, CrossEntropyOp{}, vjpCrossEntropy, "(logits, labels) -> mean of log-sum-exp minus the label logit"); s->intInputs = {1}; TV_SHAPE(*s, shapeCrossEntropy); }
    { auto* s = generic("cross_entropy_backward", OpClass::Loss, 3, 3, 1, CrossEntropyBackwardOp{}, nullptr, "(logits, labels, dloss) -> dloss/N (softmax - onehot)"); s->intInputs = {1}; TV_SHAPE(*s, shapeCrossEntropy); }
    { auto* s = generic("dropout", OpClass::Elementwise, 2, 2, 1, DropoutOp{}, vjpDropout, "(x, mask) -> x mask / (1-p)", {"p"}); TV_SHAPE(*s, shapeSame); }
    { auto* s = generic("sgd", OpClass::Optimizer, 2, 2, 1, SgdOp{}, nullptr, "(w, g) -> w - lr (g + weight_decay w)", {"lr"}, {"weight_decay"}); TV_SHAPE(*s, shapeSame); }
    { auto* s = generic("adamw", OpClass::Optimizer, 4, 4, 3, AdamWOp{}, nullptr, "(w, g, m, v) -> (w', m', v'), PyTorch AdamW", {"lr"}, {"beta1", "beta2", "eps", "weight_decay", "step"}); TV_SHAPE(*s, shapeSame); }

    auto coll = [&](std::string_view name, auto op, int (*nin)(int), int (*nout)(int), std::string_view summary,
                    std::vector<std::string_view> req, std::vector<std::string_view> opt) -> OpSpec* {
        auto* s = generic(name, OpClass::Collective, 1, -1, -1, op, nullptr, summary, std::move(req), std::move(opt));
        s->collective = true;
        s->collectiveInputs = nin;
        s->collectiveOutputs = nout;
        return s;
    };
    { auto* s = coll("all_reduce", AllReduceOp{}, groupN, groupN, "every member gets the sum (or mean, or maximum) of all inputs", {}, {"reduce"}); s->checkAttrs = checkAllReduceAttr; TV_SHAPE(*s, shapeAllReduce); }
    { auto* s = coll("all_gather", AllGatherOp{}, groupN, groupN, "every member gets the inputs concatenated in group order", {"dim"}, {}); TV_SHAPE(*s, shapeAllGather); }
    { auto* s = coll("reduce_scatter", ReduceScatterOp{}, groupN, groupN, "member i gets chunk i of the sum (or mean)", {"dim"}, {"reduce"}); s->checkAttrs = checkReduceAttr; TV_SHAPE(*s, shapeReduceScatter); }
    { auto* s = coll("all_to_all", AllToAllOp{}, groupN, groupN, "member i gets chunk i of every member's input, concatenated", {"split_dim", "concat_dim"}, {}); TV_SHAPE(*s, shapeAllToAll); }
    { auto* s = coll("broadcast", CopyToAllOp{}, one, groupN, "every member gets the first group member's input", {}, {}); TV_SHAPE(*s, shapeBroadcastOp); }
    { auto* s = coll("send_recv", CopyToAllOp{}, one, one, "group [src, dst]: dst receives src's tensor", {}, {}); TV_SHAPE(*s, shapeBroadcastOp); }
}

const OpRegistry& OpRegistry::instance() {
    static const OpRegistry r;
    return r;
}

std::optional<OpKind> OpRegistry::find(std::string_view name) const {
    for (std::size_t i = 0; i < specs_.size(); ++i)
        if (specs_[i].name == name) return static_cast<OpKind>(i);
    return std::nullopt;
}

std::int64_t lookupRange(std::string_view op, const std::vector<Shape>& in, const std::vector<Shape>& out, const json& attrs) {
    const std::int64_t parts = std::max<std::int64_t>(1, attrInt(attrs, "parts", 1));
    auto last = [](const std::vector<Shape>& v, std::size_t i) -> std::int64_t {
        return i < v.size() && !v[i].empty() ? v[i].back() : 0;
    };
    auto first = [](const std::vector<Shape>& v, std::size_t i) -> std::int64_t {
        return i < v.size() && !v[i].empty() ? v[i].front() : 0;
    };
    if (op == "embedding") return first(in, 1) * parts;
    if (op == "embedding_backward") return first(out, 0) * parts;
    if (op == "target_logit") return last(in, 0) * parts;
    if (op == "one_hot") return last(out, 0) * parts;
    if (op == "cross_entropy" || op == "cross_entropy_backward") return last(in, 0);
    return 0;
}

/// "[2, 3], []": shapes as an error message lists them.
static std::string shapesText(const std::vector<Shape>& shapes) {
    std::string t;
    for (const auto& s : shapes) {
        if (!t.empty()) t += ", ";
        t += "[";
        for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
        t += "]";
    }
    return t;
}

std::string checkOp(const OpSpec& spec, const json& attrs, const std::vector<Shape>& inputs,
                    const std::vector<Shape>& outputs, const std::vector<DType>& inputTypes) {
    if (!attrs.is_object()) return "attrs must be an object";
    for (auto k : spec.requiredAttrs)
        if (!attrs.contains(std::string(k))) return "missing attribute \"" + std::string(k) + "\"";
    for (auto it = attrs.begin(); it != attrs.end(); ++it) {
        bool known = std::find(spec.requiredAttrs.begin(), spec.requiredAttrs.end(), it.key()) != spec.requiredAttrs.end() ||
                     std::find(spec.optionalAttrs.begin(), spec.optionalAttrs.end(), it.key()) != spec.optionalAttrs.end();
        if (!known) return "unknown attribute \"" + it.key() + "\" for " + std::string(spec.name);
    }
    std::size_t rank = 0;
    if (!inputs.empty()) rank = inputs[0].size();
    if (!outputs.empty()) rank = std::max(rank, outputs[0].size());
    if (auto e = checkAttrTypes(attrs, rank); !e.empty()) return e;
    if (auto e = checkRationalAttrs(attrs, inputs.size(), outputs.size()); !e.empty()) return e;
    if (spec.checkAttrs)
        if (auto e = spec.checkAttrs(attrs, inputs.size(), outputs.size()); !e.empty()) return e;
    if (spec.name == "permute" && attrs.contains("dims") && attrs["dims"].size() != (inputs.empty() ? 0 : inputs[0].size()))
        return "attribute dims must list every dim of the input once";
    if ((spec.name == "sum" || spec.name == "mean" || spec.name == "sum_backward" || spec.name == "mean_backward") &&
        attrs.contains("dims") && attrs["dims"].empty())
        return "attribute dims is empty (omit it to reduce over every dim)";
    bool sums = spec.name == "all_reduce" || spec.name == "reduce_scatter";
    for (std::size_t i = 0; i < inputTypes.size(); ++i) {
        if (spec.keepsDtype && inputTypes[i] != inputTypes[0])
            return "input " + std::to_string(i) + " is " + std::string(toString(inputTypes[i])) + " but input 0 is " + std::string(toString(inputTypes[0]));
        if (sums && inputTypes[i] == DType::Int) return std::string(spec.name) + " sums its inputs; int tensors cannot be summed";
        bool wantInt = std::find(spec.intInputs.begin(), spec.intInputs.end(), static_cast<int>(i)) != spec.intInputs.end();
        if (!spec.collective && !spec.intInputs.empty() && wantInt != (inputTypes[i] == DType::Int))
            return "input " + std::to_string(i) + " must be " + (wantInt ? "an int" : "a float") + " tensor";
        if (spec.intInputs.empty() && inputTypes[i] == DType::Int && !spec.keepsDtype)
            return "input " + std::to_string(i) + " is an int tensor; " + std::string(spec.name) + " takes float tensors";
    }
    ConcreteShapes c;
    std::vector<std::vector<std::int64_t>> in(inputs.begin(), inputs.end()), out(outputs.begin(), outputs.end());
    try {
        spec.shapeConcrete(c, in, out, attrs);
    } catch (const MissingDim&) {
        return "shape mismatch: an operand has fewer dims than " + std::string(spec.name) + " reads (inputs " + shapesText(inputs) + ", outputs " +
               shapesText(outputs) + ")";
    }
    return c.error.empty() ? std::string() : "shape mismatch: " + c.error;
}

}  // namespace tv
