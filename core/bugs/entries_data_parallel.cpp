// The catalog's data-parallel and optimizer entries (Category::DataParallel,
// Category::Optimizer): gradient reducers that sum instead of averaging or average twice, ZeRO
// shards updated with another shard's gradient, and an optimizer step on unreduced gradients.
// Each entry's site finder and edit, then the rows (bug_catalog.cpp puts them in the catalog's
// order).
#include "bugs/catalog_detail.hpp"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace tv::bugs::detail {

namespace {

/// Gradient reducers: mean all-reduces across data-parallel replicas.
std::vector<Site> dpReducers(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.kind(o) == "all_reduce" && v.reduce(o) == "mean" && (v.g.ops[o].acrossReplicas || v.dataParallelGroup(v.group(o))))
            out.push_back(makeSite(v, {o}));
    return out;
}

std::string sumNotMean(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    e.op(o)["attrs"]["reduce"] = "sum";
    e.edited(o);
    return "the gradient reducer " + s.ops[0] + " sums the replicas' gradients instead of averaging them";
}

std::string averageAgain(Editor& e, const Site& s) {
    const auto o = e.v.find(s.ops[0]);
    const auto degree = membersWrittenOut(e.v, o);
    scaleCollectiveOutputs(e, o, "1/" + std::to_string(degree), "average_again");
    return "the reduced gradient of " + s.ops[0] + " is divided by the " + std::to_string(degree) + " replicas a second time";
}

std::vector<Site> zeroShards(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        // With one stored group (every dp rank listed) no copy's index changes: nothing to break.
        if (v.g.ops[o].indexFromReplica && v.p.replication.degree > 1)
            out.push_back(makeSite(v, {o}, "chunk taking its replica's part on rank " + std::to_string(v.g.ops[o].rank)));
        else if (v.kind(o) == "reduce_scatter" && v.dataParallelGroup(v.group(o))) out.push_back(makeSite(v, {o}));
    }
    std::stable_partition(out.begin(), out.end(), [&](const Site& s) {
        auto o = v.find(s.ops[0]);
        return v.g.tensors[v.g.inputs(o)[0]].role == Role::Gradient || v.g.ops[o].phase == Phase::Backward;
    });
    return out;
}

std::string wrongShard(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    auto& j = e.op(o);
    if (e.v.g.ops[o].indexFromReplica) {
        j.erase("index_from_replica");
        e.edited(o);
        if (e.v.p.replication.listedDp > 1)
            return "the ZeRO shard " + s.ops[0] + " takes its listed rank's part in every stored group instead of its own group's part";
        return "the ZeRO shard " + s.ops[0] + " takes part 0 on every replica instead of its own replica's part";
    }
    for (const char* key : {"group", "inputs", "outputs"}) std::reverse(j[key].begin(), j[key].end());
    e.edited(o);
    return "the ZeRO reduce-scatter " + s.ops[0] + " lists the replicas in reverse order: each replica's optimizer gets another shard's gradient";
}

/// The gradient an optimizer op reads, before the collectives (and scalings) that reduce it.
TensorId unreducedGradient(const View& v, OpId opt) {
    const auto ins = v.g.inputs(opt);
    if (ins.size() < 2) return kNone;
    TensorId t = ins[1], found = kNone;
    for (int depth = 0; depth < 8; ++depth) {
        const auto pr = v.producer(t);
        if (pr == kNone) break;
        const auto k = v.kind(pr);
        const auto pins = v.g.inputs(pr);
        if (k == "all_reduce") {
            const auto outs = v.g.outputs(pr);
            auto pos = static_cast<std::size_t>(std::find(outs.begin(), outs.end(), t) - outs.begin());
            t = found = pins[pos];
        } else if ((k == "mul_scalar" || k == "identity") && !v.g.ops[pr].acrossMicrobatches) {
            t = pins[0];
        } else {
            break;
        }
    }
    if (found != kNone && v.shape(found) == v.shape(ins[1])) return found;
    return kNone;
}

std::vector<Site> optimizerSteps(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.g.ops[o].phase == Phase::Optimizer && unreducedGradient(v, o) != kNone) out.push_back(makeSite(v, {o}));
    return out;
}

std::string stepOnUnreduced(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    const auto g = unreducedGradient(e.v, o);
    e.op(o)["inputs"][1] = e.v.tensorName(g);
    e.edited(o);
    return "the optimizer step " + s.ops[0] + " reads the local gradient " + e.v.tensorName(g) + " before it is reduced";
}

}  // namespace

void appendDataParallelEntries(std::vector<Entry>& out) {
    using FK = FailureKind;
    const std::initializer_list<Entry> rows = {
        {{"dp-grad-not-averaged", Category::DataParallel, "per-replica mean losses whose gradients are summed, not averaged, across replicas", 0, "data parallelism"},
         Form::Stored, {FK::Counterexample}, needsDp, "no averaging gradient reducer across data-parallel replicas", dpReducers, sumNotMean},
        {{"dp-grad-averaged-twice", Category::DataParallel, "a loss already divided by the replicas whose gradients the reducer averages again", 0, "data parallelism"},
         Form::Stored, {FK::Counterexample}, needsDp, "no averaging gradient reducer across data-parallel replicas", dpReducers, averageAgain},
        {{"zero-shard-wrong-grad", Category::Optimizer, "ZeRO partition bookkeeping is off: a replica updates its shard with another shard's gradient", 0, "a ZeRO-sharded optimizer"},
         Form::StoredThenWrittenOut, {FK::Counterexample}, needsDp, "no ZeRO shard (chunk by replica) or reduce-scatter across replicas (generate with --zero 1, 2 or 3)", zeroShards, wrongShard},
        {{"optimizer-unreduced-grad", Category::Optimizer, "the optimizer steps on local, unreduced gradients (no_sync left on)", 0, "a gradient reduction before the optimizer"},
         Form::Stored, {FK::Counterexample, FK::DataflowBroken}, lacksNothing, "no optimizer step reading a gradient that an all-reduce produced", optimizerSteps, stepOnUnreduced},
    };
    out.insert(out.end(), rows);
}

}  // namespace tv::bugs::detail
