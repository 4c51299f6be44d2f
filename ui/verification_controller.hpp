// Runs the staged verifier in the background for the Studio: one VerificationRun at a time on a
// pool of its own (so layout jobs are never starved), results passed to the GUI thread as plain
// values in batches, proofs kept across runs so re-verifying after a reload checks only what
// changed. No Z3 object ever reaches the GUI thread.
#pragma once

#include <QObject>
#include <QThreadPool>
#include <QTimer>
#include <QVector>

#include <memory>
#include <mutex>
#include <vector>

#include "job_tracker.hpp"
#include "session/session.hpp"
#include "verify/verifier.hpp"

namespace tv::ui {

/// One stage's news: started, or finished with a status.
struct StageUpdate {
    std::uint32_t stage = 0;
    StageStatus status = StageStatus::Queued;
    double seconds = 0;
    bool cached = false;
    std::uint32_t sameAs = kNone;
    QString failureKind;  ///< e.g. "counterexample" when failed
};

class VerificationController : public QObject {
    Q_OBJECT
public:
    explicit VerificationController(QObject* parent = nullptr);
    /// Cancels the run in progress and waits for it (a solver query stops at its next checkpoint).
    ~VerificationController() override;

    /// Starts verifying the opened plan (kept alive until the run ends) and returns the run's id.
    /// The report is finished as its origin limits it (session::finishReport: an nnScaler pair's
    /// unclaimed final claims). A run in progress is cancelled; its results are no longer delivered.
    quint64 start(std::shared_ptr<const session::OpenedPlan> opened, VerifyOptions options);
    /// Cancels the current run; it finishes soon with `cancelled` set. Thread-safe: may be called
    /// from a callback running on a worker thread.
    void cancel();
    bool running() const { return running_; }
    quint64 currentRun() const { return runs_.newest(); }
    ProofCache& proofs() { return proofs_; }

signals:
    void started(quint64 run);
    /// A batch of updates (at most every 100 ms while a run is in progress).
    void stagesUpdated(quint64 run, const QVector<tv::ui::StageUpdate>& updates);
    void finished(quint64 run, std::shared_ptr<const tv::VerifyReport> report);

private:
    void drain();

    QThreadPool pool_;
    QTimer drainTimer_;
    ProofCache proofs_;
    /// The runs, on the pool (declared after it): a superseded run's report is dropped.
    JobTracker runs_{this, &pool_};
    bool running_ = false;
    std::mutex mutex_;                              ///< guards pending_ and run_
    std::vector<StageUpdate> pending_;
    quint64 pendingRun_ = 0;
    std::shared_ptr<VerificationRun> run_;
};

}  // namespace tv::ui

Q_DECLARE_METATYPE(tv::ui::StageUpdate)
