// A notice above the graph: what the user should know about the view on screen (drawn with the
// quick layered layout, and why) or why a layout or an open failed. In the window, not modal and
// not only on stderr; it stays until the next view replaces it or the user closes it.
#pragma once

#include <QFrame>

class QLabel;
class QToolButton;

namespace tv::ui {

class NoticeBar : public QFrame {
    Q_OBJECT
public:
    enum class Tone { Info, Error };
    explicit NoticeBar(QWidget* parent = nullptr);
    void showNotice(const QString& text, Tone tone = Tone::Info);
    void clearNotice();
    QString text() const;
    Tone tone() const { return tone_; }

private:
    QLabel* label_;
    QToolButton* close_;
    Tone tone_ = Tone::Info;
};

}  // namespace tv::ui
