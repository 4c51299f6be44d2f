// trainverify-studio: the desktop explorer.
#include <QApplication>
#include <QCommandLineParser>
#include <QFileInfo>
#include <QTimer>

#include <cstdio>

#include "main_window.hpp"

int main(int argc, char** argv) {
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
    parser.addPositionalArgument(QStringLiteral("plan"), QStringLiteral("A plan file (JSON, format version 1) to open."));
    QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                  QStringLiteral("Open the plan, save a picture of the window to FILE and quit."), QStringLiteral("FILE"));
    QCommandLineOption select(QStringLiteral("select"), QStringLiteral("Select the op or tensor whose name matches NAME."),
                              QStringLiteral("NAME"));
    parser.addOption(screenshot);
    parser.addOption(select);
    parser.process(app);

    tv::ui::MainWindow window;
    const auto args = parser.positionalArguments();
    if (args.size() > 1) {
        std::fprintf(stderr, "trainverify-studio: give at most one plan file\n");
        return 3;
    }
    int status = 0;
    if (!args.isEmpty()) {
        if (!QFileInfo::exists(args.first())) {
            std::fprintf(stderr, "trainverify-studio: %s: no such file\n", qPrintable(args.first()));
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
            if (parser.isSet(screenshot)) {
                QTimer::singleShot(300, &app, [&] {
                    const bool ok = window.grab().save(parser.value(screenshot));
                    if (!ok) std::fprintf(stderr, "trainverify-studio: cannot write %s\n", qPrintable(parser.value(screenshot)));
                    app.exit(ok ? 0 : 3);
                });
            }
        }, Qt::SingleShotConnection);
        window.openPlan(args.first());
    } else if (parser.isSet(screenshot)) {
        std::fprintf(stderr, "trainverify-studio: --screenshot needs a plan file\n");
        return 3;
    }
    window.show();
    const int rc = app.exec();
    return rc ? rc : status;
}
