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

int Parallelizer::epDispatch(int vi, AxisState to) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = to;
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".dispatched");
    const auto& dst = versions[static_cast<std::size_t>(nv)];
    // Member j of a group receives part j (its experts) of every member's tokens, in member order.
    for (int kk = 0; kk < listedDp; kk += C.ep)
        for (int m = 0; m < listedMb; ++m)
            for (int g = 0; g < G(); ++g) {
                std::vector<int> group;
                std::vector<std::string> ins, outs;
                for (int k2 : epGroupOf(kk)) {
                    group.push_back(rankOf(k2, src.stage, g));
                    const auto i = static_cast<std::size_t>((k2 * listedMb + m) * G() + g);
                    ins.push_back(src.inst[i]);
                    outs.push_back(dst.inst[i]);
                }
                const int mb = laneM(p, kk * listedMb + m);
                emitCollective(name + ".ep_dispatch" + instanceSuffix(mb, group[0]), "all_to_all", group, mb, src.logical, ins, outs,
                               json{{"split_dim", to.dim}, {"concat_dim", to.dim2}});
            }
    return nv;
}

int Parallelizer::epCombine(int vi) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::shard(src.pl.lane.dim2);
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".combined");
    const auto& dst = versions[static_cast<std::size_t>(nv)];
    // Member i gets back its tokens (part i along the tokens) from every member's experts.
    for (int kk = 0; kk < listedDp; kk += C.ep)
        for (int m = 0; m < listedMb; ++m)
            for (int g = 0; g < G(); ++g) {
                std::vector<int> group;
                std::vector<std::string> ins, outs;
                for (int k2 : epGroupOf(kk)) {
                    group.push_back(rankOf(k2, src.stage, g));
                    const auto i = static_cast<std::size_t>((k2 * listedMb + m) * G() + g);
                    ins.push_back(src.inst[i]);
                    outs.push_back(dst.inst[i]);
                }
                const int mb = laneM(p, kk * listedMb + m);
                emitCollective(name + ".ep_combine" + instanceSuffix(mb, group[0]), "all_to_all", group, mb, src.logical, ins, outs,
                               json{{"split_dim", src.pl.lane.dim2}, {"concat_dim", src.pl.lane.dim}});
            }
    return nv;
}

int Parallelizer::epReduce(int vi, AxisState to) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    const int edp = C.dp / C.ep;
    Placement p = src.pl;
    p.lane = to;
    p.coeff = src.pl.coeff * Rational(edp);  // a mean over the expert-data-parallel replicas
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    if (edp == 1 && listedMb == 1 && !compactMicrobatches()) {
        // One lane per replica and no other replica holding its experts: each lane's part already
        // is the replica's (the partial record says so too), nothing to add.
        cache[k] = vi;
        return vi;
    }
    Placement whole = p;
    whole.lane = AxisState::epShard(to.dim);
    const auto acc = accumulateMicrobatches(src, localShape(src.logical, whole));
    if (edp == 1) {
        // Each replica holds the only copy of its experts: the accumulated gradients are its part.
        Version v;
        v.logical = src.logical;
        v.stage = src.stage;
        v.pl = p;
        for (int kk = 0; kk < listedDp; ++kk)
            for (int g = 0; g < G(); ++g) v.inst.push_back(acc[static_cast<std::size_t>(kk)][static_cast<std::size_t>(g)]);
        versions.push_back(std::move(v));
        const int id = static_cast<int>(versions.size()) - 1;
        cache[k] = id;
        return id;
    }
    const bool scatter = to.dim2 >= 0;
    int nv = newVersion(src.logical, src.stage, p, name + (scatter ? ".edp_scattered" : ".edp_reduced"));
    const json extra = listedDp < C.dp ? json{{"across_replicas", true}} : json::object();
    for (int kk = 0; kk < C.ep; ++kk)
        for (int g = 0; g < G(); ++g) {
            std::vector<int> group;
            std::vector<std::string> ins, outs;
            for (int k2 : edpGroupOf(kk)) {
                group.push_back(rankOf(k2, src.stage, g));
                ins.push_back(acc[static_cast<std::size_t>(k2)][static_cast<std::size_t>(g)]);
                outs.push_back(versions[static_cast<std::size_t>(nv)].inst[static_cast<std::size_t>(k2 * G() + g)]);
            }
            if (scatter)
                emitCollective(name + ".edp_reduce_scatter@r" + std::to_string(group[0]), "reduce_scatter", group, -1, src.logical, ins,
                               outs, json{{"dim", to.dim2}, {"reduce", "mean"}}, extra);
            else
                emitCollective(name + ".edp_allreduce@r" + std::to_string(group[0]), "all_reduce", group, -1, src.logical, ins, outs,
                               json{{"reduce", "mean"}}, extra);
        }
    return nv;
}

int Parallelizer::edpChunk(int vi, int dim) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::epShard(src.pl.lane.dim, dim);
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
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
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".edp_gathered");
    const json extra = listedDp < C.dp ? json{{"across_replicas", true}} : json::object();
    for (int kk = 0; kk < C.ep; ++kk)
        for (int g = 0; g < G(); ++g) {
            std::vector<int> group;
            std::vector<std::string> ins, outs;
            for (int k2 : edpGroupOf(kk)) {
                group.push_back(rankOf(k2, src.stage, g));
                ins.push_back(src.inst[static_cast<std::size_t>(k2 * G() + g)]);
                outs.push_back(versions[static_cast<std::size_t>(nv)].inst[static_cast<std::size_t>(k2 * G() + g)]);
            }
            emitCollective(name + ".edp_all_gather@r" + std::to_string(group[0]), "all_gather", group, -1, src.logical, ins, outs,
                           json{{"dim", src.pl.lane.dim2}}, extra);
        }
    return nv;
}

int Parallelizer::epGather(int vi) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::rep();
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".ep_gathered");
    for (int kk = 0; kk < listedDp; kk += C.ep)
        for (int g = 0; g < G(); ++g) {
            std::vector<int> group;
            std::vector<std::string> ins, outs;
            for (int k2 : epGroupOf(kk)) {
                group.push_back(rankOf(k2, src.stage, g));
                ins.push_back(src.inst[static_cast<std::size_t>(k2 * G() + g)]);
                outs.push_back(versions[static_cast<std::size_t>(nv)].inst[static_cast<std::size_t>(k2 * G() + g)]);
            }
            emitCollective(name + ".ep_all_gather@r" + std::to_string(group[0]), "all_gather", group, -1, src.logical, ins, outs,
                           json{{"dim", src.pl.lane.dim}});
        }
    return nv;
}

int Parallelizer::epChunk(int vi, int dim) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::epShard(dim);
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".ep_part");
    for (int kk = 0; kk < listedDp; ++kk)
        for (int g = 0; g < G(); ++g) {
            const int rank = rankOf(kk, src.stage, g);
            const auto i = static_cast<std::size_t>(kk * G() + g);
            emitLocal(name + ".ep_chunk@r" + std::to_string(rank), "chunk", rank, -1, phaseOf(src.logical), {src.inst[i]},
                      {versions[static_cast<std::size_t>(nv)].inst[i]}, json{{"dim", dim}, {"parts", C.ep}, {"index", kk % C.ep}});
        }
    return nv;
}

int Parallelizer::epAllReduce(int vi) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::rep();
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".ep_reduced");
    for (int kk = 0; kk < listedDp; kk += C.ep)
        for (int g = 0; g < G(); ++g) {
            std::vector<int> group;
            std::vector<std::string> ins, outs;
            for (int k2 : epGroupOf(kk)) {
                group.push_back(rankOf(k2, src.stage, g));
                ins.push_back(src.inst[static_cast<std::size_t>(k2 * G() + g)]);
                outs.push_back(versions[static_cast<std::size_t>(nv)].inst[static_cast<std::size_t>(k2 * G() + g)]);
            }
            emitCollective(name + ".ep_allreduce@r" + std::to_string(group[0]), "all_reduce", group, -1, src.logical, ins, outs,
                           json{{"reduce", "sum"}});
        }
    return nv;
}

}  // namespace tv::gen::detail
