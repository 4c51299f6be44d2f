// Diagnoses: every failure is a named kind with a location, kept as data and rendered as text
// (Alive2-like), as JSON, and (in the Studio) as graph highlights.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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
    UnclaimedOutput,          ///< a result that leaves the step is claimed by no lineage, so it is not checked
};

std::string_view toString(FailureKind k);
/// The kind in words, for people ("values differ (counterexample)"); toString is the name the
/// JSON report and scripts use.
std::string_view describe(FailureKind k);
/// The kind named by toString; throws std::invalid_argument for another name.
FailureKind failureKindFromString(std::string_view name);
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
    static TensorValues fromJson(const nlohmann::json& j);
    /// A heading line (name, shape, rank, microbatch), then one line per row of the last
    /// dimension, values separated by tabs: for pasting into a spreadsheet or a message.
    std::string toText() const;
};

/// One lineage claim checked at a stage's end: a copy of a logical slice, and whether the
/// counterexample's values satisfy it.
struct LineageCheck {
    std::string relation;                 ///< e.g. "logits[0:8, 0:4] == logits@r0"
    bool holds = true;
    std::string element, expected, actual;  ///< the first wrong element (reduced coordinates), when it fails
    /// When it fails (and has at most kShownElements elements): the slice's reduced shape and
    /// every element's expected (logical) and actual (the copy's) value, row-major.
    Shape shape;
    std::vector<std::string> expectedValues, actualValues;
};

/// One op of a failing stage with the counterexample's values of what it reads and writes.
struct TraceStep {
    bool parallel = true;
    std::string op, kind;
    /// Where the step's result lands: a local op's rank; a collective's rank of its first output,
    /// except at the divergence, where it is the rank of the wrong value (the diagnosis's rank).
    std::int32_t rank = -1, microbatch = -1;
    std::vector<std::int32_t> group;      ///< collectives: the ranks taking part, in the group's order
    std::vector<TensorValues> inputs, outputs;  ///< at the divergence, the wrong output comes first
    std::vector<LineageCheck> checks;     ///< the lineage copies this op completes (it is their last producer)
    int logical = -1;                     ///< parallel steps: the logical step shown beside it (-1: none)
    nlohmann::json toJson() const;
    static TraceStep fromJson(const nlohmann::json& j);
};

/// A failing stage replayed under the solver's counterexample, op by op in topological order on
/// both sides: what Next/Previous walk in the Studio and `verify --trace` prints.
struct StageTrace {
    std::vector<TraceStep> logical, parallel;
    std::vector<std::string> assumptions;  ///< the stage's input lineage, true by assumption
    int divergence = -1;                   ///< parallel step whose output first breaks its lineage
    int misaligned = -1;                   ///< parallel step reading another microbatch (lane misalignment)
    /// exp, log, pow with a fractional exponent... are uninterpreted: their values are the solver's
    /// choice, consistent but not the real function's.
    bool uninterpreted = false;
    nlohmann::json toJson() const;
    static StageTrace fromJson(const nlohmann::json& j);
};

/// A rank's coordinates as saved in a failure ({"dp":0,"tp":1}) in words: "dp=0 tp=1".
std::string formatCoordinates(const nlohmann::json& coordinates);

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
    std::optional<SourceLine> source;         ///< the parallel op's framework source line, if the plan has one
    std::optional<SourceLine> logicalSource;  ///< the logical op's
    std::string otherEnd;                 ///< dataflow broken: the other end of the problem
    std::string otherEndTensor;           ///< the other end's tensor, by name (for highlighting)
    bool otherEndLogical = false;         ///< whether otherEndTensor is a logical tensor (else parallel)
    /// The stage replayed op by op (CheckOptions::keepTrace, counterexamples only). Shared: a
    /// failure is copied into reports; the trace is immutable once made.
    std::shared_ptr<const StageTrace> trace;

    /// Everything a failure holds, in the report's form (JSON "failure"). fromJson reads it back
    /// exactly (a stage checked in a solver process of its own sends its result this way);
    /// it throws nlohmann::json::exception or std::invalid_argument on anything else.
    nlohmann::json toJson() const;
    static Failure fromJson(const nlohmann::json& j);
    /// Alive2-like text: the headline, then Example / Logical / Parallel / Expected vs Actual.
    std::string toText() const;
};

}  // namespace tv
