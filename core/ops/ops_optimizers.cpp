// Optimizer steps: SGD and PyTorch's AdamW.
//
// Applied element-wise to a weight, its gradient and the optimizer state.
#include "ops/op_definition.hpp"

namespace tv::opdef {

namespace {

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


}  // namespace

void registerOptimizers(OpTable& t) {
    { auto* s = t.generic("sgd", OpClass::Optimizer, 2, 2, 1, SgdOp{}, nullptr, "(w, g) -> w - lr (g + weight_decay w)", {"lr"}, {"weight_decay"}); TV_SHAPE(*s, shapeSame); }
    { auto* s = t.generic("adamw", OpClass::Optimizer, 4, 4, 3, AdamWOp{}, nullptr, "(w, g, m, v) -> (w', m', v'), PyTorch AdamW", {"lr"}, {"beta1", "beta2", "eps", "weight_decay", "step"}); TV_SHAPE(*s, shapeSame); }
}

}  // namespace tv::opdef
