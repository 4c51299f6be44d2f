#include "explore/plan_view.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "ops/registry.hpp"

namespace tv {

std::string_view toString(LineageKind k) {
    switch (k) {
        case LineageKind::Shard: return "shard";
        case LineageKind::Replica: return "replica";
        case LineageKind::PartialSum: return "partial sum";
    }
    return "?";
}

std::string layerOfName(std::string_view name) {
    static const std::set<std::string_view> containers{"layers", "layer", "h", "blocks", "block"};
    std::string_view prev;
    std::size_t start = 0, prevStart = 0;
    while (start <= name.size()) {
        auto end = name.find('.', start);
        if (end == std::string_view::npos) end = name.size();
        auto part = name.substr(start, end - start);
        if (!part.empty() && !prev.empty() && containers.count(prev) &&
            std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return std::string(name.substr(prevStart, end - prevStart));
        prev = part;
        prevStart = start;
        start = end + 1;
    }
    return {};
}

std::string foldLayerPrefix(std::string_view name, std::string_view layer) {
    if (layer.empty()) return std::string(name);
    for (std::size_t at = name.find(layer); at != std::string_view::npos; at = name.find(layer, at + 1)) {
        const std::size_t end = at + layer.size();
        if ((at == 0 || name[at - 1] == '.') && end < name.size() && name[end] == '.' && end + 1 < name.size())
            return std::string(name.substr(0, at)) + "\u2026" + std::string(name.substr(end + 1));
    }
    return std::string(name);
}

std::string layerKey(ViewSide side, std::int32_t rank, std::int32_t microbatch, const std::string& layer, Phase phase) {
    std::string key = side == ViewSide::Logical ? "logical" : "rank " + std::to_string(rank);
    if (microbatch >= 0) key += " mb " + std::to_string(microbatch);
    return key + " " + layer + " " + std::string(toString(phase));
}

std::size_t PlanView::count(ViewSide side, ViewNodeKind kind) const {
    return static_cast<std::size_t>(std::count_if(nodes.begin(), nodes.end(), [&](const ViewNode& n) { return n.side == side && n.kind == kind; }));
}

std::vector<int> PlanView::counterparts(int node) const {
    std::vector<int> out;
    if (node < 0 || node >= static_cast<int>(nodes.size())) return out;
    const auto& n = nodes[node];
    for (const auto& e : lineage) {
        if (e.logical == node) out.push_back(e.parallel);
        if (e.parallel == node) out.push_back(e.logical);
    }
    auto sameStage = [&](std::uint32_t stage) {
        if (stage == kNone || stage >= stageNodes.size()) return;
        for (int m : stageNodes[stage])
            if (nodes[m].side != n.side) out.push_back(m);
    };
    if (n.kind == ViewNodeKind::Op) sameStage(n.stage);
    if (n.kind == ViewNodeKind::CollapsedLayer) {
        // The same layer and phase on the other side, expanded or not.
        const auto& mine = layers[n.id];
        for (const auto& other : layers)
            if (other.side != mine.side && other.layer == mine.layer && other.phase == mine.phase && other.node >= 0) out.push_back(other.node);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

bool PlanView::drawnAfterLayout(const ViewEdge& e) const {
    const auto& a = nodes[e.from];
    const auto& b = nodes[e.to];
    if (a.kind == ViewNodeKind::CollapsedRank || b.kind == ViewNodeKind::CollapsedRank) return true;
    if (a.kind != ViewNodeKind::CollapsedLayer && b.kind != ViewNodeKind::CollapsedLayer) return false;
    if (a.layer < 0 || b.layer < 0) return false;
    const auto pa = layers[a.layer].phase, pb = layers[b.layer].phase;
    return pa != pb && !(pa == Phase::Backward && pb == Phase::Optimizer);
}

LayoutRequest PlanView::layoutRequest(ViewSide side, std::vector<int>& requestToNode, bool includeCollapsedEdges) const {
    LayoutRequest req;
    std::vector<int> groupIndex(groups.size(), -1);
    for (std::size_t g = 0; g < groups.size(); ++g)
        if (groups[g].side == side) {
            groupIndex[g] = static_cast<int>(req.clusters.size());
            req.clusters.push_back({groups[g].label, -1});
        }
    for (std::size_t g = 0; g < groups.size(); ++g)
        if (groupIndex[g] >= 0 && groups[g].parent >= 0) req.clusters[groupIndex[g]].parent = groupIndex[groups[g].parent];
    std::vector<int> nodeIndex(nodes.size(), -1);
    requestToNode.clear();
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i].side != side) continue;
        nodeIndex[i] = static_cast<int>(req.nodes.size());
        requestToNode.push_back(static_cast<int>(i));
        req.nodes.push_back({nodes[i].width, nodes[i].height, nodes[i].group >= 0 ? groupIndex[nodes[i].group] : -1});
    }
    for (const auto& e : side == ViewSide::Logical ? logicalEdges : parallelEdges) {
        if (!includeCollapsedEdges && drawnAfterLayout(e)) continue;
        req.edges.push_back({nodeIndex[e.from], nodeIndex[e.to], true});
    }
    if (req.nodes.size() > 400) req.crossingEffort = 0.3;  // bounded crossing minimisation for big graphs
    return req;
}

PlacedView placePlanView(const PlanView& view, double gap, const LayoutControl* control) {
    PlacedView out;
    LayoutSession session(control ? *control : LayoutControl{});
    out.nodeRects.resize(view.nodes.size());
    out.groupRects.resize(view.groups.size());
    double offsetX = 0;
    for (auto side : {ViewSide::Logical, ViewSide::Parallel}) {
        std::vector<int> map;
        auto req = view.layoutRequest(side, map);
        auto res = session.layout(req);
        if (!res.error.empty()) {
            out.error = res.error;
            out.cancelled = res.cancelled;
            out.overBudget = res.overBudget;
            return out;
        }
        if (!res.fallback.empty()) {
            if (!out.notice.empty()) out.notice += "; ";
            out.notice += std::string(side == ViewSide::Logical ? "the logical side" : "the parallel side") +
                          " is drawn with the quick layered layout (straight edges, no crossing reduction): " + res.fallback;
        }
        for (std::size_t i = 0; i < map.size(); ++i) {
            const auto& n = view.nodes[map[i]];
            const auto& c = res.nodeCenters[i];
            out.nodeRects[map[i]] = Rect{offsetX + c.x - n.width / 2, c.y - n.height / 2, n.width, n.height};
        }
        std::size_t k = 0;
        for (std::size_t g = 0; g < view.groups.size(); ++g)
            if (view.groups[g].side == side) {
                auto r = res.clusterBoxes[k++];
                r.x += offsetX;
                out.groupRects[g] = r;
            }
        std::size_t laidOut = 0;
        for (const auto& e : side == ViewSide::Logical ? view.logicalEdges : view.parallelEdges) {
            if (view.drawnAfterLayout(e)) {
                // Filled in below, once every node of this side has its place.
                out.dataflowPaths.emplace_back();
                out.dataflowTips.push_back({});
                continue;
            }
            auto path = res.edgePaths[laidOut];
            for (auto& p : path) p.x += offsetX;
            auto tip = res.edgeTips[laidOut];
            tip.x += offsetX;
            ++laidOut;
            out.dataflowPaths.push_back(std::move(path));
            out.dataflowTips.push_back(tip);
        }
        // Everything drawn for the side, its edges included: dot's box can leave a spline out (an
        // edge from tokens to the embedding's backward reached 1,145 pt past it on GPT-2), and the
        // next side must start past all of it, or it is drawn over (and into the other pane).
        double right = res.bounds.x + res.bounds.width, bottom = res.bounds.y + res.bounds.height;
        for (const auto& path : res.edgePaths)
            for (const auto& q : path) right = std::max(right, q.x), bottom = std::max(bottom, q.y);
        for (const auto& box : res.clusterBoxes) right = std::max(right, box.x + box.width), bottom = std::max(bottom, box.y + box.height);
        Rect bounds{offsetX, 0, right - std::min(0.0, res.bounds.x), bottom - std::min(0.0, res.bounds.y)};
        (side == ViewSide::Logical ? out.logicalBounds : out.parallelBounds) = bounds;
        offsetX += bounds.width + gap;
    }
    // Edges left out of layout: straight for collapsed ranks, from the bottom centre of one node
    // to the top centre of the other; a forward layer's edges to its backward pass or update leave
    // and enter from the right, bowed out to the right, clear of the chain of layers.
    std::size_t k = 0;
    for (const auto* list : {&view.logicalEdges, &view.parallelEdges})
        for (const auto& e : *list) {
            auto& path = out.dataflowPaths[k];
            if (path.empty()) {
                const auto& a = out.nodeRects[e.from];
                const auto& b = out.nodeRects[e.to];
                const bool rank = view.nodes[e.from].kind == ViewNodeKind::CollapsedRank || view.nodes[e.to].kind == ViewNodeKind::CollapsedRank;
                if (rank) {
                    Point p0{a.x + a.width / 2, a.y + a.height}, p1{b.x + b.width / 2, b.y};
                    Point d{(p1.x - p0.x) / 3, (p1.y - p0.y) / 3};
                    path = {p0, {p0.x + d.x, p0.y + d.y}, {p0.x + 2 * d.x, p0.y + 2 * d.y}, p1};
                } else {
                    Point p0{a.x + a.width, a.y + a.height / 2}, p1{b.x + b.width, b.y + b.height / 2};
                    const double bow = 40 + std::min(400.0, std::abs(p1.y - p0.y) / 6);
                    // Never past half the gap: the other side begins there (and its own pane).
                    const Rect& side = view.nodes[e.from].side == ViewSide::Logical ? out.logicalBounds : out.parallelBounds;
                    const double right = std::min(std::max(p0.x, p1.x) + bow, std::max(std::max(p0.x, p1.x) + 20, side.x + side.width + gap / 2));
                    path = {p0, {right, p0.y}, {right, p1.y}, p1};
                }
                out.dataflowTips[k] = path.back();
            }
            ++k;
        }
    bundleCollapsedRankEdges(view, out);
    return out;
}

void bundleCollapsedRankEdges(const PlanView& view, PlacedView& placed) {
    // The edges of a collapsed rank, one per node pair, cross the picture to every node they
    // touch in an expanded rank: a hairball. They go as one edge per (collapsed rank, the other
    // end's rank box, direction), or per pair of collapsed ranks, with the count they stand for.
    placed.bundles.clear();
    auto outerRank = [&](int node) {
        int rank = -1;
        for (int g = view.nodes[node].group; g >= 0; g = view.groups[g].parent)
            if (view.groups[g].kind == ViewGroupKind::Rank) rank = g;
        return rank;
    };
    std::map<std::tuple<int, int, int, bool>, std::size_t> index;  // (collapsed node, other node, other group, outgoing)
    const std::size_t logical = view.logicalEdges.size();
    for (std::size_t k = logical; k < logical + view.parallelEdges.size(); ++k) {
        const auto& e = view.parallelEdges[k - logical];
        const bool fromFolded = view.nodes[e.from].kind == ViewNodeKind::CollapsedRank;
        const bool toFolded = view.nodes[e.to].kind == ViewNodeKind::CollapsedRank;
        if (!fromFolded && !toFolded) continue;
        const int folded = fromFolded ? e.from : e.to;
        const int other = fromFolded ? e.to : e.from;
        const bool otherFolded = fromFolded ? toFolded : fromFolded;
        const int otherGroup = otherFolded ? -1 : outerRank(other);
        if (!otherFolded && otherGroup < 0) continue;  // an end outside every rank box: drawn as it is
        const auto key = std::make_tuple(folded, otherFolded ? other : -1, otherGroup, fromFolded);
        auto [it, fresh] = index.try_emplace(key, placed.bundles.size());
        if (fresh) {
            EdgeBundle b;
            b.collapsed = folded;
            b.otherNode = otherFolded ? other : -1;
            b.otherGroup = otherGroup;
            b.outgoing = fromFolded;
            placed.bundles.push_back(std::move(b));
        }
        auto& b = placed.bundles[it->second];
        b.members.push_back(k);
        b.tensors += e.tensors;
    }
    for (auto& b : placed.bundles) {
        const Rect& c = placed.nodeRects[b.collapsed];
        const Point centre{c.x + c.width / 2, c.y + c.height / 2};
        Rect target = b.otherNode >= 0 ? placed.nodeRects[b.otherNode] : placed.groupRects[b.otherGroup];
        // The point of the other end nearest the collapsed node, and the collapsed node's border
        // point towards it.
        auto clampTo = [](const Rect& r, Point p) {
            return Point{std::clamp(p.x, r.x, r.x + r.width), std::clamp(p.y, r.y, r.y + r.height)};
        };
        const Point far = clampTo(target, centre);
        const Point near = clampTo(c, far);
        const Point p0 = b.outgoing ? near : far, p1 = b.outgoing ? far : near;
        const Point d{(p1.x - p0.x) / 3, (p1.y - p0.y) / 3};
        b.path = {p0, {p0.x + d.x, p0.y + d.y}, {p0.x + 2 * d.x, p0.y + 2 * d.y}, p1};
        // Its members are drawn as the bundle, not one by one.
        for (auto k : b.members) {
            placed.dataflowPaths[k].clear();
            placed.dataflowTips[k] = {};
        }
    }
}

std::vector<std::string> describeNode(const Plan& plan, const PlanView& view, int node, std::size_t maxLineage) {
    std::vector<std::string> out;
    if (node < 0 || static_cast<std::size_t>(node) >= view.nodes.size()) return out;
    const auto& n = view.nodes[node];
    const Graph& g = n.side == ViewSide::Logical ? plan.logical : plan.parallel;
    out.push_back(n.name);
    out.push_back(n.label);
    auto rankLine = [&](std::int32_t r) {
        std::string coords = plan.coordinates(r);
        return "rank " + std::to_string(r) + (coords.empty() ? "" : " (" + coords + ")");
    };
    if (n.kind == ViewNodeKind::Op && n.side == ViewSide::Parallel) {
        const auto& op = g.ops[n.id];
        if (op.group != kNone && op.group < plan.groups.size()) {
            std::string ranks;
            for (auto r : plan.groups[op.group]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
            out.push_back("collective over ranks " + ranks + "; drawn on " + rankLine(g.homeRank(n.id)));
        } else if (op.rank >= 0) {
            out.push_back(rankLine(op.rank));
        }
        if (op.microbatch >= 0) out.push_back("microbatch " + std::to_string(op.microbatch));
        out.push_back("phase " + std::string(toString(op.phase)));
    } else if (n.kind == ViewNodeKind::Op) {
        out.push_back("phase " + std::string(toString(g.ops[n.id].phase)));
    } else if (n.kind == ViewNodeKind::Tensor) {
        const auto& t = g.tensors[n.id];
        if (n.side == ViewSide::Parallel && t.rank >= 0) out.push_back(rankLine(t.rank));
        if (t.microbatch >= 0) out.push_back("microbatch " + std::to_string(t.microbatch));
        std::size_t shown = 0, total = 0;
        for (const auto& e : view.lineage) {
            if ((n.side == ViewSide::Parallel ? e.parallel : e.logical) != node) continue;
            ++total;
            if (shown >= maxLineage) continue;
            ++shown;
            // The slice: the box of the record's slice whose copies name this parallel tensor.
            // (A folded rank or layer at the parallel end is no tensor: no slice to name.)
            const bool tensor = view.nodes[e.parallel].kind == ViewNodeKind::Tensor;
            const TensorId pt = view.nodes[e.parallel].id;
            std::string box;
            if (tensor && e.record < plan.lineage.size())
                for (const auto& s : plan.lineage[e.record].slices) {
                    for (const auto& copy : s.copies)
                        for (const auto& term : copy)
                            if (term.tensor == pt && box.empty()) box = s.box.toString();
                    if (!box.empty()) break;
                }
            const std::string how = std::string(toString(e.kind)) + (e.coeff.isOne() ? "" : ", coefficient " + e.coeff.toString());
            if (n.side == ViewSide::Parallel)
                out.push_back("holds " + view.nodes[e.logical].name + box + " (" + how + ")");
            else
                out.push_back(box.empty() ? "held by " + view.nodes[e.parallel].name + " (" + how + ")"
                                          : box + " held by " + view.nodes[e.parallel].name + " (" + how + ")");
        }
        if (total > shown) out.push_back("and " + std::to_string(total - shown) + " more lineage edges");
    } else if (n.kind == ViewNodeKind::CollapsedRank) {
        out.push_back(rankLine(static_cast<std::int32_t>(n.id)) + ", folded");
    } else if (n.kind == ViewNodeKind::CollapsedLayer) {
        const auto& l = view.layers[n.id];
        out.push_back(std::to_string(l.ops) + " ops folded" + (l.rank >= 0 ? " on " + rankLine(l.rank) : std::string()));
    }
    return out;
}

bool ViewFilter::empty() const {
    if (rank >= 0 || microbatch >= 0 || phase >= 0 || !opKind.empty()) return false;
    for (auto c : coordinate)
        if (c >= 0) return false;
    return true;
}

bool passesFilter(const Plan& plan, const PlanView& view, int node, const ViewFilter& f) {
    if (f.empty()) return true;
    const auto& n = view.nodes[node];
    const auto& reg = OpRegistry::instance();
    const auto& g = n.side == ViewSide::Logical ? plan.logical : plan.parallel;
    std::int32_t rank = -1, mb = -1;
    if (n.kind == ViewNodeKind::Op) {
        const auto& o = g.ops[n.id];
        if (!f.opKind.empty() && std::string(reg.spec(o.kind).name).find(f.opKind) == std::string::npos) return false;
        if (f.phase >= 0 && static_cast<int>(o.phase) != f.phase) return false;
        rank = g.homeRank(n.id);
        mb = o.microbatch;
    } else if (n.kind == ViewNodeKind::Tensor) {
        if (!f.opKind.empty() || f.phase >= 0) return false;  // the filter asks for ops
        rank = g.tensors[n.id].rank;
        mb = g.tensors[n.id].microbatch;
    } else if (n.kind == ViewNodeKind::CollapsedLayer) {
        const auto& layer = view.layers[n.id];
        if (!f.opKind.empty()) return false;
        if (f.phase >= 0 && static_cast<int>(layer.phase) != f.phase) return false;
        rank = layer.rank;
        mb = layer.microbatch;
    } else {
        if (!f.opKind.empty() || f.phase >= 0 || f.microbatch >= 0) return false;
        rank = static_cast<std::int32_t>(n.id);
    }
    if (n.side == ViewSide::Logical) return true;
    if (f.rank >= 0 && rank != f.rank) return false;
    if (f.microbatch >= 0 && mb != f.microbatch) return false;
    for (auto a : kAxes) {
        auto want = f.coordinate[static_cast<std::size_t>(a)];
        if (want >= 0 && (rank < 0 || plan.ranks[rank].at(a) != want)) return false;
    }
    return true;
}

std::set<std::int32_t> defaultCollapsedRanks(const Plan& plan, std::size_t maxExpandedOps) {
    std::set<std::int32_t> out;
    if (plan.parallel.ops.size() <= maxExpandedOps) return out;
    for (std::int32_t r = 0; r < static_cast<std::int32_t>(plan.ranks.size()); ++r) out.insert(r);
    return out;
}

namespace {

// A box wide enough for its name at the Studio's 8 pt (7 pt per character covers wide letters
// and underscores), up to kMaxLabelChars: a longer name is shown shortened in the middle.
constexpr std::size_t kMaxLabelChars = 34;

double labelWidth(const std::string& a, const std::string& b) {
    return 16.0 + 7.0 * static_cast<double>(std::min(kMaxLabelChars, std::max(a.size(), b.size())));
}

}  // namespace

PlanView buildPlanView(const Plan& plan, const StagePlan& stages, const ViewOptions& options) {
    const auto& L = plan.logical;
    const auto& P = plan.parallel;
    const auto& reg = OpRegistry::instance();
    PlanView v;
    v.logicalOpNode.assign(L.ops.size(), -1);
    v.parallelOpNode.assign(P.ops.size(), -1);
    v.logicalTensorNode.assign(L.tensors.size(), -1);
    v.parallelTensorNode.assign(P.tensors.size(), -1);
    v.rankNode.assign(plan.ranks.size(), -1);

    // Which stage proves each op and lineage tensor (the first stage that contains it).
    std::vector<std::uint32_t> lOpStage(L.ops.size(), kNone), pOpStage(P.ops.size(), kNone);
    std::vector<std::uint32_t> lTensorStage(L.tensors.size(), kNone), pTensorStage(P.tensors.size(), kNone);
    std::uint32_t stageCount = 0;
    for (const auto& s : stages.stages) {
        stageCount = std::max(stageCount, s.id + 1);
        for (auto op : s.logicalOps)
            if (lOpStage[op] == kNone) lOpStage[op] = s.id;
        for (auto op : s.parallelOps)
            if (pOpStage[op] == kNone) pOpStage[op] = s.id;
        const auto& rec = plan.lineage[s.output];
        if (lTensorStage[rec.logical] == kNone) lTensorStage[rec.logical] = s.id;
        for (const auto& sl : rec.slices)
            for (const auto& c : sl.copies)
                for (const auto& t : c) pTensorStage[t.tensor] = s.id;
    }
    std::vector<bool> glueStage(stageCount, true);
    for (const auto& s : stages.stages) glueStage[s.id] = s.glue();

    // Layer groups: ops whose names lie in a numbered layer, per phase, per container. A
    // communication op belongs to the phase of whatever produced its first input.
    std::vector<std::size_t> rankOps(plan.ranks.size(), 0);
    for (OpId op = 0; op < P.ops.size(); ++op) {
        auto r = P.homeRank(op);
        if (r >= 0 && r < static_cast<std::int32_t>(rankOps.size())) ++rankOps[r];
    }
    std::map<std::string, int> layerIndex;
    auto assignLayers = [&](ViewSide side, const Graph& g, std::vector<int>& opLayer) {
        opLayer.assign(g.ops.size(), -1);
        std::vector<Phase> phase(g.ops.size(), Phase::Forward);
        for (OpId op : g.topo) {
            phase[op] = g.ops[op].phase;
            if (phase[op] == Phase::Communication) {
                phase[op] = Phase::Forward;
                auto ins = g.inputs(op);
                if (!ins.empty() && g.tensors[ins[0]].producer != kNone) phase[op] = phase[g.tensors[ins[0]].producer];
            }
            auto layer = layerOfName(plan.opName(g, op));
            if (layer.empty()) continue;
            std::int32_t rank = -1, mb = -1;
            if (side == ViewSide::Parallel) {
                rank = g.homeRank(op);
                if (rank < 0 || options.collapsedRanks.count(rank)) continue;
                if (options.groupMicrobatches) mb = g.ops[op].microbatch;
            }
            auto key = layerKey(side, rank, mb, layer, phase[op]);
            auto [it, fresh] = layerIndex.emplace(key, static_cast<int>(v.layers.size()));
            if (fresh) v.layers.push_back({side, rank, mb, layer, phase[op], key, 0, 0, false, -1, -1});
            ++v.layers[it->second].ops;
            opLayer[op] = it->second;
        }
    };
    std::vector<int> lOpLayer, pOpLayer;
    assignLayers(ViewSide::Logical, L, lOpLayer);
    assignLayers(ViewSide::Parallel, P, pOpLayer);
    for (auto& layer : v.layers) {
        const std::size_t container = layer.side == ViewSide::Logical ? L.ops.size() : rankOps[layer.rank];
        layer.collapsed = layer.ops >= 2 && (options.collapsedLayers.count(layer.key) ||
                                             (container > options.collapseLayersAbove && !options.expandedLayers.count(layer.key) &&
                                              !(layer.side == ViewSide::Parallel && options.ranksWithLayersExpanded.count(layer.rank))));
    }
    {
        std::vector<std::set<std::uint32_t>> layerStages(v.layers.size());
        for (OpId op = 0; op < L.ops.size(); ++op)
            if (lOpLayer[op] >= 0 && lOpStage[op] != kNone) layerStages[lOpLayer[op]].insert(lOpStage[op]);
        for (OpId op = 0; op < P.ops.size(); ++op)
            if (pOpLayer[op] >= 0 && pOpStage[op] != kNone) layerStages[pOpLayer[op]].insert(pOpStage[op]);
        for (std::size_t i = 0; i < v.layers.size(); ++i) v.layers[i].stages = layerStages[i].size();
    }

    auto addGroup = [&](ViewGroup g) {
        v.groups.push_back(std::move(g));
        return static_cast<int>(v.groups.size() - 1);
    };
    // Groups are created when their first node is placed, so none is empty.
    std::vector<int> rankGroup(plan.ranks.size(), -1);
    std::map<std::pair<std::int32_t, std::int32_t>, int> mbGroup;
    auto rankGroupFor = [&](std::int32_t r) -> int {
        if (r < 0 || r >= static_cast<std::int32_t>(rankGroup.size()) || options.collapsedRanks.count(r)) return -1;
        if (rankGroup[r] < 0)
            rankGroup[r] = addGroup({ViewSide::Parallel, ViewGroupKind::Rank, "rank " + std::to_string(r) + " (" + plan.coordinates(r) + ")", -1, r, -1, kNone, -1});
        return rankGroup[r];
    };
    auto parallelGroup = [&](std::int32_t rank, std::int32_t mb) -> int {
        const int rg = rankGroupFor(rank);
        if (rg < 0 || !options.groupMicrobatches || mb < 0) return rg;
        auto it = mbGroup.find({rank, mb});
        if (it == mbGroup.end())
            it = mbGroup.emplace(std::pair(rank, mb), addGroup({ViewSide::Parallel, ViewGroupKind::Microbatch, "microbatch " + std::to_string(mb), rg, rank, mb, kNone, -1})).first;
        return it->second;
    };
    auto layerGroupFor = [&](int layer, int parent) -> int {
        auto& info = v.layers[layer];
        if (info.ops < 2) return parent;
        if (info.group < 0)
            info.group = addGroup({info.side, ViewGroupKind::Layer, info.layer + " · " + std::string(toString(info.phase)), parent, info.rank, info.microbatch, kNone, layer});
        return info.group;
    };
    std::map<std::uint32_t, int> stageGroup;
    auto stageGroupFor = [&](std::uint32_t stage, int parent) -> int {
        if (stage == kNone || glueStage[stage]) return parent;
        auto it = stageGroup.find(stage);
        if (it != stageGroup.end()) return it->second;
        const auto& s = stages.stages[stage];
        std::string ops;
        for (std::size_t k = 0; k < s.logicalOps.size() && k < 3; ++k) ops += (k ? ", " : "") + plan.opName(L, s.logicalOps[k]);
        if (s.logicalOps.size() > 3) ops += ", ...";
        return stageGroup[stage] = addGroup({ViewSide::Logical, ViewGroupKind::Stage, "stage " + std::to_string(s.id) + ": " + ops, parent, -1, -1, s.id, -1});
    };

    auto addNode = [&](ViewNode n) {
        v.nodes.push_back(std::move(n));
        return static_cast<int>(v.nodes.size() - 1);
    };
    auto opNode = [&](ViewSide side, const Graph& g, OpId op, std::uint32_t stage, int group, int layer) {
        ViewNode n;
        n.side = side;
        n.kind = ViewNodeKind::Op;
        n.id = op;
        n.name = plan.opName(g, op);
        n.label = std::string(reg.spec(g.ops[op].kind).name);
        n.stage = stage;
        n.group = group;
        n.layer = layer;
        if (layer >= 0) n.shown = foldLayerPrefix(n.name, v.layers[layer].layer);
        n.width = labelWidth(n.shown.empty() ? n.name : n.shown, n.label);
        n.height = 30;
        return addNode(std::move(n));
    };
    auto tensorNode = [&](ViewSide side, const Graph& g, TensorId t, std::uint32_t stage, int group, int layer) {
        ViewNode n;
        n.side = side;
        n.kind = ViewNodeKind::Tensor;
        n.id = t;
        n.name = plan.tensorName(g, t);
        n.label = shapeToString(plan.shape(g, t));
        n.stage = stage;
        n.group = group;
        n.layer = layer;
        if (layer >= 0) n.shown = foldLayerPrefix(n.name, v.layers[layer].layer);
        n.width = labelWidth(n.shown.empty() ? n.name : n.shown, n.label) - 4;
        n.height = 26;
        return addNode(std::move(n));
    };
    auto collapsedLayerNode = [&](int layer, int group) {
        auto& info = v.layers[layer];
        if (info.node >= 0) return info.node;
        ViewNode n;
        n.side = info.side;
        n.kind = ViewNodeKind::CollapsedLayer;
        n.id = static_cast<std::uint32_t>(layer);
        n.name = info.layer + " " + std::string(toString(info.phase));
        n.label = std::to_string(info.ops) + " ops, " + std::to_string(info.stages) + " stages";
        n.group = group;
        n.layer = layer;
        n.width = labelWidth(n.name, n.label) + 20;
        n.height = 40;
        return info.node = addNode(std::move(n));
    };

    // Logical nodes: ops in collapsed layers become their layer's node.
    for (OpId op : L.topo) {
        const auto stage = lOpStage[op];
        const int layer = lOpLayer[op];
        if (layer >= 0 && v.layers[layer].collapsed) {
            v.logicalOpNode[op] = collapsedLayerNode(layer, -1);
            continue;
        }
        const int parent = layer >= 0 ? layerGroupFor(layer, -1) : -1;
        v.logicalOpNode[op] = opNode(ViewSide::Logical, L, op, stage, stageGroupFor(stage, parent), layer);
    }
    std::vector<bool> lineageTensorL(L.tensors.size(), false), lineageTensorP(P.tensors.size(), false);
    for (const auto& rec : plan.lineage) {
        lineageTensorL[rec.logical] = true;
        for (const auto& sl : rec.slices)
            for (const auto& c : sl.copies)
                for (const auto& t : c) lineageTensorP[t.tensor] = true;
    }
    // A tensor sits with its producer, or (an input) with its first consumer; inside a collapsed
    // layer it is that layer's node.
    auto homeOp = [](const Graph& g, TensorId t) -> OpId {
        if (g.tensors[t].producer != kNone) return g.tensors[t].producer;
        auto cons = g.consumers(t);
        return cons.empty() ? kNone : cons[0];
    };
    for (TensorId t = 0; t < L.tensors.size(); ++t) {
        if (!lineageTensorL[t]) continue;
        const OpId home = homeOp(L, t);
        const int homeNode = home != kNone ? v.logicalOpNode[home] : -1;
        if (homeNode >= 0 && v.nodes[homeNode].kind == ViewNodeKind::CollapsedLayer) {
            v.logicalTensorNode[t] = homeNode;
            continue;
        }
        const int group = L.tensors[t].producer != kNone ? v.nodes[homeNode].group : -1;
        v.logicalTensorNode[t] = tensorNode(ViewSide::Logical, L, t, lTensorStage[t], group, L.tensors[t].producer != kNone ? v.nodes[homeNode].layer : -1);
    }

    // Parallel nodes: each op lives on its home rank (its own, or its first output's for a collective).
    // A collapsed rank that holds nothing (another replica of a plan drawn as stored) is not drawn.
    std::vector<bool> holds(plan.ranks.size(), false);
    for (OpId op = 0; op < P.ops.size(); ++op)
        if (auto r = P.homeRank(op); r >= 0 && r < static_cast<std::int32_t>(holds.size())) holds[r] = true;
    for (const auto& t : P.tensors)
        if (t.rank >= 0 && t.rank < static_cast<std::int32_t>(holds.size())) holds[t.rank] = true;
    for (std::int32_t r = 0; r < static_cast<std::int32_t>(plan.ranks.size()); ++r) {
        if (!options.collapsedRanks.count(r) || !holds[r]) continue;
        ViewNode n;
        n.side = ViewSide::Parallel;
        n.kind = ViewNodeKind::CollapsedRank;
        n.id = static_cast<std::uint32_t>(r);
        n.name = "rank " + std::to_string(r);
        n.label = plan.coordinates(r);
        n.width = labelWidth(n.name, n.label) + 20;
        n.height = 40;
        v.rankNode[r] = addNode(std::move(n));
    }
    for (OpId op : P.topo) {
        auto r = P.homeRank(op);
        if (r >= 0 && v.rankNode[r] >= 0) {
            v.parallelOpNode[op] = v.rankNode[r];
            continue;
        }
        const int container = parallelGroup(r, P.ops[op].microbatch);
        const int layer = pOpLayer[op];
        if (layer >= 0 && v.layers[layer].collapsed) {
            v.parallelOpNode[op] = collapsedLayerNode(layer, container);
            continue;
        }
        const int group = layer >= 0 ? layerGroupFor(layer, container) : container;
        v.parallelOpNode[op] = opNode(ViewSide::Parallel, P, op, pOpStage[op], group, layer);
    }
    for (TensorId t = 0; t < P.tensors.size(); ++t) {
        if (!lineageTensorP[t]) continue;
        auto r = P.tensors[t].rank;
        if (r >= 0 && v.rankNode[r] >= 0) {
            v.parallelTensorNode[t] = v.rankNode[r];
            continue;
        }
        const OpId home = homeOp(P, t);
        // A tensor sits with its home op only on its own rank: a collective's output on another
        // rank than the collective's first (logits@r1 of an all-reduce drawn on rank 0) is drawn
        // in its rank's box.
        const bool homeOnItsRank = home != kNone && (r < 0 || P.homeRank(home) == r);
        const int homeNode = homeOnItsRank ? v.parallelOpNode[home] : -1;
        if (homeNode >= 0 && v.nodes[homeNode].kind == ViewNodeKind::CollapsedLayer) {
            v.parallelTensorNode[t] = homeNode;
            continue;
        }
        int group = parallelGroup(r, P.tensors[t].microbatch), layer = -1;
        if (P.tensors[t].producer != kNone && homeNode >= 0 && v.nodes[homeNode].kind == ViewNodeKind::Op) {
            group = v.nodes[homeNode].group;
            layer = v.nodes[homeNode].layer;
        }
        v.parallelTensorNode[t] = tensorNode(ViewSide::Parallel, P, t, pTensorStage[t], group, layer);
    }

    // Dataflow: producer -> (tensor node) -> consumer, deduplicated, no self-loops.
    auto dataflow = [&](const Graph& g, const std::vector<int>& opNode, const std::vector<int>& tensorNode, std::vector<ViewEdge>& out) {
        // Per node pair: its edge and the last tensor counted on it (tensors come in order, so a
        // tensor read by several ops behind one node is counted once).
        std::unordered_map<std::uint64_t, std::pair<std::size_t, TensorId>> seen;
        auto add = [&](int a, int b, TensorId t) {
            if (a < 0 || b < 0 || a == b) return;
            auto key = (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b);
            auto [it, fresh] = seen.try_emplace(key, out.size(), t);
            if (fresh) {
                out.push_back({a, b, t});
            } else if (it->second.second != t) {
                it->second.second = t;
                ++out[it->second.first].tensors;
            }
        };
        for (TensorId t = 0; t < g.tensors.size(); ++t) {
            int prod = g.tensors[t].producer == kNone ? -1 : opNode[g.tensors[t].producer];
            int tn = tensorNode[t];
            if (tn >= 0) add(prod, tn, t);
            const int from = tn >= 0 ? tn : prod;
            for (auto c : g.consumers(t)) {
                // An input shared by every layer (RoPE tables, the mask) is not drawn into each
                // collapsed layer: a fan of identical edges says nothing and tangles the layout.
                const int to = opNode[c];
                if (g.tensors[t].producer == kNone && to >= 0 && from != to && v.nodes[to].kind == ViewNodeKind::CollapsedLayer &&
                    layerOfName(plan.tensorName(g, t)) != v.layers[v.nodes[to].layer].layer)
                    continue;
                add(from, to, t);
            }
        }
    };
    dataflow(L, v.logicalOpNode, v.logicalTensorNode, v.logicalEdges);
    dataflow(P, v.parallelOpNode, v.parallelTensorNode, v.parallelEdges);

    // Lineage edges, styled by kind; one per pair of nodes where either side is collapsed.
    auto isCollapsed = [&](int node) { return v.nodes[node].kind == ViewNodeKind::CollapsedRank || v.nodes[node].kind == ViewNodeKind::CollapsedLayer; };
    std::unordered_set<std::uint64_t> seenLineage;
    for (std::uint32_t r = 0; r < plan.lineage.size(); ++r) {
        const auto& rec = plan.lineage[r];
        const auto& full = plan.shape(L, rec.logical);
        int ln = v.logicalTensorNode[rec.logical];
        for (const auto& sl : rec.slices) {
            bool whole = sl.box.extent() == full;
            for (const auto& c : sl.copies)
                for (const auto& t : c) {
                    int pn = v.parallelTensorNode[t.tensor];
                    if (ln < 0 || pn < 0) continue;
                    auto kind = c.size() > 1 ? LineageKind::PartialSum : (whole ? LineageKind::Replica : LineageKind::Shard);
                    if (isCollapsed(ln) || isCollapsed(pn)) {
                        auto key = (static_cast<std::uint64_t>(ln) << 32) | static_cast<std::uint32_t>(pn);
                        if (!seenLineage.insert(key).second) continue;
                    }
                    v.lineage.push_back({ln, pn, kind, t.coeff, r});
                }
        }
    }

    // Which nodes implement each stage, on either side (collapsed nodes stand for their ops).
    v.stageNodes.assign(stageCount, {});
    for (const auto& s : stages.stages) {
        auto& list = v.stageNodes[s.id];
        for (auto op : s.logicalOps) list.push_back(v.logicalOpNode[op]);
        for (auto op : s.parallelOps) list.push_back(v.parallelOpNode[op]);
        list.erase(std::remove(list.begin(), list.end(), -1), list.end());
        std::sort(list.begin(), list.end());
        list.erase(std::unique(list.begin(), list.end()), list.end());
    }
    return v;
}

}  // namespace tv
