// The quick layered layout: what a view is drawn with when dot cannot draw it in time (too big,
// past its budget, or failed). Pure C++, no Graphviz, deterministic, and linear in the nodes and
// edges (plus a sort of each cluster's children): the 23,482 parallel nodes of Llama3-8B dp2 tp2
// pp2 with every rank and layer expanded take well under a second, where dot ran 17 minutes.
//
// It gives what the views rely on and no more: every node in every cluster box that holds it,
// no two nodes overlapping, sibling cluster boxes disjoint, and every edge that is not on a cycle
// pointing down (one rank per longest path from a source). Nodes are not ordered to reduce
// crossings and edges are straight; the notice that comes with it says so.
#pragma once

#include <cstddef>

#include "layout/graph_layout.hpp"

namespace tv {

/// The most nodes (and edges) the layered layout is given: past them a view is refused outright
/// (the scene itself would not be usable).
inline constexpr std::size_t kMaxLayeredNodes = 200000;
inline constexpr std::size_t kMaxLayeredEdges = 800000;

/// Lays the request out in layers. Never fails within the bounds above (error set past them).
/// Malformed cluster references (out of range, or a parent chain that loops) count as top level.
LayoutResult layoutLayered(const LayoutRequest& request);

}  // namespace tv
