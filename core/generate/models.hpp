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
    std::string family;   ///< mlp, gpt2, llama3, deepseek
    std::string preset;   ///< the preset it came from (informational)
    std::int64_t layers = 2;
    std::int64_t hidden = 64;
    std::int64_t heads = 4;
    std::int64_t kvHeads = 4;   ///< grouped-query attention: heads share kvHeads key/value heads
    std::int64_t ffn = 256;     ///< feed-forward inner size
    std::int64_t vocab = 256;
    std::int64_t vocabUnpadded = 0;  ///< the vocabulary before padding (0: not padded)
    std::int64_t seq = 16;
    std::string normEps = "1e-5";
    bool tiedEmbeddings = false;
    // DeepSeek: multi-head latent attention (MLA) and mixture of experts (MoE).
    std::int64_t qLoraRank = 0;      ///< low-rank query projection (0: a full one)
    std::int64_t kvLoraRank = 0;     ///< the compressed key/value latent
    std::int64_t qkNopeDim = 0, qkRopeDim = 0, vHeadDim = 0;  ///< per head: the part without RoPE, the decoupled RoPE part, values
    std::int64_t experts = 0;        ///< routed experts (0: no MoE)
    std::int64_t sharedExperts = 0;
    std::int64_t topk = 0;           ///< experts each token is routed to
    std::int64_t moeFfn = 0;         ///< each expert's inner size
    std::int64_t denseLayers = 0;    ///< the first layers keep a dense feed-forward (inner size ffn)
    std::int64_t expertGroups = 1, topkGroups = 1;  ///< group-limited routing
    std::string scoreFunc = "softmax";  ///< gate scoring: softmax or sigmoid (then renormalised over the chosen)
    std::string routeScale = "1";
    std::string groupScore = "max";  ///< how a group is scored: its best expert (max) or best two (top2)
    /// DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias added to the scores for
    /// choosing the experts (not for weighting them); updated between steps, an input of the step.
    bool routeBias = false;
    /// Expert tensor parallelism (etp = tp): each expert's inner size split over the
    /// tensor-parallel group as the dense MLP's is; false: the experts themselves split over it
    /// (ep = tp, as TrainVerify's configurations place them).
    bool expertTensorParallel = false;
    /// DeepSeek-V3's multi-token prediction: this many extra modules (0: none), each predicting one
    /// token further from the previous depth's hidden states and the next token's embedding, with
    /// the shared embedding and output head; their mean loss is added with weight mtpWeight.
    std::int64_t mtpDepth = 0;
    std::string mtpWeight = "3/10";
    /// DeepSeek-V3's complementary sequence-wise balance loss on every MoE layer, alpha times
    /// sum_i f_i P_i per sequence (averaged over the sequences); empty: none.
    std::string auxLossAlpha;
    std::int64_t headDim() const { return heads ? hidden / heads : 0; }
};

/// The names of the presets, and the preset's configuration (nullopt for an unknown name).
std::vector<std::string> presetNames();
std::optional<ModelConfig> preset(const std::string& name);

/// Builds the forward pass and the loss for `batch` sequences (or rows, for mlp).
/// Sets model.loss, model.lossSeed and the data layout hints.
void buildForward(LogicalModel& model, const ModelConfig& cfg, std::int64_t batch, bool sequenceParallel);

}  // namespace tv::gen
