#include "explore/plan_view.hpp"

#include <algorithm>
#include <map>
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
    if (n.kind == ViewNodeKind::Op && n.stage != kNone)
        for (int i = 0; i < static_cast<int>(nodes.size()); ++i)
            if (nodes[i].side != n.side && nodes[i].kind == ViewNodeKind::Op && nodes[i].stage == n.stage) out.push_back(i);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
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
    // Edges into or out of a collapsed rank are not laid out (a collapsed rank can have thousands,
    // which makes dot's crossing minimisation explode); they are drawn straight afterwards.
    for (const auto& e : side == ViewSide::Logical ? logicalEdges : parallelEdges) {
        if (!includeCollapsedEdges && (nodes[e.from].kind == ViewNodeKind::CollapsedRank || nodes[e.to].kind == ViewNodeKind::CollapsedRank))
            continue;
        req.edges.push_back({nodeIndex[e.from], nodeIndex[e.to], true});
    }
    if (req.nodes.size() > 400) req.crossingEffort = 0.3;  // bounded crossing minimisation for big graphs
    return req;
}

PlacedView placePlanView(const PlanView& view, double gap) {
    PlacedView out;
    out.nodeRects.resize(view.nodes.size());
    out.groupRects.resize(view.groups.size());
    double offsetX = 0;
    for (auto side : {ViewSide::Logical, ViewSide::Parallel}) {
        std::vector<int> map;
        auto req = view.layoutRequest(side, map);
        auto res = layoutGraph(req);
        if (!res.error.empty()) {
            out.error = res.error;
            return out;
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
            const bool straight = view.nodes[e.from].kind == ViewNodeKind::CollapsedRank || view.nodes[e.to].kind == ViewNodeKind::CollapsedRank;
            if (straight) {
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
        Rect bounds{offsetX, 0, res.bounds.width, res.bounds.height};
        (side == ViewSide::Logical ? out.logicalBounds : out.parallelBounds) = bounds;
        offsetX += res.bounds.width + gap;
    }
    // Straight edges for collapsed ranks: from the bottom centre of one node to the top centre of the other.
    std::size_t k = 0;
    for (const auto* list : {&view.logicalEdges, &view.parallelEdges})
        for (const auto& e : *list) {
            auto& path = out.dataflowPaths[k];
            if (path.empty()) {
                const auto& a = out.nodeRects[e.from];
                const auto& b = out.nodeRects[e.to];
                Point p0{a.x + a.width / 2, a.y + a.height}, p1{b.x + b.width / 2, b.y};
                Point d{(p1.x - p0.x) / 3, (p1.y - p0.y) / 3};
                path = {p0, {p0.x + d.x, p0.y + d.y}, {p0.x + 2 * d.x, p0.y + 2 * d.y}, p1};
                out.dataflowTips[k] = p1;
            }
            ++k;
        }
    return out;
}

bool ViewFilter::empty() const {
    if (rank >= 0 || microbatch >= 0 || phase >= 0 || !opKind.empty()) return false;
    for (auto c : coordinate)
        if (c >= 0) return false;
    return true;
}

bool passesFilter(const Plan& plan, const ViewNode& n, const ViewFilter& f) {
    if (f.empty()) return true;
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

double labelWidth(const std::string& a, const std::string& b) {
    return 16.0 + 6.5 * static_cast<double>(std::max(a.size(), b.size()));
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
    for (const auto& s : stages.stages) {
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

    // Logical groups: one per op stage.
    std::map<std::uint32_t, int> stageGroup;
    for (const auto& s : stages.stages) {
        if (s.glue()) continue;
        std::string ops;
        for (std::size_t k = 0; k < s.logicalOps.size() && k < 3; ++k) ops += (k ? ", " : "") + plan.opName(L, s.logicalOps[k]);
        if (s.logicalOps.size() > 3) ops += ", ...";
        stageGroup[s.id] = static_cast<int>(v.groups.size());
        v.groups.push_back({ViewSide::Logical, ViewGroupKind::Stage, "stage " + std::to_string(s.id) + ": " + ops, -1, -1, -1, s.id});
    }
    // Parallel groups: ranks, and microbatches inside them.
    std::vector<int> rankGroup(plan.ranks.size(), -1);
    std::map<std::pair<std::int32_t, std::int32_t>, int> mbGroup;
    for (std::int32_t r = 0; r < static_cast<std::int32_t>(plan.ranks.size()); ++r) {
        if (options.collapsedRanks.count(r)) continue;
        rankGroup[r] = static_cast<int>(v.groups.size());
        v.groups.push_back({ViewSide::Parallel, ViewGroupKind::Rank, "rank " + std::to_string(r) + " (" + plan.coordinates(r) + ")", -1, r, -1, kNone});
    }
    auto parallelGroup = [&](std::int32_t rank, std::int32_t mb) -> int {
        if (rank < 0 || rank >= static_cast<std::int32_t>(rankGroup.size()) || rankGroup[rank] < 0) return -1;
        if (!options.groupMicrobatches || mb < 0) return rankGroup[rank];
        auto [it, fresh] = mbGroup.emplace(std::pair(rank, mb), static_cast<int>(v.groups.size()));
        if (fresh) v.groups.push_back({ViewSide::Parallel, ViewGroupKind::Microbatch, "microbatch " + std::to_string(mb), rankGroup[rank], rank, mb, kNone});
        return it->second;
    };

    auto addNode = [&](ViewNode n) {
        v.nodes.push_back(std::move(n));
        return static_cast<int>(v.nodes.size() - 1);
    };
    auto opNode = [&](ViewSide side, const Graph& g, OpId op, std::uint32_t stage, int group) {
        ViewNode n;
        n.side = side;
        n.kind = ViewNodeKind::Op;
        n.id = op;
        n.name = plan.opName(g, op);
        n.label = std::string(reg.spec(g.ops[op].kind).name);
        n.stage = stage;
        n.group = group;
        n.width = labelWidth(n.name, n.label);
        n.height = 30;
        return addNode(std::move(n));
    };
    auto tensorNode = [&](ViewSide side, const Graph& g, TensorId t, std::uint32_t stage, int group) {
        ViewNode n;
        n.side = side;
        n.kind = ViewNodeKind::Tensor;
        n.id = t;
        n.name = plan.tensorName(g, t);
        n.label = shapeToString(plan.shape(g, t));
        n.stage = stage;
        n.group = group;
        n.width = labelWidth(n.name, n.label) - 4;
        n.height = 26;
        return addNode(std::move(n));
    };

    // Logical nodes.
    for (OpId op : L.topo) {
        const auto stage = lOpStage[op];
        v.logicalOpNode[op] = opNode(ViewSide::Logical, L, op, stage, stage != kNone && stageGroup.count(stage) ? stageGroup[stage] : -1);
    }
    std::vector<bool> lineageTensorL(L.tensors.size(), false), lineageTensorP(P.tensors.size(), false);
    for (const auto& rec : plan.lineage) {
        lineageTensorL[rec.logical] = true;
        for (const auto& sl : rec.slices)
            for (const auto& c : sl.copies)
                for (const auto& t : c) lineageTensorP[t.tensor] = true;
    }
    for (TensorId t = 0; t < L.tensors.size(); ++t) {
        if (!lineageTensorL[t]) continue;
        auto prod = L.tensors[t].producer;
        v.logicalTensorNode[t] = tensorNode(ViewSide::Logical, L, t, lTensorStage[t], prod != kNone ? v.nodes[v.logicalOpNode[prod]].group : -1);
    }

    // Parallel nodes: each op lives on its home rank (its own, or its first output's for a collective).
    for (std::int32_t r = 0; r < static_cast<std::int32_t>(plan.ranks.size()); ++r) {
        if (!options.collapsedRanks.count(r)) continue;
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
        v.parallelOpNode[op] = opNode(ViewSide::Parallel, P, op, pOpStage[op], parallelGroup(r, P.ops[op].microbatch));
    }
    for (TensorId t = 0; t < P.tensors.size(); ++t) {
        if (!lineageTensorP[t]) continue;
        auto r = P.tensors[t].rank;
        if (r >= 0 && v.rankNode[r] >= 0) {
            v.parallelTensorNode[t] = v.rankNode[r];
            continue;
        }
        v.parallelTensorNode[t] = tensorNode(ViewSide::Parallel, P, t, pTensorStage[t], parallelGroup(r, P.tensors[t].microbatch));
    }

    // Dataflow: producer -> (tensor node) -> consumer, deduplicated, no self-loops.
    auto dataflow = [&](const Graph& g, const std::vector<int>& opNode, const std::vector<int>& tensorNode, std::vector<ViewEdge>& out) {
        std::unordered_set<std::uint64_t> seen;
        auto add = [&](int a, int b, TensorId t) {
            if (a < 0 || b < 0 || a == b) return;
            auto key = (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b);
            if (seen.insert(key).second) out.push_back({a, b, t});
        };
        for (TensorId t = 0; t < g.tensors.size(); ++t) {
            int prod = g.tensors[t].producer == kNone ? -1 : opNode[g.tensors[t].producer];
            int tn = tensorNode[t];
            if (tn >= 0) add(prod, tn, t);
            for (auto c : g.consumers(t)) add(tn >= 0 ? tn : prod, opNode[c], t);
        }
    };
    dataflow(L, v.logicalOpNode, v.logicalTensorNode, v.logicalEdges);
    dataflow(P, v.parallelOpNode, v.parallelTensorNode, v.parallelEdges);

    // Lineage edges, styled by kind.
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
                    if (v.nodes[pn].kind == ViewNodeKind::CollapsedRank) {
                        auto key = (static_cast<std::uint64_t>(ln) << 32) | static_cast<std::uint32_t>(pn);
                        if (!seenLineage.insert(key).second) continue;
                    }
                    v.lineage.push_back({ln, pn, kind, t.coeff, r});
                }
        }
    }
    return v;
}

}  // namespace tv
