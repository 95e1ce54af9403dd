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
// One group block of Q4_0: kPackRows scales, then kPackRows * 16 code bytes.
constexpr size_t kQ4_0GroupBlock = kPackRows * sizeof(BlockQ4_0);

// Block b of rows [row0, row0 + 8) (rows past `rows` as zero blocks) into
// `dst` (kQ4_0GroupBlock bytes).
void pack_q4_0_block(const Tensor& w, int64_t row0, int64_t b, char* dst) {
  std::memset(dst, 0, kQ4_0GroupBlock);
  char* qs = dst + kPackRows * sizeof(uint16_t);
  for (int lane = 0; lane < kPackRows; ++lane) {
    const int r = kPackLane[lane];
    if (row0 + r >= w.ne[1]) continue;
    const char* blk = w.at(0, row0 + r) + b * sizeof(BlockQ4_0);
    std::memcpy(dst + lane * sizeof(uint16_t), blk + offsetof(BlockQ4_0, d), sizeof(uint16_t));
    for (int c = 0; c < 2; ++c) {
      const int h = r / 4;
      std::memcpy(qs + (2 * c + h) * 32 + (r % 4) * 8, blk + offsetof(BlockQ4_0, qs) + 8 * c, 8);
    }
  }
}

// The plain kernel: per row, blocks in order, one float chain:
// acc = fma(float(sum_j (c_j - 8) q_j), d_w * d_x, acc), which the SIMD
// kernels compute per lane.
void packed_dot_q4_0(int64_t k, const char* group, const void* x, float* out) {
  const int64_t nb = k / kBlock;
  float acc[kPackRows] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kQ4_0GroupBlock;
    const char* qs = gb + kPackRows * sizeof(uint16_t);
    const char* xb = static_cast<const char*>(x) + b * sizeof(BlockQ8_0);
    const auto* q = reinterpret_cast<const int8_t*>(xb + offsetof(BlockQ8_0, qs));
    const float dx = fp16_to_fp32(load_u16(xb + offsetof(BlockQ8_0, d)));
    for (int lane = 0; lane < kPackRows; ++lane) {
      const int r = kPackLane[lane];
      int32_t sum = 0;
      for (int c = 0; c < 2; ++c) {
        const auto* codes = reinterpret_cast<const uint8_t*>(qs + (2 * c + r / 4) * 32 + (r % 4) * 8);
        for (int j = 0; j < 8; ++j) {
          sum += ((codes[j] & 0x0f) - 8) * q[8 * c + j];
          sum += ((codes[j] >> 4) - 8) * q[16 + 8 * c + j];
        }
      }
      const float dw = fp16_to_fp32(load_u16(gb + lane * sizeof(uint16_t)));
      acc[lane] = std::fma(static_cast<float>(sum), dw * dx, acc[lane]);
    }
  }
  for (int lane = 0; lane < kPackRows; ++lane) out[kPackLane[lane]] = acc[lane];
}

}  // namespace

bool packable(DType t) {
  // QLENS_CPU_PACK=0: no packed copies (the original row kernels), for
  // measuring one against the other.
  static const bool enabled = [] {
    const char* e = std::getenv("QLENS_CPU_PACK");
    return !(e && std::string(e) == "0");
  }();
  return enabled && t == DType::Q4_0;
}

std::unique_ptr<PackedWeight> pack_weight(const Tensor& w) {
  if (!packable(w.type) || w.ne[2] != 1 || w.ne[3] != 1 || w.ne[0] % kBlock != 0 || !w.is_contiguous())
    throw Error("pack_weight: '" + w.name + "' has no packed layout (" + std::string(type_name(w.type)) + " " +
                shape_string(w) + ")");
  auto p = std::make_unique<PackedWeight>();
  p->source = w.data;
  p->type = w.type;
  p->rows = w.ne[1];
  p->k = w.ne[0];
  const int64_t nb = w.ne[0] / kBlock;
  p->group_bytes = nb * kQ4_0GroupBlock;
  const int64_t groups = (w.ne[1] + kPackRows - 1) / kPackRows;
  p->bytes.reset(new char[groups * p->group_bytes]);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < nb; ++b) pack_q4_0_block(w, g * kPackRows, b, p->bytes.get() + g * p->group_bytes + b * kQ4_0GroupBlock);
  return p;
}

const PackedWeight* packed_of(const Tensor& w) {
  const auto* p = static_cast<const PackedWeight*>(w.packed);
  if (!p || p->source != w.data || p->type != w.type || p->rows != w.ne[1] || p->k != w.ne[0] || w.ne[2] != 1 ||
      w.ne[3] != 1)
    return nullptr;
  return p;
}

PackedDotFn packed_dot_scalar(DType t) { return t == DType::Q4_0 ? packed_dot_q4_0 : nullptr; }

}  // namespace qlens::cpu
