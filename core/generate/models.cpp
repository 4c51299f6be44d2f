#include "generate/models.hpp"
#include "model/rational.hpp"

#include <stdexcept>

namespace tv::gen {

using json = nlohmann::json;

namespace {

/// The presets, with the published hyper-parameters (GPT-2 small; Llama 3 8B, 70B, 405B).
struct Preset {
    const char* name;
    const char* family;
    std::int64_t layers, hidden, heads, kvHeads, ffn, vocab, seq;
    bool tied;
};
constexpr Preset kPresets[] = {
    {"mlp", "mlp", 4, 64, 1, 1, 256, 16, 1, false},
    {"gpt2", "gpt2", 12, 768, 12, 12, 3072, 50257, 1024, true},
    {"llama3", "llama3", 2, 64, 4, 2, 128, 256, 16, false},  // small, with every feature (GQA, RoPE, SwiGLU)
    {"llama3-8b", "llama3", 32, 4096, 32, 8, 14336, 128256, 8192, false},
    {"llama3-70b", "llama3", 80, 8192, 64, 8, 28672, 128256, 8192, false},
    {"llama3-405b", "llama3", 126, 16384, 128, 8, 53248, 128256, 8192, false},
};

/// DeepSeek presets (published configurations; "deepseek" is a small one with every feature:
/// a low-rank query, group-limited top-2-scored sigmoid routing, shared experts, a dense layer).
struct DeepseekPreset {
    const char* name;
    std::int64_t layers, hidden, heads, vocab, seq, ffn;
    std::int64_t qLora, kvLora, nope, rope, v;
    std::int64_t experts, shared, topk, moeFfn, dense, groups, topkGroups;
    const char* score;
    const char* routeScale;
    const char* groupScore;
    std::int64_t mtp;     ///< multi-token prediction depth
    const char* auxLoss;  ///< the sequence-wise balance loss's alpha ("" none)
};
constexpr DeepseekPreset kDeepseek[] = {
    {"deepseek", 2, 64, 4, 256, 16, 128, 32, 32, 16, 8, 16, 8, 1, 2, 32, 1, 4, 2, "sigmoid", "5/2", "top2", 1, "1/10000"},
    {"deepseek-v2-lite", 27, 2048, 16, 102400, 4096, 10944, 0, 512, 128, 64, 128, 64, 2, 6, 1408, 1, 1, 1, "softmax", "1", "max", 0, ""},
    {"deepseek-v2", 60, 5120, 128, 102400, 4096, 12288, 1536, 512, 128, 64, 128, 160, 2, 6, 1536, 1, 8, 3, "softmax", "16", "max", 0, ""},
    // DeepSeek-V3 as trained: one multi-token prediction module (loss weight 0.3, the first 10T
    // tokens) and the sequence-wise balance loss with alpha 0.0001 (technical report, 4.2).
    {"deepseek-v3", 61, 7168, 128, 129280, 4096, 18432, 1536, 512, 128, 64, 128, 256, 1, 8, 2048, 3, 8, 4, "sigmoid", "5/2", "top2", 1, "1/10000"},
};

}  // namespace

std::vector<std::string> presetNames() {
    std::vector<std::string> names;
    for (const auto& p : kPresets) names.emplace_back(p.name);
    for (const auto& p : kDeepseek) names.emplace_back(p.name);
    return names;
}

std::optional<ModelConfig> preset(const std::string& name) {
    for (const auto& p : kDeepseek) {
        if (name != p.name) continue;
        ModelConfig c;
        c.preset = name;
        c.family = "deepseek";
        c.layers = p.layers;
        c.hidden = p.hidden;
        c.heads = c.kvHeads = p.heads;
        c.vocab = p.vocab;
        c.seq = p.seq;
        c.ffn = p.ffn;
        c.normEps = "1e-6";
        c.qLoraRank = p.qLora;
        c.kvLoraRank = p.kvLora;
        c.qkNopeDim = p.nope;
        c.qkRopeDim = p.rope;
        c.vHeadDim = p.v;
        c.experts = p.experts;
        c.sharedExperts = p.shared;
        c.topk = p.topk;
        c.moeFfn = p.moeFfn;
        c.denseLayers = p.dense;
        c.expertGroups = p.groups;
        c.topkGroups = p.topkGroups;
        c.scoreFunc = p.score;
        c.routeScale = p.routeScale;
        c.groupScore = p.groupScore;
        c.routeBias = c.scoreFunc == "sigmoid";  // DeepSeek-V3 (sigmoid gate, noaux_tc routing)
        c.mtpDepth = p.mtp;
        c.auxLossAlpha = p.auxLoss;
        return c;
    }
    for (const auto& p : kPresets) {
        if (name != p.name) continue;
        ModelConfig c;
        c.preset = name;
        c.family = p.family;
        c.layers = p.layers;
        c.hidden = p.hidden;
        c.heads = p.heads;
        c.kvHeads = p.kvHeads;
        c.ffn = p.ffn;
        c.vocab = p.vocab;
        c.seq = p.seq;
        c.tiedEmbeddings = p.tied;
        return c;
    }
    return std::nullopt;
}

namespace {

struct Builder {
    LogicalModel& m;
    const ModelConfig& c;
    std::int64_t B;
    int embedTable = -1;  ///< the token embedding's table, once embed() made it

    int linear(const std::string& name, int x, int w) {
        Shape out = m.shape(x);
        out.back() = m.shape(w)[0];
        return m.op1("linear", name, {x, w}, json::object(), out);
    }
    int ew(const std::string& kind, const std::string& name, int a, int b) {
        return m.op1(kind, name, {a, b}, json::object(), m.shape(a));
    }
    int un(const std::string& kind, const std::string& name, int a, json attrs = json::object()) {
        return m.op1(kind, name, {a}, std::move(attrs), m.shape(a));
    }
    int reshape(const std::string& name, int x, Shape s) { return m.op1("reshape", name, {x}, json::object(), std::move(s)); }
    int permute(const std::string& name, int x, std::vector<std::int64_t> dims) {
        Shape s;
        for (auto d : dims) s.push_back(m.shape(x)[static_cast<std::size_t>(d)]);
        return m.op1("permute", name, {x}, json{{"dims", dims}}, s);
    }
    int rmsnorm(const std::string& name, int x, int w) { return m.op1("rmsnorm", name, {x, w}, json{{"eps", c.normEps}}, m.shape(x)); }
    int layernorm(const std::string& name, int x, int w, int b) {
        return m.op1("layernorm", name, {x, w, b}, json{{"eps", c.normEps}}, m.shape(x));
    }

    /// The token ids and labels [B, S] a transformer step reads: its data, split along the batch.
    struct Tokens {
        int ids, labels;
    };
    Tokens tokens() {
        m.batchDim = 0;
        m.seqDim = 1;
        m.layer = kEmbeddingLayer;
        int ids = m.input("tokens", {B, c.seq}, Role::Input, DType::Int);
        int labels = m.input("labels", {B, c.seq}, Role::Input, DType::Int);
        m.dataInputs = {ids, labels};
        return {ids, labels};
    }
    /// RoPE's cos/sin tables [S, 1, dim].
    std::pair<int, int> ropeTables(std::int64_t dim) {
        return {m.input("rope.cos", {c.seq, 1, dim}, Role::Input), m.input("rope.sin", {c.seq, 1, dim}, Role::Input)};
    }
    int causalMask() { return m.input("attn.causal_mask", {c.seq, c.seq}, Role::Input); }
    /// The token embedding (table [vocab, H], split along the vocabulary under tensor parallelism);
    /// sequence parallelism starts after it.
    int embed(const std::string& name, int ids, bool sp) {
        int table = m.weight(name + ".weight", {c.vocab, c.hidden}, 0);
        embedTable = table;
        int x = m.op1("embedding", name, {ids, table}, json::object(), Shape{B, c.seq, c.hidden});
        if (sp) m.seqParallelStarts.push_back(x);
        return x;
    }

    /// RoPE on [B, S, heads, hd] with separate cos/sin tables [S, 1, hd]: x cos + rotate_half(x) sin.
    int rope(const std::string& p, int x, int cos, int sin) {
        const auto hd = m.shape(x).back();
        Shape half = m.shape(x);
        half.back() = hd / 2;
        int xc = ew("mul", p + ".cos", x, cos);
        int x1 = m.op1("slice", p + ".x1", {x}, json{{"dim", 3}, {"start", 0}, {"end", hd / 2}}, half);
        int x2 = m.op1("slice", p + ".x2", {x}, json{{"dim", 3}, {"start", hd / 2}, {"end", hd}}, half);
        int nx2 = un("neg", p + ".neg", x2);
        int rot = m.op1("concat", p + ".rotate_half", {nx2, x1}, json{{"dim", 3}}, m.shape(x));
        int xs = ew("mul", p + ".sin", rot, sin);
        return ew("add", p, xc, xs);
    }

    /// Grouped-query attention: repeats each key/value head for its group of query heads.
    int repeatKv(const std::string& p, int x) {
        const auto g = c.heads / c.kvHeads;
        if (g == 1) return x;
        auto s = m.shape(x);  // [B, S, kv, hd]
        int r = reshape(p + ".unsqueeze", x, {s[0], s[1], s[2], 1, s[3]});
        int e = m.op1("expand", p + ".expand", {r}, json::object(), Shape{s[0], s[1], s[2], g, s[3]});
        return reshape(p + ".merge", e, {s[0], s[1], s[2] * g, s[3]});
    }

    /// Causal self-attention over q [B,S,nh,hd], k/v [B,S,nkv,hd]; returns [B, S, nh*hd].
    int attention(const std::string& p, int q, int k, int v, int mask) {
        k = repeatKv(p + ".k_repeat", k);
        v = repeatKv(p + ".v_repeat", v);
        return attend(p, q, k, v, mask, c.headDim());
    }

    /// softmax(q k^T / sqrt(scaleDim) + mask) v over q/k [B,S,nh,dk], v [B,S,nh,dv]; returns [B, S, nh*dv].
    int attend(const std::string& p, int q, int k, int v, int mask, std::int64_t scaleDim) {
        const auto hd = scaleDim;
        int qt = permute(p + ".q_heads", q, {0, 2, 1, 3});
        int kt = permute(p + ".k_heads", k, {0, 2, 1, 3});
        int vt = permute(p + ".v_heads", v, {0, 2, 1, 3});
        auto qs = m.shape(qt);
        int scores = m.op1("matmul", p + ".scores", {qt, kt}, json{{"transpose_b", true}}, Shape{qs[0], qs[1], qs[2], qs[2]});
        int scaled = un("div_sqrt", p + ".scale", scores, json{{"n", hd}});
        int masked = ew("add", p + ".mask", scaled, mask);
        int probs = un("softmax", p + ".softmax", masked, json{{"dim", 3}});
        const auto dv = m.shape(vt)[3];
        int ctx = m.op1("matmul", p + ".context", {probs, vt}, json::object(), Shape{qs[0], qs[1], qs[2], dv});
        int back = permute(p + ".context_tokens", ctx, {0, 2, 1, 3});
        return reshape(p + ".context_merge", back, {qs[0], qs[2], qs[1] * dv});
    }

    int slice(const std::string& name, int x, int dim, std::int64_t start, std::int64_t end) {
        Shape s = m.shape(x);
        s[static_cast<std::size_t>(dim)] = end - start;
        return m.op1("slice", name, {x}, json{{"dim", dim}, {"start", start}, {"end", end}}, s);
    }

    /// SwiGLU feed-forward (Megatron placement: w1, w3 column-parallel, w2 row-parallel).
    int swiglu(const std::string& p, int h, std::int64_t inner) {
        const auto H = m.shape(h).back();
        int w1 = m.weight(p + ".w1.weight", {inner, H}, 0);
        int w3 = m.weight(p + ".w3.weight", {inner, H}, 0);
        int w2 = m.weight(p + ".w2.weight", {H, inner}, 1);
        int gate = un("silu", p + ".silu", linear(p + ".w1", h, w1));
        int up = linear(p + ".w3", h, w3);
        int act = ew("mul", p + ".swiglu", gate, up);
        return linear(p + ".w2", act, w2);
    }
};

void buildMlp(Builder& b) {
    auto& m = b.m;
    const auto& c = b.c;
    m.batchDim = 0;
    m.layer = kEmbeddingLayer;
    int x = m.input("x", {b.B, c.hidden}, Role::Input);
    int labels = m.input("labels", {b.B}, Role::Input, DType::Int);
    m.dataInputs = {x, labels};
    for (std::int64_t l = 0; l < c.layers; ++l) {
        m.layer = static_cast<int>(l);
        const auto p = "layers." + std::to_string(l);
        int w1 = m.weight(p + ".fc1.weight", {c.ffn, c.hidden}, 0);
        int w2 = m.weight(p + ".fc2.weight", {c.hidden, c.ffn}, 1);
        int h = b.linear(p + ".fc1", x, w1);
        int a = b.un("gelu", p + ".act", h);
        int y = b.linear(p + ".fc2", a, w2);
        x = b.ew("add", p + ".residual", x, y);
    }
    m.layer = static_cast<int>(c.layers);
    m.headLayer = m.layer;
    int wo = m.weight("head.weight", {c.vocab, c.hidden}, -1);
    int logits = b.linear("head", x, wo);
    m.loss = m.op1("cross_entropy", "loss", {logits, labels}, json::object(), Shape{});
}

void buildGpt2(Builder& b, bool sp) {
    auto& m = b.m;
    const auto& c = b.c;
    const auto B = b.B, S = c.seq, H = c.hidden, F = c.ffn, nh = c.heads, hd = c.headDim();
    const auto [ids, labels] = b.tokens();
    int mask = b.causalMask();
    int wte = m.weight("wte.weight", {c.vocab, H}, 0);
    int wpe = m.weight("wpe.weight", {S, H}, -1);
    int tok = m.op1("embedding", "wte", {ids, wte}, json::object(), Shape{B, S, H});
    int x = b.ew("add", "wpe", tok, wpe);
    if (sp) m.seqParallelStarts.push_back(x);
    for (std::int64_t l = 0; l < c.layers; ++l) {
        m.layer = static_cast<int>(l);
        const auto p = "h." + std::to_string(l);
        int g1 = m.weight(p + ".ln_1.weight", {H}), b1 = m.weight(p + ".ln_1.bias", {H});
        int h = b.layernorm(p + ".ln_1", x, g1, b1);
        auto proj = [&](const std::string& n, int in, std::int64_t out, std::int64_t inner, int wShard, int bShard) {
            int w = m.weight(p + n + ".weight", {out, inner}, wShard);
            int bias = m.weight(p + n + ".bias", {out}, bShard);
            int y = b.linear(p + n, in, w);
            return b.ew("add", p + n + ".bias_add", y, bias);
        };
        int q = proj(".attn.q_proj", h, H, H, 0, 0);
        int k = proj(".attn.k_proj", h, H, H, 0, 0);
        int v = proj(".attn.v_proj", h, H, H, 0, 0);
        q = b.reshape(p + ".attn.q_split", q, {B, S, nh, hd});
        k = b.reshape(p + ".attn.k_split", k, {B, S, nh, hd});
        v = b.reshape(p + ".attn.v_split", v, {B, S, nh, hd});
        int ctx = b.attention(p + ".attn", q, k, v, mask);
        int o = proj(".attn.c_proj", ctx, H, H, 1, -1);
        x = b.ew("add", p + ".attn.residual", x, o);
        int g2 = m.weight(p + ".ln_2.weight", {H}), b2 = m.weight(p + ".ln_2.bias", {H});
        h = b.layernorm(p + ".ln_2", x, g2, b2);
        int f = proj(".mlp.c_fc", h, F, H, 0, 0);
        f = b.un("gelu", p + ".mlp.gelu", f);
        f = proj(".mlp.c_proj", f, H, F, 1, -1);
        x = b.ew("add", p + ".mlp.residual", x, f);
    }
    m.layer = static_cast<int>(c.layers);
    m.headLayer = m.layer;
    int gf = m.weight("ln_f.weight", {H}), bf = m.weight("ln_f.bias", {H});
    int h = b.layernorm("ln_f", x, gf, bf);
    int logits = b.linear("lm_head", h, wte);  // tied to the token embedding
    m.loss = m.op1("cross_entropy", "loss", {logits, labels}, json::object(), Shape{});
}

void buildLlama3(Builder& b, bool sp) {
    auto& m = b.m;
    const auto& c = b.c;
    const auto B = b.B, S = c.seq, H = c.hidden, F = c.ffn, nh = c.heads, nkv = c.kvHeads, hd = c.headDim();
    const auto [ids, labels] = b.tokens();
    const auto [cos, sin] = b.ropeTables(hd);
    int mask = b.causalMask();
    int x = b.embed("tok_embeddings", ids, sp);
    for (std::int64_t l = 0; l < c.layers; ++l) {
        m.layer = static_cast<int>(l);
        const auto p = "layers." + std::to_string(l);
        int an = m.weight(p + ".attention_norm.weight", {H});
        int h = b.rmsnorm(p + ".attention_norm", x, an);
        int wq = m.weight(p + ".attention.wq.weight", {nh * hd, H}, 0);
        int wk = m.weight(p + ".attention.wk.weight", {nkv * hd, H}, 0);
        int wv = m.weight(p + ".attention.wv.weight", {nkv * hd, H}, 0);
        int wo = m.weight(p + ".attention.wo.weight", {H, nh * hd}, 1);
        int q = b.reshape(p + ".attention.q_split", b.linear(p + ".attention.wq", h, wq), {B, S, nh, hd});
        int k = b.reshape(p + ".attention.k_split", b.linear(p + ".attention.wk", h, wk), {B, S, nkv, hd});
        int v = b.reshape(p + ".attention.v_split", b.linear(p + ".attention.wv", h, wv), {B, S, nkv, hd});
        q = b.rope(p + ".attention.q_rope", q, cos, sin);
        k = b.rope(p + ".attention.k_rope", k, cos, sin);
        int ctx = b.attention(p + ".attention", q, k, v, mask);
        int o = b.linear(p + ".attention.wo", ctx, wo);
        x = b.ew("add", p + ".attention.residual", x, o);
        int fn = m.weight(p + ".ffn_norm.weight", {H});
        h = b.rmsnorm(p + ".ffn_norm", x, fn);
        int down = b.swiglu(p + ".feed_forward", h, F);
        x = b.ew("add", p + ".feed_forward.residual", x, down);
    }
    m.layer = static_cast<int>(c.layers);
    m.headLayer = m.layer;
    int fw = m.weight("norm.weight", {H});
    int h = b.rmsnorm("norm", x, fw);
    int wout = m.weight("output.weight", {c.vocab, H}, 0);
    int logits = b.linear("output", h, wout);
    m.loss = m.op1("cross_entropy", "loss", {logits, labels}, json::object(), Shape{});
}

/// DeepSeek V2/V3: multi-head latent attention (low-rank query and key/value projections, the
/// decoupled RoPE part of each query head and one shared RoPE key), then a dense SwiGLU in the
/// first layers and a mixture of experts in the others: shared experts plus routed experts,
/// weighted by the gate (softmax, or sigmoid renormalised over the chosen experts, times the route
/// scale) over the top-k experts of the best groups. The experts are computed densely and weighted
/// by the gate (zero for the experts a token is not routed to), which is the same function as
/// dispatching tokens; the routed expert weights are split over the tensor-parallel ranks (expert
/// parallelism inside the tensor-parallel group), their outputs summed by an all-reduce.
void buildDeepseek(Builder& b, bool sp) {
    auto& m = b.m;
    const auto& c = b.c;
    const auto B = b.B, S = c.seq, H = c.hidden, nh = c.heads;
    const auto nope = c.qkNopeDim, rope = c.qkRopeDim, dv = c.vHeadDim, dq = nope + rope;
    const auto E = c.experts, T = B * S;
    const auto [ids, labels] = b.tokens();
    const auto [cos, sin] = b.ropeTables(rope);
    int mask = b.causalMask();
    // One transformer block (MLA, then a dense SwiGLU or the mixture of experts) named p; the MoE
    // blocks' balance losses are collected in `balance`.
    std::vector<int> balance;
    int sequenceWeights = -1;  ///< the loader's per-sequence weights of the balance loss [B, 1]
    auto block = [&](const std::string& p, int x, bool dense) -> int {
        const auto a = p + ".attn";
        int an = m.weight(p + ".attn_norm.weight", {H});
        int h = b.rmsnorm(p + ".attn_norm", x, an);
        // Queries: low-rank (wq_a, its norm, wq_b) or one projection; split into heads.
        int q;
        if (c.qLoraRank > 0) {
            int wqa = m.weight(a + ".wq_a.weight", {c.qLoraRank, H}, -1);
            int qn = m.weight(a + ".q_norm.weight", {c.qLoraRank});
            int wqb = m.weight(a + ".wq_b.weight", {nh * dq, c.qLoraRank}, 0);
            q = b.linear(a + ".wq_b", b.rmsnorm(a + ".q_norm", b.linear(a + ".wq_a", h, wqa), qn), wqb);
        } else {
            int wq = m.weight(a + ".wq.weight", {nh * dq, H}, 0);
            q = b.linear(a + ".wq", h, wq);
        }
        q = b.reshape(a + ".q_split", q, {B, S, nh, dq});
        int qNope = b.slice(a + ".q_nope", q, 3, 0, nope);
        int qPe = b.rope(a + ".q_rope", b.slice(a + ".q_pe", q, 3, nope, dq), cos, sin);
        // Keys and values: one latent (wkv_a, its norm) expanded per head (wkv_b); the RoPE key is
        // shared by every head.
        int wkva = m.weight(a + ".wkv_a.weight", {c.kvLoraRank + rope, H}, -1);
        int kva = b.linear(a + ".wkv_a", h, wkva);
        int kvn = m.weight(a + ".kv_norm.weight", {c.kvLoraRank});
        int latent = b.rmsnorm(a + ".kv_norm", b.slice(a + ".kv_latent", kva, 2, 0, c.kvLoraRank), kvn);
        int kPe = b.reshape(a + ".k_pe_head", b.slice(a + ".k_pe", kva, 2, c.kvLoraRank, c.kvLoraRank + rope), {B, S, 1, rope});
        kPe = b.rope(a + ".k_rope", kPe, cos, sin);
        kPe = m.op1("expand", a + ".k_rope_heads", {kPe}, json::object(), Shape{B, S, nh, rope});
        int wkvb = m.weight(a + ".wkv_b.weight", {nh * (nope + dv), c.kvLoraRank}, 0);
        int kv = b.reshape(a + ".kv_split", b.linear(a + ".wkv_b", latent, wkvb), {B, S, nh, nope + dv});
        int kNope = b.slice(a + ".k_nope", kv, 3, 0, nope);
        int v = b.slice(a + ".v", kv, 3, nope, nope + dv);
        int qFull = m.op1("concat", a + ".q", {qNope, qPe}, json{{"dim", 3}}, Shape{B, S, nh, dq});
        int kFull = m.op1("concat", a + ".k", {kNope, kPe}, json{{"dim", 3}}, Shape{B, S, nh, dq});
        int ctx = b.attend(a, qFull, kFull, v, mask, dq);
        int wo = m.weight(a + ".wo.weight", {H, nh * dv}, 1);
        x = b.ew("add", a + ".residual", x, b.linear(a + ".wo", ctx, wo));
        int fn = m.weight(p + ".ffn_norm.weight", {H});
        h = b.rmsnorm(p + ".ffn_norm", x, fn);
        if (dense) return b.ew("add", p + ".ffn.residual", x, b.swiglu(p + ".ffn", h, c.ffn));
        // Mixture of experts. The gate scores every expert for every token.
        const auto f = p + ".moe";
        int wg = m.weight(f + ".gate.weight", {E, H}, -1);
        int logits = b.linear(f + ".gate", h, wg);
        int scores = c.scoreFunc == "sigmoid" ? b.un("sigmoid", f + ".scores", logits)
                                              : b.un("softmax", f + ".scores", logits, json{{"dim", 2}});
        json route{{"k", c.topk}};
        if (c.expertGroups > 1) {
            route["groups"] = c.expertGroups;
            route["topk_groups"] = c.topkGroups;
            route["group_score"] = c.groupScore;
        }
        // DeepSeek-V3 chooses the experts by the scores plus a balancing bias (an input of the
        // step), and weights them by the scores alone.
        int forChoice = scores;
        if (c.routeBias) {
            int bias = m.input(f + ".gate.e_score_correction_bias", {E}, Role::Input);
            forChoice = b.ew("add", f + ".biased_scores", scores, bias);
        }
        int chosen = b.un("topk_mask", f + ".route", forChoice, route);
        if (!c.auxLossAlpha.empty()) {
            // DeepSeek-V3's sequence-wise balance loss: per sequence, alpha * sum_i f_i P_i with
            // f_i = E / (K S) * (tokens routed to expert i) and P_i the mean over the tokens of the
            // scores normalised over the experts; the sequences' losses are weighted by the data
            // loader's per-sequence loss weights (1/B for their mean) and added up.
            int routedTo = m.op1("sum", f + ".balance.counts", {chosen}, json{{"dims", {1}}}, Shape{B, E});
            int fi = b.un("mul_scalar", f + ".balance.f", routedTo, json{{"value", std::to_string(E) + "/" + std::to_string(c.topk * S)}});
            int scoreTotal = m.op1("sum", f + ".balance.score_total", {scores}, json{{"dims", {2}}, {"keepdim", true}}, Shape{B, S, 1});
            int normal = m.op1("div", f + ".balance.normalised", {scores, scoreTotal}, json::object(), Shape{B, S, E});
            int pi = m.op1("mean", f + ".balance.p", {normal}, json{{"dims", {1}}}, Shape{B, E});
            int perSeq = m.op1("sum", f + ".balance.per_sequence", {b.ew("mul", f + ".balance.fp", fi, pi)}, json{{"dims", {1}}, {"keepdim", true}},
                               Shape{B, 1});
            if (sequenceWeights < 0) {
                sequenceWeights = m.input("balance.sequence_weights", {B, 1}, Role::Input);
                m.dataInputs.push_back(sequenceWeights);
            }
            int weighted = m.op1("matmul", f + ".balance.weighted", {sequenceWeights, perSeq}, json{{"transpose_a", true}}, Shape{1, 1});
            int overSequences = b.reshape(f + ".balance.total", weighted, {});
            balance.push_back(b.un("mul_scalar", f + ".balance.loss", overSequences, json{{"value", c.auxLossAlpha}}));
        }
        int weights = b.ew("mul", f + ".chosen_scores", scores, chosen);
        if (c.scoreFunc == "sigmoid") {
            int total = m.op1("sum", f + ".chosen_total", {weights}, json{{"dims", {2}}, {"keepdim", true}}, Shape{B, S, 1});
            weights = m.op1("div", f + ".normalised", {weights, total}, json::object(), Shape{B, S, E});
        }
        if (c.routeScale != "1") weights = b.un("mul_scalar", f + ".route_scale", weights, json{{"value", c.routeScale}});
        // Routed experts, computed densely over the tokens and weighted by the gate.
        int tokens = b.reshape(f + ".tokens", h, {1, T, H});
        int each = m.op1("expand", f + ".to_experts", {tokens}, json::object(), Shape{E, T, H});
        // Split over the tensor-parallel group by expert, or (expert tensor parallelism) each
        // expert's inner size as the dense MLP's: w1 and w3 column-parallel, w2 row-parallel. The
        // expert dim is split over the expert-parallel group when it is drawn from the replicas.
        const bool etp = c.expertTensorParallel;
        int w1 = m.weight(f + ".experts.w1.weight", {E, c.moeFfn, H}, etp ? 1 : 0);
        int w3 = m.weight(f + ".experts.w3.weight", {E, c.moeFfn, H}, etp ? 1 : 0);
        int w2 = m.weight(f + ".experts.w2.weight", {E, H, c.moeFfn}, etp ? 2 : 0);
        for (int w : {w1, w3, w2}) m.placement[static_cast<std::size_t>(w)].expertDim = 0;
        auto bmm = [&](const std::string& n, int in, int w, std::int64_t outDim) {
            return m.op1("matmul", n, {in, w}, json{{"transpose_b", true}}, Shape{E, T, outDim});
        };
        int gate = b.un("silu", f + ".experts.silu", bmm(f + ".experts.w1", each, w1, c.moeFfn));
        int up = bmm(f + ".experts.w3", each, w3, c.moeFfn);
        int out = bmm(f + ".experts.w2", b.ew("mul", f + ".experts.swiglu", gate, up), w2, H);
        int perExpert = b.reshape(f + ".weights_per_expert", b.permute(f + ".weights_experts_first",
                                                                       b.reshape(f + ".weights_tokens", weights, {T, E}), {1, 0}),
                                  {E, T, 1});
        int weighted = m.op1("mul", f + ".weighted", {out, perExpert}, json::object(), Shape{E, T, H});
        int routed = m.op1("sum", f + ".combine", {weighted}, json{{"dims", {0}}}, Shape{T, H});
        int moe = b.reshape(f + ".routed", routed, {B, S, H});
        if (c.sharedExperts > 0) moe = b.ew("add", f + ".with_shared", moe, b.swiglu(f + ".shared", h, c.moeFfn * c.sharedExperts));
        return b.ew("add", p + ".moe.residual", x, moe);
    };
    int x = b.embed("embed", ids, sp);
    for (std::int64_t l = 0; l < c.layers; ++l) {
        m.layer = static_cast<int>(l);
        x = block("layers." + std::to_string(l), x, l < c.denseLayers);
    }
    m.layer = static_cast<int>(c.layers);
    m.headLayer = m.layer;
    int fw = m.weight("norm.weight", {H});
    int hn = b.rmsnorm("norm", x, fw);
    int wout = m.weight("head.weight", {c.vocab, H}, 0);
    int logits = b.linear("head", hn, wout);
    const bool extraLosses = c.mtpDepth > 0 || !balance.empty();
    const int mainLoss = m.op1("cross_entropy", extraLosses ? "loss.main" : "loss", {logits, labels}, json::object(), Shape{});
    int loss = mainLoss;
    // DeepSeek-V3's multi-token prediction: module k combines the previous depth's hidden states
    // (RMSNorm) with the embedding of the token k ahead (RMSNorm, the shared table), projects the
    // pair back to the hidden size, runs one transformer block (an MoE one) and predicts the token
    // k + 1 ahead through its norm and the shared output head. The data loader gives each module
    // its ids and labels shifted by k (Megatron rolls them and masks the positions past the end;
    // here every position is a real token of the shifted stream).
    if (c.mtpDepth > 0) {
        std::vector<int> mtpLosses;
        int prev = x;
        for (std::int64_t k = 1; k <= c.mtpDepth; ++k) {
            const auto p = "mtp." + std::to_string(k);
            int ids = m.input(p + ".tokens", {B, S}, Role::Input, DType::Int);
            int next = m.input(p + ".labels", {B, S}, Role::Input, DType::Int);
            m.dataInputs.push_back(ids);
            m.dataInputs.push_back(next);
            int e = m.op1("embedding", p + ".embed", {ids, b.embedTable}, json::object(), Shape{B, S, H});
            if (sp) m.seqParallelStarts.push_back(e);
            int hw = m.weight(p + ".hnorm.weight", {H});
            int ew = m.weight(p + ".enorm.weight", {H});
            int pair = m.op1("concat", p + ".concat", {b.rmsnorm(p + ".hnorm", prev, hw), b.rmsnorm(p + ".enorm", e, ew)}, json{{"dim", 2}},
                             Shape{B, S, 2 * H});
            int proj = m.weight(p + ".eh_proj.weight", {H, 2 * H}, -1);
            prev = block(p + ".block", b.linear(p + ".eh_proj", pair, proj), false);
            int nw = m.weight(p + ".norm.weight", {H});
            int lk = b.linear(p + ".head", b.rmsnorm(p + ".norm", prev, nw), wout);
            mtpLosses.push_back(m.op1("cross_entropy", p + ".loss", {lk, next}, json::object(), Shape{}));
        }
        int mtp = mtpLosses[0];
        for (std::size_t k = 1; k < mtpLosses.size(); ++k) mtp = b.ew("add", "mtp.loss_sum." + std::to_string(k), mtp, mtpLosses[k]);
        const auto weight = Rational::parse(c.mtpWeight).value_or(Rational(3, 10)) / Rational(c.mtpDepth);
        loss = b.ew("add", "loss.with_mtp", loss, b.un("mul_scalar", "mtp.loss", mtp, json{{"value", weight.toString()}}));
    }
    for (std::size_t i = 0; i < balance.size(); ++i) loss = b.ew("add", "loss.with_balance." + std::to_string(i), loss, balance[i]);
    m.loss = extraLosses ? b.un("identity", "loss", loss) : mainLoss;
}

}  // namespace

void buildForward(LogicalModel& m, const ModelConfig& c, std::int64_t batch, bool sp) {
    Builder b{m, c, batch};
    m.phase = Phase::Forward;
    if (c.family == "mlp")
        buildMlp(b);
    else if (c.family == "gpt2")
        buildGpt2(b, sp);
    else if (c.family == "llama3")
        buildLlama3(b, sp);
    else if (c.family == "deepseek")
        buildDeepseek(b, sp);
    else
        throw std::logic_error("generator: unknown model family " + c.family);
    m.tensors[static_cast<std::size_t>(m.loss)].role = Role::Loss;
    m.layer = m.headLayer;
    m.lossSeed = m.input("loss.grad", {}, Role::Gradient);
}

}  // namespace tv::gen
