// The catalog's scheduling and data entries (Category::Scheduling, Category::Data), the bugs of
// microbatches: a gradient reducer launched before the last microbatch, a missing gradient
// accumulation, pipeline sends in the wrong microbatch's slot, and a data loader off by one
// microbatch. Each entry's site finder and edit, then the rows (bug_catalog.cpp puts them in the
// catalog's order).
#include "bugs/catalog_detail.hpp"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "model/instance_names.hpp"

namespace tv::bugs::detail {

namespace {

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
        const auto readers = v.readersOf(r);
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

}  // namespace

void appendMicrobatchEntries(std::vector<Entry>& out) {
    using FK = FailureKind;
    const std::initializer_list<Entry> rows = {
        {{"reducer-before-last-microbatch", Category::Scheduling, "the gradient reducer is launched before the last microbatch's backward has accumulated", 14, "2 or more microbatches"},
         Form::WrittenOut, {FK::Counterexample, FK::LaneMisalignment, FK::DataflowBroken}, needsMicrobatches, "no gradient accumulation over microbatches", accumulationEndSites, reduceEarly},
        {{"grad-accum-missing", Category::Scheduling, "gradient accumulation across microbatches missing: grad = g where grad += g was needed", 0, "2 or more microbatches"},
         Form::StoredThenWrittenOut, {FK::Counterexample, FK::LaneMisalignment, FK::DataflowBroken}, needsMicrobatches, "no gradient accumulation over microbatches", accumulations, dropAccumulation},
        {{"data-loader-microbatch-offset", Category::Data, "the data loader's microbatch offset is wrong: microbatch m gets the rows of m+1 while the labels are right", 0, "2 or more microbatches"},
         Form::WrittenOut, {FK::Counterexample, FK::LaneMisalignment}, needsMicrobatches, "no input data (other than labels) split into microbatches", dataLoaders, offsetMicrobatches},
        {{"pp-send-microbatch-swapped", Category::Scheduling, "a pipeline schedule sends microbatch m+1's activation in microbatch m's slot", 0, "pipeline parallelism and 2 or more microbatches"},
         Form::WrittenOut, {FK::LaneMisalignment, FK::Counterexample}, needsPpMicrobatches, "no two sends between the same ranks for different microbatches", microbatchSendPairs, swapMicrobatches},
    };
    out.insert(out.end(), rows);
}

}  // namespace tv::bugs::detail
