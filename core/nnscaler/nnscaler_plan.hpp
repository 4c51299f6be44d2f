// nnScaler's execution plans, as the safe pickle reader leaves them, turned into typed per-device
// programs: forward operators, backward operators, adapters (with their primitives), data loaders
// and weight reducers, each with its microbatch, and the sub-tensors they read and write (full
// tensor, index box, value part). Nothing here knows our plan model yet; the mapping onto it
// builds on this. docs/research/nnscaler-ir.md describes the classes and fields read here.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pickle/pickle.hpp"

namespace tv::nnscaler {

/// A plan that is not the nnScaler plan it should be: says where (an attribute path from the
/// root, e.g. "execplan._seq[2][5]._cell._nodes[3]._inputs[1]") and what.
class NnScalerError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// An IRSubTensor: a box of one full tensor, holding part `part` of `parts` additive parts.
struct SubTensor {
    std::int64_t id = -1;
    std::int64_t fullId = -1;
    std::string name;                                     ///< the full tensor's variable name
    std::vector<std::int64_t> fullShape;
    std::vector<std::pair<std::int64_t, std::int64_t>> box;  ///< [start, end) per dim, in the full tensor
    std::int64_t part = 0, parts = 1;
    std::string dtype;                                    ///< "float32", "int64", "complex64", ...
    bool isAttr = false, isGrad = false, requiresGrad = false, isLoss = false;
    bool isParameter() const { return isAttr && requiresGrad && !isGrad; }
};

/// One input or output of a cell: a sub-tensor, or a constant (numbers, strings, None, tuples).
struct Operand {
    std::int64_t tensor = -1;   ///< sub-tensor id, or -1
    std::int64_t grad = -1;     ///< the sub-tensor's `_grad` as this cell sees it (its gradient, or part of it), or -1
    nlohmann::json constant;    ///< when not a tensor
};

enum class CellKind : std::uint8_t { Forward, Backward, Adapter, DataLoader, Reducer };
const char* toString(CellKind k);

/// One communication primitive of an adapter, as dispatched to its device.
struct Primitive {
    std::string kind;  ///< the class name: "MovePrim", "AllGatherPrim", "AllReduceIdentityPrim", ...
    std::vector<std::int64_t> inputs, outputs;
    nlohmann::json kwargs = nlohmann::json::object();
};

/// A leaf cell of one device's program, in execution order.
struct Cell {
    CellKind kind = CellKind::Forward;
    std::int64_t id = -1;
    int microbatch = 0;
    std::string name;        ///< "linear", "backward", "adapter", "dataloader", "reducer"
    std::string signature;   ///< "torch.nn.functional.linear"; for a backward op, its forward op's
    std::string annotation;  ///< forward (and backward) ops: the rendered OpAnno, "a b k+, n k+ -> a b n"
    std::vector<Operand> inputs, outputs;
    nlohmann::json kwargs = nlohmann::json::object();
    std::int64_t mirror = -1;                  ///< the paired cell's id (forward <-> backward)
    std::vector<Primitive> primitives;         ///< adapters
    bool forwardAdapter = false, fused = false;  ///< adapters
    std::vector<int> devices;                  ///< reducers: the plan devices they span
};

struct Plan {
    std::vector<int> devices;       ///< plan devices (tp x pp of them)
    int runtimeRanks = 0;           ///< devices x dp
    int microbatches = 1;
    std::map<int, std::vector<Cell>> programs;  ///< plan device -> its leaves in execution order
    std::map<std::int64_t, SubTensor> tensors;  ///< every sub-tensor any cell names, by id
    int dataParallel() const { return devices.empty() ? 1 : runtimeRanks / static_cast<int>(devices.size()); }
};

/// Reads the per-device programs of a pickled ModuleCodeGen. Throws NnScalerError.
Plan readPlan(const pickle::Document& doc);

/// A pickled value as JSON: numbers, strings, None, tuples and lists, numpy integers (decoded),
/// globals as "module.name"; anything else as {"object": "module.Class"}.
nlohmann::json constantOf(const pickle::Document& doc, const pickle::Value& v, int depth = 0);

}  // namespace tv::nnscaler
