// Plan file format v1: every bundled example round-trips exactly, and every kind of bad input
// is reported with its JSON path and a reason, never a crash.
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "io/plan_json.hpp"

using namespace tv;
using json = nlohmann::json;

namespace {

std::string examplesDir() { return std::string(TV_SOURCE_DIR) + "/resources/examples"; }

json loadJson(const std::string& name) {
    std::ifstream in(examplesDir() + "/" + name);
    return json::parse(in);
}

using Mutation = std::function<void(json&)>;

}  // namespace

Q_DECLARE_METATYPE(Mutation)

class TestPlanIo : public QObject {
    Q_OBJECT
private slots:
    void roundTrip_data() {
        QTest::addColumn<QString>("file");
        for (const auto& e : std::filesystem::directory_iterator(examplesDir()))
            if (e.path().extension() == ".json")
                QTest::newRow(e.path().filename().string().c_str()) << QString::fromStdString(e.path().string());
    }
    void roundTrip() {
        QFETCH(QString, file);
        auto first = readPlanFile(file.toStdString());
        QVERIFY2(first.ok(), first.problems.empty() ? "?" : first.problems[0].toString().c_str());
        auto text1 = writePlanText(*first.plan);
        auto second = readPlanText(text1);
        QVERIFY2(second.ok(), second.problems.empty() ? "?" : second.problems[0].toString().c_str());
        auto text2 = writePlanText(*second.plan);
        QCOMPARE(QString::fromStdString(text2), QString::fromStdString(text1));
        // The model survives: same counts, same lineage, same names.
        const auto& a = *first.plan;
        const auto& b = *second.plan;
        QCOMPARE(a.logical.ops.size(), b.logical.ops.size());
        QCOMPARE(a.parallel.tensors.size(), b.parallel.tensors.size());
        QCOMPARE(a.lineage.size(), b.lineage.size());
        for (std::size_t r = 0; r < a.lineage.size(); ++r) {
            QCOMPARE(a.lineage[r].slices.size(), b.lineage[r].slices.size());
            for (std::size_t s = 0; s < a.lineage[r].slices.size(); ++s) {
                QVERIFY(a.lineage[r].slices[s].box == b.lineage[r].slices[s].box);
                QCOMPARE(a.lineage[r].slices[s].copies.size(), b.lineage[r].slices[s].copies.size());
            }
        }
        QCOMPARE(a.ranks.size(), b.ranks.size());
        QCOMPARE(a.microbatches, b.microbatches);
    }

    void problems_data() {
        QTest::addColumn<QString>("base");
        QTest::addColumn<Mutation>("mutate");
        QTest::addColumn<QString>("path");
        QTest::addColumn<QString>("message");
        auto row = [](const char* name, const char* base, Mutation m, const char* path, const char* msg) {
            QTest::newRow(name) << QString(base) << m << QString(path) << QString(msg);
        };
        const char* tp = "mlp-tp2.json";
        const char* dp = "mlp-dp2.json";
        row("wrong format", tp, [](json& j) { j["format"] = "onnx"; }, "/format", "expected \"trainverify-plan\"");
        row("future version", tp, [](json& j) { j["version"] = 3; }, "/version", "unsupported version 3");
        // Version 2: data-parallel replicas stored once.
        const char* rp = "mlp-dp2-tp2-replicas.json";
        row("replicas in version 1", rp, [](json& j) { j["version"] = 1; }, "/parallel/replicas", "needs \"version\": 2");
        row("replicas along tp", rp, [](json& j) { j["parallel"]["replicas"]["axis"] = "tp"; }, "/parallel/replicas/axis", "repeat along \"dp\"");
        row("replicas without dp", rp, [](json& j) { j["parallel"]["mesh"].erase("dp"); j["parallel"].erase("ranks"); }, "/parallel/replicas", "dp of 2 or more");
        row("record without a replica mode", rp, [](json& j) { j["lineage"][1].erase("replicas"); }, "/lineage/1", "every record says how it repeats");
        row("unknown replica mode", rp, [](json& j) { j["lineage"][1]["replicas"] = "twice"; }, "/lineage/1/replicas", "replicas must be");
        row("split along a missing dim", rp, [](json& j) { j["lineage"][0]["replicas"] = json{{"split_dim", 5}}; }, "/lineage/0/replicas/split_dim", "not a dim");
        row("split slices cover every replica", rp, [](json& j) { j["lineage"][1]["replicas"] = json{{"split_dim", 0}}; }, "/lineage/1/slices/1/box/0", "out of bounds for dim 0 of size 16");
        row("across replicas on a local op", rp, [](json& j) { j["parallel"]["ops"][0]["across_replicas"] = true; }, "/parallel/ops/0/across_replicas", "only collectives");
        row("stored tensor on replica 1", rp, [](json& j) { j["parallel"]["tensors"][0]["rank"] = 2; }, "/parallel/tensors/0/rank", "must be in [0, 1]");
        const char* z1 = "mlp-dp2-zero1.json";
        row("replica index on a non-chunk", z1, [](json& j) { j["parallel"]["ops"][0]["index_from_replica"] = true; }, "/parallel/ops/0/index_from_replica", "for chunk ops");
        row("replica index with other parts", z1, [](json& j) { j["parallel"]["ops"][23]["attrs"]["parts"] = 4; }, "/parallel/ops/23", "shape mismatch");
        row("replica index not listed as 0", z1, [](json& j) { j["parallel"]["ops"][23]["attrs"]["index"] = 1; }, "/parallel/ops/23/index_from_replica", "listed with index 0");
        row("replica index on a collective", z1, [](json& j) { j["parallel"]["ops"][43]["index_from_replica"] = true; }, "/parallel/ops/43/index_from_replica", "for chunk ops");
        // Version 2 with microbatches stored once as well.
        const char* ln = "mlp-dp2-pp2-nm4-lanes.json";
        row("microbatches flag not a boolean", ln, [](json& j) { j["parallel"]["replicas"]["microbatches"] = "yes"; }, "/parallel/replicas/microbatches", "is true");
        row("microbatches stored once, but only one", ln, [](json& j) { j["parallel"]["microbatches"] = 1; }, "/parallel/replicas/microbatches", "2 or more");
        row("a second microbatch listed", ln, [](json& j) { j["parallel"]["ops"][0]["microbatch"] = 1; }, "/parallel/ops/0/microbatch", "[0, 0]");
        row("accumulation on a gelu", ln, [](json& j) { j["parallel"]["ops"][1]["across_microbatches"] = true; }, "/parallel/ops/1/across_microbatches", "for an identity");
        row("accumulation on a collective", ln, [](json& j) { j["parallel"]["ops"][27]["across_microbatches"] = true; }, "/parallel/ops/27/across_microbatches", "accumulates gradients");
        row("accumulation inside a microbatch", ln, [](json& j) { j["parallel"]["ops"][26]["microbatch"] = 0; }, "/parallel/ops/26/across_microbatches", "no microbatch itself");
        row("reducer reads one microbatch", ln, [](json& j) { j["parallel"]["ops"][27]["inputs"][0] = j["parallel"]["ops"][25]["outputs"][0]; }, "/parallel/ops/27/inputs/0", "accumulate");
        row("accumulation without microbatches stored once", rp, [](json& j) { j["parallel"]["ops"][0]["across_microbatches"] = true; }, "/parallel/ops/0/across_microbatches", "needs microbatches stored once");
        row("replica mode without replicas", tp, [](json& j) { j["lineage"][0]["replicas"] = "copies"; }, "/lineage/0/replicas", "for plans stored with replicas");
        row("unknown top-level key", tp, [](json& j) { j["extra"] = 1; }, "/extra", "unknown top-level key");
        row("unknown op", tp, [](json& j) { j["logical"]["ops"][0]["op"] = "linearr"; }, "/logical/ops/0/op", "unknown op \"linearr\"");
        row("wrong arity", tp, [](json& j) { j["logical"]["ops"][1]["inputs"].push_back("x"); }, "/logical/ops/1", "relu takes 1 inputs");
        row("missing attribute", tp, [](json& j) { j["logical"]["ops"][9]["attrs"].erase("lr"); }, "/logical/ops/9", "missing attribute \"lr\"");
        row("unknown attribute", tp, [](json& j) { j["logical"]["ops"][9]["attrs"]["momentum"] = 1; }, "/logical/ops/9", "unknown attribute \"momentum\"");
        row("bad attribute value", tp, [](json& j) { j["logical"]["ops"][9]["attrs"]["lr"] = "fast"; }, "/logical/ops/9", "attribute lr must be a number");
        row("shape mismatch", tp, [](json& j) { j["logical"]["tensors"][5]["shape"] = json::array({8, 15}); }, "/logical/ops/0", "shape mismatch");
        row("dangling tensor", tp, [](json& j) { j["logical"]["ops"][0]["inputs"][0] = "y"; }, "/logical/ops/0/inputs/0", "dangling tensor id \"y\"");
        row("duplicate tensor", tp, [](json& j) { j["logical"]["tensors"].push_back(j["logical"]["tensors"][0]); }, "/logical/tensors/16/id", "duplicate tensor id \"x\"");
        row("produced twice", tp, [](json& j) { j["logical"]["ops"][1]["outputs"][0] = "h"; }, "/logical/ops/1/outputs/0", "already produced by op \"fc1\"");
        row("cycle", tp, [](json& j) { j["logical"]["ops"][1]["inputs"][0] = "a"; }, "/logical/ops", "cycle through ops \"act\"");
        row("collective in logical plan", tp, [](json& j) { j["logical"]["ops"][1]["op"] = "all_reduce"; }, "/logical/ops/1/op", "belongs in the parallel plan");
        row("tensor rank out of range", tp, [](json& j) { j["parallel"]["tensors"][0]["rank"] = 5; }, "/parallel/tensors/0/rank", "must be in [0, 1]");
        row("op rank out of range", tp, [](json& j) { j["parallel"]["ops"][0]["rank"] = 2; }, "/parallel/ops/0/rank", "must be in [0, 1]");
        row("op on the wrong rank", tp, [](json& j) { j["parallel"]["ops"][0]["rank"] = 1; }, "/parallel/ops/0/inputs/0", "runs on rank 1, but its input \"x@r0\" is on rank 0");
        row("group repeats a rank", tp, [](json& j) { j["parallel"]["ops"][6]["group"] = json::array({0, 0}); }, "/parallel/ops/6/group/1", "appears twice");
        row("group in the wrong order", tp, [](json& j) { j["parallel"]["ops"][6]["group"] = json::array({1, 0}); }, "/parallel/ops/6/inputs/0", "group position 0 is rank 1");
        row("group out of range", tp, [](json& j) { j["parallel"]["ops"][6]["group"] = json::array({0, 7}); }, "/parallel/ops/6/group/1", "rank out of range");
        row("collective arity", tp, [](json& j) { j["parallel"]["ops"][6]["outputs"].erase(1); }, "/parallel/ops/6", "takes 2 inputs and 2 outputs");
        row("microbatch out of range", tp, [](json& j) { j["parallel"]["tensors"][0]["microbatch"] = 3; }, "/parallel/tensors/0/microbatch", "must be in [0, 0]");
        row("lineage out of bounds", tp, [](json& j) { j["lineage"][2]["slices"][1]["box"][0] = json::array({8, 17}); }, "/lineage/2/slices/1/box/0", "out of bounds");
        row("lineage overlap", tp, [](json& j) { j["lineage"][2]["slices"][1]["box"][0] = json::array({4, 12}); }, "/lineage/2/slices/1", "overlaps slice 0");
        row("lineage hole", tp, [](json& j) { j["lineage"][2]["slices"].erase(1); }, "/lineage/2/slices", "leave holes");
        row("lineage shape", tp, [](json& j) { j["lineage"][0]["slices"][0]["copies"][0][0] = "logits@r0"; }, "/lineage/0/slices/0/copies/0/0", "has shape [8, 4], but the slice");
        row("lineage dangling", tp, [](json& j) { j["lineage"][0]["logical"] = "nope"; }, "/lineage/0/logical", "dangling logical tensor id");
        row("lineage bad coeff", dp, [](json& j) { j["lineage"][8]["slices"][0]["copies"][0][0]["coeff"] = "1/0"; }, "/lineage/8/slices/0/copies/0/0/coeff", "coeff must be");
        row("coefficient past 64 bits", dp, [](json& j) { j["lineage"][8]["slices"][0]["copies"][0][0]["coeff"] = std::uint64_t(18446744073709551615ull); }, "/lineage/8/slices/0/copies/0/0/coeff", "coeff must be");
        row("int lineage with coefficient", dp, [](json& j) { j["lineage"][1]["slices"][0]["copies"][0][0] = json{{"tensor", "labels@r0"}, {"coeff", "2"}}; }, "/lineage/1/slices/0/copies/0", "single tensors with coefficient 1");
        row("parallel tensor in two records", tp, [](json& j) { j["lineage"][0]["slices"][0]["copies"].push_back(json::array({"x@r0"})); }, "/lineage/0/slices/0/copies/2/0", "already appears");
        row("not an object", tp, [](json& j) { j = json::array(); }, "", "must hold a JSON object");
        row("shape not integers", tp, [](json& j) { j["logical"]["tensors"][0]["shape"] = json::array({8, "8"}); }, "/logical/tensors/0/shape/1", "positive integers");
        row("zero dim", tp, [](json& j) { j["logical"]["tensors"][0]["shape"] = json::array({0, 8}); }, "/logical/tensors/0/shape/0", "positive integers");
        row("reduce of the wrong type", tp, [](json& j) { j["parallel"]["ops"][6]["attrs"]["reduce"] = 1; }, "/parallel/ops/6", "attribute reduce must be");
        row("misspelled coeff", dp, [](json& j) { j["lineage"][8]["slices"][0]["copies"][0][0]["coef"] = "1/2"; }, "/lineage/8/slices/0/copies/0/0/coef", "unknown term key");
        row("misspelled slice key", tp, [](json& j) { j["lineage"][0]["slices"][0]["boxes"] = 1; }, "/lineage/0/slices/0/boxes", "unknown slice key");
        row("misspelled rank key", tp, [](json& j) { j["parallel"]["ranks"] = json::array({json{{"rank", 0}, {"tq", 0}}, json{{"rank", 1}}}); }, "/parallel/ranks/0/tq", "unknown rank key");
        row("integer attribute as string", tp, [](json& j) { j["logical"]["ops"][6]["attrs"]["transpose_a"] = "yes"; }, "/logical/ops/6", "must be true or false");
        row("dim out of range", tp, [](json& j) { j["logical"]["ops"][1]["op"] = "softmax"; j["logical"]["ops"][1]["attrs"] = json{{"dim", 2}}; }, "/logical/ops/1", "out of range for rank 2");
        row("empty op id", tp, [](json& j) { j["logical"]["ops"][0]["id"] = ""; }, "/logical/ops/0/id", "op id is empty");
        row("mesh needs explicit ranks", tp, [](json& j) { j["parallel"]["mesh"]["cp"] = 2; }, "/parallel", "list the \"ranks\"");
        row("unknown role", tp, [](json& j) { j["logical"]["tensors"][0]["role"] = "data"; }, "/logical/tensors/0/role", "unknown role");
    }
    void problems() {
        QFETCH(QString, base);
        QFETCH(Mutation, mutate);
        QFETCH(QString, path);
        QFETCH(QString, message);
        auto doc = loadJson(base.toStdString());
        mutate(doc);
        auto res = readPlanJson(doc);
        QVERIFY2(!res.ok(), "a broken plan was accepted");
        QVERIFY(!res.problems.empty());
        QVERIFY(res.problems.size() <= kMaxProblems);
        bool found = false;
        std::string all;
        for (const auto& p : res.problems) {
            all += p.toString() + "\n";
            if (p.path.rfind(path.toStdString(), 0) == 0 && p.message.find(message.toStdString()) != std::string::npos) found = true;
        }
        QVERIFY2(found, ("expected a problem at " + path.toStdString() + " saying \"" + message.toStdString() + "\", got:\n" + all).c_str());
    }

    void malformedJsonNamesLineAndColumn() {
        auto res = readPlanText("{\n  \"format\": \"trainverify-plan\",\n  \"version\": 1,,\n}");
        QVERIFY(!res.ok());
        QVERIFY2(res.problems[0].message.find("malformed JSON at line 3") != std::string::npos, res.problems[0].message.c_str());
    }

    void missingFile() {
        auto res = readPlanFile("/nonexistent/plan.json");
        QVERIFY(!res.ok());
        QVERIFY(res.problems[0].message.find("cannot open") != std::string::npos);
    }

    /// Replaces every value in an example, one at a time, with values of the wrong type: the
    /// reader must answer (accept or report), never throw or crash.
    void neverCrashesOnWrongTypes_data() {
        QTest::addColumn<QString>("file");
        for (const char* f : {"mlp-pp2.json", "mlp-tp2.json", "mlp-dp2.json"}) QTest::newRow(f) << QString(f);
    }
    void neverCrashesOnWrongTypes() {
        QFETCH(QString, file);
        auto doc = loadJson(file.toStdString());
        std::vector<json::json_pointer> pointers;
        std::function<void(const json&, const json::json_pointer&)> walk = [&](const json& j, const json::json_pointer& p) {
            pointers.push_back(p);
            if (j.is_object())
                for (auto it = j.begin(); it != j.end(); ++it) walk(it.value(), p / it.key());
            else if (j.is_array())
                for (std::size_t i = 0; i < j.size() && i < 3; ++i) walk(j[i], p / i);
        };
        walk(doc, json::json_pointer());
        const std::vector<json> replacements = {nullptr, "x", -1, 0, 1.5, json::array(), json::object(), json::array({-3, 2}), true};
        std::size_t rejected = 0, tried = 0;
        for (const auto& p : pointers) {
            if (p.empty()) continue;
            for (const auto& r : replacements) {
                auto copy = doc;
                copy[p] = r;
                try {
                    auto res = readPlanJson(copy);
                    rejected += res.ok() ? 0 : 1;
                    if (!res.ok()) QVERIFY(!res.problems.front().message.empty());
                } catch (const std::exception& e) {
                    QFAIL(("reader threw on " + p.to_string() + " = " + r.dump() + ": " + e.what()).c_str());
                }
                ++tried;
            }
        }
        QVERIFY(tried > 1000);
        QVERIFY(rejected > tried / 2);
    }
};

QTEST_APPLESS_MAIN(TestPlanIo)
#include "tst_plan_io.moc"
