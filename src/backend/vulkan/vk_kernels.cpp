// The Vulkan backend's kernel table: one row per op, in the op table's
// order (a missing row does not compile). A row says which nodes its
// shaders take, which shader variants it may dispatch, and records a node;
// an op without a kernel is declined and goes to the CPU.
#include "backend/vulkan/vk_ops.h"
#include "ops/op_table.h"

namespace qlens::vulkan {

namespace {

std::vector<ShaderUse> unary_shaders(const Tensor& node, bool, bool) { return elementwise_shaders(node); }
std::vector<ShaderUse> copy_shaders_of(const Tensor& node, bool, bool) { return copy_shaders(node); }
std::vector<ShaderUse> matmul_shaders_of(const Tensor& node, bool is_cpu, bool) { return matmul_shaders(node, is_cpu); }

constexpr Kernel declined(Op op) { return {op, nullptr, nullptr, nullptr}; }
constexpr Kernel elementwise(Op op, bool (*supports)(const Tensor&)) {
  return {op, supports, unary_shaders, record_elementwise};
}

constexpr std::array<Kernel, kOpCount> kKernels = {{
    declined(Op::None),
    {Op::GetRows, supports_matmul, matmul_shaders_of, record_get_rows},
    {Op::MulMat, supports_matmul, matmul_shaders_of, record_mul_mat},
    elementwise(Op::Add, supports_binary),
    elementwise(Op::Mul, supports_binary),
    elementwise(Op::Scale, supports_unary),
    {Op::RmsNorm, supports_f32_row_op, rms_norm_shaders, record_rms_norm},
    {Op::Rope, supports_rope, rope_shaders, record_rope},
    {Op::SoftMax, supports_soft_max, soft_max_shaders, record_soft_max},
    elementwise(Op::Silu, supports_unary),
    elementwise(Op::Gelu, supports_unary),
    {Op::Cpy, supports_cpy, copy_shaders_of, record_copy},
    {Op::Cont, supports_cont, copy_shaders_of, record_copy},
    declined(Op::Reshape),  // views: nothing to compute
    declined(Op::View),
    declined(Op::Permute),
    declined(Op::Transpose),
    {Op::MulMatId, supports_matmul, matmul_shaders_of, record_mul_mat_id},
    {Op::ArgSort, supports_argsort, argsort_shaders, record_argsort},
    {Op::SumRows, supports_f32_row_op, sum_rows_shaders, record_sum_rows},
    elementwise(Op::Clamp, supports_unary),
    elementwise(Op::Div, supports_binary),
    elementwise(Op::Sigmoid, supports_unary),
    elementwise(Op::Glu, supports_binary),
    {Op::AddId, supports_add_id, add_id_shaders, record_add_id},
    elementwise(Op::Softplus, supports_unary),
    {Op::L2Norm, supports_f32_row_op, l2_norm_shaders, record_rms_norm},
    {Op::Concat, supports_concat, concat_shaders, record_concat},
    {Op::SsmConv, supports_binary, ssm_conv_shaders, record_ssm_conv},
    {Op::GatedDeltaNet, supports_gated_delta_net, gated_delta_net_shaders, record_gated_delta_net},
    elementwise(Op::Fill, supports_unary),
    {Op::SetRows, supports_set_rows, set_rows_shaders, record_set_rows},
    elementwise(Op::Tanh, supports_unary),
}};
static_assert(rows_follow_ops(kKernels), "Vulkan needs one kernel row per Op, in the enum's order");

}  // namespace

const Kernel& kernel_of(Op op) { return kKernels[static_cast<size_t>(op)]; }

}  // namespace qlens::vulkan
