// The latent attention block (MLA: DeepSeek V2/V3, Kimi K2) in its absorbed
// form, as llama.cpp 0c1e570 runs it without flash attention: the cache holds
// per token the normed compressed kv (n_lora_kv) and the roped shared key
// part (n_rot), one row of n_lora_kv + n_rot; each query head's no-rope part
// is carried into latent space by attn_k_b, so attention is multi-query
// attention over that row; the result, a latent per head, goes back to
// value space through attn_v_b. Node names are llama.cpp's.
#include <cmath>

#include "model/attention.h"
#include "model/graph_builder.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class LatentAttention final : public AttentionBlock {
 public:
  const char* kind() const override { return "latent"; }
  StateKind state_kind() const override { return StateKind::PerPosition; }

  std::vector<StateSpec> state(const HParams& hp, int il, int64_t n_ctx, DType cache_type) const override {
    return {{"cache_k_l" + std::to_string(il), cache_type, {row_width(hp) * n_ctx, 1, 1, 1}}};
  }

  Tensor* build(GraphBuilder& b, int il, Tensor* cur, std::span<Tensor* const> state) const override {
    const HParams& hp = b.hparams();
    Graph& g = b.graph();
    const int64_t N = b.n_tokens(), n_past = b.n_past(), n_kv = n_past + N, H = hp.n_head;
    const int64_t L = hp.n_lora_kv, R = hp.n_rot, Dk = hp.head_dim_k_mla, nope = Dk - R, W = row_width(hp);
    constexpr size_t fs = sizeof(float);
    Tensor* cache = state[0];
    const size_t esize = type_traits(cache->type).block_bytes, row = static_cast<size_t>(W) * esize;
    auto rope_part = [&](Tensor* t) {
      return rope(g, t, b.inputs().positions, static_cast<int>(R), hp.rope_mode, hp.rope_freq_base,
                  hp.rope_freq_scale, nullptr, hp.rope_yarn);
    };

    // Queries [Dk, H, N]: the no-rope part of each head, then its rope part.
    Tensor* q;
    if (b.weight(Role::AttnQA, il)) {
      q = named(b.matmul(Role::AttnQA, il, cur), "q", il);
      q = b.norm(q, Role::AttnQANorm, il, "q");
      q = named(b.matmul(Role::AttnQB, il, q), "q", il);
    } else {
      q = named(b.matmul(Role::AttnQ, il, cur), "q", il);
    }
    q = named(reshape(g, q, {Dk, H, N}), "q", il);

    // The compressed kv and the shared rope key of each token.
    Tensor* kv_cmpr_pe = named(b.matmul(Role::AttnKvAMqa, il, cur), "kv_cmpr_pe", il);  // [L + R, N]
    const size_t kv_row = kv_cmpr_pe->nb[1];
    Tensor* kv_cmpr = named(view(g, kv_cmpr_pe, {L, N}, {kv_row}, 0), "kv_cmpr", il);
    Tensor* k_pe = named(view(g, kv_cmpr_pe, {R, 1, N}, {kv_row, kv_row}, L * fs), "k_pe", il);
    k_pe = named(rope_part(k_pe), "k_pe", il);
    kv_cmpr = b.norm(kv_cmpr, Role::AttnKvANorm, il, "kv_cmpr");

    Tensor* q_nope = named(view(g, q, {nope, H, N}, {q->nb[1], q->nb[2]}, 0), "q_nope", il);
    Tensor* q_pe = named(view(g, q, {R, H, N}, {q->nb[1], q->nb[2]}, nope * fs), "q_pe", il);
    q_pe = named(rope_part(q_pe), "q_pe", il);
    q_nope = named(permute(g, q_nope, 0, 2, 1, 3), "q_nope_perm", il);                   // [nope, N, H]
    Tensor* q_absorbed = named(mul_mat(g, b.weight(Role::AttnKB, il), q_nope), "q_nope_absorbed", il);  // [L, N, H]
    q_absorbed = named(permute(g, q_absorbed, 0, 2, 1, 3), "q_nope_absorbed_perm", il);                // [L, H, N]
    Tensor* Q = named(concat(g, q_absorbed, q_pe, 0), "Qcur", il);                         // [W, H, N]
    kv_cmpr = named(reshape(g, kv_cmpr, {L, 1, N}), "kv_cmpr_reshape", il);
    Tensor* K = named(concat(g, kv_cmpr, k_pe, 0), "Kcur", il);  // [W, 1, N]
    named(kv_cmpr, "Vcur", il);

    // Store this batch's rows; the views that read the cache depend on the
    // copy, so every order of the graph stores before it attends.
    Tensor* k_dst = named(view(g, cache, {N * W}, {}, n_past * row), "k_cache_view", il);
    Tensor* k_stored = cpy(g, K, k_dst);
    Tensor* kc = named(view(g, cache, {W, n_kv, 1}, {row, n_kv * row}, 0), "k", il);
    Tensor* vc = named(view(g, cache, {L, n_kv, 1}, {row, n_kv * row}, 0), "v", il);  // the latent part of each row
    kc->src[1] = k_stored;
    vc->src[1] = k_stored;

    Tensor* qp = named(permute(g, Q, 0, 2, 1, 3), "q", il);  // [W, N, H]
    Tensor* kq = named(mul_mat(g, kc, qp), "kq", il);        // [n_kv, N, H]
    kq = named(soft_max(g, kq, b.inputs().mask, kq_scale(hp)), "kq_soft_max", il);
    Tensor* v_cont = named(cont(g, transpose(g, vc)), "v_cont", il);  // [n_kv, L, 1]
    Tensor* kqv = named(mul_mat(g, v_cont, kq), "kqv", il);          // [L, N, H]
    kqv = named(mul_mat(g, b.weight(Role::AttnVB, il), kqv), "kqv_mla", il);  // [Dv, N, H]
    Tensor* merged = named(permute(g, kqv, 0, 2, 1, 3), "kqv_merged", il);
    cur = named(cont(g, merged), "kqv_merged_cont", il);
    cur = reshape(g, cur, {hp.head_dim_v_mla * H, N});
    return named(b.matmul(Role::AttnOutput, il, cur), "kqv_out", il);
  }

 private:
  static int64_t row_width(const HParams& hp) { return hp.n_lora_kv + hp.n_rot; }

  // The softmax scale: 1/sqrt(key length per head), times mscale^2 for
  // DeepSeek's YaRN (llama.cpp pre-scales the scores so, with the rotation's
  // own scale cancelled in read_yarn).
  static float kq_scale(const HParams& hp) {
    const float ln_factor = std::log(1.0f / hp.rope_freq_scale);
    const float attn_factor_org = hp.rope_yarn.attn_factor * (1.0f + 0.1f * ln_factor);
    const float mscale = attn_factor_org * (1.0f + 0.1f * hp.rope_yarn_log_mul * ln_factor);
    return mscale * mscale / std::sqrt(static_cast<float>(hp.head_dim_k_mla));
  }
};

}  // namespace

std::unique_ptr<AttentionBlock> make_latent_attention() { return std::make_unique<LatentAttention>(); }

}  // namespace qlens
