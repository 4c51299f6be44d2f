// The operator registry: for every operator, in one place, its arity and attributes, its shape
// rule (checked on concrete shapes, and posed as integer constraints for shape reduction), its
// semantics (written once over an algebra: symbolic on Z3, concrete on doubles) and its
// backward (VJP) rule, which emits ops of their own. The operators are defined by family, each
// family's shape rules, semantics, VJPs and registration together (ops_*.cpp, written with
// ops/op_definition.hpp); this header includes no Z3 (the symbolic side: ops/symbolic.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/plan.hpp"
#include "ops/algebra.hpp"

namespace z3 {
class expr;
}

namespace tv {

struct SymAlgebra;

/// A tensor value at (possibly reduced) shape, one scalar per element. Integer (index) tensors
/// hold their values in `v` too (unknowns in a proof, whole numbers in replay), flagged isInt.
template <class S>
struct Value {
    Shape shape;
    std::vector<S> v;
    bool isInt = false;
};

// ----- shape rules ---------------------------------------------------------------------------

/// A concrete shape rule read a dim its operand does not have (the last dim of a rank-0 tensor).
struct MissingDim {};

/// One operand's dims in a concrete shape rule. Element access is checked: the reader validates
/// every op by its concrete rule first, so a rule that would read past an operand's rank (an op
/// the plan gives a tensor of too few dims) is a refused op, never a read past the end; the
/// symbolic rules then run only on ops whose ranks the concrete rule accepted.
class CheckedDims : public std::vector<std::int64_t> {
public:
    using std::vector<std::int64_t>::vector;
    explicit CheckedDims(const std::vector<std::int64_t>& v) : std::vector<std::int64_t>(v) {}
    const std::int64_t& operator[](std::size_t i) const {
        if (i >= size()) throw MissingDim{};
        return data()[i];
    }
    const std::int64_t& back() const { return (*this)[size() - 1]; }
    const std::int64_t& front() const { return (*this)[0]; }
};

/// Shape rules run on concrete shapes (validation) and on integer unknowns (shape reduction).
class ConcreteShapes {
public:
    using D = std::int64_t;
    using Dims = CheckedDims;
    D orig(D d) const { return d; }
    D cst(std::int64_t v) const { return v; }
    D mul(D a, D b) const { return a * b; }
    D add(D a, D b) const { return a + b; }
    void eq(D a, D b, const std::string& what);
    void min2(D) {}
    void fixed(D) {}
    void ratio(D part, D whole, std::int64_t num, std::int64_t den, const std::string& what);
    void divides(D, std::int64_t, std::int64_t) {}
    bool require(bool ok, const std::string& what);
    bool ok() const { return error.empty(); }
    std::string error;
};

/// The same rules posed as integer constraints over Z3 unknowns (shape reduction): ops/symbolic.hpp.
class SymbolicShapes;
struct SymbolicDim;

// ----- evaluation ---------------------------------------------------------------------------

/// What an operator sees besides its input values: its attributes and the original (unreduced)
/// shapes, so position attributes (slice bounds, split sizes) scale with the reduction.
struct EvalContext {
    const nlohmann::json& attrs;
    std::span<const Shape> origInputs;
    std::span<const Shape> origOutputs;
    /// Scales a position along an input dimension from the original to the reduced size.
    std::int64_t scale(std::int64_t pos, std::int64_t origDim, std::int64_t newDim) const {
        return origDim == 0 ? 0 : pos * newDim / origDim;
    }
};

template <class A, class S = typename A::S>
using EvalFn = void (*)(const A&, std::span<const Value<S>* const>, std::span<Value<S>>, const EvalContext&);

// ----- backward -----------------------------------------------------------------------------

/// Where backward rules emit their ops. Handles name values (tensors) inside the builder.
class GradBuilder {
public:
    using Handle = std::int32_t;
    virtual ~GradBuilder() = default;
    /// Emits one op and returns the handles of its outputs, with the given output shapes.
    virtual std::vector<Handle> emitOp(std::string_view op, std::vector<Handle> inputs, nlohmann::json attrs,
                                     std::vector<Shape> outShapes) = 0;
    virtual Shape shapeOf(Handle h) const = 0;
    Handle emitOp1(std::string_view op, std::vector<Handle> inputs, nlohmann::json attrs, Shape outShape) {
        return emitOp(op, std::move(inputs), std::move(attrs), {std::move(outShape)})[0];
    }
};

struct VjpArgs {
    std::span<const GradBuilder::Handle> inputs;
    std::span<const GradBuilder::Handle> outputs;
    std::span<const GradBuilder::Handle> outGrads;  ///< -1 where an output has no gradient
    const nlohmann::json& attrs;
};

/// Returns one gradient handle per input (-1: not differentiable, e.g. index inputs).
using VjpFn = std::vector<GradBuilder::Handle> (*)(GradBuilder&, const VjpArgs&);

// ----- the registry -------------------------------------------------------------------------

enum class OpClass : std::uint8_t { Elementwise, Compute, Reduction, Normalization, Movement, Loss, Optimizer, Collective };

struct OpSpec {
    std::string_view name;
    OpClass cls = OpClass::Compute;
    int minInputs = 1, maxInputs = 1;  ///< maxInputs -1: variadic
    int numOutputs = 1;                ///< -1: variadic (split)
    std::vector<int> intInputs;        ///< input positions that hold integer indices
    std::vector<std::string_view> requiredAttrs;
    std::vector<std::string_view> optionalAttrs;
    bool collective = false;           ///< runs on a group of ranks; inputs/outputs in group order
    /// Its outputs have its inputs' dtype, so int ids pass through: data movement, collectives and
    /// identity. Every other op takes floats (bar its `intInputs`) and makes floats.
    bool keepsDtype = false;
    std::string_view summary;

    void (*shapeConcrete)(ConcreteShapes&, const std::vector<std::vector<std::int64_t>>&,
                          const std::vector<std::vector<std::int64_t>>&, const nlohmann::json&) = nullptr;
    void (*shapeSymbolic)(SymbolicShapes&, const std::vector<std::vector<SymbolicDim>>&, const std::vector<std::vector<SymbolicDim>>&,
                          const nlohmann::json&) = nullptr;
    EvalFn<NumAlgebra> evalNum = nullptr;
    EvalFn<SymAlgebra, z3::expr> evalSym = nullptr;  ///< (S named: SymAlgebra is incomplete here)
    VjpFn vjp = nullptr;
    /// Extra attribute checks beyond presence and type (which may read the operands' shapes: a
    /// permutation lists every dim); returns an error message or empty.
    std::string (*checkAttrs)(const nlohmann::json&, const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) = nullptr;
    /// It sums its inputs (all_reduce, reduce_scatter): int tensors cannot be its inputs.
    bool sumsInputs = false;
    /// For an operator that looks index data up: how many classes its ids may name (lookupRange).
    std::int64_t (*lookupRange)(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs, const nlohmann::json& attrs) = nullptr;
    /// For collectives: the number of inputs/outputs as a function of the group size.
    int (*collectiveInputs)(int groupSize) = nullptr;
    int (*collectiveOutputs)(int groupSize) = nullptr;
};

class OpRegistry {
public:
    static const OpRegistry& instance();
    /// kNone-like: returns std::nullopt for an unknown op name.
    std::optional<OpKind> find(std::string_view name) const;
    const OpSpec& spec(OpKind k) const { return specs_[k]; }
    std::size_t size() const { return specs_.size(); }
    const std::vector<OpSpec>& all() const { return specs_; }

private:
    OpRegistry();
    std::vector<OpSpec> specs_;
};

/// Validates an op's attributes, operand counts and shapes on concrete shapes; returns an error
/// message naming the operand, or empty when the op is well-formed.
std::string checkOp(const OpSpec& spec, const nlohmann::json& attrs, const std::vector<Shape>& inputs,
                    const std::vector<Shape>& outputs, const std::vector<DType>& inputTypes);

/// For an operator that looks index data up (embedding and its backward, cross-entropy and its
/// backward, target_logit, one_hot): how many classes its ids may name, counted over the whole
/// vocabulary (every part), at the given (possibly reduced) shapes. 0 for any other operator.
/// Valid index data names one of these classes; the checker proves stages for every such value.
std::int64_t lookupRange(const OpSpec& spec, const std::vector<Shape>& inputs, const std::vector<Shape>& outputs,
                         const nlohmann::json& attrs);

// Multi-index helpers shared by operator semantics and by lineage slicing.
std::vector<std::int64_t> stridesOf(const Shape& s);

}  // namespace tv
