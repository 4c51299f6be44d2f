#include "generate_dialog.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include "generate/models.hpp"

namespace tv::ui {

GenerateDialog::GenerateDialog(QWidget* parent) : QDialog(parent) {
    setWindowTitle(tr("Generate a Training Plan"));
    auto* v = new QVBoxLayout(this);
    v->addWidget(new QLabel(tr("A whole training step (forward, backward, optimizer) of a model from the zoo, parallelized as "
                               "chosen, with its lineage. It is saved in the cache directory (so Reload and Open Recent find it) and opens."),
                            this));
    auto* form = new QFormLayout;
    model_ = new QComboBox(this);
    for (const auto& p : gen::presetNames()) model_->addItem(QString::fromStdString(p));
    layers_ = new QSpinBox(this);
    layers_->setRange(0, 256);
    layers_->setSpecialValueText(tr("the preset's"));
    auto degree = [this](int max) {
        auto* s = new QSpinBox(this);
        s->setRange(1, max);
        return s;
    };
    dp_ = degree(1024);
    tp_ = degree(64);
    pp_ = degree(128);
    microbatches_ = degree(256);
    ep_ = degree(64);
    cp_ = degree(64);
    zero_ = new QComboBox(this);
    zero_->addItem(tr("none"), 0);
    zero_->addItem(tr("ZeRO-1 (optimizer state)"), 1);
    zero_->addItem(tr("ZeRO-2 (+ gradients)"), 2);
    zero_->addItem(tr("ZeRO-3 (+ weights)"), 3);
    sp_ = new QCheckBox(tr("sequence parallelism (with tensor parallelism)"), this);
    schedule_ = new QComboBox(this);
    schedule_->addItems({QStringLiteral("1f1b"), QStringLiteral("gpipe")});
    optimizer_ = new QComboBox(this);
    optimizer_->addItems({QStringLiteral("adamw"), QStringLiteral("sgd")});
    format_ = new QComboBox(this);
    format_->addItem(tr("3: replicas, microbatches and repeated layers stored once"), 3);
    format_->addItem(tr("2: replicas and microbatches stored once"), 2);
    format_->addItem(tr("1: everything written out"), 1);
    form->addRow(tr("Model:"), model_);
    form->addRow(tr("Layers:"), layers_);
    form->addRow(tr("Data parallel (dp):"), dp_);
    form->addRow(tr("Tensor parallel (tp):"), tp_);
    form->addRow(tr("Pipeline parallel (pp):"), pp_);
    form->addRow(tr("Microbatches:"), microbatches_);
    form->addRow(tr("Expert parallel (ep):"), ep_);
    form->addRow(tr("Context parallel (cp):"), cp_);
    form->addRow(tr("Sharded optimizer:"), zero_);
    form->addRow(QString(), sp_);
    form->addRow(tr("Pipeline schedule:"), schedule_);
    form->addRow(tr("Optimizer:"), optimizer_);
    form->addRow(tr("Plan format:"), format_);
    v->addLayout(form);
    status_ = new QLabel(this);
    status_->setWordWrap(true);
    v->addWidget(status_);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
    ok_ = buttons->addButton(tr("Generate and Open"), QDialogButtonBox::AcceptRole);
    v->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    for (auto* c : {model_, zero_, schedule_, optimizer_, format_}) connect(c, &QComboBox::currentIndexChanged, this, &GenerateDialog::check);
    for (auto* s : {layers_, dp_, tp_, pp_, microbatches_, ep_, cp_}) connect(s, &QSpinBox::valueChanged, this, &GenerateDialog::check);
    connect(sp_, &QCheckBox::toggled, this, &GenerateDialog::check);
    // A small default that opens and verifies in a second: 2 layers of Llama 3, dp2 tp2 pp2.
    gen::GenerateOptions d;
    d.model = "llama3";
    d.layers = 2;
    d.dp = d.tp = d.pp = d.microbatches = 2;
    setOptions(d);
}

gen::GenerateOptions GenerateDialog::options() const {
    gen::GenerateOptions o;
    o.model = model_->currentText().toStdString();
    if (layers_->value() > 0) o.layers = layers_->value();
    o.dp = dp_->value();
    o.tp = tp_->value();
    o.pp = pp_->value();
    o.microbatches = microbatches_->value();
    o.ep = ep_->value();
    o.cp = cp_->value();
    o.zero = zero_->currentData().toInt();
    o.sequenceParallel = sp_->isChecked();
    o.schedule = schedule_->currentText().toStdString();
    o.optimizer = optimizer_->currentText().toStdString();
    o.format = format_->currentData().toInt();
    return o;
}

void GenerateDialog::setOptions(const gen::GenerateOptions& o) {
    model_->setCurrentIndex(std::max(0, model_->findText(QString::fromStdString(o.model))));
    layers_->setValue(o.layers ? static_cast<int>(*o.layers) : 0);
    dp_->setValue(o.dp);
    tp_->setValue(o.tp);
    pp_->setValue(o.pp);
    microbatches_->setValue(o.microbatches);
    ep_->setValue(o.ep);
    cp_->setValue(o.cp);
    zero_->setCurrentIndex(std::max(0, zero_->findData(o.zero)));
    sp_->setChecked(o.sequenceParallel);
    schedule_->setCurrentIndex(std::max(0, schedule_->findText(QString::fromStdString(o.schedule))));
    optimizer_->setCurrentIndex(std::max(0, optimizer_->findText(QString::fromStdString(o.optimizer))));
    format_->setCurrentIndex(std::max(0, format_->findData(o.format)));
    check();
}

void GenerateDialog::check() {
    const auto o = options();
    const auto problem = gen::validate(o);
    problem_ = problem ? QString::fromStdString(problem->message) : QString();
    ok_->setEnabled(problem_.isEmpty());
    if (!problem_.isEmpty()) {
        status_->setText(QStringLiteral("<span style=\"color:#c62828\">%1</span>").arg(problem_.toHtmlEscaped()));
        return;
    }
    const int ranks = o.dp * o.tp * o.pp * o.cp;
    status_->setText(tr("%n rank(s).", nullptr, ranks));
}

}  // namespace tv::ui
