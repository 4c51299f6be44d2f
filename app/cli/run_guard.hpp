// What a verify run on the command line has around it: the run options verify and mutate --verify
// share, the memory limit, and the guard that Ctrl-C, SIGTERM and the time budget go through.
#pragma once

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "cli/arguments.hpp"
#include "verify/verifier.hpp"

namespace tv::cli {

/// Declares --jobs, --timeout, --query-timeout, --stage-timeout, --memory, --max-stage-elements
/// and --in-process on `args`, each setting its part of `options`.
void addRunOptions(Arguments& args, VerifyOptions& options);

/// Limits this process to `mib` MiB beyond what it has mapped now and the stacks of the threads a
/// run of `jobs` jobs starts (capAddressSpace; the solver processes set their own). One malloc
/// arena: each thread's would reserve 64 MiB of address space. 0: no limit.
void limitMemory(std::uint64_t mib, unsigned jobs);

/// Ctrl-C (SIGINT), SIGTERM and the time budget of a verify command. Z3 installs its own SIGINT
/// handler for the length of a solver call, which only flags that one call, so the signals are
/// blocked in every thread (the mask is set before the verifier starts its workers, which inherit
/// it) and taken by one thread of ours with sigtimedwait. The guard starts before the plan is read.
/// The first signal cancels the run (attached with attach()): unstarted stages are skipped, solver
/// processes killed, running contexts interrupted, and the report says INCONCLUSIVE with what was
/// proven. The budget is the run's own (VerifyOptions::runSeconds); the guard is its last resort.
/// If the run has not ended two seconds after a signal or after the budget (a solver call on a
/// thread that ignores interrupts, or a plan still being read), or on a second signal, the process
/// ends at once: a line saying how far it got, exit 2.
class RunGuard {
public:
    explicit RunGuard(double budgetSeconds);
    ~RunGuard();
    RunGuard(const RunGuard&) = delete;
    RunGuard& operator=(const RunGuard&) = delete;

    /// What a signal cancels, and the progress the last-resort line reports.
    void attach(std::function<void()> cancel, std::function<std::string()> progress);
    void detach();
    /// Seconds left of the budget (0: no budget; at least a millisecond while one is set).
    double secondsLeft() const;
    /// The run has its report: the last resort no longer applies (writing the report and
    /// freeing a large plan may take longer than the 2 s grace past the budget, and the verdict
    /// already printed must stay the only one). A signal from here on ends the process as usual.
    void runFinished();

private:
    void watch();
    [[noreturn]] void end(const std::string& why);

    std::mutex mutex_;
    std::function<void()> cancel_;
    std::function<std::string()> progress_;
    bool pendingCancel_ = false;
    double budget_ = 0;
    std::chrono::steady_clock::time_point budgetEnd_{};
    sigset_t set_{}, old_{};
    std::atomic<bool> finished_{false};
    std::thread thread_;
};

/// Verifies under the guard: a signal cancels the run; the budget left is the run's own.
VerifyReport verifyGuarded(const Plan& plan, VerifyOptions options, RunGuard& guard);

}  // namespace tv::cli
