#include "tools/synth/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"

namespace qlens::tools {

const std::vector<SynthPreset>& synth_presets() {
  // Smallest first within an architecture: --arch alone picks the first.
  static const std::vector<SynthPreset> presets = {
      {.name = "tiny", .arch = "llama", .n_embd = 64, .n_ff = 128, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
       .n_vocab = 512, .n_ctx = 256, .tied_output = true},
      // SmolLM-135M's shapes: narrow (576) and deep (30 layers), where the
      // time outside the kernels shows in generation.
      {.name = "135m", .arch = "llama", .n_embd = 576, .n_ff = 1536, .n_layer = 30, .n_head = 9, .n_head_kv = 3,
       .n_vocab = 49152, .n_ctx = 2048, .tied_output = true},
      {.name = "160m", .arch = "llama", .n_embd = 768, .n_ff = 2048, .n_layer = 12, .n_head = 12, .n_head_kv = 12,
       .n_vocab = 32000, .n_ctx = 2048},
      {.name = "1.1b", .arch = "llama", .n_embd = 2048, .n_ff = 5632, .n_layer = 22, .n_head = 32, .n_head_kv = 4,
       .n_vocab = 32000, .n_ctx = 2048},
      // Gemma 3 in small (the shapes of ../shared/reference/synth/gemma3.gguf):
      // heads wider than n_embd / n_head, a window shorter than the context
      // and a global layer inside the stack, as in the real models, so every
      // Gemma 3 path runs in a test.
      {.name = "gemma3-tiny", .arch = "gemma3", .n_embd = 128, .n_ff = 256, .n_layer = 4, .n_head = 4,
       .n_head_kv = 2, .n_vocab = 512, .n_ctx = 256, .tied_output = true, .head_dim = 64,
       .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .n_swa = 32, .swa_period = 3, .rope_freq_base_swa = 1e4f},
      // google/gemma-3-270m's shapes and hyper-parameters.
      {.name = "gemma3-270m", .arch = "gemma3", .n_embd = 640, .n_ff = 2048, .n_layer = 18, .n_head = 4,
       .n_head_kv = 1, .n_vocab = 262144, .n_ctx = 32768, .tied_output = true, .head_dim = 256,
       .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .n_swa = 512, .swa_period = 6, .rope_freq_base_swa = 1e4f},
      // The shapes and hyper-parameters of real models (their config.json),
      // for benchmarks: Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B,
      // meta-llama/Llama-3.2-1B, google/gemma-3-1b-pt, and
      // microsoft/Phi-4-mini-instruct without its LongRoPE factors.
      {.name = "qwen2.5-0.5b", .arch = "qwen2", .n_embd = 896, .n_ff = 4864, .n_layer = 24, .n_head = 14,
       .n_head_kv = 2, .n_vocab = 151936, .n_ctx = 32768, .tied_output = true, .rope_freq_base = 1e6f,
       .rms_eps = 1e-6f},
      {.name = "qwen3-0.6b", .arch = "qwen3", .n_embd = 1024, .n_ff = 3072, .n_layer = 28, .n_head = 16,
       .n_head_kv = 8, .n_vocab = 151936, .n_ctx = 40960, .tied_output = true, .head_dim = 128,
       .rope_freq_base = 1e6f, .rms_eps = 1e-6f},
      {.name = "llama3.2-1b", .arch = "llama", .n_embd = 2048, .n_ff = 8192, .n_layer = 16, .n_head = 32,
       .n_head_kv = 8, .n_vocab = 128256, .n_ctx = 131072, .tied_output = true, .rope_freq_base = 5e5f,
       .rms_eps = 1e-5f, .rope_scaling_factor = 32, .rope_low_freq_factor = 1, .rope_high_freq_factor = 4,
       .rope_original_ctx = 8192},
      {.name = "phi4-mini", .arch = "phi3", .n_embd = 3072, .n_ff = 8192, .n_layer = 32, .n_head = 24,
       .n_head_kv = 8, .n_vocab = 200064, .n_ctx = 131072, .tied_output = true, .rope_freq_base = 1e4f,
       .rms_eps = 1e-5f, .n_rot = 96},
      // Mixtures of experts. Tiny ones in the shapes of ../shared/reference/synth:
      {.name = "qwen3moe-tiny", .arch = "qwen3moe", .n_embd = 64, .n_ff = 192, .n_layer = 2, .n_head = 4,
       .n_head_kv = 2, .n_vocab = 512, .n_ctx = 256, .head_dim = 32, .rope_freq_base = 1e6f, .rms_eps = 1e-6f,
       .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 64},
      {.name = "mixtral-tiny", .arch = "llama", .n_embd = 96, .n_ff = 128, .n_layer = 2, .n_head = 6,
       .n_head_kv = 2, .n_vocab = 512, .n_ctx = 256, .rope_freq_base = 1e6f, .n_expert = 4, .n_expert_used = 2,
       .n_ff_exp = 128},
      // Qwen/Qwen3-30B-A3B's layers (128 experts of 768, 8 used; 32 query heads
      // of 128, 4 KV heads), 4 of its 48, for benchmarks that fit here: each
      // layer holds 604M expert weights (1.2 GB in F16).
      {.name = "qwen3-30b-a3b-4l", .arch = "qwen3moe", .n_embd = 2048, .n_ff = 6144, .n_layer = 4, .n_head = 32,
       .n_head_kv = 4, .n_vocab = 151936, .n_ctx = 40960, .head_dim = 128, .rope_freq_base = 1e6f,
       .rms_eps = 1e-6f, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768},
      // gpt-oss in small: two layers (the first sliding, the second global,
      // as the real pattern), heads wider than n_embd / n_head, a window
      // shorter than the context, YaRN over a 4096-token training context.
      {.name = "gpt-oss-tiny", .arch = "gpt-oss", .n_embd = 64, .n_ff = 64, .n_layer = 2, .n_head = 4,
       .n_head_kv = 2, .n_vocab = 512, .n_ctx = 256, .head_dim = 32, .rope_freq_base = 150000.0f, .rms_eps = 1e-5f,
       .n_swa = 16, .swa_period = 2, .rope_freq_base_swa = 150000.0f, .n_expert = 4, .n_expert_used = 2,
       .n_ff_exp = 64, .rope_yarn_factor = 32, .rope_yarn_original_ctx = 4096, .logit_stddev = 1.5f},
      // openai/gpt-oss-20b's layers (32 experts of 2880, 4 used; 64 query heads
      // of 64, 8 KV heads; window 128), 2 of its 24: 796M expert weights a
      // layer (quantize it with the MXFP4_MOE mix, as the release is).
      {.name = "gpt-oss-20b-2l", .arch = "gpt-oss", .n_embd = 2880, .n_ff = 2880, .n_layer = 2, .n_head = 64,
       .n_head_kv = 8, .n_vocab = 201088, .n_ctx = 131072, .head_dim = 64, .rope_freq_base = 150000.0f,
       .rms_eps = 1e-5f, .n_swa = 128, .swa_period = 2, .rope_freq_base_swa = 150000.0f, .n_expert = 32,
       .n_expert_used = 4, .n_ff_exp = 2880, .rope_yarn_factor = 32, .rope_yarn_original_ctx = 4096},
      // DeepSeek V3 in small: a leading dense layer, then two mixtures of
      // 8 experts in 4 groups of which 2 compete (2 used, sigmoid routing
      // with the selection bias, weights normalized and scaled by 2.5) with a
      // shared expert; latent attention with q's low-rank pair, YaRN with
      // DeepSeek's attention scale.
      {.name = "deepseek2-tiny", .arch = "deepseek2", .n_embd = 64, .n_ff = 96, .n_layer = 3, .n_head = 4,
       .n_head_kv = 1, .n_vocab = 512, .n_ctx = 256, .head_dim = 48, .rope_freq_base = 10000.0f, .rms_eps = 1e-6f,
       .n_rot = 16, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 32, .rope_yarn_factor = 40,
       .rope_yarn_original_ctx = 4096, .rope_yarn_log_mul = 1.0f, .n_lora_q = 48, .n_lora_kv = 32,
       .head_dim_k_mla = 48, .head_dim_v_mla = 32, .sigmoid_gating = true, .n_expert_groups = 4,
       .n_group_used = 2, .n_expert_shared = 1, .n_layer_dense_lead = 1, .expert_weights_scale = 2.5f, .logit_stddev = 1.5f},
      // GLM-4.5-Air in small: a leading dense layer, two mixtures of 8
      // experts (2 used, sigmoid routing with the selection bias) with a
      // shared expert, q/k/v biases, NeoX rope on half of each head, and the
      // NextN layer the release carries (loaded, not run).
      {.name = "glm4moe-tiny", .arch = "glm4moe", .n_embd = 64, .n_ff = 96, .n_layer = 3, .n_head = 4,
       .n_head_kv = 2, .n_vocab = 512, .n_ctx = 256, .head_dim = 32, .rope_freq_base = 1e6f, .rms_eps = 1e-5f,
       .n_rot = 16, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 32, .sigmoid_gating = true,
       .n_expert_shared = 1, .n_layer_dense_lead = 1, .expert_weights_scale = 1.0f, .n_layer_nextn = 1, .logit_stddev = 1.5f},
      // deepseek-ai/DeepSeek-V3's layer shapes (7168 wide, 128 latent-attention
      // heads, q rank 1536, kv latent 512 + rope key 64; the first 3 of 61
      // layers dense with 18432, the others 256 experts of 2048, 8 used, in 8
      // groups of which 4 compete, a shared expert, sigmoid routing), 2 of its
      // layers: the leading dense one and one mixture, with 32 of the 256
      // experts (8 groups of 4) so that a layer fits in F16 (all 256 would be
      // 22.5 GB); every width as released.
      {.name = "deepseek-v3-2l", .arch = "deepseek2", .n_embd = 7168, .n_ff = 18432, .n_layer = 2, .n_head = 128,
       .n_head_kv = 1, .n_vocab = 129280, .n_ctx = 163840, .head_dim = 576, .rope_freq_base = 10000.0f,
       .rms_eps = 1e-6f, .n_rot = 64, .n_expert = 32, .n_expert_used = 8, .n_ff_exp = 2048, .rope_yarn_factor = 40,
       .rope_yarn_original_ctx = 4096, .rope_yarn_log_mul = 1.0f, .n_lora_q = 1536, .n_lora_kv = 512,
       .head_dim_k_mla = 192, .head_dim_v_mla = 128, .sigmoid_gating = true, .n_expert_groups = 8,
       .n_group_used = 4, .n_expert_shared = 1, .n_layer_dense_lead = 1, .expert_weights_scale = 2.5f},
      // zai-org/GLM-4.5-Air's layer shapes (4096 wide, 96 query heads and 8 KV
      // heads of 128, rope on half; the first of 46 layers dense with 10944,
      // the others 128 experts of 1408, 8 used, and a shared expert), 2 of its
      // layers with every expert; without its NextN layer (4.4 GB in F16 that
      // no graph runs: glm4moe-tiny has one).
      {.name = "glm-4.5-air-2l", .arch = "glm4moe", .n_embd = 4096, .n_ff = 10944, .n_layer = 2, .n_head = 96,
       .n_head_kv = 8, .n_vocab = 151552, .n_ctx = 131072, .head_dim = 128, .rope_freq_base = 1e6f, .rms_eps = 1e-5f,
       .n_rot = 64, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 1408, .sigmoid_gating = true,
       .n_expert_shared = 1, .n_layer_dense_lead = 1, .expert_weights_scale = 1.0f},
      // Qwen3.5 in small: three gated DeltaNet layers then one of gated full
      // attention (the released proportion), 4 value heads and 2 key heads
      // of 16 in the DeltaNet layers, IMRope on a quarter of each 32-wide
      // head (sections 2, 1, 1, 0 of the 8 pairs: Qwen3.5's 11, 11, 10 of 64
      // in proportion), conv width 4.
      {.name = "qwen35-tiny", .arch = "qwen35", .n_embd = 64, .n_ff = 128, .n_layer = 4, .n_head = 4,
       .n_head_kv = 2, .n_vocab = 512, .n_ctx = 256, .head_dim = 32, .rope_freq_base = 1e7f, .rms_eps = 1e-6f,
       .n_rot = 8, .ssm_d_conv = 4, .ssm_d_state = 16, .ssm_v_heads = 4, .ssm_k_heads = 2,
       .full_attention_interval = 4, .rope_sections = {2, 1, 1, 0}, .logit_stddev = 1.5f},
      // Qwen3.5-35B-A3B in small: the same layers, 8 experts of 32 (2 used,
      // softmax, weights normalized) and a gated shared expert of 32.
      {.name = "qwen35moe-tiny", .arch = "qwen35moe", .n_embd = 64, .n_ff = 128, .n_layer = 4, .n_head = 4,
       .n_head_kv = 2, .n_vocab = 512, .n_ctx = 256, .head_dim = 32, .rope_freq_base = 1e7f, .rms_eps = 1e-6f,
       .n_rot = 8, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 32, .ssm_d_conv = 4, .ssm_d_state = 16,
       .ssm_v_heads = 4, .ssm_k_heads = 2, .full_attention_interval = 4, .rope_sections = {2, 1, 1, 0},
       .n_ff_shexp = 32, .logit_stddev = 1.5f},
      // Qwen/Qwen3.5-27B's (and Qwen3.6-27B's) layer shapes, 2 of its 64
      // layers: a gated DeltaNet layer (48 value heads and 16 key heads of
      // 128, conv width 4) and a gated full-attention layer (24 query heads
      // and 4 KV heads of 256, IMRope on 64 dims, sections 11, 11, 10); a
      // dense feed-forward of 17408; every width as released.
      {.name = "qwen3.5-27b-2l", .arch = "qwen35", .n_embd = 5120, .n_ff = 17408, .n_layer = 2, .n_head = 24,
       .n_head_kv = 4, .n_vocab = 248320, .n_ctx = 262144, .head_dim = 256, .rope_freq_base = 1e7f,
       .rms_eps = 1e-6f, .n_rot = 64, .ssm_d_conv = 4, .ssm_d_state = 128, .ssm_v_heads = 48, .ssm_k_heads = 16,
       .full_attention_interval = 2, .rope_sections = {11, 11, 10, 0}},
      // Qwen/Qwen3.5-35B-A3B's (and Qwen3.6-35B-A3B's) layer shapes, 2 of its
      // 40 layers as above (32 value heads and 16 key heads of 128; 16 query
      // and 2 KV heads of 256), each with all 256 experts of 512 (8 used) and
      // the shared expert of 512.
      {.name = "qwen3.5-35b-a3b-2l", .arch = "qwen35moe", .n_embd = 2048, .n_ff = 512, .n_layer = 2, .n_head = 16,
       .n_head_kv = 2, .n_vocab = 248320, .n_ctx = 262144, .head_dim = 256, .rope_freq_base = 1e7f,
       .rms_eps = 1e-6f, .n_rot = 64, .n_expert = 256, .n_expert_used = 8, .n_ff_exp = 512, .ssm_d_conv = 4,
       .ssm_d_state = 128, .ssm_v_heads = 32, .ssm_k_heads = 16, .full_attention_interval = 2,
       .rope_sections = {11, 11, 10, 0}, .n_ff_shexp = 512},
      // Gemma 4 E-style (E2B/E4B) in small: sliding layers of 32-wide heads,
      // full-attention layers (2, 5) of 64 with proportional rope (a quarter
      // rotated), the last 3 layers sharing the caches of layers 1 and 2
      // with a double-wide feed-forward, per-layer embeddings of 16; a
      // window shorter than the references' chunks and a soft-cap small
      // enough to matter at these logits.
      {.name = "gemma4-tiny", .arch = "gemma4", .n_embd = 128, .n_ff = 256, .n_layer = 6, .n_head = 4,
       .n_head_kv = 2, .n_vocab = 512, .n_ctx = 256, .tied_output = true, .head_dim = 64, .rope_freq_base = 1e6f,
       .rms_eps = 1e-6f, .n_swa = 32, .swa_period = 3, .rope_freq_base_swa = 1e4f, .head_dim_swa = 32,
       .n_shared_kv_layers = 3, .n_embd_per_layer = 16, .double_wide_mlp = true, .rope_partial_full = 0.25f,
       .final_logit_softcap = 10.0f, .logit_stddev = 1.5f},
      // Gemma 4 26B-A4B-style in small: the dense feed-forward beside 8
      // experts (2 used), full-attention layers with one KV head whose
      // values are their keys.
      {.name = "gemma4moe-tiny", .arch = "gemma4", .n_embd = 128, .n_ff = 128, .n_layer = 4, .n_head = 4,
       .n_head_kv = 2, .n_vocab = 512, .n_ctx = 256, .tied_output = true, .head_dim = 64, .rope_freq_base = 1e6f,
       .rms_eps = 1e-6f, .n_swa = 32, .swa_period = 2, .rope_freq_base_swa = 1e4f, .n_expert = 8,
       .n_expert_used = 2, .n_ff_exp = 32, .head_dim_swa = 32, .n_head_kv_full = 1, .values_are_keys = true,
       .rope_partial_full = 0.25f, .final_logit_softcap = 10.0f, .logit_stddev = 1.5f},
      // google/gemma-4-E4B's layer shapes (2560 wide, 8 query and 2 KV
      // heads of 256 on sliding layers and 512 on full ones, a quarter of
      // those rotated, window 512, feed-forward 10240, per-layer embeddings
      // of 256, soft-cap 30), 4 of its 42 layers so that both kinds and the
      // sharing of caches appear: sliding and full alternate (the real
      // model: five sliding to one full) and the last 2 share the first 2's
      // caches (the real model: its last 18).
      {.name = "gemma-4-e4b-4l", .arch = "gemma4", .n_embd = 2560, .n_ff = 10240, .n_layer = 4, .n_head = 8,
       .n_head_kv = 2, .n_vocab = 262144, .n_ctx = 131072, .tied_output = true, .head_dim = 512,
       .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .n_swa = 512, .swa_period = 2, .rope_freq_base_swa = 1e4f,
       .head_dim_swa = 256, .n_shared_kv_layers = 2, .n_embd_per_layer = 256, .rope_partial_full = 0.25f,
       .final_logit_softcap = 30.0f},
      // google/gemma-4-26B-A4B's layer shapes (2816 wide, 16 query heads, 8
      // KV heads of 256 on sliding layers, 2 of 512 on full ones whose values
      // are their keys, window 1024, the dense feed-forward 2112 beside 128
      // experts of 704, 8 used, soft-cap 30), 2 of its 30 layers: one sliding,
      // one full.
      {.name = "gemma-4-26b-a4b-2l", .arch = "gemma4", .n_embd = 2816, .n_ff = 2112, .n_layer = 2, .n_head = 16,
       .n_head_kv = 8, .n_vocab = 262144, .n_ctx = 262144, .tied_output = true, .head_dim = 512,
       .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .n_swa = 1024, .swa_period = 2, .rope_freq_base_swa = 1e4f,
       .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 704, .head_dim_swa = 256, .n_head_kv_full = 2,
       .values_are_keys = true, .rope_partial_full = 0.25f, .final_logit_softcap = 30.0f},
      {.name = "gemma3-1b", .arch = "gemma3", .n_embd = 1152, .n_ff = 6912, .n_layer = 26, .n_head = 4,
       .n_head_kv = 1, .n_vocab = 262144, .n_ctx = 32768, .tied_output = true, .head_dim = 256,
       .rope_freq_base = 1e6f, .rms_eps = 1e-6f, .n_swa = 512, .swa_period = 6, .rope_freq_base_swa = 1e4f},
  };
  return presets;
}

std::vector<float> proportional_rope_factors(const SynthPreset& p, int64_t n_rot) {
  // As llama.cpp's converter: int(head_dim * partial / 2) rotated pairs.
  const auto rotated = static_cast<int64_t>(static_cast<float>(n_rot) * p.rope_partial_full / 2);
  std::vector<float> f(n_rot / 2, 1e30f);
  std::fill(f.begin(), f.begin() + std::min<int64_t>(rotated, n_rot / 2), 1.0f);
  return f;
}

std::vector<float> llama3_rope_factors(const SynthPreset& p, int64_t n_rot) {
  std::vector<float> f;
  const double old_ctx = static_cast<double>(p.rope_original_ctx);
  const double low_wavelen = old_ctx / p.rope_low_freq_factor, high_wavelen = old_ctx / p.rope_high_freq_factor;
  for (int64_t i = 0; i < n_rot; i += 2) {
    const double freq = 1.0 / std::pow(static_cast<double>(p.rope_freq_base), static_cast<double>(i) / n_rot);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      f.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      f.push_back(p.rope_scaling_factor);
    } else {
      const double smooth = (old_ctx / wavelen - p.rope_low_freq_factor) / (p.rope_high_freq_factor - p.rope_low_freq_factor);
      f.push_back(static_cast<float>(1.0 / ((1 - smooth) / p.rope_scaling_factor + smooth)));
    }
  }
  return f;
}

const SynthPreset& find_synth_preset(const std::string& name, const std::string& arch) {
  const auto& presets = synth_presets();
  // "llama3" is llama with Llama 3's rope scaling (the file says "llama").
  auto is_of = [](const SynthPreset& p, const std::string& a) {
    return a.empty() || p.arch == a || (a == "llama3" && p.arch == "llama" && p.rope_scaling_factor > 0);
  };
  auto names_of = [&](const std::string& of_arch) {
    std::string names;
    for (const auto& p : presets)
      if (is_of(p, of_arch))
        names += (names.empty() ? "" : ", ") + p.name + (of_arch.empty() ? " (" + p.arch + ")" : "");
    return names;
  };
  if (name.empty()) {
    for (const auto& p : presets)
      if (is_of(p, arch)) return p;
    throw Error("synth: no preset of architecture '" + arch + "' (presets: " + names_of("") + ")");
  }
  for (const auto& p : presets) {
    if (p.name != name) continue;
    if (!is_of(p, arch)) {
      const std::string others = names_of(arch);
      throw Error("synth: preset '" + name + "' is a " + p.arch + " model, not " + arch + " (" +
                  (others.empty() ? "no " + arch + " presets" : arch + " presets: " + others) + ")");
    }
    return p;
  }
  throw Error("synth: unknown preset '" + name + "' (known: " + names_of("") + ")");
}

HParams synth_hparams(const SynthPreset& p) {
  HParams hp;
  hp.arch = p.arch;
  hp.n_vocab = p.n_vocab;
  hp.n_ctx_train = p.n_ctx;
  hp.n_embd = p.n_embd;
  hp.n_ff = p.n_ff;
  hp.n_layer = p.n_layer;
  hp.n_head = p.n_head;
  hp.n_head_kv = p.n_head_kv;
  hp.head_dim = p.head_dim > 0 ? p.head_dim : p.n_embd / p.n_head;
  hp.n_rot = p.n_rot > 0 ? p.n_rot : hp.head_dim;
  hp.rms_eps = p.rms_eps;
  hp.rope_freq_base = p.rope_freq_base;
  hp.n_expert = p.n_expert;
  hp.n_expert_used = p.n_expert_used;
  hp.n_ff_exp = p.n_ff_exp;
  hp.expert_weights_norm = p.n_expert > 0;
  if (p.n_swa > 0) {
    if (p.swa_period < 1) throw Error("synth: preset '" + p.name + "' has a sliding window but no layer pattern");
    hp.n_swa = p.n_swa;
    hp.swa_layers.resize(p.n_layer);
    for (int64_t il = 0; il < p.n_layer; ++il) hp.swa_layers[il] = il % p.swa_period < p.swa_period - 1;
    hp.rope_freq_base_swa = p.rope_freq_base_swa;
  }
  hp.head_dim_v = hp.head_dim;
  if (p.n_lora_kv > 0) {
    hp.n_lora_q = p.n_lora_q;
    hp.n_lora_kv = p.n_lora_kv;
    hp.head_dim_k_mla = p.head_dim_k_mla;
    hp.head_dim_v_mla = p.head_dim_v_mla;
    hp.head_dim_v = p.n_lora_kv;
  }
  if (p.sigmoid_gating) hp.expert_gating = ExpertGating::Sigmoid;
  hp.n_expert_groups = p.n_expert_groups;
  hp.n_group_used = p.n_group_used;
  hp.n_expert_shared = p.n_expert_shared;
  hp.n_layer_dense_lead = p.n_layer_dense_lead;
  hp.n_layer_nextn = p.n_layer_nextn;
  hp.expert_weights_scale = p.expert_weights_scale;
  hp.rope_yarn_log_mul = p.rope_yarn_log_mul;
  if (p.ssm_d_state > 0) {
    hp.rope_mode = RopeMode::IMRope;
    hp.rope_sections = p.rope_sections;
    hp.ssm_d_conv = p.ssm_d_conv;
    hp.ssm_d_state = p.ssm_d_state;
    hp.ssm_dt_rank = p.ssm_v_heads;
    hp.ssm_n_group = p.ssm_k_heads;
    hp.ssm_d_inner = p.ssm_v_heads * p.ssm_d_state;
    hp.recurrent_layers.resize(p.n_layer);
    for (int64_t il = 0; il < p.n_layer; ++il) hp.recurrent_layers[il] = (il + 1) % p.full_attention_interval != 0;
    hp.n_ff_shexp = p.n_ff_shexp;
  }
  if (p.head_dim_swa > 0) hp.head_dim_swa = hp.n_rot_swa = p.head_dim_swa;
  if (p.n_shared_kv_layers > 0) hp.n_layer_kv = p.n_layer - p.n_shared_kv_layers;
  for (int il = 0; il < p.n_layer && p.n_head_kv_full > 0; ++il)
    hp.n_head_kv_layers.push_back(hp.is_swa(il) ? p.n_head_kv : p.n_head_kv_full);
  for (int il = 0; il < p.n_layer && p.double_wide_mlp; ++il)
    hp.n_ff_layers.push_back(hp.kv_layer_of(il) == il ? p.n_ff : 2 * p.n_ff);
  hp.n_embd_per_layer = p.n_embd_per_layer;
  hp.final_logit_softcap = p.final_logit_softcap;
  if (p.rope_yarn_factor > 0) {
    hp.rope_freq_scale = 1.0f / p.rope_yarn_factor;
    if (p.n_swa > 0) hp.rope_freq_scale_swa = hp.rope_freq_scale;
    hp.rope_yarn.ext_factor = 1.0f;
    hp.rope_yarn.n_ctx_orig = static_cast<int>(p.rope_yarn_original_ctx);
  }
  return hp;
}

std::vector<SynthTensor> synth_tensor_plan(const HParams& hp, bool tied_output, bool rope_freqs, bool values_are_keys) {
  auto tensor = [](const TensorSpec& spec, int layer) {
    int n_dims = kMaxDims;
    while (n_dims > 1 && spec.ne[n_dims - 1] == 1) --n_dims;
    return SynthTensor{tensor_name(spec.role, layer), spec.role, layer, spec.ne, n_dims};
  };
  // The order the graph reads them in, which is also that of the files synth
  // wrote before it read the table (kept byte for byte): what comes before
  // the layers (the embedding, read by get_rows), the layers, the output.
  std::vector<SynthTensor> plan, after_layers;
  for (const TensorSpec& spec : architecture_tensors(hp, -1)) {
    if (spec.role == Role::Output && tied_output) continue;
    if (spec.role == Role::RopeFreqs ? !rope_freqs && !spec.required : !spec.required && spec.role != Role::Output)
      continue;
    (role_info(spec.role).reader == Op::GetRows ? plan : after_layers).push_back(tensor(spec, -1));
  }
  for (int il = 0; il < hp.n_layer + hp.n_layer_nextn; ++il)
    for (const TensorSpec& spec : architecture_tensors(hp, il))
      if ((spec.required || spec.published) && !(values_are_keys && spec.role == Role::AttnV && !hp.is_swa(il)))
        plan.push_back(tensor(spec, il));
  plan.insert(plan.end(), after_layers.begin(), after_layers.end());
  return plan;
}

namespace {

// splitmix64: small, fast, and good enough for random weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * 0x1.0p-53; }
  // Normal samples by Box-Muller, two at a time.
  float normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u = uniform(), v = uniform();
    double r = std::sqrt(-2.0 * std::log(u > 0 ? u : 1e-300));
    spare_ = static_cast<float>(r * std::sin(2 * M_PI * v));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2 * M_PI * v));
  }

 private:
  uint64_t state_;
  bool has_spare_ = false;
  float spare_ = 0;
};

// A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then
// pieces made of letters (with and without the word-start mark U+2581),
// scored so that longer, earlier pieces are preferred as in real vocabularies.
void generated_vocab(gguf::Writer& w, int64_t n_vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  const std::string mark = "\xE2\x96\x81";
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ0123456789.,!?'\"-:;()";
  std::vector<std::string> pieces = {mark};
  for (char c : letters) pieces.push_back(std::string(1, c));
  for (char c : letters) pieces.push_back(mark + c);
  for (char a : letters)
    for (char b : letters) {
      pieces.push_back(mark + a + b);
      pieces.push_back(std::string(1, a) + b);
    }
  // Three-letter pieces only when a large vocabulary asks for them.
  for (size_t i = 0; pieces.size() < static_cast<size_t>(n_vocab) && i < letters.size() * letters.size(); ++i)
    for (char c : letters) pieces.push_back(mark + letters[i / letters.size()] + letters[i % letters.size()] + c);
  const size_t n_fixed = tokens.size();  // the special and byte tokens
  if (n_vocab < static_cast<int64_t>(n_fixed) || static_cast<size_t>(n_vocab) > n_fixed + pieces.size())
    throw Error("synth: a generated vocabulary has " + std::to_string(n_fixed) + " to " +
                std::to_string(n_fixed + pieces.size()) + " tokens, not " + std::to_string(n_vocab));
  for (size_t i = 0; tokens.size() < static_cast<size_t>(n_vocab); ++i) {
    tokens.push_back(pieces.at(i));
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 259; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i - 259);
  w.set("tokenizer.ggml.model", gguf::Value::make_string("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(tokens));
  w.set("tokenizer.ggml.scores", gguf::Value::make_f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::make_u32(1));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::make_u32(2));
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::make_u32(0));
}

int64_t copied_vocab(gguf::Writer& w, const std::string& path) {
  auto f = gguf::File::open(path);
  int64_t n = 0;
  for (const auto& kv : f->metadata())
    if (kv.key.rfind("tokenizer.", 0) == 0) {
      w.set(kv.key, kv.value);
      if (kv.key == "tokenizer.ggml.tokens") n = static_cast<int64_t>(kv.value.arr.size());
    }
  if (n == 0) throw Error(path + ": no tokenizer.ggml.tokens to copy a vocabulary from");
  return n;
}

}  // namespace

int64_t synth_model(const SynthOptions& opt, const std::string& path) {
  const SynthPreset& preset = find_synth_preset(opt.preset, opt.arch);
  if (opt.type != DType::F32 && opt.type != DType::F16 && opt.type != DType::BF16)
    throw Error("synth: --type must be F32, F16 or BF16");
  if (opt.n_vocab < 0) throw Error("synth: vocabulary size " + std::to_string(opt.n_vocab) + " is negative");
  if (opt.n_vocab > 0 && !opt.vocab_file.empty())
    throw Error("synth: a vocabulary size and a vocabulary file to copy exclude each other");
  HParams hp = synth_hparams(preset);
  if (opt.n_vocab > 0) hp.n_vocab = opt.n_vocab;
  if (const auto known = architecture_names(); std::find(known.begin(), known.end(), hp.arch) == known.end())
    throw Error("synth: preset '" + preset.name + "' names unknown architecture '" + hp.arch + "'");

  // general.*, the architecture's keys, the tokenizer's, the vocabulary
  // size: the order of the files synth wrote before it read the table (kept
  // byte for byte). write_architecture_hparams sets general.architecture again, in
  // place.
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::make_string(hp.arch));
  w.set("general.name", gguf::Value::make_string("qlens-synth-" + preset.name));
  w.set("general.file_type", gguf::Value::make_u32(opt.type == DType::F32 ? 0 : opt.type == DType::F16 ? 1 : 32));
  write_architecture_hparams(w, hp);
  if (!opt.vocab_file.empty())
    hp.n_vocab = copied_vocab(w, opt.vocab_file);
  else
    generated_vocab(w, hp.n_vocab);
  w.set(hp.arch + ".vocab_size", gguf::Value::make_u32(static_cast<uint32_t>(hp.n_vocab)));

  Rng rng(opt.seed);
  std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers;  // keep data alive until write
  int64_t n_params = 0;
  for (const SynthTensor& t :
       synth_tensor_plan(hp, preset.tied_output, preset.rope_scaling_factor > 0, preset.values_are_keys)) {
    int64_t n = 1;
    for (int d = 0; d < t.n_dims; ++d) n *= t.ne[d];
    // Biases and rope factors stay F32 (element-wise kernels and rope read
    // them so); rope factors as the converter computes them.
    // Attention sinks (read by soft_max) are F32 logits of about the scores' size.
    const Op reader = role_info(t.role).reader;
    // DeltaNet's -exp(A_log) per head: negative, so that the state decays
    // (exp of the log-decay below 1), A_log ~ N(0, 0.5) as trained models
    // spread it.
    if (t.role == Role::SsmA) {
      std::vector<float> values(n);
      for (float& v : values) v = -std::exp(0.5f * rng.normal());
      auto bytes = std::make_unique<std::vector<uint8_t>>(values.size() * sizeof(float));
      std::memcpy(bytes->data(), values.data(), bytes->size());
      w.add_tensor(t.name, DType::F32, std::span<const int64_t>(t.ne.data(), t.n_dims), bytes->data(), bytes->size());
      buffers.push_back(std::move(bytes));
      n_params += n;
      continue;
    }
    if (role_reads_f32(t.role) && reader != Op::Mul) {
      std::vector<float> values = t.role != Role::RopeFreqs     ? std::vector<float>(n)
                                  : preset.rope_partial_full > 0 ? proportional_rope_factors(preset, hp.n_rot)
                                                                 : llama3_rope_factors(preset, hp.n_rot);
      if (t.role != Role::RopeFreqs)
        // Convolution kernels: N(0, 1/d_conv), so the convolution keeps its input's scale.
        for (float& v : values)
          v = (reader == Op::SoftMax ? 1.0f : reader == Op::SsmConv ? 1.0f / std::sqrt(static_cast<float>(t.ne[0])) : 0.1f) *
              rng.normal();
      auto bytes = std::make_unique<std::vector<uint8_t>>(values.size() * sizeof(float));
      std::memcpy(bytes->data(), values.data(), bytes->size());
      w.add_tensor(t.name, DType::F32, std::span<const int64_t>(t.ne.data(), t.n_dims), bytes->data(), bytes->size());
      buffers.push_back(std::move(bytes));
      n_params += n;
      continue;
    }
    // A norm's scale (what the graph multiplies by element-wise) starts near
    // 1 and stays F32, the type element-wise kernels read. The router stays
    // F32 too, as llama.cpp's converter and quantize keep it.
    const bool is_norm = role_info(t.role).reader == Op::Mul;
    const bool is_router = t.role == Role::FfnGateInp;
    // GPT-2-style initial scale for the embedding and the output: logits stay
    // small, so an untrained model's perplexity is near its vocabulary size.
    // Other matrices: N(0, 1/fan_in), so activations keep their scale.
    const bool is_vocab_matrix = t.role == Role::TokenEmbd || t.role == Role::Output;
    const float vocab_stddev =
        preset.logit_stddev > 0 ? preset.logit_stddev / std::sqrt(static_cast<float>(hp.n_embd)) : 0.02f;
    const float stddev = is_vocab_matrix ? vocab_stddev : 1.0f / std::sqrt(static_cast<float>(t.ne[0]));
    const DType type = is_norm || is_router ? DType::F32 : opt.type;
    std::vector<float> values(n);
    for (float& v : values) v = is_norm ? 1.0f + 0.1f * rng.normal() : stddev * rng.normal();
    auto bytes = std::make_unique<std::vector<uint8_t>>(row_bytes(type, n));
    type_traits(type).from_float(values.data(), bytes->data(), n);
    w.add_tensor(t.name, type, std::span<const int64_t>(t.ne.data(), t.n_dims), bytes->data(), bytes->size());
    buffers.push_back(std::move(bytes));
    n_params += n;
  }
  w.write(path);
  return n_params;
}

}  // namespace qlens::tools
