// GetRows: row idx[i, j] of a's slice j (any readable type) as F32 row (i, j)
// of the result.
#include "backend/cpu/ops.h"

namespace qlens::cpu {

void op_get_rows(const Tensor& d, const KernelCtx& c) {
  const Tensor& a = *d.src[0];
  const Tensor& idx = *d.src[1];
  int64_t r0, r1;
  split_range(idx.ne[0] * idx.ne[1], c.ith, c.nth, &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i = r % idx.ne[0], j = r / idx.ne[0];
    const int32_t row = *reinterpret_cast<const int32_t*>(idx.at(i, j));
    row_to_f32(a, a.at(0, row, j), 0, a.ne[0], reinterpret_cast<float*>(d.at(0, i, j)), *c.vec);
  }
}

}  // namespace qlens::cpu
