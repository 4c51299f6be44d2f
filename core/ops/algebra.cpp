#include "ops/algebra.hpp"

#include <stdexcept>
#include <unordered_map>

namespace tv {

SymAlgebra::SymAlgebra(z3::context& ctx)
    : c(ctx),
      fExp(z3::function("exp", ctx.real_sort(), ctx.real_sort())),
      fLog(z3::function("log", ctx.real_sort(), ctx.real_sort())),
      fSqrt(z3::function("sqrt", ctx.real_sort(), ctx.real_sort())),
      fRsqrt(z3::function("rsqrt", ctx.real_sort(), ctx.real_sort())),
      fSigmoid(z3::function("sigmoid", ctx.real_sort(), ctx.real_sort())),
      fTanh(z3::function("tanh", ctx.real_sort(), ctx.real_sort())),
      fErf(z3::function("erf", ctx.real_sort(), ctx.real_sort())),
      fPow(z3::function("pow", ctx.real_sort(), ctx.real_sort(), ctx.real_sort())),
      fInv(z3::function("inv", ctx.real_sort(), ctx.real_sort())),
      piConst(ctx.real_const("%pi")) {}

namespace {
bool isNumeral(const z3::expr& e, std::int64_t v) {
    if (!e.is_numeral()) return false;
    std::int64_t n = 0;
    if (!e.is_numeral_i64(n)) return false;
    // is_numeral_i64 fails on non-integers, so n is exact here.
    return n == v;
}
}  // namespace

z3::expr SymAlgebra::num(const Rational& r) const {
    // One rational numeral (not a division of two), so constants stay recognisable as such.
    return c.real_val((std::to_string(r.num()) + "/" + std::to_string(r.den())).c_str());
}

z3::expr SymAlgebra::add(const S& a, const S& b) const {
    if (isNumeral(a, 0)) return b;
    if (isNumeral(b, 0)) return a;
    return a + b;
}
z3::expr SymAlgebra::sub(const S& a, const S& b) const {
    if (isNumeral(b, 0)) return a;
    return a - b;
}
z3::expr SymAlgebra::mul(const S& a, const S& b) const {
    if (isNumeral(a, 0) || isNumeral(b, 0)) return zero();
    if (isNumeral(a, 1)) return b;
    if (isNumeral(b, 1)) return a;
    return a * b;
}
// x / y is x * inv(y): exact for a nonzero constant y, and otherwise linear in x whatever y is.
// Z3's own x / 0 is a separate unknown for every x, so (a + b) / y = a / y + b / y and
// (2a) / y = 2 (a / y) would fail at y = 0, and with them every partial sum or scaled
// gradient divided by a tensor (a norm, a gate's total). inv(0) is one unknown: real division by
// zero has no value to disagree with.
z3::expr SymAlgebra::div(const S& a, const S& b) const {
    if (isNumeral(b, 1)) return a;
    if (b.is_numeral() && !isNumeral(b, 0)) return mul(a, c.real_val(1) / b);
    return mul(a, fInv(b));
}
z3::expr SymAlgebra::neg(const S& a) const { return -a; }
z3::expr SymAlgebra::sum(const std::vector<S>& xs) const {
    z3::expr_vector v(c);
    for (const auto& x : xs)
        if (!isNumeral(x, 0)) v.push_back(x);
    if (v.empty()) return zero();
    if (v.size() == 1) return v[0];
    return z3::sum(v);
}

double evaluateTerm(const z3::expr& root, const std::function<double(const std::string&)>& vars) {
    std::unordered_map<unsigned, double> memo;
    std::function<double(const z3::expr&)> ev = [&](const z3::expr& e) -> double {
        if (auto it = memo.find(e.id()); it != memo.end()) return it->second;
        double r = 0;
        if (e.is_numeral()) {
            r = std::stod(e.get_decimal_string(17));
        } else if (e.is_bool() && e.is_true()) {
            r = 1;
        } else if (e.is_bool() && e.is_false()) {
            r = 0;
        } else if (e.is_app()) {
            auto d = e.decl();
            auto k = d.decl_kind();
            auto arg = [&](unsigned i) { return ev(e.arg(i)); };
            switch (k) {
                case Z3_OP_ADD: r = 0; for (unsigned i = 0; i < e.num_args(); ++i) r += arg(i); break;
                case Z3_OP_MUL: r = 1; for (unsigned i = 0; i < e.num_args(); ++i) r *= arg(i); break;
                case Z3_OP_SUB: r = arg(0); for (unsigned i = 1; i < e.num_args(); ++i) r -= arg(i); break;
                case Z3_OP_UMINUS: r = -arg(0); break;
                case Z3_OP_DIV: r = arg(0) / arg(1); break;
                case Z3_OP_POWER: r = std::pow(arg(0), arg(1)); break;
                case Z3_OP_TO_REAL: r = arg(0); break;
                case Z3_OP_ITE: r = arg(0) != 0 ? arg(1) : arg(2); break;
                case Z3_OP_GE: r = arg(0) >= arg(1); break;
                case Z3_OP_GT: r = arg(0) > arg(1); break;
                case Z3_OP_LE: r = arg(0) <= arg(1); break;
                case Z3_OP_LT: r = arg(0) < arg(1); break;
                case Z3_OP_EQ: r = arg(0) == arg(1); break;
                case Z3_OP_AND: r = 1; for (unsigned i = 0; i < e.num_args(); ++i) r = r && arg(i) != 0; break;
                case Z3_OP_OR: r = 0; for (unsigned i = 0; i < e.num_args(); ++i) r = r || arg(i) != 0; break;
                case Z3_OP_NOT: r = arg(0) == 0; break;
                case Z3_OP_UNINTERPRETED: {
                    auto name = d.name().str();
                    if (e.num_args() == 0) {
                        r = name == "%pi" ? M_PI : vars(name);
                    } else if (name == "exp") r = std::exp(arg(0));
                    else if (name == "log") r = std::log(arg(0));
                    else if (name == "sqrt") r = std::sqrt(arg(0));
                    else if (name == "rsqrt") r = 1.0 / std::sqrt(arg(0));
                    else if (name == "sigmoid") r = 1.0 / (1.0 + std::exp(-arg(0)));
                    else if (name == "tanh") r = std::tanh(arg(0));
                    else if (name == "erf") r = std::erf(arg(0));
                    else if (name == "pow") r = std::pow(arg(0), arg(1));
                    else if (name == "inv") r = 1.0 / arg(0);
                    else throw std::runtime_error("evaluateTerm: unknown function " + name);
                    break;
                }
                default:
                    throw std::runtime_error("evaluateTerm: unsupported term " + e.to_string());
            }
        } else {
            throw std::runtime_error("evaluateTerm: unsupported term " + e.to_string());
        }
        memo.emplace(e.id(), r);
        return r;
    };
    return ev(root);
}

}  // namespace tv
