// The dual view's scene: the logical graph on the left, the parallel graph on the right, stage and
// rank groups as bands, lineage edges between the two sides. Items are plain QGraphicsItems owned
// by the scene and indexed by PlanView node; highlighting is a state change, not a rebuild.
#pragma once

#include <QGraphicsScene>
#include <QPen>
#include <QPointer>

#include <memory>
#include <vector>

#include "explore/plan_view.hpp"
#include "bugs/bug_catalog.hpp"
#include "session/session.hpp"
#include "verify/check.hpp"

class QGraphicsItem;

namespace tv::ui {

/// How a lineage edge is drawn: blue for a shard, grey dots for a replica, purple dashes for a partial sum.
QColor lineageColor(LineageKind k);
QPen lineagePen(LineageKind k);

/// Everything a loaded plan needs on screen, computed off the GUI thread: the plan opened (what
/// Verify checks, where it came from, the bug injected), what is drawn of it, and the view.
struct LoadedPlan {
    std::shared_ptr<const session::OpenedPlan> opened;
    std::shared_ptr<const Plan> plan;   ///< the plan drawn (a plan stored once is drawn written out)
    StagePlan stages;                   ///< the drawn plan's stages
    /// The opened plan's stages, which Verify checks (the same as `stages` when the plan drawn is
    /// the plan opened), and drawn stage -> verified stage (a stored stage stands for its instances
    /// in every lane).
    std::shared_ptr<const StagePlan> verifiedStages;
    std::vector<std::uint32_t> drawnToVerified;
    ViewOptions options;
    PlanView view;
    PlacedView placed;
    double seconds = 0;  ///< time to read, cut stages and lay out
    double readSeconds = 0, stageSeconds = 0, viewSeconds = 0, layoutSeconds = 0;  ///< its parts
    /// Non-empty when a plan stored once is drawn as stored (too big to write out): says so.
    QString storedNote;

    /// The plan verified (the plan as read).
    const std::shared_ptr<const Plan>& verifiedPlan() const { return opened->plan; }
    /// The bug injected (Bug > Inject Bug), or null.
    const std::shared_ptr<const bugs::Mutant>& mutant() const { return opened->mutant; }
    /// The plan file (a pair of nnScaler plans: the parallel plan's).
    QString path() const { return QString::fromStdString(opened->source.path); }
    /// A pair (nnScaler plans, or PyTorch graphs): the logical side's file; empty otherwise.
    QString logicalPath() const { return QString::fromStdString(opened->source.logicalPath); }
    /// A pair of PyTorch programs: the ranks' graphs (path() is the first); empty otherwise.
    QStringList rankPaths() const {
        QStringList r;
        for (const auto& p : opened->source.rankPaths) r << QString::fromStdString(p);
        return r;
    }
};

/// Marks that outlive the selection: where verification failed, and what the user focused.
enum class NodeMark : std::uint8_t { None, Focus, FailingOp, Counterpart, OtherEnd, Injected, Changed };

class NodeItem;
class GroupItem;
class EdgeItem;

class PlanScene : public QGraphicsScene {
    Q_OBJECT
public:
    explicit PlanScene(QObject* parent = nullptr);
    ~PlanScene() override;

    void setPlan(std::shared_ptr<const LoadedPlan> loaded);
    const LoadedPlan* loaded() const { return loaded_.get(); }
    std::shared_ptr<const LoadedPlan> loadedShared() const { return loaded_; }

    int nodeItemCount() const { return static_cast<int>(nodes_.size()); }
    /// Lineage items created so far (all of them for a small plan; the selection's for a large one).
    int lineageItemCount() const;
    int groupItemCount(ViewGroupKind kind) const;
    QGraphicsItem* itemForNode(int node) const;
    int selectedNode() const { return selected_; }
    /// Nodes currently highlighted as counterparts of the selection.
    const std::vector<int>& highlighted() const { return highlighted_; }

    void selectNode(int node);
    /// Lineage edges: all of them (but those touching a collapsed node), or only those touching the selection.
    void setShowAllLineage(bool all);
    bool showAllLineage() const { return showAllLineage_; }
    /// Above this many lineage edges only the selection's are drawn, whatever the setting.
    static constexpr std::size_t kMaxAlwaysShownLineage = 1500;
    bool drawingAllLineage() const;
    /// The lineage edges to draw now (all, or the selection's) and the opacity of each.
    std::vector<std::pair<std::size_t, double>> lineageToDraw() const;
    /// Whether the scene draws lineage itself (one canvas, exports) or leaves it to the panes' overlay.
    void setLineageInScene(bool inScene);
    bool lineageInScene() const { return lineageInScene_; }
    void setDark(bool dark);
    /// Dims what the filter excludes; returns how many nodes pass.
    int setFilter(const ViewFilter& filter);
    bool nodePassesFilter(int node) const;
    /// A node's name as painted in its box (shortened in the middle to fit), and the font it is painted in.
    QString shownTitle(int node) const;
    /// What hovering a node shows: its full name, kind, rank, slice and coefficient, stage and status.
    QString nodeToolTip(int node) const;
    QFont titleFont() const;
    /// The opacity a dataflow edge is drawn with (logical edges, then parallel; -1: not drawn).
    double dataflowOpacity(std::size_t edge) const;
    /// The bundled edges drawn (PlacedView::bundles): each one's tooltip and opacity.
    std::vector<std::pair<QString, double>> bundleItems() const;
    /// Colours every node by the status of the stages it belongs to (the worst of them), indexed
    /// by drawn stage; an empty vector clears the colouring (plan not verified).
    void setStageStatuses(const std::vector<StageStatus>& perDrawnStage);
    /// The status a node is painted with, -1 when none.
    int nodeStatus(int node) const;
    /// Replaces every mark (FailingOp, Counterpart, OtherEnd, Focus) with these.
    void setMarks(const std::vector<std::pair<int, NodeMark>>& marks);
    NodeMark markOf(int node) const;
    /// Nodes carrying a mark of this kind.
    std::vector<int> marked(NodeMark mark) const;
    /// Drawn stages each node belongs to (an op can lie in several).
    const std::vector<std::vector<std::uint32_t>>& nodeStages() const { return nodeStages_; }

signals:
    void planChanged();
    void nodeSelected(int node);
    void nodeActivated(int node);  ///< double-click (e.g. expand a collapsed rank or layer)
    void groupActivated(int group);  ///< double-click on a band (e.g. collapse an expanded layer)
    void nodeContextMenu(int node, QPoint screenPos);  ///< right-click on a node
    void lineageChanged();  ///< which lineage edges are drawn changed (selection, setting, plan)

protected:
    void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* e) override;
    void contextMenuEvent(QGraphicsSceneContextMenuEvent* e) override;
    void helpEvent(QGraphicsSceneHelpEvent* e) override;

private:
    void onSelectionChanged();
    void updateLineageVisibility();
    QGraphicsItem* lineageItem(std::size_t i);
    /// Lineage to or from a collapsed node is drawn only for the selection: a summary has too many.
    bool touchesCollapsed(std::size_t i) const;
    friend class NodeItem;
    friend class GroupItem;
    friend class EdgeItem;

    std::shared_ptr<const LoadedPlan> loaded_;
    std::vector<NodeItem*> nodes_;
    std::vector<QGraphicsItem*> groupItems_;
    struct BundleItem {
        QGraphicsItem* item;
        int collapsed, otherNode;
    };
    std::vector<BundleItem> bundleItems_;  ///< per drawn PlacedView::bundles entry
    std::vector<QGraphicsItem*> dataflowItems_;  ///< per PlacedView::dataflowPaths, null where none is drawn
    std::vector<QGraphicsItem*> lineageItems_;   ///< parallel to loaded_->view.lineage; null until needed
    std::vector<int> highlighted_;
    std::vector<std::vector<std::uint32_t>> nodeStages_;
    std::vector<std::pair<int, NodeMark>> marks_;
    int selected_ = -1;
    bool showAllLineage_ = true;
    bool lineageInScene_ = true;
    bool dark_ = false;
    ViewFilter filter_;
};

}  // namespace tv::ui
