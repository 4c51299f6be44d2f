// Versions of logical tensors, the parallelizer's working state: a version is one placement of a
// logical tensor on one pipeline stage, with an instance tensor per lane and group member. Here
// are the versions' creation, the ops the parallelizer emits, and every conversion between
// placements with the ops it takes: pipeline send/recv between stages, the data-parallel gradient
// reducers, ZeRO's parts of the replicas, the tp and cp collectives, and rescaling by a
// coefficient.
#include "generate/parallelizer_detail.hpp"

#include <stdexcept>

namespace tv::gen::detail {

Shape Parallelizer::localShape(int logical, const Placement& p) const {
    Shape s = lt(logical).shape;
    if (p.lane.st == St::Shard) s[static_cast<std::size_t>(p.lane.dim)] /= L;
    if (p.lane.st == St::DpShard) s[static_cast<std::size_t>(p.lane.dim)] /= C.dp;
    if (p.lane.st == St::EpShard || p.lane.st == St::EpTokens || p.lane.st == St::EpPartial) s[static_cast<std::size_t>(p.lane.dim)] /= C.ep;
    if (p.lane.st == St::EpShard && p.lane.dim2 >= 0) s[static_cast<std::size_t>(p.lane.dim2)] /= C.dp / C.ep;
    if (p.lane.st == St::EpTokens) s[static_cast<std::size_t>(p.lane.dim2)] = s[static_cast<std::size_t>(p.lane.dim2)] / L * C.ep;
    if (p.tp.st == St::Shard) s[static_cast<std::size_t>(p.tp.dim)] /= C.tp;
    if (p.cp.st == St::Shard) s[static_cast<std::size_t>(p.cp.dim)] /= C.cp;
    return s;
}

std::string Parallelizer::uniqueName(std::unordered_set<std::string>& used, const std::string& base) {
    if (used.insert(base).second) return base;
    for (int n = 2;; ++n) {
        auto s = base + "." + std::to_string(n);
        if (used.insert(s).second) return s;
    }
}

int Parallelizer::newVersion(int logical, int stage, const Placement& p, const std::string& base, bool initial) {
    Version v;
    v.logical = logical;
    v.stage = stage;
    v.pl = p;
    v.initial = initial;
    const auto shape = localShape(logical, p);
    const auto& t = lt(logical);
    for (int l = 0; l < lanes(p); ++l)
        for (int g = 0; g < G(); ++g) {
            int rank = rankOf(laneK(p, l), stage, g);
            int m = laneM(p, l);
            auto name = tensorName(base + instanceSuffix(m, rank));
            json j{{"id", name}, {"shape", shape}, {"role", std::string(toString(t.role))}, {"rank", rank}};
            if (t.dtype == DType::Int) j["dtype"] = "int";
            if (m >= 0) j["microbatch"] = m;
            ptensors.push_back(std::move(j));
            v.inst.push_back(std::move(name));
        }
    versions.push_back(std::move(v));
    int id = static_cast<int>(versions.size()) - 1;
    cache[placementKey(logical, stage, p)] = id;
    return id;
}

void Parallelizer::emitLocal(const std::string& name, const std::string& kind, int rank, int m, Phase phase,
                             const std::vector<std::string>& ins, const std::vector<std::string>& outs, const json& attrs,
                             const json& extra) {
    json j{{"id", opName(name)}, {"op", kind}, {"rank", rank}, {"phase", phaseName(phase)}, {"inputs", ins}, {"outputs", outs}};
    for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
    if (m >= 0) j["microbatch"] = m;
    if (!attrs.empty()) j["attrs"] = attrs;
    pops.push_back(std::move(j));
    opMeta.push_back({m, phase != Phase::Forward});
}

void Parallelizer::emitCollective(const std::string& name, const std::string& kind, const std::vector<int>& group, int m,
                                  int logical, const std::vector<std::string>& ins, const std::vector<std::string>& outs,
                                  const json& attrs, const json& extra) {
    json j{{"id", opName(name)}, {"op", kind}, {"group", group}, {"inputs", ins}, {"outputs", outs}};
    for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
    if (m >= 0) j["microbatch"] = m;
    if (!attrs.empty()) j["attrs"] = attrs;
    pops.push_back(std::move(j));
    opMeta.push_back({m, phaseOf(logical) != Phase::Forward});
}

std::string Parallelizer::localTensor(const std::string& base, int rank, int m, const Shape& shape, Role role) {
    auto name = tensorName(base + instanceSuffix(m, rank));
    json j{{"id", name}, {"shape", shape}, {"role", std::string(toString(role))}, {"rank", rank}};
    if (m >= 0) j["microbatch"] = m;
    ptensors.push_back(std::move(j));
    return name;
}

Placement Parallelizer::initialPlacement(int t) const {
    Placement p;
    if (isData[static_cast<std::size_t>(t)] && laneAxis()) p.lane = AxisState::shard(M.batchDim);
    int d = M.placement[static_cast<std::size_t>(t)].tpShardDim;
    if (d >= 0 && tpAxis()) p.tp = AxisState::shard(d);
    // Context parallelism: the data loader gives each cp member its part of the sequence.
    if (cpAxis() && isData[static_cast<std::size_t>(t)] && M.seqDim >= 0 && static_cast<int>(lt(t).shape.size()) > M.seqDim &&
        lt(t).shape[static_cast<std::size_t>(M.seqDim)] == M.tensors[static_cast<std::size_t>(M.dataInputs[0])].shape[static_cast<std::size_t>(M.seqDim)])
        p.cp = AxisState::shard(M.seqDim);
    const auto role = lt(t).role;
    // Expert parallelism over the replicas: each holds its group member's experts, and ZeRO splits
    // their state over the replicas holding the same experts.
    if (const int e = M.placement[static_cast<std::size_t>(t)].expertDim; e >= 0 && epAxis()) {
        const int z = expertZeroDim(t);
        p.lane = AxisState::epShard(e, z >= 0 && (role == Role::OptimizerState || (C.zero == 3 && role == Role::Weight)) ? z : -1);
        return p;
    }
    // ZeRO: optimizer state (and with ZeRO-3 the weights too) is split over the replicas.
    if (int z = zeroDim(t); z >= 0 && (role == Role::OptimizerState || (C.zero == 3 && role == Role::Weight)))
        p.lane = AxisState::dpShard(z);
    return p;
}

int Parallelizer::source(int t, int stage) {
    if (produced[static_cast<std::size_t>(t)] >= 0) return fetch(produced[static_cast<std::size_t>(t)], stage);
    auto p = initialPlacement(t);
    auto k = placementKey(t, stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    int v = newVersion(t, stage, p, lt(t).name, true);
    initialOf[static_cast<std::size_t>(t)].push_back(v);
    return v;
}

int Parallelizer::fetch(int vi, int stage) {
    if (versions[static_cast<std::size_t>(vi)].stage == stage) return vi;
    const Version src = versions[static_cast<std::size_t>(vi)];
    auto k = placementKey(src.logical, stage, src.pl);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto base = lt(src.logical).name + ".recv";
    int nv = newVersion(src.logical, stage, src.pl, base);
    const auto& dst = versions[static_cast<std::size_t>(nv)];
    for (int l = 0; l < lanes(src.pl); ++l)
        for (int g = 0; g < G(); ++g) {
            int kk = laneK(src.pl, l), m = laneM(src.pl, l);
            int from = rankOf(kk, src.stage, g), to = rankOf(kk, stage, g);
            auto i = static_cast<std::size_t>(l * G() + g);
            emitCollective(lt(src.logical).name + ".send" + instanceSuffix(m, to), "send_recv", {from, to}, m, src.logical, {src.inst[i]},
                           {dst.inst[i]}, json::object());
        }
    return nv;
}

std::vector<std::vector<std::string>> Parallelizer::accumulateMicrobatches(const Version& src, const Shape& shape) {
    const auto& name = lt(src.logical).name;
    // acc[k][t]: the sum over this replica's microbatches.
    std::vector<std::vector<std::string>> acc(static_cast<std::size_t>(listedDp), std::vector<std::string>(static_cast<std::size_t>(G())));
    for (int kk = 0; kk < listedDp; ++kk)
        for (int t = 0; t < G(); ++t) {
            int rank = rankOf(kk, src.stage, t);
            std::string cur = src.inst[static_cast<std::size_t>((kk * listedMb) * G() + t)];
            if (compactMicrobatches()) {
                // Stored once: one accumulation that stands for the sum over the microbatches.
                auto out = tensorName(name + ".accum@r" + std::to_string(rank));
                ptensors.push_back(json{{"id", out}, {"shape", shape}, {"role", std::string(toString(lt(src.logical).role))}, {"rank", rank}});
                emitLocal(name + ".accumulate" + instance::rankSuffix(rank), "identity", rank, -1, Phase::Backward, {cur}, {out}, json::object(),
                          json{{"across_microbatches", true}});
                cur = out;
            }
            for (int m = 1; m < listedMb; ++m) {
                auto out = tensorName(name + ".accum" + std::to_string(m) + instance::rankSuffix(rank));
                ptensors.push_back(json{{"id", out}, {"shape", shape}, {"role", std::string(toString(lt(src.logical).role))}, {"rank", rank}});
                emitLocal(name + ".accumulate" + std::to_string(m) + instance::rankSuffix(rank), "add", rank, -1, Phase::Backward,
                          {cur, src.inst[static_cast<std::size_t>((kk * listedMb + m) * G() + t)]}, {out}, json::object());
                cur = out;
            }
            acc[static_cast<std::size_t>(kk)][static_cast<std::size_t>(t)] = cur;
        }
    return acc;
}

int Parallelizer::adoptAccumulated(const Version& src, const Placement& p, const std::vector<std::vector<std::string>>& acc) {
    Version v;
    v.logical = src.logical;
    v.stage = src.stage;
    v.pl = p;
    for (const auto& replica : acc)
        for (const auto& name : replica) v.inst.push_back(name);
    versions.push_back(std::move(v));
    const int id = static_cast<int>(versions.size()) - 1;
    cache[placementKey(src.logical, src.stage, p)] = id;
    return id;
}

int Parallelizer::laneReduce(int vi, AxisState to) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = to;
    p.coeff = src.pl.coeff * Rational(C.dp);
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    Placement whole = p;
    whole.lane = AxisState::rep();
    const auto acc = accumulateMicrobatches(src, localShape(src.logical, whole));
    if (C.dp == 1) return adoptAccumulated(src, p, acc);  // nothing to average
    const bool scatter = to.st == St::DpShard;
    int nv = newVersion(src.logical, src.stage, p, name + (scatter ? ".dp_scattered" : ".dp_reduced"));
    for (int t = 0; t < G(); ++t) {
        std::vector<int> group;
        std::vector<std::string> ins, outs;
        for (int kk = 0; kk < listedDp; ++kk) {
            group.push_back(rankOf(kk, src.stage, t));
            ins.push_back(acc[static_cast<std::size_t>(kk)][static_cast<std::size_t>(t)]);
            outs.push_back(versions[static_cast<std::size_t>(nv)].inst[static_cast<std::size_t>(kk * G() + t)]);
        }
        // Stored with replicas, the reducer lists replica 0's part of a group that spans them all.
        json extra = acrossFlags(true, true);
        if (scatter)
            emitCollective(name + ".dp_reduce_scatter@r" + std::to_string(group[0]), "reduce_scatter", group, -1, src.logical, ins,
                           outs, json{{"dim", to.dim}, {"reduce", "mean"}}, extra);
        else
            emitCollective(name + ".dp_allreduce@r" + std::to_string(group[0]), "all_reduce", group, -1, src.logical, ins, outs,
                           json{{"reduce", "mean"}}, extra);
    }
    return nv;
}

int Parallelizer::dpChunk(int vi, int dim) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::dpShard(dim);
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".dp_part");
    for (int kk = 0; kk < listedDp; ++kk)
        for (int t = 0; t < G(); ++t) {
            int rank = rankOf(kk, src.stage, t);
            auto i = static_cast<std::size_t>(kk * G() + t);
            json extra = compact() ? json{{"index_from_replica", true}} : json::object();
            if (membersOnce) extra["index_from_member"] = true;
            emitLocal(name + ".dp_chunk@r" + std::to_string(rank), "chunk", rank, -1, phaseOf(src.logical), {src.inst[i]},
                      {versions[static_cast<std::size_t>(nv)].inst[i]}, json{{"dim", dim}, {"parts", C.dp}, {"index", kk}}, extra);
        }
    return nv;
}

int Parallelizer::dpGather(int vi) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    Placement p = src.pl;
    p.lane = AxisState::rep();
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".dp_gathered");
    for (int t = 0; t < G(); ++t) {
        std::vector<int> group;
        std::vector<std::string> ins, outs;
        for (int kk = 0; kk < listedDp; ++kk) {
            group.push_back(rankOf(kk, src.stage, t));
            ins.push_back(src.inst[static_cast<std::size_t>(kk * G() + t)]);
            outs.push_back(versions[static_cast<std::size_t>(nv)].inst[static_cast<std::size_t>(kk * G() + t)]);
        }
        json extra = acrossFlags(true, true);
        emitCollective(name + ".dp_all_gather@r" + std::to_string(group[0]), "all_gather", group, -1, src.logical, ins, outs,
                       json{{"dim", src.pl.lane.dim}}, extra);
    }
    return nv;
}

int Parallelizer::convertLane(int vi, AxisState to) {
    const auto from = versions[static_cast<std::size_t>(vi)].pl.lane;
    if (from == to) return vi;
    // Expert parallelism over the replicas.
    if (from.st == St::Shard && to.st == St::EpTokens && from.dim == to.dim2) return epDispatch(vi, to);
    if (from.st == St::EpTokens && to.st == St::Shard && from.dim2 == to.dim) return epCombine(vi);
    if (from.st == St::EpPartial && to.st == St::EpShard && from.dim == to.dim)
        return to.dim2 >= 0 && C.zero < 2 ? edpChunk(epReduce(vi, AxisState::epShard(to.dim)), to.dim2) : epReduce(vi, to);
    if (from.st == St::EpShard && to.st == St::EpShard && from.dim == to.dim) {
        if (from.dim2 >= 0) return convertLane(edpGather(vi), to);
        return edpChunk(vi, to.dim2);
    }
    if (from.st == St::EpShard && to.st == St::Rep) return from.dim2 >= 0 ? convertLane(edpGather(vi), to) : epGather(vi);
    if (from.st == St::EpPartial && to.st == St::Rep) return epGather(epReduce(vi, AxisState::epShard(from.dim)));
    if (from.st == St::Rep && to.st == St::EpShard) return to.dim2 >= 0 ? edpChunk(epChunk(vi, to.dim), to.dim2) : epChunk(vi, to.dim);
    if (from.st == St::EpSum && to.st == St::Rep) return epAllReduce(vi);
    if (from.st == St::Partial && to.st == St::Rep) return laneReduce(vi);
    if (from.st == St::Partial && to.st == St::DpShard)
        return C.zero >= 2 ? laneReduce(vi, to) : dpChunk(laneReduce(vi), to.dim);  // ZeRO-1 all-reduces, then takes its part
    if (from.st == St::Rep && to.st == St::DpShard) return dpChunk(vi, to.dim);
    if (from.st == St::DpShard && to.st == St::Rep) return dpGather(vi);
    if (from.st == St::DpShard && to.st == St::DpShard) return dpChunk(dpGather(vi), to.dim);
    throw std::logic_error("generator: " + lt(versions[static_cast<std::size_t>(vi)].logical).name +
                           " would have to change how the batch is split");
}

int Parallelizer::expertZeroDim(int t) const {
    const int edp = C.dp / C.ep;
    if (C.zero == 0 || edp < 2) return -1;
    const auto& s = lt(t).shape;
    const auto& pl = M.placement[static_cast<std::size_t>(t)];
    const int td = tpAxis() ? pl.tpShardDim : -1;
    for (std::size_t d = 0; d < s.size(); ++d)
        if (static_cast<int>(d) != td && static_cast<int>(d) != pl.expertDim && s[d] % edp == 0) return static_cast<int>(d);
    return -1;
}

int Parallelizer::zeroDim(int t) const {
    if (C.zero == 0 || C.dp < 2) return -1;
    const auto& s = lt(t).shape;
    int td = tpAxis() ? M.placement[static_cast<std::size_t>(t)].tpShardDim : -1;
    for (std::size_t d = 0; d < s.size(); ++d)
        if (static_cast<int>(d) != td && s[d] % C.dp == 0) return static_cast<int>(d);
    return -1;
}

int Parallelizer::groupConvert(int vi, bool cpAx, AxisState to) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    const auto from = cpAx ? src.pl.cp : src.pl.tp;
    if (from == to) return vi;

    if (to.st == St::Partial)
        throw std::logic_error("generator: cannot turn " + lt(src.logical).name + " into a partial sum");
    Placement p = src.pl;
    (cpAx ? p.cp : p.tp) = to;
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name + (cpAx && tpAxis() ? ".cp" : "");
    // Listed: with the cp members stored once, member 0's part of a cp collective (one rank).
    const int n = cpAx ? listedCp : C.tp, others = cpAx ? C.tp : listedCp, parts = cpAx ? C.cp : C.tp;
    const json extra = cpAx ? cpFlags("across_members") : json::object();
    std::string what = from.st == St::Rep                               ? ".chunk"
                       : from.st == St::Shard && to.st == St::Shard ? ".resplit"
                       : from.st == St::Shard                       ? ".gathered"
                       : to.st == St::Rep                           ? ".reduced"
                                                                    : ".scattered";
    int nv = newVersion(src.logical, src.stage, p, name + what);
    const auto& dst = versions[static_cast<std::size_t>(nv)];
    for (int l = 0; l < lanes(p); ++l)
      for (int o = 0; o < others; ++o) {
        int kk = laneK(p, l), m = laneM(p, l);
        std::vector<int> group;
        std::vector<std::string> ins, outs;
        for (int j = 0; j < n; ++j) {
            const int g = cpAx ? member(j, o) : member(o, j);
            group.push_back(rankOf(kk, src.stage, g));
            ins.push_back(src.inst[static_cast<std::size_t>(l * G() + g)]);
            outs.push_back(dst.inst[static_cast<std::size_t>(l * G() + g)]);
        }
        if (from.st == St::Rep) {
            for (int t = 0; t < n; ++t)
                emitLocal(name + ".chunk" + instanceSuffix(m, group[static_cast<std::size_t>(t)]), "chunk",
                          group[static_cast<std::size_t>(t)], m, phaseOf(src.logical), {ins[static_cast<std::size_t>(t)]},
                          {outs[static_cast<std::size_t>(t)]}, json{{"dim", to.dim}, {"parts", parts}, {"index", t}},
                          cpAx ? cpFlags("index_from_member") : json::object());
        } else if (from.st == St::Shard && to.st == St::Shard) {
            // Split along another dim: each member sends every other member the part of its
            // piece that member keeps (an all-to-all; the MoE dispatch of tokens split along
            // the sequence to experts split over the group).
            emitCollective(name + ".all_to_all" + instanceSuffix(m, group[0]), "all_to_all", group, m, src.logical, ins, outs,
                           json{{"split_dim", to.dim}, {"concat_dim", from.dim}}, extra);
        } else if (from.st == St::Shard) {
            emitCollective(name + ".all_gather" + instanceSuffix(m, group[0]), "all_gather", group, m, src.logical, ins, outs,
                           json{{"dim", from.dim}}, extra);
        } else if (to.st == St::Rep) {
            emitCollective(name + ".all_reduce" + instanceSuffix(m, group[0]), "all_reduce", group, m, src.logical, ins, outs,
                           json{{"reduce", "sum"}}, extra);
        } else {
            emitCollective(name + ".reduce_scatter" + instanceSuffix(m, group[0]), "reduce_scatter", group, m, src.logical, ins, outs,
                           json{{"dim", to.dim}, {"reduce", "sum"}}, extra);
        }
    }
    return nv;
}

int Parallelizer::rescale(int vi, const Rational& to) {
    const Version src = versions[static_cast<std::size_t>(vi)];
    if (src.pl.coeff == to) return vi;
    Placement p = src.pl;
    p.coeff = to;
    auto k = placementKey(src.logical, src.stage, p);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    const auto& name = lt(src.logical).name;
    int nv = newVersion(src.logical, src.stage, p, name + ".scaled");
    const auto factor = src.pl.coeff / to;
    for (int l = 0; l < lanes(p); ++l)
        for (int t = 0; t < G(); ++t) {
            int rank = rankOf(laneK(p, l), src.stage, t);
            auto i = static_cast<std::size_t>(l * G() + t);
            emitLocal(name + ".scale" + instanceSuffix(laneM(p, l), rank), "mul_scalar", rank, laneM(p, l), phaseOf(src.logical),
                      {src.inst[i]}, {versions[static_cast<std::size_t>(nv)].inst[i]}, json{{"value", factor.toString()}});
        }
    return nv;
}

int Parallelizer::convert(int vi, AxisState lane, AxisState tp, AxisState cp) {
    const Placement cur = versions[static_cast<std::size_t>(vi)].pl;
    // ZeRO would split a tensor along the dim a group already splits it on (a gradient of a
    // position table under context parallelism): settle the group axes first.
    auto clash = [&](const AxisState& now, const AxisState& want) {
        return lane.st == St::DpShard && now.st == St::Shard && now.dim == lane.dim && !(want == now);
    };
    if (clash(cur.tp, tp) || clash(cur.cp, cp)) {
        int v = cur.lane.st == St::Rep ? vi : convertLane(vi, AxisState::rep());
        return convertLane(cpConvert(tpConvert(v, tp), cp), lane);
    }
    return cpConvert(tpConvert(convertLane(vi, lane), tp), cp);
}

}  // namespace tv::gen::detail
