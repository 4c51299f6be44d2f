// Staged verification of a whole plan: cut stages, check them on a pool of worker threads (one
// z3::context per stage), and combine the results into a verdict that does not depend on the
// number of threads or on the order in which stages finish.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/plan.hpp"
#include "io/plan_json.hpp"
#include "verify/check.hpp"
#include "verify/stages.hpp"

namespace tv {

enum class Verdict : std::uint8_t { Equivalent, NotEquivalent, Inconclusive, Invalid };
std::string_view toString(Verdict v);            ///< "equivalent", "not_equivalent", ...
std::string_view headline(Verdict v);            ///< "EQUIVALENT", "NOT EQUIVALENT", ...
/// The verdict named by toString (as an example's expect block spells it); none for another name.
std::optional<Verdict> verdictFromString(std::string_view name);
int exitCode(Verdict v);                          ///< 0, 1, 2, 3

struct Timing {
    double load = 0, expand = 0, cut = 0, check = 0;  ///< wall-clock seconds per phase (expand: writing out the stages that tie replicas together)
    double reduce = 0, encode = 0, solve = 0;    ///< summed over stages (CPU-ish seconds)
    double total = 0;
};

struct VerifyReport {
    Verdict verdict = Verdict::Equivalent;
    StagePlan stagePlan;
    std::vector<StageResult> results;            ///< indexed by stage id
    std::optional<Failure> failure;              ///< the topologically first failure
    std::vector<Failure> failures;               ///< all failures, topologically ordered
    std::vector<PlanProblem> problems;           ///< for an invalid plan
    std::vector<std::string> warnings;
    /// What the plan does that its own description does not say, in plain language (an nnScaler
    /// plan's runtime pieces against its index maps): the explanation of a NOT EQUIVALENT.
    std::vector<std::string> findings;
    Timing timing;
    unsigned jobs = 1;
    bool cancelled = false;
    std::uint32_t passed = 0, failed = 0, inconclusive = 0, skipped = 0;
    std::uint32_t uniqueStages = 0;              ///< stages actually solved (the rest reuse an isomorphic proof)
    /// In a plan stored with replicas: stages whose replicas are tied together (written out for
    /// every replica when checked); the others are proven by replica 0's check.
    std::uint32_t writtenOutStages = 0;
    std::uint32_t cachedStages = 0;              ///< proven in an earlier run (VerifyOptions::proofs)
    /// NOT EQUIVALENT on a plan small enough: what the concrete oracle (oracle.hpp) says, at full
    /// shapes with the real functions, e.g. "the result loss[] differs at []: expected ..., got ...".
    std::string confirmation;
    /// The stages found a counterexample, but the concrete oracle ran at full shapes and every
    /// lineage claim held on every trial: the counterexample needs stage inputs that the step
    /// may never produce (a staged proof checks a stage on every input its lineage allows), so
    /// the verdict is INCONCLUSIVE, not NOT EQUIVALENT. `failure` still shows the counterexample.
    bool counterexampleUnreached = false;
    /// The run reached its time budget (VerifyOptions::runSeconds) before every stage was decided.
    bool outOfTime = false;
    double budgetSeconds = 0;                    ///< VerifyOptions::runSeconds (0: none)
    bool isolated = false;                       ///< stages were checked in solver processes
};

/// Stage proofs kept across runs (the Studio re-verifying after a reload). Keyed by proofKey, which
/// names everything a stage's check depends on, so a stage whose key is present needs no solver:
/// it is the same obligation, already proven. Only proofs are kept; failures and inconclusive
/// results are checked again (a failure must name its own ops). Thread-safe.
class ProofCache {
public:
    explicit ProofCache(std::size_t capacity = 200000) : capacity_(capacity) {}
    bool contains(const std::string& key) const;
    void add(const std::string& key);
    std::size_t size() const;
    void clear();

private:
    mutable std::mutex mutex_;
    std::unordered_set<std::string> keys_;
    std::size_t capacity_;
};

/// A stage's structural key with what else its check depends on in this plan: replication degree,
/// ranks per replica, microbatches, whether replica 0 proves it alone, and shape reduction.
std::string proofKey(const Plan& plan, const Stage& stage, const CheckOptions& opts, bool provenByReplicaZero);

struct VerifyOptions {
    unsigned jobs = 0;                            ///< 0: one per hardware thread
    CheckOptions check;
    /// Prove each set of isomorphic stages (equal structural keys) once.
    bool reuseIsomorphic = true;
    /// Called from worker threads as each stage finishes (must be thread-safe).
    std::function<void(const StageResult&)> onStageDone;
    /// Called from a worker thread just before it checks a stage (must be thread-safe). Stages
    /// decided without a check (isomorphic to a proven one, or failed while cutting) are not started.
    std::function<void(std::uint32_t stage)> onStageStart;
    /// Proofs from earlier runs: stages found here are Equivalent with StageResult::cached and
    /// are not checked; the stages this run proves are added. Not owned; may be null.
    ProofCache* proofs = nullptr;
    /// On NOT EQUIVALENT, evaluate both plans at full shapes on random inputs (the concrete
    /// oracle) when they have at most this many elements, and report whether it confirms the
    /// difference and whether it reaches a result that leaves the step. 0: never.
    std::uint64_t confirmUpToElements = 1'000'000;
    /// Random inputs the oracle tries before a counterexample it never reaches turns the verdict
    /// into INCONCLUSIVE (VerifyReport::counterexampleUnreached).
    int confirmTrials = 6;
    /// Check each stage in a solver process of its own (solver_process.hpp): a cancel, the time
    /// budget and a stage's own bound then stop it for certain (the process is killed), and a
    /// stage that runs out of memory or crashes Z3 ends only itself, INCONCLUSIVE with the reason.
    /// Off: stages run on threads of this process, and a Z3 call that ignores its interrupt runs on.
    bool isolate = false;
    /// A time budget for the whole run, in seconds from run(): stages not started by then are
    /// skipped, running ones stopped (every query's timeout ends at the budget; a solver process
    /// is killed at it), and the verdict is INCONCLUSIVE with what was proven. 0: none.
    double runSeconds = 0;
    /// Seconds of that budget already spent before run() (reading the plan): the run gets the rest.
    double budgetSpent = 0;
    /// Isolated only: a stage whose check runs longer is stopped (its process killed) and is
    /// INCONCLUSIVE. Each query of a stage stops at CheckOptions::timeoutMs by itself; this bound
    /// holds where one does not. 0: 4 times the query timeout plus 30 s (none if that is none).
    double stageSeconds = 0;
    /// Isolated only: what each solver process may allocate beyond what it shares with this one
    /// (an address-space limit, and Z3's own memory limit a little below it). 0: none.
    std::uint64_t memoryMiB = 0;
    /// Isolated only: the program solver processes run (it must serve `--solver-process FD`,
    /// solver_process.hpp). Empty: this program.
    std::string solverProgram;
    /// Stages that tie replicas together are written out for every replica before they are
    /// checked. One whose written-out form would have more ops than this is INCONCLUSIVE, not
    /// checked (one Z3 query over a million ops does not end usefully); so is any stage past the
    /// second bound, on all such stages of the run together (memory: Llama3-405B dp64 tp8 pp16
    /// nm16 writes out 10.6 M ops in all, 3 GB).
    std::uint64_t maxWrittenOutStageOps = 1u << 18;  ///< Llama3-405B dp64 tp8 pp16 nm16: at most 76,800
    std::uint64_t maxWrittenOutOps = 1u << 25;
};

/// One verification run; cancel() may be called from any thread.
class VerificationRun {
public:
    VerificationRun(const Plan& plan, VerifyOptions opts);
    VerifyReport run();
    void cancel();
    bool cancelled() const { return cancelled_.load(); }

private:
    const Plan& plan_;
    VerifyOptions opts_;
    std::atomic<bool> cancelled_{false};
    std::atomic<bool> outOfTime_{false};
    std::mutex mutex_;
    std::vector<z3::context*> running_;
};

VerifyReport verifyPlan(const Plan& plan, const VerifyOptions& opts = {});

/// A report for a plan that failed to load.
VerifyReport invalidReport(std::vector<PlanProblem> problems);
/// The report of an input that yields no plan to verify (unreadable files, an operator without
/// semantics, a defect found while mapping): the verdict and one failure saying why; INVALID
/// also lists the message as a problem.
VerifyReport reportWithoutPlan(Verdict v, FailureKind kind, const std::string& message);

nlohmann::json reportToJson(const VerifyReport& report);
/// The summary line (starts with the headline) followed by the diagnosis.
std::string reportToText(const VerifyReport& report, bool withStats = false);

/// Peak resident memory of this process in kilobytes.
long peakMemoryKb();

}  // namespace tv
