#include "generate/models.hpp"

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

}  // namespace

std::vector<std::string> presetNames() {
    std::vector<std::string> names;
    for (const auto& p : kPresets) names.emplace_back(p.name);
    return names;
}

std::optional<ModelConfig> preset(const std::string& name) {
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
        const auto hd = c.headDim();
        k = repeatKv(p + ".k_repeat", k);
        v = repeatKv(p + ".v_repeat", v);
        int qt = permute(p + ".q_heads", q, {0, 2, 1, 3});
        int kt = permute(p + ".k_heads", k, {0, 2, 1, 3});
        int vt = permute(p + ".v_heads", v, {0, 2, 1, 3});
        auto qs = m.shape(qt);
        int scores = m.op1("matmul", p + ".scores", {qt, kt}, json{{"transpose_b", true}}, Shape{qs[0], qs[1], qs[2], qs[2]});
        int scaled = un("div_sqrt", p + ".scale", scores, json{{"n", hd}});
        int masked = ew("add", p + ".mask", scaled, mask);
        int probs = un("softmax", p + ".softmax", masked, json{{"dim", 3}});
        int ctx = m.op1("matmul", p + ".context", {probs, vt}, json::object(), qs);
        int back = permute(p + ".context_tokens", ctx, {0, 2, 1, 3});
        return reshape(p + ".context_merge", back, {qs[0], qs[2], qs[1] * qs[3]});
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
    m.batchDim = 0;
    m.seqDim = 1;
    m.layer = kEmbeddingLayer;
    int ids = m.input("tokens", {B, S}, Role::Input, DType::Int);
    int labels = m.input("labels", {B, S}, Role::Input, DType::Int);
    m.dataInputs = {ids, labels};
    int mask = m.input("attn.causal_mask", {S, S}, Role::Input);
    int wte = m.weight("wte.weight", {c.vocab, H}, -1);
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
    m.batchDim = 0;
    m.seqDim = 1;
    m.layer = kEmbeddingLayer;
    int ids = m.input("tokens", {B, S}, Role::Input, DType::Int);
    int labels = m.input("labels", {B, S}, Role::Input, DType::Int);
    m.dataInputs = {ids, labels};
    int cos = m.input("rope.cos", {S, 1, hd}, Role::Input);
    int sin = m.input("rope.sin", {S, 1, hd}, Role::Input);
    int mask = m.input("attn.causal_mask", {S, S}, Role::Input);
    int emb = m.weight("tok_embeddings.weight", {c.vocab, H}, -1);
    int x = m.op1("embedding", "tok_embeddings", {ids, emb}, json::object(), Shape{B, S, H});
    if (sp) m.seqParallelStarts.push_back(x);
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
        int w1 = m.weight(p + ".feed_forward.w1.weight", {F, H}, 0);
        int w3 = m.weight(p + ".feed_forward.w3.weight", {F, H}, 0);
        int w2 = m.weight(p + ".feed_forward.w2.weight", {H, F}, 1);
        int gate = b.un("silu", p + ".feed_forward.silu", b.linear(p + ".feed_forward.w1", h, w1));
        int up = b.linear(p + ".feed_forward.w3", h, w3);
        int act = b.ew("mul", p + ".feed_forward.swiglu", gate, up);
        int down = b.linear(p + ".feed_forward.w2", act, w2);
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
    else
        throw std::logic_error("generator: unknown model family " + c.family);
    m.tensors[static_cast<std::size_t>(m.loss)].role = Role::Loss;
    m.layer = m.headLayer;
    m.lossSeed = m.input("loss.grad", {}, Role::Gradient);
}

}  // namespace tv::gen
