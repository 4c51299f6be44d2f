// trainverify convert: a pair of nnScaler plans, or a PyTorch graph and its rank graphs, mapped onto
// the plan model (with the lineage mapped or inferred), written as a plan file.
#include <cstdio>
#include <iostream>

#include "cli/arguments.hpp"
#include "cli/commands.hpp"
#include "io/plan_json.hpp"
#include "session/session.hpp"

namespace tv::cli {

int convertCommand(const Args& args) {
    std::string logicalPath, outPath, relationsPath;
    std::vector<std::string> parallelPaths;
    Arguments parser("convert");
    parser.text({"--logical"}, &logicalPath, "--logical needs a file name")
        .list({"--parallel"}, &parallelPaths, "--parallel needs a file name (one per rank for PyTorch graphs)")
        .text({"--relations"}, &relationsPath, "--relations needs a relations file (.json)")
        .text({"-o", "--output"}, &outPath, "-o needs a file name");
    if (auto problem = parser.parse(args); !problem.empty()) return usageError(problem);
    if (logicalPath.empty() || parallelPaths.empty() || outPath.empty())
        return usageError("convert needs --logical Gs.pkl --parallel Gp.pkl -o PLAN.json (or --logical G.py --parallel G.r0.py G.r1.py ... -o PLAN.json)");
    const auto opened = tv::session::openPair(logicalPath, parallelPaths, relationsPath);
    if (!opened.ok()) {
        std::cerr << tv::reportToText(opened.refusal);
        return tv::exitCode(opened.refusal.verdict);
    }
    const auto& plan = *opened.opened->plan;
    auto text = tv::writePlanText(plan);
    if (!writeOutput(outPath, text)) return 3;
    if (outPath != "-") {
        std::fprintf(stderr, "converted %s: %zu logical ops, %zu parallel ops on %zu ranks, %zu lineage records, %.1f MB in %.2f s\n", outPath.c_str(),
                     plan.logical.ops.size(), plan.parallel.ops.size(), plan.ranks.size(), plan.lineage.size(),
                     static_cast<double>(text.size()) / 1e6, opened.seconds);
    }
    for (const auto& n : opened.opened->mappingNotes) std::fprintf(stderr, "note: %s\n", n.c_str());
    for (const auto& u : opened.opened->mappingUnchecked) std::fprintf(stderr, "note: not checked: %s (verify would be INCONCLUSIVE at best)\n", u.c_str());
    return 0;
}

}  // namespace tv::cli
