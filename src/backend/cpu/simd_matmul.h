// Matmul kernels written once over a SIMD wrapper V (see simd.h): the GEMM
// micro-kernel and the dot kernels per weight type. Included only by the
// per-instruction-set files; everything has internal linkage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/elem.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/simd.h"
#include "backend/cpu/simd_gemm_int8.h"
#include "backend/cpu/simd_packed.h"
#include "backend/cpu/simd_qdot.h"
#include "backend/cpu/simd_qdot_k.h"
#include "backend/cpu/simd_qdot_scaled.h"
#include "backend/cpu/qdot_levels.h"
#include "qlens/types.h"

namespace qlens::cpu {
namespace {

// One vector of elements from element i of a row of type WT, as floats.
template <class V, DType WT>
typename V::R load_weights(const void* w, int64_t i) {
  if constexpr (WT == DType::F32) {
    return V::load(static_cast<const float*>(w) + i);
  } else if constexpr (WT == DType::F16) {
    return V::load_f16(static_cast<const uint16_t*>(w) + i);
  } else {
    static_assert(WT == DType::BF16);
    return V::load_bf16(static_cast<const uint16_t*>(w) + i);
  }
}

// NC activation rows (x_stride bytes apart, elements of type XT: F32, or
// the weight's own 16-bit type) against one weight row; U independent
// accumulators per row hide the FMA latency. (The main loop's accumulators
// are not touched by the tail loops: GCC then keeps them all in registers.)
// One weight row at a time: several rows at once, each vector of activations
// feeding all, measured slower (bench_ops BM_MulMatVec, F16): the hardware
// prefetcher follows one stream per thread better than four.
template <class V, DType WT, DType XT, int NC, int U = (NC <= 2 ? 4 : 2)>
void dot_rows(int64_t k, const void* w, const char* x, size_t x_stride, float* out) {
  using R = typename V::R;
  constexpr int W = V::W;
  R acc[NC][U];
#pragma GCC unroll 16
  for (int c = 0; c < NC; ++c)
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) acc[c][u] = V::zero();
  const int64_t kmain = k / (U * W) * (U * W);
  for (int64_t i = 0; i < kmain; i += U * W) {
    R wv[U];
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) wv[u] = load_weights<V, WT>(w, i + u * W);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c)
#pragma GCC unroll 16
      for (int u = 0; u < U; ++u)
        acc[c][u] = V::fma(wv[u], load_weights<V, XT>(x + c * x_stride, i + u * W), acc[c][u]);
  }
  R sum[NC];
#pragma GCC unroll 16
  for (int c = 0; c < NC; ++c) {
    sum[c] = acc[c][0];
#pragma GCC unroll 16
    for (int u = 1; u < U; ++u) sum[c] = V::add(sum[c], acc[c][u]);
  }
  int64_t i = kmain;
  for (; i + W <= k; i += W) {
    const R wv = load_weights<V, WT>(w, i);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) sum[c] = V::fma(wv, load_weights<V, XT>(x + c * x_stride, i), sum[c]);
  }
  if (i < k) {  // the last k - i < W elements, zero-padded to one vector (the
               // attention's rows of n_kv elements are often mostly tail)
    constexpr size_t kWBytes = WT == DType::F32 ? 4 : 2, kXBytes = XT == DType::F32 ? 4 : 2;
    const size_t n = static_cast<size_t>(k - i);
    alignas(64) uint8_t wt[W * kWBytes] = {};
    std::memcpy(wt, static_cast<const char*>(w) + i * kWBytes, n * kWBytes);
    const R wv = load_weights<V, WT>(wt, 0);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) {
      alignas(64) uint8_t xt[W * kXBytes] = {};
      std::memcpy(xt, x + c * x_stride + i * kXBytes, n * kXBytes);
      sum[c] = V::fma(wv, load_weights<V, XT>(xt, 0), sum[c]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < NC; ++c) out[c] = V::hsum(sum[c]);
}

template <class V, DType WT, DType XT = DType::F32>
void vec_dot(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  const auto* xb = static_cast<const char*>(x);
  with_row_count(nc, [&]<int NC>() { dot_rows<V, WT, XT, NC>(k, w, xb, x_stride, out); });
}

// Several weight rows (w_stride apart) against one activation row stored in
// the weights' own 16-bit type: the attention's products in generation,
// where rows of a head's length (64-256) made the call per row cost as much
// as its arithmetic. The dot product is symmetric, so dot_rows runs with the
// activation row as its "weight" and the weight rows as its rows; with U = 4
// accumulators per row, as dot_rows<V, T, T, 1> uses, each row's sum is
// taken in the same order: the same bits as row by row.
template <class V, DType T>
void dot_weight_rows(int64_t k, const void* w, size_t w_stride, const void* x, int nr, float* out) {
  static_assert(T == DType::F16 || T == DType::BF16);
  // Four rows' 16 accumulators fit AVX-512's 32 registers; AVX2's 16 take two.
  constexpr int kMaxRows = V::W >= 16 ? 4 : 2;
  const char* rows = static_cast<const char*>(w);
  for (int r = 0; r < nr; r += kMaxRows) {
    const int n = std::min(kMaxRows, nr - r);
    const char* first = rows + r * w_stride;
    switch (n) {
      case 1: dot_rows<V, T, T, 1, 4>(k, x, first, w_stride, out + r); break;
      case 2: dot_rows<V, T, T, 2, 4>(k, x, first, w_stride, out + r); break;
      case 3: if constexpr (kMaxRows >= 3) dot_rows<V, T, T, 3, 4>(k, x, first, w_stride, out + r); break;
      default: if constexpr (kMaxRows >= 4) dot_rows<V, T, T, 4, 4>(k, x, first, w_stride, out + r); break;
    }
  }
}

// The GEMM micro-kernel: kMr x (kNv * W) accumulators held in registers.
template <class V>
void micro_kernel(int64_t kc, const float* wp, const float* bp, float* c, int64_t ldc, bool accumulate) {
  using R = typename V::R;
  constexpr int MR = V::kMr;
  constexpr int NV = V::kNv;
  constexpr int W = V::W;
  R acc[MR][NV];
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V::zero();
  for (int64_t k = 0; k < kc; ++k) {
    R w[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) w[v] = V::load(wp + v * W);
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
      const R b = V::set1(bp[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(w[v], b, acc[r][v]);
    }
    wp += NV * W;
    bp += MR;
  }
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + v * W;
      V::store(p, accumulate ? V::add(V::load(p), acc[r][v]) : acc[r][v]);
    }
}

// Weight panels: 8 rows x 8 elements at a time, converted and transposed in
// AVX2 registers (the AVX-512 files are compiled with AVX2 too), stored as
// 8-float pieces of the panel's rows.
template <DType WT, int NR>
void pack_panel(const char* row0, size_t row_stride, int64_t nrows, int64_t k0, int64_t kc, float* panel) {
  static_assert(NR % 8 == 0);
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
#pragma GCC unroll 4
    for (int g = 0; g < NR / 8; ++g) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        const int64_t i = g * 8 + t;
        r[t] = i < nrows ? load_weights<Avx2, WT>(row0 + i * row_stride, k0 + k) : _mm256_setzero_ps();
      }
      Avx2::transpose8(r);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) _mm256_storeu_ps(panel + (k + t) * NR + g * 8, r[t]);
    }
  }
  for (; k < kc; ++k)
    for (int64_t i = 0; i < NR; ++i)
      panel[k * NR + i] = i < nrows ? weight_at<WT>(row0 + i * row_stride, k0 + k) : 0.0f;
}

// Activation panels: groups of 8 rows x 8 elements transposed in AVX2
// registers; each k gets the group's 8 values, or the last group's MR % 8,
// with plain stores (a masked store measured slow on AMD Zen 4: with MR = 12
// it made this packing 5% of a prompt's time on a quantized model, whose
// F32 products are only the attention's).
// kRoundF16: each value rounded through F16 on the way (the F16 cache's
// attention products, whose activations ggml converts to F16), in registers:
// a separate rounding pass over the rows cost as much as the products.
template <int MR, bool kRoundF16 = false>
void pack_act_panel(const char* row0, size_t row_stride, int64_t nrows, int64_t k0, int64_t kc, float* panel) {
  constexpr int G = (MR + 7) / 8;
  auto value = [&](int64_t i, int64_t k) {
    const float v = reinterpret_cast<const float*>(row0 + i * row_stride)[k0 + k];
    return kRoundF16 ? fp16_to_fp32(fp32_to_fp16(v)) : v;
  };
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      constexpr int kLast = MR - 8 * (G - 1);  // rows in the last group
      const int width = g + 1 < G ? 8 : kLast;
      __m256 r[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        const int64_t i = g * 8 + t;
        r[t] = i < nrows && t < width
                   ? _mm256_loadu_ps(reinterpret_cast<const float*>(row0 + i * row_stride) + k0 + k)
                   : _mm256_setzero_ps();
        if constexpr (kRoundF16) r[t] = _mm256_cvtph_ps(_mm256_cvtps_ph(r[t], _MM_FROUND_TO_NEAREST_INT));
      }
      Avx2::transpose8(r);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        float* dst = panel + (k + t) * MR + g * 8;
        if (width == 8) {
          _mm256_storeu_ps(dst, r[t]);
        } else {
          alignas(32) float lanes[8];
          _mm256_store_ps(lanes, r[t]);
          std::memcpy(dst, lanes, kLast * sizeof(float));
        }
      }
    }
  }
  for (; k < kc; ++k)
    for (int64_t i = 0; i < MR; ++i) panel[k * MR + i] = i < nrows ? value(i, k) : 0.0f;
}

// R: how the grids of the 3-bit and 1-bit i-quants are read (KernelOptions::grid_gathers).
template <class V, GridRead R>
GemmKernels make_gemm_kernels(bool allow_vnni) {
  static_assert(V::kMr <= kMaxMr);
  GemmKernels g{};
  g.micro = micro_kernel<V>;
  g.mr = V::kMr;
  g.nr = V::kNv * V::W;
  g.kc = 256;
  g.mc = 8 * g.nr;
  g.nc = kMaxPanelsPerBlock * V::kMr;
  g.min_n = 2 * V::kMr;  // measured crossover with the dot path (AVX2: N = 10..12)
  g.dot[static_cast<int>(DType::F32)] = vec_dot<V, DType::F32>;
  g.dot[static_cast<int>(DType::F16)] = vec_dot<V, DType::F16>;
  g.dot[static_cast<int>(DType::BF16)] = vec_dot<V, DType::BF16>;
  g.dot_same_x[static_cast<int>(DType::F16)] = vec_dot<V, DType::F16, DType::F16>;
  g.dot_same_x[static_cast<int>(DType::BF16)] = vec_dot<V, DType::BF16, DType::BF16>;
  g.dot_rows_same_x[static_cast<int>(DType::F16)] = dot_weight_rows<V, DType::F16>;
  g.dot_rows_same_x[static_cast<int>(DType::BF16)] = dot_weight_rows<V, DType::BF16>;
  constexpr int NR = V::kNv * V::W;
  g.pack[static_cast<int>(DType::F32)] = pack_panel<DType::F32, NR>;
  g.pack[static_cast<int>(DType::F16)] = pack_panel<DType::F16, NR>;
  g.pack[static_cast<int>(DType::BF16)] = pack_panel<DType::BF16, NR>;
  g.pack_act = pack_act_panel<V::kMr>;
  g.pack_act_f16 = pack_act_panel<V::kMr, true>;
  add_quant_kernels<NR>(g);
  add_kquant_kernels<NR>(g);
  // The i-quants and ternary types through the K kernels (their
  // super-blocks: simd_qdot_levels.h); FP4, Q1_0 and Q2_0: simd_qdot_scaled.h.
  for_each_level_qtype([&]<DType T>() {
    g.dot[static_cast<int>(T)] = qdot_k_simd<T, grid_read<T, R>>;
    g.pack[static_cast<int>(T)] = pack_k_panel<T, NR>;
  });
  for_each_scaled_qtype([&]<DType T>() { g.dot[static_cast<int>(T)] = qdot_scaled_simd<T>; });
  add_int8_kernels<R>(g, allow_vnni);
  add_packed_kernels(g, allow_vnni);
  return g;
}

}  // namespace
}  // namespace qlens::cpu
