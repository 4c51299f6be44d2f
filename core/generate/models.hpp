// The model zoo: the forward graph of one training step for each model family, built op by op
// exactly as the model defines it, with the Megatron tensor-parallel placement of every weight.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "generate/logical_model.hpp"

namespace tv::gen {

struct ModelConfig {
    std::string family;   ///< mlp, gpt2, llama3
    std::string preset;   ///< the preset it came from (informational)
    std::int64_t layers = 2;
    std::int64_t hidden = 64;
    std::int64_t heads = 4;
    std::int64_t kvHeads = 4;   ///< grouped-query attention: heads share kvHeads key/value heads
    std::int64_t ffn = 256;     ///< feed-forward inner size
    std::int64_t vocab = 256;
    std::int64_t seq = 16;
    std::string normEps = "1e-5";
    bool tiedEmbeddings = false;
    std::int64_t headDim() const { return heads ? hidden / heads : 0; }
};

/// The names of the presets, and the preset's configuration (nullopt for an unknown name).
std::vector<std::string> presetNames();
std::optional<ModelConfig> preset(const std::string& name);

/// Builds the forward pass and the loss for `batch` sequences (or rows, for mlp).
/// Sets model.loss, model.lossSeed and the data layout hints.
void buildForward(LogicalModel& model, const ModelConfig& cfg, std::int64_t batch, bool sequenceParallel);

}  // namespace tv::gen
