// Reductions: sum, mean and max over dims, and their backwards.
//
// A mean divides by the full (unreduced) count (fullCount, op_definition.hpp).
#include "ops/op_definition.hpp"

namespace tv::opdef {

namespace {

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


// ----- backward rules -----

std::vector<H> vjpSum(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("sum_backward", {a.outGrads[0]}, dimAttr(a.attrs), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpMean(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("mean_backward", {a.outGrads[0]}, dimAttr(a.attrs), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpMax(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("max_backward", {a.inputs[0], a.outGrads[0]}, dimAttr(a.attrs), b.shapeOf(a.inputs[0]))};
}

/// sum and mean (and their backwards): a "dims" given lists at least one dim.
std::string checkDimsNotEmpty(const json& a, const std::vector<Shape>&, const std::vector<Shape>&) {
    if (a.contains("dims") && a["dims"].empty()) return "attribute dims is empty (omit it to reduce over every dim)";
    return {};
}

}  // namespace

void registerReductions(OpTable& t) {
    { auto* s = t.generic("sum", OpClass::Reduction, 1, 1, 1, SumOp<false>{}, vjpSum, "sum over dims", {}, {"dims", "keepdim"}); s->checkAttrs = checkDimsNotEmpty; TV_SHAPE(*s, shapeSum); }
    { auto* s = t.generic("mean", OpClass::Reduction, 1, 1, 1, SumOp<true>{}, vjpMean, "mean over dims", {}, {"dims", "keepdim"}); s->checkAttrs = checkDimsNotEmpty; TV_SHAPE(*s, shapeSum); }
    { auto* s = t.generic("sum_backward", OpClass::Reduction, 1, 1, 1, SumBackwardOp<false>{}, nullptr, "broadcast dy back over the summed dims", {}, {"dims", "keepdim"}); s->checkAttrs = checkDimsNotEmpty; TV_SHAPE(*s, shapeSumBackward); }
    { auto* s = t.generic("mean_backward", OpClass::Reduction, 1, 1, 1, SumBackwardOp<true>{}, nullptr, "broadcast dy/count back over the averaged dims", {}, {"dims", "keepdim"}); s->checkAttrs = checkDimsNotEmpty; TV_SHAPE(*s, shapeSumBackward); }
    { auto* s = t.generic("max", OpClass::Reduction, 1, 1, 1, MaxOp{}, vjpMax, "max over one dim", {"dim"}, {"keepdim"}); TV_SHAPE(*s, shapeMax); }
    { auto* s = t.generic("max_backward", OpClass::Reduction, 2, 2, 1, MaxBackwardOp{}, nullptr, "(x, dy) -> dy at the first argmax", {"dim"}, {"keepdim"}); TV_SHAPE(*s, shapeMaxBackward); }
}

}  // namespace tv::opdef
