// trainverify: the command line. Verifies a plan headless (for CI), or inspects, generates,
// converts, mutates and evaluates plans: one file per command in app/cli/, over one argument
// parser (cli/arguments.hpp) and the session layer both front ends share (core/session).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "cli/arguments.hpp"
#include "cli/commands.hpp"
#include "process/memory_limit.hpp"
#include "verify/solver_process.hpp"

namespace {

constexpr const char* kUsage = R"(trainverify - proves a distributed training plan computes what the single-device step computes

Usage:
  trainverify verify PLAN.json [--jobs N] [--timeout SECONDS] [--memory MIB] [--json REPORT.json|-] [--html REPORT.html] [--stats] [--no-reduce] [--no-reuse]
  trainverify verify --logical Gs.pkl --parallel Gp.pkl [same options]
  trainverify convert --logical Gs.pkl --parallel Gp.pkl -o PLAN.json
  trainverify inspect PLAN.json|PLAN.pkl [--json]
  trainverify generate --model MODEL | --layout LAYOUT [--dp N] [--tp N] [--pp N] [--microbatches N] [--sp] [--ep N [--etp M]] [--cp N [--cp-comm all_gather|p2p]] [--zero 1|2|3]
                       [--schedule 1f1b|gpipe] [--layers N] [--global-batch N] [--optimizer adamw|sgd]
                       [--hidden N] [--heads N] [--kv-heads N] [--ffn N] [--vocab N] [--seq N]
                       [--clip-grad NORM] [--format 1|2|3] [--verify] -o PLAN.json
  trainverify mutate PLAN.json --bug KIND [--at OP] [--rank R] -o BUGGY.json [--verify [--jobs N] [--timeout S] [--json FILE|-]]
  trainverify mutate PLAN.json --bug KIND --sites
  trainverify mutate --list [--json FILE|-]
  trainverify oracle PLAN.json [--seed N] [--trials N] [--max-elements N] [--json]
  trainverify ops
  trainverify --help | --version

verify   Cuts the plan into stages from its lineage, reduces shapes, checks every stage with Z3
         in N solver processes, and prints one summary line that starts with EQUIVALENT,
         NOT EQUIVALENT, INCONCLUSIVE or INVALID, then the diagnosis.
           --jobs N          solver processes (default: one per hardware thread)
           --timeout S       time budget of the whole run in seconds (default: none); at it,
                             the run stops: INCONCLUSIVE with what was proven
           --query-timeout S one solver query's timeout in seconds (default 60; 0 = none)
           --stage-timeout S one stage's bound, where a query ignores its timeout
                             (default 4 x the query timeout + 30 s)
           --memory MIB      what this process and each solver process may allocate; a stage
                             past it is INCONCLUSIVE (out of memory), never a crash
           --max-stage-elements N
                             a stage holding more tensor elements after shape reduction is
                             INCONCLUSIVE, not encoded (default 2097152; 0 = no bound)
           --in-process      check stages on threads of this process (no solver processes;
                             a query that ignores its timeout cannot then be stopped)
           --json FILE       also write the JSON report to FILE ("-": standard output only)
           --html FILE       also write the report as one self-contained HTML page
           --stats           print time per phase, stages per second and peak memory
           --trace           with --json: the failing stage replayed op by op (values of every
                             tensor on both sides, the lineage checks, the divergence)
           --no-reduce       check every stage at full shapes (slow; for cross-checking)
           --no-reuse        check every stage, even those isomorphic to a proven one
         With --logical and --parallel, verifies a pair of nnScaler execution plans (pickled
         ModuleCodeGen objects, read safely: nothing in them is run) mapped onto the plan model.
convert  Maps a pair of nnScaler plans onto the plan model and writes it as a plan file.
inspect  Prints counts (ops, tensors, ranks, lineage records, stages) and the parallel
         configuration. On a pickle (an nnScaler plan), prints what the safe reader finds:
         protocol, objects and their classes; nothing in it is run.
generate Writes one whole training step (forward, backward, gradient reduction, optimizer
         update) of a model parallelized as asked, with the lineage of every parallel tensor.
         Models: mlp, gpt2, llama3 (small), llama3-8b, llama3-70b, llama3-405b, deepseek
         (small), deepseek-v2-lite, deepseek-v2, deepseek-v3; --layers and the size options
         override the preset. --zero splits optimizer state (2: and gradients; 3: and
         weights) over the dp replicas. --ep N splits DeepSeek's experts over N ranks: the
         tp group when N = --tp (expert tensor parallelism --etp 1), else a group of N
         data-parallel replicas (Megatron-Core's and DeepSeek's layout: tokens dispatched
         and combined by all-to-all, expert gradients reduced over the dp/N replicas that
         hold the same experts; --etp defaults to --tp, each expert split as the dense MLP
         is). --cp N splits the sequence over a group of N ranks (context
         parallelism, with or without --tp); --cp-comm p2p makes its attention a ring
         (K/V blocks passed around the cp group, online softmax) instead of all-gathering K and V. Under --tp the embedding and the
         cross-entropy are vocab-parallel. --verify verifies the
         written plan. --format 3 (the default) stores data-parallel replicas,
         microbatches and repeated blocks (identical layers) once; 2 stores only
         replicas and microbatches once; 1 writes everything out.
         --clip-grad NORM clips the gradients to a global norm before the update.
         --layout deepseek-v3-as-trained is DeepSeek-V3 as its report trained it (2,048 GPUs:
         --dp 128 --ep 64 --pp 16 --zero 1, no tp, 16 microbatches); flags override it.
         With --ep over the replicas the file stores one member of each group.
mutate   The bug lab: injects a parallelization bug from the catalog (--list shows it: the
         TrainVerify paper's 14 cases and more) into a copy of the plan and writes it. The site
         is found by structure; --at names an op of it, --rank a rank it runs on (a rank of a
         replica other than the first, or an op named "...~dp1", writes replicas and
         microbatches out so that only that instance is wrong). --sites lists every site.
         --verify verifies the mutant and checks that the report catches it where it should
         (the edited op and rank, or one its broken dataflow reaches first); exit 0 if so, 1 if
         not. --json writes that outcome with the whole report. Also --logical/--parallel.
oracle   Evaluates both plans with real arithmetic at full shapes (written out) on random inputs
         (index data within the classes its lookups allow) and compares every lineage claim:
         AGREE (exit 0), DIFFER with the first wrong element (exit 1), or NOT EVALUATED when
         the plan is too large (exit 2). Evidence, not a proof; verify proves.
ops      Lists the operators the registry knows.

Exit codes: 0 equivalent, 1 not equivalent, 2 inconclusive, 3 invalid input or usage
(mutate: 0 written, and with --verify caught where expected; 1 with --verify, missed or
misplaced; 3 invalid input, usage, or a bug the plan has no site for).
)";

const std::pair<const char*, int (*)(const tv::cli::Args&)> kCommands[] = {
    {"verify", tv::cli::verifyCommand},   {"inspect", tv::cli::inspectCommand}, {"ops", tv::cli::opsCommand},
    {"oracle", tv::cli::oracleCommand},   {"convert", tv::cli::convertCommand}, {"generate", tv::cli::generateCommand},
    {"mutate", tv::cli::mutateCommand},
};

}  // namespace

int main(int argc, char** argv) {
    // A solver process of a verify run (solver_process.hpp): not a command a person types.
    if (argc == 3 && std::strcmp(argv[1], "--solver-process") == 0) return tv::solverProcessMain(std::atoi(argv[2]));
    // Started under `ulimit -v`: no thread gets a malloc arena of its own (limitMallocArenas).
    if (tv::addressSpaceCapped()) tv::limitMallocArenas(1);
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
        std::fputs(kUsage, stderr);
        return 3;
    }
    const auto cmd = args[0];
    std::vector<std::string> rest(args.begin() + 1, args.end());
    try {
        if (cmd == "--help" || cmd == "-h" || cmd == "help") {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (cmd == "--version") {
            std::printf("trainverify %s\n", TV_VERSION);
            return 0;
        }
        // "trainverify CMD --help" (or -h) anywhere among a command's arguments: the usage.
        if (std::find(rest.begin(), rest.end(), "--help") != rest.end() || std::find(rest.begin(), rest.end(), "-h") != rest.end()) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        for (const auto& [name, command] : kCommands)
            if (cmd == name) return command(rest);
        return tv::cli::usageError("unknown command " + cmd);
    } catch (const std::exception& e) {
        if (tv::isOutOfMemory(e)) {
            // Not the input's fault and not a verdict: the run could not finish (exit 2, like any
            // INCONCLUSIVE), never the code of an invalid plan. (A thread that cannot start under
            // --memory or ulimit -v is the same limit.)
            std::fprintf(stdout, "INCONCLUSIVE: out of memory while running \"%s\"; nothing was decided\n", cmd.c_str());
            std::fprintf(stderr, "trainverify: out of memory (%s); try --jobs 1, a higher --memory, or a machine with more memory\n", cmd.c_str());
            return 2;
        }
        std::fprintf(stderr, "trainverify: internal error: %s\n", e.what());
        return 3;
    }
}
