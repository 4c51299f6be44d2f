// The concrete oracle: both plans evaluated with real arithmetic (the operators' concrete
// semantics, doubles, the real sqrt, exp, routing) at full shapes, on random inputs, and every
// lineage claim compared. It checks what the verifier proves by a different route (no shape
// reduction, no isomorphic reuse, no replica-0 proofs, no uninterpreted functions), so it is
// used to confirm counterexamples and, in the fuzzer, to catch the verifier being wrong.
//
// What it can say: a claim that differs on some input is a real difference (up to rounding,
// which the tolerance absorbs); claims that agree on a few random inputs are evidence, not a
// proof. Plans too large to evaluate at full shapes are refused (OracleStatus::TooLarge).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/plan.hpp"

namespace tv {

enum class OracleStatus : std::uint8_t {
    Agree,        ///< every claim held on every trial
    Differ,       ///< some claim failed on some trial (see mismatches)
    TooLarge,     ///< the written-out plan has more elements than OracleOptions::maxElements
    Unsupported,  ///< an operator without concrete semantics, or a plan the oracle cannot feed
};
std::string_view toString(OracleStatus s);

struct OracleOptions {
    std::uint64_t seed = 1;
    int trials = 3;
    std::uint64_t maxElements = 4'000'000;  ///< all tensors of both graphs, written out
    double tolerance = 1e-6;                ///< relative, beyond rounding
};

/// One lineage claim that failed: the first wrong element of one copy.
struct OracleMismatch {
    std::string logicalTensor;   ///< the claimed logical tensor
    std::string slice;           ///< its box
    std::string copy;            ///< "1/2*g@r0 + 1/2*g@r1"
    std::string element;         ///< logical coordinates
    double expected = 0, actual = 0;
    std::int32_t rank = -1;      ///< rank of the copy's first tensor
    bool finalOutput = false;    ///< the logical tensor leaves the step (nothing reads it)
    int trial = 0;
};

struct OracleResult {
    OracleStatus status = OracleStatus::Agree;
    std::vector<OracleMismatch> mismatches;  ///< at most one per record, in record order
    std::uint64_t elements = 0;              ///< evaluated elements per trial
    std::string note;                        ///< why TooLarge / Unsupported
    bool reachesFinalOutput() const;
    /// "the loss differs: expected 0.693147, got 1.38629 (copy loss@r0)" or "all claims agree".
    std::string summary() const;
};

/// Evaluates both graphs of `plan` (written out first if it is stored with replicas) on
/// `trials` random inputs and compares every lineage record that is not an assumption. Float
/// inputs are uniform in [-1, 1]; index data is uniform over the classes the logical lookups
/// reading it allow. Parallel inputs are derived from the assumptions (the initial records): a
/// shard is the logical slice divided by its coefficient; the terms of a multi-term copy split
/// it at random.
OracleResult runOracle(const Plan& plan, const OracleOptions& opts = {});

}  // namespace tv
