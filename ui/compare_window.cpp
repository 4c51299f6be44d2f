#include "compare_window.hpp"

#include <QCloseEvent>
#include <QScreen>
#include <QTextDocumentFragment>
#include <QComboBox>
#include <QDockWidget>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QScrollBar>
#include <QSplitter>
#include <QStatusBar>
#include <QToolBar>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "explore/pane_alignment.hpp"
#include "failure_panel.hpp"
#include "explore/verified_view.hpp"
#include "find_model.hpp"
#include "graph_view.hpp"
#include "plan_scene.hpp"
#include "process/helper_process.hpp"
#include "verification_controller.hpp"

namespace tv::ui {

namespace {

QString nameOf(const session::OpenedPlan& p) {
    const QString file = QFileInfo(QString::fromStdString(p.source.path)).fileName();
    if (p.mutant) return QObject::tr("%1 + %2").arg(file, QString::fromStdString(p.mutant->bug));
    return file.isEmpty() ? QObject::tr("(generated plan)") : file;
}

}  // namespace

CompareWindow::CompareWindow(QWidget* parent) : QMainWindow(parent) {
    setAttribute(Qt::WA_DeleteOnClose, false);
    setWindowTitle(tr("Compare Plans — TrainVerify Studio"));
    auto* central = new QWidget(this);
    auto* split = new QSplitter(Qt::Horizontal, central);
    split->setObjectName(QStringLiteral("compareSplitter"));
    for (int i = 0; i < 2; ++i) {
        auto* column = new QWidget(split);
        auto* v = new QVBoxLayout(column);
        v->setContentsMargins(2, 2, 2, 2);
        v->setSpacing(2);
        titles_[i] = new QLabel(column);
        titles_[i]->setTextFormat(Qt::PlainText);
        QFont f = titles_[i]->font();
        f.setBold(true);
        titles_[i]->setFont(f);
        headlines_[i] = new QLabel(column);
        headlines_[i]->setTextFormat(Qt::RichText);
        headlines_[i]->setWordWrap(true);
        // Two lines each (the verdict, the first failure), so that both panes start at the same height.
        headlines_[i]->setFixedHeight(headlines_[i]->fontMetrics().lineSpacing() * 2 + 4);
        headlines_[i]->setAlignment(Qt::AlignLeft | Qt::AlignTop);
        scenes_[i] = new PlanScene(this);
        // Lineage for the selection only, and only where both of its ends can be shown.
        scenes_[i]->setShowAllLineage(false);
        scenes_[i]->setLineageInScene(false);
        panes_[i] = new GraphView(column);
        panes_[i]->setObjectName(i == 0 ? QStringLiteral("referencePane") : QStringLiteral("twinPane"));
        panes_[i]->setScene(scenes_[i]);
        v->addWidget(titles_[i]);
        v->addWidget(headlines_[i]);
        v->addWidget(panes_[i], 1);
        split->addWidget(column);
        // One layout for both plans: the panes move together, pixel for pixel.
        connect(panes_[i]->horizontalScrollBar(), &QScrollBar::valueChanged, this, [this, i] { follow(i); });
        connect(panes_[i]->verticalScrollBar(), &QScrollBar::valueChanged, this, [this, i] { follow(i); });
        connect(panes_[i], &GraphView::zoomChanged, this, [this, i] { follow(i); });
        connect(scenes_[i], &PlanScene::nodeSelected, this, [this, i](int node) {
            // The same op selected in the other plan, when it has it.
            if (following_ || node < 0) return;
            const auto* mine = scenes_[i]->loaded();
            const auto* theirs = scenes_[1 - i]->loaded();
            if (!mine || !theirs) return;
            const auto& n = mine->view.nodes[node];
            following_ = true;
            int match = -1;
            for (std::size_t m = 0; m < theirs->view.nodes.size() && match < 0; ++m)
                if (theirs->view.nodes[m].side == n.side && theirs->view.nodes[m].kind == n.kind && theirs->view.nodes[m].name == n.name)
                    match = static_cast<int>(m);
            scenes_[1 - i]->selectNode(match);
            following_ = false;
        });
    }
    split->setSizes({1, 1});
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(split);
    setCentralWidget(central);

    auto* tb = addToolBar(tr("Compare"));
    tb->setObjectName(QStringLiteral("compareToolbar"));
    tb->setMovable(false);
    tb->addWidget(new QLabel(tr(" Show: "), tb));
    shownBox_ = new QComboBox(tb);
    shownBox_->addItems({tr("parallel graphs"), tr("logical graphs"), tr("both graphs")});
    tb->addWidget(shownBox_);
    connect(shownBox_, &QComboBox::currentIndexChanged, this, [this](int i) { setShown(static_cast<Shown>(i)); });
    tb->addSeparator();
    tb->addAction(tr("Fit"), this, [this] {
        panes_[0]->fitAll();
        follow(0);
    });
    tb->addAction(tr("100 %"), this, [this] {
        panes_[0]->zoomActual();
        follow(0);
    });

    list_ = new QTreeWidget(this);
    list_->setObjectName(QStringLiteral("changeList"));
    list_->setColumnCount(4);
    list_->setHeaderLabels({tr("what"), tr("op"), tr("side"), tr("difference")});
    list_->setRootIsDecorated(false);
    list_->setUniformRowHeights(true);
    list_->header()->setStretchLastSection(true);
    connect(list_, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item) {
        if (item) showChange(list_->indexOfTopLevelItem(item));
    });
    auto* dockBody = new QWidget(this);
    auto* dv = new QVBoxLayout(dockBody);
    dv->setContentsMargins(4, 4, 4, 4);
    summary_ = new QLabel(dockBody);
    summary_->setWordWrap(true);
    dv->addWidget(summary_);
    dv->addWidget(list_, 1);
    auto* dock = new QDockWidget(tr("Differences"), this);
    dock->setObjectName(QStringLiteral("differences"));
    dock->setWidget(dockBody);
    dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
    addDockWidget(Qt::BottomDockWidgetArea, dock);
    resizeDocks({dock}, {170}, Qt::Vertical);

    verifier_ = new VerificationController(this);
    connect(verifier_, &VerificationController::finished, this, &CompareWindow::onVerified);
    QSize size(1400, 860);
    if (const auto* sc = screen()) size = size.boundedTo(sc->availableGeometry().size());
    resize(size);
}

CompareWindow::~CompareWindow() { stopLoading(); }

void CompareWindow::closeEvent(QCloseEvent* e) {
    // Closed: nothing more is loaded or verified (the window is only hidden).
    ++generation_;
    stopLoading();
    loading_ = false;
    verifying_ = -1;
    verifier_->cancel();
    QMainWindow::closeEvent(e);
}

void CompareWindow::stopLoading() {
    if (stop_) stop_->store(true);
}

QString CompareWindow::headline(int side) const { return QTextDocumentFragment::fromHtml(headlines_[side]->text()).toPlainText(); }

void CompareWindow::compareFiles(const QString& a, const QString& b) { read(nullptr, a, b); }

void CompareWindow::compareWithFile(std::shared_ptr<const session::OpenedPlan> a, const QString& b) { read(std::move(a), QString(), b); }

void CompareWindow::clear() {
    // What the window compared before goes at once: never the old pair under the new names.
    for (auto* s : scenes_) s->setPlan(nullptr);
    changes_.clear();
    changeNodes_[0].clear();
    changeNodes_[1].clear();
    reports_[0].reset();
    reports_[1].reset();
    list_->clear();
}

void CompareWindow::start(const QString& a, const QString& b, const QString& doing) {
    // A newer comparison: what an older one would still deliver is dropped, its layout and
    // verification stopped.
    ++generation_;
    stopLoading();
    verifier_->cancel();
    verifying_ = -1;
    loading_ = true;
    clear();
    titles_[0]->setText(a);
    titles_[1]->setText(b);
    for (auto* h : headlines_) h->setText(QStringLiteral("<i>%1</i>").arg(doing.toHtmlEscaped()));
    summary_->setText(tr("Comparing…"));
}

void CompareWindow::fail(const QString& why) {
    loading_ = false;
    for (auto* h : headlines_) h->setText(QStringLiteral("<span style=\"color:#c62828\">%1</span>").arg(why.toHtmlEscaped()));
    summary_->setText(why);
    emit loadFailed(why);
}

void CompareWindow::read(std::shared_ptr<const session::OpenedPlan> openedA, const QString& a, const QString& b) {
    start(openedA ? nameOf(*openedA) : QFileInfo(a).fileName(), QFileInfo(b).fileName(), tr("reading…"));
    auto* watcher = new QFutureWatcher<std::pair<session::OpenResult, session::OpenResult>>(this);
    const auto generation = generation_;
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
        watcher->deleteLater();
        if (generation != generation_) return;
        auto [ra, rb] = watcher->result();
        if (!ra.ok() || !rb.ok()) return fail(QString::fromStdString(!ra.ok() ? ra.message() : rb.message()));
        compare(ra.opened, rb.opened);
    });
    watcher->setFuture(QtConcurrent::run([openedA, a = a.toStdString(), b = b.toStdString()] {
        session::OpenResult ra;
        if (openedA) {
            ra.source = openedA->source;
            ra.opened = openedA;
        } else {
            ra = session::openPlanFile(a);
        }
        return std::pair{std::move(ra), session::openPlanFile(b)};
    }));
}

void CompareWindow::compare(std::shared_ptr<const session::OpenedPlan> a, std::shared_ptr<const session::OpenedPlan> b) {
    start(nameOf(*a), nameOf(*b), tr("laying out both plans in one layout…"));
    auto stop = std::make_shared<std::atomic<bool>>(false);
    stop_ = stop;
    auto* watcher = new QFutureWatcher<std::pair<LoadedTwins, QString>>(this);
    const auto generation = generation_;
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
        watcher->deleteLater();
        if (generation != generation_) return;
        auto [twins, error] = watcher->result();
        onLoaded(twins, error);
    });
    watcher->setFuture(QtConcurrent::run([a, b, stop]() -> std::pair<LoadedTwins, QString> {
        // The union is laid out in a layout process, stopped by a newer compare or by closing,
        // and bounded like the main window's layouts (dot's slice, then the layered layout).
        LayoutControl control;
        control.program = thisProgram();
        control.stop = stop.get();
        control.budgetSeconds = kDefaultLayoutSeconds;
        control.deadline = LayoutControl::Clock::now() +
                           std::chrono::duration_cast<LayoutControl::Clock::duration>(std::chrono::duration<double>(kDefaultLayoutSeconds));
        control.dotSeconds = kDefaultDotSeconds;
        QString error;
        try {
            auto twins = loadTwins(a, b, &error, kMaxWrittenOutOps, &control);
            return {std::move(twins), error};
        } catch (const std::exception& e) {
            return {LoadedTwins{}, QString::fromUtf8(e.what())};
        }
    }));
}

void CompareWindow::onLoaded(const LoadedTwins& twins, const QString& error) {
    loading_ = false;
    if (!twins.ok()) return fail(error.isEmpty() ? tr("the plans could not be laid out") : error);
    scenes_[0]->setPlan(twins.a);
    scenes_[1]->setPlan(twins.b);
    changes_ = twins.changes;
    for (int i = 0; i < 2; ++i) {
        // Each change's node in each plan: what a removed op was in the reference, what an added
        // one is in the twin, a changed op in both.
        const auto* l = scenes_[i]->loaded();
        changeNodes_[i].assign(changes_.size(), -1);
        for (std::size_t c = 0; c < changes_.size(); ++c) {
            const auto& ch = changes_[c];
            if ((i == 0 && ch.what == OpChange::What::Added) || (i == 1 && ch.what == OpChange::What::Removed)) continue;
            changeNodes_[i][c] = tv::changeNode(*l->plan, l->view, ch);
        }
        applyMarks(i);
    }
    for (const auto& ch : changes_) {
        auto* item = new QTreeWidgetItem(list_, {QString::fromLatin1(toString(ch.what).data()), QString::fromStdString(ch.shownName()),
                                                 ch.side == ViewSide::Logical ? tr("logical") : tr("parallel"), QString::fromStdString(ch.detail)});
        item->setToolTip(3, QString::fromStdString(ch.detail));
    }
    for (int c = 0; c < 3; ++c) list_->resizeColumnToContents(c);
    summary_->setText(changes_.empty() ? tr("The two plans are the same op for op.")
                                       : tr("%n difference(s) between the plans, ringed in both panes; pick one to go to it.", nullptr,
                                            static_cast<int>(changes_.size())));
    QString notice = QString::fromStdString(twins.a->placed.notice);
    if (!notice.isEmpty()) statusBar()->showMessage(notice);
    updatePaneRects();
    panes_[0]->showStart();
    follow(0);
    // Straight to the first difference: that is what the window is for.
    if (list_->topLevelItemCount() > 0) list_->setCurrentItem(list_->topLevelItem(0));
    emit loaded();
    verifying_ = 0;
    verifyNext();
}

int CompareWindow::changeNode(int side, std::size_t change) const {
    return change < changeNodes_[side].size() ? changeNodes_[side][change] : -1;
}

void CompareWindow::applyMarks(int side) {
    const auto* l = scenes_[side]->loaded();
    if (!l) return;
    std::vector<std::pair<int, NodeMark>> marks;
    for (int n : changeNodes_[side])
        if (n >= 0) marks.emplace_back(n, NodeMark::Changed);
    if (const auto& r = reports_[side]) {
        if (r->failure) {
            const auto focus = locateFailure(*l->plan, *r->failure);
            if (focus.failingOp != kNone) marks.emplace_back(nodeShowing(l->view, FindHit{ViewSide::Parallel, true, focus.failingOp, -1}), NodeMark::FailingOp);
        }
        // Stage colours: the verified plan's results on the stages drawn.
        std::vector<StageStatus> drawn(l->drawnToVerified.size(), StageStatus::Queued);
        std::vector<StageStatus> verified(l->verifiedStages ? l->verifiedStages->stages.size() : 0, StageStatus::Queued);
        for (const auto& res : r->results)
            if (res.stage < verified.size()) verified[res.stage] = res.status;
        for (std::size_t d = 0; d < drawn.size(); ++d)
            if (l->drawnToVerified[d] != kNone && l->drawnToVerified[d] < verified.size()) drawn[d] = verified[l->drawnToVerified[d]];
        scenes_[side]->setStageStatuses(r->results.empty() ? std::vector<StageStatus>{} : drawn);
    }
    scenes_[side]->setMarks(marks);
}

void CompareWindow::verifyNext() {
    if (verifying_ < 0 || verifying_ > 1) {
        verifying_ = -1;
        return;
    }
    const auto* l = scenes_[verifying_]->loaded();
    headlines_[verifying_]->setText(tr("<i>verifying…</i>"));
    auto options = verifyOptions_;
    run_ = verifier_->start(l->opened, std::move(options));
}

void CompareWindow::onVerified(quint64 run, std::shared_ptr<const VerifyReport> report) {
    if (run != run_ || verifying_ < 0 || !report) return;
    const int side = verifying_;
    if (report->cancelled) {
        headlines_[side]->setText(tr("<i>verification stopped</i>"));
        verifying_ = -1;
        return;
    }
    reports_[side] = report;
    QString html = verdictLineHtml(*report);
    if (report->failure)
        html += QStringLiteral("<br>") + tr("first failure: %1 on rank %2 (%3)")
                                             .arg(QString::fromStdString(report->failure->parallelOp))
                                             .arg(report->failure->rank)
                                             .arg(QString::fromLatin1(describe(report->failure->kind).data()));
    headlines_[side]->setText(html);
    applyMarks(side);
    verifying_ = side == 0 ? 1 : -1;
    if (verifying_ == 1) verifyNext();
    else emit verified();
}

void CompareWindow::setShown(Shown shown) {
    shown_ = shown;
    for (auto* s : scenes_) s->setLineageInScene(shown == Shown::Both);
    if (shownBox_->currentIndex() != static_cast<int>(shown)) shownBox_->setCurrentIndex(static_cast<int>(shown));
    updatePaneRects();
    panes_[0]->showStart();
    follow(0);
}

void CompareWindow::updatePaneRects() {
    // The same rectangle in both panes (the union of what either plan draws there), so that the
    // panes scroll in step.
    QRectF r;
    for (auto* s : scenes_) {
        const auto* l = s->loaded();
        if (!l) continue;
        for (auto side : {ViewSide::Logical, ViewSide::Parallel}) {
            if ((shown_ == Shown::Parallel && side == ViewSide::Logical) || (shown_ == Shown::Logical && side == ViewSide::Parallel)) continue;
            const Rect e = sideExtent(l->view, l->placed, side);
            r = r.united(QRectF(e.x, e.y, e.width, e.height));
        }
    }
    r.adjust(-40, -40, 40, 40);
    for (auto* p : panes_) p->setSceneRect(r);
}

void CompareWindow::follow(int from) {
    if (following_) return;
    following_ = true;
    auto* src = panes_[from];
    auto* dst = panes_[1 - from];
    if (dst->transform() != src->transform()) {
        dst->setTransform(src->transform());
        emit dst->zoomChanged(dst->zoom());
    }
    dst->horizontalScrollBar()->setValue(src->horizontalScrollBar()->value());
    dst->verticalScrollBar()->setValue(src->verticalScrollBar()->value());
    following_ = false;
}

void CompareWindow::showChange(int index) {
    if (index < 0 || index >= static_cast<int>(changes_.size())) return;
    // Selected in the plan that has it (the twin first: a changed op is what is looked for there).
    for (int side : {1, 0}) {
        const int node = changeNode(side, static_cast<std::size_t>(index));
        if (node < 0) continue;
        const auto& placed = scenes_[side]->loaded()->placed;
        const Rect& r = placed.nodeRects[node];
        const bool logical = scenes_[side]->loaded()->view.nodes[node].side == ViewSide::Logical;
        if (logical && shown_ == Shown::Parallel) setShown(Shown::Both);
        if (!logical && shown_ == Shown::Logical) setShown(Shown::Both);
        scenes_[side]->selectNode(node);
        // Readable, with its neighbours in sight.
        if (panes_[side]->zoom() < GraphView::kReadable || panes_[side]->zoom() > 0.8) {
            panes_[side]->resetTransform();
            panes_[side]->scale(0.75, 0.75);
        }
        panes_[side]->centerOn(r.x + r.width / 2, r.y + r.height / 2);
        follow(side);
        return;
    }
}

}  // namespace tv::ui
