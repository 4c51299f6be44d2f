// The two scalar algebras every operator is written against once (SymAlgebra, which needs Z3, is
// in ops/symbolic.hpp, so that this header and the registry's do not include Z3):
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
    S trunc(S a) const { return std::trunc(a); }
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

}  // namespace tv
