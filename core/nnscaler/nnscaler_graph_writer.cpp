// The graph writer of the nnScaler mapping: GraphWriter writes the tensors and ops of one graph
// (the logical or the parallel one) as plan JSON, giving each a fresh name; the helpers that name
// and shape what it writes; and removeDeadOps, which drops what nothing uses once the lineage is
// known. It knows nothing of nnScaler's cells; the rank simulation and the adapters write
// through it.
#include "nnscaler/import_detail.hpp"

namespace tv::nnscaler::detail {

// ----- one graph being written ----------------------------------------------------------------

Handle GraphWriter::tensor(const std::string& base, Shape shape, const char* role, bool isInt, int rank, int mb) {
    std::string name = fresh(tensorNames_, base);
    json t = {{"id", name}, {"shape", shape}};
    if (std::string_view(role) != "activation") t["role"] = role;
    if (isInt) t["dtype"] = "int";
    if (parallel_) t["rank"] = rank;
    if (parallel_ && mb >= 0) t["microbatch"] = mb;
    tensors.push_back(std::move(t));
    handles.push_back({name, std::move(shape), isInt, tensors.size() - 1, -1, 0, 0});
    return static_cast<Handle>(handles.size() - 1);
}

void GraphWriter::op(const std::string& kind, const std::string& base, const std::vector<Handle>& ins, const std::vector<Handle>& outs,
                     const json& attrs, int rank, int mb, const char* phase, const std::vector<int>* group) {
    json o = {{"id", fresh(opNames_, base)}, {"op", kind}};
    json in = json::array(), out = json::array();
    opInputs.push_back(ins);
    for (auto h : ins) {
        in.push_back(handles[static_cast<std::size_t>(h)].name);
        ++handles[static_cast<std::size_t>(h)].uses;
    }
    for (std::size_t k = 0; k < outs.size(); ++k) {
        auto& hi = handles[static_cast<std::size_t>(outs[k])];
        out.push_back(hi.name);
        hi.producerOp = static_cast<std::int64_t>(ops.size());
        hi.producerSlot = static_cast<std::uint32_t>(k);
    }
    o["inputs"] = std::move(in);
    o["outputs"] = std::move(out);
    if (!attrs.is_null() && !attrs.empty()) o["attrs"] = attrs;
    if (phase) o["phase"] = phase;
    if (parallel_) {
        if (group) o["group"] = *group;
        else o["rank"] = rank;
        if (mb >= 0) o["microbatch"] = mb;
    }
    ops.push_back(std::move(o));
}

bool GraphWriter::dependsOn(Handle from, Handle to, const std::set<std::string, std::less<>>& through, std::size_t budget) const {
    if (from == to) return true;
    std::vector<Handle> work{from};
    std::unordered_set<Handle> seen{from};
    while (!work.empty() && seen.size() <= budget) {
        Handle h = work.back();
        work.pop_back();
        auto op = handles[static_cast<std::size_t>(h)].producerOp;
        if (op < 0 || !through.count(ops[static_cast<std::size_t>(op)]["op"].get_ref<const std::string&>())) continue;
        for (auto in : opInputs[static_cast<std::size_t>(op)]) {
            if (in == to) return true;
            if (seen.insert(in).second) work.push_back(in);
        }
    }
    return false;
}

/// Names a freshly produced, not yet read tensor after what it holds (e.g. the nnScaler
/// tensor an operator's lowering writes); others keep their names.
void GraphWriter::rename(Handle h, const std::string& base) {
    auto& hi = handles[static_cast<std::size_t>(h)];
    if (hi.producerOp < 0 || hi.uses > 0) return;
    std::string name = fresh(tensorNames_, base);
    tensors[hi.tensorIndex]["id"] = name;
    ops[static_cast<std::size_t>(hi.producerOp)]["outputs"][hi.producerSlot] = name;
    hi.name = std::move(name);
}

/// A name not used yet: `base`, else `base+1`, `base+2`, ... Never with `~`, which marks a
/// written-out instance (`~dp1`, `~mb1`) in a plan stored with replicas (instance::storedName).
std::string GraphWriter::fresh(std::unordered_map<std::string, int>& used, const std::string& base) {
    auto [it, inserted] = used.try_emplace(base, 0);
    if (inserted) return base;
    for (;;) {
        std::string n = base + "+" + std::to_string(++it->second);
        if (used.try_emplace(n, 0).second) return n;
    }
}

std::string sanitize(const std::string& s) {
    std::string out;
    // `~` marks written-out instances (instance::storedName): never part of a mapped name.
    for (char c : s) out += (c == ' ' || c == '"' || c == '\\' || c == '~' || static_cast<unsigned char>(c) < 32) ? '_' : c;
    return out.empty() ? "t" : out;
}

bool endsWith(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Shape extentOf(const SubTensor& t) {
    Shape s;
    for (const auto& [a, b] : t.box) s.push_back(b - a);
    return s;
}

/// The shape a sub-tensor is held at: complex tensors as [..., 2] (real, imaginary).
Shape localShape(const SubTensor& t) {
    Shape s = extentOf(t);
    if (t.dtype.rfind("complex", 0) == 0) s.push_back(2);
    return s;
}

bool isIntDtype(const std::string& d) { return d.rfind("int", 0) == 0 || d.rfind("uint", 0) == 0 || d == "bool" || d == "long"; }

std::string shapeText(const Shape& s) {
    std::string o = "(";
    for (std::size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
    return o + ")";
}

/// A number as exact rational text the checker can hold ("1e-05", "0.2", "2"); empty when it is
/// not a number or its shortest decimal form does not fit 64-bit numerator and denominator.
std::string numberText(const json& v) {
    if (!v.is_number()) return {};
    std::string s = v.dump();  // integers as they are, floats in their shortest round-trip form
    return Rational::parse(s) ? s : std::string();
}

/// Removes the ops nothing uses (dead data loaders' consumers, the data gradient, gradients of
/// masks and tables the lowering computes alongside, outputs collected for printing) and the
/// tensors only they touched. Tensors named in `keep` (the lineage) stay.
void removeDeadOps(GraphWriter& g, const std::unordered_set<std::string>& keep) {
    const std::size_t n = g.ops.size();
    std::unordered_map<std::string, std::size_t> producer, uses;
    for (std::size_t i = 0; i < n; ++i) {
        for (const auto& t : g.ops[i]["outputs"]) producer[t.get<std::string>()] = i;
        for (const auto& t : g.ops[i]["inputs"]) ++uses[t.get<std::string>()];
    }
    std::vector<bool> dead(n, false);
    auto isDead = [&](std::size_t i) {
        for (const auto& t : g.ops[i]["outputs"]) {
            const auto& name = t.get_ref<const std::string&>();
            if (keep.count(name) || uses[name] > 0) return false;
        }
        return true;
    };
    std::vector<std::size_t> work;
    for (std::size_t i = 0; i < n; ++i)
        if (isDead(i)) work.push_back(i);
    while (!work.empty()) {
        auto i = work.back();
        work.pop_back();
        if (dead[i] || !isDead(i)) continue;
        dead[i] = true;
        for (const auto& t : g.ops[i]["inputs"]) {
            const auto& name = t.get_ref<const std::string&>();
            if (--uses[name] == 0)
                if (auto it = producer.find(name); it != producer.end() && !dead[it->second]) work.push_back(it->second);
        }
    }
    json ops = json::array();
    std::unordered_set<std::string> live(keep.begin(), keep.end());
    for (std::size_t i = 0; i < n; ++i) {
        if (dead[i]) continue;
        for (const auto& t : g.ops[i]["inputs"]) live.insert(t.get<std::string>());
        for (const auto& t : g.ops[i]["outputs"]) live.insert(t.get<std::string>());
        ops.push_back(std::move(g.ops[i]));
    }
    json tensors = json::array();
    for (auto& t : g.tensors)
        if (live.count(t["id"].get<std::string>())) tensors.push_back(std::move(t));
    g.ops = std::move(ops);
    g.tensors = std::move(tensors);
}

}  // namespace tv::nnscaler::detail
