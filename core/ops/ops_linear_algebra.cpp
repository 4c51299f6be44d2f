// Linear algebra: linear (x W^T + b) and batched matmul, with their backward rules.
//
// Exact in proofs: sums of products.
#include "ops/op_definition.hpp"

namespace tv::opdef {

namespace {

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


// ----- backward rules -----

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

}  // namespace

void registerLinearAlgebra(OpTable& t) {
    { auto* s = t.generic("linear", OpClass::Compute, 2, 3, 1, LinearOp{}, vjpLinear, "x @ weight^T (+ bias)"); TV_SHAPE(*s, shapeLinear); }
    { auto* s = t.generic("matmul", OpClass::Compute, 2, 2, 1, MatmulOp{}, vjpMatmul, "batched a @ b", {}, {"transpose_a", "transpose_b"}); TV_SHAPE(*s, shapeMatmul); }
}

}  // namespace tv::opdef
