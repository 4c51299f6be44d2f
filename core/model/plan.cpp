#include "model/plan.hpp"

#include <algorithm>
#include <queue>

#include "model/instance_names.hpp"

namespace tv {

std::int64_t numel(const Shape& s) {
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    return n;
}

std::string shapeToString(const Shape& s) {
    std::string out = "[";
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(s[i]);
    }
    return out + "]";
}

NameId Interner::intern(std::string_view s) {
    if (auto it = ids_.find(s); it != ids_.end()) return it->second;
    auto id = static_cast<NameId>(strings_.size());
    strings_.emplace_back(s);
    ids_.emplace(strings_.back(), id);
    return id;
}

NameId Interner::find(std::string_view s) const {
    auto it = ids_.find(s);
    return it == ids_.end() ? kNone : it->second;
}

namespace {
constexpr std::array<std::string_view, 6> kRoleNames = {"input", "weight", "activation", "gradient",
                                                        "optimizer_state", "loss"};
constexpr std::array<std::string_view, 2> kDTypeNames = {"float", "int"};
constexpr std::array<std::string_view, 4> kPhaseNames = {"forward", "backward", "optimizer", "communication"};
constexpr std::array<std::string_view, 6> kAxisNames = {"dp", "tp", "pp", "sp", "cp", "ep"};

template <class E, std::size_t N>
bool parseEnum(std::string_view s, const std::array<std::string_view, N>& names, E& out) {
    for (std::size_t i = 0; i < N; ++i)
        if (names[i] == s) {
            out = static_cast<E>(i);
            return true;
        }
    return false;
}
}  // namespace

std::string_view toString(Role r) { return kRoleNames[static_cast<std::size_t>(r)]; }
std::string_view toString(DType d) { return kDTypeNames[static_cast<std::size_t>(d)]; }
std::string_view toString(Phase p) { return kPhaseNames[static_cast<std::size_t>(p)]; }
std::string_view toString(Axis a) { return kAxisNames[static_cast<std::size_t>(a)]; }
bool parseRole(std::string_view s, Role& out) { return parseEnum(s, kRoleNames, out); }
bool parseDType(std::string_view s, DType& out) { return parseEnum(s, kDTypeNames, out); }
bool parsePhase(std::string_view s, Phase& out) { return parseEnum(s, kPhaseNames, out); }

bool Graph::finalize(std::vector<OpId>* cycle) {
    const auto nt = tensors.size();
    consumerStart.assign(nt + 1, 0);
    for (OpId op = 0; op < ops.size(); ++op)
        for (auto t : inputs(op)) ++consumerStart[t + 1];
    for (std::size_t i = 0; i < nt; ++i) consumerStart[i + 1] += consumerStart[i];
    consumerList.assign(consumerStart[nt], 0);
    std::vector<std::uint32_t> fill(consumerStart.begin(), consumerStart.end() - 1);
    for (OpId op = 0; op < ops.size(); ++op)
        for (auto t : inputs(op)) consumerList[fill[t]++] = op;

    // Kahn's algorithm, preferring file order among ready ops so the order is deterministic.
    std::vector<std::uint32_t> pending(ops.size(), 0);
    for (OpId op = 0; op < ops.size(); ++op)
        for (auto t : inputs(op))
            if (tensors[t].producer != kNone) ++pending[op];
    std::priority_queue<OpId, std::vector<OpId>, std::greater<>> ready;
    for (OpId op = 0; op < ops.size(); ++op)
        if (pending[op] == 0) ready.push(op);
    topo.clear();
    topo.reserve(ops.size());
    while (!ready.empty()) {
        OpId op = ready.top();
        ready.pop();
        topo.push_back(op);
        for (auto t : outputs(op))
            for (auto c : consumers(t))
                if (--pending[c] == 0) ready.push(c);
    }
    topoIndex.assign(ops.size(), kNone);
    for (std::uint32_t i = 0; i < topo.size(); ++i) topoIndex[topo[i]] = i;
    if (topo.size() != ops.size()) {
        if (cycle) {
            cycle->clear();
            for (OpId op = 0; op < ops.size(); ++op)
                if (topoIndex[op] == kNone) cycle->push_back(op);
        }
        return false;
    }
    return true;
}

Shape Box::extent() const {
    Shape e(lo.size());
    for (std::size_t i = 0; i < lo.size(); ++i) e[i] = hi[i] - lo[i];
    return e;
}

std::vector<std::int64_t> Box::offsetsIn(const Shape& shape) const {
    std::vector<std::int64_t> stride(shape.size(), 1);
    for (std::size_t i = shape.size(); i-- > 1;) stride[i - 1] = stride[i] * shape[i];
    const Shape ext = extent();
    const std::int64_t n = numel(ext);
    std::vector<std::int64_t> out;
    out.reserve(static_cast<std::size_t>(n));
    std::vector<std::int64_t> idx(ext.size(), 0);
    for (std::int64_t k = 0; k < n; ++k) {
        std::int64_t off = 0;
        for (std::size_t d = 0; d < idx.size(); ++d) off += (idx[d] + lo[d]) * stride[d];
        out.push_back(off);
        for (std::size_t d = ext.size(); d-- > 0;) {
            if (++idx[d] < ext[d]) break;
            idx[d] = 0;
        }
    }
    return out;
}

std::string Box::toString() const {
    std::string out = "[";
    for (std::size_t i = 0; i < lo.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(lo[i]) + ":" + std::to_string(hi[i]);
    }
    return out + "]";
}

ShapeId Plan::internShape(const Shape& s) {
    auto key = shapeToString(s);
    if (auto it = shapeIds_.find(key); it != shapeIds_.end()) return it->second;
    auto id = static_cast<ShapeId>(shapes.size());
    shapes.push_back(s);
    shapeIds_.emplace(std::move(key), id);
    return id;
}

AttrId Plan::internAttrs(const nlohmann::json& a) {
    auto key = a.dump();
    if (auto it = attrIds_.find(key); it != attrIds_.end()) return it->second;
    auto id = static_cast<AttrId>(attrs.size());
    attrs.push_back(a);
    attrTexts_.push_back(key);
    attrIds_.emplace(std::move(key), id);
    return id;
}

std::uint32_t Plan::internGroup(const std::vector<std::int32_t>& g) {
    std::string key;
    for (auto r : g) key += std::to_string(r) + ",";
    if (auto it = groupIds_.find(key); it != groupIds_.end()) return it->second;
    auto id = static_cast<std::uint32_t>(groups.size());
    groups.push_back(g);
    groupIds_.emplace(std::move(key), id);
    return id;
}

std::string SourceLine::toString() const {
    return file + ":" + std::to_string(line) + (function.empty() ? std::string() : " in " + function);
}

const SourceLine* Plan::opSource(bool parallelGraph, std::string_view opName) const {
    const auto& table = parallelGraph ? parallelOpSources : logicalOpSources;
    if (table.empty() || opName.empty()) return nullptr;
    auto lookup = [&](std::string_view n) -> const SourceLine* {
        const auto id = names.find(n);
        if (id == kNone) return nullptr;
        auto it = table.find(id);
        return it == table.end() || it->second >= sourceLines.size() ? nullptr : &sourceLines[it->second];
    };
    if (const auto* s = lookup(opName)) return s;
    // A written-out replica's instance ("x~cp1~dp1" in a plan holding its members written out:
    // "x~cp1"), or, read as stored, the stored member's op ("x").
    if (const auto own = instance::withoutReplicaMarks(opName); own != opName)
        if (const auto* s = lookup(own)) return s;
    const auto stored = instance::storedName(opName);
    return stored != opName ? lookup(stored) : nullptr;
}

const SourceLine* Plan::opSource(const Graph& g, OpId op) const {
    if (op >= g.ops.size()) return nullptr;
    return opSource(&g == &parallel, names.str(g.ops[op].name));
}

void Plan::setOpSource(const Graph& g, OpId op, const SourceLine& s) {
    std::string key = s.file;
    key += '\n' + std::to_string(s.line) + '\n' + s.function + '\n' + s.code;
    auto [it, fresh] = sourceIds_.emplace(std::move(key), static_cast<std::uint32_t>(sourceLines.size()));
    if (fresh) sourceLines.push_back(s);
    (&g == &parallel ? parallelOpSources : logicalOpSources)[g.ops[op].name] = it->second;
}

const nlohmann::json& Plan::opAttrs(const Graph& g, OpId op) const {
    static const nlohmann::json empty = nlohmann::json::object();
    auto id = g.ops[op].attrs;
    return id == kNone ? empty : attrs[id];
}

std::string Plan::coordinates(std::int32_t rank) const {
    if (rank < 0 || static_cast<std::size_t>(rank) >= ranks.size()) return {};
    std::string out;
    for (auto a : kAxes) {
        bool classic = a == Axis::DP || a == Axis::TP || a == Axis::PP;
        if (!classic && mesh.at(a) <= 1) continue;
        if (!out.empty()) out += ' ';
        out += std::string(toString(a)) + "=" + std::to_string(ranks[rank].at(a));
    }
    return out;
}

nlohmann::json Plan::coordinatesJson(std::int32_t rank) const {
    nlohmann::json j = nlohmann::json::object();
    if (rank < 0 || static_cast<std::size_t>(rank) >= ranks.size()) return j;
    for (auto a : kAxes) {
        bool classic = a == Axis::DP || a == Axis::TP || a == Axis::PP;
        if (!classic && mesh.at(a) <= 1) continue;
        j[std::string(toString(a))] = ranks[rank].at(a);
    }
    return j;
}

}  // namespace tv
