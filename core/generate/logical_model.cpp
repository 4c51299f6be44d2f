#include "generate/logical_model.hpp"

#include <algorithm>
#include <stdexcept>

#include "ops/registry.hpp"

namespace tv::gen {

using json = nlohmann::json;

std::string LogicalModel::fresh(std::unordered_map<std::string, int>& used, const std::string& base) {
    auto& n = used[base];
    ++n;
    return n == 1 ? base : base + "." + std::to_string(n);
}

int LogicalModel::input(const std::string& name, Shape shape, Role role, DType dtype) {
    LTensor t;
    t.name = freshTensor(name);
    t.shape = std::move(shape);
    t.role = role;
    t.dtype = dtype;
    tensors.push_back(std::move(t));
    placement.emplace_back();
    return static_cast<int>(tensors.size()) - 1;
}

int LogicalModel::weight(const std::string& name, Shape shape, int tpShardDim) {
    int t = input(name, std::move(shape), Role::Weight);
    placement[static_cast<std::size_t>(t)].tpShardDim = tpShardDim;
    weights.push_back(t);
    return t;
}

std::vector<int> LogicalModel::op(const std::string& kind, const std::string& name, std::vector<int> ins, json attrs,
                                  std::vector<Shape> outShapes) {
    const auto& reg = OpRegistry::instance();
    auto k = reg.find(kind);
    if (!k) throw std::logic_error("generator: unknown operator " + kind);
    std::vector<Shape> inShapes;
    std::vector<DType> types;
    for (int i : ins) {
        inShapes.push_back(shape(i));
        types.push_back(tensors[static_cast<std::size_t>(i)].dtype);
    }
    if (auto err = checkOp(reg.spec(*k), attrs, inShapes, outShapes, types); !err.empty())
        throw std::logic_error("generator: op " + name + " (" + kind + "): " + err);
    LOp o;
    o.name = freshOp(name);
    o.kind = kind;
    o.attrs = std::move(attrs);
    o.inputs = std::move(ins);
    o.phase = phase;
    o.layer = layer;
    auto id = static_cast<int>(ops.size());
    for (std::size_t j = 0; j < outShapes.size(); ++j) {
        LTensor t;
        t.name = outShapes.size() == 1 ? o.name : o.name + "." + std::to_string(j);
        t.name = freshTensor(t.name);
        t.shape = std::move(outShapes[j]);
        t.role = phase == Phase::Forward ? Role::Activation : phase == Phase::Backward ? Role::Gradient : Role::Weight;
        t.producer = id;
        tensors.push_back(std::move(t));
        placement.emplace_back();
        o.outputs.push_back(static_cast<int>(tensors.size()) - 1);
    }
    ops.push_back(std::move(o));
    return ops.back().outputs;
}

namespace {

/// Emits backward ops into the logical model for the VJP rules.
class ModelGradBuilder : public GradBuilder {
public:
    ModelGradBuilder(LogicalModel& m, std::string prefix) : m_(m), prefix_(std::move(prefix)) {}
    std::vector<Handle> emitOp(std::string_view op, std::vector<Handle> inputs, json attrs, std::vector<Shape> outShapes) override {
        std::vector<int> ins(inputs.begin(), inputs.end());
        auto outs = m_.op(std::string(op), prefix_ + "." + std::string(op), std::move(ins), std::move(attrs), std::move(outShapes));
        return {outs.begin(), outs.end()};
    }
    Shape shapeOf(Handle h) const override { return m_.shape(h); }

private:
    LogicalModel& m_;
    std::string prefix_;
};

}  // namespace

std::vector<int> appendBackward(LogicalModel& m) {
    const auto& reg = OpRegistry::instance();
    const auto nt = m.tensors.size();
    // Which tensors depend on a weight (only those get gradients).
    std::vector<bool> needs(nt, false);
    for (int w : m.weights) needs[static_cast<std::size_t>(w)] = true;
    const auto nForward = m.ops.size();
    for (std::size_t i = 0; i < nForward; ++i) {
        bool any = false;
        for (int in : m.ops[i].inputs) any = any || needs[static_cast<std::size_t>(in)];
        for (int out : m.ops[i].outputs) needs[static_cast<std::size_t>(out)] = any;
    }
    std::vector<std::vector<int>> contrib(nt);
    contrib[static_cast<std::size_t>(m.loss)].push_back(m.lossSeed);
    std::vector<int> firstUseLayer(nt, kEmbeddingLayer);
    std::vector<bool> used(nt, false);
    for (std::size_t i = 0; i < nForward; ++i)
        for (int in : m.ops[i].inputs)
            if (!used[static_cast<std::size_t>(in)]) {
                used[static_cast<std::size_t>(in)] = true;
                firstUseLayer[static_cast<std::size_t>(in)] = m.ops[i].layer;
            }

    m.phase = Phase::Backward;
    // The gradient of t: its contributions summed (in the layer where t is produced).
    auto gradient = [&](int t, std::string where) -> int {
        auto& c = contrib[static_cast<std::size_t>(t)];
        if (c.empty()) return -1;
        int g = c[0];
        for (std::size_t k = 1; k < c.size(); ++k)
            g = m.op1("add", "bw." + where + ".grad_sum", {g, c[k]}, json::object(), m.shape(t));
        c.assign(1, g);
        return g;
    };
    for (std::size_t i = nForward; i-- > 0;) {
        const LOp fop = m.ops[i];  // copy: m.ops grows below
        std::vector<GradBuilder::Handle> outGrads;
        bool any = false;
        m.layer = fop.layer;
        for (int out : fop.outputs) {
            int g = gradient(out, m.tensors[static_cast<std::size_t>(out)].name);
            outGrads.push_back(g);
            any = any || g >= 0;
        }
        bool inputNeeds = false;
        for (int in : fop.inputs) inputNeeds = inputNeeds || needs[static_cast<std::size_t>(in)];
        if (!any || !inputNeeds) continue;
        const auto& spec = reg.spec(*reg.find(fop.kind));
        if (!spec.vjp) throw std::logic_error("generator: operator " + fop.kind + " has no backward rule (op " + fop.name + ")");
        // Outputs without a gradient get zeros so every VJP sees a gradient per output.
        for (std::size_t j = 0; j < outGrads.size(); ++j)
            if (outGrads[j] < 0)
                outGrads[j] = m.op1("zeros_like", "bw." + fop.name + ".zero", {fop.outputs[j]}, json::object(),
                                    m.shape(fop.outputs[j]));
        ModelGradBuilder b(m, "bw." + fop.name);
        std::vector<GradBuilder::Handle> ins(fop.inputs.begin(), fop.inputs.end()), outs(fop.outputs.begin(), fop.outputs.end());
        VjpArgs args{ins, outs, outGrads, fop.attrs};
        auto grads = spec.vjp(b, args);
        for (std::size_t k = 0; k < grads.size() && k < fop.inputs.size(); ++k) {
            int in = fop.inputs[k];
            if (grads[k] >= 0 && needs[static_cast<std::size_t>(in)]) contrib[static_cast<std::size_t>(in)].push_back(grads[k]);
        }
    }
    std::vector<int> result;
    for (int w : m.weights) {
        m.layer = firstUseLayer[static_cast<std::size_t>(w)];
        result.push_back(gradient(w, m.tensors[static_cast<std::size_t>(w)].name));
    }
    return result;
}

void appendOptimizer(LogicalModel& m, const std::vector<int>& grads, const OptimizerConfig& cfg) {
    m.phase = Phase::Optimizer;
    std::vector<int> firstUseLayer(m.tensors.size(), kEmbeddingLayer);
    std::vector<bool> used(m.tensors.size(), false);
    for (const auto& o : m.ops)
        for (int in : o.inputs)
            if (!used[static_cast<std::size_t>(in)]) {
                used[static_cast<std::size_t>(in)] = true;
                firstUseLayer[static_cast<std::size_t>(in)] = o.layer;
            }
    std::vector<int> clipped = grads;
    auto gradientRole = [&](int t) {
        m.tensors[static_cast<std::size_t>(t)].role = Role::Gradient;
        return t;
    };
    if (!cfg.clipNorm.empty()) {
        // total_norm = sqrt(sum of every gradient's squares); each gradient times
        // min(1, max_norm / (total_norm + eps)).
        int total = -1;
        for (std::size_t i = 0; i < m.weights.size(); ++i) {
            int g = grads[i];
            if (g < 0) continue;
            m.layer = firstUseLayer[static_cast<std::size_t>(m.weights[i])];
            const std::string name = m.tensors[static_cast<std::size_t>(m.weights[i])].name;
            int sq = gradientRole(m.op1("mul", "clip." + name + ".square", {g, g}, json::object(), m.shape(g)));
            int s = gradientRole(m.op1("sum", "clip." + name + ".sum", {sq}, json::object(), Shape{}));
            total = total < 0 ? s : gradientRole(m.op1("add", "clip.total", {total, s}, json::object(), Shape{}));
        }
        if (total >= 0) {
            m.layer = m.headLayer;
            int norm = gradientRole(m.op1("sqrt", "clip.norm", {total}, json::object(), Shape{}));
            int coeff = gradientRole(m.op1("clip_coeff", "clip.coeff", {norm}, json{{"max_norm", cfg.clipNorm}}, Shape{}));
            for (std::size_t i = 0; i < m.weights.size(); ++i) {
                if (grads[i] < 0) continue;
                m.layer = firstUseLayer[static_cast<std::size_t>(m.weights[i])];
                const std::string name = m.tensors[static_cast<std::size_t>(m.weights[i])].name;
                clipped[i] = gradientRole(m.op1("mul", "clip." + name, {grads[i], coeff}, json::object(), m.shape(grads[i])));
            }
        }
    }
    for (std::size_t i = 0; i < m.weights.size(); ++i) {
        int w = m.weights[i], g = clipped[i];
        if (g < 0) continue;
        const auto name = m.tensors[static_cast<std::size_t>(w)].name;
        const auto shape = m.shape(w);
        m.layer = firstUseLayer[static_cast<std::size_t>(w)];
        if (cfg.kind == "sgd") {
            int out = m.op1("sgd", "optim." + name, {w, g}, json{{"lr", "1/100"}, {"weight_decay", "1/100"}}, shape);
            m.tensors[static_cast<std::size_t>(out)].role = Role::Weight;
            m.placement[static_cast<std::size_t>(out)] = m.placement[static_cast<std::size_t>(w)];
            continue;
        }
        int mState = m.input(name + ".exp_avg", shape, Role::OptimizerState);
        int vState = m.input(name + ".exp_avg_sq", shape, Role::OptimizerState);
        m.placement[static_cast<std::size_t>(mState)] = m.placement[static_cast<std::size_t>(w)];
        m.placement[static_cast<std::size_t>(vState)] = m.placement[static_cast<std::size_t>(w)];
        auto outs = m.op("adamw", "optim." + name, {w, g, mState, vState},
                         json{{"lr", "1/1000"}, {"beta1", "9/10"}, {"beta2", "999/1000"}, {"eps", "1e-8"},
                              {"weight_decay", "1/100"}, {"step", 1}},
                         {shape, shape, shape});
        m.tensors[static_cast<std::size_t>(outs[0])].role = Role::Weight;
        m.tensors[static_cast<std::size_t>(outs[1])].role = Role::OptimizerState;
        m.tensors[static_cast<std::size_t>(outs[2])].role = Role::OptimizerState;
    }
}

void removeDeadOps(LogicalModel& m, const std::vector<int>& keep) {
    std::vector<bool> live(m.tensors.size(), false);
    for (int t : keep) live[static_cast<std::size_t>(t)] = true;
    for (std::size_t i = m.ops.size(); i-- > 0;) {
        auto& o = m.ops[i];
        bool any = false;
        for (int out : o.outputs) any = any || live[static_cast<std::size_t>(out)];
        o.dead = !any;
        if (any)
            for (int in : o.inputs) live[static_cast<std::size_t>(in)] = true;
    }
}

}  // namespace tv::gen
