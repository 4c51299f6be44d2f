#include "dual_view.hpp"

#include <algorithm>
#include <cmath>

#include <QGraphicsItem>
#include <QPainter>
#include <QPainterPath>
#include <QResizeEvent>
#include <QScrollBar>
#include <QSplitter>

#include "graph_view.hpp"
#include "plan_scene.hpp"

namespace tv::ui {

namespace {
QRectF toQt(const Rect& r) { return QRectF(r.x, r.y, r.width, r.height); }
}  // namespace

/// Draws the lineage edges the scene asks for (PlanScene::lineageToDraw) from the logical pane to
/// the parallel pane, over both, in widget coordinates: an end scrolled out of its pane is pinned
/// to the pane's edge, drawn faint, so the edge still says where its other end is.
class LineageOverlay : public QWidget {
public:
    LineageOverlay(DualView* dual, PlanScene* scene) : QWidget(dual), dual_(dual), scene_(scene) {
        setAttribute(Qt::WA_TransparentForMouseEvents);
        setAttribute(Qt::WA_NoSystemBackground);
        setAttribute(Qt::WA_TranslucentBackground);
    }
    int segments() const { return segments_; }

protected:
    void paintEvent(QPaintEvent*) override {
        segments_ = 0;
        const auto* l = scene_->loaded();
        if (!l || !dual_->twoPanes()) return;
        auto* left = dual_->pane(ViewSide::Logical);
        auto* right = dual_->pane(ViewSide::Parallel);
        if (!left->isVisible() || !right->isVisible()) return;
        const QRect leftPort(left->viewport()->mapTo(dual_, QPoint(0, 0)), left->viewport()->size());
        const QRect rightPort(right->viewport()->mapTo(dual_, QPoint(0, 0)), right->viewport()->size());
        // In the dual view's coordinates, which are the overlay's: it covers the dual view from (0, 0).
        QPainter p(this);
        p.setRenderHint(QPainter::Antialiasing);
        for (const auto& [i, opacity] : scene_->lineageToDraw()) {
            const auto& e = l->view.lineage[i];
            const QRectF a = toQt(l->placed.nodeRects[e.logical]);
            const QRectF b = toQt(l->placed.nodeRects[e.parallel]);
            QPointF from = left->viewport()->mapTo(dual_, left->mapFromScene(QPointF(a.right(), a.center().y())));
            QPointF to = right->viewport()->mapTo(dual_, right->mapFromScene(QPointF(b.left(), b.center().y())));
            const bool fromIn = leftPort.contains(from.toPoint()), toIn = rightPort.contains(to.toPoint());
            if (!fromIn && !toIn) continue;  // neither end in sight: nothing to follow
            auto pin = [](QPointF q, const QRect& r) {
                return QPointF(std::clamp<qreal>(q.x(), r.left(), r.right()), std::clamp<qreal>(q.y(), r.top(), r.bottom()));
            };
            from = pin(from, leftPort);
            to = pin(to, rightPort);
            QPen pen = lineagePen(e.kind);
            pen.setCosmetic(true);
            p.setOpacity(opacity * (fromIn && toIn ? 1.0 : 0.45));
            p.setPen(pen);
            QPainterPath path(from);
            const qreal dx = std::max<qreal>(40, (to.x() - from.x()) / 2);
            path.cubicTo(from + QPointF(dx, 0), to - QPointF(dx, 0), to);
            p.drawPath(path);
            ++segments_;
        }
    }

private:
    DualView* dual_;
    PlanScene* scene_;
    int segments_ = 0;
};

DualView::DualView(PlanScene* scene, QWidget* parent) : QWidget(parent), scene_(scene) {
    split_ = new QSplitter(Qt::Horizontal, this);
    split_->setObjectName(QStringLiteral("paneSplitter"));
    split_->setChildrenCollapsible(false);
    logical_ = new GraphView(split_);
    logical_->setObjectName(QStringLiteral("logicalPane"));
    parallel_ = new GraphView(split_);
    parallel_->setObjectName(QStringLiteral("parallelPane"));
    logical_->setToolTip(QString());
    for (auto* p : {logical_, parallel_}) {
        p->setScene(scene);
        split_->addWidget(p);
    }
    overlay_ = new LineageOverlay(this, scene);
    overlay_->raise();
    auto repaint = [this] { refreshOverlay(); };
    for (auto* p : {logical_, parallel_}) {
        connect(p->horizontalScrollBar(), &QScrollBar::valueChanged, this, repaint);
        connect(p->verticalScrollBar(), &QScrollBar::valueChanged, this, repaint);
        connect(p, &GraphView::zoomChanged, this, repaint);
    }
    connect(logical_->verticalScrollBar(), &QScrollBar::valueChanged, this, [this] { follow(ViewSide::Logical); });
    connect(parallel_->verticalScrollBar(), &QScrollBar::valueChanged, this, [this] { follow(ViewSide::Parallel); });
    connect(parallel_, &GraphView::zoomChanged, this, &DualView::zoomChanged);
    connect(logical_, &GraphView::zoomChanged, this, &DualView::zoomChanged);
    connect(split_, &QSplitter::splitterMoved, this, repaint);
    connect(scene, &PlanScene::lineageChanged, this, repaint);
    connect(scene, &PlanScene::planChanged, this, &DualView::onPlanChanged);
    setTwoPanes(true);
}

GraphView* DualView::pane(ViewSide side) const { return twoPanes_ && side == ViewSide::Logical ? logical_ : parallel_; }

GraphView* DualView::paneFor(int node) const {
    const auto* l = scene_->loaded();
    if (!l || node < 0 || node >= static_cast<int>(l->view.nodes.size())) return parallel_;
    return pane(l->view.nodes[node].side);
}

std::vector<GraphView*> DualView::visiblePanes() const {
    if (twoPanes_) return {logical_, parallel_};
    return {parallel_};
}

GraphView* DualView::other(GraphView* p) const { return p == logical_ ? parallel_ : logical_; }

int DualView::overlaySegmentCount() const { return overlay_->isVisible() ? overlay_->segments() : 0; }

void DualView::refreshOverlay() {
    // A transparent widget over the panes makes every repaint of them repaint it too, and stops
    // Qt scrolling them by moving pixels: it is there only while it has something to draw.
    const bool any = twoPanes_ && scene_->loaded() && !scene_->lineageToDraw().empty();
    if (overlay_->isVisible() != any) overlay_->setVisible(any);
    if (any) overlay_->update();
}

void DualView::resizeEvent(QResizeEvent* e) {
    QWidget::resizeEvent(e);
    split_->setGeometry(rect());
    overlay_->setGeometry(rect());
}

void DualView::setTwoPanes(bool on) {
    twoPanes_ = on;
    logical_->setVisible(on);
    scene_->setLineageInScene(!on);
    onPlanChanged();
    refreshOverlay();
}

void DualView::setLinked(bool on) {
    linked_ = on;
    if (on) follow(ViewSide::Parallel);
}

void DualView::onPlanChanged() {
    const auto* l = scene_->loaded();
    if (!l) return;
    // Big plans: zoomed far out, the panes paint a snapshot of their side, not every item.
    for (auto* p : {logical_, parallel_}) p->setSnapshotWhenZoomedOut(scene_->nodeItemCount() > kSnapshotAboveNodes);
    if (!twoPanes_) {
        parallel_->setSceneRect(scene_->sceneRect());
        alignment_ = {};
        return;
    }
    // Each pane scrolls over its own side only (with a margin), never the gap or the other side.
    for (auto side : {ViewSide::Logical, ViewSide::Parallel}) {
        const QRectF extent = toQt(sideExtent(l->view, l->placed, side)).adjusted(-40, -40, 40, 40);
        pane(side)->setSceneRect(extent);
    }
    alignment_ = alignStages(l->view, l->placed);
    refreshOverlay();
}

void DualView::resetSplit() {
    const auto* l = scene_->loaded();
    if (!l || !twoPanes_) return;
    const double lw = std::max(1.0, sideExtent(l->view, l->placed, ViewSide::Logical).width);
    const double pw = std::max(1.0, sideExtent(l->view, l->placed, ViewSide::Parallel).width);
    // The logical graph is one program, the parallel graph one per rank: give each side its share
    // of the width, but neither less than a quarter nor the logical side more than half.
    const double share = std::clamp(lw / (lw + pw), 0.25, 0.5);
    const int total = std::max(2, split_->width());
    split_->setSizes({static_cast<int>(total * share), total - static_cast<int>(total * share)});
}

void DualView::follow(ViewSide from) {
    if (!twoPanes_ || !linked_ || following_) return;
    const auto* l = scene_->loaded();
    if (!l) return;
    GraphView* src = from == ViewSide::Logical ? logical_ : parallel_;
    GraphView* dst = other(src);
    following_ = true;
    const QPointF c = src->mapToScene(src->viewport()->rect().center());
    const QPointF d = dst->mapToScene(dst->viewport()->rect().center());
    const double y = from == ViewSide::Logical ? alignment_.toParallel(c.y()) : alignment_.toLogical(c.y());
    // Vertically only: centerOn rounds the other way than the centre was read, and would creep
    // the other pane one pixel sideways on every step.
    const int h = dst->horizontalScrollBar()->value();
    dst->centerOn(QPointF(d.x(), y));
    dst->horizontalScrollBar()->setValue(h);
    following_ = false;
    refreshOverlay();
}

void DualView::zoomIn() {
    for (auto* p : visiblePanes()) p->zoomIn();
}
void DualView::zoomOut() {
    for (auto* p : visiblePanes()) p->zoomOut();
}
void DualView::zoomActual() {
    for (auto* p : visiblePanes()) p->zoomActual();
}
void DualView::fitAll() {
    following_ = true;
    for (auto* p : visiblePanes()) p->fitAll();
    following_ = false;
    refreshOverlay();
}
void DualView::showStart() {
    following_ = true;
    for (auto* p : visiblePanes()) p->showStart();
    following_ = false;
    refreshOverlay();
}

void DualView::bringIntoView(const QRectF& target) {
    if (target.isNull()) return;
    GraphView* p = parallel_;
    if (twoPanes_ && logical_->sceneRect().contains(target.center()) && !parallel_->sceneRect().contains(target.center())) p = logical_;
    const QRectF visible = p->mapToScene(p->viewport()->rect()).boundingRect();
    // Centred when it fits. Else its top in sight (its top edge a fifth of the way down), and
    // sideways on what its top holds (the first nodes, not the empty corner of a big box).
    if (target.height() <= visible.height() && target.width() <= visible.width()) {
        p->centerOn(target.center());
        return;
    }
    QRectF top;
    if (target.width() > visible.width())
        for (auto* item : scene_->items(QRectF(target.left(), target.top(), target.width(), std::min(target.height(), visible.height() / 2))))
            if (item->zValue() >= 2 && target.contains(item->sceneBoundingRect())) top |= item->sceneBoundingRect();
    const qreal x = target.width() <= visible.width() ? target.center().x()
                    : top.isNull()                     ? target.left() + visible.width() / 2
                                                       : std::max(target.left() + visible.width() / 2, top.left() + std::min(top.width(), visible.width()) / 2);
    p->centerOn(QPointF(x, target.top() + visible.height() * 0.3));
}

void DualView::frame(const std::vector<int>& nodes) {
    if (!scene_->loaded()) return;
    following_ = true;
    for (auto* p : visiblePanes()) framePane(p, nodes);
    following_ = false;
    refreshOverlay();
}

void DualView::frameAcross(int node, const std::vector<int>& nodes) {
    if (!scene_->loaded() || !twoPanes_ || !scene_->itemForNode(node)) return;
    GraphView* p = paneFor(node) == logical_ ? parallel_ : logical_;
    // Left alone when one of them is in sight already: the pane is not pulled about needlessly.
    const QRectF visible = p->mapToScene(p->viewport()->rect()).boundingRect();
    for (int n : nodes)
        if (auto* item = scene_->itemForNode(n); item && paneFor(n) == p && visible.intersects(item->sceneBoundingRect())) return;
    following_ = true;
    framePane(p, nodes);
    following_ = false;
    refreshOverlay();
}

void DualView::framePane(GraphView* p, const std::vector<int>& nodes) {
    std::vector<QRectF> boxes;
    QRectF all;
    const bool firstHere = !nodes.empty() && scene_->itemForNode(nodes.front()) && paneFor(nodes.front()) == p;
    for (int n : nodes)
        if (auto* item = scene_->itemForNode(n); item && paneFor(n) == p) {
            boxes.push_back(item->sceneBoundingRect());
            all = all.isNull() ? boxes.back() : all.united(boxes.back());
        }
    if (boxes.empty()) return;
    const QSizeF port = p->viewport()->size();
    const QRectF visible = p->mapToScene(p->viewport()->rect()).boundingRect();
    if (all.width() <= visible.width() * 0.9 && all.height() <= visible.height() * 0.9) {
        p->centerOn(all.center());
        return;
    }
    // Zoom out to hold them all, while labels stay readable.
    const qreal fit = std::min(port.width() * 0.9 / all.width(), port.height() * 0.9 / all.height());
    if (fit >= GraphView::kReadable) {
        p->resetTransform();
        p->scale(fit, fit);
        p->centerOn(all.center());
        emit p->zoomChanged(p->zoom());
        return;
    }
    // Too many to read at once: the first node asked for when it is here, else the one nearest
    // their middle.
    const QRectF* target = firstHere ? &boxes.front() : nullptr;
    qreal best = 0;
    for (const auto& b : boxes) {
        if (firstHere) break;
        const QPointF d = b.center() - all.center();
        const qreal dist = d.x() * d.x() + d.y() * d.y();
        if (!target || dist < best) target = &b, best = dist;
    }
    if (p->zoom() < GraphView::kReadable) {
        p->resetTransform();
        p->scale(0.9, 0.9);
        emit p->zoomChanged(p->zoom());
    }
    p->centerOn(target->center());
}

}  // namespace tv::ui
