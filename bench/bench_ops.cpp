// Kernel benchmarks of the CPU backend on the shapes of a 1.1B-parameter llama
// (dim 2048, FFN 5632, 4 KV heads of 64: K/V projections 2048 -> 256).
//
//   bench_ops [--benchmark_filter=MulMat] [--threads=N] [--isa=scalar|avx2|avx512]
//
// The backend's other options come from the QLENS_CPU_* variables, as for the
// qlens tool (cpu_options_from_env): QLENS_CPU_PREFETCH=N, say, measures
// another prefetch distance. Each benchmark computes a one-node graph with the
// CPU backend; counters give
// GFLOP/s (matmul), weight bytes streamed per second (matmul with N = 1) and
// elements per second (the rest).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/delta_net.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/vec.h"
#include "core/host_memory.h"
#include "qlens/backend.h"
#include "qlens/tensor.h"

namespace {

using namespace qlens;

int g_threads = 0;  // 0: one per core
const CpuOptions g_options = cpu_options_from_env();
cpu::Isa g_isa = cpu::isa_for(g_options.isa);

// The backend of --isa and the environment's options; int8 false: with the
// int8 GEMM off (BM_MulMatInt8's F32 panels).
Backend& backend(bool int8 = true) {
  static std::unique_ptr<Backend> b[2];
  if (!b[int8]) {
    CpuOptions o = g_options;
    o.int8_gemm = o.int8_gemm && int8;
    b[int8] = cpu::make_cpu_backend(g_threads, g_isa, o);
  }
  return *b[int8];
}

// 64 rows of k random values in [-1, 1) quantized to `type` (cached).
const std::vector<char>& quantized_tile(DType type, int64_t k) {
  static std::map<std::pair<int, int64_t>, std::vector<char>> cache;
  std::vector<char>& q = cache[{static_cast<int>(type), k}];
  if (q.empty()) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> f(64 * k);
    for (float& v : f) v = u(rng);
    q.resize(row_bytes(type, k) * 64);
    // (The i-quants have only the weighted quantizer.)
    if (const TypeTraits& t = type_traits(type); t.from_float)
      t.from_float(f.data(), q.data(), 64 * k);
    else
      t.quantize(f.data(), q.data(), 64, k, nullptr);
  }
  return q;
}

// A graph with random leaves and planned intermediates.
struct Bench {
  Graph g;
  std::vector<HostMemory> storage;  // (huge pages where large, as weights)
  std::vector<char> buf;
  std::mt19937 rng{42};

  Tensor* leaf(DType type, std::initializer_list<int64_t> ne) {
    Tensor* t = g.new_tensor(type, ne);
    t->data = storage.emplace_back(alloc_host_memory(t->nbytes())).get();
    std::uniform_real_distribution<float> u(-1, 1);
    const int64_t n = t->nelements();
    if (type == DType::F32) {
      for (int64_t i = 0; i < n; ++i) static_cast<float*>(t->data)[i] = u(rng);
    } else if (type == DType::F16) {
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(t->data)[i] = fp32_to_fp16(u(rng));
    } else if (type == DType::BF16) {
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(t->data)[i] = fp32_to_bf16(u(rng));
    } else if (type == DType::I32) {
      for (int64_t i = 0; i < n; ++i) static_cast<int32_t*>(t->data)[i] = static_cast<int32_t>(i);
    } else if (type_traits(type).is_quantized) {
      // Tiles of one quantized random row set (quantizing 192 MiB would take long).
      const std::vector<char>& q = quantized_tile(type, t->ne[0]);
      for (size_t off = 0; off < t->nbytes(); off += q.size())
        std::memcpy(static_cast<char*>(t->data) + off, q.data(), std::min(q.size(), t->nbytes() - off));
    }
    return t;
  }
  void finish(Tensor* out) {
    g.build(out);  // (idempotent)
    const MemoryPlan plan = plan_memory(g);
    buf.assign(plan.size + 64, 0);
    apply_memory_plan(g, plan, buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64);
  }
  void run(benchmark::State& state, bool int8 = true) {
    Backend& be = backend(int8);
    be.compute(g);  // warm up (page faults, packing buffers)
    for (auto _ : state) be.compute(g);
  }
};

void set_labels(benchmark::State& state) {
  state.SetLabel(std::string(cpu::isa_name(g_isa)) + ", " + std::to_string(backend().n_threads()) + " threads");
}

// args: weight type, K, M, N. With N small the weights are streamed once per
// product; so that they come from memory as in a real model (not from a
// 32 MiB L3 cache), the graph then holds enough distinct copies of them to
// exceed 192 MiB and computes one product per copy (counters are totals).
// int8: the backend's int8 GEMM on (BM_MulMatInt8 compares).
void mul_mat_bench(benchmark::State& state, bool int8) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t K = state.range(1), M = state.range(2), N = state.range(3);
  Bench b;
  const size_t weight_bytes = row_bytes(type, K) * M;
  const int64_t copies = N < 16 ? static_cast<int64_t>((192u << 20) / weight_bytes + 1) : 1;
  Tensor* x = b.leaf(DType::F32, {K, N});
  for (int64_t i = 0; i < copies; ++i) {
    Tensor* out = mul_mat(b.g, b.leaf(type, {K, M}), x);
    out->flags |= kFlagOutput;
    b.g.build(out);
  }
  b.finish(b.g.nodes().back());
  b.run(state, int8);
  const double iters = static_cast<double>(state.iterations()) * copies;
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * K * M * N * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes) * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["products"] = static_cast<double>(copies);
  set_labels(state);
}
void BM_MulMat(benchmark::State& state) { mul_mat_bench(state, true); }

void MulMatArgs(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"type", "K", "M", "N"});
  for (DType t : {DType::F32, DType::F16})
    for (int64_t n : {1, 512})
      for (auto [k, m] : {std::pair<int64_t, int64_t>{2048, 2048}, {2048, 5632}, {2048, 256}, {5632, 2048}})
        bm->Args({static_cast<int64_t>(t), k, m, n});
}
BENCHMARK(BM_MulMat)->Apply(MulMatArgs)->UseRealTime()->Unit(benchmark::kMillisecond);

// Small-N matmuls (batched generation, short prompts): where the dot and GEMM
// paths meet.
void MulMatSmallN(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"type", "K", "M", "N"});
  for (int64_t n : {2, 4, 7, 8, 10, 12, 16, 24, 32, 64, 128})
    bm->Args({static_cast<int64_t>(DType::F16), 2048, 2048, n});
}
BENCHMARK(BM_MulMat)->Name("BM_MulMatSmallN")->Apply(MulMatSmallN)->UseRealTime()->Unit(benchmark::kMicrosecond);

constexpr DType kLegacyTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::IQ4_NL};

// The legacy quantized weight types at the 1.1B shapes: N = 1 (GB/s of
// weights) and N = 512 (GFLOP/s).
void MulMatQuantArgs(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"type", "K", "M", "N"});
  for (DType t : kLegacyTypes)
    for (int64_t n : {1, 512})
      for (auto [k, m] : {std::pair<int64_t, int64_t>{2048, 2048}, {2048, 5632}, {5632, 2048}})
        bm->Args({static_cast<int64_t>(t), k, m, n});
}
BENCHMARK(BM_MulMat)->Name("BM_MulMatQuant")->Apply(MulMatQuantArgs)->UseRealTime()->Unit(benchmark::kMillisecond);

// Generation's matrix-vector product (N = 1) on the packable types, the
// weights packed for it (packed = 1, packed.h) or in the GGUF layout (0);
// args type, K, M, packed, cached. GB/s counts the GGUF bytes (the packed
// copies have as many, up to padding). Uncached (0), enough copies of the
// weight to stream 192 MiB from memory; cached (1), one copy read again and
// again from the caches: the kernel's own speed, which tells an
// instruction-bound kernel from a memory-bound one.
void BM_MulMatVec(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t K = state.range(1), M = state.range(2);
  Bench b;
  const size_t weight_bytes = row_bytes(type, K) * M;
  const int64_t copies = state.range(4) != 0 ? 1 : static_cast<int64_t>((192u << 20) / weight_bytes + 1);
  std::vector<const Tensor*> weights;
  Tensor* x = b.leaf(DType::F32, {K, 1});
  for (int64_t i = 0; i < copies; ++i) {
    Tensor* w = b.leaf(type, {K, M});
    weights.push_back(w);
    Tensor* out = mul_mat(b.g, w, x);
    out->flags |= kFlagOutput;
    b.g.build(out);
  }
  // The backend keeps the packed copies (Backend::prepare_weights); they go
  // with the weights, whose addresses a later benchmark may reuse.
  if (state.range(3) != 0) backend().prepare_weights(weights, Op::MulMat);
  b.finish(b.g.nodes().back());
  b.run(state);
  backend().release_weights(weights);
  const double iters = static_cast<double>(state.iterations()) * copies;
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes) * iters / 1e9, benchmark::Counter::kIsRate);
  set_labels(state);
}
void MulMatVecArgs(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"type", "K", "M", "packed", "cached"});
  for (DType t : {DType::F16, DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS,
                  DType::IQ1_S, DType::IQ1_M, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,
                  DType::TQ1_0, DType::TQ2_0, DType::MXFP4, DType::NVFP4, DType::Q1_0, DType::Q2_0})
    for (auto [k, m] : {std::pair<int64_t, int64_t>{2048, 5632}, {5632, 2048}})
      for (int64_t packed : {0, 1})
        for (int64_t cached : {0, 1})
          if (packed == 0 || cpu::packable(t)) bm->Args({static_cast<int64_t>(t), k, m, packed, cached});
}
BENCHMARK(BM_MulMatVec)->Apply(MulMatVecArgs)->UseRealTime()->Unit(benchmark::kMillisecond);

// The two paths for quantized weights, forced (args: type, N, path 0 = dot
// with Q8 activations, 1 = GEMM with dequantized panels) at K = 2048, M = 2048:
// the measurements behind the per-type GEMM thresholds (matmul_avx2.cpp).
void BM_MulMatPath(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t prev = cpu::matmul_set_min_n(type, state.range(4) == 0 ? (int64_t{1} << 40) : 1);
  BM_MulMat(state);
  cpu::matmul_set_min_n(type, prev);
}
void MulMatPathArgs(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"type", "K", "M", "N", "path"});
  for (DType t : kLegacyTypes)
    for (int64_t n : {16, 64, 512})
      for (int64_t path : {0, 1}) bm->Args({static_cast<int64_t>(t), 2048, 2048, n, path});
}
BENCHMARK(BM_MulMatPath)->Apply(MulMatPathArgs)->UseRealTime()->Unit(benchmark::kMillisecond);

// The quantized types with int8 GEMM kernels.
constexpr DType kInt8Types[] = {DType::Q4_0,  DType::Q4_1,   DType::Q5_0,   DType::Q5_1,    DType::Q8_0,   DType::IQ4_NL,
                                DType::Q2_K,  DType::Q3_K,   DType::Q4_K,   DType::Q5_K,    DType::Q6_K,   DType::IQ4_XS,
                                DType::IQ1_S, DType::IQ1_M,  DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,  DType::IQ3_XXS,
                                DType::IQ3_S, DType::TQ1_0,  DType::TQ2_0,  DType::MXFP4,   DType::NVFP4,  DType::Q1_0,
                                DType::Q2_0};

// The GEMM path for quantized weights at N = 512 and the 1.1B shapes, on the
// int8 panels (path 1, where the instruction set has them: VNNI) or on the
// dequantized F32 panels (path 0): args type, K, M, N, path.
void BM_MulMatInt8(benchmark::State& state) { mul_mat_bench(state, state.range(4) != 0); }
void MulMatInt8Args(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"type", "K", "M", "N", "int8"});
  for (DType t : kInt8Types)
    for (auto [k, m] : {std::pair<int64_t, int64_t>{2048, 5632}, {5632, 2048}})
      for (int64_t path : {0, 1}) bm->Args({static_cast<int64_t>(t), k, m, 512, path});
}
BENCHMARK(BM_MulMatInt8)->Apply(MulMatInt8Args)->UseRealTime()->Unit(benchmark::kMillisecond);

// The int8 GEMM's micro-kernel alone, one thread, its panels in the L1/L2
// caches (K elements, one weight panel of nr rows and one activation panel of
// mr rows, packed from quantized random rows): the kernel's own speed in
// multiply-adds per second, apart from packing, memory and threads. Args:
// type, K.
void BM_Int8Micro(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t k = state.range(1);
  const cpu::Int8Gemm& e = cpu::gemm_kernels(cpu::kernel_options(g_options, g_isa)).i8[static_cast<int>(type)];
  if (!e.pack_w) {
    state.SkipWithError("no int8 GEMM kernel for this type and instruction set");
    return;
  }
  const int64_t nu = k / e.unit;
  const std::vector<char>& w = quantized_tile(type, k);
  std::vector<uint8_t> wp(nu * e.w_unit_bytes), xp(nu * e.x_unit_bytes, 0);
  e.pack_w(w.data(), row_bytes(type, k), e.nr, 0, nu, wp.data());
  const DType xt = type_traits(type).vec_dot_type;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> xf(k);
  std::vector<char> xrow(row_bytes(xt, k));
  for (int r = 0; r < e.mr; ++r) {
    for (float& v : xf) v = u(rng);
    type_traits(xt).from_float(xf.data(), xrow.data(), k);
    e.pack_x(xrow.data(), r, nu, xp.data());
  }
  std::vector<float> c(static_cast<size_t>(e.mr) * e.nr);
  for (auto _ : state) {
    e.micro(nu, wp.data(), xp.data(), c.data(), e.nr, false);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(e.mr * e.nr * k) * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
  state.SetLabel(std::string(cpu::isa_name(g_isa)) + ", tile " + std::to_string(e.mr) + " x " + std::to_string(e.nr));
}
void Int8MicroArgs(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"type", "K"});
  for (DType t : kInt8Types) bm->Args({static_cast<int64_t>(t), 2048});
}
BENCHMARK(BM_Int8Micro)->Apply(Int8MicroArgs)->Unit(benchmark::kMicrosecond);

// Where the int8 GEMM path meets the dot path (args type, K, M, N, path: 0
// dot, 1 GEMM), K = 2048, M = 2048: the measurements behind the int8 min_n.
void MulMatInt8SmallN(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"type", "K", "M", "N", "path"});
  for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q6_K})
    for (int64_t n : {4, 8, 12, 16, 24, 32})
      for (int64_t path : {0, 1}) bm->Args({static_cast<int64_t>(t), 2048, 2048, n, path});
}
BENCHMARK(BM_MulMatPath)->Name("BM_MulMatInt8SmallN")->Apply(MulMatInt8SmallN)->UseRealTime()->Unit(benchmark::kMillisecond);

// Attention products of the 1.1B model (32 query heads, 4 KV heads of 64,
// F16 cache): args n_kv, tokens, 0 = scores (K x Q), 1 = values (V x scores).
void BM_Attention(benchmark::State& state) {
  const int64_t kv = state.range(0), n = state.range(1), hd = 64, heads = 32, kv_heads = 4;
  Bench b;
  Tensor* out;
  if (state.range(2) == 0)
    out = mul_mat(b.g, b.leaf(DType::F16, {hd, kv, kv_heads}), b.leaf(DType::F32, {hd, n, heads}));
  else
    out = mul_mat(b.g, b.leaf(DType::F16, {kv, hd, kv_heads}), b.leaf(DType::F32, {kv, n, heads}));
  b.finish(out);
  b.run(state);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kv * n * hd * heads * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
  set_labels(state);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"n_kv", "N", "values"})
    ->Args({512, 1, 0})
    ->Args({512, 1, 1})
    ->Args({512, 512, 0})
    ->Args({512, 512, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// args: row length, rows
void BM_RmsNorm(benchmark::State& state) {
  Bench b;
  Tensor* x = b.leaf(DType::F32, {state.range(0), state.range(1)});
  b.finish(rms_norm(b.g, x, 1e-5f));
  b.run(state);
  state.SetItemsProcessed(state.iterations() * x->nelements());
  set_labels(state);
}
BENCHMARK(BM_RmsNorm)->Args({2048, 1})->Args({2048, 512})->UseRealTime()->Unit(benchmark::kMicrosecond);

// args: n_kv, tokens, heads (attention scores with a causal mask)
void BM_SoftMax(benchmark::State& state) {
  const int64_t kv = state.range(0), n = state.range(1), h = state.range(2);
  Bench b;
  Tensor* x = b.leaf(DType::F32, {kv, n, h});
  Tensor* mask = b.leaf(DType::F32, {kv, n});
  float* m = static_cast<float*>(mask->data);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < kv; ++i) m[j * kv + i] = i > j + (kv - n) ? -INFINITY : 0.0f;
  b.finish(soft_max(b.g, x, mask, 0.125f));
  b.run(state);
  state.SetItemsProcessed(state.iterations() * x->nelements());
  set_labels(state);
}
BENCHMARK(BM_SoftMax)->Args({512, 1, 32})->Args({512, 512, 32})->UseRealTime()->Unit(benchmark::kMicrosecond);

// args: head dim, heads, tokens, mode
void BM_Rope(benchmark::State& state) {
  const int64_t d = state.range(0), h = state.range(1), n = state.range(2);
  Bench b;
  Tensor* x = b.leaf(DType::F32, {d, h, n});
  Tensor* pos = b.leaf(DType::I32, {n});
  b.finish(rope(b.g, x, pos, static_cast<int>(d), static_cast<RopeMode>(state.range(3)), 10000.0f, 1.0f));
  b.run(state);
  state.SetItemsProcessed(state.iterations() * x->nelements());
  set_labels(state);
}
BENCHMARK(BM_Rope)->Args({64, 32, 1, 0})->Args({64, 32, 512, 0})->Args({64, 32, 512, 2})->UseRealTime()->Unit(
    benchmark::kMicrosecond);

// The gated delta rule's two CPU forms, for the token count from which the
// chunked one is faster. args: head size, value heads (key heads: half),
// tokens, per-key gate, form (0 recurrent, 1 chunked). q and k rows of unit
// length, the gate's log-decay in [-0.5, 0), beta in [0, 1): values a
// model's layer sees (no overflow, no subnormals).
void BM_GatedDeltaNet(benchmark::State& state) {
  const int64_t S = state.range(0), H = state.range(1), T = state.range(2);
  const bool per_key = state.range(3) != 0;
  Bench b;
  const auto unit_rows = [](Tensor* t) {
    float* x = static_cast<float*>(t->data);
    for (int64_t r = 0; r < t->nrows(); ++r) {
      float ss = 0;
      for (int64_t i = 0; i < t->ne[0]; ++i) ss += x[r * t->ne[0] + i] * x[r * t->ne[0] + i];
      for (int64_t i = 0; i < t->ne[0]; ++i) x[r * t->ne[0] + i] /= std::sqrt(ss);
    }
    return t;
  };
  const auto map = [](Tensor* t, float lo, float hi) {  // [-1, 1) to [lo, hi)
    float* x = static_cast<float*>(t->data);
    for (int64_t i = 0; i < t->nelements(); ++i) x[i] = lo + (x[i] + 1) / 2 * (hi - lo);
    return t;
  };
  Tensor* q = unit_rows(b.leaf(DType::F32, {S, H / 2, T}));
  Tensor* k = unit_rows(b.leaf(DType::F32, {S, H / 2, T}));
  Tensor* v = b.leaf(DType::F32, {S, H, T});
  Tensor* gate = map(b.leaf(DType::F32, {per_key ? S : 1, H, T}), -0.5f, -1e-4f);
  Tensor* beta = map(b.leaf(DType::F32, {1, H, T}), 0.0f, 1.0f);
  Tensor* s0 = map(b.leaf(DType::F32, {S, S, H}), -0.1f, 0.1f);
  b.finish(gated_delta_net(b.g, q, k, v, gate, beta, s0));
  const cpu::DeltaNetForm saved =
      cpu::delta_net_set_form(state.range(4) ? cpu::DeltaNetForm::Chunked : cpu::DeltaNetForm::Recurrent);
  b.run(state);
  cpu::delta_net_set_form(saved);
  state.SetItemsProcessed(state.iterations() * T);  // tokens
  set_labels(state);
}
void GatedDeltaNetArgs(benchmark::internal::Benchmark* bm) {
  for (int64_t S : {64, 128})
    for (int64_t per_key : {0, 1})
      for (int64_t T : {1, 8, 16, 32, 64, 128, 256, 512})
        for (int64_t form : {0, 1}) bm->Args({S, 32, T, per_key, form});
}
BENCHMARK(BM_GatedDeltaNet)
    ->ArgNames({"S", "H", "T", "per_key", "chunked"})
    ->Apply(GatedDeltaNetArgs)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// args: elements (silu of an FFN activation)
void BM_Silu(benchmark::State& state) {
  Bench b;
  Tensor* x = b.leaf(DType::F32, {5632, state.range(0)});
  b.finish(silu(b.g, x));
  b.run(state);
  state.SetItemsProcessed(state.iterations() * x->nelements());
  set_labels(state);
}
BENCHMARK(BM_Silu)->Arg(1)->Arg(512)->UseRealTime()->Unit(benchmark::kMicrosecond);

// args: elements (gelu of an FFN activation, the size of BM_Silu's)
void BM_Gelu(benchmark::State& state) {
  Bench b;
  Tensor* x = b.leaf(DType::F32, {5632, state.range(0)});
  b.finish(gelu(b.g, x));
  b.run(state);
  state.SetItemsProcessed(state.iterations() * x->nelements());
  set_labels(state);
}
BENCHMARK(BM_Gelu)->Arg(1)->Arg(512)->UseRealTime()->Unit(benchmark::kMicrosecond);

// args: vocabulary size. The normalizer of one token's log-softmax in double
// (tools' log_sum_exp: perplexity, compare, sensitivity), one thread, the
// vector loops of --isa; Gemma 3's vocabulary is 262,144.
void BM_LogSumExp(benchmark::State& state) {
  const cpu::VecOps& v = cpu::vec_ops(g_isa);
  std::vector<float> logits(static_cast<size_t>(state.range(0)));
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 4.0f);
  for (float& x : logits) x = d(rng);
  const auto n = static_cast<int64_t>(logits.size());
  for (auto _ : state) {
    const double m = v.max(n, logits.data());
    benchmark::DoNotOptimize(v.exp_sum_f64(n, logits.data(), m));
  }
  state.SetItemsProcessed(state.iterations() * n);
  set_labels(state);
}
BENCHMARK(BM_LogSumExp)->Arg(32000)->Arg(262144)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  // Our own flags first; the rest goes to Google Benchmark.
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      g_threads = std::atoi(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--isa=", 6) == 0) {
      const std::string v = argv[i] + 6;
      g_isa = v == "scalar" ? cpu::Isa::Scalar : v == "avx512" ? cpu::Isa::Avx512 : cpu::Isa::Avx2;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
