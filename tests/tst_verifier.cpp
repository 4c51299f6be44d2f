// Staged verification end to end: every bundled example gives the verdict and diagnosis its
// expect block states, with any number of worker threads; structural failures are diagnosed.
#include <QtTest>

#include <mutex>

#include <filesystem>
#include <fstream>
#include <set>

#include "helper_process_main.hpp"
#include "io/plan_json.hpp"
#include "verify/report_html.hpp"
#include "verify/verifier.hpp"
#include "verify/symmetry.hpp"

using namespace tv;
using json = nlohmann::json;

namespace {

std::string examplesDir() { return std::string(TV_SOURCE_DIR) + "/resources/examples"; }

std::unique_ptr<Plan> loadPlan(const json& doc) {
    // As the command line reads a plan to verify: one member of each group stays stored.
    auto res = readPlanJson(doc, ReadOptions{true});
    if (!res.ok()) throw std::runtime_error(res.problems[0].toString());
    return std::move(res.plan);
}

json loadJson(const std::string& name) {
    // A bare name is a bundled example; a path is relative to the source tree.
    std::ifstream in(name.find('/') == std::string::npos ? examplesDir() + "/" + name : std::string(TV_SOURCE_DIR) + "/" + name);
    return json::parse(in);
}

VerifyReport verify(const Plan& p, unsigned jobs, bool isolate = false, bool trace = false) {
    VerifyOptions o;
    o.jobs = jobs;
    o.isolate = isolate;
    o.check.keepTrace = trace;
    return verifyPlan(p, o);
}

/// A report as JSON without what depends on timing or on how the stages ran.
nlohmann::json comparable(const VerifyReport& r) {
    auto j = reportToJson(r);
    j.erase("timing");
    j.erase("jobs");
    j.erase("solver_processes");
    for (auto& s : j["stage_results"]) s.erase("seconds");
    return j;
}

}  // namespace

class TestVerifier : public QObject {
    Q_OBJECT
private slots:
    /// The bundled examples, and the soundness cases (tests/data/soundness: hand-made buggy plans
    /// that once verified EQUIVALENT and correct ones once refused, each with its verdict).
    void examples_data() {
        QTest::addColumn<QString>("file");
        std::vector<std::string> files, cases;
        for (const auto& e : std::filesystem::directory_iterator(examplesDir()))
            if (e.path().extension() == ".json") files.push_back(e.path().filename().string());
        for (const auto& e : std::filesystem::directory_iterator(std::string(TV_SOURCE_DIR) + "/tests/data/soundness"))
            if (e.path().extension() == ".json") cases.push_back("tests/data/soundness/" + e.path().filename().string());
        std::sort(files.begin(), files.end());
        std::sort(cases.begin(), cases.end());
        QVERIFY(files.size() >= 6);
        QVERIFY(cases.size() >= 30);
        files.insert(files.end(), cases.begin(), cases.end());
        for (const auto& f : files) QTest::newRow(f.c_str()) << QString::fromStdString(f);
    }
    void examples() {
        QFETCH(QString, file);
        auto doc = loadJson(file.toStdString());
        QVERIFY2(doc.contains("expect"), "every example states its expected verdict");
        QVERIFY2(doc.contains("description") && doc["description"].get<std::string>().size() > 40,
                 "every example explains itself");
        auto plan = loadPlan(doc);
        const auto& expect = doc["expect"];
        // Checked in solver processes, every result comes back as JSON (stageResultToJson): it
        // must be the same report as in-process, failures, values and traces included. (The
        // sanitizer run, TV_SKIP_HEAVY_TESTS, checks each example once, in solver processes as
        // the command line does; the optimised run also in-process, and compares.)
        auto two = verify(*plan, 2, true, true);
        auto one = qEnvironmentVariableIntValue("TV_SKIP_HEAVY_TESTS") ? two : verify(*plan, 1, false, true);
        QVERIFY(two.isolated);
        QCOMPARE(QString::fromStdString(comparable(two).dump(1)), QString::fromStdString(comparable(one).dump(1)));
        QCOMPARE(QString::fromStdString(std::string(toString(one.verdict))),
                 QString::fromStdString(expect["verdict"].get<std::string>()));
        // A stage counterexample the whole step never reaches is INCONCLUSIVE, and says so.
        QCOMPARE(one.counterexampleUnreached, expect.value("counterexample_unreached", false));
        // Results do not depend on the number of threads.
        QVERIFY(one.verdict == two.verdict);
        QCOMPARE(one.passed, two.passed);
        QCOMPARE(one.failed, two.failed);
        QCOMPARE(one.failure.has_value(), two.failure.has_value());
        if (one.failure) {
            QCOMPARE(one.failure->toJson().dump(), two.failure->toJson().dump());
        }
        if (expect.contains("failure")) {
            QVERIFY(one.failure.has_value());
            const auto& f = expect["failure"];
            QCOMPARE(QString::fromStdString(std::string(toString(one.failure->kind))), QString::fromStdString(f["kind"].get<std::string>()));
            // A known defect (a location still wrong) is an expected failure: it reports when fixed.
            const std::string defect = expect.value("known_defect", std::string());
            if (f.contains("parallel_op")) {
                if (!defect.empty()) QEXPECT_FAIL("", defect.c_str(), Continue);
                QCOMPARE(QString::fromStdString(one.failure->parallelOp), QString::fromStdString(f["parallel_op"].get<std::string>()));
            }
            if (f.contains("rank")) {
                if (!defect.empty()) QEXPECT_FAIL("", defect.c_str(), Continue);
                QCOMPARE(one.failure->rank, f["rank"].get<int>());
            }
            // A counterexample carries values that show the divergence.
            if (one.failure->kind == FailureKind::Counterexample || one.failure->kind == FailureKind::LaneMisalignment) {
                QVERIFY(!one.failure->expected.empty());
                QVERIFY(!one.failure->actual.empty());
                QVERIFY(one.failure->expected != one.failure->actual);
                QVERIFY(!one.failure->parallel.empty());
                auto text = one.failure->toText();
                for (const char* section : {"Logical:", "Parallel:", "Expected vs Actual:"})
                    QVERIFY2(text.find(section) != std::string::npos, section);
            }
        } else {
            QVERIFY2(!one.failure.has_value(), one.failure ? one.failure->toText().c_str() : "");
            QCOMPARE(one.passed, static_cast<std::uint32_t>(one.results.size()));
        }
    }

    void stagesAreCutFromLineage() {
        auto plan = loadPlan(loadJson("mlp-tp2.json"));
        auto sp = cutStages(*plan);
        QVERIFY(sp.structural.empty());
        // 5 initial records (x, labels, w1, w2, dloss); every other record has a stage.
        QCOMPARE(sp.initialRecords.size(), std::size_t(5));
        QCOMPARE(sp.stages.size(), plan->lineage.size() - 5);
        std::size_t glue = 0;
        for (const auto& s : sp.stages) {
            glue += s.glue() ? 1 : 0;
            for (auto in : s.inputs) {
                bool initial = std::find(sp.initialRecords.begin(), sp.initialRecords.end(), in) != sp.initialRecords.end();
                QVERIFY2(initial || sp.stageOfRecord[in] < s.id, "an input lineage is proven after the stage that needs it");
            }
        }
        QCOMPARE(glue, std::size_t(1));  // the all-reduce between partial and replicated logits
    }

    void shapeReductionShrinksStages() {
        auto plan = loadPlan(loadJson("mlp-dp2.json"));
        auto r = verify(*plan, 1);
        std::uint64_t full = 0, reduced = 0;
        for (const auto& s : r.results) {
            full += s.fullElements;
            reduced += s.reducedElements;
        }
        QVERIFY(reduced > 0);
        QVERIFY(reduced * 10 < full);
        VerifyOptions o;
        o.check.reduceShapes = false;
        auto unreduced = verifyPlan(*plan, o);
        QVERIFY(unreduced.verdict == Verdict::Equivalent);
    }

    // The search for the smallest shapes reaches the minimum (not merely some shapes) on stages
    // of products of dims, where Z3's optimizer was slow: a row-split [R, C] -> [R*C] reshape on
    // tp ranks. Each dim stays >= 2 and each shard keeps its ratio, so the logical rows are
    // 2·tp, the columns 2; the stage holds (2·tp·2) · 2 logical and (2·2) · 2 · tp parallel
    // elements at the minimum.
    void shapeReductionReachesTheSmallestShapes_data() {
        QTest::addColumn<int>("tp");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("cols");
        QTest::newRow("tp2, 64 x 96") << 2 << 64 << 96;
        QTest::newRow("tp4, 4096 x 1536") << 4 << 4096 << 1536;
        QTest::newRow("tp8, 65536 x 7168") << 8 << 65536 << 7168;
    }
    void shapeReductionReachesTheSmallestShapes() {
        QFETCH(int, tp);
        QFETCH(int, rows);
        QFETCH(int, cols);
        const std::int64_t n = static_cast<std::int64_t>(rows) * cols, part = n / tp, prow = rows / tp;
        json doc = {{"format", "trainverify-plan"}, {"version", 1}, {"name", "reshape"},
                    {"logical", {{"tensors", {{{"id", "x"}, {"shape", {rows, cols}}, {"role", "input"}}, {{"id", "y"}, {"shape", {n}}}}},
                                 {"ops", {{{"id", "flat"}, {"op", "reshape"}, {"inputs", {"x"}}, {"outputs", {"y"}}}}}}},
                    {"parallel", {{"mesh", {{"tp", tp}}}, {"tensors", json::array()}, {"ops", json::array()}}},
                    {"lineage", {{{"logical", "x"}, {"slices", json::array()}}, {{"logical", "y"}, {"slices", json::array()}}}}};
        for (int r = 0; r < tp; ++r) {
            const std::string x = "x@r" + std::to_string(r), y = "y@r" + std::to_string(r);
            doc["parallel"]["tensors"].push_back({{"id", x}, {"shape", {prow, cols}}, {"role", "input"}, {"rank", r}});
            doc["parallel"]["tensors"].push_back({{"id", y}, {"shape", {part}}, {"rank", r}});
            doc["parallel"]["ops"].push_back({{"id", "flat@r" + std::to_string(r)}, {"op", "reshape"}, {"rank", r}, {"inputs", {x}}, {"outputs", {y}}});
            doc["lineage"][0]["slices"].push_back({{"box", {{prow * r, prow * (r + 1)}, {0, cols}}}, {"copies", {{x}}}});
            doc["lineage"][1]["slices"].push_back({{"box", {{part * r, part * (r + 1)}}}, {"copies", {{y}}}});
        }
        auto plan = loadPlan(doc);
        QVERIFY(plan);
        auto r = verify(*plan, 1);
        QVERIFY(r.verdict == Verdict::Equivalent);
        QCOMPARE(r.results.size(), std::size_t(1));
        const std::uint64_t smallest = static_cast<std::uint64_t>(2 * tp * 2) * 2 + static_cast<std::uint64_t>(2 * 2) * 2 * tp;
        QCOMPARE(r.results[0].reducedElements, smallest);
    }

    void accumulationAcrossMicrobatchesIsNotMisalignment() {
        auto doc = loadJson("mlp-pp2.json");
        // Tag the accumulation with the later microbatch (it reads both), and break the weight
        // update: the diagnosis must stay a counterexample at the update, not a misalignment.
        for (auto& op : doc["parallel"]["ops"]) {
            if (op["id"] == "accumulate_dw1@r0") op["microbatch"] = 1;
            if (op["id"] == "sgd_w1@r0") op["attrs"]["lr"] = "1/5";
        }
        auto plan = loadPlan(doc);
        auto r = verify(*plan, 2);
        QVERIFY(r.verdict == Verdict::NotEquivalent);
        QVERIFY(r.failure->kind == FailureKind::Counterexample);
        QCOMPARE(QString::fromStdString(r.failure->parallelOp), QString("sgd_w1@r0"));
    }

    void missingProducerIsDataflowBroken() {
        auto doc = loadJson("mlp-tp2.json");
        // Drop the relu on rank 1: its output "a@r1" is then produced by nothing.
        auto& ops = doc["parallel"]["ops"];
        for (std::size_t i = 0; i < ops.size(); ++i)
            if (ops[i]["id"] == "act@r1") {
                ops.erase(i);
                break;
            }
        auto plan = loadPlan(doc);
        auto r = verify(*plan, 2);
        QVERIFY(r.verdict == Verdict::NotEquivalent);
        QVERIFY(r.failure.has_value());
        QVERIFY(r.failure->kind == FailureKind::DataflowBroken);
        QCOMPARE(QString::fromStdString(r.failure->parallelTensor), QString("a@r1"));
        QCOMPARE(r.failure->rank, 1);
    }

    // An index tensor copied by identity (nnScaler's multiref of token ids) is checked like any
    // other; the symbolic evaluation passes its concrete values through.
    void identityOfIndexTensor() {
        auto doc = loadJson("mlp-tp2.json");
        doc["parallel"]["tensors"].push_back({{"id", "labels_copy@r1"}, {"shape", {8}}, {"dtype", "int"}, {"rank", 1}});
        doc["parallel"]["ops"].push_back({{"id", "copy_labels@r1"}, {"op", "identity"}, {"rank", 1}, {"inputs", {"labels@r1"}}, {"outputs", {"labels_copy@r1"}}});
        for (auto& op : doc["parallel"]["ops"])
            for (auto& in : op["inputs"])
                if (in == "labels@r1" && op["id"] != "copy_labels@r1") in = "labels_copy@r1";
        auto plan = loadPlan(doc);
        auto r = verify(*plan, 2);
        QVERIFY2(r.verdict == Verdict::Equivalent, r.failure ? r.failure->message.c_str() : "");
    }

    void unreadLogicalInputIsDataflowBroken() {
        auto doc = loadJson("mlp-tp2.json");
        // fc2 on rank 0 reads the hidden activation but the plan forgot the weight: replace the
        // weight operand by a fresh source tensor without lineage.
        doc["parallel"]["tensors"].push_back({{"id", "stray@r0"}, {"shape", {4, 8}}, {"role", "weight"}, {"rank", 0}});
        for (auto& op : doc["parallel"]["ops"])
            if (op["id"] == "fc2@r0") op["inputs"][1] = "stray@r0";
        auto plan = loadPlan(doc);
        auto r = verify(*plan, 1);
        QVERIFY(r.verdict == Verdict::NotEquivalent);
        QVERIFY(r.failure->kind == FailureKind::DataflowBroken);
        QCOMPARE(QString::fromStdString(r.failure->parallelOp), QString("fc2@r0"));
        QCOMPARE(QString::fromStdString(r.failure->parallelTensor), QString("stray@r0"));
    }

    void wrongCoefficientIsACounterexample() {
        auto doc = loadJson("mlp-dp2.json");
        // Claim the loss is the sum of the per-rank means (it is their average).
        for (auto& rec : doc["lineage"])
            if (rec["logical"] == "loss")
                for (auto& t : rec["slices"][0]["copies"][0]) t["coeff"] = "1";
        auto plan = loadPlan(doc);
        auto r = verify(*plan, 2);
        QVERIFY(r.verdict == Verdict::NotEquivalent);
        QVERIFY(r.failure->kind == FailureKind::Counterexample);
        QCOMPARE(QString::fromStdString(r.failure->tensor), QString("loss"));
    }

    // Tier 0 simplifies every element of a stage in one call and closes those whose difference
    // is 0: each element must still be judged on its own. Rank 0 computes y = x + x, rank 1 the
    // same but for one element, x + x + x: no element is the logical term (2x) itself, so all
    // twelve go into the one call, and only the wrong one may stay open, wherever it is.
    void everyElementIsJudgedOnItsOwn_data() {
        QTest::addColumn<int>("wrong");  // the element rank 1 gets wrong; -1 none
        QTest::addColumn<bool>("together");  // tier 0 on (its size gate at 0), or the default (off at this size)
        for (bool together : {true, false}) {
            const std::string how = together ? ", simplified together" : ", one by one";
            QTest::newRow(("none" + how).c_str()) << -1 << together;
            for (int k = 0; k < 6; ++k) QTest::newRow(("element " + std::to_string(k) + how).c_str()) << k << together;
        }
    }
    void everyElementIsJudgedOnItsOwn() {
        QFETCH(int, wrong);
        QFETCH(bool, together);
        json doc = json::parse(R"({
          "format": "trainverify-plan", "version": 1, "name": "one-element-wrong",
          "logical": {
            "tensors": [{"id": "x", "role": "input", "shape": [6]}, {"id": "y", "shape": [6]}],
            "ops": [{"id": "double", "op": "mul_scalar", "inputs": ["x"], "outputs": ["y"], "attrs": {"value": "2"}}]},
          "parallel": {
            "mesh": {"tp": 2},
            "tensors": [{"id": "x@r0", "rank": 0, "role": "input", "shape": [6]}, {"id": "y@r0", "rank": 0, "shape": [6]},
                        {"id": "x@r1", "rank": 1, "role": "input", "shape": [6]}, {"id": "t@r1", "rank": 1, "shape": [6]},
                        {"id": "w@r1", "rank": 1, "shape": [6]}, {"id": "y@r1", "rank": 1, "shape": [6]}],
            "ops": [{"id": "twice@r0", "op": "add", "rank": 0, "inputs": ["x@r0", "x@r0"], "outputs": ["y@r0"]},
                    {"id": "twice@r1", "op": "add", "rank": 1, "inputs": ["x@r1", "x@r1"], "outputs": ["t@r1"]},
                    {"id": "thrice@r1", "op": "add", "rank": 1, "inputs": ["t@r1", "x@r1"], "outputs": ["w@r1"]}]},
          "lineage": [
            {"logical": "x", "slices": [{"box": [[0, 6]], "copies": [["x@r0"], ["x@r1"]]}]},
            {"logical": "y", "slices": [{"box": [[0, 6]], "copies": [["y@r0"], ["y@r1"]]}]}]
        })");
        auto& P = doc["parallel"];
        if (wrong < 0) {
            P["ops"].erase(2);      // nothing computes 3x
            P["tensors"].erase(4);  // w@r1
            P["ops"].push_back({{"id", "pick@r1"}, {"op", "identity"}, {"rank", 1}, {"inputs", {"t@r1"}}, {"outputs", {"y@r1"}}});
        } else {
            // y@r1 = t[0:k] ++ w[k:k+1] ++ t[k+1:6], the empty pieces left out.
            json parts = json::array();
            auto piece = [&](const std::string& from, int a, int b) {
                if (a >= b) return;
                const std::string id = from + std::to_string(a) + "@r1";
                P["tensors"].push_back({{"id", id}, {"rank", 1}, {"shape", {b - a}}});
                P["ops"].push_back({{"id", "cut." + id}, {"op", "slice"}, {"rank", 1}, {"inputs", {from + "@r1"}}, {"outputs", {id}},
                                    {"attrs", {{"dim", 0}, {"start", a}, {"end", b}}}});
                parts.push_back(id);
            };
            piece("t", 0, wrong);
            piece("w", wrong, wrong + 1);
            piece("t", wrong + 1, 6);
            P["ops"].push_back({{"id", "join@r1"}, {"op", "concat"}, {"rank", 1}, {"inputs", parts}, {"outputs", {"y@r1"}}, {"attrs", {{"dim", 0}}}});
        }
        auto plan = loadPlan(doc);
        VerifyOptions o;
        o.jobs = 1;
        o.check.reduceShapes = false;  // every element at its own place
        if (together) o.check.simplifyTogetherMinNodes = 0;
        const auto r = verifyPlan(*plan, o);
        if (wrong < 0) {
            QVERIFY2(r.verdict == Verdict::Equivalent, r.failure ? r.failure->message.c_str() : "");
            return;
        }
        QVERIFY(r.verdict == Verdict::NotEquivalent);
        QVERIFY(r.failure && r.failure->kind == FailureKind::Counterexample);
        QCOMPARE(r.failure->rank, 1);
        QCOMPARE(QString::fromStdString(r.failure->element), QStringLiteral("[%1]").arg(wrong));
    }

    void reportJsonHasTheDocumentedShape() {
        auto plan = loadPlan(loadJson("mlp-tp2-missing-allreduce.json"));
        auto j = reportToJson(verify(*plan, 2));
        QCOMPARE(QString::fromStdString(j["verdict"].get<std::string>()), QString("not_equivalent"));
        for (const char* k : {"total", "passed", "failed", "inconclusive"}) QVERIFY2(j["stages"].contains(k), k);
        for (const char* k : {"load", "cut", "check", "reduce", "encode", "solve", "total"}) QVERIFY2(j["timing"].contains(k), k);
        for (const char* k : {"kind", "stage", "logical_op", "parallel_op", "rank", "coordinates", "microbatch", "tensor",
                              "slice", "expected", "actual", "message"})
            QVERIFY2(j["failure"].contains(k), k);
        QCOMPARE(j["failure"]["coordinates"]["tp"].get<int>(), 0);
    }

    /// A failing op with a source line in the plan (a captured graph's framework line) is named
    /// with it in the text, JSON and HTML reports, in process and from solver processes; the
    /// logical op's own line too.
    void failureNamesTheSourceLine_data() {
        QTest::addColumn<bool>("isolate");
        QTest::newRow("in process") << false;
        QTest::newRow("solver processes") << true;
    }
    void failureNamesTheSourceLine() {
        QFETCH(bool, isolate);
        auto doc = loadJson("mlp-tp2-missing-allreduce.json");
        auto plain = verify(*loadPlan(doc), 2, isolate);
        QVERIFY(plain.failure && !plain.failure->source && !plain.failure->logicalSource);
        const auto failing = plain.failure->parallelOp, logicalOp = plain.failure->logicalOp;
        QVERIFY(!failing.empty() && !logicalOp.empty());
        for (auto& o : doc["parallel"]["ops"])
            if (o["id"] == failing) o["source"] = {{"file", "megatron/core/tensor_parallel/layers.py"}, {"line", 973}, {"function", "forward"}, {"code", "output_ = output_parallel"}};
        for (auto& o : doc["logical"]["ops"])
            if (o["id"] == logicalOp) o["source"] = {{"file", "model.py"}, {"line", 12}};
        auto r = verify(*loadPlan(doc), 2, isolate);
        QVERIFY(r.verdict == Verdict::NotEquivalent);
        QCOMPARE(r.failure->parallelOp, failing);
        QVERIFY(r.failure->source && r.failure->source->line == 973);
        QVERIFY(r.failure->logicalSource && r.failure->logicalSource->file == "model.py");
        const auto text = r.failure->toText();
        QVERIFY2(text.find("source megatron/core/tensor_parallel/layers.py:973 in forward: output_ = output_parallel") != std::string::npos, text.c_str());
        QVERIFY2(text.find("logical source model.py:12") != std::string::npos, text.c_str());
        const auto j = r.failure->toJson();
        QCOMPARE(j["source"]["line"].get<int>(), 973);
        const auto back = Failure::fromJson(j);
        QVERIFY(back.source == r.failure->source && back.logicalSource == r.failure->logicalSource);
        const auto html = reportToHtml(r);
        QVERIFY(html.find("layers.py:973 in forward") != std::string::npos);
    }

    void isomorphicStagesAreProvenOnce() {
        auto plan = loadPlan(loadJson("mlp4-dp2-tp2-pp2.json"));
        VerifyOptions reuse, fresh;
        fresh.reuseIsomorphic = false;
        auto a = verifyPlan(*plan, reuse);
        auto b = verifyPlan(*plan, fresh);
        QVERIFY(a.verdict == Verdict::Equivalent);
        QVERIFY(b.verdict == Verdict::Equivalent);
        QCOMPARE(b.uniqueStages, static_cast<std::uint32_t>(b.results.size()));
        QVERIFY2(a.uniqueStages * 2 < a.results.size(), "the four blocks should share most stage structures");
        // Every reused result points at an earlier, proven stage with the same structure.
        for (const auto& r : a.results)
            if (r.sameAs != kNone) {
                QVERIFY(r.sameAs < r.stage);
                QVERIFY(a.results[r.sameAs].status == StageStatus::Equivalent);
                QCOMPARE(structuralKey(*plan, a.stagePlan.stages[r.sameAs]), structuralKey(*plan, a.stagePlan.stages[r.stage]));
            }
    }

    void bugInOneOfManyIdenticalLayersIsFound() {
        auto doc = loadJson("mlp4-dp2-tp2-pp2.json");
        // Layer 2's forward TP all-reduce of microbatch 1 on dp replica 1 averages instead of summing.
        bool changed = false;
        for (auto& op : doc["parallel"]["ops"])
            if (op["id"] == "fc2_allreduce_2.mb1.dp1.pp1") {
                op["attrs"] = {{"reduce", "mean"}};
                changed = true;
            }
        QVERIFY(changed);
        auto plan = loadPlan(doc);
        auto r = verify(*plan, 2);
        QVERIFY(r.verdict == Verdict::NotEquivalent);
        QCOMPARE(QString::fromStdString(r.failure->parallelOp), QString("fc2_allreduce_2.mb1.dp1.pp1"));
        QCOMPARE(r.failure->microbatch, 1);
        QCOMPARE(r.failure->coordinates["dp"].get<int>(), 1);
    }

    // A stage's key names its attributes by content: two plans that differ only in a constant
    // (numbered alike) have different keys where the constant is used and equal keys elsewhere.
    void structuralKeysCompareAttributesByContent() {
        auto a = loadJson("mlp-dp2.json");
        auto b = a;
        int changed = 0;
        for (const char* g : {"logical", "parallel"})
            for (auto& op : b[g]["ops"])
                if (op["op"] == "sgd") {
                    op["attrs"]["lr"] = "1/5";
                    ++changed;
                }
        QVERIFY(changed >= 4);
        auto pa = loadPlan(a), pb = loadPlan(b);
        const auto sa = cutStages(*pa), sb = cutStages(*pb);
        QCOMPARE(sa.stages.size(), sb.stages.size());
        int differ = 0, same = 0;
        for (std::size_t i = 0; i < sa.stages.size(); ++i) {
            bool usesSgd = false;
            for (auto op : sa.stages[i].parallelOps) {
                usesSgd = usesSgd || pa->opName(pa->parallel, op).rfind("sgd", 0) == 0;
                QCOMPARE(pa->parallel.ops[op].attrs, pb->parallel.ops[op].attrs);  // numbered alike
            }
            const bool equal = structuralKey(*pa, sa.stages[i]) == structuralKey(*pb, sb.stages[i]);
            QCOMPARE(equal, !usesSgd);
            (equal ? same : differ)++;
        }
        QVERIFY(differ >= 2);
        QVERIFY(same >= 2);
    }

    // Every stage the pool checks is announced before its result; the others (isomorphic to a
    // proven one) are not started.
    void stagesAreStartedBeforeTheyFinish() {
        auto plan = loadPlan(loadJson("mlp4-dp2-tp2-pp2.json"));
        VerifyOptions o;
        o.jobs = 2;
        std::mutex m;
        std::vector<int> started, finished;
        bool finishedUnstarted = false;
        o.onStageStart = [&](std::uint32_t s) {
            std::lock_guard lock(m);
            started.push_back(static_cast<int>(s));
        };
        o.onStageDone = [&](const StageResult& r) {
            std::lock_guard lock(m);
            if (r.sameAs == kNone && std::count(started.begin(), started.end(), static_cast<int>(r.stage)) != 1) finishedUnstarted = true;
            finished.push_back(static_cast<int>(r.stage));
        };
        auto r = verifyPlan(*plan, o);
        QVERIFY(r.verdict == Verdict::Equivalent);
        QVERIFY(!finishedUnstarted);
        QCOMPARE(finished.size(), r.results.size());
        QCOMPARE(started.size(), static_cast<std::size_t>(r.uniqueStages));
        QVERIFY(started.size() < finished.size());
    }

    // A proof cache kept across runs: a second run of the same plan checks nothing; after an edit
    // only the stages whose obligation changed are checked again, and the verdict and diagnosis
    // are those of a run without the cache. Failures are never cached.
    void proofCacheReprovesOnlyChangedStages_data() {
        QTest::addColumn<QString>("first");
        QTest::addColumn<QString>("second");
        QTest::addColumn<QString>("edit");  // "lr": change every sgd's learning rate in the second plan
        QTest::newRow("unchanged") << "mlp-dp2.json" << "mlp-dp2.json" << "";
        QTest::newRow("lr changed") << "mlp-dp2.json" << "mlp-dp2.json" << "lr";
        QTest::newRow("stored, unchanged") << "llama3-l4-dp2-tp2-pp2-nm2-repeats.json" << "llama3-l4-dp2-tp2-pp2-nm2-repeats.json" << "";
        QTest::newRow("stored lanes, unchanged") << "mlp-dp2-pp2-nm4-lanes.json" << "mlp-dp2-pp2-nm4-lanes.json" << "";
        QTest::newRow("all-reduce removed") << "mlp-tp2.json" << "mlp-tp2-missing-allreduce.json" << "";
        QTest::newRow("average removed") << "mlp-dp2.json" << "mlp-dp2-missing-average.json" << "";
    }
    void proofCacheReprovesOnlyChangedStages() {
        QFETCH(QString, first);
        QFETCH(QString, second);
        QFETCH(QString, edit);
        auto a = loadPlan(loadJson(first.toStdString()));
        auto doc = loadJson(second.toStdString());
        if (edit == "lr")
            for (const char* g : {"logical", "parallel"})
                for (auto& op : doc[g]["ops"])
                    if (op["op"] == "sgd") op["attrs"]["lr"] = "1/7";
        auto b = loadPlan(doc);
        ProofCache cache;
        VerifyOptions o;
        o.jobs = 2;
        o.proofs = &cache;
        auto r1 = verifyPlan(*a, o);
        QVERIFY(r1.verdict == Verdict::Equivalent);
        QCOMPARE(r1.cachedStages, 0u);
        QVERIFY(cache.size() > 0);
        QVERIFY(cache.size() <= r1.results.size());

        std::atomic<int> started{0};
        o.onStageStart = [&](std::uint32_t) { ++started; };
        auto r2 = verifyPlan(*b, o);
        auto plain = verify(*b, 2);
        QCOMPARE(toString(r2.verdict), toString(plain.verdict));
        QCOMPARE(r2.results.size(), plain.results.size());
        QCOMPARE(bool(r2.failure), bool(plain.failure));
        if (plain.failure) {
            QCOMPARE(r2.failure->parallelOp, plain.failure->parallelOp);
            QCOMPARE(r2.failure->rank, plain.failure->rank);
            QCOMPARE(toString(r2.failure->kind), toString(plain.failure->kind));
        }
        // Exactly the stages whose proof key is not among the first plan's are checked.
        const auto stagesA = cutStages(*a);
        std::set<std::string> keysA;
        auto keyOf = [](const Plan& p, const Stage& s) {
            return proofKey(p, s, CheckOptions{}, !p.replication.active() || provenByReplicaZero(p, s));
        };
        for (const auto& s : stagesA.stages) keysA.insert(keyOf(*a, s));
        std::uint32_t changed = 0;
        for (const auto& s : r2.stagePlan.stages) changed += !keysA.count(keyOf(*b, s));
        std::uint32_t cached = 0;
        for (const auto& res : r2.results) {
            const bool isNew = !keysA.count(keyOf(*b, r2.stagePlan.stages[res.stage]));
            QCOMPARE(res.cached, !isNew && res.status == StageStatus::Equivalent);
            cached += res.cached;
        }
        QCOMPARE(r2.cachedStages, cached);
        QVERIFY(started.load() <= static_cast<int>(changed));
        if (edit.isEmpty() && first == second) {
            QCOMPARE(r2.cachedStages, static_cast<std::uint32_t>(r2.results.size()));
            QCOMPARE(started.load(), 0);
        } else {
            QVERIFY(changed > 0);
            QVERIFY(r2.cachedStages > 0);
        }
        QCOMPARE(reportToJson(r2)["stages"]["cached"].get<std::uint32_t>(), r2.cachedStages);
        // A failing stage is checked again on every run, and keeps naming its own op.
        if (plain.failure) {
            auto r3 = verifyPlan(*b, o);
            QCOMPARE(r3.failure->parallelOp, plain.failure->parallelOp);
            QVERIFY(!r3.results[r3.failure->stage].cached);
        }
    }

    // With keepTrace, a counterexample carries its stage replayed op by op: the parallel steps are
    // the stage's parallel ops in topological order, the divergence is the op the diagnosis names,
    // and the failing lineage check there has the diagnosis's expected and actual values.
    void traceFollowsTopologicalOrderAndMarksDivergence_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("misaligned");
        QTest::newRow("tp all-reduce missing") << "mlp-tp2-missing-allreduce.json" << false;
        QTest::newRow("dp average missing") << "mlp-dp2-missing-average.json" << false;
        QTest::newRow("pp sends crossed") << "mlp-pp2-crossed-sendrecv.json" << true;
    }
    void traceFollowsTopologicalOrderAndMarksDivergence() {
        QFETCH(QString, file);
        QFETCH(bool, misaligned);
        auto plan = loadPlan(loadJson(file.toStdString()));
        VerifyOptions o;
        o.jobs = 2;
        QVERIFY(!verifyPlan(*plan, o).failure->trace);  // only when asked for
        o.check.keepTrace = true;
        auto r = verifyPlan(*plan, o);
        QVERIFY(r.failure);
        QVERIFY(r.failure->trace);
        const auto& f = *r.failure;
        const auto& t = *f.trace;
        const auto& stage = r.stagePlan.stages[f.stage];
        QCOMPARE(t.parallel.size(), stage.parallelOps.size());
        for (std::size_t i = 0; i < t.parallel.size(); ++i) {
            QCOMPARE(t.parallel[i].op, plan->opName(plan->parallel, stage.parallelOps[i]));
            const auto& op = plan->parallel.ops[stage.parallelOps[i]];
            // One rank story: the divergence is told from the diagnosis's rank, any other step
            // from its home rank; a collective lists its group.
            QCOMPARE(t.parallel[i].rank, static_cast<int>(i) == t.divergence ? f.rank : plan->parallel.homeRank(stage.parallelOps[i]));
            QCOMPARE(t.parallel[i].group, op.group == kNone ? std::vector<std::int32_t>{} : plan->groups[op.group]);
            QVERIFY(!t.parallel[i].outputs.empty());
            if (i > 0) QVERIFY(plan->parallel.topoIndex[stage.parallelOps[i - 1]] < plan->parallel.topoIndex[stage.parallelOps[i]]);
        }
        QCOMPARE(t.logical.size(), stage.logicalOps.size());
        QVERIFY(t.divergence >= 0 && t.divergence < static_cast<int>(t.parallel.size()));
        const auto& div = t.parallel[static_cast<std::size_t>(t.divergence)];
        // The op completing the broken copy; for a lane misalignment the diagnosis names the op
        // reading the other lane, which the trace marks separately.
        if (misaligned) {
            QVERIFY(t.misaligned >= 0);
            QCOMPARE(t.parallel[static_cast<std::size_t>(t.misaligned)].op, f.parallelOp);
        } else {
            QCOMPARE(div.op, f.parallelOp);
            QCOMPARE(t.misaligned, -1);
        }
        bool failingCheck = false;
        for (const auto& c : div.checks)
            if (!c.holds) {
                failingCheck = true;
                QCOMPARE(c.expected, f.expected);
                QCOMPARE(c.actual, f.actual);
                QCOMPARE(c.element, f.element);
            }
        QVERIFY(failingCheck);
        // No step before the divergence completes a failing copy.
        for (int i = 0; i < t.divergence; ++i)
            for (const auto& c : t.parallel[static_cast<std::size_t>(i)].checks) QVERIFY(c.holds);
        // Every parallel step stands beside a logical step of the stage (a glue stage has none).
        for (const auto& s : t.parallel)
            QVERIFY(t.logical.empty() ? s.logical == -1 : s.logical >= 0 && s.logical < static_cast<int>(t.logical.size()));
        QCOMPARE(t.assumptions.empty(), stage.inputs.empty());
        const auto j = f.toJson();
        QVERIFY(j.contains("trace"));
        QCOMPARE(j["trace"]["parallel"].size(), t.parallel.size());
        QCOMPARE(j["trace"]["divergence"].get<int>(), t.divergence);
        // What a solver process ships back reads as it was written.
        const auto back = Failure::fromJson(j);
        QVERIFY(back.trace);
        QCOMPARE(back.trace->toJson(), t.toJson());
        for (std::size_t i = 0; i < t.parallel.size(); ++i) {
            QCOMPARE(back.trace->parallel[i].group, t.parallel[i].group);
            QCOMPARE(back.trace->parallel[i].rank, t.parallel[i].rank);
        }
        QVERIFY(reportToHtml(r).find("(divergence)") != std::string::npos);
    }

    // A trace says its values of uninterpreted functions are the solver's choice exactly when a
    // value it shows applies one: decided by the terms, not by the operator's name (an integer pow
    // is an exact product; silu applies exp). The missing all-reduce's stage with its activation
    // swapped on both sides and the activation's lineage dropped, so the stage runs through it.
    void traceSaysWhenValuesAreUninterpreted_data() {
        QTest::addColumn<QString>("activation");
        QTest::addColumn<QString>("exponent");
        QTest::addColumn<bool>("uninterpreted");
        QTest::newRow("relu: exact") << "relu" << "" << false;
        QTest::newRow("integer pow: exact product") << "pow" << "2" << false;
        QTest::newRow("exp") << "exp" << "" << true;
        QTest::newRow("silu: exp inside") << "silu" << "" << true;
        QTest::newRow("gelu: erf inside") << "gelu" << "" << true;
    }
    void traceSaysWhenValuesAreUninterpreted() {
        QFETCH(QString, activation);
        QFETCH(QString, exponent);
        QFETCH(bool, uninterpreted);
        auto doc = loadJson("mlp-tp2-missing-allreduce.json");
        int swapped = 0;
        for (auto* side : {&doc["logical"]["ops"], &doc["parallel"]["ops"]})
            for (auto& op : *side)
                if (op["op"] == "relu") {
                    op["op"] = activation.toStdString();
                    if (!exponent.isEmpty()) op["attrs"] = {{"exponent", exponent.toStdString()}};
                    ++swapped;
                }
        QCOMPARE(swapped, 3);
        auto& lineage = doc["lineage"];
        const auto before = lineage.size();
        lineage.erase(std::remove_if(lineage.begin(), lineage.end(), [](const json& r) { return r["logical"] == "a"; }), lineage.end());
        QCOMPARE(lineage.size(), before - 1);
        auto plan = loadPlan(doc);
        const auto r = verify(*plan, 2, false, true);
        QVERIFY(r.failure && r.failure->trace);
        QVERIFY2(r.failure->parallelOp.rfind("fc2@r", 0) == 0, r.failure->parallelOp.c_str());  // either rank's copy lacks the other's part
        QCOMPARE(r.failure->trace->uninterpreted, uninterpreted);
        QCOMPARE(r.failure->toJson()["trace"].value("uninterpreted", false), uninterpreted);
    }

    // The HTML report is one page with everything inline: the verdict, the diagnosis with its
    // values, and a row per stage; text is escaped.
    void htmlReportIsSelfContained() {
        QCOMPARE(htmlEscape("a<b & \"c\" 'd'>"), std::string("a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;"));
        auto plan = loadPlan(loadJson("mlp-tp2-missing-allreduce.json"));
        auto r = verify(*plan, 2);
        QVERIFY(r.failure);
        HtmlReportOptions o;
        o.title = "mlp <tp2>";
        auto html = reportToHtml(r, o);
        QVERIFY(html.rfind("<!DOCTYPE html>", 0) == 0);
        QVERIFY(html.find("<title>mlp &lt;tp2&gt;</title>") != std::string::npos);
        QVERIFY(html.find("NOT EQUIVALENT") != std::string::npos);
        QVERIFY(html.find(r.failure->parallelOp) != std::string::npos);
        QVERIFY(html.find(r.failure->expected) != std::string::npos);
        std::size_t rows = 0;
        for (auto p = html.find("<tr class=\"stage "); p != std::string::npos; p = html.find("<tr class=\"stage ", p + 1)) ++rows;
        QCOMPARE(rows, r.results.size());
        for (const char* external : {"<script", "src=", "href=", "@import", "url("}) QVERIFY2(html.find(external) == std::string::npos, external);
        // With many stages the proven ones fold away, and every stage still has its row.
        o.foldAbove = 2;
        auto folded = reportToHtml(r, o);
        QVERIFY(folded.find("<details><summary>") != std::string::npos);
        std::size_t foldedRows = 0;
        for (auto p = folded.find("<tr class=\"stage "); p != std::string::npos; p = folded.find("<tr class=\"stage ", p + 1)) ++foldedRows;
        QCOMPARE(foldedRows, r.results.size());
        QVERIFY(folded.find("<tr class=\"stage failed\">") < folded.find("<details>"));
        // An invalid plan lists its problems.
        auto invalid = reportToHtml(invalidReport({{"/parallel/ops/0", "op \"x<y\" is wrong"}}));
        QVERIFY(invalid.find("op &quot;x&lt;y&quot; is wrong") != std::string::npos);
        QVERIFY(invalid.find("verdict invalid") != std::string::npos);
    }

    void cancelStopsTheRun() {
        auto plan = loadPlan(loadJson("mlp-pp2.json"));
        VerifyOptions o;
        o.jobs = 1;
        std::atomic<int> done{0};
        VerificationRun* self = nullptr;
        o.onStageDone = [&](const StageResult&) {
            if (++done == 2 && self) self->cancel();
        };
        VerificationRun run(*plan, o);
        self = &run;
        auto r = run.run();
        QVERIFY(r.cancelled);
        QVERIFY(r.verdict == Verdict::Inconclusive);
        QVERIFY(r.skipped > 0);
        QCOMPARE(done.load(), 2);
    }
};

#define main qtestMain
QTEST_APPLESS_MAIN(TestVerifier)
#undef main
TV_HELPER_PROCESS_MAIN(qtestMain)
#include "tst_verifier.moc"
