// What the explorer draws, computed without Qt: the logical and the parallel graph as nodes
// (ops, and the tensors that lineage names), dataflow edges, lineage edges between the two sides,
// and the groups (stages on the logical side; ranks and microbatches on the parallel side).
// Ranks can be collapsed into one node each, and layers (ops named `layers.N...`, one group per
// phase) into one node per container (the logical graph, or a rank and microbatch), so only what
// is expanded is laid out.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "layout/graph_layout.hpp"
#include "layout/layout_process.hpp"
#include "model/plan.hpp"
#include "verify/stages.hpp"

namespace tv {

enum class ViewSide : std::uint8_t { Logical, Parallel };
enum class ViewNodeKind : std::uint8_t { Op, Tensor, CollapsedRank, CollapsedLayer };
enum class LineageKind : std::uint8_t { Shard, Replica, PartialSum };
enum class ViewGroupKind : std::uint8_t { Stage, Rank, Microbatch, Layer };

std::string_view toString(LineageKind k);

struct ViewNode {
    ViewSide side = ViewSide::Logical;
    ViewNodeKind kind = ViewNodeKind::Op;
    std::uint32_t id = kNone;       ///< OpId, TensorId, rank for a collapsed rank, PlanView::layers index for a collapsed layer
    std::string label;              ///< op kind, tensor name, or rank summary
    std::string name;               ///< op or tensor id
    /// What the box shows: the name, with the layer prefix its band already says folded away
    /// ("…feed_forward.w1.matmul@r0" in the band "layers.20 · forward"). Empty: the name.
    std::string shown;
    int group = -1;                 ///< index into PlanView::groups
    std::uint32_t stage = kNone;    ///< the stage that proves this op or tensor, if any
    int layer = -1;                 ///< PlanView::layers index of the layer group it belongs to, if any
    double width = 0, height = 0;   ///< points
};

struct ViewEdge {
    int from = 0, to = 0;           ///< node indices
    TensorId tensor = kNone;        ///< the tensor flowing (dataflow), or the parallel tensor (lineage)
    std::uint32_t tensors = 1;      ///< dataflow: how many tensors flow between the two nodes (one edge is drawn)
};

/// The edges between a collapsed rank and one other rank (its box, or the other collapsed rank),
/// in one direction, drawn as one edge with their count: expanding one rank of a big plan would
/// otherwise draw hundreds of long edges across it.
struct EdgeBundle {
    int collapsed = -1;             ///< the collapsed-rank node at one end
    int otherNode = -1;             ///< the other end, when it is a collapsed rank too
    int otherGroup = -1;            ///< else the outermost Rank group holding the other ends
    bool outgoing = true;           ///< from the collapsed node
    std::vector<std::size_t> members;  ///< indices into PlacedView::dataflowPaths (parallel edges)
    std::uint32_t tensors = 0;      ///< tensors carried by the members
    std::vector<Point> path;        ///< a cubic Bezier, p0 c1 c2 p1, border to border
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
    int layer = -1;                 ///< PlanView::layers index (Layer groups)
};

/// One layer group: the ops of one model layer in one phase (forward, backward, optimizer), on the
/// logical side or in one rank and microbatch of the parallel side.
struct ViewLayer {
    ViewSide side = ViewSide::Logical;
    std::int32_t rank = -1, microbatch = -1;
    std::string layer;              ///< e.g. "layers.3"
    Phase phase = Phase::Forward;
    std::string key;                ///< what ViewOptions names it by
    std::size_t ops = 0, stages = 0;
    bool collapsed = false;
    int node = -1;                  ///< the collapsed node, if collapsed
    int group = -1;                 ///< the Layer group around its ops, if expanded and drawn
};

/// The layer a name belongs to: "layers.3" for "bw.layers.3.attention.wq.matmul", "h.0" for
/// "h.0.mlp.c_fc"; empty when the name is in no numbered layer (layers, layer, h, blocks, block).
std::string layerOfName(std::string_view name);
/// `name` without the layer prefix that the band around it already shows: the segments of
/// `layer` ("layers.20") at a segment boundary, followed by a dot, become "…"
/// ("bw.layers.20.attention.wq" -> "bw.…attention.wq"). Unchanged when `layer` is not there
/// ("layers.2" in "layers.20.x" is not).
std::string foldLayerPrefix(std::string_view name, std::string_view layer);
/// How ViewOptions names a layer group.
std::string layerKey(ViewSide side, std::int32_t rank, std::int32_t microbatch, const std::string& layer, Phase phase);

struct ViewOptions {
    std::set<std::int32_t> collapsedRanks;
    bool groupMicrobatches = true;
    /// A layer group is collapsed when its container (the logical graph, or its rank) has more ops
    /// than this, unless named in expandedLayers; groups named in collapsedLayers always are.
    std::size_t collapseLayersAbove = 600;
    std::set<std::string> expandedLayers, collapsedLayers;
    /// Ranks whose every layer group is expanded (unless named in collapsedLayers).
    std::set<std::int32_t> ranksWithLayersExpanded;
    static constexpr std::size_t kNever = static_cast<std::size_t>(-1);
};

struct PlanView {
    std::vector<ViewNode> nodes;
    std::vector<ViewEdge> logicalEdges, parallelEdges;
    std::vector<LineageEdge> lineage;
    std::vector<ViewGroup> groups;
    std::vector<int> logicalOpNode, parallelOpNode;          ///< OpId -> node (-1: hidden)
    std::vector<int> logicalTensorNode, parallelTensorNode;  ///< TensorId -> node (-1: no node)
    std::vector<int> rankNode;                               ///< rank -> collapsed node (-1: expanded)
    std::vector<ViewLayer> layers;
    std::vector<std::vector<int>> stageNodes;                ///< stage id -> op nodes (or collapsed nodes) implementing it

    std::size_t count(ViewSide side, ViewNodeKind kind) const;
    /// Nodes on the other side related to `node` by lineage or by implementing the same stage.
    std::vector<int> counterparts(int node) const;
    /// Whether an edge is left out of layout and drawn afterwards: edges of collapsed ranks (a
    /// collapsed rank can have thousands, which makes dot's crossing minimisation explode), and
    /// edges from a layer's forward pass to its backward pass or optimizer update when either end
    /// is a collapsed layer (long edges that would bend the chain of layers into a web).
    bool drawnAfterLayout(const ViewEdge& e) const;
    /// The Graphviz request for one side, and the node index each request node stands for.
    /// Edges drawnAfterLayout are left out unless asked for (for DOT export).
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
    std::string error;                                 ///< non-empty if the view was not laid out: why
    bool cancelled = false, overBudget = false;        ///< the layout was stopped (error says so)
    /// Laid out, but not (all) by dot: which side the layered layout drew, and why. Empty: dot drew it all.
    std::string notice;
    /// Collapsed ranks' edges, bundled; their members' dataflowPaths are left empty.
    std::vector<EdgeBundle> bundles;
};

/// Bundles the edges of collapsed ranks (PlacedView::bundles). placePlanView does it.
void bundleCollapsedRankEdges(const PlanView& view, PlacedView& placed);

/// Lays out both sides, in this process, or under `control` (layout_process.hpp: in a layout
/// process that a cancel or the budget stops; onRequest reports side 0, the logical one, then 1).
PlacedView placePlanView(const PlanView& view, double gap = 240, const LayoutControl* control = nullptr);

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

bool passesFilter(const Plan& plan, const PlanView& view, int node, const ViewFilter& filter);

/// What a node's tooltip says, one fact a line: its full name and kind (or shape); for a parallel
/// node its rank and coordinates (a collective: its group), microbatch; for a tensor with
/// lineage, the slice of the logical tensor it holds, how (shard, replica, partial sum) and with
/// what coefficient (a logical tensor: by how many parallel tensors); for a fold, what it holds.
/// The stage and its status are the caller's (they change as verification runs).
std::vector<std::string> describeNode(const Plan& plan, const PlanView& view, int node, std::size_t maxLineage = 6);

/// Ranks to collapse by default so a large plan opens quickly (empty when the plan is small).
std::set<std::int32_t> defaultCollapsedRanks(const Plan& plan, std::size_t maxExpandedOps = 1500);

PlanView buildPlanView(const Plan& plan, const StagePlan& stages, const ViewOptions& options);

}  // namespace tv
