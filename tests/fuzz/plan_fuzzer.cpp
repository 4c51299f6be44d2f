// libFuzzer target for the plan JSON reader and everything that runs on a plan once it is read.
// Any input must be read or refused with problems that say what is wrong; a crash, a sanitizer
// report, a hang, an uncaught exception or a broken property below is a finding:
//   - a refused plan has at least one problem, and every problem has a message;
//   - an accepted plan writes out to text that reads back to a plan that writes out the same text
//     (the canonical writer and the validating reader agree);
//   - what inspect, the Studio and the verifier compute from a plan (written-out counts, stages,
//     structural keys, the bounds on written-out stages, the explorer's view and layout requests,
//     the drawn-to-verified stage map) runs to the end;
//   - a small accepted plan is verified (in this process, one job, short query timeouts and a run
//     budget), and its report renders as text and JSON.
// Built and run by tests/fuzz/run_plan_fuzzer.sh (clang, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "explore/plan_view.hpp"
#include "explore/verified_view.hpp"
#include "io/plan_json.hpp"
#include "verify/stages.hpp"
#include "verify/symmetry.hpp"
#include "verify/verifier.hpp"

namespace {

[[noreturn]] void finding(const char* what) {
    std::fprintf(stderr, "plan_fuzzer finding: %s\n", what);
    std::abort();
}

/// Plans up to this many ops (written out) on both sides are verified; larger ones only read.
constexpr std::size_t kVerifyOps = 48;
/// Plans up to this many parallel ops written out are drawn written out, as the Studio does.
constexpr std::size_t kDrawOps = 4000;

void explore(const tv::Plan& plan, const tv::StagePlan& stages) {
    tv::ViewOptions options;
    options.collapsedRanks = tv::defaultCollapsedRanks(plan);
    const auto view = tv::buildPlanView(plan, stages, options);
    std::vector<int> requestToNode;
    (void)view.layoutRequest(tv::ViewSide::Logical, requestToNode);
    (void)view.layoutRequest(tv::ViewSide::Parallel, requestToNode, true);
    for (int n = 0; n < static_cast<int>(view.nodes.size()) && n < 64; ++n) (void)view.counterparts(n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    auto read = tv::readPlanText(text);
    if (!read.ok()) {
        if (read.problems.empty()) finding("a plan was refused with no problem");
        for (const auto& p : read.problems)
            if (p.message.empty()) finding("a problem without a message");
        (void)tv::reportToText(tv::invalidReport(read.problems));
        return 0;
    }
    const tv::Plan& plan = *read.plan;

    // The writer and the reader agree.
    const std::string once = tv::writePlanText(plan);
    auto again = tv::readPlanText(once);
    if (!again.ok()) {
        std::fprintf(stderr, "%s\n", again.problems.front().toString().c_str());
        finding("the writer's text of an accepted plan is refused");
    }
    if (tv::writePlanText(*again.plan) != once) finding("read -> write -> read -> write changed the text");

    // What inspect computes.
    const auto counts = tv::writtenOutCounts(plan);
    const auto stages = tv::cutStages(plan);
    for (const auto& s : stages.stages) {
        (void)tv::structuralKey(plan, s);
        (void)tv::writtenOutOps(plan, s);
        std::string why;
        (void)tv::provenByReplicaZero(plan, s, &why);
    }

    // What the Studio draws: every replica written out when that is small, else what is stored.
    if (plan.replication.active() && counts.ops <= kDrawOps) {
        const tv::Plan drawn = tv::expandReplicas(plan);
        const auto drawnStages = tv::cutStages(drawn);
        explore(drawn, drawnStages);
        const auto map = tv::mapDrawnStages(drawn, drawnStages, plan, stages);
        if (map.size() != drawnStages.stages.size()) finding("the drawn-to-verified stage map has the wrong length");
    } else {
        explore(plan, stages);
    }

    // A small plan is verified.
    if (counts.ops <= kVerifyOps && plan.logical.ops.size() <= kVerifyOps) {
        tv::VerifyOptions o;
        o.jobs = 1;
        o.check.timeoutMs = 1000;
        o.runSeconds = 8;
        o.confirmUpToElements = 1 << 14;
        o.confirmTrials = 2;
        const auto report = tv::verifyPlan(plan, o);
        (void)tv::reportToText(report, true);
        (void)tv::reportToJson(report).dump();
        if (report.verdict == tv::Verdict::Invalid && report.problems.empty()) finding("an INVALID report without problems");
    }
    return 0;
}
