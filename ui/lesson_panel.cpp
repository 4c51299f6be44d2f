#include "lesson_panel.hpp"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace tv::ui {

LessonPanel::LessonPanel(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(6, 6, 6, 6);
    title_ = new QLabel(this);
    title_->setWordWrap(true);
    QFont f = title_->font();
    f.setBold(true);
    f.setPointSizeF(f.pointSizeF() * 1.15);
    title_->setFont(f);
    which_ = new QLabel(this);
    which_->setWordWrap(true);
    body_ = new QTextBrowser(this);
    body_->setOpenLinks(false);
    auto* buttons = new QHBoxLayout;
    buggyButton_ = new QPushButton(tr("Open the buggy plan"), this);
    correctButton_ = new QPushButton(tr("Open the correct plan"), this);
    buttons->addWidget(buggyButton_);
    buttons->addWidget(correctButton_);
    compareButton_ = new QPushButton(tr("Compare both"), this);
    compareButton_->setObjectName(QStringLiteral("compareLesson"));
    compareButton_->setToolTip(tr("The correct and the buggy plan side by side in one layout, what differs ringed, both verified"));
    buttons->addWidget(compareButton_);
    connect(compareButton_, &QPushButton::clicked, this, [this] { emit compareRequested(QString::fromStdString(lesson_.id)); });
    v->addWidget(title_);
    v->addWidget(which_);
    v->addWidget(body_, 1);
    v->addLayout(buttons);
    connect(buggyButton_, &QPushButton::clicked, this, [this] { emit openRequested(QString::fromStdString(lesson_.id), true); });
    connect(correctButton_, &QPushButton::clicked, this, [this] { emit openRequested(QString::fromStdString(lesson_.id), false); });
    title_->setText(tr("No lesson open"));
    which_->setText(tr("File ▸ Example Gallery lists the guided lessons."));
    buggyButton_->setEnabled(false);
    correctButton_->setEnabled(false);
    compareButton_->setEnabled(false);
}

void LessonPanel::showLesson(const Lesson& lesson, bool buggy) {
    lesson_ = lesson;
    shown_ = true;
    title_->setText(QString::fromStdString(lesson.title));
    which_->setText(buggy ? tr("The buggy plan is open. Press F5 to verify it and find the bug.")
                          : tr("The correct plan is open. Press F5: every stage is proven."));
    body_->setHtml(QString::fromStdString(lesson.explanation));
    buggyButton_->setEnabled(!buggy);
    correctButton_->setEnabled(buggy);
    compareButton_->setEnabled(true);
}

QString LessonPanel::text() const { return title_->text() + QStringLiteral("\n") + which_->text() + QStringLiteral("\n") + body_->toPlainText(); }

}  // namespace tv::ui
