// The plan editor (plan_editor.hpp): fresh names, added and removed ops, rewired readers, the
// finished document, and collectiveToIdentities.
#include "bugs/plan_editor.hpp"

namespace tv::bugs::detail {

std::string Editor::fresh(const std::string& base) {
    std::string s = base;
    for (int i = 2; v.p.names.find(s) != kNone || taken_.count(s); ++i) s = base + "." + std::to_string(i);
    taken_.insert(s);
    return s;
}

void Editor::addOp(json j) {
    seeds.push_back(j["id"].get<std::string>());
    doc["parallel"]["ops"].push_back(std::move(j));
}

json Editor::tensorLike(TensorId like, const std::string& id) {
    json j = tensor(like);
    j["id"] = id;
    return j;
}

void Editor::removeOp(OpId o) {
    removedOps_.insert(o);
    for (auto t : v.g.outputs(o)) {
        removedOutputs.push_back(v.tensorName(t));
        for (auto c : v.g.consumers(t)) seeds.push_back(v.name(c));
    }
}

void Editor::rewire(TensorId from, const std::string& to, OpId except) {
    const auto& fromName = v.tensorName(from);
    std::set<OpId> done;
    for (auto c : v.g.consumers(from)) {
        if (c == except || !done.insert(c).second) continue;
        for (auto& in : op(c)["inputs"])
            if (in == fromName) in = to;
        seeds.push_back(v.name(c));
    }
}

json Editor::finish() {
    auto& ops = doc["parallel"]["ops"];
    for (auto it = removedOps_.rbegin(); it != removedOps_.rend(); ++it) ops.erase(*it);
    auto& tensors = doc["parallel"]["tensors"];
    for (auto it = removedTensors_.rbegin(); it != removedTensors_.rend(); ++it) tensors.erase(*it);
    return std::move(doc);
}

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

void scaleCollectiveOutputs(Editor& e, OpId o, const std::string& factor, const std::string& what) {
    const auto& v = e.v;
    const auto outs = v.g.outputs(o);
    const auto& grp = v.group(o);
    for (std::size_t k = 0; k < outs.size(); ++k) {
        const auto t = outs[k];
        const auto id = e.fresh(v.tensorName(t) + "." + what);
        e.addTensor(e.tensorLike(t, id));
        e.rewire(t, id);
        json j = {{"id", e.fresh(v.name(o) + "." + what + (k ? ".member" + std::to_string(k) : ""))},
                  {"op", "mul_scalar"},
                  {"rank", grp[k]},
                  {"phase", "backward"},
                  {"inputs", json::array({v.tensorName(t)})},
                  {"outputs", json::array({id})},
                  {"attrs", {{"value", factor}}}};
        e.addOp(std::move(j));
    }
}

std::int64_t membersWrittenOut(const View& v, OpId o) {
    const auto n = static_cast<std::int64_t>(v.group(o).size());
    return v.g.ops[o].acrossReplicas ? n * v.p.replication.degree : n;
}

}  // namespace tv::bugs::detail
