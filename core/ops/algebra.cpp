#include "ops/algebra.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstdio>
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
    // sqrt(t) * sqrt(t) = t: the program has a value only where t >= 0, and there it is exact.
    if (z3::eq(a, b) && a.is_app() && a.num_args() == 1 && z3::eq(a.decl(), fSqrt)) return a.arg(0);
    return a * b;
}

namespace {
/// The square root of a nonnegative integer when it is a perfect square.
std::optional<std::int64_t> exactRoot(std::int64_t v) {
    if (v < 0) return std::nullopt;
    auto r = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(v))));
    for (auto c : {r - 1, r, r + 1})
        if (c >= 0 && c <= 3037000499LL && c * c == v) return c;
    return std::nullopt;
}
}  // namespace

z3::expr SymAlgebra::sqrt(const S& a) const {
    if (a.is_numeral()) {
        std::int64_t n = 0, d = 0;
        auto q = a;
        if (Z3_get_numeral_int64(c, q.numerator(), &n) && Z3_get_numeral_int64(c, q.denominator(), &d))
            if (auto rn = exactRoot(n), rd = exactRoot(d); rn && rd && *rd != 0) return num(Rational(*rn, *rd));
    }
    return fSqrt(a);
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

std::string RouteSpec::name() const {
    return "route_k" + std::to_string(k) + "_g" + std::to_string(groups) + "_t" + std::to_string(topkGroups) + (top2 ? "_top2" : "_max");
}

bool RouteSpec::parse(const std::string& name, RouteSpec& out) {
    long long k = 0, g = 0, t = 0;
    char score[8] = {0};
    if (std::sscanf(name.c_str(), "route_k%lld_g%lld_t%lld_%7s", &k, &g, &t, score) != 4) return false;
    out.k = k;
    out.groups = g;
    out.topkGroups = t;
    out.top2 = std::string(score).rfind("top2", 0) == 0;  // the name goes on with the expert count
    return true;
}

std::vector<double> routeExact(const std::vector<double>& s, const RouteSpec& r) {
    const auto E = static_cast<std::int64_t>(s.size());
    const auto G = std::max<std::int64_t>(1, r.groups), n = E / G;
    // How many items beat item i (ties go to the lower index), among those allowed.
    auto beaten = [](const std::vector<double>& v, const std::vector<bool>& ok, std::size_t i) {
        std::int64_t c = 0;
        for (std::size_t j = 0; j < v.size(); ++j)
            if (j != i && ok[j] && (j < i ? v[j] >= v[i] : v[j] > v[i])) ++c;
        return c;
    };
    std::vector<bool> eligible(s.size(), true);
    if (G > 1) {
        std::vector<double> score;
        for (std::int64_t g = 0; g < G; ++g) {
            double best = -HUGE_VAL;
            for (std::int64_t a = 0; a < n; ++a) {
                if (!r.top2) best = std::max(best, s[static_cast<std::size_t>(g * n + a)]);
                else
                    for (std::int64_t b = a + 1; b < n; ++b)
                        best = std::max(best, s[static_cast<std::size_t>(g * n + a)] + s[static_cast<std::size_t>(g * n + b)]);
            }
            score.push_back(best);
        }
        const std::vector<bool> all(static_cast<std::size_t>(G), true);
        for (std::int64_t g = 0; g < G; ++g) {
            const bool chosen = beaten(score, all, static_cast<std::size_t>(g)) < r.topkGroups;
            for (std::int64_t a = 0; a < n; ++a) eligible[static_cast<std::size_t>(g * n + a)] = chosen;
        }
    }
    std::vector<double> mask(s.size(), 0.0);
    for (std::size_t e = 0; e < s.size(); ++e) mask[e] = eligible[e] && beaten(s, eligible, e) < r.k ? 1.0 : 0.0;
    return mask;
}

std::vector<z3::expr> SymAlgebra::route(const std::vector<S>& scores, const RouteSpec& r) const {
    const auto name = r.name() + "_e" + std::to_string(scores.size());
    const z3::func_decl* f = nullptr;
    for (const auto& [n, d] : routeFns_)
        if (n == name) f = &d;
    if (!f) {
        z3::sort_vector domain(c);
        for (std::size_t i = 0; i <= scores.size(); ++i) domain.push_back(c.real_sort());
        routeFns_.emplace_back(name, z3::function(name.c_str(), domain, c.real_sort()));
        f = &routeFns_.back().second;
    }
    std::vector<z3::expr> out;
    for (std::size_t e = 0; e < scores.size(); ++e) {
        z3::expr_vector args(c);
        for (const auto& x : scores) args.push_back(x);
        args.push_back(c.real_val(static_cast<int>(e)));
        out.push_back((*f)(args));
    }
    return out;
}

long double evaluateTermPrecise(const z3::expr& root, const std::function<long double(const std::string&)>& vars) {
    std::unordered_map<unsigned, long double> memo;
    std::function<long double(const z3::expr&)> ev = [&](const z3::expr& e) -> long double {
        if (auto it = memo.find(e.id()); it != memo.end()) return it->second;
        long double r = 0;
        if (e.is_numeral()) {
            {
                auto text = e.get_decimal_string(24);
                if (!text.empty() && text.back() == '?') text.pop_back();
                r = std::stold(text);
            }
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
                        r = name == "%pi" ? 3.141592653589793238462643383279502884L : vars(name);
                    } else if (name == "exp") r = std::exp(arg(0));
                    else if (name == "log") r = std::log(arg(0));
                    else if (name == "sqrt") r = std::sqrt(arg(0));
                    else if (name == "rsqrt") r = 1.0L / std::sqrt(arg(0));
                    else if (name == "sigmoid") r = 1.0L / (1.0L + std::exp(-arg(0)));
                    else if (name == "tanh") r = std::tanh(arg(0));
                    else if (name == "erf") r = std::erf(arg(0));
                    else if (name == "pow") r = std::pow(arg(0), arg(1));
                    else if (name == "inv") r = 1.0L / arg(0);
                    else if (RouteSpec spec; RouteSpec::parse(name, spec)) {
                        std::vector<double> row;  // the routing compares scores: double is enough
                        for (unsigned i = 0; i + 1 < e.num_args(); ++i) row.push_back(static_cast<double>(arg(i)));
                        const auto which = static_cast<std::size_t>(arg(e.num_args() - 1));
                        r = routeExact(row, spec).at(which);
                    }
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

double evaluateTerm(const z3::expr& root, const std::function<double(const std::string&)>& vars) {
    return static_cast<double>(evaluateTermPrecise(root, [&](const std::string& name) { return static_cast<long double>(vars(name)); }));
}

}  // namespace tv
