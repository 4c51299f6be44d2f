#include "ops/symbolic.hpp"

#include <algorithm>
#include <cfloat>
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
      fTrunc(z3::function("trunc", ctx.real_sort(), ctx.real_sort())),
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

PreciseValue evaluateTermWithError(const z3::expr& root, const std::function<PreciseValue(const std::string&)>& vars) {
    constexpr long double u = LDBL_EPSILON;  // one rounding of long double, relative
    constexpr long double inf = HUGE_VALL;
    std::unordered_map<unsigned, PreciseValue> memo;
    // A monotonic function on [x - e, x + e]: the widest move of its value, plus its own rounding
    // (libm's long double functions are within a few ulps). Outside the domain: unbounded.
    auto monotonic = [&](const auto& f, const PreciseValue& x, long double lowest) -> PreciseValue {
        const long double v = f(x.value);
        if (x.error == 0) return {v, 4 * u * std::abs(v)};
        if (!std::isfinite(x.error) || x.value - x.error < lowest) return {v, inf};
        const long double hi = f(x.value + x.error), lo = f(x.value - x.error);
        return {v, std::max(std::abs(hi - v), std::abs(v - lo)) + 4 * u * std::abs(v)};
    };
    std::function<PreciseValue(const z3::expr&)> ev = [&](const z3::expr& e) -> PreciseValue {
        if (auto it = memo.find(e.id()); it != memo.end()) return it->second;
        PreciseValue r;
        if (e.is_numeral()) {
            auto text = e.get_decimal_string(24);
            const bool truncated = !text.empty() && text.back() == '?';
            if (truncated) text.pop_back();
            r.value = std::stold(text);
            std::int64_t whole = 0;  // an integer that fits is read exactly
            r.error = e.is_numeral_i64(whole) ? 0 : u * std::abs(r.value) + (truncated ? 1e-24L : 0);
        } else if (e.is_bool() && (e.is_true() || e.is_false())) {
            r.value = e.is_true() ? 1 : 0;
        } else if (e.is_app()) {
            const auto d = e.decl();
            const unsigned n = e.num_args();
            std::vector<PreciseValue> a;
            a.reserve(n);
            for (unsigned i = 0; i < n; ++i) a.push_back(ev(e.arg(i)));
            // A comparison whose sides are closer than their errors may come out either way: its
            // value is then uncertain (error 1), and so is whatever it selects.
            auto compare = [&](bool holds) {
                const long double slack = a[0].error + a[1].error;
                const bool close = slack > 0 && std::abs(a[0].value - a[1].value) <= slack;
                return PreciseValue{holds ? 1.0L : 0.0L, close ? 1.0L : 0.0L};
            };
            switch (d.decl_kind()) {
                case Z3_OP_ADD:
                case Z3_OP_SUB: {
                    long double mag = 0;
                    r.value = a[0].value;
                    r.error = a[0].error;
                    mag = std::abs(a[0].value);
                    for (unsigned i = 1; i < n; ++i) {
                        r.value = d.decl_kind() == Z3_OP_ADD ? r.value + a[i].value : r.value - a[i].value;
                        r.error += a[i].error;
                        mag += std::abs(a[i].value);
                    }
                    // Each partial sum rounds by at most u times the sum of the magnitudes so far:
                    // what matters for a result near 0 is the size of the terms that cancelled.
                    r.error += static_cast<long double>(n) * u * mag;
                    break;
                }
                case Z3_OP_UMINUS: r = {-a[0].value, a[0].error}; break;
                case Z3_OP_MUL: {
                    r.value = 1;
                    for (unsigned i = 0; i < n; ++i) r.value *= a[i].value;
                    for (unsigned i = 0; i < n; ++i) {
                        long double others = a[i].error;
                        for (unsigned j = 0; j < n; ++j)
                            if (j != i) others *= std::abs(a[j].value) + a[j].error;
                        r.error += others;
                    }
                    r.error += static_cast<long double>(n) * u * std::abs(r.value);
                    break;
                }
                case Z3_OP_DIV: {
                    r.value = a[0].value / a[1].value;
                    const long double room = std::abs(a[1].value) - a[1].error;
                    r.error = room <= 0 ? inf : (a[0].error + std::abs(r.value) * a[1].error) / room + u * std::abs(r.value);
                    break;
                }
                case Z3_OP_POWER: {
                    const long double y = a[1].value;
                    if (a[1].error > 0) {
                        r = {std::pow(a[0].value, y), inf};
                        break;
                    }
                    r = monotonic([&](long double x) { return std::pow(x, y); }, a[0], y == std::floor(y) ? -inf : 0);
                    if (y == std::floor(y) && a[0].error > 0 && a[0].value - a[0].error < 0 && a[0].value + a[0].error > 0) {
                        // An even power is not monotonic across 0: bound by the larger end.
                        const long double m = std::abs(a[0].value) + a[0].error;
                        r.error = std::max(r.error, std::abs(std::pow(m, y)) + std::abs(r.value));
                    }
                    // A negative power has a pole at 0: within its error of 0 nothing bounds it
                    // (the ends of the interval gave a finite bound across the pole).
                    if (y < 0 && a[0].value - a[0].error <= 0 && a[0].value + a[0].error >= 0) r.error = inf;
                    break;
                }
                case Z3_OP_TO_REAL: r = a[0]; break;
                case Z3_OP_ITE: {
                    const bool then = a[0].value != 0;
                    r = then ? a[1] : a[2];
                    if (a[0].error >= 0.5) r.error = std::max(a[1].error, a[2].error) + std::abs(a[1].value - a[2].value);
                    break;
                }
                case Z3_OP_GE: r = compare(a[0].value >= a[1].value); break;
                case Z3_OP_GT: r = compare(a[0].value > a[1].value); break;
                case Z3_OP_LE: r = compare(a[0].value <= a[1].value); break;
                case Z3_OP_LT: r = compare(a[0].value < a[1].value); break;
                case Z3_OP_EQ: r = compare(a[0].value == a[1].value); break;
                case Z3_OP_AND:
                    r.value = 1;
                    for (const auto& x : a) r = {r.value != 0 && x.value != 0 ? 1.0L : 0.0L, std::max(r.error, x.error)};
                    break;
                case Z3_OP_OR:
                    r.value = 0;
                    for (const auto& x : a) r = {r.value != 0 || x.value != 0 ? 1.0L : 0.0L, std::max(r.error, x.error)};
                    break;
                case Z3_OP_NOT: r = {a[0].value == 0 ? 1.0L : 0.0L, a[0].error}; break;
                case Z3_OP_UNINTERPRETED: {
                    const auto name = d.name().str();
                    if (n == 0) {
                        r = name == "%pi" ? PreciseValue{3.141592653589793238462643383279502884L, u * 4} : vars(name);
                    } else if (name == "exp") r = monotonic([](long double x) { return std::exp(x); }, a[0], -inf);
                    else if (name == "log") r = monotonic([](long double x) { return std::log(x); }, a[0], 0);
                    else if (name == "sqrt") r = monotonic([](long double x) { return std::sqrt(x); }, a[0], 0);
                    else if (name == "rsqrt") r = monotonic([](long double x) { return 1.0L / std::sqrt(x); }, a[0], 0);
                    else if (name == "sigmoid") r = monotonic([](long double x) { return 1.0L / (1.0L + std::exp(-x)); }, a[0], -inf);
                    else if (name == "tanh") r = monotonic([](long double x) { return std::tanh(x); }, a[0], -inf);
                    else if (name == "erf") r = monotonic([](long double x) { return std::erf(x); }, a[0], -inf);
                    // Non-decreasing, so its move over [x - e, x + e] bounds it: 0 when no integer lies within the error.
                    else if (name == "trunc") r = monotonic([](long double x) { return std::trunc(x); }, a[0], -inf);
                    else if (name == "inv") {
                        r.value = 1.0L / a[0].value;
                        const long double room = std::abs(a[0].value) - a[0].error;
                        r.error = room <= 0 ? inf : std::abs(r.value) * a[0].error / room + u * std::abs(r.value);
                    } else if (name == "pow") {
                        const long double y = a[1].value;
                        r = a[1].error > 0 ? PreciseValue{std::pow(a[0].value, y), inf}
                                           : monotonic([&](long double x) { return std::pow(x, y); }, a[0], 0);
                    } else if (RouteSpec spec; RouteSpec::parse(name, spec)) {
                        std::vector<double> row;  // the routing compares scores: double is enough
                        for (unsigned i = 0; i + 1 < n; ++i) row.push_back(static_cast<double>(a[i].value));
                        const auto which = static_cast<std::size_t>(a[n - 1].value);
                        r.value = routeExact(row, spec).at(which);
                        // A 0/1 choice: certain unless two scores (or sums of two, for grouped
                        // top-2 routing) are closer than their errors and the double they are
                        // compared in.
                        long double worst = 0;
                        for (unsigned i = 0; i + 1 < n; ++i) worst = std::max(worst, a[i].error + 2e-16L * (1 + std::abs(a[i].value)));
                        for (unsigned i = 0; i + 1 < n && r.error == 0; ++i)
                            for (unsigned j = i + 1; j + 1 < n; ++j)
                                if (std::abs(a[i].value - a[j].value) <= (spec.top2 ? 4 : 2) * worst) {
                                    r.error = 1;
                                    break;
                                }
                    } else {
                        throw std::runtime_error("evaluateTerm: unknown function " + name);
                    }
                    break;
                }
                default:
                    throw std::runtime_error("evaluateTerm: unsupported term " + e.to_string());
            }
        } else {
            throw std::runtime_error("evaluateTerm: unsupported term " + e.to_string());
        }
        if (std::isnan(r.error)) r.error = inf;
        memo.emplace(e.id(), r);
        return r;
    };
    return ev(root);
}

long double evaluateTermPrecise(const z3::expr& root, const std::function<long double(const std::string&)>& vars) {
    return evaluateTermWithError(root, [&](const std::string& name) { return PreciseValue{vars(name), 0}; }).value;
}

double evaluateTerm(const z3::expr& root, const std::function<double(const std::string&)>& vars) {
    return static_cast<double>(evaluateTermPrecise(root, [&](const std::string& name) { return static_cast<long double>(vars(name)); }));
}

}  // namespace tv
