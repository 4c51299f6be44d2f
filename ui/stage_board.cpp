#include "stage_board.hpp"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QTableView>
#include <QVBoxLayout>

namespace tv::ui {

QColor statusColor(StageStatus s) {
    switch (s) {
        case StageStatus::Equivalent: return QColor(67, 160, 71);
        case StageStatus::Failed: return QColor(211, 47, 47);
        case StageStatus::Inconclusive: return QColor(245, 124, 0);
        case StageStatus::Running: return QColor(30, 136, 229);
        case StageStatus::Queued:
        case StageStatus::Skipped: return QColor(158, 158, 166);
    }
    return Qt::gray;
}

QString statusText(StageStatus s) {
    switch (s) {
        case StageStatus::Queued: return QObject::tr("queued");
        case StageStatus::Running: return QObject::tr("running");
        case StageStatus::Equivalent: return QObject::tr("proven");
        case StageStatus::Failed: return QObject::tr("failed");
        case StageStatus::Inconclusive: return QObject::tr("inconclusive");
        case StageStatus::Skipped: return QObject::tr("skipped");
    }
    return {};
}

namespace {
bool isDone(StageStatus s) { return s != StageStatus::Queued && s != StageStatus::Running; }
}  // namespace

StageBoardModel::StageBoardModel(QObject* parent) : QAbstractTableModel(parent) {}

void StageBoardModel::setPlan(std::shared_ptr<const Plan> plan, std::shared_ptr<const StagePlan> stages) {
    beginResetModel();
    plan_ = std::move(plan);
    stages_ = std::move(stages);
    const std::size_t n = stages_ ? stages_->stages.size() : 0;
    status_.assign(n, StageStatus::Queued);
    seconds_.assign(n, 0.0);
    note_.assign(n, QString());
    done_ = 0;
    verified_ = false;
    endResetModel();
}

void StageBoardModel::startRun() {
    for (std::size_t i = 0; i < status_.size(); ++i) {
        status_[i] = StageStatus::Queued;
        seconds_[i] = 0;
        note_[i].clear();
    }
    done_ = 0;
    verified_ = true;
    if (!status_.empty()) emit dataChanged(index(0, Status), index(rowCount() - 1, Note));
}

void StageBoardModel::set(std::uint32_t stage, StageStatus s) {
    done_ += static_cast<std::uint32_t>(isDone(s)) - static_cast<std::uint32_t>(isDone(status_[stage]));
    status_[stage] = s;
}

void StageBoardModel::apply(const QVector<StageUpdate>& updates) {
    int lo = rowCount(), hi = -1;
    for (const auto& u : updates) {
        if (u.stage >= status_.size()) continue;
        // A start never overrides a result (a stage's result can arrive in the same batch).
        if (u.status == StageStatus::Running && isDone(status_[u.stage])) continue;
        set(u.stage, u.status);
        seconds_[u.stage] = u.seconds;
        if (u.cached) note_[u.stage] = tr("proven in an earlier run");
        else if (u.sameAs != kNone) note_[u.stage] = tr("same as stage %1").arg(u.sameAs);
        else if (!u.failureKind.isEmpty()) note_[u.stage] = u.failureKind;
        lo = std::min(lo, static_cast<int>(u.stage));
        hi = std::max(hi, static_cast<int>(u.stage));
    }
    if (hi >= lo) emit dataChanged(index(lo, Status), index(hi, Note));
}

void StageBoardModel::finish(const VerifyReport& report) {
    if (report.results.size() != status_.size()) return;  // not this plan's report
    for (const auto& r : report.results) {
        set(r.stage, r.status == StageStatus::Queued || r.status == StageStatus::Running ? StageStatus::Skipped : r.status);
        seconds_[r.stage] = r.reduceSeconds + r.encodeSeconds + r.solveSeconds;
        if (r.failure) {
            const auto& f = *r.failure;
            note_[r.stage] = QString::fromLatin1(describe(f.kind).data()) +
                             (f.parallelOp.empty() ? QString() : QStringLiteral(" at ") + QString::fromStdString(f.parallelOp)) +
                             (f.rank >= 0 ? tr(", rank %1").arg(f.rank) : QString());
        } else if (r.cached) {
            note_[r.stage] = tr("proven in an earlier run");
        } else if (r.sameAs != kNone) {
            note_[r.stage] = tr("same as stage %1").arg(r.sameAs);
        } else if (!r.note.empty()) {
            note_[r.stage] = QString::fromStdString(r.note);
        }
    }
    if (!status_.empty()) emit dataChanged(index(0, Status), index(rowCount() - 1, Note));
}

void StageBoardModel::abort() {
    for (std::uint32_t i = 0; i < status_.size(); ++i)
        if (!isDone(status_[i])) set(i, StageStatus::Skipped);
    if (!status_.empty()) emit dataChanged(index(0, Status), index(rowCount() - 1, Note));
}

std::uint32_t StageBoardModel::count(StageStatus s) const {
    return static_cast<std::uint32_t>(std::count(status_.begin(), status_.end(), s));
}

int StageBoardModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(status_.size()); }
int StageBoardModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QString StageBoardModel::proves(std::uint32_t stage) const {
    const auto& st = stages_->stages[stage];
    // An op stage proves its last logical op's output; a glue stage a record of a logical tensor.
    if (!st.logicalOps.empty()) {
        QString name = QString::fromStdString(plan_->opName(plan_->logical, st.logicalOps.back()));
        if (st.logicalOps.size() > 1) name += tr(" (+%1)").arg(st.logicalOps.size() - 1);
        return name;
    }
    const auto& rec = plan_->lineage[st.output];
    return rec.logical == kNone ? QString() : QString::fromStdString(plan_->tensorName(plan_->logical, rec.logical));
}

QVariant StageBoardModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount()) return {};
    const auto stage = static_cast<std::uint32_t>(index.row());
    const auto& st = stages_->stages[stage];
    const StageStatus s = status_[stage];
    if (role == StatusRole) return verified_ ? static_cast<int>(s) : -1;
    if (role == Qt::DisplayRole || role == SortRole || role == Qt::ToolTipRole) {
        const bool sort = role == SortRole;
        switch (index.column()) {
            case Id: return sort ? QVariant(stage) : QVariant(QString::number(stage));
            case Kind: return st.glue() ? tr("glue") : tr("op");
            case Proves: return proves(stage);
            case Ops:
                if (sort) return static_cast<qulonglong>(st.logicalOps.size() + st.parallelOps.size());
                return tr("%1 + %2").arg(st.logicalOps.size()).arg(st.parallelOps.size());
            case Status:
                if (sort) return verified_ ? static_cast<int>(s) : -1;
                return verified_ ? statusText(s) : tr("not verified");
            case Seconds:
                if (sort) return seconds_[stage];
                return isDone(s) && verified_ ? QString::number(seconds_[stage], 'f', 3) : QString();
            case Note: return note_[stage];
        }
    }
    if (role == Qt::DecorationRole && index.column() == Status && verified_) return statusColor(s);
    if (role == Qt::TextAlignmentRole && (index.column() == Id || index.column() == Seconds))
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

QVariant StageBoardModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
        case Id: return tr("Stage");
        case Kind: return tr("Kind");
        case Proves: return tr("Proves");
        case Ops: return tr("Ops (L + P)");
        case Status: return tr("Status");
        case Seconds: return tr("Time (s)");
        case Note: return tr("Note");
    }
    return {};
}

StageFilterModel::StageFilterModel(QObject* parent) : QSortFilterProxyModel(parent) { setSortRole(StageBoardModel::SortRole); }

void StageFilterModel::setStatusFilter(int status) {
    status_ = status;
    invalidateFilter();
}

void StageFilterModel::setTextFilter(const QString& text) {
    text_ = text.trimmed();
    invalidateFilter();
}

bool StageFilterModel::filterAcceptsRow(int row, const QModelIndex& parent) const {
    auto* m = sourceModel();
    if (status_ != -1) {
        const int s = m->index(row, StageBoardModel::Status, parent).data(StageBoardModel::StatusRole).toInt();
        if (status_ == kNotProven) {
            if (s == static_cast<int>(StageStatus::Equivalent) || s == static_cast<int>(StageStatus::Failed) ||
                s == static_cast<int>(StageStatus::Inconclusive))
                return false;
        } else if (s != status_) {
            return false;
        }
    }
    if (text_.isEmpty()) return true;
    for (int c : {StageBoardModel::Id, StageBoardModel::Kind, StageBoardModel::Proves, StageBoardModel::Note})
        if (m->index(row, c, parent).data().toString().contains(text_, Qt::CaseInsensitive)) return true;
    return false;
}

StatusLegend::StatusLegend(QWidget* parent) : QWidget(parent) {
    auto* l = new QHBoxLayout(this);
    l->setContentsMargins(0, 0, 0, 0);
    for (auto [s, label] : {std::pair{StageStatus::Equivalent, tr("proven")}, std::pair{StageStatus::Failed, tr("failed")},
                            std::pair{StageStatus::Inconclusive, tr("inconclusive")}, std::pair{StageStatus::Queued, tr("not yet proven")}}) {
        QPixmap px(12, 12);
        px.fill(statusColor(s));
        auto* swatch = new QLabel(this);
        swatch->setPixmap(px);
        l->addWidget(swatch);
        l->addWidget(new QLabel(label, this));
        l->addSpacing(8);
    }
    l->addStretch(1);
}

StageBoard::StageBoard(QWidget* parent) : QWidget(parent) {
    model_ = new StageBoardModel(this);
    filter_ = new StageFilterModel(this);
    filter_->setSourceModel(model_);
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(4, 4, 4, 4);
    auto* bar = new QHBoxLayout;
    text_ = new QLineEdit(this);
    text_->setPlaceholderText(tr("Filter stages: op, tensor, note"));
    text_->setClearButtonEnabled(true);
    status_ = new QComboBox(this);
    status_->addItem(tr("any status"), -1);
    status_->addItem(tr("failed"), static_cast<int>(StageStatus::Failed));
    status_->addItem(tr("inconclusive"), static_cast<int>(StageStatus::Inconclusive));
    status_->addItem(tr("proven"), static_cast<int>(StageStatus::Equivalent));
    status_->addItem(tr("running"), static_cast<int>(StageStatus::Running));
    status_->addItem(tr("not yet proven"), StageFilterModel::kNotProven);
    bar->addWidget(text_, 1);
    bar->addWidget(status_);
    v->addLayout(bar);
    table_ = new QTableView(this);
    table_->setModel(filter_);
    table_->setSortingEnabled(true);
    table_->sortByColumn(StageBoardModel::Id, Qt::AscendingOrder);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::SingleSelection);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->verticalHeader()->hide();
    table_->verticalHeader()->setDefaultSectionSize(20);
    table_->horizontalHeader()->setStretchLastSection(true);
    table_->setWordWrap(false);
    v->addWidget(table_, 1);
    auto* foot = new QHBoxLayout;
    foot->addWidget(new StatusLegend(this), 1);
    summary_ = new QLabel(this);
    foot->addWidget(summary_);
    v->addLayout(foot);

    connect(text_, &QLineEdit::textChanged, filter_, &StageFilterModel::setTextFilter);
    connect(status_, &QComboBox::currentIndexChanged, this, [this] { filter_->setStatusFilter(status_->currentData().toInt()); });
    connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
        if (selecting_ || removingRows_ || !current.isValid()) return;
        emit stageActivated(currentStage());
    });
    // A filtered row leaving (its stage finished) moves the current row: that is not the user's choice.
    connect(filter_, &QAbstractItemModel::rowsAboutToBeRemoved, this, [this] { removingRows_ = true; });
    connect(filter_, &QAbstractItemModel::rowsRemoved, this, [this] { removingRows_ = false; });
    connect(filter_, &QAbstractItemModel::layoutAboutToBeChanged, this, [this] { removingRows_ = true; });
    connect(filter_, &QAbstractItemModel::layoutChanged, this, [this] { removingRows_ = false; });
    auto updateSummary = [this] {
        if (!model_->verified()) {
            summary_->setText(tr("%n stage(s)", nullptr, model_->rowCount()));
            return;
        }
        summary_->setText(tr("%1 of %2 done: %3 proven, %4 failed, %5 inconclusive")
                              .arg(model_->done())
                              .arg(model_->rowCount())
                              .arg(model_->count(StageStatus::Equivalent))
                              .arg(model_->count(StageStatus::Failed))
                              .arg(model_->count(StageStatus::Inconclusive)));
    };
    connect(model_, &QAbstractItemModel::dataChanged, this, updateSummary);
    connect(model_, &QAbstractItemModel::modelReset, this, updateSummary);
}

void StageBoard::selectStage(std::uint32_t stage) {
    if (stage >= static_cast<std::uint32_t>(model_->rowCount())) return;
    auto src = model_->index(static_cast<int>(stage), 0);
    if (!filter_->mapFromSource(src).isValid()) {
        text_->clear();
        status_->setCurrentIndex(0);
    }
    const auto idx = filter_->mapFromSource(src);
    selecting_ = true;
    table_->selectionModel()->setCurrentIndex(idx, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    table_->scrollTo(idx, QAbstractItemView::PositionAtCenter);
    selecting_ = false;
}

std::uint32_t StageBoard::currentStage() const {
    const auto idx = table_->selectionModel()->currentIndex();
    if (!idx.isValid()) return kNone;
    return static_cast<std::uint32_t>(filter_->mapToSource(idx).row());
}

}  // namespace tv::ui
