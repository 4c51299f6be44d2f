// A pair of nnScaler plan files (a logical plan and a parallel plan of it) read safely, mapped
// onto the plan model and checked by the plan reader: what `trainverify verify --logical
// --parallel`, `convert` and the tests load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/plan.hpp"
#include "verify/verifier.hpp"

namespace tv::nnscaler {

struct PairLoad {
    std::unique_ptr<tv::Plan> plan;  ///< null when the pair cannot be verified; then `report` says why
    /// Without a plan: INVALID (unreadable or unmappable files), INCONCLUSIVE (an operator without
    /// semantics, named) or NOT EQUIVALENT (a defect found while mapping, e.g. a batch the lanes do
    /// not tile).
    VerifyReport report;
    std::vector<std::string> notes;  ///< what the mapping noticed
    std::vector<std::string> findings;  ///< ImportResult::runtimeFindings
    /// Final claims the mapping could not make: the pair is at best INCONCLUSIVE.
    std::vector<std::string> unchecked;
    double seconds = 0;              ///< reading and mapping
};

PairLoad loadPair(const std::string& logicalPath, const std::string& parallelPath);

/// The verdict of a verified pair, given what the mapping could not claim: an EQUIVALENT
/// report becomes INCONCLUSIVE when a final claim is missing. Adds the notes as warnings.
void applyMappingLimits(const PairLoad& pair, VerifyReport& report);

}  // namespace tv::nnscaler
