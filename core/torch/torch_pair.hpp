// A captured PyTorch program verified against its single-device graph: a logical graph and one
// graph per rank, lowered onto the registry (torch_lowering), the lineage inferred, and the pair
// written as one plan the verifier proves stage by stage.
//
// Lineage inference (docs/torch-graphs.md, "How the lineage is inferred"):
// - Inputs: by position. A parallel input of the logical input's shape is a replica; one whose
//   shape is the logical one split along one dim into as many parts as there are ranks is a shard,
//   in rank order. Anything else has no relation (a claim that needs it is INCONCLUSIVE).
// - Every parallel op is matched to the logical op of the same kind and attributes that reads the
//   logical tensors its inputs hold; its result then holds a part, a replica or a partial sum of
//   that op's result, computed from the op's semantics (a matmul whose inputs hold the same part
//   of K gives a partial sum, an all-reduce of partial sums gives replicas, ...). Collectives and
//   slices without a logical counterpart change how a tensor is held, not which.
// - Every inferred record is a lineage record: the verifier proves it as a stage, so a wrong
//   inference can cost a verdict (a stage that does not hold) but never make one.
// - Required results: each logical output that both sides return at the same position must be
//   held completely (a replica, or shards, each with coefficient 1) by the parallel outputs there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/plan.hpp"
#include "verify/verifier.hpp"

namespace tv::torch {

struct TorchPairLoad {
    std::unique_ptr<tv::Plan> plan;  ///< null when the pair cannot be verified; `report` says why
    VerifyReport report;
    nlohmann::json planJson;          ///< the plan as written (for convert)
    std::vector<std::string> notes;   ///< assumptions made and what inference could not relate
    std::vector<std::string> unchecked;  ///< required results not claimed: at best INCONCLUSIVE
    /// One line per logical output: how the parallel outputs hold it.
    std::vector<std::string> outputs;
    double seconds = 0;
};

/// `relationsPath` (optional): a relations file placing parallel inputs the default rule cannot
/// (docs/torch-graphs.md, "Relations file").
TorchPairLoad loadTorchPair(const std::string& logicalPath, const std::vector<std::string>& parallelPaths, const std::string& relationsPath = {});

/// Whether a path names a captured PyTorch graph (.py or .gpickle), not an nnScaler plan.
bool isTorchGraphPath(const std::string& path);

}  // namespace tv::torch
