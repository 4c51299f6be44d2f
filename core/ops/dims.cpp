#include "ops/dims.hpp"

#include <numeric>
#include <set>
#include <stdexcept>
#include <string>

namespace tv {

namespace {

using json = nlohmann::json;

std::int64_t attrInt(const json& a, const char* k, std::int64_t def) {
    auto it = a.find(k);
    return it == a.end() || !it->is_number_integer() ? def : it->get<std::int64_t>();
}
int normDim(std::int64_t d, std::size_t rank) { return static_cast<int>(d < 0 ? d + static_cast<std::int64_t>(rank) : d); }

/// Elementwise with broadcasting: inputs aligned to the right of the output.
OpDims elementwise(const std::vector<Shape>& in, const std::vector<Shape>& out) {
    OpDims d;
    const auto& o = out[0];
    std::vector<int> labels;
    for (auto s : o) labels.push_back(d.add(s));
    for (const auto& s : in) {
        std::vector<int> l(s.size(), -1);
        for (std::size_t j = 0; j < s.size(); ++j) {
            auto od = o.size() - s.size() + j;
            l[j] = (s[j] == o[od]) ? labels[od] : -1;
        }
        d.in.push_back(l);
    }
    for (std::size_t k = 0; k < out.size(); ++k) d.out.push_back(labels);
    return d;
}

/// Reshape: dims grouped by equal products; only a group's outermost dims correspond.
OpDims reshapeDims(const Shape& a, const Shape& b) {
    OpDims d;
    std::vector<int> li(a.size(), -1), lo(b.size(), -1);
    std::size_t i = 0, j = 0;
    while (i < a.size() || j < b.size()) {
        if (i < a.size() && a[i] == 1 && !(j < b.size() && b[j] == 1)) { ++i; continue; }
        if (j < b.size() && b[j] == 1 && !(i < a.size() && a[i] == 1)) { ++j; continue; }
        if (i >= a.size() || j >= b.size()) break;
        if (a[i] == 1 && b[j] == 1) { ++i; ++j; continue; }
        std::size_t gi = i, gj = j;
        std::int64_t pa = a[i++], pb = b[j++];
        while (pa != pb) {
            if (pa < pb) {
                if (i >= a.size()) break;
                pa *= a[i++];
            } else {
                if (j >= b.size()) break;
                pb *= b[j++];
            }
        }
        int l = d.add(std::gcd(a[gi], b[gj]));
        li[gi] = l;
        lo[gj] = l;
    }
    d.in.push_back(li);
    d.out.push_back(lo);
    return d;
}

}  // namespace

OpDims operatorDims(std::string_view kindName, const nlohmann::json& a, const std::vector<Shape>& in, const std::vector<Shape>& out) {
    const std::string k(kindName);
    static const std::set<std::string> kElementwise = {
        "add", "sub", "mul", "div", "add_scalar", "mul_scalar", "div_sqrt", "pow", "neg", "exp", "log", "sqrt", "rsqrt",
        "sigmoid", "tanh", "erf", "relu", "silu", "gelu", "identity", "relu_backward", "sigmoid_backward",
        "tanh_backward", "silu_backward", "gelu_backward", "erf_backward", "dropout", "sgd", "adamw", "zeros_like", "clip_coeff", "trunc"};
    if (kElementwise.count(k)) return elementwise(in, out);
    OpDims d;
    if (k == "linear") {
        const auto& x = in[0];
        std::vector<int> lx;
        for (std::size_t i = 0; i + 1 < x.size(); ++i) lx.push_back(d.add(x[i]));
        int kk = d.add(x.back()), n = d.add(in[1][0]);
        d.labels[static_cast<std::size_t>(kk)].sums = true;
        auto lo = lx;
        lx.push_back(kk);
        lo.push_back(n);
        d.in = {lx, {n, kk}};
        if (in.size() == 3) d.in.push_back({n});
        d.out = {lo};
        return d;
    }
    if (k == "matmul") {
        bool ta = a.value("transpose_a", false), tb = a.value("transpose_b", false);
        const auto& A = in[0];
        const auto& B = in[1];
        const auto& O = out[0];
        std::vector<int> lo;
        for (std::size_t i = 0; i + 2 < O.size(); ++i) lo.push_back(d.add(O[i]));
        int m = d.add(O[O.size() - 2]), n = d.add(O.back());
        int kk = d.add(ta ? A[A.size() - 2] : A.back());
        d.labels[static_cast<std::size_t>(kk)].sums = true;
        auto batchOf = [&](const Shape& s) {
            std::vector<int> l;
            for (std::size_t i = 0; i + 2 < s.size(); ++i) {
                auto od = O.size() - 2 - (s.size() - 2) + i;
                l.push_back(s[i] == O[od] ? lo[od] : -1);
            }
            return l;
        };
        auto la = batchOf(A), lb = batchOf(B);
        if (ta) { la.push_back(kk); la.push_back(m); } else { la.push_back(m); la.push_back(kk); }
        if (tb) { lb.push_back(n); lb.push_back(kk); } else { lb.push_back(kk); lb.push_back(n); }
        lo.push_back(m);
        lo.push_back(n);
        d.in = {la, lb};
        d.out = {lo};
        return d;
    }
    if (k == "sum" || k == "mean" || k == "sum_backward" || k == "mean_backward") {
        bool backward = k.ends_with("_backward");
        const auto& full = backward ? out[0] : in[0];
        std::vector<bool> reduced(full.size(), !a.contains("dims"));
        if (a.contains("dims"))
            for (const auto& x : a["dims"]) reduced[static_cast<std::size_t>(normDim(x.get<std::int64_t>(), full.size()))] = true;
        bool keep = a.value("keepdim", false);
        std::vector<int> lf, lr;
        for (std::size_t i = 0; i < full.size(); ++i) {
            int l = d.add(full[i]);
            lf.push_back(l);
            if (reduced[i]) {
                d.labels[static_cast<std::size_t>(l)].sums = true;
                d.labels[static_cast<std::size_t>(l)].mean = k.starts_with("mean");
                if (keep) lr.push_back(-1);
            } else {
                lr.push_back(l);
            }
        }
        d.in = {backward ? lr : lf};
        d.out = {backward ? lf : lr};
        return d;
    }
    if (k == "max" || k == "max_backward" || k == "softmax" || k == "softmax_backward") {
        const auto& x = in[0];
        int dim = normDim(attrInt(a, "dim", -1), x.size());
        std::vector<int> l;
        for (std::size_t i = 0; i < x.size(); ++i) l.push_back(static_cast<int>(i) == dim ? -1 : d.add(x[i]));
        if (k == "max") {
            auto lo = l;
            if (!a.value("keepdim", false)) lo.erase(lo.begin() + dim);
            d.in = {l};
            d.out = {lo};
        } else {
            d.in = {l, l};
            d.out = {l};
        }
        return d;
    }
    if (k == "topk_mask") {
        // Routing reads each token's scores over all experts (the last dim) whole.
        const auto& x = in[0];
        std::vector<int> l;
        for (std::size_t i = 0; i + 1 < x.size(); ++i) l.push_back(d.add(x[i]));
        l.push_back(-1);
        d.in = {l};
        d.out = {l};
        return d;
    }
    if (k == "rmsnorm" || k == "layernorm" || k == "rmsnorm_backward" || k == "layernorm_backward") {
        const auto& x = in[0];
        std::vector<int> l;
        for (std::size_t i = 0; i + 1 < x.size(); ++i) {
            int li = d.add(x[i]);
            d.labels[static_cast<std::size_t>(li)].sums = true;  // the weight gradients sum over rows
            l.push_back(li);
        }
        l.push_back(-1);
        std::vector<int> w{-1};
        if (k == "rmsnorm") d.in = {l, w}, d.out = {l};
        if (k == "layernorm") d.in = {l, w, w}, d.out = {l};
        if (k == "rmsnorm_backward") d.in = {l, w, l}, d.out = {l, w};
        if (k == "layernorm_backward") d.in = {l, w, l}, d.out = {l, w, w};
        return d;
    }
    if (k == "reshape" || k == "view") return reshapeDims(in[0], out[0]);
    if (k == "permute" || k == "transpose") {
        const auto& x = in[0];
        std::vector<int> l;
        for (auto s : x) l.push_back(d.add(s));
        std::vector<std::int64_t> perm(x.size());
        std::iota(perm.begin(), perm.end(), 0);
        if (k == "permute")
            for (std::size_t i = 0; i < x.size(); ++i) perm[i] = normDim(a["dims"][i].get<std::int64_t>(), x.size());
        else
            std::swap(perm[static_cast<std::size_t>(normDim(attrInt(a, "dim0", 0), x.size()))],
                      perm[static_cast<std::size_t>(normDim(attrInt(a, "dim1", 1), x.size()))]);
        std::vector<int> lo;
        for (auto p : perm) lo.push_back(l[static_cast<std::size_t>(p)]);
        d.in = {l};
        d.out = {lo};
        return d;
    }
    if (k == "slice" || k == "slice_backward" || k == "concat" || k == "split" || k == "chunk") {
        const auto& x = in[0];
        int dim = normDim(attrInt(a, "dim", 0), x.size());
        std::vector<int> l;
        for (std::size_t i = 0; i < x.size(); ++i) l.push_back(static_cast<int>(i) == dim ? -1 : d.add(x[i]));
        d.in.assign(in.size(), l);
        d.out.assign(out.size(), l);
        return d;
    }
    if (k == "expand" || k == "sum_to") {
        bool ex = k == "expand";
        const auto& big = ex ? out[0] : in[0];
        const auto& small = ex ? in[0] : out[0];
        std::vector<int> lb, ls(small.size(), -1);
        for (std::size_t i = 0; i < big.size(); ++i) {
            int l = d.add(big[i]);
            lb.push_back(l);
            bool inSmall = i + small.size() >= big.size() && small[i + small.size() - big.size()] == big[i];
            if (inSmall)
                ls[i + small.size() - big.size()] = l;
            else if (!ex)
                d.labels[static_cast<std::size_t>(l)].sums = true;
        }
        d.in = {ex ? ls : lb};
        d.out = {ex ? lb : ls};
        return d;
    }
    if (k == "embedding") {
        std::vector<int> li;
        for (auto s : in[0]) li.push_back(d.add(s));
        int h = d.add(in[1][1]);
        auto lo = li;
        lo.push_back(h);
        d.in = {li, {-1, h}};
        d.out = {lo};
        return d;
    }
    if (k == "embedding_backward") {
        std::vector<int> li;
        for (auto s : in[0]) {
            int l = d.add(s);
            d.labels[static_cast<std::size_t>(l)].sums = true;
            li.push_back(l);
        }
        int h = d.add(in[1].back());
        auto ly = li;
        ly.push_back(h);
        d.in = {li, ly};
        d.out = {{-1, h}};
        return d;
    }
    if (k == "cross_entropy" || k == "cross_entropy_backward") {
        std::vector<int> li;
        for (auto s : in[1]) {
            int l = d.add(s);
            d.labels[static_cast<std::size_t>(l)].sums = true;
            d.labels[static_cast<std::size_t>(l)].mean = true;
            li.push_back(l);
        }
        auto ll = li;
        ll.push_back(-1);
        if (k == "cross_entropy") {
            d.in = {ll, li};
            d.out = {{}};
        } else {
            d.in = {ll, li, {}};
            d.out = {ll};
        }
        return d;
    }
    if (k == "target_logit" || k == "one_hot") {
        std::vector<int> li;
        for (auto s : (k == "one_hot" ? in[0] : in[1])) li.push_back(d.add(s));
        auto ll = li;
        ll.push_back(-1);
        d.in = k == "one_hot" ? std::vector<std::vector<int>>{li} : std::vector<std::vector<int>>{ll, li};
        d.out = {k == "one_hot" ? ll : li};
        return d;
    }
    throw std::invalid_argument("no dims rule for operator " + k);
}


}  // namespace tv
