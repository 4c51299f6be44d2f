// What the explorer draws, computed without Qt: the logical and the parallel graph as nodes
// (ops, and the tensors that lineage names), dataflow edges, lineage edges between the two sides,
// and the groups (stages on the logical side; ranks and microbatches on the parallel side).
// Ranks can be collapsed into one node each, so only what is expanded is laid out.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "layout/graph_layout.hpp"
#include "model/plan.hpp"
#include "verify/stages.hpp"

namespace tv {

enum class ViewSide : std::uint8_t { Logical, Parallel };
enum class ViewNodeKind : std::uint8_t { Op, Tensor, CollapsedRank };
enum class LineageKind : std::uint8_t { Shard, Replica, PartialSum };
enum class ViewGroupKind : std::uint8_t { Stage, Rank, Microbatch };

std::string_view toString(LineageKind k);

struct ViewNode {
    ViewSide side = ViewSide::Logical;
    ViewNodeKind kind = ViewNodeKind::Op;
    std::uint32_t id = kNone;       ///< OpId, TensorId, or rank for a collapsed rank
    std::string label;              ///< op kind, tensor name, or rank summary
    std::string name;               ///< op or tensor id
    int group = -1;                 ///< index into PlanView::groups
    std::uint32_t stage = kNone;    ///< the stage that proves this op or tensor, if any
    double width = 0, height = 0;   ///< points
};

struct ViewEdge {
    int from = 0, to = 0;           ///< node indices
    TensorId tensor = kNone;        ///< the tensor flowing (dataflow), or the parallel tensor (lineage)
};

struct LineageEdge {
    int logical = 0, parallel = 0;  ///< node indices of the logical and the parallel tensor
    LineageKind kind = LineageKind::Shard;
    Rational coeff{1};
    std::uint32_t record = 0;       ///< lineage record index
};

struct ViewGroup {
    ViewSide side = ViewSide::Logical;
    ViewGroupKind kind = ViewGroupKind::Stage;
    std::string label;
    int parent = -1;
    std::int32_t rank = -1, microbatch = -1;
    std::uint32_t stage = kNone;
};

struct ViewOptions {
    std::set<std::int32_t> collapsedRanks;
    bool groupMicrobatches = true;
};

struct PlanView {
    std::vector<ViewNode> nodes;
    std::vector<ViewEdge> logicalEdges, parallelEdges;
    std::vector<LineageEdge> lineage;
    std::vector<ViewGroup> groups;
    std::vector<int> logicalOpNode, parallelOpNode;          ///< OpId -> node (-1: hidden)
    std::vector<int> logicalTensorNode, parallelTensorNode;  ///< TensorId -> node (-1: no node)
    std::vector<int> rankNode;                               ///< rank -> collapsed node (-1: expanded)

    std::size_t count(ViewSide side, ViewNodeKind kind) const;
    /// Nodes on the other side related to `node` by lineage or by implementing the same stage.
    std::vector<int> counterparts(int node) const;
    /// The Graphviz request for one side, and the node index each request node stands for.
    /// Edges of collapsed ranks are left out of layouts (they are drawn straight) unless asked for.
    LayoutRequest layoutRequest(ViewSide side, std::vector<int>& requestToNode, bool includeCollapsedEdges = false) const;
};

/// Both sides laid out and placed in one coordinate system: the logical graph on the left, the
/// parallel graph to its right, y growing downwards, in points.
struct PlacedView {
    std::vector<Rect> nodeRects;                       ///< per PlanView node
    std::vector<Rect> groupRects;                      ///< per PlanView group
    std::vector<std::vector<Point>> dataflowPaths;     ///< logical edges, then parallel edges
    std::vector<Point> dataflowTips;
    Rect logicalBounds, parallelBounds;
    std::string error;
};

PlacedView placePlanView(const PlanView& view, double gap = 240);

/// What the explorer's filters keep visible. -1 / empty means "any". Rank, coordinate and
/// microbatch filters apply to the parallel side; op kind and phase to both.
struct ViewFilter {
    std::int32_t rank = -1;
    std::array<std::int32_t, 6> coordinate{-1, -1, -1, -1, -1, -1};  ///< indexed by Axis
    std::int32_t microbatch = -1;
    std::string opKind;   ///< substring of the operator name, e.g. "all_" or "matmul"
    int phase = -1;       ///< a Phase value
    bool empty() const;
};

bool passesFilter(const Plan& plan, const ViewNode& node, const ViewFilter& filter);

/// Ranks to collapse by default so a large plan opens quickly (empty when the plan is small).
std::set<std::int32_t> defaultCollapsedRanks(const Plan& plan, std::size_t maxExpandedOps = 1500);

PlanView buildPlanView(const Plan& plan, const StagePlan& stages, const ViewOptions& options);

}  // namespace tv
