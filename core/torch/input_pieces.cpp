#include "torch/input_pieces.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace tv::torch {

using nlohmann::json;

namespace {

using Dims = std::vector<std::int64_t>;

/// A tensor known to be the concatenation of `parts` along `dim` (the concatenation itself made
/// only where an op needs it whole).
struct Concatenation {
    std::size_t dim = 0;
    std::vector<int> parts;
};

/// "name@r1" with a tag: "name.TAG@r1".
std::string tagged(const std::string& name, const std::string& tag) {
    const auto at = name.rfind("@r");
    if (at == std::string::npos) return name + "." + tag;
    return name.substr(0, at) + "." + tag + name.substr(at);
}

bool distributesElementwise(const std::string& k) {
    static const std::set<std::string> unary = {"neg", "add_scalar", "mul_scalar", "div_sqrt", "exp", "log", "sqrt", "rsqrt", "tanh",
                                                "sigmoid", "relu", "silu", "erf", "gelu", "identity", "pow", "trunc"};
    return unary.count(k) > 0;
}
bool binaryElementwise(const std::string& k) { return k == "add" || k == "sub" || k == "mul" || k == "div"; }

class Distributor {
public:
    explicit Distributor(LoweredProgram& p) : p_(p) {}

    std::vector<std::vector<int>> run(const std::vector<InputPieces>& declared) {
        std::vector<std::vector<int>> pieces;
        for (const auto& d : declared) {
            auto& t = p_.tensors[static_cast<std::size_t>(d.tensor)];
            for (auto& ins : p_.inputs)
                for (auto& in : ins)
                    if (in == d.tensor) in = -1;
            t.input = -1;
            Concatenation c;
            c.dim = d.dim;
            for (std::size_t k = 0; k < d.extents.size(); ++k) {
                auto shape = p_.tensors[static_cast<std::size_t>(d.tensor)].shape;
                shape[d.dim] = d.extents[k];
                c.parts.push_back(newTensor(d.tensor, "piece" + std::to_string(k), shape));
            }
            pieces.push_back(c.parts);
            cat_[d.tensor] = std::move(c);
        }
        for (int op : topologicalOrder(p_)) place(p_.ops[static_cast<std::size_t>(op)]);
        for (auto& outs : p_.outputs)
            for (auto& o : outs)
                if (o.tensor >= 0) {
                    o.tensor = resolve(o.tensor);
                    make(o.tensor);
                }
        p_.ops = std::move(out_);
        for (auto& t : p_.tensors) t.producer = -1;
        for (std::size_t o = 0; o < p_.ops.size(); ++o)
            for (int t : p_.ops[o].outputs) p_.tensors[static_cast<std::size_t>(t)].producer = static_cast<int>(o);
        return pieces;
    }

private:
    LoweredProgram& p_;
    std::vector<LoweredOp> out_;
    std::map<int, Concatenation> cat_;
    std::map<int, int> alias_;  ///< a dropped op's result -> the tensor it is
    std::set<int> made_;
    std::set<int> derived_;  ///< pieces and the tensors made from them

    const Dims& shape(int t) const { return p_.tensors[static_cast<std::size_t>(t)].shape; }
    int resolve(int t) const {
        for (auto it = alias_.find(t); it != alias_.end(); it = alias_.find(t)) t = it->second;
        return t;
    }
    const Concatenation* catOf(int t) const {
        auto it = cat_.find(t);
        return it == cat_.end() ? nullptr : &it->second;
    }
    int newTensor(int like, const std::string& tag, const Dims& s) {
        LoweredTensor t;
        const auto& l = p_.tensors[static_cast<std::size_t>(like)];
        t.name = tagged(l.name, tag);
        t.shape = s;
        t.isInt = l.isInt;
        t.rank = l.rank;
        p_.tensors.push_back(std::move(t));
        derived_.insert(static_cast<int>(p_.tensors.size()) - 1);
        return static_cast<int>(p_.tensors.size()) - 1;
    }
    int emit(const LoweredOp& from, const std::string& kind, std::vector<int> inputs, int like, const std::string& tag, const Dims& s, json attrs) {
        int t = newTensor(like, tag, s);
        LoweredOp op;
        op.name = tagged(from.name, tag);
        op.kind = kind;
        op.attrs = std::move(attrs);
        op.inputs = std::move(inputs);
        op.outputs = {t};
        op.rank = from.rank;
        op.torchNode = from.torchNode;
        op.torchTarget = from.torchTarget;
        op.source = from.source;
        out_.push_back(std::move(op));
        return t;
    }
    /// Makes the concatenation of t where an op needs it whole: one `concat` op writing t itself.
    void make(int t) {
        const auto* c = catOf(t);
        if (!c || made_.count(t)) return;
        made_.insert(t);
        LoweredOp op;
        const auto& x = p_.tensors[static_cast<std::size_t>(t)];
        op.name = tagged(x.name, "joined");
        op.kind = "concat";
        op.attrs = {{"dim", c->dim}};
        op.inputs = c->parts;
        op.outputs = {t};
        op.rank = x.rank;
        // The op that made t before, if any, names the source line.
        if (x.producer >= 0) {
            const auto& was = p_.ops[static_cast<std::size_t>(x.producer)];
            op.torchNode = was.torchNode;
            op.torchTarget = was.torchTarget;
            op.source = was.source;
        }
        out_.push_back(std::move(op));
    }
    void keep(LoweredOp op) {
        bool fromPieces = false;
        for (int t : op.inputs) fromPieces = fromPieces || derived_.count(t);
        if (fromPieces) derived_.insert(op.outputs.begin(), op.outputs.end());
        for (int t : op.inputs) make(t);
        out_.push_back(std::move(op));
    }

    void place(LoweredOp op) {
        for (auto& t : op.inputs) t = resolve(t);
        // A concatenation that joins parts of pieces again (a slice_scatter into a fused
        // projection's result) is kept as parts too, so that the split after it finds them.
        bool any = false;
        for (int t : op.inputs) any = any || catOf(t) || (op.kind == "concat" && derived_.count(t));
        if (!any || !op.group.empty() || !distribute(op)) keep(std::move(op));
    }

    /// The parts of x's range [lo, hi) along its concatenation: whole parts as they are, others sliced.
    std::vector<int> range(const LoweredOp& op, int result, const Concatenation& c, std::int64_t lo, std::int64_t hi, const std::string& tag) {
        std::vector<int> r;
        std::int64_t off = 0;
        for (std::size_t k = 0; k < c.parts.size(); ++k) {
            const auto e = shape(c.parts[k])[c.dim];
            const auto a = std::max(lo, off), b = std::min(hi, off + e);
            if (a < b) {
                if (a == off && b == off + e) r.push_back(c.parts[k]);
                else {
                    auto s = shape(c.parts[k]);
                    s[c.dim] = b - a;
                    r.push_back(emit(op, "slice", {c.parts[k]}, result, tag + "part" + std::to_string(k), s,
                                     {{"dim", c.dim}, {"start", a - off}, {"end", b - off}}));
                }
            }
            off += e;
        }
        return r;
    }
    void result(int t, std::size_t dim, std::vector<int> parts) {
        if (parts.size() == 1) alias_[t] = parts[0];
        else cat_[t] = Concatenation{dim, std::move(parts)};
    }

    bool distribute(const LoweredOp& op) {
        const auto& k = op.kind;
        const int out = op.outputs.empty() ? -1 : op.outputs[0];
        if (out < 0) return false;
        if ((k == "transpose" || k == "permute" || distributesElementwise(k)) && op.inputs.size() == 1) {
            const auto& c = *catOf(op.inputs[0]);
            std::size_t nd = c.dim;
            if (k == "transpose") {
                const auto d0 = op.attrs.at("dim0").get<std::size_t>(), d1 = op.attrs.at("dim1").get<std::size_t>();
                nd = c.dim == d0 ? d1 : c.dim == d1 ? d0 : c.dim;
            } else if (k == "permute") {
                const auto dims = op.attrs.at("dims").get<std::vector<std::size_t>>();
                nd = static_cast<std::size_t>(std::find(dims.begin(), dims.end(), c.dim) - dims.begin());
                if (nd >= dims.size()) return false;
            }
            std::vector<int> parts;
            for (std::size_t j = 0; j < c.parts.size(); ++j) {
                auto s = shape(out);
                s[nd] = shape(c.parts[j])[c.dim];
                parts.push_back(emit(op, k, {c.parts[j]}, out, "part" + std::to_string(j), s, op.attrs));
            }
            result(out, nd, std::move(parts));
            return true;
        }
        if (binaryElementwise(k) && op.inputs.size() == 2) return elementwise(op);
        if (k == "matmul" && op.inputs.size() == 2) {
            if (op.attrs.value("transpose_a", false) || op.attrs.value("transpose_b", false)) return false;
            const int a = op.inputs[0], b = op.inputs[1];
            const auto* ca = catOf(a);
            const auto* cb = catOf(b);
            const auto ra = shape(a).size(), rb = shape(b).size();
            if (cb && !ca && cb->dim + 1 == rb && rb >= 2) {
                std::vector<int> parts;
                for (std::size_t j = 0; j < cb->parts.size(); ++j) {
                    auto s = shape(out);
                    s.back() = shape(cb->parts[j]).back();
                    parts.push_back(emit(op, "matmul", {a, cb->parts[j]}, out, "part" + std::to_string(j), s, op.attrs));
                }
                result(out, shape(out).size() - 1, std::move(parts));
                return true;
            }
            if (ca && !cb && rb == 2 && ra >= 2 && ca->dim + 1 < ra) {
                std::vector<int> parts;
                for (std::size_t j = 0; j < ca->parts.size(); ++j) {
                    auto s = shape(out);
                    s[ca->dim] = shape(ca->parts[j])[ca->dim];
                    parts.push_back(emit(op, "matmul", {ca->parts[j], b}, out, "part" + std::to_string(j), s, op.attrs));
                }
                result(out, ca->dim, std::move(parts));
                return true;
            }
            return false;
        }
        if (k == "slice" && op.inputs.size() == 1) {
            const auto& c = *catOf(op.inputs[0]);
            const auto d = op.attrs.at("dim").get<std::size_t>();
            const auto s = op.attrs.at("start").get<std::int64_t>(), e = op.attrs.at("end").get<std::int64_t>();
            if (d == c.dim) {
                result(out, d, range(op, out, c, s, e, ""));
            } else {
                std::vector<int> parts;
                for (std::size_t j = 0; j < c.parts.size(); ++j) {
                    auto sh = shape(out);
                    sh[c.dim] = shape(c.parts[j])[c.dim];
                    parts.push_back(emit(op, "slice", {c.parts[j]}, out, "part" + std::to_string(j), sh, op.attrs));
                }
                result(out, c.dim, std::move(parts));
            }
            return true;
        }
        if (k == "split" && op.inputs.size() == 1) {
            const auto& c = *catOf(op.inputs[0]);
            if (op.attrs.at("dim").get<std::size_t>() != c.dim) return false;
            const auto sizes = op.attrs.at("sizes").get<Dims>();
            if (sizes.size() != op.outputs.size()) return false;
            std::int64_t off = 0;
            for (std::size_t j = 0; j < sizes.size(); ++j) {
                result(op.outputs[j], c.dim, range(op, op.outputs[j], c, off, off + sizes[j], "out" + std::to_string(j) + "."));
                off += sizes[j];
            }
            return true;
        }
        if (k == "concat") {
            const auto d = op.attrs.at("dim").get<std::size_t>();
            bool along = false;
            for (int t : op.inputs)
                if (const auto* c = catOf(t); (c && c->dim == d) || (!c && derived_.count(t))) along = true;
            if (!along) return false;
            std::vector<int> parts;
            for (int t : op.inputs) {
                const auto* c = catOf(t);
                if (c && c->dim == d) parts.insert(parts.end(), c->parts.begin(), c->parts.end());
                else {
                    make(t);
                    parts.push_back(t);
                }
            }
            result(out, d, std::move(parts));
            return true;
        }
        return false;
    }

    /// add/sub/mul/div with concatenated operands along one dim of the result (the same extents),
    /// the others broadcast along it or sliced at the parts' boundaries.
    bool elementwise(const LoweredOp& op) {
        const int out = op.outputs[0];
        const Dims os = shape(out);  // a copy: emitting grows the tensors
        std::size_t D = 0;
        std::vector<std::int64_t> extents;
        bool found = false;
        for (int t : op.inputs) {
            const auto* c = catOf(t);
            if (!c) continue;
            const auto& s = shape(t);
            if (s.size() > os.size()) return false;
            const auto aligned = c->dim + (os.size() - s.size());
            if (s[c->dim] != os[aligned]) return false;
            std::vector<std::int64_t> ex;
            for (int part : c->parts) ex.push_back(shape(part)[c->dim]);
            if (found && (aligned != D || ex != extents)) return false;
            D = aligned;
            extents = std::move(ex);
            found = true;
        }
        if (!found) return false;
        std::vector<std::vector<int>> operands(extents.size());
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            const int t = op.inputs[i];
            const Dims s = shape(t);
            const auto off = os.size() - s.size();
            if (const auto* c = catOf(t)) {
                for (std::size_t j = 0; j < extents.size(); ++j) operands[j].push_back(c->parts[j]);
            } else if (D < off || s[D - off] == 1) {
                for (auto& o : operands) o.push_back(t);  // broadcast along the parts' dim
            } else {
                std::int64_t at = 0;
                for (std::size_t j = 0; j < extents.size(); ++j) {
                    auto ps = s;
                    ps[D - off] = extents[j];
                    operands[j].push_back(emit(op, "slice", {t}, out, "in" + std::to_string(i) + ".cut" + std::to_string(j), ps,
                                               {{"dim", D - off}, {"start", at}, {"end", at + extents[j]}}));
                    at += extents[j];
                }
            }
        }
        std::vector<int> parts;
        for (std::size_t j = 0; j < extents.size(); ++j) {
            auto s = os;
            s[D] = extents[j];
            parts.push_back(emit(op, op.kind, operands[j], out, "part" + std::to_string(j), s, op.attrs));
        }
        result(out, D, std::move(parts));
        return true;
    }
};

/// Slices and splits of a concatenation that read inside one of its inputs read that input.
class CopyForwarding {
public:
    CopyForwarding(LoweredProgram& p, bool mergeRepeatedCalls) : p_(p), merge_(mergeRepeatedCalls) {}
    void run() {
        std::vector<LoweredOp> out;
        out.reserve(p_.ops.size());
        std::map<std::string, std::vector<int>> calls;  // a call (kind, attributes, inputs) -> its outputs
        for (auto& op : p_.ops) {
            for (auto& t : op.inputs) t = resolve(t);  // in place: a later slice reads its concat's inputs resolved
            if ((op.kind == "slice" || op.kind == "split") && op.inputs.size() == 1 && forward(op, out)) continue;
            if (merge_ && !op.inputs.empty() && op.group.empty()) {
                // The same call on the same tensors gives the same values (every operator is a
                // function of its inputs and attributes; a dropout's mask is an input of its own):
                // its results are the first call's. A graph that views one tensor twice then has
                // one view, and an op reading either is paired with the same single-device op.
                std::string key = op.kind + "|" + op.attrs.dump();
                for (int t : op.inputs) key += "|" + std::to_string(t);
                auto [it, fresh] = calls.try_emplace(key, op.outputs);
                if (!fresh && it->second.size() == op.outputs.size()) {
                    bool sameShapes = true;
                    for (std::size_t k = 0; k < op.outputs.size(); ++k)
                        sameShapes = sameShapes && p_.tensors[static_cast<std::size_t>(op.outputs[k])].shape ==
                                                       p_.tensors[static_cast<std::size_t>(it->second[k])].shape;
                    if (sameShapes) {
                        for (std::size_t k = 0; k < op.outputs.size(); ++k) alias_[op.outputs[k]] = it->second[k];
                        continue;
                    }
                }
            }
            out.push_back(op);
        }
        for (auto& outs : p_.outputs)
            for (auto& o : outs)
                if (o.tensor >= 0) o.tensor = resolve(o.tensor);
        // A split whose results are not all read: slices of the ones read (an unread result would
        // be a result of the program that nothing describes).
        std::set<int> read;
        auto readBy = [&] {
            read.clear();
            for (const auto& op : out) read.insert(op.inputs.begin(), op.inputs.end());
            for (const auto& outs : p_.outputs)
                for (const auto& o : outs) read.insert(o.tensor);
        };
        readBy();
        // Ops nothing reads any more (a concatenation whose every reader now reads its inputs)
        // go, so that inference never pairs an op with one the program no longer runs.
        for (bool dropped = true; dropped;) {
            dropped = false;
            std::vector<LoweredOp> live;
            for (auto& op : out) {
                bool used = false;
                for (int t : op.outputs) used = used || read.count(t);
                if (used) live.push_back(std::move(op));
                else dropped = true;
            }
            out = std::move(live);
            if (dropped) readBy();
        }
        p_.ops.clear();
        for (auto& op : out) {
            bool all = true;
            for (int t : op.outputs) all = all && read.count(t);
            if (op.kind != "split" || all) {
                p_.ops.push_back(std::move(op));
                continue;
            }
            std::int64_t off = 0;
            const auto sizes = op.attrs.at("sizes").get<std::vector<std::int64_t>>();
            for (std::size_t j = 0; j < op.outputs.size() && j < sizes.size(); ++j) {
                if (read.count(op.outputs[j])) {
                    LoweredOp s = op;
                    s.kind = "slice";
                    s.outputs = {op.outputs[j]};
                    s.attrs = {{"dim", op.attrs.at("dim")}, {"start", off}, {"end", off + sizes[j]}};
                    s.name = tagged(op.name, "out" + std::to_string(j));
                    p_.ops.push_back(std::move(s));
                }
                off += sizes[j];
            }
        }
        for (auto& t : p_.tensors) t.producer = -1;
        for (std::size_t o = 0; o < p_.ops.size(); ++o)
            for (int t : p_.ops[o].outputs) p_.tensors[static_cast<std::size_t>(t)].producer = static_cast<int>(o);
    }

private:
    LoweredProgram& p_;
    bool merge_ = false;
    std::map<int, int> alias_;

    int resolve(int t) const {
        for (auto it = alias_.find(t); it != alias_.end(); it = alias_.find(t)) t = it->second;
        return t;
    }

    /// Whether [lo, hi) of `t` along `dim` lies inside one input of the concat making t: that
    /// input, and the range in it.
    bool inside(int t, std::size_t dim, std::int64_t lo, std::int64_t hi, int& from, std::int64_t& at) const {
        const int prod = p_.tensors[static_cast<std::size_t>(t)].producer;
        if (prod < 0) return false;
        const auto& c = p_.ops[static_cast<std::size_t>(prod)];
        if (c.kind != "concat" || c.attrs.value("dim", std::size_t{0}) != dim) return false;
        std::int64_t off = 0;
        for (int in : c.inputs) {
            const auto e = p_.tensors[static_cast<std::size_t>(in)].shape[dim];
            if (lo >= off && hi <= off + e) {
                from = in;
                at = lo - off;
                return true;
            }
            off += e;
        }
        return false;
    }

    bool forward(const LoweredOp& op, std::vector<LoweredOp>& out) {
        const auto dim = op.attrs.at("dim").get<std::size_t>();
        std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
        if (op.kind == "slice") {
            ranges.push_back({op.attrs.at("start").get<std::int64_t>(), op.attrs.at("end").get<std::int64_t>()});
        } else {
            std::int64_t off = 0;
            for (auto z : op.attrs.at("sizes").get<std::vector<std::int64_t>>()) {
                ranges.push_back({off, off + z});
                off += z;
            }
        }
        if (ranges.size() != op.outputs.size()) return false;
        std::vector<int> from(ranges.size());
        std::vector<std::int64_t> at(ranges.size());
        for (std::size_t j = 0; j < ranges.size(); ++j)
            if (!inside(op.inputs[0], dim, ranges[j].first, ranges[j].second, from[j], at[j])) return false;
        for (std::size_t j = 0; j < ranges.size(); ++j) {
            const int o = op.outputs[j];
            const auto e = ranges[j].second - ranges[j].first;
            if (at[j] == 0 && p_.tensors[static_cast<std::size_t>(from[j])].shape[dim] == e) {
                alias_[o] = from[j];  // exactly one input of the concatenation
                continue;
            }
            LoweredOp s = op;
            s.kind = "slice";
            s.inputs = {from[j]};
            s.outputs = {o};
            s.attrs = {{"dim", dim}, {"start", at[j]}, {"end", at[j] + e}};
            if (ranges.size() > 1) s.name = tagged(op.name, "out" + std::to_string(j));
            out.push_back(std::move(s));
        }
        return true;
    }
};

}  // namespace

void forwardCopies(LoweredProgram& program, bool mergeRepeatedCalls) { CopyForwarding(program, mergeRepeatedCalls).run(); }

std::vector<std::vector<int>> splitInputPieces(LoweredProgram& program, const std::vector<InputPieces>& declared) {
    if (declared.empty()) return {};
    return Distributor(program).run(declared);
}

}  // namespace tv::torch
