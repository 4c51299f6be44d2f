// The filter bar: which rank, parallel coordinates, microbatch, phase and op kind stay lit. It
// only edits a ViewFilter; the window applies it to the scene (MainWindow::applyFilter).
#pragma once

#include <QToolBar>

#include <array>

#include "explore/plan_view.hpp"

class QAction;
class QComboBox;
class QLineEdit;

namespace tv::ui {

class FilterBar : public QToolBar {
    Q_OBJECT
public:
    explicit FilterBar(QWidget* parent = nullptr);
    /// Offers the choices of `plan` (its ranks, the axes its mesh uses, its microbatches), all set
    /// to "any"; with no plan, the bare bar. Emits nothing.
    void reset(const Plan* plan);
    /// Shows `filter` in the widgets (a filter applied from outside the bar). Emits nothing.
    void setFilter(const ViewFilter& filter);
    /// The filter the widgets show.
    ViewFilter filter() const;

signals:
    /// The user changed a widget; the filter they now show.
    void filterChanged(const ViewFilter& filter);

private:
    void widgetChanged();

    QComboBox* rank_ = nullptr;
    std::array<QComboBox*, kAxes.size()> coord_{};  ///< per parallelism axis (dp, tp, pp, sp, cp, ep), shown when the mesh uses it
    std::array<QAction*, kAxes.size()> coordActions_{};
    QComboBox* microbatch_ = nullptr;
    QComboBox* phase_ = nullptr;
    QLineEdit* kind_ = nullptr;
    bool updating_ = false;  ///< set while the bar fills itself: no filterChanged then
};

}  // namespace tv::ui
