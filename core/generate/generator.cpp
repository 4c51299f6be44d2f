#include "generate/generator.hpp"
#include "io/plan_repeats.hpp"

#include <sstream>

#include "model/rational.hpp"
#include <stdexcept>

namespace tv::gen {

using json = nlohmann::json;

int expertTensorParallelism(const GenerateOptions& o) {
    if (o.etp > 0) return o.etp;
    return o.ep == 1 || o.ep == o.tp ? 1 : o.tp;
}

bool expertParallelOverReplicas(const GenerateOptions& o) {
    const int etp = expertTensorParallelism(o);
    return o.ep > 1 && (o.tp == 1 || (etp == o.tp && etp > 1));
}

ModelConfig modelConfig(const GenerateOptions& o) {
    auto c = preset(o.model).value_or(ModelConfig{});
    c.expertTensorParallel = o.tp > 1 && expertTensorParallelism(o) == o.tp;
    if (o.layers) c.layers = *o.layers;
    if (o.hidden) c.hidden = *o.hidden;
    if (o.heads) c.heads = *o.heads;
    if (o.kvHeads) c.kvHeads = *o.kvHeads;
    else if (o.heads && c.kvHeads > *o.heads) c.kvHeads = *o.heads;
    if (o.ffn) c.ffn = *o.ffn;
    if (o.vocab) c.vocab = *o.vocab;
    if (o.seq) c.seq = *o.seq;
    // Vocabulary parallelism splits the embedding and the output layer by vocabulary. Like
    // Megatron (--make-vocab-size-divisible-by 128), a vocabulary the group does not divide is
    // padded to a multiple of 128 x tp: GPT-2's 50,257 tokens become 50,304 at tp 2. The padded
    // classes are real rows of the tables and real logits of the softmax, in the logical step
    // too, so the padded model is what is verified.
    if (c.family != "mlp" && o.tp > 1 && c.vocab > 0 && c.vocab % o.tp != 0) {
        const std::int64_t multiple = 128 * static_cast<std::int64_t>(o.tp);
        c.vocabUnpadded = c.vocab;
        c.vocab = (c.vocab + multiple - 1) / multiple * multiple;
    }
    return c;
}

std::vector<std::string> layoutNames() { return {"deepseek-v3-as-trained"}; }

std::optional<GenerateOptions> layout(const std::string& name) {
    if (name != "deepseek-v3-as-trained") return std::nullopt;
    GenerateOptions o;
    o.model = "deepseek-v3";
    o.dp = 128;
    o.ep = 64;
    o.pp = 16;
    o.zero = 1;
    o.microbatches = 16;
    return o;
}

std::optional<PlanProblem> validate(const GenerateOptions& o) {
    // Each problem names the option it is about (its name in the configuration, as the command
    // line spells it without the dashes) and says why in the domain's words, so the command line
    // and the generate dialog can each point at their own field.
    auto bad = [](std::string option, std::string why) { return std::optional<PlanProblem>(PlanProblem{std::move(option), std::move(why)}); };
    if (!preset(o.model)) {
        std::string names;
        for (const auto& n : presetNames()) names += (names.empty() ? "" : ", ") + n;
        return bad("model", "unknown model \"" + o.model + "\" (available: " + names + ")");
    }
    for (auto [v, n] : {std::pair{o.dp, "dp"}, {o.tp, "tp"}, {o.pp, "pp"}, {o.microbatches, "microbatches"}, {o.ep, "ep"}, {o.cp, "cp"}})
        if (v < 1) return bad(n, std::string(n) + " must be at least 1");
    if (o.ep > 1 && preset(o.model)->experts == 0)
        return bad("ep", "ep " + std::to_string(o.ep) + ": expert parallelism needs a model with experts (deepseek, deepseek-v2-lite, deepseek-v2, deepseek-v3)");
    if (o.etp < 0) return bad("etp", "etp must be at least 1");
    if (o.etp > 0 && preset(o.model)->experts == 0)
        return bad("etp", "etp " + std::to_string(o.etp) + ": expert tensor parallelism needs a model with experts");
    if (const int etp = expertTensorParallelism(o); etp != 1 && etp != o.tp)
        return bad("etp", "etp " + std::to_string(etp) + ": expert tensor parallelism is 1 (experts split by expert) or the tensor-parallel degree (" +
                              std::to_string(o.tp) + ": each expert split as the dense MLP is)");
    else if (etp == 1 && o.tp > 1 && o.ep > 1 && o.ep != o.tp)
        return bad("ep", "ep " + std::to_string(o.ep) + " with etp 1 and tp " + std::to_string(o.tp) +
                             ": the expert-parallel group would span tensor- and data-parallel ranks; use ep " + std::to_string(o.tp) +
                             " (the experts split over the tensor-parallel group) or etp " + std::to_string(o.tp) +
                             " (the expert-parallel group drawn from the data-parallel ranks, each expert split over the tensor-parallel group)");
    if (expertParallelOverReplicas(o) && o.dp % o.ep != 0)
        return bad("ep", "ep " + std::to_string(o.ep) + " does not divide dp " + std::to_string(o.dp) +
                             " (the expert-parallel group is drawn from the data-parallel replicas)");
    if (o.cp > 1 && o.sequenceParallel)
        return bad("cp", "cp with sp: both would split the sequence (sequence parallelism over the tensor-parallel group, context "
                         "parallelism over the cp group); use one of them");
    if (o.cpComm != "all_gather" && o.cpComm != "p2p") return bad("cp-comm", "cp-comm must be all_gather or p2p, not \"" + o.cpComm + "\"");
    if (o.cpComm == "p2p" && o.cp < 2) return bad("cp-comm", "cp-comm p2p (ring attention) needs cp 2 or more");
    if (o.zero < 0 || o.zero > 3) return bad("zero", "zero must be 1, 2 or 3");
    if (o.zero > 0 && o.dp < 2) return bad("zero", "zero " + std::to_string(o.zero) + " needs dp 2 or more (ZeRO splits over the data-parallel replicas)");
    if (o.schedule != "1f1b" && o.schedule != "gpipe") return bad("schedule", "schedule must be 1f1b or gpipe, not \"" + o.schedule + "\"");
    if (o.format < 1 || o.format > 3) return bad("format", "format must be 1, 2 or 3");
    if (!o.clipGrad.empty()) {
        auto r = Rational::parse(o.clipGrad);
        if (!r || !(Rational(0) < *r)) return bad("clip-grad", "clip-grad needs a positive number, not \"" + o.clipGrad + "\"");
    }
    if (o.optimizer != "adamw" && o.optimizer != "sgd") return bad("optimizer", "optimizer must be adamw or sgd, not \"" + o.optimizer + "\"");
    auto c = modelConfig(o);
    for (auto [v, n] : {std::pair{c.layers, "layers"}, {c.hidden, "hidden"}, {c.heads, "heads"}, {c.kvHeads, "kv-heads"},
                        {c.ffn, "ffn"}, {c.vocab, "vocab"}, {c.seq, "seq"}})
        if (v < 1) return bad(n, std::string(n) + " must be at least 1");
    auto divides = [](std::int64_t d, std::int64_t n) { return n % d == 0; };
    std::ostringstream e;
    const std::int64_t lanes = static_cast<std::int64_t>(o.dp) * o.microbatches;
    const auto batch = o.globalBatch.value_or(lanes);
    if (batch < 1) return bad("global-batch", "global batch must be at least 1");
    if (!divides(lanes, batch)) {
        e << "global batch " << batch << " does not divide into dp " << o.dp << " x " << o.microbatches << " microbatches";
        return bad("global-batch", e.str());
    }
    if (c.layers < o.pp) {
        // Uneven splits are fine (the first stages take one layer more); empty stages are not.
        e << "pipeline parallelism: " << c.layers << " layers cannot fill " << o.pp << " stages (each stage needs a layer)";
        return bad("pp", e.str());
    }
    if (o.cp > 1) {
        if (c.family == "mlp") return bad("cp", "cp: the mlp model has no sequence dim to split (context parallelism splits the sequence)");
        if (!divides(o.cp, c.seq)) { e << "context parallelism: cp " << o.cp << " does not divide the sequence length " << c.seq; return bad("cp", e.str()); }
    }
    if (c.family == "mlp") {
        if (o.sequenceParallel) return bad("sp", "sp: the mlp model has no sequence dim to split");
        if (!divides(o.tp, c.ffn)) {
            e << "tensor parallelism: tp " << o.tp << " does not divide the ffn size " << c.ffn;
            return bad("tp", e.str());
        }
        return std::nullopt;
    }
    if (c.family == "deepseek") {
        if (c.qkRopeDim % 2 != 0) { e << "RoPE dim " << c.qkRopeDim << " must be even (RoPE rotates pairs)"; return bad("model", e.str()); }
        if (!divides(o.tp, c.heads)) { e << "tensor parallelism: tp " << o.tp << " does not divide the " << c.heads << " attention heads"; return bad("tp", e.str()); }
        if (!c.expertTensorParallel && !divides(o.tp, c.experts)) {
            e << "expert parallelism: tp " << o.tp << " does not divide the " << c.experts << " routed experts (they are split over the tensor-parallel group)";
            return bad("tp", e.str());
        }
        if (c.expertTensorParallel && !divides(o.tp, c.moeFfn)) {
            e << "expert tensor parallelism: tp " << o.tp << " does not divide the experts' inner size " << c.moeFfn;
            return bad("etp", e.str());
        }
        if (expertParallelOverReplicas(o) && !divides(o.ep, c.experts)) {
            e << "expert parallelism: ep " << o.ep << " does not divide the " << c.experts << " routed experts";
            return bad("ep", e.str());
        }
        if (c.denseLayers > 0 && !divides(o.tp, c.ffn)) { e << "tensor parallelism: tp " << o.tp << " does not divide the ffn size " << c.ffn; return bad("tp", e.str()); }
        if (c.sharedExperts > 0 && !divides(o.tp, c.moeFfn * c.sharedExperts)) {
            e << "tensor parallelism: tp " << o.tp << " does not divide the shared experts' size " << c.moeFfn * c.sharedExperts;
            return bad("tp", e.str());
        }
        if (o.sequenceParallel) {
            if (o.tp < 2) return bad("sp", "sp needs tp 2 or more (sequence parallelism splits the sequence over the tensor-parallel group)");
            if (!divides(o.tp, c.seq)) { e << "sequence parallelism: tp " << o.tp << " does not divide the sequence length " << c.seq; return bad("sp", e.str()); }
        }
        return std::nullopt;
    }
    if (!divides(c.heads, c.hidden)) {
        e << "hidden size " << c.hidden << " is not a multiple of the " << c.heads << " heads";
        return bad("hidden", e.str());
    }
    if (c.headDim() % 2 != 0) {
        e << "head dim " << c.headDim() << " must be even (RoPE rotates pairs)";
        return bad("heads", e.str());
    }
    if (!divides(c.kvHeads, c.heads)) {
        e << c.heads << " heads do not divide into " << c.kvHeads << " key/value groups";
        return bad("kv-heads", e.str());
    }
    if (!divides(o.tp, c.heads)) { e << "tensor parallelism: tp " << o.tp << " does not divide the " << c.heads << " attention heads"; return bad("tp", e.str()); }
    if (!divides(o.tp, c.kvHeads)) { e << "tensor parallelism: tp " << o.tp << " does not divide the " << c.kvHeads << " key/value heads"; return bad("tp", e.str()); }
    if (!divides(o.tp, c.ffn)) { e << "tensor parallelism: tp " << o.tp << " does not divide the ffn size " << c.ffn; return bad("tp", e.str()); }
    if (o.sequenceParallel) {
        if (o.tp < 2) return bad("sp", "sp needs tp 2 or more (sequence parallelism splits the sequence over the tensor-parallel group)");
        if (!divides(o.tp, c.seq)) { e << "sequence parallelism: tp " << o.tp << " does not divide the sequence length " << c.seq; return bad("sp", e.str()); }
    }
    return std::nullopt;
}

json generatePlan(const GenerateOptions& o) {
    if (auto problem = validate(o)) throw std::invalid_argument(problem->message);
    const auto c = modelConfig(o);
    const std::int64_t batch = o.globalBatch.value_or(static_cast<std::int64_t>(o.dp) * o.microbatches);
    LogicalModel m;
    buildForward(m, c, batch, o.sequenceParallel);
    auto grads = appendBackward(m);
    appendOptimizer(m, grads, OptimizerConfig{o.optimizer, o.clipGrad});
    std::vector<int> keep{m.loss};
    for (std::size_t i = 0; i < m.ops.size(); ++i)
        if (m.ops[i].phase == Phase::Optimizer)
            for (int t : m.ops[i].outputs) keep.push_back(t);
    removeDeadOps(m, keep);

    const int epOverReplicas = expertParallelOverReplicas(o) ? o.ep : 1;
    ParallelConfig pc{o.dp, o.tp, o.pp, o.microbatches, o.sequenceParallel, o.schedule, o.format >= 2 && o.dp / epOverReplicas > 1,
                      o.format >= 2 && o.microbatches > 1, o.zero};
    pc.ep = epOverReplicas;
    pc.cp = o.cp;
    pc.cpRing = o.cpComm == "p2p";
    auto body = parallelize(m, pc);

    std::ostringstream name, desc;
    name << o.model;
    if (o.layers) name << "-l" << *o.layers;
    name << "-dp" << o.dp << "-tp" << o.tp << (o.cp > 1 ? "-cp" + std::to_string(o.cp) + (pc.cpRing ? "-ring" : "") : std::string()) << "-pp" << o.pp << "-nm" << o.microbatches;
    if (o.sequenceParallel) name << "-sp";
    if (o.ep > 1) name << "-ep" << o.ep << (expertTensorParallelism(o) > 1 ? "-etp" + std::to_string(expertTensorParallelism(o)) : std::string());
    if (o.zero) name << "-zero" << o.zero;
    desc << "One training step of " << o.model << " (" << c.layers << " layers, hidden " << c.hidden;
    if (c.family == "deepseek")
        desc << ", " << c.heads << " heads with MLA (q rank " << c.qLoraRank << ", kv rank " << c.kvLoraRank << "), " << c.experts
             << " routed experts (top " << c.topk << ", " << c.scoreFunc << " gate) and " << c.sharedExperts << " shared after "
             << c.denseLayers << " dense layer(s)"
             << (c.auxLossAlpha.empty() ? std::string() : ", the sequence-wise balance loss (alpha " + c.auxLossAlpha + ")")
             << (c.mtpDepth > 0 ? ", multi-token prediction (depth " + std::to_string(c.mtpDepth) + ", loss weight " + c.mtpWeight + ")" : std::string())
             << ", seq " << c.seq;
    else if (c.family != "mlp")
        desc << ", " << c.heads << " heads, " << c.kvHeads << " kv heads, seq " << c.seq;
    desc << ", ffn " << c.ffn << ", vocab " << c.vocab
         << (c.vocabUnpadded ? " (" + std::to_string(c.vocabUnpadded) + " padded to a multiple of 128 x tp, as Megatron does)" : std::string())
         << "), global batch " << batch << ", " << o.optimizer
         << " optimizer; data parallel " << o.dp << ", tensor parallel " << o.tp << (o.sequenceParallel ? " with sequence parallelism" : "")
         << (o.cp > 1 ? ", context parallel " + std::to_string(o.cp) +
                            (pc.cpRing ? " (the sequence split; ring attention: K/V blocks passed around the cp group, an online softmax merging them)"
                                       : " (the sequence split, K and V all-gathered for attention)")
                      : std::string())
         << (pc.ep > 1 ? ", expert parallel " + std::to_string(pc.ep) + " over the data-parallel replicas (tokens dispatched and combined by all-to-all, "
                         "expert gradients reduced over the " + std::to_string(o.dp / pc.ep) + " replicas holding the same experts" +
                         (c.expertTensorParallel ? ", each expert split over the tensor-parallel group)" : ")")
                   : o.ep > 1 ? ", expert parallel " + std::to_string(o.ep) + " over the tensor-parallel group" : std::string())
         << (o.zero ? ", ZeRO-" + std::to_string(o.zero) : std::string()) << (o.clipGrad.empty() ? "" : ", gradients clipped to global norm " + o.clipGrad)
         << ", pipeline parallel " << o.pp << " with " << o.microbatches << " microbatches (" << o.schedule
         << "). Generated by trainverify generate.";
    json plan{{"format", "trainverify-plan"}, {"version", pc.compactReplicas || pc.compactMicrobatches ? 2 : 1}, {"name", name.str()}, {"description", desc.str()}};
    plan["logical"] = std::move(body["logical"]);
    plan["parallel"] = std::move(body["parallel"]);
    plan["lineage"] = std::move(body["lineage"]);
    plan["expect"] = json{{"verdict", "equivalent"}};
    if (o.format == 3) return compressRepeats(std::move(plan));
    return plan;
}

}  // namespace tv::gen
