// The logical plan of one training step, as the generator builds it: the model's forward graph
// from the model zoo, the backward graph derived from the registry's VJP rules, and the
// optimizer update. Every op remembers the layer it belongs to (for pipeline stage assignment)
// and every weight how tensor parallelism shards it (Megatron column/row parallel).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/plan.hpp"

namespace tv::gen {

/// Layer positions: kEmbedding before the first block, blocks 0..L-1, then kHead after the last.
inline constexpr int kEmbeddingLayer = -1;

struct LTensor {
    std::string name;
    Shape shape;
    Role role = Role::Activation;
    DType dtype = DType::Float;
    int producer = -1;
};

struct LOp {
    std::string name;
    std::string kind;
    nlohmann::json attrs = nlohmann::json::object();
    std::vector<int> inputs, outputs;
    Phase phase = Phase::Forward;
    int layer = kEmbeddingLayer;
    bool dead = false;  ///< removed by removeDeadOps (ids stay stable)
};

/// How tensor parallelism holds a weight: replicated, or sharded along one dim.
struct WeightPlacement {
    int tpShardDim = -1;
    /// An expert weight's expert dim: split over the expert-parallel group when that group is drawn
    /// from the data-parallel ranks (-1: not an expert weight).
    int expertDim = -1;
};

class LogicalModel {
public:
    std::vector<LTensor> tensors;
    std::vector<LOp> ops;
    std::vector<int> weights;          ///< in declaration order
    std::vector<WeightPlacement> placement;  ///< per tensor (meaningful for weights and optimizer state)
    std::vector<int> dataInputs;       ///< tensors the data loader splits by batch
    int loss = -1;                     ///< the scalar loss
    int lossSeed = -1;                 ///< d(loss)/d(loss), an input of the backward pass
    int batchDim = 0;                  ///< data inputs carry the batch in this dim
    int seqDim = -1;                   ///< data inputs' sequence dim (for sequence parallelism), -1 none
    std::vector<int> seqParallelStarts;  ///< activations to shard along the sequence under SP
    int headLayer = 0;                 ///< the layer index of the head (number of blocks)

    int input(const std::string& name, Shape shape, Role role, DType dtype = DType::Float);
    int weight(const std::string& name, Shape shape, int tpShardDim = -1);
    /// Appends one op; output shapes are given by the model and checked against the registry.
    std::vector<int> op(const std::string& kind, const std::string& name, std::vector<int> inputs, nlohmann::json attrs,
                        std::vector<Shape> outShapes);
    int op1(const std::string& kind, const std::string& name, std::vector<int> inputs, nlohmann::json attrs, Shape outShape) {
        return op(kind, name, std::move(inputs), std::move(attrs), {std::move(outShape)})[0];
    }
    const Shape& shape(int t) const { return tensors[static_cast<std::size_t>(t)].shape; }

    /// The op builder's current position (layer and phase) and name scope.
    int layer = kEmbeddingLayer;
    Phase phase = Phase::Forward;

    /// A tensor (or op) name not yet used, starting from `base`.
    std::string freshTensor(const std::string& base) { return fresh(tensorNames_, base); }
    std::string freshOp(const std::string& base) { return fresh(opNames_, base); }

private:
    static std::string fresh(std::unordered_map<std::string, int>& used, const std::string& base);
    std::unordered_map<std::string, int> tensorNames_, opNames_;
};

/// Appends the backward pass (reverse-mode autodiff with the registry's VJP rules) from
/// `model.loss`, reading the seed `model.lossSeed`, and returns each weight's gradient tensor
/// (-1 for a weight the loss does not depend on). Dead backward ops are removed.
std::vector<int> appendBackward(LogicalModel& model);

struct OptimizerConfig {
    std::string kind = "adamw";  ///< "adamw" or "sgd"
    /// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_) to this norm, a rational
    /// string; empty: no clipping.
    std::string clipNorm;
};

/// Appends the optimizer update of every weight that has a gradient.
void appendOptimizer(LogicalModel& model, const std::vector<int>& grads, const OptimizerConfig& cfg);

/// Marks dead every op none of whose outputs reaches a kept tensor (the loss, the updated weights
/// and optimizer state). Tensors no live op touches are left out of the plan.
void removeDeadOps(LogicalModel& model, const std::vector<int>& keep);

}  // namespace tv::gen
