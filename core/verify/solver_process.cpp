#include "verify/solver_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <thread>

#include <z3.h>

#include "io/plan_json.hpp"
#include "verify/stages.hpp"
#include "verify/symmetry.hpp"

extern char** environ;

namespace tv {

namespace {

// Exit status of a solver process that runs out of memory outside a stage's check.
constexpr int kOutOfMemory = 10;
// The fd a solver process finds its socket on.
constexpr int kChannelFd = 3;

bool sendAll(int fd, const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

bool receiveAll(int fd, void* data, std::size_t n) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
        ssize_t r = ::recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= static_cast<std::size_t>(r);
    }
    return true;
}

// A frame: its length (8 bytes, host order: both ends are this machine), then its bytes.
bool sendFrame(int fd, const std::string& text) {
    const std::uint64_t n = text.size();
    return sendAll(fd, &n, sizeof n) && sendAll(fd, text.data(), text.size());
}

bool receiveFrame(int fd, std::string& text) {
    std::uint64_t n = 0;
    if (!receiveAll(fd, &n, sizeof n) || n > (std::uint64_t{1} << 40)) return false;
    text.resize(static_cast<std::size_t>(n));
    return receiveAll(fd, text.data(), text.size());
}

/// Bytes of address space this process has mapped (/proc/self/statm, first field, in pages).
std::uint64_t mappedBytes() {
    std::uint64_t pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        unsigned long long p = 0;
        if (std::fscanf(f, "%llu", &p) == 1) pages = p;
        std::fclose(f);
    }
    return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

StageResult stoppedResult(std::uint32_t stage, std::string message) {
    StageResult r;
    r.stage = stage;
    r.status = StageStatus::Inconclusive;
    Failure f;
    f.kind = FailureKind::Inconclusive;
    f.stage = stage;
    f.message = std::move(message);
    r.failure = std::move(f);
    return r;
}

std::string signalName(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

nlohmann::json checkOptionsJson(const CheckOptions& o) {
    return {{"timeout_ms", o.timeoutMs}, {"reduce", o.reduceShapes}, {"trace", o.keepTrace}, {"max_elements", o.maxElements}};
}

}  // namespace

std::string thisProgram() {
    // The kernel's link to this process's executable: it still runs this program when the file
    // has been replaced or deleted since (a rebuild or an upgrade during a run).
    return "/proc/self/exe";
}

SolverProcess::SolverProcess(std::string program, std::shared_ptr<const std::string> planText, std::uint64_t memoryMiB)
    : program_(std::move(program)), planText_(std::move(planText)), memoryMiB_(memoryMiB) {}

SolverProcess::~SolverProcess() { kill(); }

void SolverProcess::kill() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
    if (pidfd_ >= 0) ::close(pidfd_);
    if (channel_ >= 0) ::close(channel_);
    pid_ = -1;
    pidfd_ = channel_ = -1;
    ready_ = false;
    sentExpansions_.clear();
}

bool SolverProcess::start(std::string& why) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        why = std::string("cannot start a solver process: socketpair: ") + std::strerror(errno);
        return false;
    }
    // dup2 onto the same number would keep close-on-exec: move the child's end out of the way.
    if (pair[1] == kChannelFd) {
        const int moved = ::fcntl(pair[1], F_DUPFD_CLOEXEC, kChannelFd + 1);
        ::close(pair[1]);
        pair[1] = moved;
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pair[1], kChannelFd);
    posix_spawnattr_init(&attr);
    // Ctrl-C at the terminal reaches the whole process group: the verifier takes it and stops
    // its solver processes itself, so they keep SIGINT and SIGTERM blocked.
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGTERM);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &blocked);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const std::string fdText = std::to_string(kChannelFd);
    std::vector<char*> argv = {const_cast<char*>(program_.c_str()), const_cast<char*>("--solver-process"), const_cast<char*>(fdText.c_str()),
                               nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, program_.c_str(), &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(pair[1]);
    if (rc != 0) {
        ::close(pair[0]);
        why = "cannot start a solver process (" + program_ + "): " + std::strerror(rc);
        return false;
    }
    channel_ = pair[0];
    pid_ = pid;
    owner_ = std::this_thread::get_id();
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd_ < 0) {
        why = std::string("cannot watch the solver process: pidfd_open: ") + std::strerror(errno);
        kill();
        return false;
    }
    const nlohmann::json hello = {{"parent", static_cast<long long>(::getpid())}, {"memory_mib", memoryMiB_}};
    if (!sendFrame(channel_, hello.dump()) || !sendFrame(channel_, *planText_)) {
        // It ended at once (a program that does not serve --solver-process): its status says why.
        why = ended(0).failure->message;
        return false;
    }
    return true;
}

StageResult SolverProcess::ended(std::uint32_t resultStage) {
    int status = 0;
    pid_t waited = -1;
    if (pid_ > 0)
        while ((waited = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
        }
    pid_ = -1;
    kill();
    const std::string limit = memoryMiB_ > 0 ? " (its memory limit is " + std::to_string(memoryMiB_) + " MiB)" : std::string();
    if (waited > 0 && WIFEXITED(status) && WEXITSTATUS(status) == kOutOfMemory)
        return stoppedResult(resultStage, "out of memory in the solver process" + limit);
    if (waited > 0 && WIFSIGNALED(status)) {
        std::string m = "the solver process for this stage ended with " + signalName(WTERMSIG(status));
        if (memoryMiB_ > 0) m += limit + ": most likely it ran out of memory";
        return stoppedResult(resultStage, m);
    }
    return stoppedResult(resultStage, "the solver process (" + program_ + ") ended without a result (exit status " +
                                          std::to_string(waited > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
}

bool SolverProcess::receive(std::string& frame, std::uint32_t resultStage, Clock::time_point deadline, const std::atomic<bool>& stop,
                            const std::string& deadlineReason, bool& stopped, StageResult& result) {
    frame.clear();
    std::uint64_t expected = 0;
    bool haveLength = false;
    std::string bytes;
    char buf[65536];
    for (;;) {
        if (stop.load()) {
            kill();
            stopped = true;
            result = stoppedResult(resultStage, "cancelled while the solver ran");
            return false;
        }
        const auto now = Clock::now();
        if (now >= deadline) {
            kill();
            result = stoppedResult(resultStage, deadlineReason);
            return false;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
        pollfd fds[2] = {{channel_, POLLIN, 0}, {pidfd_, POLLIN, 0}};
        const int ready = ::poll(fds, 2, static_cast<int>(std::min<long long>(50, left + 1)));
        if (ready < 0 && errno != EINTR) {
            kill();
            result = stoppedResult(resultStage, std::string("cannot wait for the solver process: ") + std::strerror(errno));
            return false;
        }
        if (ready <= 0) continue;
        if (fds[0].revents & POLLIN) {
            const ssize_t r = ::recv(channel_, buf, sizeof buf, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r > 0) {
                bytes.append(buf, static_cast<std::size_t>(r));
                if (!haveLength && bytes.size() >= sizeof expected) {
                    std::memcpy(&expected, bytes.data(), sizeof expected);
                    bytes.erase(0, sizeof expected);
                    haveLength = true;
                }
                if (haveLength && bytes.size() >= expected) {
                    frame = bytes.substr(0, static_cast<std::size_t>(expected));
                    return true;
                }
                continue;
            }
            // Closed: the process is gone, or going; its status says why.
        } else if (!(fds[1].revents & POLLIN) && !(fds[0].revents & (POLLHUP | POLLERR))) {
            continue;
        }
        result = ended(resultStage);
        return false;
    }
}

StageResult SolverProcess::run(const SolverJob& job, std::uint32_t resultStage, Clock::time_point deadline, const std::atomic<bool>& stop,
                               const std::string& deadlineReason, bool& stopped) {
    stopped = false;
    std::string why;
    if (pid_ < 0 && !start(why)) return stoppedResult(resultStage, why);
    StageResult failed;
    std::string frame;
    auto message = [&](const std::string& text) -> std::optional<nlohmann::json> {
        try {
            return nlohmann::json::parse(text);
        } catch (const std::exception& e) {
            kill();
            failed = stoppedResult(resultStage, std::string("the solver process sent something that cannot be read: ") + e.what());
            return std::nullopt;
        }
    };
    if (!ready_) {
        // The process reads the plan before it can take a job.
        if (!receive(frame, resultStage, deadline, stop, deadlineReason, stopped, failed)) return failed;
        auto hello = message(frame);
        if (!hello) return failed;
        if (!hello->value("ready", false)) {
            const auto error = hello->value("error", std::string("no reason given"));
            kill();
            return stoppedResult(resultStage, "the solver process could not take the plan: " + error);
        }
        ready_ = true;
    }
    nlohmann::json request = {{"expansion", job.expansion}, {"stage", job.stage}, {"key", job.key}, {"check", checkOptionsJson(job.check)}};
    if (job.expansion >= 0 && std::find(sentExpansions_.begin(), sentExpansions_.end(), job.expansion) == sentExpansions_.end()) {
        request["cross"] = *job.cross;
        sentExpansions_.push_back(job.expansion);
    }
    if (!sendFrame(channel_, request.dump())) return ended(resultStage);
    if (!receive(frame, resultStage, deadline, stop, deadlineReason, stopped, failed)) return failed;
    auto reply = message(frame);
    if (!reply) return failed;
    if (reply->contains("error")) return stoppedResult(resultStage, "the solver process refused the stage: " + reply->value("error", std::string()));
    try {
        auto result = stageResultFromJson(*reply);
        result.stage = resultStage;
        if (result.failure) result.failure->stage = resultStage;
        // Z3 or the checker ran out: under a limit of ours, say which.
        if (memoryMiB_ > 0 && result.failure && result.status == StageStatus::Inconclusive &&
            result.failure->message.find("out of memory") != std::string::npos)
            result.failure->message += " (its memory limit is " + std::to_string(memoryMiB_) + " MiB)";
        return result;
    } catch (const std::exception& e) {
        kill();
        return stoppedResult(resultStage, std::string("the solver process sent a result that cannot be read: ") + e.what());
    }
}

namespace {
int serveSolverProcess(int fd);
}

int solverProcessMain(int fd) {
    // Served on a thread of its own, as the verifier's workers run: Z3 contexts are several
    // times slower to create and destroy on a process's main thread here (its malloc arena).
    int status = 0;
    std::thread([&] { status = serveSolverProcess(fd); }).join();
    return status;
}

namespace {
int serveSolverProcess(int fd) {
    try {
        std::string frame;
        if (!receiveFrame(fd, frame)) return 0;
        const auto hello = nlohmann::json::parse(frame);
        // End with the verifier's thread that started us, however it ends; if it is already gone,
        // end now.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != static_cast<pid_t>(hello.at("parent").get<long long>())) return 0;
        const auto memoryMiB = hello.at("memory_mib").get<std::uint64_t>();
        if (!receiveFrame(fd, frame)) return 0;
        auto loaded = readPlanText(frame);
        frame.clear();
        frame.shrink_to_fit();
        if (!loaded.ok()) {
            sendFrame(fd, nlohmann::json{{"error", "the plan did not read back: " +
                                                       (loaded.problems.empty() ? std::string("?") : loaded.problems[0].toString())}}
                              .dump());
            return 0;
        }
        const Plan& plan = *loaded.plan;
        const StagePlan stored = cutStages(plan);
        if (memoryMiB > 0) {
            // What it may allocate beyond the plan; Z3 stops itself a little before (an
            // out-of-memory exception: an INCONCLUSIVE stage with the reason).
            rlimit r{};
            ::getrlimit(RLIMIT_AS, &r);
            auto soft = static_cast<rlim_t>(mappedBytes() + (memoryMiB << 20));
            if (r.rlim_max != RLIM_INFINITY && soft > r.rlim_max) soft = r.rlim_max;
            r.rlim_cur = soft;
            ::setrlimit(RLIMIT_AS, &r);
            Z3_global_param_set("memory_max_size", std::to_string(std::max<std::uint64_t>(1, memoryMiB * 7 / 8)).c_str());
        }
        if (!sendFrame(fd, nlohmann::json{{"ready", true}}.dump())) return 0;
        struct Expansion {
            std::unique_ptr<ExpandedStages> stages;
            std::unique_ptr<StagePlan> cut;
        };
        std::map<std::int32_t, Expansion> expansions;
        for (;;) {
            if (!receiveFrame(fd, frame)) return 0;
            const auto job = nlohmann::json::parse(frame);
            const auto e = job.at("expansion").get<std::int32_t>();
            const auto id = job.at("stage").get<std::uint32_t>();
            const Plan* p = &plan;
            const StagePlan* cut = &stored;
            if (e >= 0) {
                auto it = expansions.find(e);
                if (it == expansions.end()) {
                    const auto cross = job.at("cross").get<std::vector<std::uint32_t>>();
                    Expansion x;
                    x.stages = std::make_unique<ExpandedStages>(expandStages(plan, stored, cross));
                    x.cut = std::make_unique<StagePlan>(cutStages(x.stages->plan, &x.stages->assumed));
                    it = expansions.emplace(e, std::move(x)).first;
                }
                p = &it->second.stages->plan;
                cut = it->second.cut.get();
            }
            std::string refusal;
            if (id >= cut->stages.size()) refusal = "stage " + std::to_string(id) + " is not in the plan as read back";
            else if (structuralKey(*p, cut->stages[id]) != job.at("key").get<std::string>())
                refusal = "stage " + std::to_string(id) + " of the plan as read back is not the stage the verifier cut";
            if (!refusal.empty()) {
                if (!sendFrame(fd, nlohmann::json{{"error", refusal}}.dump())) return 0;
                continue;
            }
            const auto& c = job.at("check");
            CheckOptions opts;
            opts.timeoutMs = c.at("timeout_ms").get<unsigned>();
            opts.reduceShapes = c.at("reduce").get<bool>();
            opts.maxElements = c.at("max_elements").get<std::uint64_t>();
            opts.keepTrace = c.at("trace").get<bool>();
            if (!sendFrame(fd, stageResultToJson(checkStage(*p, cut->stages[id], opts)).dump())) return 0;
        }
    } catch (const std::bad_alloc&) {
        return kOutOfMemory;
    } catch (const std::exception& e) {
        sendFrame(fd, nlohmann::json{{"error", std::string("internal error: ") + e.what()}}.dump());
        return 0;
    }
}

}  // namespace

}  // namespace tv
