#include "io/plan_members.hpp"

#include "model/plan.hpp"

#include <string>
#include <unordered_map>

namespace tv {

using json = nlohmann::json;

namespace {

const json* member(const json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
}

}  // namespace

std::string memberName(const std::string& stored, std::int32_t j, bool cpAxis) {
    return j == 0 ? stored : stored + (cpAxis ? "~cp" : "~ep") + std::to_string(j);
}

std::int64_t cpMemberStep(const std::vector<std::array<std::int32_t, 6>>& coords, std::int32_t cp, std::string& why, std::int64_t& badRank) {
    constexpr auto C = static_cast<std::size_t>(Axis::CP);
    const auto n = static_cast<std::int64_t>(coords.size());
    std::int64_t step = 0;
    while (step < n && coords[static_cast<std::size_t>(step)][C] == 0) ++step;
    badRank = -1;
    if (step == 0 || step == n || coords[static_cast<std::size_t>(step)][C] != 1) {
        badRank = step < n ? step : -1;
        why = step == n ? "no rank has cp 1" : "rank " + std::to_string(step) + " is the first with a cp coordinate, and has cp " +
                                                   std::to_string(coords[static_cast<std::size_t>(step)][C]) + ", not 1";
        return 0;
    }
    if (n % (step * cp) != 0) {
        why = "the " + std::to_string(n) + " ranks are not blocks of " + std::to_string(step) + " ranks per cp coordinate, " + std::to_string(cp) + " of them";
        return 0;
    }
    for (std::int64_t r = 0; r < n; ++r) {
        const auto c = (r / step) % cp;
        const auto& at = coords[static_cast<std::size_t>(r)];
        const auto& base = coords[static_cast<std::size_t>(r - c * step)];
        bool same = at[C] == c;
        for (std::size_t a = 0; a < at.size() && same; ++a)
            if (a != C && at[a] != base[a]) same = false;
        if (!same) {
            badRank = r;
            why = "rank " + std::to_string(r) + " should have cp " + std::to_string(c) + " and rank " + std::to_string(r - c * step) +
                  "'s other coordinates (member j of a stored rank r is rank r + j * " + std::to_string(step) + ")";
            return 0;
        }
    }
    return step;
}

bool storesMembersOnce(const json& doc) {
    const auto* par = member(doc, "parallel");
    const auto* rep = par ? member(*par, "replicas") : nullptr;
    return rep && rep->is_object() && rep->contains("members");
}

MemberExpansion expandMembers(const json& doc, const RepeatOrigins* from) {
    MemberExpansion x;
    if (from) x.origins = *from;
    if (!storesMembersOnce(doc)) {
        x.doc = doc;
        return x;
    }
    auto fail = [&](const std::string& path, const std::string& msg) {
        if (x.problems.size() < kMaxProblems) x.problems.push_back({path, msg});
    };
    auto pathOf = [&](const std::string& array, std::size_t i) { return from ? from->entryPath(array, i) : array + "/" + std::to_string(i); };
    const auto& par = doc["parallel"];
    const auto& rep = par["replicas"];
    const std::string rpath = "/parallel/replicas";
    // The group: N members, D groups, R' ranks per member.
    const auto& n = rep["members"];
    if (!n.is_number_integer() || n.get<std::int64_t>() < 2 || n.get<std::int64_t>() > (1 << 20)) {
        fail(rpath + "/members", "\"members\" is the size of the expert-parallel group stored once, an integer from 2 to 2^20");
        return x;
    }
    const auto N = static_cast<std::int32_t>(n.get<std::int64_t>());
    if (rep.contains("listed")) {
        fail(rpath + "/listed", "a plan lists a group of replicas (\"listed\") or stores one member of it (\"members\"), not both");
        return x;
    }
    std::int64_t version = 0;
    if (auto* v = member(doc, "version"); v && v->is_number_integer()) version = v->get<std::int64_t>();
    if (version < 2) {
        fail(rpath + "/members", "members stored once need \"version\": 2 or 3");
        return x;
    }
    // The axis the members lie along: an expert-parallel group of data-parallel ranks (the
    // default), or a context-parallel group inside each replica.
    bool cpAxis = false;
    if (auto* ax = member(rep, "member_axis")) {
        if (!ax->is_string() || (*ax != "dp" && *ax != "cp")) {
            fail(rpath + "/member_axis", "\"member_axis\" is \"dp\" (an expert-parallel group of data-parallel ranks, the default) or \"cp\" "
                                         "(a context-parallel group)");
            return x;
        }
        cpAxis = *ax == "cp";
    }
    auto meshDegree = [&](const char* axis) {
        std::int64_t v = 1;
        if (auto* mesh = member(par, "mesh"); mesh && mesh->is_object())
            if (auto* d = member(*mesh, axis); d && d->is_number_integer()) v = d->get<std::int64_t>();
        return v;
    };
    const std::int64_t dp = meshDegree("dp");
    if (dp < 1 || dp > (1 << 20)) {
        fail("/parallel/mesh/dp", "dp is " + std::to_string(dp) + ", must be from 1 to 2^20");
        return x;
    }
    if (cpAxis && meshDegree("cp") != N) {
        fail(rpath + "/members", "\"members\" " + std::to_string(N) + " along cp is not the mesh's cp (" + std::to_string(meshDegree("cp")) +
                                     "): the stored member stands for its whole context-parallel group");
        return x;
    }
    if (!cpAxis && (dp < N || dp % N != 0)) {
        fail(rpath + "/members", "\"members\" " + std::to_string(N) + " does not divide dp " + std::to_string(dp) +
                                     " (the expert-parallel group is N consecutive data-parallel ranks)");
        return x;
    }
    const std::int64_t D = cpAxis ? dp : dp / N;
    bool microbatchesOnce = false;
    if (auto* mb = member(rep, "microbatches"); mb && mb->is_boolean()) microbatchesOnce = mb->get<bool>();
    if (cpAxis && D < 2 && !microbatchesOnce) {
        fail(rpath + "/members", "cp members stored once come with the replicas stored once: dp of 2 or more, or the microbatches stored once");
        return x;
    }
    if (D < 2 && !microbatchesOnce) {
        fail(rpath + "/members", "\"members\" " + std::to_string(N) + " is every data-parallel rank (dp " + std::to_string(dp) +
                                     ") and the microbatches are not stored once: nothing repeats but the members; write the plan out");
        return x;
    }
    std::int64_t M = 1;
    if (auto* mb = member(par, "microbatches"); mb && mb->is_number_integer()) M = std::max<std::int64_t>(1, mb->get<std::int64_t>());
    // Ranks: listed explicitly, or derived from the mesh as dp x pp x tp.
    std::int64_t nranks = 0;
    if (auto* rs = member(par, "ranks"); rs && rs->is_array()) {
        nranks = static_cast<std::int64_t>(rs->size());
    } else {
        nranks = dp;
        if (auto* mesh = member(par, "mesh"); mesh && mesh->is_object())
            for (const char* a : {"pp", "tp"})
                if (auto* d = member(*mesh, a); d && d->is_number_integer() && d->get<std::int64_t>() > 0) nranks *= d->get<std::int64_t>();
    }
    if (nranks < dp || nranks % dp != 0) {
        fail("/parallel/ranks", "with members stored once, the " + std::to_string(nranks) + " ranks must be dp (" + std::to_string(dp) +
                                    ") data-parallel ranks of equally many ranks");
        return x;
    }
    // Member j's ranks are member 0's + j * Rm: along dp, Rm is a data-parallel rank's ranks and
    // member 0's are [0, Rm); along cp, the step between cp coordinates, member 0's the ranks of
    // replica 0 with cp 0.
    std::int64_t Rm = nranks / dp;
    std::vector<std::array<std::int32_t, 6>> coords;
    if (cpAxis) {
        const auto* rs = member(par, "ranks");
        if (!rs || !rs->is_array()) {
            fail("/parallel/ranks", "with cp members stored once, list the \"ranks\" with their coordinates");
            return x;
        }
        for (const auto& r : *rs) {
            std::array<std::int32_t, 6> c{};
            for (auto a : kAxes)
                if (auto* v = member(r, std::string(toString(a)).c_str()); v && v->is_number_integer())
                    c[static_cast<std::size_t>(a)] = v->get<std::int64_t>() >= 0 && v->get<std::int64_t>() < (1 << 20) ? static_cast<std::int32_t>(v->get<std::int64_t>()) : -1;
            coords.push_back(c);
        }
        std::string why;
        std::int64_t bad = -1;
        Rm = cpMemberStep(coords, N, why, bad);
        if (Rm == 0) {
            fail(bad >= 0 ? "/parallel/ranks/" + std::to_string(bad) : std::string("/parallel/ranks"), "with cp members stored once, " + why);
            return x;
        }
    }
    const std::int64_t perReplica = nranks / dp;
    // Bound what the members write out before writing it.
    std::size_t bytes = 0, entries = 0;
    for (const char* ptr : {"/parallel/tensors", "/parallel/ops", "/lineage"}) {
        json::json_pointer jp(ptr);
        if (!doc.contains(jp) || !doc.at(jp).is_array()) continue;
        for (const auto& e : doc.at(jp)) bytes += jsonFootprint(e);
        entries += doc.at(jp).size();
    }
    if (bytes > kMaxMemberBytes / static_cast<std::size_t>(N) || entries > kMaxMemberEntries / static_cast<std::size_t>(N)) {
        fail(rpath + "/members", "written out, the " + std::to_string(N) + " members would take more than " +
                                     std::to_string(kMaxMemberBytes >> 20) + " MiB or " + std::to_string(kMaxMemberEntries) +
                                     " entries (this build checks an expert-parallel group written out)");
        return x;
    }

    x.doc = doc;
    x.members = N;
    auto& xrep = x.doc["parallel"]["replicas"];
    xrep.erase("members");
    xrep.erase("member_axis");
    if (!cpAxis) xrep["listed"] = N;
    auto rename = [&](const json& id, std::int32_t j) { return id.is_string() ? json(memberName(id.get<std::string>(), j, cpAxis)) : id; };
    auto shiftRank = [&](const json& r, std::int32_t j) {
        // Ranks far out of range are left as they are (the reader reports them) rather than overflow.
        if (!r.is_number_integer()) return r;
        const auto v = r.get<std::int64_t>();
        return v > -(std::int64_t(1) << 40) && v < (std::int64_t(1) << 40) ? json(v + j * Rm) : r;
    };
    // The file lists member 0: its ranks are [0, Rm), or along cp replica 0's with cp 0.
    auto rankListed = [&](const json& r, const std::string& at) {
        if (cpAxis) {
            if (!r.is_number_integer()) return true;
            const auto v = r.get<std::int64_t>();
            if (v >= 0 && v < perReplica && coords[static_cast<std::size_t>(v)][static_cast<std::size_t>(Axis::CP)] == 0) return true;
            fail(at, "with cp members stored once, the file lists cp member 0 of replica 0: ranks below " + std::to_string(perReplica) +
                         " with cp 0, not " + std::to_string(v) +
                         (v >= 0 && v < nranks ? " (cp " + std::to_string(coords[static_cast<std::size_t>(v)][static_cast<std::size_t>(Axis::CP)]) + ")" : std::string()));
            return false;
        }
        if (r.is_number_integer() && (r.get<std::int64_t>() < 0 || r.get<std::int64_t>() >= Rm)) {
            fail(at, "with members stored once, the file lists member 0 of the first group: ranks 0 to " + std::to_string(Rm - 1) + ", not " +
                         std::to_string(r.get<std::int64_t>()));
            return false;
        }
        return true;
    };
    auto renameAll = [&](const json& list, std::int32_t j) {
        if (!list.is_array()) return list;
        json out = json::array();
        for (const auto& t : list) out.push_back(rename(t, j));
        return out;
    };

    // Tensors: one per member; the microbatch of each, for the records' lanes below.
    std::unordered_map<std::string, std::int64_t> microbatchOf;
    if (auto* ts = member(par, "tensors"); ts && ts->is_array()) {
        json out = json::array();
        std::vector<RepeatOrigin> origins;
        for (std::size_t i = 0; i < ts->size(); ++i) {
            const auto& t = (*ts)[i];
            if (auto* r = member(t, "rank")) rankListed(*r, pathOf("/parallel/tensors", i) + "/rank");
            if (auto* id = member(t, "id"); id && id->is_string()) {
                std::int64_t mb = -1;
                if (auto* m = member(t, "microbatch"); m && m->is_number_integer()) mb = m->get<std::int64_t>();
                microbatchOf[id->get<std::string>()] = mb;
            }
            for (std::int32_t j = 0; j < N; ++j) {
                json c = t;
                if (c.is_object()) {
                    if (c.contains("id")) c["id"] = rename(c["id"], j);
                    if (c.contains("rank")) c["rank"] = shiftRank(c["rank"], j);
                }
                out.push_back(std::move(c));
                origins.push_back({pathOf("/parallel/tensors", i) + (j ? "/member@" + std::to_string(j) : std::string()), -1});
            }
        }
        x.doc["parallel"]["tensors"] = std::move(out);
        x.origins.arrays["/parallel/tensors"] = std::move(origins);
    }

    // Ops: one per member, or one over the group's members.
    if (auto* os = member(par, "ops"); os && os->is_array()) {
        json out = json::array();
        std::vector<RepeatOrigin> origins;
        for (std::size_t i = 0; i < os->size(); ++i) {
            const auto& o = (*os)[i];
            const auto path = pathOf("/parallel/ops", i);
            if (auto* r = member(o, "rank")) rankListed(*r, path + "/rank");
            if (auto* g = member(o, "group"); g && g->is_array())
                for (std::size_t k = 0; k < g->size(); ++k)
                    if (!rankListed((*g)[k], path + "/group/" + std::to_string(k))) break;
            bool across = false, indexed = false;
            if (auto* a = member(o, "across_members")) {
                if (!a->is_boolean()) fail(path + "/across_members", "across_members is true or false");
                else across = a->get<bool>();
            }
            if (auto* a = member(o, "index_from_member")) {
                if (!a->is_boolean()) fail(path + "/index_from_member", "index_from_member is true or false");
                else indexed = a->get<bool>();
            }
            if (across) {
                const auto* group = member(o, "group");
                if (!group || !group->is_array()) {
                    fail(path + "/across_members", "across_members is for collectives (ops with a \"group\")");
                    continue;
                }
                json c = o;
                c.erase("across_members");
                json g = json::array(), ins = json::array(), outs = json::array();
                for (std::int32_t j = 0; j < N; ++j) {
                    for (const auto& r : *group) g.push_back(shiftRank(r, j));
                    if (auto* v = member(o, "inputs"); v && v->is_array())
                        for (const auto& t : *v) ins.push_back(rename(t, j));
                    if (auto* v = member(o, "outputs"); v && v->is_array())
                        for (const auto& t : *v) outs.push_back(rename(t, j));
                }
                c["group"] = std::move(g);
                if (o.contains("inputs")) c["inputs"] = std::move(ins);
                if (o.contains("outputs")) c["outputs"] = std::move(outs);
                out.push_back(std::move(c));
                origins.push_back({path, -1});
                continue;
            }
            // A chunk indexed by member: member j's part. Stored, member 0's index.
            std::int64_t indexStep = 0;
            if (indexed) {
                const auto* kind = member(o, "op");
                const auto* attrs = member(o, "attrs");
                const auto* parts = attrs ? member(*attrs, "parts") : nullptr;
                const auto* index = attrs ? member(*attrs, "index") : nullptr;
                const auto* byReplica = member(o, "index_from_replica");
                const bool alsoReplica = byReplica && byReplica->is_boolean() && byReplica->get<bool>();
                if (!kind || *kind != "chunk" || !parts || !parts->is_number_integer() || !index || !index->is_number_integer()) {
                    fail(path + "/index_from_member", "index_from_member is for chunk ops (with integer \"parts\" and \"index\")");
                    continue;
                }
                const auto p = parts->get<std::int64_t>(), k = index->get<std::int64_t>();
                if (cpAxis && alsoReplica) {
                    fail(path + "/index_from_member", "with cp members stored once, a chunk takes its index from the member or from the replica, not both");
                    continue;
                }
                if (alsoReplica ? (p != dp || k != 0) : (p < N || p % N != 0 || k < 0 || k >= p / N)) {
                    fail(path + "/index_from_member",
                         alsoReplica ? "a chunk indexed by replica and member has parts dp (" + std::to_string(dp) +
                                           ") and is listed with index 0: data-parallel rank g * members + j takes part g * members + j"
                                     : "a chunk indexed by member has parts a multiple of members (" + std::to_string(N) +
                                           ") and member 0's index, below parts / members: member j takes index + j * parts / members");
                    continue;
                }
                indexStep = alsoReplica ? 1 : p / N;
            }
            for (std::int32_t j = 0; j < N; ++j) {
                json c = o;
                if (c.is_object()) {
                    c.erase("index_from_member");
                    c.erase("across_members");  // false here: the written-out plan has no members
                    if (c.contains("id")) c["id"] = rename(c["id"], j);
                    if (c.contains("rank")) c["rank"] = shiftRank(c["rank"], j);
                    if (auto* g = member(o, "group"); g && g->is_array()) {
                        json s = json::array();
                        for (const auto& r : *g) s.push_back(shiftRank(r, j));
                        c["group"] = std::move(s);
                    }
                    if (c.contains("inputs")) c["inputs"] = renameAll(c["inputs"], j);
                    if (c.contains("outputs")) c["outputs"] = renameAll(c["outputs"], j);
                    if (indexed) c["attrs"]["index"] = c["attrs"]["index"].get<std::int64_t>() + j * indexStep;
                }
                out.push_back(std::move(c));
                origins.push_back({path + (j ? "/member@" + std::to_string(j) : std::string()), -1});
            }
        }
        x.doc["parallel"]["ops"] = std::move(out);
        x.origins.arrays["/parallel/ops"] = std::move(origins);
    }

    // Lineage: each record repeats over the members as its "members" mode says.
    std::unordered_map<std::string, json> logicalShape;
    if (auto* lg = member(doc, "logical"))
        if (auto* ts = member(*lg, "tensors"); ts && ts->is_array())
            for (const auto& t : *ts)
                if (auto* id = member(t, "id"); id && id->is_string())
                    if (auto* s = member(t, "shape")) logicalShape[id->get<std::string>()] = *s;
    if (auto* lin = member(doc, "lineage"); lin && lin->is_array()) {
        json out = json::array();
        const auto hint = std::string("\"copies\", \"sum\" or {\"split_dim\": d}");
        for (std::size_t i = 0; i < lin->size(); ++i) {
            const auto& r = (*lin)[i];
            const auto path = pathOf("/lineage", i);
            const auto* mode = member(r, "members");
            const auto* slices = member(r, "slices");
            if (!mode) {
                fail(path, "with members stored once, every record says how it repeats over the members: \"members\": " + hint);
                continue;
            }
            if (!slices || !slices->is_array()) {
                out.push_back(r);  // the reader reports it
                continue;
            }
            auto renameCopy = [&](const json& copy, std::int32_t j) {
                if (!copy.is_array()) return copy;
                json c = json::array();
                for (const auto& term : copy) {
                    if (term.is_object() && term.contains("tensor")) {
                        json t = term;
                        t["tensor"] = rename(term["tensor"], j);
                        c.push_back(std::move(t));
                    } else {
                        c.push_back(rename(term, j));
                    }
                }
                return c;
            };
            json rec = r;
            rec.erase("members");
            json ns = json::array();
            if (mode->is_string() && (*mode == "copies" || *mode == "sum")) {
                const bool sum = *mode == "sum";
                for (const auto& s : *slices) {
                    const auto* copies = member(s, "copies");
                    if (!copies || !copies->is_array()) {
                        ns.push_back(s);
                        continue;
                    }
                    json c = json::array();
                    for (const auto& copy : *copies) {
                        if (sum) {
                            json terms = json::array();
                            for (std::int32_t j = 0; j < N; ++j)
                                for (const auto& t : renameCopy(copy, j)) terms.push_back(t);
                            c.push_back(std::move(terms));
                        } else {
                            for (std::int32_t j = 0; j < N; ++j) c.push_back(renameCopy(copy, j));
                        }
                    }
                    json s2 = s;
                    s2["copies"] = std::move(c);
                    ns.push_back(std::move(s2));
                }
            } else if (mode->is_object() && mode->size() == 1 && mode->contains("split_dim") && (*mode)["split_dim"].is_number_integer()) {
                const auto d = (*mode)["split_dim"].get<std::int64_t>();
                const auto* logical = member(r, "logical");
                const json* shape = logical && logical->is_string() && logicalShape.count(logical->get<std::string>())
                                        ? &logicalShape.at(logical->get<std::string>())
                                        : nullptr;
                if (!shape || !shape->is_array() || d < 0 || d >= static_cast<std::int64_t>(shape->size()) ||
                    !(*shape)[static_cast<std::size_t>(d)].is_number_integer()) {
                    fail(path + "/members/split_dim", "split_dim " + std::to_string(d) + " is not a dim of the record's logical tensor");
                    continue;
                }
                const auto extent = (*shape)[static_cast<std::size_t>(d)].get<std::int64_t>();
                // Split by the replicas along the same dim: the members' parts lie inside lane 0's.
                std::int64_t lanes = 1;
                if (const auto* rm = member(r, "replicas"); rm && rm->is_object() && rm->contains("split_dim") && (*rm)["split_dim"] == d) {
                    lanes = D;
                    // Tensors of a microbatch repeat per lane when the microbatches are stored once.
                    const auto& c0 = (*slices).empty() ? json() : (*slices)[0];
                    const auto* cps = member(c0, "copies");
                    if (microbatchesOnce && cps && cps->is_array() && !cps->empty() && (*cps)[0].is_array() && !(*cps)[0].empty()) {
                        const auto& term = (*cps)[0][0];
                        const json* id = term.is_string() ? &term : member(term, "tensor");
                        if (id && id->is_string())
                            if (auto it = microbatchOf.find(id->get<std::string>()); it != microbatchOf.end() && it->second >= 0) lanes = D * M;
                    }
                }
                if (extent % (lanes * N) != 0) {
                    fail(path + "/members/split_dim", "dim " + std::to_string(d) + " of size " + std::to_string(extent) + " does not split into " +
                                                          std::to_string(N) + " members" + (lanes > 1 ? " x " + std::to_string(lanes) + " lanes" : std::string()));
                    continue;
                }
                const std::int64_t step = extent / (lanes * N);
                bool ok = true;
                for (std::int32_t j = 0; j < N && ok; ++j)
                    for (const auto& s : *slices) {
                        json s2 = s;
                        auto* box = s2.is_object() && s2.contains("box") ? &s2["box"] : nullptr;
                        if (!box || !box->is_array() || d >= static_cast<std::int64_t>(box->size()) || !(*box)[static_cast<std::size_t>(d)].is_array() ||
                            (*box)[static_cast<std::size_t>(d)].size() != 2 || !(*box)[static_cast<std::size_t>(d)][0].is_number_integer() ||
                            !(*box)[static_cast<std::size_t>(d)][1].is_number_integer()) {
                            fail(path + "/slices", "a slice's box has no [lo, hi] for the members' split_dim " + std::to_string(d));
                            ok = false;
                            break;
                        }
                        auto& range = (*box)[static_cast<std::size_t>(d)];
                        range[0] = range[0].get<std::int64_t>() + j * step;
                        range[1] = range[1].get<std::int64_t>() + j * step;
                        if (const auto* copies = member(s, "copies"); copies && copies->is_array()) {
                            json c = json::array();
                            for (const auto& copy : *copies) c.push_back(renameCopy(copy, j));
                            s2["copies"] = std::move(c);
                        }
                        ns.push_back(std::move(s2));
                    }
                if (!ok) continue;
            } else {
                fail(path + "/members", "members must be " + hint);
                continue;
            }
            rec["slices"] = std::move(ns);
            out.push_back(std::move(rec));
        }
        x.doc["lineage"] = std::move(out);
    }
    if (!x.problems.empty()) x.doc = json();
    return x;
}

}  // namespace tv
