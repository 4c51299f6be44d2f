#include "io/plan_json.hpp"
#include "io/plan_repeats.hpp"
#include "pickle/pickle.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "model/text.hpp"
#include "ops/registry.hpp"

namespace tv {

using json = nlohmann::json;

namespace {

/// The JSON path of the first unsigned integer above INT64_MAX in `v`, if any.
std::optional<std::string> integerOutOfRange(const nlohmann::json& v, const std::string& path) {
    std::vector<std::pair<const nlohmann::json*, std::string>> work{{&v, path}};
    while (!work.empty()) {
        auto [x, at] = work.back();
        work.pop_back();
        if (x->is_number_unsigned() && x->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return at;
        if (x->is_object())
            for (auto it = x->begin(); it != x->end(); ++it) work.emplace_back(&*it, at + "/" + it.key());
        else if (x->is_array())
            for (std::size_t k = 0; k < x->size(); ++k) work.emplace_back(&(*x)[k], at + "/" + std::to_string(k));
    }
    return std::nullopt;
}


constexpr std::int64_t kMaxDim = std::int64_t(1) << 40;
constexpr std::size_t kMaxRank = 16;

struct TooManyProblems {};

class Reader {
public:
    explicit Reader(const json& doc, const RepeatOrigins* origins = nullptr)
        : doc_(doc), origins_(origins), plan_(std::make_unique<Plan>()) {}

    PlanLoadResult run() {
        try {
            readAll();
        } catch (const TooManyProblems&) {
        }
        PlanLoadResult r;
        r.problems = std::move(problems_);
        if (r.problems.empty()) r.plan = std::move(plan_);
        return r;
    }

private:
    const json& doc_;
    const RepeatOrigins* origins_;  ///< version 3: where each written-out entry came from
    std::unique_ptr<Plan> plan_;

    /// The path of entry i of an array: in a version 3 file, the entry or repeat it came from.
    std::string entryPath(const std::string& array, std::size_t i) const {
        return origins_ ? origins_->entryPath(array, i) : array + "/" + std::to_string(i);
    }
    std::vector<PlanProblem> problems_;

    void fail(const std::string& path, const std::string& msg) {
        // Names and keys come from the file: shown escaped and shortened, never raw.
        problems_.push_back({printable(shortened(path, 240)), printableMessage(msg)});
        if (problems_.size() >= kMaxProblems) throw TooManyProblems{};
    }
    bool bad() const { return !problems_.empty(); }

    const json* member(const json& obj, const char* key, const std::string& path, bool required,
                       json::value_t type, const char* typeName) {
        auto it = obj.find(key);
        if (it == obj.end()) {
            if (required) fail(path, std::string("missing \"") + key + "\"");
            return nullptr;
        }
        bool okType = it->type() == type || (type == json::value_t::number_integer && it->is_number_unsigned());
        if (!okType) {
            fail(path + "/" + key, std::string("\"") + key + "\" must be " + typeName);
            return nullptr;
        }
        return &*it;
    }
    const json* arrayMember(const json& obj, const char* key, const std::string& path, bool required = true) {
        return member(obj, key, path, required, json::value_t::array, "an array");
    }
    const json* objectMember(const json& obj, const char* key, const std::string& path, bool required = true) {
        return member(obj, key, path, required, json::value_t::object, "an object");
    }
    const json* stringMember(const json& obj, const char* key, const std::string& path, bool required = true) {
        return member(obj, key, path, required, json::value_t::string, "a string");
    }
    bool intMember(const json& obj, const char* key, const std::string& path, std::int64_t& out, bool required,
                   std::int64_t lo, std::int64_t hi) {
        auto* v = member(obj, key, path, required, json::value_t::number_integer, "an integer");
        if (!v) return false;
        auto x = v->get<std::int64_t>();
        if (x < lo || x > hi) {
            fail(path + "/" + key, std::string("\"") + key + "\" is " + std::to_string(x) + ", must be in [" +
                                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
            return false;
        }
        out = x;
        return true;
    }

    void rejectUnknownKeys(const json& obj, const std::string& path, std::initializer_list<const char*> known, const char* what) {
        if (!obj.is_object()) return;
        for (auto it = obj.begin(); it != obj.end(); ++it) {
            bool ok = false;
            for (const char* k : known) ok = ok || it.key() == k;
            if (!ok) fail(path + "/" + it.key(), std::string("unknown ") + what + " key \"" + it.key() + "\"");
        }
    }

    std::int64_t version_ = 1;

    void readAll() {
        if (!doc_.is_object()) {
            fail("", "a plan file must hold a JSON object");
            return;
        }
        auto* fmt = stringMember(doc_, "format", "");
        if (fmt && *fmt != "trainverify-plan")
            fail("/format", "\"format\" is \"" + fmt->get<std::string>() + "\", expected \"trainverify-plan\"");
        std::int64_t version = 0;
        if (intMember(doc_, "version", "", version, true, 0, 1000) && (version < 1 || version > 3))
            fail("/version", "unsupported version " + std::to_string(version) + " (this build reads versions 1, 2 and 3)");
        version_ = version;
        if (bad()) return;
        if (auto* n = stringMember(doc_, "name", "", false)) plan_->name = n->get<std::string>();
        if (auto* d = stringMember(doc_, "description", "", false)) plan_->description = d->get<std::string>();
        if (auto* e = objectMember(doc_, "expect", "", false)) plan_->expect = *e;
        for (auto it = doc_.begin(); it != doc_.end(); ++it) {
            static const std::vector<std::string> known = {"format", "version", "name", "description", "expect",
                                                           "logical", "parallel", "lineage"};
            if (std::find(known.begin(), known.end(), it.key()) == known.end())
                fail("/" + it.key(), "unknown top-level key \"" + it.key() + "\"");
        }
        auto* logical = objectMember(doc_, "logical", "");
        auto* parallel = objectMember(doc_, "parallel", "");
        if (!logical || !parallel) return;
        rejectUnknownKeys(*logical, "/logical", {"tensors", "ops"}, "logical plan");
        rejectUnknownKeys(*parallel, "/parallel", {"tensors", "ops", "mesh", "microbatches", "ranks", "replicas"}, "parallel plan");
        readMesh(*parallel);
        if (bad()) return;
        readReplicas(*parallel);
        if (bad()) return;
        // A plan stored with replicas lists replica 0: its tensors and ops use ranks [0, ranksPerReplica).
        auto allRanks = plan_->ranks;
        if (plan_->replication.active()) plan_->ranks.resize(static_cast<std::size_t>(plan_->replication.ranksPerReplica));
        readGraph(*logical, "/logical", plan_->logical, false);
        readGraph(*parallel, "/parallel", plan_->parallel, true);
        if (!bad())
            if (auto* lin = arrayMember(doc_, "lineage", "")) readLineage(*lin);
        plan_->ranks = std::move(allRanks);
    }

    /// Version 2: "replicas": {"axis": "dp"} stores one data-parallel replica for all of them;
    /// with "microbatches": true, microbatch 0 stands for every microbatch too.
    void readReplicas(const json& par) {
        auto* r = objectMember(par, "replicas", "/parallel", false);
        if (!r) return;
        if (version_ < 2) {
            fail("/parallel/replicas", "\"replicas\" needs \"version\": 2");
            return;
        }
        rejectUnknownKeys(*r, "/parallel/replicas", {"axis", "microbatches"}, "replicas");
        auto* axis = stringMember(*r, "axis", "/parallel/replicas");
        if (!axis) return;
        if (axis->get<std::string>() != "dp") {
            fail("/parallel/replicas/axis", "replicas repeat along \"dp\" (data parallelism), not \"" + axis->get<std::string>() + "\"");
            return;
        }
        bool microbatches = false;
        if (auto it = r->find("microbatches"); it != r->end()) {
            if (!it->is_boolean()) {
                fail("/parallel/replicas/microbatches", "\"microbatches\" is true (microbatches stored once too) or false");
                return;
            }
            microbatches = it->get<bool>();
        }
        if (microbatches && plan_->microbatches < 2) {
            fail("/parallel/replicas/microbatches", "microbatches stored once need a plan with 2 or more \"microbatches\"");
            return;
        }
        const auto D = plan_->mesh.at(Axis::DP);
        if (D < 2 && !microbatches) {
            fail("/parallel/replicas", "replicas need a mesh with dp of 2 or more (or microbatches stored once)");
            return;
        }
        // Every lane count is computed in 32 bits (Replication::instances): dp x microbatches is
        // bounded here, where the plan says it, so that no product downstream can wrap.
        const std::int64_t lanes = static_cast<std::int64_t>(D) * (microbatches ? plan_->microbatches : 1);
        if (lanes > kMaxLanes) {
            fail("/parallel/replicas", "dp " + std::to_string(D) + (microbatches ? " x " + std::to_string(plan_->microbatches) + " microbatches" : std::string()) +
                                           " is " + std::to_string(lanes) + " lanes stored once, more than " + std::to_string(kMaxLanes));
            return;
        }
        const auto n = static_cast<std::int32_t>(plan_->ranks.size());
        if (n < D || n % D != 0) {
            fail("/parallel/ranks", "with replicas, the " + std::to_string(n) + " ranks must be dp (" + std::to_string(D) +
                                        ") replicas of equally many ranks");
            return;
        }
        const auto S = n / D;
        for (std::int32_t rk = 0; rk < n; ++rk)
            if (plan_->ranks[static_cast<std::size_t>(rk)].at(Axis::DP) != rk / S) {
                fail("/parallel/ranks/" + std::to_string(rk), "with replicas, dp must be the outermost rank coordinate: rank " +
                                                                  std::to_string(rk) + " should have dp=" + std::to_string(rk / S));
                return;
            }
        plan_->replication = Replication{D, S, microbatches ? plan_->microbatches : 1};
    }
    static constexpr std::int64_t kMaxLanes = std::int64_t{1} << 24;

    /// Microbatch fields range over the listed microbatches: only 0 when they are stored once.
    std::int32_t listedMicrobatches() const { return plan_->replication.microbatches > 1 ? 1 : plan_->microbatches; }

    void readMesh(const json& par) {
        auto& mesh = plan_->mesh;
        if (auto* m = objectMember(par, "mesh", "/parallel", false)) {
            for (auto it = m->begin(); it != m->end(); ++it) {
                bool found = false;
                for (auto a : kAxes)
                    if (toString(a) == it.key()) {
                        found = true;
                        std::int64_t v = 1;
                        if (intMember(*m, it.key().c_str(), "/parallel/mesh", v, true, 1, 1 << 20))
                            mesh.degree[static_cast<std::size_t>(a)] = static_cast<std::int32_t>(v);
                    }
                if (!found) fail("/parallel/mesh/" + it.key(), "unknown parallelism axis \"" + it.key() + "\" (dp, tp, pp, sp, cp, ep)");
            }
        }
        std::int64_t mb = 1;
        if (intMember(par, "microbatches", "/parallel", mb, false, 1, 1 << 20)) plan_->microbatches = static_cast<std::int32_t>(mb);
        if (auto* rs = arrayMember(par, "ranks", "/parallel", false)) {
            for (std::size_t i = 0; i < rs->size(); ++i) {
                auto path = "/parallel/ranks/" + std::to_string(i);
                const auto& r = (*rs)[i];
                if (!r.is_object()) {
                    fail(path, "a rank must be an object");
                    continue;
                }
                std::int64_t id = -1;
                if (intMember(r, "rank", path, id, true, 0, (1 << 24)) && id != static_cast<std::int64_t>(i))
                    fail(path + "/rank", "ranks must be listed in order: expected rank " + std::to_string(i) + ", got " + std::to_string(id));
                rejectUnknownKeys(r, path, {"rank", "dp", "tp", "pp", "sp", "cp", "ep"}, "rank");
                RankInfo info;
                for (auto a : kAxes) {
                    std::int64_t c = 0;
                    auto key = std::string(toString(a));
                    if (r.contains(key) && intMember(r, key.c_str(), path, c, true, 0, mesh.at(a) - 1))
                        info.coord[static_cast<std::size_t>(a)] = static_cast<std::int32_t>(c);
                }
                plan_->ranks.push_back(info);
            }
        } else {
            if (mesh.at(Axis::SP) > 1 || mesh.at(Axis::CP) > 1 || mesh.at(Axis::EP) > 1) {
                fail("/parallel", "the mesh uses sp, cp or ep: list the \"ranks\" with their coordinates explicitly");
                return;
            }
            // Derived from the mesh: dp outermost, then pp, then tp (innermost), as nnScaler numbers them.
            std::int64_t n = std::int64_t(mesh.at(Axis::DP)) * mesh.at(Axis::PP) * mesh.at(Axis::TP);
            if (n > (1 << 24)) {
                fail("/parallel/mesh", "the mesh has more than 2^24 ranks");
                return;
            }
            for (std::int32_t dp = 0; dp < mesh.at(Axis::DP); ++dp)
                for (std::int32_t pp = 0; pp < mesh.at(Axis::PP); ++pp)
                    for (std::int32_t tp = 0; tp < mesh.at(Axis::TP); ++tp) {
                        RankInfo info;
                        info.coord[static_cast<std::size_t>(Axis::DP)] = dp;
                        info.coord[static_cast<std::size_t>(Axis::PP)] = pp;
                        info.coord[static_cast<std::size_t>(Axis::TP)] = tp;
                        plan_->ranks.push_back(info);
                    }
        }
    }

    std::string tensorLabel(const Graph& g, TensorId t) const { return "\"" + plan_->tensorName(g, t) + "\""; }

    void readGraph(const json& obj, const std::string& base, Graph& g, bool parallel) {
        auto* tensors = arrayMember(obj, "tensors", base);
        auto* ops = arrayMember(obj, "ops", base);
        if (!tensors || !ops) return;
        auto nranks = static_cast<std::int64_t>(plan_->ranks.size());
        for (std::size_t i = 0; i < tensors->size(); ++i) {
            auto path = entryPath(base + "/tensors", i);
            const auto& t = (*tensors)[i];
            if (!t.is_object()) {
                fail(path, "a tensor must be an object");
                continue;
            }
            TensorInfo info;
            auto* id = stringMember(t, "id", path);
            if (!id) continue;
            auto name = id->get<std::string>();
            if (name.empty()) {
                fail(path + "/id", "tensor id is empty");
                continue;
            }
            if (hasControlCharacter(name)) {
                fail(path + "/id", "tensor id \"" + name + "\" holds a control character");
                continue;
            }
            info.name = plan_->names.intern(name);
            if (g.tensorByName.count(info.name)) {
                fail(path + "/id", "duplicate tensor id \"" + name + "\"");
                continue;
            }
            Shape shape;
            if (auto* s = arrayMember(t, "shape", path)) {
                if (s->size() > kMaxRank) fail(path + "/shape", "tensor \"" + name + "\" has more than 16 dims");
                for (std::size_t d = 0; d < s->size(); ++d) {
                    const auto& v = (*s)[d];
                    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > kMaxDim) {
                        fail(path + "/shape/" + std::to_string(d), "tensor \"" + name + "\": dims must be positive integers");
                        break;
                    }
                    shape.push_back(v.get<std::int64_t>());
                }
            }
            {
                long double n = 1;
                for (auto d : shape) n *= static_cast<long double>(d);
                if (n > static_cast<long double>(std::int64_t(1) << 62)) fail(path + "/shape", "tensor \"" + name + "\" has more than 2^62 elements");
            }
            info.shape = plan_->internShape(shape);
            if (auto* r = stringMember(t, "role", path, false)) {
                if (!parseRole(r->get<std::string>(), info.role))
                    fail(path + "/role", "unknown role \"" + r->get<std::string>() +
                                             "\" (input, weight, activation, gradient, optimizer_state, loss)");
            }
            if (auto* d = stringMember(t, "dtype", path, false)) {
                if (!parseDType(d->get<std::string>(), info.dtype)) fail(path + "/dtype", "unknown dtype \"" + d->get<std::string>() + "\" (float, int)");
            }
            std::int64_t mb = -1;
            if (intMember(t, "microbatch", path, mb, false, 0, listedMicrobatches() - 1)) info.microbatch = static_cast<std::int32_t>(mb);
            if (parallel) {
                std::int64_t rank = -1;
                if (t.contains("rank")) {
                    if (intMember(t, "rank", path, rank, true, 0, nranks - 1)) info.rank = static_cast<std::int32_t>(rank);
                } else {
                    fail(path, "parallel tensor \"" + name + "\" needs a \"rank\"");
                }
            } else if (t.contains("rank")) {
                fail(path + "/rank", "logical tensor \"" + name + "\" cannot have a rank");
            }
            for (auto it = t.begin(); it != t.end(); ++it) {
                static const std::vector<std::string> known = {"id", "shape", "role", "dtype", "rank", "microbatch"};
                if (std::find(known.begin(), known.end(), it.key()) == known.end())
                    fail(path + "/" + it.key(), "unknown tensor key \"" + it.key() + "\"");
            }
            g.tensorByName.emplace(info.name, static_cast<TensorId>(g.tensors.size()));
            g.tensors.push_back(info);
        }
        const auto& reg = OpRegistry::instance();
        for (std::size_t i = 0; i < ops->size(); ++i) {
            auto path = entryPath(base + "/ops", i);
            const auto& o = (*ops)[i];
            if (!o.is_object()) {
                fail(path, "an op must be an object");
                continue;
            }
            auto* id = stringMember(o, "id", path);
            auto* kindName = stringMember(o, "op", path);
            if (!id || !kindName) continue;
            auto name = id->get<std::string>();
            if (name.empty()) {
                fail(path + "/id", "op id is empty");
                continue;
            }
            if (hasControlCharacter(name)) {
                fail(path + "/id", "op id \"" + name + "\" holds a control character");
                continue;
            }
            OpInfo info;
            info.name = plan_->names.intern(name);
            std::string who = "op \"" + name + "\"";
            if (g.opByName.count(info.name)) {
                fail(path + "/id", "duplicate op id \"" + name + "\"");
                continue;
            }
            auto kind = reg.find(kindName->get<std::string>());
            if (!kind) {
                fail(path + "/op", who + ": unknown op \"" + kindName->get<std::string>() + "\"");
                continue;
            }
            info.kind = *kind;
            const auto& spec = reg.spec(*kind);
            info.phase = spec.collective ? Phase::Communication : Phase::Forward;
            if (auto* ph = stringMember(o, "phase", path, false))
                if (!parsePhase(ph->get<std::string>(), info.phase))
                    fail(path + "/phase", who + ": unknown phase \"" + ph->get<std::string>() + "\" (forward, backward, optimizer, communication)");
            json attrs = json::object();
            if (auto* a = objectMember(o, "attrs", path, false)) attrs = *a;
            info.attrs = plan_->internAttrs(attrs);
            std::int64_t mb = -1;
            if (intMember(o, "microbatch", path, mb, false, 0, listedMicrobatches() - 1)) info.microbatch = static_cast<std::int32_t>(mb);
            for (auto it = o.begin(); it != o.end(); ++it) {
                static const std::vector<std::string> known = {"id", "op", "inputs", "outputs", "attrs", "phase", "rank", "group", "microbatch", "across_replicas", "index_from_replica", "across_microbatches"};
                if (std::find(known.begin(), known.end(), it.key()) == known.end())
                    fail(path + "/" + it.key(), who + ": unknown op key \"" + it.key() + "\"");
            }

            // Operands.
            std::vector<TensorId> ins, outs;
            bool operandsOk = true;
            auto readOperands = [&](const char* key, std::vector<TensorId>& list) {
                auto* arr = arrayMember(o, key, path);
                if (!arr) {
                    operandsOk = false;
                    return;
                }
                for (std::size_t k = 0; k < arr->size(); ++k) {
                    const auto& v = (*arr)[k];
                    auto p = path + "/" + key + "/" + std::to_string(k);
                    if (!v.is_string()) {
                        fail(p, who + ": operands are tensor ids (strings)");
                        operandsOk = false;
                        continue;
                    }
                    auto t = g.findTensor(plan_->names.find(v.get<std::string>()));
                    if (t == kNone) {
                        fail(p, who + ": dangling tensor id \"" + v.get<std::string>() + "\"");
                        operandsOk = false;
                        continue;
                    }
                    list.push_back(t);
                }
            };
            readOperands("inputs", ins);
            readOperands("outputs", outs);
            if (!operandsOk) continue;

            // Placement: local ops run on one rank; collectives on an explicit group.
            std::vector<std::int32_t> group;
            if (parallel) {
                if (spec.collective) {
                    if (o.contains("rank")) fail(path + "/rank", who + ": a collective runs on a \"group\", not a \"rank\"");
                    if (auto* gr = arrayMember(o, "group", path)) {
                        for (std::size_t k = 0; k < gr->size(); ++k) {
                            const auto& v = (*gr)[k];
                            if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= nranks) {
                                fail(path + "/group/" + std::to_string(k), who + ": rank out of range (the plan " +
                                                                               (plan_->replication.active() ? "lists replica 0, ranks 0 to " + std::to_string(nranks - 1) + ")"
                                                                                                            : "has " + std::to_string(nranks) + " ranks)"));
                                continue;
                            }
                            auto r = static_cast<std::int32_t>(v.get<std::int64_t>());
                            if (std::find(group.begin(), group.end(), r) != group.end())
                                fail(path + "/group/" + std::to_string(k), who + ": rank " + std::to_string(r) + " appears twice in the group");
                            group.push_back(r);
                        }
                        if (group.empty()) fail(path + "/group", who + ": the group is empty");
                        if (spec.name == "send_recv" && group.size() != 2)
                            fail(path + "/group", who + ": send_recv needs a group [src, dst]");
                    }
                    if (bad() && group.empty()) continue;
                    int n = static_cast<int>(group.size());
                    if (static_cast<int>(ins.size()) != spec.collectiveInputs(n) || static_cast<int>(outs.size()) != spec.collectiveOutputs(n)) {
                        fail(path, who + ": " + std::string(spec.name) + " over " + std::to_string(n) + " ranks takes " +
                                       std::to_string(spec.collectiveInputs(n)) + " inputs and " +
                                       std::to_string(spec.collectiveOutputs(n)) + " outputs, got " +
                                       std::to_string(ins.size()) + " and " + std::to_string(outs.size()));
                        continue;
                    }
                    bool single = spec.collectiveInputs(n) == 1;
                    for (std::size_t k = 0; k < ins.size(); ++k) {
                        auto want = group[single ? 0 : k];
                        if (g.tensors[ins[k]].rank != want)
                            fail(path + "/inputs/" + std::to_string(k), who + ": input " + tensorLabel(g, ins[k]) + " is on rank " +
                                                                       std::to_string(g.tensors[ins[k]].rank) + ", but group position " +
                                                                       std::to_string(single ? 0 : k) + " is rank " + std::to_string(want));
                    }
                    for (std::size_t k = 0; k < outs.size(); ++k) {
                        auto want = group[spec.collectiveOutputs(n) == 1 ? n - 1 : static_cast<int>(k)];
                        if (g.tensors[outs[k]].rank != want)
                            fail(path + "/outputs/" + std::to_string(k), who + ": output " + tensorLabel(g, outs[k]) + " is on rank " +
                                                                        std::to_string(g.tensors[outs[k]].rank) + ", but the group puts it on rank " +
                                                                        std::to_string(want));
                    }
                    info.group = plan_->internGroup(group);
                    if (o.contains("index_from_replica"))
                        fail(path + "/index_from_replica", who + ": index_from_replica is for chunk ops in a plan stored with replicas");
                    if (auto it = o.find("across_replicas"); it != o.end()) {
                        if (!it->is_boolean())
                            fail(path + "/across_replicas", who + ": across_replicas is true or false");
                        else if (it->get<bool>() && !plan_->replication.active())
                            fail(path + "/across_replicas", who + ": across_replicas needs a plan stored with \"replicas\"");
                        else
                            info.acrossReplicas = it->get<bool>();
                    }
                    if (o.contains("across_microbatches"))
                        fail(path + "/across_microbatches", who + ": across_microbatches is for the identity that accumulates gradients");
                    // Across replicas, the inputs are the replicas' own (no microbatch) when microbatches are stored once.
                    if (info.acrossReplicas && plan_->replication.microbatches > 1)
                        for (std::size_t k = 0; k < ins.size(); ++k)
                            if (g.tensors[ins[k]].microbatch >= 0)
                                fail(path + "/inputs/" + std::to_string(k), who + ": with microbatches stored once, a collective across replicas reads "
                                                                           "tensors of no microbatch (accumulate " + tensorLabel(g, ins[k]) + " first)");
                } else {
                    if (o.contains("across_replicas")) fail(path + "/across_replicas", who + ": only collectives run across replicas");
                    if (auto it = o.find("across_microbatches"); it != o.end()) {
                        if (!it->is_boolean())
                            fail(path + "/across_microbatches", who + ": across_microbatches is true or false");
                        else if (!it->get<bool>())
                            ;
                        else if (plan_->replication.microbatches < 2)
                            fail(path + "/across_microbatches", who + ": across_microbatches needs microbatches stored once (\"replicas\": {\"microbatches\": true})");
                        else if (spec.name != "identity" || ins.size() != 1 || outs.size() != 1)
                            fail(path + "/across_microbatches", who + ": across_microbatches is for an identity (one input, one output)");
                        else if (g.tensors[ins[0]].microbatch != 0 || g.tensors[outs[0]].microbatch != -1 || o.contains("microbatch"))
                            fail(path + "/across_microbatches", who + ": an accumulation across microbatches reads a tensor of microbatch 0 "
                                                                       "and writes one of no microbatch (and has no microbatch itself)");
                        else
                            info.acrossMicrobatches = true;
                    }
                    if (auto it = o.find("index_from_replica"); it != o.end()) {
                        const auto D = plan_->replication.degree;
                        if (!it->is_boolean())
                            fail(path + "/index_from_replica", who + ": index_from_replica is true or false");
                        else if (!it->get<bool>())
                            ;
                        else if (!plan_->replication.active() || spec.name != "chunk")
                            fail(path + "/index_from_replica", who + ": index_from_replica is for chunk ops in a plan stored with replicas");
                        else if (!attrs.contains("parts") || !attrs["parts"].is_number_integer() || attrs["parts"].get<std::int64_t>() != D ||
                                 !attrs.contains("index") || !attrs["index"].is_number_integer() || attrs["index"].get<std::int64_t>() != 0)
                            fail(path + "/index_from_replica", who + ": a chunk indexed by replica has parts " + std::to_string(D) +
                                                                   " (the replicas) and is listed with index 0");
                        else
                            info.indexFromReplica = true;
                    }
                    if (o.contains("group")) fail(path + "/group", who + ": only collectives have a \"group\"");
                    std::int64_t rank = -1;
                    if (!intMember(o, "rank", path, rank, true, 0, nranks - 1)) continue;
                    info.rank = static_cast<std::int32_t>(rank);
                    for (std::size_t k = 0; k < ins.size(); ++k)
                        if (g.tensors[ins[k]].rank != info.rank)
                            fail(path + "/inputs/" + std::to_string(k), who + " runs on rank " + std::to_string(rank) + ", but its input " +
                                                                       tensorLabel(g, ins[k]) + " is on rank " + std::to_string(g.tensors[ins[k]].rank));
                    for (std::size_t k = 0; k < outs.size(); ++k)
                        if (g.tensors[outs[k]].rank != info.rank)
                            fail(path + "/outputs/" + std::to_string(k), who + " runs on rank " + std::to_string(rank) + ", but its output " +
                                                                        tensorLabel(g, outs[k]) + " is on rank " + std::to_string(g.tensors[outs[k]].rank));
                }
            } else {
                if (spec.collective) {
                    fail(path + "/op", who + ": the logical plan is single-device; " + std::string(spec.name) + " belongs in the parallel plan");
                    continue;
                }
                if (o.contains("rank") || o.contains("group")) fail(path, who + ": logical ops have no rank or group");
            }

            // Arity, attributes, shapes.
            if (!spec.collective) {
                bool arityOk = static_cast<int>(ins.size()) >= spec.minInputs &&
                               (spec.maxInputs < 0 || static_cast<int>(ins.size()) <= spec.maxInputs) &&
                               (spec.numOutputs < 0 ? !outs.empty() : static_cast<int>(outs.size()) == spec.numOutputs);
                if (!arityOk) {
                    auto range = spec.maxInputs < 0 ? std::to_string(spec.minInputs) + " or more"
                                 : spec.minInputs == spec.maxInputs ? std::to_string(spec.minInputs)
                                                                    : std::to_string(spec.minInputs) + " to " + std::to_string(spec.maxInputs);
                    fail(path, who + ": " + std::string(spec.name) + " takes " + range + " inputs and " +
                                   (spec.numOutputs < 0 ? std::string("one or more") : std::to_string(spec.numOutputs)) +
                                   " outputs, got " + std::to_string(ins.size()) + " and " + std::to_string(outs.size()));
                    continue;
                }
            }
            std::vector<Shape> inShapes, outShapes;
            std::vector<DType> inTypes;
            for (auto t : ins) {
                inShapes.push_back(plan_->shape(g, t));
                inTypes.push_back(g.tensors[t].dtype);
            }
            for (auto t : outs) outShapes.push_back(plan_->shape(g, t));
            // A collective across replicas lists replica 0's part: its shapes are checked over the
            // whole group (every replica's operands have replica 0's shapes).
            auto acrossIt = o.find("across_replicas");
            if (spec.collective && plan_->replication.active() && acrossIt != o.end() && acrossIt->is_boolean() && acrossIt->get<bool>()) {
                auto in1 = inShapes, out1 = outShapes;
                auto ty1 = inTypes;
                for (std::int32_t k = 1; k < plan_->replication.degree; ++k) {
                    inShapes.insert(inShapes.end(), in1.begin(), in1.end());
                    outShapes.insert(outShapes.end(), out1.begin(), out1.end());
                    inTypes.insert(inTypes.end(), ty1.begin(), ty1.end());
                }
            }
            if (auto err = checkOp(spec, attrs, inShapes, outShapes, inTypes); !err.empty()) {
                fail(path, who + " (" + std::string(spec.name) + "): " + err);
                continue;
            }
            // Output dtypes follow the inputs for data movement; everything else produces floats.
            for (std::size_t k = 0; k < outs.size(); ++k) {
                auto want = spec.keepsDtype && !ins.empty() ? g.tensors[ins[0]].dtype : DType::Float;
                if (g.tensors[outs[k]].dtype != want)
                    fail(path + "/outputs/" + std::to_string(k), who + ": output " + tensorLabel(g, outs[k]) + " must be a " +
                                                                std::string(toString(want)) + " tensor");
            }
            if (parallel && info.microbatch < 0 && !outs.empty()) info.microbatch = g.tensors[outs[0]].microbatch;
            // With microbatches stored once, a tensor of microbatch 0 stands for every
            // microbatch's instance; an op of no microbatch (one instance per replica) reading one
            // would have no single instance to read. Only the accumulation across microbatches
            // bridges the two (and collectives across replicas, checked above).
            if (parallel && plan_->replication.microbatches > 1 && info.microbatch < 0 && !info.acrossMicrobatches && !info.acrossReplicas)
                for (std::size_t k = 0; k < ins.size(); ++k)
                    if (g.tensors[ins[k]].microbatch >= 0) {
                        fail(path + "/inputs/" + std::to_string(k), who + ": with microbatches stored once, an op of no microbatch cannot read " +
                                                                   tensorLabel(g, ins[k]) + ", a tensor of every microbatch (accumulate it across "
                                                                   "microbatches first, or give the op a microbatch)");
                        break;
                    }

            auto opId = static_cast<OpId>(g.ops.size());
            info.firstInput = static_cast<std::uint32_t>(g.operands.size());
            info.numInputs = static_cast<std::uint32_t>(ins.size());
            g.operands.insert(g.operands.end(), ins.begin(), ins.end());
            info.firstOutput = static_cast<std::uint32_t>(g.operands.size());
            info.numOutputs = static_cast<std::uint32_t>(outs.size());
            g.operands.insert(g.operands.end(), outs.begin(), outs.end());
            for (std::size_t k = 0; k < outs.size(); ++k) {
                auto& t = g.tensors[outs[k]];
                if (t.producer == opId) {  // this op, not pushed yet: not a name to look up
                    fail(path + "/outputs/" + std::to_string(k), who + ": tensor " + tensorLabel(g, outs[k]) + " is listed twice among its outputs");
                    continue;
                }
                if (t.producer != kNone) {
                    fail(path + "/outputs/" + std::to_string(k), who + ": tensor " + tensorLabel(g, outs[k]) + " is already produced by op \"" +
                                                                plan_->opName(g, t.producer) + "\"");
                    continue;
                }
                t.producer = opId;
            }
            g.opByName.emplace(info.name, opId);
            g.ops.push_back(info);
        }
        if (bad()) return;
        std::vector<OpId> cycle;
        if (!g.finalize(&cycle)) {
            std::string names;
            for (std::size_t k = 0; k < cycle.size() && k < 6; ++k) names += (k ? ", \"" : "\"") + plan_->opName(g, cycle[k]) + "\"";
            fail(base + "/ops", "the graph has a cycle through ops " + names + (cycle.size() > 6 ? ", ..." : ""));
        }
    }

    void readLineage(const json& lin) {
        auto& L = plan_->logical;
        auto& P = plan_->parallel;
        std::vector<std::uint32_t> seenIn(P.tensors.size(), kNone);
        for (std::size_t i = 0; i < lin.size(); ++i) {
            auto path = entryPath("/lineage", i);
            const auto& r = lin[i];
            if (!r.is_object()) {
                fail(path, "a lineage record must be an object");
                continue;
            }
            rejectUnknownKeys(r, path, {"logical", "slices", "replicas"}, "lineage record");
            auto* ln = stringMember(r, "logical", path);
            auto* slices = arrayMember(r, "slices", path);
            if (!ln || !slices) continue;
            LineageRecord rec;
            rec.logical = L.findTensor(plan_->names.find(ln->get<std::string>()));
            if (rec.logical == kNone) {
                fail(path + "/logical", "dangling logical tensor id \"" + ln->get<std::string>() + "\"");
                continue;
            }
            std::string who = "lineage of \"" + ln->get<std::string>() + "\"";
            Shape full = plan_->shape(L, rec.logical);
            if (!readReplicaMode(r, path, who, full, rec)) continue;
            auto ldtype = L.tensors[rec.logical].dtype;
            for (std::size_t s = 0; s < slices->size(); ++s) {
                auto sp = path + "/slices/" + std::to_string(s);
                const auto& sj = (*slices)[s];
                if (!sj.is_object()) {
                    fail(sp, who + ": a slice must be an object");
                    continue;
                }
                rejectUnknownKeys(sj, sp, {"box", "copies"}, "slice");
                LineageSlice slice;
                auto* box = arrayMember(sj, "box", sp);
                auto* copies = arrayMember(sj, "copies", sp);
                if (!box || !copies) continue;
                if (box->size() != full.size()) {
                    fail(sp + "/box", who + ": box has " + std::to_string(box->size()) + " dims, the tensor has " + std::to_string(full.size()));
                    continue;
                }
                bool boxOk = true;
                for (std::size_t d = 0; d < full.size(); ++d) {
                    const auto& b = (*box)[d];
                    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer()) {
                        fail(sp + "/box/" + std::to_string(d), who + ": each box dim is [start, end]");
                        boxOk = false;
                        break;
                    }
                    auto lo = b[0].get<std::int64_t>(), hi = b[1].get<std::int64_t>();
                    if (lo < 0 || hi > full[d] || lo >= hi) {
                        fail(sp + "/box/" + std::to_string(d), who + ": slice [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                                                   ") is out of bounds for dim " + std::to_string(d) + " of size " +
                                                                   std::to_string(full[d]));
                        boxOk = false;
                        break;
                    }
                    slice.box.lo.push_back(lo);
                    slice.box.hi.push_back(hi);
                }
                if (!boxOk) continue;
                auto extent = slice.box.extent();
                if (copies->empty()) fail(sp + "/copies", who + ": a slice needs at least one copy");
                for (std::size_t c = 0; c < copies->size(); ++c) {
                    auto cp = sp + "/copies/" + std::to_string(c);
                    const auto& cj = (*copies)[c];
                    if (!cj.is_array() || cj.empty()) {
                        fail(cp, who + ": a copy is a non-empty array of terms");
                        continue;
                    }
                    std::vector<LineageTerm> terms;
                    for (std::size_t k = 0; k < cj.size(); ++k) {
                        auto tp = cp + "/" + std::to_string(k);
                        const auto& tj = cj[k];
                        std::string tname;
                        LineageTerm term;
                        if (tj.is_string()) {
                            tname = tj.get<std::string>();
                        } else if (tj.is_object() && tj.contains("tensor") && tj["tensor"].is_string()) {
                            rejectUnknownKeys(tj, tp, {"tensor", "coeff"}, "term");
                            tname = tj["tensor"].get<std::string>();
                            if (tj.contains("coeff")) {
                                const auto& cv = tj["coeff"];
                                std::optional<Rational> q;
                                if (cv.is_number_unsigned() && cv.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) q = std::nullopt;
                                else if (cv.is_number_integer()) q = Rational(cv.get<std::int64_t>());
                                else if (cv.is_string()) q = Rational::parse(cv.get<std::string>());
                                if (!q || q->isZero()) {
                                    fail(tp + "/coeff", who + ": coeff must be a non-zero integer or a rational string like \"1/2\"");
                                    continue;
                                }
                                term.coeff = *q;
                            }
                        } else {
                            fail(tp, who + ": a term is a tensor id or {\"tensor\": id, \"coeff\": \"p/q\"}");
                            continue;
                        }
                        term.tensor = P.findTensor(plan_->names.find(tname));
                        if (term.tensor == kNone) {
                            fail(tp, who + ": dangling parallel tensor id \"" + tname + "\"");
                            continue;
                        }
                        const auto& ps = plan_->shape(P, term.tensor);
                        if (ps != extent) {
                            fail(tp, who + ": parallel tensor \"" + tname + "\" has shape " + shapeToString(ps) +
                                         ", but the slice " + slice.box.toString() + " has shape " + shapeToString(extent));
                            continue;
                        }
                        if (P.tensors[term.tensor].dtype != ldtype) {
                            fail(tp, who + ": parallel tensor \"" + tname + "\" has dtype " + std::string(toString(P.tensors[term.tensor].dtype)) +
                                         ", the logical tensor has " + std::string(toString(ldtype)));
                            continue;
                        }
                        if (seenIn[term.tensor] != kNone) {
                            fail(tp, who + ": parallel tensor \"" + tname + "\" already appears in /lineage/" + std::to_string(seenIn[term.tensor]));
                            continue;
                        }
                        seenIn[term.tensor] = static_cast<std::uint32_t>(i);
                        terms.push_back(term);
                    }
                    if (ldtype == DType::Int && (terms.size() != 1 || !terms[0].coeff.isOne()))
                        fail(cp, who + ": copies of an int tensor are single tensors with coefficient 1");
                    slice.copies.push_back(std::move(terms));
                }
                rec.slices.push_back(std::move(slice));
            }
            if (plan_->replication.microbatches > 1 && rec.replicas != ReplicaMode::None) {
                // Every tensor of a record repeats alike: once per lane, or once per replica.
                bool perLane = false, perReplica = false;
                for (const auto& sl : rec.slices)
                    for (const auto& c : sl.copies)
                        for (const auto& t : c) (P.tensors[t.tensor].microbatch >= 0 ? perLane : perReplica) = true;
                if (perLane && perReplica) {
                    fail(path + "/slices", who + ": with microbatches stored once, a record holds tensors of microbatch 0 or tensors of no "
                                               "microbatch, not both");
                    continue;
                }
            }
            checkTiling(rec, path, who, full);
            plan_->lineage.push_back(std::move(rec));
        }
    }

    /// The microbatch of a record's first tensor (-1 if it cannot be read yet; slices report that).
    std::int32_t peekMicrobatch(const json& r) const {
        auto sl = r.find("slices");
        if (sl == r.end() || !sl->is_array() || sl->empty() || !(*sl)[0].is_object()) return -1;
        auto cp = (*sl)[0].find("copies");
        if (cp == (*sl)[0].end() || !cp->is_array() || cp->empty() || !(*cp)[0].is_array() || (*cp)[0].empty()) return -1;
        const auto& term = (*cp)[0][0];
        const json* name = term.is_string() ? &term : term.is_object() && term.contains("tensor") ? &term["tensor"] : nullptr;
        if (!name || !name->is_string()) return -1;
        auto t = plan_->parallel.findTensor(plan_->names.find(name->get<std::string>()));
        return t == kNone ? -1 : plan_->parallel.tensors[t].microbatch;
    }

    /// A record's "replicas" mode (plans stored with replicas only). For "split_dim" the listed
    /// slices are replica 0's, so they tile the logical tensor with that dim divided by the degree.
    bool readReplicaMode(const json& r, const std::string& path, const std::string& who, Shape& full, LineageRecord& rec) {
        auto it = r.find("replicas");
        if (!plan_->replication.active()) {
            if (it != r.end()) {
                fail(path + "/replicas", who + ": \"replicas\" is for plans stored with replicas");
                return false;
            }
            return true;
        }
        const auto hint = "\"copies\", \"sum\" or {\"split_dim\": d}";
        if (it == r.end()) {
            fail(path, who + ": in a plan stored with replicas every record says how it repeats: \"replicas\": " + hint);
            return false;
        }
        if (it->is_string() && *it == "copies") {
            rec.replicas = ReplicaMode::Copies;
            return true;
        }
        if (it->is_string() && *it == "sum") {
            rec.replicas = ReplicaMode::Sum;
            return true;
        }
        if (it->is_object() && it->size() == 1 && it->contains("split_dim") && (*it)["split_dim"].is_number_integer()) {
            auto d = (*it)["split_dim"].get<std::int64_t>();
            // Tensors of a microbatch repeat in every lane (replica x microbatch), others in every replica.
            const auto D = plan_->replication.instances(peekMicrobatch(r));
            if (d < 0 || d >= static_cast<std::int64_t>(full.size())) {
                fail(path + "/replicas/split_dim", who + ": split_dim " + std::to_string(d) + " is not a dim of the tensor");
                return false;
            }
            if (full[static_cast<std::size_t>(d)] % D != 0) {
                fail(path + "/replicas/split_dim", who + ": dim " + std::to_string(d) + " of size " + std::to_string(full[static_cast<std::size_t>(d)]) +
                                                       " does not split into " + std::to_string(D) +
                                                       (D == plan_->replication.degree ? " replicas" : " replicas x microbatches"));
                return false;
            }
            full[static_cast<std::size_t>(d)] /= D;
            rec.replicas = ReplicaMode::Split;
            rec.splitDim = static_cast<std::int32_t>(d);
            return true;
        }
        fail(path + "/replicas", who + ": replicas must be " + std::string(hint));
        return false;
    }

    /// Slices must tile the logical box exactly: no two overlap and together they cover it.
    void checkTiling(const LineageRecord& rec, const std::string& path, const std::string& who, const Shape& full) {
        if (rec.slices.empty()) {
            fail(path + "/slices", who + ": no slices");
            return;
        }
        __extension__ typedef unsigned __int128 u128;
        u128 volume = 0;
        for (std::size_t a = 0; a < rec.slices.size(); ++a) {
            u128 v = 1;
            for (auto e : rec.slices[a].box.extent()) v *= static_cast<u128>(e);
            volume += v;
            for (std::size_t b = 0; b < a; ++b) {
                const auto& x = rec.slices[a].box;
                const auto& y = rec.slices[b].box;
                bool overlap = true;
                for (std::size_t d = 0; d < full.size(); ++d)
                    if (x.hi[d] <= y.lo[d] || y.hi[d] <= x.lo[d]) overlap = false;
                if (overlap) {
                    fail(path + "/slices/" + std::to_string(a), who + ": slice " + x.toString() + " overlaps slice " + std::to_string(b) + " " + y.toString());
                    return;
                }
            }
        }
        u128 total = 1;
        for (auto e : full) total *= static_cast<u128>(e);
        if (volume != total) fail(path + "/slices", who + ": the slices leave holes (they cover " + std::to_string(static_cast<unsigned long long>(volume)) +
                                                         " of " + std::to_string(static_cast<unsigned long long>(total)) + " elements)");
    }
};

std::string lineColumn(const std::string& text, std::size_t byte) {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < byte && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            col = 1;
        } else {
            ++col;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

}  // namespace

PlanLoadResult readPlanJson(const json& doc) {
    // Every integer of a plan (dims, ranks, indices, attributes, repeat counts and shifts) is read
    // as 64-bit signed: one past that range would wrap to another value (2^64 - 1 read as -1, a
    // valid rank shift or constant), so the whole document is checked once, before anything reads it.
    if (auto where = integerOutOfRange(doc, "")) {
        PlanLoadResult r;
        r.problems.push_back({printable(shortened(*where, 240)),
                              "integer out of range (a plan holds 64-bit signed integers; write a large constant as a rational string)"});
        return r;
    }
    std::int64_t version = 0;
    if (doc.is_object())
        if (auto it = doc.find("version"); it != doc.end() && it->is_number_integer()) version = it->get<std::int64_t>();
    if (version != 3) {
        // Repeats are a version 3 feature: say so rather than call "repeat" an unknown key.
        PlanLoadResult r;
        for (const auto& [ptr, hasRanks] : repeatableArrays()) {
            json::json_pointer jp(ptr);
            if (!doc.is_object() || !doc.contains(jp) || !doc.at(jp).is_array()) continue;
            const auto& arr = doc.at(jp);
            for (std::size_t i = 0; i < arr.size() && r.problems.size() < kMaxProblems; ++i)
                if (arr[i].is_object() && arr[i].contains("repeat"))
                    r.problems.push_back({ptr + "/" + std::to_string(i) + "/repeat", "repeat entries need \"version\": 3"});
        }
        if (!r.problems.empty()) return r;
        return Reader(doc).run();
    }
    auto expanded = expandRepeats(doc);
    if (!expanded.problems.empty()) {
        PlanLoadResult r;
        r.problems = std::move(expanded.problems);
        return r;
    }
    auto r = Reader(expanded.doc, &expanded.origins).run();
    if (r.plan) r.plan->storedWithRepeats = true;
    return r;
}

PlanLoadResult readPlanText(const std::string& text) {
    if (pickle::looksLikePickle(text)) {
        PlanLoadResult r;
        r.problems.push_back({"", "this is a Python pickle (an nnScaler plan?), not a JSON plan: verify a pair of nnScaler plans with "
                                  "`trainverify verify --logical Gs.pkl --parallel Gp.pkl`; `trainverify inspect` shows what a pickle holds"});
        return r;
    }
    json doc;
    // Plans nest a few levels; a file nested thousands deep would overflow the stack of every
    // recursive copy and comparison of the document later. The depth is found by one pass over
    // the text before parsing (a parser callback would do it too, but nlohmann's callback parser
    // rescans a container after each of its members ends: quadratic in a long array).
    constexpr int kMaxDepth = 256;
    {
        int depth = 0;
        bool inString = false, escaped = false;
        for (const char c : text) {
            if (inString) {
                if (escaped) escaped = false;
                else if (c == '\\') escaped = true;
                else if (c == '"') inString = false;
                continue;
            }
            if (c == '"') inString = true;
            else if (c == '[' || c == '{') {
                if (++depth > kMaxDepth) {
                    PlanLoadResult r;
                    r.problems.push_back({"", "the JSON nests deeper than " + std::to_string(kMaxDepth) + " levels; a plan file needs a handful"});
                    return r;
                }
            } else if (c == ']' || c == '}') {
                --depth;
            }
        }
    }
    try {
        doc = json::parse(text, nullptr, true, false);
    } catch (const json::parse_error& e) {
        PlanLoadResult r;
        std::string what = e.what();
        if (auto p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
        if (auto p = what.find(" - "); p != std::string::npos) what = what.substr(p + 3);
        r.problems.push_back({"", printableMessage("malformed JSON at " + lineColumn(text, e.byte ? e.byte - 1 : 0) + ": " + what)});
        return r;
    } catch (const json::exception& e) {
        // A number past what a double holds (1e400) and the library's other refusals: its text
        // without the library's tag, as a problem of the file.
        PlanLoadResult r;
        std::string what = e.what();
        if (auto p = what.find("] "); p != std::string::npos && what.rfind("[json.exception", 0) == 0) what = what.substr(p + 2);
        if (what.rfind("number overflow parsing", 0) == 0) what = "a number is out of range (" + what.substr(std::string("number overflow parsing ").size()) + ")";
        r.problems.push_back({"", printableMessage("malformed JSON: " + what)});
        return r;
    }
    return readPlanJson(doc);
}

PlanLoadResult readPlanFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        PlanLoadResult r;
        r.problems.push_back({"", "cannot open file"});
        return r;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    return readPlanText(ss.str());
}

// ----- writer -----------------------------------------------------------------------------

namespace {

json writeGraph(const Plan& p, const Graph& g, bool parallel) {
    json tensors = json::array();
    for (TensorId t = 0; t < g.tensors.size(); ++t) {
        const auto& ti = g.tensors[t];
        json j = {{"id", p.names.str(ti.name)}, {"shape", p.shapes[ti.shape]}, {"role", toString(ti.role)}};
        if (ti.dtype != DType::Float) j["dtype"] = toString(ti.dtype);
        if (parallel) j["rank"] = ti.rank;
        if (ti.microbatch >= 0) j["microbatch"] = ti.microbatch;
        tensors.push_back(std::move(j));
    }
    const auto& reg = OpRegistry::instance();
    json ops = json::array();
    for (OpId o = 0; o < g.ops.size(); ++o) {
        const auto& oi = g.ops[o];
        const auto& spec = reg.spec(oi.kind);
        json j = {{"id", p.names.str(oi.name)}, {"op", spec.name}};
        if (oi.rank >= 0) j["rank"] = oi.rank;
        if (oi.group != kNone) j["group"] = p.groups[oi.group];
        if (oi.microbatch >= 0) j["microbatch"] = oi.microbatch;
        auto defPhase = spec.collective ? Phase::Communication : Phase::Forward;
        if (oi.phase != defPhase) j["phase"] = toString(oi.phase);
        json ins = json::array(), outs = json::array();
        for (auto t : g.inputs(o)) ins.push_back(p.names.str(g.tensors[t].name));
        for (auto t : g.outputs(o)) outs.push_back(p.names.str(g.tensors[t].name));
        j["inputs"] = std::move(ins);
        j["outputs"] = std::move(outs);
        const auto& a = p.opAttrs(g, o);
        if (!a.empty()) j["attrs"] = a;
        if (oi.acrossReplicas) j["across_replicas"] = true;
        if (oi.indexFromReplica) j["index_from_replica"] = true;
        if (oi.acrossMicrobatches) j["across_microbatches"] = true;
        ops.push_back(std::move(j));
    }
    return json{{"tensors", std::move(tensors)}, {"ops", std::move(ops)}};
}

}  // namespace

json writePlanJson(const Plan& p) { return writePlanJson(p, p.storedWithRepeats); }

json writePlanJson(const Plan& p, bool findRepeats) {
    json doc = json::object();
    doc["format"] = "trainverify-plan";
    doc["version"] = p.replication.active() ? 2 : 1;  // 3 once the repeats are found, below
    if (!p.name.empty()) doc["name"] = p.name;
    if (!p.description.empty()) doc["description"] = p.description;
    if (!p.expect.is_null()) doc["expect"] = p.expect;
    doc["logical"] = writeGraph(p, p.logical, false);
    auto par = writeGraph(p, p.parallel, true);
    json mesh = json::object();
    for (auto a : kAxes)
        if (p.mesh.at(a) != 1) mesh[std::string(toString(a))] = p.mesh.at(a);
    par["mesh"] = mesh;
    par["microbatches"] = p.microbatches;
    json ranks = json::array();
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        json j = {{"rank", r}};
        for (auto a : kAxes)
            if (p.mesh.at(a) != 1 || a == Axis::DP || a == Axis::TP || a == Axis::PP) j[std::string(toString(a))] = p.ranks[r].at(a);
        ranks.push_back(std::move(j));
    }
    par["ranks"] = std::move(ranks);
    if (p.replication.active()) {
        par["replicas"] = json{{"axis", "dp"}};
        if (p.replication.microbatches > 1) par["replicas"]["microbatches"] = true;
    }
    doc["parallel"] = std::move(par);
    json lin = json::array();
    for (const auto& rec : p.lineage) {
        json slices = json::array();
        for (const auto& s : rec.slices) {
            json box = json::array();
            for (std::size_t d = 0; d < s.box.lo.size(); ++d) box.push_back({s.box.lo[d], s.box.hi[d]});
            json copies = json::array();
            for (const auto& c : s.copies) {
                json terms = json::array();
                for (const auto& t : c) {
                    const auto& n = p.tensorName(p.parallel, t.tensor);
                    if (t.coeff.isOne()) terms.push_back(n);
                    else terms.push_back({{"tensor", n}, {"coeff", t.coeff.toString()}});
                }
                copies.push_back(std::move(terms));
            }
            slices.push_back({{"box", std::move(box)}, {"copies", std::move(copies)}});
        }
        json r = {{"logical", p.tensorName(p.logical, rec.logical)}, {"slices", std::move(slices)}};
        if (rec.replicas == ReplicaMode::Copies) r["replicas"] = "copies";
        if (rec.replicas == ReplicaMode::Sum) r["replicas"] = "sum";
        if (rec.replicas == ReplicaMode::Split) r["replicas"] = json{{"split_dim", rec.splitDim}};
        lin.push_back(std::move(r));
    }
    doc["lineage"] = std::move(lin);
    if (findRepeats) return compressRepeats(std::move(doc));
    return doc;
}

std::string writePlanText(const Plan& p) { return writePlanJson(p).dump(1) + "\n"; }

}  // namespace tv
