// Compare a plan with its twin from the main window: a lesson's pair, the plan with a bug
// injected beside the plan it was made from, or the plan on screen beside another file. The
// comparing is the compare window's (compare_window.hpp); these only say what to compare.
#include "main_window.hpp"

#include <QFileInfo>
#include <QStatusBar>

#include "compare_window.hpp"

namespace tv::ui {

CompareWindow* MainWindow::compareWindow() const { return compare_.data(); }

CompareWindow* MainWindow::ensureCompareWindow() {
    if (!compare_) {
        compare_ = new CompareWindow(this);
        compare_->setWindowFlag(Qt::Window);
    }
    compare_->setVerifyOptions(verifyOptions_);
    if (isVisible()) {
        compare_->show();
        compare_->raise();
        compare_->activateWindow();
    }
    return compare_;
}

bool MainWindow::compareLesson(const QString& id) {
    for (const auto& lesson : lessons_) {
        if (QString::fromStdString(lesson.id) != id) continue;
        ensureCompareWindow()->compareFiles(QString::fromStdString(lesson.correct), QString::fromStdString(lesson.buggy));
        return true;
    }
    return false;
}

bool MainWindow::compareWithOriginal() {
    const auto* l = scene_->loaded();
    if (!l || !l->mutant() || !original_) {
        statusBar()->showMessage(tr("Compare with Original: no bug is injected into the plan on screen."), 6000);
        return false;
    }
    ensureCompareWindow()->compare(original_, l->opened);
    return true;
}

bool MainWindow::compareWithFile(const QString& path) {
    const auto* l = scene_->loaded();
    if (!l) return false;
    // The plan on screen is the reference (as opened: with its bug, if one was injected).
    auto* w = ensureCompareWindow();
    if (l->mutant() || !l->logicalPath().isEmpty()) {
        // Not a file of its own: the plan as it is, with the other file read in the background.
        w->compareWithFile(l->opened, QFileInfo(path).absoluteFilePath());
        return true;
    }
    w->compareFiles(l->path(), QFileInfo(path).absoluteFilePath());
    return true;
}

}  // namespace tv::ui
