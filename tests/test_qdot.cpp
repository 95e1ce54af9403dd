// Tests of the quantized matmul kernels of the CPU backend (qdot.h,
// simd_qdot.h): legacy weight types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL
// dotted with Q8_0 / Q8_1 activations, and their GEMM weight-panel packing.
//
//  - Dot kernels (scalar and every SIMD instruction set this machine has)
//    against a double-precision value of the quantized product computed from
//    the dequantized weight and activation rows (to_float of both types):
//      ref = sum_j w_j x_j + sum_b m_b (s_b - dx_b sum_j q_bj)
//    (the second sum is 0 for the types without offset; for Q4_1 / Q5_1 it is
//    the difference between the stored s and the sum of the dequantized
//    activations, which ggml's math uses). Bound, per output:
//      |got - ref| <= (nb + 8) * 2^-23 * S,
//      S = sum_j |w_j| |x_j| + sum_b |m_b| (sum_j |x_bj| + |s_b|),
//    nb = K / 32: one rounding per block term (scale product, product, sum)
//    in at most nb sequential additions, plus the final reductions. Blocks are
//    random bytes with random, extreme (+-65504), subnormal and zero scales,
//    and blocks of all-max / all-min codes; activations from the Q8
//    quantizers and raw (codes in [-127, 127], which is what the quantizers
//    produce). K = 32 .. 8192, nc = 1..4, several x strides and unaligned rows.
//    Each row of an nc > 1 call equals the nc = 1 call bit for bit, and so
//    does each row of the row kernels (dot_rows: up to 4 weight rows, one
//    activation row; the dot path at N = 1).
//  - Packing: every SIMD PackFn equals the panel built from to_float rows,
//    bit for bit.
//  - mul_mat end to end on the CPU backend (1, 2, 3 threads; bitwise equal):
//    on the dot path against the double-precision quantized product above
//    (activations quantized with the Q8 reference quantizer); on the GEMM
//    path, which rounds activations through the same quantizer, against the
//    dequantized weights times the dequantized activations with test_ops'
//    bound 1e-5 * sum |w||x|.
//    Odd N (1, 5, 13, 64, 100), K = 32, 96, 4096, and GQA-style broadcast.
//    The int8 GEMM path (VNNI; gemm_int8.h), whose integer sums are the dot
//    kernels', against the quantized product within the dot kernels' bound;
//    N >= 64 must take it where it exists. Where the CPU has VNNI, every
//    product runs again on a backend made without it (CpuOptions::vnni off:
//    the kernels of a CPU without VNNI).
//  - The K types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS; QdotK.*) and the
//    level types (IQ1_S .. IQ3_S, TQ1_0, TQ2_0) with Q8_K activations: the same three checks, the dot bound being (nb + 8) * 2^-23
//    * S with nb = K / 256 and S = sum_e |x_e| (|w_e| + 2 |dmin m_j|) (see
//    ref_dot_k); K = 256 .. 8192, mul_mat with N = 1, 5 (dot) and 13, 64, 100
//    (GEMM), K = 256, 768, 4096.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/packed.h"
#include "qlens/backend.h"
#include "qlens/tensor.h"
#include "qlens/types.h"
#include "quant/iquants.h"
#include "quant/kquants.h"
#include "quant/legacy.h"
#include "quant/lowbit.h"
#include "test_util.h"

namespace qlens {
namespace {

using cpu::Isa;

constexpr DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::IQ4_NL};
// The types of integer levels times float scales, also with Q8_0 activations
// (blocks of 128, 64, 32 and 64; simd_qdot_scaled.h).
constexpr DType kScaledTypes[] = {DType::Q1_0, DType::Q2_0, DType::MXFP4, DType::NVFP4};

std::string name_of(DType t) { return std::string(type_name(t)); }

bool has_offset(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (cpu::isa_supported(isa)) v.push_back(isa);
  return v;
}

// Every kernel set this machine has: each instruction set, and where the CPU
// has VNNI for it, that set again without (CpuOptions::vnni off: the int8
// GEMM's and the packed kernels' maddubs wrappers on AVX2, the F32 panels on
// AVX-512), so one run tests the kernels of a CPU without VNNI too. The
// second set of an instruction set also reads the 3-bit and 1-bit grids the other way
// (CpuOptions::grid_gathers: gathers or loads, whichever this CPU's default
// is not); without VNNI it is a set of its own.
struct KernelSet {
  Isa isa;
  bool vnni;
  bool gathers;
  std::string name() const {
    return std::string(cpu::isa_name(isa)) + (vnni ? "" : " no-vnni") + (gathers ? " gathers" : "");
  }
  cpu::KernelOptions options() const {
    CpuOptions o;
    o.vnni = vnni;
    o.grid_gathers = gathers;
    return cpu::kernel_options(o, isa);
  }
};
std::vector<KernelSet> kernel_sets() {
  std::vector<KernelSet> v;
  const bool fast = cpu::cpu_has_fast_gathers();
  for (Isa isa : isas()) {
    if (isa == Isa::Scalar) {
      v.push_back({isa, true, false});
      continue;
    }
    v.push_back({isa, true, fast});
    v.push_back({isa, !cpu::cpu_has_vnni(isa), !fast});
  }
  return v;
}

uint16_t load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// A finite fp16 scale: mostly ordinary, sometimes +-65504, subnormal or 0.
uint16_t random_scale(std::mt19937& rng) {
  const int kind = static_cast<int>(rng() % 20);
  const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
  if (kind == 0) return sign | 0x7bff;                           // 65504
  if (kind == 1) return sign | static_cast<uint16_t>(1 + rng() % 0x3ff);  // subnormal
  if (kind == 2) return 0;
  std::normal_distribution<float> n(0.0f, 1.0f);
  return fp32_to_fp16(n(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 15) - 10));
}

// K / block random weight blocks of type t (random codes, all-max or all-min
// codes). The scales: fp16 (random_scale) at the start of the block; MXFP4's
// E8M0 exponent mostly 2^-28 .. 2^22, sometimes subnormal; NVFP4's 4 UE4M3
// bytes random (every one is finite).
std::vector<uint8_t> random_weights(std::mt19937& rng, DType t, int64_t K) {
  const size_t bb = type_traits(t).block_bytes;
  std::vector<uint8_t> w(row_bytes(t, K));
  for (int64_t b = 0; b < K / type_traits(t).block_size; ++b) {
    uint8_t* p = w.data() + b * bb;
    const int pattern = static_cast<int>(rng() % 8);
    for (size_t i = 0; i < bb; ++i)
      p[i] = pattern == 0 ? 0xff : pattern == 1 ? (t == DType::Q8_0 ? 0x80 : 0x00) : static_cast<uint8_t>(rng());
    if (t == DType::MXFP4) {
      p[0] = static_cast<uint8_t>(rng() % 10 == 0 ? rng() % 2 : 100 + rng() % 51);
    } else if (t != DType::NVFP4) {
      store16(p, random_scale(rng));
    }
    if (has_offset(t)) store16(p + 2, random_scale(rng));
  }
  return w;
}

// K / 32 activation blocks of type xt (Q8_0 or Q8_1): half from the reference
// quantizer, half raw (codes in [-127, 127], some all +-127).
std::vector<uint8_t> random_acts(std::mt19937& rng, DType xt, int64_t K) {
  std::vector<uint8_t> x(row_bytes(xt, K));
  const size_t bb = type_traits(xt).block_bytes;
  const size_t qs = xt == DType::Q8_1 ? 4 : 2;
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t b = 0; b < K / 32; ++b) {
    uint8_t* p = x.data() + b * bb;
    if (rng() % 2) {
      float f[32];
      const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
      for (float& v : f) v = n(rng) * scale;
      type_traits(xt).from_float(f, p, 32);
      continue;
    }
    const int pattern = static_cast<int>(rng() % 6);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = pattern == 0 ? 127 : pattern == 1 ? -127 : static_cast<int>(rng() % 255) - 127;
      p[qs + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
      sum += q;
    }
    const uint16_t d = random_scale(rng);
    store16(p, d);
    if (xt == DType::Q8_1) {
      const float s = std::clamp(fp16_to_fp32(d) * static_cast<float>(sum), -65504.0f, 65504.0f);
      store16(p + 2, rng() % 4 ? fp32_to_fp16(s) : random_scale(rng));
    }
  }
  return x;
}

std::vector<float> dequantize(DType t, const uint8_t* p, int64_t K) {
  std::vector<float> f(K);
  type_traits(t).to_float(p, f.data(), K);
  return f;
}

struct RefDot {
  double value, bound;
};

// The double-precision quantized product of a weight row and an activation row
// and its error bound (see the top of the file).
RefDot ref_dot(DType t, const uint8_t* w, const uint8_t* x, int64_t K) {
  const DType xt = type_traits(t).vec_dot_type;
  const std::vector<float> wf = dequantize(t, w, K), xf = dequantize(xt, x, K);
  const size_t wb = type_traits(t).block_bytes, xb = type_traits(xt).block_bytes;
  double v = 0, s = 0;
  for (int64_t j = 0; j < K; ++j) {
    v += static_cast<double>(wf[j]) * xf[j];
    s += std::fabs(static_cast<double>(wf[j]) * xf[j]);
  }
  const int64_t nb = K / 32;
  if (has_offset(t)) {
    for (int64_t b = 0; b < nb; ++b) {
      const double m = fp16_to_fp32(load16(w + b * wb + 2));
      const double sx = fp16_to_fp32(load16(x + b * xb + 2));
      double sum_x = 0, abs_x = 0;
      for (int j = 0; j < 32; ++j) {
        sum_x += xf[b * 32 + j];
        abs_x += std::fabs(xf[b * 32 + j]);
      }
      v += m * (sx - sum_x);
      s += std::fabs(m) * (abs_x + std::fabs(sx));
    }
  }
  return {v, static_cast<double>(nb + 8) * std::ldexp(1.0, -23) * s + 1e-30};
}

// ---- dot kernels ----------------------------------------------------------------------

TEST(Qdot, DotKernelsMatchDoubleReference) {
  std::mt19937 rng(7);
  double worst = 0;
  std::vector<DType> types(std::begin(kTypes), std::end(kTypes));
  types.insert(types.end(), std::begin(kScaledTypes), std::end(kScaledTypes));
  for (DType t : types) {
    const DType xt = type_traits(t).vec_dot_type;
    for (int64_t K : {32, 64, 96, 160, 256, 384, 1024, 4096, 8192}) {
      if (K % type_traits(t).block_size != 0) continue;
      const size_t xrow = row_bytes(xt, K);
      for (size_t pad : {size_t{0}, size_t{1}, size_t{34}, size_t{101}}) {
        const std::vector<uint8_t> wrow = random_weights(rng, t, K);
        // The weight row at an odd address too.
        std::vector<uint8_t> wbuf(wrow.size() + 1);
        std::memcpy(wbuf.data() + (pad & 1), wrow.data(), wrow.size());
        const uint8_t* w = wbuf.data() + (pad & 1);
        const size_t stride = xrow + pad;
        std::vector<uint8_t> xs(4 * stride);
        for (int c = 0; c < 4; ++c) {
          const std::vector<uint8_t> x = random_acts(rng, xt, K);
          std::memcpy(xs.data() + c * stride, x.data(), xrow);
        }
        RefDot ref[4];
        for (int c = 0; c < 4; ++c) ref[c] = ref_dot(t, w, xs.data() + c * stride, K);
        for (const KernelSet& ks : kernel_sets()) {
          const cpu::VecDotFn dot = cpu::gemm_kernels(ks.options()).dot[static_cast<int>(t)];
          ASSERT_NE(dot, nullptr) << name_of(t) << " " << ks.name();
          SCOPED_TRACE(name_of(t) + " " + ks.name() + " K=" + std::to_string(K) +
                       " pad=" + std::to_string(pad));
          float single[4];
          for (int c = 0; c < 4; ++c) dot(K, w, xs.data() + c * stride, stride, 1, &single[c]);
          for (int c = 0; c < 4; ++c) {
            const double err = std::fabs(single[c] - ref[c].value);
            EXPECT_LE(err, ref[c].bound) << "row " << c << " got " << single[c] << " want " << ref[c].value;
            worst = std::max(worst, err / ref[c].bound);
          }
          for (int nc = 2; nc <= 4; ++nc) {
            float out[4];
            dot(K, w, xs.data(), stride, nc, out);
            for (int c = 0; c < nc; ++c)
              EXPECT_EQ(std::memcmp(&out[c], &single[c], sizeof(float)), 0) << "nc=" << nc << " row " << c;
          }
        }
      }
    }
  }
  std::printf("worst error / bound: %.6g\n", worst);
}

// The row kernels (several weight rows, one activation row: the dot path at
// N = 1) equal the dot kernel with nc = 1 on each row bit for bit, which the
// test above checks against the reference. Rows at odd strides and addresses,
// every nr, odd K / 32.
TEST(Qdot, RowKernelsEqualDotKernels) {
  std::mt19937 rng(13);
  for (DType t : kTypes) {
    const DType xt = type_traits(t).vec_dot_type;
    for (int64_t K : {32, 96, 160, 2048, 4128}) {
      const size_t wrow = row_bytes(t, K);
      for (size_t pad : {size_t{0}, size_t{1}, size_t{7}}) {
        const size_t stride = wrow + pad;
        std::vector<uint8_t> ws(4 * stride + 1);
        uint8_t* w = ws.data() + (pad & 1);
        for (int r = 0; r < 4; ++r) {
          const std::vector<uint8_t> row = random_weights(rng, t, K);
          std::memcpy(w + r * stride, row.data(), wrow);
        }
        const std::vector<uint8_t> x0 = random_acts(rng, xt, K);
        std::vector<uint8_t> xbuf(x0.size() + 1);
        uint8_t* x = xbuf.data() + (pad & 1);
        std::memcpy(x, x0.data(), x0.size());
        for (Isa isa : isas()) {
          const cpu::GemmKernels& gk = cpu::gemm_kernels(isa);
          const cpu::VecDotRowsFn rows = gk.dot_rows[static_cast<int>(t)];
          if (!rows) continue;
          SCOPED_TRACE(name_of(t) + " " + cpu::isa_name(isa) + " K=" + std::to_string(K) +
                       " pad=" + std::to_string(pad));
          float single[4];
          for (int r = 0; r < 4; ++r) gk.dot[static_cast<int>(t)](K, w + r * stride, x, 0, 1, &single[r]);
          for (int nr = 1; nr <= 4; ++nr) {
            float out[4];
            rows(K, w, stride, x, nr, out);
            for (int r = 0; r < nr; ++r)
              EXPECT_EQ(std::memcmp(&out[r], &single[r], sizeof(float)), 0)
                  << "nr=" << nr << " row " << r << " got " << out[r] << " want " << single[r];
          }
        }
      }
    }
  }
}

// The same for F16 and BF16 weights against an activation row of their own
// type (the attention's products in generation): several rows per call give
// each row the bits of the single-row kernel. Head-sized rows, and rows with
// a tail shorter than a vector.
TEST(Qdot, SameTypeRowKernelsEqualDotKernels) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (DType t : {DType::F16, DType::BF16}) {
    const TypeTraits& tt = type_traits(t);
    for (int64_t K : {1, 15, 64, 100, 128, 256, 1000}) {
      const size_t wrow = row_bytes(t, K), stride = wrow + 6;  // rows not packed back to back
      std::vector<float> f(4 * K), xf(K);
      for (float& v : f) v = nd(rng);
      for (float& v : xf) v = nd(rng);
      std::vector<uint8_t> w(4 * stride), x(wrow);
      for (int r = 0; r < 4; ++r) tt.from_float(f.data() + r * K, w.data() + r * stride, K);
      tt.from_float(xf.data(), x.data(), K);
      for (Isa isa : isas()) {
        const cpu::GemmKernels& gk = cpu::gemm_kernels(isa);
        const cpu::VecDotRowsFn rows = gk.dot_rows_same_x[static_cast<int>(t)];
        if (!rows) continue;
        SCOPED_TRACE(name_of(t) + " " + cpu::isa_name(isa) + " K=" + std::to_string(K));
        float single[4];
        for (int r = 0; r < 4; ++r) gk.dot_same_x[static_cast<int>(t)](K, w.data() + r * stride, x.data(), 0, 1, &single[r]);
        for (int nr = 1; nr <= 4; ++nr) {
          float out[4];
          rows(K, w.data(), stride, x.data(), nr, out);
          for (int r = 0; r < nr; ++r)
            EXPECT_EQ(std::memcmp(&out[r], &single[r], sizeof(float)), 0)
                << "nr=" << nr << " row " << r << " got " << out[r] << " want " << single[r];
        }
      }
    }
  }
}

// ---- K types: dot kernels ---------------------------------------------------------------

// With them, the level types (the i-quants and ternary types, whose kernels
// are the K ones: simd_qdot_levels.h).
constexpr DType kKTypes[] = {DType::Q2_K,   DType::Q3_K,   DType::Q4_K,    DType::Q5_K,    DType::Q6_K,
                             DType::IQ4_XS, DType::IQ1_S,  DType::IQ1_M,   DType::IQ2_XXS, DType::IQ2_XS,
                             DType::IQ2_S,  DType::IQ3_XXS, DType::IQ3_S,  DType::TQ1_0,   DType::TQ2_0};
constexpr int64_t kQK = quant::kq::kQK;

// Byte offsets of a K block's fp16 d and dmin (-1: none), and the byte ranges
// of its codes (zeroed to read the mins back through to_float).
struct KLayout {
  int d, dmin;
  std::vector<std::pair<size_t, size_t>> codes;  // offset, length
};
KLayout k_layout(DType t) {
  using namespace quant::kq;
  switch (t) {
    case DType::Q2_K: return {offsetof(BlockQ2K, d), offsetof(BlockQ2K, dmin), {{offsetof(BlockQ2K, qs), 64}}};
    case DType::Q3_K: return {offsetof(BlockQ3K, d), -1, {}};
    case DType::Q4_K: return {offsetof(BlockQ4K, d), offsetof(BlockQ4K, dmin), {{offsetof(BlockQ4K, qs), 128}}};
    case DType::Q5_K:
      return {offsetof(BlockQ5K, d), offsetof(BlockQ5K, dmin), {{offsetof(BlockQ5K, qs), 128}, {offsetof(BlockQ5K, qh), 32}}};
    case DType::Q6_K: return {offsetof(BlockQ6K, d), -1, {}};
    case DType::IQ4_XS: return {offsetof(BlockIQ4XS, d), -1, {}};
    case DType::IQ1_M: return {-1, -1, {}};  // its scale: the top nibbles of its 4 scale words (set_k_scale)
    case DType::TQ1_0: return {offsetof(quant::lowbit::BlockTQ1_0, d), -1, {}};
    case DType::TQ2_0: return {offsetof(quant::lowbit::BlockTQ2_0, d), -1, {}};
    default: return {0, -1, {}};  // the other i-quants: d first
  }
}

// Stores the fp16 super-block scale h of a block of type t.
void set_k_scale(DType t, uint8_t* blk, uint16_t h) {
  if (t == DType::IQ1_M) {
    uint8_t* words = blk + offsetof(quant::iq::BlockIQ1M, scales);
    for (int i = 0; i < 4; ++i) {
      uint16_t w;
      std::memcpy(&w, words + 2 * i, 2);
      w = static_cast<uint16_t>((w & 0x0fff) | ((h >> (4 * i)) & 0xf) << 12);
      std::memcpy(words + 2 * i, &w, 2);
    }
    return;
  }
  store16(blk + k_layout(t).d, h);
}

// K / 256 random super-blocks of type t: random bytes, all 0x00 or all 0xff
// (all-min / all-max codes, scales and mins), with random and extreme fp16
// scales.
std::vector<uint8_t> random_k_weights(std::mt19937& rng, DType t, int64_t K) {
  const size_t bb = type_traits(t).block_bytes;
  const KLayout l = k_layout(t);
  std::vector<uint8_t> w(row_bytes(t, K));
  for (int64_t b = 0; b < K / kQK; ++b) {
    uint8_t* p = w.data() + b * bb;
    const int pattern = static_cast<int>(rng() % 8);
    for (size_t i = 0; i < bb; ++i) p[i] = pattern == 0 ? 0xff : pattern == 1 ? 0x00 : static_cast<uint8_t>(rng());
    set_k_scale(t, p, random_scale(rng));
    if (l.dmin >= 0) store16(p + l.dmin, random_scale(rng));
  }
  return w;
}

// K / 256 Q8_K blocks: half from the quantizer, half raw (codes in
// [-127, 127], some all +-127, consistent bsums, random float d).
std::vector<uint8_t> random_q8k(std::mt19937& rng, int64_t K) {
  using quant::kq::BlockQ8K;
  std::vector<uint8_t> x(row_bytes(DType::Q8_K, K));
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t b = 0; b < K / kQK; ++b) {
    uint8_t* p = x.data() + b * sizeof(BlockQ8K);
    if (rng() % 2) {
      float f[kQK];
      const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
      for (float& v : f) v = n(rng) * scale;
      type_traits(DType::Q8_K).from_float(f, p, kQK);
      continue;
    }
    BlockQ8K blk{};
    const int pattern = static_cast<int>(rng() % 6);
    for (int j = 0; j < kQK; ++j) {
      blk.qs[j] = static_cast<int8_t>(pattern == 0 ? 127 : pattern == 1 ? -127 : static_cast<int>(rng() % 255) - 127);
      blk.bsums[j / 16] = static_cast<int16_t>(blk.bsums[j / 16] + blk.qs[j]);
    }
    blk.d = fp16_to_fp32(random_scale(rng));
    std::memcpy(p, &blk, sizeof blk);
  }
  return x;
}

// The double-precision product of the dequantized K weight row and Q8_K row,
// and its bound:
//   |got - ref| <= (nb + 8) * 2^-23 * S,  S = sum_e |x_e| (|w_e| + 2 |ml_e|),
// nb = K / 256, ml_e = dmin * m_j of e's sub-block (0 for the types without
// mins; read as -to_float of the block with its codes zeroed). |w_e| + |ml_e|
// bounds d * s_j * |level_e|, so S bounds every integer term a kernel
// converts and scales; each super-block term carries a few roundings (the
// scale products, the int -> float conversions, its addition), the reference's
// dequantization one or two per element, plus the final reductions.
RefDot ref_dot_k(DType t, const uint8_t* w_any, const uint8_t* x_any, int64_t K) {
  // to_float reads whole blocks, which need their natural alignment: dequantize
  // aligned copies (only the kernels under test get the odd addresses).
  const std::vector<uint8_t> w(w_any, w_any + row_bytes(t, K));
  const std::vector<uint8_t> x(x_any, x_any + row_bytes(DType::Q8_K, K));
  const std::vector<float> wf = dequantize(t, w.data(), K), xf = dequantize(DType::Q8_K, x.data(), K);
  const KLayout l = k_layout(t);
  std::vector<uint8_t> zeroed(w);
  const size_t bb = type_traits(t).block_bytes;
  for (int64_t b = 0; b < K / kQK; ++b)
    for (auto [off, len] : l.codes) std::memset(zeroed.data() + b * bb + off, 0, len);
  const std::vector<float> ml = dequantize(t, zeroed.data(), K);
  double v = 0, s = 0;
  for (int64_t e = 0; e < K; ++e) {
    v += static_cast<double>(wf[e]) * xf[e];
    const double m = l.codes.empty() ? 0.0 : std::fabs(static_cast<double>(ml[e]));
    s += std::fabs(static_cast<double>(xf[e])) * (std::fabs(static_cast<double>(wf[e])) + 2 * m);
  }
  return {v, static_cast<double>(K / kQK + 8) * std::ldexp(1.0, -23) * s + 1e-30};
}

TEST(QdotK, DotKernelsMatchDoubleReference) {
  std::mt19937 rng(17);
  double worst = 0;
  for (DType t : kKTypes) {
    ASSERT_EQ(type_traits(t).vec_dot_type, DType::Q8_K) << name_of(t);
    for (int64_t K : {256, 512, 768, 1280, 4096, 8192}) {
      const size_t xrow = row_bytes(DType::Q8_K, K);
      for (size_t pad : {size_t{0}, size_t{1}, size_t{34}, size_t{101}}) {
        const std::vector<uint8_t> wrow = random_k_weights(rng, t, K);
        std::vector<uint8_t> wbuf(wrow.size() + 1);  // the weight row at an odd address too
        std::memcpy(wbuf.data() + (pad & 1), wrow.data(), wrow.size());
        const uint8_t* w = wbuf.data() + (pad & 1);
        const size_t stride = xrow + pad;
        std::vector<uint8_t> xs(4 * stride + 1);
        uint8_t* x0 = xs.data() + (pad & 1);
        for (int c = 0; c < 4; ++c) {
          const std::vector<uint8_t> x = random_q8k(rng, K);
          std::memcpy(x0 + c * stride, x.data(), xrow);
        }
        RefDot ref[4];
        for (int c = 0; c < 4; ++c) ref[c] = ref_dot_k(t, w, x0 + c * stride, K);
        for (const KernelSet& ks : kernel_sets()) {
          const cpu::VecDotFn dot = cpu::gemm_kernels(ks.options()).dot[static_cast<int>(t)];
          ASSERT_NE(dot, nullptr) << name_of(t) << " " << ks.name();
          SCOPED_TRACE(name_of(t) + " " + ks.name() + " K=" + std::to_string(K) +
                       " pad=" + std::to_string(pad));
          float single[4];
          for (int c = 0; c < 4; ++c) dot(K, w, x0 + c * stride, stride, 1, &single[c]);
          for (int c = 0; c < 4; ++c) {
            const double err = std::fabs(single[c] - ref[c].value);
            EXPECT_LE(err, ref[c].bound) << "row " << c << " got " << single[c] << " want " << ref[c].value;
            worst = std::max(worst, err / ref[c].bound);
          }
          for (int nc = 2; nc <= 4; ++nc) {
            float out[4];
            dot(K, w, x0, stride, nc, out);
            for (int c = 0; c < nc; ++c)
              EXPECT_EQ(std::memcmp(&out[c], &single[c], sizeof(float)), 0) << "nc=" << nc << " row " << c;
          }
        }
      }
    }
  }
  std::printf("worst error / bound: %.6g\n", worst);
}

// ---- packing ----------------------------------------------------------------------------

TEST(Qdot, PackMatchesToFloatPanels) {
  std::mt19937 rng(11);
  const int64_t K = 512;
  bool any = false;
  for (Isa isa : isas()) {
    const cpu::GemmKernels& gk = cpu::gemm_kernels(isa);
    if (!gk.micro) continue;
    const int nr = gk.nr;
    std::vector<DType> types(std::begin(kTypes), std::end(kTypes));
    types.insert(types.end(), std::begin(kKTypes), std::end(kKTypes));
    for (DType t : types) {
      const cpu::PackFn pack = gk.pack[static_cast<int>(t)];
      ASSERT_NE(pack, nullptr) << name_of(t) << " " << cpu::isa_name(isa);
      any = true;
      const bool ktype = type_traits(t).block_size == kQK;
      using Range = std::pair<int64_t, int64_t>;  // k0, kc
      const std::vector<Range> ranges = ktype ? std::vector<Range>{{0, 256}, {256, 256}, {0, 512}}
                                              : std::vector<Range>{{0, 256}, {256, 256}, {256, 96}, {480, 32}};
      for (size_t pad : {size_t{0}, size_t{6}}) {
        const size_t rb = row_bytes(t, K), stride = rb + pad;
        std::vector<uint8_t> rows(nr * stride + 1);
        std::vector<std::vector<float>> deq;
        for (int i = 0; i < nr; ++i) {
          const std::vector<uint8_t> r = ktype ? random_k_weights(rng, t, K) : random_weights(rng, t, K);
          std::memcpy(rows.data() + 1 + i * stride, r.data(), rb);  // odd addresses
          deq.push_back(dequantize(t, r.data(), K));
        }
        for (int64_t nrows : {int64_t{1}, int64_t{5}, int64_t{nr}})
          for (auto [k0, kc] : ranges) {
            SCOPED_TRACE(name_of(t) + " " + cpu::isa_name(isa) + " nrows=" + std::to_string(nrows) +
                         " k0=" + std::to_string(k0) + " kc=" + std::to_string(kc));
            std::vector<float> got(kc * nr, -1.0f), want(kc * nr);
            for (int64_t k = 0; k < kc; ++k)
              for (int i = 0; i < nr; ++i) want[k * nr + i] = i < nrows ? deq[i][k0 + k] : 0.0f;
            pack(reinterpret_cast<const char*>(rows.data() + 1), stride, nrows, k0, kc, got.data());
            EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
          }
      }
    }
  }
  if (!any) GTEST_SKIP() << "no SIMD instruction set with a GEMM path on this machine";
}

// ---- mul_mat end to end -----------------------------------------------------------------

struct Case {
  int64_t K, M, N;
  int64_t A2 = 1, B2 = 1;  // GQA-style broadcast: B2 / A2 activation batches per weight matrix
};

struct MatMulGraph {
  Graph g;
  std::vector<std::vector<char>> storage;
  std::vector<char> buf;
  Tensor* a = nullptr;
  Tensor* b = nullptr;
  Tensor* r = nullptr;

  void* alloc(size_t n) {
    auto& s = storage.emplace_back(n + 64, 0);
    return s.data() + (64 - reinterpret_cast<uintptr_t>(s.data()) % 64) % 64;
  }
  MatMulGraph(DType t, const Case& c, const std::vector<uint8_t>& w, const std::vector<float>& x) {
    a = g.new_tensor(t, {c.K, c.M, c.A2, 1}, "w");
    a->data = alloc(a->nbytes());
    std::memcpy(a->data, w.data(), a->nbytes());
    b = g.new_tensor(DType::F32, {c.K, c.N, c.B2, 1}, "x");
    b->data = alloc(b->nbytes());
    std::memcpy(b->data, x.data(), b->nbytes());
    r = mul_mat(g, a, b);
    r->flags |= kFlagOutput;
    g.build(r);
    test::plan_into(g, buf);
  }
  std::vector<float> compute(Backend& be) {
    be.compute(g);
    const auto* o = static_cast<const float*>(r->data);
    return std::vector<float>(o, o + r->nelements());
  }
};

using RefDotFn = RefDot (*)(DType, const uint8_t*, const uint8_t*, int64_t);

// mul_mat of each type in `types` on every CPU instruction set (1, 2, 3
// threads, bitwise equal) against the references (see the top of the file);
// ref: the quantized product of one weight row and one activation row.
// M: weight rows of the plain case (the GQA case has 7).
void check_mul_mat(std::mt19937& rng, const std::vector<DType>& types, const std::vector<int64_t>& Ks,
                   const std::vector<int64_t>& Ns, RefDotFn ref, int64_t M = 19) {
  std::vector<std::vector<std::unique_ptr<Backend>>> cpus;  // [kernel set][threads - 1]
  const std::vector<KernelSet> all = kernel_sets();
  for (const KernelSet& ks : all) {
    auto& v = cpus.emplace_back();
    CpuOptions o;
    o.vnni = ks.vnni;
    o.grid_gathers = ks.gathers;
    for (int nth = 1; nth <= 3; ++nth) v.push_back(cpu::make_cpu_backend(nth, ks.isa, o));
  }
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (DType t : types) {
    const DType xt = type_traits(t).vec_dot_type;
    for (int64_t K : Ks)
      for (int64_t N : Ns)
        for (bool gqa : {false, true}) {
          const Case c = gqa ? Case{K, 7, N, 2, 6} : Case{K, M, N};
          SCOPED_TRACE(name_of(t) + " K=" + std::to_string(K) + " N=" + std::to_string(N) + (gqa ? " gqa" : ""));
          std::vector<float> wf(K * c.M * c.A2), x(K * N * c.B2);
          for (float& v : wf) v = n(rng);
          for (float& v : x) v = n(rng);
          std::vector<uint8_t> w(row_bytes(t, K) * c.M * c.A2);
          type_traits(t).quantize(wf.data(), w.data(), c.M * c.A2, K, nullptr);
          // Reference: the quantized product with its bound, and sum |w||x|
          // for the GEMM path's float sums.
          const size_t wrb = row_bytes(t, K), xrb = row_bytes(xt, K);
          std::vector<double> want_q(c.M * N * c.B2), bound_q(want_q.size()), bound_f(want_q.size());
          std::vector<double> want_g(want_q.size());  // dequantized weights times rounded activations
          std::vector<uint8_t> xq(xrb);
          for (int64_t i2 = 0; i2 < c.B2; ++i2)
            for (int64_t j = 0; j < N; ++j) {
              const float* xr = x.data() + (i2 * N + j) * K;
              type_traits(xt).from_float(xr, xq.data(), K);
              std::vector<float> xd(K);
              type_traits(xt).to_float(xq.data(), xd.data(), K);
              for (int64_t i = 0; i < c.M; ++i) {
                const int64_t wrow = (i2 / (c.B2 / c.A2)) * c.M + i;
                const RefDot rd = ref(t, w.data() + wrow * wrb, xq.data(), K);
                const std::vector<float> wd = dequantize(t, w.data() + wrow * wrb, K);
                double s = 0, g = 0;
                for (int64_t k = 0; k < K; ++k) {
                  s += std::fabs(static_cast<double>(wd[k]) * xr[k]);
                  g += static_cast<double>(wd[k]) * xd[k];
                }
                const size_t o = (i2 * N + j) * c.M + i;
                want_g[o] = g;
                want_q[o] = rd.value;
                bound_q[o] = rd.bound;
                bound_f[o] = 1e-5 * s + 1e-30;
              }
            }
          for (size_t ii = 0; ii < all.size(); ++ii) {
            SCOPED_TRACE(all[ii].name());
            const cpu::KernelOptions ko = all[ii].options();
            MatMulGraph run(t, c, w, x);
            const bool int8 = cpu::matmul_uses_int8(*run.r, ko);
            // Where the kernel set has the type's int8 kernels, the larger N
            // take them.
            if (N >= 64 && cpu::gemm_kernels(ko).i8[static_cast<int>(t)].pack_w) {
              EXPECT_TRUE(int8);
            }
            const bool gemm = cpu::matmul_uses_gemm(*run.r, ko) && !int8;
            const std::vector<float> one = run.compute(*cpus[ii][0]);
            size_t bad = 0;
            // Every path computes the product with the activations quantized
            // to the partner type (the F32 GEMM path rounds them through it,
            // as ggml's kernels quantize them): the dot path against the
            // quantized product, the F32 GEMM path against dequantized weights
            // times the dequantized activations (Q8_1's stored sum is not used
            // there), the int8 GEMM path (the dot kernels' integer sums, its
            // own float order) as the dot path, within the dot bound.
            for (size_t o = 0; o < one.size(); ++o) {
              const double want = gemm ? want_g[o] : want_q[o];
              const double bound = gemm ? bound_f[o] : bound_q[o];
              if (!(std::fabs(one[o] - want) <= bound) && bad++ < 3)
                ADD_FAILURE() << (int8 ? "int8" : gemm ? "gemm" : "dot") << " element " << o << " got " << one[o]
                              << " want " << want << " bound " << bound;
            }
            EXPECT_EQ(bad, 0u);
            for (int nth = 2; nth <= 3; ++nth) {
              const std::vector<float> many = run.compute(*cpus[ii][nth - 1]);
              EXPECT_EQ(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)), 0)
                  << nth << " threads differ from 1";
            }
            // Generation's packed weights (packed.h): the same product within
            // the dot bound, equal on 1, 2 and 3 threads; a packed copy of
            // other data is not used.
            if (N == 1 && cpu::packable(t) && run.a->ne[2] == 1) {
              const Tensor* weights[] = {run.a};
              for (auto& cpu : cpus[ii]) EXPECT_GT(cpu->prepare_weights(weights, Op::MulMat), 0u);
              const std::vector<float> p1 = run.compute(*cpus[ii][0]);
              size_t pbad = 0;
              for (size_t o = 0; o < p1.size(); ++o)
                if (!(std::fabs(p1[o] - want_q[o]) <= bound_q[o]) && pbad++ < 3)
                  ADD_FAILURE() << "packed element " << o << " got " << p1[o] << " want " << want_q[o];
              EXPECT_EQ(pbad, 0u);
              for (int nth = 2; nth <= 3; ++nth) {
                const std::vector<float> many = run.compute(*cpus[ii][nth - 1]);
                EXPECT_EQ(std::memcmp(many.data(), p1.data(), p1.size() * sizeof(float)), 0)
                    << "packed: " << nth << " threads differ from 1";
              }
              std::vector<char> moved(run.a->nbytes());
              std::memcpy(moved.data(), run.a->data, moved.size());
              void* original = run.a->data;
              run.a->data = moved.data();
              const std::vector<float> unpacked = run.compute(*cpus[ii][0]);
              EXPECT_EQ(std::memcmp(unpacked.data(), one.data(), one.size() * sizeof(float)), 0)
                  << "a packed copy of other data was used";
              run.a->data = original;
              for (auto& cpu : cpus[ii]) cpu->release_weights(weights);
            }
          }
        }
  }
}

// The packed matrix-vector kernels (packed.h) of every instruction set equal
// the plain one bit for bit, on random, extreme, subnormal and zero scales
// and all-max / all-min codes, groups with padding rows (M = 1, 7, 8, 13)
// and K up to 8192; every output is within the dot bound of its row's
// quantized product.
TEST(Qdot, PackedKernelsMatchThePlainOneAndTheReference) {
  std::mt19937 rng(41);
  std::vector<DType> types(std::begin(kTypes), std::end(kTypes));
  types.insert(types.end(), std::begin(kKTypes), std::end(kKTypes));
  types.insert(types.end(), std::begin(kScaledTypes), std::end(kScaledTypes));
  for (DType t : types) {
    if (!cpu::packable(t)) continue;
    const bool ktype = type_traits(t).block_size == kQK;
    const DType xt = type_traits(t).vec_dot_type;
    const RefDotFn ref = ktype ? ref_dot_k : ref_dot;
    for (int64_t K : {32, 64, 96, 256, 1024, 8192})
      for (int64_t M : {1, 7, 8, 13}) {
        if (K % type_traits(t).block_size != 0) continue;
        SCOPED_TRACE(name_of(t) + " K=" + std::to_string(K) + " M=" + std::to_string(M));
        std::vector<uint8_t> w;
        for (int64_t i = 0; i < M; ++i) {
          const std::vector<uint8_t> row = ktype ? random_k_weights(rng, t, K) : random_weights(rng, t, K);
          w.insert(w.end(), row.begin(), row.end());
        }
        const std::vector<uint8_t> x = ktype ? random_q8k(rng, K) : random_acts(rng, xt, K);
        Tensor tw;
        tw.type = t;
        tw.ne = {K, M, 1, 1};
        tw.nb = contiguous_strides(t, tw.ne);
        tw.data = w.data();
        const std::unique_ptr<cpu::PackedWeight> packed = cpu::pack_weight(tw);
        const cpu::PackedDotFn plain = cpu::packed_dot_scalar(t);
        ASSERT_NE(plain, nullptr);
        for (int64_t g = 0; g * cpu::kPackRows < M; ++g) {
          float want[cpu::kPackRows];
          plain(K, packed->group(g), x.data(), want, 0);
          for (int r = 0; r < cpu::kPackRows && g * cpu::kPackRows + r < M; ++r) {
            const RefDot rd = ref(t, w.data() + (g * cpu::kPackRows + r) * row_bytes(t, K), x.data(), K);
            EXPECT_LE(std::fabs(want[r] - rd.value), rd.bound) << "row " << g * cpu::kPackRows + r;
          }
          // Every kernel set, prefetching as its default and not at all
          // (prefetches change no result).
          for (const KernelSet& ks : kernel_sets()) {
            const cpu::KernelOptions ko = ks.options();
            const cpu::PackedDotFn fn = cpu::gemm_kernels(ko).packed_dot[static_cast<int>(t)];
            ASSERT_NE(fn, nullptr) << ks.name();
            for (size_t prefetch : {ko.prefetch_bytes, size_t{0}}) {
              float got[cpu::kPackRows];
              fn(K, packed->group(g), x.data(), got, prefetch);
              for (int r = 0; r < cpu::kPackRows && g * cpu::kPackRows + r < M; ++r)
                EXPECT_EQ(std::memcmp(&got[r], &want[r], sizeof(float)), 0)
                    << ks.name() << " prefetch " << prefetch << " row " << g * cpu::kPackRows + r << " got " << got[r]
                    << " want " << want[r];
            }
          }
        }
      }
  }
}

// How far ahead the packed kernels prefetch: on Intel CPUs 8 KiB, on others
// 1 KiB with AVX2 and none with AVX-512; none with the plain kernels;
// CpuOptions::prefetch_bytes sets it for every instruction set (0 .. 65536;
// more is an error when the backend is made).
// (Prefetching changes no result: the packed kernels' test above runs with
// the default and with none; test_cpu_options.cpp checks that a backend's
// kernels get the distance.)
TEST(Qdot, PackedPrefetchDistance) {
  const bool intel = cpu::cpu_is_intel();
  EXPECT_EQ(cpu::packed_prefetch_bytes(Isa::Avx2), intel ? 8192u : 1024u);
  EXPECT_EQ(cpu::packed_prefetch_bytes(Isa::Avx512), intel ? 8192u : 0u);
  EXPECT_EQ(cpu::packed_prefetch_bytes(Isa::Scalar), 0u);
  for (Isa isa : isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    EXPECT_EQ(cpu::kernel_options(isa).prefetch_bytes, cpu::packed_prefetch_bytes(isa));
    for (size_t set : {size_t{0}, size_t{2048}, size_t{65536}}) {
      CpuOptions o;
      o.prefetch_bytes = set;
      EXPECT_EQ(cpu::kernel_options(o, isa).prefetch_bytes, set);
    }
    CpuOptions far;
    far.prefetch_bytes = 65537;
    EXPECT_NE(test::error_of([&] { cpu::make_cpu_backend(1, isa, far); }).find("prefetch distance 65537"),
              std::string::npos);
  }
}

TEST(Qdot, MulMatMatchesReferences) {
  std::mt19937 rng(23);
  check_mul_mat(rng, std::vector<DType>(std::begin(kTypes), std::end(kTypes)), {32, 96, 4096}, {1, 5, 13, 64, 100},
                ref_dot);
  check_mul_mat(rng, std::vector<DType>(std::begin(kScaledTypes), std::end(kScaledTypes)), {128, 384, 4096},
                {1, 5, 13, 64, 100}, ref_dot);
}

// The K types: Q8_K activations on the dot path (N = 1, 5), the GEMM path
// from N = 13 on AVX2 (the int8 one with AVX-VNNI), from 64 on AVX-512 (with
// VNNI: int8). K = 768: a partial K block of the int8 path's.
TEST(QdotK, MulMatMatchesReferences) {
  std::mt19937 rng(29);
  // K=4096 is two thirds of this test's time under a sanitizer
  // (QLENS_SLOW_TESTS=0), whose concern, memory, the smaller rows cover in the
  // same loops; the release build keeps it for the long sums.
  std::vector<int64_t> Ks = {256, 768};
  if (test::slow_tests_enabled()) Ks.push_back(4096);
  check_mul_mat(rng, std::vector<DType>(std::begin(kKTypes), std::end(kKTypes)), Ks, {1, 5, 13, 64, 100}, ref_dot_k);
}

// The int8 GEMM path on every type with more weight rows than one work item
// takes (several chunks of several panels, the last one partial: 300 = 9 *
// 32 + 12) and activation rows past one panel's edge: bitwise equal for 1,
// 2 and 3 threads, and the references as above.
TEST(Int8Gemm, ManyRowsMatchReferencesAndThreadCounts) {
  std::mt19937 rng(31);
  check_mul_mat(rng, std::vector<DType>(std::begin(kTypes), std::end(kTypes)), {512}, {70}, ref_dot, 300);
  check_mul_mat(rng, std::vector<DType>(std::begin(kScaledTypes), std::end(kScaledTypes)), {512}, {70}, ref_dot, 300);
  check_mul_mat(rng, std::vector<DType>(std::begin(kKTypes), std::end(kKTypes)), {512}, {70}, ref_dot_k, 300);
}

}  // namespace
}  // namespace qlens
