#include "nnscaler/nnscaler_plan.hpp"

#include <algorithm>
#include <cstring>
#include <set>

namespace tv::nnscaler {

using json = nlohmann::json;
using pickle::Document;
using pickle::Kind;
using pickle::Value;

const char* toString(CellKind k) {
    switch (k) {
    case CellKind::Forward: return "forward";
    case CellKind::Backward: return "backward";
    case CellKind::Adapter: return "adapter";
    case CellKind::DataLoader: return "data loader";
    case CellKind::Reducer: return "reducer";
    }
    return "?";
}

namespace {

constexpr const char* kModuleCodeGen = "nnscaler.codegen.module.module.ModuleCodeGen";
constexpr const char* kSubTensor = "nnscaler.ir.tensor.IRSubTensor";
constexpr const char* kIRObject = "nnscaler.ir.cten.IRObject";
constexpr const char* kDimops = "nnscaler.graph.function.dimops.IRDimops";
constexpr const char* kBackward = "nnscaler.ir.operator.IRBpOperation";
constexpr const char* kData = "nnscaler.ir.operator.IRDataOperation";
constexpr const char* kAdapter = "nnscaler.ir.adapter.adapter.IRAdapter";
constexpr const char* kReducer = "nnscaler.ir.adapter.adapter.IRWeightReducer";
constexpr const char* kSegment = "nnscaler.graph.segment.IRSegment";
constexpr const char* kReuse = "nnscaler.execplan.execplan.ExeReuseCell";
constexpr const char* kBlock = "nnscaler.graph.schedule.schedplan.Block";

bool isNumpyScalar(const std::string& cls) { return cls == "numpy.core.multiarray.scalar" || cls == "numpy._core.multiarray.scalar"; }

/// The numpy dtype code of a numpy.dtype instance ("i8", "f4", ...), or "".
std::string numpyDtype(const Document& doc, const Value& dtype) {
    auto* n = doc.as(dtype, Kind::Instance);
    if (!n) return "";
    auto* args = doc.as(n->args, Kind::Tuple);
    if (!args || args->items.empty()) return "";
    auto* s = doc.str(args->items[0]);
    return s ? *s : "";
}

class Reader {
public:
    explicit Reader(const Document& doc) : doc_(doc) {}

    Plan run() {
        if (doc_.className(doc_.root) != kModuleCodeGen)
            fail("", "the pickle holds " + describeClass(doc_.root) + ", not an nnScaler plan (a " + kModuleCodeGen + ")");
        const auto& exec = need(doc_.root, "execplan", "");
        for (const auto& d : list(need(doc_.root, "devices", ""), "devices")) plan_.devices.push_back(small(d, "devices[]"));
        plan_.runtimeRanks = small(need(doc_.root, "runtime_ndevs", ""), "runtime_ndevs", 1);
        if (plan_.devices.empty()) fail("devices", "the plan has no devices");
        if (plan_.runtimeRanks < static_cast<int>(plan_.devices.size()) || plan_.runtimeRanks % static_cast<int>(plan_.devices.size()) != 0)
            fail("runtime_ndevs", std::to_string(plan_.runtimeRanks) + " runtime ranks are not a multiple of the " +
                                       std::to_string(plan_.devices.size()) + " plan devices");
        readMicrobatches(exec);
        auto* seq = doc_.as(need(exec, "_seq", "execplan"), Kind::Dict);
        if (!seq) fail("execplan._seq", "the per-device programs are not a dict");
        for (const auto& [key, cells] : seq->entries) {
            const int dev = small(key, "execplan._seq key");
            const auto base = "execplan._seq[" + std::to_string(dev) + "]";
            if (std::find(plan_.devices.begin(), plan_.devices.end(), dev) == plan_.devices.end())
                fail(base, "device " + std::to_string(dev) + " is not one of the plan's devices");
            auto& program = plan_.programs[dev];
            const auto& top = list(cells, base);
            for (std::size_t i = 0; i < top.size(); ++i) topLevel(top[i], base + "[" + std::to_string(i) + "]", program);
        }
        return std::move(plan_);
    }

private:
    const Document& doc_;
    Plan plan_;
    std::map<std::int64_t, int> microbatchOfReuse_;

    [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
        throw NnScalerError((path.empty() ? std::string() : path + ": ") + msg);
    }
    std::string describeClass(const Value& v) const {
        auto c = doc_.className(v);
        return c.empty() ? std::string("a ") + pickle::toString(v.kind) : "a " + c;
    }
    const Value& need(const Value& obj, const char* key, const std::string& path) const {
        auto* v = doc_.attr(obj, key);
        if (!v) fail(path, describeClass(obj) + " without \"" + key + "\"");
        return *v;
    }
    const Value* maybe(const Value& obj, const char* key) const {
        auto* v = doc_.attr(obj, key);
        return v && v->kind != Kind::None ? v : nullptr;
    }
    const std::vector<Value>& list(const Value& v, const std::string& path) const {
        if (auto* n = doc_.as(v, Kind::List)) return n->items;
        if (auto* n = doc_.as(v, Kind::Tuple)) return n->items;
        fail(path, "expected a list or tuple, found " + describeClass(v));
    }
    std::int64_t integer(const Value& v, const std::string& path) const {
        if (v.kind == Kind::Int) return v.i;
        if (v.kind == Kind::Bool) return v.b ? 1 : 0;
        if (auto* n = doc_.as(v, Kind::Instance); n && isNumpyScalar(doc_.className(v))) {
            auto* args = doc_.as(n->args, Kind::Tuple);
            if (args && args->items.size() == 2) {
                auto* bytes = doc_.as(args->items[1], Kind::Bytes);
                auto code = numpyDtype(doc_, args->items[0]);
                if (bytes && code == "i8" && bytes->text.size() == 8) {
                    std::int64_t x;
                    std::memcpy(&x, bytes->text.data(), 8);  // little-endian, as numpy pickles on x86
                    return x;
                }
                if (bytes && code == "i4" && bytes->text.size() == 4) {
                    std::int32_t x;
                    std::memcpy(&x, bytes->text.data(), 4);
                    return x;
                }
            }
        }
        fail(path, "expected an integer, found " + doc_.describe(v, 1));
    }
    /// An integer that must lie in [lo, hi] (devices, ranks, microbatches).
    int small(const Value& v, const std::string& path, std::int64_t lo = 0, std::int64_t hi = std::int64_t(1) << 24) const {
        const auto x = integer(v, path);
        if (x < lo || x > hi) fail(path, std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return static_cast<int>(x);
    }
    bool flag(const Value& obj, const char* key) const {
        auto* v = doc_.attr(obj, key);
        return v && v->kind == Kind::Bool && v->b;
    }
    std::string string(const Value& v) const {
        auto* s = doc_.str(v);
        return s ? pickle::validUtf8(*s) : std::string();
    }
    std::int64_t idOf(const Value& obj, const std::string& path) const { return integer(need(obj, "_id", path), path + "._id"); }

    /// Microbatch of each ExeReuseCell, from the schedule: its Blocks are parallel to _topo_seqs.
    void readMicrobatches(const Value& exec) {
        auto* graph = maybe(exec, "_graph");
        auto* sched = graph ? maybe(*graph, "_sched") : nullptr;
        if (!sched) return;
        if (auto* nm = maybe(*sched, "_num_microbatches")) plan_.microbatches = small(*nm, "_sched._num_microbatches", 1);
        const auto& seqs = list(need(*sched, "_seqs", "execplan._graph._sched"), "execplan._graph._sched._seqs");
        const auto& topo = list(need(exec, "_topo_seqs", "execplan"), "execplan._topo_seqs");
        if (seqs.size() != topo.size())
            fail("execplan._graph._sched._seqs", "the schedule lists " + std::to_string(seqs.size()) + " steps but the plan " +
                                                     std::to_string(topo.size()));
        for (std::size_t i = 0; i < seqs.size(); ++i) {
            if (doc_.className(seqs[i]) != kBlock) continue;
            const auto path = "execplan._graph._sched._seqs[" + std::to_string(i) + "]";
            const int mb = small(need(seqs[i], "_micro_batch_id", path), path + "._micro_batch_id");
            if (doc_.className(topo[i]) == kReuse) microbatchOfReuse_[idOf(topo[i], "execplan._topo_seqs[" + std::to_string(i) + "]")] = mb;
        }
    }

    void topLevel(const Value& cell, const std::string& path, std::vector<Cell>& program) {
        const auto cls = doc_.className(cell);
        if (cls == kReuse) {
            const auto id = idOf(cell, path);
            auto it = microbatchOfReuse_.find(id);
            if (it == microbatchOfReuse_.end()) fail(path, "reuse cell " + std::to_string(id) + " is not in the schedule (no microbatch)");
            unwrap(need(cell, "_cell", path), path + "._cell", it->second, program);
        } else {
            unwrap(cell, path, 0, program);
        }
    }

    void unwrap(const Value& cell, const std::string& path, int mb, std::vector<Cell>& program) {
        if (doc_.className(cell) == kSegment) {
            const auto& nodes = list(need(cell, "_nodes", path), path + "._nodes");
            for (std::size_t i = 0; i < nodes.size(); ++i) leaf(nodes[i], path + "._nodes[" + std::to_string(i) + "]", mb, program);
        } else {
            leaf(cell, path, mb, program);
        }
    }

    std::int64_t subTensor(const Value& t, const std::string& path) {
        const auto id = idOf(t, path);
        if (plan_.tensors.count(id)) return id;
        SubTensor s;
        s.id = id;
        const auto& full = need(t, "_full_tensor", path);
        s.fullId = idOf(full, path + "._full_tensor");
        s.name = string(need(full, "name", path + "._full_tensor"));
        for (const auto& d : list(need(full, "_shape", path + "._full_tensor"), path + "._full_tensor._shape"))
            s.fullShape.push_back(integer(d, path + "._full_tensor._shape[]"));
        const auto& ind = need(need(t, "_indmap", path), "_indices", path + "._indmap");
        for (const auto& r : list(ind, path + "._indmap._indices")) {
            const auto& se = list(r, path + "._indmap._indices[]");
            if (se.size() != 2) fail(path + "._indmap._indices", "a range is not (start, end)");
            s.box.emplace_back(integer(se[0], path + "._indmap"), integer(se[1], path + "._indmap"));
        }
        if (s.box.size() != s.fullShape.size())
            fail(path + "._indmap", "the index map has " + std::to_string(s.box.size()) + " dims, the full tensor " + std::to_string(s.fullShape.size()));
        for (std::size_t d = 0; d < s.box.size(); ++d)
            if (s.box[d].first < 0 || s.box[d].first >= s.box[d].second || s.box[d].second > s.fullShape[d])
                fail(path + "._indmap", "range [" + std::to_string(s.box[d].first) + ", " + std::to_string(s.box[d].second) + ") of dim " +
                                            std::to_string(d) + " is outside the full tensor (" + std::to_string(s.fullShape[d]) + ")");
        const auto& w = list(need(need(t, "_valmap", path), "_weight", path + "._valmap"), path + "._valmap._weight");
        if (w.size() != 2) fail(path + "._valmap._weight", "a value map is (part, parts)");
        s.part = integer(w[0], path + "._valmap");
        s.parts = integer(w[1], path + "._valmap");
        if (s.parts < 1 || s.part < 0 || s.part >= s.parts) fail(path + "._valmap", "part " + std::to_string(s.part) + " of " + std::to_string(s.parts));
        if (auto* dt = doc_.attr(t, "_dtype")) {
            auto c = doc_.className(*dt);
            s.dtype = c.rfind("torch.", 0) == 0 ? c.substr(6) : c;
        }
        s.isAttr = flag(t, "_is_attr");
        s.isGrad = flag(t, "_is_grad");
        s.requiresGrad = flag(t, "_requires_grad");
        s.isLoss = flag(full, "_is_loss");
        plan_.tensors.emplace(id, std::move(s));
        return id;
    }

    Operand operand(const Value& v, const std::string& path) {
        Operand o;
        const auto cls = doc_.className(v);
        if (cls == kSubTensor) {
            o.tensor = subTensor(v, path);
            // The gradient paired with this use of the tensor (each consumer gets its own part).
            if (auto* g = doc_.attr(v, "_grad"); g && doc_.className(*g) == kSubTensor) o.grad = subTensor(*g, path + "._grad");
        }
        else if (cls == kIRObject) o.constant = json{{"ir_object", string(need(v, "name", path))}};
        else o.constant = constantOf(doc_, v);
        return o;
    }
    std::vector<Operand> operands(const Value& cell, const char* key, const std::string& path) {
        std::vector<Operand> out;
        const auto& items = list(need(cell, key, path), path + "." + key);
        for (std::size_t i = 0; i < items.size(); ++i) out.push_back(operand(items[i], path + "." + key + "[" + std::to_string(i) + "]"));
        return out;
    }
    std::vector<std::int64_t> tensorIds(const Value& obj, const char* key, const std::string& path) {
        std::vector<std::int64_t> out;
        const auto& items = list(need(obj, key, path), path + "." + key);
        for (std::size_t i = 0; i < items.size(); ++i) {
            const auto p = path + "." + key + "[" + std::to_string(i) + "]";
            if (doc_.className(items[i]) != kSubTensor) fail(p, "expected a sub-tensor, found " + describeClass(items[i]));
            out.push_back(subTensor(items[i], p));
        }
        return out;
    }
    json kwargs(const Value& obj, const char* key) const {
        json k = json::object();
        auto* v = doc_.attr(obj, key);
        if (!v) return k;
        if (auto* d = doc_.as(*v, Kind::Dict))
            for (const auto& [name, value] : d->entries)
                if (auto* s = doc_.str(name)) k[*s] = constantOf(doc_, value);
        return k;
    }

    /// "a b k+, n k+ -> a b n" from an OpAnno.
    std::string annotation(const Value& anno, const std::string& path) const {
        auto shapes = [&](const char* key) {
            std::string out;
            const auto& items = list(need(anno, key, path), path + "." + key);
            for (std::size_t s = 0; s < items.size(); ++s) {
                if (s) out += ", ";
                const auto& dims = list(need(items[s], "_dims", path), path + "._dims");
                for (std::size_t d = 0; d < dims.size(); ++d) {
                    if (d) out += ' ';
                    const auto& ids = list(need(dims[d], "_identifiers", path), path + "._identifiers");
                    const auto& reduces = list(need(dims[d], "_reduces", path), path + "._reduces");
                    std::string dim;
                    for (std::size_t k = 0; k < ids.size(); ++k) {
                        if (k) dim += ' ';
                        dim += string(ids[k]);
                        if (k < reduces.size())
                            if (auto* r = doc_.as(reduces[k], Kind::Instance))
                                if (auto* a = doc_.as(r->args, Kind::Tuple); a && !a->items.empty()) dim += string(a->items[0]);
                    }
                    out += ids.size() > 1 ? "(" + dim + ")" : dim;
                }
            }
            return out;
        };
        return shapes("_inputs") + " -> " + shapes("_outputs");
    }

    void leaf(const Value& v, const std::string& path, int mb, std::vector<Cell>& program) {
        const auto cls = doc_.className(v);
        Cell c;
        c.microbatch = mb;
        c.id = idOf(v, path);
        c.name = string(need(v, "name", path));
        if (auto* m = maybe(v, "_mirror")) c.mirror = idOf(*m, path + "._mirror");
        if (cls == kDimops || cls == kBackward) {
            const Value* fw = &v;
            if (cls == kBackward) {
                c.kind = CellKind::Backward;
                fw = maybe(v, "_mirror");
                if (!fw || doc_.className(*fw) != kDimops) fail(path + "._mirror", "a backward operation without its forward operator");
            }
            c.signature = string(need(*fw, "signature", path));
            if (auto* anno = maybe(*fw, "_anno")) c.annotation = annotation(*anno, path + "._anno");
            c.kwargs = kwargs(*fw, "_kwargs");
            if (cls == kBackward) c.name = string(need(*fw, "name", path));
            c.inputs = operands(v, "_inputs", path);
            c.outputs = operands(v, "_outputs", path);
        } else if (cls == kAdapter) {
            c.kind = CellKind::Adapter;
            c.signature = "adapter";
            c.inputs = operands(v, "_inputs", path);
            c.outputs = operands(v, "_outputs", path);
            c.forwardAdapter = flag(v, "_forward");
            // Differentiable adapters are of two kinds: DiffFusion's fused ones (`custom` False: one
            // fused primitive whose class gives both directions) and custom autograd adapters
            // (`custom` True, nnScaler's default), whose forward and backward adapters each run
            // their own plain primitives (docs/nnscaler.md, "Adapters"). A pickle without the
            // attribute is read as fused, as before it was known.
            c.fused = flag(v, "_differentiable") && !flag(v, "custom");
            const auto& prims = list(need(v, "_prims", path), path + "._prims");
            for (std::size_t i = 0; i < prims.size(); ++i) {
                const auto p = path + "._prims[" + std::to_string(i) + "]";
                Primitive prim;
                auto pc = doc_.className(prims[i]);
                prim.kind = pickle::validUtf8(pc.substr(pc.rfind('.') + 1));
                prim.inputs = tensorIds(prims[i], "_inputs", p);
                prim.outputs = tensorIds(prims[i], "_outputs", p);
                prim.kwargs = kwargs(prims[i], "kwargs");
                c.primitives.push_back(std::move(prim));
            }
        } else if (cls == kData) {
            c.kind = CellKind::DataLoader;
            c.signature = string(need(v, "signature", path));
            c.inputs = operands(v, "_inputs", path);
            c.outputs = operands(v, "_outputs", path);
        } else if (cls == kReducer) {
            c.kind = CellKind::Reducer;
            c.microbatch = -1;
            c.inputs = operands(v, "_inputs", path);
            for (const auto& d : list(need(v, "_device", path), path + "._device")) c.devices.push_back(small(d, path + "._device[]"));
        } else {
            fail(path, "unknown cell: " + describeClass(v));
        }
        program.push_back(std::move(c));
    }
};


/// constantOf's walk: depth-limited, at most `left` values in all, and an object already on the
/// path (a cycle) is not entered again.
struct ConstantWalk {
    const Document& doc;
    std::size_t left = 10000;
    std::vector<pickle::NodeId> path;

    json operator()(const Value& v, int depth) {
        switch (v.kind) {
        case Kind::None: return nullptr;
        case Kind::Bool: return v.b;
        case Kind::Int: return v.i;
        case Kind::Float: return v.f;
        default: break;
        }
        if (depth > 8 || left == 0) return "...";
        --left;
        if (auto* s = doc.as(v, Kind::String)) return pickle::validUtf8(s->text);
        if (auto* s = doc.as(v, Kind::BigInt)) return s->text;
        if (auto* b = doc.as(v, Kind::Bytes)) return json{{"bytes", b->text.size()}};
        if (auto* g = doc.as(v, Kind::Global)) return pickle::validUtf8(g->text + "." + g->name);
        if (std::find(path.begin(), path.end(), v.node) != path.end()) return "...";
        path.push_back(v.node);
        json out = container(v, depth);
        path.pop_back();
        return out;
    }

    json container(const Value& v, int depth) {
        const pickle::Node* seq = doc.as(v, Kind::Tuple);
        if (!seq) seq = doc.as(v, Kind::List);
        if (seq) {
            json a = json::array();
            for (const auto& item : seq->items) a.push_back((*this)(item, depth + 1));
            return a;
        }
        if (auto* d = doc.as(v, Kind::Dict)) {
            json o = json::object();
            for (const auto& [k, val] : d->entries) o[pickle::validUtf8(doc.str(k) ? *doc.str(k) : doc.describe(k, 1))] = (*this)(val, depth + 1);
            return o;
        }
        const auto cls = doc.className(v);
        if (auto* n = doc.as(v, Kind::Instance); n && isNumpyScalar(cls)) {
            auto* args = doc.as(n->args, Kind::Tuple);
            if (args && args->items.size() == 2)
                if (auto* bytes = doc.as(args->items[1], Kind::Bytes)) {
                    auto code = numpyDtype(doc, args->items[0]);
                    if (code == "i8" && bytes->text.size() == 8) {
                        std::int64_t x;
                        std::memcpy(&x, bytes->text.data(), 8);
                        return x;
                    }
                    if (code == "f8" && bytes->text.size() == 8) {
                        double x;
                        std::memcpy(&x, bytes->text.data(), 8);
                        return x;
                    }
                    if (code == "f4" && bytes->text.size() == 4) {
                        float x;
                        std::memcpy(&x, bytes->text.data(), 4);
                        return static_cast<double>(x);
                    }
                }
        }
        return json{{"object", cls.empty() ? std::string(pickle::toString(v.kind)) : pickle::validUtf8(cls)}};
    }
};

}  // namespace

json constantOf(const Document& doc, const Value& v, int depth) {
    ConstantWalk walk{doc, 10000, {}};
    return walk(v, depth);
}

Plan readPlan(const Document& doc) { return Reader(doc).run(); }

}  // namespace tv::nnscaler
