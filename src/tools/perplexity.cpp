#include "tools/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "qlens/error.h"
#include "tools/chunks.h"
#include "tools/compare_logits.h"

namespace qlens::tools {

double token_nll(const float* logits, int64_t n_vocab, int32_t token) {
  return log_sum_exp(std::span<const float>(logits, static_cast<size_t>(n_vocab))) - static_cast<double>(logits[token]);
}

PerplexityResult perplexity(const Model& model, const std::vector<Token>& tokens, const PerplexityOptions& opt,
                            const std::function<void(int64_t, double)>& on_chunk) {
  TextChunks chunks(tokens, opt.n_ctx, model.vocab(), "perplexity");
  const int64_t n_ctx = opt.n_ctx;
  const int64_t n_chunks = opt.max_chunks >= 0 ? std::min(opt.max_chunks, chunks.available()) : chunks.available();

  ContextOptions copt = chunk_context(n_ctx, opt.n_batch, opt.n_threads);
  copt.device = opt.device;
  copt.n_gpu_layers = opt.n_gpu_layers;
  copt.cache_type = opt.cache_type;
  Context ctx(model, copt);

  const int64_t n_vocab = model.hparams().n_vocab;

  PerplexityResult r;
  r.n_tokens = static_cast<int64_t>(tokens.size());
  double nll = 0, nll2 = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    ctx.clear();
    ctx.decode_logits_from(chunks.chunk(c), chunks.first_scored());
    if (opt.on_chunk_tokens) opt.on_chunk_tokens(std::span<const Token>(tokens).subspan(c * n_ctx, n_ctx));
    for (int64_t j = chunks.first_scored(); j < n_ctx - 1; ++j) {
      if (opt.on_scored_logits) opt.on_scored_logits(ctx.logits(j));
      const double v = token_nll(ctx.logits(j).data(), n_vocab, chunks.next(c, j));
      nll += v;
      nll2 += v * v;
      ++r.n_scored;
    }
    r.running_ppl.push_back(std::exp(nll / r.n_scored));
    if (on_chunk) on_chunk(c, r.running_ppl.back());
  }
  r.n_chunks = n_chunks;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_per_second = r.seconds > 0 ? n_chunks * n_ctx / r.seconds : 0;
  r.nll = nll / r.n_scored;
  r.ppl = std::exp(r.nll);
  const double var = nll2 / r.n_scored - r.nll * r.nll;
  r.ppl_error = var > 0 && r.n_scored > 1 ? std::sqrt(var / (r.n_scored - 1)) * r.ppl : 0;
  return r;
}

}  // namespace qlens::tools
