// ggml's i-quants on lattice grids: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S (layouts: iquants.h; grids: iq_grids.h). Each block decodes
// to its integer levels (levels.h: the dot kernels' input); to_float computes
// each value from them with ggml's float operations in ggml's order, so that
// it equals ggml's dequantization bit for bit (tests/test_quant_lowbit.cpp,
// against blocks and values llama.cpp wrote).
//
// The quantizers of the signed formats (IQ2_*, IQ3_*) minimize
// sum_j w_j (x_j - y_j)^2, w the importance (1 without an imatrix), over a
// super-block:
//  1. signs: each element's own; where a format keeps 7 sign bits and their
//     parity, a group of 8 with an odd count of negatives gives up the sign of
//     the element that costs least (smallest w |x|), whose target becomes -|x|;
//  2. each run of elements sharing a scale: points and scale by the lattice
//     search (iq_lattice.h), on the formats' true levels (ggml's search
//     models the 2-bit levels 8, 25, 43 as 1, 3, 5);
//  3. the super-block scale d: 0.94, 1 and 1.06 times max scale / top factor;
//     for each, every run's scale code l (the nearest and its two
//     neighbours) with its points chosen again for the scale d * factor(l)
//     that it will really have (ggml keeps the points found for the unrounded
//     scale); the candidate with the least total error is kept.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "qlens/types.h"
#include "quant/block_rows.h"
#include "quant/fp4.h"
#include "quant/iq_grids.h"
#include "quant/iq_lattice.h"
#include "quant/iquants.h"
#include "quant/kquants.h"
#include "quant/levels.h"
#include "quant/lowbit.h"
#include "quant/registry.h"

namespace qlens::quant {
namespace {

using namespace iq;

uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Eight signed levels: the point's coordinates, element j negated by sign bit j.
void signed_levels(uint64_t point, uint8_t signs, int8_t* v) {
  const uint64_t bytes = signed_bytes(point, signs);
  std::memcpy(v, &bytes, 8);
}
// Two half-points of the 3-bit grids (4 coordinates each), signs over all 8.
void signed_halves(uint32_t first, uint32_t second, uint8_t signs, int8_t* v) {
  signed_levels(first | static_cast<uint64_t>(second) << 32, signs, v);
}
// Eight levels of the 1-bit grid, times 8, plus the shift's sign: 8 l +- 1.
void shifted_levels(uint64_t point, bool minus, int8_t* v) {
  for (int j = 0; j < 8; ++j) v[j] = static_cast<int8_t>(8 * coordinate(point, j) + (minus ? -1 : 1));
}

// IQ2_XXS: a group's two 32-bit words: 4 point indices (bytes of the
// first), 4 x 7 sign bits and the 4-bit scale (top) in the second.
void decode_iq2_xxs(const void* block, Levels& L) {
  const auto b = load_block<BlockIQ2XXS>(block, 0);
  L.d = fp16_to_fp32(b.d);
  for (int g = 0; g < kQK / 32; ++g) {
    const uint32_t points = load_u32(b.qs + 4 * g), bits = load_u32(b.qs + 4 * g + 2);
    L.l[g] = static_cast<uint8_t>(bits >> 28);
    for (int k = 0; k < 4; ++k)
      signed_levels(kIq2xxsGrid[points >> (8 * k) & 0xFF], kSigns[bits >> (7 * k) & 127], L.v + 32 * g + 8 * k);
  }
}

// Two 4-bit run codes a byte, the low nibble first (IQ2_XS, IQ2_S: runs of 16).
void nibble_codes(const uint8_t* scales, Levels& L) {
  for (int g = 0; g < kQK / 32; ++g) {
    L.l[2 * g] = scales[g] & 0xF;
    L.l[2 * g + 1] = scales[g] >> 4;
  }
}

// IQ2_XS: per 8 elements a 9-bit point index and 7 sign bits (top); per group
// two 4-bit scales (low nibble: its first 16 elements).
void decode_iq2_xs(const void* block, Levels& L) {
  const auto b = load_block<BlockIQ2XS>(block, 0);
  L.d = fp16_to_fp32(b.d);
  nibble_codes(b.scales, L);
  for (int k = 0; k < kQK / 8; ++k) signed_levels(kIq2xsGrid[b.qs[k] & 511], kSigns[b.qs[k] >> 9], L.v + 8 * k);
}

// IQ2_S: 10-bit point indices (low bytes in qs, 2 bits each from the group's
// qh byte), whole sign bytes after the indices, scales as IQ2_XS.
void decode_iq2_s(const void* block, Levels& L) {
  const auto b = load_block<BlockIQ2S>(block, 0);
  L.d = fp16_to_fp32(b.d);
  nibble_codes(b.scales, L);
  for (int k = 0; k < kQK / 8; ++k) {
    const int index = b.qs[k] | ((b.qh[k / 4] << (8 - 2 * (k % 4))) & 0x300);
    signed_levels(kIq2sGrid[index], b.qs[kQK / 8 + k], L.v + 8 * k);
  }
}

// IQ3_XXS: 64 byte indices of half-points, then per group a 32-bit word of
// 4 x 7 sign bits and the 4-bit scale (top).
void decode_iq3_xxs(const void* block, Levels& L) {
  const auto b = load_block<BlockIQ3XXS>(block, 0);
  L.d = fp16_to_fp32(b.d);
  for (int g = 0; g < kQK / 32; ++g) {
    const uint8_t* qs = b.qs + 8 * g;
    const uint32_t bits = load_u32(b.qs + kQK / 4 + 4 * g);
    L.l[g] = static_cast<uint8_t>(bits >> 28);
    for (int k = 0; k < 4; ++k)
      signed_halves(kIq3xxsGrid[qs[2 * k]], kIq3xxsGrid[qs[2 * k + 1]], kSigns[bits >> (7 * k) & 127],
                    L.v + 32 * g + 8 * k);
  }
}

// IQ3_S: 9-bit half-point indices (low bytes in qs, the 9th bits in the
// group's qh byte), whole sign bytes, a 4-bit scale per group (two a byte).
void decode_iq3_s(const void* block, Levels& L) {
  const auto b = load_block<BlockIQ3S>(block, 0);
  L.d = fp16_to_fp32(b.d);
  for (int g = 0; g < kQK / 32; ++g) {
    L.l[g] = static_cast<uint8_t>(g % 2 == 0 ? b.scales[g / 2] & 0xF : b.scales[g / 2] >> 4);
    const uint8_t* qs = b.qs + 8 * g;
    const int qh = b.qh[g];
    for (int k = 0; k < 4; ++k) {
      const int first = qs[2 * k] | ((qh << (8 - 2 * k)) & 256);
      const int second = qs[2 * k + 1] | ((qh << (7 - 2 * k)) & 256);
      signed_halves(kIq3sGrid[first], kIq3sGrid[second], b.signs[4 * g + k], L.v + 32 * g + 8 * k);
    }
  }
}

// IQ1_S: 11-bit point indices (low bytes in qs, 3 bits each from the group's
// qh word), the group's scale in qh bits 12-14 and the shift's sign in bit 15.
void decode_iq1_s(const void* block, Levels& L) {
  const auto b = load_block<BlockIQ1S>(block, 0);
  L.d = fp16_to_fp32(b.d);
  for (int g = 0; g < kQK / 32; ++g) {
    const int qh = b.qh[g];
    L.l[g] = static_cast<uint8_t>((qh >> 12) & 7);
    for (int k = 0; k < 4; ++k)
      shifted_levels(kIq1sGrid[b.qs[4 * g + k] | (((qh >> (3 * k)) & 7) << 8)], qh & 0x8000, L.v + 32 * g + 8 * k);
  }
}

// IQ1_M: per 16 elements a qh byte (two nibbles: 3 index bits, then the
// shift's sign) and a 3-bit scale (four per 16-bit scale word, whose top
// nibbles together are the fp16 super-block scale).
void decode_iq1_m(const void* block, Levels& L) {
  const auto b = load_block<BlockIQ1M>(block, 0);
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof sc);
  L.d = fp16_to_fp32((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  for (int r = 0; r < kQK / 16; ++r) L.l[r] = static_cast<uint8_t>((sc[r / 4] >> (3 * (r % 4))) & 7);
  for (int p = 0; p < kQK / 8; ++p) {
    const int h = b.qh[p / 2] >> (4 * (p % 2));  // this point's nibble
    shifted_levels(kIq1sGrid[b.qs[p] | ((h & 7) << 8)], h & 8, L.v + 8 * p);
  }
}

float quarter_half_steps(float d, int l) { return d * (0.5f + static_cast<float>(l)) * 0.25f; }  // IQ2_*
float half_half_steps(float d, int l) { return d * (0.5f + static_cast<float>(l)) * 0.5f; }      // IQ3_XXS
float odd_steps(float d, int l) { return d * static_cast<float>(1 + 2 * l); }                   // IQ3_S, IQ1_*

constexpr LevelFormat kIq2xxsLevels{decode_iq2_xxs, 32, 0.125f, quarter_half_steps, 1.0f};
constexpr LevelFormat kIq2xsLevels{decode_iq2_xs, 16, 0.125f, quarter_half_steps, 1.0f};
constexpr LevelFormat kIq2sLevels{decode_iq2_s, 16, 0.125f, quarter_half_steps, 1.0f};
constexpr LevelFormat kIq3xxsLevels{decode_iq3_xxs, 32, 0.25f, half_half_steps, 1.0f};
constexpr LevelFormat kIq3sLevels{decode_iq3_s, 32, 1.0f, odd_steps, 1.0f};
constexpr LevelFormat kIq1sLevels{decode_iq1_s, 32, 0.125f, odd_steps, 0.125f};
constexpr LevelFormat kIq1mLevels{decode_iq1_m, 16, 0.125f, odd_steps, 0.125f};

// ---- quantizers of the signed formats ---------------------------------------------

// A signed format's shape: its lattice, how many elements share a scale
// code, whether its signs keep 7 bits and their parity, and the scale a code
// l in 0..15 gives: d * factor(l).
struct SignedFormat {
  const Lattice& (*lattice)();
  int run;
  bool parity;
  float (*factor)(int l);
};

// The scale of code l for d = 1.
float iq2_factor(int l) { return quarter_half_steps(1.0f, l); }
float iq3_xxs_factor(int l) { return half_half_steps(1.0f, l); }
float iq3_s_factor(int l) { return odd_steps(1.0f, l); }

// What a super-block's quantization chose.
struct SignedBlock {
  float d = 0;
  uint8_t signs[kQK / 8] = {};  // per group of 8, bit j negates element j (even count where parity)
  uint8_t codes[kQK / 16] = {};  // per run, l
  uint16_t points[kQK / 4] = {};  // per lattice point, in order
};

// Step 1: the signs and the targets t (magnitudes, -|x| where a sign was given up).
void choose_signs(const float* x, const float* w, bool parity, SignedBlock& b, float* t) {
  for (int g = 0; g < kQK / 8; ++g) {
    uint8_t bits = 0;
    for (int j = 0; j < 8; ++j) {
      t[8 * g + j] = std::fabs(x[8 * g + j]);
      if (x[8 * g + j] < 0) bits |= static_cast<uint8_t>(1 << j);
    }
    if (parity && std::popcount(static_cast<unsigned>(bits)) % 2 != 0) {
      int cheapest = 0;
      for (int j = 1; j < 8; ++j)
        if (w[8 * g + j] * t[8 * g + j] < w[8 * g + cheapest] * t[8 * g + cheapest]) cheapest = j;
      bits ^= static_cast<uint8_t>(1 << cheapest);
      t[8 * g + cheapest] = -t[8 * g + cheapest];
    }
    b.signs[g] = bits;
  }
}

// Step 3, shared with the 1-bit formats: the super-block scale d (0.94, 1
// and 1.06 times the largest run scale over the top code's factor, rounded
// to fp16) and, for each, every run's code (the one whose scale is nearest
// the run's own, and its two neighbours) with its points chosen again for
// the scale d * factor(l) it will have; the d with the least total error
// wins. points(r, s): run r's points for scale s. d = 0 when every run's
// scale is 0.
struct CodedRuns {
  float d = 0;
  uint8_t codes[kQK / 16] = {};
  PointFit fits[kQK / 16];
};

template <class Points>
CodedRuns choose_codes(const PointFit* fits, int n_runs, int top_code, float (*factor)(int), Points points) {
  float max_scale = 0;
  for (int r = 0; r < n_runs; ++r) max_scale = std::max(max_scale, fits[r].scale);
  CodedRuns best;
  if (!(max_scale > 0)) return best;
  double best_error = INFINITY;
  for (float m : {0.94f, 1.0f, 1.06f}) {
    CodedRuns c;
    c.d = fp16_to_fp32(fp32_to_fp16(std::min(max_scale / factor(top_code) * m, 65504.0f)));
    if (!(c.d > 0)) continue;
    double total = 0;
    for (int r = 0; r < n_runs; ++r) {
      int nearest = 0;
      for (int l = 1; l <= top_code; ++l)
        if (std::fabs(c.d * factor(l) - fits[r].scale) < std::fabs(c.d * factor(nearest) - fits[r].scale)) nearest = l;
      c.fits[r].error = INFINITY;
      c.codes[r] = static_cast<uint8_t>(nearest);
      for (int l = std::max(nearest - 1, 0); l <= std::min(nearest + 1, top_code); ++l) {
        const PointFit fit = points(r, c.d * factor(l));
        if (fit.error < c.fits[r].error) {
          c.fits[r] = fit;
          c.codes[r] = static_cast<uint8_t>(l);
        }
      }
      total += c.fits[r].error;
    }
    if (total < best_error) {
      best_error = total;
      best = c;
    }
  }
  return best;
}

SignedBlock quantize_signed(const SignedFormat& f, const float* x, const float* w) {
  const Lattice& lattice = f.lattice();
  SignedBlock b;
  float t[kQK];
  choose_signs(x, w, f.parity, b, t);
  const int n_runs = kQK / f.run, per_run = f.run / lattice.coords();
  PointFit fits[kQK / 16];
  for (int r = 0; r < n_runs; ++r) fits[r] = fit_points(lattice, t + r * f.run, w + r * f.run, f.run);
  const CodedRuns c = choose_codes(fits, n_runs, 15, f.factor, [&](int r, float s) {
    return points_for_scale(lattice, t + r * f.run, w + r * f.run, f.run, s);
  });
  b.d = c.d;
  for (int r = 0; r < n_runs && c.d > 0; ++r) {
    b.codes[r] = c.codes[r];
    std::copy(c.fits[r].points, c.fits[r].points + per_run, b.points + r * per_run);
  }
  return b;
}

void pack_iq2_xxs(const SignedBlock& s, BlockIQ2XXS& b) {
  b.d = fp32_to_fp16(s.d);
  for (int g = 0; g < kQK / 32; ++g) {
    uint32_t points = 0, bits = static_cast<uint32_t>(s.codes[g]) << 28;
    for (int k = 0; k < 4; ++k) {
      points |= static_cast<uint32_t>(s.points[4 * g + k]) << (8 * k);
      bits |= static_cast<uint32_t>(s.signs[4 * g + k] & 127) << (7 * k);
    }
    std::memcpy(b.qs + 4 * g, &points, 4);
    std::memcpy(b.qs + 4 * g + 2, &bits, 4);
  }
}
void pack_iq2_xs(const SignedBlock& s, BlockIQ2XS& b) {
  b.d = fp32_to_fp16(s.d);
  for (int k = 0; k < kQK / 8; ++k) b.qs[k] = static_cast<uint16_t>(s.points[k] | ((s.signs[k] & 127) << 9));
  for (int g = 0; g < kQK / 32; ++g) b.scales[g] = static_cast<uint8_t>(s.codes[2 * g] | (s.codes[2 * g + 1] << 4));
}
void pack_iq2_s(const SignedBlock& s, BlockIQ2S& b) {
  b.d = fp32_to_fp16(s.d);
  std::fill(std::begin(b.qh), std::end(b.qh), 0);
  for (int k = 0; k < kQK / 8; ++k) {
    b.qs[k] = static_cast<uint8_t>(s.points[k] & 0xFF);
    b.qs[kQK / 8 + k] = s.signs[k];
    b.qh[k / 4] |= static_cast<uint8_t>((s.points[k] >> 8) << (2 * (k % 4)));
  }
  for (int g = 0; g < kQK / 32; ++g) b.scales[g] = static_cast<uint8_t>(s.codes[2 * g] | (s.codes[2 * g + 1] << 4));
}
void pack_iq3_xxs(const SignedBlock& s, BlockIQ3XXS& b) {
  b.d = fp32_to_fp16(s.d);
  for (int k = 0; k < kQK / 4; ++k) b.qs[k] = static_cast<uint8_t>(s.points[k]);
  for (int g = 0; g < kQK / 32; ++g) {
    uint32_t bits = static_cast<uint32_t>(s.codes[g]) << 28;
    for (int k = 0; k < 4; ++k) bits |= static_cast<uint32_t>(s.signs[4 * g + k] & 127) << (7 * k);
    std::memcpy(b.qs + kQK / 4 + 4 * g, &bits, 4);
  }
}
void pack_iq3_s(const SignedBlock& s, BlockIQ3S& b) {
  b.d = fp32_to_fp16(s.d);
  std::fill(std::begin(b.qh), std::end(b.qh), 0);
  for (int k = 0; k < kQK / 4; ++k) {
    b.qs[k] = static_cast<uint8_t>(s.points[k] & 0xFF);
    b.qh[k / 8] |= static_cast<uint8_t>((s.points[k] >> 8) << (k % 8));
  }
  std::copy(s.signs, s.signs + kQK / 8, b.signs);
  for (int r = 0; r < kQK / 64; ++r) b.scales[r] = static_cast<uint8_t>(s.codes[2 * r] | (s.codes[2 * r + 1] << 4));
}

constexpr SignedFormat kIq2xxs{iq2xxs_lattice, 32, true, iq2_factor};
constexpr SignedFormat kIq2xs{iq2xs_lattice, 16, true, iq2_factor};
constexpr SignedFormat kIq2s{iq2s_lattice, 16, false, iq2_factor};
constexpr SignedFormat kIq3xxs{iq3xxs_lattice, 32, true, iq3_xxs_factor};
constexpr SignedFormat kIq3s{iq3s_lattice, 32, false, iq3_s_factor};

template <const SignedFormat& kFormat, class Block, void (*kPack)(const SignedBlock&, Block&)>
void fit_signed(const float* x, const float* w, Block& b) {
  kPack(quantize_signed(kFormat, x, w), b);
}

// ---- quantizers of the 1-bit formats -----------------------------------------------
//
// Their points' levels -1, 0, 1 are shifted by +-1/8 (IQ1_S: one shift per 32
// elements; IQ1_M: one per point of 8), so the search runs on two lattices,
// the levels times 8: the scale of a code l is d * (2l + 1) / 8. IQ1_S's run
// tries both shifts and keeps the better; IQ1_M's points each take the
// better. The super-block scale as for the signed formats (3-bit codes).

float eighth_odd_steps(int l) { return static_cast<float>(2 * l + 1) / 8.0f; }

struct ShiftedBlock {
  float d = 0;
  uint8_t codes[kQK / 16] = {};  // per run, l (0..7)
  uint16_t points[kQK / 8] = {};
  bool minus[kQK / 8] = {};  // per point, shifted by -1/8
};

// A run's points for scale s (or, s = 0, its own search): per run (IQ1_S)
// the better lattice, per point (IQ1_M) the better of the two.
PointFit shifted_points(const float* x, const float* w, int run, bool per_point, float s) {
  const Lattice &plus = iq1_plus_lattice(), &minus = iq1_minus_lattice();
  if (per_point) return s > 0 ? points_for_scale(plus, x, w, run, s, &minus) : fit_points(plus, x, w, run, &minus);
  PointFit a = s > 0 ? points_for_scale(plus, x, w, run, s) : fit_points(plus, x, w, run);
  PointFit b = s > 0 ? points_for_scale(minus, x, w, run, s) : fit_points(minus, x, w, run);
  if (b.error < a.error) {
    std::fill(b.on_alt, b.on_alt + run / 8, true);
    return b;
  }
  return a;
}

ShiftedBlock quantize_shifted(const float* x, const float* w, int run, bool per_point) {
  const int n_runs = kQK / run, per_run = run / 8;
  PointFit fits[kQK / 16];
  for (int r = 0; r < n_runs; ++r) fits[r] = shifted_points(x + r * run, w + r * run, run, per_point, 0.0f);
  const CodedRuns c = choose_codes(fits, n_runs, 7, eighth_odd_steps, [&](int r, float s) {
    return shifted_points(x + r * run, w + r * run, run, per_point, s);
  });
  ShiftedBlock b;
  b.d = c.d;
  for (int r = 0; r < n_runs && c.d > 0; ++r) {
    b.codes[r] = c.codes[r];
    std::copy(c.fits[r].points, c.fits[r].points + per_run, b.points + r * per_run);
    std::copy(c.fits[r].on_alt, c.fits[r].on_alt + per_run, b.minus + r * per_run);
  }
  return b;
}

void fit_iq1_s(const float* x, const float* w, BlockIQ1S& b) {
  const ShiftedBlock s = quantize_shifted(x, w, 32, false);
  b.d = fp32_to_fp16(s.d);
  for (int g = 0; g < kQK / 32; ++g) {
    uint16_t qh = static_cast<uint16_t>((s.codes[g] << 12) | (s.minus[4 * g] ? 0x8000 : 0));
    for (int k = 0; k < 4; ++k) {
      b.qs[4 * g + k] = static_cast<uint8_t>(s.points[4 * g + k] & 0xFF);
      qh = static_cast<uint16_t>(qh | ((s.points[4 * g + k] >> 8) << (3 * k)));
    }
    b.qh[g] = qh;
  }
}

void fit_iq1_m(const float* x, const float* w, BlockIQ1M& b) {
  const ShiftedBlock s = quantize_shifted(x, w, 16, true);
  const uint16_t d16 = fp32_to_fp16(s.d);
  uint16_t sc[4] = {};
  for (int r = 0; r < kQK / 16; ++r) sc[r / 4] = static_cast<uint16_t>(sc[r / 4] | (s.codes[r] << (3 * (r % 4))));
  for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>(sc[k] | (((d16 >> (4 * k)) & 0xF) << 12));
  std::memcpy(b.scales, sc, sizeof sc);
  std::fill(std::begin(b.qh), std::end(b.qh), 0);
  for (int p = 0; p < kQK / 8; ++p) {
    b.qs[p] = static_cast<uint8_t>(s.points[p] & 0xFF);
    const int nibble = ((s.points[p] >> 8) & 7) | (s.minus[p] ? 8 : 0);
    b.qh[p / 2] = static_cast<uint8_t>(b.qh[p / 2] | (nibble << (4 * (p % 2))));
  }
}

// Weight-only types (no from_float: never an activation).
template <class Block, void (*kFit)(const float*, const float*, Block&)>
constexpr Functions weight_format(ToFloatFn to_float) {
  return Functions{to_float, nullptr, quantize_block_rows<kQK, Block, kFit>, DType::Q8_K, alignof(Block)};
}

}  // namespace

const ScaledFormat* scaled_format(DType type) {
  if (const ScaledFormat* f = lowbit_scaled_format(type)) return f;
  return fp4_scaled_format(type);
}

const LevelFormat* level_format(DType type) {
  switch (type) {
    case DType::IQ2_XXS: return &kIq2xxsLevels;
    case DType::IQ2_XS: return &kIq2xsLevels;
    case DType::IQ2_S: return &kIq2sLevels;
    case DType::IQ3_XXS: return &kIq3xxsLevels;
    case DType::IQ3_S: return &kIq3sLevels;
    case DType::IQ1_S: return &kIq1sLevels;
    case DType::IQ1_M: return &kIq1mLevels;
    default: return lowbit_level_format(type);
  }
}

std::span<const Binding> iquant_bindings() {
  static constexpr Binding kTable[] = {
      {DType::IQ2_XXS, weight_format<BlockIQ2XXS, fit_signed<kIq2xxs, BlockIQ2XXS, pack_iq2_xxs>>(levels_to_float<kIq2xxsLevels, sizeof(BlockIQ2XXS)>)},
      {DType::IQ2_XS, weight_format<BlockIQ2XS, fit_signed<kIq2xs, BlockIQ2XS, pack_iq2_xs>>(levels_to_float<kIq2xsLevels, sizeof(BlockIQ2XS)>)},
      {DType::IQ2_S, weight_format<BlockIQ2S, fit_signed<kIq2s, BlockIQ2S, pack_iq2_s>>(levels_to_float<kIq2sLevels, sizeof(BlockIQ2S)>)},
      {DType::IQ3_XXS, weight_format<BlockIQ3XXS, fit_signed<kIq3xxs, BlockIQ3XXS, pack_iq3_xxs>>(levels_to_float<kIq3xxsLevels, sizeof(BlockIQ3XXS)>)},
      {DType::IQ3_S, weight_format<BlockIQ3S, fit_signed<kIq3s, BlockIQ3S, pack_iq3_s>>(levels_to_float<kIq3sLevels, sizeof(BlockIQ3S)>)},
      {DType::IQ1_S, weight_format<BlockIQ1S, fit_iq1_s>(levels_to_float<kIq1sLevels, sizeof(BlockIQ1S)>)},
      {DType::IQ1_M, weight_format<BlockIQ1M, fit_iq1_m>(levels_to_float<kIq1mLevels, sizeof(BlockIQ1M)>)},
  };
  return kTable;
}

}  // namespace qlens::quant
