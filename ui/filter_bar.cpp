// The filter bar's widgets: filled from the plan on screen, read back into a ViewFilter.
#include "filter_bar.hpp"

#include <QComboBox>
#include <QLabel>
#include <QLineEdit>

#include <algorithm>

namespace tv::ui {

FilterBar::FilterBar(QWidget* parent) : QToolBar(tr("Filters"), parent) {
    setObjectName(QStringLiteral("filters"));
    addWidget(new QLabel(tr(" Filter: "), this));
    QAction* lastAction = nullptr;
    auto combo = [&](const QString& tip) {
        auto* c = new QComboBox(this);
        c->setToolTip(tip);
        c->setSizeAdjustPolicy(QComboBox::AdjustToContents);
        lastAction = addWidget(c);
        connect(c, &QComboBox::currentIndexChanged, this, &FilterBar::widgetChanged);
        return c;
    };
    rank_ = combo(tr("Show one rank"));
    const QString coordTips[kAxes.size()] = {tr("Data-parallel coordinate"),     tr("Tensor-parallel coordinate"),
                                             tr("Pipeline-parallel coordinate"), tr("Sequence-parallel coordinate"),
                                             tr("Context-parallel coordinate"),  tr("Expert-parallel coordinate")};
    for (std::size_t k = 0; k < kAxes.size(); ++k) {
        coord_[k] = combo(coordTips[k]);
        coord_[k]->setObjectName(QStringLiteral("filter-") + QString::fromLatin1(toString(kAxes[k]).data()));
        coordActions_[k] = lastAction;
    }
    microbatch_ = combo(tr("Microbatch"));
    phase_ = combo(tr("Forward, backward, optimizer or communication ops"));
    kind_ = new QLineEdit(this);
    kind_->setPlaceholderText(tr("op kind, e.g. all_reduce"));
    kind_->setClearButtonEnabled(true);
    kind_->setMaximumWidth(200);
    addWidget(kind_);
    connect(kind_, &QLineEdit::textChanged, this, &FilterBar::widgetChanged);
    reset(nullptr);
}

void FilterBar::reset(const Plan* plan) {
    updating_ = true;
    auto fill = [](QComboBox* c, const QString& any, int n, const QString& prefix) {
        c->clear();
        c->addItem(any, -1);
        for (int i = 0; i < n; ++i) c->addItem(prefix + QString::number(i), i);
    };
    const int ranks = plan ? static_cast<int>(plan->ranks.size()) : 0;
    fill(rank_, tr("any rank"), ranks, tr("rank "));
    for (std::size_t k = 0; k < kAxes.size(); ++k) {
        const auto name = QString::fromLatin1(toString(kAxes[k]).data());
        fill(coord_[k], tr("any %1").arg(name), plan ? plan->mesh.at(kAxes[k]) : 0, name + QStringLiteral("="));
        // dp, tp and pp always have their place; the other axes only when the plan uses them
        const bool core = kAxes[k] == Axis::DP || kAxes[k] == Axis::TP || kAxes[k] == Axis::PP;
        if (coordActions_[k]) coordActions_[k]->setVisible(core ? (!plan || plan->mesh.at(kAxes[k]) > 1) : (plan && plan->mesh.at(kAxes[k]) > 1));
    }
    fill(microbatch_, tr("any microbatch"), plan ? plan->microbatches : 0, tr("mb "));
    phase_->clear();
    phase_->addItem(tr("any phase"), -1);
    for (auto ph : {Phase::Forward, Phase::Backward, Phase::Optimizer, Phase::Communication})
        phase_->addItem(QString::fromLatin1(toString(ph).data()), static_cast<int>(ph));
    kind_->clear();
    updating_ = false;
}

void FilterBar::setFilter(const ViewFilter& f) {
    updating_ = true;
    auto pick = [](QComboBox* c, int value) { c->setCurrentIndex(std::max(0, c->findData(value))); };
    pick(rank_, f.rank);
    for (std::size_t k = 0; k < kAxes.size(); ++k) pick(coord_[k], f.coordinate[static_cast<std::size_t>(kAxes[k])]);
    pick(microbatch_, f.microbatch);
    pick(phase_, f.phase);
    kind_->setText(QString::fromStdString(f.opKind));
    updating_ = false;
}

ViewFilter FilterBar::filter() const {
    ViewFilter f;
    f.rank = rank_->currentData().toInt();
    for (std::size_t k = 0; k < kAxes.size(); ++k) f.coordinate[static_cast<std::size_t>(kAxes[k])] = coord_[k]->currentData().toInt();
    f.microbatch = microbatch_->currentData().toInt();
    f.phase = phase_->currentData().toInt();
    f.opKind = kind_->text().trimmed().toStdString();
    return f;
}

void FilterBar::widgetChanged() {
    if (updating_) return;
    emit filterChanged(filter());
}

}  // namespace tv::ui
