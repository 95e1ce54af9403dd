// Qwen 3 MoE (Qwen3-30B-A3B, 235B-A22B): Qwen 3's attention (per-head q/k
// RMS norms, NeoX rope, its own head size) and a mixture of experts in every
// layer: softmax over the experts, the top expert_used_count, their weights
// divided by their sum (hard-coded in llama.cpp for this architecture).
#include "model/arch/architecture.h"

namespace qlens {

namespace {

class Qwen3Moe final : public Architecture {
 public:
  const char* name() const override { return "qwen3moe"; }

  void read_hparams(const gguf::File& f, HParams& hp) const override {
    hp.rope_mode = RopeMode::NeoX;
    // llama.cpp's fallback for files without expert_feed_forward_length.
    read_expert_hparams(f, hp, true, 0);
    if (hp.n_ff_exp == 0) hp.n_ff_exp = hp.n_ff / hp.n_expert_used;
    hp.expert_weights_norm = true;
  }
  void write_hparams(gguf::Writer&, const HParams&) const override {}

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    if (il < 0) return global_tensors(hp);
    std::vector<TensorSpec> t = attention_tensors(hp, /*qk_norm=*/true);
    append(t, ffn_tensors(hp));  // the experts (read_hparams requires them)
    return t;
  }

  std::unique_ptr<AttentionBlock> attention(const HParams& hp, int il) const override {
    return make_standard_attention({.qk_norm = true, .sliding_window = hp.is_swa(il)});
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.pre_norm_block(in, il, FfnActivation::Silu);
  }
};

}  // namespace

const Architecture& qwen3moe_architecture() {
  static const Qwen3Moe arch;
  return arch;
}

}  // namespace qlens
