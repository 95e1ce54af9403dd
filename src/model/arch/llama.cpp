// llama (and mistral): pre-norm blocks, grouped-query attention with rope,
// SwiGLU feed-forward; the output matrix is the token embedding when the file
// has no output.weight (Llama 3.2 1B/3B). Llama 3.1+ files carry their rope
// scaling as per-frequency divisors, rope_freqs.weight, which llama.cpp's
// converter computes and every layer uses.
#include "model/arch/architecture.h"

namespace qlens {

namespace {

class Llama final : public Architecture {
 public:
  const char* name() const override { return "llama"; }

  void read_hparams(const gguf::File&, HParams&) const override {}
  void write_hparams(gguf::Writer&, const HParams&) const override {}

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), F = hp.n_ff;
    if (il < 0)
      return {{Role::TokenEmbd, {E, hp.n_vocab, 1, 1}},
              {Role::OutputNorm, {E, 1, 1, 1}},
              {Role::Output, {E, hp.n_vocab, 1, 1}, false},
              {Role::RopeFreqs, {hp.n_rot / 2, 1, 1, 1}, false}};
    return {{Role::AttnNorm, {E, 1, 1, 1}}, {Role::AttnQ, {E, Q, 1, 1}},    {Role::AttnK, {E, KV, 1, 1}},
            {Role::AttnV, {E, KV, 1, 1}},   {Role::AttnOutput, {Q, E, 1, 1}}, {Role::FfnNorm, {E, 1, 1, 1}},
            {Role::FfnGate, {E, F, 1, 1}},  {Role::FfnUp, {E, F, 1, 1}},      {Role::FfnDown, {F, E, 1, 1}}};
  }

  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.pre_norm_block(in, il, {}, FfnActivation::Silu);
  }
};

}  // namespace

const Architecture& llama_architecture() {
  static const Llama arch;
  return arch;
}

}  // namespace qlens
