#include "tools/generate/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "qlens/error.h"

namespace qlens::tools {

Sampler::Sampler(const SamplerOptions& opt) : opt_(opt), rng_(opt.seed) {}

Token Sampler::sample(std::span<const float> logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (opt_.temperature <= 0)  // greedy: the first maximum
    return static_cast<Token>(std::max_element(logits.begin(), logits.end()) - logits.begin());

  std::vector<Token> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](Token a, Token b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = n;
  if (opt_.top_k > 0 && opt_.top_k < n) {
    keep = opt_.top_k;
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  ids.resize(keep);
  // Probabilities at temperature 1 decide the nucleus, as llama.cpp does.
  std::vector<double> p(keep);
  const double max = logits[ids[0]];
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += p[i] = std::exp(logits[ids[i]] - max);
  if (opt_.top_p < 1.0f) {
    double cum = 0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      cum += p[i] / sum;
      if (cum >= opt_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    ids.resize(keep);
  }
  std::vector<double> w(keep);
  for (int64_t i = 0; i < keep; ++i) w[i] = std::exp((logits[ids[i]] - max) / opt_.temperature);
  std::discrete_distribution<int64_t> dist(w.begin(), w.end());
  return ids[dist(rng_)];
}

GenerateResult generate(const Model& model, const std::string& prompt, const GenerateOptions& opt,
                        const std::function<void(const std::string&)>& on_piece) {
  const Vocab& vocab = model.vocab();
  GenerateResult r;
  r.prompt_tokens = vocab.tokenize(prompt, /*add_special=*/true);
  if (r.prompt_tokens.empty()) throw Error("generate: the prompt is empty and the model adds no BOS token");

  ContextOptions copt;
  copt.n_ctx = opt.n_ctx;
  copt.n_batch = opt.n_batch;
  copt.n_threads = opt.n_threads;
  copt.cache_type = opt.cache_type;
  copt.device = opt.device;
  copt.cpu = opt.cpu;
  copt.vulkan = opt.vulkan;
  copt.n_gpu_layers = opt.n_gpu_layers;
  Context ctx(model, copt);
  if (static_cast<int64_t>(r.prompt_tokens.size()) >= ctx.n_ctx())
    throw Error("generate: the prompt has " + std::to_string(r.prompt_tokens.size()) +
                " tokens, which does not fit the context size " + std::to_string(ctx.n_ctx()) + " (-c)");

  if (opt.n_predict != 0) r.packed_bytes = ctx.pack_for_generation();

  Sampler sampler(opt.sampler);
  auto t0 = std::chrono::steady_clock::now();
  ctx.decode(r.prompt_tokens, false);
  auto t1 = std::chrono::steady_clock::now();
  r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
  const int64_t limit = opt.n_predict < 0 ? ctx.n_ctx() : opt.n_predict;
  for (int64_t i = 0; i < limit; ++i) {
    Token t = sampler.sample(ctx.last_logits());
    if (t == vocab.eos()) break;
    r.tokens.push_back(t);
    std::string piece = vocab.token_to_piece(t);
    r.text += piece;
    if (on_piece) on_piece(piece);
    if (ctx.n_past() >= ctx.n_ctx() || i + 1 == limit) break;
    const Token next[1] = {t};
    ctx.decode(next, false);
  }
  r.generate_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  return r;
}

}  // namespace qlens::tools
