// The jobs both front ends do, in one place and without Qt: open a plan file or a pair of nnScaler
// plans, write its replicas out for drawing and map the drawn stages to the verified ones, finish a
// report (what an nnScaler mapping could not claim), build the report document (JSON and HTML),
// generate a plan to a file, inject a bug and judge the run. The command line calls these
// directly; the Studio calls them off its GUI thread. The data flow:
//
//   plan file / nnScaler pair --open--> OpenedPlan --draw--> DrawnPlan (written out, stages mapped)
//                                          |
//                                          +--verify (VerificationRun)--> VerifyReport --finishReport-->
//                                             reportDocument / reportHtml / judgeBug
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bugs/bug_catalog.hpp"
#include "generate/generator.hpp"
#include "io/plan_json.hpp"
#include "model/plan.hpp"
#include "verify/stages.hpp"
#include "verify/verifier.hpp"

namespace tv::session {

/// Where a plan comes from: a plan file, or a pair of nnScaler plans (then `path` is the parallel
/// plan's file and `logicalPath` the logical plan's).
struct PlanSource {
    std::string path;
    std::string logicalPath;
    /// A pair of captured PyTorch programs: `logicalPath` the single-device graph, these the
    /// ranks' graphs (`path` is the first of them).
    std::vector<std::string> rankPaths;
    bool torchPair() const { return !rankPaths.empty(); }
    bool nnScalerPair() const { return !logicalPath.empty() && rankPaths.empty(); }
};

/// A plan read and checked by the validating reader: what Verify checks. A plan stored once (its
/// replicas and microbatches as one lane) stays stored; DrawnPlan writes it out for drawing.
struct OpenedPlan {
    PlanSource source;
    std::shared_ptr<const Plan> plan;
    /// A pair of nnScaler plans: what the mapping noticed, and the final claims it could not make
    /// (then no report of this plan is EQUIVALENT: finishReport makes it INCONCLUSIVE).
    std::vector<std::string> mappingNotes;
    std::vector<std::string> mappingUnchecked;
    std::vector<std::string> mappingFindings;  ///< nnScaler: runtime pieces against index maps (PairLoad::findings)
    /// Set when the plan is a copy of another with a bug injected (injectBug).
    std::shared_ptr<const bugs::Mutant> mutant;
    double readSeconds = 0;  ///< reading (and for a pair, mapping)
};

/// An open that worked (`opened`) or the report that says why not: INVALID for an unreadable or
/// invalid file (`problems`, located by JSON path), or what a pair's mapping found.
struct OpenResult {
    PlanSource source;
    std::shared_ptr<const OpenedPlan> opened;
    VerifyReport refusal;               ///< without `opened`: the report to print or show
    std::vector<PlanProblem> problems;  ///< without `opened`, a plan file: the reader's problems (paths in the file)
    double seconds = 0;
    bool ok() const { return opened != nullptr; }
    /// Without `opened`: what went wrong, for a message box (the file, then each problem; for a
    /// pair, the verdict and the reason).
    std::string message() const;
};

/// `read`: how the plan is read (the verifier keeps one member of each group stored).
OpenResult openPlanFile(const std::string& path, const ReadOptions& read = {});
OpenResult openNnScalerPair(const std::string& logicalPath, const std::string& parallelPath);
/// A single-device PyTorch graph and one graph per rank (.py or .gpickle), lowered and related.
OpenResult openTorchPair(const std::string& logicalPath, const std::vector<std::string>& rankPaths, const std::string& relationsPath = {});
/// The nnScaler pair or the PyTorch pair the paths name (by the files' extensions).
OpenResult openPair(const std::string& logicalPath, const std::vector<std::string>& parallelPaths, const std::string& relationsPath = {});
/// A plan already read (e.g. generated), opened as if from `source`.
std::shared_ptr<const OpenedPlan> openedFromPlan(std::unique_ptr<Plan> plan, PlanSource source, double readSeconds = 0);

/// What the explorer draws of an opened plan: every replica and microbatch of a plan stored once,
/// written out, unless that is past `maxWrittenOutOps` (a 405B plan has 135 million ops written
/// out): then the plan as stored, the one lane that stands for all of them. Its stages, and how
/// each maps onto the verified plan's stages (a stored stage stands for its instances in every lane).
struct DrawnPlan {
    std::shared_ptr<const Plan> plan;
    StagePlan stages;
    std::shared_ptr<const StagePlan> verifiedStages;  ///< the opened plan's stages (what Verify checks)
    std::vector<std::uint32_t> drawnToVerified;
    /// The opened plan is stored once and drawn as stored (too big to write out).
    bool asStored = false;
    double stageSeconds = 0;  ///< writing out and cutting stages
};

DrawnPlan drawPlan(const OpenedPlan& opened, std::size_t maxWrittenOutOps);
/// The same for a plan already drawn (a re-layout): its stages cut again and mapped, the verified
/// plan's stages reused when given.
DrawnPlan redrawPlan(const OpenedPlan& opened, std::shared_ptr<const Plan> drawn, std::shared_ptr<const StagePlan> verifiedStages = nullptr);

/// A finished run's report as the plan's origin limits it: for an nnScaler pair, the mapping's
/// notes become warnings, and a final claim it could not make turns EQUIVALENT into INCONCLUSIVE.
void finishReport(const OpenedPlan& opened, VerifyReport& report);

/// The report document (`trainverify verify --json`'s schema): the report, the plan file and name,
/// the injected bug, the nnScaler pair, the peak memory. `opened` may be null (a plan that did
/// not open).
nlohmann::json reportDocument(const PlanSource& source, const OpenedPlan* opened, const VerifyReport& report);
/// The same as one HTML page.
std::string reportHtml(const PlanSource& source, const OpenedPlan* opened, const VerifyReport& report);

/// A generated plan, validated and in canonical form: read back by the validating reader and
/// written by the canonical writer (format 3: repeats found by the writer).
struct GeneratedPlan {
    std::unique_ptr<Plan> plan;
    std::string text;                   ///< the plan file
    std::optional<PlanProblem> configurationProblem;  ///< the options are invalid (nothing generated)
    std::vector<PlanProblem> problems;  ///< the generator wrote a plan the reader rejects (a defect of ours)
    double seconds = 0;
    bool ok() const { return plan != nullptr; }
    /// What is wrong, one message (configuration or the reader's first problems).
    std::string error() const;
};

GeneratedPlan generatePlan(const gen::GenerateOptions& options);
/// A file name for a generated plan in a cache directory: its name, and a hash of its text that
/// tells apart configurations the name leaves out (schedule, optimizer, format).
std::string generatedFileName(const GeneratedPlan& generated);

/// Writes `text` to `path` whole, then renames it into place: a reader never sees half a file,
/// and a failed write leaves no partial file. Returns false with the reason.
bool writeFileAtomically(const std::string& path, const std::string& text, std::string* error);

/// A bug injected into a copy of an opened plan: the mutant, and the copy opened (null when the
/// reader rejects the copy; then `mutant->problems` says why). The mutant's plan has moved into
/// `opened` (Mutant::plan is null). `refused`: the bug cannot be made as asked (bugs::mutate's
/// problem). Exceptions (out of memory) pass through.
struct InjectedBug {
    std::shared_ptr<const bugs::Mutant> mutant;
    std::shared_ptr<const OpenedPlan> opened;
    std::optional<PlanProblem> refused;  ///< the bug cannot be made as asked (nothing else is set)
};
InjectedBug injectBug(const OpenedPlan& from, const std::string& bug, const bugs::MutateOptions& options = {});

/// Whether a run catches an injected bug where it should, and what was found.
struct BugJudgement {
    bool caught = false;
    std::string detail;
    /// "caught" or "NOT CAUGHT AS EXPECTED".
    std::string_view outcome() const;
    /// "Caught where it was injected: <detail>" or "Not caught where expected: <detail>".
    std::string sentence() const;
};
BugJudgement judgeBug(const bugs::Mutant& mutant, const VerifyReport& report);

}  // namespace tv::session
