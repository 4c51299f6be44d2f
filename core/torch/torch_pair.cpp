#include "torch/torch_pair.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "io/plan_json.hpp"
#include "torch/rank_set.hpp"
#include "torch/torch_lowering.hpp"

namespace tv::torch {

using nlohmann::json;

bool isTorchGraphPath(const std::string& path) {
    auto ends = [&](const std::string& s) { return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0; };
    return ends(".py") || ends(".gpickle");
}

namespace {

using Dims = std::vector<std::int64_t>;

/// Which part of a reduction a partial result covers: a range of the reduced extent.
struct Piece {
    std::string tag;  ///< the reduction (logical op and what it reduces)
    std::int64_t lo = 0, hi = 0, total = 0;
    bool operator==(const Piece&) const = default;
};

/// How a parallel tensor p holds a logical tensor L:
/// Exact: L[box] = coeff · p.  Partial: L[box] = coeff · Σ p over the ranks whose pieces tile the
/// reduction.  PartialMax: L[box] = max of p over such ranks (never written as lineage).
struct Relation {
    enum class Kind : std::uint8_t { Exact, Partial, PartialMax };
    Kind kind = Kind::Exact;
    int logical = -1;
    Dims lo, hi;
    Rational coeff{1};
    std::vector<Piece> pieces;
    Dims extent() const {
        Dims e(lo.size());
        for (std::size_t d = 0; d < lo.size(); ++d) e[d] = hi[d] - lo[d];
        return e;
    }
};
using Rel = std::optional<Relation>;

bool sameBox(const Relation& a, const Relation& b) { return a.lo == b.lo && a.hi == b.hi; }

/// Whether the pieces of the given relations tile their reduction exactly once.
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

/// A box of a row-major group of dims as one flat range, if it is one.
std::optional<std::pair<std::int64_t, std::int64_t>> flatRange(const Dims& lo, const Dims& hi, const Dims& sizes) {
    const std::size_t k = sizes.size();
    std::size_t j = 0;  // the first dim that is not a single index
    while (j < k && hi[j] - lo[j] == 1) ++j;
    for (std::size_t t = j + 1; t < k; ++t)
        if (lo[t] != 0 || hi[t] != sizes[t]) return std::nullopt;
    std::int64_t a = 0, b = 0;
    for (std::size_t t = 0; t < k; ++t) {
        a = a * sizes[t] + lo[t];
        b = b * sizes[t] + (t <= j ? (t < j ? lo[t] : hi[t] - 1) : sizes[t] - 1);
    }
    return std::make_pair(a, b + 1);
}

/// A flat range of a row-major group of dims as a box, if it is one.
std::optional<std::pair<Dims, Dims>> boxOfRange(std::int64_t a, std::int64_t b, const Dims& sizes) {
    const std::size_t k = sizes.size();
    if (k == 0) return std::make_pair(Dims{}, Dims{});
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

/// A box of a tensor of shape `from` seen through a row-major reshape to `to`.
std::optional<std::pair<Dims, Dims>> reshapeBox(const Dims& lo, const Dims& hi, const Dims& from, const Dims& to) {
    Dims olo, ohi;
    std::size_t i = 0, o = 0;
    while (i < from.size() || o < to.size()) {
        std::size_t i1 = i, o1 = o;
        std::int64_t pi = 1, po = 1;
        if (i1 < from.size()) pi *= from[i1++];
        if (o1 < to.size()) po *= to[o1++];
        while (pi != po) {
            if (pi < po) {
                if (i1 >= from.size()) return std::nullopt;
                pi *= from[i1++];
            } else {
                if (o1 >= to.size()) return std::nullopt;
                po *= to[o1++];
            }
        }
        // Trailing size-1 dims join the group on their side.
        while (i1 < from.size() && from[i1] == 1 && (o1 >= to.size() || to[o1] != 1)) ++i1;
        while (o1 < to.size() && to[o1] == 1 && (i1 >= from.size() || from[i1] != 1)) ++o1;
        Dims glo(lo.begin() + static_cast<std::ptrdiff_t>(i), lo.begin() + static_cast<std::ptrdiff_t>(i1));
        Dims ghi(hi.begin() + static_cast<std::ptrdiff_t>(i), hi.begin() + static_cast<std::ptrdiff_t>(i1));
        Dims gs(from.begin() + static_cast<std::ptrdiff_t>(i), from.begin() + static_cast<std::ptrdiff_t>(i1));
        Dims os(to.begin() + static_cast<std::ptrdiff_t>(o), to.begin() + static_cast<std::ptrdiff_t>(o1));
        std::pair<std::int64_t, std::int64_t> range{0, 1};
        if (!gs.empty()) {
            auto r = flatRange(glo, ghi, gs);
            if (!r) return std::nullopt;
            range = *r;
        }
        auto b = boxOfRange(range.first, range.second, os);
        if (!b) return std::nullopt;
        olo.insert(olo.end(), b->first.begin(), b->first.end());
        ohi.insert(ohi.end(), b->second.begin(), b->second.end());
        i = i1;
        o = o1;
        if (i1 == i && o1 == o && i >= from.size() && o >= to.size()) break;
    }
    if (olo.size() != to.size()) return std::nullopt;
    return std::make_pair(olo, ohi);
}

bool isLinearUnary(const std::string& k) { return k == "neg" || k == "mul_scalar" || k == "view" || k == "reshape" || k == "transpose" || k == "permute"; }
bool isElementwise(const std::string& k) {
    static const std::set<std::string> e = {"add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "silu", "erf",
                                            "gelu", "add_scalar", "mul_scalar", "pow", "dropout", "gelu_backward", "silu_backward", "relu_backward",
                                            "sigmoid_backward", "tanh_backward", "erf_backward", "identity"};
    return e.count(k) > 0;
}
/// Attributes whose values depend on the shapes (sharded on one side): not compared when matching.
bool shapeAttr(const std::string& key) { return key == "sizes" || key == "start" || key == "end" || key == "parts" || key == "index"; }

class Inference {
public:
    Inference(const LoweredProgram& L, const LoweredProgram& P) : L_(L), P_(P), rel_(P.tensors.size()) {
        for (std::size_t o = 0; o < L.ops.size(); ++o)
            for (std::size_t k = 0; k < L.ops[o].inputs.size(); ++k)
                consumers_[L.ops[o].inputs[k]].push_back({static_cast<int>(o), static_cast<int>(k)});
    }

    std::vector<Rel>& relations() { return rel_; }
    std::vector<std::string> notes;

    /// Input relations by position (the default rule).
    void relateInputs() {
        const auto& lin = L_.inputs.at(0);
        for (int r = 0; r < P_.ranks; ++r) {
            const auto& pin = P_.inputs.at(static_cast<std::size_t>(r));
            if (pin.size() != lin.size()) {
                notes.push_back("rank " + std::to_string(r) + " takes " + std::to_string(pin.size()) + " inputs and the single device " + std::to_string(lin.size()) +
                                ": inputs are matched by position only where both have one");
            }
            for (std::size_t i = 0; i < std::min(pin.size(), lin.size()); ++i) {
                if (lin[i] < 0 || pin[i] < 0) continue;
                const auto& lt = L_.tensors[static_cast<std::size_t>(lin[i])];
                const auto& pt = P_.tensors[static_cast<std::size_t>(pin[i])];
                if (lt.isInt != pt.isInt || lt.shape.size() != pt.shape.size()) continue;
                Relation rel;
                rel.logical = lin[i];
                rel.lo.assign(lt.shape.size(), 0);
                rel.hi = lt.shape;
                int split = -1;
                bool ok = true;
                for (std::size_t d = 0; d < lt.shape.size(); ++d) {
                    if (lt.shape[d] == pt.shape[d]) continue;
                    if (split >= 0 || pt.shape[d] * P_.ranks != lt.shape[d]) ok = false;
                    split = static_cast<int>(d);
                }
                if (!ok) continue;
                if (split >= 0) {
                    rel.lo[static_cast<std::size_t>(split)] = pt.shape[static_cast<std::size_t>(split)] * r;
                    rel.hi[static_cast<std::size_t>(split)] = pt.shape[static_cast<std::size_t>(split)] * (r + 1);
                }
                rel_[static_cast<std::size_t>(pin[i])] = rel;
            }
        }
    }

    void run() {
        for (int op : topoOrder()) {
            infer(op);
            const auto& o = P_.ops[static_cast<std::size_t>(op)];
            bool inputsRelated = true, outputsRelated = true;
            for (int t : o.inputs) inputsRelated = inputsRelated && rel_[static_cast<std::size_t>(t)];
            for (int t : o.outputs) outputsRelated = outputsRelated && rel_[static_cast<std::size_t>(t)];
            if (inputsRelated && !outputsRelated) stuck.push_back(op);
        }
    }
    /// Ops whose inputs are related and whose results are not: where inference stopped.
    std::vector<int> stuck;

private:
    const LoweredProgram& L_;
    const LoweredProgram& P_;
    std::vector<Rel> rel_;
    std::map<int, std::vector<std::pair<int, int>>> consumers_;  ///< logical tensor -> (op, input position)

    const Dims& lshape(int t) const { return L_.tensors[static_cast<std::size_t>(t)].shape; }
    const Dims& pshape(int t) const { return P_.tensors[static_cast<std::size_t>(t)].shape; }

    std::vector<int> topoOrder() const {
        std::vector<int> order, state(P_.ops.size(), 0);
        for (std::size_t s = 0; s < P_.ops.size(); ++s) {
            if (state[s]) continue;
            std::vector<std::pair<int, std::size_t>> stack{{static_cast<int>(s), 0}};
            state[s] = 1;
            while (!stack.empty()) {
                auto& [op, k] = stack.back();
                const auto& ins = P_.ops[static_cast<std::size_t>(op)].inputs;
                if (k < ins.size()) {
                    int prod = P_.tensors[static_cast<std::size_t>(ins[k++])].producer;
                    if (prod >= 0 && !state[static_cast<std::size_t>(prod)]) {
                        state[static_cast<std::size_t>(prod)] = 1;
                        stack.push_back({prod, 0});
                    }
                    continue;
                }
                order.push_back(op);
                stack.pop_back();
            }
        }
        return order;
    }

    void set(int t, Relation r) {
        if (r.extent() != pshape(t)) return;  // the parallel tensor is not the box it would hold
        if (r.kind != Relation::Kind::Exact && P_.tensors[static_cast<std::size_t>(t)].isInt) return;
        rel_[static_cast<std::size_t>(t)] = std::move(r);
    }

    void infer(int opIndex) {
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
            auto it = consumers_.find(ins[static_cast<std::size_t>(first)]->logical);
            if (it != consumers_.end()) {
                for (const auto& [lop, pos] : it->second) {
                    if (pos != first) continue;
                    const auto& l = L_.ops[static_cast<std::size_t>(lop)];
                    if (!matches(l, op, ins)) continue;
                    if (transfer(l, op, ins)) return;
                }
            }
        }
        parallelOnly(op, ins);
    }

    bool matches(const LoweredOp& l, const LoweredOp& p, const std::vector<const Relation*>& ins) const {
        if (l.kind != p.kind || l.inputs.size() != p.inputs.size() || l.outputs.size() != p.outputs.size()) return false;
        for (std::size_t k = 0; k < ins.size(); ++k) {
            if (ins[k]) {
                if (ins[k]->logical != l.inputs[k]) return false;
            } else if (!P_.tensors[static_cast<std::size_t>(p.inputs[k])].dropoutMask) {
                return false;
            }
        }
        for (const auto& [key, v] : l.attrs.items())
            if (!shapeAttr(key) && (!p.attrs.contains(key) || p.attrs[key] != v)) return false;
        for (const auto& [key, v] : p.attrs.items())
            if (!shapeAttr(key) && !l.attrs.contains(key)) return false;
        return true;
    }

    static Relation like(const Relation& in, int logical, Dims lo, Dims hi) {
        Relation r = in;
        r.logical = logical;
        r.lo = std::move(lo);
        r.hi = std::move(hi);
        return r;
    }

    bool transfer(const LoweredOp& l, const LoweredOp& p, std::vector<const Relation*> ins) {
        const int out = p.outputs[0];
        const int lout = l.outputs[0];
        const auto& k = l.kind;
        using K = Relation::Kind;
        if (isElementwise(k)) {
            // Dropout's mask: the part of the logical mask the input's ranks hold.
            if (k == "dropout" && !ins[1] && ins[0]) {
                Relation m = *ins[0];
                m.kind = K::Exact;
                m.coeff = 1;
                m.pieces.clear();
                m.logical = l.inputs[1];
                set(p.inputs[1], m);
                if (!rel_[static_cast<std::size_t>(p.inputs[1])]) return false;
                ins = {ins[0], &*rel_[static_cast<std::size_t>(p.inputs[1])]};
            }
            for (const auto* r : ins)
                if (!r || r->kind == K::PartialMax) return false;
            const auto& os = lshape(lout);
            Dims lo(os.size(), 0), hi = os;
            std::vector<bool> fixed(os.size(), false);
            for (std::size_t i = 0; i < ins.size(); ++i) {
                const auto& is = lshape(l.inputs[i]);
                const auto off = os.size() - is.size();
                for (std::size_t d = 0; d < is.size(); ++d) {
                    if (is[d] == 1 && os[d + off] != 1) continue;  // broadcast
                    auto& r = *ins[i];
                    if (fixed[d + off] && (lo[d + off] != r.lo[d] || hi[d + off] != r.hi[d])) return false;
                    lo[d + off] = r.lo[d];
                    hi[d + off] = r.hi[d];
                    fixed[d + off] = true;
                }
            }
            // Which inputs are partial, and may they be.
            std::vector<std::size_t> partial;
            for (std::size_t i = 0; i < ins.size(); ++i)
                if (ins[i]->kind == K::Partial) partial.push_back(i);
            Relation r = *ins[0];
            r.logical = lout;
            r.lo = lo;
            r.hi = hi;
            r.kind = partial.empty() ? K::Exact : K::Partial;
            if (!partial.empty()) r.pieces = ins[partial[0]]->pieces;
            for (auto i : partial)
                if (ins[i]->pieces != r.pieces) return false;
            auto allCoeff = [&](const Rational& c) {
                for (const auto* x : ins)
                    if (x->coeff != c) return false;
                return true;
            };
            if (k == "add" || k == "sub") {
                if (!partial.empty() && partial.size() != ins.size()) return false;
                if (!allCoeff(ins[0]->coeff)) return false;
            } else if (k == "mul") {
                if (partial.size() > 1) return false;
                r.coeff = ins[0]->coeff * ins[1]->coeff;
            } else if (k == "div") {
                if (partial.size() > 1 || (!partial.empty() && partial[0] != 0) || !ins[1]->coeff.isOne()) return false;
            } else if (k == "dropout") {
                if (!partial.empty() && partial[0] != 0) return false;
                if (!ins[1]->coeff.isOne()) return false;
            } else if (k == "gelu_backward" || k == "silu_backward" || k == "relu_backward" || k == "sigmoid_backward" || k == "tanh_backward" || k == "erf_backward") {
                if (!ins[0]->coeff.isOne() || (!partial.empty() && partial[0] != 1)) return false;
                r.coeff = ins[1]->coeff;
            } else if (isLinearUnary(k)) {
                // coefficient and partial sums pass through
            } else {
                if (!partial.empty() || !allCoeff(Rational(1))) return false;  // nonlinear
            }
            set(out, r);
            return rel_[static_cast<std::size_t>(out)].has_value();
        }
        const auto& in = *ins[0];
        if (in.kind == K::PartialMax) return false;
        if (k == "view" || k == "reshape") {
            auto b = reshapeBox(in.lo, in.hi, lshape(l.inputs[0]), lshape(lout));
            if (!b) return false;
            set(out, like(in, lout, b->first, b->second));
        } else if (k == "transpose") {
            auto d0 = l.attrs["dim0"].get<std::size_t>(), d1 = l.attrs["dim1"].get<std::size_t>();
            auto lo = in.lo, hi = in.hi;
            std::swap(lo[d0], lo[d1]);
            std::swap(hi[d0], hi[d1]);
            set(out, like(in, lout, lo, hi));
        } else if (k == "permute") {
            auto dims = l.attrs["dims"].get<std::vector<std::size_t>>();
            Dims lo, hi;
            for (auto d : dims) {
                lo.push_back(in.lo[d]);
                hi.push_back(in.hi[d]);
            }
            set(out, like(in, lout, lo, hi));
        } else if (k == "expand") {
            const auto& is = lshape(l.inputs[0]);
            const auto& os = lshape(lout);
            Dims lo(os.size(), 0), hi = os;
            const auto off = os.size() - is.size();
            for (std::size_t d = 0; d < is.size(); ++d)
                if (!(is[d] == 1 && os[d + off] != 1)) {
                    lo[d + off] = in.lo[d];
                    hi[d + off] = in.hi[d];
                }
            set(out, like(in, lout, lo, hi));
        } else if (k == "slice") {
            auto d = l.attrs["dim"].get<std::size_t>();
            auto s = l.attrs["start"].get<std::int64_t>(), e = l.attrs["end"].get<std::int64_t>();
            auto ps = p.attrs["start"].get<std::int64_t>(), pe = p.attrs["end"].get<std::int64_t>();
            auto lo = in.lo, hi = in.hi;
            lo[d] = in.lo[d] + ps - s;
            hi[d] = in.lo[d] + pe - s;
            if (lo[d] < 0 || hi[d] > e - s) return false;
            set(out, like(in, lout, lo, hi));
        } else if (k == "split") {
            auto d = l.attrs["dim"].get<std::size_t>();
            auto ls = l.attrs["sizes"].get<Dims>(), ps = p.attrs["sizes"].get<Dims>();
            if (ls.size() != ps.size()) return false;
            std::int64_t loff = 0, poff = 0;
            for (std::size_t j = 0; j < ls.size(); ++j) {
                auto lo = in.lo, hi = in.hi;
                // Output j of the parallel split holds the input's range [in.lo + poff, +ps[j]) of dim d,
                // which must lie in the logical output j's range [loff, loff + ls[j]).
                lo[d] = in.lo[d] + poff - loff;
                hi[d] = lo[d] + ps[j];
                if (lo[d] >= 0 && hi[d] <= ls[j]) set(p.outputs[j], like(in, l.outputs[j], lo, hi));
                loff += ls[j];
                poff += ps[j];
            }
        } else if (k == "concat") {
            auto d = l.attrs["dim"].get<std::size_t>();
            for (const auto* r : ins)
                if (!r || r->kind != in.kind || r->coeff != in.coeff || r->pieces != in.pieces) return false;
            auto lo = in.lo, hi = in.hi;
            for (std::size_t i = 0; i < ins.size(); ++i) {
                const auto& r = *ins[i];
                for (std::size_t e = 0; e < lo.size(); ++e)
                    if (e != d && (r.lo[e] != lo[e] || r.hi[e] != hi[e])) return false;
                if (r.lo[d] != 0 || r.hi[d] != lshape(l.inputs[i])[d]) return false;
            }
            hi[d] = lshape(lout)[d];
            set(out, like(in, lout, lo, hi));
        } else if (k == "matmul") {
            if (!ins[1] || in.kind != K::Exact || ins[1]->kind != K::Exact) return false;
            const auto& b = *ins[1];
            const auto ra = in.lo.size(), rb = b.lo.size();
            if (l.attrs.value("transpose_a", false) || l.attrs.value("transpose_b", false)) return false;
            // a [.., M, K] · b [K, N] or [.., K, N]
            if (in.lo[ra - 1] != b.lo[rb - 2] || in.hi[ra - 1] != b.hi[rb - 2]) return false;
            if (rb > 2)
                for (std::size_t d = 0; d + 2 < rb; ++d)
                    if (in.lo[d] != b.lo[d] || in.hi[d] != b.hi[d]) return false;
            Dims lo(in.lo.begin(), in.lo.end() - 1), hi(in.hi.begin(), in.hi.end() - 1);
            lo.push_back(b.lo[rb - 1]);
            hi.push_back(b.hi[rb - 1]);
            Relation r;
            r.logical = lout;
            r.lo = lo;
            r.hi = hi;
            r.coeff = in.coeff * b.coeff;
            const auto K = lshape(l.inputs[0])[ra - 1];
            if (in.lo[ra - 1] != 0 || in.hi[ra - 1] != K) {
                r.kind = K::Partial;
                r.pieces = {Piece{"matmul " + l.name, in.lo[ra - 1], in.hi[ra - 1], K}};
            }
            set(out, r);
        } else if (k == "sum" || k == "mean") {
            const auto& is = lshape(l.inputs[0]);
            std::vector<std::size_t> dims;
            if (l.attrs.contains("dims")) dims = l.attrs["dims"].get<std::vector<std::size_t>>();
            else
                for (std::size_t d = 0; d < is.size(); ++d) dims.push_back(d);
            const bool keep = l.attrs.value("keepdim", false);
            Dims lo, hi;
            std::int64_t whole = 1, part = 1;
            std::vector<std::size_t> cut;
            for (std::size_t d = 0; d < is.size(); ++d) {
                if (std::find(dims.begin(), dims.end(), d) != dims.end()) {
                    whole *= is[d];
                    part *= in.hi[d] - in.lo[d];
                    if (in.lo[d] != 0 || in.hi[d] != is[d]) cut.push_back(d);
                    if (keep) {
                        lo.push_back(0);
                        hi.push_back(1);
                    }
                } else {
                    lo.push_back(in.lo[d]);
                    hi.push_back(in.hi[d]);
                }
            }
            Relation r = like(in, lout, lo, hi);
            if (!cut.empty()) {
                if (in.kind != K::Exact || cut.size() != 1) return false;
                r.kind = K::Partial;
                auto d = cut[0];
                r.pieces = {Piece{k + " " + l.name + " dim " + std::to_string(d), in.lo[d], in.hi[d], is[d]}};
                if (k == "mean") r.coeff = in.coeff * Rational(part, whole);
            }
            set(out, r);
        } else if (k == "max") {
            if (in.kind != K::Exact || !in.coeff.isOne()) return false;
            auto d = l.attrs["dim"].get<std::size_t>();
            const bool keep = l.attrs.value("keepdim", false);
            const auto& is = lshape(l.inputs[0]);
            Dims lo = in.lo, hi = in.hi;
            if (keep) {
                lo[d] = 0;
                hi[d] = 1;
            } else {
                lo.erase(lo.begin() + static_cast<std::ptrdiff_t>(d));
                hi.erase(hi.begin() + static_cast<std::ptrdiff_t>(d));
            }
            Relation r = like(in, lout, lo, hi);
            if (in.lo[d] != 0 || in.hi[d] != is[d]) {
                r.kind = K::PartialMax;
                r.pieces = {Piece{"max " + l.name, in.lo[d], in.hi[d], is[d]}};
            }
            set(out, r);
        } else if (k == "softmax") {
            auto d = l.attrs["dim"].get<std::size_t>();
            if (in.kind != K::Exact || !in.coeff.isOne() || in.lo[d] != 0 || in.hi[d] != lshape(l.inputs[0])[d]) return false;
            set(out, like(in, lout, in.lo, in.hi));
        } else if (k == "softmax_backward") {
            auto d = l.attrs["dim"].get<std::size_t>();
            if (!ins[1] || in.kind != K::Exact || ins[1]->kind != K::Exact || !in.coeff.isOne() || !sameBox(in, *ins[1])) return false;
            if (in.lo[d] != 0 || in.hi[d] != lshape(l.inputs[0])[d]) return false;
            set(out, like(*ins[1], lout, in.lo, in.hi));
        } else if (k == "layernorm" || k == "rmsnorm") {
            for (std::size_t i = 1; i < ins.size(); ++i) {
                if (!ins[i] || ins[i]->kind != K::Exact || !ins[i]->coeff.isOne()) return false;
                const auto& ws = lshape(l.inputs[i]);
                if (ins[i]->lo != Dims(ws.size(), 0) || ins[i]->hi != ws) return false;
            }
            const auto& xs = lshape(l.inputs[0]);
            if (in.kind != K::Exact || !in.coeff.isOne() || in.lo.back() != 0 || in.hi.back() != xs.back()) return false;
            set(out, like(in, lout, in.lo, in.hi));
        } else if (k == "embedding") {
            // (ids, weight): ids exact; the weight's rows a vocabulary part, its columns any.
            const auto* w = ins[1];
            if (in.kind != K::Exact || !w || w->kind != K::Exact) return false;
            const auto V = lshape(l.inputs[1])[0];
            Dims lo = in.lo, hi = in.hi;
            lo.push_back(w->lo[1]);
            hi.push_back(w->hi[1]);
            Relation r;
            r.logical = lout;
            r.lo = lo;
            r.hi = hi;
            r.coeff = w->coeff;
            if (p.attrs.contains("parts")) {
                const auto width = pshape(p.inputs[1])[0];
                const auto index = p.attrs["index"].get<std::int64_t>();
                if (w->lo[0] != index * width || w->hi[0] != (index + 1) * width) return false;
                r.kind = K::Partial;
                r.pieces = {Piece{"vocabulary " + l.name, w->lo[0], w->hi[0], V}};
            } else if (w->lo[0] != 0 || w->hi[0] != V) {
                return false;
            }
            set(out, r);
        } else if (k == "target_logit") {
            const auto* y = ins[1];
            if (in.kind != K::Exact || !y || y->kind != K::Exact) return false;
            const auto& xs = lshape(l.inputs[0]);
            const auto C = xs.back();
            Dims lo(in.lo.begin(), in.lo.end() - 1), hi(in.hi.begin(), in.hi.end() - 1);
            if (lo != y->lo || hi != y->hi) return false;
            Relation r;
            r.logical = lout;
            r.lo = lo;
            r.hi = hi;
            r.coeff = in.coeff;
            if (p.attrs.contains("parts")) {
                const auto width = pshape(p.inputs[0]).back();
                const auto index = p.attrs["index"].get<std::int64_t>();
                if (in.lo.back() != index * width || in.hi.back() != (index + 1) * width) return false;
                r.kind = K::Partial;
                r.pieces = {Piece{"vocabulary " + l.name, in.lo.back(), in.hi.back(), C}};
            } else if (in.lo.back() != 0 || in.hi.back() != C) {
                return false;
            }
            set(out, r);
        } else {
            return false;
        }
        return rel_[static_cast<std::size_t>(out)].has_value();
    }

    /// An op no logical op matches: a slice or split of what a tensor holds, or nothing.
    void parallelOnly(const LoweredOp& op, const std::vector<const Relation*>& ins) {
        if (ins.empty() || !ins[0] || ins[0]->kind != Relation::Kind::Exact) return;
        const auto& in = *ins[0];
        if (op.kind == "slice") {
            auto d = op.attrs["dim"].get<std::size_t>();
            auto lo = in.lo, hi = in.hi;
            lo[d] = in.lo[d] + op.attrs["start"].get<std::int64_t>();
            hi[d] = in.lo[d] + op.attrs["end"].get<std::int64_t>();
            set(op.outputs[0], like(in, in.logical, lo, hi));
        } else if (op.kind == "split") {
            auto d = op.attrs["dim"].get<std::size_t>();
            auto sizes = op.attrs["sizes"].get<Dims>();
            std::int64_t at = in.lo[d];
            for (std::size_t j = 0; j < sizes.size(); ++j) {
                auto lo = in.lo, hi = in.hi;
                lo[d] = at;
                hi[d] = at + sizes[j];
                at += sizes[j];
                set(op.outputs[j], like(in, in.logical, lo, hi));
            }
        }
    }

    void collective(const LoweredOp& op) {
        using K = Relation::Kind;
        std::vector<const Relation*> ins;
        for (int t : op.inputs) {
            if (!rel_[static_cast<std::size_t>(t)]) return;
            ins.push_back(&*rel_[static_cast<std::size_t>(t)]);
        }
        const auto& a = *ins[0];
        for (const auto* r : ins)
            if (r->logical != a.logical) return;
        const auto n = static_cast<std::int64_t>(op.group.size());
        if (op.kind == "all_reduce") {
            const auto reduce = op.attrs.value("reduce", std::string("sum"));
            for (const auto* r : ins)
                if (!sameBox(*r, a) || r->kind != a.kind || r->coeff != a.coeff) return;
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
            // Concatenated along dim 0 in group order: consecutive ranges of one logical dim.
            for (const auto* r : ins)
                if (r->kind != K::Exact || r->coeff != a.coeff) return;
            Relation out = a;
            for (std::size_t i = 1; i < ins.size(); ++i) {
                const auto& r = *ins[i];
                for (std::size_t d = 1; d < a.lo.size(); ++d)
                    if (r.lo[d] != a.lo[d] || r.hi[d] != a.hi[d]) return;
                if (r.lo[0] != out.hi[0]) return;
                out.hi[0] = r.hi[0];
            }
            for (int t : op.outputs) set(t, out);
        } else if (op.kind == "reduce_scatter") {
            for (const auto* r : ins)
                if (!sameBox(*r, a) || r->kind != K::Partial || r->coeff != a.coeff) return;
            if (!piecesTile(ins)) return;
            const auto chunk = (a.hi[0] - a.lo[0]) / n;
            for (std::size_t k = 0; k < op.outputs.size(); ++k) {
                Relation out = a;
                out.kind = K::Exact;
                out.pieces.clear();
                out.lo[0] = a.lo[0] + chunk * static_cast<std::int64_t>(k);
                out.hi[0] = out.lo[0] + chunk;
                set(op.outputs[k], out);
            }
        } else if (op.kind == "broadcast") {
            if (a.kind != K::Exact) return;
            for (int t : op.outputs) set(t, a);
        }
    }
};

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
    bool full = true;
    const auto& shape = L.tensors[static_cast<std::size_t>(r.logical)].shape;
    for (std::size_t d = 0; d < shape.size(); ++d)
        if (r.lo[d] != 0 || r.hi[d] != shape[d]) full = false;
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

    Inference inf(L, P);
    inf.relateInputs();
    inf.run();
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
            if (inferred && inferred->logical == lo.tensor && inferred->kind == Relation::Kind::Exact && inferred->coeff.isOne()) {
                want = *inferred;
            } else if (P.tensors[static_cast<std::size_t>(po.tensor)].shape == ls) {
                want.logical = lo.tensor;  // the whole result, as a replica
                want.lo.assign(ls.size(), 0);
                want.hi = ls;
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
        for (std::size_t k = 0; k < ts.size(); ++k) byBox[{rs[k].lo, rs[k].hi}].push_back(k);
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
