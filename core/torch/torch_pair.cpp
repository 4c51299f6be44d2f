#include "torch/torch_pair.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "io/plan_json.hpp"
#include "torch/input_pieces.hpp"
#include "torch/rank_set.hpp"
#include "torch/lineage_inference.hpp"
#include "torch/torch_lowering.hpp"

namespace tv::torch {

using nlohmann::json;

bool isTorchGraphPath(const std::string& path) {
    auto ends = [&](const std::string& s) { return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0; };
    return ends(".py") || ends(".gpickle");
}

namespace {

/// The tensors `roots` depend on (themselves included) and the ops computing them.
void cone(const LoweredProgram& p, const std::vector<int>& roots, std::vector<char>& tensors, std::vector<char>& ops) {
    tensors.assign(p.tensors.size(), 0);
    ops.assign(p.ops.size(), 0);
    std::vector<int> work(roots);
    for (int t : roots) tensors[static_cast<std::size_t>(t)] = 1;
    while (!work.empty()) {
        int t = work.back();
        work.pop_back();
        int prod = p.tensors[static_cast<std::size_t>(t)].producer;
        if (prod < 0 || ops[static_cast<std::size_t>(prod)]) continue;
        ops[static_cast<std::size_t>(prod)] = 1;
        for (int o : p.ops[static_cast<std::size_t>(prod)].outputs) tensors[static_cast<std::size_t>(o)] = 1;  // an op writes all its results
        for (int in : p.ops[static_cast<std::size_t>(prod)].inputs)
            if (!tensors[static_cast<std::size_t>(in)]) {
                tensors[static_cast<std::size_t>(in)] = 1;
                work.push_back(in);
            }
    }
}

std::string baseName(const std::string& s) {
    auto at = s.rfind("@r");
    return at == std::string::npos ? s : s.substr(0, at);
}

json sourceJson(const SourceLine& s) {
    json j = {{"file", s.file}, {"line", s.line}};
    if (!s.function.empty()) j["function"] = s.function;
    if (!s.code.empty()) j["code"] = s.code;
    return j;
}

json graphJson(const LoweredProgram& p, const std::vector<char>& tensors, const std::vector<char>& ops, bool parallel) {
    json g = {{"tensors", json::array()}, {"ops", json::array()}};
    for (std::size_t t = 0; t < p.tensors.size(); ++t) {
        if (!tensors[t]) continue;
        const auto& x = p.tensors[t];
        json j = {{"id", x.name}, {"shape", x.shape}};
        if (x.isInt) j["dtype"] = "int";
        if (x.producer < 0) j["role"] = "input";
        if (parallel) j["rank"] = x.rank;
        g["tensors"].push_back(std::move(j));
    }
    for (std::size_t o = 0; o < p.ops.size(); ++o) {
        if (!ops[o]) continue;
        const auto& x = p.ops[o];
        json j = {{"id", x.name}, {"op", x.kind}, {"inputs", json::array()}, {"outputs", json::array()}};
        for (int t : x.inputs) j["inputs"].push_back(p.tensors[static_cast<std::size_t>(t)].name);
        for (int t : x.outputs) j["outputs"].push_back(p.tensors[static_cast<std::size_t>(t)].name);
        if (!x.attrs.empty()) j["attrs"] = x.attrs;
        if (parallel) {
            if (x.group.empty()) j["rank"] = x.rank;
            else j["group"] = x.group;
        }
        if (x.source >= 0) j["source"] = sourceJson(p.sources[static_cast<std::size_t>(x.source)]);
        g["ops"].push_back(std::move(j));
    }
    return g;
}

std::string describeRelation(const Relation& r, const LoweredProgram& L) {
    std::string s;
    (void)L;
    bool full = true;
    for (std::size_t d = 0; d < r.dims.size(); ++d) full = full && r.full(d);
    if (r.kind == Relation::Kind::Partial) s = "a partial sum";
    else if (r.kind == Relation::Kind::PartialMax) s = "a partial maximum";
    else s = full ? "all of it" : "a part";
    if (!r.coeff.isOne()) s += " times " + (Rational(1) / r.coeff).toString();
    return s;
}

}  // namespace

namespace {

/// One entry of a relations file, checked against the programs: the parallel input on each rank
/// it names and the box of the logical input it holds, or the pieces it is the concatenation of.
struct RelationEntry {
    int logical = -1;
    std::vector<int> parallel;  ///< per rank named (tensors)
    Dims lo, hi;
    int dim = -1;               ///< pieces: the dim they are concatenated along
    std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
};
struct RelationsFile {
    std::vector<RelationEntry> entries;
    int results = -1;
};

/// Reads and checks a relations file. Returns the problem ("FILE: /inputs/2/part: ...") or "".
std::string readRelations(const std::string& path, const LoweredProgram& L, const LoweredProgram& P, RelationsFile& out) {
    std::ifstream f(path);
    if (!f) return path + ": cannot open file";
    json doc;
    try {
        doc = json::parse(f);
    } catch (const json::exception& e) {
        return path + ": not JSON: " + e.what();
    }
    auto at = [&](const std::string& where, const std::string& what) { return path + ": " + where + ": " + what; };
    if (!doc.is_object()) return at("/", "a relations file is a JSON object");
    if (doc.value("format", std::string()) != "trainverify-torch-relations") return at("/format", "must be \"trainverify-torch-relations\"");
    if (!doc.contains("version") || doc["version"] != 1) return at("/version", "must be 1");
    for (const auto& [key, v] : doc.items())
        if (key != "format" && key != "version" && key != "about" && key != "inputs" && key != "results") return at("/" + key, "unknown key");
    if (doc.contains("results")) {
        if (!doc["results"].is_number_integer() || doc["results"].get<std::int64_t>() < 0 || doc["results"].get<std::int64_t>() > 1'000'000)
            return at("/results", "must be how many leading outputs are results (a whole number)");
        out.results = doc["results"].get<int>();
    }
    if (!doc.contains("inputs") || !doc["inputs"].is_array()) return at("/inputs", "must be an array");
    auto inputNamed = [](const LoweredProgram& prog, int rank, const std::string& name) -> int {
        for (int t : prog.inputs.at(static_cast<std::size_t>(rank)))
            if (t >= 0) {
                auto n = prog.tensors[static_cast<std::size_t>(t)].name;
                if (auto a = n.rfind("@r"); a != std::string::npos) n = n.substr(0, a);
                if (n == name) return t;
            }
        return -1;
    };
    auto range = [&](const json& b, const std::string& where, std::int64_t size, std::int64_t& lo, std::int64_t& hi) -> std::string {
        if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer()) return at(where, "must be [start, end]");
        lo = b[0].get<std::int64_t>();
        hi = b[1].get<std::int64_t>();
        if (lo < 0 || lo >= hi || hi > size) return at(where, "is not a range inside 0.." + std::to_string(size));
        return {};
    };
    std::set<int> inPieces;
    std::size_t k = 0;
    for (const auto& e : doc["inputs"]) {
        const std::string where = "/inputs/" + std::to_string(k++);
        if (!e.is_object()) return at(where, "must be an object");
        for (const auto& [key, v] : e.items())
            if (key != "parallel" && key != "logical" && key != "rank" && key != "part" && key != "dim" && key != "pieces") return at(where + "/" + key, "unknown key");
        if (!e.contains("parallel") || !e["parallel"].is_string()) return at(where + "/parallel", "must name a parallel graph's input");
        if (!e.contains("logical") || !e["logical"].is_string()) return at(where + "/logical", "must name the single-device graph's input");
        RelationEntry entry;
        entry.logical = inputNamed(L, 0, e["logical"].get<std::string>());
        if (entry.logical < 0) return at(where + "/logical", "the single-device graph has no input \"" + e["logical"].get<std::string>() + "\"");
        const auto& lt = L.tensors[static_cast<std::size_t>(entry.logical)];
        const auto& lshape = lt.shape;
        std::vector<int> ranks;
        if (e.contains("rank")) {
            if (!e["rank"].is_number_integer() || e["rank"].get<std::int64_t>() < 0 || e["rank"].get<std::int64_t>() >= P.ranks)
                return at(where + "/rank", "must be a rank from 0 to " + std::to_string(P.ranks - 1));
            ranks.push_back(e["rank"].get<int>());
        } else {
            for (int r = 0; r < P.ranks; ++r) ranks.push_back(r);
        }
        entry.lo.assign(lshape.size(), 0);
        entry.hi = lshape;
        if (e.contains("pieces") != e.contains("dim")) return at(where + (e.contains("dim") ? "/pieces" : "/dim"), "\"pieces\" and \"dim\" go together");
        if (e.contains("pieces") && e.contains("part")) return at(where + "/part", "an input is either a part or pieces, not both");
        if (e.contains("pieces")) {
            if (!e["dim"].is_number_integer() || e["dim"].get<std::int64_t>() < 0 || e["dim"].get<std::int64_t>() >= static_cast<std::int64_t>(lshape.size()))
                return at(where + "/dim", "must be a dim of " + shapeToString(lshape));
            entry.dim = e["dim"].get<int>();
            const auto& ps = e["pieces"];
            if (!ps.is_array() || ps.empty() || ps.size() > 4096) return at(where + "/pieces", "must be a list of [start, end) ranges of dim " + std::to_string(entry.dim));
            for (std::size_t j = 0; j < ps.size(); ++j) {
                std::int64_t lo = 0, hi = 0;
                if (auto bad = range(ps[j], where + "/pieces/" + std::to_string(j), lshape[static_cast<std::size_t>(entry.dim)], lo, hi); !bad.empty()) return bad;
                entry.pieces.push_back({lo, hi});
            }
        } else if (e.contains("part")) {
            const auto& part = e["part"];
            if (!part.is_array() || part.size() != lshape.size()) return at(where + "/part", "must give one [start, end) per dim of " + shapeToString(lshape));
            for (std::size_t d = 0; d < lshape.size(); ++d)
                if (auto bad = range(part[d], where + "/part/" + std::to_string(d), lshape[d], entry.lo[d], entry.hi[d]); !bad.empty()) return bad;
        }
        Dims extent(lshape.size());
        for (std::size_t d = 0; d < lshape.size(); ++d) extent[d] = entry.hi[d] - entry.lo[d];
        if (entry.dim >= 0) {
            extent[static_cast<std::size_t>(entry.dim)] = 0;
            for (const auto& [lo, hi] : entry.pieces) extent[static_cast<std::size_t>(entry.dim)] += hi - lo;
        }
        for (int r : ranks) {
            const int pt = inputNamed(P, r, e["parallel"].get<std::string>());
            if (pt < 0) return at(where + "/parallel", "rank " + std::to_string(r) + "'s graph has no input \"" + e["parallel"].get<std::string>() + "\"");
            const auto& ptensor = P.tensors[static_cast<std::size_t>(pt)];
            if (extent != ptensor.shape)
                return at(where + (entry.dim >= 0 ? "/pieces" : "/part"), std::string(entry.dim >= 0 ? "the pieces make " : "the part is ") + shapeToString(extent) + " but rank " +
                                                                              std::to_string(r) + "'s " + e["parallel"].get<std::string>() + " is " + shapeToString(ptensor.shape));
            if (ptensor.isInt != lt.isInt) return at(where, "one is an integer tensor and the other is not");
            if (entry.dim >= 0 && !inPieces.insert(pt).second)
                return at(where, "rank " + std::to_string(r) + "'s " + e["parallel"].get<std::string>() + " is already declared as pieces");
            entry.parallel.push_back(pt);
        }
        out.entries.push_back(std::move(entry));
    }
    return {};
}

/// The relations a read file gives, once the declared pieces are inputs of their own.
void applyRelations(const RelationsFile& file, const LoweredProgram& L, const std::vector<std::vector<int>>& pieceTensors, std::vector<std::optional<Relation>>& rel) {
    std::size_t declared = 0;
    for (const auto& e : file.entries) {
        const auto& lshape = L.tensors[static_cast<std::size_t>(e.logical)].shape;
        for (int pt : e.parallel) {
            if (e.dim < 0) {
                Relation x;
                x.logical = e.logical;
                x.dims = boxDims(lshape, e.lo, e.hi);
                rel[static_cast<std::size_t>(pt)] = x;
                continue;
            }
            const auto& pieces = pieceTensors.at(declared++);
            for (std::size_t j = 0; j < pieces.size(); ++j) {
                Relation x;
                x.logical = e.logical;
                auto lo = e.lo, hi = e.hi;
                lo[static_cast<std::size_t>(e.dim)] = e.pieces[j].first;
                hi[static_cast<std::size_t>(e.dim)] = e.pieces[j].second;
                x.dims = boxDims(lshape, lo, hi);
                rel[static_cast<std::size_t>(pieces[j])] = x;
            }
        }
    }
}

}  // namespace

namespace {
TorchPairLoad loadTorchPairUnguarded(const std::string& logicalPath, const std::vector<std::string>& parallelPaths, const std::string& relationsPath);
}

TorchPairLoad loadTorchPair(const std::string& logicalPath, const std::vector<std::string>& parallelPaths, const std::string& relationsPath) {
    // Whatever the graphs hold, an answer: a value of a type or size nothing expected is refused
    // as what it is, naming the files, never a crash.
    try {
        return loadTorchPairUnguarded(logicalPath, parallelPaths, relationsPath);
    } catch (const std::exception& e) {
        TorchPairLoad out;
        out.report = reportWithoutPlan(Verdict::Invalid, FailureKind::InvalidPlan,
                                       "cannot lower and relate " + logicalPath + " and its " + std::to_string(parallelPaths.size()) +
                                           " rank graphs: a value the graphs should not hold (" + e.what() + ")");
        return out;
    }
}

namespace {
TorchPairLoad loadTorchPairUnguarded(const std::string& logicalPath, const std::vector<std::string>& parallelPaths, const std::string& relationsPath) {
    const auto t0 = std::chrono::steady_clock::now();
    TorchPairLoad out;
    auto fail = [&](Verdict v, FailureKind kind, const std::string& msg) {
        out.report = reportWithoutPlan(v, kind, msg);
        out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return std::move(out);
    };
    RankSet set;
    try {
        set = loadRankSet(logicalPath, parallelPaths);
    } catch (const TorchGraphError& e) {
        return fail(Verdict::Invalid, FailureKind::InvalidPlan, e.what());
    }
    out.notes = set.notes;
    LoweredProgram L, P;
    try {
        L = lowerLogical(set);
        P = lowerParallel(set);
    } catch (const TorchGraphError& e) {
        return fail(Verdict::Invalid, FailureKind::InvalidPlan, e.what());
    }
    for (const auto* side : {&L, &P})
        if (!side->damaged.empty()) return fail(Verdict::Invalid, FailureKind::InvalidPlan, "a damaged graph: " + side->damaged);
    for (const auto* side : {&L, &P})
        for (const auto& a : side->assumptions)
            if (std::find(out.notes.begin(), out.notes.end(), "assumed: " + a) == out.notes.end()) out.notes.push_back("assumed: " + a);
    // Vocabulary parts cover at least the logical vocabulary (the ids are assumed to lie in it).
    std::int64_t vocab = 0;
    for (const auto& o : L.ops) {
        if (o.kind == "embedding") vocab = std::max(vocab, L.tensors[static_cast<std::size_t>(o.inputs[1])].shape[0]);
        if (o.kind == "target_logit") vocab = std::max(vocab, L.tensors[static_cast<std::size_t>(o.inputs[0])].shape.back());
    }
    for (auto& o : P.ops) {
        if (!o.attrs.contains("parts")) continue;
        const auto width = o.kind == "embedding" ? P.tensors[static_cast<std::size_t>(o.inputs[1])].shape[0] : P.tensors[static_cast<std::size_t>(o.inputs[0])].shape.back();
        if (width < 1) continue;  // refused by the lowering already
        const auto need = (vocab + width - 1) / width;
        if (o.attrs["parts"].get<std::int64_t>() < need) o.attrs["parts"] = need;
    }

    RelationsFile relations;
    if (!relationsPath.empty())
        if (auto problem = readRelations(relationsPath, L, P, relations); !problem.empty()) return fail(Verdict::Invalid, FailureKind::InvalidPlan, problem);
    const int results = relations.results;
    // Inputs declared as pieces become one input per piece, carried as far as they distribute.
    std::vector<InputPieces> declared;
    for (const auto& e : relations.entries) {
        if (e.dim < 0) continue;
        InputPieces d;
        d.dim = static_cast<std::size_t>(e.dim);
        for (const auto& [lo, hi] : e.pieces) d.extents.push_back(hi - lo);
        for (int pt : e.parallel) {
            d.tensor = pt;
            declared.push_back(d);
        }
    }
    forwardCopies(L, true);  // the single device's repeated calls merged: each value has one name to pair with
    forwardCopies(P, false);
    const auto pieceTensors = splitInputPieces(P, declared);

    LineageInference inf(L, P);
    inf.relateInputs();
    inf.relateRuntimeInputs();
    if (!relationsPath.empty()) {
        applyRelations(relations, L, pieceTensors, inf.relations());
        out.notes.push_back("input relations from " + relationsPath + " (" + std::to_string(relations.entries.size()) + " entries)");
    }
    if (auto n = inf.defaultShardNote(); !n.empty()) out.notes.push_back(n);
    inf.run();
    inf.relateRemainingMasks();
    auto& rel = inf.relations();
    {
        // Where inference stopped (rank 0's first few): what a claim past them is proven without.
        int said = 0;
        for (int op : inf.stuck) {
            const auto& o = P.ops[static_cast<std::size_t>(op)];
            if (o.rank > 0 || said == 3) continue;
            ++said;
            std::string where = o.source >= 0 ? " at " + P.sources[static_cast<std::size_t>(o.source)].toString() : std::string();
            out.notes.push_back("no relation inferred for " + o.name + " (" + o.kind + " of " + o.torchTarget + ")" + where +
                                ": stages through it are larger, and a claim that needs a part it cannot state is not made");
        }
    }
    for (auto& n : inf.notes) out.notes.push_back(n);

    // Required results: the outputs both sides return at the same position. AOTAutograd's forward
    // graphs end with tensors saved for the backward, which differ between the two programs: there
    // (and only there) the results are the leading outputs named alike on every side, unless the
    // relations file says how many there are. Anywhere else a position one side lacks is unchecked.
    const auto& lout = L.outputs.at(0);
    std::string inconclusive;
    std::vector<std::string> whyUnchecked;  // each unchecked output's reason, said in the report
    auto note = [&](const std::string& why) {
        if (inconclusive.empty()) inconclusive = why;
        whyUnchecked.push_back(why);
    };
    std::size_t required = lout.size();
    bool countsDiffer = false;
    for (const auto& po : P.outputs) countsDiffer = countsDiffer || po.size() != lout.size();
    if (results >= 0) {
        required = static_cast<std::size_t>(results);
        for (std::size_t r = 0; r < P.outputs.size(); ++r)
            if (P.outputs[r].size() < required || lout.size() < required) {
                note("the relations file says the first " + std::to_string(results) + " outputs are results, but " +
                     (lout.size() < required ? std::string("the single device") : "rank " + std::to_string(r)) + " returns fewer");
                out.unchecked.push_back("the outputs past what every side returns");
                required = std::min({required, lout.size(), P.outputs[r].size()});
            }
    } else if (countsDiffer) {
        std::size_t shortest = lout.size();
        for (const auto& po : P.outputs) shortest = std::min(shortest, po.size());
        if (set.logical.phase == "fw") {
            for (const auto& po : P.outputs) {
                std::size_t k = 0;
                while (k < po.size() && k < lout.size() && po[k].node == lout[k].node) ++k;
                required = std::min(required, k);
            }
            out.notes.push_back("forward graphs: the single device returns " + std::to_string(lout.size()) +
                                " tensors and the ranks a different number: the first " + std::to_string(required) +
                                " (named alike on every side) are the results checked; the rest are taken to be tensors saved for the backward "
                                "(a relations file's \"results\" says how many results there are)");
        } else {
            required = shortest;
            note("the single device returns " + std::to_string(lout.size()) + " outputs and a rank another number: the positions past " +
                 std::to_string(shortest) + " cannot be compared");
            out.unchecked.push_back("outputs " + std::to_string(shortest) + " and after");
        }
    }

    struct Claim {
        int logical;
        std::vector<int> parallel;
        std::vector<Relation> rels;
        std::string what;
    };
    std::vector<Claim> claims;
    std::map<int, std::size_t> claimOf;  // logical tensor -> its claim
    for (std::size_t i = 0; i < required; ++i) {
        const auto& lo = lout[i];
        if (lo.node.empty()) continue;
        std::string what = "output " + std::to_string(i) + " (" + lo.node + ")";
        if (lo.tensor < 0) {
            // Equal constants on every side need no proof.
            bool same = !lo.constantCall.empty();
            for (const auto& po : P.outputs)
                if (po[i].constantCall != lo.constantCall) same = false;
            if (same) {
                out.outputs.push_back(what + ": the same constant (" + lo.constantCall + ") on every rank");
                continue;
            }
            if (lo.unsupported >= 0) note("cannot verify " + what + " yet: " + L.unsupported[static_cast<std::size_t>(lo.unsupported)].describe(L.sources));
            else note("cannot verify " + what + ": the single device's value is not a tensor");
            out.unchecked.push_back(what);
            continue;
        }
        const bool logicalInput = L.tensors[static_cast<std::size_t>(lo.tensor)].producer < 0;
        const auto& ls = L.tensors[static_cast<std::size_t>(lo.tensor)].shape;
        std::vector<int> ts;
        std::vector<Relation> rs;
        bool ok = true;
        int given = 0;
        for (int r = 0; r < P.ranks && ok; ++r) {
            const auto& po = P.outputs[static_cast<std::size_t>(r)][i];
            if (po.tensor < 0) {
                if (po.unsupported >= 0 && static_cast<std::size_t>(po.unsupported) < P.unsupported.size())
                    note("cannot verify " + what + " yet: " + P.unsupported[static_cast<std::size_t>(po.unsupported)].describe(P.sources));
                else note("cannot verify " + what + ": rank " + std::to_string(r) + " returns no tensor there");
                ok = false;
                break;
            }
            const auto& inferred = rel[static_cast<std::size_t>(po.tensor)];
            const bool holdsWhole = inferred && inferred->logical == lo.tensor && inferred->kind == Relation::Kind::Exact && inferred->coeff.isOne() && inferred->allPlain();
            if (const auto u = P.tensors[static_cast<std::size_t>(po.tensor)].unsupported; u >= 0) {
                // Made for a result without semantics (a collective whose input has none).
                note("cannot verify " + what + " yet: " + P.unsupported[static_cast<std::size_t>(u)].describe(P.sources));
                ok = false;
                break;
            }
            if (P.tensors[static_cast<std::size_t>(po.tensor)].producer < 0) {
                // A rank's input returned: what it holds is assumed, so it must be what is asked for.
                if (logicalInput && holdsWhole) {
                    ++given;
                    continue;
                }
                note("cannot verify " + what + ": rank " + std::to_string(r) + " returns its input " + P.tensors[static_cast<std::size_t>(po.tensor)].name +
                     ", which is not known to hold " + L.tensors[static_cast<std::size_t>(lo.tensor)].name);
                ok = false;
                break;
            }
            Relation want;
            if (holdsWhole) {
                want = *inferred;
            } else if (P.tensors[static_cast<std::size_t>(po.tensor)].shape == ls) {
                want.logical = lo.tensor;  // the whole result, as a replica
                want.dims = wholeDims(ls);
            } else {
                note("cannot tell which part of " + what + " rank " + std::to_string(r) + "'s " + P.tensors[static_cast<std::size_t>(po.tensor)].name +
                     " holds (its shape differs and no relation was inferred)");
                ok = false;
                break;
            }
            ts.push_back(po.tensor);
            rs.push_back(want);
        }
        if (!ok) {
            out.unchecked.push_back(what);
            continue;
        }
        if (ts.empty()) {
            out.outputs.push_back(what + ": an input, returned as given on every rank");
            continue;
        }
        auto [it, fresh] = claimOf.try_emplace(lo.tensor, claims.size());
        if (fresh) claims.push_back(Claim{lo.tensor, {}, {}, what});
        auto& c = claims[it->second];
        for (std::size_t k = 0; k < ts.size(); ++k) {
            // The same tensor returned twice is one copy; another tensor is another copy to prove.
            if (std::find(c.parallel.begin(), c.parallel.end(), ts[k]) != c.parallel.end()) continue;
            c.parallel.push_back(ts[k]);
            c.rels.push_back(rs[k]);
        }
        std::string how;
        for (std::size_t k = 0; k < ts.size(); ++k) {
            const auto& inferred = rel[static_cast<std::size_t>(ts[k])];
            how += (k ? ", " : "") + P.tensors[static_cast<std::size_t>(ts[k])].name + ": " +
                   (inferred && inferred->logical == lo.tensor ? describeRelation(*inferred, L) : "not related by inference");
        }
        out.outputs.push_back(what + ": required whole on every rank" + (given ? " (" + std::to_string(given) + " ranks return it as given)" : std::string()) +
                              "; inferred " + how);
    }
    if (claims.empty()) {
        if (!inconclusive.empty()) return fail(Verdict::Inconclusive, FailureKind::UnsupportedOperator, inconclusive + " (supported operators: docs/torch-graphs.md)");
        return fail(Verdict::Inconclusive, FailureKind::Inconclusive, "no result of the program can be claimed: nothing to verify");
    }

    // The parts of both programs the claims depend on.
    std::vector<int> lroots, proots;
    for (const auto& c : claims) {
        lroots.push_back(c.logical);
        proots.insert(proots.end(), c.parallel.begin(), c.parallel.end());
    }
    std::vector<char> lt, lo, pt, po;
    cone(L, lroots, lt, lo);
    cone(P, proots, pt, po);
    // The parallel inputs holding what the logical cone reads are written even where no parallel
    // op reads them: a program that ignores an input is then shown as such (dataflow_broken).
    for (std::size_t t = 0; t < P.tensors.size(); ++t)
        if (!pt[t] && P.tensors[t].producer < 0 && rel[t] && lt[static_cast<std::size_t>(rel[t]->logical)]) pt[t] = 1;
    // Inputs of the cones: graph inputs (and dropout masks) with relations; anything else is unsupported.
    auto unsupportedInput = [&](const LoweredProgram& prog, const std::vector<char>& ts) -> std::string {
        for (std::size_t t = 0; t < ts.size(); ++t) {
            if (!ts[t] || prog.tensors[t].producer >= 0) continue;
            if (prog.tensors[t].unsupported >= 0) return prog.unsupported[static_cast<std::size_t>(prog.tensors[t].unsupported)].describe(prog.sources);
        }
        return {};
    };
    if (auto u = unsupportedInput(P, pt); !u.empty()) return fail(Verdict::Inconclusive, FailureKind::UnsupportedOperator, "cannot verify the results yet: " + u);

    // Lineage records: claims, then every inferred relation inside the cones, grouped by the
    // parallel node they belong to (the same node on every rank).
    json lineage = json::array();
    std::set<int> inRecord;
    auto writeRecord = [&](int logical, const std::vector<int>& ts, const std::vector<Relation>& rs) -> bool {
        const auto& ls = L.tensors[static_cast<std::size_t>(logical)].shape;
        // Slices by box; each an Exact copy per tensor, or one copy summing the partial terms.
        std::map<std::pair<Dims, Dims>, std::vector<std::size_t>> byBox;
        for (std::size_t k = 0; k < ts.size(); ++k) {
            if (!rs[k].allPlain()) return false;  // a strided part: no box to write
            byBox[{rs[k].los(), rs[k].his()}].push_back(k);
        }
        std::int64_t covered = 0;
        json slices = json::array();
        for (const auto& [box, ks] : byBox) {
            std::int64_t vol = 1;
            json jb = json::array();
            for (std::size_t d = 0; d < box.first.size(); ++d) {
                vol *= box.second[d] - box.first[d];
                jb.push_back({box.first[d], box.second[d]});
            }
            covered += vol;
            json copies = json::array();
            auto term = [&](std::size_t k) {
                const auto& name = P.tensors[static_cast<std::size_t>(ts[k])].name;
                if (rs[k].coeff.isOne()) return json(name);
                return json{{"tensor", name}, {"coeff", rs[k].coeff.toString()}};
            };
            if (rs[ks[0]].kind == Relation::Kind::Partial) {
                std::vector<const Relation*> parts;
                json c = json::array();
                for (auto k : ks) {
                    parts.push_back(&rs[k]);
                    c.push_back(term(k));
                }
                if (!piecesTile(parts)) return false;
                copies.push_back(c);
            } else if (rs[ks[0]].kind == Relation::Kind::Exact) {
                for (auto k : ks) copies.push_back(json::array({term(k)}));
            } else {
                return false;
            }
            slices.push_back({{"box", jb}, {"copies", copies}});
        }
        // Distinct boxes tile the tensor when they are disjoint and cover it.
        if (covered != numel(ls)) return false;
        std::vector<std::pair<Dims, Dims>> boxes;
        for (const auto& [box, ks] : byBox) boxes.push_back(box);
        for (std::size_t a = 0; a < boxes.size(); ++a)
            for (std::size_t b = a + 1; b < boxes.size(); ++b) {
                bool overlap = true;
                for (std::size_t d = 0; d < boxes[a].first.size(); ++d)
                    if (boxes[a].second[d] <= boxes[b].first[d] || boxes[b].second[d] <= boxes[a].first[d]) overlap = false;
                if (overlap) return false;
            }
        for (int t : ts) inRecord.insert(t);
        lineage.push_back({{"logical", L.tensors[static_cast<std::size_t>(logical)].name}, {"slices", slices}});
        return true;
    };
    for (const auto& c : claims) {
        if (!writeRecord(c.logical, c.parallel, c.rels)) {
            return fail(Verdict::Inconclusive, FailureKind::Inconclusive,
                        "the parallel results of " + c.what + " do not tile " + L.tensors[static_cast<std::size_t>(c.logical)].name + ": cannot state what to prove");
        }
    }
    std::map<std::pair<int, std::string>, std::pair<std::vector<int>, std::vector<Relation>>> groups;
    for (std::size_t t = 0; t < P.tensors.size(); ++t) {
        if (!pt[t] || !rel[t] || inRecord.count(static_cast<int>(t))) continue;
        const auto& r = *rel[t];
        if (r.kind == Relation::Kind::PartialMax || !lt[static_cast<std::size_t>(r.logical)]) continue;
        // Inputs: one record per logical input (its parts may come from differently named inputs);
        // computed tensors: one per node (the same node on every rank).
        auto& g = groups[{r.logical, P.tensors[t].producer < 0 ? std::string() : baseName(P.tensors[t].name)}];
        g.first.push_back(static_cast<int>(t));
        g.second.push_back(r);
    }
    // Inputs first (assumptions), then the rest.
    std::set<int> relatedLogical;
    std::map<int, std::vector<const std::pair<std::vector<int>, std::vector<Relation>>*>> untiled;
    for (int pass = 0; pass < 2; ++pass)
        for (auto& [key, g] : groups) {
            const bool isInput = P.tensors[static_cast<std::size_t>(g.first[0])].producer < 0;
            if (isInput != (pass == 0)) continue;
            if (writeRecord(key.first, g.first, g.second)) {
                if (isInput) relatedLogical.insert(key.first);
            } else if (!isInput) {
                untiled[key.first].push_back(&g);
            }
        }
    // Nodes that hold a part each (the pieces of a fused projection: query, key and value parts of
    // one logical result) tile it together.
    for (const auto& [logical, gs] : untiled) {
        if (gs.size() < 2) continue;
        std::vector<int> ts;
        std::vector<Relation> rs;
        for (const auto* g : gs) {
            ts.insert(ts.end(), g->first.begin(), g->first.end());
            rs.insert(rs.end(), g->second.begin(), g->second.end());
        }
        writeRecord(logical, ts, rs);
    }
    // Every input the claims read needs a relation.
    for (std::size_t t = 0; t < L.tensors.size(); ++t)
        if (lt[t] && L.tensors[t].producer < 0 && !relatedLogical.count(static_cast<int>(t)))
            return fail(Verdict::Inconclusive, FailureKind::Inconclusive,
                        "cannot tell how the ranks hold the single device's input " + L.tensors[t].name +
                            " (no parallel input of its shape, or of its shape split evenly over the ranks, at its position)");
    for (std::size_t t = 0; t < P.tensors.size(); ++t)
        if (pt[t] && P.tensors[t].producer < 0 && !inRecord.count(static_cast<int>(t)))
            return fail(Verdict::Inconclusive, FailureKind::Inconclusive,
                        "cannot tell which part of the single device's inputs rank " + std::to_string(P.tensors[t].rank) + "'s input " + P.tensors[t].name + " holds");

    json plan = {{"format", "trainverify-plan"}, {"version", 1}};
    auto stem = [](const std::string& p) {
        auto s = p.substr(p.find_last_of('/') == std::string::npos ? 0 : p.find_last_of('/') + 1);
        if (auto dot = s.find('.'); dot != std::string::npos) s = s.substr(0, dot);
        return s;
    };
    plan["name"] = stem(logicalPath) + " over " + std::to_string(P.ranks) + " ranks";
    plan["description"] = "PyTorch graphs " + logicalPath + " (single device) and " + std::to_string(parallelPaths.size()) +
                          " rank graphs, lowered and related by trainverify (docs/torch-graphs.md)";
    plan["logical"] = graphJson(L, lt, lo, false);
    json par = graphJson(P, pt, po, true);
    par["mesh"] = {{"tp", P.ranks}};
    par["microbatches"] = 1;
    plan["parallel"] = par;
    plan["lineage"] = lineage;
    auto res = readPlanJson(plan);
    if (!res.ok()) {
        return fail(Verdict::Invalid, FailureKind::InvalidPlan,
                    "the graphs lower to an invalid plan (a shape that disagrees with its op?): " + (res.problems.empty() ? std::string() : res.problems[0].toString()));
    }
    out.planJson = std::move(plan);
    out.plan = std::move(res.plan);
    for (const auto& why : whyUnchecked) out.notes.push_back(why);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

}  // namespace

}  // namespace tv::torch
