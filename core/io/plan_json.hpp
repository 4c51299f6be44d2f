// Plan file format, versions 1 to 3 (docs/plan-format.md): reading (with validation that names the JSON path of every
// problem) and canonical writing (read -> write -> read is the identity).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/plan.hpp"
#include "model/problem.hpp"

namespace tv {


struct PlanLoadResult {
    std::unique_ptr<Plan> plan;          ///< null when the file is invalid
    std::vector<PlanProblem> problems;   ///< the first problems, in file order
    bool ok() const { return plan != nullptr; }
};

/// At most this many problems are reported for one file.
inline constexpr std::size_t kMaxProblems = 20;

struct ReadOptions {
    /// A plan storing one member of each expert-parallel group (plan-format.md §7.3) is read as
    /// stored (Replication::members), as the verifier checks it; by default its members are
    /// written out into the group listed, the form the explorer, the bug lab and the oracle read.
    bool keepMembersStored = false;
};

PlanLoadResult readPlanText(const std::string& text, const ReadOptions& options = {});
PlanLoadResult readPlanJson(const nlohmann::json& doc, const ReadOptions& options = {});
PlanLoadResult readPlanFile(const std::string& path, const ReadOptions& options = {});

nlohmann::json writePlanJson(const Plan& plan);
/// The same, finding repeated blocks (version 3) only when `findRepeats`: a document whose
/// arrays line up one to one with the plan's tensors, ops and lineage records.
nlohmann::json writePlanJson(const Plan& plan, bool findRepeats);
std::string writePlanText(const Plan& plan);

}  // namespace tv
