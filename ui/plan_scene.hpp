// The dual view's scene: the logical graph on the left, the parallel graph on the right, stage and
// rank groups as bands, lineage edges between the two sides. Items are plain QGraphicsItems owned
// by the scene and indexed by PlanView node; highlighting is a state change, not a rebuild.
#pragma once

#include <QGraphicsScene>
#include <QPointer>

#include <memory>
#include <vector>

#include "explore/plan_view.hpp"

class QGraphicsItem;

namespace tv::ui {

/// Everything a loaded plan needs on screen, computed off the GUI thread.
struct LoadedPlan {
    std::shared_ptr<const Plan> plan;
    StagePlan stages;
    ViewOptions options;
    PlanView view;
    PlacedView placed;
    QString path;
    /// A plan mapped from a pair of nnScaler plans: the logical plan's file (`path` is the
    /// parallel plan's).
    QString logicalPath;
    double seconds = 0;  ///< time to read, cut stages and lay out
    double readSeconds = 0, stageSeconds = 0, viewSeconds = 0, layoutSeconds = 0;  ///< its parts
    /// Non-empty when a plan stored once is drawn as stored (too big to write out): says so.
    QString storedNote;
};

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
    void setDark(bool dark);
    /// Dims what the filter excludes; returns how many nodes pass.
    int setFilter(const ViewFilter& filter);
    bool nodePassesFilter(int node) const;

signals:
    void planChanged();
    void nodeSelected(int node);
    void nodeActivated(int node);  ///< double-click (e.g. expand a collapsed rank or layer)
    void groupActivated(int group);  ///< double-click on a band (e.g. collapse an expanded layer)

protected:
    void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* e) override;

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
    std::vector<QGraphicsItem*> lineageItems_;   ///< parallel to loaded_->view.lineage; null until needed
    std::vector<int> highlighted_;
    int selected_ = -1;
    bool showAllLineage_ = true;
    bool dark_ = false;
    ViewFilter filter_;
};

}  // namespace tv::ui
