// The packed layout for matrix-vector products (see packed.h): packing, and
// the plain kernel.
#include "backend/cpu/packed.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cpu/qdot.h"
#include "qlens/error.h"

namespace qlens::cpu {

namespace {

using quant::BlockQ4_0;
using quant::BlockQ8_0;
constexpr int64_t kBlock = quant::kLegacyBlock;
constexpr size_t kScales = kPackRows * sizeof(uint16_t);  // a group block's scales

// Block b of row r (of 8 starting at row0) into its group block: the scale in
// lane order, and the `piece`-byte pieces of its codes, piece c of rows 4h ..
// 4h + 3 in vector (c * 2 + h) (rows past the tensor stay zero).
void pack_group_block(const Tensor& w, int64_t row0, int64_t b, size_t block_bytes, size_t codes_offset,
                      size_t code_bytes, uint8_t code_xor, char* dst) {
  std::memset(dst, 0, kScales + kPackRows * code_bytes);
  char* qs = dst + kScales;
  for (int lane = 0; lane < kPackRows; ++lane) {
    const int r = kPackLane[lane];
    if (row0 + r >= w.ne[1]) continue;
    const char* blk = w.at(0, row0 + r) + b * block_bytes;
    std::memcpy(dst + lane * sizeof(uint16_t), blk, sizeof(uint16_t));  // d leads both block types
    for (size_t c = 0; c < code_bytes / 8; ++c) {
      char* piece = qs + (2 * c + r / 4) * 32 + (r % 4) * 8;
      for (int j = 0; j < 8; ++j) piece[j] = static_cast<char>(blk[codes_offset + 8 * c + j] ^ code_xor);
    }
  }
}

// The plain kernels: per row, blocks in order, one float chain:
// acc = fma(float(sum_j v_j q_j), d_w * d_x, acc), which the SIMD kernels
// compute per lane. value(codes, j, q) gives piece j's part of the sum.
template <size_t kCodeBytes, class PieceSum>
void packed_dot_plain(int64_t k, const char* group, const void* x, float* out, PieceSum piece_sum) {
  const int64_t nb = k / kBlock;
  constexpr size_t kGroupBlock = kScales + kPackRows * kCodeBytes;
  float acc[kPackRows] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kGroupBlock;
    const char* xb = static_cast<const char*>(x) + b * sizeof(BlockQ8_0);
    const auto* q = reinterpret_cast<const int8_t*>(xb + offsetof(BlockQ8_0, qs));
    const float dx = fp16_to_fp32(load_u16(xb + offsetof(BlockQ8_0, d)));
    for (int lane = 0; lane < kPackRows; ++lane) {
      const int r = kPackLane[lane];
      int32_t sum = 0;
      for (size_t c = 0; c < kCodeBytes / 8; ++c)
        sum += piece_sum(reinterpret_cast<const uint8_t*>(gb + kScales + (2 * c + r / 4) * 32 + (r % 4) * 8), c, q);
      const float dw = fp16_to_fp32(load_u16(gb + lane * sizeof(uint16_t)));
      acc[lane] = std::fma(static_cast<float>(sum), dw * dx, acc[lane]);
    }
  }
  for (int lane = 0; lane < kPackRows; ++lane) out[kPackLane[lane]] = acc[lane];
}

// Q4_0: piece c holds elements 8c .. 8c+7 (low nibbles) and 16+8c .. (high).
void packed_dot_q4_0(int64_t k, const char* group, const void* x, float* out) {
  packed_dot_plain<16>(k, group, x, out, [](const uint8_t* codes, size_t c, const int8_t* q) {
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j)
      sum += ((codes[j] & 0x0f) - 8) * q[8 * c + j] + ((codes[j] >> 4) - 8) * q[16 + 8 * c + j];
    return sum;
  });
}

// Q8_0: piece c holds elements 8c .. 8c+7 as v + 128 (unsigned, vpdpbusd's
// operand).
void packed_dot_q8_0(int64_t k, const char* group, const void* x, float* out) {
  packed_dot_plain<32>(k, group, x, out, [](const uint8_t* codes, size_t c, const int8_t* q) {
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j) sum += static_cast<int8_t>(codes[j] ^ 0x80) * q[8 * c + j];
    return sum;
  });
}

// One row per packable type: block bytes, where its codes start and how many
// there are, what the codes are stored as, and the plain kernel.
struct PackedFormat {
  DType type;
  size_t block_bytes, codes_offset, code_bytes;
  uint8_t code_xor;
  PackedDotFn plain;
};
constexpr PackedFormat kFormats[] = {
    {DType::Q4_0, sizeof(BlockQ4_0), offsetof(BlockQ4_0, qs), 16, 0x00, packed_dot_q4_0},
    {DType::Q8_0, sizeof(BlockQ8_0), offsetof(BlockQ8_0, qs), 32, 0x80, packed_dot_q8_0},
};

const PackedFormat* format_of(DType t) {
  for (const PackedFormat& f : kFormats)
    if (f.type == t) return &f;
  return nullptr;
}

}  // namespace

bool packable(DType t) {
  // QLENS_CPU_PACK=0: no packed copies (the original row kernels), for
  // measuring one against the other.
  static const bool enabled = [] {
    const char* e = std::getenv("QLENS_CPU_PACK");
    return !(e && std::string(e) == "0");
  }();
  return enabled && format_of(t);
}

std::unique_ptr<PackedWeight> pack_weight(const Tensor& w) {
  const PackedFormat* f = format_of(w.type);
  if (!f || w.ne[2] != 1 || w.ne[3] != 1 || w.ne[0] % kBlock != 0 || !w.is_contiguous())
    throw Error("pack_weight: '" + w.name + "' has no packed layout (" + std::string(type_name(w.type)) + " " +
                shape_string(w) + ")");
  auto p = std::make_unique<PackedWeight>();
  p->source = w.data;
  p->type = w.type;
  p->rows = w.ne[1];
  p->k = w.ne[0];
  const int64_t nb = w.ne[0] / kBlock;
  const size_t group_block = kScales + kPackRows * f->code_bytes;
  p->group_bytes = nb * group_block;
  const int64_t groups = (w.ne[1] + kPackRows - 1) / kPackRows;
  p->bytes.reset(new char[groups * p->group_bytes]);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < nb; ++b)
      pack_group_block(w, g * kPackRows, b, f->block_bytes, f->codes_offset, f->code_bytes, f->code_xor,
                       p->bytes.get() + g * p->group_bytes + b * group_block);
  return p;
}

const PackedWeight* packed_of(const Tensor& w) {
  const auto* p = static_cast<const PackedWeight*>(w.packed);
  if (!p || p->source != w.data || p->type != w.type || p->rows != w.ne[1] || p->k != w.ne[0] || w.ne[2] != 1 ||
      w.ne[3] != 1)
    return nullptr;
  return p;
}

PackedDotFn packed_dot_scalar(DType t) {
  const PackedFormat* f = format_of(t);
  return f ? f->plain : nullptr;
}

}  // namespace qlens::cpu
