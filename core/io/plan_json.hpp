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

PlanLoadResult readPlanText(const std::string& text);
PlanLoadResult readPlanJson(const nlohmann::json& doc);
PlanLoadResult readPlanFile(const std::string& path);

nlohmann::json writePlanJson(const Plan& plan);
/// The same, finding repeated blocks (version 3) only when `findRepeats`: a document whose
/// arrays line up one to one with the plan's tensors, ops and lineage records.
nlohmann::json writePlanJson(const Plan& plan, bool findRepeats);
std::string writePlanText(const Plan& plan);

}  // namespace tv
