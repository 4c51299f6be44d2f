#include "session/session.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <functional>

#include "explore/verified_view.hpp"
#include "io/plan_repeats.hpp"
#include "nnscaler/nnscaler_pair.hpp"
#include "torch/torch_pair.hpp"
#include "verify/report_html.hpp"
#include "verify/symmetry.hpp"

namespace tv::session {

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string OpenResult::message() const {
    if (ok()) return {};
    if (!source.nnScalerPair() && !source.torchPair()) {
        std::string text = source.path + ":";
        for (const auto& p : problems) text += "\n" + p.toString();
        return text;
    }
    return std::string(headline(refusal.verdict)) + ": " +
           (refusal.failure ? refusal.failure->message : std::string("the pair cannot be mapped"));
}

OpenResult openPlanFile(const std::string& path, const ReadOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    OpenResult r;
    r.source.path = path;
    auto read = readPlanFile(path, options);
    r.seconds = secondsSince(t0);
    if (!read.ok()) {
        r.problems = read.problems;
        // The report names the file before each problem's place in it.
        for (auto& p : read.problems) p.path = path + (p.path.empty() ? "" : ": " + p.path);
        r.refusal = invalidReport(std::move(read.problems));
        return r;
    }
    r.opened = openedFromPlan(std::move(read.plan), r.source, r.seconds);
    return r;
}

OpenResult openNnScalerPair(const std::string& logicalPath, const std::string& parallelPath) {
    OpenResult r;
    r.source = {parallelPath, logicalPath, {}};
    auto pair = nnscaler::loadPair(logicalPath, parallelPath);
    r.seconds = pair.seconds;
    if (!pair.plan) {
        // Unreadable files, an operator without semantics, or a defect found while mapping (with
        // what the mapping noticed before it, as warnings).
        nnscaler::applyMappingLimits(pair, pair.report);
        r.refusal = std::move(pair.report);
        return r;
    }
    auto opened = std::make_shared<OpenedPlan>();
    opened->source = r.source;
    opened->plan = std::shared_ptr<const Plan>(std::move(pair.plan));
    opened->mappingNotes = std::move(pair.notes);
    opened->mappingUnchecked = std::move(pair.unchecked);
    opened->mappingFindings = std::move(pair.findings);
    opened->readSeconds = r.seconds;
    r.opened = std::move(opened);
    return r;
}

OpenResult openTorchPair(const std::string& logicalPath, const std::vector<std::string>& rankPaths, const std::string& relationsPath) {
    OpenResult r;
    r.source = {rankPaths.empty() ? std::string() : rankPaths[0], logicalPath, rankPaths};
    auto pair = torch::loadTorchPair(logicalPath, rankPaths, relationsPath);
    r.seconds = pair.seconds;
    auto opened = std::make_shared<OpenedPlan>();
    opened->source = r.source;
    opened->mappingNotes = std::move(pair.notes);
    for (auto& o : pair.outputs) opened->mappingNotes.push_back(std::move(o));
    opened->mappingUnchecked = std::move(pair.unchecked);
    if (!pair.plan) {
        // Unreadable graphs, a result that needs an operator without semantics, or an input whose
        // layout cannot be told (with what was noticed before, as warnings).
        finishReport(*opened, pair.report);
        r.refusal = std::move(pair.report);
        return r;
    }
    opened->plan = std::shared_ptr<const Plan>(std::move(pair.plan));
    opened->readSeconds = r.seconds;
    r.opened = std::move(opened);
    return r;
}

OpenResult openPair(const std::string& logicalPath, const std::vector<std::string>& parallelPaths, const std::string& relationsPath) {
    if (torch::isTorchGraphPath(logicalPath)) return openTorchPair(logicalPath, parallelPaths, relationsPath);
    if (parallelPaths.size() != 1 || !relationsPath.empty()) {
        OpenResult r;
        r.source = {parallelPaths.empty() ? std::string() : parallelPaths[0], logicalPath, {}};
        r.refusal = reportWithoutPlan(Verdict::Invalid, FailureKind::InvalidPlan,
                                      !relationsPath.empty() ? std::string("--relations is for PyTorch graphs (.py or .gpickle); nnScaler plans carry their own")
                                                             : "an nnScaler pair is one logical plan and one parallel plan (" + std::to_string(parallelPaths.size()) +
                                                                   " parallel files given; one file per rank is for PyTorch graphs, .py or .gpickle)");
        return r;
    }
    return openNnScalerPair(logicalPath, parallelPaths[0]);
}

std::shared_ptr<const OpenedPlan> openedFromPlan(std::unique_ptr<Plan> plan, PlanSource source, double readSeconds) {
    auto opened = std::make_shared<OpenedPlan>();
    opened->source = std::move(source);
    opened->plan = std::shared_ptr<const Plan>(std::move(plan));
    opened->readSeconds = readSeconds;
    return opened;
}

DrawnPlan drawPlan(const OpenedPlan& opened, std::size_t maxWrittenOutOps) {
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const Plan> drawn = opened.plan;
    if (opened.plan->replication.active() && writtenOutCounts(*opened.plan).ops <= maxWrittenOutOps)
        drawn = std::make_shared<const Plan>(expandReplicas(*opened.plan));
    auto d = redrawPlan(opened, std::move(drawn));
    d.stageSeconds = secondsSince(t0);
    return d;
}

DrawnPlan redrawPlan(const OpenedPlan& opened, std::shared_ptr<const Plan> drawn, std::shared_ptr<const StagePlan> verifiedStages) {
    const auto t0 = std::chrono::steady_clock::now();
    DrawnPlan d;
    d.plan = std::move(drawn);
    d.stages = cutStages(*d.plan);
    if (!verifiedStages)
        verifiedStages = std::make_shared<const StagePlan>(d.plan == opened.plan ? d.stages : cutStages(*opened.plan));
    d.verifiedStages = std::move(verifiedStages);
    d.drawnToVerified = mapDrawnStages(*d.plan, d.stages, *opened.plan, *d.verifiedStages);
    d.asStored = d.plan->replication.active();
    d.stageSeconds = secondsSince(t0);
    return d;
}

void finishReport(const OpenedPlan& opened, VerifyReport& report) {
    if (opened.source.torchPair()) {
        for (const auto& n : opened.mappingNotes) report.warnings.push_back("graphs: " + n);
        for (const auto& u : opened.mappingUnchecked) report.warnings.push_back("graphs: not checked: " + u);
        if (report.verdict == Verdict::Equivalent && !opened.mappingUnchecked.empty()) {
            report.verdict = Verdict::Inconclusive;
            Failure f;
            f.kind = FailureKind::Inconclusive;
            f.message = "every stage is proven, but " + opened.mappingUnchecked.front() + " could not be claimed" +
                        (opened.mappingUnchecked.size() > 1 ? " (and " + std::to_string(opened.mappingUnchecked.size() - 1) + " more)" : std::string());
            report.failure = f;
            report.failures.insert(report.failures.begin(), f);
        }
        return;
    }
    if (!opened.source.nnScalerPair()) return;
    nnscaler::PairLoad limits;
    limits.notes = opened.mappingNotes;
    limits.unchecked = opened.mappingUnchecked;
    limits.findings = opened.mappingFindings;
    nnscaler::applyMappingLimits(limits, report);
}

nlohmann::json reportDocument(const PlanSource& source, const OpenedPlan* opened, const VerifyReport& report) {
    auto json = reportToJson(report);
    if (opened) {
        json["plan"] = {{"file", source.path}, {"name", opened->plan->name}};
        if (opened->mutant) json["plan"]["mutant"] = {{"bug", opened->mutant->bug}, {"change", opened->mutant->change}};
    }
    if (source.nnScalerPair()) json["nnscaler"] = {{"logical", source.logicalPath}, {"parallel", source.path}};
    if (source.torchPair()) json["torch"] = {{"logical", source.logicalPath}, {"ranks", source.rankPaths}};
    json["peak_memory_kb"] = peakMemoryKb();
    return json;
}

std::string reportHtml(const PlanSource& source, const OpenedPlan* opened, const VerifyReport& report) {
    HtmlReportOptions o;
    o.title = opened && !opened->plan->name.empty() ? opened->plan->name : source.path;
    o.planFile = source.path;
    return reportToHtml(report, o);
}

std::string GeneratedPlan::error() const {
    if (configurationProblem) return "invalid configuration: " + configurationProblem->message;
    std::string text = "internal error: the generated plan is invalid:";
    for (const auto& p : problems) text += "\n  " + p.toString();
    return text;
}

GeneratedPlan generatePlan(const gen::GenerateOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    GeneratedPlan g;
    g.configurationProblem = gen::validate(options);
    if (g.configurationProblem) return g;
    // The repeats are found once, by the writer, on the plan as read.
    auto written = options;
    if (written.format == 3) written.format = 2;
    // Everything written goes through the validating reader and the canonical writer.
    auto doc = gen::generatePlan(written);
    // Read as stored: one member of each expert-parallel group stays one (the verifier's form).
    auto read = readPlanJson(doc, ReadOptions{true});
    if (!read.ok()) {
        g.problems = std::move(read.problems);
        return g;
    }
    read.plan->storedWithRepeats = options.format == 3;
    g.text = writePlanText(*read.plan);
    g.plan = std::move(read.plan);
    g.seconds = secondsSince(t0);
    return g;
}

std::string generatedFileName(const GeneratedPlan& generated) {
    char hash[16];
    std::snprintf(hash, sizeof hash, "%08zx", std::hash<std::string>{}(generated.text) & 0xffffffffu);
    return (generated.plan->name.empty() ? std::string("generated") : generated.plan->name) + "-" + hash + ".json";
}

bool writeFileAtomically(const std::string& path, const std::string& text, std::string* error) {
    const std::string part = path + ".part";
    {
        std::ofstream out(part, std::ios::binary | std::ios::trunc);
        if (out) out << text;
        if (out) out.flush();
        if (!out) {
            const int err = errno;
            std::remove(part.c_str());
            if (error) *error = "cannot write " + path + ": " + std::strerror(err);
            return false;
        }
    }
    if (std::rename(part.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(part.c_str());
        if (error) *error = "cannot write " + path + ": renaming " + part + " into place: " + std::strerror(err);
        return false;
    }
    return true;
}

InjectedBug injectBug(const OpenedPlan& from, const std::string& bug, const bugs::MutateOptions& options) {
    InjectedBug r;
    auto mutation = bugs::mutate(*from.plan, bug, options);
    if (!mutation.mutant) {
        r.refused = std::move(mutation.refused);
        return r;
    }
    auto mutant = std::make_shared<bugs::Mutant>(std::move(*mutation.mutant));
    if (mutant->plan) {
        // The copy keeps where it came from and what its mapping could not claim.
        auto opened = std::make_shared<OpenedPlan>();
        opened->source = from.source;
        opened->plan = std::shared_ptr<const Plan>(std::move(mutant->plan));
        opened->mappingNotes = from.mappingNotes;
        opened->mappingUnchecked = from.mappingUnchecked;
        opened->mutant = mutant;
        r.opened = std::move(opened);
    }
    r.mutant = std::move(mutant);
    return r;
}

std::string_view BugJudgement::outcome() const { return caught ? "caught" : "NOT CAUGHT AS EXPECTED"; }

std::string BugJudgement::sentence() const {
    return (caught ? "Caught where it was injected: " : "Not caught where expected: ") + detail;
}

BugJudgement judgeBug(const bugs::Mutant& mutant, const VerifyReport& report) {
    BugJudgement j;
    j.caught = bugs::caught(mutant, report, &j.detail);
    return j;
}

}  // namespace tv::session
