// The diagnosis panel: the verdict of the last run, and for a failure where it is (parallel op,
// rank, coordinates, microbatch, logical op, tensor and slice) with the Alive2-like sections:
// example inputs, logical values, parallel values, expected against actual. Below, the stepper
// walks the failing stage op by op (its trace) in lock-step with the logical ops, showing each
// tensor's values and the lineage relation checked, opening at the first divergence.
#pragma once

#include <QAbstractTableModel>
#include <QWidget>

#include <memory>

#include "verify/verifier.hpp"

class QComboBox;
class QLabel;
class QPushButton;
class QTableView;
class QTextBrowser;

namespace tv::ui {

/// One tensor's values as a table: the last dimension across, the others down.
class TensorValuesModel : public QAbstractTableModel {
    Q_OBJECT
public:
    using QAbstractTableModel::QAbstractTableModel;
    /// Shows a tensor's values; with `expected` (a lineage check's logical values, one per value),
    /// the cells that differ show both and are marked.
    void setValues(const TensorValues* values, const std::vector<std::string>* expected = nullptr);
    /// How many cells are marked wrong.
    int wrongCells() const;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

private:
    bool wrong(std::size_t k) const;
    TensorValues values_;
    std::vector<std::string> expected_;
    int cols_ = 0, rows_ = 0;
};

/// A report's verdict line ("NOT EQUIVALENT: 10 of 11 stages proven, 1 failed ..."), as rich
/// text in the verdict's colour: the diagnosis panel's headline, and each plan's in Compare.
QString verdictLineHtml(const VerifyReport& report);

class FailurePanel : public QWidget {
    Q_OBJECT
public:
    explicit FailurePanel(QWidget* parent = nullptr);
    void clear();
    void showRunning();
    /// `where` says how the failing op is drawn (e.g. the instance of a stored op), when it matters.
    /// A failure with a trace opens the stepper at its divergence.
    void showReport(const VerifyReport& report, const QString& where = {});
    QString headline() const;
    QString text() const;  ///< the panel's text, as shown

    // The stepper.
    const StageTrace* trace() const { return trace_.get(); }
    int step() const { return step_; }
    bool canNext() const;
    bool canPrevious() const { return trace_ && step_ > 0; }
    /// Shows a step; `announce` says so (stepChanged), which takes the graph to its op.
    void setStep(int step, bool announce = true);
    void first() { setStep(0); }
    void next();
    void previous();
    void goToDivergence();
    QString stepText() const;  ///< "Step k of n: ..." and the lineage checks, as shown
    /// The tensors of the current step offered in the chooser, and the one shown.
    QStringList tensorChoices() const;
    void chooseTensor(int index);
    TensorValuesModel* valuesModel() const { return valuesModel_; }
    QString copyText() const;   ///< the chosen tensor's values as text (what Copy as Text copies)
    QString copyJson() const;   ///< ... as JSON

signals:
    /// The step shown changed: the parallel op and the logical op beside it (empty if none).
    void stepChanged(const QString& parallelOp, const QString& logicalOp);

private:
    /// No report: a headline, an empty body, no trace.
    void showPlaceholder(const QString& headline);
    void showStep();
    const TensorValues* chosen() const;

    QLabel* headline_;
    QTextBrowser* body_;
    QWidget* stepper_;
    QLabel* stepLabel_;
    QLabel* checks_;
    QPushButton* first_;
    QPushButton* previous_;
    QPushButton* next_;
    QPushButton* divergence_;
    QComboBox* tensor_;
    QTableView* table_;
    TensorValuesModel* valuesModel_;
    std::shared_ptr<const StageTrace> trace_;
    int step_ = -1;
    std::vector<const TensorValues*> choices_;
    std::vector<const std::vector<std::string>*> choiceExpected_;  ///< per choice: a check's expected values, or null
    std::vector<TensorValues> checkTables_;  ///< the step's broken checks as tables (the actual values)
};

}  // namespace tv::ui
