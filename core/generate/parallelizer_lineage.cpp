// The plan's lineage and logical members: a lineage record per version (every stage's copy of an
// input is one record), the boxes of the logical tensor its instances cover and how they make it
// up (copies on replicated axes, sums on partial ones, scaled by the coefficient); and the logical
// plan as the model holds it.
#include "generate/parallelizer_detail.hpp"

namespace tv::gen::detail {

std::vector<Parallelizer::LaneSlice> Parallelizer::laneSlices(const AxisState& a, const Shape& full) const {
    std::vector<LaneSlice> out;
    const int lanesListed = listedDp * listedMb;
    auto part = [&](int d, std::int64_t parts, std::int64_t i) {
        const auto n = full[static_cast<std::size_t>(d)] / parts;
        return std::tuple<int, std::int64_t, std::int64_t>{d, n * i, n * (i + 1)};
    };
    switch (a.st) {
        case St::Rep: {
            LaneSlice s;
            for (int kk = 0; kk < listedDp; ++kk) s.copies.push_back({kk});
            out.push_back(std::move(s));
            break;
        }
        case St::Partial: {
            LaneSlice s;
            s.copies.emplace_back();
            for (int l = 0; l < lanesListed; ++l) s.copies.back().push_back(l);
            out.push_back(std::move(s));
            break;
        }
        case St::Shard:
            for (int l = 0; l < lanesListed; ++l) out.push_back({{part(a.dim, L, laneBlock(l / listedMb, l % listedMb))}, {{l}}});
            break;
        case St::DpShard:
            for (int kk = 0; kk < listedDp; ++kk) out.push_back({{part(a.dim, C.dp, kk)}, {{kk}}});
            break;
        case St::EpShard:
            // Expert part j; copies on every replica holding it, or (ZeRO) each one's own part.
            // Stored once, member 0's part (its experts, and with ZeRO its group's part).
            for (int j = 0; j < (membersOnce ? 1 : C.ep); ++j) {
                if (a.dim2 >= 0) {
                    for (int u = 0; u < (membersOnce ? 1 : listedDp / C.ep); ++u)
                        out.push_back({{part(a.dim, C.ep, j), part(a.dim2, C.dp / C.ep, u)}, {{u * C.ep + j}}});
                    continue;
                }
                LaneSlice s{{part(a.dim, C.ep, j)}, {}};
                for (int u = 0; u < (membersOnce ? 1 : listedDp / C.ep); ++u) s.copies.push_back({u * C.ep + j});
                out.push_back(std::move(s));
            }
            break;
        case St::EpTokens:
            // Lane (k, m): expert part k mod ep, for its group's tokens at microbatch m.
            for (int l = 0; l < lanesListed; ++l) {
                const int kk = l / listedMb, m = l % listedMb;
                out.push_back({{part(a.dim, C.ep, kk % C.ep), part(a.dim2, L / C.ep, (kk / C.ep) * listedMb + m)}, {{l}}});
            }
            break;
        case St::EpPartial:
            // Expert part j: the sum over every lane holding it.
            for (int j = 0; j < (membersOnce ? 1 : C.ep); ++j) {
                LaneSlice s{{part(a.dim, C.ep, j)}, {{}}};
                for (int l = 0; l < lanesListed; ++l)
                    if ((l / listedMb) % C.ep == j) s.copies.back().push_back(l);
                out.push_back(std::move(s));
            }
            break;
        case St::EpSum: {
            // Each group's members add up; the groups hold copies.
            LaneSlice s;
            for (int kk = 0; kk < listedDp; kk += std::min(C.ep, listedDp)) s.copies.push_back(epGroupOf(kk));
            out.push_back(std::move(s));
            break;
        }
    }
    return out;
}

json Parallelizer::lineage() const {
    json records = json::array();
    std::vector<bool> initialDone(M.tensors.size(), false);
    for (std::size_t vi = 0; vi < versions.size(); ++vi) {
        const auto& v0 = versions[vi];
        std::vector<const Version*> group{&v0};
        if (v0.initial) {
            // Every stage's copy of an input is one record: the input's lineage, taken as given.
            if (initialDone[static_cast<std::size_t>(v0.logical)]) continue;
            initialDone[static_cast<std::size_t>(v0.logical)] = true;
            group.clear();
            for (int i : initialOf[static_cast<std::size_t>(v0.logical)]) group.push_back(&versions[static_cast<std::size_t>(i)]);
        }
        const auto& p = v0.pl;
        const auto& full = lt(v0.logical).shape;
        const int tpSlices = p.tp.st == St::Shard ? C.tp : 1;
        const int cpSlices = p.cp.st == St::Shard ? listedCp : 1;
        json slices = json::array();
        for (const auto& ls : laneSlices(p.lane, full))
          for (int cs = 0; cs < cpSlices; ++cs)
            for (int ts = 0; ts < tpSlices; ++ts) {
                json box = json::array();
                for (std::size_t d = 0; d < full.size(); ++d) {
                    std::int64_t lo = 0, hi = full[d];
                    for (const auto& [cd, clo, chi] : ls.cuts)
                        if (cd == static_cast<int>(d)) {
                            lo = clo;
                            hi = chi;
                        }
                    if (p.tp.st == St::Shard && p.tp.dim == static_cast<int>(d)) {
                        lo = full[d] / C.tp * ts;
                        hi = lo + full[d] / C.tp;
                    }
                    if (p.cp.st == St::Shard && p.cp.dim == static_cast<int>(d)) {
                        lo = full[d] / C.cp * cs;
                        hi = lo + full[d] / C.cp;
                    }
                    box.push_back({lo, hi});
                }
                // Which group members make copies (replicated axes) and which are summed (partial axes).
                std::vector<int> copyTp, termTp;
                if (p.tp.st == St::Shard) copyTp = {ts};
                else if (p.tp.st == St::Rep) for (int t = 0; t < C.tp; ++t) copyTp.push_back(t);
                if (p.tp.st == St::Partial) { copyTp = {-1}; for (int t = 0; t < C.tp; ++t) termTp.push_back(t); }
                else termTp = {-1};
                std::vector<int> copyCp, termCp;
                if (p.cp.st == St::Shard) copyCp = {cs};
                else if (p.cp.st == St::Rep) for (int c = 0; c < listedCp; ++c) copyCp.push_back(c);
                if (p.cp.st == St::Partial) { copyCp = {-1}; for (int c = 0; c < listedCp; ++c) termCp.push_back(c); }
                else termCp = {-1};
                json copies = json::array();
                for (const auto* v : group)
                    for (const auto& laneTerms : ls.copies)
                      for (int cc : copyCp)
                        for (int ct : copyTp) {
                            json terms = json::array();
                            for (int l : laneTerms)
                              for (int tc : termCp)
                                for (int tt : termTp) {
                                    int t = ct >= 0 ? ct : tt, c = cc >= 0 ? cc : tc;
                                    const auto& name = v->inst[static_cast<std::size_t>(l * G() + member(c, t))];
                                    if (p.coeff == Rational(1))
                                        terms.push_back(name);
                                    else
                                        terms.push_back(json{{"tensor", name}, {"coeff", p.coeff.toString()}});
                                }
                            copies.push_back(std::move(terms));
                        }
                slices.push_back(json{{"box", box}, {"copies", copies}});
            }
        json rec{{"logical", lt(v0.logical).name}, {"slices", slices}};
        if (compact()) {
            // How the record repeats in the other replicas (stored groups) and lanes.
            const auto& a = p.lane;
            if (a.st == St::Shard || a.st == St::DpShard) rec["replicas"] = json{{"split_dim", a.dim}};
            else if (a.st == St::EpTokens || (a.st == St::EpShard && a.dim2 >= 0)) rec["replicas"] = json{{"split_dim", a.dim2}};
            else rec["replicas"] = a.st == St::Partial || a.st == St::EpPartial ? "sum" : "copies";
        }
        if (membersOnce) {
            // How it repeats over the members of an expert-parallel group: the batch (Shard,
            // DpShard: inside the lane's part, member-major) or the experts split, summed, or copies.
            const auto& a = p.lane;
            if (a.st == St::Shard || a.st == St::DpShard || a.st == St::EpShard || a.st == St::EpTokens || a.st == St::EpPartial)
                rec["members"] = json{{"split_dim", a.dim}};
            else
                rec["members"] = a.st == St::Partial || a.st == St::EpSum ? "sum" : "copies";
        }
        if (cpMembersOnce) {
            // How it repeats over the cp members: split along the sequence, summed, or copies.
            const auto& a = p.cp;
            rec["members"] = a.st == St::Shard ? json{{"split_dim", a.dim}} : a.st == St::Partial ? json("sum") : json("copies");
        }
        records.push_back(std::move(rec));
    }
    return records;
}

json Parallelizer::logicalJson() const {
    std::vector<bool> used(M.tensors.size(), false);
    json ops = json::array();
    for (const auto& o : M.ops) {
        if (o.dead) continue;
        json j{{"id", o.name}, {"op", o.kind}, {"inputs", json::array()}, {"outputs", json::array()}};
        for (int t : o.inputs) {
            j["inputs"].push_back(lt(t).name);
            used[static_cast<std::size_t>(t)] = true;
        }
        for (int t : o.outputs) {
            j["outputs"].push_back(lt(t).name);
            used[static_cast<std::size_t>(t)] = true;
        }
        if (o.phase != Phase::Forward) j["phase"] = std::string(toString(o.phase));
        if (!o.attrs.empty()) j["attrs"] = o.attrs;
        ops.push_back(std::move(j));
    }
    json tensors = json::array();
    for (std::size_t t = 0; t < M.tensors.size(); ++t) {
        if (!used[t]) continue;
        const auto& x = M.tensors[t];
        json j{{"id", x.name}, {"shape", x.shape}, {"role", std::string(toString(x.role))}};
        if (x.dtype == DType::Int) j["dtype"] = "int";
        tensors.push_back(std::move(j));
    }
    return json{{"tensors", tensors}, {"ops", ops}};
}

}  // namespace tv::gen::detail
