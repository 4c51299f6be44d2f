#include "cli/run_guard.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <thread>
#include <unistd.h>

#include "process/memory_limit.hpp"

namespace tv::cli {

void addRunOptions(Arguments& args, VerifyOptions& options) {
    auto seconds = [](const std::string& name, auto set) {
        return [name, set](const std::string& v) {
            double n = 0;
            if (!parseNumber(v, n)) return name + " needs a number of seconds";
            set(n);
            return std::string();
        };
    };
    const std::string jobs = "--jobs needs a whole number from 1 to 1024";
    args.value({"--jobs"}, jobs, [&options, jobs](const std::string& v) {
        double n = 0;
        if (!parseNumber(v, n) || n < 1 || n > 1024 || n != static_cast<unsigned>(n)) return jobs;
        options.jobs = static_cast<unsigned>(n);
        return std::string();
    });
    args.value({"--timeout"}, "--timeout needs a number of seconds", seconds("--timeout", [&options](double n) { options.runSeconds = n; }));
    args.value({"--query-timeout"}, "--query-timeout needs a number of seconds",
               seconds("--query-timeout", [&options](double n) { options.check.timeoutMs = static_cast<unsigned>(n * 1000); }));
    args.value({"--stage-timeout"}, "--stage-timeout needs a number of seconds",
               seconds("--stage-timeout", [&options](double n) { options.stageSeconds = n; }));
    args.value({"--memory"}, "--memory needs a number of MiB", [&options](const std::string& v) {
        double n = 0;
        if (!parseNumber(v, n)) return std::string("--memory needs a number of MiB");
        if (n < 16 || n != static_cast<double>(static_cast<std::uint64_t>(n))) return std::string("--memory needs a whole number of MiB, at least 16");
        options.memoryMiB = static_cast<std::uint64_t>(n);
        return std::string();
    });
    const std::string elements = "--max-stage-elements needs a whole number of tensor elements (0: no bound)";
    args.value({"--max-stage-elements"}, elements, [&options, elements](const std::string& v) {
        if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0]))) return elements;
        try {
            std::size_t pos = 0;
            const auto count = std::stoull(v, &pos);
            if (pos != v.size()) return elements;
            options.check.maxElements = count;
        } catch (...) {
            return elements;
        }
        return std::string();
    });
    args.flag({"--in-process"}, [&options] { options.isolate = false; });
}

void limitMemory(std::uint64_t mib, unsigned jobs) {
    if (mib == 0) return;
    limitMallocArenas(1);
    // The threads still to start: the guard's, the run's watch, and per job a worker and the
    // timer thread Z3 starts for a query with a timeout (in process), with two to spare.
    const unsigned workers = jobs ? jobs : std::max(1u, std::thread::hardware_concurrency());
    capAddressSpace(mib, 2 * workers + 4);
}

RunGuard::RunGuard(double budgetSeconds) {
    if (budgetSeconds > 0)
        budgetEnd_ = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(budgetSeconds));
    budget_ = budgetSeconds;
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    thread_ = std::thread([this] { watch(); });
}

RunGuard::~RunGuard() {
    finished_ = true;
    if (thread_.joinable()) thread_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);  // a signal still pending ends the process as usual
}

void RunGuard::attach(std::function<void()> cancel, std::function<std::string()> progress) {
    std::lock_guard lock(mutex_);
    cancel_ = std::move(cancel);
    progress_ = std::move(progress);
    if (pendingCancel_ && cancel_) cancel_();
}

void RunGuard::runFinished() {
    detach();
    finished_ = true;
    if (thread_.joinable()) thread_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void RunGuard::detach() {
    std::lock_guard lock(mutex_);
    cancel_ = nullptr;
    progress_ = nullptr;
}

double RunGuard::secondsLeft() const {
    if (budget_ <= 0) return 0;
    return std::max(0.001, std::chrono::duration<double>(budgetEnd_ - std::chrono::steady_clock::now()).count());
}

void RunGuard::watch() {
    using Clock = std::chrono::steady_clock;
    bool signalled = false;
    auto hardEnd = Clock::time_point::max();
    std::string why;
    while (!finished_) {
        timespec wait{0, 50'000'000};
        const int sig = sigtimedwait(&set_, nullptr, &wait);
        const auto now = Clock::now();
        if (sig > 0 && !signalled) {
            signalled = true;
            std::fprintf(stderr, "trainverify: %s: stopping the run (again to stop at once)\n", sig == SIGINT ? "interrupted" : "terminated");
            why = "stopped by a signal";
            std::lock_guard lock(mutex_);
            if (cancel_) cancel_();
            else pendingCancel_ = true;
            hardEnd = std::min(hardEnd, now + std::chrono::seconds(2));
        } else if (sig > 0) {
            end(why + "; stopped at once on a second signal");
        }
        if (budget_ > 0 && now >= budgetEnd_ && hardEnd == Clock::time_point::max()) {
            // The run stops itself at its budget; this is the last resort if it does not.
            if (why.empty()) {
                char text[80];
                std::snprintf(text, sizeof text, "reached the time budget of %g s", budget_);
                why = text;
            }
            hardEnd = now + std::chrono::seconds(2);
        }
        if (!finished_ && now > hardEnd) end(why + "; the run did not stop within 2 s");
    }
}

void RunGuard::end(const std::string& why) {
    std::string progress;
    {
        std::lock_guard lock(mutex_);
        progress = progress_ ? progress_() : "while reading the plan";
    }
    std::printf("INCONCLUSIVE: %s; %s\n", why.c_str(), progress.c_str());
    std::fflush(stdout);
    std::_Exit(2);
}

VerifyReport verifyGuarded(const Plan& plan, VerifyOptions options, RunGuard& guard) {
    std::atomic<std::uint32_t> proven{0}, failed{0};
    auto previous = options.onStageDone;
    options.onStageDone = [&, previous](const StageResult& r) {
        if (r.status == StageStatus::Equivalent) ++proven;
        else if (r.status == StageStatus::Failed) ++failed;
        if (previous) previous(r);
    };
    if (options.runSeconds > 0) options.budgetSpent = std::max(0.0, options.runSeconds - guard.secondsLeft());
    VerificationRun run(plan, options);
    guard.attach([&run] { run.cancel(); }, [&] {
        return std::to_string(proven.load()) + " stages proven and " + std::to_string(failed.load()) + " failed before it";
    });
    auto report = run.run();
    guard.detach();
    return report;
}

}  // namespace tv::cli
