#include "torch/rank_set.hpp"

#include <algorithm>
#include <set>

namespace tv::torch {

const char* toString(Collective::Kind k) {
    switch (k) {
    case Collective::Kind::AllReduce: return "all-reduce";
    case Collective::Kind::AllGather: return "all-gather";
    case Collective::Kind::ReduceScatter: return "reduce-scatter";
    case Collective::Kind::Broadcast: return "broadcast";
    }
    return "?";
}

namespace {

/// Argument `pos`, or keyword `key`; null if neither is given.
const Value* argument(const Node& n, std::size_t pos, std::string_view key) {
    if (pos < n.args.size()) return &n.args[pos];
    return n.kwarg(key);
}

}  // namespace

std::optional<CollectiveCall> collectiveCall(const TorchGraph& g, const Node& n) {
    if (n.kind != Node::Kind::Call) return std::nullopt;
    struct Shape {
        const char* target;
        Collective::Kind kind;
        int reducePos, sizePos, sourcePos, groupPos;
    };
    static const Shape shapes[] = {
        {"_c10d_functional.all_reduce.default", Collective::Kind::AllReduce, 1, -1, -1, 2},
        {"_c10d_functional.all_gather_into_tensor.default", Collective::Kind::AllGather, -1, 1, -1, 2},
        {"_c10d_functional.reduce_scatter_tensor.default", Collective::Kind::ReduceScatter, 1, 2, -1, 3},
        {"_c10d_functional.broadcast.default", Collective::Kind::Broadcast, -1, -1, 1, 2},
        {"vllm.all_reduce.default", Collective::Kind::AllReduce, -1, -1, -1, 1},
    };
    const Shape* s = nullptr;
    for (const auto& c : shapes)
        if (n.target == c.target) s = &c;
    if (!s) return std::nullopt;
    auto fail = [&](const std::string& what) -> void { throw TorchGraphError(g.file, n.line, n.name + " (" + n.target + "): " + what); };
    CollectiveCall c;
    c.kind = s->kind;
    const auto* input = argument(n, 0, n.target.rfind("vllm.", 0) == 0 ? "input_" : "input");
    if (!input) input = n.kwarg("self");
    if (!input || !input->isNode()) fail("its first argument is not a tensor of the graph");
    c.input = input->node;
    if (s->reducePos >= 0) {
        const auto* r = argument(n, static_cast<std::size_t>(s->reducePos), "reduceOp");
        if (!r || r->kind != Value::Kind::String) fail("no reduction is given");
        c.reduce = r->text;
    } else if (s->kind == Collective::Kind::AllReduce) {
        c.reduce = "sum";  // vLLM's all-reduce sums
    }
    if (s->sizePos >= 0) {
        const auto* z = argument(n, static_cast<std::size_t>(s->sizePos), "group_size");
        if (!z || z->kind != Value::Kind::Int || z->i < 1 || z->i > 65'536) fail("the group size is not a whole number of ranks");
        c.groupSize = static_cast<int>(z->i);
    }
    if (s->sourcePos >= 0) {
        const auto* z = argument(n, static_cast<std::size_t>(s->sourcePos), "src");
        if (!z || z->kind != Value::Kind::Int || z->i < 0 || z->i > 65'536) fail("the source rank is not a rank");
        c.source = static_cast<int>(z->i);
    }
    const auto* grp = argument(n, static_cast<std::size_t>(s->groupPos), "group_name");
    if (!grp) grp = n.kwarg("group");
    if (!grp || grp->kind != Value::Kind::String || grp->text.empty()) fail("the group is not named");
    c.group = grp->text;
    return c;
}

RankSet assembleRankSet(TorchGraph logical, std::vector<TorchGraph> parallel) {
    if (parallel.empty()) throw TorchGraphError(logical.file, 0, "no parallel graphs are given");
    RankSet set;
    // Ranks: the file name, else the header, else the order given.
    const int n = static_cast<int>(parallel.size());
    std::vector<int> rankOf(parallel.size(), -1);
    bool fromOrder = false;
    for (std::size_t k = 0; k < parallel.size(); ++k) {
        auto& g = parallel[k];
        const int named = rankFromFileName(g.file);
        if (named >= 0 && g.rank >= 0 && named != g.rank)
            throw TorchGraphError(g.file, 0, "the file name says rank " + std::to_string(named) + " but the graph's header says rank " + std::to_string(g.rank));
        int r = named >= 0 ? named : g.rank;
        if (r < 0) {
            r = static_cast<int>(k);
            fromOrder = true;
        }
        if (r >= n)
            throw TorchGraphError(g.file, 0, "rank " + std::to_string(r) + " among " + std::to_string(n) + " parallel graphs (ranks are 0 to " + std::to_string(n - 1) +
                                                 ": is a rank's file missing?)");
        rankOf[k] = r;
        g.rank = r;
    }
    std::vector<int> fileOfRank(parallel.size(), -1);
    for (std::size_t k = 0; k < parallel.size(); ++k) {
        auto& slot = fileOfRank[static_cast<std::size_t>(rankOf[k])];
        if (slot >= 0)
            throw TorchGraphError(parallel[k].file, 0, "rank " + std::to_string(rankOf[k]) + " is given twice (also " + parallel[static_cast<std::size_t>(slot)].file + ")");
        slot = static_cast<int>(k);
    }
    if (fromOrder) set.notes.push_back("ranks taken from the order the parallel files were given (their names and headers do not say)");
    set.ranks.resize(parallel.size());
    for (std::size_t r = 0; r < parallel.size(); ++r) set.ranks[r] = std::move(parallel[static_cast<std::size_t>(fileOfRank[r])]);
    set.logical = std::move(logical);
    if (set.logical.rank > 0)
        throw TorchGraphError(set.logical.file, 0, "the logical graph is rank " + std::to_string(set.logical.rank) + " of a parallel program (a single-device graph is rank 0)");
    // One phase and graph id.
    for (const auto& g : set.ranks) {
        if (!g.phase.empty() && !set.logical.phase.empty() && g.phase != set.logical.phase)
            throw TorchGraphError(g.file, 0, "a " + g.phase + " graph, but the logical graph is a " + set.logical.phase + " graph");
        if (g.phase != set.ranks[0].phase) throw TorchGraphError(g.file, 0, "a " + g.phase + " graph, but rank 0's is a " + set.ranks[0].phase + " graph");
        if (g.gid != set.ranks[0].gid) throw TorchGraphError(g.file, 0, "graph " + std::to_string(g.gid) + ", but rank 0's is graph " + std::to_string(set.ranks[0].gid));
        if (g.inputs.size() != set.ranks[0].inputs.size())
            throw TorchGraphError(g.file, 0, std::to_string(g.inputs.size()) + " inputs, but rank 0's graph takes " + std::to_string(set.ranks[0].inputs.size()));
    }
    // The logical graph's collectives are on groups of one.
    for (const auto& node : set.logical.nodes)
        if (auto c = collectiveCall(set.logical, node); c && c->groupSize > 1)
            throw TorchGraphError(set.logical.file, node.line, node.name + ": a collective over " + std::to_string(c->groupSize) + " ranks in the single-device graph");
    // Groups, and each member's calls on each group in issue order.
    std::map<std::string, std::map<int, std::vector<std::pair<int, CollectiveCall>>>> calls;  // group -> rank -> (node, call)
    std::vector<std::string> groupOrder;
    for (std::size_t r = 0; r < set.ranks.size(); ++r) {
        const auto& g = set.ranks[r];
        for (std::size_t i = 0; i < g.nodes.size(); ++i)
            if (auto c = collectiveCall(g, g.nodes[i])) {
                if (!calls.count(c->group)) groupOrder.push_back(c->group);
                calls[c->group][static_cast<int>(r)].emplace_back(static_cast<int>(i), *c);
            }
    }
    for (const auto& name : groupOrder) {
        const auto& byRank = calls.at(name);
        std::vector<int> members;
        for (const auto& [r, _] : byRank) members.push_back(r);
        set.groups[name] = members;
        const int first = members.front();
        const auto& lead = byRank.at(first);
        const auto& leadGraph = set.ranks[static_cast<std::size_t>(first)];
        for (const auto& [r, list] : byRank) {
            const auto& g = set.ranks[static_cast<std::size_t>(r)];
            for (const auto& [node, c] : list)
                if (c.groupSize > 0 && c.groupSize != static_cast<int>(members.size())) {
                    std::string who;
                    for (int m : members) who += (who.empty() ? "" : ", ") + std::to_string(m);
                    throw TorchGraphError(g.file, g.nodes[static_cast<std::size_t>(node)].line,
                                          g.nodes[static_cast<std::size_t>(node)].name + ": a collective on group '" + name + "' of " + std::to_string(c.groupSize) +
                                              " ranks, but ranks " + who + " call collectives on it");
                }
            if (list.size() != lead.size())
                throw TorchGraphError(g.file, 0, "rank " + std::to_string(r) + " issues " + std::to_string(list.size()) + " collectives on group '" + name + "', rank " +
                                                     std::to_string(first) + " issues " + std::to_string(lead.size()) + ": they would wait for each other forever");
            for (std::size_t k = 0; k < list.size(); ++k) {
                const auto& [node, c] = list[k];
                const auto& [leadNode, l] = lead[k];
                const auto& here = g.nodes[static_cast<std::size_t>(node)];
                const auto& there = leadGraph.nodes[static_cast<std::size_t>(leadNode)];
                std::string differs;
                if (c.kind != l.kind) differs = std::string("is a ") + toString(c.kind) + ", not a " + toString(l.kind);
                else if (c.reduce != l.reduce) differs = "reduces by " + c.reduce + ", not " + l.reduce;
                else if (c.source != l.source) differs = "broadcasts from " + std::to_string(c.source) + ", not " + std::to_string(l.source);
                else {
                    const auto& a = g.nodes[static_cast<std::size_t>(c.input)].type;
                    const auto& b = leadGraph.nodes[static_cast<std::size_t>(l.input)].type;
                    if (a && b && !(*a == *b)) differs = "communicates a " + a->toString() + ", not a " + b->toString();
                }
                if (!differs.empty())
                    throw TorchGraphError(g.file, here.line, here.name + ", rank " + std::to_string(r) + "'s collective " + std::to_string(k + 1) + " on group '" + name + "', " +
                                                                 differs + " as rank " + std::to_string(first) + "'s (" + there.name + ", line " + std::to_string(there.line) + ")");
            }
        }
        for (std::size_t k = 0; k < lead.size(); ++k) {
            Collective c;
            c.kind = lead[k].second.kind;
            c.reduce = lead[k].second.reduce;
            c.group = name;
            c.source = lead[k].second.source;
            c.ranks = members;
            for (int r : members) c.nodeOnRank.push_back(byRank.at(r)[k].first);
            if (c.kind == Collective::Kind::Broadcast && c.source >= static_cast<int>(members.size()))
                throw TorchGraphError(leadGraph.file, leadGraph.nodes[static_cast<std::size_t>(lead[k].first)].line,
                                      "a broadcast from rank " + std::to_string(c.source) + " of group '" + name + "', which has " + std::to_string(members.size()) + " ranks");
            set.collectives.push_back(std::move(c));
        }
    }
    return set;
}

RankSet loadRankSet(const std::string& logicalPath, const std::vector<std::string>& parallelPaths, const ReadLimits& limits) {
    auto logical = readTorchGraphFile(logicalPath, limits);
    std::vector<TorchGraph> parallel;
    parallel.reserve(parallelPaths.size());
    for (const auto& p : parallelPaths) parallel.push_back(readTorchGraphFile(p, limits));
    return assembleRankSet(std::move(logical), std::move(parallel));
}

}  // namespace tv::torch
