// The gallery's window side: File ▸ Example Gallery, the guided lessons (read once, opened from the
// gallery, the Help menu or the lesson panel) and the lesson dock, shown beside its own plans only.
// MainWindow's member functions (main_window.hpp); the gallery dialog is gallery.hpp.
#include "main_window.hpp"

#include <QDockWidget>
#include <QFileInfo>
#include <QStatusBar>

#include "gallery.hpp"
#include "lesson_panel.hpp"

namespace tv::ui {

void MainWindow::buildLessons() {
    // Lessons: read once; a broken manifest says what and where in the status bar.
    const auto dir = lessonsDir();
    if (!dir.isEmpty()) {
        auto list = loadLessons(dir.toStdString());
        lessons_ = std::move(list.lessons);
        if (!list.problems.empty()) statusBar()->showMessage(QString::fromStdString(list.problems.front().toString()), 15000);
    }
    lessonPanel_ = new LessonPanel(this);
    lessonDock_ = new QDockWidget(tr("Lesson"), this);
    lessonDock_->setObjectName(QStringLiteral("lesson"));
    lessonDock_->setWidget(lessonPanel_);
    addDockWidget(Qt::RightDockWidgetArea, lessonDock_);
    // The explanation shares the right-hand column with the inspector, as a tab of its full height.
    if (auto* inspectorDock = findChild<QDockWidget*>(QStringLiteral("inspector"))) tabifyDockWidget(inspectorDock, lessonDock_);
    lessonDock_->hide();
    connect(lessonPanel_, &LessonPanel::openRequested, this, [this](const QString& lessonId, bool buggy) { openLesson(lessonId, buggy); });
    connect(lessonPanel_, &LessonPanel::compareRequested, this, [this](const QString& lessonId) { compareLesson(lessonId); });
}

bool MainWindow::openLesson(const QString& id, bool buggy) {
    for (const auto& lesson : lessons_) {
        if (QString::fromStdString(lesson.id) != id) continue;
        pendingLesson_ = lesson;  // shown when its plan is open
        openPlan(QString::fromStdString(buggy ? lesson.buggy : lesson.correct));
        return true;
    }
    return false;
}

void MainWindow::showLessonFor(const LoadedPlan& loaded) {
    // A lesson shows beside its own plans only, once one of them is open.
    const auto path = QFileInfo(loaded.path()).canonicalFilePath().toStdString();
    if (pendingLesson_ && (path == pendingLesson_->buggy || path == pendingLesson_->correct)) {
        lessonPanel_->showLesson(*pendingLesson_, path == pendingLesson_->buggy);
        lessonDock_->show();
        lessonDock_->raise();
    } else if (const auto* lesson = lessonPanel_->lesson(); !lesson || (path != lesson->buggy && path != lesson->correct)) {
        lessonDock_->hide();
    }
    pendingLesson_.reset();
}

void MainWindow::showGallery() {
    GalleryDialog dlg(lessons_, examplesDir(), this);
    if (dlg.exec() != QDialog::Accepted || !dlg.hasChoice()) return;
    const auto lesson = dlg.lessonId();
    if (!lesson.isEmpty()) openLesson(lesson, true);
    else openPlan(dlg.planPath());
}

}  // namespace tv::ui
