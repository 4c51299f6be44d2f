// Plans stored with replicas (and microbatches) once: writing them out, and verifying them
// without writing every replica out. Replica k (microbatch m) runs replica 0's (microbatch 0's)
// program on its own part of the batch, so most stages are proven for every one of them by
// checking the stored one: those whose parallel ops stay inside the replica and whose logical ops
// carry the split (batch) dim through as an index they map, never one they reduce or read
// whole. The other stages (the gradient terms that add up across replicas, the reducers, ZeRO's
// per-replica shards, and any stage the logical ops make position-dependent along the split
// dim) are written out for every replica, one representative per isomorphism class.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <string>
#include <vector>

#include "model/plan.hpp"
#include "verify/stages.hpp"

namespace tv {


/// The plan with every data-parallel replica and microbatch written out (names of microbatch m >= 1
/// get the suffix "~mb<m>", then those of replica k >= 1 "~dp<k>"); the same plan when it has no
/// replicas. The explorer draws this form.
Plan expandReplicas(const Plan& plan);

/// Writes out part of a plan stored with replicas: the selected ops (every instance; a collective
/// across replicas once, over all of them; an accumulation across microbatches as a chain of adds)
/// and the selected records; tensors as the selected ops and records need them. `origin` receives,
/// per record of the result, the record it writes out. Null selections select everything.
Plan writeOutReplicas(const Plan& plan, const std::vector<bool>* ops, const std::vector<bool>* records,
                      std::vector<std::uint32_t>* origin = nullptr);

/// Writes out the members of a plan storing one member of each expert-parallel group into the
/// group listed (Replication::listedDp, plan-format.md §7): member j's copy of each selected op
/// runs on ranks + j * memberRanks (names "~ep<j>"; cp members, Replication::memberAxis CP:
/// "~cp<j>", and the result is a plain plan with replicas), a collective across members once over
/// all of them, a chunk indexed by member with member j's index; each selected record repeats as
/// its "members" mode says. The replicas (groups) and microbatches stay stored. A plan without
/// members: the same plan, its records selected.
Plan writeOutMembers(const Plan& plan, const std::vector<bool>* ops, const std::vector<bool>* records,
                     std::vector<std::uint32_t>* origin = nullptr);

/// The size of a plan written out, counted without writing it out.
struct WrittenOutCounts {
    std::size_t ops = 0, tensors = 0;
    std::map<std::string, std::size_t> opKinds;  ///< operator name -> instances
};
WrittenOutCounts writtenOutCounts(const Plan& plan);

/// "one replica of 16, microbatch 0 of 32" (what a plan stored with replicas lists; "one group of
/// 8 replicas of 16 (2 groups)" when it lists a group). `membersStoredOnce` above 1: the file
/// stored one member of each group (Plan::membersStoredOnce), which the reader wrote out.
std::string storedOnce(const Replication& r, std::int32_t membersStoredOnce = 1);

/// A logical tensor of a stage replica 0 proves alone that is split across the lanes: along
/// `dim`, in `lanes` equal parts, of which the stored lane holds the first.
struct LaneSplit {
    int dim = -1;
    std::int32_t lanes = 1;
    /// One member of each group stored: a second split, the members' along another dim (an
    /// expert part of tokens the lanes split), of which the stored member holds the first part.
    int dim2 = -1;
    std::int32_t lanes2 = 1;
};

/// Whether checking replica 0's part of a stage proves it for every replica of a plan stored
/// with replicas. When not, `why` says what ties the replicas together. When so, `splits` (if
/// given) receives every logical tensor of the stage that is split across the lanes: the stage's
/// logical ops compute the stored lane's part of each from the stored lane's parts alone, so the
/// stage can be checked on those parts (StageChecker cuts the logical tensors to them).
bool provenByReplicaZero(const Plan& plan, const Stage& stage, std::string* why = nullptr,
                         std::unordered_map<TensorId, LaneSplit>* splits = nullptr);

/// The replicas' (and microbatches') half of provenByReplicaZero for a plan storing one member of
/// each group: whether the stage, its members written out, is proven by the stored lane.
bool provenAlongReplicas(const Plan& plan, const Stage& stage, std::string* why = nullptr);

/// Some stages of a plan stored with replicas, written out for every replica.
struct ExpandedStages {
    Plan plan;                           ///< the stages' ops on every replica; their records written out
    std::vector<bool> assumed;           ///< per record of `plan`: an input proven elsewhere
    std::vector<std::uint32_t> origin;   ///< per record of `plan`: the record of the stored plan
};

/// Writes out the listed stages (ids into `stages`): their parallel ops on every replica (a
/// collective across replicas once, over all of them), the records they prove, and the records
/// they read, which become assumptions. Names of replica k >= 1 get the suffix "~dp<k>".
/// `membersOnly` (a plan storing one member of each group): the stages' members only, into the
/// group listed (writeOutMembers), whose replicas stay stored.
ExpandedStages expandStages(const Plan& plan, const StagePlan& stages, const std::vector<std::uint32_t>& stageIds, bool membersOnly = false);

/// How many ops writing out this stage's parallel ops for every replica makes (what
/// writeOutReplicas makes of each: a collective across replicas once, a sum across microbatches
/// as a chain per replica, any other op once per instance), counted before anything is made.
std::uint64_t writtenOutOps(const Plan& plan, const Stage& stage, bool membersOnly = false);

}  // namespace tv
