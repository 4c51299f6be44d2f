// Embedding, cross-entropy and its parts (target_logit, one_hot), dropout.
//
// The operators that look index data up, each possibly over one part of the vocabulary
// (vocabulary-parallel embedding and loss).
#include "ops/op_definition.hpp"

namespace tv::opdef {

namespace {

// ===== embedding, loss, dropout ==============================================================

template <class C>
void shapeEmbedding(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& ids = in[0];
    const auto& w = in[1];
    if (!c.require(w.size() == 2, "weight must be [vocab, hidden]")) return;
    if (!c.require(out[0].size() == ids.size() + 1, "output must be [..ids.., hidden]")) return;
    c.min2(w[0]);
    for (std::size_t i = 0; i < ids.size(); ++i) c.eq(out[0][i], ids[i], dimName("output", i));
    c.eq(out[0].back(), w[1], "output hidden");
}
template <class C>
void shapeEmbeddingBackward(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& ids = in[0];
    const auto& dy = in[1];
    if (!c.require(out[0].size() == 2, "output must be [vocab, hidden]")) return;
    if (!c.require(dy.size() == ids.size() + 1, "input 1 must be [..ids.., hidden]")) return;
    c.min2(out[0][0]);
    for (std::size_t i = 0; i < ids.size(); ++i) c.eq(dy[i], ids[i], dimName("input 1", i));
    c.eq(dy.back(), out[0][1], "hidden");
}

/// A vocabulary part (vocab-parallel embedding and cross-entropy): the op holds classes
/// [index * n, (index + 1) * n) of parts * n, n being its own class count.
///
/// Ids and labels are values like any other (symbolic in a proof, numbers in replay): the op
/// compares each with the class numbers it holds, so a check covers every value of the index
/// data, not one pattern. An id that no class of the whole vocabulary matches (out of range, or
/// not an integer) selects nothing: its embedding row, label logit and one-hot row are zero, in
/// every part alike, so the logical op and its vocabulary-parallel form agree on it as on any id.
struct VocabPart {
    std::int64_t parts = 1, index = 0;
    explicit VocabPart(const json& a) : parts(attrInt(a, "parts", 1)), index(attrInt(a, "index", 0)) {}
    /// [id == class r of this part (of n classes)]: 1 or 0.
    template <class A>
    typename A::S hit(const A& alg, const typename A::S& id, std::int64_t r, std::int64_t n) const {
        return alg.hit(id, index * n + r);
    }
    /// sum_r [id == class r] * value(r): the value of the class `id` names, 0 if it is not here.
    template <class A, class F>
    typename A::S select(const A& alg, const typename A::S& id, std::int64_t n, F&& value) const {
        std::vector<typename A::S> terms;
        terms.reserve(static_cast<std::size_t>(n));
        for (std::int64_t r = 0; r < n; ++r) terms.push_back(alg.mul(hit(alg, id, r, n), value(r)));
        return alg.sum(terms);
    }
};

std::string checkVocabPart(const json& a, const std::vector<Shape>&, const std::vector<Shape>&) {
    if (a.contains("parts") != a.contains("index")) return "attributes parts and index go together";
    VocabPart p(a);
    if (p.parts < 1 || p.index < 0 || p.index >= p.parts) return "attribute index must be in [0, parts)";
    return {};
}

struct EmbeddingOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& ids = *in[0];
        const auto& w = *in[1];
        auto& o = out[0];
        std::int64_t V = w.shape[0], H = w.shape[1];
        const VocabPart part(ctx.attrs);
        o.v.clear();
        for (const auto& id : ids.v)
            for (std::int64_t h = 0; h < H; ++h)
                o.v.push_back(part.select(alg, id, V, [&](std::int64_t r) { return w.v[static_cast<std::size_t>(r * H + h)]; }));
    }
};

struct EmbeddingBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& ids = *in[0];
        const auto& dy = *in[1];
        auto& o = out[0];
        std::int64_t V = o.shape[0], H = o.shape[1];
        const VocabPart part(ctx.attrs);
        std::vector<std::vector<typename A::S>> parts(static_cast<std::size_t>(V * H));
        for (std::size_t i = 0; i < ids.v.size(); ++i)
            for (std::int64_t r = 0; r < V; ++r) {
                auto hit = part.hit(alg, ids.v[i], r, V);
                for (std::int64_t h = 0; h < H; ++h)
                    parts[static_cast<std::size_t>(r * H + h)].push_back(alg.mul(hit, dy.v[i * static_cast<std::size_t>(H) + static_cast<std::size_t>(h)]));
            }
        o.v.clear();
        for (auto& p : parts) o.v.push_back(alg.sum(p));
    }
};

template <class C>
void shapeCrossEntropy(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& logits = in[0];
    const auto& labels = in[1];
    if (!c.require(logits.size() == labels.size() + 1, "logits must be [..labels.., classes]")) return;
    for (std::size_t i = 0; i < labels.size(); ++i) {
        c.eq(labels[i], logits[i], dimName("labels", i));
        c.min2(logits[i]);
    }
    c.min2(logits.back());
    if (out.size() == 1 && in.size() == 2) {
        c.require(out[0].empty(), "the loss is a scalar (shape [])");
        return;
    }
    // backward: inputs (logits, labels, dloss) -> dlogits
    if (!c.require(in[2].empty(), "input 2 (dloss) must be a scalar")) return;
    if (!c.require(out[0].size() == logits.size(), "output must have the shape of the logits")) return;
    for (std::size_t i = 0; i < logits.size(); ++i) c.eq(out[0][i], logits[i], dimName("output", i));
}

/// Mean cross-entropy: (1/N) sum_i (log sum_j exp(l_ij) - l_{i,y_i}), N the full token count.
struct CrossEntropyOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& l = *in[0];
        const auto& y = *in[1];
        std::int64_t C = l.shape.back(), N = numel(l.shape) / C;
        const VocabPart all(json::object());
        std::vector<typename A::S> terms;
        for (std::int64_t i = 0; i < N; ++i) {
            std::vector<typename A::S> e;
            for (std::int64_t j = 0; j < C; ++j) e.push_back(alg.exp(l.v[static_cast<std::size_t>(i * C + j)]));
            auto picked = all.select(alg, y.v[static_cast<std::size_t>(i)], C, [&](std::int64_t j) { return l.v[static_cast<std::size_t>(i * C + j)]; });
            terms.push_back(alg.sub(alg.log(alg.sum(e)), picked));
        }
        out[0].v = {alg.mul(alg.sum(terms), alg.num(Rational(1, fullRows(ctx.origInputs, 0, l.shape))))};
    }
};

/// dlogits_ij = dloss / N * (softmax_ij - [j == y_i]), N the full token count.
struct CrossEntropyBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& l = *in[0];
        const auto& y = *in[1];
        const auto& g = in[2]->v[0];
        auto& o = out[0];
        initOut(alg, o);
        std::int64_t C = l.shape.back(), N = numel(l.shape) / C;
        const VocabPart all(json::object());
        auto scale = alg.mul(g, alg.num(Rational(1, fullRows(ctx.origInputs, 0, l.shape))));
        for (std::int64_t i = 0; i < N; ++i) {
            std::vector<typename A::S> e;
            for (std::int64_t j = 0; j < C; ++j) e.push_back(alg.exp(l.v[static_cast<std::size_t>(i * C + j)]));
            auto z = alg.sum(e);
            for (std::int64_t j = 0; j < C; ++j) {
                auto p = alg.div(e[static_cast<std::size_t>(j)], z);
                auto hit = all.hit(alg, y.v[static_cast<std::size_t>(i)], j, C);
                o.v[static_cast<std::size_t>(i * C + j)] = alg.mul(scale, alg.sub(p, hit));
            }
        }
    }
};

template <class C>
void shapeTargetLogit(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& logits = in[0];
    const auto& labels = in[1];
    if (!c.require(logits.size() == labels.size() + 1, "logits must be [..labels.., classes]")) return;
    if (!c.require(out[0].size() == labels.size(), "output must have the shape of the labels")) return;
    for (std::size_t i = 0; i < labels.size(); ++i) {
        c.eq(labels[i], logits[i], dimName("labels", i));
        c.eq(out[0][i], labels[i], dimName("output", i));
    }
    c.min2(logits.back());
}

/// (logits, labels) -> the logit of each label, or 0 where another vocabulary part holds it.
struct TargetLogitOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& l = *in[0];
        const auto& y = *in[1];
        const VocabPart part(ctx.attrs);
        std::int64_t C = l.shape.back();
        out[0].v.clear();
        for (std::size_t i = 0; i < y.v.size(); ++i)
            out[0].v.push_back(part.select(alg, y.v[i], C, [&](std::int64_t r) { return l.v[i * static_cast<std::size_t>(C) + static_cast<std::size_t>(r)]; }));
    }
};

template <class C>
void shapeOneHot(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    const auto& labels = in[0];
    if (!c.require(out[0].size() == labels.size() + 1, "output must be [..labels.., classes]")) return;
    for (std::size_t i = 0; i < labels.size(); ++i) c.eq(out[0][i], labels[i], dimName("output", i));
    c.min2(out[0].back());
}

/// labels -> 1 at each label's class, 0 elsewhere (within this vocabulary part).
struct OneHotOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& y = *in[0];
        const VocabPart part(ctx.attrs);
        std::int64_t C = out[0].shape.back();
        out[0].v.clear();
        for (const auto& id : y.v)
            for (std::int64_t j = 0; j < C; ++j) out[0].v.push_back(part.hit(alg, id, j, C));
    }
};

struct DropoutOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto& o = out[0];
        initOut(alg, o);
        auto keep = Rational(1) - attrRat(ctx.attrs, "p");
        auto inv = alg.num(Rational(1) / keep);
        for (std::size_t i = 0; i < o.v.size(); ++i) o.v[i] = alg.mul(alg.mul(in[0]->v[i], in[1]->v[i]), inv);
    }
};


// ----- backward rules -----

std::vector<H> vjpEmbedding(GradBuilder& b, const VjpArgs& a) {
    json attrs = json::object();
    for (const char* k : {"parts", "index"})
        if (a.attrs.contains(k)) attrs[k] = a.attrs.at(k);
    return {-1, b.emitOp1("embedding_backward", {a.inputs[0], a.outGrads[0]}, attrs, b.shapeOf(a.inputs[1]))};
}
std::vector<H> vjpCrossEntropy(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("cross_entropy_backward", {a.inputs[0], a.inputs[1], a.outGrads[0]}, json::object(),
                    b.shapeOf(a.inputs[0])),
            -1};
}
std::vector<H> vjpDropout(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("dropout", {a.outGrads[0], a.inputs[1]}, a.attrs, b.shapeOf(a.inputs[0])), -1};
}

// How many classes the ids of each lookup may name, over the whole vocabulary (lookupRange):
// a vocabulary part's own class count times its parts.
std::int64_t lastOf(const std::vector<Shape>& v, std::size_t i) { return i < v.size() && !v[i].empty() ? v[i].back() : 0; }
std::int64_t firstOf(const std::vector<Shape>& v, std::size_t i) { return i < v.size() && !v[i].empty() ? v[i].front() : 0; }
std::int64_t partsOf(const json& a) { return std::max<std::int64_t>(1, attrInt(a, "parts", 1)); }
std::int64_t lookupEmbedding(const std::vector<Shape>& in, const std::vector<Shape>&, const json& a) { return firstOf(in, 1) * partsOf(a); }
std::int64_t lookupEmbeddingBackward(const std::vector<Shape>&, const std::vector<Shape>& out, const json& a) { return firstOf(out, 0) * partsOf(a); }
std::int64_t lookupTargetLogit(const std::vector<Shape>& in, const std::vector<Shape>&, const json& a) { return lastOf(in, 0) * partsOf(a); }
std::int64_t lookupOneHot(const std::vector<Shape>&, const std::vector<Shape>& out, const json& a) { return lastOf(out, 0) * partsOf(a); }
std::int64_t lookupCrossEntropy(const std::vector<Shape>& in, const std::vector<Shape>&, const json&) { return lastOf(in, 0); }

}  // namespace

void registerEmbeddingAndLoss(OpTable& t) {
    { auto* s = t.generic("embedding", OpClass::Compute, 2, 2, 1, EmbeddingOp{}, vjpEmbedding, "(ids, weight) -> weight[ids]; with parts/index, a vocabulary part: rows of other parts are 0", {}, {"parts", "index"}); s->intInputs = {0}; s->checkAttrs = checkVocabPart; s->lookupRange = lookupEmbedding; TV_SHAPE(*s, shapeEmbedding); }
    { auto* s = t.generic("embedding_backward", OpClass::Compute, 2, 2, 1, EmbeddingBackwardOp{}, nullptr, "(ids, dy) -> scatter-add of dy rows into [vocab, hidden] (its vocabulary part)", {}, {"parts", "index"}); s->intInputs = {0}; s->checkAttrs = checkVocabPart; s->lookupRange = lookupEmbeddingBackward; TV_SHAPE(*s, shapeEmbeddingBackward); }
    { auto* s = t.generic("target_logit", OpClass::Loss, 2, 2, 1, TargetLogitOp{}, nullptr, "(logits, labels) -> each label's logit, 0 where another vocabulary part holds it", {}, {"parts", "index"}); s->intInputs = {1}; s->checkAttrs = checkVocabPart; s->lookupRange = lookupTargetLogit; TV_SHAPE(*s, shapeTargetLogit); }
    { auto* s = t.generic("one_hot", OpClass::Loss, 1, 1, 1, OneHotOp{}, nullptr, "labels -> 1 at each label's class (in this vocabulary part), else 0", {}, {"parts", "index"}); s->intInputs = {0}; s->checkAttrs = checkVocabPart; s->lookupRange = lookupOneHot; TV_SHAPE(*s, shapeOneHot); }
    { auto* s = t.generic("cross_entropy", OpClass::Loss, 2, 2, 1, CrossEntropyOp{}, vjpCrossEntropy, "(logits, labels) -> mean of log-sum-exp minus the label logit"); s->intInputs = {1}; s->lookupRange = lookupCrossEntropy; TV_SHAPE(*s, shapeCrossEntropy); }
    { auto* s = t.generic("cross_entropy_backward", OpClass::Loss, 3, 3, 1, CrossEntropyBackwardOp{}, nullptr, "(logits, labels, dloss) -> dloss/N (softmax - onehot)"); s->intInputs = {1}; s->lookupRange = lookupCrossEntropy; TV_SHAPE(*s, shapeCrossEntropy); }
    { auto* s = t.generic("dropout", OpClass::Elementwise, 2, 2, 1, DropoutOp{}, vjpDropout, "(x, mask) -> x mask / (1-p)", {"p"}); TV_SHAPE(*s, shapeSame); }
}

}  // namespace tv::opdef
