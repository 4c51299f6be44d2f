// Reading the lineage: each record's logical tensor, its slices (boxes) and their copies (parallel
// tensors with coefficients), replica modes, and the check that the slices tile the logical tensor.

#include "io/plan_reader.hpp"

#include <algorithm>

#include "model/text.hpp"
#include "ops/registry.hpp"

namespace tv::plan_json_detail {

void Reader::readLineage(const json& lin) {
    auto& L = plan_->logical;
    auto& P = plan_->parallel;
    std::vector<std::uint32_t> seenIn(P.tensors.size(), kNone);
    for (std::size_t i = 0; i < lin.size(); ++i) {
        auto path = entryPath("/lineage", i);
        const auto& r = lin[i];
        if (!r.is_object()) {
            fail(path, "a lineage record must be an object");
            continue;
        }
        const bool memberPlan = plan_->replication.members > 1;
        if (r.contains("members") && !memberPlan) {
            fail(path + "/members", "\"members\" is for plans storing one member of each expert-parallel group (\"replicas\": {\"members\": N})");
            continue;
        }
        if (memberPlan) rejectUnknownKeys(r, path, {"logical", "slices", "replicas", "members"}, "lineage record");
        else rejectUnknownKeys(r, path, {"logical", "slices", "replicas"}, "lineage record");
        auto* ln = stringMember(r, "logical", path);
        auto* slices = arrayMember(r, "slices", path);
        if (!ln || !slices) continue;
        LineageRecord rec;
        rec.logical = L.findTensor(plan_->names.find(ln->get<std::string>()));
        if (rec.logical == kNone) {
            fail(path + "/logical", "dangling logical tensor id \"" + ln->get<std::string>() + "\"");
            continue;
        }
        std::string who = "lineage of \"" + ln->get<std::string>() + "\"";
        Shape full = plan_->shape(L, rec.logical);
        if (!readReplicaMode(r, path, who, full, rec)) continue;
        if (memberPlan && !readMemberMode(r, path, who, full, rec)) continue;
        auto ldtype = L.tensors[rec.logical].dtype;
        for (std::size_t s = 0; s < slices->size(); ++s) {
            auto sp = path + "/slices/" + std::to_string(s);
            const auto& sj = (*slices)[s];
            if (!sj.is_object()) {
                fail(sp, who + ": a slice must be an object");
                continue;
            }
            rejectUnknownKeys(sj, sp, {"box", "copies"}, "slice");
            LineageSlice slice;
            auto* box = arrayMember(sj, "box", sp);
            auto* copies = arrayMember(sj, "copies", sp);
            if (!box || !copies) continue;
            if (box->size() != full.size()) {
                fail(sp + "/box", who + ": box has " + std::to_string(box->size()) + " dims, the tensor has " + std::to_string(full.size()));
                continue;
            }
            bool boxOk = true;
            for (std::size_t d = 0; d < full.size(); ++d) {
                const auto& b = (*box)[d];
                if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer()) {
                    fail(sp + "/box/" + std::to_string(d), who + ": each box dim is [start, end]");
                    boxOk = false;
                    break;
                }
                auto lo = b[0].get<std::int64_t>(), hi = b[1].get<std::int64_t>();
                if (lo < 0 || hi > full[d] || lo >= hi) {
                    fail(sp + "/box/" + std::to_string(d), who + ": slice [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                                               ") is out of bounds for dim " + std::to_string(d) + " of size " +
                                                               std::to_string(full[d]));
                    boxOk = false;
                    break;
                }
                slice.box.lo.push_back(lo);
                slice.box.hi.push_back(hi);
            }
            if (!boxOk) continue;
            auto extent = slice.box.extent();
            if (copies->empty()) fail(sp + "/copies", who + ": a slice needs at least one copy");
            for (std::size_t c = 0; c < copies->size(); ++c) {
                auto cp = sp + "/copies/" + std::to_string(c);
                const auto& cj = (*copies)[c];
                if (!cj.is_array() || cj.empty()) {
                    fail(cp, who + ": a copy is a non-empty array of terms");
                    continue;
                }
                std::vector<LineageTerm> terms;
                for (std::size_t k = 0; k < cj.size(); ++k) {
                    auto tp = cp + "/" + std::to_string(k);
                    const auto& tj = cj[k];
                    std::string tname;
                    LineageTerm term;
                    if (tj.is_string()) {
                        tname = tj.get<std::string>();
                    } else if (tj.is_object() && tj.contains("tensor") && tj["tensor"].is_string()) {
                        rejectUnknownKeys(tj, tp, {"tensor", "coeff"}, "term");
                        tname = tj["tensor"].get<std::string>();
                        if (tj.contains("coeff")) {
                            const auto& cv = tj["coeff"];
                            std::optional<Rational> q;
                            if (cv.is_number_unsigned() && cv.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) q = std::nullopt;
                            else if (cv.is_number_integer()) q = Rational(cv.get<std::int64_t>());
                            else if (cv.is_string()) q = Rational::parse(cv.get<std::string>());
                            if (!q || q->isZero()) {
                                fail(tp + "/coeff", who + ": coeff must be a non-zero integer or a rational string like \"1/2\"");
                                continue;
                            }
                            term.coeff = *q;
                        }
                    } else {
                        fail(tp, who + ": a term is a tensor id or {\"tensor\": id, \"coeff\": \"p/q\"}");
                        continue;
                    }
                    term.tensor = P.findTensor(plan_->names.find(tname));
                    if (term.tensor == kNone) {
                        fail(tp, who + ": dangling parallel tensor id \"" + tname + "\"");
                        continue;
                    }
                    const auto& ps = plan_->shape(P, term.tensor);
                    if (ps != extent) {
                        fail(tp, who + ": parallel tensor \"" + tname + "\" has shape " + shapeToString(ps) +
                                     ", but the slice " + slice.box.toString() + " has shape " + shapeToString(extent));
                        continue;
                    }
                    if (P.tensors[term.tensor].dtype != ldtype) {
                        fail(tp, who + ": parallel tensor \"" + tname + "\" has dtype " + std::string(toString(P.tensors[term.tensor].dtype)) +
                                     ", the logical tensor has " + std::string(toString(ldtype)));
                        continue;
                    }
                    if (seenIn[term.tensor] != kNone) {
                        fail(tp, who + ": parallel tensor \"" + tname + "\" already appears in /lineage/" + std::to_string(seenIn[term.tensor]));
                        continue;
                    }
                    seenIn[term.tensor] = static_cast<std::uint32_t>(i);
                    terms.push_back(term);
                }
                if (ldtype == DType::Int && (terms.size() != 1 || !terms[0].coeff.isOne()))
                    fail(cp, who + ": copies of an int tensor are single tensors with coefficient 1");
                slice.copies.push_back(std::move(terms));
            }
            rec.slices.push_back(std::move(slice));
        }
        if (plan_->replication.microbatches > 1 && rec.replicas != ReplicaMode::None) {
            // Every tensor of a record repeats alike: once per lane, or once per replica.
            bool perLane = false, perReplica = false;
            for (const auto& sl : rec.slices)
                for (const auto& c : sl.copies)
                    for (const auto& t : c) (P.tensors[t.tensor].microbatch >= 0 ? perLane : perReplica) = true;
            if (perLane && perReplica) {
                fail(path + "/slices", who + ": with microbatches stored once, a record holds tensors of microbatch 0 or tensors of no "
                                           "microbatch, not both");
                continue;
            }
        }
        checkTiling(rec, path, who, full);
        plan_->lineage.push_back(std::move(rec));
    }
}

std::int32_t Reader::peekMicrobatch(const json& r) const {
    auto sl = r.find("slices");
    if (sl == r.end() || !sl->is_array() || sl->empty() || !(*sl)[0].is_object()) return -1;
    auto cp = (*sl)[0].find("copies");
    if (cp == (*sl)[0].end() || !cp->is_array() || cp->empty() || !(*cp)[0].is_array() || (*cp)[0].empty()) return -1;
    const auto& term = (*cp)[0][0];
    const json* name = term.is_string() ? &term : term.is_object() && term.contains("tensor") ? &term["tensor"] : nullptr;
    if (!name || !name->is_string()) return -1;
    auto t = plan_->parallel.findTensor(plan_->names.find(name->get<std::string>()));
    return t == kNone ? -1 : plan_->parallel.tensors[t].microbatch;
}

bool Reader::readReplicaMode(const json& r, const std::string& path, const std::string& who, Shape& full, LineageRecord& rec) {
    auto it = r.find("replicas");
    if (!plan_->replication.active()) {
        if (it != r.end()) {
            fail(path + "/replicas", who + ": \"replicas\" is for plans stored with replicas");
            return false;
        }
        return true;
    }
    const auto hint = "\"copies\", \"sum\" or {\"split_dim\": d}";
    if (it == r.end()) {
        fail(path, who + ": in a plan stored with replicas every record says how it repeats: \"replicas\": " + hint);
        return false;
    }
    if (it->is_string() && *it == "copies") {
        rec.replicas = ReplicaMode::Copies;
        return true;
    }
    if (it->is_string() && *it == "sum") {
        rec.replicas = ReplicaMode::Sum;
        return true;
    }
    if (it->is_object() && it->size() == 1 && it->contains("split_dim") && (*it)["split_dim"].is_number_integer()) {
        auto d = (*it)["split_dim"].get<std::int64_t>();
        // Tensors of a microbatch repeat in every lane (replica x microbatch), others in every replica.
        const auto D = plan_->replication.instances(peekMicrobatch(r));
        if (d < 0 || d >= static_cast<std::int64_t>(full.size())) {
            fail(path + "/replicas/split_dim", who + ": split_dim " + std::to_string(d) + " is not a dim of the tensor");
            return false;
        }
        if (full[static_cast<std::size_t>(d)] % D != 0) {
            fail(path + "/replicas/split_dim", who + ": dim " + std::to_string(d) + " of size " + std::to_string(full[static_cast<std::size_t>(d)]) +
                                                   " does not split into " + std::to_string(D) +
                                                   (plan_->replication.listedDp > 1 ? (D == plan_->replication.degree ? " stored groups" : " stored groups x microbatches")
                                                                                    : (D == plan_->replication.degree ? " replicas" : " replicas x microbatches")));
            return false;
        }
        full[static_cast<std::size_t>(d)] /= D;
        rec.replicas = ReplicaMode::Split;
        rec.splitDim = static_cast<std::int32_t>(d);
        return true;
    }
    fail(path + "/replicas", who + ": replicas must be " + std::string(hint));
    return false;
}

bool Reader::readMemberMode(const json& r, const std::string& path, const std::string& who, Shape& full, LineageRecord& rec) {
    const auto hint = "\"copies\", \"sum\" or {\"split_dim\": d}";
    auto it = r.find("members");
    if (it == r.end()) {
        fail(path, who + ": with members stored once, every record says how it repeats over the members: \"members\": " + hint);
        return false;
    }
    if (it->is_string() && (*it == "copies" || *it == "sum")) {
        rec.members = *it == "copies" ? ReplicaMode::Copies : ReplicaMode::Sum;
        return true;
    }
    if (it->is_object() && it->size() == 1 && it->contains("split_dim") && (*it)["split_dim"].is_number_integer()) {
        const auto d = (*it)["split_dim"].get<std::int64_t>();
        const auto N = plan_->replication.members;
        if (d < 0 || d >= static_cast<std::int64_t>(full.size())) {
            fail(path + "/members/split_dim", who + ": split_dim " + std::to_string(d) + " is not a dim of the record's logical tensor");
            return false;
        }
        // `full` is already the lane's part when the replicas split the same dim: the members'
        // parts lie inside it.
        auto& n = full[static_cast<std::size_t>(d)];
        if (n % N != 0) {
            fail(path + "/members/split_dim", who + ": dim " + std::to_string(d) + " of size " + std::to_string(n) + " does not split into " +
                                                  std::to_string(N) + " members");
            return false;
        }
        n /= N;
        rec.members = ReplicaMode::Split;
        rec.memberDim = static_cast<std::int32_t>(d);
        rec.memberStep = n;
        return true;
    }
    fail(path + "/members", who + ": members must be " + std::string(hint));
    return false;
}

void Reader::checkTiling(const LineageRecord& rec, const std::string& path, const std::string& who, const Shape& full) {
    if (rec.slices.empty()) {
        fail(path + "/slices", who + ": no slices");
        return;
    }
    __extension__ typedef unsigned __int128 u128;
    u128 volume = 0;
    for (std::size_t a = 0; a < rec.slices.size(); ++a) {
        u128 v = 1;
        for (auto e : rec.slices[a].box.extent()) v *= static_cast<u128>(e);
        volume += v;
        for (std::size_t b = 0; b < a; ++b) {
            const auto& x = rec.slices[a].box;
            const auto& y = rec.slices[b].box;
            bool overlap = true;
            for (std::size_t d = 0; d < full.size(); ++d)
                if (x.hi[d] <= y.lo[d] || y.hi[d] <= x.lo[d]) overlap = false;
            if (overlap) {
                fail(path + "/slices/" + std::to_string(a), who + ": slice " + x.toString() + " overlaps slice " + std::to_string(b) + " " + y.toString());
                return;
            }
        }
    }
    u128 total = 1;
    for (auto e : full) total *= static_cast<u128>(e);
    if (volume != total) fail(path + "/slices", who + ": the slices leave holes (they cover " + std::to_string(static_cast<unsigned long long>(volume)) +
                                                     " of " + std::to_string(static_cast<unsigned long long>(total)) + " elements)");
}

}  // namespace tv::plan_json_detail
