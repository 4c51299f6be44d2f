#include "torch/torch_pair.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "io/plan_json.hpp"
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

TorchPairLoad loadTorchPair(const std::string& logicalPath, const std::vector<std::string>& parallelPaths) {
    const auto t0 = std::chrono::steady_clock::now();
    TorchPairLoad out;
    auto fail = [&](Verdict v, FailureKind kind, const std::string& msg) {
        out.report = VerifyReport{};
        out.report.verdict = v;
        Failure f;
        f.kind = kind;
        f.message = msg;
        out.report.failure = f;
        out.report.failures = {f};
        if (v == Verdict::Invalid) out.report.problems.push_back(PlanProblem{"", msg});
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
        for (const auto& a : side->assumptions) out.notes.push_back("assumed: " + a);
    // Vocabulary parts cover at least the logical vocabulary (the ids are assumed to lie in it).
    std::int64_t vocab = 0;
    for (const auto& o : L.ops) {
        if (o.kind == "embedding") vocab = std::max(vocab, L.tensors[static_cast<std::size_t>(o.inputs[1])].shape[0]);
        if (o.kind == "target_logit") vocab = std::max(vocab, L.tensors[static_cast<std::size_t>(o.inputs[0])].shape.back());
    }
    for (auto& o : P.ops) {
        if (!o.attrs.contains("parts")) continue;
        const auto width = o.kind == "embedding" ? P.tensors[static_cast<std::size_t>(o.inputs[1])].shape[0] : P.tensors[static_cast<std::size_t>(o.inputs[0])].shape.back();
        const auto need = (vocab + width - 1) / width;
        if (o.attrs["parts"].get<std::int64_t>() < need) o.attrs["parts"] = need;
    }

    LineageInference inf(L, P);
    inf.relateInputs();
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

    // Required results: the outputs both sides return at the same position (for AOTAutograd's
    // forward graphs, whose lists end with tensors saved for the backward, the leading ones named alike).
    const auto& lout = L.outputs.at(0);
    std::size_t required = lout.size();
    for (const auto& po : P.outputs) {
        if (po.size() == lout.size()) continue;
        std::size_t k = 0;
        while (k < po.size() && k < lout.size() && po[k].node == lout[k].node) ++k;
        required = std::min(required, k);
    }
    if (required < lout.size())
        out.notes.push_back("the single device returns " + std::to_string(lout.size()) + " tensors and the ranks a different number: the first " + std::to_string(required) +
                            " (named alike on every side) are the results checked; the rest are tensors saved for the backward");

    struct Claim {
        int logical;
        std::vector<int> parallel;
        std::vector<Relation> rels;
    };
    std::vector<Claim> claims;
    std::set<int> claimedLogical;
    std::string inconclusive;
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
            const auto& u = L.unsupported[static_cast<std::size_t>(lo.unsupported)];
            if (inconclusive.empty()) inconclusive = "cannot verify " + what + " yet: " + u.describe(L.sources);
            out.unchecked.push_back(what);
            continue;
        }
        if (L.tensors[static_cast<std::size_t>(lo.tensor)].producer < 0) {
            out.outputs.push_back(what + ": an input, returned as given");
            continue;
        }
        if (!claimedLogical.insert(lo.tensor).second) continue;
        Claim c;
        c.logical = lo.tensor;
        bool ok = true;
        for (int r = 0; r < P.ranks && ok; ++r) {
            const auto& po = P.outputs[static_cast<std::size_t>(r)][i];
            if (po.tensor < 0) {
                const auto& u = P.unsupported[static_cast<std::size_t>(po.unsupported)];
                if (inconclusive.empty()) inconclusive = "cannot verify " + what + " yet: " + u.describe(P.sources);
                ok = false;
                break;
            }
            Relation want;
            const auto& inferred = rel[static_cast<std::size_t>(po.tensor)];
            const auto& ls = L.tensors[static_cast<std::size_t>(lo.tensor)].shape;
            if (inferred && inferred->logical == lo.tensor && inferred->kind == Relation::Kind::Exact && inferred->coeff.isOne() && inferred->allPlain()) {
                want = *inferred;
            } else if (P.tensors[static_cast<std::size_t>(po.tensor)].shape == ls) {
                want.logical = lo.tensor;  // the whole result, as a replica
                want.dims = wholeDims(ls);
            } else {
                if (inconclusive.empty())
                    inconclusive = "cannot tell which part of " + what + " rank " + std::to_string(r) + "'s " + P.tensors[static_cast<std::size_t>(po.tensor)].name +
                                   " holds (its shape differs and no relation was inferred)";
                ok = false;
                break;
            }
            c.parallel.push_back(po.tensor);
            c.rels.push_back(want);
        }
        if (!ok) {
            out.unchecked.push_back(what);
            continue;
        }
        std::string how;
        for (std::size_t r = 0; r < c.parallel.size(); ++r) {
            const auto& inferred = rel[static_cast<std::size_t>(c.parallel[r])];
            how += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + ": " +
                   (inferred && inferred->logical == lo.tensor ? describeRelation(*inferred, L) : "not related by inference");
        }
        out.outputs.push_back(what + ": required whole on every rank; inferred " + how);
        claims.push_back(std::move(c));
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
                        "the parallel results of " + L.tensors[static_cast<std::size_t>(c.logical)].name + " do not tile it: cannot state what to prove");
        }
    }
    std::map<std::pair<int, std::string>, std::pair<std::vector<int>, std::vector<Relation>>> groups;
    for (std::size_t t = 0; t < P.tensors.size(); ++t) {
        if (!pt[t] || !rel[t] || inRecord.count(static_cast<int>(t))) continue;
        const auto& r = *rel[t];
        if (r.kind == Relation::Kind::PartialMax || !lt[static_cast<std::size_t>(r.logical)]) continue;
        auto& g = groups[{r.logical, baseName(P.tensors[t].name)}];
        g.first.push_back(static_cast<int>(t));
        g.second.push_back(r);
    }
    // Inputs first (assumptions), then the rest.
    std::set<int> relatedLogical;
    for (int pass = 0; pass < 2; ++pass)
        for (auto& [key, g] : groups) {
            const bool isInput = P.tensors[static_cast<std::size_t>(g.first[0])].producer < 0;
            if (isInput != (pass == 0)) continue;
            if (writeRecord(key.first, g.first, g.second) && isInput) relatedLogical.insert(key.first);
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
    if (!inconclusive.empty()) out.notes.push_back(inconclusive);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

}  // namespace tv::torch
