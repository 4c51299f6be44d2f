// trainverify convert: a pair of nnScaler plans mapped onto the plan model, written as a plan file.
#include <cstdio>
#include <iostream>

#include "cli/arguments.hpp"
#include "cli/commands.hpp"
#include "io/plan_json.hpp"
#include "session/session.hpp"

namespace tv::cli {

int convertCommand(const Args& args) {
    std::string logicalPath, parallelPath, outPath;
    Arguments parser("convert");
    parser.text({"--logical"}, &logicalPath, "--logical needs a file name")
        .text({"--parallel"}, &parallelPath, "--parallel needs a file name")
        .text({"-o", "--output"}, &outPath, "-o needs a file name");
    if (auto problem = parser.parse(args); !problem.empty()) return usageError(problem);
    if (logicalPath.empty() || parallelPath.empty() || outPath.empty()) return usageError("convert needs --logical Gs.pkl --parallel Gp.pkl -o PLAN.json");
    const auto opened = tv::session::openNnScalerPair(logicalPath, parallelPath);
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
