// Plan JSON in: the entry points (text, file, document; a pickle or a malformed or too-deep file
// refused with where), version 3 repeats expanded first, then the validating reader's run over
// the document, mesh and replicas (plan_reader.hpp lists the other parts). The writer is
// plan_writer.cpp.
#include "io/plan_json.hpp"
#include "io/plan_reader.hpp"
#include "io/plan_members.hpp"
#include "pickle/pickle.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "model/text.hpp"
#include "ops/registry.hpp"

namespace tv {

using json = nlohmann::json;

namespace plan_json_detail {

PlanLoadResult Reader::run() {
    try {
        readAll();
    } catch (const TooManyProblems&) {
    }
    PlanLoadResult r;
    r.problems = std::move(problems_);
    if (r.problems.empty()) r.plan = std::move(plan_);
    return r;
}

std::string Reader::entryPath(const std::string& array, std::size_t i) const {
    return origins_ ? origins_->entryPath(array, i) : array + "/" + std::to_string(i);
}

void Reader::fail(const std::string& path, const std::string& msg) {
    // Names and keys come from the file: shown escaped and shortened, never raw.
    problems_.push_back({printable(shortened(path, 240)), printableMessage(msg)});
    if (problems_.size() >= kMaxProblems) throw TooManyProblems{};
}

const json* Reader::member(const json& obj, const char* key, const std::string& path, bool required,
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

const json* Reader::arrayMember(const json& obj, const char* key, const std::string& path, bool required) {
    return member(obj, key, path, required, json::value_t::array, "an array");
}

const json* Reader::objectMember(const json& obj, const char* key, const std::string& path, bool required) {
    return member(obj, key, path, required, json::value_t::object, "an object");
}

const json* Reader::stringMember(const json& obj, const char* key, const std::string& path, bool required) {
    return member(obj, key, path, required, json::value_t::string, "a string");
}

bool Reader::intMember(const json& obj, const char* key, const std::string& path, std::int64_t& out, bool required,
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

void Reader::rejectUnknownKeys(const json& obj, const std::string& path, std::initializer_list<const char*> known, const char* what) {
    if (!obj.is_object()) return;
    for (auto it = obj.begin(); it != obj.end(); ++it) {
        bool ok = false;
        for (const char* k : known) ok = ok || it.key() == k;
        if (!ok) fail(path + "/" + it.key(), std::string("unknown ") + what + " key \"" + it.key() + "\"");
    }
}

void Reader::readAll() {
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
    if (plan_->replication.active())
        plan_->ranks.resize(static_cast<std::size_t>(plan_->replication.members > 1 && plan_->replication.memberAxis == Axis::DP
                                                         ? plan_->replication.memberRanks
                                                         : plan_->replication.ranksPerReplica));
    readGraph(*logical, "/logical", plan_->logical, false);
    readGraph(*parallel, "/parallel", plan_->parallel, true);
    if (!bad())
        if (auto* lin = arrayMember(doc_, "lineage", "")) readLineage(*lin);
    plan_->ranks = std::move(allRanks);
}

void Reader::readReplicas(const json& par) {
    auto* r = objectMember(par, "replicas", "/parallel", false);
    if (!r) return;
    if (version_ < 2) {
        fail("/parallel/replicas", "\"replicas\" needs \"version\": 2");
        return;
    }
    rejectUnknownKeys(*r, "/parallel/replicas", {"axis", "microbatches", "listed", "members", "member_axis"}, "replicas");
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
    const auto dpRanks = plan_->mesh.at(Axis::DP);
    // "listed": the stored group is the first `listed` data-parallel ranks (one expert-parallel
    // group, whose members hold different experts), and it repeats dp / listed times.
    std::int64_t listed = 1;
    if (r->contains("listed") && !intMember(*r, "listed", "/parallel/replicas", listed, true, 1, 1 << 20)) return;
    // "members" (read as stored; plan-format.md §7.3): one member of each group of `members`
    // data-parallel ranks; the groups are the replicas, as with "listed".
    std::int64_t members = 1;
    if (r->contains("members")) {
        if (!keepMembers_) {
            fail("/parallel/replicas/members", "internal error: members stored once reach the reader unwritten");
            return;
        }
        if (!intMember(*r, "members", "/parallel/replicas", members, true, 2, 1 << 20)) return;
        if (r->contains("listed")) {
            fail("/parallel/replicas/listed", "a plan lists a group of replicas (\"listed\") or stores one member of it (\"members\"), not both");
            return;
        }
        listed = members;
    }
    // "member_axis": "cp" (plan-format.md §7.3): the members are a context-parallel group inside
    // each replica, not data-parallel ranks.
    bool cpMembers = false;
    if (auto it = r->find("member_axis"); it != r->end()) {
        if (members < 2) {
            fail("/parallel/replicas/member_axis", "\"member_axis\" goes with \"members\"");
            return;
        }
        if (!it->is_string() || (*it != "dp" && *it != "cp")) {
            fail("/parallel/replicas/member_axis", "\"member_axis\" is \"dp\" (an expert-parallel group of data-parallel ranks, the default) or \"cp\" "
                                                   "(a context-parallel group)");
            return;
        }
        cpMembers = *it == "cp";
    }
    if (cpMembers) {
        if (members != plan_->mesh.at(Axis::CP)) {
            fail("/parallel/replicas/members", "\"members\" " + std::to_string(members) + " along cp is not the mesh's cp (" +
                                                   std::to_string(plan_->mesh.at(Axis::CP)) + "): the stored member stands for its whole context-parallel group");
            return;
        }
        listed = 1;
    }
    const std::string key = members > 1 ? "members" : "listed";
    if (dpRanks % listed != 0) {
        fail("/parallel/replicas/" + key, "\"" + key + "\" " + std::to_string(listed) + " does not divide dp " + std::to_string(dpRanks) +
                                              " (the stored group of data-parallel ranks repeats dp / listed times)");
        return;
    }
    const auto D = static_cast<std::int32_t>(dpRanks / listed);
    if (cpMembers && D < 2 && !microbatches) {
        fail("/parallel/replicas/members", "cp members stored once come with the replicas stored once: dp of 2 or more, or the microbatches stored once");
        return;
    }
    if (D < 2 && !microbatches) {
        fail("/parallel/replicas", listed > 1 ? "\"" + key + "\" " + std::to_string(listed) + " is every data-parallel rank (dp " + std::to_string(dpRanks) +
                                                    "): one group stores nothing once; list fewer ranks, or store the microbatches once"
                                              : std::string("replicas need a mesh with dp of 2 or more (or microbatches stored once)"));
        return;
    }
    // Every lane count is computed in 32 bits (Replication::instances): dp x microbatches is
    // bounded here, where the plan says it, so that no product downstream can wrap.
    const std::int64_t lanes = static_cast<std::int64_t>(D) * (microbatches ? plan_->microbatches : 1);
    if (lanes > kMaxLanes) {
        fail("/parallel/replicas", (listed > 1 ? std::to_string(D) + " groups" : "dp " + std::to_string(D)) +
                                       (microbatches ? " x " + std::to_string(plan_->microbatches) + " microbatches" : std::string()) +
                                       " is " + std::to_string(lanes) + " lanes stored once, more than " + std::to_string(kMaxLanes));
        return;
    }
    const auto n = static_cast<std::int32_t>(plan_->ranks.size());
    if (n < dpRanks || n % dpRanks != 0) {
        fail("/parallel/ranks", "with replicas, the " + std::to_string(n) + " ranks must be dp (" + std::to_string(dpRanks) +
                                    ") replicas of equally many ranks");
        return;
    }
    const auto S = n / D;
    const auto perDpRank = n / dpRanks;
    for (std::int32_t rk = 0; rk < n; ++rk)
        if (plan_->ranks[static_cast<std::size_t>(rk)].at(Axis::DP) != rk / perDpRank) {
            fail("/parallel/ranks/" + std::to_string(rk), "with replicas, dp must be the outermost rank coordinate: rank " +
                                                              std::to_string(rk) + " should have dp=" + std::to_string(rk / perDpRank));
            return;
        }
    plan_->replication = Replication{D, S, microbatches ? plan_->microbatches : 1, static_cast<std::int32_t>(listed)};
    if (members > 1) {
        plan_->replication.listedDp = 1;
        plan_->replication.members = static_cast<std::int32_t>(members);
        plan_->replication.memberRanks = perDpRank;
        if (cpMembers) {
            // Member j of a stored rank r is rank r + j * step, with r's coordinates but cp j.
            std::vector<std::array<std::int32_t, 6>> coords;
            for (const auto& ri : plan_->ranks) coords.push_back(ri.coord);
            std::string why;
            std::int64_t bad = -1;
            const auto step = cpMemberStep(coords, static_cast<std::int32_t>(members), why, bad);
            if (step == 0) {
                fail(bad >= 0 ? "/parallel/ranks/" + std::to_string(bad) : std::string("/parallel/ranks"), "with cp members stored once, " + why);
                return;
            }
            plan_->replication.memberRanks = static_cast<std::int32_t>(step);
            plan_->replication.memberAxis = Axis::CP;
        }
    }
}

void Reader::readMesh(const json& par) {
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

}  // namespace plan_json_detail

using plan_json_detail::Reader;

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

namespace {

/// Members stored once are written out first (plan_members.hpp); the reader validates the result,
/// reporting problems at the file's entries.
PlanLoadResult readWithMembers(const json& doc, const RepeatOrigins* origins) {
    auto x = expandMembers(doc, origins);
    if (!x.problems.empty()) {
        PlanLoadResult r;
        r.problems = std::move(x.problems);
        return r;
    }
    auto r = Reader(x.doc, &x.origins).run();
    if (r.plan) r.plan->membersStoredOnce = x.members;
    return r;
}

}  // namespace

PlanLoadResult readPlanJson(const json& doc, const ReadOptions& options) {
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
        if (!storesMembersOnce(doc)) return Reader(doc).run();
        if (options.keepMembersStored) return Reader(doc, nullptr, true).run();
        return readWithMembers(doc, nullptr);
    }
    auto expanded = expandRepeats(doc);
    if (!expanded.problems.empty()) {
        PlanLoadResult r;
        r.problems = std::move(expanded.problems);
        return r;
    }
    auto r = storesMembersOnce(expanded.doc) && !options.keepMembersStored ? readWithMembers(expanded.doc, &expanded.origins)
                                                                            : Reader(expanded.doc, &expanded.origins, options.keepMembersStored).run();
    if (r.plan) r.plan->storedWithRepeats = true;
    return r;
}

PlanLoadResult readPlanText(const std::string& text, const ReadOptions& options) {
    if (pickle::looksLikePickle(text)) {
        PlanLoadResult r;
        r.problems.push_back({"", "this is a Python pickle (an nnScaler plan?), not a JSON plan: an nnScaler plan is read as a pair, "
                                  "its single-device (logical) plan with its parallel plan"});
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
    return readPlanJson(doc, options);
}

PlanLoadResult readPlanFile(const std::string& path, const ReadOptions& options) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        PlanLoadResult r;
        r.problems.push_back({"", "cannot open file"});
        return r;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    return readPlanText(ss.str(), options);
}

}  // namespace tv
