// Lineage inferred between a lowered single-device program and its lowered rank programs: for
// each parallel tensor, which part of which logical tensor it holds, and how (the part itself, a
// partial sum, a partial maximum), op by op from the inputs' relations and the ops' semantics.
//
// Parts are boxes in *factored* coordinates: each dim of the logical tensor may be split into
// row-major factors, each with its own range. Megatron's attention merges batch and heads
// (`[8, 24, s, d] -> [192, s, d]`) with the heads sharded: a rank holds factors 8 × [12r, 12r+12)
// of the merged dim, a strided set no plain box describes, and the split back (`[192, ...] ->
// [8, 24, ...]`) makes it a box again. Only relations whose every dim is one factor are written as
// lineage; the others carry inference across.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/rational.hpp"
#include "torch/torch_lowering.hpp"

namespace tv::torch {

using Dims = std::vector<std::int64_t>;

/// One row-major factor of a dim: its size and the range [lo, hi) of it held.
struct Factor {
    std::int64_t size = 1, lo = 0, hi = 1;
    bool full() const { return lo == 0 && hi == size; }
    bool operator==(const Factor&) const = default;
};
/// A dim as its factors, outermost first (never empty).
using FactoredDim = std::vector<Factor>;

/// Which part of a reduction a partial result covers: a range of the reduced extent.
struct Piece {
    std::string tag;  ///< the reduction (logical op and what it reduces)
    std::int64_t lo = 0, hi = 0, total = 0;
    bool operator==(const Piece&) const = default;
};

/// How a parallel tensor p holds a logical tensor L (at the part `dims` says):
/// Exact: L[part] = coeff · p.  Partial: L[part] = coeff · Σ p over the ranks whose pieces tile
/// the reduction.  PartialMax: L[part] = max of p over such ranks (never written as lineage).
struct Relation {
    enum class Kind : std::uint8_t { Exact, Partial, PartialMax };
    Kind kind = Kind::Exact;
    int logical = -1;
    std::vector<FactoredDim> dims;
    Rational coeff{1};
    std::vector<Piece> pieces;

    Dims extent() const;
    bool plain(std::size_t d) const { return dims[d].size() == 1; }
    bool allPlain() const;
    bool full(std::size_t d) const;
    std::int64_t lo(std::size_t d) const { return dims[d][0].lo; }
    std::int64_t hi(std::size_t d) const { return dims[d][0].hi; }
    /// The part as one box (every dim plain).
    Dims los() const;
    Dims his() const;
};

/// The whole of a tensor of `shape`, or the box [lo, hi) of it.
std::vector<FactoredDim> wholeDims(const Dims& shape);
std::vector<FactoredDim> boxDims(const Dims& shape, const Dims& lo, const Dims& hi);

/// A part of a tensor of shape `from` seen through a row-major reshape to `to` (splitting factors
/// where a dim of `to` needs it): nullopt when it is no part in factored coordinates.
std::optional<std::vector<FactoredDim>> reshapeDims(const std::vector<FactoredDim>& part, const Dims& to);

/// Whether the pieces of the given relations tile their reduction exactly once.
bool piecesTile(const std::vector<const Relation*>& rs);

class LineageInference {
public:
    LineageInference(const LoweredProgram& logical, const LoweredProgram& parallel);
    /// Inputs by position: a replica of an equal shape, else a shard in rank order along the one
    /// dim that is as many times smaller as there are ranks.
    void relateInputs();
    /// Every parallel op in dependency order.
    void run();
    /// Dropout masks inference did not reach (a dropout whose input holds no known part): the
    /// single device's mask of the same node, by the input rule (its shape, or split evenly).
    void relateRemainingMasks();
    /// Inputs the lowering made for what the runtime gives every rank alike (vLLM's attention
    /// metadata): the single device's input of the same kind, whole.
    void relateRuntimeInputs();
    /// Which inputs hold a shard only by the default rule (still, after a relations file): said
    /// with every verdict, since a framework may lay them out otherwise.
    std::string defaultShardNote() const;

    std::vector<std::optional<Relation>>& relations() { return rel_; }
    std::vector<std::string> notes;
    /// Ops whose inputs are related and whose results are not: where inference stopped.
    std::vector<int> stuck;
    /// (parallel op, logical op) paired although they compute otherwise: their claim is what the
    /// parallel op's result should hold.
    std::vector<std::pair<int, int>> nearMatches;

private:
    const LoweredProgram& L_;
    const LoweredProgram& P_;
    std::vector<std::optional<Relation>> rel_;
    std::vector<std::vector<std::pair<int, int>>> consumers_;  ///< logical tensor -> (op, input position)
    std::set<std::string> scaledOps_;  ///< logical ops a parallel op scales otherwise (said once)

    const Dims& lshape(int t) const { return L_.tensors[static_cast<std::size_t>(t)].shape; }
    const Dims& pshape(int t) const { return P_.tensors[static_cast<std::size_t>(t)].shape; }
    void set(int t, Relation r);
    void infer(int op);
    bool matches(const LoweredOp& l, const LoweredOp& p, const std::vector<const Relation*>& ins, bool exactly) const;
    bool transfer(const LoweredOp& l, const LoweredOp& p, std::vector<const Relation*> ins);
    bool elementwise(const LoweredOp& l, const LoweredOp& p, std::vector<const Relation*> ins);
    bool parallelOnly(const LoweredOp& op, const std::vector<const Relation*>& ins);
    /// The relation r and the same part in logical tensors that copy it (split outputs, slices,
    /// concatenations at the input's offset), breadth first.
    std::vector<Relation> copiesOf(const Relation& r) const;
    bool copiedMatch(const LoweredOp& op, const std::vector<const Relation*>& ins, int first);
    bool claimByName(const LoweredOp& op, const std::vector<const Relation*>& ins);
    std::map<std::string, int> logicalByName_;
    struct DefaultShard {
        int tensor;
        std::string label;
        Relation relation;
    };
    std::vector<DefaultShard> defaults_;
    void collective(const LoweredOp& op);
    std::optional<Relation> byShape(int logical, int parallel, int rank) const;
};

}  // namespace tv::torch
