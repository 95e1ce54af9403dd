// Matrix multiplication kernels of the CPU backend (internal).
//
// Two paths, chosen by the number of activation rows N (never by the thread
// count, so results do not depend on it):
//  - dot path (N small, and always for the scalar instruction set): each weight
//    row is streamed once and dotted with up to 4 activation rows at a time by a
//    per-weight-type VecDotFn;
//  - GEMM path (N >= GemmKernels::min_n): weights are converted to F32 into
//    packed panels (nr rows interleaved, k-major), activations into panels of
//    mr rows, and a register-blocked micro-kernel computes mr x nr tiles.
//    For the quantized types, where the instruction set has VNNI
//    (GemmKernels::i8), the int8 variant of it instead: weights repacked into
//    interleaved int8 panels, activations quantized to the vec_dot_type, and
//    integer dot products (gemm_int8.h, simd_gemm_int8.h).
//
// Work is handed out in items from a shared counter (so a thread that gets
// less CPU time does less of the work): chunks of weight rows of each batch,
// on the dot path guided ones (each a share of the rows still unclaimed, so
// they shrink towards the end and the threads finish together).
// With fewer batches than threads (the weight matmuls), the threads first
// pack the activations together into shared scratch, once; otherwise an item
// is a whole batch and packs its own activations.
//
// Weight types plug in through a VecDotFn in GemmKernels::dot (otherwise rows
// are converted with the type's to_float and the F32 dot is used) and,
// optionally, a PackFn in GemmKernels::pack (otherwise the GEMM path converts
// rows with VecOps::to_float, i.e. TypeTraits::to_float, and transposes).
// The legacy quantized types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) have both:
// integer dot kernels against activations quantized to their vec_dot_type
// (Q8_0 / Q8_1, with TypeTraits::from_float) in qdot.h / simd_qdot.h, and packs
// that dequantize blocks straight into the F32 panels. So have the K-quant
// types (Q2_K..Q6_K, IQ4_XS; Q8_K activations): qdot_k.h / simd_qdot_k.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/isa.h"
#include "backend/cpu/packed.h"
#include "qlens/tensor.h"
#include "qlens/types.h"

namespace qlens::cpu {

struct VecOps;

// out[c] = dot(w[0..k), x_c[0..k)) for c < nc (1 <= nc <= 4), where x_c starts
// x_stride bytes after x_{c-1}. w is a row of the weight type, x rows are of
// the weight type's vec_dot_type (F32 for the float types). Accumulates in F32.
using VecDotFn = void (*)(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out);

// out[r] = dot(w_r[0..k), x[0..k)) for r < nr (1 <= nr <= 4), where w_r starts
// w_stride bytes after w_{r-1}, x is one activation row of the weight type's
// vec_dot_type. Equal bit for bit to the type's VecDotFn with nc = 1 on each
// row; the dot path uses it for a single activation row (generation), where
// the rows share the activation's loads and per-block terms.
using VecDotRowsFn = void (*)(int64_t k, const void* w, size_t w_stride, const void* x, int nr, float* out);

// The micro-kernel: for r < mr, i < nr,
//   c[r*ldc + i] = (accumulate ? c[r*ldc + i] : 0) + sum_k wp[k*nr + i] * bp[k*mr + r]
// wp: a packed weight panel (kc x nr), bp: a packed activation panel (kc x mr).
using MicroFn = void (*)(int64_t kc, const float* wp, const float* bp, float* c, int64_t ldc, bool accumulate);

// Packs rows [0, nrows) (nrows <= nr) of a weight block, elements [k0, k0 + kc),
// as F32 into a panel of kc x nr (k-major; zeros for rows past nrows). Row i
// starts at row0 + i * row_stride; its elements are adjacent.
using PackFn = void (*)(const char* row0, size_t row_stride, int64_t nrows, int64_t k0, int64_t kc, float* panel);

// Packs F32 activation rows [0, nrows) (nrows <= mr), elements [k0, k0 + kc),
// into a panel of kc x mr (k-major; zeros for rows past nrows). Row i starts
// at row0 + i * row_stride bytes; its elements are adjacent.
using PackActFn = void (*)(const char* row0, size_t row_stride, int64_t nrows, int64_t k0, int64_t kc,
                           float* panel);

// The int8 GEMM path (gemm_int8.h): weights repacked into interleaved int8
// panels of nr rows, activations (quantized to the weight type's
// vec_dot_type) into panels of mr rows, both in units of `unit` elements (a
// legacy block of 32 or a K super-block of 256), multiplied with integer dot
// instructions.
// Repacks weight rows [0, nrows) (nrows <= nr; zeros past them), units
// [u0, u0 + nu), into a panel; row i starts at row0 + i * row_stride.
using I8PackWFn = void (*)(const char* row0, size_t row_stride, int64_t nrows, int64_t u0, int64_t nu, uint8_t* panel);
// Packs one quantized activation row (nu units) into slot r (< mr) of a panel.
using I8PackXFn = void (*)(const char* xrow, int r, int64_t nu, uint8_t* panel);
// For r < mr, i < nr: c[r*ldc + i] = (accumulate ? c[r*ldc + i] : 0) + the
// product of nu units of a weight panel and an activation panel.
using I8MicroFn = void (*)(int64_t nu, const uint8_t* wp, const uint8_t* xp, float* c, int64_t ldc, bool accumulate);
struct Int8Gemm {
  I8PackWFn pack_w;  // nullptr: no int8 path for the type
  I8PackXFn pack_x;
  I8MicroFn micro;
  int mr, nr;           // the micro-tile: activation rows x weight rows
  int unit;             // elements per unit
  size_t w_unit_bytes;  // bytes of one unit of a weight panel (nr rows)
  size_t x_unit_bytes;  // bytes of one unit of an activation panel (mr rows)
};

// The most activation rows of a GEMM micro-tile (GemmKernels::mr).
constexpr int kMaxMr = 16;
// The most activation panels (micro-tile rows) of an inner block
// (GemmKernels::nc / mr).
inline constexpr int kMaxPanelsPerBlock = 16;

// A plain aggregate (see VecOps for why): build value-initialized.
struct GemmKernels {
  MicroFn micro;   // nullptr: no GEMM path
  int mr;          // activation rows per micro-tile
  int nr;          // weight rows per micro-tile
  int64_t kc;      // K block (a multiple of 256, so quantized blocks never straddle it)
  int64_t mc;      // weight rows per packed block (a multiple of nr)
  int64_t nc;      // activation rows per inner block (mr times at most kMaxPanelsPerBlock)
  int64_t min_n;   // the GEMM path is used from this many activation rows on
  // Per weight type, overriding min_n where not 0 (the quantized types with
  // int8 GEMM kernels, which beat the dot kernels from a smaller N).
  int64_t min_n_type[kDTypeCount];
  VecDotFn dot[kDTypeCount];  // by weight type; nullptr: convert the row to F32
  // F16 and BF16 weights against activations stored in the weight's type
  // (ggml rounds them to it anyway): half the bytes of F32 activations,
  // which is what keeps a long row's activations in L1. nullptr: none.
  VecDotFn dot_same_x[kDTypeCount];
  // dot_same_x for several weight rows at once (one activation row); the
  // same bits. nullptr: row by row.
  VecDotRowsFn dot_rows_same_x[kDTypeCount];
  VecDotRowsFn dot_rows[kDTypeCount];  // by weight type; nullptr: dot row by row
  PackFn pack[kDTypeCount];   // by weight type; nullptr: convert rows, then transpose
  PackActFn pack_act;         // nullptr: element by element
  PackActFn pack_act_f16;     // pack_act rounding each value through F16; nullptr: none
  Int8Gemm i8[kDTypeCount];   // by weight type; pack_w nullptr: F32 panels
  PackedDotFn packed_dot[kDTypeCount];  // by weight type: packed weights (packed.h); nullptr: none
};

// The kernels of `isa`, with the VNNI wrappers where `vnni` and the CPU has
// them (else those of a CPU without: AVX2's maddubs, AVX-512's F32 panels),
// the 3-bit and 1-bit i-quant grids read by vector gathers where `grid_gathers`.
const GemmKernels& gemm_kernels(Isa isa, bool vnni = true, bool grid_gathers = false);
const GemmKernels& gemm_kernels(const KernelOptions& options);
// nullptr when not compiled in.
const GemmKernels* gemm_kernels_avx2(bool vnni, bool grid_gathers);
const GemmKernels* gemm_kernels_avx512(bool vnni, bool grid_gathers);

// The MulMat node kernel (see ops.h for the calling convention); the
// backend's options choose its paths, so its scratch depends on them.
struct KernelCtx;
size_t matmul_scratch(const Tensor& node, int nth, const KernelOptions& options);         // private, per thread
size_t matmul_shared_scratch(const Tensor& node, int nth, const KernelOptions& options);  // shared
void matmul(const Tensor& node, const KernelCtx& c);
// What a MulMat node of these weights and at most as many activation rows as
// it has may need on either path (the sub-products of MulMatId, whose row
// counts are known only when it runs).
size_t matmul_scratch_bound(const Tensor& node, int nth, const KernelOptions& options);
size_t matmul_shared_scratch_bound(const Tensor& node, int nth, const KernelOptions& options);
// The MulMatId node kernel: each expert's rows gathered and multiplied by
// the MulMat kernel (either path, every weight type), then put in place.
size_t matmul_id_scratch(const Tensor& node, int nth, const KernelOptions& options);
size_t matmul_id_shared_scratch(const Tensor& node, int nth, const KernelOptions& options);
void matmul_id(const Tensor& node, const KernelCtx& c);
// Whether the node would take the GEMM path (for tests and benchmarks); with
// an Isa, that set's default options.
bool matmul_uses_gemm(const Tensor& node, const KernelOptions& options);
bool matmul_uses_gemm(const Tensor& node, Isa isa);
// Sets the largest shared activation buffer (64 MiB by default) and returns
// the previous value; tests lower it to reach the other packing scheme.
size_t matmul_set_max_shared(size_t bytes);
// Sets the number of activation rows from which weights of `type` take the
// GEMM path (0: the kernels' own choice) and returns the previous value; for
// benchmarks that compare the two paths.
int64_t matmul_set_min_n(DType type, int64_t n);
// Whether the node would take the int8 GEMM path (for tests and benchmarks).
bool matmul_uses_int8(const Tensor& node, const KernelOptions& options);
bool matmul_uses_int8(const Tensor& node, Isa isa);

}  // namespace qlens::cpu
