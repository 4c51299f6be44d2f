// The tiered query of one stage: each lineage copy of the output against its logical slice,
// closed by simplification, the exp/log normal form, the index-data cases, separate parts, and
// only then the solver; index data as 0/1 indicators with their premises.

#include "verify/stage_checker.hpp"

namespace tv::check_detail {

void StageChecker::assignIndexDomains() {
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

auto StageChecker::idVarsIn(std::initializer_list<const z3::expr*> roots) const -> std::vector<const IdVar*> {
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

bool StageChecker::termSizeAtLeast(const z3::expr& a, const z3::expr& b, std::size_t limit) {
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

bool StageChecker::isConstantTerm(const z3::expr& e, int depth) {
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

std::vector<z3::expr> StageChecker::summands(const z3::expr& root) const {
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

z3::expr StageChecker::idPremises(const std::vector<Eq>& eqs) const {
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

std::vector<std::vector<std::vector<char>>> StageChecker::simplifyTogether(const LineageRecord& rec, const SymValue& ts) {
    std::vector<std::vector<std::vector<char>>> closed(rec.slices.size());
    std::vector<std::vector<std::int64_t>> offsets(rec.slices.size());
    std::size_t elements = 0;
    for (std::size_t si = 0; si < rec.slices.size(); ++si) {
        offsets[si] = boxOffsets(ts.shape, reducedBox(rec.slices[si].box, rec.logical));
        closed[si].assign(rec.slices[si].copies.size(), std::vector<char>(offsets[si].size(), 0));
        elements += rec.slices[si].copies.size() * offsets[si].size();
    }
    if (elements < 2) return closed;
    // Its size: the distinct nodes of both sides' terms, walked as they are (no term is made
    // before the call is decided: a small stage keeps tier 1's order and its solver queries
    // exactly, whose search a context with other terms in it can lengthen by minutes).
    std::unordered_set<unsigned> seen;
    std::vector<z3::expr> work;
    auto walk = [&](const z3::expr& root) {
        work.push_back(root);
        while (!work.empty()) {
            auto e = work.back();
            work.pop_back();
            if (!seen.insert(e.id()).second) continue;
            if (e.is_app())
                for (unsigned k = 0; k < e.num_args(); ++k) work.push_back(e.arg(k));
        }
    };
    for (std::size_t si = 0; si < rec.slices.size(); ++si)
        for (std::size_t e = 0; e < offsets[si].size(); ++e) {
            walk(ts.v[offsets[si][e]]);
            for (const auto& c : rec.slices[si].copies)
                for (const auto& t : c) walk(pVal_.at(t.tensor).v[e]);
        }
    if (seen.size() < opts_.simplifyTogetherMinNodes) return closed;
    z3::expr_vector diffs(ctx_);
    z3::sort_vector domain(ctx_);
    std::vector<char*> slot;
    for (std::size_t si = 0; si < rec.slices.size(); ++si)
        for (std::size_t ci = 0; ci < rec.slices[si].copies.size(); ++ci)
            for (std::size_t e = 0; e < offsets[si].size(); ++e) {
                std::vector<z3::expr> terms;
                for (const auto& t : rec.slices[si].copies[ci]) terms.push_back(alg_.mul(alg_.num(t.coeff), pVal_.at(t.tensor).v[e]));
                auto rhs = alg_.sum(terms);
                const auto& lhs = ts.v[offsets[si][e]];
                if (z3::eq(lhs, rhs)) continue;  // tier 1 closes it without a walk
                diffs.push_back(lhs - rhs);
                domain.push_back(ctx_.real_sort());
                slot.push_back(&closed[si][ci][e]);
            }
    if (slot.size() < 2) return closed;
    // The bound: a few dozen rewriting steps per distinct node (the MoE router stage, 160,705
    // nodes, closes in under 5 M steps; at 1 M it does not). Past it the simplifier throws, and
    // tier 0 closes nothing.
    const std::uint64_t steps = kSimplifyTogetherBaseSteps + kSimplifyTogetherStepsPerNode * seen.size();
    try {
        // A fresh set: z3::params copies share one underlying object, and a bound set on a
        // copy of tier 1's would cap every later tier 1 call of the stage (found in review).
        z3::params bounded(ctx_);
        bounded.set("som", true);
        bounded.set("arith_lhs", true);
        bounded.set("max_steps", static_cast<unsigned>(std::min<std::uint64_t>(steps, std::numeric_limits<unsigned>::max())));
        const auto together = ctx_.function("tv!elements", domain, ctx_.real_sort());
        const auto r = together(diffs).simplify(bounded);
        if (!r.is_app() || !z3::eq(r.decl(), together) || r.num_args() != slot.size()) return closed;
        for (unsigned i = 0; i < r.num_args(); ++i) {
            std::int64_t z = 1;
            if (r.arg(i).is_numeral() && r.arg(i).is_numeral_i64(z) && z == 0) *slot[i] = 1;
        }
    } catch (const z3::exception&) {
        // the simplifier gave up: every element goes through the tiers one by one
    }
    return closed;
}

void StageChecker::solve() {
    const auto& rec = plan_.lineage[stage_.output];
    const auto& ts = lVal_.at(rec.logical);
    z3::params simp(ctx_);
    simp.set("som", true);
    simp.set("arith_lhs", true);
    // Created on first need: only stages whose terms apply exp, log or a reciprocal and that
    // simplification alone does not close use the exp/log normal form.
    std::optional<ExpLogNormalizer> normal;
    // Tier 0: every element of every slice and copy simplified in one call. A stage's elements
    // share most of their terms (a token's routing weights feed each of its hidden units; the
    // copies hold one logical value), and one simplification rewrites a shared subterm once
    // where one call per element rewrites it again each time (the 128-GPU MoE pair's router
    // stage: 64 calls of 0.16 s, or one of 5 s for all 256 elements). An element it closes is
    // closed exactly as tier 1 closes it, its difference simplified to 0 (the batch is one
    // application of a fresh uninterpreted function to the differences, whose arguments the
    // simplifier rewrites each on its own); the others go through the tiers one by one. The
    // call is bounded in steps, so terms that expand past it (a loss over every token, which
    // tier 1d proves part by part) lose only this attempt.
    const auto closedTogether = simplifyTogether(rec, ts);
    for (std::size_t si = 0; si < rec.slices.size(); ++si) {
        const auto& s = rec.slices[si];
        const auto& closedHere = closedTogether[si];
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
        for (std::size_t ci = 0; ci < s.copies.size(); ++ci) {
            const auto& c = s.copies[ci];
            for (std::size_t e = 0; e < offs.size(); ++e) {
                if (closedHere[ci][e]) continue;
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
                if (z3::eq(lhs, rhs)) continue;  // the same term (hash-consed): nothing to walk
                if (!normal) normal.emplace(alg_);
                // mentionsExpLog is memoised over the stage, the size walk is not: it goes last.
                bool large = (normal->mentionsExpLog(lhs) || normal->mentionsExpLog(rhs)) && termSizeAtLeast(lhs, rhs, 2000);
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

}  // namespace tv::check_detail
