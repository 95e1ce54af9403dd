// qwen35 and qwen35moe (Qwen3.5 / Qwen3.6): hybrids of gated DeltaNet layers
// (src/model/attention_recurrent.cpp) and, every full_attention_interval-th
// layer (4: three DeltaNet layers, then one), gated full attention: q
// projected with a gate per head (sigmoid on the attention's output), q/k
// RMS norms, IMRope (rope.dimension_sections) on part of each head. Each
// layer: attn_norm, the block, the residual ("attn_residual"), the post
// attention norm, the feed-forward, the residual ("l_out"); qwen35 has a
// dense SiLU feed-forward, qwen35moe softmax-routed experts (weights
// normalized) plus a shared expert scaled by sigmoid(ffn_gate_inp_shexp x).
// As llama.cpp 0c1e570's llama_model_qwen35 / llama_model_qwen35moe graphs.
// The two differ in their feed-forward alone, so one class here runs both.
#include "model/arch/architecture.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class Qwen35 final : public Architecture {
 public:
  explicit Qwen35(bool moe) : moe_(moe) {}
  const char* name() const override { return moe_ ? "qwen35moe" : "qwen35"; }

  void read_hparams(const gguf::File& f, HParams& hp) const override {
    const std::string a = hp.arch + ".";
    hp.rope_mode = RopeMode::IMRope;
    const auto sections = f.try_int_array(a + "rope.dimension_sections");
    if (!sections || sections->size() < 4)
      throw Error(f.path() + ": missing metadata key '" + a + "rope.dimension_sections' (four integers)");
    for (int i = 0; i < 4; ++i) hp.rope_sections[i] = static_cast<int32_t>((*sections)[i]);
    auto ssm_key = [&](const char* key) { return positive_key(f, a + key); };
    hp.ssm_d_conv = ssm_key("ssm.conv_kernel");
    hp.ssm_d_inner = ssm_key("ssm.inner_size");
    hp.ssm_d_state = ssm_key("ssm.state_size");
    hp.ssm_dt_rank = ssm_key("ssm.time_step_rank");
    hp.ssm_n_group = ssm_key("ssm.group_count");
    // The fused delta rule wants square states (value head = key head) and
    // key heads that tile the value heads.
    if (hp.ssm_d_inner != hp.ssm_dt_rank * hp.ssm_d_state || hp.ssm_dt_rank % hp.ssm_n_group != 0)
      throw Error(f.path() + ": ssm.inner_size " + std::to_string(hp.ssm_d_inner) + " must be ssm.time_step_rank " +
                  std::to_string(hp.ssm_dt_rank) + " x ssm.state_size " + std::to_string(hp.ssm_d_state) +
                  ", and ssm.group_count " + std::to_string(hp.ssm_n_group) + " must divide ssm.time_step_rank");
    if (hp.head_dim_v != hp.head_dim)
      throw Error(f.path() + ": attention.value_length must equal attention.key_length for " + hp.arch);
    // llama.cpp: a per-layer array marks the DeltaNet layers; else every
    // full_attention_interval-th layer (default 4) is full attention.
    hp.recurrent_layers.assign(hp.n_layer, false);
    const std::string recurrent_key = a + "attention.recurrent_layers";
    if (f.find(recurrent_key)) {
      const auto marks = f.try_int_array(recurrent_key);
      if (!marks || static_cast<int64_t>(marks->size()) < hp.n_layer)
        throw Error(f.path() + ": " + recurrent_key + " must hold one integer per layer (" +
                    std::to_string(hp.n_layer) + ")");
      for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent_layers[il] = (*marks)[il] != 0;
    } else {
      const int64_t interval = f.try_int(a + "full_attention_interval").value_or(4);
      if (interval <= 0) throw Error(f.path() + ": " + a + "full_attention_interval must be positive");
      for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent_layers[il] = (il + 1) % interval != 0;
    }
    if (moe_) {
      read_expert_hparams(f, hp, true, 0);
      hp.n_ff_shexp = f.try_int(a + "expert_shared_feed_forward_length").value_or(0);
      if (hp.n_ff_shexp < 0) throw Error(f.path() + ": " + a + "expert_shared_feed_forward_length is negative");
      if (hp.n_ff_shexp == 0) hp.n_ff_shexp = hp.n_ff;  // llama.cpp's fallback
      if (hp.n_ff_shexp == 0)
        throw Error(f.path() + ": missing metadata key '" + a +
                    "expert_shared_feed_forward_length' (and no feed_forward_length to fall back on)");
      hp.expert_weights_norm = true;
      hp.expert_gating = ExpertGating::Softmax;
    }
  }

  void write_hparams(gguf::Writer& w, const HParams& hp) const override {
    const std::string a = hp.arch + ".";
    auto u32 = [](int64_t v) { return gguf::Value::make_u32(static_cast<uint32_t>(v)); };
    w.set(a + "rope.dimension_sections",
          gguf::Value::make_i32_array({hp.rope_sections[0], hp.rope_sections[1], hp.rope_sections[2],
                                       hp.rope_sections[3]}));
    w.set(a + "ssm.conv_kernel", u32(hp.ssm_d_conv));
    w.set(a + "ssm.inner_size", u32(hp.ssm_d_inner));
    w.set(a + "ssm.state_size", u32(hp.ssm_d_state));
    w.set(a + "ssm.time_step_rank", u32(hp.ssm_dt_rank));
    w.set(a + "ssm.group_count", u32(hp.ssm_n_group));
    // As converters write it: the interval when the layers follow one.
    int64_t interval = 0;
    for (int64_t n = 1; n <= hp.n_layer && interval == 0; ++n) {
      bool fits = true;
      for (int64_t il = 0; il < hp.n_layer; ++il) fits = fits && hp.is_recurrent(static_cast<int>(il)) == ((il + 1) % n != 0);
      if (fits) interval = n;
    }
    if (interval > 0) {
      w.set(a + "full_attention_interval", u32(interval));
    } else {
      std::vector<int32_t> marks(hp.recurrent_layers.begin(), hp.recurrent_layers.end());
      w.set(a + "attention.recurrent_layers", gguf::Value::make_i32_array(marks));
    }
    if (moe_) w.set(a + "expert_shared_feed_forward_length", u32(hp.n_ff_shexp));
  }

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    if (il < 0) return global_tensors(hp);
    const int64_t E = hp.n_embd, D = hp.head_dim, S = hp.ssm_d_state, Hv = hp.ssm_dt_rank;
    const int64_t inner = hp.ssm_d_inner, conv = inner + 2 * hp.ssm_n_group * S;
    std::vector<TensorSpec> t = {{Role::AttnNorm, {E, 1, 1, 1}}, {Role::AttnPostNorm, {E, 1, 1, 1}}};
    if (hp.is_recurrent(il)) {
      append(t, {{Role::AttnQkv, {E, conv, 1, 1}},
                 {Role::AttnGate, {E, inner, 1, 1}},
                 {Role::SsmConv1d, {hp.ssm_d_conv, conv, 1, 1}},
                 {Role::SsmDt, {Hv, 1, 1, 1}},
                 {Role::SsmA, {Hv, 1, 1, 1}},
                 {Role::SsmBeta, {E, Hv, 1, 1}},
                 {Role::SsmAlpha, {E, Hv, 1, 1}},
                 {Role::SsmNorm, {S, 1, 1, 1}},
                 {Role::SsmOut, {inner, E, 1, 1}}});
    } else {
      // Full attention (and the NextN layers, which are full-attention
      // layers): the query rows hold each head's query and its gate.
      append(t, {{Role::AttnQ, {E, 2 * hp.n_embd_q(), 1, 1}},
                 {Role::AttnK, {E, hp.n_embd_kv(), 1, 1}},
                 {Role::AttnV, {E, hp.n_embd_kv(), 1, 1}},
                 {Role::AttnOutput, {hp.n_embd_q(), E, 1, 1}},
                 {Role::AttnQNorm, {D, 1, 1, 1}},
                 {Role::AttnKNorm, {D, 1, 1, 1}}});
    }
    if (moe_) {
      const int64_t F = hp.n_ff_exp, X = hp.n_expert, Fs = hp.n_ff_shexp;
      t.push_back({Role::FfnGateInp, {E, X, 1, 1}});
      append(t, expert_tensors(E, F, X));
      append(t, {{Role::FfnGateInpShexp, {E, 1, 1, 1}},
                 {Role::FfnGateShexp, {E, Fs, 1, 1}},
                 {Role::FfnUpShexp, {E, Fs, 1, 1}},
                 {Role::FfnDownShexp, {Fs, E, 1, 1}}});
    } else {
      const int64_t F = hp.n_ff;
      append(t, {{Role::FfnGate, {E, F, 1, 1}}, {Role::FfnUp, {E, F, 1, 1}}, {Role::FfnDown, {F, E, 1, 1}}});
    }
    if (il >= hp.n_layer) append(t, nextn_tensors(hp));
    return t;
  }

  std::unique_ptr<AttentionBlock> attention(const HParams& hp, int il) const override {
    if (hp.is_recurrent(il)) return make_gated_delta_net_block();
    return make_standard_attention({.qk_norm = true, .output_gate = true});
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.residual_layer(in, il, "attn_residual", Role::AttnPostNorm, "attn_post_norm", [&](Tensor* cur) {
      return moe_ ? moe_ffn(b, il, cur) : b.feed_forward(cur, il, FfnActivation::Silu);
    });
  }

 private:
  // The routed experts plus the shared expert, scaled per token by the
  // sigmoid of its own one-row gate.
  static Tensor* moe_ffn(GraphBuilder& b, int il, Tensor* cur) {
    Graph& g = b.graph();
    Tensor* moe = b.moe_feed_forward(cur, il, FfnActivation::Silu);
    Tensor* shared = b.feed_forward(cur, il, FfnActivation::Silu,
                                    {Role::FfnGateShexp, Role::FfnUpShexp, Role::FfnDownShexp}, "ffn_shexp");
    Tensor* gate = named(b.matmul(Role::FfnGateInpShexp, il, cur), "shared_expert_gate", il);  // [1, N]
    gate = named(sigmoid(g, gate), "shared_expert_gate_sigmoid", il);
    shared = named(mul(g, shared, gate), "ffn_shexp_gated", il);
    return named(add(g, moe, shared), "ffn_out", il);
  }

  bool moe_;
};

}  // namespace

const Architecture& qwen35_architecture() {
  static const Qwen35 arch(false);
  return arch;
}

const Architecture& qwen35moe_architecture() {
  static const Qwen35 arch(true);
  return arch;
}

}  // namespace qlens
