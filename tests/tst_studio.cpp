// The Studio under the offscreen platform: opening every example, the scene's items, selection
// sync across the sides, Find, collapsing ranks, export, and a non-empty picture of the window.
#include <QComboBox>
#include <QToolBar>
#include <QtTest>

#include <nlohmann/json.hpp>
#include <QMenu>
#include <QClipboard>
#include <QDockWidget>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QGraphicsItem>
#include <QImage>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>

#include <fstream>
#include <set>

#include "helper_process_main.hpp"
#include "find_model.hpp"
#include "explore/verified_view.hpp"
#include "generate/generator.hpp"
#include "layout/graph_layout.hpp"
#include "dual_view.hpp"
#include "graph_view.hpp"
#include "inspector.hpp"
#include "main_window.hpp"
#include "notice_bar.hpp"
#include "studio_testing.hpp"
#include "theme.hpp"

using namespace tv;
using namespace tv::ui;

using testing::example;
using testing::actionNamed;
using testing::openAndWait;
using testing::showAt;

namespace {
int nodeNamed(const PlanScene* scene, const std::string& name, ViewSide side) {
    const auto& nodes = scene->loaded()->view.nodes;
    for (std::size_t i = 0; i < nodes.size(); ++i)
        if (nodes[i].name == name && nodes[i].side == side) return static_cast<int>(i);
    return -1;
}
/// A generated plan written into `dir` (model preset, and dp = tp = pp = microbatches = `degree`).
QString writeGeneratedPlan(const QTemporaryDir& dir, const char* model, std::int32_t degree = 1) {
    gen::GenerateOptions o;
    o.model = model;
    o.dp = o.tp = o.pp = o.microbatches = degree;
    const QString path = dir.filePath(QString::fromLatin1(model) + QStringLiteral(".json"));
    std::ofstream out(path.toStdString());
    out << gen::generatePlan(o).dump();
    return path;
}
}  // namespace

class TestStudio : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { testing::sandbox(QStringLiteral("tst_studio")); }

    void opensEachExample_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("opItems");
        QTest::addColumn<int>("lineageItems");
        QTest::addColumn<int>("stageGroups");
        QTest::newRow("linear-tp2") << "linear-tp2.json" << 1 + 2 << 6 << 1;
        QTest::newRow("mlp-tp2") << "mlp-tp2.json" << 11 + 23 << 34 << 11;
        QTest::newRow("mlp-dp2") << "mlp-dp2.json" << 11 + 24 << 36 << 11;
        QTest::newRow("mlp-pp2") << "mlp-pp2.json" << 11 + 28 << 34 << 11;
        QTest::newRow("mlp-pp2-crossed-sendrecv") << "mlp-pp2-crossed-sendrecv.json" << 11 + 28 << 34 << 11;
    }
    void opensEachExample() {
        QFETCH(QString, file);
        QFETCH(int, opItems);
        QFETCH(int, lineageItems);
        QFETCH(int, stageGroups);
        MainWindow w;
        QVERIFY(openAndWait(w, example(file)));
        auto* scene = w.scene();
        const auto& view = scene->loaded()->view;
        int ops = 0;
        for (const auto& n : view.nodes) ops += n.kind == ViewNodeKind::Op;
        QCOMPARE(ops, opItems);
        QCOMPARE(scene->nodeItemCount(), static_cast<int>(view.nodes.size()));
        QCOMPARE(scene->lineageItemCount(), lineageItems);
        QCOMPARE(scene->groupItemCount(ViewGroupKind::Stage), stageGroups);
        QVERIFY(scene->groupItemCount(ViewGroupKind::Rank) >= 2);
        // Every node item sits where the layout put it, inside the scene.
        for (int i = 0; i < scene->nodeItemCount(); ++i) QVERIFY(scene->sceneRect().contains(scene->itemForNode(i)->sceneBoundingRect()));
    }

    void selectionHighlightsCounterparts() {
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp-tp2.json"))));
        auto* scene = w.scene();
        QSignalSpy selected(scene, &PlanScene::nodeSelected);
        const int h = nodeNamed(scene, "h", ViewSide::Logical);
        QVERIFY(h >= 0);
        scene->selectNode(h);
        QVERIFY(selected.count() >= 1);
        QCOMPARE(scene->selectedNode(), h);
        QStringList names;
        for (int n : scene->highlighted()) names << QString::fromStdString(scene->loaded()->view.nodes[n].name);
        QCOMPARE(names, QStringList({"h@r0", "h@r1"}));
        // The inspector shows the tensor and draws its shards.
        QVERIFY(w.inspector()->text().contains(QStringLiteral("h")));
        QCOMPARE(w.inspector()->grid()->sliceCount(), 2);
        // And the other way: a parallel op highlights its logical op.
        const int fc2 = nodeNamed(scene, "fc2@r1", ViewSide::Parallel);
        scene->selectNode(fc2);
        names.clear();
        for (int n : scene->highlighted()) names << QString::fromStdString(scene->loaded()->view.nodes[n].name);
        QVERIFY2(names.contains(QStringLiteral("fc2")), qPrintable(names.join(QStringLiteral(", "))));
        QVERIFY(w.inspector()->text().contains(QStringLiteral("linear")));
    }

    /// An op with a source line in its plan shows it in the inspector; one without shows none.
    void inspectorShowsTheSourceLine() {
        QTemporaryDir dir;
        QFile in(example(QStringLiteral("mlp-tp2.json")));
        QVERIFY(in.open(QIODevice::ReadOnly));
        auto doc = nlohmann::json::parse(in.readAll().toStdString());
        for (auto& o : doc["parallel"]["ops"])
            if (o["id"] == "fc2@r1") o["source"] = {{"file", "megatron/core/tensor_parallel/layers.py"}, {"line", 973}, {"function", "forward"}, {"code", "output_ = output_parallel"}};
        const auto path = dir.filePath(QStringLiteral("sourced.json"));
        QFile out(path);
        QVERIFY(out.open(QIODevice::WriteOnly));
        out.write(QByteArray::fromStdString(doc.dump()));
        out.close();
        MainWindow w;
        QVERIFY(openAndWait(w, path));
        auto* scene = w.scene();
        scene->selectNode(nodeNamed(scene, "fc2@r1", ViewSide::Parallel));
        QVERIFY2(w.inspector()->text().contains(QStringLiteral("megatron/core/tensor_parallel/layers.py:973 in forward")), qPrintable(w.inspector()->text()));
        QVERIFY(w.inspector()->text().contains(QStringLiteral("output_ = output_parallel")));
        scene->selectNode(nodeNamed(scene, "fc2@r0", ViewSide::Parallel));
        QVERIFY(!w.inspector()->text().contains(QStringLiteral("layers.py")));
    }

    void findSelectsAndCenters() {
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp-dp2.json"))));
        QAbstractItemModelTester tester(w.findModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        w.find(QStringLiteral("allreduce"));
        QCOMPARE(w.findModel()->rowCount(), 2);
        w.activateFindResult(1);
        const int node = w.scene()->selectedNode();
        QVERIFY(node >= 0);
        QCOMPARE(QString::fromStdString(w.scene()->loaded()->view.nodes[node].name), QStringLiteral("dw1_allreduce"));
        // The overview frames follow the panes: one of them holds the op found.
        bool framed = false;
        for (const auto& area : w.minimap()->visibleAreas()) framed = framed || area.contains(w.scene()->itemForNode(node)->sceneBoundingRect().center());
        QVERIFY(framed);
        w.find(QStringLiteral("no such thing"));
        QCOMPARE(w.findModel()->rowCount(), 0);
        w.find(QString());
        QCOMPARE(w.findModel()->rowCount(), 0);
    }

    void filtersDimWhatTheyExclude() {
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp-pp2.json"))));
        auto* scene = w.scene();
        const int total = scene->nodeItemCount();
        ViewFilter f;
        f.microbatch = 1;
        const int mb1 = w.applyFilter(f);
        QVERIFY(mb1 < total && mb1 > 0);
        for (int i = 0; i < total; ++i) {
            const auto& n = scene->loaded()->view.nodes[i];
            const auto& P = scene->loaded()->plan->parallel;
            if (n.side != ViewSide::Parallel || n.kind != ViewNodeKind::Op) continue;
            QCOMPARE(scene->nodePassesFilter(i), P.ops[n.id].microbatch == 1);
            QCOMPARE(scene->itemForNode(i)->opacity() == 1.0, P.ops[n.id].microbatch == 1);
        }
        // Edges recede with their ends: lit between two lit nodes, dim if either end is dim.
        {
            const auto& v = scene->loaded()->view;
            int lit = 0, dim = 0;
            for (std::size_t e = 0; e < v.logicalEdges.size() + v.parallelEdges.size(); ++e) {
                const double o = scene->dataflowOpacity(e);
                if (o < 0) continue;
                const auto& edge = e < v.logicalEdges.size() ? v.logicalEdges[e] : v.parallelEdges[e - v.logicalEdges.size()];
                const bool both = scene->nodePassesFilter(edge.from) && scene->nodePassesFilter(edge.to);
                QCOMPARE(o == 1.0, both);
                (both ? lit : dim) += 1;
            }
            QVERIFY(lit > 0 && dim > 0);
        }
        f = {};
        f.opKind = "send_recv";
        QCOMPARE(w.applyFilter(f), 4);  // two forward and two backward send/recv
        f = {};
        f.coordinate[static_cast<std::size_t>(Axis::PP)] = 1;
        f.phase = static_cast<int>(Phase::Optimizer);
        int expect = 0;
        for (const auto& n : scene->loaded()->view.nodes)
            if (n.kind == ViewNodeKind::Op) {
                const auto& g = n.side == ViewSide::Logical ? scene->loaded()->plan->logical : scene->loaded()->plan->parallel;
                bool onRank1 = n.side == ViewSide::Logical || g.ops[n.id].rank == 1;
                expect += g.ops[n.id].phase == Phase::Optimizer && onRank1;
            }
        QCOMPARE(w.applyFilter(f), expect);
        QCOMPARE(w.applyFilter({}), total);
        for (std::size_t e = 0; e < scene->loaded()->placed.dataflowPaths.size(); ++e) QVERIFY(scene->dataflowOpacity(e) == 1.0 || scene->dataflowOpacity(e) < 0);
    }

    // The filter bar offers the axes the plan's mesh uses: a context-parallel plan gets a cp
    // filter (and no tp one), and it keeps one cp coordinate's ranks.
    void filterBarFollowsTheMesh() {
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("llama3-cp2.json"))));
        auto* cp = w.findChild<QComboBox*>(QStringLiteral("filter-cp"));
        auto* tp = w.findChild<QComboBox*>(QStringLiteral("filter-tp"));
        auto* ep = w.findChild<QComboBox*>(QStringLiteral("filter-ep"));
        QVERIFY(cp && tp && ep);
        // (the window is not shown, so ask the tool bar's actions, not the widgets)
        auto* bar = w.findChild<QToolBar*>(QStringLiteral("filters"));
        QVERIFY(bar);
        auto shown = [&](QWidget* c) {
            for (auto* a : bar->actions())
                if (bar->widgetForAction(a) == c) return a->isVisible();
            return false;
        };
        QVERIFY(shown(cp));
        QVERIFY(!shown(tp));
        QVERIFY(!shown(ep));
        QCOMPARE(cp->count(), 3);  // any cp, cp=0, cp=1
        cp->setCurrentIndex(2);
        auto* scene = w.scene();
        const auto& plan = *scene->loaded()->plan;
        int kept = 0;
        for (int i = 0; i < scene->nodeItemCount(); ++i) {
            const auto& n = scene->loaded()->view.nodes[static_cast<std::size_t>(i)];
            if (n.side != ViewSide::Parallel || n.kind != ViewNodeKind::Op || plan.parallel.ops[n.id].rank < 0) continue;
            const bool onCp1 = plan.ranks[static_cast<std::size_t>(plan.parallel.ops[n.id].rank)].at(Axis::CP) == 1;
            QCOMPARE(scene->nodePassesFilter(i), onCp1);
            kept += onCp1;
        }
        QVERIFY(kept > 0);
        // A plan without cp hides the cp filter again.
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp-tp2.json"))));
        QVERIFY(!shown(cp));
        QVERIFY(shown(tp));
    }

    void collapseAndExpandRanks() {
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp4-dp2-tp2-pp2.json"))));
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        w.setRanksCollapsed(true);
        QVERIFY(loaded.wait(60000));
        const auto& view = w.scene()->loaded()->view;
        QCOMPARE(static_cast<int>(view.count(ViewSide::Parallel, ViewNodeKind::CollapsedRank)), 8);
        QCOMPARE(static_cast<int>(view.count(ViewSide::Parallel, ViewNodeKind::Op)), 0);
        w.toggleRank(5);
        QVERIFY(loaded.wait(60000));
        const auto& after = w.scene()->loaded()->view;
        QCOMPARE(static_cast<int>(after.count(ViewSide::Parallel, ViewNodeKind::CollapsedRank)), 7);
        QVERIFY(after.count(ViewSide::Parallel, ViewNodeKind::Op) > 0);
        for (const auto& n : after.nodes)
            if (n.side == ViewSide::Parallel && n.kind == ViewNodeKind::Op) {
                const auto& t = w.scene()->loaded()->plan->parallel;
                QCOMPARE(t.homeRank(n.id), 5);
            }
    }

    void collapseAndExpandLayersWithTheMouse() {
        MainWindow w;
        QVERIFY(showAt(w, QSize(1400, 900)));
        QVERIFY(openAndWait(w, example(QStringLiteral("gpt2-pp2.json"))));
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        w.setLayersCollapsed(true);
        QVERIFY(loaded.wait(60000));
        const int folded = nodeNamed(w.scene(), "h.0 forward", ViewSide::Logical);
        QVERIFY(folded >= 0);
        QVERIFY(w.scene()->loaded()->view.nodes[folded].kind == ViewNodeKind::CollapsedLayer);
        QVERIFY(nodeNamed(w.scene(), "h.0.attn.scores", ViewSide::Logical) < 0);
        auto doubleClick = [&](QPointF scenePos) {
            // In the pane drawing that side.
            GraphView* pane = w.dualView()->pane(scenePos.x() < w.scene()->loaded()->placed.parallelBounds.x ? ViewSide::Logical : ViewSide::Parallel);
            pane->centerOn(scenePos);
            QTest::mouseDClick(pane->viewport(), Qt::LeftButton, {}, pane->mapFromScene(scenePos));
        };
        // Double-clicking the collapsed layer lays out its ops inside a band for the layer.
        doubleClick(w.scene()->itemForNode(folded)->sceneBoundingRect().center());
        QVERIFY(loaded.wait(60000));
        const auto& open = w.scene()->loaded()->view;
        QVERIFY(nodeNamed(w.scene(), "h.0.attn.scores", ViewSide::Logical) >= 0);
        QCOMPARE(nodeNamed(w.scene(), "h.0 forward", ViewSide::Logical), -1);
        QCOMPARE(w.scene()->groupItemCount(ViewGroupKind::Layer), 1);
        int band = -1;
        for (std::size_t g = 0; g < open.groups.size(); ++g)
            if (open.groups[g].kind == ViewGroupKind::Layer) band = static_cast<int>(g);
        QVERIFY(band >= 0);
        // Double-clicking the band (its label corner, clear of every op) folds the layer again.
        const auto& r = w.scene()->loaded()->placed.groupRects[band];
        doubleClick(QPointF(r.x + 3, r.y + 3));
        QVERIFY(loaded.wait(60000));
        QVERIFY(nodeNamed(w.scene(), "h.0 forward", ViewSide::Logical) >= 0);
        QCOMPARE(w.scene()->groupItemCount(ViewGroupKind::Layer), 0);
        // Expand all: no collapsed layer anywhere.
        w.setLayersCollapsed(false);
        QVERIFY(loaded.wait(60000));
        QCOMPARE(static_cast<int>(w.scene()->loaded()->view.count(ViewSide::Logical, ViewNodeKind::CollapsedLayer)), 0);
        QCOMPARE(static_cast<int>(w.scene()->loaded()->view.count(ViewSide::Parallel, ViewNodeKind::CollapsedLayer)), 0);
    }

    void findRevealsWhatCollapsedRanksAndLayersHide() {
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("gpt2-pp2.json"))));
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        w.setRanksCollapsed(true);
        QVERIFY(loaded.wait(60000));
        w.setLayersCollapsed(true);
        QVERIFY(loaded.wait(60000));
        // A parallel op folded into a collapsed rank (and, once that is open, a collapsed layer).
        w.find(QStringLiteral("h.1.mlp.gelu.mb1@"));
        QVERIFY(w.findModel()->rowCount() >= 1);  // the op, and its output tensor if that has lineage
        QVERIFY(w.findModel()->hitAt(0)->op);
        QVERIFY(w.findModel()->folded(0));
        QVERIFY(w.findModel()->data(w.findModel()->index(0, 0)).toString().contains(QStringLiteral("in collapsed rank")));
        // A click selects what holds it; activating it expands the rank, then the layer, then selects the op.
        w.activateFindResult(0, false);
        QVERIFY(w.scene()->selectedNode() >= 0);
        QVERIFY(w.scene()->loaded()->view.nodes[w.scene()->selectedNode()].kind == ViewNodeKind::CollapsedRank);
        w.activateFindResult(0, true);
        for (int i = 0; i < 4 && (w.scene()->selectedNode() < 0 || w.scene()->loaded()->view.nodes[w.scene()->selectedNode()].kind != ViewNodeKind::Op); ++i)
            QVERIFY(loaded.wait(60000));
        const auto& view = w.scene()->loaded()->view;
        QVERIFY(w.scene()->selectedNode() >= 0);
        const auto& n = view.nodes[w.scene()->selectedNode()];
        QVERIFY(n.kind == ViewNodeKind::Op);
        QVERIFY(QString::fromStdString(n.name).startsWith(QStringLiteral("h.1.mlp.gelu.mb1@")));
        QVERIFY(!w.findModel()->folded(0));
        // Collapsed layers are found by their own names too.
        w.find(QStringLiteral("h.0 backward"));
        QVERIFY(w.findModel()->rowCount() >= 1);
    }

    // A plan stored once is drawn written out, unless that would be too big to draw: then as
    // stored, saying so, with only the stored replica's ranks.
    void bigStoredPlansAreDrawnAsStored() {
        QString error;
        auto whole = loadPlan(example(QStringLiteral("mlp-dp2-pp2-nm4-lanes.json")), nullptr, &error);
        QVERIFY2(whole, qPrintable(error));
        QVERIFY(!whole->plan->replication.active());
        QCOMPARE(whole->plan->parallel.ops.size(), std::size_t(263));
        QVERIFY(whole->storedNote.isEmpty());
        std::set<std::int32_t> all{0, 1, 2, 3};
        auto stored = loadPlan(example(QStringLiteral("mlp-dp2-pp2-nm4-lanes.json")), &all, &error, 100);
        QVERIFY2(stored, qPrintable(error));
        QVERIFY(stored->plan->replication.active());
        QCOMPARE(stored->plan->parallel.ops.size(), std::size_t(46));
        QVERIFY2(stored->storedNote.contains(QStringLiteral("microbatch 0 of 4")), qPrintable(stored->storedNote));
        QVERIFY(stored->storedNote.contains(QStringLiteral("263")));
        // Ranks 2 and 3 (replica 1) hold nothing as stored and are not drawn.
        QCOMPARE(static_cast<int>(stored->view.count(ViewSide::Parallel, ViewNodeKind::CollapsedRank)), 2);
        // The note survives a re-layout.
        auto again = relayoutPlan(*stored, ViewOptions{}, &error);
        QVERIFY(again);
        QCOMPARE(again->storedNote, stored->storedNote);
    }

    void newerJobsWinAndTogglesAccumulate() {
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp4-dp2-tp2-pp2.json"))));
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        // Collapse everything, then expand two ranks before any layout has come back.
        w.setRanksCollapsed(true);
        w.toggleRank(3);
        w.toggleRank(5);
        QVERIFY(loaded.wait(60000));
        QTest::qWait(200);
        QCOMPARE(loaded.count(), 1);  // the superseded layouts were dropped
        const auto& view = w.scene()->loaded()->view;
        QCOMPARE(static_cast<int>(view.count(ViewSide::Parallel, ViewNodeKind::CollapsedRank)), 6);
        QCOMPARE(view.rankNode[3], -1);
        QCOMPARE(view.rankNode[5], -1);
        QVERIFY(QApplication::overrideCursor() == nullptr);
        // Find keeps working across re-layouts (it shares the plan it indexes).
        w.find(QStringLiteral("fc1_0"));
        QVERIFY(w.findModel()->rowCount() > 0);
        QVERIFY(!w.findModel()->data(w.findModel()->index(0, 0)).toString().isEmpty());
    }

    void badPlanReportsAndKeepsTheWindowUsable() {
        QTemporaryDir dir;
        const auto path = dir.filePath(QStringLiteral("broken.json"));
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"format\": \"trainverify-plan\", \"version\": 1}");
        f.close();
        MainWindow w;
        QSignalSpy failed(&w, &MainWindow::loadFailed);
        w.openPlan(path);
        QVERIFY(failed.wait(30000));
        QVERIFY(failed.first().first().toString().contains(QStringLiteral("missing \"logical\"")));
        QVERIFY(openAndWait(w, example(QStringLiteral("linear-tp2.json"))));
    }

    void exportsPictureAndDot() {
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp-pp2.json"))));
        QTemporaryDir dir;
        const auto png = dir.filePath(QStringLiteral("view.png"));
        const auto svg = dir.filePath(QStringLiteral("view.svg"));
        const auto dot = dir.filePath(QStringLiteral("graphs.dot"));
        QVERIFY(w.exportImage(png));
        QVERIFY(w.exportImage(svg));
        QVERIFY(w.exportDot(dot));
        QImage img(png);
        QVERIFY(!img.isNull());
        QVERIFY(img.width() > 200 && img.height() > 200);
        QFile s(svg);
        QVERIFY(s.open(QIODevice::ReadOnly));
        QVERIFY(s.readAll().contains("<svg"));
        QFile d(dot);
        QVERIFY(d.open(QIODevice::ReadOnly));
        const auto text = d.readAll();
        QVERIFY(text.contains("digraph \"logical\""));
        QVERIFY(text.contains("digraph \"parallel\""));
        QVERIFY(text.contains("send_a.mb0"));
    }

    void windowGrabIsNotEmpty() {
        MainWindow w;
        QVERIFY(showAt(w, QSize(1200, 800)));
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp-tp2.json"))));
        QTest::qWait(50);
        const QImage img = w.grab().toImage();
        QVERIFY(!img.isNull());
        QSet<QRgb> colours;
        for (int y = 0; y < img.height(); y += 7)
            for (int x = 0; x < img.width(); x += 7) colours.insert(img.pixel(x, y));
        QVERIFY2(colours.size() > 8, "the window picture is blank");
    }

    // A pair of nnScaler plans opens like a plan file: mapped in the background, drawn with its
    // ranks; unreadable input fails with the reason and leaves the window usable.
    void opensAnNnScalerPair() {
        MainWindow w;
        const QString dir = QStringLiteral(TV_SOURCE_DIR "/resources/nnscaler-plans/");
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        w.openNnScalerPair(dir + "mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl", dir + "mlp_mgener_dp2_pp2_tp2_nm2_gbs16_dim1024_ly2.pkl");
        QVERIFY(loaded.wait(60000));
        const auto* l = w.scene()->loaded();
        QVERIFY(l);
        QCOMPARE(l->plan->ranks.size(), std::size_t(8));
        QVERIFY(l->logicalPath().endsWith("mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl"));
        QVERIFY(!l->view.nodes.empty());
        QVERIFY(!l->stages.stages.empty());
        QSignalSpy failed(&w, &MainWindow::loadFailed);
        w.openNnScalerPair(dir + "mlp_mgener_dp2_pp2_tp2_nm2_gbs16_dim1024_ly2.pkl", dir + "mlp_mgener_dp1_pp1_tp1_nm1_gbs16_dim1024_ly2.pkl");
        QVERIFY(failed.wait(60000));
        QVERIFY2(failed.first().first().toString().contains("a logical (single-device) plan runs on one"), qPrintable(failed.first().first().toString()));
        QCOMPARE(w.scene()->loaded()->plan->ranks.size(), std::size_t(8));  // the pair on screen stays
    }

    /// A plan big enough to open folded, compared with its twin: what holds a difference is
    /// unfolded, so every op that differs is drawn as itself in the plan that has it, at the same
    /// place in both pictures when both have it.
    void twinsUnfoldWhatDiffers() {
        QTemporaryDir dir;
        const QString path = writeGeneratedPlan(dir, "gpt2", 2);
        auto opened = session::openPlanFile(path.toStdString());
        QVERIFY(opened.ok());
        QVERIFY(!defaultCollapsedRanks(*opened.opened->plan).empty());  // it opens folded
        auto injected = session::injectBug(*opened.opened, "tp-allreduce-identity", {});
        QVERIFY(injected.opened);
        QString error;
        const auto twins = loadTwins(opened.opened, injected.opened, &error);
        QVERIFY2(twins.ok(), qPrintable(error));
        QVERIFY(!twins.changes.empty());
        int drawn = 0;
        for (const auto& c : twins.changes) {
            if (c.what == OpChange::What::Added) continue;  // in the twin only
            const auto& l = *twins.a;
            const OpId op = drawnOp(*l.plan, c.side == ViewSide::Logical ? l.plan->logical : l.plan->parallel, c.name);
            if (op == kNone) continue;
            const int node = nodeShowing(l.view, FindHit{c.side, true, op, -1});
            QVERIFY2(node >= 0 && l.view.nodes[node].kind == ViewNodeKind::Op, c.name.c_str());
            ++drawn;
        }
        QVERIFY(drawn >= 1);
        QVERIFY(!twins.a->view.rankNode.empty());
        QVERIFY(std::count_if(twins.a->view.rankNode.begin(), twins.a->view.rankNode.end(), [](int n) { return n >= 0; }) > 0);  // others stay folded
    }

    /// View > Expand All Layers, then Expand All Ranks, on Llama3-8B dp2 tp2 pp2 nm2 asks for
    /// 9,874 logical and 23,482 parallel nodes (dot ran 17 minutes on it): more than dot is given,
    /// so the quick layered layout draws it at once, and the notice above the graph says so and
    /// why. Collapsing again is drawn by dot, and the notice goes.
    void hugeLayoutIsDrawnLayeredAndSaysSo() {
        QTemporaryDir dir;
        const QString path = writeGeneratedPlan(dir, "llama3-8b", 2);
        MainWindow w;
        QVERIFY(openAndWait(w, path));
        const auto before = w.scene()->loadedShared();
        QVERIFY(!w.noticeBar()->isVisibleTo(&w));
        QSignalSpy failed(&w, &MainWindow::loadFailed);
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        w.setLayersCollapsed(false);
        w.setRanksCollapsed(false);
        QTRY_VERIFY_WITH_TIMEOUT(!w.laying(), 300000);
        QCOMPARE(failed.count(), 0);
        QVERIFY(loaded.count() >= 1);
        const auto* l = w.scene()->loaded();
        QVERIFY(l != before.get());
        QCOMPARE(l->view.count(ViewSide::Parallel, ViewNodeKind::CollapsedRank), std::size_t(0));
        QVERIFY(w.noticeBar()->isVisibleTo(&w));
        const auto notice = w.noticeBar()->text();
        QVERIFY2(notice.contains(QStringLiteral("quick layered layout")) && notice.contains(QStringLiteral("more than the %1 nodes").arg(kMaxLayoutNodes)),
                 qPrintable(notice));
        // Every node is placed (no rectangle left at the origin unset) and inside the scene.
        for (std::size_t n = 0; n < l->view.nodes.size(); ++n) QVERIFY(l->placed.nodeRects[n].width > 0);
        // Zoomed out, the panes paint a snapshot of their side, not 33,000 items a frame; the
        // snapshot shows the graph (not a blank), is taken again after the scene changes, and is
        // not used once zoomed in past its scale.
        QVERIFY(showAt(w, QSize(1280, 720)));
        auto* pane = w.view();
        QVERIFY(pane->snapshot());
        w.dualView()->fitAll();
        pane->viewport()->repaint();
        QVERIFY(pane->paintedFromSnapshot());
        const QImage shot = pane->viewport()->grab().toImage();
        const QRgb background = shot.pixel(0, 0);
        int drawn = 0;
        for (int y = 0; y < shot.height(); y += 4)
            for (int x = 0; x < shot.width(); x += 4) drawn += shot.pixel(x, y) != background;
        QVERIFY2(drawn > shot.width() * shot.height() / 16 / 20, qPrintable(QString::number(drawn)));
        QVERIFY(!pane->snapshot()->stale());
        // A change (the selection here) makes it stale a moment later; the next frame takes it again.
        QSignalSpy invalidated(pane->snapshot(), &SceneSnapshot::invalidated);
        w.scene()->selectNode(static_cast<int>(l->view.nodes.size()) - 1);
        QCOMPARE(w.scene()->selectedNode(), static_cast<int>(l->view.nodes.size()) - 1);
        QTRY_VERIFY_WITH_TIMEOUT(invalidated.count() >= 1, 10000);
        pane->viewport()->repaint();
        QVERIFY(!pane->snapshot()->stale());
        w.dualView()->zoomActual();
        pane->viewport()->repaint();
        QVERIFY(!pane->paintedFromSnapshot());
        // Collapsing again is drawn by dot: the notice goes.
        w.setRanksCollapsed(true);
        w.setLayersCollapsed(true);
        QTRY_VERIFY_WITH_TIMEOUT(!w.laying() && !w.noticeBar()->isVisibleTo(&w), 120000);
    }

    /// Collapsing a rank draws its edges to each other rank as one bundled edge with its count;
    /// its tooltip says which ranks, how many edges and tensors. A filter that dims the rank dims
    /// its bundles.
    void collapsedRanksDrawBundledEdges() {
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp4-dp2-tp2-pp2.json"))));
        QVERIFY(w.scene()->bundleItems().empty() || w.scene()->loaded()->view.count(ViewSide::Parallel, ViewNodeKind::CollapsedRank) > 0);
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        w.toggleRank(1);
        QVERIFY(loaded.wait(60000));
        const auto* l = w.scene()->loaded();
        QCOMPARE(l->view.count(ViewSide::Parallel, ViewNodeKind::CollapsedRank), std::size_t(1));
        const auto bundles = w.scene()->bundleItems();
        QCOMPARE(bundles.size(), l->placed.bundles.size());
        QVERIFY(!bundles.empty());
        for (const auto& [tip, opacity] : bundles) {
            QVERIFY2(tip.contains(QStringLiteral("rank 1")) && tip.contains(QStringLiteral("→")) && tip.contains(QStringLiteral("tensor")), qPrintable(tip));
            QCOMPARE(opacity, 1.0);
        }
        ViewFilter f;
        f.rank = 0;
        w.applyFilter(f);
        for (const auto& [tip, opacity] : w.scene()->bundleItems()) QVERIFY2(opacity < 1.0, qPrintable(tip));
    }

    /// The graph first: in a 1280x720 window the graph gets most of the room, with every panel
    /// in its default place; after a panel is moved, View > Reset Layout gives that back. Every
    /// panel has a checkable toggle under View > Panels.
    void graphGetsMostOfA1280x720Window() {
        MainWindow w;
        QVERIFY(showAt(w, QSize(1280, 720)));
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp4-dp2-tp2-pp2.json"))));
        auto roomy = [&] {
            const auto* c = w.centralWidget();
            return c->width() >= 0.6 * w.width() && c->height() >= 0.55 * w.height();
        };
        QTRY_VERIFY2(roomy(), qPrintable(QStringLiteral("graph %1x%2 in %3x%4").arg(w.centralWidget()->width()).arg(w.centralWidget()->height()).arg(w.width()).arg(w.height())));
        auto* stages = w.findChild<QDockWidget*>(QStringLiteral("stages"));
        QVERIFY(stages);
        w.addDockWidget(Qt::LeftDockWidgetArea, stages);
        w.resizeDocks({stages}, {700}, Qt::Horizontal);
        QTRY_VERIFY(!roomy());
        actionNamed(w, QStringLiteral("resetLayout"))->trigger();
        QTRY_VERIFY(roomy());
        QCOMPARE(w.dockWidgetArea(stages), Qt::BottomDockWidgetArea);
        for (const char* name : {"overview", "find", "inspector", "stages", "diagnosis", "lesson"}) {
            auto* toggle = actionNamed(w, QStringLiteral("panel-%1").arg(QLatin1String(name)));
            QVERIFY2(toggle && toggle->isCheckable(), name);
        }
        // Graph Only hides every panel, and toggling it back restores them.
        auto* graphOnly = actionNamed(w, QStringLiteral("graphOnly"));
        graphOnly->trigger();
        QTRY_VERIFY(stages->isHidden());
        QTRY_VERIFY(w.centralWidget()->height() >= 0.8 * w.height());
        graphOnly->trigger();
        QTRY_VERIFY(!stages->isHidden());
    }

    /// A node's context menu: expand what is folded, collapse what holds an op, show its lineage,
    /// copy its full name, go to its stage. Data-driven over a collapsed rank, a parallel op and a
    /// logical tensor.
    void nodeContextMenuActions_data() {
        QTest::addColumn<int>("kind");  // 0 collapsed rank, 1 parallel op, 2 logical tensor
        QTest::addColumn<QStringList>("actions");
        QTest::newRow("collapsed rank") << 0 << QStringList{"expand", "expandRankLayers", "lineage", "copyName"};
        QTest::newRow("parallel op") << 1 << QStringList{"collapse", "lineage", "copyName", "goToStage", "injectHere"};
        QTest::newRow("logical tensor") << 2 << QStringList{"lineage", "copyName"};
    }
    void nodeContextMenuActions() {
        QFETCH(int, kind);
        QFETCH(QStringList, actions);
        MainWindow w;
        QVERIFY(openAndWait(w, example(QStringLiteral("mlp-tp2.json"))));
        if (kind == 0) {
            QSignalSpy loaded(&w, &MainWindow::planLoaded);
            w.toggleRank(1);
            QVERIFY(loaded.wait(60000));
        }
        const auto* l = w.scene()->loaded();
        int node = -1;
        for (std::size_t i = 0; i < l->view.nodes.size() && node < 0; ++i) {
            const auto& n = l->view.nodes[i];
            if ((kind == 0 && n.kind == ViewNodeKind::CollapsedRank) || (kind == 1 && n.kind == ViewNodeKind::Op && n.side == ViewSide::Parallel) ||
                (kind == 2 && n.kind == ViewNodeKind::Tensor && n.side == ViewSide::Logical))
                node = static_cast<int>(i);
        }
        QVERIFY(node >= 0);
        QVERIFY(!w.nodeMenu(-1));
        auto* menu = w.nodeMenu(node);
        QVERIFY(menu);
        QStringList names;
        for (auto* a : menu->actions()) {
            names << a->objectName();
            QVERIFY(a->isEnabled());
        }
        for (const auto& a : actions) QVERIFY2(names.contains(a), qPrintable(names.join(QStringLiteral(", "))));
        const auto name = QString::fromStdString(l->view.nodes[node].name);
        for (auto* a : menu->actions())
            if (a->objectName() == QStringLiteral("copyName")) a->trigger();
        QCOMPARE(QGuiApplication::clipboard()->text(), name);
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        for (auto* a : menu->actions())
            if (a->objectName() == QStringLiteral("expand") || a->objectName() == QStringLiteral("collapse")) a->trigger();
        if (kind != 2) {
            QVERIFY(loaded.wait(60000));
            // The rank expanded (or the op's rank folded): the node kinds changed accordingly.
            const auto* after = w.scene()->loaded();
            const auto ranks = after->view.count(ViewSide::Parallel, ViewNodeKind::CollapsedRank);
            QCOMPARE(ranks, std::size_t(kind == 0 ? 0 : 1));
        }
        delete menu;
    }

    /// Help > Keyboard Shortcuts lists every menu command with a shortcut, read from the menus;
    /// no two commands share one (Esc, F-keys and Ctrl chords included).
    void shortcutsAreUniqueAndListed() {
        MainWindow w;
        const auto list = w.shortcuts();
        QStringList keys, commands;
        for (const auto& [command, key] : list) {
            QVERIFY2(!keys.contains(key), qPrintable(key + QStringLiteral(" is used twice, by ") + command));
            keys << key;
            commands << command;
        }
        for (const char* key : {"F5", "F9", "F10", "Esc", "Ctrl+F", "Ctrl+0"}) QVERIFY2(keys.contains(QLatin1String(key)), key);
        QVERIFY(commands.contains(QStringLiteral("Verify ▸ Verify")));
        QVERIFY(actionNamed(w, QStringLiteral("keyboardShortcuts")));
    }

    /// Every node's name fits its box as painted: whole when it fits, else shortened in the
    /// middle with an ellipsis, keeping its head and its tail; the tooltip has it whole.
    void labelsFitTheirBoxes_data() {
        QTest::addColumn<QString>("file");
        QTest::newRow("mlp-tp2") << example(QStringLiteral("mlp-tp2.json"));
        QTest::newRow("llama3-tp2-sp") << example(QStringLiteral("llama3-tp2-sp.json"));
        QTest::newRow("gpt2-pp2") << example(QStringLiteral("gpt2-pp2.json"));
    }
    void labelsFitTheirBoxes() {
        QFETCH(QString, file);
        MainWindow w;
        QVERIFY(openAndWait(w, file));
        auto* scene = w.scene();
        const QFontMetricsF fm(scene->titleFont());
        int shortened = 0;
        for (int i = 0; i < scene->nodeItemCount(); ++i) {
            const auto full = QString::fromStdString(scene->loaded()->view.nodes[i].name);
            const auto shown = scene->shownTitle(i);
            const auto box = scene->itemForNode(i)->boundingRect().adjusted(6, 6, -6, -6);
            QVERIFY2(fm.horizontalAdvance(shown) <= box.width() - 8 + 0.5, qPrintable(full + QStringLiteral(" as ") + shown));
            QVERIFY(fm.height() * 2 <= box.height() + 4);
            QVERIFY(scene->nodeToolTip(i).startsWith(full));
            // The box's name: in a layer's band, without the band's prefix.
            const auto& folded = scene->loaded()->view.nodes[i].shown;
            const auto title = folded.empty() ? full : QString::fromStdString(folded);
            if (shown != title) {
                ++shortened;
                QVERIFY2(shown.contains(QChar(0x2026)), qPrintable(shown));
                QVERIFY(title.startsWith(shown.left(1)) && title.endsWith(shown.right(1)));
            }
        }
        QVERIFY(shortened < scene->nodeItemCount() / 4);  // most names fit whole
    }

    /// Expanding a layer (or a rank) keeps what was opened in sight: after the re-layout its band
    /// (or box) is in the viewport, wherever the new layout put it. Tried on each side's last
    /// layer of GPT-2, far from where the view starts, in a 1280x720 window.
    void expandedLayerStaysInView_data() {
        QTest::addColumn<bool>("parallel");
        QTest::newRow("logical layer") << false;
        QTest::newRow("parallel layer") << true;
    }
    void expandedLayerStaysInView() {
        QFETCH(bool, parallel);
        QTemporaryDir dir;
        const QString path = writeGeneratedPlan(dir, "gpt2");
        MainWindow w;
        QVERIFY(showAt(w, QSize(1280, 720)));
        QVERIFY(openAndWait(w, path));
        const auto* l = w.scene()->loaded();
        std::string key;
        for (const auto& layer : l->view.layers)
            if (layer.collapsed && (layer.side == ViewSide::Parallel) == parallel) key = layer.key;
        QVERIFY(!key.empty());
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        w.toggleLayer(key);
        QVERIFY(loaded.wait(120000));
        l = w.scene()->loaded();
        QRectF band;
        for (const auto& layer : l->view.layers)
            if (layer.key == key) {
                QVERIFY(!layer.collapsed && layer.group >= 0);
                const auto& r = l->placed.groupRects[layer.group];
                band = QRectF(r.x, r.y, r.width, r.height);
            }
        QVERIFY(!band.isNull());
        GraphView* pane = w.dualView()->pane(band.center().x() < l->placed.parallelBounds.x ? ViewSide::Logical : ViewSide::Parallel);
        const QRectF visible = pane->mapToScene(pane->viewport()->rect()).boundingRect();
        QVERIFY2(visible.intersects(band), qPrintable(QStringLiteral("band (%1, %2) not in the view (%3, %4)")
                                                          .arg(band.center().x()).arg(band.center().y()).arg(visible.center().x()).arg(visible.center().y())));
    }

    /// A layout in progress shows what it lays out and for how long, and ends on Cancel (its
    /// layout process killed) or at its budget, with the view on screen unchanged (issue 17: a
    /// layout ran 17 minutes and nothing ended it). Every layer of GPT-2 expanded is 3,398 nodes a
    /// side, well inside the layout bound, and takes dot many seconds a side; the Cancel comes
    /// half a second into it. A layout that ignored either would come back laid out, and fail.
    void layoutsCanBeCancelledAndAreBudgeted() {
        QTemporaryDir dir;
        const QString path = writeGeneratedPlan(dir, "gpt2");
        MainWindow w;
        QVERIFY(openAndWait(w, path));
        QVERIFY(!w.laying());
        const auto before = w.scene()->loadedShared();
        QSignalSpy failed(&w, &MainWindow::loadFailed);
        QSignalSpy loaded(&w, &MainWindow::planLoaded);
        auto* cancel = actionNamed(w, QStringLiteral("cancelLayout"));
        QVERIFY(!cancel->isEnabled());

        w.setLayersCollapsed(false);
        QVERIFY(w.laying());
        QTRY_VERIFY_WITH_TIMEOUT(w.layoutProgressText().contains(QStringLiteral("logical side: ")), 60000);
        QVERIFY2(w.layoutProgressText().contains(QStringLiteral("logical side: 3,398 nodes and 3,972 edges")), qPrintable(w.layoutProgressText()));
        QVERIFY(cancel->isEnabled());
        QTest::qWait(500);
        QVERIFY(w.laying());
        cancel->trigger();
        QTRY_VERIFY_WITH_TIMEOUT(!w.laying(), 20000);  // a liveness bound: the process is killed within 50 ms
        QVERIFY(!cancel->isEnabled());
        QCOMPARE(failed.count(), 0);  // a cancelled re-layout is no failure: no dialog
        QCOMPARE(loaded.count(), 0);
        QCOMPARE(w.scene()->loadedShared(), before);

        // The budget: past it dot is stopped, and the quick layered layout draws the view; the
        // notice above the graph says so and why. No error.
        w.setLayoutBudget(1);
        w.setLayersCollapsed(false);
        QVERIFY(loaded.wait(60000));
        QCOMPARE(failed.count(), 0);
        QCOMPARE(w.scene()->loaded()->view.count(ViewSide::Logical, ViewNodeKind::CollapsedLayer), std::size_t(0));
        QVERIFY(w.noticeBar()->isVisibleTo(&w));
        const auto msg = w.noticeBar()->text();
        QVERIFY2(msg.contains(QStringLiteral("layered layout")) && msg.contains(QStringLiteral("ran past its budget of 1 s")) &&
                     msg.contains(QStringLiteral("3398 nodes")),
                 qPrintable(msg));

        // Within its budget (and dot's), the same layout is laid out by dot; the notice goes.
        w.setLayersCollapsed(true);
        QVERIFY(loaded.wait(60000));
        w.setLayoutBudget(0);
        w.setDotBudget(0);
        w.setLayersCollapsed(false);
        QVERIFY(loaded.wait(180000));
        QVERIFY(w.scene()->loadedShared() != before);
        QCOMPARE(w.scene()->loaded()->view.count(ViewSide::Logical, ViewNodeKind::CollapsedLayer), std::size_t(0));
        QVERIFY(!w.noticeBar()->isVisibleTo(&w));
    }

    // The dark palette: disabled text looks disabled (it differs from the active text and stands
    // out less from the base), placeholder text is readable on the base (WCAG contrast >= 3), and
    // View > Dark Palette applies it to the whole application and back.
    void darkPaletteHasDistinctDisabledAndReadablePlaceholder() {
        const QPalette pal = darkPalette();
        const QColor base = pal.color(QPalette::Active, QPalette::Base);
        for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText}) {
            const QColor active = pal.color(QPalette::Active, role), disabled = pal.color(QPalette::Disabled, role);
            QVERIFY(active != disabled);
            QVERIFY(contrastRatio(active, base) >= 7.0);
            QVERIFY(contrastRatio(disabled, base) < contrastRatio(active, base) - 2.0);
            QVERIFY(contrastRatio(disabled, base) >= 2.0);  // still legible
            QCOMPARE(pal.color(QPalette::Inactive, role), active);
        }
        for (auto group : {QPalette::Active, QPalette::Inactive})
            QVERIFY(contrastRatio(pal.color(group, QPalette::PlaceholderText), pal.color(group, QPalette::Base)) >= 3.0);
        QVERIFY(qFuzzyCompare(contrastRatio(Qt::black, Qt::white), 21.0));
        MainWindow w;
        QAction* dark = nullptr;
        for (auto* a : w.findChildren<QAction*>())
            if (a->text() == QStringLiteral("&Dark Palette")) dark = a;
        QVERIFY(dark);
        dark->setChecked(true);
        QCOMPARE(QApplication::palette().color(QPalette::Disabled, QPalette::WindowText), pal.color(QPalette::Disabled, QPalette::WindowText));
        QCOMPARE(QApplication::palette().color(QPalette::Active, QPalette::PlaceholderText), pal.color(QPalette::Active, QPalette::PlaceholderText));
        dark->setChecked(false);
        QVERIFY(QApplication::palette().color(QPalette::Active, QPalette::Base) != base);
    }
};

#define main qtestMain
QTEST_MAIN(TestStudio)
#undef main
TV_HELPER_PROCESS_MAIN(qtestMain)
#include "tst_studio.moc"
