// trainverify mutate: the bug lab. A bug of the catalog injected into a copy of a plan, written
// out, and on request verified and judged: caught where it was injected, or not.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "bugs/bug_catalog.hpp"
#include "cli/arguments.hpp"
#include "cli/commands.hpp"
#include "cli/run_guard.hpp"
#include "session/session.hpp"

namespace tv::cli {

int mutateCommand(const Args& args) {
    std::string path, bug, outPath, jsonOut, logicalPath, parallelPath;
    bugs::MutateOptions mo;
    bool list = false, listSites = false, verifyAfter = false;
    VerifyOptions vo;
    vo.isolate = true;
    Arguments parser("mutate");
    parser.flag({"--list"}, &list)
        .flag({"--sites"}, &listSites)
        .flag({"--verify"}, &verifyAfter)
        .text({"--bug"}, &bug, "--bug needs a value")
        .text({"--at"}, &mo.at, "--at needs a value")
        .text({"-o", "--output"}, &outPath, "-o needs a value")
        .text({"--json"}, &jsonOut, "--json needs a value")
        .text({"--logical"}, &logicalPath, "--logical needs a value")
        .text({"--parallel"}, &parallelPath, "--parallel needs a value")
        .count({"--rank"}, 0, 1 << 24, [&mo](std::int64_t r) { mo.rank = static_cast<std::int32_t>(r); }, "--rank needs a rank number", "--rank needs a rank number")
        .positional(&path, "mutate takes one plan file");
    addRunOptions(parser, vo);
    if (auto problem = parser.parse(args); !problem.empty()) return usageError(problem);
    const bool pair = !logicalPath.empty() || !parallelPath.empty();
    if (list) {
        if (!path.empty() || !bug.empty() || pair) return usageError("mutate --list takes no plan and no --bug");
        if (!jsonOut.empty()) return writeOutput(jsonOut, tv::bugs::catalogJson().dump(2) + "\n") ? 0 : 3;
        for (const auto& k : tv::bugs::catalog()) {
            std::string paper = k.paperCase ? " [paper #" + std::to_string(k.paperCase) + "]" : "";
            std::printf("%-31s %-16s %s%s\n", std::string(k.name).c_str(), std::string(tv::bugs::toString(k.category)).c_str(),
                        std::string(k.summary).c_str(), paper.c_str());
        }
        return 0;
    }
    if (pair && (logicalPath.empty() || parallelPath.empty())) return usageError("--logical and --parallel go together");
    if (pair && !path.empty()) return usageError("mutate takes a plan file or --logical and --parallel, not both");
    if (!pair && path.empty()) return usageError("mutate needs a plan file (or --list)");
    if (bug.empty()) return usageError("mutate needs --bug KIND (trainverify mutate --list shows the catalog)");
    if (!tv::bugs::findBug(bug)) return usageError("unknown bug \"" + bug + "\" (trainverify mutate --list shows the catalog)");
    if (!listSites && outPath.empty() && !verifyAfter) return usageError("mutate needs -o BUGGY.json (or --verify, or --sites)");
    if (!jsonOut.empty() && !verifyAfter) return usageError("mutate: --json goes with --verify (or --list)");
    const auto opened = pair ? tv::session::openNnScalerPair(logicalPath, parallelPath) : tv::session::openPlanFile(path);
    if (!opened.ok()) {
        std::cerr << tv::reportToText(opened.refusal);
        if (!pair) printPickleHint(path, "mutate", stderr);
        return 3;
    }
    const auto& plan = *opened.opened->plan;
    if (listSites) {
        auto found = tv::bugs::findSites(plan, bug);
        if (found.refused) {
            std::fprintf(stderr, "trainverify: mutate: %s\n", found.refused->message.c_str());
            return 3;
        }
        const auto& sites = found.sites;
        for (const auto& s : sites) {
            std::string ops;
            for (std::size_t k = 0; k < s.ops.size(); ++k) ops += (k ? " " : "") + s.ops[k];
            std::printf("%s\t%s%s\n", ops.c_str(), s.detail.c_str(), s.writtenOut ? " (written out)" : "");
        }
        std::fprintf(stderr, "%zu sites of %s\n", sites.size(), bug.c_str());
        return 0;
    }
    auto t0 = std::chrono::steady_clock::now();
    const auto injected = tv::session::injectBug(*opened.opened, bug, mo);
    if (injected.refused) {
        // The option the problem is about, as this command spells it, and where to look next.
        const auto& p = *injected.refused;
        std::fprintf(stderr, "trainverify: mutate: %s%s\n", p.path == "at" || p.path == "rank" ? "--" : "", p.message.c_str());
        if (p.path == "at") std::fprintf(stderr, "(trainverify mutate PLAN --bug %s --sites lists the sites)\n", bug.c_str());
        return 3;
    }
    const auto& m = *injected.mutant;
    const double mutateSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string where = m.site.ops.front();
    std::string ranks;
    for (std::size_t k = 0; k < m.site.ranks.size(); ++k) ranks += (k ? ", " : "") + std::to_string(m.site.ranks[k]);
    const bool everyInstance = plan.replication.active() && !m.site.writtenOut;
    if (!outPath.empty()) {
        auto text = m.document.dump(1) + "\n";
        if (!writeOutput(outPath, text)) return 3;
    }
    std::fprintf(stderr, "mutated %s: %s at %s (ranks %s%s): %s%s\n", plan.name.empty() ? path.c_str() : plan.name.c_str(), bug.c_str(), where.c_str(), ranks.c_str(),
                 everyInstance ? "; every replica and microbatch" : "", m.change.c_str(),
                 outPath.empty() || outPath == "-" ? "" : ("; wrote " + outPath + " (version " + std::to_string(m.document.value("version", 1)) + ")").c_str());
    if (plan.expect.is_object() && plan.expect.value("verdict", "equivalent") != "equivalent")
        std::fprintf(stderr, "note: the plan is expected to be %s already; the verifier may report its own bug first\n",
                     plan.expect.value("verdict", "").c_str());
    if (!injected.opened && !m.problems.empty())
        std::fprintf(stderr, "note: the reader rejects the mutant, so verify reports INVALID: %s\n", m.problems.front().toString().c_str());
    if (!verifyAfter) return 0;
    auto t1 = std::chrono::steady_clock::now();
    limitMemory(vo.memoryMiB, vo.jobs);
    RunGuard guard(vo.runSeconds);
    tv::VerifyReport report = injected.opened ? verifyGuarded(*injected.opened->plan, vo, guard) : tv::invalidReport(m.problems);
    guard.runFinished();
    if (injected.opened) tv::session::finishReport(*injected.opened, report);
    const double verifySeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    const auto judgement = tv::session::judgeBug(m, report);
    const bool ok = judgement.caught;
    if (jsonOut != "-") std::cout << tv::reportToText(report);
    (jsonOut == "-" ? std::cerr : std::cout) << "bug lab: " << judgement.outcome() << ": " << judgement.detail << "\n";
    if (!jsonOut.empty()) {
        nlohmann::json j = {{"bug", bug},
                            {"site", m.site.ops},
                            {"ranks", m.site.ranks},
                            {"written_out", m.site.writtenOut},
                            {"change", m.change},
                            {"caught", ok},
                            {"detail", judgement.detail},
                            {"mutate_seconds", mutateSeconds},
                            {"verify_seconds", verifySeconds},
                            {"report", tv::reportToJson(report)}};
        if (!writeOutput(jsonOut, j.dump(2) + "\n")) return 3;
    }
    return ok ? 0 : 1;
}

}  // namespace tv::cli
