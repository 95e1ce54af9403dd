// Throughput as llama-bench measures it: prompt processing (a batch of n_prompt
// tokens from an empty cache) and generation (n_gen tokens one at a time),
// repeated, reporting mean and standard deviation of tokens per second.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "qlens/model.h"

namespace qlens::tools {

struct BenchOptions {
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  int64_t n_batch = 512;
  int repetitions = 3;
  int n_threads = 0;
  CpuOptions cpu;  // the CPU backend's kernels (see ContextOptions)
  VulkanOptions vulkan;  // a Vulkan device's (see ContextOptions)
  std::string device = "cpu";  // see ContextOptions
  int n_gpu_layers = -1;
};

struct BenchFigure {
  double mean = 0, stddev = 0;  // tokens per second
};

// Where a generated token's time goes (BenchOptions::cpu.profile), in
// seconds per token, averaged over the timed tokens: the CPU backend's
// kernels and barrier waits (its calling thread), the rest of its compute
// call (dispatch: work lists, checks, thread hand-offs), and everything
// outside it (the graph built, scheduled and its inputs written, the logits
// read).
struct TokenTime {
  double total = 0, kernels = 0, waits = 0, dispatch = 0, outside = 0;
  double nodes = 0;     // nodes computed per token
  double barriers = 0;  // times the threads met between them, per token
};

struct BenchResult {
  BenchFigure prompt, generation;
  std::string backend;  // what ran: "cpu-avx512", or the device's name then "+ cpu-..."
  size_t packed_bytes = 0;  // weights laid out for generation (Context::pack_for_generation)
  TokenTime token_time;     // with cpu.profile and generation on the CPU only
};

// The per-token breakdown as text lines (empty without a profile).
std::string token_time_text(const TokenTime& t);

BenchResult bench(const Model& model, const BenchOptions& opt);

// One run of `qlens bench` as a table: llama-bench's `-o json|csv` fields
// where they mean the same (model_filename, model_size, model_n_params,
// n_batch, n_threads, n_gpu_layers, n_prompt, n_gen, avg_ts, stddev_ts,
// backends, cpu_info), plus what qlens measures besides (the weights' GB/s,
// the read bandwidth). NaN: not measured (null in JSON, empty in CSV).
struct BenchReport {
  std::string model_path;
  uint64_t model_size = 0;  // bytes of the model's tensors
  int64_t model_n_params = 0;
  std::string backends, cpu_info, device;
  BenchOptions options;
  int n_threads = 0;         // resolved
  double weights_gb_per_token = 0;
  double read_bandwidth_gb_per_s = std::numeric_limits<double>::quiet_NaN();
  BenchResult result;
};
// `-o json`: a bare array with one object per test, as `llama-bench -o json`
// prints it, so that scripts written for llama-bench read it (pandas:
// json_normalize(rows)); pretty, ending in a newline.
std::string bench_json_rows(const BenchReport& report);
// `--json FILE`: qlens's JSON document (docs/JSON.md: header, settings), the
// same objects as bench_json_rows in "results"; pretty, ending in a newline.
std::string bench_json(const BenchReport& report);
// A header line and one row per test, llama-bench's column names first.
std::string bench_csv(const BenchReport& report);

}  // namespace qlens::tools
