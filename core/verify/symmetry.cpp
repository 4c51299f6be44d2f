#include "verify/symmetry.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

#include "io/plan_members.hpp"
#include "ops/dims.hpp"
#include "ops/registry.hpp"
#include "model/instance_names.hpp"

namespace tv {

WrittenOutCounts writtenOutCounts(const Plan& plan) {
    WrittenOutCounts c;
    const auto& rep = plan.replication;
    const auto& reg = OpRegistry::instance();
    const auto& P = plan.parallel;
    const std::size_t D = static_cast<std::size_t>(rep.degree), M = static_cast<std::size_t>(rep.microbatches);
    const std::size_t N = static_cast<std::size_t>(rep.members);
    for (const auto& t : P.tensors) c.tensors += N * static_cast<std::size_t>(rep.instances(t.microbatch));
    for (const auto& o : P.ops) {
        std::string kind(reg.spec(o.kind).name);
        std::size_t n = static_cast<std::size_t>(rep.instances(o.microbatch));
        if (o.acrossReplicas) n = 1;
        if (o.acrossMicrobatches && M > 1) {
            kind = "add";
            n = D * (M - 1);
            c.tensors += N * D * (M - 2);  // the partial sums between the adds
        } else if (o.acrossMicrobatches) {
            n = D;
        }
        if (!o.acrossMembers) n *= N;  // one per member, or one over the group's members
        c.ops += n;
        c.opKinds[kind] += n;
    }
    return c;
}

std::string storedOnce(const Replication& r, std::int32_t membersStoredOnce) {
    std::string s;
    if (membersStoredOnce > 1) s = "one member of each group in the file, written out: ";
    if (r.members > 1 && r.memberAxis == Axis::CP)
        s += "cp member 0 of " + std::to_string(r.members) + (r.degree > 1 ? ", one replica of " + std::to_string(r.degree) : std::string());
    else if (r.members > 1)
        s += "one member of each group of " + std::to_string(r.members) + " replicas of " + std::to_string(r.degree * r.members) +
             (r.degree > 1 ? " (" + std::to_string(r.degree) + " groups)" : std::string());
    else if (r.listedDp > 1)
        s += "one group of " + std::to_string(r.listedDp) + " replicas of " + std::to_string(r.degree * r.listedDp) +
            (r.degree > 1 ? " (" + std::to_string(r.degree) + " groups)" : std::string());
    else if (r.degree > 1)
        s += "one replica of " + std::to_string(r.degree);
    if (r.microbatches > 1) s += (s.empty() ? "" : ", ") + std::string("microbatch 0 of ") + std::to_string(r.microbatches);
    return s;
}

namespace {

/// The lane argument along one axis: the replicas and their microbatches (`members` false), or the
/// members of an expert-parallel group stored once (`members` true: member j's tensors are member
/// 0's shifted along each record's member split; the same argument, with N lanes).
bool laneLocal(const Plan& plan, const Stage& stage, bool members, std::string* why, std::unordered_map<TensorId, LaneSplit>* splits) {
    auto no = [&](std::string reason) {
        if (why) *why = std::move(reason);
        return false;
    };
    const auto& L = plan.logical;
    const auto& P = plan.parallel;
    for (auto op : stage.parallelOps) {
        if (members) {
            if (P.ops[op].acrossMembers) return no("collective across the group's members " + plan.opName(P, op));
            if (P.ops[op].indexFromMember) return no("op " + plan.opName(P, op) + " takes its index from the member");
            continue;
        }
        if (P.ops[op].acrossReplicas) return no("collective across replicas " + plan.opName(P, op));
        if (P.ops[op].acrossMicrobatches) return no("op " + plan.opName(P, op) + " adds up the microbatches");
        if (P.ops[op].indexFromReplica) return no("op " + plan.opName(P, op) + " takes its index from the replica");
    }
    // Which dim of each logical tensor carries the replica split (-1: the same on every replica),
    // and over how many lanes it is split (a record of per-replica tensors repeats `degree` times,
    // one of per-microbatch tensors `degree * microbatches` times): lane k of a stage reads lane k
    // of its inputs only if they are split alike.
    struct Lane {
        int dim = -1;
        std::int32_t count = 1;
        /// The sum over the lanes of a per-lane value (a gradient summed over the batch): lane 0's
        /// part is what the stored lane's rows contribute.
        bool partial = false;
        bool operator==(const Lane&) const = default;
    };
    auto laneOf = [&](const LineageRecord& rec) {
        if (members) return rec.members == ReplicaMode::Split ? Lane{rec.memberDim, plan.replication.members} : Lane{};
        if (rec.replicas != ReplicaMode::Split) return Lane{};
        std::int32_t mb = -1;
        for (const auto& s : rec.slices)
            for (const auto& c : s.copies)
                for (const auto& t : c) mb = std::max(mb, P.tensors[t.tensor].microbatch);
        return Lane{rec.splitDim, plan.replication.instances(mb)};
    };
    std::unordered_map<TensorId, Lane> lane;
    for (auto r : stage.inputs) {
        const auto& rec = plan.lineage[r];
        if ((members ? rec.members : rec.replicas) == ReplicaMode::Sum)
            return no("it reads lineage record " + std::to_string(r) + ", whose " + (members ? "members'" : "replicas'") + " terms add up");
        const Lane d = laneOf(rec);
        auto [it, fresh] = lane.emplace(rec.logical, d);
        if (!fresh && !(it->second == d)) return no("records of " + plan.tensorName(L, rec.logical) + " disagree on its split");
    }
    // A tensor the stage reads through a record may also be computed by its logical ops (the
    // checker then defines the record's parallel tensors from the computed value). The lane
    // the ops give it must be the one its record states: a computed partial or another split
    // under a `copies` or `split_dim` record would make replica 0's check assume what the
    // record does not say.
    const std::unordered_map<TensorId, Lane> recorded = lane;
    auto setLane = [&](TensorId t, const Lane& l) {
        if (auto it = recorded.find(t); it != recorded.end() && !(it->second == l)) return false;
        lane[t] = l;
        return true;
    };
    auto setLanes = [&](const auto& ts, const Lane& l) {
        for (auto t : ts)
            if (!setLane(t, l)) return false;
        return true;
    };
    const auto& reg = OpRegistry::instance();
    for (auto op : stage.logicalOps) {
        const auto ins = L.inputs(op);
        const auto outs = L.outputs(op);
        std::vector<int> inLane(ins.size(), -1);
        bool any = false;
        std::int32_t count = 0;
        std::size_t partials = 0;
        const std::string kind(reg.spec(L.ops[op].kind).name);
        for (std::size_t i = 0; i < ins.size(); ++i) {
            auto it = lane.find(ins[i]);
            if (it != lane.end() && it->second.partial) {
                if (count && count != it->second.count) return no("logical op " + plan.opName(L, op) + " reads inputs split over different numbers of lanes");
                count = it->second.count;
                ++partials;
                continue;
            }
            inLane[i] = it == lane.end() ? -1 : it->second.dim;
            if (inLane[i] < 0) continue;
            if (count && count != it->second.count) return no("logical op " + plan.opName(L, op) + " reads inputs split over different numbers of lanes");
            count = it->second.count;
            any = true;
        }
        if (partials > 0) {
            // A sum over the lanes stays one only through maps linear in it: each lane's part is
            // mapped alike and the parts still add up. Added only to other such sums; multiplied
            // or divided only by what is the same on every replica.
            static const std::set<std::string, std::less<>> unary = {"identity", "neg", "reshape", "permute", "transpose", "mul_scalar",
                                                                      "sum", "sum_to", "expand", "slice"};
            const bool linear = !any && ((unary.count(kind) && ins.size() == 1) || ((kind == "add" || kind == "sub") && partials == ins.size()) ||
                                         ((kind == "mul" || kind == "matmul") && partials == 1) ||
                                         (kind == "div" && ins.size() == 2 && partials == 1 && lane.count(ins[0]) && lane.at(ins[0]).partial));
            if (!linear) return no("logical op " + plan.opName(L, op) + " is not linear in the sum over the replicas it reads");
            if (!setLanes(outs, Lane{-1, count, true})) return no("logical op " + plan.opName(L, op) + " computes a tensor the stage also reads through a record of another split");
            continue;
        }
        if (!any) {
            if (!setLanes(outs, Lane{})) return no("logical op " + plan.opName(L, op) + " computes a tensor the stage also reads through a record of another split");
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
        // A sum over the split dim (a weight's gradient summed over the batch) is the sum of
        // every lane's sum over its own part: a partial sum over the lanes. Only plain sums and
        // contractions; a mean, a norm or a max over the batch is not a sum of the lanes' own.
        static const std::set<std::string, std::less<>> sums = {"sum", "sum_to", "matmul"};
        bool dropped = false, kept = false;
        for (std::size_t j = 0; j < outs.size(); ++j) {
            if (j >= dims.out.size()) return no(where + " has no dims for an output");
            const bool has = std::find(dims.out[j].begin(), dims.out[j].end(), label) != dims.out[j].end();
            (has ? kept : dropped) = true;
        }
        if (dropped) {
            if (kept || !sums.count(kind)) return no(where + " drops the split dim");
            if (!setLanes(outs, Lane{-1, count, true})) return no("logical op " + plan.opName(L, op) + " computes a tensor the stage also reads through a record of another split");
            continue;
        }
        for (std::size_t j = 0; j < outs.size(); ++j) {
            auto at = std::find(dims.out[j].begin(), dims.out[j].end(), label);
            if (!setLane(outs[j], Lane{static_cast<int>(at - dims.out[j].begin()), count})) return no("logical op " + plan.opName(L, op) + " computes a tensor the stage also reads through a record of another split");
        }
    }
    const auto& out = plan.lineage[stage.output];
    auto it = lane.find(out.logical);
    const Lane have = it == lane.end() ? Lane{} : it->second;
    // A sum over the members (the experts' norm before its all-reduce) is written out.
    if (members && out.members == ReplicaMode::Sum) return no("its members' terms add up");
    if (!members && out.replicas == ReplicaMode::Sum) {
        // Proven on the stored lane's part (the cut, mandatory here): lane 0's sum is replica
        // 0's terms, each lane's likewise, and the lanes' sums add up to the whole.
        std::int32_t mb = -1;
        for (const auto& s : out.slices)
            for (const auto& c : s.copies)
                for (const auto& t : c) mb = std::max(mb, P.tensors[t.tensor].microbatch);
        if (!have.partial || have.count != plan.replication.instances(mb)) return no("its replicas' terms add up");
        // Such a stage has no whole-tensor check to fall back on: the cut must be possible.
        for (const auto& [t, l] : lane) {
            if (l.partial || l.dim < 0 || l.count <= 1) continue;
            const auto& shape = plan.shape(L, t);
            const auto d = static_cast<std::size_t>(l.dim);
            if (d >= shape.size() || shape[d] % l.count != 0) return no("the batch of " + plan.tensorName(L, t) + " does not split evenly over its lanes");
        }
        for (auto r : stage.inputs) {
            const auto& rec = plan.lineage[r];
            if (rec.replicas != ReplicaMode::Split) continue;
            const auto d = static_cast<std::size_t>(rec.splitDim);
            const auto part = plan.shape(L, rec.logical)[d] / laneOf(rec).count;
            for (const auto& sl : rec.slices)
                if (sl.box.hi[d] > part) return no("lineage record " + std::to_string(r) + " places replica 0's part outside the first lane");
        }
        if (splits) {
            splits->clear();
            for (const auto& [t, l] : lane)
                if (!l.partial && l.dim >= 0 && l.count > 1) splits->emplace(t, LaneSplit{l.dim, l.count});
        }
        return true;
    }
    if (have.partial) return no("the split of " + plan.tensorName(L, out.logical) + " does not follow from its inputs'");
    const Lane want = laneOf(out);
    if (!(have == want)) return no("the split of " + plan.tensorName(L, out.logical) + " does not follow from its inputs'");
    if (splits) {
        splits->clear();
        for (const auto& [t, l] : lane)
            if (!l.partial && l.dim >= 0 && l.count > 1) splits->emplace(t, LaneSplit{l.dim, l.count});
    }
    return true;
}

}  // namespace

bool provenAlongReplicas(const Plan& plan, const Stage& stage, std::string* why) { return laneLocal(plan, stage, false, why, nullptr); }

bool provenByReplicaZero(const Plan& plan, const Stage& stage, std::string* why, std::unordered_map<TensorId, LaneSplit>* splits) {
    if (plan.replication.members < 2) return laneLocal(plan, stage, false, why, splits);
    // Stored as one member of each group: proven for every lane and every member when both
    // arguments hold (lane (g, m) member j's obligation is the stored one shifted along both).
    std::unordered_map<TensorId, LaneSplit> byReplica, byMember;
    if (!laneLocal(plan, stage, false, why, splits ? &byReplica : nullptr)) return false;
    if (!laneLocal(plan, stage, true, why, splits ? &byMember : nullptr)) return false;
    if (splits) {
        // The stored member's part: along a dim both split, the members' parts lie inside lane
        // 0's (plan-format.md §7.3), so the first of lanes x members; along a dim only the members
        // split, the first of N; both, when the two split different dims.
        *splits = byReplica;
        for (const auto& [t, m] : byMember) {
            auto it = splits->find(t);
            if (it == splits->end()) splits->emplace(t, m);
            else if (it->second.dim != m.dim) it->second.dim2 = m.dim, it->second.lanes2 = m.lanes;
            else if (static_cast<std::int64_t>(it->second.lanes) * m.lanes <= std::numeric_limits<std::int32_t>::max())
                it->second.lanes *= m.lanes;
            else
                it->second.lanes = 0;  // no cut (cutToStoredLane refuses lanes < 1): checked uncut

        }
    }
    return true;
}

Plan expandReplicas(const Plan& plan) {
    if (!plan.replication.active()) return plan;
    return writeOutReplicas(plan, nullptr, nullptr, nullptr);
}

namespace {

/// A record's slices repeated over n instances as `mode` says: Split shifts instance i's slices by
/// i * step along dim, Sum adds every instance's terms into each copy, Copies makes each instance's
/// a further copy. `instance(c, i)` is copy c with its tensors renamed to instance i's.
template <class Instance>
std::vector<LineageSlice> repeatSlices(const std::vector<LineageSlice>& slices, ReplicaMode mode, std::int32_t dim, std::int64_t step, std::int32_t n,
                                       const Instance& instance) {
    std::vector<LineageSlice> out;
    if (mode == ReplicaMode::Split) {
        const auto d = static_cast<std::size_t>(dim);
        for (std::int32_t i = 0; i < n; ++i)
            for (const auto& s : slices) {
                LineageSlice ns;
                ns.box = s.box;
                ns.box.lo[d] += i * step;
                ns.box.hi[d] += i * step;
                for (const auto& c : s.copies) ns.copies.push_back(instance(c, i));
                out.push_back(std::move(ns));
            }
        return out;
    }
    for (const auto& s : slices) {
        LineageSlice ns;
        ns.box = s.box;
        for (const auto& c : s.copies) {
            if (mode == ReplicaMode::Sum) {
                std::vector<LineageTerm> sum;
                for (std::int32_t i = 0; i < n; ++i)
                    for (auto& t : instance(c, i)) sum.push_back(t);
                ns.copies.push_back(std::move(sum));
            } else {
                for (std::int32_t i = 0; i < n; ++i) ns.copies.push_back(instance(c, i));
            }
        }
        out.push_back(std::move(ns));
    }
    return out;
}

}  // namespace

Plan writeOutMembers(const Plan& plan, const std::vector<bool>* opMask, const std::vector<bool>* recordMask, std::vector<std::uint32_t>* origin) {
    Plan out = plan;  // logical graph, pools, mesh and ranks are shared as they are
    const auto rep = plan.replication;
    out.lineage.clear();
    if (origin) origin->clear();
    if (rep.members < 2) {
        for (std::uint32_t r = 0; r < plan.lineage.size(); ++r)
            if (!recordMask || (*recordMask)[r]) {
                out.lineage.push_back(plan.lineage[r]);
                if (origin) origin->push_back(r);
            }
        return out;
    }
    // The group listed (plan-format.md §7): its N members, each a data-parallel rank; or, along
    // cp, every replica's context-parallel group whole.
    const bool cpAxis = rep.memberAxis == Axis::CP;
    if (!cpAxis) out.replication.listedDp = rep.members;
    out.replication.members = 1;
    out.replication.memberRanks = 0;
    out.replication.memberAxis = Axis::DP;
    const auto& T = plan.parallel;
    auto& P = out.parallel;
    P = Graph{};
    const std::int32_t N = rep.members, Rm = rep.memberRanks;
    const auto nt = static_cast<std::uint64_t>(T.tensors.size());
    auto name = [&](NameId stored, std::int32_t j) { return memberName(plan.names.str(stored), j, cpAxis); };
    std::unordered_map<std::uint64_t, TensorId> ids;
    auto id = [&](TensorId t, std::int32_t j) -> TensorId {
        auto [it, fresh] = ids.emplace(static_cast<std::uint64_t>(j) * nt + t, static_cast<TensorId>(P.tensors.size()));
        if (fresh) {
            auto info = T.tensors[t];
            info.name = out.names.intern(name(info.name, j));
            if (info.rank >= 0) info.rank += j * Rm;
            info.producer = kNone;
            P.tensorByName.emplace(info.name, it->second);
            P.tensors.push_back(info);
        }
        return it->second;
    };
    if (!opMask)
        for (TensorId t = 0; t < T.tensors.size(); ++t)
            for (std::int32_t j = 0; j < N; ++j) id(t, j);
    auto addOp = [&](OpInfo info, const std::string& opName, const std::vector<TensorId>& ins, const std::vector<TensorId>& outs) {
        info.firstInput = static_cast<std::uint32_t>(P.operands.size());
        info.numInputs = static_cast<std::uint32_t>(ins.size());
        P.operands.insert(P.operands.end(), ins.begin(), ins.end());
        info.firstOutput = static_cast<std::uint32_t>(P.operands.size());
        info.numOutputs = static_cast<std::uint32_t>(outs.size());
        P.operands.insert(P.operands.end(), outs.begin(), outs.end());
        const auto opId = static_cast<OpId>(P.ops.size());
        for (auto t : outs) P.tensors[t].producer = opId;
        info.name = out.names.intern(opName);
        info.acrossMembers = info.indexFromMember = false;
        P.opByName.emplace(info.name, opId);
        P.ops.push_back(info);
    };
    for (OpId op = 0; op < T.ops.size(); ++op) {
        if (opMask && !(*opMask)[op]) continue;
        const auto& o = T.ops[op];
        const auto ins = T.inputs(op);
        const auto outs = T.outputs(op);
        if (o.acrossMembers) {
            // One collective over the group's members: member 0's part, then member 1's, ...
            std::vector<std::int32_t> group;
            std::vector<TensorId> i2, o2;
            for (std::int32_t j = 0; j < N; ++j) {
                for (auto r : plan.groups[o.group]) group.push_back(r + j * Rm);
                for (auto t : ins) i2.push_back(id(t, j));
                for (auto t : outs) o2.push_back(id(t, j));
            }
            auto info = o;
            info.group = out.internGroup(group);
            addOp(info, plan.names.str(o.name), i2, o2);
            continue;
        }
        for (std::int32_t j = 0; j < N; ++j) {
            auto info = o;
            if (o.indexFromMember) {
                // Member j's part: index + j * parts / N, or (indexed by replica too, parts dp)
                // the listed rank's position j, which the group's replicas shift (§7, "listed").
                auto a = plan.attrs[o.attrs];
                const auto parts = a.value("parts", std::int64_t{0});
                a["index"] = a.value("index", std::int64_t{0}) + static_cast<std::int64_t>(j) * (o.indexFromReplica ? parts / (rep.degree * N) : parts / N);
                info.attrs = out.internAttrs(a);
            }
            if (info.rank >= 0) info.rank += j * Rm;
            if (info.group != kNone && j > 0) {
                auto g = plan.groups[o.group];
                for (auto& r : g) r += j * Rm;
                info.group = out.internGroup(g);
            }
            std::vector<TensorId> i2, o2;
            for (auto t : ins) i2.push_back(id(t, j));
            for (auto t : outs) o2.push_back(id(t, j));
            addOp(info, name(o.name, j), i2, o2);
        }
    }
    for (std::uint32_t r = 0; r < plan.lineage.size(); ++r) {
        if (recordMask && !(*recordMask)[r]) continue;
        const auto& rec = plan.lineage[r];
        auto mapCopy = [&](const std::vector<LineageTerm>& c, std::int32_t j) {
            auto m = c;
            for (auto& t : m) t.tensor = id(t.tensor, j);
            return m;
        };
        LineageRecord nr = rec;
        nr.members = ReplicaMode::None;
        nr.memberDim = -1;
        nr.memberStep = 0;
        nr.slices = repeatSlices(rec.slices, rec.members, rec.memberDim, rec.memberStep, N, mapCopy);
        out.lineage.push_back(std::move(nr));
        if (origin) origin->push_back(r);
    }
    P.finalize();
    return out;
}

Plan writeOutReplicas(const Plan& plan, const std::vector<bool>* opMask, const std::vector<bool>* recordMask,
                      std::vector<std::uint32_t>* origin) {
    if (plan.replication.members > 1) {
        // The members first (into the group listed), then the groups and lanes.
        std::vector<std::uint32_t> first, second;
        const Plan listed = writeOutMembers(plan, opMask, recordMask, &first);
        Plan out = writeOutReplicas(listed, nullptr, nullptr, &second);
        if (origin) {
            origin->clear();
            for (auto r : second) origin->push_back(first[r]);
        }
        return out;
    }
    Plan out = plan;  // logical graph, pools, mesh and ranks are shared as they are
    const auto rep = plan.replication;
    out.replication = Replication{};
    out.lineage.clear();
    if (origin) origin->clear();
    const auto& T = plan.parallel;
    auto& P = out.parallel;
    P = Graph{};
    const std::int32_t S = rep.ranksPerReplica, M = rep.microbatches;
    const auto nt = static_cast<std::uint64_t>(T.tensors.size());
    // Instance i of an op or tensor with microbatch field mb: replica i / per, microbatch i % per.
    auto perReplica = [&](std::int32_t mb) { return M > 1 && mb >= 0 ? M : 1; };
    auto suffix = [&](std::int32_t mb, std::int32_t i) {
        const std::int32_t per = perReplica(mb);
        return instance::writtenOutSuffix(per > 1 ? i % per : 0, i / per);
    };
    auto instanceMb = [&](std::int32_t mb, std::int32_t i) { return perReplica(mb) > 1 ? i % perReplica(mb) : mb; };
    auto instanceRank = [&](std::int32_t rank, std::int32_t mb, std::int32_t i) { return rank >= 0 ? rank + (i / perReplica(mb)) * S : rank; };

    std::unordered_map<std::uint64_t, TensorId> ids;
    auto id = [&](TensorId t, std::int32_t i) -> TensorId {
        auto [it, fresh] = ids.emplace(static_cast<std::uint64_t>(i) * nt + t, static_cast<TensorId>(P.tensors.size()));
        if (fresh) {
            auto info = T.tensors[t];
            info.name = out.names.intern(plan.names.str(info.name) + suffix(info.microbatch, i));
            info.rank = instanceRank(info.rank, info.microbatch, i);
            info.microbatch = instanceMb(info.microbatch, i);
            info.producer = kNone;
            P.tensorByName.emplace(info.name, it->second);
            P.tensors.push_back(info);
        }
        return it->second;
    };
    if (!opMask) {
        std::size_t total = 0;
        for (const auto& t : T.tensors) total += static_cast<std::size_t>(rep.instances(t.microbatch));
        P.tensors.reserve(total);
        ids.reserve(total);
        P.tensorByName.reserve(total);
        out.names.reserve(plan.names.size() + total * 2);
        for (TensorId t = 0; t < T.tensors.size(); ++t)
            for (std::int32_t i = 0; i < rep.instances(T.tensors[t].microbatch); ++i) id(t, i);
    }
    auto addOp = [&](OpInfo info, const std::string& name, const std::vector<TensorId>& ins, const std::vector<TensorId>& outs) {
        info.firstInput = static_cast<std::uint32_t>(P.operands.size());
        info.numInputs = static_cast<std::uint32_t>(ins.size());
        P.operands.insert(P.operands.end(), ins.begin(), ins.end());
        info.firstOutput = static_cast<std::uint32_t>(P.operands.size());
        info.numOutputs = static_cast<std::uint32_t>(outs.size());
        P.operands.insert(P.operands.end(), outs.begin(), outs.end());
        const auto opId = static_cast<OpId>(P.ops.size());
        for (auto t : outs) P.tensors[t].producer = opId;
        info.name = out.names.intern(name);
        info.acrossReplicas = info.indexFromReplica = info.acrossMicrobatches = false;
        P.opByName.emplace(info.name, opId);
        P.ops.push_back(info);
    };
    const auto& reg = OpRegistry::instance();
    // Ops in stored order, a topological order of every instance.
    for (OpId op = 0; op < T.ops.size(); ++op) {
        if (opMask && !(*opMask)[op]) continue;
        const auto& o = T.ops[op];
        const auto ins = T.inputs(op);
        const auto outs = T.outputs(op);
        const std::string& base = plan.names.str(o.name);
        if (o.acrossReplicas) {
            // One collective over every replica: group, inputs and outputs replica by replica.
            std::vector<std::int32_t> group;
            std::vector<TensorId> i2, o2;
            for (std::int32_t k = 0; k < rep.degree; ++k) {
                for (auto r : plan.groups[o.group]) group.push_back(r + k * S);
                for (auto t : ins) i2.push_back(id(t, k));
                for (auto t : outs) o2.push_back(id(t, k));
            }
            auto info = o;
            info.group = out.internGroup(group);
            addOp(info, base, i2, o2);
            continue;
        }
        if (o.acrossMicrobatches) {
            // Per replica: in(m=0) + in(m=1) + ... as a chain of adds ending in the output.
            for (std::int32_t k = 0; k < rep.degree; ++k) {
                const std::string name = base + suffix(-1, k);
                auto info = o;
                info.rank = instanceRank(o.rank, -1, k);
                if (M == 1) {
                    addOp(info, name, {id(ins[0], k)}, {id(outs[0], k)});
                    continue;
                }
                info.kind = *reg.find("add");
                info.attrs = kNone;
                TensorId acc = id(ins[0], k * M);
                for (std::int32_t m = 1; m < M; ++m) {
                    TensorId next;
                    if (m + 1 == M) {
                        next = id(outs[0], k);
                    } else {
                        auto t = P.tensors[id(outs[0], k)];
                        t.name = out.names.intern(plan.names.str(T.tensors[outs[0]].name) + "~acc" + std::to_string(m) + suffix(-1, k));
                        t.producer = kNone;
                        next = static_cast<TensorId>(P.tensors.size());
                        P.tensorByName.emplace(t.name, next);
                        P.tensors.push_back(t);
                    }
                    addOp(info, m + 1 == M ? name : base + "~acc" + std::to_string(m) + suffix(-1, k), {acc, id(ins[0], k * M + m)}, {next});
                    acc = next;
                }
            }
            continue;
        }
        for (std::int32_t i = 0; i < rep.instances(o.microbatch); ++i) {
            auto info = o;
            const std::int32_t k = i / perReplica(o.microbatch);
            if (o.indexFromReplica) {
                // Group k takes part k; with several dp ranks listed, each listed rank's part shifts
                // by the listed ranks per group (plan-format.md §7).
                auto a = plan.attrs[o.attrs];
                const auto parts = a.value("parts", std::int64_t{0});
                a["index"] = a.value("index", std::int64_t{0}) + static_cast<std::int64_t>(k) * (parts / rep.degree);
                info.attrs = out.internAttrs(a);
            }
            info.rank = instanceRank(o.rank, o.microbatch, i);
            info.microbatch = instanceMb(o.microbatch, i);
            if (info.group != kNone && k > 0) {
                auto g = plan.groups[o.group];
                for (auto& r : g) r += k * S;
                info.group = out.internGroup(g);
            }
            // An input the replica shares (no microbatch) is the replica's instance.
            std::vector<TensorId> i2, o2;
            for (auto t : ins) i2.push_back(id(t, perReplica(T.tensors[t].microbatch) > 1 ? i : k));
            for (auto t : outs) o2.push_back(id(t, perReplica(T.tensors[t].microbatch) > 1 ? i : k));
            addOp(info, base + suffix(o.microbatch, i), i2, o2);
        }
    }
    // Lineage: each record repeats as its mode says, over its tensors' instances.
    for (std::uint32_t r = 0; r < plan.lineage.size(); ++r) {
        if (recordMask && !(*recordMask)[r]) continue;
        const auto& rec = plan.lineage[r];
        std::int32_t n = rep.degree;
        for (const auto& s : rec.slices)
            for (const auto& c : s.copies)
                for (const auto& t : c) n = rep.instances(T.tensors[t.tensor].microbatch);
        auto mapCopy = [&](const std::vector<LineageTerm>& c, std::int32_t i) {
            auto m = c;
            for (auto& t : m) t.tensor = id(t.tensor, i);
            return m;
        };
        LineageRecord nr;
        nr.logical = rec.logical;
        const auto step = rec.replicas == ReplicaMode::Split ? plan.shape(plan.logical, rec.logical)[static_cast<std::size_t>(rec.splitDim)] / n : 0;
        nr.slices = repeatSlices(rec.slices, rec.replicas, rec.splitDim, step, n, mapCopy);
        out.lineage.push_back(std::move(nr));
        if (origin) origin->push_back(r);
    }
    P.finalize();
    return out;
}

ExpandedStages expandStages(const Plan& plan, const StagePlan& sp, const std::vector<std::uint32_t>& stageIds, bool membersOnly) {
    std::vector<bool> ops(plan.parallel.ops.size(), false), records(plan.lineage.size(), false), proven(plan.lineage.size(), false);
    for (auto s : stageIds) {
        const auto& st = sp.stages[s];
        for (auto op : st.parallelOps) ops[op] = true;
        records[st.output] = proven[st.output] = true;
        for (auto r : st.inputs) records[r] = true;
    }
    ExpandedStages x;
    x.plan = membersOnly ? writeOutMembers(plan, &ops, &records, &x.origin) : writeOutReplicas(plan, &ops, &records, &x.origin);
    for (auto r : x.origin) x.assumed.push_back(!proven[r]);
    return x;
}

std::uint64_t writtenOutOps(const Plan& plan, const Stage& stage, bool membersOnly) {
    const auto& rep = plan.replication;
    std::uint64_t n = 0;
    for (auto op : stage.parallelOps) {
        const auto& o = plan.parallel.ops[op];
        const std::uint64_t members = o.acrossMembers ? 1 : static_cast<std::uint64_t>(rep.members);
        if (membersOnly) n += members;
        else if (o.acrossReplicas) n += members;
        else if (o.acrossMicrobatches) n += members * static_cast<std::uint64_t>(rep.degree) * static_cast<std::uint64_t>(std::max(1, rep.microbatches - 1));
        else n += members * static_cast<std::uint64_t>(rep.instances(o.microbatch));
    }
    return n;
}


}  // namespace tv
