#include "verify/stages.hpp"

#include <algorithm>
#include <queue>
#include <unordered_set>

#include "ops/registry.hpp"

namespace tv {

namespace {

Failure dataflowFailure(const Plan& plan, std::uint32_t stage, const std::string& msg) {
    Failure f;
    f.kind = FailureKind::DataflowBroken;
    f.stage = stage;
    f.message = msg;
    (void)plan;
    return f;
}

void locateParallelOp(const Plan& plan, OpId op, Failure& f) {
    const auto& P = plan.parallel;
    f.parallelOp = plan.opName(P, op);
    const auto& o = P.ops[op];
    f.rank = P.homeRank(op);
    f.coordinates = plan.coordinatesJson(f.rank);
    f.microbatch = o.microbatch;
}

}  // namespace

StagePlan cutStages(const Plan& plan, const std::vector<bool>* assumed) {
    const auto& L = plan.logical;
    const auto& P = plan.parallel;
    const auto nrec = static_cast<std::uint32_t>(plan.lineage.size());
    StagePlan sp;
    sp.stageOfRecord.assign(nrec, kNone);

    // Which record holds each parallel tensor (validated: at most one).
    std::vector<std::uint32_t> recordOf(P.tensors.size(), kNone);
    for (std::uint32_t r = 0; r < nrec; ++r)
        for (const auto& s : plan.lineage[r].slices)
            for (const auto& c : s.copies)
                for (const auto& t : c) recordOf[t.tensor] = r;

    // A record is initial (an assumption) when it is the first record of a logical tensor nothing
    // produces and every parallel tensor it names is one nothing produces either: an assumption
    // may only describe what the step is given (weights, data, optimizer state, the loss seed).
    // A record naming a tensor that an op computes is a claim like any other, and is proven.
    std::vector<bool> initial(nrec, false);
    std::vector<bool> seenLogical(L.tensors.size(), false);
    auto onlyGiven = [&](const LineageRecord& rec) {
        for (const auto& s : rec.slices)
            for (const auto& c : s.copies)
                for (const auto& t : c)
                    if (P.tensors[t.tensor].producer != kNone) return false;
        return true;
    };
    for (std::uint32_t r = 0; r < nrec; ++r) {
        auto t = plan.lineage[r].logical;
        if (L.tensors[t].producer == kNone && !seenLogical[t] && onlyGiven(plan.lineage[r])) {
            initial[r] = true;
            seenLogical[t] = true;
        }
        if (assumed && r < assumed->size() && (*assumed)[r]) initial[r] = true;
        if (L.tensors[t].producer != kNone) seenLogical[t] = true;
        if (initial[r]) sp.initialRecords.push_back(r);
    }
    std::vector<bool> described(L.tensors.size(), false);
    for (const auto& rec : plan.lineage) described[rec.logical] = true;

    struct Draft {
        Stage stage;
        bool broken = false;
        std::vector<Failure> failures;
    };
    std::vector<Draft> drafts;
    std::vector<std::uint32_t> draftOfRecord(nrec, kNone);
    std::vector<std::uint32_t> visitedP(P.ops.size(), kNone), visitedL(L.ops.size(), kNone);

    for (std::uint32_t r = 0; r < nrec; ++r) {
        if (initial[r]) continue;
        Draft d;
        d.stage.output = r;
        const auto& rec = plan.lineage[r];
        const auto& lname = plan.tensorName(L, rec.logical);
        std::vector<std::uint32_t> inputs;

        // Parallel side: walk producers back from the record's tensors to other records.
        std::vector<TensorId> work;
        std::unordered_set<TensorId> seenT;
        for (const auto& s : rec.slices)
            for (const auto& c : s.copies)
                for (const auto& t : c)
                    if (seenT.insert(t.tensor).second) work.push_back(t.tensor);
        while (!work.empty()) {
            auto t = work.back();
            work.pop_back();
            auto op = P.tensors[t].producer;
            if (op == kNone) {
                if (recordOf[t] == r) {
                    Failure f = dataflowFailure(plan, kNone, "parallel tensor \"" + plan.tensorName(P, t) + "\" holds part of \"" + lname +
                                                                 "\", but no op produces it");
                    f.tensor = lname;
                    f.parallelTensor = plan.tensorName(P, t);
                    f.rank = P.tensors[t].rank;
                    f.coordinates = plan.coordinatesJson(f.rank);
                    f.microbatch = P.tensors[t].microbatch;
                    d.failures.push_back(f);
                    d.broken = true;
                }
                continue;
            }
            if (visitedP[op] == r) continue;
            visitedP[op] = r;
            d.stage.parallelOps.push_back(op);
            for (auto in : P.inputs(op)) {
                if (recordOf[in] != kNone && recordOf[in] != r) {
                    inputs.push_back(recordOf[in]);
                    continue;
                }
                if (P.tensors[in].producer == kNone && recordOf[in] == kNone) {
                    Failure f = dataflowFailure(plan, kNone, "op \"" + plan.opName(P, op) + "\" reads \"" + plan.tensorName(P, in) +
                                                                 "\", which no op produces and no lineage describes, on the way to \"" + lname + "\"");
                    locateParallelOp(plan, op, f);
                    f.tensor = lname;
                    f.parallelTensor = plan.tensorName(P, in);
                    f.otherEnd = "parallel tensor " + plan.tensorName(P, in);
                    f.otherEndTensor = plan.tensorName(P, in);
                    d.failures.push_back(f);
                    d.broken = true;
                    continue;
                }
                if (seenT.insert(in).second) work.push_back(in);
            }
        }
        std::sort(inputs.begin(), inputs.end());
        inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
        d.stage.inputs = inputs;

        // Logical side: walk back from the record's tensor to the inputs' logical tensors.
        std::unordered_set<TensorId> provided;
        for (auto i : inputs) provided.insert(plan.lineage[i].logical);
        std::vector<TensorId> usedProvided;
        if (provided.count(rec.logical)) usedProvided.push_back(rec.logical);  // a glue stage's own tensor
        if (!provided.count(rec.logical)) {
            std::vector<TensorId> lw{rec.logical};
            std::unordered_set<TensorId> seenL{rec.logical};
            while (!lw.empty()) {
                auto t = lw.back();
                lw.pop_back();
                auto op = L.tensors[t].producer;
                if (op == kNone) {
                    // A logical source the parallel stage never reads: the parallel plan lost this
                    // dataflow (or computes a copy of a given tensor from something else).
                    Failure f = dataflowFailure(plan, kNone, t == rec.logical
                        ? "\"" + lname + "\" is given to the logical step, but the parallel plan computes a copy of it from other tensors instead of receiving it"
                        : "\"" + lname + "\" depends on \"" + plan.tensorName(L, t) +
                              "\", but the parallel ops computing it never read a lineage of \"" + plan.tensorName(L, t) + "\"");
                    f.tensor = lname;
                    f.otherEnd = "logical tensor " + plan.tensorName(L, t);
                    f.otherEndTensor = plan.tensorName(L, t);
                    f.otherEndLogical = true;
                    // Point at the last parallel op producing the record's tensors.
                    OpId last = kNone;
                    for (auto op2 : d.stage.parallelOps)
                        if (recordOf[P.outputs(op2)[0]] == r && (last == kNone || P.topoIndex[op2] > P.topoIndex[last])) last = op2;
                    if (last != kNone) locateParallelOp(plan, last, f);
                    if (auto lop = L.tensors[rec.logical].producer; lop != kNone) f.logicalOp = plan.opName(L, lop);
                    d.failures.push_back(f);
                    d.broken = true;
                    continue;
                }
                if (visitedL[op] == r) continue;
                visitedL[op] = r;
                d.stage.logicalOps.push_back(op);
                for (auto in : L.inputs(op)) {
                    if (!provided.count(in)) {
                        if (seenL.insert(in).second) lw.push_back(in);
                    } else if (seenL.insert(in).second) {
                        usedProvided.push_back(in);
                    }
                }
            }
        }
        // A provided tensor that the stage's other inputs compute is computed, not taken as a
        // free unknown: the parallel side may compute its copy on one rank from those inputs
        // (a copy its record leaves out), and an unknown unrelated to them would refuse the
        // stage. Exact: the logical ops are the specification. Bounded search.
        for (auto t : usedProvided) {
            std::vector<OpId> ops;
            std::vector<TensorId> work{t};
            std::unordered_set<TensorId> seen{t};
            bool computable = L.tensors[t].producer != kNone;
            while (computable && !work.empty()) {
                auto x = work.back();
                work.pop_back();
                auto op = L.tensors[x].producer;
                if (op == kNone) {
                    computable = false;
                    break;
                }
                if (std::find(ops.begin(), ops.end(), op) != ops.end()) continue;
                ops.push_back(op);
                if (ops.size() > 32) computable = false;
                for (auto in : L.inputs(op))
                    if (!(provided.count(in) && in != t) && seen.insert(in).second) work.push_back(in);
            }
            if (!computable) continue;
            for (auto op : ops)
                if (visitedL[op] != r) {
                    visitedL[op] = r;
                    d.stage.logicalOps.push_back(op);
                }
        }
        std::sort(d.stage.logicalOps.begin(), d.stage.logicalOps.end(),
                  [&](OpId a, OpId b) { return L.topoIndex[a] < L.topoIndex[b]; });
        std::sort(d.stage.parallelOps.begin(), d.stage.parallelOps.end(),
                  [&](OpId a, OpId b) { return P.topoIndex[a] < P.topoIndex[b]; });
        d.stage.graphOrder = d.stage.parallelOps.empty() ? kNone : P.topoIndex[d.stage.parallelOps.back()];
        draftOfRecord[r] = static_cast<std::uint32_t>(drafts.size());
        drafts.push_back(std::move(d));
    }

    // Proof order: a stage comes after the stages proving its input records (Kahn, ties in file order).
    std::vector<std::uint32_t> pending(drafts.size(), 0);
    std::vector<std::vector<std::uint32_t>> dependents(drafts.size());
    for (std::uint32_t i = 0; i < drafts.size(); ++i)
        for (auto in : drafts[i].stage.inputs)
            if (!initial[in]) {
                ++pending[i];
                dependents[draftOfRecord[in]].push_back(i);
            }
    std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> ready;
    for (std::uint32_t i = 0; i < drafts.size(); ++i)
        if (pending[i] == 0) ready.push(i);
    std::vector<std::uint32_t> order;
    while (!ready.empty()) {
        auto i = ready.top();
        ready.pop();
        order.push_back(i);
        for (auto j : dependents[i])
            if (--pending[j] == 0) ready.push(j);
    }
    if (order.size() != drafts.size()) {
        for (std::uint32_t i = 0; i < drafts.size(); ++i)
            if (pending[i] != 0) {
                const auto& rec = plan.lineage[drafts[i].stage.output];
                Failure f = dataflowFailure(plan, kNone, "the lineage of \"" + plan.tensorName(L, rec.logical) +
                                                             "\" (lineage record " + std::to_string(drafts[i].stage.output) +
                                                             ") depends on itself through other lineage records: no proof order exists");
                f.tensor = plan.tensorName(L, rec.logical);
                sp.structural.push_back(f);
                break;
            }
        return sp;
    }
    for (auto i : order) {
        auto& st = drafts[i].stage;
        st.id = static_cast<std::uint32_t>(sp.stages.size());
        sp.stageOfRecord[st.output] = st.id;
        for (auto& f : drafts[i].failures) {
            f.stage = st.id;
            sp.structural.push_back(std::move(f));
        }
        sp.stages.push_back(std::move(st));
    }

    // Every result that leaves the step must be claimed, or it is not checked: a logical output
    // (produced, never consumed) without a lineage, and a parallel tensor of the step's state (a
    // weight, optimizer state, a gradient, the loss) computed, never read and named by no lineage
    // (a replica of an updated weight left out). Transient activations never read are dead code,
    // not results. Not
    // for part of a plan written out (`assumed`): what it leaves out is checked where it lives.
    if (!assumed) {
        for (TensorId t = 0; t < L.tensors.size(); ++t)
            if (L.tensors[t].producer != kNone && L.consumers(t).empty() && !described[t]) {
                Failure f;
                f.kind = FailureKind::UnclaimedOutput;
                f.tensor = plan.tensorName(L, t);
                f.logicalOp = plan.opName(L, L.tensors[t].producer);
                f.message = "logical output \"" + f.tensor + "\" has no lineage, so the parallel plan's value for it is not checked";
                sp.structural.push_back(std::move(f));
            }
        // By dataflow, whatever the roles say: a tensor that no claimed tensor depends on is
        // checked by nothing. Computed by arithmetic (not data movement or a collective, whose
        // output is a view or a copy of tensors checked elsewhere, or is itself the unchecked
        // tensor's producer's concern), it is a result nobody claims: an updated weight replica
        // left out of every record, role or no role. Dead data movement alone (the unused half
        // of a split, an all-reduce member nobody reads) is waste, not an unchecked result.
        std::vector<bool> live(P.tensors.size(), false);
        {
            std::vector<TensorId> work;
            for (TensorId t = 0; t < P.tensors.size(); ++t)
                if (recordOf[t] != kNone) live[t] = true, work.push_back(t);
            std::vector<bool> opSeen(P.ops.size(), false);
            while (!work.empty()) {
                auto t = work.back();
                work.pop_back();
                auto op = P.tensors[t].producer;
                if (op == kNone || opSeen[op]) continue;
                opSeen[op] = true;
                for (auto in : P.inputs(op))
                    if (!live[in]) live[in] = true, work.push_back(in);
            }
        }
        const auto& reg = OpRegistry::instance();
        std::size_t reported = 0, more = 0;
        for (TensorId t = 0; t < P.tensors.size(); ++t) {
            if (P.tensors[t].producer == kNone || recordOf[t] != kNone) continue;
            const auto& spec = reg.spec(P.ops[P.tensors[t].producer].kind);
            const bool arithmetic = !spec.collective && spec.cls != OpClass::Movement;
            const bool stateByRole = P.consumers(t).empty() && P.tensors[t].role != Role::Activation && P.tensors[t].role != Role::Input;
            if (!stateByRole && (live[t] || !arithmetic)) continue;
            if (reported == 20) {
                ++more;
                continue;
            }
            ++reported;
            Failure f;
            f.kind = FailureKind::UnclaimedOutput;
            locateParallelOp(plan, P.tensors[t].producer, f);
            f.parallelTensor = plan.tensorName(P, t);
            f.rank = P.tensors[t].rank;
            f.coordinates = plan.coordinatesJson(f.rank);
            f.message = stateByRole
                            ? "parallel tensor \"" + f.parallelTensor + "\" (" + std::string(toString(P.tensors[t].role)) +
                                  ") is computed and leaves the step, but no lineage claims it, so its value is not checked"
                            : "parallel tensor \"" + f.parallelTensor + "\" is computed (by " + std::string(spec.name) +
                                  "), but no lineage claims it or anything computed from it, so its value is not checked "
                                  "(a result that leaves the step without a lineage record, or dead code)";
            sp.structural.push_back(std::move(f));
        }
        if (more) {
            Failure f;
            f.kind = FailureKind::UnclaimedOutput;
            f.message = std::to_string(more) + " more parallel tensors are computed and checked by no lineage claim";
            sp.structural.push_back(std::move(f));
        }
    }
    return sp;
}

std::string structuralKey(const Plan& plan, const Stage& stage) {
    const auto& L = plan.logical;
    const auto& P = plan.parallel;
    std::unordered_map<TensorId, std::uint32_t> lId, pId;
    std::string key;
    key.reserve(1024);
    auto num = [&](std::int64_t v) {
        key += std::to_string(v);
        key += ',';
    };
    auto tensor = [&](std::unordered_map<TensorId, std::uint32_t>& ids, const Graph& g, TensorId t) {
        auto [it, fresh] = ids.emplace(t, static_cast<std::uint32_t>(ids.size()));
        num(it->second);
        if (fresh) {
            key += '<';
            for (auto d : plan.shape(g, t)) num(d);
            key += g.tensors[t].dtype == DType::Int ? "i>" : "f>";
        }
    };
    auto record = [&](std::uint32_t r, char tag) {
        const auto& rec = plan.lineage[r];
        key += tag;
        if (rec.replicas != ReplicaMode::None) {
            // How the record repeats across replicas is part of the obligation.
            key += "R";
            num(static_cast<int>(rec.replicas));
            num(rec.splitDim);
        }
        if (rec.members != ReplicaMode::None) {
            // And across the members of a group stored once (review of issue 22: two stages
            // differing only here shared a proof).
            key += "N";
            num(static_cast<int>(rec.members));
            num(rec.memberDim);
            num(rec.memberStep);
        }
        tensor(lId, L, rec.logical);
        for (const auto& s : rec.slices) {
            key += '[';
            for (std::size_t d = 0; d < s.box.lo.size(); ++d) {
                num(s.box.lo[d]);
                num(s.box.hi[d]);
            }
            for (const auto& c : s.copies) {
                key += '(';
                for (const auto& t : c) {
                    tensor(pId, P, t.tensor);
                    key += t.coeff.toString();
                    key += ';';
                }
                key += ')';
            }
            key += ']';
        }
    };
    auto ops = [&](const Graph& g, const std::vector<OpId>& list, std::unordered_map<TensorId, std::uint32_t>& ids, char tag) {
        for (auto op : list) {
            key += tag;
            num(g.ops[op].kind);
            // By content, not by id: ids are numbered per plan, so a key stays the same
            // obligation across plans (a proof cache that outlives a reload relies on it).
            if (g.ops[op].attrs != kNone) key += plan.attrText(g.ops[op].attrs);
            key += ',';
            if (g.ops[op].acrossReplicas) key += 'X';
            if (g.ops[op].indexFromReplica) key += 'K';
            if (g.ops[op].acrossMicrobatches) key += 'M';
            if (g.ops[op].acrossMembers) key += 'E';
            if (g.ops[op].indexFromMember) key += 'J';
            for (auto t : g.inputs(op)) tensor(ids, g, t);
            key += '>';
            for (auto t : g.outputs(op)) tensor(ids, g, t);
        }
    };
    for (auto r : stage.inputs) record(r, 'I');
    record(stage.output, 'O');
    ops(L, stage.logicalOps, lId, 'L');
    ops(P, stage.parallelOps, pId, 'P');
    return key;
}

}  // namespace tv
