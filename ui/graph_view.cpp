#include "graph_view.hpp"

#include <algorithm>
#include <cmath>

#include <QGraphicsItem>
#include <QPainter>
#include <QPaintEvent>
#include <QWheelEvent>

namespace tv::ui {

SceneSnapshot::SceneSnapshot(QGraphicsScene* scene, qint64 maxPixels, QObject* parent) : QObject(parent), scene_(scene), maxPixels_(maxPixels) {
    // A change (status colours, marks, selection) is taken a moment after it comes.
    settle_.setSingleShot(true);
    settle_.setInterval(400);
    connect(&settle_, &QTimer::timeout, this, [this] {
        stale_ = true;
        emit invalidated();
    });
    // At most one picture per interval while changes keep coming (a verification run colours
    // the graph every 100 ms): the timer is not restarted by each change.
    connect(scene, &QGraphicsScene::changed, this, [this] {
        if (!settle_.isActive()) settle_.start();
    });
    connect(scene, &QGraphicsScene::sceneRectChanged, this, [this] {
        stale_ = true;
        emit invalidated();
    });
}

qreal SceneSnapshot::scaleFor(const QRectF& rect) const {
    if (rect.isEmpty()) return 0;
    return std::min<qreal>(1.0, std::sqrt(static_cast<qreal>(maxPixels_) / (rect.width() * rect.height())));
}

bool SceneSnapshot::draw(QPainter& painter, const QRectF& rect, const QColor& background) {
    if (rect.isEmpty()) return false;
    if (stale_ || rect != rect_ || image_.isNull()) {
        const qreal s = scaleFor(rect);
        const QSize size(std::max(1, static_cast<int>(std::ceil(rect.width() * s))), std::max(1, static_cast<int>(std::ceil(rect.height() * s))));
        image_ = QImage(size, QImage::Format_RGB32);
        if (image_.isNull()) return false;  // out of memory: the caller paints item by item
        image_.fill(background);
        QPainter p(&image_);
        scene_->render(&p, QRectF(QPointF(0, 0), QSizeF(size)), rect, Qt::IgnoreAspectRatio);
        p.end();
        rect_ = rect;
        stale_ = false;
    }
    painter.save();
    painter.setRenderHint(QPainter::SmoothPixmapTransform);
    painter.drawImage(rect_, image_);
    painter.restore();
    return true;
}

GraphView::GraphView(QWidget* parent) : QGraphicsView(parent) {
    setDragMode(QGraphicsView::ScrollHandDrag);
    setRenderHint(QPainter::Antialiasing);
    setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
    setViewportUpdateMode(QGraphicsView::MinimalViewportUpdate);
    setOptimizationFlag(QGraphicsView::DontSavePainterState);
    setFocusPolicy(Qt::StrongFocus);
    connect(this, &GraphView::zoomChanged, this, &GraphView::onZoomChanged);
}

void GraphView::setSnapshotWhenZoomedOut(bool on) {
    if (on == (snapshot_ != nullptr)) return;
    if (on) {
        // 8 million pixels (32 MB): the 8B plan's parallel side at about 1/25 of its size.
        snapshot_ = new SceneSnapshot(scene(), 8'000'000, this);
        connect(snapshot_, &SceneSnapshot::invalidated, viewport(), [this] { viewport()->update(); });
    } else {
        delete snapshot_;
        snapshot_ = nullptr;
    }
    viewport()->update();
}

void GraphView::paintEvent(QPaintEvent* e) {
    // Zoomed out past the snapshot's scale, the snapshot is as sharp as the items would be, and
    // a frame costs one image draw instead of every item in sight.
    fromSnapshot_ = false;
    if (snapshot_ && scene() && zoom() <= snapshot_->scaleFor(sceneRect())) {
        QPainter p(viewport());
        const QBrush& brush = scene()->backgroundBrush();
        const QColor base = brush.style() != Qt::NoBrush ? brush.color() : palette().color(QPalette::Base);
        p.fillRect(e->rect(), base);
        p.setTransform(viewportTransform());
        if (snapshot_->draw(p, sceneRect(), base)) {
            fromSnapshot_ = true;
            return;
        }
    }
    QGraphicsView::paintEvent(e);
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
    // Horizontally, on what the top of the scene holds (the first ops, not the bowed edges'
    // margin): on the middle of its nodes, so that a lone input far to the side (the logical
    // graph's tokens) does not pull the view off the column of ops.
    std::vector<qreal> xs;
    for (auto* item : scene()->items(QRectF(all.left(), all.top(), all.width(), visibleHeight / 2)))
        if (item->zValue() >= 2) xs.push_back(item->sceneBoundingRect().center().x());
    qreal cx = all.left() + std::min(all.width(), visibleWidth) / 2;
    if (!xs.empty()) {
        std::nth_element(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(xs.size() / 2), xs.end());
        cx = std::clamp(xs[xs.size() / 2], all.left() + visibleWidth / 2, std::max(all.left() + visibleWidth / 2, all.right() - visibleWidth / 2));
    }
    centerOn(cx, all.top() + visibleHeight / 2);
    emit zoomChanged(zoom());
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
    // Small: the overview is a few hundred pixels wide.
    snapshot_ = new SceneSnapshot(scene, 1'500'000, this);
    connect(snapshot_, &SceneSnapshot::invalidated, viewport(), [this] { viewport()->update(); });
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

void Minimap::paintEvent(QPaintEvent* e) {
    QPainter p(viewport());
    if (!scene()) return;
    const QBrush& brush = scene()->backgroundBrush();
    const QColor base = brush.style() != Qt::NoBrush ? brush.color() : palette().color(QPalette::Base);
    p.fillRect(e->rect(), base);
    p.setTransform(viewportTransform());
    snapshot_->draw(p, scene()->sceneRect(), base);
    p.setPen(QPen(QColor(230, 120, 0), 0));
    p.setBrush(QColor(230, 120, 0, 40));
    for (const auto& r : visibleAreas()) p.drawRect(r);
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
