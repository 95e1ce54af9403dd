// deepseek2: DeepSeek V2/V3/R1 and Kimi K2 as today's converters write them.
// Multi-head latent attention (src/model/attention_latent.cpp) with q through
// a low-rank pair (none in the Lite models) and the per-head k_b / v_b split
// of the kv up-projection; normal (not NeoX) rope with YaRN and DeepSeek's
// attention scale; the first leading_dense_block_count layers dense, the
// others a mixture of experts routed by sigmoid (or softmax) with the
// selection bias exp_probs_b, optional expert groups, normalized and scaled
// weights, plus shared experts. As llama.cpp's llama_model_deepseek2 graph.
#include "model/arch/architecture.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class Deepseek2 final : public Architecture {
 public:
  const char* name() const override { return "deepseek2"; }

  void read_hparams(const gguf::File& f, HParams& hp) const override {
    const std::string a = hp.arch + ".";
    hp.rope_mode = RopeMode::Normal;
    hp.n_lora_q = f.try_int(a + "attention.q_lora_rank").value_or(0);
    hp.n_lora_kv = positive_key(f, a + "attention.kv_lora_rank");
    const auto k_mla = f.try_int(a + "attention.key_length_mla"), v_mla = f.try_int(a + "attention.value_length_mla");
    if (!k_mla || !v_mla)
      throw Error(f.path() + ": a deepseek2 file without attention.key_length_mla / value_length_mla (one " +
                  "attn_kv_b matrix, as converters wrote before the k_b / v_b split) is not supported: convert " +
                  "the model again with a current convert_hf_to_gguf.py");
    hp.head_dim_k_mla = *k_mla;
    hp.head_dim_v_mla = *v_mla;
    if (hp.head_dim_k_mla <= hp.n_rot || hp.head_dim_v_mla <= 0)
      throw Error(f.path() + ": attention.key_length_mla " + std::to_string(hp.head_dim_k_mla) +
                  " must exceed rope.dimension_count " + std::to_string(hp.n_rot));
    read_deepseek_moe_hparams(f, hp, ExpertGating::Softmax);
  }

  void write_hparams(gguf::Writer& w, const HParams& hp) const override {
    const std::string a = hp.arch + ".";
    auto u32 = [](int64_t v) { return gguf::Value::make_u32(static_cast<uint32_t>(v)); };
    write_deepseek_moe_hparams(w, hp);
    if (hp.n_lora_q > 0) w.set(a + "attention.q_lora_rank", u32(hp.n_lora_q));
    w.set(a + "attention.kv_lora_rank", u32(hp.n_lora_kv));
    w.set(a + "attention.key_length_mla", u32(hp.head_dim_k_mla));
    w.set(a + "attention.value_length_mla", u32(hp.head_dim_v_mla));
  }

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    if (il < 0) return global_tensors(hp);
    const int64_t E = hp.n_embd, H = hp.n_head, L = hp.n_lora_kv, R = hp.n_rot;
    const int64_t Dk = hp.head_dim_k_mla, Dv = hp.head_dim_v_mla;
    std::vector<TensorSpec> t = {{Role::AttnNorm, {E, 1, 1, 1}}};
    if (hp.n_lora_q > 0)
      append(t, {{Role::AttnQA, {E, hp.n_lora_q, 1, 1}},
                 {Role::AttnQANorm, {hp.n_lora_q, 1, 1, 1}},
                 {Role::AttnQB, {hp.n_lora_q, H * Dk, 1, 1}}});
    else
      append(t, {{Role::AttnQ, {E, H * Dk, 1, 1}}});
    append(t, {{Role::AttnKvAMqa, {E, L + R, 1, 1}},
               {Role::AttnKvANorm, {L, 1, 1, 1}},
               {Role::AttnKB, {Dk - R, L, H, 1}},
               {Role::AttnVB, {L, Dv, H, 1}},
               {Role::AttnOutput, {H * Dv, E, 1, 1}},
               {Role::FfnNorm, {E, 1, 1, 1}}});
    append(t, deepseek_moe_ffn_tensors(hp, il));
    if (il >= hp.n_layer) append(t, nextn_tensors(hp));
    return t;
  }

  std::unique_ptr<AttentionBlock> attention(const HParams&, int) const override { return make_latent_attention(); }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.residual_layer(in, il, "ffn_inp", Role::FfnNorm, "ffn_norm",
                            [&](Tensor* cur) { return b.deepseek_moe_feed_forward(cur, il, "ffn_shexp"); });
  }
};

}  // namespace

const Architecture& deepseek2_architecture() {
  static const Deepseek2 arch;
  return arch;
}

}  // namespace qlens
