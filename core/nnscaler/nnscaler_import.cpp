#include "nnscaler/nnscaler_import.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "model/text.hpp"
#include "ops/registry.hpp"
#include "model/instance_names.hpp"

namespace tv::nnscaler {

using json = nlohmann::json;
using Handle = GradBuilder::Handle;

namespace {

// ----- one graph being written ----------------------------------------------------------------

struct HandleInfo {
    std::string name;
    Shape shape;
    bool isInt = false;
    std::size_t tensorIndex = 0;
    std::int64_t producerOp = -1;  ///< index into the op array, -1 for an input
    std::uint32_t producerSlot = 0, uses = 0;
};

/// An op the lowering of one operator emitted, kept for its backward.
struct EmittedOp {
    std::string kind;
    json attrs;
    std::vector<Handle> inputs, outputs;
};

/// A forward operator as run on one rank and microbatch: its operand handles (-1 for
/// constants), its output handles and the registry ops in between.
struct Lowered {
    const Cell* cell = nullptr;
    std::vector<Handle> inputs, outputs;
    std::vector<EmittedOp> ops;
    /// Dropout masks the operator draws (inputs of the graph), with the part of the logical
    /// mask each holds: the box as a sub-tensor of the mask's full (per-microbatch) shape.
    std::vector<Handle> masks;
    std::vector<SubTensor> maskParts;
};

/// Writes the tensors and ops of one graph (the logical or the parallel one) as plan JSON.
class GraphWriter {
public:
    explicit GraphWriter(bool parallel) : parallel_(parallel) {}
    std::vector<HandleInfo> handles;
    json tensors = json::array(), ops = json::array();

    Handle tensor(const std::string& base, Shape shape, const char* role, bool isInt, int rank, int mb) {
        std::string name = fresh(tensorNames_, base);
        json t = {{"id", name}, {"shape", shape}};
        if (std::string_view(role) != "activation") t["role"] = role;
        if (isInt) t["dtype"] = "int";
        if (parallel_) t["rank"] = rank;
        if (parallel_ && mb >= 0) t["microbatch"] = mb;
        tensors.push_back(std::move(t));
        handles.push_back({name, std::move(shape), isInt, tensors.size() - 1, -1, 0, 0});
        return static_cast<Handle>(handles.size() - 1);
    }
    void op(const std::string& kind, const std::string& base, const std::vector<Handle>& ins, const std::vector<Handle>& outs,
            const json& attrs, int rank, int mb, const char* phase, const std::vector<int>* group = nullptr) {
        json o = {{"id", fresh(opNames_, base)}, {"op", kind}};
        json in = json::array(), out = json::array();
        for (auto h : ins) {
            in.push_back(handles[static_cast<std::size_t>(h)].name);
            ++handles[static_cast<std::size_t>(h)].uses;
        }
        for (std::size_t k = 0; k < outs.size(); ++k) {
            auto& hi = handles[static_cast<std::size_t>(outs[k])];
            out.push_back(hi.name);
            hi.producerOp = static_cast<std::int64_t>(ops.size());
            hi.producerSlot = static_cast<std::uint32_t>(k);
        }
        o["inputs"] = std::move(in);
        o["outputs"] = std::move(out);
        if (!attrs.is_null() && !attrs.empty()) o["attrs"] = attrs;
        if (phase) o["phase"] = phase;
        if (parallel_) {
            if (group) o["group"] = *group;
            else o["rank"] = rank;
            if (mb >= 0) o["microbatch"] = mb;
        }
        ops.push_back(std::move(o));
    }
    const std::string& name(Handle h) const { return handles[static_cast<std::size_t>(h)].name; }
    /// Names a freshly produced, not yet read tensor after what it holds (e.g. the nnScaler
    /// tensor an operator's lowering writes); others keep their names.
    void rename(Handle h, const std::string& base) {
        auto& hi = handles[static_cast<std::size_t>(h)];
        if (hi.producerOp < 0 || hi.uses > 0) return;
        std::string name = fresh(tensorNames_, base);
        tensors[hi.tensorIndex]["id"] = name;
        ops[static_cast<std::size_t>(hi.producerOp)]["outputs"][hi.producerSlot] = name;
        hi.name = std::move(name);
    }
    const Shape& shape(Handle h) const { return handles[static_cast<std::size_t>(h)].shape; }

private:
    static std::string fresh(std::unordered_map<std::string, int>& used, const std::string& base) {
        auto [it, inserted] = used.try_emplace(base, 0);
        if (inserted) return base;
        for (;;) {
            std::string n = base + "~" + std::to_string(++it->second);
            if (used.try_emplace(n, 0).second) return n;
        }
    }
    bool parallel_;
    std::unordered_map<std::string, int> tensorNames_, opNames_;
};

std::string sanitize(const std::string& s) {
    std::string out;
    for (char c : s) out += (c == ' ' || c == '"' || c == '\\' || static_cast<unsigned char>(c) < 32) ? '_' : c;
    return out.empty() ? "t" : out;
}

bool endsWith(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Shape extentOf(const SubTensor& t) {
    Shape s;
    for (const auto& [a, b] : t.box) s.push_back(b - a);
    return s;
}

/// The shape a sub-tensor is held at: complex tensors as [..., 2] (real, imaginary).
Shape localShape(const SubTensor& t) {
    Shape s = extentOf(t);
    if (t.dtype.rfind("complex", 0) == 0) s.push_back(2);
    return s;
}

bool isIntDtype(const std::string& d) { return d.rfind("int", 0) == 0 || d.rfind("uint", 0) == 0 || d == "bool" || d == "long"; }

std::string shapeText(const Shape& s) {
    std::string o = "(";
    for (std::size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
    return o + ")";
}

/// A number as exact rational text the checker can hold ("1e-05", "0.2", "2"); empty when it is
/// not a number or its shortest decimal form does not fit 64-bit numerator and denominator.
std::string numberText(const json& v) {
    if (!v.is_number()) return {};
    std::string s = v.dump();  // integers as they are, floats in their shortest round-trip form
    return Rational::parse(s) ? s : std::string();
}

// ----- the simulation of one program (one rank, or the logical device) ---------------------------

/// Emits the registry ops of one rank (or of the logical graph) and keeps its tensor state.
class RankSim : public GradBuilder {
public:
    RankSim(GraphWriter& g, bool logical) : g_(g), logical_(logical) {}
    int rank = -1;    ///< runtime rank (-1: logical)
    int shift = 0;    ///< rank shift of this replica
    int mb = -1;
    const char* phase = "forward";
    std::string prefix;
    Lowered* recording = nullptr;

    /// A fresh dropout mask of `shape` for the operator being lowered; `part` says which part of
    /// the logical mask it is (full shape per microbatch and box).
    Handle mask(const Shape& shape, SubTensor part) {
        Handle h = g_.tensor(prefix + ".dropout_mask" + (recording && !recording->masks.empty() ? "." + std::to_string(recording->masks.size()) : "") + where(),
                             shape, "input", false, rank, mb);
        if (recording) {
            recording->masks.push_back(h);
            recording->maskParts.push_back(std::move(part));
        }
        return h;
    }

    std::vector<Handle> emitOp(std::string_view op, std::vector<Handle> inputs, json attrs, std::vector<Shape> outShapes) override {
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
    Shape shapeOf(Handle h) const override { return g_.shape(h); }

    std::string where() const {
        if (logical_) return "";
        return instance::nnScalerSuffix(rank, mb);
    }

private:
    GraphWriter& g_;
    bool logical_;
};

// ----- operator lowerings ------------------------------------------------------------------------

/// The operands of one operator execution.
struct Call {
    const Plan& plan;
    const Cell& cell;
    std::vector<Handle> in;    ///< per input position: the tensor's handle, or -1 for a constant
    std::vector<Shape> outShapes;
    std::string where;         ///< for messages: "device 1, microbatch 0, cell #12"
};

[[noreturn]] void unsupported(const Call& c, const std::string& reason) {
    throw UnsupportedOperator(c.cell.signature, c.cell.annotation, c.where, reason);
}

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

std::vector<Handle> lowerForward(RankSim& s, const Call& c) {
    const auto& sig = c.cell.signature;
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
            // The mask's part: this op's batch range; every head (a split along the heads would
            // change what the runtime's h means) and the whole sequence.
            const SubTensor& qsub = subOf(0);
            const SubTensor& wsub = subOf(1);
            if (wsub.box[0].second - wsub.box[0].first != wsub.fullShape[0] || qsub.box[0].second - qsub.box[0].first != qsub.fullShape[0])
                unsupported(c, "an attention split along heads or the sequence: its dropout mask cannot be related to the logical one");
            SubTensor part;
            part.name = "attention dropout mask of " + qsub.name;
            part.fullShape = {qsub.fullShape[1], h, L, L};
            part.box = {qsub.box[1], {0, h}, {0, L}, {0, L}};
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

// ----- lineage ----------------------------------------------------------------------------------

/// One parallel tensor claimed to hold part of a logical tensor.
struct Instance {
    Handle parallel = -1;
    const SubTensor* psub = nullptr;
    int replica = 0, mb = 0;
};

struct Site {
    Handle logical = -1;
    const SubTensor* lsub = nullptr;
    std::vector<Instance> instances;
};

// ----- the importer ----------------------------------------------------------------------------

struct CollectiveKey {
    std::int64_t adapter = 0;
    int prim = 0, mb = 0;
    std::int64_t tensor = -1;
    std::vector<int> group;
    auto tie() const { return std::tie(adapter, prim, mb, tensor, group); }
    bool operator<(const CollectiveKey& o) const { return tie() < o.tie(); }
};

struct Collective {
    std::string kind;
    json attrs = json::object();
    std::vector<int> group;
    std::map<int, Handle> in, out;  ///< by rank
    std::string where;
};

struct Importer {
    const Plan& L;
    const Plan& P;
    ImportOptions opt;
    ImportResult result;
    GraphWriter lg{false}, pg{true};
    int devices = 1, dp = 1, nm = 1;

    // Tensor state: what each (rank, sub-tensor id, microbatch) currently is.
    std::map<std::tuple<int, std::int64_t, int>, Handle> state;
    // Weight-gradient buffers: (rank, gradient full tensor, box start) -> handle.
    std::map<std::tuple<int, std::int64_t, std::vector<std::int64_t>>, Handle> gradBuffers;
    // Data loader outputs not read yet: (rank, id, mb) -> output position.
    std::map<std::tuple<int, std::int64_t, int>, int> pendingData;
    // Forward executions: (rank, cell id, mb) -> lowering.
    std::map<std::tuple<int, std::int64_t, int>, Lowered> lowered;
    // Backward executions: (rank, cell id, mb) -> incoming gradient handle per forward output.
    std::map<std::tuple<int, std::int64_t, int>, std::vector<Handle>> incoming;
    std::map<CollectiveKey, Collective> collectives;
    // Initial reads: inputs, weights, buffers, the loss seed.
    struct InitialRead {
        int rank, mb;
        Handle handle;
        const SubTensor* sub;
        int dataOutput = -1;  ///< data loader output position
        std::string constant; ///< a constant computed from shapes alone (the causal mask): its signature and shape
    };
    std::vector<InitialRead> initialReads;
    /// Chunks whose runtime piece (the rank's position in the sorted group, as nnScaler's
    /// runtime and torch number group members) differs from the piece the index map labels.
    struct Mismatch {
        std::size_t count = 0;
        std::string example;
    };
    std::map<std::int64_t, Mismatch> chunkMismatches;

    Importer(const Plan& l, const Plan& p, const ImportOptions& o) : L(l), P(p), opt(o) {
        findDenseRouting(l);
        findDenseRouting(p);
    }

    /// MoE routing (gate_fw's weights and indices, [tokens, k], and their gradients) is held
    /// densely as [tokens, experts]: the routing weight of every expert, 0 where not chosen, and
    /// the chosen experts' mask. The full tensors so held, with the number of experts.
    std::map<std::pair<bool, std::int64_t>, std::int64_t> denseFull;  ///< (logical plan?, full tensor) -> experts
    bool inLogical(const SubTensor& t) const {
        auto it = L.tensors.find(t.id);
        return it != L.tensors.end() && &it->second == &t;
    }
    void findDenseRouting(const Plan& plan) {
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
    SubTensor adjusted(const SubTensor& t) const {
        auto it = denseFull.find({inLogical(t), t.fullId});
        if (it == denseFull.end() || t.box.empty()) return t;
        SubTensor a = t;
        a.fullShape.back() = it->second;
        a.box.back() = {0, it->second};
        a.dtype = "float32";
        return a;
    }
    Shape shapeOf(const SubTensor& t) const { return localShape(adjusted(t)); }
    bool isInt(const SubTensor& t) const { return isIntDtype(adjusted(t).dtype); }

    void note(const std::string& s) {
        if (std::find(result.notes.begin(), result.notes.end(), s) == result.notes.end()) result.notes.push_back(s);
    }

    const SubTensor& sub(const Plan& plan, std::int64_t id) const { return plan.tensors.at(id); }

    static bool isCreateMask(const Cell& c) {
        return c.signature == "genmodel.model.llama3_adpt.model.create_mask" || c.signature == "genmodel.model.llama3_moe.model.create_mask";
    }

    static const char* roleOf(const SubTensor& t) {
        if (t.isAttr && !t.isGrad) return t.requiresGrad ? "weight" : "input";
        if (t.isGrad) return "gradient";
        if (t.isLoss) return "loss";
        return "activation";
    }

    std::string tensorBase(const SubTensor& t) const { return sanitize(t.name) + "#" + std::to_string(t.id); }

    // ----- reading and writing tensors -----

    Handle read(const Plan& plan, GraphWriter& g, RankSim& s, std::int64_t id, const std::string& where) {
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

    static std::vector<std::int64_t> boxStart(const SubTensor& t) {
        std::vector<std::int64_t> v;
        for (const auto& [a, b] : t.box) v.push_back(a), v.push_back(b);
        return v;
    }

    /// A write: a gradient adds to what the tensor already holds (microbatches, tied weights, two
    /// producers); anything else replaces it.
    void write(GraphWriter& g, RankSim& s, const SubTensor& t, Handle h, bool replace = false) {
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
            it->second = accumulate(g, s, it->second, h, t);
            return;
        }
        state[key] = h;
    }

    Handle accumulate(GraphWriter& g, RankSim& s, Handle old, Handle add, const SubTensor& t) {
        Handle out = g.tensor(tensorBase(t) + ".acc" + s.where(), shapeOf(t), "gradient", false, s.rank, t.isAttr ? -1 : s.mb);
        g.op("add", "accumulate." + tensorBase(t) + s.where(), {old, add}, {out}, json::object(), s.rank, s.mb, "backward");
        return out;
    }

    // ----- running the programs -----

    void runProgram(const Plan& plan, GraphWriter& g, int device, int replica, bool logical) {
        RankSim s(g, logical);
        s.rank = logical ? -1 : replica * devices + device;
        s.shift = replica * devices;
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
                        initialReads.push_back({s.rank, s.mb, h, &sub(plan, c.outputs[0].tensor), -1, c.signature + shapeText(ms)});
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
                    adapter(plan, g, s, c, where);
                    break;
                case CellKind::Reducer:
                    reducer(plan, g, s, c, where);
                    break;
            }
        }
    }

    void backward(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, int mbKey, const std::string& where) {
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
    std::vector<Handle> vjp(GraphWriter& g, RankSim& s, const Lowered& fw, const std::vector<Handle>& outGrads) {
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

    std::vector<int> groupOf(const json& kwargs, const std::string& key, int shift, const std::string& where) const {
        std::vector<int> gr;
        if (!kwargs.contains(key) || !kwargs[key].is_array()) throw NnScalerError(where + ": the primitive has no \"" + key + "\" list");
        for (const auto& r : kwargs[key]) {
            if (!r.is_number_integer() || r.get<std::int64_t>() < 0 || r.get<std::int64_t>() >= devices)
                throw NnScalerError(where + ": rank " + r.dump() + " in \"" + key + "\" is not a plan device");
            gr.push_back(static_cast<int>(r.get<std::int64_t>()) + shift);
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
    Collective& member(const CollectiveKey& key, const std::string& kind, const json& attrs, const std::vector<int>& group, const std::string& where,
                       bool groupInKey = false) {
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
    static void knownKeywordsOnly(const Primitive& pr, const std::string& where) {
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

    void adapter(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, const std::string& where) {
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
            auto group = groupOf(pr.kwargs, "ranks", s.shift, where);
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
                auto src = groupOf(json{{"r", json::array({pr.kwargs.value("src", json())})}}, "r", s.shift, where + " (src)")[0];
                auto dst = groupOf(json{{"r", json::array({pr.kwargs.value("dst", json())})}}, "r", s.shift, where + " (dst)")[0];
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
                auto ranks = groupOf(pr.kwargs, "ranks", s.shift, where);
                int src = groupOf(json{{"r", json::array({pr.kwargs.value("src", json())})}}, "r", s.shift, where + " (src)")[0];
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
            auto group = groupOf(pr.kwargs, "ranks", s.shift, where);
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

    int normDimOf(std::int64_t d, std::size_t rank, const std::string& where) const {
        auto r = static_cast<std::int64_t>(rank);
        if (d < -r || d >= r) throw NnScalerError(where + ": dim " + std::to_string(d) + " is outside a tensor of rank " + std::to_string(rank));
        return static_cast<int>(d < 0 ? d + r : d);
    }

    /// One member's part of a primitive: identity and chunk are local, the rest collectives.
    void localOrCollective(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, int pi, const std::string& kind, json attrs,
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
                    if (labelled != attrs["index"].get<int>()) {
                        auto& m = chunkMismatches[c.id];
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
        CollectiveKey key{c.id, pi, s.mb, -1, group};
        auto& col = member(key, kind, attrs, group, where);
        col.in[s.rank] = in;
        Handle out = g.tensor(tensorBase(tout) + "." + kind + s.where(), shapeOf(tout), roleOf(tout), isInt(tout), s.rank, s.mb);
        col.out[s.rank] = out;
        write(g, s, tout, out, replace);
    }

    /// A reducer's group: its devices on every replica, sorted, built once per reducer (its
    /// every execution, one per rank, shares it). Every cell with the reducer's id must span the
    /// same devices.
    struct ReducerGroup {
        std::vector<int> devices, ranks;
        std::string where;
    };
    std::map<std::int64_t, ReducerGroup> reducerGroups;
    const std::vector<int>& reducerGroup(const Cell& c, const std::string& where) {
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
            for (int r = 0; r < dp; ++r) rg.ranks.push_back(d + r * devices);
        }
        std::sort(rg.ranks.begin(), rg.ranks.end());
        if (std::adjacent_find(rg.ranks.begin(), rg.ranks.end()) != rg.ranks.end())
            throw NnScalerError(where + ": the reducer lists a device twice: " + json(c.devices).dump());
        result.groupRanksHandled += rg.ranks.size();
        return rg.ranks;
    }

    void reducer(const Plan& plan, GraphWriter& g, RankSim& s, const Cell& c, const std::string& where) {
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
            col.in[s.rank] = in;
            Handle out = g.tensor(tensorBase(w) + ".grad.reduced" + s.where(), shapeOf(w), "gradient", false, s.rank, -1);
            col.out[s.rank] = out;
            gradBuffers[key] = out;
        }
    }

    /// The gradient (full tensor) of a weight, from the first cell input that names both: found
    /// by one pass over the plan, made once (a reducer asks for every weight on every rank).
    std::map<std::int64_t, std::int64_t> gradFull_;
    const Plan* gradFullOfPlan_ = nullptr;
    std::int64_t gradFullOf(const Plan& plan, std::int64_t weightFull) {
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

    void emitCollectives() {
        for (auto& [key, col] : collectives) {
            std::vector<Handle> ins, outs;
            if (col.kind == "send_recv") {
                if (!col.in.count(col.group[0]))
                    throw NnScalerError(col.where + ": rank " + std::to_string(col.group[0]) + " never sends what this move receives");
                if (!col.out.count(col.group[1]))
                    throw NnScalerError(col.where + ": rank " + std::to_string(col.group[1]) + " never receives what this move sends");
                pg.op("send_recv", "send_recv." + std::to_string(key.adapter) + (key.mb >= 0 ? ".m" + std::to_string(key.mb) : "") + ".r" +
                                       std::to_string(col.group[0]) + "-r" + std::to_string(col.group[1]),
                      {col.in[col.group[0]]}, {col.out[col.group[1]]}, col.attrs, -1, key.mb, "communication", &col.group);
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
            std::string base = col.kind + "." + std::to_string(key.adapter) + (key.mb >= 0 ? ".m" + std::to_string(key.mb) : "") + ".g" +
                               std::to_string(col.group[0]);
            pg.op(col.kind, base, ins, outs, col.attrs, -1, key.mb, "communication", &col.group);
        }
    }

    // ----- lineage -----

    std::set<std::int64_t> claimedGradients;
    std::map<std::int64_t, std::int64_t> logicalGradOf;  ///< logical weight full tensor -> its gradient's
    std::unordered_set<std::string> claimed;
    bool batchNoted_ = false;
    json records = json::array();

    /// The box a parallel sub-tensor of lane (replica, mb) covers in the logical handle's
    /// coordinates: the batch dimension (the one dimension where the full shapes differ) is
    /// shifted by the lane's position. False if the two cannot be related.
    bool logicalBox(const SubTensor& p, const SubTensor& l, int replica, int mb, std::vector<std::pair<std::int64_t, std::int64_t>>& box) {
        if (p.fullShape.size() != l.fullShape.size()) return false;
        int batch = -1;
        for (std::size_t d = 0; d < p.fullShape.size(); ++d)
            if (p.fullShape[d] != l.fullShape[d]) {
                if (batch >= 0) return false;
                batch = static_cast<int>(d);
            }
        box = p.box;
        if (batch >= 0) {
            const auto b = static_cast<std::size_t>(batch);
            const std::int64_t lanes = static_cast<std::int64_t>(dp) * nm;
            std::int64_t total = 0;
            if (__builtin_mul_overflow(lanes, p.fullShape[b], &total) || l.fullShape[b] != total) {
                if (!batchNoted_) note("the parallel plan's " + p.name + " has " + std::to_string(p.fullShape[b]) + " in dimension " + std::to_string(b) + " per microbatch; " +
                     std::to_string(dp) + " replica(s) x " + std::to_string(nm) + " microbatch(es) of it make " + std::to_string(total) +
                     ", but the logical plan's has " + std::to_string(l.fullShape[b]) + ": the lanes do not tile the logical batch (the first of the tensors affected)");
                batchNoted_ = true;
                return false;
            }
            const std::int64_t lane = static_cast<std::int64_t>(replica) * nm + std::max(mb, 0);
            box[b].first += lane * p.fullShape[b];
            box[b].second += lane * p.fullShape[b];
        }
        for (std::size_t d = 0; d < box.size(); ++d) {
            box[d].first -= l.box[d].first;
            box[d].second -= l.box[d].first;
            if (box[d].first < 0 || box[d].second > l.box[d].second - l.box[d].first) return false;
        }
        return true;
    }

    /// Appends the lineage record a site claims, leaving out parallel tensors an earlier record
    /// already describes. Returns false (and writes nothing) when the site's parts do not make up
    /// whole values.
    bool addRecord(const Site& site) {
        const SubTensor l = adjusted(*site.lsub);
        if (l.parts != 1) return false;
        const bool laneSum = l.isLoss && !l.isGrad;
        // box -> lane -> parts -> part index -> handles
        using Parts = std::map<std::int64_t, std::map<std::int64_t, std::vector<Handle>>>;
        std::map<std::vector<std::pair<std::int64_t, std::int64_t>>, std::map<std::pair<int, int>, Parts>> groups;
        for (const auto& in : site.instances) {
            if (claimed.count(pg.name(in.parallel))) continue;
            std::vector<std::pair<std::int64_t, std::int64_t>> box;
            if (!logicalBox(adjusted(*in.psub), l, in.replica, in.mb, box)) return false;
            if (in.psub->dtype.rfind("complex", 0) == 0) box.emplace_back(0, 2);
            groups[box][{in.replica, std::max(in.mb, 0)}][in.psub->parts][in.psub->part].push_back(in.parallel);
        }
        if (groups.empty()) return false;
        if (laneSum && groups.size() != 1) return false;
        auto laneCopies = [&](const Parts& parts, std::vector<std::vector<Handle>>& copies) {
            for (const auto& [n, byPart] : parts) {
                if (n == 1) {
                    for (auto h : byPart.begin()->second) copies.push_back({h});
                    continue;
                }
                if (static_cast<std::int64_t>(byPart.size()) != n) return false;
                std::size_t count = byPart.begin()->second.size();
                for (const auto& [i, hs] : byPart)
                    if (hs.size() != count) return false;
                for (std::size_t c = 0; c < count; ++c) {
                    std::vector<Handle> copy;
                    for (const auto& [i, hs] : byPart) copy.push_back(hs[c]);
                    copies.push_back(std::move(copy));
                }
            }
            return true;
        };
        json slices = json::array();
        std::int64_t covered = 0;
        for (const auto& [box, lanes] : groups) {
            std::vector<std::vector<Handle>> copies;
            if (laneSum) {
                std::vector<std::vector<std::vector<Handle>>> perLane;
                for (const auto& [lane, parts] : lanes) {
                    perLane.emplace_back();
                    if (!laneCopies(parts, perLane.back()) || perLane.back().empty()) return false;
                }
                if (static_cast<std::int64_t>(perLane.size()) != static_cast<std::int64_t>(dp) * nm) return false;
                // As many copies as every lane has (a parallel tensor appears in one copy only).
                std::size_t fewest = perLane.front().size();
                for (const auto& c : perLane) fewest = std::min(fewest, c.size());
                for (std::size_t k = 0; k < fewest; ++k) {
                    std::vector<Handle> copy;
                    for (const auto& c : perLane) copy.insert(copy.end(), c[k].begin(), c[k].end());
                    copies.push_back(std::move(copy));
                }
            } else {
                for (const auto& [lane, parts] : lanes)
                    if (!laneCopies(parts, copies)) return false;
            }
            json jb = json::array();
            for (const auto& [a, b] : box) jb.push_back({a, b});
            json jc = json::array();
            for (const auto& copy : copies) {
                json terms = json::array();
                for (auto h : copy) terms.push_back(pg.name(h));
                jc.push_back(std::move(terms));
            }
            slices.push_back({{"box", std::move(jb)}, {"copies", std::move(jc)}});
            std::int64_t volume = 1;
            for (const auto& [a, b] : box) volume *= b - a;
            covered += volume;
        }
        // Only records that cover their logical tensor (disjoint boxes, so volumes add up).
        if (covered != numel(lg.shape(site.logical))) return false;
        for (const auto& in : site.instances) claimed.insert(pg.name(in.parallel));
        records.push_back({{"logical", lg.name(site.logical)}, {"slices", std::move(slices)}});
        return true;
    }

    static bool skippedInAlignment(const Cell& c) {
        return c.signature == "nnscaler.runtime.function.multiref" || c.signature == "nnscaler.runtime.function.identity";
    }

    int rankOfParallel(Handle h) const {
        const auto& t = pg.tensors[pg.handles[static_cast<std::size_t>(h)].tensorIndex];
        return t.contains("rank") ? t["rank"].get<int>() : -1;
    }

    bool sameOperator(const Cell& l, const Cell& p) const {
        if (l.signature != p.signature || l.annotation != p.annotation || l.inputs.size() != p.inputs.size() || l.outputs.size() != p.outputs.size())
            return false;
        for (std::size_t k = 0; k < l.inputs.size(); ++k) {
            const auto& a = l.inputs[k];
            const auto& b = p.inputs[k];
            if ((a.tensor >= 0) != (b.tensor >= 0)) return false;
            if (a.tensor < 0) continue;
            const auto& ta = L.tensors.at(a.tensor);
            const auto& tb = P.tensors.at(b.tensor);
            // Weights keep their ids across the two files; a weight read through a multiref
            // (a new full tensor of the same name) keeps its name.
            if (ta.isParameter() && (tb.isParameter() ? ta.fullId != tb.fullId : ta.name != tb.name)) return false;
            if (tb.isParameter() && !ta.isParameter()) return false;
        }
        return true;
    }

    void buildLineage() {
        const int ldev = L.programs.begin()->first;
        std::vector<const Cell*> lf;
        for (const auto& c : L.programs.at(ldev))
            if (c.kind == CellKind::Forward && !skippedInAlignment(c)) lf.push_back(&c);
        std::map<std::int64_t, const Cell*> logicalCell;
        for (const auto& c : L.programs.at(ldev)) logicalCell[c.id] = &c;
        // Align each device's forward operators of each microbatch with a run of the logical ones.
        std::map<std::pair<int, std::int64_t>, std::map<int, const Cell*>> aligned;  // (device, cell) -> mb -> logical cell
        for (const auto& [d, cells] : P.programs) {
            std::map<int, std::vector<const Cell*>> seqs;
            for (const auto& c : cells)
                if (c.kind == CellKind::Forward && !skippedInAlignment(c)) seqs[c.microbatch].push_back(&c);
            for (const auto& [mb, seq] : seqs) {
                std::vector<std::size_t> found;
                for (std::size_t o = 0; o + seq.size() <= lf.size(); ++o) {
                    bool ok = true;
                    for (std::size_t i = 0; i < seq.size() && ok; ++i) ok = sameOperator(*lf[o + i], *seq[i]);
                    if (ok) found.push_back(o);
                }
                if (found.size() != 1) {
                    note("device " + std::to_string(d) + ", microbatch " + std::to_string(mb) + ": its " + std::to_string(seq.size()) + " forward operators " +
                         (found.empty() ? "match no run of the logical plan's" : "match several runs of the logical plan's") +
                         "; only the loss and the weight gradients are checked for them");
                    continue;
                }
                for (std::size_t i = 0; i < seq.size(); ++i) aligned[{d, seq[i]->id}][mb] = lf[found[0] + i];
            }
        }
        // Sites: where a logical tensor and its parallel instances meet.
        std::map<std::tuple<int, std::int64_t, int, int>, Site> sites;  // (logical order, logical cell, kind, position)
        std::map<std::int64_t, int> order;
        {
            int k = 0;
            for (const auto& c : L.programs.at(ldev)) order[c.id] = k++;
        }
        auto addSite = [&](const Cell& lc, int kind, int pos, Handle lh, const SubTensor& lsub, Handle ph, const SubTensor& psub, int replica, int mb) {
            if (lh < 0 || ph < 0) return;
            auto& site = sites[{order[lc.id], lc.id, kind, pos}];
            site.logical = lh;
            site.lsub = &lsub;
            site.instances.push_back({ph, &psub, replica, mb});
        };
        for (const auto& [key, low] : lowered) {
            auto [rank, cellId, mb] = key;
            if (rank < 0) continue;
            const int d = rank % devices, replica = rank / devices;
            auto al = aligned.find({d, cellId});
            if (al == aligned.end()) continue;
            auto am = al->second.find(mb);
            if (am == al->second.end()) continue;
            const Cell& lc = *am->second;
            const Lowered& ll = lowered.at({-1, lc.id, 0});
            const Cell& pc = *low.cell;
            for (std::size_t k = 0; k < pc.inputs.size(); ++k)
                if (pc.inputs[k].tensor >= 0)
                    addSite(lc, 0, static_cast<int>(k), ll.inputs[k], L.tensors.at(lc.inputs[k].tensor), low.inputs[k], P.tensors.at(pc.inputs[k].tensor), replica, mb);
            for (std::size_t k = 0; k < pc.outputs.size(); ++k)
                addSite(lc, 1, static_cast<int>(k), ll.outputs[k], L.tensors.at(lc.outputs[k].tensor), low.outputs[k], P.tensors.at(pc.outputs[k].tensor), replica, mb);
        }
        for (const auto& [key, grads] : incoming) {
            auto [rank, cellId, mb] = key;
            if (rank < 0) continue;
            const int d = rank % devices, replica = rank / devices;
            const Cell* bw = nullptr;
            for (const auto& c : P.programs.at(d))
                if (c.id == cellId) { bw = &c; break; }
            if (!bw) continue;
            auto al = aligned.find({d, bw->mirror});
            if (al == aligned.end()) continue;
            auto am = al->second.find(mb);
            if (am == al->second.end()) continue;
            const Cell& lfc = *am->second;
            auto lin = incoming.find({-1, lfc.mirror, 0});
            if (lin == incoming.end()) continue;
            const Cell& pfc = *lowered.at({rank, bw->mirror, mb}).cell;
            for (std::size_t k = 0; k < grads.size() && k < lin->second.size(); ++k) {
                if (grads[k] < 0 || lin->second[k] < 0) continue;
                auto pg_ = pfc.outputs[k].grad, lg_ = lfc.outputs[k].grad;
                if (pg_ < 0 || lg_ < 0) continue;
                addSite(*logicalCell.at(lfc.mirror), 2, static_cast<int>(k), lin->second[k], L.tensors.at(lg_), grads[k], P.tensors.at(pg_), replica, mb);
            }
        }
        // Initial records: inputs, weights, buffers and the loss seed.
        std::vector<Site> initial;
        std::map<std::pair<int, std::int64_t>, std::size_t> initialIndex;  // (kind, key) -> site
        auto logicalInitial = [&](const InitialRead& pr) -> const InitialRead* {
            for (const auto& lr : initialReads) {
                if (lr.rank >= 0) continue;
                if (!pr.constant.empty() || !lr.constant.empty()) {
                    if (pr.constant == lr.constant) return &lr;
                    continue;
                }
                if (pr.dataOutput >= 0 ? lr.dataOutput == pr.dataOutput
                                       : (pr.sub->isAttr ? lr.sub->isAttr && lr.sub->fullId == pr.sub->fullId
                                                         : lr.sub->isGrad && lr.sub->isLoss && pr.sub->isGrad && pr.sub->isLoss))
                    return &lr;
            }
            return nullptr;
        };
        for (const auto& pr : initialReads) {
            if (pr.rank < 0) continue;
            const InitialRead* lr = logicalInitial(pr);
            if (!lr) {
                note("parallel input " + pr.sub->name + " (sub-tensor " + std::to_string(pr.sub->id) + ") has no counterpart in the logical plan");
                continue;
            }
            auto [it, inserted] = initialIndex.try_emplace({0, lr->handle}, initial.size());
            if (inserted) initial.push_back(Site{lr->handle, lr->sub, {}});
            initial[it->second].instances.push_back({pr.handle, pr.sub, pr.rank / devices, pr.mb});
        }
        // Dropout masks: each aligned execution's mask is its part of the logical operator's.
        std::deque<SubTensor> maskSubs;
        std::map<Handle, std::size_t> maskSite;
        for (const auto& [key, low] : lowered) {
            auto [rank, cellId, mb] = key;
            if (rank < 0 || low.masks.empty()) continue;
            const int d = rank % devices, replica = rank / devices;
            auto al = aligned.find({d, cellId});
            if (al == aligned.end() || !al->second.count(mb)) {
                note("the dropout masks of operator #" + std::to_string(cellId) + " on rank " + std::to_string(rank) + " cannot be related to the logical plan's");
                continue;
            }
            const Lowered& ll = lowered.at({-1, al->second.at(mb)->id, 0});
            for (std::size_t k = 0; k < low.masks.size() && k < ll.masks.size(); ++k) {
                auto [it, inserted] = maskSite.try_emplace(ll.masks[k], initial.size());
                if (inserted) {
                    maskSubs.push_back(ll.maskParts[k]);
                    initial.push_back(Site{ll.masks[k], &maskSubs.back(), {}});
                }
                maskSubs.push_back(low.maskParts[k]);
                initial[it->second].instances.push_back({low.masks[k], &maskSubs.back(), replica, mb});
            }
        }
        // The data: every lane's batch must be its own part of the logical batch.
        std::set<Handle> dataHandles;
        for (const auto& r : initialReads)
            if (r.rank < 0 && r.dataOutput >= 0) dataHandles.insert(r.handle);
        const std::int64_t lanes = static_cast<std::int64_t>(dp) * nm;
        for (const auto& site : initial) {
            if (!dataHandles.count(site.logical) || !result.findings.empty()) continue;
            for (const auto& in : site.instances) {
                const auto& p = *in.psub;
                const auto& l = *site.lsub;
                std::vector<std::size_t> differ;
                for (std::size_t d = 0; d < p.fullShape.size() && d < l.fullShape.size(); ++d)
                    if (p.fullShape[d] != l.fullShape[d]) differ.push_back(d);
                std::int64_t total = 0;
                const bool tiles = p.fullShape.size() == l.fullShape.size() &&
                                   (differ.empty() ? lanes == 1
                                                   : differ.size() == 1 && !__builtin_mul_overflow(lanes, p.fullShape[differ[0]], &total) &&
                                                         total == l.fullShape[differ[0]]);
                if (tiles) continue;
                MappingFinding f;
                f.logicalTensor = lg.name(site.logical);
                f.parallelTensor = pg.name(in.parallel);
                f.rank = rankOfParallel(in.parallel);
                f.microbatch = in.mb;
                const std::string lanesText = std::to_string(dp) + " data-parallel replica(s) x " + std::to_string(nm) + " microbatch(es)";
                if (differ.size() == 1 && p.fullShape.size() == l.fullShape.size() && !__builtin_mul_overflow(lanes, p.fullShape[differ[0]], &total))
                    f.message = "the parallel plan processes " + std::to_string(total) + " samples per step (" + lanesText + " x " +
                                std::to_string(p.fullShape[differ[0]]) + " in dimension " + std::to_string(differ[0]) + " of " + p.name +
                                ") where the logical plan processes " + std::to_string(l.fullShape[differ[0]]) +
                                ": its data loaders do not split the logical batch, so it does not compute the logical training step";
                else if (differ.empty())
                    f.message = "each of the parallel plan's " + std::to_string(lanes) + " lanes (" + lanesText + ") loads " + p.name + " whole, " +
                                shapeText(l.fullShape) + " as the logical plan does: it processes " + std::to_string(lanes) +
                                " times the logical batch per step, so it does not compute the logical training step";
                else
                    f.message = "the parallel plan's " + p.name + " is " + shapeText(p.fullShape) + " per microbatch, which does not split the logical " +
                                shapeText(l.fullShape) + " into " + lanesText + ": it does not compute the logical training step";
                result.findings.push_back(std::move(f));
                break;
            }
        }
        for (const auto& site : initial)
            if (!addRecord(site))
                note("the inputs of logical tensor " + lg.name(site.logical) + " do not make up whole values; they are not related to it");
        for (const auto& [key, site] : sites) addRecord(site);
        // Final records: every weight gradient, on every rank holding the weight.
        for (const auto& [key, lh] : gradBuffers) {
            auto [rank, gradFull, box] = key;
            if (rank >= 0) continue;
            // The logical weight whose gradient this is.
            const InitialRead* lw = nullptr;
            for (const auto& r : initialReads)
                if (r.rank < 0 && r.sub->isParameter() && logicalGradOf.count(r.sub->fullId) && logicalGradOf.at(r.sub->fullId) == gradFull) lw = &r;
            if (!lw) continue;
            claimedGradients.insert(lw->sub->fullId);
            Site site{lh, lw->sub, {}};
            for (const auto& r : initialReads) {
                if (r.rank < 0 || !r.sub->isParameter() || r.sub->fullId != lw->sub->fullId) continue;
                auto it = gradBuffers.find({r.rank, gradFull, boxStart(*r.sub)});
                Handle h;
                if (it != gradBuffers.end()) h = it->second;
                else {
                    note("rank " + std::to_string(r.rank) + " holds weight " + r.sub->name + " but no op writes its gradient");
                    h = pg.tensor(tensorBase(*r.sub) + ".grad-missing@r" + std::to_string(r.rank), shapeOf(*r.sub), "gradient", false, r.rank, -1);
                }
                site.instances.push_back({h, r.sub, r.rank / devices, -1});
            }
            if (site.instances.empty()) {
                result.unchecked.push_back("no rank of the parallel plan holds weight " + lw->sub->name);
                continue;
            }
            // The gradient tensors stand in for the weight's sub-tensors (same boxes).
            if (!addRecord(site)) result.unchecked.push_back("the gradient of weight " + lw->sub->name + " could not be related to the parallel plan's");
        }
        // The final claims must all be there: the loss, and the gradient of every weight the
        // logical step trains. What the mapping could not claim leaves the verdict inconclusive.
        for (const auto& r : initialReads)
            if (r.rank < 0 && r.sub->isParameter() && logicalGradOf.count(r.sub->fullId) && !claimedGradients.count(r.sub->fullId))
                result.unchecked.push_back("the gradient of weight " + r.sub->name + " has no counterpart in the parallel plan");
        bool lossClaimed = false, hasLoss = false;
        for (const auto& [key, low] : lowered) {
            if (std::get<0>(key) >= 0) continue;
            for (std::size_t k = 0; k < low.cell->outputs.size(); ++k) {
                const auto& t = L.tensors.at(low.cell->outputs[k].tensor);
                if (!t.isLoss || t.isGrad) continue;
                hasLoss = true;
                for (const auto& rec : records) lossClaimed = lossClaimed || rec["logical"] == lg.name(low.outputs[k]);
            }
        }
        if (hasLoss && !lossClaimed) result.unchecked.push_back("the loss could not be related to the parallel plan's");
    }
};

/// Removes the ops nothing uses (dead data loaders' consumers, the data gradient, gradients of
/// masks and tables the lowering computes alongside, outputs collected for printing) and the
/// tensors only they touched. Tensors named in `keep` (the lineage) stay.
void removeDeadOps(GraphWriter& g, const std::unordered_set<std::string>& keep) {
    const std::size_t n = g.ops.size();
    std::unordered_map<std::string, std::size_t> producer, uses;
    for (std::size_t i = 0; i < n; ++i) {
        for (const auto& t : g.ops[i]["outputs"]) producer[t.get<std::string>()] = i;
        for (const auto& t : g.ops[i]["inputs"]) ++uses[t.get<std::string>()];
    }
    std::vector<bool> dead(n, false);
    auto isDead = [&](std::size_t i) {
        for (const auto& t : g.ops[i]["outputs"]) {
            const auto& name = t.get_ref<const std::string&>();
            if (keep.count(name) || uses[name] > 0) return false;
        }
        return true;
    };
    std::vector<std::size_t> work;
    for (std::size_t i = 0; i < n; ++i)
        if (isDead(i)) work.push_back(i);
    while (!work.empty()) {
        auto i = work.back();
        work.pop_back();
        if (dead[i] || !isDead(i)) continue;
        dead[i] = true;
        for (const auto& t : g.ops[i]["inputs"]) {
            const auto& name = t.get_ref<const std::string&>();
            if (--uses[name] == 0)
                if (auto it = producer.find(name); it != producer.end() && !dead[it->second]) work.push_back(it->second);
        }
    }
    json ops = json::array();
    std::unordered_set<std::string> live(keep.begin(), keep.end());
    for (std::size_t i = 0; i < n; ++i) {
        if (dead[i]) continue;
        for (const auto& t : g.ops[i]["inputs"]) live.insert(t.get<std::string>());
        for (const auto& t : g.ops[i]["outputs"]) live.insert(t.get<std::string>());
        ops.push_back(std::move(g.ops[i]));
    }
    json tensors = json::array();
    for (auto& t : g.tensors)
        if (live.count(t["id"].get<std::string>())) tensors.push_back(std::move(t));
    g.ops = std::move(ops);
    g.tensors = std::move(tensors);
}

}  // namespace

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
    // Bounded work: every cell runs once per replica.
    std::size_t cells = 0;
    for (const auto& [d, prog] : parallel.programs) cells += prog.size();
    if (static_cast<std::uint64_t>(cells) * static_cast<std::uint64_t>(im.dp) > kMaxCellExecutions)
        throw MappingTooLarge("the parallel plan runs " + std::to_string(cells) + " cells on each of " + std::to_string(im.dp) + " replicas (" +
                              std::to_string(static_cast<std::uint64_t>(cells) * static_cast<std::uint64_t>(im.dp)) + " executions): more than the " +
                              std::to_string(kMaxCellExecutions) + " cell executions the mapping writes out (about 8 KB of memory each)");
    im.runProgram(logical, im.lg, logical.programs.begin()->first, 0, true);
    for (int r = 0; r < im.dp; ++r)
        for (int d = 0; d < im.devices; ++d) im.runProgram(parallel, im.pg, d, r, false);
    im.emitCollectives();
    for (const auto& [id, m] : im.chunkMismatches)
        im.note("adapter #" + std::to_string(id) + ": " + std::to_string(m.count) + " chunk execution(s) take another piece at runtime than their index maps say (e.g. " +
                m.example + "); the runtime's piece is what is verified");
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
    r.plan = {{"format", "trainverify-plan"},
              {"version", 1},
              {"name", options.name.empty() ? std::string("nnscaler") : options.name},
              {"description", options.description},
              {"logical", {{"tensors", std::move(im.lg.tensors)}, {"ops", std::move(im.lg.ops)}}},
              {"parallel", {{"mesh", mesh}, {"microbatches", im.nm}, {"tensors", std::move(im.pg.tensors)}, {"ops", std::move(im.pg.ops)}}},
              {"lineage", std::move(im.records)}};
    return std::move(im.result);
}

}  // namespace tv::nnscaler
