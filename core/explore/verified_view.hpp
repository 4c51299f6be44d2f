// The plan the Studio draws and the plan it verifies are not always the same object: a plan
// stored once (replicas, microbatches) is verified as stored, as the command line does, and drawn
// written out. This maps one onto the other: stages (for status colours and the board) and the
// names a diagnosis gives (for the marks on the failing op, its counterpart and the other end).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/plan.hpp"
#include "verify/diagnosis.hpp"
#include "verify/stages.hpp"

namespace tv {

/// Per drawn stage, the stage of the verified plan it is an instance of (kNone if none). Writing
/// replicas out keeps one lineage record per stored record, in order, so a stage maps through the
/// record it proves. When the drawn plan is the verified one, the identity.
std::vector<std::uint32_t> mapDrawnStages(const Plan& drawn, const StagePlan& drawnStages, const Plan& verified, const StagePlan& verifiedStages);

/// The drawn op (or tensor) a name from a diagnosis stands for: the name itself when the plan is
/// drawn written out; the stored op for an instance ("x~mb1~dp1") when it is drawn as stored.
/// `asStored` (optional) tells whether the stored name had to stand in.
OpId drawnOp(const Plan& drawn, const Graph& g, const std::string& name, bool* asStored = nullptr);
TensorId drawnTensor(const Plan& drawn, const Graph& g, const std::string& name);

/// Where a failure is in the drawn plan.
struct FailureFocus {
    OpId failingOp = kNone;          ///< parallel op the diagnosis names
    bool failingOpAsStored = false;  ///< named as an instance, drawn as its stored op
    OpId counterpart = kNone;        ///< logical op: the failure's, or the producer of its logical tensor
    TensorId otherEnd = kNone;       ///< the other end's tensor, on the side below
    bool otherEndLogical = false;
};
FailureFocus locateFailure(const Plan& drawn, const Failure& failure);

}  // namespace tv
