// A plan and its twin, side by side: a correct plan and its buggy twin (a lesson's pair, a plan
// and a mutant from the bug lab, or any two plan files). Two things are needed to compare them:
// the ops that differ (diffPlans), and both plans drawn so that the eye can go from one picture to
// the other. Laying each plan out on its own does not give that: one op more or less and dot
// moves everything, so the same op lands somewhere else in each picture. placeTwins lays out ONE
// view, the union of both, and gives each plan its part of it: an op in both plans sits at the
// same place in both pictures, and an op in one plan only leaves a gap in the other's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "explore/plan_view.hpp"
#include "model/plan.hpp"

namespace tv {

/// One difference between two plans, named after the op (or the logical tensor whose lineage
/// differs).
struct OpChange {
    ViewSide side = ViewSide::Logical;
    std::string name;
    enum class What : std::uint8_t { Added, Removed, Changed } what = What::Changed;
    /// Added, Removed: the op in a few words ("all_reduce (forward) over ranks 0, 1"). Changed:
    /// what differs, "; " between items, e.g. `kind identity → add; attribute reduce: "mean" → "sum"`.
    std::string detail;
    /// `name` is a logical tensor whose lineage differs, not an op.
    bool lineage = false;
    /// What a list shows: the op's name, or "lineage of <tensor>".
    std::string shownName() const { return lineage ? "lineage of " + name : name; }
};

std::string_view toString(OpChange::What w);  ///< "added", "removed", "changed"

/// The ops that differ between `a` and `b`, matched by name, on the logical and on the parallel
/// graph separately: Removed (in a only), Added (in b only), Changed (the kind, phase, rank,
/// microbatch, collective group, attributes, inputs or outputs (names in order, and their shapes)
/// or the replica and microbatch flags differ). Lineage is compared by logical tensor, with
/// tensor names (ids differ between plans): a tensor whose records differ is a Changed entry on
/// the logical side named after the tensor, with `lineage` set. Order: logical ops, then lineage, then parallel
/// ops; in each, in a's order (ops as stored, lineage by first record), then what only b has, in
/// b's order. Empty for a plan and itself.
std::vector<OpChange> diffPlans(const Plan& a, const Plan& b);

/// The node a change is drawn as in a view of `drawn` (the plan drawn, written out or as stored):
/// the op's node (or the fold holding it), the logical tensor's for a lineage change; -1 when that
/// plan has no such op or it is not drawn.
int changeNode(const Plan& drawn, const PlanView& view, const OpChange& change);

/// Unfolds, in `options`, the folded ranks and layers of `view` that hold a change, so that the op
/// that differs is drawn as itself; at most `ranksLeft` ranks and `layersLeft` layers (both count
/// down: a change deep in a 405B plan must not unfold it all). Returns whether `options` changed
/// (build the view again, and ask again: an unfolded rank can show folded layers).
bool unfoldChanges(const Plan& drawn, const PlanView& view, const std::vector<OpChange>& changes, ViewOptions& options, int& ranksLeft,
                   int& layersLeft);

/// Both views placed in one layout.
struct PlacedTwins {
    PlacedView a, b;
    std::string error;        ///< the union was not laid out: why (a and b carry it too)
    bool cancelled = false;
};

/// Lays out the union of two views once (placePlanView, with `gap` and `control`) and projects it
/// onto each: a node (an op, a tensor, a collapsed rank, a collapsed layer by its key) that both
/// views have gets the same rect, bit for bit, in both; its edges the same path; both get the
/// union's bounds and notice. Each projection bundles its own collapsed-rank edges
/// (bundleCollapsedRankEdges). A group keeps the union's rect, so it spans the other view's
/// members too; a group whose members the union holds elsewhere (rare: a node moved to another
/// group in the twin) is the box around its members. Both views should be built with the same
/// ViewOptions.
PlacedTwins placeTwins(const PlanView& a, const PlanView& b, double gap = 240, const LayoutControl* control = nullptr);

}  // namespace tv
