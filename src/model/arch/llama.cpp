// llama (and mistral): pre-norm blocks, grouped-query attention with rope,
// SwiGLU feed-forward; the output matrix is the token embedding when the file
// has no output.weight (Llama 3.2 1B/3B). Llama 3.1+ files carry their rope
// scaling as per-frequency divisors, rope_freqs.weight, which llama.cpp's
// converter computes and every layer uses. With expert keys (Mixtral) the
// feed-forward is a mixture of experts of n_ff rows each, softmax-routed, the
// chosen experts' weights renormalized.
#include "model/arch/architecture.h"

namespace qlens {

namespace {

class Llama final : public Architecture {
 public:
  const char* name() const override { return "llama"; }

  void read_hparams(const gguf::File& f, HParams& hp) const override {
    read_expert_hparams(f, hp, false, hp.n_ff);
    hp.expert_weights_norm = hp.n_expert > 0;
  }
  void write_hparams(gguf::Writer&, const HParams&) const override {}

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    if (il < 0) {
      std::vector<TensorSpec> t = global_tensors(hp);
      t.push_back({Role::RopeFreqs, {hp.n_rot / 2, 1, 1, 1}, false});
      return t;
    }
    std::vector<TensorSpec> t = attention_tensors(hp, /*qk_norm=*/false);
    append(t, ffn_tensors(hp));  // experts where the file has expert keys (Mixtral)
    return t;
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.pre_norm_block(in, il, FfnActivation::Silu);
  }
  bool scales_feed_forward() const override { return true; }
};

}  // namespace

const Architecture& llama_architecture() {
  static const Llama arch;
  return arch;
}

}  // namespace qlens
