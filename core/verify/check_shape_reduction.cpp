// Shape reduction of one stage (TrainVerify §4.3): the smallest shapes at which every op of the
// stage keeps its shape rule and every lineage box stays on element boundaries; the stage's
// size bound.

#include "verify/stage_checker.hpp"
#include "verify/symmetry.hpp"

#include <chrono>
#include <optional>

namespace tv::check_detail {

namespace {
/// The budget of the search for one stage's smallest shapes (milliseconds).
constexpr unsigned kReductionBudgetMs = 2000;
}  // namespace

z3::expr StageChecker::divideByGcd(const z3::expr& f) {
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

bool StageChecker::giveUp(FailureKind kind, std::string message) {
    Failure f;
    f.kind = kind;
    f.stage = stage_.id;
    f.tensor = plan_.tensorName(L_, plan_.lineage[stage_.output].logical);
    f.message = std::move(message);
    result_.status = StageStatus::Inconclusive;
    result_.failure = f;
    return false;
}

bool StageChecker::infeasible() {
    return giveUp(FailureKind::ShapeReductionInfeasible, "no reduced shapes keep every partition boundary and operator constraint of this stage");
}

bool StageChecker::tooLarge() {
    return giveUp(FailureKind::Inconclusive, "the stage holds " + std::to_string(result_.reducedElements) + " tensor elements " +
                                                 (opts_.reduceShapes ? "after shape reduction" : "(shape reduction off)") + ", more than the " +
                                                 std::to_string(opts_.maxElements) + " one check encodes (memory); not checked");
}

void StageChecker::addElements(std::uint64_t& sum, const Shape& s) {
    const auto n = static_cast<std::uint64_t>(numel(s));
    sum = n > std::numeric_limits<std::uint64_t>::max() - sum ? std::numeric_limits<std::uint64_t>::max() : sum + n;
}

/// The stored lane's part of each logical tensor a stage replica 0 proves alone splits across
/// the lanes (symmetry.hpp: provenByReplicaZero). The stage's logical ops map the split dim
/// through (never reduce over it, never index an unsplit input by it, keep it in every output),
/// so the first part of each output along the split is computed from the first parts of the split
/// inputs and the unsplit inputs alone, by the same ops at the cut shapes: checking the stage on
/// the parts is checking the part of the whole stage that the stored lane's lineage claims
/// (docs/soundness.md §5). False (nothing cut) if a part is not a whole fraction of its dim or a
/// record's box of the stage lies outside it.
bool StageChecker::cutToStoredLane() {
    if (!plan_.replication.active()) return false;
    std::unordered_map<TensorId, LaneSplit> splits;
    if (!provenByReplicaZero(plan_, stage_, nullptr, &splits) || splits.empty()) return false;
    std::unordered_map<TensorId, Shape> cut;
    for (const auto& [t, sp] : splits) {
        auto it = lShape_.find(t);
        if (it == lShape_.end()) continue;
        Shape s = it->second;
        const auto d = static_cast<std::size_t>(sp.dim);
        if (d >= s.size() || sp.lanes < 1 || s[d] % sp.lanes != 0) return false;
        s[d] /= sp.lanes;
        if (sp.dim2 >= 0) {
            // The members' split along another dim (one member of each group stored).
            const auto d2 = static_cast<std::size_t>(sp.dim2);
            if (d2 >= s.size() || d2 == d || sp.lanes2 < 1 || s[d2] % sp.lanes2 != 0) return false;
            s[d2] /= sp.lanes2;
        }
        cut.emplace(t, std::move(s));
    }
    for (auto r : records_) {
        const auto& rec = plan_.lineage[r];
        auto it = cut.find(rec.logical);
        if (it == cut.end()) continue;
        for (const auto& sl : rec.slices)
            for (std::size_t d = 0; d < it->second.size(); ++d)
                if (sl.box.hi[d] > it->second[d]) return false;
    }
    for (auto& [t, s] : cut) lShape_[t] = std::move(s);
    return !cut.empty();
}

bool StageChecker::reduceShapes() {
    for (auto t : lTensors_) lShape_[t] = plan_.shape(L_, t);
    for (auto t : pTensors_) pShape_[t] = plan_.shape(P_, t);
    for (auto& [t, s] : lShape_) addElements(result_.fullElements, s);
    for (auto& [t, s] : pShape_) addElements(result_.fullElements, s);
    // A stage proving a record whose replicas add up (`sum`) claims the stored lane's part of the
    // sum: it is only that obligation on the cut, never on the whole tensors.
    if (plan_.replication.active() && plan_.lineage[stage_.output].replicas == ReplicaMode::Sum) {
        if (!cutToStoredLane())
            return giveUp(FailureKind::Inconclusive,
                          "the stage proves a sum over the replicas, and its logical tensors could not be cut to the stored lane's part; not checked");
        lFull_ = lShape_;
        if (!opts_.reduceShapes) {
            result_.reducedElements = startElements();
            return true;
        }
        const auto outcome = solveShapes();
        if (outcome == Reduction::Infeasible) return infeasible();
        return true;
    }
    if (!opts_.reduceShapes) {
        result_.reducedElements = result_.fullElements;
        return true;
    }
    // Reduced from the stored lane's parts where the stage allows it; if no shapes fit them, from
    // the whole logical tensors as before.
    if (cutToStoredLane()) {
        lFull_ = lShape_;
        const auto outcome = solveShapes();
        if (outcome != Reduction::Infeasible) return outcome == Reduction::Done;
        lFull_.clear();
        for (auto t : lTensors_) lShape_[t] = plan_.shape(L_, t);
        for (auto t : pTensors_) pShape_[t] = plan_.shape(P_, t);
        result_.note.clear();
        result_.reducedElements = 0;
    }
    const auto outcome = solveShapes();
    if (outcome == Reduction::Infeasible) return infeasible();
    return outcome == Reduction::Done;
}

/// The elements of the shapes reduction starts from (the full shapes, or the stored lane's cut).
std::uint64_t StageChecker::startElements() const {
    std::uint64_t n = 0;
    for (const auto& [t, s] : lShape_) addElements(n, s);
    for (const auto& [t, s] : pShape_) addElements(n, s);
    return n;
}

/// Shape reduction from the shapes in lShape_ and pShape_ (the stage's full shapes, or the cut).
StageChecker::Reduction StageChecker::solveShapes() {
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
    if (all.empty()) return Reduction::Done;
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
    if (pieces1.size() != 1 || pieces1[0].is_decided_unsat()) return Reduction::Infeasible;
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
    // The smallest shapes are a matter of speed only (any shapes satisfying the constraints are
    // sound: docs/soundness.md §6), and Z3's optimizer can take tens of seconds to prove a
    // minimum on stages with products of dims (reshapes), where its SMT core finds shapes and
    // proves there are no smaller ones in milliseconds. So: shapes from the SMT core (the
    // optimizer's engine, which honours its timeout; the default solver's nonlinear tactic does
    // not), then smaller totals by bisection until none is satisfiable or a budget is spent; the
    // optimizer only if the core finds no shapes at all.
    const unsigned budgetMs = opts_.timeoutMs ? std::min<unsigned>(opts_.timeoutMs, kReductionBudgetMs) : kReductionBudgetMs;
    z3::params p(ctx_);
    p.set("timeout", budgetMs);
    const z3::expr total = free.empty() ? ctx_.int_val(0) : z3::sum(free);
    std::optional<z3::model> found;
    {
        z3::solver descent(ctx_, z3::solver::simple());
        descent.set(p);
        for (unsigned i = 0; i < simplified.size(); ++i) descent.add(simplified[i]);
        const auto start = std::chrono::steady_clock::now();
        auto r = descent.check();
        if (r == z3::unsat) return Reduction::Infeasible;
        if (r == z3::sat) {
            found = descent.get_model();
            // Usually the first shapes are already the smallest (one unsatisfiable query says so);
            // otherwise bisection on the total: [lo, hi] holds the minimum, hi the best shapes'.
            std::int64_t lo = 0, hi = found->eval(total, true).get_numeral_int64();
            bool first = true;
            while (lo < hi && std::chrono::steady_clock::now() - start < std::chrono::milliseconds(budgetMs)) {
                const std::int64_t mid = first ? hi - 1 : lo + (hi - lo) / 2;
                first = false;
                descent.push();
                descent.add(total <= ctx_.int_val(mid));
                auto step = descent.check();
                if (step == z3::sat) {
                    found = descent.get_model();
                    hi = found->eval(total, true).get_numeral_int64();
                } else if (step == z3::unsat) {
                    lo = mid + 1;
                }
                descent.pop();
                if (step == z3::unknown) break;
            }
        }
    }
    if (!found) {
        z3::optimize opt(ctx_);
        z3::params q(ctx_);
        if (opts_.timeoutMs) q.set("timeout", opts_.timeoutMs);
        opt.set(q);
        for (unsigned i = 0; i < simplified.size(); ++i) opt.add(simplified[i]);
        if (!free.empty()) opt.minimize(total);
        auto res = opt.check();
        if (res == z3::unsat) return Reduction::Infeasible;
        if (res == z3::unknown) {
            result_.note = "shape reduction gave up (" + std::string(Z3_optimize_get_reason_unknown(ctx_, opt)) + "); checking at " + (lFull_.empty() ? "full shapes" : "the stored lane's part at full size");
            result_.reducedElements = startElements();
            return Reduction::Done;
        }
        found = opt.get_model();
    }
    auto m = pieces1[0].convert_model(simplified.convert_model(*found));
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
        z3::params q(ctx_);
        if (opts_.timeoutMs) q.set("timeout", opts_.timeoutMs);
        direct.set(q);
        for (unsigned i = 0; i < sc.constraints.size(); ++i) direct.add(sc.constraints[i]);
        direct.minimize(z3::sum(all));
        auto again = direct.check();
        if (again == z3::unsat) return Reduction::Infeasible;
        if (again != z3::sat || !satisfies(direct.get_model())) {
            result_.note = std::string("shape reduction gave no valid shapes; checking at ") + (lFull_.empty() ? "full shapes" : "the stored lane's part at full size");
            result_.reducedElements = startElements();
            return Reduction::Done;
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
    return Reduction::Done;
}

Box StageChecker::reducedBox(const Box& b, TensorId logical) const {
    const auto cut = lFull_.find(logical);
    const auto& full = cut != lFull_.end() ? cut->second : plan_.shape(L_, logical);
    const auto& red = lShape_.at(logical);
    Box r;
    for (std::size_t d = 0; d < full.size(); ++d) {
        r.lo.push_back(b.lo[d] * red[d] / full[d]);
        r.hi.push_back(b.hi[d] * red[d] / full[d]);
    }
    return r;
}

}  // namespace tv::check_detail
