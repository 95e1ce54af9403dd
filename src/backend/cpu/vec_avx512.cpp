// AVX-512 (F, BW, VL, DQ) row primitives (compiled with those flags; used only
// when the CPU has them).
#include "backend/cpu/simd_vec.h"

namespace qlens::cpu {

const VecOps* vec_ops_avx512() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
  static const VecOps ops = make_vec_ops<Avx512>();
  return &ops;
#else
  return nullptr;
#endif
}

}  // namespace qlens::cpu
