#include "verify/verifier.hpp"

#include <z3++.h>
#include "model/text.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <cstdio>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "verify/oracle.hpp"
#include "verify/solver_process.hpp"
#include "verify/symmetry.hpp"

namespace tv {

std::optional<Verdict> verdictFromString(std::string_view name) {
    for (auto v : {Verdict::Equivalent, Verdict::NotEquivalent, Verdict::Inconclusive, Verdict::Invalid})
        if (toString(v) == name) return v;
    return std::nullopt;
}

std::string_view toString(Verdict v) {
    switch (v) {
        case Verdict::Equivalent: return "equivalent";
        case Verdict::NotEquivalent: return "not_equivalent";
        case Verdict::Inconclusive: return "inconclusive";
        case Verdict::Invalid: return "invalid";
    }
    return "?";
}
std::string_view headline(Verdict v) {
    switch (v) {
        case Verdict::Equivalent: return "EQUIVALENT";
        case Verdict::NotEquivalent: return "NOT EQUIVALENT";
        case Verdict::Inconclusive: return "INCONCLUSIVE";
        case Verdict::Invalid: return "INVALID";
    }
    return "?";
}
int exitCode(Verdict v) { return static_cast<int>(v); }

long peakMemoryKb() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

bool ProofCache::contains(const std::string& key) const {
    std::lock_guard lock(mutex_);
    return keys_.count(key) != 0;
}

void ProofCache::add(const std::string& key) {
    std::lock_guard lock(mutex_);
    // Bounded by count: a session that outgrows it starts over rather than growing without end.
    if (keys_.size() >= capacity_ && !keys_.count(key)) keys_.clear();
    keys_.insert(key);
}

std::size_t ProofCache::size() const {
    std::lock_guard lock(mutex_);
    return keys_.size();
}

void ProofCache::clear() {
    std::lock_guard lock(mutex_);
    keys_.clear();
}

std::string proofKey(const Plan& plan, const Stage& stage, const CheckOptions& opts, bool provenByReplicaZero) {
    std::string key = structuralKey(plan, stage);
    const auto& r = plan.replication;
    key += "|replication " + std::to_string(r.degree) + " " + std::to_string(r.ranksPerReplica) + " " + std::to_string(r.microbatches);
    if (r.members > 1) {
        // Written out over its members only (its replicas stay stored), or over everything.
        key += "|members " + std::to_string(r.members) + " " + std::to_string(r.memberRanks) + (r.memberAxis == Axis::CP ? " cp" : " dp");
        if (!provenByReplicaZero) key += provenAlongReplicas(plan, stage) ? " members-written-out" : " all-written-out";
    }
    key += opts.reduceShapes ? "|reduced" : "|full";
    if (r.active() && !provenByReplicaZero) {
        // Written out for every replica: which ops are per-microbatch decides the lanes it ties.
        key += "|lanes ";
        for (auto op : stage.parallelOps) {
            key += plan.parallel.ops[op].microbatch >= 0 ? '1' : '0';
            for (auto t : plan.parallel.inputs(op)) key += plan.parallel.tensors[t].microbatch >= 0 ? 'm' : 'r';
            for (auto t : plan.parallel.outputs(op)) key += plan.parallel.tensors[t].microbatch >= 0 ? 'm' : 'r';
            key += ',';
        }
    }
    return key;
}

// A plan stored with replicas is verified as stored: replica 0's stages stand for every replica
// where they can (symmetry.hpp); the rest are written out for every replica, one per class.
VerificationRun::VerificationRun(const Plan& plan, VerifyOptions opts) : plan_(plan), opts_(std::move(opts)) {}

void VerificationRun::cancel() {
    cancelled_.store(true);
    std::lock_guard lock(mutex_);
    for (auto* c : running_) c->interrupt();
}

VerifyReport VerificationRun::run() {
    VerifyReport rep;
    auto t0 = Clock::now();
    rep.isolated = opts_.isolate;
    rep.budgetSeconds = opts_.runSeconds;
    const auto deadline = opts_.runSeconds > 0
                              ? t0 + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(std::max(0.0, opts_.runSeconds - opts_.budgetSpent)))
                              : Clock::time_point::max();
    auto expired = [&] {
        if (!outOfTime_.load() && Clock::now() >= deadline) outOfTime_.store(true);
        return outOfTime_.load();
    };
    char budgetText[48];
    std::snprintf(budgetText, sizeof budgetText, "%g s", opts_.runSeconds);
    const std::string budgetReason = std::string("stopped at the run's time budget of ") + budgetText;
    // A stage's own bound in a solver process: where a query ignores its timeout.
    const double stageSeconds = opts_.stageSeconds > 0 ? opts_.stageSeconds
                                : opts_.check.timeoutMs > 0 ? 4.0 * opts_.check.timeoutMs / 1000.0 + 30.0
                                                            : 0.0;
    // Every query's timeout ends at the budget.
    auto checkOptionsNow = [this, deadline]() {
        CheckOptions o = opts_.check;
        if (deadline != Clock::time_point::max()) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
            const auto capped = static_cast<unsigned>(std::clamp<long long>(left, 1, std::numeric_limits<unsigned>::max()));
            o.timeoutMs = o.timeoutMs == 0 ? capped : std::min(o.timeoutMs, capped);
        }
        return o;
    };
    rep.stagePlan = cutStages(plan_);
    rep.timing.cut = since(t0);
    rep.timing.expand = 0;
    rep.warnings = rep.stagePlan.warnings;
    const auto& stages = rep.stagePlan.stages;
    rep.results.resize(stages.size());
    for (std::uint32_t i = 0; i < stages.size(); ++i) rep.results[i].stage = i;

    // Structural failures found while cutting decide their stages without a solver.
    std::vector<bool> decided(stages.size(), false);
    std::vector<Failure> planLevel;
    for (const auto& f : rep.stagePlan.structural) {
        if (f.stage == kNone) {
            planLevel.push_back(f);
            continue;
        }
        if (decided[f.stage]) continue;
        decided[f.stage] = true;
        rep.results[f.stage].status = StageStatus::Failed;
        rep.results[f.stage].failure = f;
        if (opts_.onStageDone) opts_.onStageDone(rep.results[f.stage]);
    }

    unsigned jobs = opts_.jobs ? opts_.jobs : std::max(1u, std::thread::hardware_concurrency());
    jobs = std::max(1u, std::min<unsigned>(jobs, static_cast<unsigned>(std::max<std::size_t>(1, stages.size()))));
    rep.jobs = jobs;
    auto t1 = Clock::now();
    InterruptSlot slot;
    slot.enter = [this](z3::context* c) {
        std::lock_guard lock(mutex_);
        running_.push_back(c);
        if (cancelled_.load() || outOfTime_.load()) c->interrupt();
    };
    // One check: a stage of some plan (the stored one, or stages written out for every replica),
    // whose result lands at a stage index of the report.
    struct Job {
        const Plan* plan;
        const Stage* stage;
        std::uint32_t slot;
        std::int32_t expansion;   ///< -1: the stored plan; else which written-out plan (expansions)
        std::uint32_t index;      ///< the stage's index in its plan's cut
    };
    // Isolated: the plan as solver processes read it, and what each written-out plan was made of.
    std::shared_ptr<const std::string> planText;
    std::vector<std::unique_ptr<std::vector<std::uint32_t>>> crossLists;
    std::vector<bool> crossMembersOnly;  ///< per expansion: its stages' members written out only
    std::vector<std::unique_ptr<SolverProcess>> processes;
    auto finish = [&](std::uint32_t i, StageResult r) {
        r.stage = i;
        if (r.failure) r.failure->stage = i;
        rep.results[i] = std::move(r);
        if (opts_.onStageDone) opts_.onStageDone(rep.results[i]);
    };
    auto runPool = [&](const std::vector<Job>& work) {
        if (work.empty()) return;
        std::atomic<std::size_t> next{0};
        // Where a result is decided by the budget: a stage stopped by it says so.
        auto settle = [&](StageResult& r) {
            if (cancelled_.load() && r.status == StageStatus::Inconclusive) r.status = StageStatus::Skipped;
            else if (outOfTime_.load() && r.status == StageStatus::Inconclusive && r.failure) r.failure->message = budgetReason;
        };
        // One worker: takes jobs until none is left, checking each with `check` (on this thread,
        // or in the worker's solver process); a job taken after a cancel or past the budget is
        // skipped.
        auto worker = [&](auto&& check) {
            for (;;) {
                auto k = next.fetch_add(1);
                if (k >= work.size()) break;
                const auto& job = work[k];
                if (cancelled_.load() || expired()) {
                    rep.results[job.slot].status = StageStatus::Skipped;
                    continue;
                }
                if (opts_.onStageStart) opts_.onStageStart(job.slot);
                StageResult r = check(job);
                expired();
                settle(r);
                finish(job.slot, std::move(r));
            }
        };
        auto threadWorker = [&]() {
            z3::context* mine = nullptr;
            InterruptSlot local;
            local.enter = [&](z3::context* c) {
                mine = c;
                slot.enter(c);
            };
            local.leave = [&]() {
                std::lock_guard lock(mutex_);
                running_.erase(std::remove(running_.begin(), running_.end(), mine), running_.end());
                mine = nullptr;
            };
            worker([&](const Job& job) { return checkStage(*job.plan, *job.stage, checkOptionsNow(), &local); });
        };
        // Isolated: each check in this worker's solver process (started from this program, the
        // plan sent to it once; solver_process.hpp), stopped at the budget or the stage's bound.
        auto processWorker = [&](unsigned j) {
            SolverProcess& process = *processes[j];
            worker([&](const Job& job) {
                auto stageDeadline = deadline;
                std::string reason = budgetReason;
                if (stageSeconds > 0) {
                    auto own = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(stageSeconds));
                    if (own < stageDeadline) {
                        stageDeadline = own;
                        char text[160];
                        std::snprintf(text, sizeof text, "the stage's check ran past its bound of %g s (a solver query that ignored its timeout) and was stopped",
                                      stageSeconds);
                        reason = text;
                    }
                }
                SolverJob request;
                request.expansion = job.expansion;
                request.cross = job.expansion >= 0 ? crossLists[static_cast<std::size_t>(job.expansion)].get() : nullptr;
                request.membersOnly = job.expansion >= 0 && crossMembersOnly[static_cast<std::size_t>(job.expansion)];
                request.stage = job.index;
                request.key = structuralKey(*job.plan, *job.stage);
                request.check = checkOptionsNow();
                bool stopped = false;
                return process.run(request, job.slot, stageDeadline, cancelled_, reason, stopped);
            });
        };
        // A watch on the budget for threads: at the deadline, running contexts are interrupted
        // (a solver process needs none: its worker kills it).
        std::atomic<bool> poolDone{false};
        std::thread watch;
        if (!opts_.isolate && deadline != Clock::time_point::max())
            watch = std::thread([&] {
                while (!poolDone.load()) {
                    if (expired()) {
                        std::lock_guard lock(mutex_);
                        for (auto* c : running_) c->interrupt();
                    }
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                }
            });
        unsigned n = std::min<unsigned>(jobs, static_cast<unsigned>(std::max<std::size_t>(1, work.size())));
        if (opts_.isolate && !work.empty()) {
            // The solver processes serve every batch of the run; started here, on the thread of
            // run(), they live as long as it (one that is killed is started again by its worker).
            // Without looking for repeats (slow on big plans, and the processes need no small file).
            if (!planText) planText = std::make_shared<const std::string>(writePlanJson(plan_, false).dump());
            while (processes.size() < n) {
                processes.push_back(std::make_unique<SolverProcess>(opts_.solverProgram.empty() ? thisProgram() : opts_.solverProgram,
                                                                    planText, opts_.memoryMiB));
                std::string why;
                processes.back()->start(why);  // a failure is reported by the first job
            }
        }
        // Workers always run on threads of their own, even for one job (Z3 contexts are much
        // slower to create and destroy on the main thread here).
        std::vector<std::thread> pool;
        for (unsigned j = 0; j < std::max(1u, n); ++j) {
            if (opts_.isolate) pool.emplace_back(processWorker, j);
            else pool.emplace_back(threadWorker);
        }
        for (auto& t : pool) t.join();
        poolDone.store(true);
        // A process a worker started again (after one was killed or ended) dies with that worker's
        // thread, now gone: ended here, so that the next batch starts a new one.
        for (auto& p : processes)
            if (!p->startedHere()) p->stop();
        if (watch.joinable()) watch.join();
    };

    // Stages of a plan stored with replicas that replica 0 cannot prove alone are checked written
    // out for every replica; the written-out plans live until the run ends.
    const bool replicated = plan_.replication.active();
    std::vector<bool> local(stages.size(), true);
    // Stored as one member of each group: a stage the stored member does not prove for every
    // member, but whose lanes the stored lane does, is written out over its members only (into
    // the group listed), and checked there as stored.
    std::vector<bool> membersOnly(stages.size(), false);
    if (replicated)
        for (std::uint32_t i = 0; i < stages.size(); ++i)
            if (!decided[i]) {
                local[i] = provenByReplicaZero(plan_, stages[i]);
                membersOnly[i] = !local[i] && plan_.replication.members > 1 && provenAlongReplicas(plan_, stages[i]);
            }
    std::vector<std::unique_ptr<ExpandedStages>> expansions;
    std::uint64_t opsWrittenOut = 0;  // by the stages written out so far
    std::vector<std::unique_ptr<StagePlan>> expandedCuts;
    auto check = [&](const std::vector<std::uint32_t>& ids) {
        if (cancelled_.load() || expired()) {
            // Cancelled: nothing more is written out or checked.
            for (auto i : ids) rep.results[i].status = StageStatus::Skipped;
            return;
        }
        std::vector<Job> work;
        std::vector<std::uint32_t> cross, crossMembers;
        std::vector<std::uint64_t> opsOf(stages.size(), 0);
        auto writeOut = [&](std::uint32_t i, bool membersAlone) {
            // Written out before it is checked: bounded by what writing out would produce, before
            // it is produced (a dp 1024 x 1024-microbatch plan of 120 KB tied 2^20 lanes in one
            // stage, and ran to 7.5 GB before bad_alloc).
            const std::uint64_t ops = writtenOutOps(plan_, stages[i], membersAlone);
            std::string refusal;
            if (ops > opts_.maxWrittenOutStageOps)
                refusal = "this stage ties the replicas together, and written out for every replica it would be " + std::to_string(ops) +
                          " ops, more than one check takes (" + std::to_string(opts_.maxWrittenOutStageOps) + "): it is not checked";
            else if (opsWrittenOut + ops > opts_.maxWrittenOutOps)
                refusal = "the stages tying replicas together would be more than " + std::to_string(opts_.maxWrittenOutOps) +
                          " ops written out in all: this one (" + std::to_string(ops) + " ops) is not checked";
            if (!refusal.empty()) {
                StageResult r;
                r.status = StageStatus::Inconclusive;
                Failure f;
                f.kind = FailureKind::Inconclusive;
                f.message = refusal;
                r.failure = f;
                finish(i, std::move(r));
                return;
            }
            opsWrittenOut += ops;
            opsOf[i] = ops;
            (membersAlone ? crossMembers : cross).push_back(i);
        };
        for (auto i : ids) {
            if (local[i]) work.push_back({&plan_, &stages[i], i, -1, i});
            else writeOut(i, membersOnly[i]);
        }
        // Each written-out stage proves the written-out form of one stored record.
        auto slotOf = [&](const ExpandedStages& e, const StagePlan& c, std::uint32_t xstage) {
            return rep.stagePlan.stageOfRecord[e.origin[c.stages[xstage].output]];
        };
        // A written-out plan's stages: structural failures decided here, the others checked.
        auto schedule = [&](std::unique_ptr<ExpandedStages> x, std::unique_ptr<StagePlan> xsp, const std::vector<std::uint32_t>& list, bool membersAlone) {
            std::vector<bool> broken(xsp->stages.size(), false);
            for (const auto& f : xsp->structural) {
                if (f.stage == kNone || broken[f.stage]) continue;
                broken[f.stage] = true;
                StageResult r;
                r.status = StageStatus::Failed;
                r.failure = f;
                finish(slotOf(*x, *xsp, f.stage), std::move(r));
            }
            // A stored stage none of whose written-out stages may go unchecked: with members
            // written out, one its stored lane does not prove leaves the whole stored stage
            // unchecked, and says so (never a result from its other parts alone).
            std::vector<bool> unchecked(stages.size(), false);
            if (membersAlone)
                for (std::uint32_t j = 0; j < xsp->stages.size(); ++j)
                    if (!broken[j] && !provenByReplicaZero(x->plan, xsp->stages[j])) unchecked[slotOf(*x, *xsp, j)] = true;
            for (auto i : list)
                if (unchecked[i]) {
                    StageResult r;
                    r.status = StageStatus::Inconclusive;
                    Failure f;
                    f.kind = FailureKind::Inconclusive;
                    f.message = "written out over the members of its expert-parallel group, this stage still ties its lanes together: it is not checked";
                    r.failure = f;
                    finish(i, std::move(r));
                }
            const auto expansion = static_cast<std::int32_t>(expansions.size());
            crossLists.push_back(std::make_unique<std::vector<std::uint32_t>>(list));
            crossMembersOnly.push_back(membersAlone);
            for (std::uint32_t j = 0; j < xsp->stages.size(); ++j)
                if (!broken[j] && !unchecked[slotOf(*x, *xsp, j)]) work.push_back({&x->plan, &xsp->stages[j], slotOf(*x, *xsp, j), expansion, j});
            expansions.push_back(std::move(x));
            expandedCuts.push_back(std::move(xsp));
        };
        if (!crossMembers.empty()) {
            auto t = Clock::now();
            auto x = std::make_unique<ExpandedStages>(expandStages(plan_, rep.stagePlan, crossMembers, true));
            auto xsp = std::make_unique<StagePlan>(cutStages(x->plan, &x->assumed));
            // A stage whose members written out still tie its lanes is written out whole
            // instead (the listed group's stages are proven by its stored lane only).
            std::vector<bool> tied(stages.size(), false);
            bool anyTied = false;
            for (std::uint32_t j = 0; j < xsp->stages.size(); ++j)
                if (!provenByReplicaZero(x->plan, xsp->stages[j])) tied[slotOf(*x, *xsp, j)] = anyTied = true;
            if (anyTied) {
                std::vector<std::uint32_t> keep;
                for (auto i : crossMembers) {
                    if (!tied[i]) {
                        keep.push_back(i);
                        continue;
                    }
                    opsWrittenOut -= opsOf[i];
                    writeOut(i, false);
                }
                crossMembers = std::move(keep);
                if (!crossMembers.empty()) {
                    x = std::make_unique<ExpandedStages>(expandStages(plan_, rep.stagePlan, crossMembers, true));
                    xsp = std::make_unique<StagePlan>(cutStages(x->plan, &x->assumed));
                }
            }
            rep.timing.expand += since(t);
            if (!crossMembers.empty()) schedule(std::move(x), std::move(xsp), crossMembers, true);
        }
        if (!cross.empty()) {
            auto t = Clock::now();
            auto x = std::make_unique<ExpandedStages>(expandStages(plan_, rep.stagePlan, cross));
            auto xsp = std::make_unique<StagePlan>(cutStages(x->plan, &x->assumed));
            rep.timing.expand += since(t);
            schedule(std::move(x), std::move(xsp), cross, false);
        }
        runPool(work);
    };

    // Isomorphic stages are proven once: the first stage of each structural key is checked;
    // the others take its result when it is a proof, and are checked themselves otherwise (so
    // every failure names its own ops). The partition does not depend on timing.
    // Stages proven in an earlier run (the same proof key) are decided here, without a check.
    std::vector<std::uint32_t> representative(stages.size());
    std::vector<std::uint32_t> firstWork, secondWork;
    std::vector<std::string> proofKeys;
    if (opts_.proofs) {
        proofKeys.resize(stages.size());
        for (std::uint32_t i = 0; i < stages.size(); ++i) {
            if (decided[i]) continue;
            proofKeys[i] = proofKey(plan_, stages[i], opts_.check, local[i]);
            if (!opts_.proofs->contains(proofKeys[i])) continue;
            decided[i] = true;
            auto& r = rep.results[i];
            r.status = StageStatus::Equivalent;
            r.cached = true;
            ++rep.cachedStages;
            if (opts_.onStageDone) opts_.onStageDone(r);
        }
    }
    {
        std::unordered_map<std::string, std::uint32_t> byKey;
        for (std::uint32_t i = 0; i < stages.size(); ++i) {
            representative[i] = i;
            if (decided[i]) continue;
            if (opts_.reuseIsomorphic) {
                // By proof key, not the bare structural key: two stages written out for every
                // replica are one obligation only if their lanes repeat alike (which ops and
                // tensors are per microbatch), and a stage replica 0 proves alone is never the
                // same obligation as one written out.
                auto [it, fresh] = byKey.emplace(proofKeys.empty() ? proofKey(plan_, stages[i], opts_.check, local[i]) : proofKeys[i], i);
                representative[i] = it->second;
                if (!fresh) continue;
            }
            firstWork.push_back(i);
        }
    }
    check(firstWork);
    for (std::uint32_t i = 0; i < stages.size(); ++i) {
        if (decided[i] || representative[i] == i) continue;
        const auto& proof = rep.results[representative[i]];
        if (proof.status == StageStatus::Equivalent) {
            auto& r = rep.results[i];
            r.stage = i;
            r.status = StageStatus::Equivalent;
            r.sameAs = representative[i];
            if (opts_.onStageDone) opts_.onStageDone(r);
        } else {
            secondWork.push_back(i);
        }
    }
    check(secondWork);
    // Only obligations actually proven: a stage proven through an isomorphic one counts only when
    // the two have the same proof key.
    if (opts_.proofs)
        for (std::uint32_t i = 0; i < stages.size(); ++i) {
            const auto& r = rep.results[i];
            if (r.status != StageStatus::Equivalent || r.cached) continue;
            if (r.sameAs != kNone && proofKeys[r.sameAs] != proofKeys[i]) continue;
            opts_.proofs->add(proofKeys[i]);
        }
    rep.writtenOutStages = static_cast<std::uint32_t>(std::count(local.begin(), local.end(), false));
    rep.uniqueStages = static_cast<std::uint32_t>(firstWork.size() + secondWork.size());
    rep.timing.check = since(t1);
    rep.cancelled = cancelled_.load();
    rep.outOfTime = outOfTime_.load();

    // Combine in graph order, independent of completion order.
    std::vector<std::uint32_t> order(stages.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
        return std::pair(stages[a].graphOrder, a) < std::pair(stages[b].graphOrder, b);
    });
    for (auto& f : planLevel) rep.failures.push_back(f);
    for (auto i : order) {
        const auto& r = rep.results[i];
        rep.timing.reduce += r.reduceSeconds;
        rep.timing.encode += r.encodeSeconds;
        rep.timing.solve += r.solveSeconds;
        switch (r.status) {
            case StageStatus::Equivalent: ++rep.passed; break;
            case StageStatus::Failed: ++rep.failed; break;
            case StageStatus::Inconclusive: ++rep.inconclusive; break;
            default: ++rep.skipped; break;
        }
        if (r.failure) rep.failures.push_back(*r.failure);
    }
    // The framework's source line of the failing op and of its logical op, where the plan says.
    for (auto& f : rep.failures) {
        if (const auto* s = plan_.opSource(true, f.parallelOp)) f.source = *s;
        if (const auto* s = plan_.opSource(false, f.logicalOp)) f.logicalSource = *s;
    }
    auto firstOf = [&](bool inconclusive) -> std::optional<Failure> {
        for (const auto& f : rep.failures)
            if (isInconclusive(f.kind) == inconclusive) return f;
        return std::nullopt;
    };
    if (auto f = firstOf(false)) {
        rep.verdict = Verdict::NotEquivalent;
        rep.failure = f;
    } else if (auto g = firstOf(true)) {
        rep.verdict = Verdict::Inconclusive;
        rep.failure = g;
    } else if (stages.empty()) {
        rep.verdict = Verdict::Inconclusive;
        Failure c;
        c.kind = FailureKind::Inconclusive;
        c.message = "the lineage describes no result to prove: every lineage record is an initial assumption";
        rep.failure = c;
    } else if (rep.cancelled || rep.skipped) {
        rep.verdict = Verdict::Inconclusive;
        Failure c;
        c.kind = FailureKind::Inconclusive;
        c.message = outOfTime_.load() && !rep.cancelled ? "the run reached its time budget of " + std::string(budgetText) + " before every stage was proven"
                                                        : "verification was cancelled before every stage was proven";
        rep.failure = c;
    } else {
        rep.verdict = Verdict::Equivalent;
    }
    if (rep.verdict == Verdict::NotEquivalent && opts_.confirmUpToElements > 0 && !cancelled_.load() && !expired()) {
        OracleOptions oo;
        oo.maxElements = opts_.confirmUpToElements;
        oo.trials = std::max(1, opts_.confirmTrials);
        try {
            auto o = runOracle(plan_, oo);
            if (o.status == OracleStatus::Differ) {
                rep.confirmation = "confirmed by the concrete oracle: " + o.summary();
            } else if (o.status == OracleStatus::Agree) {
                // A stage is checked on every input its lineage allows, and some of those the step
                // never produces (the gradient of a bias that softmax makes exactly 0 is, to the
                // stage that sums it, any tensor at all). Where the whole step, run at full shapes,
                // agrees on every claim, the counterexample is not shown to be reachable: saying NOT
                // EQUIVALENT would be a false alarm whenever it is not (soundness.md §1).
                rep.verdict = Verdict::Inconclusive;
                rep.counterexampleUnreached = true;
                rep.confirmation = "not confirmed by the concrete oracle: every lineage claim agreed at full shapes on " +
                                   std::to_string(oo.trials) + " random inputs: the failure above may need stage inputs that the step never "
                                   "produces (a stage is checked on every input its lineage allows), or special values; INCONCLUSIVE, "
                                   "not NOT EQUIVALENT";
            }
        } catch (const std::exception& e) {
            rep.confirmation.clear();
        }
    }
    rep.timing.total = since(t0);
    return rep;
}

VerifyReport verifyPlan(const Plan& plan, const VerifyOptions& opts) {
    VerificationRun run(plan, opts);
    return run.run();
}

VerifyReport invalidReport(std::vector<PlanProblem> problems) {
    VerifyReport r;
    r.verdict = Verdict::Invalid;
    Failure f;
    bool shape = !problems.empty() && problems[0].message.find("shape mismatch") != std::string::npos;
    f.kind = shape ? FailureKind::ShapeMismatch : FailureKind::InvalidPlan;
    f.message = problems.empty() ? "invalid plan" : problems[0].toString();
    r.failure = f;
    r.problems = std::move(problems);
    return r;
}

VerifyReport reportWithoutPlan(Verdict v, FailureKind kind, const std::string& message) {
    VerifyReport r;
    r.verdict = v;
    Failure f;
    f.kind = kind;
    f.message = message;
    r.failure = f;
    r.failures = {f};
    if (v == Verdict::Invalid) r.problems.push_back(PlanProblem{"", message});
    return r;
}

nlohmann::json reportToJson(const VerifyReport& r) {
    nlohmann::json j;
    j["verdict"] = toString(r.verdict);
    if (!r.confirmation.empty()) j["confirmation"] = r.confirmation;
    if (r.counterexampleUnreached) j["counterexample_unreached"] = true;
    j["stages"] = {{"total", r.results.size()},
                   {"passed", r.passed},
                   {"failed", r.failed},
                   {"inconclusive", r.inconclusive},
                   {"skipped", r.skipped}};
    j["timing"] = {{"load", r.timing.load},     {"expand", r.timing.expand},     {"cut", r.timing.cut},       {"check", r.timing.check},
                   {"reduce", r.timing.reduce}, {"encode", r.timing.encode}, {"solve", r.timing.solve},
                   {"total", r.timing.total}};
    j["jobs"] = r.jobs;
    if (r.isolated) j["solver_processes"] = true;
    if (r.cancelled) j["cancelled"] = true;
    if (r.budgetSeconds > 0) j["budget"] = {{"seconds", r.budgetSeconds}, {"reached", r.outOfTime}};
    j["stages"]["unique"] = r.uniqueStages;
    j["stages"]["written_out"] = r.writtenOutStages;
    j["stages"]["cached"] = r.cachedStages;
    if (r.failure) j["failure"] = r.failure->toJson();
    if (r.failures.size() > 1) {
        nlohmann::json all = nlohmann::json::array();
        for (const auto& f : r.failures) all.push_back(f.toJson());
        j["failures"] = all;
    }
    if (!r.problems.empty()) {
        nlohmann::json p = nlohmann::json::array();
        for (const auto& x : r.problems) p.push_back({{"path", x.path}, {"message", x.message}});
        j["problems"] = p;
    }
    if (!r.warnings.empty()) j["warnings"] = r.warnings;
    if (!r.findings.empty()) j["findings"] = r.findings;
    nlohmann::json st = nlohmann::json::array();
    for (const auto& res : r.results) {
        nlohmann::json s = {{"id", res.stage},
                            {"status", toString(res.status)},
                            {"seconds", res.reduceSeconds + res.encodeSeconds + res.solveSeconds}};
        if (res.stage < r.stagePlan.stages.size()) {
            const auto& stage = r.stagePlan.stages[res.stage];
            s["kind"] = stage.glue() ? "glue" : "op";
            s["logical_ops"] = stage.logicalOps.size();
            s["parallel_ops"] = stage.parallelOps.size();
        }
        if (res.fullElements > 0) s["elements"] = {{"reduced", res.reducedElements}, {"full", res.fullElements}};
        if (!res.note.empty()) s["note"] = res.note;
        if (res.sameAs != kNone) s["same_as"] = res.sameAs;
        if (res.cached) s["cached"] = true;
        st.push_back(std::move(s));
    }
    j["stage_results"] = std::move(st);
    return j;
}

std::string reportToText(const VerifyReport& r, bool withStats) {
    std::ostringstream os;
    os << headline(r.verdict);
    if (r.verdict == Verdict::Invalid) {
        os << ": " << (r.problems.empty() ? "invalid plan" : r.problems[0].toString()) << "\n";
        for (std::size_t i = 1; i < r.problems.size(); ++i) os << "  also: " << r.problems[i].toString() << "\n";
        return os.str();
    }
    os << ": " << r.passed << " of " << r.results.size() << " stages proven";
    if (r.failed) os << ", " << r.failed << " failed";
    if (r.inconclusive) os << ", " << r.inconclusive << " inconclusive";
    if (r.skipped) os << ", " << r.skipped << " skipped";
    char buf[160];
    std::snprintf(buf, sizeof buf, " (%.2f s, %u jobs)", r.timing.total, r.jobs);
    os << buf << "\n";
    if (r.cancelled) os << "  cancelled: the stages not proven by then were stopped or skipped\n";
    else if (r.outOfTime) {
        std::snprintf(buf, sizeof buf, "  the run reached its time budget of %g s: the stages not proven by then were stopped or skipped\n", r.budgetSeconds);
        os << buf;
    }
    if (r.failure) os << r.failure->toText();
    if (!r.confirmation.empty()) os << "  " << r.confirmation << "\n";
    if (r.failures.size() > 1) os << "\n  (" << r.failures.size() - 1 << " more failure(s) in later stages; see --json)\n";
    for (const auto& f : r.findings) os << "finding: " << f << "\n";
    for (const auto& w : r.warnings) os << "warning: " << w << "\n";
    if (withStats) {
        std::uint32_t t1 = 0, t1b = 0, t2 = 0, t3 = 0;
        std::uint64_t full = 0, red = 0, largest = 0;
        for (const auto& res : r.results) {
            largest = std::max(largest, res.reducedElements);
            t1 += res.tiers.simplify;
            t1b += res.tiers.expLog;
            t2 += res.tiers.solveEqs;
            t3 += res.tiers.solver;
            full += res.fullElements;
            red += res.reducedElements;
        }
        os << "\nstats:\n";
        std::snprintf(buf, sizeof buf, "  load %.3f s, expand %.3f s, cut %.3f s, check %.3f s (wall)\n", r.timing.load, r.timing.expand,
                      r.timing.cut, r.timing.check);
        os << buf;
        std::snprintf(buf, sizeof buf, "  per-stage sums: reduce %.3f s, encode %.3f s, solve %.3f s\n", r.timing.reduce,
                      r.timing.encode, r.timing.solve);
        os << buf;
        double rate = r.timing.check > 0 ? static_cast<double>(r.results.size()) / r.timing.check : 0.0;
        std::snprintf(buf, sizeof buf, "  stages solved per second: %.1f\n", rate);
        os << buf;
        os << "  unique stages solved: " << r.uniqueStages << " of " << r.results.size() << " (isomorphic stages reuse a proof)\n";
        if (r.cachedStages > 0) os << "  proven in an earlier run: " << r.cachedStages << " (the same obligation, not checked again)\n";
        if (r.writtenOutStages > 0)
            os << "  stages tying replicas together: " << r.writtenOutStages << " (written out for every replica; replica 0 proves the rest)\n";
        os << "  output groups proven by simplify / exp-log normal form / solve-eqs / solver: " << t1 << " / " << t1b << " / " << t2 << " / " << t3
           << "\n";
        os << "  tensor elements: " << full << " full, " << red << " after shape reduction (largest stage: " << largest << ")\n";
        os << "  peak memory: " << peakMemoryKb() / 1024 << " MiB\n";
    }
    return printable(os.str());  // names from the plan never drive the terminal
}

}  // namespace tv
