// The real functions behind the uninterpreted ones (exp, log, sqrt, ...): their facts as
// premises, witnesses found by drawing inputs, and the check that a solver's counterexample
// really differs when the functions are the real ones.

#include "verify/stage_checker.hpp"

namespace tv::check_detail {

bool StageChecker::mentionsFunction(const z3::expr& root) const {
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

PreciseValue StageChecker::realValue(const z3::model& m, const z3::expr& e) const {
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

bool StageChecker::beyondRounding(const PreciseValue& a, const PreciseValue& b) {
    if (!std::isfinite(a.error) || !std::isfinite(b.error)) return false;
    return std::abs(a.value - b.value) > 16 * (a.error + b.error);
}

std::optional<z3::expr> StageChecker::findWitness(const std::vector<Eq>& eqs) const {
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

bool StageChecker::reallyDiffers(const z3::model& m, const z3::expr& lhs, const z3::expr& rhs) const {
    if (!mentionsFunction(lhs) && !mentionsFunction(rhs)) return m.eval(lhs == rhs, true).is_false();
    const auto a = realValue(m, lhs), b = realValue(m, rhs);
    // Where the logical step has no value (sqrt of a negative, a division by zero) there is
    // nothing to disagree with; where it has one and the parallel plan does not, they differ.
    if (!std::isfinite(a.value)) return false;
    if (!std::isfinite(b.value)) return true;
    return beyondRounding(a, b);
}

bool StageChecker::confirmed(const z3::model& m) const {
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

z3::expr StageChecker::realFunctionFacts(const std::vector<Eq>& eqs) const {
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

}  // namespace tv::check_detail
