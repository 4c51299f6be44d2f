// The site view (site_view.hpp): the lineage index a View builds once (where each parallel
// tensor is, which records are initial), its structural questions, and the site helpers.
#include "bugs/site_view.hpp"

#include <algorithm>
#include <set>
#include <unordered_set>
#include <utility>

namespace tv::bugs::detail {

std::string joinRanks(const std::vector<std::int32_t>& ranks) {
    std::string s;
    for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    return s;
}

View::View(const Plan& plan, bool writtenOut) : p(plan), g(plan.parallel), writtenOut(writtenOut), where_(g.tensors.size()) {
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

OpId View::find(const std::string& opName) const {
    auto n = p.names.find(opName);
    return n == kNone ? kNone : g.findOp(n);
}

std::string View::reduce(OpId o) const {
    const auto& a = attrs(o);
    auto it = a.find("reduce");
    return it != a.end() && it->is_string() ? it->get<std::string>() : "sum";
}

std::int32_t View::coord(std::int32_t rank, Axis a) const {
    return rank >= 0 && static_cast<std::size_t>(rank) < p.ranks.size() ? p.ranks[rank].at(a) : 0;
}

bool View::sameOn(std::int32_t a, std::int32_t b, std::initializer_list<Axis> axes) const {
    for (auto x : axes)
        if (coord(a, x) != coord(b, x)) return false;
    return true;
}

bool View::tensorParallelGroup(const std::vector<std::int32_t>& grp) const {
    if (grp.size() < 2) return false;
    for (auto r : grp)
        if (!sameOn(r, grp[0], {Axis::DP, Axis::PP, Axis::CP, Axis::EP})) return false;
    return true;
}

bool View::dataParallelGroup(const std::vector<std::int32_t>& grp) const {
    if (grp.size() < 2) return false;
    for (auto r : grp)
        if (!sameOn(r, grp[0], {Axis::TP, Axis::PP, Axis::SP, Axis::CP})) return false;
    return true;
}

Phase View::sourcePhase(OpId o) const {
    for (int depth = 0; depth < 8; ++depth) {
        if (!collective(o) && g.ops[o].phase != Phase::Communication) return g.ops[o].phase;
        auto ins = g.inputs(o);
        if (ins.empty() || producer(ins[0]) == kNone) return g.ops[o].phase == Phase::Communication ? Phase::Forward : g.ops[o].phase;
        o = producer(ins[0]);
    }
    return g.ops[o].phase;
}

bool View::feedsOptimizer(OpId o, int depth) const {
    if (g.ops[o].phase == Phase::Optimizer) return true;
    if (depth == 0) return false;
    for (auto t : g.outputs(o))
        for (auto c : g.consumers(t))
            if (feedsOptimizer(c, depth - 1)) return true;
    return false;
}

std::vector<OpId> View::readersOf(std::uint32_t record) const {
    std::vector<OpId> readers;
    for (const auto& s : p.lineage[record].slices)
        for (const auto& c : s.copies)
            for (const auto& t : c)
                for (auto op : g.consumers(t.tensor))
                    if (std::find(readers.begin(), readers.end(), op) == readers.end()) readers.push_back(op);
    return readers;
}

std::vector<std::int32_t> View::ranksOf(OpId o) const {
    if (g.ops[o].group != kNone) return group(o);
    return {g.ops[o].rank};
}

bool View::sameSlice(TensorId a, TensorId b) const {
    const auto &x = where_[a], &y = where_[b];
    return x.record >= 0 && x.record == y.record && x.slice == y.slice;
}

bool View::perReplicaData(TensorId t) const {
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

bool View::differentSlices(TensorId a, TensorId b) const {
    const auto &x = where_[a], &y = where_[b];
    return x.record >= 0 && x.record == y.record && x.slice != y.slice;
}

Site makeSite(const View& v, const std::vector<OpId>& ops, std::string detail) {
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

void prefer(std::vector<Site>& sites, std::string_view hint) {
    std::stable_partition(sites.begin(), sites.end(), [&](const Site& s) { return s.ops.front().find(hint) != std::string::npos; });
}

}  // namespace tv::bugs::detail
