// The reference kernels (reference.cpp), one per op that computes: the op
// table hands them to the reference backend.
#pragma once

#include "qlens/tensor.h"

namespace qlens::reference {

void get_rows(const Tensor& node);
void mul_mat(const Tensor& node);
void mul_mat_id(const Tensor& node);
void add(const Tensor& node);
void mul(const Tensor& node);
void div(const Tensor& node);
void scale(const Tensor& node);
void clamp(const Tensor& node);
// The element-wise ops of one value: f applied to each element of src[0].
void map(const Tensor& node, double (*f)(double));
template <double (*f)(double)>
void map_with(const Tensor& node) {
  map(node, f);
}
double silu_of(double x);
double gelu_of(double x);
void rms_norm(const Tensor& node);
void rope(const Tensor& node);
void soft_max(const Tensor& node);
void glu(const Tensor& node);
void add_id(const Tensor& node);
void l2_norm(const Tensor& node);
void concat(const Tensor& node);
void fill(const Tensor& node);
void set_rows(const Tensor& node);
void ssm_conv(const Tensor& node);
void gated_delta_net(const Tensor& node);
void sum_rows(const Tensor& node);
void argsort_desc(const Tensor& node);
void cpy(const Tensor& node);
void cont(const Tensor& node);

}  // namespace qlens::reference
