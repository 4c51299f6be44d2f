// The lowering table of the nnScaler mapping: lowerForward maps one forward operator, by its
// signature (its annotation and keyword arguments give the variant), to registry ops emitted
// through a RankSim. One chain of signature tests, in a fixed order, each with its own checks and
// messages; an operator it does not know, or a variant it does not model, is refused with
// UnsupportedOperator (the pair is then INCONCLUSIVE). The backward needs nothing here: it is
// the VJP of the ops emitted.
#include "nnscaler/import_detail.hpp"

#include <algorithm>
#include <cmath>

namespace tv::nnscaler::detail {

// ----- operator lowerings ------------------------------------------------------------------------

[[noreturn]] void unsupported(const Call& c, const std::string& reason) {
    throw UnsupportedOperator(c.cell.signature, c.cell.annotation, c.where, reason);
}

namespace {

Handle tensorInput(const Call& c, std::size_t k) {
    if (k >= c.in.size() || c.in[k] < 0) unsupported(c, "input " + std::to_string(k) + " is not a tensor");
    return c.in[k];
}

const json& constantInput(const Call& c, std::size_t k) {
    if (k >= c.cell.inputs.size() || c.cell.inputs[k].tensor >= 0) unsupported(c, "input " + std::to_string(k) + " is not a constant");
    return c.cell.inputs[k].constant;
}

/// Reshapes to the declared output shape when they differ (e.g. a full sum is [] and nnScaler's is [1]).
Handle reshapeTo(RankSim& s, Handle h, const Shape& shape) {
    if (s.shapeOf(h) == shape) return h;
    return s.emitOp("reshape", {h}, json::object(), {shape})[0];
}

int normDim(const Call& c, std::int64_t d, std::size_t rank) {
    auto r = static_cast<std::int64_t>(rank);
    if (d < -r || d >= r) unsupported(c, "dim " + std::to_string(d) + " is outside a tensor of rank " + std::to_string(rank));
    return static_cast<int>(d < 0 ? d + r : d);
}

}  // namespace

std::vector<Handle> lowerForward(RankSim& s, const Call& c) {
    const std::string sig = canonicalModelSignature(c.cell.signature);
    const auto& kw = c.cell.kwargs;
    if (c.outShapes.empty()) unsupported(c, "the operator has no outputs");
    auto out1 = [&](Handle h) { return std::vector<Handle>{reshapeTo(s, h, c.outShapes.at(0))}; };
    auto exact = [&](const json& v, const char* what) {
        std::string t = numberText(v);
        if (t.empty()) unsupported(c, std::string(what) + " " + v.dump() + " is not a number the checker can hold exactly");
        return t;
    };
    auto needOutputs = [&](std::size_t n) {
        if (c.outShapes.size() != n) unsupported(c, "expected " + std::to_string(n) + " output(s), found " + std::to_string(c.outShapes.size()));
    };
    auto noKwargsBut = [&](std::initializer_list<const char*> allowed) {
        for (auto it = kw.begin(); it != kw.end(); ++it) {
            if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return it.key() == a; }) == allowed.end())
                unsupported(c, "keyword argument " + it.key() + " is not supported");
            // In place, the runtime overwrites the input, and a later reader of it sees the
            // output; the mapping writes only the output. Refused rather than modelled wrong.
            if (it.key() == "inplace" && !(it.value().is_boolean() && !it.value().get<bool>()))
                unsupported(c, "inplace=" + it.value().dump() + " is not modelled (the input would be overwritten for its later readers)");
        }
    };
    if (sig == "torch.nn.functional.linear") {
        needOutputs(1);
        noKwargsBut({"bias"});
        std::vector<Handle> ins = {tensorInput(c, 0), tensorInput(c, 1)};
        if (c.in.size() > 2 && c.in[2] >= 0) ins.push_back(c.in[2]);
        if (kw.contains("bias") && !kw["bias"].is_null()) unsupported(c, "a bias given as a keyword argument is not supported");
        return out1(s.emitOp("linear", ins, json::object(), {c.outShapes[0]})[0]);
    }
    if (sig == "torch.sum" || sig == "torch.mean") {
        needOutputs(1);
        noKwargsBut({"dim", "keepdim", "dtype"});
        if (kw.contains("dtype") && !kw["dtype"].is_null()) unsupported(c, "dtype is not supported");
        Handle x = tensorInput(c, 0);
        json attrs = json::object();
        const auto rank = s.shapeOf(x).size();
        if (kw.contains("dim") && !kw["dim"].is_null()) {
            json dims = json::array();
            auto add = [&](const json& d) {
                if (!d.is_number_integer()) unsupported(c, "dim must be integers");
                dims.push_back(normDim(c, d.get<std::int64_t>(), rank));
            };
            if (kw["dim"].is_array()) for (const auto& d : kw["dim"]) add(d);
            else add(kw["dim"]);
            attrs["dims"] = dims;
        }
        if (kw.contains("keepdim") && kw["keepdim"].is_boolean() && kw["keepdim"].get<bool>()) attrs["keepdim"] = true;
        Shape reduced;
        {
            std::set<int> ds;
            if (attrs.contains("dims")) for (const auto& d : attrs["dims"]) ds.insert(d.get<int>());
            else for (std::size_t d = 0; d < rank; ++d) ds.insert(static_cast<int>(d));
            const auto& xs = s.shapeOf(x);
            for (std::size_t d = 0; d < rank; ++d) {
                if (!ds.count(static_cast<int>(d))) reduced.push_back(xs[d]);
                else if (attrs.contains("keepdim")) reduced.push_back(1);
            }
        }
        return out1(s.emitOp(sig == "torch.sum" ? "sum" : "mean", {x}, attrs, {reduced})[0]);
    }
    if (sig == "nnscaler.runtime.function.identity" || sig == "torch.Tensor.contiguous" || sig == "torch.Tensor.float" ||
        sig == "nnscaler.runtime.function.to") {
        needOutputs(1);
        if (sig == "nnscaler.runtime.function.to") {
            const auto& d = kw.contains("dtype_or_device") ? kw["dtype_or_device"] : json();
            if (!(d.is_string() && d.get<std::string>() == "torch.float32")) unsupported(c, "only .to(torch.float32) is supported");
        }
        return {s.emitOp("identity", {tensorInput(c, 0)}, json::object(), {c.outShapes[0]})[0]};
    }
    if (sig == "nnscaler.runtime.function.multiref") {
        Handle x = tensorInput(c, 0);
        std::vector<Handle> outs;
        for (const auto& sh : c.outShapes) outs.push_back(s.emitOp("identity", {x}, json::object(), {sh})[0]);
        return outs;
    }
    // The model-specific operators of the bundled plans, by their full signatures (a same-named
    // function of another module has other semantics).
    auto ends = [&](std::string_view suffix) {
        static const char* const known[] = {"examples.nlp.blocks.attention.self_attention", "examples.nlp.blocks.mlp.feedforward",
                                            "genmodel.model.llama3_adpt.model.create_mask", "genmodel.model.llama3_adpt.model.apply_mask",
                                            "genmodel.model.llama3_adpt.model.apply_rotary_emb", "genmodel.model.llama3_moe.model.create_mask",
                                            "genmodel.model.llama3_moe.model.apply_mask", "genmodel.model.llama3_moe.model.apply_rotary_emb",
                                            "genmodel.model.llama3_moe.model.gate_fw", "genmodel.model.llama3_moe.model.nnscaler_moe_gmm"};
        if (!endsWith(sig, suffix)) return false;
        for (const char* k : known)
            if (sig == k) return true;
        return false;
    };
    // Binary arithmetic: tensor (op) tensor with broadcasting, or tensor (op) constant.
    if (sig == "torch.add" || sig == "torch.mul" || sig == "torch.div" || sig == "torch.sub") {
        needOutputs(1);
        noKwargsBut({"alpha", "rounding_mode"});
        if (kw.contains("alpha") && !(kw["alpha"].is_number() && kw["alpha"].get<double>() == 1.0)) unsupported(c, "alpha other than 1 is not supported");
        if (kw.contains("rounding_mode") && !kw["rounding_mode"].is_null()) unsupported(c, "a rounding mode is not supported");
        const std::string op = sig.substr(6);
        if (c.in.size() != 2) unsupported(c, "expected two operands");
        if (c.in[0] >= 0 && c.in[1] >= 0) return out1(s.emitOp(op, {c.in[0], c.in[1]}, json::object(), {c.outShapes[0]})[0]);
        const bool tensorFirst = c.in[0] >= 0;
        Handle x = tensorFirst ? c.in[0] : tensorInput(c, 1);
        const json& k = constantInput(c, tensorFirst ? 1 : 0);
        const std::string v = numberText(k);
        if (v.empty()) unsupported(c, "the constant operand " + k.dump() + " is not a number the checker can hold exactly");
        if (op == "add") return out1(s.emitOp("add_scalar", {x}, json{{"value", v}}, {c.outShapes[0]})[0]);
        if (op == "mul") return out1(s.emitOp("mul_scalar", {x}, json{{"value", v}}, {c.outShapes[0]})[0]);
        if (op == "sub" && tensorFirst) return out1(s.emitOp("add_scalar", {x}, json{{"value", (-*Rational::parse(v)).toString()}}, {c.outShapes[0]})[0]);
        if (op == "div" && tensorFirst) {
            const double d = k.get<double>();
            const double sq = std::round(d * d);
            // 1/sqrt(n), the attention scale, stays exact as div_sqrt.
            if (d > 0 && sq >= 1 && sq < 1e9 && std::abs(std::sqrt(sq) - d) <= 1e-12 * d && std::abs(std::round(d) - d) > 1e-9)
                return out1(s.emitOp("div_sqrt", {x}, json{{"n", static_cast<std::int64_t>(sq)}}, {c.outShapes[0]})[0]);
            const Rational r = *Rational::parse(v);
            if (r == Rational(0)) unsupported(c, "division by zero");
            return out1(s.emitOp("mul_scalar", {x}, json{{"value", (Rational(1) / r).toString()}}, {c.outShapes[0]})[0]);
        }
        unsupported(c, "a constant first operand is not supported for " + op);
    }
    if (sig == "torch.pow") {
        needOutputs(1);
        const json& e = constantInput(c, 1);
        if (!e.is_number()) unsupported(c, "the exponent must be a number");
        return out1(s.emitOp("pow", {tensorInput(c, 0)}, json{{"exponent", exact(e, "the exponent")}}, {c.outShapes[0]})[0]);
    }
    struct Unary { const char* sig; const char* op; };
    static const Unary unaries[] = {{"torch.rsqrt", "rsqrt"}, {"torch.exp", "exp"}, {"torch.sqrt", "sqrt"}, {"torch.sigmoid", "sigmoid"},
                                    {"torch.tanh", "tanh"}, {"torch.nn.functional.silu", "silu"}, {"torch.nn.functional.relu", "relu"},
                                    {"torch.nn.functional.gelu", "gelu"}, {"torch.neg", "neg"}};
    for (const auto& u : unaries)
        if (sig == u.sig) {
            needOutputs(1);
            noKwargsBut({"inplace", "approximate"});
            if (kw.contains("approximate") && !(kw["approximate"].is_string() && kw["approximate"].get<std::string>() == "none"))
                unsupported(c, "only the exact (erf) GELU is supported");
            return out1(s.emitOp(u.op, {tensorInput(c, 0)}, json::object(), {c.outShapes[0]})[0]);
        }
    if (sig == "torch.Tensor.view" || sig == "torch.reshape" || sig == "torch.Tensor.reshape") {
        needOutputs(1);
        // The runtime reshapes to `size` (local sizes, one of them may be -1): it must be the
        // shape the output's index map says.
        if (kw.contains("size")) {
            const auto& size = kw["size"];
            if (!size.is_array()) unsupported(c, "size must be a list");
            const auto n = numel(s.shapeOf(tensorInput(c, 0)));
            std::int64_t known = 1;
            int free = -1;
            Shape want;
            for (std::size_t i = 0; i < size.size(); ++i) {
                if (!size[i].is_number_integer()) unsupported(c, "size must be integers");
                const auto v = size[i].get<std::int64_t>();
                if (v == -1 && free < 0) free = static_cast<int>(i);
                else if (v < 1 || known > n / v) unsupported(c, "size " + size.dump() + " does not fit the input's " + std::to_string(n) + " elements");
                else known *= v;
                want.push_back(v);
            }
            if (free >= 0) {
                if (known == 0 || n % known != 0) unsupported(c, "size " + size.dump() + " does not fit the input's " + std::to_string(n) + " elements");
                want[static_cast<std::size_t>(free)] = n / known;
            }
            if (want != c.outShapes[0])
                throw NnScalerError(c.where + ": view to size " + size.dump() + " (" + shapeText(want) + ") but the output's index map holds " + shapeText(c.outShapes[0]));
        }
        return {s.emitOp("reshape", {tensorInput(c, 0)}, json::object(), {c.outShapes[0]})[0]};  // size is implied by the output shape
    }
    if (sig == "torch.transpose") {
        needOutputs(1);
        Handle x = tensorInput(c, 0);
        const auto r = s.shapeOf(x).size();
        if (!kw.contains("dim0") || !kw.contains("dim1") || !kw["dim0"].is_number_integer() || !kw["dim1"].is_number_integer())
            unsupported(c, "transpose needs integer dim0 and dim1");
        json attrs = {{"dim0", normDim(c, kw["dim0"].get<std::int64_t>(), r)}, {"dim1", normDim(c, kw["dim1"].get<std::int64_t>(), r)}};
        return {s.emitOp("transpose", {x}, attrs, {c.outShapes[0]})[0]};
    }
    if (sig == "torch.matmul") {
        needOutputs(1);
        return out1(s.emitOp("matmul", {tensorInput(c, 0), tensorInput(c, 1)}, json::object(), {c.outShapes[0]})[0]);
    }
    if (sig == "torch.nn.functional.softmax") {
        needOutputs(1);
        noKwargsBut({"dim", "_stacklevel", "dtype"});
        if (kw.contains("dtype") && !kw["dtype"].is_null()) unsupported(c, "dtype is not supported");
        Handle x = tensorInput(c, 0);
        if (!kw.contains("dim") || !kw["dim"].is_number_integer()) unsupported(c, "softmax needs an integer dim");
        return {s.emitOp("softmax", {x}, json{{"dim", normDim(c, kw["dim"].get<std::int64_t>(), s.shapeOf(x).size())}}, {c.outShapes[0]})[0]};
    }
    if (sig == "nnscaler.runtime.function.embedding") {
        needOutputs(1);
        noKwargsBut({"padding_idx", "start", "stop"});
        if (kw.contains("padding_idx") && !kw["padding_idx"].is_null()) unsupported(c, "padding_idx is not supported");
        Handle ids = tensorInput(c, 0), w = tensorInput(c, 1);
        if (s.shapeOf(w).size() != 2) unsupported(c, "the embedding weight must be [vocabulary, hidden]");
        const auto rows = s.shapeOf(w)[0];
        const std::int64_t start = kw.value("start", json(0)).get<std::int64_t>();
        const std::int64_t stop = kw.value("stop", json(rows)).get<std::int64_t>();
        if (stop - start != rows) unsupported(c, "start/stop do not match the weight's " + std::to_string(rows) + " rows");
        if (start != 0) unsupported(c, "vocabulary-parallel embedding (start " + std::to_string(start) + ") is not mapped yet");
        return {s.emitOp("embedding", {ids, w}, json::object(), {c.outShapes[0]})[0]};
    }
    if (ends(".apply_mask")) {
        needOutputs(1);
        return out1(s.emitOp("add", {tensorInput(c, 0), tensorInput(c, 1)}, json::object(), {c.outShapes[0]})[0]);
    }
    if (ends(".apply_rotary_emb")) {
        // x viewed as complex pairs (re, im) along the last dim, times freqs_cis (a complex
        // [seqlen, dim/2] table, held as [seqlen, dim/2, 2]) broadcast over batch and heads.
        needOutputs(2);
        Handle f = tensorInput(c, 2);
        const Shape fs = s.shapeOf(f);
        if (fs.size() != 3 || fs[2] != 2) unsupported(c, "the rotary table must be complex [seqlen, dim/2]");
        auto part = [&](Handle h, int dim, int k, const Shape& shape) {
            Shape o = shape;
            o[static_cast<std::size_t>(dim)] = 1;
            return s.emitOp("slice", {h}, json{{"dim", dim}, {"start", k}, {"end", k + 1}}, {o})[0];
        };
        Handle fr = part(f, 2, 0, fs), fi = part(f, 2, 1, fs);
        std::vector<Handle> outs;
        for (int k = 0; k < 2; ++k) {
            Handle x = tensorInput(c, static_cast<std::size_t>(k));
            const Shape xs = s.shapeOf(x);
            if (xs.size() != 4 || xs[3] % 2 != 0 || xs[1] != fs[0] || xs[3] / 2 != fs[1])
                unsupported(c, "input " + std::to_string(k) + " of shape " + shapeText(xs) + " does not fit the rotary table " + shapeText(fs));
            const Shape pairs = {xs[0], xs[1], xs[2], xs[3] / 2, 2};
            const Shape bshape = {1, xs[1], 1, xs[3] / 2, 1};
            Handle xp = s.emitOp("reshape", {x}, json::object(), {pairs})[0];
            Handle xr = part(xp, 4, 0, pairs), xi = part(xp, 4, 1, pairs);
            Handle br = s.emitOp("reshape", {fr}, json::object(), {bshape})[0];
            Handle bi = s.emitOp("reshape", {fi}, json::object(), {bshape})[0];
            Shape half = pairs;
            half[4] = 1;
            Handle rr = s.emitOp("mul", {xr, br}, json::object(), {half})[0];
            Handle ii = s.emitOp("mul", {xi, bi}, json::object(), {half})[0];
            Handle ri = s.emitOp("mul", {xr, bi}, json::object(), {half})[0];
            Handle ir = s.emitOp("mul", {xi, br}, json::object(), {half})[0];
            Handle re = s.emitOp("sub", {rr, ii}, json::object(), {half})[0];
            Handle im = s.emitOp("add", {ri, ir}, json::object(), {half})[0];
            Handle both = s.emitOp("concat", {re, im}, json{{"dim", 4}}, {pairs})[0];
            outs.push_back(s.emitOp("reshape", {both}, json::object(), {c.outShapes[static_cast<std::size_t>(k)]})[0]);
        }
        return outs;
    }
    if (sig == "torch.nn.functional.dropout") {
        needOutputs(1);
        noKwargsBut({"p", "training", "inplace"});
        Handle x = tensorInput(c, 0);
        const json p = kw.value("p", json(0.5));
        const json training = kw.value("training", json(true));
        // "self.training": the module's flag, set during a training step.
        const bool active = training.is_boolean() ? training.get<bool>() : (training.is_string() && training.get<std::string>() == "self.training");
        if (!training.is_boolean() && !active) unsupported(c, "training is " + training.dump());
        if (!p.is_number()) unsupported(c, "p must be a number");
        if (!active || p.get<double>() == 0) return {s.emitOp("identity", {x}, json::object(), {c.outShapes[0]})[0]};
        // The mask is the output's part of the logical mask: both plans draw the same random
        // numbers for the same elements (what the parallelization's RNG must guarantee).
        SubTensor part = c.plan.tensors.at(c.cell.outputs[0].tensor);
        part.name = "dropout mask of " + part.name;
        part.parts = 1, part.part = 0;
        Handle m = s.mask(c.outShapes[0], part);
        return {s.emitOp("dropout", {x, m}, json{{"p", exact(p, "p")}}, {c.outShapes[0]})[0]};
    }
    if (sig == "nnscaler.runtime.function.layer_norm") {
        needOutputs(1);
        noKwargsBut({"normalized_shape", "eps"});
        Handle x = tensorInput(c, 0);
        if (c.in.size() != 3 || c.in[1] < 0 || c.in[2] < 0) unsupported(c, "layer norm without a weight and a bias is not supported");
        const auto& ns = kw.value("normalized_shape", json());
        if (s.shapeOf(x).empty() || !(ns.is_array() && ns.size() == 1 && ns[0].is_number_integer() && ns[0].get<std::int64_t>() == s.shapeOf(x).back()))
            unsupported(c, "only a normalized_shape of the last dimension is supported");
        const json eps = kw.value("eps", json(1e-5));
        return {s.emitOp("layernorm", {x, c.in[1], c.in[2]}, json{{"eps", exact(eps, "eps")}}, {c.outShapes[0]})[0]};
    }
    // The scale 1/sqrt(n) of attention stays exact as div_sqrt; another factor is a decimal.
    auto scaleBy = [&](Handle h, double scale, const Shape& shape) {
        const double n = std::round(1.0 / (scale * scale));
        if (scale > 0 && n >= 1 && n < 1e9 && std::abs(1.0 / std::sqrt(n) - scale) <= 1e-12 * scale)
            return s.emitOp("div_sqrt", {h}, json{{"n", static_cast<std::int64_t>(n)}}, {shape})[0];
        return s.emitOp("mul_scalar", {h}, json{{"value", exact(json(scale), "the scale")}}, {shape})[0];
    };
    auto subOf = [&](std::size_t k) -> const SubTensor& { return c.plan.tensors.at(c.cell.inputs.at(k).tensor); };
    if (ends(".self_attention")) {
        // examples/nlp/blocks/attention.py: qkv = linear(query, qkv_proj, qkv_bias) laid out as
        // (h d 3); per (batch, head) softmax(scale q k^T) with dropout, times v; then out_proj.
        needOutputs(1);
        noKwargsBut({"h", "scale", "dropout_p", "mask"});
        if (kw.value("mask", json(false)) != json(false)) unsupported(c, "the masked variant is not supported");
        Handle q0 = tensorInput(c, 0), w = tensorInput(c, 1), b = tensorInput(c, 2), wo = tensorInput(c, 3);
        const Shape qs = s.shapeOf(q0), ws = s.shapeOf(w);
        if (!kw.contains("h") || !kw["h"].is_number_integer() || kw["h"].get<std::int64_t>() < 1) unsupported(c, "h must be a positive integer");
        const std::int64_t h = kw["h"].get<std::int64_t>();
        if (qs.size() != 3 || ws.size() != 2 || h > ws[0] || ws[0] % (3 * h) != 0) unsupported(c, "qkv_proj's rows do not split into h heads of (d, 3)");
        const std::int64_t L = qs[0], N = qs[1], d = ws[0] / h / 3;
        Handle qkv = s.emitOp("linear", {q0, w, b}, json::object(), {{L, N, ws[0]}})[0];
        Handle qkv5 = s.emitOp("reshape", {qkv}, json::object(), {{L, N, h, d, 3}})[0];
        auto pick = [&](int k, json perm, Shape shape) {
            Handle one = s.emitOp("slice", {qkv5}, json{{"dim", 4}, {"start", k}, {"end", k + 1}}, {{L, N, h, d, 1}})[0];
            Handle four = s.emitOp("reshape", {one}, json::object(), {{L, N, h, d}})[0];
            return s.emitOp("permute", {four}, json{{"dims", perm}}, {shape})[0];
        };
        Handle q = pick(0, {1, 2, 0, 3}, {N, h, L, d});
        Handle k = pick(1, {1, 2, 3, 0}, {N, h, d, L});
        Handle v = pick(2, {1, 2, 0, 3}, {N, h, L, d});
        Handle scores = s.emitOp("matmul", {q, k}, json::object(), {{N, h, L, L}})[0];
        if (!kw.contains("scale") || !kw["scale"].is_number()) unsupported(c, "scale must be a number");
        Handle scaled = scaleBy(scores, kw["scale"].get<double>(), {N, h, L, L});
        Handle probs = s.emitOp("softmax", {scaled}, json{{"dim", 3}}, {{N, h, L, L}})[0];
        const json p = kw.value("dropout_p", json(0.0));
        if (!p.is_number()) unsupported(c, "dropout_p must be a number");
        if (p.get<double>() != 0) {
            // The mask's part: this op's batch range, its heads and the whole sequence. A split
            // along the heads (h+) holds heads [r0/3d, r1/3d) of the logical H: rows [r0, r1) of
            // qkv_proj in its (h d 3) layout, the same rows of the bias and columns [r0/3, r1/3)
            // of out_proj, in which nnScaler divides h (the kwarg named like the split dim).
            const SubTensor& qsub = subOf(0);
            const SubTensor& wsub = subOf(1);
            const SubTensor& bsub = subOf(2);
            const SubTensor& osub = subOf(3);
            if (qsub.box[0].second - qsub.box[0].first != qsub.fullShape[0])
                unsupported(c, "an attention split along the sequence: its dropout mask cannot be related to the logical one");
            const std::int64_t r0 = wsub.box[0].first, r1 = wsub.box[0].second, rows = wsub.fullShape[0];
            const bool headsAligned = r1 - r0 == 3 * d * h && r0 % (3 * d) == 0 && rows % (3 * d) == 0 && bsub.box.size() == 1 &&
                                      bsub.box[0] == wsub.box[0] && bsub.fullShape[0] == rows && osub.box.size() == 2 && osub.fullShape[1] * 3 == rows &&
                                      osub.box[1].first * 3 == r0 && osub.box[1].second * 3 == r1;
            if (!headsAligned)
                unsupported(c, "an attention split along heads whose qkv_proj rows, bias and out_proj columns are not one range of whole heads: "
                               "its dropout mask cannot be related to the logical one");
            const std::int64_t heads = rows / (3 * d), head0 = r0 / (3 * d);
            SubTensor part;
            part.name = "attention dropout mask of " + qsub.name;
            part.fullShape = {qsub.fullShape[1], heads, L, L};
            part.box = {qsub.box[1], {head0, head0 + h}, {0, L}, {0, L}};
            Handle m = s.mask({N, h, L, L}, part);
            probs = s.emitOp("dropout", {probs, m}, json{{"p", exact(p, "p")}}, {{N, h, L, L}})[0];
        }
        Handle ctx = s.emitOp("matmul", {probs, v}, json::object(), {{N, h, L, d}})[0];
        Handle ctxT = s.emitOp("permute", {ctx}, json{{"dims", {2, 0, 1, 3}}}, {{L, N, h, d}})[0];
        Handle flat = s.emitOp("reshape", {ctxT}, json::object(), {{L, N, h * d}})[0];
        return {s.emitOp("linear", {flat, wo}, json::object(), {c.outShapes[0]})[0]};
    }
    if (ends(".feedforward")) {
        // examples/nlp/blocks/mlp.py: linear(x, proj1, proj1_bias), exact GELU, dropout, linear(proj2).
        needOutputs(1);
        noKwargsBut({"dropout", "is_training"});
        Handle x = tensorInput(c, 0), w1 = tensorInput(c, 1), b1 = tensorInput(c, 2), w2 = tensorInput(c, 3);
        const Shape xs = s.shapeOf(x), w1s = s.shapeOf(w1);
        if (xs.size() != 3 || w1s.size() != 2) unsupported(c, "expected x [L, N, E] and proj1 [H, E]");
        const Shape hidden = {xs[0], xs[1], w1s[0]};
        Handle a = s.emitOp("linear", {x, w1, b1}, json::object(), {hidden})[0];
        Handle g = s.emitOp("gelu", {a}, json::object(), {hidden})[0];
        const json p = kw.value("dropout", json(0.0));
        const json training = kw.value("is_training", json(true));
        if (!p.is_number() || !training.is_boolean()) unsupported(c, "dropout must be a number and is_training a boolean");
        if (training.get<bool>() && p.get<double>() != 0) {
            const SubTensor& xsub = subOf(0);
            const SubTensor& wsub = subOf(1);
            SubTensor part;
            part.name = "feedforward dropout mask of " + xsub.name;
            part.fullShape = {xsub.fullShape[0], xsub.fullShape[1], wsub.fullShape[0]};
            part.box = {xsub.box[0], xsub.box[1], wsub.box[0]};
            Handle m = s.mask(hidden, part);
            g = s.emitOp("dropout", {g, m}, json{{"p", exact(p, "p")}}, {hidden})[0];
        }
        return {s.emitOp("linear", {g, w2}, json::object(), {c.outShapes[0]})[0]};
    }
    if (ends(".gate_fw")) {
        // genmodel/model/llama3_moe: scores = sigmoid (or softmax) of linear(x, weight); the topk
        // experts, within the topk_groups best of n_groups groups (a group scored by its best
        // expert); weights = their scores (renormalized for sigmoid) times route_scale. Held
        // densely: output 0 is [tokens, experts] with each chosen expert's weight and 0 elsewhere,
        // output 1 the chosen experts' mask.
        needOutputs(2);
        noKwargsBut({"score_func", "bias", "n_groups", "topk_groups", "topk", "route_scale"});
        if (kw.contains("bias") && !kw["bias"].is_null()) unsupported(c, "a routing bias is not supported");
        Handle x = tensorInput(c, 0), w = tensorInput(c, 1);
        const Shape xs = s.shapeOf(x), ws = s.shapeOf(w);
        if (xs.size() != 2 || ws.size() != 2) unsupported(c, "expected x [tokens, h] and weight [experts, h]");
        const Shape dense = {xs[0], ws[0]};
        if (c.outShapes[0] != dense || c.outShapes[1] != dense) unsupported(c, "the routing outputs are not held densely");
        auto integer = [&](const char* key, std::int64_t dflt) {
            const json v = kw.value(key, json(dflt));
            if (!v.is_number_integer() || v.get<std::int64_t>() < 1) unsupported(c, std::string(key) + " must be a positive integer");
            return v.get<std::int64_t>();
        };
        const auto topk = integer("topk", 1), groups = integer("n_groups", 1), topkGroups = integer("topk_groups", groups);
        const std::string scoreFunc = kw.value("score_func", json("softmax")).is_string() ? kw.value("score_func", json("softmax")).get<std::string>() : "";
        if (scoreFunc != "sigmoid" && scoreFunc != "softmax") unsupported(c, "score_func must be sigmoid or softmax");
        const json scale = kw.value("route_scale", json(1));
        if (!scale.is_number()) unsupported(c, "route_scale must be a number");
        Handle logits = s.emitOp("linear", {x, w}, json::object(), {dense})[0];
        Handle scores = scoreFunc == "sigmoid" ? s.emitOp("sigmoid", {logits}, json::object(), {dense})[0]
                                               : s.emitOp("softmax", {logits}, json{{"dim", 1}}, {dense})[0];
        json route = {{"k", topk}};
        if (groups > 1) route.update({{"groups", groups}, {"topk_groups", topkGroups}, {"group_score", "max"}});
        Handle chosen = s.emitOp("topk_mask", {scores}, route, {dense})[0];
        Handle weights = s.emitOp("mul", {scores, chosen}, json::object(), {dense})[0];
        if (scoreFunc == "sigmoid") {
            Handle total = s.emitOp("sum", {weights}, json{{"dims", {1}}, {"keepdim", true}}, {{xs[0], 1}})[0];
            weights = s.emitOp("div", {weights, total}, json::object(), {dense})[0];
        }
        weights = s.emitOp("mul_scalar", {weights}, json{{"value", exact(scale, "route_scale")}}, {dense})[0];
        return {weights, chosen};
    }
    if (ends(".nnscaler_moe_gmm")) {
        // y[t] = sum over the chosen local experts e of weight[t, e] * W2_e (silu(W1_e x_t) * W3_e x_t),
        // with the local experts [local_expert_start, local_expert_end) of n_routed_experts; held
        // densely over the local experts (a token's unchosen experts have weight 0).
        needOutputs(1);
        noKwargsBut({"n_routed_experts", "local_expert_start", "local_expert_end"});
        if (c.in.size() != 6) unsupported(c, "expected 6 operands");
        Handle x = tensorInput(c, 0), weights = tensorInput(c, 2), w1 = tensorInput(c, 3), w3 = tensorInput(c, 4), w2 = tensorInput(c, 5);
        tensorInput(c, 1);  // the chosen experts: implied by the dense weights
        const Shape xs = s.shapeOf(x), rs = s.shapeOf(weights), w1s = s.shapeOf(w1), w2s = s.shapeOf(w2);
        auto integer = [&](const char* key) {
            if (!kw.contains(key) || !kw[key].is_number_integer()) unsupported(c, std::string(key) + " must be an integer");
            return kw[key].get<std::int64_t>();
        };
        const auto experts = integer("n_routed_experts"), start = integer("local_expert_start"), end = integer("local_expert_end");
        if (xs.size() != 2 || rs.size() != 2 || rs[1] != experts || w1s.size() != 3 || w2s.size() != 3 || s.shapeOf(w3) != w1s)
            unsupported(c, "expected x [tokens, h], dense routing [tokens, experts] and expert stacks [E, d, h], [E, d, h], [E, h, d]");
        const std::int64_t a = xs[0], h = xs[1], El = w1s[0], d = w1s[1];
        if (El > (std::int64_t(1) << 40) / std::max<std::int64_t>(d, 1)) unsupported(c, "the expert stacks are too large");
        if (start < 0 || end > experts || end - start != El) unsupported(c, "local experts [" + std::to_string(start) + ", " + std::to_string(end) + ") do not match the " + std::to_string(El) + " expert weights held");
        Handle local = start == 0 && end == experts ? weights : s.emitOp("slice", {weights}, json{{"dim", 1}, {"start", start}, {"end", end}}, {{a, El}})[0];
        auto up = [&](Handle wt) {
            Handle flat = s.emitOp("reshape", {wt}, json::object(), {{El * d, h}})[0];
            Handle y = s.emitOp("linear", {x, flat}, json::object(), {{a, El * d}})[0];
            return s.emitOp("reshape", {y}, json::object(), {{a, El, d}})[0];
        };
        Handle g1 = up(w1), g3 = up(w3);
        Handle act = s.emitOp("silu", {g1}, json::object(), {{a, El, d}})[0];
        Handle inter = s.emitOp("mul", {act, g3}, json::object(), {{a, El, d}})[0];
        Handle perExpert = s.emitOp("permute", {inter}, json{{"dims", {1, 0, 2}}}, {{El, a, d}})[0];
        Handle down = s.emitOp("matmul", {perExpert, w2}, json{{"transpose_b", true}}, {{El, a, h}})[0];
        Handle r = s.emitOp("permute", {local}, json{{"dims", {1, 0}}}, {{El, a}})[0];
        Handle r3 = s.emitOp("reshape", {r}, json::object(), {{El, a, 1}})[0];
        Handle weighted = s.emitOp("mul", {down, r3}, json::object(), {{El, a, h}})[0];
        return out1(s.emitOp("sum", {weighted}, json{{"dims", {0}}}, {{a, h}})[0]);
    }
    unsupported(c, "no semantics for this operator yet");
}

}  // namespace tv::nnscaler::detail
