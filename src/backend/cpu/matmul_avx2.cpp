// AVX2 + FMA + F16C matmul kernels (compiled with those flags; used only when
// the CPU has them).
#include "backend/cpu/simd_matmul.h"

namespace qlens::cpu {

// Four tables: with the VNNI wrappers allowed (chosen where the CPU has
// them) and without, each with the 3-bit and 1-bit i-quant grids read by loads or by gathers.
const GemmKernels* gemm_kernels_avx2(bool vnni, bool grid_gathers) {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  static const GemmKernels k[2][2] = {
      {make_gemm_kernels<Avx2, GridRead::Loads>(false), make_gemm_kernels<Avx2, GridRead::Gathers>(false)},
      {make_gemm_kernels<Avx2, GridRead::Loads>(true), make_gemm_kernels<Avx2, GridRead::Gathers>(true)}};
  return &k[vnni][grid_gathers];
#else
  (void)vnni;
  (void)grid_gathers;
  return nullptr;
#endif
}

}  // namespace qlens::cpu
