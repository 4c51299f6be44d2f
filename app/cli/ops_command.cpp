// trainverify ops: the operators the registry knows, with what each computes.
#include <cstdio>

#include "cli/arguments.hpp"
#include "cli/commands.hpp"
#include "ops/registry.hpp"

namespace tv::cli {

int opsCommand(const Args& args) {
    if (auto problem = Arguments("ops").parse(args); !problem.empty()) return usageError(problem);
    for (const auto& s : OpRegistry::instance().all()) std::printf("%-24s %s\n", std::string(s.name).c_str(), std::string(s.summary).c_str());
    return 0;
}

}  // namespace tv::cli
