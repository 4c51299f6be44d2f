#include "nnscaler/nnscaler_pair.hpp"

#include <chrono>

#include "io/plan_json.hpp"
#include "nnscaler/nnscaler_import.hpp"
#include "pickle/pickle.hpp"

namespace tv::nnscaler {

PairLoad loadPair(const std::string& logicalPath, const std::string& parallelPath) {
    auto t0 = std::chrono::steady_clock::now();
    PairLoad l;
    auto fail = [&](Verdict v, FailureKind kind, const std::string& msg) {
        l.report = reportWithoutPlan(v, kind, msg);
        l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return std::move(l);
    };
    auto readOne = [&](const std::string& path, Plan& out, std::string& error) {
        try {
            auto doc = pickle::readFile(path);
            out = readPlan(doc);
            return true;
        } catch (const pickle::PickleError& e) {
            error = path + ": not a readable pickle: " + e.what();
        } catch (const NnScalerError& e) {
            error = path + ": not a readable nnScaler plan: " + e.what();
        }
        return false;
    };
    Plan logical, parallel;
    std::string error;
    if (!readOne(logicalPath, logical, error) || !readOne(parallelPath, parallel, error))
        return fail(Verdict::Invalid, FailureKind::InvalidPlan, error);
    ImportOptions opt;
    auto stem = [](const std::string& p) {
        auto s = p.substr(p.find_last_of('/') == std::string::npos ? 0 : p.find_last_of('/') + 1);
        if (auto dot = s.rfind('.'); dot != std::string::npos) s = s.substr(0, dot);
        return s;
    };
    opt.name = stem(parallelPath);
    opt.description = "nnScaler execution plan " + stem(parallelPath) + " (" + std::to_string(parallel.runtimeRanks) + " ranks) against its logical plan " +
                      stem(logicalPath) + ", mapped by trainverify";
    degreesFromFileName(parallelPath, opt.tp, opt.pp);
    ImportResult imported;
    try {
        imported = importPair(logical, parallel, opt);
    } catch (const UnsupportedOperator& e) {
        return fail(Verdict::Inconclusive, FailureKind::UnsupportedOperator,
                    "cannot verify yet: " + std::string(e.what()) + " (supported operators: docs/nnscaler.md)");
    } catch (const MappingTooLarge& e) {
        return fail(Verdict::Inconclusive, FailureKind::Inconclusive, "cannot map " + parallelPath + " onto " + logicalPath + ": " + e.what());
    } catch (const NnScalerError& e) {
        return fail(Verdict::Invalid, FailureKind::InvalidPlan, "cannot map " + parallelPath + " onto " + logicalPath + ": " + e.what());
    } catch (const std::out_of_range& e) {
        return fail(Verdict::Invalid, FailureKind::InvalidPlan,
                    "cannot map " + parallelPath + " onto " + logicalPath + ": the plans refer to something that is not there (" + e.what() + ")");
    } catch (const nlohmann::json::exception& e) {
        // A keyword argument or constant of an unexpected type (a hand-made or damaged plan).
        return fail(Verdict::Invalid, FailureKind::InvalidPlan,
                    "cannot map " + parallelPath + " onto " + logicalPath + ": a value of an unexpected type: " + e.what());
    }
    l.notes = std::move(imported.notes);
    l.findings = std::move(imported.runtimeFindings);
    l.unchecked = std::move(imported.unchecked);
    if (!imported.findings.empty()) {
        // Found while mapping: no proof can relate the two plans.
        const auto& mf = imported.findings[0];
        auto r = fail(Verdict::NotEquivalent, FailureKind::ShapeMismatch, mf.message);
        r.report.failure->tensor = mf.logicalTensor;
        r.report.failure->parallelTensor = mf.parallelTensor;
        r.report.failure->rank = mf.rank;
        r.report.failure->microbatch = mf.microbatch;
        r.report.failures = {*r.report.failure};
        return r;
    }
    auto res = readPlanJson(imported.plan);
    imported.plan = nlohmann::json();
    if (!res.ok()) {
        std::string msg = "the nnScaler plans map to an invalid plan (do their operators' shapes fit?): " +
                          (res.problems.empty() ? std::string() : res.problems[0].toString());
        return fail(Verdict::Invalid, FailureKind::InvalidPlan, msg);
    }
    l.plan = std::move(res.plan);
    l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return l;
}


void applyMappingLimits(const PairLoad& pair, VerifyReport& report) {
    for (const auto& n : pair.notes) report.warnings.push_back("nnScaler mapping: " + n);
    for (const auto& u : pair.unchecked) report.warnings.push_back("nnScaler mapping: not checked: " + u);
    // A pair found NOT EQUIVALENT is explained by what the runtime does against the labels;
    // otherwise that is only worth a warning (the runtime's pieces are what is verified).
    const bool proofFailed = report.verdict == Verdict::NotEquivalent && report.failure &&
                             (report.failure->kind == FailureKind::Counterexample || report.failure->kind == FailureKind::DataflowBroken);
    if (proofFailed) report.findings = pair.findings;
    else
        for (const auto& f : pair.findings) report.warnings.push_back("nnScaler mapping: " + f + "; the runtime's pieces are what is verified");
    if (report.verdict != Verdict::Equivalent || pair.unchecked.empty()) return;
    report.verdict = Verdict::Inconclusive;
    Failure f;
    f.kind = FailureKind::Inconclusive;
    f.message = "every stage is proven, but the mapping could not claim " + pair.unchecked.front() +
                (pair.unchecked.size() > 1 ? " (and " + std::to_string(pair.unchecked.size() - 1) + " more)" : std::string());
    report.failure = f;
    report.failures.insert(report.failures.begin(), f);
}

}  // namespace tv::nnscaler
