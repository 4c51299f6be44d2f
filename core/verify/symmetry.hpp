// Verifying a plan stored with replicas without writing every replica out. Replica k runs
// replica 0's program on its own part of the batch, so most stages are proven for every replica
// by checking replica 0's: those whose parallel ops stay inside the replica and whose logical ops
// carry the split (batch) dim through as an index they map, never one they reduce or read
// whole. The other stages (the gradient terms that add up across replicas, the reducers, ZeRO's
// per-replica shards, and any stage the logical ops make position-dependent along the split
// dim) are written out for every replica, one representative per isomorphism class.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/plan.hpp"
#include "verify/stages.hpp"

namespace tv {

/// Whether checking replica 0's part of a stage proves it for every replica of a plan stored
/// with replicas. When not, `why` says what ties the replicas together.
bool provenByReplicaZero(const Plan& plan, const Stage& stage, std::string* why = nullptr);

/// Some stages of a plan stored with replicas, written out for every replica.
struct ExpandedStages {
    Plan plan;                           ///< the stages' ops on every replica; their records written out
    std::vector<bool> assumed;           ///< per record of `plan`: an input proven elsewhere
    std::vector<std::uint32_t> origin;   ///< per record of `plan`: the record of the stored plan
};

/// Writes out the listed stages (ids into `stages`): their parallel ops on every replica (a
/// collective across replicas once, over all of them), the records they prove, and the records
/// they read, which become assumptions. Names of replica k >= 1 get the suffix "~dp<k>".
ExpandedStages expandStages(const Plan& plan, const StagePlan& stages, const std::vector<std::uint32_t>& stageIds);

}  // namespace tv
