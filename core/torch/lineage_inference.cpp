#include "torch/lineage_inference.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace tv::torch {

namespace {

/// Adjacent factors that are together one range become one factor (an inner factor held whole,
/// or an outer one held at a single index).
void simplify(FactoredDim& d) {
    // Size-1 factors say nothing.
    if (d.size() > 1) d.erase(std::remove_if(d.begin(), d.end(), [](const Factor& f) { return f.size == 1; }), d.end());
    if (d.empty()) d.push_back(Factor{1, 0, 1});
    bool merged = true;
    while (merged && d.size() > 1) {
        merged = false;
        for (std::size_t i = 0; i + 1 < d.size(); ++i) {
            const auto& o = d[i];
            const auto& in = d[i + 1];
            Factor m;
            m.size = o.size * in.size;
            if (in.full()) {
                m.lo = o.lo * in.size;
                m.hi = o.hi * in.size;
            } else if (o.hi - o.lo == 1) {
                m.lo = o.lo * in.size + in.lo;
                m.hi = o.lo * in.size + in.hi;
            } else {
                continue;
            }
            d[i] = m;
            d.erase(d.begin() + static_cast<std::ptrdiff_t>(i) + 1);
            merged = true;
            break;
        }
    }
}

/// A flat range [a, b) of a row-major grid of `sizes` as a box, if it is one.
std::optional<std::pair<Dims, Dims>> boxOfRange(std::int64_t a, std::int64_t b, const Dims& sizes) {
    const std::size_t k = sizes.size();
    for (std::size_t j = 0; j < k; ++j) {
        std::int64_t q = 1;
        for (std::size_t t = j + 1; t < k; ++t) q *= sizes[t];
        if (a % q || b % q) continue;
        const auto A = a / q, B = b / q;
        if (A / sizes[j] != (B - 1) / sizes[j]) continue;
        Dims lo(k), hi(k);
        auto lead = A / sizes[j];
        for (std::size_t t = j; t-- > 0;) {
            lo[t] = lead % sizes[t];
            hi[t] = lo[t] + 1;
            lead /= sizes[t];
        }
        lo[j] = A % sizes[j];
        hi[j] = (B - 1) % sizes[j] + 1;
        for (std::size_t t = j + 1; t < k; ++t) {
            lo[t] = 0;
            hi[t] = sizes[t];
        }
        return std::make_pair(lo, hi);
    }
    return std::nullopt;
}

bool isLinearUnary(const std::string& k) { return k == "neg" || k == "mul_scalar" || k == "div_sqrt" || k == "identity"; }
bool isElementwise(const std::string& k) {
    static const std::set<std::string> e = {"add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "silu", "erf",
                                            "gelu", "add_scalar", "mul_scalar", "pow", "dropout", "gelu_backward", "silu_backward", "relu_backward",
                                            "sigmoid_backward", "tanh_backward", "erf_backward", "identity", "div_sqrt", "trunc"};
    return e.count(k) > 0;
}
bool isUnaryBackward(const std::string& k) {
    return k == "gelu_backward" || k == "silu_backward" || k == "relu_backward" || k == "sigmoid_backward" || k == "tanh_backward" || k == "erf_backward";
}
/// Attributes whose values depend on the shapes (sharded on one side): not compared when matching.
bool shapeAttr(const std::string& key) { return key == "sizes" || key == "start" || key == "end" || key == "parts" || key == "index"; }

Relation like(const Relation& in, int logical, std::vector<FactoredDim> dims) {
    Relation r = in;
    r.logical = logical;
    r.dims = std::move(dims);
    return r;
}

}  // namespace

Dims Relation::extent() const {
    Dims e;
    for (const auto& d : dims) {
        std::int64_t n = 1;
        for (const auto& f : d) n *= f.hi - f.lo;
        e.push_back(n);
    }
    return e;
}
bool Relation::allPlain() const {
    for (const auto& d : dims)
        if (d.size() != 1) return false;
    return true;
}
bool Relation::full(std::size_t d) const {
    for (const auto& f : dims[d])
        if (!f.full()) return false;
    return true;
}
Dims Relation::los() const {
    Dims r;
    for (const auto& d : dims) r.push_back(d[0].lo);
    return r;
}
Dims Relation::his() const {
    Dims r;
    for (const auto& d : dims) r.push_back(d[0].hi);
    return r;
}

std::vector<FactoredDim> wholeDims(const Dims& shape) {
    std::vector<FactoredDim> r;
    for (auto s : shape) r.push_back({Factor{s, 0, s}});
    return r;
}
std::vector<FactoredDim> boxDims(const Dims& shape, const Dims& lo, const Dims& hi) {
    std::vector<FactoredDim> r;
    for (std::size_t d = 0; d < shape.size(); ++d) r.push_back({Factor{shape[d], lo[d], hi[d]}});
    return r;
}

std::optional<std::vector<FactoredDim>> reshapeDims(const std::vector<FactoredDim>& part, const Dims& to) {
    std::deque<Factor> fs;
    for (const auto& d : part)
        for (const auto& f : d)
            if (f.size != 1) fs.push_back(f);
    std::vector<FactoredDim> out;
    for (auto o : to) {
        FactoredDim d;
        std::int64_t need = o;
        while (need > 1) {
            if (fs.empty()) return std::nullopt;
            Factor f = fs.front();
            fs.pop_front();
            if (f.size <= need) {
                if (need % f.size) return std::nullopt;
                d.push_back(f);
                need /= f.size;
            } else {
                // The factor is split: its outer `need` rows close this dim, the rest opens the next.
                if (f.size % need) return std::nullopt;
                auto b = boxOfRange(f.lo, f.hi, {need, f.size / need});
                if (!b) return std::nullopt;
                d.push_back(Factor{need, b->first[0], b->second[0]});
                fs.push_front(Factor{f.size / need, b->first[1], b->second[1]});
                need = 1;
            }
        }
        simplify(d);
        out.push_back(std::move(d));
    }
    if (!fs.empty()) return std::nullopt;
    return out;
}

bool piecesTile(const std::vector<const Relation*>& rs) {
    if (rs.empty()) return false;
    const auto& first = rs[0]->pieces;
    if (first.size() != 1) return false;  // one reduced range per partial (nested partial sums are not inferred)
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    for (const auto* r : rs) {
        if (r->pieces.size() != 1 || r->pieces[0].tag != first[0].tag || r->pieces[0].total != first[0].total) return false;
        ranges.push_back({r->pieces[0].lo, r->pieces[0].hi});
    }
    std::sort(ranges.begin(), ranges.end());
    std::int64_t at = 0;
    for (const auto& [lo, hi] : ranges) {
        if (lo != at) return false;
        at = hi;
    }
    return at == first[0].total;
}

LineageInference::LineageInference(const LoweredProgram& L, const LoweredProgram& P) : L_(L), P_(P), rel_(P.tensors.size()), consumers_(L.tensors.size()) {
    for (std::size_t o = 0; o < L.ops.size(); ++o)
        for (std::size_t k = 0; k < L.ops[o].inputs.size(); ++k)
            consumers_[static_cast<std::size_t>(L.ops[o].inputs[k])].push_back({static_cast<int>(o), static_cast<int>(k)});
}

void LineageInference::relateInputs() {
    const auto& lin = L_.inputs.at(0);
    for (int r = 0; r < P_.ranks; ++r) {
        const auto& pin = P_.inputs.at(static_cast<std::size_t>(r));
        if (pin.size() != lin.size()) {
            // Positions mean nothing once the lists differ: a relations file places these inputs.
            notes.push_back("rank " + std::to_string(r) + " takes " + std::to_string(pin.size()) + " inputs and the single device " + std::to_string(lin.size()) +
                            ": no input is matched by position (a relations file places them)");
            continue;
        }
        for (std::size_t i = 0; i < pin.size(); ++i) {
            if (lin[i] < 0 || pin[i] < 0) continue;
            if (auto rel = byShape(lin[i], pin[i], r)) {
                rel_[static_cast<std::size_t>(pin[i])] = *rel;
                for (std::size_t d = 0; d < rel->dims.size(); ++d)
                    if (!rel->full(d)) defaults_.push_back({pin[i], L_.tensors[static_cast<std::size_t>(lin[i])].name + " (dim " + std::to_string(d) + ")", *rel});
            }
        }
    }
}

std::string LineageInference::defaultShardNote() const {
    std::vector<std::string> names;
    for (const auto& [t, label, r] : defaults_) {
        const auto& now = rel_[static_cast<std::size_t>(t)];
        if (now && now->logical == r.logical && now->dims == r.dims && std::find(names.begin(), names.end(), label) == names.end()) names.push_back(label);
    }
    if (names.empty()) return {};
    std::string s = "inputs taken to be sharded in rank order by the default rule: ";
    for (std::size_t k = 0; k < names.size() && k < 12; ++k) s += (k ? ", " : "") + names[k];
    if (names.size() > 12) s += ", and " + std::to_string(names.size() - 12) + " more";
    return s + " (an input laid out otherwise, as vLLM's fused QKV and gate/up projections are, needs a relations file)";
}

std::optional<Relation> LineageInference::byShape(int logical, int parallel, int rank) const {
    const auto& lt = L_.tensors[static_cast<std::size_t>(logical)];
    const auto& pt = P_.tensors[static_cast<std::size_t>(parallel)];
    if (lt.isInt != pt.isInt || lt.shape.size() != pt.shape.size()) return std::nullopt;
    Dims lo(lt.shape.size(), 0), hi = lt.shape;
    int split = -1;
    for (std::size_t d = 0; d < lt.shape.size(); ++d) {
        if (lt.shape[d] == pt.shape[d]) continue;
        if (split >= 0 || pt.shape[d] * P_.ranks != lt.shape[d]) return std::nullopt;
        split = static_cast<int>(d);
    }
    if (split >= 0) {
        const auto s = static_cast<std::size_t>(split);
        lo[s] = pt.shape[s] * rank;
        hi[s] = pt.shape[s] * (rank + 1);
    }
    Relation rel;
    rel.logical = logical;
    rel.dims = boxDims(lt.shape, lo, hi);
    return rel;
}

void LineageInference::relateRuntimeInputs() {
    std::map<std::string, int> logical;
    for (std::size_t t = 0; t < L_.tensors.size(); ++t)
        if (!L_.tensors[t].runtimeInput.empty()) logical.emplace(L_.tensors[t].runtimeInput, static_cast<int>(t));
    for (std::size_t t = 0; t < P_.tensors.size(); ++t) {
        const auto& pt = P_.tensors[t];
        if (pt.runtimeInput.empty() || rel_[t]) continue;
        auto it = logical.find(pt.runtimeInput);
        if (it == logical.end() || L_.tensors[static_cast<std::size_t>(it->second)].shape != pt.shape) continue;
        Relation r;
        r.logical = it->second;
        r.dims = wholeDims(pt.shape);
        rel_[t] = r;  // the same value on every rank
    }
}

void LineageInference::relateRemainingMasks() {
    std::map<std::string, int> logicalMasks;
    for (std::size_t t = 0; t < L_.tensors.size(); ++t)
        if (L_.tensors[t].dropoutMask) logicalMasks[L_.tensors[t].name] = static_cast<int>(t);
    // Names line up only when every rank has as many dropouts as the single device.
    std::vector<std::size_t> perRank(static_cast<std::size_t>(P_.ranks), 0);
    for (const auto& t : P_.tensors)
        if (t.dropoutMask && t.rank >= 0 && t.rank < P_.ranks) ++perRank[static_cast<std::size_t>(t.rank)];
    for (auto n : perRank)
        if (n != logicalMasks.size()) return;
    for (std::size_t t = 0; t < P_.tensors.size(); ++t) {
        const auto& pt = P_.tensors[t];
        if (!pt.dropoutMask || rel_[t]) continue;
        auto at = pt.name.rfind("@r");
        auto it = logicalMasks.find(at == std::string::npos ? pt.name : pt.name.substr(0, at));
        if (it == logicalMasks.end()) continue;
        if (auto rel = byShape(it->second, static_cast<int>(t), pt.rank)) rel_[t] = *rel;
    }
}

void LineageInference::run() {
    for (int op : topologicalOrder(P_)) {
        infer(op);
        const auto& o = P_.ops[static_cast<std::size_t>(op)];
        bool inputsRelated = true, outputsRelated = true;
        for (int t : o.inputs) inputsRelated = inputsRelated && rel_[static_cast<std::size_t>(t)];
        for (int t : o.outputs) outputsRelated = outputsRelated && rel_[static_cast<std::size_t>(t)];
        if (inputsRelated && !outputsRelated) stuck.push_back(op);
    }
}

void LineageInference::set(int t, Relation r) {
    for (auto& d : r.dims) simplify(d);
    if (r.extent() != pshape(t)) return;  // the parallel tensor is not the part it would hold
    if (r.kind != Relation::Kind::Exact && P_.tensors[static_cast<std::size_t>(t)].isInt) return;
    rel_[static_cast<std::size_t>(t)] = std::move(r);
}

void LineageInference::infer(int opIndex) {
    const auto& op = P_.ops[static_cast<std::size_t>(opIndex)];
    if (!op.group.empty()) return collective(op);
    std::vector<const Relation*> ins;
    for (int t : op.inputs) ins.push_back(rel_[static_cast<std::size_t>(t)] ? &*rel_[static_cast<std::size_t>(t)] : nullptr);
    // A logical op of the same kind reading what the inputs hold.
    int first = -1;
    for (std::size_t k = 0; k < ins.size(); ++k)
        if (ins[k]) {
            first = static_cast<int>(k);
            break;
        }
    if (first >= 0) {
        const auto& candidates = consumers_[static_cast<std::size_t>(ins[static_cast<std::size_t>(first)]->logical)];
        for (const auto& [lop, pos] : candidates) {
            if (pos != first) continue;
            const auto& l = L_.ops[static_cast<std::size_t>(lop)];
            if (!matches(l, op, ins, true)) continue;
            if (transfer(l, op, ins)) return;
        }
        // The same parts seen in logical tensors that copy them (a split's output, a slice, a
        // concatenation's input at its offset): a rank's piece of a fused projection meets the op
        // that reads the single device's split of it.
        if (copiedMatch(op, ins, first)) return;
        // No op computes the same: an op in the same place that computes otherwise (another
        // attribute, another elementwise function). What its result should hold is claimed; if the
        // program is wrong there, that claim fails at this op, where the diagnosis belongs.
        if (parallelOnly(op, ins)) return;
        // Claimed as it should be: a scaled input counts as unscaled (a nonlinear op cannot undo
        // a scale, so the claim fails here if the scale was wrong).
        std::vector<Relation> unscaled;
        unscaled.reserve(ins.size());
        std::vector<const Relation*> shouldBe;
        for (const auto* r : ins) {
            if (!r) {
                shouldBe.push_back(nullptr);
                continue;
            }
            unscaled.push_back(*r);
            unscaled.back().coeff = 1;
            shouldBe.push_back(&unscaled.back());
        }
        for (const auto& [lop, pos] : candidates) {
            if (pos != first) continue;
            const auto& l = L_.ops[static_cast<std::size_t>(lop)];
            if (!matches(l, op, ins, false)) continue;
            if (transfer(l, op, shouldBe)) {
                nearMatches.push_back({static_cast<int>(&op - P_.ops.data()), lop});
                return;
            }
        }
        // The op of the same name on the single device (the same call of the framework), reading
        // another tensor than it should (a wrong operand, a missing rotation): what its result
        // should hold is claimed, the operands taken as what the single device's op reads.
        claimByName(op, ins);
        return;
    }
    parallelOnly(op, ins);
}

bool LineageInference::claimByName(const LoweredOp& op, const std::vector<const Relation*>& ins) {
    if (logicalByName_.empty())
        for (std::size_t o = 0; o < L_.ops.size(); ++o) logicalByName_.emplace(L_.ops[o].name, static_cast<int>(o));
    auto base = op.name;
    if (auto at = base.rfind("@r"); at != std::string::npos) base = base.substr(0, at);
    auto it = logicalByName_.find(base);
    if (it == logicalByName_.end()) return false;
    const auto& l = L_.ops[static_cast<std::size_t>(it->second)];
    if (l.kind != op.kind || l.inputs.size() != ins.size() || l.outputs.size() != op.outputs.size()) return false;
    // FX names are per-graph counters and drift where a rank's graph has extra calls: the name is
    // evidence only with the same framework line (file, line and code) on both sides.
    if (l.source < 0 || op.source < 0) return false;
    const auto& ls = L_.sources[static_cast<std::size_t>(l.source)];
    const auto& ps = P_.sources[static_cast<std::size_t>(op.source)];
    auto tail = [](const std::string& f) { return f.substr(f.find_last_of('/') == std::string::npos ? 0 : f.find_last_of('/') + 1); };
    if (ls.line != ps.line || ls.code != ps.code || tail(ls.file) != tail(ps.file)) return false;
    // With several operands, at least one must be what the single device's op reads.
    bool oneRight = ins.size() < 2;
    for (std::size_t k = 0; k < ins.size(); ++k) oneRight = oneRight || (ins[k] && ins[k]->logical == l.inputs[k]);
    if (!oneRight) return false;
    std::vector<Relation> as;
    as.reserve(ins.size());
    std::vector<const Relation*> shouldBe;
    for (std::size_t k = 0; k < ins.size(); ++k) {
        // Every operand known, and standing for the single device's operand of the same shape.
        if (!ins[k] || ins[k]->kind == Relation::Kind::PartialMax) return false;
        if (ins[k]->logical != l.inputs[k] && lshape(ins[k]->logical) != lshape(l.inputs[k])) return false;
        as.push_back(*ins[k]);
        as.back().logical = l.inputs[k];
        as.back().coeff = 1;
    }
    for (const auto& r : as) shouldBe.push_back(&r);
    if (!matches(l, op, shouldBe, true) || !transfer(l, op, shouldBe)) return false;
    nearMatches.push_back({static_cast<int>(&op - P_.ops.data()), it->second});
    return true;
}

std::vector<Relation> LineageInference::copiesOf(const Relation& r) const {
    // Breadth first over the logical ops that copy a part unchanged, a few steps deep.
    std::vector<Relation> out = {r};
    for (std::size_t at = 0; at < out.size() && out.size() < 48; ++at) {
        const Relation cur = out[at];
        for (const auto& [lop, pos] : consumers_[static_cast<std::size_t>(cur.logical)]) {
            const auto& l = L_.ops[static_cast<std::size_t>(lop)];
            auto add = [&](int logical, std::size_t d, std::int64_t size, std::int64_t lo, std::int64_t hi) {
                Relation c = cur;
                c.logical = logical;
                c.dims[d] = {Factor{size, lo, hi}};
                for (const auto& o : out)
                    if (o.logical == c.logical && o.dims == c.dims) return;
                out.push_back(std::move(c));
            };
            if (l.kind != "split" && l.kind != "slice" && l.kind != "concat") continue;
            const auto d = l.attrs.at("dim").get<std::size_t>();
            if (d >= cur.dims.size() || !cur.plain(d)) continue;
            const auto lo = cur.lo(d), hi = cur.hi(d);
            if (l.kind == "slice") {
                const auto s = l.attrs.at("start").get<std::int64_t>(), e = l.attrs.at("end").get<std::int64_t>();
                if (lo >= s && hi <= e) add(l.outputs[0], d, e - s, lo - s, hi - s);
            } else if (l.kind == "split") {
                std::int64_t off = 0;
                const auto sizes = l.attrs.at("sizes").get<Dims>();
                for (std::size_t j = 0; j < sizes.size() && j < l.outputs.size(); ++j) {
                    if (lo >= off && hi <= off + sizes[j]) add(l.outputs[j], d, sizes[j], lo - off, hi - off);
                    off += sizes[j];
                }
            } else {
                std::int64_t off = 0;
                for (int k = 0; k < pos; ++k) off += lshape(l.inputs[static_cast<std::size_t>(k)])[d];
                add(l.outputs[0], d, lshape(l.outputs[0])[d], lo + off, hi + off);
            }
        }
    }
    return out;
}

bool LineageInference::copiedMatch(const LoweredOp& op, const std::vector<const Relation*>& ins, int first) {
    std::vector<std::vector<Relation>> copies(ins.size());
    for (std::size_t k = 0; k < ins.size(); ++k)
        if (ins[k]) copies[k] = copiesOf(*ins[k]);
    for (std::size_t c = 0; c < copies[static_cast<std::size_t>(first)].size(); ++c) {
        const auto& lead = copies[static_cast<std::size_t>(first)][c];
        for (const auto& [lop, pos] : consumers_[static_cast<std::size_t>(lead.logical)]) {
            if (pos != first) continue;
            const auto& l = L_.ops[static_cast<std::size_t>(lop)];
            if (l.inputs.size() != ins.size()) continue;
            std::vector<const Relation*> seen(ins.size(), nullptr);
            for (std::size_t k = 0; k < ins.size(); ++k) {
                if (!ins[k]) continue;
                for (const auto& x : copies[k])
                    if (x.logical == l.inputs[k]) {
                        seen[k] = &x;
                        break;
                    }
                if (!seen[k]) seen[k] = ins[k];  // no copy there: matches() refuses the op
            }
            if (!matches(l, op, seen, true)) continue;
            if (transfer(l, op, seen)) return true;
        }
    }
    return false;
}

bool LineageInference::matches(const LoweredOp& l, const LoweredOp& p, const std::vector<const Relation*>& ins, bool exactly) const {
    if (l.inputs.size() != p.inputs.size() || l.outputs.size() != p.outputs.size()) return false;
    if (l.kind != p.kind && (exactly || !isElementwise(l.kind) || !isElementwise(p.kind))) return false;
    for (std::size_t k = 0; k < ins.size(); ++k) {
        if (ins[k]) {
            if (ins[k]->logical != l.inputs[k]) return false;
        } else if (!P_.tensors[static_cast<std::size_t>(p.inputs[k])].dropoutMask) {
            return false;
        }
    }
    if (!exactly) return true;
    for (const auto& [key, v] : l.attrs.items())
        if (!shapeAttr(key) && (!p.attrs.contains(key) || p.attrs[key] != v)) return false;
    for (const auto& [key, v] : p.attrs.items())
        if (!shapeAttr(key) && !l.attrs.contains(key)) return false;
    return true;
}

bool LineageInference::elementwise(const LoweredOp& l, const LoweredOp& p, std::vector<const Relation*> ins) {
    using K = Relation::Kind;
    const auto& k = l.kind;
    const int out = p.outputs[0], lout = l.outputs[0];
    // Dropout's mask: the part of the logical mask the input's ranks hold.
    if (k == "dropout" && ins[0] && !ins[1]) {
        Relation m = *ins[0];
        m.kind = K::Exact;
        m.coeff = 1;
        m.pieces.clear();
        m.logical = l.inputs[1];
        set(p.inputs[1], m);
        if (!rel_[static_cast<std::size_t>(p.inputs[1])]) return false;
        ins[1] = &*rel_[static_cast<std::size_t>(p.inputs[1])];
    }
    for (const auto* r : ins)
        if (!r || r->kind == K::PartialMax) return false;
    const auto& os = lshape(lout);
    auto dims = wholeDims(os);
    std::vector<bool> fixed(os.size(), false);
    for (std::size_t i = 0; i < ins.size(); ++i) {
        const auto& is = lshape(l.inputs[i]);
        if (is.size() > os.size() || ins[i]->dims.size() != is.size()) return false;
        const auto off = os.size() - is.size();
        for (std::size_t d = 0; d < is.size(); ++d) {
            if (is[d] == 1 && os[d + off] != 1) continue;  // broadcast
            if (fixed[d + off] && dims[d + off] != ins[i]->dims[d]) return false;
            dims[d + off] = ins[i]->dims[d];
            fixed[d + off] = true;
        }
    }
    std::vector<std::size_t> partial;
    for (std::size_t i = 0; i < ins.size(); ++i)
        if (ins[i]->kind == K::Partial) partial.push_back(i);
    Relation r = *ins[0];
    r.logical = lout;
    r.dims = dims;
    r.kind = partial.empty() ? K::Exact : K::Partial;
    r.pieces = partial.empty() ? std::vector<Piece>{} : ins[partial[0]]->pieces;
    for (auto i : partial)
        if (ins[i]->pieces != r.pieces) return false;
    auto allCoeff = [&](const Rational& c) {
        for (const auto* x : ins)
            if (x->coeff != c) return false;
        return true;
    };
    if (k == "add" || k == "sub") {
        // Linear: all partial (the same pieces) or none, one coefficient.
        if (!partial.empty() && partial.size() != ins.size()) return false;
        if (!allCoeff(ins[0]->coeff)) return false;
    } else if (k == "mul") {
        if (partial.size() > 1) return false;
        r.coeff = ins[0]->coeff * ins[1]->coeff;
    } else if (k == "div") {
        // a · inv(b): linear in a; inv of a scaled b is not provably scaled.
        if (partial.size() > 1 || (!partial.empty() && partial[0] != 0) || !ins[1]->coeff.isOne()) return false;
    } else if (k == "dropout") {
        if ((!partial.empty() && partial[0] != 0) || !ins[1]->coeff.isOne()) return false;
    } else if (isUnaryBackward(k)) {
        // (x, dy): linear in dy only.
        if (!ins[0]->coeff.isOne() || (!partial.empty() && partial[0] != 1)) return false;
        r.coeff = ins[1]->coeff;
    } else if (k == "mul_scalar") {
        // p' = v_p·p and L' = v_l·L with L = c·p give L' = (c·v_l/v_p)·p'.
        // (A near match pairs it with another elementwise op, which has no factor: no relation.)
        if (p.kind != "mul_scalar" || !l.attrs.contains("value") || !p.attrs.contains("value")) return false;
        const auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
        auto vl = Rational::parse(text(l.attrs.at("value")));
        auto vp = Rational::parse(text(p.attrs.at("value")));
        if (!vl || !vp || vp->isZero()) return false;
        try {
            r.coeff = ins[0]->coeff * *vl / *vp;
        } catch (const RationalOverflow&) {
            return false;
        }
        if (r.coeff.isZero()) return false;
        if (*vl != *vp && scaledOps_.insert(l.name).second && notes.size() < 64)
            notes.push_back(p.name + " scales by " + vp->toString() + " where the single device's " + l.name + " scales by " + vl->toString() +
                            ": what follows holds the single device's values times " + (*vp / *vl).toString() + " until a sum or the result undoes it");
    } else if (isLinearUnary(k)) {
        // coefficient and partial sums pass through
    } else {
        if (!partial.empty() || !allCoeff(Rational(1))) return false;  // nonlinear
    }
    set(out, r);
    return rel_[static_cast<std::size_t>(out)].has_value();
}

bool LineageInference::transfer(const LoweredOp& l, const LoweredOp& p, std::vector<const Relation*> ins) {
    using K = Relation::Kind;
    const auto& k = l.kind;
    if (isElementwise(k)) return elementwise(l, p, ins);
    const int out = p.outputs[0];
    const int lout = l.outputs[0];
    const auto& in = *ins[0];
    if (in.kind == K::PartialMax) return false;
    if (k == "view" || k == "reshape") {
        auto d = reshapeDims(in.dims, lshape(lout));
        if (!d) return false;
        set(out, like(in, lout, *d));
    } else if (k == "transpose") {
        auto d0 = l.attrs.at("dim0").get<std::size_t>(), d1 = l.attrs.at("dim1").get<std::size_t>();
        auto dims = in.dims;
        std::swap(dims[d0], dims[d1]);
        set(out, like(in, lout, dims));
    } else if (k == "permute") {
        std::vector<FactoredDim> dims;
        for (auto d : l.attrs.at("dims").get<std::vector<std::size_t>>()) dims.push_back(in.dims[d]);
        set(out, like(in, lout, dims));
    } else if (k == "expand") {
        const auto& is = lshape(l.inputs[0]);
        const auto& os = lshape(lout);
        if (is.size() > os.size()) return false;
        auto dims = wholeDims(os);
        const auto off = os.size() - is.size();
        for (std::size_t d = 0; d < is.size(); ++d)
            if (!(is[d] == 1 && os[d + off] != 1)) dims[d + off] = in.dims[d];
        set(out, like(in, lout, dims));
    } else if (k == "slice") {
        auto d = l.attrs.at("dim").get<std::size_t>();
        if (!in.plain(d)) return false;
        auto s = l.attrs.at("start").get<std::int64_t>(), e = l.attrs.at("end").get<std::int64_t>();
        auto ps = p.attrs.at("start").get<std::int64_t>(), pe = p.attrs.at("end").get<std::int64_t>();
        const auto lo = in.lo(d) + ps - s, hi = in.lo(d) + pe - s;
        if (lo < 0 || hi > e - s) return false;
        auto dims = in.dims;
        dims[d] = {Factor{e - s, lo, hi}};
        set(out, like(in, lout, dims));
    } else if (k == "split") {
        auto d = l.attrs.at("dim").get<std::size_t>();
        if (!in.plain(d)) return false;
        auto ls = l.attrs.at("sizes").get<Dims>(), ps = p.attrs.at("sizes").get<Dims>();
        if (ls.size() != ps.size()) return false;
        std::int64_t loff = 0, poff = 0;
        for (std::size_t j = 0; j < ls.size(); ++j) {
            // Parallel output j holds [in.lo + poff, + ps[j]) of dim d, inside logical output j's range.
            const auto lo = in.lo(d) + poff - loff, hi = in.lo(d) + poff - loff + ps[j];
            if (lo >= 0 && hi <= ls[j]) {
                auto dims = in.dims;
                dims[d] = {Factor{ls[j], lo, hi}};
                set(p.outputs[j], like(in, l.outputs[j], dims));
            }
            loff += ls[j];
            poff += ps[j];
        }
        return rel_[static_cast<std::size_t>(out)].has_value();
    } else if (k == "concat") {
        auto d = l.attrs.at("dim").get<std::size_t>();
        for (std::size_t i = 0; i < ins.size(); ++i) {
            const auto* r = ins[i];
            if (!r || r->kind != in.kind || r->coeff != in.coeff || r->pieces != in.pieces || !r->full(d)) return false;
            for (std::size_t e = 0; e < in.dims.size(); ++e)
                if (e != d && r->dims[e] != in.dims[e]) return false;
        }
        auto dims = in.dims;
        dims[d] = {Factor{lshape(lout)[d], 0, lshape(lout)[d]}};
        set(out, like(in, lout, dims));
    } else if (k == "matmul") {
        if (!ins[1] || in.kind != K::Exact || ins[1]->kind != K::Exact) return false;
        if (l.attrs.value("transpose_a", false) || l.attrs.value("transpose_b", false)) return false;
        const auto& b = *ins[1];
        const auto ra = in.dims.size(), rb = b.dims.size();
        if (ra < 2 || rb < 2 || (rb > 2 && rb != ra)) return false;
        // a [.., M, K] · b [K, N] or [.., K, N]
        if (in.dims[ra - 1] != b.dims[rb - 2]) return false;
        if (rb > 2)
            for (std::size_t d = 0; d + 2 < rb; ++d)
                if (in.dims[d] != b.dims[d]) return false;
        std::vector<FactoredDim> dims(in.dims.begin(), in.dims.end() - 1);
        dims.push_back(b.dims[rb - 1]);
        Relation r;
        r.logical = lout;
        r.dims = dims;
        r.coeff = in.coeff * b.coeff;
        if (!in.full(ra - 1)) {
            if (!in.plain(ra - 1)) return false;
            r.kind = K::Partial;
            r.pieces = {Piece{"matmul " + l.name, in.lo(ra - 1), in.hi(ra - 1), lshape(l.inputs[0])[ra - 1]}};
        }
        set(out, r);
    } else if (k == "sum" || k == "mean") {
        const auto& is = lshape(l.inputs[0]);
        std::vector<std::size_t> reduced;
        if (l.attrs.contains("dims")) reduced = l.attrs.at("dims").get<std::vector<std::size_t>>();
        else
            for (std::size_t d = 0; d < is.size(); ++d) reduced.push_back(d);
        const bool keep = l.attrs.value("keepdim", false);
        std::vector<FactoredDim> dims;
        std::int64_t whole = 1, part = 1;
        std::vector<std::size_t> cut;
        for (std::size_t d = 0; d < is.size(); ++d) {
            if (std::find(reduced.begin(), reduced.end(), d) != reduced.end()) {
                whole *= is[d];
                part *= in.extent()[d];
                if (!in.full(d)) cut.push_back(d);
                if (keep) dims.push_back({Factor{1, 0, 1}});
            } else {
                dims.push_back(in.dims[d]);
            }
        }
        Relation r = like(in, lout, dims);
        if (!cut.empty()) {
            if (in.kind != K::Exact || cut.size() != 1 || !in.plain(cut[0])) return false;
            r.kind = K::Partial;
            const auto d = cut[0];
            r.pieces = {Piece{k + " " + l.name + " dim " + std::to_string(d), in.lo(d), in.hi(d), is[d]}};
            if (k == "mean") r.coeff = in.coeff * Rational(part, whole);
        }
        set(out, r);
    } else if (k == "max") {
        if (in.kind != K::Exact || !in.coeff.isOne()) return false;
        auto d = l.attrs.at("dim").get<std::size_t>();
        const bool keep = l.attrs.value("keepdim", false);
        auto dims = in.dims;
        if (keep) dims[d] = {Factor{1, 0, 1}};
        else dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(d));
        Relation r = like(in, lout, dims);
        if (!in.full(d)) {
            if (!in.plain(d)) return false;
            r.kind = K::PartialMax;
            r.pieces = {Piece{"max " + l.name, in.lo(d), in.hi(d), lshape(l.inputs[0])[d]}};
        }
        set(out, r);
    } else if (k == "softmax") {
        auto d = l.attrs.at("dim").get<std::size_t>();
        if (in.kind != K::Exact || !in.coeff.isOne() || !in.full(d)) return false;
        set(out, like(in, lout, in.dims));
    } else if (k == "softmax_backward") {
        auto d = l.attrs.at("dim").get<std::size_t>();
        if (!ins[1] || in.kind != K::Exact || ins[1]->kind != K::Exact || !in.coeff.isOne() || in.dims != ins[1]->dims || !in.full(d)) return false;
        set(out, like(*ins[1], lout, in.dims));
    } else if (k == "layernorm" || k == "rmsnorm") {
        for (std::size_t i = 1; i < ins.size(); ++i) {
            if (!ins[i] || ins[i]->kind != K::Exact || !ins[i]->coeff.isOne()) return false;
            for (std::size_t d = 0; d < ins[i]->dims.size(); ++d)
                if (!ins[i]->full(d)) return false;
        }
        if (in.dims.empty() || in.kind != K::Exact || !in.coeff.isOne() || !in.full(in.dims.size() - 1)) return false;
        set(out, like(in, lout, in.dims));
    } else if (k == "embedding") {
        // (ids, weight): the ids exact; the weight's rows a vocabulary part, its columns any.
        const auto* w = ins[1];
        if (in.kind != K::Exact || !w || w->kind != K::Exact || w->dims.size() != 2 || !w->plain(0)) return false;
        const auto V = lshape(l.inputs[1])[0];
        auto dims = in.dims;
        dims.push_back(w->dims[1]);
        Relation r;
        r.logical = lout;
        r.dims = dims;
        r.coeff = w->coeff;
        if (p.attrs.contains("parts")) {
            const auto width = pshape(p.inputs[1])[0];
            const auto index = p.attrs.at("index").get<std::int64_t>();
            if (w->lo(0) != index * width || w->hi(0) != (index + 1) * width) return false;
            r.kind = K::Partial;
            r.pieces = {Piece{"vocabulary " + l.name, w->lo(0), w->hi(0), V}};
        } else if (!w->full(0)) {
            return false;
        }
        set(out, r);
    } else if (k == "one_hot") {
        // labels -> [labels..., C]: a vocabulary part holds the columns of its range, exactly
        // (a label elsewhere is 0 in every column here, as it is in these columns on the single device).
        if (in.kind != K::Exact || !in.coeff.isOne()) return false;
        const auto C = lshape(lout).back();
        auto dims = in.dims;
        if (p.attrs.contains("parts")) {
            const auto width = pshape(out).back();
            const auto index = p.attrs.at("index").get<std::int64_t>();
            if ((index + 1) * width > C) return false;
            dims.push_back({Factor{C, index * width, (index + 1) * width}});
        } else {
            dims.push_back({Factor{C, 0, C}});
        }
        Relation r;
        r.logical = lout;
        r.dims = dims;
        set(out, r);
    } else if (k == "embedding_backward") {
        // (ids, dy) -> [V, H]: every token here (rows whole); a vocabulary part holds the rows of
        // its range exactly (the sums over the tokens of each of its ids), the columns as dy's.
        const auto* dy = ins[1];
        if (!dy || in.kind != K::Exact || !in.coeff.isOne() || dy->kind != K::Exact || dy->dims.size() != in.dims.size() + 1) return false;
        for (std::size_t d = 0; d < in.dims.size(); ++d)
            if (!in.full(d) || dy->dims[d] != in.dims[d]) return false;
        const auto V = lshape(lout)[0];
        FactoredDim rows = {Factor{V, 0, V}};
        if (p.attrs.contains("parts")) {
            const auto width = pshape(out)[0];
            const auto index = p.attrs.at("index").get<std::int64_t>();
            if ((index + 1) * width > V) return false;
            rows = {Factor{V, index * width, (index + 1) * width}};
        }
        Relation r;
        r.logical = lout;
        r.coeff = dy->coeff;
        r.dims = {rows, dy->dims.back()};
        set(out, r);
    } else if (k == "layernorm_backward" || k == "rmsnorm_backward") {
        // (x, w, dy) -> (dx, dw[, db]): x and dy the same rows, each row whole; w whole. dx holds
        // those rows; dw and db sum over rows: whole when every row is here, else a partial sum
        // over the rows of the one dim that is cut.
        const auto* w = ins[1];
        const auto* dy = ins[2];
        if (!w || !dy || in.kind != K::Exact || !in.coeff.isOne() || dy->kind != K::Exact || dy->dims != in.dims || in.dims.empty()) return false;
        if (w->kind != K::Exact || !w->coeff.isOne()) return false;
        for (std::size_t d = 0; d < w->dims.size(); ++d)
            if (!w->full(d)) return false;
        const auto last = in.dims.size() - 1;
        if (!in.full(last)) return false;
        set(out, like(*dy, lout, dy->dims));
        std::vector<std::size_t> cut;
        for (std::size_t d = 0; d < last; ++d)
            if (!in.full(d)) cut.push_back(d);
        if (cut.size() > 1 || (cut.size() == 1 && !in.plain(cut[0]))) return rel_[static_cast<std::size_t>(out)].has_value();
        for (std::size_t j = 1; j < l.outputs.size() && j < p.outputs.size(); ++j) {
            Relation r;
            r.logical = l.outputs[j];
            r.dims = wholeDims(lshape(l.outputs[j]));
            r.coeff = dy->coeff;
            if (!cut.empty()) {
                const auto d = cut[0];
                r.kind = K::Partial;
                r.pieces = {Piece{k + " " + l.name + " rows dim " + std::to_string(d), in.lo(d), in.hi(d), lshape(l.inputs[0])[d]}};
            }
            set(p.outputs[j], r);
        }
    } else if (k == "target_logit") {
        const auto* y = ins[1];
        if (in.dims.empty()) return false;
        const auto last = in.dims.size() - 1;
        if (in.kind != K::Exact || !y || y->kind != K::Exact || !in.plain(last)) return false;
        std::vector<FactoredDim> dims(in.dims.begin(), in.dims.end() - 1);
        if (dims != y->dims) return false;
        const auto C = lshape(l.inputs[0]).back();
        Relation r;
        r.logical = lout;
        r.dims = dims;
        r.coeff = in.coeff;
        if (p.attrs.contains("parts")) {
            const auto width = pshape(p.inputs[0]).back();
            const auto index = p.attrs.at("index").get<std::int64_t>();
            if (in.lo(last) != index * width || in.hi(last) != (index + 1) * width) return false;
            r.kind = K::Partial;
            r.pieces = {Piece{"vocabulary " + l.name, in.lo(last), in.hi(last), C}};
        } else if (!in.full(last)) {
            return false;
        }
        set(out, r);
    } else {
        return false;
    }
    return rel_[static_cast<std::size_t>(out)].has_value();
}

bool LineageInference::parallelOnly(const LoweredOp& op, const std::vector<const Relation*>& ins) {
    // A slice or split of what a rank holds: another part of the same logical tensor.
    if (ins.empty() || !ins[0] || ins[0]->kind != Relation::Kind::Exact) return false;
    const auto& in = *ins[0];
    if (op.kind == "slice") {
        auto d = op.attrs.at("dim").get<std::size_t>();
        if (!in.plain(d)) return false;
        auto dims = in.dims;
        dims[d] = {Factor{in.dims[d][0].size, in.lo(d) + op.attrs.at("start").get<std::int64_t>(), in.lo(d) + op.attrs.at("end").get<std::int64_t>()}};
        set(op.outputs[0], like(in, in.logical, dims));
    } else if (op.kind == "split") {
        auto d = op.attrs.at("dim").get<std::size_t>();
        if (!in.plain(d)) return false;
        std::int64_t at = in.lo(d);
        for (std::size_t j = 0; j < op.outputs.size(); ++j) {
            const auto size = op.attrs.at("sizes")[j].get<std::int64_t>();
            auto dims = in.dims;
            dims[d] = {Factor{in.dims[d][0].size, at, at + size}};
            at += size;
            set(op.outputs[j], like(in, in.logical, dims));
        }
    }
    return rel_[static_cast<std::size_t>(op.outputs[0])].has_value();
}

void LineageInference::collective(const LoweredOp& op) {
    using K = Relation::Kind;
    std::vector<const Relation*> ins;
    for (int t : op.inputs) {
        if (!rel_[static_cast<std::size_t>(t)]) return;
        ins.push_back(&*rel_[static_cast<std::size_t>(t)]);
    }
    const auto& a = *ins[0];
    for (const auto* r : ins)
        if (r->logical != a.logical || r->dims.size() != a.dims.size()) return;
    const auto n = static_cast<std::int64_t>(op.group.size());
    if (a.dims.empty() && (op.kind == "all_gather" || op.kind == "reduce_scatter")) return;
    if (op.kind == "all_reduce") {
        const auto reduce = op.attrs.value("reduce", std::string("sum"));
        for (const auto* r : ins)
            if (r->dims != a.dims || r->kind != a.kind || r->coeff != a.coeff) return;
        Relation out = a;
        out.kind = K::Exact;
        out.pieces.clear();
        if (reduce == "max") {
            if (a.kind != K::PartialMax || !piecesTile(ins)) return;
        } else if (a.kind == K::Partial) {
            if (!piecesTile(ins)) return;
            if (reduce == "mean") out.coeff = a.coeff * Rational(n);
        } else if (a.kind == K::Exact) {
            // Every member holds the same value: the sum is n times it, the mean is it.
            if (reduce == "sum") out.coeff = a.coeff / Rational(n);
        } else {
            return;
        }
        for (int t : op.outputs) set(t, out);
    } else if (op.kind == "all_gather") {
        // Concatenated along dim 0 in group order: consecutive ranges of one plain dim.
        for (const auto* r : ins)
            if (r->kind != K::Exact || r->coeff != a.coeff || !r->plain(0)) return;
        Relation out = a;
        for (std::size_t i = 1; i < ins.size(); ++i) {
            const auto& r = *ins[i];
            for (std::size_t d = 1; d < a.dims.size(); ++d)
                if (r.dims[d] != a.dims[d]) return;
            if (r.lo(0) != out.hi(0)) return;
            out.dims[0][0].hi = r.hi(0);
        }
        for (int t : op.outputs) set(t, out);
    } else if (op.kind == "reduce_scatter") {
        for (const auto* r : ins)
            if (r->dims != a.dims || r->kind != K::Partial || r->coeff != a.coeff) return;
        if (!piecesTile(ins) || !a.plain(0)) return;
        const auto chunk = (a.hi(0) - a.lo(0)) / n;
        for (std::size_t k = 0; k < op.outputs.size(); ++k) {
            Relation out = a;
            out.kind = K::Exact;
            out.pieces.clear();
            out.dims[0][0].lo = a.lo(0) + chunk * static_cast<std::int64_t>(k);
            out.dims[0][0].hi = out.dims[0][0].lo + chunk;
            set(op.outputs[k], out);
        }
    } else if (op.kind == "broadcast") {
        if (a.kind != K::Exact) return;
        for (int t : op.outputs) set(t, a);
    }
}

}  // namespace tv::torch
