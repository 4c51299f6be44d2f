// What the Studio's test suites share: bundled example paths, opening a plan and waiting for it,
// actions by name, and the settings sandbox every suite starts in.
#pragma once

#include <QAction>
#include <QCoreApplication>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>

#include "main_window.hpp"

namespace tv::ui::testing {

inline QString example(const QString& name) { return QStringLiteral(TV_SOURCE_DIR "/resources/examples/") + name; }

/// Settings and caches go to the test locations, under an application name of the suite's own.
inline void sandbox(const QString& suite) {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("TrainVerifyTests"));
    QCoreApplication::setApplicationName(suite);
}

/// The window's action of that object name (null if none).
inline QAction* actionNamed(MainWindow& w, const QString& name) { return w.findChild<QAction*>(name); }

/// Shows the window at that size and waits until it is on screen (what layout and painting need).
inline bool showAt(MainWindow& w, QSize size) {
    w.resize(size);
    w.show();
    return QTest::qWaitForWindowExposed(&w);
}

inline bool openAndWait(MainWindow& w, const QString& path) {
    QSignalSpy loaded(&w, &MainWindow::planLoaded);
    w.openPlan(path);
    return loaded.wait(60000);
}

}  // namespace tv::ui::testing
