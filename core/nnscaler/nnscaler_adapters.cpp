// The adapters of the nnScaler mapping: an adapter's primitives (or a fused primitive, with its
// forward or backward meaning) become local ops (identity, chunk with the runtime's piece) or
// collectives, whose members are matched across ranks and checked to agree before each is
// written once (emitCollectives); a weight reducer becomes an all-reduce over its devices,
// across every data-parallel replica.
#include "nnscaler/import_detail.hpp"

#include <algorithm>

#include "model/instance_names.hpp"
#include "model/text.hpp"

namespace tv::nnscaler::detail {

std::vector<int> Importer::groupOf(const json& kwargs, const std::string& key, const std::string& where) const {
    std::vector<int> gr;
    if (!kwargs.contains(key) || !kwargs[key].is_array()) throw NnScalerError(where + ": the primitive has no \"" + key + "\" list");
    for (const auto& r : kwargs[key]) {
        if (!r.is_number_integer() || r.get<std::int64_t>() < 0 || r.get<std::int64_t>() >= devices)
            throw NnScalerError(where + ": rank " + r.dump() + " in \"" + key + "\" is not a plan device");
        gr.push_back(static_cast<int>(r.get<std::int64_t>()));
    }
    if (gr.empty()) throw NnScalerError(where + ": the primitive's \"" + key + "\" list is empty");
    std::vector<int> sorted = gr;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) throw NnScalerError(where + ": a rank is listed twice in \"" + key + "\"");
    return gr;
}

/// The collective `key` names, with this member's view of it (kind, attributes, group) checked
/// against the first member's. `groupInKey`: the key determines the group (a reducer's is
/// its cell's), so it is neither compared again nor kept in the key: comparing a dp-sized
/// group for each of dp members was quadratic in dp.
Collective& Importer::member(const CollectiveKey& key, const std::string& kind, const json& attrs, const std::vector<int>& group, const std::string& where,
                             bool groupInKey) {
    auto [it, inserted] = collectives.try_emplace(key);
    if (inserted) {
        it->second.kind = kind;
        it->second.attrs = attrs;
        it->second.group = group;
        it->second.where = where;
        result.groupRanksHandled += group.size();
    } else if (it->second.kind != kind || it->second.attrs != attrs || (!groupInKey && (result.groupRanksHandled += group.size(), it->second.group != group))) {
        // Every member must run the same collective, or the runtime's result is not any one of them.
        throw NnScalerError(where + ": its part of the collective is " + kind + " " + attrs.dump() + " over " + json(group).dump() + ", but " +
                            it->second.where + " runs " + it->second.kind + " " + it->second.attrs.dump() + " over " + json(it->second.group).dump());
    }
    return it->second;
}

/// A primitive's keyword arguments must all be ones its semantics here account for, as an
/// operator's must: one the mapping does not know could change what the runtime does (a
/// reduction op, an async flag, a scale), so it is INCONCLUSIVE, not ignored. The keywords are
/// those nnScaler's primitives take (nnscaler/ir/adapter/prim.py): `ranks` of every collective,
/// `dim` / `idim` `odim` of the ones that split or gather, `src` `dst` of a move, and the
/// buffer's `shape` and `dtype` of a move or broadcast (the sub-tensor's own shape and dtype are
/// what is verified; a buffer that disagrees fails at the runtime, it does not compute another
/// result).
void Importer::knownKeywordsOnly(const Primitive& pr, const std::string& where) {
    static const std::map<std::string, std::set<std::string>, std::less<>> known = {
        {"MovePrim", {"src", "dst", "shape", "dtype"}},
        {"BroadcastPrim", {"src", "ranks", "shape", "dtype"}},
        {"ChunkPrim", {"dim", "ranks"}},
        {"AllGatherPrim", {"dim", "ranks"}},
        {"ReduceScatterPrim", {"dim", "ranks"}},
        {"AllReducePrim", {"ranks"}},
        {"IdentityPrim", {"ranks"}},
        {"AllToAllPrim", {"idim", "odim", "ranks"}},
        {"AllReduceIdentityPrim", {"ranks"}},
        {"IdentityAllreducePrim", {"ranks"}},
        {"AllReduceAllReducePrim", {"ranks"}},
        {"AllGatherSplitPrim", {"dim", "ranks"}},
        {"SplitAllGatherPrim", {"dim", "ranks"}},
        {"ReduceScatterAllGatherPrim", {"dim", "ranks"}},
        {"AllGatherReduceScatterPrim", {"dim", "ranks"}},
        {"AllToAllAllToAllPrim", {"idim", "odim", "ranks"}},
    };
    auto it = known.find(pr.kind);
    if (it == known.end()) return;  // no semantics at all: refused where its kind is looked up
    if (!pr.kwargs.is_object()) throw NnScalerError(where + ": " + pr.kind + "'s keyword arguments are not a dict");
    for (auto kw = pr.kwargs.begin(); kw != pr.kwargs.end(); ++kw)
        if (!it->second.count(kw.key()))
            throw UnsupportedOperator(pr.kind, "", where, "keyword argument " + shortened(kw.key(), 40) + "=" + shortened(kw.value().dump(), 40) + " is not supported");
}

void Importer::adapter(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, const std::string& where) {
    s.phase = "communication";
    for (const auto& pr : c.primitives) knownKeywordsOnly(pr, where);
    if (c.fused) {
        if (c.primitives.size() != 1) throw NnScalerError(where + ": a fused adapter holds " + std::to_string(c.primitives.size()) + " primitives");
        const auto& pr = c.primitives[0];
        std::int64_t inId, outId;
        if (c.forwardAdapter) {
            if (pr.inputs.size() != 1 || pr.outputs.size() != 1) throw NnScalerError(where + ": " + pr.kind + " needs one input and one output");
            inId = pr.inputs[0];
            outId = pr.outputs[0];
        } else {
            if (c.inputs.size() != 1 || c.outputs.size() != 1 || c.inputs[0].tensor < 0 || c.outputs[0].tensor < 0)
                throw NnScalerError(where + ": a backward fused adapter needs one input and one output tensor");
            inId = c.inputs[0].tensor;
            outId = c.outputs[0].tensor;
        }
        std::string kind;
        json attrs = json::object();
        auto group = groupOf(pr.kwargs, "ranks", where);
        std::sort(group.begin(), group.end());
        const bool fw = c.forwardAdapter;
        const std::string& k = pr.kind;
        auto dimOf = [&](const char* key) {
            if (!pr.kwargs.contains(key) || !pr.kwargs[key].is_number_integer()) throw NnScalerError(where + ": " + k + " has no \"" + key + "\"");
            return normDimOf(pr.kwargs[key].get<std::int64_t>(), sub(plan, inId).box.size(), where);
        };
        if (k == "AllReduceIdentityPrim") kind = fw ? "all_reduce" : "identity";
        else if (k == "IdentityAllreducePrim") kind = fw ? "identity" : "all_reduce";
        else if (k == "AllGatherSplitPrim") kind = fw ? "all_gather" : "chunk";
        else if (k == "SplitAllGatherPrim") kind = fw ? "chunk" : "all_gather";
        else if (k == "AllToAllAllToAllPrim") kind = "all_to_all";
        else if (k == "AllReduceAllReducePrim") kind = "all_reduce";
        else if (k == "ReduceScatterAllGatherPrim") kind = fw ? "reduce_scatter" : "all_gather";
        else if (k == "AllGatherReduceScatterPrim") kind = fw ? "all_gather" : "reduce_scatter";
        else throw UnsupportedOperator(k, "", where, "no semantics for this fused primitive yet");
        if (kind == "all_gather" || kind == "chunk" || kind == "reduce_scatter") attrs["dim"] = dimOf("dim");
        if (kind == "all_to_all") {
            int idim = dimOf("idim"), odim = dimOf("odim");
            attrs["split_dim"] = fw ? odim : idim;
            attrs["concat_dim"] = fw ? idim : odim;
        }
        localOrCollective(plan, g, s, c, 0, kind, attrs, group, inId, outId, where);
        return;
    }
    for (std::size_t pi = 0; pi < c.primitives.size(); ++pi) {
        const auto& pr = c.primitives[pi];
        const std::string& k = pr.kind;
        if (k == "MovePrim") {
            auto src = groupOf(json{{"r", json::array({pr.kwargs.value("src", json())})}}, "r", where + " (src)")[0];
            auto dst = groupOf(json{{"r", json::array({pr.kwargs.value("dst", json())})}}, "r", where + " (dst)")[0];
            std::int64_t tid = !pr.inputs.empty() ? pr.inputs[0] : !pr.outputs.empty() ? pr.outputs[0] : -1;
            if (tid < 0) throw NnScalerError(where + ": MovePrim moves no tensor");
            CollectiveKey key{c.id, 0, s.mb, tid, {src, dst}};
            auto& col = member(key, "send_recv", json::object(), {src, dst}, where);
            if (!pr.inputs.empty()) {
                if (s.rank != src) throw NnScalerError(where + ": MovePrim sends from rank " + std::to_string(s.rank) + " but names src " + std::to_string(src));
                col.in[s.rank] = read(plan, g, s, pr.inputs[0], where);
            }
            if (!pr.outputs.empty()) {
                if (s.rank != dst) throw NnScalerError(where + ": MovePrim receives on rank " + std::to_string(s.rank) + " but names dst " + std::to_string(dst));
                const auto& t = sub(plan, pr.outputs[0]);
                Handle h = g.tensor(tensorBase(t) + ".recv" + s.where(), shapeOf(t), roleOf(t), isInt(t), s.rank, s.mb);
                col.out[s.rank] = h;
                write(g, s, t, h);
            }
            continue;
        }
        if (pr.inputs.size() > 1 || pr.outputs.size() > 1) throw NnScalerError(where + ": " + k + " with several inputs or outputs");
        if (k == "BroadcastPrim") {
            auto ranks = groupOf(pr.kwargs, "ranks", where);
            int src = groupOf(json{{"r", json::array({pr.kwargs.value("src", json())})}}, "r", where + " (src)")[0];
            std::vector<int> group{src};
            for (int r : ranks) if (r != src) group.push_back(r);
            std::int64_t tid = !pr.outputs.empty() ? pr.outputs[0] : pr.inputs.empty() ? -1 : pr.inputs[0];
            auto sorted = group;
            std::sort(sorted.begin(), sorted.end());
            CollectiveKey key{c.id, static_cast<int>(pi), s.mb, tid, sorted};
            auto& col = member(key, "broadcast", json::object(), group, where);
            if (!pr.inputs.empty() && s.rank == src) col.in[s.rank] = read(plan, g, s, pr.inputs[0], where);
            if (!pr.outputs.empty()) {
                const auto& t = sub(plan, pr.outputs[0]);
                Handle h = g.tensor(tensorBase(t) + ".bcast" + s.where(), shapeOf(t), roleOf(t), isInt(t), s.rank, s.mb);
                col.out[s.rank] = h;
                write(g, s, t, h, !t.isGrad);
            }
            continue;
        }
        if (pr.inputs.size() != 1 || pr.outputs.size() != 1) throw NnScalerError(where + ": " + k + " needs one input and one output");
        auto group = groupOf(pr.kwargs, "ranks", where);
        std::sort(group.begin(), group.end());
        std::string kind;
        json attrs = json::object();
        if (k == "ChunkPrim") kind = "chunk";
        else if (k == "AllGatherPrim") kind = "all_gather";
        else if (k == "AllReducePrim") kind = "all_reduce";
        else if (k == "IdentityPrim") kind = "identity";
        else if (k == "AllToAllPrim") kind = "all_to_all";
        else if (k == "ReduceScatterPrim") kind = "reduce_scatter";
        else throw UnsupportedOperator(k, "", where, "no semantics for this primitive yet");
        auto rankOfIn = sub(plan, pr.inputs[0]).box.size();
        if (kind == "chunk" || kind == "all_gather" || kind == "reduce_scatter") {
            if (!pr.kwargs.contains("dim") || !pr.kwargs["dim"].is_number_integer()) throw NnScalerError(where + ": " + k + " has no \"dim\"");
            attrs["dim"] = normDimOf(pr.kwargs["dim"].get<std::int64_t>(), rankOfIn, where);
        }
        if (kind == "all_to_all") {
            for (const char* key : {"idim", "odim"})
                if (!pr.kwargs.contains(key) || !pr.kwargs[key].is_number_integer()) throw NnScalerError(where + ": " + k + " has no \"" + key + "\"");
            attrs["split_dim"] = normDimOf(pr.kwargs["odim"].get<std::int64_t>(), rankOfIn, where);
            attrs["concat_dim"] = normDimOf(pr.kwargs["idim"].get<std::int64_t>(), rankOfIn, where);
        }
        localOrCollective(plan, g, s, c, static_cast<int>(pi), kind, attrs, group, pr.inputs[0], pr.outputs[0], where);
    }
}

int Importer::normDimOf(std::int64_t d, std::size_t rank, const std::string& where) const {
    auto r = static_cast<std::int64_t>(rank);
    if (d < -r || d >= r) throw NnScalerError(where + ": dim " + std::to_string(d) + " is outside a tensor of rank " + std::to_string(rank));
    return static_cast<int>(d < 0 ? d + r : d);
}

/// One member's part of a primitive: identity and chunk are local, the rest collectives.
void Importer::localOrCollective(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, int pi, const std::string& kind, json attrs,
                                 const std::vector<int>& group, std::int64_t inId, std::int64_t outId, const std::string& where) {
    const auto& tout = sub(plan, outId);
    if (kind == "identity" && inId == outId) return;  // a no-op in this direction
    Handle in = read(plan, g, s, inId, where);
    // A primitive that writes back the tensor it reads replaces it; a new tensor that is a
    // gradient already written adds to it (two producers, docs/research/nnscaler-ir.md §8.6).
    const bool replace = inId == outId;
    if (kind == "identity" || kind == "chunk") {
        if (kind == "chunk") {
            auto pos = std::find(group.begin(), group.end(), s.rank);
            if (pos == group.end()) throw NnScalerError(where + ": rank " + std::to_string(s.rank) + " chunks over a group it is not in");
            attrs["parts"] = static_cast<int>(group.size());
            attrs["index"] = static_cast<int>(pos - group.begin());
            // The runtime takes piece pos(rank); the index map says which piece the plan meant.
            const auto& tin = sub(plan, inId);
            int dim = attrs["dim"].get<int>();
            auto size = tin.box[static_cast<std::size_t>(dim)].second - tin.box[static_cast<std::size_t>(dim)].first;
            auto piece = size / static_cast<std::int64_t>(group.size());
            if (piece > 0 && size % static_cast<std::int64_t>(group.size()) == 0) {
                auto labelled = (tout.box[static_cast<std::size_t>(dim)].first - tin.box[static_cast<std::size_t>(dim)].first) / piece;
                auto& m = chunkMismatches[c.id];
                ++m.executions;
                if (m.tensor.empty()) m.tensor = tout.name;
                if (labelled != attrs["index"].get<int>()) {
                    m.ranks.insert(s.rank % devices);
                    if (m.count++ == 0)
                        m.example = "rank " + std::to_string(s.rank) + " takes piece " + std::to_string(attrs["index"].get<int>()) + " of " +
                                    std::to_string(group.size()) + " along dim " + std::to_string(dim) + ", its output's index map says piece " +
                                    std::to_string(labelled);
                }
            }
        }
        s.phase = "communication";
        Handle out = s.emitOp(kind, {in}, attrs, {shapeOf(tout)})[0];
        write(g, s, tout, out, replace);
        return;
    }
    if (kind == "all_gather") {
        // The runtime concatenates the members in group order; the index maps say which piece
        // each member's input is. A member at position p holding piece j != p is concatenated
        // out of order (a stage boundary's moves delivering pieces to the wrong receivers).
        const auto& tin = sub(plan, inId);
        const auto d = static_cast<std::size_t>(attrs["dim"].get<int>());
        const auto pos = std::find(group.begin(), group.end(), s.rank) - group.begin();
        const bool comparable = d < tin.box.size() && d < tout.box.size() && pos < static_cast<std::ptrdiff_t>(group.size());
        const auto piece = comparable ? tin.box[d].second - tin.box[d].first : 0;
        if (piece > 0 && tout.box[d].second - tout.box[d].first == piece * static_cast<std::int64_t>(group.size())) {
            // A start off the piece grid is labelled as no piece at all (-1).
            const auto offset = tin.box[d].first - tout.box[d].first;
            const auto labelled = offset % piece == 0 ? offset / piece : -1;
            auto& m = gatherMismatches[c.id];
            ++m.executions;
            if (m.tensor.empty()) m.tensor = tout.name;
            if (labelled != pos) {
                m.ranks.insert(s.rank % devices);
                if (m.count++ == 0)
                    m.example = "rank " + std::to_string(s.rank) + " is member " + std::to_string(pos) + " of " + std::to_string(group.size()) +
                                " along dim " + std::to_string(d) + ", its input's index map says piece " + std::to_string(labelled);
            }
        }
    }
    CollectiveKey key{c.id, pi, s.mb, -1, group};
    auto& col = member(key, kind, attrs, group, where);
    col.in[s.rank] = in;
    Handle out = g.tensor(tensorBase(tout) + "." + kind + s.where(), shapeOf(tout), roleOf(tout), isInt(tout), s.rank, s.mb);
    col.out[s.rank] = out;
    write(g, s, tout, out, replace);
}

const std::vector<int>& Importer::reducerGroup(const Cell& c, const std::string& where) {
    if (c.devices.empty()) throw NnScalerError(where + ": the reducer spans no devices");
    auto [it, inserted] = reducerGroups.try_emplace(c.id);
    ReducerGroup& rg = it->second;
    if (!inserted) {
        if (rg.devices != c.devices)
            throw NnScalerError(where + ": the reducer spans devices " + json(c.devices).dump() + ", but at " + rg.where + " it spans " + json(rg.devices).dump());
        return rg.ranks;
    }
    rg.devices = c.devices;
    rg.where = where;
    for (int d : c.devices) {
        if (d < 0 || d >= devices) throw NnScalerError(where + ": device " + std::to_string(d) + " is not a plan device");
        rg.ranks.push_back(d);
    }
    std::sort(rg.ranks.begin(), rg.ranks.end());
    if (std::adjacent_find(rg.ranks.begin(), rg.ranks.end()) != rg.ranks.end())
        throw NnScalerError(where + ": the reducer lists a device twice: " + json(c.devices).dump());
    result.groupRanksHandled += rg.ranks.size();
    return rg.ranks;
}

void Importer::reducer(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, const std::string& where) {
    const std::vector<int>& group = reducerGroup(c, where);
    for (std::size_t k = 0; k < c.inputs.size(); ++k) {
        const auto& op = c.inputs[k];
        if (op.tensor < 0) continue;
        const auto& w = sub(plan, op.tensor);
        std::int64_t gradFull = op.grad >= 0 ? sub(plan, op.grad).fullId : gradFullOf(plan, w.fullId);
        if (gradFull < 0) throw NnScalerError(where + ": weight " + w.name + " has no gradient tensor");
        auto key = std::make_tuple(s.rank, gradFull, boxStart(w));
        Handle in;
        if (auto it = gradBuffers.find(key); it != gradBuffers.end()) in = it->second;
        else {
            note(where + ": the reducer reads the gradient of " + w.name + ", which no op on rank " + std::to_string(s.rank) + " writes");
            in = g.tensor(tensorBase(w) + ".grad-unwritten" + s.where(), shapeOf(w), "gradient", false, s.rank, -1);
        }
        CollectiveKey ck{c.id, static_cast<int>(k), -1, -1, {}};  // the reducer's id names its group
        auto& col = member(ck, "all_reduce", json::object(), group, where, true);
        col.acrossReplicas = storedOnce();
        if (!col.weight) col.weight = &w;
        else if (col.weight->fullId != w.fullId || col.weight->box != w.box) col.weightsAgree = false;
        col.in[s.rank] = in;
        Handle out = g.tensor(tensorBase(w) + ".grad.reduced" + s.where(), shapeOf(w), "gradient", false, s.rank, -1);
        col.out[s.rank] = out;
        gradBuffers[key] = out;
    }
}

std::int64_t Importer::gradFullOf(const Plan& plan, std::int64_t weightFull) {
    if (gradFullOfPlan_ != &plan) {
        gradFull_.clear();
        for (const auto& [d, cells] : plan.programs)
            for (const auto& c : cells)
                for (const auto& o : c.inputs)
                    if (o.tensor >= 0 && o.grad >= 0) gradFull_.try_emplace(plan.tensors.at(o.tensor).fullId, plan.tensors.at(o.grad).fullId);
        gradFullOfPlan_ = &plan;
    }
    auto it = gradFull_.find(weightFull);
    return it == gradFull_.end() ? -1 : it->second;
}

void Importer::emitCollectives() {
    for (auto& [key, col] : collectives) {
        std::vector<Handle> ins, outs;
        if (col.kind == "send_recv") {
            if (!col.in.count(col.group[0]))
                throw NnScalerError(col.where + ": rank " + std::to_string(col.group[0]) + " never sends what this move receives");
            if (!col.out.count(col.group[1]))
                throw NnScalerError(col.where + ": rank " + std::to_string(col.group[1]) + " never receives what this move sends");
            pg.op("send_recv", instance::nnScalerMoveName(key.adapter, key.mb, col.group[0], col.group[1]), {col.in[col.group[0]]},
                  {col.out[col.group[1]]}, col.attrs, -1, key.mb, "communication", &col.group);
            continue;
        }
        for (int r : col.group) {
            if (!col.out.count(r) || (col.kind != "broadcast" && !col.in.count(r)))
                throw NnScalerError(col.where + ": rank " + std::to_string(r) + " of the group never runs its part of this " + col.kind);
            outs.push_back(col.out[r]);
        }
        if (col.kind == "broadcast") {
            if (!col.in.count(col.group[0]))
                throw NnScalerError(col.where + ": rank " + std::to_string(col.group[0]) + " never sends its part of this " + col.kind);
            ins.push_back(col.in[col.group[0]]);
        } else {
            for (int r : col.group) ins.push_back(col.in.at(r));
        }
        pg.op(col.kind, instance::nnScalerCollectiveName(col.kind, key.adapter, key.mb, col.group[0]), ins, outs, col.attrs, -1, key.mb, "communication", &col.group);
        if (col.acrossReplicas) pg.ops.back()["across_replicas"] = true;
    }
}

}  // namespace tv::nnscaler::detail
