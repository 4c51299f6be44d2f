// The explorer's Qt-free model: the Graphviz facade on a known small graph, and the nodes,
// lineage edges and groups built for each bundled example.
#include <QtTest>

#include "explore/plan_view.hpp"
#include "io/plan_json.hpp"

using namespace tv;

namespace {
std::unique_ptr<Plan> load(const QString& name) {
    auto r = readPlanFile(std::string(TV_SOURCE_DIR) + "/resources/examples/" + name.toStdString());
    if (!r.ok()) qFatal("cannot load %s", qPrintable(name));
    return std::move(r.plan);
}
}  // namespace

class TestPlanView : public QObject {
    Q_OBJECT
private slots:
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

QTEST_APPLESS_MAIN(TestPlanView)
#include "tst_plan_view.moc"
