// A logical graph and one graph per rank, read and checked as one parallel program: which file is
// which rank, which ranks form each communication group, and which collective calls of the ranks
// of a group are one collective.
//
// - A parallel file's rank is what its name says (`fw.g0.r3.py`), else its header's, else its
//   position in the list; the name and the header must agree, and the ranks must be 0..n-1, once each.
// - All graphs are of one phase and graph id; every rank takes as many inputs as the others.
// - A group is the set of ranks whose graphs call a collective on it (c10d names a group, never
//   its members); where a call says the group's size, the size must be that set's.
// - Collectives on a group are matched by issue order (NCCL's rule: every member issues the
//   group's collectives in the same order), each must be the same kind with the same reduction,
//   size, source rank and input type on every member; the logical graph's collectives are on
//   groups of one rank (identities).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "torch/torch_graph.hpp"

namespace tv::torch {

/// One collective as every member of its group issues it.
struct Collective {
    enum class Kind : std::uint8_t { AllReduce, AllGather, ReduceScatter, Broadcast };
    Kind kind = Kind::AllReduce;
    std::string reduce;    ///< all-reduce, reduce-scatter: "sum", "max", "avg", ...
    std::string group;     ///< the group's name
    int source = -1;       ///< broadcast: the source rank within the group
    std::vector<int> ranks;       ///< the group's members, ascending
    std::vector<int> nodeOnRank;  ///< per member: the call's node in that rank's graph
};

const char* toString(Collective::Kind k);

/// What a call is, if a collective: its kind, reduction, group name, stated group size (0: not
/// stated) and source rank, read from positional or keyword arguments. Throws TorchGraphError
/// (naming the node's line) for a collective call whose arguments cannot be read.
struct CollectiveCall {
    Collective::Kind kind = Collective::Kind::AllReduce;
    std::string reduce, group;
    int groupSize = 0;
    int source = -1;
    int input = -1;  ///< the node it communicates
};
std::optional<CollectiveCall> collectiveCall(const TorchGraph& g, const Node& n);

struct RankSet {
    TorchGraph logical;
    std::vector<TorchGraph> ranks;  ///< index: rank
    std::map<std::string, std::vector<int>> groups;
    std::vector<Collective> collectives;  ///< in the issue order of each group's lowest rank; groups in order of first use
    std::vector<std::string> notes;       ///< what was decided without being said (ranks from the order given)
};

/// Checks and assembles graphs already read; `parallel[k]` came from `parallel[k].file`.
/// Throws TorchGraphError naming the file (and line) of the first problem.
RankSet assembleRankSet(TorchGraph logical, std::vector<TorchGraph> parallel);

/// Reads the files (either form each) and assembles them.
RankSet loadRankSet(const std::string& logicalPath, const std::vector<std::string>& parallelPaths, const ReadLimits& limits = {});

}  // namespace tv::torch
