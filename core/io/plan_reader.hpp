// The validating reader of plan JSON, shared by the files that implement it (internal to core/io;
// nothing outside includes it). plan_json.cpp holds the entry points and the document, mesh and
// replicas; plan_json_graph.cpp a graph (tensors, ops, shape rules, ranks, microbatches);
// plan_json_lineage.cpp the lineage (slices, copies, replica modes, tiling). Each problem is
// recorded with its JSON path; a file with too many stops early (TooManyProblems).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/plan_json.hpp"
#include "io/plan_repeats.hpp"

namespace tv::plan_json_detail {

using json = nlohmann::json;

constexpr std::int64_t kMaxDim = std::int64_t(1) << 40;
constexpr std::size_t kMaxRank = 16;

struct TooManyProblems {};

class Reader {
public:
    /// `keepMembers`: a plan storing one member of each expert-parallel group is read as stored
    /// (Replication::members); otherwise expandMembers has written its members out before.
    explicit Reader(const json& doc, const RepeatOrigins* origins = nullptr, bool keepMembers = false)
        : doc_(doc), origins_(origins), keepMembers_(keepMembers), plan_(std::make_unique<Plan>()) {}

    PlanLoadResult run();

private:
    const json& doc_;
    const RepeatOrigins* origins_;  ///< version 3: where each written-out entry came from
    bool keepMembers_ = false;
    std::unique_ptr<Plan> plan_;

    /// The path of entry i of an array: in a version 3 file, the entry or repeat it came from.
    std::string entryPath(const std::string& array, std::size_t i) const;
    std::vector<PlanProblem> problems_;

    void fail(const std::string& path, const std::string& msg);
    bool bad() const { return !problems_.empty(); }

    const json* member(const json& obj, const char* key, const std::string& path, bool required,
                       json::value_t type, const char* typeName);
    const json* arrayMember(const json& obj, const char* key, const std::string& path, bool required = true);
    const json* objectMember(const json& obj, const char* key, const std::string& path, bool required = true);
    const json* stringMember(const json& obj, const char* key, const std::string& path, bool required = true);
    bool intMember(const json& obj, const char* key, const std::string& path, std::int64_t& out, bool required,
                   std::int64_t lo, std::int64_t hi);

    void rejectUnknownKeys(const json& obj, const std::string& path, std::initializer_list<const char*> known, const char* what);

    std::int64_t version_ = 1;

    void readAll();

    /// Version 2: "replicas": {"axis": "dp"} stores one data-parallel replica for all of them;
    /// with "microbatches": true, microbatch 0 stands for every microbatch too.
    void readReplicas(const json& par);
    static constexpr std::int64_t kMaxLanes = std::int64_t{1} << 24;

    /// Microbatch fields range over the listed microbatches: only 0 when they are stored once.
    /// With cp members stored once, the file lists cp member 0: a rank with another cp coordinate
    /// is refused at `path` (true when it is refused).
    bool unstoredCpRank(std::int32_t rank, const std::string& path, const std::string& who) {
        const auto& rep = plan_->replication;
        if (rep.members < 2 || rep.memberAxis != Axis::CP || rank < 0 || static_cast<std::size_t>(rank) >= plan_->ranks.size()) return false;
        const auto c = plan_->ranks[static_cast<std::size_t>(rank)].at(Axis::CP);
        if (c == 0) return false;
        fail(path, who + ": with cp members stored once, the file lists cp member 0 of replica 0; rank " + std::to_string(rank) + " has cp " +
                       std::to_string(c) + " (member j runs member 0's ops on rank + j * " + std::to_string(rep.memberRanks) + ")");
        return true;
    }
    std::int32_t listedMicrobatches() const { return plan_->replication.microbatches > 1 ? 1 : plan_->microbatches; }

    void readMesh(const json& par);

    std::string tensorLabel(const Graph& g, TensorId t) const { return "\"" + plan_->tensorName(g, t) + "\""; }

    void readGraph(const json& obj, const std::string& base, Graph& g, bool parallel);

    void readLineage(const json& lin);

    /// The microbatch of a record's first tensor (-1 if it cannot be read yet; slices report that).
    std::int32_t peekMicrobatch(const json& r) const;

    /// A record's "replicas" mode (plans stored with replicas only). For "split_dim" the listed
    /// slices are replica 0's, so they tile the logical tensor with that dim divided by the degree.
    bool readReplicaMode(const json& r, const std::string& path, const std::string& who, Shape& full, LineageRecord& rec);
    /// A record's "members" mode (plans storing one member of each group, read as stored): for
    /// "split_dim" the slices are member 0's, tiling `full` with that dim divided by the members.
    bool readMemberMode(const json& r, const std::string& path, const std::string& who, Shape& full, LineageRecord& rec);

    /// Slices must tile the logical box exactly: no two overlap and together they cover it.
    void checkTiling(const LineageRecord& rec, const std::string& path, const std::string& who, const Shape& full);
};

}  // namespace tv::plan_json_detail
