// Measures the Studio on a plan: time to first picture (read, cut stages, build the view, lay
// out, build the scene, first paint) and frame times while panning, on whatever Qt platform is
// set (offscreen or xcb). Usage: studio-bench PLAN.json [--expand-rank R]
#include <QApplication>
#include <QElapsedTimer>
#include <QScrollBar>
#include <QSignalSpy>

#include <algorithm>
#include <cstdio>

#include "graph_view.hpp"
#include "main_window.hpp"

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("TrainVerifyBench"));
    const auto args = QApplication::arguments();
    if (args.size() < 2) {
        std::fprintf(stderr, "usage: studio-bench PLAN.json [--expand-rank R]\n");
        return 3;
    }
    int expand = -1;
    if (args.size() >= 4 && args[2] == QStringLiteral("--expand-rank")) expand = args[3].toInt();
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
    std::printf("time to first picture: %.0f ms (of which read+stages+view+layout on the worker %.0f ms)\n", firstPicture,
                w.scene()->loaded()->seconds * 1000);
    if (expand >= 0) {
        t.restart();
        w.toggleRank(expand);
        if (!loaded.wait(600000)) return 3;
        viewport->repaint();
        std::printf("expand rank %d: %.0f ms\n", expand, static_cast<double>(t.nsecsElapsed()) / 1e6);
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
    w.view()->fitAll();
    measure("at fit");
    w.view()->zoomActual();
    measure("at 100 %");
    return 0;
}
