// Phi-3 and Phi-4-mini: one fused q | k | v projection (attn_qkv), gate | up
// fused in ffn_up (SwiGLU over its halves), NeoX rope on the first
// rope.dimension_count dims of each head (partial rotary on Phi-4-mini),
// queries scaled by 1/sqrt(head_dim) before attention. llama.cpp runs phi3
// without a sliding window; the long/short rope factors of the 128k models
// are not supported yet.
#include <cmath>

#include "model/arch/architecture.h"
#include "qlens/error.h"

namespace qlens {

namespace {

class Phi3 final : public Architecture {
 public:
  const char* name() const override { return "phi3"; }

  void read_hparams(const gguf::File& f, HParams& hp) const override {
    hp.rope_mode = RopeMode::NeoX;
    for (const char* t : {"rope_factors_long.weight", "rope_factors_short.weight"})
      if (f.find_tensor(t)) throw Error(f.path() + ": '" + t + "' (LongRoPE) is not supported yet");
  }
  void write_hparams(gguf::Writer&, const HParams&) const override {}

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), F = hp.n_ff;
    if (il < 0) return global_tensors(hp);
    return {{Role::AttnNorm, {E, 1, 1, 1}},       {Role::AttnQkv, {E, Q + 2 * KV, 1, 1}},
            {Role::AttnOutput, {Q, E, 1, 1}},     {Role::FfnNorm, {E, 1, 1, 1}},
            {Role::FfnUp, {E, 2 * F, 1, 1}},      {Role::FfnDown, {F, E, 1, 1}}};
  }

  std::unique_ptr<AttentionBlock> attention(const HParams& hp, int il) const override {
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    return make_standard_attention({.q_scale = q_scale, .sliding_window = hp.is_swa(il)});
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.pre_norm_block(in, il, FfnActivation::Silu);
  }
};

}  // namespace

const Architecture& phi3_architecture() {
  static const Phi3 arch;
  return arch;
}

}  // namespace qlens
