// The parallelizer's construction and run: every logical op in order (ring attention cores as a
// whole), the plan's parallel member, and the order of each rank's program by the pipeline
// schedule; and the public entry point. The rest is split by concept (parallelizer_detail.hpp
// lists the files).
#include "generate/parallelizer.hpp"

#include <algorithm>

#include "generate/parallelizer_detail.hpp"

namespace tv::gen {

namespace detail {

Parallelizer::Parallelizer(const LogicalModel& m, const ParallelConfig& c) : M(m), C(c) {
    L = c.dp * c.microbatches;
    // Stored, the plan lists one replica; with expert parallelism over the replicas, member 0 of
    // the first expert-parallel group ("members": plan-format.md §7.3). Both stored forms come
    // with the microbatches stored once (when there are several), so lane 0 is one batch block.
    listedMb = c.compactMicrobatches ? 1 : c.microbatches;
    membersOnce = c.ep > 1 && (c.compactReplicas || c.compactMicrobatches);
    listedDp = membersOnce ? 1 : c.compactReplicas ? std::max(1, c.ep) : c.dp;
    // Context parallelism with its K/V all-gathered: every cp member runs one program on its part
    // of the sequence, so with the replicas stored once member 0 stands for the group. (Ring
    // attention's steps differ by member: which block arrives, which mask block it meets.)
    cpMembersOnce = c.cp > 1 && !c.cpRing && !membersOnce && (listedDp < c.dp || listedMb < c.microbatches);
    listedCp = cpMembersOnce ? 1 : c.cp;
    // Layers split over the stages as evenly as they go: the first (layers mod pp) stages
    // take one layer more (126 layers over 16 stages: 14 stages of 8, then 2 of 7).
    for (int s = 0; s < c.pp; ++s) {
        const int n = m.headLayer / c.pp + (s < m.headLayer % c.pp ? 1 : 0);
        for (int k = 0; k < n; ++k) stageOfLayer.push_back(s);
    }
    produced.assign(m.tensors.size(), -1);
    initialOf.assign(m.tensors.size(), {});
    desired.assign(m.tensors.size(), AxisState::rep());
    isData.assign(m.tensors.size(), false);
}

json Parallelizer::run() {
    for (int t : M.dataInputs) isData[static_cast<std::size_t>(t)] = true;
    computeDesired();
    if (C.cpRing && cpAxis()) findRingAttention();
    for (std::size_t i = 0; i < M.ops.size(); ++i) {
        if (M.ops[i].dead) continue;
        if (auto it = ringOps.find(static_cast<int>(i)); it != ringOps.end()) {
            const auto& ra = rings[static_cast<std::size_t>(it->second.first)];
            if (it->second.second) (M.ops[i].phase == Phase::Forward ? ringAttentionForward(ra) : ringAttentionBackward(ra));
            continue;
        }
        processOp(static_cast<int>(i));
    }
    // ZeRO-1/2: every replica gathers the updated weights; ZeRO-3 keeps them split.
    if (C.zero == 1 || C.zero == 2)
        for (const auto& o : M.ops)
            if (!o.dead && (o.kind == "adamw" || o.kind == "sgd"))
                for (int t : o.outputs)
                    if (lt(t).role == Role::Weight) {
                        const auto& lane = versions[static_cast<std::size_t>(produced[static_cast<std::size_t>(t)])].pl.lane;
                        if (lane.st == St::DpShard) produced[static_cast<std::size_t>(t)] = dpGather(produced[static_cast<std::size_t>(t)]);
                        else if (lane.st == St::EpShard && lane.dim2 >= 0) produced[static_cast<std::size_t>(t)] = edpGather(produced[static_cast<std::size_t>(t)]);
                    }
    orderBySchedule();
    json par{{"mesh", json::object()}, {"microbatches", C.microbatches}, {"tensors", ptensors}, {"ops", pops}};
    if (C.dp > 1) par["mesh"]["dp"] = C.dp;
    if (C.tp > 1) par["mesh"]["tp"] = C.tp;
    if (C.cp > 1) par["mesh"]["cp"] = C.cp;
    if (C.pp > 1) par["mesh"]["pp"] = C.pp;
    if (C.cp > 1) {
        // A mesh with cp lists its ranks: dp outermost, then pp, then cp, then tp (as rankOf numbers them).
        json ranks = json::array();
        for (int k = 0; k < C.dp; ++k)
            for (int s = 0; s < C.pp; ++s)
                for (int c = 0; c < C.cp; ++c)
                    for (int t = 0; t < C.tp; ++t) {
                        json r{{"rank", ranks.size()}, {"cp", c}};
                        if (C.dp > 1) r["dp"] = k;
                        if (C.pp > 1) r["pp"] = s;
                        if (C.tp > 1) r["tp"] = t;
                        ranks.push_back(std::move(r));
                    }
        par["ranks"] = std::move(ranks);
    }
    if (compact()) par["replicas"] = json{{"axis", "dp"}};
    if (compact() && listedDp > 1) par["replicas"]["listed"] = listedDp;
    if (membersOnce) par["replicas"]["members"] = C.ep;
    if (cpMembersOnce) {
        par["replicas"]["members"] = C.cp;
        par["replicas"]["member_axis"] = "cp";
    }
    if (compactMicrobatches()) par["replicas"]["microbatches"] = true;
    return json{{"logical", logicalJson()}, {"parallel", par}, {"lineage", lineage()}};
}

/// Orders each rank's program by the pipeline schedule: GPipe runs every microbatch's forward, then
/// every backward; 1F1B warms up with (stages - stage - 1) forwards, then alternates one forward
/// and one backward. Ops outside microbatches (reducers, optimizer) come last. File order is
/// descriptive (the verifier follows dataflow), but it is the order a reader of the plan expects.
void Parallelizer::orderBySchedule() {
    const int nm = C.microbatches;
    auto slot = [&](int stage, bool backward, int m) {
        if (C.schedule == "gpipe") return backward ? nm + m : m;
        int warm = std::min(C.pp - stage - 1, nm);
        // The position of F(m) / B(m) in: F0..F(warm-1), then F(warm+i) B(i) for i, then the remaining B.
        if (!backward) return m < warm ? m : warm + 2 * (m - warm);
        int i = m;
        if (i < nm - warm) return warm + 2 * i + 1;
        return warm + 2 * (nm - warm) + (i - (nm - warm));
    };
    auto stageOfRank = [&](int rank) { return (rank / (C.tp * C.cp)) % C.pp; };
    std::vector<std::pair<std::int64_t, std::size_t>> keys;
    for (std::size_t i = 0; i < pops.size(); ++i) {
        const auto& o = pops[i];
        int rank = o.contains("rank") ? o["rank"].get<int>() : o["group"].back().get<int>();
        const auto& meta = opMeta[i];
        std::int64_t s = meta.microbatch < 0 ? 4 * nm + 4 : slot(stageOfRank(rank), meta.backward, meta.microbatch);
        keys.emplace_back(s, i);
    }
    std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    json sorted = json::array();
    for (const auto& [s, i] : keys) sorted.push_back(std::move(pops[i]));
    pops = std::move(sorted);
}

}  // namespace detail

nlohmann::json parallelize(const LogicalModel& model, const ParallelConfig& cfg) {
    detail::Parallelizer p(model, cfg);
    return p.run();
}

}  // namespace tv::gen
