// The verifier tested against the concrete oracle (verify/oracle.hpp). Random small plans from
// the generator (every strategy it has), written out so that one rank can be edited alone, and
// random mutations of them: constants tweaked, operands swapped, an op reading another rank's
// or microbatch's tensor of the same shape, lineage coefficients changed, copies dropped. For
// every plan and mutant:
//  - the oracle separates it (a claim differs at full shapes) but the verifier says EQUIVALENT:
//    a soundness bug, the test fails;
//  - the verifier says NOT EQUIVALENT but the oracle agrees on every trial: a false alarm, the
//    test fails (the oracle runs several random inputs, so a real difference that needs special
//    values is the only other explanation; such a case is reported with its seed to look at).
// Everything is seeded: a failure names the case and reproduces.
//
// TV_FUZZ_CASES sets how many base plans are drawn (default 30, each with up to six mutants and
// two rewrites, each rewrite with a mutant of its own); TV_FUZZ_CASE_SECONDS (default 60) bounds
// one verifier run (a run past it is listed as not ending: issue 17);
// TV_FUZZ_SECONDS, when set, keeps drawing until that much time has passed (the long run:
// docs/soundness.md; set QTEST_FUNCTION_TIMEOUT above it, Qt Test stops a test function after five
// minutes). TV_FUZZ_SEED moves the whole sequence; TV_FUZZ_VERBOSE=1 prints every case's verdicts;
// TV_FUZZ_DUMP=DIR writes every case to DIR/N.json (its description names it) for the command line.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <cstdio>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "generate/generator.hpp"
#include "io/plan_json.hpp"
#include "verify/oracle.hpp"
#include "verify/verifier.hpp"
#include "model/rational.hpp"

using namespace tv;
using json = nlohmann::json;

namespace {

std::uint64_t envNumber(const char* name, std::uint64_t def) {
    const char* v = std::getenv(name);
    if (!v || !*v) return def;
    return std::strtoull(v, nullptr, 10);
}

struct Case {
    std::string name;
    json doc;
};

/// A small configuration drawn at random; empty when the generator refuses it.
std::optional<gen::GenerateOptions> drawConfig(std::mt19937_64& rng) {
    auto pick = [&](std::initializer_list<int> xs) {
        std::vector<int> v(xs);
        return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
    };
    gen::GenerateOptions o;
    static const char* models[] = {"mlp", "mlp", "gpt2", "llama3", "deepseek"};
    o.model = models[std::uniform_int_distribution<int>(0, 4)(rng)];
    // TV_FUZZ_MODEL draws one model only (a run aimed at one path, e.g. deepseek's experts).
    if (const char* only = std::getenv("TV_FUZZ_MODEL"); only && *only) o.model = only;
    o.layers = 1;
    if (o.model == "mlp") {
        o.hidden = 8;
        o.ffn = 16;
        o.vocab = 8;
    } else {
        o.hidden = 16;
        o.heads = 2;
        o.kvHeads = 2;
        o.ffn = 32;
        o.vocab = 16;
        o.seq = 4;
    }
    o.dp = pick({1, 2});
    o.tp = pick({1, 2});
    // DeepSeek (one dense layer; its multi-token prediction block is an MoE one): the experts over
    // the tensor-parallel group (tp 2), or over two data-parallel replicas (tp 1).
    // Over the replicas, half the time stored as one member of each group (dp 4: two groups).
    bool membersStored = false;
    if (o.model == "deepseek" && pick({0, 1})) {
        o.ep = 2;
        if (o.tp == 1) {
            o.dp = pick({2, 4});
            membersStored = pick({0, 1, 1});
        }
    }
    o.pp = pick({1, 1, 2});
    o.microbatches = o.pp > 1 ? 2 : pick({1, 2});
    o.zero = o.dp > 1 ? pick({0, 0, 1, 2}) : 0;
    o.sequenceParallel = o.tp > 1 && o.model != "mlp" && pick({0, 1});
    o.cp = o.model != "mlp" && o.tp == 1 && pick({0, 0, 1}) ? 2 : 1;
    if (o.cp > 1 && pick({0, 1})) o.cpComm = "p2p";
    // All-gather CP with replicas or microbatches to store once: half the time stored as cp
    // member 0 of each group ("member_axis": "cp"), checked by the verifier's member argument.
    if (o.cp > 1 && o.cpComm != "p2p" && (o.dp > 1 || o.microbatches > 1) && pick({0, 1})) membersStored = true;
    // TV_FUZZ_CP_MEMBERS aims a run at that path: every plan of a model with attention is a cp
    // member plan (cp 2, K and V all-gathered, replicas or microbatches stored once).
    if (const char* cpm = std::getenv("TV_FUZZ_CP_MEMBERS"); cpm && *cpm && o.model != "mlp" && o.ep == 1) {
        o.tp = 1;
        o.sequenceParallel = false;
        o.cp = 2;
        o.cpComm = "all_gather";
        if (o.dp == 1) o.microbatches = 2;
        membersStored = true;
    }
    o.optimizer = pick({0, 1}) ? "adamw" : "sgd";
    if (pick({0, 0, 0, 1})) o.clipGrad = "1";
    // Written out: a mutation can touch one rank, and the oracle needs no expansion; or, for
    // experts over the replicas and for all-gather CP, one member stored (the verifier's member
    // argument against the oracle on the plan written out; a mutation of the member is every
    // member's).
    o.format = membersStored ? 2 : 1;
    if (gen::validate(o)) return std::nullopt;
    return o;
}

std::string describe(const gen::GenerateOptions& o) {
    std::ostringstream s;
    s << o.model << " dp" << o.dp << " tp" << o.tp << " pp" << o.pp << " nm" << o.microbatches;
    if (o.zero) s << " zero" << o.zero;
    if (o.sequenceParallel) s << " sp";
    if (o.cp > 1) s << " cp" << o.cp << (o.cpComm == "p2p" ? " ring" : "");
    s << " " << o.optimizer;
    if (o.ep > 1) s << " ep" << o.ep;
    if (o.format > 1) s << " stored";
    if (!o.clipGrad.empty()) s << " clip";
    return s.str();
}

/// Mutations beyond the bug catalog, each on a copy of the document. Empty name: none applied.
Case mutate(const json& base, std::mt19937_64& rng) {
    Case m{"", base};
    auto& ops = m.doc["parallel"]["ops"];
    auto& tensors = m.doc["parallel"]["tensors"];
    auto& lineage = m.doc["lineage"];
    auto any = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
    if (ops.empty()) return m;
    std::map<std::string, const json*> tensorById;
    for (const auto& t : tensors) tensorById[t["id"].get<std::string>()] = &t;
    auto shapeOf = [&](const std::string& id) { return tensorById.count(id) ? (*tensorById[id])["shape"] : json(); };
    switch (std::uniform_int_distribution<int>(0, 4)(rng)) {
        case 0: {  // a constant tweaked
            std::vector<std::pair<std::size_t, std::string>> sites;
            for (std::size_t i = 0; i < ops.size(); ++i)
                if (ops[i].contains("attrs") && ops[i]["attrs"].is_object())
                    for (auto it = ops[i]["attrs"].begin(); it != ops[i]["attrs"].end(); ++it)
                        if ((it.value().is_number() || (it.value().is_string() && it.value().get<std::string>().find_first_of("0123456789") == 0)) &&
                            it.key() != "dim" && it.key() != "dims" && it.key() != "start" && it.key() != "end" && it.key() != "index" &&
                            it.key() != "parts" && it.key() != "step")
                            sites.emplace_back(i, it.key());
            if (sites.empty()) return m;
            auto [i, key] = sites[any(sites.size())];
            auto& v = ops[i]["attrs"][key];
            if (v.is_number_integer()) v = v.get<std::int64_t>() + 1;
            else if (v.is_number()) v = v.get<double>() * 2;
            else v = v.get<std::string>() == "1/3" ? "1/5" : "1/3";
            m.name = "constant " + key + " of " + ops[i]["id"].get<std::string>() + " changed";
            return m;
        }
        case 1: {  // two operands of one op swapped (same shape)
            std::vector<std::size_t> sites;
            for (std::size_t i = 0; i < ops.size(); ++i) {
                const auto& in = ops[i]["inputs"];
                if (in.size() >= 2 && !ops[i].contains("group") && shapeOf(in[0].get<std::string>()) == shapeOf(in[1].get<std::string>()) &&
                    in[0] != in[1])
                    sites.push_back(i);
            }
            if (sites.empty()) return m;
            auto i = sites[any(sites.size())];
            std::swap(ops[i]["inputs"][0], ops[i]["inputs"][1]);
            m.name = "operands of " + ops[i]["id"].get<std::string>() + " swapped";
            return m;
        }
        case 2: {  // an op reads another tensor of the same shape, dtype and role (another rank's, microbatch's, layer's)
            for (int tries = 0; tries < 20; ++tries) {
                auto i = any(ops.size());
                if (ops[i].contains("group") || ops[i]["inputs"].empty()) continue;
                auto k = any(ops[i]["inputs"].size());
                const auto from = ops[i]["inputs"][k].get<std::string>();
                if (!tensorById.count(from)) continue;
                const auto& ft = *tensorById[from];
                std::vector<std::string> same;
                for (const auto& t : tensors)
                    if (t["id"] != from && t["shape"] == ft["shape"] && t.value("dtype", "float") == ft.value("dtype", "float") &&
                        t.value("rank", -1) == ft.value("rank", -1))
                        same.push_back(t["id"].get<std::string>());
                if (same.empty()) continue;
                auto to = same[any(same.size())];
                ops[i]["inputs"][k] = to;
                m.name = ops[i]["id"].get<std::string>() + " reads " + to + " instead of " + from;
                return m;
            }
            return m;
        }
        case 3: {  // a lineage coefficient changed
            for (int tries = 0; tries < 20; ++tries) {
                auto r = any(lineage.size());
                auto& slices = lineage[r]["slices"];
                if (slices.empty()) continue;
                auto& copies = slices[any(slices.size())]["copies"];
                if (copies.empty()) continue;
                auto& copy = copies[any(copies.size())];
                if (copy.empty()) continue;
                auto& term = copy[any(copy.size())];
                std::string id = term.is_string() ? term.get<std::string>() : term["tensor"].get<std::string>();
                if (tensorById.count(id) && tensorById[id]->value("dtype", "float") == "int") continue;
                term = json{{"tensor", id}, {"coeff", "2"}};
                m.name = "coefficient of " + id + " in the lineage of " + lineage[r]["logical"].get<std::string>() + " doubled";
                return m;
            }
            return m;
        }
        default: {  // a copy of a replicated result dropped from the lineage
            // Only of results that leave the step (nothing reads their logical tensor): a copy of
            // an intermediate dropped can still be refused where a glue stage then reads the
            // unclaimed copy (a completeness limit of the stage cut; docs/soundness.md, open).
            std::set<std::string> read;
            for (const auto& op : m.doc["logical"]["ops"])
                for (const auto& t : op["inputs"]) read.insert(t.get<std::string>());
            for (int tries = 0; tries < 20; ++tries) {
                auto r = any(lineage.size());
                if (read.count(lineage[r]["logical"].get<std::string>())) continue;
                auto& slices = lineage[r]["slices"];
                if (slices.empty()) continue;
                auto& copies = slices[any(slices.size())]["copies"];
                if (copies.size() < 2) continue;
                auto c = any(copies.size());
                copies.erase(c);
                m.name = "a copy of " + lineage[r]["logical"].get<std::string>() + " dropped from the lineage";
                // Roles are optional and descriptive: the unchecked copy must be found from the
                // dataflow alone.
                if (any(2) == 1) {
                    for (auto& t : tensors) t.erase("role");
                    m.name += ", roles left out";
                }
                return m;
            }
            return m;
        }
    }
}

/// Correct rewrites: each changes how the parallel plan computes, never what. Applied to a copy;
/// the lineage is untouched (every rewrite keeps the ids of the tensors it replaces the producer
/// of). Empty name: none applied.
/// A collective of a plan stored once that runs across replicas or members: its listed group is
/// one replica's or member's part, so rewriting it by its group's size would change its meaning.
bool storedAcross(const json& o) { return o.value("across_replicas", false) || o.value("across_members", false); }

Case rewrite(const json& base, std::mt19937_64& rng, int serial) {
    Case m{"", base};
    auto& ops = m.doc["parallel"]["ops"];
    auto& tensors = m.doc["parallel"]["tensors"];
    auto any = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
    if (ops.empty()) return m;
    std::map<std::string, std::size_t> tensorAt;
    for (std::size_t i = 0; i < tensors.size(); ++i) tensorAt[tensors[i]["id"].get<std::string>()] = i;
    auto shapeOf = [&](const std::string& id) {
        return tensorAt.count(id) ? tensors[tensorAt[id]]["shape"].get<std::vector<std::int64_t>>() : std::vector<std::int64_t>{};
    };
    auto isFloat = [&](const std::string& id) { return tensorAt.count(id) && tensors[tensorAt[id]].value("dtype", "float") != "int"; };
    int fresh = 0;
    // A new intermediate tensor on the rank (and microbatch) of `like`, of the given shape.
    auto newTensor = [&](const std::string& like, const std::vector<std::int64_t>& shape) {
        json t;
        t["id"] = like + "~rw" + std::to_string(serial) + "." + std::to_string(fresh++);
        t["shape"] = shape;
        const auto& l = tensors[tensorAt.at(like)];
        if (l.contains("rank")) t["rank"] = l["rank"];
        if (l.contains("microbatch")) t["microbatch"] = l["microbatch"];
        tensors.push_back(t);
        tensorAt[t["id"].get<std::string>()] = tensors.size() - 1;
        return t["id"].get<std::string>();
    };
    auto localOp = [&](const json& like, const std::string& kind, std::vector<std::string> in, std::vector<std::string> out, json attrs) {
        json o;
        o["id"] = like["id"].get<std::string>() + "~rw" + std::to_string(serial) + "." + std::to_string(fresh++);
        o["op"] = kind;
        o["inputs"] = in;
        o["outputs"] = out;
        if (like.contains("rank")) o["rank"] = like["rank"];
        if (like.contains("microbatch")) {
            o["microbatch"] = like["microbatch"];
            // What an op of a microbatch writes is of that microbatch (a plan stored once refuses
            // a per-replica tensor written by every microbatch's copy).
            for (const auto& t : out)
                if (tensorAt.count(t)) tensors[tensorAt.at(t)]["microbatch"] = like["microbatch"];
        }
        if (!attrs.is_null()) o["attrs"] = attrs;
        return o;
    };
    auto sitesOf = [&](auto&& pred) {
        std::vector<std::size_t> v;
        for (std::size_t i = 0; i < ops.size(); ++i)
            if (pred(ops[i])) v.push_back(i);
        return v;
    };
    // Replaces ops[i] by the ops in `with`, in order.
    auto replace = [&](std::size_t i, std::vector<json> with) {
        json next = json::array();
        for (std::size_t k = 0; k < ops.size(); ++k) {
            if (k != i) next.push_back(ops[k]);
            else for (auto& w : with) next.push_back(w);
        }
        ops = next;
    };
    auto attrValue = [](const json& op, const char* key) -> std::optional<Rational> {
        if (!op.contains("attrs") || !op["attrs"].contains(key)) return std::nullopt;
        const auto& v = op["attrs"][key];
        if (v.is_number_integer()) return Rational(v.get<std::int64_t>());
        if (v.is_string()) return Rational::parse(v.get<std::string>());
        return std::nullopt;
    };
    switch (std::uniform_int_distribution<int>(0, 7)(rng)) {
        case 0: {  // an all-reduce as a reduce-scatter then an all-gather, along a dim the group divides
            auto sites = sitesOf([&](const json& o) {
                if (o["op"] != "all_reduce" || o.value("attrs", json::object()).value("reduce", "sum") == "max" || storedAcross(o)) return false;
                auto s = shapeOf(o["inputs"][0].get<std::string>());
                for (auto d : s) if (d % static_cast<std::int64_t>(o["group"].size()) == 0) return true;
                return false;
            });
            if (sites.empty()) return m;
            auto i = sites[any(sites.size())];
            json op = ops[i];
            const auto g = static_cast<std::int64_t>(op["group"].size());
            auto shape = shapeOf(op["inputs"][0].get<std::string>());
            std::vector<std::size_t> dims;
            for (std::size_t d = 0; d < shape.size(); ++d) if (shape[d] % g == 0) dims.push_back(d);
            const auto d = dims[any(dims.size())];
            auto part = shape;
            part[d] /= g;
            std::vector<std::string> chunks;
            for (const auto& o : op["outputs"]) chunks.push_back(newTensor(o.get<std::string>(), part));
            json rs = op, ag = op;
            rs["id"] = op["id"].get<std::string>() + "~rw" + std::to_string(serial) + ".rs";
            rs["op"] = "reduce_scatter";
            rs["attrs"]["dim"] = d;
            rs["outputs"] = chunks;
            ag["id"] = op["id"].get<std::string>() + "~rw" + std::to_string(serial) + ".ag";
            ag["op"] = "all_gather";
            ag["attrs"] = json{{"dim", d}};
            ag["inputs"] = chunks;
            replace(i, {rs, ag});
            m.name = op["id"].get<std::string>() + " as a reduce-scatter and an all-gather along dim " + std::to_string(d);
            return m;
        }
        case 1: {  // an averaging all-reduce as a summing one, each member then scaling by 1/group size
            auto sites = sitesOf([&](const json& o) { return o["op"] == "all_reduce" && o.value("attrs", json::object()).value("reduce", "sum") == "mean" && !storedAcross(o); });
            if (sites.empty()) return m;
            auto i = sites[any(sites.size())];
            json op = ops[i];
            json sum = op;
            sum["attrs"]["reduce"] = "sum";
            std::vector<json> with;
            std::vector<std::string> sums;
            for (std::size_t k = 0; k < op["outputs"].size(); ++k) {
                auto out = op["outputs"][k].get<std::string>();
                sums.push_back(newTensor(out, shapeOf(out)));
            }
            sum["outputs"] = sums;
            with.push_back(sum);
            for (std::size_t k = 0; k < sums.size(); ++k) {
                json like = op;
                like["rank"] = op["group"][k];
                with.push_back(localOp(like, "mul_scalar", {sums[k]}, {op["outputs"][k].get<std::string>()},
                                       json{{"value", "1/" + std::to_string(op["group"].size())}}));
                with.back().erase("group");
            }
            replace(i, with);
            m.name = op["id"].get<std::string>() + " as a sum and a scale by 1/" + std::to_string(op["group"].size());
            return m;
        }
        case 2: {  // split-K: a linear's contraction cut in two (at any point, even or not) and the partial products added
            auto sites = sitesOf([&](const json& o) {
                return o["op"] == "linear" && o["inputs"].size() == 2 && shapeOf(o["inputs"][0].get<std::string>()).back() >= 2;
            });
            if (sites.empty()) return m;
            auto i = sites[any(sites.size())];
            json op = ops[i];
            const auto x = op["inputs"][0].get<std::string>(), w = op["inputs"][1].get<std::string>(), y = op["outputs"][0].get<std::string>();
            auto xs = shapeOf(x), ws = shapeOf(w);
            const auto K = xs.back();
            const auto p = std::uniform_int_distribution<std::int64_t>(1, K - 1)(rng);
            const auto xl = static_cast<std::int64_t>(xs.size()) - 1;
            auto cut = [&](const std::string& t, std::vector<std::int64_t> s, std::int64_t dim, std::int64_t a, std::int64_t b) {
                s[static_cast<std::size_t>(dim)] = b - a;
                auto id = newTensor(t, s);
                return std::pair{id, localOp(op, "slice", {t}, {id}, json{{"dim", dim}, {"start", a}, {"end", b}})};
            };
            auto [xa, sxa] = cut(x, xs, xl, 0, p);
            auto [xb, sxb] = cut(x, xs, xl, p, K);
            auto [wa, swa] = cut(w, ws, 1, 0, p);
            auto [wb, swb] = cut(w, ws, 1, p, K);
            auto ya = newTensor(y, shapeOf(y)), yb = newTensor(y, shapeOf(y));
            replace(i, {sxa, sxb, swa, swb, localOp(op, "linear", {xa, wa}, {ya}, nullptr), localOp(op, "linear", {xb, wb}, {yb}, nullptr),
                        localOp(op, "add", {ya, yb}, {y}, nullptr)});
            m.name = op["id"].get<std::string>() + " split-K at " + std::to_string(p) + " of " + std::to_string(K);
            return m;
        }
        case 3: {  // RMSNorm written out: x * rsqrt(mean(x^2) + eps) * w, or x / sqrt(mean(x^2) + eps) * w
            auto sites = sitesOf([&](const json& o) { return o["op"] == "rmsnorm"; });
            if (sites.empty()) return m;
            auto i = sites[any(sites.size())];
            json op = ops[i];
            const auto x = op["inputs"][0].get<std::string>(), w = op["inputs"][1].get<std::string>(), y = op["outputs"][0].get<std::string>();
            auto xs = shapeOf(x);
            auto ms = xs;
            ms.back() = 1;
            const auto last = static_cast<std::int64_t>(xs.size()) - 1;
            auto sq = newTensor(y, xs), mean = newTensor(y, ms), shifted = newTensor(y, ms), root = newTensor(y, ms), normed = newTensor(y, xs);
            const bool division = any(2) == 1;
            std::vector<json> with = {localOp(op, "mul", {x, x}, {sq}, nullptr),
                                      localOp(op, "mean", {sq}, {mean}, json{{"dims", {last}}, {"keepdim", true}}),
                                      localOp(op, "add_scalar", {mean}, {shifted}, json{{"value", op["attrs"]["eps"]}}),
                                      localOp(op, division ? "sqrt" : "rsqrt", {shifted}, {root}, nullptr),
                                      localOp(op, division ? "div" : "mul", {x, root}, {normed}, nullptr),
                                      localOp(op, "mul", {normed, w}, {y}, nullptr)};
            replace(i, with);
            m.name = op["id"].get<std::string>() + (division ? " as x / sqrt(mean(x^2) + eps) w" : " as x rsqrt(mean(x^2) + eps) w");
            return m;
        }
        case 4: {  // a scale split in two, or x / sqrt(n) as 2 x / sqrt(4n)
            auto sites = sitesOf([&](const json& o) { return o["op"] == "mul_scalar" || o["op"] == "div_sqrt"; });
            if (sites.empty()) return m;
            auto i = sites[any(sites.size())];
            json op = ops[i];
            const auto y = op["outputs"][0].get<std::string>();
            auto mid = newTensor(y, shapeOf(y));
            json first = op;
            first["outputs"] = {mid};
            if (op["op"] == "div_sqrt") {
                if (!op["attrs"]["n"].is_number_integer()) return m;
                first["attrs"]["n"] = 4 * op["attrs"]["n"].get<std::int64_t>();
                replace(i, {first, localOp(op, "mul_scalar", {mid}, {y}, json{{"value", 2}})});
                m.name = op["id"].get<std::string>() + " as 2 x / sqrt(4n)";
            } else {
                auto v = attrValue(op, "value");
                if (!v) return m;
                first["attrs"]["value"] = "3";
                replace(i, {first, localOp(op, "mul_scalar", {mid}, {y}, json{{"value", (*v / Rational(3)).toString()}})});
                m.name = op["id"].get<std::string>() + " as two scales";
            }
            return m;
        }
        case 5: {  // a - b as a + (-b)
            auto sites = sitesOf([&](const json& o) { return o["op"] == "sub" && isFloat(o["inputs"][1].get<std::string>()); });
            if (sites.empty()) return m;
            auto i = sites[any(sites.size())];
            json op = ops[i];
            const auto b = op["inputs"][1].get<std::string>();
            auto nb = newTensor(b, shapeOf(b));
            replace(i, {localOp(op, "neg", {b}, {nb}, nullptr), localOp(op, "add", {op["inputs"][0].get<std::string>(), nb}, op["outputs"], nullptr)});
            m.name = op["id"].get<std::string>() + " as an add of the negation";
            return m;
        }
        case 6: {  // (a + b) + c as a + (b + c), where a + b is read only there; or a commutative op's operands swapped
            std::map<std::string, int> readers;
            std::map<std::string, std::size_t> producer;
            std::set<std::string> claimed;  // a tensor the lineage claims keeps its value: (a + b) must not be one
            for (const auto& r : m.doc["lineage"])
                for (const auto& sl : r["slices"])
                    for (const auto& copy : sl["copies"])
                        for (const auto& term : copy) claimed.insert(term.is_string() ? term.get<std::string>() : term["tensor"].get<std::string>());
            for (std::size_t k = 0; k < ops.size(); ++k) {
                for (const auto& t : ops[k]["inputs"]) ++readers[t.get<std::string>()];
                for (const auto& t : ops[k]["outputs"]) producer[t.get<std::string>()] = k;
            }
            auto same = [&](const json& o) {
                auto s = shapeOf(o["outputs"][0].get<std::string>());
                for (const auto& t : o["inputs"]) if (shapeOf(t.get<std::string>()) != s) return false;
                return true;
            };
            auto sites = sitesOf([&](const json& o) {
                if (o["op"] != "add" || !same(o)) return false;
                const auto a = o["inputs"][0].get<std::string>();
                if (!producer.count(a) || readers[a] != 1) return false;
                const auto& p = ops[producer[a]];
                return p["op"] == "add" && same(p) && !claimed.count(a) && !tensors[tensorAt[a]].contains("role");
            });
            if (sites.empty()) {
                auto swaps = sitesOf([&](const json& o) { return (o["op"] == "add" || o["op"] == "mul") && o["inputs"].size() == 2; });
                if (swaps.empty()) return m;
                auto i = swaps[any(swaps.size())];
                std::swap(ops[i]["inputs"][0], ops[i]["inputs"][1]);
                m.name = "operands of " + ops[i]["id"].get<std::string>() + " commuted";
                return m;
            }
            auto i = sites[any(sites.size())];
            json outer = ops[i];
            auto pi = producer[outer["inputs"][0].get<std::string>()];
            json inner = ops[pi];
            // (a + b) + c  ->  t = b + c; a + t, both where the outer add was.
            const auto a = inner["inputs"][0], b = inner["inputs"][1], c = outer["inputs"][1];
            const auto t = inner["outputs"][0];
            inner["inputs"] = {b, c};
            outer["inputs"] = {a, t};
            json next = json::array();
            for (std::size_t k = 0; k < ops.size(); ++k) {
                if (k == pi) continue;
                if (k == i) next.push_back(inner), next.push_back(outer);
                else next.push_back(ops[k]);
            }
            ops = next;
            m.name = outer["id"].get<std::string>() + " reassociated";
            return m;
        }
        default: {  // the ops listed in another order that respects the dataflow (microbatches interleaved differently)
            std::map<std::string, std::size_t> producer;
            for (std::size_t k = 0; k < ops.size(); ++k)
                for (const auto& t : ops[k]["outputs"]) producer[t.get<std::string>()] = k;
            std::vector<std::vector<std::size_t>> users(ops.size());
            std::vector<int> waiting(ops.size(), 0);
            for (std::size_t k = 0; k < ops.size(); ++k) {
                std::set<std::size_t> from;
                for (const auto& t : ops[k]["inputs"])
                    if (producer.count(t.get<std::string>())) from.insert(producer[t.get<std::string>()]);
                for (auto f : from) users[f].push_back(k), ++waiting[k];
            }
            std::vector<std::size_t> ready;
            for (std::size_t k = 0; k < ops.size(); ++k) if (!waiting[k]) ready.push_back(k);
            json next = json::array();
            while (!ready.empty()) {
                auto pick = any(ready.size());
                auto k = ready[pick];
                ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(pick));
                next.push_back(ops[k]);
                for (auto u : users[k]) if (--waiting[u] == 0) ready.push_back(u);
            }
            if (next.size() != ops.size()) return m;  // a cycle: leave it to the reader
            ops = next;
            m.name = "ops listed in a random order of the dataflow";
            return m;
        }
    }
}

struct Outcome {
    std::string verdict;
    OracleStatus oracle = OracleStatus::Agree;
    std::string detail;
};

}  // namespace

class TestSoundnessFuzz : public QObject {
    Q_OBJECT
private slots:
    void verifierAgreesWithTheOracle() {
        const auto seed = envNumber("TV_FUZZ_SEED", 20261201);
        const auto cases = envNumber("TV_FUZZ_CASES", 30);
        const auto seconds = envNumber("TV_FUZZ_SECONDS", 0);
        const bool verbose = envNumber("TV_FUZZ_VERBOSE", 0) != 0;
        const auto childSeconds = envNumber("TV_FUZZ_CASE_SECONDS", 60);
        const auto start = std::chrono::steady_clock::now();
        std::mt19937_64 rng(seed);
        std::uint64_t bases = 0, mutants = 0, caught = 0, invalid = 0, harmless = 0, notDecided = 0;
        std::uint64_t rewrites = 0, rewritesProven = 0;
        std::vector<std::string> soundness, falseAlarms, brokenRewrites, unprovenRewrites, hangs, unreached;
        QTemporaryDir scratch;
        QVERIFY(scratch.isValid());
        std::uint64_t runs = 0;
        struct Report {
            Verdict verdict;
            std::string message;
            bool unreached = false;  // a stage counterexample the whole step never reached (INCONCLUSIVE)
        };
        // `trainverify verify` on the plan; nothing if it did not end within the bound.
        auto verifyInChild = [&](const json& doc) -> std::optional<Report> {
            const auto base = scratch.filePath(QString::number(++runs));
            std::ofstream(base.toStdString() + ".json") << doc.dump();
            QProcess p;
            p.start(QStringLiteral(TV_CLI), {"verify", base + ".json", "--jobs", "2", "--query-timeout", "10", "--stage-timeout", "15", "--timeout",
                                             QString::number(std::max<double>(1, childSeconds * 0.75)), "--json", base + ".report.json"});
            if (!p.waitForFinished(static_cast<int>(childSeconds) * 1000)) {
                p.kill();
                p.waitForFinished(-1);
                return std::nullopt;
            }
            std::ifstream in(base.toStdString() + ".report.json");
            json r = json::parse(in, nullptr, false);
            if (r.is_discarded() || !r.contains("verdict")) return Report{Verdict::Invalid, "no report: " + p.readAllStandardError().toStdString()};
            const auto v = r["verdict"].get<std::string>();
            Report rep{v == "equivalent" ? Verdict::Equivalent : v == "not_equivalent" ? Verdict::NotEquivalent
                        : v == "inconclusive" ? Verdict::Inconclusive : Verdict::Invalid, ""};
            if (r.contains("failure") && r["failure"].is_object()) rep.message = r["failure"].value("message", "");
            rep.unreached = r.value("counterexample_unreached", false);
            return rep;
        };
        auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
        enum class Kind { Base, Rewrite, Mutant };
        const char* dump = std::getenv("TV_FUZZ_DUMP");
        std::uint64_t judged = 0;
        auto judge = [&](const std::string& name, const json& doc, Kind kind) {
            if (dump && *dump) {  // every case as a plan file, to reproduce one with the command line
                json d = doc;
                d["description"] = name;
                std::ofstream(std::string(dump) + "/" + std::to_string(++judged) + ".json") << d.dump(1) << '\n';
            }
            auto loaded = readPlanJson(doc);
            if (!loaded.ok()) {
                if (kind == Kind::Mutant) ++invalid;
                else brokenRewrites.push_back(name + ": the reader refuses it: " + (loaded.problems.empty() ? std::string("?") : loaded.problems.front().toString()));
                return;
            }
            const double began = elapsed();
            // The verifier runs as the command line, in its own process, so that a run that does
            // not end (a solver call that ignores its timeout) is stopped and reported as such
            // instead of stopping the fuzzer: a hang is a finding, listed at the end.
            auto rep = verifyInChild(doc);
            if (!rep) {
                hangs.push_back(name);
                ++notDecided;
                return;
            }
            OracleOptions oo;
            oo.trials = 4;
            oo.seed = rng();
            auto o = runOracle(*loaded.plan, oo);
            const bool differ = o.status == OracleStatus::Differ;
            // Printed, not logged: Qt Test stops showing messages after 2,000 of them, and the
            // hour-long run judges far more cases (the summary would be lost).
            if (verbose) {
                std::printf("%s: %s; oracle %s (%.1f s)\n", name.c_str(), std::string(headline(rep->verdict)).c_str(),
                            differ ? "differs" : o.status == OracleStatus::Agree ? "agrees" : "undecided", elapsed() - began);
                std::fflush(stdout);
            }
            if (kind != Kind::Mutant && differ) {  // a generated plan or a correct rewrite of it: the oracle must agree
                brokenRewrites.push_back(name + ": the oracle finds " + o.summary());
                return;
            }
            if (kind == Kind::Rewrite) ++rewrites;
            if (kind == Kind::Rewrite && rep->verdict == Verdict::Equivalent) ++rewritesProven;
            if (kind == Kind::Rewrite && rep->verdict == Verdict::Inconclusive)
                unprovenRewrites.push_back(name + ": " + rep->message);
            // A stage counterexample the whole step did not reach: INCONCLUSIVE by design (the
            // staged proof's limit, soundness.md §1). Listed: if the fuzzer's oracle differs, the
            // verifier's own oracle missed a real difference.
            if (rep->unreached) unreached.push_back(name + (differ ? " (the fuzzer's oracle differs: the verifier's missed it)" : "") + ": " + rep->message);
            if (o.status == OracleStatus::TooLarge || o.status == OracleStatus::Unsupported || rep->verdict == Verdict::Inconclusive) {
                ++notDecided;
                return;
            }
            if (differ && rep->verdict == Verdict::Equivalent)
                soundness.push_back(name + ": EQUIVALENT, but the oracle finds " + o.summary());
            else if (!differ && rep->verdict == Verdict::NotEquivalent)
                falseAlarms.push_back(name + ": NOT EQUIVALENT (" + rep->message +
                                      "), but the oracle agrees on every trial");
            else if (differ) ++caught;
            else if (kind == Kind::Mutant) ++harmless;
            if (kind == Kind::Base && rep->verdict != Verdict::Equivalent && !differ)
                falseAlarms.push_back(name + ": the generated plan is " + std::string(headline(rep->verdict)));
        };
        int serial = 0;
        while (seconds ? elapsed() < static_cast<double>(seconds) : bases < cases) {
            auto cfg = drawConfig(rng);
            if (!cfg) continue;
            ++bases;
            const auto baseName = "case " + std::to_string(bases) + " (" + describe(*cfg) + ")";
            json doc;
            try {
                doc = gen::generatePlan(*cfg);
            } catch (const std::exception& e) {
                QFAIL(qPrintable(QString::fromStdString(baseName + ": the generator threw " + e.what())));
            }
            judge(baseName, doc, Kind::Base);
            for (int k = 0; k < 6; ++k) {
                auto m = mutate(doc, rng);
                if (m.name.empty()) continue;
                ++mutants;
                judge(baseName + ", mutant " + std::to_string(k) + ": " + m.name, m.doc, Kind::Mutant);
            }
            // Correct rewrites, one to three stacked on each other, then a mutant of the rewritten plan
            // (a bug in a plan written in an unusual way must be caught as well).
            for (int k = 0; k < 2; ++k) {
                Case r{"", doc};
                const auto depth = std::uniform_int_distribution<int>(1, 3)(rng);
                for (int d = 0; d < depth; ++d) {
                    auto next = rewrite(r.doc, rng, ++serial);
                    if (next.name.empty()) continue;
                    r.doc = std::move(next.doc);
                    r.name += (r.name.empty() ? "" : "; ") + next.name;
                }
                if (r.name.empty()) continue;
                const auto rewriteName = baseName + ", rewrite " + std::to_string(k) + ": " + r.name;
                judge(rewriteName, r.doc, Kind::Rewrite);
                auto m = mutate(r.doc, rng);
                if (m.name.empty()) continue;
                ++mutants;
                judge(rewriteName + ", then " + m.name, m.doc, Kind::Mutant);
            }
        }
        qInfo("%llu plans, %llu correct rewrites (%llu proven EQUIVALENT), %llu mutants: %llu caught by both, %llu harmless to both, "
              "%llu refused by the reader, %llu not decided (%.0f s)",
              static_cast<unsigned long long>(bases), static_cast<unsigned long long>(rewrites), static_cast<unsigned long long>(rewritesProven),
              static_cast<unsigned long long>(mutants), static_cast<unsigned long long>(caught), static_cast<unsigned long long>(harmless),
              static_cast<unsigned long long>(invalid), static_cast<unsigned long long>(notDecided), elapsed());
        for (const auto& s : soundness) qWarning("SOUNDNESS: %s", s.c_str());
        for (const auto& s : falseAlarms) qWarning("FALSE ALARM: %s", s.c_str());
        for (const auto& s : brokenRewrites) qWarning("BROKEN REWRITE: %s", s.c_str());
        for (const auto& s : hangs) qWarning("DID NOT END within %llu s (issue 17: bounded runs): %s", static_cast<unsigned long long>(childSeconds), s.c_str());
        for (const auto& s : unreached) qInfo("INCONCLUSIVE, a stage counterexample the oracle never reached: %s", s.c_str());
        for (const auto& s : unprovenRewrites) qInfo("not proven (a completeness gap, not a wrong verdict): %s", s.c_str());
        // (QVERIFY2 evaluates its message even when the check holds.)
        QVERIFY2(soundness.empty(), soundness.empty() ? "" : soundness.front().c_str());
        QVERIFY2(falseAlarms.empty(), falseAlarms.empty() ? "" : falseAlarms.front().c_str());
        QVERIFY2(brokenRewrites.empty(), brokenRewrites.empty() ? "" : brokenRewrites.front().c_str());
        // Every run has a budget (three quarters of the bound here): one that does not end is a defect.
        QVERIFY2(hangs.empty(), hangs.empty() ? "" : hangs.front().c_str());
        QVERIFY2(rewritesProven > 0, "no correct rewrite was proven EQUIVALENT");
        QVERIFY2(caught > 0, "no mutant was caught: the harness is not mutating anything that matters");
    }
};

QTEST_APPLESS_MAIN(TestSoundnessFuzz)
#include "tst_soundness_fuzz.moc"
