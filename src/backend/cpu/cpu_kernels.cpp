// The CPU backend's kernel table: one row per op, in the op table's order.
// A row holds the kernel, what it cannot take beyond the op's own rules, and
// the scratch memory it needs; an op without a kernel is declined (run is
// null) and supports_op says no.
#include "backend/cpu/cpu_kernels.h"

#include "backend/cpu/delta_net.h"
#include "backend/cpu/matmul.h"
#include "ops/op_table.h"

namespace qlens::cpu {

namespace {

// ---- limits: why the kernel cannot take a node the op's rules allow, or "".

std::string none(const Tensor&) { return {}; }

// Weights (or rows) the kernels read by blocks: of a type they can convert,
// each row's blocks adjacent.
std::string readable_rows(const Tensor& a) {
  const TypeTraits& tt = type_traits(a.type);
  if (!tt.to_float) return "cannot read rows of type " + std::string(tt.name);
  if (tt.block_size > 1 && a.nb[0] != tt.block_bytes) return "rows of a quantized source must be contiguous";
  return {};
}

std::string get_rows_limits(const Tensor& n) { return readable_rows(*n.src[0]); }

std::string mul_mat_limits(const Tensor& n) {
  if (auto r = readable_rows(*n.src[0]); !r.empty()) return r;
  const TypeTraits& tt = type_traits(n.src[0]->type);
  if (!type_traits(tt.vec_dot_type).from_float && tt.vec_dot_type != DType::F32)
    return "cannot convert activations to " + std::string(type_name(tt.vec_dot_type));
  return {};
}

std::string mul_mat_id_limits(const Tensor& n) { return readable_rows(*n.src[0]); }

// ---- scratch: bytes per thread, and shared by the node's threads.

size_t no_scratch(const Tensor&, int, const KernelOptions&) { return 0; }
size_t one_row(const Tensor& n, int, const KernelOptions&) { return n.src[0]->ne[0] * sizeof(float); }
size_t two_rows(const Tensor& n, int, const KernelOptions&) { return 2 * n.src[0]->ne[0] * sizeof(float); }
size_t rope_angles(const Tensor& n, int, const KernelOptions&) {
  return (n.params[0] / 2) * (sizeof(double) + 2 * sizeof(float));
}
size_t copy_block(const Tensor&, int, const KernelOptions&) { return 1024 * sizeof(float); }

constexpr Kernel declined(Op op) { return {op, nullptr, none, no_scratch, no_scratch}; }

// A kernel with no limits beyond the op's rules and no shared scratch; its
// threads' split of the node (ops.h) where they take the node's pieces.
constexpr Kernel kernel(Op op, KernelFn run, ScratchFn scratch, Split split = Split::Any) {
  return {op, run, none, scratch, no_scratch, split};
}

constexpr std::array<Kernel, kOpCount> kKernels = {{
    declined(Op::None),
    {Op::GetRows, op_get_rows, get_rows_limits, no_scratch, no_scratch},
    {Op::MulMat, matmul, mul_mat_limits, matmul_scratch, matmul_shared_scratch},
    kernel(Op::Add, op_add, two_rows, Split::Pieces),
    kernel(Op::Mul, op_mul, two_rows, Split::Pieces),
    kernel(Op::Scale, op_scale, one_row, Split::Pieces),
    kernel(Op::RmsNorm, op_rms_norm, one_row, Split::PiecesOfRows),
    kernel(Op::Rope, op_rope, rope_angles),
    kernel(Op::SoftMax, op_soft_max, one_row),
    kernel(Op::Silu, op_silu, one_row, Split::Pieces),
    kernel(Op::Gelu, op_gelu, one_row, Split::Pieces),
    kernel(Op::Cpy, op_cpy, copy_block),
    kernel(Op::Cont, op_cpy, copy_block),
    declined(Op::Reshape),  // views: nothing to compute
    declined(Op::View),
    declined(Op::Permute),
    declined(Op::Transpose),
    {Op::MulMatId, matmul_id, mul_mat_id_limits, matmul_id_scratch, matmul_id_shared_scratch},
    kernel(Op::ArgSort, op_argsort, no_scratch),
    kernel(Op::SumRows, op_sum_rows, no_scratch),
    kernel(Op::Clamp, op_clamp, one_row, Split::Pieces),
    kernel(Op::Div, op_div, two_rows, Split::Pieces),
    kernel(Op::Sigmoid, op_sigmoid, one_row, Split::Pieces),
    kernel(Op::Glu, op_glu, two_rows, Split::Pieces),
    kernel(Op::AddId, op_add_id, two_rows, Split::Pieces),
    kernel(Op::Softplus, op_softplus, one_row, Split::Pieces),
    kernel(Op::L2Norm, op_l2_norm, one_row, Split::PiecesOfRows),
    kernel(Op::Concat, op_concat, no_scratch),
    kernel(Op::SsmConv, op_ssm_conv, no_scratch),
    kernel(Op::GatedDeltaNet, op_gated_delta_net, delta_net_scratch),
    kernel(Op::Fill, op_fill, one_row, Split::Pieces),
    kernel(Op::SetRows, op_set_rows, no_scratch),
    kernel(Op::Tanh, op_tanh, one_row, Split::Pieces),
}};
static_assert(rows_follow_ops(kKernels), "the CPU needs one kernel row per Op, in the enum's order");

}  // namespace

const Kernel& kernel_of(Op op) { return kKernels[static_cast<size_t>(op)]; }

std::string cannot_compute(const Tensor& node) {
  const OpDef& def = op_def(node.op);
  if (def.is_view) return {};
  const Kernel& k = kernel_of(node.op);
  if (!k.run) return "the CPU backend has no kernel for it";
  if (auto r = def.invalid(node); !r.empty()) return r;
  return k.limits(node);
}

size_t scratch_bytes(const Tensor& n, int nth, const KernelOptions& o) { return kernel_of(n.op).scratch(n, nth, o); }

size_t shared_scratch_bytes(const Tensor& n, int nth, const KernelOptions& o) {
  return kernel_of(n.op).shared_scratch(n, nth, o);
}

}  // namespace qlens::cpu
