#include "torch/torch_lowering.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>
#include <optional>
#include <string_view>
#include <cctype>
#include <limits>
#include <set>

#include "model/rational.hpp"

namespace tv::torch {

using nlohmann::json;

std::string Unsupported::describe(const std::vector<SourceLine>& sources) const {
    std::string s = target + " (" + node + (rank >= 0 ? " on rank " + std::to_string(rank) : std::string()) + ")";
    if (source >= 0 && static_cast<std::size_t>(source) < sources.size()) s += " at " + sources[static_cast<std::size_t>(source)].toString();
    else if (!file.empty()) s += " in " + file + ":" + std::to_string(line);
    return s + ": " + reason;
}

namespace {

constexpr std::int64_t kFullEnd = 9223372036854775807LL;  // a slice "to the end" as Python prints it

/// What a node evaluates to while lowering: a tensor, a tuple, or one of the partial forms of an
/// idiom (masked vocabulary ids, a gather waiting for its rows to be zeroed), or why it has none.
struct Val {
    enum class K : std::uint8_t {
        None, Tensor, Tuple, Unsupported, Undefined, Number, Constant,
        IdsBelow, IdsAtOrAbove, IdsOutOfRange, IdsShift, MaskedIds, PendingEmbedding, Arange, PendingTarget, LayerNormStats,
        // vLLM's arithmetic form of the vocabulary mask: [s <= ids < e], c·[s <= ids < e], ids − c·[s <= ids < e]
        IdsInRange, RangeScaled, IdsMinusRange,
        // Megatron's cross-entropy backward: target_mask.float(), 1 − that, and the gathered
        // softmax minus it (written back at the targets)
        OutOfRangeOnes, InRangeOnes, TargetMinusInRange,
        // the backward of the vocabulary-parallel embedding: the gradient with the rows of ids in
        // other parts zeroed, waiting for embedding_dense_backward by the masked ids
        RowsOfOtherPartsZeroed
    };
    K k = K::None;
    int t = -1;                      ///< Tensor; LayerNormStats: its input
    std::vector<Val> items;          ///< Tuple
    int why = -1;                    ///< Unsupported: index into LoweredProgram::unsupported
    Rational num;                    ///< Number; RangeScaled, IdsMinusRange: the factor c
    bool integral = false;           ///< Number: written as an integer
    int ids = -1;                    ///< the vocabulary ids an idiom is about (a tensor, before any view)
    std::int64_t s = 0, e = 0;       ///< the vocabulary range [s, e)
    int w = -1;                      ///< PendingEmbedding: the weight; PendingTarget, TargetMinusInRange: the logits [N, C]; RowsOfOtherPartsZeroed: the gradient
    std::vector<std::int64_t> shape; ///< MaskedIds, PendingTarget, IdsOutOfRange and the *Ones forms: the current shape
    std::int64_t n = 0;              ///< Arange: its length
    Rational eps;                    ///< LayerNormStats
    int stat = -1;                   ///< LayerNormStats: 0 the mean, 1 the inverse variance
};

std::string numberText(double f) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, f);
    return std::string(buf, r.ptr);
}

std::optional<Rational> rationalOf(const Value& v) {
    if (v.kind == Value::Kind::Int) return Rational(v.i);
    if (v.kind == Value::Kind::Bool) return Rational(v.b ? 1 : 0);
    if (v.kind == Value::Kind::Float) {
        if (!std::isfinite(v.f)) return std::nullopt;
        try {
            return Rational::parse(numberText(v.f));
        } catch (const RationalOverflow&) {
            return std::nullopt;
        }
    }
    return std::nullopt;
}

bool isIntType(DType d) { return d == DType::I8 || d == DType::I16 || d == DType::I32 || d == DType::I64 || d == DType::U8; }

/// The number a statement `...] = NUMBER` (an optional `# comment` after it) assigns, if it is one.
std::optional<std::string> assignedLiteral(std::string_view code) {
    if (auto hash = code.find('#'); hash != std::string_view::npos) code = code.substr(0, hash);
    while (!code.empty() && std::isspace(static_cast<unsigned char>(code.back()))) code.remove_suffix(1);
    const auto eq = code.rfind('=');
    if (eq == std::string_view::npos || eq == 0) return std::nullopt;
    auto lhs = code.substr(0, eq);
    while (!lhs.empty() && std::isspace(static_cast<unsigned char>(lhs.back()))) lhs.remove_suffix(1);
    if (lhs.empty() || lhs.back() != ']') return std::nullopt;  // an item assignment, not `==` or `x = 0`
    auto rhs = code.substr(eq + 1);
    while (!rhs.empty() && std::isspace(static_cast<unsigned char>(rhs.front()))) rhs.remove_prefix(1);
    // -?DIGITS(.DIGITS*)?([eE][-+]?DIGITS)?
    std::size_t i = 0;
    if (i < rhs.size() && rhs[i] == '-') ++i;
    const auto digitsFrom = [&](std::size_t at) {
        std::size_t k = at;
        while (k < rhs.size() && std::isdigit(static_cast<unsigned char>(rhs[k]))) ++k;
        return k;
    };
    auto j = digitsFrom(i);
    if (j == i) return std::nullopt;
    if (j < rhs.size() && rhs[j] == '.') j = digitsFrom(j + 1);
    if (j < rhs.size() && (rhs[j] == 'e' || rhs[j] == 'E')) {
        auto k = j + 1;
        if (k < rhs.size() && (rhs[k] == '-' || rhs[k] == '+')) ++k;
        const auto end = digitsFrom(k);
        if (end == k) return std::nullopt;
        j = end;
    }
    if (j != rhs.size()) return std::nullopt;
    return std::string(rhs);
}

/// Value classes a cast keeps values within.
enum class ValueClass : std::uint8_t { Floating, Integer, Boolean };
ValueClass valueClass(DType d) { return d == DType::Bool ? ValueClass::Boolean : isIntType(d) ? ValueClass::Integer : ValueClass::Floating; }
const char* className(ValueClass c) { return c == ValueClass::Boolean ? "boolean" : c == ValueClass::Integer ? "integer" : "floating-point"; }

/// An in-place ATen overload (`aten.masked_fill_.Scalar`, `aten.copy_.default`); logging hooks
/// that change nothing are not.
bool inPlace(const std::string& target) {
    if (target.rfind("aten.", 0) != 0) return false;
    const auto dot = target.find('.', 5);
    return dot != std::string::npos && dot > 5 && target[dot - 1] == '_' && target.compare(5, 1, "_") != 0;
}

class Lowerer {
public:
    Lowerer(LoweredProgram& out, const RankSet& set, bool parallel) : p_(out), set_(set), parallel_(parallel) {}

    /// Lowers one graph (rank `rank`, or the logical graph with rank -1).
    void lowerGraph(const TorchGraph& g, int rank) {
        g_ = &g;
        rank_ = rank;
        vals_.assign(g.nodes.size(), Val{});
        sourceBase_.clear();
        attentionMasks_.clear();
        const auto slot = static_cast<std::size_t>(std::max(rank, 0));
        if (p_.inputs.size() <= slot) p_.inputs.resize(slot + 1);
        if (p_.outputs.size() <= slot) p_.outputs.resize(slot + 1);
        for (std::size_t i = 0; i < g.nodes.size(); ++i) {
            node_ = static_cast<int>(i);
            const auto& n = g.nodes[i];
            try {
                vals_[i] = lowerNode(n);
            } catch (const NoSemantics& e) {
                vals_[i] = unsupported(e.what());
            } catch (const Damaged& e) {
                if (p_.damaged.empty())
                    p_.damaged = g.file + ":" + std::to_string(n.line) + ": " + n.name + (n.kind == Node::Kind::Call ? " (" + n.target + ")" : std::string()) + ": " + e.what();
                vals_[i] = unsupported(e.what());
            }
        }
        auto& ins = p_.inputs[slot];
        for (int in : g.inputs) ins.push_back(vals_[static_cast<std::size_t>(in)].k == Val::K::Tensor ? vals_[static_cast<std::size_t>(in)].t : -1);
        auto& outs = p_.outputs[slot];
        for (const auto& o : g.outputs) {
            LoweredOutput lo;
            if (o.isNode()) {
                const auto& v = vals_[static_cast<std::size_t>(o.node)];
                lo.node = g.nodes[static_cast<std::size_t>(o.node)].name;
                if (v.k == Val::K::Tensor) lo.tensor = v.t;
                else if (v.k == Val::K::Unsupported) lo.unsupported = v.why;
                else lo.unsupported = record(o.node, "its value is " + describeKind(v.k) + ", not a tensor that can be checked");
                lo.constantCall = constantCall(o.node);
            }
            outs.push_back(std::move(lo));
        }
    }

    /// Collective outputs waiting for the collective op (joined across ranks afterwards).
    struct PendingCollective {
        int input = -1;   ///< the tensor communicated (-1: none)
        int output = -1;  ///< the tensor made for its result
        int why = -1;
    };
    std::map<std::pair<int, int>, PendingCollective> pending;  ///< (rank, node) -> its collective

private:
    struct NoSemantics : std::runtime_error {
        using std::runtime_error::runtime_error;
    };

    LoweredProgram& p_;
    const RankSet& set_;
    bool parallel_;
    const TorchGraph* g_ = nullptr;
    int rank_ = -1;
    int node_ = -1;
    std::vector<Val> vals_;
    std::map<int, int> sourceBase_;
    std::map<std::int64_t, int> attentionMasks_;  ///< tokens -> this graph's attention metadata input

    [[noreturn]] static void none(const std::string& why) { throw NoSemantics(why); }
    /// The graph contradicts itself (an annotation its op cannot give, a dim it does not have):
    /// no capture makes that, so the pair is refused as damaged, not judged.
    struct Damaged : std::runtime_error {
        using std::runtime_error::runtime_error;
    };
    [[noreturn]] static void damaged(const std::string& why) { throw Damaged(why); }

    static std::string describeKind(Val::K k) {
        switch (k) {
        case Val::K::None: return "None";
        case Val::K::Tuple: return "a tuple";
        case Val::K::Undefined: return "an uninitialised buffer (empty)";
        case Val::K::Number: return "a number";
        case Val::K::Constant: return "a tensor constant whose value the graph does not carry";
        case Val::K::Arange: return "an arange";
        case Val::K::LayerNormStats: return "a layer norm's saved statistics";
        default: return "a partial vocabulary computation that is never completed";
        }
    }

    const Node& cur() const { return g_->nodes[static_cast<std::size_t>(node_)]; }
    std::string suffix() const { return rank_ >= 0 && parallel_ ? "@r" + std::to_string(rank_) : std::string(); }

    int programSource(int graphSource) {
        if (graphSource < 0) return -1;
        if (auto it = sourceBase_.find(graphSource); it != sourceBase_.end()) return it->second;
        p_.sources.push_back(g_->sources[static_cast<std::size_t>(graphSource)]);
        return sourceBase_[graphSource] = static_cast<int>(p_.sources.size()) - 1;
    }

    int record(int node, const std::string& reason) {
        const auto& n = g_->nodes[static_cast<std::size_t>(node)];
        Unsupported u;
        u.node = n.name;
        u.target = n.kind == Node::Kind::Call ? n.target : n.kind == Node::Kind::Constant ? "self." + n.target : n.name;
        u.reason = reason;
        u.rank = parallel_ ? rank_ : -1;
        u.source = programSource(n.source);
        u.file = g_->file;
        u.line = n.line;
        p_.unsupported.push_back(std::move(u));
        return static_cast<int>(p_.unsupported.size()) - 1;
    }
    Val unsupported(const std::string& reason) {
        Val v;
        v.k = Val::K::Unsupported;
        v.why = record(node_, reason);
        return v;
    }

    std::string constantCall(int node) const {
        // A call none of whose arguments is a node (zeros, arange, full): a deterministic constant.
        const auto& n = g_->nodes[static_cast<std::size_t>(node)];
        if (n.kind != Node::Kind::Call) return {};
        std::function<bool(const Value&)> hasNode = [&](const Value& v) {
            if (v.isNode()) return true;
            for (const auto& it : v.items)
                if (hasNode(it)) return true;
            return false;
        };
        for (const auto& a : n.args)
            if (hasNode(a)) return {};
        std::string s = n.target + "(";
        for (std::size_t k = 0; k < n.args.size(); ++k) s += (k ? ", " : "") + n.args[k].toString();
        for (const auto& [key, v] : n.kwargs) {
            if (key == "device" || key == "pin_memory" || key == "layout") continue;  // where it lives, not what it is
            s += ", " + key + "=" + v.toString();
        }
        return s + ")";
    }

    // --- tensors and ops ---------------------------------------------------------------------
    int newTensor(const std::string& name, std::vector<std::int64_t> shape, bool isInt) {
        LoweredTensor t;
        t.name = name + suffix();
        t.shape = std::move(shape);
        t.isInt = isInt;
        t.rank = parallel_ ? rank_ : -1;
        p_.tensors.push_back(std::move(t));
        return static_cast<int>(p_.tensors.size()) - 1;
    }
    int emit(const std::string& kind, std::vector<int> inputs, std::vector<std::int64_t> outShape, bool outInt, json attrs = json::object(),
             const std::string& part = {}) {
        const auto& n = cur();
        const std::string base = n.name + (part.empty() ? std::string() : "." + part);
        int out = newTensor(base, std::move(outShape), outInt);
        LoweredOp op;
        op.name = base + suffix();
        op.kind = kind;
        op.attrs = std::move(attrs);
        op.inputs = std::move(inputs);
        op.outputs = {out};
        op.rank = parallel_ ? rank_ : -1;
        op.torchNode = n.name;
        op.torchTarget = n.target;
        op.source = programSource(n.source);
        p_.tensors[static_cast<std::size_t>(out)].producer = static_cast<int>(p_.ops.size());
        p_.ops.push_back(std::move(op));
        return out;
    }
    std::vector<int> emitMulti(const std::string& kind, std::vector<int> inputs, const std::vector<std::vector<std::int64_t>>& shapes, json attrs) {
        const auto& n = cur();
        LoweredOp op;
        op.name = n.name + suffix();
        op.kind = kind;
        op.attrs = std::move(attrs);
        op.inputs = std::move(inputs);
        op.rank = parallel_ ? rank_ : -1;
        op.torchNode = n.name;
        op.torchTarget = n.target;
        op.source = programSource(n.source);
        for (std::size_t k = 0; k < shapes.size(); ++k) {
            int t = newTensor(n.name + "." + std::to_string(k), shapes[k], false);
            p_.tensors[static_cast<std::size_t>(t)].producer = static_cast<int>(p_.ops.size());
            op.outputs.push_back(t);
        }
        auto outs = op.outputs;
        p_.ops.push_back(std::move(op));
        return outs;
    }
    static Val tensor(int t) {
        Val v;
        v.k = Val::K::Tensor;
        v.t = t;
        return v;
    }
    const LoweredTensor& T(int t) const { return p_.tensors[static_cast<std::size_t>(t)]; }
    /// The dtype a node's annotation gives (float when it has none).
    DType typeOf(int node) const {
        const auto& n = g_->nodes[static_cast<std::size_t>(node)];
        return n.type ? n.type->dtype : DType::F32;
    }

    // --- arguments ---------------------------------------------------------------------------
    const Value* arg(std::size_t i, std::string_view key = {}) const {
        const auto& n = cur();
        if (i < n.args.size()) return &n.args[i];
        if (!key.empty()) return n.kwarg(key);
        return nullptr;
    }
    const Val& valOf(const Value& v) const {
        static const Val kNone;
        if (!v.isNode()) return kNone;
        return vals_[static_cast<std::size_t>(v.node)];
    }
    Val argVal(std::size_t i, std::string_view key = {}) const {
        const auto* a = arg(i, key);
        if (!a) return {};
        if (a->isNode()) return valOf(*a);
        if (auto r = rationalOf(*a)) {
            Val v;
            v.k = Val::K::Number;
            v.num = *r;
            v.integral = a->kind == Value::Kind::Int || a->kind == Value::Kind::Bool;
            return v;
        }
        return {};
    }
    /// A tensor argument, or no semantics (naming why: an unsupported input passes its reason on).
    int tensorArg(std::size_t i, std::string_view key = {}) {
        auto v = argVal(i, key);
        if (v.k == Val::K::Tensor) return v.t;
        if (v.k == Val::K::Unsupported) throw Propagated(v.why);
        none("argument " + std::to_string(i) + " is " + describeKind(v.k) + ", not a tensor");
    }
    struct Propagated {
        int why;
    };
    std::int64_t intArg(std::size_t i, std::string_view key, std::int64_t dflt, bool required = true) const {
        const auto* a = arg(i, key);
        if (!a || a->kind == Value::Kind::None) {
            if (required) none("argument " + std::string(key) + " is missing");
            return dflt;
        }
        if (a->kind != Value::Kind::Int) none("argument " + std::string(key) + " is not an integer");
        return a->i;
    }
    std::vector<std::int64_t> intsArg(std::size_t i, std::string_view key) const {
        const auto* a = arg(i, key);
        if (!a) none("argument " + std::string(key) + " is missing");
        if (a->kind == Value::Kind::Int) return {a->i};
        if (!a->isList()) none("argument " + std::string(key) + " is not a list of integers");
        std::vector<std::int64_t> r;
        for (const auto& it : a->items) {
            if (it.kind != Value::Kind::Int) none("argument " + std::string(key) + " is not a list of integers");
            r.push_back(it.i);
        }
        return r;
    }
    const std::vector<std::int64_t>& resultShape() const {
        const auto& n = cur();
        if (!n.type) none("its result has no type annotation");
        return n.type->shape;
    }
    bool resultIsInt() const { return cur().type && isIntType(cur().type->dtype); }
    static std::int64_t normDim(std::int64_t d, std::size_t rank) {
        const auto r = static_cast<std::int64_t>(rank);
        if (d < -r || d >= std::max<std::int64_t>(r, 1)) damaged("dim " + std::to_string(d) + " is out of range for rank " + std::to_string(rank));
        return d < 0 ? d + r : d;
    }
    void expectShape(int t, const std::vector<std::int64_t>& s) const {
        if (T(t).shape != s)
            damaged("its result is annotated " + shapeToString(s) + " but its operands give " + shapeToString(T(t).shape));
    }
    static std::string rat(const Rational& r) { return r.toString(); }

    // --- the calls ---------------------------------------------------------------------------
    Val lowerNode(const Node& n) {
        try {
            switch (n.kind) {
            case Node::Kind::Input: {
                if (!n.type) return unsupported("an input without a type annotation");
                bool isInt = isIntType(n.type->dtype);
                int t = newTensor(n.name, n.type->shape, isInt);
                p_.tensors[static_cast<std::size_t>(t)].input = static_cast<int>(std::find(g_->inputs.begin(), g_->inputs.end(), node_) - g_->inputs.begin());
                return tensor(t);
            }
            case Node::Kind::Constant: {
                Val v;
                v.k = Val::K::Constant;
                return v;
            }
            case Node::Kind::GetItem: {
                const auto& of = vals_[static_cast<std::size_t>(n.args.at(0).node)];
                if (of.k == Val::K::Unsupported) return of;
                if (of.k != Val::K::Tuple) return unsupported("element of something that is not a tuple");
                if (n.item < 0 || static_cast<std::size_t>(n.item) >= of.items.size()) return unsupported("element " + std::to_string(n.item) + " of a shorter tuple");
                auto v = of.items[static_cast<std::size_t>(n.item)];
                if (v.k == Val::K::Tensor && n.type) expectShape(v.t, n.type->shape);
                return v;
            }
            case Node::Kind::Call: return lowerCall(n);
            }
        } catch (const Propagated& p) {
            Val v;
            v.k = Val::K::Unsupported;
            v.why = p.why;
            return v;
        }
        return {};
    }

    Val alias(int t) {
        if (cur().type) expectShape(t, cur().type->shape);
        return tensor(t);
    }

    Val lowerCall(const Node& n) {
        const std::string& f = n.target;
        auto is = [&](std::initializer_list<const char*> names) {
            for (const char* s : names)
                if (f == s) return true;
            return false;
        };
        if (auto c = collectiveCall(*g_, n)) return lowerCollective(*c);
        if (inPlace(f)) {
            // An in-place ATen call changes `self` for every later reader: neither its result nor
            // `self` has a value the lowering can follow.
            const auto* self = arg(0, "self");
            Val v = unsupported("an in-place call (functionalise the graph: capture through AOTAutograd)");
            if (self && self->isNode()) vals_[static_cast<std::size_t>(self->node)] = v;
            return v;
        }
        if (is({"_c10d_functional.wait_tensor.default"})) return alias(tensorArg(0, "tensor"));
        if (is({"aten.detach.default", "aten.alias.default", "aten.lift_fresh_copy.default", "aten.clone.default", "aten.contiguous.default",
                "tg.log_tensor.default", "tg.inplace_log_tensor.default"})) {
            auto v = argVal(0, "self");
            if (v.k == Val::K::Constant && f == "aten.lift_fresh_copy.default") return constantValue();
            if (v.k == Val::K::Tensor) return alias(v.t);
            return v;  // idiom forms, numbers, unsupported: passed on
        }
        if (is({"aten._to_copy.default"})) {
            auto v = argVal(0, "self");
            const auto to = cur().type ? valueClass(cur().type->dtype) : ValueClass::Floating;
            // The cast is to the type its dtype argument names; the annotation must say the same.
            if (const auto* dt = cur().kwarg("dtype"); dt && dt->kind == Value::Kind::DType && cur().type && valueClass(dt->dtype) != to)
                damaged("a cast to " + std::string(className(valueClass(dt->dtype))) + " values annotated as " + className(to) + " values");
            if (v.k == Val::K::IdsOutOfRange && to == ValueClass::Floating) {
                // Megatron: `target_mask.view(-1).float()`, 1.0 where the id is in another part
                v.k = Val::K::OutOfRangeOnes;
                return v;
            }
            if (v.k != Val::K::Tensor) return v.k == Val::K::Unsupported ? v : unsupported("a cast of " + describeKind(v.k));
            // Within a class (floating, integer, boolean) a cast keeps the value: floats are exact
            // reals (docs/soundness.md). A floating value cast to an integer type is rounded toward
            // zero (trunc: Megatron's token count, `loss_mask.sum().int()`); other casts across
            // classes (to or from booleans, integers to floats) are not followed yet.
            const auto from = valueClass(cur().args.empty() || !cur().args[0].isNode() ? DType::F32 : typeOf(cur().args[0].node));
            if (from == ValueClass::Floating && to == ValueClass::Integer && !T(v.t).isInt)
                return tensor(emit("trunc", {v.t}, resultShape(), false));
            if (from != to) none("a cast between " + std::string(className(from)) + " and " + className(to) + " values");
            return alias(v.t);
        }
        if (is({"aten.empty.memory_format", "aten.empty_like.default", "aten.new_empty_strided.default", "aten.empty.default"})) {
            Val v;
            v.k = Val::K::Undefined;
            return v;
        }
        if (is({"aten.copy.default"})) {
            auto dst = argVal(0, "self");
            int src = tensorArg(1, "src");
            const auto& shape = resultShape();
            if (dst.k == Val::K::Tensor) expectShape(dst.t, shape);
            if (T(src).shape == shape) return tensor(src);
            return tensor(emit("expand", {src}, shape, T(src).isInt));
        }
        if (is({"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.default",
                "aten.flatten.using_ints"}))
            return lowerView();
        if (is({"aten.t.default"})) {
            int x = tensorArg(0, "self");
            if (T(x).shape.size() < 2) return alias(x);
            return tensor(emit("transpose", {x}, resultShape(), T(x).isInt, {{"dim0", 0}, {"dim1", 1}}));
        }
        if (is({"aten.transpose.int"})) {
            int x = tensorArg(0, "self");
            auto r = T(x).shape.size();
            auto d0 = normDim(intArg(1, "dim0", 0), r), d1 = normDim(intArg(2, "dim1", 0), r);
            if (d0 == d1) return alias(x);
            int y = emit("transpose", {x}, resultShape(), T(x).isInt, {{"dim0", d0}, {"dim1", d1}});
            return tensor(y);
        }
        if (is({"aten.permute.default"})) {
            int x = tensorArg(0, "self");
            auto dims = intsArg(1, "dims");
            for (auto& d : dims) d = normDim(d, T(x).shape.size());
            return tensor(emit("permute", {x}, resultShape(), T(x).isInt, {{"dims", dims}}));
        }
        if (is({"aten.expand.default"})) {
            int x = tensorArg(0, "self");
            if (T(x).shape == resultShape()) return alias(x);
            return tensor(emit("expand", {x}, resultShape(), T(x).isInt));
        }
        if (is({"aten.slice.Tensor"})) return lowerSlice();
        if (is({"aten.slice_scatter.default"})) return lowerSliceScatter();
        if (is({"aten.split_with_sizes.default", "aten.split.Tensor"})) return lowerSplit(f == "aten.split.Tensor");
        if (is({"aten.cat.default"})) return lowerCat();
        if (is({"aten.mm.default", "aten.bmm.default", "aten.matmul.default"})) {
            int a = tensorArg(0, "self"), b = tensorArg(1, "mat2");
            const auto &as = T(a).shape, &bs = T(b).shape;
            if (f != "aten.matmul.default") {
                const std::size_t r = f == "aten.mm.default" ? 2 : 3;
                if (as.size() != r || bs.size() != r || as[r - 1] != bs[r - 2] || (r == 3 && as[0] != bs[0]))
                    damaged("a product of " + shapeToString(as) + " and " + shapeToString(bs));
                auto want = as;
                want.back() = bs.back();
                if (want != resultShape()) damaged("its result is annotated " + shapeToString(resultShape()) + " but its operands give " + shapeToString(want));
            }
            return tensor(emit("matmul", {a, b}, resultShape(), false));
        }
        if (is({"aten.addmm.default", "aten.baddbmm.default"})) return lowerAddMatmul();
        if (is({"aten.add.Tensor", "aten.sub.Tensor"})) return lowerAddSub(f == "aten.sub.Tensor");
        if (is({"aten.rsub.Scalar"})) {
            // other − alpha·self
            if (auto m = argVal(0, "self"); m.k == Val::K::OutOfRangeOnes) {
                // Megatron: `1.0 - target_mask.view(-1).float()`
                auto s = argVal(1, "other");
                auto alpha = argVal(2, "alpha");
                if (s.k != Val::K::Number || !s.num.isOne() || (alpha.k != Val::K::None && !(alpha.k == Val::K::Number && alpha.num.isOne())))
                    none("arithmetic on a vocabulary mask outside Megatron's cross-entropy backward");
                m.k = Val::K::InRangeOnes;
                return m;
            }
            int x = tensorArg(0, "self");
            auto s = argVal(1, "other");
            auto alpha = argVal(2, "alpha");
            if (s.k != Val::K::Number) none("rsub of something that is not a number");
            if (alpha.k != Val::K::None && alpha.k != Val::K::Number) none("an alpha that is not a number");
            const Rational a = alpha.k == Val::K::Number ? alpha.num : Rational(1);
            int scaled = a.isOne() ? emit("neg", {x}, T(x).shape, false, json::object(), "neg")
                                   : emit("mul_scalar", {x}, T(x).shape, false, {{"value", rat(-a)}}, "scaled");
            return tensor(emit("add_scalar", {scaled}, resultShape(), false, {{"value", rat(s.num)}}));
        }
        if (is({"aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar"})) return lowerMulDiv(f.rfind("aten.div", 0) == 0);
        if (is({"aten.neg.default", "aten.exp.default", "aten.log.default", "aten.sqrt.default", "aten.rsqrt.default", "aten.tanh.default",
                "aten.sigmoid.default", "aten.relu.default", "aten.silu.default", "aten.erf.default"})) {
            int x = tensorArg(0, "self");
            if (T(x).isInt) none("an integer operand");
            auto name = f.substr(5, f.find('.', 5) - 5);
            return tensor(emit(name, {x}, resultShape(), false));
        }
        if (is({"aten.gelu.default"})) {
            int x = tensorArg(0, "self");
            if (const auto* a = n.kwarg("approximate"); a && !(a->kind == Value::Kind::String && a->text == "none")) none("the tanh approximation of GELU");
            return tensor(emit("gelu", {x}, resultShape(), false));
        }
        if (is({"aten.gelu_backward.default"})) {
            int dy = tensorArg(0, "grad_output"), x = tensorArg(1, "self");
            if (const auto* a = n.kwarg("approximate"); a && !(a->kind == Value::Kind::String && a->text == "none")) none("the tanh approximation of GELU");
            return tensor(emit("gelu_backward", {x, dy}, resultShape(), false));
        }
        if (is({"aten.pow.Tensor_Scalar"})) {
            int x = tensorArg(0, "self");
            auto e = argVal(1, "exponent");
            if (e.k != Val::K::Number) none("a power whose exponent is not a number");
            return tensor(emit("pow", {x}, resultShape(), false, {{"exponent", rat(e.num)}}));
        }
        if (is({"aten._softmax.default", "aten.softmax.int"})) {
            int x = tensorArg(0, "self");
            auto d = normDim(intArg(1, "dim", 0), T(x).shape.size());
            return tensor(emit("softmax", {x}, resultShape(), false, {{"dim", d}}));
        }
        if (is({"aten._softmax_backward_data.default"})) {
            int dy = tensorArg(0, "grad_output"), y = tensorArg(1, "output");
            auto d = normDim(intArg(2, "dim", 0), T(y).shape.size());
            return tensor(emit("softmax_backward", {y, dy}, resultShape(), false, {{"dim", d}}));
        }
        if (is({"aten.sum.dim_IntList", "aten.sum.default", "aten.mean.dim", "aten.mean.default"})) return lowerReduce(f.rfind("aten.mean", 0) == 0, f.find(".default") != std::string::npos);
        if (is({"aten.max.dim"})) {
            int x = tensorArg(0, "self");
            if (T(x).shape.empty()) none("a maximum along a dim of a scalar");
            auto d = normDim(intArg(1, "dim", 0), T(x).shape.size());
            bool keep = false;
            if (const auto* k = arg(2, "keepdim"); k && k->kind == Value::Kind::Bool) keep = k->b;
            auto shape = T(x).shape;
            if (keep) shape[static_cast<std::size_t>(d)] = 1;
            else shape.erase(shape.begin() + d);
            Val t;
            t.k = Val::K::Tuple;
            t.items.push_back(tensor(emit("max", {x}, shape, false, {{"dim", d}, {"keepdim", keep}})));
            Val idx;
            idx.k = Val::K::Unsupported;
            idx.why = record(node_, "the indices of a maximum have no semantics yet");
            t.items.push_back(idx);
            return t;
        }
        if (is({"aten.native_dropout.default"})) {
            int x = tensorArg(0, "input");
            auto p = argVal(1, "p");
            if (p.k != Val::K::Number) none("a dropout probability that is not a number");
            const auto* train = arg(2, "train");
            Val t;
            t.k = Val::K::Tuple;
            if (train && train->kind == Value::Kind::Bool && !train->b) {
                t.items.push_back(tensor(x));
                t.items.push_back(unsupported("the mask of a dropout that is not training"));
                return t;
            }
            // The random mask is an input of the step: the parallel ranks' masks are assumed to be the
            // parts of the logical mask their tensors hold (docs/torch-graphs.md, "Dropout").
            int mask = newTensor(n.name + ".mask", T(x).shape, false);
            p_.tensors[static_cast<std::size_t>(mask)].dropoutMask = true;
            t.items.push_back(tensor(emit("dropout", {x, mask}, T(x).shape, false, {{"p", rat(p.num)}})));
            t.items.push_back(tensor(mask));
            return t;
        }
        if (is({"aten.masked_fill.Scalar"})) {
            if (auto pe = argVal(0, "self"); pe.k == Val::K::PendingEmbedding) {
                // vLLM: output_parallel.masked_fill_(input_mask.unsqueeze(-1), 0)
                auto m = argVal(1, "mask");
                auto v = argVal(2, "value");
                auto rowShape = pe.shape;
                rowShape.push_back(1);
                // The mask must be [ids..., 1]: broadcasting aligns trailing dims, so a mask of the
                // ids' own shape would zero columns, not rows.
                if (m.k == Val::K::IdsOutOfRange && m.ids == pe.ids && m.s == pe.s && m.e == pe.e && m.shape == rowShape &&
                    v.k == Val::K::Number && v.num.isZero())
                    return finishEmbedding(pe);
                none("a fill of gathered rows outside vLLM's vocabulary idiom");
            }
            int x = tensorArg(0, "self");
            int m = tensorArg(1, "mask");
            auto v = argVal(2, "value");
            if (v.k != Val::K::Number) none("a fill value that is not a finite number");
            if (T(m).isInt) none("an integer mask");
            // x + m·(v − x): exact for a 0/1 mask.
            int neg = emit("neg", {x}, T(x).shape, false, json::object(), "neg");
            int diff = emit("add_scalar", {neg}, T(x).shape, false, {{"value", rat(v.num)}}, "diff");
            int md = emit("mul", {m, diff}, T(x).shape, false, json::object(), "masked");
            return tensor(emit("add", {x, md}, resultShape(), false));
        }
        if (is({"aten.where.self"})) {
            int c = tensorArg(0, "condition"), a = tensorArg(1, "self"), b = tensorArg(2, "other");
            if (T(c).isInt || T(a).isInt || T(b).isInt) none("integer operands");
            int d = emit("sub", {a, b}, resultShape(), false, json::object(), "diff");
            int cd = emit("mul", {c, d}, resultShape(), false, json::object(), "masked");
            return tensor(emit("add", {b, cd}, resultShape(), false));
        }
        if (is({"aten.embedding.default"})) {
            if (auto m = argVal(1, "indices"); m.k == Val::K::MaskedIds) {
                // vLLM: F.embedding(masked_input, weight), its other parts' rows zeroed next
                int w = tensorArg(0, "weight");
                if (T(w).shape.size() != 2 || m.e - m.s != T(w).shape[0]) none("a gather by masked ids from a table that is not the width of their range");
                return gatherPending(Val::K::PendingEmbedding, w, m);
            }
            int w = tensorArg(0, "weight"), ids = tensorArg(1, "indices");
            if (!T(ids).isInt || T(w).shape.size() != 2) none("an embedding whose indices are not integers or whose table is not 2-D");
            if (const auto* pi = arg(2, "padding_idx"); pi && pi->kind == Value::Kind::Int && pi->i != -1) none("an embedding with a padding index");
            return tensor(emit("embedding", {ids, w}, resultShape(), false));
        }
        if (is({"aten.embedding_dense_backward.default"})) {
            if (auto g = argVal(0, "grad_output"); g.k == Val::K::RowsOfOtherPartsZeroed) {
                // Megatron's vocabulary-parallel embedding backward: the gradient rows of this
                // part's ids, summed into the rows of the part (those of other ids are 0, at row 0).
                auto m = argVal(1, "indices");
                const auto width = intArg(2, "num_weights", 0);
                if (const auto* pi = arg(3, "padding_idx"); pi && pi->kind == Value::Kind::Int && pi->i != -1) none("an embedding with a padding index");
                if (const auto* sg = arg(4, "scale_grad_by_freq"); sg && sg->kind == Value::Kind::Bool && sg->b) none("scale_grad_by_freq");
                if (m.k != Val::K::MaskedIds || m.ids != g.ids || m.s != g.s || m.e != g.e || m.shape != g.shape || width != g.e - g.s)
                    none("an embedding backward of a masked gradient outside Megatron's vocabulary-parallel embedding");
                int ids = g.ids;
                if (T(ids).shape != g.shape) ids = emit("view", {ids}, g.shape, true, json::object(), "ids");
                return tensor(emit("embedding_backward", {ids, g.w}, resultShape(), false, vocabPart(g.s, width)));
            }
            int dy = tensorArg(0, "grad_output"), ids = tensorArg(1, "indices");
            if (const auto* pi = arg(3, "padding_idx"); pi && pi->kind == Value::Kind::Int && pi->i != -1) none("an embedding with a padding index");
            if (const auto* sg = arg(4, "scale_grad_by_freq"); sg && sg->kind == Value::Kind::Bool && sg->b) none("scale_grad_by_freq");
            return tensor(emit("embedding_backward", {ids, dy}, resultShape(), false));
        }
        if (is({"apex.fused_layer_norm_affine_fwd.default"})) {
            int x = tensorArg(0, "input"), w = tensorArg(1, "weight"), b = tensorArg(2, "bias");
            auto ns = intsArg(3, "normalized_shape");
            auto eps = argVal(4, "eps");
            if (ns.size() != 1 || T(x).shape.empty() || ns[0] != T(x).shape.back()) none("a layer norm over more than the last dimension");
            if (eps.k != Val::K::Number) none("an epsilon that is not a number");
            Val t;
            t.k = Val::K::Tuple;
            t.items.push_back(tensor(emit("layernorm", {x, w, b}, T(x).shape, false, {{"eps", rat(eps.num)}})));
            Val stats;
            stats.k = Val::K::LayerNormStats;
            stats.t = x;
            stats.eps = eps.num;
            stats.stat = 0;  // the mean
            t.items.push_back(stats);
            stats.stat = 1;  // the inverse variance
            t.items.push_back(stats);
            return t;
        }
        if (is({"aten.zeros.default"})) {
            // A zero of no dims (the value Megatron writes into masked rows): the number 0.
            // Zeros of a shape are no tensor the lowering can make yet.
            if (!intsArg(0, "size").empty()) none("zeros of a shape (only a 0-dim zero is followed)");
            Val v;
            v.k = Val::K::Number;
            v.num = Rational(0);
            return v;
        }
        if (is({"apex.fused_layer_norm_affine_bwd.default"})) {
            // (grad_output, mean, invvar, input, normalized_shape, weight, bias, eps[, memory_efficient])
            // -> (grad_input, grad_weight, grad_bias), from the statistics of the same input.
            int dy = tensorArg(0, "grad_output");
            auto mean = argVal(1, "mean"), invvar = argVal(2, "invvar");
            int x = tensorArg(3, "input_or_output");
            auto ns = intsArg(4, "normalized_shape");
            int w = tensorArg(5, "weight");
            tensorArg(6, "bias");
            auto eps = argVal(7, "eps");
            if (const auto* me = arg(8, "memory_efficient"); me && me->kind == Value::Kind::Bool && me->b)
                none("a memory-efficient layer-norm backward (from the output, not the input)");
            if (ns.size() != 1 || T(x).shape.empty() || ns[0] != T(x).shape.back()) none("a layer norm over more than the last dimension");
            if (eps.k != Val::K::Number) none("an epsilon that is not a number");
            for (const auto* s : {&mean, &invvar})
                if (s->k != Val::K::LayerNormStats || s->t != x || s->eps != eps.num || s->stat != (s == &mean ? 0 : 1))
                    none("a layer-norm backward whose saved statistics are not its input's (its mean, then its inverse variance, with its epsilon)");
            if (T(dy).shape != T(x).shape) damaged("the gradient " + shapeToString(T(dy).shape) + " and the input " + shapeToString(T(x).shape) + " of a layer-norm backward differ");
            const auto xs = T(x).shape, ws = T(w).shape;
            auto outs = emitMulti("layernorm_backward", {x, w, dy}, {xs, ws, ws}, {{"eps", rat(eps.num)}});
            Val t;
            t.k = Val::K::Tuple;
            for (int o : outs) t.items.push_back(tensor(o));
            return t;
        }
        if (is({"aten.lt.Scalar", "aten.ge.Scalar"})) {
            auto ids = argVal(0, "self");
            auto s = argVal(1, "other");
            if (ids.k != Val::K::Tensor || !T(ids.t).isInt || s.k != Val::K::Number || !s.num.isInteger())
                none("a comparison outside Megatron's vocabulary-range idiom");
            Val v;
            v.k = f == "aten.lt.Scalar" ? Val::K::IdsBelow : Val::K::IdsAtOrAbove;
            v.ids = ids.t;
            v.s = s.num.num();
            return v;
        }
        if (is({"aten.bitwise_or.Tensor", "aten.bitwise_and.Tensor", "aten.bitwise_not.default"})) return lowerIdsMask(f);
        if (is({"aten.index_put.default"})) return lowerIndexPut();
        if (is({"aten.index.Tensor"})) return lowerIndex();
        if (is({"aten.arange.start", "aten.arange.default", "aten.arange.start_step"})) {
            std::int64_t start = 0, end = 0;
            if (f == "aten.arange.default") end = intArg(0, "end", 0);
            else {
                start = intArg(0, "start", 0);
                end = intArg(1, "end", 0);
                if (f == "aten.arange.start_step" && intArg(2, "step", 1, false) != 1) none("an arange with a step");
            }
            if (start != 0 || end < 1) none("an arange that does not start at 0");
            Val v;
            v.k = Val::K::Arange;
            v.n = end;
            return v;
        }
        if (is({"higher_order.auto_functionalized"})) return lowerAutoFunctionalized();
        if (is({"higher_order.auto_functionalized_v2"})) {
            // (the op's return, then the new value of each base in _all_bases). torchgraph's
            // logging op reads its tensor and changes nothing.
            if (n.args.empty() || n.args[0].kind != Value::Kind::Operator || n.args[0].text != "tg.inplace_log_tensor.default")
                none("no semantics for " + (n.args.empty() ? std::string("an unnamed operator") : n.args[0].toString()) + " through auto_functionalized_v2 yet");
            const auto* bases = n.kwarg("_all_bases");
            if (!bases || !bases->isList()) none("auto_functionalized_v2 without its bases");
            std::vector<Val> items;
            for (const auto& b : bases->items) {
                const auto& v = valOf(b);
                if (v.k == Val::K::Unsupported) throw Propagated(v.why);
                if (v.k != Val::K::Tensor) none("a base that is " + describeKind(v.k));
                items.push_back(v);
            }
            return tupleOf(std::move(items));
        }
        none("no semantics for this operator yet");
    }

    // --- vocabulary masks ---------------------------------------------------------------------
    static Val idsMask(Val::K k, int ids, std::int64_t s, std::int64_t e) {
        Val v;
        v.k = k;
        v.ids = ids;
        v.s = s;
        v.e = e;
        return v;
    }
    static bool emptyRange(const Val& v) { return v.s >= v.e; }
    /// `ids < e | ids >= s` (Megatron), `ids >= s & ids < e` and `~` of it, and a union with an
    /// empty range (vLLM's added-vocabulary mask, empty without LoRA).
    Val lowerIdsMask(const std::string& f) {
        auto a = argVal(0, "self");
        if (f == "aten.bitwise_not.default") {
            if (a.k == Val::K::IdsInRange && !emptyRange(a)) {
                auto v = idsMask(Val::K::IdsOutOfRange, a.ids, a.s, a.e);
                v.shape = T(a.ids).shape;
                return v;
            }
            none("a boolean operation outside the vocabulary-range idioms");
        }
        auto b = argVal(1, "other");
        if (a.k == Val::K::Unsupported) return a;
        if (b.k == Val::K::Unsupported) return b;
        if (f == "aten.bitwise_or.Tensor") {
            if (a.k == Val::K::IdsBelow && b.k == Val::K::IdsAtOrAbove && a.ids == b.ids && a.s < b.s) {
                auto v = idsMask(Val::K::IdsOutOfRange, a.ids, a.s, b.s);
                v.shape = T(a.ids).shape;
                return v;
            }
            if (a.k == Val::K::IdsInRange && b.k == Val::K::IdsInRange && a.ids == b.ids) {
                if (emptyRange(b)) return a;
                if (emptyRange(a)) return b;
            }
        } else {
            if (a.k == Val::K::IdsBelow && b.k == Val::K::IdsAtOrAbove) std::swap(a, b);
            if (a.k == Val::K::IdsAtOrAbove && b.k == Val::K::IdsBelow && a.ids == b.ids) return idsMask(Val::K::IdsInRange, a.ids, a.s, b.s);
        }
        none("a boolean operation outside the vocabulary-range idioms");
    }

    // --- vLLM's custom ops, through auto_functionalized -----------------------------------------
    /// A kwarg of the wrapped op that is a tensor.
    int kwTensor(const char* key) { return tensorArg(std::numeric_limits<std::size_t>::max(), key); }
    Rational kwNumber(const char* key) {
        auto v = argVal(std::numeric_limits<std::size_t>::max(), key);
        if (v.k != Val::K::Number) none(std::string("argument ") + key + " is not a number");
        return v.num;
    }
    void assume(const std::string& a) {
        if (std::find(p_.assumptions.begin(), p_.assumptions.end(), a) == p_.assumptions.end() && p_.assumptions.size() < 64) p_.assumptions.push_back(a);
    }
    static Val tupleOf(std::vector<Val> mutated) {
        Val t;
        t.k = Val::K::Tuple;
        t.items.push_back(Val{});  // the op's own return: None
        for (auto& m : mutated) t.items.push_back(std::move(m));
        return t;
    }

    /// `auto_functionalized(op, **kwargs)`: the op's return (None for these), then the new value of
    /// each argument it mutates, in the order of its schema.
    Val lowerAutoFunctionalized() {
        const auto& n = cur();
        if (n.args.empty() || n.args[0].kind != Value::Kind::Operator) none("an auto_functionalized call that names no operator");
        const std::string& op = n.args[0].text;
        if (op == "_C.rms_norm.default") {
            int x = kwTensor("input"), w = kwTensor("weight");
            return tupleOf({tensor(rmsNorm(x, w, kwNumber("epsilon"), "rms_norm"))});
        }
        if (op == "_C.fused_add_rms_norm.default") {
            // residual += input; input = rms_norm(residual) · weight
            int x = kwTensor("input"), res = kwTensor("residual"), w = kwTensor("weight");
            if (T(x).shape != T(res).shape) none("an input and a residual of different shapes");
            int sum = emit("add", {x, res}, T(x).shape, false, json::object(), "residual");
            return tupleOf({tensor(rmsNorm(sum, w, kwNumber("epsilon"), "rms_norm")), tensor(sum)});
        }
        if (op == "_C.silu_and_mul.default") {
            // out = silu(x[..., :d]) · x[..., d:], d half the last dim
            int x = kwTensor("input");
            auto s = T(x).shape;
            if (s.empty() || s.back() % 2 != 0 || T(x).isInt) none("silu_and_mul of a tensor whose last dim is not even");
            const auto d = static_cast<std::int64_t>(s.size()) - 1, half = s.back() / 2;
            auto hs = s;
            hs.back() = half;
            int gate = emit("slice", {x}, hs, false, {{"dim", d}, {"start", 0}, {"end", half}}, "gate");
            int up = emit("slice", {x}, hs, false, {{"dim", d}, {"start", half}, {"end", s.back()}}, "up");
            int act = emit("silu", {gate}, hs, false, json::object(), "silu");
            return tupleOf({tensor(emit("mul", {act, up}, hs, false))});
        }
        if (op == "_C.rotary_embedding.default") return lowerRotary();
        if (op == "vllm.unified_attention_with_output.default") return lowerVllmAttention();
        none("no semantics for " + op + " yet");
    }

    int rmsNorm(int x, int w, const Rational& eps, const std::string& part) {
        const auto& s = T(x).shape;
        if (s.empty() || T(w).shape != std::vector<std::int64_t>{s.back()} || T(x).isInt) none("an RMS norm whose weight is not the size of the last dim");
        return emit("rmsnorm", {x, w}, s, false, {{"eps", rat(eps)}}, part);
    }

    /// vLLM's rotary embedding, GPT-NeoX style: each head's first rot/2 and next rot/2 channels
    /// rotated by the cos and sin halves of the cache row at the token's position.
    Val lowerRotary() {
        int pos = kwTensor("positions"), cache = kwTensor("cos_sin_cache");
        const auto* neox = cur().kwarg("is_neox");
        if (!neox || neox->kind != Value::Kind::Bool || !neox->b) none("a rotary embedding other than the GPT-NeoX style (is_neox=True)");
        const auto hs = intArg(std::numeric_limits<std::size_t>::max(), "head_size", 0);
        const auto& ps = T(pos).shape;
        const auto& cs = T(cache).shape;
        if (!T(pos).isInt || ps.size() != 1 || cs.size() != 2 || cs[1] % 2 != 0 || cs[1] > hs || hs < 1) none("positions and a cos/sin cache of shapes it does not expect");
        const auto tokens = ps[0], rot = cs[1], half = rot / 2;
        int rows = emit("embedding", {pos, cache}, {tokens, rot}, false, json::object(), "cos_sin");
        int cos = emit("slice", {rows}, {tokens, half}, false, {{"dim", 1}, {"start", 0}, {"end", half}}, "cos_rows");
        int sin = emit("slice", {rows}, {tokens, half}, false, {{"dim", 1}, {"start", half}, {"end", rot}}, "sin_rows");
        cos = emit("view", {cos}, {tokens, 1, half}, false, json::object(), "cos");
        sin = emit("view", {sin}, {tokens, 1, half}, false, json::object(), "sin");
        auto rotate = [&](int x, const std::string& which) {
            const auto s = T(x).shape;  // a copy: emitting grows the tensors
            if (s.size() != 2 || s[0] != tokens || s[1] % hs != 0 || T(x).isInt) none("a " + which + " that is not [tokens, heads * head_size]");
            const auto heads = s[1] / hs;
            const std::vector<std::int64_t> h3 = {tokens, heads, hs}, hh = {tokens, heads, half};
            int x3 = emit("view", {x}, h3, false, json::object(), which + ".heads");
            int x1 = emit("slice", {x3}, hh, false, {{"dim", 2}, {"start", 0}, {"end", half}}, which + ".x1");
            int x2 = emit("slice", {x3}, hh, false, {{"dim", 2}, {"start", half}, {"end", rot}}, which + ".x2");
            int a = emit("sub", {emit("mul", {x1, cos}, hh, false, json::object(), which + ".x1_cos"), emit("mul", {x2, sin}, hh, false, json::object(), which + ".x2_sin")},
                         hh, false, json::object(), which + ".o1");
            int b = emit("add", {emit("mul", {x2, cos}, hh, false, json::object(), which + ".x2_cos"), emit("mul", {x1, sin}, hh, false, json::object(), which + ".x1_sin")},
                         hh, false, json::object(), which + ".o2");
            std::vector<int> parts = {a, b};
            if (rot < hs) parts.push_back(emit("slice", {x3}, {tokens, heads, hs - rot}, false, {{"dim", 2}, {"start", rot}, {"end", hs}}, which + ".pass"));
            int r = emit("concat", parts, h3, false, {{"dim", 2}}, which + ".rotated");
            return emit("view", {r}, s, false, json::object(), which);
        };
        std::vector<Val> out = {tensor(rotate(kwTensor("query"), "query"))};
        auto key = argVal(std::numeric_limits<std::size_t>::max(), "key");
        if (key.k == Val::K::Unsupported) throw Propagated(key.why);
        if (key.k == Val::K::Tensor) out.push_back(tensor(rotate(key.t, "key")));
        else if (key.k != Val::K::None) none("a key that is not a tensor");
        return tupleOf(std::move(out));
    }

    /// vLLM's attention: softmax(q·kᵀ/√head_size + M)·v per head, each key/value head shared by its
    /// group of query heads. M, the runtime's attention metadata (causality, where sequences
    /// start), is not in the graph: it is an input of the step that every rank receives alike.
    Val lowerVllmAttention() {
        int q = kwTensor("query"), k = kwTensor("key"), v = kwTensor("value");
        if (const auto* sc = cur().kwarg("output_scale"); sc && sc->kind != Value::Kind::None) none("an attention with an output scale (quantised output)");
        const auto qs = T(q).shape, ks = T(k).shape;  // copies: emitting grows the tensors
        if (qs.size() != 3 || ks.size() != 3 || T(v).shape != ks || ks[0] != qs[0] || ks[2] != qs[2] || ks[1] < 1 || qs[1] % ks[1] != 0)
            none("query, key and value that are not [tokens, heads, head_size] with whole groups of query heads per key head");
        const auto tokens = qs[0], heads = qs[1], kvHeads = ks[1], hs = qs[2], group = heads / kvHeads;
        assume("vLLM's unified attention is softmax(q·kᵀ/√head_size + M)·v per head with each key/value head serving " +
               std::string("its group of query heads; M, the runtime's attention metadata (causality, sequence starts), is not in the graph ") +
               "and is taken as an input every rank receives alike (docs/torch-graphs.md)");
        int mask = attentionMask(tokens);
        auto repeat = [&](int x, const std::string& which) {
            if (group == 1) return x;
            int a = emit("view", {x}, {tokens, kvHeads, 1, hs}, false, json::object(), which + ".groups");
            int b = emit("expand", {a}, {tokens, kvHeads, group, hs}, false, json::object(), which + ".repeat");
            return emit("view", {b}, {tokens, heads, hs}, false, json::object(), which + ".heads");
        };
        k = repeat(k, "key");
        v = repeat(v, "value");
        int qh = emit("permute", {q}, {heads, tokens, hs}, false, {{"dims", {1, 0, 2}}}, "query.by_head");
        int kh = emit("permute", {k}, {heads, hs, tokens}, false, {{"dims", {1, 2, 0}}}, "key.by_head");
        int vh = emit("permute", {v}, {heads, tokens, hs}, false, {{"dims", {1, 0, 2}}}, "value.by_head");
        const std::vector<std::int64_t> ss = {heads, tokens, tokens};
        int scores = emit("matmul", {qh, kh}, ss, false, json::object(), "scores");
        int scaled = emit("div_sqrt", {scores}, ss, false, {{"n", hs}}, "scaled");
        int masked = emit("add", {scaled, mask}, ss, false, json::object(), "masked");
        int probs = emit("softmax", {masked}, ss, false, {{"dim", 2}}, "probs");
        int ctx = emit("matmul", {probs, vh}, {heads, tokens, hs}, false, json::object(), "context");
        return tupleOf({tensor(emit("permute", {ctx}, qs, false, {{"dims", {1, 0, 2}}}))});
    }

    int attentionMask(std::int64_t tokens) {
        if (auto it = attentionMasks_.find(tokens); it != attentionMasks_.end()) return it->second;
        // A dot: no graph node's name has one, so no input can be named alike.
        int m = newTensor("attention_metadata." + std::to_string(tokens), {tokens, tokens}, false);
        p_.tensors[static_cast<std::size_t>(m)].runtimeInput = "vLLM attention metadata over " + std::to_string(tokens) + " tokens";
        return attentionMasks_[tokens] = m;
    }

    Val constantValue() {
        // A tensor constant's value is in neither form of the graph; the statement that made it
        // (`masked_input[input_mask] = 0`) names it when it is a literal.
        const auto& n = cur();
        if (n.source >= 0) {
            if (auto literal = assignedLiteral(g_->sources[static_cast<std::size_t>(n.source)].code)) {
                if (auto r = Rational::parse(*literal)) {
                    Val v;
                    v.k = Val::K::Number;
                    v.num = *r;
                    v.integral = literal->find_first_of(".eE") == std::string::npos;
                    return v;
                }
            }
        }
        Val v;
        v.k = Val::K::Constant;  // its value is unknown: usable only where an idiom says what it is
        return v;
    }

    /// The shape a view-like call asks for, checked against its annotation: a damaged graph
    /// otherwise (`view(x, [-1, -1, 128])` or an `unsqueeze` annotated without the new dim).
    void checkViewCall(const std::vector<std::int64_t>* from, const std::vector<std::int64_t>& annotated) const {
        const auto& f = cur().target;
        if (f == "aten.view.default" || f == "aten._unsafe_view.default" || f == "aten.reshape.default") {
            const auto* a = arg(1, f == "aten.reshape.default" ? "shape" : "size");
            if (!a || !a->isList()) return;
            int unknown = 0;
            bool agrees = a->items.size() == annotated.size();
            for (std::size_t k = 0; k < a->items.size(); ++k) {
                const auto& it = a->items[k];
                if (it.kind != Value::Kind::Int) return;  // a symbolic size: nothing to compare
                if (it.i == -1) ++unknown;
                else if (it.i < 0 || (agrees && it.i != annotated[k])) agrees = false;
            }
            if (!agrees || unknown > 1) damaged("the call asks for shape " + a->toString() + " but its result is annotated " + shapeToString(annotated));
        } else if (f == "aten.unsqueeze.default" && from) {
            const auto r = static_cast<std::int64_t>(from->size());
            const auto* a = arg(1, "dim");
            if (!a || a->kind != Value::Kind::Int) return;
            auto d = a->i;
            if (d < -r - 1 || d > r) damaged("dim " + std::to_string(d) + " is out of range for unsqueezing rank " + std::to_string(r));
            if (d < 0) d += r + 1;
            auto want = *from;
            want.insert(want.begin() + d, 1);
            if (want != annotated) damaged("unsqueeze at dim " + std::to_string(a->i) + " gives " + shapeToString(want) + " but its result is annotated " + shapeToString(annotated));
        }
    }

    Val lowerView() {
        auto v = argVal(0, "self");
        const auto& shape = resultShape();
        const bool shaped = v.k == Val::K::IdsOutOfRange || v.k == Val::K::MaskedIds || v.k == Val::K::PendingTarget || v.k == Val::K::OutOfRangeOnes ||
                            v.k == Val::K::InRangeOnes;
        checkViewCall(v.k == Val::K::Tensor ? &T(v.t).shape : shaped ? &v.shape : nullptr, shape);
        if ((v.k == Val::K::OutOfRangeOnes || v.k == Val::K::InRangeOnes) && numel(v.shape) == numel(shape) && !v.shape.empty()) {
            v.shape = shape;  // one value per id, in the ids' order
            return v;
        }
        if (v.k == Val::K::IdsOutOfRange && numel(v.shape) == numel(shape) && !v.shape.empty()) {
            v.shape = shape;  // `input_mask.unsqueeze(-1)`
            return v;
        }
        if (v.k == Val::K::MaskedIds || v.k == Val::K::PendingTarget) {
            std::int64_t before = std::accumulate(v.shape.begin(), v.shape.end(), std::int64_t{1}, std::multiplies<>());
            std::int64_t after = std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
            if (v.k == Val::K::PendingTarget) {
                // The gathered logits are [ids...]: a view of them is a view of the ids.
                if (before != after) none("a view that changes the number of gathered logits");
            } else if (before != after) {
                none("a view that changes the number of ids");
            }
            v.shape = shape;
            return v;
        }
        if (v.k == Val::K::Unsupported) return v;
        if (v.k != Val::K::Tensor) none("a view of " + describeKind(v.k));
        int x = v.t;
        if (numel(T(x).shape) != numel(shape)) damaged("a view to " + shapeToString(shape) + " of a tensor of " + shapeToString(T(x).shape));
        if (T(x).shape == shape) return tensor(x);
        return tensor(emit("view", {x}, shape, T(x).isInt));
    }

    /// Python's slice bounds: negative from the end, clamped to [0, size], end not before start.
    static void clampRange(std::int64_t& start, std::int64_t& end, std::int64_t size) {
        if (start < 0) start += size;
        if (end < 0) end += size;
        start = std::clamp<std::int64_t>(start, 0, size);
        end = std::clamp<std::int64_t>(end, start, size);
    }

    Val lowerSlice() {
        auto v = argVal(0, "self");
        auto dim = intArg(1, "dim", 0, false);
        auto start = intArg(2, "start", 0, false);
        auto end = intArg(3, "end", kFullEnd, false);
        if (intArg(4, "step", 1, false) != 1) none("a slice with a step");
        if (v.k == Val::K::PendingEmbedding && start == 0 && end == kFullEnd) return v;
        if (v.k == Val::K::Unsupported) return v;
        if (v.k != Val::K::Tensor) none("a slice of " + describeKind(v.k));
        int x = v.t;
        const auto& s = T(x).shape;
        if (s.empty()) none("a slice of a scalar");
        auto d = normDim(dim, s.size());
        auto size = s[static_cast<std::size_t>(d)];
        clampRange(start, end, size);
        if (start == 0 && end == size) return alias(x);
        if (start == end) none("an empty slice");
        return tensor(emit("slice", {x}, resultShape(), T(x).isInt, {{"dim", d}, {"start", start}, {"end", end}}));
    }

    Val lowerSliceScatter() {
        auto base = argVal(0, "self");
        int src = tensorArg(1, "src");
        auto dim = intArg(2, "dim", 0, false);
        auto start = intArg(3, "start", 0, false);
        auto end = intArg(4, "end", kFullEnd, false);
        if (intArg(5, "step", 1, false) != 1) none("a slice_scatter with a step");
        const auto& shape = resultShape();
        if (shape.empty()) none("a slice_scatter into a scalar");
        auto d = normDim(dim, shape.size());
        auto size = shape[static_cast<std::size_t>(d)];
        clampRange(start, end, size);
        if (start == 0 && end == size) {
            expectShape(src, shape);
            return tensor(src);  // the whole base is overwritten
        }
        if (base.k == Val::K::Unsupported) return base;
        if (base.k != Val::K::Tensor) none("a slice_scatter into " + describeKind(base.k));
        expectShape(base.t, shape);
        auto srcShape = shape;
        srcShape[static_cast<std::size_t>(d)] = end - start;
        if (T(src).shape != srcShape) damaged("a slice_scatter of a " + shapeToString(T(src).shape) + " source into a " + shapeToString(srcShape) + " range");
        if (start == end) return tensor(base.t);  // nothing is written
        // concat(base before the range, src, base after it): each part a copy, so that lineage
        // follows every part.
        std::vector<int> parts;
        auto keep = [&](std::int64_t from, std::int64_t to, const char* part) {
            auto ks = shape;
            ks[static_cast<std::size_t>(d)] = to - from;
            parts.push_back(emit("slice", {base.t}, ks, T(base.t).isInt, {{"dim", d}, {"start", from}, {"end", to}}, part));
        };
        if (start > 0) keep(0, start, "before");
        parts.push_back(src);
        if (end < size) keep(end, size, "after");
        return tensor(emit("concat", parts, shape, T(base.t).isInt, {{"dim", d}}));
    }

    Val lowerSplit(bool bySize) {
        int x = tensorArg(0, "self");
        const auto& s = T(x).shape;
        if (s.empty()) none("a split of a scalar");
        auto d = normDim(intArg(2, "dim", 0, false), s.size());
        auto total = s[static_cast<std::size_t>(d)];
        std::vector<std::int64_t> sizes;
        if (bySize) {
            auto each = intArg(1, "split_size", 0);
            if (each < 1) none("a split into empty pieces");
            for (std::int64_t at = 0; at < total; at += each) sizes.push_back(std::min(each, total - at));
        } else {
            sizes = intsArg(1, "split_sizes");
        }
        std::int64_t sum = 0;
        for (auto z : sizes) {
            if (z < 1) none("a split with an empty piece");
            sum += z;
        }
        if (sum != total) damaged("split sizes that do not add up to the dimension");
        Val t;
        t.k = Val::K::Tuple;
        if (sizes.size() == 1) {
            t.items.push_back(tensor(x));
            return t;
        }
        std::vector<std::vector<std::int64_t>> shapes;
        for (auto z : sizes) {
            auto sh = s;
            sh[static_cast<std::size_t>(d)] = z;
            shapes.push_back(sh);
        }
        for (int o : emitMulti("split", {x}, shapes, {{"dim", d}, {"sizes", sizes}})) {
            p_.tensors[static_cast<std::size_t>(o)].isInt = T(x).isInt;
            t.items.push_back(tensor(o));
        }
        return t;
    }

    Val lowerCat() {
        const auto* list = arg(0, "tensors");
        if (!list || !list->isList() || list->items.empty()) none("a concatenation of no tensors");
        std::vector<int> ins;
        for (const auto& it : list->items) {
            const auto& v = valOf(it);
            if (v.k == Val::K::Unsupported) throw Propagated(v.why);
            if (v.k != Val::K::Tensor) none("a concatenation of " + describeKind(v.k));
            ins.push_back(v.t);
        }
        auto d = normDim(intArg(1, "dim", 0, false), T(ins[0]).shape.size());
        if (ins.size() == 1) return alias(ins[0]);
        return tensor(emit("concat", ins, resultShape(), T(ins[0]).isInt, {{"dim", d}}));
    }

    Val lowerAddMatmul() {
        // beta·input + alpha·(a @ b)
        auto in = argVal(0, "self");
        int a = tensorArg(1, "mat1"), b = tensorArg(2, "mat2");
        Rational beta(1), alpha(1);
        if (const auto* v = cur().kwarg("beta")) {
            auto r = rationalOf(*v);
            if (!r) none("beta is not a number");
            beta = *r;
        }
        if (const auto* v = cur().kwarg("alpha")) {
            auto r = rationalOf(*v);
            if (!r) none("alpha is not a number");
            alpha = *r;
        }
        const auto& shape = resultShape();
        int prod = emit("matmul", {a, b}, shape, false, json::object(), "matmul");
        if (!alpha.isOne()) prod = emit("mul_scalar", {prod}, shape, false, {{"value", rat(alpha)}}, "scaled");
        if (beta.isZero()) return tensor(prod);  // PyTorch ignores the input when beta is 0
        if (in.k != Val::K::Tensor) none("an accumulation into " + describeKind(in.k));
        int base = in.t;
        if (!beta.isOne()) base = emit("mul_scalar", {base}, T(base).shape, false, {{"value", rat(beta)}}, "input_scaled");
        return tensor(emit("add", {base, prod}, shape, false));
    }

    Val lowerAddSub(bool isSub) {
        auto a = argVal(0, "self"), b = argVal(1, "other");
        Rational alpha(1);
        if (const auto* v = cur().kwarg("alpha")) {
            auto r = rationalOf(*v);
            if (!r) none("alpha is not a number");
            alpha = *r;
        }
        if (a.k == Val::K::Unsupported) return a;
        if (b.k == Val::K::Unsupported) return b;
        auto zero = [](const Val& v) { return v.k == Val::K::RangeScaled && (emptyRange(v) || v.num.isZero()); };
        if (a.k == Val::K::RangeScaled && b.k == Val::K::RangeScaled && a.ids == b.ids && !isSub && alpha.isOne()) {
            // vLLM's offset, `start · org_mask + added_offset · added_mask`: one of them is 0
            if (zero(b)) return a;
            if (zero(a)) return b;
            none("a sum of two vocabulary offsets, neither of them 0");
        }
        if (a.k == Val::K::PendingTarget && b.k == Val::K::InRangeOnes) {
            // Megatron's cross-entropy backward: the softmax at each target (column 0 where the
            // target is in another part) minus 1 where it is in this part; written back below.
            if (!isSub || !alpha.isOne() || a.ids != b.ids || a.s != b.s || a.e != b.e || a.shape != b.shape)
                none("a gathered logit and a vocabulary mask outside Megatron's cross-entropy backward");
            a.k = Val::K::TargetMinusInRange;
            return a;
        }
        if (a.k == Val::K::Tensor && T(a.t).isInt && b.k == Val::K::RangeScaled && isSub && alpha.isOne() && b.ids == a.t) {
            auto v = idsMask(Val::K::IdsMinusRange, a.t, b.s, b.e);
            v.num = b.num;
            return v;
        }
        if (a.k == Val::K::Tensor && T(a.t).isInt) {
            // Megatron's ids shifted into a vocabulary part: `input_ - vocab_start_index`.
            if (isSub && b.k == Val::K::Number && b.num.isInteger() && alpha.isOne()) {
                if (b.num.isZero()) return alias(a.t);
                Val v;
                v.k = Val::K::IdsShift;
                v.ids = a.t;
                v.s = b.num.num();
                return v;
            }
            none("integer arithmetic outside Megatron's vocabulary idiom");
        }
        if (a.k != Val::K::Tensor) none("arithmetic on " + describeKind(a.k));
        if (b.k == Val::K::Number) {
            auto v = b.num * alpha;
            if (isSub) v = -v;
            if (v.isZero()) return alias(a.t);
            return tensor(emit("add_scalar", {a.t}, resultShape(), false, {{"value", rat(v)}}));
        }
        if (b.k != Val::K::Tensor) none("arithmetic with " + describeKind(b.k));
        if (T(b.t).isInt) none("integer arithmetic");
        int bt = b.t;
        if (!alpha.isOne()) bt = emit("mul_scalar", {bt}, T(bt).shape, false, {{"value", rat(alpha)}}, "alpha");
        return tensor(emit(isSub ? "sub" : "add", {a.t, bt}, resultShape(), false));
    }

    Val lowerMulDiv(bool isDiv) {
        auto a = argVal(0, "self"), b = argVal(1, "other");
        if (a.k == Val::K::Unsupported) return a;
        if (b.k == Val::K::Unsupported) return b;
        if (!isDiv && (a.k == Val::K::IdsInRange || b.k == Val::K::IdsInRange)) {
            if (b.k == Val::K::IdsInRange) std::swap(a, b);
            // vLLM: `offset · mask` and `vocab_mask · (input_ − valid_offset)`
            if (b.k == Val::K::Number && b.integral) {
                auto v = idsMask(Val::K::RangeScaled, a.ids, a.s, a.e);
                v.num = b.num;
                return v;
            }
            if (b.k == Val::K::IdsMinusRange && b.ids == a.ids && b.s == a.s && b.e == a.e && b.num == Rational(a.s) && !emptyRange(a)) {
                // [s <= ids < e] · (ids − s·[s <= ids < e]) = the ids shifted into the part, 0 outside it
                auto v = idsMask(Val::K::MaskedIds, a.ids, a.s, a.e);
                v.shape = T(a.ids).shape;
                return v;
            }
            none("a product with a vocabulary mask outside vLLM's idiom");
        }
        if (a.k != Val::K::Tensor || T(a.t).isInt) none("arithmetic on " + (a.k == Val::K::Tensor ? std::string("integers") : describeKind(a.k)));
        if (b.k == Val::K::Number) {
            if (isDiv && b.num.isZero()) none("a division by the number 0");
            auto v = isDiv ? Rational(1) / b.num : b.num;
            if (v.isOne()) return alias(a.t);
            return tensor(emit("mul_scalar", {a.t}, resultShape(), false, {{"value", rat(v)}}));
        }
        if (b.k != Val::K::Tensor || T(b.t).isInt) none("arithmetic with " + (b.k == Val::K::Tensor ? std::string("integers") : describeKind(b.k)));
        return tensor(emit(isDiv ? "div" : "mul", {a.t, b.t}, resultShape(), false));
    }

    Val lowerReduce(bool mean, bool all) {
        int x = tensorArg(0, "self");
        if (T(x).isInt) none("a reduction of integers");
        const auto& s = T(x).shape;
        json attrs = json::object();
        if (!all) {
            auto dims = intsArg(1, "dim");
            bool keep = false;
            if (const auto* k = arg(2, "keepdim"); k && k->kind == Value::Kind::Bool) keep = k->b;
            if (!dims.empty()) {
                for (auto& d : dims) d = normDim(d, s.size());
                attrs["dims"] = dims;
            }
            if (keep) attrs["keepdim"] = true;
        }
        if (s.empty()) return alias(x);
        if (!mean) return tensor(emit("sum", {x}, resultShape(), false, attrs));
        // A mean is the sum scaled by 1/n, so that it relates to a program that sums and divides.
        std::int64_t n = 1;
        if (attrs.contains("dims")) {
            std::set<std::int64_t> seen;
            for (auto d : attrs["dims"].get<std::vector<std::int64_t>>())
                if (seen.insert(d).second) n *= s[static_cast<std::size_t>(d)];
        } else {
            n = numel(s);
        }
        int total = emit("sum", {x}, resultShape(), false, attrs, "sum");
        return tensor(emit("mul_scalar", {total}, resultShape(), false, {{"value", rat(Rational(1, n))}}));
    }

    Val lowerIndexPut() {
        auto base = argVal(0, "self");
        const auto* idx = arg(1, "indices");
        auto value = argVal(2, "values");
        if (!idx || !idx->isList() || (idx->items.size() != 1 && idx->items.size() != 2)) none("an index_put with other than one or two indices");
        if (const auto* acc = arg(3, "accumulate"); acc && !(acc->kind == Value::Kind::Bool && !acc->b) && acc->kind != Value::Kind::None)
            none("an index_put that accumulates");
        if (idx->items.size() == 2) {
            // Megatron's cross-entropy backward, `grad_2d[arange_1d, masked_target_1d] -=
            // softmax_update` written as x[rows, t] = x[rows, t] − [t in this part]: x minus the
            // one-hot of the targets in this vocabulary part. Exact: every row is written once (the
            // arange), at its target's column when the target is here (less 1) and at column 0,
            // unchanged, when it is not.
            const auto& r = valOf(idx->items[0]);
            const auto& c = valOf(idx->items[1]);
            if (base.k == Val::K::Unsupported) return base;
            if (value.k == Val::K::Unsupported) return value;
            if (base.k == Val::K::Tensor && value.k == Val::K::TargetMinusInRange && r.k == Val::K::Arange && c.k == Val::K::MaskedIds) {
                const auto xs = T(base.t).shape;
                if (value.w == base.t && value.ids == c.ids && value.s == c.s && value.e == c.e && value.shape == c.shape && xs.size() == 2 &&
                    c.shape.size() == 1 && c.shape[0] == xs[0] && r.n == xs[0] && c.e - c.s == xs[1]) {
                    int labels = c.ids;
                    if (T(labels).shape != c.shape) labels = emit("view", {labels}, c.shape, true, json::object(), "labels");
                    int hot = emit("one_hot", {labels}, xs, false, vocabPart(c.s, xs[1]), "one_hot");
                    return tensor(emit("sub", {base.t, hot}, resultShape(), false));
                }
            }
            none("an index_put at two indices outside Megatron's cross-entropy backward");
        }
        const auto& mask = valOf(idx->items[0]);
        if (base.k == Val::K::Unsupported) return base;
        if (value.k == Val::K::Unsupported) return value;
        // The backward of `output_parallel[input_mask, :] = 0.0`: the gradient's rows of ids in
        // other parts zeroed, for the embedding backward by the masked ids that follows. Only a written
        // 0 (a 0-dim zeros): the assumption below about constants is for the forward idioms.
        if (mask.k == Val::K::IdsOutOfRange && value.k == Val::K::Number && value.num.isZero() && base.k == Val::K::Tensor && !T(base.t).isInt &&
            mask.shape == T(mask.ids).shape && T(base.t).shape.size() == mask.shape.size() + 1 &&
            std::equal(mask.shape.begin(), mask.shape.end(), T(base.t).shape.begin())) {
            auto v = idsMask(Val::K::RowsOfOtherPartsZeroed, mask.ids, mask.s, mask.e);
            v.w = base.t;
            v.shape = mask.shape;
            return v;
        }
        if (mask.k == Val::K::IdsOutOfRange && value.k == Val::K::Constant) {
            // Megatron writes these constants as 0 (`masked_target[target_mask] = 0`,
            // `predicted_logits[target_mask] = 0.0`); the captured graphs do not carry their values.
            const auto& n = cur();
            std::string a = "the tensor constant written by " + n.name + " (" +
                            (n.source >= 0 ? g_->sources[static_cast<std::size_t>(n.source)].toString() : g_->file + ":" + std::to_string(n.line)) +
                            ") is taken to be 0, as Megatron's vocabulary-parallel code writes it: the graph does not carry its value";
            if (std::find(p_.assumptions.begin(), p_.assumptions.end(), a) == p_.assumptions.end() && p_.assumptions.size() < 64) p_.assumptions.push_back(a);
            value.k = Val::K::Number;
            value.num = Rational(0);
        }
        if (mask.k == Val::K::IdsOutOfRange && value.k == Val::K::Number && value.num.isZero()) {
            // masked_input[input_mask] = 0: the ids of this vocabulary part, the others at row 0.
            int ids = base.k == Val::K::Tensor ? base.t : base.k == Val::K::IdsShift ? base.ids : -1;
            std::int64_t shift = base.k == Val::K::IdsShift ? base.s : 0;
            if (ids >= 0 && ids == mask.ids && shift == mask.s && mask.shape == T(ids).shape) {
                Val v;
                v.k = Val::K::MaskedIds;
                v.ids = ids;
                v.s = mask.s;
                v.e = mask.e;
                v.shape = T(ids).shape;
                return v;
            }
            // output_parallel[input_mask, :] = 0.0: the rows of other parts zeroed.
            if (base.k == Val::K::PendingEmbedding && base.ids == mask.ids && base.s == mask.s && base.e == mask.e && mask.shape == base.shape) return finishEmbedding(base);
            if (base.k == Val::K::PendingTarget && base.ids == mask.ids && base.s == mask.s && base.e == mask.e && mask.shape == base.shape) return finishTarget(base);
        }
        none("an index_put outside Megatron's vocabulary idioms");
    }

    /// A gather from `table` by masked ids, waiting for the rows of other parts to be zeroed.
    static Val gatherPending(Val::K kind, int table, const Val& ids) {
        Val v;
        v.k = kind;
        v.w = table;
        v.ids = ids.ids;
        v.s = ids.s;
        v.e = ids.e;
        v.shape = ids.shape;
        return v;
    }

    Val lowerIndex() {
        auto x = argVal(0, "self");
        const auto* idx = arg(1, "indices");
        if (!idx || !idx->isList()) none("an index without a list of indices");
        if (x.k == Val::K::Unsupported) return x;
        if (x.k != Val::K::Tensor || T(x.t).isInt) none("indexing into " + describeKind(x.k));
        const auto& xs = T(x.t).shape;
        if (idx->items.size() == 1 && xs.size() == 2) {
            const auto& i = valOf(idx->items[0]);
            if (i.k == Val::K::Unsupported) throw Propagated(i.why);
            if (i.k == Val::K::Tensor && T(i.t).isInt) return tensor(emit("embedding", {i.t, x.t}, resultShape(), false));  // weight[ids]
            if (i.k == Val::K::MaskedIds && i.e - i.s == xs[0]) return gatherPending(Val::K::PendingEmbedding, x.t, i);
        }
        if (idx->items.size() == 2 && xs.size() == 2) {
            const auto& r = valOf(idx->items[0]);
            const auto& c = valOf(idx->items[1]);
            if (r.k == Val::K::Arange && r.n == xs[0] && c.k == Val::K::MaskedIds && c.e - c.s == xs[1] && c.shape.size() == 1 && c.shape[0] == xs[0])
                return gatherPending(Val::K::PendingTarget, x.t, c);
        }
        none("indexing other than a table lookup or Megatron's vocabulary idioms");
    }

    json vocabPart(std::int64_t s, std::int64_t width) const {
        if (width < 1) none("an empty vocabulary part");
        if (s < 0) none("a vocabulary range starting below 0");
        if (s % width != 0) none("a vocabulary range starting at " + std::to_string(s) + ", not a multiple of its width " + std::to_string(width));
        const auto index = s / width;
        if (!parallel_ && index == 0) return json::object();
        // parts: at least the ranks (raised later, if needed, to cover the logical vocabulary).
        const auto parts = std::max<std::int64_t>(static_cast<std::int64_t>(set_.ranks.size()), index + 1);
        if (parts == 1) return json::object();
        return {{"parts", parts}, {"index", index}};
    }

    Val finishEmbedding(const Val& v) {
        const auto width = T(v.w).shape[0];
        int ids = v.ids;
        if (T(ids).shape != v.shape) ids = emit("view", {ids}, v.shape, true, json::object(), "ids");
        return tensor(emit("embedding", {ids, v.w}, resultShape(), false, vocabPart(v.s, width)));
    }

    Val finishTarget(const Val& v) {
        const auto width = T(v.w).shape[1];
        const auto& shape = resultShape();
        if (shape != v.shape) damaged("the gathered logits are annotated " + shapeToString(shape) + " but are " + shapeToString(v.shape));
        int ids = v.ids;
        if (T(ids).shape != shape) ids = emit("view", {ids}, shape, true, json::object(), "labels");
        int logits = v.w;
        auto ls = shape;
        ls.push_back(width);
        if (T(logits).shape != ls) logits = emit("view", {logits}, ls, false, json::object(), "logits");
        return tensor(emit("target_logit", {logits, ids}, shape, false, vocabPart(v.s, width)));
    }

    Val lowerCollective(const CollectiveCall& c) {
        auto in = valOf(Value::ofNode(c.input));
        if (in.k == Val::K::Unsupported) return in;
        if (in.k != Val::K::Tensor) none("a collective of " + describeKind(in.k));
        if (!parallel_) {
            // On the single device every group is of one rank: the collective is an identity.
            if (cur().type) expectShape(in.t, resultShape());
            return tensor(in.t);
        }
        int out = newTensor(cur().name, resultShape(), T(in.t).isInt);
        pending[{rank_, node_}] = PendingCollective{in.t, out, -1};
        return tensor(out);
    }
};

}  // namespace

std::vector<int> topologicalOrder(const LoweredProgram& program) {
    std::vector<int> order;
    std::vector<char> state(program.ops.size(), 0);
    for (std::size_t s = 0; s < program.ops.size(); ++s) {
        if (state[s]) continue;
        std::vector<std::pair<int, std::size_t>> stack{{static_cast<int>(s), 0}};
        state[s] = 1;
        while (!stack.empty()) {
            auto& [op, k] = stack.back();
            const auto& ins = program.ops[static_cast<std::size_t>(op)].inputs;
            if (k < ins.size()) {
                int prod = program.tensors[static_cast<std::size_t>(ins[k++])].producer;
                if (prod >= 0 && !state[static_cast<std::size_t>(prod)]) {
                    state[static_cast<std::size_t>(prod)] = 1;
                    stack.push_back({prod, 0});
                }
                continue;
            }
            order.push_back(op);
            stack.pop_back();
        }
    }
    return order;
}

LoweredProgram lowerLogical(const RankSet& set) {
    LoweredProgram p;
    Lowerer l(p, set, false);
    l.lowerGraph(set.logical, -1);
    return p;
}

LoweredProgram lowerParallel(const RankSet& set) {
    LoweredProgram p;
    p.ranks = static_cast<int>(set.ranks.size());
    Lowerer l(p, set, true);
    for (std::size_t r = 0; r < set.ranks.size(); ++r) l.lowerGraph(set.ranks[r], static_cast<int>(r));
    // One collective op per collective of the rank set, over its group.
    for (std::size_t ci = 0; ci < set.collectives.size(); ++ci) {
        const auto& c = set.collectives[ci];
        LoweredOp op;
        bool complete = true;
        for (std::size_t m = 0; m < c.ranks.size(); ++m) {
            auto it = l.pending.find({c.ranks[m], c.nodeOnRank[m]});
            if (it == l.pending.end()) {
                complete = false;
                continue;
            }
            op.inputs.push_back(it->second.input);
            op.outputs.push_back(it->second.output);
        }
        auto markUnsupported = [&](const std::string& reason) {
            const auto& g0 = set.ranks[static_cast<std::size_t>(c.ranks[0])];
            const auto& n0 = g0.nodes[static_cast<std::size_t>(c.nodeOnRank[0])];
            Unsupported u;
            u.node = n0.name;
            u.target = n0.target;
            u.reason = reason;
            u.rank = c.ranks[0];
            u.file = g0.file;
            u.line = n0.line;
            if (n0.source >= 0) {
                p.sources.push_back(g0.sources[static_cast<std::size_t>(n0.source)]);
                u.source = static_cast<int>(p.sources.size()) - 1;
            }
            p.unsupported.push_back(u);
            for (int o : op.outputs) p.tensors[static_cast<std::size_t>(o)].unsupported = static_cast<int>(p.unsupported.size()) - 1;
        };
        if (!complete) {
            // Some member's input has no semantics: the others' results have none either.
            markUnsupported("the tensor a member of the group sends has no semantics");
            continue;
        }
        const auto& g0 = set.ranks[static_cast<std::size_t>(c.ranks[0])];
        const auto& n0 = g0.nodes[static_cast<std::size_t>(c.nodeOnRank[0])];
        op.name = n0.name + "@g" + c.group;
        op.torchNode = n0.name;
        op.torchTarget = n0.target;
        op.group = c.ranks;
        if (n0.source >= 0) {
            p.sources.push_back(g0.sources[static_cast<std::size_t>(n0.source)]);
            op.source = static_cast<int>(p.sources.size()) - 1;
        }
        switch (c.kind) {
        case Collective::Kind::AllReduce:
            op.kind = "all_reduce";
            if (c.reduce == "sum" || c.reduce == "max") op.attrs = {{"reduce", c.reduce}};
            else if (c.reduce == "avg") op.attrs = {{"reduce", "mean"}};
            else op.kind.clear();
            break;
        case Collective::Kind::AllGather: op.kind = "all_gather"; op.attrs = {{"dim", 0}}; break;
        case Collective::Kind::ReduceScatter:
            op.kind = c.reduce == "sum" ? "reduce_scatter" : "";
            op.attrs = {{"dim", 0}};
            break;
        case Collective::Kind::Broadcast: {
            op.kind = "broadcast";
            // c10d's source is the group-local rank (the process group's root, as the rank set
            // checks it); our broadcast sends from group[0].
            if (c.source < 0 || static_cast<std::size_t>(c.source) >= op.group.size()) op.kind.clear();
            else {
                auto k = static_cast<std::size_t>(c.source);
                std::rotate(op.group.begin(), op.group.begin() + static_cast<std::ptrdiff_t>(k), op.group.end());
                std::rotate(op.inputs.begin(), op.inputs.begin() + static_cast<std::ptrdiff_t>(k), op.inputs.end());
                std::rotate(op.outputs.begin(), op.outputs.begin() + static_cast<std::ptrdiff_t>(k), op.outputs.end());
                op.inputs.resize(1);
            }
            break;
        }
        }
        if (op.kind.empty()) {
            markUnsupported("reduction '" + c.reduce + "' has no semantics yet");
            continue;
        }
        const int id = static_cast<int>(p.ops.size());
        for (int o : op.outputs) p.tensors[static_cast<std::size_t>(o)].producer = id;
        p.ops.push_back(std::move(op));
    }
    return p;
}

}  // namespace tv::torch
