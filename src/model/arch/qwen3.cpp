// Qwen 3 (dense): llama's blocks with per-head RMS norms of q and k before
// rope (NeoX), a head size of its own (attention.key_length, so the query
// projection need not be n_embd wide), SwiGLU feed-forward; tied or separate
// output.
#include "model/arch/architecture.h"

namespace qlens {

namespace {

class Qwen3 final : public Architecture {
 public:
  const char* name() const override { return "qwen3"; }

  void read_hparams(const gguf::File&, HParams& hp) const override { hp.rope_mode = RopeMode::NeoX; }
  void write_hparams(gguf::Writer&, const HParams&) const override {}

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    if (il < 0) return global_tensors(hp);
    std::vector<TensorSpec> t = attention_tensors(hp, /*qk_norm=*/true);
    append(t, ffn_tensors(hp));
    return t;
  }

  std::unique_ptr<AttentionBlock> attention(const HParams& hp, int il) const override {
    return make_standard_attention({.qk_norm = true, .sliding_window = hp.is_swa(il)});
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.pre_norm_block(in, il, FfnActivation::Silu);
  }
  bool scales_feed_forward() const override { return true; }
};

}  // namespace

const Architecture& qwen3_architecture() {
  static const Qwen3 arch;
  return arch;
}

}  // namespace qlens
