// Plan file format, version 3: repeated blocks (identical layers, pipeline stages) stored once.
//
// In a version 3 file, an entry of a tensor, op or lineage array may be a repeat:
//   { "repeat": { "from": 120, "count": 418, "rename": { "layers.0": "layers.1" }, "rank_shift": 8 } }
// It stands for the entries [from, from + count) of the same array, as written out so far,
// copied with the renames applied to every string value and rank_shift added to every "rank" and
// "group" member. The reader writes repeats out before anything else looks at the plan
// (expandRepeats); the writer finds them (compressRepeats) and checks each one by writing it out.
// docs/plan-format.md §8 is the specification.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/plan_json.hpp"

namespace tv {

/// A simultaneous renaming of substrings. At each position of a string the longest key that
/// matches is replaced; a key never matches part of a number (a key starting with a digit needs
/// no digit before it, one ending with a digit no digit after it), so "@r1" does not touch "@r12".
class Rename {
public:
    Rename() = default;
    explicit Rename(std::vector<std::pair<std::string, std::string>> pairs);
    bool empty() const { return pairs_.empty(); }
    const std::vector<std::pair<std::string, std::string>>& pairs() const { return pairs_; }
    std::string apply(const std::string& s) const;
    /// True when the renaming changes s.
    bool touches(const std::string& s) const;

private:
    std::vector<std::pair<std::string, std::string>> pairs_;  ///< sorted by key
    std::vector<std::vector<std::uint32_t>> byFirstChar_;    ///< 256 buckets, longest key first
    /// The key matching at s[i], or -1.
    int matchAt(const std::string& s, std::size_t i) const;
};

/// One written-out entry of a version 3 array came from the file entry at `filePath`: itself, or
/// the repeat there that copied template entry `templateIndex` (an index of the written-out array).
struct RepeatOrigin {
    std::string filePath;
    std::int64_t templateIndex = -1;  ///< -1: a literal entry
};

/// The arrays that may hold repeats, and where each written-out entry came from.
class RepeatOrigins {
public:
    /// The path a problem in entry i of array (e.g. "/parallel/ops") is reported at.
    std::string entryPath(const std::string& array, std::size_t i) const;
    std::map<std::string, std::vector<RepeatOrigin>> arrays;
};

struct RepeatExpansion {
    nlohmann::json doc;                  ///< the document with every repeat written out
    RepeatOrigins origins;
    std::vector<PlanProblem> problems;  ///< malformed repeats; doc is unusable when not empty
};

/// At most this many entries, summed over all arrays, once the repeats are written out.
inline constexpr std::size_t kMaxExpandedEntries = std::size_t(1) << 22;
/// At most this much memory (about: strings, keys and 48 bytes a value) in the entries repeats
/// write out.
inline constexpr std::size_t kMaxExpandedBytes = std::size_t(1) << 30;

/// What a value costs in memory, about: the bytes of its strings and keys, and a node's size for
/// every value (a number or an empty array costs as much as a short string). Iterative: no
/// recursion on the file's nesting. Counting strings alone let a repeated entry carrying a
/// 500,000-number array, or one nested 250 deep, write out gigabytes.
std::size_t jsonFootprint(const nlohmann::json& v);

/// The arrays that may hold repeats, as JSON pointers, and whether their entries carry ranks.
const std::vector<std::pair<std::string, bool>>& repeatableArrays();

/// Writes out every repeat of a version 3 document. The other entries are copied unchecked.
RepeatExpansion expandRepeats(const nlohmann::json& doc);

/// Replaces runs of entries that copy an earlier run (under a renaming and a rank shift) by
/// repeats, where that makes the file smaller, and sets "version" to 3. Each repeat is checked by
/// writing it out, so expandRepeats(compressRepeats(d)) gives d's arrays back exactly.
nlohmann::json compressRepeats(nlohmann::json doc);

}  // namespace tv
