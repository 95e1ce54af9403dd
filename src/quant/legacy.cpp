// ggml's legacy block formats (blocks of 32): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q8_1, IQ4_NL. Layouts: src/quant/legacy.h. Algorithms and error bounds:
// docs/QUANTIZATION.md, "Legacy formats".
//
// Each format is a small struct (Block type, dequantize, reference and
// weighted quantization of one block); the row functions and the registry
// entries are templates over it. Three block-level searches are shared:
//  - fit_scaled: codes on a fixed grid of levels times one scale d (Q4_0,
//    Q5_0 with the integer grids, IQ4_NL with kIq4nlValues);
//  - fit_affine: codes 0..nmax times d plus an offset m (Q4_1, Q5_1);
//  - Q8_0/Q8_1 keep ggml's reference rounding (8 bits leave nothing to search).
#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "qlens/error.h"
#include "quant/legacy.h"
#include "quant/registry.h"
#include "quant/scaled_search.h"

namespace qlens::quant {
namespace {

using namespace scaled;

constexpr int QK = kLegacyBlock;

// ---- code packing (4-bit nibbles, fifth bits in qh) ---------------------------

template <class B>
concept HasMin = requires(B b) { b.m; };
template <class B>
concept HasHighBits = requires(B b) { b.qh; };
template <class B>
concept HasSum = requires(B b) { b.s; };

template <class B>
void pack_codes(const uint8_t* codes, B& b) {
  for (int j = 0; j < QK / 2; ++j)
    b.qs[j] = static_cast<uint8_t>((codes[j] & 0x0f) | ((codes[j + QK / 2] & 0x0f) << 4));
  if constexpr (HasHighBits<B>) {
    uint32_t qh = 0;
    for (int j = 0; j < QK; ++j) qh |= static_cast<uint32_t>((codes[j] >> 4) & 1) << j;
    for (int k = 0; k < 4; ++k) b.qh[k] = static_cast<uint8_t>(qh >> (8 * k));  // little-endian
  }
}

template <class B>
void unpack_codes(const B& b, uint8_t* codes) {
  uint32_t qh = 0;
  if constexpr (HasHighBits<B>)
    for (int k = 0; k < 4; ++k) qh |= static_cast<uint32_t>(b.qh[k]) << (8 * k);
  for (int j = 0; j < QK / 2; ++j) {
    codes[j] = static_cast<uint8_t>((b.qs[j] & 0x0f) | (((qh >> j) & 1) << 4));
    codes[j + QK / 2] = static_cast<uint8_t>((b.qs[j] >> 4) | (((qh >> (j + QK / 2)) & 1) << 4));
  }
}

// ---- search for codes on a grid times one scale (Q4_0, Q5_0, IQ4_NL) ---------


// IQ4_NL's 16 non-uniform levels: the nearest level, ties to the upper one.
// The midpoints between levels are multiples of 0.5, so a table over half-unit
// cells of [-128, 128) answers exactly (a midpoint starts its cell).
struct Iq4nlGrid {
  uint8_t cell[512];
  constexpr Iq4nlGrid() : cell{} {
    for (int k = 0; k < 512; ++k) {
      const int twice_v = k - 256;  // the cell [twice_v / 2, (twice_v + 1) / 2)
      int c = 0;
      while (c < 15 && twice_v >= kIq4nlValues[c] + kIq4nlValues[c + 1]) ++c;
      cell[k] = static_cast<uint8_t>(c);
    }
  }
  int code(float v) const {
    const float t = clampf(2.0f * v, -256.0f, 255.0f);  // 2v is exact
    int i = static_cast<int>(t);
    i -= t < static_cast<float>(i);  // floor
    return cell[i + 256];
  }
  float level(int c) const { return static_cast<float>(kIq4nlValues[c]); }
  float lowest() const { return static_cast<float>(kIq4nlValues[0]); }
  float highest() const { return static_cast<float>(kIq4nlValues[15]); }
  float step() const { return 1.0f; }
  int max_code() const { return 15; }
};

constexpr Iq4nlGrid kIq4nlGrid{};


// ---- search for codes times a scale plus an offset (Q4_1, Q5_1) ---------------

struct AffineFit {
  float d = 0, m = 0;
};

// fit_affine's search. It runs on the block scaled by a power of two (exact)
// that brings the largest magnitude into [1, 2): no overflow of max - min or
// of the sums whatever the magnitudes. d and m are scaled back at the end.
struct AffineSearch {
  const float* w;
  int nmax;
  uint8_t* codes;  // the best codes so far
  float x[QK];
  float min, max;
  double sw = 0, sx = 0;
  uint8_t cand[QK];
  double best_err = INFINITY;
  AffineFit best;

  AffineSearch(const float* x_in, double to_unit, const float* weights, int n, uint8_t* out)
      : w(weights), nmax(n), codes(out) {
    for (int j = 0; j < QK; ++j) x[j] = static_cast<float>(x_in[j] * to_unit);
    min = x[0];
    max = x[0];
    for (int j = 0; j < QK; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
      sw += w[j];
      sx += static_cast<double>(w[j]) * x[j];
    }
  }

  // The nearest codes of (x - m) * id into cand.
  void assign(float id, float m) {
    for (int j = 0; j < QK; ++j) cand[j] = static_cast<uint8_t>(round_clamp(id * (x[j] - m), 0, nmax));
  }

  // Weighted least-squares (d, m) for the codes in cand; false when degenerate.
  bool solve(AffineFit& f) const {
    double sl = 0, sl2 = 0, sxl = 0;
    for (int j = 0; j < QK; ++j) {
      const double l = cand[j];
      sl += w[j] * l;
      sl2 += w[j] * l * l;
      sxl += w[j] * l * x[j];
    }
    const double det = sw * sl2 - sl * sl;
    if (!(det > 0)) return false;
    f.d = static_cast<float>((sw * sxl - sx * sl) / det);
    f.m = static_cast<float>((sl2 * sx - sl * sxl) / det);
    return f.d > 0 && std::isfinite(f.d) && std::isfinite(f.m);
  }

  double error(const AffineFit& f) const {
    double e = 0;
    for (int j = 0; j < QK; ++j) {
      const double diff = static_cast<double>(f.d) * cand[j] + f.m - x[j];
      e += w[j] * diff * diff;
    }
    return e;
  }

  bool keep_if_better(const AffineFit& f) {
    const double e = error(f);
    if (!(e < best_err)) return false;
    best_err = e;
    best = f;
    std::copy(cand, cand + QK, codes);
    return true;
  }

  // Steps 1 to 3 (fit_affine); the block must not be constant.
  void run() {
    const float range = max - min;
    // ggml's reference pair (d = range / nmax, m = min) first, as a floor.
    assign(static_cast<float>(nmax) / range, min);
    keep_if_better({range / static_cast<float>(nmax), min});
    for (int t = -18; t <= 18; ++t) {
      assign((static_cast<float>(nmax) + 0.05f * static_cast<float>(t)) / range, min);
      AffineFit f;
      if (solve(f)) keep_if_better(f);
    }
    for (int round = 0; round < 4; ++round) {
      assign(1.0f / best.d, best.m);
      AffineFit f;
      if (!solve(f) || !keep_if_better(f)) break;
    }
  }
};

// The exponent of a block's largest magnitude (0 for a zero block).
inline int block_exponent(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax > 0.0f ? std::ilogb(amax) : 0;
}

// Step 4: the fit scaled back by 2^e, rounded to fp16, and the nearest codes
// of x for the rounded pair.
void round_affine(const AffineFit& best, int e, const float* x, int nmax, uint8_t* codes, uint16_t& d16,
                  uint16_t& m16) {
  const double from_unit = std::ldexp(1.0, e);
  d16 = fp32_to_fp16(saturate_half(static_cast<float>(best.d * from_unit)));
  m16 = fp32_to_fp16(saturate_half(static_cast<float>(best.m * from_unit)));
  const float dr = fp16_to_fp32(d16), mr = fp16_to_fp32(m16);
  if (dr > 0.0f) {
    const float id = 1.0f / dr;
    for (int j = 0; j < QK; ++j) codes[j] = static_cast<uint8_t>(round_clamp(id * (x[j] - mr), 0, nmax));
  } else {
    std::fill(codes, codes + QK, uint8_t{0});
  }
}

// Chooses codes 0..nmax, d >= 0 and m minimizing sum_j w_j (x_j - d c_j - m)^2.
//  1. Candidate assignments: c = nearest(s (x - min)) for s = (nmax + t)/(max - min),
//     t = -0.9, -0.85, ..., 0.9 (37 candidates; t = 0 is ggml's reference grid).
//  2. For a fixed assignment (d, m) is the weighted least-squares line,
//     closed form from the 2x2 normal equations; the assignment with the lowest
//     error under its own optimal (d, m) is kept.
//  3. Alternate: reassign c = nearest((x - m)/d), refit (d, m), while the error
//     drops (at most 4 rounds).
//  4. Round d and m to fp16 and reassign the nearest codes for the rounded pair.
// m may have either sign (fp16 is signed), unlike the K-quants' mins.
void fit_affine(const float* x_in, const float* w, int nmax, uint8_t* codes, uint16_t& d16, uint16_t& m16) {
  const int e = block_exponent(x_in);
  AffineSearch s(x_in, std::ldexp(1.0, -e), w, nmax, codes);
  if (!(s.max > s.min)) {  // constant block: every code 0, m = the value
    std::fill(codes, codes + QK, uint8_t{0});
    d16 = fp32_to_fp16(0.0f);
    m16 = fp32_to_fp16(saturate_half(x_in[0]));
    return;
  }
  s.run();
  round_affine(s.best, e, x_in, nmax, codes, d16, m16);
}

// ---- the formats --------------------------------------------------------------

// Q4_0 (Bits 4) and Q5_0 (Bits 5): d * (code - 2^(Bits-1)).
template <class B, int Bits>
struct SymmetricFormat {
  using Block = B;
  static constexpr bool kWeighted = true;
  static constexpr int kZero = 1 << (Bits - 1);  // code of level 0
  static constexpr int kMaxCode = (1 << Bits) - 1;

  static void dequantize(const B& b, float* y) {
    uint8_t c[QK];
    unpack_codes(b, c);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < QK; ++j) y[j] = static_cast<float>(c[j] - kZero) * d;
  }
  // ggml's quantize_row_q{4,5}_0_ref: the element of largest magnitude maps to
  // the lowest level (-8 or -16), the others truncate x/d + offset + 0.5.
  static void reference(const float* x, B& b) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = saturate_half(max / -static_cast<float>(kZero));
    const float id = inverse_or_zero(d);
    uint8_t c[QK];
    for (int j = 0; j < QK; ++j)
      c[j] = static_cast<uint8_t>(trunc_clamp(x[j] * id + (static_cast<float>(kZero) + 0.5f), 0, kMaxCode));
    b.d = fp32_to_fp16(d);
    pack_codes(c, b);
  }
  static void quantize(const float* x, const float* w, B& b) {
    uint8_t c[QK];
    b.d = fit_scaled<QK>(x, w, IntGrid{-kZero, kZero - 1}, c);
    pack_codes(c, b);
  }
};

// Q4_1 (Bits 4) and Q5_1 (Bits 5): d * code + m.
template <class B, int Bits>
struct AffineFormat {
  using Block = B;
  static constexpr bool kWeighted = true;
  static constexpr int kMaxCode = (1 << Bits) - 1;

  static void dequantize(const B& b, float* y) {
    uint8_t c[QK];
    unpack_codes(b, c);
    const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
    for (int j = 0; j < QK; ++j) y[j] = static_cast<float>(c[j]) * d + m;
  }
  // ggml's quantize_row_q{4,5}_1_ref: d = (max - min) / nmax, m = min. (Beyond
  // fp16's range the codes are taken from the saturated d and m.)
  static void reference(const float* x, B& b) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < QK; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = saturate_half((max - min) / static_cast<float>(kMaxCode));
    const float m = saturate_half(min);
    const float id = inverse_or_zero(d);
    uint8_t c[QK];
    for (int j = 0; j < QK; ++j) c[j] = static_cast<uint8_t>(trunc_clamp((x[j] - m) * id + 0.5f, 0, kMaxCode));
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(m);
    pack_codes(c, b);
  }
  static void quantize(const float* x, const float* w, B& b) {
    uint8_t c[QK];
    fit_affine(x, w, kMaxCode, c, b.d, b.m);
    pack_codes(c, b);
  }
};

// Q8_0 and Q8_1: d * qs[j]; Q8_1 also stores s = d * sum(qs).
template <class B>
struct Q8Format {
  using Block = B;
  static constexpr bool kWeighted = false;  // quantize = reference rounding

  static void dequantize(const B& b, float* y) {
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < QK; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
  // ggml's quantize_row_q8_{0,1}_ref, bit for bit for finite d: d = amax / 127,
  // qs = roundf(x / d) (ties away from zero), s = fp16(sum(qs) * d) with the
  // unrounded d.
  static void reference(const float* x, B& b) {
    float amax = 0.0f;
    for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = saturate_half(amax / 127.0f);
    const float id = inverse_or_zero(d);
    int sum = 0;
    for (int j = 0; j < QK; ++j) {
      const int q = round_away_clamp(x[j] * id, -127, 127);
      b.qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    b.d = fp32_to_fp16(d);
    if constexpr (HasSum<B>) b.s = fp32_to_fp16(saturate_half(static_cast<float>(sum) * d));
  }
  static void quantize(const float* x, const float*, B& b) { reference(x, b); }
  // ggml-cpu's quantize_row_q8_{0,1} on x86, its from_float for activations
  // (what llama.cpp's matrix products see): id = 127 / amax rather than
  // 1 / d, ties to even rather than away. One code in a few thousand differs
  // from the reference's, and at each an activation moves by d: qlens
  // converts activations this way so that its products are llama.cpp's.
  static void activation(const float* x, B& b) {
    float amax = 0.0f;
    for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = saturate_half(amax / 127.0f);
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (std::isinf(id)) id = 0.0f;
    int sum = 0;
    for (int j = 0; j < QK; ++j) {
      const int q = round_even_clamp(x[j] * id, -127, 127);
      b.qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    b.d = fp32_to_fp16(d);
    if constexpr (HasSum<B>) b.s = fp32_to_fp16(saturate_half(static_cast<float>(sum) * d));
  }
};

// IQ4_NL: d * kIq4nlValues[code].
struct Iq4nlFormat {
  using Block = BlockIq4nl;
  static constexpr bool kWeighted = true;

  static void dequantize(const Block& b, float* y) {
    uint8_t c[QK];
    unpack_codes(b, c);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < QK; ++j) y[j] = d * static_cast<float>(kIq4nlValues[c[j]]);
  }
  // ggml's quantize_row_iq4_nl_ref: nearest levels for d = -max/127 (the
  // largest magnitude onto -127), then the scale refitted by least squares
  // with weights x^2; no search.
  static void reference(const float* x, Block& b) {
    const Iq4nlGrid& g = kIq4nlGrid;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    uint8_t c[QK];
    float d = 0.0f;
    if (amax >= kTinyBlock) {
      // On x / max (the largest magnitude at 1) so that x^2 cannot overflow.
      double qx = 0, q2 = 0;
      for (int j = 0; j < QK; ++j) {
        const double xs = static_cast<double>(x[j]) / max;
        c[j] = static_cast<uint8_t>(g.code(static_cast<float>(-127.0 * xs)));
        const double q = g.level(c[j]), w = xs * xs;
        qx += w * q * xs;
        q2 += w * q * q;
      }
      d = q2 > 0 ? static_cast<float>(qx / q2 * max) : 0.0f;
    } else {
      std::fill(c, c + QK, static_cast<uint8_t>(g.code(0.0f)));
    }
    b.d = fp32_to_fp16(saturate_half(d));
    pack_codes(c, b);
  }
  static void quantize(const float* x, const float* w, Block& b) {
    uint8_t c[QK];
    b.d = fit_scaled<QK>(x, w, kIq4nlGrid, c);
    pack_codes(c, b);
  }
};

using Q4_0 = SymmetricFormat<BlockQ4_0, 4>;
using Q5_0 = SymmetricFormat<BlockQ5_0, 5>;
using Q4_1 = AffineFormat<BlockQ4_1, 4>;
using Q5_1 = AffineFormat<BlockQ5_1, 5>;
using Q8_0 = Q8Format<BlockQ8_0>;
using Q8_1 = Q8Format<BlockQ8_1>;

// ---- row functions ---------------------------------------------------------------

// Blocks are copied in and out with memcpy: callers may pass any alignment.
template <class F>
void to_float_rows(const void* src, float* dst, int64_t n) {
  assert(n % QK == 0);
  const auto* p = static_cast<const unsigned char*>(src);
  typename F::Block b;
  for (int64_t i = 0; i < n / QK; ++i) {
    std::memcpy(&b, p + i * sizeof b, sizeof b);
    F::dequantize(b, dst + i * QK);
  }
}

// from_float: the reference quantizer, or the activation form where a format
// has one (Q8_0, Q8_1).
template <class F, bool kReference = false>
void from_float_rows(const float* src, void* dst, int64_t n) {
  assert(n % QK == 0);
  auto* p = static_cast<unsigned char*>(dst);
  typename F::Block b;
  for (int64_t i = 0; i < n / QK; ++i) {
    if constexpr (!kReference && requires { F::activation(src, b); }) F::activation(src + i * QK, b);
    else F::reference(src + i * QK, b);
    std::memcpy(p + i * sizeof b, &b, sizeof b);
  }
}

// Weights of the block search: w_j = importance_j * sqrt(sigma2 + x_j^2), with
// sigma2 the row's mean square (llama.cpp's combination of an imatrix with the
// data); importance 1 everywhere when there is none. A block whose importance
// is all zero (columns an imatrix never saw used) is fitted as if it were 1.
template <class F>
void quantize_rows(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  if (n_per_row < 0 || n_per_row % QK != 0)
    throw Error("quantize: row length " + std::to_string(n_per_row) + " is not a multiple of the block size " +
                std::to_string(QK));
  if (nrows < 0) throw Error("quantize: negative row count " + std::to_string(nrows));
  if constexpr (!F::kWeighted) {
    from_float_rows<F, true>(src, dst, nrows * n_per_row);
  } else {
    auto* p = static_cast<unsigned char*>(dst);
    typename F::Block b;
    float w[QK];
    for (int64_t r = 0; r < nrows; ++r) {
      const float* x = src + r * n_per_row;
      // The weights are computed on x / max|x| (a common factor changes no
      // block's optimum), so that x^2 neither overflows nor underflows.
      float amax = 0.0f;
      for (int64_t j = 0; j < n_per_row; ++j) amax = std::max(amax, std::fabs(x[j]));
      const double inv = amax > 0.0f ? 1.0 / amax : 0.0;
      double sumx2 = 0;
      for (int64_t j = 0; j < n_per_row; ++j) sumx2 += (x[j] * inv) * (x[j] * inv);
      const double sigma2 = amax > 0.0f ? sumx2 / static_cast<double>(n_per_row) : 1.0;
      for (int64_t ib = 0; ib < n_per_row / QK; ++ib) {
        const float* xb = x + ib * QK;
        float sum_imp = 0.0f;
        if (importance)
          for (int j = 0; j < QK; ++j) sum_imp += std::max(importance[ib * QK + j], 0.0f);
        const bool use_imp = importance && sum_imp > 0.0f;
        for (int j = 0; j < QK; ++j) {
          const float imp = use_imp ? std::max(importance[ib * QK + j], 0.0f) : 1.0f;
          const double xn = xb[j] * inv;
          w[j] = imp * static_cast<float>(std::sqrt(sigma2 + xn * xn));
        }
        F::quantize(xb, w, b);
        std::memcpy(p + (r * (n_per_row / QK) + ib) * sizeof b, &b, sizeof b);
      }
    }
  }
}

template <class F>
constexpr Functions functions_of(DType vec_dot_type) {
  return Functions{to_float_rows<F>, from_float_rows<F>, quantize_rows<F>, vec_dot_type, alignof(typename F::Block)};
}

// vec_dot_type as ggml: Q8_1 (which carries the sum for the offset term) for
// the formats with an offset m, Q8_0 otherwise.
constexpr Functions kQ4_0 = functions_of<Q4_0>(DType::Q8_0);
constexpr Functions kQ4_1 = functions_of<Q4_1>(DType::Q8_1);
constexpr Functions kQ5_0 = functions_of<Q5_0>(DType::Q8_0);
constexpr Functions kQ5_1 = functions_of<Q5_1>(DType::Q8_1);
constexpr Functions kQ8_0 = functions_of<Q8_0>(DType::Q8_0);
constexpr Functions kQ8_1 = functions_of<Q8_1>(DType::Q8_1);
constexpr Functions kIq4nl = functions_of<Iq4nlFormat>(DType::Q8_0);

}  // namespace

std::span<const Binding> legacy_bindings() {
  static constexpr Binding kTable[] = {{DType::Q4_0, kQ4_0}, {DType::Q4_1, kQ4_1}, {DType::Q5_0, kQ5_0},
                                       {DType::Q5_1, kQ5_1}, {DType::Q8_0, kQ8_0}, {DType::Q8_1, kQ8_1},
                                       {DType::IQ4_NL, kIq4nl}};
  return kTable;
}

}  // namespace qlens::quant
