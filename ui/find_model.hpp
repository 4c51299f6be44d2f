// Find (Ctrl+F): op and tensor names on both sides that contain the query, as a list model. Ops
// and tensors folded into a collapsed rank or layer are found too; activating one expands what
// hides it.
#pragma once

#include <QAbstractListModel>

#include <memory>
#include <vector>

#include "plan_scene.hpp"

namespace tv::ui {

/// One match: an op or a tensor of one side, and the node that shows it (itself, or the collapsed
/// rank or layer it is folded into).
struct FindHit {
    ViewSide side = ViewSide::Logical;
    bool op = true;
    std::uint32_t id = kNone;  ///< OpId or TensorId
    int node = -1;
};

class FindResultsModel : public QAbstractListModel {
    Q_OBJECT
public:
    enum Role { NodeRole = Qt::UserRole + 1, HiddenRole };
    /// At most this many matches are listed (the first, in rank order).
    static constexpr std::size_t kMaxHits = 5000;
    using QAbstractListModel::QAbstractListModel;

    /// Shares ownership of the loaded plan, so results never outlive the view they index.
    void setPlan(std::shared_ptr<const LoadedPlan> loaded);
    void setQuery(const QString& query);
    int rowCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    int nodeAt(int row) const { return row >= 0 && row < static_cast<int>(hits_.size()) ? hits_[row].node : -1; }
    const FindHit* hitAt(int row) const { return row >= 0 && row < static_cast<int>(hits_.size()) ? &hits_[row] : nullptr; }
    /// Whether the match is folded into a collapsed rank or layer rather than drawn itself.
    bool folded(int row) const;
    bool truncated() const { return truncated_; }

private:
    std::shared_ptr<const LoadedPlan> loaded_;
    QString query_;
    std::vector<FindHit> hits_;
    bool truncated_ = false;
};

/// The node that shows an op or tensor in a view (-1 if none).
int nodeShowing(const PlanView& view, const FindHit& hit);

}  // namespace tv::ui
