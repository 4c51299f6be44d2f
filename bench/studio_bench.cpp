// Measures the Studio on a plan: time to first picture (read, cut stages, build the view, lay
// out, build the scene, first paint) and frame times while panning, on whatever Qt platform is
// set (offscreen or xcb).
// Usage: studio-bench PLAN.json [--expand-rank R] [--expand-layer KEY]... (KEY as in ViewLayer::key,
// e.g. "logical layers.3 forward" or "rank 0 mb 1 layers.3 backward"), applied in order.
#include <QApplication>
#include <QElapsedTimer>
#include <QScrollBar>
#include <QSignalSpy>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "graph_view.hpp"
#include "main_window.hpp"

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("TrainVerifyBench"));
    const auto args = QApplication::arguments();
    if (args.size() < 2) {
        std::fprintf(stderr, "usage: studio-bench PLAN.json [--expand-rank R] [--expand-layer KEY]... [--grab FILE.png]\n");
        return 3;
    }
    std::vector<std::pair<QString, QString>> steps;
    QString grab;  // --grab FILE.png: the window after the steps, at the start view
    for (int i = 2; i + 1 < args.size(); i += 2) {
        if (args[i] == QStringLiteral("--grab")) {
            grab = args[i + 1];
            continue;
        }
        if (args[i] != QStringLiteral("--expand-rank") && args[i] != QStringLiteral("--expand-layer")) {
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
    }
    const auto* l = w.scene()->loaded();
    std::printf("plan: %zu parallel ops, %zu view nodes, %d scene node items, %d lineage items\n", l->plan->parallel.ops.size(),
                l->view.nodes.size(), w.scene()->nodeItemCount(), w.scene()->lineageItemCount());
    auto measure = [&](const char* what) {
        std::vector<double> frames;
        auto* h = w.view()->horizontalScrollBar();
        auto* v = w.view()->verticalScrollBar();
        for (int i = 0; i < 120; ++i) {
            h->setValue(h->value() + (i % 40 < 20 ? 37 : -37));
            v->setValue(v->value() + (i % 30 < 15 ? 23 : -23));
            QElapsedTimer f;
            f.start();
            viewport->repaint();
            frames.push_back(static_cast<double>(f.nsecsElapsed()) / 1e6);
        }
        std::sort(frames.begin(), frames.end());
        std::printf("panning %s: median frame %.2f ms, p95 %.2f ms, max %.2f ms\n", what, frames[frames.size() / 2],
                    frames[frames.size() * 95 / 100], frames.back());
    };
    if (!grab.isEmpty()) {
        w.view()->showStart();
        if (!w.grab().save(grab)) std::fprintf(stderr, "studio-bench: cannot write %s\n", qPrintable(grab));
    }
    w.view()->fitAll();
    measure("at fit");
    w.view()->zoomActual();
    measure("at 100 %");
    return 0;
}
