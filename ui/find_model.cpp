#include "find_model.hpp"

#include <algorithm>

#include "ops/registry.hpp"

namespace tv::ui {

namespace {

std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

bool isFolded(const PlanView& view, int node) {
    return node >= 0 && (view.nodes[node].kind == ViewNodeKind::CollapsedRank || view.nodes[node].kind == ViewNodeKind::CollapsedLayer);
}

}  // namespace

int nodeShowing(const PlanView& view, const FindHit& hit) {
    const auto& list = hit.op ? (hit.side == ViewSide::Logical ? view.logicalOpNode : view.parallelOpNode)
                              : (hit.side == ViewSide::Logical ? view.logicalTensorNode : view.parallelTensorNode);
    return hit.id < list.size() ? list[hit.id] : -1;
}

void FindResultsModel::setPlan(std::shared_ptr<const LoadedPlan> loaded) {
    loaded_ = std::move(loaded);
    setQuery(query_);
}

void FindResultsModel::setQuery(const QString& query) {
    beginResetModel();
    query_ = query;
    hits_.clear();
    truncated_ = false;
    if (loaded_ && !query.trimmed().isEmpty()) {
        const auto& plan = *loaded_->plan;
        const auto& view = loaded_->view;
        const auto lq = lower(query.trimmed().toStdString());
        // Exact names first, then names starting with the query, then any other match; ops before
        // tensors, the logical side before the parallel one.
        std::vector<std::pair<int, FindHit>> ranked;
        auto consider = [&](const std::string& name, FindHit hit) {
            const auto ln = lower(name);
            const auto at = ln.find(lq);
            if (at == std::string::npos) return;
            hit.node = nodeShowing(view, hit);
            if (hit.node < 0) return;
            ranked.emplace_back(ln == lq ? 0 : at == 0 ? 1 : 2, hit);
        };
        for (auto side : {ViewSide::Logical, ViewSide::Parallel}) {
            const auto& g = side == ViewSide::Logical ? plan.logical : plan.parallel;
            for (OpId op = 0; op < g.ops.size(); ++op) consider(plan.opName(g, op), {side, true, op, -1});
            for (TensorId t = 0; t < g.tensors.size(); ++t) consider(plan.tensorName(g, t), {side, false, t, -1});
        }
        // Collapsed ranks and layers by their own names and summaries.
        for (std::size_t i = 0; i < view.nodes.size(); ++i) {
            const auto& n = view.nodes[i];
            if (n.kind != ViewNodeKind::CollapsedRank && n.kind != ViewNodeKind::CollapsedLayer) continue;
            const auto ln = lower(n.name);
            const auto at = ln.find(lq);
            if (at != std::string::npos || lower(n.label).find(lq) != std::string::npos)
                ranked.emplace_back(ln == lq ? 0 : at == 0 ? 1 : at != std::string::npos ? 2 : 3, FindHit{n.side, false, kNone, static_cast<int>(i)});
        }
        std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        if (ranked.size() > kMaxHits) {
            ranked.resize(kMaxHits);
            truncated_ = true;
        }
        for (const auto& [rank, hit] : ranked) hits_.push_back(hit);
    }
    endResetModel();
}

bool FindResultsModel::folded(int row) const {
    const auto* hit = hitAt(row);
    return hit && loaded_ && hit->id != kNone && isFolded(loaded_->view, hit->node);
}

int FindResultsModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(hits_.size());
}

QVariant FindResultsModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= static_cast<int>(hits_.size()) || !loaded_) return {};
    const auto& hit = hits_[index.row()];
    const auto& plan = *loaded_->plan;
    const auto& view = loaded_->view;
    const auto& shown = view.nodes[hit.node];
    const auto& g = hit.side == ViewSide::Logical ? plan.logical : plan.parallel;
    const QString side = hit.side == ViewSide::Logical ? QStringLiteral("logical") : QStringLiteral("parallel");
    QString name, what;
    if (hit.id == kNone) {
        name = QString::fromStdString(shown.name);
        what = QStringLiteral("%1 %2, %3")
                   .arg(side, shown.kind == ViewNodeKind::CollapsedRank ? QStringLiteral("rank") : QStringLiteral("layer"),
                        QString::fromStdString(shown.label));
    } else if (hit.op) {
        name = QString::fromStdString(plan.opName(g, hit.id));
        what = QStringLiteral("%1 op, %2").arg(side, QString::fromStdString(std::string(OpRegistry::instance().spec(g.ops[hit.id].kind).name)));
    } else {
        name = QString::fromStdString(plan.tensorName(g, hit.id));
        what = QStringLiteral("%1 tensor, %2").arg(side, QString::fromStdString(shapeToString(plan.shape(g, hit.id))));
    }
    const bool isHidden = folded(index.row());
    switch (role) {
        case Qt::DisplayRole:
            return isHidden ? QStringLiteral("%1  (%2; in collapsed %3)").arg(name, what, QString::fromStdString(shown.name))
                            : QStringLiteral("%1  (%2)").arg(name, what);
        case Qt::ToolTipRole:
            return isHidden ? QStringLiteral("%1\nfolded into %2: activate to expand it").arg(name, QString::fromStdString(shown.name)) : name;
        case NodeRole: return hit.node;
        case HiddenRole: return isHidden;
        default: return {};
    }
}

}  // namespace tv::ui
