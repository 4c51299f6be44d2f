// `trainverify generate`: a whole training step (forward, backward, gradient reduction, optimizer
// update) of a model from the zoo, parallelized as asked, with complete lineage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "generate/models.hpp"
#include "model/problem.hpp"
#include "generate/parallelizer.hpp"

namespace tv::gen {

struct GenerateOptions {
    std::string model = "llama3";      ///< a preset name (see presetNames())
    std::optional<std::int64_t> layers, hidden, heads, kvHeads, ffn, vocab, seq;
    int dp = 1, tp = 1, pp = 1, microbatches = 1;
    bool sequenceParallel = false;
    int ep = 1, cp = 1, zero = 0;
    /// Expert tensor parallelism (Megatron's expert_tensor_parallel_size): 0 takes the default,
    /// 1 when ep equals tp (the experts split over the tensor-parallel group), tp otherwise (the
    /// expert-parallel group drawn from the data-parallel ranks, each expert split over tp).
    int etp = 0;
    /// Context parallelism's attention: "all_gather" (K and V all-gathered, as Llama 3 trained) or
    /// "p2p" (ring attention: K/V blocks passed around the cp group, online softmax).
    std::string cpComm = "all_gather";
    std::string schedule = "1f1b";
    std::optional<std::int64_t> globalBatch;  ///< default: one sequence per microbatch per replica
    std::string optimizer = "adamw";
    std::string clipGrad;  ///< global-norm gradient clipping to this norm (a number); empty: none
    /// Plan format: 3 (the default) stores data-parallel replicas, microbatches and repeated
    /// blocks (identical layers) once; 2 stores replicas and microbatches once; 1 writes all out.
    int format = 3;
};

/// Layouts as a model was trained, by name: the model and its parallelism (flags given after
/// them override). "deepseek-v3-as-trained": DeepSeek-V3 on 2,048 GPUs as its report describes
/// (arXiv 2412.19437 §3.2): pipeline parallel 16, expert parallel 64 over 8 nodes, ZeRO-1 data
/// parallelism, no tensor parallelism: dp 128 (2,048 / 16), with 16 microbatches (the report does
/// not give its count: the generator's choice).
std::vector<std::string> layoutNames();
std::optional<GenerateOptions> layout(const std::string& name);

/// Why a configuration cannot be generated (the option it is about, and why); none when it can.
std::optional<PlanProblem> validate(const GenerateOptions& opts);

/// The model configuration the options describe (preset plus overrides); call validate() first.
ModelConfig modelConfig(const GenerateOptions& opts);

/// A complete plan file (format version `format` or lower) for the options. Throws std::invalid_argument with the
/// message of validate() for an invalid configuration.
nlohmann::json generatePlan(const GenerateOptions& opts);

}  // namespace tv::gen
