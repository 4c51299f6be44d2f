#include "io/plan_repeats.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <unordered_map>

namespace tv {

using json = nlohmann::json;

namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }
/// Letters, '_' and every byte of a multi-byte UTF-8 character (so a rename key never starts or
/// ends inside one).
bool isWordChar(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<unsigned char>(c) >= 0x80; }

}  // namespace

// ----- renaming -----------------------------------------------------------------------------

Rename::Rename(std::vector<std::pair<std::string, std::string>> pairs) : pairs_(std::move(pairs)) {
    std::sort(pairs_.begin(), pairs_.end());
    byFirstChar_.assign(256, {});
    for (std::uint32_t k = 0; k < pairs_.size(); ++k)
        if (!pairs_[k].first.empty()) byFirstChar_[static_cast<unsigned char>(pairs_[k].first[0])].push_back(k);
    for (auto& bucket : byFirstChar_)
        std::stable_sort(bucket.begin(), bucket.end(),
                         [&](std::uint32_t a, std::uint32_t b) { return pairs_[a].first.size() > pairs_[b].first.size(); });
}

int Rename::matchAt(const std::string& s, std::size_t i) const {
    if (byFirstChar_.empty()) return -1;
    for (auto k : byFirstChar_[static_cast<unsigned char>(s[i])]) {
        const auto& key = pairs_[k].first;
        if (s.size() - i < key.size() || s.compare(i, key.size(), key) != 0) continue;
        if (isDigit(key.front()) && i > 0 && isDigit(s[i - 1])) continue;
        auto end = i + key.size();
        if (isDigit(key.back()) && end < s.size() && isDigit(s[end])) continue;
        return static_cast<int>(k);
    }
    return -1;
}

std::string Rename::apply(const std::string& s) const {
    if (pairs_.empty()) return s;
    std::string out;
    out.reserve(s.size() + 8);
    for (std::size_t i = 0; i < s.size();) {
        int k = matchAt(s, i);
        if (k < 0) {
            out += s[i++];
        } else {
            out += pairs_[static_cast<std::size_t>(k)].second;
            i += pairs_[static_cast<std::size_t>(k)].first.size();
        }
    }
    return out;
}

bool Rename::touches(const std::string& s) const {
    for (std::size_t i = 0; i < s.size(); ++i)
        if (matchAt(s, i) >= 0) return true;
    return false;
}

namespace {

/// Applies a renaming to every string value (not to object keys) and a rank shift to the entry's
/// own "rank" and "group" members.
void renameEntry(json& e, const Rename& rename, std::int64_t rankShift) {
    std::function<void(json&)> walk = [&](json& v) {
        if (v.is_string()) {
            if (!rename.empty()) v = rename.apply(v.get_ref<const std::string&>());
        } else if (v.is_array() || v.is_object()) {
            for (auto& c : v) walk(c);
        }
    };
    if (!rename.empty()) walk(e);
    // Ranks far out of range are left as they are (the reader reports them) rather than overflow.
    auto shift = [&](json& r) {
        if (!r.is_number_integer()) return;
        const auto x = r.get<std::int64_t>();
        if (x > -(std::int64_t(1) << 40) && x < (std::int64_t(1) << 40)) r = x + rankShift;
    };
    if (rankShift != 0 && e.is_object()) {
        if (auto it = e.find("rank"); it != e.end()) shift(*it);
        if (auto it = e.find("group"); it != e.end() && it->is_array())
            for (auto& r : *it) shift(r);
    }
}

}  // namespace

std::size_t jsonFootprint(const json& v) {
    constexpr std::size_t kNode = 48;  // a json value, its allocation and its container slot
    std::size_t n = 0;
    std::vector<const json*> todo{&v};
    while (!todo.empty()) {
        const json* x = todo.back();
        todo.pop_back();
        n += kNode;
        if (x->is_string()) {
            n += x->get_ref<const std::string&>().size();
        } else if (x->is_object()) {
            for (auto it = x->begin(); it != x->end(); ++it) {
                n += it.key().size() + kNode;
                todo.push_back(&it.value());
            }
        } else if (x->is_array()) {
            for (const auto& c : *x) todo.push_back(&c);
        }
    }
    return n;
}

// ----- reading ------------------------------------------------------------------------------

const std::vector<std::pair<std::string, bool>>& repeatableArrays() {
    static const std::vector<std::pair<std::string, bool>> arrays = {
        {"/logical/tensors", false}, {"/logical/ops", false}, {"/parallel/tensors", true},
        {"/parallel/ops", true},     {"/lineage", false},
    };
    return arrays;
}

std::string RepeatOrigins::entryPath(const std::string& array, std::size_t i) const {
    auto it = arrays.find(array);
    if (it == arrays.end() || i >= it->second.size()) return array + "/" + std::to_string(i);
    const auto& o = it->second[i];
    if (o.templateIndex < 0) return o.filePath;
    return o.filePath + "/repeat@" + std::to_string(o.templateIndex);
}

RepeatExpansion expandRepeats(const json& doc) {
    RepeatExpansion r;
    r.doc = doc;
    std::size_t total = 0, bytes = 0;
    auto fail = [&](const std::string& path, const std::string& msg) {
        if (r.problems.size() < kMaxProblems) r.problems.push_back({path, msg});
    };
    for (const auto& [ptr, hasRanks] : repeatableArrays()) {
        json::json_pointer jp(ptr);
        if (!doc.contains(jp) || !doc.at(jp).is_array()) continue;  // the reader reports it
        const auto& src = doc.at(jp);
        json out = json::array();
        auto& origins = r.origins.arrays[ptr];
        for (std::size_t i = 0; i < src.size(); ++i) {
            const auto& e = src[i];
            auto path = ptr + "/" + std::to_string(i);
            if (!e.is_object() || !e.contains("repeat")) {
                if (++total > kMaxExpandedEntries) break;
                out.push_back(e);
                origins.push_back({path, -1});
                continue;
            }
            if (e.size() != 1) {
                for (auto it = e.begin(); it != e.end(); ++it)
                    if (it.key() != "repeat") fail(path + "/" + it.key(), "a repeat entry holds only \"repeat\", not \"" + it.key() + "\"");
                continue;
            }
            const auto& rep = e["repeat"];
            auto rpath = path + "/repeat";
            if (!rep.is_object()) {
                fail(rpath, "\"repeat\" must be an object");
                continue;
            }
            bool ok = true;
            for (auto it = rep.begin(); it != rep.end(); ++it)
                if (it.key() != "from" && it.key() != "count" && it.key() != "rename" && it.key() != "rank_shift") {
                    fail(rpath + "/" + it.key(), "unknown repeat key \"" + it.key() + "\"");
                    ok = false;
                }
            auto intOf = [&](const char* key, bool required, std::int64_t lo, std::int64_t hi, std::int64_t& v) {
                auto it = rep.find(key);
                if (it == rep.end()) {
                    if (required) {
                        fail(rpath, std::string("missing \"") + key + "\"");
                        ok = false;
                    }
                    return;
                }
                if (!it->is_number_integer()) {
                    fail(rpath + "/" + key, std::string("\"") + key + "\" must be an integer");
                    ok = false;
                    return;
                }
                v = it->get<std::int64_t>();
                if (v < lo || v > hi) {
                    fail(rpath + "/" + key, std::string("\"") + key + "\" is " + std::to_string(v) + ", must be in [" +
                                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
                    ok = false;
                }
            };
            auto written = static_cast<std::int64_t>(out.size());
            std::int64_t from = 0, count = 0, shift = 0;
            if (written == 0) {
                fail(rpath, "a repeat copies earlier entries, and there are none before it");
                continue;
            }
            intOf("from", true, 0, written - 1, from);
            if (ok) intOf("count", true, 1, written - from, count);
            if (rep.contains("rank_shift")) {
                if (!hasRanks) {
                    fail(rpath + "/rank_shift", "rank_shift is for parallel tensors and ops; " + ptr.substr(1) + " have no ranks");
                    ok = false;
                } else {
                    intOf("rank_shift", false, -(1 << 24), 1 << 24, shift);
                }
            }
            std::vector<std::pair<std::string, std::string>> pairs;
            if (auto it = rep.find("rename"); it != rep.end()) {
                if (!it->is_object()) {
                    fail(rpath + "/rename", "\"rename\" must be an object of strings");
                    ok = false;
                } else {
                    for (auto p = it->begin(); p != it->end(); ++p) {
                        if (p.key().empty()) {
                            fail(rpath + "/rename", "a renamed string cannot be empty");
                            ok = false;
                        } else if (!p->is_string()) {
                            fail(rpath + "/rename/" + p.key(), "\"" + p.key() + "\" must be renamed to a string");
                            ok = false;
                        } else {
                            pairs.emplace_back(p.key(), p->get<std::string>());
                        }
                    }
                }
            }
            if (!ok) continue;
            total += static_cast<std::size_t>(count);
            if (total > kMaxExpandedEntries) break;
            // Bound the memory the copies take before copying: renames can grow names with every
            // repeat that copies a copy (a renamed string grows at most by the largest value/key
            // ratio), and an entry can carry any amount of numbers and nesting.
            std::size_t growth = 1;
            for (const auto& [k, v] : pairs) growth = std::max(growth, (v.size() + k.size() - 1) / k.size());
            Rename rename(std::move(pairs));
            std::size_t need = 0;  // the whole repeat, before any of it is copied
            for (std::int64_t t = from; t < from + count && bytes + need <= kMaxExpandedBytes; ++t)
                need += jsonFootprint(out[static_cast<std::size_t>(t)]) * growth;
            if (bytes + need > kMaxExpandedBytes) {
                fail(path, "the repeats write out more than " + std::to_string(kMaxExpandedBytes >> 20) + " MiB of entries");
                return r;
            }
            for (std::int64_t t = from; t < from + count; ++t) {
                const auto& source = out[static_cast<std::size_t>(t)];
                json copy = source;
                renameEntry(copy, rename, shift);
                bytes += jsonFootprint(copy);
                out.push_back(std::move(copy));
                origins.push_back({path, t});
            }
        }
        if (total > kMaxExpandedEntries) {
            fail(ptr, "the repeats write out more than " + std::to_string(kMaxExpandedEntries) + " entries");
            return r;
        }
        r.doc[jp] = std::move(out);
    }
    return r;
}

// ----- writing ------------------------------------------------------------------------------

namespace {

constexpr std::size_t kGram = 4;         ///< runs are found through their first kGram entries
constexpr std::size_t kCandidates = 8;   ///< earlier positions remembered per gram
constexpr std::size_t kMinRun = 6;       ///< shorter runs are written out

/// The entry with every number inside a string, and its own ranks, blanked: entries that can copy
/// one another under a renaming and a rank shift have equal skeletons.
void skeleton(const json& v, std::string& out, bool top, bool hasRanks) {
    switch (v.type()) {
    case json::value_t::string: {
        const auto& s = v.get_ref<const std::string&>();
        out += '"';
        for (std::size_t i = 0; i < s.size(); ++i) {
            if (isDigit(s[i])) {
                if (i == 0 || !isDigit(s[i - 1])) out += '#';
            } else {
                out += s[i];
            }
        }
        out += '"';
        break;
    }
    case json::value_t::object:
        out += '{';
        for (auto it = v.begin(); it != v.end(); ++it) {
            out += it.key();
            out += ':';
            if (top && hasRanks && (it.key() == "rank" || it.key() == "group")) out += it->is_array() ? "[#" + std::to_string(it->size()) + "]" : "#";
            else skeleton(*it, out, false, hasRanks);
            out += ',';
        }
        out += '}';
        break;
    case json::value_t::array:
        out += '[';
        for (const auto& c : v) {
            skeleton(c, out, false, hasRanks);
            out += ',';
        }
        out += ']';
        break;
    default:
        out += v.dump();
    }
}

/// The renamed string starts where the number's context does: the word before it with one
/// separator on each side ("layers.12" in "layers.12.ffn", "@r3" in "wq@r3", "experts.7").
std::size_t contextStart(const std::string& s, std::size_t digits) {
    auto k = digits;
    if (k > 0 && !isWordChar(s[k - 1]) && !isDigit(s[k - 1])) --k;
    auto word = k;
    while (k > 0 && isWordChar(s[k - 1])) --k;
    if (k < word && k > 0 && !isWordChar(s[k - 1]) && !isDigit(s[k - 1])) --k;
    return k;
}

/// Adds the renamings that turn the numbers of a into those of b. False on a conflict with one
/// already chosen.
bool deriveRenames(const json& a, const json& b, std::map<std::string, std::string>& renames) {
    if (a.is_string() && b.is_string()) {
        const auto& s = a.get_ref<const std::string&>();
        const auto& u = b.get_ref<const std::string&>();
        if (s == u) return true;
        std::size_t i = 0, j = 0;
        while (i < s.size() && j < u.size()) {
            if (isDigit(s[i]) && isDigit(u[j])) {
                auto i2 = i, j2 = j;
                while (i2 < s.size() && isDigit(s[i2])) ++i2;
                while (j2 < u.size() && isDigit(u[j2])) ++j2;
                if (s.compare(i, i2 - i, u, j, j2 - j) != 0) {
                    auto c = contextStart(s, i);
                    auto key = s.substr(c, i2 - c);
                    auto value = s.substr(c, i - c) + u.substr(j, j2 - j);
                    auto [it, fresh] = renames.emplace(key, value);
                    if (!fresh && it->second != value) return false;
                }
                i = i2;
                j = j2;
            } else if (s[i] == u[j]) {
                ++i;
                ++j;
            } else {
                return true;  // different text: the check by writing out refuses it
            }
        }
        return true;
    }
    if (a.is_object() && b.is_object()) {
        for (auto it = a.begin(); it != a.end(); ++it) {
            auto jt = b.find(it.key());
            if (jt != b.end() && !deriveRenames(*it, *jt, renames)) return false;
        }
        return true;
    }
    if (a.is_array() && b.is_array() && a.size() == b.size()) {
        for (std::size_t k = 0; k < a.size(); ++k)
            if (!deriveRenames(a[k], b[k], renames)) return false;
    }
    return true;
}

/// The shift from a's ranks to b's, if they have any; false when they do not shift uniformly.
bool deriveShift(const json& a, const json& b, std::optional<std::int64_t>& shift) {
    auto one = [&](std::int64_t x, std::int64_t y) {
        if (!shift) shift = y - x;
        return *shift == y - x;
    };
    if (auto ra = a.find("rank"), rb = b.find("rank"); ra != a.end() && rb != b.end() && ra->is_number_integer() && rb->is_number_integer())
        if (!one(ra->get<std::int64_t>(), rb->get<std::int64_t>())) return false;
    if (auto ga = a.find("group"), gb = b.find("group"); ga != a.end() && gb != b.end() && ga->is_array() && gb->is_array() && ga->size() == gb->size())
        for (std::size_t k = 0; k < ga->size(); ++k)
            if ((*ga)[k].is_number_integer() && (*gb)[k].is_number_integer() && !one((*ga)[k].get<std::int64_t>(), (*gb)[k].get<std::int64_t>()))
                return false;
    return true;
}

struct Run {
    std::size_t length = 0;
    Rename rename;
    std::int64_t shift = 0;
};

/// The longest prefix of entries [j, j + maxLen) that entries [i, i + maxLen) give back under one
/// renaming and rank shift.
Run verifyRun(const json& a, std::size_t i, std::size_t j, std::size_t maxLen, bool hasRanks) {
    std::map<std::string, std::string> renames;
    std::optional<std::int64_t> shift;
    std::size_t len = 0;
    for (; len < maxLen; ++len) {
        const auto& x = a[i + len];
        const auto& y = a[j + len];
        if (!x.is_object() || !y.is_object()) break;
        auto saved = renames;
        if (!deriveRenames(x, y, renames) || (hasRanks && !deriveShift(x, y, shift))) break;
        Rename r({renames.begin(), renames.end()});
        json copy = x;
        renameEntry(copy, r, shift.value_or(0));
        if (copy != y) {
            renames = std::move(saved);
            break;
        }
    }
    // A renaming found late may touch an earlier entry: keep the prefix the final one gives back,
    // and only the renamings it uses.
    Rename all({renames.begin(), renames.end()});
    std::vector<std::pair<std::string, std::string>> used;
    std::size_t good = 0;
    for (; good < len; ++good) {
        json copy = a[i + good];
        renameEntry(copy, all, shift.value_or(0));
        if (copy != a[j + good]) break;
    }
    Run run;
    run.length = good;
    run.shift = shift.value_or(0);
    if (good == 0) return run;
    std::vector<bool> touched(all.pairs().size(), false);
    std::function<void(const json&)> mark = [&](const json& v) {
        if (v.is_string()) {
            const auto& s = v.get_ref<const std::string&>();
            for (std::size_t k = 0; k < all.pairs().size(); ++k)
                if (!touched[k] && s.find(all.pairs()[k].first) != std::string::npos) touched[k] = true;
        } else if (v.is_array() || v.is_object()) {
            for (const auto& c : v) mark(c);
        }
    };
    for (std::size_t t = 0; t < good; ++t) mark(a[i + t]);
    for (std::size_t k = 0; k < all.pairs().size(); ++k)
        if (touched[k]) used.push_back(all.pairs()[k]);
    // Dropping a key that never occurs cannot change what the others do; one that occurs but
    // never matches (inside a longer number) is kept, which is harmless.
    run.rename = Rename(std::move(used));
    return run;
}

json compressArray(const json& a, bool hasRanks) {
    auto n = a.size();
    if (n < kMinRun * 2) return a;
    std::vector<std::uint64_t> cls(n);
    std::string buf;
    for (std::size_t k = 0; k < n; ++k) {
        buf.clear();
        skeleton(a[k], buf, true, hasRanks);
        cls[k] = std::hash<std::string>{}(buf);
    }
    auto gramAt = [&](std::size_t p) {
        std::uint64_t h = 1469598103934665603ull;
        for (std::size_t k = 0; k < kGram; ++k) h = (h ^ cls[p + k]) * 1099511628211ull;
        return h;
    };
    std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> seen;
    auto remember = [&](std::size_t p) {
        if (p + kGram > n) return;
        auto& v = seen[gramAt(p)];
        if (v.size() == kCandidates) v.erase(v.begin());
        v.push_back(static_cast<std::uint32_t>(p));
    };
    json out = json::array();
    std::size_t j = 0;
    while (j < n) {
        Run best;
        std::size_t bestFrom = 0;
        if (j + kGram <= n) {
            if (auto it = seen.find(gramAt(j)); it != seen.end()) {
                // Longest run of equal skeletons first; the most recent among equals.
                std::vector<std::pair<std::size_t, std::size_t>> cands;  // (length, from)
                for (auto pi = it->second.rbegin(); pi != it->second.rend(); ++pi) {
                    std::size_t i = *pi, len = 0;
                    while (j + len < n && i + len < j && cls[i + len] == cls[j + len]) ++len;
                    cands.emplace_back(len, i);
                }
                std::stable_sort(cands.begin(), cands.end(), [](auto& x, auto& y) { return x.first > y.first; });
                for (std::size_t c = 0; c < cands.size() && c < 3; ++c) {
                    if (cands[c].first < kMinRun || cands[c].first <= best.length) break;
                    auto run = verifyRun(a, cands[c].second, j, cands[c].first, hasRanks);
                    if (run.length > best.length) {
                        best = std::move(run);
                        bestFrom = cands[c].second;
                    }
                }
            }
        }
        if (best.length >= kMinRun) {
            json rep = {{"from", bestFrom}, {"count", best.length}};
            if (!best.rename.empty()) {
                json rn = json::object();
                for (const auto& [k, v] : best.rename.pairs()) rn[k] = v;
                rep["rename"] = std::move(rn);
            }
            if (best.shift != 0) rep["rank_shift"] = best.shift;
            out.push_back(json{{"repeat", std::move(rep)}});
            for (std::size_t t = 0; t < best.length; ++t) remember(j + t);
            j += best.length;
        } else {
            out.push_back(a[j]);
            remember(j);
            ++j;
        }
    }
    return out;
}

}  // namespace

json compressRepeats(json doc) {
    if (!doc.is_object()) return doc;
    for (const auto& [ptr, hasRanks] : repeatableArrays()) {
        json::json_pointer jp(ptr);
        if (!doc.contains(jp) || !doc.at(jp).is_array()) continue;
        doc[jp] = compressArray(doc.at(jp), hasRanks);
    }
    doc["version"] = 3;
    return doc;
}

}  // namespace tv
