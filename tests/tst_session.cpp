// The session layer both front ends call (core/session): opening plan files and nnScaler pairs,
// what is drawn of a plan stored once, finishing reports as the plan's origin limits them, the
// report document, generating to a file, injecting a bug and judging the run. Links the core
// library and Qt Test only: no widget library.
#include <QtTest>

#include <filesystem>
#include <fstream>

#include "session/session.hpp"
#include "verify/symmetry.hpp"

using namespace tv;

namespace {

std::string example(const char* name) { return std::string(TV_SOURCE_DIR) + "/resources/examples/" + name; }
std::string nnscalerPlan(const char* name) { return std::string(TV_SOURCE_DIR) + "/resources/nnscaler-plans/" + name + ".pkl"; }

std::string tempDir() {
    static const std::string dir = [] {
        auto d = std::filesystem::temp_directory_path() / ("tst_session-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        return d.string();
    }();
    return dir;
}

std::string readText(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

VerifyOptions quick() {
    VerifyOptions o;
    o.jobs = 2;
    return o;
}

}  // namespace

class TestSession : public QObject {
    Q_OBJECT
private slots:
    void cleanupTestCase() { std::filesystem::remove_all(tempDir()); }

    void opensAPlanFile() {
        const auto r = session::openPlanFile(example("mlp-tp2.json"));
        QVERIFY(r.ok());
        QCOMPARE(r.opened->source.path, example("mlp-tp2.json"));
        QVERIFY(!r.opened->source.nnScalerPair());
        QCOMPARE(r.opened->plan->name, std::string("mlp-tp2"));
        QVERIFY(r.message().empty());
    }

    // An invalid file: INVALID, the file named before each problem's JSON path in the report,
    // the problems as the reader found them, and a message that names the file.
    void anInvalidFileIsRefusedWithItsPlace() {
        const std::string path = tempDir() + "/bad.json";
        auto doc = nlohmann::json::parse(readText(example("mlp-tp2.json")));
        doc["parallel"]["ops"][1]["inputs"][0] = "no_such_tensor";
        std::ofstream(path) << doc.dump();
        const auto r = session::openPlanFile(path);
        QVERIFY(!r.ok());
        QVERIFY(r.refusal.verdict == Verdict::Invalid);
        QVERIFY(!r.problems.empty());
        QVERIFY2(r.problems.front().path.rfind("/parallel/ops/1", 0) == 0, r.problems.front().path.c_str());
        QVERIFY2(r.refusal.problems.front().path.rfind(path + ": /parallel/ops/1", 0) == 0, r.refusal.problems.front().path.c_str());
        QVERIFY2(r.message().rfind(path + ":\n/parallel/ops/1", 0) == 0, r.message().c_str());
        QVERIFY2(r.message().find("no_such_tensor") != std::string::npos, r.message().c_str());

        const auto missing = session::openPlanFile(tempDir() + "/none.json");
        QVERIFY(!missing.ok());
        QVERIFY(missing.refusal.verdict == Verdict::Invalid);
        QVERIFY2(missing.message().find("none.json") != std::string::npos, missing.message().c_str());
    }

    void opensAnNnScalerPair() {
        const auto logical = nnscalerPlan("mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2");
        const auto parallel = nnscalerPlan("mlp_mgener_dp1_pp1_tp2_nm1_gbs16_dim1024_ly2");
        const auto r = session::openNnScalerPair(logical, parallel);
        QVERIFY2(r.ok(), r.message().c_str());
        QVERIFY(r.opened->source.nnScalerPair());
        QCOMPARE(r.opened->source.path, parallel);
        QCOMPARE(r.opened->source.logicalPath, logical);
        QVERIFY(r.opened->mappingUnchecked.empty());
        auto report = verifyPlan(*r.opened->plan, quick());
        session::finishReport(*r.opened, report);
        QVERIFY(report.verdict == Verdict::Equivalent);
        const auto doc = session::reportDocument(r.source, r.opened.get(), report);
        QCOMPARE(doc["nnscaler"]["logical"].get<std::string>(), logical);
        QCOMPARE(doc["nnscaler"]["parallel"].get<std::string>(), parallel);
        QCOMPARE(doc["plan"]["file"].get<std::string>(), parallel);

        // Swapped, the pair is not a logical plan and a parallel plan of it: refused, with why.
        const auto swapped = session::openNnScalerPair(parallel, logical);
        QVERIFY(!swapped.ok());
        QVERIFY(swapped.refusal.verdict != Verdict::Equivalent);
        QVERIFY2(swapped.message().find(": ") != std::string::npos, swapped.message().c_str());
    }

    // What a pair's mapping could not claim keeps every report of it from EQUIVALENT, whoever
    // verifies it (the command line and the Studio both finish their reports here). Only a pair is
    // limited: a plan file has no mapping.
    void aMissingFinalClaimLimitsTheReport() {
        auto opened = session::openPlanFile(example("mlp-tp2.json"));
        QVERIFY(opened.ok());
        session::OpenedPlan pair = *opened.opened;
        pair.source.logicalPath = "logical.pkl";
        pair.mappingUnchecked = {"the loss", "the gradient of weight w1"};
        pair.mappingNotes = {"adapter #3: noticed something"};
        auto report = verifyPlan(*pair.plan, quick());
        QVERIFY(report.verdict == Verdict::Equivalent);
        auto limited = report;
        session::finishReport(pair, limited);
        QVERIFY(limited.verdict == Verdict::Inconclusive);
        QVERIFY(limited.failure);
        QVERIFY2(limited.failure->message.find("could not claim the loss (and 1 more)") != std::string::npos, limited.failure->message.c_str());
        QVERIFY(std::find(limited.warnings.begin(), limited.warnings.end(), "nnScaler mapping: adapter #3: noticed something") != limited.warnings.end());
        auto plain = report;
        session::finishReport(*opened.opened, plain);
        QVERIFY(plain.verdict == Verdict::Equivalent);
        QCOMPARE(plain.warnings.size(), report.warnings.size());
    }

    // A plan stored once is drawn written out up to the bound, as stored past it; either way each
    // drawn stage maps onto a stage of the plan verified, and the verified stages are the opened
    // plan's.
    void drawsAPlanStoredOnce_data() {
        QTest::addColumn<qulonglong>("bound");
        QTest::addColumn<bool>("asStored");
        QTest::newRow("past the bound: as stored") << qulonglong(1) << true;
        QTest::newRow("written out") << qulonglong(1'000'000) << false;
    }
    void drawsAPlanStoredOnce() {
        QFETCH(qulonglong, bound);
        QFETCH(bool, asStored);
        const auto r = session::openPlanFile(example("mlp-dp2-pp2-nm4-lanes.json"));
        QVERIFY(r.ok());
        QVERIFY(r.opened->plan->replication.active());
        const auto d = session::drawPlan(*r.opened, bound);
        QCOMPARE(d.asStored, asStored);
        QCOMPARE(d.plan == r.opened->plan, asStored);
        QCOMPARE(d.plan->parallel.ops.size(), asStored ? r.opened->plan->parallel.ops.size() : writtenOutCounts(*r.opened->plan).ops);
        QCOMPARE(d.verifiedStages->stages.size(), cutStages(*r.opened->plan).stages.size());
        QCOMPARE(d.drawnToVerified.size(), d.stages.stages.size());
        for (auto s : d.drawnToVerified) QVERIFY(s == kNone || s < d.verifiedStages->stages.size());
        // Drawn again (a re-layout), the same stages and the same mapping.
        const auto again = session::redrawPlan(*r.opened, d.plan, d.verifiedStages);
        QCOMPARE(again.drawnToVerified, d.drawnToVerified);
        QCOMPARE(again.verifiedStages, d.verifiedStages);
    }

    // Generated plans are read back and written canonically; the text is what the reader accepts
    // and re-writes the same way, format 3 finds repeats, and a bad configuration says why.
    void generatesCanonicalPlans() {
        gen::GenerateOptions o;
        o.model = "mlp";
        o.dp = 2;
        o.tp = 2;
        const auto g = session::generatePlan(o);
        QVERIFY2(g.ok(), g.error().c_str());
        auto read = readPlanJson(nlohmann::json::parse(g.text));
        QVERIFY(read.ok());
        read.plan->storedWithRepeats = true;
        QCOMPARE(writePlanText(*read.plan), g.text);
        QCOMPARE(nlohmann::json::parse(g.text).value("version", 0), 3);

        auto o2 = o;
        o2.format = 1;
        const auto g2 = session::generatePlan(o2);
        QVERIFY(g2.ok());
        QCOMPARE(nlohmann::json::parse(g2.text).value("version", 0), 1);
        QVERIFY(session::generatedFileName(g) != session::generatedFileName(g2));
        QCOMPARE(session::generatedFileName(g), session::generatedFileName(session::generatePlan(o)));
        QVERIFY2(session::generatedFileName(g).rfind(g.plan->name + "-", 0) == 0, session::generatedFileName(g).c_str());

        auto bad = o;
        bad.tp = 3;  // does not divide the hidden size
        const auto b = session::generatePlan(bad);
        QVERIFY(!b.ok());
        QVERIFY(b.configurationProblem);
        QVERIFY2(b.error().rfind("invalid configuration: ", 0) == 0, b.error().c_str());
    }

    // Written whole or not at all: a file replaced in place, no partial file left by a failed
    // write, and the reason said.
    void writesFilesAtomically() {
        const std::string path = tempDir() + "/plan.json";
        std::string error;
        QVERIFY(session::writeFileAtomically(path, "first\n", &error));
        QVERIFY(session::writeFileAtomically(path, "second\n", &error));
        QCOMPARE(readText(path), std::string("second\n"));
        QVERIFY(!std::filesystem::exists(path + ".part"));
        const std::string nowhere = tempDir() + "/no/such/dir/plan.json";
        QVERIFY(!session::writeFileAtomically(nowhere, "x", &error));
        QVERIFY2(error.find(nowhere) != std::string::npos, error.c_str());
        QVERIFY(!std::filesystem::exists(nowhere + ".part"));
        // Over a directory: the rename fails, and the part file is removed.
        const std::string dir = tempDir() + "/a-directory";
        std::filesystem::create_directories(dir + "/inside");
        QVERIFY(!session::writeFileAtomically(dir, "x", &error));
        QVERIFY2(error.find("renaming") != std::string::npos, error.c_str());
        QVERIFY(!std::filesystem::exists(dir + ".part"));
    }

    // A bug injected into a copy: the copy opened from the same place with the mutant set, what
    // its origin limits kept, and the run judged; a bug that cannot be made is an error.
    void injectsAndJudgesABug() {
        auto r = session::openPlanFile(example("mlp-tp2.json"));
        QVERIFY(r.ok());
        session::OpenedPlan from = *r.opened;
        from.mappingUnchecked = {"the loss"};
        const auto injected = session::injectBug(from, "tp-allreduce-dropped");
        QVERIFY2(!injected.refused, injected.refused->toString().c_str());
        QVERIFY(injected.mutant && injected.opened);
        QCOMPARE(injected.opened->mutant, injected.mutant);
        QCOMPARE(injected.opened->source.path, from.source.path);
        QCOMPARE(injected.opened->mappingUnchecked, from.mappingUnchecked);
        QVERIFY(injected.opened->plan != from.plan);
        auto report = verifyPlan(*injected.opened->plan, quick());
        session::finishReport(*injected.opened, report);
        QVERIFY(report.verdict == Verdict::NotEquivalent);
        const auto j = session::judgeBug(*injected.mutant, report);
        QVERIFY2(j.caught, j.detail.c_str());
        QCOMPARE(std::string(j.outcome()), std::string("caught"));
        QVERIFY2(j.sentence().rfind("Caught where it was injected: ", 0) == 0, j.sentence().c_str());
        const auto doc = session::reportDocument(r.source, injected.opened.get(), report);
        QCOMPARE(doc["plan"]["mutant"]["bug"].get<std::string>(), std::string("tp-allreduce-dropped"));

        // The original plan verified against the bug's expectation: not caught, and said so.
        auto clean = verifyPlan(*r.opened->plan, quick());
        const auto missed = session::judgeBug(*injected.mutant, clean);
        QVERIFY(!missed.caught);
        QVERIFY2(missed.sentence().rfind("Not caught where expected: ", 0) == 0, missed.sentence().c_str());

        const auto unknown = session::injectBug(*r.opened, "no-such-bug");
        QVERIFY(unknown.refused);
        QCOMPARE(unknown.refused->path, std::string("bug"));
        QVERIFY2(unknown.refused->message.find("unknown bug \"no-such-bug\"") != std::string::npos, unknown.refused->message.c_str());
        QVERIFY(!unknown.mutant && !unknown.opened);
    }

    // The report document of a plan that did not open: the report and the pair, no plan.
    void documentsAReportOfAPlanThatDidNotOpen() {
        const auto r = session::openPlanFile(tempDir() + "/none.json");
        const auto doc = session::reportDocument(r.source, nullptr, r.refusal);
        QCOMPARE(doc["verdict"].get<std::string>(), std::string("invalid"));
        QVERIFY(!doc.contains("plan"));
        QVERIFY(!doc.contains("nnscaler"));
        QVERIFY(doc.contains("peak_memory_kb"));
        const auto html = session::reportHtml(r.source, nullptr, r.refusal);
        QVERIFY(html.find("none.json") != std::string::npos);
    }
};

QTEST_GUILESS_MAIN(TestSession)
#include "tst_session.moc"
