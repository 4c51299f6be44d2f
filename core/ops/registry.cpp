#include "ops/registry.hpp"

#include <algorithm>
#include <numeric>

#include "ops/op_definition.hpp"
#include "ops/symbolic.hpp"

namespace tv {

using json = nlohmann::json;

// ===== shape contexts =========================================================================

void ConcreteShapes::eq(D a, D b, const std::string& what) {
    if (a != b && error.empty()) error = what + ": expected " + std::to_string(b) + ", got " + std::to_string(a);
}
void ConcreteShapes::ratio(D part, D whole, std::int64_t num, std::int64_t den, const std::string& what) {
    if (part * den != whole * num && error.empty())
        error = what + ": " + std::to_string(part) + " is not " + std::to_string(num) + "/" + std::to_string(den) + " of " +
                std::to_string(whole);
}
bool ConcreteShapes::require(bool ok, const std::string& what) {
    if (!ok && error.empty()) error = what;
    return ok;
}
void SymbolicShapes::ratio(const D& part, const D& whole, std::int64_t num, std::int64_t den, const std::string&) {
    // Lowest terms keep the constraint linear and small: part * den == whole * num.
    auto g = std::gcd(num, den);
    if (g > 1) num /= g, den /= g;
    if (num == den) {
        constraints.push_back(part.e == whole.e);
        return;
    }
    auto lhs = den == 1 ? part.e : part.e * c_.int_val(static_cast<int64_t>(den));
    auto rhs = num == 1 ? whole.e : whole.e * c_.int_val(static_cast<int64_t>(num));
    constraints.push_back(lhs == rhs);
}
void SymbolicShapes::divides(const D& whole, std::int64_t num, std::int64_t den) {
    if (num % den == 0) return;
    // whole * num is a multiple of den  <=>  whole is a multiple of den / gcd(num, den).
    auto step = den / std::gcd(num, den);
    if (step == 1) return;
    constraints.push_back(z3::mod(whole.e, c_.int_val(static_cast<int64_t>(step))) == 0);
}

std::vector<std::int64_t> stridesOf(const Shape& s) {
    std::vector<std::int64_t> st(s.size(), 1);
    for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
    return st;
}

namespace {

using namespace opdef;

/// Attribute value types by name, shared by every operator.
std::string checkAttrTypes(const json& a, std::size_t rank) {
    static const char* ints[] = {"dim", "dim0", "dim1", "start", "end", "parts", "index", "split_dim", "concat_dim", "step", "k", "groups", "topk_groups"};
    static const char* dimKeys[] = {"dim", "dim0", "dim1", "split_dim", "concat_dim"};
    static const char* bools[] = {"keepdim", "transpose_a", "transpose_b"};
    static const char* lists[] = {"dims", "sizes"};
    auto r = static_cast<std::int64_t>(rank);
    for (const char* k : ints)
        if (a.contains(k) && !a[k].is_number_integer()) return std::string("attribute ") + k + " must be an integer";
    for (const char* k : dimKeys)
        if (a.contains(k)) {
            auto d = a[k].get<std::int64_t>();
            if (d < -r || d >= std::max<std::int64_t>(r, 1)) return std::string("attribute ") + k + " = " + std::to_string(d) + " is out of range for rank " + std::to_string(r);
        }
    for (const char* k : bools)
        if (a.contains(k) && !a[k].is_boolean()) return std::string("attribute ") + k + " must be true or false";
    for (const char* k : lists) {
        if (!a.contains(k)) continue;
        if (!a[k].is_array()) return std::string("attribute ") + k + " must be an array of integers";
        for (const auto& v : a[k])
            if (!v.is_number_integer()) return std::string("attribute ") + k + " must be an array of integers";
    }
    if (a.contains("dims")) {
        for (const auto& v : a["dims"]) {
            auto d = v.get<std::int64_t>();
            if (d < -r || d >= r) return "attribute dims has " + std::to_string(d) + ", out of range for rank " + std::to_string(r);
        }
    }
    if (a.contains("sizes"))
        for (const auto& v : a["sizes"])
            if (v.get<std::int64_t>() < 1) return "attribute sizes must be positive";
    return {};
}
std::string checkRationalAttrs(const json& a, const std::vector<Shape>&, const std::vector<Shape>&) {
    for (const char* k : {"value", "exponent", "eps", "p", "lr", "beta1", "beta2", "weight_decay", "max_norm"})
        if (a.contains(k) && !ratOf(a[k])) return std::string("attribute ") + k + " must be a number or a rational string";
    if (a.contains("p")) {
        auto p = *ratOf(a["p"]);
        if (!(Rational(0) < Rational(1) - p) || p < Rational(0)) return "attribute p must be in [0, 1)";
    }
    if (a.contains("step") && (!a["step"].is_number_integer() || a["step"].get<std::int64_t>() < 1 ||
                               a["step"].get<std::int64_t>() > 1000000))
        return "attribute step must be a positive integer";
    return {};
}

}  // namespace

OpRegistry::OpRegistry() {
    // In OpKind order: an OpKind is an index into this table.
    OpTable t(specs_);
    registerElementwise(t);
    registerLinearAlgebra(t);
    registerReductions(t);
    registerRouting(t);
    registerNormalization(t);
    registerMovement(t);
    registerEmbeddingAndLoss(t);
    registerOptimizers(t);
    registerCollectives(t);
}


const OpRegistry& OpRegistry::instance() {
    static const OpRegistry r;
    return r;
}

std::optional<OpKind> OpRegistry::find(std::string_view name) const {
    for (std::size_t i = 0; i < specs_.size(); ++i)
        if (specs_[i].name == name) return static_cast<OpKind>(i);
    return std::nullopt;
}

std::int64_t lookupRange(const OpSpec& spec, const std::vector<Shape>& in, const std::vector<Shape>& out, const json& attrs) {
    return spec.lookupRange ? spec.lookupRange(in, out, attrs) : 0;
}

/// "[2, 3], []": shapes as an error message lists them.
static std::string shapesText(const std::vector<Shape>& shapes) {
    std::string t;
    for (const auto& s : shapes) {
        if (!t.empty()) t += ", ";
        t += "[";
        for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
        t += "]";
    }
    return t;
}

std::string checkOp(const OpSpec& spec, const json& attrs, const std::vector<Shape>& inputs,
                    const std::vector<Shape>& outputs, const std::vector<DType>& inputTypes) {
    if (!attrs.is_object()) return "attrs must be an object";
    for (auto k : spec.requiredAttrs)
        if (!attrs.contains(std::string(k))) return "missing attribute \"" + std::string(k) + "\"";
    for (auto it = attrs.begin(); it != attrs.end(); ++it) {
        bool known = std::find(spec.requiredAttrs.begin(), spec.requiredAttrs.end(), it.key()) != spec.requiredAttrs.end() ||
                     std::find(spec.optionalAttrs.begin(), spec.optionalAttrs.end(), it.key()) != spec.optionalAttrs.end();
        if (!known) return "unknown attribute \"" + it.key() + "\" for " + std::string(spec.name);
    }
    std::size_t rank = 0;
    if (!inputs.empty()) rank = inputs[0].size();
    if (!outputs.empty()) rank = std::max(rank, outputs[0].size());
    if (auto e = checkAttrTypes(attrs, rank); !e.empty()) return e;
    if (auto e = checkRationalAttrs(attrs, inputs, outputs); !e.empty()) return e;
    if (spec.checkAttrs)
        if (auto e = spec.checkAttrs(attrs, inputs, outputs); !e.empty()) return e;
    for (std::size_t i = 0; i < inputTypes.size(); ++i) {
        if (spec.keepsDtype && inputTypes[i] != inputTypes[0])
            return "input " + std::to_string(i) + " is " + std::string(toString(inputTypes[i])) + " but input 0 is " + std::string(toString(inputTypes[0]));
        if (spec.sumsInputs && inputTypes[i] == DType::Int) return std::string(spec.name) + " sums its inputs; int tensors cannot be summed";
        bool wantInt = std::find(spec.intInputs.begin(), spec.intInputs.end(), static_cast<int>(i)) != spec.intInputs.end();
        if (!spec.collective && !spec.intInputs.empty() && wantInt != (inputTypes[i] == DType::Int))
            return "input " + std::to_string(i) + " must be " + (wantInt ? "an int" : "a float") + " tensor";
        if (spec.intInputs.empty() && inputTypes[i] == DType::Int && !spec.keepsDtype)
            return "input " + std::to_string(i) + " is an int tensor; " + std::string(spec.name) + " takes float tensors";
    }
    ConcreteShapes c;
    std::vector<std::vector<std::int64_t>> in(inputs.begin(), inputs.end()), out(outputs.begin(), outputs.end());
    try {
        spec.shapeConcrete(c, in, out, attrs);
    } catch (const MissingDim&) {
        return "shape mismatch: an operand has fewer dims than " + std::string(spec.name) + " reads (inputs " + shapesText(inputs) + ", outputs " +
               shapesText(outputs) + ")";
    }
    return c.error.empty() ? std::string() : "shape mismatch: " + c.error;
}

}  // namespace tv
