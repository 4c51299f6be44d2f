// One pane of the canvas: a QGraphicsView with zoom (Ctrl+wheel, keys, fit, 100 %) and hand-drag panning.
#pragma once

#include <QGraphicsView>
#include <QImage>
#include <QPointer>
#include <QTimer>

#include <vector>

namespace tv::ui {

/// A picture of a scene rectangle at a fixed scale, drawn again only when the scene changed (a
/// moment after it settles): what a view far zoomed out, or the overview, paints instead of
/// tens of thousands of items each frame.
class SceneSnapshot : public QObject {
    Q_OBJECT
public:
    /// At most `maxPixels` pixels (4 bytes each).
    SceneSnapshot(QGraphicsScene* scene, qint64 maxPixels, QObject* parent);
    /// Pixels per scene point of the picture of `rect` (what it would be if taken now).
    qreal scaleFor(const QRectF& rect) const;
    /// Draws the picture of `rect` with the painter's transform (scene coordinates), taking it
    /// again first if it is stale or of another rectangle. Returns false if there is nothing to draw.
    bool draw(QPainter& painter, const QRectF& rect, const QColor& background);
    bool stale() const { return stale_; }
    /// Emitted when a scene change made the picture stale and it should be drawn again.
    Q_SIGNAL void invalidated();

private:
    QGraphicsScene* scene_;
    qint64 maxPixels_;
    QImage image_;
    QRectF rect_;
    bool stale_ = true;
    QTimer settle_;
};

class GraphView : public QGraphicsView {
    Q_OBJECT
public:
    explicit GraphView(QWidget* parent = nullptr);
    qreal zoom() const { return transform().m11(); }
    /// Below this zoom node labels are not painted (level of detail).
    static constexpr qreal kReadable = 0.6;
    /// Paint from a snapshot of the scene while zoomed out past the snapshot's own scale (on for
    /// big plans: at fit, the 8B plan fully expanded is 88,000 nodes and 97,000 edges a frame).
    void setSnapshotWhenZoomedOut(bool on);
    /// Whether the last frame was painted from the snapshot.
    bool paintedFromSnapshot() const { return fromSnapshot_; }
    const SceneSnapshot* snapshot() const { return snapshot_; }

public slots:
    void zoomIn() { zoomBy(1.25); }
    void zoomOut() { zoomBy(0.8); }
    void zoomActual();
    void fitAll();
    /// What a freshly opened plan shows: all of it if that is readable, else its top, as wide as fits.
    void showStart();

signals:
    void zoomChanged(qreal zoom);

protected:
    void wheelEvent(QWheelEvent* e) override;
    void paintEvent(QPaintEvent* e) override;

private:
    void zoomBy(qreal factor);
    void onZoomChanged();
    SceneSnapshot* snapshot_ = nullptr;
    bool fromSnapshot_ = false;
};

}  // namespace tv::ui

namespace tv::ui {

/// The whole scene in miniature with each pane's visible area; click or drag to move the pane
/// showing that side there.
class Minimap : public QGraphicsView {
    Q_OBJECT
public:
    explicit Minimap(QGraphicsScene* scene, QWidget* parent = nullptr);
    void addPane(GraphView* pane);
    /// The visible panes' areas in scene coordinates (what the frames show).
    std::vector<QRectF> visibleAreas() const;

protected:
    void paintEvent(QPaintEvent* e) override;
    void mousePressEvent(QMouseEvent* e) override;
    void mouseMoveEvent(QMouseEvent* e) override;
    void resizeEvent(QResizeEvent* e) override;

private:
    void refit();
    std::vector<QPointer<GraphView>> panes_;
    /// The overview is the whole scene at a small scale: drawn from a snapshot, never item by
    /// item on every scroll of a pane (that cost 260 ms a frame on the 8B plan fully expanded).
    SceneSnapshot* snapshot_;
};

}  // namespace tv::ui
