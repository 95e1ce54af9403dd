// AVX-512 matmul kernels (compiled with those flags; used only when the CPU
// has them).
#include "backend/cpu/simd_matmul.h"

namespace qlens::cpu {

// Two tables: with the VNNI wrappers allowed (chosen where the CPU has them)
// and without.
const GemmKernels* gemm_kernels_avx512(bool vnni) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
  static const GemmKernels k[2] = {make_gemm_kernels<Avx512>(false), make_gemm_kernels<Avx512>(true)};
  return &k[vnni];
#else
  (void)vnni;
  return nullptr;
#endif
}

}  // namespace qlens::cpu
