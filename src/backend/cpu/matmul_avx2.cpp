// AVX2 + FMA + F16C matmul kernels (compiled with those flags; used only when
// the CPU has them).
#include "backend/cpu/simd_matmul.h"

namespace qlens::cpu {

// Two tables: with the VNNI wrappers allowed (chosen where the CPU has them)
// and without.
const GemmKernels* gemm_kernels_avx2(bool vnni) {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  static const GemmKernels k[2] = {make_gemm_kernels<Avx2>(false), make_gemm_kernels<Avx2>(true)};
  return &k[vnni];
#else
  (void)vnni;
  return nullptr;
#endif
}

}  // namespace qlens::cpu
