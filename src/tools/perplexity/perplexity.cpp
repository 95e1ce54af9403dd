#include "tools/perplexity/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>

#include "core/json_writer.h"
#include "core/parallel.h"
#include "dist/bytes.h"
#include "qlens/error.h"
#include "tools/common/chunks.h"
#include "tools/compare/compare_logits.h"
#include "tools/common/json_header.h"
#include "tools/common/layer_pipeline.h"

namespace qlens::tools {

double token_nll(const float* logits, int64_t n_vocab, int32_t token) {
  return log_sum_exp(std::span<const float>(logits, static_cast<size_t>(n_vocab))) - static_cast<double>(logits[token]);
}

PerplexityEstimate perplexity_from_sums(double nll_sum, double nll_sq_sum, int64_t n_scored) {
  PerplexityEstimate e;
  e.nll = nll_sum / n_scored;
  e.ppl = std::exp(e.nll);
  const double var = nll_sq_sum / n_scored - e.nll * e.nll;
  e.ppl_error = var > 0 && n_scored > 1 ? std::sqrt(var / (n_scored - 1)) * e.ppl : 0;
  return e;
}

namespace {

// One chunk's scored predictions.
struct ChunkScore {
  double nll = 0, nll2 = 0;
  int64_t n = 0;
};

std::string serialize(const ChunkScore& s) {
  dist::ByteWriter w;
  w.put(s);
  return w.take();
}

}  // namespace

PerplexityResult perplexity(const Model& model, const std::vector<Token>& tokens, const PerplexityOptions& opt,
                            const std::function<void(int64_t, double)>& on_chunk, dist::Comm& comm) {
  TextChunks chunks(tokens, opt.n_ctx, model.vocab(), "perplexity");
  const int64_t n_ctx = opt.n_ctx;
  const int64_t n_chunks = chunks_to_run(chunks.available(), opt.max_chunks);
  const std::optional<LayerSplit> split =
      split_for_run(model, comm, opt.split_layers, opt.on_scored_logits || opt.on_chunk_tokens, "perplexity");
  Context ctx(model, run_context(opt, n_ctx, opt.n_batch));
  const int64_t n_vocab = model.hparams().n_vocab;
  PerplexityResult r;
  r.n_tokens = static_cast<int64_t>(tokens.size());
  double nll = 0, nll2 = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 0 adds the chunks' scores in order: its own (one process) or the
  // last rank's, one chunk behind so that the pipeline keeps flowing.
  const auto add = [&](int64_t c, const ChunkScore& s) {
    nll += s.nll;
    nll2 += s.nll2;
    r.n_scored += s.n;
    r.running_ppl.push_back(perplexity_from_sums(nll, nll2, r.n_scored).ppl);
    if (on_chunk) on_chunk(c, r.running_ppl.back());
  };
  const int last_rank = comm.size() - 1;
  const auto receive_score = [&] { return dist::ByteReader(comm.receive(last_rank)).get<ChunkScore>(); };
  for (int64_t c = 0; c < n_chunks; ++c) {
    ctx.clear();
    const bool has_logits = split ? pipeline_decode(ctx, comm, *split, chunks.chunk(c), chunks.first_scored())
                                  : ctx.decode_logits_from(chunks.chunk(c), chunks.first_scored());
    if (split && !split->is_last(comm.rank())) {
      if (comm.is_root() && c > 0) add(c - 1, receive_score());
      continue;
    }
    if (!has_logits) throw Error("perplexity: the computation was stopped");
    if (opt.on_chunk_tokens) opt.on_chunk_tokens(std::span<const Token>(tokens).subspan(c * n_ctx, n_ctx));
    ChunkScore s;
    for (int64_t j = chunks.first_scored(); j < n_ctx - 1; ++j) {
      if (opt.on_scored_logits) opt.on_scored_logits(ctx.logits(j));
      const double v = token_nll(ctx.logits(j).data(), n_vocab, chunks.next(c, j));
      s.nll += v;
      s.nll2 += v * v;
      ++s.n;
    }
    if (split)
      comm.post(serialize(s), 0);
    else
      add(c, s);
  }
  if (split && comm.is_root() && n_chunks > 0) add(n_chunks - 1, receive_score());
  if (split && !comm.is_root()) return PerplexityResult{};
  r.n_chunks = n_chunks;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_per_second = r.seconds > 0 ? n_chunks * n_ctx / r.seconds : 0;
  const PerplexityEstimate e = perplexity_from_sums(nll, nll2, r.n_scored);
  r.nll = e.nll;
  r.ppl = e.ppl;
  r.ppl_error = e.ppl_error;
  return r;
}

std::string perplexity_json(const PerplexityResult& r, const PerplexityOptions& opt, const std::string& model_path,
                            const std::string& text_path) {
  std::ostringstream s;
  JsonWriter w(s, true);
  write_json_header(w, "qlens perplexity", kPerplexityJsonSchemaVersion, {{"model", model_path}, {"text", text_path}});
  w.key("settings");
  w.begin_object();
  w.key("n_ctx"); w.value(opt.n_ctx);
  w.key("n_batch"); w.value(opt.n_batch);
  w.key("max_chunks");
  if (opt.max_chunks >= 0) w.value(opt.max_chunks); else w.null();
  w.key("n_threads"); w.value(opt.n_threads > 0 ? opt.n_threads : default_thread_count());
  w.key("device"); w.value(opt.device);
  w.end_object();
  w.key("n_chunks"); w.value(r.n_chunks);
  w.key("n_tokens_text"); w.value(r.n_tokens);
  w.key("n_tokens_evaluated"); w.value(r.n_chunks * opt.n_ctx);
  w.key("n_tokens_scored"); w.value(r.n_scored);
  w.key("ppl");
  w.begin_object();
  w.key("value"); w.value(r.ppl);
  w.key("error"); w.value(r.ppl_error);
  w.end_object();
  w.key("mean_nll"); w.value(r.nll);
  w.key("seconds"); w.value(r.seconds);
  w.key("tokens_per_second"); w.value(r.tokens_per_second);
  w.key("running_ppl");
  w.begin_array();
  for (double v : r.running_ppl) w.value(v);
  w.end_array();
  w.end_object();
  s << "\n";
  return s.str();
}

}  // namespace qlens::tools
