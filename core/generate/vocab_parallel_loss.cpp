// Megatron's vocab-parallel cross-entropy: with the logits split along the classes over the tp
// group, the loss and its gradient are computed on each rank's part of the vocabulary, the
// maximum, the sum of exponentials and the label's logit reduced over the group (processOp picks
// this placement; here is the decomposition into local ops and all-reduces).
#include "generate/parallelizer_detail.hpp"

namespace tv::gen::detail {

void Parallelizer::vocabParallelCrossEntropy(const LOp& op, int lane, int cpMember, int stage, const std::vector<int>& in,
                                             const std::vector<int>& outV) {
    const bool backward = op.kind == "cross_entropy_backward";
    const int T = C.tp;
    const auto& x0 = versions[static_cast<std::size_t>(in[0])];
    const int kk = laneK(x0.pl, lane), m = laneM(x0.pl, lane);
    auto inst = [&](int vi, int t) {
        const auto& v = versions[static_cast<std::size_t>(vi)];
        const int li = perReplica(v.pl) ? kk : lane;
        return v.inst[static_cast<std::size_t>(li * G() + member(cpMember, t))];
    };
    std::vector<int> group;
    for (int t = 0; t < T; ++t) group.push_back(rankOf(kk, stage, member(cpMember, t)));
    const Shape xs = localShape(op.inputs[0], x0.pl);  // [tokens.., classes / tp]
    const Shape lead(xs.begin(), xs.end() - 1);
    Shape lead1 = lead;
    lead1.push_back(1);
    const Role role = backward ? Role::Gradient : Role::Activation;
    const int carried = op.outputs[0];  // the logical tensor the collectives carry a part of
    const std::string& base = op.name;
    auto rankOfT = [&](int t) { return group[static_cast<std::size_t>(t)]; };
    // One local op per rank: out[t] = kind(ins(t)).
    auto each = [&](const std::string& what, const std::string& kind, const Shape& shape, auto ins, json attrs, bool vocabPart = false) {
        std::vector<std::string> outs;
        for (int t = 0; t < T; ++t) {
            auto out = localTensor(base + "." + what, rankOfT(t), m, shape, role);
            json a = attrs;
            if (vocabPart) {
                a["parts"] = T;
                a["index"] = t;
            }
            emitLocal(base + "." + what + instanceSuffix(m, rankOfT(t)), kind, rankOfT(t), m, op.phase, ins(t), {out}, a);
            outs.push_back(std::move(out));
        }
        return outs;
    };
    auto allReduce = [&](const std::string& what, const std::vector<std::string>& ins, const Shape& shape, const char* reduce) {
        std::vector<std::string> outs;
        for (int t = 0; t < T; ++t) outs.push_back(localTensor(base + "." + what, rankOfT(t), m, shape, role));
        emitCollective(base + "." + what + "_all_reduce" + instanceSuffix(m, group[0]), "all_reduce", group, m, carried, ins, outs,
                       json{{"reduce", reduce}});
        return outs;
    };
    auto x = [&](int t) { return inst(in[0], t); };
    auto y = [&](int t) { return inst(in[1], t); };
    const auto key = std::to_string(in[0]) + ":" + std::to_string(lane) + ":" + std::to_string(cpMember);

    // exp(x - max) on each part, with the maximum and the sum of exponentials over the whole vocabulary.
    std::vector<std::string> shifted, exps, total;
    auto softmaxParts = [&]() {
        auto localMax = each("max", "max", lead1, [&](int t) { return std::vector<std::string>{x(t)}; }, json{{"dim", -1}, {"keepdim", true}});
        auto max = allReduce("max", localMax, lead1, "max");
        shifted = each("shifted", "sub", xs, [&](int t) { return std::vector<std::string>{x(t), max[static_cast<std::size_t>(t)]}; }, json::object());
        exps = each("exp", "exp", xs, [&](int t) { return std::vector<std::string>{shifted[static_cast<std::size_t>(t)]}; }, json::object());
        auto localSum = each("sum_exp", "sum", lead1, [&](int t) { return std::vector<std::string>{exps[static_cast<std::size_t>(t)]}; },
                             json{{"dims", {-1}}, {"keepdim", true}});
        total = allReduce("sum_exp", localSum, lead1, "sum");
    };
    if (!backward) {
        softmaxParts();
        for (int t = 0; t < T; ++t)
            vocabSoftmax[key + ":" + std::to_string(t)] = {exps[static_cast<std::size_t>(t)], total[static_cast<std::size_t>(t)]};
        // the label's logit (minus the max) from the part that holds it
        auto localTarget = each("target", "target_logit", lead,
                                [&](int t) { return std::vector<std::string>{shifted[static_cast<std::size_t>(t)], y(t)}; }, json::object(), true);
        auto target = allReduce("target", localTarget, lead, "sum");
        auto lse = each("log_sum_exp", "log", lead1, [&](int t) { return std::vector<std::string>{total[static_cast<std::size_t>(t)]}; }, json::object());
        auto flat = each("log_sum_exp_flat", "reshape", lead, [&](int t) { return std::vector<std::string>{lse[static_cast<std::size_t>(t)]}; }, json::object());
        auto tokenLoss = each("token_loss", "sub", lead,
                              [&](int t) { return std::vector<std::string>{flat[static_cast<std::size_t>(t)], target[static_cast<std::size_t>(t)]}; },
                              json::object());
        for (int t = 0; t < T; ++t)
            emitLocal(base + ".mean" + instanceSuffix(m, rankOfT(t)), "mean", rankOfT(t), m, op.phase, {tokenLoss[static_cast<std::size_t>(t)]},
                      {inst(outV[0], t)}, json::object());
        return;
    }
    // backward: (softmax - one_hot) * dloss / tokens, the softmax from the forward's parts.
    bool saved = true;
    for (int t = 0; t < T; ++t) saved = saved && vocabSoftmax.count(key + ":" + std::to_string(t));
    if (saved) {
        for (int t = 0; t < T; ++t) {
            const auto& sp = vocabSoftmax[key + ":" + std::to_string(t)];
            exps.push_back(sp.exps);
            total.push_back(sp.total);
        }
    } else {
        softmaxParts();
    }
    auto softmax = each("softmax", "div", xs,
                        [&](int t) { return std::vector<std::string>{exps[static_cast<std::size_t>(t)], total[static_cast<std::size_t>(t)]}; }, json::object());
    auto hot = each("one_hot", "one_hot", xs, [&](int t) { return std::vector<std::string>{y(t)}; }, json::object(), true);
    auto diff = each("softmax_minus_one_hot", "sub", xs,
                     [&](int t) { return std::vector<std::string>{softmax[static_cast<std::size_t>(t)], hot[static_cast<std::size_t>(t)]}; }, json::object());
    auto perToken = each("dloss_per_token", "mean_backward", lead, [&](int t) { return std::vector<std::string>{inst(in[2], t)}; }, json::object());
    auto perToken1 = each("dloss_per_token_col", "reshape", lead1, [&](int t) { return std::vector<std::string>{perToken[static_cast<std::size_t>(t)]}; },
                          json::object());
    for (int t = 0; t < T; ++t)
        emitLocal(base + ".scale" + instanceSuffix(m, rankOfT(t)), "mul", rankOfT(t), m, op.phase,
                  {diff[static_cast<std::size_t>(t)], perToken1[static_cast<std::size_t>(t)]}, {inst(outV[0], t)}, json::object());
}

}  // namespace tv::gen::detail
