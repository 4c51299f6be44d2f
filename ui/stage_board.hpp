// The stage board: every stage of the plan being verified (id, kind, what it proves, its ops, its
// status and time), sortable and filterable, with the status legend. The model is over the plan
// as verified (the stored plan for one stored with replicas), so its rows are the CLI's stages.
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>
#include <QWidget>

#include <memory>
#include <vector>

#include "model/plan.hpp"
#include "verification_controller.hpp"
#include "verify/stages.hpp"

class QComboBox;
class QLabel;
class QLineEdit;
class QTableView;

namespace tv::ui {

/// The colour a stage status paints with, on the board, on both graphs and in the legend.
QColor statusColor(StageStatus status);
/// What a status is called on screen ("proven", "failed", ...).
QString statusText(StageStatus status);

class StageBoardModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Id, Kind, Proves, Ops, Status, Seconds, Note, ColumnCount };
    static constexpr int SortRole = Qt::UserRole + 1;
    static constexpr int StatusRole = Qt::UserRole + 2;

    explicit StageBoardModel(QObject* parent = nullptr);
    /// A new plan: every stage not yet verified.
    void setPlan(std::shared_ptr<const Plan> plan, std::shared_ptr<const StagePlan> stages);
    /// A run starts: every stage queued.
    void startRun();
    void apply(const QVector<StageUpdate>& updates);
    /// The run's final results (statuses of stages never started become skipped).
    void finish(const VerifyReport& report);
    /// The run ended without results for this plan (an engine error): what had not finished is skipped.
    void abort();

    bool verified() const { return verified_; }  ///< a run has started on this plan
    const std::vector<StageStatus>& statuses() const { return status_; }
    StageStatus status(std::uint32_t stage) const { return status_[stage]; }
    /// Stages that have a result (proven, failed, inconclusive, skipped).
    std::uint32_t done() const { return done_; }
    std::uint32_t count(StageStatus s) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

private:
    void set(std::uint32_t stage, StageStatus s);
    QString proves(std::uint32_t stage) const;

    std::shared_ptr<const Plan> plan_;
    std::shared_ptr<const StagePlan> stages_;
    std::vector<StageStatus> status_;
    std::vector<double> seconds_;
    std::vector<QString> note_;
    std::uint32_t done_ = 0;
    bool verified_ = false;
};

/// Filters the board by status (a StageStatus value, or -1 for any, or kNotProven for queued,
/// running and skipped together) and by text (in what a stage proves, its kind and its note).
class StageFilterModel : public QSortFilterProxyModel {
    Q_OBJECT
public:
    static constexpr int kNotProven = 100;
    explicit StageFilterModel(QObject* parent = nullptr);
    void setStatusFilter(int status);
    void setTextFilter(const QString& text);

protected:
    bool filterAcceptsRow(int row, const QModelIndex& parent) const override;

private:
    int status_ = -1;
    QString text_;
};

/// The four swatches: proven, failed, inconclusive, not yet proven.
class StatusLegend : public QWidget {
    Q_OBJECT
public:
    explicit StatusLegend(QWidget* parent = nullptr);
};

class StageBoard : public QWidget {
    Q_OBJECT
public:
    explicit StageBoard(QWidget* parent = nullptr);
    StageBoardModel* model() const { return model_; }
    StageFilterModel* filter() const { return filter_; }
    QTableView* table() const { return table_; }
    /// Selects a stage's row (clearing filters that hide it) without emitting stageActivated.
    void selectStage(std::uint32_t stage);
    /// The stage of the current row, kNone if none.
    std::uint32_t currentStage() const;

signals:
    void stageActivated(std::uint32_t stage);

private:
    StageBoardModel* model_;
    StageFilterModel* filter_;
    QTableView* table_;
    QLineEdit* text_;
    QComboBox* status_;
    QLabel* summary_;
    bool selecting_ = false;
    bool removingRows_ = false;
};

}  // namespace tv::ui
