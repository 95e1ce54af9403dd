// Attention blocks: how a layer mixes information across positions, and the
// per-sequence state it keeps for that. An architecture picks a block per
// layer (Architecture::attention), so a hybrid model mixes kinds:
//
// - standard: grouped-query attention over a KV cache, one K and one V
//   tensor per layer (optional sliding window, per-head q/k norms, q scale);
// - latent (MLA: DeepSeek V3, Kimi K2): attention over a cache of compressed
//   latents and a shared rope key, one row per token;
// - recurrent (linear attention, SSM: Qwen3.5/3.6, Qwen3-Next): a state of
//   fixed size per sequence, updated token by token.
//
// A block declares the state tensors it needs for a layer; the context
// allocates them (in device memory when the layer is offloaded), keeps them
// between batches and resets what must be reset, and the block's graph reads
// and writes them. The three makers are below (attention_standard.cpp,
// attention_latent.cpp, attention_recurrent.cpp).
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qlens/model.h"

namespace qlens {

class GraphBuilder;

// One tensor of a layer's state, in ggml order.
struct StateSpec {
  std::string name;  // "cache_k_l3"
  DType type;
  std::array<int64_t, kMaxDims> ne;
};

// What a layer's state holds, which says what a new sequence and a stopped
// batch must do with it.
enum class StateKind {
  // One entry per position. Entries at or past the sequence's length are
  // never read (the masks hide them): nothing to reset.
  PerPosition,
  // A summary of every position so far: zeroed for a new sequence, and
  // restored when a batch is stopped half-way (decode's promise that a
  // stopped batch is not part of the sequence).
  Recurrent,
};

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  virtual const char* kind() const = 0;  // "standard", "latent", "recurrent"
  virtual StateKind state_kind() const = 0;
  // The state of layer il for a sequence of up to n_ctx positions, with
  // caches in `cache_type` (ContextOptions::cache_type).
  virtual std::vector<StateSpec> state(const HParams& hp, int il, int64_t n_ctx, DType cache_type) const = 0;
  // The block's nodes on the normed input `cur` of layer il, reading and
  // writing `state` (the tensors `state` declared, in that order). Returns
  // the block's output, before the residual.
  virtual Tensor* build(GraphBuilder& b, int il, Tensor* cur, std::span<Tensor* const> state) const = 0;
};

// Grouped-query attention with rope over a KV cache: keys token-major,
// values transposed (a row per value dimension), as llama.cpp stores them.
struct StandardAttentionOptions {
  bool qk_norm = false;        // attn_q_norm / attn_k_norm per head before rope ("Qcur_normed", "Kcur_normed")
  float q_scale = 0;           // scale Q by this before attention (softmax scale 1); 0: softmax scale 1/sqrt(head_dim)
  bool sliding_window = false;  // the layer sees the n_swa latest positions (KQ_mask_swa) and uses the local rope
  // Gemma 2's soft-capped scores (cap * tanh(kq / cap)): refused, as no
  // architecture here has them (the tanh op they need exists).
  float softcap = 0;
  bool sinks = false;  // gpt-oss: attn_sinks, one logit per head beside the scores
  // Qwen3.5/3.6's gated attention: attn_q gives each head its query then a
  // gate of the head's size; the attention's output ("attn_pregate") is
  // multiplied by sigmoid(gate) ("attn_gated") before attn_output
  // ("attn_output").
  bool output_gate = false;
  // Gemma 4: the softmax's scale (0: 1/sqrt(head_dim)); values RMS-normed
  // per head without a weight ("Vcur_normed"); rope_freqs only where
  // rope_factors (its full-attention layers); the roped q and k named
  // "Qcur_pos" and "Kcur_pos" as its graph names them. A layer whose
  // HParams::kv_layer_of is another layer keeps no cache and attends to that
  // layer's (Gemma 4's shared KV layers).
  float kq_scale = 0;
  bool v_norm = false;
  bool rope_factors = true;
  bool pos_names = false;
};
std::unique_ptr<AttentionBlock> make_standard_attention(const StandardAttentionOptions& options);

// Multi-head latent attention (DeepSeek V2/V3, Kimi K2; attention_latent.cpp)
// over a cache of one row per token: the compressed kv (n_lora_kv) and the
// shared rope key (n_rot), as llama.cpp caches them.
std::unique_ptr<AttentionBlock> make_latent_attention();

// Gated DeltaNet (Qwen3.5/3.6's linear attention; attention_recurrent.cpp):
// a recurrent block whose per-sequence state is the short convolution's
// last inputs and an S x S matrix per value head (HParams' ssm_* sizes).
std::unique_ptr<AttentionBlock> make_gated_delta_net_block();

}  // namespace qlens
