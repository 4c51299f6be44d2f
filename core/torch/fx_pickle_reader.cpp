// The pickled form of a captured graph (`.gpickle`: torchgraph's PickleableGraph), read with the
// safe pickle reader: nothing in the file runs.
//
// A PickleableGraph holds the rank, the phase ("direction"), the graph id, the graph's printed form
// (`readable_str`) and its nodes, each with its kind, name, target, arguments and metadata (the
// whole Python stack it was traced from, and its tensor's shape). The graph is read from the
// printed form by the same reader as a `.py` file; every pickled node is then checked against it
// (same nodes in the same order, kinds, targets, node arguments), so the two forms cannot disagree
// unnoticed, and the pickled stack gives each node its framework line: the innermost frame outside
// PyTorch itself (the printed form names only the innermost frame, which can be inside torch).
#include <algorithm>
#include <functional>
#include <unordered_map>

#include "pickle/pickle.hpp"
#include "torch/torch_graph.hpp"

namespace tv::torch {

namespace {

/// The frames of a Python stack trace ("  File \"PATH\", line N, in FUNC\n    CODE\n"...), outermost first.
std::vector<SourceLine> parseStackTrace(const std::string& trace) {
    std::vector<SourceLine> frames;
    std::size_t at = 0;
    while ((at = trace.find("File \"", at)) != std::string::npos) {
        at += 6;
        const auto q = trace.find('"', at);
        if (q == std::string::npos) break;
        SourceLine s;
        s.file = trace.substr(at, q - at);
        auto rest = trace.find(", line ", q);
        if (rest != q + 1) {
            at = q;
            continue;
        }
        rest += 7;
        std::size_t e = rest;
        while (e < trace.size() && trace[e] >= '0' && trace[e] <= '9') ++e;
        if (e == rest || e - rest > 9) {
            at = q;
            continue;
        }
        s.line = std::stoi(trace.substr(rest, e - rest));
        const auto eol = trace.find('\n', e);
        if (trace.compare(e, 5, ", in ") == 0) s.function = trace.substr(e + 5, (eol == std::string::npos ? trace.size() : eol) - e - 5);
        if (eol != std::string::npos) {
            const auto codeEnd = trace.find('\n', eol + 1);
            auto code = trace.substr(eol + 1, (codeEnd == std::string::npos ? trace.size() : codeEnd) - eol - 1);
            const auto first = code.find_first_not_of(' ');
            if (first != std::string::npos && code.compare(first, 6, "File \"") != 0) s.code = code.substr(first);
        }
        frames.push_back(std::move(s));
        at = q;
    }
    return frames;
}

std::string sourceKey(const SourceLine& s) { return s.file + '\n' + std::to_string(s.line) + '\n' + s.function + '\n' + s.code; }

bool insideTorch(const std::string& file) {
    return file.find("/site-packages/torch/") != std::string::npos || file.find("/torch/_") != std::string::npos;
}

}  // namespace

TorchGraph readFxPickle(std::string_view data, const std::string& file, const ReadLimits& limits) {
    pickle::Document doc;
    try {
        pickle::Limits pl;
        pl.maxBytes = std::min<std::size_t>(pl.maxBytes, limits.maxBytes * 2);
        doc = pickle::read(data, pl);
    } catch (const pickle::PickleError& e) {
        throw TorchGraphError(file, 0, std::string("not a readable pickle: ") + e.what());
    }
    const auto root = doc.className(doc.root);
    if (root != "torchgraph.pgraph.pickleable.PickleableGraph")
        throw TorchGraphError(file, 0, "not a pickled PyTorch graph (its root object is " + (root.empty() ? std::string("not an object") : pickle::validUtf8(root)) + ")");
    auto field = [&](const pickle::Value& obj, std::string_view key, const std::string& where) -> const pickle::Value& {
        const auto* v = doc.attr(obj, key);
        if (!v) throw TorchGraphError(file, 0, where + " has no " + std::string(key));
        return *v;
    };
    auto text = [&](const pickle::Value& v, const std::string& what) -> std::string {
        const auto* s = doc.str(v);
        if (!s) throw TorchGraphError(file, 0, what + " is not a string");
        return *s;
    };
    auto whole = [&](const pickle::Value& v, const std::string& what) -> std::int64_t {
        if (v.kind == pickle::Kind::Int) return v.i;
        if (const auto* s = doc.str(v)) {
            try {
                std::size_t used = 0;
                const auto n = std::stoll(*s, &used);
                if (used == s->size()) return n;
            } catch (...) {
            }
        }
        throw TorchGraphError(file, 0, what + " is not a whole number");
    };

    const auto readable = text(field(doc.root, "readable_str", "the graph"), "the graph's readable_str");
    TorchGraph g;
    try {
        g = readFxText(readable, file, limits);
    } catch (const TorchGraphError& e) {
        throw TorchGraphError(file, 0, "its printed form (readable_str), line " + std::to_string(e.line) + ": " + e.message);
    }
    g.file = file;
    const auto rank = whole(field(doc.root, "rank", "the graph"), "the graph's rank");
    if (rank < 0 || rank > limits.maxRank) throw TorchGraphError(file, 0, "the graph's rank " + std::to_string(rank) + " is out of range");
    g.rank = static_cast<int>(rank);
    g.phase = text(field(doc.root, "direction", "the graph"), "the graph's direction");
    const auto gid = whole(field(doc.root, "gid", "the graph"), "the graph's gid");
    if (gid < 0 || gid > limits.maxRank) throw TorchGraphError(file, 0, "the graph's gid is out of range");
    g.gid = static_cast<int>(gid);

    const auto* nodes = doc.as(field(doc.root, "nodes", "the graph"), pickle::Kind::List);
    if (!nodes) throw TorchGraphError(file, 0, "the graph's nodes are not a list");
    std::size_t next = 0;  // the next node of the printed form
    const auto names = g.names();
    std::vector<int> sourceOf(g.nodes.size(), -2);
    std::vector<SourceLine> sources;
    std::unordered_map<std::string, int> sourceIds;
    for (std::size_t k = 0; k < nodes->items.size(); ++k) {
        const auto& pn = nodes->items[k];
        const std::string where = "pickled node " + std::to_string(k);
        const auto op = text(field(pn, "op", where), where + "'s op");
        const auto name = pickle::validUtf8(text(field(pn, "name", where), where + "'s name"));
        if (op == "output") continue;
        if (next >= g.nodes.size()) throw TorchGraphError(file, 0, "the pickled node " + name + " is not in the printed form");
        const auto& n = g.nodes[next];
        if (n.name != name)
            throw TorchGraphError(file, 0, "the pickled node " + name + " stands where the printed form has " + n.name + " (node " + std::to_string(next) + ")");
        const std::string* target = doc.str(field(pn, "target", where));
        const bool kindAgrees = (op == "placeholder" && n.kind == Node::Kind::Input) || (op == "get_attr" && n.kind == Node::Kind::Constant) ||
                                (op == "call_function" && (n.kind == Node::Kind::Call || n.kind == Node::Kind::GetItem));
        if (!kindAgrees) throw TorchGraphError(file, 0, "the pickled node " + name + " is a " + op + " but not in the printed form");
        if (n.kind == Node::Kind::Call && target) {
            const bool same = *target == n.target || "higher_order." + *target == n.target;
            if (!same)
                throw TorchGraphError(file, 0, "the pickled node " + name + " calls " + pickle::validUtf8(*target) + " where the printed form calls " + n.target);
        }
        if (n.kind == Node::Kind::GetItem && (!target || target->find("getitem") == std::string::npos))
            throw TorchGraphError(file, 0, "the pickled node " + name + " is not a getitem where the printed form reads an element");
        // The node arguments, in order, must be the printed form's.
        std::vector<std::string> printedRefs, pickledRefs;
        std::function<void(const Value&)> collect = [&](const Value& v) {
            if (v.isNode()) printedRefs.push_back(names[static_cast<std::size_t>(v.node)]);
            for (const auto& i : v.items) collect(i);
        };
        for (const auto& a : n.args) collect(a);
        for (const auto& [_, a] : n.kwargs) collect(a);
        std::vector<pickle::Value> todo;
        if (const auto* a = doc.attr(pn, "args")) todo.push_back(*a);
        if (const auto* kw = doc.attr(pn, "kwargs")) todo.push_back(*kw);
        std::size_t budget = 1'000'000;
        std::function<void(const pickle::Value&, int)> walk = [&](const pickle::Value& v, int depth) {
            if (!v.isNode() || depth > limits.maxNesting || budget == 0) return;
            --budget;
            const auto& node = doc.node(v);
            if (node.kind == pickle::Kind::Instance) {
                if (doc.className(v) == "torchgraph.pgraph.pickleable.PickleableNode") {
                    if (const auto* nm = doc.attr(v, "name"))
                        if (const auto* s = doc.str(*nm)) pickledRefs.push_back(pickle::validUtf8(*s));
                }
                return;
            }
            for (const auto& i : node.items) walk(i, depth + 1);
            for (const auto& [key, val] : node.entries) walk(val, depth + 1);
        };
        for (const auto& v : todo) walk(v, 0);
        if (pickledRefs != printedRefs)
            throw TorchGraphError(file, 0, "the pickled node " + name + " takes other nodes than the printed form's (line " + std::to_string(n.line) + ")");
        // Its framework line: the innermost frame outside torch.
        if (const auto* meta = doc.attr(pn, "meta"))
            if (const auto* trace = doc.dictGet(*meta, "stack_trace"))
                if (const auto* s = doc.str(*trace)) {
                    auto frames = parseStackTrace(*s);
                    const SourceLine* pick = nullptr;
                    for (auto it = frames.rbegin(); it != frames.rend(); ++it)
                        if (!insideTorch(it->file)) {
                            pick = &*it;
                            break;
                        }
                    if (!pick && !frames.empty()) pick = &frames.back();
                    if (pick) {
                        auto [it, fresh] = sourceIds.emplace(sourceKey(*pick), static_cast<int>(sources.size()));
                        if (fresh) sources.push_back(*pick);
                        sourceOf[next] = it->second;
                    }
                }
        ++next;
    }
    if (next != g.nodes.size())
        throw TorchGraphError(file, 0, "the printed form's node " + g.nodes[next].name + " is not among the pickled nodes");
    // The pickled stacks replace the printed comments where they name a frame; a node without a
    // pickled stack keeps what the printed form says.
    auto printed = std::move(g.sources);
    g.sources.clear();
    std::unordered_map<std::string, int> ids;
    auto intern = [&](const SourceLine& s) {
        auto [it, fresh] = ids.emplace(sourceKey(s), static_cast<int>(g.sources.size()));
        if (fresh) g.sources.push_back(s);
        return it->second;
    };
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        auto& n = g.nodes[i];
        if (sourceOf[i] >= 0) n.source = intern(sources[static_cast<std::size_t>(sourceOf[i])]);
        else if (n.source >= 0) n.source = intern(printed[static_cast<std::size_t>(n.source)]);
    }
    return g;
}

}  // namespace tv::torch
