#include "tools/bench/bench.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <vector>

#include "qlens/error.h"
#include "tools/common/json_header.h"

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
  copt.cpu = opt.cpu;
  copt.vulkan = opt.vulkan;
  copt.n_gpu_layers = opt.n_gpu_layers;
  Context ctx(model, copt);
  const size_t packed_bytes = opt.n_gen > 0 ? ctx.pack_for_generation() : 0;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<Token> any_token(0, static_cast<Token>(model.hparams().n_vocab - 1));
  std::vector<Token> prompt(opt.n_prompt);
  for (Token& t : prompt) t = any_token(rng);

  // One warm-up pass of each kind (page in the weights, start the threads).
  if (opt.n_prompt > 0) ctx.decode(prompt, false);
  ctx.clear();
  std::vector<double> pp, tg;
  double tg_seconds = 0;
  Backend::Profile tg_profile;
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
      ctx.backend().profile(/*reset=*/true);
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < opt.n_gen; ++i) {
        t[0] = any_token(rng);
        ctx.decode(t, false);
      }
      const double seconds = seconds_since(t0);
      tg.push_back(opt.n_gen / seconds);
      tg_seconds += seconds;
      tg_profile += ctx.backend().profile(/*reset=*/true);
    }
  }
  BenchResult r{summarize(pp), summarize(tg), ctx.backend().name(), packed_bytes, {}};
  if (tg_profile.calls > 0 && !ctx.device()) {
    const double n = static_cast<double>(opt.n_gen) * opt.repetitions;
    r.token_time = {tg_seconds / n,
                    tg_profile.kernel_s / n,
                    tg_profile.wait_s / n,
                    (tg_profile.compute_s - tg_profile.kernel_s - tg_profile.wait_s) / n,
                    (tg_seconds - tg_profile.compute_s) / n,
                    static_cast<double>(tg_profile.nodes) / n,
                    static_cast<double>(tg_profile.barriers) / n};
  }
  if (ctx.device()) r.backend = ctx.device()->name() + " + " + r.backend;
  return r;
}

std::string token_time_text(const TokenTime& t) {
  if (t.total <= 0) return "";
  char line[512];
  auto us = [](double s) { return s * 1e6; };
  auto pct = [&](double s) { return 100.0 * s / t.total; };
  std::snprintf(line, sizeof line,
                "per generated token: %.0f us; kernels %.0f us (%.1f%%), barrier waits %.0f us (%.1f%%), dispatch %.0f "
                "us (%.1f%%), outside the backend (graph, schedule, inputs, logits) %.0f us (%.1f%%); %.0f nodes, %.0f barriers\n",
                us(t.total), us(t.kernels), pct(t.kernels), us(t.waits), pct(t.waits), us(t.dispatch), pct(t.dispatch),
                us(t.outside), pct(t.outside), t.nodes, t.barriers);
  return line;
}

namespace {

struct BenchRow {
  std::string test;  // "pp512", "tg128"
  int64_t n_prompt, n_gen;
  BenchFigure figure;
  double weights_gb_per_s;  // generation only; NaN for prompts
};

std::vector<BenchRow> bench_rows(const BenchReport& r) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<BenchRow> rows;
  if (r.options.n_prompt > 0)
    rows.push_back({"pp" + std::to_string(r.options.n_prompt), r.options.n_prompt, 0, r.result.prompt, nan});
  if (r.options.n_gen > 0)
    rows.push_back({"tg" + std::to_string(r.options.n_gen), 0, r.options.n_gen, r.result.generation,
                    r.weights_gb_per_token * r.result.generation.mean});
  return rows;
}

double share(double part, double whole) { return whole > 0 ? part / whole : std::numeric_limits<double>::quiet_NaN(); }

// One test's object, the same in `-o json`'s array and the --json file's
// "results", so a script reads either with the same keys.
void write_row(JsonWriter& w, const BenchReport& r, const BenchRow& row) {
  w.begin_object();
  w.key("model_filename"); w.value(r.model_path);
  w.key("model_size"); w.value(r.model_size);
  w.key("model_n_params"); w.value(r.model_n_params);
  w.key("backends"); w.value(r.backends);
  w.key("cpu_info"); w.value(r.cpu_info);
  w.key("n_batch"); w.value(r.options.n_batch);
  w.key("n_threads"); w.value(r.n_threads);
  w.key("n_gpu_layers"); w.value(r.options.n_gpu_layers);
  w.key("test"); w.value(row.test);
  w.key("n_prompt"); w.value(row.n_prompt);
  w.key("n_gen"); w.value(row.n_gen);
  w.key("avg_ts"); w.value(row.figure.mean);
  w.key("stddev_ts"); w.value(row.figure.stddev);
  w.key("weights_gb_per_s"); w.value(row.weights_gb_per_s);
  w.key("read_bandwidth_gb_per_s"); w.value(r.read_bandwidth_gb_per_s);
  w.key("share_of_read_bandwidth"); w.value(share(row.weights_gb_per_s, r.read_bandwidth_gb_per_s));
  w.end_object();
}

void write_rows(JsonWriter& w, const BenchReport& r) {
  w.begin_array();
  for (const BenchRow& row : bench_rows(r)) write_row(w, r, row);
  w.end_array();
}

}  // namespace

std::string bench_json_rows(const BenchReport& r) {
  std::ostringstream s;
  JsonWriter w(s, /*pretty=*/true);
  write_rows(w, r);
  s << "\n";
  return s.str();
}

std::string bench_json(const BenchReport& r) {
  std::ostringstream s;
  JsonWriter w(s, /*pretty=*/true);
  write_json_header(w, "qlens bench", 1, {{"model", r.model_path}});
  w.key("settings");
  w.begin_object();
  w.key("n_prompt"); w.value(r.options.n_prompt);
  w.key("n_gen"); w.value(r.options.n_gen);
  w.key("n_batch"); w.value(r.options.n_batch);
  w.key("repetitions"); w.value(r.options.repetitions);
  w.key("n_threads"); w.value(r.n_threads);
  w.key("device"); w.value(r.device);
  w.key("n_gpu_layers"); w.value(r.options.n_gpu_layers);
  w.end_object();
  w.key("results");
  write_rows(w, r);
  w.end_object();
  s << "\n";
  return s.str();
}

std::string bench_csv(const BenchReport& r) {
  std::ostringstream s;
  s << "model_filename,model_size,model_n_params,backends,cpu_info,n_batch,n_threads,n_gpu_layers,test,n_prompt,"
       "n_gen,avg_ts,stddev_ts,weights_gb_per_s,read_bandwidth_gb_per_s,share_of_read_bandwidth\n";
  auto quoted = [](const std::string& v) {
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  auto number = [](double v) {
    if (!std::isfinite(v)) return std::string();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  for (const BenchRow& row : bench_rows(r))
    s << quoted(r.model_path) << ',' << r.model_size << ',' << r.model_n_params << ',' << quoted(r.backends) << ','
      << quoted(r.cpu_info) << ',' << r.options.n_batch << ',' << r.n_threads << ',' << r.options.n_gpu_layers << ','
      << row.test << ',' << row.n_prompt << ',' << row.n_gen << ',' << number(row.figure.mean) << ','
      << number(row.figure.stddev) << ',' << number(row.weights_gb_per_s) << ','
      << number(r.read_bandwidth_gb_per_s) << ',' << number(share(row.weights_gb_per_s, r.read_bandwidth_gb_per_s))
      << '\n';
  return s.str();
}

}  // namespace qlens::tools
