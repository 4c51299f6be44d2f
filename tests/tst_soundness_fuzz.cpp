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
// TV_FUZZ_CASES sets how many base plans are drawn (default 40, each with up to six mutants);
// TV_FUZZ_SECONDS, when set, keeps drawing until that much time has passed (the long run:
// docs/soundness.md; set QTEST_FUNCTION_TIMEOUT above it, Qt Test stops a test function after five
// minutes). TV_FUZZ_SEED moves the whole sequence.
#include <QtTest>

#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>

#include "generate/generator.hpp"
#include "io/plan_json.hpp"
#include "verify/oracle.hpp"
#include "verify/verifier.hpp"

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
    static const char* models[] = {"mlp", "mlp", "gpt2", "llama3"};
    o.model = models[std::uniform_int_distribution<int>(0, 3)(rng)];
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
    o.pp = pick({1, 1, 2});
    o.microbatches = o.pp > 1 ? 2 : pick({1, 2});
    o.zero = o.dp > 1 ? pick({0, 0, 1, 2}) : 0;
    o.sequenceParallel = o.tp > 1 && o.model != "mlp" && pick({0, 1});
    o.cp = o.model != "mlp" && o.tp == 1 && pick({0, 0, 1}) ? 2 : 1;
    if (o.cp > 1 && pick({0, 1})) o.cpComm = "p2p";
    o.optimizer = pick({0, 1}) ? "adamw" : "sgd";
    if (pick({0, 0, 0, 1})) o.clipGrad = "1";
    o.format = 1;  // written out: a mutation can touch one rank, and the oracle needs no expansion
    if (!gen::validate(o).empty()) return std::nullopt;
    return o;
}

std::string describe(const gen::GenerateOptions& o) {
    std::ostringstream s;
    s << o.model << " dp" << o.dp << " tp" << o.tp << " pp" << o.pp << " nm" << o.microbatches;
    if (o.zero) s << " zero" << o.zero;
    if (o.sequenceParallel) s << " sp";
    if (o.cp > 1) s << " cp" << o.cp << (o.cpComm == "p2p" ? " ring" : "");
    s << " " << o.optimizer;
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
                return m;
            }
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
        const auto cases = envNumber("TV_FUZZ_CASES", 40);
        const auto seconds = envNumber("TV_FUZZ_SECONDS", 0);
        const auto start = std::chrono::steady_clock::now();
        std::mt19937_64 rng(seed);
        std::uint64_t bases = 0, mutants = 0, caught = 0, invalid = 0, harmless = 0, notDecided = 0;
        std::vector<std::string> soundness, falseAlarms;
        auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
        auto judge = [&](const std::string& name, const json& doc, bool base) {
            auto loaded = readPlanJson(doc);
            if (!loaded.ok()) {
                ++invalid;
                return;
            }
            VerifyOptions vo;
            vo.jobs = 2;
            vo.check.timeoutMs = 20000;
            vo.confirmUpToElements = 0;
            auto rep = verifyPlan(*loaded.plan, vo);
            OracleOptions oo;
            oo.trials = 4;
            oo.seed = rng();
            auto o = runOracle(*loaded.plan, oo);
            if (o.status == OracleStatus::TooLarge || o.status == OracleStatus::Unsupported || rep.verdict == Verdict::Inconclusive) {
                ++notDecided;
                return;
            }
            const bool differ = o.status == OracleStatus::Differ;
            if (differ && rep.verdict == Verdict::Equivalent)
                soundness.push_back(name + ": EQUIVALENT, but the oracle finds " + o.summary());
            else if (!differ && rep.verdict == Verdict::NotEquivalent)
                falseAlarms.push_back(name + ": NOT EQUIVALENT (" + (rep.failure ? rep.failure->message : std::string()) +
                                      "), but the oracle agrees on every trial");
            else if (differ) ++caught;
            else if (!base) ++harmless;
            if (base && rep.verdict != Verdict::Equivalent && !differ)
                falseAlarms.push_back(name + ": the generated plan is " + std::string(headline(rep.verdict)));
        };
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
            judge(baseName, doc, true);
            for (int k = 0; k < 6; ++k) {
                auto m = mutate(doc, rng);
                if (m.name.empty()) continue;
                ++mutants;
                judge(baseName + ", mutant " + std::to_string(k) + ": " + m.name, m.doc, false);
            }
        }
        qInfo("%llu plans, %llu mutants: %llu caught by both, %llu harmless to both, %llu refused by the reader, %llu not decided (%.0f s)",
              static_cast<unsigned long long>(bases), static_cast<unsigned long long>(mutants), static_cast<unsigned long long>(caught),
              static_cast<unsigned long long>(harmless), static_cast<unsigned long long>(invalid), static_cast<unsigned long long>(notDecided), elapsed());
        for (const auto& s : soundness) qWarning("SOUNDNESS: %s", s.c_str());
        for (const auto& s : falseAlarms) qWarning("FALSE ALARM: %s", s.c_str());
        // (QVERIFY2 evaluates its message even when the check holds.)
        QVERIFY2(soundness.empty(), soundness.empty() ? "" : soundness.front().c_str());
        QVERIFY2(falseAlarms.empty(), falseAlarms.empty() ? "" : falseAlarms.front().c_str());
        QVERIFY2(caught > 0, "no mutant was caught: the harness is not mutating anything that matters");
    }
};

QTEST_APPLESS_MAIN(TestSoundnessFuzz)
#include "tst_soundness_fuzz.moc"
