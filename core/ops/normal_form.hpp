// The exp/log normal form: the targeted axioms a parallel algorithm needs when it really changes
// the algebra of softmax (vocab-parallel cross-entropy, the online softmax of context-parallel
// attention). Both take the row maximum m out before exponentiating and put it back after:
//   exp(x - m) / sum_j exp(x_j - m)  =  exp(x) / sum_j exp(x_j)
//   m + log(sum_j exp(x_j - m))       =  log(sum_j exp(x_j))
// which holds for every m. With exp, log and the reciprocal uninterpreted, Z3 cannot see it;
// this rewrite makes both sides syntactically equal when they are equal by these identities:
//   exp(a + b) = exp(a) exp(b)           (a product of exponentials is one exponential)
//   log(exp(c) B) = c + log(B)            (the exponential factor all terms of a sum share)
//   1 / (exp(c) B) = exp(-c) / B,  x^-1 x = 1
// Terms become polynomials (rational coefficients, integer powers of atoms, one exponential
// factor per monomial whose exponent is itself a polynomial); log and the reciprocal of a sum
// become atoms of the sum with its shared exponential factor taken out, which makes them
// canonical. Everything else (variables, other functions, ite) is an atom. The identities hold
// wherever both sides are defined (logs of positive sums, reciprocals of nonzero values), so a
// term proven equal here is equal as a real-valued computation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include <z3++.h>

#include "ops/symbolic.hpp"

namespace tv {

class ExpLogNormalizer {
public:
    /// `maxTerms` bounds every intermediate polynomial: a term that would expand beyond it is left
    /// as it is (normalize returns nothing), never rewritten into something huge.
    explicit ExpLogNormalizer(const SymAlgebra& alg, std::size_t maxTerms = 20000);
    ~ExpLogNormalizer();
    ExpLogNormalizer(const ExpLogNormalizer&) = delete;
    ExpLogNormalizer& operator=(const ExpLogNormalizer&) = delete;

    /// True if the term applies exp, log or the reciprocal anywhere (only then can the
    /// normal form prove more than Z3's own simplifier).
    bool mentionsExpLog(const z3::expr& e);
    /// The normal form of `e` as a Z3 term (equal terms give the same AST), or nothing if it
    /// would exceed the size bound.
    std::optional<z3::expr> normalize(const z3::expr& e);
    /// True if a - b normalizes to 0; nothing if either side exceeds the size bound.
    std::optional<bool> provesEqual(const z3::expr& a, const z3::expr& b);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tv
