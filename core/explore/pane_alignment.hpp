// The Studio shows the logical and the parallel graph in two panes, each scrolled and zoomed on
// its own. What keeps them together: each pane's extent (what it may scroll over), and a
// monotone map between the two sides' heights, anchored at the stages both sides implement, so
// scrolling one pane to a stage brings the other to the same stage.
#pragma once

#include <vector>

#include "explore/plan_view.hpp"

namespace tv {

/// Everything drawn for one side: its nodes, groups, dataflow paths (bowed edges included) and
/// bundles, with its layout bounds. Empty (zero size) when the side has nothing.
Rect sideExtent(const PlanView& view, const PlacedView& placed, ViewSide side);

/// Logical height <-> parallel height, piecewise linear between anchors, strictly increasing on
/// both sides. Outside the anchors it keeps the offset of the nearest one; with no anchor it maps
/// the tops of the two sides onto each other.
struct StageAlignment {
    struct Anchor {
        double logicalY = 0, parallelY = 0;
        std::uint32_t stage = kNone;  ///< the stage it was taken from (kNone: a side's top or bottom)
    };
    std::vector<Anchor> anchors;  ///< strictly increasing in both coordinates
    double logicalTop = 0, parallelTop = 0;

    double toParallel(double logicalY) const;
    double toLogical(double parallelY) const;
};

/// Anchors at every stage with nodes drawn on both sides: the median height of its nodes on each
/// side (a folded layer stands for the ops it folds; a folded rank, one height for all its
/// stages, is no anchor). Stages that would make the map go
/// back up (a pipeline's later stage drawn higher on another rank) are left out: the longest
/// strictly increasing chain is kept, ties broken towards earlier stages, so the map is monotone.
StageAlignment alignStages(const PlanView& view, const PlacedView& placed);

}  // namespace tv
