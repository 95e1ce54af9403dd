#include "tools/chunks.h"

#include <algorithm>

#include "qlens/error.h"

namespace qlens::tools {

ContextOptions chunk_context(int64_t n_ctx, int64_t n_batch, int n_threads) {
  ContextOptions o;
  o.n_ctx = n_ctx;
  o.n_batch = std::min(n_batch > 0 ? n_batch : n_ctx, n_ctx);
  o.n_threads = n_threads;
  return o;
}

TextChunks::TextChunks(const std::vector<Token>& tokens, int64_t n_ctx, const Vocab& vocab, const std::string& tool)
    : tokens_(tokens), n_ctx_(n_ctx) {
  if (n_ctx < 4) throw Error(tool + ": context size -c must be at least 4, got " + std::to_string(n_ctx));
  if (available() == 0)
    throw Error(tool + ": the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of -c " +
                std::to_string(n_ctx) + "; use a longer text or a smaller -c");
  if (vocab.add_bos() && vocab.bos() >= 0) bos_ = vocab.bos();
  chunk_.resize(n_ctx);
}

const std::vector<Token>& TextChunks::chunk(int64_t c) {
  std::copy_n(tokens_.begin() + c * n_ctx_, n_ctx_, chunk_.begin());
  if (bos_ >= 0) chunk_[0] = bos_;
  return chunk_;
}

}  // namespace qlens::tools
