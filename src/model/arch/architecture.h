// An architecture: the hyper-parameters it reads, its tensor table, the
// attention block of each layer and its layer graph over the blocks of
// GraphBuilder. One file per architecture in this folder, listed once in
// architectures.cpp.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/attention.h"
#include "model/graph_builder.h"
#include "qlens/gguf.h"
#include "qlens/model.h"

namespace qlens {


class Architecture {
 public:
  virtual ~Architecture() = default;
  virtual const char* name() const = 0;  // "llama"
  // The `<arch>.*` keys beyond the common ones (read_common_hparams has
  // run): defaults, options and checks of this architecture.
  virtual void read_hparams(const gguf::File& f, HParams& hp) const = 0;
  // What read_hparams reads, for qlens synth (write_common_hparams has run).
  virtual void write_hparams(gguf::Writer& w, const HParams& hp) const = 0;
  // The tensor table: the global tensors (il < 0) or those of layer il.
  virtual std::vector<TensorSpec> tensors(const HParams& hp, int il) const = 0;
  // The attention block of layer il (src/model/attention.h), made once when
  // the model loads. A hybrid model returns different kinds per layer. By
  // default: standard attention, sliding on the layers hp marks.
  virtual std::unique_ptr<AttentionBlock> attention(const HParams& hp, int il) const;

  // The graph, step by step.
  virtual Tensor* embed(GraphBuilder& b) const { return b.token_embedding(); }
  virtual Tensor* layer(GraphBuilder& b, int il, Tensor* in) const = 0;
  virtual Tensor* output(GraphBuilder& b, Tensor* in) const;  // final norm and the output matrix
  // Whether the feed-forward projections take their ".scale" tensors
  // (Model::scale_of). llama.cpp loads them for every architecture but its
  // graphs of llama and qwen3 alone multiply by them (qwen2, gemma3, phi3 and
  // qwen3moe pass none); the attention projections take theirs everywhere.
  virtual bool scales_feed_forward() const { return false; }
};

// The architecture of a general.architecture name; null when unknown.
const Architecture* find_architecture(const std::string& name);

// An integer key in (0, 2^31]: `fallback` when the file lacks it, else an
// error naming the file and the key (missing, or out of range).
int64_t positive_key(const gguf::File& f, const std::string& key, std::optional<int64_t> fallback = std::nullopt);

// The keys every architecture here has: embedding_length, block_count,
// feed_forward_length, head counts, key length, rope, norm epsilon, context.
void read_common_hparams(const gguf::File& f, HParams& hp);
void write_common_hparams(gguf::Writer& w, const HParams& hp);
// The expert keys (expert_count, expert_used_count, expert_feed_forward_length,
// expert_weights_scale): required says whether expert_count must be there;
// n_ff_exp falls back to `ff_fallback` when the file has no length.
void read_expert_hparams(const gguf::File& f, HParams& hp, bool required, int64_t ff_fallback);
// Sliding-window attention: attention.sliding_window and the pattern of
// sliding layers (an array of marks, or a period n whose last layer is
// global; default_period without the key), as llama.cpp reads them.
void read_sliding_window(const gguf::File& f, HParams& hp, int64_t default_period);
void write_sliding_window(gguf::Writer& w, const HParams& hp);

// Table rows most architectures share: the token embedding, the final norm
// and the output matrix (optional: tied when absent).
std::vector<TensorSpec> global_tensors(const HParams& hp);
// A layer's attention: attn_norm, the q, k, v and output projections, and
// with qk_norm the per-head q and k norms.
std::vector<TensorSpec> attention_tensors(const HParams& hp, bool qk_norm);
// A layer's feed-forward: ffn_norm, then gate, up and down, or with experts
// (n_expert > 0) the router and the three expert tensors.
std::vector<TensorSpec> ffn_tensors(const HParams& hp);
// DeepSeek-style mixtures (deepseek2, glm4moe): the first
// leading_dense_block_count layers dense, the others routed experts (by
// expert_gating_func, `gating` when the file has none; the selection bias
// exp_probs_b; expert groups) plus expert_shared_count shared experts; the
// keys, and the feed-forward rows of layer il (without its norm).
void read_deepseek_moe_hparams(const gguf::File& f, HParams& hp, ExpertGating gating);
void write_deepseek_moe_hparams(gguf::Writer& w, const HParams& hp);
std::vector<TensorSpec> deepseek_moe_ffn_tensors(const HParams& hp, int il);
// The experts' matrices: gate and up (written by synth), or the two fused
// (ffn_gate_up_exps, as converters write Gemma 4's; Model::load wants one
// form), and down. E wide, F rows per expert, X experts.
std::vector<TensorSpec> expert_tensors(int64_t E, int64_t F, int64_t X);
// A NextN (multi-token prediction) layer's own rows, beside a full layer's.
std::vector<TensorSpec> nextn_tensors(const HParams& hp);
// Appends `more` to `rows`.
void append(std::vector<TensorSpec>& rows, const std::vector<TensorSpec>& more);

// The architectures (one file each).
const Architecture& llama_architecture();
const Architecture& gemma3_architecture();
const Architecture& qwen2_architecture();
const Architecture& qwen3_architecture();
const Architecture& phi3_architecture();
const Architecture& qwen3moe_architecture();
const Architecture& gpt_oss_architecture();
const Architecture& deepseek2_architecture();
const Architecture& glm4moe_architecture();
const Architecture& qwen35_architecture();
const Architecture& qwen35moe_architecture();
const Architecture& gemma4_architecture();

}  // namespace qlens
