#include "failure_panel.hpp"

#include <QApplication>
#include <QClipboard>
#include <QColor>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QTextBrowser>
#include <QTextDocumentFragment>
#include <QVBoxLayout>

#include "verify/report_html.hpp"

namespace tv::ui {

void TensorValuesModel::setValues(const TensorValues* values, const std::vector<std::string>* expected) {
    beginResetModel();
    values_ = values ? *values : TensorValues{};
    expected_ = expected && values && expected->size() == values->values.size() ? *expected : std::vector<std::string>{};
    cols_ = values_.shape.empty() ? 1 : static_cast<int>(std::max<std::int64_t>(1, values_.shape.back()));
    std::int64_t rows = 1;
    for (std::size_t d = 0; d + 1 < values_.shape.size(); ++d) rows *= std::max<std::int64_t>(1, values_.shape[d]);
    rows_ = values ? static_cast<int>(std::min<std::int64_t>(rows, 100000)) : 0;
    if (!values) cols_ = 0;
    endResetModel();
}

int TensorValuesModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : rows_; }
int TensorValuesModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : cols_; }

bool TensorValuesModel::wrong(std::size_t k) const { return k < expected_.size() && expected_[k] != values_.values[k]; }

int TensorValuesModel::wrongCells() const {
    int n = 0;
    for (std::size_t k = 0; k < expected_.size(); ++k) n += wrong(k);
    return n;
}

QVariant TensorValuesModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid()) return {};
    const auto k = static_cast<std::size_t>(index.row()) * static_cast<std::size_t>(cols_) + static_cast<std::size_t>(index.column());
    const bool kept = k < values_.values.size();  // values beyond the first 256 of a tensor are not kept
    switch (role) {
        case Qt::DisplayRole:
            if (!kept) return QStringLiteral("…");
            // A lineage check: the wrong cells show what they hold and what they should.
            return wrong(k) ? QStringLiteral("%1 ≠ %2").arg(QString::fromStdString(values_.values[k]), QString::fromStdString(expected_[k]))
                            : QString::fromStdString(values_.values[k]);
        case Qt::ToolTipRole:
            if (!kept) return QStringLiteral("…");
            if (k < expected_.size())
                return tr("expected %1 (logical) — actual %2 (parallel%3)%4")
                    .arg(QString::fromStdString(expected_[k]), QString::fromStdString(values_.values[k]),
                         values_.rank >= 0 ? tr(", rank %1").arg(values_.rank) : QString(), wrong(k) ? tr(": wrong") : QString());
            return QString::fromStdString(values_.values[k]);
        case Qt::BackgroundRole:
            if (wrong(k)) return QColor(253, 200, 200);
            return {};
        case Qt::ForegroundRole:
            if (wrong(k)) return QColor(120, 0, 0);
            return {};
        default:
            return {};
    }
}

QVariant TensorValuesModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (role != Qt::DisplayRole) return {};
    if (orientation == Qt::Horizontal) return section;
    // Rows are the leading dimensions, unravelled.
    QStringList idx;
    std::int64_t rest = section;
    for (std::size_t d = values_.shape.size() >= 1 ? values_.shape.size() - 1 : 0; d-- > 0;) {
        const auto ext = std::max<std::int64_t>(1, values_.shape[d]);
        idx.prepend(QString::number(rest % ext));
        rest /= ext;
    }
    return idx.isEmpty() ? QString::number(section) : idx.join(QLatin1Char(','));
}

FailurePanel::FailurePanel(QWidget* parent) : QWidget(parent) {
    auto* v = new QVBoxLayout(this);
    v->setContentsMargins(4, 4, 4, 4);
    headline_ = new QLabel(this);
    headline_->setWordWrap(true);
    headline_->setTextFormat(Qt::RichText);
    v->addWidget(headline_);
    // The diagnosis beside the stepper: the panel is a wide band under the graph, so it takes
    // the width, not the graph's height.
    auto* split = new QSplitter(Qt::Horizontal, this);
    body_ = new QTextBrowser(split);
    body_->setOpenLinks(false);

    stepper_ = new QWidget(split);
    auto* sv = new QVBoxLayout(stepper_);
    sv->setContentsMargins(0, 4, 0, 0);
    auto* buttons = new QHBoxLayout;
    first_ = new QPushButton(tr("First"), stepper_);
    previous_ = new QPushButton(tr("◀ Previous"), stepper_);
    next_ = new QPushButton(tr("Next ▶"), stepper_);
    divergence_ = new QPushButton(tr("Go to Divergence"), stepper_);
    first_->setToolTip(tr("The stage's first op"));
    previous_->setToolTip(tr("The op before (Shift+F10)"));
    next_->setToolTip(tr("The next op in topological order (F10), past the first divergence too"));
    divergence_->setToolTip(tr("The first op whose output breaks its lineage (F9)"));
    for (auto* b : {first_, previous_, next_, divergence_}) buttons->addWidget(b);
    buttons->addStretch(1);
    sv->addLayout(buttons);
    stepLabel_ = new QLabel(stepper_);
    stepLabel_->setWordWrap(true);
    stepLabel_->setTextFormat(Qt::RichText);
    stepLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    checks_ = new QLabel(stepper_);
    checks_->setWordWrap(true);
    checks_->setTextFormat(Qt::RichText);
    checks_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    sv->addWidget(stepLabel_);
    sv->addWidget(checks_);
    auto* tensorRow = new QHBoxLayout;
    tensor_ = new QComboBox(stepper_);
    tensor_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    auto* copyText = new QPushButton(tr("Copy as Text"), stepper_);
    auto* copyJson = new QPushButton(tr("Copy as JSON"), stepper_);
    tensorRow->addWidget(new QLabel(tr("Tensor:"), stepper_));
    tensorRow->addWidget(tensor_, 1);
    tensorRow->addWidget(copyText);
    tensorRow->addWidget(copyJson);
    sv->addLayout(tensorRow);
    valuesModel_ = new TensorValuesModel(this);
    table_ = new QTableView(stepper_);
    table_->setModel(valuesModel_);
    table_->horizontalHeader()->setDefaultSectionSize(64);
    table_->verticalHeader()->setDefaultSectionSize(20);
    table_->setMinimumHeight(60);  // larger tensors scroll
    sv->addWidget(table_, 1);
    split->addWidget(body_);
    split->addWidget(stepper_);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 3);
    split->setSizes({400, 600});
    v->addWidget(split, 1);

    connect(first_, &QPushButton::clicked, this, &FailurePanel::first);
    connect(previous_, &QPushButton::clicked, this, &FailurePanel::previous);
    connect(next_, &QPushButton::clicked, this, &FailurePanel::next);
    connect(divergence_, &QPushButton::clicked, this, &FailurePanel::goToDivergence);
    connect(tensor_, &QComboBox::currentIndexChanged, this, [this](int i) { chooseTensor(i); });
    connect(copyText, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(this->copyText()); });
    connect(copyJson, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(this->copyJson()); });
    clear();
}

void FailurePanel::showPlaceholder(const QString& headline) {
    headline_->setText(headline);
    body_->clear();
    trace_.reset();
    step_ = -1;
    showStep();
}

void FailurePanel::clear() { showPlaceholder(tr("<b>Not verified.</b> Press F5 (Verify ▸ Verify) to check the plan stage by stage.")); }

void FailurePanel::showRunning() {
    showPlaceholder(tr("<b>Verifying…</b> Stages turn green as they are proven; the first failure will be shown here."));
}

QString verdictLineHtml(const VerifyReport& r) {
    const char* colour = r.verdict == Verdict::Equivalent      ? "#2e7d32"
                         : r.verdict == Verdict::NotEquivalent ? "#c62828"
                         : r.verdict == Verdict::Inconclusive  ? "#ef6c00"
                                                               : "#6a1b9a";
    const std::string summary = reportToText(r);
    const QString first = QString::fromStdString(summary.substr(0, summary.find('\n')));
    return QStringLiteral("<span style=\"color:%1; font-weight:600\">%2</span>").arg(QLatin1String(colour), first.toHtmlEscaped());
}

void FailurePanel::showReport(const VerifyReport& r, const QString& where) {
    headline_->setText(verdictLineHtml(r));
    QString html;
    if (r.failure) {
        // The trace has its own view below; the page's copy of it would repeat it.
        Failure f = *r.failure;
        f.trace.reset();
        html += QString::fromStdString(failureToHtml(f, "Diagnosis"));
        if (!r.confirmation.empty()) html += QStringLiteral("<p>%1</p>").arg(QString::fromStdString(r.confirmation).toHtmlEscaped());
        if (!where.isEmpty()) html += QStringLiteral("<p><i>%1</i></p>").arg(where.toHtmlEscaped());
        if (r.failures.size() > 1)
            html += tr("<p>%n more failure(s) in later stages: filter the stage board by “failed”.</p>", nullptr,
                       static_cast<int>(r.failures.size() - 1));
    } else if (r.verdict == Verdict::Equivalent) {
        html = tr("<p>Every stage is proven: the parallel plan computes exactly what the logical plan computes, "
                  "for all inputs. %1 of %2 stages were solved; the others reuse an isomorphic proof%3.</p>")
                   .arg(r.uniqueStages)
                   .arg(r.results.size())
                   .arg(r.cachedStages ? tr(" or one from an earlier run (%1)").arg(r.cachedStages) : QString());
    }
    for (const auto& f : r.findings) html += QStringLiteral("<p><b>%1</b> %2</p>").arg(tr("Finding:"), QString::fromStdString(f).toHtmlEscaped());
    for (const auto& w : r.warnings) html += QStringLiteral("<p><b>%1</b> %2</p>").arg(tr("Warning:"), QString::fromStdString(w).toHtmlEscaped());
    body_->setHtml(html);
    trace_ = r.failure ? r.failure->trace : nullptr;
    step_ = -1;
    // Opened at the divergence without announcing it: the window has already taken the user to
    // the failing op, and a second trip there would fold back what the first one unfolded.
    if (trace_ && !trace_->parallel.empty()) setStep(trace_->divergence >= 0 ? trace_->divergence : 0, /*announce=*/false);
    else showStep();
}

QString FailurePanel::headline() const { return QTextDocumentFragment::fromHtml(headline_->text()).toPlainText(); }

QString FailurePanel::text() const { return headline() + QStringLiteral("\n") + body_->toPlainText(); }

bool FailurePanel::canNext() const { return trace_ && step_ + 1 < static_cast<int>(trace_->parallel.size()); }

void FailurePanel::setStep(int step, bool announce) {
    if (!trace_ || trace_->parallel.empty()) return;
    step_ = std::clamp(step, 0, static_cast<int>(trace_->parallel.size()) - 1);
    showStep();
    if (!announce) return;
    const auto& s = trace_->parallel[static_cast<std::size_t>(step_)];
    emit stepChanged(QString::fromStdString(s.op),
                     s.logical >= 0 ? QString::fromStdString(trace_->logical[static_cast<std::size_t>(s.logical)].op) : QString());
}

void FailurePanel::next() {
    if (canNext()) setStep(step_ + 1);
}

void FailurePanel::previous() {
    if (canPrevious()) setStep(step_ - 1);
}

void FailurePanel::goToDivergence() {
    if (trace_ && trace_->divergence >= 0) setStep(trace_->divergence);
}

void FailurePanel::showStep() {
    const bool has = trace_ && step_ >= 0 && step_ < static_cast<int>(trace_->parallel.size());
    stepper_->setVisible(trace_ != nullptr);
    first_->setEnabled(canPrevious());
    previous_->setEnabled(canPrevious());
    next_->setEnabled(canNext());
    divergence_->setEnabled(trace_ && trace_->divergence >= 0);
    choices_.clear();
    choiceExpected_.clear();
    const QSignalBlocker block(tensor_);
    tensor_->clear();
    if (!has) {
        stepLabel_->clear();
        checks_->clear();
        valuesModel_->setValues(nullptr);
        return;
    }
    const auto& s = trace_->parallel[static_cast<std::size_t>(step_)];
    const TraceStep* l = s.logical >= 0 ? &trace_->logical[static_cast<std::size_t>(s.logical)] : nullptr;
    QString where = tr("rank %1").arg(s.rank);
    if (!s.group.empty()) {
        QStringList ranks;
        for (auto r : s.group) ranks << QString::number(r);
        where = step_ == trace_->divergence ? tr("ranks %1 — the wrong value lands on rank %2").arg(ranks.join(QStringLiteral(", "))).arg(s.rank)
                                            : tr("ranks %1").arg(ranks.join(QStringLiteral(", ")));
    }
    if (s.microbatch >= 0) where += tr(", microbatch %1").arg(s.microbatch);
    QString label = tr("<b>Step %1 of %2:</b> <code>%3</code> (%4) on %5")
                        .arg(step_ + 1)
                        .arg(trace_->parallel.size())
                        .arg(QString::fromStdString(s.op).toHtmlEscaped(), QString::fromStdString(s.kind).toHtmlEscaped(), where);
    label += l ? tr(" — beside logical <code>%1</code> (%2)").arg(QString::fromStdString(l->op).toHtmlEscaped(), QString::fromStdString(l->kind).toHtmlEscaped())
               : tr(" — a glue stage: no logical op, only data movement");
    if (step_ == trace_->divergence) label += tr(" <span style=\"color:#c62828; font-weight:600\">← first divergence</span>");
    else if (trace_->divergence >= 0 && step_ > trace_->divergence) label += tr(" <i>(past the first divergence: values here inherit its error)</i>");
    if (step_ == trace_->misaligned) label += tr(" <span style=\"color:#8e24aa; font-weight:600\">reads another microbatch</span>");
    if (trace_->uninterpreted) label += tr("<br><i>exp, log and other uninterpreted functions take values the solver chose.</i>");
    stepLabel_->setText(label);
    QString checks;
    for (const auto& c : s.checks) {
        checks += c.holds ? tr("<span style=\"color:#2e7d32\">✓ holds:</span> <code>%1</code><br>").arg(QString::fromStdString(c.relation).toHtmlEscaped())
                          : tr("<span style=\"color:#c62828\">✗ fails:</span> <code>%1</code> at %2: expected %3, actual %4<br>")
                                .arg(QString::fromStdString(c.relation).toHtmlEscaped(), QString::fromStdString(c.element).toHtmlEscaped(),
                                     QString::fromStdString(c.expected).toHtmlEscaped(), QString::fromStdString(c.actual).toHtmlEscaped());
    }
    if (checks.isEmpty()) checks = tr("<span style=\"color:#777\">No lineage claim is complete at this op: its values feed later ops.</span>");
    checks_->setText(checks);
    auto add = [&](const TensorValues& t, const QString& role) {
        choices_.push_back(&t);
        choiceExpected_.push_back(nullptr);
        tensor_->addItem(tr("%1 %2 %3").arg(role, QString::fromStdString(t.name), QString::fromStdString(shapeToString(t.shape))));
    };
    // A broken lineage copy first: expected (logical) beside actual (parallel), wrong cells marked.
    checkTables_.clear();
    checkTables_.reserve(s.checks.size());
    for (const auto& c : s.checks) {
        if (c.holds || c.expectedValues.empty()) continue;
        TensorValues t;
        t.name = c.relation;
        t.shape = c.shape;
        t.fullShape = c.shape;
        t.rank = s.rank;
        t.microbatch = s.microbatch;
        t.values = c.actualValues;
        checkTables_.push_back(std::move(t));
        choices_.push_back(&checkTables_.back());
        choiceExpected_.push_back(&c.expectedValues);
        tensor_->addItem(tr("check %1: expected beside actual").arg(QString::fromStdString(c.relation)));
    }
    for (const auto& t : s.outputs) add(t, tr("parallel out"));
    if (l)
        for (const auto& t : l->outputs) add(t, tr("logical out"));
    for (const auto& t : s.inputs) add(t, tr("parallel in"));
    if (l)
        for (const auto& t : l->inputs) add(t, tr("logical in"));
    tensor_->setCurrentIndex(choices_.empty() ? -1 : 0);
    valuesModel_->setValues(choices_.empty() ? nullptr : choices_.front(), choices_.empty() ? nullptr : choiceExpected_.front());
    table_->resizeColumnsToContents();
}

QStringList FailurePanel::tensorChoices() const {
    QStringList out;
    for (int i = 0; i < tensor_->count(); ++i) out << tensor_->itemText(i);
    return out;
}

void FailurePanel::chooseTensor(int index) {
    if (index < 0 || index >= static_cast<int>(choices_.size())) return;
    if (tensor_->currentIndex() != index) {
        const QSignalBlocker block(tensor_);
        tensor_->setCurrentIndex(index);
    }
    valuesModel_->setValues(choices_[static_cast<std::size_t>(index)], choiceExpected_[static_cast<std::size_t>(index)]);
    table_->resizeColumnsToContents();
}

const TensorValues* FailurePanel::chosen() const {
    const int i = tensor_->currentIndex();
    return i >= 0 && i < static_cast<int>(choices_.size()) ? choices_[static_cast<std::size_t>(i)] : nullptr;
}

QString FailurePanel::stepText() const {
    return QTextDocumentFragment::fromHtml(stepLabel_->text()).toPlainText() + QStringLiteral("\n") +
           QTextDocumentFragment::fromHtml(checks_->text()).toPlainText();
}

QString FailurePanel::copyText() const {
    const auto* t = chosen();
    return t ? QString::fromStdString(t->toText()) : QString();
}

QString FailurePanel::copyJson() const {
    const auto* t = chosen();
    return t ? QString::fromStdString(t->toJson().dump(2)) : QString();
}

}  // namespace tv::ui
