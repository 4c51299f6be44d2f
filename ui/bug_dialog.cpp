#include "bug_dialog.hpp"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "model/instance_names.hpp"

namespace tv::ui {

BugDialog::BugDialog(std::shared_ptr<const Plan> plan, QWidget* parent) : QDialog(parent), plan_(std::move(plan)) {
    setWindowTitle(tr("Inject a Bug"));
    auto* v = new QVBoxLayout(this);
    v->addWidget(new QLabel(tr("Parallelization bugs that happen in real training systems. Choose one: it is injected into a copy "
                               "of the open plan, which is then verified. The verifier should catch it where it was made."),
                            this));
    auto* h = new QHBoxLayout;
    tree_ = new QTreeWidget(this);
    tree_->setHeaderLabels({tr("Bug"), tr("Paper case")});
    tree_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    std::map<int, QTreeWidgetItem*> groups;
    for (const auto& b : bugs::catalog()) {
        auto& group = groups[static_cast<int>(b.category)];
        if (!group) {
            group = new QTreeWidgetItem(tree_, {QString::fromLatin1(bugs::toString(b.category).data())});
            group->setFlags(Qt::ItemIsEnabled);
            group->setExpanded(true);
        }
        auto* item = new QTreeWidgetItem(group, {QString::fromLatin1(b.name.data(), static_cast<int>(b.name.size())),
                                                 b.paperCase ? QString::number(b.paperCase) : QString()});
        item->setData(0, Qt::UserRole, QString::fromLatin1(b.name.data(), static_cast<int>(b.name.size())));
    }
    h->addWidget(tree_, 3);
    auto* right = new QVBoxLayout;
    about_ = new QLabel(this);
    about_->setWordWrap(true);
    about_->setTextFormat(Qt::RichText);
    about_->setMinimumWidth(280);
    right->addWidget(about_);
    auto* form = new QFormLayout;
    site_ = new QComboBox(this);
    site_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    site_->setMinimumContentsLength(28);
    rank_ = new QComboBox(this);
    form->addRow(tr("Where (op):"), site_);
    form->addRow(tr("Rank:"), rank_);
    right->addLayout(form);
    status_ = new QLabel(this);
    status_->setWordWrap(true);
    right->addWidget(status_);
    right->addStretch(1);
    h->addLayout(right, 2);
    v->addLayout(h, 1);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
    ok_ = buttons->addButton(tr("Inject and Verify"), QDialogButtonBox::AcceptRole);
    ok_->setEnabled(false);
    v->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(tree_, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) {
        if (item && !item->data(0, Qt::UserRole).toString().isEmpty()) selectBug(item->data(0, Qt::UserRole).toString());
    });
    connect(site_, &QComboBox::currentIndexChanged, this, &BugDialog::fillRanks);
    resize(900, 560);
}

// A search still running keeps the plan alive itself; the scan of Inject Bug Here stops at its next bug.
BugDialog::~BugDialog() { stopBugsAt_->store(true); }

void BugDialog::selectBug(const QString& name) {
    const auto* b = bugs::findBug(name.toStdString());
    if (!b) return;
    bug_ = name;
    ready_ = false;
    ok_->setEnabled(false);
    site_->clear();
    rank_->clear();
    sites_.clear();
    about_->setText(QStringLiteral("<b>%1</b>%2<p>%3</p><p><i>%4</i></p>")
                        .arg(name.toHtmlEscaped(), b->paperCase ? tr(" (TrainVerify paper, case %1)").arg(b->paperCase) : QString(),
                             QString::fromLatin1(b->summary.data(), static_cast<int>(b->summary.size())).toHtmlEscaped(),
                             tr("Needs: %1").arg(QString::fromLatin1(b->needs.data(), static_cast<int>(b->needs.size())).toHtmlEscaped())));
    status_->setText(tr("Finding where it applies in this plan…"));
    for (int i = 0; i < tree_->topLevelItemCount(); ++i)
        for (int j = 0; j < tree_->topLevelItem(i)->childCount(); ++j)
            if (tree_->topLevelItem(i)->child(j)->data(0, Qt::UserRole).toString() == name && tree_->currentItem() != tree_->topLevelItem(i)->child(j)) {
                const QSignalBlocker block(tree_);
                tree_->setCurrentItem(tree_->topLevelItem(i)->child(j));
            }
    siteSearch_.start(
        [plan = plan_, bug = name.toStdString()]() -> SitesResult {
            try {
                auto found = bugs::findSites(*plan, bug);
                return {std::move(found.sites), found.refused ? QString::fromStdString(found.refused->message) : QString()};
            } catch (const std::exception& e) {
                return {{}, QString::fromUtf8(e.what())};  // out of memory: said, never a crash
            }
        },
        [this](quint64, SitesResult result) { onSites(std::move(result)); });
}

void BugDialog::onSites(SitesResult result) {
    auto [sites, error] = std::move(result);
    ready_ = true;
    sites_ = std::move(sites);
    const QSignalBlocker block(site_);
    site_->clear();
    for (const auto& s : sites_)
        site_->addItem(QString::fromStdString(s.ops.empty() ? std::string("?") : s.ops.front()), QString::fromStdString(s.detail));
    for (int i = 0; i < site_->count(); ++i) site_->setItemData(i, site_->itemData(i), Qt::ToolTipRole);
    // Inject Bug Here: the site at the op asked for, when this bug has one: the copy itself if it
    // is a site of its own, else its stored op (with the clicked copy's replica chosen below).
    bool preferredSite = false;
    if (!preferredOp_.isEmpty()) {
        for (int pass = 0; pass < 2 && !preferredSite; ++pass)
            for (std::size_t i = 0; i < sites_.size() && !preferredSite; ++i) {
                const auto& ops = sites_[i].ops;
                if (std::find(ops.begin(), ops.end(), (pass == 0 ? preferredOp_ : preferredStored_).toStdString()) != ops.end()) {
                    site_->setCurrentIndex(static_cast<int>(i));
                    preferredSite = true;
                }
            }
    }
    if (!error.isEmpty()) status_->setText(tr("<span style=\"color:#c62828\">Does not apply here: %1</span>").arg(error.toHtmlEscaped()));
    else if (sites_.empty()) status_->setText(tr("<span style=\"color:#c62828\">No place in this plan to inject it.</span>"));
    else status_->setText(tr("%n place(s) in this plan.", nullptr, static_cast<int>(sites_.size())));
    ok_->setEnabled(error.isEmpty() && !sites_.empty());
    fillRanks();
    if (preferredSite && preferredReplica_ > 0 && preferredReplica_ < rank_->count()) rank_->setCurrentIndex(preferredReplica_);
    emit sitesFound();
}

void BugDialog::fillRanks() {
    rank_->clear();
    const int i = site_->currentIndex();
    if (i < 0 || i >= static_cast<int>(sites_.size())) return;
    const auto& site = sites_[static_cast<std::size_t>(i)];
    if (site.ranks.empty()) {
        rank_->addItem(tr("where the op runs"), -1);
        rank_->setEnabled(false);
        return;
    }
    // A plan stored with its data-parallel replicas lists replica 0's ops; every replica k runs
    // the same op on rank r + k * ranksPerReplica, and the bug can be injected into any one copy.
    const auto& rep = plan_->replication;
    const int copies = !site.writtenOut && rep.degree > 1 && rep.ranksPerReplica > 0 ? rep.degree : 1;
    for (int k = 0; k < copies; ++k) {
        QStringList ranks;
        for (auto r : site.ranks) ranks << QString::number(r + k * rep.ranksPerReplica);
        const int first = site.ranks.front() + k * rep.ranksPerReplica;
        // A collective's or a peer set's edit changes every rank of it at once.
        const QString text = site.ranks.size() == 1 ? tr("rank %1").arg(ranks.front())
                                                    : tr("ranks %1 (the edit changes the whole group)").arg(ranks.join(QStringLiteral(", ")));
        rank_->addItem(k > 0 ? text + tr(", replica %1").arg(k) : text, first);
    }
    rank_->setEnabled(rank_->count() > 1);
}

bugs::MutateOptions BugDialog::options() const {
    bugs::MutateOptions o;
    const int i = site_->currentIndex();
    if (i >= 0 && i < static_cast<int>(sites_.size()) && !sites_[static_cast<std::size_t>(i)].ops.empty()) o.at = sites_[static_cast<std::size_t>(i)].ops.front();
    o.rank = rank_->currentIndex() >= 0 ? rank_->currentData().toInt() : -1;
    return o;
}

void BugDialog::preferAt(const QString& op) {
    preferredOp_ = op;
    preferredStored_ = QString::fromStdString(instance::withoutReplicaMarks(op.toStdString()));
    // "x~mb1~dp2": a copy in replica 2.
    preferredReplica_ = 0;
    if (const auto at = op.lastIndexOf(QStringLiteral("~dp")); at >= 0) preferredReplica_ = op.mid(at + 3).toInt();
    setWindowTitle(tr("Inject a Bug at %1").arg(preferredOp_));
    status_->setText(tr("Finding the bugs that can be injected at %1…").arg(preferredOp_));
    bugsAtSearch_.start(
        [plan = plan_, full = preferredOp_.toStdString(), stored = preferredStored_.toStdString(), stop = stopBugsAt_]() -> QStringList {
            QStringList out;
            for (const auto& b : bugs::catalog()) {
                if (stop->load()) break;  // the dialog is gone
                try {
                    const auto found = bugs::findSites(*plan, b.name);
                    for (const auto& s : found.sites)
                        if (std::find(s.ops.begin(), s.ops.end(), full) != s.ops.end() || std::find(s.ops.begin(), s.ops.end(), stored) != s.ops.end()) {
                            out << QString::fromLatin1(b.name.data(), static_cast<int>(b.name.size()));
                            break;
                        }
                } catch (const std::exception&) {
                    // A bug that cannot be looked for here (out of memory writing out): not offered.
                }
            }
            return out;
        },
        [this](quint64, QStringList found) {
            bugsAt_ = found;
            QTreeWidgetItem* first = nullptr;
            for (int i = 0; i < tree_->topLevelItemCount(); ++i)
                for (int j = 0; j < tree_->topLevelItem(i)->childCount(); ++j) {
                    auto* item = tree_->topLevelItem(i)->child(j);
                    const bool here = found.contains(item->data(0, Qt::UserRole).toString());
                    QFont f = item->font(0);
                    f.setBold(here);
                    item->setFont(0, f);
                    item->setToolTip(0, here ? tr("Can be injected at %1").arg(preferredOp_) : tr("No site at %1").arg(preferredOp_));
                    if (here && !first) first = item;
                }
            if (first && bug_.isEmpty()) {
                tree_->setCurrentItem(first);  // selects it, and its site at the op once found (unless the user chose one meanwhile)
            } else {
                status_->setText(tr("<span style=\"color:#c62828\">No bug of the catalog has a site at %1; choose one to inject elsewhere.</span>")
                                     .arg(preferredOp_.toHtmlEscaped()));
            }
            emit bugsAtFound();
        });
}

QString BugDialog::status() const { return status_->text(); }

QStringList BugDialog::rankChoices() const {
    QStringList out;
    for (int i = 0; i < rank_->count(); ++i) out << rank_->itemText(i);
    return out;
}

bool BugDialog::rankChoosable() const { return rank_->isEnabled(); }

void BugDialog::chooseRank(int index) { rank_->setCurrentIndex(index); }

QStringList BugDialog::siteChoices() const {
    QStringList out;
    for (int i = 0; i < site_->count(); ++i) out << site_->itemText(i);
    return out;
}

void BugDialog::chooseSite(int index) { site_->setCurrentIndex(index); }

}  // namespace tv::ui
