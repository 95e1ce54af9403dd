// SsmConv: the short causal convolution of DeltaNet and Mamba layers, each
// output a float sum over the kernel's taps in order, as ggml's.
#include "backend/cpu/ops.h"

namespace qlens::cpu {

void op_ssm_conv(const Tensor& d, const KernelCtx& c) {
  const Tensor& sx = *d.src[0];
  const Tensor& w = *d.src[1];
  const int64_t taps = w.ne[0];
  int64_t r0, r1;
  split_range(d.nrows(), c.ith, c.nth, &r0, &r1);  // rows: (token, sequence)
  for (int64_t r = r0; r < r1; ++r) {
    int64_t t, s, unused;
    row_coords(d, r, &t, &s, &unused);
    float* y = reinterpret_cast<float*>(d.at(0, t, s));
    for (int64_t i = 0; i < d.ne[0]; ++i) {
      const char* x = sx.at(t, i, s);
      const char* k = w.at(0, i);
      float sum = 0.0f;
      for (int64_t j = 0; j < taps; ++j)
        sum += *reinterpret_cast<const float*>(x + j * sx.nb[0]) * *reinterpret_cast<const float*>(k + j * w.nb[0]);
      y[i] = sum;
    }
  }
}

}  // namespace qlens::cpu
