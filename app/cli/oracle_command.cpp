// trainverify oracle: both plans evaluated with real arithmetic at full shapes on random inputs,
// every lineage claim compared. Evidence, not a proof. Exit 0: all agree; 1: a claim differs; 2:
// not evaluated (too large, no concrete semantics); 3: invalid plan or usage.
#include <algorithm>
#include <iostream>

#include "cli/arguments.hpp"
#include "cli/commands.hpp"
#include "session/session.hpp"
#include "verify/oracle.hpp"

namespace tv::cli {

int oracleCommand(const Args& args) {
    std::string path;
    OracleOptions oo;
    bool asJson = false;
    constexpr std::int64_t kMax = 9'999'999;
    auto whole = [](const char* name) { return std::string(name) + " needs a whole number below 10000000"; };
    Arguments parser("oracle");
    parser.count({"--seed"}, 0, kMax, [&oo](std::int64_t n) { oo.seed = static_cast<std::uint64_t>(n); }, whole("--seed"), whole("--seed"))
        .count({"--trials"}, 0, kMax, [&oo](std::int64_t n) { oo.trials = std::max(1, static_cast<int>(n)); }, whole("--trials"), whole("--trials"))
        .count({"--max-elements"}, 0, kMax, [&oo](std::int64_t n) { oo.maxElements = static_cast<std::uint64_t>(n); }, whole("--max-elements"),
               whole("--max-elements"))
        .flag({"--json"}, &asJson)
        .positional(&path, "oracle takes one plan file");
    if (auto problem = parser.parse(args); !problem.empty()) return usageError(problem);
    if (path.empty()) return usageError("oracle needs a plan file");
    const auto opened = tv::session::openPlanFile(path);
    if (!opened.ok()) {
        std::cout << tv::reportToText(opened.refusal);
        return 3;
    }
    auto res = tv::runOracle(*opened.opened->plan, oo);
    if (asJson) {
        nlohmann::json j = {{"status", std::string(tv::toString(res.status))}, {"elements", res.elements}, {"summary", res.summary()}};
        j["mismatches"] = nlohmann::json::array();
        for (const auto& m : res.mismatches)
            j["mismatches"].push_back({{"tensor", m.logicalTensor}, {"slice", m.slice}, {"copy", m.copy}, {"element", m.element},
                                       {"expected", m.expected}, {"actual", m.actual}, {"rank", m.rank}, {"final", m.finalOutput}, {"trial", m.trial}});
        std::cout << j.dump(2) << "\n";
    } else {
        std::cout << (res.status == tv::OracleStatus::Agree ? "AGREE: " : res.status == tv::OracleStatus::Differ ? "DIFFER: " : "NOT EVALUATED: ")
                  << res.summary() << "\n";
        for (std::size_t i = 1; i < res.mismatches.size() && i < 10; ++i)
            std::cout << "  also " << res.mismatches[i].logicalTensor << res.mismatches[i].slice << " (" << res.mismatches[i].copy << ")\n";
    }
    return res.status == tv::OracleStatus::Agree ? 0 : res.status == tv::OracleStatus::Differ ? 1 : 2;
}

}  // namespace tv::cli
