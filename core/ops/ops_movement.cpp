// Data movement: reshape, permute, slice, concat, split, chunk, expand and sum_to, zeros_like.
//
// Every output element is one input element (or a sum of them, for sum_to): exact, and the same
// for float and index tensors (their ops keep the dtype).
#include "ops/op_definition.hpp"

namespace tv::opdef {

namespace {

// ===== data movement =========================================================================

/// Groups the non-unit dims of two shapes with equal element counts into minimal runs with equal
/// products (the dims a reshape merges or splits). Returns false if the shapes cannot be grouped.
bool reshapeGroups(const Shape& a, const Shape& b,
                   std::vector<std::pair<std::vector<std::size_t>, std::vector<std::size_t>>>& groups) {
    std::vector<std::size_t> ia, ib;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i] != 1) ia.push_back(i);
    for (std::size_t i = 0; i < b.size(); ++i)
        if (b[i] != 1) ib.push_back(i);
    std::size_t i = 0, j = 0;
    while (i < ia.size() || j < ib.size()) {
        if (i >= ia.size() || j >= ib.size()) return false;
        std::vector<std::size_t> ga{ia[i]}, gb{ib[j]};
        std::int64_t pa = a[ia[i++]], pb = b[ib[j++]];
        while (pa != pb) {
            if (pa < pb) {
                if (i >= ia.size()) return false;
                ga.push_back(ia[i]);
                pa *= a[ia[i++]];
            } else {
                if (j >= ib.size()) return false;
                gb.push_back(ib[j]);
                pb *= b[ib[j++]];
            }
        }
        groups.emplace_back(std::move(ga), std::move(gb));
    }
    return true;
}

template <class C>
void shapeReshape(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    Shape a, b;
    for (const auto& d : in[0]) a.push_back(c.orig(d));
    for (const auto& d : out[0]) b.push_back(c.orig(d));
    if (!c.require(numel(a) == numel(b), "reshape changes the element count: " + std::to_string(numel(a)) + " vs " +
                                             std::to_string(numel(b)))) return;
    std::vector<std::pair<std::vector<std::size_t>, std::vector<std::size_t>>> groups;
    if (!c.require(reshapeGroups(a, b, groups), "reshape dims cannot be grouped")) return;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i] == 1) c.eq(in[0][i], c.cst(1), dimName("input", i));
    for (std::size_t i = 0; i < b.size(); ++i)
        if (b[i] == 1) c.eq(out[0][i], c.cst(1), dimName("output", i));
    for (const auto& [ga, gb] : groups) {
        if (ga.size() == 1 && gb.size() == 1) {
            c.eq(out[0][gb[0]], in[0][ga[0]], dimName("output", gb[0]));
            continue;
        }
        auto pa = in[0][ga[0]];
        for (std::size_t k = 1; k < ga.size(); ++k) pa = c.mul(pa, in[0][ga[k]]);
        auto pb = out[0][gb[0]];
        for (std::size_t k = 1; k < gb.size(); ++k) pb = c.mul(pb, out[0][gb[k]]);
        c.eq(pb, pa, "reshaped group size");
        for (auto k : ga) c.min2(in[0][k]);
        for (auto k : gb) c.min2(out[0][k]);
    }
}

struct ReshapeOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        out[0].isInt = in[0]->isInt;
        out[0].v = in[0]->v;
    }
};

std::vector<std::int64_t> permOf(const json& a, std::size_t rank) {
    std::vector<std::int64_t> p(rank);
    std::iota(p.begin(), p.end(), 0);
    if (a.contains("dims")) {
        auto d = attrInts(a, "dims");
        for (std::size_t i = 0; i < d.size() && i < rank; ++i) p[i] = normDim(d[i], rank);
    } else {
        auto d0 = normDim(attrInt(a, "dim0", 0), rank), d1 = normDim(attrInt(a, "dim1", 1), rank);
        if (d0 >= 0 && d1 >= 0 && static_cast<std::size_t>(d0) < rank && static_cast<std::size_t>(d1) < rank)
            std::swap(p[d0], p[d1]);
    }
    return p;
}

template <class C>
void shapePermute(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto p = permOf(a, in[0].size());
    auto sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i)
        if (!c.require(sorted[i] == static_cast<std::int64_t>(i), "attribute dims is not a permutation")) return;
    if (!c.require(out[0].size() == in[0].size(), "output must have the rank of the input")) return;
    for (std::size_t i = 0; i < p.size(); ++i) c.eq(out[0][i], in[0][p[i]], dimName("output", i));
}

struct PermuteOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto p = permOf(ctx.attrs, in[0]->shape.size());
        auto st = stridesOf(in[0]->shape);
        moveInto<typename A::S>(in, out[0], [&](const std::vector<std::int64_t>& idx) {
            std::int64_t off = 0;
            for (std::size_t i = 0; i < p.size(); ++i) off += idx[i] * st[p[i]];
            return std::pair<std::size_t, std::int64_t>{0, off};
        });
    }
};

template <class C>
void sliceRule(C& c, const Dims<C>& full, const Dims<C>& part, const json& a, const char* partName) {
    auto d = normDim(attrInt(a, "dim", 0), full.size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < full.size(), "attribute dim is out of range")) return;
    if (!c.require(part.size() == full.size(), std::string(partName) + " must have the rank of the full tensor")) return;
    auto start = attrInt(a, "start"), end = attrInt(a, "end");
    auto D = c.orig(full[d]);
    if (!c.require(0 <= start && start < end && end <= D, "slice bounds [" + std::to_string(start) + ", " +
                                                              std::to_string(end) + ") are outside dim of size " +
                                                              std::to_string(D))) return;
    for (std::size_t i = 0; i < full.size(); ++i)
        if (static_cast<std::int64_t>(i) != d) c.eq(part[i], full[i], dimName(partName, i));
    c.ratio(part[d], full[d], end - start, D, dimName(partName, static_cast<std::size_t>(d)));
    c.divides(full[d], start, D);
}

template <class C>
void shapeSlice(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    sliceRule(c, in[0], out[0], a, "output");
}
template <class C>
void shapeSliceBackward(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    sliceRule(c, out[0], in[0], a, "input");
}

struct SliceOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto& x = *in[0];
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), x.shape.size()));
        auto start = ctx.scale(attrInt(ctx.attrs, "start"), ctx.origInputs[0][d], x.shape[d]);
        auto st = stridesOf(x.shape);
        moveInto<typename A::S>(in, out[0], [&](const std::vector<std::int64_t>& idx) {
            auto off = offsetOf(idx, st) + start * st[d];
            return std::pair<std::size_t, std::int64_t>{0, off};
        });
    }
};

/// inputs (dy) -> dx of the full shape: dy placed at [start, end) along dim, zeros elsewhere.
struct SliceBackwardOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto& o = out[0];
        initOut(alg, o);
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), o.shape.size()));
        auto start = ctx.scale(attrInt(ctx.attrs, "start"), ctx.origOutputs[0][d], o.shape[d]);
        auto len = in[0]->shape[d];
        auto st = stridesOf(in[0]->shape);
        forEachIndex(o.shape, [&](const std::vector<std::int64_t>& idx, std::int64_t flat) {
            if (idx[d] < start || idx[d] >= start + len) {
                o.v[flat] = alg.zero();
                return;
            }
            auto j = idx;
            j[d] -= start;
            o.v[flat] = in[0]->v[offsetOf(j, st)];
        });
    }
};

template <class C>
void shapeConcat(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto d = normDim(attrInt(a, "dim", 0), in[0].size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    if (!c.require(out[0].size() == in[0].size(), "output must have the rank of the inputs")) return;
    auto total = in[0][d];
    for (std::size_t k = 0; k < in.size(); ++k) {
        if (!c.require(in[k].size() == in[0].size(), "input " + std::to_string(k) + " has a different rank")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i)
            if (static_cast<std::int64_t>(i) != d) c.eq(in[k][i], in[0][i], dimName(("input " + std::to_string(k)).c_str(), i));
        if (k) total = c.add(total, in[k][d]);
    }
    for (std::size_t i = 0; i < in[0].size(); ++i)
        c.eq(out[0][i], static_cast<std::int64_t>(i) == d ? total : in[0][i], dimName("output", i));
}


template <class C>
void shapeSplit(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto d = normDim(attrInt(a, "dim", 0), in[0].size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    auto sizes = attrInts(a, "sizes");
    if (!c.require(sizes.size() == out.size(), "attribute sizes must have one entry per output")) return;
    std::int64_t total = 0;
    for (auto s : sizes) total += s;
    if (!c.require(total == c.orig(in[0][d]), "split sizes add up to " + std::to_string(total) + ", dim has " +
                                                  std::to_string(c.orig(in[0][d])))) return;
    std::int64_t start = 0;
    for (std::size_t k = 0; k < out.size(); ++k) {
        if (!c.require(out[k].size() == in[0].size(), "output " + std::to_string(k) + " has a different rank")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i)
            if (static_cast<std::int64_t>(i) != d) c.eq(out[k][i], in[0][i], dimName(("output " + std::to_string(k)).c_str(), i));
        c.ratio(out[k][d], in[0][d], sizes[k], total, dimName(("output " + std::to_string(k)).c_str(), static_cast<std::size_t>(d)));
        c.divides(in[0][d], start, total);
        start += sizes[k];
    }
}

struct SplitOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), in[0]->shape.size()));
        auto st = stridesOf(in[0]->shape);
        std::int64_t start = 0;
        for (auto& o : out) {
            moveInto<typename A::S>(in, o, [&](const std::vector<std::int64_t>& idx) {
                return std::pair<std::size_t, std::int64_t>{0, offsetOf(idx, st) + start * st[d]};
            });
            start += o.shape[d];
        }
    }
};

template <class C>
void shapeChunk(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto d = normDim(attrInt(a, "dim", 0), in[0].size());
    auto parts = attrInt(a, "parts", 1), index = attrInt(a, "index", 0);
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    if (!c.require(parts >= 1 && index >= 0 && index < parts, "attribute index must be in [0, parts)")) return;
    if (!c.require(c.orig(in[0][d]) % parts == 0, "dim " + std::to_string(d) + " of size " +
                                                      std::to_string(c.orig(in[0][d])) + " does not divide into " +
                                                      std::to_string(parts) + " parts")) return;
    if (!c.require(out[0].size() == in[0].size(), "output must have the rank of the input")) return;
    for (std::size_t i = 0; i < in[0].size(); ++i)
        if (static_cast<std::int64_t>(i) != d) c.eq(out[0][i], in[0][i], dimName("output", i));
    c.ratio(out[0][d], in[0][d], 1, parts, dimName("output", static_cast<std::size_t>(d)));
}

struct ChunkOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), in[0]->shape.size()));
        auto start = attrInt(ctx.attrs, "index") * out[0].shape[d];
        auto st = stridesOf(in[0]->shape);
        moveInto<typename A::S>(in, out[0], [&](const std::vector<std::int64_t>& idx) {
            return std::pair<std::size_t, std::int64_t>{0, offsetOf(idx, st) + start * st[d]};
        });
    }
};

/// expand: input dims of size 1 stretch to the output; leading output dims are new.
/// sum_to: the reverse (reduce a gradient to the shape of a broadcast operand).
template <class C>
void broadcastTo(C& c, const Dims<C>& small, const Dims<C>& big, const char* smallName) {
    if (!c.require(small.size() <= big.size(), std::string(smallName) + " has more dims than the broadcast shape")) return;
    std::size_t shift = big.size() - small.size();
    for (std::size_t i = 0; i < small.size(); ++i) {
        if (c.orig(small[i]) == 1 && c.orig(big[i + shift]) != 1) c.eq(small[i], c.cst(1), dimName(smallName, i));
        else c.eq(small[i], big[i + shift], dimName(smallName, i));
    }
}
template <class C>
void shapeExpand(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    broadcastTo(c, in[0], out[0], "input");
}
template <class C>
void shapeSumTo(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    broadcastTo(c, out[0], in[0], "output");
}

struct ExpandOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        auto st = stridesOf(in[0]->shape);
        moveInto<typename A::S>(in, out[0], [&](const std::vector<std::int64_t>& idx) {
            return std::pair<std::size_t, std::int64_t>{0, bcastOffset(idx, in[0]->shape, st)};
        });
    }
};

struct SumToOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        auto& o = out[0];
        auto st = stridesOf(o.shape);
        std::vector<std::vector<typename A::S>> parts(static_cast<std::size_t>(numel(o.shape)));
        forEachIndex(in[0]->shape, [&](const std::vector<std::int64_t>& idx, std::int64_t flat) {
            parts[bcastOffset(idx, o.shape, st)].push_back(in[0]->v[flat]);
        });
        o.v.clear();
        for (auto& p : parts) o.v.push_back(alg.sum(p));
    }
};


// ----- backward rules -----

std::vector<H> vjpReshape(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("reshape", {a.outGrads[0]}, json::object(), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpPermute(GradBuilder& b, const VjpArgs& a) {
    auto p = permOf(a.attrs, b.shapeOf(a.inputs[0]).size());
    std::vector<std::int64_t> inv(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<std::int64_t>(i);
    return {b.emitOp1("permute", {a.outGrads[0]}, json{{"dims", inv}}, b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpSlice(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("slice_backward", {a.outGrads[0]}, a.attrs, b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpSliceBackward(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("slice", {a.outGrads[0]}, a.attrs, b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpConcat(GradBuilder& b, const VjpArgs& a) {
    std::vector<Shape> shapes;
    std::vector<std::int64_t> sizes;
    auto d = normDim(attrInt(a.attrs, "dim", 0), b.shapeOf(a.inputs[0]).size());
    for (auto h : a.inputs) {
        shapes.push_back(b.shapeOf(h));
        sizes.push_back(shapes.back()[d]);
    }
    return b.emitOp("split", {a.outGrads[0]}, json{{"dim", d}, {"sizes", sizes}}, shapes);
}
std::vector<H> vjpSplit(GradBuilder& b, const VjpArgs& a) {
    std::vector<H> gs(a.outGrads.begin(), a.outGrads.end());
    for (std::size_t k = 0; k < gs.size(); ++k)
        if (gs[k] < 0) gs[k] = b.emitOp1("zeros_like", {a.outputs[k]}, json::object(), b.shapeOf(a.outputs[k]));
    return {b.emitOp1("concat", gs, json{{"dim", attrInt(a.attrs, "dim", 0)}}, b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpExpand(GradBuilder& b, const VjpArgs& a) { return {sumToShape(b, a.outGrads[0], b.shapeOf(a.inputs[0]))}; }
std::vector<H> vjpSumTo(GradBuilder& b, const VjpArgs& a) {
    return {b.emitOp1("expand", {a.outGrads[0]}, json::object(), b.shapeOf(a.inputs[0]))};
}
std::vector<H> vjpChunk(GradBuilder& b, const VjpArgs& a) {
    const auto& full = b.shapeOf(a.inputs[0]);
    auto d = normDim(attrInt(a.attrs, "dim", 0), full.size());
    auto len = full[d] / attrInt(a.attrs, "parts", 1);
    auto start = attrInt(a.attrs, "index") * len;
    return {b.emitOp1("slice_backward", {a.outGrads[0]}, json{{"dim", d}, {"start", start}, {"end", start + len}}, full)};
}

template <class C>
void shapeZerosLike(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    shapeSame(c, in, out, a);
}
struct ZerosLikeOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const>, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        initOut(alg, out[0]);
        for (auto& v : out[0].v) v = alg.zero();
    }
};

std::string checkPermutation(const json& a, const std::vector<Shape>& in, const std::vector<Shape>&) {
    if (a.contains("dims") && a["dims"].size() != (in.empty() ? 0 : in[0].size())) return "attribute dims must list every dim of the input once";
    return {};
}

}  // namespace

void registerMovement(OpTable& t) {
    { auto* s = t.generic("reshape", OpClass::Movement, 1, 1, 1, ReshapeOp{}, vjpReshape, "same elements, the output tensor's shape"); TV_SHAPE(*s, shapeReshape); }
    { auto* s = t.generic("view", OpClass::Movement, 1, 1, 1, ReshapeOp{}, vjpReshape, "alias of reshape"); TV_SHAPE(*s, shapeReshape); }
    { auto* s = t.generic("transpose", OpClass::Movement, 1, 1, 1, PermuteOp{}, vjpPermute, "swap dim0 and dim1", {"dim0", "dim1"}); TV_SHAPE(*s, shapePermute); }
    { auto* s = t.generic("permute", OpClass::Movement, 1, 1, 1, PermuteOp{}, vjpPermute, "reorder dims", {"dims"}); s->checkAttrs = checkPermutation; TV_SHAPE(*s, shapePermute); }
    { auto* s = t.generic("slice", OpClass::Movement, 1, 1, 1, SliceOp{}, vjpSlice, "x[start:end] along dim", {"dim", "start", "end"}); TV_SHAPE(*s, shapeSlice); }
    { auto* s = t.generic("slice_backward", OpClass::Movement, 1, 1, 1, SliceBackwardOp{}, vjpSliceBackward, "dy placed at [start:end) along dim, zeros elsewhere", {"dim", "start", "end"}); TV_SHAPE(*s, shapeSliceBackward); }
    { auto* s = t.generic("concat", OpClass::Movement, 1, -1, 1, ConcatOp{}, vjpConcat, "concatenate along dim", {"dim"}); TV_SHAPE(*s, shapeConcat); }
    { auto* s = t.generic("split", OpClass::Movement, 1, 1, -1, SplitOp{}, vjpSplit, "split along dim into sizes", {"dim", "sizes"}); TV_SHAPE(*s, shapeSplit); }
    { auto* s = t.generic("chunk", OpClass::Movement, 1, 1, 1, ChunkOp{}, vjpChunk, "part index of parts equal parts along dim (a local shard)", {"dim", "parts", "index"}); TV_SHAPE(*s, shapeChunk); }
    { auto* s = t.generic("expand", OpClass::Movement, 1, 1, 1, ExpandOp{}, vjpExpand, "broadcast to the output tensor's shape"); TV_SHAPE(*s, shapeExpand); }
    { auto* s = t.generic("sum_to", OpClass::Reduction, 1, 1, 1, SumToOp{}, vjpSumTo, "sum a broadcast gradient down to the output tensor's shape"); TV_SHAPE(*s, shapeSumTo); }
    { auto* s = t.generic("zeros_like", OpClass::Elementwise, 1, 1, 1, ZerosLikeOp{}, nullptr, "zeros of the input's shape"); TV_SHAPE(*s, shapeZerosLike); }
}

}  // namespace tv::opdef
