// trainverify: the command line. Verifies a plan headless (for CI), or inspects it.
#include <cctype>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <functional>
#include <thread>
#include <pthread.h>
#include <malloc.h>
#include <sys/resource.h>
#include <cinttypes>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <new>
#include <cstring>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bugs/bug_catalog.hpp"
#include "generate/generator.hpp"
#include "io/plan_json.hpp"
#include "model/text.hpp"
#include "nnscaler/nnscaler_pair.hpp"
#include "nnscaler/nnscaler_plan.hpp"
#include "pickle/pickle.hpp"
#include "session/session.hpp"
#include "verify/symmetry.hpp"
#include "ops/registry.hpp"
#include "verify/oracle.hpp"
#include "verify/report_html.hpp"
#include "verify/solver_process.hpp"
#include "verify/verifier.hpp"

namespace {

constexpr const char* kUsage = R"(trainverify - proves a distributed training plan computes what the single-device step computes

Usage:
  trainverify verify PLAN.json [--jobs N] [--timeout SECONDS] [--memory MIB] [--json REPORT.json|-] [--html REPORT.html] [--stats] [--no-reduce] [--no-reuse]
  trainverify verify --logical Gs.pkl --parallel Gp.pkl [same options]
  trainverify convert --logical Gs.pkl --parallel Gp.pkl -o PLAN.json
  trainverify inspect PLAN.json|PLAN.pkl [--json]
  trainverify generate --model MODEL [--dp N] [--tp N] [--pp N] [--microbatches N] [--sp] [--ep N] [--cp N [--cp-comm all_gather|p2p]] [--zero 1|2|3]
                       [--schedule 1f1b|gpipe] [--layers N] [--global-batch N] [--optimizer adamw|sgd]
                       [--hidden N] [--heads N] [--kv-heads N] [--ffn N] [--vocab N] [--seq N]
                       [--clip-grad NORM] [--format 1|2|3] [--verify] -o PLAN.json
  trainverify mutate PLAN.json --bug KIND [--at OP] [--rank R] -o BUGGY.json [--verify [--jobs N] [--timeout S] [--json FILE|-]]
  trainverify mutate PLAN.json --bug KIND --sites
  trainverify mutate --list [--json FILE|-]
  trainverify oracle PLAN.json [--seed N] [--trials N] [--max-elements N] [--json]
  trainverify ops
  trainverify --help | --version

verify   Cuts the plan into stages from its lineage, reduces shapes, checks every stage with Z3
         in N solver processes, and prints one summary line that starts with EQUIVALENT,
         NOT EQUIVALENT, INCONCLUSIVE or INVALID, then the diagnosis.
           --jobs N          solver processes (default: one per hardware thread)
           --timeout S       time budget of the whole run in seconds (default: none); at it,
                             the run stops: INCONCLUSIVE with what was proven
           --query-timeout S one solver query's timeout in seconds (default 60; 0 = none)
           --stage-timeout S one stage's bound, where a query ignores its timeout
                             (default 4 x the query timeout + 30 s)
           --memory MIB      what this process and each solver process may allocate; a stage
                             past it is INCONCLUSIVE (out of memory), never a crash
           --max-stage-elements N
                             a stage holding more tensor elements after shape reduction is
                             INCONCLUSIVE, not encoded (default 2097152; 0 = no bound)
           --in-process      check stages on threads of this process (no solver processes;
                             a query that ignores its timeout cannot then be stopped)
           --json FILE       also write the JSON report to FILE ("-": standard output only)
           --html FILE       also write the report as one self-contained HTML page
           --stats           print time per phase, stages per second and peak memory
           --trace           with --json: the failing stage replayed op by op (values of every
                             tensor on both sides, the lineage checks, the divergence)
           --no-reduce       check every stage at full shapes (slow; for cross-checking)
           --no-reuse        check every stage, even those isomorphic to a proven one
         With --logical and --parallel, verifies a pair of nnScaler execution plans (pickled
         ModuleCodeGen objects, read safely: nothing in them is run) mapped onto the plan model.
convert  Maps a pair of nnScaler plans onto the plan model and writes it as a plan file.
inspect  Prints counts (ops, tensors, ranks, lineage records, stages) and the parallel
         configuration. On a pickle (an nnScaler plan), prints what the safe reader finds:
         protocol, objects and their classes; nothing in it is run.
generate Writes one whole training step (forward, backward, gradient reduction, optimizer
         update) of a model parallelized as asked, with the lineage of every parallel tensor.
         Models: mlp, gpt2, llama3 (small), llama3-8b, llama3-70b, llama3-405b, deepseek
         (small), deepseek-v2-lite, deepseek-v2, deepseek-v3; --layers and the size options
         override the preset. --zero splits optimizer state (2: and gradients; 3: and
         weights) over the dp replicas. --ep N splits DeepSeek's experts over the tp group
         (N = --tp). --cp N splits the sequence over a group of N ranks (context
         parallelism, with or without --tp); --cp-comm p2p makes its attention a ring
         (K/V blocks passed around the cp group, online softmax) instead of all-gathering K and V. Under --tp the embedding and the
         cross-entropy are vocab-parallel. --verify verifies the
         written plan. --format 3 (the default) stores data-parallel replicas,
         microbatches and repeated blocks (identical layers) once; 2 stores only
         replicas and microbatches once; 1 writes everything out.
         --clip-grad NORM clips the gradients to a global norm before the update.
mutate   The bug lab: injects a parallelization bug from the catalog (--list shows it: the
         TrainVerify paper's 14 cases and more) into a copy of the plan and writes it. The site
         is found by structure; --at names an op of it, --rank a rank it runs on (a rank of a
         replica other than the first, or an op named "...~dp1", writes replicas and
         microbatches out so that only that instance is wrong). --sites lists every site.
         --verify verifies the mutant and checks that the report catches it where it should
         (the edited op and rank, or one its broken dataflow reaches first); exit 0 if so, 1 if
         not. --json writes that outcome with the whole report. Also --logical/--parallel.
oracle   Evaluates both plans with real arithmetic at full shapes (written out) on random inputs
         (index data within the classes its lookups allow) and compares every lineage claim:
         AGREE (exit 0), DIFFER with the first wrong element (exit 1), or NOT EVALUATED when
         the plan is too large (exit 2). Evidence, not a proof; verify proves.
ops      Lists the operators the registry knows.

Exit codes: 0 equivalent, 1 not equivalent, 2 inconclusive, 3 invalid input or usage
(mutate: 0 written, and with --verify caught where expected; 1 with --verify, missed or
misplaced; 3 invalid input, usage, or a bug the plan has no site for).
)";

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
    explicit RunGuard(double budgetSeconds) {
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
    ~RunGuard() {
        finished_ = true;
        thread_.join();
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);  // a signal still pending ends the process as usual
    }
    RunGuard(const RunGuard&) = delete;
    RunGuard& operator=(const RunGuard&) = delete;

    /// What a signal cancels, and the progress the last-resort line reports.
    void attach(std::function<void()> cancel, std::function<std::string()> progress) {
        std::lock_guard lock(mutex_);
        cancel_ = std::move(cancel);
        progress_ = std::move(progress);
        if (pendingCancel_ && cancel_) cancel_();
    }
    void detach() {
        std::lock_guard lock(mutex_);
        cancel_ = nullptr;
        progress_ = nullptr;
    }
    /// Seconds left of the budget (0: no budget; at least a millisecond while one is set).
    double secondsLeft() const {
        if (budget_ <= 0) return 0;
        return std::max(0.001, std::chrono::duration<double>(budgetEnd_ - std::chrono::steady_clock::now()).count());
    }

private:
    void watch() {
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
    [[noreturn]] void end(const std::string& why) {
        std::string progress;
        {
            std::lock_guard lock(mutex_);
            progress = progress_ ? progress_() : "while reading the plan";
        }
        std::printf("INCONCLUSIVE: %s; %s\n", why.c_str(), progress.c_str());
        std::fflush(stdout);
        std::_Exit(2);
    }
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
tv::VerifyReport verifyGuarded(const tv::Plan& plan, tv::VerifyOptions opts, RunGuard& guard) {
    std::atomic<std::uint32_t> proven{0}, failed{0};
    auto previous = opts.onStageDone;
    opts.onStageDone = [&, previous](const tv::StageResult& r) {
        if (r.status == tv::StageStatus::Equivalent) ++proven;
        else if (r.status == tv::StageStatus::Failed) ++failed;
        if (previous) previous(r);
    };
    if (opts.runSeconds > 0) opts.budgetSpent = std::max(0.0, opts.runSeconds - guard.secondsLeft());
    tv::VerificationRun run(plan, opts);
    guard.attach([&run] { run.cancel(); }, [&] {
        return std::to_string(proven.load()) + " stages proven and " + std::to_string(failed.load()) + " failed before it";
    });
    auto report = run.run();
    guard.detach();
    return report;
}

/// The run options verify and mutate --verify share; returns false (and the message) on a bad one.
bool parseRunOption(const std::vector<std::string>& args, std::size_t& i, tv::VerifyOptions& opts, bool& matched, std::string& error);

int usageError(const std::string& msg) {
    std::fprintf(stderr, "trainverify: %s\n(see trainverify --help)\n", tv::printableMessage(msg).c_str());
    return 3;
}

bool parseUnsigned(const std::string& s, double& out) {
    try {
        std::size_t pos = 0;
        out = std::stod(s, &pos);
        return pos == s.size() && out >= 0 && out < 1e7;
    } catch (...) {
        return false;
    }
}

bool writeOutput(const std::string& path, const std::string& text);

bool parseRunOption(const std::vector<std::string>& args, std::size_t& i, tv::VerifyOptions& opts, bool& matched, std::string& error) {
    const auto& a = args[i];
    matched = a == "--jobs" || a == "--timeout" || a == "--query-timeout" || a == "--stage-timeout" || a == "--memory" || a == "--in-process" ||
              a == "--max-stage-elements";
    if (!matched) return true;
    if (a == "--in-process") {
        opts.isolate = false;
        return true;
    }
    if (a == "--max-stage-elements") {
        const std::string* v = i + 1 < args.size() ? &args[i + 1] : nullptr;
        std::size_t pos = 0;
        unsigned long long count = 0;
        bool ok = v && !v->empty() && std::isdigit(static_cast<unsigned char>((*v)[0]));
        if (ok) try {
                count = std::stoull(*v, &pos);
                ok = pos == v->size();
            } catch (...) {
                ok = false;
            }
        if (!ok) {
            error = "--max-stage-elements needs a whole number of tensor elements (0: no bound)";
            return false;
        }
        opts.check.maxElements = count;
        ++i;
        return true;
    }
    double n = 0;
    if (i + 1 >= args.size() || !parseUnsigned(args[i + 1], n)) {
        error = a + (a == "--memory" ? " needs a number of MiB" : a == "--jobs" ? " needs a whole number from 1 to 1024" : " needs a number of seconds");
        return false;
    }
    ++i;
    if (a == "--jobs") {
        if (n < 1 || n > 1024 || n != static_cast<unsigned>(n)) {
            error = "--jobs needs a whole number from 1 to 1024";
            return false;
        }
        opts.jobs = static_cast<unsigned>(n);
    } else if (a == "--timeout") {
        opts.runSeconds = n;
    } else if (a == "--query-timeout") {
        opts.check.timeoutMs = static_cast<unsigned>(n * 1000);
    } else if (a == "--stage-timeout") {
        opts.stageSeconds = n;
    } else {
        if (n < 16 || n != static_cast<double>(static_cast<std::uint64_t>(n))) {
            error = "--memory needs a whole number of MiB, at least 16";
            return false;
        }
        opts.memoryMiB = static_cast<std::uint64_t>(n);
    }
    return true;
}

/// Limits this process to `mib` MiB beyond what it has mapped now (the solver processes set
/// their own). One malloc arena: each thread's would reserve 64 MiB of address space.
void limitMemory(std::uint64_t mib) {
    if (mib == 0) return;
    mallopt(M_ARENA_MAX, 1);
    std::uint64_t pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%" SCNu64, &pages) != 1) pages = 0;
        std::fclose(f);
    }
    rlimit r{};
    getrlimit(RLIMIT_AS, &r);
    const auto want = static_cast<rlim_t>(pages * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)) + (mib << 20));
    r.rlim_cur = r.rlim_max == RLIM_INFINITY ? want : std::min<rlim_t>(want, r.rlim_max);
    setrlimit(RLIMIT_AS, &r);
}


int cmdVerify(const std::vector<std::string>& args) {
    std::string path, jsonOut, htmlOut, logicalPath, parallelPath;
    tv::VerifyOptions opts;
    opts.isolate = true;
    bool stats = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& a = args[i];
        auto value = [&](const char* name) -> const std::string* {
            if (i + 1 >= args.size()) return nullptr;
            (void)name;
            return &args[++i];
        };
        bool run = false;
        std::string error;
        if (!parseRunOption(args, i, opts, run, error)) return usageError(error);
        if (run) {
            continue;
        } else if (a == "--json") {
            auto* v = value("--json");
            if (!v) return usageError("--json needs a file name or -");
            jsonOut = *v;
        } else if (a == "--html") {
            auto* v = value("--html");
            if (!v || *v == "-") return usageError("--html needs a file name");
            htmlOut = *v;
        } else if (a == "--stats") {
            stats = true;
        } else if (a == "--trace") {
            opts.check.keepTrace = true;
        } else if (a == "--no-reuse") {
            opts.reuseIsomorphic = false;
        } else if (a == "--no-reduce") {
            opts.check.reduceShapes = false;
        } else if (a == "--logical" || a == "--parallel") {
            auto* v = value(a.c_str());
            if (!v) return usageError(a + " needs an nnScaler plan file (.pkl)");
            (a == "--logical" ? logicalPath : parallelPath) = *v;
        } else if (!a.empty() && a[0] == '-') {
            return usageError("unknown option " + a);
        } else if (path.empty()) {
            path = a;
        } else {
            return usageError("verify takes one plan file");
        }
    }
    const bool pair = !logicalPath.empty() || !parallelPath.empty();
    if (pair && (logicalPath.empty() || parallelPath.empty())) return usageError("--logical and --parallel go together");
    if (pair && !path.empty()) return usageError("verify takes a plan file or --logical and --parallel, not both");
    if (!pair && path.empty()) return usageError("verify needs a plan file (or --logical Gs.pkl --parallel Gp.pkl)");
    limitMemory(opts.memoryMiB);
    RunGuard guard(opts.runSeconds);
    auto opened = pair ? tv::session::openNnScalerPair(logicalPath, parallelPath) : tv::session::openPlanFile(path);
    tv::VerifyReport report = opened.ok() ? verifyGuarded(*opened.opened->plan, opts, guard) : std::move(opened.refusal);
    report.timing.load = opened.seconds;
    report.timing.total += opened.seconds;
    if (opened.ok()) tv::session::finishReport(*opened.opened, report);
    const auto json = tv::session::reportDocument(opened.source, opened.opened.get(), report);
    if (jsonOut == "-") {
        std::cout << json.dump(2) << "\n";
    } else {
        std::cout << tv::reportToText(report, stats);
        if (!jsonOut.empty()) {
            std::ofstream f(jsonOut);
            if (!f) {
                std::fprintf(stderr, "trainverify: cannot write the report to %s\n", jsonOut.c_str());
                return 3;
            }
            f << json.dump(2) << "\n";
        }
    }
    if (!htmlOut.empty() && !writeOutput(htmlOut, tv::session::reportHtml(opened.source, opened.opened.get(), report))) return 3;
    return tv::exitCode(report.verdict);
}

bool isPickleFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char head[2] = {0, 0};
    in.read(head, 2);
    return in.gcount() == 2 && tv::pickle::looksLikePickle(std::string_view(head, 2));
}

/// A pickled nnScaler plan: what the safe reader finds in it (protocol, objects, classes).
int inspectPickle(const std::string& path, bool asJson) {
    tv::pickle::Document doc;
    try {
        doc = tv::pickle::readFile(path);
    } catch (const tv::pickle::PickleError& e) {
        std::fprintf(stderr, "trainverify: %s: not a readable pickle: %s\n", path.c_str(), e.what());
        return 3;
    }
    auto counts = doc.classCounts();
    std::vector<std::pair<std::size_t, std::string>> byCount;
    for (const auto& [name, n] : counts) byCount.emplace_back(n, name);
    std::stable_sort(byCount.begin(), byCount.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    // An nnScaler plan: its per-device programs.
    std::optional<tv::nnscaler::Plan> plan;
    if (doc.className(doc.root) == "nnscaler.codegen.module.module.ModuleCodeGen") {
        try {
            plan = tv::nnscaler::readPlan(doc);
        } catch (const tv::nnscaler::NnScalerError& e) {
            std::fprintf(stderr, "trainverify: %s: not a readable nnScaler plan: %s\n", path.c_str(), e.what());
            return 3;
        }
    }
    std::map<std::string, std::size_t> operators, primitives;
    nlohmann::json devices = nlohmann::json::array();
    if (plan)
        for (const auto& [dev, cells] : plan->programs) {
            std::map<std::string, std::size_t> kinds;
            std::size_t prims = 0;
            for (const auto& c : cells) {
                ++kinds[tv::nnscaler::toString(c.kind)];
                if (c.kind == tv::nnscaler::CellKind::Forward) ++operators[c.signature];
                for (const auto& p : c.primitives) {
                    ++primitives[p.kind];
                    ++prims;
                }
            }
            nlohmann::json d = {{"device", dev}, {"primitives", prims}};
            for (const auto& [k, n] : kinds) d[k] = n;
            devices.push_back(std::move(d));
        }
    if (asJson) {
        nlohmann::json classes = nlohmann::json::object();
        for (const auto& [name, n] : counts) classes[tv::pickle::validUtf8(name)] = n;
        nlohmann::json j = {{"pickle",
                             {{"protocol", doc.protocol}, {"objects", doc.nodes.size()}, {"root", tv::pickle::validUtf8(doc.className(doc.root))}, {"classes", classes}}}};
        if (plan)
            j["nnscaler"] = {{"devices", plan->devices.size()}, {"runtime_ranks", plan->runtimeRanks}, {"data_parallel", plan->dataParallel()},
                             {"microbatches", plan->microbatches}, {"sub_tensors", plan->tensors.size()}, {"programs", devices},
                             {"operators", operators}, {"primitives", primitives}};
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::cout << "pickle        " << path << " (protocol " << doc.protocol << ", " << doc.nodes.size() << " objects)\n";
    std::cout << "root          " << (doc.className(doc.root).empty() ? doc.describe(doc.root) : doc.className(doc.root)) << "\n";
    if (plan) {
        std::cout << "nnScaler plan " << plan->devices.size() << " devices, " << plan->runtimeRanks << " runtime ranks (dp " << plan->dataParallel()
                  << "), " << plan->microbatches << " microbatch(es), " << plan->tensors.size() << " sub-tensors\n";
        for (const auto& d : devices) {
            std::cout << "  device " << d["device"].get<int>() << ":";
            const char* sep = " ";
            for (auto [k, label] : {std::pair{"data loader", "data loaders"}, {"forward", "forward ops"}, {"backward", "backward ops"},
                                    {"adapter", "adapters"}, {"reducer", "reducers"}})
                if (d.contains(k)) {
                    std::cout << sep << d[k].get<std::size_t>() << " " << label;
                    sep = ", ";
                }
            std::cout << " (" << d["primitives"].get<std::size_t>() << " primitives)\n";
        }
        auto line = [](const char* label, const std::map<std::string, std::size_t>& m) {
            std::cout << label;
            bool first = true;
            for (const auto& [k, n] : m) {
                std::cout << (first ? "" : ", ") << k << " " << n;
                first = false;
            }
            std::cout << "\n";
        };
        line("operators     ", operators);
        line("primitives    ", primitives);
        if (plan->runtimeRanks <= 1 && plan->microbatches <= 1)
            std::cout << "verify        trainverify verify --logical " << path << " --parallel PARALLEL.pkl   (this is a single-device plan)\n";
        else
            std::cout << "verify        trainverify verify --logical LOGICAL.pkl --parallel " << path << "\n";
        return 0;
    }
    std::cout << "classes       " << counts.size() << " distinct; the most frequent:\n";
    for (std::size_t k = 0; k < byCount.size() && k < 25; ++k) std::printf("  %8zu  %s\n", byCount[k].first, byCount[k].second.c_str());
    return 0;
}

int cmdInspect(const std::vector<std::string>& args) {
    std::string path;
    bool asJson = false;
    for (const auto& a : args) {
        if (a == "--json") asJson = true;
        else if (!a.empty() && a[0] == '-') return usageError("unknown option " + a);
        else if (path.empty()) path = a;
        else return usageError("inspect takes one plan file");
    }
    if (path.empty()) return usageError("inspect needs a plan file");
    if (isPickleFile(path)) return inspectPickle(path, asJson);
    const auto opened = tv::session::openPlanFile(path);
    if (!opened.ok()) {
        std::cout << tv::reportToText(opened.refusal);
        return 3;
    }
    // Counts are of the plan written out (counted, not written); a plan stored with replicas also
    // reports what it stores. Stages are one per lineage record either way.
    const auto& p = *opened.opened->plan;
    const bool compact = p.replication.active();
    const auto out = tv::writtenOutCounts(p);
    auto sp = tv::cutStages(p);
    std::size_t glue = 0;
    for (const auto& s : sp.stages) glue += s.glue() ? 1 : 0;
    nlohmann::json mesh = nlohmann::json::object();
    for (auto a : tv::kAxes) mesh[std::string(tv::toString(a))] = p.mesh.at(a);
    nlohmann::json j = {
        {"name", p.name},
        {"description", p.description},
        {"logical", {{"ops", p.logical.ops.size()}, {"tensors", p.logical.tensors.size()}}},
        {"parallel", {{"ops", out.ops}, {"tensors", out.tensors}, {"op_kinds", out.opKinds}}},
        {"ranks", p.ranks.size()},
        {"mesh", mesh},
        {"microbatches", p.microbatches},
        {"lineage_records", p.lineage.size()},
        {"initial_records", sp.initialRecords.size()},
        {"stages", {{"total", sp.stages.size()}, {"op", sp.stages.size() - glue}, {"glue", glue}}},
        {"structural_failures", sp.structural.size()},
    };
    if (compact)
        j["stored"] = {{"replicas", p.replication.degree},
                       {"microbatches", p.replication.microbatches},
                       {"parallel_ops", p.parallel.ops.size()},
                       {"parallel_tensors", p.parallel.tensors.size()}};
    if (asJson) {
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::cout << "plan          " << (p.name.empty() ? path : p.name) << "\n";
    if (!p.description.empty()) std::cout << "description   " << p.description << "\n";
    std::cout << "logical       " << p.logical.ops.size() << " ops, " << p.logical.tensors.size() << " tensors\n";
    std::cout << "parallel      " << out.ops << " ops, " << out.tensors << " tensors\n";
    if (compact)
        std::cout << "stored        " << tv::storedOnce(p.replication) << ": " << p.parallel.ops.size() << " ops, " << p.parallel.tensors.size()
                  << " tensors\n";
    std::cout << "ranks         " << p.ranks.size() << " (";
    bool first = true;
    for (auto a : tv::kAxes)
        if (p.mesh.at(a) > 1 || a == tv::Axis::DP || a == tv::Axis::TP || a == tv::Axis::PP) {
            std::cout << (first ? "" : " ") << tv::toString(a) << "=" << p.mesh.at(a);
            first = false;
        }
    std::cout << "), " << p.microbatches << " microbatch(es)\n";
    std::cout << "lineage       " << p.lineage.size() << " records, " << sp.initialRecords.size() << " initial\n";
    std::cout << "stages        " << sp.stages.size() << " (" << sp.stages.size() - glue << " op, " << glue << " glue)\n";
    std::cout << "parallel ops  ";
    first = true;
    for (const auto& [k, n] : out.opKinds) {
        std::cout << (first ? "" : ", ") << k << " " << n;
        first = false;
    }
    std::cout << "\n";
    for (const auto& w : sp.warnings) std::cout << "warning: " << w << "\n";
    return 0;
}

/// Writes a plan's text to `path` ("-": standard output); says why when it cannot.
bool writeOutput(const std::string& path, const std::string& text) {
    if (path == "-") {
        std::cout << text;
        return true;
    }
    std::ofstream f(path, std::ios::binary);
    if (!f || !(f << text) || !f.flush()) {
        std::fprintf(stderr, "trainverify: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        return false;
    }
    return true;
}

bool parseCount(const std::string& s, std::int64_t& out) {
    if (s.empty() || s.size() > 12) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    out = std::stoll(s);
    return true;
}

int cmdGenerate(const std::vector<std::string>& args) {
    tv::gen::GenerateOptions o;
    std::string outPath;
    bool verifyAfter = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& a = args[i];
        auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
        auto count = [&](const char* name, std::int64_t& out) -> bool {
            auto* v = value();
            if (!v || !parseCount(*v, out)) {
                usageError(std::string(name) + " needs a whole number");
                return false;
            }
            return true;
        };
        std::int64_t n = 0;
        auto degree = [&](const char* name, int& out) -> bool {
            if (!count(name, n)) return false;
            if (n < 1 || n > (1 << 20)) {
                usageError(std::string(name) + " must be from 1 to 1048576");
                return false;
            }
            out = static_cast<int>(n);
            return true;
        };
        auto size = [&](const char* name, std::optional<std::int64_t>& out) -> bool {
            if (!count(name, n)) return false;
            out = n;
            return true;
        };
        if (a == "--model") {
            auto* v = value();
            if (!v) return usageError("--model needs a model name");
            o.model = *v;
        } else if (a == "-o" || a == "--output") {
            auto* v = value();
            if (!v) return usageError("-o needs a file name (or - for standard output)");
            outPath = *v;
        } else if (a == "--dp") { if (!degree("--dp", o.dp)) return 3; }
        else if (a == "--tp") { if (!degree("--tp", o.tp)) return 3; }
        else if (a == "--pp") { if (!degree("--pp", o.pp)) return 3; }
        else if (a == "--microbatches" || a == "--nm") { if (!degree("--microbatches", o.microbatches)) return 3; }
        else if (a == "--ep") { if (!degree("--ep", o.ep)) return 3; }
        else if (a == "--cp") { if (!degree("--cp", o.cp)) return 3; }
        else if (a == "--cp-comm") {
            auto* v = value();
            if (!v) return usageError("--cp-comm needs all_gather or p2p");
            o.cpComm = *v;
        }
        else if (a == "--zero") {
            if (!count("--zero", n)) return 3;
            if (n < 1 || n > 3) return usageError("--zero must be 1, 2 or 3");
            o.zero = static_cast<int>(n);
        } else if (a == "--format") {
            if (!count("--format", n)) return 3;
            if (n < 1 || n > 3) return usageError("--format must be 1, 2 or 3");
            o.format = static_cast<int>(n);
        } else if (a == "--clip-grad") {
            auto* v = value();
            if (!v) return usageError("--clip-grad needs a norm, e.g. 1.0");
            o.clipGrad = *v;
        } else if (a == "--sp") o.sequenceParallel = true;
        else if (a == "--verify") verifyAfter = true;
        else if (a == "--schedule") {
            auto* v = value();
            if (!v) return usageError("--schedule needs 1f1b or gpipe");
            o.schedule = *v;
        } else if (a == "--optimizer") {
            auto* v = value();
            if (!v) return usageError("--optimizer needs adamw or sgd");
            o.optimizer = *v;
        } else if (a == "--layers") { if (!size("--layers", o.layers)) return 3; }
        else if (a == "--global-batch") { if (!size("--global-batch", o.globalBatch)) return 3; }
        else if (a == "--hidden") { if (!size("--hidden", o.hidden)) return 3; }
        else if (a == "--heads") { if (!size("--heads", o.heads)) return 3; }
        else if (a == "--kv-heads") { if (!size("--kv-heads", o.kvHeads)) return 3; }
        else if (a == "--ffn") { if (!size("--ffn", o.ffn)) return 3; }
        else if (a == "--vocab") { if (!size("--vocab", o.vocab)) return 3; }
        else if (a == "--seq") { if (!size("--seq", o.seq)) return 3; }
        else return usageError("generate: unknown option " + a);
    }
    if (outPath.empty()) return usageError("generate needs -o PLAN.json");
    const auto generated = tv::session::generatePlan(o);
    if (!generated.ok()) {
        std::fprintf(stderr, "trainverify: %s\n", generated.error().c_str());
        return 3;
    }
    const auto& plan = *generated.plan;
    std::string error;
    if (outPath == "-" ? !writeOutput(outPath, generated.text) : !tv::session::writeFileAtomically(outPath, generated.text, &error)) {
        if (!error.empty()) std::fprintf(stderr, "trainverify: %s\n", error.c_str());
        return 3;
    }
    if (outPath != "-")
        std::fprintf(stderr, "generated %s: %zu logical ops, %zu parallel ops%s, %zu lineage records, %.1f MB in %.2f s\n",
                     outPath.c_str(), plan.logical.ops.size(), plan.parallel.ops.size(),
                     plan.replication.active() ? (" (" + tv::storedOnce(plan.replication) + ")").c_str() : "",
                     plan.lineage.size(), static_cast<double>(generated.text.size()) / 1e6, generated.seconds);
    if (verifyAfter) {
        if (outPath == "-") return usageError("--verify needs -o FILE");
        return cmdVerify({outPath});
    }
    return 0;
}

int cmdConvert(const std::vector<std::string>& args) {
    std::string logicalPath, parallelPath, outPath;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& a = args[i];
        auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
        if (a == "--logical" || a == "--parallel" || a == "-o" || a == "--output") {
            auto* v = value();
            if (!v) return usageError(a + " needs a file name");
            (a == "--logical" ? logicalPath : a == "--parallel" ? parallelPath : outPath) = *v;
        } else {
            return usageError("convert: unknown argument " + a);
        }
    }
    if (logicalPath.empty() || parallelPath.empty() || outPath.empty()) return usageError("convert needs --logical Gs.pkl --parallel Gp.pkl -o PLAN.json");
    const auto opened = tv::session::openNnScalerPair(logicalPath, parallelPath);
    if (!opened.ok()) {
        std::cerr << tv::reportToText(opened.refusal);
        return tv::exitCode(opened.refusal.verdict);
    }
    const auto& plan = *opened.opened->plan;
    auto text = tv::writePlanText(plan);
    if (!writeOutput(outPath, text)) return 3;
    if (outPath != "-") {
        std::fprintf(stderr, "converted %s: %zu logical ops, %zu parallel ops on %zu ranks, %zu lineage records, %.1f MB in %.2f s\n", outPath.c_str(),
                     plan.logical.ops.size(), plan.parallel.ops.size(), plan.ranks.size(), plan.lineage.size(),
                     static_cast<double>(text.size()) / 1e6, opened.seconds);
    }
    for (const auto& n : opened.opened->mappingNotes) std::fprintf(stderr, "note: %s\n", n.c_str());
    for (const auto& u : opened.opened->mappingUnchecked) std::fprintf(stderr, "note: not checked: %s (verify would be INCONCLUSIVE at best)\n", u.c_str());
    return 0;
}

int cmdMutate(const std::vector<std::string>& args) {
    std::string path, bug, outPath, jsonOut, logicalPath, parallelPath;
    tv::bugs::MutateOptions mo;
    bool list = false, listSites = false, verifyAfter = false;
    tv::VerifyOptions vo;
    vo.isolate = true;
    bool runOption = false;
    std::string runError;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& a = args[i];
        auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
        if (a == "--list") {
            list = true;
        } else if (a == "--sites") {
            listSites = true;
        } else if (a == "--verify") {
            verifyAfter = true;
        } else if (a == "--bug" || a == "--at" || a == "-o" || a == "--output" || a == "--json" || a == "--logical" || a == "--parallel") {
            auto* v = value();
            if (!v) return usageError(a + " needs a value");
            (a == "--bug" ? bug : a == "--at" ? mo.at : a == "--json" ? jsonOut : a == "--logical" ? logicalPath : a == "--parallel" ? parallelPath : outPath) = *v;
        } else if (a == "--rank") {
            auto* v = value();
            std::int64_t r = 0;
            if (!v || !parseCount(*v, r) || r > (1 << 24)) return usageError("--rank needs a rank number");
            mo.rank = static_cast<std::int32_t>(r);
        } else if (!parseRunOption(args, i, vo, runOption, runError) || runOption) {
            if (!runError.empty()) return usageError(runError);
        } else if (!a.empty() && a[0] == '-' && a != "-") {
            return usageError("mutate: unknown option " + a);
        } else if (path.empty()) {
            path = a;
        } else {
            return usageError("mutate takes one plan file");
        }
    }
    const bool pair = !logicalPath.empty() || !parallelPath.empty();
    if (list) {
        if (!path.empty() || !bug.empty() || pair) return usageError("mutate --list takes no plan and no --bug");
        if (!jsonOut.empty()) return writeOutput(jsonOut, tv::bugs::catalogJson().dump(2) + "\n") ? 0 : 3;
        for (const auto& k : tv::bugs::catalog()) {
            std::string paper = k.paperCase ? " [paper #" + std::to_string(k.paperCase) + "]" : "";
            std::printf("%-31s %-16s %s%s\n", std::string(k.name).c_str(), std::string(tv::bugs::toString(k.category)).c_str(),
                        std::string(k.summary).c_str(), paper.c_str());
        }
        return 0;
    }
    if (pair && (logicalPath.empty() || parallelPath.empty())) return usageError("--logical and --parallel go together");
    if (pair && !path.empty()) return usageError("mutate takes a plan file or --logical and --parallel, not both");
    if (!pair && path.empty()) return usageError("mutate needs a plan file (or --list)");
    if (bug.empty()) return usageError("mutate needs --bug KIND (trainverify mutate --list shows the catalog)");
    if (!tv::bugs::findBug(bug)) return usageError("unknown bug \"" + bug + "\" (trainverify mutate --list shows the catalog)");
    if (!listSites && outPath.empty() && !verifyAfter) return usageError("mutate needs -o BUGGY.json (or --verify, or --sites)");
    if (!jsonOut.empty() && !verifyAfter) return usageError("mutate: --json goes with --verify (or --list)");
    const auto opened = pair ? tv::session::openNnScalerPair(logicalPath, parallelPath) : tv::session::openPlanFile(path);
    if (!opened.ok()) {
        std::cerr << tv::reportToText(opened.refusal);
        return 3;
    }
    const auto& plan = *opened.opened->plan;
    if (listSites) {
        std::vector<tv::bugs::Site> sites;
        try {
            sites = tv::bugs::findSites(plan, bug);
        } catch (const tv::bugs::MutationError& e) {
            std::fprintf(stderr, "trainverify: mutate: %s\n", e.what());
            return 3;
        }
        for (const auto& s : sites) {
            std::string ops;
            for (std::size_t k = 0; k < s.ops.size(); ++k) ops += (k ? " " : "") + s.ops[k];
            std::printf("%s\t%s%s\n", ops.c_str(), s.detail.c_str(), s.writtenOut ? " (written out)" : "");
        }
        std::fprintf(stderr, "%zu sites of %s\n", sites.size(), bug.c_str());
        return 0;
    }
    auto t0 = std::chrono::steady_clock::now();
    const auto injected = tv::session::injectBug(*opened.opened, bug, mo);
    if (!injected.error.empty()) {
        std::fprintf(stderr, "trainverify: mutate: %s\n", injected.error.c_str());
        return 3;
    }
    const auto& m = *injected.mutant;
    const double mutateSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string where = m.site.ops.front();
    std::string ranks;
    for (std::size_t k = 0; k < m.site.ranks.size(); ++k) ranks += (k ? ", " : "") + std::to_string(m.site.ranks[k]);
    const bool everyInstance = plan.replication.active() && !m.site.writtenOut;
    if (!outPath.empty()) {
        auto text = m.document.dump(1) + "\n";
        if (!writeOutput(outPath, text)) return 3;
    }
    std::fprintf(stderr, "mutated %s: %s at %s (ranks %s%s): %s%s\n", plan.name.empty() ? path.c_str() : plan.name.c_str(), bug.c_str(), where.c_str(), ranks.c_str(),
                 everyInstance ? "; every replica and microbatch" : "", m.change.c_str(),
                 outPath.empty() || outPath == "-" ? "" : ("; wrote " + outPath + " (version " + std::to_string(m.document.value("version", 1)) + ")").c_str());
    if (plan.expect.is_object() && plan.expect.value("verdict", "equivalent") != "equivalent")
        std::fprintf(stderr, "note: the plan is expected to be %s already; the verifier may report its own bug first\n",
                     plan.expect.value("verdict", "").c_str());
    if (!injected.opened && !m.problems.empty())
        std::fprintf(stderr, "note: the reader rejects the mutant, so verify reports INVALID: %s\n", m.problems.front().toString().c_str());
    if (!verifyAfter) return 0;
    auto t1 = std::chrono::steady_clock::now();
    limitMemory(vo.memoryMiB);
    RunGuard guard(vo.runSeconds);
    tv::VerifyReport report = injected.opened ? verifyGuarded(*injected.opened->plan, vo, guard) : tv::invalidReport(m.problems);
    if (injected.opened) tv::session::finishReport(*injected.opened, report);
    const double verifySeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    const auto judgement = tv::session::judgeBug(m, report);
    const bool ok = judgement.caught;
    if (jsonOut != "-") std::cout << tv::reportToText(report);
    (jsonOut == "-" ? std::cerr : std::cout) << "bug lab: " << judgement.outcome() << ": " << judgement.detail << "\n";
    if (!jsonOut.empty()) {
        nlohmann::json j = {{"bug", bug},
                            {"site", m.site.ops},
                            {"ranks", m.site.ranks},
                            {"written_out", m.site.writtenOut},
                            {"change", m.change},
                            {"caught", ok},
                            {"detail", judgement.detail},
                            {"mutate_seconds", mutateSeconds},
                            {"verify_seconds", verifySeconds},
                            {"report", tv::reportToJson(report)}};
        if (!writeOutput(jsonOut, j.dump(2) + "\n")) return 3;
    }
    return ok ? 0 : 1;
}

/// Both plans evaluated with real arithmetic at full shapes on random inputs; every lineage claim
/// compared. Exit 0: all agree; 1: a claim differs; 2: not evaluated (too large, no concrete
/// semantics); 3: invalid plan or usage.
int cmdOracle(const std::vector<std::string>& args) {
    std::string path;
    tv::OracleOptions oo;
    bool asJson = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& a = args[i];
        double n = 0;
        if ((a == "--seed" || a == "--trials" || a == "--max-elements") && i + 1 < args.size()) {
            if (!parseUnsigned(args[i + 1], n) || n != static_cast<double>(static_cast<std::uint64_t>(n)))
                return usageError(a + " needs a whole number");
            ++i;
            if (a == "--seed") oo.seed = static_cast<std::uint64_t>(n);
            else if (a == "--trials") oo.trials = std::max(1, static_cast<int>(n));
            else oo.maxElements = static_cast<std::uint64_t>(n);
        } else if (a == "--json") {
            asJson = true;
        } else if (!a.empty() && a[0] == '-') {
            return usageError("unknown option " + a);
        } else if (path.empty()) {
            path = a;
        } else {
            return usageError("oracle takes one plan file");
        }
    }
    if (path.empty()) return usageError("oracle needs a plan file");
    const auto opened = tv::session::openPlanFile(path);
    if (!opened.ok()) {
        std::cout << tv::reportToText(opened.refusal);
        return 3;
    }
    auto res = tv::runOracle(*opened.opened->plan, oo);
    if (asJson) {
        nlohmann::json j = {{"status", std::string(tv::toString(res.status))}, {"elements", res.elements}, {"summary", res.summary()}};
        j["mismatches"] = nlohmann::json::array();
        for (const auto& m : res.mismatches)
            j["mismatches"].push_back({{"tensor", m.logicalTensor}, {"slice", m.slice}, {"copy", m.copy}, {"element", m.element},
                                       {"expected", m.expected}, {"actual", m.actual}, {"rank", m.rank}, {"final", m.finalOutput}, {"trial", m.trial}});
        std::cout << j.dump(2) << "\n";
    } else {
        std::cout << (res.status == tv::OracleStatus::Agree ? "AGREE: " : res.status == tv::OracleStatus::Differ ? "DIFFER: " : "NOT EVALUATED: ")
                  << res.summary() << "\n";
        for (std::size_t i = 1; i < res.mismatches.size() && i < 10; ++i)
            std::cout << "  also " << res.mismatches[i].logicalTensor << res.mismatches[i].slice << " (" << res.mismatches[i].copy << ")\n";
    }
    return res.status == tv::OracleStatus::Agree ? 0 : res.status == tv::OracleStatus::Differ ? 1 : 2;
}

int cmdOps() {
    for (const auto& s : tv::OpRegistry::instance().all()) {
        std::printf("%-24s %s\n", std::string(s.name).c_str(), std::string(s.summary).c_str());
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // A solver process of a verify run (solver_process.hpp): not a command a person types.
    if (argc == 3 && std::strcmp(argv[1], "--solver-process") == 0) return tv::solverProcessMain(std::atoi(argv[2]));
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
        std::fputs(kUsage, stderr);
        return 3;
    }
    const auto cmd = args[0];
    std::vector<std::string> rest(args.begin() + 1, args.end());
    try {
        if (cmd == "--help" || cmd == "-h" || cmd == "help") {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (cmd == "--version") {
            std::printf("trainverify %s\n", TV_VERSION);
            return 0;
        }
        // "trainverify CMD --help" (or -h) anywhere among a command's arguments: the usage.
        if (std::find(rest.begin(), rest.end(), "--help") != rest.end() || std::find(rest.begin(), rest.end(), "-h") != rest.end()) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (cmd == "verify") return cmdVerify(rest);
        if (cmd == "inspect") return cmdInspect(rest);
        if (cmd == "ops") return cmdOps();
        if (cmd == "oracle") return cmdOracle(rest);
        if (cmd == "convert") return cmdConvert(rest);
        if (cmd == "generate") return cmdGenerate(rest);
        if (cmd == "mutate") return cmdMutate(rest);
        return usageError("unknown command " + cmd);
    } catch (const std::bad_alloc&) {
        // Not the input's fault and not a verdict: the run could not finish (exit 2, like any
        // INCONCLUSIVE), never the code of an invalid plan.
        std::fprintf(stdout, "INCONCLUSIVE: out of memory while running \"%s\"; nothing was decided\n", cmd.c_str());
        std::fprintf(stderr, "trainverify: out of memory (%s); try --jobs 1, or a machine with more memory\n", cmd.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "trainverify: internal error: %s\n", e.what());
        return 3;
    }
}
