// A guided lesson beside the graphs: what the strategy does, what the bug breaks, what to look
// for; and buttons to open the buggy plan or the correct one to compare.
#pragma once

#include <QWidget>

#include "explore/lessons.hpp"

class QLabel;
class QPushButton;
class QTextBrowser;

namespace tv::ui {

class LessonPanel : public QWidget {
    Q_OBJECT
public:
    explicit LessonPanel(QWidget* parent = nullptr);
    /// Shows a lesson; `buggy` says which of its plans is open.
    void showLesson(const Lesson& lesson, bool buggy);
    const Lesson* lesson() const { return shown_ ? &lesson_ : nullptr; }
    QString text() const;

signals:
    /// The user asked for the lesson's other plan.
    void openRequested(const QString& lessonId, bool buggy);
    /// The user asked to see the two plans side by side.
    void compareRequested(const QString& lessonId);

private:
    QLabel* title_;
    QLabel* which_;
    QTextBrowser* body_;
    QPushButton* buggyButton_;
    QPushButton* correctButton_;
    QPushButton* compareButton_;
    Lesson lesson_;
    bool shown_ = false;
};

}  // namespace tv::ui
