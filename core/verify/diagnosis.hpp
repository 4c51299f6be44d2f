// Diagnoses: every failure is a named kind with a location, kept as data and rendered as text
// (Alive2-like), as JSON, and (in the Studio) as graph highlights.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/plan.hpp"

namespace tv {

enum class FailureKind : std::uint8_t {
    Counterexample,           ///< the solver found inputs where a lineage breaks
    DataflowBroken,           ///< a lineage target cannot be reached from proven sources
    ShapeMismatch,            ///< shapes in the plan do not agree
    ShapeReductionInfeasible, ///< no reduced shapes keep every partition boundary
    LaneMisalignment,         ///< an op mixes microbatch lanes
    UnsupportedOperator,      ///< an op without symbolic semantics
    Inconclusive,             ///< solver unknown, timeout or resource limit
    InvalidPlan,              ///< the plan file is malformed
};

std::string_view toString(FailureKind k);
/// Inconclusive kinds never count as a pass and never as a proven bug.
bool isInconclusive(FailureKind k);

/// A named tensor's values (at reduced shape) for the Example / Logical / Parallel sections.
struct TensorValues {
    std::string name;
    Shape shape;                       ///< reduced shape
    Shape fullShape;                   ///< shape in the plan
    std::int32_t rank = -1;
    std::int32_t microbatch = -1;
    std::vector<std::string> values;   ///< exact values ("3/2"), row-major
    nlohmann::json toJson() const;
};

struct Failure {
    FailureKind kind = FailureKind::Counterexample;
    std::uint32_t stage = kNone;          ///< stage id, kNone for plan-level failures
    std::string logicalOp;                ///< logical op producing the tensor (empty for glue stages)
    std::string parallelOp;               ///< the exact parallel op
    std::int32_t rank = -1;
    nlohmann::json coordinates = nlohmann::json::object();
    std::int32_t microbatch = -1;
    std::string tensor;                   ///< logical tensor whose lineage breaks
    std::string parallelTensor;           ///< the parallel tensor that breaks it
    std::string slice;                    ///< lineage slice in logical coordinates, e.g. [0:4, 0:8]
    std::string element;                  ///< first wrong element in reduced coordinates
    std::string expected, actual;         ///< values at that element
    std::string message;                  ///< one sentence
    std::vector<TensorValues> example;    ///< stage inputs (logical)
    std::vector<TensorValues> logical;    ///< logical values of the failing tensor
    std::vector<TensorValues> parallel;   ///< parallel values of the failing copy
    std::string otherEnd;                 ///< dataflow broken: the other end of the problem
    std::string otherEndTensor;           ///< the other end's tensor, by name (for highlighting)
    bool otherEndLogical = false;         ///< whether otherEndTensor is a logical tensor (else parallel)

    nlohmann::json toJson() const;
    /// Alive2-like text: the headline, then Example / Logical / Parallel / Expected vs Actual.
    std::string toText() const;
};

}  // namespace tv
