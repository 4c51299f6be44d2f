// Softmax and mixture-of-experts routing (topk_mask).
//
// Softmax is exp over a sum of exps (uninterpreted exp); routing is an uninterpreted function of
// a token's scores in proofs and the exact rule on numbers.
#include "ops/op_definition.hpp"

namespace tv::opdef {

namespace {

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


// ----- backward rules -----

std::vector<H> vjpSoftmax(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("softmax_backward", {a.outputs[0], a.outGrads[0]}, dimAttr(a.attrs), b.shapeOf(a.inputs[0]))};
}
/// A selection (a mask) is piecewise constant: no gradient flows through it.
std::vector<H> vjpNone(GradBuilder&, const VjpArgs& a) { return std::vector<H>(a.inputs.size(), -1); }

}  // namespace

void registerRouting(OpTable& t) {
    { auto* s = t.generic("softmax", OpClass::Normalization, 1, 1, 1, SoftmaxOp{}, vjpSoftmax, "exp(x)/sum(exp(x)) over dim", {"dim"}); TV_SHAPE(*s, shapeSoftmax); }
    { auto* s = t.generic("softmax_backward", OpClass::Normalization, 2, 2, 1, SoftmaxBackwardOp{}, nullptr, "(y, dy) -> y (dy - sum(dy y))", {"dim"}); TV_SHAPE(*s, shapeSoftmax); }
    { auto* s = t.generic("topk_mask", OpClass::Normalization, 1, 1, 1, TopkMaskOp{}, vjpNone,
                        "1 for the k highest scores along the last dim (the experts), else 0; optionally only in the topk_groups best of groups equal groups (group_score max or top2)",
                        {"k"}, {"groups", "topk_groups", "group_score"});
      TV_SHAPE(*s, shapeTopkMask); }
}

}  // namespace tv::opdef
