// A small facade over Graphviz (cgraph + gvc) for laying out plan graphs. Graphviz is not
// thread-safe, even for reads: every call goes through one process-wide lock, builds a fresh
// graph, copies the coordinates out as plain values and frees everything.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tv {

struct LayoutNode {
    double width = 1.0, height = 0.5;  ///< points (1/72 inch)
    int cluster = -1;                  ///< index into clusters, -1 for the top level
};

struct LayoutEdge {
    int from = 0, to = 0;
    bool constraint = true;            ///< false: the edge does not influence ranking
};

struct LayoutCluster {
    std::string label;
    int parent = -1;                   ///< enclosing cluster, -1 for the top level
};

struct LayoutRequest {
    std::vector<LayoutNode> nodes;
    std::vector<LayoutEdge> edges;
    std::vector<LayoutCluster> clusters;
    bool leftToRight = false;          ///< rankdir LR instead of TB
    double nodeSeparation = 18, rankSeparation = 30;  ///< points
    double crossingEffort = 1.0;       ///< dot's mclimit: lower is faster, with more crossings
};

struct Point {
    double x = 0, y = 0;
};

struct Rect {
    double x = 0, y = 0, width = 0, height = 0;  ///< top-left corner, y grows downwards
};

struct LayoutResult {
    std::vector<Point> nodeCenters;              ///< y grows downwards (Graphviz y flipped)
    std::vector<std::vector<Point>> edgePaths;   ///< cubic Bezier: p0, (c1, c2, p)*
    std::vector<Point> edgeTips;                 ///< where the arrowhead points (end of the path if none)
    std::vector<Rect> clusterBoxes;
    Rect bounds;
    std::string error;                           ///< non-empty if nothing was laid out: why
    bool cancelled = false;                      ///< a LayoutSession was stopped (error says so)
    bool overBudget = false;                     ///< a LayoutSession ran past its deadline (error says so)
    /// Not dot's layout but the quick layered one (layered_layout.hpp), and why: dot was not
    /// given the view (its size), ran past its time, or failed. Empty: dot laid it out.
    std::string fallback;
};

/// The most nodes (and edges) one layout hands to dot. Dot cannot be interrupted, and its time
/// grows faster than the graph: 9,882 clustered nodes took 150 s, and expanding every rank and
/// layer of Llama3-8B dp2 tp2 pp2 ran 17 minutes. A request past either bound is refused before
/// Graphviz sees it, with both counts in the error.
inline constexpr std::size_t kMaxLayoutNodes = 6000;
inline constexpr std::size_t kMaxLayoutEdges = 24000;

/// Lays out with dot. Thread-safe (serialised); returns coordinates in points. A request past
/// kMaxLayoutNodes or kMaxLayoutEdges is refused (error set, nothing laid out).
LayoutResult layoutGraph(const LayoutRequest& request);

/// Writes the request as DOT text (labels from `nodeLabels`), for export.
std::string toDot(const LayoutRequest& request, const std::vector<std::string>& nodeLabels, const std::string& name);

}  // namespace tv
