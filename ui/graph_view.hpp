// One pane of the canvas: a QGraphicsView with zoom (Ctrl+wheel, keys, fit, 100 %) and hand-drag panning.
#pragma once

#include <QGraphicsView>
#include <QPointer>

#include <vector>

namespace tv::ui {

class GraphView : public QGraphicsView {
    Q_OBJECT
public:
    explicit GraphView(QWidget* parent = nullptr);
    qreal zoom() const { return transform().m11(); }
    /// Below this zoom node labels are not painted (level of detail).
    static constexpr qreal kReadable = 0.6;

public slots:
    void zoomIn() { zoomBy(1.25); }
    void zoomOut() { zoomBy(0.8); }
    void zoomActual();
    void fitAll();
    /// What a freshly opened plan shows: all of it if that is readable, else its top, as wide as fits.
    void showStart();
    void centerOnItem(QGraphicsItem* item);

signals:
    void zoomChanged(qreal zoom);

protected:
    void wheelEvent(QWheelEvent* e) override;

private:
    void zoomBy(qreal factor);
    void onZoomChanged();
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
    void drawForeground(QPainter* painter, const QRectF& rect) override;
    void mousePressEvent(QMouseEvent* e) override;
    void mouseMoveEvent(QMouseEvent* e) override;
    void resizeEvent(QResizeEvent* e) override;

private:
    void refit();
    std::vector<QPointer<GraphView>> panes_;
};

}  // namespace tv::ui
