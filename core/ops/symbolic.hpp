// The ops layer on Z3: shape rules over integer unknowns (SymbolicShapes), the symbolic scalar algebra: Z3 Real terms (see ops/algebra.hpp for the pair of algebras), and
// the evaluation of its terms with real numbers. Only the operator families (ops_*.cpp) and the
// verifier's own files include this header, and with it Z3.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <z3++.h>

#include "ops/algebra.hpp"
#include "ops/registry.hpp"

namespace tv {

/// One dim in a symbolic shape rule: its reduced size, an unknown, and its original size.
struct SymbolicDim {
    z3::expr e;
    std::int64_t o;
};

/// The shape rules of ops/registry.hpp posed as integer constraints over Z3 unknowns: what shape
/// reduction solves for.
class SymbolicShapes {
public:
    using D = SymbolicDim;
    using Dims = std::vector<D>;
    explicit SymbolicShapes(z3::context& c) : c_(c), constraints(c) {}
    std::int64_t orig(const D& d) const { return d.o; }
    D cst(std::int64_t v) const { return {c_.int_val(static_cast<int64_t>(v)), v}; }
    D mul(const D& a, const D& b) const { return {a.e * b.e, a.o * b.o}; }
    D add(const D& a, const D& b) const { return {a.e + b.e, a.o + b.o}; }
    void eq(const D& a, const D& b, const std::string&) { constraints.push_back(a.e == b.e); }
    /// Contracted, reduced or reshaped dimensions keep size >= 2 (or their size if smaller).
    void min2(const D& a) { constraints.push_back(a.e >= c_.int_val(static_cast<int64_t>(std::min<std::int64_t>(2, a.o)))); }
    /// Semantic sizes are never reduced.
    void fixed(const D& a) { constraints.push_back(a.e == c_.int_val(static_cast<int64_t>(a.o))); }
    /// part * den == whole * num: a position or extent that keeps its ratio to the whole.
    void ratio(const D& part, const D& whole, std::int64_t num, std::int64_t den, const std::string&);
    /// whole * num is divisible by den (a boundary stays on an integer position).
    void divides(const D& whole, std::int64_t num, std::int64_t den);
    bool require(bool ok, const std::string&) { return ok; }
    bool ok() const { return true; }
    z3::context& ctx() { return c_; }

private:
    z3::context& c_;

public:
    z3::expr_vector constraints;
};

struct SymAlgebra {
    using S = z3::expr;
    using B = z3::expr;

    explicit SymAlgebra(z3::context& ctx);

    z3::context& c;
    z3::func_decl fExp, fLog, fSqrt, fRsqrt, fSigmoid, fTanh, fErf, fTrunc, fPow, fInv;
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
    /// Rounding toward zero (a cast to an integer type): uninterpreted, like the functions above.
    S trunc(const S& a) const { return fTrunc(a); }
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
