// The K-quant codecs (internal to src/quant/kquants.cpp): each format's
// super-block bytes <-> an Unpacked form (fp16 scale bits, integer sub-block
// scales and mins, one stored quant per element), and the bit layouts that
// several formats share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "qlens/types.h"
#include "quant/kquants.h"
#include "quant/registry.h"

namespace qlens::quant::kq {

// A super-block's fields as integers.
struct Unpacked {
  uint16_t d = 0;        // fp16 bits of the super-block scale
  uint16_t dmin = 0;     // fp16 bits of the scale of the mins (affine types)
  int16_t sc[16] = {};   // sub-block scales (with their sign where the format has one)
  int16_t m[16] = {};    // sub-block mins (affine types)
  uint8_t q[kQK] = {};   // each element's stored quant
};

// fp16 of a scale, saturated: values too large for fp16 give the largest
// finite half rather than infinity (which would dequantize to NaN via inf * 0).
inline uint16_t fp16_sat(float f) { return fp32_to_fp16(std::clamp(f, -65504.0f, 65504.0f)); }

// ---- bit layouts shared by several formats ----

// 2-bit quants (Q2_K; the low bits of Q3_K): element e sits in byte
// 32 * (e / 128) + e % 32 at bit 2 * ((e % 128) / 32).
inline int crumb_byte(int e) { return 32 * (e / 128) + e % 32; }
inline int crumb_shift(int e) { return 2 * ((e % 128) / 32); }
inline void pack_crumbs(const uint8_t* q, uint8_t* qs) {
  std::memset(qs, 0, kQK / 4);
  for (int e = 0; e < kQK; ++e) qs[crumb_byte(e)] |= static_cast<uint8_t>((q[e] & 3) << crumb_shift(e));
}
inline void unpack_crumbs(const uint8_t* qs, uint8_t* q) {
  for (int e = 0; e < kQK; ++e) q[e] = (qs[crumb_byte(e)] >> crumb_shift(e)) & 3;
}

// One bit per element (Q3_K's hmask, Q5_K's qh): element e's bit is bit e / 32
// of byte e % 32. pack takes bit `bit` of each q; unpack ORs it back there.
inline void pack_plane(const uint8_t* q, int bit, uint8_t* plane) {
  std::memset(plane, 0, kQK / 8);
  for (int e = 0; e < kQK; ++e) plane[e % 32] |= static_cast<uint8_t>(((q[e] >> bit) & 1) << (e / 32));
}
inline void unpack_plane(const uint8_t* plane, int bit, uint8_t* q) {
  for (int e = 0; e < kQK; ++e) q[e] |= static_cast<uint8_t>(((plane[e % 32] >> (e / 32)) & 1) << bit);
}

// Nibbles in runs of `run` elements: element e sits in byte run/2 * (e / run) +
// e % (run/2), in the low nibble for the first half of its run. Q4_K and
// Q5_K use runs of 64, IQ4_XS runs of 32.
template <int run>
inline void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  std::memset(qs, 0, kQK / 2);
  for (int e = 0; e < kQK; ++e) {
    const int r = e % run;
    qs[run / 2 * (e / run) + r % (run / 2)] |= static_cast<uint8_t>((q[e] & 15) << (r < run / 2 ? 0 : 4));
  }
}
template <int run>
inline void unpack_nibbles(const uint8_t* qs, uint8_t* q) {
  for (int e = 0; e < kQK; ++e) {
    const int r = e % run;
    q[e] = (qs[run / 2 * (e / run) + r % (run / 2)] >> (r < run / 2 ? 0 : 4)) & 15;
  }
}

// 8 6-bit scales and 8 6-bit mins in 12 bytes (Q4_K, Q5_K). For j < 4, the low
// 6 bits of byte j are scale j and those of byte j + 4 are min j. For j >= 4,
// byte j + 4 holds the low 4 bits of scale j (low nibble) and of min j (high
// nibble); their top 2 bits are the top 2 bits of bytes j - 4 and j.
inline void pack_scales_k4(const int16_t* sc, const int16_t* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] & 63);
    out[j + 4] = static_cast<uint8_t>(m[j] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    out[j + 4] = static_cast<uint8_t>((sc[j] & 15) | ((m[j] & 15) << 4));
    out[j - 4] |= static_cast<uint8_t>(((sc[j] >> 4) & 3) << 6);
    out[j] |= static_cast<uint8_t>(((m[j] >> 4) & 3) << 6);
  }
}
inline void unpack_scales_k4(const uint8_t* in, int16_t* sc, int16_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = in[j] & 63;
    m[j] = in[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<int16_t>((in[j + 4] & 15) | ((in[j - 4] >> 6) << 4));
    m[j] = static_cast<int16_t>((in[j + 4] >> 4) | ((in[j] >> 6) << 4));
  }
}

// 16 6-bit values in 12 bytes (Q3_K): the low 4 bits of value j are the low
// nibble of byte j (j < 8) or the high nibble of byte j - 8; its top 2 bits
// are bits 2 * (j / 4) of byte 8 + j % 4.
inline void pack_scales_q3(const int16_t* v, uint8_t* out) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 16; ++j) {
    out[j % 8] |= static_cast<uint8_t>((v[j] & 15) << (j < 8 ? 0 : 4));
    out[8 + j % 4] |= static_cast<uint8_t>(((v[j] >> 4) & 3) << (2 * (j / 4)));
  }
}
inline void unpack_scales_q3(const uint8_t* in, int16_t* v) {
  for (int j = 0; j < 16; ++j)
    v[j] = static_cast<int16_t>(((in[j % 8] >> (j < 8 ? 0 : 4)) & 15) | (((in[8 + j % 4] >> (2 * (j / 4))) & 3) << 4));
}

// ---- codecs ----
//
// kSub: elements per sub-block; kAffine: x = d sc q - dmin m (else d sc level(q));
// level(q): the value of stored quant q; nearest(v): the stored quant whose
// level is nearest v; kZero: the stored quant of level 0 (or nearest it).

struct Q2K {
  using Block = BlockQ2K;
  static constexpr int kSub = 16;
  static constexpr bool kAffine = true;
  static constexpr int kQMax = 3;       // quants 0..3
  static constexpr int kScaleMax = 15;  // 4-bit scales and mins
  static constexpr int kZero = 0;
  static float level(int q) { return static_cast<float>(q); }
  static int nearest(float v) { return std::clamp(nearest_int(v), 0, kQMax); }
  static void pack(const Unpacked& u, Block& b) {
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>((u.sc[j] & 15) | ((u.m[j] & 15) << 4));
    pack_crumbs(u.q, b.qs);
    b.d = u.d;
    b.dmin = u.dmin;
  }
  static void unpack(const Block& b, Unpacked& u) {
    for (int j = 0; j < 16; ++j) {
      u.sc[j] = b.scales[j] & 15;
      u.m[j] = b.scales[j] >> 4;
    }
    unpack_crumbs(b.qs, u.q);
    u.d = b.d;
    u.dmin = b.dmin;
  }
};

struct Q3K {
  using Block = BlockQ3K;
  static constexpr int kSub = 16;
  static constexpr bool kAffine = false;
  static constexpr int kQHalf = 4;       // levels -4..3, stored as q = level + 4
  static constexpr int kScaleHalf = 32;  // 6-bit scales -32..31, stored + 32
  static constexpr int kZero = 4;
  static float level(int q) { return static_cast<float>(q - 4); }
  static int nearest(float v) { return std::clamp(nearest_int(v), -4, 3) + 4; }
  // Stored q = low 2 bits | hmask bit << 2; the format reads it as
  // low - (hmask bit ? 0 : 4), which is q - 4.
  static void pack(const Unpacked& u, Block& b) {
    int16_t s[16];
    for (int j = 0; j < 16; ++j) s[j] = static_cast<int16_t>(u.sc[j] + 32);
    pack_scales_q3(s, b.scales);
    pack_crumbs(u.q, b.qs);
    pack_plane(u.q, 2, b.hmask);
    b.d = u.d;
  }
  static void unpack(const Block& b, Unpacked& u) {
    unpack_scales_q3(b.scales, u.sc);
    for (int j = 0; j < 16; ++j) u.sc[j] = static_cast<int16_t>(u.sc[j] - 32);
    unpack_crumbs(b.qs, u.q);
    unpack_plane(b.hmask, 2, u.q);
    u.d = b.d;
  }
};

template <class B, int qbits>
struct QK4Family {  // Q4_K (4-bit quants) and Q5_K (5-bit: 4 in qs, the 5th in qh)
  using Block = B;
  static constexpr int kSub = 32;
  static constexpr bool kAffine = true;
  static constexpr int kQMax = (1 << qbits) - 1;
  static constexpr int kScaleMax = 63;  // 6-bit scales and mins
  static constexpr int kZero = 0;
  static float level(int q) { return static_cast<float>(q); }
  static int nearest(float v) { return std::clamp(nearest_int(v), 0, kQMax); }
  static void pack(const Unpacked& u, Block& b) {
    pack_scales_k4(u.sc, u.m, b.scales);
    pack_nibbles<64>(u.q, b.qs);
    if constexpr (qbits == 5) pack_plane(u.q, 4, b.qh);
    b.d = u.d;
    b.dmin = u.dmin;
  }
  static void unpack(const Block& b, Unpacked& u) {
    unpack_scales_k4(b.scales, u.sc, u.m);
    unpack_nibbles<64>(b.qs, u.q);
    if constexpr (qbits == 5) unpack_plane(b.qh, 4, u.q);
    u.d = b.d;
    u.dmin = b.dmin;
  }
};
using Q4K = QK4Family<BlockQ4K, 4>;
using Q5K = QK4Family<BlockQ5K, 5>;

struct Q6K {
  using Block = BlockQ6K;
  static constexpr int kSub = 16;
  static constexpr bool kAffine = false;
  static constexpr int kQHalf = 32;       // levels -32..31, stored as q = level + 32
  static constexpr int kScaleHalf = 128;  // int8 scales
  static constexpr int kZero = 32;
  static float level(int q) { return static_cast<float>(q - 32); }
  static int nearest(float v) { return std::clamp(nearest_int(v), -32, 31) + 32; }
  // Element e = 128 h + 32 k + l (k < 4, l < 32): low 4 bits in ql[64 h + l +
  // 32 (k % 2)] (low nibble for k < 2, high for k >= 2), high 2 bits in
  // qh[32 h + l] at bit 2 k.
  static int low_byte(int e) { return 64 * (e / 128) + e % 32 + 32 * ((e / 32) % 2); }
  static int low_shift(int e) { return (e % 128) / 64 * 4; }
  static int high_byte(int e) { return 32 * (e / 128) + e % 32; }
  static int high_shift(int e) { return 2 * ((e % 128) / 32); }
  static void pack(const Unpacked& u, Block& b) {
    std::memset(b.ql, 0, sizeof b.ql);
    std::memset(b.qh, 0, sizeof b.qh);
    for (int e = 0; e < kQK; ++e) {
      b.ql[low_byte(e)] |= static_cast<uint8_t>((u.q[e] & 15) << low_shift(e));
      b.qh[high_byte(e)] |= static_cast<uint8_t>(((u.q[e] >> 4) & 3) << high_shift(e));
    }
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(u.sc[j]);
    b.d = u.d;
  }
  static void unpack(const Block& b, Unpacked& u) {
    for (int e = 0; e < kQK; ++e)
      u.q[e] = static_cast<uint8_t>(((b.ql[low_byte(e)] >> low_shift(e)) & 15) |
                                    (((b.qh[high_byte(e)] >> high_shift(e)) & 3) << 4));
    for (int j = 0; j < 16; ++j) u.sc[j] = b.scales[j];
    u.d = b.d;
  }
};

struct IQ4XS {
  using Block = BlockIQ4XS;
  static constexpr int kSub = 32;
  static constexpr bool kAffine = false;
  static constexpr int kScaleHalf = 32;  // 6-bit scales -32..31, stored + 32
  static constexpr int kZero = 8;        // level 1, the one nearest 0
  static float level(int q) { return kIq4nlValues[q]; }
  static int nearest(float v) { return iq4_nearest_index(v); }
  // Scale j + 32: low 4 bits in scales_l[j / 2] (low nibble for even j), high
  // 2 bits at bit 2 j of scales_h.
  static void pack(const Unpacked& u, Block& b) {
    std::memset(b.scales_l, 0, sizeof b.scales_l);
    uint16_t h = 0;
    for (int j = 0; j < 8; ++j) {
      const int s = u.sc[j] + 32;
      b.scales_l[j / 2] |= static_cast<uint8_t>((s & 15) << (4 * (j % 2)));
      h |= static_cast<uint16_t>(((s >> 4) & 3) << (2 * j));
    }
    b.scales_h = h;
    pack_nibbles<32>(u.q, b.qs);
    b.d = u.d;
  }
  static void unpack(const Block& b, Unpacked& u) {
    for (int j = 0; j < 8; ++j)
      u.sc[j] = static_cast<int16_t>((((b.scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((b.scales_h >> (2 * j)) & 3) << 4)) - 32);
    unpack_nibbles<32>(b.qs, u.q);
    u.d = b.d;
  }
};

}  // namespace qlens::quant::kq
