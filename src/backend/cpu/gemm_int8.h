// The int8 GEMM path of MulMat (internal): quantized weights times
// activations quantized to the weight type's vec_dot_type, with integer dot
// instructions (the kernels: GemmKernels::i8, simd_gemm_int8.h).
//
// matmul takes it instead of the F32 panels where the GEMM path is chosen
// (N >= min_n), the ISA has the type's int8 kernels, the backend's options
// allow it (KernelOptions::int8_gemm) and activations are rounded through the
// weights' partner type (KernelOptions::ggml_rounding; otherwise the GEMM
// path multiplies them unrounded). Per node:
//  - the threads quantize all activation rows together (a static share of
//    the panels each: TypeTraits' vec_dot_type through VecOps::from_float,
//    as the dot path does) and pack them into panels of mr rows in shared
//    scratch, then meet at a barrier;
//  - work items are chunks of weight rows of a batch (as the F32 path's): an
//    item repacks blocks of mc rows at a time into interleaved int8 panels of
//    nr rows in its private scratch (per call: the weights keep their GGUF
//    layout everywhere else), then runs the micro-kernel over K blocks of
//    kKc elements, for every activation panel against every weight panel.
// Every output element gets the same operations in the same order whatever
// the thread count or chunking (edge tiles run the same kernel through a
// buffer with accumulation), so results do not depend on the thread count.
//
// Panels are made of units (a legacy block of 32, 32 elements of a scaled
// type's block, or a K or level type's super-block of 256):
// interleaved codes, 4 per row at a time ([unit/4][rows][4] bytes; the signed
// types on plain AVX2: int16 pairs, [unit/2][rows][2]), then the unit's
// scales, integer group starts and min terms (simd_gemm_int8.h). The
// micro-tile (mr activation rows x nr weight rows) is the type's.
#pragma once

#include <cstddef>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"

namespace qlens::cpu {

struct KernelCtx;

// Whether the int8 path computes this node, given that it takes the GEMM path
// with the kernels `gk` and the backend's options.
bool int8_applies(const Tensor& node, const GemmKernels& gk, const KernelOptions& options);
// Scratch the int8 path needs: private per thread, shared.
size_t int8_scratch(const Tensor& node, const GemmKernels& gk);
size_t int8_shared_scratch(const Tensor& node, const GemmKernels& gk);
void int8_gemm(const Tensor& node, const KernelCtx& c, const GemmKernels& gk);
// The largest shared buffer the path may use (matmul's limit for shared
// packing); beyond it the F32 panels serve.
size_t int8_max_shared();

}  // namespace qlens::cpu
