// trainverify verify: a plan file, or a pair of nnScaler plans, verified; the summary and the
// diagnosis on standard output, the report as JSON and HTML on request.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/arguments.hpp"
#include "cli/commands.hpp"
#include "cli/run_guard.hpp"
#include "session/session.hpp"
#include "verify/report_html.hpp"

namespace tv::cli {

int verifyCommand(const Args& args) {
    std::string path, jsonOut, htmlOut, logicalPath, relationsPath;
    std::vector<std::string> parallelPaths;
    VerifyOptions opts;
    opts.isolate = true;
    bool stats = false;
    Arguments parser("verify");
    addRunOptions(parser, opts);
    parser.text({"--json"}, &jsonOut, "--json needs a file name or -")
        .text({"--html"}, &htmlOut, "--html needs a file name", /*dashAllowed=*/false)
        .flag({"--stats"}, &stats)
        .flag({"--trace"}, [&opts] { opts.check.keepTrace = true; })
        .flag({"--no-reuse"}, [&opts] { opts.reuseIsomorphic = false; })
        .flag({"--no-reduce"}, [&opts] { opts.check.reduceShapes = false; })
        .text({"--logical"}, &logicalPath, "--logical needs an nnScaler plan file (.pkl) or a PyTorch graph (.py, .gpickle)")
        .text({"--relations"}, &relationsPath, "--relations needs a relations file (.json)")
        .list({"--parallel"}, &parallelPaths, "--parallel needs an nnScaler plan file (.pkl) or one PyTorch graph per rank")
        .positional(&path, "verify takes one plan file");
    if (auto problem = parser.parse(args); !problem.empty()) return usageError(problem);
    const bool pair = !logicalPath.empty() || !parallelPaths.empty();
    if (pair && (logicalPath.empty() || parallelPaths.empty())) return usageError("--logical and --parallel go together");
    if (!relationsPath.empty() && !pair) return usageError("--relations goes with --logical and --parallel");
    if (pair && !path.empty()) return usageError("verify takes a plan file or --logical and --parallel, not both");
    if (!pair && path.empty()) return usageError("verify needs a plan file (or --logical Gs.pkl --parallel Gp.pkl, or --logical G.py --parallel G.r0.py G.r1.py ...)");
    limitMemory(opts.memoryMiB, opts.jobs);
    RunGuard guard(opts.runSeconds);
    auto opened = pair ? session::openPair(logicalPath, parallelPaths, relationsPath) : session::openPlanFile(path, ReadOptions{true});
    VerifyReport report = opened.ok() ? verifyGuarded(*opened.opened->plan, opts, guard) : std::move(opened.refusal);
    guard.runFinished();
    report.timing.load = opened.seconds;
    report.timing.total += opened.seconds;
    if (opened.ok()) session::finishReport(*opened.opened, report);
    const auto json = session::reportDocument(opened.source, opened.opened.get(), report);
    if (jsonOut == "-") {
        std::cout << json.dump(2) << "\n";
    } else {
        std::cout << reportToText(report, stats);
        if (!opened.ok() && !pair) printPickleHint(path, "verify", stdout);
        if (!jsonOut.empty()) {
            std::ofstream f(jsonOut);
            if (!f) {
                std::fprintf(stderr, "trainverify: cannot write the report to %s\n", jsonOut.c_str());
                return 3;
            }
            f << json.dump(2) << "\n";
        }
    }
    if (!htmlOut.empty() && !writeOutput(htmlOut, session::reportHtml(opened.source, opened.opened.get(), report))) return 3;
    return exitCode(report.verdict);
}

}  // namespace tv::cli
