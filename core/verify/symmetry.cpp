#include "verify/symmetry.hpp"

#include <algorithm>
#include <unordered_map>

#include "ops/dims.hpp"
#include "ops/registry.hpp"

namespace tv {

bool provenByReplicaZero(const Plan& plan, const Stage& stage, std::string* why) {
    auto no = [&](std::string reason) {
        if (why) *why = std::move(reason);
        return false;
    };
    const auto& L = plan.logical;
    const auto& P = plan.parallel;
    for (auto op : stage.parallelOps) {
        if (P.ops[op].acrossReplicas) return no("collective across replicas " + plan.opName(P, op));
        if (P.ops[op].indexFromReplica) return no("op " + plan.opName(P, op) + " takes its index from the replica");
    }
    // Which dim of each logical tensor carries the replica split (-1: the same on every replica).
    std::unordered_map<TensorId, int> lane;
    for (auto r : stage.inputs) {
        const auto& rec = plan.lineage[r];
        if (rec.replicas == ReplicaMode::Sum) return no("it reads lineage record " + std::to_string(r) + ", whose replicas add up");
        const int d = rec.replicas == ReplicaMode::Split ? rec.splitDim : -1;
        auto [it, fresh] = lane.emplace(rec.logical, d);
        if (!fresh && it->second != d) return no("records of " + plan.tensorName(L, rec.logical) + " disagree on its split");
    }
    const auto& reg = OpRegistry::instance();
    for (auto op : stage.logicalOps) {
        const auto ins = L.inputs(op);
        const auto outs = L.outputs(op);
        std::vector<int> inLane(ins.size(), -1);
        bool any = false;
        for (std::size_t i = 0; i < ins.size(); ++i) {
            auto it = lane.find(ins[i]);
            inLane[i] = it == lane.end() ? -1 : it->second;
            any = any || inLane[i] >= 0;
        }
        if (!any) {
            for (auto t : outs) lane[t] = -1;
            continue;
        }
        std::vector<Shape> inShapes, outShapes;
        for (auto t : ins) inShapes.push_back(plan.shape(L, t));
        for (auto t : outs) outShapes.push_back(plan.shape(L, t));
        OpDims dims;
        try {
            dims = operatorDims(reg.spec(L.ops[op].kind).name, plan.opAttrs(L, op), inShapes, outShapes);
        } catch (const std::exception&) {
            return no("no dims rule for logical op " + plan.opName(L, op));
        }
        const std::string where = "logical op " + plan.opName(L, op);
        int label = -1;
        for (std::size_t i = 0; i < ins.size(); ++i) {
            if (inLane[i] < 0) continue;
            if (i >= dims.in.size() || static_cast<std::size_t>(inLane[i]) >= dims.in[i].size()) return no(where + " has no dims for an input");
            const int l = dims.in[i][static_cast<std::size_t>(inLane[i])];
            // A label some output lacks is reduced over; that shows below as a dropped dim.
            if (l < 0) return no(where + " reads the split dim whole");
            if (label >= 0 && label != l) return no(where + " mixes split dims");
            label = l;
        }
        // An input the same on every replica must not be indexed by the split either.
        for (std::size_t i = 0; i < ins.size() && i < dims.in.size(); ++i)
            if (inLane[i] < 0 && std::find(dims.in[i].begin(), dims.in[i].end(), label) != dims.in[i].end())
                return no(where + " indexes an unsplit input by the split dim");
        for (std::size_t j = 0; j < outs.size(); ++j) {
            if (j >= dims.out.size()) return no(where + " has no dims for an output");
            auto at = std::find(dims.out[j].begin(), dims.out[j].end(), label);
            if (at == dims.out[j].end()) return no(where + " drops the split dim");
            lane[outs[j]] = static_cast<int>(at - dims.out[j].begin());
        }
    }
    const auto& out = plan.lineage[stage.output];
    if (out.replicas == ReplicaMode::Sum) return no("its replicas' terms add up");
    auto it = lane.find(out.logical);
    const int have = it == lane.end() ? -1 : it->second;
    const int want = out.replicas == ReplicaMode::Split ? out.splitDim : -1;
    if (have != want) return no("the split of " + plan.tensorName(L, out.logical) + " does not follow from its inputs'");
    return true;
}

ExpandedStages expandStages(const Plan& plan, const StagePlan& sp, const std::vector<std::uint32_t>& stageIds) {
    ExpandedStages x{plan, {}, {}};
    Plan& out = x.plan;
    out.replication = Replication{};
    out.lineage.clear();
    const auto& T = plan.parallel;
    auto& P = out.parallel;
    P = Graph{};
    const std::int32_t D = plan.replication.degree, S = plan.replication.ranksPerReplica;
    const auto nt = static_cast<std::uint64_t>(T.tensors.size());

    std::vector<bool> opSelected(T.ops.size(), false), recordSelected(plan.lineage.size(), false), proven(plan.lineage.size(), false);
    for (auto s : stageIds) {
        const auto& st = sp.stages[s];
        for (auto op : st.parallelOps) opSelected[op] = true;
        recordSelected[st.output] = true;
        proven[st.output] = true;
        for (auto r : st.inputs) recordSelected[r] = true;
    }
    auto nameOf = [&](const std::string& base, std::int32_t k) { return k == 0 ? base : base + "~dp" + std::to_string(k); };
    std::unordered_map<std::uint64_t, TensorId> ids;
    auto id = [&](std::int32_t k, TensorId t) -> TensorId {
        auto [it, fresh] = ids.emplace(static_cast<std::uint64_t>(k) * nt + t, static_cast<TensorId>(P.tensors.size()));
        if (fresh) {
            auto info = T.tensors[t];
            info.name = out.names.intern(nameOf(plan.names.str(info.name), k));
            if (info.rank >= 0) info.rank += k * S;
            info.producer = kNone;
            P.tensorByName.emplace(info.name, it->second);
            P.tensors.push_back(info);
        }
        return it->second;
    };
    auto addOp = [&](OpInfo info, std::int32_t k, const std::vector<TensorId>& ins, const std::vector<TensorId>& outs) {
        info.firstInput = static_cast<std::uint32_t>(P.operands.size());
        info.numInputs = static_cast<std::uint32_t>(ins.size());
        P.operands.insert(P.operands.end(), ins.begin(), ins.end());
        info.firstOutput = static_cast<std::uint32_t>(P.operands.size());
        info.numOutputs = static_cast<std::uint32_t>(outs.size());
        P.operands.insert(P.operands.end(), outs.begin(), outs.end());
        const auto opId = static_cast<OpId>(P.ops.size());
        for (auto t : outs) P.tensors[t].producer = opId;
        info.name = out.names.intern(nameOf(plan.names.str(info.name), k));
        info.acrossReplicas = false;
        info.indexFromReplica = false;
        P.opByName.emplace(info.name, opId);
        P.ops.push_back(info);
    };
    // Ops in the stored graph order, which is a topological order of every replica's copy.
    for (OpId op = 0; op < T.ops.size(); ++op) {
        if (!opSelected[op]) continue;
        const auto& o = T.ops[op];
        const auto ins = T.inputs(op);
        const auto outs = T.outputs(op);
        if (o.acrossReplicas) {
            std::vector<std::int32_t> group;
            std::vector<TensorId> i2, o2;
            for (std::int32_t k = 0; k < D; ++k) {
                for (auto r : plan.groups[o.group]) group.push_back(r + k * S);
                for (auto t : ins) i2.push_back(id(k, t));
                for (auto t : outs) o2.push_back(id(k, t));
            }
            auto info = o;
            info.group = out.internGroup(group);
            addOp(info, 0, i2, o2);
            continue;
        }
        for (std::int32_t k = 0; k < D; ++k) {
            auto info = o;
            if (o.indexFromReplica) {
                auto a = plan.attrs[o.attrs];
                a["index"] = k;
                info.attrs = out.internAttrs(a);
            }
            if (info.rank >= 0) info.rank += k * S;
            if (info.group != kNone) {
                auto g = plan.groups[o.group];
                for (auto& r : g) r += k * S;
                info.group = out.internGroup(g);
            }
            std::vector<TensorId> i2, o2;
            for (auto t : ins) i2.push_back(id(k, t));
            for (auto t : outs) o2.push_back(id(k, t));
            addOp(info, k, i2, o2);
        }
    }
    // Records, written out replica by replica as their modes say.
    for (std::uint32_t r = 0; r < plan.lineage.size(); ++r) {
        if (!recordSelected[r]) continue;
        const auto& rec = plan.lineage[r];
        LineageRecord nr;
        nr.logical = rec.logical;
        auto mapCopy = [&](const std::vector<LineageTerm>& c, std::int32_t k) {
            auto m = c;
            for (auto& t : m) t.tensor = id(k, t.tensor);
            return m;
        };
        if (rec.replicas == ReplicaMode::Split) {
            const auto d = static_cast<std::size_t>(rec.splitDim);
            const auto step = plan.shape(plan.logical, rec.logical)[d] / D;
            for (std::int32_t k = 0; k < D; ++k)
                for (const auto& s : rec.slices) {
                    LineageSlice ns;
                    ns.box = s.box;
                    ns.box.lo[d] += k * step;
                    ns.box.hi[d] += k * step;
                    for (const auto& c : s.copies) ns.copies.push_back(mapCopy(c, k));
                    nr.slices.push_back(std::move(ns));
                }
        } else {
            for (const auto& s : rec.slices) {
                LineageSlice ns;
                ns.box = s.box;
                for (const auto& c : s.copies) {
                    if (rec.replicas == ReplicaMode::Sum) {
                        std::vector<LineageTerm> sum;
                        for (std::int32_t k = 0; k < D; ++k)
                            for (auto& t : mapCopy(c, k)) sum.push_back(t);
                        ns.copies.push_back(std::move(sum));
                    } else {
                        for (std::int32_t k = 0; k < D; ++k) ns.copies.push_back(mapCopy(c, k));
                    }
                }
                nr.slices.push_back(std::move(ns));
            }
        }
        out.lineage.push_back(std::move(nr));
        x.origin.push_back(r);
        x.assumed.push_back(!proven[r]);
    }
    P.finalize();
    return x;
}

}  // namespace tv
