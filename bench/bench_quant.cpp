// Quantizer throughput: MB/s of F32 input, one thread, per weight type, with
// and without importance weights (rows of 4096, as in a 1.1B-class model).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "qlens/types.h"

namespace {

using qlens::DType;

constexpr int64_t kRow = 4096;
constexpr int64_t kRows = 64;

void BM_Quantize(benchmark::State& state, DType type, bool with_importance) {
  const qlens::TypeTraits& tt = qlens::type_traits(type);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(kRow * kRows);
  for (float& v : x) v = normal(rng);
  std::vector<float> importance(kRow);
  std::uniform_real_distribution<float> uniform(0.1f, 10.0f);
  for (float& v : importance) v = uniform(rng);
  std::vector<uint8_t> out(qlens::row_bytes(type, kRow) * kRows);
  for (auto _ : state) {
    tt.quantize(x.data(), out.data(), kRows, kRow, with_importance ? importance.data() : nullptr);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.size() * sizeof(float)));
}

void BM_Dequantize(benchmark::State& state, DType type) {
  const qlens::TypeTraits& tt = qlens::type_traits(type);
  std::vector<float> x(kRow * kRows, 0.01f);
  std::vector<uint8_t> q(qlens::row_bytes(type, kRow) * kRows);
  tt.quantize(x.data(), q.data(), kRows, kRow, nullptr);
  for (auto _ : state) {
    tt.to_float(q.data(), x.data(), kRow * kRows);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.size() * sizeof(float)));
}

int register_all() {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::IQ4_NL, DType::Q2_K,
                  DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    const std::string name(qlens::type_name(t));
    if (!qlens::type_traits(t).quantize) continue;
    benchmark::RegisterBenchmark(("Quantize/" + name).c_str(), BM_Quantize, t, false)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("QuantizeImatrix/" + name).c_str(), BM_Quantize, t, true)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("Dequantize/" + name).c_str(), BM_Dequantize, t)->Unit(benchmark::kMicrosecond);
  }
  return 0;
}

const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
