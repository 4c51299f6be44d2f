#include "main_window.hpp"

#include "process/helper_process.hpp"

#include <QApplication>
#include <QComboBox>
#include <QCloseEvent>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QGraphicsItem>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QTableView>
#include <QTimer>
#include <QToolButton>
#include <QPainter>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyleFactory>
#include <QSvgGenerator>
#include <QTextBrowser>
#include <QToolBar>
#include <QVBoxLayout>
#include <QThreadPool>

#include <fstream>

#include "failure_panel.hpp"
#include "find_model.hpp"
#include "graph_view.hpp"
#include "bug_dialog.hpp"
#include "generate_dialog.hpp"
#include "inspector.hpp"
#include "lesson_panel.hpp"
#include "io/plan_json.hpp"
#include "stage_board.hpp"
#include "verification_controller.hpp"
#include "explore/verified_view.hpp"
#include "verify/symmetry.hpp"

namespace tv::ui {

namespace {

QString examplesDir() {
    for (const auto& dir : {QCoreApplication::applicationDirPath() + QStringLiteral("/../share/trainverify-studio/examples"),
                            QStringLiteral(TV_SOURCE_DIR "/resources/examples")})
        if (QDir(dir).exists()) return QDir(dir).canonicalPath();
    return {};
}

QString lessonsDir() {
    for (const auto& dir : {QCoreApplication::applicationDirPath() + QStringLiteral("/../share/trainverify-studio/lessons"),
                            QStringLiteral(TV_SOURCE_DIR "/resources/lessons")})
        if (QDir(dir).exists()) return QDir(dir).canonicalPath();
    return {};
}

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
    connect(findEdit_, &QLineEdit::textChanged, this, &MainWindow::find);
    // A click shows a match (or the collapsed rank or layer holding it); activating it (Enter,
    // double-click) also expands what holds it.
    connect(findList_, &QListView::activated, this, [this](const QModelIndex& i) { activateFindResult(i.row(), true); });
    connect(findList_, &QListView::clicked, this, [this](const QModelIndex& i) { activateFindResult(i.row(), false); });

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

bool MainWindow::openLesson(const QString& id, bool buggy) {
    for (const auto& lesson : lessons_) {
        if (QString::fromStdString(lesson.id) != id) continue;
        pendingLesson_ = lesson;  // shown when its plan is open
        openPlan(QString::fromStdString(buggy ? lesson.buggy : lesson.correct));
        return true;
    }
    return false;
}

void MainWindow::buildVerification() {
    // Lessons: read once; a broken manifest says what and where in the status bar.
    const auto dir = lessonsDir();
    if (!dir.isEmpty()) {
        auto list = loadLessons(dir.toStdString());
        lessons_ = std::move(list.lessons);
        if (!list.problems.empty()) statusBar()->showMessage(QString::fromStdString(list.problems.front()), 15000);
    }
    lessonPanel_ = new LessonPanel(this);
    lessonDock_ = new QDockWidget(tr("Lesson"), this);
    lessonDock_->setObjectName(QStringLiteral("lesson"));
    lessonDock_->setWidget(lessonPanel_);
    addDockWidget(Qt::RightDockWidgetArea, lessonDock_);
    // The explanation shares the right-hand column with the inspector, as a tab of its full height.
    if (auto* inspectorDock = findChild<QDockWidget*>(QStringLiteral("inspector"))) tabifyDockWidget(inspectorDock, lessonDock_);
    lessonDock_->hide();
    connect(lessonPanel_, &LessonPanel::openRequested, this, [this](const QString& lessonId, bool buggy) { openLesson(lessonId, buggy); });

    verifier_ = new VerificationController(this);
    connect(verifier_, &VerificationController::stagesUpdated, this, &MainWindow::onStagesUpdated);
    connect(verifier_, &VerificationController::finished, this, &MainWindow::onVerified);

    board_ = new StageBoard(this);
    auto* boardDock = new QDockWidget(tr("Stages"), this);
    boardDock->setObjectName(QStringLiteral("stages"));
    boardDock->setWidget(board_);
    addDockWidget(Qt::BottomDockWidgetArea, boardDock);
    connect(board_, &StageBoard::stageActivated, this, &MainWindow::focusStage);

    failurePanel_ = new FailurePanel(this);
    auto* failureDock = new QDockWidget(tr("Diagnosis"), this);
    failureDock->setObjectName(QStringLiteral("diagnosis"));
    failureDock->setWidget(failurePanel_);
    addDockWidget(Qt::BottomDockWidgetArea, failureDock);
    splitDockWidget(boardDock, failureDock, Qt::Horizontal);

    progress_ = new QProgressBar(this);
    progress_->setMaximumWidth(220);
    progress_->setFormat(tr("%v of %m stages"));
    progress_->setVisible(false);
    cancelButton_ = new QToolButton(this);
    cancelButton_->setText(tr("Cancel"));
    cancelButton_->setToolTip(tr("Stop verifying (Shift+F5)"));
    cancelButton_->setVisible(false);
    connect(cancelButton_, &QToolButton::clicked, this, &MainWindow::cancelVerification);
    statusBar()->addPermanentWidget(progress_);
    statusBar()->addPermanentWidget(cancelButton_);

    auto* menu = menuBar()->addMenu(tr("&Verify"));
    verifyAction_ = menu->addAction(tr("&Verify"), QKeySequence(Qt::Key_F5), this, &MainWindow::verify);
    verifyAction_->setObjectName(QStringLiteral("verify"));
    verifyAction_->setToolTip(tr("Prove the parallel plan equivalent to the logical plan, stage by stage (F5)"));
    cancelAction_ = menu->addAction(tr("&Cancel Verification"), QKeySequence(Qt::SHIFT | Qt::Key_F5), this, &MainWindow::cancelVerification);
    cancelAction_->setObjectName(QStringLiteral("cancelVerification"));
    menu->addSeparator();
    menu->addAction(tr("Go to &Failure"), QKeySequence(Qt::Key_F8), this, [this] {
        if (report_ && report_->failure && report_->failure->stage != kNone) board_->selectStage(report_->failure->stage);
        applyVerificationToScene();
        const auto marks = scene_->marked(NodeMark::FailingOp);
        if (!marks.empty()) view_->centerOnItem(scene_->itemForNode(marks.front()));
    });
    menu->addAction(tr("&Next Step"), QKeySequence(Qt::Key_F10), failurePanel_, &FailurePanel::next);
    menu->addAction(tr("&Previous Step"), QKeySequence(Qt::SHIFT | Qt::Key_F10), failurePanel_, &FailurePanel::previous);
    menu->addAction(tr("Go to &Divergence"), QKeySequence(Qt::Key_F9), failurePanel_, &FailurePanel::goToDivergence);
    connect(failurePanel_, &FailurePanel::stepChanged, this, &MainWindow::showStep);
    menu->addSeparator();
    // The file's extension picks the format (exportReport).
    auto exportAs = [this](const QString& filter) {
        auto path = QFileDialog::getSaveFileName(this, tr("Export Report"), QString(), filter);
        if (!path.isEmpty() && !exportReport(path)) QMessageBox::warning(this, tr("Export"), tr("Could not write %1").arg(path));
    };
    exportJsonAction_ = menu->addAction(tr("Export Report as &JSON..."), this, [exportAs, this] { exportAs(tr("JSON (*.json)")); });
    exportHtmlAction_ = menu->addAction(tr("Export Report as &HTML..."), this, [exportAs, this] { exportAs(tr("HTML page (*.html)")); });
    updateVerifyActions();
}

void MainWindow::buildBugMenu() {
    auto* menu = menuBar()->addMenu(tr("&Bug"));
    menu->addAction(tr("&Inject Bug..."), QKeySequence(Qt::CTRL | Qt::Key_B), this, [this] {
        const auto* l = scene_->loaded();
        if (!l) return;
        BugDialog dlg(l->verifiedPlan(), this);
        if (dlg.exec() == QDialog::Accepted && !dlg.bug().isEmpty()) injectBug(dlg.bug(), dlg.options());
    })->setObjectName(QStringLiteral("injectBug"));
    removeBugAction_ = menu->addAction(tr("&Remove Bug"), this, [this] {
        if (!currentLogical_.isEmpty()) openNnScalerPair(currentLogical_, currentPath_);
        else if (!currentPath_.isEmpty()) openPlan(currentPath_);
    });
    saveBugAction_ = menu->addAction(tr("&Save Buggy Plan As..."), this, [this] {
        auto m = mutant();
        if (!m) return;
        auto path = QFileDialog::getSaveFileName(this, tr("Save Buggy Plan"), QString(), tr("TrainVerify plans (*.json)"));
        if (path.isEmpty()) return;
        std::string error;
        if (!session::writeFileAtomically(path.toStdString(), m->document.dump(1) + "\n", &error))
            QMessageBox::warning(this, tr("Save"), QString::fromStdString(error));
    });
}

std::shared_ptr<const bugs::Mutant> MainWindow::mutant() const {
    const auto* l = scene_->loaded();
    return l ? l->mutant() : nullptr;
}

void MainWindow::injectBug(const QString& bug, const bugs::MutateOptions& options) {
    const auto* l = scene_->loaded();
    if (!l) return;
    auto opened = l->opened;
    const auto name = bug.toStdString();
    statusBar()->showMessage(tr("Injecting %1...").arg(bug));
    auto work = [opened, name, options]() -> session::InjectedBug {
        try {
            return session::injectBug(*opened, name, options);
        } catch (const std::exception& e) {
            // Out of memory while copying: said, never a crash of the Studio.
            session::InjectedBug failed;
            failed.error = e.what();
            return failed;
        }
    };
    // Every result is delivered: the plan it was made for decides whether it still applies.
    bugJobs_.start(std::move(work), [this, bug, opened](quint64, session::InjectedBug injected) {
        if (!scene_->loaded() || scene_->loaded()->opened != opened) {
            // Another plan was opened meanwhile: the bug was for the one that is gone.
            statusBar()->showMessage(tr("%1 was not injected: another plan was opened meanwhile.").arg(bug), 8000);
            emit bugInjected(false, tr("another plan was opened meanwhile"));
            return;
        }
        if (!injected.mutant) {
            const QString error = QString::fromStdString(injected.error);
            statusBar()->showMessage(tr("Cannot inject %1: %2").arg(bug, error), 10000);
            if (isVisible()) QMessageBox::warning(this, tr("Inject Bug"), tr("Cannot inject %1:\n%2").arg(bug, error));
            emit bugInjected(false, error);
            return;
        }
        const auto& m = *injected.mutant;
        const QString change = QString::fromStdString(m.change);
        emit bugInjected(true, change);
        if (!injected.opened) {
            // The reader rejects the copy (a shape mismatch): nothing new to draw; the plan stays on
            // screen with the edited ops marked, and the diagnosis says what the reader found.
            auto report = std::make_shared<VerifyReport>(invalidReport(m.problems));
            bugVerdict_ = QString::fromStdString(session::judgeBug(m, *report).sentence());
            report_ = report;
            failurePanel_->showReport(*report, tr("Bug lab: %1 %2").arg(change, bugVerdict_));
            pins_.clear();
            focusedStage_ = kNone;
            for (const auto& op : m.expect.edited)
                if (const OpId id = drawnOp(*scene_->loaded()->plan, scene_->loaded()->plan->parallel, op); id != kNone) pins_.push_back({ViewSide::Parallel, id, NodeMark::Injected});
            applyVerificationToScene();
            updateVerifyActions();
            emit verificationFinished();
            return;
        }
        auto copy = injected.opened;
        startJob([copy](QString* error, const LayoutControl* control) { return loadOpenedPlan(copy, error, kMaxWrittenOutOps, control); },
                 tr("Opening the plan with %1").arg(bug));
    }, JobTracker::Delivery::Always);
}

bool MainWindow::verifying() const { return verifier_ && verifier_->running() && verifyRun_ == verifier_->currentRun(); }

void MainWindow::updateVerifyActions() {
    const bool plan = scene_->loaded() != nullptr;
    verifyAction_->setEnabled(plan);
    cancelAction_->setEnabled(verifying());
    cancelButton_->setVisible(verifying());
    progress_->setVisible(verifying());
    exportJsonAction_->setEnabled(report_ != nullptr);
    if (removeBugAction_) removeBugAction_->setEnabled(mutant() != nullptr);
    if (saveBugAction_) saveBugAction_->setEnabled(mutant() != nullptr);
    exportHtmlAction_->setEnabled(report_ != nullptr);
}

void MainWindow::verify() {
    const auto* l = scene_->loaded();
    if (!l) return;
    report_.reset();
    pins_.clear();
    focusedStage_ = kNone;
    if (!l->mutant()) bugVerdict_.clear();
    scene_->setMarks({});
    board_->model()->startRun();
    progress_->setRange(0, board_->model()->rowCount());
    progress_->setValue(0);
    failurePanel_->showRunning();
    auto options = verifyOptions_;
    options.check.keepTrace = true;  // the stepper replays a failing stage
    verifyRun_ = verifier_->start(l->opened, std::move(options));
    statusBar()->showMessage(tr("Verifying %n stage(s)...", nullptr, board_->model()->rowCount()));
    applyVerificationToScene();
    updateVerifyActions();
}

void MainWindow::cancelVerification() {
    if (!verifying()) return;
    verifier_->cancel();
    statusBar()->showMessage(tr("Cancelling: the solver processes are being stopped..."));
}

void MainWindow::onStagesUpdated(quint64 run, const QVector<StageUpdate>& updates) {
    if (run != verifyRun_) return;
    board_->model()->apply(updates);
    progress_->setValue(static_cast<int>(board_->model()->done()));
    applyVerificationToScene();
}

void MainWindow::onVerified(quint64 run, std::shared_ptr<const VerifyReport> report) {
    if (run != verifyRun_ || !report) {
        updateVerifyActions();
        return;
    }
    const auto* l = scene_->loaded();
    report_ = report;
    if (report->results.size() == static_cast<std::size_t>(board_->model()->rowCount())) board_->model()->finish(*report);
    else board_->model()->abort();  // the engine stopped before giving stage results
    progress_->setValue(progress_->maximum());
    QString where;
    int primary = -1;
    if (report->failure && l) failureMarks(*report->failure, &primary, &where);
    if (l && l->mutant() && !report->cancelled) {
        bugVerdict_ = QString::fromStdString(session::judgeBug(*l->mutant(), *report).sentence());
        where = (where.isEmpty() ? QString() : where + QStringLiteral(" ")) + tr("Bug lab: %1 (%2) %3")
                    .arg(QString::fromStdString(l->mutant()->bug), QString::fromStdString(l->mutant()->change), bugVerdict_);
    }
    failurePanel_->showReport(*report, where);
    const auto summary = reportToText(*report);
    statusBar()->showMessage(QString::fromStdString(summary.substr(0, summary.find('\n'))), 10000);
    if (report->failure && report->failure->stage != kNone) board_->selectStage(report->failure->stage);
    applyVerificationToScene();
    // Take the user to the failing shard: expand what folds it, select and centre it.
    if (report->failure && l && primary >= 0) {
        const auto& n = l->view.nodes[primary];
        if (n.kind == ViewNodeKind::CollapsedRank || n.kind == ViewNodeKind::CollapsedLayer) {
            const OpId op = locateFailure(*l->plan, *report->failure).failingOp;
            if (op != kNone) {
                revealSteps_ = 0;
                reveal(FindHit{ViewSide::Parallel, true, op, primary});
            }
        } else {
            scene_->selectNode(primary);
            // Both the failing op and its logical counterpart in sight when they fit, else the op.
            QRectF both = scene_->itemForNode(primary)->sceneBoundingRect();
            for (int n : scene_->marked(NodeMark::Counterpart)) both = both.united(scene_->itemForNode(n)->sceneBoundingRect());
            const QRectF visible = view_->mapToScene(view_->viewport()->rect()).boundingRect();
            if (both.width() < visible.width() * 0.9 && both.height() < visible.height() * 0.9) view_->centerOn(both.center());
            else view_->centerOnItem(scene_->itemForNode(primary));
        }
    }
    updateVerifyActions();
    emit verificationFinished();
}

void MainWindow::showStep(const QString& parallelOp, const QString& logicalOp) {
    const auto* l = scene_->loaded();
    if (!l) return;
    pins_.clear();
    focusedStage_ = kNone;
    const OpId pop = drawnOp(*l->plan, l->plan->parallel, parallelOp.toStdString());
    const OpId lop = drawnOp(*l->plan, l->plan->logical, logicalOp.toStdString());
    int pnode = -1;
    if (pop != kNone) {
        pins_.push_back({ViewSide::Parallel, pop, NodeMark::Focus});
        pnode = nodeShowing(l->view, FindHit{ViewSide::Parallel, true, pop, -1});
    }
    if (lop != kNone) pins_.push_back({ViewSide::Logical, lop, NodeMark::Focus});
    applyVerificationToScene();
    if (pnode >= 0) {
        view_->centerOnItem(scene_->itemForNode(pnode));
        statusBar()->showMessage(tr("Step: %1").arg(parallelOp), 4000);
    }
}

std::vector<std::pair<int, NodeMark>> MainWindow::failureMarks(const Failure& f, int* primary, QString* where) const {
    std::vector<std::pair<int, NodeMark>> marks;
    const auto* l = scene_->loaded();
    if (!l) return marks;
    const auto& plan = *l->plan;
    const auto focus = locateFailure(plan, f);
    if (focus.failingOp != kNone) {
        const int node = nodeShowing(l->view, FindHit{ViewSide::Parallel, true, focus.failingOp, -1});
        if (primary) *primary = node;
        marks.emplace_back(node, NodeMark::FailingOp);
        if (where && focus.failingOpAsStored)
            *where = tr("%1 is an instance of the stored op %2, which the graph draws for every lane.")
                         .arg(QString::fromStdString(f.parallelOp), QString::fromStdString(plan.opName(plan.parallel, focus.failingOp)));
    } else if (where && !f.parallelOp.empty()) {
        *where = tr("%1 is not drawn in this view.").arg(QString::fromStdString(f.parallelOp));
    }
    if (focus.counterpart != kNone) marks.emplace_back(nodeShowing(l->view, FindHit{ViewSide::Logical, true, focus.counterpart, -1}), NodeMark::Counterpart);
    if (focus.otherEnd != kNone) {
        // The other end: the tensor's node if lineage draws it, else the op producing it, else the ops reading it.
        const Graph& g = focus.otherEndLogical ? plan.logical : plan.parallel;
        const auto side = focus.otherEndLogical ? ViewSide::Logical : ViewSide::Parallel;
        const TensorId t = focus.otherEnd;
        int node = nodeShowing(l->view, FindHit{side, false, t, -1});
        if (node < 0 && g.tensors[t].producer != kNone) node = nodeShowing(l->view, FindHit{side, true, g.tensors[t].producer, -1});
        if (node >= 0) marks.emplace_back(node, NodeMark::OtherEnd);
        else
            for (OpId c : g.consumers(t)) marks.emplace_back(nodeShowing(l->view, FindHit{side, true, c, -1}), NodeMark::OtherEnd);
    }
    if (primary && *primary < 0 && !marks.empty()) *primary = marks.front().first;
    return marks;
}

void MainWindow::applyVerificationToScene() {
    const auto* l = scene_->loaded();
    if (!l) return;
    auto* model = board_->model();
    if (!model->verified() || model->rowCount() != static_cast<int>(l->verifiedStages ? l->verifiedStages->stages.size() : 0)) {
        scene_->setStageStatuses({});
    } else {
        std::vector<StageStatus> drawn(l->drawnToVerified.size(), StageStatus::Queued);
        for (std::size_t d = 0; d < drawn.size(); ++d)
            if (l->drawnToVerified[d] != kNone) drawn[d] = model->status(l->drawnToVerified[d]);
        scene_->setStageStatuses(drawn);
    }
    std::vector<std::pair<int, NodeMark>> marks;
    for (const auto& p : pins_) marks.emplace_back(nodeShowing(l->view, FindHit{p.side, true, p.op, -1}), p.mark);
    if (focusedStage_ != kNone)
        for (int n : stageNodes(focusedStage_)) marks.emplace_back(n, NodeMark::Focus);
    if (l->mutant())
        for (const auto& op : l->mutant()->expect.edited)
            if (const OpId id = drawnOp(*l->plan, l->plan->parallel, op); id != kNone)
                marks.emplace_back(nodeShowing(l->view, FindHit{ViewSide::Parallel, true, id, -1}), NodeMark::Injected);
    if (report_ && report_->failure) {
        auto f = failureMarks(*report_->failure, nullptr, nullptr);
        marks.insert(marks.end(), f.begin(), f.end());
    }
    scene_->setMarks(marks);
}

std::vector<int> MainWindow::stageNodes(std::uint32_t sourceStage) const {
    std::vector<int> nodes;
    const auto* l = scene_->loaded();
    if (!l) return nodes;
    for (std::size_t d = 0; d < l->drawnToVerified.size() && d < l->view.stageNodes.size(); ++d)
        if (l->drawnToVerified[d] == sourceStage) nodes.insert(nodes.end(), l->view.stageNodes[d].begin(), l->view.stageNodes[d].end());
    return nodes;
}

void MainWindow::focusStage(std::uint32_t sourceStage) {
    const auto* l = scene_->loaded();
    if (!l || !l->verifiedStages || sourceStage >= l->verifiedStages->stages.size()) return;
    pins_.clear();
    focusedStage_ = sourceStage;
    const auto nodes = stageNodes(sourceStage);
    QRectF box;
    for (int n : nodes)
        if (auto* item = scene_->itemForNode(n)) box = box.isNull() ? item->sceneBoundingRect() : box.united(item->sceneBoundingRect());
    applyVerificationToScene();
    if (!box.isNull()) view_->centerOn(box.center());
    statusBar()->showMessage(nodes.empty() ? tr("Stage %1 has no op drawn in this view.").arg(sourceStage)
                                           : tr("Stage %1: %n node(s) marked on both sides.", nullptr, static_cast<int>(nodes.size())).arg(sourceStage),
                             5000);
}

bool MainWindow::exportReport(const QString& path) {
    const auto* l = scene_->loaded();
    if (!report_ || !l) return false;
    const bool html = path.endsWith(QStringLiteral(".html"), Qt::CaseInsensitive) || path.endsWith(QStringLiteral(".htm"), Qt::CaseInsensitive);
    // The command line's schema (`trainverify verify PLAN --trace --json`), or its HTML page.
    const auto& source = l->opened->source;
    const std::string text = html ? session::reportHtml(source, l->opened.get(), *report_)
                                  : session::reportDocument(source, l->opened.get(), *report_).dump(2) + "\n";
    return session::writeFileAtomically(path.toStdString(), text, nullptr);
}

void MainWindow::buildFilterBar() {
    auto* bar = new QToolBar(tr("Filters"), this);
    bar->setObjectName(QStringLiteral("filters"));
    addToolBarBreak();
    addToolBar(bar);
    bar->addWidget(new QLabel(tr(" Filter: "), bar));
    QAction* lastAction = nullptr;
    auto combo = [&](const QString& tip) {
        auto* c = new QComboBox(bar);
        c->setToolTip(tip);
        c->setSizeAdjustPolicy(QComboBox::AdjustToContents);
        lastAction = bar->addWidget(c);
        connect(c, &QComboBox::currentIndexChanged, this, &MainWindow::filterBarChanged);
        return c;
    };
    filterRank_ = combo(tr("Show one rank"));
    const QString coordTips[kAxes.size()] = {tr("Data-parallel coordinate"),     tr("Tensor-parallel coordinate"),
                                             tr("Pipeline-parallel coordinate"), tr("Sequence-parallel coordinate"),
                                             tr("Context-parallel coordinate"),  tr("Expert-parallel coordinate")};
    for (std::size_t k = 0; k < kAxes.size(); ++k) {
        filterCoord_[k] = combo(coordTips[k]);
        filterCoord_[k]->setObjectName(QStringLiteral("filter-") + QString::fromLatin1(toString(kAxes[k]).data()));
        filterCoordActions_[k] = lastAction;
    }
    filterMicrobatch_ = combo(tr("Microbatch"));
    filterPhase_ = combo(tr("Forward, backward, optimizer or communication ops"));
    filterKind_ = new QLineEdit(bar);
    filterKind_->setPlaceholderText(tr("op kind, e.g. all_reduce"));
    filterKind_->setClearButtonEnabled(true);
    filterKind_->setMaximumWidth(200);
    bar->addWidget(filterKind_);
    connect(filterKind_, &QLineEdit::textChanged, this, &MainWindow::filterBarChanged);
    resetFilterBar();
}

void MainWindow::resetFilterBar() {
    updatingFilterBar_ = true;
    const auto* l = scene_->loaded();
    auto fill = [](QComboBox* c, const QString& any, int n, const QString& prefix) {
        c->clear();
        c->addItem(any, -1);
        for (int i = 0; i < n; ++i) c->addItem(prefix + QString::number(i), i);
    };
    const int ranks = l ? static_cast<int>(l->plan->ranks.size()) : 0;
    fill(filterRank_, tr("any rank"), ranks, tr("rank "));
    for (std::size_t k = 0; k < kAxes.size(); ++k) {
        const auto name = QString::fromLatin1(toString(kAxes[k]).data());
        fill(filterCoord_[k], tr("any %1").arg(name), l ? l->plan->mesh.at(kAxes[k]) : 0, name + QStringLiteral("="));
        // dp, tp and pp always have their place; the other axes only when the plan uses them
        const bool core = kAxes[k] == Axis::DP || kAxes[k] == Axis::TP || kAxes[k] == Axis::PP;
        if (filterCoordActions_[k]) filterCoordActions_[k]->setVisible(core ? (!l || l->plan->mesh.at(kAxes[k]) > 1) : (l && l->plan->mesh.at(kAxes[k]) > 1));
    }
    fill(filterMicrobatch_, tr("any microbatch"), l ? l->plan->microbatches : 0, tr("mb "));
    filterPhase_->clear();
    filterPhase_->addItem(tr("any phase"), -1);
    for (auto ph : {Phase::Forward, Phase::Backward, Phase::Optimizer, Phase::Communication})
        filterPhase_->addItem(QString::fromLatin1(toString(ph).data()), static_cast<int>(ph));
    filterKind_->clear();
    updatingFilterBar_ = false;
}

void MainWindow::filterBarChanged() {
    if (updatingFilterBar_) return;
    ViewFilter f;
    f.rank = filterRank_->currentData().toInt();
    for (std::size_t k = 0; k < kAxes.size(); ++k) f.coordinate[static_cast<std::size_t>(kAxes[k])] = filterCoord_[k]->currentData().toInt();
    f.microbatch = filterMicrobatch_->currentData().toInt();
    f.phase = filterPhase_->currentData().toInt();
    f.opKind = filterKind_->text().trimmed().toStdString();
    const int shown = scene_->setFilter(f);
    if (scene_->loaded())
        statusBar()->showMessage(f.empty() ? tr("Filters cleared") : tr("%1 of %2 nodes match the filters").arg(shown).arg(scene_->nodeItemCount()), 5000);
}

int MainWindow::applyFilter(const ViewFilter& f) {
    updatingFilterBar_ = true;
    auto pick = [](QComboBox* c, int value) { c->setCurrentIndex(std::max(0, c->findData(value))); };
    pick(filterRank_, f.rank);
    for (std::size_t k = 0; k < kAxes.size(); ++k) pick(filterCoord_[k], f.coordinate[static_cast<std::size_t>(kAxes[k])]);
    pick(filterMicrobatch_, f.microbatch);
    pick(filterPhase_, f.phase);
    filterKind_->setText(QString::fromStdString(f.opKind));
    updatingFilterBar_ = false;
    const int shown = scene_->setFilter(f);
    statusBar()->showMessage(f.empty() ? tr("Filters cleared") : tr("%1 of %2 nodes match the filters").arg(shown).arg(scene_->nodeItemCount()), 5000);
    return shown;
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
        resetFilterBar();
        scene_->setFilter({});
    }
    inspector_->show(nullptr, -1);
    if (!samePlan) {
        // A new plan (or the same file reloaded): its stages start unverified. A run on the old
        // plan is cancelled; proofs it made stay in the cache for the next F5.
        if (verifying()) verifier_->cancel();
        verifyRun_ = 0;
        report_.reset();
        pins_.clear();
        focusedStage_ = kNone;
        board_->model()->setPlan(loaded->verifiedPlan(), loaded->verifiedStages);
        failurePanel_->clear();
        // A lesson shows beside its own plans only, once one of them is open.
        const auto path = QFileInfo(loaded->path()).canonicalFilePath().toStdString();
        if (pendingLesson_ && (path == pendingLesson_->buggy || path == pendingLesson_->correct)) {
            lessonPanel_->showLesson(*pendingLesson_, path == pendingLesson_->buggy);
            lessonDock_->show();
            lessonDock_->raise();
        } else if (const auto* lesson = lessonPanel_->lesson(); !lesson || (path != lesson->buggy && path != lesson->correct)) {
            lessonDock_->hide();
        }
        pendingLesson_.reset();
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
    view_->centerOnItem(scene_->itemForNode(hit->node));
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
    view_->centerOnItem(scene_->itemForNode(node));
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

void MainWindow::showGallery() {
    QDialog dlg(this);
    dlg.setWindowTitle(tr("Example Gallery"));
    auto* layout = new QVBoxLayout(&dlg);
    auto* list = new QListWidget(&dlg);
    auto* about = new QTextBrowser(&dlg);
    layout->addWidget(new QLabel(tr("Guided lessons (a buggy plan, its correct twin and an explanation), then the bundled example plans, "
                                    "each with the verdict it should get."),
                                 &dlg));
    layout->addWidget(list, 2);
    layout->addWidget(about, 1);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Open | QDialogButtonBox::Cancel, &dlg);
    layout->addWidget(buttons);
    for (const auto& lesson : lessons_) {
        auto* item = new QListWidgetItem(tr("Lesson: %1").arg(QString::fromStdString(lesson.title)), list);
        item->setData(Qt::UserRole + 2, QString::fromStdString(lesson.id));
        item->setData(Qt::UserRole + 1, tr("<h3>%1</h3>%2<p><i>Opens the buggy plan with this explanation beside the graphs; press F5.</i></p>")
                                            .arg(QString::fromStdString(lesson.title).toHtmlEscaped(), QString::fromStdString(lesson.explanation)));
        QFont f = item->font();
        f.setBold(true);
        item->setFont(f);
    }
    const QDir dir(examplesDir());
    for (const auto& fi : dir.entryInfoList({QStringLiteral("*.json")}, QDir::Files, QDir::Name)) {
        std::ifstream in(fi.absoluteFilePath().toStdString());
        nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
        auto* item = new QListWidgetItem(fi.completeBaseName(), list);
        item->setData(Qt::UserRole, fi.absoluteFilePath());
        QString desc = doc.is_object() && doc.contains("description") && doc["description"].is_string()
                           ? QString::fromStdString(doc["description"].get<std::string>())
                           : QString();
        QString verdict;
        if (doc.is_object() && doc.contains("expect") && doc["expect"].is_object() && doc["expect"].contains("verdict") &&
            doc["expect"]["verdict"].is_string())
            verdict = QString::fromStdString(doc["expect"]["verdict"].get<std::string>());
        item->setData(Qt::UserRole + 1, QStringLiteral("<p>%1</p><p><b>%2</b> %3</p>").arg(desc.toHtmlEscaped(), tr("Expected verdict:"), verdict.toHtmlEscaped()));
    }
    connect(list, &QListWidget::currentItemChanged, about, [about](QListWidgetItem* item) {
        about->setHtml(item ? item->data(Qt::UserRole + 1).toString() : QString());
    });
    connect(list, &QListWidget::itemDoubleClicked, &dlg, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::accepted, &dlg, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dlg, &QDialog::reject);
    list->setCurrentRow(0);
    dlg.resize(640, 480);
    if (dlg.exec() != QDialog::Accepted || !list->currentItem()) return;
    const auto lesson = list->currentItem()->data(Qt::UserRole + 2).toString();
    if (!lesson.isEmpty()) openLesson(lesson, true);
    else openPlan(list->currentItem()->data(Qt::UserRole).toString());
}

void MainWindow::applyTheme(bool dark) {
    dark_ = dark;
    QPalette pal;
    if (dark) {
        pal.setColor(QPalette::Window, QColor(45, 45, 50));
        pal.setColor(QPalette::WindowText, QColor(230, 230, 235));
        pal.setColor(QPalette::Base, QColor(32, 32, 36));
        pal.setColor(QPalette::AlternateBase, QColor(45, 45, 50));
        pal.setColor(QPalette::Text, QColor(230, 230, 235));
        pal.setColor(QPalette::Button, QColor(55, 55, 60));
        pal.setColor(QPalette::ButtonText, QColor(230, 230, 235));
        pal.setColor(QPalette::Highlight, QColor(0, 120, 215));
        pal.setColor(QPalette::HighlightedText, Qt::white);
        pal.setColor(QPalette::ToolTipBase, QColor(55, 55, 60));
        pal.setColor(QPalette::ToolTipText, QColor(230, 230, 235));
    } else {
        pal = QApplication::style()->standardPalette();
    }
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
