// Counterexample replay: values as shown, the first parallel op whose output breaks its
// lineage (the diagnosis), lane misalignment, and the stage's trace for the Studio's stepper.

#include "verify/stage_checker.hpp"

#include <algorithm>

namespace tv::check_detail {

std::string StageChecker::value(const z3::model& m, const z3::expr& e) const {
    if (mentionsFunction(e)) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9Lg", realValue(m, e).value);
        return buf;
    }
    auto v = m.eval(e, true);
    if (v.is_numeral()) return Z3_get_numeral_string(ctx_, v);
    return v.to_string();
}

TensorValues StageChecker::valuesOf(const z3::model& m, const Graph& g, TensorId t, const SymValue& v, const std::vector<std::int64_t>* offs) const {
    TensorValues tv;
    tv.name = plan_.tensorName(g, t);
    tv.fullShape = plan_.shape(g, t);
    tv.shape = v.shape;
    tv.rank = g.tensors[t].rank;
    tv.microbatch = g.tensors[t].microbatch;
    auto n = offs ? offs->size() : v.v.size();
    for (std::size_t i = 0; i < n && i < kShownElements; ++i) {
        auto k = offs ? static_cast<std::size_t>((*offs)[i]) : i;
        tv.values.push_back(value(m, v.v[k]));
    }
    return tv;
}

void StageChecker::explainLaneMisalignment(OpId last, Failure& f) const {
    if (last == kNone) return;
    std::unordered_set<OpId> inStage(stage_.parallelOps.begin(), stage_.parallelOps.end());
    std::vector<OpId> work{last};
    std::unordered_set<OpId> seen{last};
    OpId found = kNone;
    TensorId foreign = kNone;
    while (!work.empty()) {
        auto op = work.back();
        work.pop_back();
        // Misaligned: the op belongs to microbatch m, reads microbatch-tagged tensors, and none
        // of them is of microbatch m (an accumulation reading m-1 and m is aligned).
        auto mb = P_.ops[op].microbatch;
        TensorId other = kNone;
        bool readsOwn = false;
        for (auto in : P_.inputs(op)) {
            auto tmb = P_.tensors[in].microbatch;
            if (tmb == mb) readsOwn = true;
            else if (tmb >= 0 && other == kNone) other = in;
            auto prod = P_.tensors[in].producer;
            if (prod != kNone && inStage.count(prod) && seen.insert(prod).second) work.push_back(prod);
        }
        if (mb >= 0 && other != kNone && !readsOwn && (found == kNone || P_.topoIndex[op] < P_.topoIndex[found])) {
            found = op;
            foreign = other;
        }
    }
    if (found == kNone) return;
    f.kind = FailureKind::LaneMisalignment;
    f.parallelOp = plan_.opName(P_, found);
    const auto& o = P_.ops[found];
    f.rank = P_.homeRank(found);
    f.coordinates = plan_.coordinatesJson(f.rank);
    f.microbatch = o.microbatch;
    f.otherEnd = "tensor \"" + plan_.tensorName(P_, foreign) + "\" of microbatch " + std::to_string(P_.tensors[foreign].microbatch);
    f.otherEndTensor = plan_.tensorName(P_, foreign);
}

void StageChecker::locate(const z3::model& m) {
    const auto& rec = plan_.lineage[stage_.output];
    const auto& ts = lVal_.at(rec.logical);
    struct Candidate {
        std::uint32_t order = kNone;
        OpId op = kNone;
        TensorId tensor = kNone;
        const LineageSlice* slice = nullptr;
        const std::vector<LineageTerm>* copy = nullptr;
        std::size_t element = 0;
        std::vector<std::int64_t> offs;
    };
    Candidate best;
    for (const auto& s : rec.slices) {
        auto offs = boxOffsets(ts.shape, reducedBox(s.box, rec.logical));
        for (const auto& c : s.copies) {
            std::size_t bad = offs.size();
            for (std::size_t e = 0; e < offs.size() && bad == offs.size(); ++e) {
                std::vector<z3::expr> terms;
                for (const auto& t : c) terms.push_back(alg_.mul(alg_.num(t.coeff), pVal_.at(t.tensor).v[e]));
                if (reallyDiffers(m, ts.v[offs[e]], alg_.sum(terms))) bad = e;
            }
            if (bad == offs.size()) continue;
            // The op that completes this copy: the last producer of its terms in graph order.
            Candidate cand;
            for (const auto& t : c) {
                auto op = P_.tensors[t.tensor].producer;
                auto order = op == kNone ? 0u : P_.topoIndex[op];
                if (cand.op == kNone || (op != kNone && order >= cand.order)) {
                    cand.op = op;
                    cand.order = order;
                    cand.tensor = t.tensor;
                }
            }
            cand.slice = &s;
            cand.copy = &c;
            cand.element = bad;
            cand.offs = offs;
            if (best.copy == nullptr || cand.order < best.order) best = std::move(cand);
        }
    }
    Failure f;
    f.kind = FailureKind::Counterexample;
    f.stage = stage_.id;
    f.tensor = plan_.tensorName(L_, rec.logical);
    if (auto lop = L_.tensors[rec.logical].producer; lop != kNone && !stage_.glue()) f.logicalOp = plan_.opName(L_, lop);
    if (best.copy == nullptr) {
        f.message = "the solver found a counterexample, but replay did not reproduce it";
        result_.status = StageStatus::Failed;
        result_.failure = f;
        return;
    }
    f.parallelTensor = plan_.tensorName(P_, best.tensor);
    f.rank = P_.tensors[best.tensor].rank;
    f.coordinates = plan_.coordinatesJson(f.rank);
    f.microbatch = P_.tensors[best.tensor].microbatch;
    if (best.op != kNone) {
        f.parallelOp = plan_.opName(P_, best.op);
        if (P_.ops[best.op].microbatch >= 0) f.microbatch = P_.ops[best.op].microbatch;
    }
    f.slice = best.slice->box.toString();
    // The op completing the copy is where the difference shows; an op on the way that is not
    // the operator its logical namesake is (another constant, another kind) is where the plan
    // is wrong: a partial sum's terms are completed last by whichever rank comes last.
    std::string disagreement;
    if (auto bad = disagreeingAncestor(*best.copy, disagreement); bad != kNone && bad != best.op) {
        best.op = bad;
        f.parallelOp = plan_.opName(P_, bad);
        f.rank = P_.homeRank(bad);
        f.coordinates = plan_.coordinatesJson(f.rank);
        f.microbatch = P_.ops[bad].microbatch;
        if (P_.ops[bad].numOutputs) f.parallelTensor = plan_.tensorName(P_, P_.outputs(bad)[0]);
    }
    explainLaneMisalignment(best.op, f);
    auto logicalIdx = unravel(best.offs[best.element], ts.shape);
    f.element = indexString(logicalIdx);
    f.expected = value(m, ts.v[best.offs[best.element]]);
    {
        std::vector<z3::expr> terms;
        for (const auto& t : *best.copy) terms.push_back(alg_.mul(alg_.num(t.coeff), pVal_.at(t.tensor).v[best.element]));
        f.actual = value(m, alg_.sum(terms));
    }
    std::string copyText;
    for (const auto& t : *best.copy) {
        if (!copyText.empty()) copyText += " + ";
        if (!t.coeff.isOne()) copyText += t.coeff.toString() + "*";
        copyText += plan_.tensorName(P_, t.tensor);
    }
    f.message = (f.parallelOp.empty() ? std::string("the parallel plan") : "parallel op \"" + f.parallelOp + "\"") +
                (f.rank >= 0 ? " on rank " + std::to_string(f.rank) : std::string()) + (disagreement.empty() ? std::string() : " (" + disagreement + ")") +
                " makes " + copyText + " differ from " + f.tensor + best.slice->box.toString();
    if (f.kind == FailureKind::LaneMisalignment)
        f.message = "parallel op \"" + f.parallelOp + "\" of microbatch " + std::to_string(f.microbatch) + " reads " + f.otherEnd +
                    ", so " + copyText + " differs from " + f.tensor + best.slice->box.toString();
    for (auto r : stage_.inputs) {
        auto lt = plan_.lineage[r].logical;
        bool dup = false;
        for (const auto& e : f.example) dup = dup || e.name == plan_.tensorName(L_, lt);
        if (!dup) f.example.push_back(valuesOf(m, L_, lt, lVal_.at(lt)));
    }
    f.logical.push_back(valuesOf(m, L_, rec.logical, ts, &best.offs));
    f.logical.back().shape = reducedBox(best.slice->box, rec.logical).extent();
    f.logical.back().fullShape = best.slice->box.extent();
    for (const auto& t : *best.copy) f.parallel.push_back(valuesOf(m, P_, t.tensor, pVal_.at(t.tensor)));
    if (opts_.keepTrace) {
        // The trace is an aid: if building it fails (interrupted, out of memory), the
        // counterexample stands without it.
        try {
            f.trace = buildTrace(m, best.op, f);
        } catch (const std::exception&) {
            f.trace.reset();
        }
    }
    result_.status = StageStatus::Failed;
    result_.failure = f;
}

OpId StageChecker::disagreeingAncestor(const std::vector<LineageTerm>& copy, std::string& why) const {
    const auto& reg = OpRegistry::instance();
    std::unordered_set<OpId> inStage(stage_.parallelOps.begin(), stage_.parallelOps.end());
    std::unordered_set<OpId> seen;
    std::vector<OpId> work;
    for (const auto& t : copy)
        if (auto op = P_.tensors[t.tensor].producer; op != kNone && inStage.count(op) && seen.insert(op).second) work.push_back(op);
    OpId found = kNone;
    while (!work.empty()) {
        auto op = work.back();
        work.pop_back();
        for (auto in : P_.inputs(op))
            if (auto prod = P_.tensors[in].producer; prod != kNone && inStage.count(prod) && seen.insert(prod).second) work.push_back(prod);
        const auto& spec = reg.spec(P_.ops[op].kind);
        if (spec.collective || spec.cls == OpClass::Movement || spec.cls == OpClass::Collective) continue;
        const auto& attrs = plan_.opAttrs(P_, op);
        if (attrs.contains("parts") || attrs.contains("index")) continue;
        auto name = plan_.names.find(instance::logicalName(plan_.opName(P_, op)));
        if (name == kNone) continue;
        auto lop = L_.findOp(name);
        if (lop == kNone) continue;
        const bool sameKind = L_.ops[lop].kind == P_.ops[op].kind;
        const auto& la = plan_.opAttrs(L_, lop);
        if (sameKind && la == attrs) continue;
        if (found != kNone && P_.topoIndex[found] < P_.topoIndex[op]) continue;
        found = op;
        why = sameKind ? std::string(spec.name) + " " + attrs.dump() + " where the logical op " + plan_.opName(L_, lop) + " has " + la.dump()
                       : std::string(spec.name) + " where the logical op " + plan_.opName(L_, lop) + " is " + std::string(reg.spec(L_.ops[lop].kind).name);
    }
    return found;
}

std::shared_ptr<const StageTrace> StageChecker::buildTrace(const z3::model& m, OpId failingOp, const Failure& f) const {
    auto trace = std::make_shared<StageTrace>();
    const auto& reg = OpRegistry::instance();
    std::unordered_set<unsigned> seenTerms;
    auto stepOf = [&](const Graph& g, OpId op, bool parallel, const std::unordered_map<TensorId, SymValue>& vals) {
        TraceStep s;
        s.parallel = parallel;
        s.op = plan_.opName(g, op);
        s.kind = std::string(reg.spec(g.ops[op].kind).name);
        if (parallel) {
            s.rank = g.homeRank(op);
            s.microbatch = g.ops[op].microbatch;
            if (g.ops[op].group != kNone) s.group = plan_.groups[g.ops[op].group];
        }
        for (auto t : g.inputs(op))
            if (auto it = vals.find(t); it != vals.end()) s.inputs.push_back(valuesOf(m, g, t, it->second));
        for (auto t : g.outputs(op))
            if (auto it = vals.find(t); it != vals.end()) {
                s.outputs.push_back(valuesOf(m, g, t, it->second));
                // The trace says so when a value it shows is an uninterpreted function's (the
                // terms decide, not the operator: a pow is exact for an integer exponent).
                if (!trace->uninterpreted) trace->uninterpreted = appliesUninterpreted(it->second, kShownElements, seenTerms);
            }
        return s;
    };
    for (auto op : stage_.logicalOps) trace->logical.push_back(stepOf(L_, op, false, lVal_));
    std::unordered_map<OpId, int> parallelStep;
    for (auto op : stage_.parallelOps) {
        parallelStep[op] = static_cast<int>(trace->parallel.size());
        trace->parallel.push_back(stepOf(P_, op, true, pVal_));
    }
    // Lock-step: a parallel op sits beside the logical op of its name; failing that, the k-th
    // op of its kind on its rank beside the k-th logical op of that kind; a communication op
    // beside what its rank computed last.
    std::unordered_map<std::string, int> logicalByName;
    std::unordered_map<std::string, std::vector<int>> logicalByKind;
    for (std::size_t i = 0; i < trace->logical.size(); ++i) {
        logicalByName.emplace(trace->logical[i].op, static_cast<int>(i));
        logicalByKind[trace->logical[i].kind].push_back(static_cast<int>(i));
    }
    std::map<std::pair<std::int32_t, std::string>, std::size_t> seenKind;
    std::unordered_map<std::int32_t, int> lastOnRank;
    for (std::size_t i = 0; i < trace->parallel.size(); ++i) {
        auto& s = trace->parallel[i];
        if (auto it = logicalByName.find(instance::logicalName(s.op)); it != logicalByName.end()) {
            s.logical = it->second;
        } else if (auto k = logicalByKind.find(s.kind); k != logicalByKind.end()) {
            auto n = seenKind[{s.rank, s.kind}]++;
            if (n < k->second.size()) s.logical = k->second[n];
        }
        if (s.logical < 0)
            if (auto it = lastOnRank.find(s.rank); it != lastOnRank.end()) s.logical = it->second;
        // A collective moving what another rank computed: beside what its input's producer is.
        if (s.logical < 0)
            for (auto in : P_.inputs(stage_.parallelOps[i]))
                if (auto prod = P_.tensors[in].producer; prod != kNone)
                    if (auto it = parallelStep.find(prod); it != parallelStep.end() && trace->parallel[it->second].logical >= 0)
                        s.logical = trace->parallel[it->second].logical;
        if (s.logical >= 0) lastOnRank[s.rank] = s.logical;
    }
    // The claims: inputs assumed, the output's copies checked where they are complete.
    auto copyText = [&](const std::vector<LineageTerm>& c) {
        std::string text;
        for (const auto& t : c) {
            if (!text.empty()) text += " + ";
            if (!t.coeff.isOne()) text += t.coeff.toString() + "*";
            text += plan_.tensorName(P_, t.tensor);
        }
        return text;
    };
    for (auto r : stage_.inputs) {
        const auto& rec = plan_.lineage[r];
        for (const auto& s : rec.slices)
            for (const auto& c : s.copies)
                trace->assumptions.push_back(plan_.tensorName(L_, rec.logical) + s.box.toString() + " == " + copyText(c));
    }
    const auto& rec = plan_.lineage[stage_.output];
    const auto& ts = lVal_.at(rec.logical);
    for (const auto& s : rec.slices) {
        const Box reduced = reducedBox(s.box, rec.logical);
        auto offs = boxOffsets(ts.shape, reduced);
        for (const auto& c : s.copies) {
            LineageCheck check;
            check.relation = plan_.tensorName(L_, rec.logical) + s.box.toString() + " == " + copyText(c);
            auto copyAt = [&](std::size_t e) {
                std::vector<z3::expr> terms;
                for (const auto& t : c) terms.push_back(alg_.mul(alg_.num(t.coeff), pVal_.at(t.tensor).v[e]));
                return alg_.sum(terms);
            };
            for (std::size_t e = 0; e < offs.size() && check.holds; ++e) {
                auto sum = copyAt(e);
                if (!reallyDiffers(m, ts.v[offs[e]], sum)) continue;
                check.holds = false;
                check.element = indexString(unravel(offs[e], ts.shape));
                check.expected = value(m, ts.v[offs[e]]);
                check.actual = value(m, sum);
            }
            // A broken copy is shown whole (up to kShownElements): expected beside actual, every
            // element, so the wrong cells can be seen among the right ones.
            if (!check.holds && offs.size() <= kShownElements) {
                check.shape = reduced.extent();
                for (std::size_t e = 0; e < offs.size(); ++e) {
                    check.expectedValues.push_back(value(m, ts.v[offs[e]]));
                    check.actualValues.push_back(value(m, copyAt(e)));
                }
            }
            // At the op completing the copy: its terms' last producer inside the stage.
            int at = -1;
            for (const auto& t : c)
                if (auto op = P_.tensors[t.tensor].producer; op != kNone)
                    if (auto it = parallelStep.find(op); it != parallelStep.end()) at = std::max(at, it->second);
            if (at < 0 && !trace->parallel.empty()) at = static_cast<int>(trace->parallel.size()) - 1;
            if (at >= 0) trace->parallel[at].checks.push_back(std::move(check));
        }
    }
    if (auto it = parallelStep.find(failingOp); failingOp != kNone && it != parallelStep.end()) trace->divergence = it->second;
    if (trace->divergence < 0)
        for (std::size_t i = 0; i < trace->parallel.size() && trace->divergence < 0; ++i)
            for (const auto& c : trace->parallel[i].checks)
                if (!c.holds) trace->divergence = static_cast<int>(i);
    // One rank story: the divergence step is told from where the wrong value lands, the rank the
    // diagnosis names (a collective's home rank is only its first output's), and its wrong output
    // is the one shown first. After the pairing above, which keys on the home rank.
    if (trace->divergence >= 0) {
        auto& d = trace->parallel[static_cast<std::size_t>(trace->divergence)];
        if (d.op == f.parallelOp && f.rank >= 0 && (d.group.empty() ? d.rank == f.rank : std::find(d.group.begin(), d.group.end(), f.rank) != d.group.end()))
            d.rank = f.rank;
        const auto wrong = std::find_if(d.outputs.begin(), d.outputs.end(), [&](const TensorValues& v) { return v.name == f.parallelTensor; });
        if (wrong != d.outputs.end()) std::rotate(d.outputs.begin(), wrong, wrong + 1);
    }
    if (f.kind == FailureKind::LaneMisalignment)
        for (std::size_t i = 0; i < trace->parallel.size(); ++i)
            if (trace->parallel[i].op == f.parallelOp) trace->misaligned = static_cast<int>(i);
    return trace;
}

}  // namespace tv::check_detail
