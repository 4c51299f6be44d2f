// The canvas: the logical graph in one pane and the parallel graph in the other, each scrolled
// and zoomed on its own over the one PlanScene (selection, marks and counterparts stay shared),
// aligned by stage, with the lineage edges of the selection drawn across the split by an
// overlay. One canvas with both sides (lineage drawn in the scene) is a View menu choice.
#pragma once

#include <QWidget>

#include <vector>

#include "explore/pane_alignment.hpp"

class QSplitter;

namespace tv::ui {

class GraphView;
class PlanScene;
class LineageOverlay;

class DualView : public QWidget {
    Q_OBJECT
public:
    DualView(PlanScene* scene, QWidget* parent = nullptr);
    /// Plans with more nodes than this are painted from a snapshot when zoomed far out.
    static constexpr int kSnapshotAboveNodes = 3000;

    /// The pane drawing a side (in one-canvas mode both sides are the parallel pane's).
    GraphView* pane(ViewSide side) const;
    /// The pane drawing a node.
    GraphView* paneFor(int node) const;
    std::vector<GraphView*> visiblePanes() const;
    bool twoPanes() const { return twoPanes_; }
    bool linked() const { return linked_; }
    const StageAlignment& alignment() const { return alignment_; }
    /// Lineage segments the overlay drew last (0 in one-canvas mode, where the scene draws them).
    int overlaySegmentCount() const;
    /// Sets the split in proportion to the two sides' widths (a newly opened plan).
    void resetSplit();

    /// Frames nodes: each side's in its own pane, all of them when they fit (zooming out down to
    /// a readable scale), else the first one (what was asked for; the rest are its counterparts)
    /// when it is in that pane, else the one nearest their middle.
    void frame(const std::vector<int>& nodes);
    /// A node was selected in its pane: brings `nodes` (its counterparts) into the other pane,
    /// unless one of them is in sight there already; the node's own pane stays where it is.
    void frameAcross(int node, const std::vector<int>& nodes);
    /// Brings a scene rectangle into its pane's view: centred if it fits, else its top in sight.
    void bringIntoView(const QRectF& target);

public slots:
    void setTwoPanes(bool on);
    void setLinked(bool on);
    void zoomIn();
    void zoomOut();
    void zoomActual();
    void fitAll();
    void showStart();

signals:
    void zoomChanged(qreal zoom);

protected:
    void resizeEvent(QResizeEvent* e) override;

private:
    void onPlanChanged();
    void follow(ViewSide from);
    void framePane(GraphView* pane, const std::vector<int>& nodes);
    void refreshOverlay();
    GraphView* other(GraphView* p) const;

    PlanScene* scene_;
    QSplitter* split_;
    GraphView* logical_;
    GraphView* parallel_;
    LineageOverlay* overlay_;
    StageAlignment alignment_;
    bool twoPanes_ = true, linked_ = true, following_ = false;
};

}  // namespace tv::ui
