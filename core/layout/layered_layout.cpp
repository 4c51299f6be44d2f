#include "layout/layered_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace tv {

namespace {

constexpr double kMargin = 8;   // around a cluster's contents, as dot's margin=8
constexpr double kLabel = 14;   // a cluster's label line, above its contents

double size(double v) { return std::isfinite(v) && v > 0 ? v : 0; }

struct Span {
    int lo = std::numeric_limits<int>::max(), hi = -1;
    bool empty() const { return hi < 0; }
    void add(int r) {
        lo = std::min(lo, r);
        hi = std::max(hi, r);
    }
    void add(const Span& s) {
        if (s.empty()) return;
        add(s.lo);
        add(s.hi);
    }
};

}  // namespace

LayoutResult layoutLayered(const LayoutRequest& in) {
    LayoutResult res;
    if (in.nodes.size() > kMaxLayeredNodes || in.edges.size() > kMaxLayeredEdges) {
        res.error = "this view has " + std::to_string(in.nodes.size()) + " nodes and " + std::to_string(in.edges.size()) +
                    " edges, more than the " + std::to_string(kMaxLayeredNodes) + " nodes and " + std::to_string(kMaxLayeredEdges) +
                    " edges any layout here is given: collapse ranks or layer groups, or expand fewer at a time";
        return res;
    }
    const bool lr = in.leftToRight;
    const int n = static_cast<int>(in.nodes.size());
    const int nc = static_cast<int>(in.clusters.size());
    const double nodeSep = std::max(1.0, size(in.nodeSeparation));
    const double rankSep = std::max(1.0, size(in.rankSeparation));

    // Sizes in the frame laid out top to bottom: w along a rank, h across ranks.
    std::vector<double> w(n), h(n);
    for (int i = 0; i < n; ++i) {
        w[i] = size(lr ? in.nodes[i].height : in.nodes[i].width);
        h[i] = size(lr ? in.nodes[i].width : in.nodes[i].height);
    }

    // Clusters: a parent out of range, or a parent chain that loops, is the top level.
    std::vector<int> parent(nc, -1);
    for (int c = 0; c < nc; ++c) {
        const int p = in.clusters[c].parent;
        parent[c] = p >= 0 && p < nc && p != c ? p : -1;
    }
    {
        std::vector<std::uint8_t> state(nc, 0);  // 0 new, 1 on the walk, 2 settled
        std::vector<int> walk;
        for (int c = 0; c < nc; ++c) {
            walk.clear();
            int x = c;
            while (x >= 0 && state[x] == 0) {
                state[x] = 1;
                walk.push_back(x);
                x = parent[x];
            }
            if (x >= 0 && state[x] == 1) parent[x] = -1;  // the walk came back to itself: cut the loop there
            for (int y : walk) state[y] = 2;
        }
    }
    std::vector<int> depth(nc, -1);  // a top-level cluster has depth 1
    int maxDepth = 0;
    for (int c = 0; c < nc; ++c) {
        std::vector<int> chain;
        int x = c;
        while (x >= 0 && depth[x] < 0) {
            chain.push_back(x);
            x = parent[x];
        }
        int d = x >= 0 ? depth[x] : 0;
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) depth[*it] = ++d;
        maxDepth = std::max(maxDepth, depth[c]);
    }
    auto clusterOf = [&](int i) {
        const int c = in.nodes[i].cluster;
        return c >= 0 && c < nc ? c : -1;
    };

    // 1. Ranks: the longest path from a source over the constraint edges, the edges closing a
    // cycle (back edges of a depth-first search in index order) left out.
    auto valid = [&](const LayoutEdge& e) { return e.from >= 0 && e.to >= 0 && e.from < n && e.to < n; };
    std::vector<int> outStart(n + 1, 0), outEdge;
    for (const auto& e : in.edges)
        if (valid(e) && e.constraint && e.from != e.to) ++outStart[e.from + 1];
    for (int i = 0; i < n; ++i) outStart[i + 1] += outStart[i];
    outEdge.resize(outStart[n]);
    {
        std::vector<int> fill(outStart.begin(), outStart.end() - 1);
        for (int k = 0; k < static_cast<int>(in.edges.size()); ++k) {
            const auto& e = in.edges[k];
            if (valid(e) && e.constraint && e.from != e.to) outEdge[fill[e.from]++] = k;
        }
    }
    std::vector<bool> back(in.edges.size(), false);
    {
        std::vector<std::uint8_t> colour(n, 0);  // 0 white, 1 grey, 2 black
        std::vector<std::pair<int, int>> stack;  // node, next out-edge slot
        for (int s = 0; s < n; ++s) {
            if (colour[s]) continue;
            colour[s] = 1;
            stack.push_back({s, outStart[s]});
            while (!stack.empty()) {
                auto& [v, next] = stack.back();
                if (next == outStart[v + 1]) {
                    colour[v] = 2;
                    stack.pop_back();
                    continue;
                }
                const int k = outEdge[next++];
                const int t = in.edges[k].to;
                if (colour[t] == 1) back[k] = true;
                else if (colour[t] == 0) {
                    colour[t] = 1;
                    stack.push_back({t, outStart[t]});
                }
            }
        }
    }
    std::vector<int> rank(n, 0), indegree(n, 0);
    for (int k = 0; k < static_cast<int>(outEdge.size()); ++k)
        if (!back[outEdge[k]]) ++indegree[in.edges[outEdge[k]].to];
    {
        std::vector<int> queue;
        queue.reserve(n);
        for (int i = 0; i < n; ++i)
            if (indegree[i] == 0) queue.push_back(i);
        for (std::size_t q = 0; q < queue.size(); ++q) {
            const int v = queue[q];
            for (int s = outStart[v]; s < outStart[v + 1]; ++s) {
                const int k = outEdge[s];
                if (back[k]) continue;
                const int t = in.edges[k].to;
                rank[t] = std::max(rank[t], rank[v] + 1);
                if (--indegree[t] == 0) queue.push_back(t);
            }
        }
    }
    // A source (a weight, an input) sits just above its first reader, not at the top: else every
    // weight read in the backward pass draws an edge down the whole picture (and every frame
    // paints them all).
    {
        std::vector<bool> hasIn(n, false);
        for (int k = 0; k < static_cast<int>(outEdge.size()); ++k)
            if (!back[outEdge[k]]) hasIn[in.edges[outEdge[k]].to] = true;
        for (int v = 0; v < n; ++v) {
            if (hasIn[v]) continue;
            int first = std::numeric_limits<int>::max();
            for (int s = outStart[v]; s < outStart[v + 1]; ++s)
                if (!back[outEdge[s]]) first = std::min(first, rank[in.edges[outEdge[s]].to]);
            if (first != std::numeric_limits<int>::max()) rank[v] = std::max(rank[v], first - 1);
        }
    }
    int maxRank = 0;
    for (int i = 0; i < n; ++i) maxRank = std::max(maxRank, rank[i]);

    // 2. The y of each rank. Between two ranks there is room for every cluster box to close
    // below the one and open (margin and label) above the other, at any nesting.
    std::vector<double> tallest(maxRank + 1, 0), y(maxRank + 1, 0);
    for (int i = 0; i < n; ++i) tallest[rank[i]] = std::max(tallest[rank[i]], h[i]);
    const double gap = rankSep + maxDepth * (2 * kMargin + kLabel);
    y[0] = maxDepth * (kMargin + kLabel) + tallest[0] / 2;
    for (int r = 1; r <= maxRank; ++r) y[r] = y[r - 1] + tallest[r - 1] / 2 + gap + tallest[r] / 2;

    // 3. Widths, bottom up. A container (a cluster, or the top level at index nc) holds its loose
    // nodes in one lane, ranks side by side within it, and its child clusters in lanes beside
    // it: a child goes into the first lane whose last child ends above its first rank, so
    // clusters in sequence stack and clusters side by side (ranks) stand side by side.
    std::vector<std::vector<int>> loose(nc + 1), children(nc + 1);
    for (int i = 0; i < n; ++i) loose[clusterOf(i) < 0 ? nc : clusterOf(i)].push_back(i);
    for (int c = 0; c < nc; ++c) children[parent[c] < 0 ? nc : parent[c]].push_back(c);
    std::vector<Span> span(nc + 1);
    std::vector<int> byDepth(nc);
    for (int c = 0; c < nc; ++c) byDepth[c] = c;
    std::stable_sort(byDepth.begin(), byDepth.end(), [&](int a, int b) { return depth[a] > depth[b]; });
    std::vector<int> order = byDepth;  // deepest first, then the top level
    order.push_back(nc);
    for (int c : order) {
        for (int i : loose[c]) span[c].add(rank[i]);
        for (int k : children[c]) span[c].add(span[k]);
    }
    struct Lane {
        int lastHi = -1;
        double width = 0;
        std::vector<int> members;
    };
    std::vector<double> width(nc + 1, 0), looseWidth(nc + 1, 0);
    std::vector<std::vector<Lane>> lanes(nc + 1);
    for (int c : order) {
        // Loose nodes: per rank side by side, by index.
        auto& mine = loose[c];
        std::stable_sort(mine.begin(), mine.end(), [&](int a, int b) { return rank[a] < rank[b]; });
        for (std::size_t s = 0; s < mine.size();) {
            std::size_t e = s;
            double row = 0;
            for (; e < mine.size() && rank[mine[e]] == rank[mine[s]]; ++e) row += w[mine[e]] + (e > s ? nodeSep : 0);
            looseWidth[c] = std::max(looseWidth[c], row);
            s = e;
        }
        auto kids = children[c];
        auto lo = [&](int k) { return span[k].empty() ? 0 : span[k].lo; };
        std::stable_sort(kids.begin(), kids.end(), [&](int a, int b) { return lo(a) < lo(b); });
        for (int k : kids) {
            Lane* lane = nullptr;
            for (auto& l : lanes[c])
                if (l.lastHi < lo(k)) {
                    lane = &l;
                    break;
                }
            if (!lane) lane = &lanes[c].emplace_back();
            lane->members.push_back(k);
            lane->lastHi = span[k].empty() ? lo(k) : span[k].hi;
            lane->width = std::max(lane->width, width[k]);
        }
        double content = looseWidth[c];
        int columns = mine.empty() ? 0 : 1;
        for (const auto& l : lanes[c]) {
            content += l.width;
            ++columns;
        }
        if (columns > 1) content += nodeSep * (columns - 1);
        width[c] = c == nc ? content : std::max(content + 2 * kMargin, 2 * kMargin + 24);
    }

    // 4. Positions, top down: each container places its loose lane, then its cluster lanes.
    std::vector<Point> centre(n);
    std::vector<double> left(nc + 1, 0);
    std::vector<int> topDown(order.rbegin(), order.rend());  // the top level, then shallow to deep
    for (int c : topDown) {
        double x = left[c] + (c == nc ? 0 : kMargin);
        const auto& mine = loose[c];
        if (!mine.empty()) {
            for (std::size_t s = 0; s < mine.size();) {
                std::size_t e = s;
                double row = 0;
                for (; e < mine.size() && rank[mine[e]] == rank[mine[s]]; ++e) row += w[mine[e]] + (e > s ? nodeSep : 0);
                double at = x + (looseWidth[c] - row) / 2;
                for (std::size_t k = s; k < e; ++k) {
                    const int i = mine[k];
                    centre[i] = {at + w[i] / 2, y[rank[i]]};
                    at += w[i] + nodeSep;
                }
                s = e;
            }
            x += looseWidth[c] + nodeSep;
        }
        for (const auto& l : lanes[c]) {
            for (int k : l.members) left[k] = x + (l.width - width[k]) / 2;
            x += l.width + nodeSep;
        }
    }

    // Cluster boxes, bottom up: around their nodes and child boxes, a margin, and the label.
    res.clusterBoxes.resize(nc);
    std::vector<double> top(nc + 1, std::numeric_limits<double>::max()), bottom(nc + 1, std::numeric_limits<double>::lowest());
    for (int c : order) {
        for (int i : loose[c]) {
            top[c] = std::min(top[c], centre[i].y - h[i] / 2);
            bottom[c] = std::max(bottom[c], centre[i].y + h[i] / 2);
        }
        for (int k : children[c]) {
            top[c] = std::min(top[c], res.clusterBoxes[k].y);
            bottom[c] = std::max(bottom[c], res.clusterBoxes[k].y + res.clusterBoxes[k].height);
        }
        if (c == nc) break;
        if (top[c] > bottom[c]) {  // an empty cluster: a closed box at its first rank
            top[c] = bottom[c] = y[span[c].empty() ? 0 : span[c].lo];
        }
        const double t = top[c] - kMargin - kLabel, b = bottom[c] + kMargin;
        res.clusterBoxes[c] = Rect{left[c], t, width[c], b - t};
    }

    // 5. Edges: straight, from the bottom of the one to the top of the other (sideways within a
    // rank), as a cubic Bezier like dot's.
    res.edgePaths.resize(in.edges.size());
    res.edgeTips.resize(in.edges.size());
    for (std::size_t k = 0; k < in.edges.size(); ++k) {
        const auto& e = in.edges[k];
        if (!valid(e)) continue;
        const Point a = centre[e.from], b = centre[e.to];
        Point p0, p1;
        if (rank[e.to] > rank[e.from]) {
            p0 = {a.x, a.y + h[e.from] / 2};
            p1 = {b.x, b.y - h[e.to] / 2};
        } else if (rank[e.to] < rank[e.from]) {
            p0 = {a.x, a.y - h[e.from] / 2};
            p1 = {b.x, b.y + h[e.to] / 2};
        } else {
            const double dir = b.x >= a.x ? 1 : -1;
            p0 = {a.x + dir * w[e.from] / 2, a.y};
            p1 = {b.x - dir * w[e.to] / 2, b.y};
        }
        res.edgePaths[k] = {p0, {p0.x + (p1.x - p0.x) / 3, p0.y + (p1.y - p0.y) / 3}, {p0.x + 2 * (p1.x - p0.x) / 3, p0.y + 2 * (p1.y - p0.y) / 3}, p1};
        res.edgeTips[k] = p1;
    }

    double right = width[nc], lowest = 0;
    for (int i = 0; i < n; ++i) {
        right = std::max(right, centre[i].x + w[i] / 2);
        lowest = std::max(lowest, centre[i].y + h[i] / 2);
    }
    for (const auto& b : res.clusterBoxes) {
        right = std::max(right, b.x + b.width);
        lowest = std::max(lowest, b.y + b.height);
    }
    res.bounds = Rect{0, 0, right, lowest};
    res.nodeCenters = std::move(centre);
    if (lr) {  // laid out top to bottom: turn it on its side
        auto turn = [](Point& p) { std::swap(p.x, p.y); };
        for (auto& p : res.nodeCenters) turn(p);
        for (auto& path : res.edgePaths)
            for (auto& p : path) turn(p);
        for (auto& p : res.edgeTips) turn(p);
        for (auto& b : res.clusterBoxes) b = Rect{b.y, b.x, b.height, b.width};
        res.bounds = Rect{0, 0, res.bounds.height, res.bounds.width};
    }
    return res;
}

}  // namespace tv
