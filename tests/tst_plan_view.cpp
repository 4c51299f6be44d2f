// The explorer's Qt-free model: the Graphviz facade on a known small graph, and the nodes,
// lineage edges and groups built for each bundled example.
#include <QtTest>
#include <QRegularExpression>
#include <QDir>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <map>
#include <set>

#include <atomic>
#include <thread>

#include "bugs/bug_catalog.hpp"
#include "explore/pane_alignment.hpp"
#include "explore/plan_twins.hpp"
#include "helper_process_main.hpp"
#include "layout/layered_layout.hpp"
#include "process/helper_process.hpp"
#include "explore/lessons.hpp"
#include "explore/verified_view.hpp"
#include "verify/symmetry.hpp"
#include "explore/plan_view.hpp"
#include "io/plan_json.hpp"
#include "generate/generator.hpp"
#include "model/instance_names.hpp"

using namespace tv;

namespace {
std::unique_ptr<Plan> load(const QString& name) {
    auto r = readPlanFile(std::string(TV_SOURCE_DIR) + "/resources/examples/" + name.toStdString());
    if (!r.ok()) qFatal("cannot load %s", qPrintable(name));
    return std::move(r.plan);
}

/// A plan and its buggy twin, and the parallel ops the bug is at.
struct Twins {
    std::unique_ptr<Plan> correct, buggy;
    std::vector<std::string> bugOps;
    QString problem;  ///< why they did not load
};

/// A lesson's pair (`bug` empty): the ops its buggy plan's expect block names (bug.site, or for
/// the hand-made ones failure.parallel_op). Or a mutant of `correct` made by the bug catalog
/// (`buggy` empty): the ops the mutation says it edited.
Twins loadTwins(const QString& correct, const QString& buggy, const QString& bug) {
    Twins t;
    auto a = readPlanFile(correct.toStdString());
    if (!a.ok()) {
        t.problem = QStringLiteral("cannot load ") + correct;
        return t;
    }
    t.correct = std::move(a.plan);
    if (!bug.isEmpty()) {
        auto m = bugs::mutate(*t.correct, bug.toStdString());
        if (!m.mutant || !m.mutant->plan) {
            t.problem = QStringLiteral("no mutant: ") + QString::fromStdString(m.refused ? m.refused->toString() : std::string("the reader rejects it"));
            return t;
        }
        t.buggy = std::move(m.mutant->plan);
        t.bugOps = m.mutant->expect.edited;
        return t;
    }
    auto b = readPlanFile(buggy.toStdString());
    if (!b.ok()) {
        t.problem = QStringLiteral("cannot load ") + buggy;
        return t;
    }
    t.buggy = std::move(b.plan);
    const auto& e = t.buggy->expect;
    if (e.is_object() && e.contains("bug") && e["bug"].contains("site"))
        for (const auto& op : e["bug"]["site"]) t.bugOps.push_back(op.get<std::string>());
    else if (e.is_object() && e.contains("failure") && e["failure"].contains("parallel_op"))
        t.bugOps.push_back(e["failure"]["parallel_op"].get<std::string>());
    return t;
}

/// The twin rows: every lesson, and a mutant of the bug catalog; with what the diff must say of
/// one op (what and a part of its detail) and, if any, a logical tensor whose lineage differs.
void addTwinColumns() {
    QTest::addColumn<QString>("correct");
    QTest::addColumn<QString>("buggy");
    QTest::addColumn<QString>("bug");
    QTest::addColumn<QString>("op");
    QTest::addColumn<QString>("what");
    QTest::addColumn<QString>("detail");
    QTest::addColumn<QString>("lineage");
    QTest::addColumn<bool>("collapsed");
}
void addTwinRows() {
    struct Said {
        const char *op, *what, *detail, *lineage;
    };
    const std::map<std::string, Said> said{
        {"tp-allreduce", {"fc2_allreduce", "removed", "", "logits"}},
        {"dp-averaging", {"dw2_allreduce", "changed", "attribute reduce: \"mean\" → \"sum\"", ""}},
        {"pp-accumulation", {"accumulate_dw1@r0", "changed", "kind add → identity", ""}},
        {"sp-norm-grads", {"bw.layers.0.attention_norm.rmsnorm_backward.1.all_reduce@r0", "changed", "kind all_reduce → identity", ""}},
        {"ep-all-to-all", {"layers.1.moe.to_experts.all_to_all@r0", "changed", "ranks 0, 1 → 1, 0", ""}},
        {"zero-sharding", {"bw.layers.0.fc1.matmul.2.dp_chunk@r0", "changed", "index from replica: yes → no", ""}},
    };
    const auto lessons = loadLessons(TV_SOURCE_DIR "/resources/lessons");
    if (!lessons.ok() || lessons.lessons.empty()) qFatal("the lessons do not load");
    for (const auto& l : lessons.lessons) {
        auto it = said.find(l.id);
        const Said s = it == said.end() ? Said{"", "", "", ""} : it->second;
        QTest::newRow(l.id.c_str()) << QString::fromStdString(l.correct) << QString::fromStdString(l.buggy) << QString() << s.op << s.what << s.detail
                                    << s.lineage << false;
    }
    QTest::newRow("mutant tp-allreduce-identity") << QStringLiteral(TV_SOURCE_DIR "/resources/examples/mlp-tp2.json") << QString()
                                                  << "tp-allreduce-identity" << "fc2_allreduce" << "changed" << "kind all_reduce → identity" << ""
                                                  << false;
}

/// The key a node has in both pictures of a pair: side, kind, and its name (a collapsed layer's
/// name is the same in every rank and microbatch: its layer key).
std::string twinKey(const PlanView& v, int node) {
    const auto& n = v.nodes[node];
    const std::string name = n.kind == ViewNodeKind::CollapsedLayer ? v.layers[n.id].key : n.name;
    return std::to_string(static_cast<int>(n.side)) + "/" + std::to_string(static_cast<int>(n.kind)) + "/" + name;
}

bool overlap(const Rect& a, const Rect& b) {
    return a.x < b.x + b.width - 1e-6 && b.x < a.x + a.width - 1e-6 && a.y < b.y + b.height - 1e-6 && b.y < a.y + a.height - 1e-6;
}
/// Within a point: dot is given sizes in inches to 6 digits (254 points come back 254.00016).
bool inside(const Rect& a, const Rect& b) {
    constexpr double slack = 1.0;
    return a.x >= b.x - slack && a.y >= b.y - slack && a.x + a.width <= b.x + b.width + slack && a.y + a.height <= b.y + b.height + slack;
}
bool same(const Rect& a, const Rect& b) { return a.x == b.x && a.y == b.y && a.width == b.width && a.height == b.height; }

/// What is wrong with the bundles of a placed view (empty: nothing), as bundlesCarryTheirEdges
/// checks them: every collapsed-rank edge whose other end is a collapsed rank or in a rank box is
/// in exactly one bundle, no other edge is, a bundle's members share its ends, its count is their
/// tensors, they are not drawn alone, and its path runs from the collapsed node to the other end.
QString bundleProblem(const PlanView& view, const PlacedView& placed) {
    const std::size_t logical = view.logicalEdges.size();
    std::vector<int> bundleOf(logical + view.parallelEdges.size(), -1);
    auto on = [](const Rect& r, const Point& p) { return p.x >= r.x - 1e-6 && p.x <= r.x + r.width + 1e-6 && p.y >= r.y - 1e-6 && p.y <= r.y + r.height + 1e-6; };
    for (std::size_t b = 0; b < placed.bundles.size(); ++b) {
        const auto& bundle = placed.bundles[b];
        const QString which = QStringLiteral("bundle %1: ").arg(b);
        if (view.nodes[bundle.collapsed].kind != ViewNodeKind::CollapsedRank) return which + "not at a collapsed rank";
        if ((bundle.otherNode >= 0) == (bundle.otherGroup >= 0)) return which + "other end is not one node or one group";
        std::uint32_t tensors = 0;
        for (auto k : bundle.members) {
            if (k < logical || k >= bundleOf.size()) return which + "a member that is not a parallel edge";
            if (bundleOf[k] >= 0) return which + QStringLiteral("edge %1 is in two bundles").arg(k);
            bundleOf[k] = static_cast<int>(b);
            const auto& e = view.parallelEdges[k - logical];
            if ((bundle.outgoing ? e.from : e.to) != bundle.collapsed) return which + "a member not at its collapsed rank";
            const int other = bundle.outgoing ? e.to : e.from;
            bool inBox = bundle.otherNode >= 0 ? other == bundle.otherNode : false;
            if (bundle.otherNode < 0)
                for (int g = view.nodes[other].group; g >= 0; g = view.groups[g].parent) inBox = inBox || g == bundle.otherGroup;
            if (!inBox) return which + "a member's other end is elsewhere";
            tensors += e.tensors;
            if (!placed.dataflowPaths[k].empty()) return which + "a member is drawn alone";
        }
        if (bundle.tensors != tensors) return which + "wrong tensor count";
        if (bundle.path.size() != 4) return which + "not one cubic";
        const auto& start = bundle.outgoing ? bundle.path.front() : bundle.path.back();
        const auto& end = bundle.outgoing ? bundle.path.back() : bundle.path.front();
        if (!on(placed.nodeRects[bundle.collapsed], start)) return which + "does not start at its collapsed rank";
        if (!on(bundle.otherNode >= 0 ? placed.nodeRects[bundle.otherNode] : placed.groupRects[bundle.otherGroup], end)) return which + "does not end at its other end";
    }
    for (std::size_t k = logical; k < bundleOf.size(); ++k) {
        const auto& e = view.parallelEdges[k - logical];
        const bool folded = view.nodes[e.from].kind == ViewNodeKind::CollapsedRank || view.nodes[e.to].kind == ViewNodeKind::CollapsedRank;
        bool boxed = false;
        if (folded) {
            const int other = view.nodes[e.from].kind == ViewNodeKind::CollapsedRank ? e.to : e.from;
            boxed = view.nodes[other].kind == ViewNodeKind::CollapsedRank;
            for (int g = view.nodes[other].group; g >= 0 && !boxed; g = view.groups[g].parent) boxed = view.groups[g].kind == ViewGroupKind::Rank;
        }
        if ((bundleOf[k] >= 0) != boxed) return QStringLiteral("edge %1 is %2 a bundle").arg(k).arg(boxed ? "not in" : "in");
    }
    return {};
}
}  // namespace

class TestPlanView : public QObject {
    Q_OBJECT
private slots:
    // A plan stored once is verified as stored and drawn written out: every drawn stage maps to the
    // stored stage proving the same record, and every stored stage is drawn at least once (once per
    // lane when it is per lane).
    void drawnStagesMapToVerifiedStages_data() {
        QTest::addColumn<QString>("file");
        QTest::newRow("lanes") << "mlp-dp2-pp2-nm4-lanes.json";
        QTest::newRow("repeats") << "llama3-l4-dp2-tp2-pp2-nm2-repeats.json";
        QTest::newRow("not stored") << "mlp-tp2.json";
    }
    void drawnStagesMapToVerifiedStages() {
        QFETCH(QString, file);
        auto stored = load(file);
        const auto storedStages = cutStages(*stored);
        const Plan drawn = expandReplicas(*stored);
        const auto drawnStages = cutStages(drawn);
        const auto map = mapDrawnStages(drawn, drawnStages, *stored, storedStages);
        QCOMPARE(map.size(), drawnStages.stages.size());
        std::vector<int> hits(storedStages.stages.size(), 0);
        for (std::size_t d = 0; d < map.size(); ++d) {
            QVERIFY(map[d] < storedStages.stages.size());
            QCOMPARE(storedStages.stages[map[d]].output, drawnStages.stages[d].output);  // the same record
            ++hits[map[d]];
        }
        for (int h : hits) QVERIFY(h >= 1);
        if (stored->replication.active()) QVERIFY(drawnStages.stages.size() >= storedStages.stages.size());
        // The same plan drawn and verified: the identity.
        const auto self = mapDrawnStages(*stored, storedStages, *stored, storedStages);
        for (std::uint32_t i = 0; i < self.size(); ++i) QCOMPARE(self[i], i);
    }

    // A diagnosis's names resolve in the drawn plan: an instance name as such when the plan is drawn
    // written out, as its stored op when it is drawn as stored; the counterpart and the other end too.
    void failuresLocateInTheDrawnPlan() {
        auto stored = load("mlp-dp2-pp2-nm4-lanes.json");
        const Plan drawn = expandReplicas(*stored);
        // An instance that exists only written out.
        std::string instance;
        for (OpId op = 0; op < drawn.parallel.ops.size() && instance.empty(); ++op)
            if (drawn.opName(drawn.parallel, op).find("~dp1") != std::string::npos) instance = drawn.opName(drawn.parallel, op);
        QVERIFY(!instance.empty());
        Failure f;
        f.parallelOp = instance;
        f.logicalOp = drawn.opName(drawn.logical, 0);
        f.otherEndTensor = drawn.tensorName(drawn.parallel, 0);
        bool asStored = true;
        QCOMPARE(drawnOp(drawn, drawn.parallel, instance, &asStored), drawn.parallel.findOp(drawn.names.find(instance)));
        QVERIFY(!asStored);
        auto focus = locateFailure(drawn, f);
        QCOMPARE(drawn.opName(drawn.parallel, focus.failingOp), instance);
        QCOMPARE(focus.counterpart, OpId(0));
        QCOMPARE(focus.otherEnd, TensorId(0));
        QVERIFY(!focus.otherEndLogical);
        focus = locateFailure(*stored, f);
        QVERIFY(focus.failingOpAsStored);
        QCOMPARE(stored->opName(stored->parallel, focus.failingOp), instance::storedName(instance));
        // A logical tensor stands for its producer when the failure names no logical op.
        Failure g;
        g.tensor = drawn.tensorName(drawn.logical, drawn.logical.outputs(0)[0]);
        QCOMPARE(locateFailure(drawn, g).counterpart, OpId(0));
        QCOMPARE(locateFailure(drawn, Failure{}).failingOp, kNone);
    }

    // A plan storing cp members once is drawn with its members written out ("x~cp1" is an op of
    // its own there); a diagnosis in a stage written out over the replicas names "x~cp1~dp1",
    // which is member 1's op, not member 0's.
    void failuresLocateAtTheMemberTheyNameInAMemberPlan() {
        gen::GenerateOptions o;
        o.model = "llama3";
        o.layers = 1;
        o.dp = 2;
        o.cp = 2;
        o.format = 2;
        auto read = readPlanJson(gen::generatePlan(o));
        QVERIFY(read.ok());
        const Plan& drawn = *read.plan;
        QCOMPARE(drawn.membersStoredOnce, 2);
        std::string member1;
        for (OpId op = 0; op < drawn.parallel.ops.size() && member1.empty(); ++op)
            if (drawn.opName(drawn.parallel, op).ends_with("~cp1")) member1 = drawn.opName(drawn.parallel, op);
        QVERIFY(!member1.empty());
        Failure f;
        f.parallelOp = member1 + instance::writtenOutSuffix(0, 1);
        const auto focus = locateFailure(drawn, f);
        QVERIFY(focus.failingOpAsStored);
        QCOMPARE(drawn.opName(drawn.parallel, focus.failingOp), member1);
    }

    // The bundled lessons load; a broken manifest is reported with file and JSON path, never thrown.
    void lessonsLoadAndReportProblems_data() {
        QTest::addColumn<QString>("manifest");
        QTest::addColumn<QString>("problem");
        QTest::newRow("not json") << "{" << "not a JSON object";
        QTest::newRow("format a number") << R"({"format": 1, "version": 1, "lessons": []})" << "/format";
        QTest::newRow("lessons not an array") << R"({"format": "trainverify-lessons", "version": 1, "lessons": {}})" << "/lessons must be an array";
        QTest::newRow("missing title")
            << R"({"format": "trainverify-lessons", "version": 1, "lessons": [{"id": "a", "correct": "c.json", "buggy": "b.json", "explanation": "x"}]})"
            << "/lessons/0/title: missing";
        QTest::newRow("no such plan")
            << R"({"format": "trainverify-lessons", "version": 1, "lessons": [{"id": "a", "title": "t", "correct": "c.json", "buggy": "gone.json", "explanation": "x"}]})"
            << "/lessons/0/buggy: no plan file";
    }
    void lessonsLoadAndReportProblems() {
        QFETCH(QString, manifest);
        QFETCH(QString, problem);
        const auto bundled = loadLessons(TV_SOURCE_DIR "/resources/lessons");
        QVERIFY(bundled.ok());
        QCOMPARE(bundled.lessons.size(), std::size_t(7));
        for (const auto& l : bundled.lessons) QVERIFY(!l.explanation.empty() && !l.correct.empty() && !l.buggy.empty());
        QTemporaryDir dir;
        std::ofstream(dir.filePath("c.json").toStdString()) << "{}";
        std::ofstream(dir.filePath("lessons.json").toStdString()) << manifest.toStdString();
        const auto list = loadLessons(dir.path().toStdString());
        QVERIFY(!list.ok());
        QVERIFY(list.lessons.empty());
        const auto first = QString::fromStdString(list.problems.front().toString());
        QVERIFY2(first.contains(problem), qPrintable(first));
        QVERIFY(QString::fromStdString(list.problems.front().path).contains("lessons.json"));
    }

    void layoutOfAChain() {
        LayoutRequest req;
        req.clusters.push_back({"group", -1});
        req.nodes = {{72, 36, 0}, {72, 36, 0}, {144, 36, -1}};
        req.edges = {{0, 1, true}, {1, 2, true}};
        auto res = layoutGraph(req);
        QVERIFY2(res.error.empty(), res.error.c_str());
        QCOMPARE(res.nodeCenters.size(), std::size_t(3));
        // Top to bottom, with y flipped so it grows downwards as in Qt.
        QVERIFY(res.nodeCenters[0].y < res.nodeCenters[1].y);
        QVERIFY(res.nodeCenters[1].y < res.nodeCenters[2].y);
        QVERIFY(std::abs(res.nodeCenters[0].x - res.nodeCenters[1].x) < 1.0);
        // Rank separation: centres are at least one node height plus the rank gap apart.
        QVERIFY(res.nodeCenters[1].y - res.nodeCenters[0].y >= 36 + req.rankSeparation - 1);
        for (const auto& p : res.nodeCenters) {
            QVERIFY(p.x >= 0 && p.x <= res.bounds.width);
            QVERIFY(p.y >= 0 && p.y <= res.bounds.height);
        }
        const auto& box = res.clusterBoxes[0];
        for (int i : {0, 1}) {
            QVERIFY(res.nodeCenters[i].x > box.x && res.nodeCenters[i].x < box.x + box.width);
            QVERIFY(res.nodeCenters[i].y > box.y && res.nodeCenters[i].y < box.y + box.height);
        }
        QVERIFY(res.nodeCenters[2].y > box.y + box.height);
        for (const auto& path : res.edgePaths) {
            QVERIFY(path.size() >= 4);
            QCOMPARE((path.size() - 1) % 3, std::size_t(0));
        }
        // The edge leaves node 0 downwards and ends at node 1.
        QVERIFY(res.edgePaths[0].front().y < res.edgePaths[0].back().y);
    }

    /// A request past the layout bound is refused before Graphviz sees it (dot cannot be
    /// interrupted: expanding every rank and layer of a big plan ran 17 minutes), naming both
    /// counts; a request within it is laid out.
    void layoutIsBounded() {
        LayoutRequest over;
        over.nodes.resize(kMaxLayoutNodes + 1);
        auto res = layoutGraph(over);
        QVERIFY(!res.error.empty());
        QVERIFY2(res.error.find(std::to_string(kMaxLayoutNodes + 1) + " nodes") != std::string::npos, res.error.c_str());
        QVERIFY(res.nodeCenters.empty());
        LayoutRequest edges;
        edges.nodes.resize(2);
        edges.edges.assign(kMaxLayoutEdges + 1, LayoutEdge{0, 1, true});
        QVERIFY(!layoutGraph(edges).error.empty());
        // A chain at the edge bound's scale, well under the node bound, is laid out.
        LayoutRequest chain;
        chain.nodes.resize(200);
        for (int i = 0; i + 1 < 200; ++i) chain.edges.push_back({i, i + 1, true});
        auto ok = layoutGraph(chain);
        QVERIFY2(ok.error.empty(), ok.error.c_str());
        QCOMPARE(ok.nodeCenters.size(), std::size_t(200));
    }

    /// A clustered graph dot takes minutes on (crossing minimisation unbounded), well under the
    /// layout bound: what the stop and budget tests stop half-way.
    static LayoutRequest slowRequest() {
        LayoutRequest q;
        const int clusters = 60, nodes = 4800;
        for (int c = 0; c < clusters; ++c) q.clusters.push_back({"c" + std::to_string(c), c % 6 == 0 ? -1 : c - c % 6});
        for (int i = 0; i < nodes; ++i) q.nodes.push_back({40, 20, i % clusters});
        unsigned x = 12345;
        for (int i = 0; i < 3 * nodes; ++i) {
            x = x * 1103515245u + 12345u;
            const int a = static_cast<int>((x >> 8) % nodes);
            x = x * 1103515245u + 12345u;
            const int b = static_cast<int>((x >> 8) % nodes);
            if (a != b) q.edges.push_back({std::min(a, b), std::max(a, b), true});
        }
        return q;
    }

    /// A layout process lays out a view the same way every time (a fresh Graphviz for each side:
    /// in one process dot keeps state from one layout to the next, and the same view came out
    /// three ways), and what it sends reads back exactly (CBOR, doubles as they are).
    void layoutProcessesAreReproducibleAndExact() {
        auto plan = readPlanFile(TV_SOURCE_DIR "/resources/examples/gpt2-pp2.json").plan;
        QVERIFY(plan);
        const auto stages = cutStages(*plan);
        const auto view = buildPlanView(*plan, stages, ViewOptions{});
        LayoutControl control;
        control.program = thisProgram();
        std::vector<std::size_t> sizes;
        control.onRequest = [&](std::size_t side, std::size_t nodes, std::size_t) {
            QCOMPARE(side, sizes.size() % 2);
            sizes.push_back(nodes);
        };
        const auto first = placePlanView(view, 240, &control);
        QVERIFY2(first.error.empty(), first.error.c_str());
        const auto second = placePlanView(view, 240, &control);
        QVERIFY2(second.error.empty(), second.error.c_str());
        QCOMPARE(sizes.size(), std::size_t(4));  // the logical side, then the parallel side, twice
        QCOMPARE(second.nodeRects.size(), first.nodeRects.size());
        for (std::size_t i = 0; i < first.nodeRects.size(); ++i) {
            QCOMPARE(second.nodeRects[i].x, first.nodeRects[i].x);
            QCOMPARE(second.nodeRects[i].y, first.nodeRects[i].y);
        }
        QCOMPARE(second.dataflowPaths.size(), first.dataflowPaths.size());
        for (std::size_t i = 0; i < first.dataflowPaths.size(); ++i) {
            QCOMPARE(second.dataflowPaths[i].size(), first.dataflowPaths[i].size());
            for (std::size_t k = 0; k < first.dataflowPaths[i].size(); ++k) QCOMPARE(second.dataflowPaths[i][k].y, first.dataflowPaths[i][k].y);
        }
        QCOMPARE(second.parallelBounds.width, first.parallelBounds.width);
        // A result crosses the socket bit for bit.
        std::vector<int> map;
        const auto here = layoutGraph(view.layoutRequest(ViewSide::Parallel, map));
        QVERIFY(here.error.empty());
        const auto back = layoutResultFromBytes(layoutResultBytes(here));
        QCOMPARE(back.nodeCenters.size(), here.nodeCenters.size());
        for (std::size_t i = 0; i < here.nodeCenters.size(); ++i) QVERIFY(back.nodeCenters[i].x == here.nodeCenters[i].x);
        QCOMPARE(back.edgePaths.size(), here.edgePaths.size());
        for (std::size_t i = 0; i < here.edgePaths.size(); ++i) QVERIFY(back.edgePaths[i].size() == here.edgePaths[i].size());
        QCOMPARE(back.clusterBoxes.size(), here.clusterBoxes.size());
        QVERIFY(back.bounds.width == here.bounds.width);
        // So does a request.
        const auto q = slowRequest();
        const auto sent = layoutRequestFromBytes(layoutRequestBytes(q));
        QCOMPARE(sent.nodes.size(), q.nodes.size());
        QCOMPARE(sent.edges.size(), q.edges.size());
        QCOMPARE(sent.clusters.size(), q.clusters.size());
        QCOMPARE(sent.clusters[7].parent, q.clusters[7].parent);
        QCOMPARE(sent.edges[99].to, q.edges[99].to);
        QCOMPARE(sent.nodes[4799].cluster, q.nodes[4799].cluster);
        QVERIFY_THROWS_EXCEPTION(std::exception, layoutResultFromBytes("not cbor"));
    }

    /// A stop set while dot runs ends the layout: its process is killed and the result says it was
    /// cancelled; nothing is drawn, and no later request of the session starts. A budget that runs
    /// out ends dot too (issue 17: a layout ran 17 minutes and nothing could end it), and then the
    /// quick layered layout draws the request and says why; without fallback it is an error. The
    /// graph takes dot minutes; the stop or the deadline comes 300 ms in. A layout that ignored
    /// either would come back from dot, and the test fail.
    void stopAndBudgetEndALayout_data() {
        QTest::addColumn<bool>("budget");
        QTest::addColumn<bool>("fallback");
        QTest::newRow("stop") << false << true;
        QTest::newRow("budget, drawn layered") << true << true;
        QTest::newRow("budget, no fallback") << true << false;
    }
    void stopAndBudgetEndALayout() {
        QFETCH(bool, budget);
        QFETCH(bool, fallback);
        const auto q = slowRequest();
        std::atomic<bool> stop{false};
        LayoutControl control;
        control.program = thisProgram();
        control.stop = &stop;
        control.fallback = fallback;
        std::thread stopper;
        if (budget) {
            control.budgetSeconds = 0.3;
            control.deadline = LayoutControl::Clock::now() + std::chrono::milliseconds(300);
        } else {
            control.onRequest = [&](std::size_t, std::size_t, std::size_t) {
                stopper = std::thread([&] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(300));
                    stop = true;
                });
            };
        }
        LayoutSession session(control);
        const auto res = session.layout(q);
        if (stopper.joinable()) stopper.join();
        LayoutRequest small;
        small.nodes.resize(2);
        const auto after = session.layout(small);
        if (budget && fallback) {
            QVERIFY2(res.error.empty(), res.error.c_str());
            QCOMPARE(res.nodeCenters.size(), q.nodes.size());
            QVERIFY2(res.fallback.find("ran past its budget of 0.3 s") != std::string::npos, res.fallback.c_str());
            QVERIFY2(res.fallback.find("4800 nodes") != std::string::npos, res.fallback.c_str());
            // Later requests are past the deadline too: drawn layered at once.
            QVERIFY(after.error.empty() && !after.fallback.empty());
            QCOMPARE(after.nodeCenters.size(), std::size_t(2));
            return;
        }
        QVERIFY(res.nodeCenters.empty());
        QCOMPARE(res.cancelled, !budget);
        QCOMPARE(res.overBudget, budget);
        QVERIFY2(res.error.find(budget ? "ran past its budget of 0.3 s" : "cancelled") != std::string::npos, res.error.c_str());
        QVERIFY2(res.error.find("4800 nodes") != std::string::npos, res.error.c_str());
        // Later requests of the session are not started.
        QVERIFY(!after.error.empty());
        QCOMPARE(after.cancelled, !budget);
    }

    /// Dot's own slice of the time: past it, the request is drawn layered, and the result says dot
    /// took too long (the session's budget is not reached, so it is not "past the budget").
    void dotPastItsSliceIsDrawnLayered() {
        const auto q = slowRequest();
        LayoutControl control;
        control.program = thisProgram();
        control.dotSeconds = 0.3;
        const auto res = LayoutSession(control).layout(q);
        QVERIFY2(res.error.empty(), res.error.c_str());
        QCOMPARE(res.nodeCenters.size(), q.nodes.size());
        QVERIFY2(res.fallback.find("dot took more than its 0.3 s") != std::string::npos, res.fallback.c_str());
    }

    /// A program that does not serve --layout-process, or none at all, is an error that names it
    /// when there is no fallback; with one (the default), the layered layout draws the request and
    /// the reason names the program. Past dot's bound, the same: refused, or drawn layered.
    void aLayoutProcessThatFailsIsAnErrorOrFallsBack() {
        LayoutRequest small;
        small.nodes.resize(2);
        small.edges = {{0, 1, true}};
        for (const std::string program : {"/bin/true", "/nonexistent/trainverify-studio"}) {
            LayoutControl control;
            control.program = program;
            control.fallback = false;
            const auto res = LayoutSession(control).layout(small);
            QVERIFY(res.nodeCenters.empty());
            QVERIFY(!res.cancelled && !res.overBudget);
            QVERIFY2(res.error.find(program) != std::string::npos, res.error.c_str());
            control.fallback = true;
            const auto drawn = LayoutSession(control).layout(small);
            QVERIFY2(drawn.error.empty(), drawn.error.c_str());
            QCOMPARE(drawn.nodeCenters.size(), std::size_t(2));
            QVERIFY2(drawn.fallback.find(program) != std::string::npos, drawn.fallback.c_str());
            QVERIFY(drawn.nodeCenters[0].y < drawn.nodeCenters[1].y);
        }
        // Past the bound, refused before any process starts, as in this process.
        LayoutControl control;
        control.program = "/nonexistent/trainverify-studio";
        control.fallback = false;
        LayoutRequest over;
        over.nodes.resize(kMaxLayoutNodes + 1);
        const auto res = LayoutSession(control).layout(over);
        QVERIFY2(res.error.find("more than the") != std::string::npos, res.error.c_str());
        control.fallback = true;
        const auto drawn = LayoutSession(control).layout(over);
        QVERIFY2(drawn.error.empty(), drawn.error.c_str());
        QCOMPARE(drawn.nodeCenters.size(), over.nodes.size());
        QVERIFY2(drawn.fallback.find(std::to_string(kMaxLayoutNodes + 1) + " nodes") != std::string::npos, drawn.fallback.c_str());
        // Past the layered layout's bound too: refused, whatever the control.
        LayoutRequest huge;
        huge.nodes.resize(kMaxLayeredNodes + 1);
        const auto refused = LayoutSession(control).layout(huge);
        QVERIFY(refused.nodeCenters.empty());
        QVERIFY2(refused.error.find(std::to_string(kMaxLayeredNodes)) != std::string::npos, refused.error.c_str());
    }

    /// The layered layout keeps what the views rely on, on any graph: every node inside every
    /// cluster box that holds it (transitively), no two nodes overlapping, sibling cluster boxes
    /// disjoint, edges that close no cycle pointing down, sizes as asked, the same result twice.
    /// Rows: small shapes, clusters whose parents are malformed, a left-to-right graph, the
    /// 4,800-node clustered graph dot takes minutes on, and both sides of each bundled example.
    void layeredLayoutIsSound_data() {
        QTest::addColumn<int>("which");
        QTest::addColumn<QString>("file");
        QTest::newRow("chain") << 0 << QString();
        QTest::newRow("diamond in clusters") << 1 << QString();
        QTest::newRow("cycle") << 2 << QString();
        QTest::newRow("malformed clusters") << 3 << QString();
        QTest::newRow("left to right") << 4 << QString();
        QTest::newRow("4800 nodes in 60 nested clusters") << 5 << QString();
        for (const auto& f : QDir(QStringLiteral(TV_SOURCE_DIR "/resources/examples")).entryList({QStringLiteral("*.json")}, QDir::Files, QDir::Name))
            QTest::newRow(qPrintable(f)) << 6 << f;
    }
    void layeredLayoutIsSound() {
        QFETCH(int, which);
        QFETCH(QString, file);
        std::vector<LayoutRequest> requests;
        LayoutRequest q;
        switch (which) {
            case 0:
                for (int i = 0; i < 5; ++i) q.nodes.push_back({60 + 10.0 * i, 30, -1});
                for (int i = 0; i + 1 < 5; ++i) q.edges.push_back({i, i + 1, true});
                break;
            case 1:
                q.clusters = {{"outer", -1}, {"left", 0}, {"right", 0}};
                q.nodes = {{50, 30, 0}, {50, 30, 1}, {80, 30, 2}, {50, 30, -1}, {50, 30, 1}};
                q.edges = {{0, 1, true}, {0, 2, true}, {1, 3, true}, {2, 3, true}, {1, 4, true}, {4, 3, false}};
                break;
            case 2:
                q.clusters = {{"loop", -1}};
                q.nodes = {{40, 20, 0}, {40, 20, 0}, {40, 20, 0}, {40, 20, -1}};
                q.edges = {{0, 1, true}, {1, 2, true}, {2, 0, true}, {2, 3, true}, {3, 3, true}, {0, 7, true}, {-1, 2, true}};
                break;
            case 3:
                q.clusters = {{"a", 1}, {"b", 0}, {"c", 9}, {"d", 3}, {"e", -5}};
                q.nodes = {{40, 20, 0}, {40, 20, 1}, {40, 20, 2}, {40, 20, 3}, {40, 20, 4}, {40, 20, 17}, {-3, std::nan(""), 2}};
                q.edges = {{0, 1, true}, {1, 2, true}, {2, 3, true}, {3, 4, true}, {4, 5, true}, {5, 6, true}};
                break;
            case 4:
                q = slowRequest();
                q.nodes.resize(300);
                q.edges.erase(std::remove_if(q.edges.begin(), q.edges.end(), [](const LayoutEdge& e) { return e.from >= 300 || e.to >= 300; }), q.edges.end());
                q.leftToRight = true;
                break;
            case 5:
                q = slowRequest();
                break;
            default: {
                auto plan = readPlanFile((QStringLiteral(TV_SOURCE_DIR "/resources/examples/") + file).toStdString()).plan;
                QVERIFY(plan);
                ViewOptions options;
                const auto view = buildPlanView(*plan, cutStages(*plan), options);
                std::vector<int> map;
                requests.push_back(view.layoutRequest(ViewSide::Logical, map));
                requests.push_back(view.layoutRequest(ViewSide::Parallel, map));
            }
        }
        if (requests.empty()) requests.push_back(q);
        for (const auto& req : requests) {
            const auto res = layoutLayered(req);
            QVERIFY2(res.error.empty(), res.error.c_str());
            QCOMPARE(res.nodeCenters.size(), req.nodes.size());
            QCOMPARE(res.edgePaths.size(), req.edges.size());
            QCOMPARE(res.edgeTips.size(), req.edges.size());
            QCOMPARE(res.clusterBoxes.size(), req.clusters.size());
            const int nc = static_cast<int>(req.clusters.size());
            auto sz = [](double v) { return std::isfinite(v) && v > 0 ? v : 0.0; };
            std::vector<Rect> rect(req.nodes.size());
            for (std::size_t i = 0; i < req.nodes.size(); ++i) {
                const double w = sz(req.nodes[i].width), h = sz(req.nodes[i].height);
                rect[i] = {res.nodeCenters[i].x - w / 2, res.nodeCenters[i].y - h / 2, w, h};
                QVERIFY(std::isfinite(rect[i].x) && std::isfinite(rect[i].y));
            }
            auto inside = [](const Rect& a, const Rect& b) {
                return a.x >= b.x - 1e-6 && a.y >= b.y - 1e-6 && a.x + a.width <= b.x + b.width + 1e-6 && a.y + a.height <= b.y + b.height + 1e-6;
            };
            auto overlap = [](const Rect& a, const Rect& b) {
                return a.x < b.x + b.width - 1e-6 && b.x < a.x + a.width - 1e-6 && a.y < b.y + b.height - 1e-6 && b.y < a.y + a.height - 1e-6;
            };
            // Parents as the layout reads them: out of range or on a loop, the top level.
            std::vector<int> parent(nc, -1);
            for (int c = 0; c < nc; ++c) {
                const int p = req.clusters[c].parent;
                parent[c] = p >= 0 && p < nc && p != c ? p : -1;
            }
            for (int c = 0; c < nc; ++c) {
                int x = parent[c], steps = 0;
                while (x >= 0 && steps <= nc) x = parent[x], ++steps;
                if (steps > nc) {  // on a loop: the layout cut it somewhere; only check what is certain
                    parent[c] = -2;
                }
            }
            // Nodes in every enclosing box, and apart from each other (pairs only in small graphs,
            // and by sweeping sorted rows in big ones).
            for (std::size_t i = 0; i < req.nodes.size(); ++i) {
                const int c0 = req.nodes[i].cluster;
                for (int c = c0 >= 0 && c0 < nc ? c0 : -1, hops = 0; c >= 0 && hops <= nc; c = parent[c], ++hops)
                    QVERIFY2(inside(rect[i], res.clusterBoxes[c]), qPrintable(QStringLiteral("node %1 outside cluster %2").arg(i).arg(c)));
                QVERIFY(inside(rect[i], res.bounds));
            }
            std::vector<std::size_t> byY(req.nodes.size());
            for (std::size_t i = 0; i < byY.size(); ++i) byY[i] = i;
            std::sort(byY.begin(), byY.end(), [&](std::size_t a, std::size_t b) { return rect[a].y < rect[b].y; });
            for (std::size_t a = 0; a < byY.size(); ++a)
                for (std::size_t b = a + 1; b < byY.size() && rect[byY[b]].y < rect[byY[a]].y + rect[byY[a]].height; ++b)
                    QVERIFY2(!overlap(rect[byY[a]], rect[byY[b]]), qPrintable(QStringLiteral("nodes %1 and %2 overlap").arg(byY[a]).arg(byY[b])));
            for (int a = 0; a < nc; ++a)
                for (int b = a + 1; b < nc; ++b)
                    if (parent[a] >= -1 && parent[a] == parent[b])
                        QVERIFY2(!overlap(res.clusterBoxes[a], res.clusterBoxes[b]), qPrintable(QStringLiteral("sibling clusters %1 and %2 overlap").arg(a).arg(b)));
            // An edge of a graph without cycles points down (right, laid out left to right).
            bool acyclic = which != 2 && which != 5;
            for (std::size_t k = 0; k < req.edges.size() && acyclic && which != 3; ++k) {
                const auto& e = req.edges[k];
                if (!e.constraint || e.from == e.to || e.from < 0 || e.to < 0) continue;
                const double from = req.leftToRight ? res.nodeCenters[e.from].x : res.nodeCenters[e.from].y;
                const double to = req.leftToRight ? res.nodeCenters[e.to].x : res.nodeCenters[e.to].y;
                QVERIFY2(from < to, qPrintable(QStringLiteral("edge %1 does not point down").arg(k)));
                QCOMPARE(res.edgePaths[k].size(), std::size_t(4));
            }
            const auto again = layoutLayered(req);
            for (std::size_t i = 0; i < req.nodes.size(); ++i) {
                QCOMPARE(again.nodeCenters[i].x, res.nodeCenters[i].x);
                QCOMPARE(again.nodeCenters[i].y, res.nodeCenters[i].y);
            }
        }
    }

    /// A box inside a layer's band shows its name without the prefix the band already says, at a
    /// segment boundary only; its tooltip keeps the full name and says the rank, the slice it
    /// holds and how.
    void foldLayerPrefixes_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("layer");
        QTest::addColumn<QString>("shown");
        const QString e = QString(QChar(0x2026));
        QTest::newRow("layer") << "layers.20.feed_forward.w1.matmul@r0" << "layers.20" << e + "feed_forward.w1.matmul@r0";
        QTest::newRow("backward") << "bw.layers.3.attention.wq" << "layers.3" << "bw." + e + "attention.wq";
        QTest::newRow("gpt2") << "h.0.mlp.c_fc" << "h.0" << e + "mlp.c_fc";
        QTest::newRow("not a prefix of 20") << "layers.20.x" << "layers.2" << "layers.20.x";
        QTest::newRow("not 2 of 20") << "layers.2.x" << "layers.20" << "layers.2.x";
        QTest::newRow("inside a word") << "xlayers.2.y" << "layers.2" << "xlayers.2.y";
        QTest::newRow("nothing after") << "layers.2." << "layers.2" << "layers.2.";
        QTest::newRow("the layer itself") << "layers.2" << "layers.2" << "layers.2";
        QTest::newRow("second occurrence") << "xlayers.2.layers.2.q" << "layers.2" << "xlayers.2." + e + "q";
    }
    void foldLayerPrefixes() {
        QFETCH(QString, name);
        QFETCH(QString, layer);
        QFETCH(QString, shown);
        QCOMPARE(QString::fromStdString(foldLayerPrefix(name.toStdString(), layer.toStdString())), shown);
    }

    void nodesSayWhatTheyAre() {
        const auto plan = load(QStringLiteral("llama3-tp2-sp.json"));
        ViewOptions options;
        options.collapseLayersAbove = 0;
        auto stages = cutStages(*plan);
        // Expand every layer: the bands are drawn, their boxes fold the band's prefix.
        auto folded = buildPlanView(*plan, stages, options);
        for (const auto& l : folded.layers) options.expandedLayers.insert(l.key);
        const auto view = buildPlanView(*plan, stages, options);
        int shortened = 0, lineage = 0;
        for (std::size_t n = 0; n < view.nodes.size(); ++n) {
            const auto& node = view.nodes[n];
            const auto facts = describeNode(*plan, view, static_cast<int>(n));
            QVERIFY(!facts.empty());
            QCOMPARE(facts.front(), node.name);
            if (node.layer >= 0 && (node.kind == ViewNodeKind::Op || node.kind == ViewNodeKind::Tensor)) {
                const auto& layer = view.layers[node.layer].layer;
                QVERIFY(view.layers[node.layer].group >= 0);
                if (node.name.find(layer + ".") != std::string::npos) {
                    QVERIFY2(!node.shown.empty() && node.shown.find(layer + ".") == std::string::npos, node.name.c_str());
                    ++shortened;
                }
            }
            if (node.side == ViewSide::Parallel && node.kind == ViewNodeKind::Op && plan->parallel.ops[node.id].rank >= 0) {
                const auto r = plan->parallel.ops[node.id].rank;
                QVERIFY(std::any_of(facts.begin(), facts.end(), [&](const std::string& f) { return f.rfind("rank " + std::to_string(r), 0) == 0; }));
            }
            if (node.side == ViewSide::Parallel && node.kind == ViewNodeKind::Tensor) {
                for (const auto& e : view.lineage)
                    if (e.parallel == static_cast<int>(n)) {
                        const std::string holds = "holds " + view.nodes[e.logical].name + "[";
                        QVERIFY2(std::any_of(facts.begin(), facts.end(), [&](const std::string& f) {
                                     return f.rfind(holds, 0) == 0 && f.find(std::string(toString(e.kind))) != std::string::npos &&
                                            (e.coeff.isOne() || f.find("coefficient " + e.coeff.toString()) != std::string::npos);
                                 }),
                                 node.name.c_str());
                        ++lineage;
                        break;
                    }
            }
        }
        QVERIFY(shortened > 10);
        QVERIFY(lineage > 4);
    }

    /// Expanding all layers of one rank opens every layer group of that rank and no other.
    void rankLayersExpand() {
        const auto plan = load(QStringLiteral("gpt2-pp2.json"));
        const auto stages = cutStages(*plan);
        ViewOptions options;
        options.collapseLayersAbove = 0;
        options.ranksWithLayersExpanded = {1};
        options.collapsedLayers = {};
        const auto view = buildPlanView(*plan, stages, options);
        int open = 0, folded = 0;
        for (const auto& l : view.layers) {
            if (l.ops < 2) continue;
            const bool mine = l.side == ViewSide::Parallel && l.rank == 1;
            QCOMPARE(l.collapsed, !mine);
            (mine ? open : folded) += 1;
        }
        QVERIFY(open > 0 && folded > 0);
        // One of them folded by name stays folded.
        std::string key;
        for (const auto& l : view.layers)
            if (l.side == ViewSide::Parallel && l.rank == 1 && l.ops >= 2) key = l.key;
        options.collapsedLayers = {key};
        for (const auto& l : buildPlanView(*plan, stages, options).layers)
            if (l.key == key) QVERIFY(l.collapsed);
    }

    /// The two panes: each side's extent holds everything drawn for that side and nothing of the
    /// other's; the stage alignment is strictly increasing on both sides, maps each anchor exactly
    /// onto its partner, is its own inverse, and keeps going up between and beyond the anchors.
    void panesAlignByStage_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("collapsed");
        QTest::addColumn<bool>("process");
        for (const auto& f : QDir(QStringLiteral(TV_SOURCE_DIR "/resources/examples")).entryList({QStringLiteral("*.json")}, QDir::Files, QDir::Name)) {
            QTest::newRow(qPrintable(f)) << f << false << false;
            QTest::newRow(qPrintable(f + QStringLiteral(" ranks collapsed"))) << f << true << false;
        }
        // Laid out as the Studio lays out (a fresh layout process per side): there dot routed an
        // edge of GPT-2's logical side 1,145 pt past its own bounding box, into the parallel side.
        QTest::newRow("gpt2-pp2.json in layout processes") << QStringLiteral("gpt2-pp2.json") << false << true;
        QTest::newRow("llama3-tp2-sp.json in layout processes") << QStringLiteral("llama3-tp2-sp.json") << false << true;
    }
    void panesAlignByStage() {
        QFETCH(QString, file);
        QFETCH(bool, collapsed);
        QFETCH(bool, process);
        auto plan = load(file);
        ViewOptions options;
        if (collapsed)
            for (std::int32_t r = 0; r < static_cast<std::int32_t>(plan->ranks.size()); ++r) options.collapsedRanks.insert(r);
        const auto view = buildPlanView(*plan, cutStages(*plan), options);
        LayoutControl control;
        control.program = thisProgram();
        const auto placed = placePlanView(view, 240, process ? &control : nullptr);
        QVERIFY(placed.error.empty());
        const Rect sides[2] = {sideExtent(view, placed, ViewSide::Logical), sideExtent(view, placed, ViewSide::Parallel)};
        auto inside = [](const Rect& r, const Rect& box) {
            return r.x >= box.x - 1e-6 && r.y >= box.y - 1e-6 && r.x + r.width <= box.x + box.width + 1e-6 && r.y + r.height <= box.y + box.height + 1e-6;
        };
        auto overlaps = [](const Rect& a, const Rect& b) {
            return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
        };
        for (std::size_t n = 0; n < view.nodes.size(); ++n) {
            const int mine = view.nodes[n].side == ViewSide::Logical ? 0 : 1;
            QVERIFY2(inside(placed.nodeRects[n], sides[mine]), view.nodes[n].name.c_str());
            const auto& r = placed.nodeRects[n];
            const auto& o = sides[1 - mine];
            QVERIFY2(!overlaps(r, o), qPrintable(QStringLiteral("%1 at x %2..%3 y %4..%5; the other side x %6..%7 y %8..%9")
                                                    .arg(QString::fromStdString(view.nodes[n].name)).arg(r.x).arg(r.x + r.width).arg(r.y).arg(r.y + r.height)
                                                    .arg(o.x).arg(o.x + o.width).arg(o.y).arg(o.y + o.height)));
        }
        for (std::size_t g = 0; g < view.groups.size(); ++g)
            QVERIFY(inside(placed.groupRects[g], sides[view.groups[g].side == ViewSide::Logical ? 0 : 1]));
        for (std::size_t k = 0; k < placed.dataflowPaths.size(); ++k)
            for (const auto& p : placed.dataflowPaths[k])
                QVERIFY(inside(Rect{p.x, p.y, 0, 0}, sides[k < view.logicalEdges.size() ? 0 : 1]));
        const auto align = alignStages(view, placed);
        int both = 0;
        for (const auto& nodes : view.stageNodes) {
            bool l = false, p = false;
            // A folded rank is no anchor (one height for all its stages).
            for (int n : nodes)
                if (view.nodes[n].kind != ViewNodeKind::CollapsedRank) (view.nodes[n].side == ViewSide::Logical ? l : p) = true;
            both += l && p;
        }
        if (both > 0) QVERIFY(!align.anchors.empty());
        for (std::size_t i = 0; i < align.anchors.size(); ++i) {
            const auto& a = align.anchors[i];
            if (i > 0) {
                QVERIFY(a.logicalY > align.anchors[i - 1].logicalY);
                QVERIFY(a.parallelY > align.anchors[i - 1].parallelY);
            }
            QCOMPARE(align.toParallel(a.logicalY), a.parallelY);
            QCOMPARE(align.toLogical(a.parallelY), a.logicalY);
            QVERIFY(a.stage < view.stageNodes.size());
        }
        double previous = -1e300;
        const double top = sides[0].y - 200, bottom = sides[0].y + sides[0].height + 200;
        for (int i = 0; i <= 400; ++i) {
            const double y = top + (bottom - top) * i / 400;
            const double mapped = align.toParallel(y);
            QVERIFY(mapped > previous);
            previous = mapped;
            QVERIFY(std::abs(align.toLogical(mapped) - y) < 1e-6 * std::max(1.0, std::abs(y)));
        }
    }

    /// Every parallel tensor drawn is drawn in its own rank's box (issue 19: mlp-tp2 drew logits@r1,
    /// an all-reduce's output on rank 1, in rank 0's box, and loss@r1 with it), on every example.
    void tensorsSitInTheirRanksBox_data() {
        QTest::addColumn<QString>("file");
        for (const auto& f : QDir(QStringLiteral(TV_SOURCE_DIR "/resources/examples")).entryList({QStringLiteral("*.json")}, QDir::Files, QDir::Name))
            QTest::newRow(qPrintable(f)) << f;
    }
    void tensorsSitInTheirRanksBox() {
        QFETCH(QString, file);
        auto plan = readPlanFile((QStringLiteral(TV_SOURCE_DIR "/resources/examples/") + file).toStdString()).plan;
        QVERIFY(plan);
        const auto view = buildPlanView(*plan, cutStages(*plan), ViewOptions{});
        int checked = 0;
        for (const auto& n : view.nodes) {
            if (n.side != ViewSide::Parallel || n.kind != ViewNodeKind::Tensor) continue;
            const auto rank = plan->parallel.tensors[n.id].rank;
            if (rank < 0) continue;
            int box = -1;
            for (int g = n.group; g >= 0; g = view.groups[g].parent)
                if (view.groups[g].kind == ViewGroupKind::Rank) box = view.groups[g].rank;
            QVERIFY2(box == rank, qPrintable(QStringLiteral("%1 (rank %2) is drawn in rank %3's box").arg(QString::fromStdString(n.name)).arg(rank).arg(box)));
            ++checked;
        }
        if (file == QStringLiteral("mlp-tp2.json")) QVERIFY(checked > 0);
    }

    /// A collapsed rank's edges are drawn as bundles, one per (collapsed rank, other rank,
    /// direction): every such edge is in exactly one bundle and is not drawn alone, a bundle's
    /// count is its members' tensors, its members share its ends, and its path runs from the
    /// collapsed node's border to the other end's box. Rows: one rank collapsed, every rank.
    void bundlesCarryTheirEdges_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("all");
        for (const char* f : {"mlp4-dp2-tp2-pp2.json", "mlp-pp2.json", "gpt2-pp2.json", "llama3-tp2-sp.json"}) {
            QTest::newRow((std::string(f) + " rank 1").c_str()) << QString::fromLatin1(f) << false;
            QTest::newRow((std::string(f) + " all").c_str()) << QString::fromLatin1(f) << true;
        }
    }
    void bundlesCarryTheirEdges() {
        QFETCH(QString, file);
        QFETCH(bool, all);
        auto plan = readPlanFile((QStringLiteral(TV_SOURCE_DIR "/resources/examples/") + file).toStdString()).plan;
        QVERIFY(plan);
        ViewOptions options;
        if (all)
            for (std::int32_t r = 0; r < static_cast<std::int32_t>(plan->ranks.size()); ++r) options.collapsedRanks.insert(r);
        else
            options.collapsedRanks.insert(1);
        const auto view = buildPlanView(*plan, cutStages(*plan), options);
        const auto placed = placePlanView(view);
        QVERIFY2(placed.error.empty(), placed.error.c_str());
        const std::size_t logical = view.logicalEdges.size();
        std::vector<int> bundleOf(logical + view.parallelEdges.size(), -1);
        for (std::size_t b = 0; b < placed.bundles.size(); ++b) {
            const auto& bundle = placed.bundles[b];
            QCOMPARE(view.nodes[bundle.collapsed].kind, ViewNodeKind::CollapsedRank);
            QVERIFY((bundle.otherNode >= 0) != (bundle.otherGroup >= 0));
            std::uint32_t tensors = 0;
            for (auto k : bundle.members) {
                QVERIFY(k >= logical && k < bundleOf.size());
                QCOMPARE(bundleOf[k], -1);  // in one bundle only
                bundleOf[k] = static_cast<int>(b);
                const auto& e = view.parallelEdges[k - logical];
                QCOMPARE(bundle.outgoing ? e.from : e.to, bundle.collapsed);
                const int other = bundle.outgoing ? e.to : e.from;
                if (bundle.otherNode >= 0) QCOMPARE(other, bundle.otherNode);
                else {
                    bool inBox = false;
                    for (int g = view.nodes[other].group; g >= 0; g = view.groups[g].parent) inBox = inBox || g == bundle.otherGroup;
                    QVERIFY(inBox);
                }
                tensors += e.tensors;
                QVERIFY(placed.dataflowPaths[k].empty());  // drawn as the bundle
            }
            QCOMPARE(bundle.tensors, tensors);
            QCOMPARE(bundle.path.size(), std::size_t(4));
            auto on = [](const Rect& r, const Point& p) { return p.x >= r.x - 1e-6 && p.x <= r.x + r.width + 1e-6 && p.y >= r.y - 1e-6 && p.y <= r.y + r.height + 1e-6; };
            const auto& start = bundle.outgoing ? bundle.path.front() : bundle.path.back();
            const auto& end = bundle.outgoing ? bundle.path.back() : bundle.path.front();
            QVERIFY(on(placed.nodeRects[bundle.collapsed], start));
            QVERIFY(on(bundle.otherNode >= 0 ? placed.nodeRects[bundle.otherNode] : placed.groupRects[bundle.otherGroup], end));
        }
        // Every edge of a collapsed rank whose other end is in a rank box is in a bundle.
        std::size_t members = 0;
        for (std::size_t k = logical; k < bundleOf.size(); ++k) {
            const auto& e = view.parallelEdges[k - logical];
            const bool folded = view.nodes[e.from].kind == ViewNodeKind::CollapsedRank || view.nodes[e.to].kind == ViewNodeKind::CollapsedRank;
            if (!folded) {
                QCOMPARE(bundleOf[k], -1);
                continue;
            }
            const int other = view.nodes[e.from].kind == ViewNodeKind::CollapsedRank ? e.to : e.from;
            bool boxed = view.nodes[other].kind == ViewNodeKind::CollapsedRank;
            for (int g = view.nodes[other].group; g >= 0 && !boxed; g = view.groups[g].parent) boxed = view.groups[g].kind == ViewGroupKind::Rank;
            QCOMPARE(bundleOf[k] >= 0, boxed);
            members += boxed;
        }
        QVERIFY(placed.bundles.size() <= members);
        if (!all && file.startsWith(QStringLiteral("mlp4"))) QVERIFY(placed.bundles.size() < members);  // bundling draws fewer edges
    }

    /// A plan and its buggy twin: the diff names the ops the bug is at (on the parallel side),
    /// says what differs, lists logical ops, then lineage, then parallel ops, each in the first
    /// plan's order with the second's own ops last; read the other way round it is the same diff
    /// with added and removed swapped; and a plan has no difference with itself. Rows: every
    /// lesson, and a mutant the bug catalog makes.
    void twinDiffNamesTheBug_data() { addTwinColumns(), addTwinRows(); }
    void twinDiffNamesTheBug() {
        QFETCH(QString, correct);
        QFETCH(QString, buggy);
        QFETCH(QString, bug);
        QFETCH(QString, op);
        QFETCH(QString, what);
        QFETCH(QString, detail);
        QFETCH(QString, lineage);
        const auto t = loadTwins(correct, buggy, bug);
        QVERIFY2(t.problem.isEmpty(), qPrintable(t.problem));
        QVERIFY(!t.bugOps.empty());
        const auto diff = diffPlans(*t.correct, *t.buggy);
        QVERIFY(!diff.empty());
        auto find = [&](const std::vector<OpChange>& d, ViewSide side, const std::string& name) -> const OpChange* {
            for (const auto& c : d)
                if (c.side == side && c.name == name) return &c;
            return nullptr;
        };
        for (const auto& name : t.bugOps) QVERIFY2(find(diff, ViewSide::Parallel, name), name.c_str());
        if (!op.isEmpty()) {
            const auto* c = find(diff, ViewSide::Parallel, op.toStdString());
            QVERIFY2(c, qPrintable(op));
            QCOMPARE(QString::fromLatin1(toString(c->what).data(), static_cast<int>(toString(c->what).size())), what);
            QVERIFY2(QString::fromStdString(c->detail).contains(detail), c->detail.c_str());
        }
        if (!lineage.isEmpty()) {
            const auto it = std::find_if(diff.begin(), diff.end(), [&](const OpChange& x) { return x.lineage && x.name == lineage.toStdString(); });
            QVERIFY2(it != diff.end(), qPrintable(lineage));
            const auto* c = &*it;
            QVERIFY(c->what == OpChange::What::Changed && !c->detail.empty());
        }
        // The order: logical ops, lineage, parallel ops; ops in the first plan's order, then added ones.
        int segment = 0;
        std::uint32_t last = 0;
        bool first = true, added = false;
        for (const auto& c : diff) {
            const bool isLineage = c.lineage;
            const int s = c.side == ViewSide::Parallel ? 2 : isLineage ? 1 : 0;
            QVERIFY2(s >= segment, c.name.c_str());
            if (s != segment) first = true, added = false;
            segment = s;
            if (isLineage) continue;
            QVERIFY(!c.detail.empty());
            if (c.what == OpChange::What::Added) {
                added = true;
                continue;
            }
            QVERIFY2(!added, c.name.c_str());
            const auto& g = c.side == ViewSide::Logical ? t.correct->logical : t.correct->parallel;
            const OpId id = g.findOp(t.correct->names.find(c.name));
            QVERIFY2(id != kNone, c.name.c_str());
            QVERIFY2(first || id > last, c.name.c_str());
            first = false;
            last = id;
        }
        // The other way round: the same ops, added and removed swapped; and the same again.
        const auto back = diffPlans(*t.buggy, *t.correct);
        QCOMPARE(back.size(), diff.size());
        for (const auto& c : diff) {
            const auto* d = find(back, c.side, c.name);
            QVERIFY2(d, c.name.c_str());
            const auto swapped = c.what == OpChange::What::Added ? OpChange::What::Removed : c.what == OpChange::What::Removed ? OpChange::What::Added : c.what;
            QVERIFY2(d->what == swapped, c.name.c_str());
        }
        const auto again = diffPlans(*t.correct, *t.buggy);
        QCOMPARE(again.size(), diff.size());
        for (std::size_t i = 0; i < diff.size(); ++i) {
            QCOMPARE(again[i].name, diff[i].name);
            QCOMPARE(again[i].detail, diff[i].detail);
        }
        QVERIFY(diffPlans(*t.correct, *t.correct).empty());
        QVERIFY(diffPlans(*t.buggy, *t.buggy).empty());
    }

    /// A plan and its twin drawn in one layout: a node both have sits at the same place in both
    /// pictures (bit for bit), an edge both have runs the same way, every node lies in its side's
    /// bounds (the same for both), a node one plan has alone is a gap in the other's picture, the
    /// layout comes out the same again, and each picture bundles its own collapsed-rank edges.
    /// Rows: the twin rows with layers collapsed above 100 ops (the big lesson's), and two pairs
    /// with every rank collapsed. Drawn written out, as the Studio draws a plan.
    void twinsShareOneLayout_data() {
        addTwinColumns();
        addTwinRows();
        const QString ex = QStringLiteral(TV_SOURCE_DIR "/resources/examples/"), ls = QStringLiteral(TV_SOURCE_DIR "/resources/lessons/");
        QTest::newRow("pp-accumulation, ranks collapsed") << ex + "mlp-pp2.json" << ls + "mlp-pp2-grad-accum-missing.json" << QString() << "" << "" << ""
                                                          << "" << true;
        QTest::newRow("ep-all-to-all, ranks collapsed") << ls + "deepseek-l2-tp2-ep2-sp.json" << ls + "deepseek-l2-tp2-ep2-sp-all-to-all-wrong-order.json"
                                                        << QString() << "" << "" << "" << "" << true;
    }
    void twinsShareOneLayout() {
        QFETCH(QString, correct);
        QFETCH(QString, buggy);
        QFETCH(QString, bug);
        QFETCH(bool, collapsed);
        auto t = loadTwins(correct, buggy, bug);
        QVERIFY2(t.problem.isEmpty(), qPrintable(t.problem));
        for (auto* p : {&t.correct, &t.buggy})
            if ((*p)->replication.active()) *p = std::make_unique<Plan>(expandReplicas(**p));
        ViewOptions options;
        options.collapseLayersAbove = 100;
        if (collapsed)
            for (const auto* p : {t.correct.get(), t.buggy.get()})
                for (std::int32_t r = 0; r < static_cast<std::int32_t>(p->ranks.size()); ++r) options.collapsedRanks.insert(r);
        const auto va = buildPlanView(*t.correct, cutStages(*t.correct), options);
        const auto vb = buildPlanView(*t.buggy, cutStages(*t.buggy), options);
        const auto twins = placeTwins(va, vb);
        QVERIFY2(twins.error.empty(), twins.error.c_str());
        QVERIFY(!twins.cancelled);
        for (const auto& [view, placed] : {std::pair{&va, &twins.a}, std::pair{&vb, &twins.b}}) {
            QVERIFY2(placed->error.empty(), placed->error.c_str());
            QCOMPARE(placed->nodeRects.size(), view->nodes.size());
            QCOMPARE(placed->groupRects.size(), view->groups.size());
            QCOMPARE(placed->dataflowPaths.size(), view->logicalEdges.size() + view->parallelEdges.size());
            QCOMPARE(placed->dataflowTips.size(), placed->dataflowPaths.size());
            for (std::size_t i = 0; i < view->nodes.size(); ++i) {
                const auto& bounds = view->nodes[i].side == ViewSide::Logical ? placed->logicalBounds : placed->parallelBounds;
                QVERIFY2(inside(placed->nodeRects[i], bounds), view->nodes[i].name.c_str());
                QVERIFY(placed->nodeRects[i].width >= view->nodes[i].width && placed->nodeRects[i].height >= view->nodes[i].height);
            }
            const auto problem = bundleProblem(*view, *placed);
            QVERIFY2(problem.isEmpty(), qPrintable(problem));
            QCOMPARE(placed->bundles.empty(), !collapsed);
            // Every edge is drawn: alone, or as its bundle.
            std::vector<bool> bundled(placed->dataflowPaths.size(), false);
            for (const auto& b : placed->bundles)
                for (auto k : b.members) bundled[k] = true;
            for (std::size_t k = 0; k < bundled.size(); ++k) QVERIFY(bundled[k] || placed->dataflowPaths[k].size() >= 4);
        }
        QVERIFY(same(twins.a.logicalBounds, twins.b.logicalBounds) && same(twins.a.parallelBounds, twins.b.parallelBounds));

        std::map<std::string, int> keysA, keysB;
        for (int i = 0; i < static_cast<int>(va.nodes.size()); ++i) QVERIFY(keysA.emplace(twinKey(va, i), i).second);
        for (int i = 0; i < static_cast<int>(vb.nodes.size()); ++i) QVERIFY(keysB.emplace(twinKey(vb, i), i).second);
        std::size_t shared = 0;
        for (const auto& [key, i] : keysA) {
            auto it = keysB.find(key);
            if (it != keysB.end()) {
                ++shared;
                QVERIFY2(same(twins.a.nodeRects[i], twins.b.nodeRects[it->second]), key.c_str());
                continue;
            }
            // A gap in the other picture: nothing of it is drawn there.
            for (const auto& r : twins.b.nodeRects) QVERIFY2(!overlap(twins.a.nodeRects[i], r), key.c_str());
        }
        for (const auto& [key, i] : keysB)
            if (!keysA.count(key))
                for (const auto& r : twins.a.nodeRects) QVERIFY2(!overlap(twins.b.nodeRects[i], r), key.c_str());
        QVERIFY(shared > 0);
        // An edge both have, drawn alone in both, runs the same way.
        auto edgeKeys = [](const PlanView& v) {
            std::map<std::pair<std::string, std::string>, std::size_t> out;
            std::size_t k = 0;
            for (const auto* list : {&v.logicalEdges, &v.parallelEdges})
                for (const auto& e : *list) out.emplace(std::pair{twinKey(v, e.from), twinKey(v, e.to)}, k++);
            return out;
        };
        const auto edgesB = edgeKeys(vb);
        std::size_t sharedEdges = 0;
        for (const auto& [key, k] : edgeKeys(va)) {
            auto it = edgesB.find(key);
            if (it == edgesB.end()) continue;
            ++sharedEdges;
            const auto &pa = twins.a.dataflowPaths[k], &pb = twins.b.dataflowPaths[it->second];
            if (pa.empty() || pb.empty()) continue;  // bundled
            QCOMPARE(pa.size(), pb.size());
            for (std::size_t i = 0; i < pa.size(); ++i) QVERIFY(pa[i].x == pb[i].x && pa[i].y == pb[i].y);
        }
        QVERIFY(sharedEdges > 0);

        // The same again: in layout processes (dot keeps state from one layout to the next in one
        // process, so only a fresh one is reproducible, as for placePlanView).
        LayoutControl control;
        control.program = thisProgram();
        const auto one = placeTwins(va, vb, 240, &control);
        const auto two = placeTwins(va, vb, 240, &control);
        QVERIFY2(one.error.empty() && two.error.empty(), (one.error + two.error).c_str());
        for (const auto& [x, y] : {std::pair{&one.a, &two.a}, std::pair{&one.b, &two.b}}) {
            QCOMPARE(x->nodeRects.size(), y->nodeRects.size());
            for (std::size_t i = 0; i < x->nodeRects.size(); ++i) QVERIFY(same(x->nodeRects[i], y->nodeRects[i]));
            for (std::size_t g = 0; g < x->groupRects.size(); ++g) QVERIFY(same(x->groupRects[g], y->groupRects[g]));
        }
    }

    void dotExport() {
        LayoutRequest req;
        req.clusters.push_back({"rank 0", -1});
        req.nodes = {{72, 36, 0}, {72, 36, -1}};
        req.edges = {{0, 1, true}};
        auto dot = toDot(req, {"fc1 \"linear\"", "relu"}, "plan");
        QVERIFY(dot.find("digraph \"plan\"") != std::string::npos);
        QVERIFY(dot.find("subgraph cluster_0") != std::string::npos);
        QVERIFY(dot.find("label=\"fc1 \\\"linear\\\"\"") != std::string::npos);
        QVERIFY(dot.find("n0 -> n1;") != std::string::npos);
    }

    void examples_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("logicalOps");
        QTest::addColumn<int>("parallelOps");
        QTest::addColumn<int>("lineageEdges");
        QTest::addColumn<int>("stageGroups");
        QTest::addColumn<int>("rankGroups");
        QTest::newRow("linear-tp2") << "linear-tp2.json" << 1 << 2 << 6 << 1 << 2;
        QTest::newRow("mlp-tp2") << "mlp-tp2.json" << 11 << 23 << 34 << 11 << 2;
        QTest::newRow("mlp-dp2") << "mlp-dp2.json" << 11 << 24 << 36 << 11 << 2;
        QTest::newRow("mlp-pp2") << "mlp-pp2.json" << 11 << 28 << 34 << 11 << 2;
        QTest::newRow("mlp-tp2-missing-allreduce") << "mlp-tp2-missing-allreduce.json" << 11 << 22 << 32 << 11 << 2;
        QTest::newRow("mlp4-dp2-tp2-pp2") << "mlp4-dp2-tp2-pp2.json" << 45 << 430 << 528 << 45 << 8;
    }
    void examples() {
        QFETCH(QString, file);
        QFETCH(int, logicalOps);
        QFETCH(int, parallelOps);
        QFETCH(int, lineageEdges);
        QFETCH(int, stageGroups);
        QFETCH(int, rankGroups);
        auto plan = load(file);
        auto stages = cutStages(*plan);
        auto view = buildPlanView(*plan, stages, {});
        QCOMPARE(static_cast<int>(view.count(ViewSide::Logical, ViewNodeKind::Op)), logicalOps);
        QCOMPARE(static_cast<int>(view.count(ViewSide::Parallel, ViewNodeKind::Op)), parallelOps);
        QCOMPARE(static_cast<int>(view.lineage.size()), lineageEdges);
        int stageG = 0, rankG = 0;
        for (const auto& g : view.groups) {
            stageG += g.kind == ViewGroupKind::Stage;
            rankG += g.kind == ViewGroupKind::Rank;
        }
        QCOMPARE(stageG, stageGroups);
        QCOMPARE(rankG, rankGroups);
        // Every edge joins nodes of its own side.
        for (const auto& e : view.parallelEdges) {
            QVERIFY(view.nodes[e.from].side == ViewSide::Parallel);
            QVERIFY(view.nodes[e.to].side == ViewSide::Parallel);
        }
        for (const auto& e : view.lineage) {
            QVERIFY(view.nodes[e.logical].side == ViewSide::Logical);
            QVERIFY(view.nodes[e.parallel].side == ViewSide::Parallel);
        }
    }

    void lineageKinds() {
        auto plan = load("mlp-tp2.json");
        auto view = buildPlanView(*plan, cutStages(*plan), {});
        int shards = 0, replicas = 0, partial = 0;
        for (const auto& e : view.lineage) {
            shards += e.kind == LineageKind::Shard;
            replicas += e.kind == LineageKind::Replica;
            partial += e.kind == LineageKind::PartialSum;
        }
        QCOMPARE(partial, 2);      // the logits before the all-reduce
        QVERIFY(shards >= 16);     // hidden-dim shards of w1, w2, h, a, their gradients and updates
        QVERIFY(replicas >= 10);   // x, labels, dloss, logits, loss, dlogits on both ranks
    }

    void counterpartsCrossSides() {
        auto plan = load("mlp-tp2.json");
        auto view = buildPlanView(*plan, cutStages(*plan), {});
        auto fc1 = view.logicalOpNode[plan->logical.findOp(plan->names.find("fc1"))];
        auto others = view.counterparts(fc1);
        QStringList names;
        for (int n : others) names << QString::fromStdString(view.nodes[n].name);
        QVERIFY2(names.contains("fc1@r0") && names.contains("fc1@r1"), qPrintable(names.join(", ")));
        auto h = view.logicalTensorNode[plan->logical.findTensor(plan->names.find("h"))];
        names.clear();
        for (int n : view.counterparts(h)) names << QString::fromStdString(view.nodes[n].name);
        QCOMPARE(names, QStringList({"h@r0", "h@r1"}));
    }

    void layerNames_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("layer");
        QTest::newRow("forward op") << "layers.3.attention.wq" << "layers.3";
        QTest::newRow("backward op") << "bw.layers.12.feed_forward.w2.matmul.2" << "layers.12";
        QTest::newRow("optimizer op") << "optim.layers.0.ffn_norm.weight" << "layers.0";
        QTest::newRow("parallel op") << "layers.1.attention.wo.all_reduce.mb0@r2" << "layers.1";
        QTest::newRow("gpt2 block") << "h.0.mlp.c_fc" << "h.0";
        QTest::newRow("blocks") << "model.blocks.7.attn" << "blocks.7";
        QTest::newRow("number at the end") << "layers.5" << "layers.5";
        QTest::newRow("no layer") << "tok_embeddings" << "";
        QTest::newRow("numbered, not a layer") << "bw.output.matmul.2" << "";
        QTest::newRow("number not a component") << "layers.3x.attn" << "";
        QTest::newRow("no number") << "layers.attn" << "";
        QTest::newRow("hand-written names") << "fc1_0" << "";
        QTest::newRow("empty") << "" << "";
    }
    void layerNames() {
        QFETCH(QString, name);
        QFETCH(QString, layer);
        QCOMPARE(QString::fromStdString(layerOfName(name.toStdString())), layer);
    }

    void collapsedLayersBecomeOneNodeEach() {
        auto plan = load("gpt2-pp2.json");
        const auto stages = cutStages(*plan);
        // The oracle: layer membership read from the names with a regular expression.
        const QRegularExpression layerRe(QStringLiteral("(?:^|\\.)((?:layers|layer|h|blocks|block)\\.\\d+)(?:\\.|$)"));
        auto layerOf = [&](const std::string& name) {
            auto m = layerRe.match(QString::fromStdString(name));
            return m.hasMatch() ? m.captured(1).toStdString() : std::string();
        };
        std::map<std::pair<std::string, int>, int> logicalGroups;
        int outside = 0;
        for (OpId op = 0; op < plan->logical.ops.size(); ++op) {
            auto layer = layerOf(plan->opName(plan->logical, op));
            if (layer.empty()) ++outside;
            else ++logicalGroups[{layer, static_cast<int>(plan->logical.ops[op].phase)}];
        }
        QVERIFY(logicalGroups.size() >= 6);  // two blocks, forward, backward and optimizer each

        ViewOptions opts;
        opts.collapseLayersAbove = 0;
        auto view = buildPlanView(*plan, stages, opts);
        QCOMPARE(static_cast<int>(view.count(ViewSide::Logical, ViewNodeKind::CollapsedLayer)), static_cast<int>(logicalGroups.size()));
        QCOMPARE(static_cast<int>(view.count(ViewSide::Logical, ViewNodeKind::Op)), outside);
        for (OpId op = 0; op < plan->logical.ops.size(); ++op) {
            const auto& n = view.nodes[view.logicalOpNode[op]];
            const auto layer = layerOf(plan->opName(plan->logical, op));
            if (layer.empty()) {
                QVERIFY(n.kind == ViewNodeKind::Op);
                continue;
            }
            QVERIFY(n.kind == ViewNodeKind::CollapsedLayer);
            QCOMPARE(view.layers[n.id].layer, layer);
            QVERIFY(view.layers[n.id].phase == plan->logical.ops[op].phase);
            QCOMPARE(static_cast<int>(view.layers[n.id].ops), (logicalGroups[{layer, static_cast<int>(plan->logical.ops[op].phase)}]));
        }
        // Parallel ops in layers sit in their rank's and microbatch's layer node.
        int parallelInLayers = 0;
        for (OpId op = 0; op < plan->parallel.ops.size(); ++op) {
            const auto layer = layerOf(plan->opName(plan->parallel, op));
            if (layer.empty()) continue;
            ++parallelInLayers;
            const auto& n = view.nodes[view.parallelOpNode[op]];
            QVERIFY(n.layer >= 0);
            const auto& info = view.layers[n.layer];
            // A group of one op (a send on the receiving rank) is left as it is.
            if (info.ops == 1) QVERIFY(n.kind == ViewNodeKind::Op);
            else QVERIFY2(n.kind == ViewNodeKind::CollapsedLayer, plan->opName(plan->parallel, op).c_str());
            QCOMPARE(info.layer, layer);
            QCOMPARE(info.rank, plan->parallel.homeRank(op));
            QCOMPARE(info.microbatch, plan->parallel.ops[op].microbatch);
        }
        QVERIFY(parallelInLayers > 100);
        // No group is empty, and the forward-to-backward edges of collapsed layers stay out of layout.
        std::vector<int> members(view.groups.size(), 0);
        for (const auto& n : view.nodes)
            if (n.group >= 0) ++members[n.group];
        for (std::size_t g = 0; g < view.groups.size(); ++g)
            if (view.groups[g].parent >= 0) ++members[view.groups[g].parent];
        for (std::size_t g = 0; g < view.groups.size(); ++g) QVERIFY2(members[g] > 0, view.groups[g].label.c_str());
        int afterLayout = 0;
        for (const auto& e : view.logicalEdges) {
            if (!view.drawnAfterLayout(e)) continue;
            ++afterLayout;
            QVERIFY(view.layers[view.nodes[e.from].layer].phase == Phase::Forward);
        }
        QVERIFY(afterLayout >= 2);
        auto placed = placePlanView(view);
        QVERIFY2(placed.error.empty(), placed.error.c_str());
        for (std::size_t e = 0; e < placed.dataflowPaths.size(); ++e) QVERIFY(placed.dataflowPaths[e].size() >= 4);

        // Expanding one group brings back exactly its ops, inside a band for that layer.
        const auto key = layerKey(ViewSide::Logical, -1, -1, "h.0", Phase::Forward);
        opts.expandedLayers = {key};
        auto one = buildPlanView(*plan, stages, opts);
        const int h0forward = logicalGroups[{"h.0", static_cast<int>(Phase::Forward)}];
        QVERIFY(h0forward > 10);
        QCOMPARE(static_cast<int>(one.count(ViewSide::Logical, ViewNodeKind::Op)), outside + h0forward);
        QCOMPARE(static_cast<int>(one.count(ViewSide::Logical, ViewNodeKind::CollapsedLayer)), static_cast<int>(logicalGroups.size()) - 1);
        int bands = 0;
        for (const auto& g : one.groups)
            if (g.kind == ViewGroupKind::Layer && g.side == ViewSide::Logical) {
                ++bands;
                QCOMPARE(one.layers[g.layer].key, key);
            }
        QCOMPARE(bands, 1);
        QVERIFY(placePlanView(one).error.empty());

        // Named groups are collapsed whatever the size rule says; small plans collapse nothing.
        ViewOptions never;
        never.collapseLayersAbove = ViewOptions::kNever;
        never.collapsedLayers = {key};
        auto forced = buildPlanView(*plan, stages, never);
        QCOMPARE(static_cast<int>(forced.count(ViewSide::Logical, ViewNodeKind::CollapsedLayer)), 1);
        QCOMPARE(static_cast<int>(forced.count(ViewSide::Parallel, ViewNodeKind::CollapsedLayer)), 0);
        auto defaults = buildPlanView(*plan, stages, {});
        QCOMPARE(static_cast<int>(defaults.count(ViewSide::Logical, ViewNodeKind::CollapsedLayer)), 0);
        QCOMPARE(static_cast<int>(defaults.count(ViewSide::Logical, ViewNodeKind::Op)), static_cast<int>(plan->logical.ops.size()));
    }

    void collapsedLayersKeepCounterpartsAndFilters() {
        auto plan = load("gpt2-pp2.json");
        ViewOptions opts;
        opts.collapseLayersAbove = 0;
        auto view = buildPlanView(*plan, cutStages(*plan), opts);
        int logicalH1Backward = -1;
        for (std::size_t i = 0; i < view.layers.size(); ++i)
            if (view.layers[i].side == ViewSide::Logical && view.layers[i].layer == "h.1" && view.layers[i].phase == Phase::Backward)
                logicalH1Backward = view.layers[i].node;
        QVERIFY(logicalH1Backward >= 0);
        auto others = view.counterparts(logicalH1Backward);
        std::set<int> microbatches;
        for (int n : others) {
            QVERIFY(view.nodes[n].side == ViewSide::Parallel);
            if (view.nodes[n].kind == ViewNodeKind::CollapsedLayer && view.layers[view.nodes[n].id].layer == "h.1" &&
                view.layers[view.nodes[n].id].phase == Phase::Backward)
                microbatches.insert(view.layers[view.nodes[n].id].microbatch);
        }
        // Block 1's backward pass of every microbatch, and the gradient accumulation (no microbatch).
        QCOMPARE(microbatches, (std::set<int>{-1, 0, 1}));
        // Filters see a collapsed layer's phase, rank and microbatch.
        ViewFilter backward;
        backward.phase = static_cast<int>(Phase::Backward);
        QVERIFY(passesFilter(*plan, view, logicalH1Backward, backward));
        ViewFilter forward;
        forward.phase = static_cast<int>(Phase::Forward);
        QVERIFY(!passesFilter(*plan, view, logicalH1Backward, forward));
        for (int n : others) {
            const auto& info = view.layers[view.nodes[n].id];
            if (view.nodes[n].kind != ViewNodeKind::CollapsedLayer) continue;
            ViewFilter rank;
            rank.rank = info.rank;
            QVERIFY(passesFilter(*plan, view, n, rank));
            rank.rank = info.rank + 1;
            QVERIFY(!passesFilter(*plan, view, n, rank));
            ViewFilter mb;
            mb.microbatch = info.microbatch;
            QVERIFY(passesFilter(*plan, view, n, mb));
            ViewFilter kind;
            kind.opKind = "matmul";
            QVERIFY(!passesFilter(*plan, view, n, kind));
        }
    }

    void collapsedRanksBecomeOneNodeEach() {
        auto plan = load("mlp4-dp2-tp2-pp2.json");
        ViewOptions opts;
        opts.collapsedRanks = {0, 1, 2, 3, 4, 5, 6, 7};
        auto view = buildPlanView(*plan, cutStages(*plan), opts);
        QCOMPARE(static_cast<int>(view.count(ViewSide::Parallel, ViewNodeKind::Op)), 0);
        QCOMPARE(static_cast<int>(view.count(ViewSide::Parallel, ViewNodeKind::CollapsedRank)), 8);
        std::vector<int> map;
        auto req = view.layoutRequest(ViewSide::Parallel, map);
        QCOMPARE(req.nodes.size(), std::size_t(8));
        auto res = layoutGraph(req);
        QVERIFY(res.error.empty());
        // Expanding one rank brings back exactly that rank's ops.
        opts.collapsedRanks.erase(3);
        auto one = buildPlanView(*plan, cutStages(*plan), opts);
        int onRank3 = 0;
        for (const auto& o : plan->parallel.ops) onRank3 += o.rank == 3;
        QVERIFY(static_cast<int>(one.count(ViewSide::Parallel, ViewNodeKind::Op)) >= onRank3);
        QVERIFY(defaultCollapsedRanks(*plan, 100).size() == 8);
        QVERIFY(defaultCollapsedRanks(*plan).empty());
    }
};

#define main qtestMain
QTEST_APPLESS_MAIN(TestPlanView)
#undef main
TV_HELPER_PROCESS_MAIN(qtestMain)
#include "tst_plan_view.moc"
