// AVX2 + FMA + F16C row primitives (compiled with those flags; used only when
// the CPU has them).
#include "backend/cpu/simd_vec.h"

namespace qlens::cpu {

const VecOps* vec_ops_avx2() {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  static const VecOps ops = make_vec_ops<Avx2>();
  return &ops;
#else
  return nullptr;
#endif
}

}  // namespace qlens::cpu
