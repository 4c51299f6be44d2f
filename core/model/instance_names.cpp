#include "model/instance_names.hpp"

namespace tv::instance {

namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }

/// The end of the digits from `at`, or `at` when there are none.
std::size_t digitsEnd(const std::string& s, std::size_t at) {
    while (at < s.size() && isDigit(s[at])) ++at;
    return at;
}

/// Removes `mark` followed by at least one digit, everywhere (or the first only); a mark without
/// digits is part of the name and stays. With `thenMark`, that mark and its digits are removed
/// too where they follow directly.
void strip(std::string& s, std::string_view mark, bool all, std::string_view thenMark = {}) {
    for (std::size_t at = s.find(mark); at != std::string::npos; at = s.find(mark, at)) {
        std::size_t end = digitsEnd(s, at + mark.size());
        if (end == at + mark.size()) {
            at = end;
            continue;
        }
        if (!thenMark.empty() && s.compare(end, thenMark.size(), thenMark) == 0) {
            const std::size_t after = digitsEnd(s, end + thenMark.size());
            if (after > end + thenMark.size()) end = after;
        }
        s.erase(at, end - at);
        if (!all) return;
    }
}

}  // namespace

std::string rankSuffix(std::int32_t rank) { return "@r" + std::to_string(rank); }

std::string generatorSuffix(std::int32_t microbatch, std::int32_t rank) {
    return (microbatch >= 0 ? ".mb" + std::to_string(microbatch) : std::string()) + rankSuffix(rank);
}

std::string nnScalerSuffix(std::int32_t rank, std::int32_t microbatch) {
    return rankSuffix(rank) + (microbatch >= 0 ? ".m" + std::to_string(microbatch) : std::string());
}

namespace {
std::string adapterStem(std::string_view kind, std::int64_t adapter, std::int32_t microbatch) {
    return std::string(kind) + "." + std::to_string(adapter) + (microbatch >= 0 ? ".m" + std::to_string(microbatch) : std::string());
}
}  // namespace

std::string nnScalerCollectiveName(std::string_view kind, std::int64_t adapter, std::int32_t microbatch, std::int32_t firstRank) {
    return adapterStem(kind, adapter, microbatch) + ".g" + std::to_string(firstRank);
}

std::string nnScalerMoveName(std::int64_t adapter, std::int32_t microbatch, std::int32_t from, std::int32_t to) {
    return adapterStem("send_recv", adapter, microbatch) + ".r" + std::to_string(from) + "-r" + std::to_string(to);
}

std::string writtenOutSuffix(std::int32_t microbatch, std::int32_t replica) {
    std::string s;
    if (microbatch > 0) s += "~mb" + std::to_string(microbatch);
    if (replica > 0) s += "~dp" + std::to_string(replica);
    return s;
}

std::string storedName(std::string_view name) { return std::string(name.substr(0, name.find('~'))); }

std::string withoutReplicaMarks(std::string_view name) {
    std::string s(name);
    // From the end: each "~dp<k>" or "~mb<m>" with digits to the end of what is left.
    for (bool more = true; more;) {
        more = false;
        for (std::string_view mark : {"~dp", "~mb"}) {
            const auto at = s.rfind(mark);
            if (at == std::string::npos || at + mark.size() == s.size() || digitsEnd(s, at + mark.size()) != s.size()) continue;
            s.erase(at);
            more = true;
        }
    }
    return s;
}

std::string withoutRank(std::string_view name) {
    std::string s(name);
    strip(s, "@r", false);
    return s;
}

std::string withoutMicrobatch(std::string_view name) {
    std::string s(name);
    strip(s, "~mb", true);
    strip(s, ".mb", true);
    // nnScaler's ".m<m>" is a microbatch only right after a rank mark: "@r0.m1" -> "@r0".
    for (std::size_t at = s.find("@r"); at != std::string::npos; at = s.find("@r", at + 2)) {
        const std::size_t rankEnd = digitsEnd(s, at + 2);
        if (rankEnd == at + 2 || s.compare(rankEnd, 2, ".m") != 0) continue;
        const std::size_t end = digitsEnd(s, rankEnd + 2);
        if (end > rankEnd + 2) s.erase(rankEnd, end - rankEnd);
    }
    return s;
}

std::string logicalName(std::string_view name) {
    std::string s = storedName(name);
    strip(s, "@r", true, ".m");
    strip(s, ".mb", true);
    return s;
}

}  // namespace tv::instance
