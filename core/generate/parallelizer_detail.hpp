// Internal to the parallelizer, not part of its API (that is parallelizer.hpp): the placement
// types and the Parallelizer class its files share, in namespace tv::gen::detail. The
// parallelizer is split by concept, one file each, so that each can be read (and changed) without
// the others:
//
//   parallelizer.cpp           construction, run (every logical op in order, the plan's parallel
//                              member), the order of each rank's program by the pipeline schedule,
//                              and the public entry point parallelize()
//   parallelizer_versions.cpp  versions of logical tensors: their instances, the ops they emit, and
//                              every conversion between placements (pipeline send/recv, the
//                              data-parallel reducers, ZeRO's parts, tp/cp collectives, rescaling)
//   parallelizer_ops.cpp       processOp: each logical op's placement on the lane, cp and tp axes
//                              (linearity, the candidates and their costs) and its local ops
//   vocab_parallel_loss.cpp    Megatron's vocab-parallel cross-entropy, forward and backward
//   ring_attention.cpp         ring attention: finding the attention cores, forward and backward
//   expert_parallel.cpp        expert parallelism over the replicas: the dispatch and combine
//                              all-to-alls, the expert gradients' reduction, ZeRO per group
//   parallelizer_lineage.cpp   the lineage records and the plan's logical member
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "generate/logical_model.hpp"
#include "generate/parallelizer.hpp"
#include "model/instance_names.hpp"
#include "model/rational.hpp"

namespace tv::gen::detail {

using json = nlohmann::json;

// ----- placements ------------------------------------------------------------------------------

/// Rep: every member holds it whole; Shard: split along dim; Partial: members' values add up.
/// DpShard (lane axis only, ZeRO): each data-parallel replica holds its part along dim, shared by
/// its microbatches.
/// Expert parallelism over the replicas (lane axis only; replica k is member k mod ep of its
/// expert-parallel group, the group being the ep consecutive replicas k - k mod ep ...):
///   EpShard   per replica: expert part (k mod ep) along dim; with dim2 >= 0 (ZeRO over the
///             expert-data-parallel replicas, which hold the same experts) also part (k / ep) of
///             dp / ep along dim2;
///   EpTokens  per lane (replica k, microbatch m): expert part (k mod ep) along dim, for the
///             tokens of every lane of its group at microbatch m along dim2 (their batch blocks,
///             in member order: what the dispatch all-to-all leaves);
///   EpPartial per lane: expert part (k mod ep) along dim; the lanes holding the same part add up
///             (an expert weight's gradient before its reduction);
///   EpSum     per replica: the members of a group add up, groups hold copies (a sum over the
///             experts, such as their gradients' squared norm, before the group's all-reduce).
enum class St : std::uint8_t { Rep, Shard, Partial, DpShard, EpShard, EpTokens, EpPartial, EpSum };

struct AxisState {
    St st = St::Rep;
    int dim = -1;
    int dim2 = -1;
    friend bool operator==(const AxisState&, const AxisState&) = default;
    static AxisState rep() { return {}; }
    static AxisState shard(int d) { return {St::Shard, d}; }
    static AxisState partial() { return {St::Partial, -1}; }
    static AxisState dpShard(int d) { return {St::DpShard, d}; }
    static AxisState epShard(int e, int z = -1) { return {St::EpShard, e, z}; }
    static AxisState epTokens(int e, int t) { return {St::EpTokens, e, t}; }
    static AxisState epPartial(int e) { return {St::EpPartial, e}; }
    static AxisState epSum() { return {St::EpSum, -1}; }
    bool expert() const { return st == St::EpShard || st == St::EpTokens || st == St::EpPartial || st == St::EpSum; }
};

/// A tensor's placement on the three axes: lanes (data parallelism x microbatches), and within a
/// pipeline stage the tensor-parallel (tp) and context-parallel (cp) groups.
struct Placement {
    AxisState lane, tp, cp;
    Rational coeff{1};
    friend bool operator==(const Placement& a, const Placement& b) {
        return a.lane == b.lane && a.tp == b.tp && a.cp == b.cp && a.coeff == b.coeff;
    }
};

inline std::string key(const AxisState& a) {
    return std::to_string(static_cast<int>(a.st)) + "/" + std::to_string(a.dim) + (a.dim2 >= 0 ? "/" + std::to_string(a.dim2) : std::string());
}

// ----- the parallelizer ------------------------------------------------------------------------

struct Version {
    int logical = -1;
    int stage = 0;
    Placement pl;
    bool initial = false;
    std::vector<std::string> inst;  ///< [laneIndex * G + c * tp + t]: lane, then cp member c, then tp member t
};

class Parallelizer {
public:
    Parallelizer(const LogicalModel& m, const ParallelConfig& c);

    json run();

private:
    const LogicalModel& M;
    const ParallelConfig& C;
    int L = 1;
    std::vector<int> stageOfLayer;  ///< layer -> pipeline stage
    std::vector<Version> versions;
    std::map<std::string, int> cache;        ///< logical/stage/placement -> version
    std::vector<int> produced;                ///< logical tensor -> the version its producer wrote
    std::vector<std::vector<int>> initialOf;  ///< logical input -> its initial versions (one per stage)
    std::vector<AxisState> desired;           ///< tp placement a weight gradient should end in
    std::vector<bool> isData;
    json ptensors = json::array(), pops = json::array();
    struct OpMeta {
        int microbatch = -1;
        bool backward = false;
    };
    std::vector<OpMeta> opMeta;  ///< per emitted op, for ordering by the schedule
    std::unordered_set<std::string> usedTensorNames, usedOpNames;

    /// Replicas written out: all of them, or only replica 0 in a plan stored with replicas.
    int listedDp = 1;
    /// Microbatches written out: all of them, or only microbatch 0 when they are stored once.
    int listedMb = 1;
    /// One member of each expert-parallel group stored (listedDp 1): the others are written out
    /// by the reader (across_members collectives, index_from_member chunks, "members" records).
    bool membersOnce = false;
    /// Context-parallel members stored once (plan-format.md §7.3, "member_axis": "cp"): only cp
    /// member 0 of each stage's group is listed (listedCp 1); the reader writes out the others
    /// (their collectives across_members, their chunks index_from_member, records "members").
    int listedCp = 1;
    bool cpMembersOnce = false;
    /// The flags of a cp collective, or of a chunk by cp member, in the stored form.
    json cpFlags(const char* key) const { return cpMembersOnce ? json{{key, true}} : json::object(); }
    bool compact() const { return listedDp < C.dp || listedMb < C.microbatches; }
    /// Flags of a collective over the data-parallel replicas (`replicas`) and over the members of
    /// an expert-parallel group (`members`), in the stored form.
    json acrossFlags(bool replicas, bool members) const {
        json j = json::object();
        if (replicas && compact()) j["across_replicas"] = true;
        if (members && membersOnce) j["across_members"] = true;
        return j;
    }
    bool compactMicrobatches() const { return listedMb < C.microbatches; }

    bool laneAxis() const { return L > 1; }
    /// Expert parallelism over the replicas (ParallelConfig::ep above 1).
    bool epAxis() const { return C.ep > 1; }
    /// The expert-parallel group of listed replica kk (its ep members, in order), and the
    /// expert-data-parallel group (the replicas holding its experts; stored, only kk itself, the
    /// rest in the other stored groups).
    std::vector<int> epGroupOf(int kk) const {
        if (membersOnce) return {kk};  // the others written out by the reader
        std::vector<int> g;
        for (int j = 0; j < C.ep; ++j) g.push_back(kk - kk % C.ep + j);
        return g;
    }
    std::vector<int> edpGroupOf(int kk) const {
        if (membersOnce) return {kk};
        std::vector<int> g;
        for (int u = 0; u < listedDp / C.ep; ++u) g.push_back(u * C.ep + kk % C.ep);
        return g;
    }
    /// The batch block (of L) that lane (listed replica kk, listed microbatch m) holds. Replicas
    /// in one expert-parallel group take consecutive blocks per microbatch, so that a stored group
    /// (or a dispatch) covers one contiguous part: block ((kk / ep) * microbatches + m) * ep + kk mod ep,
    /// which is kk * microbatches + m without expert parallelism over the replicas.
    int laneBlock(int kk, int m) const { return ((kk / C.ep) * listedMb + m) * C.ep + kk % C.ep; }
    bool tpAxis() const { return C.tp > 1; }
    bool cpAxis() const { return C.cp > 1; }
    /// The members of one stage's group listed: cp x tp, cp-major (only cp member 0's tp group
    /// when the cp members are stored once).
    int G() const { return C.tp * listedCp; }
    int member(int c, int t) const { return c * C.tp + t; }
    /// Ranks: dp outermost, then pp, then cp, then tp (innermost). A listed group member g is the
    /// same position in the whole group (cp member 0 comes first).
    int rankOf(int k, int s, int g) const { return (k * C.pp + s) * C.tp * C.cp + g; }
    /// One instance per replica (shared by its microbatches), or one per lane.
    static bool perReplica(const Placement& p) {
        return p.lane.st == St::Rep || p.lane.st == St::DpShard || p.lane.st == St::EpShard || p.lane.st == St::EpSum;
    }
    int lanes(const Placement& p) const { return perReplica(p) ? listedDp : listedDp * listedMb; }
    int laneK(const Placement& p, int l) const { return perReplica(p) ? l : l / listedMb; }
    int laneM(const Placement& p, int l) const { return perReplica(p) ? -1 : l % listedMb; }
    int stageOf(int layer) const {
        if (layer < 0) return 0;
        if (layer >= M.headLayer) return C.pp - 1;
        return stageOfLayer.empty() ? 0 : stageOfLayer[static_cast<std::size_t>(std::min<int>(layer, static_cast<int>(stageOfLayer.size()) - 1))];
    }
    const LTensor& lt(int t) const { return M.tensors[static_cast<std::size_t>(t)]; }

    static std::string phaseName(Phase p) { return std::string(toString(p)); }

    std::string placementKey(int logical, int stage, const Placement& p) const {
        return std::to_string(logical) + ":" + std::to_string(stage) + ":" + key(p.lane) + ":" + key(p.tp) + ":" + key(p.cp) + ":" + p.coeff.toString();
    }

    // ----- versions and their conversions (parallelizer_versions.cpp) -----

    Shape localShape(int logical, const Placement& p) const;

    /// Tensor ids and op ids are separate name spaces in a plan file.
    static std::string uniqueName(std::unordered_set<std::string>& used, const std::string& base);
    std::string tensorName(const std::string& base) { return uniqueName(usedTensorNames, base); }
    std::string opName(const std::string& base) { return uniqueName(usedOpNames, base); }

    /// With microbatches stored once, microbatch 0's names stand for every microbatch's.
    std::string instanceSuffix(int m, int rank) const {
        return instance::generatorSuffix(compactMicrobatches() ? -1 : m, rank);
    }

    /// A new version with fresh instance tensors named base + lane + rank.
    int newVersion(int logical, int stage, const Placement& p, const std::string& base, bool initial = false);

    void emitLocal(const std::string& name, const std::string& kind, int rank, int m, Phase phase,
                   const std::vector<std::string>& ins, const std::vector<std::string>& outs, const json& attrs,
                   const json& extra = json::object());
    /// A collective carrying (a version of) logical tensor `logical`.
    void emitCollective(const std::string& name, const std::string& kind, const std::vector<int>& group, int m, int logical,
                        const std::vector<std::string>& ins, const std::vector<std::string>& outs, const json& attrs,
                        const json& extra = json::object());
    /// A local tensor of the decomposition of one op instance (no lineage: it lies inside a stage).
    std::string localTensor(const std::string& base, int rank, int m, const Shape& shape, Role role);

    Placement initialPlacement(int t) const;

    /// The version of logical tensor t as its producer (or the data loader / checkpoint) holds it, on stage s.
    int source(int t, int stage);

    /// The same version moved to stage s (pipeline send/recv per instance).
    int fetch(int vi, int stage);

    Phase phaseOf(int logical) const {
        auto p = lt(logical).producer;
        return p >= 0 ? M.ops[static_cast<std::size_t>(p)].phase : Phase::Forward;
    }

    /// Data-parallel gradient reduction: accumulate the microbatches on each rank, then average
    /// over the data-parallel group.
    /// to Rep: a mean all-reduce over the replicas; to DpShard (ZeRO-2/3): a mean reduce-scatter.
    int laneReduce(int vi, AxisState to = AxisState::rep());

    /// ZeRO: each replica takes its part of a replicated tensor (a local chunk indexed by replica).
    int dpChunk(int vi, int dim);

    /// ZeRO: the replicas' parts gathered back (an all-gather over the data-parallel group).
    int dpGather(int vi);

    int convertLane(int vi, AxisState to);

    // ----- expert parallelism over the replicas -----

    /// Each listed replica's sum over its microbatches of a per-lane version: acc[kk][g].
    std::vector<std::vector<std::string>> accumulateMicrobatches(const Version& src, const Shape& shape);
    /// A version in placement p whose instances are the accumulated tensors (nothing to reduce).
    int adoptAccumulated(const Version& src, const Placement& p, const std::vector<std::vector<std::string>>& acc);
    /// One collective per group of listed replicas (each of `groups`), per microbatch lane when
    /// `perLane`, per group member g: its ranks, `input(replica, lane m, g)` and dst's instances.
    void collectiveOverReplicas(const Version& src, const Version& dst, const std::vector<std::vector<int>>& groups, bool perLane,
                                const std::string& name, const std::string& kind, const json& attrs, const json& extra,
                                const std::function<std::string(int, int, int)>& input);
    /// Shard(tokens) <-> EpTokens: the dispatch and combine all-to-alls over each expert-parallel group.
    int epDispatch(int vi, AxisState to);
    int epCombine(int vi);
    /// EpPartial -> EpShard (or, ZeRO-2, EpShard with its part): accumulate the microbatches, then
    /// reduce over the expert-data-parallel replicas.
    int epReduce(int vi, AxisState to);
    /// EpShard <-> EpShard with a ZeRO part (a chunk indexed by the replica's group; an all-gather
    /// over the expert-data-parallel replicas).
    int edpChunk(int vi, int dim);
    int edpGather(int vi);
    /// EpShard -> Rep (an all-gather over the expert-parallel group); Rep -> EpShard (a chunk).
    int epGather(int vi);
    int epChunk(int vi, int dim);
    /// EpSum -> Rep: an all-reduce over the expert-parallel group.
    int epAllReduce(int vi);
    std::vector<std::vector<int>> epGroups() const;
    std::vector<std::vector<int>> edpGroups() const;
    int cached(const Version& src, const Placement& p) const;
    /// The dim ZeRO splits an expert weight's state along over the dp / ep replicas holding it.
    int expertZeroDim(int t) const;

    /// The dim ZeRO splits a weight (and its optimizer state) along: the first one tensor
    /// parallelism does not split that divides by dp; -1 if none (it then stays replicated).
    int zeroDim(int t) const;

    /// Changes the tp placement of a version (on its stage), with the collective or local op it takes.
    int tpConvert(int vi, AxisState to) { return groupConvert(vi, false, to); }
    /// The same on the cp axis.
    int cpConvert(int vi, AxisState to) { return groupConvert(vi, true, to); }
    int groupConvert(int vi, bool cpAx, AxisState to);

    /// Rescales a version so that its coefficient becomes `to` (a local multiply per instance).
    int rescale(int vi, const Rational& to);

    int convert(int vi, AxisState lane, AxisState tp, AxisState cp);

    // ----- each logical op's placements (parallelizer_ops.cpp) -----

    static double tpCost(const AxisState& from, const AxisState& to, bool weight);

    /// Which input of an op vocabulary parallelism splits, along which dim, and the vocabulary
    /// size (input -1: the op is not one it applies to).
    struct VocabAxis {
        int input = -1, dim = -1;
        std::int64_t size = 0;
    };
    VocabAxis vocabAxis(const LOp& op) const;

    // ----- vocab-parallel cross-entropy (vocab_parallel_loss.cpp) -----

    /// Per (logits version, lane, tp rank): the forward's exponentials and their reduced sum, which
    /// the backward reuses (Megatron keeps them for it).
    struct SoftmaxParts {
        std::string exps, total;
    };
    std::map<std::string, SoftmaxParts> vocabSoftmax;
    /// Megatron's vocab-parallel cross-entropy (forward or backward) of lane `lane`, on every tp
    /// rank of the group: `in` are the op's input versions, `outV` its output versions.
    void vocabParallelCrossEntropy(const LOp& op, int lane, int cpMember, int stage, const std::vector<int>& in, const std::vector<int>& outV);

    // ----- ring attention (ring_attention.cpp) -----

    /// Ring attention (context parallelism with --cp-comm p2p): one attention core, found in the
    /// logical graph, whose ops are replaced as a whole: forward softmax(q k^T / sqrt(n) + mask) v
    /// and its backward (dq, dk, dv from the context's gradient).
    struct RingAttention {
        int scoresOp = -1, scaleOp = -1, maskOp = -1, softmaxOp = -1, contextOp = -1;
        int dprobsOp = -1, dvOp = -1, softmaxBwOp = -1, dscaleOp = -1, dqOp = -1, dkOp = -1;
        int q = -1, k = -1, v = -1, mask = -1, out = -1, dctx = -1, dq = -1, dk = -1, dv = -1;
        std::int64_t n = 1;  ///< the div_sqrt scale
        std::string base;    ///< name prefix of its parallel ops
    };
    std::vector<RingAttention> rings;
    std::map<int, std::pair<int, bool>> ringOps;  ///< logical op -> (ring, emits it: the group's first op of its phase)
    /// Per (ring, lane, group member): what the forward leaves the backward (Ring Attention and
    /// FlashAttention keep the output and the softmax statistics; here also the K/V blocks and
    /// the masked score blocks received in the forward, reused rather than sent again).
    struct RingSaved {
        std::vector<std::string> k, v, masked;  ///< per ring step
        std::string max, sum, runningOut;  ///< the final row max, sum and unnormalised output
    };
    std::map<std::string, RingSaved> ringSaved;
    void findRingAttention();
    void ringAttentionForward(const RingAttention& ra);
    void ringAttentionBackward(const RingAttention& ra);

    // ----- processOp and its steps (parallelizer_ops.cpp) -----

    struct OpPlacing;
    struct LanePick;
    struct Candidate;
    LanePick pickLane(const OpPlacing& x) const;
    /// The lane axis of an op that reads a version in an expert-parallel state: nullopt when the
    /// op cannot run on the experts' parts (its inputs are then converted back).
    std::optional<LanePick> pickExpertLane(const OpPlacing& x) const;
    Candidate pickGroup(const OpPlacing& x, bool cpAx, int excluded, int laneLabel, int laneLabel2) const;
    void processOp(int opIndex);
    void computeDesired();

    // ----- output (parallelizer_lineage.cpp; the schedule in parallelizer.cpp) -----

    /// The lane axis of a lineage record: per slice, the cuts the lane placement makes (dim,
    /// start, end) and its copies, each the lanes (instance indices) whose values add up.
    struct LaneSlice {
        std::vector<std::tuple<int, std::int64_t, std::int64_t>> cuts;
        std::vector<std::vector<int>> copies;
    };
    std::vector<LaneSlice> laneSlices(const AxisState& a, const Shape& full) const;
    json lineage() const;
    json logicalJson() const;
    void orderBySchedule();
};

}  // namespace tv::gen::detail
