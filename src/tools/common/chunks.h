// llama.cpp's perplexity chunking, in one place for perplexity, imatrix,
// compare and sensitivity: the text's tokens (BOS first) cut into whole
// chunks of n_ctx; each chunk is evaluated from an empty cache with its first
// token replaced by BOS (when the model adds one), and the predictions of its
// second half are scored: position j, first_scored() <= j < n_ctx - 1,
// predicts the text's token c * n_ctx + j + 1.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "qlens/model.h"
#include "qlens/vocab.h"

namespace qlens::tools {

// The context a chunked run needs: n_ctx positions, batches of n_batch
// (<= 0: the whole chunk) capped at n_ctx, and the run's threads. Callers add
// device, offload and cache type.
ContextOptions chunk_context(int64_t n_ctx, int64_t n_batch, int n_threads);
// chunk_context with what every tool's options say alike: the device, the
// layers offloaded to it, the CPU's kernels, and the KV cache type where the
// tool has one.
template <class ToolOptions>
ContextOptions run_context(const ToolOptions& opt, int64_t n_ctx, int64_t n_batch) {
  ContextOptions o = chunk_context(n_ctx, n_batch, opt.n_threads);
  o.device = opt.device;
  o.cpu = opt.cpu;
  o.vulkan = opt.vulkan;
  o.n_gpu_layers = opt.n_gpu_layers;
  if constexpr (requires { opt.cache_type; }) o.cache_type = opt.cache_type;
  return o;
}

// The chunks a run evaluates: the `available` ones, at most max_chunks of
// them (< 0: no limit). chunks_in_text first counts the whole chunks of n_ctx
// in n_tokens tokens (n_ctx below 1 counted as 1: the tools then refuse it).
inline int64_t chunks_to_run(int64_t available, int64_t max_chunks) {
  return max_chunks >= 0 ? std::min(max_chunks, available) : available;
}
inline int64_t chunks_in_text(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks) {
  return chunks_to_run(n_tokens / std::max<int64_t>(n_ctx, 1), max_chunks);
}

// The tokens (BOS first) of a text file for a chunked run. A text up to
// kWholeTextBytes is tokenized whole, as llama.cpp does. A longer one is read
// only as far as `tokens_needed` (< 0: all) requires: a prefix cut after a
// line, grown until it holds those tokens with a wide margin before the cut;
// asked for all of it, it is an error that says what to do (tokenizing takes
// about 50 bytes of memory per byte of text: a 1 GB text would need 50 GB).
inline constexpr int64_t kWholeTextBytes = int64_t{64} << 20;
std::vector<Token> tokenize_text_file(const Vocab& vocab, const std::string& path, int64_t tokens_needed,
                                      const std::string& tool, bool parse_special = false);

class TextChunks {
 public:
  // Throws Error, prefixed by `tool`, for a context under 4 tokens or a text
  // shorter than one chunk.
  TextChunks(const std::vector<Token>& tokens, int64_t n_ctx, const Vocab& vocab, const std::string& tool);

  int64_t available() const { return static_cast<int64_t>(tokens_.size()) / n_ctx_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t first_scored() const { return n_ctx_ / 2; }
  // The tokens to decode for chunk c (valid until the next call).
  const std::vector<Token>& chunk(int64_t c);
  // The text's token that position j of chunk c predicts.
  Token next(int64_t c, int64_t j) const { return tokens_[c * n_ctx_ + j + 1]; }

 private:
  const std::vector<Token>& tokens_;
  int64_t n_ctx_;
  Token bos_ = -1;  // -1: the model adds none
  std::vector<Token> chunk_;
};

}  // namespace qlens::tools
