// Element-wise operators: arithmetic with broadcasting, the unary functions and their backwards.
//
// Polynomial ones are exact in proofs; exp, log, sqrt, sigmoid, tanh, erf and a fractional pow are
// uninterpreted functions there (ops/symbolic.hpp), silu and gelu are built from them.
#include "ops/op_definition.hpp"

namespace tv::opdef {

namespace {

// ===== element-wise ===========================================================================


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
TV_UNARY(FTrunc, return alg.trunc(x);)
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


// ----- backward rules -----

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

template <class F>
void unary(OpTable& t, std::string_view name, F, VjpFn vjp, std::string_view summary, std::vector<std::string_view> req = {}) {
    OpSpec s;
    s.name = name;
    s.cls = OpClass::Elementwise;
    s.requiredAttrs = std::move(req);
    s.summary = summary;
    s.vjp = vjp;
    TV_SHAPE(s, shapeSame);
    setEval<Unary<F>>(s);
    t.add(std::move(s));
}
template <class F>
void unaryBw(OpTable& t, std::string_view name, F, std::string_view summary) {
    OpSpec s;
    s.name = name;
    s.cls = OpClass::Elementwise;
    s.minInputs = s.maxInputs = 2;
    s.summary = summary;
    TV_SHAPE(s, shapeSame);
    setEval<UnaryBackward<F>>(s);
    t.add(std::move(s));
}
template <class Op>
void binary(OpTable& t, std::string_view name, Op, VjpFn vjp, std::string_view summary) {
    OpSpec s;
    s.name = name;
    s.cls = OpClass::Elementwise;
    s.minInputs = s.maxInputs = 2;
    s.summary = summary;
    s.vjp = vjp;
    TV_SHAPE(s, shapeBroadcast);
    setEval<Op>(s);
    t.add(std::move(s));
}

}  // namespace

void registerElementwise(OpTable& t) {
    binary(t, "add", Binary<Bin::Add>{}, vjpAdd, "a + b with broadcasting");
    binary(t, "sub", Binary<Bin::Sub>{}, vjpSub, "a - b with broadcasting");
    binary(t, "mul", Binary<Bin::Mul>{}, vjpMul, "a * b with broadcasting");
    binary(t, "div", Binary<Bin::Div>{}, vjpDiv, "a / b with broadcasting");
    unary(t, "add_scalar", FAddScalar{}, vjpPassThrough, "x + value", {"value"});
    unary(t, "mul_scalar", FMulScalar{}, vjpMulScalar, "x * value", {"value"});
    {
        unary(t, "div_sqrt", FDivSqrt{}, vjpDivSqrt, "x / sqrt(n), n a positive integer (the attention scale)", {"n"});
        t.back().checkAttrs = [](const json& a, const std::vector<Shape>&, const std::vector<Shape>&) -> std::string {
            if (!a.at("n").is_number_integer() || a.at("n").get<std::int64_t>() < 1) return "attribute n must be a positive integer";
            return {};
        };
    }
    unary(t, "pow", FPow{}, vjpPow, "x ^ exponent (integer: exact product; otherwise uninterpreted)", {"exponent"});
    unary(t, "neg", FNeg{}, vjpNeg, "-x");
    unary(t, "exp", FExp{}, vjpExp, "exp(x) (uninterpreted)");
    unary(t, "log", FLog{}, vjpLog, "log(x) (uninterpreted)");
    unary(t, "sqrt", FSqrt{}, vjpSqrt, "sqrt(x) (uninterpreted)");
    unary(t, "rsqrt", FRsqrt{}, vjpRsqrt, "1/sqrt(x) (uninterpreted)");
    unary(t, "sigmoid", FSigmoid{}, vjpUnaryBackward<kSigmoidBw>, "sigmoid(x) (uninterpreted)");
    unary(t, "tanh", FTanh{}, vjpUnaryBackward<kTanhBw>, "tanh(x) (uninterpreted)");
    unary(t, "erf", FErf{}, vjpUnaryBackward<kErfBw>, "erf(x) (uninterpreted)");
    unary(t, "relu", FRelu{}, vjpUnaryBackward<kReluBw>, "max(x, 0)");
    // A cast of a floating-point value to an integer type (PyTorch's .int(), .long()): the integer
    // is carried as a real number. No backward: casts to integers carry no gradient.
    unary(t, "trunc", FTrunc{}, nullptr, "x rounded toward zero (a cast to an integer type; uninterpreted)");
    {
        unary(t, "clip_coeff", FClipCoeff{}, nullptr, "min(1, max_norm / (x + eps)): the gradient clipping factor of a global norm x",
              {"max_norm"});
        t.back().optionalAttrs = {"eps"};
        t.back().checkAttrs = [](const json& a, const std::vector<Shape>&, const std::vector<Shape>&) -> std::string {
            if (!(Rational(0) < *ratOf(a.at("max_norm")))) return "attribute max_norm must be positive";
            if (a.contains("eps") && *ratOf(a.at("eps")) < Rational(0)) return "attribute eps must not be negative";
            return {};
        };
    }
    unary(t, "silu", FSilu{}, vjpUnaryBackward<kSiluBw>, "x * sigmoid(x)");
    unary(t, "gelu", FGelu{}, vjpUnaryBackward<kGeluBw>, "x/2 * (1 + erf(x/sqrt(2)))");
    unary(t, "identity", FIdentity{}, vjpPassThrough, "x (a local copy)");
    t.back().keepsDtype = true;
    unaryBw(t, "relu_backward", BRelu{}, "(x, dy) -> dy where x > 0");
    unaryBw(t, "sigmoid_backward", BSigmoid{}, "(x, dy) -> dy * s(1-s)");
    unaryBw(t, "tanh_backward", BTanh{}, "(x, dy) -> dy * (1 - tanh^2)");
    unaryBw(t, "silu_backward", BSilu{}, "(x, dy) -> dy * (s + x s (1-s))");
    unaryBw(t, "gelu_backward", BGelu{}, "(x, dy) -> dy * (Phi(x) + x phi(x))");
    unaryBw(t, "erf_backward", BErf{}, "(x, dy) -> dy * 2/sqrt(pi) exp(-x^2)");
}

}  // namespace tv::opdef
