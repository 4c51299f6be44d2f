#include "layout/graph_layout.hpp"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <functional>
#include <string>
#include <mutex>
#include <sstream>

namespace tv {

namespace {

std::mutex& graphvizLock() {
    static std::mutex m;
    return m;
}

GVC_t* context() {
    static GVC_t* gvc = gvContext();
    return gvc;
}

void set(void* obj, const char* name, const std::string& value) {
    agsafeset(obj, const_cast<char*>(name), const_cast<char*>(value.c_str()), const_cast<char*>(""));
}

// Graphviz's own messages ("Error: trouble in init_rank", ...) go to stderr unless a handler
// takes them; the layout takes them, under the lock, into the result's error.
std::string* graphvizMessages = nullptr;

int takeMessage(char* message) {
    if (graphvizMessages && message) *graphvizMessages += message;
    return 0;
}

struct MessagesTaken {
    explicit MessagesTaken(std::string* into) : previous(agseterrf(takeMessage)) { graphvizMessages = into; }
    ~MessagesTaken() {
        agseterrf(previous);
        graphvizMessages = nullptr;
    }
    MessagesTaken(const MessagesTaken&) = delete;
    MessagesTaken& operator=(const MessagesTaken&) = delete;
    agusererrf previous;
};

std::string oneLine(std::string text) {
    for (auto& c : text)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text.size() > 400 ? text.substr(0, 400) + "..." : text;
}

std::string num(double v) {
    std::ostringstream os;
    os.precision(6);
    os << v;
    return os.str();
}

}  // namespace

LayoutResult layoutGraph(const LayoutRequest& req) {
    LayoutResult res;
    if (req.nodes.size() > kMaxLayoutNodes || req.edges.size() > kMaxLayoutEdges) {
        res.error = "this view would give Graphviz " + std::to_string(req.nodes.size()) + " nodes and " + std::to_string(req.edges.size()) +
                    " edges to lay out at once, more than the " + std::to_string(kMaxLayoutNodes) + " nodes and " + std::to_string(kMaxLayoutEdges) +
                    " edges it is given (its time grows faster than the graph): collapse ranks or layer groups, or expand fewer at a time";
        return res;
    }
    std::lock_guard lock(graphvizLock());
    std::string messages;
    const MessagesTaken taken(&messages);
    Agraph_t* g = agopen(const_cast<char*>("plan"), Agdirected, nullptr);
    if (!g) {
        res.error = "graphviz could not create a graph";
        return res;
    }
    set(g, "rankdir", req.leftToRight ? "LR" : "TB");
    set(g, "nodesep", num(req.nodeSeparation / 72.0));
    set(g, "ranksep", num(req.rankSeparation / 72.0));
    set(g, "splines", "spline");
    set(g, "compound", "true");
    if (req.crossingEffort != 1.0) {
        // Big graphs: bound crossing minimisation and both network-simplex passes (ranking and
        // x placement); unbounded, a few hundred clustered nodes can take minutes.
        set(g, "mclimit", num(req.crossingEffort));
        set(g, "nslimit", "2");
        set(g, "nslimit1", "2");
        set(g, "searchsize", "20");
    }

    std::vector<Agraph_t*> clusters(req.clusters.size(), nullptr);
    // Parents before children: create in index order, resolving parents recursively.
    std::function<Agraph_t*(int)> clusterGraph = [&](int c) -> Agraph_t* {
        if (c < 0 || c >= static_cast<int>(clusters.size())) return g;
        if (clusters[c]) return clusters[c];
        Agraph_t* parent = clusterGraph(req.clusters[c].parent == c ? -1 : req.clusters[c].parent);
        auto name = "cluster_" + std::to_string(c);
        clusters[c] = agsubg(parent, const_cast<char*>(name.c_str()), 1);
        set(clusters[c], "label", req.clusters[c].label);
        set(clusters[c], "margin", "8");
        return clusters[c];
    };
    std::vector<Agnode_t*> nodes(req.nodes.size(), nullptr);
    for (std::size_t i = 0; i < req.nodes.size(); ++i) {
        auto name = "n" + std::to_string(i);
        Agraph_t* owner = clusterGraph(req.nodes[i].cluster);
        nodes[i] = agnode(owner, const_cast<char*>(name.c_str()), 1);
        set(nodes[i], "shape", "box");
        set(nodes[i], "fixedsize", "true");
        set(nodes[i], "label", "");
        set(nodes[i], "width", num(req.nodes[i].width / 72.0));
        set(nodes[i], "height", num(req.nodes[i].height / 72.0));
    }
    std::vector<Agedge_t*> edges(req.edges.size(), nullptr);
    for (std::size_t i = 0; i < req.edges.size(); ++i) {
        const auto& e = req.edges[i];
        if (e.from < 0 || e.to < 0 || e.from >= static_cast<int>(nodes.size()) || e.to >= static_cast<int>(nodes.size())) continue;
        auto name = "e" + std::to_string(i);
        edges[i] = agedge(g, nodes[e.from], nodes[e.to], const_cast<char*>(name.c_str()), 1);
        if (!e.constraint) set(edges[i], "constraint", "false");
    }
    if (gvLayout(context(), g, "dot") != 0) {
        res.error = "graphviz layout failed" + (messages.empty() ? std::string() : ": " + oneLine(messages));
        agclose(g);
        return res;
    }
    const boxf bb = GD_bb(g);
    const double top = bb.UR.y;
    auto flip = [&](pointf p) { return Point{p.x - bb.LL.x, top - p.y}; };
    res.bounds = Rect{0, 0, bb.UR.x - bb.LL.x, bb.UR.y - bb.LL.y};
    res.nodeCenters.reserve(nodes.size());
    for (auto* n : nodes) res.nodeCenters.push_back(flip(ND_coord(n)));
    res.edgePaths.resize(edges.size());
    res.edgeTips.resize(edges.size());
    for (std::size_t i = 0; i < edges.size(); ++i) {
        auto* e = edges[i];
        if (!e || !ED_spl(e) || ED_spl(e)->size == 0) continue;
        const bezier& bz = ED_spl(e)->list[0];
        auto& path = res.edgePaths[i];
        for (int k = 0; k < static_cast<int>(bz.size); ++k) path.push_back(flip(bz.list[k]));
        res.edgeTips[i] = bz.eflag ? flip(bz.ep) : path.back();
    }
    res.clusterBoxes.resize(clusters.size());
    for (std::size_t c = 0; c < clusters.size(); ++c) {
        if (!clusters[c]) continue;
        const boxf cb = GD_bb(clusters[c]);
        auto tl = flip(pointf{cb.LL.x, cb.UR.y});
        res.clusterBoxes[c] = Rect{tl.x, tl.y, cb.UR.x - cb.LL.x, cb.UR.y - cb.LL.y};
    }
    gvFreeLayout(context(), g);
    agclose(g);
    return res;
}

std::string toDot(const LayoutRequest& req, const std::vector<std::string>& labels, const std::string& name) {
    auto quote = [](const std::string& s) {
        std::string q = "\"";
        for (char c : s) {
            if (c == '"' || c == '\\') q += '\\';
            q += c;
        }
        return q + "\"";
    };
    std::ostringstream os;
    os << "digraph " << quote(name) << " {\n  rankdir=" << (req.leftToRight ? "LR" : "TB") << ";\n  node [shape=box];\n";
    std::vector<std::vector<std::size_t>> members(req.clusters.size());
    std::vector<std::vector<std::size_t>> children(req.clusters.size());
    std::vector<std::size_t> top, topClusters;
    for (std::size_t i = 0; i < req.nodes.size(); ++i) {
        auto c = req.nodes[i].cluster;
        if (c >= 0 && c < static_cast<int>(req.clusters.size())) members[c].push_back(i);
        else top.push_back(i);
    }
    for (std::size_t c = 0; c < req.clusters.size(); ++c) {
        auto p = req.clusters[c].parent;
        if (p >= 0 && p < static_cast<int>(req.clusters.size()) && p != static_cast<int>(c)) children[p].push_back(c);
        else topClusters.push_back(c);
    }
    auto node = [&](std::size_t i, const std::string& indent) {
        os << indent << "n" << i << " [label=" << quote(i < labels.size() ? labels[i] : "") << "];\n";
    };
    std::function<void(std::size_t, const std::string&)> cluster = [&](std::size_t c, const std::string& indent) {
        os << indent << "subgraph cluster_" << c << " {\n" << indent << "  label=" << quote(req.clusters[c].label) << ";\n";
        for (auto i : members[c]) node(i, indent + "  ");
        for (auto k : children[c]) cluster(k, indent + "  ");
        os << indent << "}\n";
    };
    for (auto c : topClusters) cluster(c, "  ");
    for (auto i : top) node(i, "  ");
    for (const auto& e : req.edges) {
        os << "  n" << e.from << " -> n" << e.to;
        if (!e.constraint) os << " [constraint=false]";
        os << ";\n";
    }
    os << "}\n";
    return os.str();
}

}  // namespace tv
