// glm4moe: GLM-4.5, GLM-4.5-Air, GLM-4.6 (and Solar Open). Grouped-query
// attention with q/k/v biases, per-head q/k norms where the model has them
// (GLM-4.5, not Air), NeoX rope on the first rope.dimension_count dims of
// each head; a norm after attention (post_attention_norm) before the
// feed-forward: dense in the leading layers, else experts routed by sigmoid
// with the selection bias exp_probs_b, normalized and scaled weights, plus
// shared experts. The NextN (multi-token prediction) layers at the end of
// block_count are loaded and checked but not run, as llama.cpp's main graph
// does. As llama.cpp's llama_model_glm4_moe graph.
#include "model/arch/architecture.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class Glm4Moe final : public Architecture {
 public:
  const char* name() const override { return "glm4moe"; }

  void read_hparams(const gguf::File& f, HParams& hp) const override {
    const std::string a = hp.arch + ".";
    hp.rope_mode = RopeMode::NeoX;
    if (auto sections = f.try_int_array(a + "rope.dimension_sections");
        sections && sections->size() >= 2 && (*sections)[0] > 0 && (*sections)[1] > 0)
      throw Error(f.path() + ": multi-section rope (a glm4moe vision model) is not supported");
    read_deepseek_moe_hparams(f, hp, ExpertGating::Sigmoid);
  }

  void write_hparams(gguf::Writer& w, const HParams& hp) const override { write_deepseek_moe_hparams(w, hp); }

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    if (il < 0) return global_tensors(hp);
    const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), D = hp.head_dim;
    std::vector<TensorSpec> t = attention_tensors(hp, /*qk_norm=*/false);
    append(t, {{Role::AttnQBias, {Q, 1, 1, 1}, false, true},
               {Role::AttnKBias, {KV, 1, 1, 1}, false, true},
               {Role::AttnVBias, {KV, 1, 1, 1}, false, true},
               {Role::AttnQNorm, {D, 1, 1, 1}, false},
               {Role::AttnKNorm, {D, 1, 1, 1}, false},
               {Role::AttnPostNorm, {E, 1, 1, 1}}});
    append(t, deepseek_moe_ffn_tensors(hp, il));
    if (il >= hp.n_layer) append(t, nextn_tensors(hp));
    return t;
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.residual_layer(in, il, "ffn_inp", Role::AttnPostNorm, "post_attn_norm",
                            [&](Tensor* cur) { return b.deepseek_moe_feed_forward(cur, il, "ffn_shexp_out"); });
  }
};

}  // namespace

const Architecture& glm4moe_architecture() {
  static const Glm4Moe arch;
  return arch;
}

}  // namespace qlens
