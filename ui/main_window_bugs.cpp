// The bug actions: MainWindow's Bug menu. Inject Bug puts a catalog bug into a copy of the plan on
// screen (in the background), opens the copy and verifies it; Remove Bug reopens the file; Save
// writes the buggy copy. MainWindow's member functions (main_window.hpp), in a file of their own.
#include "main_window.hpp"

#include <QFileDialog>
#include <QMenuBar>
#include <QMessageBox>
#include <QStatusBar>

#include "bug_dialog.hpp"
#include "failure_panel.hpp"
#include "explore/verified_view.hpp"

namespace tv::ui {

void MainWindow::buildBugMenu() {
    auto* menu = menuBar()->addMenu(tr("&Bug"));
    menu->addAction(tr("&Inject Bug..."), QKeySequence(Qt::CTRL | Qt::Key_B), this, [this] {
        const auto* l = scene_->loaded();
        if (!l) return;
        BugDialog dlg(l->verifiedPlan(), this);
        if (dlg.exec() == QDialog::Accepted && !dlg.bug().isEmpty()) injectBug(dlg.bug(), dlg.options());
    })->setObjectName(QStringLiteral("injectBug"));
    removeBugAction_ = menu->addAction(tr("&Remove Bug"), this, [this] {
        if (!currentLogical_.isEmpty()) reopenPair();
        else if (!currentPath_.isEmpty()) openPlan(currentPath_);
    });
    compareOriginalAction_ = menu->addAction(tr("&Compare with Original"), this, [this] { compareWithOriginal(); });
    compareOriginalAction_->setObjectName(QStringLiteral("compareWithOriginal"));
    compareOriginalAction_->setToolTip(tr("The plan with the bug beside the plan it was made from, in one layout, the edit ringed"));
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
            failed.refused = PlanProblem{"", e.what()};
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
            const QString error = QString::fromStdString(injected.refused ? injected.refused->message : std::string("?"));
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
        original_ = opened->mutant ? original_ : opened;  // a bug on a bug compares with the plan before both
        startJob([copy](QString* error, const LayoutControl* control) { return loadOpenedPlan(copy, error, kMaxWrittenOutOps, control); },
                 tr("Opening the plan with %1").arg(bug));
    }, JobTracker::Delivery::Always);
}

}  // namespace tv::ui
