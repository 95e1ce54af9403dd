// Perplexity, computed as llama.cpp's perplexity tool does so figures compare:
// the whole text is tokenized once (BOS first), cut into whole chunks of n_ctx
// tokens, each chunk is evaluated from an empty cache with its first token
// replaced by BOS, and only the predictions of the second half of each chunk
// are scored.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "qlens/model.h"

namespace qlens::tools {

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 2048;  // capped at n_ctx
  int64_t max_chunks = -1;  // < 0: all whole chunks
  int n_threads = 0;
  CpuOptions cpu;  // the CPU backend's kernels (see ContextOptions)
  VulkanOptions vulkan;  // a Vulkan device's (see ContextOptions)
  std::string device = "cpu";  // see ContextOptions
  int n_gpu_layers = -1;
  DType cache_type = DType::F16;  // KV cache: F16 (default), F32, BF16
  // Under mpirun: the model split across the ranks by layers
  // (tools/common/layer_pipeline.h) instead of every rank running it whole.
  bool split_layers = false;
  // Called with each chunk's tokens (as the text has them) before its
  // scored positions, then with the logits of every scored position in order
  // (for writing llama.cpp's --kl-divergence-base file).
  std::function<void(std::span<const Token>)> on_chunk_tokens;
  std::function<void(std::span<const float>)> on_scored_logits;
};

struct PerplexityResult {
  int64_t n_tokens = 0;   // tokens in the text (with BOS)
  int64_t n_chunks = 0;   // chunks evaluated
  int64_t n_scored = 0;   // predictions scored
  double ppl = 0;
  double ppl_error = 0;   // standard error of the estimate
  double nll = 0;         // mean negative log-likelihood
  std::vector<double> running_ppl;  // after each chunk
  double seconds = 0;
  double tokens_per_second = 0;
};

// Computes the log-probabilities of a row of logits in double precision and
// returns -log p(token).
double token_nll(const float* logits, int64_t n_vocab, int32_t token);

// Perplexity from sums over n_scored predictions of -log p and of its square,
// as llama.cpp estimates it: nll = the mean, ppl = exp(nll), ppl_error =
// sqrt(var / (n_scored - 1)) * ppl with var the population variance of the
// NLLs (0 when var <= 0 or n_scored is 1). n_scored 0 gives NaN nll and ppl.
// perplexity, imatrix and their JSON take their figures from here.
struct PerplexityEstimate {
  double nll = 0;
  double ppl = 0;
  double ppl_error = 0;
};
PerplexityEstimate perplexity_from_sums(double nll_sum, double nll_sq_sum, int64_t n_scored);

// Calls on_chunk(i, running_ppl) after each chunk (for printing and progress).
// With opt.split_layers over the ranks of `comm` (every rank calls it): the
// chunks go through the ranks' layers and rank 0 gets each chunk's figures
// from the last rank, so its result (and on_chunk) is one process's; the
// other ranks return an empty result. Without, only `comm`'s rank 0 matters
// to the caller: every rank computes the whole (one process's run each).
PerplexityResult perplexity(const Model& model, const std::vector<Token>& tokens, const PerplexityOptions& opt,
                            const std::function<void(int64_t, double)>& on_chunk = {},
                            dist::Comm& comm = dist::world());

// `qlens perplexity --json`: inputs, settings (threads <= 0 written as the
// count used) and the result (docs/JSON.md), pretty-printed, ending in a
// newline.
inline constexpr int kPerplexityJsonSchemaVersion = 2;
std::string perplexity_json(const PerplexityResult& r, const PerplexityOptions& opt, const std::string& model_path,
                            const std::string& text_path);

}  // namespace qlens::tools
