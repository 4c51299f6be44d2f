// Ring attention (context parallelism with --cp-comm p2p): each attention core is found in the
// logical graph, and its forward and backward ops are replaced as a whole by the blockwise
// computation, K/V blocks (and in the backward the dK/dV accumulators) passed around the cp group.
#include "generate/parallelizer_detail.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <tuple>

namespace tv::gen::detail {

void Parallelizer::findRingAttention() {
    std::vector<std::vector<int>> consumers(M.tensors.size());
    for (std::size_t i = 0; i < M.ops.size(); ++i)
        if (!M.ops[i].dead)
            for (int t : M.ops[i].inputs) consumers[static_cast<std::size_t>(t)].push_back(static_cast<int>(i));
    auto producer = [&](int t) { return lt(t).producer; };
    auto opAt = [&](int i) -> const LOp& { return M.ops[static_cast<std::size_t>(i)]; };
    auto flag = [](const LOp& o, const char* key) { return o.attrs.contains(key) && o.attrs[key].is_boolean() && o.attrs[key].get<bool>(); };
    auto only = [&](int t, std::initializer_list<int> ops) {
        std::set<int> want(ops), have(consumers[static_cast<std::size_t>(t)].begin(), consumers[static_cast<std::size_t>(t)].end());
        return want == have;
    };
    for (std::size_t i = 0; i < M.ops.size(); ++i) {
        const auto& sm = M.ops[i];
        if (sm.dead || sm.kind != "softmax" || sm.phase != Phase::Forward) continue;
        RingAttention ra;
        ra.softmaxOp = static_cast<int>(i);
        ra.maskOp = producer(sm.inputs[0]);
        if (ra.maskOp < 0 || opAt(ra.maskOp).kind != "add" || opAt(ra.maskOp).inputs.size() != 2) continue;
        ra.scaleOp = producer(opAt(ra.maskOp).inputs[0]);
        ra.mask = opAt(ra.maskOp).inputs[1];
        if (ra.scaleOp < 0 || opAt(ra.scaleOp).kind != "div_sqrt") continue;
        ra.scoresOp = producer(opAt(ra.scaleOp).inputs[0]);
        if (ra.scoresOp < 0 || opAt(ra.scoresOp).kind != "matmul" || !flag(opAt(ra.scoresOp), "transpose_b") || flag(opAt(ra.scoresOp), "transpose_a")) continue;
        ra.q = opAt(ra.scoresOp).inputs[0];
        ra.k = opAt(ra.scoresOp).inputs[1];
        ra.n = opAt(ra.scaleOp).attrs.value("n", std::int64_t(1));
        const int probs = sm.outputs[0];
        for (int c : consumers[static_cast<std::size_t>(probs)]) {
            const auto& o = opAt(c);
            if (o.kind == "matmul" && o.phase == Phase::Forward && o.inputs[0] == probs && !flag(o, "transpose_a") && !flag(o, "transpose_b")) ra.contextOp = c;
            else if (o.kind == "softmax_backward" && o.inputs[0] == probs) ra.softmaxBwOp = c;
            else if (o.kind == "matmul" && o.inputs[0] == probs && flag(o, "transpose_a")) ra.dvOp = c;
        }
        if (ra.contextOp < 0 || ra.softmaxBwOp < 0 || ra.dvOp < 0) continue;
        ra.v = opAt(ra.contextOp).inputs[1];
        ra.out = opAt(ra.contextOp).outputs[0];
        ra.dprobsOp = producer(opAt(ra.softmaxBwOp).inputs[1]);
        if (ra.dprobsOp < 0 || opAt(ra.dprobsOp).kind != "matmul" || opAt(ra.dprobsOp).inputs[1] != ra.v || !flag(opAt(ra.dprobsOp), "transpose_b")) continue;
        ra.dctx = opAt(ra.dprobsOp).inputs[0];
        if (opAt(ra.dvOp).inputs[1] != ra.dctx) continue;
        const int dsm = opAt(ra.softmaxBwOp).outputs[0];
        if (consumers[static_cast<std::size_t>(dsm)].size() != 1 || opAt(consumers[static_cast<std::size_t>(dsm)][0]).kind != "div_sqrt") continue;
        ra.dscaleOp = consumers[static_cast<std::size_t>(dsm)][0];
        const int dsc = opAt(ra.dscaleOp).outputs[0];
        for (int c : consumers[static_cast<std::size_t>(dsc)]) {
            const auto& o = opAt(c);
            if (o.kind != "matmul" || o.inputs[0] != dsc) continue;
            if (o.inputs[1] == ra.k && !flag(o, "transpose_a") && !flag(o, "transpose_b")) ra.dqOp = c;
            if (o.inputs[1] == ra.q && flag(o, "transpose_a") && !flag(o, "transpose_b")) ra.dkOp = c;
        }
        if (ra.dqOp < 0 || ra.dkOp < 0 || consumers[static_cast<std::size_t>(dsc)].size() != 2) continue;
        // Nothing outside the core may read what the ring never materialises.
        const auto& scoresT = opAt(ra.scoresOp).outputs[0];
        if (!only(scoresT, {ra.scaleOp}) || !only(opAt(ra.scaleOp).outputs[0], {ra.maskOp}) || !only(sm.inputs[0], {ra.softmaxOp}) ||
            !only(probs, {ra.contextOp, ra.softmaxBwOp, ra.dvOp}) || !only(opAt(ra.dprobsOp).outputs[0], {ra.softmaxBwOp}))
            continue;
        ra.dq = opAt(ra.dqOp).outputs[0];
        ra.dk = opAt(ra.dkOp).outputs[0];
        ra.dv = opAt(ra.dvOp).outputs[0];
        ra.base = opAt(ra.scoresOp).name;
        if (auto dot = ra.base.rfind('.'); dot != std::string::npos) ra.base = ra.base.substr(0, dot);
        ra.base += ".ring";
        const int r = static_cast<int>(rings.size());
        const std::vector<int> fwd{ra.scoresOp, ra.scaleOp, ra.maskOp, ra.softmaxOp, ra.contextOp};
        const std::vector<int> bwd{ra.dprobsOp, ra.dvOp, ra.softmaxBwOp, ra.dscaleOp, ra.dqOp, ra.dkOp};
        const int firstF = *std::min_element(fwd.begin(), fwd.end()), firstB = *std::min_element(bwd.begin(), bwd.end());
        for (int o : fwd) ringOps[o] = {r, o == firstF};
        for (int o : bwd) ringOps[o] = {r, o == firstB};
        rings.push_back(std::move(ra));
    }
}

/// Ring attention, forward (Liu et al., 2023; Megatron's p2p context parallelism). Member r of the
/// cp group holds query block r and starts with key/value block r; at each of the cp - 1 steps
/// every member passes the K/V block it holds to the next member (send_recv around the ring), so at
/// step s member r holds block (r - s) mod cp. For each block it computes the masked scores, their
/// row maximum, exp(scores - max), its row sum and the partial output, and merges them into running
/// ones (online softmax): with m' = max(m, m_b), o <- o exp(m - m') + o_b exp(m_b - m'), and the sum
/// likewise. The output is o / sum. Proving it equal to softmax(...) v needs exactly the exp
/// identities of the exp/log normal form (plan-format.md §3.10).
void Parallelizer::ringAttentionForward(const RingAttention& ra) {
    const auto& scoresOp = M.ops[static_cast<std::size_t>(ra.scoresOp)];
    const int stage = stageOf(scoresOp.layer);
    const int c = C.cp;
    const AxisState heads = tpAxis() ? AxisState::shard(1) : AxisState::rep(), seq = AxisState::shard(2);
    const int q0 = source(ra.q, stage);
    const AxisState lane = versions[static_cast<std::size_t>(q0)].pl.lane;
    const int q = rescale(convert(q0, lane, heads, seq), Rational(1));
    const int k = rescale(convert(source(ra.k, stage), lane, heads, seq), Rational(1));
    const int v = rescale(convert(source(ra.v, stage), lane, heads, seq), Rational(1));
    const int mask = rescale(convert(source(ra.mask, stage), AxisState::rep(), AxisState::rep(), AxisState::shard(0)), Rational(1));
    const int outV = newVersion(ra.out, stage, Placement{lane, heads, seq, Rational(1)}, lt(ra.out).name);
    const Shape qs = localShape(ra.q, versions[static_cast<std::size_t>(q)].pl), vs = localShape(ra.v, versions[static_cast<std::size_t>(v)].pl);
    const std::int64_t Sl = qs[2];
    const Shape block{qs[0], qs[1], Sl, Sl}, stat{qs[0], qs[1], Sl, 1}, stat2{qs[0], qs[1], Sl, 2}, outS{qs[0], qs[1], Sl, vs[3]};
    const Shape maskBlock{Sl, Sl};
    const Phase ph = Phase::Forward;
    const std::string& base = ra.base;
    Placement opPl{lane, heads, seq, Rational(1)};
    for (int l = 0; l < lanes(opPl); ++l) {
        const int kk = laneK(opPl, l), m = laneM(opPl, l);
        for (int t = 0; t < C.tp; ++t) {
            auto rank = [&](int r) { return rankOf(kk, stage, member(r, t)); };
            auto inst = [&](int vi, int r) {
                const auto& ver = versions[static_cast<std::size_t>(vi)];
                return ver.inst[static_cast<std::size_t>((perReplica(ver.pl) ? kk : l) * G() + member(r, t))];
            };
            auto local = [&](const std::string& what, int r, const Shape& shape) { return localTensor(base + "." + what, rank(r), m, shape, Role::Activation); };
            auto op = [&](const std::string& what, const std::string& kind, int r, std::vector<std::string> ins, const Shape& shape, json attrs,
                          const std::string& into = {}) {
                auto out = into.empty() ? local(what, r, shape) : into;
                emitLocal(base + "." + what + instanceSuffix(m, rank(r)), kind, rank(r), m, ph, ins, {out}, attrs);
                return out;
            };
            // K and V around the ring.
            std::vector<std::vector<std::string>> K(static_cast<std::size_t>(c)), V(static_cast<std::size_t>(c));
            for (int r = 0; r < c; ++r) {
                K[0].push_back(inst(k, r));
                V[0].push_back(inst(v, r));
            }
            for (int s = 1; s < c; ++s)
                for (int r = 0; r < c; ++r) {
                    const int from = (r - 1 + c) % c;
                    for (auto [what, blocks, logical] : {std::tuple{"k", &K, ra.k}, std::tuple{"v", &V, ra.v}}) {
                        const auto& prev = (*blocks)[static_cast<std::size_t>(s - 1)][static_cast<std::size_t>(from)];
                        auto recv = local(std::string(what) + ".step" + std::to_string(s), r, what[0] == 'k' ? localShape(ra.k, versions[static_cast<std::size_t>(k)].pl) : vs);
                        emitCollective(base + "." + what + ".step" + std::to_string(s) + ".send" + instanceSuffix(m, rank(r)), "send_recv",
                                       {rank(from), rank(r)}, m, logical, {prev}, {recv}, json::object());
                        (*blocks)[static_cast<std::size_t>(s)].push_back(recv);
                    }
                }
            for (int r = 0; r < c; ++r) {
                RingSaved saved;
                std::string mRun, lRun, oRun;
                for (int s = 0; s < c; ++s) {
                    const int j = (r - s + c) % c;
                    const auto S = ".step" + std::to_string(s);
                    const auto& Kb = K[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)];
                    const auto& Vb = V[static_cast<std::size_t>(s)][static_cast<std::size_t>(r)];
                    auto sc = op("scores" + S, "matmul", r, {inst(q, r), Kb}, block, json{{"transpose_b", true}});
                    auto scl = op("scale" + S, "div_sqrt", r, {sc}, block, json{{"n", ra.n}});
                    auto mb = op("mask_block" + S, "slice", r, {inst(mask, r)}, maskBlock, json{{"dim", 1}, {"start", j * Sl}, {"end", (j + 1) * Sl}});
                    auto msk = op("masked" + S, "add", r, {scl, mb}, block, json::object());
                    auto mx = op("max" + S, "max", r, {msk}, stat, json{{"dim", 3}, {"keepdim", true}});
                    auto sh = op("shifted" + S, "sub", r, {msk, mx}, block, json::object());
                    auto p = op("exp" + S, "exp", r, {sh}, block, json::object());
                    auto lb = op("sum" + S, "sum", r, {p}, stat, json{{"dims", {3}}, {"keepdim", true}});
                    auto ob = op("partial" + S, "matmul", r, {p, Vb}, outS, json::object());
                    saved.k.push_back(Kb);
                    saved.v.push_back(Vb);
                    saved.masked.push_back(msk);
                    if (s == 0) {
                        mRun = mx;
                        lRun = lb;
                        oRun = ob;
                        continue;
                    }
                    auto both = op("maxes" + S, "concat", r, {mRun, mx}, stat2, json{{"dim", 3}});
                    auto mNew = op("running_max" + S, "max", r, {both}, stat, json{{"dim", 3}, {"keepdim", true}});
                    auto a = op("rescale_old" + S, "exp", r, {op("old_minus_max" + S, "sub", r, {mRun, mNew}, stat, json::object())}, stat, json::object());
                    auto b = op("rescale_block" + S, "exp", r, {op("block_minus_max" + S, "sub", r, {mx, mNew}, stat, json::object())}, stat, json::object());
                    oRun = op("running_out" + S, "add", r,
                              {op("old_out" + S, "mul", r, {oRun, a}, outS, json::object()), op("block_out" + S, "mul", r, {ob, b}, outS, json::object())},
                              outS, json::object());
                    lRun = op("running_sum" + S, "add", r,
                              {op("old_sum" + S, "mul", r, {lRun, a}, stat, json::object()), op("block_sum" + S, "mul", r, {lb, b}, stat, json::object())},
                              stat, json::object());
                    mRun = mNew;
                }
                const auto out = inst(outV, r);
                op("normalise", "div", r, {oRun, lRun}, outS, json::object(), out);
                saved.max = mRun;
                saved.sum = lRun;
                saved.runningOut = oRun;
                ringSaved[std::to_string(&ra - rings.data()) + ":" + std::to_string(l) + ":" + std::to_string(member(r, t))] = std::move(saved);
            }
        }
    }
    produced[static_cast<std::size_t>(ra.out)] = outV;
}

/// Ring attention, backward (FlashAttention's, blockwise): with the forward's output, row maximum
/// and sum, member r recomputes p = exp(scores - max) / sum for each key block, and
/// D = rowsum(dout * out); then dv_b = p^T dout, ds = p (dout v_b^T - D) / sqrt(n), dq += ds k_b,
/// dk_b = ds^T q. The dk and dv of block b travel around the ring with the block, each member
/// adding its part, and a last send brings them home to member b.
void Parallelizer::ringAttentionBackward(const RingAttention& ra) {
    const auto& first = M.ops[static_cast<std::size_t>(ra.dprobsOp)];
    const int stage = stageOf(first.layer);
    const int c = C.cp;
    const AxisState heads = tpAxis() ? AxisState::shard(1) : AxisState::rep(), seq = AxisState::shard(2);
    const int q0 = source(ra.q, stage);
    const AxisState lane = versions[static_cast<std::size_t>(q0)].pl.lane;
    const int q = rescale(convert(q0, lane, heads, seq), Rational(1));
    const int dout = rescale(convert(source(ra.dctx, stage), lane, heads, seq), Rational(1));
    const Placement outPl{lane, heads, seq, Rational(1)};
    const int dqV = newVersion(ra.dq, stage, outPl, lt(ra.dq).name), dkV = newVersion(ra.dk, stage, outPl, lt(ra.dk).name),
              dvV = newVersion(ra.dv, stage, outPl, lt(ra.dv).name);
    const Shape qs = localShape(ra.q, outPl), ks = localShape(ra.k, outPl), vs = localShape(ra.v, outPl);
    const std::int64_t Sl = qs[2];
    const Shape block{qs[0], qs[1], Sl, Sl}, stat{qs[0], qs[1], Sl, 1};
    const Phase ph = first.phase;
    const std::string base = ra.base + ".backward";
    const int ringIndex = static_cast<int>(&ra - rings.data());
    for (int l = 0; l < lanes(outPl); ++l) {
        const int kk = laneK(outPl, l), m = laneM(outPl, l);
        for (int t = 0; t < C.tp; ++t) {
            auto rank = [&](int r) { return rankOf(kk, stage, member(r, t)); };
            auto inst = [&](int vi, int r) {
                const auto& ver = versions[static_cast<std::size_t>(vi)];
                return ver.inst[static_cast<std::size_t>((perReplica(ver.pl) ? kk : l) * G() + member(r, t))];
            };
            auto op = [&](const std::string& what, const std::string& kind, int r, std::vector<std::string> ins, const Shape& shape, json attrs,
                          const std::string& into = {}) {
                auto out = into.empty() ? localTensor(base + "." + what, rank(r), m, shape, Role::Gradient) : into;
                emitLocal(base + "." + what + instanceSuffix(m, rank(r)), kind, rank(r), m, ph, ins, {out}, attrs);
                return out;
            };
            auto savedOf = [&](int r) -> const RingSaved& {
                auto it = ringSaved.find(std::to_string(ringIndex) + ":" + std::to_string(l) + ":" + std::to_string(member(r, t)));
                if (it == ringSaved.end()) throw std::logic_error("generator: ring attention backward of " + ra.base + " before its forward");
                return it->second;
            };
            // D = rowsum(dout * out), with out = o / sum from the forward's running values (reading
            // the output itself would cut the proof at its lineage: the logical backward never
            // reads the context, so the relation of out to q, k and v would be lost).
            std::vector<std::string> D(static_cast<std::size_t>(c));
            const Shape outS = localShape(ra.out, outPl);
            for (int r = 0; r < c; ++r) {
                auto out = op("out", "div", r, {savedOf(r).runningOut, savedOf(r).sum}, outS, json::object());
                D[static_cast<std::size_t>(r)] = op("D", "sum", r, {op("dout_times_out", "mul", r, {inst(dout, r), out}, outS, json::object())}, stat,
                                                    json{{"dims", {3}}, {"keepdim", true}});
            }
            std::vector<std::string> dqRun(static_cast<std::size_t>(c)), dkAcc(static_cast<std::size_t>(c)), dvAcc(static_cast<std::size_t>(c));
            for (int s = 0; s < c; ++s) {
                const auto S = ".step" + std::to_string(s);
                for (int r = 0; r < c; ++r) {
                    const int j = (r - s + c) % c;  // the key block member r holds at step s
                    const auto& sv = savedOf(r);
                    const auto& Kb = sv.k[static_cast<std::size_t>(s)];
                    const auto& Vb = sv.v[static_cast<std::size_t>(s)];
                    auto e = op("exp" + S, "exp", r, {op("shifted" + S, "sub", r, {sv.masked[static_cast<std::size_t>(s)], sv.max}, block, json::object())}, block,
                                json::object());
                    auto p = op("probs" + S, "div", r, {e, sv.sum}, block, json::object());
                    auto dvPart = op("dv_part" + S, "matmul", r, {p, inst(dout, r)}, vs, json{{"transpose_a", true}});
                    auto dp = op("dprobs" + S, "matmul", r, {inst(dout, r), Vb}, block, json{{"transpose_b", true}});
                    auto ds = op("dscores_unscaled" + S, "mul", r, {p, op("dprobs_minus_D" + S, "sub", r, {dp, D[static_cast<std::size_t>(r)]}, block, json::object())},
                                 block, json::object());
                    auto dsc = op("dscores" + S, "div_sqrt", r, {ds}, block, json{{"n", ra.n}});
                    auto dqPart = op("dq_part" + S, "matmul", r, {dsc, Kb}, qs, json::object());
                    auto dkPart = op("dk_part" + S, "matmul", r, {dsc, inst(q, r)}, ks, json{{"transpose_a", true}});
                    auto& dq = dqRun[static_cast<std::size_t>(r)];
                    dq = s == 0 ? dqPart : op("dq" + S, "add", r, {dq, dqPart}, qs, json::object(), s == c - 1 ? inst(dqV, r) : std::string());
                    // The accumulators of block j: here since the previous step, from member r - 1.
                    for (auto [what, acc, part, shape, logical] :
                         {std::tuple{"dk", &dkAcc, dkPart, ks, ra.dk}, std::tuple{"dv", &dvAcc, dvPart, vs, ra.dv}}) {
                        auto& a = (*acc)[static_cast<std::size_t>(j)];
                        if (s == 0) {
                            a = part;
                            continue;
                        }
                        auto recv = localTensor(base + "." + what + "_acc" + S, rank(r), m, shape, Role::Gradient);
                        emitCollective(base + "." + what + "_acc" + S + ".send" + instanceSuffix(m, rank(r)), "send_recv", {rank((r - 1 + c) % c), rank(r)},
                                       m, logical, {a}, {recv}, json::object());
                        a = op(std::string(what) + "_acc" + S, "add", r, {recv, part}, shape, json::object());
                    }
                }
            }
            // Home: block j's accumulators are with member j - 1 after the last step.
            for (int j = 0; j < c; ++j)
                for (auto [what, acc, vi, logical] : {std::tuple{"dk", &dkAcc, dkV, ra.dk}, std::tuple{"dv", &dvAcc, dvV, ra.dv}})
                    emitCollective(base + "." + what + ".home.send" + instanceSuffix(m, rank(j)), "send_recv", {rank((j - 1 + c) % c), rank(j)}, m, logical,
                                   {(*acc)[static_cast<std::size_t>(j)]}, {inst(vi, j)}, json::object());
        }
    }
    produced[static_cast<std::size_t>(ra.dq)] = dqV;
    produced[static_cast<std::size_t>(ra.dk)] = dkV;
    produced[static_cast<std::size_t>(ra.dv)] = dvV;
}

}  // namespace tv::gen::detail
