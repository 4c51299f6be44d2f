// The plan model: a logical dataflow graph (the single-device training step), a parallel
// dataflow graph (per-rank programs with collectives), the ranks and their coordinates, and the
// lineage that says how each logical tensor is held by parallel tensors.
//
// Storage is built for scale: names are interned, shapes and attribute sets are deduplicated,
// op operands live in one flat array, and every id is a 32-bit index.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/rational.hpp"

namespace tv {

using NameId = std::uint32_t;
using TensorId = std::uint32_t;
using OpId = std::uint32_t;
using ShapeId = std::uint32_t;
using AttrId = std::uint32_t;
using OpKind = std::uint16_t;
inline constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

using Shape = std::vector<std::int64_t>;

std::int64_t numel(const Shape& s);
std::string shapeToString(const Shape& s);

/// Owns each distinct string once; ids are dense and stable.
class Interner {
public:
    NameId intern(std::string_view s);
    /// kNone if the string was never interned.
    NameId find(std::string_view s) const;
    const std::string& str(NameId id) const { return strings_[id]; }
    std::size_t size() const { return strings_.size(); }
    void reserve(std::size_t n) {
        strings_.reserve(n);
        ids_.reserve(n);
    }

private:
    struct Hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::vector<std::string> strings_;
    std::unordered_map<std::string, NameId, Hash, std::equal_to<>> ids_;
};

enum class Role : std::uint8_t { Input, Weight, Activation, Gradient, OptimizerState, Loss };
enum class DType : std::uint8_t { Float, Int };
enum class Phase : std::uint8_t { Forward, Backward, Optimizer, Communication };

std::string_view toString(Role r);
std::string_view toString(DType d);
std::string_view toString(Phase p);
bool parseRole(std::string_view s, Role& out);
bool parseDType(std::string_view s, DType& out);
bool parsePhase(std::string_view s, Phase& out);

/// Parallelism axes a rank has a coordinate on.
enum class Axis : std::uint8_t { DP, TP, PP, SP, CP, EP };
inline constexpr std::array<Axis, 6> kAxes = {Axis::DP, Axis::TP, Axis::PP, Axis::SP, Axis::CP, Axis::EP};
std::string_view toString(Axis a);

struct RankInfo {
    std::array<std::int32_t, 6> coord{};  ///< indexed by Axis
    std::int32_t at(Axis a) const { return coord[static_cast<std::size_t>(a)]; }
};

struct TensorInfo {
    NameId name = kNone;
    ShapeId shape = kNone;
    Role role = Role::Activation;
    DType dtype = DType::Float;
    std::int32_t rank = -1;        ///< parallel tensors: the rank holding it
    std::int32_t microbatch = -1;  ///< -1: not tied to a microbatch
    OpId producer = kNone;
};

/// Where an op comes from in the program that produced the plan: the framework's source line of
/// a captured PyTorch graph's node (`megatron/core/tensor_parallel/layers.py:252 in forward`).
/// Shown in diagnoses and the Studio; never read by a proof.
struct SourceLine {
    std::string file;
    std::int32_t line = 0;
    std::string function;
    std::string code;
    /// "FILE:LINE in FUNCTION" (without the code).
    std::string toString() const;
    friend bool operator==(const SourceLine&, const SourceLine&) = default;
};

struct OpInfo {
    NameId name = kNone;
    OpKind kind = 0;
    Phase phase = Phase::Forward;
    std::int32_t rank = -1;        ///< local ops: the rank running it; collectives: -1
    std::int32_t microbatch = -1;
    std::uint32_t group = kNone;   ///< collectives: index into Plan::groups
    std::uint32_t firstInput = 0, numInputs = 0;
    std::uint32_t firstOutput = 0, numOutputs = 0;
    AttrId attrs = kNone;
    /// In a plan stored with replicas: a collective whose group spans every data-parallel
    /// replica (the gradient reducer); its listed group, inputs and outputs are replica 0's.
    bool acrossReplicas = false;
    /// In a plan stored with replicas: a local chunk whose index is its replica's number (each
    /// replica takes its own part, as ZeRO's optimizer does); listed with index 0.
    bool indexFromReplica = false;
    /// In a plan with microbatches stored once: an identity whose output is the sum of its input
    /// over the replica's microbatches (gradient accumulation); written out as a chain of adds.
    bool acrossMicrobatches = false;
    /// In a plan storing one member of each expert-parallel group: a collective over the group's
    /// members (member 0's part listed), and a chunk whose index shifts with the member.
    bool acrossMembers = false;
    bool indexFromMember = false;
};

/// One dataflow graph. Ops are stored in file order; topoOrder() is computed at load.
class Graph {
public:
    std::vector<TensorInfo> tensors;
    std::vector<OpInfo> ops;
    std::vector<TensorId> operands;                    ///< flat input/output lists
    std::unordered_map<NameId, TensorId> tensorByName;
    std::unordered_map<NameId, OpId> opByName;
    std::vector<OpId> topo;                            ///< topological order of ops
    std::vector<std::uint32_t> topoIndex;              ///< op -> position in topo
    std::vector<std::uint32_t> consumerStart;          ///< CSR: tensor -> consumers
    std::vector<OpId> consumerList;

    std::span<const TensorId> inputs(OpId op) const {
        const auto& o = ops[op];
        return {operands.data() + o.firstInput, o.numInputs};
    }
    std::span<const TensorId> outputs(OpId op) const {
        const auto& o = ops[op];
        return {operands.data() + o.firstOutput, o.numOutputs};
    }
    std::span<const OpId> consumers(TensorId t) const {
        return {consumerList.data() + consumerStart[t], consumerStart[t + 1] - consumerStart[t]};
    }
    /// The rank an op runs on: its own for a local op; for a collective, the rank of its first
    /// output (where a wrong result lands). -1 for a logical op.
    std::int32_t homeRank(OpId op) const {
        const auto& o = ops[op];
        if (o.rank >= 0) return o.rank;
        return o.numOutputs ? tensors[operands[o.firstOutput]].rank : -1;
    }
    TensorId findTensor(NameId n) const {
        auto it = tensorByName.find(n);
        return it == tensorByName.end() ? kNone : it->second;
    }
    OpId findOp(NameId n) const {
        auto it = opByName.find(n);
        return it == opByName.end() ? kNone : it->second;
    }
    /// Builds the consumer index. Returns false (and the ops on a cycle) if the graph is cyclic.
    bool finalize(std::vector<OpId>* cycle = nullptr);
};

/// One term of a copy: coeff * parallel tensor.
struct LineageTerm {
    TensorId tensor = kNone;
    Rational coeff{1};
    friend bool operator==(const LineageTerm&, const LineageTerm&) = default;
};

/// A half-open box [lo, hi) per dimension in logical full-tensor coordinates.
struct Box {
    std::vector<std::int64_t> lo, hi;
    friend bool operator==(const Box&, const Box&) = default;
    Shape extent() const;
    std::string toString() const;
    /// Row-major flat offsets of the box's elements inside a tensor of `shape`.
    std::vector<std::int64_t> offsetsIn(const Shape& shape) const;
};

struct LineageSlice {
    Box box;
    std::vector<std::vector<LineageTerm>> copies;  ///< equal copies, each a sum of terms
};

/// How a lineage record of a plan stored with replicas repeats across data-parallel replicas.
enum class ReplicaMode : std::uint8_t {
    None,    ///< a plan without replicas
    Copies,  ///< every replica holds equal copies (weights, reduced gradients)
    Sum,     ///< the replicas' terms add up (gradients before the data-parallel reduction)
    Split,   ///< each replica holds its own part along splitDim (the batch)
};

/// Ts[slice] == sum(coeff * Tp) for every copy of every slice. A logical tensor may have several
/// records (versions), e.g. partial sums before an all-reduce and replicas after it.
struct LineageRecord {
    TensorId logical = kNone;
    std::vector<LineageSlice> slices;
    ReplicaMode replicas = ReplicaMode::None;
    std::int32_t splitDim = -1;  ///< ReplicaMode::Split: replica k's slices are replica 0's shifted by k * extent/degree
    /// With one member of each expert-parallel group stored: how the record repeats over the
    /// members (Split: member j's slices shifted by j * memberStep along memberDim).
    ReplicaMode members = ReplicaMode::None;
    std::int32_t memberDim = -1;
    std::int64_t memberStep = 0;
};

/// A plan stored with replicas lists one data-parallel replica (the ranks with dp = 0); replica k
/// runs the same program on ranks r + k * ranksPerReplica. With microbatches stored once, it lists
/// microbatch 0 of that replica too.
struct Replication {
    std::int32_t degree = 1;           ///< data-parallel replicas (1: the plan has one)
    std::int32_t ranksPerReplica = 0;
    /// Above 1: the microbatches are stored once too. Ops and tensors of microbatch 0 stand for
    /// every microbatch (lane m of replica k holds batch part k * microbatches + m); those with no
    /// microbatch are the replica's own (weights, accumulated gradients, optimizer state).
    std::int32_t microbatches = 1;
    /// Data-parallel ranks in the stored group (1: one replica). Above 1 the stored program is the
    /// first `listedDp` dp ranks (an expert-parallel group, whose members hold different experts
    /// and exchange tokens); `degree` counts the groups and `ranksPerReplica` a group's ranks.
    std::int32_t listedDp = 1;
    /// Above 1 (listedDp then 1): one member of each expert-parallel group of `members`
    /// consecutive data-parallel ranks is stored; member j runs its program on ranks
    /// r + j * memberRanks (plan-format.md §7.3). `ranksPerReplica` is the group's ranks.
    std::int32_t members = 1;
    std::int32_t memberRanks = 0;
    /// The axis the members lie along: DP (an expert-parallel group of data-parallel ranks, the
    /// stored ranks [0, memberRanks)) or CP (a context-parallel group inside each replica: the
    /// stored ranks are those with cp coordinate 0, member j's rank + j * memberRanks has cp j;
    /// `listedDp` 1, `ranksPerReplica` one replica's ranks).
    Axis memberAxis = Axis::DP;
    bool active() const { return degree > 1 || microbatches > 1 || members > 1; }
    /// Instances of an op or tensor with this microbatch field once written out.
    std::int32_t instances(std::int32_t microbatch) const { return degree * (microbatches > 1 && microbatch >= 0 ? microbatches : 1); }
};

struct Mesh {
    std::array<std::int32_t, 6> degree{1, 1, 1, 1, 1, 1};
    std::int32_t at(Axis a) const { return degree[static_cast<std::size_t>(a)]; }
};

class Plan {
public:
    std::string name;
    std::string description;
    nlohmann::json expect;  ///< optional expectation block, kept verbatim

    Interner names;
    std::vector<Shape> shapes;
    std::vector<nlohmann::json> attrs;
    std::vector<std::vector<std::int32_t>> groups;

    Graph logical;
    Graph parallel;
    Mesh mesh;
    std::int32_t microbatches = 1;
    std::vector<RankInfo> ranks;
    std::vector<LineageRecord> lineage;
    Replication replication;  ///< active: the parallel graph and lineage hold replica 0 only
    /// Read from (or to be written as) a version 3 file: the writer stores repeated blocks once.
    bool storedWithRepeats = false;
    /// Read from a file that stored one member of each expert-parallel group (plan-format.md §7.3):
    /// the group's size. The plan holds the members written out (the group listed).
    std::int32_t membersStoredOnce = 1;

    /// Source lines of ops, by op name (a side table: most plans have none, and the ops of plans
    /// with hundreds of millions of ops stay as small as they were). `sourceLines` holds each
    /// distinct line once.
    std::vector<SourceLine> sourceLines;
    std::unordered_map<NameId, std::uint32_t> logicalOpSources, parallelOpSources;
    /// The source line of an op of `g` (logical or parallel), or of the op stored once that a
    /// written-out instance stands for; null if it has none.
    const SourceLine* opSource(const Graph& g, OpId op) const;
    /// The same by name, for the op of the logical (`parallel` false) or parallel graph.
    const SourceLine* opSource(bool parallel, std::string_view opName) const;
    void setOpSource(const Graph& g, OpId op, const SourceLine& s);

    ShapeId internShape(const Shape& s);
    AttrId internAttrs(const nlohmann::json& a);
    std::uint32_t internGroup(const std::vector<std::int32_t>& g);

    const Shape& shape(const Graph& g, TensorId t) const { return shapes[g.tensors[t].shape]; }
    const nlohmann::json& opAttrs(const Graph& g, OpId op) const;
    /// An attribute set's canonical text: equal texts mean equal attributes, in any plan.
    const std::string& attrText(AttrId id) const { return attrTexts_[id]; }
    const std::string& tensorName(const Graph& g, TensorId t) const { return names.str(g.tensors[t].name); }
    const std::string& opName(const Graph& g, OpId op) const { return names.str(g.ops[op].name); }
    /// "dp=0 tp=1 pp=0" for the axes with degree > 1 (all three classic axes always shown).
    std::string coordinates(std::int32_t rank) const;
    nlohmann::json coordinatesJson(std::int32_t rank) const;

private:
    std::unordered_map<std::string, ShapeId> shapeIds_;
    std::unordered_map<std::string, AttrId> attrIds_;
    std::vector<std::string> attrTexts_;  ///< per attribute set, its canonical text
    std::unordered_map<std::string, std::uint32_t> groupIds_;
    std::unordered_map<std::string, std::uint32_t> sourceIds_;  ///< a source line's text -> its index in sourceLines
};

}  // namespace tv
