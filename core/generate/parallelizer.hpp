// The parallelizer: turns a logical training step into per-rank programs and records the lineage
// of every parallel tensor as it goes.
//
// Each logical tensor is held on two axes: the *lane* axis (data parallelism x microbatches, a
// lane being one microbatch of one data-parallel replica) and the *tp* axis (the tensor-parallel
// group). On each axis a tensor is replicated, sharded along one dim, or a partial sum; a rational
// coefficient relates the parallel values to the logical ones (mean losses, averaging reducers).
// Every operator's dims are described einsum-style (which dims are spatial, summed, or must not
// be split), and each logical op picks, among the placements its inputs allow, the one with the
// least communication; the collectives that reconcile placements (all-reduce, all-gather,
// reduce-scatter, the data-parallel gradient reducer, pipeline send/recv) follow from that.
// Megatron's column/row parallelism, sequence parallelism and vocab-sharded heads emerge from the
// weights' placements rather than from per-model code.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "generate/logical_model.hpp"

namespace tv::gen {

struct ParallelConfig {
    int dp = 1, tp = 1, pp = 1;
    int microbatches = 1;
    bool sequenceParallel = false;
    std::string schedule = "1f1b";  ///< "1f1b" or "gpipe": the order of each rank's program
    /// Store data-parallel replication once (plan format version 2): list replica 0's ops and
    /// lineage, with the reducers marked as spanning every replica.
    bool compactReplicas = false;
    /// Store the microbatches once too: list microbatch 0's ops and lineage, with each gradient
    /// accumulation one op that sums over the microbatches.
    bool compactMicrobatches = false;
    /// ZeRO stage: 1 splits optimizer state over the replicas (gradients all-reduced, each replica
    /// updates its part, weights all-gathered); 2 also reduce-scatters the gradients; 3 also keeps
    /// the weights split, all-gathering them where they are used.
    int zero = 0;
    /// Context parallelism: a second group within each pipeline stage (ranks: dp, pp, cp, tp,
    /// tp innermost) that splits the sequence. Weights stay whole on its members; data (token
    /// ids, labels) is split along the sequence and every activation follows it; attention
    /// all-gathers K and V (as Llama 3's training did), and contractions over the sequence (the
    /// weight gradients, the mean loss) become partial sums reduced over the cp group.
    int cp = 1;
    /// Context parallelism's attention as a ring (Megatron's cp_comm_type "p2p"): K/V blocks passed
    /// around the cp group, an online softmax merging the blocks; false: K and V all-gathered.
    bool cpRing = false;
    /// Expert parallelism over the data-parallel ranks (Megatron-Core's and DeepSeek's layout):
    /// the routed experts split over groups of `ep` consecutive replicas, tokens dispatched to
    /// them and combined by all-to-all, their gradients reduced over the dp / ep replicas that
    /// hold the same experts. 1: none (or the experts split over the tensor-parallel group).
    /// Stored, the plan lists one such group (plan-format.md §7, "listed").
    int ep = 1;
};

/// Returns the "logical", "parallel" and "lineage" members of a plan file (format version 1, or
/// version 2 when replicas or microbatches are stored once).
/// Throws std::logic_error if the model cannot be parallelized as asked (a generator bug or an
/// unsupported model; configuration errors are caught before, by the generator).
nlohmann::json parallelize(const LogicalModel& model, const ParallelConfig& cfg);

}  // namespace tv::gen
