// How a parallel op or tensor is named after the logical one it is an instance of, in one place.
// Three producers write instance names, each its own way, and the verifier, the bug lab and the
// explorer read them back:
//
//   the generator        <stem>.mb<m>@r<r>     (no ".mb<m>" for no microbatch, or microbatches stored once)
//   the nnScaler import  <stem>@r<r>.m<m>      (no ".m<m>" for no microbatch)
//   written-out replicas <stored>~mb<m>~dp<k>  (expandReplicas: microbatch m >= 1, replica k >= 1)
//
// An nnScaler adapter's collectives are no instance of a logical op; they are named after the
// adapter, its microbatch and its ranks: <kind>.<adapter>.m<m>.g<first rank>, and
// send_recv.<adapter>.m<m>.r<from>-r<to> (no ".m<m>" for no microbatch).
//
// Names are labels, never semantics: nothing here decides a verdict. They place a counterexample's
// op beside its logical op in a trace, find bug sites, and map a written-out op back to the op
// stored once that stands for it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tv::instance {

/// "@r<rank>": the rank mark every parallel producer writes.
std::string rankSuffix(std::int32_t rank);
/// The generator's: ".mb<m>@r<rank>", or "@r<rank>" for microbatch < 0.
std::string generatorSuffix(std::int32_t microbatch, std::int32_t rank);
/// The nnScaler import's: "@r<rank>.m<m>", or "@r<rank>" for microbatch < 0.
std::string nnScalerSuffix(std::int32_t rank, std::int32_t microbatch);
/// An nnScaler adapter's collective: "<kind>.<adapter>[.m<m>].g<group's first rank>".
std::string nnScalerCollectiveName(std::string_view kind, std::int64_t adapter, std::int32_t microbatch, std::int32_t firstRank);
/// An nnScaler adapter's point-to-point move: "send_recv.<adapter>[.m<m>].r<from>-r<to>".
std::string nnScalerMoveName(std::int64_t adapter, std::int32_t microbatch, std::int32_t from, std::int32_t to);
/// A written-out instance of a name stored once: "~mb<m>" for microbatch m >= 1, then "~dp<k>"
/// for replica k >= 1 (replica 0's microbatch 0 keeps the stored name).
std::string writtenOutSuffix(std::int32_t microbatch, std::int32_t replica);

/// The stored name a written-out instance stands for: "x~mb1~dp1" -> "x" (a name without such a
/// suffix is its own).
std::string storedName(std::string_view name);
/// The name without the replica write-out's marks only: trailing "~mb<m>" and "~dp<k>" removed,
/// a member's "~cp<j>" / "~ep<j>" kept. "x~cp1~mb1~dp1" -> "x~cp1": in a plan holding its members
/// written out (the explorer's, the bug lab's), the op a written-out replica instance stands for.
std::string withoutReplicaMarks(std::string_view name);
/// The name without its first rank mark: "fc1.mb0@r3" -> "fc1.mb0", "fc1@r3.m0" -> "fc1.m0". The
/// tensor-parallel peers of one op share it.
std::string withoutRank(std::string_view name);
/// The name without its microbatch marks (".mb<m>", "~mb<m>", and nnScaler's ".m<m>" after a rank
/// mark): "send.mb1@r0" -> "send@r0". One op of every microbatch shares it.
std::string withoutMicrobatch(std::string_view name);
/// The name the parallel op shares with its logical op: every mark of every scheme removed.
/// "fc2.mb1@r0~dp1" -> "fc2", "fc2@r0.m1" -> "fc2".
std::string logicalName(std::string_view name);

}  // namespace tv::instance
