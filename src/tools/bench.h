// Throughput as llama-bench measures it: prompt processing (a batch of n_prompt
// tokens from an empty cache) and generation (n_gen tokens one at a time),
// repeated, reporting mean and standard deviation of tokens per second.
#pragma once

#include <cstdint>

#include "qlens/model.h"

namespace qlens::tools {

struct BenchOptions {
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  int64_t n_batch = 512;
  int repetitions = 3;
  int n_threads = 0;
  std::string device = "cpu";  // see ContextOptions
  int n_gpu_layers = -1;
};

struct BenchFigure {
  double mean = 0, stddev = 0;  // tokens per second
};

struct BenchResult {
  BenchFigure prompt, generation;
  std::string backend;  // what ran: "cpu-avx512", or the device's name then "+ cpu-..."
};

BenchResult bench(const Model& model, const BenchOptions& opt);

}  // namespace qlens::tools
