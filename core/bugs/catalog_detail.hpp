// Internal to the bug lab (core/bugs), not part of its API (that is bug_catalog.hpp): the
// declarations the catalog's files share, in namespace tv::bugs::detail. The catalog is split by
// concept, one file each, so that each can be read (and changed) without the others:
//
//   site_view.{hpp,cpp}         View: a plan as the site finders see it; makeSite, prefer
//   plan_editor.{hpp,cpp}       Editor: the edits to a copy of the plan's document
//   entries_communication.cpp   the communication and rank-assignment bugs (collectives, sends)
//   entries_computation.cpp     the computation and scaling bugs (kernels' constants, backward
//                               fan-outs, the loss scale)
//   entries_data_parallel.cpp   the data-parallel and optimizer bugs (gradient reducers, ZeRO
//                               shards, the optimizer's step)
//   entries_microbatches.cpp    the scheduling and data bugs (gradient accumulation, the
//                               pipeline's microbatch slots, the data loader)
//   entries_expert_parallel.cpp the expert-parallel bugs (expert gradients' scale and reduce
//                               groups, the gradient norm over the experts)
//   bug_catalog.cpp             the entries' order, the public API (findSites, mutate, caught,
//                               the catalog) and what the verifier must report
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bugs/plan_editor.hpp"
#include "bugs/site_view.hpp"

namespace tv::bugs::detail {

enum class Form : std::uint8_t {
    Stored,               ///< as the plan stores it (every replica and microbatch alike)
    WrittenOut,           ///< replicas and microbatches written out: one instance differs
    StoredThenWrittenOut  ///< stored if it has a site there, else written out
};

struct Entry {
    BugKind kind;
    Form form;
    std::vector<FailureKind> kinds;  ///< empty: the reader must reject the mutant (shape mismatch)
    std::string (*lacks)(const Plan&);               ///< what the plan lacks for this bug, "" if nothing
    std::string_view noSite;                          ///< why a plan may have no site
    std::vector<Site> (*sites)(const View&);
    std::string (*apply)(Editor&, const Site&);       ///< edits; returns the change, one sentence
};

// ----- what a plan must have: the entries' `lacks` (bug_catalog.cpp) -------------------------

std::string lacksNothing(const Plan&);
std::string needsTp(const Plan& p);
std::string needsDp(const Plan& p);
std::string needsMicrobatches(const Plan& p);
std::string needsPpTp(const Plan& p);
std::string needsPp(const Plan& p);
std::string needsPpMicrobatches(const Plan& p);
std::string needsCp(const Plan& p);

// ----- the entries by category: each appends its rows (bug_catalog.cpp puts them in order) ---

/// Category::Communication and Category::RankAssignment (entries_communication.cpp).
void appendCommunicationEntries(std::vector<Entry>& out);
/// Category::Computation and Category::Scaling (entries_computation.cpp).
void appendComputationEntries(std::vector<Entry>& out);
/// Category::DataParallel and Category::Optimizer (entries_data_parallel.cpp).
void appendDataParallelEntries(std::vector<Entry>& out);
/// Category::Scheduling and Category::Data (entries_microbatches.cpp).
void appendMicrobatchEntries(std::vector<Entry>& out);
/// Expert parallelism over the data-parallel replicas (entries_expert_parallel.cpp).
void appendExpertParallelEntries(std::vector<Entry>& out);

/// Inside the catalog, a request that cannot be met is thrown as a Refusal and caught by the public
/// functions (findSites, mutate), which return it as their `refused` problem.
struct Refusal {
    PlanProblem problem;
};

}  // namespace tv::bugs::detail
