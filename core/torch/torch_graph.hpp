// A PyTorch graph as TorchDynamo and AOTAutograd capture it (ATen level), one rank of one program,
// read from its printed form (`GraphModule.forward` code, `.py`) or its pickled form (`.gpickle`).
// Neutral: nothing here knows our plan model; lowering onto the registry is a later step.
//
// What a graph holds: its inputs (placeholders, in order, each with dtype and shape), one node per
// operator call in program order (`aten.mm.default`, `_c10d_functional.all_reduce.default`, a
// higher-order op such as `higher_order.auto_functionalized` with the op it wraps as its first
// argument), the elements of tuple results (`getitem`), attribute reads of tensor constants
// (`self._tensor_constant0`, whose values neither form carries), and its outputs (nodes or None).
// Each node keeps the framework source line it came from (`# File: PATH:LINE in FUNC, code: ...`)
// and its own line in the file.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tv::torch {

/// What a file could not be read as, where: "FILE:LINE: message" (LINE 0: the file as a whole).
class TorchGraphError : public std::runtime_error {
public:
    TorchGraphError(const std::string& file, int line, const std::string& message);
    std::string file;
    int line = 0;
    std::string message;
};

enum class DType : std::uint8_t { Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64 };

/// The annotation's short name: "b8", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64".
const char* shortName(DType t);
/// From an annotation's short name; nullopt for any other.
std::optional<DType> dtypeFromShortName(std::string_view s);
/// From a `torch.X` name ("float32", "float", "half", "bfloat16", "int64", "long", "int", "bool", ...).
std::optional<DType> dtypeFromTorchName(std::string_view s);
bool isFloating(DType t);

struct TensorType {
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::string toString() const;  ///< "f32[8, 1536]"
    bool operator==(const TensorType&) const = default;
};

/// An argument of a call: a Python literal, a node, or a list or tuple of them.
struct Value {
    enum class Kind : std::uint8_t {
        None,
        Bool,
        Int,
        Float,
        String,
        Node,          ///< `node`: a node of the graph
        List,
        Tuple,
        DType,         ///< torch.float32, ...
        Layout,        ///< torch.strided, ...: `text`
        MemoryFormat,  ///< torch.contiguous_format, ...: `text`
        Device,        ///< device(type='cuda', index=0): `text` "cuda:0" (or "cuda")
        Operator,      ///< torch.ops.NS.OP.OVERLOAD as an argument (of a higher-order op): `text`
        Attribute,     ///< self.NAME other than a node: `text`
    };
    Kind kind = Kind::None;
    bool b = false;
    std::int64_t i = 0;
    double f = 0;
    DType dtype = DType::F32;
    int node = -1;
    std::string text;
    std::vector<Value> items;

    static Value none() { return {}; }
    static Value ofNode(int n) {
        Value v;
        v.kind = Kind::Node;
        v.node = n;
        return v;
    }
    bool isNode() const { return kind == Kind::Node; }
    bool isList() const { return kind == Kind::List || kind == Kind::Tuple; }
    /// How it reads back in Python (nodes by `names`).
    std::string toString(const std::vector<std::string>* names = nullptr) const;
    bool operator==(const Value&) const = default;
};

/// A frame of the framework's source: the `# File:` comment above a node.
struct SourceLine {
    std::string file;
    int line = 0;
    std::string function;
    std::string code;
    std::string toString() const;  ///< "megatron/core/tensor_parallel/layers.py:252 in forward"
    bool operator==(const SourceLine&) const = default;
};

struct Node {
    enum class Kind : std::uint8_t {
        Input,     ///< a placeholder (primals_1, tangents_3, arg5_1)
        Call,      ///< an operator call: `target`, `args`, `kwargs`
        GetItem,   ///< element `item` of the tuple node `args[0]`
        Constant,  ///< self._tensor_constantN (`target` holds the attribute name)
    };
    Kind kind = Kind::Call;
    std::string name;
    /// Call: "aten.mm.default", "_c10d_functional.all_reduce.default", "apex.fused_layer_norm_affine_fwd.default",
    /// "higher_order.auto_functionalized" (the op it wraps is args[0], an Operator value).
    std::string target;
    std::vector<Value> args;
    std::vector<std::pair<std::string, Value>> kwargs;
    int item = -1;
    std::optional<TensorType> type;  ///< the annotated result; none for tuple-valued nodes and constants
    int source = -1;                 ///< index into TorchGraph::sources; -1: no stack trace
    int line = 0;                    ///< its line in the file it was read from

    const Value* kwarg(std::string_view key) const;
};

struct TorchGraph {
    std::string file;   ///< as given to the reader
    int rank = -1;      ///< from the header `# Graph[rank=N](...)`; -1 when absent
    std::string phase;  ///< "fw", "bw", "both" (from the header); empty when absent
    int gid = -1;
    std::vector<Node> nodes;
    std::vector<int> inputs;      ///< placeholder nodes, in order
    std::vector<Value> outputs;   ///< what the graph returns, flattened (nodes or None)
    std::vector<SourceLine> sources;

    int find(std::string_view name) const;  ///< node index or -1
    std::vector<std::string> names() const;
    /// Calls per target, e.g. {"aten.mm.default": 12}.
    std::vector<std::pair<std::string, int>> histogram() const;

private:
    friend class GraphBuilder;
    std::unordered_map<std::string, int> byName_;
};

/// Bounds on what a reader accepts: a hostile file is refused, never exhausts memory.
struct ReadLimits {
    std::size_t maxBytes = std::size_t{256} << 20;
    std::size_t maxNodes = 2'000'000;
    int maxNesting = 64;
    int maxRank = 65'536;
    std::int64_t maxDim = std::int64_t{1} << 40;
    int maxDims = 16;
};

/// Reads the printed form. Throws TorchGraphError naming the line for anything it cannot read:
/// a statement outside the grammar the printer writes, a name used before it is defined or
/// defined twice, an annotation it cannot read, a truncated file (no return).
TorchGraph readFxText(std::string_view text, const std::string& file, const ReadLimits& limits = {});

/// Reads the pickled form (torchgraph's PickleableGraph) with the safe pickle reader: the graph
/// from its printed form, checked node by node against the pickled nodes, and each node's framework
/// line from its pickled stack. Throws TorchGraphError.
TorchGraph readFxPickle(std::string_view data, const std::string& file, const ReadLimits& limits = {});

/// Whether `text` looks like the printed form (a `# Graph[rank=` header or a `def forward(self`).
bool looksLikeFxText(std::string_view text);

/// Reads a file in either form (chosen by content). Throws TorchGraphError.
TorchGraph readTorchGraphFile(const std::string& path, const ReadLimits& limits = {});

/// The rank a file name says (`fw.g0.r3.py`: 3), or -1.
int rankFromFileName(const std::string& path);

}  // namespace tv::torch
