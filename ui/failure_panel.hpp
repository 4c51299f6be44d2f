// The diagnosis panel: the verdict of the last run, and for a failure where it is (parallel op,
// rank, coordinates, microbatch, logical op, tensor and slice) with the Alive2-like sections:
// example inputs, logical values, parallel values, expected against actual.
#pragma once

#include <QWidget>

#include "verify/verifier.hpp"

class QLabel;
class QTextBrowser;

namespace tv::ui {

class FailurePanel : public QWidget {
    Q_OBJECT
public:
    explicit FailurePanel(QWidget* parent = nullptr);
    void clear();
    void showRunning();
    /// `where` says how the failing op is drawn (e.g. the instance of a stored op), when it matters.
    void showReport(const VerifyReport& report, const QString& where = {});
    QString headline() const;
    QString text() const;  ///< the panel's text, as shown

private:
    QLabel* headline_;
    QTextBrowser* body_;
};

}  // namespace tv::ui
