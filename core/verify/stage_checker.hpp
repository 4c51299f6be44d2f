// The checker of one stage, shared by the files that implement it (internal to core/verify;
// nothing outside includes it). One StageChecker per stage and Z3 context; its parts live in
// files by what they do: check.cpp (the run, the entry point), check_shape_reduction.cpp,
// check_evaluate.cpp (symbolic evaluation of both sides), check_solve.cpp (the tiered query
// and index data), check_real_functions.cpp (witnesses and confirmation with the real
// functions) and check_counterexample.cpp (replay, the diagnosis, the trace).
#pragma once

#include <cctype>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include <z3++.h>

#include "verify/check.hpp"
#include "ops/normal_form.hpp"
#include "ops/registry.hpp"
#include "verify/symmetry.hpp"
#include "model/instance_names.hpp"
#include "process/memory_limit.hpp"
#include "ops/symbolic.hpp"

namespace tv::check_detail {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

using SymValue = Value<z3::expr>;

/// A trace shows at most this many elements of a tensor.
inline constexpr std::size_t kShownElements = 256;

/// Whether one of the first `limit` elements of `v` applies an uninterpreted function (exp, log, a
/// fractional pow, the routing functions...): its value under a model is then the solver's choice,
/// consistent but not the real function's. Terms already looked at (`seen`, by Z3 id) are skipped.
bool appliesUninterpreted(const SymValue& v, std::size_t limit, std::unordered_set<unsigned>& seen);
std::string indexString(const std::vector<std::int64_t>& idx);
std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape);
/// Flat offsets of the elements of `box` (reduced coordinates) inside a tensor of `shape`.
std::vector<std::int64_t> boxOffsets(const Shape& shape, const Box& box);

class StageChecker {
public:
    StageChecker(const Plan& plan, const Stage& stage, const CheckOptions& opts, z3::context& ctx)
        : plan_(plan), L_(plan.logical), P_(plan.parallel), stage_(stage), opts_(opts), ctx_(ctx), alg_(ctx) {}

    StageResult run();

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

    void collectTensors();

    // ----- shape reduction ------------------------------------------------------------------

    /// sum(c_i * x_i) == k with integer c_i, k: divided by gcd(c_i, k), so solve-eqs can use it.
    static z3::expr divideByGcd(const z3::expr& f);

    /// Ends the stage INCONCLUSIVE with a failure of this kind at its output (returns false).
    bool giveUp(FailureKind kind, std::string message);
    bool infeasible();

    /// The stage's encoding would hold more tensor elements than CheckOptions::maxElements:
    /// INCONCLUSIVE before anything is encoded, naming both counts.
    bool tooLarge();

    /// Elements summed without wrapping (a stage of a few tensors of 2^62 elements each).
    static void addElements(std::uint64_t& sum, const Shape& s);

    bool reduceShapes();
    enum class Reduction { Done, Infeasible };
    Reduction solveShapes();
    std::uint64_t startElements() const;
    /// Cuts the logical tensors of a stage replica 0 proves alone to the stored lane's part
    /// (lShape_); true if any was cut.
    bool cutToStoredLane();
    /// The full shapes of the logical tensors cut to the stored lane's part (boxes scale from them).
    std::unordered_map<TensorId, Shape> lFull_;

    /// A lineage box scaled from the logical tensor's full shape to its reduced shape.
    Box reducedBox(const Box& b, TensorId logical) const;

    // ----- symbolic evaluation --------------------------------------------------------------

    SymValue freshTensor(const std::string& prefix, const Shape& shape, DType dtype);

    bool evaluate();

    bool runOps(const Graph& g, const std::vector<OpId>& ops, std::unordered_map<TensorId, Shape>& shapes,
                std::unordered_map<TensorId, SymValue>& vals);

    void fail(FailureKind kind, const std::string& msg);

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
    void assignIndexDomains();

    /// The index unknowns (with a domain) a term reads through their indicators.
    std::vector<const IdVar*> idVarsIn(std::initializer_list<const z3::expr*> roots) const;

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
    static bool termSizeAtLeast(const z3::expr& a, const z3::expr& b, std::size_t limit);

    /// A term built of numerals only (a coefficient such as 1/N, written as a division).
    static bool isConstantTerm(const z3::expr& e, int depth = 0);

    /// The summands of a term, taken apart structurally (sums, differences, negations, constant
    /// factors; nothing is expanded or simplified), each with its coefficient multiplied in:
    /// their sum is the term.
    std::vector<z3::expr> summands(const z3::expr& root) const;

    template <class Closes>
    int closesBySeparateParts(const z3::expr& lhs, const z3::expr& rhs, Closes&& closes) const {
        auto l = summands(lhs), r = summands(rhs);
        if (l.size() + r.size() < 3) return 0;
        // Union-find over the unknowns (uninterpreted constants, by AST id); each monomial joins
        // the unknowns it reads. Every subterm is walked once for all monomials (post-order,
        // memoised by AST id): a subterm stands for one of its unknowns, all of which are joined,
        // so a monomial meeting it again joins that one. Monomials sharing a large subterm (a
        // routing function of a whole score row) cost its size once, not once each.
        std::unordered_map<unsigned, unsigned> parent;
        bool opaque = false;  // a quantifier or bound variable: its unknowns are not walked, so no split
        auto find = [&](unsigned v) {
            while (parent.at(v) != v) v = parent[v] = parent.at(parent.at(v));
            return v;
        };
        constexpr std::int64_t kNoUnknown = -1;
        std::unordered_map<unsigned, std::int64_t> unknownIn;  // AST id -> an unknown it reads, or kNoUnknown
        auto leaf = [&](const z3::expr& e) {  // whether e needs its arguments walked; else records it
            if (unknownIn.count(e.id())) return false;
            if (!e.is_app()) {
                opaque = true;
                unknownIn.emplace(e.id(), kNoUnknown);
                return false;
            }
            if (!e.is_const()) return true;
            if (e.decl().decl_kind() != Z3_OP_UNINTERPRETED) {
                unknownIn.emplace(e.id(), kNoUnknown);
                return false;
            }
            parent.emplace(e.id(), e.id());
            unknownIn.emplace(e.id(), e.id());
            return false;
        };
        auto unknownOf = [&](const z3::expr& m) -> std::optional<unsigned> {
            std::vector<std::pair<z3::expr, unsigned>> stack;  // a term and its next argument
            if (leaf(m)) stack.emplace_back(m, 0u);
            while (!stack.empty()) {
                if (stack.back().second < stack.back().first.num_args()) {
                    z3::expr arg = stack.back().first.arg(stack.back().second++);
                    if (leaf(arg)) stack.emplace_back(std::move(arg), 0u);
                    continue;
                }
                const z3::expr e = stack.back().first;
                stack.pop_back();
                if (unknownIn.count(e.id())) continue;  // reached twice below one term
                std::int64_t rep = kNoUnknown;
                for (unsigned k = 0; k < e.num_args(); ++k) {
                    const auto r = unknownIn.at(e.arg(k).id());
                    if (r == kNoUnknown) continue;
                    if (rep == kNoUnknown) rep = r;
                    else if (auto a = find(static_cast<unsigned>(rep)), c = find(static_cast<unsigned>(r)); a != c) parent[a] = c;
                }
                unknownIn.emplace(e.id(), rep);
            }
            const auto r = unknownIn.at(m.id());
            return r == kNoUnknown ? std::nullopt : std::optional<unsigned>(static_cast<unsigned>(r));
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
    z3::expr idPremises(const std::vector<Eq>& eqs) const;

    /// Tier 0 of solve(): which elements of every slice and copy of the output record simplify
    /// to equal in one bounded call ([slice][copy][element]), for a stage whose terms have at
    /// least CheckOptions::simplifyTogetherMinNodes distinct nodes.
    std::vector<std::vector<std::vector<char>>> simplifyTogether(const LineageRecord& rec, const SymValue& ts);
    static constexpr std::uint64_t kSimplifyTogetherBaseSteps = 1'000'000, kSimplifyTogetherStepsPerNode = 40;
    void solve();

    // ----- the real functions -----------------------------------------------------------------

    /// Whether a term applies an uninterpreted function (its value under a model is then the
    /// model's guess, not the real function's).
    bool mentionsFunction(const z3::expr& root) const;

    /// A term's value with the model's inputs and the real functions (NaN where undefined), with
    /// a bound on the rounding of its evaluation.
    PreciseValue realValue(const z3::model& m, const z3::expr& e) const;

    /// Whether two values of the real functions differ beyond the rounding of their evaluation.
    /// The bound is the running error of each side (algebra.hpp: a sum that cancels keeps the
    /// error of the terms that cancelled), with a factor 16 for what first order leaves out. A
    /// relative tolerance alone is wrong both ways: near 0 (a gradient that is exactly 0, computed
    /// as the difference of two large sums) any noise exceeds it, and a real difference far below
    /// it (an epsilon changed from 1e-8 to 2e-8 in a large term) is lost.
    static bool beyondRounding(const PreciseValue& a, const PreciseValue& b);

    /// Random inputs (multiples of 1/64 in [-2, 2]; ids a class of their domain) under which some
    /// equation really differs with the real functions, as constraints fixing every input; none
    /// if 64 draws find none.
    std::optional<z3::expr> findWitness(const std::vector<Eq>& eqs) const;

    /// Whether lhs != rhs under the model with the real functions: exactly (in the model) when
    /// neither side applies an uninterpreted function, else as numbers, beyond rounding.
    bool reallyDiffers(const z3::model& m, const z3::expr& lhs, const z3::expr& rhs) const;

    /// Whether some copy of the stage's output really differs from its logical slice under the
    /// model (the real functions agree with the solver's counterexample).
    bool confirmed(const z3::model& m) const;

    /// Facts of the real functions on every application the equations read: sqrt(t) >= 0 and
    /// sqrt(t)^2 = t where t >= 0; y * inv(y) = 1 where y != 0; exp(t) > 0; exp(log(t)) = t where
    /// t > 0; 0 < sigmoid(t) < 1; -1 < tanh(t) < 1. The logical step's own domain (its sqrt and
    /// log arguments, its divisors) becomes a premise: where it has no value there is nothing to
    /// prove. The parallel plan's never does: where it has no value and the logical step has one,
    /// that is a difference.
    z3::expr realFunctionFacts(const std::vector<Eq>& eqs) const;

    // ----- counterexample replay ------------------------------------------------------------

    /// A value as shown: exact from the model, or, for a term applying an uninterpreted function,
    /// the real function's value on the model's inputs (what the step would compute).
    std::string value(const z3::model& m, const z3::expr& e) const;

    TensorValues valuesOf(const z3::model& m, const Graph& g, TensorId t, const SymValue& v, const std::vector<std::int64_t>* offs = nullptr) const;

    /// If an op on the way to the broken copy reads a tensor of another microbatch than its own,
    /// the counterexample is a lane misalignment: name that op and the foreign tensor.
    void explainLaneMisalignment(OpId last, Failure& f) const;

    void locate(const z3::model& m);

    /// Among the stage's parallel ops that the copy's terms come from: the first (in graph order)
    /// that computes another operator than the logical op of its name (another kind, or other
    /// attributes), for the ops whose attributes sharding leaves alone (element-wise, compute,
    /// reductions, norms, losses, optimizers; not data movement, collectives or vocabulary
    /// parts). kNone if there is none. Only where the diagnosis points, never the verdict.
    OpId disagreeingAncestor(const std::vector<LineageTerm>& copy, std::string& why) const;

    /// Every op of the stage on both sides, in topological order, with the model's values of its
    /// inputs and outputs; the lineage copies of the stage's output record, each at the op that
    /// completes it, with whether it holds; and the divergence (the op `locate` named).
    std::shared_ptr<const StageTrace> buildTrace(const z3::model& m, OpId failingOp, const Failure& f) const;
};

}  // namespace tv::check_detail
