// The plan's lineage and logical members: a lineage record per version (every stage's copy of an
// input is one record), the boxes of the logical tensor its instances cover and how they make it
// up (copies on replicated axes, sums on partial ones, scaled by the coefficient); and the logical
// plan as the model holds it.
#include "generate/parallelizer_detail.hpp"

namespace tv::gen::detail {

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
        const int laneSlices = p.lane.st == St::Shard ? listedDp * listedMb : p.lane.st == St::DpShard ? listedDp : 1;
        const int tpSlices = p.tp.st == St::Shard ? C.tp : 1;
        const int cpSlices = p.cp.st == St::Shard ? C.cp : 1;
        json slices = json::array();
        for (int ls = 0; ls < laneSlices; ++ls)
          for (int cs = 0; cs < cpSlices; ++cs)
            for (int ts = 0; ts < tpSlices; ++ts) {
                json box = json::array();
                for (std::size_t d = 0; d < full.size(); ++d) {
                    std::int64_t lo = 0, hi = full[d];
                    if (p.lane.st == St::Shard && p.lane.dim == static_cast<int>(d)) {
                        lo = full[d] / L * ls;
                        hi = lo + full[d] / L;
                    }
                    if (p.lane.st == St::DpShard && p.lane.dim == static_cast<int>(d)) {
                        lo = full[d] / C.dp * ls;
                        hi = lo + full[d] / C.dp;
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
                // Which (lane, t) instances make copies (replicated axes) and which are summed (partial axes).
                std::vector<int> copyLanes, termLanes, copyTp, termTp;
                if (p.lane.st == St::Shard || p.lane.st == St::DpShard) copyLanes = {ls};
                else if (p.lane.st == St::Rep) for (int l = 0; l < listedDp; ++l) copyLanes.push_back(l);
                if (p.lane.st == St::Partial) { copyLanes = {-1}; for (int l = 0; l < listedDp * listedMb; ++l) termLanes.push_back(l); }
                else termLanes = {-1};
                if (p.tp.st == St::Shard) copyTp = {ts};
                else if (p.tp.st == St::Rep) for (int t = 0; t < C.tp; ++t) copyTp.push_back(t);
                if (p.tp.st == St::Partial) { copyTp = {-1}; for (int t = 0; t < C.tp; ++t) termTp.push_back(t); }
                else termTp = {-1};
                std::vector<int> copyCp, termCp;
                if (p.cp.st == St::Shard) copyCp = {cs};
                else if (p.cp.st == St::Rep) for (int c = 0; c < C.cp; ++c) copyCp.push_back(c);
                if (p.cp.st == St::Partial) { copyCp = {-1}; for (int c = 0; c < C.cp; ++c) termCp.push_back(c); }
                else termCp = {-1};
                json copies = json::array();
                for (const auto* v : group)
                    for (int cl : copyLanes)
                      for (int cc : copyCp)
                        for (int ct : copyTp) {
                            json terms = json::array();
                            for (int tl : termLanes)
                              for (int tc : termCp)
                                for (int tt : termTp) {
                                    int l = cl >= 0 ? cl : tl, t = ct >= 0 ? ct : tt, c = cc >= 0 ? cc : tc;
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
            // How the record repeats in the other replicas.
            if (p.lane.st == St::Shard || p.lane.st == St::DpShard) rec["replicas"] = json{{"split_dim", p.lane.dim}};
            else rec["replicas"] = p.lane.st == St::Partial ? "sum" : "copies";
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
