#include "explore/verified_view.hpp"

#include "verify/symmetry.hpp"
#include "model/instance_names.hpp"

namespace tv {

std::vector<std::uint32_t> mapDrawnStages(const Plan& drawn, const StagePlan& drawnStages, const Plan& verified, const StagePlan& verifiedStages) {
    std::vector<std::uint32_t> out(drawnStages.stages.size(), kNone);
    if (&drawn == &verified) {
        for (std::uint32_t i = 0; i < out.size(); ++i) out[i] = i;
        return out;
    }
    if (drawn.lineage.size() != verified.lineage.size()) return out;  // not a written-out copy of it
    for (std::uint32_t i = 0; i < out.size(); ++i) {
        const auto rec = drawnStages.stages[i].output;
        if (rec < verifiedStages.stageOfRecord.size()) out[i] = verifiedStages.stageOfRecord[rec];
    }
    return out;
}

OpId drawnOp(const Plan& drawn, const Graph& g, const std::string& name, bool* asStored) {
    if (asStored) *asStored = false;
    if (name.empty()) return kNone;
    OpId op = g.findOp(drawn.names.find(name));
    if (op == kNone && name.find('~') != std::string::npos) {
        // A written-out replica's instance of a drawn op: the drawn plan holds its members
        // written out ("x~cp1~dp1" is "x~cp1" there), or one stored member ("x").
        op = g.findOp(drawn.names.find(instance::withoutReplicaMarks(name)));
        if (op == kNone) op = g.findOp(drawn.names.find(instance::storedName(name)));
        if (asStored) *asStored = op != kNone;
    }
    return op;
}

TensorId drawnTensor(const Plan& drawn, const Graph& g, const std::string& name) {
    if (name.empty()) return kNone;
    TensorId t = g.findTensor(drawn.names.find(name));
    if (t == kNone && name.find('~') != std::string::npos) t = g.findTensor(drawn.names.find(instance::withoutReplicaMarks(name)));
    if (t == kNone && name.find('~') != std::string::npos) t = g.findTensor(drawn.names.find(instance::storedName(name)));
    return t;
}

FailureFocus locateFailure(const Plan& drawn, const Failure& f) {
    FailureFocus focus;
    focus.failingOp = drawnOp(drawn, drawn.parallel, f.parallelOp, &focus.failingOpAsStored);
    focus.counterpart = drawnOp(drawn, drawn.logical, f.logicalOp);
    if (focus.counterpart == kNone)
        if (const TensorId lt = drawnTensor(drawn, drawn.logical, f.tensor); lt != kNone) focus.counterpart = drawn.logical.tensors[lt].producer;
    if (!f.otherEndTensor.empty()) {
        focus.otherEndLogical = f.otherEndLogical;
        focus.otherEnd = drawnTensor(drawn, f.otherEndLogical ? drawn.logical : drawn.parallel, f.otherEndTensor);
    }
    return focus;
}

}  // namespace tv
