// Text generation: a sampler (greedy at temperature 0; else top-k, top-p and
// temperature, in llama.cpp's order) and the prompt-then-decode loop.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>

#include "qlens/model.h"

namespace qlens::tools {

struct SamplerOptions {
  float temperature = 0.8f;
  int top_k = 40;     // <= 0: off
  float top_p = 0.95f;  // >= 1: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& opt);
  Token sample(std::span<const float> logits);

 private:
  SamplerOptions opt_;
  std::mt19937_64 rng_;
};

struct GenerateOptions {
  int64_t n_predict = 128;  // < 0: until EOS or the context is full
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  int n_threads = 0;
  DType cache_type = DType::F16;  // KV cache: F16 (default), F32, BF16
  CpuOptions cpu;  // the CPU backend's kernels (see ContextOptions)
  VulkanOptions vulkan;  // a Vulkan device's (see ContextOptions)
  SamplerOptions sampler;
  std::string device = "cpu";  // see ContextOptions
  int n_gpu_layers = -1;
};

struct GenerateResult {
  std::vector<Token> prompt_tokens;
  std::vector<Token> tokens;  // generated
  std::string text;           // generated text
  double prompt_seconds = 0, generate_seconds = 0;
  size_t packed_bytes = 0;  // weights laid out for generation (Context::pack_for_generation)
};

// Calls on_piece with each generated token's text as soon as it is sampled.
GenerateResult generate(const Model& model, const std::string& prompt, const GenerateOptions& opt,
                        const std::function<void(const std::string&)>& on_piece = {});

}  // namespace qlens::tools
