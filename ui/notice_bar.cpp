#include "notice_bar.hpp"

#include <QHBoxLayout>
#include <QLabel>
#include <QStyle>
#include <QToolButton>

namespace tv::ui {

NoticeBar::NoticeBar(QWidget* parent) : QFrame(parent) {
    setObjectName(QStringLiteral("noticeBar"));
    setFrameShape(QFrame::StyledPanel);
    auto* h = new QHBoxLayout(this);
    h->setContentsMargins(8, 4, 4, 4);
    label_ = new QLabel(this);
    label_->setWordWrap(true);
    label_->setTextFormat(Qt::PlainText);
    label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    close_ = new QToolButton(this);
    close_->setAutoRaise(true);
    close_->setIcon(style()->standardIcon(QStyle::SP_TitleBarCloseButton));
    close_->setToolTip(tr("Close this notice"));
    h->addWidget(label_, 1);
    h->addWidget(close_, 0, Qt::AlignTop);
    connect(close_, &QToolButton::clicked, this, &NoticeBar::clearNotice);
    hide();
}

void NoticeBar::showNotice(const QString& text, Tone tone) {
    tone_ = tone;
    label_->setText(text);
    // Readable on the light and the dark palette: a tinted band with dark text.
    setStyleSheet(tone == Tone::Error ? QStringLiteral("#noticeBar { background: #fdecea; } #noticeBar QLabel { color: #8a1c1c; }")
                                      : QStringLiteral("#noticeBar { background: #fff4d6; } #noticeBar QLabel { color: #5a4300; }"));
    show();
}

void NoticeBar::clearNotice() {
    label_->clear();
    hide();
}

QString NoticeBar::text() const { return label_->text(); }

}  // namespace tv::ui
