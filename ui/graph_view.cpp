#include "graph_view.hpp"

#include <algorithm>

#include <QGraphicsItem>
#include <QWheelEvent>

namespace tv::ui {

GraphView::GraphView(QWidget* parent) : QGraphicsView(parent) {
    setDragMode(QGraphicsView::ScrollHandDrag);
    setRenderHint(QPainter::Antialiasing);
    setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
    setViewportUpdateMode(QGraphicsView::MinimalViewportUpdate);
    setOptimizationFlag(QGraphicsView::DontSavePainterState);
    setFocusPolicy(Qt::StrongFocus);
    connect(this, &GraphView::zoomChanged, this, &GraphView::onZoomChanged);
}

void GraphView::zoomBy(qreal factor) {
    const qreal next = zoom() * factor;
    if (next < 0.01 || next > 8) return;
    scale(factor, factor);
    emit zoomChanged(zoom());
}

void GraphView::onZoomChanged() {
    // Level of detail: antialiasing only where shapes are large enough to benefit.
    setRenderHint(QPainter::Antialiasing, zoom() >= 0.3);
}

void GraphView::zoomActual() {
    resetTransform();
    emit zoomChanged(zoom());
}

void GraphView::fitAll() {
    if (!scene()) return;
    // This view's own rectangle (a pane shows one side of the scene), not the whole scene.
    fitInView(sceneRect(), Qt::KeepAspectRatio);
    emit zoomChanged(zoom());
}

void GraphView::showStart() {
    if (!scene()) return;
    const QRectF all = sceneRect();
    const QSizeF port = viewport()->size();
    if (all.isEmpty() || port.isEmpty()) return fitAll();
    const qreal fit = std::min(port.width() / all.width(), port.height() / all.height());
    if (fit >= kReadable) return fitAll();
    // Too big to read whole: as wide as fits (but readable), from the top, where the step starts.
    const qreal s = std::clamp(port.width() / all.width(), kReadable, 1.0);
    resetTransform();
    scale(s, s);
    const qreal visibleWidth = port.width() / s, visibleHeight = port.height() / s;
    // Horizontally, on what the top of the scene holds (the first ops, not the bowed edges' margin).
    QRectF top;
    for (auto* item : scene()->items(QRectF(all.left(), all.top(), all.width(), visibleHeight / 2)))
        if (item->zValue() >= 2) top |= item->sceneBoundingRect();
    const qreal cx = top.isEmpty() ? all.left() + std::min(all.width(), visibleWidth) / 2
                                   : std::max(all.left() + visibleWidth / 2, top.left() + std::min(top.width(), visibleWidth) / 2);
    centerOn(cx, all.top() + visibleHeight / 2);
    emit zoomChanged(zoom());
}

void GraphView::centerOnItem(QGraphicsItem* item) {
    if (!item) return;
    if (zoom() < 0.6) {
        resetTransform();
        scale(0.9, 0.9);
        emit zoomChanged(zoom());
    }
    centerOn(item);
}

void GraphView::wheelEvent(QWheelEvent* e) {
    if (e->modifiers() & Qt::ControlModifier) {
        zoomBy(e->angleDelta().y() > 0 ? 1.15 : 1 / 1.15);
        e->accept();
        return;
    }
    QGraphicsView::wheelEvent(e);
}

}  // namespace tv::ui

#include <QMouseEvent>
#include <QScrollBar>

namespace tv::ui {

Minimap::Minimap(QGraphicsScene* scene, QWidget* parent) : QGraphicsView(parent) {
    setScene(scene);
    setInteractive(false);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setRenderHint(QPainter::Antialiasing, false);
    setMinimumSize(160, 110);
    connect(scene, &QGraphicsScene::sceneRectChanged, this, [this] { refit(); });
}

void Minimap::addPane(GraphView* pane) {
    panes_.push_back(pane);
    auto update = [this] { viewport()->update(); };
    connect(pane->horizontalScrollBar(), &QScrollBar::valueChanged, this, update);
    connect(pane->verticalScrollBar(), &QScrollBar::valueChanged, this, update);
    connect(pane, &GraphView::zoomChanged, this, update);
}

std::vector<QRectF> Minimap::visibleAreas() const {
    std::vector<QRectF> out;
    for (const auto& p : panes_)
        if (p && !p->isHidden()) out.push_back(p->mapToScene(p->viewport()->rect()).boundingRect());
    return out;
}

void Minimap::refit() {
    if (scene()) fitInView(scene()->sceneRect(), Qt::KeepAspectRatio);
}

void Minimap::resizeEvent(QResizeEvent* e) {
    QGraphicsView::resizeEvent(e);
    refit();
}

void Minimap::drawForeground(QPainter* p, const QRectF&) {
    p->setPen(QPen(QColor(230, 120, 0), 0));
    p->setBrush(QColor(230, 120, 0, 40));
    for (const auto& r : visibleAreas()) p->drawRect(r);
}

void Minimap::mousePressEvent(QMouseEvent* e) {
    // The pane whose side was clicked moves there (with two panes, each shows one side).
    const QPointF at = mapToScene(e->position().toPoint());
    GraphView* target = nullptr;
    for (const auto& p : panes_)
        if (p && !p->isHidden() && (!target || p->sceneRect().contains(at))) target = p;
    if (target) target->centerOn(at);
    viewport()->update();
}

void Minimap::mouseMoveEvent(QMouseEvent* e) {
    if (e->buttons() & Qt::LeftButton) mousePressEvent(e);
}

}  // namespace tv::ui
