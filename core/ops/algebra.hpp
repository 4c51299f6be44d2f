// The two scalar algebras every operator is written against once:
//  - SymAlgebra: Z3 Real terms; polynomial arithmetic exact, sums flat and n-ary, and the
//    non-polynomial functions (exp, log, sqrt, rsqrt, sigmoid, tanh, erf, pow with a
//    non-integer exponent, and the reciprocal 1/y of a division by a non-constant) as
//    uninterpreted functions, so equal arguments give equal results.
//  - NumAlgebra: doubles with the real functions, for replay, stepping and tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <z3++.h>

#include "model/rational.hpp"

namespace tv {

/// Mixture-of-experts routing over one token's expert scores (topk_mask): the k best experts,
/// ties to the lower index, among the topkGroups best of `groups` equal groups (scored by their
/// best expert, or their best two).
struct RouteSpec {
    std::int64_t k = 1, groups = 1, topkGroups = 1;
    bool top2 = false;
    /// The name of the uninterpreted function standing for this routing in symbolic terms.
    std::string name() const;
    static bool parse(const std::string& name, RouteSpec& out);
};
/// The routing, exactly, on numbers: 1 for a chosen expert, 0 otherwise.
std::vector<double> routeExact(const std::vector<double>& scores, const RouteSpec& r);

struct NumAlgebra {
    using S = double;
    using B = bool;

    S num(const Rational& r) const { return r.toDouble(); }
    S zero() const { return 0.0; }
    S one() const { return 1.0; }
    S add(S a, S b) const { return a + b; }
    S sub(S a, S b) const { return a - b; }
    S mul(S a, S b) const { return a * b; }
    S div(S a, S b) const { return a / b; }
    S neg(S a) const { return -a; }
    S sum(const std::vector<S>& xs) const {
        S s = 0.0;
        for (auto x : xs) s += x;
        return s;
    }
    S exp(S a) const { return std::exp(a); }
    S log(S a) const { return std::log(a); }
    S sqrt(S a) const { return std::sqrt(a); }
    S rsqrt(S a) const { return 1.0 / std::sqrt(a); }
    S sigmoid(S a) const { return 1.0 / (1.0 + std::exp(-a)); }
    S tanh(S a) const { return std::tanh(a); }
    S erf(S a) const { return std::erf(a); }
    S pi() const { return M_PI; }
    S powUf(S a, const Rational& e) const { return std::pow(a, e.toDouble()); }
    B ge(S a, S b) const { return a >= b; }
    B gt(S a, S b) const { return a > b; }
    B eq(S a, S b) const { return a == b; }
    B land(B a, B b) const { return a && b; }
    B lnot(B a) const { return !a; }
    B btrue() const { return true; }
    S ite(B c, S a, S b) const { return c ? a : b; }
    /// [id == c]: 1 when the index value names class c, else 0.
    S hit(S id, std::int64_t c) const { return id == static_cast<double>(c) ? 1.0 : 0.0; }
    std::vector<S> route(const std::vector<S>& scores, const RouteSpec& r) const { return routeExact(scores, r); }
};

struct SymAlgebra {
    using S = z3::expr;
    using B = z3::expr;

    explicit SymAlgebra(z3::context& ctx);

    z3::context& c;
    z3::func_decl fExp, fLog, fSqrt, fRsqrt, fSigmoid, fTanh, fErf, fPow, fInv;
    z3::expr piConst;

    S num(const Rational& r) const;
    S zero() const { return c.real_val(0); }
    S one() const { return c.real_val(1); }
    S add(const S& a, const S& b) const;
    S sub(const S& a, const S& b) const;
    S mul(const S& a, const S& b) const;
    S div(const S& a, const S& b) const;
    S neg(const S& a) const;
    S sum(const std::vector<S>& xs) const;
    S exp(const S& a) const { return fExp(a); }
    S log(const S& a) const { return fLog(a); }
    /// sqrt(a): exact for the square of a rational constant (sqrt 16 = 4), uninterpreted otherwise.
    S sqrt(const S& a) const;
    /// 1/sqrt(a), written as the reciprocal of sqrt (inv(sqrt(a))), so x * rsqrt(a) and x / sqrt(a)
    /// are the same term: one function, not two unrelated unknowns.
    S rsqrt(const S& a) const { return div(one(), sqrt(a)); }
    S sigmoid(const S& a) const { return fSigmoid(a); }
    S tanh(const S& a) const { return fTanh(a); }
    S erf(const S& a) const { return fErf(a); }
    S pi() const { return piConst; }
    S powUf(const S& a, const Rational& e) const { return fPow(a, num(e)); }
    B ge(const S& a, const S& b) const { return a >= b; }
    B gt(const S& a, const S& b) const { return a > b; }
    B eq(const S& a, const S& b) const { return a == b; }
    B land(const B& a, const B& b) const { return a && b; }
    B lnot(const B& a) const { return !a; }
    B btrue() const { return c.bool_val(true); }
    S ite(const B& cnd, const S& a, const S& b) const { return z3::ite(cnd, a, b); }
    /// [id == c]: ite(id == c, 1, 0), unless `indicator` gives the checker's own encoding of it
    /// (a 0/1 unknown per class of a valid id; verify/check.cpp).
    S hit(const S& id, std::int64_t c) const {
        if (indicator)
            if (auto e = indicator(id, c)) return *e;
        return z3::ite(id == num(Rational(c)), one(), zero());
    }
    std::function<std::optional<z3::expr>(const z3::expr& id, std::int64_t c)> indicator;
    /// Routing as an uninterpreted function of the token's scores and the expert's index: both
    /// sides of a stage route the same scores alike, whatever the selection rule; replay and the
    /// concrete algebra use the exact rule. (Written out exactly, one 256-expert row is about
    /// 70,000 comparison terms.)
    std::vector<S> route(const std::vector<S>& scores, const RouteSpec& r) const;

private:
    mutable std::vector<std::pair<std::string, z3::func_decl>> routeFns_;
};

/// x^e for a rational exponent: exact products for integers, an uninterpreted pow otherwise.
template <class A>
typename A::S power(const A& alg, const typename A::S& x, const Rational& e) {
    if (!e.isInteger() || e.num() > 64 || e.num() < -64) return alg.powUf(x, e);
    std::int64_t n = e.num();
    if (n == 0) return alg.one();
    auto r = x;
    for (std::int64_t i = 1; i < (n < 0 ? -n : n); ++i) r = alg.mul(r, x);
    return n < 0 ? alg.div(alg.one(), r) : r;
}

/// Evaluates a term built by SymAlgebra with real numbers: variables from `vars` (by name),
/// uninterpreted functions by their real meaning. Used to test that the symbolic and the
/// concrete semantics of every operator agree.
double evaluateTerm(const z3::expr& e, const std::function<double(const std::string&)>& vars);
/// The same in extended precision (long double, 64-bit mantissa): what the checker uses to tell
/// whether a counterexample really differs, so that a difference far below float32 rounding (an
/// epsilon changed from 1e-8 to 2e-8) still shows above the evaluation's own rounding.
long double evaluateTermPrecise(const z3::expr& e, const std::function<long double(const std::string&)>& vars);
/// A value of the real functions with a bound on its rounding error: first order, by running
/// error analysis (each operation adds its rounding, u times the magnitude it works on, to the
/// errors of its operands carried through: a sum that cancels keeps the error of the terms that
/// cancelled, so noise around 0 is not taken for a value). Infinite where the error cannot be
/// bounded (a divisor or a sqrt argument within its error of 0); a comparison or a routing
/// choice closer than its error has error 1.
struct PreciseValue {
    long double value = 0;
    long double error = 0;
};
/// `vars` gives each input with the error of its reading (0 for a value read exactly).
PreciseValue evaluateTermWithError(const z3::expr& e, const std::function<PreciseValue(const std::string&)>& vars);

}  // namespace tv
