// Plan JSON out: the canonical form of a plan (every graph, the mesh, the lineage), with
// version 3 repeats found when the plan was stored with them (plan_repeats.cpp).
#include "io/plan_json.hpp"
#include "io/plan_repeats.hpp"

#include "model/text.hpp"
#include "ops/registry.hpp"

namespace tv {

using json = nlohmann::json;

namespace {

json writeGraph(const Plan& p, const Graph& g, bool parallel) {
    json tensors = json::array();
    for (TensorId t = 0; t < g.tensors.size(); ++t) {
        const auto& ti = g.tensors[t];
        json j = {{"id", p.names.str(ti.name)}, {"shape", p.shapes[ti.shape]}, {"role", toString(ti.role)}};
        if (ti.dtype != DType::Float) j["dtype"] = toString(ti.dtype);
        if (parallel) j["rank"] = ti.rank;
        if (ti.microbatch >= 0) j["microbatch"] = ti.microbatch;
        tensors.push_back(std::move(j));
    }
    const auto& reg = OpRegistry::instance();
    json ops = json::array();
    for (OpId o = 0; o < g.ops.size(); ++o) {
        const auto& oi = g.ops[o];
        const auto& spec = reg.spec(oi.kind);
        json j = {{"id", p.names.str(oi.name)}, {"op", spec.name}};
        if (oi.rank >= 0) j["rank"] = oi.rank;
        if (oi.group != kNone) j["group"] = p.groups[oi.group];
        if (oi.microbatch >= 0) j["microbatch"] = oi.microbatch;
        auto defPhase = spec.collective ? Phase::Communication : Phase::Forward;
        if (oi.phase != defPhase) j["phase"] = toString(oi.phase);
        json ins = json::array(), outs = json::array();
        for (auto t : g.inputs(o)) ins.push_back(p.names.str(g.tensors[t].name));
        for (auto t : g.outputs(o)) outs.push_back(p.names.str(g.tensors[t].name));
        j["inputs"] = std::move(ins);
        j["outputs"] = std::move(outs);
        const auto& a = p.opAttrs(g, o);
        if (!a.empty()) j["attrs"] = a;
        if (oi.acrossReplicas) j["across_replicas"] = true;
        if (oi.indexFromReplica) j["index_from_replica"] = true;
        if (oi.acrossMicrobatches) j["across_microbatches"] = true;
        if (oi.acrossMembers) j["across_members"] = true;
        if (oi.indexFromMember) j["index_from_member"] = true;
        if (const auto* s = p.opSource(g, o)) {
            json src = {{"file", s->file}, {"line", s->line}};
            if (!s->function.empty()) src["function"] = s->function;
            if (!s->code.empty()) src["code"] = s->code;
            j["source"] = std::move(src);
        }
        ops.push_back(std::move(j));
    }
    return json{{"tensors", std::move(tensors)}, {"ops", std::move(ops)}};
}

}  // namespace

json writePlanJson(const Plan& p) { return writePlanJson(p, p.storedWithRepeats); }

json writePlanJson(const Plan& p, bool findRepeats) {
    json doc = json::object();
    doc["format"] = "trainverify-plan";
    doc["version"] = p.replication.active() ? 2 : 1;  // 3 once the repeats are found, below
    if (!p.name.empty()) doc["name"] = p.name;
    if (!p.description.empty()) doc["description"] = p.description;
    if (!p.expect.is_null()) doc["expect"] = p.expect;
    doc["logical"] = writeGraph(p, p.logical, false);
    auto par = writeGraph(p, p.parallel, true);
    json mesh = json::object();
    for (auto a : kAxes)
        if (p.mesh.at(a) != 1) mesh[std::string(toString(a))] = p.mesh.at(a);
    par["mesh"] = mesh;
    par["microbatches"] = p.microbatches;
    json ranks = json::array();
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        json j = {{"rank", r}};
        for (auto a : kAxes)
            if (p.mesh.at(a) != 1 || a == Axis::DP || a == Axis::TP || a == Axis::PP) j[std::string(toString(a))] = p.ranks[r].at(a);
        ranks.push_back(std::move(j));
    }
    par["ranks"] = std::move(ranks);
    if (p.replication.active()) {
        par["replicas"] = json{{"axis", "dp"}};
        if (p.replication.microbatches > 1) par["replicas"]["microbatches"] = true;
        if (p.replication.listedDp > 1) par["replicas"]["listed"] = p.replication.listedDp;
        if (p.replication.members > 1) par["replicas"]["members"] = p.replication.members;
        if (p.replication.members > 1 && p.replication.memberAxis == Axis::CP) par["replicas"]["member_axis"] = "cp";
    }
    doc["parallel"] = std::move(par);
    json lin = json::array();
    for (const auto& rec : p.lineage) {
        json slices = json::array();
        for (const auto& s : rec.slices) {
            json box = json::array();
            for (std::size_t d = 0; d < s.box.lo.size(); ++d) box.push_back({s.box.lo[d], s.box.hi[d]});
            json copies = json::array();
            for (const auto& c : s.copies) {
                json terms = json::array();
                for (const auto& t : c) {
                    const auto& n = p.tensorName(p.parallel, t.tensor);
                    if (t.coeff.isOne()) terms.push_back(n);
                    else terms.push_back({{"tensor", n}, {"coeff", t.coeff.toString()}});
                }
                copies.push_back(std::move(terms));
            }
            slices.push_back({{"box", std::move(box)}, {"copies", std::move(copies)}});
        }
        json r = {{"logical", p.tensorName(p.logical, rec.logical)}, {"slices", std::move(slices)}};
        if (rec.replicas == ReplicaMode::Copies) r["replicas"] = "copies";
        if (rec.replicas == ReplicaMode::Sum) r["replicas"] = "sum";
        if (rec.replicas == ReplicaMode::Split) r["replicas"] = json{{"split_dim", rec.splitDim}};
        if (rec.members == ReplicaMode::Copies) r["members"] = "copies";
        if (rec.members == ReplicaMode::Sum) r["members"] = "sum";
        if (rec.members == ReplicaMode::Split) r["members"] = json{{"split_dim", rec.memberDim}};
        lin.push_back(std::move(r));
    }
    doc["lineage"] = std::move(lin);
    if (findRepeats) return compressRepeats(std::move(doc));
    return doc;
}

std::string writePlanText(const Plan& p) { return writePlanJson(p).dump(1) + "\n"; }

}  // namespace tv
