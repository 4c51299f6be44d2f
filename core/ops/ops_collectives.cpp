// Collectives: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv.
//
// Run on a group of ranks, inputs and outputs in group order; they keep their inputs' dtype.
#include "ops/op_definition.hpp"

namespace tv::opdef {

namespace {

// ===== collectives ===========================================================================

int groupN(int n) { return n; }
int one(int) { return 1; }

template <class C>
void shapeAllReduce(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    shapeSame(c, in, out, a);
}

template <class C>
void shapeAllGather(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto d = normDim(attrInt(a, "dim", 0), in[0].size());
    if (!c.require(d >= 0 && static_cast<std::size_t>(d) < in[0].size(), "attribute dim is out of range")) return;
    auto n = static_cast<std::int64_t>(in.size());
    for (std::size_t k = 0; k < in.size(); ++k) {
        if (!c.require(in[k].size() == in[0].size() && out[k].size() == in[0].size(), "members differ in rank")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i) {
            c.eq(in[k][i], in[0][i], dimName(("input " + std::to_string(k)).c_str(), i));
            if (static_cast<std::int64_t>(i) == d) c.ratio(in[0][i], out[k][i], 1, n, dimName(("output " + std::to_string(k)).c_str(), i));
            else c.eq(out[k][i], in[0][i], dimName(("output " + std::to_string(k)).c_str(), i));
        }
    }
}

template <class C>
void shapeReduceScatter(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    shapeAllGather(c, out, in, a);
}

template <class C>
void shapeAllToAll(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json& a) {
    auto r = in[0].size();
    auto sd = normDim(attrInt(a, "split_dim", 0), r), cd = normDim(attrInt(a, "concat_dim", 0), r);
    if (!c.require(sd >= 0 && cd >= 0 && static_cast<std::size_t>(sd) < r && static_cast<std::size_t>(cd) < r,
                   "attributes split_dim/concat_dim are out of range")) return;
    auto n = static_cast<std::int64_t>(in.size());
    if (!c.require(c.orig(in[0][sd]) % n == 0, "split dim does not divide by the group size")) return;
    for (std::size_t k = 0; k < in.size(); ++k) {
        if (!c.require(in[k].size() == r && out[k].size() == r, "members differ in rank")) return;
        for (std::size_t i = 0; i < r; ++i) {
            auto what = dimName(("output " + std::to_string(k)).c_str(), i);
            c.eq(in[k][i], in[0][i], dimName(("input " + std::to_string(k)).c_str(), i));
            if (sd == cd || (static_cast<std::int64_t>(i) != sd && static_cast<std::int64_t>(i) != cd)) c.eq(out[k][i], in[0][i], what);
            else if (static_cast<std::int64_t>(i) == sd) c.ratio(out[k][i], in[0][i], 1, n, what);
            else c.ratio(in[0][i], out[k][i], 1, n, what);
        }
    }
}

template <class C>
void shapeBroadcastOp(C& c, const std::vector<Dims<C>>& in, const std::vector<Dims<C>>& out, const json&) {
    for (std::size_t k = 0; k < out.size(); ++k) {
        if (!c.require(out[k].size() == in[0].size(), "output " + std::to_string(k) + " has a different rank")) return;
        for (std::size_t i = 0; i < in[0].size(); ++i) c.eq(out[k][i], in[0][i], dimName(("output " + std::to_string(k)).c_str(), i));
    }
}

struct AllReduceOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        const auto reduce = ctx.attrs.value("reduce", std::string("sum"));
        const bool mean = reduce == "mean";
        auto n = static_cast<std::int64_t>(in.size());
        for (auto& o : out) initOut(alg, o);
        for (std::size_t i = 0; i < out[0].v.size(); ++i) {
            if (reduce == "max") {
                auto m = in[0]->v[i];
                for (std::size_t k = 1; k < in.size(); ++k) m = alg.ite(alg.ge(m, in[k]->v[i]), m, in[k]->v[i]);
                for (auto& o : out) o.v[i] = m;
                continue;
            }
            std::vector<typename A::S> terms;
            for (auto* x : in) terms.push_back(x->v[i]);
            auto s = alg.sum(terms);
            if (mean) s = alg.mul(s, alg.num(Rational(1, n)));
            for (auto& o : out) o.v[i] = s;
        }
    }
};

struct AllGatherOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        for (auto& o : out) ConcatOp::eval(alg, in, std::span<Value<typename A::S>>(&o, 1), ctx);
    }
};

struct ReduceScatterOp {
    template <class A>
    static void eval(const A& alg, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        Value<typename A::S> total;
        total.shape = in[0]->shape;
        AllReduceOp::eval(alg, in, std::span<Value<typename A::S>>(&total, 1), ctx);
        auto d = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "dim", 0), total.shape.size()));
        auto st = stridesOf(total.shape);
        const Value<typename A::S>* src[] = {&total};
        for (std::size_t k = 0; k < out.size(); ++k) {
            auto start = static_cast<std::int64_t>(k) * out[k].shape[d];
            moveInto<typename A::S>(std::span<const Value<typename A::S>* const>(src, 1), out[k],
                                    [&](const std::vector<std::int64_t>& idx) {
                                        return std::pair<std::size_t, std::int64_t>{0, offsetOf(idx, st) + start * st[d]};
                                    });
        }
    }
};

/// Member i's output = concat over j (along concat_dim) of chunk i of member j's input (split_dim).
struct AllToAllOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext& ctx) {
        auto r = in[0]->shape.size();
        auto sd = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "split_dim", 0), r));
        auto cd = static_cast<std::size_t>(normDim(attrInt(ctx.attrs, "concat_dim", 0), r));
        auto n = static_cast<std::int64_t>(in.size());
        auto chunk = in[0]->shape[sd] / n;
        auto st = stridesOf(in[0]->shape);
        for (std::size_t i = 0; i < out.size(); ++i) {
            moveInto<typename A::S>(in, out[i], [&](const std::vector<std::int64_t>& idx) {
                auto j = idx;
                std::size_t src = 0;
                if (sd == cd) {
                    src = static_cast<std::size_t>(idx[cd] / chunk);
                    j[sd] = static_cast<std::int64_t>(i) * chunk + idx[cd] % chunk;
                } else {
                    auto per = in[0]->shape[cd];
                    src = static_cast<std::size_t>(idx[cd] / per);
                    j[cd] = idx[cd] % per;
                    j[sd] = static_cast<std::int64_t>(i) * chunk + idx[sd];
                }
                return std::pair<std::size_t, std::int64_t>{src, offsetOf(j, st)};
            });
        }
    }
};

struct CopyToAllOp {
    template <class A>
    static void eval(const A&, std::span<const Value<typename A::S>* const> in, std::span<Value<typename A::S>> out,
                     const EvalContext&) {
        for (auto& o : out) {
            o.isInt = in[0]->isInt;
            o.v = in[0]->v;
        }
    }
};


std::string checkAllReduceAttr(const json& a, const std::vector<Shape>&, const std::vector<Shape>&) {
    if (!a.contains("reduce")) return {};
    const auto& v = a["reduce"];
    return v.is_string() && (v == "sum" || v == "mean" || v == "max") ? std::string()
                                                                      : "attribute reduce must be \"sum\", \"mean\" or \"max\"";
}

template <class Op>
OpSpec* coll(OpTable& t, std::string_view name, Op op, int (*nin)(int), int (*nout)(int), std::string_view summary,
             std::vector<std::string_view> req, std::vector<std::string_view> opt) {
    auto* s = t.generic(name, OpClass::Collective, 1, -1, -1, op, nullptr, summary, std::move(req), std::move(opt));
    s->collective = true;
    s->collectiveInputs = nin;
    s->collectiveOutputs = nout;
    return s;
}

}  // namespace

void registerCollectives(OpTable& t) {
    { auto* s = coll(t, "all_reduce", AllReduceOp{}, groupN, groupN, "every member gets the sum (or mean, or maximum) of all inputs", {}, {"reduce"}); s->checkAttrs = checkAllReduceAttr; s->sumsInputs = true; TV_SHAPE(*s, shapeAllReduce); }
    { auto* s = coll(t, "all_gather", AllGatherOp{}, groupN, groupN, "every member gets the inputs concatenated in group order", {"dim"}, {}); TV_SHAPE(*s, shapeAllGather); }
    { auto* s = coll(t, "reduce_scatter", ReduceScatterOp{}, groupN, groupN, "member i gets chunk i of the sum (or mean)", {"dim"}, {"reduce"}); s->checkAttrs = checkReduceAttr; s->sumsInputs = true; TV_SHAPE(*s, shapeReduceScatter); }
    { auto* s = coll(t, "all_to_all", AllToAllOp{}, groupN, groupN, "member i gets chunk i of every member's input, concatenated", {"split_dim", "concat_dim"}, {}); TV_SHAPE(*s, shapeAllToAll); }
    { auto* s = coll(t, "broadcast", CopyToAllOp{}, one, groupN, "every member gets the first group member's input", {}, {}); TV_SHAPE(*s, shapeBroadcastOp); }
    { auto* s = coll(t, "send_recv", CopyToAllOp{}, one, one, "group [src, dst]: dst receives src's tensor", {}, {}); TV_SHAPE(*s, shapeBroadcastOp); }
}

}  // namespace tv::opdef
