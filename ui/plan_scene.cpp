#include "plan_scene.hpp"

#include <QGraphicsPathItem>
#include <QFontMetricsF>
#include <QToolTip>
#include <QGraphicsSceneHelpEvent>
#include <QGraphicsSceneContextMenuEvent>
#include <QGraphicsSceneMouseEvent>
#include <QGraphicsSimpleTextItem>
#include <QPainter>
#include <QStyleOptionGraphicsItem>

#include <cmath>

#include "ops/registry.hpp"
#include "stage_board.hpp"

namespace tv::ui {

namespace {

QRectF toQt(const Rect& r) { return QRectF(r.x, r.y, r.width, r.height); }

struct Palette {
    QColor logicalOp, parallelOp, collective, tensor, collapsed, text, edge, stageBand, rankBand, mbBand, selection, related, layerBand;
};

Palette paletteFor(bool dark) {
    if (dark)
        return {QColor(40, 70, 110), QColor(40, 95, 70), QColor(120, 85, 30), QColor(60, 60, 66), QColor(80, 80, 90),
                QColor(230, 230, 235), QColor(150, 150, 160), QColor(70, 90, 130, 60), QColor(80, 130, 100, 50),
                QColor(200, 200, 220, 25), QColor(255, 200, 60), QColor(90, 200, 255), QColor(180, 160, 230, 22)};
    return {QColor(214, 230, 250), QColor(214, 240, 222), QColor(252, 226, 190), QColor(255, 255, 255), QColor(225, 225, 232),
            QColor(25, 25, 30), QColor(120, 120, 130), QColor(90, 120, 200, 28), QColor(60, 160, 100, 26),
            QColor(0, 0, 0, 10), QColor(230, 120, 0), QColor(0, 120, 215), QColor(120, 90, 200, 14)};
}

/// Each stage has a hue, shared by its band on the logical side and the marks of its ops on both sides.
QColor stageColor(std::uint32_t stage) { return QColor::fromHsv(static_cast<int>((stage * 47) % 360), 150, 205); }

}  // namespace

QColor lineageColor(LineageKind k) {
    switch (k) {
        case LineageKind::Shard: return QColor(40, 110, 220);
        case LineageKind::Replica: return QColor(130, 130, 140);
        case LineageKind::PartialSum: return QColor(150, 60, 190);
    }
    return Qt::gray;
}

QPen lineagePen(LineageKind k) {
    return QPen(lineageColor(k), k == LineageKind::PartialSum ? 1.4 : 1.1,
                k == LineageKind::Replica ? Qt::DotLine : k == LineageKind::PartialSum ? Qt::DashLine : Qt::SolidLine);
}

/// One op, tensor, collapsed rank or collapsed layer. Paints with level of detail: no text when it cannot be read.
class NodeItem : public QGraphicsItem {
public:
    NodeItem(PlanScene* scene, int node, const ViewNode& n, QRectF rect, bool collective)
        : scene_(scene), node_(node), rect_(rect), kind_(n.kind), side_(n.side), collective_(collective),
          stage_(n.stage), title_(QString::fromStdString(n.shown.empty() ? n.name : n.shown)), subtitle_(QString::fromStdString(n.label)) {
        setFlag(ItemIsSelectable);
        setZValue(2);
    }
    /// The tooltip's last lines: its stage and, once verified, that stage's status (the facts
    /// above them are PlanScene::nodeToolTip's, computed when asked: 88,000 nodes' would not be).
    QString stageLine() const {
        QString tip;
        if (stage_ != kNone) {
            tip += QObject::tr("\nstage %1").arg(stage_);
            if (status_ >= 0) tip += QStringLiteral(": ") + statusText(static_cast<StageStatus>(status_));
        }
        if (kind_ == ViewNodeKind::CollapsedRank || kind_ == ViewNodeKind::CollapsedLayer) tip += QObject::tr("\ndouble-click to expand");
        return tip;
    }
    /// The title as painted: shortened in the middle, with an ellipsis, to the box's width.
    QString shownTitle(const QFontMetricsF& fm) const { return fm.elidedText(title_, Qt::ElideMiddle, rect_.width() - 8); }
    QString shownSubtitle(const QFontMetricsF& fm) const { return fm.elidedText(subtitle_, Qt::ElideMiddle, rect_.width() - 8); }
    QRectF boundingRect() const override { return rect_.adjusted(-6, -6, 6, 6); }
    void setStatus(int s) {
        if (s != status_) {
            status_ = s;
            update();
        }
    }
    int status() const { return status_; }
    void setMark(NodeMark m) {
        if (m != mark_) {
            mark_ = m;
            update();
        }
    }
    NodeMark mark() const { return mark_; }
    void setHighlight(int h) {
        if (h != highlight_) {
            highlight_ = h;
            update();
        }
    }
    int node() const { return node_; }

    void paint(QPainter* p, const QStyleOptionGraphicsItem* opt, QWidget*) override {
        const auto pal = paletteFor(scene_->dark_);
        const qreal lod = opt->levelOfDetailFromTransform(p->worldTransform());
        QColor fill = kind_ == ViewNodeKind::Tensor ? pal.tensor
                      : kind_ == ViewNodeKind::CollapsedRank || kind_ == ViewNodeKind::CollapsedLayer ? pal.collapsed
                      : collective_ ? pal.collective
                      : side_ == ViewSide::Logical ? pal.logicalOp : pal.parallelOp;
        if (status_ >= 0 && kind_ != ViewNodeKind::Tensor) {
            // Verification status tints the fill: green proven, red failed, orange inconclusive, grey not yet.
            const QColor sc = statusColor(static_cast<StageStatus>(status_));
            const qreal a = scene_->dark_ ? 0.55 : 0.45;
            fill = QColor::fromRgbF(fill.redF() * (1 - a) + sc.redF() * a, fill.greenF() * (1 - a) + sc.greenF() * a,
                                    fill.blueF() * (1 - a) + sc.blueF() * a);
        }
        if (mark_ != NodeMark::None) {
            // A ring outside the node: it stays whatever is selected.
            const QColor ring = mark_ == NodeMark::FailingOp ? QColor(211, 47, 47)
                                : mark_ == NodeMark::Counterpart ? QColor(239, 108, 0)
                                : mark_ == NodeMark::OtherEnd ? QColor(142, 36, 170)
                                : mark_ == NodeMark::Injected ? QColor(120, 20, 20)
                                : mark_ == NodeMark::Changed  ? QColor(216, 27, 96)
                                                              : QColor(30, 136, 229);
            p->setPen(QPen(ring, mark_ == NodeMark::FailingOp ? 4 : 3,
                           mark_ == NodeMark::OtherEnd ? Qt::DashLine : mark_ == NodeMark::Injected ? Qt::DotLine : Qt::SolidLine));
            p->setBrush(Qt::NoBrush);
            p->drawRoundedRect(rect_.adjusted(-4, -4, 4, 4), 5, 5);
        }
        QPen pen(pal.edge, 1);
        if (status_ == static_cast<int>(StageStatus::Running)) pen = QPen(statusColor(StageStatus::Running), 2, Qt::DashLine);
        if (highlight_ == 2 || isSelected()) pen = QPen(pal.selection, 3);
        else if (highlight_ == 1) pen = QPen(pal.related, 2.5);
        p->setPen(pen);
        p->setBrush(fill);
        if (lod < 0.25) {
            p->drawRect(rect_);
            return;
        }
        const qreal radius = kind_ == ViewNodeKind::Tensor ? 10 : 3;
        p->drawRoundedRect(rect_, radius, radius);
        if (kind_ == ViewNodeKind::CollapsedRank || kind_ == ViewNodeKind::CollapsedLayer) {
            // A folded stack: what double-clicking opens.
            p->drawLine(rect_.topLeft() + QPointF(4, 4), rect_.topRight() + QPointF(-4, 4));
            if (kind_ == ViewNodeKind::CollapsedLayer) p->drawLine(rect_.topLeft() + QPointF(8, 7), rect_.topRight() + QPointF(-8, 7));
        }
        if (stage_ != kNone && kind_ == ViewNodeKind::Op) {
            // The stage mark: the same hue as the stage's band on the logical side.
            p->setPen(Qt::NoPen);
            p->setBrush(stageColor(stage_));
            p->drawRect(QRectF(rect_.left() + 1, rect_.top() + 3, 4, rect_.height() - 6));
        }
        if (lod < 0.55) return;
        p->setPen(pal.text);
        // Two lines, each as tall as its font, centred in the box; a name too long for the box is
        // shortened in the middle with an ellipsis (the tooltip has it whole), never cut.
        QFont title = scene_->titleFont();
        QFont sub = title;
        sub.setPointSizeF(7);
        sub.setItalic(true);
        const QFontMetricsF ft(title), fs(sub);
        const qreal lines = ft.height() + (subtitle_.isEmpty() ? 0 : fs.height());
        const qreal top = rect_.center().y() - lines / 2;
        const QRectF titleLine(rect_.left() + 4, top, rect_.width() - 8, ft.height());
        p->setFont(title);
        p->drawText(titleLine, Qt::AlignCenter | Qt::TextDontClip, shownTitle(ft));
        if (subtitle_.isEmpty()) return;
        p->setFont(sub);
        p->drawText(QRectF(titleLine.left(), titleLine.bottom(), titleLine.width(), fs.height()), Qt::AlignCenter | Qt::TextDontClip, shownSubtitle(fs));
    }

protected:
    void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* e) override {
        emit scene_->nodeActivated(node_);
        QGraphicsItem::mouseDoubleClickEvent(e);
    }

private:
    PlanScene* scene_;
    int node_;
    QRectF rect_;
    ViewNodeKind kind_;
    ViewSide side_;
    bool collective_;
    std::uint32_t stage_;
    QString title_, subtitle_;
    int highlight_ = 0;  ///< 0 none, 1 counterpart, 2 selected
    int status_ = -1;    ///< a StageStatus, -1 when not verified
    NodeMark mark_ = NodeMark::None;
};

/// A stage band, a layer, or a rank/microbatch group, drawn behind the ops. Double-clicking an
/// expanded layer's band folds it again.
class GroupItem : public QGraphicsItem {
public:
    GroupItem(PlanScene* scene, int group, const ViewGroup& g, QRectF rect)
        : scene_(scene), group_(group), kind_(g.kind), stage_(g.stage), rect_(rect), label_(QString::fromStdString(g.label)) {
        // Nested bands paint inside out: rank, microbatch, layer, stage.
        setZValue(kind_ == ViewGroupKind::Rank ? -4 : kind_ == ViewGroupKind::Microbatch ? -3 : kind_ == ViewGroupKind::Layer ? -2 : -1);
        if (kind_ == ViewGroupKind::Layer) setToolTip(QObject::tr("%1 — double-click the band to collapse it").arg(label_));
    }
    QRectF boundingRect() const override { return rect_; }
    ViewGroupKind kind() const { return kind_; }
    void paint(QPainter* p, const QStyleOptionGraphicsItem* opt, QWidget*) override {
        const auto pal = paletteFor(scene_->dark_);
        QColor band = kind_ == ViewGroupKind::Stage ? pal.stageBand
                      : kind_ == ViewGroupKind::Rank ? pal.rankBand
                      : kind_ == ViewGroupKind::Layer ? pal.layerBand
                                                      : pal.mbBand;
        QColor border = kind_ == ViewGroupKind::Stage && stage_ != kNone ? stageColor(stage_) : band.darker(160);
        if (kind_ == ViewGroupKind::Layer) border = pal.edge;
        p->setPen(QPen(border, kind_ == ViewGroupKind::Microbatch ? 1 : 1.5,
                       kind_ == ViewGroupKind::Microbatch ? Qt::DashLine : kind_ == ViewGroupKind::Layer ? Qt::DotLine : Qt::SolidLine));
        p->setBrush(band);
        p->drawRoundedRect(rect_, 6, 6);
        if (opt->levelOfDetailFromTransform(p->worldTransform()) < 0.35) return;
        QFont f = p->font();
        f.setPointSizeF(kind_ == ViewGroupKind::Microbatch ? 7 : 8);
        f.setBold(kind_ != ViewGroupKind::Microbatch);
        p->setFont(f);
        p->setPen(pal.text);
        p->drawText(rect_.adjusted(6, 2, -6, -2), Qt::AlignTop | Qt::AlignLeft, label_);
    }

    int group() const { return group_; }

private:
    PlanScene* scene_;
    int group_;
    ViewGroupKind kind_;
    std::uint32_t stage_;
    QRectF rect_;
    QString label_;
};

/// A dataflow or lineage edge. At low zoom it is drawn as a straight, solid, aliased line
/// between its ends: long dashed curves are what makes panning a large plan slow.
class EdgeItem : public QGraphicsItem {
public:
    /// A null `scene` keeps the pen's colour; otherwise the colour follows the scene's palette.
    EdgeItem(QPainterPath path, QPen pen, const PlanScene* scene = nullptr) : scene_(scene), path_(std::move(path)), pen_(std::move(pen)) {
        bounds_ = path_.boundingRect().adjusted(-2, -2, 2, 2);
        from_ = path_.elementAt(0);
        to_ = path_.currentPosition();
    }
    QRectF boundingRect() const override { return bounds_; }
    QPainterPath shape() const override {
        QPainterPathStroker s;
        s.setWidth(6);
        return s.createStroke(path_);
    }
    void paint(QPainter* p, const QStyleOptionGraphicsItem* opt, QWidget*) override {
        const qreal lod = opt->levelOfDetailFromTransform(p->worldTransform());
        if (scene_) pen_.setColor(paletteFor(scene_->dark_).edge);
        if (lod < 0.35) {
            QPen pen(pen_.color(), 0);
            p->setRenderHint(QPainter::Antialiasing, false);
            p->setPen(pen);
            p->drawLine(from_, to_);
            return;
        }
        p->setPen(pen_);
        p->setBrush(Qt::NoBrush);
        p->drawPath(path_);
    }

private:
    const PlanScene* scene_;
    QPainterPath path_;
    QPen pen_;
    QRectF bounds_;
    QPointF from_, to_;
};

PlanScene::PlanScene(QObject* parent) : QGraphicsScene(parent) {
    setItemIndexMethod(QGraphicsScene::BspTreeIndex);
    connect(this, &QGraphicsScene::selectionChanged, this, &PlanScene::onSelectionChanged);
}

PlanScene::~PlanScene() {
    // Deleting selected items emits selectionChanged; our bookkeeping must not see that.
    blockSignals(true);
    clear();
    nodes_.clear();
    lineageItems_.clear();
    groupItems_.clear();
    dataflowItems_.clear();
    bundleItems_.clear();
}

void PlanScene::mouseDoubleClickEvent(QGraphicsSceneMouseEvent* e) {
    // Bands do not take mouse presses (dragging over them pans the view), so a double-click that
    // no node took is offered here to the innermost band under the pointer.
    for (auto* item : items(e->scenePos())) {
        if (dynamic_cast<NodeItem*>(item)) {
            QGraphicsScene::mouseDoubleClickEvent(e);
            return;
        }
        if (auto* g = dynamic_cast<GroupItem*>(item)) {
            emit groupActivated(g->group());
            e->accept();
            return;
        }
    }
    QGraphicsScene::mouseDoubleClickEvent(e);
}

void PlanScene::contextMenuEvent(QGraphicsSceneContextMenuEvent* e) {
    for (auto* item : items(e->scenePos()))
        if (auto* node = dynamic_cast<NodeItem*>(item)) {
            emit nodeContextMenu(node->node(), e->screenPos());
            e->accept();
            return;
        }
    QGraphicsScene::contextMenuEvent(e);
}

int PlanScene::groupItemCount(ViewGroupKind kind) const {
    int n = 0;
    for (auto* g : groupItems_) n += static_cast<GroupItem*>(g)->kind() == kind;
    return n;
}

QGraphicsItem* PlanScene::itemForNode(int node) const {
    return node >= 0 && node < static_cast<int>(nodes_.size()) ? nodes_[node] : nullptr;
}

void PlanScene::setPlan(std::shared_ptr<const LoadedPlan> loaded) {
    clearSelection();
    {
        const QSignalBlocker block(this);
        clear();
    }
    nodes_.clear();
    groupItems_.clear();
    lineageItems_.clear();
    dataflowItems_.clear();
    bundleItems_.clear();
    highlighted_.clear();
    nodeStages_.clear();
    marks_.clear();
    selected_ = -1;
    loaded_ = std::move(loaded);
    if (!loaded_) {
        emit planChanged();
        return;
    }
    const auto& v = loaded_->view;
    const auto& pl = loaded_->placed;
    const auto pal = paletteFor(dark_);
    const auto& reg = OpRegistry::instance();
    nodeStages_.assign(v.nodes.size(), {});
    for (std::size_t st = 0; st < v.stageNodes.size(); ++st)
        for (int n : v.stageNodes[st])
            if (n >= 0 && n < static_cast<int>(v.nodes.size()) &&
                (nodeStages_[n].empty() || nodeStages_[n].back() != static_cast<std::uint32_t>(st)))
                nodeStages_[n].push_back(static_cast<std::uint32_t>(st));

    for (std::size_t g = 0; g < v.groups.size(); ++g) {
        auto* item = new GroupItem(this, static_cast<int>(g), v.groups[g], toQt(pl.groupRects[g]));
        addItem(item);
        groupItems_.push_back(item);
    }
    for (std::size_t i = 0; i < v.nodes.size(); ++i) {
        const auto& n = v.nodes[i];
        bool collective = n.side == ViewSide::Parallel && n.kind == ViewNodeKind::Op &&
                          reg.spec(loaded_->plan->parallel.ops[n.id].kind).collective;
        auto* item = new NodeItem(this, static_cast<int>(i), n, toQt(pl.nodeRects[i]), collective);
        addItem(item);
        nodes_.push_back(item);
    }
    QPen edgePen(pal.edge, 1);
    dataflowItems_.assign(pl.dataflowPaths.size(), nullptr);
    for (std::size_t e = 0; e < pl.dataflowPaths.size(); ++e) {
        const auto& pts = pl.dataflowPaths[e];
        if (pts.size() < 4) continue;
        QPainterPath path(QPointF(pts[0].x, pts[0].y));
        for (std::size_t k = 1; k + 2 < pts.size(); k += 3)
            path.cubicTo(QPointF(pts[k].x, pts[k].y), QPointF(pts[k + 1].x, pts[k + 1].y), QPointF(pts[k + 2].x, pts[k + 2].y));
        QPointF end(pts.back().x, pts.back().y), tip(pl.dataflowTips[e].x, pl.dataflowTips[e].y);
        path.lineTo(tip);
        QLineF dir(end, tip);
        if (dir.length() > 0.1) {
            QLineF a = dir.normalVector();
            a.setLength(3);
            QPolygonF head({tip, end + QPointF(a.dx(), a.dy()), end - QPointF(a.dx(), a.dy())});
            path.addPolygon(head);
        }
        auto* item = new EdgeItem(path, edgePen, this);
        addItem(item);
        item->setZValue(1);
        dataflowItems_[e] = item;
    }
    // A collapsed rank's edges to one other rank: one edge, as thick as the log of the tensors it
    // carries, with the count on it and the first few tensors in its tooltip.
    bundleItems_.clear();
    for (const auto& b : pl.bundles) {
        if (b.path.size() < 4) continue;
        const auto& pts = b.path;
        QPainterPath path(QPointF(pts[0].x, pts[0].y));
        path.cubicTo(QPointF(pts[1].x, pts[1].y), QPointF(pts[2].x, pts[2].y), QPointF(pts[3].x, pts[3].y));
        const QPointF tip(pts[3].x, pts[3].y);
        QLineF dir(QPointF(pts[2].x, pts[2].y), tip);
        if (dir.length() > 0.1) {
            dir.setLength(7);
            QLineF back(tip, tip - QPointF(dir.dx(), dir.dy()));
            QLineF side = back.normalVector();
            side.setLength(4);
            path.addPolygon(QPolygonF({tip, back.p2() + QPointF(side.dx(), side.dy()), back.p2() - QPointF(side.dx(), side.dy()), tip}));
        }
        const double width = 1.0 + std::min(5.0, std::log2(std::max<double>(1, b.tensors)));
        auto* item = new EdgeItem(path, QPen(pal.edge, width), this);
        addItem(item);
        item->setZValue(1.5);
        const auto rankName = [&](int node, int group) {
            return node >= 0 ? tr("rank %1").arg(v.nodes[node].id) : tr("rank %1").arg(v.groups[group].rank);
        };
        const QString from = b.outgoing ? rankName(b.collapsed, -1) : rankName(b.otherNode, b.otherGroup);
        const QString to = b.outgoing ? rankName(b.otherNode, b.otherGroup) : rankName(b.collapsed, -1);
        QStringList names;
        const std::size_t logical = v.logicalEdges.size();
        for (std::size_t k = 0; k < b.members.size() && names.size() < 5; ++k) {
            const auto& e = v.parallelEdges[b.members[k] - logical];
            if (e.tensor != kNone) names << QString::fromStdString(loaded_->plan->tensorName(loaded_->plan->parallel, e.tensor));
        }
        item->setToolTip(tr("%1 → %2: %n edge(s)", nullptr, static_cast<int>(b.members.size())).arg(from, to) +
                         tr(" carrying %n tensor(s)", nullptr, static_cast<int>(b.tensors)) +
                         (names.isEmpty() ? QString() : QStringLiteral(" (") + names.join(QStringLiteral(", ")) + (b.members.size() > 5 ? QStringLiteral(", …)") : QStringLiteral(")"))));
        auto* count = new QGraphicsSimpleTextItem(QString::number(b.tensors), item);
        QFont f = font();
        f.setPointSizeF(7);
        count->setFont(f);
        count->setBrush(pal.text);
        const QPointF mid = path.pointAtPercent(0.5);
        count->setPos(mid + QPointF(4, -count->boundingRect().height() / 2));
        bundleItems_.push_back({item, b.collapsed, b.otherNode});
    }
    // Large plans create lineage items on demand, for the selection only.
    lineageItems_.assign(v.lineage.size(), nullptr);
    if (v.lineage.size() <= kMaxAlwaysShownLineage)
        for (std::size_t i = 0; i < v.lineage.size(); ++i)
            if (!touchesCollapsed(i)) lineageItem(i);
    QRectF all = itemsBoundingRect();
    setSceneRect(all.adjusted(-40, -40, 40, 40));
    updateLineageVisibility();
    setFilter(filter_);
    emit planChanged();
}

QGraphicsItem* PlanScene::lineageItem(std::size_t i) {
    if (lineageItems_[i]) return lineageItems_[i];
    const auto& v = loaded_->view;
    const auto& pl = loaded_->placed;
    const auto& e = v.lineage[i];
    const auto a = toQt(pl.nodeRects[e.logical]);
    const auto b = toQt(pl.nodeRects[e.parallel]);
    QPointF from(a.right(), a.center().y()), to(b.left(), b.center().y());
    QPainterPath path(from);
    const qreal dx = std::max<qreal>(60, (to.x() - from.x()) / 2);
    path.cubicTo(from + QPointF(dx, 0), to - QPointF(dx, 0), to);
    auto* item = new EdgeItem(path, lineagePen(e.kind));
    addItem(item);
    item->setZValue(0.5);
    item->setToolTip(QStringLiteral("%1: %2%3")
                         .arg(QString::fromStdString(std::string(toString(e.kind))),
                              e.coeff.isOne() ? QString() : QString::fromStdString(e.coeff.toString()) + QStringLiteral(" × "),
                              QString::fromStdString(v.nodes[e.parallel].name)));
    lineageItems_[i] = item;
    return item;
}

bool PlanScene::touchesCollapsed(std::size_t i) const {
    const auto& v = loaded_->view;
    auto collapsed = [&](int n) { return v.nodes[n].kind == ViewNodeKind::CollapsedRank || v.nodes[n].kind == ViewNodeKind::CollapsedLayer; };
    return collapsed(v.lineage[i].logical) || collapsed(v.lineage[i].parallel);
}

int PlanScene::lineageItemCount() const {
    return static_cast<int>(std::count_if(lineageItems_.begin(), lineageItems_.end(), [](auto* p) { return p != nullptr; }));
}

void PlanScene::selectNode(int node) {
    clearSelection();
    if (auto* item = itemForNode(node)) item->setSelected(true);
}

void PlanScene::onSelectionChanged() {
    for (int n : highlighted_)
        if (auto* item = itemForNode(n)) static_cast<NodeItem*>(item)->setHighlight(0);
    if (auto* item = itemForNode(selected_)) static_cast<NodeItem*>(item)->setHighlight(0);
    highlighted_.clear();
    selected_ = -1;
    for (auto* item : selectedItems()) {
        auto it = std::find(nodes_.begin(), nodes_.end(), item);
        if (it != nodes_.end()) {
            selected_ = static_cast<int>(it - nodes_.begin());
            break;
        }
    }
    if (selected_ >= 0 && loaded_) {
        static_cast<NodeItem*>(nodes_[selected_])->setHighlight(2);
        highlighted_ = loaded_->view.counterparts(selected_);
        for (int n : highlighted_) static_cast<NodeItem*>(nodes_[n])->setHighlight(1);
    }
    updateLineageVisibility();
    emit nodeSelected(selected_);
}

void PlanScene::setShowAllLineage(bool all) {
    showAllLineage_ = all;
    updateLineageVisibility();
}

bool PlanScene::drawingAllLineage() const {
    return showAllLineage_ && lineageItems_.size() <= kMaxAlwaysShownLineage;
}

std::vector<std::pair<std::size_t, double>> PlanScene::lineageToDraw() const {
    std::vector<std::pair<std::size_t, double>> out;
    if (!loaded_) return out;
    const auto& lin = loaded_->view.lineage;
    const bool all = drawingAllLineage();
    for (std::size_t i = 0; i < lin.size(); ++i) {
        const bool touches = selected_ >= 0 && (lin[i].logical == selected_ || lin[i].parallel == selected_);
        if ((all && !touchesCollapsed(i)) || touches) out.emplace_back(i, selected_ >= 0 && !touches ? 0.25 : 1.0);
    }
    return out;
}

void PlanScene::setLineageInScene(bool inScene) {
    if (lineageInScene_ == inScene) return;
    lineageInScene_ = inScene;
    updateLineageVisibility();
}

void PlanScene::updateLineageVisibility() {
    if (!loaded_) return;
    const auto& lin = loaded_->view.lineage;
    const bool all = drawingAllLineage();
    for (std::size_t i = 0; i < lineageItems_.size(); ++i) {
        bool touches = selected_ >= 0 && (lin[i].logical == selected_ || lin[i].parallel == selected_);
        if (!lineageItems_[i] && !(touches && lineageInScene_)) continue;
        auto* item = lineageItem(i);
        item->setVisible(lineageInScene_ && ((all && !touchesCollapsed(i)) || touches));
        item->setOpacity(selected_ >= 0 && !touches ? 0.25 : 1.0);
    }
    emit lineageChanged();
}

QString PlanScene::nodeToolTip(int node) const {
    if (!loaded_ || node < 0 || node >= static_cast<int>(nodes_.size())) return {};
    QStringList lines;
    for (const auto& line : describeNode(*loaded_->plan, loaded_->view, node))
        if (!line.empty()) lines << QString::fromStdString(line);
    return lines.join(QLatin1Char('\n')) + static_cast<NodeItem*>(nodes_[node])->stageLine();
}

void PlanScene::helpEvent(QGraphicsSceneHelpEvent* e) {
    for (auto* item : items(e->scenePos()))
        if (auto* node = dynamic_cast<NodeItem*>(item)) {
            QToolTip::showText(e->screenPos(), nodeToolTip(node->node()), e->widget());
            e->accept();
            return;
        }
    QGraphicsScene::helpEvent(e);
}

bool PlanScene::nodePassesFilter(int node) const {
    return loaded_ && node >= 0 && node < static_cast<int>(nodes_.size()) && passesFilter(*loaded_->plan, loaded_->view, node, filter_);
}

int PlanScene::setFilter(const ViewFilter& filter) {
    filter_ = filter;
    int passing = 0;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        const bool pass = nodePassesFilter(static_cast<int>(i));
        nodes_[i]->setOpacity(pass ? 1.0 : 0.15);
        passing += pass;
    }
    // An edge is as dim as the dimmer of its ends: what the filter excludes recedes, edges too.
    if (loaded_) {
        const auto& v = loaded_->view;
        const std::size_t logical = v.logicalEdges.size();
        for (std::size_t e = 0; e < dataflowItems_.size(); ++e) {
            if (!dataflowItems_[e]) continue;
            const auto& edge = e < logical ? v.logicalEdges[e] : v.parallelEdges[e - logical];
            auto* from = itemForNode(edge.from);
            auto* to = itemForNode(edge.to);
            dataflowItems_[e]->setOpacity(from && to ? std::min(from->opacity(), to->opacity()) : 1.0);
        }
        for (const auto& b : bundleItems_) {
            double o = itemForNode(b.collapsed) ? itemForNode(b.collapsed)->opacity() : 1.0;
            if (auto* other = itemForNode(b.otherNode)) o = std::min(o, other->opacity());
            b.item->setOpacity(o);
        }
    }
    return passing;
}

QFont PlanScene::titleFont() const {
    QFont f = font();
    f.setPointSizeF(8);
    return f;
}

std::vector<std::pair<QString, double>> PlanScene::bundleItems() const {
    std::vector<std::pair<QString, double>> out;
    for (const auto& b : bundleItems_) out.emplace_back(b.item->toolTip(), b.item->opacity());
    return out;
}

QString PlanScene::shownTitle(int node) const {
    auto* item = static_cast<NodeItem*>(itemForNode(node));
    return item ? item->shownTitle(QFontMetricsF(titleFont())) : QString();
}

double PlanScene::dataflowOpacity(std::size_t edge) const {
    return edge < dataflowItems_.size() && dataflowItems_[edge] ? dataflowItems_[edge]->opacity() : -1.0;
}

namespace {
/// How bad a status is, for a node in several stages: the worst one shows.
int severity(StageStatus s) {
    switch (s) {
        case StageStatus::Equivalent: return 0;
        case StageStatus::Skipped: return 1;
        case StageStatus::Queued: return 2;
        case StageStatus::Running: return 3;
        case StageStatus::Inconclusive: return 4;
        case StageStatus::Failed: return 5;
    }
    return 0;
}
}  // namespace

void PlanScene::setStageStatuses(const std::vector<StageStatus>& perDrawnStage) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        int status = -1;
        if (!perDrawnStage.empty())
            for (auto st : nodeStages_[i])
                if (st < perDrawnStage.size() && (status < 0 || severity(perDrawnStage[st]) > severity(static_cast<StageStatus>(status))))
                    status = static_cast<int>(perDrawnStage[st]);
        nodes_[i]->setStatus(status);
    }
}

int PlanScene::nodeStatus(int node) const {
    return node >= 0 && node < static_cast<int>(nodes_.size()) ? nodes_[node]->status() : -1;
}

void PlanScene::setMarks(const std::vector<std::pair<int, NodeMark>>& marks) {
    for (const auto& [n, m] : marks_)
        if (n >= 0 && n < static_cast<int>(nodes_.size())) nodes_[n]->setMark(NodeMark::None);
    marks_.clear();
    for (const auto& [n, m] : marks) {
        if (n < 0 || n >= static_cast<int>(nodes_.size())) continue;
        // A node marked twice keeps the stronger mark: failing op, counterpart, other end, focus.
        auto strength = [](NodeMark k) {
            return k == NodeMark::FailingOp     ? 5
                   : k == NodeMark::Counterpart ? 4
                   : k == NodeMark::OtherEnd    ? 3
                   : k == NodeMark::Injected    ? 2
                   : k == NodeMark::Changed     ? 2
                   : k == NodeMark::Focus       ? 1
                                                : 0;
        };
        if (strength(m) > strength(nodes_[n]->mark())) nodes_[n]->setMark(m);
        marks_.emplace_back(n, nodes_[n]->mark());
    }
}

NodeMark PlanScene::markOf(int node) const {
    return node >= 0 && node < static_cast<int>(nodes_.size()) ? nodes_[node]->mark() : NodeMark::None;
}

std::vector<int> PlanScene::marked(NodeMark mark) const {
    std::vector<int> out;
    for (std::size_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i]->mark() == mark) out.push_back(static_cast<int>(i));
    return out;
}

void PlanScene::setDark(bool dark) {
    dark_ = dark;
    setBackgroundBrush(dark ? QColor(30, 30, 34) : QColor(250, 250, 252));
    update();
}

}  // namespace tv::ui
