// The mapping from nnScaler's execution plans onto our plan model: a logical plan (the
// single-device ModuleCodeGen) and a parallel plan of it become one trainverify plan with the
// lineage between them.
//
// - Every forward operator is lowered to registry ops by its signature (its annotation and kwargs
//   give the variant); its backward operator is the vector-Jacobian product of that lowering,
//   at the forward values of the same rank and microbatch.
// - Adapters become collectives (fused primitives take their forward or backward meaning),
//   chunks become local chunks with the runtime's piece (the rank's position in the sorted
//   group), and weight reducers become all-reduces. The data-parallel replicas are stored
//   once (plan format version 2): replica 0's ranks, the reducers across replicas, and each
//   lineage record's repetition (the batch split, copies, or the loss summed).
// - Repeated writes of a gradient add up (microbatches, tied weights, two producers).
// - Lineage comes from aligning the operators lane by lane and from the sub-tensors' index and
//   value maps (docs/research/nnscaler-ir.md §2.5); the final claims are the loss and every
//   weight gradient on every rank holding the weight.
#pragma once

#include <string>
#include <vector>

#include <cstdint>

#include <nlohmann/json.hpp>

#include "nnscaler/nnscaler_plan.hpp"

namespace tv::nnscaler {

/// A pair the mapping will not write out because it is too large (more cell executions than
/// kMaxCellExecutions): not a defect of the plans, so the verdict is INCONCLUSIVE, not INVALID.
class MappingTooLarge : public NnScalerError {
public:
    using NnScalerError::NnScalerError;
};

/// Cells of one data-parallel replica the mapping writes out at most (the replicas are stored
/// once). About 8 KB of memory per execution, so the bound holds the mapping near 8 GB.
inline constexpr std::uint64_t kMaxCellExecutions = std::uint64_t{1} << 20;

/// An operator (or primitive) the mapping has no semantics for: the plan cannot be verified
/// yet. Says which operator, with which annotation, and where it first occurs.
class UnsupportedOperator : public NnScalerError {
public:
    UnsupportedOperator(std::string signature, std::string annotation, std::string where, std::string reason)
        : NnScalerError("operator " + signature + (annotation.empty() ? "" : " (" + annotation + ")") + " at " + where + ": " + reason),
          signature(std::move(signature)), annotation(std::move(annotation)), where(std::move(where)), reason(std::move(reason)) {}
    std::string signature, annotation, where, reason;
};

struct ImportOptions {
    std::string name;         ///< the plan's name (default: "nnscaler")
    std::string description;  ///< written into the plan
    int tp = 0, pp = 0;       ///< from the file name when known (0: not known); only coordinates use them
    std::uint64_t maxCellExecutions = kMaxCellExecutions;  ///< a larger plan is MappingTooLarge
};

/// A defect found while mapping, before any proof: the parallel plan does not process the
/// logical plan's data (its lanes do not tile the logical batch).
struct MappingFinding {
    std::string message;
    std::string logicalTensor, parallelTensor;
    int rank = -1, microbatch = -1;
};

struct ImportResult {
    nlohmann::json plan;             ///< a trainverify plan: format version 2 with data-parallel replicas stored once, else 1
    std::vector<MappingFinding> findings;  ///< non-empty: the plan is not equivalent, whatever the proofs say
    /// Final claims the mapping could not make (the loss, a weight's gradient): proofs of the rest
    /// cannot make the pair EQUIVALENT.
    std::vector<std::string> unchecked;
    std::vector<std::string> notes;  ///< what the mapping noticed (lanes it could not align, index maps that disagree with the runtime)
    /// Where nnScaler's runtime does otherwise than the plan's index maps say (a chunk taking
    /// another piece, an all-gather concatenating out of order), one plain-language finding per
    /// adapter: the explanation of a NOT EQUIVALENT they cause.
    std::vector<std::string> runtimeFindings;
    /// Ranks written into or compared in collective groups while mapping: the work that grew with
    /// dp squared when every replica was written out. Independent of dp now.
    std::uint64_t groupRanksHandled = 0;
};

/// Maps a logical plan (one device, one microbatch) and a parallel plan of it. Throws
/// UnsupportedOperator for an operator without semantics and NnScalerError for a plan the
/// mapping cannot read (e.g. a backward op whose forward op never ran).
ImportResult importPair(const Plan& logical, const Plan& parallel, const ImportOptions& options = {});

/// tp and pp from an nnScaler plan file name ("..._dp2_pp2_tp2_nm2_..."); 0 when absent.
void degreesFromFileName(const std::string& path, int& tp, int& pp);

}  // namespace tv::nnscaler
