// Stage cutting: every lineage record that is not an initial assumption gets a stage, the set of
// logical ops and parallel ops between the records it reads and the record it proves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/plan.hpp"
#include "verify/diagnosis.hpp"

namespace tv {

struct Stage {
    std::uint32_t id = 0;                     ///< position in proof order
    std::uint32_t output = 0;                 ///< the lineage record this stage proves
    std::vector<std::uint32_t> inputs;        ///< lineage records it assumes (sorted)
    std::vector<OpId> logicalOps;             ///< in logical topological order
    std::vector<OpId> parallelOps;            ///< in parallel topological order
    bool glue() const { return logicalOps.empty(); }
    /// Position of the stage's last parallel op in graph order (where its result is complete), for
    /// reporting the topologically first failure.
    std::uint32_t graphOrder = 0;
};

struct StagePlan {
    std::vector<Stage> stages;                      ///< in proof order (inputs proven earlier)
    std::vector<std::uint32_t> initialRecords;      ///< lineage records taken as assumptions
    std::vector<std::uint32_t> stageOfRecord;       ///< record -> stage id (kNone for initial)
    std::vector<Failure> structural;                ///< failures found while cutting, with locations
    std::vector<std::string> warnings;              ///< e.g. logical outputs no lineage checks
};

/// `assumed` (optional, per lineage record) marks further records taken as assumptions: inputs
/// proven elsewhere (a plan holding only some stages written out for every replica).
StagePlan cutStages(const Plan& plan, const std::vector<bool>* assumed = nullptr);

/// A canonical description of everything a stage's check depends on (op kinds, attributes and
/// operand structure on both sides, tensor shapes and dtypes, the lineage boxes, terms and
/// coefficients of its records), with tensors renamed by first appearance. Two stages with the
/// same key are the same proof obligation up to renaming: the same layer on another rank,
/// replica, microbatch or depth. Attributes enter by content, so keys compare across plans.
std::string structuralKey(const Plan& plan, const Stage& stage);

}  // namespace tv
