#include "explore/pane_alignment.hpp"

#include <algorithm>
#include <cmath>

namespace tv {

namespace {

struct Extent {
    double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    bool empty = true;
    void add(double x, double y) {
        if (!std::isfinite(x) || !std::isfinite(y)) return;
        if (empty) {
            x0 = x1 = x, y0 = y1 = y, empty = false;
            return;
        }
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
    void add(const Rect& r) {
        if (r.width <= 0 && r.height <= 0) return;
        add(r.x, r.y);
        add(r.x + r.width, r.y + r.height);
    }
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const auto n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

Rect sideExtent(const PlanView& view, const PlacedView& placed, ViewSide side) {
    Extent e;
    e.add(side == ViewSide::Logical ? placed.logicalBounds : placed.parallelBounds);
    for (std::size_t i = 0; i < view.nodes.size() && i < placed.nodeRects.size(); ++i)
        if (view.nodes[i].side == side) e.add(placed.nodeRects[i]);
    for (std::size_t g = 0; g < view.groups.size() && g < placed.groupRects.size(); ++g)
        if (view.groups[g].side == side) e.add(placed.groupRects[g]);
    const std::size_t logicalEdges = view.logicalEdges.size();
    for (std::size_t k = 0; k < placed.dataflowPaths.size(); ++k)
        if ((k < logicalEdges) == (side == ViewSide::Logical))
            for (const auto& p : placed.dataflowPaths[k]) e.add(p.x, p.y);
    if (side == ViewSide::Parallel)
        for (const auto& b : placed.bundles)
            for (const auto& p : b.path) e.add(p.x, p.y);
    if (e.empty) return {};
    return Rect{e.x0, e.y0, e.x1 - e.x0, e.y1 - e.y0};
}

namespace {

/// Maps a height through anchors, from one of their coordinates to the other: piecewise linear
/// between anchors, the nearest anchor's offset beyond them, tops onto tops with none.
double mapThrough(const std::vector<StageAlignment::Anchor>& anchors, double y, double StageAlignment::Anchor::*from,
                  double StageAlignment::Anchor::*to, double fromTop, double toTop) {
    if (anchors.empty()) return y - fromTop + toTop;
    if (y <= anchors.front().*from) return y - anchors.front().*from + anchors.front().*to;
    if (y >= anchors.back().*from) return y - anchors.back().*from + anchors.back().*to;
    auto it = std::upper_bound(anchors.begin(), anchors.end(), y, [&](double v, const StageAlignment::Anchor& a) { return v < a.*from; });
    const auto& hi = *it;
    const auto& lo = *(it - 1);
    const double t = (y - lo.*from) / (hi.*from - lo.*from);
    return lo.*to + t * (hi.*to - lo.*to);
}

}  // namespace

double StageAlignment::toParallel(double y) const {
    return mapThrough(anchors, y, &Anchor::logicalY, &Anchor::parallelY, logicalTop, parallelTop);
}

double StageAlignment::toLogical(double y) const {
    return mapThrough(anchors, y, &Anchor::parallelY, &Anchor::logicalY, parallelTop, logicalTop);
}

StageAlignment alignStages(const PlanView& view, const PlacedView& placed) {
    StageAlignment out;
    out.logicalTop = placed.logicalBounds.y;
    out.parallelTop = placed.parallelBounds.y;
    std::vector<StageAlignment::Anchor> candidates;
    for (std::uint32_t s = 0; s < view.stageNodes.size(); ++s) {
        std::vector<double> ly, py;
        for (int n : view.stageNodes[s]) {
            if (n < 0 || static_cast<std::size_t>(n) >= placed.nodeRects.size()) continue;
            // A folded rank stands for every stage of the rank at one height: it says nothing
            // about where a stage is (and would pin the logical bottom to the parallel top).
            if (view.nodes[n].kind == ViewNodeKind::CollapsedRank) continue;
            const auto& r = placed.nodeRects[n];
            (view.nodes[n].side == ViewSide::Logical ? ly : py).push_back(r.y + r.height / 2);
        }
        if (ly.empty() || py.empty()) continue;
        candidates.push_back({median(ly), median(py), s});
    }
    // Longest chain strictly increasing in both coordinates: sort by logical height (then
    // parallel, then stage), and take the longest strictly increasing subsequence of parallel
    // heights among candidates with distinct logical heights (patience sorting, O(n log n)).
    std::stable_sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
        return a.logicalY != b.logicalY ? a.logicalY < b.logicalY : a.parallelY < b.parallelY;
    });
    // Equal logical heights cannot both be kept: keep each height's first (lowest parallel height).
    candidates.erase(std::unique(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) { return a.logicalY == b.logicalY; }),
                     candidates.end());
    std::vector<std::size_t> tails;            // tails[k]: index of the smallest tail of a chain of length k+1
    std::vector<long> previous(candidates.size(), -1);
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        const double y = candidates[i].parallelY;
        auto it = std::lower_bound(tails.begin(), tails.end(), y, [&](std::size_t j, double v) { return candidates[j].parallelY < v; });
        if (it != tails.begin()) previous[i] = static_cast<long>(*(it - 1));
        if (it == tails.end()) tails.push_back(i);
        else *it = i;
    }
    if (tails.empty()) return out;
    for (long i = static_cast<long>(tails.back()); i >= 0; i = previous[i]) out.anchors.push_back(candidates[i]);
    std::reverse(out.anchors.begin(), out.anchors.end());
    return out;
}

}  // namespace tv
