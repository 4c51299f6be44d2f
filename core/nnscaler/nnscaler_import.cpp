// The nnScaler mapping's entry points (importPair, degreesFromFileName) and the Importer's
// tensor state: what each rank's sub-tensors hold, the weight-gradient buffers gradients add up
// in, the MoE routing held densely, and the initial reads. The rest of the mapping is in the files
// import_detail.hpp lists.
#include "nnscaler/nnscaler_import.hpp"

#include <algorithm>

#include "nnscaler/import_detail.hpp"
#include "model/instance_names.hpp"

namespace tv::nnscaler {

namespace detail {

bool Importer::inLogical(const SubTensor& t) const {
    auto it = L.tensors.find(t.id);
    return it != L.tensors.end() && &it->second == &t;
}

void Importer::findDenseRouting(const Plan& plan) {
    const bool logical = &plan == &L;
    for (const auto& [d, cells] : plan.programs)
        for (const auto& c : cells) {
            if (c.kind != CellKind::Forward || !endsWith(c.signature, ".gate_fw") || c.inputs.size() < 2 || c.inputs[1].tensor < 0) continue;
            const auto& w = plan.tensors.at(c.inputs[1].tensor);
            if (w.fullShape.empty()) continue;
            for (const auto& o : c.outputs) {
                if (o.tensor < 0) continue;
                denseFull[{logical, plan.tensors.at(o.tensor).fullId}] = w.fullShape[0];
                if (o.grad >= 0) denseFull[{logical, plan.tensors.at(o.grad).fullId}] = w.fullShape[0];
            }
        }
}

/// A sub-tensor as held: complex as (re, im) pairs, routing densely.
SubTensor Importer::adjusted(const SubTensor& t) const {
    auto it = denseFull.find({inLogical(t), t.fullId});
    if (it == denseFull.end() || t.box.empty()) return t;
    SubTensor a = t;
    a.fullShape.back() = it->second;
    a.box.back() = {0, it->second};
    a.dtype = "float32";
    return a;
}

void Importer::note(const std::string& s) {
    if (std::find(result.notes.begin(), result.notes.end(), s) == result.notes.end()) result.notes.push_back(s);
}

std::string canonicalModelSignature(const std::string& sig) {
    static const std::pair<std::string_view, std::string_view> aliases[] = {
        {"Verdict.gen_model.model.llama3.model.", "genmodel.model.llama3_adpt.model."},
        {"Verdict.gen_model.model.moe.model.", "genmodel.model.llama3_moe.model."},
        {"Verdict.gen_model.model.deepseek_v3.model.", "genmodel.model.llama3_moe.model."},
    };
    for (const auto& [from, to] : aliases)
        if (sig.size() > from.size() && sig.compare(0, from.size(), from) == 0 && sig.find('.', from.size()) == std::string::npos)
            return std::string(to) + sig.substr(from.size());
    return sig;
}

bool Importer::isCreateMask(const Cell& c) {
    const auto sig = canonicalModelSignature(c.signature);
    return sig == "genmodel.model.llama3_adpt.model.create_mask" || sig == "genmodel.model.llama3_moe.model.create_mask";
}

const char* Importer::roleOf(const SubTensor& t) {
    if (t.isAttr && !t.isGrad) return t.requiresGrad ? "weight" : "input";
    if (t.isGrad) return "gradient";
    if (t.isLoss) return "loss";
    return "activation";
}

// ----- reading and writing tensors -----

Handle Importer::read(const Plan& plan, GraphWriter& g, RankSim& s, std::int64_t id, const std::string& where) {
    const auto& t = sub(plan, id);
    const bool param = t.isAttr && !t.isGrad;
    if (t.isAttr && t.isGrad) {
        auto it = gradBuffers.find({s.rank, t.fullId, boxStart(t)});
        if (it != gradBuffers.end()) return it->second;
        note(where + " reads weight gradient " + t.name + " before any op writes it");
        return g.tensor(tensorBase(t) + ".unwritten" + s.where(), shapeOf(t), "gradient", false, s.rank, -1);
    }
    const int mbKey = param ? -1 : s.mb;
    auto key = std::make_tuple(s.rank, id, mbKey);
    if (auto it = state.find(key); it != state.end()) return it->second;
    const bool intTensor = isInt(t);
    if (param) {
        Handle h = g.tensor(tensorBase(t) + (s.rank >= 0 ? instance::rankSuffix(s.rank) : ""), shapeOf(t), roleOf(t), intTensor, s.rank, -1);
        state[key] = h;
        initialReads.push_back({s.rank, -1, h, &t, -1, {}});
        return h;
    }
    if (auto pd = pendingData.find(key); pd != pendingData.end()) {
        Handle h = g.tensor(tensorBase(t) + s.where(), shapeOf(t), "input", intTensor, s.rank, s.mb);
        state[key] = h;
        initialReads.push_back({s.rank, s.mb, h, &t, pd->second, {}});
        return h;
    }
    if (t.isGrad && t.isLoss) {  // the loss seed: nobody writes it
        Handle h = g.tensor(tensorBase(t) + s.where(), shapeOf(t), "gradient", false, s.rank, s.mb);
        state[key] = h;
        initialReads.push_back({s.rank, s.mb, h, &t, -1, {}});
        return h;
    }
    note(where + " reads " + t.name + " (sub-tensor " + std::to_string(id) + ") before any op writes it");
    Handle h = g.tensor(tensorBase(t) + ".unwritten" + s.where(), shapeOf(t), roleOf(t), intTensor, s.rank, s.mb);
    state[key] = h;
    return h;
}

std::vector<std::int64_t> Importer::boxStart(const SubTensor& t) {
    std::vector<std::int64_t> v;
    for (const auto& [a, b] : t.box) v.push_back(a), v.push_back(b);
    return v;
}

/// A write: a gradient adds to what the tensor already holds (microbatches, tied weights, two
/// producers); anything else replaces it.
void Importer::write(GraphWriter& g, RankSim& s, const SubTensor& t, Handle h, bool replace) {
    if (g.shape(h) != shapeOf(t))
        throw NnScalerError("at rank " + std::to_string(s.rank) + ": a value of shape " + shapeText(g.shape(h)) + " is written to " + t.name +
                            " (sub-tensor " + std::to_string(t.id) + ") of shape " + shapeText(shapeOf(t)));
    if (t.isAttr && t.isGrad) {
        auto key = std::make_tuple(s.rank, t.fullId, boxStart(t));
        auto it = gradBuffers.find(key);
        if (it == gradBuffers.end() || replace) {
            gradBuffers[key] = h;
            return;
        }
        Handle sum = accumulate(g, s, it->second, h, t);
        it->second = sum;
        return;
    }
    auto key = std::make_tuple(s.rank, t.id, s.mb);
    auto it = state.find(key);
    if (it != state.end() && t.isGrad && !replace) {
        Handle first = it->second;
        it->second = accumulate(g, s, first, h, t);
        if (&g == &pg) gradientSums.push_back({g.ops.size() - 1, first, h, writingAdapter});
        return;
    }
    state[key] = h;
}

/// A second write of an activation gradient that is computed from the first is the same value
/// again, not a second contribution: nnScaler names a sub-tensor by its index and value maps, so
/// an adapter that gathers a rank's gradient piece and chunks it back (a pipeline boundary inside a
/// tensor-parallel pair: move, all-gather, then the next adapter's chunk) writes the id its move
/// already wrote, and the runtime rebinds the variable. Adding the two would double the gradient
/// (a false NOT EQUIVALENT). Only an adapter's write is a rebinding, and only one that moves
/// the first value through communication alone (moves, gathers, chunks, copies): a backward
/// operator's second write is autograd's accumulation and is always added (a backward cell run
/// twice adds its gradient twice), as is any write that computes with the first value.
void Importer::replaceRederivedGradients() {
    static const std::set<std::string, std::less<>> communication = {"send_recv", "all_gather", "chunk", "identity", "broadcast"};
    std::map<std::int64_t, std::size_t> byAdapter;
    for (const auto& gs : gradientSums) {
        if (gs.adapter < 0 || gs.second == gs.first || !pg.dependsOn(gs.second, gs.first, communication, 4096)) continue;
        auto& o = pg.ops[gs.op];
        o["op"] = "identity";
        o["inputs"] = json::array({pg.name(gs.second)});
        pg.opInputs[gs.op] = {gs.second};
        ++byAdapter[gs.adapter];
    }
    for (const auto& [id, n] : byAdapter)
        note("adapter #" + std::to_string(id) + " writes " + std::to_string(n) +
             " activation gradient(s) again from the value the rank already holds (gathered and chunked back): the value is replaced, not added");
}

/// Where nnScaler's runtime and the plan's index maps disagree about which piece of a tensor a
/// rank holds: the two kinds of stage-boundary permutation (docs/nnscaler.md §5.1). The runtime's
/// piece is what is verified; these say why a plan that looks right by its labels is not.
void Importer::describeMismatches() {
    // Counted on replica 0, the one the mapping runs: every replica runs the same adapters.
    const auto perStep = [&](std::size_t n) { return std::to_string(n * static_cast<std::size_t>(dp)); };
    const std::string replicasText = dp > 1 ? ", the same on each of its " + std::to_string(dp) + " data-parallel replicas" : "";
    auto devicesText = [](const std::set<int>& ds) {
        std::string s;
        for (int d : ds) s += (s.empty() ? "" : ", ") + std::to_string(d);
        return s;
    };
    for (const auto& [id, m] : chunkMismatches) {
        if (m.count == 0) continue;
        result.runtimeFindings.push_back(
            "adapter #" + std::to_string(id) + " (" + m.tensor + "): nnScaler's runtime chunk takes piece torch.distributed.get_rank(group), the rank's " +
            "position in the sorted group, but the index maps label another piece in " + perStep(m.count) + " of its " +
            perStep(m.executions) + " chunk executions (plan devices " + devicesText(m.ranks) + replicasText + "; e.g. " + m.example +
            "): the pieces are sent permuted, where the labels say they are in order");
    }
    for (const auto& [id, m] : gatherMismatches) {
        if (m.count == 0) continue;
        result.runtimeFindings.push_back(
            "adapter #" + std::to_string(id) + " (" + m.tensor + "): nnScaler's runtime all-gather concatenates the members in sorted-rank order, but " +
            perStep(m.count) + " of its " + perStep(m.executions) + " member inputs are labelled as another piece than their position " +
            "(plan devices " + devicesText(m.ranks) + replicasText + "; e.g. " + m.example +
            "): the stage boundary's moves deliver pieces to receivers in other slots, so the gathered tensor is out of order");
    }
}

Handle Importer::accumulate(GraphWriter& g, RankSim& s, Handle old, Handle add, const SubTensor& t) {
    Handle out = g.tensor(tensorBase(t) + ".acc" + s.where(), shapeOf(t), "gradient", false, s.rank, t.isAttr ? -1 : s.mb);
    g.op("add", "accumulate." + tensorBase(t) + s.where(), {old, add}, {out}, json::object(), s.rank, s.mb, "backward");
    return out;
}

}  // namespace detail

using json = nlohmann::json;
using detail::Importer;
using detail::removeDeadOps;

void degreesFromFileName(const std::string& path, int& tp, int& pp) {
    tp = pp = 0;
    // "..._pp<digits>_tp<digits>_..." in the file's own name
    const auto slash = path.find_last_of('/');
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    auto number = [&](std::size_t at, std::size_t& end) {
        end = at;
        while (end < name.size() && end - at < 6 && name[end] >= '0' && name[end] <= '9') ++end;
        return end > at ? std::stoi(name.substr(at, end - at)) : 0;
    };
    for (std::size_t at = name.find("_pp"); at != std::string::npos; at = name.find("_pp", at + 1)) {
        std::size_t end = 0;
        const int p = number(at + 3, end);
        if (p < 1 || name.compare(end, 3, "_tp") != 0) continue;
        std::size_t end2 = 0;
        const int t = number(end + 3, end2);
        if (t < 1 || end2 >= name.size() || name[end2] != '_') continue;
        pp = p;
        tp = t;
        return;
    }
}

ImportResult importPair(const Plan& logical, const Plan& parallel, const ImportOptions& options) {
    if (logical.programs.size() != 1)
        throw NnScalerError("the logical plan runs on " + std::to_string(logical.programs.size()) + " devices; a logical (single-device) plan runs on one");
    if (logical.microbatches != 1 || logical.runtimeRanks > 1)
        throw NnScalerError("the logical plan has " + std::to_string(logical.microbatches) + " microbatches and " + std::to_string(logical.runtimeRanks) +
                            " runtime ranks; a logical plan has one of each");
    Importer im(logical, parallel, options);
    im.devices = static_cast<int>(parallel.devices.size());
    if (im.devices < 1) throw NnScalerError("the parallel plan has no devices");
    for (int d = 0; d < im.devices; ++d)
        if (parallel.devices[static_cast<std::size_t>(d)] != d || !parallel.programs.count(d))
            throw NnScalerError("the parallel plan's devices are not 0.." + std::to_string(im.devices - 1));
    im.dp = parallel.dataParallel();
    if (im.dp < 1 || im.dp * im.devices != parallel.runtimeRanks)
        throw NnScalerError("the parallel plan runs on " + std::to_string(parallel.runtimeRanks) + " runtime ranks, not a multiple of its " +
                            std::to_string(im.devices) + " devices");
    im.nm = std::max(parallel.microbatches, 1);
    for (const auto& [d, cells] : logical.programs)
        for (const auto& c : cells) {
            if (c.kind != CellKind::Forward && c.kind != CellKind::Backward && c.kind != CellKind::DataLoader)
                throw NnScalerError(std::string("the logical plan holds a") + (c.kind == CellKind::Adapter ? "n adapter" : " reducer") + " (#" +
                                    std::to_string(c.id) + "): a logical (single-device) plan communicates with nobody");
            for (const auto& o : c.inputs)
                if (o.tensor >= 0 && o.grad >= 0 && logical.tensors.at(o.tensor).isParameter())
                    im.logicalGradOf.emplace(logical.tensors.at(o.tensor).fullId, logical.tensors.at(o.grad).fullId);
        }
    // Bounded work: every cell of one replica runs once. The data-parallel replicas are stored
    // once (plan format version 2): nnScaler's plan lists one replica's devices and its runtime
    // runs the same programs on every replica with the ranks shifted, which is exactly what a
    // version 2 plan means; only the reducers span the replicas.
    std::size_t cells = 0;
    for (const auto& [d, prog] : parallel.programs) cells += prog.size();
    if (static_cast<std::uint64_t>(cells) > options.maxCellExecutions)
        throw MappingTooLarge("the parallel plan runs " + std::to_string(cells) + " cells on one replica: more than the " +
                              std::to_string(options.maxCellExecutions) + " cell executions the mapping writes out (about 8 KB of memory each)");
    im.runProgram(logical, im.lg, logical.programs.begin()->first, true);
    for (int d = 0; d < im.devices; ++d) im.runProgram(parallel, im.pg, d, false);
    im.emitCollectives();
    im.replaceRederivedGradients();
    im.describeMismatches();
    im.buildLineage();
    {
        std::unordered_set<std::string> keepLogical, keepParallel;
        for (const auto& r : im.records) {
            keepLogical.insert(r["logical"].get<std::string>());
            for (const auto& sl : r["slices"])
                for (const auto& copy : sl["copies"])
                    for (const auto& t : copy) keepParallel.insert(t.get<std::string>());
        }
        removeDeadOps(im.lg, keepLogical);
        removeDeadOps(im.pg, keepParallel);
    }
    json mesh = json::object();
    mesh["dp"] = im.dp;
    if (options.tp > 0 && options.pp > 0 && static_cast<std::int64_t>(options.tp) * options.pp == im.devices) {
        mesh["tp"] = options.tp;
        mesh["pp"] = options.pp;
    } else {
        mesh["tp"] = im.devices;
    }
    ImportResult& r = im.result;
    json par = {{"mesh", mesh}, {"microbatches", im.nm}, {"tensors", std::move(im.pg.tensors)}, {"ops", std::move(im.pg.ops)}};
    if (im.storedOnce()) par["replicas"] = {{"axis", "dp"}};
    r.plan = {{"format", "trainverify-plan"},
              {"version", im.storedOnce() ? 2 : 1},
              {"name", options.name.empty() ? std::string("nnscaler") : options.name},
              {"description", options.description},
              {"logical", {{"tensors", std::move(im.lg.tensors)}, {"ops", std::move(im.lg.ops)}}},
              {"parallel", std::move(par)},
              {"lineage", std::move(im.records)}};
    return std::move(im.result);
}

}  // namespace tv::nnscaler
