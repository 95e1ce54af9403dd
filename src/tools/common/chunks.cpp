#include "tools/common/chunks.h"

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/human_bytes.h"
#include "core/text_file.h"
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

namespace {

// The first `n` bytes of the file, cut after its last line break (if any).
std::string text_prefix(const std::string& path, uint64_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(in.gcount()));
  if (const size_t line = s.rfind('\n'); line != std::string::npos) s.resize(line + 1);
  return s;
}

}  // namespace

std::vector<Token> tokenize_text_file(const Vocab& vocab, const std::string& path, int64_t tokens_needed,
                                      const std::string& tool, bool parse_special) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size <= static_cast<uintmax_t>(kWholeTextBytes))
    return vocab.tokenize(read_text_file(path), /*add_special=*/true, parse_special);
  if (tokens_needed < 0)
    throw Error(tool + ": " + path + " is " + human_bytes(size) + "; qlens tokenizes a whole text only up to " +
                human_bytes(kWholeTextBytes) +
                " (tokenizing takes about 50 bytes of memory per byte of text): give --chunks N to read only what N "
                "chunks need, or cut the text (head -c 64M " + path + " > part.txt)");
  // Tokens near the cut may differ from the whole text's: keep them well
  // past what is used.
  const int64_t margin = 4096;
  for (uint64_t bytes = std::max<uint64_t>(16 * (tokens_needed + margin), 1 << 20);; bytes *= 2) {
    std::vector<Token> tokens = vocab.tokenize(text_prefix(path, bytes), /*add_special=*/true, parse_special);
    if (static_cast<int64_t>(tokens.size()) >= tokens_needed + margin || bytes >= size) {
      std::fprintf(stderr, "%s: %s is %s: tokenized its first %s, enough for the chunks asked for\n", tool.c_str(),
                   path.c_str(), human_bytes(size).c_str(), human_bytes(std::min<uint64_t>(bytes, size)).c_str());
      if (bytes < size) tokens.resize(static_cast<size_t>(tokens_needed) + 1);  // the margin is not trusted
      return tokens;
    }
  }
}

}  // namespace qlens::tools
