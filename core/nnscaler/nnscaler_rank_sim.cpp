// The rank simulator of the nnScaler mapping: RankSim emits the registry ops of one rank (or of
// the logical graph) through the graph writer, and the Importer runs each program cell by cell
// over the tensor state: data loaders, forward cells (lowered by nnscaler_lowering.cpp), backward
// cells (the vector-Jacobian product of their forward cell's lowering, with the registry's rules),
// adapters and reducers (nnscaler_adapters.cpp).
#include "nnscaler/import_detail.hpp"

#include <algorithm>

#include "model/instance_names.hpp"

namespace tv::nnscaler::detail {

// ----- the simulation of one program (one rank, or the logical device) ---------------------------

/// A fresh dropout mask of `shape` for the operator being lowered; `part` says which part of
/// the logical mask it is (full shape per microbatch and box).
Handle RankSim::mask(const Shape& shape, SubTensor part) {
    Handle h = g_.tensor(prefix + ".dropout_mask" + (recording && !recording->masks.empty() ? "." + std::to_string(recording->masks.size()) : "") + where(),
                         shape, "input", false, rank, mb);
    if (recording) {
        recording->masks.push_back(h);
        recording->maskParts.push_back(std::move(part));
    }
    return h;
}

std::vector<Handle> RankSim::emitOp(std::string_view op, std::vector<Handle> inputs, json attrs, std::vector<Shape> outShapes) {
    std::vector<Handle> outs;
    bool isInt = false;
    const auto& reg = OpRegistry::instance();
    auto kind = reg.find(op);
    if (kind) {
        const auto& spec = reg.spec(*kind);
        // Data movement, collectives and identity keep their input's dtype (int ids pass through).
        if (spec.keepsDtype && !inputs.empty()) isInt = g_.handles[static_cast<std::size_t>(inputs[0])].isInt;
    }
    for (std::size_t k = 0; k < outShapes.size(); ++k)
        outs.push_back(g_.tensor(prefix + "." + std::string(op) + (outShapes.size() > 1 ? "." + std::to_string(k) : "") + where(),
                                 std::move(outShapes[k]), std::string_view(phase) == "backward" ? "gradient" : "activation", isInt, rank, mb));
    g_.op(std::string(op), prefix + "." + std::string(op) + where(), inputs, outs, attrs, rank, mb, phase);
    if (recording) recording->ops.push_back({std::string(op), attrs, inputs, outs});
    return outs;
}

std::string RankSim::where() const {
    if (logical_) return "";
    return instance::nnScalerSuffix(rank, mb);
}

// ----- running the programs -----

void Importer::runProgram(const Plan& plan, GraphWriter& g, int device, bool logical) {
    RankSim s(g, logical);
    s.rank = logical ? -1 : device;
    const auto& cells = plan.programs.at(device);
    for (std::size_t ci = 0; ci < cells.size(); ++ci) {
        const Cell& c = cells[ci];
        s.mb = logical ? -1 : c.microbatch;
        const int mbKey = logical ? 0 : c.microbatch;
        std::string where = std::string(logical ? "logical plan" : "parallel plan") + ", device " + std::to_string(device) +
                            (logical ? "" : " (rank " + std::to_string(s.rank) + ")") + ", microbatch " + std::to_string(c.microbatch) +
                            ", " + toString(c.kind) + " #" + std::to_string(c.id);
        s.prefix = sanitize(c.name) + "#" + std::to_string(c.id);
        switch (c.kind) {
            case CellKind::DataLoader:
                for (std::size_t k = 0; k < c.outputs.size(); ++k)
                    if (c.outputs[k].tensor >= 0) {
                        auto key = std::make_tuple(s.rank, c.outputs[k].tensor, s.mb);
                        state.erase(key);
                        pendingData[key] = static_cast<int>(k);
                    }
                break;
            case CellKind::Forward: {
                s.phase = "forward";
                Call call{plan, c, {}, {}, where};
                for (const auto& o : c.inputs) call.in.push_back(o.tensor >= 0 ? read(plan, g, s, o.tensor, where) : -1);
                for (const auto& o : c.outputs) {
                    if (o.tensor < 0) unsupported(call, "an output is not a tensor");
                    call.outShapes.push_back(shapeOf(sub(plan, o.tensor)));
                }
                Lowered low;
                low.cell = &c;
                low.inputs = call.in;
                if (isCreateMask(c)) {
                    // The causal mask depends only on the sequence length (its ^ dims are never
                    // split): every execution holds the same constant, a copy of the logical one.
                    if (call.outShapes.size() != 1) unsupported(call, "expected one output");
                    const Shape& ms = call.outShapes[0];
                    const Shape ts = call.in.empty() || call.in[0] < 0 ? Shape{} : g.shape(call.in[0]);
                    if (ms.size() != 4 || ts.size() < 2 || ms[2] != ts[1] || ms[3] != ts[1])
                        unsupported(call, "the mask's shape does not follow from the tokens' sequence length");
                    Handle h = g.tensor(tensorBase(sub(plan, c.outputs[0].tensor)) + s.where(), ms, "input", false, s.rank, s.mb);
                    initialReads.push_back({s.rank, s.mb, h, &sub(plan, c.outputs[0].tensor), -1, canonicalModelSignature(c.signature) + shapeText(ms)});
                    low.outputs = {h};
                } else {
                    s.recording = &low;
                    low.outputs = lowerForward(s, call);
                    s.recording = nullptr;
                }
                for (std::size_t k = 0; k < c.outputs.size(); ++k) {
                    if (std::find(low.inputs.begin(), low.inputs.end(), low.outputs[k]) == low.inputs.end())
                        g.rename(low.outputs[k], tensorBase(sub(plan, c.outputs[k].tensor)) + s.where());
                    write(g, s, sub(plan, c.outputs[k].tensor), low.outputs[k], true);
                }
                lowered[{s.rank, c.id, mbKey}] = std::move(low);
                break;
            }
            case CellKind::Backward:
                backward(plan, g, s, c, mbKey, where);
                break;
            case CellKind::Adapter:
                writingAdapter = c.id;
                adapter(plan, g, s, c, where);
                writingAdapter = -1;
                break;
            case CellKind::Reducer:
                reducer(plan, g, s, c, where);
                break;
        }
    }
}

void Importer::backward(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, int mbKey, const std::string& where) {
    auto it = lowered.find({s.rank, c.mirror, mbKey});
    if (it == lowered.end())
        throw NnScalerError(where + ": its forward operator #" + std::to_string(c.mirror) + " did not run on this rank in this microbatch");
    const Lowered& fw = it->second;
    const Cell& fc = *fw.cell;
    s.phase = "backward";
    s.prefix = "bw." + sanitize(fc.name) + "#" + std::to_string(fc.id);
    // Incoming gradients: bw input j is the gradient of the forward output whose _grad it is.
    std::vector<Handle> outGrads(fw.outputs.size(), -1);
    for (const auto& in : c.inputs) {
        if (in.tensor < 0) continue;
        std::size_t k = 0;
        while (k < fc.outputs.size() && fc.outputs[k].grad != in.tensor) ++k;
        if (k == fc.outputs.size())
            throw NnScalerError(where + ": input sub-tensor " + std::to_string(in.tensor) + " is the gradient of no output of forward operator #" +
                                std::to_string(fc.id));
        const auto& gt = sub(plan, in.tensor);
        if (!gt.isAttr && gt.isGrad && !gt.isLoss && !state.count({s.rank, in.tensor, s.mb})) {
            // No op produced this gradient (the output's consumers have no backward, e.g.
            // create_mask): as in autograd, it is zero.
            continue;
        }
        outGrads[k] = read(plan, g, s, in.tensor, where);
    }
    incoming[{s.rank, c.id, mbKey}] = outGrads;
    auto grads = vjp(g, s, fw, outGrads);
    for (const auto& out : c.outputs) {
        if (out.tensor < 0) continue;
        std::size_t k = 0;
        while (k < fc.inputs.size() && fc.inputs[k].grad != out.tensor) ++k;
        if (k == fc.inputs.size())
            throw NnScalerError(where + ": output sub-tensor " + std::to_string(out.tensor) + " is the gradient of no input of forward operator #" +
                                std::to_string(fc.id));
        Handle gk = grads[k];
        const auto& t = sub(plan, out.tensor);
        if (gk < 0) gk = s.emitOp("zeros_like", {fw.inputs[k]}, json::object(), {shapeOf(t)})[0];
        if (std::find(fw.inputs.begin(), fw.inputs.end(), gk) == fw.inputs.end() && std::find(outGrads.begin(), outGrads.end(), gk) == outGrads.end())
            g.rename(gk, tensorBase(t) + s.where());
        write(g, s, t, gk);
    }
    s.phase = "forward";
}

/// Reverse-mode differentiation of one lowering: the gradient of each operand (-1: none).
std::vector<Handle> Importer::vjp(GraphWriter& g, RankSim& s, const Lowered& fw, const std::vector<Handle>& outGrads) {
    const auto& reg = OpRegistry::instance();
    // Only what leads to an operand with a gradient is differentiated (nnScaler's backward op
    // writes no gradient for the others: a mask, a rotary table, token ids).
    std::unordered_set<Handle> needed;
    for (std::size_t k = 0; k < fw.inputs.size(); ++k)
        if (fw.inputs[k] >= 0 && k < fw.cell->inputs.size() && fw.cell->inputs[k].grad >= 0) needed.insert(fw.inputs[k]);
    for (const auto& op : fw.ops) {
        bool any = false;
        for (auto in : op.inputs) any = any || needed.count(in);
        if (any)
            for (auto out : op.outputs) needed.insert(out);
    }
    std::unordered_map<Handle, std::vector<Handle>> contrib;
    for (std::size_t k = 0; k < fw.outputs.size(); ++k)
        if (outGrads[k] >= 0) contrib[fw.outputs[k]].push_back(outGrads[k]);
    auto total = [&](Handle t) -> Handle {
        auto it = contrib.find(t);
        if (it == contrib.end() || it->second.empty()) return -1;
        auto& v = it->second;
        Handle sum = v[0];
        for (std::size_t k = 1; k < v.size(); ++k) sum = s.emitOp("add", {sum, v[k]}, json::object(), {g.shape(t)})[0];
        v.assign(1, sum);
        return sum;
    };
    for (std::size_t i = fw.ops.size(); i-- > 0;) {
        const auto& op = fw.ops[i];
        bool leads = false;
        for (auto in : op.inputs) leads = leads || needed.count(in);
        if (!leads) continue;
        std::vector<Handle> og;
        bool any = false;
        for (auto o : op.outputs) {
            og.push_back(total(o));
            any = any || og.back() >= 0;
        }
        if (!any) continue;
        for (std::size_t k = 0; k < og.size(); ++k)
            if (og[k] < 0) og[k] = s.emitOp("zeros_like", {op.outputs[k]}, json::object(), {g.shape(op.outputs[k])})[0];
        const auto& spec = reg.spec(*reg.find(op.kind));
        if (!spec.vjp) throw NnScalerError("internal: registry op " + op.kind + " has no backward rule");
        VjpArgs args{op.inputs, op.outputs, og, op.attrs};
        auto grads = spec.vjp(s, args);
        for (std::size_t k = 0; k < grads.size() && k < op.inputs.size(); ++k)
            if (grads[k] >= 0 && needed.count(op.inputs[k]) && !g.handles[static_cast<std::size_t>(op.inputs[k])].isInt)
                contrib[op.inputs[k]].push_back(grads[k]);
    }
    std::vector<Handle> res;
    for (auto h : fw.inputs) res.push_back(h >= 0 ? total(h) : -1);
    return res;
}

}  // namespace tv::nnscaler::detail
