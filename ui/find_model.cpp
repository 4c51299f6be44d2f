#include "find_model.hpp"

namespace tv::ui {

void FindResultsModel::setPlan(std::shared_ptr<const LoadedPlan> loaded) {
    loaded_ = std::move(loaded);
    view_ = loaded_ ? &loaded_->view : nullptr;
    setQuery(query_);
}

void FindResultsModel::setQuery(const QString& query) {
    beginResetModel();
    query_ = query;
    hits_.clear();
    if (view_ && !query.trimmed().isEmpty()) {
        const auto q = query.trimmed().toStdString();
        auto lower = [](std::string s) {
            for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            return s;
        };
        const auto lq = lower(q);
        // Exact names first, then names starting with the query, then any other match.
        std::vector<std::pair<int, int>> ranked;
        for (std::size_t i = 0; i < view_->nodes.size(); ++i) {
            const auto& n = view_->nodes[i];
            const auto name = lower(n.name);
            const auto at = name.find(lq);
            int rank = name == lq ? 0 : at == 0 ? 1 : at != std::string::npos ? 2 : lower(n.label).find(lq) != std::string::npos ? 3 : -1;
            if (rank >= 0) ranked.emplace_back(rank, static_cast<int>(i));
        }
        std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (const auto& [rank, node] : ranked) hits_.push_back(node);
    }
    endResetModel();
}

int FindResultsModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(hits_.size());
}

QVariant FindResultsModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= static_cast<int>(hits_.size()) || !view_) return {};
    const auto& n = view_->nodes[hits_[index.row()]];
    switch (role) {
        case Qt::DisplayRole: {
            const char* side = n.side == ViewSide::Logical ? "logical" : "parallel";
            const char* kind = n.kind == ViewNodeKind::Op ? "op" : n.kind == ViewNodeKind::Tensor ? "tensor" : "rank";
            return QStringLiteral("%1  (%2 %3, %4)").arg(QString::fromStdString(n.name), QLatin1String(side), QLatin1String(kind),
                                                         QString::fromStdString(n.label));
        }
        case Qt::ToolTipRole: return QString::fromStdString(n.name);
        case NodeRole: return hits_[index.row()];
        default: return {};
    }
}

}  // namespace tv::ui
