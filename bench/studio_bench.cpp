// Measures the Studio on a plan: time to first picture (read, cut stages, build the view, lay
// out, build the scene, first paint) and frame times while panning, on whatever Qt platform is
// set (offscreen or xcb).
// Usage: studio-bench PLAN.json [--expand-rank R] [--expand-rank-layers R] [--expand-layer KEY] [--expand-all ranks|layers]...
// (KEY as in ViewLayer::key,
// e.g. "logical layers.3 forward" or "rank 0 mb 1 layers.3 backward"), applied in order.
// --verify [JOBS]: then press F5 and measure the run as the user sees it (F5 to verdict, the
// event loop's lateness meanwhile, the batches of results, panning during the run, F5 again
// with every proof cached, and for a failing plan the time until the failing op is shown).
#include <QApplication>
#include <QElapsedTimer>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTimer>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "graph_view.hpp"
#include "layout/layout_process.hpp"
#include "dual_view.hpp"
#include "main_window.hpp"
#include "verification_controller.hpp"
#include "verify/solver_process.hpp"

int main(int argc, char** argv) {
    // The Studio runs its layouts and solver checks in processes of this very program: serve them
    // as trainverify-studio does (without this, every layout waited for its time to run out).
    if (argc == 3 && std::strcmp(argv[1], "--solver-process") == 0) return tv::solverProcessMain(std::atoi(argv[2]));
    if (argc == 3 && std::strcmp(argv[1], "--layout-process") == 0) return tv::layoutProcessMain(std::atoi(argv[2]));
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("TrainVerifyBench"));
    const auto args = QApplication::arguments();
    if (args.size() < 2) {
        std::fprintf(stderr, "usage: studio-bench PLAN.json [--expand-rank R] [--expand-layer KEY] [--expand-all ranks|layers]... [--grab FILE.png]\n");
        return 3;
    }
    std::vector<std::pair<QString, QString>> steps;
    QString grab;  // --grab FILE.png: the window after the steps (what they opened in sight), else at the start view
    int verifyJobs = -1;  // --verify JOBS (0: one per hardware thread)
    for (int i = 2; i + 1 < args.size(); i += 2) {
        if (args[i] == QStringLiteral("--verify")) {
            verifyJobs = args[i + 1].toInt();
            continue;
        }
        if (args[i] == QStringLiteral("--grab")) {
            grab = args[i + 1];
            continue;
        }
        if (args[i] != QStringLiteral("--expand-rank") && args[i] != QStringLiteral("--expand-layer") && args[i] != QStringLiteral("--expand-all") &&
            args[i] != QStringLiteral("--expand-rank-layers")) {
            std::fprintf(stderr, "studio-bench: unknown option %s\n", qPrintable(args[i]));
            return 3;
        }
        steps.emplace_back(args[i], args[i + 1]);
    }
    tv::ui::MainWindow w;
    w.resize(1600, 1000);
    w.show();
    QSignalSpy loaded(&w, &tv::ui::MainWindow::planLoaded);
    QElapsedTimer t;
    t.start();
    w.openPlan(args[1]);
    if (!loaded.wait(600000)) {
        std::fprintf(stderr, "studio-bench: the plan did not load\n");
        return 3;
    }
    auto* viewport = w.view()->viewport();
    viewport->repaint();
    const double firstPicture = static_cast<double>(t.nsecsElapsed()) / 1e6;
    const auto* first = w.scene()->loaded();
    std::printf("time to first picture: %.0f ms (on the worker %.0f ms: read %.0f, stages %.0f, view %.0f, layout %.0f)\n", firstPicture,
                first->seconds * 1000, first->readSeconds * 1000, first->stageSeconds * 1000, first->viewSeconds * 1000,
                first->layoutSeconds * 1000);
    for (const auto& [what, arg] : steps) {
        t.restart();
        if (what == QStringLiteral("--expand-rank")) {
            w.toggleRank(arg.toInt());
        } else if (what == QStringLiteral("--expand-rank-layers")) {
            w.setRankLayersExpanded(arg.toInt(), true);
        } else if (what == QStringLiteral("--expand-all")) {
            // --expand-all ranks | layers: View > Expand All Ranks (or Layers).
            if (arg == QStringLiteral("ranks")) w.setRanksCollapsed(false);
            else if (arg == QStringLiteral("layers")) w.setLayersCollapsed(false);
            else {
                std::fprintf(stderr, "studio-bench: --expand-all takes ranks or layers\n");
                return 3;
            }
        } else {
            bool known = false;
            for (const auto& layer : w.scene()->loaded()->view.layers) known |= layer.key == arg.toStdString();
            if (!known) {
                std::fprintf(stderr, "studio-bench: no layer group named '%s'\n", qPrintable(arg));
                return 3;
            }
            w.toggleLayer(arg.toStdString());
        }
        if (!loaded.wait(600000)) return 3;
        viewport->repaint();
        const auto* now = w.scene()->loaded();
        std::printf("%s %s: %.0f ms (stages %.0f, view %.0f, layout %.0f), %zu view nodes\n", qPrintable(what.mid(2)), qPrintable(arg),
                    static_cast<double>(t.nsecsElapsed()) / 1e6, now->stageSeconds * 1000, now->viewSeconds * 1000, now->layoutSeconds * 1000,
                    now->view.nodes.size());
        std::printf("  layout: %s\n", now->placed.notice.empty() ? "dot" : now->placed.notice.c_str());
    }
    const auto* l = w.scene()->loaded();
    std::printf("plan: %zu parallel ops, %zu view nodes, %d scene node items, %d lineage items\n", l->plan->parallel.ops.size(),
                l->view.nodes.size(), w.scene()->nodeItemCount(), w.scene()->lineageItemCount());
    // Panning the parallel pane (the logical pane follows it, by stage): each frame repaints the
    // window as the screen would show it, both panes, the lineage overlay and the overview.
    auto measure = [&](const char* what) {
        std::vector<double> frames;
        auto* h = w.view()->horizontalScrollBar();
        auto* v = w.view()->verticalScrollBar();
        for (int i = 0; i < 120; ++i) {
            h->setValue(h->value() + (i % 40 < 20 ? 37 : -37));
            v->setValue(v->value() + (i % 30 < 15 ? 23 : -23));
            QElapsedTimer f;
            f.start();
            w.repaint();
            frames.push_back(static_cast<double>(f.nsecsElapsed()) / 1e6);
        }
        std::sort(frames.begin(), frames.end());
        std::printf("panning %s (zoom %.3f%s): median frame %.2f ms, p95 %.2f ms, max %.2f ms\n", what, w.view()->zoom(),
                    w.view()->paintedFromSnapshot() ? ", from the snapshot" : "", frames[frames.size() / 2], frames[frames.size() * 95 / 100],
                    frames.back());
    };
    if (!grab.isEmpty()) {
        // After expanding, the view the window keeps (what was opened, in sight); else the start view.
        if (steps.empty()) w.view()->showStart();
        if (!w.grab().save(grab)) std::fprintf(stderr, "studio-bench: cannot write %s\n", qPrintable(grab));
    }
    w.dualView()->fitAll();
    w.repaint();  // the first frame at fit takes the snapshot
    measure("at fit");
    for (qreal z : {0.05, 0.2}) {
        w.view()->resetTransform();
        w.view()->scale(z, z);
        w.repaint();
        measure(z < 0.1 ? "zoomed out" : "at 20 %");
    }
    w.dualView()->zoomActual();
    measure("at 100 %");
    if (verifyJobs < 0) return 0;

    // F5 as the user presses it; a 16 ms timer on the GUI thread measures how late the event
    // loop runs while the workers solve.
    tv::VerifyOptions vo;
    vo.jobs = static_cast<unsigned>(verifyJobs);
    w.setVerifyOptions(vo);
    auto runOnce = [&](const char* what) -> bool {
        std::vector<double> lateness;
        int batches = 0;
        auto c1 = QObject::connect(w.verification(), &tv::ui::VerificationController::stagesUpdated, &w, [&] { ++batches; });
        QElapsedTimer tick;
        QTimer timer;
        timer.setInterval(16);
        QObject::connect(&timer, &QTimer::timeout, [&] {
            const double ms = static_cast<double>(tick.nsecsElapsed()) / 1e6;
            lateness.push_back(std::max(0.0, ms - 16.0));
            tick.restart();
        });
        QSignalSpy done(&w, &tv::ui::MainWindow::verificationFinished);
        QElapsedTimer run;
        run.start();
        tick.start();
        timer.start();
        w.verify();
        if (!done.wait(3600000)) return false;
        const double ms = static_cast<double>(run.nsecsElapsed()) / 1e6;
        timer.stop();
        QObject::disconnect(c1);
        std::sort(lateness.begin(), lateness.end());
        const auto r = w.report();
        std::printf("verify %s: F5 to verdict %.0f ms (%s; %zu stages, %u solved, %u cached, %u jobs), %d batches of results; "
                    "event loop late by median %.1f ms, p95 %.1f ms, max %.1f ms\n",
                    what, ms, std::string(tv::headline(r->verdict)).c_str(), r->results.size(), r->uniqueStages, r->cachedStages, r->jobs,
                    batches, lateness.empty() ? 0.0 : lateness[lateness.size() / 2], lateness.empty() ? 0.0 : lateness[lateness.size() * 95 / 100],
                    lateness.empty() ? 0.0 : lateness.back());
        if (r->failure) {
            // Showing the failing op can take re-layouts (expanding what folds it).
            QElapsedTimer shown;
            shown.start();
            while (w.scene()->selectedNode() < 0 && shown.elapsed() < 60000) QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
            const int node = w.scene()->selectedNode();
            std::printf("  failing op shown after a further %.0f ms: %s (%s at %s, rank %d)\n", static_cast<double>(shown.nsecsElapsed()) / 1e6,
                        node >= 0 ? w.scene()->loaded()->view.nodes[node].name.c_str() : "(not shown)",
                        std::string(tv::toString(r->failure->kind)).c_str(), r->failure->parallelOp.c_str(), r->failure->rank);
        }
        return true;
    };
    if (!runOnce("(first run)")) return 3;
    // Panning while a run is in progress: the workers compete with painting for the CPU.
    {
        QSignalSpy done(&w, &tv::ui::MainWindow::verificationFinished);
        w.verification()->proofs().clear();
        w.verify();
        measure("during verification");
        done.wait(3600000);
    }
    if (!runOnce("(again, proofs cached)")) return 3;
    std::printf("peak memory: %.0f MiB\n", static_cast<double>(tv::peakMemoryKb()) / 1024.0);
    return 0;
}
