// Every operator in the registry: its symbolic semantics (Z3 terms, uninterpreted functions
// given their real meaning) agree with its concrete semantics at random points, and its backward
// rule matches central finite differences of its forward.
#include <QtTest>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "ops/algebra.hpp"
#include "ops/registry.hpp"
#include "ops/symbolic.hpp"

using namespace tv;
using json = nlohmann::json;

namespace {

struct OpCase {
    std::string op;
    std::vector<Shape> inputs;
    std::vector<Shape> outputs;
    json attrs = json::object();
    bool positive = false;  ///< inputs must be positive (log, sqrt, ...)
};

std::vector<OpCase> cases() {
    return {
        {"add", {{2, 3}, {3}}, {{2, 3}}},
        {"sub", {{2, 3}, {2, 1}}, {{2, 3}}},
        {"mul", {{2, 3}, {2, 3}}, {{2, 3}}},
        {"div", {{2, 3}, {1, 3}}, {{2, 3}}},
        {"add_scalar", {{2, 3}}, {{2, 3}}, {{"value", "3/2"}}},
        {"mul_scalar", {{2, 3}}, {{2, 3}}, {{"value", -2}}},
        {"div_sqrt", {{2, 3}}, {{2, 3}}, {{"n", 128}}},
        {"clip_coeff", {{2, 3}}, {{2, 3}}, {{"max_norm", "1/2"}}, true},
        {"pow", {{2, 3}}, {{2, 3}}, {{"exponent", 3}}},
        {"pow", {{2, 3}}, {{2, 3}}, {{"exponent", "1/2"}}, true},
        {"pow", {{2, 2}}, {{2, 2}}, {{"exponent", -2}}},
        {"neg", {{2, 3}}, {{2, 3}}},
        {"exp", {{2, 3}}, {{2, 3}}},
        {"log", {{2, 3}}, {{2, 3}}, json::object(), true},
        {"sqrt", {{2, 3}}, {{2, 3}}, json::object(), true},
        {"rsqrt", {{2, 3}}, {{2, 3}}, json::object(), true},
        {"sigmoid", {{2, 3}}, {{2, 3}}},
        {"tanh", {{2, 3}}, {{2, 3}}},
        {"erf", {{2, 3}}, {{2, 3}}},
        {"trunc", {{2, 3}}, {{2, 3}}},
        {"relu", {{2, 3}}, {{2, 3}}},
        {"silu", {{2, 3}}, {{2, 3}}},
        {"gelu", {{2, 3}}, {{2, 3}}},
        {"identity", {{2, 3}}, {{2, 3}}},
        {"relu_backward", {{2, 3}, {2, 3}}, {{2, 3}}},
        {"sigmoid_backward", {{2, 3}, {2, 3}}, {{2, 3}}},
        {"tanh_backward", {{2, 3}, {2, 3}}, {{2, 3}}},
        {"silu_backward", {{2, 3}, {2, 3}}, {{2, 3}}},
        {"gelu_backward", {{2, 3}, {2, 3}}, {{2, 3}}},
        {"erf_backward", {{2, 3}, {2, 3}}, {{2, 3}}},
        {"linear", {{2, 3}, {4, 3}}, {{2, 4}}},
        {"linear", {{2, 3}, {4, 3}, {4}}, {{2, 4}}},
        {"linear", {{2, 2, 3}, {4, 3}}, {{2, 2, 4}}},
        {"matmul", {{2, 3}, {3, 4}}, {{2, 4}}},
        {"matmul", {{3, 2}, {3, 4}}, {{2, 4}}, {{"transpose_a", true}}},
        {"matmul", {{2, 3}, {4, 3}}, {{2, 4}}, {{"transpose_b", true}}},
        {"matmul", {{3, 2}, {4, 3}}, {{2, 4}}, {{"transpose_a", true}, {"transpose_b", true}}},
        {"matmul", {{2, 2, 3}, {2, 3, 4}}, {{2, 2, 4}}},
        {"matmul", {{2, 2, 3}, {3, 4}}, {{2, 2, 4}}},
        {"sum", {{2, 3, 4}}, {{2, 4}}, {{"dims", {1}}}},
        {"sum", {{2, 3, 4}}, {{2, 1, 4}}, {{"dims", {1}}, {"keepdim", true}}},
        {"sum", {{2, 3}}, {{}}},
        {"mean", {{2, 3}}, {{2}}, {{"dims", {-1}}}},
        {"mean", {{2, 3, 2}}, {{3}}, {{"dims", {0, 2}}}},
        {"sum_backward", {{2, 4}}, {{2, 3, 4}}, {{"dims", {1}}}},
        {"mean_backward", {{2}}, {{2, 3}}, {{"dims", {-1}}}},
        {"max", {{2, 3}}, {{2}}, {{"dim", 1}}},
        {"max", {{2, 3}}, {{1, 3}}, {{"dim", 0}, {"keepdim", true}}},
        {"max_backward", {{2, 3}, {2}}, {{2, 3}}, {{"dim", 1}}},
        {"softmax", {{2, 3}}, {{2, 3}}, {{"dim", -1}}},
        {"softmax_backward", {{2, 3}, {2, 3}}, {{2, 3}}, {{"dim", -1}}},
        {"topk_mask", {{2, 4}}, {{2, 4}}, {{"k", 2}}},
        {"topk_mask", {{2, 8}}, {{2, 8}}, {{"k", 3}, {"groups", 4}, {"topk_groups", 2}}},
        {"topk_mask", {{3, 8}}, {{3, 8}}, {{"k", 2}, {"groups", 2}, {"topk_groups", 1}, {"group_score", "top2"}}},
        {"rmsnorm", {{2, 4}, {4}}, {{2, 4}}, {{"eps", "1/100000"}}},
        {"rmsnorm_backward", {{2, 4}, {4}, {2, 4}}, {{2, 4}, {4}}, {{"eps", "1/100000"}}},
        {"layernorm", {{2, 4}, {4}, {4}}, {{2, 4}}, {{"eps", "1/100000"}}},
        {"layernorm_backward", {{2, 4}, {4}, {2, 4}}, {{2, 4}, {4}, {4}}, {{"eps", "1/100000"}}},
        {"reshape", {{2, 6}}, {{3, 4}}},
        {"reshape", {{2, 6}}, {{2, 3, 2}}},
        {"view", {{2, 6}}, {{12}}},
        {"transpose", {{2, 3}}, {{3, 2}}, {{"dim0", 0}, {"dim1", 1}}},
        {"permute", {{2, 3, 4}}, {{4, 2, 3}}, {{"dims", {2, 0, 1}}}},
        {"slice", {{4, 3}}, {{2, 3}}, {{"dim", 0}, {"start", 1}, {"end", 3}}},
        {"slice_backward", {{2, 3}}, {{4, 3}}, {{"dim", 0}, {"start", 1}, {"end", 3}}},
        {"concat", {{2, 3}, {1, 3}}, {{3, 3}}, {{"dim", 0}}},
        {"split", {{3, 3}}, {{1, 3}, {2, 3}}, {{"dim", 0}, {"sizes", {1, 2}}}},
        {"chunk", {{4, 3}}, {{2, 3}}, {{"dim", 0}, {"parts", 2}, {"index", 1}}},
        {"expand", {{1, 3}}, {{2, 3}}},
        {"expand", {{3}}, {{2, 3}}},
        {"sum_to", {{2, 3}}, {{1, 3}}},
        {"zeros_like", {{2, 3}}, {{2, 3}}},
        {"embedding", {{3}, {4, 2}}, {{3, 2}}},
        {"embedding_backward", {{3}, {3, 2}}, {{4, 2}}},
        {"cross_entropy", {{3, 4}, {3}}, {{}}},
        {"cross_entropy_backward", {{3, 4}, {3}, {}}, {{3, 4}}},
        {"embedding", {{3}, {2, 2}}, {{3, 2}}, {{"parts", 2}, {"index", 1}}},
        {"embedding_backward", {{3}, {3, 2}}, {{2, 2}}, {{"parts", 2}, {"index", 0}}},
        {"target_logit", {{3, 4}, {3}}, {{3}}},
        {"target_logit", {{3, 2}, {3}}, {{3}}, {{"parts", 2}, {"index", 1}}},
        {"one_hot", {{3}}, {{3, 4}}},
        {"one_hot", {{3}}, {{3, 2}}, {{"parts", 2}, {"index", 0}}},
        {"dropout", {{2, 3}, {2, 3}}, {{2, 3}}, {{"p", "1/4"}}},
        {"sgd", {{2, 3}, {2, 3}}, {{2, 3}}, {{"lr", "1/10"}, {"weight_decay", "1/100"}}},
        {"adamw", {{2, 2}, {2, 2}, {2, 2}, {2, 2}}, {{2, 2}, {2, 2}, {2, 2}},
         {{"lr", "1/1000"}, {"beta1", "9/10"}, {"beta2", "999/1000"}, {"eps", "1e-8"}, {"weight_decay", "1/100"}, {"step", 3}},
         true},
        {"all_reduce", {{2, 2}, {2, 2}}, {{2, 2}, {2, 2}}, {{"reduce", "sum"}}},
        {"all_reduce", {{2, 2}, {2, 2}, {2, 2}}, {{2, 2}, {2, 2}, {2, 2}}, {{"reduce", "mean"}}},
        {"all_reduce", {{2, 2}, {2, 2}, {2, 2}}, {{2, 2}, {2, 2}, {2, 2}}, {{"reduce", "max"}}},
        {"all_gather", {{1, 2}, {1, 2}}, {{2, 2}, {2, 2}}, {{"dim", 0}}},
        {"reduce_scatter", {{4, 2}, {4, 2}}, {{2, 2}, {2, 2}}, {{"dim", 0}}},
        {"all_to_all", {{4, 2}, {4, 2}}, {{2, 4}, {2, 4}}, {{"split_dim", 0}, {"concat_dim", 1}}},
        {"all_to_all", {{4, 2}, {4, 2}}, {{4, 2}, {4, 2}}, {{"split_dim", 0}, {"concat_dim", 0}}},
        {"broadcast", {{2, 2}}, {{2, 2}, {2, 2}}},
        {"send_recv", {{2, 2}}, {{2, 2}}},
    };
}

std::string caseName(const OpCase& c, std::size_t i) { return c.op + "#" + std::to_string(i); }

bool isIntInput(const OpSpec& s, std::size_t i) {
    return std::find(s.intInputs.begin(), s.intInputs.end(), static_cast<int>(i)) != s.intInputs.end();
}

/// Random float inputs (away from 0, positive where the op needs it) and fixed index inputs.
std::vector<Value<double>> makeInputs(const OpSpec& spec, const OpCase& c, std::mt19937& rng) {
    std::uniform_real_distribution<double> mag(0.3, 1.7);
    std::bernoulli_distribution sign(0.5);
    std::vector<Value<double>> ins;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
        Value<double> v;
        v.shape = c.inputs[i];
        auto n = numel(v.shape);
        v.isInt = isIntInput(spec, i);
        for (std::int64_t k = 0; k < n; ++k) {
            if (v.isInt) v.v.push_back(static_cast<double>((k * 3 + 1) % 4));
            else v.v.push_back((c.positive || !sign(rng)) ? mag(rng) : -mag(rng));
        }
        ins.push_back(std::move(v));
    }
    return ins;
}

std::vector<Value<double>> runNum(const OpSpec& spec, const OpCase& c, const std::vector<Value<double>>& ins) {
    std::vector<const Value<double>*> ptrs;
    for (const auto& v : ins) ptrs.push_back(&v);
    std::vector<Value<double>> outs(c.outputs.size());
    for (std::size_t k = 0; k < outs.size(); ++k) outs[k].shape = c.outputs[k];
    EvalContext ec{c.attrs, c.inputs, c.outputs};
    NumAlgebra alg;
    spec.evalNum(alg, ptrs, outs, ec);
    return outs;
}

/// Records backward ops and evaluates them concretely as they are emitted.
class ConcreteGradBuilder : public GradBuilder {
public:
    std::vector<Value<double>> values;
    Handle add(Value<double> v) {
        values.push_back(std::move(v));
        return static_cast<Handle>(values.size() - 1);
    }
    std::vector<Handle> emitOp(std::string_view op, std::vector<Handle> inputs, json attrs, std::vector<Shape> outShapes) override {
        const auto& reg = OpRegistry::instance();
        auto kind = reg.find(op);
        if (!kind) throw std::runtime_error("backward rule emitted unknown op " + std::string(op));
        const auto& spec = reg.spec(*kind);
        std::vector<Shape> inShapes;
        std::vector<DType> types;
        for (auto h : inputs) {
            inShapes.push_back(values[h].shape);
            types.push_back(values[h].isInt ? DType::Int : DType::Float);
        }
        auto err = checkOp(spec, attrs, inShapes, outShapes, types);
        if (!err.empty()) throw std::runtime_error("backward rule emitted an ill-formed " + std::string(op) + ": " + err);
        OpCase c{std::string(op), inShapes, outShapes, attrs};
        std::vector<Value<double>> ins;
        for (auto h : inputs) ins.push_back(values[h]);
        auto outs = runNum(spec, c, ins);
        std::vector<Handle> hs;
        for (auto& o : outs) hs.push_back(add(std::move(o)));
        return hs;
    }
    Shape shapeOf(Handle h) const override { return values[h].shape; }
};

}  // namespace

class TestOperators : public QObject {
    Q_OBJECT
private slots:
    void everyOperatorHasACase() {
        std::set<std::string> covered;
        for (const auto& c : cases()) covered.insert(c.op);
        for (const auto& s : OpRegistry::instance().all())
            QVERIFY2(covered.count(std::string(s.name)), ("no test case for operator " + std::string(s.name)).c_str());
    }

    void shapesAreWellFormed_data() { addRows(); }
    void shapesAreWellFormed() {
        QFETCH(int, index);
        auto c = cases()[index];
        const auto& spec = OpRegistry::instance().spec(*OpRegistry::instance().find(c.op));
        std::vector<DType> types;
        for (std::size_t i = 0; i < c.inputs.size(); ++i) types.push_back(isIntInput(spec, i) ? DType::Int : DType::Float);
        auto err = checkOp(spec, c.attrs, c.inputs, c.outputs, types);
        QVERIFY2(err.empty(), err.c_str());
        // A wrong output shape must be rejected by the same rule.
        if (!c.outputs[0].empty()) {
            auto bad = c.outputs;
            for (auto& d : bad[0]) d += 1;
            QVERIFY2(!checkOp(spec, c.attrs, c.inputs, bad, types).empty(), "a wrong output shape was accepted");
        }
    }

    /// Every operand of every operator, given too few dims (rank 0, and one dim fewer) or one
    /// more, is answered by the shape rule: accepted or refused with a message, never a read past
    /// an operand's dims (the plan fuzzer found rmsnorm reading the last dim of a rank-0 x; under
    /// the sanitizers such a read fails this test). Ranks the rule accepts are checked again by
    /// the symbolic rule, which must accept them too.
    void wrongRanksAreAnswered_data() { addRows(); }
    void wrongRanksAreAnswered() {
        QFETCH(int, index);
        auto c = cases()[index];
        const auto& spec = OpRegistry::instance().spec(*OpRegistry::instance().find(c.op));
        std::vector<DType> types;
        for (std::size_t i = 0; i < c.inputs.size(); ++i) types.push_back(isIntInput(spec, i) ? DType::Int : DType::Float);
        int refused = 0, tried = 0;
        for (int side = 0; side < 2; ++side) {
            const auto& operands = side == 0 ? c.inputs : c.outputs;
            for (std::size_t k = 0; k < operands.size(); ++k) {
                std::vector<Shape> variants = {Shape{}};
                if (!operands[k].empty()) variants.push_back(Shape(operands[k].begin(), operands[k].end() - 1));
                auto more = operands[k];
                more.push_back(2);
                variants.push_back(more);
                for (const auto& v : variants) {
                    if (v == operands[k]) continue;
                    auto ins = c.inputs;
                    auto outs = c.outputs;
                    (side == 0 ? ins : outs)[k] = v;
                    ++tried;
                    auto err = checkOp(spec, c.attrs, ins, outs, types);
                    if (!err.empty()) {
                        ++refused;
                        continue;
                    }
                    // Accepted: the symbolic rule takes the same ranks without complaint.
                    z3::context ctx;
                    SymbolicShapes sc(ctx);
                    auto dims = [&](const std::vector<Shape>& shapes) {
                        std::vector<std::vector<SymbolicShapes::D>> all;
                        for (const auto& sh : shapes) {
                            std::vector<SymbolicShapes::D> d;
                            for (auto n : sh) d.push_back({ctx.int_val(static_cast<int64_t>(n)), n});
                            all.push_back(d);
                        }
                        return all;
                    };
                    spec.shapeSymbolic(sc, dims(ins), dims(outs), c.attrs);
                }
            }
        }
        QVERIFY(tried > 0);
        QVERIFY2(refused > 0, "no operand of a wrong rank was refused");
    }

    void symbolicMatchesConcrete_data() { addRows(); }
    void symbolicMatchesConcrete() {
        QFETCH(int, index);
        auto c = cases()[index];
        const auto& spec = OpRegistry::instance().spec(*OpRegistry::instance().find(c.op));
        std::mt19937 rng(1000 + index);
        for (int trial = 0; trial < 3; ++trial) {
            auto ins = makeInputs(spec, c, rng);
            auto expected = runNum(spec, c, ins);
            z3::context ctx;
            SymAlgebra alg(ctx);
            std::map<std::string, double> assignment;
            std::vector<Value<z3::expr>> sins;
            for (std::size_t i = 0; i < ins.size(); ++i) {
                Value<z3::expr> v;
                v.shape = ins[i].shape;
                v.isInt = ins[i].isInt;
                for (std::size_t k = 0; k < ins[i].v.size(); ++k) {
                    auto name = "in" + std::to_string(i) + "_" + std::to_string(k);
                    v.v.push_back(ctx.real_const(name.c_str()));
                    assignment[name] = ins[i].v[k];
                }
                sins.push_back(v);
            }
            std::vector<const Value<z3::expr>*> ptrs;
            for (const auto& v : sins) ptrs.push_back(&v);
            std::vector<Value<z3::expr>> outs(c.outputs.size());
            for (std::size_t k = 0; k < outs.size(); ++k) outs[k].shape = c.outputs[k];
            EvalContext ec{c.attrs, c.inputs, c.outputs};
            spec.evalSym(alg, ptrs, outs, ec);
            for (std::size_t k = 0; k < outs.size(); ++k) {
                QCOMPARE(outs[k].v.size(), expected[k].v.size());
                QCOMPARE(static_cast<std::int64_t>(outs[k].v.size()), numel(c.outputs[k]));
                for (std::size_t e = 0; e < outs[k].v.size(); ++e) {
                    double got = evaluateTerm(outs[k].v[e], [&](const std::string& n) { return assignment.at(n); });
                    double want = expected[k].v[e];
                    QVERIFY2(std::abs(got - want) <= 1e-9 * (1 + std::abs(want)),
                             (c.op + " output " + std::to_string(k) + "[" + std::to_string(e) + "]: symbolic " +
                              std::to_string(got) + " vs concrete " + std::to_string(want)).c_str());
                }
            }
        }
    }

    void backwardMatchesFiniteDifferences_data() {
        QTest::addColumn<int>("index");
        auto cs = cases();
        for (std::size_t i = 0; i < cs.size(); ++i) {
            const auto& spec = OpRegistry::instance().spec(*OpRegistry::instance().find(cs[i].op));
            if (spec.vjp) QTest::newRow(caseName(cs[i], i).c_str()) << static_cast<int>(i);
        }
    }
    void backwardMatchesFiniteDifferences() {
        QFETCH(int, index);
        auto c = cases()[index];
        const auto& spec = OpRegistry::instance().spec(*OpRegistry::instance().find(c.op));
        std::mt19937 rng(7000 + index);
        auto ins = makeInputs(spec, c, rng);
        auto outs = runNum(spec, c, ins);
        std::uniform_real_distribution<double> u(-1, 1);
        std::vector<Value<double>> dys;
        for (const auto& o : outs) {
            Value<double> dy;
            dy.shape = o.shape;
            for (std::size_t k = 0; k < o.v.size(); ++k) dy.v.push_back(u(rng));
            dys.push_back(dy);
        }
        ConcreteGradBuilder b;
        std::vector<GradBuilder::Handle> hin, hout, hdy;
        for (const auto& v : ins) hin.push_back(b.add(v));
        for (const auto& v : outs) hout.push_back(b.add(v));
        for (const auto& v : dys) hdy.push_back(b.add(v));
        VjpArgs args{hin, hout, hdy, c.attrs};
        auto grads = spec.vjp(b, args);
        QCOMPARE(grads.size(), ins.size());
        auto objective = [&](const std::vector<Value<double>>& x) {
            auto o = runNum(spec, c, x);
            double s = 0;
            for (std::size_t k = 0; k < o.size(); ++k)
                for (std::size_t e = 0; e < o[k].v.size(); ++e) s += dys[k].v[e] * o[k].v[e];
            return s;
        };
        for (std::size_t i = 0; i < ins.size(); ++i) {
            if (grads[i] < 0 && c.op == "topk_mask") {
                // A selection is piecewise constant: away from ties, nudging a score changes nothing.
                for (std::size_t e = 0; e < ins[i].v.size(); ++e) {
                    auto plus = ins, minus = ins;
                    plus[i].v[e] += 1e-6;
                    minus[i].v[e] -= 1e-6;
                    QCOMPARE(objective(plus), objective(minus));
                }
                continue;
            }
            if (grads[i] < 0) {
                QVERIFY2(ins[i].isInt || c.op == "dropout", "a float input has no gradient");
                continue;
            }
            const auto& g = b.values[grads[i]];
            QCOMPARE(g.shape, ins[i].shape);
            for (std::size_t e = 0; e < ins[i].v.size(); ++e) {
                const double h = 1e-6;
                auto plus = ins, minus = ins;
                plus[i].v[e] += h;
                minus[i].v[e] -= h;
                double fd = (objective(plus) - objective(minus)) / (2 * h);
                QVERIFY2(std::abs(fd - g.v[e]) <= 1e-5 * (1 + std::abs(fd)),
                         (c.op + " d/dinput" + std::to_string(i) + "[" + std::to_string(e) + "]: backward " +
                          std::to_string(g.v[e]) + " vs finite difference " + std::to_string(fd)).c_str());
            }
        }
    }

    void collectivesMoveTheRightData() {
        // all_to_all: member i's output is chunk i of every member's input, concatenated.
        const auto& reg = OpRegistry::instance();
        OpCase c{"all_to_all", {{4, 1}, {4, 1}}, {{2, 2}, {2, 2}}, {{"split_dim", 0}, {"concat_dim", 1}}};
        std::vector<Value<double>> ins(2);
        ins[0].shape = ins[1].shape = {4, 1};
        ins[0].v = {0, 1, 2, 3};
        ins[1].v = {10, 11, 12, 13};
        auto outs = runNum(reg.spec(*reg.find("all_to_all")), c, ins);
        QCOMPARE(outs[0].v, (std::vector<double>{0, 10, 1, 11}));
        QCOMPARE(outs[1].v, (std::vector<double>{2, 12, 3, 13}));
        OpCase rs{"reduce_scatter", {{4}, {4}}, {{2}, {2}}, {{"dim", 0}}};
        ins[0].shape = ins[1].shape = {4};
        outs = runNum(reg.spec(*reg.find("reduce_scatter")), rs, ins);
        QCOMPARE(outs[0].v, (std::vector<double>{10, 12}));
        QCOMPARE(outs[1].v, (std::vector<double>{14, 16}));
        OpCase ag{"all_gather", {{2}, {2}}, {{4}, {4}}, {{"dim", 0}}};
        ins[0].shape = ins[1].shape = {2};
        ins[0].v = {1, 2};
        ins[1].v = {3, 4};
        outs = runNum(reg.spec(*reg.find("all_gather")), ag, ins);
        QCOMPARE(outs[1].v, (std::vector<double>{1, 2, 3, 4}));
    }

    // Routing picks the k best experts, ties to the lower index; group-limited routing first
    // keeps the best groups (by their best expert, or their best two).
    void topkMaskRoutes_data() {
        QTest::addColumn<QString>("attrs");
        QTest::addColumn<QVector<double>>("scores");
        QTest::addColumn<QVector<double>>("mask");
        QTest::newRow("top 2") << R"({"k": 2})" << QVector<double>{0.1, 0.9, 0.5, 0.7} << QVector<double>{0, 1, 0, 1};
        QTest::newRow("ties to the lower index") << R"({"k": 2})" << QVector<double>{0.5, 0.5, 0.5, 0.1} << QVector<double>{1, 1, 0, 0};
        QTest::newRow("best group by its best expert") << R"({"k": 2, "groups": 2, "topk_groups": 1})"
                                                       << QVector<double>{0.9, 0.1, 0.1, 0.8, 0.7, 0.6, 0.5, 0.4}
                                                       << QVector<double>{1, 0, 0, 1, 0, 0, 0, 0};
        QTest::newRow("best group by its best two") << R"({"k": 2, "groups": 2, "topk_groups": 1, "group_score": "top2"})"
                                                    << QVector<double>{0.9, 0.1, 0.1, 0.0, 0.7, 0.6, 0.5, 0.4}
                                                    << QVector<double>{0, 0, 0, 0, 1, 1, 0, 0};
    }
    void topkMaskRoutes() {
        QFETCH(QString, attrs);
        QFETCH(QVector<double>, scores);
        QFETCH(QVector<double>, mask);
        const auto& reg = OpRegistry::instance();
        const std::int64_t n = scores.size();
        OpCase c{"topk_mask", {{1, n}}, {{1, n}}, json::parse(attrs.toStdString())};
        std::vector<Value<double>> ins(1);
        ins[0].shape = {1, n};
        ins[0].v.assign(scores.begin(), scores.end());
        const auto& spec = reg.spec(*reg.find("topk_mask"));
        QVERIFY(checkOp(spec, c.attrs, c.inputs, c.outputs, {DType::Float}).empty());
        auto outs = runNum(spec, c, ins);
        QCOMPARE(QVector<double>(outs[0].v.begin(), outs[0].v.end()), mask);
    }

    void topkMaskRejectsImpossibleRouting() {
        const auto& reg = OpRegistry::instance();
        const auto& spec = reg.spec(*reg.find("topk_mask"));
        QVERIFY(!checkOp(spec, json{{"k", 5}}, {{2, 4}}, {{2, 4}}, {DType::Float}).empty());
        QVERIFY(checkOp(spec, json{{"k", 2}, {"groups", 3}}, {{2, 4}}, {{2, 4}}, {DType::Float}).find("equal groups") != std::string::npos);
        QVERIFY(!checkOp(spec, json{{"k", 2}, {"groups", 2}, {"topk_groups", 3}}, {{2, 4}}, {{2, 4}}, {DType::Float}).empty());
        QVERIFY(checkOp(spec, json{{"k", 1}, {"groups", 2}, {"group_score", "mean"}}, {{2, 4}}, {{2, 4}}, {DType::Float}).find("group_score") != std::string::npos);
    }

    void crossEntropyIsTheRealLoss() {
        const auto& reg = OpRegistry::instance();
        OpCase c{"cross_entropy", {{2, 2}, {2}}, {{}}};
        std::vector<Value<double>> ins(2);
        ins[0].shape = {2, 2};
        ins[0].v = {0, 0, 1, 2};
        ins[1].shape = {2};
        ins[1].isInt = true;
        ins[1].v = {0, 1};
        auto outs = runNum(reg.spec(*reg.find("cross_entropy")), c, ins);
        double want = (std::log(2.0) + (std::log(std::exp(1.0) + std::exp(2.0)) - 2.0)) / 2;
        QVERIFY(std::abs(outs[0].v[0] - want) < 1e-12);
    }

    /// A vocabulary split over parts: the parts' embeddings add up to the whole embedding, their
    /// target logits to the label's logit, their one-hot rows to the whole one-hot row, and their
    /// embedding gradients side by side to the whole gradient.
    void vocabPartsAddUpToTheWhole() {
        const auto& reg = OpRegistry::instance();
        auto spec = [&](const char* op) -> const OpSpec& { return reg.spec(*reg.find(op)); };
        std::mt19937 rng(11);
        std::uniform_real_distribution<double> U(-1, 1);
        const std::int64_t V = 6, H = 2, N = 6, P = 3, n = V / P;
        Value<double> ids, w, dy;
        ids.shape = {N};
        ids.isInt = true;
        ids.v = {0, 4, 5, 7, -1, 9};  // ids out of the vocabulary (-1, 9) select nothing, in every part alike
        w.shape = {V, H};
        dy.shape = {N, H};
        for (std::int64_t k = 0; k < V * H; ++k) w.v.push_back(U(rng));
        for (std::int64_t k = 0; k < N * H; ++k) dy.v.push_back(U(rng));
        auto whole = runNum(spec("embedding"), OpCase{"embedding", {{N}, {V, H}}, {{N, H}}}, {ids, w})[0];
        auto wholeGrad = runNum(spec("embedding_backward"), OpCase{"embedding_backward", {{N}, {N, H}}, {{V, H}}}, {ids, dy})[0];
        auto wholeHot = runNum(spec("one_hot"), OpCase{"one_hot", {{N}}, {{N, V}}}, {ids})[0];
        Value<double> logits;
        logits.shape = {N, V};
        for (std::int64_t k = 0; k < N * V; ++k) logits.v.push_back(U(rng));
        auto wholePick = runNum(spec("target_logit"), OpCase{"target_logit", {{N, V}, {N}}, {{N}}}, {logits, ids})[0];
        std::vector<double> sum(static_cast<std::size_t>(N * H), 0.0), pick(static_cast<std::size_t>(N), 0.0);
        for (std::int64_t p = 0; p < P; ++p) {
            json part{{"parts", P}, {"index", p}};
            Value<double> wp, lp;
            wp.shape = {n, H};
            wp.v.assign(w.v.begin() + p * n * H, w.v.begin() + (p + 1) * n * H);
            lp.shape = {N, n};
            for (std::int64_t i = 0; i < N; ++i)
                for (std::int64_t j = 0; j < n; ++j) lp.v.push_back(logits.v[static_cast<std::size_t>(i * V + p * n + j)]);
            auto e = runNum(spec("embedding"), OpCase{"embedding", {{N}, {n, H}}, {{N, H}}, part}, {ids, wp})[0];
            for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += e.v[k];
            auto t = runNum(spec("target_logit"), OpCase{"target_logit", {{N, n}, {N}}, {{N}}, part}, {lp, ids})[0];
            for (std::size_t k = 0; k < pick.size(); ++k) pick[k] += t.v[k];
            auto g = runNum(spec("embedding_backward"), OpCase{"embedding_backward", {{N}, {N, H}}, {{n, H}}, part}, {ids, dy})[0];
            for (std::int64_t k = 0; k < n * H; ++k) QCOMPARE(g.v[static_cast<std::size_t>(k)], wholeGrad.v[static_cast<std::size_t>(p * n * H + k)]);
            auto h = runNum(spec("one_hot"), OpCase{"one_hot", {{N}}, {{N, n}}, part}, {ids})[0];
            for (std::int64_t i = 0; i < N; ++i)
                for (std::int64_t j = 0; j < n; ++j)
                    QCOMPARE(h.v[static_cast<std::size_t>(i * n + j)], wholeHot.v[static_cast<std::size_t>(i * V + p * n + j)]);
        }
        for (std::size_t k = 0; k < sum.size(); ++k) QCOMPARE(sum[k], whole.v[k]);
        for (std::size_t k = 0; k < pick.size(); ++k) QCOMPARE(pick[k], wholePick.v[k]);
        // a part index outside [0, parts) is refused
        QVERIFY(!checkOp(spec("embedding"), json{{"parts", 2}, {"index", 2}}, {{N}, {n, H}}, {{N, H}}, {DType::Int, DType::Float}).empty());
        QVERIFY(!checkOp(spec("one_hot"), json{{"parts", 2}}, {{N}}, {{N, n}}, {DType::Int}).empty());
    }

    /// Checks that belong to one operator are on its spec, not keyed on its name in checkOp: each
    /// row is an operator given what only its own check refuses, with the message it must give.
    void operatorOwnChecks_data() {
        QTest::addColumn<QString>("op");
        QTest::addColumn<QString>("attrs");
        QTest::addColumn<QList<QList<qint64>>>("inputs");
        QTest::addColumn<QList<QList<qint64>>>("outputs");
        QTest::addColumn<bool>("intInput");
        QTest::addColumn<QString>("message");  // empty: accepted
        using S = QList<QList<qint64>>;
        QTest::newRow("permute lists too few dims") << "permute" << R"({"dims": [1, 0]})" << S{{2, 3, 4}} << S{{3, 2, 4}} << false << "attribute dims must list every dim of the input once";
        QTest::newRow("permute lists every dim") << "permute" << R"({"dims": [1, 0, 2]})" << S{{2, 3, 4}} << S{{3, 2, 4}} << false << "";
        for (const char* op : {"sum", "mean"})
            QTest::newRow((std::string(op) + " over no dims").c_str()) << op << R"({"dims": []})" << S{{2, 3}} << S{{}} << false << "attribute dims is empty (omit it to reduce over every dim)";
        for (const char* op : {"sum_backward", "mean_backward"})
            QTest::newRow((std::string(op) + " over no dims").c_str()) << op << R"({"dims": []})" << S{{}} << S{{2, 3}} << false << "attribute dims is empty (omit it to reduce over every dim)";
        QTest::newRow("sum over dim 0") << "sum" << R"({"dims": [0]})" << S{{2, 3}} << S{{3}} << false << "";
        QTest::newRow("all_reduce of ids") << "all_reduce" << "{}" << S{{4}, {4}} << S{{4}, {4}} << true << "all_reduce sums its inputs; int tensors cannot be summed";
        QTest::newRow("reduce_scatter of ids") << "reduce_scatter" << R"({"dim": 0})" << S{{4}, {4}} << S{{2}, {2}} << true << "reduce_scatter sums its inputs; int tensors cannot be summed";
        QTest::newRow("all_gather of ids") << "all_gather" << R"({"dim": 0})" << S{{2}, {2}} << S{{4}, {4}} << true << "";
    }
    void operatorOwnChecks() {
        QFETCH(QString, op);
        QFETCH(QString, attrs);
        QFETCH(QList<QList<qint64>>, inputs);
        QFETCH(QList<QList<qint64>>, outputs);
        QFETCH(bool, intInput);
        QFETCH(QString, message);
        auto shapes = [](const QList<QList<qint64>>& l) {
            std::vector<Shape> v;
            for (const auto& s : l) v.emplace_back(s.begin(), s.end());
            return v;
        };
        const auto& reg = OpRegistry::instance();
        const auto kind = reg.find(op.toStdString());
        QVERIFY(kind);
        const std::vector<DType> types(static_cast<std::size_t>(inputs.size()), intInput ? DType::Int : DType::Float);
        const auto err = checkOp(reg.spec(*kind), json::parse(attrs.toStdString()), shapes(inputs), shapes(outputs), types);
        QCOMPARE(QString::fromStdString(err), message);
    }

    /// How many classes the ids of each lookup may name (what the checker constrains index data
    /// to): the whole vocabulary, a part's class count times the parts; 0 for any other operator.
    void lookupRangesCoverTheWholeVocabulary() {
        const auto& reg = OpRegistry::instance();
        auto range = [&](const char* op, std::vector<Shape> in, std::vector<Shape> out, const json& a) {
            return lookupRange(reg.spec(*reg.find(op)), in, out, a);
        };
        const json part{{"parts", 4}, {"index", 1}};
        QCOMPARE(range("embedding", {{6}, {5, 8}}, {{6, 8}}, part), std::int64_t(20));
        QCOMPARE(range("embedding", {{6}, {5, 8}}, {{6, 8}}, json::object()), std::int64_t(5));
        QCOMPARE(range("embedding_backward", {{6}, {6, 8}}, {{5, 8}}, part), std::int64_t(20));
        QCOMPARE(range("target_logit", {{6, 5}, {6}}, {{6}}, part), std::int64_t(20));
        QCOMPARE(range("one_hot", {{6}}, {{6, 5}}, part), std::int64_t(20));
        QCOMPARE(range("cross_entropy", {{6, 5}, {6}}, {{}}, json::object()), std::int64_t(5));
        QCOMPARE(range("cross_entropy_backward", {{6, 5}, {6}, {}}, {{6, 5}}, json::object()), std::int64_t(5));
        QCOMPARE(range("linear", {{6, 5}, {3, 5}}, {{6, 3}}, json::object()), std::int64_t(0));
        QCOMPARE(range("add", {{6}, {6}}, {{6}}, json::object()), std::int64_t(0));
    }

    /// The rounding bound the checker uses to confirm a counterexample with the real functions
    /// (evaluateTermWithError): it holds (the exact value is within it), it stays small where the
    /// evaluation is accurate, it keeps the size of the terms that cancel (so noise around an
    /// exact 0 is not a difference), and it is unbounded where it cannot be known.
    void roundingBoundHolds_data() {
        QTest::addColumn<int>("which");
        QTest::newRow("a sum of large terms that cancels to 0") << 0;
        QTest::newRow("softmax row sum minus 1") << 1;
        QTest::newRow("a small real difference next to a large term") << 2;
        QTest::newRow("sqrt of a value within its error of 0") << 3;
        QTest::newRow("exact rational arithmetic") << 4;
        QTest::newRow("a comparison closer than its error") << 5;
        QTest::newRow("a negative power of a value within its error of 0") << 6;
    }
    void roundingBoundHolds() {
        QFETCH(int, which);
        z3::context c;
        SymAlgebra alg(c);
        auto x = c.real_const("x"), y = c.real_const("y"), z = c.real_const("z");
        const std::map<std::string, long double> at{{"x", 0.75L}, {"y", -1.25L}, {"z", 3.5L}};
        auto big = c.real_val("100000000");
        z3::expr e = x;
        long double exact = 0, maxError = 0;  // maxError 0: unbounded expected
        switch (which) {
            case 0:  // (1e8 e^x + y) - 1e8 e^x - y = 0, computed as noise of the size of 1e8 e^x * u
                e = (big * alg.fExp(x) + y) - big * alg.fExp(x) - y;
                exact = 0;
                maxError = 1e-6L;
                break;
            case 1: {  // sum_i e^{s_i} / sum_j e^{s_j} - 1 = 0
                auto zsum = alg.fExp(x) + alg.fExp(y) + alg.fExp(z);
                auto inv = alg.fInv(zsum);
                e = alg.fExp(x) * inv + alg.fExp(y) * inv + alg.fExp(z) * inv - c.real_val(1);
                exact = 0;
                maxError = 1e-15L;
                break;
            }
            case 2:  // (1e8 + x/1e8) - 1e8 = x/1e8: a real 7.5e-9, far above the rounding of 1e8
                e = (big + x / big) - big;
                exact = 0.75e-8L;
                maxError = 1e-9L;
                break;
            case 3:  // sqrt((x + 1e8) - 1e8 - x): its argument is 0 up to noise it cannot sign
                e = alg.fSqrt((x + big) - big - x);
                break;
            case 4:  // (x + y) * z / 7 with exact inputs: exact but for the division's rounding
                e = (x + y) * z / c.real_val(7);
                exact = -0.25L;
                maxError = 1e-17L;
                break;
            case 5:  // ite(e^x*e^y >= e^(x+y), 1, 0): equal in reals, the evaluation cannot tell
                e = z3::ite(alg.fExp(x) * alg.fExp(y) >= alg.fExp(x + y), c.real_val(1), c.real_val(0));
                exact = 1;
                maxError = 2;  // up to the distance of the branches (1)
                break;
            case 6:  // ((x + 1e8) - 1e8 - x + 1e-12)^-1: a pole inside the argument's error
                e = z3::pw((x + big) - big - x + c.real_val("1/1000000000000"), c.real_val(-1));
                break;
        }
        const auto v = evaluateTermWithError(e, [&](const std::string& n) { return PreciseValue{at.at(n), 0}; });
        if (maxError == 0) {
            QVERIFY2(!std::isfinite(v.error), "the error cannot be bounded here");
            return;
        }
        QVERIFY(std::isfinite(v.value));
        QVERIFY2(std::abs(v.value - exact) <= v.error, qPrintable(QString("value %1, exact %2, bound %3")
                                                                        .arg(static_cast<double>(v.value), 0, 'g', 20)
                                                                        .arg(static_cast<double>(exact))
                                                                        .arg(static_cast<double>(v.error))));
        QVERIFY2(v.error <= maxError, qPrintable(QString("bound %1").arg(static_cast<double>(v.error))));
        // What the checker confirms: a difference beyond 16 times the bound. Noise around 0 is not
        // one; a real 7.5e-9 is.
        const bool seen = std::abs(v.value) > 16 * v.error;
        QCOMPARE(seen, which == 2 || which == 4);
    }

private:
    void addRows() {
        QTest::addColumn<int>("index");
        auto cs = cases();
        for (std::size_t i = 0; i < cs.size(); ++i) QTest::newRow(caseName(cs[i], i).c_str()) << static_cast<int>(i);
    }
};

QTEST_APPLESS_MAIN(TestOperators)
#include "tst_operators.moc"
