// Internal to the bug lab (core/bugs), not part of its API (that is bug_catalog.hpp): a plan as
// the site finders see it. View answers the structural questions a site is found by (op kinds,
// groups and rank coordinates, phases, lineage records), never a naming scheme; makeSite
// describes a site and prefer orders the sites found.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bugs/bug_catalog.hpp"
#include "model/plan.hpp"
#include "ops/registry.hpp"

namespace tv::bugs::detail {

using json = nlohmann::json;

inline const OpRegistry& reg() { return OpRegistry::instance(); }

/// "0, 1, 2"
std::string joinRanks(const std::vector<std::int32_t>& ranks);

/// Where a parallel tensor is in the lineage: record, slice and copy (-1 when in none).
struct Where {
    std::int32_t record = -1, slice = -1, copy = -1;
};

class View {
public:
    View(const Plan& plan, bool writtenOut);

    const Plan& p;
    const Graph& g;
    bool writtenOut;

    std::string_view kind(OpId o) const { return reg().spec(g.ops[o].kind).name; }
    bool collective(OpId o) const { return reg().spec(g.ops[o].kind).collective; }
    const json& attrs(OpId o) const { return p.opAttrs(g, o); }
    const std::vector<std::int32_t>& group(OpId o) const { return p.groups[g.ops[o].group]; }
    const std::string& name(OpId o) const { return p.opName(g, o); }
    const std::string& tensorName(TensorId t) const { return p.tensorName(g, t); }
    const Shape& shape(TensorId t) const { return p.shape(g, t); }
    OpId producer(TensorId t) const { return g.tensors[t].producer; }
    OpId find(const std::string& opName) const;
    std::string reduce(OpId o) const;
    std::int32_t coord(std::int32_t rank, Axis a) const;
    bool sameOn(std::int32_t a, std::int32_t b, std::initializer_list<Axis> axes) const;
    /// Two or more ranks of one tensor-parallel group: the same replica, stage, context and
    /// expert coordinates.
    bool tensorParallelGroup(const std::vector<std::int32_t>& grp) const;
    /// Two or more ranks that differ only in their data-parallel replica.
    bool dataParallelGroup(const std::vector<std::int32_t>& grp) const;
    /// The phase of the computation an op reads, looking through collectives and sends.
    Phase sourcePhase(OpId o) const;
    /// Whether an optimizer op is at most `depth` ops downstream (a weight-gradient reduction).
    bool feedsOptimizer(OpId o, int depth) const;
    std::vector<std::int32_t> ranksOf(OpId o) const;
    /// The parallel ops that read some copy of a lineage record, each once, in the order found.
    std::vector<OpId> readersOf(std::uint32_t record) const;
    const Where& where(TensorId t) const { return where_[t]; }
    bool initialRecord(std::int32_t r) const { return r >= 0 && initial_[static_cast<std::size_t>(r)]; }
    /// Two tensors hold parts or copies of one slice of one record (partial sums, replicas).
    bool sameSlice(TensorId a, TensorId b) const;
    /// Whether a tensor depends on data that differs between data-parallel replicas (a record
    /// split across replicas: the batch), so that its replicas' values differ.
    bool perReplicaData(TensorId t) const;
    /// Two tensors hold different parts of one record (shards), so their values differ.
    bool differentSlices(TensorId a, TensorId b) const;

private:
    mutable std::vector<bool> perReplica_;
    std::vector<Where> where_;
    std::vector<bool> initial_;
};

/// A site of the ops `ops` (the first names it); `detail` empty: "<kind> over ranks ..." of the first.
Site makeSite(const View& v, const std::vector<OpId>& ops, std::string detail = {});

/// Sites whose first op's name contains `hint` first (a tie-break only; sites are found by structure).
void prefer(std::vector<Site>& sites, std::string_view hint);

}  // namespace tv::bugs::detail
