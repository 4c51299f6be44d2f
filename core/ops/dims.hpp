// Operator dims, einsum-style: for each operand dim, a label naming the index it carries. A label
// on an input and an output is an index the op maps through (the op can be split along it); a
// label only on inputs is contracted (the outputs hold partial sums when it is split); -1 marks a
// dim the op reads as a whole (softmax's dim, a slice's dim). The generator shards by these
// rules; the verifier uses them to decide when one data-parallel replica's proof stands for all.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/plan.hpp"

namespace tv {

struct DimLabel {
    std::int64_t size = 1;  ///< what a split must divide
    bool sums = false;      ///< outputs without this label hold partial sums when it is split
    bool mean = false;      ///< splitting it scales local results by the number of parts
    bool noShard = false;
};

struct OpDims {
    std::vector<std::vector<int>> in, out;  ///< label per dim, -1: not splittable
    std::vector<DimLabel> labels;
    int add(std::int64_t size) {
        labels.push_back({size});
        return static_cast<int>(labels.size()) - 1;
    }
};

/// The dims of one op given its operand shapes; throws std::invalid_argument for an operator
/// without a rule.
OpDims operatorDims(std::string_view kind, const nlohmann::json& attrs, const std::vector<Shape>& in, const std::vector<Shape>& out);

}  // namespace tv
