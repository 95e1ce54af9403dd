// The ops, one family per file: what each can compute (supports_*) and the
// recording of a node (record_*). Sources and results are in the device's
// memory; every op indexes by ne/nb so views of any strides work.
#pragma once

#include <string>
#include <vector>

#include "backend/vulkan/vk_recorder.h"
#include "qlens/tensor.h"

namespace qlens::vulkan {

// The activation rows up to which mul_mat takes the matrix-vector path
// (= MAX_COLS in shaders/mul_mat_vec.comp), and the (slot, token) pairs up
// to which mul_mat_id does.
constexpr int64_t kMulMatVecMaxCols = 8;

// Whether mul_mat, mul_mat_id and get_rows read this weight type
// (weight_types.glsl), and its shader-name suffix ("q8_0").
bool is_weight_type(DType type);
std::string weight_type_suffix(DType type);

// A shader variant and the number of storage buffers it takes.
struct ShaderUse {
  std::string name;
  uint32_t n_buffers;
};

// The kernel table (vk_kernels.cpp): one row per op, in the op table's
// order. `shaders` lists every shader variant the row's record function may
// dispatch on a device (is_cpu and has_float64 as Recorder says them):
// VulkanBackend::supports_op builds them before saying yes, so that a shader
// the driver cannot build sends the op to the CPU instead of failing
// mid-graph.
struct Kernel {
  Op op;
  bool (*supports)(const Tensor& node);  // null: the device declines the op
  std::vector<ShaderUse> (*shaders)(const Tensor& node, bool is_cpu, bool has_float64);
  void (*record)(Recorder& r, const Tensor& node);
};
const Kernel& kernel_of(Op op);

// vk_elementwise.cpp: Add, Mul, Div, Glu (binary), Scale, Clamp, Silu, Gelu,
// Sigmoid (unary; shaders/elementwise.comp), AddId (shaders/add_id.comp),
// Cpy and Cont (shaders/copy.comp).
bool supports_binary(const Tensor& node);
bool supports_unary(const Tensor& node);
bool supports_cpy(const Tensor& node);
bool supports_cont(const Tensor& node);
std::vector<ShaderUse> elementwise_shaders(const Tensor& node);
std::vector<ShaderUse> copy_shaders(const Tensor& node);
void record_elementwise(Recorder& r, const Tensor& node);
void record_copy(Recorder& r, const Tensor& node);
bool supports_concat(const Tensor& node);
std::vector<ShaderUse> concat_shaders(const Tensor& node, bool is_cpu, bool has_float64);
void record_concat(Recorder& r, const Tensor& node);
bool supports_set_rows(const Tensor& node);
std::vector<ShaderUse> set_rows_shaders(const Tensor& node, bool is_cpu, bool has_float64);
void record_set_rows(Recorder& r, const Tensor& node);
std::vector<ShaderUse> ssm_conv_shaders(const Tensor& node, bool is_cpu, bool has_float64);
void record_ssm_conv(Recorder& r, const Tensor& node);
bool supports_add_id(const Tensor& node);
std::vector<ShaderUse> add_id_shaders(const Tensor& node, bool is_cpu, bool has_float64);
void record_add_id(Recorder& r, const Tensor& node);

// vk_delta_net.cpp: GatedDeltaNet (shaders/gated_delta_net.comp).
bool supports_gated_delta_net(const Tensor& node);
std::vector<ShaderUse> gated_delta_net_shaders(const Tensor& node, bool is_cpu, bool has_float64);
void record_gated_delta_net(Recorder& r, const Tensor& node);

// vk_rows.cpp: RmsNorm, SoftMax, Rope, SumRows, ArgSort.
bool supports_f32_row_op(const Tensor& node);  // RmsNorm, SumRows
bool supports_soft_max(const Tensor& node);
bool supports_rope(const Tensor& node);
bool supports_argsort(const Tensor& node);
std::vector<ShaderUse> rms_norm_shaders(const Tensor& node, bool is_cpu, bool has_float64);
std::vector<ShaderUse> l2_norm_shaders(const Tensor& node, bool is_cpu, bool has_float64);
std::vector<ShaderUse> soft_max_shaders(const Tensor& node, bool is_cpu, bool has_float64);
std::vector<ShaderUse> rope_shaders(const Tensor& node, bool is_cpu, bool has_float64);
std::vector<ShaderUse> sum_rows_shaders(const Tensor& node, bool is_cpu, bool has_float64);
std::vector<ShaderUse> argsort_shaders(const Tensor& node, bool is_cpu, bool has_float64);
void record_rms_norm(Recorder& r, const Tensor& node);
void record_soft_max(Recorder& r, const Tensor& node);
void record_rope(Recorder& r, const Tensor& node);
void record_sum_rows(Recorder& r, const Tensor& node);
void record_argsort(Recorder& r, const Tensor& node);

// vk_matmul.cpp: MulMat, MulMatId and GetRows (1-D and batched indices).
bool supports_matmul(const Tensor& node);
std::vector<ShaderUse> matmul_shaders(const Tensor& node, bool is_cpu);
void record_mul_mat(Recorder& r, const Tensor& node);
void record_mul_mat_id(Recorder& r, const Tensor& node);
void record_get_rows(Recorder& r, const Tensor& node);

// Whether every stride of t is a whole number of elements and the tensor
// has fewer than 2^32 elements (the shaders index with 32-bit integers).
bool indexable(const Tensor& t, size_t element_bytes);
size_t element_bytes(DType type);  // 4 for F32 and I32, 2 for F16 and BF16

}  // namespace qlens::vulkan
