#include "bugs/bug_catalog.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "bugs/catalog_detail.hpp"
#include "io/plan_repeats.hpp"
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

namespace detail {

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

}  // namespace detail

namespace {

using detail::Editor;
using detail::Entry;
using detail::Form;
using detail::joinRanks;
using detail::Refusal;
using detail::View;

/// The catalog's order: the paper's 14 cases first, by case, then the others. It is observable
/// (mutate --list, catalogJson, the benchmarks' tables), so it is written down here rather than
/// left to the files the rows live in (by category, catalog_detail.hpp); each row is listed once.
constexpr std::string_view kOrder[] = {
    "tp-allreduce-identity",
    "tp-allreduce-dropped",
    "tp-allreduce-as-allgather",
    "pp-recv-collective-swapped",
    "tp-bwd-allreduce-identity",
    "pp-send-crossed",
    "norm-eps-one-rank",
    "norm-square-as-identity",
    "norm-eps-all-tp-ranks",
    "bwd-grad-sum-duplicated",
    "rope-bwd-halves-swapped",
    "attn-scale-one-rank",
    "attn-scale-all-tp-ranks",
    "reducer-before-last-microbatch",
    "dp-grad-not-averaged",
    "dp-grad-averaged-twice",
    "sp-norm-grad-not-reduced",
    "cp-loss-overscaled",
    "ep-allgather-wrong-group",
    "all-to-all-wrong-order",
    "zero-shard-wrong-grad",
    "grad-accum-missing",
    "data-loader-microbatch-offset",
    "optimizer-unreduced-grad",
    "vocab-ce-max-not-reduced",
    "pp-send-microbatch-swapped",
    "ep-grad-scaled-twice",
    "ep-grad-not-scaled",
    "ep-grad-norm-omits-experts",
    "ep-grad-wrong-group",
    "aux-loss-scaled-by-tp",
};

const std::vector<Entry>& entries() {
    static const std::vector<Entry> all = [] {
        std::vector<Entry> rows;
        detail::appendCommunicationEntries(rows);
        detail::appendComputationEntries(rows);
        detail::appendDataParallelEntries(rows);
        detail::appendMicrobatchEntries(rows);
        detail::appendExpertParallelEntries(rows);
        std::vector<Entry> ordered;
        std::vector<bool> placed(rows.size(), false);
        for (auto name : kOrder) {
            auto it = std::find_if(rows.begin(), rows.end(), [&](const Entry& e) { return e.kind.name == name; });
            const auto i = static_cast<std::size_t>(it - rows.begin());
            if (it == rows.end() || placed[i]) throw std::logic_error("bug catalog: \"" + std::string(name) + "\" has no row, or is listed twice");
            placed[i] = true;
            ordered.push_back(*it);
        }
        if (ordered.size() != rows.size()) throw std::logic_error("bug catalog: a row is missing from the catalog's order");
        return ordered;
    }();
    return all;
}

const Entry& entryOf(std::string_view bug) {
    for (const auto& e : entries())
        if (e.kind.name == bug) return e;
    throw Refusal{{"bug", "unknown bug \"" + std::string(bug) + "\" (the catalog lists the bugs)"}};
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
        throw Refusal{{"bug", "bug \"" + std::string(e.kind.name) + "\" does not apply to " + planName(plan) + ": " + why}};
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

namespace {

std::vector<Site> sitesOf(const Plan& plan, std::string_view bug) {
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

Mutant mutantOf(const Plan& plan, std::string_view bug, const MutateOptions& opts) {
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
        // With replicas written out, `at` may name the stored op: its copy on the rank asked for
        // ("x@r1~dp1" for x@r1 on replica 1's rank) is that op there.
        auto isAt = [&](const std::string& op) { return op == opts.at || (form.writtenOut && instance::withoutReplicaMarks(op) == opts.at); };
        const Site* chosen = nullptr;
        for (const auto& s : sites) {
            if (!opts.at.empty() && std::none_of(s.ops.begin(), s.ops.end(), isAt)) continue;
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
            throw Refusal{{"bug", "bug \"" + name + "\" at " + chosen->ops[0] + " made a plan the reader rejects: " +
                                     (m.problems.empty() ? std::string("?") : m.problems.front().toString())}};
        }
        return m;
    }
    if (!opts.at.empty() && !atExists) throw Refusal{{"at", "at \"" + opts.at + "\": no parallel op has this id"}};
    if (sitesSeen == 0) throw Refusal{{"bug", "bug \"" + name + "\" does not apply to " + planName(plan) + ": " + std::string(e.noSite)}};
    if (!opts.at.empty() && opts.rank >= 0)
        throw Refusal{{"rank", "at \"" + opts.at + "\" on rank " + std::to_string(opts.rank) + ": no site of bug \"" + name +
                                   "\" contains this op on this rank" + (atRanks.empty() ? "" : " (the op runs on ranks " + joinRanks(atRanks) + ")")}};
    if (!opts.at.empty())
        throw Refusal{{"at", "at \"" + opts.at + "\" is not a site of bug \"" + name + "\" (it has " + std::to_string(sitesSeen) + " sites)"}};
    throw Refusal{{"rank", "rank " + std::to_string(opts.rank) + ": no site of bug \"" + name + "\" runs on rank " + std::to_string(opts.rank)}};
}

}  // namespace

SiteSearch findSites(const Plan& plan, std::string_view bug) {
    try {
        return {sitesOf(plan, bug), std::nullopt};
    } catch (const Refusal& r) {
        return {{}, r.problem};
    }
}

Mutation mutate(const Plan& plan, std::string_view bug, const MutateOptions& opts) {
    try {
        return {mutantOf(plan, bug, opts), std::nullopt};
    } catch (const Refusal& r) {
        return {std::nullopt, r.problem};
    }
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
            (report.failure ? " (" + std::string(describe(report.failure->kind)) + ")" : std::string()));
        return false;
    }
    const auto& f = *report.failure;
    std::string found = std::string(describe(f.kind)) + " at " + (f.parallelOp.empty() ? f.parallelTensor : f.parallelOp) + " on rank " +
                        std::to_string(f.rank);
    if (std::find(x.kinds.begin(), x.kinds.end(), f.kind) == x.kinds.end()) {
        say("caught as " + found + ", but the expected kind is " + std::string(describe(x.kinds.front())));
        return false;
    }
    const bool stored = x.ranksPerReplica > 0;
    // The mutant holds its members written out (the bug lab reads a plan so): a member's op
    // "x~cp1" is its own; only the replicas' write-out marks map back to the op stored once.
    const auto op = stored ? instance::withoutReplicaMarks(f.parallelOp) : f.parallelOp;
    const auto rank = stored && f.rank >= 0 ? f.rank % x.ranksPerReplica : f.rank;
    for (const auto& [name, r] : x.locations)
        if (name == op && r == rank) {
            say(found);
            return true;
        }
    if (f.kind == FailureKind::DataflowBroken) {
        const auto t = stored ? instance::withoutReplicaMarks(f.parallelTensor) : f.parallelTensor;
        if (!t.empty() && std::find(x.tensors.begin(), x.tensors.end(), t) != x.tensors.end()) {
            say(found);
            return true;
        }
    }
    say("caught as " + found + ", which is neither an edited op nor one its broken dataflow reaches");
    return false;
}

}  // namespace tv::bugs
