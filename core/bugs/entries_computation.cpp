// The catalog's computation and scaling entries (Category::Computation, Category::Scaling):
// wrong constants and exponents in a kernel (normalization epsilon, RMSNorm's square, the
// attention score scale), backward fan-outs and splits that mix up their gradients, and the loss
// scaled by the context-parallel degree. Each entry's site finder and edit, then the rows
// (bug_catalog.cpp puts them in the catalog's order).
#include "bugs/catalog_detail.hpp"
#include "model/rational.hpp"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "model/instance_names.hpp"

namespace tv::bugs::detail {

namespace {

std::vector<Site> opsOfKind(const View& v, std::initializer_list<std::string_view> kinds, Phase phase) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o)
        if (v.g.ops[o].phase == phase && std::find(kinds.begin(), kinds.end(), v.kind(o)) != kinds.end()) out.push_back(makeSite(v, {o}));
    return out;
}

/// Sets of ops of one kind that are the tensor-parallel peers of one computation (one stem).
std::vector<Site> peerSets(const View& v, std::initializer_list<std::string_view> kinds, Phase phase) {
    std::map<std::string, std::vector<OpId>> byStem;
    std::vector<std::string> order;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.g.ops[o].phase != phase || std::find(kinds.begin(), kinds.end(), v.kind(o)) == kinds.end()) continue;
        auto stem = instance::withoutRank(v.name(o));
        auto& set = byStem[stem];
        if (set.empty()) order.push_back(stem);
        set.push_back(o);
    }
    std::vector<Site> out;
    for (const auto& stem : order) {
        const auto& set = byStem[stem];
        std::vector<std::int32_t> ranks;
        for (auto o : set) ranks.push_back(v.g.ops[o].rank);
        if (set.size() >= 2 && v.tensorParallelGroup(ranks))
            out.push_back(makeSite(v, set, std::string(v.kind(set[0])) + " on ranks " + joinRanks(ranks)));
    }
    return out;
}

std::vector<Site> norms(const View& v) { return opsOfKind(v, {"rmsnorm", "layernorm"}, Phase::Forward); }
std::vector<Site> rmsnorms(const View& v) { return opsOfKind(v, {"rmsnorm"}, Phase::Forward); }
std::vector<Site> normPeers(const View& v) { return peerSets(v, {"rmsnorm", "layernorm"}, Phase::Forward); }

std::string setEps(Editor& e, const Site& s) {
    for (const auto& n : s.ops) {
        auto o = e.v.find(n);
        e.op(o)["attrs"]["eps"] = 2;
        e.edited(o);
    }
    return "the normalization epsilon became 2 in " + s.ops[0] + (s.ops.size() > 1 ? " and its tensor-parallel peers" : "") + " (ranks " +
           joinRanks(s.ranks) + ")";
}

std::string squareAsIdentity(Editor& e, const Site& s) {
    const auto& v = e.v;
    const auto o = v.find(s.ops[0]);
    const json orig = e.op(o);
    const auto x = v.g.inputs(o)[0], w = v.g.inputs(o)[1], y = v.g.outputs(o)[0];
    Shape reduced = v.shape(x);
    reduced.back() = 1;
    auto tmp = [&](const std::string& suffix, const Shape& shape) {
        auto id = e.fresh(v.tensorName(y) + suffix);
        json t = e.tensorLike(y, id);
        t["shape"] = shape;
        e.addTensor(std::move(t));
        return id;
    };
    const auto stem = v.name(o);
    auto local = [&](const std::string& id, const std::string& kind, json ins, const std::string& outId, json attrs) {
        json j = {{"id", id}, {"op", kind}, {"rank", orig["rank"]}, {"inputs", std::move(ins)}, {"outputs", json::array({outId})}};
        if (orig.contains("microbatch")) j["microbatch"] = orig["microbatch"];
        if (orig.contains("phase")) j["phase"] = orig["phase"];
        if (!attrs.is_null()) j["attrs"] = std::move(attrs);
        return j;
    };
    const auto sq = tmp(".pow", v.shape(x)), ms = tmp(".mean_sq", reduced), ae = tmp(".add_eps", reduced), rs = tmp(".rsqrt", reduced),
               nx = tmp(".normalize", v.shape(x));
    const json eps = orig["attrs"]["eps"];
    e.addOp(local(e.fresh(stem + ".pow"), "pow", json::array({v.tensorName(x)}), sq, json{{"exponent", 1}}));
    e.addOp(local(e.fresh(stem + ".mean_sq"), "mean", json::array({sq}), ms, json{{"dims", json::array({-1})}, {"keepdim", true}}));
    e.addOp(local(e.fresh(stem + ".add_eps"), "add_scalar", json::array({ms}), ae, json{{"value", eps}}));
    e.addOp(local(e.fresh(stem + ".rsqrt"), "rsqrt", json::array({ae}), rs, json()));
    e.addOp(local(e.fresh(stem + ".normalize"), "mul", json::array({v.tensorName(x), rs}), nx, json()));
    e.op(o) = local(stem, "mul", json::array({nx, v.tensorName(w)}), v.tensorName(y), json());
    e.edited(o);
    return "the RMSNorm " + stem + " was written out as x · rsqrt(mean(x^1) + eps) · w: the square became x to the power 1";
}

std::vector<Site> backwardGradSums(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.kind(o) != "add" || v.g.ops[o].phase != Phase::Backward) continue;
        const auto ins = v.g.inputs(o);
        if (ins.size() != 2 || ins[0] == ins[1]) continue;
        if (v.shape(ins[0]) != v.shape(ins[1])) continue;
        bool fromBackward = true;
        for (auto t : ins) {
            auto pr = v.producer(t);
            if (pr == kNone || (v.g.ops[pr].phase != Phase::Backward && !v.collective(pr))) fromBackward = false;
            if (pr != kNone && v.g.ops[pr].acrossMicrobatches) fromBackward = false;
        }
        // An add that merges microbatches is an accumulation, not a fan-out.
        if (v.g.tensors[ins[0]].microbatch != v.g.tensors[ins[1]].microbatch) fromBackward = false;
        if (fromBackward) out.push_back(makeSite(v, {o}));
    }
    prefer(out, "grad_sum");
    return out;
}

std::string duplicateGrad(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    auto& j = e.op(o);
    j["inputs"][1] = j["inputs"][0];
    e.edited(o);
    return "the gradient sum " + s.ops[0] + " adds its first incoming gradient twice (" + j["inputs"][0].get<std::string>() + ")";
}

std::vector<Site> backwardSplits(const View& v) {
    std::vector<Site> out;
    for (OpId o = 0; o < v.g.ops.size(); ++o) {
        if (v.kind(o) != "split" || v.g.ops[o].phase != Phase::Backward) continue;
        const auto outs = v.g.outputs(o);
        if (outs.size() < 2) continue;
        bool equal = true;
        for (auto t : outs) equal = equal && v.shape(t) == v.shape(outs[0]);
        if (equal) out.push_back(makeSite(v, {o}));
    }
    prefer(out, "rope");
    return out;
}

std::string reverseOutputs(Editor& e, const Site& s) {
    auto o = e.v.find(s.ops[0]);
    auto& outs = e.op(o)["outputs"];
    std::reverse(outs.begin(), outs.end());
    e.edited(o);
    return "the backward split " + s.ops[0] + " returns its gradients in reverse order";
}

std::vector<Site> scales(const View& v) { return opsOfKind(v, {"div_sqrt"}, Phase::Forward); }
std::vector<Site> scalePeers(const View& v) { return peerSets(v, {"div_sqrt"}, Phase::Forward); }

std::string wrongScale(Editor& e, const Site& s) {
    std::int64_t n = 0;
    for (const auto& name : s.ops) {
        auto o = e.v.find(name);
        auto& a = e.op(o)["attrs"];
        n = a["n"].get<std::int64_t>();
        a["n"] = n * 4;
        e.edited(o);
    }
    return "the score scale 1/sqrt(" + std::to_string(n) + ") became 1/sqrt(" + std::to_string(n * 4) + ") in " + s.ops[0] +
           (s.ops.size() > 1 ? " and its tensor-parallel peers" : "") + " (ranks " + joinRanks(s.ranks) + ")";
}

/// A loss term's weight on every tensor-parallel rank: the forward mul_scalar peers that scale a
/// scalar into another logical tensor (not a rescaling of the same one), such as the MoE balance
/// loss's alpha or the multi-token prediction loss's weight.
std::vector<Site> lossWeightPeers(const View& v) {
    std::vector<Site> out;
    auto logicalOf = [&](TensorId t) {
        const auto& w = v.where(t);
        return w.record >= 0 ? static_cast<std::int64_t>(v.p.lineage[static_cast<std::size_t>(w.record)].logical) : std::int64_t{-1};
    };
    for (auto& s : peerSets(v, {"mul_scalar"}, Phase::Forward)) {
        const auto o = v.find(s.ops[0]);
        const auto in = v.g.inputs(o)[0], res = v.g.outputs(o)[0];
        if (!v.shape(res).empty()) continue;
        const auto a = logicalOf(in), b = logicalOf(res);
        if (a >= 0 && b >= 0 && a != b) out.push_back(std::move(s));
    }
    prefer(out, "balance");
    return out;
}

std::string lossWeightTimesTp(Editor& e, const Site& s) {
    const auto tp = static_cast<std::int64_t>(s.ops.size());
    std::string was;
    for (const auto& name : s.ops) {
        auto o = e.v.find(name);
        auto& a = e.op(o)["attrs"];
        const auto value = Rational::parse(a["value"].is_string() ? a["value"].get<std::string>() : a["value"].dump());
        was = value ? value->toString() : a["value"].dump();
        if (value) a["value"] = (*value * Rational(tp)).toString();
        e.edited(o);
    }
    return "the loss term's weight " + was + " became " + was + " x " + std::to_string(tp) + " in " + s.ops[0] +
           " and its tensor-parallel peers (ranks " + joinRanks(s.ranks) + "): the term summed over the ranks that each computed it";
}

/// The initial record of the loss's gradient seed: a scalar logical gradient no op produces.
std::int32_t lossSeedRecord(const View& v) {
    for (std::size_t r = 0; r < v.p.lineage.size(); ++r) {
        const auto& rec = v.p.lineage[r];
        const auto& lt = v.p.logical.tensors[rec.logical];
        if (v.initialRecord(static_cast<std::int32_t>(r)) && lt.role == Role::Gradient && v.p.shapes[lt.shape].empty())
            return static_cast<std::int32_t>(r);
    }
    return -1;
}

std::vector<Site> lossSeedReaders(const View& v) {
    const auto r = lossSeedRecord(v);
    if (r < 0) return {};
    const auto readers = v.readersOf(static_cast<std::uint32_t>(r));
    if (readers.empty()) return {};
    return {makeSite(v, readers, "the readers of the loss gradient seed " + v.p.tensorName(v.p.logical, v.p.lineage[r].logical))};
}

std::string overscaleLoss(Editor& e, const Site&) {
    const auto& v = e.v;
    const auto r = lossSeedRecord(v);
    const auto cp = v.p.mesh.at(Axis::CP);
    std::vector<TensorId> terms;
    for (const auto& s : v.p.lineage[r].slices)
        for (const auto& c : s.copies)
            for (const auto& t : c) terms.push_back(t.tensor);
    for (auto t : terms) {
        if (v.g.consumers(t).empty()) continue;
        const auto id = e.fresh(v.tensorName(t) + ".cp_scale");
        e.addTensor(e.tensorLike(t, id));
        e.rewire(t, id);
        json j = {{"id", id},
                  {"op", "mul_scalar"},
                  {"rank", v.g.tensors[t].rank},
                  {"phase", "backward"},
                  {"inputs", json::array({v.tensorName(t)})},
                  {"outputs", json::array({id})},
                  {"attrs", {{"value", cp}}}};
        if (v.g.tensors[t].microbatch >= 0) j["microbatch"] = v.g.tensors[t].microbatch;
        e.addOp(std::move(j));
    }
    return "the per-token loss is scaled by the context-parallel degree " + std::to_string(cp) + ": every reader of the loss gradient " +
           v.p.tensorName(v.p.logical, v.p.lineage[r].logical) + " gets it times " + std::to_string(cp);
}

}  // namespace

void appendComputationEntries(std::vector<Entry>& out) {
    using FK = FailureKind;
    const std::initializer_list<Entry> rows = {
        {{"norm-eps-one-rank", Category::Computation, "a wrong constant in one rank's kernel: the normalization epsilon is 2", 7, "a normalization"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no rmsnorm or layernorm", norms, setEps},
        {{"norm-square-as-identity", Category::Computation, "a wrong exponent: RMSNorm's x.pow(2) typed as x.pow(1)", 8, "an RMSNorm"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no rmsnorm", rmsnorms, squareAsIdentity},
        {{"norm-eps-all-tp-ranks", Category::Computation, "a wrong constant in every tensor-parallel rank's kernel: the normalization epsilon is 2", 9, "tensor parallelism and a normalization"},
         Form::Stored, {FK::Counterexample}, needsTp, "no normalization computed on several tensor-parallel ranks", normPeers, setEps},
        {{"bwd-grad-sum-duplicated", Category::Computation, "a backward fan-out (multiref) adds its first incoming gradient twice and drops the second", 10, "a backward gradient sum"},
         Form::Stored, {FK::Counterexample, FK::DataflowBroken}, lacksNothing, "no backward add of two gradients", backwardGradSums, duplicateGrad},
        {{"rope-bwd-halves-swapped", Category::Computation, "a backward (apply_rotary_emb's) returns its two gradients in reverse order", 11, "a backward split"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no backward split into equal parts", backwardSplits, reverseOutputs},
        {{"attn-scale-one-rank", Category::Scaling, "a wrong scaling constant on one rank: the attention score scale computed from the wrong dimension", 12, "attention"},
         Form::Stored, {FK::Counterexample}, lacksNothing, "no div_sqrt (attention score scale)", scales, wrongScale},
        {{"attn-scale-all-tp-ranks", Category::Scaling, "a wrong scaling constant on every tensor-parallel rank of one attention", 13, "tensor parallelism and attention"},
         Form::Stored, {FK::Counterexample}, needsTp, "no attention score scale computed on several tensor-parallel ranks", scalePeers, wrongScale},
        {{"aux-loss-scaled-by-tp", Category::Scaling, "the MoE auxiliary (balance) loss scaled by the tensor-parallel size: each rank's copy summed, not one counted", 0,
          "tensor parallelism and an auxiliary loss term (DeepSeek's balance or multi-token prediction loss)"},
         Form::Stored, {FK::Counterexample}, needsTp, "no weighted loss term computed on several tensor-parallel ranks (generate deepseek with --tp 2)",
         lossWeightPeers, lossWeightTimesTp},
        {{"cp-loss-overscaled", Category::Scaling, "Megatron-LM with --calculate-per-token-loss: the loss scaled by the context-parallel degree (paper, appendix B)", 0, "context parallelism"},
         Form::Stored, {FK::Counterexample}, needsCp, "no initial record of the loss's gradient (a scalar gradient no op produces)", lossSeedReaders, overscaleLoss},
    };
    out.insert(out.end(), rows);
}

}  // namespace tv::bugs::detail
