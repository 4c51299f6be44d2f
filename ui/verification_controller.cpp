#include "verification_controller.hpp"

namespace tv::ui {

VerificationController::VerificationController(QObject* parent) : QObject(parent) {
    qRegisterMetaType<tv::ui::StageUpdate>();
    qRegisterMetaType<std::shared_ptr<const tv::VerifyReport>>();
    // The run spreads its stages over threads of its own; this pool only hosts the run itself
    // (two, so a cancelled run still finishing never delays the next one).
    pool_.setMaxThreadCount(2);
    drainTimer_.setInterval(100);
    connect(&drainTimer_, &QTimer::timeout, this, &VerificationController::drain);
}

VerificationController::~VerificationController() {
    drainTimer_.stop();
    {
        std::lock_guard lock(mutex_);
        pendingRun_ = 0;
        if (run_) run_->cancel();
    }
    pool_.waitForDone();
}

quint64 VerificationController::start(std::shared_ptr<const session::OpenedPlan> opened, VerifyOptions options) {
    const quint64 id = runs_.next();
    {
        std::lock_guard lock(mutex_);
        if (run_) run_->cancel();
        pending_.clear();
        pendingRun_ = id;
    }
    auto userStart = options.onStageStart;
    auto userDone = options.onStageDone;
    // Updates of a superseded run are dropped where they are made, and its callbacks not called
    // (a callback calling cancel() must not reach the newer run).
    options.onStageStart = [this, id, userStart](std::uint32_t stage) {
        {
            std::lock_guard lock(mutex_);
            if (pendingRun_ != id) return;
            pending_.push_back({stage, StageStatus::Running, 0, false, kNone, {}});
        }
        if (userStart) userStart(stage);
    };
    options.onStageDone = [this, id, userDone](const StageResult& r) {
        {
            std::lock_guard lock(mutex_);
            if (pendingRun_ != id) return;
            pending_.push_back({r.stage, r.status, r.reduceSeconds + r.encodeSeconds + r.solveSeconds, r.cached, r.sameAs,
                                r.failure ? QString::fromLatin1(describe(r.failure->kind).data()) : QString()});
        }
        if (userDone) userDone(r);
    };
    options.proofs = &proofs_;
    auto run = std::make_shared<VerificationRun>(*opened->plan, std::move(options));
    {
        std::lock_guard lock(mutex_);
        run_ = run;
    }
    running_ = true;
    drainTimer_.start();

    auto work = [opened, run]() -> std::shared_ptr<const VerifyReport> {
        try {
            auto report = run->run();
            session::finishReport(*opened, report);
            return std::make_shared<const VerifyReport>(std::move(report));
        } catch (const std::exception& e) {
            // Never lose the run silently: an engine error is an inconclusive report saying what.
            auto r = std::make_shared<VerifyReport>();
            r->verdict = Verdict::Inconclusive;
            Failure f;
            f.kind = FailureKind::Inconclusive;
            f.message = std::string("the verifier stopped with an error: ") + e.what();
            r->failure = f;
            return r;
        }
    };
    // Delivered only while no newer run was started: a newer run owns the board.
    [[maybe_unused]] const auto tracked = runs_.start(std::move(work), [this](quint64 done, std::shared_ptr<const VerifyReport> report) {
        drain();
        drainTimer_.stop();
        running_ = false;
        {
            std::lock_guard lock(mutex_);
            run_.reset();
        }
        emit finished(done, std::move(report));
    });
    Q_ASSERT(tracked == id);
    emit started(id);  // after the tracker knows the run: currentRun() is this run for a slot
    return id;
}

void VerificationController::cancel() {
    std::lock_guard lock(mutex_);
    if (run_) run_->cancel();
}

void VerificationController::drain() {
    std::vector<StageUpdate> batch;
    quint64 id = 0;
    {
        std::lock_guard lock(mutex_);
        batch.swap(pending_);
        id = pendingRun_;
    }
    if (batch.empty() || id != runs_.newest()) return;
    emit stagesUpdated(id, QVector<StageUpdate>(batch.begin(), batch.end()));
}

}  // namespace tv::ui
