// Find (Ctrl+F): op and tensor names on both sides that contain the query, as a list model.
#pragma once

#include <QAbstractListModel>

#include <memory>
#include <vector>

#include "plan_scene.hpp"

namespace tv::ui {

class FindResultsModel : public QAbstractListModel {
    Q_OBJECT
public:
    enum Role { NodeRole = Qt::UserRole + 1 };
    using QAbstractListModel::QAbstractListModel;

    /// Shares ownership of the loaded plan, so results never outlive the view they index.
    void setPlan(std::shared_ptr<const LoadedPlan> loaded);
    void setQuery(const QString& query);
    int rowCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    int nodeAt(int row) const { return row >= 0 && row < static_cast<int>(hits_.size()) ? hits_[row] : -1; }

private:
    std::shared_ptr<const LoadedPlan> loaded_;
    const PlanView* view_ = nullptr;
    QString query_;
    std::vector<int> hits_;
};

}  // namespace tv::ui
