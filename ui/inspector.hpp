// The inspector: details of the selected op or tensor, and for a tensor its lineage drawn as a
// grid over the logical tensor (slices coloured by the rank and microbatch holding them,
// partial-sum groups and coefficients marked).
#pragma once

#include <QWidget>

#include "plan_scene.hpp"

class QTextBrowser;

namespace tv::ui {

class LineageGrid : public QWidget {
    Q_OBJECT
public:
    explicit LineageGrid(QWidget* parent = nullptr);
    /// Shows the records of a logical tensor (empty: nothing).
    void setTensor(const Plan* plan, TensorId logical);
    int sliceCount() const { return static_cast<int>(cells_.size()); }
    QSize sizeHint() const override { return {320, 220}; }

protected:
    void paintEvent(QPaintEvent*) override;

private:
    struct Cell {
        QRectF box;        ///< in [0,1] x [0,1] of the logical tensor's first two dims
        QString text;
        std::int32_t rank = -1;
        bool partial = false;
        int record = 0;
    };
    std::vector<Cell> cells_;
    int records_ = 0;
    QString title_;
};

class Inspector : public QWidget {
    Q_OBJECT
public:
    explicit Inspector(QWidget* parent = nullptr);
    void show(const LoadedPlan* loaded, int node);
    QString text() const;
    LineageGrid* grid() const { return grid_; }

private:
    QTextBrowser* text_;
    LineageGrid* grid_;
};

}  // namespace tv::ui
