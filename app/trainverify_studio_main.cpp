// trainverify-studio: the desktop explorer.
#include <QApplication>
#include <QCommandLineParser>
#include <QFileInfo>
#include <QTimer>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "layout/layout_process.hpp"
#include "compare_window.hpp"
#include "main_window.hpp"
#include "torch/torch_pair.hpp"
#include "verify/solver_process.hpp"

int main(int argc, char** argv) {
    // A solver process of the Studio's verify run (solver_process.hpp), or a layout process of its
    // views (layout_process.hpp), before anything of Qt.
    if (argc == 3 && std::strcmp(argv[1], "--solver-process") == 0) return tv::solverProcessMain(std::atoi(argv[2]));
    if (argc == 3 && std::strcmp(argv[1], "--layout-process") == 0) return tv::layoutProcessMain(std::atoi(argv[2]));
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("trainverify-studio"));
    QApplication::setOrganizationName(QStringLiteral("TrainVerify"));
    QApplication::setOrganizationDomain(QStringLiteral("trainverify.dev"));
    QApplication::setApplicationDisplayName(QStringLiteral("TrainVerify Studio"));
    QApplication::setApplicationVersion(QStringLiteral(TV_VERSION));
    QApplication::setDesktopFileName(QStringLiteral("dev.trainverify.Studio"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "TrainVerify Studio: the logical and the parallel graph of a training plan side by side, with stages and lineage."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("plan"), QStringLiteral("A plan file (JSON, format version 1, 2 or 3) to open."));
    QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                  QStringLiteral("Open the plan, save a picture of the window to FILE and quit."), QStringLiteral("FILE"));
    QCommandLineOption select(QStringLiteral("select"), QStringLiteral("Select the op or tensor whose name matches NAME."),
                              QStringLiteral("NAME"));
    QCommandLineOption logical(QStringLiteral("logical"),
                               QStringLiteral("An nnScaler logical plan (.pkl) or a single-device PyTorch graph (.py, .gpickle); with --parallel, open the pair."),
                               QStringLiteral("FILE"));
    QCommandLineOption parallel(QStringLiteral("parallel"),
                                QStringLiteral("An nnScaler parallel plan (.pkl) of the --logical plan, or one rank's PyTorch graph (given once per rank)."),
                                QStringLiteral("FILE"));
    QCommandLineOption relations(QStringLiteral("relations"), QStringLiteral("A relations file for a pair of PyTorch programs (docs/torch-graphs.md)."),
                                 QStringLiteral("FILE"));
    parser.addOption(relations);
    QCommandLineOption verify(QStringLiteral("verify"),
                              QStringLiteral("Verify the plan once it is open (as F5 does); with --screenshot, the picture shows the result."));
    parser.addOption(verify);
    QCommandLineOption lesson(QStringLiteral("lesson"), QStringLiteral("Open a guided lesson's buggy plan (see Help > Lessons for the ids)."),
                              QStringLiteral("ID"));
    parser.addOption(lesson);
    QCommandLineOption compare(QStringLiteral("compare"),
                               QStringLiteral("Compare the plan with its twin FILE (File > Compare With...): one layout, the differences "
                                              "ringed, both verified; with --screenshot, the picture is of the comparison."),
                               QStringLiteral("FILE"));
    parser.addOption(compare);
    QCommandLineOption size(QStringLiteral("size"), QStringLiteral("The window's size, e.g. 1280x720 (for --screenshot)."), QStringLiteral("WxH"));
    parser.addOption(size);
    parser.addOption(screenshot);
    parser.addOption(select);
    parser.addOption(logical);
    parser.addOption(parallel);
    parser.process(app);

    tv::ui::MainWindow window;
    QSize windowSize;
    if (parser.isSet(size)) {
        const auto parts = parser.value(size).split(QLatin1Char('x'));
        bool okW = false, okH = false;
        if (parts.size() == 2) windowSize = QSize(parts[0].toInt(&okW), parts[1].toInt(&okH));
        if (!okW || !okH || windowSize.width() < 200 || windowSize.height() < 150 || windowSize.width() > 16384 || windowSize.height() > 16384) {
            std::fprintf(stderr, "trainverify-studio: --size takes WIDTHxHEIGHT, e.g. 1280x720 (each 150 to 16384), not %s\n", qPrintable(parser.value(size)));
            return 3;
        }
        window.resize(windowSize);
    }
    auto args = parser.positionalArguments();
    const bool pair = parser.isSet(logical) || parser.isSet(parallel);
    if (pair && !(parser.isSet(logical) && parser.isSet(parallel))) {
        std::fprintf(stderr, "trainverify-studio: --logical and --parallel go together\n");
        return 3;
    }
    // With --logical, the files after --parallel are the ranks' graphs (as trainverify verify takes them).
    QStringList rankFiles = parser.values(parallel);
    if (pair && !args.isEmpty()) {
        if (!tv::torch::isTorchGraphPath(parser.value(logical).toStdString())) {
            std::fprintf(stderr, "trainverify-studio: give a plan file or --logical and --parallel, not both\n");
            return 3;
        }
        rankFiles << args;
        args.clear();
    }
    if (args.size() > 1 && !pair) {
        std::fprintf(stderr, "trainverify-studio: give at most one plan file\n");
        return 3;
    }
    if (parser.isSet(relations) && !pair) {
        std::fprintf(stderr, "trainverify-studio: --relations goes with --logical and --parallel\n");
        return 3;
    }
    if (pair) args = {parser.values(parallel).first()};
    if (parser.isSet(lesson)) {
        if (pair || !args.isEmpty()) {
            std::fprintf(stderr, "trainverify-studio: give a plan file, --logical and --parallel, or --lesson\n");
            return 3;
        }
        QString path;
        QStringList ids;
        for (const auto& l : window.lessons()) {
            ids << QString::fromStdString(l.id);
            if (QString::fromStdString(l.id) == parser.value(lesson)) path = QString::fromStdString(l.buggy);
        }
        if (path.isEmpty()) {
            std::fprintf(stderr, "trainverify-studio: no lesson %s (lessons: %s)\n", qPrintable(parser.value(lesson)), qPrintable(ids.join(QStringLiteral(", "))));
            return 3;
        }
        args = {path};
    }
    int status = 0;
    QTimer idle;
    idle.setInterval(200);
    QObject::connect(&idle, &QTimer::timeout, &app, [&] {
        if (window.laying()) return;
        idle.stop();
        const bool ok = window.grab().save(parser.value(screenshot));
        if (!ok) std::fprintf(stderr, "trainverify-studio: cannot write %s\n", qPrintable(parser.value(screenshot)));
        app.exit(ok ? 0 : 3);
    });
    if (!args.isEmpty()) {
        for (const auto& f : pair ? QStringList{parser.value(logical), parser.value(parallel)} : args)
            if (!QFileInfo::exists(f)) {
                std::fprintf(stderr, "trainverify-studio: %s: no such file\n", qPrintable(f));
                return 3;
            }
        QObject::connect(&window, &tv::ui::MainWindow::loadFailed, &app, [&](const QString& msg) {
            std::fprintf(stderr, "trainverify-studio: %s\n", qPrintable(msg));
            status = 3;
            if (parser.isSet(screenshot)) app.exit(3);
        });
        QObject::connect(
            &window, &tv::ui::MainWindow::planLoaded, &app, [&] {
            status = 0;
            if (parser.isSet(select)) {
                window.find(parser.value(select));
                window.activateFindResult(0);
            }

            // The picture is taken once nothing is being laid out (what --select or a failure
            // unfolds is drawn first).
            auto shoot = [&] {
                QTimer::singleShot(parser.isSet(verify) ? 1500 : 300, &app, [&] { idle.start(); });
            };
            if (parser.isSet(compare)) {
                if (!QFileInfo::exists(parser.value(compare))) {
                    std::fprintf(stderr, "trainverify-studio: %s: no such file\n", qPrintable(parser.value(compare)));
                    app.exit(3);
                    return;
                }
                window.compareWithFile(parser.value(compare));
                auto* cmp = window.compareWindow();
                if (cmp && windowSize.isValid()) cmp->resize(windowSize);
                if (parser.isSet(screenshot) && cmp) {
                    QObject::connect(cmp, &tv::ui::CompareWindow::loadFailed, &app, [&](const QString& msg) {
                        std::fprintf(stderr, "trainverify-studio: %s\n", qPrintable(msg));
                        app.exit(3);
                    });
                    QObject::connect(cmp, &tv::ui::CompareWindow::verified, &app, [&, cmp] {
                        QTimer::singleShot(500, &app, [&, cmp] {
                            const bool ok = cmp->grab().save(parser.value(screenshot));
                            if (!ok) std::fprintf(stderr, "trainverify-studio: cannot write %s\n", qPrintable(parser.value(screenshot)));
                            app.exit(ok ? 0 : 3);
                        });
                    }, Qt::SingleShotConnection);
                }
            } else if (parser.isSet(verify)) {
                // The picture waits for the verdict (and for what it reveals to be laid out).
                if (parser.isSet(screenshot)) QObject::connect(&window, &tv::ui::MainWindow::verificationFinished, &app, shoot, Qt::SingleShotConnection);
                window.verify();
            } else if (parser.isSet(screenshot)) {
                shoot();
            }
        }, Qt::SingleShotConnection);
        if (pair) window.openPair(parser.value(logical), rankFiles, parser.value(relations));
        else if (parser.isSet(lesson)) window.openLesson(parser.value(lesson), true);
        else window.openPlan(args.first());
    } else if (parser.isSet(screenshot)) {
        std::fprintf(stderr, "trainverify-studio: --screenshot needs a plan file\n");
        return 3;
    }
    window.show();
    const int rc = app.exec();
    return rc ? rc : status;
}
