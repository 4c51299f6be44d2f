// The catalog's communication and rank-assignment entries (Category::Communication,
// Category::RankAssignment): collectives turned into no-ops, deleted, swapped for another
// collective or given the wrong group or member order, and stage-boundary sends crossed. Each
// entry's site finder and edit, then the rows (bug_catalog.cpp puts them in the catalog's order).
#include "bugs/catalog_detail.hpp"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "model/instance_names.hpp"

namespace tv::bugs::detail {

namespace {

// Forward all-reduces (sum) over a tensor-parallel group.
std::vector<Site> tpForwardAllReduces(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.kind(o) == "all_reduce" && v.reduce(o) == "sum" && !v.g.ops[o].acrossReplicas && v.tensorParallelGroup(v.group(o)) &&
            v.sourcePhase(o) == Phase::Forward)
            out.push_back(makeSite(v, {o}));
    prefer(out, "feed_forward");
    return out;
}

std::string toIdentity(Editor& e, const Site& s) {
    collectiveToIdentities(e, e.v.find(s.ops[0]));
    return "the all-reduce " + s.ops[0] + " became one identity per member (ranks " + joinRanks(s.ranks) + "): each keeps its partial sum";
}

std::string dropOp(Editor& e, const Site& s) {
    e.removeOp(e.v.find(s.ops[0]));
    return "the all-reduce " + s.ops[0] + " was deleted; its outputs are still read but nothing writes them";
}

std::string allReduceAsAllGather(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    e.op(o)["op"] = "all_gather";
    e.op(o)["attrs"] = json{{"dim", 0}};
    e.edited(o);
    return "the all-reduce " + s.ops[0] + " became an all-gather along dim 0";
}

std::vector<Site> recvCollectives(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        const auto k = v.kind(o);
        if (!((k == "all_reduce" && v.reduce(o) == "sum") || k == "all_gather") || v.g.ops[o].acrossReplicas ||
            !v.tensorParallelGroup(v.group(o)))
            continue;
        bool received = false;
        for (auto t : v.g.inputs(o))
            if (auto pr = v.producer(t); pr != kNone && v.kind(pr) == "send_recv") received = true;
        if (received) out.push_back(makeSite(v, {o}));
    }
    return out;
}

std::string swapRecvCollective(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    const bool wasReduce = e.v.kind(o) == "all_reduce";
    e.op(o)["op"] = wasReduce ? "all_gather" : "all_reduce";
    e.op(o)["attrs"] = wasReduce ? json{{"dim", 0}} : json{{"reduce", "sum"}};
    e.edited(o);
    return "the " + std::string(wasReduce ? "all-reduce " : "all-gather ") + s.ops[0] + " that completes a received activation became an " +
           (wasReduce ? "all-gather along dim 0" : "all-reduce");
}

std::vector<Site> tpBackwardAllReduces(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.kind(o) == "all_reduce" && v.reduce(o) == "sum" && !v.g.ops[o].acrossReplicas && v.tensorParallelGroup(v.group(o)) &&
            v.sourcePhase(o) == Phase::Backward && !v.feedsOptimizer(o, 3))
            out.push_back(makeSite(v, {o}));
    prefer(out, "grad_sum");
    return out;
}

/// Whether two sends' payloads certainly differ, so that crossing them is a bug: shards of one
/// record, pieces one all-gather concatenates, or values of two replicas that depend on their own
/// part of the batch. Partial sums received into one sum, and copies, are interchangeable.
bool distinctPayloads(const View& v, OpId a, OpId b) {
    const auto ia = v.g.inputs(a)[0], ib = v.g.inputs(b)[0];
    const auto oa = v.g.outputs(a)[0], ob = v.g.outputs(b)[0];
    if (v.sameSlice(ia, ib) || v.sameSlice(oa, ob)) return false;
    for (auto c : v.g.consumers(oa)) {
        if (v.kind(c) != "all_reduce") continue;
        for (auto t : v.g.inputs(c))
            if (t == ob) return false;
    }
    if (v.differentSlices(ia, ib) || v.differentSlices(oa, ob)) return true;
    for (auto c : v.g.consumers(oa)) {
        if (v.kind(c) != "all_gather") continue;
        for (auto t : v.g.inputs(c))
            if (t == ob) return true;
    }
    const auto &ga = v.group(a), &gb = v.group(b);
    return v.coord(ga[0], Axis::DP) != v.coord(gb[0], Axis::DP) && v.perReplicaData(ia) && v.perReplicaData(ib);
}

std::vector<Site> crossedSendPairs(const View& v) {
    std::map<std::tuple<std::int32_t, std::int32_t, std::int32_t, std::string>, std::vector<OpId>> buckets;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.kind(o) != "send_recv") continue;
        const auto& grp = v.group(o);
        const auto src = v.coord(grp[0], Axis::PP), dst = v.coord(grp[1], Axis::PP);
        if (src == dst) continue;
        const auto in = v.g.inputs(o)[0];
        buckets[{src, dst, v.g.tensors[in].microbatch, shapeToString(v.shape(in))}].push_back(o);
    }
    std::vector<Site> out;
    for (const auto& [key, sends] : buckets) {
        for (std::size_t i = 0; i < sends.size(); ++i)
            for (std::size_t j = i + 1; j < sends.size(); ++j) {
                const auto a = sends[i], b = sends[j];
                const auto &ga = v.group(a), &gb = v.group(b);
                if (ga[0] == gb[0] || ga[1] == gb[1] || !distinctPayloads(v, a, b)) continue;
                out.push_back(makeSite(v, {a, b}, "sends " + std::to_string(ga[0]) + "→" + std::to_string(ga[1]) + " and " +
                                                      std::to_string(gb[0]) + "→" + std::to_string(gb[1])));
                if (out.size() >= 64) break;
            }
    }
    // The peers of one send (one stem) first: the mapping the paper's case crosses.
    std::stable_partition(out.begin(), out.end(), [](const Site& s) { return instance::withoutRank(s.ops[0]) == instance::withoutRank(s.ops[1]); });
    return out;
}

std::string crossSends(Editor& e, const Site& s) {
    auto a = e.v.find(s.ops[0]), b = e.v.find(s.ops[1]);
    auto& ja = e.op(a);
    auto& jb = e.op(b);
    std::swap(ja["group"][1], jb["group"][1]);
    std::swap(ja["outputs"], jb["outputs"]);
    e.edited(a);
    e.edited(b);
    return "the sends " + s.ops[0] + " and " + s.ops[1] + " deliver to each other's receivers (ranks " +
           std::to_string(ja["group"][1].get<int>()) + " and " + std::to_string(jb["group"][1].get<int>()) + ")";
}

/// Whether a tensor is, through identities, collectives and accumulations, a weight-gradient
/// output (output 1 or later) of a normalization's backward.
bool fromNormWeightGrad(const View& v, TensorId t, int depth) {
    for (; depth > 0; --depth) {
        auto pr = v.producer(t);
        if (pr == kNone) return false;
        const auto k = v.kind(pr);
        if (k == "rmsnorm_backward" || k == "layernorm_backward") {
            const auto outs = v.g.outputs(pr);
            return std::find(outs.begin(), outs.end(), t) != outs.begin() && std::find(outs.begin(), outs.end(), t) != outs.end();
        }
        const auto ins = v.g.inputs(pr);
        if (ins.empty()) return false;
        if (v.collective(pr)) {
            const auto outs = v.g.outputs(pr);
            auto pos = static_cast<std::size_t>(std::find(outs.begin(), outs.end(), t) - outs.begin());
            t = ins[std::min(pos, ins.size() - 1)];
        } else if (k == "identity" || k == "mul_scalar") {
            t = ins[0];
        } else if (k == "add") {
            t = ins[ins.size() - 1];
        } else {
            return false;
        }
    }
    return false;
}

std::vector<Site> normGradAllReduces(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.kind(o) == "all_reduce" && v.reduce(o) == "sum" && !v.g.ops[o].acrossReplicas && v.tensorParallelGroup(v.group(o)) &&
            fromNormWeightGrad(v, v.g.inputs(o)[0], 8))
            out.push_back(makeSite(v, {o}));
    return out;
}

std::string normGradNotReduced(Editor& e, const Site& s) {
    collectiveToIdentities(e, e.v.find(s.ops[0]));
    return "the all-reduce " + s.ops[0] + " of a norm weight's gradient over the tensor-parallel group became an identity (ranks " +
           joinRanks(s.ranks) + ")";
}

std::vector<Site> replicaGatherPairs(const View& v) {
    std::vector<Site> out;
    std::vector<OpId> gathers;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.kind(o) == "all_gather" && v.group(o).size() >= 2) gathers.push_back(o);
    for (std::size_t i = 0; i < gathers.size(); ++i)
        for (std::size_t j = i + 1; j < gathers.size(); ++j) {
            const auto a = gathers[i], b = gathers[j];
            const auto &ga = v.group(a), &gb = v.group(b);
            if (ga.size() != gb.size() || v.attrs(a) != v.attrs(b)) continue;
            bool shifted = v.coord(ga[0], Axis::DP) != v.coord(gb[0], Axis::DP);
            for (std::size_t k = 0; k < ga.size() && shifted; ++k)
                shifted = v.sameOn(ga[k], gb[k], {Axis::TP, Axis::PP, Axis::SP, Axis::CP, Axis::EP}) && ga[k] != gb[k];
            if (!shifted) continue;
            const auto ia = v.g.inputs(a)[1], ib = v.g.inputs(b)[1];
            if (v.shape(ia) != v.shape(ib) || v.sameSlice(ia, ib) || !v.perReplicaData(ia) || !v.perReplicaData(ib)) continue;
            out.push_back(makeSite(v, {a, b}, "all-gathers over ranks " + joinRanks(ga) + " and " + joinRanks(gb)));
        }
    prefer(out, "expert");
    return out;
}

std::string gatherWrongGroup(Editor& e, const Site& s) {
    auto a = e.v.find(s.ops[0]), b = e.v.find(s.ops[1]);
    auto& ja = e.op(a);
    auto& jb = e.op(b);
    for (const char* key : {"group", "inputs", "outputs"}) std::swap(ja[key][1], jb[key][1]);
    e.edited(a);
    e.edited(b);
    return "the all-gathers " + s.ops[0] + " and " + s.ops[1] + " exchanged their second members: each gathers over a group that spans two replicas";
}

std::vector<Site> allToAlls(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.kind(o) == "all_to_all" && v.group(o).size() >= 2) out.push_back(makeSite(v, {o}));
    prefer(out, "moe");
    return out;
}

std::string reverseGroup(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    auto& j = e.op(o);
    for (const char* key : {"group", "inputs", "outputs"}) std::reverse(j[key].begin(), j[key].end());
    e.edited(o);
    return "the " + std::string(e.v.kind(o)) + " " + s.ops[0] + " lists its members in reverse order, so every chunk goes to the wrong member";
}

std::vector<Site> maxAllReduces(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.kind(o) == "all_reduce" && v.reduce(o) == "max") out.push_back(makeSite(v, {o}));
    return out;
}

std::string dropMax(Editor& e, const Site& s) {
    const auto& v = e.v;
    auto o = v.find(s.ops[0]);
    const auto ins = v.g.inputs(o);
    const auto outs = v.g.outputs(o);
    e.removeOp(o);
    for (std::size_t k = 0; k < outs.size(); ++k) {
        e.rewire(outs[k], v.tensorName(ins[k]));
        if (v.where(outs[k]).record < 0) e.removeTensor(outs[k]);
    }
    return "the cross-entropy's max all-reduce " + s.ops[0] + " was removed: each rank subtracts its own shard's maximum";
}

}  // namespace

void appendCommunicationEntries(std::vector<Entry>& out) {
    using FK = FailureKind;
    const std::initializer_list<Entry> rows = {
        {{"tp-allreduce-identity", Category::Communication, "a row-parallel layer's forward all-reduce is a no-op, each rank keeps its partial sum", 1, "tensor parallelism"},
         Form::Stored, {FK::Counterexample}, needsTp, "no forward all-reduce over a tensor-parallel group", tpForwardAllReduces, toIdentity},
        {{"tp-allreduce-dropped", Category::Communication, "a row-parallel layer's forward all-reduce is deleted along with its dataflow", 2, "tensor parallelism"},
         Form::Stored, {FK::DataflowBroken}, needsTp, "no forward all-reduce over a tensor-parallel group", tpForwardAllReduces, dropOp},
        {{"tp-allreduce-as-allgather", Category::Communication, "gather_from_tensor_parallel called where reduce_from_tensor_parallel was needed", 3, "tensor parallelism"},
         Form::Stored, {}, needsTp, "no forward all-reduce over a tensor-parallel group", tpForwardAllReduces, allReduceAsAllGather},
        {{"pp-recv-collective-swapped", Category::Communication, "the collective completing an activation received from the previous stage is the wrong one", 4, "pipeline and tensor parallelism"},
         Form::Stored, {}, needsPpTp, "no tensor-parallel collective reads a received activation", recvCollectives, swapRecvCollective},
        {{"tp-bwd-allreduce-identity", Category::Communication, "the backward all-reduce of a column-parallel layer's input gradient is skipped", 5, "tensor parallelism"},
         Form::Stored, {FK::Counterexample}, needsTp, "no backward all-reduce of an activation gradient over a tensor-parallel group", tpBackwardAllReduces, toIdentity},
        {{"pp-send-crossed", Category::RankAssignment, "wrong pipeline peer mapping: two stage-boundary sends deliver to each other's receivers", 6, "pipeline parallelism"},
         Form::StoredThenWrittenOut, {FK::Counterexample, FK::LaneMisalignment}, needsPp,
         "every pair of sends between two stages carries parts or copies of one value, so crossing them is harmless (generate with --sp or --dp 2)",
         crossedSendPairs, crossSends},
        {{"sp-norm-grad-not-reduced", Category::Communication, "norm weights without Megatron's sequence_parallel flag: their gradients are not all-reduced over the tensor-parallel group", 0, "tensor (and sequence) parallelism"},
         Form::Stored, {FK::Counterexample}, needsTp, "no all-reduce of a norm weight's gradient over a tensor-parallel group (generate with --tp 2 --sp)", normGradAllReduces, normGradNotReduced},
        {{"ep-allgather-wrong-group", Category::Communication, "a mis-assigned expert-parallel group: the expert all-gather spans two data-parallel replicas", 0, "expert and data parallelism"},
         Form::WrittenOut, {FK::Counterexample}, needsDp, "no pair of all-gathers in two replicas over data that differs between them (each replica's part of the batch)", replicaGatherPairs, gatherWrongGroup},
        {{"all-to-all-wrong-order", Category::Communication, "the expert dispatch all-to-all with its split list in the wrong order", 0, "an all-to-all (expert or sequence parallelism)"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no all_to_all over two or more ranks (generate a MoE model with --ep 2 --sp)", allToAlls, reverseGroup},
        {{"vocab-ce-max-not-reduced", Category::Communication, "vocab-parallel cross-entropy without its max all-reduce", 0, "a vocab-parallel cross-entropy"},
         Form::Stored, {FK::Counterexample, FK::DataflowBroken}, needsTp, "no max all-reduce (vocab-parallel cross-entropy)", maxAllReduces, dropMax},
    };
    out.insert(out.end(), rows);
}

}  // namespace tv::bugs::detail
