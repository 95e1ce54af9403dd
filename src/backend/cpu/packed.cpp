// The packed layout for matrix-vector products (see packed.h): packing, and
// the plain kernel.
#include "backend/cpu/packed.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/qdot.h"
#include "core/parallel.h"
#include "quant/fp4.h"
#include "quant/kquants.h"
#include "quant/kquants_codec.h"
#include "quant/registry.h"
#include "qlens/error.h"

namespace qlens::cpu {

namespace {

using quant::BlockQ4_0;
using quant::BlockQ5_0;
using quant::BlockQ8_0;
constexpr int64_t kBlock = quant::kLegacyBlock;

// Row r's 8 code bytes of piece p of a group block's codes: vector 2p + h
// holds piece p of rows 4h .. 4h + 3 (the legacy types, and Q4_K's and
// IQ4_XS's pieces 4j + c of chunk j).
constexpr size_t piece_at(size_t p, int r) { return (2 * p + r / 4) * 32 + (r % 4) * 8; }

// Block b of the 8 rows from row0 (a legacy type) into its group block: the
// scales (scale_bytes each) in lane order, then the codes in 8-byte pieces,
// piece c of rows 4h .. 4h + 3 in vector 2c + h, each byte XORed with
// code_xor (rows past the tensor stay zero).
void pack_group_block(const Tensor& w, int64_t row0, int64_t b, size_t block_bytes, size_t codes_offset,
                      size_t code_bytes, uint8_t code_xor, size_t scale_bytes, char* dst) {
  std::memset(dst, 0, legacy_group_block(code_bytes, scale_bytes));
  char* qs = dst + kPackRows * scale_bytes;
  for (int lane = 0; lane < kPackRows; ++lane) {
    const int r = kPackLane[lane];
    if (row0 + r >= w.ne[1]) continue;
    const char* blk = w.at(0, row0 + r) + b * block_bytes;
    std::memcpy(dst + lane * scale_bytes, blk, scale_bytes);  // the scale leads every such block
    for (size_t c = 0; c < code_bytes / 8; ++c) {
      char* piece = qs + piece_at(c, r);
      for (int j = 0; j < 8; ++j) piece[j] = static_cast<char>(blk[codes_offset + 8 * c + j] ^ code_xor);
    }
  }
}

// A row's block scale d_w from its kScaleBytes in a group block: fp16, or
// MXFP4's E8M0 exponent (2^(e - 128), the levels being doubled).
template <size_t kScaleBytes>
float packed_scale(const char* gb, int lane) {
  if constexpr (kScaleBytes == 1) {
    return quant::fp4::e8m0_half(static_cast<uint8_t>(gb[lane]));
  } else {
    return fp16_to_fp32(load_u16(gb + lane * sizeof(uint16_t)));
  }
}

// The plain kernels: per row, blocks in order, one float chain:
// acc = fma(float(sum_j v_j q_j), d_w * d_x, acc), which the SIMD kernels
// compute per lane, over a group block of kCodeBytes per row in kPieces
// pieces. piece_sum(codes, c, r, q) gives row r's piece c's part of the sum,
// codes the group block's codes.
template <size_t kCodeBytes, size_t kPieces, class PieceSum, size_t kScaleBytes = 2>
void packed_dot_plain(int64_t k, const char* group, const void* x, float* out, PieceSum piece_sum) {
  const int64_t nb = k / kBlock;
  constexpr size_t kGroupBlock = legacy_group_block(kCodeBytes, kScaleBytes);
  float acc[kPackRows] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kGroupBlock;
    const char* xb = static_cast<const char*>(x) + b * sizeof(BlockQ8_0);
    const auto* q = reinterpret_cast<const int8_t*>(xb + offsetof(BlockQ8_0, qs));
    const float dx = fp16_to_fp32(load_u16(xb + offsetof(BlockQ8_0, d)));
    for (int lane = 0; lane < kPackRows; ++lane) {
      const int r = kPackLane[lane];
      int32_t sum = 0;
      for (size_t c = 0; c < kPieces; ++c)
        sum += piece_sum(reinterpret_cast<const uint8_t*>(gb + kPackRows * kScaleBytes), c, r, q);
      const float dw = packed_scale<kScaleBytes>(gb, lane);
      acc[lane] = std::fma(static_cast<float>(sum), dw * dx, acc[lane]);
    }
  }
  for (int lane = 0; lane < kPackRows; ++lane) out[kPackLane[lane]] = acc[lane];
}

// Q4_0: piece c holds elements 8c .. 8c+7 (low nibbles) and 16+8c .. (high).
void packed_dot_q4_0(int64_t k, const char* group, const void* x, float* out, size_t) {
  packed_dot_plain<16, 2>(k, group, x, out, [](const uint8_t* codes, size_t c, int r, const int8_t* q) {
    const uint8_t* piece = codes + piece_at(c, r);
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j)
      sum += ((piece[j] & 0x0f) - 8) * q[8 * c + j] + ((piece[j] >> 4) - 8) * q[16 + 8 * c + j];
    return sum;
  });
}

// Q5_0: Q4_0's nibbles, and the fifth bits in a plane (packed.h): byte
// 8 (r % 4) + j of vector 2c + h is row r's bytes j of piece c, its nibble
// n element 16 n + 8c + j.
void packed_dot_q5_0(int64_t k, const char* group, const void* x, float* out, size_t) {
  packed_dot_plain<20, 2>(k, group, x, out, [](const uint8_t* codes, size_t c, int r, const int8_t* q) {
    const uint8_t* piece = codes + piece_at(c, r);
    const uint8_t* plane = codes + (kQ5_0HighAt - kPackScales) + 8 * (r % 4);
    int32_t sum = 0;
    for (int n = 0; n < 2; ++n) {
      const int bit = q5_0_plane_bit(static_cast<int>(c), r / 4, n);
      for (int j = 0; j < 8; ++j) {
        const int v = ((piece[j] >> (4 * n)) & 0x0f) | (((plane[j] >> bit) & 1) << 4);
        sum += (v - 16) * q[16 * n + 8 * c + j];
      }
    }
    return sum;
  });
}

// Q8_0: piece c holds elements 8c .. 8c+7 as v + 128 (unsigned, vpdpbusd's
// operand).
void packed_dot_q8_0(int64_t k, const char* group, const void* x, float* out, size_t) {
  packed_dot_plain<32, 4>(k, group, x, out, [](const uint8_t* codes, size_t c, int r, const int8_t* q) {
    const uint8_t* piece = codes + piece_at(c, r);
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j) sum += static_cast<int8_t>(piece[j] ^ 0x80) * q[8 * c + j];
    return sum;
  });
}

// MXFP4: the rows' E8M0 exponent bytes (lane order), then Q4_0's nibble
// pieces (element j the low nibble of byte j, j + 16 the high one); a
// piece's sum of the E2M1 levels (doubled) times q.
void packed_dot_mxfp4(int64_t k, const char* group, const void* x, float* out, size_t) {
  auto piece_sum = [](const uint8_t* codes, size_t c, int r, const int8_t* q) {
    const int8_t* level = quant::fp4::kE2M1Doubled;
    const uint8_t* piece = codes + piece_at(c, r);
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j) sum += level[piece[j] & 15] * q[8 * c + j] + level[piece[j] >> 4] * q[16 + 8 * c + j];
    return sum;
  };
  packed_dot_plain<16, 2, decltype(piece_sum), 1>(k, group, x, out, piece_sum);
}

// Block b of 8 rows of a legacy type: the codes' 8-byte pieces as they are
// (Q4_0, MXFP4), or as v + 128 (Q8_0).
template <class B, uint8_t kXor, size_t kScaleBytes = 2>
void pack_legacy(const Tensor& w, int64_t row0, int64_t b, char* dst) {
  pack_group_block(w, row0, b, sizeof(B), offsetof(B, qs), sizeof(B::qs), kXor, kScaleBytes, dst);
}

// Block b of 8 rows of Q5_0: d and the nibbles as Q4_0's, then the fifth
// bits' plane: element e's fifth bit is qh bit e, element 8c + j the low
// nibble of row r's byte j of piece c (plane byte 8 (r % 4) + j), 16 + 8c +
// j its high nibble.
void pack_q5_0(const Tensor& w, int64_t row0, int64_t b, char* dst) {
  pack_group_block(w, row0, b, sizeof(BlockQ5_0), offsetof(BlockQ5_0, qs), sizeof(BlockQ5_0::qs), 0, 2, dst);
  auto* plane = reinterpret_cast<uint8_t*>(dst + kQ5_0HighAt);
  std::memset(plane, 0, kQ5_0GroupBlock - kQ5_0HighAt);
  for (int r = 0; r < kPackRows && row0 + r < w.ne[1]; ++r) {
    uint32_t qh;
    std::memcpy(&qh, w.at(0, row0 + r) + b * sizeof(BlockQ5_0) + offsetof(BlockQ5_0, qh), sizeof qh);
    for (int c = 0; c < 2; ++c)
      for (int n = 0; n < 2; ++n)
        for (int j = 0; j < 8; ++j)
          plane[8 * (r % 4) + j] |= static_cast<uint8_t>(((qh >> (16 * n + 8 * c + j)) & 1) << q5_0_plane_bit(c, r / 4, n));
  }
}

// ---- Q4_K ----
//
// Per super-block and group of 8 rows (1184 bytes): d[8], dmin[8] (fp16, lane
// order), sc[8 sub-blocks][8 rows] (row order), m[4][8 lanes][2] (the mins of
// sub-blocks 2t and 2t + 1 per lane, lane order), then the codes: vector
// (4 j + c) * 2 + h holds, for rows 4h .. 4h+3, bytes 8c .. 8c+7 of each row's
// 32-byte chunk j (low nibbles: elements 64j + 8c .. +7 of sub-block 2j, high:
// 64j + 32 + 8c .. +7 of sub-block 2j + 1).
using quant::kq::BlockQ4K;
using quant::kq::BlockQ8K;
constexpr int64_t kSuper = quant::kq::kQK;

// Where element e of a super-block sits in the K types' packed codes: chunk j
// of 64, half (the low nibble: +0, the high: +32), piece c of 8, byte i.
struct KPos {
  int j, half, c, i;
};
constexpr KPos k_pos(int e) { return {e / 64, (e % 64) / 32, (e % 32) / 8, e % 8}; }

// Super-block b of a Q8_K activation row, as the plain kernels read it.
struct Q8KBlock {
  float d;
  const int8_t* q;
  int16_t bsums[16];
};
Q8KBlock q8k_block(const void* x, int64_t b) {
  const char* xb = static_cast<const char*>(x) + b * sizeof(BlockQ8K);
  Q8KBlock out;
  std::memcpy(&out.d, xb + offsetof(BlockQ8K, d), sizeof out.d);
  out.q = reinterpret_cast<const int8_t*>(xb + offsetof(BlockQ8K, qs));
  std::memcpy(out.bsums, xb + offsetof(BlockQ8K, bsums), sizeof out.bsums);
  return out;
}

void pack_q4_k(const Tensor& w, int64_t row0, int64_t b, char* dst) {
  std::memset(dst, 0, kQ4KGroupBlock);
  auto* u = reinterpret_cast<uint8_t*>(dst);
  for (int lane = 0; lane < kPackRows; ++lane) {
    const int r = kPackLane[lane];
    if (row0 + r >= w.ne[1]) continue;
    const auto* blk = reinterpret_cast<const uint8_t*>(w.at(0, row0 + r) + b * sizeof(BlockQ4K));
    std::memcpy(dst + lane * 2, blk + offsetof(BlockQ4K, d), 2);
    std::memcpy(dst + kPackScales + lane * 2, blk + offsetof(BlockQ4K, dmin), 2);
    int16_t sc[8], m[8];
    quant::kq::unpack_scales_k4(blk + offsetof(BlockQ4K, scales), sc, m);
    for (int s = 0; s < 8; ++s) {
      u[kQ4KScalesAt + s * kPackRows + r] = static_cast<uint8_t>(sc[s]);
      u[kQ4KMinsAt + (s / 2) * 16 + lane * 2 + s % 2] = static_cast<uint8_t>(m[s]);
    }
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 4; ++c)
        std::memcpy(dst + kQ4KCodesAt + piece_at(4 * j + c, r),
                    blk + offsetof(BlockQ4K, qs) + 32 * j + 8 * c, 8);
  }
}

// Per row, super-blocks in order: the integer sums of codes times scales and
// of mins times the activation's sums, then two float chains, as the SIMD
// kernels: acc = fma(float(isum), d * d_x, acc), accm = fma(float(msum),
// dmin * d_x, accm); out = acc - accm.
void packed_dot_q4_k(int64_t k, const char* group, const void* x, float* out, size_t) {
  const int64_t nb = k / kSuper;
  float acc[kPackRows] = {}, accm[kPackRows] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kQ4KGroupBlock;
    const auto* u = reinterpret_cast<const uint8_t*>(gb);
    const Q8KBlock xb = q8k_block(x, b);
    for (int lane = 0; lane < kPackRows; ++lane) {
      const int r = kPackLane[lane];
      int32_t isum = 0, msum = 0;
      for (int j = 0; j < 4; ++j) {
        int32_t lo = 0, hi = 0;
        for (int c = 0; c < 4; ++c) {
          const uint8_t* codes = u + kQ4KCodesAt + piece_at(4 * j + c, r);
          for (int e = 0; e < 8; ++e) {
            lo += (codes[e] & 0x0f) * xb.q[64 * j + 8 * c + e];
            hi += (codes[e] >> 4) * xb.q[64 * j + 32 + 8 * c + e];
          }
        }
        isum += lo * u[kQ4KScalesAt + (2 * j) * kPackRows + r] + hi * u[kQ4KScalesAt + (2 * j + 1) * kPackRows + r];
      }
      for (int s = 0; s < 8; ++s)
        msum += u[kQ4KMinsAt + (s / 2) * 16 + lane * 2 + s % 2] * (xb.bsums[2 * s] + xb.bsums[2 * s + 1]);
      const float d = fp16_to_fp32(load_u16(gb + lane * 2)), dmin = fp16_to_fp32(load_u16(gb + kPackScales + lane * 2));
      acc[lane] = std::fma(static_cast<float>(isum), d * xb.d, acc[lane]);
      accm[lane] = std::fma(static_cast<float>(msum), dmin * xb.d, accm[lane]);
    }
  }
  for (int lane = 0; lane < kPackRows; ++lane) out[kPackLane[lane]] = acc[lane] - accm[lane];
}

// ---- IQ4_XS ----
//
// Per super-block and group of 8 rows (1168 bytes): d[8] (fp16, lane
// order), sc[8 sub-blocks][8 rows] (int8 s_j - 32, row order: the kernels
// weigh the code sums with them), the same scales as pairs [4][8 lanes][2]
// (the layout of Q4_K's mins: the VNNI kernel's bias term), then the codes
// (0 .. 15, the level kIq4nlValues[code]) in Q4_K's order: vector (4 j + c) *
// 2 + h, rows 4h .. 4h+3, low nibbles elements 64j + 8c .. +7 (sub-block
// 2j), high nibbles 64j + 32 + 8c .. +7 (sub-block 2j + 1).
using quant::kq::BlockIQ4XS;

void pack_iq4_xs(const Tensor& w, int64_t row0, int64_t b, char* dst) {
  std::memset(dst, 0, kIQ4XSGroupBlock);
  auto* u = reinterpret_cast<uint8_t*>(dst);
  for (int lane = 0; lane < kPackRows; ++lane) {
    const int r = kPackLane[lane];
    if (row0 + r >= w.ne[1]) continue;
    const auto* blk = reinterpret_cast<const BlockIQ4XS*>(w.at(0, row0 + r) + b * sizeof(BlockIQ4XS));
    quant::kq::Unpacked un;
    quant::kq::IQ4XS::unpack(*blk, un);
    std::memcpy(dst + lane * 2, &blk->d, 2);
    for (int s = 0; s < 8; ++s) {
      u[kIQ4XSScalesAt + s * kPackRows + r] = static_cast<uint8_t>(un.sc[s]);
      u[kIQ4XSPairsAt + (s / 2) * 16 + lane * 2 + s % 2] = static_cast<uint8_t>(un.sc[s]);
    }
    for (int e = 0; e < kSuper; ++e) {
      const auto [j, half, c, i] = k_pos(e);
      u[kIQ4XSCodesAt + piece_at(4 * j + c, r) + i] |= static_cast<uint8_t>(un.q[e] << (4 * half));
    }
  }
}

// Per row, super-blocks in order: isum = sum over sub-blocks s of sc_s (sum
// level x), exact in int32, then acc = fma(float(isum), d * d_x, acc), as
// the SIMD kernels and ggml's IQ4_XS dot product.
void packed_dot_iq4_xs(int64_t k, const char* group, const void* x, float* out, size_t) {
  const int64_t nb = k / kSuper;
  float acc[kPackRows] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kIQ4XSGroupBlock;
    const auto* u = reinterpret_cast<const uint8_t*>(gb);
    const Q8KBlock xb = q8k_block(x, b);
    for (int lane = 0; lane < kPackRows; ++lane) {
      const int r = kPackLane[lane];
      int32_t sub[8] = {};
      for (int e = 0; e < kSuper; ++e) {
        const auto [j, half, c, i] = k_pos(e);
        const int code = (u[kIQ4XSCodesAt + piece_at(4 * j + c, r) + i] >> (4 * half)) & 15;
        sub[e / 32] += quant::kIq4nlValues[code] * xb.q[e];
      }
      int32_t isum = 0;
      for (int s = 0; s < 8; ++s) isum += static_cast<int8_t>(u[kIQ4XSScalesAt + s * kPackRows + r]) * sub[s];
      acc[lane] = std::fma(static_cast<float>(isum), fp16_to_fp32(load_u16(gb + lane * 2)) * xb.d, acc[lane]);
    }
  }
  for (int lane = 0; lane < kPackRows; ++lane) out[kPackLane[lane]] = acc[lane];
}

// ---- Q6_K ----
//
// Per super-block and group of 8 rows (1680 bytes, as the rows' blocks):
// d[8] (fp16, lane order); sc[8 pairs][8 lanes][2] (int8: the scales of
// sub-blocks 2p and 2p + 1 per lane, the layout of Q4_K's mins); then the
// codes q (0 .. 63; the level is q - 32) as the kernel reads them, one
// sequential stream: for chunk pair t, piece c and half-group h, three
// vectors holding, for rows 4h .. 4h+3, byte e = 0 .. 7 (8 bytes per row):
//   high bits: at bits 0-1 and 2-3 those of elements 64j + 8c + e and
//              64j + 32 + 8c + e of chunk j = 2t, at bits 4-5 and 6-7 those
//              of chunk 2t + 1;
//   low bits of chunk 2t, then of chunk 2t + 1: low nibble element
//              64j + 8c + e, high nibble 64j + 32 + 8c + e (Q4_K's codes).
// (A layout with the low and the high bits in two planes of the block, read
// back and forth, ran at a third of the speed: the hardware prefetcher
// lost the stream.)
using quant::kq::BlockQ6K;

size_t q6k_scale_at(int s, int lane) { return kQ6KScalesAt + (s / 2) * 16 + lane * 2 + s % 2; }

void pack_q6_k(const Tensor& w, int64_t row0, int64_t b, char* dst) {
  std::memset(dst, 0, kQ6KGroupBlock);
  auto* u = reinterpret_cast<uint8_t*>(dst);
  for (int lane = 0; lane < kPackRows; ++lane) {
    const int r = kPackLane[lane];
    if (row0 + r >= w.ne[1]) continue;
    const auto* blk = reinterpret_cast<const BlockQ6K*>(w.at(0, row0 + r) + b * sizeof(BlockQ6K));
    quant::kq::Unpacked un;
    quant::kq::Q6K::unpack(*blk, un);
    std::memcpy(dst + lane * 2, &blk->d, 2);
    for (int s = 0; s < 16; ++s) u[q6k_scale_at(s, lane)] = static_cast<uint8_t>(un.sc[s]);
    for (int e = 0; e < kSuper; ++e) {
      const auto [j, half, c, i] = k_pos(e);
      u[q6k_low_at(j, c, r / 4) + (r % 4) * 8 + i] |= static_cast<uint8_t>((un.q[e] & 15) << (4 * half));
      u[q6k_high_at(j, c, r / 4) + (r % 4) * 8 + i] |= static_cast<uint8_t>((un.q[e] >> 4) << (4 * (j % 2) + 2 * half));
    }
  }
}

// Per row, super-blocks in order: isum = sum over sub-blocks s of sc_s (sum
// q x - 32 B_s), B_s the activation's sum over s (exact in int32), then
// acc = fma(float(isum), d * d_x, acc), as the SIMD kernels.
void packed_dot_q6_k(int64_t k, const char* group, const void* x, float* out, size_t) {
  const int64_t nb = k / kSuper;
  float acc[kPackRows] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kQ6KGroupBlock;
    const auto* u = reinterpret_cast<const uint8_t*>(gb);
    const Q8KBlock xb = q8k_block(x, b);
    for (int lane = 0; lane < kPackRows; ++lane) {
      const int r = kPackLane[lane];
      int32_t sub[16] = {};
      for (int e = 0; e < kSuper; ++e) {
        const auto [j, half, c, i] = k_pos(e);
        const int low = (u[q6k_low_at(j, c, r / 4) + (r % 4) * 8 + i] >> (4 * half)) & 15;
        const int high = (u[q6k_high_at(j, c, r / 4) + (r % 4) * 8 + i] >> (4 * (j % 2) + 2 * half)) & 3;
        sub[e / 16] += (low | high << 4) * xb.q[e];
      }
      int32_t isum = 0, bias = 0;
      for (int s = 0; s < 16; ++s) {
        const int sc = static_cast<int8_t>(u[q6k_scale_at(s, lane)]);
        isum += sc * sub[s];
        bias += sc * xb.bsums[s];
      }
      isum -= 32 * bias;
      acc[lane] = std::fma(static_cast<float>(isum), fp16_to_fp32(load_u16(gb + lane * 2)) * xb.d, acc[lane]);
    }
  }
  for (int lane = 0; lane < kPackRows; ++lane) out[kPackLane[lane]] = acc[lane];
}

// One row per packable type: its blocks (elements, bytes), a group block's
// bytes, the packer of one group block and the plain kernel.
using PackBlockFn = void (*)(const Tensor& w, int64_t row0, int64_t b, char* dst);
struct PackedFormat {
  DType type;
  int64_t block_elems;
  size_t group_block_bytes;
  PackBlockFn pack;
  PackedDotFn plain;
};
constexpr PackedFormat kFormats[] = {
    {DType::Q4_0, kBlock, legacy_group_block(16), pack_legacy<BlockQ4_0, 0x00>, packed_dot_q4_0},
    {DType::Q5_0, kBlock, kQ5_0GroupBlock, pack_q5_0, packed_dot_q5_0},
    {DType::Q8_0, kBlock, legacy_group_block(32), pack_legacy<BlockQ8_0, 0x80>, packed_dot_q8_0},
    {DType::MXFP4, kBlock, legacy_group_block(16, 1), pack_legacy<quant::fp4::BlockMXFP4, 0x00, 1>, packed_dot_mxfp4},
    {DType::Q4_K, kSuper, kQ4KGroupBlock, pack_q4_k, packed_dot_q4_k},
    {DType::Q6_K, kSuper, kQ6KGroupBlock, pack_q6_k, packed_dot_q6_k},
    {DType::IQ4_XS, kSuper, kIQ4XSGroupBlock, pack_iq4_xs, packed_dot_iq4_xs},
};

const PackedFormat* format_of(DType t) {
  for (const PackedFormat& f : kFormats)
    if (f.type == t) return &f;
  return nullptr;
}

}  // namespace

bool packable(DType t) { return format_of(t) != nullptr; }

std::unique_ptr<PackedWeight> pack_weight(const Tensor& w, bool huge_pages) {
  const PackedFormat* f = format_of(w.type);
  if (!f || w.ne[2] != 1 || w.ne[3] != 1 || w.ne[0] % f->block_elems != 0 || !w.is_contiguous())
    throw Error("pack_weight: '" + w.name + "' has no packed layout (" + std::string(type_name(w.type)) + " " +
                shape_string(w) + ")");
  auto p = std::make_unique<PackedWeight>();
  p->source = w.data;
  p->type = w.type;
  p->rows = w.ne[1];
  p->k = w.ne[0];
  const int64_t nb = w.ne[0] / f->block_elems;
  p->group_bytes = nb * f->group_block_bytes;
  p->bytes = alloc_host_memory(p->nbytes(), huge_pages);
  for (int64_t g = 0; g < p->groups(); ++g)
    for (int64_t b = 0; b < nb; ++b) f->pack(w, g * kPackRows, b, p->bytes.get() + g * p->group_bytes + b * f->group_block_bytes);
  return p;
}

size_t PackedWeights::add(std::span<const Tensor* const> weights) {
  std::vector<const Tensor*> todo;
  for (const Tensor* w : weights)
    if (packable(w->type) && w->ne[2] == 1 && w->ne[3] == 1 && w->is_contiguous() && !find(*w) &&
        w->ne[0] % type_traits(w->type).block_size == 0)
      todo.push_back(w);
  std::vector<std::unique_ptr<PackedWeight>> made(todo.size());
  parallel_for(static_cast<int64_t>(todo.size()), 0, [&](int64_t i, int) { made[i] = pack_weight(*todo[i], huge_pages_); });
  size_t added = 0;
  for (auto& p : made) {
    added += p->nbytes();
    by_source_[p->source] = std::move(p);
  }
  return added;
}

void PackedWeights::remove(std::span<const Tensor* const> weights) {
  for (const Tensor* w : weights) by_source_.erase(w->data);
}

const PackedWeight* PackedWeights::find(const Tensor& w) const {
  const auto it = by_source_.find(w.data);
  if (it == by_source_.end()) return nullptr;
  const PackedWeight* p = it->second.get();
  if (p->type != w.type || p->rows != w.ne[1] || p->k != w.ne[0] || w.ne[2] != 1 || w.ne[3] != 1) return nullptr;
  return p;
}

PackedDotFn packed_dot_scalar(DType t) {
  const PackedFormat* f = format_of(t);
  return f ? f->plain : nullptr;
}

}  // namespace qlens::cpu
