// Synthetic models of any architecture qlens runs: real shapes, random
// weights, a working vocabulary. For tests and benchmarks where the numbers
// need not mean anything but the shapes, types, metadata and file layout must
// be those of real models. The tensors are the architecture's table
// (src/model/arch/), so a synthetic file loads exactly as a real one does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "qlens/model.h"
#include "qlens/types.h"

namespace qlens::tools {

struct SynthPreset {
  std::string name;  // unique across architectures: --preset alone selects one
  std::string arch;  // general.architecture ("llama", "gemma3")
  int64_t n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_vocab = 0, n_ctx = 0;
  bool tied_output = false;  // no output.weight: the output is the token embedding
  int64_t head_dim = 0;      // 0: n_embd / n_head
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  // Sliding-window attention (n_swa > 0): every swa_period-th (>= 1) layer
  // (swa_period - 1, 2 * swa_period - 1, ...) is global, the others see the
  // n_swa latest positions and rotate with the local base.
  int64_t n_swa = 0;
  int64_t swa_period = 0;
  float rope_freq_base_swa = 10000.0f;
  int64_t n_rot = 0;  // rotated dims per head; 0: the whole head
  // Llama 3.1+ rope scaling, written as rope_freqs.weight the way llama.cpp's
  // converter computes it (factor 0: none).
  float rope_scaling_factor = 0, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  int64_t rope_original_ctx = 8192;
  // A mixture of experts (0 experts: a dense feed-forward of n_ff).
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  // YaRN (factor 0: none): rope.scaling.type "yarn", the factor and the
  // training context before the extension.
  float rope_yarn_factor = 0;
  int64_t rope_yarn_original_ctx = 0;
  float rope_yarn_log_mul = 0;  // DeepSeek's attention scale (rope.scaling.yarn_log_multiplier / 0.1)
  // DeepSeek's latent attention (n_lora_kv > 0; head_dim is then the
  // cached row, n_lora_kv + n_rot, as converters write key_length): q's rank
  // (0: one matrix), the per-head key and value lengths.
  int64_t n_lora_q = 0, n_lora_kv = 0, head_dim_k_mla = 0, head_dim_v_mla = 0;
  // DeepSeek's routing: sigmoid gating, expert groups, shared experts,
  // leading dense layers, the weights' scale.
  bool sigmoid_gating = false;
  int64_t n_expert_groups = 0, n_group_used = 0, n_expert_shared = 0, n_layer_dense_lead = 0;
  float expert_weights_scale = 0;
  int64_t n_layer_nextn = 0;  // NextN layers after the n_layer the graph runs (GLM-4.5)
  // Qwen3.5's hybrids (ssm_d_state > 0): gated DeltaNet layers of ssm_v_heads
  // value heads and ssm_k_heads key heads of ssm_d_state, a convolution of
  // ssm_d_conv; every full_attention_interval-th layer full attention with
  // IMRope over rope_sections; the MoE's shared expert of n_ff_shexp.
  int64_t ssm_d_conv = 0, ssm_d_state = 0, ssm_v_heads = 0, ssm_k_heads = 0, full_attention_interval = 0;
  std::array<int32_t, 4> rope_sections{};
  int64_t n_ff_shexp = 0;
  // Gemma 4: the sliding layers' head size (0: head_dim; they rotate all of
  // it); the full-attention layers' KV heads (0: n_head_kv); the last
  // n_shared_kv_layers layers attend to earlier layers' caches (with
  // double_wide_mlp, their feed-forward twice n_ff wide); per-layer
  // embeddings of n_embd_per_layer; full-attention layers whose values are
  // their keys (no attn_v); the rotated fraction of the full-attention
  // layers' dims (proportional rope: rope_freqs of 1 then 1e30; 0: none);
  // the final logits' soft-cap.
  int64_t head_dim_swa = 0, n_head_kv_full = 0, n_shared_kv_layers = 0, n_embd_per_layer = 0;
  bool double_wide_mlp = false, values_are_keys = false;
  float rope_partial_full = 0, final_logit_softcap = 0;
  // The standard deviation of the logits the token embedding and output
  // give at unit-RMS hidden states (0: embedding values of 0.02, logits
  // near 0 and a perplexity near the vocabulary's size).
  float logit_stddev = 0;
};

// rope_freqs.weight of a preset with Llama 3 rope scaling: per frequency
// i < n_rot / 2 the divisor 1 (short wavelengths), the factor (long ones)
// or the smooth blend between.
std::vector<float> llama3_rope_factors(const SynthPreset& preset, int64_t n_rot);
// rope_freqs.weight of a preset with Gemma 4's proportional rope: 1 for the
// first rope_partial_full of the n_rot / 2 pairs, 1e30 (no rotation) after.
std::vector<float> proportional_rope_factors(const SynthPreset& preset, int64_t n_rot);

const std::vector<SynthPreset>& synth_presets();

// The preset named `name`; when `arch` is not empty the preset must be of
// that architecture. An empty name with an architecture picks its first
// (smallest) preset. Throws an Error naming the known presets otherwise.
const SynthPreset& find_synth_preset(const std::string& name, const std::string& arch = "");

// The hyper-parameters a preset's file holds (as Model::load reads them back,
// but for what the architecture derives without a key, such as rope mode).
HParams synth_hparams(const SynthPreset& preset);

// One tensor of a synthetic file, in the order it is written.
struct SynthTensor {
  std::string name;  // "blk.0.attn_q.weight"
  Role role;
  int layer;  // -1 for the global tensors
  std::array<int64_t, kMaxDims> ne;
  int n_dims;  // trailing dimensions of 1 dropped, as converters write them
};

// What synth_model writes for these hyper-parameters: the architecture's
// table, the embedding first, then the layers, then the output tensors
// (output.weight only when not tied).
// rope_freqs: write rope_freqs.weight (a preset with Llama 3 rope scaling;
// always where the table requires it). values_are_keys: no attn_v on the
// full-attention layers (Gemma 4's 26B-A4B and 31B).
std::vector<SynthTensor> synth_tensor_plan(const HParams& hp, bool tied_output, bool rope_freqs = false,
                                           bool values_are_keys = false);

struct SynthOptions {
  std::string preset = "tiny";
  std::string arch;  // optional: the preset must be of this architecture
  DType type = DType::F16;  // type of the 2-D weights; norms stay F32
  uint64_t seed = 42;
  // GGUF file whose tokenizer.* metadata to copy; empty: a generated
  // SentencePiece vocabulary (byte fallback plus letter pieces).
  std::string vocab_file;
  // Size of the generated vocabulary; 0: the preset's. A real model's shapes
  // with a small vocabulary keep test files small.
  int64_t n_vocab = 0;
};

// Writes the model to `path` (atomically). Returns the number of parameters.
int64_t synth_model(const SynthOptions& opt, const std::string& path);

}  // namespace qlens::tools
