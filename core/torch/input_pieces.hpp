// Parallel inputs made of several parts of a logical input, e.g. vLLM's fused QKV weight: rank r
// holds [q heads of r; k heads of r; v heads of r], three ranges of the single device's rows that
// no one box (factored or not) describes.
//
// A relations file declares such an input as the concatenation of pieces; each piece becomes an
// input of its own (one box of the logical input), and the concatenation is carried forward
// through the ops that distribute over it (exact identities: a transpose, a matmul along the
// pieces' dim, an elementwise op, a slice or split at or inside piece boundaries, a further
// concatenation), so that the op that separates the parts again (the split into q, k and v) reads
// the pieces themselves. Where an op does not distribute, the concatenation is made as a `concat`
// op and the program computes exactly what it did.
#pragma once

#include <cstdint>
#include <vector>

#include "torch/torch_lowering.hpp"

namespace tv::torch {

struct InputPieces {
    int tensor = -1;               ///< the parallel input (a tensor of the program)
    std::size_t dim = 0;           ///< the dim the pieces are concatenated along
    std::vector<std::int64_t> extents;  ///< each piece's size along `dim`, in order
};

/// Replaces each declared input by new input tensors, one per piece (returned in declaration
/// order), and rewrites the program so that the concatenations travel as far as they distribute.
/// The declared inputs stop being inputs (their entry in `inputs` becomes -1).
std::vector<std::vector<int>> splitInputPieces(LoweredProgram& program, const std::vector<InputPieces>& declared);

/// A slice or split of a concatenation whose range lies inside one of its inputs reads that input
/// (the input itself when the range is all of it): exact, and it keeps a stage that needs one
/// part of a concatenation (a slice_scatter's result split again) from reaching the others.
/// With `mergeRepeatedCalls`, a call repeated on the same tensors (kind, attributes, inputs) is
/// dropped and its results read the first call's (the single device's program: a value then has
/// one name for inference to pair with).
void forwardCopies(LoweredProgram& program, bool mergeRepeatedCalls);

}  // namespace tv::torch
