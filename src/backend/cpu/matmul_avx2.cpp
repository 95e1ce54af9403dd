// AVX2 + FMA + F16C matmul kernels (compiled with those flags; used only when
// the CPU has them).
#include "backend/cpu/simd_matmul.h"

namespace qlens::cpu {

const GemmKernels* gemm_kernels_avx2() {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  static const GemmKernels k = make_gemm_kernels<Avx2>();
  return &k;
#else
  return nullptr;
#endif
}

}  // namespace qlens::cpu
