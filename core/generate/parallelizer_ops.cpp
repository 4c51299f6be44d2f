// Each logical op's placement: processOp reads the op's dims (einsum-style, ops/dims.hpp) and
// linearity, follows its inputs' batch split on the lane axis (pickLane), picks the cp and then
// the tp placement with the least communication among those its inputs allow (pickGroup), converts
// the inputs and emits one local op per lane and group member. computeDesired steers the choice:
// a weight's gradient should end split as the weight is.
#include "generate/parallelizer_detail.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>

#include "ops/dims.hpp"

namespace tv::gen::detail {

namespace {

// ----- linearity -------------------------------------------------------------------------------

enum class Lin { None, Additive, Multi };
struct Linearity {
    Lin kind = Lin::None;
    std::vector<bool> linear;  ///< per input
};

Linearity linearity(const LOp& op, std::size_t nin) {
    const auto& k = op.kind;
    Linearity l;
    l.linear.assign(nin, false);
    auto set = [&](Lin kind, std::initializer_list<std::size_t> idx) {
        l.kind = kind;
        for (auto i : idx)
            if (i < nin) l.linear[i] = true;
    };
    static const std::set<std::string> kAdditive1 = {"neg", "mul_scalar", "div_sqrt", "identity", "reshape", "view",
                                                     "permute", "transpose", "slice", "slice_backward", "split", "chunk",
                                                     "expand", "sum_to", "sum", "mean", "sum_backward", "mean_backward"};
    static const std::set<std::string> kBackward1 = {"relu_backward", "sigmoid_backward", "tanh_backward", "silu_backward",
                                                     "gelu_backward", "erf_backward", "softmax_backward", "max_backward"};
    if (k == "add" || k == "sub") set(Lin::Additive, {0, 1});
    else if (k == "concat") {
        l.kind = Lin::Additive;
        l.linear.assign(nin, true);
    } else if (kAdditive1.count(k)) set(Lin::Additive, {0});
    else if (k == "embedding") set(Lin::Additive, {1});
    else if (k == "embedding_backward") set(Lin::Additive, {1});
    else if (k == "mul" || k == "matmul") set(Lin::Multi, {0, 1});
    else if (k == "linear" && nin == 2) set(Lin::Multi, {0, 1});
    else if (k == "div" || k == "dropout") set(Lin::Multi, {0});
    else if (kBackward1.count(k)) set(Lin::Multi, {1});
    else if (k == "rmsnorm_backward" || k == "layernorm_backward" || k == "cross_entropy_backward") set(Lin::Multi, {2});
    return l;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

int labelOf(const std::vector<int>& ls, int dim) { return dim >= 0 && dim < static_cast<int>(ls.size()) ? ls[static_cast<std::size_t>(dim)] : -1; }
int dimOf(const std::vector<int>& ls, int label) {
    for (std::size_t d = 0; d < ls.size(); ++d)
        if (ls[d] == label) return static_cast<int>(d);
    return -1;
}

}  // namespace

void Parallelizer::computeDesired() {
    // A weight's gradient should end where the weight lives, so the optimizer needs no resharding:
    // propagate each weight's tp placement to the ops accumulating its gradient.
    for (std::size_t i = 0; i < M.ops.size(); ++i) {
        const auto& o = M.ops[i];
        if (o.dead || (o.kind != "adamw" && o.kind != "sgd")) continue;
        int w = o.inputs[0], g = o.inputs[1];
        int d = M.placement[static_cast<std::size_t>(w)].tpShardDim;
        if (d < 0 || !tpAxis()) continue;
        std::vector<int> work{g};
        while (!work.empty()) {
            int t = work.back();
            work.pop_back();
            desired[static_cast<std::size_t>(t)] = AxisState::shard(d);
            int p = lt(t).producer;
            if (p >= 0 && M.ops[static_cast<std::size_t>(p)].kind == "add")
                for (int in : M.ops[static_cast<std::size_t>(p)].inputs) work.push_back(in);
        }
    }
}

double Parallelizer::tpCost(const AxisState& from, const AxisState& to, bool weight) {
    if (from == to) return 0;
    if (to.st == St::Partial) return kInf;
    if (from.st == St::Rep) return 1;
    if (from.st == St::Shard && to.st == St::Rep) return weight ? 15 : 10;
    // To another split: one all-to-all. Priced as the all-gather it replaces (the costs do not
    // know tensor sizes, and an attention's scores outweigh its values).
    if (from.st == St::Shard) return weight ? 16 : 11;
    return 10;  // partial -> replicated or sharded
}

Parallelizer::VocabAxis Parallelizer::vocabAxis(const LOp& op) const {
    if (op.kind == "embedding") return {1, 0, lt(op.inputs[1]).shape[0]};
    if (op.kind == "embedding_backward") return {1, -1, lt(op.outputs[0]).shape[0]};
    if (op.kind == "cross_entropy" || op.kind == "cross_entropy_backward") {
        const auto& s = lt(op.inputs[0]).shape;
        return {0, static_cast<int>(s.size()) - 1, s.back()};
    }
    return {};
}

/// One op as processOp places it: its dims, its linearity, and its inputs' placements as their
/// producers hold them (on the op's stage).
struct Parallelizer::OpPlacing {
    const LOp& op;
    std::size_t nin, nout;
    const OpDims& dims;
    const Linearity& lin;
    std::vector<Placement> cur;
};

/// The lane axis of one op: its inputs' and outputs' placements, the dim label the batch is split
/// along (-1: none), and whether splitting it scales the outputs (a mean over the batch).
struct Parallelizer::LanePick {
    std::vector<AxisState> in, out;
    int label = -1;
    bool mean = false;
    int expertLabel = -1;  ///< the expert dim's label, split over the expert-parallel group (-1: none)
};

/// A placement of one op on a group axis (cp or tp), with the communication it takes.
struct Parallelizer::Candidate {
    std::vector<AxisState> in, out;
    bool mean = false;
    bool vocab = false;  ///< a vocabulary-parallel embedding or cross-entropy
    double cost = 0;
    int label = -1;      ///< the dim label it splits along (-1: none)
};

/// The lane axis: follow the inputs' batch split.
Parallelizer::LanePick Parallelizer::pickLane(const OpPlacing& x) const {
    const auto& op = x.op;
    const auto nin = x.nin, nout = x.nout;
    const auto& dims = x.dims;
    const auto& lin = x.lin;
    std::vector<AxisState> laneIn(nin, AxisState::rep()), laneOut(nout, AxisState::rep());
    int laneLabel = -1;
    bool laneMean = false;
    if (laneAxis() && epAxis()) {
        bool expert = false;
        for (const auto& p : x.cur) expert = expert || p.lane.expert();
        if (expert) {
            if (auto e = pickExpertLane(x)) return *e;
            // The op cannot run on the experts' parts: its inputs go back to how the rest of the
            // model holds them (tokens combined back to their lanes, expert parts gathered).
            OpPlacing y = x;
            for (auto& p : y.cur)
                if (p.lane.st == St::EpTokens) p.lane = AxisState::shard(p.lane.dim2);
                else if (p.lane.expert()) p.lane = AxisState::rep();
            return pickLane(y);
        }
    }
    if (laneAxis()) {
        for (std::size_t i = 0; i < nin; ++i)
            if (x.cur[i].lane.st == St::Shard) {
                int l = labelOf(dims.in[i], x.cur[i].lane.dim);
                if (l < 0 || dims.labels[static_cast<std::size_t>(l)].noShard)
                    throw std::logic_error("generator: op " + op.name + " (" + op.kind + ") cannot split the batch along dim " +
                                           std::to_string(x.cur[i].lane.dim) + " of " + lt(op.inputs[i]).name);
                if (laneLabel >= 0 && laneLabel != l)
                    throw std::logic_error("generator: op " + op.name + " reads inputs split along different batch dims");
                laneLabel = l;
            }
        // ZeRO: inputs split over the replicas (optimizer state) make the op run on each replica's part.
        int zeroLabel = -1;
        for (std::size_t i = 0; i < nin; ++i)
            if (x.cur[i].lane.st == St::DpShard) {
                int l = labelOf(dims.in[i], x.cur[i].lane.dim);
                if (l >= 0 && !dims.labels[static_cast<std::size_t>(l)].noShard && zeroLabel < 0) zeroLabel = l;
            }
        std::vector<std::size_t> partials;
        for (std::size_t i = 0; i < nin; ++i)
            if (x.cur[i].lane.st == St::Partial) partials.push_back(i);
        if (laneLabel < 0 && zeroLabel >= 0) {
            bool ok = true;
            for (std::size_t j = 0; j < nout; ++j) ok = ok && dimOf(dims.out[j], zeroLabel) >= 0;
            if (ok) {
                for (std::size_t i = 0; i < nin; ++i) {
                    int d = dimOf(dims.in[i], zeroLabel);
                    laneIn[i] = d >= 0 ? AxisState::dpShard(d) : AxisState::rep();
                }
                for (std::size_t j = 0; j < nout; ++j) laneOut[j] = AxisState::dpShard(dimOf(dims.out[j], zeroLabel));
                // The group axes must not split the same dim again: a ZeRO part and a tp part of
                // one dim would nest in the order the conversions happened to run, which the
                // placement does not record.
                laneLabel = zeroLabel;
            }
        } else if (laneLabel >= 0) {
            for (std::size_t i = 0; i < nin; ++i) {
                int d = dimOf(dims.in[i], laneLabel);
                laneIn[i] = d >= 0 ? AxisState::shard(d) : AxisState::rep();
            }
            for (std::size_t j = 0; j < nout; ++j) {
                int d = dimOf(dims.out[j], laneLabel);
                if (d >= 0)
                    laneOut[j] = AxisState::shard(d);
                else if (dims.labels[static_cast<std::size_t>(laneLabel)].sums)
                    laneOut[j] = AxisState::partial();
                else
                    throw std::logic_error("generator: op " + op.name + " drops the batch dim without summing over it");
            }
            laneMean = dims.labels[static_cast<std::size_t>(laneLabel)].mean;
        } else if (!partials.empty()) {
            bool pass = false;
            if (lin.kind == Lin::Additive) {
                pass = true;
                for (std::size_t i = 0; i < nin; ++i)
                    if (lin.linear[i] != (x.cur[i].lane.st == St::Partial)) pass = false;
            } else if (lin.kind == Lin::Multi) {
                pass = partials.size() == 1 && lin.linear[partials[0]];
            }
            if (pass) {
                for (auto i : partials) laneIn[i] = AxisState::partial();
                laneOut.assign(nout, AxisState::partial());
            }
        }
    }
    return {std::move(laneIn), std::move(laneOut), laneLabel, laneMean, -1};
}

/// Expert parallelism over the replicas: an op that reads an expert weight, the dispatched tokens
/// or an expert gradient runs on each replica's expert part when its outputs keep the expert dim.
/// Tokens split by lane are dispatched to the experts (EpTokens) only by an op that also reads an
/// expert weight or contracts the tokens (a weight gradient); any other op reading both combines
/// the dispatched ones back (the gate's weights are applied to the combined expert outputs, as
/// Megatron applies the routing probabilities after unpermuting).
std::optional<Parallelizer::LanePick> Parallelizer::pickExpertLane(const OpPlacing& x) const {
    const auto nin = x.nin, nout = x.nout;
    const auto& dims = x.dims;
    const auto& lin = x.lin;
    int eLabel = -1, tLabel = -1;
    auto set = [](int& slot, int l) {
        if (l < 0 || (slot >= 0 && slot != l)) return false;
        slot = l;
        return true;
    };
    bool weightPart = false, sums = false, regularSplit = false;
    std::vector<std::size_t> partials, epSums;
    for (std::size_t i = 0; i < nin; ++i) {
        const auto& a = x.cur[i].lane;
        switch (a.st) {
            case St::Rep: break;
            case St::EpShard:
                weightPart = true;
                if (!set(eLabel, labelOf(dims.in[i], a.dim))) return std::nullopt;
                break;
            case St::EpPartial:
                partials.push_back(i);
                if (!set(eLabel, labelOf(dims.in[i], a.dim))) return std::nullopt;
                break;
            case St::EpTokens:
                if (!set(eLabel, labelOf(dims.in[i], a.dim)) || !set(tLabel, labelOf(dims.in[i], a.dim2))) return std::nullopt;
                break;
            case St::Shard:
                regularSplit = true;
                if (!set(tLabel, labelOf(dims.in[i], a.dim))) return std::nullopt;
                break;
            case St::EpSum: epSums.push_back(i); break;
            default: return std::nullopt;  // partial over every lane, or a ZeRO part of a dense tensor
        }
    }
    LanePick r;
    r.in.assign(nin, AxisState::rep());
    r.out.assign(nout, AxisState::rep());
    // Sums over the experts flow through maps additive in them (a total of squared norms).
    if (eLabel < 0) {
        if (epSums.empty() || tLabel >= 0 || lin.kind != Lin::Additive) return std::nullopt;
        for (std::size_t i = 0; i < nin; ++i)
            if (lin.linear[i] != (x.cur[i].lane.st == St::EpSum)) return std::nullopt;
        for (auto i : epSums) r.in[i] = AxisState::epSum();
        r.out.assign(nout, AxisState::epSum());
        return r;
    }
    if (!epSums.empty()) return std::nullopt;
    if (dims.labels[static_cast<std::size_t>(eLabel)].noShard) return std::nullopt;
    if (tLabel >= 0 && (dims.labels[static_cast<std::size_t>(tLabel)].noShard || dims.labels[static_cast<std::size_t>(tLabel)].mean))
        return std::nullopt;
    // Gradient parts flow through maps linear in them; any other op reads them reduced.
    bool partialsFlow = !partials.empty();
    if (partialsFlow && lin.kind == Lin::Additive) {
        for (std::size_t i = 0; i < nin; ++i)
            if (lin.linear[i] != (x.cur[i].lane.st == St::EpPartial)) partialsFlow = false;
    } else if (partialsFlow) {
        partialsFlow = lin.kind == Lin::Multi && partials.size() == 1 && lin.linear[partials[0]];
    }
    bool keepsExperts = true, keepsTokens = true;
    for (std::size_t j = 0; j < nout; ++j) {
        keepsExperts = keepsExperts && dimOf(dims.out[j], eLabel) >= 0;
        keepsTokens = keepsTokens && (tLabel < 0 || dimOf(dims.out[j], tLabel) >= 0);
    }
    // A sum over the experts of each replica's part (a squared norm): a sum over the group.
    if (!keepsExperts) {
        if (tLabel >= 0 || lin.kind != Lin::Additive || !dims.labels[static_cast<std::size_t>(eLabel)].sums) return std::nullopt;
        for (std::size_t j = 0; j < nout; ++j)
            if (dimOf(dims.out[j], eLabel) >= 0) return std::nullopt;
        for (std::size_t i = 0; i < nin; ++i) {
            const int d = dimOf(dims.in[i], eLabel);
            if (lin.linear[i] != (d >= 0)) return std::nullopt;
            if (d >= 0) r.in[i] = AxisState::epShard(d);
        }
        r.out.assign(nout, AxisState::epSum());
        r.expertLabel = eLabel;
        return r;
    }
    if (tLabel >= 0 && !keepsTokens) {
        if (!dims.labels[static_cast<std::size_t>(tLabel)].sums) return std::nullopt;
        sums = true;
    }
    if (regularSplit && !weightPart && !sums) return std::nullopt;
    // ZeRO over the expert-data-parallel replicas: an input holding such a part makes the op run
    // on it when every output keeps that dim (the optimizer on its part of the state).
    int zLabel = -1;
    for (std::size_t i = 0; i < nin; ++i)
        if (x.cur[i].lane.st == St::EpShard && x.cur[i].lane.dim2 >= 0 && zLabel < 0) {
            const int l = labelOf(dims.in[i], x.cur[i].lane.dim2);
            bool all = l >= 0 && !dims.labels[static_cast<std::size_t>(l)].noShard;
            for (std::size_t j = 0; j < nout && all; ++j) all = dimOf(dims.out[j], l) >= 0;
            if (all) zLabel = l;
        }
    if (tLabel >= 0) zLabel = -1;
    for (std::size_t i = 0; i < nin; ++i) {
        const int de = dimOf(dims.in[i], eLabel), dt = tLabel >= 0 ? dimOf(dims.in[i], tLabel) : -1;
        const auto& a = x.cur[i].lane;
        if (de >= 0 && dt >= 0) {
            if (a.st != St::EpTokens && !(a.st == St::Shard && a.dim == dt)) return std::nullopt;
            r.in[i] = AxisState::epTokens(de, dt);
        } else if (de >= 0) {
            if (a.st == St::Shard || a.st == St::EpTokens) return std::nullopt;
            const int dz = zLabel >= 0 ? dimOf(dims.in[i], zLabel) : -1;
            r.in[i] = a.st == St::EpPartial && partialsFlow ? AxisState::epPartial(de) : AxisState::epShard(de, dz);
        } else if (dt >= 0) {
            return std::nullopt;  // tokens without the expert dim: no expert part to hold
        }
    }
    for (std::size_t j = 0; j < nout; ++j) {
        const int de = dimOf(dims.out[j], eLabel), dt = tLabel >= 0 ? dimOf(dims.out[j], tLabel) : -1;
        if (dt >= 0) r.out[j] = AxisState::epTokens(de, dt);
        else if (sums || partialsFlow) r.out[j] = AxisState::epPartial(de);
        else r.out[j] = AxisState::epShard(de, zLabel >= 0 ? dimOf(dims.out[j], zLabel) : -1);
    }
    r.label = tLabel >= 0 ? tLabel : zLabel;  // the group axes split neither the tokens nor a ZeRO part again
    r.expertLabel = eLabel;
    return r;
}

/// A group axis (cp, or tp when cpAx is false): the placement with the least communication.
/// `excluded`: the dim label the other group axis already splits along; `laneLabel`: the lane's.
Parallelizer::Candidate Parallelizer::pickGroup(const OpPlacing& x, bool cpAx, int excluded, int laneLabel, int laneLabel2) const {
    const auto& op = x.op;
    const auto nin = x.nin, nout = x.nout;
    const auto& dims = x.dims;
    const auto& lin = x.lin;
    const int n = cpAx ? C.cp : C.tp;
    auto now = [&](std::size_t i) -> const AxisState& { return cpAx ? x.cur[i].cp : x.cur[i].tp; };
    std::vector<Candidate> cands;
    auto finish = [&](Candidate c) {
        for (std::size_t i = 0; i < nin; ++i) {
            bool w = lt(op.inputs[i]).role == Role::Weight || lt(op.inputs[i]).role == Role::OptimizerState;
            if (lt(op.inputs[i]).dtype == DType::Int && c.in[i].st == St::Partial) return;
            c.cost += tpCost(now(i), c.in[i], w);
        }
        for (std::size_t j = 0; j < nout && !cpAx; ++j) {
            const auto& want = desired[static_cast<std::size_t>(op.outputs[j])];
            // An output not split as it should end up: resharded later. For an embedding's
            // gradient that means every rank holding (a partial sum of) the whole table's
            // gradient; Megatron instead completes the incoming gradient and scatters it into
            // each rank's part of the vocabulary.
            if (want.st == St::Shard && !(c.out[j] == want)) c.cost += op.kind == "embedding_backward" ? 12 : 2;
        }
        if (c.cost < kInf) cands.push_back(std::move(c));
    };
    // Partial sums flow through linear ops.
    std::vector<std::size_t> partials;
    for (std::size_t i = 0; i < nin; ++i)
        if (now(i).st == St::Partial) partials.push_back(i);
    if (!partials.empty() && lin.kind == Lin::Additive) {
        Candidate c;
        for (std::size_t i = 0; i < nin; ++i) c.in.push_back(lin.linear[i] ? AxisState::partial() : AxisState::rep());
        c.out.assign(nout, AxisState::partial());
        finish(c);
    }
    if (lin.kind == Lin::Multi)
        for (auto pi : partials)
            if (lin.linear[pi]) {
                Candidate c;
                for (std::size_t i = 0; i < nin; ++i) c.in.push_back(i == pi ? AxisState::partial() : AxisState::rep());
                c.out.assign(nout, AxisState::partial());
                finish(c);
            }
    // Megatron's vocabulary parallelism (tp): an embedding whose table is split along the
    // vocabulary looks up its own rows (a partial sum over the group), its gradient lands in
    // the table's parts, and the cross-entropy of logits split along the classes is computed
    // on the parts (the maximum, the sum of exponentials and the label's logit reduced over
    // the group).
    if (const auto vocab = vocabAxis(op); vocab.input >= 0 && !cpAx) {
        const int vd = vocab.dim;
        const bool inputSplit = op.kind != "embedding_backward" && now(static_cast<std::size_t>(vocab.input)) == AxisState::shard(vd);
        const bool outputWanted = op.kind == "embedding_backward" && desired[static_cast<std::size_t>(op.outputs[0])] == AxisState::shard(0);
        if ((inputSplit || outputWanted) && vocab.size % n == 0) {
            Candidate c;
            c.vocab = true;
            c.in.assign(nin, AxisState::rep());
            if (op.kind != "embedding_backward") c.in[static_cast<std::size_t>(vocab.input)] = AxisState::shard(vd);
            if (op.kind == "embedding") c.out = {AxisState::partial()};
            else if (op.kind == "cross_entropy") c.out = {AxisState::rep()};
            else c.out = {AxisState::shard(op.kind == "embedding_backward" ? 0 : vd)};
            finish(c);
        }
    }
    // Splits along a dim some input is split on, or some output should end up split on.
    std::vector<int> labels;
    for (std::size_t i = 0; i < nin; ++i)
        if (now(i).st == St::Shard) labels.push_back(labelOf(dims.in[i], now(i).dim));
    for (std::size_t j = 0; j < nout && !cpAx; ++j)
        if (desired[static_cast<std::size_t>(op.outputs[j])].st == St::Shard)
            labels.push_back(labelOf(dims.out[j], desired[static_cast<std::size_t>(op.outputs[j])].dim));
    std::sort(labels.begin(), labels.end());
    labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
    // Context parallelism keeps every weight whole: the optimizer updates it replicated (a
    // gradient split along the sequence, such as a position embedding's, is gathered first).
    if (cpAx && (op.kind == "adamw" || op.kind == "sgd")) labels.clear();
    for (int l : labels) {
        if (l < 0 || l == laneLabel || l == laneLabel2 || l == excluded) continue;
        const auto& lab = dims.labels[static_cast<std::size_t>(l)];
        if (lab.noShard || lab.size % n != 0) continue;
        Candidate c;
        c.label = l;
        bool ok = true;
        for (std::size_t i = 0; i < nin; ++i) {
            int d = dimOf(dims.in[i], l);
            c.in.push_back(d >= 0 ? AxisState::shard(d) : AxisState::rep());
        }
        for (std::size_t j = 0; j < nout; ++j) {
            int d = dimOf(dims.out[j], l);
            if (d >= 0) c.out.push_back(AxisState::shard(d));
            else if (lab.sums) c.out.push_back(AxisState::partial());
            else ok = false;
        }
        c.mean = lab.mean;
        if (ok) finish(c);
    }
    {
        Candidate c;
        c.in.assign(nin, AxisState::rep());
        c.out.assign(nout, AxisState::rep());
        finish(c);
    }
    if (cands.empty())
        throw std::logic_error(std::string("generator: no ") + (cpAx ? "context" : "tensor") + "-parallel placement for op " + op.name);
    const Candidate* best = &cands[0];
    for (const auto& c : cands)
        if (c.cost < best->cost) best = &c;
    return *best;
}

void Parallelizer::processOp(int opIndex) {
    const auto& op = M.ops[static_cast<std::size_t>(opIndex)];
    const int stage = stageOf(op.layer);
    const auto nin = op.inputs.size(), nout = op.outputs.size();
    std::vector<Shape> inShapes, outShapes;
    for (int t : op.inputs) inShapes.push_back(lt(t).shape);
    for (int t : op.outputs) outShapes.push_back(lt(t).shape);
    OpDims dims;
    try {
        dims = operatorDims(op.kind, op.attrs, inShapes, outShapes);
    } catch (const std::invalid_argument& e) {
        throw std::logic_error(std::string("generator: the parallelizer: ") + e.what() + " (op " + op.name + ")");
    }
    const Linearity lin = linearity(op, nin);

    std::vector<int> src(nin);
    for (std::size_t i = 0; i < nin; ++i) src[i] = source(op.inputs[i], stage);
    OpPlacing x{op, nin, nout, dims, lin, {}};
    for (int v : src) x.cur.push_back(versions[static_cast<std::size_t>(v)].pl);

    // ---- the lane axis, then the group axes (cp, then tp).
    const LanePick lanePick = pickLane(x);
    const auto& laneIn = lanePick.in;
    const auto& laneOut = lanePick.out;
    const bool laneMean = lanePick.mean;
    Candidate cpPick, tpPick;
    cpPick.in.assign(nin, AxisState::rep());
    cpPick.out.assign(nout, AxisState::rep());
    tpPick = cpPick;
    if (cpAxis()) cpPick = pickGroup(x, true, -1, lanePick.label, lanePick.expertLabel);
    if (tpAxis()) tpPick = pickGroup(x, false, cpPick.label, lanePick.label, lanePick.expertLabel);
    const auto& tpIn = tpPick.in;
    const auto& tpOut = tpPick.out;
    const bool tpMean = tpPick.mean, tpVocab = tpPick.vocab;
    const auto& cpIn = cpPick.in;
    const auto& cpOut = cpPick.out;

    // ---- convert the inputs, then fix coefficients by linearity.
    std::vector<int> in(nin);
    for (std::size_t i = 0; i < nin; ++i) in[i] = convert(src[i], laneIn[i], tpIn[i], cpIn[i]);
    auto coeffOf = [&](std::size_t i) { return versions[static_cast<std::size_t>(in[i])].pl.coeff; };
    Rational outCoeff(1);
    if (lin.kind == Lin::Additive) {
        bool same = true;
        std::optional<Rational> c;
        for (std::size_t i = 0; i < nin; ++i)
            if (lin.linear[i]) {
                if (c && !(*c == coeffOf(i))) same = false;
                if (!c) c = coeffOf(i);
            }
        for (std::size_t i = 0; i < nin; ++i)
            if (!lin.linear[i] || !same) in[i] = rescale(in[i], Rational(1));
        outCoeff = same && c ? *c : Rational(1);
    } else {
        for (std::size_t i = 0; i < nin; ++i) {
            if (lin.kind == Lin::Multi && lin.linear[i])
                outCoeff = outCoeff * coeffOf(i);
            else
                in[i] = rescale(in[i], Rational(1));
        }
    }
    if (laneMean) outCoeff = outCoeff / Rational(L);
    if (tpMean) outCoeff = outCoeff / Rational(C.tp);
    if (cpPick.mean) outCoeff = outCoeff / Rational(C.cp);

    // ---- emit one local op per lane and tp rank.
    std::vector<int> outV(nout);
    for (std::size_t j = 0; j < nout; ++j) {
        Placement p{laneOut[j], tpOut[j], cpOut[j], outCoeff};
        outV[j] = newVersion(op.outputs[j], stage, p, lt(op.outputs[j]).name);
    }
    Placement opPl{nout ? laneOut[0] : AxisState::rep(), AxisState::rep(), AxisState::rep(), Rational(1)};
    for (std::size_t j = 0; j < nout; ++j)
        if (laneOut[j].st != St::Rep) opPl.lane = laneOut[j];
    for (int l = 0; l < lanes(opPl); ++l)
        for (int g = 0; g < G(); ++g) {
            const int t = g % C.tp, c = g / C.tp;
            int kk = laneK(opPl, l), m = laneM(opPl, l);
            int rank = rankOf(kk, stage, g);
            std::vector<std::string> ins, outs;
            for (std::size_t i = 0; i < nin; ++i) {
                const auto& v = versions[static_cast<std::size_t>(in[i])];
                int li = perReplica(v.pl) ? kk : l;
                ins.push_back(v.inst[static_cast<std::size_t>(li * G() + g)]);
            }
            for (std::size_t j = 0; j < nout; ++j) {
                const auto& v = versions[static_cast<std::size_t>(outV[j])];
                int li = perReplica(v.pl) ? kk : l;
                outs.push_back(v.inst[static_cast<std::size_t>(li * G() + g)]);
            }
            if (tpVocab && (op.kind == "cross_entropy" || op.kind == "cross_entropy_backward")) {
                if (t == 0) vocabParallelCrossEntropy(op, l, c, stage, in, outV);  // the whole tp group at once
                continue;
            }
            json attrs = op.attrs;
            if (tpVocab) {
                attrs["parts"] = C.tp;
                attrs["index"] = t;
            }
            emitLocal(op.name + instanceSuffix(m, rank), op.kind, rank, m, op.phase, ins, outs, attrs);
        }
    for (std::size_t j = 0; j < nout; ++j) produced[static_cast<std::size_t>(op.outputs[j])] = outV[j];

    // Sequence parallelism starts here: the residual stream is split along the sequence.
    for (std::size_t j = 0; j < nout; ++j)
        if (tpAxis() && std::find(M.seqParallelStarts.begin(), M.seqParallelStarts.end(), op.outputs[j]) != M.seqParallelStarts.end())
            produced[static_cast<std::size_t>(op.outputs[j])] = tpConvert(outV[j], AxisState::shard(M.seqDim));
}

}  // namespace tv::gen::detail
