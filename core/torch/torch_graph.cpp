#include "torch/torch_graph.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "pickle/pickle.hpp"

namespace tv::torch {

TorchGraphError::TorchGraphError(const std::string& f, int l, const std::string& m)
    : std::runtime_error(f + (l > 0 ? ":" + std::to_string(l) : std::string()) + ": " + m), file(f), line(l), message(m) {}

namespace {
struct DTypeName {
    DType type;
    const char* shortName;
};
constexpr DTypeName kShortNames[] = {{DType::Bool, "b8"}, {DType::U8, "u8"},   {DType::I8, "i8"},     {DType::I16, "i16"}, {DType::I32, "i32"},
                                     {DType::I64, "i64"}, {DType::F16, "f16"}, {DType::BF16, "bf16"}, {DType::F32, "f32"}, {DType::F64, "f64"}};
}  // namespace

const char* shortName(DType t) {
    for (const auto& n : kShortNames)
        if (n.type == t) return n.shortName;
    return "?";
}

std::optional<DType> dtypeFromShortName(std::string_view s) {
    for (const auto& n : kShortNames)
        if (s == n.shortName) return n.type;
    return std::nullopt;
}

std::optional<DType> dtypeFromTorchName(std::string_view s) {
    static const std::map<std::string_view, DType> names = {
        {"bool", DType::Bool},    {"uint8", DType::U8},       {"int8", DType::I8},    {"int16", DType::I16},    {"short", DType::I16},
        {"int32", DType::I32},    {"int", DType::I32},        {"int64", DType::I64},  {"long", DType::I64},     {"float16", DType::F16},
        {"half", DType::F16},     {"bfloat16", DType::BF16},  {"float32", DType::F32}, {"float", DType::F32},   {"float64", DType::F64},
        {"double", DType::F64}};
    auto it = names.find(s);
    if (it == names.end()) return std::nullopt;
    return it->second;
}

bool isFloating(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64; }

std::string TensorType::toString() const {
    std::string s = shortName(dtype);
    s += '[';
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + ']';
}

std::string Value::toString(const std::vector<std::string>* names) const {
    switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return b ? "True" : "False";
    case Kind::Int: return std::to_string(i);
    case Kind::Float: {
        if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
        if (std::isnan(f)) return "nan";
        std::ostringstream o;
        o.precision(17);
        o << f;
        auto s = o.str();
        if (s.find_first_of(".en") == std::string::npos) s += ".0";
        return s;
    }
    case Kind::String: {
        std::string s = "'";
        for (char c : text) {
            if (c == '\'' || c == '\\') s += '\\';
            s += c;
        }
        return s + "'";
    }
    case Kind::Node:
        if (names && node >= 0 && static_cast<std::size_t>(node) < names->size()) return (*names)[static_cast<std::size_t>(node)];
        return "%" + std::to_string(node);
    case Kind::List:
    case Kind::Tuple: {
        std::string s = kind == Kind::List ? "[" : "(";
        for (std::size_t k = 0; k < items.size(); ++k) s += (k ? ", " : "") + items[k].toString(names);
        if (kind == Kind::Tuple && items.size() == 1) s += ",";
        return s + (kind == Kind::List ? "]" : ")");
    }
    case Kind::DType: return std::string("torch.") + shortName(dtype);
    case Kind::Layout:
    case Kind::MemoryFormat: return "torch." + text;
    case Kind::Device: return "device('" + text + "')";
    case Kind::Operator: return "torch.ops." + text;
    case Kind::Attribute: return "self." + text;
    }
    return "?";
}

std::string SourceLine::toString() const {
    return file + ":" + std::to_string(line) + (function.empty() ? std::string() : " in " + function);
}

const Value* Node::kwarg(std::string_view key) const {
    for (const auto& [k, v] : kwargs)
        if (k == key) return &v;
    return nullptr;
}

int TorchGraph::find(std::string_view name) const {
    auto it = byName_.find(std::string(name));
    return it == byName_.end() ? -1 : it->second;
}

std::vector<std::string> TorchGraph::names() const {
    std::vector<std::string> out;
    out.reserve(nodes.size());
    for (const auto& n : nodes) out.push_back(n.name);
    return out;
}

std::vector<std::pair<std::string, int>> TorchGraph::histogram() const {
    std::map<std::string, int> counts;
    for (const auto& n : nodes)
        if (n.kind == Node::Kind::Call) ++counts[n.target];
    std::vector<std::pair<std::string, int>> out(counts.begin(), counts.end());
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
}

TorchGraph readTorchGraphFile(const std::string& path, const ReadLimits& limits) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw TorchGraphError(path, 0, "cannot open the file");
    in.seekg(0, std::ios::end);
    const auto size = in.tellg();
    if (size < 0) throw TorchGraphError(path, 0, "cannot read the file");
    if (static_cast<std::uint64_t>(size) > limits.maxBytes)
        throw TorchGraphError(path, 0, "larger than " + std::to_string(limits.maxBytes >> 20) + " MiB: refused");
    in.seekg(0);
    std::string data(static_cast<std::size_t>(size), '\0');
    if (!in.read(data.data(), size)) throw TorchGraphError(path, 0, "cannot read the file");
    if (pickle::looksLikePickle(data)) return readFxPickle(data, path, limits);
    if (!looksLikeFxText(data)) throw TorchGraphError(path, 0, "neither a printed PyTorch graph (.py) nor a pickled one (.gpickle)");
    return readFxText(data, path, limits);
}

}  // namespace tv::torch
