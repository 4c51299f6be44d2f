// Plan file format, version 2 and 3: an expert-parallel group's members stored once.
//
// With `"replicas": {"axis": "dp", "members": N}` the file lists one data-parallel rank, member 0
// of the first expert-parallel group (N consecutive data-parallel ranks holding different experts
// and exchanging tokens), and says how the other members follow from it:
//   - member j runs every listed op on its rank + j * R' (R' ranks per data-parallel rank), every
//     collective on its group shifted likewise;
//   - a collective with "across_members": true runs once over the group's N members (member 0's
//     part listed), as "across_replicas" runs once over the replicas;
//   - a chunk with "index_from_member": true takes member j's part (index + j * parts / N, or,
//     indexed by replica too, + j * parts / dp);
//   - each lineage record says in "members" how it repeats: "copies", "sum", or {"split_dim": d}
//     (member j's slices shifted by j * n / N along d, or j * n / (N * lanes) when the record's
//     "replicas" splits the same dim over that many lanes: the members' parts lie inside their
//     lane's, member-major).
// With "member_axis": "cp" the members are instead a context-parallel group inside each replica
// (N the mesh's cp): the file lists cp member 0 (replica 0's ranks with cp 0), member j runs on
// rank + j * s (s the rank step between cp coordinates, cpMemberStep), names are "~cp<j>", and
// a chunk cannot take its index from the member and the replica at once.
// The reader writes the members out (expandMembers) into the form with the group listed
// ("listed": N, plan-format.md §7; along cp, a plain plan with replicas), before anything else
// looks at the plan: a stored-once plan means exactly that written-out plan, which the reader
// then validates and the verifier checks.
// docs/plan-format.md §7.3 is the specification.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/plan_repeats.hpp"

namespace tv {

struct MemberExpansion {
    nlohmann::json doc;                 ///< the document with the members written out
    RepeatOrigins origins;              ///< where each written-out entry came from in the file
    std::vector<PlanProblem> problems;  ///< malformed member fields; doc is unusable when not empty
    std::int32_t members = 1;           ///< N, or 1 when the file stores no members once
};

/// At most this many parallel tensors, ops and records, and this much memory (jsonFootprint), in
/// the members written out: the group listed, as a file listing it would have held it.
inline constexpr std::size_t kMaxMemberEntries = std::size_t(1) << 23;
inline constexpr std::size_t kMaxMemberBytes = std::size_t(4) << 30;

/// True when the document's replicas store one member of each expert-parallel group.
bool storesMembersOnce(const nlohmann::json& doc);

/// Members along the cp axis (`"member_axis": "cp"`): the rank step between consecutive members,
/// from the ranks' coordinates. The ranks must step through the cp coordinate in blocks of that
/// many ranks (rank r has cp (r / step) mod cp), and rank r + j * step must have rank r's other
/// coordinates, for r with cp 0. Returns the step, or 0 with `why` (naming the first rank that
/// breaks the rule).
std::int64_t cpMemberStep(const std::vector<std::array<std::int32_t, 6>>& coords, std::int32_t cp, std::string& why, std::int64_t& badRank);

/// A member's copy of a stored name: "~ep<j>" for an expert-parallel group's, "~cp<j>" for a
/// context-parallel group's (member 0 keeps the stored name).
std::string memberName(const std::string& stored, std::int32_t j, bool cpAxis);

/// Writes out the members of a document whose replicas store one member ("members": N). `from`
/// (optional) maps the document's entries to the file's (a version 3 file's repeats).
MemberExpansion expandMembers(const nlohmann::json& doc, const RepeatOrigins* from);

}  // namespace tv
