// A stage's check in a process of its own, so that it can be stopped for certain.
//
// A Z3 call honours its timeout and interrupt() only where it polls for them; some tactics do
// not (tests/data/open: a ring-attention stage ran 10 minutes past a 2 s timeout), and a thread
// cannot be stopped from outside. A process can. The verifier starts one solver process per
// worker, a helper process (process/helper_process.hpp: `PROGRAM --solver-process 3`, never a
// fork of this one, which can deadlock on the locks Z3 keeps: seen, one stage in thirty). It sends the plan once in
// its canonical form; the process reads it with the validating reader and cuts its stages as the
// verifier did. For each job it sends the stage (and, for a stage written out for every replica,
// the stored stages that were written out together, so the process writes them out alike) with
// the stage's structural key: a process whose stage has another key refuses the job, so a plan
// that did not read back identically can never prove a stage it was not asked about. It answers
// with the StageResult as JSON (stageResultToJson).
//
// When the run is cancelled or reaches its deadline, or a stage runs past its own bound, the
// process is killed and the stage is INCONCLUSIVE with the reason; a process that runs out of
// memory or crashes ends only its stage, with the reason, and the next stage gets a new process.
// A solver process ends with the thread that started it, so no solver outlives the verifier.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "process/helper_process.hpp"
#include "verify/check.hpp"

namespace tv {

/// One job for a solver process: stage `stage` of the stored plan (expansion -1), or of the
/// stages written out for every replica from the stored stages `cross` (expansion e >= 0, the
/// same list for every job of that expansion).
struct SolverJob {
    std::int32_t expansion = -1;
    const std::vector<std::uint32_t>* cross = nullptr;
    bool membersOnly = false;  ///< the expansion writes out the stages' members only (expandStages)
    std::uint32_t stage = 0;
    std::string key;              ///< structuralKey of the stage, as the verifier cut it
    CheckOptions check;           ///< timeout already capped at the run's budget
};

class SolverProcess {
public:
    using Clock = std::chrono::steady_clock;

    /// program: an executable that serves `--solver-process FD` (solverProcessMain); planText:
    /// the plan in canonical form (writePlanText); memoryMiB: what the process may allocate
    /// beyond the plan it holds (its address-space limit; Z3's own limit a little below); 0: none.
    SolverProcess(std::string program, std::shared_ptr<const std::string> planText, std::uint64_t memoryMiB);
    ~SolverProcess();  ///< kills the process if it still runs
    SolverProcess(const SolverProcess&) = delete;
    SolverProcess& operator=(const SolverProcess&) = delete;

    /// Runs the job in the process, starting one if none runs, and waits for its result, for the
    /// process to end, for `stop` to become true, or for the deadline. In every case but a result
    /// the process is killed (the next call starts a new one) and the stage is INCONCLUSIVE, its
    /// message saying why: `deadlineReason` at the deadline, the signal or the memory limit when
    /// the process ended; `stopped` is set when `stop` ended it (a cancel). `resultStage` is the
    /// stage id the result carries.
    StageResult run(const SolverJob& job, std::uint32_t resultStage, Clock::time_point deadline, const std::atomic<bool>& stop,
                    const std::string& deadlineReason, bool& stopped);

    /// Starts the process now, if none runs (run() does when needed). A process ends with the
    /// thread that started it: one started here lives as long as the calling thread.
    bool start(std::string& why);
    /// Whether a process runs that the calling thread started (it lives as long as that thread).
    bool startedHere() const { return process_.startedHere(); }
    /// Ends the process, if one runs.
    void stop() { kill(); }

private:
    void kill();
    /// Waits for one reply frame; on anything else returns false with `result` set to the reason.
    bool receive(std::string& frame, std::uint32_t resultStage, Clock::time_point deadline, const std::atomic<bool>& stop,
                 const std::string& deadlineReason, bool& stopped, StageResult& result);
    StageResult ended(std::uint32_t resultStage);

    HelperProcess process_;
    std::shared_ptr<const std::string> planText_;
    std::uint64_t memoryMiB_;
    bool ready_ = false;             ///< the process has read the plan
    std::vector<std::int32_t> sentExpansions_;
};

/// The solver process itself: serves the verifier on socket `fd` until it closes. A program
/// that verifies in solver processes calls this first thing when its arguments are
/// `--solver-process FD` (trainverify and trainverify-studio do). Returns the exit status.
int solverProcessMain(int fd);

}  // namespace tv
