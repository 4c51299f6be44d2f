// Internal to the bug lab (core/bugs): the plan editor. A mutation edits a copy of the plan's
// JSON document, addressing ops and tensors by their index in the plan (removals wait for
// finish(), so the indices hold while editing), and records the ops the broken dataflow starts
// from, which the expectation is derived from. collectiveToIdentities is an edit entries share.
#pragma once

#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bugs/site_view.hpp"

namespace tv::bugs::detail {

class Editor {
public:
    Editor(const View& v, json doc) : v(v), doc(std::move(doc)) {}

    const View& v;
    json doc;
    std::vector<std::string> seeds;           ///< ops the broken dataflow starts from (in the mutant)
    std::vector<std::string> removedOutputs;  ///< outputs of removed ops (kept or removed)
    std::string change;

    json& op(OpId o) { return doc["parallel"]["ops"][o]; }
    json& tensor(TensorId t) { return doc["parallel"]["tensors"][t]; }
    json& record(std::size_t r) { return doc["lineage"][r]; }

    /// A name no parallel op or tensor has yet.
    std::string fresh(const std::string& base);
    void addOp(json j);
    void addTensor(json j) { doc["parallel"]["tensors"].push_back(std::move(j)); }
    /// A new tensor like `like` (same shape, dtype, rank and microbatch) with another id.
    json tensorLike(TensorId like, const std::string& id);
    void edited(OpId o) { seeds.push_back(v.name(o)); }
    void removeOp(OpId o);
    void removeTensor(TensorId t) { removedTensors_.insert(t); }
    /// Every consumer of `from` (other than `except`) reads `to` instead.
    void rewire(TensorId from, const std::string& to, OpId except = kNone);
    /// The edited document with the removed ops and tensors gone.
    json finish();

private:
    std::set<OpId> removedOps_;
    std::set<TensorId> removedTensors_;
    std::unordered_set<std::string> taken_;
};

/// Replaces a collective by one local identity per member: the data stays where it was.
void collectiveToIdentities(Editor& e, OpId o);

/// Multiplies every output of collective o by `factor` (a mul_scalar per member, named after the
/// collective plus `what`, before every reader).
void scaleCollectiveOutputs(Editor& e, OpId o, const std::string& factor, const std::string& what);

/// The members collective o runs over once written out: its listed group, times the stored
/// replicas (groups) when it runs across them.
std::int64_t membersWrittenOut(const View& v, OpId o);

}  // namespace tv::bugs::detail
