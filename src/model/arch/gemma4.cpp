// Gemma 4 (E2B/E4B, 12B, 26B-A4B, 31B), as llama.cpp's gemma4 graph runs it:
// Gemma 3's sandwich of norms around attention and feed-forward, with
// - per-layer shapes: the sliding layers' heads narrower (key_length_swa)
//   than the full-attention layers' (key_length), KV head counts and
//   feed-forward widths given per layer;
// - attention with a softmax scale of 1, per-head norms of q and k and a
//   weightless one of v; full-attention layers rotate through rope_freqs
//   (proportional rope: factors of 1e30 leave the unrotated dims alone), and
//   take their keys' projection as values where they have no attn_v;
// - shared KV layers: the last attention.shared_kv_layers layers keep no
//   cache and attend to an earlier layer's;
// - per-layer embeddings (E2B/E4B): a second table of n_embd_per_layer
//   values per token and layer, mixed with a projection of the embedded
//   token, gated into the residual stream after each layer's feed-forward;
// - a scalar per layer that its output is multiplied by (layer_output_scale);
// - the MoE variant (26B-A4B): a dense GELU feed-forward beside the experts,
//   each between its own norms; the router reads the residual's RMS norm
//   scaled per channel (ffn_gate_inp.scale); the experts' outputs are scaled
//   per expert (ffn_down_exps.scale);
// - final logits soft-capped, cap tanh(logits / cap).
#include <algorithm>
#include <cmath>

#include "model/arch/architecture.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class Gemma4 final : public Architecture {
 public:
  const char* name() const override { return "gemma4"; }

  void read_hparams(const gguf::File& f, HParams& hp) const override {
    const std::string a = hp.arch + ".";
    const std::string& path = f.path();
    hp.rope_mode = RopeMode::NeoX;
    if (!f.find(a + "attention.sliding_window"))
      throw Error(path + ": missing metadata key '" + a + "attention.sliding_window'");
    read_sliding_window(f, hp, 6);
    if (auto base = f.try_float(a + "rope.freq_base_swa")) hp.rope_freq_base_swa = static_cast<float>(*base);
    hp.head_dim_swa = positive_key(f, a + "attention.key_length_swa", hp.head_dim);
    if (positive_key(f, a + "attention.value_length_swa", hp.head_dim_swa) != hp.head_dim_swa ||
        hp.head_dim_v != hp.head_dim)
      throw Error(path + ": Gemma 4 needs value lengths equal to key lengths (attention.value_length, "
                         "attention.value_length_swa)");
    hp.n_rot_swa = positive_key(f, a + "rope.dimension_count_swa", hp.n_rot);
    if (hp.n_rot_swa > hp.head_dim_swa || hp.n_rot_swa % 2 != 0)
      throw Error(path + ": rope.dimension_count_swa " + std::to_string(hp.n_rot_swa) +
                  " must be even and at most the sliding layers' head size " + std::to_string(hp.head_dim_swa));
    read_shared_kv(f, hp);
    const auto per_layer = f.try_int(a + "embedding_length_per_layer_input");
    if (!per_layer || *per_layer < 0 || *per_layer > (int64_t{1} << 20))
      throw Error(path + ": metadata key '" + a + "embedding_length_per_layer_input' is missing or invalid");
    hp.n_embd_per_layer = *per_layer;
    if (auto cap = f.try_float(a + "final_logit_softcapping"); cap && *cap != 0) {
      if (!(*cap > 0)) throw Error(path + ": final_logit_softcapping must be positive");
      hp.final_logit_softcap = static_cast<float>(*cap);
    }
    read_expert_hparams(f, hp, false, 0);
    if (hp.n_expert > 0) {
      if (hp.n_ff_exp == 0) throw Error(path + ": missing metadata key '" + a + "expert_feed_forward_length'");
      hp.expert_gating = ExpertGating::Softmax;
      hp.expert_weights_norm = true;
      hp.expert_weights_scale = 0.0f;
    }
  }

  void write_hparams(gguf::Writer& w, const HParams& hp) const override {
    const std::string a = hp.arch + ".";
    // The sliding layers as the converter writes them: one bool per layer.
    std::vector<gguf::Value> marks;
    for (int il = 0; il < hp.n_layer; ++il) marks.push_back(gguf::Value::make_bool(hp.is_swa(il)));
    w.set(a + "attention.sliding_window", gguf::Value::make_u32(static_cast<uint32_t>(hp.n_swa)));
    w.set(a + "attention.sliding_window_pattern", gguf::Value::make_array(gguf::ValueType::Bool, std::move(marks)));
    w.set(a + "rope.freq_base_swa", gguf::Value::make_f32(hp.rope_freq_base_swa));
    const auto head_dim_swa = static_cast<uint32_t>(hp.head_dim_swa > 0 ? hp.head_dim_swa : hp.head_dim);
    w.set(a + "attention.key_length_swa", gguf::Value::make_u32(head_dim_swa));
    w.set(a + "attention.value_length_swa", gguf::Value::make_u32(head_dim_swa));
    w.set(a + "rope.dimension_count_swa",
          gguf::Value::make_u32(static_cast<uint32_t>(hp.n_rot_swa > 0 ? hp.n_rot_swa : hp.n_rot)));
    w.set(a + "attention.shared_kv_layers",
          gguf::Value::make_u32(static_cast<uint32_t>(hp.n_layer_kv > 0 ? hp.n_layer - hp.n_layer_kv : 0)));
    w.set(a + "embedding_length_per_layer_input", gguf::Value::make_u32(static_cast<uint32_t>(hp.n_embd_per_layer)));
    if (hp.final_logit_softcap != 0)
      w.set(a + "final_logit_softcapping", gguf::Value::make_f32(hp.final_logit_softcap));
  }

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    const int64_t E = hp.n_embd, P = hp.n_embd_per_layer;
    if (il < 0) {
      std::vector<TensorSpec> t = global_tensors(hp);
      // The full-attention layers' frequency factors (one tensor for all).
      if (!std::all_of(hp.swa_layers.begin(), hp.swa_layers.end(), [](bool s) { return s; }))
        t.push_back({Role::RopeFreqs, {hp.n_rot / 2, 1, 1, 1}});
      if (P > 0)
        append(t, {{Role::PerLayerTokenEmbd, {P * hp.n_layer, hp.n_vocab, 1, 1}},
                   {Role::PerLayerModelProj, {E, P * hp.n_layer, 1, 1}},
                   {Role::PerLayerProjNorm, {P, 1, 1, 1}}});
      return t;
    }
    const int64_t D = hp.head_dim_of(il), Q = hp.n_embd_q_of(il), KV = hp.n_embd_kv_of(il), F = hp.n_ff_of(il);
    const bool own_cache = hp.kv_layer_of(il) == il;
    std::vector<TensorSpec> t = {{Role::AttnNorm, {E, 1, 1, 1}},
                                 {Role::AttnQ, {E, Q, 1, 1}},
                                 {Role::AttnK, {E, KV, 1, 1}, own_cache},
                                 // Absent where the values are the keys (26B-A4B's and 31B's full layers).
                                 {Role::AttnV, {E, KV, 1, 1}, false, own_cache},
                                 {Role::AttnOutput, {Q, E, 1, 1}},
                                 {Role::AttnQNorm, {D, 1, 1, 1}},
                                 {Role::AttnKNorm, {D, 1, 1, 1}, own_cache},
                                 {Role::AttnPostNorm, {E, 1, 1, 1}},
                                 {Role::LayerOutputScale, {1, 1, 1, 1}, false, true},
                                 {Role::FfnNorm, {E, 1, 1, 1}},
                                 {Role::FfnGate, {E, F, 1, 1}},
                                 {Role::FfnUp, {E, F, 1, 1}},
                                 {Role::FfnDown, {F, E, 1, 1}},
                                 {Role::FfnPostNorm, {E, 1, 1, 1}}};
    if (hp.n_expert > 0) {
      const int64_t X = hp.n_expert, Fe = hp.n_ff_exp;
      append(t, {{Role::FfnGateInp, {E, X, 1, 1}},
                 {Role::FfnGateInpScale, {E, 1, 1, 1}},
                 {Role::FfnPreNorm2, {E, 1, 1, 1}},
                 {Role::FfnPostNorm1, {E, 1, 1, 1}},
                 {Role::FfnPostNorm2, {E, 1, 1, 1}}});
      append(t, expert_tensors(E, Fe, X));
      t.push_back({Role::FfnDownExpsScale, {X, 1, 1, 1}, false, true});
    }
    if (P > 0)
      append(t, {{Role::PerLayerInpGate, {E, P, 1, 1}},
                 {Role::PerLayerProj, {P, E, 1, 1}},
                 {Role::PerLayerPostNorm, {E, 1, 1, 1}}});
    return t;
  }

  std::unique_ptr<AttentionBlock> attention(const HParams& hp, int il) const override {
    const bool swa = hp.is_swa(il);
    return make_standard_attention({.qk_norm = true,
                                    .sliding_window = swa,
                                    .kq_scale = 1.0f,
                                    .v_norm = true,
                                    .rope_factors = !swa,
                                    .pos_names = true});
  }

  Tensor* embed(GraphBuilder& b) const override {
    Graph& g = b.graph();
    const HParams& hp = b.hparams();
    Tensor* x = named(scale(g, b.token_embedding(), std::sqrt(static_cast<float>(hp.n_embd))), "inp_scaled");
    if (hp.n_embd_per_layer > 0) b.set_per_layer_inputs(per_layer_inputs(b, x));
    return x;
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    Graph& g = b.graph();
    Tensor* cur = b.norm(in, Role::AttnNorm, il, "attn_norm");
    cur = b.attention(cur, il);
    cur = b.norm(cur, Role::AttnPostNorm, il, "attn_post_norm");
    Tensor* attn_out = named(add(g, cur, in), "attn_out", il);
    cur = b.weight(Role::FfnGateInp, il) ? dense_and_experts(b, il, attn_out) : dense(b, il, attn_out);
    // llama.cpp names this norm without a layer ("norm").
    cur = b.norm(cur, Role::FfnPostNorm, il, "ffn_post_norm", -1);
    cur = add(g, cur, attn_out);
    if (b.hparams().n_embd_per_layer > 0) cur = add_per_layer_input(b, il, cur);
    if (Tensor* s = b.weight(Role::LayerOutputScale, il)) cur = named(mul(g, cur, s), "out_scaled", il);
    return b.last_row_if_final(named(cur, "l_out", il), il);
  }

  Tensor* output(GraphBuilder& b, Tensor* in) const override {
    Graph& g = b.graph();
    const float cap = b.hparams().final_logit_softcap;
    Tensor* cur = b.norm(in, Role::OutputNorm, -1, "result_norm");
    cur = mul_mat(g, b.weight(Role::Output), cur);
    if (cap != 0) cur = scale(g, tanh(g, scale(g, cur, 1.0f / cap)), cap);
    return named(cur, "result_output");
  }

 private:
  // attention.shared_kv_layers: the layers past the first n_layer_kv read
  // the cache of layer n_layer_kv - 2 (sliding) or n_layer_kv - 1 (full), as
  // llama.cpp reuses them; those must be of the reader's kind.
  static void read_shared_kv(const gguf::File& f, HParams& hp) {
    const std::string key = hp.arch + ".attention.shared_kv_layers";
    const int64_t shared = f.try_int(key).value_or(0);
    if (shared < 0 || shared >= hp.n_layer)
      throw Error(f.path() + ": metadata key '" + key + "' is " + std::to_string(shared) + " of " +
                  std::to_string(hp.n_layer) + " layers");
    if (shared == 0) return;
    hp.n_layer_kv = hp.n_layer - shared;
    if (hp.n_layer_kv < 2)
      throw Error(f.path() + ": " + key + " leaves fewer than two layers with a KV cache");
    for (int il = static_cast<int>(hp.n_layer_kv); il < hp.n_layer; ++il) {
      const int src = hp.kv_layer_of(il);
      if (hp.is_swa(src) != hp.is_swa(il) || hp.head_dim_of(src) != hp.head_dim_of(il) ||
          hp.n_head_kv_of(src) != hp.n_head_kv_of(il))
        throw Error(f.path() + ": layer " + std::to_string(il) + " shares the KV cache of layer " +
                    std::to_string(src) + ", whose attention is of another kind or shape");
    }
  }

  // The per-layer inputs, [n_embd_per_layer, N, n_layer]: each token's row
  // of per_layer_token_embd scaled by sqrt(n_embd_per_layer), plus the
  // RMS-normed projection of the embedded token, over sqrt(2).
  static Tensor* per_layer_inputs(GraphBuilder& b, Tensor* x) {
    Graph& g = b.graph();
    const HParams& hp = b.hparams();
    const int64_t P = hp.n_embd_per_layer, L = hp.n_layer, N = b.n_tokens();
    Tensor* rows = get_rows(g, b.weight(Role::PerLayerTokenEmbd), b.inputs().tokens);
    rows = named(scale(g, reshape(g, rows, {P, L, N}), std::sqrt(static_cast<float>(P))), "inp_per_layer_selected");
    Tensor* proj = mul_mat(g, b.weight(Role::PerLayerModelProj), x);
    proj = reshape(g, scale(g, proj, 1.0f / std::sqrt(static_cast<float>(hp.n_embd))), {P, L, N});
    proj = b.norm(proj, Role::PerLayerProjNorm, -1, "per_layer_proj", -1);
    Tensor* in = named(scale(g, add(g, proj, rows), 1.0f / std::sqrt(2.0f)), "inp_per_layer");
    in = cont(g, permute(g, in, 0, 2, 1, 3));
    g.build(in);
    return in;
  }

  // pe_in + norm(proj(gelu(inp_gate(pe_in)) * this layer's input)).
  static Tensor* add_per_layer_input(GraphBuilder& b, int il, Tensor* pe_in) {
    Graph& g = b.graph();
    Tensor* all = b.per_layer_inputs();
    named(pe_in, "pe_in", il);
    Tensor* cur = gelu(g, b.matmul(Role::PerLayerInpGate, il, pe_in));
    Tensor* mine = view(g, all, {all->ne[0], all->ne[1]}, {all->nb[1]}, static_cast<size_t>(il) * all->nb[2]);
    cur = b.matmul(Role::PerLayerProj, il, mul(g, cur, mine));
    cur = b.norm(cur, Role::PerLayerPostNorm, il, "per_layer_embd_out");
    return add(g, pe_in, cur);
  }

  static Tensor* dense(GraphBuilder& b, int il, Tensor* attn_out) {
    Tensor* cur = b.norm(attn_out, Role::FfnNorm, il, "ffn_norm");
    return b.feed_forward(cur, il, FfnActivation::Gelu);
  }

  // The dense feed-forward and the experts side by side, each between its
  // own norms; the router's logits from the residual's own RMS norm, scaled
  // by 1/sqrt(n_embd) and per channel.
  static Tensor* dense_and_experts(GraphBuilder& b, int il, Tensor* attn_out) {
    Graph& g = b.graph();
    const HParams& hp = b.hparams();
    // The experts' nodes first, as llama.cpp's graph orders them.
    Tensor* router_in = scale(g, rms_norm(g, attn_out, hp.rms_eps), 1.0f / std::sqrt(static_cast<float>(hp.n_embd)));
    router_in = mul(g, router_in, b.weight(Role::FfnGateInpScale, il));
    Tensor* logits = mul_mat(g, b.weight(Role::FfnGateInp, il), router_in);
    const GraphBuilder::Routing routing = b.route_logits(logits, il);
    Tensor* moe = b.norm(attn_out, Role::FfnPreNorm2, il, "ffn_norm_2");
    moe = b.experts(moe, il, routing, FfnActivation::Gelu);
    g.build(moe);
    Tensor* mlp = b.norm(attn_out, Role::FfnNorm, il, "ffn_norm_1");
    mlp = b.feed_forward(mlp, il, FfnActivation::Gelu);
    mlp = b.norm(mlp, Role::FfnPostNorm1, il, "ffn_mlp");
    moe = b.norm(moe, Role::FfnPostNorm2, il, "ffn_moe");
    return named(add(g, mlp, moe), "ffn_moe_combined", il);
  }
};

}  // namespace

const Architecture& gemma4_architecture() {
  static const Gemma4 arch;
  return arch;
}

}  // namespace qlens
