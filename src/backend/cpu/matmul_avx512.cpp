// AVX-512 matmul kernels (compiled with those flags; used only when the CPU
// has them).
#include "backend/cpu/simd_matmul.h"

namespace qlens::cpu {

const GemmKernels* gemm_kernels_avx512() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
  static const GemmKernels k = make_gemm_kernels<Avx512>();
  return &k;
#else
  return nullptr;
#endif
}

}  // namespace qlens::cpu
