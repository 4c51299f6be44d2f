// The bug lab: every catalog entry, injected into small generated, hand-written and imported
// plans, is caught (NOT EQUIVALENT, or the reader's shape mismatch) at the edited op and rank
// or where its broken dataflow first lands; entries apply exactly where a plan has the structure
// they need; and the mutants keep the input's format.
#include <QtTest>

#include <fstream>
#include <stdexcept>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "bugs/bug_catalog.hpp"
#include "model/instance_names.hpp"
#include "generate/generator.hpp"
#include "io/plan_json.hpp"
#include "nnscaler/nnscaler_pair.hpp"
#include "verify/symmetry.hpp"
#include "verify/verifier.hpp"

using namespace tv;
using json = nlohmann::json;

namespace {

/// The mutant of a request the test expects to be met; a refusal fails the test with its reason.
bugs::Mutant mutantOf(bugs::Mutation m) {
    if (!m.mutant) throw std::runtime_error("mutate refused: " + (m.refused ? m.refused->toString() : std::string("?")));
    return std::move(*m.mutant);
}

gen::GenerateOptions llama(int layers, int dp, int tp, int pp, int microbatches) {
    gen::GenerateOptions o;
    o.model = "llama3";
    o.layers = layers;
    o.hidden = 32;
    o.heads = 4;
    o.kvHeads = 2;
    o.ffn = 32;
    o.vocab = 32;
    o.seq = 4;
    o.dp = dp;
    o.tp = tp;
    o.pp = pp;
    o.microbatches = microbatches;
    return o;
}

gen::GenerateOptions deepseek(int dp, bool sp) {
    gen::GenerateOptions o = llama(2, dp, 2, 1, 1);
    o.model = "deepseek";
    o.kvHeads = 4;
    o.ep = 2;
    o.sequenceParallel = sp;
    return o;
}

std::unique_ptr<Plan> read(const json& doc) {
    auto res = readPlanJson(doc);
    if (!res.ok()) {
        for (const auto& p : res.problems) qWarning("%s", p.toString().c_str());
        return nullptr;
    }
    return std::move(res.plan);
}

std::unique_ptr<Plan> readFile(const std::string& path) {
    auto res = readPlanFile(path);
    if (!res.ok()) qWarning("%s: %s", path.c_str(), res.problems.front().toString().c_str());
    return std::move(res.plan);
}

VerifyReport verify(const bugs::Mutant& m) {
    if (!m.plan) return invalidReport(m.problems);
    VerifyOptions o;
    o.jobs = 2;
    return verifyPlan(*m.plan, o);
}

struct Base {
    std::unique_ptr<Plan> plan;
    std::set<std::string> applies;  ///< the entries with a site in this plan
    bool exhaustive = true;         ///< false: only the listed entries are tried
};

std::set<std::string> words(const std::string& s) {
    std::istringstream in(s);
    std::set<std::string> out;
    for (std::string w; in >> w;) out.insert(w);
    return out;
}

std::set<std::string> allExcept(const std::string& s) {
    auto skip = words(s);
    std::set<std::string> out;
    for (const auto& k : bugs::catalog())
        if (!skip.count(std::string(k.name))) out.insert(std::string(k.name));
    return out;
}

}  // namespace

/// The expert-parallel entries: they apply only to plans with experts split over data-parallel replicas.
const std::string kExpertEntries = "ep-grad-scaled-twice ep-grad-not-scaled ep-grad-norm-omits-experts ep-grad-wrong-group";
/// Plans without an auxiliary loss term (DeepSeek's) have no site for this one.
const std::string kAuxLossEntry = "aux-loss-scaled-by-tp";

class TestBugLab : public QObject {
    Q_OBJECT

    std::map<std::string, Base> bases_;
    std::set<std::string> caught_;

    const Plan& base(const std::string& key) {
        auto it = bases_.find(key);
        if (it == bases_.end() || !it->second.plan) qFatal("no base plan %s", key.c_str());
        return *it->second.plan;
    }

private slots:
    void initTestCase() {
        auto generated = [&](const std::string& key, gen::GenerateOptions o, std::set<std::string> applies, bool exhaustive = true) {
            auto p = read(gen::generatePlan(o));
            QVERIFY2(p, key.c_str());
            bases_[key] = Base{std::move(p), std::move(applies), exhaustive};
        };
        // The paper's configuration in miniature (dp2 tp2 pp2 nm2), stored with repeats (format 3).
        generated("llama-dp2-tp2-pp2-nm2", llama(2, 2, 2, 2, 2),
                  allExcept("cp-loss-overscaled ep-allgather-wrong-group all-to-all-wrong-order zero-shard-wrong-grad " + kExpertEntries + " " + kAuxLossEntry));
        auto sp = llama(2, 1, 2, 2, 2);
        sp.sequenceParallel = true;
        generated("llama-tp2-pp2-nm2-sp", sp,
                  allExcept("dp-grad-not-averaged dp-grad-averaged-twice cp-loss-overscaled ep-allgather-wrong-group "
                            "all-to-all-wrong-order zero-shard-wrong-grad " + kExpertEntries + " " + kAuxLossEntry));
        auto cp = llama(1, 1, 1, 1, 1);
        cp.cp = 2;
        generated("llama-cp2", cp,
                  words("norm-eps-one-rank norm-square-as-identity bwd-grad-sum-duplicated rope-bwd-halves-swapped "
                        "attn-scale-one-rank cp-loss-overscaled optimizer-unreduced-grad"));
        // Context parallelism with the replicas stored once: the file stores cp member 0 of the
        // group (plan-format.md §7.3, "member_axis": "cp"), which the bug lab reads written out.
        // A bug edited into member 1's copy or into the stored member (every member's) is caught.
        auto cpMembers = llama(1, 2, 1, 1, 1);
        cpMembers.cp = 2;
        generated("llama-dp2-cp2-members", cpMembers,
                  words("norm-eps-one-rank norm-square-as-identity attn-scale-one-rank cp-loss-overscaled dp-grad-not-averaged "
                        "dp-grad-averaged-twice optimizer-unreduced-grad"),
                  false);
        QVERIFY(bases_.at("llama-dp2-cp2-members").plan->membersStoredOnce == 2);
        auto z1 = llama(1, 2, 1, 1, 1);
        z1.zero = 1;
        generated("llama-dp2-zero1", z1,
                  words("norm-eps-one-rank norm-square-as-identity bwd-grad-sum-duplicated rope-bwd-halves-swapped attn-scale-one-rank "
                        "dp-grad-not-averaged dp-grad-averaged-twice zero-shard-wrong-grad"));
        auto z2 = llama(1, 2, 1, 1, 1);
        z2.zero = 2;
        generated("llama-dp2-zero2", z2,
                  words("norm-eps-one-rank norm-square-as-identity bwd-grad-sum-duplicated rope-bwd-halves-swapped attn-scale-one-rank "
                        "zero-shard-wrong-grad"));
        generated("deepseek-tp2-ep2-sp", deepseek(1, true), words("all-to-all-wrong-order aux-loss-scaled-by-tp"), false);
        generated("deepseek-dp2-tp2-ep2", deepseek(2, false), words("ep-allgather-wrong-group aux-loss-scaled-by-tp"), false);
        // Expert parallelism over the data-parallel replicas (Megatron-Core's and DeepSeek's
        // layout): two expert-parallel groups of two replicas, the gradients clipped to a global
        // norm. Every entry runs on it: the expert entries apply, and so do the dispatch's
        // all-to-all and the dense and expert gradient reducers.
        auto epDp = llama(2, 4, 1, 1, 2);
        epDp.model = "deepseek";
        epDp.kvHeads = 4;
        epDp.ep = 2;
        epDp.clipGrad = "1";
        generated("deepseek-dp4-ep2-nm2-clipped", epDp,
                  words(kExpertEntries + " all-to-all-wrong-order reducer-before-last-microbatch "
                        "dp-grad-not-averaged dp-grad-averaged-twice optimizer-unreduced-grad norm-eps-one-rank norm-square-as-identity "
                        "bwd-grad-sum-duplicated rope-bwd-halves-swapped attn-scale-one-rank grad-accum-missing data-loader-microbatch-offset"));

        const std::string ex = std::string(TV_SOURCE_DIR) + "/resources/examples/";
        auto example = [&](const std::string& file, std::set<std::string> applies) {
            auto p = readFile(ex + file);
            QVERIFY2(p, file.c_str());
            bases_[file] = Base{std::move(p), std::move(applies), true};
        };
        example("mlp-tp2.json", words("tp-allreduce-identity tp-allreduce-dropped tp-allreduce-as-allgather"));
        example("mlp-dp2.json", words("dp-grad-not-averaged dp-grad-averaged-twice optimizer-unreduced-grad"));
        example("mlp-pp2.json", words("reducer-before-last-microbatch grad-accum-missing data-loader-microbatch-offset pp-send-microbatch-swapped"));
        example("mlp4-dp2-tp2-pp2.json",
                words("tp-allreduce-identity tp-allreduce-dropped tp-allreduce-as-allgather tp-bwd-allreduce-identity pp-send-crossed "
                      "reducer-before-last-microbatch dp-grad-not-averaged dp-grad-averaged-twice grad-accum-missing "
                      "data-loader-microbatch-offset optimizer-unreduced-grad pp-send-microbatch-swapped"));

        // A pair of real nnScaler plans, imported. Its forward all-reduce is the loss's, over the
        // tensor-parallel parts: the loss each rank reports is claimed, so it is kept and the
        // three forward all-reduce bugs apply there.
        const std::string nn = std::string(TV_SOURCE_DIR) + "/resources/nnscaler-plans/";
        auto pair = nnscaler::loadPair(nn + "mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl", nn + "mlp_mgener_dp2_pp2_tp2_nm2_gbs16_dim1024_ly2.pkl");
        QVERIFY(pair.plan);
        bases_["nnscaler-mlp-dp2-pp2-tp2"] =
            Base{std::move(pair.plan),
                 words("pp-recv-collective-swapped pp-send-crossed reducer-before-last-microbatch ep-allgather-wrong-group "
                       "grad-accum-missing data-loader-microbatch-offset tp-allreduce-identity tp-allreduce-dropped tp-allreduce-as-allgather"),
                 true};
    }

    void catalogHasThePapersCasesAndMore() {
        const auto& c = bugs::catalog();
        QVERIFY(c.size() >= 24);
        std::set<int> paper;
        std::set<std::string> names;
        for (const auto& k : c) {
            QVERIFY2(names.insert(std::string(k.name)).second, "names are unique");
            QVERIFY(k.summary.size() > 20);
            if (k.paperCase) QVERIFY2(paper.insert(k.paperCase).second, "each paper case once");
        }
        QCOMPARE(paper.size(), std::size_t(14));
        QCOMPARE(*paper.begin(), 1);
        QCOMPARE(*paper.rbegin(), 14);
        for (const char* extra : {"dp-grad-not-averaged", "dp-grad-averaged-twice", "sp-norm-grad-not-reduced", "cp-loss-overscaled",
                                  "ep-allgather-wrong-group", "all-to-all-wrong-order", "zero-shard-wrong-grad", "grad-accum-missing",
                                  "data-loader-microbatch-offset", "optimizer-unreduced-grad", "vocab-ce-max-not-reduced"})
            QVERIFY2(bugs::findBug(extra), extra);
        QCOMPARE(bugs::catalogJson().size(), c.size());
    }

    // Every entry on every base plan: it applies exactly where the plan has its structure, and
    // then the verifier catches it where it should.
    void everyMutantIsCaught_data() {
        QTest::addColumn<QString>("plan");
        QTest::addColumn<QString>("bug");
        QTest::addColumn<bool>("applies");
        // The sanitizer run (TV_SKIP_HEAVY_TESTS) looks for memory errors and undefined behaviour,
        // not for verdicts the optimised run checks on every pair: there, each bug is injected
        // and verified on the first plan it applies to (so every entry's edit, its expectation and
        // the verifier on its mutant run under the sanitizers), and each plan refuses one bug that
        // does not apply to it (the refusal path). The optimised run keeps every pair.
        const bool thin = qEnvironmentVariableIntValue("TV_SKIP_HEAVY_TESTS") != 0;
        std::set<std::string> injected;
        for (const auto& [key, b] : bases_) {
            bool refusedOne = false;
            for (const auto& k : bugs::catalog()) {
                const std::string name(k.name);
                const bool applies = b.applies.count(name) > 0;
                if (!b.exhaustive && !applies) continue;
                if (thin && (applies ? !injected.insert(name).second : std::exchange(refusedOne, true))) continue;
                QTest::newRow((key + "/" + name).c_str()) << QString::fromStdString(key) << QString::fromStdString(name) << applies;
            }
        }
    }
    void everyMutantIsCaught() {
        QFETCH(QString, plan);
        QFETCH(QString, bug);
        QFETCH(bool, applies);
        const auto& p = base(plan.toStdString());
        auto mutation = bugs::mutate(p, bug.toStdString());
        if (!mutation.mutant) {
            QVERIFY(mutation.refused);
            const auto why = mutation.refused->toString();
            QVERIFY2(!applies, why.c_str());
            QVERIFY2(why.find("does not apply") != std::string::npos, why.c_str());
            QCOMPARE(mutation.refused->path, std::string("bug"));
            return;
        }
        QVERIFY(!mutation.refused);
        auto m = std::move(*mutation.mutant);
        QVERIFY2(applies, ("applies, at " + m.site.ops.front() + ", but the table says it should not").c_str());
        QVERIFY(!m.change.empty());
        QVERIFY(!m.site.ranks.empty());
        const auto report = verify(m);
        QVERIFY(report.verdict != Verdict::Equivalent);
        std::string why;
        QVERIFY2(bugs::caught(m, report, &why), (m.change + ": " + why).c_str());
        caught_.insert(bug.toStdString());
    }

    void everyEntryIsCaughtSomewhere() {
        for (const auto& k : bugs::catalog()) QVERIFY2(caught_.count(std::string(k.name)), std::string(k.name).c_str());
    }

    // The mutation only changes what it says: with x.pow(2) the written-out RMSNorm is the same
    // function, and the plan verifies EQUIVALENT.
    void rmsnormWrittenOutWithTheRightExponentIsEquivalent() {
        auto m = mutantOf(bugs::mutate(base("llama-dp2-tp2-pp2-nm2"), "norm-square-as-identity"));
        auto doc = writePlanJson(*m.plan, false);
        int changed = 0;
        for (auto& op : doc["parallel"]["ops"])
            if (op["op"] == "pow" && op["attrs"]["exponent"] == 1) {
                op["attrs"]["exponent"] = 2;
                ++changed;
            }
        QCOMPARE(changed, 1);
        auto fixed = read(doc);
        QVERIFY(fixed);
        QVERIFY(verifyPlan(*fixed, {}).verdict == Verdict::Equivalent);
    }

    // Crossing the tensor-parallel peers of a stage-boundary send is harmless when they carry
    // partial sums that are summed next: the verifier proves it, and the catalog offers only
    // sends whose payloads differ (here: the two replicas').
    void crossingPartialSumSendsIsHarmlessAndNotOffered() {
        const auto& p = base("llama-dp2-tp2-pp2-nm2");
        for (const auto& s : bugs::findSites(p, "pp-send-crossed").sites) QVERIFY2(s.writtenOut, s.ops.front().c_str());
        auto doc = writePlanJson(p, false);
        json* a = nullptr;
        json* b = nullptr;
        for (auto& op : doc["parallel"]["ops"]) {
            if (op["op"] != "send_recv" || op.contains("phase")) continue;
            if (op["group"] == json::array({0, 2})) a = &op;
            if (op["group"] == json::array({1, 3})) b = &op;
        }
        QVERIFY(a && b);
        std::swap((*a)["group"][1], (*b)["group"][1]);
        std::swap((*a)["outputs"], (*b)["outputs"]);
        auto crossed = read(doc);
        QVERIFY(crossed);
        QVERIFY(verifyPlan(*crossed, {}).verdict == Verdict::Equivalent);
    }

    // Mutating the bundled correct examples reproduces their buggy twins' diagnoses.
    void mutantsMatchTheBundledBuggyTwins_data() {
        QTest::addColumn<QString>("plan");
        QTest::addColumn<QString>("bug");
        QTest::addColumn<QString>("twin");
        QTest::addColumn<bool>("sameOp");  // false: the twin deletes the all-reduce, the mutant keeps identities in its place
        QTest::newRow("tp") << "mlp-tp2.json" << "tp-allreduce-identity" << "mlp-tp2-missing-allreduce.json" << false;
        QTest::newRow("dp") << "mlp-dp2.json" << "dp-grad-not-averaged" << "mlp-dp2-missing-average.json" << true;
        QTest::newRow("pp") << "mlp-pp2.json" << "pp-send-microbatch-swapped" << "mlp-pp2-crossed-sendrecv.json" << true;
    }
    void mutantsMatchTheBundledBuggyTwins() {
        QFETCH(QString, plan);
        QFETCH(QString, bug);
        QFETCH(QString, twin);
        QFETCH(bool, sameOp);
        auto m = mutantOf(bugs::mutate(base(plan.toStdString()), bug.toStdString()));
        const auto report = verify(m);
        QVERIFY(bugs::caught(m, report));
        auto t = readFile(std::string(TV_SOURCE_DIR) + "/resources/examples/" + twin.toStdString());
        QVERIFY(t);
        const auto& f = t->expect["failure"];
        QCOMPARE(std::string(toString(report.verdict)), t->expect["verdict"].get<std::string>());
        QCOMPARE(std::string(toString(report.failure->kind)), f["kind"].get<std::string>());
        if (!sameOp) return;
        if (f.contains("parallel_op")) QCOMPARE(report.failure->parallelOp, f["parallel_op"].get<std::string>());
        if (f.contains("rank")) QCOMPARE(report.failure->rank, f["rank"].get<int>());
    }

    // --at and --rank choose the site; a rank of another replica writes the plan out so that only
    // that instance is wrong.
    void atAndRankChooseTheSite() {
        const auto& p = base("llama-dp2-tp2-pp2-nm2");
        auto sites = bugs::findSites(p, "norm-eps-one-rank").sites;
        QVERIFY(sites.size() > 4);
        bugs::MutateOptions o;
        o.at = sites[3].ops[0];
        auto m = mutantOf(bugs::mutate(p, "norm-eps-one-rank", o));
        QCOMPARE(m.site.ops[0], o.at);
        QVERIFY(!m.site.writtenOut);
        QVERIFY(bugs::caught(m, verify(m)));

        bugs::MutateOptions r;
        r.rank = 5;  // replica 1's copy of rank 1
        auto one = mutantOf(bugs::mutate(p, "norm-eps-one-rank", r));
        QVERIFY(one.site.writtenOut);
        QCOMPARE(one.site.ranks, std::vector<std::int32_t>{5});
        QVERIFY(one.site.ops[0].find("~dp1") != std::string::npos);
        const auto report = verify(one);
        std::string why;
        QVERIFY2(bugs::caught(one, report, &why), why.c_str());
        QCOMPARE(report.failure->rank, 5);

        // The stored op named with another replica's rank: that replica's copy of it.
        bugs::MutateOptions both;
        both.at = "layers.0.attention_norm@r1";
        both.rank = 5;
        auto copy = mutantOf(bugs::mutate(p, "norm-eps-one-rank", both));
        QVERIFY(copy.site.writtenOut);
        QCOMPARE(copy.site.ranks, std::vector<std::int32_t>{5});
        QCOMPARE(instance::storedName(copy.site.ops[0]), both.at);
        both.rank = 4;  // replica 1's rank 0 runs another op
        const auto refused = bugs::mutate(p, "norm-eps-one-rank", both);
        QVERIFY(!refused.mutant && refused.refused);
        QCOMPARE(refused.refused->path, std::string("rank"));
    }

    void badRequestsAreRefusedWithAReason_data() {
        QTest::addColumn<QString>("bug");
        QTest::addColumn<QString>("at");
        QTest::addColumn<int>("rank");
        QTest::addColumn<QString>("about");  // what was asked that the problem is about
        QTest::addColumn<QString>("message");
        QTest::newRow("unknown bug") << "no-such-bug" << "" << -1 << "bug" << "unknown bug \"no-such-bug\"";
        QTest::newRow("no such op") << "norm-eps-one-rank" << "nope@r0" << -1 << "at" << "no parallel op has this id";
        QTest::newRow("op is not a site") << "norm-eps-one-rank" << "layers.0.attention.wq@r0" << -1 << "at" << "is not a site of bug";
        QTest::newRow("rank not on a site") << "tp-allreduce-identity" << "" << 99 << "rank" << "no site of bug";
        QTest::newRow("op and rank disagree") << "norm-eps-one-rank" << "layers.0.attention_norm@r0" << 1 << "rank" << "the op runs on ranks 0";
        QTest::newRow("missing structure") << "cp-loss-overscaled" << "" << -1 << "bug" << "needs context parallelism";
    }
    void badRequestsAreRefusedWithAReason() {
        QFETCH(QString, bug);
        QFETCH(QString, at);
        QFETCH(int, rank);
        QFETCH(QString, about);
        QFETCH(QString, message);
        bugs::MutateOptions o;
        o.at = at.toStdString();
        o.rank = rank;
        const auto mutation = bugs::mutate(base("llama-dp2-tp2-pp2-nm2"), bug.toStdString(), o);
        QVERIFY2(!mutation.mutant, "mutate accepted it");
        QVERIFY(mutation.refused);
        const auto& why = mutation.refused->message;
        QCOMPARE(QString::fromStdString(mutation.refused->path), about);
        QVERIFY2(why.find(message.toStdString()) != std::string::npos, why.c_str());
        // Core speaks the domain's words: no command or flag of a front end.
        QVERIFY2(why.find("--") == std::string::npos && why.find("trainverify") == std::string::npos, why.c_str());
    }

    // A plan stored with repeats gives a mutant stored with repeats; reading the written file
    // back gives the mutant.
    void mutantsKeepTheFormat() {
        const auto& p = base("llama-dp2-tp2-pp2-nm2");
        QVERIFY(p.storedWithRepeats);
        for (const char* bug : {"norm-eps-one-rank", "reducer-before-last-microbatch"}) {
            auto m = mutantOf(bugs::mutate(p, bug));
            QCOMPARE(m.document["version"].get<int>(), 3);
            auto again = read(m.document);
            QVERIFY(again);
            QCOMPARE(again->parallel.ops.size(), m.plan->parallel.ops.size());
            QCOMPARE(again->expect["bug"]["kind"].get<std::string>(), std::string(bug));
            QVERIFY(verify(m).verdict == verifyPlan(*again, {}).verdict);
        }
        auto m = mutantOf(bugs::mutate(base("mlp-tp2.json"), "tp-allreduce-as-allgather"));
        QVERIFY(!m.plan);
        QVERIFY(!m.problems.empty());
        QCOMPARE(m.document["version"].get<int>(), 1);
        QVERIFY(!readPlanJson(m.document).ok());
    }
};

QTEST_GUILESS_MAIN(TestBugLab)
#include "tst_buglab.moc"
