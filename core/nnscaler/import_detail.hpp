// Internal to the nnScaler mapping, not part of its API (that is nnscaler_import.hpp): the
// declarations its files share, in namespace tv::nnscaler::detail. The mapping is split by
// concept, one file each, so that each can be read (and changed) without the others:
//
//   nnscaler_graph_writer.cpp  GraphWriter: the tensors and ops of one graph written as plan JSON,
//                              their names and shapes, and the removal of what nothing uses
//   nnscaler_rank_sim.cpp      RankSim (the registry ops of one rank) and the Importer running
//                              each program: forward cells, backward cells (the VJP of their
//                              forward cell's lowering)
//   nnscaler_lowering.cpp      lowerForward: each operator signature's lowering to registry ops
//   nnscaler_adapters.cpp      adapters and weight reducers as local ops and collectives
//   nnscaler_lineage.cpp       the lane-by-lane alignment of the two plans and the lineage records
//   nnscaler_import.cpp        the Importer's tensor state (reads, writes, gradient accumulation)
//                              and the public entry points, importPair and degreesFromFileName
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "nnscaler/nnscaler_import.hpp"
#include "ops/registry.hpp"

namespace tv::nnscaler::detail {

using json = nlohmann::json;
using Handle = GradBuilder::Handle;

// ----- one graph being written (nnscaler_graph_writer.cpp) ------------------------------------

struct HandleInfo {
    std::string name;
    Shape shape;
    bool isInt = false;
    std::size_t tensorIndex = 0;
    std::int64_t producerOp = -1;  ///< index into the op array, -1 for an input
    std::uint32_t producerSlot = 0, uses = 0;
};

/// An op the lowering of one operator emitted, kept for its backward.
struct EmittedOp {
    std::string kind;
    json attrs;
    std::vector<Handle> inputs, outputs;
};

/// A forward operator as run on one rank and microbatch: its operand handles (-1 for
/// constants), its output handles and the registry ops in between.
struct Lowered {
    const Cell* cell = nullptr;
    std::vector<Handle> inputs, outputs;
    std::vector<EmittedOp> ops;
    /// Dropout masks the operator draws (inputs of the graph), with the part of the logical
    /// mask each holds: the box as a sub-tensor of the mask's full (per-microbatch) shape.
    std::vector<Handle> masks;
    std::vector<SubTensor> maskParts;
};

/// Writes the tensors and ops of one graph (the logical or the parallel one) as plan JSON.
class GraphWriter {
public:
    explicit GraphWriter(bool parallel) : parallel_(parallel) {}
    std::vector<HandleInfo> handles;
    json tensors = json::array(), ops = json::array();
    std::vector<std::vector<Handle>> opInputs;  ///< each op's operands, as handles (ops' order)
    /// Whether `from` is computed from `to` through ops of the given kinds only, looking at no
    /// more than `budget` tensors; false past it.
    bool dependsOn(Handle from, Handle to, const std::set<std::string, std::less<>>& through, std::size_t budget) const;

    Handle tensor(const std::string& base, Shape shape, const char* role, bool isInt, int rank, int mb);
    void op(const std::string& kind, const std::string& base, const std::vector<Handle>& ins, const std::vector<Handle>& outs,
            const json& attrs, int rank, int mb, const char* phase, const std::vector<int>* group = nullptr);
    const std::string& name(Handle h) const { return handles[static_cast<std::size_t>(h)].name; }
    void rename(Handle h, const std::string& base);
    const Shape& shape(Handle h) const { return handles[static_cast<std::size_t>(h)].shape; }

private:
    static std::string fresh(std::unordered_map<std::string, int>& used, const std::string& base);
    bool parallel_;
    std::unordered_map<std::string, int> tensorNames_, opNames_;
};

std::string sanitize(const std::string& s);
/// A model operator's signature under the module path the bundled plans use: TrainVerify's
/// artifact also compiles byte-identical copies of the same model files from
/// `Verdict.gen_model.model.{llama3,moe,deepseek_v3}` (= `genmodel.model.llama3_adpt` and
/// `genmodel.model.llama3_moe`). Any other signature is returned as it is.
std::string canonicalModelSignature(const std::string& sig);
bool endsWith(std::string_view s, std::string_view suffix);
/// Whether two operator annotations are the same but for dims of size 1 written `1^` in the second.
bool sameAnnotation(const std::string& logical, const std::string& parallel);
Shape extentOf(const SubTensor& t);
Shape localShape(const SubTensor& t);
bool isIntDtype(const std::string& d);
std::string shapeText(const Shape& s);
std::string numberText(const json& v);

void removeDeadOps(GraphWriter& g, const std::unordered_set<std::string>& keep);

// ----- the simulation of one program (one rank, or the logical device; nnscaler_rank_sim.cpp) --

/// Emits the registry ops of one rank (or of the logical graph) and keeps its tensor state.
class RankSim : public GradBuilder {
public:
    RankSim(GraphWriter& g, bool logical) : g_(g), logical_(logical) {}
    int rank = -1;    ///< runtime rank (-1: logical)
    int mb = -1;
    const char* phase = "forward";
    std::string prefix;
    Lowered* recording = nullptr;

    Handle mask(const Shape& shape, SubTensor part);

    std::vector<Handle> emitOp(std::string_view op, std::vector<Handle> inputs, json attrs, std::vector<Shape> outShapes) override;
    Shape shapeOf(Handle h) const override { return g_.shape(h); }

    std::string where() const;

private:
    GraphWriter& g_;
    bool logical_;
};

// ----- operator lowerings (nnscaler_lowering.cpp) ---------------------------------------------

/// The operands of one operator execution.
struct Call {
    const Plan& plan;
    const Cell& cell;
    std::vector<Handle> in;    ///< per input position: the tensor's handle, or -1 for a constant
    std::vector<Shape> outShapes;
    std::string where;         ///< for messages: "device 1, microbatch 0, cell #12"
};

[[noreturn]] void unsupported(const Call& c, const std::string& reason);
std::vector<Handle> lowerForward(RankSim& s, const Call& c);

// ----- lineage (nnscaler_lineage.cpp) ------------------------------------------------------------

/// One parallel tensor claimed to hold part of a logical tensor.
struct Instance {
    Handle parallel = -1;
    const SubTensor* psub = nullptr;
    int replica = 0, mb = 0;
};

struct Site {
    Handle logical = -1;
    const SubTensor* lsub = nullptr;
    std::vector<Instance> instances;
};

// ----- the importer ----------------------------------------------------------------------------

struct CollectiveKey {
    std::int64_t adapter = 0;
    int prim = 0, mb = 0;
    std::int64_t tensor = -1;
    std::vector<int> group;
    auto tie() const { return std::tie(adapter, prim, mb, tensor, group); }
    bool operator<(const CollectiveKey& o) const { return tie() < o.tie(); }
};

struct Collective {
    std::string kind;
    json attrs = json::object();
    std::vector<int> group;
    std::map<int, Handle> in, out;  ///< by rank
    std::string where;
    /// A reducer of a plan stored with replicas: the group is replica 0's part, and the
    /// collective runs once over every replica's (plan format 2, `across_replicas`).
    bool acrossReplicas = false;
    /// A reducer's: the weight whose gradient it reduces (its first member's), and whether every
    /// member reduces the same box of the same weight.
    const SubTensor* weight = nullptr;
    bool weightsAgree = true;
};

/// The mapping of one pair while it runs: every rank's tensor state, the collectives being
/// matched, the lineage. Its member functions are defined with their concept: the tensor state in
/// nnscaler_import.cpp, running the programs in nnscaler_rank_sim.cpp, adapters and reducers in
/// nnscaler_adapters.cpp, the lineage in nnscaler_lineage.cpp.
struct Importer {
    const Plan& L;
    const Plan& P;
    ImportOptions opt;
    ImportResult result;
    GraphWriter lg{false}, pg{true};
    int devices = 1, dp = 1, nm = 1;
    /// The plan is written with its data-parallel replicas stored once (format 2): the programs
    /// run for replica 0's ranks, [0, devices), the reducers run across replicas and each lineage
    /// record says how it repeats.
    bool storedOnce() const { return dp > 1; }

    // Tensor state: what each (rank, sub-tensor id, microbatch) currently is.
    std::map<std::tuple<int, std::int64_t, int>, Handle> state;
    // Weight-gradient buffers: (rank, gradient full tensor, box start) -> handle.
    std::map<std::tuple<int, std::int64_t, std::vector<std::int64_t>>, Handle> gradBuffers;
    // Data loader outputs not read yet: (rank, id, mb) -> output position.
    std::map<std::tuple<int, std::int64_t, int>, int> pendingData;
    // Forward executions: (rank, cell id, mb) -> lowering.
    std::map<std::tuple<int, std::int64_t, int>, Lowered> lowered;
    // Backward executions: (rank, cell id, mb) -> incoming gradient handle per forward output.
    std::map<std::tuple<int, std::int64_t, int>, std::vector<Handle>> incoming;
    std::map<CollectiveKey, Collective> collectives;
    // Initial reads: inputs, weights, buffers, the loss seed.
    struct InitialRead {
        int rank, mb;
        Handle handle;
        const SubTensor* sub;
        int dataOutput = -1;  ///< data loader output position
        std::string constant; ///< a constant computed from shapes alone (the causal mask): its signature and shape
    };
    std::vector<InitialRead> initialReads;
    /// Chunks whose runtime piece (the rank's position in the sorted group, as nnScaler's
    /// runtime and torch number group members) differs from the piece the index map labels.
    struct Mismatch {
        std::size_t count = 0, executions = 0;  ///< executions that disagree, of all checked
        std::string example, tensor;
        std::set<int> ranks;  ///< plan devices of the disagreeing executions
    };
    std::map<std::int64_t, Mismatch> chunkMismatches;
    /// All-gathers whose members' inputs are labelled as other pieces than their positions.
    std::map<std::int64_t, Mismatch> gatherMismatches;
    /// The mismatches in plain language (ImportResult::runtimeFindings).
    void describeMismatches();
    /// A parallel activation gradient written twice on a rank in one microbatch: the op adding
    /// the two writes, its operands, and the adapter cell of the second write (-1: an operator).
    struct GradientSum {
        std::size_t op;
        Handle first, second;
        std::int64_t adapter;
    };
    std::vector<GradientSum> gradientSums;
    std::int64_t writingAdapter = -1;  ///< the adapter cell whose primitives write now
    void replaceRederivedGradients();

    Importer(const Plan& l, const Plan& p, const ImportOptions& o) : L(l), P(p), opt(o) {
        findDenseRouting(l);
        findDenseRouting(p);
    }

    /// MoE routing (gate_fw's weights and indices, [tokens, k], and their gradients) is held
    /// densely as [tokens, experts]: the routing weight of every expert, 0 where not chosen, and
    /// the chosen experts' mask. The full tensors so held, with the number of experts.
    std::map<std::pair<bool, std::int64_t>, std::int64_t> denseFull;  ///< (logical plan?, full tensor) -> experts

    // ----- the tensor state (nnscaler_import.cpp) -----

    bool inLogical(const SubTensor& t) const;
    void findDenseRouting(const Plan& plan);
    SubTensor adjusted(const SubTensor& t) const;
    Shape shapeOf(const SubTensor& t) const { return localShape(adjusted(t)); }
    bool isInt(const SubTensor& t) const { return isIntDtype(adjusted(t).dtype); }
    void note(const std::string& s);
    const SubTensor& sub(const Plan& plan, std::int64_t id) const { return plan.tensors.at(id); }
    static bool isCreateMask(const Cell& c);
    static const char* roleOf(const SubTensor& t);
    std::string tensorBase(const SubTensor& t) const { return sanitize(t.name) + "#" + std::to_string(t.id); }

    // ----- reading and writing tensors (nnscaler_import.cpp) -----

    Handle read(const Plan& plan, GraphWriter& g, RankSim& s, std::int64_t id, const std::string& where);
    static std::vector<std::int64_t> boxStart(const SubTensor& t);
    void write(GraphWriter& g, RankSim& s, const SubTensor& t, Handle h, bool replace = false);
    Handle accumulate(GraphWriter& g, RankSim& s, Handle old, Handle add, const SubTensor& t);

    // ----- running the programs (nnscaler_rank_sim.cpp) -----

    void runProgram(const Plan& plan, GraphWriter& g, int device, bool logical);
    void backward(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, int mbKey, const std::string& where);
    std::vector<Handle> vjp(GraphWriter& g, RankSim& s, const Lowered& fw, const std::vector<Handle>& outGrads);

    // ----- adapters and reducers (nnscaler_adapters.cpp) -----

    std::vector<int> groupOf(const json& kwargs, const std::string& key, const std::string& where) const;
    Collective& member(const CollectiveKey& key, const std::string& kind, const json& attrs, const std::vector<int>& group, const std::string& where,
                       bool groupInKey = false);
    static void knownKeywordsOnly(const Primitive& pr, const std::string& where);
    void adapter(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, const std::string& where);
    int normDimOf(std::int64_t d, std::size_t rank, const std::string& where) const;
    void localOrCollective(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, int pi, const std::string& kind, json attrs,
                           const std::vector<int>& group, std::int64_t inId, std::int64_t outId, const std::string& where);

    /// A reducer's group: its devices (replica 0's part of the group across replicas), sorted,
    /// built once per reducer (its every execution, one per rank, shares it). Every cell with the
    /// reducer's id must span the same devices.
    struct ReducerGroup {
        std::vector<int> devices, ranks;
        std::string where;
    };
    std::map<std::int64_t, ReducerGroup> reducerGroups;
    const std::vector<int>& reducerGroup(const Cell& c, const std::string& where);
    void reducer(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, const std::string& where);

    /// The gradient (full tensor) of a weight, from the first cell input that names both: found
    /// by one pass over the plan, made once (a reducer asks for every weight on every rank).
    std::map<std::int64_t, std::int64_t> gradFull_;
    const Plan* gradFullOfPlan_ = nullptr;
    std::int64_t gradFullOf(const Plan& plan, std::int64_t weightFull);

    void emitCollectives();

    // ----- lineage (nnscaler_lineage.cpp) -----

    std::set<std::int64_t> claimedGradients;
    std::map<std::int64_t, std::int64_t> logicalGradOf;  ///< logical weight full tensor -> its gradient's
    std::unordered_set<std::string> claimed;
    bool batchNoted_ = false;
    json records = json::array();

    bool logicalBox(const SubTensor& p, const SubTensor& l, int replica, int mb, std::vector<std::pair<std::int64_t, std::int64_t>>& box, int& batchDim);
    bool addRecord(const Site& site);
    static bool skippedInAlignment(const Cell& c);
    int rankOfParallel(Handle h) const;
    bool sameOperator(const Cell& l, const Cell& p) const;
    void buildLineage();
};

}  // namespace tv::nnscaler::detail
