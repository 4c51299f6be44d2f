// Reading one graph of a plan: tensors (shapes, dtypes), ops (kinds, attributes checked by the
// registry's shape rules), ranks and microbatches, each problem with its JSON path.

#include "io/plan_reader.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>

#include "model/text.hpp"
#include "ops/registry.hpp"

namespace tv::plan_json_detail {

namespace {
/// A chunk indexed by replica: `parts` the stored groups (`degree`), listed with index 0 (group k
/// takes part k); or, with a group of several dp ranks listed, `parts` the dp ranks and the index
/// of its listed dp rank (group k's copy takes index + k * listed).
bool chunkByReplicaOk(std::int64_t parts, std::int64_t index, std::int64_t degree, std::int64_t listed) {
    if (parts == degree && index == 0) return true;
    return listed > 1 && parts == degree * listed && index >= 0 && index < listed;
}
}  // namespace

void Reader::readGraph(const json& obj, const std::string& base, Graph& g, bool parallel) {
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
                if (intMember(t, "rank", path, rank, true, 0, nranks - 1) &&
                    !unstoredCpRank(static_cast<std::int32_t>(rank), path + "/rank", "parallel tensor \"" + name + "\""))
                    info.rank = static_cast<std::int32_t>(rank);
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
        // Only in the parallel graph of a plan storing one member of each group (read as stored;
        // otherwise expandMembers has written them out).
        const bool memberPlan = parallel && plan_->replication.members > 1;
        for (const char* key : {"across_members", "index_from_member"})
            if (o.contains(key) && !memberPlan)
                fail(path + "/" + key, who + ": " + key + " is for plans storing one member of each expert-parallel group (\"replicas\": {\"members\": N})");
        auto flag = [&](const char* key) {
            auto it = o.find(key);
            if (it == o.end() || !memberPlan) return false;
            if (!it->is_boolean()) {
                fail(path + "/" + key, who + ": " + key + " is true or false");
                return false;
            }
            return it->get<bool>();
        };
        const bool acrossMembers = flag("across_members"), indexFromMember = flag("index_from_member");
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
        // Where the op comes from (a captured graph's framework line): shown, never proven.
        std::optional<SourceLine> source;
        if (auto* src = objectMember(o, "source", path, false)) {
            const auto spath = path + "/source";
            rejectUnknownKeys(*src, spath, {"file", "line", "function", "code"}, "source");
            SourceLine s;
            std::int64_t line = 0;
            auto* file = stringMember(*src, "file", spath);
            const bool lineOk = intMember(*src, "line", spath, line, true, 1, std::numeric_limits<std::int32_t>::max());
            if (auto* fn = stringMember(*src, "function", spath, false)) s.function = fn->get<std::string>();
            if (auto* code = stringMember(*src, "code", spath, false)) s.code = code->get<std::string>();
            if (file && lineOk) {
                s.file = file->get<std::string>();
                s.line = static_cast<std::int32_t>(line);
                if (s.file.empty()) fail(spath + "/file", who + ": the source file is empty");
                else source = std::move(s);
            }
        }
        for (auto it = o.begin(); it != o.end(); ++it) {
            static const std::vector<std::string> known = {"id", "op", "inputs", "outputs", "attrs", "phase", "rank", "group", "microbatch", "across_replicas", "index_from_replica", "across_microbatches", "source"};
            // across_members and index_from_member are checked above (member plans only).
            if (it.key() == "across_members" || it.key() == "index_from_member") continue;
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
                        if (unstoredCpRank(r, path + "/group/" + std::to_string(k), who)) continue;
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
                info.acrossMembers = acrossMembers;
                // Across members the collective's operands are each member's, rank by rank.
                if (acrossMembers && (spec.collectiveInputs(n) != n || spec.collectiveOutputs(n) != n))
                    fail(path + "/across_members", who + ": across_members is for collectives with one input and one output per rank (" +
                                                       std::string(spec.name) + " has not)");
                if (indexFromMember) fail(path + "/index_from_member", who + ": index_from_member is for chunk ops");
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
                if (acrossMembers) fail(path + "/across_members", who + ": across_members is for collectives (ops with a \"group\")");
                if (indexFromMember) {
                    // Member j takes index + j * parts / members; with index_from_replica as well,
                    // data-parallel rank g * members + j takes part g * members + j.
                    const auto N = plan_->replication.members, D = plan_->replication.degree;
                    const auto byIt = o.find("index_from_replica");
                    const bool byReplica = byIt != o.end() && byIt->is_boolean() && byIt->get<bool>();
                    const bool ok = spec.name == "chunk" && attrs.contains("parts") && attrs["parts"].is_number_integer() && attrs.contains("index") &&
                                    attrs["index"].is_number_integer();
                    const auto p = ok ? attrs["parts"].get<std::int64_t>() : 0, k = ok ? attrs["index"].get<std::int64_t>() : 0;
                    if (!ok)
                        fail(path + "/index_from_member", who + ": index_from_member is for chunk ops (with integer \"parts\" and \"index\")");
                    else if (byReplica && plan_->replication.memberAxis == Axis::CP)
                        fail(path + "/index_from_member", who + ": with cp members stored once, a chunk takes its index from the member or from the replica, not both");
                    else if (byReplica ? (p != std::int64_t(D) * N || k != 0) : (p < N || p % N != 0 || k < 0 || k >= p / N))
                        fail(path + "/index_from_member",
                             byReplica ? who + ": a chunk indexed by replica and member has parts dp (" + std::to_string(std::int64_t(D) * N) +
                                             ") and is listed with index 0: data-parallel rank g * members + j takes part g * members + j"
                                       : who + ": a chunk indexed by member has parts a multiple of members (" + std::to_string(N) +
                                             ") and member 0's index, below parts / members: member j takes index + j * parts / members");
                    else
                        info.indexFromMember = true;
                }
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
                    else if (indexFromMember)
                        info.indexFromReplica = true;  // with the member's index: checked above
                    else if (!attrs.contains("parts") || !attrs["parts"].is_number_integer() || !attrs.contains("index") ||
                             !attrs["index"].is_number_integer() ||
                             !chunkByReplicaOk(attrs["parts"].get<std::int64_t>(), attrs["index"].get<std::int64_t>(), D,
                                               // Members along cp are no data-parallel ranks: the replicas alone.
                                               plan_->replication.memberAxis == Axis::CP ? plan_->replication.listedDp
                                                                                          : std::max(plan_->replication.listedDp, plan_->replication.members)))
                        fail(path + "/index_from_replica", who + ": a chunk indexed by replica has parts " + std::to_string(D) +
                                                               " (the replicas) and is listed with index 0" +
                                                               (plan_->replication.listedDp > 1 ? ", or parts dp (" + std::to_string(D * plan_->replication.listedDp) +
                                                                                                      ") and the listed dp rank's position (below \"listed\" " +
                                                                                                      std::to_string(plan_->replication.listedDp) + ") as its index"
                                                                                                : std::string()));
                    else
                        info.indexFromReplica = true;
                }
                if (o.contains("group")) fail(path + "/group", who + ": only collectives have a \"group\"");
                std::int64_t rank = -1;
                if (!intMember(o, "rank", path, rank, true, 0, nranks - 1)) continue;
                if (unstoredCpRank(static_cast<std::int32_t>(rank), path + "/rank", who)) continue;
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
        const bool acrossAll = spec.collective && plan_->replication.active() && acrossIt != o.end() && acrossIt->is_boolean() && acrossIt->get<bool>();
        if (acrossAll || (spec.collective && acrossMembers)) {
            // Over the members of a group too: member by member, then group by group.
            auto in1 = inShapes, out1 = outShapes;
            auto ty1 = inTypes;
            const std::int32_t copies = (acrossAll ? plan_->replication.degree : 1) * (acrossMembers ? plan_->replication.members : 1);
            for (std::int32_t k = 1; k < copies; ++k) {
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
        // The mirror: an op of microbatch 0 runs once per microbatch, so a tensor of no microbatch
        // it wrote would have one instance written by every microbatch's copy (written out, M
        // producers of one tensor, whose values may differ: refused, found by the oracle fuzzer
        // on a member plan).
        if (parallel && plan_->replication.microbatches > 1 && info.microbatch >= 0)
            for (std::size_t k = 0; k < outs.size(); ++k)
                if (g.tensors[outs[k]].microbatch < 0) {
                    fail(path + "/outputs/" + std::to_string(k), who + ": with microbatches stored once, an op of microbatch " +
                                                                std::to_string(info.microbatch) + " runs for every microbatch and cannot write " +
                                                                tensorLabel(g, outs[k]) + ", a tensor of no microbatch (one per replica: give it microbatch " +
                                                                std::to_string(info.microbatch) + ", or the op none)");
                    break;
                }
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
        if (source) plan_->setOpSource(g, opId, *source);
    }
    if (parallel && plan_->replication.members > 1) {
        // Read as stored, a name that is member j's copy of another stored name ("x~cp1" beside
        // "x") is the duplicate the members written out would hold: refused as the written-out
        // reading refuses it.
        const auto N = plan_->replication.members;
        const std::string mark = plan_->replication.memberAxis == Axis::CP ? "~cp" : "~ep";
        auto copyOf = [&](const std::string& name, const std::function<bool(NameId)>& exists) -> std::pair<std::string, long> {
            const auto at = name.rfind(mark);
            if (at == std::string::npos) return {};
            const auto digits = name.substr(at + mark.size());
            if (digits.empty() || digits.size() > 7 || digits[0] == '0' || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
                return {};
            const long j = std::stol(digits);
            if (j < 1 || j >= N) return {};
            const auto stored = name.substr(0, at);
            const auto id = plan_->names.find(stored);
            return id != kNone && exists(id) ? std::pair{stored, j} : std::pair<std::string, long>{};
        };
        for (std::size_t i = 0; i < g.tensors.size(); ++i) {
            const auto& name = plan_->names.str(g.tensors[i].name);
            if (auto [stored, j] = copyOf(name, [&](NameId id) { return g.findTensor(id) != kNone; }); !stored.empty())
                fail(entryPath(base + "/tensors", i) + "/id", "duplicate tensor id \"" + name + "\": member " + std::to_string(j) + "'s copy of \"" +
                                                                 stored + "\" has that name");
        }
        for (std::size_t i = 0; i < g.ops.size(); ++i) {
            const auto& name = plan_->names.str(g.ops[i].name);
            if (auto [stored, j] = copyOf(name, [&](NameId id) { return g.opByName.count(id) > 0; }); !stored.empty())
                fail(entryPath(base + "/ops", i) + "/id", "duplicate op id \"" + name + "\": member " + std::to_string(j) + "'s copy of \"" + stored +
                                                             "\" has that name");
        }
    }
    if (bad()) return;
    std::vector<OpId> cycle;
    if (!g.finalize(&cycle)) {
        std::string names;
        for (std::size_t k = 0; k < cycle.size() && k < 6; ++k) names += (k ? ", \"" : "\"") + plan_->opName(g, cycle[k]) + "\"";
        fail(base + "/ops", "the graph has a cycle through ops " + names + (cycle.size() > 6 ? ", ..." : ""));
    }
}

}  // namespace tv::plan_json_detail
