// trainverify generate: one whole training step of a model parallelized as asked, with the
// lineage of every parallel tensor, written as a plan file (validated, in canonical form).
#include <cstdio>

#include "cli/arguments.hpp"
#include "cli/commands.hpp"
#include "session/session.hpp"
#include "verify/symmetry.hpp"

namespace tv::cli {

int generateCommand(const Args& args) {
    gen::GenerateOptions o;
    // A named layout sets the model and its parallelism first; the other flags override it.
    for (std::size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == "--layout") {
            auto l = gen::layout(args[i + 1]);
            if (!l) {
                std::string names;
                for (const auto& n : gen::layoutNames()) names += (names.empty() ? "" : ", ") + n;
                return usageError("unknown layout \"" + args[i + 1] + "\" (layouts: " + names + ")");
            }
            o = *l;
        }
    std::string outPath, layoutName;
    bool verifyAfter = false;
    auto degree = [](int& out) { return [&out](std::int64_t n) { out = static_cast<int>(n); }; };
    auto size = [](std::optional<std::int64_t>& out) { return [&out](std::int64_t n) { out = n; }; };
    constexpr std::int64_t kMaxDegree = 1 << 20;
    constexpr std::int64_t kMaxSize = 999'999'999'999;  // twelve digits
    Arguments parser("generate");
    parser.text({"--model"}, &o.model, "--model needs a model name")
        .text({"--layout"}, &layoutName, "--layout needs a layout name (deepseek-v3-as-trained)")
        .text({"-o", "--output"}, &outPath, "-o needs a file name (or - for standard output)")
        .count({"--dp"}, 1, kMaxDegree, degree(o.dp))
        .count({"--tp"}, 1, kMaxDegree, degree(o.tp))
        .count({"--pp"}, 1, kMaxDegree, degree(o.pp))
        .count({"--microbatches", "--nm"}, 1, kMaxDegree, degree(o.microbatches))
        .count({"--ep"}, 1, kMaxDegree, degree(o.ep))
        .count({"--etp"}, 1, kMaxDegree, degree(o.etp))
        .count({"--cp"}, 1, kMaxDegree, degree(o.cp))
        .text({"--cp-comm"}, &o.cpComm, "--cp-comm needs all_gather or p2p")
        .count({"--zero"}, 1, 3, degree(o.zero), "--zero must be 1, 2 or 3")
        .count({"--format"}, 1, 3, degree(o.format), "--format must be 1, 2 or 3")
        .text({"--clip-grad"}, &o.clipGrad, "--clip-grad needs a norm, e.g. 1.0")
        .flag({"--sp"}, &o.sequenceParallel)
        .flag({"--verify"}, &verifyAfter)
        .text({"--schedule"}, &o.schedule, "--schedule needs 1f1b or gpipe")
        .text({"--optimizer"}, &o.optimizer, "--optimizer needs adamw or sgd")
        .count({"--layers"}, 0, kMaxSize, size(o.layers))
        .count({"--global-batch"}, 0, kMaxSize, size(o.globalBatch))
        .count({"--hidden"}, 0, kMaxSize, size(o.hidden))
        .count({"--heads"}, 0, kMaxSize, size(o.heads))
        .count({"--kv-heads"}, 0, kMaxSize, size(o.kvHeads))
        .count({"--ffn"}, 0, kMaxSize, size(o.ffn))
        .count({"--vocab"}, 0, kMaxSize, size(o.vocab))
        .count({"--seq"}, 0, kMaxSize, size(o.seq));
    if (auto problem = parser.parse(args); !problem.empty()) return usageError(problem);
    if (outPath.empty()) return usageError("generate needs -o PLAN.json");
    const auto generated = tv::session::generatePlan(o);
    if (!generated.ok()) {
        std::fprintf(stderr, "trainverify: %s\n", generated.error().c_str());
        return 3;
    }
    const auto& plan = *generated.plan;
    std::string error;
    if (outPath == "-" ? !writeOutput(outPath, generated.text) : !tv::session::writeFileAtomically(outPath, generated.text, &error)) {
        if (!error.empty()) std::fprintf(stderr, "trainverify: %s\n", error.c_str());
        return 3;
    }
    if (outPath != "-")
        std::fprintf(stderr, "generated %s: %zu logical ops, %zu parallel ops%s, %zu lineage records, %.1f MB in %.2f s\n",
                     outPath.c_str(), plan.logical.ops.size(), plan.parallel.ops.size(),
                     plan.replication.active() ? (" (" + tv::storedOnce(plan.replication, plan.membersStoredOnce) + ")").c_str() : "",
                     plan.lineage.size(), static_cast<double>(generated.text.size()) / 1e6, generated.seconds);
    if (verifyAfter) {
        if (outPath == "-") return usageError("--verify needs -o FILE");
        return verifyCommand({outPath});
    }
    return 0;
}

}  // namespace tv::cli
