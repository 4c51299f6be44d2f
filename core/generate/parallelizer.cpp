#include "generate/parallelizer.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_set>

#include "model/rational.hpp"
#include "ops/dims.hpp"
#include "model/instance_names.hpp"

namespace tv::gen {

using json = nlohmann::json;

namespace {

// ----- placements ------------------------------------------------------------------------------

/// Rep: every member holds it whole; Shard: split along dim; Partial: members' values add up.
/// DpShard (lane axis only, ZeRO): each data-parallel replica holds its part along dim, shared by
/// its microbatches.
enum class St : std::uint8_t { Rep, Shard, Partial, DpShard };

struct AxisState {
    St st = St::Rep;
    int dim = -1;
    friend bool operator==(const AxisState&, const AxisState&) = default;
    static AxisState rep() { return {}; }
    static AxisState shard(int d) { return {St::Shard, d}; }
    static AxisState partial() { return {St::Partial, -1}; }
    static AxisState dpShard(int d) { return {St::DpShard, d}; }
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

std::string key(const AxisState& a) { return std::to_string(static_cast<int>(a.st)) + "/" + std::to_string(a.dim); }

// ----- linearity -------------------------------------------------------------------------------

enum class Lin { None, Additive, Multi };
struct Linearity {
    Lin kind = Lin::None;
    std::vector<bool> linear;  ///< per input
};

Linearity linearity(const LOp& op, std::size_t nin) {
    const auto& k = op.kind;
    Linearity l;
    l.linear.assign(nin, false);
    auto set = [&](Lin kind, std::initializer_list<std::size_t> idx) {
        l.kind = kind;
        for (auto i : idx)
            if (i < nin) l.linear[i] = true;
    };
    static const std::set<std::string> kAdditive1 = {"neg", "mul_scalar", "div_sqrt", "identity", "reshape", "view",
                                                     "permute", "transpose", "slice", "slice_backward", "split", "chunk",
                                                     "expand", "sum_to", "sum", "mean", "sum_backward", "mean_backward"};
    static const std::set<std::string> kBackward1 = {"relu_backward", "sigmoid_backward", "tanh_backward", "silu_backward",
                                                     "gelu_backward", "erf_backward", "softmax_backward", "max_backward"};
    if (k == "add" || k == "sub") set(Lin::Additive, {0, 1});
    else if (k == "concat") {
        l.kind = Lin::Additive;
        l.linear.assign(nin, true);
    } else if (kAdditive1.count(k)) set(Lin::Additive, {0});
    else if (k == "embedding") set(Lin::Additive, {1});
    else if (k == "embedding_backward") set(Lin::Additive, {1});
    else if (k == "mul" || k == "matmul") set(Lin::Multi, {0, 1});
    else if (k == "linear" && nin == 2) set(Lin::Multi, {0, 1});
    else if (k == "div" || k == "dropout") set(Lin::Multi, {0});
    else if (kBackward1.count(k)) set(Lin::Multi, {1});
    else if (k == "rmsnorm_backward" || k == "layernorm_backward" || k == "cross_entropy_backward") set(Lin::Multi, {2});
    return l;
}

// ----- the parallelizer ------------------------------------------------------------------------

struct Version {
    int logical = -1;
    int stage = 0;
    Placement pl;
    bool initial = false;
    std::vector<std::string> inst;  ///< [laneIndex * G + c * tp + t]: lane, then cp member c, then tp member t
};

constexpr double kInf = std::numeric_limits<double>::infinity();

class Parallelizer {
public:
    Parallelizer(const LogicalModel& m, const ParallelConfig& c) : M(m), C(c) {
        L = c.dp * c.microbatches;
        listedDp = c.compactReplicas ? 1 : c.dp;
        listedMb = c.compactMicrobatches ? 1 : c.microbatches;
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
    bool compact() const { return listedDp < C.dp || listedMb < C.microbatches; }
    bool compactMicrobatches() const { return listedMb < C.microbatches; }

    bool laneAxis() const { return L > 1; }
    bool tpAxis() const { return C.tp > 1; }
    bool cpAxis() const { return C.cp > 1; }
    /// The members of one stage's group: cp x tp, cp-major.
    int G() const { return C.tp * C.cp; }
    int member(int c, int t) const { return c * C.tp + t; }
    /// Ranks: dp outermost, then pp, then cp, then tp (innermost).
    int rankOf(int k, int s, int g) const { return (k * C.pp + s) * G() + g; }
    /// One instance per replica (shared by its microbatches), or one per lane.
    static bool perReplica(const Placement& p) { return p.lane.st == St::Rep || p.lane.st == St::DpShard; }
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

    Shape localShape(int logical, const Placement& p) const {
        Shape s = lt(logical).shape;
        if (p.lane.st == St::Shard) s[static_cast<std::size_t>(p.lane.dim)] /= L;
        if (p.lane.st == St::DpShard) s[static_cast<std::size_t>(p.lane.dim)] /= C.dp;
        if (p.tp.st == St::Shard) s[static_cast<std::size_t>(p.tp.dim)] /= C.tp;
        if (p.cp.st == St::Shard) s[static_cast<std::size_t>(p.cp.dim)] /= C.cp;
        return s;
    }

    /// Tensor ids and op ids are separate name spaces in a plan file.
    static std::string uniqueName(std::unordered_set<std::string>& used, const std::string& base) {
        if (used.insert(base).second) return base;
        for (int n = 2;; ++n) {
            auto s = base + "." + std::to_string(n);
            if (used.insert(s).second) return s;
        }
    }
    std::string tensorName(const std::string& base) { return uniqueName(usedTensorNames, base); }
    std::string opName(const std::string& base) { return uniqueName(usedOpNames, base); }

    /// With microbatches stored once, microbatch 0's names stand for every microbatch's.
    std::string instanceSuffix(int m, int rank) const {
        return instance::generatorSuffix(compactMicrobatches() ? -1 : m, rank);
    }

    /// A new version with fresh instance tensors named base + lane + rank.
    int newVersion(int logical, int stage, const Placement& p, const std::string& base, bool initial = false) {
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

    void emitLocal(const std::string& name, const std::string& kind, int rank, int m, Phase phase,
                   const std::vector<std::string>& ins, const std::vector<std::string>& outs, const json& attrs,
                   const json& extra = json::object()) {
        json j{{"id", opName(name)}, {"op", kind}, {"rank", rank}, {"phase", phaseName(phase)}, {"inputs", ins}, {"outputs", outs}};
        for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
        if (m >= 0) j["microbatch"] = m;
        if (!attrs.empty()) j["attrs"] = attrs;
        pops.push_back(std::move(j));
        opMeta.push_back({m, phase != Phase::Forward});
    }
    /// A collective carrying (a version of) logical tensor `logical`.
    void emitCollective(const std::string& name, const std::string& kind, const std::vector<int>& group, int m, int logical,
                        const std::vector<std::string>& ins, const std::vector<std::string>& outs, const json& attrs,
                        const json& extra = json::object()) {
        json j{{"id", opName(name)}, {"op", kind}, {"group", group}, {"inputs", ins}, {"outputs", outs}};
        for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
        if (m >= 0) j["microbatch"] = m;
        if (!attrs.empty()) j["attrs"] = attrs;
        pops.push_back(std::move(j));
        opMeta.push_back({m, phaseOf(logical) != Phase::Forward});
    }

    Placement initialPlacement(int t) const {
        Placement p;
        if (isData[static_cast<std::size_t>(t)] && laneAxis()) p.lane = AxisState::shard(M.batchDim);
        int d = M.placement[static_cast<std::size_t>(t)].tpShardDim;
        if (d >= 0 && tpAxis()) p.tp = AxisState::shard(d);
        // Context parallelism: the data loader gives each cp member its part of the sequence.
        if (cpAxis() && isData[static_cast<std::size_t>(t)] && M.seqDim >= 0) p.cp = AxisState::shard(M.seqDim);
        // ZeRO: optimizer state (and with ZeRO-3 the weights too) is split over the replicas.
        const auto role = lt(t).role;
        if (int z = zeroDim(t); z >= 0 && (role == Role::OptimizerState || (C.zero == 3 && role == Role::Weight)))
            p.lane = AxisState::dpShard(z);
        return p;
    }

    /// The version of logical tensor t as its producer (or the data loader / checkpoint) holds it, on stage s.
    int source(int t, int stage) {
        if (produced[static_cast<std::size_t>(t)] >= 0) return fetch(produced[static_cast<std::size_t>(t)], stage);
        auto p = initialPlacement(t);
        auto k = placementKey(t, stage, p);
        if (auto it = cache.find(k); it != cache.end()) return it->second;
        int v = newVersion(t, stage, p, lt(t).name, true);
        initialOf[static_cast<std::size_t>(t)].push_back(v);
        return v;
    }

    /// The same version moved to stage s (pipeline send/recv per instance).
    int fetch(int vi, int stage) {
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

    Phase phaseOf(int logical) const {
        auto p = lt(logical).producer;
        return p >= 0 ? M.ops[static_cast<std::size_t>(p)].phase : Phase::Forward;
    }

    /// Data-parallel gradient reduction: accumulate the microbatches on each rank, then average
    /// over the data-parallel group.
    /// to Rep: a mean all-reduce over the replicas; to DpShard (ZeRO-2/3): a mean reduce-scatter.
    int laneReduce(int vi, AxisState to = AxisState::rep()) {
        const Version src = versions[static_cast<std::size_t>(vi)];
        Placement p = src.pl;
        p.lane = to;
        p.coeff = src.pl.coeff * Rational(C.dp);
        auto k = placementKey(src.logical, src.stage, p);
        if (auto it = cache.find(k); it != cache.end()) return it->second;
        const auto& name = lt(src.logical).name;
        // acc[k][t]: the sum over this replica's microbatches.
        std::vector<std::vector<std::string>> acc(static_cast<std::size_t>(listedDp), std::vector<std::string>(static_cast<std::size_t>(G())));
        Placement whole = p;
        whole.lane = AxisState::rep();
        const auto shape = localShape(src.logical, whole);
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
        if (C.dp == 1) {
            // Nothing to average: the accumulated tensors are the new version's instances.
            Version v;
            v.logical = src.logical;
            v.stage = src.stage;
            v.pl = p;
            for (int t = 0; t < G(); ++t) v.inst.push_back(acc[0][static_cast<std::size_t>(t)]);
            versions.push_back(std::move(v));
            int id = static_cast<int>(versions.size()) - 1;
            cache[k] = id;
            return id;
        }
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
            json extra = compact() ? json{{"across_replicas", true}} : json::object();
            if (scatter)
                emitCollective(name + ".dp_reduce_scatter@r" + std::to_string(group[0]), "reduce_scatter", group, -1, src.logical, ins,
                               outs, json{{"dim", to.dim}, {"reduce", "mean"}}, extra);
            else
                emitCollective(name + ".dp_allreduce@r" + std::to_string(group[0]), "all_reduce", group, -1, src.logical, ins, outs,
                               json{{"reduce", "mean"}}, extra);
        }
        return nv;
    }

    /// ZeRO: each replica takes its part of a replicated tensor (a local chunk indexed by replica).
    int dpChunk(int vi, int dim) {
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
                emitLocal(name + ".dp_chunk@r" + std::to_string(rank), "chunk", rank, -1, phaseOf(src.logical), {src.inst[i]},
                          {versions[static_cast<std::size_t>(nv)].inst[i]}, json{{"dim", dim}, {"parts", C.dp}, {"index", kk}}, extra);
            }
        return nv;
    }

    /// ZeRO: the replicas' parts gathered back (an all-gather over the data-parallel group).
    int dpGather(int vi) {
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
            json extra = compact() ? json{{"across_replicas", true}} : json::object();
            emitCollective(name + ".dp_all_gather@r" + std::to_string(group[0]), "all_gather", group, -1, src.logical, ins, outs,
                           json{{"dim", src.pl.lane.dim}}, extra);
        }
        return nv;
    }

    int convertLane(int vi, AxisState to) {
        const auto from = versions[static_cast<std::size_t>(vi)].pl.lane;
        if (from == to) return vi;
        if (from.st == St::Partial && to.st == St::Rep) return laneReduce(vi);
        if (from.st == St::Partial && to.st == St::DpShard)
            return C.zero >= 2 ? laneReduce(vi, to) : dpChunk(laneReduce(vi), to.dim);  // ZeRO-1 all-reduces, then takes its part
        if (from.st == St::Rep && to.st == St::DpShard) return dpChunk(vi, to.dim);
        if (from.st == St::DpShard && to.st == St::Rep) return dpGather(vi);
        if (from.st == St::DpShard && to.st == St::DpShard) return dpChunk(dpGather(vi), to.dim);
        throw std::logic_error("generator: " + lt(versions[static_cast<std::size_t>(vi)].logical).name +
                               " would have to change how the batch is split");
    }

    /// The dim ZeRO splits a weight (and its optimizer state) along: the first one tensor
    /// parallelism does not split that divides by dp; -1 if none (it then stays replicated).
    int zeroDim(int t) const {
        if (C.zero == 0 || C.dp < 2) return -1;
        const auto& s = lt(t).shape;
        int td = tpAxis() ? M.placement[static_cast<std::size_t>(t)].tpShardDim : -1;
        for (std::size_t d = 0; d < s.size(); ++d)
            if (static_cast<int>(d) != td && s[d] % C.dp == 0) return static_cast<int>(d);
        return -1;
    }

    /// Changes the tp placement of a version (on its stage), with the collective or local op it takes.
    int tpConvert(int vi, AxisState to) { return groupConvert(vi, false, to); }
    /// The same on the cp axis.
    int cpConvert(int vi, AxisState to) { return groupConvert(vi, true, to); }
    int groupConvert(int vi, bool cpAx, AxisState to) {
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
        const int n = cpAx ? C.cp : C.tp, others = cpAx ? C.tp : C.cp;
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
                              {outs[static_cast<std::size_t>(t)]}, json{{"dim", to.dim}, {"parts", n}, {"index", t}});
            } else if (from.st == St::Shard && to.st == St::Shard) {
                // Split along another dim: each member sends every other member the part of its
                // piece that member keeps (an all-to-all; the MoE dispatch of tokens split along
                // the sequence to experts split over the group).
                emitCollective(name + ".all_to_all" + instanceSuffix(m, group[0]), "all_to_all", group, m, src.logical, ins, outs,
                               json{{"split_dim", to.dim}, {"concat_dim", from.dim}});
            } else if (from.st == St::Shard) {
                emitCollective(name + ".all_gather" + instanceSuffix(m, group[0]), "all_gather", group, m, src.logical, ins, outs,
                               json{{"dim", from.dim}});
            } else if (to.st == St::Rep) {
                emitCollective(name + ".all_reduce" + instanceSuffix(m, group[0]), "all_reduce", group, m, src.logical, ins, outs,
                               json{{"reduce", "sum"}});
            } else {
                emitCollective(name + ".reduce_scatter" + instanceSuffix(m, group[0]), "reduce_scatter", group, m, src.logical, ins, outs,
                               json{{"dim", to.dim}, {"reduce", "sum"}});
            }
        }
        return nv;
    }

    /// Rescales a version so that its coefficient becomes `to` (a local multiply per instance).
    int rescale(int vi, const Rational& to) {
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

    int convert(int vi, AxisState lane, AxisState tp, AxisState cp) {
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

    static double tpCost(const AxisState& from, const AxisState& to, bool weight) {
        if (from == to) return 0;
        if (to.st == St::Partial) return kInf;
        if (from.st == St::Rep) return 1;
        if (from.st == St::Shard && to.st == St::Rep) return weight ? 15 : 10;
        // To another split: one all-to-all. Priced as the all-gather it replaces (the costs do not
        // know tensor sizes, and an attention's scores outweigh its values).
        if (from.st == St::Shard) return weight ? 16 : 11;
        return 10;  // partial -> replicated or sharded
    }

    /// Which input of an op vocabulary parallelism splits, along which dim, and the vocabulary
    /// size (input -1: the op is not one it applies to).
    struct VocabAxis {
        int input = -1, dim = -1;
        std::int64_t size = 0;
    };
    VocabAxis vocabAxis(const LOp& op) const {
        if (op.kind == "embedding") return {1, 0, lt(op.inputs[1]).shape[0]};
        if (op.kind == "embedding_backward") return {1, -1, lt(op.outputs[0]).shape[0]};
        if (op.kind == "cross_entropy" || op.kind == "cross_entropy_backward") {
            const auto& s = lt(op.inputs[0]).shape;
            return {0, static_cast<int>(s.size()) - 1, s.back()};
        }
        return {};
    }

    /// A local tensor of the decomposition of one op instance (no lineage: it lies inside a stage).
    std::string localTensor(const std::string& base, int rank, int m, const Shape& shape, Role role) {
        auto name = tensorName(base + instanceSuffix(m, rank));
        json j{{"id", name}, {"shape", shape}, {"role", std::string(toString(role))}, {"rank", rank}};
        if (m >= 0) j["microbatch"] = m;
        ptensors.push_back(std::move(j));
        return name;
    }
    /// Per (logits version, lane, tp rank): the forward's exponentials and their reduced sum, which
    /// the backward reuses (Megatron keeps them for it).
    struct SoftmaxParts {
        std::string exps, total;
    };
    std::map<std::string, SoftmaxParts> vocabSoftmax;
    /// Megatron's vocab-parallel cross-entropy (forward or backward) of lane `lane`, on every tp
    /// rank of the group: `in` are the op's input versions, `outV` its output versions.
    void vocabParallelCrossEntropy(const LOp& op, int lane, int cpMember, int stage, const std::vector<int>& in, const std::vector<int>& outV);

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

    void processOp(int opIndex);
    void computeDesired();
    json lineage() const;
    json logicalJson() const;
    void orderBySchedule();
};

void Parallelizer::computeDesired() {
    // A weight's gradient should end where the weight lives, so the optimizer needs no resharding:
    // propagate each weight's tp placement to the ops accumulating its gradient.
    for (std::size_t i = 0; i < M.ops.size(); ++i) {
        const auto& o = M.ops[i];
        if (o.dead || (o.kind != "adamw" && o.kind != "sgd")) continue;
        int w = o.inputs[0], g = o.inputs[1];
        int d = M.placement[static_cast<std::size_t>(w)].tpShardDim;
        if (d < 0 || !tpAxis()) continue;
        std::vector<int> work{g};
        while (!work.empty()) {
            int t = work.back();
            work.pop_back();
            desired[static_cast<std::size_t>(t)] = AxisState::shard(d);
            int p = lt(t).producer;
            if (p >= 0 && M.ops[static_cast<std::size_t>(p)].kind == "add")
                for (int in : M.ops[static_cast<std::size_t>(p)].inputs) work.push_back(in);
        }
    }
}

void Parallelizer::processOp(int opIndex) {
    const auto& op = M.ops[static_cast<std::size_t>(opIndex)];
    const int stage = stageOf(op.layer);
    const auto nin = op.inputs.size(), nout = op.outputs.size();
    std::vector<Shape> inShapes, outShapes;
    for (int t : op.inputs) inShapes.push_back(lt(t).shape);
    for (int t : op.outputs) outShapes.push_back(lt(t).shape);
    OpDims dims;
    try {
        dims = operatorDims(op.kind, op.attrs, inShapes, outShapes);
    } catch (const std::invalid_argument& e) {
        throw std::logic_error(std::string("generator: the parallelizer: ") + e.what() + " (op " + op.name + ")");
    }
    const Linearity lin = linearity(op, nin);

    std::vector<int> src(nin);
    for (std::size_t i = 0; i < nin; ++i) src[i] = source(op.inputs[i], stage);
    auto cur = [&](std::size_t i) -> const Placement& { return versions[static_cast<std::size_t>(src[i])].pl; };
    auto labelOf = [&](const std::vector<int>& ls, int dim) { return dim >= 0 && dim < static_cast<int>(ls.size()) ? ls[static_cast<std::size_t>(dim)] : -1; };
    auto dimOf = [&](const std::vector<int>& ls, int label) {
        for (std::size_t d = 0; d < ls.size(); ++d)
            if (ls[d] == label) return static_cast<int>(d);
        return -1;
    };

    // ---- the lane axis: follow the inputs' batch split.
    std::vector<AxisState> laneIn(nin, AxisState::rep()), laneOut(nout, AxisState::rep());
    int laneLabel = -1;
    bool laneMean = false;
    if (laneAxis()) {
        for (std::size_t i = 0; i < nin; ++i)
            if (cur(i).lane.st == St::Shard) {
                int l = labelOf(dims.in[i], cur(i).lane.dim);
                if (l < 0 || dims.labels[static_cast<std::size_t>(l)].noShard)
                    throw std::logic_error("generator: op " + op.name + " (" + op.kind + ") cannot split the batch along dim " +
                                           std::to_string(cur(i).lane.dim) + " of " + lt(op.inputs[i]).name);
                if (laneLabel >= 0 && laneLabel != l)
                    throw std::logic_error("generator: op " + op.name + " reads inputs split along different batch dims");
                laneLabel = l;
            }
        // ZeRO: inputs split over the replicas (optimizer state) make the op run on each replica's part.
        int zeroLabel = -1;
        for (std::size_t i = 0; i < nin; ++i)
            if (cur(i).lane.st == St::DpShard) {
                int l = labelOf(dims.in[i], cur(i).lane.dim);
                if (l >= 0 && !dims.labels[static_cast<std::size_t>(l)].noShard && zeroLabel < 0) zeroLabel = l;
            }
        std::vector<std::size_t> partials;
        for (std::size_t i = 0; i < nin; ++i)
            if (cur(i).lane.st == St::Partial) partials.push_back(i);
        if (laneLabel < 0 && zeroLabel >= 0) {
            bool ok = true;
            for (std::size_t j = 0; j < nout; ++j) ok = ok && dimOf(dims.out[j], zeroLabel) >= 0;
            if (ok) {
                for (std::size_t i = 0; i < nin; ++i) {
                    int d = dimOf(dims.in[i], zeroLabel);
                    laneIn[i] = d >= 0 ? AxisState::dpShard(d) : AxisState::rep();
                }
                for (std::size_t j = 0; j < nout; ++j) laneOut[j] = AxisState::dpShard(dimOf(dims.out[j], zeroLabel));
            }
        } else if (laneLabel >= 0) {
            for (std::size_t i = 0; i < nin; ++i) {
                int d = dimOf(dims.in[i], laneLabel);
                laneIn[i] = d >= 0 ? AxisState::shard(d) : AxisState::rep();
            }
            for (std::size_t j = 0; j < nout; ++j) {
                int d = dimOf(dims.out[j], laneLabel);
                if (d >= 0)
                    laneOut[j] = AxisState::shard(d);
                else if (dims.labels[static_cast<std::size_t>(laneLabel)].sums)
                    laneOut[j] = AxisState::partial();
                else
                    throw std::logic_error("generator: op " + op.name + " drops the batch dim without summing over it");
            }
            laneMean = dims.labels[static_cast<std::size_t>(laneLabel)].mean;
        } else if (!partials.empty()) {
            bool pass = false;
            if (lin.kind == Lin::Additive) {
                pass = true;
                for (std::size_t i = 0; i < nin; ++i)
                    if (lin.linear[i] != (cur(i).lane.st == St::Partial)) pass = false;
            } else if (lin.kind == Lin::Multi) {
                pass = partials.size() == 1 && lin.linear[partials[0]];
            }
            if (pass) {
                for (auto i : partials) laneIn[i] = AxisState::partial();
                laneOut.assign(nout, AxisState::partial());
            }
        }
    }

    // ---- the group axes (cp, then tp): the placement with the least communication.
    struct Candidate {
        std::vector<AxisState> in, out;
        bool mean = false;
        bool vocab = false;  ///< a vocabulary-parallel embedding or cross-entropy
        double cost = 0;
        int label = -1;      ///< the dim label it splits along (-1: none)
    };
    auto choose = [&](bool cpAx, int excluded) -> Candidate {
        const int n = cpAx ? C.cp : C.tp;
        auto now = [&](std::size_t i) -> const AxisState& { return cpAx ? cur(i).cp : cur(i).tp; };
        std::vector<Candidate> cands;
        auto finish = [&](Candidate c) {
            for (std::size_t i = 0; i < nin; ++i) {
                bool w = lt(op.inputs[i]).role == Role::Weight || lt(op.inputs[i]).role == Role::OptimizerState;
                if (lt(op.inputs[i]).dtype == DType::Int && c.in[i].st == St::Partial) return;
                c.cost += tpCost(now(i), c.in[i], w);
            }
            for (std::size_t j = 0; j < nout && !cpAx; ++j) {
                const auto& want = desired[static_cast<std::size_t>(op.outputs[j])];
                // An output not split as it should end up: resharded later. For an embedding's
                // gradient that means every rank holding (a partial sum of) the whole table's
                // gradient; Megatron instead completes the incoming gradient and scatters it into
                // each rank's part of the vocabulary.
                if (want.st == St::Shard && !(c.out[j] == want)) c.cost += op.kind == "embedding_backward" ? 12 : 2;
            }
            if (c.cost < kInf) cands.push_back(std::move(c));
        };
        // Partial sums flow through linear ops.
        std::vector<std::size_t> partials;
        for (std::size_t i = 0; i < nin; ++i)
            if (now(i).st == St::Partial) partials.push_back(i);
        if (!partials.empty() && lin.kind == Lin::Additive) {
            Candidate c;
            for (std::size_t i = 0; i < nin; ++i) c.in.push_back(lin.linear[i] ? AxisState::partial() : AxisState::rep());
            c.out.assign(nout, AxisState::partial());
            finish(c);
        }
        if (lin.kind == Lin::Multi)
            for (auto pi : partials)
                if (lin.linear[pi]) {
                    Candidate c;
                    for (std::size_t i = 0; i < nin; ++i) c.in.push_back(i == pi ? AxisState::partial() : AxisState::rep());
                    c.out.assign(nout, AxisState::partial());
                    finish(c);
                }
        // Megatron's vocabulary parallelism (tp): an embedding whose table is split along the
        // vocabulary looks up its own rows (a partial sum over the group), its gradient lands in
        // the table's parts, and the cross-entropy of logits split along the classes is computed
        // on the parts (the maximum, the sum of exponentials and the label's logit reduced over
        // the group).
        if (const auto vocab = vocabAxis(op); vocab.input >= 0 && !cpAx) {
            const int vd = vocab.dim;
            const bool inputSplit = op.kind != "embedding_backward" && now(static_cast<std::size_t>(vocab.input)) == AxisState::shard(vd);
            const bool outputWanted = op.kind == "embedding_backward" && desired[static_cast<std::size_t>(op.outputs[0])] == AxisState::shard(0);
            if ((inputSplit || outputWanted) && vocab.size % n == 0) {
                Candidate c;
                c.vocab = true;
                c.in.assign(nin, AxisState::rep());
                if (op.kind != "embedding_backward") c.in[static_cast<std::size_t>(vocab.input)] = AxisState::shard(vd);
                if (op.kind == "embedding") c.out = {AxisState::partial()};
                else if (op.kind == "cross_entropy") c.out = {AxisState::rep()};
                else c.out = {AxisState::shard(op.kind == "embedding_backward" ? 0 : vd)};
                finish(c);
            }
        }
        // Splits along a dim some input is split on, or some output should end up split on.
        std::vector<int> labels;
        for (std::size_t i = 0; i < nin; ++i)
            if (now(i).st == St::Shard) labels.push_back(labelOf(dims.in[i], now(i).dim));
        for (std::size_t j = 0; j < nout && !cpAx; ++j)
            if (desired[static_cast<std::size_t>(op.outputs[j])].st == St::Shard)
                labels.push_back(labelOf(dims.out[j], desired[static_cast<std::size_t>(op.outputs[j])].dim));
        std::sort(labels.begin(), labels.end());
        labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
        // Context parallelism keeps every weight whole: the optimizer updates it replicated (a
        // gradient split along the sequence, such as a position embedding's, is gathered first).
        if (cpAx && (op.kind == "adamw" || op.kind == "sgd")) labels.clear();
        for (int l : labels) {
            if (l < 0 || l == laneLabel || l == excluded) continue;
            const auto& lab = dims.labels[static_cast<std::size_t>(l)];
            if (lab.noShard || lab.size % n != 0) continue;
            Candidate c;
            c.label = l;
            bool ok = true;
            for (std::size_t i = 0; i < nin; ++i) {
                int d = dimOf(dims.in[i], l);
                c.in.push_back(d >= 0 ? AxisState::shard(d) : AxisState::rep());
            }
            for (std::size_t j = 0; j < nout; ++j) {
                int d = dimOf(dims.out[j], l);
                if (d >= 0) c.out.push_back(AxisState::shard(d));
                else if (lab.sums) c.out.push_back(AxisState::partial());
                else ok = false;
            }
            c.mean = lab.mean;
            if (ok) finish(c);
        }
        {
            Candidate c;
            c.in.assign(nin, AxisState::rep());
            c.out.assign(nout, AxisState::rep());
            finish(c);
        }
        if (cands.empty())
            throw std::logic_error(std::string("generator: no ") + (cpAx ? "context" : "tensor") + "-parallel placement for op " + op.name);
        const Candidate* best = &cands[0];
        for (const auto& c : cands)
            if (c.cost < best->cost) best = &c;
        return *best;
    };
    Candidate cpPick, tpPick;
    cpPick.in.assign(nin, AxisState::rep());
    cpPick.out.assign(nout, AxisState::rep());
    tpPick = cpPick;
    if (cpAxis()) cpPick = choose(true, -1);
    if (tpAxis()) tpPick = choose(false, cpPick.label);
    const auto& tpIn = tpPick.in;
    const auto& tpOut = tpPick.out;
    const bool tpMean = tpPick.mean, tpVocab = tpPick.vocab;
    const auto& cpIn = cpPick.in;
    const auto& cpOut = cpPick.out;

    // ---- convert the inputs, then fix coefficients by linearity.
    std::vector<int> in(nin);
    for (std::size_t i = 0; i < nin; ++i) in[i] = convert(src[i], laneIn[i], tpIn[i], cpIn[i]);
    auto coeffOf = [&](std::size_t i) { return versions[static_cast<std::size_t>(in[i])].pl.coeff; };
    Rational outCoeff(1);
    if (lin.kind == Lin::Additive) {
        bool same = true;
        std::optional<Rational> c;
        for (std::size_t i = 0; i < nin; ++i)
            if (lin.linear[i]) {
                if (c && !(*c == coeffOf(i))) same = false;
                if (!c) c = coeffOf(i);
            }
        for (std::size_t i = 0; i < nin; ++i)
            if (!lin.linear[i] || !same) in[i] = rescale(in[i], Rational(1));
        outCoeff = same && c ? *c : Rational(1);
    } else {
        for (std::size_t i = 0; i < nin; ++i) {
            if (lin.kind == Lin::Multi && lin.linear[i])
                outCoeff = outCoeff * coeffOf(i);
            else
                in[i] = rescale(in[i], Rational(1));
        }
    }
    if (laneMean) outCoeff = outCoeff / Rational(L);
    if (tpMean) outCoeff = outCoeff / Rational(C.tp);
    if (cpPick.mean) outCoeff = outCoeff / Rational(C.cp);

    // ---- emit one local op per lane and tp rank.
    std::vector<int> outV(nout);
    for (std::size_t j = 0; j < nout; ++j) {
        Placement p{laneOut[j], tpOut[j], cpOut[j], outCoeff};
        outV[j] = newVersion(op.outputs[j], stage, p, lt(op.outputs[j]).name);
    }
    Placement opPl{nout ? laneOut[0] : AxisState::rep(), AxisState::rep(), AxisState::rep(), Rational(1)};
    for (std::size_t j = 0; j < nout; ++j)
        if (laneOut[j].st != St::Rep) opPl.lane = laneOut[j];
    for (int l = 0; l < lanes(opPl); ++l)
        for (int g = 0; g < G(); ++g) {
            const int t = g % C.tp, c = g / C.tp;
            int kk = laneK(opPl, l), m = laneM(opPl, l);
            int rank = rankOf(kk, stage, g);
            std::vector<std::string> ins, outs;
            for (std::size_t i = 0; i < nin; ++i) {
                const auto& v = versions[static_cast<std::size_t>(in[i])];
                int li = perReplica(v.pl) ? kk : l;
                ins.push_back(v.inst[static_cast<std::size_t>(li * G() + g)]);
            }
            for (std::size_t j = 0; j < nout; ++j) {
                const auto& v = versions[static_cast<std::size_t>(outV[j])];
                int li = perReplica(v.pl) ? kk : l;
                outs.push_back(v.inst[static_cast<std::size_t>(li * G() + g)]);
            }
            if (tpVocab && (op.kind == "cross_entropy" || op.kind == "cross_entropy_backward")) {
                if (t == 0) vocabParallelCrossEntropy(op, l, c, stage, in, outV);  // the whole tp group at once
                continue;
            }
            json attrs = op.attrs;
            if (tpVocab) {
                attrs["parts"] = C.tp;
                attrs["index"] = t;
            }
            emitLocal(op.name + instanceSuffix(m, rank), op.kind, rank, m, op.phase, ins, outs, attrs);
        }
    for (std::size_t j = 0; j < nout; ++j) produced[static_cast<std::size_t>(op.outputs[j])] = outV[j];

    // Sequence parallelism starts here: the residual stream is split along the sequence.
    for (std::size_t j = 0; j < nout; ++j)
        if (tpAxis() && std::find(M.seqParallelStarts.begin(), M.seqParallelStarts.end(), op.outputs[j]) != M.seqParallelStarts.end())
            produced[static_cast<std::size_t>(op.outputs[j])] = tpConvert(outV[j], AxisState::shard(M.seqDim));
}

void Parallelizer::vocabParallelCrossEntropy(const LOp& op, int lane, int cpMember, int stage, const std::vector<int>& in,
                                             const std::vector<int>& outV) {
    const bool backward = op.kind == "cross_entropy_backward";
    const int T = C.tp;
    const auto& x0 = versions[static_cast<std::size_t>(in[0])];
    const int kk = laneK(x0.pl, lane), m = laneM(x0.pl, lane);
    auto inst = [&](int vi, int t) {
        const auto& v = versions[static_cast<std::size_t>(vi)];
        const int li = perReplica(v.pl) ? kk : lane;
        return v.inst[static_cast<std::size_t>(li * G() + member(cpMember, t))];
    };
    std::vector<int> group;
    for (int t = 0; t < T; ++t) group.push_back(rankOf(kk, stage, member(cpMember, t)));
    const Shape xs = localShape(op.inputs[0], x0.pl);  // [tokens.., classes / tp]
    const Shape lead(xs.begin(), xs.end() - 1);
    Shape lead1 = lead;
    lead1.push_back(1);
    const Role role = backward ? Role::Gradient : Role::Activation;
    const int carried = op.outputs[0];  // the logical tensor the collectives carry a part of
    const std::string& base = op.name;
    auto rankOfT = [&](int t) { return group[static_cast<std::size_t>(t)]; };
    // One local op per rank: out[t] = kind(ins(t)).
    auto each = [&](const std::string& what, const std::string& kind, const Shape& shape, auto ins, json attrs, bool vocabPart = false) {
        std::vector<std::string> outs;
        for (int t = 0; t < T; ++t) {
            auto out = localTensor(base + "." + what, rankOfT(t), m, shape, role);
            json a = attrs;
            if (vocabPart) {
                a["parts"] = T;
                a["index"] = t;
            }
            emitLocal(base + "." + what + instanceSuffix(m, rankOfT(t)), kind, rankOfT(t), m, op.phase, ins(t), {out}, a);
            outs.push_back(std::move(out));
        }
        return outs;
    };
    auto allReduce = [&](const std::string& what, const std::vector<std::string>& ins, const Shape& shape, const char* reduce) {
        std::vector<std::string> outs;
        for (int t = 0; t < T; ++t) outs.push_back(localTensor(base + "." + what, rankOfT(t), m, shape, role));
        emitCollective(base + "." + what + "_all_reduce" + instanceSuffix(m, group[0]), "all_reduce", group, m, carried, ins, outs,
                       json{{"reduce", reduce}});
        return outs;
    };
    auto x = [&](int t) { return inst(in[0], t); };
    auto y = [&](int t) { return inst(in[1], t); };
    const auto key = std::to_string(in[0]) + ":" + std::to_string(lane) + ":" + std::to_string(cpMember);

    // exp(x - max) on each part, with the maximum and the sum of exponentials over the whole vocabulary.
    std::vector<std::string> shifted, exps, total;
    auto softmaxParts = [&]() {
        auto localMax = each("max", "max", lead1, [&](int t) { return std::vector<std::string>{x(t)}; }, json{{"dim", -1}, {"keepdim", true}});
        auto max = allReduce("max", localMax, lead1, "max");
        shifted = each("shifted", "sub", xs, [&](int t) { return std::vector<std::string>{x(t), max[static_cast<std::size_t>(t)]}; }, json::object());
        exps = each("exp", "exp", xs, [&](int t) { return std::vector<std::string>{shifted[static_cast<std::size_t>(t)]}; }, json::object());
        auto localSum = each("sum_exp", "sum", lead1, [&](int t) { return std::vector<std::string>{exps[static_cast<std::size_t>(t)]}; },
                             json{{"dims", {-1}}, {"keepdim", true}});
        total = allReduce("sum_exp", localSum, lead1, "sum");
    };
    if (!backward) {
        softmaxParts();
        for (int t = 0; t < T; ++t)
            vocabSoftmax[key + ":" + std::to_string(t)] = {exps[static_cast<std::size_t>(t)], total[static_cast<std::size_t>(t)]};
        // the label's logit (minus the max) from the part that holds it
        auto localTarget = each("target", "target_logit", lead,
                                [&](int t) { return std::vector<std::string>{shifted[static_cast<std::size_t>(t)], y(t)}; }, json::object(), true);
        auto target = allReduce("target", localTarget, lead, "sum");
        auto lse = each("log_sum_exp", "log", lead1, [&](int t) { return std::vector<std::string>{total[static_cast<std::size_t>(t)]}; }, json::object());
        auto flat = each("log_sum_exp_flat", "reshape", lead, [&](int t) { return std::vector<std::string>{lse[static_cast<std::size_t>(t)]}; }, json::object());
        auto tokenLoss = each("token_loss", "sub", lead,
                              [&](int t) { return std::vector<std::string>{flat[static_cast<std::size_t>(t)], target[static_cast<std::size_t>(t)]}; },
                              json::object());
        for (int t = 0; t < T; ++t)
            emitLocal(base + ".mean" + instanceSuffix(m, rankOfT(t)), "mean", rankOfT(t), m, op.phase, {tokenLoss[static_cast<std::size_t>(t)]},
                      {inst(outV[0], t)}, json::object());
        return;
    }
    // backward: (softmax - one_hot) * dloss / tokens, the softmax from the forward's parts.
    bool saved = true;
    for (int t = 0; t < T; ++t) saved = saved && vocabSoftmax.count(key + ":" + std::to_string(t));
    if (saved) {
        for (int t = 0; t < T; ++t) {
            const auto& sp = vocabSoftmax[key + ":" + std::to_string(t)];
            exps.push_back(sp.exps);
            total.push_back(sp.total);
        }
    } else {
        softmaxParts();
    }
    auto softmax = each("softmax", "div", xs,
                        [&](int t) { return std::vector<std::string>{exps[static_cast<std::size_t>(t)], total[static_cast<std::size_t>(t)]}; }, json::object());
    auto hot = each("one_hot", "one_hot", xs, [&](int t) { return std::vector<std::string>{y(t)}; }, json::object(), true);
    auto diff = each("softmax_minus_one_hot", "sub", xs,
                     [&](int t) { return std::vector<std::string>{softmax[static_cast<std::size_t>(t)], hot[static_cast<std::size_t>(t)]}; }, json::object());
    auto perToken = each("dloss_per_token", "mean_backward", lead, [&](int t) { return std::vector<std::string>{inst(in[2], t)}; }, json::object());
    auto perToken1 = each("dloss_per_token_col", "reshape", lead1, [&](int t) { return std::vector<std::string>{perToken[static_cast<std::size_t>(t)]}; },
                          json::object());
    for (int t = 0; t < T; ++t)
        emitLocal(base + ".scale" + instanceSuffix(m, rankOfT(t)), "mul", rankOfT(t), m, op.phase,
                  {diff[static_cast<std::size_t>(t)], perToken1[static_cast<std::size_t>(t)]}, {inst(outV[0], t)}, json::object());
}

void Parallelizer::findRingAttention() {
    std::vector<std::vector<int>> consumers(M.tensors.size());
    for (std::size_t i = 0; i < M.ops.size(); ++i)
        if (!M.ops[i].dead)
            for (int t : M.ops[i].inputs) consumers[static_cast<std::size_t>(t)].push_back(static_cast<int>(i));
    auto producer = [&](int t) { return lt(t).producer; };
    auto opAt = [&](int i) -> const LOp& { return M.ops[static_cast<std::size_t>(i)]; };
    auto flag = [](const LOp& o, const char* key) { return o.attrs.contains(key) && o.attrs[key].is_boolean() && o.attrs[key].get<bool>(); };
    auto only = [&](int t, std::initializer_list<int> ops) {
        std::set<int> want(ops), have(consumers[static_cast<std::size_t>(t)].begin(), consumers[static_cast<std::size_t>(t)].end());
        return want == have;
    };
    for (std::size_t i = 0; i < M.ops.size(); ++i) {
        const auto& sm = M.ops[i];
        if (sm.dead || sm.kind != "softmax" || sm.phase != Phase::Forward) continue;
        RingAttention ra;
        ra.softmaxOp = static_cast<int>(i);
        ra.maskOp = producer(sm.inputs[0]);
        if (ra.maskOp < 0 || opAt(ra.maskOp).kind != "add" || opAt(ra.maskOp).inputs.size() != 2) continue;
        ra.scaleOp = producer(opAt(ra.maskOp).inputs[0]);
        ra.mask = opAt(ra.maskOp).inputs[1];
        if (ra.scaleOp < 0 || opAt(ra.scaleOp).kind != "div_sqrt") continue;
        ra.scoresOp = producer(opAt(ra.scaleOp).inputs[0]);
        if (ra.scoresOp < 0 || opAt(ra.scoresOp).kind != "matmul" || !flag(opAt(ra.scoresOp), "transpose_b") || flag(opAt(ra.scoresOp), "transpose_a")) continue;
        ra.q = opAt(ra.scoresOp).inputs[0];
        ra.k = opAt(ra.scoresOp).inputs[1];
        ra.n = opAt(ra.scaleOp).attrs.value("n", std::int64_t(1));
        const int probs = sm.outputs[0];
        for (int c : consumers[static_cast<std::size_t>(probs)]) {
            const auto& o = opAt(c);
            if (o.kind == "matmul" && o.phase == Phase::Forward && o.inputs[0] == probs && !flag(o, "transpose_a") && !flag(o, "transpose_b")) ra.contextOp = c;
            else if (o.kind == "softmax_backward" && o.inputs[0] == probs) ra.softmaxBwOp = c;
            else if (o.kind == "matmul" && o.inputs[0] == probs && flag(o, "transpose_a")) ra.dvOp = c;
        }
        if (ra.contextOp < 0 || ra.softmaxBwOp < 0 || ra.dvOp < 0) continue;
        ra.v = opAt(ra.contextOp).inputs[1];
        ra.out = opAt(ra.contextOp).outputs[0];
        ra.dprobsOp = producer(opAt(ra.softmaxBwOp).inputs[1]);
        if (ra.dprobsOp < 0 || opAt(ra.dprobsOp).kind != "matmul" || opAt(ra.dprobsOp).inputs[1] != ra.v || !flag(opAt(ra.dprobsOp), "transpose_b")) continue;
        ra.dctx = opAt(ra.dprobsOp).inputs[0];
        if (opAt(ra.dvOp).inputs[1] != ra.dctx) continue;
        const int dsm = opAt(ra.softmaxBwOp).outputs[0];
        if (consumers[static_cast<std::size_t>(dsm)].size() != 1 || opAt(consumers[static_cast<std::size_t>(dsm)][0]).kind != "div_sqrt") continue;
        ra.dscaleOp = consumers[static_cast<std::size_t>(dsm)][0];
        const int dsc = opAt(ra.dscaleOp).outputs[0];
        for (int c : consumers[static_cast<std::size_t>(dsc)]) {
            const auto& o = opAt(c);
            if (o.kind != "matmul" || o.inputs[0] != dsc) continue;
            if (o.inputs[1] == ra.k && !flag(o, "transpose_a") && !flag(o, "transpose_b")) ra.dqOp = c;
            if (o.inputs[1] == ra.q && flag(o, "transpose_a") && !flag(o, "transpose_b")) ra.dkOp = c;
        }
        if (ra.dqOp < 0 || ra.dkOp < 0 || consumers[static_cast<std::size_t>(dsc)].size() != 2) continue;
        // Nothing outside the core may read what the ring never materialises.
        const auto& scoresT = opAt(ra.scoresOp).outputs[0];
        if (!only(scoresT, {ra.scaleOp}) || !only(opAt(ra.scaleOp).outputs[0], {ra.maskOp}) || !only(sm.inputs[0], {ra.softmaxOp}) ||
            !only(probs, {ra.contextOp, ra.softmaxBwOp, ra.dvOp}) || !only(opAt(ra.dprobsOp).outputs[0], {ra.softmaxBwOp}))
            continue;
        ra.dq = opAt(ra.dqOp).outputs[0];
        ra.dk = opAt(ra.dkOp).outputs[0];
        ra.dv = opAt(ra.dvOp).outputs[0];
        ra.base = opAt(ra.scoresOp).name;
        if (auto dot = ra.base.rfind('.'); dot != std::string::npos) ra.base = ra.base.substr(0, dot);
        ra.base += ".ring";
        const int r = static_cast<int>(rings.size());
        const std::vector<int> fwd{ra.scoresOp, ra.scaleOp, ra.maskOp, ra.softmaxOp, ra.contextOp};
        const std::vector<int> bwd{ra.dprobsOp, ra.dvOp, ra.softmaxBwOp, ra.dscaleOp, ra.dqOp, ra.dkOp};
        const int firstF = *std::min_element(fwd.begin(), fwd.end()), firstB = *std::min_element(bwd.begin(), bwd.end());
        for (int o : fwd) ringOps[o] = {r, o == firstF};
        for (int o : bwd) ringOps[o] = {r, o == firstB};
        rings.push_back(std::move(ra));
    }
}

/// Ring attention, forward (Liu et al., 2023; Megatron's p2p context parallelism). Member r of the
/// cp group holds query block r and starts with key/value block r; at each of the cp - 1 steps
/// every member passes the K/V block it holds to the next member (send_recv around the ring), so at
/// step s member r holds block (r - s) mod cp. For each block it computes the masked scores, their
/// row maximum, exp(scores - max), its row sum and the partial output, and merges them into running
/// ones (online softmax): with m' = max(m, m_b), o <- o exp(m - m') + o_b exp(m_b - m'), and the sum
/// likewise. The output is o / sum. Proving it equal to softmax(...) v needs exactly the exp
/// identities of the exp/log normal form (plan-format.md §3.10).
void Parallelizer::ringAttentionForward(const RingAttention& ra) {
    const auto& scoresOp = M.ops[static_cast<std::size_t>(ra.scoresOp)];
    const int stage = stageOf(scoresOp.layer);
    const int c = C.cp;
    const AxisState heads = tpAxis() ? AxisState::shard(1) : AxisState::rep(), seq = AxisState::shard(2);
    const int q0 = source(ra.q, stage);
    const AxisState lane = versions[static_cast<std::size_t>(q0)].pl.lane;
    const int q = rescale(convert(q0, lane, heads, seq), Rational(1));
    const int k = rescale(convert(source(ra.k, stage), lane, heads, seq), Rational(1));
    const int v = rescale(convert(source(ra.v, stage), lane, heads, seq), Rational(1));
    const int mask = rescale(convert(source(ra.mask, stage), AxisState::rep(), AxisState::rep(), AxisState::shard(0)), Rational(1));
    const int outV = newVersion(ra.out, stage, Placement{lane, heads, seq, Rational(1)}, lt(ra.out).name);
    const Shape qs = localShape(ra.q, versions[static_cast<std::size_t>(q)].pl), vs = localShape(ra.v, versions[static_cast<std::size_t>(v)].pl);
    const std::int64_t Sl = qs[2];
    const Shape block{qs[0], qs[1], Sl, Sl}, stat{qs[0], qs[1], Sl, 1}, stat2{qs[0], qs[1], Sl, 2}, outS{qs[0], qs[1], Sl, vs[3]};
    const Shape maskBlock{Sl, Sl};
    const Phase ph = Phase::Forward;
    const std::string& base = ra.base;
    Placement opPl{lane, heads, seq, Rational(1)};
    for (int l = 0; l < lanes(opPl); ++l) {
        const int kk = laneK(opPl, l), m = laneM(opPl, l);
        for (int t = 0; t < C.tp; ++t) {
            auto rank = [&](int r) { return rankOf(kk, stage, member(r, t)); };
            auto inst = [&](int vi, int r) {
                const auto& ver = versions[static_cast<std::size_t>(vi)];
                return ver.inst[static_cast<std::size_t>((perReplica(ver.pl) ? kk : l) * G() + member(r, t))];
            };
            auto local = [&](const std::string& what, int r, const Shape& shape) { return localTensor(base + "." + what, rank(r), m, shape, Role::Activation); };
            auto op = [&](const std::string& what, const std::string& kind, int r, std::vector<std::string> ins, const Shape& shape, json attrs,
                          const std::string& into = {}) {
                auto out = into.empty() ? local(what, r, shape) : into;
                emitLocal(base + "." + what + instanceSuffix(m, rank(r)), kind, rank(r), m, ph, ins, {out}, attrs);
                return out;
            };
            // K and V around the ring.
            std::vector<std::vector<std::string>> K(static_cast<std::size_t>(c)), V(static_cast<std::size_t>(c));
            for (int r = 0; r < c; ++r) {
                K[0].push_back(inst(k, r));
                V[0].push_back(inst(v, r));
            }
            for (int s = 1; s < c; ++s)
                for (int r = 0; r < c; ++r) {
                    const int from = (r - 1 + c) % c;
                    for (auto [what, blocks, logical] : {std::tuple{"k", &K, ra.k}, std::tuple{"v", &V, ra.v}}) {
                        const auto& prev = (*blocks)[static_cast<std::size_t>(s - 1)][static_cast<std::size_t>(from)];
                        auto recv = local(std::string(what) + ".step" + std::to_string(s), r, what[0] == 'k' ? localShape(ra.k, versions[static_cast<std::size_t>(k)].pl) : vs);
                        emitCollective(base + "." + what + ".step" + std::to_string(s) + ".send" + instanceSuffix(m, rank(r)), "send_recv",
                                       {rank(from), rank(r)}, m, logical, {prev}, {recv}, json::object());
                        (*blocks)[static_cast<std::size_t>(s)].push_back(recv);
                    }
                }
            for (int r = 0; r < c; ++r) {
                RingSaved saved;
                std::string mRun, lRun, oRun;
                for (int s = 0; s < c; ++s) {
                    const int j = (r - s + c) % c;
                    const auto S = ".step" + std::to_string(s);
                    const auto& Kb = K[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)];
                    const auto& Vb = V[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)];
                    auto sc = op("scores" + S, "matmul", r, {inst(q, r), Kb}, block, json{{"transpose_b", true}});
                    auto scl = op("scale" + S, "div_sqrt", r, {sc}, block, json{{"n", ra.n}});
                    auto mb = op("mask_block" + S, "slice", r, {inst(mask, r)}, maskBlock, json{{"dim", 1}, {"start", j * Sl}, {"end", (j + 1) * Sl}});
                    auto msk = op("masked" + S, "add", r, {scl, mb}, block, json::object());
                    auto mx = op("max" + S, "max", r, {msk}, stat, json{{"dim", 3}, {"keepdim", true}});
                    auto sh = op("shifted" + S, "sub", r, {msk, mx}, block, json::object());
                    auto p = op("exp" + S, "exp", r, {sh}, block, json::object());
                    auto lb = op("sum" + S, "sum", r, {p}, stat, json{{"dims", {3}}, {"keepdim", true}});
                    auto ob = op("partial" + S, "matmul", r, {p, Vb}, outS, json::object());
                    saved.k.push_back(Kb);
                    saved.v.push_back(Vb);
                    saved.masked.push_back(msk);
                    if (s == 0) {
                        mRun = mx;
                        lRun = lb;
                        oRun = ob;
                        continue;
                    }
                    auto both = op("maxes" + S, "concat", r, {mRun, mx}, stat2, json{{"dim", 3}});
                    auto mNew = op("running_max" + S, "max", r, {both}, stat, json{{"dim", 3}, {"keepdim", true}});
                    auto a = op("rescale_old" + S, "exp", r, {op("old_minus_max" + S, "sub", r, {mRun, mNew}, stat, json::object())}, stat, json::object());
                    auto b = op("rescale_block" + S, "exp", r, {op("block_minus_max" + S, "sub", r, {mx, mNew}, stat, json::object())}, stat, json::object());
                    oRun = op("running_out" + S, "add", r,
                              {op("old_out" + S, "mul", r, {oRun, a}, outS, json::object()), op("block_out" + S, "mul", r, {ob, b}, outS, json::object())},
                              outS, json::object());
                    lRun = op("running_sum" + S, "add", r,
                              {op("old_sum" + S, "mul", r, {lRun, a}, stat, json::object()), op("block_sum" + S, "mul", r, {lb, b}, stat, json::object())},
                              stat, json::object());
                    mRun = mNew;
                }
                const auto out = inst(outV, r);
                op("normalise", "div", r, {oRun, lRun}, outS, json::object(), out);
                saved.max = mRun;
                saved.sum = lRun;
                saved.runningOut = oRun;
                ringSaved[std::to_string(&ra - rings.data()) + ":" + std::to_string(l) + ":" + std::to_string(member(r, t))] = std::move(saved);
            }
        }
    }
    produced[static_cast<std::size_t>(ra.out)] = outV;
}

/// Ring attention, backward (FlashAttention's, blockwise): with the forward's output, row maximum
/// and sum, member r recomputes p = exp(scores - max) / sum for each key block, and
/// D = rowsum(dout * out); then dv_b = p^T dout, ds = p (dout v_b^T - D) / sqrt(n), dq += ds k_b,
/// dk_b = ds^T q. The dk and dv of block b travel around the ring with the block, each member
/// adding its part, and a last send brings them home to member b.
void Parallelizer::ringAttentionBackward(const RingAttention& ra) {
    const auto& first = M.ops[static_cast<std::size_t>(ra.dprobsOp)];
    const int stage = stageOf(first.layer);
    const int c = C.cp;
    const AxisState heads = tpAxis() ? AxisState::shard(1) : AxisState::rep(), seq = AxisState::shard(2);
    const int q0 = source(ra.q, stage);
    const AxisState lane = versions[static_cast<std::size_t>(q0)].pl.lane;
    const int q = rescale(convert(q0, lane, heads, seq), Rational(1));
    const int dout = rescale(convert(source(ra.dctx, stage), lane, heads, seq), Rational(1));
    const Placement outPl{lane, heads, seq, Rational(1)};
    const int dqV = newVersion(ra.dq, stage, outPl, lt(ra.dq).name), dkV = newVersion(ra.dk, stage, outPl, lt(ra.dk).name),
              dvV = newVersion(ra.dv, stage, outPl, lt(ra.dv).name);
    const Shape qs = localShape(ra.q, outPl), ks = localShape(ra.k, outPl), vs = localShape(ra.v, outPl);
    const std::int64_t Sl = qs[2];
    const Shape block{qs[0], qs[1], Sl, Sl}, stat{qs[0], qs[1], Sl, 1};
    const Phase ph = first.phase;
    const std::string base = ra.base + ".backward";
    const int ringIndex = static_cast<int>(&ra - rings.data());
    for (int l = 0; l < lanes(outPl); ++l) {
        const int kk = laneK(outPl, l), m = laneM(outPl, l);
        for (int t = 0; t < C.tp; ++t) {
            auto rank = [&](int r) { return rankOf(kk, stage, member(r, t)); };
            auto inst = [&](int vi, int r) {
                const auto& ver = versions[static_cast<std::size_t>(vi)];
                return ver.inst[static_cast<std::size_t>((perReplica(ver.pl) ? kk : l) * G() + member(r, t))];
            };
            auto op = [&](const std::string& what, const std::string& kind, int r, std::vector<std::string> ins, const Shape& shape, json attrs,
                          const std::string& into = {}) {
                auto out = into.empty() ? localTensor(base + "." + what, rank(r), m, shape, Role::Gradient) : into;
                emitLocal(base + "." + what + instanceSuffix(m, rank(r)), kind, rank(r), m, ph, ins, {out}, attrs);
                return out;
            };
            auto savedOf = [&](int r) -> const RingSaved& {
                auto it = ringSaved.find(std::to_string(ringIndex) + ":" + std::to_string(l) + ":" + std::to_string(member(r, t)));
                if (it == ringSaved.end()) throw std::logic_error("generator: ring attention backward of " + ra.base + " before its forward");
                return it->second;
            };
            // D = rowsum(dout * out), with out = o / sum from the forward's running values (reading
            // the output itself would cut the proof at its lineage: the logical backward never
            // reads the context, so the relation of out to q, k and v would be lost).
            std::vector<std::string> D(static_cast<std::size_t>(c));
            const Shape outS = localShape(ra.out, outPl);
            for (int r = 0; r < c; ++r) {
                auto out = op("out", "div", r, {savedOf(r).runningOut, savedOf(r).sum}, outS, json::object());
                D[static_cast<std::size_t>(r)] = op("D", "sum", r, {op("dout_times_out", "mul", r, {inst(dout, r), out}, outS, json::object())}, stat,
                                                    json{{"dims", {3}}, {"keepdim", true}});
            }
            std::vector<std::string> dqRun(static_cast<std::size_t>(c)), dkAcc(static_cast<std::size_t>(c)), dvAcc(static_cast<std::size_t>(c));
            for (int s = 0; s < c; ++s) {
                const auto S = ".step" + std::to_string(s);
                for (int r = 0; r < c; ++r) {
                    const int j = (r - s + c) % c;  // the key block member r holds at step s
                    const auto& sv = savedOf(r);
                    const auto& Kb = sv.k[static_cast<std::size_t>(s)];
                    const auto& Vb = sv.v[static_cast<std::size_t>(s)];
                    auto e = op("exp" + S, "exp", r, {op("shifted" + S, "sub", r, {sv.masked[static_cast<std::size_t>(s)], sv.max}, block, json::object())}, block,
                                json::object());
                    auto p = op("probs" + S, "div", r, {e, sv.sum}, block, json::object());
                    auto dvPart = op("dv_part" + S, "matmul", r, {p, inst(dout, r)}, vs, json{{"transpose_a", true}});
                    auto dp = op("dprobs" + S, "matmul", r, {inst(dout, r), Vb}, block, json{{"transpose_b", true}});
                    auto ds = op("dscores_unscaled" + S, "mul", r, {p, op("dprobs_minus_D" + S, "sub", r, {dp, D[static_cast<std::size_t>(r)]}, block, json::object())},
                                 block, json::object());
                    auto dsc = op("dscores" + S, "div_sqrt", r, {ds}, block, json{{"n", ra.n}});
                    auto dqPart = op("dq_part" + S, "matmul", r, {dsc, Kb}, qs, json::object());
                    auto dkPart = op("dk_part" + S, "matmul", r, {dsc, inst(q, r)}, ks, json{{"transpose_a", true}});
                    auto& dq = dqRun[static_cast<std::size_t>(r)];
                    dq = s == 0 ? dqPart : op("dq" + S, "add", r, {dq, dqPart}, qs, json::object(), s == c - 1 ? inst(dqV, r) : std::string());
                    // The accumulators of block j: here since the previous step, from member r - 1.
                    for (auto [what, acc, part, shape, logical] :
                         {std::tuple{"dk", &dkAcc, dkPart, ks, ra.dk}, std::tuple{"dv", &dvAcc, dvPart, vs, ra.dv}}) {
                        auto& a = (*acc)[static_cast<std::size_t>(j)];
                        if (s == 0) {
                            a = part;
                            continue;
                        }
                        auto recv = localTensor(base + "." + what + "_acc" + S, rank(r), m, shape, Role::Gradient);
                        emitCollective(base + "." + what + "_acc" + S + ".send" + instanceSuffix(m, rank(r)), "send_recv", {rank((r - 1 + c) % c), rank(r)},
                                       m, logical, {a}, {recv}, json::object());
                        a = op(std::string(what) + "_acc" + S, "add", r, {recv, part}, shape, json::object());
                    }
                }
            }
            // Home: block j's accumulators are with member j - 1 after the last step.
            for (int j = 0; j < c; ++j)
                for (auto [what, acc, vi, logical] : {std::tuple{"dk", &dkAcc, dkV, ra.dk}, std::tuple{"dv", &dvAcc, dvV, ra.dv}})
                    emitCollective(base + "." + what + ".home.send" + instanceSuffix(m, rank(j)), "send_recv", {rank((j - 1 + c) % c), rank(j)}, m, logical,
                                   {(*acc)[static_cast<std::size_t>(j)]}, {inst(vi, j)}, json::object());
        }
    }
    produced[static_cast<std::size_t>(ra.dq)] = dqV;
    produced[static_cast<std::size_t>(ra.dk)] = dkV;
    produced[static_cast<std::size_t>(ra.dv)] = dvV;
}

json Parallelizer::lineage() const {
    json records = json::array();
    std::vector<bool> initialDone(M.tensors.size(), false);
    for (std::size_t vi = 0; vi < versions.size(); ++vi) {
        const auto& v0 = versions[vi];
        std::vector<const Version*> group{&v0};
        if (v0.initial) {
            // Every stage's copy of an input is one record: the input's lineage, taken as given.
            if (initialDone[static_cast<std::size_t>(v0.logical)]) continue;
            initialDone[static_cast<std::size_t>(v0.logical)] = true;
            group.clear();
            for (int i : initialOf[static_cast<std::size_t>(v0.logical)]) group.push_back(&versions[static_cast<std::size_t>(i)]);
        }
        const auto& p = v0.pl;
        const auto& full = lt(v0.logical).shape;
        const int laneSlices = p.lane.st == St::Shard ? listedDp * listedMb : p.lane.st == St::DpShard ? listedDp : 1;
        const int tpSlices = p.tp.st == St::Shard ? C.tp : 1;
        const int cpSlices = p.cp.st == St::Shard ? C.cp : 1;
        json slices = json::array();
        for (int ls = 0; ls < laneSlices; ++ls)
          for (int cs = 0; cs < cpSlices; ++cs)
            for (int ts = 0; ts < tpSlices; ++ts) {
                json box = json::array();
                for (std::size_t d = 0; d < full.size(); ++d) {
                    std::int64_t lo = 0, hi = full[d];
                    if (p.lane.st == St::Shard && p.lane.dim == static_cast<int>(d)) {
                        lo = full[d] / L * ls;
                        hi = lo + full[d] / L;
                    }
                    if (p.lane.st == St::DpShard && p.lane.dim == static_cast<int>(d)) {
                        lo = full[d] / C.dp * ls;
                        hi = lo + full[d] / C.dp;
                    }
                    if (p.tp.st == St::Shard && p.tp.dim == static_cast<int>(d)) {
                        lo = full[d] / C.tp * ts;
                        hi = lo + full[d] / C.tp;
                    }
                    if (p.cp.st == St::Shard && p.cp.dim == static_cast<int>(d)) {
                        lo = full[d] / C.cp * cs;
                        hi = lo + full[d] / C.cp;
                    }
                    box.push_back({lo, hi});
                }
                // Which (lane, t) instances make copies (replicated axes) and which are summed (partial axes).
                std::vector<int> copyLanes, termLanes, copyTp, termTp;
                if (p.lane.st == St::Shard || p.lane.st == St::DpShard) copyLanes = {ls};
                else if (p.lane.st == St::Rep) for (int l = 0; l < listedDp; ++l) copyLanes.push_back(l);
                if (p.lane.st == St::Partial) { copyLanes = {-1}; for (int l = 0; l < listedDp * listedMb; ++l) termLanes.push_back(l); }
                else termLanes = {-1};
                if (p.tp.st == St::Shard) copyTp = {ts};
                else if (p.tp.st == St::Rep) for (int t = 0; t < C.tp; ++t) copyTp.push_back(t);
                if (p.tp.st == St::Partial) { copyTp = {-1}; for (int t = 0; t < C.tp; ++t) termTp.push_back(t); }
                else termTp = {-1};
                std::vector<int> copyCp, termCp;
                if (p.cp.st == St::Shard) copyCp = {cs};
                else if (p.cp.st == St::Rep) for (int c = 0; c < C.cp; ++c) copyCp.push_back(c);
                if (p.cp.st == St::Partial) { copyCp = {-1}; for (int c = 0; c < C.cp; ++c) termCp.push_back(c); }
                else termCp = {-1};
                json copies = json::array();
                for (const auto* v : group)
                    for (int cl : copyLanes)
                      for (int cc : copyCp)
                        for (int ct : copyTp) {
                            json terms = json::array();
                            for (int tl : termLanes)
                              for (int tc : termCp)
                                for (int tt : termTp) {
                                    int l = cl >= 0 ? cl : tl, t = ct >= 0 ? ct : tt, c = cc >= 0 ? cc : tc;
                                    const auto& name = v->inst[static_cast<std::size_t>(l * G() + member(c, t))];
                                    if (p.coeff == Rational(1))
                                        terms.push_back(name);
                                    else
                                        terms.push_back(json{{"tensor", name}, {"coeff", p.coeff.toString()}});
                                }
                            copies.push_back(std::move(terms));
                        }
                slices.push_back(json{{"box", box}, {"copies", copies}});
            }
        json rec{{"logical", lt(v0.logical).name}, {"slices", slices}};
        if (compact()) {
            // How the record repeats in the other replicas.
            if (p.lane.st == St::Shard || p.lane.st == St::DpShard) rec["replicas"] = json{{"split_dim", p.lane.dim}};
            else rec["replicas"] = p.lane.st == St::Partial ? "sum" : "copies";
        }
        records.push_back(std::move(rec));
    }
    return records;
}

json Parallelizer::logicalJson() const {
    std::vector<bool> used(M.tensors.size(), false);
    json ops = json::array();
    for (const auto& o : M.ops) {
        if (o.dead) continue;
        json j{{"id", o.name}, {"op", o.kind}, {"inputs", json::array()}, {"outputs", json::array()}};
        for (int t : o.inputs) {
            j["inputs"].push_back(lt(t).name);
            used[static_cast<std::size_t>(t)] = true;
        }
        for (int t : o.outputs) {
            j["outputs"].push_back(lt(t).name);
            used[static_cast<std::size_t>(t)] = true;
        }
        if (o.phase != Phase::Forward) j["phase"] = std::string(toString(o.phase));
        if (!o.attrs.empty()) j["attrs"] = o.attrs;
        ops.push_back(std::move(j));
    }
    json tensors = json::array();
    for (std::size_t t = 0; t < M.tensors.size(); ++t) {
        if (!used[t]) continue;
        const auto& x = M.tensors[t];
        json j{{"id", x.name}, {"shape", x.shape}, {"role", std::string(toString(x.role))}};
        if (x.dtype == DType::Int) j["dtype"] = "int";
        tensors.push_back(std::move(j));
    }
    return json{{"tensors", tensors}, {"ops", ops}};
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
                    if (lt(t).role == Role::Weight && versions[static_cast<std::size_t>(produced[static_cast<std::size_t>(t)])].pl.lane.st == St::DpShard)
                        produced[static_cast<std::size_t>(t)] = dpGather(produced[static_cast<std::size_t>(t)]);
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
    auto stageOfRank = [&](int rank) { return (rank / G()) % C.pp; };
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

}  // namespace

json parallelize(const LogicalModel& model, const ParallelConfig& cfg) {
    Parallelizer p(model, cfg);
    return p.run();
}

}  // namespace tv::gen
