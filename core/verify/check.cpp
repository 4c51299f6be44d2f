#include "verify/check.hpp"

#include <cctype>
#include <limits>
#include <cfloat>
#include <new>
#include <cmath>
#include <random>
#include <chrono>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <numeric>
#include <optional>
#include <cstdio>
#include <cstdlib>

#include "ops/normal_form.hpp"
#include "ops/registry.hpp"
#include "verify/symmetry.hpp"
#include "model/instance_names.hpp"
#include "process/memory_limit.hpp"

namespace tv {

std::string_view toString(StageStatus s) {
    switch (s) {
        case StageStatus::Queued: return "queued";
        case StageStatus::Running: return "running";
        case StageStatus::Equivalent: return "equivalent";
        case StageStatus::Failed: return "failed";
        case StageStatus::Inconclusive: return "inconclusive";
        case StageStatus::Skipped: return "skipped";
    }
    return "?";
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

using SymValue = Value<z3::expr>;

/// A trace shows at most this many elements of a tensor.
constexpr std::size_t kShownElements = 256;

/// Whether one of the first `limit` elements of `v` applies an uninterpreted function (exp, log, a
/// fractional pow, the routing functions...): its value under a model is then the solver's choice,
/// consistent but not the real function's. Terms already looked at (`seen`, by Z3 id) are skipped.
bool appliesUninterpreted(const SymValue& v, std::size_t limit, std::unordered_set<unsigned>& seen) {
    std::vector<z3::expr> work;
    for (std::size_t i = 0; i < v.v.size() && i < limit; ++i) work.push_back(v.v[i]);
    while (!work.empty()) {
        const z3::expr e = work.back();
        work.pop_back();
        if (!e.is_app() || !seen.insert(e.id()).second) continue;
        const auto decl = e.decl();
        if (decl.decl_kind() == Z3_OP_UNINTERPRETED && decl.arity() > 0) return true;
        for (unsigned a = 0; a < e.num_args(); ++a) work.push_back(e.arg(a));
    }
    return false;
}

std::string indexString(const std::vector<std::int64_t>& idx) {
    std::string s = "[";
    for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? "," : "") + std::to_string(idx[i]);
    return s + "]";
}

std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
    std::vector<std::int64_t> idx(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    return idx;
}

/// Flat offsets of the elements of `box` (reduced coordinates) inside a tensor of `shape`.
std::vector<std::int64_t> boxOffsets(const Shape& shape, const Box& box) { return box.offsetsIn(shape); }

class StageChecker {
public:
    StageChecker(const Plan& plan, const Stage& stage, const CheckOptions& opts, z3::context& ctx)
        : plan_(plan), L_(plan.logical), P_(plan.parallel), stage_(stage), opts_(opts), ctx_(ctx), alg_(ctx) {}

    StageResult run() {
        result_.stage = stage_.id;
        collectTensors();
        auto t0 = Clock::now();
        if (!reduceShapes()) {
            result_.reduceSeconds = since(t0);
            return result_;
        }
        result_.reduceSeconds = since(t0);
        if (opts_.maxElements > 0 && result_.reducedElements > opts_.maxElements) {
            tooLarge();
            return result_;
        }
        auto t1 = Clock::now();
        if (!evaluate()) {
            result_.encodeSeconds = since(t1);
            return result_;
        }
        result_.encodeSeconds = since(t1);
        auto t2 = Clock::now();
        solve();
        result_.solveSeconds = since(t2);
        return result_;
    }

private:
    const Plan& plan_;
    const Graph& L_;
    const Graph& P_;
    const Stage& stage_;
    const CheckOptions& opts_;
    z3::context& ctx_;
    SymAlgebra alg_;
    StageResult result_;

    std::vector<TensorId> lTensors_, pTensors_;
    std::unordered_map<TensorId, Shape> lShape_, pShape_;
    std::unordered_map<TensorId, SymValue> lVal_, pVal_;
    std::vector<std::uint32_t> records_;  // inputs then output

    void collectTensors() {
        std::unordered_set<TensorId> ls, ps;
        auto addL = [&](TensorId t) { if (ls.insert(t).second) lTensors_.push_back(t); };
        auto addP = [&](TensorId t) { if (ps.insert(t).second) pTensors_.push_back(t); };
        records_ = stage_.inputs;
        records_.push_back(stage_.output);
        for (auto r : records_) {
            const auto& rec = plan_.lineage[r];
            addL(rec.logical);
            for (const auto& s : rec.slices)
                for (const auto& c : s.copies)
                    for (const auto& t : c) addP(t.tensor);
        }
        for (auto op : stage_.logicalOps) {
            for (auto t : L_.inputs(op)) addL(t);
            for (auto t : L_.outputs(op)) addL(t);
        }
        for (auto op : stage_.parallelOps) {
            for (auto t : P_.inputs(op)) addP(t);
            for (auto t : P_.outputs(op)) addP(t);
        }
    }

    // ----- shape reduction ------------------------------------------------------------------

    /// sum(c_i * x_i) == k with integer c_i, k: divided by gcd(c_i, k), so solve-eqs can use it.
    static z3::expr divideByGcd(const z3::expr& f) {
        if (!f.is_eq() || f.num_args() != 2 || !f.arg(1).is_numeral()) return f;
        auto lhs = f.arg(0);
        std::vector<std::pair<std::int64_t, z3::expr>> terms;
        auto addTerm = [&](const z3::expr& t) {
            if (t.is_app() && t.decl().decl_kind() == Z3_OP_MUL && t.num_args() == 2 && t.arg(0).is_numeral())
                terms.emplace_back(t.arg(0).get_numeral_int64(), t.arg(1));
            else
                terms.emplace_back(1, t);
        };
        if (lhs.is_app() && lhs.decl().decl_kind() == Z3_OP_ADD)
            for (unsigned i = 0; i < lhs.num_args(); ++i) addTerm(lhs.arg(i));
        else
            addTerm(lhs);
        std::int64_t g = f.arg(1).get_numeral_int64();
        for (auto& [c, e] : terms) g = std::gcd(g, c);
        if (g < 0) g = -g;
        if (g <= 1) return f;
        auto& ctx = f.ctx();
        z3::expr_vector sum(ctx);
        for (auto& [c, e] : terms) sum.push_back(c / g == 1 ? e : ctx.int_val(static_cast<int64_t>(c / g)) * e);
        return z3::sum(sum) == ctx.int_val(static_cast<int64_t>(f.arg(1).get_numeral_int64() / g));
    }

    bool infeasible() {
        Failure f;
        f.kind = FailureKind::ShapeReductionInfeasible;
        f.stage = stage_.id;
        f.tensor = plan_.tensorName(L_, plan_.lineage[stage_.output].logical);
        f.message = "no reduced shapes keep every partition boundary and operator constraint of this stage";
        result_.status = StageStatus::Inconclusive;
        result_.failure = f;
        return false;
    }

    /// The stage's encoding would hold more tensor elements than CheckOptions::maxElements:
    /// INCONCLUSIVE before anything is encoded, naming both counts.
    bool tooLarge() {
        Failure f;
        f.kind = FailureKind::Inconclusive;
        f.stage = stage_.id;
        f.tensor = plan_.tensorName(L_, plan_.lineage[stage_.output].logical);
        f.message = "the stage holds " + std::to_string(result_.reducedElements) + " tensor elements " +
                    (opts_.reduceShapes ? "after shape reduction" : "(shape reduction off)") + ", more than the " + std::to_string(opts_.maxElements) +
                    " one check encodes (memory); not checked";
        result_.status = StageStatus::Inconclusive;
        result_.failure = f;
        return false;
    }

    /// Elements summed without wrapping (a stage of a few tensors of 2^62 elements each).
    static void addElements(std::uint64_t& sum, const Shape& s) {
        const auto n = static_cast<std::uint64_t>(numel(s));
        sum = n > std::numeric_limits<std::uint64_t>::max() - sum ? std::numeric_limits<std::uint64_t>::max() : sum + n;
    }

    bool reduceShapes() {
        for (auto t : lTensors_) lShape_[t] = plan_.shape(L_, t);
        for (auto t : pTensors_) pShape_[t] = plan_.shape(P_, t);
        for (auto& [t, s] : lShape_) addElements(result_.fullElements, s);
        for (auto& [t, s] : pShape_) addElements(result_.fullElements, s);
        if (!opts_.reduceShapes) {
            result_.reducedElements = result_.fullElements;
            return true;
        }
        SymbolicShapes sc(ctx_);
        z3::expr_vector all(ctx_);
        std::unordered_map<TensorId, std::vector<SymbolicShapes::D>> lDims, pDims;
        auto makeDims = [&](char side, TensorId t, const Shape& s) {
            std::vector<SymbolicShapes::D> dims;
            for (std::size_t d = 0; d < s.size(); ++d) {
                auto v = ctx_.int_const((std::string(1, side) + std::to_string(t) + "_" + std::to_string(d)).c_str());
                // Every dim keeps size >= 2 (or its full size, if smaller): at size 1 an index has
                // one value, so reading the wrong one (a transpose, a swapped operand of a square
                // matmul, a row of another shard) cannot be told from reading the right one.
                sc.constraints.push_back(v >= ctx_.int_val(static_cast<int64_t>(std::min<std::int64_t>(2, s[d]))) &&
                                         v <= ctx_.int_val(static_cast<int64_t>(s[d])));
                all.push_back(v);
                dims.push_back({v, s[d]});
            }
            return dims;
        };
        for (auto t : lTensors_) lDims.emplace(t, makeDims('L', t, lShape_[t]));
        for (auto t : pTensors_) pDims.emplace(t, makeDims('P', t, pShape_[t]));
        const auto& reg = OpRegistry::instance();
        auto opRule = [&](const Graph& g, OpId op, auto& dims) {
            std::vector<std::vector<SymbolicShapes::D>> ins, outs;
            for (auto t : g.inputs(op)) ins.push_back(dims.at(t));
            for (auto t : g.outputs(op)) outs.push_back(dims.at(t));
            reg.spec(g.ops[op].kind).shapeSymbolic(sc, ins, outs, plan_.opAttrs(g, op));
        };
        for (auto op : stage_.logicalOps) opRule(L_, op, lDims);
        for (auto op : stage_.parallelOps) opRule(P_, op, pDims);
        // Every partition boundary survives: each shard keeps its ratio to the logical tensor.
        for (auto r : records_) {
            const auto& rec = plan_.lineage[r];
            const auto& full = lShape_[rec.logical];
            const auto& ld = lDims.at(rec.logical);
            for (const auto& s : rec.slices)
                for (const auto& c : s.copies)
                    for (const auto& t : c) {
                        const auto& pd = pDims.at(t.tensor);
                        for (std::size_t d = 0; d < full.size(); ++d) {
                            sc.ratio(pd[d], ld[d], s.box.hi[d] - s.box.lo[d], full[d], "lineage");
                            sc.divides(ld[d], s.box.lo[d], full[d]);
                        }
                    }
        }
        if (all.empty()) return true;
        // Most dims are tied by equalities (elementwise ops, shards of a fixed ratio) or pinned to
        // constants: solve those away first (Z3's solve-eqs), so the optimizer only sees the few
        // free unknowns; the goal's model converter gives back the eliminated ones.
        z3::goal goal(ctx_);
        for (unsigned i = 0; i < sc.constraints.size(); ++i) goal.add(sc.constraints[i]);
        // Two rounds of: normal form (arith_lhs) -> linear equalities divided by their gcd (so
        // that 2a == 2b, left by an earlier substitution, becomes a == b) -> solve-eqs.
        z3::params lhs(ctx_);
        lhs.set("arith_lhs", true);
        auto round = z3::with(z3::tactic(ctx_, "simplify"), lhs) & z3::tactic(ctx_, "propagate-values") & z3::tactic(ctx_, "solve-eqs");
        auto pieces1 = round(goal);
        if (pieces1.size() != 1 || pieces1[0].is_decided_unsat()) return infeasible();
        z3::goal divided(ctx_);
        for (unsigned i = 0; i < pieces1[0].size(); ++i) divided.add(divideByGcd(pieces1[0][i]));
        auto pieces = (round & z3::tactic(ctx_, "simplify"))(divided);
        const z3::goal simplified = pieces[0];
        z3::expr_vector free(ctx_);
        {
            std::unordered_set<unsigned> seen;
            std::vector<z3::expr> work;
            for (unsigned i = 0; i < simplified.size(); ++i) work.push_back(simplified[i]);
            while (!work.empty()) {
                auto e = work.back();
                work.pop_back();
                if (!seen.insert(e.id()).second) continue;
                if (e.is_const() && !e.is_numeral() && e.is_int()) free.push_back(e);
                if (e.is_app())
                    for (unsigned k = 0; k < e.num_args(); ++k) work.push_back(e.arg(k));
            }
        }
        z3::optimize opt(ctx_);
        z3::params p(ctx_);
        if (opts_.timeoutMs) p.set("timeout", opts_.timeoutMs);
        opt.set(p);
        for (unsigned i = 0; i < simplified.size(); ++i) opt.add(simplified[i]);
        if (!free.empty()) opt.minimize(z3::sum(free));
        auto res = opt.check();
        if (res == z3::unsat) return infeasible();
        if (res == z3::unknown) {
            result_.note = "shape reduction gave up (" + std::string(Z3_optimize_get_reason_unknown(ctx_, opt)) + "); checking at full shapes";
            result_.reducedElements = result_.fullElements;
            return true;
        }
        auto m = pieces1[0].convert_model(simplified.convert_model(opt.get_model()));
        // The model converters of the preprocessing can hand back a model that breaks the original
        // constraints (a dim of 0 through a divisibility constraint): every reduced shape is checked
        // against every original constraint, and if any fails the reduction is solved again on the
        // original constraints alone, or the stage is checked at full shapes.
        auto satisfies = [&](const z3::model& model) {
            for (unsigned i = 0; i < sc.constraints.size(); ++i)
                if (!model.eval(sc.constraints[i], true).is_true()) return false;
            return true;
        };
        if (!satisfies(m)) {
            z3::optimize direct(ctx_);
            direct.set(p);
            for (unsigned i = 0; i < sc.constraints.size(); ++i) direct.add(sc.constraints[i]);
            direct.minimize(z3::sum(all));
            auto again = direct.check();
            if (again == z3::unsat) return infeasible();
            if (again != z3::sat || !satisfies(direct.get_model())) {
                result_.note = "shape reduction gave no valid shapes; checking at full shapes";
                result_.reducedElements = result_.fullElements;
                return true;
            }
            m = direct.get_model();
        }
        auto readBack = [&](auto& dims, auto& shapes) {
            for (auto& [t, ds] : dims) {
                Shape s;
                for (auto& d : ds) s.push_back(m.eval(d.e, true).get_numeral_int64());
                shapes[t] = s;
            }
        };
        readBack(lDims, lShape_);
        readBack(pDims, pShape_);
        for (auto& [t, s] : lShape_) addElements(result_.reducedElements, s);
        for (auto& [t, s] : pShape_) addElements(result_.reducedElements, s);
        return true;
    }

    /// A lineage box scaled from the logical tensor's full shape to its reduced shape.
    Box reducedBox(const Box& b, TensorId logical) const {
        const auto& full = plan_.shape(L_, logical);
        const auto& red = lShape_.at(logical);
        Box r;
        for (std::size_t d = 0; d < full.size(); ++d) {
            r.lo.push_back(b.lo[d] * red[d] / full[d]);
            r.hi.push_back(b.hi[d] * red[d] / full[d]);
        }
        return r;
    }

    // ----- symbolic evaluation --------------------------------------------------------------

    SymValue freshTensor(const std::string& prefix, const Shape& shape, DType dtype) {
        SymValue v;
        v.shape = shape;
        auto n = numel(shape);
        // Index tensors (token ids, labels) are unknowns like any other: a proof covers every
        // value of the index data (lookups compare them with class numbers; registry.cpp).
        v.isInt = dtype == DType::Int;
        if (v.isInt) {
            v.v.reserve(static_cast<std::size_t>(n));
            for (std::int64_t k = 0; k < n; ++k) {
                v.v.push_back(ctx_.real_const((prefix + indexString(unravel(k, shape))).c_str()));
                idVars_.emplace(v.v.back().id(), IdVar{v.v.back(), 0, {}});
            }
            return v;
        }
        v.v.reserve(static_cast<std::size_t>(n));
        for (std::int64_t k = 0; k < n; ++k)
            v.v.push_back(ctx_.real_const((prefix + indexString(unravel(k, shape))).c_str()));
        return v;
    }

    bool evaluate() {
        // Inputs: logical tensors of the assumed records are free; parallel tensors are defined
        // from them through the lineage, so every assumption holds by construction.
        // An input record's logical tensor that a logical op of the stage computes (from the other
        // inputs) is computed first; the others are free.
        std::unordered_set<TensorId> computedHere;
        for (auto op : stage_.logicalOps)
            for (auto t : L_.outputs(op)) computedHere.insert(t);
        for (auto r : stage_.inputs) {
            auto lt = plan_.lineage[r].logical;
            if (!lVal_.count(lt) && !computedHere.count(lt))
                lVal_.emplace(lt, freshTensor(plan_.tensorName(L_, lt), lShape_[lt], L_.tensors[lt].dtype));
        }
        assignIndexDomains();
        if (!runOps(L_, stage_.logicalOps, lShape_, lVal_)) return false;
        for (auto r : stage_.inputs) {
            const auto& rec = plan_.lineage[r];
            const auto& ts = lVal_.at(rec.logical);
            for (const auto& s : rec.slices) {
                auto offs = boxOffsets(ts.shape, reducedBox(s.box, rec.logical));
                for (const auto& c : s.copies) {
                    std::vector<SymValue> parts;
                    for (std::size_t k = 0; k < c.size(); ++k) {
                        auto pt = c[k].tensor;
                        if (pVal_.count(pt)) continue;
                        SymValue v;
                        if (k + 1 < c.size()) {
                            v = freshTensor(plan_.tensorName(P_, pt), pShape_[pt], P_.tensors[pt].dtype);
                        } else {
                            v.shape = pShape_[pt];
                            v.isInt = ts.isInt;
                            for (std::size_t e = 0; e < offs.size(); ++e) {
                                std::vector<z3::expr> others;
                                for (std::size_t j = 0; j + 1 < c.size(); ++j)
                                    others.push_back(alg_.mul(alg_.num(c[j].coeff), pVal_.at(c[j].tensor).v[e]));
                                auto rest = others.empty() ? ts.v[offs[e]] : alg_.sub(ts.v[offs[e]], alg_.sum(others));
                                v.v.push_back(alg_.div(rest, alg_.num(c[k].coeff)));
                            }
                        }
                        pVal_.emplace(pt, std::move(v));
                    }
                }
            }
        }
        return runOps(P_, stage_.parallelOps, pShape_, pVal_);
    }

    bool runOps(const Graph& g, const std::vector<OpId>& ops, std::unordered_map<TensorId, Shape>& shapes,
                std::unordered_map<TensorId, SymValue>& vals) {
        const auto& reg = OpRegistry::instance();
        for (auto op : ops) {
            const auto& spec = reg.spec(g.ops[op].kind);
            std::vector<const SymValue*> ins;
            std::vector<Shape> origIn, origOut;
            for (auto t : g.inputs(op)) {
                auto it = vals.find(t);
                if (it == vals.end()) {
                    fail(FailureKind::DataflowBroken, "op \"" + plan_.opName(g, op) + "\" reads \"" + plan_.tensorName(g, t) +
                                                          "\", which this stage neither assumes nor computes");
                    return false;
                }
                ins.push_back(&it->second);
                origIn.push_back(plan_.shape(g, t));
            }
            std::vector<SymValue> outs;
            for (auto t : g.outputs(op)) {
                SymValue v;
                v.shape = shapes.at(t);
                outs.push_back(std::move(v));
                origOut.push_back(plan_.shape(g, t));
            }
            if (!spec.evalSym) {
                fail(FailureKind::UnsupportedOperator, "operator " + std::string(spec.name) + " has no symbolic semantics");
                return false;
            }
            EvalContext ec{plan_.opAttrs(g, op), origIn, origOut};
            spec.evalSym(alg_, ins, outs, ec);
            auto outIds = g.outputs(op);
            for (std::size_t k = 0; k < outs.size(); ++k) {
                outs[k].isInt = g.tensors[outIds[k]].dtype == DType::Int;
                vals.insert_or_assign(outIds[k], std::move(outs[k]));
            }
        }
        return true;
    }

    void fail(FailureKind kind, const std::string& msg) {
        Failure f;
        f.kind = kind;
        f.stage = stage_.id;
        f.tensor = plan_.tensorName(L_, plan_.lineage[stage_.output].logical);
        f.message = msg;
        result_.status = isInconclusive(kind) ? StageStatus::Inconclusive : StageStatus::Failed;
        result_.failure = f;
    }

    // ----- the tiered query -----------------------------------------------------------------

    struct Eq {
        z3::expr lhs, rhs;
    };

    // ----- index data ---------------------------------------------------------------------------

    /// An unknown standing for one element of index data (a token id, a label). When the logical
    /// lookups of the stage read it, valid data names one of their `classes` classes (counted at
    /// the reduced shapes, where the lookups compare ids with exactly those class numbers), and
    /// [id == c] is encoded as a 0/1 unknown b[c] (c >= 1; [id == 0] = 1 - sum b): the lookups
    /// become polynomial, so simplification proves what holds for every id alike, and the
    /// premises (each b is 0 or 1, at most one is 1) make the solver's query exact.
    struct IdVar {
        z3::expr var;
        std::int64_t classes = 0;
        std::vector<z3::expr> b;  ///< b[c - 1] stands for [id == c]
    };
    std::unordered_map<unsigned, IdVar> idVars_;     // by the id unknown's AST id
    std::unordered_map<unsigned, IdVar*> idOfHit_;   // by an indicator's AST id

    /// The classes of every logical lookup of the stage that reads a logical index tensor given to
    /// it (directly, or moved by movement ops), before anything is evaluated.
    void assignIndexDomains() {
        if (idVars_.empty()) return;
        const auto& reg = OpRegistry::instance();
        std::unordered_set<OpId> inStage(stage_.logicalOps.begin(), stage_.logicalOps.end());
        for (auto& [lt, val] : lVal_) {
            if (!val.isInt) continue;
            std::int64_t classes = 0;
            std::vector<TensorId> work{lt};
            std::unordered_set<TensorId> seen{lt};
            while (!work.empty()) {
                auto t = work.back();
                work.pop_back();
                for (auto op : L_.consumers(t)) {
                    if (!inStage.count(op)) continue;
                    const auto& spec = reg.spec(L_.ops[op].kind);
                    std::vector<Shape> ins, outs;
                    for (auto x : L_.inputs(op)) ins.push_back(lShape_.at(x));
                    for (auto x : L_.outputs(op)) outs.push_back(lShape_.at(x));
                    if (auto r = lookupRange(spec, ins, outs, plan_.opAttrs(L_, op)); r > 0) {
                        classes = classes ? std::min(classes, r) : r;
                        continue;
                    }
                    for (auto x : L_.outputs(op))
                        if (L_.tensors[x].dtype == DType::Int && seen.insert(x).second) work.push_back(x);
                }
            }
            if (classes <= 0) continue;
            for (const auto& e : val.v) {
                auto it = idVars_.find(e.id());
                if (it == idVars_.end() || it->second.classes) continue;
                auto& iv = it->second;
                iv.classes = classes;
                for (std::int64_t c = 1; c < classes; ++c) {
                    iv.b.push_back(ctx_.real_const((e.to_string() + "==" + std::to_string(c)).c_str()));
                    idOfHit_.emplace(iv.b.back().id(), &iv);
                }
            }
        }
        alg_.indicator = [this](const z3::expr& id, std::int64_t c) -> std::optional<z3::expr> {
            auto it = idVars_.find(id.id());
            if (it == idVars_.end() || it->second.classes <= 0) return std::nullopt;
            const auto& iv = it->second;
            if (c < 0 || c >= iv.classes) return ctx_.real_val(0);  // no valid id names it
            if (c >= 1) return iv.b[static_cast<std::size_t>(c - 1)];
            std::vector<z3::expr> rest(iv.b.begin(), iv.b.end());
            return rest.empty() ? ctx_.real_val(1) : alg_.sub(alg_.one(), alg_.sum(rest));
        };
    }

    /// The index unknowns (with a domain) a term reads through their indicators.
    std::vector<const IdVar*> idVarsIn(std::initializer_list<const z3::expr*> roots) const {
        std::vector<const IdVar*> found;
        if (idOfHit_.empty()) return found;
        std::unordered_set<unsigned> seen;
        std::unordered_set<const IdVar*> have;
        std::vector<z3::expr> work;
        for (const auto* r : roots) work.push_back(*r);
        while (!work.empty()) {
            auto e = work.back();
            work.pop_back();
            if (!seen.insert(e.id()).second) continue;
            if (e.is_const()) {
                if (auto it = idOfHit_.find(e.id()); it != idOfHit_.end() && have.insert(it->second).second) found.push_back(it->second);
                continue;
            }
            if (e.is_app())
                for (unsigned k = 0; k < e.num_args(); ++k) work.push_back(e.arg(k));
        }
        return found;
    }

    /// Tier 1c: an equation reading index data holds for every valid value of it when it holds in
    /// every case, each id set to one of its classes. Exact (the domain is finite); only when the
    /// cases are few, otherwise the solver decides under the premises.
    template <class Closes>
    int closesForEveryId(const z3::expr& lhs, const z3::expr& rhs, Closes&& closes) const {
        auto vars = idVarsIn({&lhs, &rhs});
        if (vars.empty()) return 0;
        std::uint64_t cases = 1;
        for (const auto* v : vars) {
            cases *= static_cast<std::uint64_t>(v->classes);
            if (cases > 256) return 0;
        }
        std::vector<std::int64_t> value(vars.size(), 0);
        int how = 1;
        for (std::uint64_t k = 0; k < cases; ++k) {
            z3::expr_vector from(ctx_), to(ctx_);
            for (std::size_t i = 0; i < vars.size(); ++i)
                for (std::size_t c = 0; c < vars[i]->b.size(); ++c) {
                    from.push_back(vars[i]->b[c]);
                    to.push_back(ctx_.real_val(static_cast<std::int64_t>(c + 1) == value[i] ? 1 : 0));
                }
            auto l = z3::expr(lhs).substitute(from, to), r = z3::expr(rhs).substitute(from, to);
            int h = closes(l, r);
            if (!h) return 0;
            how = std::max(how, h);
            for (std::size_t i = 0; i < vars.size(); ++i) {
                if (++value[i] < vars[i]->classes) break;
                value[i] = 0;
            }
        }
        return how;
    }

    /// Tier 1d: an equation that is a sum of independent parts (the loss: a sum over tokens, each
    /// term reading that token's logits and label only) is too big for the exp/log normal form
    /// and has too many index cases for tier 1c taken whole. Both sides are written as sums of
    /// summands (taken apart structurally: sums, differences, constant factors) and the summands
    /// are grouped by the unknowns they read: two that read a common unknown (an input element,
    /// an index indicator) are in one group; summands reading none (constants) form one more. The
    /// difference of the sides is the sum over groups of (lhs part - rhs part), so if every
    /// group's parts are equal for every value of their unknowns (every valid value of the index
    /// data: tiers 1, 1b and 1c) the sides are equal for every value. Sufficient, not necessary:
    /// a group that does not close proves nothing and leaves the equation to the solver.
    /// True if the two terms together have at least `limit` distinct subterms.
    static bool termSizeAtLeast(const z3::expr& a, const z3::expr& b, std::size_t limit) {
        std::unordered_set<unsigned> seen;
        std::vector<z3::expr> work{a, b};
        while (!work.empty()) {
            auto e = work.back();
            work.pop_back();
            if (!seen.insert(e.id()).second) continue;
            if (seen.size() >= limit) return true;
            if (e.is_app())
                for (unsigned k = 0; k < e.num_args(); ++k) work.push_back(e.arg(k));
        }
        return false;
    }

    /// A term built of numerals only (a coefficient such as 1/N, written as a division).
    static bool isConstantTerm(const z3::expr& e, int depth = 0) {
        if (e.is_numeral()) return true;
        if (depth > 4 || !e.is_app()) return false;
        switch (e.decl().decl_kind()) {
            case Z3_OP_ADD: case Z3_OP_SUB: case Z3_OP_MUL: case Z3_OP_DIV: case Z3_OP_UMINUS:
                for (unsigned k = 0; k < e.num_args(); ++k)
                    if (!isConstantTerm(e.arg(k), depth + 1)) return false;
                return true;
            default:
                return false;
        }
    }

    /// The summands of a term, taken apart structurally (sums, differences, negations, constant
    /// factors; nothing is expanded or simplified), each with its coefficient multiplied in:
    /// their sum is the term.
    std::vector<z3::expr> summands(const z3::expr& root) const {
        std::vector<z3::expr> out;
        std::vector<std::pair<z3::expr, z3::expr>> work{{root, ctx_.real_val(1)}};
        while (!work.empty()) {
            auto [e, k] = work.back();
            work.pop_back();
            if (e.is_app()) {
                auto kind = e.decl().decl_kind();
                if (kind == Z3_OP_ADD) {
                    for (unsigned a = 0; a < e.num_args(); ++a) work.emplace_back(e.arg(a), k);
                    continue;
                }
                if (kind == Z3_OP_SUB && e.num_args() >= 1) {
                    work.emplace_back(e.arg(0), k);
                    for (unsigned a = 1; a < e.num_args(); ++a) work.emplace_back(e.arg(a), -k);
                    continue;
                }
                if (kind == Z3_OP_UMINUS && e.num_args() == 1) {
                    work.emplace_back(e.arg(0), -k);
                    continue;
                }
                if (kind == Z3_OP_MUL) {
                    std::optional<z3::expr> var;
                    z3::expr factor = k;
                    bool single = true;
                    for (unsigned a = 0; a < e.num_args() && single; ++a) {
                        if (isConstantTerm(e.arg(a))) factor = factor * e.arg(a);
                        else if (var) single = false;
                        else var = e.arg(a);
                    }
                    if (single && var) {
                        work.emplace_back(*var, factor);
                        continue;
                    }
                }
            }
            std::int64_t one = 0;
            out.push_back(k.is_numeral_i64(one) && one == 1 ? e : k * e);
        }
        return out;
    }

    template <class Closes>
    int closesBySeparateParts(const z3::expr& lhs, const z3::expr& rhs, Closes&& closes) const {
        auto l = summands(lhs), r = summands(rhs);
        if (l.size() + r.size() < 3) return 0;
        // Union-find over the unknowns (uninterpreted constants, by AST id); each monomial joins
        // the unknowns it reads. Subterms shared between monomials are walked once per monomial
        // but their unknowns once per walk.
        std::unordered_map<unsigned, unsigned> parent;
        bool opaque = false;  // a quantifier or bound variable: its unknowns are not walked, so no split
        auto find = [&](unsigned v) {
            while (parent.at(v) != v) v = parent[v] = parent.at(parent.at(v));
            return v;
        };
        auto unknownOf = [&](const z3::expr& m) -> std::optional<unsigned> {
            std::optional<unsigned> first;
            std::unordered_set<unsigned> seen;
            std::vector<z3::expr> work{m};
            while (!work.empty()) {
                auto e = work.back();
                work.pop_back();
                if (!seen.insert(e.id()).second) continue;
                if (!e.is_app()) {
                    opaque = true;
                    continue;
                }
                if (e.is_const()) {
                    if (e.decl().decl_kind() != Z3_OP_UNINTERPRETED) continue;
                    unsigned v = e.id();
                    parent.emplace(v, v);
                    if (!first) first = v;
                    else if (auto a = find(*first), b = find(v); a != b) parent[a] = b;
                    continue;
                }
                for (unsigned k = 0; k < e.num_args(); ++k) work.push_back(e.arg(k));
            }
            return first;
        };
        std::vector<std::optional<unsigned>> readsL, readsR;
        for (const auto& m : l) readsL.push_back(unknownOf(m));
        for (const auto& m : r) readsR.push_back(unknownOf(m));
        if (opaque) return 0;
        // Group 0: monomials reading no unknown; the others by their unknowns' root.
        std::unordered_map<unsigned, std::size_t> groupOf;
        std::vector<std::pair<std::vector<z3::expr>, std::vector<z3::expr>>> groups(1);
        auto place = [&](const std::vector<z3::expr>& ms, const std::vector<std::optional<unsigned>>& rd, bool left) {
            for (std::size_t k = 0; k < ms.size(); ++k) {
                std::size_t g = 0;
                if (rd[k]) {
                    auto [it, fresh] = groupOf.emplace(find(*rd[k]), groups.size());
                    if (fresh) groups.emplace_back();
                    g = it->second;
                }
                (left ? groups[g].first : groups[g].second).push_back(ms[k]);
            }
        };
        place(l, readsL, true);
        place(r, readsR, false);
        if (groups.size() <= 2) return 0;  // one part: the tiers before saw it whole
        int how = 1;
        for (const auto& [gl, gr] : groups) {
            auto a = alg_.sum(gl), b = alg_.sum(gr);
            int h = closes(a, b);
            if (!h) h = closesForEveryId(a, b, closes);
            if (!h) return 0;
            how = std::max(how, h);
        }
        return how;
    }

    /// Each index unknown the equations read names exactly one of its classes, and the id's own
    /// unknown is that class's number (so a counterexample shows the ids).
    z3::expr idPremises(const std::vector<Eq>& eqs) const {
        z3::expr_vector premises(ctx_);
        std::unordered_set<const IdVar*> done;
        for (const auto& q : eqs)
            for (const auto* v : idVarsIn({&q.lhs, &q.rhs})) {
                if (!done.insert(v).second) continue;
                z3::expr_vector sum(ctx_), weighted(ctx_);
                for (std::size_t c = 0; c < v->b.size(); ++c) {
                    premises.push_back(v->b[c] == 0 || v->b[c] == 1);
                    sum.push_back(v->b[c]);
                    weighted.push_back(v->b[c] * ctx_.real_val(static_cast<std::int64_t>(c + 1)));
                }
                if (!sum.empty()) {
                    premises.push_back(z3::sum(sum) <= 1);
                    premises.push_back(v->var == z3::sum(weighted));
                }
            }
        return premises.empty() ? ctx_.bool_val(true) : z3::mk_and(premises);
    }

    void solve() {
        const auto& rec = plan_.lineage[stage_.output];
        const auto& ts = lVal_.at(rec.logical);
        z3::params simp(ctx_);
        simp.set("som", true);
        simp.set("arith_lhs", true);
        // Created on first need: only stages whose terms apply exp, log or a reciprocal and that
        // simplification alone does not close use the exp/log normal form.
        std::optional<ExpLogNormalizer> normal;
        for (const auto& s : rec.slices) {
            auto offs = boxOffsets(ts.shape, reducedBox(s.box, rec.logical));
            std::vector<Eq> open;
            bool usedNormalForm = false;
            auto simplifies = [&](const z3::expr& lhs, const z3::expr& rhs) -> int {
                // Terms are hash-consed: the same term on both sides is the same AST, proven
                // without walking it (a routing mask's term has tens of thousands of nodes).
                if (z3::eq(lhs, rhs)) return 1;
                // Tier 1: simplification to a sum-of-monomials normal form decides most stages.
                auto diff = (lhs - rhs).simplify(simp);
                if (diff.is_numeral()) {
                    std::int64_t z = 1;
                    if (diff.is_numeral_i64(z) && z == 0) return 1;
                }
                return 0;
            };
            auto normalForm = [&](const z3::expr& lhs, const z3::expr& rhs) -> int {
                // Tier 1b: the exp/log identities (a parallel softmax that takes the maximum out
                // and puts it back): both sides in the exp/log normal form.
                if (!normal) normal.emplace(alg_);
                if (normal->mentionsExpLog(lhs) || normal->mentionsExpLog(rhs))
                    if (auto same = normal->provesEqual(lhs, rhs); same && *same) return 2;
                return 0;
            };
            // Tiers 1 and 1b on one equation: 0 open, 1 closed by simplification, 2 by the normal form.
            auto closes = [&](const z3::expr& lhs, const z3::expr& rhs) -> int {
                if (int how = simplifies(lhs, rhs)) return how;
                return normalForm(lhs, rhs);
            };
            for (const auto& c : s.copies) {
                for (std::size_t e = 0; e < offs.size(); ++e) {
                    std::vector<z3::expr> terms;
                    for (const auto& t : c) terms.push_back(alg_.mul(alg_.num(t.coeff), pVal_.at(t.tensor).v[e]));
                    auto rhs = alg_.sum(terms);
                    const auto& lhs = ts.v[offs[e]];
                    // Tier 1d before the normal form of the whole, and for a large term before
                    // simplifying the whole: a sum of independent parts (the loss over every token
                    // of every replica and microbatch) is proven part by part, each small, where
                    // the whole would exceed the normal form's bound (and take seconds to simplify).
                    // (A large linear equation, a gradient summed over a thousand replicas and
                    // microbatches, simplifies whole in one pass: it goes first.)
                    if (!normal) normal.emplace(alg_);
                    bool large = termSizeAtLeast(lhs, rhs, 2000) && (normal->mentionsExpLog(lhs) || normal->mentionsExpLog(rhs));
                    if (!large && simplifies(lhs, rhs)) continue;
                    int parts = 0;
                    try {
                        parts = closesBySeparateParts(lhs, rhs, closes);
                    } catch (const z3::exception&) {
                        parts = 0;  // a term the split cannot rebuild (mixed sorts): the whole goes on
                    }
                    if (parts) {
                        usedNormalForm = usedNormalForm || parts == 2;
                        continue;
                    }
                    if (large && simplifies(lhs, rhs)) continue;
                    if (int how = normalForm(lhs, rhs)) {
                        usedNormalForm = usedNormalForm || how == 2;
                        continue;
                    }
                    // Tier 1c: index data. Every valid value of the ids the equation reads, one case
                    // at a time (each a few classes at reduced shapes), closed by tiers 1 and 1b.
                    if (int how = closesForEveryId(lhs, rhs, closes)) {
                        usedNormalForm = usedNormalForm || how == 2;
                        continue;
                    }
                    if (normal && (normal->mentionsExpLog(lhs) || normal->mentionsExpLog(rhs)))
                        if (auto same = normal->provesEqual(lhs, rhs); same && !*same) {
                            auto a = normal->normalize(lhs), b = normal->normalize(rhs);
                            if (a && b) {
                                open.push_back({*a, *b});
                                continue;
                            }
                        }
                    open.push_back({lhs, rhs});
                }
            }
            if (open.empty()) {
                ++(usedNormalForm ? result_.tiers.expLog : result_.tiers.simplify);
                continue;
            }
            z3::expr_vector eqs(ctx_);
            for (const auto& q : open) eqs.push_back(q.lhs == q.rhs);
            // The index data the equations read takes valid values only (a class of every logical
            // lookup reading it): the premise of every query.
            auto goalExpr = idPremises(open) && !z3::mk_and(eqs);
            // Tier 2: solve-eqs and simplification on the negated goal.
            try {
                z3::goal g(ctx_);
                g.add(goalExpr);
                z3::tactic t = z3::tactic(ctx_, "simplify") & z3::tactic(ctx_, "solve-eqs") & z3::tactic(ctx_, "simplify");
                auto ar = t(g);
                bool allUnsat = ar.size() > 0;
                for (unsigned i = 0; i < ar.size(); ++i) allUnsat = allUnsat && ar[i].is_decided_unsat();
                if (allUnsat) {
                    ++result_.tiers.solveEqs;
                    continue;
                }
            } catch (const z3::exception&) {
                // fall through to the solver
            }
            // Tier 3: a solver per output-slice group.
            z3::solver solver(ctx_);
            z3::params sp(ctx_);
            if (opts_.timeoutMs) sp.set("timeout", opts_.timeoutMs);
            solver.set(sp);
            solver.add(goalExpr);
            auto res = solver.check();
            if (res == z3::unsat) {
                ++result_.tiers.solver;
                continue;
            }
            // A model may give the uninterpreted functions values no real function takes (sqrt
            // negative, inv(y) * y != 1). Confirmed with the real functions, it is a counterexample;
            // otherwise the query is refined with facts of the real functions on the terms it reads
            // (and their domains: the step has a value only where sqrt and log have theirs and no
            // division is by zero), and asked again; a model still not confirmed is inconclusive.
            bool refined = false;
            while (res == z3::sat && !confirmed(solver.get_model()) && !refined) {
                refined = true;
                solver.add(realFunctionFacts(open));
                res = solver.check();
            }
            // Still not confirmed: the model's inputs may simply not witness a real difference (a
            // routing that happens to choose alike). Random inputs, evaluated with the real
            // functions, are tried; a witness found is given to the solver as the inputs.
            // The witness only fixes the inputs: the query under it being unsat proves nothing,
            // so it never counts as a proof (the stage stays unconfirmed: inconclusive below).
            if (res == z3::sat && !confirmed(solver.get_model()))
                if (auto witness = findWitness(open)) {
                    solver.push();
                    solver.add(*witness);
                    if (solver.check() != z3::sat) {
                        solver.pop();
                        fail(FailureKind::Inconclusive, "the solver's counterexample for slice " + s.box.toString() +
                                                            " is not confirmed by the real functions, and inputs that are could not be given to it");
                        result_.failure->slice = s.box.toString();
                        return;
                    }
                }
            if (res == z3::unsat) {
                ++result_.tiers.solver;
                continue;
            }
            if (res == z3::unknown) {
                fail(FailureKind::Inconclusive, "the solver could not decide the lineage of slice " + s.box.toString() + " (" +
                                                    solver.reason_unknown() + ")");
                result_.failure->slice = s.box.toString();
                return;
            }
            if (!confirmed(solver.get_model())) {
                fail(FailureKind::Inconclusive, "the solver's counterexample for slice " + s.box.toString() +
                                                    " needs values that no real function takes (an uninterpreted sqrt, exp or division), "
                                                    "and the real functions do not confirm it");
                result_.failure->slice = s.box.toString();
                return;
            }
            locate(solver.get_model());
            return;
        }
        result_.status = StageStatus::Equivalent;
    }

    // ----- the real functions -----------------------------------------------------------------

    /// Whether a term applies an uninterpreted function (its value under a model is then the
    /// model's guess, not the real function's).
    bool mentionsFunction(const z3::expr& root) const {
        std::unordered_set<unsigned> seen;
        std::vector<z3::expr> work{root};
        while (!work.empty()) {
            auto e = work.back();
            work.pop_back();
            if (!seen.insert(e.id()).second || !e.is_app()) continue;
            if (e.num_args() > 0 && e.decl().decl_kind() == Z3_OP_UNINTERPRETED) return true;
            for (unsigned k = 0; k < e.num_args(); ++k) work.push_back(e.arg(k));
        }
        return false;
    }

    /// A term's value with the model's inputs and the real functions (NaN where undefined), with
    /// a bound on the rounding of its evaluation.
    PreciseValue realValue(const z3::model& m, const z3::expr& e) const {
        try {
            return evaluateTermWithError(e, [&](const std::string& name) {
                auto v = m.eval(ctx_.real_const(name.c_str()), true);
                if (!v.is_numeral()) return PreciseValue{0, 0};
                std::int64_t whole = 0;
                if (v.is_numeral_i64(whole)) return PreciseValue{static_cast<long double>(whole), 0};
                // A rational read through 24 decimals (truncated: '?') and then rounded.
                std::string text = v.get_decimal_string(24);
                const bool truncated = !text.empty() && text.back() == '?';
                if (truncated) text.pop_back();
                const long double x = std::stold(text);
                return PreciseValue{x, LDBL_EPSILON * std::abs(x) + (truncated ? 1e-24L : 0)};
            });
        } catch (const std::exception&) {
            return {std::nanl(""), HUGE_VALL};
        }
    }

    /// Whether two values of the real functions differ beyond the rounding of their evaluation.
    /// The bound is the running error of each side (algebra.hpp: a sum that cancels keeps the
    /// error of the terms that cancelled), with a factor 16 for what first order leaves out. A
    /// relative tolerance alone is wrong both ways: near 0 (a gradient that is exactly 0, computed
    /// as the difference of two large sums) any noise exceeds it, and a real difference far below
    /// it (an epsilon changed from 1e-8 to 2e-8 in a large term) is lost.
    static bool beyondRounding(const PreciseValue& a, const PreciseValue& b) {
        if (!std::isfinite(a.error) || !std::isfinite(b.error)) return false;
        return std::abs(a.value - b.value) > 16 * (a.error + b.error);
    }

    /// Random inputs (multiples of 1/64 in [-2, 2]; ids a class of their domain) under which some
    /// equation really differs with the real functions, as constraints fixing every input; none
    /// if 64 draws find none.
    std::optional<z3::expr> findWitness(const std::vector<Eq>& eqs) const {
        std::vector<z3::expr> inputs;
        {
            std::unordered_set<unsigned> seen;
            std::vector<z3::expr> work;
            for (const auto& q : eqs) {
                work.push_back(q.lhs);
                work.push_back(q.rhs);
            }
            while (!work.empty()) {
                auto e = work.back();
                work.pop_back();
                if (!seen.insert(e.id()).second || !e.is_app()) continue;
                if (e.num_args() == 0 && e.decl().decl_kind() == Z3_OP_UNINTERPRETED && e.decl().name().str() != "%pi") {
                    inputs.push_back(e);
                    continue;
                }
                for (unsigned k = 0; k < e.num_args(); ++k) work.push_back(e.arg(k));
            }
        }
        std::mt19937_64 rng(0x5eed + stage_.id);
        std::uniform_int_distribution<int> sixtyFourths(-128, 128);
        for (int trial = 0; trial < 64; ++trial) {
            std::unordered_map<std::string, std::int64_t> num;  // value * 64
            for (const auto& in : inputs) {
                auto name = in.decl().name().str();
                if (idOfHit_.count(in.id())) continue;  // set from its id below
                if (auto it = idVars_.find(in.id()); it != idVars_.end() && it->second.classes > 0) {
                    num[name] = 64 * std::uniform_int_distribution<std::int64_t>(0, it->second.classes - 1)(rng);
                    continue;
                }
                num[name] = sixtyFourths(rng);
            }
            for (const auto& [vid, iv] : idVars_) {
                (void)vid;
                if (iv.classes <= 0) continue;
                auto name = iv.var.decl().name().str();
                if (!num.count(name)) num[name] = 64 * std::uniform_int_distribution<std::int64_t>(0, iv.classes - 1)(rng);
                for (std::size_t c = 0; c < iv.b.size(); ++c)
                    num[iv.b[c].decl().name().str()] = num[name] == 64 * static_cast<std::int64_t>(c + 1) ? 64 : 0;
            }
            auto at = [&](const std::string& name) {  // multiples of 1/64: exact
                auto it = num.find(name);
                return PreciseValue{it == num.end() ? 0.0L : static_cast<long double>(it->second) / 64.0L, 0};
            };
            bool differs = false;
            for (const auto& q : eqs) {
                PreciseValue a, b;
                try {
                    a = evaluateTermWithError(q.lhs, at);
                    b = evaluateTermWithError(q.rhs, at);
                } catch (const std::exception&) {
                    continue;
                }
                if (std::isfinite(a.value) && std::isfinite(a.error) && (!std::isfinite(b.value) || beyondRounding(a, b))) {
                    differs = true;
                    break;
                }
            }
            if (!differs) continue;
            z3::expr_vector fix(ctx_);
            for (const auto& [name, v] : num)
                fix.push_back(ctx_.real_const(name.c_str()) == ctx_.real_val((std::to_string(v) + "/64").c_str()));
            return z3::mk_and(fix);
        }
        return std::nullopt;
    }

    /// Whether lhs != rhs under the model with the real functions: exactly (in the model) when
    /// neither side applies an uninterpreted function, else as numbers, beyond rounding.
    bool reallyDiffers(const z3::model& m, const z3::expr& lhs, const z3::expr& rhs) const {
        if (!mentionsFunction(lhs) && !mentionsFunction(rhs)) return m.eval(lhs == rhs, true).is_false();
        const auto a = realValue(m, lhs), b = realValue(m, rhs);
        // Where the logical step has no value (sqrt of a negative, a division by zero) there is
        // nothing to disagree with; where it has one and the parallel plan does not, they differ.
        if (!std::isfinite(a.value)) return false;
        if (!std::isfinite(b.value)) return true;
        return beyondRounding(a, b);
    }

    /// Whether some copy of the stage's output really differs from its logical slice under the
    /// model (the real functions agree with the solver's counterexample).
    bool confirmed(const z3::model& m) const {
        const auto& rec = plan_.lineage[stage_.output];
        const auto& ts = lVal_.at(rec.logical);
        for (const auto& s : rec.slices) {
            auto offs = boxOffsets(ts.shape, reducedBox(s.box, rec.logical));
            for (const auto& c : s.copies)
                for (std::size_t e = 0; e < offs.size(); ++e) {
                    std::vector<z3::expr> terms;
                    for (const auto& t : c) terms.push_back(alg_.mul(alg_.num(t.coeff), pVal_.at(t.tensor).v[e]));
                    if (reallyDiffers(m, ts.v[offs[e]], alg_.sum(terms))) return true;
                }
        }
        return false;
    }

    /// Facts of the real functions on every application the equations read: sqrt(t) >= 0 and
    /// sqrt(t)^2 = t where t >= 0; y * inv(y) = 1 where y != 0; exp(t) > 0; exp(log(t)) = t where
    /// t > 0; 0 < sigmoid(t) < 1; -1 < tanh(t) < 1. The logical step's own domain (its sqrt and
    /// log arguments, its divisors) becomes a premise: where it has no value there is nothing to
    /// prove. The parallel plan's never does: where it has no value and the logical step has one,
    /// that is a difference.
    z3::expr realFunctionFacts(const std::vector<Eq>& eqs) const {
        z3::expr_vector facts(ctx_);
        std::unordered_set<unsigned> seen;
        std::vector<std::pair<z3::expr, bool>> work;  // (term, read by the logical side)
        for (const auto& q : eqs) work.emplace_back(q.lhs, true);
        for (const auto& q : eqs) work.emplace_back(q.rhs, false);
        auto zero = ctx_.real_val(0), one = ctx_.real_val(1);
        while (!work.empty()) {
            auto [e, logical] = work.back();
            work.pop_back();
            if (!seen.insert(e.id()).second || !e.is_app()) continue;
            for (unsigned k = 0; k < e.num_args(); ++k) work.emplace_back(e.arg(k), logical);
            if (e.num_args() != 1 || e.decl().decl_kind() != Z3_OP_UNINTERPRETED) continue;
            const auto f = e.decl();
            const auto t = e.arg(0);
            if (z3::eq(f, alg_.fSqrt)) {
                if (logical) facts.push_back(t >= zero);
                facts.push_back(e >= zero);
                facts.push_back(z3::implies(t >= zero, e * e == t));
            } else if (z3::eq(f, alg_.fInv)) {
                if (logical) facts.push_back(t != zero);
                facts.push_back(z3::implies(t != zero, t * e == one));
            } else if (z3::eq(f, alg_.fExp)) {
                facts.push_back(e > zero);
            } else if (z3::eq(f, alg_.fLog)) {
                if (logical) facts.push_back(t > zero);
                facts.push_back(z3::implies(t > zero, alg_.fExp(e) == t));
            } else if (z3::eq(f, alg_.fSigmoid)) {
                facts.push_back(e > zero && e < one);
            } else if (z3::eq(f, alg_.fTanh)) {
                facts.push_back(e > -one && e < one);
            }
        }
        return facts.empty() ? ctx_.bool_val(true) : z3::mk_and(facts);
    }

    // ----- counterexample replay ------------------------------------------------------------

    /// A value as shown: exact from the model, or, for a term applying an uninterpreted function,
    /// the real function's value on the model's inputs (what the step would compute).
    std::string value(const z3::model& m, const z3::expr& e) const {
        if (mentionsFunction(e)) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%.9Lg", realValue(m, e).value);
            return buf;
        }
        auto v = m.eval(e, true);
        if (v.is_numeral()) return Z3_get_numeral_string(ctx_, v);
        return v.to_string();
    }

    TensorValues valuesOf(const z3::model& m, const Graph& g, TensorId t, const SymValue& v, const std::vector<std::int64_t>* offs = nullptr) const {
        TensorValues tv;
        tv.name = plan_.tensorName(g, t);
        tv.fullShape = plan_.shape(g, t);
        tv.shape = v.shape;
        tv.rank = g.tensors[t].rank;
        tv.microbatch = g.tensors[t].microbatch;
        auto n = offs ? offs->size() : v.v.size();
        for (std::size_t i = 0; i < n && i < kShownElements; ++i) {
            auto k = offs ? static_cast<std::size_t>((*offs)[i]) : i;
            tv.values.push_back(value(m, v.v[k]));
        }
        return tv;
    }

    /// If an op on the way to the broken copy reads a tensor of another microbatch than its own,
    /// the counterexample is a lane misalignment: name that op and the foreign tensor.
    void explainLaneMisalignment(OpId last, Failure& f) const {
        if (last == kNone) return;
        std::unordered_set<OpId> inStage(stage_.parallelOps.begin(), stage_.parallelOps.end());
        std::vector<OpId> work{last};
        std::unordered_set<OpId> seen{last};
        OpId found = kNone;
        TensorId foreign = kNone;
        while (!work.empty()) {
            auto op = work.back();
            work.pop_back();
            // Misaligned: the op belongs to microbatch m, reads microbatch-tagged tensors, and none
            // of them is of microbatch m (an accumulation reading m-1 and m is aligned).
            auto mb = P_.ops[op].microbatch;
            TensorId other = kNone;
            bool readsOwn = false;
            for (auto in : P_.inputs(op)) {
                auto tmb = P_.tensors[in].microbatch;
                if (tmb == mb) readsOwn = true;
                else if (tmb >= 0 && other == kNone) other = in;
                auto prod = P_.tensors[in].producer;
                if (prod != kNone && inStage.count(prod) && seen.insert(prod).second) work.push_back(prod);
            }
            if (mb >= 0 && other != kNone && !readsOwn && (found == kNone || P_.topoIndex[op] < P_.topoIndex[found])) {
                found = op;
                foreign = other;
            }
        }
        if (found == kNone) return;
        f.kind = FailureKind::LaneMisalignment;
        f.parallelOp = plan_.opName(P_, found);
        const auto& o = P_.ops[found];
        f.rank = P_.homeRank(found);
        f.coordinates = plan_.coordinatesJson(f.rank);
        f.microbatch = o.microbatch;
        f.otherEnd = "tensor \"" + plan_.tensorName(P_, foreign) + "\" of microbatch " + std::to_string(P_.tensors[foreign].microbatch);
        f.otherEndTensor = plan_.tensorName(P_, foreign);
    }

    void locate(const z3::model& m) {
        const auto& rec = plan_.lineage[stage_.output];
        const auto& ts = lVal_.at(rec.logical);
        struct Candidate {
            std::uint32_t order = kNone;
            OpId op = kNone;
            TensorId tensor = kNone;
            const LineageSlice* slice = nullptr;
            const std::vector<LineageTerm>* copy = nullptr;
            std::size_t element = 0;
            std::vector<std::int64_t> offs;
        };
        Candidate best;
        for (const auto& s : rec.slices) {
            auto offs = boxOffsets(ts.shape, reducedBox(s.box, rec.logical));
            for (const auto& c : s.copies) {
                std::size_t bad = offs.size();
                for (std::size_t e = 0; e < offs.size() && bad == offs.size(); ++e) {
                    std::vector<z3::expr> terms;
                    for (const auto& t : c) terms.push_back(alg_.mul(alg_.num(t.coeff), pVal_.at(t.tensor).v[e]));
                    if (reallyDiffers(m, ts.v[offs[e]], alg_.sum(terms))) bad = e;
                }
                if (bad == offs.size()) continue;
                // The op that completes this copy: the last producer of its terms in graph order.
                Candidate cand;
                for (const auto& t : c) {
                    auto op = P_.tensors[t.tensor].producer;
                    auto order = op == kNone ? 0u : P_.topoIndex[op];
                    if (cand.op == kNone || (op != kNone && order >= cand.order)) {
                        cand.op = op;
                        cand.order = order;
                        cand.tensor = t.tensor;
                    }
                }
                cand.slice = &s;
                cand.copy = &c;
                cand.element = bad;
                cand.offs = offs;
                if (best.copy == nullptr || cand.order < best.order) best = std::move(cand);
            }
        }
        Failure f;
        f.kind = FailureKind::Counterexample;
        f.stage = stage_.id;
        f.tensor = plan_.tensorName(L_, rec.logical);
        if (auto lop = L_.tensors[rec.logical].producer; lop != kNone && !stage_.glue()) f.logicalOp = plan_.opName(L_, lop);
        if (best.copy == nullptr) {
            f.message = "the solver found a counterexample, but replay did not reproduce it";
            result_.status = StageStatus::Failed;
            result_.failure = f;
            return;
        }
        f.parallelTensor = plan_.tensorName(P_, best.tensor);
        f.rank = P_.tensors[best.tensor].rank;
        f.coordinates = plan_.coordinatesJson(f.rank);
        f.microbatch = P_.tensors[best.tensor].microbatch;
        if (best.op != kNone) {
            f.parallelOp = plan_.opName(P_, best.op);
            if (P_.ops[best.op].microbatch >= 0) f.microbatch = P_.ops[best.op].microbatch;
        }
        f.slice = best.slice->box.toString();
        // The op completing the copy is where the difference shows; an op on the way that is not
        // the operator its logical namesake is (another constant, another kind) is where the plan
        // is wrong: a partial sum's terms are completed last by whichever rank comes last.
        std::string disagreement;
        if (auto bad = disagreeingAncestor(*best.copy, disagreement); bad != kNone && bad != best.op) {
            best.op = bad;
            f.parallelOp = plan_.opName(P_, bad);
            f.rank = P_.homeRank(bad);
            f.coordinates = plan_.coordinatesJson(f.rank);
            f.microbatch = P_.ops[bad].microbatch;
            if (P_.ops[bad].numOutputs) f.parallelTensor = plan_.tensorName(P_, P_.outputs(bad)[0]);
        }
        explainLaneMisalignment(best.op, f);
        auto logicalIdx = unravel(best.offs[best.element], ts.shape);
        f.element = indexString(logicalIdx);
        f.expected = value(m, ts.v[best.offs[best.element]]);
        {
            std::vector<z3::expr> terms;
            for (const auto& t : *best.copy) terms.push_back(alg_.mul(alg_.num(t.coeff), pVal_.at(t.tensor).v[best.element]));
            f.actual = value(m, alg_.sum(terms));
        }
        std::string copyText;
        for (const auto& t : *best.copy) {
            if (!copyText.empty()) copyText += " + ";
            if (!t.coeff.isOne()) copyText += t.coeff.toString() + "*";
            copyText += plan_.tensorName(P_, t.tensor);
        }
        f.message = (f.parallelOp.empty() ? std::string("the parallel plan") : "parallel op \"" + f.parallelOp + "\"") +
                    (f.rank >= 0 ? " on rank " + std::to_string(f.rank) : std::string()) + (disagreement.empty() ? std::string() : " (" + disagreement + ")") +
                    " makes " + copyText + " differ from " + f.tensor + best.slice->box.toString();
        if (f.kind == FailureKind::LaneMisalignment)
            f.message = "parallel op \"" + f.parallelOp + "\" of microbatch " + std::to_string(f.microbatch) + " reads " + f.otherEnd +
                        ", so " + copyText + " differs from " + f.tensor + best.slice->box.toString();
        for (auto r : stage_.inputs) {
            auto lt = plan_.lineage[r].logical;
            bool dup = false;
            for (const auto& e : f.example) dup = dup || e.name == plan_.tensorName(L_, lt);
            if (!dup) f.example.push_back(valuesOf(m, L_, lt, lVal_.at(lt)));
        }
        f.logical.push_back(valuesOf(m, L_, rec.logical, ts, &best.offs));
        f.logical.back().shape = reducedBox(best.slice->box, rec.logical).extent();
        f.logical.back().fullShape = best.slice->box.extent();
        for (const auto& t : *best.copy) f.parallel.push_back(valuesOf(m, P_, t.tensor, pVal_.at(t.tensor)));
        if (opts_.keepTrace) {
            // The trace is an aid: if building it fails (interrupted, out of memory), the
            // counterexample stands without it.
            try {
                f.trace = buildTrace(m, best.op, f);
            } catch (const std::exception&) {
                f.trace.reset();
            }
        }
        result_.status = StageStatus::Failed;
        result_.failure = f;
    }

    /// Among the stage's parallel ops that the copy's terms come from: the first (in graph order)
    /// that computes another operator than the logical op of its name (another kind, or other
    /// attributes), for the ops whose attributes sharding leaves alone (element-wise, compute,
    /// reductions, norms, losses, optimizers; not data movement, collectives or vocabulary
    /// parts). kNone if there is none. Only where the diagnosis points, never the verdict.
    OpId disagreeingAncestor(const std::vector<LineageTerm>& copy, std::string& why) const {
        const auto& reg = OpRegistry::instance();
        std::unordered_set<OpId> inStage(stage_.parallelOps.begin(), stage_.parallelOps.end());
        std::unordered_set<OpId> seen;
        std::vector<OpId> work;
        for (const auto& t : copy)
            if (auto op = P_.tensors[t.tensor].producer; op != kNone && inStage.count(op) && seen.insert(op).second) work.push_back(op);
        OpId found = kNone;
        while (!work.empty()) {
            auto op = work.back();
            work.pop_back();
            for (auto in : P_.inputs(op))
                if (auto prod = P_.tensors[in].producer; prod != kNone && inStage.count(prod) && seen.insert(prod).second) work.push_back(prod);
            const auto& spec = reg.spec(P_.ops[op].kind);
            if (spec.collective || spec.cls == OpClass::Movement || spec.cls == OpClass::Collective) continue;
            const auto& attrs = plan_.opAttrs(P_, op);
            if (attrs.contains("parts") || attrs.contains("index")) continue;
            auto name = plan_.names.find(instance::logicalName(plan_.opName(P_, op)));
            if (name == kNone) continue;
            auto lop = L_.findOp(name);
            if (lop == kNone) continue;
            const bool sameKind = L_.ops[lop].kind == P_.ops[op].kind;
            const auto& la = plan_.opAttrs(L_, lop);
            if (sameKind && la == attrs) continue;
            if (found != kNone && P_.topoIndex[found] < P_.topoIndex[op]) continue;
            found = op;
            why = sameKind ? std::string(spec.name) + " " + attrs.dump() + " where the logical op " + plan_.opName(L_, lop) + " has " + la.dump()
                           : std::string(spec.name) + " where the logical op " + plan_.opName(L_, lop) + " is " + std::string(reg.spec(L_.ops[lop].kind).name);
        }
        return found;
    }

    /// Every op of the stage on both sides, in topological order, with the model's values of its
    /// inputs and outputs; the lineage copies of the stage's output record, each at the op that
    /// completes it, with whether it holds; and the divergence (the op `locate` named).
    std::shared_ptr<const StageTrace> buildTrace(const z3::model& m, OpId failingOp, const Failure& f) const {
        auto trace = std::make_shared<StageTrace>();
        const auto& reg = OpRegistry::instance();
        std::unordered_set<unsigned> seenTerms;
        auto stepOf = [&](const Graph& g, OpId op, bool parallel, const std::unordered_map<TensorId, SymValue>& vals) {
            TraceStep s;
            s.parallel = parallel;
            s.op = plan_.opName(g, op);
            s.kind = std::string(reg.spec(g.ops[op].kind).name);
            if (parallel) {
                s.rank = g.homeRank(op);
                s.microbatch = g.ops[op].microbatch;
            }
            for (auto t : g.inputs(op))
                if (auto it = vals.find(t); it != vals.end()) s.inputs.push_back(valuesOf(m, g, t, it->second));
            for (auto t : g.outputs(op))
                if (auto it = vals.find(t); it != vals.end()) {
                    s.outputs.push_back(valuesOf(m, g, t, it->second));
                    // The trace says so when a value it shows is an uninterpreted function's (the
                    // terms decide, not the operator: a pow is exact for an integer exponent).
                    if (!trace->uninterpreted) trace->uninterpreted = appliesUninterpreted(it->second, kShownElements, seenTerms);
                }
            return s;
        };
        for (auto op : stage_.logicalOps) trace->logical.push_back(stepOf(L_, op, false, lVal_));
        std::unordered_map<OpId, int> parallelStep;
        for (auto op : stage_.parallelOps) {
            parallelStep[op] = static_cast<int>(trace->parallel.size());
            trace->parallel.push_back(stepOf(P_, op, true, pVal_));
        }
        // Lock-step: a parallel op sits beside the logical op of its name; failing that, the k-th
        // op of its kind on its rank beside the k-th logical op of that kind; a communication op
        // beside what its rank computed last.
        std::unordered_map<std::string, int> logicalByName;
        std::unordered_map<std::string, std::vector<int>> logicalByKind;
        for (std::size_t i = 0; i < trace->logical.size(); ++i) {
            logicalByName.emplace(trace->logical[i].op, static_cast<int>(i));
            logicalByKind[trace->logical[i].kind].push_back(static_cast<int>(i));
        }
        std::map<std::pair<std::int32_t, std::string>, std::size_t> seenKind;
        std::unordered_map<std::int32_t, int> lastOnRank;
        for (std::size_t i = 0; i < trace->parallel.size(); ++i) {
            auto& s = trace->parallel[i];
            if (auto it = logicalByName.find(instance::logicalName(s.op)); it != logicalByName.end()) {
                s.logical = it->second;
            } else if (auto k = logicalByKind.find(s.kind); k != logicalByKind.end()) {
                auto n = seenKind[{s.rank, s.kind}]++;
                if (n < k->second.size()) s.logical = k->second[n];
            }
            if (s.logical < 0)
                if (auto it = lastOnRank.find(s.rank); it != lastOnRank.end()) s.logical = it->second;
            // A collective moving what another rank computed: beside what its input's producer is.
            if (s.logical < 0)
                for (auto in : P_.inputs(stage_.parallelOps[i]))
                    if (auto prod = P_.tensors[in].producer; prod != kNone)
                        if (auto it = parallelStep.find(prod); it != parallelStep.end() && trace->parallel[it->second].logical >= 0)
                            s.logical = trace->parallel[it->second].logical;
            if (s.logical >= 0) lastOnRank[s.rank] = s.logical;
        }
        // The claims: inputs assumed, the output's copies checked where they are complete.
        auto copyText = [&](const std::vector<LineageTerm>& c) {
            std::string text;
            for (const auto& t : c) {
                if (!text.empty()) text += " + ";
                if (!t.coeff.isOne()) text += t.coeff.toString() + "*";
                text += plan_.tensorName(P_, t.tensor);
            }
            return text;
        };
        for (auto r : stage_.inputs) {
            const auto& rec = plan_.lineage[r];
            for (const auto& s : rec.slices)
                for (const auto& c : s.copies)
                    trace->assumptions.push_back(plan_.tensorName(L_, rec.logical) + s.box.toString() + " == " + copyText(c));
        }
        const auto& rec = plan_.lineage[stage_.output];
        const auto& ts = lVal_.at(rec.logical);
        for (const auto& s : rec.slices) {
            auto offs = boxOffsets(ts.shape, reducedBox(s.box, rec.logical));
            for (const auto& c : s.copies) {
                LineageCheck check;
                check.relation = plan_.tensorName(L_, rec.logical) + s.box.toString() + " == " + copyText(c);
                for (std::size_t e = 0; e < offs.size() && check.holds; ++e) {
                    std::string actual;
                    bool ok = true;
                    {
                        std::vector<z3::expr> terms;
                        for (const auto& t : c) terms.push_back(alg_.mul(alg_.num(t.coeff), pVal_.at(t.tensor).v[e]));
                        auto sum = alg_.sum(terms);
                        ok = !reallyDiffers(m, ts.v[offs[e]], sum);
                        if (!ok) actual = value(m, sum);
                    }
                    if (ok) continue;
                    check.holds = false;
                    check.element = indexString(unravel(offs[e], ts.shape));
                    check.expected = value(m, ts.v[offs[e]]);
                    check.actual = actual;
                }
                // At the op completing the copy: its terms' last producer inside the stage.
                int at = -1;
                for (const auto& t : c)
                    if (auto op = P_.tensors[t.tensor].producer; op != kNone)
                        if (auto it = parallelStep.find(op); it != parallelStep.end()) at = std::max(at, it->second);
                if (at < 0 && !trace->parallel.empty()) at = static_cast<int>(trace->parallel.size()) - 1;
                if (at >= 0) trace->parallel[at].checks.push_back(std::move(check));
            }
        }
        if (auto it = parallelStep.find(failingOp); failingOp != kNone && it != parallelStep.end()) trace->divergence = it->second;
        if (trace->divergence < 0)
            for (std::size_t i = 0; i < trace->parallel.size() && trace->divergence < 0; ++i)
                for (const auto& c : trace->parallel[i].checks)
                    if (!c.holds) trace->divergence = static_cast<int>(i);
        if (f.kind == FailureKind::LaneMisalignment)
            for (std::size_t i = 0; i < trace->parallel.size(); ++i)
                if (trace->parallel[i].op == f.parallelOp) trace->misaligned = static_cast<int>(i);
        return trace;
    }
};

}  // namespace

nlohmann::json stageResultToJson(const StageResult& r) {
    nlohmann::json j = {{"stage", r.stage},
                        {"status", toString(r.status)},
                        {"tiers", {r.tiers.simplify, r.tiers.expLog, r.tiers.solveEqs, r.tiers.solver}},
                        {"seconds", {r.reduceSeconds, r.encodeSeconds, r.solveSeconds}},
                        {"elements", {r.reducedElements, r.fullElements}},
                        {"note", r.note},
                        {"same_as", r.sameAs},
                        {"cached", r.cached}};
    if (r.failure) j["failure"] = r.failure->toJson();
    return j;
}

StageResult stageResultFromJson(const nlohmann::json& j) {
    StageResult r;
    r.stage = j.at("stage").get<std::uint32_t>();
    const auto status = j.at("status").get<std::string>();
    bool known = false;
    for (auto s : {StageStatus::Queued, StageStatus::Running, StageStatus::Equivalent, StageStatus::Failed, StageStatus::Inconclusive,
                   StageStatus::Skipped})
        if (toString(s) == status) {
            r.status = s;
            known = true;
        }
    if (!known) throw std::invalid_argument("unknown stage status \"" + status + "\"");
    const auto& t = j.at("tiers");
    r.tiers = {t.at(0).get<std::uint32_t>(), t.at(1).get<std::uint32_t>(), t.at(2).get<std::uint32_t>(), t.at(3).get<std::uint32_t>()};
    const auto& sec = j.at("seconds");
    r.reduceSeconds = sec.at(0).get<double>();
    r.encodeSeconds = sec.at(1).get<double>();
    r.solveSeconds = sec.at(2).get<double>();
    r.reducedElements = j.at("elements").at(0).get<std::uint64_t>();
    r.fullElements = j.at("elements").at(1).get<std::uint64_t>();
    r.note = j.at("note").get<std::string>();
    r.sameAs = j.at("same_as").get<std::uint32_t>();
    r.cached = j.at("cached").get<bool>();
    if (auto it = j.find("failure"); it != j.end()) r.failure = Failure::fromJson(*it);
    return r;
}

namespace {
StageResult inconclusiveResult(const Stage& stage, std::string message) {
    StageResult r;
    r.stage = stage.id;
    r.status = StageStatus::Inconclusive;
    Failure f;
    f.kind = FailureKind::Inconclusive;
    f.stage = stage.id;
    f.message = std::move(message);
    r.failure = f;
    return r;
}
}  // namespace

StageResult checkStage(const Plan& plan, const Stage& stage, const CheckOptions& opts, const InterruptSlot* slot) {
    StageResult r;
    r.stage = stage.id;
    try {
        // Made through the C API: under a low memory limit Z3_mk_context_rc returns null, and
        // z3::context would use it (a crash, not a verdict).
        struct OwnedContext {
            Z3_context raw;
            ~OwnedContext() { if (raw) Z3_del_context(raw); }
        } owned{[] {
            Z3_config cfg = Z3_mk_config();
            if (!cfg) return Z3_context{nullptr};
            Z3_context c = Z3_mk_context_rc(cfg);
            Z3_del_config(cfg);
            return c;
        }()};
        if (!owned.raw) return inconclusiveResult(stage, "out of memory: the solver could not start (no Z3 context)");
        z3::scoped_context scoped(owned.raw);
        z3::context& ctx = scoped();
        if (slot && slot->enter) slot->enter(&ctx);
        struct Leave {
            const InterruptSlot* s;
            ~Leave() { if (s && s->leave) s->leave(); }
        } leave{slot};
        StageChecker checker(plan, stage, opts, ctx);
        r = checker.run();
    } catch (const z3::exception& e) {
        r = inconclusiveResult(stage, std::string("the solver stopped: ") + e.msg());
    } catch (const std::bad_alloc&) {
        r = inconclusiveResult(stage, "out of memory while checking the stage");
    } catch (const std::exception& e) {
        // A thread that cannot start under a memory limit (EAGAIN) is that limit too.
        r = inconclusiveResult(stage, isOutOfMemory(e) ? std::string("out of memory while checking the stage")
                                                       : std::string("internal error while checking the stage: ") + e.what());
    } catch (...) {
        // Z3's own out_of_memory_error is not a std::exception; under a memory limit it can
        // escape a solver call.
        r = inconclusiveResult(stage, "the solver stopped with an error of its own (out of memory, most likely)");
    }
    return r;
}

}  // namespace tv
