// Verifying plans stored with replicas as stored: replica 0's stages stand for every replica only
// where that is sound, and the verdict and diagnosis match verifying the plan written out.
#include <QtTest>

#include <algorithm>
#include <functional>

#include "generate/generator.hpp"
#include "io/plan_json.hpp"
#include "io/plan_members.hpp"
#include "io/plan_repeats.hpp"
#include "model/instance_names.hpp"
#include "verify/check.hpp"
#include "verify/symmetry.hpp"
#include "verify/verifier.hpp"

using namespace tv;
using json = nlohmann::json;
using Options = gen::GenerateOptions;

namespace {

/// A small DeepSeek with its experts over expert-parallel groups of `ep` data-parallel replicas,
/// stored once (format 2: one member of each group), 2 microbatches.
Options deepseekOverReplicas(int dp, int ep, int zero, const std::string& clip = "", int tp = 1) {
    Options o;
    o.model = "deepseek";
    o.layers = 2;
    o.hidden = 32;
    o.heads = o.kvHeads = 4;
    o.ffn = o.vocab = 32;
    o.seq = 4;
    o.dp = dp;
    o.tp = tp;
    o.ep = ep;
    o.microbatches = 2;
    o.zero = zero;
    o.clipGrad = clip;
    o.format = 2;
    return o;
}

/// A small Llama with context parallelism (K and V all-gathered), stored in format 2: the cp
/// members stored once (plan-format.md §7.3, "member_axis": "cp").
Options llamaOverCp(int dp, int cp, int tp, int pp, int zero, int microbatches = 2) {
    Options o;
    o.model = "llama3";
    o.layers = 2;
    o.dp = dp;
    o.cp = cp;
    o.tp = tp;
    o.pp = pp;
    o.zero = zero;
    o.microbatches = microbatches;
    o.format = 2;
    return o;
}

Options mlp(int dp, int tp = 1, int zero = 0, int pp = 1, int microbatches = 1) {
    Options o;
    o.model = "mlp";
    o.layers = 2;
    o.hidden = 16;
    o.ffn = 32;
    o.vocab = 8;
    o.dp = dp;
    o.tp = tp;
    o.zero = zero;
    o.pp = pp;
    o.microbatches = microbatches;
    return o;
}

json& opNamed(json& doc, const std::string& id) {
    for (auto& op : doc["parallel"]["ops"])
        if (op["id"] == id) return op;
    qFatal("no op %s", id.c_str());
}

std::unique_ptr<Plan> read(const json& doc) {
    auto res = readPlanJson(doc);
    if (!res.ok()) {
        for (const auto& p : res.problems) qWarning("%s", p.toString().c_str());
        return nullptr;
    }
    return std::move(res.plan);
}

}  // namespace

using Mutation = std::function<void(json&)>;

/// Checks a plan stored with replicas as stored and written out: the same verdict, and for a
/// failure (failingOp non-empty, a part of the stored op's name) the same stored op, tensor and
/// rank within the replica. Written out, the counterexample may land in any lane of a stage that
/// replica 0 proves alone, so lanes (the ~mb/~dp suffixes, the replica's ranks) may differ.
static void storedAgreesWithWrittenOut(const Plan& plan, const QString& failingOp) {
    VerifyOptions opts;
    opts.jobs = 2;
    const auto asStored = verifyPlan(plan, opts);
    const auto writtenOut = verifyPlan(expandReplicas(plan), opts);
    QCOMPARE(static_cast<int>(asStored.verdict), static_cast<int>(writtenOut.verdict));
    if (failingOp.isEmpty()) {
        QVERIFY2(asStored.verdict == Verdict::Equivalent, reportToText(asStored).c_str());
        QCOMPARE(asStored.passed, static_cast<std::uint32_t>(asStored.results.size()));
        return;
    }
    QVERIFY(asStored.verdict == Verdict::NotEquivalent);
    QVERIFY(asStored.failure && writtenOut.failure);
    auto stored = [](const std::string& name) { return QString::fromStdString(name.substr(0, name.find('~'))); };
    QCOMPARE(stored(asStored.failure->parallelOp), stored(writtenOut.failure->parallelOp));
    QVERIFY2(QString::fromStdString(asStored.failure->parallelOp).contains(failingOp), asStored.failure->parallelOp.c_str());
    QCOMPARE(QString::fromStdString(asStored.failure->tensor), QString::fromStdString(writtenOut.failure->tensor));
    // Within the stored replica (one member of each group stored: within the member; cp members
    // stored once: the stored rank with the same coordinates but cp 0).
    const auto& rep = plan.replication;
    if (rep.members > 1 && rep.memberAxis == Axis::CP) {
        auto base = [&](std::int32_t r) {
            r %= rep.ranksPerReplica;
            return r - plan.ranks[static_cast<std::size_t>(r)].at(Axis::CP) * rep.memberRanks;
        };
        QCOMPARE(base(asStored.failure->rank), base(writtenOut.failure->rank));
        return;
    }
    const auto S = rep.members > 1 ? rep.memberRanks : rep.ranksPerReplica;
    QCOMPARE(asStored.failure->rank % S, writtenOut.failure->rank % S);
}

/// A plan read as stored with one member of each group: stages proven on the stored member,
/// stages written out over the members only, and stages written out whole are all there; verdict
/// and failing op agree with the plan written out; and the writer keeps the stored form, which
/// the reader reads back the same.
static void memberPlanAgreesWithWrittenOut(const Plan& plan, const QString& failingOp) {
    const auto sp = cutStages(plan);
    int onMember = 0, overMembers = 0, whole = 0;
    for (const auto& st : sp.stages) {
        if (provenByReplicaZero(plan, st)) ++onMember;
        else if (provenAlongReplicas(plan, st)) ++overMembers;
        else ++whole;
    }
    QVERIFY2(onMember > overMembers && overMembers > 0 && whole > 0,
             (std::to_string(onMember) + " " + std::to_string(overMembers) + " " + std::to_string(whole)).c_str());
    storedAgreesWithWrittenOut(plan, failingOp);
    auto again = readPlanJson(writePlanJson(plan), ReadOptions{true});
    QVERIFY(again.ok());
    QCOMPARE(writePlanText(*again.plan), writePlanText(plan));
}

Q_DECLARE_METATYPE(Mutation)

class TestSymmetry : public QObject {
    Q_OBJECT
private slots:
    // Instance names, one module for the three schemes (the generator's, nnScaler's, written-out
    // replicas'): each suffix as written, and what each reading function keeps of it.
    void instanceNamesOfEveryScheme_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("stored");
        QTest::addColumn<QString>("withoutReplicaMarks");
        QTest::addColumn<QString>("withoutRank");
        QTest::addColumn<QString>("withoutMicrobatch");
        QTest::addColumn<QString>("logical");
        const auto row = [](const char* tag, const std::string& name, const char* stored, const char* own, const char* noRank, const char* noMb,
                            const char* logical) {
            QTest::newRow(tag) << QString::fromStdString(name) << stored << own << noRank << noMb << logical;
        };
        row("generator", "fc2" + instance::generatorSuffix(1, 3), "fc2.mb1@r3", "fc2.mb1@r3", "fc2.mb1", "fc2@r3", "fc2");
        row("generator, no microbatch", "w1" + instance::generatorSuffix(-1, 12), "w1@r12", "w1@r12", "w1", "w1@r12", "w1");
        row("nnScaler", "linear.4" + instance::nnScalerSuffix(2, 1), "linear.4@r2.m1", "linear.4@r2.m1", "linear.4.m1", "linear.4@r2", "linear.4");
        row("nnScaler, no microbatch", "linear.4" + instance::nnScalerSuffix(2, -1), "linear.4@r2", "linear.4@r2", "linear.4", "linear.4@r2", "linear.4");
        row("written out", "fc2" + instance::generatorSuffix(0, 1) + instance::writtenOutSuffix(3, 2), "fc2.mb0@r1", "fc2.mb0@r1", "fc2.mb0~mb3~dp2", "fc2@r1~dp2", "fc2");
        row("written out, replica only", "x@r0" + instance::writtenOutSuffix(0, 1), "x@r0", "x@r0", "x~dp1", "x@r0~dp1", "x");
        row("stored lane keeps its name", "x@r0" + instance::writtenOutSuffix(0, 0), "x@r0", "x@r0", "x", "x@r0", "x");
        // A member's copy (plan-format.md §7.3) written out as a replica: the op stored once is
        // member 0's; in a plan holding its members written out, the member's own.
        row("a cp member's copy written out", "x@r0~cp1" + instance::writtenOutSuffix(3, 2), "x@r0", "x@r0~cp1", "x~cp1~mb3~dp2", "x@r0~cp1~dp2", "x");
        row("an expert member's copy", std::string("x@r0~ep3"), "x@r0", "x@r0~ep3", "x~ep3", "x@r0~ep3", "x");
        row("a replica mark inside the name stays", std::string("x~dp1y@r0~dp2"), "x", "x~dp1y@r0", "x~dp1y~dp2", "x~dp1y@r0~dp2", "x");
        row("marks without digits are the name's", std::string("norm@rms.mbx.mode"), "norm@rms.mbx.mode", "norm@rms.mbx.mode", "norm@rms.mbx.mode", "norm@rms.mbx.mode",
            "norm@rms.mbx.mode");
        row("a rank after a mark without digits", std::string("a@rb@r7"), "a@rb@r7", "a@rb@r7", "a@rb", "a@rb@r7", "a@rb");
        row("a .m not after a rank stays", std::string("emb.m3@r0"), "emb.m3@r0", "emb.m3@r0", "emb.m3", "emb.m3@r0", "emb.m3");
    }
    void instanceNamesOfEveryScheme() {
        QFETCH(QString, name);
        QFETCH(QString, stored);
        QFETCH(QString, withoutReplicaMarks);
        QFETCH(QString, withoutRank);
        QFETCH(QString, withoutMicrobatch);
        QFETCH(QString, logical);
        const auto n = name.toStdString();
        QCOMPARE(QString::fromStdString(instance::storedName(n)), stored);
        QCOMPARE(QString::fromStdString(instance::withoutReplicaMarks(n)), withoutReplicaMarks);
        QCOMPARE(QString::fromStdString(instance::withoutRank(n)), withoutRank);
        QCOMPARE(QString::fromStdString(instance::withoutMicrobatch(n)), withoutMicrobatch);
        QCOMPARE(QString::fromStdString(instance::logicalName(n)), logical);
    }

    // Each mutation of a plan stored with replicas gets the same verdict and the same first
    // failing op whether the plan is checked as stored or written out replica by replica.
    void asStoredMatchesWrittenOut_data() {
        QTest::addColumn<int>("zero");
        QTest::addColumn<int>("microbatches");  // with 2 pipeline stages when above 1, stored once
        QTest::addColumn<Mutation>("mutate");
        QTest::addColumn<QString>("failingOp");  // empty: equivalent
        auto row = [](const char* name, int zero, Mutation m, const char* op, int microbatches = 1) {
            QTest::newRow(name) << zero << microbatches << m << QString(op);
        };
        row("correct", 0, [](json&) {}, "");
        row("correct, zero-1", 1, [](json&) {}, "");
        row("forward activation (replica-local)", 0, [](json& d) { opNamed(d, "layers.0.act.mb0@r0")["op"] = "relu"; }, "layers.0.act.mb0@r0");
        row("activation gradient (replica-local)", 0,
            [](json& d) { opNamed(d, "bw.layers.1.act.gelu_backward.mb0@r0")["op"] = "relu_backward"; },
            "bw.layers.1.act.gelu_backward.mb0@r0");
        row("weight gradient reads the pre-activation (terms across replicas)", 0,
            [](json& d) {
                auto& op = opNamed(d, "bw.layers.0.fc2.matmul.2.mb0@r0");
                const auto act = opNamed(d, "layers.0.act.mb0@r0")["outputs"][0];
                for (auto& in : op["inputs"])
                    if (in == act) in = opNamed(d, "layers.0.fc1.mb0@r0")["outputs"][0];
            },
            "bw.layers.0.fc2.matmul.2.mb0@r0");
        row("reducer sums instead of averaging (across replicas)", 0,
            [](json& d) { opNamed(d, "bw.layers.0.fc1.matmul.2.dp_allreduce@r0")["attrs"]["reduce"] = "sum"; },
            "bw.layers.0.fc1.matmul.2.dp_allreduce@r0");
        row("optimizer learning rate (copies on every replica)", 0,
            [](json& d) { opNamed(d, "optim.layers.1.fc2.weight@r0")["attrs"]["lr"] = "1/100"; }, "optim.layers.1.fc2.weight@r0");
        row("correct, microbatches stored once", 0, [](json&) {}, "", 3);
        row("microbatches: forward op of the stored microbatch", 0, [](json& d) { opNamed(d, "layers.1.act@r1")["op"] = "relu"; },
            "layers.1.act@r1", 3);
        row("microbatches: activation sent to the wrong stage input", 0,
            [](json& d) {
                auto& op = opNamed(d, "layers.1.fc1@r1");
                op["inputs"][0] = opNamed(d, "layers.0.residual.send@r1")["outputs"][0];
                opNamed(d, "layers.1.residual@r1")["inputs"][0] = opNamed(d, "layers.1.fc2@r1")["outputs"][0];
            },
            "layers.1.residual@r1", 3);
        row("zero-1: every replica updates shard 0", 1,
            [](json& d) {
                for (auto& op : d["parallel"]["ops"]) op.erase("index_from_replica");
            },
            "~dp1");
    }
    void asStoredMatchesWrittenOut() {
        QFETCH(int, zero);
        QFETCH(int, microbatches);
        QFETCH(Mutation, mutate);
        QFETCH(QString, failingOp);
        auto doc = microbatches > 1 ? gen::generatePlan(mlp(2, 1, zero, 2, microbatches)) : gen::generatePlan(mlp(2, 1, zero));
        mutate(doc);
        auto plan = read(doc);
        QVERIFY(plan);
        QVERIFY(plan->replication.active());
        storedAgreesWithWrittenOut(*plan, failingOp);
    }

    // Expert parallelism over the replicas, stored as one expert-parallel group of two replicas
    // (plan-format.md §7, "listed": the generator's file, one member stored, with its members
    // written out as the reader does), the group repeated twice: checked as stored and written out,
    // the verdicts and the failing stored op agree, correct and mutated in each kind of op the
    // group's members do not share (their experts, the dispatch between them, the reducers over
    // the replicas holding the same experts, the ZeRO parts indexed by replica).
    void expertGroupStoredMatchesWrittenOut_data() {
        QTest::addColumn<Mutation>("mutate");
        QTest::addColumn<QString>("failingOp");  // empty: equivalent
        auto row = [](const char* name, Mutation m, const char* op) { QTest::newRow(name) << m << QString(op); };
        row("correct", [](json&) {}, "");
        row("second member's experts", [](json& d) { opNamed(d, "layers.1.moe.experts.silu@r0~ep1")["op"] = "relu"; }, "layers.1.moe.experts.silu@r0~ep1");
        row("dispatch to the wrong member", [](json& d) {
                auto& op = opNamed(d, "layers.1.moe.to_experts.ep_dispatch@r0");
                for (const char* key : {"group", "inputs", "outputs"}) std::reverse(op[key].begin(), op[key].end());
            }, "layers.1.moe.to_experts.ep_dispatch@r0");
        row("expert gradient summed over its replicas", [](json& d) {
                opNamed(d, "bw.layers.1.moe.experts.w1.matmul.2.edp_allreduce@r0~ep1")["attrs"]["reduce"] = "sum";
            }, "bw.layers.1.moe.experts.w1.matmul.2.edp_allreduce@r0~ep1");
        row("every group updates the ZeRO parts of group 0", [](json& d) {
                for (auto& op : d["parallel"]["ops"]) op.erase("index_from_replica");
            }, "~dp1");
    }
    void expertGroupStoredMatchesWrittenOut() {
        QFETCH(Mutation, mutate);
        QFETCH(QString, failingOp);
        auto members = expandMembers(gen::generatePlan(deepseekOverReplicas(4, 2, 1)), nullptr);
        QVERIFY(members.problems.empty());
        QCOMPARE(members.members, 2);
        auto doc = members.doc;
        mutate(doc);
        auto plan = read(doc);
        QVERIFY(plan);
        QCOMPARE(plan->replication.listedDp, 2);
        QCOMPARE(plan->replication.degree, 2);
        storedAgreesWithWrittenOut(*plan, failingOp);
    }

    // The same plan read as the generator stores it, one member of each group (plan-format.md
    // §7.3), and verified so: a stage every member runs alike proven on member 0 (and on the
    // stored lane), the dispatch, the combine and the experts' norm written out over the members,
    // the reducers over everything. Verdict and failing stored op agree with the plan written
    // out, correct and with a mutation in each kind of op: a member's experts (every member's,
    // stored once), the expert and the dense reducers, the norm's all-reduce over the members.
    void membersStoredOnceMatchWrittenOut_data() {
        QTest::addColumn<Mutation>("mutate");
        QTest::addColumn<QString>("failingOp");  // empty: equivalent
        auto row = [](const char* name, Mutation m, const char* op) { QTest::newRow(name) << m << QString(op); };
        row("correct", [](json&) {}, "");
        row("the experts' activation", [](json& d) { opNamed(d, "layers.1.moe.experts.silu@r0")["op"] = "relu"; }, "layers.1.moe.experts.silu@r0");
        row("the experts' gate times up", [](json& d) { opNamed(d, "layers.1.moe.experts.swiglu@r0")["op"] = "add"; }, "layers.1.moe.experts.swiglu@r0");
        row("expert gradient summed over its replicas", [](json& d) {
                opNamed(d, "bw.layers.1.moe.experts.w1.matmul.2.edp_allreduce@r0")["attrs"]["reduce"] = "sum";
            }, "bw.layers.1.moe.experts.w1.matmul.2.edp_allreduce@r0");
        row("experts' squared norm averaged over the members", [](json& d) {
                for (auto& op : d["parallel"]["ops"])
                    if (op.value("across_members", false) && !op.value("across_replicas", false) && op["op"] == "all_reduce") {
                        op["attrs"]["reduce"] = "mean";
                        return;
                    }
                qFatal("no all-reduce across members");
            }, "ep_allreduce");
    }
    void membersStoredOnceMatchWrittenOut() {
        QFETCH(Mutation, mutate);
        QFETCH(QString, failingOp);
        auto doc = gen::generatePlan(deepseekOverReplicas(4, 2, 1, "1"));
        QCOMPARE(doc["parallel"]["replicas"].value("members", 0), 2);
        mutate(doc);
        auto res = readPlanJson(doc, ReadOptions{true});
        QVERIFY(res.ok());
        const auto& plan = *res.plan;
        QCOMPARE(plan.replication.members, 2);
        QCOMPARE(plan.replication.degree, 2);
        QCOMPARE(plan.replication.listedDp, 1);
        memberPlanAgreesWithWrittenOut(plan, failingOp);
    }

    // What a plan storing one member of each group means is its members written out: on the
    // document by the reader (expandMembers), on a plan read as stored by the verifier
    // (writeOutMembers). The two give the same plan, op for op and slice for slice.
    void memberWriteOutsAgree_data() {
        QTest::addColumn<int>("dp");
        QTest::addColumn<int>("tp");
        QTest::addColumn<int>("ep");
        QTest::addColumn<int>("zero");
        QTest::addColumn<QString>("clip");
        QTest::newRow("dp4 ep2 zero1 clipped") << 4 << 1 << 2 << 1 << "1";
        QTest::newRow("dp8 tp2 ep4 etp2 zero2") << 8 << 2 << 4 << 2 << "";
        QTest::newRow("dp2 ep2 zero3: one group") << 2 << 1 << 2 << 3 << "";
    }
    void memberWriteOutsAgree() {
        QFETCH(int, dp);
        QFETCH(int, tp);
        QFETCH(int, ep);
        QFETCH(int, zero);
        QFETCH(QString, clip);
        const auto doc = gen::generatePlan(deepseekOverReplicas(dp, ep, zero, clip.toStdString(), tp));
        QCOMPARE(doc["parallel"]["replicas"].value("members", 0), ep);
        auto listed = readPlanJson(doc);
        auto stored = readPlanJson(doc, ReadOptions{true});
        QVERIFY(listed.ok() && stored.ok());
        QCOMPARE(stored.plan->replication.members, ep);
        QCOMPARE(listed.plan->replication.listedDp, ep);
        const auto written = writeOutMembers(*stored.plan, nullptr, nullptr);
        QCOMPARE(written.replication.listedDp, ep);
        QCOMPARE(written.replication.members, 1);
        QCOMPARE(written.parallel.ops.size(), listed.plan->parallel.ops.size());
        QCOMPARE(writePlanText(written), writePlanText(*listed.plan));
        // And the whole plan written out, from either.
        QCOMPARE(writePlanText(expandReplicas(*stored.plan)), writePlanText(expandReplicas(*listed.plan)));
    }

    // Context parallelism stored as cp member 0 (plan-format.md §7.3, "member_axis": "cp"), read
    // as the verifier reads it: the stages every cp member runs alike (attention on its query
    // rows against the gathered K and V, the MLP, the norms) proven on member 0, the K/V
    // all-gathers, the cp reduce-scatters and the mask's and tables' chunks by member written out
    // over the members, the reducers over everything. Verdict, failing stored op and rank agree
    // with the plan written out, correct and with a mutation in each kind of stage.
    void cpMembersStoredOnceMatchWrittenOut_data() {
        QTest::addColumn<Mutation>("mutate");
        QTest::addColumn<QString>("failingOp");  // empty: equivalent
        auto row = [](const char* name, Mutation m, const char* op) { QTest::newRow(name) << m << QString(op); };
        row("correct", [](json&) {}, "");
        row("the stored member's mask add", [](json& d) { opNamed(d, "layers.1.attention.mask@r1")["op"] = "sub"; }, "layers.1.attention.mask@r1");
        row("every member takes the mask's first rows", [](json& d) {
                for (auto& op : d["parallel"]["ops"])
                    if (op["id"].get<std::string>().starts_with("attn.causal_mask.cp.chunk")) op.erase("index_from_member");
            }, "attn.causal_mask.cp.chunk");
        row("every member takes the rope table's first rows", [](json& d) {
                for (auto& op : d["parallel"]["ops"])
                    if (op["id"].get<std::string>().starts_with("rope.sin.cp.chunk")) op.erase("index_from_member");
            }, "rope.sin.cp.chunk");
        row("a gradient's cp reduce-scatter averages", [](json& d) {
                opNamed(d, "bw.layers.1.attention_norm.grad_sum.cp.reduce_scatter@r0")["attrs"]["reduce"] = "mean";
            }, "bw.layers.1.attention_norm.grad_sum.cp.reduce_scatter@r");  // one of the tp partial sum's two terms
        row("a dense reducer sums", [](json& d) {
                for (auto& op : d["parallel"]["ops"])
                    if (op.value("across_replicas", false) && op["op"] == "all_reduce") {
                        op["attrs"]["reduce"] = "sum";
                        return;
                    }
                qFatal("no all-reduce across replicas");
            }, "dp_allreduce");
    }
    void cpMembersStoredOnceMatchWrittenOut() {
        QFETCH(Mutation, mutate);
        QFETCH(QString, failingOp);
        auto doc = expandRepeats(gen::generatePlan(llamaOverCp(2, 2, 2, 1, 0))).doc;
        QCOMPARE(doc["parallel"]["replicas"].value("members", 0), 2);
        QCOMPARE(doc["parallel"]["replicas"].value("member_axis", std::string()), std::string("cp"));
        mutate(doc);
        auto res = readPlanJson(doc, ReadOptions{true});
        QVERIFY2(res.ok(), res.problems.empty() ? "" : res.problems.front().toString().c_str());
        const auto& plan = *res.plan;
        QCOMPARE(plan.replication.members, 2);
        QVERIFY(plan.replication.memberAxis == Axis::CP);
        QCOMPARE(plan.replication.memberRanks, 2);  // tp 2: member j is rank + 2j
        QCOMPARE(plan.replication.degree, 2);
        QCOMPARE(plan.replication.listedDp, 1);
        // Only cp member 0's ranks (cp coordinate 0) are listed.
        for (const auto& t : plan.parallel.tensors) QCOMPARE(plan.ranks[static_cast<std::size_t>(t.rank)].at(Axis::CP), 0);
        memberPlanAgreesWithWrittenOut(plan, failingOp);
    }

    // The two write-outs of cp members (the reader's on the document, the verifier's on the plan
    // read as stored) agree text for text, and so do the whole plans written out from them.
    void cpMemberWriteOutsAgree_data() {
        QTest::addColumn<int>("dp");
        QTest::addColumn<int>("cp");
        QTest::addColumn<int>("tp");
        QTest::addColumn<int>("pp");
        QTest::addColumn<int>("zero");
        QTest::newRow("dp2 cp2 tp2") << 2 << 2 << 2 << 1 << 0;
        QTest::newRow("dp2 cp4 pp2 zero1") << 2 << 4 << 1 << 2 << 1;
        QTest::newRow("dp1 cp2 tp2 pp2: microbatches only") << 1 << 2 << 2 << 2 << 0;
    }
    void cpMemberWriteOutsAgree() {
        QFETCH(int, dp);
        QFETCH(int, cp);
        QFETCH(int, tp);
        QFETCH(int, pp);
        QFETCH(int, zero);
        const auto doc = gen::generatePlan(llamaOverCp(dp, cp, tp, pp, zero));
        QCOMPARE(doc["parallel"]["replicas"].value("members", 0), cp);
        auto listed = readPlanJson(doc);
        auto stored = readPlanJson(doc, ReadOptions{true});
        QVERIFY(listed.ok() && stored.ok());
        QCOMPARE(listed.plan->membersStoredOnce, cp);
        QCOMPARE(listed.plan->replication.members, 1);
        QCOMPARE(listed.plan->replication.listedDp, 1);
        QCOMPARE(stored.plan->replication.members, cp);
        QCOMPARE(stored.plan->replication.memberRanks, tp);
        const auto written = writeOutMembers(*stored.plan, nullptr, nullptr);
        QCOMPARE(written.replication.members, 1);
        QCOMPARE(written.parallel.ops.size(), listed.plan->parallel.ops.size());
        QCOMPARE(writePlanText(written), writePlanText(*listed.plan));
        QCOMPARE(writePlanText(expandReplicas(*stored.plan)), writePlanText(expandReplicas(*listed.plan)));
        // Member j's copies carry "~cp<j>" and run on rank + j * tp, with cp coordinate j.
        const auto& P = listed.plan->parallel;
        std::size_t seen = 0;
        for (const auto& t : P.tensors) {
            const auto name = listed.plan->names.str(t.name);
            const auto at = name.find("~cp");
            const int j = at == std::string::npos ? 0 : std::stoi(name.substr(at + 3));
            QCOMPARE(listed.plan->ranks[static_cast<std::size_t>(t.rank)].at(Axis::CP), j);
            seen += j > 0 ? 1 : 0;
        }
        QCOMPARE(seen * static_cast<std::size_t>(cp), P.tensors.size() * static_cast<std::size_t>(cp - 1));
    }

    // Which stages replica 0 proves alone in a dp2 tp2 plan: the forward and backward data path,
    // the weight-gradient terms (a sum over the replicas: docs/soundness.md §5) and the
    // optimizer; not the reducers, which run across the replicas.
    void replicaZeroProvesOnlyReplicaLocalStages() {
        auto plan = read(gen::generatePlan(mlp(2, 2)));
        QVERIFY(plan);
        auto sp = cutStages(*plan);
        QVERIFY(sp.structural.empty());
        int local = 0, tied = 0, sums = 0;
        for (const auto& st : sp.stages) {
            std::string why;
            const bool alone = provenByReplicaZero(*plan, st, &why);
            const auto& rec = plan->lineage[st.output];
            bool across = false;
            for (auto op : st.parallelOps) across = across || plan->parallel.ops[op].acrossReplicas;
            // The loss adds up over the replicas too, but a cross-entropy is a mean over the
            // batch, not a sum of the lanes' own: written out.
            const bool loss = plan->logical.tensors[rec.logical].role == Role::Loss;
            if (across || loss) {
                QVERIFY2(!alone, plan->tensorName(plan->logical, rec.logical).c_str());
                QVERIFY(!why.empty());
                ++tied;
            } else {
                // A weight's gradient terms (`sum`) are a contraction over the batch: each
                // replica's part is its own rows' sum, proven on the stored lane's part.
                QVERIFY2(alone, (plan->tensorName(plan->logical, rec.logical) + ": " + why).c_str());
                ++local;
                if (rec.replicas == ReplicaMode::Sum) ++sums;
            }
        }
        QVERIFY(local > 2 * tied);
        QVERIFY(tied >= 6);  // five weights' reducers and the loss
        QVERIFY(sums >= 5);  // and their gradient terms
        const auto rep = verifyPlan(*plan);
        QVERIFY(rep.verdict == Verdict::Equivalent);
        QCOMPARE(static_cast<int>(rep.writtenOutStages), tied);
    }

    // A record whose replicas add up (`sum`) is proven from replica 0 only when the logical
    // value is a sum over the batch followed by maps linear in it: then the whole is the sum of
    // every lane's part, and each lane's part is replica 0's obligation moved along the batch.
    // Anything else (a max, an offset, an exp, a product of two sums) would let replica 0's
    // proof pass a plan whose replicas do not add up to the logical value: those stages are
    // written out, and the verdict must be the written-out plan's either way.
    void partialSumsOverTheReplicas_data() {
        QTest::addColumn<QString>("logicalTail");   // applied to s = sum(x, dim 0) in the logical plan
        QTest::addColumn<QString>("parallelTail");  // applied to replica 0's own sum
        QTest::addColumn<bool>("alone");
        QTest::addColumn<int>("verdict");
        const int eq = static_cast<int>(Verdict::Equivalent), ne = static_cast<int>(Verdict::NotEquivalent);
        QTest::newRow("sum") << "identity" << "identity" << true << eq;
        QTest::newRow("sum then scale") << "mul_scalar 3" << "mul_scalar 3" << true << eq;
        QTest::newRow("sum then neg") << "neg" << "neg" << true << eq;
        QTest::newRow("replica 0 scales wrong") << "mul_scalar 3" << "mul_scalar 2" << true << ne;
        QTest::newRow("an offset per replica") << "add_scalar 1" << "add_scalar 1" << false << ne;
        QTest::newRow("exp of the sum") << "exp" << "exp" << false << ne;
        QTest::newRow("square of the sum") << "square" << "square" << false << ne;
        QTest::newRow("max over the batch") << "max" << "max" << false << ne;
        QTest::newRow("contraction over the batch") << "matmul" << "matmul" << true << eq;
        QTest::newRow("contraction, wrong operand order") << "matmul" << "matmul swapped" << true << ne;
    }
    void partialSumsOverTheReplicas() {
        QFETCH(QString, logicalTail);
        QFETCH(QString, parallelTail);
        QFETCH(bool, alone);
        QFETCH(int, verdict);
        // x [8, 2] split over 4 replicas along the batch; g [8, 2] too (the contraction's other
        // operand); y [2] (or [2, 2]) is claimed as the sum of every replica's y@r0.
        json doc = json::parse(R"({
          "format": "trainverify-plan", "version": 2, "name": "partial-sums-dp4",
          "logical": {
            "tensors": [{"id": "x", "role": "input", "shape": [8, 2]}, {"id": "g", "role": "input", "shape": [8, 2]},
                        {"id": "xt", "shape": [2, 8]}, {"id": "s", "shape": [2]}, {"id": "y", "shape": [2]}],
            "ops": []},
          "parallel": {
            "mesh": {"dp": 4}, "microbatches": 1, "replicas": {"axis": "dp"},
            "tensors": [{"id": "x@r0", "rank": 0, "role": "input", "shape": [2, 2]}, {"id": "g@r0", "rank": 0, "role": "input", "shape": [2, 2]},
                        {"id": "xt@r0", "rank": 0, "shape": [2, 2]}, {"id": "s@r0", "rank": 0, "shape": [2]}, {"id": "y@r0", "rank": 0, "shape": [2]}],
            "ops": []},
          "lineage": [
            {"logical": "x", "replicas": {"split_dim": 0}, "slices": [{"box": [[0, 2], [0, 2]], "copies": [["x@r0"]]}]},
            {"logical": "g", "replicas": {"split_dim": 0}, "slices": [{"box": [[0, 2], [0, 2]], "copies": [["g@r0"]]}]},
            {"logical": "y", "replicas": "sum", "slices": [{"box": [[0, 2]], "copies": [["y@r0"]]}]}]
        })");
        auto tail = [](const QString& spec, const std::string& in, const std::string& out, const std::string& at) {
            const auto parts = spec.split(' ');
            json op = {{"id", "tail" + at}, {"op", parts[0].toStdString()}, {"inputs", {in}}, {"outputs", {out}}};
            if (parts[0] == "mul_scalar" || parts[0] == "add_scalar") op["attrs"] = {{"value", parts[1].toStdString()}};
            if (parts[0] == "square") op = {{"id", "tail" + at}, {"op", "mul"}, {"inputs", {in, in}}, {"outputs", {out}}};
            return op;
        };
        auto build = [&](json& side, const QString& spec, const std::string& at) {
            const int rank = at.empty() ? -1 : 0;
            auto add = [&](json op) {
                if (rank >= 0) op["rank"] = rank;
                side["ops"].push_back(std::move(op));
            };
            if (spec.startsWith(QStringLiteral("max"))) {
                add({{"id", "peak" + at}, {"op", "max"}, {"inputs", {"x" + at}}, {"outputs", {"y" + at}}, {"attrs", {{"dim", 0}}}});
                return;
            }
            if (spec.startsWith(QStringLiteral("matmul"))) {
                // y [2, 2] = x^T g: the weight gradient's shape of contraction over the batch.
                for (auto& t : side["tensors"])
                    if (t["id"] == "y" + at) t["shape"] = {2, 2};
                add({{"id", "flip" + at}, {"op", "transpose"}, {"inputs", {"x" + at}}, {"outputs", {"xt" + at}}, {"attrs", {{"dim0", 0}, {"dim1", 1}}}});
                if (spec.endsWith(QStringLiteral("swapped")))  // x^T g^T: each replica's rows against its own g, but crossed
                    add({{"id", "contract" + at}, {"op", "matmul"}, {"inputs", {"xt" + at, "g" + at}}, {"outputs", {"y" + at}}, {"attrs", {{"transpose_b", true}}}});
                else
                    add({{"id", "contract" + at}, {"op", "matmul"}, {"inputs", {"xt" + at, "g" + at}}, {"outputs", {"y" + at}}});
                return;
            }
            add({{"id", "total" + at}, {"op", "sum"}, {"inputs", {"x" + at}}, {"outputs", {"s" + at}}, {"attrs", {{"dims", {0}}}}});
            add(tail(spec, "s" + at, "y" + at, at));
        };
        build(doc["logical"], logicalTail, "");
        build(doc["parallel"], parallelTail, "@r0");
        if (logicalTail.startsWith(QStringLiteral("matmul"))) doc["lineage"][2]["slices"][0]["box"] = {{0, 2}, {0, 2}};
        auto plan = read(doc);
        QVERIFY(plan);
        auto sp = cutStages(*plan);
        QVERIFY(sp.structural.empty());
        QCOMPARE(sp.stages.size(), std::size_t(1));
        std::string why;
        std::unordered_map<TensorId, LaneSplit> splits;
        QCOMPARE(provenByReplicaZero(*plan, sp.stages[0], &why, &splits), alone);
        if (alone) {
            QVERIFY(splits.count(plan->logical.findTensor(plan->names.find("x"))));
            const auto r = checkStage(*plan, sp.stages[0], CheckOptions{});
            QCOMPARE(static_cast<int>(r.status == StageStatus::Equivalent ? Verdict::Equivalent : Verdict::NotEquivalent), verdict);
        } else {
            QVERIFY(!why.empty());
        }
        const auto rep = verifyPlan(*plan);
        QCOMPARE(static_cast<int>(rep.verdict), verdict);
        QCOMPARE(static_cast<int>(rep.writtenOutStages), alone ? 0 : 1);
        // Written out, every replica's term is summed against the whole batch: same verdict.
        QCOMPARE(static_cast<int>(verifyPlan(expandReplicas(*plan)).verdict), verdict);
    }

    // A logical op that depends on where along the batch a row is (here: the second half of the
    // batch is zeroed) makes replica 1's obligation differ from replica 0's. Replica 0 is right;
    // checking it alone would wrongly pass the plan.
    void positionDependentLogicalOpsTieReplicasTogether() {
        const json doc = json::parse(R"({
          "format": "trainverify-plan", "version": 2, "name": "zero-second-half",
          "logical": {
            "tensors": [{"id": "x", "role": "input", "shape": [4, 2]},
                        {"id": "a", "shape": [2, 2]}, {"id": "z", "shape": [2, 2]}, {"id": "y", "shape": [4, 2]}],
            "ops": [{"id": "first", "op": "slice", "inputs": ["x"], "outputs": ["a"], "attrs": {"dim": 0, "start": 0, "end": 2}},
                    {"id": "zeros", "op": "zeros_like", "inputs": ["a"], "outputs": ["z"]},
                    {"id": "join", "op": "concat", "inputs": ["a", "z"], "outputs": ["y"], "attrs": {"dim": 0}}]},
          "parallel": {
            "mesh": {"dp": 2}, "microbatches": 1, "replicas": {"axis": "dp"},
            "ranks": [{"rank": 0, "dp": 0}, {"rank": 1, "dp": 1}],
            "tensors": [{"id": "x@r0", "rank": 0, "role": "input", "shape": [2, 2]}, {"id": "y@r0", "rank": 0, "shape": [2, 2]}],
            "ops": [{"id": "copy@r0", "op": "identity", "rank": 0, "inputs": ["x@r0"], "outputs": ["y@r0"]}]},
          "lineage": [
            {"logical": "x", "replicas": {"split_dim": 0}, "slices": [{"box": [[0, 2], [0, 2]], "copies": [["x@r0"]]}]},
            {"logical": "y", "replicas": {"split_dim": 0}, "slices": [{"box": [[0, 2], [0, 2]], "copies": [["y@r0"]]}]}]
        })");
        auto plan = read(doc);
        QVERIFY(plan);
        auto sp = cutStages(*plan);
        QCOMPARE(sp.stages.size(), std::size_t(1));
        std::string why;
        QVERIFY(!provenByReplicaZero(*plan, sp.stages[0], &why));
        QVERIFY2(QString::fromStdString(why).contains(QStringLiteral("first")), why.c_str());
        const auto rep = verifyPlan(*plan);
        QVERIFY(rep.verdict == Verdict::NotEquivalent);
        QVERIFY(rep.failure);
        QCOMPARE(QString::fromStdString(rep.failure->parallelOp), QStringLiteral("copy@r0~dp1"));
        QCOMPARE(rep.failure->rank, 1);
    }

    // A stage replica 0 proves alone is checked on the stored lane's part of each logical tensor
    // split across the replicas, not on the whole batch: here a quarter of x and y. Counted in
    // the stage's elements after shape reduction (16, where the whole logical tensors make the
    // smallest shapes 40), and still NOT EQUIVALENT when the stored lane computes something else.
    void storedLaneIsCheckedOnItsPart_data() {
        QTest::addColumn<QString>("parallelOp");
        QTest::addColumn<int>("verdict");
        QTest::newRow("relu") << "relu" << static_cast<int>(Verdict::Equivalent);
        QTest::newRow("neg instead") << "neg" << static_cast<int>(Verdict::NotEquivalent);
    }
    void storedLaneIsCheckedOnItsPart() {
        QFETCH(QString, parallelOp);
        QFETCH(int, verdict);
        json doc = json::parse(R"({
          "format": "trainverify-plan", "version": 2, "name": "relu-dp4",
          "logical": {
            "tensors": [{"id": "x", "role": "input", "shape": [8, 2]}, {"id": "y", "shape": [8, 2]}],
            "ops": [{"id": "act", "op": "relu", "inputs": ["x"], "outputs": ["y"]}]},
          "parallel": {
            "mesh": {"dp": 4}, "microbatches": 1, "replicas": {"axis": "dp"},
            "tensors": [{"id": "x@r0", "rank": 0, "role": "input", "shape": [2, 2]}, {"id": "y@r0", "rank": 0, "shape": [2, 2]}],
            "ops": [{"id": "act@r0", "op": "relu", "rank": 0, "inputs": ["x@r0"], "outputs": ["y@r0"]}]},
          "lineage": [
            {"logical": "x", "replicas": {"split_dim": 0}, "slices": [{"box": [[0, 2], [0, 2]], "copies": [["x@r0"]]}]},
            {"logical": "y", "replicas": {"split_dim": 0}, "slices": [{"box": [[0, 2], [0, 2]], "copies": [["y@r0"]]}]}]
        })");
        doc["parallel"]["ops"][0]["op"] = parallelOp.toStdString();
        auto plan = read(doc);
        QVERIFY(plan);
        auto sp = cutStages(*plan);
        QCOMPARE(sp.stages.size(), std::size_t(1));
        std::unordered_map<TensorId, LaneSplit> splits;
        QVERIFY(provenByReplicaZero(*plan, sp.stages[0], nullptr, &splits));
        QCOMPARE(splits.size(), std::size_t(2));
        for (const auto& [t, s] : splits) {
            QCOMPARE(s.dim, 0);
            QCOMPARE(s.lanes, 4);
        }
        const auto r = checkStage(*plan, sp.stages[0], CheckOptions{});
        QCOMPARE(static_cast<int>(r.status == StageStatus::Equivalent ? Verdict::Equivalent : Verdict::NotEquivalent), verdict);
        QCOMPARE(r.fullElements, std::uint64_t{40});
        QCOMPARE(r.reducedElements, std::uint64_t{16});
        // Written out, every replica's quarter is checked against the whole tensors: same verdict.
        QCOMPARE(static_cast<int>(verifyPlan(expandReplicas(*plan)).verdict), verdict);
    }

    // The stored lane's part is checked with every constant an op takes from its tensors' sizes
    // computed from the whole plan (EvalContext's original shapes, not the cut ones): the logical
    // cross-entropy backward divides by all 4 rows, so replica 0's part needs its own 1/2 scaled
    // by 1/2 (the data-parallel mean). Left out (the classic "loss not averaged over replicas"),
    // the plan is NOT EQUIVALENT, in the cut stage. Computed from the cut (2 rows), the logical
    // side would divide by 2, and the wrong plan would pass while the right one failed.
    void storedLaneKeepsTheWholeBatchsConstants_data() {
        QTest::addColumn<bool>("averaged");
        QTest::newRow("averaged over the replicas") << true;
        QTest::newRow("not averaged") << false;
    }
    void storedLaneKeepsTheWholeBatchsConstants() {
        QFETCH(bool, averaged);
        json doc = json::parse(R"({
          "format": "trainverify-plan", "version": 2, "name": "ce-backward-dp2",
          "logical": {
            "tensors": [{"id": "x", "role": "input", "shape": [4, 3]}, {"id": "y", "role": "input", "dtype": "int", "shape": [4]},
                        {"id": "g", "role": "input", "shape": []}, {"id": "dx", "role": "gradient", "shape": [4, 3]}],
            "ops": [{"id": "ce_bw", "op": "cross_entropy_backward", "inputs": ["x", "y", "g"], "outputs": ["dx"]}]},
          "parallel": {
            "mesh": {"dp": 2}, "microbatches": 1, "replicas": {"axis": "dp"},
            "tensors": [{"id": "x@r0", "rank": 0, "role": "input", "shape": [2, 3]}, {"id": "y@r0", "rank": 0, "role": "input", "dtype": "int", "shape": [2]},
                        {"id": "g@r0", "rank": 0, "role": "input", "shape": []}, {"id": "d@r0", "rank": 0, "role": "gradient", "shape": [2, 3]},
                        {"id": "dx@r0", "rank": 0, "role": "gradient", "shape": [2, 3]}],
            "ops": [{"id": "ce_bw@r0", "op": "cross_entropy_backward", "rank": 0, "inputs": ["x@r0", "y@r0", "g@r0"], "outputs": ["d@r0"]},
                    {"id": "mean@r0", "op": "mul_scalar", "rank": 0, "inputs": ["d@r0"], "outputs": ["dx@r0"], "attrs": {"value": "1/2"}}]},
          "lineage": [
            {"logical": "x", "replicas": {"split_dim": 0}, "slices": [{"box": [[0, 2], [0, 3]], "copies": [["x@r0"]]}]},
            {"logical": "y", "replicas": {"split_dim": 0}, "slices": [{"box": [[0, 2]], "copies": [["y@r0"]]}]},
            {"logical": "g", "replicas": "copies", "slices": [{"box": [], "copies": [["g@r0"]]}]},
            {"logical": "dx", "replicas": {"split_dim": 0}, "slices": [{"box": [[0, 2], [0, 3]], "copies": [["dx@r0"]]}]}]
        })");
        if (!averaged) doc["parallel"]["ops"][1]["attrs"]["value"] = "1";
        auto plan = read(doc);
        QVERIFY(plan);
        auto sp = cutStages(*plan);
        QVERIFY(sp.structural.empty());
        QCOMPARE(sp.stages.size(), std::size_t(1));
        std::unordered_map<TensorId, LaneSplit> splits;
        QVERIFY(provenByReplicaZero(*plan, sp.stages[0], nullptr, &splits));
        QVERIFY(splits.count(plan->logical.findTensor(plan->names.find("x"))));
        const auto r = checkStage(*plan, sp.stages[0], CheckOptions{});
        QVERIFY2((r.status == StageStatus::Equivalent) == averaged, r.failure ? r.failure->message.c_str() : "equivalent");
        QVERIFY(r.reducedElements < r.fullElements || r.fullElements <= 16);
        QCOMPARE(verifyPlan(expandReplicas(*plan)).verdict == Verdict::Equivalent, averaged);
    }

    // Checked as stored, a wide data-parallel plan never writes its replicas out.
    void wideDataParallelStaysSmall() {
        auto plan = read(gen::generatePlan(mlp(64)));
        QVERIFY(plan);
        const auto rep = verifyPlan(*plan);
        QVERIFY(rep.verdict == Verdict::Equivalent);
        QCOMPARE(rep.passed, static_cast<std::uint32_t>(rep.results.size()));
        QVERIFY(rep.writtenOutStages > 0);
        QVERIFY(rep.writtenOutStages < rep.results.size());
    }
};

QTEST_GUILESS_MAIN(TestSymmetry)
#include "tst_symmetry.moc"
