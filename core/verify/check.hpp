// Checking one stage: shape reduction, symbolic evaluation of both sides on Z3, the tiered
// query, and, on a counterexample, replay to the first parallel op whose output breaks its
// lineage.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/plan.hpp"
#include "verify/diagnosis.hpp"
#include "verify/stages.hpp"

// Z3 stays behind this header (and the verifier's): what crosses it is a context handle for
// interrupting a running stage, never a term, so the Studio's headers do not see the solver.
namespace z3 {
class context;
}

namespace tv {

enum class StageStatus : std::uint8_t { Queued, Running, Equivalent, Failed, Inconclusive, Skipped };
std::string_view toString(StageStatus s);

/// Which tier proved each output group.
struct TierCounts {
    std::uint32_t simplify = 0, expLog = 0, solveEqs = 0, solver = 0;  ///< expLog: closed by the exp/log normal form
};

struct StageResult {
    std::uint32_t stage = 0;
    StageStatus status = StageStatus::Queued;
    std::optional<Failure> failure;
    TierCounts tiers;
    double reduceSeconds = 0, encodeSeconds = 0, solveSeconds = 0;
    std::uint64_t reducedElements = 0;   ///< elements of all stage tensors after reduction
    std::uint64_t fullElements = 0;      ///< before reduction
    std::string note;                    ///< e.g. "shape reduction fell back to full shapes"
    std::uint32_t sameAs = kNone;        ///< proven by the isomorphic stage with this id
    bool cached = false;                 ///< proven in an earlier run (a proof cache held the same obligation)
};

/// A stage's result as data: everything it holds, read back exactly by stageResultFromJson (a
/// stage checked in a solver process of its own sends its result this way). fromJson throws
/// nlohmann::json::exception or std::invalid_argument on anything it did not write.
nlohmann::json stageResultToJson(const StageResult& r);
StageResult stageResultFromJson(const nlohmann::json& j);

struct CheckOptions {
    unsigned timeoutMs = 60000;          ///< per solver query; 0 = none
    bool reduceShapes = true;
    /// A stage whose tensors hold more elements than this (after shape reduction, or at full size
    /// without it) is INCONCLUSIVE, not encoded: every element is a term. A plan of dp 1024 x 1024
    /// microbatches has stages of 4 to 6.3 million; one solver process reached 14.8 GB on them
    /// (about 2.4 KB per element), and the run had not ended after 5 minutes. The largest stage of
    /// a bundled or generated plan holds 712,704 (nnScaler Llama3 dp16 pp4 tp8 nm8): the bound is
    /// three times that, a check near 5 GB. 0: no bound.
    std::uint64_t maxElements = std::uint64_t{1} << 21;
    /// On a counterexample, replay the stage op by op under the same model (Failure::trace).
    bool keepTrace = false;
    /// Tier 0 (every element of a stage simplified in one call, docs/soundness.md) runs on a
    /// stage whose terms have at least this many distinct nodes. Below it the per-element tiers
    /// alone run, and the solver's queries are exactly what they were: extra terms in a
    /// context can lengthen a solver's search for a counterexample by minutes (tst_generate's
    /// ring-attention mutants went from 2 s to 60 s). The MoE stages it is for have 43,000 and
    /// 160,000.
    std::uint64_t simplifyTogetherMinNodes = 20'000;
};

/// Registers the running context so another thread can interrupt it (cancellation).
struct InterruptSlot {
    std::function<void(z3::context*)> enter;
    std::function<void()> leave;
};

StageResult checkStage(const Plan& plan, const Stage& stage, const CheckOptions& opts,
                       const InterruptSlot* slot = nullptr);

}  // namespace tv
