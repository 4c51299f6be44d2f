// The verification presenter: MainWindow's side of Verify. It builds the stage board, the
// diagnosis and the Verify menu, starts and cancels runs on the VerificationController, and shows
// their results: statuses on the board and on the drawn stages, the failure's marks, the stepper.
// These are MainWindow's member functions (declared in main_window.hpp), kept in a file of their
// own; they share the window's scene, view and report with the load and bug paths.
#include "main_window.hpp"

#include <QDockWidget>
#include <QFileDialog>
#include <QGraphicsItem>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QStatusBar>
#include <QToolButton>

#include "failure_panel.hpp"
#include "dual_view.hpp"
#include "graph_view.hpp"
#include "stage_board.hpp"
#include "verification_controller.hpp"
#include "explore/verified_view.hpp"

namespace tv::ui {

void MainWindow::buildVerification() {
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
    // One band at the bottom, two tabs: the graph keeps the height (a failure raises the diagnosis).
    tabifyDockWidget(boardDock, failureDock);
    boardDock->raise();

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
        if (!marks.empty()) dual_->frame(lineageFrame(marks.front()));
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
    if (compareOriginalAction_) compareOriginalAction_->setEnabled(mutant() != nullptr && original_ != nullptr);
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
    if (report->failure)
        if (auto* dock = findChild<QDockWidget*>(QStringLiteral("diagnosis"))) dock->raise();
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
            // The failing op in the parallel pane, its logical counterpart in the logical pane.
            std::vector<int> both{primary};
            for (int n : scene_->marked(NodeMark::Counterpart)) both.push_back(n);
            dual_->frame(both);
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
    if (pnode < 0) return;
    statusBar()->showMessage(tr("Step: %1").arg(parallelOp), 4000);
    const auto kind = l->view.nodes[pnode].kind;
    if (kind == ViewNodeKind::CollapsedRank || kind == ViewNodeKind::CollapsedLayer) {
        // The step's op is folded into its rank or layer: unfold it, then select it (Find's path).
        revealSteps_ = 0;
        reveal(FindHit{ViewSide::Parallel, true, pop, pnode});
        return;
    }
    scene_->selectNode(pnode);  // the inspector follows the step
    std::vector<int> frame{pnode};
    if (lop != kNone)
        if (int lnode = nodeShowing(l->view, FindHit{ViewSide::Logical, true, lop, -1}); lnode >= 0) frame.push_back(lnode);
    dual_->frame(frame);
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
    // Each side's nodes in its own pane: all of them when they fit (readable), else the one
    // nearest their middle; never the empty space between ranks.
    applyVerificationToScene();
    dual_->frame(nodes);
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

void MainWindow::resetVerification(const LoadedPlan& loaded) {
    // A run on the old plan is cancelled; proofs it made stay in the cache for the next F5.
    if (verifying()) verifier_->cancel();
    verifyRun_ = 0;
    report_.reset();
    pins_.clear();
    focusedStage_ = kNone;
    board_->model()->setPlan(loaded.verifiedPlan(), loaded.verifiedStages);
    failurePanel_->clear();
}

}  // namespace tv::ui
