// The K-quant formats: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K and IQ4_XS.
//
// Each format has a codec (kquants_codec.h) that moves a super-block between
// its bytes and an Unpacked form (fp16 scale bits, integer sub-block scales
// and mins, one stored quant per element). Dequantization, requantization and
// the quantizers are written once against the codecs:
//  - from_float (ggml's quantize_row_*_ref): per sub-block scale (and min)
//    searches with the data-derived weights ggml uses, then the sub-block
//    scales are rounded linearly against their maximum.
//  - quantize (with or without an importance matrix): weighted searches per
//    sub-block (make_qkx_quants for the affine types, make_qx_quants or the
//    IQ4 search for the symmetric ones), then the sub-block scales and mins
//    are themselves quantized by a weighted search (make_qp_quants,
//    make_qx_quants), the quants are re-chosen for the final scales, and the
//    super-block scales are refitted by least squares while that lowers the
//    weighted error.
// docs/QUANTIZATION.md describes the layouts and the weights.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/kquants.h"
#include "quant/kquants_codec.h"
#include "quant/registry.h"

namespace qlens::quant {
namespace kq {
namespace {

// ---- dequantization ----

// Same operations, in the same order, as ggml's dequantize_row_*: per
// sub-block dl = d * sc and ml = dmin * m in float, then dl * level - ml.
template <class C>
void dequantize_unpacked(const Unpacked& u, float* y) {
  const float d = fp16_to_fp32(u.d);
  const float dmin = fp16_to_fp32(u.dmin);
  for (int j = 0; j < kQK / C::kSub; ++j) {
    const float dl = d * u.sc[j];
    const uint8_t* q = u.q + j * C::kSub;
    float* yj = y + j * C::kSub;
    if constexpr (C::kAffine) {
      const float ml = dmin * u.m[j];
      for (int i = 0; i < C::kSub; ++i) yj[i] = dl * C::level(q[i]) - ml;
    } else {
      for (int i = 0; i < C::kSub; ++i) yj[i] = dl * C::level(q[i]);
    }
  }
}

template <class C>
void to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const typename C::Block*>(src);
  Unpacked u;
  for (int64_t i = 0; i < n / kQK; ++i) {
    C::unpack(b[i], u);
    dequantize_unpacked<C>(u, dst + i * kQK);
  }
}

// ---- shared quantizer steps ----

// Chooses every element's quant for the block's (final) scales and mins.
template <class C>
void requantize(const float* x, Unpacked& u) {
  const float d = fp16_to_fp32(u.d);
  const float dmin = fp16_to_fp32(u.dmin);
  for (int j = 0; j < kQK / C::kSub; ++j) {
    const float dl = d * u.sc[j];
    const float ml = C::kAffine ? dmin * u.m[j] : 0.0f;
    uint8_t* q = u.q + j * C::kSub;
    const float* xj = x + j * C::kSub;
    for (int i = 0; i < C::kSub; ++i)
      q[i] = static_cast<uint8_t>(dl != 0 ? C::nearest((xj[i] + ml) / dl) : C::kZero);
  }
}

template <class C>
double weighted_error(const float* x, const float* w, const Unpacked& u) {
  float y[kQK];
  dequantize_unpacked<C>(u, y);
  double e = 0;
  for (int i = 0; i < kQK; ++i) {
    const double diff = static_cast<double>(x[i]) - y[i];
    e += w[i] * diff * diff;
  }
  return e;
}

// With the integer scales, mins and quants fixed, the weighted error is
// quadratic in d (and dmin): solve for them, round to fp16, re-choose the
// quants, and keep the result while the weighted error goes down.
template <class C>
void refit_super_scales(const float* x, const float* w, Unpacked& u) {
  double err = weighted_error<C>(x, w, u);
  for (int iter = 0; iter < 2; ++iter) {
    // y_i = d a_i + dmin b_i with a_i = sc_j level(q_i), b_i = -m_j.
    double saa = 0, sab = 0, sbb = 0, sxa = 0, sxb = 0;
    for (int j = 0; j < kQK / C::kSub; ++j) {
      const double b = C::kAffine ? -u.m[j] : 0.0;
      for (int i = j * C::kSub; i < (j + 1) * C::kSub; ++i) {
        const double a = static_cast<double>(u.sc[j]) * C::level(u.q[i]);
        saa += w[i] * a * a;
        sab += w[i] * a * b;
        sbb += w[i] * b * b;
        sxa += w[i] * x[i] * a;
        sxb += w[i] * x[i] * b;
      }
    }
    // Both when the system is well conditioned, else the one that can move
    // (d alone; or dmin alone when d is 0, e.g. a block below fp16's range).
    Unpacked c = u;
    const double det = saa * sbb - sab * sab;
    if (C::kAffine && saa > 0 && det > 1e-9 * saa * sbb) {
      c.d = fp16_sat(static_cast<float>((sxa * sbb - sxb * sab) / det));
      c.dmin = fp16_sat(static_cast<float>((saa * sxb - sab * sxa) / det));
    } else if (saa > 0) {
      const double bd = C::kAffine ? fp16_to_fp32(u.dmin) : 0.0;
      c.d = fp16_sat(static_cast<float>((sxa - bd * sab) / saa));
    } else if (C::kAffine && sbb > 0) {
      c.dmin = fp16_sat(static_cast<float>(sxb / sbb));
    } else {
      return;
    }
    if (c.d == u.d && c.dmin == u.dmin) return;
    requantize<C>(x, c);
    const double e = weighted_error<C>(x, w, c);
    if (!(e < err)) return;
    u = c;
    err = e;
  }
}

// ---- the importance-weighted quantizers ----

// Weights of the weighted searches: w_i = imp_i * sqrt(sigma2 + x_i^2), with
// sigma2 = kSigmaScale * mean(x^2) over the super-block (llama.cpp's choice),
// or imp_i alone for Q6_K (as llama.cpp). Without importance, imp_i = 1: this
// beat x^2 (ggml's default for Q3_K and IQ4_XS) and rms + |x| (Q4_K, Q5_K) on
// Gaussian and outlier rows for every type. A sub-block whose weights sum to 0
// (all its importances 0) gets the default weights instead, so that it is
// still quantized sensibly.
template <class C>
void make_weights(const float* x, const float* imp, float* w) {
  double sumx2 = 0;
  for (int i = 0; i < kQK; ++i) sumx2 += static_cast<double>(x[i]) * x[i];
  const float sigma2 = static_cast<float>(C::kSigmaScale * sumx2 / kQK);
  for (int j = 0; j < kQK / C::kSub; ++j) {
    const int i0 = j * C::kSub, i1 = i0 + C::kSub;
    double sum = 0;
    if (imp) {
      for (int i = i0; i < i1; ++i) {
        w[i] = C::kImportanceAlone ? imp[i] : imp[i] * std::sqrt(sigma2 + x[i] * x[i]);
        sum += w[i];
      }
    }
    if (!(sum > 0))
      for (int i = i0; i < i1; ++i) w[i] = std::sqrt(sigma2 + x[i] * x[i]);
  }
}

// Stores the scale of a set of sub-block values (their scales or mins) as fp16,
// with the values' levels L, chosen against `scale`. fp16 keeps 11 significant
// bits only in its normal range: when storing moved the scale by more than
// 0.1% (a subnormal half for a tiny block, saturation for a huge one), the
// levels are re-rounded against the stored scale.
template <class Level>
void store_levels(int n, float scale, const float* v, const Level* L, int lo, int hi, uint16_t& bits, int16_t* out) {
  bits = fp16_sat(scale);
  const float stored = fp16_to_fp32(bits);
  const bool close = std::fabs(stored - scale) <= 1e-3f * std::fabs(scale);
  for (int j = 0; j < n; ++j)
    out[j] = static_cast<int16_t>(close || stored == 0 ? L[j] : std::clamp(nearest_int(v[j] / stored), lo, hi));
}

// Affine types: per sub-block scale and min by make_qkx_quants, then the scales
// and the mins each on kScaleMax + 1 levels by make_qp_quants (weighted by the
// sub-blocks' total weight).
template <class C>
void quantize_affine(const float* x, const float* w, Unpacked& u) {
  constexpr int S = C::kSub, NS = kQK / S;
  float scales[NS], mins[NS], sw[NS];
  uint8_t L[kQK];
  for (int j = 0; j < NS; ++j) {
    scales[j] = make_qkx_quants(S, C::kQMax, x + S * j, w + S * j, L + S * j, &mins[j], -0.9f, 0.05f, 36, false);
    sw[j] = 0;
    for (int i = 0; i < S; ++i) sw[j] += w[S * j + i];
  }
  uint8_t ls[NS], lm[NS];
  const float d = make_qp_quants(NS, C::kScaleMax, scales, sw, ls);
  const float dmin = make_qp_quants(NS, C::kScaleMax, mins, sw, lm);
  store_levels(NS, d, scales, ls, 0, C::kScaleMax, u.d, u.sc);
  store_levels(NS, dmin, mins, lm, 0, C::kScaleMax, u.dmin, u.m);
  requantize<C>(x, u);
  refit_super_scales<C>(x, w, u);
}

// Symmetric types: per sub-block scale by the codec's search, then the signed
// sub-block scales on 2 kScaleHalf levels by make_qx_quants.
template <class C>
void quantize_symmetric(const float* x, const float* w, Unpacked& u) {
  constexpr int S = C::kSub, NS = kQK / S;
  float scales[NS], sw[NS];
  for (int j = 0; j < NS; ++j) {
    scales[j] = C::search(x + S * j, w + S * j);
    sw[j] = 0;
    for (int i = 0; i < S; ++i) sw[j] += w[S * j + i];
  }
  int8_t ls[NS];
  const float d = make_qx_quants(NS, C::kScaleHalf, scales, sw, ls);
  store_levels(NS, d, scales, ls, -C::kScaleHalf, C::kScaleHalf - 1, u.d, u.sc);
  requantize<C>(x, u);
  refit_super_scales<C>(x, w, u);
}

// Magnitudes beyond 2^28 are out of every format's range (the largest
// representable value is at most 65504 * 127 * 32 < 2^28): such inputs are
// clamped to it, which keeps every intermediate finite and saturates the
// output instead of producing Inf or NaN. Returns x itself when it is in range.
const float* clamp_input(const float* x, float* buf) {
  constexpr float kLimit = 268435456.0f;
  bool in_range = true;
  for (int i = 0; i < kQK; ++i) in_range &= std::fabs(x[i]) <= kLimit;
  if (in_range) return x;
  for (int i = 0; i < kQK; ++i) buf[i] = std::clamp(x[i], -kLimit, kLimit);
  return buf;
}

template <class C>
void quantize_rows(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  auto* out = static_cast<typename C::Block*>(dst);
  const int64_t nb = n_per_row / kQK;
  float w[kQK], buf[kQK];
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t i = 0; i < nb; ++i) {
      const float* x = clamp_input(src + r * n_per_row + i * kQK, buf);
      make_weights<C>(x, importance ? importance + i * kQK : nullptr, w);
      Unpacked u;
      if constexpr (C::kAffine)
        quantize_affine<C>(x, w, u);
      else
        quantize_symmetric<C>(x, w, u);
      C::pack(u, out[r * nb + i]);
    }
  }
}

// ---- the reference (fast, unweighted) quantizers: ggml's quantize_row_*_ref ----

// Affine: per sub-block make_qkx_quants with the codec's reference weights and
// grid, then scales and mins rounded linearly against their maxima.
template <class C>
void affine_ref(const float* x, Unpacked& u) {
  constexpr int S = C::kSub, NS = kQK / S;
  float scales[NS], mins[NS], w[S];
  uint8_t L[S];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < NS; ++j) {
    C::ref_weights(x + S * j, w);
    scales[j] = make_qkx_quants(S, C::kQMax, x + S * j, w, L, &mins[j], C::kRefRmin, C::kRefRdelta, C::kRefSteps,
                                C::kRefMad);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? C::kScaleMax / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? C::kScaleMax / max_min : 0.0f;
  int ls[NS], lm[NS];
  for (int j = 0; j < NS; ++j) {
    ls[j] = std::clamp(nearest_int(inv_scale * scales[j]), 0, C::kScaleMax);
    lm[j] = std::clamp(nearest_int(inv_min * mins[j]), 0, C::kScaleMax);
  }
  store_levels(NS, max_scale / C::kScaleMax, scales, ls, 0, C::kScaleMax, u.d, u.sc);
  store_levels(NS, max_min / C::kScaleMax, mins, lm, 0, C::kScaleMax, u.dmin, u.m);
  // A block whose scales vanished in fp16 (below its range): the mins alone would only add error.
  if (u.d == 0 && max_scale > 0) u.dmin = 0;
  requantize<C>(x, u);
}

// Symmetric: per sub-block the codec's reference search with weights x^2, then
// the scales rounded against the one of largest magnitude, which goes to
// -kScaleHalf.
template <class C>
void symmetric_ref(const float* x, Unpacked& u) {
  constexpr int S = C::kSub, NS = kQK / S;
  float scales[NS], w[S];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < NS; ++j) {
    for (int i = 0; i < S; ++i) w[i] = x[S * j + i] * x[S * j + i];
    scales[j] = C::ref_search(x + S * j, w);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  if (amax < 1e-15f) {
    u = Unpacked{};
    std::fill(u.q, u.q + kQK, static_cast<uint8_t>(C::kZero));
    return;
  }
  const float iscale = -C::kScaleHalf / max_scale;
  int ls[NS];
  for (int j = 0; j < NS; ++j) ls[j] = std::clamp(nearest_int(iscale * scales[j]), -C::kScaleHalf, C::kScaleHalf - 1);
  store_levels(NS, 1 / iscale, scales, ls, -C::kScaleHalf, C::kScaleHalf - 1, u.d, u.sc);
  requantize<C>(x, u);
}

// The reference parameters and searches, per type (ggml's choices).
struct Q2KQ : Q2K {
  static constexpr float kSigmaScale = 1;
  static constexpr bool kImportanceAlone = false;
  static constexpr float kRefRmin = -0.5f, kRefRdelta = 0.1f;
  static constexpr int kRefSteps = 15;
  static constexpr bool kRefMad = true;  // ggml fits Q2_K's reference by absolute error, weights |x|
  static void ref_weights(const float* x, float* w) {
    for (int i = 0; i < kSub; ++i) w[i] = std::fabs(x[i]);
  }
  static void ref(const float* x, Unpacked& u) { affine_ref<Q2KQ>(x, u); }
};

// Q4_K and Q5_K reference weights: rms of the sub-block plus |x|.
template <class Base, int steps, int rmin_tenths>
struct QK4FamilyQ : Base {
  static constexpr float kSigmaScale = 2;
  static constexpr bool kImportanceAlone = false;
  static constexpr float kRefRmin = rmin_tenths / 10.0f, kRefRdelta = 0.1f;
  static constexpr int kRefSteps = steps;
  static constexpr bool kRefMad = false;
  static void ref_weights(const float* x, float* w) {
    float sumx2 = 0;
    for (int i = 0; i < Base::kSub; ++i) sumx2 += x[i] * x[i];
    const float rms = std::sqrt(sumx2 / Base::kSub);
    for (int i = 0; i < Base::kSub; ++i) w[i] = rms + std::fabs(x[i]);
  }
  static void ref(const float* x, Unpacked& u) { affine_ref<QK4FamilyQ>(x, u); }
};
using Q4KQ = QK4FamilyQ<Q4K, 20, -10>;
using Q5KQ = QK4FamilyQ<Q5K, 15, -5>;

struct Q3KQ : Q3K {
  static constexpr float kSigmaScale = 2;
  static constexpr bool kImportanceAlone = false;
  static float search(const float* x, const float* w) {
    int8_t L[kSub];
    return make_qx_quants(kSub, kQHalf, x, w, L);
  }
  static float ref_search(const float* x, const float* w) {
    int8_t L[kSub];
    return make_qx_quants_refined(kSub, kQHalf, x, w, L);
  }
  static void ref(const float* x, Unpacked& u) { symmetric_ref<Q3KQ>(x, u); }
};

struct Q6KQ : Q6K {
  static constexpr float kSigmaScale = 2;
  static constexpr bool kImportanceAlone = true;
  static float search(const float* x, const float* w) {
    int8_t L[kSub];
    return make_qx_quants(kSub, kQHalf, x, w, L);
  }
  static float ref_search(const float* x, const float* w) { return search(x, w); }
  static void ref(const float* x, Unpacked& u) { symmetric_ref<Q6KQ>(x, u); }
};

struct IQ4XSQ : IQ4XS {
  static constexpr float kSigmaScale = 2;
  static constexpr bool kImportanceAlone = false;
  static float search(const float* x, const float* w) {
    uint8_t L[kSub];
    return iq4_search(kSub, x, w, L, 7);
  }
  // ggml's reference IQ4_XS quantization is its quantizer without importance.
  static void ref(const float* x, Unpacked& u) {
    float w[kQK];
    make_weights<IQ4XSQ>(x, nullptr, w);
    quantize_symmetric<IQ4XSQ>(x, w, u);
  }
};

template <class C>
void from_float(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<typename C::Block*>(dst);
  float buf[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    Unpacked u;
    C::ref(clamp_input(src + i * kQK, buf), u);
    C::pack(u, out[i]);
  }
}

// ---- Q8_K: exactly ggml's quantize_row_q8_K_ref ----

void q8k_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i)
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = b[i].d * b[i].qs[j];
}

void q8k_from_float(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8K*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    BlockQ8K& b = out[i];
    float amax = 0, max = 0;  // the first value of largest magnitude, with its sign
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0) {
      b = BlockQ8K{};
      continue;
    }
    // That value becomes -127 and d = 1 / iscale takes the opposite sign.
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK; ++j) b.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < kQK / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b.qs[16 * g + j];
      b.bsums[g] = static_cast<int16_t>(sum);
    }
    b.d = 1 / iscale;
  }
}

// An activation type: importance does not apply.
void q8k_quantize(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float*) {
  q8k_from_float(src, dst, nrows * n_per_row);
}

template <class C>
constexpr Functions functions() {
  return Functions{to_float<C>, from_float<C>, quantize_rows<C>, DType::Q8_K, alignof(typename C::Block)};
}

}  // namespace
}  // namespace kq

std::span<const Binding> kquant_bindings() {
  // Q8_K as a weight has no dot kernel: rows are converted to F32 (as in ggml).
  static constexpr Binding kTable[] = {
      {DType::Q2_K, kq::functions<kq::Q2KQ>()},
      {DType::Q3_K, kq::functions<kq::Q3KQ>()},
      {DType::Q4_K, kq::functions<kq::Q4KQ>()},
      {DType::Q5_K, kq::functions<kq::Q5KQ>()},
      {DType::Q6_K, kq::functions<kq::Q6KQ>()},
      {DType::Q8_K, {kq::q8k_to_float, kq::q8k_from_float, kq::q8k_quantize, DType::F32, alignof(kq::BlockQ8K)}},
      {DType::IQ4_XS, kq::functions<kq::IQ4XSQ>()},
  };
  return kTable;
}

}  // namespace qlens::quant
