// Expert parallelism over the data-parallel replicas (Megatron-Core's and DeepSeek's layout): the
// routed experts split over groups of `ep` consecutive replicas, the tokens dispatched to the
// replica holding their experts and combined back by all-to-all over the group, each expert's
// gradient reduced over the dp / ep replicas holding the same experts (the expert-data-parallel
// group), ZeRO splitting the experts' state over that group, and sums over the experts (a squared
// gradient norm) all-reduced over the expert-parallel group. The lane states are in
// parallelizer_detail.hpp (EpShard, EpTokens, EpPartial, EpSum); the op placement that leads
// here is pickExpertLane (parallelizer_ops.cpp).
//
// Stored, the plan lists one expert-parallel group (the first `ep` replicas: plan-format.md §7,
// "listed"): its all-to-alls are ordinary collectives of the listed ranks, and only the
// expert-data-parallel reductions span the stored groups (across_replicas, listing the one rank).
#include "generate/parallelizer_detail.hpp"

namespace tv::gen::detail {

void Parallelizer::collectiveOverReplicas(const Version& src, const Version& dst, const std::vector<std::vector<int>>& groups, bool perLane,
                                          const std::string& name, const std::string& kind, const json& attrs, const json& extra,
                                          const std::function<std::string(int, int, int)>& input) {
    const int lanesPer = perLane ? listedMb : 1;
    for (const auto& members : groups)
        for (int m = 0; m < lanesPer; ++m)
            for (int g = 0; g < G(); ++g) {
                std::vector<int> group;
                std::vector<std::string> ins, outs;
                for (int k2 : members) {
                    group.push_back(rankOf(k2, src.stage, g));
                    ins.push_back(input(k2, m, g));
                    outs.push_back(dst.inst[static_cast<std::size_t>((k2 * lanesPer + m) * G() + g)]);
                }
                const int mb = perLane ? laneM(dst.pl, members[0] * lanesPer + m) : -1;
                const auto suffix = perLane ? instanceSuffix(mb, group[0]) : "@r" + std::to_string(group[0]);
                emitCollective(name + suffix, kind, group, mb, src.logical, ins, outs, attrs, extra);
            }
}

/// The expert-parallel groups of the listed replicas, and the expert-data-parallel groups (one
/// per expert part: the listed replicas holding it).
std::vector<std::vector<int>> Parallelizer::epGroups() const {
    std::vector<std::vector<int>> out;
    for (int kk = 0; kk < listedDp; kk += std::min(C.ep, listedDp)) out.push_back(epGroupOf(kk));
    return out;
}
std::vector<std::vector<int>> Parallelizer::edpGroups() const {
    std::vector<std::vector<int>> out;
    for (int kk = 0; kk < std::min(C.ep, listedDp); ++kk) out.push_back(edpGroupOf(kk));
    return out;
}

/// The version of vi in placement p if one exists (-1 otherwise).
int Parallelizer::cached(const Version& src, const Placement& p) const {
    auto it = cache.find(placementKey(src.logical, src.stage, p));
    return it == cache.end() ? -1 : it->second;
}

int Parallelizer::epDispatch(int vi, AxisState to) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = to;
    if (int c = cached(src, p); c >= 0) return c;
    int nv = newVersion(src.logical, src.stage, p, lt(src.logical).name + ".dispatched");
    // Member j of a group receives part j (its experts) of every member's tokens, in member order.
    collectiveOverReplicas(src, versions[static_cast<std::size_t>(nv)], epGroups(), true, lt(src.logical).name + ".ep_dispatch", "all_to_all",
                           json{{"split_dim", to.dim}, {"concat_dim", to.dim2}}, acrossFlags(false, true),
                           [&](int k2, int m, int g) { return src.inst[static_cast<std::size_t>((k2 * listedMb + m) * G() + g)]; });
    return nv;
}

int Parallelizer::epCombine(int vi) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::shard(src.pl.lane.dim2);
    if (int c = cached(src, p); c >= 0) return c;
    int nv = newVersion(src.logical, src.stage, p, lt(src.logical).name + ".combined");
    // Member i gets back its tokens (part i along the tokens) from every member's experts.
    collectiveOverReplicas(src, versions[static_cast<std::size_t>(nv)], epGroups(), true, lt(src.logical).name + ".ep_combine", "all_to_all",
                           json{{"split_dim", src.pl.lane.dim2}, {"concat_dim", src.pl.lane.dim}}, acrossFlags(false, true),
                           [&](int k2, int m, int g) { return src.inst[static_cast<std::size_t>((k2 * listedMb + m) * G() + g)]; });
    return nv;
}

int Parallelizer::epReduce(int vi, AxisState to) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    const int edp = C.dp / C.ep;
    Placement p = src.pl;
    p.lane = to;
    p.coeff = src.pl.coeff * Rational(edp);  // a mean over the expert-data-parallel replicas
    if (int c = cached(src, p); c >= 0) return c;
    const auto& name = lt(src.logical).name;
    if (edp == 1 && listedMb == 1 && !compactMicrobatches()) {
        // One lane per replica and no other replica holding its experts: each lane's part already
        // is the replica's (the partial record says so too), nothing to add.
        cache[placementKey(src.logical, src.stage, p)] = vi;
        return vi;
    }
    Placement whole = p;
    whole.lane = AxisState::epShard(to.dim);
    const auto acc = accumulateMicrobatches(src, localShape(src.logical, whole));
    if (edp == 1) return adoptAccumulated(src, p, acc);  // each replica holds the only copy of its experts
    const bool scatter = to.dim2 >= 0;
    int nv = newVersion(src.logical, src.stage, p, name + (scatter ? ".edp_scattered" : ".edp_reduced"));
    const json extra = listedDp < C.dp ? json{{"across_replicas", true}} : json::object();
    auto accumulated = [&](int k2, int, int g) { return acc[static_cast<std::size_t>(k2)][static_cast<std::size_t>(g)]; };
    if (scatter)
        collectiveOverReplicas(src, versions[static_cast<std::size_t>(nv)], edpGroups(), false, name + ".edp_reduce_scatter", "reduce_scatter",
                               json{{"dim", to.dim2}, {"reduce", "mean"}}, extra, accumulated);
    else
        collectiveOverReplicas(src, versions[static_cast<std::size_t>(nv)], edpGroups(), false, name + ".edp_allreduce", "all_reduce",
                               json{{"reduce", "mean"}}, extra, accumulated);
    return nv;
}

int Parallelizer::edpChunk(int vi, int dim) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::epShard(src.pl.lane.dim, dim);
    if (int c = cached(src, p); c >= 0) return c;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".edp_part");
    // Stored, the listed group takes part 0 and stored group u takes part u.
    const json extra = listedDp < C.dp ? json{{"index_from_replica", true}} : json::object();
    for (int kk = 0; kk < listedDp; ++kk)
        for (int g = 0; g < G(); ++g) {
            const int rank = rankOf(kk, src.stage, g);
            const auto i = static_cast<std::size_t>(kk * G() + g);
            emitLocal(name + ".edp_chunk@r" + std::to_string(rank), "chunk", rank, -1, phaseOf(src.logical), {src.inst[i]},
                      {versions[static_cast<std::size_t>(nv)].inst[i]}, json{{"dim", dim}, {"parts", C.dp / C.ep}, {"index", kk / C.ep}}, extra);
        }
    return nv;
}

int Parallelizer::edpGather(int vi) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::epShard(src.pl.lane.dim);
    if (int c = cached(src, p); c >= 0) return c;
    int nv = newVersion(src.logical, src.stage, p, lt(src.logical).name + ".edp_gathered");
    collectiveOverReplicas(src, versions[static_cast<std::size_t>(nv)], edpGroups(), false, lt(src.logical).name + ".edp_all_gather", "all_gather",
                           json{{"dim", src.pl.lane.dim2}}, listedDp < C.dp ? json{{"across_replicas", true}} : json::object(),
                           [&](int k2, int, int g) { return src.inst[static_cast<std::size_t>(k2 * G() + g)]; });
    return nv;
}

int Parallelizer::epGather(int vi) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::rep();
    if (int c = cached(src, p); c >= 0) return c;
    int nv = newVersion(src.logical, src.stage, p, lt(src.logical).name + ".ep_gathered");
    collectiveOverReplicas(src, versions[static_cast<std::size_t>(nv)], epGroups(), false, lt(src.logical).name + ".ep_all_gather", "all_gather",
                           json{{"dim", src.pl.lane.dim}}, acrossFlags(false, true),
                           [&](int k2, int, int g) { return src.inst[static_cast<std::size_t>(k2 * G() + g)]; });
    return nv;
}

int Parallelizer::epChunk(int vi, int dim) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::epShard(dim);
    if (int c = cached(src, p); c >= 0) return c;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".ep_part");
    for (int kk = 0; kk < listedDp; ++kk)
        for (int g = 0; g < G(); ++g) {
            const int rank = rankOf(kk, src.stage, g);
            const auto i = static_cast<std::size_t>(kk * G() + g);
            emitLocal(name + ".ep_chunk@r" + std::to_string(rank), "chunk", rank, -1, phaseOf(src.logical), {src.inst[i]},
                      {versions[static_cast<std::size_t>(nv)].inst[i]}, json{{"dim", dim}, {"parts", C.ep}, {"index", kk % C.ep}},
                      membersOnce ? json{{"index_from_member", true}} : json::object());
        }
    return nv;
}

int Parallelizer::epAllReduce(int vi) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::rep();
    if (int c = cached(src, p); c >= 0) return c;
    int nv = newVersion(src.logical, src.stage, p, lt(src.logical).name + ".ep_reduced");
    collectiveOverReplicas(src, versions[static_cast<std::size_t>(nv)], epGroups(), false, lt(src.logical).name + ".ep_allreduce", "all_reduce",
                           json{{"reduce", "sum"}}, acrossFlags(false, true), [&](int k2, int, int g) { return src.inst[static_cast<std::size_t>(k2 * G() + g)]; });
    return nv;
}

}  // namespace tv::gen::detail
