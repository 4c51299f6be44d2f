// ATen graphs lowered onto the operator registry: a logical graph and its rank graphs (a RankSet)
// become two programs of registry ops, with every op's framework source line kept.
//
// - Each ATen call is lowered to registry ops by its semantics (docs/torch-graphs.md has the
//   table): `mm` to matmul, `masked_fill` to x + m·(v − x), `slice_scatter` to slices and their
//   backward, and so on. Calls that only move or rename a value (`detach`, `clone`, `_to_copy`
//   between float types, `wait_tensor`, a full-range `slice`) are aliases: no op.
// - Megatron's vocabulary-parallel idioms (ids masked to the rank's vocabulary range, then a gather
//   and the rows of other ranks zeroed) become `embedding` and `target_logit` with `parts` and
//   `index`: no literal tied to a vocabulary size survives, so shape reduction stays sound.
// - Collectives become one registry collective over the group that calls them (RankSet); on the
//   logical graph (groups of one) they are identities.
// - A call without semantics yet lowers to nothing: the value is marked unsupported with the call,
//   its rank and its source line, and only a claim that needs it becomes INCONCLUSIVE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/plan.hpp"
#include "torch/rank_set.hpp"

namespace tv::torch {

struct LoweredTensor {
    std::string name;
    std::vector<std::int64_t> shape;
    bool isInt = false;
    int rank = -1;         ///< parallel: the rank holding it; logical: -1
    int input = -1;        ///< a graph input: its position in the graph's inputs
    bool dropoutMask = false;  ///< an input made for a dropout's random mask
    /// An input made for a value the runtime gives every rank alike and the graph does not carry
    /// (vLLM's attention metadata): what it is. Related to the single device's input of the same text.
    std::string runtimeInput;
    int producer = -1;     ///< the op producing it, or -1
    /// Made for a result that has no semantics (a collective whose reduction or input has none):
    /// why, as an index into LoweredProgram::unsupported. Such a tensor is never an input.
    int unsupported = -1;
};

struct LoweredOp {
    std::string name;
    std::string kind;  ///< registry op
    nlohmann::json attrs = nlohmann::json::object();
    std::vector<int> inputs, outputs;
    int rank = -1;            ///< local op: its rank; collective: -1
    std::vector<int> group;   ///< collective: its ranks in group order
    std::string torchNode;    ///< the ATen call it comes from
    std::string torchTarget;
    int source = -1;          ///< index into LoweredProgram::sources
};

/// A call that has no semantics yet: what a claim that needs it is INCONCLUSIVE about.
struct Unsupported {
    std::string node, target, reason;
    int rank = -1;
    int source = -1;
    std::string file;
    int line = 0;
    std::string describe(const std::vector<SourceLine>& sources) const;
};

/// What one output position of a graph holds, once lowered.
struct LoweredOutput {
    std::string node;       ///< the torch node returned ("" for None)
    int tensor = -1;        ///< its lowered tensor, or -1
    int unsupported = -1;   ///< why it has none: index into LoweredProgram::unsupported
    /// A value computed from no input at all by one call (`zeros([], dtype=int32)`): the call's
    /// text; equal texts on both sides are equal values.
    std::string constantCall;
};

struct LoweredProgram {
    std::vector<LoweredTensor> tensors;
    std::vector<LoweredOp> ops;
    std::vector<SourceLine> sources;
    std::vector<Unsupported> unsupported;
    /// What the lowering assumed that the graphs do not say (each once).
    std::vector<std::string> assumptions;
    /// The first place a graph contradicts itself ("FILE:LINE: node: why"), or "": a damaged pair.
    std::string damaged;
    std::vector<std::vector<int>> inputs;               ///< per rank: tensor of each graph input (-1: none)
    std::vector<std::vector<LoweredOutput>> outputs;    ///< per rank
    int ranks = 1;
};

/// The program's ops, each after the ops producing its inputs (collectives come last in the list
/// but feed later local ops).
std::vector<int> topologicalOrder(const LoweredProgram& program);

/// The logical graph (one program, no ranks).
LoweredProgram lowerLogical(const RankSet& set);
/// Every rank's graph, with the collectives joined across ranks.
LoweredProgram lowerParallel(const RankSet& set);

}  // namespace tv::torch
