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
      throw Error("attention: soft-capped scores (Gemma 2) need a tanh op, which qlens does not have yet");
  }

  const char* kind() const override { return "standard"; }
  StateKind state_kind() const override { return StateKind::PerPosition; }

  // One K and one V tensor per layer, each n_ctx positions of n_embd_kv values.
  std::vector<StateSpec> state(const HParams& hp, int il, int64_t n_ctx, DType cache_type) const override {
    const std::array<int64_t, kMaxDims> ne = {hp.n_embd_kv() * n_ctx, 1, 1, 1};
    return {{"cache_k_l" + std::to_string(il), cache_type, ne}, {"cache_v_l" + std::to_string(il), cache_type, ne}};
  }

  Tensor* build(GraphBuilder& b, int il, Tensor* cur, std::span<Tensor* const> state) const override {
    const HParams& hp = b.hparams();
    Graph& g = b.graph();
    const int64_t N = b.n_tokens(), n_past = b.n_past(), n_kv = n_past + N, D = hp.head_dim;
    Tensor* cache_k = state[0];
    Tensor* cache_v = state[1];
    const int64_t n_ctx = cache_k->ne[0] / hp.n_embd_kv();
    const size_t esize = type_traits(cache_k->type).block_bytes;
    const size_t k_row = static_cast<size_t>(hp.n_embd_kv()) * esize;  // one token's keys
    const size_t v_row = static_cast<size_t>(n_ctx) * esize;           // one value dimension over the context

    auto [q, k, v] = project(b, il, cur);
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
    if (opt_.qk_norm || b.weight(Role::AttnQNorm, il)) {
      q = b.norm(q, Role::AttnQNorm, il, "Qcur_normed");
      k = b.norm(k, Role::AttnKNorm, il, "Kcur_normed");
    }
    const int n_rot = static_cast<int>(hp.n_rot);
    const float base = opt_.sliding_window ? hp.rope_freq_base_swa : hp.rope_freq_base;
    const float freq_scale = opt_.sliding_window ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
    Tensor* factors = b.weight(Role::RopeFreqs);
    Tensor* positions = b.inputs().positions;
    auto rotate = [&](Tensor* t) {
      if (hp.n_pos_per_token() == 4)
        return rope_multi(g, t, positions, n_rot, hp.rope_sections, hp.rope_mode, base, freq_scale, factors,
                          hp.rope_yarn);
      return rope(g, t, positions, n_rot, hp.rope_mode, base, freq_scale, factors, hp.rope_yarn);
    };
    q = named(rotate(q), "Qcur", il);
    k = named(rotate(k), "Kcur", il);
    float kq_scale = 1.0f / std::sqrt(static_cast<float>(D));
    if (opt_.q_scale != 0) {
      q = named(scale(g, q, opt_.q_scale), "Qcur", il);
      kq_scale = 1.0f;
    }

    // Store this batch's keys (token-major rows) and values (transposed: a
    // row per value dimension, tokens along it) in the cache.
    Tensor* k_dst = named(view(g, cache_k, {N * hp.n_embd_kv()}, {}, n_past * k_row), "k_cache_view", il);
    Tensor* k_stored = cpy(g, k, k_dst);
    Tensor* v_dst = named(view(g, cache_v, {N, hp.n_embd_kv()}, {v_row}, n_past * esize), "v_cache_view", il);
    Tensor* v_stored = cpy(g, transpose(g, v), v_dst);

    // The views that read the cache depend on the copies that wrote it, so
    // every order of the graph stores this batch before attending to it.
    Tensor* kc = named(view(g, cache_k, {D, n_kv, hp.n_head_kv}, {k_row, D * esize}, 0), "k", il);
    Tensor* vc = named(view(g, cache_v, {n_kv, D, hp.n_head_kv}, {v_row, D * v_row}, 0), "v", il);
    kc->src[1] = k_stored;
    vc->src[1] = v_stored;
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
  struct Projections {
    Tensor *q, *k, *v;  // q, k: [D, heads, N]; v: [n_embd_kv, N]
  };
  // The q, k and v projections: from one matrix of q | k | v rows (Phi-3),
  // whose heads are views of its result, or from three, each with its bias
  // where the model has one (Qwen 2), named as llama.cpp names both: "Qcur".
  static Projections project(GraphBuilder& b, int il, Tensor* cur) {
    const HParams& hp = b.hparams();
    Graph& g = b.graph();
    const int64_t N = b.n_tokens(), D = hp.head_dim;
    if (b.weight(Role::AttnQkv, il)) {
      Tensor* qkv = named(b.matmul(Role::AttnQkv, il, cur), "wqkv", il);
      const size_t fs = sizeof(float), row = qkv->nb[1];
      return {named(view(g, qkv, {D, hp.n_head, N}, {D * fs, row}, 0), "Qcur", il),
              named(view(g, qkv, {D, hp.n_head_kv, N}, {D * fs, row}, hp.n_embd_q() * fs), "Kcur", il),
              view(g, qkv, {D * hp.n_head_kv, N}, {row}, (hp.n_embd_q() + hp.n_embd_kv()) * fs)};
    }
    auto projection = [&](Role w, Role bias, const char* name) {
      Tensor* t = named(b.matmul(w, il, cur), name, il);
      if (Tensor* bias_weight = b.weight(bias, il)) t = named(add(g, t, bias_weight), name, il);
      return t;
    };
    Tensor* q = projection(Role::AttnQ, Role::AttnQBias, "Qcur");
    q = reshape(g, q, {q->ne[0] / hp.n_head, hp.n_head, N});  // [2 D, heads, N] with the output gate
    Tensor* k = reshape(g, projection(Role::AttnK, Role::AttnKBias, "Kcur"), {D, hp.n_head_kv, N});
    return {q, k, projection(Role::AttnV, Role::AttnVBias, "Vcur")};
  }

  StandardAttentionOptions opt_;
};

}  // namespace

std::unique_ptr<AttentionBlock> make_standard_attention(const StandardAttentionOptions& options) {
  return std::make_unique<StandardAttention>(options);
}

}  // namespace qlens
