#include "bugs/bug_catalog.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "io/plan_repeats.hpp"
#include "ops/registry.hpp"
#include "verify/symmetry.hpp"
#include "model/instance_names.hpp"

namespace tv::bugs {

using json = nlohmann::json;

std::string_view toString(Category c) {
    switch (c) {
    case Category::Communication: return "communication";
    case Category::RankAssignment: return "rank assignment";
    case Category::Computation: return "computation";
    case Category::Scaling: return "scaling";
    case Category::Scheduling: return "scheduling";
    case Category::DataParallel: return "data parallel";
    case Category::Optimizer: return "optimizer";
    case Category::Data: return "data";
    }
    return "?";
}

namespace {

const OpRegistry& reg() { return OpRegistry::instance(); }

std::string joinRanks(const std::vector<std::int32_t>& ranks) {
    std::string s;
    for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    return s;
}

// ----- a plan as the site finders see it ---------------------------------------------------

struct Where {
    std::int32_t record = -1, slice = -1, copy = -1;
};

class View {
public:
    View(const Plan& plan, bool writtenOut) : p(plan), g(plan.parallel), writtenOut(writtenOut), where_(g.tensors.size()) {
        std::unordered_set<TensorId> seen;
        initial_.resize(p.lineage.size(), false);
        for (std::size_t r = 0; r < p.lineage.size(); ++r) {
            const auto& rec = p.lineage[r];
            initial_[r] = p.logical.tensors[rec.logical].producer == kNone && seen.insert(rec.logical).second;
            for (std::size_t s = 0; s < rec.slices.size(); ++s)
                for (std::size_t c = 0; c < rec.slices[s].copies.size(); ++c)
                    for (const auto& t : rec.slices[s].copies[c])
                        where_[t.tensor] = {static_cast<std::int32_t>(r), static_cast<std::int32_t>(s), static_cast<std::int32_t>(c)};
        }
    }

    const Plan& p;
    const Graph& g;
    bool writtenOut;

    std::string_view kind(OpId o) const { return reg().spec(g.ops[o].kind).name; }
    bool collective(OpId o) const { return reg().spec(g.ops[o].kind).collective; }
    const json& attrs(OpId o) const { return p.opAttrs(g, o); }
    const std::vector<std::int32_t>& group(OpId o) const { return p.groups[g.ops[o].group]; }
    const std::string& name(OpId o) const { return p.opName(g, o); }
    const std::string& tensorName(TensorId t) const { return p.tensorName(g, t); }
    const Shape& shape(TensorId t) const { return p.shape(g, t); }
    OpId producer(TensorId t) const { return g.tensors[t].producer; }
    OpId find(const std::string& opName) const {
        auto n = p.names.find(opName);
        return n == kNone ? kNone : g.findOp(n);
    }
    std::string reduce(OpId o) const {
        const auto& a = attrs(o);
        auto it = a.find("reduce");
        return it != a.end() && it->is_string() ? it->get<std::string>() : "sum";
    }
    std::int32_t coord(std::int32_t rank, Axis a) const {
        return rank >= 0 && static_cast<std::size_t>(rank) < p.ranks.size() ? p.ranks[rank].at(a) : 0;
    }
    bool sameOn(std::int32_t a, std::int32_t b, std::initializer_list<Axis> axes) const {
        for (auto x : axes)
            if (coord(a, x) != coord(b, x)) return false;
        return true;
    }
    /// Two or more ranks of one tensor-parallel group: the same replica, stage, context and
    /// expert coordinates.
    bool tensorParallelGroup(const std::vector<std::int32_t>& grp) const {
        if (grp.size() < 2) return false;
        for (auto r : grp)
            if (!sameOn(r, grp[0], {Axis::DP, Axis::PP, Axis::CP, Axis::EP})) return false;
        return true;
    }
    /// Two or more ranks that differ only in their data-parallel replica.
    bool dataParallelGroup(const std::vector<std::int32_t>& grp) const {
        if (grp.size() < 2) return false;
        for (auto r : grp)
            if (!sameOn(r, grp[0], {Axis::TP, Axis::PP, Axis::SP, Axis::CP})) return false;
        return true;
    }
    /// The phase of the computation an op reads, looking through collectives and sends.
    Phase sourcePhase(OpId o) const {
        for (int depth = 0; depth < 8; ++depth) {
            if (!collective(o) && g.ops[o].phase != Phase::Communication) return g.ops[o].phase;
            auto ins = g.inputs(o);
            if (ins.empty() || producer(ins[0]) == kNone) return g.ops[o].phase == Phase::Communication ? Phase::Forward : g.ops[o].phase;
            o = producer(ins[0]);
        }
        return g.ops[o].phase;
    }
    /// Whether an optimizer op is at most `depth` ops downstream (a weight-gradient reduction).
    bool feedsOptimizer(OpId o, int depth) const {
        if (g.ops[o].phase == Phase::Optimizer) return true;
        if (depth == 0) return false;
        for (auto t : g.outputs(o))
            for (auto c : g.consumers(t))
                if (feedsOptimizer(c, depth - 1)) return true;
        return false;
    }
    std::vector<std::int32_t> ranksOf(OpId o) const {
        if (g.ops[o].group != kNone) return group(o);
        return {g.ops[o].rank};
    }
    const Where& where(TensorId t) const { return where_[t]; }
    bool initialRecord(std::int32_t r) const { return r >= 0 && initial_[static_cast<std::size_t>(r)]; }
    /// Two tensors hold parts or copies of one slice of one record (partial sums, replicas).
    bool sameSlice(TensorId a, TensorId b) const {
        const auto &x = where_[a], &y = where_[b];
        return x.record >= 0 && x.record == y.record && x.slice == y.slice;
    }
    /// Whether a tensor depends on data that differs between data-parallel replicas (a record
    /// split across replicas: the batch), so that its replicas' values differ.
    bool perReplicaData(TensorId t) const {
        if (perReplica_.empty()) {
            perReplica_.assign(g.tensors.size(), false);
            for (std::size_t r = 0; r < p.lineage.size(); ++r) {
                const auto& rec = p.lineage[r];
                if (!initial_[r]) continue;
                bool split = rec.replicas == ReplicaMode::Split;
                for (std::size_t s = 1; s < rec.slices.size() && !split; ++s)
                    split = coord(g.tensors[rec.slices[s].copies[0][0].tensor].rank, Axis::DP) !=
                            coord(g.tensors[rec.slices[0].copies[0][0].tensor].rank, Axis::DP);
                if (!split) continue;
                for (const auto& sl : rec.slices)
                    for (const auto& c : sl.copies)
                        for (const auto& term : c) perReplica_[term.tensor] = true;
            }
            for (auto o : g.topo) {
                bool dep = false;
                for (auto in : g.inputs(o)) dep = dep || perReplica_[in];
                if (dep)
                    for (auto out : g.outputs(o)) perReplica_[out] = true;
            }
        }
        return perReplica_[t];
    }
    /// Two tensors hold different parts of one record (shards), so their values differ.
    bool differentSlices(TensorId a, TensorId b) const {
        const auto &x = where_[a], &y = where_[b];
        return x.record >= 0 && x.record == y.record && x.slice != y.slice;
    }

private:
    mutable std::vector<bool> perReplica_;
    std::vector<Where> where_;
    std::vector<bool> initial_;
};

Site makeSite(const View& v, const std::vector<OpId>& ops, std::string detail = {}) {
    Site s;
    std::set<std::int32_t> ranks;
    for (auto o : ops) {
        s.ops.push_back(v.name(o));
        for (auto r : v.ranksOf(o)) ranks.insert(r);
    }
    s.ranks.assign(ranks.begin(), ranks.end());
    s.writtenOut = v.writtenOut;
    if (detail.empty()) {
        const auto o = ops.front();
        detail = std::string(v.kind(o)) + (v.collective(o) ? " over ranks " : " on rank ") + joinRanks(v.ranksOf(o));
    }
    s.detail = std::move(detail);
    return s;
}

/// Sites whose first op's name contains `hint` first (a tie-break only; sites are found by structure).
void prefer(std::vector<Site>& sites, std::string_view hint) {
    std::stable_partition(sites.begin(), sites.end(), [&](const Site& s) { return s.ops.front().find(hint) != std::string::npos; });
}

// ----- editing the plan's document ---------------------------------------------------------

class Editor {
public:
    Editor(const View& v, json doc) : v(v), doc(std::move(doc)) {}

    const View& v;
    json doc;
    std::vector<std::string> seeds;           ///< ops the broken dataflow starts from (in the mutant)
    std::vector<std::string> removedOutputs;  ///< outputs of removed ops (kept or removed)
    std::string change;

    json& op(OpId o) { return doc["parallel"]["ops"][o]; }
    json& tensor(TensorId t) { return doc["parallel"]["tensors"][t]; }
    json& record(std::size_t r) { return doc["lineage"][r]; }

    /// A name no parallel op or tensor has yet.
    std::string fresh(const std::string& base) {
        std::string s = base;
        for (int i = 2; v.p.names.find(s) != kNone || taken_.count(s); ++i) s = base + "." + std::to_string(i);
        taken_.insert(s);
        return s;
    }
    void addOp(json j) {
        seeds.push_back(j["id"].get<std::string>());
        doc["parallel"]["ops"].push_back(std::move(j));
    }
    void addTensor(json j) { doc["parallel"]["tensors"].push_back(std::move(j)); }
    /// A new tensor like `like` (same shape, dtype, rank and microbatch) with another id.
    json tensorLike(TensorId like, const std::string& id) {
        json j = tensor(like);
        j["id"] = id;
        return j;
    }
    void edited(OpId o) { seeds.push_back(v.name(o)); }
    void removeOp(OpId o) {
        removedOps_.insert(o);
        for (auto t : v.g.outputs(o)) {
            removedOutputs.push_back(v.tensorName(t));
            for (auto c : v.g.consumers(t)) seeds.push_back(v.name(c));
        }
    }
    void removeTensor(TensorId t) { removedTensors_.insert(t); }
    /// Every consumer of `from` (other than `except`) reads `to` instead.
    void rewire(TensorId from, const std::string& to, OpId except = kNone) {
        const auto& fromName = v.tensorName(from);
        std::set<OpId> done;
        for (auto c : v.g.consumers(from)) {
            if (c == except || !done.insert(c).second) continue;
            for (auto& in : op(c)["inputs"])
                if (in == fromName) in = to;
            seeds.push_back(v.name(c));
        }
    }
    /// The edited document with the removed ops and tensors gone.
    json finish() {
        auto& ops = doc["parallel"]["ops"];
        for (auto it = removedOps_.rbegin(); it != removedOps_.rend(); ++it) ops.erase(*it);
        auto& tensors = doc["parallel"]["tensors"];
        for (auto it = removedTensors_.rbegin(); it != removedTensors_.rend(); ++it) tensors.erase(*it);
        return std::move(doc);
    }

private:
    std::set<OpId> removedOps_;
    std::set<TensorId> removedTensors_;
    std::unordered_set<std::string> taken_;
};

/// Replaces a collective by one local identity per member: the data stays where it was.
void collectiveToIdentities(Editor& e, OpId o) {
    const auto& v = e.v;
    const auto grp = v.group(o);
    const auto ins = v.g.inputs(o);
    const auto outs = v.g.outputs(o);
    const json orig = e.op(o);
    const std::string phase(toString(v.sourcePhase(o)));
    for (std::size_t k = 0; k < grp.size(); ++k) {
        json j = {{"id", k == 0 ? v.name(o) : e.fresh(v.name(o) + ".member" + std::to_string(k))},
                  {"op", "identity"},
                  {"rank", grp[k]},
                  {"phase", phase},
                  {"inputs", json::array({v.tensorName(ins[k])})},
                  {"outputs", json::array({v.tensorName(outs[k])})}};
        if (orig.contains("microbatch")) j["microbatch"] = orig["microbatch"];
        if (k == 0) {
            e.op(o) = j;
            e.edited(o);
        } else {
            e.addOp(std::move(j));
        }
    }
}

// ----- the entries -------------------------------------------------------------------------

enum class Form : std::uint8_t {
    Stored,               ///< as the plan stores it (every replica and microbatch alike)
    WrittenOut,           ///< replicas and microbatches written out: one instance differs
    StoredThenWrittenOut  ///< stored if it has a site there, else written out
};

struct Entry {
    BugKind kind;
    Form form;
    std::vector<FailureKind> kinds;  ///< empty: the reader must reject the mutant (shape mismatch)
    std::string (*lacks)(const Plan&);               ///< what the plan lacks for this bug, "" if nothing
    std::string_view noSite;                          ///< why a plan may have no site
    std::vector<Site> (*sites)(const View&);
    std::string (*apply)(Editor&, const Site&);       ///< edits; returns the change, one sentence
};

std::string lacksNothing(const Plan&) { return {}; }
std::string needsTp(const Plan& p) { return p.mesh.at(Axis::TP) > 1 ? "" : "needs tensor parallelism (tp 2 or more)"; }
std::string needsDp(const Plan& p) {
    return std::max(p.mesh.at(Axis::DP), p.replication.degree) > 1 ? "" : "needs data parallelism (dp 2 or more)";
}
std::string needsMicrobatches(const Plan& p) {
    return std::max(p.microbatches, p.replication.microbatches) > 1 ? "" : "needs 2 or more microbatches";
}
std::string needsPpTp(const Plan& p) {
    if (p.mesh.at(Axis::PP) < 2 || p.mesh.at(Axis::TP) < 2) return "needs pipeline and tensor parallelism (pp 2 or more and tp 2 or more)";
    return {};
}
std::string needsPp(const Plan& p) { return p.mesh.at(Axis::PP) > 1 ? "" : "needs pipeline parallelism (pp 2 or more)"; }
std::string needsPpMicrobatches(const Plan& p) {
    if (auto w = needsPp(p); !w.empty()) return w;
    return needsMicrobatches(p);
}
std::string needsCp(const Plan& p) { return p.mesh.at(Axis::CP) > 1 ? "" : "needs context parallelism (cp 2 or more)"; }

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

std::vector<Site> opsOfKind(const View& v, std::initializer_list<std::string_view> kinds, Phase phase) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.g.ops[o].phase == phase && std::find(kinds.begin(), kinds.end(), v.kind(o)) != kinds.end()) out.push_back(makeSite(v, {o}));
    return out;
}

/// Sets of ops of one kind that are the tensor-parallel peers of one computation (one stem).
std::vector<Site> peerSets(const View& v, std::initializer_list<std::string_view> kinds, Phase phase) {
    std::map<std::string, std::vector<OpId>> byStem;
    std::vector<std::string> order;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.g.ops[o].phase != phase || std::find(kinds.begin(), kinds.end(), v.kind(o)) == kinds.end()) continue;
        auto stem = instance::withoutRank(v.name(o));
        auto& set = byStem[stem];
        if (set.empty()) order.push_back(stem);
        set.push_back(o);
    }
    std::vector<Site> out;
    for (const auto& stem : order) {
        const auto& set = byStem[stem];
        std::vector<std::int32_t> ranks;
        for (auto o : set) ranks.push_back(v.g.ops[o].rank);
        if (set.size() >= 2 && v.tensorParallelGroup(ranks))
            out.push_back(makeSite(v, set, std::string(v.kind(set[0])) + " on ranks " + joinRanks(ranks)));
    }
    return out;
}

std::vector<Site> norms(const View& v) { return opsOfKind(v, {"rmsnorm", "layernorm"}, Phase::Forward); }
std::vector<Site> rmsnorms(const View& v) { return opsOfKind(v, {"rmsnorm"}, Phase::Forward); }
std::vector<Site> normPeers(const View& v) { return peerSets(v, {"rmsnorm", "layernorm"}, Phase::Forward); }

std::string setEps(Editor& e, const Site& s) {
    for (const auto& n : s.ops) {
        auto o = e.v.find(n);
        e.op(o)["attrs"]["eps"] = 2;
        e.edited(o);
    }
    return "the normalization epsilon became 2 in " + s.ops[0] + (s.ops.size() > 1 ? " and its tensor-parallel peers" : "") + " (ranks " +
           joinRanks(s.ranks) + ")";
}

std::string squareAsIdentity(Editor& e, const Site& s) {
    const auto& v = e.v;
    const auto o = v.find(s.ops[0]);
    const json orig = e.op(o);
    const auto x = v.g.inputs(o)[0], w = v.g.inputs(o)[1], y = v.g.outputs(o)[0];
    Shape reduced = v.shape(x);
    reduced.back() = 1;
    auto tmp = [&](const std::string& suffix, const Shape& shape) {
        auto id = e.fresh(v.tensorName(y) + suffix);
        json t = e.tensorLike(y, id);
        t["shape"] = shape;
        e.addTensor(std::move(t));
        return id;
    };
    const auto stem = v.name(o);
    auto local = [&](const std::string& id, const std::string& kind, json ins, const std::string& outId, json attrs) {
        json j = {{"id", id}, {"op", kind}, {"rank", orig["rank"]}, {"inputs", std::move(ins)}, {"outputs", json::array({outId})}};
        if (orig.contains("microbatch")) j["microbatch"] = orig["microbatch"];
        if (orig.contains("phase")) j["phase"] = orig["phase"];
        if (!attrs.is_null()) j["attrs"] = std::move(attrs);
        return j;
    };
    const auto sq = tmp(".pow", v.shape(x)), ms = tmp(".mean_sq", reduced), ae = tmp(".add_eps", reduced), rs = tmp(".rsqrt", reduced),
               nx = tmp(".normalize", v.shape(x));
    const json eps = orig["attrs"]["eps"];
    e.addOp(local(e.fresh(stem + ".pow"), "pow", json::array({v.tensorName(x)}), sq, json{{"exponent", 1}}));
    e.addOp(local(e.fresh(stem + ".mean_sq"), "mean", json::array({sq}), ms, json{{"dims", json::array({-1})}, {"keepdim", true}}));
    e.addOp(local(e.fresh(stem + ".add_eps"), "add_scalar", json::array({ms}), ae, json{{"value", eps}}));
    e.addOp(local(e.fresh(stem + ".rsqrt"), "rsqrt", json::array({ae}), rs, json()));
    e.addOp(local(e.fresh(stem + ".normalize"), "mul", json::array({v.tensorName(x), rs}), nx, json()));
    e.op(o) = local(stem, "mul", json::array({nx, v.tensorName(w)}), v.tensorName(y), json());
    e.edited(o);
    return "the RMSNorm " + stem + " was written out as x · rsqrt(mean(x^1) + eps) · w: the square became x to the power 1";
}

std::vector<Site> backwardGradSums(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.kind(o) != "add" || v.g.ops[o].phase != Phase::Backward) continue;
        const auto ins = v.g.inputs(o);
        if (ins.size() != 2 || ins[0] == ins[1]) continue;
        if (v.shape(ins[0]) != v.shape(ins[1])) continue;
        bool fromBackward = true;
        for (auto t : ins) {
            auto pr = v.producer(t);
            if (pr == kNone || (v.g.ops[pr].phase != Phase::Backward && !v.collective(pr))) fromBackward = false;
            if (pr != kNone && v.g.ops[pr].acrossMicrobatches) fromBackward = false;
        }
        // An add that merges microbatches is an accumulation, not a fan-out.
        if (v.g.tensors[ins[0]].microbatch != v.g.tensors[ins[1]].microbatch) fromBackward = false;
        if (fromBackward) out.push_back(makeSite(v, {o}));
    }
    prefer(out, "grad_sum");
    return out;
}

std::string duplicateGrad(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    auto& j = e.op(o);
    j["inputs"][1] = j["inputs"][0];
    e.edited(o);
    return "the gradient sum " + s.ops[0] + " adds its first incoming gradient twice (" + j["inputs"][0].get<std::string>() + ")";
}

std::vector<Site> backwardSplits(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.kind(o) != "split" || v.g.ops[o].phase != Phase::Backward) continue;
        const auto outs = v.g.outputs(o);
        if (outs.size() < 2) continue;
        bool equal = true;
        for (auto t : outs) equal = equal && v.shape(t) == v.shape(outs[0]);
        if (equal) out.push_back(makeSite(v, {o}));
    }
    prefer(out, "rope");
    return out;
}

std::string reverseOutputs(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    auto& outs = e.op(o)["outputs"];
    std::reverse(outs.begin(), outs.end());
    e.edited(o);
    return "the backward split " + s.ops[0] + " returns its gradients in reverse order";
}

std::vector<Site> scales(const View& v) { return opsOfKind(v, {"div_sqrt"}, Phase::Forward); }
std::vector<Site> scalePeers(const View& v) { return peerSets(v, {"div_sqrt"}, Phase::Forward); }

std::string wrongScale(Editor& e, const Site& s) {
    std::int64_t n = 0;
    for (const auto& name : s.ops) {
        auto o = e.v.find(name);
        auto& a = e.op(o)["attrs"];
        n = a["n"].get<std::int64_t>();
        a["n"] = n * 4;
        e.edited(o);
    }
    return "the score scale 1/sqrt(" + std::to_string(n) + ") became 1/sqrt(" + std::to_string(n * 4) + ") in " + s.ops[0] +
           (s.ops.size() > 1 ? " and its tensor-parallel peers" : "") + " (ranks " + joinRanks(s.ranks) + ")";
}

/// The last add of a gradient accumulation written out: its output has no microbatch, its
/// second input is the last microbatch's gradient.
std::vector<OpId> accumulationEnds(const View& v) {
    std::vector<OpId> out;
    const std::int32_t M = v.p.microbatches;
    if (M < 2) return out;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.kind(o) != "add" || v.g.ops[o].phase != Phase::Backward) continue;
        const auto ins = v.g.inputs(o);
        const auto outs = v.g.outputs(o);
        if (ins.size() != 2 || v.g.tensors[outs[0]].microbatch >= 0) continue;
        const auto m0 = v.g.tensors[ins[0]].microbatch, m1 = v.g.tensors[ins[1]].microbatch;
        if (m1 == M - 1 && (m0 == -1 || m0 == M - 2)) out.push_back(o);
    }
    return out;
}

std::vector<Site> accumulationEndSites(const View& v) {
    std::vector<Site> out;
    for (auto o : accumulationEnds(v))
        if (!v.g.consumers(v.g.outputs(o)[0]).empty()) out.push_back(makeSite(v, {o}, "the last add of a gradient accumulation on rank " + std::to_string(v.g.ops[o].rank)));
    return out;
}

std::string reduceEarly(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    const auto before = e.v.g.inputs(o)[0];
    e.rewire(e.v.g.outputs(o)[0], e.v.tensorName(before));
    return "the reducer after " + s.ops[0] + " reads " + e.v.tensorName(before) + ", the gradient before the last microbatch's backward is added";
}

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
    const auto& v = e.v;
    auto o = v.find(s.ops[0]);
    const std::int32_t degree = v.g.ops[o].acrossReplicas ? v.p.replication.degree : static_cast<std::int32_t>(v.group(o).size());
    const auto outs = v.g.outputs(o);
    const auto& grp = v.group(o);
    for (std::size_t k = 0; k < outs.size(); ++k) {
        const auto t = outs[k];
        const auto id = e.fresh(v.tensorName(t) + ".average_again");
        e.addTensor(e.tensorLike(t, id));
        e.rewire(t, id);
        json j = {{"id", e.fresh(v.name(o) + ".average_again" + (k ? ".member" + std::to_string(k) : ""))},
                  {"op", "mul_scalar"},
                  {"rank", grp[k]},
                  {"phase", "backward"},
                  {"inputs", json::array({v.tensorName(t)})},
                  {"outputs", json::array({id})},
                  {"attrs", {{"value", "1/" + std::to_string(degree)}}}};
        e.addOp(std::move(j));
    }
    return "the reduced gradient of " + s.ops[0] + " is divided by the " + std::to_string(degree) + " replicas a second time";
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

/// The initial record of the loss's gradient seed: a scalar logical gradient no op produces.
std::int32_t lossSeedRecord(const View& v) {
    for (std::size_t r = 0; r < v.p.lineage.size(); ++r) {
        const auto& rec = v.p.lineage[r];
        const auto& lt = v.p.logical.tensors[rec.logical];
        if (v.initialRecord(static_cast<std::int32_t>(r)) && lt.role == Role::Gradient && v.p.shapes[lt.shape].empty())
            return static_cast<std::int32_t>(r);
    }
    return -1;
}

std::vector<Site> lossSeedReaders(const View& v) {
    const auto r = lossSeedRecord(v);
    if (r < 0) return {};
    std::vector<OpId> readers;
    for (const auto& s : v.p.lineage[r].slices)
        for (const auto& c : s.copies)
            for (const auto& t : c)
                for (auto op : v.g.consumers(t.tensor))
                    if (std::find(readers.begin(), readers.end(), op) == readers.end()) readers.push_back(op);
    if (readers.empty()) return {};
    return {makeSite(v, readers, "the readers of the loss gradient seed " + v.p.tensorName(v.p.logical, v.p.lineage[r].logical))};
}

std::string overscaleLoss(Editor& e, const Site&) {
    const auto& v = e.v;
    const auto r = lossSeedRecord(v);
    const auto cp = v.p.mesh.at(Axis::CP);
    std::vector<TensorId> terms;
    for (const auto& s : v.p.lineage[r].slices)
        for (const auto& c : s.copies)
            for (const auto& t : c) terms.push_back(t.tensor);
    for (auto t : terms) {
        if (v.g.consumers(t).empty()) continue;
        const auto id = e.fresh(v.tensorName(t) + ".cp_scale");
        e.addTensor(e.tensorLike(t, id));
        e.rewire(t, id);
        json j = {{"id", id},
                  {"op", "mul_scalar"},
                  {"rank", v.g.tensors[t].rank},
                  {"phase", "backward"},
                  {"inputs", json::array({v.tensorName(t)})},
                  {"outputs", json::array({id})},
                  {"attrs", {{"value", cp}}}};
        if (v.g.tensors[t].microbatch >= 0) j["microbatch"] = v.g.tensors[t].microbatch;
        e.addOp(std::move(j));
    }
    return "the per-token loss is scaled by the context-parallel degree " + std::to_string(cp) + ": every reader of the loss gradient " +
           v.p.tensorName(v.p.logical, v.p.lineage[r].logical) + " gets it times " + std::to_string(cp);
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

std::vector<Site> zeroShards(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.g.ops[o].indexFromReplica) out.push_back(makeSite(v, {o}, "chunk taking its replica's part on rank " + std::to_string(v.g.ops[o].rank)));
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
        return "the ZeRO shard " + s.ops[0] + " takes part 0 on every replica instead of its own replica's part";
    }
    for (const char* key : {"group", "inputs", "outputs"}) std::reverse(j[key].begin(), j[key].end());
    e.edited(o);
    return "the ZeRO reduce-scatter " + s.ops[0] + " lists the replicas in reverse order: each replica's optimizer gets another shard's gradient";
}

// The accumulation's last add in a plan with its microbatches written out. Stored once, the
// accumulation is one identity across microbatches, and without that flag it would be an op of no
// microbatch reading a per-microbatch tensor, which the reader refuses (no single instance to read):
// the bug is written out instead.
std::vector<Site> accumulations(const View& v) { return accumulationEndSites(v); }

std::string dropAccumulation(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    auto& j = e.op(o);
    e.edited(o);
    j["op"] = "identity";
    j["inputs"] = json::array({j["inputs"][1]});
    return "the gradient accumulation " + s.ops[0] + " overwrites the gradient with the last microbatch's instead of adding it";
}

bool readsAsLabels(const Plan& p, TensorId logical) {
    for (auto c : p.logical.consumers(logical)) {
        const auto k = reg().spec(p.logical.ops[c].kind).name;
        const auto ins = p.logical.inputs(c);
        for (std::size_t i = 0; i < ins.size(); ++i) {
            if (ins[i] != logical) continue;
            if (((k == "cross_entropy" || k == "cross_entropy_backward" || k == "target_logit") && i == 1) || k == "one_hot") return true;
        }
    }
    return false;
}

/// Initial records of data (role input, not labels) whose slices are microbatch lanes.
std::vector<std::uint32_t> dataRecords(const View& v) {
    std::vector<std::uint32_t> out;
    for (std::uint32_t r = 0; r < v.p.lineage.size(); ++r) {
        const auto& rec = v.p.lineage[r];
        if (!v.initialRecord(static_cast<std::int32_t>(r)) || v.p.logical.tensors[rec.logical].role != Role::Input || readsAsLabels(v.p, rec.logical))
            continue;
        std::set<std::int32_t> mbs;
        bool lanes = true;
        for (const auto& s : rec.slices)
            for (const auto& c : s.copies)
                for (const auto& t : c) {
                    mbs.insert(v.g.tensors[t.tensor].microbatch);
                    if (v.g.tensors[t.tensor].microbatch < 0) lanes = false;
                }
        if (lanes && mbs.size() >= 2) out.push_back(r);
    }
    return out;
}

std::vector<Site> dataLoaders(const View& v) {
    std::vector<Site> out;
    for (auto r : dataRecords(v)) {
        std::vector<OpId> readers;
        for (const auto& s : v.p.lineage[r].slices)
            for (const auto& c : s.copies)
                for (const auto& t : c)
                    for (auto op : v.g.consumers(t.tensor))
                        if (std::find(readers.begin(), readers.end(), op) == readers.end()) readers.push_back(op);
        if (!readers.empty()) out.push_back(makeSite(v, readers, "the readers of " + v.p.tensorName(v.p.logical, v.p.lineage[r].logical)));
    }
    return out;
}

std::string offsetMicrobatches(Editor& e, const Site& s) {
    const auto& v = e.v;
    // The record whose tensors the site's first op reads.
    std::uint32_t rec = 0;
    for (auto r : dataRecords(v)) {
        for (const auto& sl : v.p.lineage[r].slices)
            for (const auto& c : sl.copies)
                for (const auto& t : c)
                    for (auto op : v.g.consumers(t.tensor))
                        if (v.name(op) == s.ops[0]) rec = r;
    }
    const auto& R = v.p.lineage[rec];
    // Lane of a slice: (replica, microbatch) of its first term; position among that lane's slices.
    std::map<std::tuple<std::int32_t, std::int32_t, std::size_t>, std::size_t> index;
    std::map<std::pair<std::int32_t, std::int32_t>, std::size_t> count;
    std::vector<std::tuple<std::int32_t, std::int32_t, std::size_t>> key(R.slices.size());
    std::int32_t M = 0;
    for (std::size_t i = 0; i < R.slices.size(); ++i) {
        const auto t = R.slices[i].copies[0][0].tensor;
        const auto replica = v.coord(v.g.tensors[t].rank, Axis::DP), mb = v.g.tensors[t].microbatch;
        M = std::max(M, mb + 1);
        key[i] = {replica, mb, count[{replica, mb}]++};
        index[key[i]] = i;
    }
    json& slices = e.record(rec)["slices"];
    const json old = slices;
    for (std::size_t i = 0; i < R.slices.size(); ++i) {
        auto [replica, mb, pos] = key[i];
        auto it = index.find({replica, (mb + 1) % M, pos});
        if (it != index.end()) slices[i]["copies"] = old[it->second]["copies"];
    }
    for (const auto& n : s.ops) e.seeds.push_back(n);
    return "the data loader gives microbatch m the rows of microbatch m+1 (of " + std::to_string(M) + ") for " +
           v.p.tensorName(v.p.logical, R.logical) + "; the labels are right";
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

std::vector<Site> microbatchSendPairs(const View& v) {
    std::map<std::pair<std::vector<std::int32_t>, std::string>, std::vector<OpId>> byGroup;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.kind(o) != "send_recv") continue;
        const auto in = v.g.inputs(o)[0];
        if (v.g.tensors[in].microbatch < 0) continue;
        byGroup[{v.group(o), instance::withoutMicrobatch(v.name(o)) + " " + shapeToString(v.shape(in))}].push_back(o);
    }
    std::vector<Site> out;
    for (const auto& [key, sends] : byGroup) {
        for (std::size_t i = 0; i + 1 < sends.size(); ++i) {
            const auto a = sends[i], b = sends[i + 1];
            if (v.g.tensors[v.g.inputs(a)[0]].microbatch == v.g.tensors[v.g.inputs(b)[0]].microbatch) continue;
            out.push_back(makeSite(v, {a, b}, "sends of microbatches " + std::to_string(v.g.tensors[v.g.inputs(a)[0]].microbatch) + " and " +
                                                  std::to_string(v.g.tensors[v.g.inputs(b)[0]].microbatch) + " over ranks " + joinRanks(key.first)));
        }
    }
    std::stable_sort(out.begin(), out.end(), [&](const Site& x, const Site& y) { return v.find(x.ops[0]) < v.find(y.ops[0]); });
    return out;
}

std::string swapMicrobatches(Editor& e, const Site& s) {
    auto a = e.v.find(s.ops[0]), b = e.v.find(s.ops[1]);
    std::swap(e.op(a)["inputs"], e.op(b)["inputs"]);
    e.edited(a);
    e.edited(b);
    return "the sends " + s.ops[0] + " and " + s.ops[1] + " carry each other's microbatch";
}

const std::vector<Entry>& entries() {
    using FK = FailureKind;
    static const std::vector<Entry> all = {
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
        {{"norm-eps-one-rank", Category::Computation, "a wrong constant in one rank's kernel: the normalization epsilon is 2", 7, "a normalization"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no rmsnorm or layernorm", norms, setEps},
        {{"norm-square-as-identity", Category::Computation, "a wrong exponent: RMSNorm's x.pow(2) typed as x.pow(1)", 8, "an RMSNorm"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no rmsnorm", rmsnorms, squareAsIdentity},
        {{"norm-eps-all-tp-ranks", Category::Computation, "a wrong constant in every tensor-parallel rank's kernel: the normalization epsilon is 2", 9, "tensor parallelism and a normalization"},
         Form::Stored, {FK::Counterexample}, needsTp, "no normalization computed on several tensor-parallel ranks", normPeers, setEps},
        {{"bwd-grad-sum-duplicated", Category::Computation, "a backward fan-out (multiref) adds its first incoming gradient twice and drops the second", 10, "a backward gradient sum"},
         Form::Stored, {FK::Counterexample, FK::DataflowBroken}, lacksNothing, "no backward add of two gradients", backwardGradSums, duplicateGrad},
        {{"rope-bwd-halves-swapped", Category::Computation, "a backward (apply_rotary_emb's) returns its two gradients in reverse order", 11, "a backward split"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no backward split into equal parts", backwardSplits, reverseOutputs},
        {{"attn-scale-one-rank", Category::Scaling, "a wrong scaling constant on one rank: the attention score scale computed from the wrong dimension", 12, "attention"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no div_sqrt (attention score scale)", scales, wrongScale},
        {{"attn-scale-all-tp-ranks", Category::Scaling, "a wrong scaling constant on every tensor-parallel rank of one attention", 13, "tensor parallelism and attention"},
         Form::Stored, {FK::Counterexample}, needsTp, "no attention score scale computed on several tensor-parallel ranks", scalePeers, wrongScale},
        {{"reducer-before-last-microbatch", Category::Scheduling, "the gradient reducer is launched before the last microbatch's backward has accumulated", 14, "2 or more microbatches"},
         Form::WrittenOut, {FK::Counterexample, FK::LaneMisalignment, FK::DataflowBroken}, needsMicrobatches, "no gradient accumulation over microbatches", accumulationEndSites, reduceEarly},
        {{"dp-grad-not-averaged", Category::DataParallel, "per-replica mean losses whose gradients are summed, not averaged, across replicas", 0, "data parallelism"},
         Form::Stored, {FK::Counterexample}, needsDp, "no averaging gradient reducer across data-parallel replicas", dpReducers, sumNotMean},
        {{"dp-grad-averaged-twice", Category::DataParallel, "a loss already divided by the replicas whose gradients the reducer averages again", 0, "data parallelism"},
         Form::Stored, {FK::Counterexample}, needsDp, "no averaging gradient reducer across data-parallel replicas", dpReducers, averageAgain},
        {{"sp-norm-grad-not-reduced", Category::Communication, "norm weights without Megatron's sequence_parallel flag: their gradients are not all-reduced over the tensor-parallel group", 0, "tensor (and sequence) parallelism"},
         Form::Stored, {FK::Counterexample}, needsTp, "no all-reduce of a norm weight's gradient over a tensor-parallel group (generate with --tp 2 --sp)", normGradAllReduces, normGradNotReduced},
        {{"cp-loss-overscaled", Category::Scaling, "Megatron-LM with --calculate-per-token-loss: the loss scaled by the context-parallel degree (paper, appendix B)", 0, "context parallelism"},
         Form::Stored, {FK::Counterexample}, needsCp, "no initial record of the loss's gradient (a scalar gradient no op produces)", lossSeedReaders, overscaleLoss},
        {{"ep-allgather-wrong-group", Category::Communication, "a mis-assigned expert-parallel group: the expert all-gather spans two data-parallel replicas", 0, "expert and data parallelism"},
         Form::WrittenOut, {FK::Counterexample}, needsDp, "no pair of all-gathers in two replicas over data that differs between them (each replica's part of the batch)", replicaGatherPairs, gatherWrongGroup},
        {{"all-to-all-wrong-order", Category::Communication, "the expert dispatch all-to-all with its split list in the wrong order", 0, "an all-to-all (expert or sequence parallelism)"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no all_to_all over two or more ranks (generate a MoE model with --ep 2 --sp)", allToAlls, reverseGroup},
        {{"zero-shard-wrong-grad", Category::Optimizer, "ZeRO partition bookkeeping is off: a replica updates its shard with another shard's gradient", 0, "a ZeRO-sharded optimizer"},
         Form::StoredThenWrittenOut, {FK::Counterexample}, needsDp, "no ZeRO shard (chunk by replica) or reduce-scatter across replicas (generate with --zero 1, 2 or 3)", zeroShards, wrongShard},
        {{"grad-accum-missing", Category::Scheduling, "gradient accumulation across microbatches missing: grad = g where grad += g was needed", 0, "2 or more microbatches"},
         Form::StoredThenWrittenOut, {FK::Counterexample, FK::LaneMisalignment, FK::DataflowBroken}, needsMicrobatches, "no gradient accumulation over microbatches", accumulations, dropAccumulation},
        {{"data-loader-microbatch-offset", Category::Data, "the data loader's microbatch offset is wrong: microbatch m gets the rows of m+1 while the labels are right", 0, "2 or more microbatches"},
         Form::WrittenOut, {FK::Counterexample, FK::LaneMisalignment}, needsMicrobatches, "no input data (other than labels) split into microbatches", dataLoaders, offsetMicrobatches},
        {{"optimizer-unreduced-grad", Category::Optimizer, "the optimizer steps on local, unreduced gradients (no_sync left on)", 0, "a gradient reduction before the optimizer"},
         Form::Stored, {FK::Counterexample, FK::DataflowBroken}, lacksNothing, "no optimizer step reading a gradient that an all-reduce produced", optimizerSteps, stepOnUnreduced},
        {{"vocab-ce-max-not-reduced", Category::Communication, "vocab-parallel cross-entropy without its max all-reduce", 0, "a vocab-parallel cross-entropy"},
         Form::Stored, {FK::Counterexample, FK::DataflowBroken}, needsTp, "no max all-reduce (vocab-parallel cross-entropy)", maxAllReduces, dropMax},
        {{"pp-send-microbatch-swapped", Category::Scheduling, "a pipeline schedule sends microbatch m+1's activation in microbatch m's slot", 0, "pipeline parallelism and 2 or more microbatches"},
         Form::WrittenOut, {FK::LaneMisalignment, FK::Counterexample}, needsPpMicrobatches, "no two sends between the same ranks for different microbatches", microbatchSendPairs, swapMicrobatches},
    };
    return all;
}

const Entry& entryOf(std::string_view bug) {
    for (const auto& e : entries())
        if (e.kind.name == bug) return e;
    throw MutationError("unknown bug \"" + std::string(bug) + "\" (trainverify mutate --list shows the catalog)");
}

std::string planName(const Plan& p) { return p.name.empty() ? std::string("the plan") : "\"" + p.name + "\""; }

/// The forms of the plan a bug is looked for in, in order.
struct FormPlan {
    std::unique_ptr<Plan> owned;
    const Plan* plan = nullptr;
    bool writtenOut = false;
};

FormPlan storedForm(const Plan& plan) { return {nullptr, &plan, false}; }
FormPlan writtenOutForm(const Plan& plan) {
    if (!plan.replication.active()) return {nullptr, &plan, false};
    auto p = std::make_unique<Plan>(expandReplicas(plan));
    const Plan* raw = p.get();
    return {std::move(p), raw, true};
}

std::vector<bool> formsFor(const Entry& e, const Plan& plan, const MutateOptions& opts) {
    // {stored, written out}
    const bool replicated = plan.replication.active();
    bool forceOut = replicated && ((opts.rank >= 0 && opts.rank >= plan.replication.ranksPerReplica) || opts.at.find('~') != std::string::npos);
    if (!replicated) return {false};
    if (forceOut) return {true};
    switch (e.form) {
    case Form::Stored: return {false};
    case Form::WrittenOut: return {true};
    case Form::StoredThenWrittenOut: return {false, true};
    }
    return {false};
}

void checkApplies(const Entry& e, const Plan& plan) {
    if (auto why = e.lacks(plan); !why.empty())
        throw MutationError("bug \"" + std::string(e.kind.name) + "\" does not apply to " + planName(plan) + ": " + why);
}

// ----- what the verifier must report --------------------------------------------------------

Expectation expectationFor(const Entry& e, const Plan& m, const std::vector<std::string>& seeds, const std::vector<std::string>& removedOutputs) {
    Expectation x;
    x.invalid = e.kinds.empty();
    x.kinds = e.kinds;
    x.ranksPerReplica = m.replication.active() ? m.replication.ranksPerReplica : 0;
    const View v(m, false);
    std::set<std::pair<std::string, std::int32_t>> locations;
    std::set<std::string> tensors(removedOutputs.begin(), removedOutputs.end());
    std::set<OpId> seen;
    std::vector<OpId> work;
    for (const auto& n : seeds) {
        x.edited.push_back(n);
        if (auto o = v.find(n); o != kNone && seen.insert(o).second) work.push_back(o);
    }
    auto addOp = [&](OpId o) {
        for (auto r : v.ranksOf(o)) locations.insert({v.name(o), r});
    };
    while (!work.empty()) {
        const auto o = work.back();
        work.pop_back();
        addOp(o);
        for (auto t : v.g.outputs(o)) {
            tensors.insert(v.tensorName(t));
            const auto& w = v.where(t);
            if (w.record >= 0 && !v.initialRecord(w.record)) {
                // The first record the broken dataflow reaches: a diagnosis may name any term's producer.
                for (const auto& term : m.lineage[w.record].slices[w.slice].copies[w.copy])
                    if (auto pr = v.producer(term.tensor); pr != kNone) addOp(pr);
                continue;
            }
            for (auto c : v.g.consumers(t))
                if (seen.insert(c).second) work.push_back(c);
        }
    }
    x.locations.assign(locations.begin(), locations.end());
    x.tensors.assign(tensors.begin(), tensors.end());
    return x;
}

}  // namespace

const std::vector<BugKind>& catalog() {
    static const std::vector<BugKind> all = [] {
        std::vector<BugKind> v;
        for (const auto& e : entries()) v.push_back(e.kind);
        return v;
    }();
    return all;
}

const BugKind* findBug(std::string_view name) {
    for (const auto& k : catalog())
        if (k.name == name) return &k;
    return nullptr;
}

json catalogJson() {
    json a = json::array();
    for (const auto& e : entries()) {
        json j = {{"name", e.kind.name}, {"category", toString(e.kind.category)}, {"summary", e.kind.summary}, {"needs", e.kind.needs}};
        j["paper_case"] = e.kind.paperCase ? json(e.kind.paperCase) : json(nullptr);
        j["expected_failure"] = e.kinds.empty() ? json("invalid (shape_mismatch)") : json(std::string(toString(e.kinds[0])));
        a.push_back(std::move(j));
    }
    return a;
}

std::vector<Site> findSites(const Plan& plan, std::string_view bug) {
    const auto& e = entryOf(bug);
    checkApplies(e, plan);
    std::vector<Site> all;
    for (bool out : formsFor(e, plan, {})) {
        auto form = out ? writtenOutForm(plan) : storedForm(plan);
        auto s = e.sites(View(*form.plan, form.writtenOut));
        all.insert(all.end(), s.begin(), s.end());
        if (!all.empty()) break;
    }
    return all;
}

Mutant mutate(const Plan& plan, std::string_view bug, const MutateOptions& opts) {
    const auto& e = entryOf(bug);
    checkApplies(e, plan);
    const std::string name(e.kind.name);
    std::size_t sitesSeen = 0;
    bool atExists = opts.at.empty();
    std::vector<std::int32_t> atRanks;
    for (bool out : formsFor(e, plan, opts)) {
        auto form = out ? writtenOutForm(plan) : storedForm(plan);
        const View view(*form.plan, form.writtenOut);
        auto sites = e.sites(view);
        sitesSeen += sites.size();
        if (!opts.at.empty() && view.find(opts.at) != kNone) {
            atExists = true;
            atRanks = view.ranksOf(view.find(opts.at));
        }
        const Site* chosen = nullptr;
        for (const auto& s : sites) {
            if (!opts.at.empty() && std::find(s.ops.begin(), s.ops.end(), opts.at) == s.ops.end()) continue;
            if (opts.rank >= 0 && !std::binary_search(s.ranks.begin(), s.ranks.end(), opts.rank)) continue;
            chosen = &s;
            break;
        }
        if (!chosen) continue;

        Editor ed(view, writePlanJson(*form.plan, false));
        Mutant m;
        m.bug = name;
        m.site = *chosen;
        m.change = e.apply(ed, *chosen);
        json doc = ed.finish();
        doc["name"] = (plan.name.empty() ? std::string("plan") : plan.name) + " + " + name;
        doc["description"] = std::string(e.kind.summary) + ". Injected by trainverify mutate: " + m.change + ".";
        json expect = {{"verdict", e.kinds.empty() ? "invalid" : "not_equivalent"}};
        expect["failure"] = {{"kind", e.kinds.empty() ? std::string("shape_mismatch") : std::string(toString(e.kinds[0]))}};
        expect["bug"] = {{"kind", name}, {"site", chosen->ops}, {"change", m.change}};
        doc["expect"] = expect;
        auto loaded = readPlanJson(doc);
        if (loaded.plan) {
            m.expect = expectationFor(e, *loaded.plan, ed.seeds, ed.removedOutputs);
            loaded.plan->storedWithRepeats = plan.storedWithRepeats;
            m.document = writePlanJson(*loaded.plan);
            m.plan = std::move(loaded.plan);
        } else {
            m.expect.invalid = true;
            m.expect.edited = ed.seeds;
            m.problems = std::move(loaded.problems);
            m.document = plan.storedWithRepeats ? compressRepeats(std::move(doc)) : std::move(doc);
        }
        if (!e.kinds.empty() && !m.plan) {
            // A mutation the reader rejects although it should read: say so rather than hide it.
            throw MutationError("bug \"" + name + "\" at " + chosen->ops[0] + " made a plan the reader rejects: " +
                                (m.problems.empty() ? std::string("?") : m.problems.front().toString()));
        }
        return m;
    }
    if (!opts.at.empty() && !atExists) throw MutationError("--at \"" + opts.at + "\": no parallel op has this id");
    if (sitesSeen == 0) throw MutationError("bug \"" + name + "\" does not apply to " + planName(plan) + ": " + std::string(e.noSite));
    if (!opts.at.empty() && opts.rank >= 0)
        throw MutationError("--at \"" + opts.at + "\" --rank " + std::to_string(opts.rank) + ": no site of bug \"" + name +
                            "\" contains this op on this rank" + (atRanks.empty() ? "" : " (the op runs on ranks " + joinRanks(atRanks) + ")"));
    if (!opts.at.empty())
        throw MutationError("--at \"" + opts.at + "\" is not a site of bug \"" + name + "\" (" + std::to_string(sitesSeen) +
                            " sites; trainverify mutate PLAN --bug " + name + " --sites lists them)");
    throw MutationError("--rank " + std::to_string(opts.rank) + ": no site of bug \"" + name + "\" runs on rank " + std::to_string(opts.rank));
}

bool caught(const Mutant& mutant, const VerifyReport& report, std::string* why) {
    const auto& x = mutant.expect;
    auto say = [&](const std::string& s) {
        if (why) *why = s;
    };
    if (x.invalid) {
        if (report.verdict != Verdict::Invalid || report.problems.empty()) {
            say("expected the reader to reject the mutant, got " + std::string(headline(report.verdict)));
            return false;
        }
        const auto& msg = report.problems.front().message;
        for (const auto& op : x.edited)
            if (msg.find("\"" + op + "\"") != std::string::npos) {
                say("INVALID at " + op + ": " + msg);
                return true;
            }
        say("INVALID, but the first problem names none of the edited ops: " + report.problems.front().toString());
        return false;
    }
    if (report.verdict != Verdict::NotEquivalent || !report.failure) {
        say("missed: the verdict is " + std::string(headline(report.verdict)) +
            (report.failure ? " (" + std::string(toString(report.failure->kind)) + ")" : std::string()));
        return false;
    }
    const auto& f = *report.failure;
    std::string found = std::string(toString(f.kind)) + " at " + (f.parallelOp.empty() ? f.parallelTensor : f.parallelOp) + " on rank " +
                        std::to_string(f.rank);
    if (std::find(x.kinds.begin(), x.kinds.end(), f.kind) == x.kinds.end()) {
        say("caught as " + found + ", but the expected kind is " + std::string(toString(x.kinds.front())));
        return false;
    }
    const bool stored = x.ranksPerReplica > 0;
    const auto op = stored ? instance::storedName(f.parallelOp) : f.parallelOp;
    const auto rank = stored && f.rank >= 0 ? f.rank % x.ranksPerReplica : f.rank;
    for (const auto& [name, r] : x.locations)
        if (name == op && r == rank) {
            say(found);
            return true;
        }
    if (f.kind == FailureKind::DataflowBroken) {
        const auto t = stored ? instance::storedName(f.parallelTensor) : f.parallelTensor;
        if (!t.empty() && std::find(x.tensors.begin(), x.tensors.end(), t) != x.tensors.end()) {
            say(found);
            return true;
        }
    }
    say("caught as " + found + ", which is neither an edited op nor one its broken dataflow reaches");
    return false;
}

}  // namespace tv::bugs
