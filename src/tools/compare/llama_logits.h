// llama.cpp's log-probability files (llama-perplexity --kl-divergence-base):
// reading them, and scoring a model against one as llama-perplexity
// --kl-divergence does (the same chunks and positions, KLD of the file's
// distribution to the model's, top-token agreement).
//
// Layout (little-endian): "_logits_", int32 n_ctx, n_vocab, n_chunk, the
// int32 tokens of every chunk (token 0 the text's, which llama.cpp replaced
// by BOS when it evaluated), then for each chunk and each scored position
// j = n_ctx/2 .. n_ctx-2 one record: float scale, float min_log_prob and
// n_vocab uint16 codes q (one padding word for an odd vocabulary);
// log p(i) = min_log_prob + scale * q[i].
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "qlens/model.h"
#include "tools/compare/compare_logits.h"

namespace qlens::tools {

class LlamaLogitsFile {
 public:
  // Throws Error naming the file for a bad magic, sizes or a truncated file.
  static LlamaLogitsFile load(const std::string& path);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_vocab() const { return n_vocab_; }
  int64_t n_chunk() const { return n_chunk_; }
  int64_t first_scored() const { return n_ctx_ / 2; }
  int64_t n_scored_per_chunk() const { return n_ctx_ - 1 - n_ctx_ / 2; }
  // The tokens of chunk c as the file stores them.
  std::vector<Token> chunk_tokens(int64_t c) const;
  // log p of every token at position first_scored() + k of chunk c.
  std::vector<double> log_probs(int64_t c, int64_t k) const;

 private:
  int64_t n_ctx_ = 0, n_vocab_ = 0, n_chunk_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> records_;
  size_t record_bytes_ = 0;
};

// Writes a file llama-perplexity --kl-divergence reads: the chunks' tokens
// (as the text has them; the first of each chunk is not replaced), then one
// record per scored position, encoded as llama.cpp encodes it.
class LlamaLogitsWriter {
 public:
  LlamaLogitsWriter(int64_t n_ctx, int64_t n_vocab);
  void add_chunk(std::span<const Token> tokens);  // n_ctx tokens
  void add_position(std::span<const float> logits);
  // Throws Error unless every chunk has its n_ctx - 1 - n_ctx/2 positions.
  void write(const std::string& path) const;

 private:
  int64_t n_ctx_, n_vocab_;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> records_;
  int64_t n_positions_ = 0;
};

struct KldOptions {
  int64_t max_chunks = -1;  // < 0: all of the file's
  int n_threads = 0;
  CpuOptions cpu;  // the CPU backend's kernels (see ContextOptions)
  VulkanOptions vulkan;  // a Vulkan device's (see ContextOptions)
  std::string device = "cpu";
  int n_gpu_layers = -1;
  DType cache_type = DType::F16;
};

struct KldResult {
  int64_t n_scored = 0;
  // llama-perplexity --kl-divergence's whole block, the file as the reference.
  LogitSummary summary;
  // Its headline figures.
  double mean_kld = 0, max_kld = 0;
  double same_top = 0;  // fraction of positions whose most likely token is the file's
  double ppl = 0;       // of the model on the file's tokens
  double ppl_base = 0;  // of the file's distribution on them
};

// KLD(file || model) per position over the tokens with p_file >= e^-16 (as
// llama.cpp, whose file clips below that), averaged over every scored
// position. Calls on_chunk(done, total, running mean KLD) after each chunk.
KldResult kld_against_file(const Model& model, const LlamaLogitsFile& base, const KldOptions& opt,
                           const std::function<void(int64_t, int64_t, double)>& on_chunk = {});

}  // namespace qlens::tools
