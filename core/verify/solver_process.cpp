#include "verify/solver_process.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <new>
#include <optional>
#include <thread>

#include <z3.h>

#include "io/plan_json.hpp"
#include "process/memory_limit.hpp"
#include "verify/stages.hpp"
#include "verify/symmetry.hpp"

namespace tv {

namespace {

// Exit status of a solver process that runs out of memory outside a stage's check.
constexpr int kOutOfMemory = 10;

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

nlohmann::json checkOptionsJson(const CheckOptions& o) {
    return {{"timeout_ms", o.timeoutMs}, {"reduce", o.reduceShapes}, {"trace", o.keepTrace}, {"max_elements", o.maxElements}};
}

}  // namespace

SolverProcess::SolverProcess(std::string program, std::shared_ptr<const std::string> planText, std::uint64_t memoryMiB)
    : process_(std::move(program), "--solver-process", "solver process"), planText_(std::move(planText)), memoryMiB_(memoryMiB) {}

SolverProcess::~SolverProcess() { kill(); }

void SolverProcess::kill() {
    process_.kill();
    ready_ = false;
    sentExpansions_.clear();
}

bool SolverProcess::start(std::string& why) {
    if (process_.running()) return true;
    kill();
    if (!process_.start(why)) return false;
    const nlohmann::json hello = {{"parent", static_cast<long long>(::getpid())}, {"memory_mib", memoryMiB_}};
    if (!process_.send(hello.dump()) || !process_.send(*planText_)) {
        // It ended at once (a program that does not serve --solver-process): its status says why.
        why = ended(0).failure->message;
        return false;
    }
    return true;
}

StageResult SolverProcess::ended(std::uint32_t resultStage) {
    const int status = process_.ended();
    kill();
    const std::string limit = memoryMiB_ > 0 ? " (its memory limit is " + std::to_string(memoryMiB_) + " MiB)" : std::string();
    if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == kOutOfMemory)
        return stoppedResult(resultStage, "out of memory in the solver process" + limit);
    if (status >= 0 && WIFSIGNALED(status)) {
        std::string m = "the solver process for this stage ended with " + signalName(WTERMSIG(status));
        if (memoryMiB_ > 0) m += limit + ": most likely it ran out of memory";
        return stoppedResult(resultStage, m);
    }
    return stoppedResult(resultStage, "the solver process (" + process_.program() + ") ended without a result (exit status " +
                                          std::to_string(status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
}

bool SolverProcess::receive(std::string& frame, std::uint32_t resultStage, Clock::time_point deadline, const std::atomic<bool>& stop,
                            const std::string& deadlineReason, bool& stopped, StageResult& result) {
    std::string error;
    switch (process_.receive(frame, deadline, stop, error)) {
        case HelperProcess::Wait::Frame:
            return true;
        case HelperProcess::Wait::Stopped:
            kill();
            stopped = true;
            result = stoppedResult(resultStage, "cancelled while the solver ran");
            return false;
        case HelperProcess::Wait::Deadline:
            kill();
            result = stoppedResult(resultStage, deadlineReason);
            return false;
        case HelperProcess::Wait::Failed:
            kill();
            result = stoppedResult(resultStage, error);
            return false;
        case HelperProcess::Wait::Ended:
            break;
    }
    result = ended(resultStage);
    return false;
}

StageResult SolverProcess::run(const SolverJob& job, std::uint32_t resultStage, Clock::time_point deadline, const std::atomic<bool>& stop,
                               const std::string& deadlineReason, bool& stopped) {
    stopped = false;
    std::string why;
    if (!process_.running() && !start(why)) return stoppedResult(resultStage, why);
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
        request["members_only"] = job.membersOnly;
        sentExpansions_.push_back(job.expansion);
    }
    if (!process_.send(request.dump())) return ended(resultStage);
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
    // That thread's arena is made before any cap: the verifier's own cap, inherited, is lifted
    // (this process sets its own once it has the plan), and no thread after it gets an arena of
    // its own (Z3's timer threads, started under the cap, would otherwise each reserve one, or
    // fail to and map every allocation on its own: see limitMallocArenas). Under a hard cap
    // (`ulimit -v`) even the serving thread's arena may not fit: one arena for all.
    limitMallocArenas(liftInheritedAddressSpaceCap() ? 1 : 2);
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
        if (!bindToParent(hello.at("parent").get<long long>())) return 0;
        const auto memoryMiB = hello.at("memory_mib").get<std::uint64_t>();
        if (!receiveFrame(fd, frame)) return 0;
        auto loaded = readPlanText(frame, ReadOptions{true});
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
            // (A query may start Z3's timer thread: its stack is allowed for.)
            capAddressSpace(memoryMiB, 2);
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
                    x.stages = std::make_unique<ExpandedStages>(expandStages(plan, stored, cross, job.value("members_only", false)));
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
    } catch (const std::exception& e) {
        if (isOutOfMemory(e)) return kOutOfMemory;
        sendFrame(fd, nlohmann::json{{"error", std::string("internal error: ") + e.what()}}.dump());
        return 0;
    }
}

}  // namespace

}  // namespace tv
