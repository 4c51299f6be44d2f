// The main window: its construction, menus and tool bar, the load pipeline (opening, generating
// and laying out plans in the background, off the GUI thread), the view's folds, export, recent
// files and theme. Find, verification, the Bug menu and the gallery have files of their own.
#include "main_window.hpp"
#include "theme.hpp"

#include "process/helper_process.hpp"

#include <QApplication>
#include <QCloseEvent>
#include <QDialog>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
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
        .arg(QString::fromStdString(storedOnce(drawn.replication)))
        .arg(static_cast<qulonglong>(writtenOutCounts(drawn).ops));
}

/// The view of what is drawn, laid out.
std::shared_ptr<LoadedPlan> layOut(std::shared_ptr<const session::OpenedPlan> opened, session::DrawnPlan drawn, ViewOptions options,
                                   QString* error, const LayoutControl* control) {
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
    lp->placed = placePlanView(lp->view, 240, control);
    lp->layoutSeconds = static_cast<double>(t.nsecsElapsed()) / 1e9 - lp->viewSeconds;
    if (!lp->placed.error.empty()) {
        if (error) *error = QString::fromStdString(lp->placed.error);
        return nullptr;
    }
    lp->readSeconds = lp->opened->readSeconds;
    lp->stageSeconds = drawn.stageSeconds;
    lp->seconds = lp->readSeconds + lp->stageSeconds + lp->viewSeconds + lp->layoutSeconds;
    lp->storedNote = storedNoteFor(*lp->plan);
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

std::shared_ptr<LoadedPlan> loadNnScalerPair(const QString& logicalPath, const QString& parallelPath, QString* error, std::size_t maxWrittenOutOps,
                                             const LayoutControl* control) {
    return loadOpened(session::openNnScalerPair(logicalPath.toStdString(), parallelPath.toStdString()), nullptr, error, maxWrittenOutOps, control);
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

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setWindowTitle(tr("TrainVerify Studio"));
    setAcceptDrops(true);
    scene_ = new PlanScene(this);
    view_ = new GraphView(this);
    view_->setScene(scene_);
    setCentralWidget(view_);

    inspector_ = new Inspector(this);
    auto* inspectorDock = new QDockWidget(tr("Inspector"), this);
    inspectorDock->setObjectName(QStringLiteral("inspector"));
    inspectorDock->setWidget(inspector_);
    addDockWidget(Qt::RightDockWidgetArea, inspectorDock);

    minimap_ = new Minimap(view_, this);
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
    connect(view_, &GraphView::zoomChanged, this, [this](qreal z) { statusZoom_->setText(tr("zoom %1 %").arg(qRound(z * 100))); });

    connect(scene_, &PlanScene::nodeSelected, this, &MainWindow::onNodeSelected);
    connect(scene_, &PlanScene::nodeActivated, this, &MainWindow::onNodeActivated);
    connect(scene_, &PlanScene::groupActivated, this, &MainWindow::onGroupActivated);
    connect(scene_, &PlanScene::planChanged, this, [this] { findModel_->setPlan(scene_->loadedShared()); });

    buildMenus();
    buildFilterBar();
    QSettings s;
    restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray());
    restoreState(s.value(QStringLiteral("window/state")).toByteArray());
    if (!s.contains(QStringLiteral("window/geometry"))) {
        resize(1400, 860);
        // The graphs get most of the height; the stage board and the diagnosis share the rest.
        auto* stages = findChild<QDockWidget*>(QStringLiteral("stages"));
        auto* diagnosis = findChild<QDockWidget*>(QStringLiteral("diagnosis"));
        if (stages) resizeDocks({stages}, {320}, Qt::Vertical);
        if (stages && diagnosis) resizeDocks({stages, diagnosis}, {560, 840}, Qt::Horizontal);
    }
    applyTheme(s.value(QStringLiteral("view/dark"), false).toBool());
    scene_->setShowAllLineage(s.value(QStringLiteral("view/allLineage"), true).toBool());
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
    file->addAction(tr("Re&load"), QKeySequence(Qt::CTRL | Qt::Key_R), this, [this] {
        if (!currentLogical_.isEmpty()) openNnScalerPair(currentLogical_, currentPath_);
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
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    auto* view = menuBar()->addMenu(tr("&View"));
    view->addAction(tr("Zoom &In"), QKeySequence(Qt::CTRL | Qt::Key_Equal), view_, &GraphView::zoomIn);
    view->addAction(tr("Zoom &Out"), QKeySequence(Qt::CTRL | Qt::Key_Minus), view_, &GraphView::zoomOut);
    view->addAction(tr("&Fit"), QKeySequence(Qt::CTRL | Qt::Key_0), view_, &GraphView::fitAll);
    view->addAction(tr("&Actual Size (100 %)"), QKeySequence(Qt::CTRL | Qt::Key_1), view_, &GraphView::zoomActual);
    view->addSeparator();
    auto* findAction = view->addAction(tr("&Find..."), QKeySequence::Find, this, [this] {
        findEdit_->setFocus();
        findEdit_->selectAll();
    });
    (void)findAction;
    auto* lineage = view->addAction(tr("Show &All Lineage Edges"));
    lineage->setCheckable(true);
    lineage->setChecked(QSettings().value(QStringLiteral("view/allLineage"), true).toBool());
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
    tb->addAction(tr("Fit"), view_, &GraphView::fitAll);
    tb->addAction(tr("100 %"), view_, &GraphView::zoomActual);
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
            return loadOpenedPlan(session::openedFromPlan(std::move(generated.plan), {path, {}}, generated.seconds), error, kMaxWrittenOutOps, control);
        },
        tr("Generating %1").arg(QString::fromStdString(options.model)));
}

void MainWindow::openNnScalerPair(const QString& logicalPath, const QString& parallelPath) {
    const QString logical = QFileInfo(logicalPath).absoluteFilePath(), parallel = QFileInfo(parallelPath).absoluteFilePath();
    startJob([logical, parallel](QString* error, const LayoutControl* control) {
                 return loadNnScalerPair(logical, parallel, error, kMaxWrittenOutOps, control);
             },
             tr("Mapping %1 onto %2").arg(QFileInfo(parallel).fileName(), QFileInfo(logical).fileName()));
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
        // A re-layout that fails (one past the layout bound) keeps the view on screen.
        const QString msg = error.isEmpty() ? (open ? tr("The plan could not be opened.") : tr("The view could not be laid out.")) : error;
        statusPlan_->setText(open ? tr("Failed to open the plan") : tr("Layout refused; the view is unchanged"));
        emit loadFailed(msg);
        if (isVisible()) QMessageBox::warning(this, open ? tr("Cannot open plan") : tr("Cannot lay out this view"), msg);
        updateStatus();
        return;
    }
    // A re-layout of the plan on screen keeps the filters and the view; a new (or reloaded) plan resets them.
    const bool samePlan = scene_->loaded() && scene_->loaded()->plan == loaded->plan;
    currentPath_ = loaded->path();
    currentLogical_ = loaded->logicalPath();
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
    if (!samePlan) view_->showStart();
    if (pendingReveal_) {
        if (samePlan) reveal(*pendingReveal_);
        else pendingReveal_.reset();
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

void MainWindow::onNodeSelected(int node) { inspector_->show(scene_->loaded(), node); }

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

void MainWindow::toggleRank(std::int32_t rank) {
    if (!scene_->loaded()) return;
    auto options = currentOptions();
    if (!options.collapsedRanks.erase(rank)) options.collapsedRanks.insert(rank);
    relayout(std::move(options));
}

void MainWindow::toggleLayer(const std::string& key) {
    const auto* l = scene_->loaded();
    if (!l) return;
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
    relayout(std::move(options));
}

bool MainWindow::exportImage(const QString& path) {
    if (!scene_->loaded()) return false;
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

void MainWindow::closeEvent(QCloseEvent* e) {
    QSettings s;
    s.setValue(QStringLiteral("window/geometry"), saveGeometry());
    s.setValue(QStringLiteral("window/state"), saveState());
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
