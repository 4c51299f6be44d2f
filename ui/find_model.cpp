#include "find_model.hpp"

namespace tv::ui {

void FindResultsModel::setView(const PlanView* view) {
    view_ = view;
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
        for (std::size_t i = 0; i < view_->nodes.size(); ++i) {
            const auto& n = view_->nodes[i];
            if (lower(n.name).find(lq) != std::string::npos || lower(n.label).find(lq) != std::string::npos)
                hits_.push_back(static_cast<int>(i));
        }
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
