#include "explore/plan_twins.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "explore/verified_view.hpp"
#include "ops/registry.hpp"

namespace tv {

std::string_view toString(OpChange::What w) {
    switch (w) {
        case OpChange::What::Added: return "added";
        case OpChange::What::Removed: return "removed";
        case OpChange::What::Changed: return "changed";
    }
    return "?";
}

namespace {

// ---------------------------------------------------------------------------------------------
// The diff

template <class T>
std::string joined(const std::vector<T>& items, std::string_view sep = ", ") {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += sep;
        if constexpr (std::is_same_v<T, std::string>) out += items[i];
        else out += std::to_string(items[i]);
    }
    return out;
}

std::string kindName(const OpInfo& o) { return std::string(OpRegistry::instance().spec(o.kind).name); }

std::vector<std::int32_t> groupRanks(const Plan& p, const OpInfo& o) {
    return o.group == kNone || o.group >= p.groups.size() ? std::vector<std::int32_t>{} : p.groups[o.group];
}

std::string numberOrNone(std::int32_t v) { return v < 0 ? "none" : std::to_string(v); }

/// The op in a few words, for an op that only one plan has.
std::string describeOp(const Plan& p, const Graph& g, OpId op) {
    const auto& o = g.ops[op];
    std::string s = kindName(o) + " (" + std::string(toString(o.phase)) + ")";
    const auto group = groupRanks(p, o);
    if (!group.empty()) s += " over ranks " + joined(group);
    else if (o.rank >= 0) s += " on rank " + std::to_string(o.rank);
    if (o.microbatch >= 0) s += ", microbatch " + std::to_string(o.microbatch);
    return s;
}

struct Operand {
    std::string name;
    std::string shape;
};

std::vector<Operand> operands(const Plan& p, const Graph& g, std::span<const TensorId> ids) {
    std::vector<Operand> out;
    out.reserve(ids.size());
    for (TensorId t : ids) out.push_back({p.tensorName(g, t), shapeToString(p.shape(g, t))});
    return out;
}

void compareOperands(const char* what, const std::vector<Operand>& x, const std::vector<Operand>& y, std::vector<std::string>& items) {
    std::vector<std::string> nx, ny;
    for (const auto& o : x) nx.push_back(o.name);
    for (const auto& o : y) ny.push_back(o.name);
    if (nx != ny) {
        items.push_back(std::string(what) + "s differ: [" + joined(nx) + "] → [" + joined(ny) + "]");
        return;
    }
    for (std::size_t i = 0; i < x.size(); ++i)
        if (x[i].shape != y[i].shape) items.push_back(std::string(what) + " " + x[i].name + ": shape " + x[i].shape + " → " + y[i].shape);
}

/// What differs between op x of a and op y of b (same name), item by item.
std::vector<std::string> compareOps(const Plan& a, const Graph& ga, OpId x, const Plan& b, const Graph& gb, OpId y) {
    std::vector<std::string> items;
    const auto& oa = ga.ops[x];
    const auto& ob = gb.ops[y];
    if (oa.kind != ob.kind) items.push_back("kind " + kindName(oa) + " → " + kindName(ob));
    if (oa.phase != ob.phase) items.push_back("phase " + std::string(toString(oa.phase)) + " → " + std::string(toString(ob.phase)));
    if (oa.rank != ob.rank) items.push_back("rank " + numberOrNone(oa.rank) + " → " + numberOrNone(ob.rank));
    if (oa.microbatch != ob.microbatch) items.push_back("microbatch " + numberOrNone(oa.microbatch) + " → " + numberOrNone(ob.microbatch));
    const auto groupA = groupRanks(a, oa), groupB = groupRanks(b, ob);
    if (groupA != groupB)
        items.push_back("ranks " + (groupA.empty() ? std::string("none") : joined(groupA)) + " → " + (groupB.empty() ? std::string("none") : joined(groupB)));
    const auto& ja = a.opAttrs(ga, x);
    const auto& jb = b.opAttrs(gb, y);
    if (ja != jb) {
        if (ja.is_object() && jb.is_object()) {
            // nlohmann's objects iterate in key order: the items come out sorted.
            for (auto it = ja.begin(); it != ja.end(); ++it) {
                auto other = jb.find(it.key());
                if (other == jb.end()) items.push_back("attribute " + it.key() + ": " + it.value().dump() + " → none");
                else if (*other != it.value()) items.push_back("attribute " + it.key() + ": " + it.value().dump() + " → " + other->dump());
            }
            for (auto it = jb.begin(); it != jb.end(); ++it)
                if (!ja.contains(it.key())) items.push_back("attribute " + it.key() + ": none → " + it.value().dump());
        } else {
            items.push_back("attributes " + ja.dump() + " → " + jb.dump());
        }
    }
    compareOperands("input", operands(a, ga, ga.inputs(x)), operands(b, gb, gb.inputs(y)), items);
    compareOperands("output", operands(a, ga, ga.outputs(x)), operands(b, gb, gb.outputs(y)), items);
    auto flag = [&](const char* what, bool fa, bool fb) {
        if (fa != fb) items.push_back(std::string(what) + ": " + (fa ? "yes" : "no") + " → " + (fb ? "yes" : "no"));
    };
    flag("across replicas", oa.acrossReplicas, ob.acrossReplicas);
    flag("index from replica", oa.indexFromReplica, ob.indexFromReplica);
    flag("across microbatches", oa.acrossMicrobatches, ob.acrossMicrobatches);
    return items;
}

void diffGraph(ViewSide side, const Plan& a, const Graph& ga, const Plan& b, const Graph& gb, std::vector<OpChange>& out) {
    for (OpId x = 0; x < ga.ops.size(); ++x) {
        const auto& name = a.opName(ga, x);
        const NameId inB = b.names.find(name);
        const OpId y = inB == kNone ? kNone : gb.findOp(inB);
        if (y == kNone) {
            out.push_back({side, name, OpChange::What::Removed, describeOp(a, ga, x)});
            continue;
        }
        auto items = compareOps(a, ga, x, b, gb, y);
        if (!items.empty()) out.push_back({side, name, OpChange::What::Changed, joined(items, "; ")});
    }
    for (OpId y = 0; y < gb.ops.size(); ++y) {
        const auto& name = b.opName(gb, y);
        const NameId inA = a.names.find(name);
        if (inA == kNone || ga.findOp(inA) == kNone) out.push_back({side, name, OpChange::What::Added, describeOp(b, gb, y)});
    }
}

// Lineage, with tensor names: a record as text, its slices sorted by box, each slice's copies
// and each copy's terms sorted by their text, so that two plans listing the same lineage in
// another order compare equal.
struct SliceText {
    Box box;
    std::string copies;  ///< "t@r0 + t@r1 | t@r2": copies apart, the terms of a copy added
    friend bool operator==(const SliceText&, const SliceText&) = default;
};
struct RecordText {
    std::string mode;
    std::vector<SliceText> slices;
    friend bool operator==(const RecordText&, const RecordText&) = default;
};

std::string modeText(const LineageRecord& r) {
    switch (r.replicas) {
        case ReplicaMode::None: return "none";
        case ReplicaMode::Copies: return "copies";
        case ReplicaMode::Sum: return "sum";
        case ReplicaMode::Split: return "split along dim " + std::to_string(r.splitDim);
    }
    return "?";
}

RecordText recordText(const Plan& p, const LineageRecord& r) {
    RecordText out{modeText(r), {}};
    for (const auto& sl : r.slices) {
        std::vector<std::string> copies;
        for (const auto& c : sl.copies) {
            std::vector<std::string> terms;
            for (const auto& t : c)
                terms.push_back((t.coeff.isOne() ? std::string() : t.coeff.toString() + "*") +
                                (t.tensor < p.parallel.tensors.size() ? p.tensorName(p.parallel, t.tensor) : std::string("?")));
            std::sort(terms.begin(), terms.end());
            copies.push_back(joined(terms, " + "));
        }
        std::sort(copies.begin(), copies.end());
        out.slices.push_back({sl.box, joined(copies, " | ")});
    }
    std::sort(out.slices.begin(), out.slices.end(), [](const SliceText& x, const SliceText& y) {
        return std::tie(x.box.lo, x.box.hi, x.copies) < std::tie(y.box.lo, y.box.hi, y.copies);
    });
    return out;
}

std::string recordSummary(const RecordText& r) {
    std::string s = r.mode == "none" ? std::string() : "replicas " + r.mode + ", ";
    for (std::size_t i = 0; i < r.slices.size() && i < 2; ++i) s += (i ? "; " : "") + r.slices[i].box.toString() + " " + r.slices[i].copies;
    if (r.slices.size() > 2) s += "; ... (" + std::to_string(r.slices.size()) + " slices)";
    return s;
}

std::string countText(std::size_t n, const char* one) {
    if (n == 0) return "none";
    return std::to_string(n) + " " + one + (n == 1 ? "" : "s");
}

/// What differs between two lists of records of one logical tensor, item by item.
std::vector<std::string> compareRecords(const std::vector<RecordText>& ra, const std::vector<RecordText>& rb) {
    std::vector<std::string> items;
    if (ra.size() != rb.size()) {
        items.push_back(countText(ra.size(), "record") + " → " + countText(rb.size(), "record"));
        for (const auto& r : ra)
            if (std::find(rb.begin(), rb.end(), r) == rb.end()) items.push_back("only in the first: " + recordSummary(r));
        for (const auto& r : rb)
            if (std::find(ra.begin(), ra.end(), r) == ra.end()) items.push_back("only in the second: " + recordSummary(r));
        return items;
    }
    for (std::size_t i = 0; i < ra.size(); ++i) {
        if (ra[i] == rb[i]) continue;
        const std::string prefix = ra.size() > 1 ? "record " + std::to_string(i + 1) + ", " : std::string();
        if (ra[i].mode != rb[i].mode) items.push_back(prefix + "replicas " + ra[i].mode + " → " + rb[i].mode);
        const auto& sa = ra[i].slices;
        const auto& sb = rb[i].slices;
        if (sa.size() != sb.size()) {
            items.push_back(prefix + countText(sa.size(), "slice") + " → " + countText(sb.size(), "slice"));
            continue;
        }
        for (std::size_t k = 0; k < sa.size(); ++k) {
            if (sa[k].box != sb[k].box) items.push_back(prefix + "slice " + sa[k].box.toString() + " → " + sb[k].box.toString());
            else if (sa[k].copies != sb[k].copies) items.push_back(prefix + "slice " + sa[k].box.toString() + ": " + sa[k].copies + " → " + sb[k].copies);
        }
    }
    return items;
}

void diffLineage(const Plan& a, const Plan& b, std::vector<OpChange>& out) {
    // Records per logical tensor name, in record order; names in order of first record.
    auto collect = [](const Plan& p, std::vector<std::string>& order, std::unordered_map<std::string, std::vector<RecordText>>& records) {
        for (const auto& rec : p.lineage) {
            if (rec.logical >= p.logical.tensors.size()) continue;
            const auto& name = p.tensorName(p.logical, rec.logical);
            auto [it, fresh] = records.try_emplace(name);
            if (fresh) order.push_back(name);
            it->second.push_back(recordText(p, rec));
        }
    };
    std::vector<std::string> orderA, orderB;
    std::unordered_map<std::string, std::vector<RecordText>> recA, recB;
    collect(a, orderA, recA);
    collect(b, orderB, recB);
    static const std::vector<RecordText> none;
    auto report = [&](const std::string& name) {
        auto ia = recA.find(name);
        auto ib = recB.find(name);
        const auto& ra = ia == recA.end() ? none : ia->second;
        const auto& rb = ib == recB.end() ? none : ib->second;
        if (ra == rb) return;
        auto items = compareRecords(ra, rb);
        constexpr std::size_t kShown = 4;
        if (items.size() > kShown) {
            const auto more = items.size() - kShown;
            items.resize(kShown);
            items.push_back("and " + std::to_string(more) + " more");
        }
        out.push_back({ViewSide::Logical, name, OpChange::What::Changed, joined(items, "; "), true});
    };
    for (const auto& name : orderA) report(name);
    for (const auto& name : orderB)
        if (!recA.count(name)) report(name);
}

}  // namespace

std::vector<OpChange> diffPlans(const Plan& a, const Plan& b) {
    std::vector<OpChange> out;
    diffGraph(ViewSide::Logical, a, a.logical, b, b.logical, out);
    diffLineage(a, b, out);
    diffGraph(ViewSide::Parallel, a, a.parallel, b, b.parallel, out);
    return out;
}

namespace {

// ---------------------------------------------------------------------------------------------
// The union layout

constexpr char kSep = '\x1f';  // not in any name a plan file holds

/// Keys that name the same thing in both views: a node by side, kind and name (a collapsed
/// layer by its layer key: its name, "layers.3 forward", is the same in every rank and
/// microbatch); a group by side, and kind and label of each group from the outermost one down.
/// A key met twice in one view (none is, as buildPlanView builds them) gets its count appended,
/// so every node and group of a view has its own.
void makeUnique(std::vector<std::string>& keys) {
    std::unordered_map<std::string, int> seen;
    for (auto& k : keys) {
        const int n = seen[k]++;
        if (n) k += kSep + std::to_string(n);
    }
}

std::vector<std::string> nodeKeys(const PlanView& v) {
    std::vector<std::string> keys;
    keys.reserve(v.nodes.size());
    for (const auto& n : v.nodes) {
        std::string k;
        k += n.side == ViewSide::Logical ? 'L' : 'P';
        k += static_cast<char>('0' + static_cast<int>(n.kind));
        k += kSep;
        k += n.kind == ViewNodeKind::CollapsedLayer && n.id < v.layers.size() ? v.layers[n.id].key : n.name;
        keys.push_back(std::move(k));
    }
    makeUnique(keys);
    return keys;
}

std::vector<std::string> groupKeys(const PlanView& v) {
    std::vector<std::string> keys;
    keys.reserve(v.groups.size());
    for (std::size_t g = 0; g < v.groups.size(); ++g) {
        std::vector<int> chain;
        for (int x = static_cast<int>(g); x >= 0 && chain.size() <= v.groups.size(); x = v.groups[x].parent) chain.push_back(x);
        std::string k(1, v.groups[g].side == ViewSide::Logical ? 'L' : 'P');
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
            k += static_cast<char>('0' + static_cast<int>(v.groups[*it].kind));
            k += v.groups[*it].label;
            k += kSep;
        }
        keys.push_back(std::move(k));
    }
    makeUnique(keys);
    return keys;
}

/// One view's place in the union: its nodes, groups (-1: the union has no such group) and edges
/// (logical, then parallel, as PlacedView::dataflowPaths) by their union index.
struct Projection {
    std::vector<int> node, group;
    std::vector<std::size_t> edge;
};

struct Union {
    PlanView view;
    Projection a, b;
};

Union buildUnion(const PlanView& a, const PlanView& b) {
    Union u;
    auto& U = u.view;
    const std::array<const PlanView*, 2> views{&a, &b};
    const std::array<Projection*, 2> proj{&u.a, &u.b};
    const int layerOffset[2] = {0, static_cast<int>(a.layers.size())};
    auto remapLayer = [&](int which, int layer) { return layer >= 0 ? layer + layerOffset[which] : -1; };

    // Groups: every distinct key, a's first; kept below only when a node of the union is in it.
    struct Candidate {
        int view, group, parent = -1;
    };
    std::vector<Candidate> candidates;
    std::unordered_map<std::string, int> candidateByKey;
    std::array<std::vector<int>, 2> candidateOf;
    for (int w = 0; w < 2; ++w) {
        const auto& v = *views[w];
        const auto keys = groupKeys(v);
        candidateOf[w].assign(v.groups.size(), -1);
        for (std::size_t g = 0; g < v.groups.size(); ++g) {
            auto [it, fresh] = candidateByKey.try_emplace(keys[g], static_cast<int>(candidates.size()));
            if (fresh) candidates.push_back({w, static_cast<int>(g)});
            candidateOf[w][g] = it->second;
        }
    }
    for (auto& c : candidates) {
        const int parent = views[c.view]->groups[c.group].parent;
        c.parent = parent >= 0 && parent < static_cast<int>(candidateOf[c.view].size()) ? candidateOf[c.view][parent] : -1;
    }

    // Nodes: a's, then b's that a lacks; a node in both takes a's group and the larger size.
    std::unordered_map<std::string, int> nodeByKey;
    std::vector<int> nodeCandidate;
    for (int w = 0; w < 2; ++w) {
        const auto& v = *views[w];
        const auto keys = nodeKeys(v);
        proj[w]->node.assign(v.nodes.size(), -1);
        for (std::size_t i = 0; i < v.nodes.size(); ++i) {
            const auto& n = v.nodes[i];
            auto [it, fresh] = nodeByKey.try_emplace(keys[i], static_cast<int>(U.nodes.size()));
            proj[w]->node[i] = it->second;
            if (!fresh) {
                auto& m = U.nodes[it->second];
                m.width = std::max(m.width, n.width);
                m.height = std::max(m.height, n.height);
                continue;
            }
            ViewNode m = n;
            m.layer = remapLayer(w, n.layer);
            if (n.kind == ViewNodeKind::CollapsedLayer && n.id != kNone) m.id = n.id + static_cast<std::uint32_t>(layerOffset[w]);
            U.nodes.push_back(std::move(m));
            nodeCandidate.push_back(n.group >= 0 && n.group < static_cast<int>(candidateOf[w].size()) ? candidateOf[w][n.group] : -1);
        }
    }

    // The groups that hold a node of the union, and their ancestors, in candidate order.
    std::vector<bool> used(candidates.size(), false);
    for (int c : nodeCandidate)
        for (std::size_t steps = 0; c >= 0 && !used[c] && steps <= candidates.size(); c = candidates[c].parent, ++steps) used[c] = true;
    std::vector<int> groupOfCandidate(candidates.size(), -1);
    for (std::size_t c = 0; c < candidates.size(); ++c)
        if (used[c]) {
            groupOfCandidate[c] = static_cast<int>(U.groups.size());
            U.groups.push_back(views[candidates[c].view]->groups[candidates[c].group]);
        }
    for (std::size_t c = 0; c < candidates.size(); ++c) {
        if (!used[c]) continue;
        auto& g = U.groups[groupOfCandidate[c]];
        g.parent = candidates[c].parent >= 0 ? groupOfCandidate[candidates[c].parent] : -1;
        g.layer = remapLayer(candidates[c].view, g.layer);
    }
    for (std::size_t i = 0; i < U.nodes.size(); ++i) U.nodes[i].group = nodeCandidate[i] >= 0 ? groupOfCandidate[nodeCandidate[i]] : -1;
    for (int w = 0; w < 2; ++w) {
        proj[w]->group.resize(candidateOf[w].size());
        for (std::size_t g = 0; g < candidateOf[w].size(); ++g) proj[w]->group[g] = groupOfCandidate[candidateOf[w][g]];
    }

    // Layers: a's, then b's (PlanView::drawnAfterLayout reads their phase), pointing into the union.
    for (int w = 0; w < 2; ++w)
        for (auto layer : views[w]->layers) {
            layer.node = layer.node >= 0 && layer.node < static_cast<int>(proj[w]->node.size()) ? proj[w]->node[layer.node] : -1;
            layer.group = layer.group >= 0 && layer.group < static_cast<int>(proj[w]->group.size()) ? proj[w]->group[layer.group] : -1;
            U.layers.push_back(std::move(layer));
        }

    // Dataflow edges by their ends' keys: a's, then b's that a lacks; the larger tensor count.
    std::array<std::vector<std::size_t>, 2> logicalEdge, parallelEdge;  // per view: index in U's list
    for (int side = 0; side < 2; ++side) {
        auto& target = side == 0 ? U.logicalEdges : U.parallelEdges;
        std::unordered_map<std::uint64_t, std::size_t> edgeByEnds;
        for (int w = 0; w < 2; ++w) {
            const auto& list = side == 0 ? views[w]->logicalEdges : views[w]->parallelEdges;
            auto& index = side == 0 ? logicalEdge[w] : parallelEdge[w];
            for (const auto& e : list) {
                const int from = proj[w]->node[e.from], to = proj[w]->node[e.to];
                const auto key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(from)) << 32) | static_cast<std::uint32_t>(to);
                auto [it, fresh] = edgeByEnds.try_emplace(key, target.size());
                if (fresh) target.push_back({from, to, e.tensor, e.tensors});
                else target[it->second].tensors = std::max(target[it->second].tensors, e.tensors);
                index.push_back(it->second);
            }
        }
    }
    for (int w = 0; w < 2; ++w) {
        auto& edge = proj[w]->edge;
        for (auto k : logicalEdge[w]) edge.push_back(k);
        for (auto k : parallelEdge[w]) edge.push_back(U.logicalEdges.size() + k);
    }
    return u;
}

/// One view's picture: the union's places for its nodes, groups and edges.
PlacedView project(const PlanView& v, const Projection& p, const PlacedView& placed) {
    PlacedView out;
    out.logicalBounds = placed.logicalBounds;
    out.parallelBounds = placed.parallelBounds;
    out.notice = placed.notice;
    out.nodeRects.resize(v.nodes.size());
    for (std::size_t i = 0; i < v.nodes.size(); ++i) out.nodeRects[i] = placed.nodeRects[p.node[i]];
    // A group the union does not have (its members are in other groups there) is the box
    // around its members.
    out.groupRects.resize(v.groups.size());
    std::vector<bool> seen(v.groups.size(), false);
    for (std::size_t g = 0; g < v.groups.size(); ++g)
        if (p.group[g] >= 0) out.groupRects[g] = placed.groupRects[p.group[g]];
    for (std::size_t i = 0; i < v.nodes.size(); ++i) {
        const Rect& r = out.nodeRects[i];
        for (int g = v.nodes[i].group, steps = 0; g >= 0 && steps <= static_cast<int>(v.groups.size()); g = v.groups[g].parent, ++steps) {
            if (p.group[g] >= 0) continue;
            auto& box = out.groupRects[g];
            if (!seen[g]) {
                box = r;
                seen[g] = true;
                continue;
            }
            const double x1 = std::max(box.x + box.width, r.x + r.width), y1 = std::max(box.y + box.height, r.y + r.height);
            box.x = std::min(box.x, r.x);
            box.y = std::min(box.y, r.y);
            box.width = x1 - box.x;
            box.height = y1 - box.y;
        }
    }
    constexpr double kPad = 8;
    for (std::size_t g = 0; g < v.groups.size(); ++g)
        if (seen[g]) out.groupRects[g] = {out.groupRects[g].x - kPad, out.groupRects[g].y - kPad, out.groupRects[g].width + 2 * kPad, out.groupRects[g].height + 2 * kPad};

    std::size_t k = 0;
    for (const auto* list : {&v.logicalEdges, &v.parallelEdges})
        for (const auto& e : *list) {
            const auto uk = p.edge[k++];
            auto path = placed.dataflowPaths[uk];
            auto tip = placed.dataflowTips[uk];
            if (path.empty()) {
                // Drawn in the union as a member of a collapsed rank's bundle: straight, bottom
                // centre to top centre, as placePlanView draws such an edge. This view bundles
                // it again below unless its other end lies outside every rank box here.
                const auto& a = out.nodeRects[e.from];
                const auto& b = out.nodeRects[e.to];
                const Point p0{a.x + a.width / 2, a.y + a.height}, p1{b.x + b.width / 2, b.y};
                const Point d{(p1.x - p0.x) / 3, (p1.y - p0.y) / 3};
                path = {p0, {p0.x + d.x, p0.y + d.y}, {p0.x + 2 * d.x, p0.y + 2 * d.y}, p1};
                tip = p1;
            }
            out.dataflowPaths.push_back(std::move(path));
            out.dataflowTips.push_back(tip);
        }
    bundleCollapsedRankEdges(v, out);
    return out;
}

}  // namespace

PlacedTwins placeTwins(const PlanView& a, const PlanView& b, double gap, const LayoutControl* control) {
    PlacedTwins out;
    const auto u = buildUnion(a, b);
    const auto placed = placePlanView(u.view, gap, control);
    if (!placed.error.empty()) {
        out.error = placed.error;
        out.cancelled = placed.cancelled;
        for (auto* side : {&out.a, &out.b}) {
            side->error = placed.error;
            side->cancelled = placed.cancelled;
            side->overBudget = placed.overBudget;
        }
        return out;
    }
    out.a = project(a, u.a, placed);
    out.b = project(b, u.b, placed);
    return out;
}

int changeNode(const Plan& drawn, const PlanView& view, const OpChange& change) {
    if (change.lineage) {
        const TensorId t = drawnTensor(drawn, drawn.logical, change.name);
        return t != kNone && t < view.logicalTensorNode.size() ? view.logicalTensorNode[t] : -1;
    }
    const bool logical = change.side == ViewSide::Logical;
    const OpId op = drawnOp(drawn, logical ? drawn.logical : drawn.parallel, change.name);
    const auto& nodes = logical ? view.logicalOpNode : view.parallelOpNode;
    return op != kNone && op < nodes.size() ? nodes[op] : -1;
}

bool unfoldChanges(const Plan& drawn, const PlanView& view, const std::vector<OpChange>& changes, ViewOptions& options, int& ranksLeft,
                   int& layersLeft) {
    bool changed = false;
    for (const auto& c : changes) {
        const int node = changeNode(drawn, view, c);
        if (node < 0) continue;
        const auto& n = view.nodes[node];
        if (n.kind == ViewNodeKind::CollapsedRank && ranksLeft > 0 && options.collapsedRanks.erase(static_cast<std::int32_t>(n.id))) {
            --ranksLeft;
            changed = true;
        } else if (n.kind == ViewNodeKind::CollapsedLayer && layersLeft > 0) {
            const auto& key = view.layers[n.id].key;
            options.collapsedLayers.erase(key);
            if (options.expandedLayers.insert(key).second) {
                --layersLeft;
                changed = true;
            }
        }
    }
    return changed;
}

}  // namespace tv
