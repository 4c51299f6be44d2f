// The catalog's expert-parallel entries (expert parallelism over the data-parallel replicas, as
// Megatron-Core and DeepSeek train): expert gradients scaled by the expert-parallel size twice or
// not at all (Megatron-LM PR #5956), a global gradient norm that leaves out the other ranks'
// experts (PR #5916), and expert gradients averaged over the wrong group of replicas. Each
// entry's site finder and edit, then the rows (bug_catalog.cpp puts them in the catalog's order).
#include "bugs/catalog_detail.hpp"

#include <initializer_list>
#include <string>
#include <vector>

namespace tv::bugs::detail {

namespace {

/// An expert gradient's reducer: a mean all-reduce over the replicas that hold the same experts,
/// a strict subset of the data-parallel ranks at its position (stored: listing fewer ranks than
/// the stored group's data-parallel ranks; written out: a data-parallel group smaller than dp).
bool expertReducer(const View& v, OpId o) {
    if (v.kind(o) != "all_reduce" || v.reduce(o) != "mean") return false;
    if (v.g.ops[o].acrossReplicas) return static_cast<std::int32_t>(v.group(o).size()) < v.p.replication.listedDp;
    const auto dp = static_cast<std::size_t>(v.p.mesh.at(Axis::DP));
    return v.dataParallelGroup(v.group(o)) && v.group(o).size() < dp;
}

/// The expert-parallel size: the data-parallel ranks over the replicas holding the same experts.
std::int64_t expertParallelSize(const View& v, OpId reducer) {
    return static_cast<std::int64_t>(v.p.mesh.at(Axis::DP)) / membersWrittenOut(v, reducer);
}

std::vector<Site> expertReducers(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (expertReducer(v, o)) out.push_back(makeSite(v, {o}));
    return out;
}

std::string scaledTwice(Editor& e, const Site& s) {
    const auto o = e.v.find(s.ops[0]);
    const auto ep = expertParallelSize(e.v, o);
    scaleCollectiveOutputs(e, o, "1/" + std::to_string(ep), "ep_scaled_again");
    return "the expert gradient reduced by " + s.ops[0] + " is divided by the expert-parallel size (" + std::to_string(ep) + ") a second time";
}

std::string notScaled(Editor& e, const Site& s) {
    const auto o = e.v.find(s.ops[0]);
    const auto ep = expertParallelSize(e.v, o);
    scaleCollectiveOutputs(e, o, std::to_string(ep), "ep_unscaled");
    return "the expert gradient reduced by " + s.ops[0] + " is not divided by the expert-parallel size (" + std::to_string(ep) +
           "): it is multiplied back";
}

/// Sums of squares over the experts: a sum all-reduce of scalars over ranks of different
/// data-parallel replicas (the members of an expert-parallel group) within one stored group.
std::vector<Site> expertNormReductions(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.kind(o) != "all_reduce" || v.reduce(o) != "sum" || v.g.ops[o].acrossReplicas || !v.dataParallelGroup(v.group(o))) continue;
        const auto ins = v.g.inputs(o);
        if (!ins.empty() && v.shape(ins[0]).empty()) out.push_back(makeSite(v, {o}));
    }
    return out;
}

std::string normWithoutOtherExperts(Editor& e, const Site& s) {
    collectiveToIdentities(e, e.v.find(s.ops[0]));
    return "the all-reduce " + s.ops[0] + " of the experts' squared gradient norm over the expert-parallel group became one identity per member "
           "(ranks " + joinRanks(s.ranks) + "): each rank's global norm leaves out the other members' experts";
}

/// Pairs of expert-gradient reducers at the same position, written out: two groups of replicas
/// holding the same experts (one each).
std::vector<Site> expertReducerPairs(const View& v) {
    std::vector<Site> out;
    std::vector<OpId> reducers;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (expertReducer(v, o) && !v.g.ops[o].acrossReplicas) reducers.push_back(o);
    for (std::size_t i = 0; i < reducers.size(); ++i)
        for (std::size_t j = i + 1; j < reducers.size(); ++j) {
            const auto a = reducers[i], b = reducers[j];
            const auto &ga = v.group(a), &gb = v.group(b);
            if (ga.size() != gb.size() || !v.sameOn(ga[0], gb[0], {Axis::TP, Axis::PP, Axis::CP}) || ga[0] == gb[0]) continue;
            if (v.shape(v.g.inputs(a)[0]) != v.shape(v.g.inputs(b)[0])) continue;
            out.push_back(makeSite(v, {a, b}));
            break;
        }
    return out;
}

std::string reducersOverExpertGroup(Editor& e, const Site& s) {
    const auto a = e.v.find(s.ops[0]), b = e.v.find(s.ops[1]);
    auto& ja = e.op(a);
    auto& jb = e.op(b);
    // The last member of the first group trades places with the first member of the second (its
    // group member of another expert part), with its gradient and its result.
    const auto last = ja["group"].size() - 1;
    for (const char* key : {"group", "inputs", "outputs"}) std::swap(ja[key][last], jb[key][0]);
    e.edited(a);
    e.edited(b);
    return "the expert-gradient reducers " + s.ops[0] + " and " + s.ops[1] +
           " trade a member: each averages the gradients of different experts (the expert-parallel group) instead of the replicas holding "
           "the same experts";
}

}  // namespace

void appendExpertParallelEntries(std::vector<Entry>& out) {
    using FK = FailureKind;
    const std::initializer_list<Entry> rows = {
        {{"ep-grad-scaled-twice", Category::Scaling, "expert gradients divided by the expert-parallel size twice (Megatron-LM PR #5956)", 0,
          "expert parallelism over data-parallel replicas"},
         Form::Stored, {FK::Counterexample}, needsDp, "no expert-gradient reducer over part of the data-parallel ranks (generate a MoE model with --ep dividing --dp)",
         expertReducers, scaledTwice},
        {{"ep-grad-not-scaled", Category::Scaling, "expert gradients never divided by the expert-parallel size (Megatron-LM PR #5956)", 0,
          "expert parallelism over data-parallel replicas"},
         Form::Stored, {FK::Counterexample}, needsDp, "no expert-gradient reducer over part of the data-parallel ranks (generate a MoE model with --ep dividing --dp)",
         expertReducers, notScaled},
        {{"ep-grad-norm-omits-experts", Category::Optimizer, "the global gradient norm under expert parallelism leaves out the other ranks' expert parameters (Megatron-LM PR #5916)", 0,
          "expert parallelism over data-parallel replicas and gradient clipping"},
         Form::Stored, {FK::Counterexample}, needsDp, "no all-reduce of the experts' squared gradient norm over an expert-parallel group (generate with --ep and --clip-grad)",
         expertNormReductions, normWithoutOtherExperts},
        {{"ep-grad-wrong-group", Category::DataParallel, "expert gradients averaged over the wrong replicas: ones holding other experts, not the expert-data-parallel group", 0,
          "expert parallelism over data-parallel replicas, with dp / ep of 2 or more"},
         Form::WrittenOut, {FK::Counterexample}, needsDp, "no two expert-gradient reducers at one position (generate with --ep dividing --dp at least twice)",
         expertReducerPairs, reducersOverExpertGroup},
    };
    out.insert(out.end(), rows);
}

}  // namespace tv::bugs::detail
