// The standard attention block: grouped-query attention with rope over a KV
// cache, keys token-major and values transposed, as llama.cpp stores them,
// with llama.cpp's node names.
#include <cmath>

#include "model/attention.h"
#include "model/graph_builder.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class StandardAttention final : public AttentionBlock {
 public:
  explicit StandardAttention(const StandardAttentionOptions& opt) : opt_(opt) {
    if (opt.softcap != 0)
      throw Error("attention: soft-capped scores (Gemma 2) are not supported: no architecture qlens runs has them");
  }

  const char* kind() const override { return "standard"; }
  StateKind state_kind() const override { return StateKind::PerPosition; }

  // One K and one V tensor per layer, each n_ctx positions of the layer's
  // n_embd_kv values; none for a layer that reads another layer's.
  std::vector<StateSpec> state(const HParams& hp, int il, int64_t n_ctx, DType cache_type) const override {
    if (hp.kv_layer_of(il) != il) return {};
    const std::array<int64_t, kMaxDims> ne = {hp.n_embd_kv_of(il) * n_ctx, 1, 1, 1};
    return {{"cache_k_l" + std::to_string(il), cache_type, ne}, {"cache_v_l" + std::to_string(il), cache_type, ne}};
  }

  Tensor* build(GraphBuilder& b, int il, Tensor* cur, std::span<Tensor* const> state) const override {
    const HParams& hp = b.hparams();
    Graph& g = b.graph();
    const int64_t N = b.n_tokens(), D = hp.head_dim_of(il);
    const bool own_cache = hp.kv_layer_of(il) == il;

    auto [q, k, v] = project(b, il, cur, own_cache);
    constexpr size_t fs = sizeof(float);
    Tensor* gate = nullptr;
    if (opt_.output_gate) {
      if (b.weight(Role::AttnQkv, il))
        throw Error("attention: layer " + std::to_string(il) + " has a fused attn_qkv; the output gate needs attn_q");
      // Each head's 2 D rows: its query, then its gate.
      Tensor* full = named(q, "Qcur_full", il);
      q = named(view(g, full, {D, hp.n_head, N}, {2 * D * fs, 2 * D * hp.n_head * fs}, 0), "Qcur_reshaped", il);
      gate = view(g, full, {D, hp.n_head, N}, {2 * D * fs, 2 * D * hp.n_head * fs}, D * fs);
      gate = named(reshape(g, cont(g, gate), {D * hp.n_head, N}), "gate_reshaped", il);
    }
    // GLM-4.5 has per-head norms, GLM-4.5-Air not: the table's optional rows decide.
    const bool qk_norm = opt_.qk_norm || b.weight(Role::AttnQNorm, il);
    if (qk_norm) q = b.norm(q, Role::AttnQNorm, il, "Qcur_normed");
    if (qk_norm && k) k = b.norm(k, Role::AttnKNorm, il, "Kcur_normed");
    // Gemma 4's values: RMS-normed per head, without a weight.
    if (opt_.v_norm && v)
      v = named(rms_norm(g, reshape(g, v, {D, hp.n_head_kv_of(il), N}), hp.rms_eps), "Vcur_normed", il);
    const int n_rot = static_cast<int>(hp.n_rot_of(il));
    const float base = opt_.sliding_window ? hp.rope_freq_base_swa : hp.rope_freq_base;
    const float freq_scale = opt_.sliding_window ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
    Tensor* factors = opt_.rope_factors ? b.weight(Role::RopeFreqs) : nullptr;
    Tensor* positions = b.inputs().positions;
    auto rotate = [&](Tensor* t) {
      if (hp.n_pos_per_token() == 4)
        return rope_multi(g, t, positions, n_rot, hp.rope_sections, hp.rope_mode, base, freq_scale, factors,
                          hp.rope_yarn);
      return rope(g, t, positions, n_rot, hp.rope_mode, base, freq_scale, factors, hp.rope_yarn);
    };
    q = named(rotate(q), opt_.pos_names ? "Qcur_pos" : "Qcur", il);
    if (k) k = named(rotate(k), opt_.pos_names ? "Kcur_pos" : "Kcur", il);
    float kq_scale = opt_.kq_scale != 0 ? opt_.kq_scale : 1.0f / std::sqrt(static_cast<float>(D));
    if (opt_.q_scale != 0) {
      q = named(scale(g, q, opt_.q_scale), "Qcur", il);
      kq_scale = 1.0f;
    }

    LayerKv kv;
    if (own_cache) {
      kv = store(b, il, k, v, state);
      b.set_layer_kv(il, kv);
    } else {
      kv = b.layer_kv(hp.kv_layer_of(il));
      kv = {view(g, kv.k, {kv.k->ne[0], kv.k->ne[1], kv.k->ne[2]}, {kv.k->nb[1], kv.k->nb[2]}, 0),
            view(g, kv.v, {kv.v->ne[0], kv.v->ne[1], kv.v->ne[2]}, {kv.v->nb[1], kv.v->nb[2]}, 0)};
    }
    Tensor* kc = named(kv.k, "k", il);
    Tensor* vc = named(kv.v, "v", il);
    Tensor* qp = named(permute(g, q, 0, 2, 1, 3), "q", il);
    Tensor* kq = named(mul_mat(g, kc, qp), "kq", il);
    Tensor* mask = opt_.sliding_window ? b.inputs().mask_swa : b.inputs().mask;
    Tensor* sinks = opt_.sinks ? b.weight(Role::AttnSinks, il) : nullptr;
    kq = named(soft_max(g, kq, mask, kq_scale, sinks), "kq_soft_max", il);
    Tensor* kqv = named(mul_mat(g, vc, kq), "kqv", il);
    Tensor* merged = named(permute(g, kqv, 0, 2, 1, 3), "kqv_merged", il);
    cur = named(cont(g, merged), "kqv_merged_cont", il);
    cur = reshape(g, cur, {D * hp.n_head, N});
    if (gate) {
      named(cur, "attn_pregate", il);
      Tensor* gate_sigmoid = named(sigmoid(g, gate), "gate_sigmoid", il);
      cur = named(mul(g, cur, gate_sigmoid), "attn_gated", il);
      return named(b.matmul(Role::AttnOutput, il, cur), "attn_output", il);
    }
    cur = named(b.matmul(Role::AttnOutput, il, cur), "kqv_out", il);
    if (Tensor* bias = b.weight(Role::AttnOutputBias, il)) cur = named(add(g, cur, bias), "attn_out", il);
    return cur;
  }

 private:
  // Stores this batch's keys (token-major rows) and values (transposed: a
  // row per value dimension, tokens along it) in layer il's cache, and
  // returns the views of the cache the batch attends to. The views depend
  // on the copies that wrote it, so every order of the graph stores the
  // batch before attending to it (a shared KV layer's views too).
  static LayerKv store(GraphBuilder& b, int il, Tensor* k, Tensor* v, std::span<Tensor* const> state) {
    const HParams& hp = b.hparams();
    Graph& g = b.graph();
    const int64_t N = b.n_tokens(), n_past = b.n_past(), n_kv = n_past + N, D = hp.head_dim_of(il);
    const int64_t KV = hp.n_embd_kv_of(il), H = hp.n_head_kv_of(il);
    Tensor* cache_k = state[0];
    Tensor* cache_v = state[1];
    const int64_t n_ctx = cache_k->ne[0] / KV;
    const size_t esize = type_traits(cache_k->type).block_bytes;
    const size_t k_row = static_cast<size_t>(KV) * esize;      // one token's keys
    const size_t v_row = static_cast<size_t>(n_ctx) * esize;  // one value dimension over the context
    Tensor* k_dst = named(view(g, cache_k, {N * KV}, {}, n_past * k_row), "k_cache_view", il);
    Tensor* k_stored = cpy(g, k, k_dst);
    Tensor* v_dst = named(view(g, cache_v, {N, KV}, {v_row}, n_past * esize), "v_cache_view", il);
    // Per-head normed values are [D, heads, N]: rows of KV again.
    Tensor* v_rows = v->ne[0] == KV && v->ne[1] == N ? v : reshape(g, v, {KV, N});
    Tensor* v_stored = cpy(g, transpose(g, v_rows), v_dst);
    Tensor* kc = view(g, cache_k, {D, n_kv, H}, {k_row, D * esize}, 0);
    Tensor* vc = view(g, cache_v, {n_kv, D, H}, {v_row, D * v_row}, 0);
    kc->src[1] = k_stored;
    vc->src[1] = v_stored;
    return {kc, vc};
  }

  struct Projections {
    Tensor *q, *k, *v;  // q, k: [D, heads, N]; v: [n_embd_kv, N] or [D, heads, N]; k, v null without a cache
  };
  // The q, k and v projections: from one matrix of q | k | v rows (Phi-3),
  // whose heads are views of its result, or from three, each with its bias
  // where the model has one (Qwen 2), named as llama.cpp names both: "Qcur".
  // A layer without attn_v takes its keys' projection as values (Gemma 4's
  // full-attention layers); one that reads another layer's cache, only q.
  static Projections project(GraphBuilder& b, int il, Tensor* cur, bool own_cache) {
    const HParams& hp = b.hparams();
    Graph& g = b.graph();
    const int64_t N = b.n_tokens(), D = hp.head_dim_of(il), H = hp.n_head_kv_of(il);
    if (b.weight(Role::AttnQkv, il)) {
      Tensor* qkv = named(b.matmul(Role::AttnQkv, il, cur), "wqkv", il);
      const size_t fs = sizeof(float), row = qkv->nb[1];
      const int64_t Q = hp.n_embd_q_of(il), KV = hp.n_embd_kv_of(il);
      return {named(view(g, qkv, {D, hp.n_head, N}, {D * fs, row}, 0), "Qcur", il),
              named(view(g, qkv, {D, H, N}, {D * fs, row}, Q * fs), "Kcur", il),
              view(g, qkv, {KV, N}, {row}, (Q + KV) * fs)};
    }
    auto projection = [&](Role w, Role bias, const char* name) {
      Tensor* t = named(b.matmul(w, il, cur), name, il);
      if (Tensor* bias_weight = b.weight(bias, il)) t = named(add(g, t, bias_weight), name, il);
      return t;
    };
    Tensor* q = projection(Role::AttnQ, Role::AttnQBias, "Qcur");
    q = reshape(g, q, {q->ne[0] / hp.n_head, hp.n_head, N});  // [2 D, heads, N] with the output gate
    if (!own_cache) return {q, nullptr, nullptr};
    Tensor* k_rows = projection(Role::AttnK, Role::AttnKBias, "Kcur");
    Tensor* v = b.weight(Role::AttnV, il) ? projection(Role::AttnV, Role::AttnVBias, "Vcur") : k_rows;
    return {q, reshape(g, k_rows, {D, H, N}), v};
  }

  StandardAttentionOptions opt_;
};

}  // namespace

std::unique_ptr<AttentionBlock> make_standard_attention(const StandardAttentionOptions& options) {
  return std::make_unique<StandardAttention>(options);
}

}  // namespace qlens
