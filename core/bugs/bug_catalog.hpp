// The bug lab: a catalog of parallelization bugs that really happen in distributed training,
// each a mutation that can be injected into any plan that has the structure it needs (generated,
// hand-written or imported), together with where the verifier must report it.
//
// A mutation finds its sites by structure (op kinds, groups and rank coordinates, phases,
// lineage), never by a naming scheme, edits a copy of the plan's document, and reads the result
// back. What the verifier has to say about the mutant (its verdict, failure kinds and the ops and
// ranks a correct diagnosis may name) is derived from the edit, not written down per plan.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/plan_json.hpp"
#include "model/plan.hpp"
#include "verify/diagnosis.hpp"
#include "verify/verifier.hpp"

namespace tv::bugs {

enum class Category : std::uint8_t { Communication, RankAssignment, Computation, Scaling, Scheduling, DataParallel, Optimizer, Data };
std::string_view toString(Category c);

/// One entry of the catalog.
struct BugKind {
    std::string_view name;
    Category category;
    std::string_view summary;   ///< the real-world bug it models, one line
    int paperCase = 0;          ///< the row of the TrainVerify paper's bug table (§8.3), 0 if none
    std::string_view needs;     ///< what a plan must have, e.g. "tensor parallelism"
};

/// The whole catalog, in a fixed order (the paper's 14 first).
const std::vector<BugKind>& catalog();
/// Null when no entry has this name.
const BugKind* findBug(std::string_view name);

/// A place a mutation can be applied.
struct Site {
    std::vector<std::string> ops;       ///< the parallel ops it edits (the first names the site)
    std::vector<std::int32_t> ranks;    ///< the ranks those ops run on (sorted)
    bool writtenOut = false;            ///< found in the plan with replicas and microbatches written out
    std::string detail;                 ///< e.g. "all_reduce over ranks 0, 1"
};

/// What verifying a mutant must report.
struct Expectation {
    bool invalid = false;                 ///< the reader rejects the mutant (a shape mismatch)
    std::vector<FailureKind> kinds;       ///< acceptable failure kinds
    /// Acceptable (parallel op, rank) of the diagnosis: the edited ops and the ops their broken
    /// dataflow reaches up to the first lineage record, with the other terms of that record.
    std::vector<std::pair<std::string, std::int32_t>> locations;
    std::vector<std::string> tensors;     ///< acceptable parallel tensors of a dataflow_broken diagnosis
    std::vector<std::string> edited;      ///< the ops edited or added
    /// Above 0: the mutant is stored with replicas; a diagnosis in a written-out stage names
    /// "<op>~mb<m>~dp<k>" on rank + k * ranksPerReplica, which is compared with its stored op.
    std::int32_t ranksPerReplica = 0;
};

struct Mutant {
    std::string bug;
    Site site;
    std::string change;                    ///< what the edit did, one sentence
    nlohmann::json document;               ///< the mutant plan file (format of the input)
    std::unique_ptr<Plan> plan;            ///< null when the reader rejects it
    std::vector<PlanProblem> problems;     ///< the reader's problems when it does
    Expectation expect;
};

struct MutateOptions {
    std::string at;          ///< a parallel op the site must contain; empty: the default site
    std::int32_t rank = -1;  ///< a rank the site must run on; -1: any
};

/// The sites of a bug in a plan, or why it cannot be looked for there.
struct SiteSearch {
    std::vector<Site> sites;
    /// An unknown bug, or one that does not apply to the plan (saying what the plan lacks); its
    /// path names what was asked: "bug".
    std::optional<PlanProblem> refused;
};

/// Every site of `bug` in the plan (written out first if the bug needs it).
SiteSearch findSites(const Plan& plan, std::string_view bug);

/// A mutant, or why the bug cannot be injected as asked.
struct Mutation {
    std::optional<Mutant> mutant;
    /// Why not, its path naming what was asked: "bug" (unknown, does not apply, no site), "at"
    /// (no such op, or not a site of the bug) or "rank" (no site on that rank).
    std::optional<PlanProblem> refused;
};

/// Injects `bug` into a copy of the plan.
Mutation mutate(const Plan& plan, std::string_view bug, const MutateOptions& opts = {});

/// Whether the report catches the mutant where it should. `why` (optional) says what was found
/// and, when it is not as expected, how it differs.
bool caught(const Mutant& mutant, const VerifyReport& report, std::string* why = nullptr);

/// The catalog as JSON (name, category, summary, paper_case, needs), for `mutate --list --json`.
nlohmann::json catalogJson();

}  // namespace tv::bugs
