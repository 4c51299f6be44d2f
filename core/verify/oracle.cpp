#include "verify/oracle.hpp"

#include <cmath>
#include <random>
#include <sstream>
#include <unordered_map>

#include "ops/registry.hpp"
#include "verify/stages.hpp"
#include "verify/symmetry.hpp"

namespace tv {

std::string_view toString(OracleStatus s) {
    switch (s) {
        case OracleStatus::Agree: return "agree";
        case OracleStatus::Differ: return "differ";
        case OracleStatus::TooLarge: return "too_large";
        case OracleStatus::Unsupported: return "unsupported";
    }
    return "?";
}

bool OracleResult::reachesFinalOutput() const {
    for (const auto& m : mismatches)
        if (m.finalOutput) return true;
    return false;
}

std::string OracleResult::summary() const {
    std::ostringstream out;
    out.precision(9);
    switch (status) {
        case OracleStatus::Agree: return "every lineage claim agrees at full shapes on random inputs";
        case OracleStatus::TooLarge:
        case OracleStatus::Unsupported: return "not evaluated: " + note;
        case OracleStatus::Differ: break;
    }
    const OracleMismatch* m = &mismatches.front();
    for (const auto& x : mismatches)
        if (x.finalOutput) {
            m = &x;
            break;
        }
    out << (m->finalOutput ? "the result " : "the intermediate ") << m->logicalTensor << m->slice << " differs at " << m->element
        << ": expected " << m->expected << ", got " << m->actual << " (" << m->copy << ")";
    if (!reachesFinalOutput()) out << "; no result that leaves the step differs";
    return out.str();
}

namespace {

using Num = Value<double>;

std::string coordinates(std::int64_t flat, const Shape& shape) {
    std::vector<std::int64_t> idx(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    std::string s = "[";
    for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? "," : "") + std::to_string(idx[i]);
    return s + "]";
}

bool close(double a, double b, double tol) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    if (std::isinf(a) || std::isinf(b)) return a == b;
    return std::abs(a - b) <= tol * (1 + std::abs(a) + std::abs(b));
}

class Evaluator {
public:
    Evaluator(const Plan& plan, const OracleOptions& opts) : plan_(plan), opts_(opts) {}

    OracleResult run() {
        OracleResult res;
        for (const Graph* g : {&plan_.logical, &plan_.parallel})
            for (TensorId t = 0; t < g->tensors.size(); ++t) res.elements += static_cast<std::uint64_t>(numel(plan_.shape(*g, t)));
        if (res.elements > opts_.maxElements) {
            res.status = OracleStatus::TooLarge;
            res.note = std::to_string(res.elements) + " elements at full shapes (the oracle evaluates at most " +
                       std::to_string(opts_.maxElements) + ")";
            return res;
        }
        const auto& reg = OpRegistry::instance();
        for (const Graph* g : {&plan_.logical, &plan_.parallel})
            for (const auto& op : g->ops)
                if (!reg.spec(op.kind).evalNum) {
                    res.status = OracleStatus::Unsupported;
                    res.note = "operator " + std::string(reg.spec(op.kind).name) + " has no concrete semantics";
                    return res;
                }
        auto cut = cutStages(plan_);
        std::vector<bool> initial(plan_.lineage.size(), false);
        for (auto r : cut.initialRecords) initial[r] = true;
        indexClasses();
        std::vector<bool> reported(plan_.lineage.size(), false);
        for (int trial = 0; trial < std::max(1, opts_.trials); ++trial) {
            rng_.seed(opts_.seed * 1000003u + static_cast<std::uint64_t>(trial));
            lv_.assign(plan_.logical.tensors.size(), Num{});
            pv_.assign(plan_.parallel.tensors.size(), Num{});
            feedLogical();
            runGraph(plan_.logical, lv_);
            feedParallel(initial);
            runGraph(plan_.parallel, pv_);
            compare(initial, trial, reported, res);
        }
        res.status = res.mismatches.empty() ? OracleStatus::Agree : OracleStatus::Differ;
        return res;
    }

private:
    const Plan& plan_;
    const OracleOptions& opts_;
    std::mt19937_64 rng_;
    std::vector<Num> lv_, pv_;
    std::vector<std::int64_t> classes_;  ///< per logical tensor: index classes (0: not index data)

    double uniform() { return std::uniform_real_distribution<double>(-1.0, 1.0)(rng_); }

    Num fresh(const Graph& g, TensorId t, std::int64_t classes) {
        Num v;
        v.shape = plan_.shape(g, t);
        v.isInt = g.tensors[t].dtype == DType::Int;
        const auto n = static_cast<std::size_t>(numel(v.shape));
        v.v.reserve(n);
        for (std::size_t k = 0; k < n; ++k)
            v.v.push_back(v.isInt ? static_cast<double>(std::uniform_int_distribution<std::int64_t>(0, std::max<std::int64_t>(1, classes) - 1)(rng_))
                                  : uniform());
        return v;
    }

    /// Index data is drawn from the classes every logical lookup reading it allows.
    void indexClasses() {
        const auto& L = plan_.logical;
        const auto& reg = OpRegistry::instance();
        classes_.assign(L.tensors.size(), 0);
        for (OpId op = 0; op < L.ops.size(); ++op) {
            const auto& spec = reg.spec(L.ops[op].kind);
            if (spec.intInputs.empty()) continue;
            std::vector<Shape> ins, outs;
            for (auto t : L.inputs(op)) ins.push_back(plan_.shape(L, t));
            for (auto t : L.outputs(op)) outs.push_back(plan_.shape(L, t));
            const auto range = lookupRange(spec, ins, outs, plan_.opAttrs(L, op));
            if (range <= 0) continue;
            for (int k : spec.intInputs) {
                std::vector<TensorId> work{L.inputs(op)[static_cast<std::size_t>(k)]};
                while (!work.empty()) {
                    auto t = work.back();
                    work.pop_back();
                    auto prod = L.tensors[t].producer;
                    if (prod == kNone) {
                        classes_[t] = classes_[t] ? std::min(classes_[t], range) : range;
                        continue;
                    }
                    for (auto in : L.inputs(prod))
                        if (L.tensors[in].dtype == DType::Int) work.push_back(in);
                }
            }
        }
    }

    void feedLogical() {
        const auto& L = plan_.logical;
        for (TensorId t = 0; t < L.tensors.size(); ++t)
            if (L.tensors[t].producer == kNone) lv_[t] = fresh(L, t, classes_[t] ? classes_[t] : 8);
    }

    void feedParallel(const std::vector<bool>& initial) {
        const auto& P = plan_.parallel;
        std::vector<bool> fed(P.tensors.size(), false);
        for (std::uint32_t r = 0; r < plan_.lineage.size(); ++r) {
            if (!initial[r]) continue;
            const auto& rec = plan_.lineage[r];
            const auto& ts = lv_[rec.logical];
            for (const auto& s : rec.slices) {
                auto offs = s.box.offsetsIn(ts.shape);
                for (const auto& c : s.copies) {
                    for (std::size_t k = 0; k < c.size(); ++k) {
                        const auto pt = c[k].tensor;
                        if (fed[pt]) continue;
                        fed[pt] = true;
                        Num v;
                        v.shape = plan_.shape(P, pt);
                        v.isInt = ts.isInt;
                        if (k + 1 < c.size()) {
                            v = fresh(P, pt, 8);
                        } else {
                            for (std::size_t e = 0; e < offs.size(); ++e) {
                                double rest = ts.v[static_cast<std::size_t>(offs[e])];
                                for (std::size_t j = 0; j + 1 < c.size(); ++j)
                                    rest -= c[j].coeff.toDouble() * pv_[c[j].tensor].v[e];
                                v.v.push_back(rest / c[k].coeff.toDouble());
                            }
                        }
                        pv_[pt] = std::move(v);
                    }
                }
            }
        }
        for (TensorId t = 0; t < P.tensors.size(); ++t)
            if (P.tensors[t].producer == kNone && !fed[t]) pv_[t] = fresh(P, t, 8);
    }

    void runGraph(const Graph& g, std::vector<Num>& vals) {
        const auto& reg = OpRegistry::instance();
        for (auto op : g.topo) {
            const auto& spec = reg.spec(g.ops[op].kind);
            std::vector<const Num*> ins;
            std::vector<Shape> inShapes, outShapes;
            for (auto t : g.inputs(op)) {
                ins.push_back(&vals[t]);
                inShapes.push_back(plan_.shape(g, t));
            }
            std::vector<Num> outs;
            for (auto t : g.outputs(op)) {
                Num v;
                v.shape = plan_.shape(g, t);
                outShapes.push_back(v.shape);
                outs.push_back(std::move(v));
            }
            EvalContext ec{plan_.opAttrs(g, op), inShapes, outShapes};
            spec.evalNum(NumAlgebra{}, ins, outs, ec);
            auto ids = g.outputs(op);
            for (std::size_t k = 0; k < outs.size(); ++k) {
                outs[k].isInt = g.tensors[ids[k]].dtype == DType::Int;
                vals[ids[k]] = std::move(outs[k]);
            }
        }
    }

    void compare(const std::vector<bool>& initial, int trial, std::vector<bool>& reported, OracleResult& res) {
        const auto& L = plan_.logical;
        const auto& P = plan_.parallel;
        for (std::uint32_t r = 0; r < plan_.lineage.size(); ++r) {
            if (initial[r] || reported[r]) continue;
            const auto& rec = plan_.lineage[r];
            const auto& ts = lv_[rec.logical];
            for (const auto& s : rec.slices) {
                if (reported[r]) break;
                auto offs = s.box.offsetsIn(ts.shape);
                for (const auto& c : s.copies) {
                    if (reported[r]) break;
                    for (std::size_t e = 0; e < offs.size(); ++e) {
                        double sum = 0;
                        for (const auto& t : c) sum += t.coeff.toDouble() * pv_[t.tensor].v[e];
                        const double want = ts.v[static_cast<std::size_t>(offs[e])];
                        if (close(want, sum, opts_.tolerance)) continue;
                        OracleMismatch m;
                        m.logicalTensor = plan_.tensorName(L, rec.logical);
                        m.slice = s.box.toString();
                        for (const auto& t : c) {
                            if (!m.copy.empty()) m.copy += " + ";
                            if (!t.coeff.isOne()) m.copy += t.coeff.toString() + "*";
                            m.copy += plan_.tensorName(P, t.tensor);
                        }
                        m.element = coordinates(offs[e], ts.shape);
                        m.expected = want;
                        m.actual = sum;
                        m.rank = c.empty() ? -1 : P.tensors[c.front().tensor].rank;
                        m.finalOutput = L.consumers(rec.logical).empty();
                        m.trial = trial;
                        res.mismatches.push_back(std::move(m));
                        reported[r] = true;
                        break;
                    }
                }
            }
        }
    }
};

}  // namespace

OracleResult runOracle(const Plan& plan, const OracleOptions& opts) {
    if (!plan.replication.active()) return Evaluator(plan, opts).run();
    // Written out first; refused before that if even the stored plan times its copies is too big.
    std::uint64_t stored = 0;
    for (const Graph* g : {&plan.logical, &plan.parallel})
        for (TensorId t = 0; t < g->tensors.size(); ++t) stored += static_cast<std::uint64_t>(numel(plan.shape(*g, t)));
    const auto copies = static_cast<std::uint64_t>(plan.replication.degree) * static_cast<std::uint64_t>(std::max(1, plan.replication.microbatches)) *
                        static_cast<std::uint64_t>(std::max(1, plan.replication.members));
    if (stored > opts.maxElements || stored * copies > opts.maxElements * 4) {
        OracleResult res;
        res.status = OracleStatus::TooLarge;
        res.elements = stored * copies;
        res.note = "about " + std::to_string(stored * copies) + " elements written out (the oracle evaluates at most " +
                   std::to_string(opts.maxElements) + ")";
        return res;
    }
    const Plan written = expandReplicas(plan);
    return Evaluator(written, opts).run();
}

}  // namespace tv
