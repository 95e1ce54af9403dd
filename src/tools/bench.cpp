#include "tools/bench.h"

#include <chrono>
#include <cmath>
#include <random>

#include "qlens/error.h"

namespace qlens::tools {

namespace {

BenchFigure summarize(const std::vector<double>& rates) {
  BenchFigure f;
  if (rates.empty()) return f;
  for (double r : rates) f.mean += r;
  f.mean /= rates.size();
  for (double r : rates) f.stddev += (r - f.mean) * (r - f.mean);
  f.stddev = rates.size() > 1 ? std::sqrt(f.stddev / (rates.size() - 1)) : 0;
  return f;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

BenchResult bench(const Model& model, const BenchOptions& opt) {
  if (opt.n_prompt < 0 || opt.n_gen < 0 || opt.repetitions < 1) throw Error("bench: counts must be positive");
  ContextOptions copt;
  copt.n_ctx = std::max<int64_t>(opt.n_prompt, 1) + opt.n_gen + 1;
  copt.n_batch = opt.n_batch;
  copt.n_threads = opt.n_threads;
  copt.device = opt.device;
  copt.n_gpu_layers = opt.n_gpu_layers;
  Context ctx(model, copt);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<Token> any_token(0, static_cast<Token>(model.hparams().n_vocab - 1));
  std::vector<Token> prompt(opt.n_prompt);
  for (Token& t : prompt) t = any_token(rng);

  // One warm-up pass of each kind (page in the weights, start the threads).
  if (opt.n_prompt > 0) ctx.decode(prompt, false);
  ctx.clear();
  std::vector<double> pp, tg;
  for (int r = 0; r < opt.repetitions; ++r) {
    if (opt.n_prompt > 0) {
      ctx.clear();
      auto t0 = std::chrono::steady_clock::now();
      ctx.decode(prompt, false);
      pp.push_back(opt.n_prompt / seconds_since(t0));
    }
    if (opt.n_gen > 0) {
      ctx.clear();
      Token t[1] = {any_token(rng)};
      ctx.decode(t, false);  // the first token is not timed, as in llama-bench
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < opt.n_gen; ++i) {
        t[0] = any_token(rng);
        ctx.decode(t, false);
      }
      tg.push_back(opt.n_gen / seconds_since(t0));
    }
  }
  BenchResult r{summarize(pp), summarize(tg), ctx.backend().name()};
  if (ctx.device()) r.backend = ctx.device()->name() + " + " + r.backend;
  return r;
}

}  // namespace qlens::tools
