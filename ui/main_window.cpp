// The main window: its construction, menus and tool bar, the load pipeline (opening, generating
// and laying out plans in the background, off the GUI thread), the view's folds, export, recent
// files and theme. Find, verification, the Bug menu and the gallery have files of their own.
#include "main_window.hpp"

#include <functional>
#include "bug_dialog.hpp"
#include "dual_view.hpp"
#include "notice_bar.hpp"
#include "stage_board.hpp"
#include "theme.hpp"

#include "process/helper_process.hpp"

#include <QApplication>
#include <QCloseEvent>
#include <QScreen>
#include <QDialog>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QGraphicsItem>
#include <QMessageBox>
#include <QTreeWidget>
#include <QMenu>
#include <QDialogButtonBox>
#include <QClipboard>
#include <QVBoxLayout>
#include <QMimeData>
#include <QProgressBar>
#include <QTimer>
#include <QToolButton>
#include <QPainter>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyle>
#include <QSvgGenerator>
#include <QToolBar>
#include <QThreadPool>

#include <fstream>

#include "filter_bar.hpp"
#include "find_model.hpp"
#include "gallery.hpp"
#include "dual_view.hpp"
#include "graph_view.hpp"
#include "generate_dialog.hpp"
#include "inspector.hpp"
#include "verify/symmetry.hpp"

namespace tv::ui {

namespace {

/// What the status bar says about a plan drawn as stored (empty for a plan drawn whole).
QString storedNoteFor(const Plan& drawn) {
    if (!drawn.replication.active()) return {};
    return QCoreApplication::translate("MainWindow", "drawn as stored: %1 stands for all (written out: %L2 parallel ops)")
        .arg(QString::fromStdString(storedOnce(drawn.replication, drawn.membersStoredOnce)))
        .arg(static_cast<qulonglong>(writtenOutCounts(drawn).ops));
}

/// The view of what is drawn, not laid out yet.
std::shared_ptr<LoadedPlan> viewOf(std::shared_ptr<const session::OpenedPlan> opened, session::DrawnPlan drawn, ViewOptions options) {
    QElapsedTimer t;
    t.start();
    auto lp = std::make_shared<LoadedPlan>();
    lp->opened = std::move(opened);
    lp->plan = std::move(drawn.plan);
    lp->stages = std::move(drawn.stages);
    lp->verifiedStages = std::move(drawn.verifiedStages);
    lp->drawnToVerified = std::move(drawn.drawnToVerified);
    lp->options = std::move(options);
    lp->view = buildPlanView(*lp->plan, lp->stages, lp->options);
    lp->viewSeconds = static_cast<double>(t.nsecsElapsed()) / 1e9;
    lp->readSeconds = lp->opened->readSeconds;
    lp->stageSeconds = drawn.stageSeconds;
    lp->storedNote = storedNoteFor(*lp->plan);
    return lp;
}

/// The view of what is drawn, laid out.
std::shared_ptr<LoadedPlan> layOut(std::shared_ptr<const session::OpenedPlan> opened, session::DrawnPlan drawn, ViewOptions options,
                                   QString* error, const LayoutControl* control) {
    auto lp = viewOf(std::move(opened), std::move(drawn), std::move(options));
    QElapsedTimer t;
    t.start();
    lp->placed = placePlanView(lp->view, 240, control);
    lp->layoutSeconds = static_cast<double>(t.nsecsElapsed()) / 1e9;
    if (!lp->placed.error.empty()) {
        if (error) *error = QString::fromStdString(lp->placed.error);
        return nullptr;
    }
    lp->seconds = lp->readSeconds + lp->stageSeconds + lp->viewSeconds + lp->layoutSeconds;
    return lp;
}

std::shared_ptr<LoadedPlan> loadOpened(const session::OpenResult& res, const std::set<std::int32_t>* collapsed, QString* error,
                                       std::size_t maxWrittenOutOps, const LayoutControl* control) {
    if (!res.ok()) {
        if (error) *error = QString::fromStdString(res.message());
        return nullptr;
    }
    auto drawn = session::drawPlan(*res.opened, maxWrittenOutOps);
    ViewOptions options;
    options.collapsedRanks = collapsed ? *collapsed : defaultCollapsedRanks(*drawn.plan);
    return layOut(res.opened, std::move(drawn), std::move(options), error, control);
}

}  // namespace

std::shared_ptr<LoadedPlan> loadPlan(const QString& path, const std::set<std::int32_t>* collapsed, QString* error,
                                     std::size_t maxWrittenOutOps, const LayoutControl* control) {
    return loadOpened(session::openPlanFile(path.toStdString()), collapsed, error, maxWrittenOutOps, control);
}

std::shared_ptr<LoadedPlan> loadPair(const QString& logicalPath, const QStringList& parallelPaths, const QString& relationsPath, QString* error,
                                     std::size_t maxWrittenOutOps, const LayoutControl* control) {
    std::vector<std::string> parallel;
    for (const auto& p : parallelPaths) parallel.push_back(p.toStdString());
    return loadOpened(session::openPair(logicalPath.toStdString(), parallel, relationsPath.toStdString()), nullptr, error, maxWrittenOutOps, control);
}

LoadedTwins loadTwins(std::shared_ptr<const session::OpenedPlan> a, std::shared_ptr<const session::OpenedPlan> b, QString* error,
                      std::size_t maxWrittenOutOps, const LayoutControl* control) {
    LoadedTwins out;
    // Both drawn with the same options (ranks folded as the first plan would be), so that one
    // layout of their union serves both: the same op at the same place in both pictures.
    auto drawnA = session::drawPlan(*a, maxWrittenOutOps);
    auto drawnB = session::drawPlan(*b, maxWrittenOutOps);
    ViewOptions options;
    options.collapsedRanks = defaultCollapsedRanks(drawnA.plan->parallel.ops.size() >= drawnB.plan->parallel.ops.size() ? *drawnA.plan : *drawnB.plan);
    auto la = viewOf(std::move(a), std::move(drawnA), options);
    auto lb = viewOf(std::move(b), std::move(drawnB), options);
    // What differs, by the names drawn (a plan drawn written out names its instances).
    out.changes = diffPlans(*la->plan, *lb->plan);
    // What holds a difference is unfolded (up to 4 ranks and 24 layers: the first differences),
    // so that the ops that differ are drawn as themselves, not as the rank or layer holding them.
    int ranksLeft = 4, layersLeft = 24;
    for (int pass = 0; pass < 3; ++pass) {
        bool more = false;
        for (const auto* lp : {la.get(), lb.get()}) more |= unfoldChanges(*lp->plan, lp->view, out.changes, options, ranksLeft, layersLeft);
        if (!more) break;
        for (auto* lp : {la.get(), lb.get()}) {
            lp->options = options;
            lp->view = buildPlanView(*lp->plan, lp->stages, options);
        }
    }
    QElapsedTimer t;
    t.start();
    auto twins = placeTwins(la->view, lb->view, 240, control);
    if (!twins.error.empty()) {
        if (error) *error = QString::fromStdString(twins.error);
        return out;
    }
    for (auto [lp, placed] : {std::pair{la.get(), &twins.a}, std::pair{lb.get(), &twins.b}}) {
        lp->placed = std::move(*placed);
        lp->layoutSeconds = static_cast<double>(t.nsecsElapsed()) / 1e9;
        lp->seconds = lp->readSeconds + lp->stageSeconds + lp->viewSeconds + lp->layoutSeconds;
    }
    out.a = std::move(la);
    out.b = std::move(lb);
    return out;
}

std::shared_ptr<LoadedPlan> loadOpenedPlan(std::shared_ptr<const session::OpenedPlan> opened, QString* error, std::size_t maxWrittenOutOps,
                                           const LayoutControl* control) {
    session::OpenResult res;
    res.source = opened->source;
    res.opened = std::move(opened);
    return loadOpened(res, nullptr, error, maxWrittenOutOps, control);
}

std::shared_ptr<LoadedPlan> relayoutPlan(const LoadedPlan& previous, ViewOptions options, QString* error, const LayoutControl* control) {
    auto lp = layOut(previous.opened, session::redrawPlan(*previous.opened, previous.plan, previous.verifiedStages), std::move(options), error, control);
    if (lp) {
        lp->seconds -= lp->readSeconds;  // nothing was read
        lp->readSeconds = 0;
    }
    return lp;
}

GraphView* MainWindow::view() const { return dual_->pane(ViewSide::Parallel); }

std::vector<int> MainWindow::lineageFrame(int node) const {
    std::vector<int> out{node};
    if (const auto* l = scene_->loaded(); l && node >= 0) {
        // The other side's counterparts, in its own pane; the node's own side stays on the node.
        const auto side = l->view.nodes[node].side;
        for (int n : l->view.counterparts(node))
            if (l->view.nodes[n].side != side) out.push_back(n);
        // The failing op: its marked counterpart too (a glue stage has no logical op of its own;
        // the counterpart is the logical tensor's producer).
        if (scene_->markOf(node) == NodeMark::FailingOp)
            for (int n : scene_->marked(NodeMark::Counterpart)) out.push_back(n);
    }
    return out;
}

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setWindowTitle(tr("TrainVerify Studio"));
    setAcceptDrops(true);
    scene_ = new PlanScene(this);
    dual_ = new DualView(scene_, this);
    notice_ = new NoticeBar(this);
    auto* central = new QWidget(this);
    auto* column = new QVBoxLayout(central);
    column->setContentsMargins(0, 0, 0, 0);
    column->setSpacing(0);
    column->addWidget(notice_);
    column->addWidget(dual_, 1);
    setCentralWidget(central);

    inspector_ = new Inspector(this);
    auto* inspectorDock = new QDockWidget(tr("Inspector"), this);
    inspectorDock->setObjectName(QStringLiteral("inspector"));
    inspectorDock->setWidget(inspector_);
    addDockWidget(Qt::RightDockWidgetArea, inspectorDock);

    minimap_ = new Minimap(scene_, this);
    minimap_->addPane(dual_->pane(ViewSide::Logical));
    minimap_->addPane(dual_->pane(ViewSide::Parallel));
    auto* minimapDock = new QDockWidget(tr("Overview"), this);
    minimapDock->setObjectName(QStringLiteral("overview"));
    minimapDock->setWidget(minimap_);
    addDockWidget(Qt::LeftDockWidgetArea, minimapDock);

    buildFindDock();

    statusPlan_ = new QLabel(this);
    statusZoom_ = new QLabel(this);
    statusBar()->addWidget(statusPlan_, 1);
    statusBar()->addPermanentWidget(statusZoom_);
    // While a plan is opened or a view laid out: a busy bar, the progress in the status text
    // (which side, its size, the time against the budget), and Cancel.
    layoutBusy_ = new QProgressBar(this);
    layoutBusy_->setRange(0, 0);
    layoutBusy_->setMaximumWidth(120);
    layoutBusy_->setVisible(false);
    layoutCancelButton_ = new QToolButton(this);
    layoutCancelButton_->setText(tr("Cancel"));
    layoutCancelButton_->setToolTip(tr("Stop laying out (Esc); the view on screen stays"));
    layoutCancelButton_->setObjectName(QStringLiteral("cancelLayoutButton"));
    layoutCancelButton_->setVisible(false);
    connect(layoutCancelButton_, &QToolButton::clicked, this, &MainWindow::cancelLayout);
    statusBar()->addPermanentWidget(layoutBusy_);
    statusBar()->addPermanentWidget(layoutCancelButton_);
    layoutTimer_ = new QTimer(this);
    layoutTimer_->setInterval(250);
    connect(layoutTimer_, &QTimer::timeout, this, &MainWindow::updateLayoutProgress);
    connect(dual_, &DualView::zoomChanged, this, [this](qreal z) { statusZoom_->setText(tr("zoom %1 %").arg(qRound(z * 100))); });

    connect(scene_, &PlanScene::nodeSelected, this, &MainWindow::onNodeSelected);
    connect(scene_, &PlanScene::nodeActivated, this, &MainWindow::onNodeActivated);
    connect(scene_, &PlanScene::groupActivated, this, &MainWindow::onGroupActivated);
    connect(scene_, &PlanScene::nodeContextMenu, this, [this](int node, QPoint screen) {
        if (auto* menu = nodeMenu(node)) menu->popup(screen);
    });
    connect(scene_, &PlanScene::planChanged, this, [this] { findModel_->setPlan(scene_->loadedShared()); });

    buildMenus();
    buildFilterBar();
    buildPanelsMenu();
    defaultState_ = saveState(kWindowStateVersion);
    QSettings s;
    restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray());
    // A layout saved by an older version (docks side by side) is not restored: the default is.
    const bool restored = restoreState(s.value(QStringLiteral("window/state")).toByteArray(), kWindowStateVersion);
    if (!s.contains(QStringLiteral("window/geometry"))) {
        // 1400 x 860, or what the screen has room for (a 1280 x 720 screen gets all of it).
        QSize size(1400, 860);
        if (const auto* sc = screen()) size = size.boundedTo(sc->availableGeometry().size());
        resize(size);
    }
    if (!restored) sizeDocksToWindow();
    applyTheme(s.value(QStringLiteral("view/dark"), false).toBool());
    scene_->setShowAllLineage(s.value(QStringLiteral("view/allLineage"), false).toBool());
    rebuildRecentMenu();
    updateStatus();
}

MainWindow::~MainWindow() {
    // Jobs still running are stopped (their layout processes killed) and finish on the pool; their
    // watchers are children of this window and go with it, so no result reaches a destroyed window.
    for (auto& [id, j] : jobs_) j->stop = true;
    QThreadPool::globalInstance()->waitForDone();
    if (!jobs_.empty()) QApplication::restoreOverrideCursor();
}

void MainWindow::buildMenus() {
    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open Plan..."), QKeySequence::Open, this, [this] {
        auto path = QFileDialog::getOpenFileName(this, tr("Open Plan"), currentPath_.isEmpty() ? examplesDir() : QFileInfo(currentPath_).path(),
                                                 tr("TrainVerify plans (*.json);;All files (*)"));
        if (!path.isEmpty()) openPlan(path);
    });
    recentMenu_ = file->addMenu(tr("Open &Recent"));
    file->addAction(tr("&Example Gallery..."), this, &MainWindow::showGallery);
    file->addAction(tr("&Generate Plan..."), QKeySequence(Qt::CTRL | Qt::Key_G), this, [this] {
        GenerateDialog dlg(this);
        if (dlg.exec() == QDialog::Accepted) generatePlan(dlg.options());
    });
    file->addAction(tr("Open &nnScaler Plans..."), this, [this] {
        // A pair: the single-device (logical) plan, then the parallel plan of it.
        const QString dir = currentPath_.isEmpty() ? QString() : QFileInfo(currentPath_).path();
        const QString filter = tr("nnScaler plans (*.pkl);;All files (*)");
        auto logical = QFileDialog::getOpenFileName(this, tr("Open the logical nnScaler plan (single device)"), dir, filter);
        if (logical.isEmpty()) return;
        auto parallel = QFileDialog::getOpenFileName(this, tr("Open a parallel nnScaler plan of it"), QFileInfo(logical).path(), filter);
        if (!parallel.isEmpty()) openNnScalerPair(logical, parallel);
    });
    file->addAction(tr("Open &PyTorch Graphs..."), this, [this] {
        // The single-device graph, then one graph per rank (the rank from `.rN.` in each name, else
        // the order chosen), then optionally a relations file.
        const QString dir = currentPath_.isEmpty() ? QString() : QFileInfo(currentPath_).path();
        const QString filter = tr("PyTorch graphs (*.py *.gpickle);;All files (*)");
        auto logical = QFileDialog::getOpenFileName(this, tr("Open the single-device PyTorch graph"), dir, filter);
        if (logical.isEmpty()) return;
        auto ranks = QFileDialog::getOpenFileNames(this, tr("Open the graph of every rank"), QFileInfo(logical).path(), filter);
        if (ranks.isEmpty()) return;
        QString relations;
        if (QMessageBox::question(this, tr("Relations file"),
                                  tr("Place some inputs with a relations file? (Without one, an input of the single device's shape is a replica and "
                                     "one split evenly along one dim is a shard in rank order.)"),
                                  QMessageBox::Yes | QMessageBox::No, QMessageBox::No) == QMessageBox::Yes)
            relations = QFileDialog::getOpenFileName(this, tr("Open the relations file"), QFileInfo(logical).path(), tr("Relations (*.json)"));
        openPair(logical, ranks, relations);
    })->setObjectName(QStringLiteral("openTorchGraphs"));
    file->addAction(tr("Re&load"), QKeySequence(Qt::CTRL | Qt::Key_R), this, [this] {
        if (!currentLogical_.isEmpty()) reopenPair();
        else if (!currentPath_.isEmpty()) openPlan(currentPath_);
    });
    file->addSeparator();
    file->addAction(tr("Export View as &PNG..."), this, [this] {
        auto path = QFileDialog::getSaveFileName(this, tr("Export PNG"), QString(), tr("PNG images (*.png)"));
        if (!path.isEmpty() && !exportImage(path)) QMessageBox::warning(this, tr("Export"), tr("Could not write %1").arg(path));
    });
    file->addAction(tr("Export View as &SVG..."), this, [this] {
        auto path = QFileDialog::getSaveFileName(this, tr("Export SVG"), QString(), tr("SVG images (*.svg)"));
        if (!path.isEmpty() && !exportImage(path)) QMessageBox::warning(this, tr("Export"), tr("Could not write %1").arg(path));
    });
    file->addAction(tr("Export Graphs as &DOT..."), this, [this] {
        auto path = QFileDialog::getSaveFileName(this, tr("Export DOT"), QString(), tr("Graphviz DOT (*.dot *.gv)"));
        if (!path.isEmpty() && !exportDot(path)) QMessageBox::warning(this, tr("Export"), tr("Could not write %1").arg(path));
    });
    file->addSeparator();
    file->addAction(tr("Co&mpare With..."), this, [this] {
        if (!scene_->loaded()) return;
        auto path = QFileDialog::getOpenFileName(this, tr("Compare the plan on screen with"), QFileInfo(currentPath_).absolutePath(),
                                                 tr("TrainVerify plans (*.json)"));
        if (!path.isEmpty()) compareWithFile(path);
    })->setObjectName(QStringLiteral("compareWith"));
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    auto* view = menuBar()->addMenu(tr("&View"));
    viewMenu_ = view;
    view->addAction(tr("Zoom &In"), QKeySequence(Qt::CTRL | Qt::Key_Equal), dual_, &DualView::zoomIn);
    view->addAction(tr("Zoom &Out"), QKeySequence(Qt::CTRL | Qt::Key_Minus), dual_, &DualView::zoomOut);
    view->addAction(tr("&Fit"), QKeySequence(Qt::CTRL | Qt::Key_0), dual_, &DualView::fitAll);
    view->addAction(tr("&Actual Size (100 %)"), QKeySequence(Qt::CTRL | Qt::Key_1), dual_, &DualView::zoomActual);
    view->addSeparator();
    // Two panes (logical | parallel, each its own view, lineage drawn across) or one canvas.
    auto* panes = view->addAction(tr("&Two Panes"));
    panes->setObjectName(QStringLiteral("twoPanes"));
    panes->setCheckable(true);
    panes->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_T));
    panes->setToolTip(tr("The logical graph and the parallel graph side by side, each scrolled and zoomed on its own"));
    auto* link = view->addAction(tr("&Scroll Panes Together"));
    link->setObjectName(QStringLiteral("linkPanes"));
    link->setCheckable(true);
    link->setToolTip(tr("Scrolling one pane brings the other to the same stage"));
    {
        QSettings s;
        panes->setChecked(s.value(QStringLiteral("view/twoPanes"), true).toBool());
        link->setChecked(s.value(QStringLiteral("view/linkPanes"), true).toBool());
    }
    dual_->setTwoPanes(panes->isChecked());
    dual_->setLinked(link->isChecked());
    link->setEnabled(panes->isChecked());
    connect(panes, &QAction::toggled, this, [this, link](bool on) {
        dual_->setTwoPanes(on);
        link->setEnabled(on);
        QSettings().setValue(QStringLiteral("view/twoPanes"), on);
        dual_->resetSplit();
        dual_->showStart();
    });
    connect(link, &QAction::toggled, this, [this](bool on) {
        dual_->setLinked(on);
        QSettings().setValue(QStringLiteral("view/linkPanes"), on);
    });
    view->addSeparator();
    auto* findAction = view->addAction(tr("&Find..."), QKeySequence::Find, this, [this] {
        if (auto* dock = findChild<QDockWidget*>(QStringLiteral("find"))) {
            dock->show();
            dock->raise();
        }
        findEdit_->setFocus();
        findEdit_->selectAll();
    });
    (void)findAction;
    auto* lineage = view->addAction(tr("Show &All Lineage Edges"));
    lineage->setCheckable(true);
    lineage->setChecked(QSettings().value(QStringLiteral("view/allLineage"), false).toBool());
    connect(lineage, &QAction::toggled, this, [this](bool on) {
        scene_->setShowAllLineage(on);
        QSettings().setValue(QStringLiteral("view/allLineage"), on);
    });
    view->addAction(tr("&Collapse All Ranks"), this, [this] { setRanksCollapsed(true); });
    view->addAction(tr("&Expand All Ranks"), this, [this] { setRanksCollapsed(false); });
    view->addAction(tr("Collapse All &Layers"), this, [this] { setLayersCollapsed(true); });
    view->addAction(tr("Expand All La&yers"), this, [this] { setLayersCollapsed(false); });
    cancelLayoutAction_ = view->addAction(tr("Cancel La&yout"), QKeySequence(Qt::Key_Escape), this, &MainWindow::cancelLayout);
    cancelLayoutAction_->setObjectName(QStringLiteral("cancelLayout"));
    cancelLayoutAction_->setToolTip(tr("Stop opening the plan or laying out the view (Esc)"));
    cancelLayoutAction_->setEnabled(false);
    view->addSeparator();
    auto* dark = view->addAction(tr("&Dark Palette"));
    dark->setCheckable(true);
    dark->setChecked(QSettings().value(QStringLiteral("view/dark"), false).toBool());
    connect(dark, &QAction::toggled, this, [this](bool on) {
        applyTheme(on);
        QSettings().setValue(QStringLiteral("view/dark"), on);
    });

    buildLessons();
    buildVerification();
    buildBugMenu();

    auto* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&Keyboard Shortcuts"), QKeySequence(Qt::CTRL | Qt::Key_Slash), this, &MainWindow::showShortcuts)
        ->setObjectName(QStringLiteral("keyboardShortcuts"));
    auto* lessonsMenu = help->addMenu(tr("&Lessons"));
    for (const auto& lesson : lessons_) {
        const auto id = QString::fromStdString(lesson.id);
        lessonsMenu->addAction(QString::fromStdString(lesson.title), this, [this, id] { openLesson(id, true); });
    }
    lessonsMenu->setEnabled(!lessons_.empty());
    help->addAction(tr("&About TrainVerify Studio"), this, [this] {
        QMessageBox::about(this, tr("About TrainVerify Studio"),
                           tr("<h3>TrainVerify Studio %1</h3><p>Proves that a distributed training plan computes what the "
                              "single-device training step computes, or shows the exact operator and shard where it does "
                              "not.</p><p>The logical graph is on the left, the parallel graph on the right; lineage edges "
                              "join a logical tensor to the parallel tensors that hold it: solid for a shard, dotted for a "
                              "replica, dashed for a partial sum.</p><p>Implements the method of TrainVerify (SOSP 2025) with "
                              "Z3, Graphviz and Qt %2.</p>")
                               .arg(QStringLiteral(TV_VERSION), QString::fromLatin1(qVersion())));
    });

    auto* tb = addToolBar(tr("Main"));
    tb->setObjectName(QStringLiteral("mainToolbar"));
    tb->addAction(tr("Open"), this, [this] {
        auto path = QFileDialog::getOpenFileName(this, tr("Open Plan"), examplesDir(), tr("TrainVerify plans (*.json)"));
        if (!path.isEmpty()) openPlan(path);
    });
    tb->addAction(tr("Examples"), this, &MainWindow::showGallery);
    tb->addSeparator();
    tb->addAction(tr("Fit"), dual_, &DualView::fitAll);
    tb->addAction(tr("100 %"), dual_, &DualView::zoomActual);
    tb->addSeparator();
    tb->addAction(verifyAction_);
    tb->addAction(cancelAction_);
}

void MainWindow::startJob(std::function<std::shared_ptr<LoadedPlan>(QString*, const LayoutControl*)> job, const QString& what, bool open) {
    // A newer open supersedes every job; a newer re-layout, the re-layouts before it (never an
    // open). What they would deliver is dropped, so their layouts are stopped now.
    for (auto& [older, j] : jobs_)
        if (open || !j->open) j->stop = true;
    auto state = std::make_shared<Job>();
    state->what = what;
    state->open = open;
    LayoutControl control;
    control.program = thisProgram();
    control.stop = &state->stop;
    if (layoutSeconds_ > 0) {
        control.budgetSeconds = layoutSeconds_;
        control.deadline = LayoutControl::Clock::now() + std::chrono::duration_cast<LayoutControl::Clock::duration>(
                                                                 std::chrono::duration<double>(layoutSeconds_));
    }
    control.dotSeconds = dotSeconds_;
    control.onRequest = [state](std::size_t side, std::size_t nodes, std::size_t edges) {
        state->nodes = nodes;
        state->edges = edges;
        state->side = static_cast<int>(side);
    };
    // The job holds its state (and the control pointing into it) until it ends.
    auto work = [job, state, control]() -> std::pair<std::shared_ptr<LoadedPlan>, QString> {
        QString error;
        try {
            auto loaded = job(&error, &control);
            return {loaded, error};
        } catch (const std::exception& e) {
            return {nullptr, QString::fromUtf8(e.what())};
        }
    };
    // Every result is delivered (value in, value out; GUI state touched only here): onLoaded
    // drops what a newer job superseded, by the kind of job.
    const auto id = loadJobs_.start(std::move(work), [this, open, state](quint64 done, std::pair<std::shared_ptr<LoadedPlan>, QString> result) {
        jobs_.erase(done);
        if (jobs_.empty()) {
            QApplication::restoreOverrideCursor();
            layoutTimer_->stop();
        }
        updateLayoutProgress();
        onLoaded(done, std::move(result.first), result.second, open, state->stop.load());
    }, JobTracker::Delivery::Always);
    if (open) openId_ = id;
    jobs_[id] = state;
    if (jobs_.size() == 1) QApplication::setOverrideCursor(Qt::BusyCursor);
    updateLayoutProgress();
    layoutTimer_->start();
}

void MainWindow::cancelLayout() {
    for (auto& [id, j] : jobs_) j->stop = true;
    updateLayoutProgress();
}

QString MainWindow::layoutProgressText() const {
    if (jobs_.empty()) return {};
    const auto& j = *jobs_.rbegin()->second;
    const auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - j.started).count();
    QString time = tr("%1 s").arg(elapsed, 0, 'f', 0);
    if (layoutSeconds_ > 0) time = tr("%1 s of %2 s").arg(elapsed, 0, 'f', 0).arg(layoutSeconds_, 0, 'f', 0);
    if (j.stop) return tr("%1 — cancelling...").arg(j.what);
    const int side = j.side;
    if (side < 0) return tr("%1 — reading and preparing the view (%2)...").arg(j.what, time);
    return tr("%1 — %2 side: %L3 nodes and %L4 edges (%5)...")
        .arg(j.what, side == 0 ? tr("logical") : tr("parallel"))
        .arg(static_cast<qulonglong>(j.nodes.load()))
        .arg(static_cast<qulonglong>(j.edges.load()))
        .arg(time);
}

void MainWindow::updateLayoutProgress() {
    const bool busy = !jobs_.empty();
    layoutBusy_->setVisible(busy);
    layoutCancelButton_->setVisible(busy);
    cancelLayoutAction_->setEnabled(busy);
    if (busy) statusPlan_->setText(layoutProgressText());
}

ViewOptions MainWindow::currentOptions() const {
    if (pendingOptions_) return *pendingOptions_;
    return scene_->loaded() ? scene_->loaded()->options : ViewOptions{};
}

void MainWindow::openPlan(const QString& path) {
    const QString abs = QFileInfo(path).absoluteFilePath();
    startJob([abs](QString* error, const LayoutControl* control) { return loadPlan(abs, nullptr, error, kMaxWrittenOutOps, control); },
             tr("Opening %1").arg(QFileInfo(path).fileName()));
}

void MainWindow::generatePlan(const gen::GenerateOptions& options) {
    // Generated plans are files like any other (Reload, Open Recent, the command line), kept in
    // the cache directory under the plan's name, written as the command line writes them.
    const QString dir = QStandardPaths::writableLocation(QStandardPaths::CacheLocation) + QStringLiteral("/generated");
    startJob(
        [options, dir](QString* error, const LayoutControl* control) -> std::shared_ptr<LoadedPlan> {
            auto generated = session::generatePlan(options);
            if (!generated.ok()) {
                *error = QObject::tr("Cannot generate the plan: %1").arg(QString::fromStdString(generated.error()));
                return nullptr;
            }
            if (!QDir().mkpath(dir)) {
                *error = QObject::tr("Cannot create %1").arg(dir);
                return nullptr;
            }
            const std::string path = (dir + QLatin1Char('/')).toStdString() + session::generatedFileName(generated);
            std::string problem;
            if (!session::writeFileAtomically(path, generated.text, &problem)) {
                *error = QString::fromStdString(problem);
                return nullptr;
            }
            return loadOpenedPlan(session::openedFromPlan(std::move(generated.plan), {path, {}, {}}, generated.seconds), error, kMaxWrittenOutOps, control);
        },
        tr("Generating %1").arg(QString::fromStdString(options.model)));
}

void MainWindow::openPair(const QString& logicalPath, const QStringList& parallelPaths, const QString& relationsPath) {
    const QString logical = QFileInfo(logicalPath).absoluteFilePath();
    QStringList parallel;
    for (const auto& p : parallelPaths) parallel << QFileInfo(p).absoluteFilePath();
    const QString relations = relationsPath.isEmpty() ? QString() : QFileInfo(relationsPath).absoluteFilePath();
    pendingRelations_ = relations;
    startJob([logical, parallel, relations](QString* error, const LayoutControl* control) {
                 return loadPair(logical, parallel, relations, error, kMaxWrittenOutOps, control);
             },
             parallel.size() == 1 ? tr("Mapping %1 onto %2").arg(QFileInfo(parallel[0]).fileName(), QFileInfo(logical).fileName())
                                  : tr("Relating %1 rank graphs to %2").arg(parallel.size()).arg(QFileInfo(logical).fileName()));
}

void MainWindow::reopenPair() {
    if (!currentRanks_.isEmpty()) openPair(currentLogical_, currentRanks_, currentRelations_);
    else openPair(currentLogical_, {currentPath_});
}

void MainWindow::onLoaded(quint64 id, std::shared_ptr<LoadedPlan> loaded, const QString& error, bool open, bool cancelled) {
    // A newer open supersedes an open; a re-layout is superseded by any newer job, and is dropped
    // when the plan it laid out is no longer the one on screen.
    if (open ? id != openId_ : (id != loadJobs_.newest() || (loaded && scene_->loaded() && loaded->plan != scene_->loaded()->plan))) return;
    pendingOptions_.reset();
    if (!loaded && cancelled) {
        // Cancelled by the user: no dialog; the plan on screen (if any) stays as it was.
        pendingReveal_.reset();
        updateStatus();
        statusBar()->showMessage(open ? tr("Opening cancelled.") : tr("Layout cancelled; the view is unchanged."), 8000);
        if (open) emit loadFailed(error.isEmpty() ? tr("cancelled") : error);
        return;
    }
    if (!loaded) {
        // A re-layout that fails (one past every layout's bound) keeps the view on screen; the
        // reason is shown above the graph, in the window.
        const QString msg = error.isEmpty() ? (open ? tr("The plan could not be opened.") : tr("The view could not be laid out.")) : error;
        statusPlan_->setText(open ? tr("Failed to open the plan") : tr("Layout refused; the view is unchanged"));
        notice_->showNotice(open ? tr("Cannot open the plan: %1").arg(msg) : tr("Cannot lay out this view (the view on screen is unchanged): %1").arg(msg),
                            NoticeBar::Tone::Error);
        emit loadFailed(msg);
        updateStatus();
        return;
    }
    if (loaded->placed.notice.empty()) notice_->clearNotice();
    else notice_->showNotice(tr("Laid out, but %1.").arg(QString::fromStdString(loaded->placed.notice)));
    // A re-layout of the plan on screen keeps the filters and the view; a new (or reloaded) plan resets them.
    const bool samePlan = scene_->loaded() && scene_->loaded()->plan == loaded->plan;
    currentPath_ = loaded->path();
    currentLogical_ = loaded->logicalPath();
    if (!samePlan) {
        currentRanks_ = loaded->rankPaths();
        currentRelations_ = currentRanks_.isEmpty() ? QString() : pendingRelations_;
    }
    scene_->setPlan(loaded);
    if (!samePlan) {
        filterBar_->reset(scene_->loaded() ? scene_->loaded()->plan.get() : nullptr);
        scene_->setFilter({});
    }
    inspector_->show(nullptr, -1);
    if (!samePlan) {
        // A new plan (or the same file reloaded): its stages start unverified; a lesson shows
        // beside its own plans only.
        resetVerification(*loaded);
        showLessonFor(*loaded);
    }
    applyVerificationToScene();
    updateVerifyActions();
    if (!samePlan) {
        dual_->resetSplit();
        dual_->showStart();
    }
    if (pendingReveal_) {
        anchor_.reset();
        if (samePlan) reveal(*pendingReveal_);
        else pendingReveal_.reset();
    } else if (samePlan) {
        keepInView();
    } else {
        anchor_.reset();
    }
    if (currentLogical_.isEmpty()) rememberRecent(currentPath_);  // a pair is two files: opened again from the File menu
    if (loaded->mutant())
        setWindowTitle(tr("%1 + %2 (not saved) — TrainVerify Studio").arg(QFileInfo(currentPath_).fileName(), QString::fromStdString(loaded->mutant()->bug)));
    else
        setWindowTitle(tr("%1 — TrainVerify Studio").arg(QFileInfo(currentPath_).fileName()));
    if (!samePlan) bugVerdict_.clear();
    if (!samePlan && loaded->mutant()) {
        // A bug was just injected: verify at once, so the user sees it caught.
        statusBar()->showMessage(tr("Injected %1: %2").arg(QString::fromStdString(loaded->mutant()->bug), QString::fromStdString(loaded->mutant()->change)), 8000);
        QTimer::singleShot(0, this, [this] { verify(); });
    }
    updateStatus();
    emit planLoaded();
}

void MainWindow::updateStatus() {
    const auto* l = scene_->loaded();
    if (!l) {
        statusPlan_->setText(tr("No plan open. File ▸ Open (Ctrl+O), File ▸ Example Gallery, or drop a plan file here."));
        return;
    }
    const auto& p = *l->plan;
    statusPlan_->setText(tr("%1 — logical %2 ops, parallel %3 ops on %4 ranks, %5 microbatch(es), %6 lineage records, %7 stages — laid out in %8 s")
                             .arg(QString::fromStdString(p.name.empty() ? QFileInfo(l->path()).fileName().toStdString() : p.name))
                             .arg(p.logical.ops.size())
                             .arg(p.parallel.ops.size())
                             .arg(p.ranks.size())
                             .arg(p.microbatches)
                             .arg(p.lineage.size())
                             .arg(l->stages.stages.size())
                             .arg(l->seconds, 0, 'f', 2) +
                         (l->storedNote.isEmpty() ? QString() : QStringLiteral(" — ") + l->storedNote));
}

void MainWindow::onNodeSelected(int node) {
    inspector_->show(scene_->loaded(), node);
    // Selecting an op or a tensor frames it on both sides: its counterparts come into the other pane.
    if (node >= 0) dual_->frameAcross(node, lineageFrame(node));
}

void MainWindow::onNodeActivated(int node) {
    const auto* l = scene_->loaded();
    if (!l || node < 0) return;
    const auto& n = l->view.nodes[node];
    if (n.kind == ViewNodeKind::CollapsedRank) toggleRank(static_cast<std::int32_t>(n.id));
    if (n.kind == ViewNodeKind::CollapsedLayer) toggleLayer(l->view.layers[n.id].key);
}

void MainWindow::onGroupActivated(int group) {
    const auto* l = scene_->loaded();
    if (!l) return;
    // A double-click anywhere inside an expanded layer (on its band or a stage band in it) folds it.
    for (int g = group; g >= 0 && g < static_cast<int>(l->view.groups.size()); g = l->view.groups[g].parent)
        if (l->view.groups[g].kind == ViewGroupKind::Layer) {
            toggleLayer(l->view.layers[l->view.groups[g].layer].key);
            return;
        }
}

void MainWindow::relayout(ViewOptions options) {
    const auto* l = scene_->loaded();
    if (!l) return;
    pendingOptions_ = options;
    auto previous = scene_->loadedShared();
    startJob([previous, options](QString* error, const LayoutControl* control) {
                 return relayoutPlan(*previous, options, error, control);
             },
             tr("Laying out the view"), /*open=*/false);
}

void MainWindow::keepInView() {
    const auto* l = scene_->loaded();
    if (!l || !anchor_) return;
    const auto anchor = std::move(*anchor_);
    anchor_.reset();
    // What was just opened or closed: the rank's box or the layer's band, or the node it folded into.
    QRectF target;
    const auto& v = l->view;
    for (std::size_t g = 0; g < v.groups.size() && target.isNull(); ++g) {
        const auto& group = v.groups[g];
        const bool match = anchor.layerKey.empty() ? group.kind == ViewGroupKind::Rank && group.rank == anchor.rank && group.side == ViewSide::Parallel
                                                   : group.kind == ViewGroupKind::Layer && group.layer >= 0 && v.layers[group.layer].key == anchor.layerKey;
        if (match) {
            const auto& r = l->placed.groupRects[g];
            target = QRectF(r.x, r.y, r.width, r.height);
        }
    }
    for (std::size_t n = 0; n < v.nodes.size() && target.isNull(); ++n) {
        const auto& node = v.nodes[n];
        const bool match = anchor.layerKey.empty() ? node.kind == ViewNodeKind::CollapsedRank && static_cast<std::int32_t>(node.id) == anchor.rank
                                                   : node.kind == ViewNodeKind::CollapsedLayer && v.layers[node.id].key == anchor.layerKey;
        if (match) target = scene_->itemForNode(static_cast<int>(n))->sceneBoundingRect();
    }
    dual_->bringIntoView(target);
}

void MainWindow::toggleRank(std::int32_t rank) {
    if (!scene_->loaded()) return;
    anchor_ = ViewAnchor{rank, {}};
    auto options = currentOptions();
    if (!options.collapsedRanks.erase(rank)) options.collapsedRanks.insert(rank);
    relayout(std::move(options));
}

void MainWindow::toggleLayer(const std::string& key) {
    const auto* l = scene_->loaded();
    if (!l) return;
    anchor_ = ViewAnchor{-1, key};
    auto options = currentOptions();
    // Collapsed now (counting toggles not yet laid out)? Named either way in the options, or else
    // as the size rule left it in the view on screen.
    bool collapsed = false;
    for (const auto& layer : l->view.layers)
        if (layer.key == key) collapsed = layer.collapsed;
    if (options.collapsedLayers.count(key)) collapsed = true;
    else if (options.expandedLayers.count(key)) collapsed = false;
    if (collapsed) {
        options.collapsedLayers.erase(key);
        options.expandedLayers.insert(key);
    } else {
        options.expandedLayers.erase(key);
        options.collapsedLayers.insert(key);
    }
    relayout(std::move(options));
}

void MainWindow::setRanksCollapsed(bool collapsed) {
    const auto* l = scene_->loaded();
    if (!l) return;
    auto options = currentOptions();
    options.collapsedRanks.clear();
    if (collapsed)
        for (std::int32_t r = 0; r < static_cast<std::int32_t>(l->plan->ranks.size()); ++r) options.collapsedRanks.insert(r);
    relayout(std::move(options));
}

void MainWindow::setLayersCollapsed(bool collapsed) {
    if (!scene_->loaded()) return;
    auto options = currentOptions();
    options.expandedLayers.clear();
    options.collapsedLayers.clear();
    options.collapseLayersAbove = collapsed ? 0 : ViewOptions::kNever;
    options.ranksWithLayersExpanded.clear();
    relayout(std::move(options));
}

void MainWindow::setRankLayersExpanded(std::int32_t rank, bool expanded) {
    if (!scene_->loaded()) return;
    anchor_ = ViewAnchor{rank, {}};
    auto options = currentOptions();
    if (expanded) {
        options.collapsedRanks.erase(rank);
        options.ranksWithLayersExpanded.insert(rank);
        // What was folded one by one on this rank opens too.
        for (auto it = options.collapsedLayers.begin(); it != options.collapsedLayers.end();)
            it = it->rfind("rank " + std::to_string(rank) + " ", 0) == 0 ? options.collapsedLayers.erase(it) : std::next(it);
    } else {
        options.ranksWithLayersExpanded.erase(rank);
    }
    relayout(std::move(options));
}

bool MainWindow::exportImage(const QString& path) {
    if (!scene_->loaded()) return false;
    // The export is the whole scene: its lineage drawn in it, whatever the panes do on screen.
    const bool inScene = scene_->lineageInScene();
    scene_->setLineageInScene(true);
    struct Restore {
        PlanScene* scene;
        bool inScene;
        ~Restore() { scene->setLineageInScene(inScene); }
    } restore{scene_, inScene};
    const QRectF src = scene_->itemsBoundingRect().adjusted(-20, -20, 20, 20);
    if (path.endsWith(QStringLiteral(".svg"), Qt::CaseInsensitive)) {
        QSvgGenerator svg;
        svg.setFileName(path);
        svg.setSize(src.size().toSize());
        svg.setViewBox(QRectF(QPointF(0, 0), src.size()));
        svg.setTitle(QFileInfo(currentPath_).fileName());
        svg.setDescription(tr("TrainVerify Studio: logical and parallel graphs with lineage"));
        QPainter p(&svg);
        scene_->render(&p, QRectF(QPointF(0, 0), src.size()), src);
        return p.end();
    }
    // Large scenes are scaled down to at most 8000 pixels on a side.
    const qreal scale = std::min<qreal>(2.0, 8000.0 / std::max(src.width(), src.height()));
    QImage img((src.size() * scale).toSize(), QImage::Format_ARGB32_Premultiplied);
    img.fill(dark_ ? QColor(30, 30, 34) : Qt::white);
    QPainter p(&img);
    p.setRenderHint(QPainter::Antialiasing);
    scene_->render(&p, QRectF(QPointF(0, 0), img.size()), src);
    p.end();
    return img.save(path, "PNG");
}

bool MainWindow::exportDot(const QString& path) {
    const auto* l = scene_->loaded();
    if (!l) return false;
    std::ofstream out(path.toStdString());
    if (!out) return false;
    for (auto side : {ViewSide::Logical, ViewSide::Parallel}) {
        std::vector<int> map;
        auto req = l->view.layoutRequest(side, map, /*includeCollapsedEdges=*/true);
        std::vector<std::string> labels;
        for (int n : map) labels.push_back(l->view.nodes[n].name + "\n" + l->view.nodes[n].label);
        out << toDot(req, labels, side == ViewSide::Logical ? "logical" : "parallel");
    }
    return static_cast<bool>(out);
}

void MainWindow::rememberRecent(const QString& path) {
    QSettings s;
    auto list = s.value(QStringLiteral("files/recent")).toStringList();
    list.removeAll(path);
    list.prepend(path);
    while (list.size() > 10) list.removeLast();
    s.setValue(QStringLiteral("files/recent"), list);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
    recentMenu_->clear();
    const auto list = QSettings().value(QStringLiteral("files/recent")).toStringList();
    for (const auto& path : list) recentMenu_->addAction(QFileInfo(path).fileName(), this, [this, path] { openPlan(path); })->setToolTip(path);
    recentMenu_->setEnabled(!list.isEmpty());
}

void MainWindow::applyTheme(bool dark) {
    dark_ = dark;
    const QPalette pal = dark ? darkPalette() : QApplication::style()->standardPalette();
    QApplication::setPalette(pal);
    scene_->setDark(dark);
}

void MainWindow::sizeDocksToWindow() {
    // The graph first: the panels take a share of the window, never most of it.
    auto dock = [this](const char* name) { return findChild<QDockWidget*>(QLatin1String(name)); };
    if (auto* stages = dock("stages")) resizeDocks({stages}, {std::max(120, height() * 26 / 100)}, Qt::Vertical);
    if (auto* overview = dock("overview")) resizeDocks({overview}, {std::max(150, width() * 15 / 100)}, Qt::Horizontal);
    if (auto* inspector = dock("inspector")) resizeDocks({inspector}, {std::max(180, width() * 18 / 100)}, Qt::Horizontal);
}

void MainWindow::resetLayout() {
    restoreState(defaultState_, kWindowStateVersion);
    sizeDocksToWindow();
}

void MainWindow::buildPanelsMenu() {
    // Every panel can be shown or hidden from View > Panels; Reset Layout puts them back.
    auto* panels = viewMenu_->addMenu(tr("&Panels"));
    int key = Qt::Key_1;
    for (const char* name : {"overview", "find", "inspector", "stages", "diagnosis", "lesson"})
        if (auto* d = findChild<QDockWidget*>(QLatin1String(name))) {
            auto* toggle = d->toggleViewAction();
            toggle->setObjectName(QStringLiteral("panel-%1").arg(QLatin1String(name)));
            if (key <= Qt::Key_6) toggle->setShortcut(QKeySequence(Qt::CTRL | Qt::ALT | static_cast<Qt::Key>(key++)));
            panels->addAction(toggle);
        }
    auto* graphOnly = viewMenu_->addAction(tr("&Graph Only"));
    graphOnly->setObjectName(QStringLiteral("graphOnly"));
    graphOnly->setCheckable(true);
    graphOnly->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_G));
    connect(graphOnly, &QAction::toggled, this, [this](bool on) {
        if (on) {
            graphOnlyState_ = saveState(kWindowStateVersion);
            for (auto* d : findChildren<QDockWidget*>()) d->hide();
        } else if (!graphOnlyState_.isEmpty()) {
            restoreState(graphOnlyState_, kWindowStateVersion);
        }
    });
    auto* reset = viewMenu_->addAction(tr("&Reset Layout"), this, [this, graphOnly] {
        const QSignalBlocker block(graphOnly);
        graphOnly->setChecked(false);
        resetLayout();
    });
    reset->setObjectName(QStringLiteral("resetLayout"));
}

QMenu* MainWindow::nodeMenu(int node) {
    const auto* l = scene_->loaded();
    if (!l || node < 0 || node >= static_cast<int>(l->view.nodes.size())) return nullptr;
    const auto& n = l->view.nodes[node];
    auto* menu = new QMenu(this);
    menu->setAttribute(Qt::WA_DeleteOnClose);
    auto named = [](QAction* a, const char* name) {
        a->setObjectName(QLatin1String(name));
        return a;
    };
    if (n.kind == ViewNodeKind::CollapsedRank) {
        named(menu->addAction(tr("&Expand Rank %1").arg(n.id), this, [this, rank = static_cast<std::int32_t>(n.id)] { toggleRank(rank); }), "expand");
        named(menu->addAction(tr("Expand Rank %1 and All Its &Layers").arg(n.id), this,
                              [this, rank = static_cast<std::int32_t>(n.id)] { setRankLayersExpanded(rank, true); }),
              "expandRankLayers");
    } else if (n.kind == ViewNodeKind::CollapsedLayer) {
        if (n.side == ViewSide::Parallel && l->view.layers[n.id].rank >= 0)
            named(menu->addAction(tr("Expand All &Layers of Rank %1").arg(l->view.layers[n.id].rank), this,
                                  [this, rank = l->view.layers[n.id].rank] { setRankLayersExpanded(rank, true); }),
                  "expandRankLayers");
        named(menu->addAction(tr("&Expand %1").arg(QString::fromStdString(n.name)), this,
                              [this, key = l->view.layers[n.id].key] { toggleLayer(key); }),
              "expand");
    } else {
        // Fold what holds it: its layer, else (parallel side) its rank.
        if (n.layer >= 0 && n.layer < static_cast<int>(l->view.layers.size()))
            named(menu->addAction(tr("&Collapse %1").arg(QString::fromStdString(l->view.layers[n.layer].layer)), this,
                                  [this, key = l->view.layers[n.layer].key] { toggleLayer(key); }),
                  "collapse");
        else if (n.side == ViewSide::Parallel) {
            std::int32_t rank = -1;
            for (int g = n.group; g >= 0; g = l->view.groups[g].parent)
                if (l->view.groups[g].kind == ViewGroupKind::Rank) rank = l->view.groups[g].rank;
            if (rank >= 0) named(menu->addAction(tr("&Collapse Rank %1").arg(rank), this, [this, rank] { toggleRank(rank); }), "collapse");
        }
    }
    named(menu->addAction(tr("Show &Lineage"), this, [this, node] {
              scene_->selectNode(node);
              dual_->frame(lineageFrame(node));
          }),
          "lineage")
        ->setToolTip(tr("Select it: its lineage edges and counterparts on the other side are drawn"));
    named(menu->addAction(tr("&Copy Name"), this, [name = QString::fromStdString(n.name)] { QApplication::clipboard()->setText(name); }), "copyName");
    if (n.kind == ViewNodeKind::Op && n.side == ViewSide::Parallel)
        named(menu->addAction(tr("&Inject Bug Here..."), this,
                              [this, name = QString::fromStdString(n.name)] {
                                  const auto* now = scene_->loaded();
                                  if (!now) return;
                                  BugDialog dlg(now->verifiedPlan(), this);
                                  dlg.preferAt(name);
                                  if (dlg.exec() == QDialog::Accepted && !dlg.bug().isEmpty()) injectBug(dlg.bug(), dlg.options());
                              }),
              "injectHere")
            ->setToolTip(tr("The bugs of the catalog that can be made at this op, one of them injected into a copy and verified"));
    // Its stage as the stage board numbers it (the verified plan's, when drawn as stored).
    if (n.stage != kNone && n.stage < l->drawnToVerified.size() && l->drawnToVerified[n.stage] != kNone) {
        const auto stage = l->drawnToVerified[n.stage];
        named(menu->addAction(tr("Go to &Stage %1").arg(stage), this,
                              [this, stage] {
                                  board_->selectStage(stage);
                                  focusStage(stage);
                              }),
              "goToStage");
    }
    return menu;
}

void MainWindow::showShortcuts() {
    QDialog dlg(this);
    dlg.setWindowTitle(tr("Keyboard Shortcuts"));
    auto* layout = new QVBoxLayout(&dlg);
    auto* tree = new QTreeWidget(&dlg);
    tree->setObjectName(QStringLiteral("shortcuts"));
    tree->setHeaderLabels({tr("Command"), tr("Shortcut")});
    tree->setRootIsDecorated(false);
    for (const auto& [path, keys] : shortcuts()) new QTreeWidgetItem(tree, {path, keys});
    tree->resizeColumnToContents(0);
    layout->addWidget(tree);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, &dlg);
    connect(buttons, &QDialogButtonBox::rejected, &dlg, &QDialog::reject);
    layout->addWidget(buttons);
    dlg.resize(520, 560);
    dlg.exec();
}

std::vector<std::pair<QString, QString>> MainWindow::shortcuts() const {
    // Read from the menus themselves, so the list never goes stale.
    std::vector<std::pair<QString, QString>> out;
    std::function<void(const QMenu*, const QString&)> walk = [&](const QMenu* menu, const QString& path) {
        for (auto* a : menu->actions()) {
            const QString text = a->text().remove(QLatin1Char('&'));
            if (a->menu()) walk(a->menu(), path + text + QStringLiteral(" ▸ "));
            else if (!a->shortcut().isEmpty()) out.emplace_back(path + text, a->shortcut().toString(QKeySequence::NativeText));
        }
    };
    for (auto* a : menuBar()->actions())
        if (a->menu()) walk(a->menu(), a->text().remove(QLatin1Char('&')) + QStringLiteral(" ▸ "));
    return out;
}

void MainWindow::closeEvent(QCloseEvent* e) {
    QSettings s;
    s.setValue(QStringLiteral("window/geometry"), saveGeometry());
    s.setValue(QStringLiteral("window/state"), saveState(kWindowStateVersion));
    QMainWindow::closeEvent(e);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
    if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
    const auto urls = e->mimeData()->urls();
    if (!urls.isEmpty() && urls.first().isLocalFile()) openPlan(urls.first().toLocalFile());
}

}  // namespace tv::ui
