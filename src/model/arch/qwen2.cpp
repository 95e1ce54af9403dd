// Qwen 2 and 2.5: llama's blocks with biases on the q, k and v projections
// (none on the output projection), NeoX rope, SwiGLU feed-forward; the output
// matrix is the token embedding when the file has no output.weight (the
// small Qwen 2.5 models).
#include "model/arch/architecture.h"

namespace qlens {

namespace {

class Qwen2 final : public Architecture {
 public:
  const char* name() const override { return "qwen2"; }

  void read_hparams(const gguf::File&, HParams& hp) const override { hp.rope_mode = RopeMode::NeoX; }
  void write_hparams(gguf::Writer&, const HParams&) const override {}

  std::vector<TensorSpec> tensors(const HParams& hp, int il) const override {
    const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), F = hp.n_ff;
    if (il < 0) return global_tensors(hp);
    return {{Role::AttnNorm, {E, 1, 1, 1}},  {Role::AttnQ, {E, Q, 1, 1}},      {Role::AttnQBias, {Q, 1, 1, 1}},
            {Role::AttnK, {E, KV, 1, 1}},    {Role::AttnKBias, {KV, 1, 1, 1}}, {Role::AttnV, {E, KV, 1, 1}},
            {Role::AttnVBias, {KV, 1, 1, 1}}, {Role::AttnOutput, {Q, E, 1, 1}}, {Role::FfnNorm, {E, 1, 1, 1}},
            {Role::FfnGate, {E, F, 1, 1}},   {Role::FfnUp, {E, F, 1, 1}},      {Role::FfnDown, {F, E, 1, 1}}};
  }

  // The biases are added where the model has them.
  Tensor* layer(GraphBuilder& b, int il, Tensor* in) const override {
    return b.pre_norm_block(in, il, FfnActivation::Silu);
  }
};

}  // namespace

const Architecture& qwen2_architecture() {
  static const Qwen2 arch;
  return arch;
}

}  // namespace qlens
