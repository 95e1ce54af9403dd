#include "tools/compare/llama_logits.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "core/parallel.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "tools/common/chunks.h"
#include "tools/compare/compare_logits.h"

namespace qlens::tools {

namespace {

template <typename T>
T read_le(const std::string& data, size_t off) {
  T v;
  std::memcpy(&v, data.data() + off, sizeof v);
  return v;
}

}  // namespace

LlamaLogitsFile LlamaLogitsFile::load(const std::string& path) {
  const std::string data = read_text_file(path);  // bytes as they are
  auto fail = [&](const std::string& what) { throw Error(path + ": " + what); };
  if (data.size() < 20 || data.compare(0, 8, "_logits_") != 0)
    fail("not a llama.cpp log-probability file (no '_logits_' magic)");
  LlamaLogitsFile f;
  f.n_ctx_ = read_le<int32_t>(data, 8);
  f.n_vocab_ = read_le<int32_t>(data, 12);
  f.n_chunk_ = read_le<int32_t>(data, 16);
  if (f.n_ctx_ < 4 || f.n_vocab_ < 1 || f.n_chunk_ < 1 || f.n_ctx_ > (1 << 24) || f.n_vocab_ > (1 << 24) ||
      f.n_chunk_ > (1 << 24))
    fail("implausible sizes: n_ctx " + std::to_string(f.n_ctx_) + ", n_vocab " + std::to_string(f.n_vocab_) +
         ", n_chunk " + std::to_string(f.n_chunk_));
  const size_t n_tokens = static_cast<size_t>(f.n_ctx_ * f.n_chunk_);
  f.record_bytes_ = (2 * static_cast<size_t>((f.n_vocab_ + 1) / 2) + 4) * sizeof(uint16_t);
  const size_t want = 20 + n_tokens * 4 + static_cast<size_t>(f.n_chunk_ * f.n_scored_per_chunk()) * f.record_bytes_;
  if (data.size() != want)
    fail("size " + std::to_string(data.size()) + " bytes, expected " + std::to_string(want) + " for n_ctx " +
         std::to_string(f.n_ctx_) + ", n_vocab " + std::to_string(f.n_vocab_) + ", " + std::to_string(f.n_chunk_) +
         " chunks");
  f.tokens_.resize(n_tokens);
  std::memcpy(f.tokens_.data(), data.data() + 20, n_tokens * 4);
  f.records_.assign(data.begin() + 20 + static_cast<std::ptrdiff_t>(n_tokens * 4), data.end());
  return f;
}

std::vector<Token> LlamaLogitsFile::chunk_tokens(int64_t c) const {
  return std::vector<Token>(tokens_.begin() + c * n_ctx_, tokens_.begin() + (c + 1) * n_ctx_);
}

std::vector<double> LlamaLogitsFile::log_probs(int64_t c, int64_t k) const {
  const uint8_t* r = records_.data() + static_cast<size_t>(c * n_scored_per_chunk() + k) * record_bytes_;
  float scale, min_log_prob;
  std::memcpy(&scale, r, 4);
  std::memcpy(&min_log_prob, r + 4, 4);
  std::vector<double> out(n_vocab_);
  for (int64_t i = 0; i < n_vocab_; ++i) {
    uint16_t q;
    std::memcpy(&q, r + 8 + 2 * i, 2);
    out[i] = static_cast<double>(min_log_prob) + static_cast<double>(scale) * q;
  }
  return out;
}

LlamaLogitsWriter::LlamaLogitsWriter(int64_t n_ctx, int64_t n_vocab) : n_ctx_(n_ctx), n_vocab_(n_vocab) {}

void LlamaLogitsWriter::add_chunk(std::span<const Token> tokens) {
  if (static_cast<int64_t>(tokens.size()) != n_ctx_) throw Error("kl-divergence-base: a chunk must hold n_ctx tokens");
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

// llama.cpp's encoding: logits more than 16 below the top clipped, the rest
// as 16-bit steps above the lowest kept, with that lowest's log-probability.
void LlamaLogitsWriter::add_position(std::span<const float> logits) {
  if (static_cast<int64_t>(logits.size()) != n_vocab_) throw Error("kl-divergence-base: wrong vocabulary size");
  float max = -INFINITY, min = INFINITY;
  for (float l : logits) {
    max = std::max(max, l);
    min = std::min(min, l);
  }
  const float min_logit = std::max(min, max - 16.0f);
  const float lse = static_cast<float>(log_sum_exp(logits) - max);  // log Σ exp(l - max)
  const float scale = (max - min_logit) / 65535.0f;
  const float min_log_prob = min_logit - max - lse;
  const size_t words = 2 * static_cast<size_t>((n_vocab_ + 1) / 2) + 4;
  const size_t at = records_.size();
  records_.resize(at + words * 2, 0);
  std::memcpy(&records_[at], &scale, 4);
  std::memcpy(&records_[at + 4], &min_log_prob, 4);
  for (int64_t i = 0; i < n_vocab_; ++i) {
    const float l = logits[i];
    const uint16_t q = l > min_logit && scale > 0 ? static_cast<uint16_t>(std::min(65535.0f, std::nearbyint((l - min_logit) / scale))) : 0;
    std::memcpy(&records_[at + 8 + 2 * i], &q, 2);
  }
  ++n_positions_;
}

void LlamaLogitsWriter::write(const std::string& path) const {
  const int64_t n_chunk = static_cast<int64_t>(tokens_.size()) / n_ctx_;
  if (n_chunk < 1 || n_positions_ != n_chunk * (n_ctx_ - 1 - n_ctx_ / 2))
    throw Error(path + ": " + std::to_string(n_positions_) + " positions for " + std::to_string(n_chunk) + " chunks");
  std::string out = "_logits_";
  for (int64_t v : {n_ctx_, n_vocab_, n_chunk}) {
    const int32_t x = static_cast<int32_t>(v);
    out.append(reinterpret_cast<const char*>(&x), 4);
  }
  out.append(reinterpret_cast<const char*>(tokens_.data()), tokens_.size() * 4);
  out.append(reinterpret_cast<const char*>(records_.data()), records_.size());
  write_file_atomic(path, out);
}

static LogitComparison::TokenStats measure_against_file(std::span<const float> logits, const std::vector<double>& log_p_base,
                                                       Token next, std::vector<double>& log_p) {
  // llama.cpp's file clips log-probabilities below this: tokens under it are
  // left out of the KLD sum, as llama-perplexity leaves them out.
  constexpr double kMinLogP = -16.0;
  log_softmax_into(logits, log_p);
  LogitComparison::TokenStats t;
  for (size_t i = 0; i < log_p.size(); ++i)
    if (log_p_base[i] >= kMinLogP) t.kld += std::exp(log_p_base[i]) * (log_p_base[i] - log_p[i]);
  t.same_top = std::max_element(log_p.begin(), log_p.end()) - log_p.begin() ==
               std::max_element(log_p_base.begin(), log_p_base.end()) - log_p_base.begin();
  t.nll_ref = -log_p_base[next];
  t.nll_test = -log_p[next];
  return t;
}

KldResult kld_against_file(const Model& model, const LlamaLogitsFile& base, const KldOptions& opt,
                           const std::function<void(int64_t, int64_t, double)>& on_chunk) {
  if (base.n_vocab() != model.hparams().n_vocab)
    throw Error("kl-divergence: the base file has a vocabulary of " + std::to_string(base.n_vocab()) +
                " tokens, the model " + model.path() + " " + std::to_string(model.hparams().n_vocab));
  const int64_t n_ctx = base.n_ctx();
  const int64_t n_chunks = chunks_to_run(base.n_chunk(), opt.max_chunks);
  Context ctx(model, run_context(opt, n_ctx, n_ctx));
  const Token bos = model.vocab().add_bos() ? model.vocab().bos() : -1;
  LogitComparison comparison;
  const int64_t n_scored = base.n_scored_per_chunk();
  std::vector<std::vector<double>> scratch(opt.n_threads > 0 ? opt.n_threads : default_thread_count());
  std::vector<LogitComparison::TokenStats> measured(n_scored);
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<Token> tokens = base.chunk_tokens(c);
    const std::vector<Token> text = tokens;
    if (bos >= 0) tokens[0] = bos;
    ctx.clear();
    ctx.decode_logits_from(tokens, base.first_scored());
    // Measured on every thread, added in order: the sums of one thread.
    parallel_for(n_scored, opt.n_threads, [&](int64_t k, int worker) {
      const int64_t j = base.first_scored() + k;
      measured[k] = measure_against_file(ctx.logits(j), base.log_probs(c, k), text[j + 1], scratch[worker]);
    });
    for (const auto& t : measured) comparison.add(t);
    if (on_chunk) on_chunk(c + 1, n_chunks, comparison.summary().kld_mean.value);
  }
  KldResult r;
  r.summary = comparison.summary();
  r.n_scored = comparison.n_tokens();
  r.mean_kld = r.summary.kld_mean.value;
  r.max_kld = r.summary.kld_max;
  r.same_top = r.summary.same_top.value;
  r.ppl = r.summary.ppl_test.value;
  r.ppl_base = r.summary.ppl_ref.value;
  return r;
}

}  // namespace qlens::tools
