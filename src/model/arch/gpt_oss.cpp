// gpt-oss (OpenAI's open-weight mixtures of experts, 20B and 120B): attention
// with biases, a learned sink per head and a sliding window on every other
// layer (the even ones), NeoX rope with YaRN; a second norm
// (post_attention_norm) before the feed-forward; a router with a bias whose
// top-k logits are weighted by their softmax; experts whose rows have
// biases, with the clamped SwiGLU (alpha 1.702, limit 7). As llama.cpp's
// gpt-oss graph (llama_model_openai_moe).
#include "model/arch/architecture.h"

namespace qlens {

namespace {

class GptOss final : public Architecture {
 public:
  const char* name() const override { return "gpt-oss"; }

  void read_hparams(const gguf::File& f, HParams& hp) const override {
    const std::string a = hp.arch + ".";
    hp.rope_mode = RopeMode::NeoX;
    read_expert_hparams(f, hp, true, 0);
    hp.expert_gating = ExpertGating::SoftmaxWeight;
    read_sliding_window(f, hp, 2);
    // The local layers rotate as the global ones unless the file says otherwise.
    hp.rope_freq_base_swa = static_cast<float>(f.try_float(a + "rope.freq_base_swa").value_or(hp.rope_freq_base));
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
  }

  void write_hparams(gguf::Writer& w, const HParams& hp) const override { write_sliding_window(w, hp); }

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    if (il < 0) return global_tensors(hp);
    const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), F = hp.n_ff_exp, X = hp.n_expert;
    std::vector<TensorSpec> t = attention_tensors(hp, /*qk_norm=*/false);
    append(t, {{Role::AttnQBias, {Q, 1, 1, 1}, false, true},
               {Role::AttnKBias, {KV, 1, 1, 1}, false, true},
               {Role::AttnVBias, {KV, 1, 1, 1}, false, true},
               {Role::AttnOutputBias, {E, 1, 1, 1}},
               {Role::AttnSinks, {hp.n_head, 1, 1, 1}},
               {Role::AttnPostNorm, {E, 1, 1, 1}},
               {Role::FfnGateInp, {E, X, 1, 1}},
               {Role::FfnGateInpBias, {X, 1, 1, 1}},
               {Role::FfnGateExps, {E, F, X, 1}},
               {Role::FfnGateExpsBias, {F, X, 1, 1}},
               {Role::FfnUpExps, {E, F, X, 1}},
               {Role::FfnUpExpsBias, {F, X, 1, 1}},
               {Role::FfnDownExps, {F, E, X, 1}},
               {Role::FfnDownExpsBias, {E, X, 1, 1}}});
    return t;
  }

  std::unique_ptr<AttentionBlock> attention(const HParams& hp, int il) const override {
    return make_standard_attention({.sliding_window = hp.is_swa(il), .sinks = true});
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.residual_layer(in, il, "ffn_inp", Role::AttnPostNorm, "attn_post_norm",
                            [&](Tensor* cur) { return b.moe_feed_forward(cur, il, FfnActivation::SwigluOai); });
  }
};

}  // namespace

const Architecture& gpt_oss_architecture() {
  static const GptOss arch;
  return arch;
}

}  // namespace qlens
