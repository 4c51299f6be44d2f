// Normalisation: rmsnorm and layernorm over the last dim, and their backwards.
//
// 1/H is the full hidden size's (fullLast, op_definition.hpp), rsqrt uninterpreted.
#include "ops/op_definition.hpp"

namespace tv::opdef {

namespace {

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


// ----- backward rules -----

std::vector<H> vjpRmsNorm(GradBuilder& b, const VjpArgs& a) {
    return b.emitOp("rmsnorm_backward", {a.inputs[0], a.inputs[1], a.outGrads[0]}, json{{"eps", a.attrs.at("eps")}},
                  {b.shapeOf(a.inputs[0]), b.shapeOf(a.inputs[1])});
}
std::vector<H> vjpLayerNorm(GradBuilder& b, const VjpArgs& a) {
    return b.emitOp("layernorm_backward", {a.inputs[0], a.inputs[1], a.outGrads[0]}, json{{"eps", a.attrs.at("eps")}},
                  {b.shapeOf(a.inputs[0]), b.shapeOf(a.inputs[1]), b.shapeOf(a.inputs[2])});
}

}  // namespace

void registerNormalization(OpTable& t) {
    { auto* s = t.generic("rmsnorm", OpClass::Normalization, 2, 2, 1, RmsNormOp{}, vjpRmsNorm, "x rsqrt(mean(x^2)+eps) w over the last dim", {"eps"}); TV_SHAPE(*s, shapeNormForward); }
    { auto* s = t.generic("rmsnorm_backward", OpClass::Normalization, 3, 3, 2, RmsNormBackwardOp{}, nullptr, "(x, w, dy) -> (dx, dw)", {"eps"}); TV_SHAPE(*s, shapeNormBackward); }
    { auto* s = t.generic("layernorm", OpClass::Normalization, 3, 3, 1, LayerNormOp{}, vjpLayerNorm, "(x - mean) rsqrt(var+eps) w + b over the last dim", {"eps"}); TV_SHAPE(*s, shapeNormForward); }
    { auto* s = t.generic("layernorm_backward", OpClass::Normalization, 3, 3, 3, LayerNormBackwardOp{}, nullptr, "(x, w, dy) -> (dx, dw, db)", {"eps"}); TV_SHAPE(*s, shapeNormBackward); }
}

}  // namespace tv::opdef
