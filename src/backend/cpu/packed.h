// Weights laid out for matrix-vector products (generation, one activation
// row): rows in groups of kPackRows whose blocks are interleaved, so that one
// activation load feeds eight rows and the per-block float work (int32 to
// float, scale products, accumulation) is one vector for eight rows instead
// of eight. On the original layout the 4-bit dot kernels are bound by that
// per-block work, not by memory.
//
// Made once per weight (Backend::prepare_weights, asked for by the tools that
// generate token by token, unless CpuOptions::pack is off) and used by the
// dot path when N == 1; the weight's own bytes stay where they are for
// everything else (the prompt GEMM, get_rows, devices, quantize-stats). A
// packed copy is used only while the tensor's data is the data it was made
// from, so a replacement weight (sensitivity) or a copy pointing elsewhere
// falls back to the original kernels.
//
// The layouts of Q8_0 (codes stored as v + 128), Q5_0 (Q4_0's and a plane
// of the fifth bits), MXFP4 (Q4_0's nibbles, byte exponents), Q4_K (8-bit
// scales and mins), IQ4_XS (Q4_K's code order, signed scales) and Q6_K (the
// 6-bit codes in two planes) are described in packed.cpp. Q4_0, per group of 8 rows and block of 32 (144 bytes, as 8
// blocks):
//   d[8]     the rows' fp16 scales in lane order kPackLane (see below)
//   qs[128]  four 32-byte vectors; vector 2c + h holds, for rows 4h .. 4h+3,
//            bytes 8c .. 8c+7 of each row's qs (8 bytes per row): low
//            nibbles are elements 8c .. 8c+7, high nibbles 16+8c .. 16+8c+7.
// The kernels add the int32 sums of rows 0-3 and 4-7 pairwise (hadd), which
// leaves the rows in lanes 0,1,4,5,2,3,6,7: the scales are stored in that
// order and the outputs put back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>

#include "core/host_memory.h"
#include "qlens/tensor.h"
#include "qlens/types.h"

namespace qlens::cpu {

inline constexpr int kPackRows = 8;
// Lane j of a packed group's vectors holds row kPackLane[j].
inline constexpr int kPackLane[kPackRows] = {0, 1, 4, 5, 2, 3, 6, 7};

// Byte offsets within one group block, shared by the packers and the kernels.
inline constexpr size_t kPackScales = kPackRows * sizeof(uint16_t);  // the rows' fp16 d (then dmin for Q4_K)
// A legacy type's group block: the rows' scales (scale_bytes each: an fp16
// d, or MXFP4's E8M0 exponent byte), then kPackRows * code_bytes codes.
constexpr size_t legacy_group_block(size_t code_bytes, size_t scale_bytes = 2) {
  return kPackRows * (scale_bytes + code_bytes);
}
// Q5_0's group block: Q4_0's, then the fifth bits as one 32-byte plane: bit
// q5_0_plane_bit(c, h, n) of plane byte p is the fifth bit of nibble n (0:
// low) of byte p of code vector 2c + h. A 16-bit shift and a mask put a code
// vector's fifth bits in place (bit 4 of each byte) for all 32 bytes.
inline constexpr size_t kQ5_0HighAt = legacy_group_block(16), kQ5_0GroupBlock = kQ5_0HighAt + 32;
constexpr int q5_0_plane_bit(int c, int h, int n) { return (2 * c + h) * 2 + n; }
static_assert(kQ5_0GroupBlock == legacy_group_block(20));
// Q4_K's group block (packed.cpp describes it): d, dmin, scales, mins, codes.
inline constexpr size_t kQ4KScalesAt = 2 * kPackScales, kQ4KMinsAt = kQ4KScalesAt + 64,
                        kQ4KCodesAt = kQ4KMinsAt + 64, kQ4KGroupBlock = kQ4KCodesAt + kPackRows * 128;
// IQ4_XS's group block (packed.cpp): d, the signed sub-block scales by row
// and as lane-order pairs, then the 4-bit codes in Q4_K's arrangement.
inline constexpr size_t kIQ4XSScalesAt = kPackScales, kIQ4XSPairsAt = kIQ4XSScalesAt + 64,
                        kIQ4XSCodesAt = kIQ4XSPairsAt + 64, kIQ4XSGroupBlock = kIQ4XSCodesAt + kPackRows * 128;
// Q6_K's group block (packed.cpp): d, scales, then the codes' high and low
// bits in the order the kernel reads them; as many bytes as the rows' blocks.
inline constexpr size_t kQ6KScalesAt = kPackScales, kQ6KCodesAt = kQ6KScalesAt + 128,
                        kQ6KGroupBlock = kQ6KCodesAt + kPackRows * 192;
// Where the vector of rows 4h .. 4h+3 of piece c of 64-element chunk j holds
// its high bits (shared by chunks 2t and 2t + 1) and its low bits.
constexpr size_t q6k_high_at(int j, int c, int h) { return kQ6KCodesAt + ((j / 2 * 4 + c) * 2 + h) * 96; }
constexpr size_t q6k_low_at(int j, int c, int h) { return q6k_high_at(j, c, h) + 32 + 32 * (j % 2); }

struct PackedWeight {
  const void* source = nullptr;  // the tensor data it was made from
  DType type = DType::F32;
  int64_t rows = 0, k = 0;
  size_t group_bytes = 0;  // one group of kPackRows rows
  HostMemory bytes;

  int64_t groups() const { return (rows + kPackRows - 1) / kPackRows; }
  size_t nbytes() const { return groups() * group_bytes; }
  const char* group(int64_t g) const { return bytes.get() + g * group_bytes; }
};

// Whether weights of this type have a packed layout (and kernels), whatever
// the options (CpuOptions::pack decides whether a backend makes copies).
bool packable(DType t);

// The packed layout of a 2-D weight whose type is packable.
std::unique_ptr<PackedWeight> pack_weight(const Tensor& w, bool huge_pages = true);

// The packed copies a CPU backend keeps (Backend::prepare_weights), by the
// data they were made from.
class PackedWeights {
 public:
  explicit PackedWeights(bool huge_pages = true) : huge_pages_(huge_pages) {}
  // Packs the 2-D contiguous weights of a packable type that have no copy
  // yet, in parallel; returns the bytes added.
  size_t add(std::span<const Tensor* const> weights);
  // w's packed copy, or null when it has none or w's data, type or shape are
  // no longer those it was made from (a replacement weight, a moved copy).
  const PackedWeight* find(const Tensor& w) const;
  void remove(std::span<const Tensor* const> weights);

 private:
  bool huge_pages_;  // the copies' memory (alloc_host_memory)
  std::unordered_map<const void*, std::unique_ptr<PackedWeight>> by_source_;
};

// Eight rows of a packed group against one activation row in the type's
// activation format (Q8_0 for Q4_0): out[r] for rows r = 0..7 of the group.
// The SIMD kernels prefetch each group block `prefetch` bytes ahead (0: not
// at all; KernelOptions::prefetch_bytes), the plain ones never.
using PackedDotFn = void (*)(int64_t k, const char* group, const void* x, float* out, size_t prefetch);

// The plain kernel the SIMD ones are tested against (the same operations in
// the same order: equal bit for bit).
PackedDotFn packed_dot_scalar(DType t);

}  // namespace qlens::cpu
