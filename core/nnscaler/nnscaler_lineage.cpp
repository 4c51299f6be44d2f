// The lineage alignment of the nnScaler mapping: once every program has run, each device's
// forward operators of each microbatch are aligned with a run of the logical plan's, and where a
// logical tensor meets its parallel instances (operands, results, incoming gradients, the initial
// reads, dropout masks) a lineage record is written when the instances make up whole values. It
// also makes the final claims (the loss, every weight gradient on every rank holding the weight)
// and the findings about data the parallel plan does not split as the logical batch.
#include "nnscaler/import_detail.hpp"

#include <algorithm>
#include <cctype>
#include <deque>

namespace tv::nnscaler::detail {

// ----- lineage -----

/// The box a parallel sub-tensor of lane (replica, mb) covers in the logical handle's
/// coordinates: the batch dimension (the one dimension where the full shapes differ, returned in
/// `batchDim`, -1 for none) is shifted by the lane's position. False if the two cannot be related.
bool Importer::logicalBox(const SubTensor& p, const SubTensor& l, int replica, int mb, std::vector<std::pair<std::int64_t, std::int64_t>>& box,
                          int& batchDim) {
    batchDim = -1;
    if (p.fullShape.size() != l.fullShape.size()) return false;
    int batch = -1;
    for (std::size_t d = 0; d < p.fullShape.size(); ++d)
        if (p.fullShape[d] != l.fullShape[d]) {
            if (batch >= 0) return false;
            batch = static_cast<int>(d);
        }
    box = p.box;
    if (batch >= 0) {
        const auto b = static_cast<std::size_t>(batch);
        const std::int64_t lanes = static_cast<std::int64_t>(dp) * nm;
        std::int64_t total = 0;
        if (__builtin_mul_overflow(lanes, p.fullShape[b], &total) || l.fullShape[b] != total) {
            if (!batchNoted_) note("the parallel plan's " + p.name + " has " + std::to_string(p.fullShape[b]) + " in dimension " + std::to_string(b) + " per microbatch; " +
                 std::to_string(dp) + " replica(s) x " + std::to_string(nm) + " microbatch(es) of it make " + std::to_string(total) +
                 ", but the logical plan's has " + std::to_string(l.fullShape[b]) + ": the lanes do not tile the logical batch (the first of the tensors affected)");
            batchNoted_ = true;
            return false;
        }
        const std::int64_t lane = static_cast<std::int64_t>(replica) * nm + std::max(mb, 0);
        box[b].first += lane * p.fullShape[b];
        box[b].second += lane * p.fullShape[b];
        batchDim = batch;
    }
    for (std::size_t d = 0; d < box.size(); ++d) {
        box[d].first -= l.box[d].first;
        box[d].second -= l.box[d].first;
        if (box[d].first < 0 || box[d].second > l.box[d].second - l.box[d].first) return false;
    }
    return true;
}

/// Appends the lineage record a site claims, leaving out parallel tensors an earlier record
/// already describes. Returns false (and writes nothing) when the site's parts do not make up
/// whole values.
///
/// With the replicas stored once (only replica 0's instances exist), the record says how the
/// other replicas repeat it: a tensor of the batch (its full shapes differ in one dim) holds
/// replica 0's part of that dim and replica k the part k along (`split_dim`); the reported loss
/// adds up over the replicas' lanes (`sum`); anything else (weights, their reduced gradients,
/// the loss seed, the causal mask) is the same on every replica (`copies`). These are exactly the
/// records the mapping wrote for every replica when it wrote them out (the lane's box shifted by
/// its replica, every replica's lanes added up, every replica's instance a copy).
bool Importer::addRecord(const Site& site) {
    const SubTensor l = adjusted(*site.lsub);
    if (l.parts != 1) return false;
    const bool laneSum = l.isLoss && !l.isGrad;
    // box -> lane -> parts -> part index -> handles
    using Parts = std::map<std::int64_t, std::map<std::int64_t, std::vector<Handle>>>;
    std::map<std::vector<std::pair<std::int64_t, std::int64_t>>, std::map<std::pair<int, int>, Parts>> groups;
    int split = -2;  // the batch dim of every instance (-1: none); -2 before the first
    for (const auto& in : site.instances) {
        if (claimed.count(pg.name(in.parallel))) continue;
        std::vector<std::pair<std::int64_t, std::int64_t>> box;
        int batchDim = -1;
        if (!logicalBox(adjusted(*in.psub), l, in.replica, in.mb, box, batchDim)) return false;
        if (split != -2 && split != batchDim) return false;  // instances split along different dims: no one repetition
        split = batchDim;
        if (in.psub->dtype.rfind("complex", 0) == 0) box.emplace_back(0, 2);
        groups[box][{in.replica, std::max(in.mb, 0)}][in.psub->parts][in.psub->part].push_back(in.parallel);
    }
    if (groups.empty()) return false;
    if (laneSum && groups.size() != 1) return false;
    auto laneCopies = [&](const Parts& parts, std::vector<std::vector<Handle>>& copies) {
        for (const auto& [n, byPart] : parts) {
            if (n == 1) {
                for (auto h : byPart.begin()->second) copies.push_back({h});
                continue;
            }
            if (static_cast<std::int64_t>(byPart.size()) != n) return false;
            std::size_t count = byPart.begin()->second.size();
            for (const auto& [i, hs] : byPart)
                if (hs.size() != count) return false;
            for (std::size_t c = 0; c < count; ++c) {
                std::vector<Handle> copy;
                for (const auto& [i, hs] : byPart) copy.push_back(hs[c]);
                copies.push_back(std::move(copy));
            }
        }
        return true;
    };
    json slices = json::array();
    std::int64_t covered = 0;
    for (const auto& [box, lanes] : groups) {
        std::vector<std::vector<Handle>> copies;
        if (laneSum) {
            std::vector<std::vector<std::vector<Handle>>> perLane;
            for (const auto& [lane, parts] : lanes) {
                perLane.emplace_back();
                if (!laneCopies(parts, perLane.back()) || perLane.back().empty()) return false;
            }
            // Every lane of the listed replicas: replica 0's, the others repeat it (`sum`).
            if (static_cast<std::int64_t>(perLane.size()) != static_cast<std::int64_t>(storedOnce() ? 1 : dp) * nm) return false;
            // As many copies as every lane has (a parallel tensor appears in one copy only).
            std::size_t fewest = perLane.front().size();
            for (const auto& c : perLane) fewest = std::min(fewest, c.size());
            for (std::size_t k = 0; k < fewest; ++k) {
                std::vector<Handle> copy;
                for (const auto& c : perLane) copy.insert(copy.end(), c[k].begin(), c[k].end());
                copies.push_back(std::move(copy));
            }
        } else {
            for (const auto& [lane, parts] : lanes)
                if (!laneCopies(parts, copies)) return false;
        }
        json jb = json::array();
        for (const auto& [a, b] : box) jb.push_back({a, b});
        json jc = json::array();
        for (const auto& copy : copies) {
            json terms = json::array();
            for (auto h : copy) terms.push_back(pg.name(h));
            jc.push_back(std::move(terms));
        }
        slices.push_back({{"box", std::move(jb)}, {"copies", std::move(jc)}});
        std::int64_t volume = 1;
        for (const auto& [a, b] : box) volume *= b - a;
        covered += volume;
    }
    // Only records that cover their logical tensor (disjoint boxes, so volumes add up); a split
    // record its replica 0's part, which the reader cuts the same way.
    const bool splitRecord = storedOnce() && !laneSum && split >= 0;
    if (covered != numel(lg.shape(site.logical)) / (splitRecord ? dp : 1)) return false;
    for (const auto& in : site.instances) claimed.insert(pg.name(in.parallel));
    json record = {{"logical", lg.name(site.logical)}, {"slices", std::move(slices)}};
    if (storedOnce()) record["replicas"] = laneSum ? json("sum") : splitRecord ? json{{"split_dim", split}} : json("copies");
    records.push_back(std::move(record));
    return true;
}

bool Importer::skippedInAlignment(const Cell& c) {
    return c.signature == "nnscaler.runtime.function.multiref" || c.signature == "nnscaler.runtime.function.identity";
}

int Importer::rankOfParallel(Handle h) const {
    const auto& t = pg.tensors[pg.handles[static_cast<std::size_t>(h)].tensorIndex];
    return t.contains("rank") ? t["rank"].get<int>() : -1;
}

/// Whether a parallel operator's einops-style annotation is the logical one's where the parallel
/// plan's lane holds one sample: nnScaler writes a dim of size 1 as `1^` (not partitionable), so
/// at a microbatch of one sample `a b (c 128^) -> a b c 128^` reads `1^ b (c 128^) -> 1^ b c 128^`.
/// Equal token by token, except that a logical dim name may stand as `1^` everywhere it occurs.
bool sameAnnotation(const std::string& l, const std::string& p) {
    if (l == p) return true;
    auto tokens = [](const std::string& a) {
        std::vector<std::string> t;
        for (std::size_t i = 0; i < a.size();) {
            const auto c = static_cast<unsigned char>(a[i]);
            if (std::isspace(c)) { ++i; continue; }
            std::size_t j = i;
            if (std::isalnum(c) || c == '_') {
                while (j < a.size() && (std::isalnum(static_cast<unsigned char>(a[j])) || a[j] == '_')) ++j;
                if (j < a.size() && a[j] == '^') ++j;
            } else {
                j = i + 1;
                if (c == '-' && j < a.size() && a[j] == '>') ++j;
            }
            t.push_back(a.substr(i, j - i));
            i = j;
        }
        return t;
    };
    const auto lt = tokens(l), pt = tokens(p);
    if (lt.size() != pt.size()) return false;
    auto isName = [](const std::string& t) { return !t.empty() && (std::isalpha(static_cast<unsigned char>(t[0])) || t[0] == '_') && t.back() != '^'; };
    std::map<std::string, bool> one;  // logical dim name -> written as 1^ in the parallel annotation
    for (std::size_t i = 0; i < lt.size(); ++i) {
        const bool asOne = lt[i] != pt[i];
        if (asOne && !(isName(lt[i]) && pt[i] == "1^")) return false;
        if (!isName(lt[i])) continue;
        auto [it, fresh] = one.emplace(lt[i], asOne);
        if (!fresh && it->second != asOne) return false;
    }
    return true;
}

bool Importer::sameOperator(const Cell& l, const Cell& p) const {
    if (canonicalModelSignature(l.signature) != canonicalModelSignature(p.signature) || !sameAnnotation(l.annotation, p.annotation) ||
        l.inputs.size() != p.inputs.size() || l.outputs.size() != p.outputs.size())
        return false;
    for (std::size_t k = 0; k < l.inputs.size(); ++k) {
        const auto& a = l.inputs[k];
        const auto& b = p.inputs[k];
        if ((a.tensor >= 0) != (b.tensor >= 0)) return false;
        if (a.tensor < 0) continue;
        const auto& ta = L.tensors.at(a.tensor);
        const auto& tb = P.tensors.at(b.tensor);
        // Weights keep their ids across the two files; a weight read through a multiref
        // (a new full tensor of the same name) keeps its name.
        if (ta.isParameter() && (tb.isParameter() ? ta.fullId != tb.fullId : ta.name != tb.name)) return false;
        if (tb.isParameter() && !ta.isParameter()) return false;
    }
    return true;
}

void Importer::buildLineage() {
    const int ldev = L.programs.begin()->first;
    std::vector<const Cell*> lf;
    for (const auto& c : L.programs.at(ldev))
        if (c.kind == CellKind::Forward && !skippedInAlignment(c)) lf.push_back(&c);
    std::map<std::int64_t, const Cell*> logicalCell;
    for (const auto& c : L.programs.at(ldev)) logicalCell[c.id] = &c;
    // Align each device's forward operators of each microbatch with a run of the logical ones.
    std::map<std::pair<int, std::int64_t>, std::map<int, const Cell*>> aligned;  // (device, cell) -> mb -> logical cell
    for (const auto& [d, cells] : P.programs) {
        std::map<int, std::vector<const Cell*>> seqs;
        for (const auto& c : cells)
            if (c.kind == CellKind::Forward && !skippedInAlignment(c)) seqs[c.microbatch].push_back(&c);
        for (const auto& [mb, seq] : seqs) {
            std::vector<std::size_t> found;
            for (std::size_t o = 0; o + seq.size() <= lf.size(); ++o) {
                bool ok = true;
                for (std::size_t i = 0; i < seq.size() && ok; ++i) ok = sameOperator(*lf[o + i], *seq[i]);
                if (ok) found.push_back(o);
            }
            if (found.size() != 1) {
                note("device " + std::to_string(d) + ", microbatch " + std::to_string(mb) + ": its " + std::to_string(seq.size()) + " forward operators " +
                     (found.empty() ? "match no run of the logical plan's" : "match several runs of the logical plan's") +
                     "; only the loss and the weight gradients are checked for them");
                continue;
            }
            for (std::size_t i = 0; i < seq.size(); ++i) aligned[{d, seq[i]->id}][mb] = lf[found[0] + i];
        }
    }
    // Sites: where a logical tensor and its parallel instances meet.
    std::map<std::tuple<int, std::int64_t, int, int>, Site> sites;  // (logical order, logical cell, kind, position)
    std::map<std::int64_t, int> order;
    {
        int k = 0;
        for (const auto& c : L.programs.at(ldev)) order[c.id] = k++;
    }
    // The copies a logical multiref (or nnScaler identity) makes are one value: a site meeting a
    // copy claims the copied tensor itself. The parallel plan may read another copy than the
    // logical plan does at the same place (nnScaler's multirefs are per device: the pipeline
    // stage after a split sends the copy its norm read, where the logical residual reads a
    // sibling copy); a claim on the sibling would cut a stage whose parallel side reads a tensor
    // the logical side cannot reach (a false dataflow_broken). Exact: an identity's output
    // equals its input.
    std::map<Handle, Handle> copied;  // a copy -> what it copies
    for (const auto& [key, low] : lowered) {
        if (std::get<0>(key) >= 0 || !skippedInAlignment(*low.cell) || low.inputs.empty() || low.inputs[0] < 0) continue;
        for (auto out : low.outputs)
            if (out >= 0 && lg.shape(out) == lg.shape(low.inputs[0])) copied[out] = low.inputs[0];
    }
    // Only to a tensor an op computes: a record of a given tensor (a weight, the data, a mask)
    // whose parallel tensors are given too would be an assumption, never proven.
    auto original = [&](Handle h) {
        Handle o = h;
        for (std::size_t hops = 0; hops <= copied.size(); ++hops) {
            auto it = copied.find(o);
            if (it == copied.end()) break;
            o = it->second;
        }
        return lg.handles[static_cast<std::size_t>(o)].producerOp >= 0 ? o : h;
    };
    auto addSite = [&](const Cell& lc, int kind, int pos, Handle lh, const SubTensor& lsub, Handle ph, const SubTensor& psub, int replica, int mb) {
        if (lh < 0 || ph < 0) return;
        lh = original(lh);
        auto& site = sites[{order[lc.id], lc.id, kind, pos}];
        site.logical = lh;
        site.lsub = &lsub;
        site.instances.push_back({ph, &psub, replica, mb});
    };
    for (const auto& [key, low] : lowered) {
        auto [rank, cellId, mb] = key;
        if (rank < 0) continue;
        const int d = rank % devices, replica = rank / devices;
        auto al = aligned.find({d, cellId});
        if (al == aligned.end()) continue;
        auto am = al->second.find(mb);
        if (am == al->second.end()) continue;
        const Cell& lc = *am->second;
        const Lowered& ll = lowered.at({-1, lc.id, 0});
        const Cell& pc = *low.cell;
        for (std::size_t k = 0; k < pc.inputs.size(); ++k)
            if (pc.inputs[k].tensor >= 0)
                addSite(lc, 0, static_cast<int>(k), ll.inputs[k], L.tensors.at(lc.inputs[k].tensor), low.inputs[k], P.tensors.at(pc.inputs[k].tensor), replica, mb);
        for (std::size_t k = 0; k < pc.outputs.size(); ++k)
            addSite(lc, 1, static_cast<int>(k), ll.outputs[k], L.tensors.at(lc.outputs[k].tensor), low.outputs[k], P.tensors.at(pc.outputs[k].tensor), replica, mb);
    }
    for (const auto& [key, grads] : incoming) {
        auto [rank, cellId, mb] = key;
        if (rank < 0) continue;
        const int d = rank % devices, replica = rank / devices;
        const Cell* bw = nullptr;
        for (const auto& c : P.programs.at(d))
            if (c.id == cellId) { bw = &c; break; }
        if (!bw) continue;
        auto al = aligned.find({d, bw->mirror});
        if (al == aligned.end()) continue;
        auto am = al->second.find(mb);
        if (am == al->second.end()) continue;
        const Cell& lfc = *am->second;
        auto lin = incoming.find({-1, lfc.mirror, 0});
        if (lin == incoming.end()) continue;
        const Cell& pfc = *lowered.at({rank, bw->mirror, mb}).cell;
        for (std::size_t k = 0; k < grads.size() && k < lin->second.size(); ++k) {
            if (grads[k] < 0 || lin->second[k] < 0) continue;
            auto pg_ = pfc.outputs[k].grad, lg_ = lfc.outputs[k].grad;
            if (pg_ < 0 || lg_ < 0) continue;
            addSite(*logicalCell.at(lfc.mirror), 2, static_cast<int>(k), lin->second[k], L.tensors.at(lg_), grads[k], P.tensors.at(pg_), replica, mb);
        }
    }
    // Initial records: inputs, weights, buffers and the loss seed.
    std::vector<Site> initial;
    std::map<std::pair<int, std::int64_t>, std::size_t> initialIndex;  // (kind, key) -> site
    auto logicalInitial = [&](const InitialRead& pr) -> const InitialRead* {
        for (const auto& lr : initialReads) {
            if (lr.rank >= 0) continue;
            if (!pr.constant.empty() || !lr.constant.empty()) {
                if (pr.constant == lr.constant) return &lr;
                continue;
            }
            if (pr.dataOutput >= 0 ? lr.dataOutput == pr.dataOutput
                                   : (pr.sub->isAttr ? lr.sub->isAttr && lr.sub->fullId == pr.sub->fullId
                                                     : lr.sub->isGrad && lr.sub->isLoss && pr.sub->isGrad && pr.sub->isLoss))
                return &lr;
        }
        return nullptr;
    };
    for (const auto& pr : initialReads) {
        if (pr.rank < 0) continue;
        const InitialRead* lr = logicalInitial(pr);
        if (!lr) {
            note("parallel input " + pr.sub->name + " (sub-tensor " + std::to_string(pr.sub->id) + ") has no counterpart in the logical plan");
            continue;
        }
        auto [it, inserted] = initialIndex.try_emplace({0, lr->handle}, initial.size());
        if (inserted) initial.push_back(Site{lr->handle, lr->sub, {}});
        initial[it->second].instances.push_back({pr.handle, pr.sub, pr.rank / devices, pr.mb});
    }
    // Dropout masks: each aligned execution's mask is its part of the logical operator's.
    std::deque<SubTensor> maskSubs;
    std::map<Handle, std::size_t> maskSite;
    for (const auto& [key, low] : lowered) {
        auto [rank, cellId, mb] = key;
        if (rank < 0 || low.masks.empty()) continue;
        const int d = rank % devices, replica = rank / devices;
        auto al = aligned.find({d, cellId});
        if (al == aligned.end() || !al->second.count(mb)) {
            note("the dropout masks of operator #" + std::to_string(cellId) + " on rank " + std::to_string(rank) + " cannot be related to the logical plan's");
            continue;
        }
        const Lowered& ll = lowered.at({-1, al->second.at(mb)->id, 0});
        for (std::size_t k = 0; k < low.masks.size() && k < ll.masks.size(); ++k) {
            auto [it, inserted] = maskSite.try_emplace(ll.masks[k], initial.size());
            if (inserted) {
                maskSubs.push_back(ll.maskParts[k]);
                initial.push_back(Site{ll.masks[k], &maskSubs.back(), {}});
            }
            maskSubs.push_back(low.maskParts[k]);
            initial[it->second].instances.push_back({low.masks[k], &maskSubs.back(), replica, mb});
        }
    }
    // The data: every lane's batch must be its own part of the logical batch.
    std::set<Handle> dataHandles;
    for (const auto& r : initialReads)
        if (r.rank < 0 && r.dataOutput >= 0) dataHandles.insert(r.handle);
    const std::int64_t lanes = static_cast<std::int64_t>(dp) * nm;
    for (const auto& site : initial) {
        if (!dataHandles.count(site.logical) || !result.findings.empty()) continue;
        for (const auto& in : site.instances) {
            const auto& p = *in.psub;
            const auto& l = *site.lsub;
            std::vector<std::size_t> differ;
            for (std::size_t d = 0; d < p.fullShape.size() && d < l.fullShape.size(); ++d)
                if (p.fullShape[d] != l.fullShape[d]) differ.push_back(d);
            std::int64_t total = 0;
            const bool tiles = p.fullShape.size() == l.fullShape.size() &&
                               (differ.empty() ? lanes == 1
                                               : differ.size() == 1 && !__builtin_mul_overflow(lanes, p.fullShape[differ[0]], &total) &&
                                                     total == l.fullShape[differ[0]]);
            if (tiles) continue;
            MappingFinding f;
            f.logicalTensor = lg.name(site.logical);
            f.parallelTensor = pg.name(in.parallel);
            f.rank = rankOfParallel(in.parallel);
            f.microbatch = in.mb;
            const std::string lanesText = std::to_string(dp) + " data-parallel replica(s) x " + std::to_string(nm) + " microbatch(es)";
            if (differ.size() == 1 && p.fullShape.size() == l.fullShape.size() && !__builtin_mul_overflow(lanes, p.fullShape[differ[0]], &total))
                f.message = "the parallel plan processes " + std::to_string(total) + " samples per step (" + lanesText + " x " +
                            std::to_string(p.fullShape[differ[0]]) + " in dimension " + std::to_string(differ[0]) + " of " + p.name +
                            ") where the logical plan processes " + std::to_string(l.fullShape[differ[0]]) +
                            ": its data loaders do not split the logical batch, so it does not compute the logical training step";
            else if (differ.empty())
                f.message = "each of the parallel plan's " + std::to_string(lanes) + " lanes (" + lanesText + ") loads " + p.name + " whole, " +
                            shapeText(l.fullShape) + " as the logical plan does: it processes " + std::to_string(lanes) +
                            " times the logical batch per step, so it does not compute the logical training step";
            else
                f.message = "the parallel plan's " + p.name + " is " + shapeText(p.fullShape) + " per microbatch, which does not split the logical " +
                            shapeText(l.fullShape) + " into " + lanesText + ": it does not compute the logical training step";
            result.findings.push_back(std::move(f));
            break;
        }
    }
    for (const auto& site : initial)
        if (!addRecord(site))
            note("the inputs of logical tensor " + lg.name(site.logical) + " do not make up whole values; they are not related to it");
    for (const auto& [key, site] : sites) addRecord(site);
    // The loss each lane reports: every full-valued loss sub-tensor a rank holds at the end of
    // its step (the all-reduce over the tensor-parallel parts, a pipeline's broadcast of it). The
    // lanes' losses add up to the logical loss, like the parts above; claimed here, a lane that
    // reports a partial loss (a forward all-reduce left out) is caught, where the parts alone
    // would only check the gradients.
    {
        Site lossSite;
        for (const auto& [key, low] : lowered) {
            if (std::get<0>(key) >= 0 || lossSite.logical >= 0) continue;
            for (std::size_t k = 0; k < low.cell->outputs.size() && lossSite.logical < 0; ++k) {
                const auto& t = L.tensors.at(low.cell->outputs[k].tensor);
                if (t.isLoss && !t.isGrad && low.outputs[k] >= 0) {
                    lossSite.logical = low.outputs[k];
                    lossSite.lsub = &t;
                }
            }
        }
        if (lossSite.logical >= 0) {
            bool anyWhole = false;
            for (const auto& [key, h] : state) {
                auto [rank, id, mb] = key;
                if (rank < 0) continue;
                const auto& t = P.tensors.at(id);
                if (!t.isLoss || t.isGrad || t.parts != 1) continue;
                anyWhole = true;
                if (!claimed.count(pg.name(h))) lossSite.instances.push_back({h, &t, rank / devices, mb});
            }
            if (!anyWhole)
                result.unchecked.push_back("the loss: no rank of the parallel plan holds the whole loss it reports (only parts of it; is the all-reduce of the loss missing?)");
            if (!lossSite.instances.empty() && !addRecord(lossSite))
                result.unchecked.push_back("the loss the parallel plan's ranks report (" + std::to_string(lossSite.instances.size()) +
                                           " full-valued copies) does not make up one copy per lane: it could not be related to the logical loss");
        }
    }
    // With the replicas stored once: each weight's gradient before its reducers is the sum over
    // every replica of what its devices accumulated (`sum`). Each reducer of the weight is one
    // copy of its box: a weight held whole on every tensor-parallel rank has one reducer per
    // rank, each summing that rank's gradient over the replicas. This is exactly what the final
    // claims say of the reducers' outputs, so it adds no claim a correct plan fails; it lets the
    // stage that computes the gradient be proven from replica 0 (docs/soundness.md §5) and
    // leaves the reducer alone written out. A weight whose reducers do not tile it box by box,
    // read one gradient twice or read another reducer's output gets no such record: its final
    // claims are proven written out as before.
    if (storedOnce()) {
        using Box = std::vector<std::pair<std::int64_t, std::int64_t>>;
        std::map<std::int64_t, std::vector<const Collective*>> byWeight;  // logical weight full id -> reducers
        std::set<std::string> reduced;                                    // every reducer's outputs
        for (const auto& [key, col] : collectives) {
            if (!col.acrossReplicas || !col.weight) continue;
            byWeight[col.weight->fullId].push_back(&col);
            for (const auto& [rank, h] : col.out) reduced.insert(pg.name(h));
        }
        for (const auto& [fullId, cols] : byWeight) {
            const InitialRead* lw = nullptr;
            for (const auto& r : initialReads)
                if (r.rank < 0 && r.sub->isParameter() && r.sub->fullId == fullId && logicalGradOf.count(fullId)) lw = &r;
            if (!lw) continue;
            auto lg_ = gradBuffers.find({-1, logicalGradOf.at(fullId), boxStart(*lw->sub)});
            if (lg_ == gradBuffers.end()) continue;
            const SubTensor l = adjusted(*lw->sub);
            std::map<Box, json> copies;
            std::set<std::string> terms;
            bool ok = true;
            for (const auto* col : cols) {
                Box box;
                int batchDim = -1;
                if (!col->weightsAgree || !logicalBox(adjusted(*col->weight), l, 0, 0, box, batchDim) || batchDim >= 0 || col->in.empty()) {
                    ok = false;
                    break;
                }
                json copy = json::array();
                for (const auto& [rank, h] : col->in) {
                    const std::string name = pg.name(h);
                    if (reduced.count(name) || !terms.insert(name).second) ok = false;
                    copy.push_back(name);
                }
                copies[box].push_back(std::move(copy));
            }
            if (!ok) continue;
            // The boxes must tile the gradient: pairwise disjoint, their volumes adding up to it.
            std::int64_t covered = 0;
            for (auto i = copies.begin(); i != copies.end() && ok; ++i) {
                std::int64_t volume = 1;
                for (const auto& [lo, hi] : i->first) volume *= hi - lo;
                covered += volume;
                for (auto j = std::next(i); j != copies.end() && ok; ++j) {
                    bool meet = i->first.size() == j->first.size();
                    for (std::size_t d = 0; meet && d < i->first.size(); ++d)
                        meet = i->first[d].first < j->first[d].second && j->first[d].first < i->first[d].second;
                    if (meet) ok = false;
                }
            }
            if (!ok || covered != numel(lg.shape(lg_->second))) continue;
            json slices = json::array();
            for (auto& [box, cs] : copies) {
                json jb = json::array();
                for (const auto& [lo, hi] : box) jb.push_back({lo, hi});
                slices.push_back({{"box", std::move(jb)}, {"copies", std::move(cs)}});
            }
            records.push_back({{"logical", lg.name(lg_->second)}, {"replicas", "sum"}, {"slices", std::move(slices)}});
        }
    }
    // Final records: every weight gradient, on every rank holding the weight.
    for (const auto& [key, lh] : gradBuffers) {
        auto [rank, gradFull, box] = key;
        if (rank >= 0) continue;
        // The logical weight whose gradient this is.
        const InitialRead* lw = nullptr;
        for (const auto& r : initialReads)
            if (r.rank < 0 && r.sub->isParameter() && logicalGradOf.count(r.sub->fullId) && logicalGradOf.at(r.sub->fullId) == gradFull) lw = &r;
        if (!lw) continue;
        claimedGradients.insert(lw->sub->fullId);
        Site site{lh, lw->sub, {}};
        for (const auto& r : initialReads) {
            if (r.rank < 0 || !r.sub->isParameter() || r.sub->fullId != lw->sub->fullId) continue;
            auto it = gradBuffers.find({r.rank, gradFull, boxStart(*r.sub)});
            Handle h;
            if (it != gradBuffers.end()) h = it->second;
            else {
                note("rank " + std::to_string(r.rank) + " holds weight " + r.sub->name + " but no op writes its gradient");
                h = pg.tensor(tensorBase(*r.sub) + ".grad-missing@r" + std::to_string(r.rank), shapeOf(*r.sub), "gradient", false, r.rank, -1);
            }
            site.instances.push_back({h, r.sub, r.rank / devices, -1});
        }
        if (site.instances.empty()) {
            result.unchecked.push_back("no rank of the parallel plan holds weight " + lw->sub->name);
            continue;
        }
        // The gradient tensors stand in for the weight's sub-tensors (same boxes).
        if (!addRecord(site)) result.unchecked.push_back("the gradient of weight " + lw->sub->name + " could not be related to the parallel plan's");
    }
    // The final claims must all be there: the loss, and the gradient of every weight the
    // logical step trains. What the mapping could not claim leaves the verdict inconclusive.
    for (const auto& r : initialReads)
        if (r.rank < 0 && r.sub->isParameter() && logicalGradOf.count(r.sub->fullId) && !claimedGradients.count(r.sub->fullId))
            result.unchecked.push_back("the gradient of weight " + r.sub->name + " has no counterpart in the parallel plan");
    bool lossClaimed = false, hasLoss = false;
    for (const auto& [key, low] : lowered) {
        if (std::get<0>(key) >= 0) continue;
        for (std::size_t k = 0; k < low.cell->outputs.size(); ++k) {
            const auto& t = L.tensors.at(low.cell->outputs[k].tensor);
            if (!t.isLoss || t.isGrad) continue;
            hasLoss = true;
            for (const auto& rec : records) lossClaimed = lossClaimed || rec["logical"] == lg.name(low.outputs[k]);
        }
    }
    if (hasLoss && !lossClaimed) result.unchecked.push_back("the loss could not be related to the parallel plan's");
}

}  // namespace tv::nnscaler::detail
