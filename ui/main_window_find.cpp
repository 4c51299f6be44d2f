// Find and filters: MainWindow's Find dock and filter bar, and the slots that narrow what is shown
// (select a match, expanding what folds it; dim what the filters exclude). The filter bar's
// widgets are a class of their own (filter_bar.hpp); this is the window's side of them.
#include "main_window.hpp"

#include <QDockWidget>
#include <QLineEdit>
#include <QListView>
#include <QStatusBar>
#include <QVBoxLayout>

#include "filter_bar.hpp"
#include "dual_view.hpp"
#include "graph_view.hpp"

namespace tv::ui {

void MainWindow::buildFindDock() {
    auto* findPanel = new QWidget(this);
    auto* fl = new QVBoxLayout(findPanel);
    fl->setContentsMargins(4, 4, 4, 4);
    findEdit_ = new QLineEdit(findPanel);
    findEdit_->setPlaceholderText(tr("Find op or tensor (Ctrl+F)"));
    findEdit_->setClearButtonEnabled(true);
    findList_ = new QListView(findPanel);
    findModel_ = new FindResultsModel(this);
    findList_->setModel(findModel_);
    fl->addWidget(findEdit_);
    fl->addWidget(findList_);
    auto* findDock = new QDockWidget(tr("Find"), this);
    findDock->setObjectName(QStringLiteral("find"));
    findDock->setWidget(findPanel);
    addDockWidget(Qt::LeftDockWidgetArea, findDock);
    // Find shares the left column with the overview, as a tab (Ctrl+F raises it).
    if (auto* overview = findChild<QDockWidget*>(QStringLiteral("overview"))) {
        tabifyDockWidget(overview, findDock);
        overview->raise();
    }
    connect(findEdit_, &QLineEdit::textChanged, this, &MainWindow::find);
    // A click shows a match (or the collapsed rank or layer holding it); activating it (Enter,
    // double-click) also expands what holds it.
    connect(findList_, &QListView::activated, this, [this](const QModelIndex& i) { activateFindResult(i.row(), true); });
    connect(findList_, &QListView::clicked, this, [this](const QModelIndex& i) { activateFindResult(i.row(), false); });
}

void MainWindow::buildFilterBar() {
    filterBar_ = new FilterBar(this);
    addToolBar(filterBar_);  // on the main toolbar's row: the graph keeps the height
    connect(filterBar_, &FilterBar::filterChanged, this, &MainWindow::filterBarChanged);
}

void MainWindow::filterBarChanged(const ViewFilter& f) {
    const int shown = scene_->setFilter(f);
    if (scene_->loaded())
        statusBar()->showMessage(f.empty() ? tr("Filters cleared") : tr("%1 of %2 nodes match the filters").arg(shown).arg(scene_->nodeItemCount()), 5000);
}

int MainWindow::applyFilter(const ViewFilter& f) {
    filterBar_->setFilter(f);
    const int shown = scene_->setFilter(f);
    statusBar()->showMessage(f.empty() ? tr("Filters cleared") : tr("%1 of %2 nodes match the filters").arg(shown).arg(scene_->nodeItemCount()), 5000);
    return shown;
}

void MainWindow::find(const QString& query) {
    if (findEdit_->text() != query) findEdit_->setText(query);
    findModel_->setQuery(query);
    statusBar()->showMessage(tr("%n match(es)", nullptr, findModel_->rowCount()), 3000);
}

void MainWindow::activateFindResult(int row, bool expand) {
    const auto* hit = findModel_->hitAt(row);
    if (!hit) return;
    if (expand && findModel_->folded(row)) {
        revealSteps_ = 0;
        reveal(*hit);
        return;
    }
    if (findModel_->folded(row)) statusBar()->showMessage(tr("Folded into %1: press Enter or double-click the match to expand it.")
                                                              .arg(QString::fromStdString(scene_->loaded()->view.nodes[hit->node].name)),
                                                          5000);
    scene_->selectNode(hit->node);
    dual_->frame(lineageFrame(hit->node));
}

void MainWindow::reveal(const FindHit& hit) {
    const auto* l = scene_->loaded();
    pendingReveal_.reset();
    if (!l) return;
    const int node = nodeShowing(l->view, hit);
    if (node < 0) return;
    const auto& n = l->view.nodes[node];
    // A rank holds layers, so revealing can take two expansions; never more than a few.
    if ((n.kind == ViewNodeKind::CollapsedRank || n.kind == ViewNodeKind::CollapsedLayer) && revealSteps_ < 4) {
        ++revealSteps_;
        pendingReveal_ = hit;
        if (n.kind == ViewNodeKind::CollapsedRank) toggleRank(static_cast<std::int32_t>(n.id));
        else toggleLayer(l->view.layers[n.id].key);
        return;
    }
    scene_->selectNode(node);
    dual_->frame(lineageFrame(node));
}

}  // namespace tv::ui
