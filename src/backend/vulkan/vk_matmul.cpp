// MulMat (a matrix-vector path for few activation rows, a tiled
// matrix-matrix path otherwise) and GetRows, for every weight type of
// shaders/weight_types.glsl. Activations stay F32: results differ from the
// reference's double sums only by float rounding.
#include <cctype>
#include <limits>

#include "backend/vulkan/vk_ops.h"
#include "qlens/error.h"

namespace qlens::vulkan {

namespace {

constexpr uint64_t kMulMatTileM = 64, kMulMatTileN = 64;  // TM, TN of shaders/mul_mat.comp
constexpr uint64_t kGetRowsGroup = 256;                   // local_size_x of shaders/get_rows.comp

// Mirrors shaders/mul_mat_params.glsl.
struct MulMatPush {
  uint32_t K, M, N, ne2, ne3;
  uint32_t r2, r3;
  uint32_t a_off, a_nb1, a_nb2, a_nb3;
  uint32_t b_off, b_nb0, b_nb1, b_nb2, b_nb3;
  uint32_t d_off, d_nb1, d_nb2, d_nb3;
};

struct GetRowsPush {
  uint32_t K, n_out, a_rows, a_off, a_nb1, idx_off, idx_nb0, d_off, d_nb1;
};

// The weight types of shaders/weight_types.glsl with their SUB_SIZE (the
// elements one dequantize_sub call produces; it divides the block size and
// 32, the tile depth of mul_mat.comp).
struct WeightType {
  DType type;
  uint32_t sub_size;
};
constexpr WeightType kWeightTypes[] = {
    {DType::F32, 1},   {DType::F16, 1},   {DType::BF16, 1},  {DType::Q8_0, 8},   {DType::Q4_0, 8},
    {DType::Q4_1, 8},  {DType::Q5_0, 8},  {DType::Q5_1, 8},  {DType::IQ4_NL, 8}, {DType::Q2_K, 16},
    {DType::Q3_K, 16}, {DType::Q4_K, 16}, {DType::Q5_K, 16}, {DType::Q6_K, 16},  {DType::IQ4_XS, 16},
};

const WeightType* find_weight_type(DType type) {
  for (const WeightType& w : kWeightTypes)
    if (w.type == type) return &w;
  return nullptr;
}

uint32_t sub_size(DType type) {
  const WeightType* w = find_weight_type(type);
  if (!w) throw Error("vulkan: no shader reads weights of type " + std::string(type_name(type)));
  return w->sub_size;
}

bool fits_u32(size_t v) { return v <= std::numeric_limits<uint32_t>::max(); }

// Weights: whole blocks along rows, 2-byte aligned rows (scales are read as
// half words), byte strides that fit the shaders' 32-bit offsets.
bool weights_readable(const Tensor& a) {
  const TypeTraits& tt = type_traits(a.type);
  if (!is_weight_type(a.type) || a.nb[0] != tt.block_bytes) return false;
  const size_t align = a.type == DType::F32 ? 4 : 2;
  for (int i = 1; i < kMaxDims; ++i)
    if (a.nb[i] % align != 0 || !fits_u32(a.nb[i])) return false;
  return true;
}

std::string quoted(const Tensor& t) { return "'" + t.name + "'"; }

// The matrix-vector path for few activation rows; else the tiled one, or on
// CPU devices its variant without shared memory and barriers.
std::string mul_mat_shader(DType type, int64_t n_cols, bool is_cpu) {
  const char* path = n_cols <= kMulMatVecMaxCols ? "mul_mat_vec_" : is_cpu ? "mul_mat_direct_" : "mul_mat_";
  return path + weight_type_suffix(type);
}

std::string get_rows_shader(DType type) { return "get_rows_" + weight_type_suffix(type); }

}  // namespace

bool is_weight_type(DType type) { return find_weight_type(type) != nullptr; }

std::string weight_type_suffix(DType type) {
  std::string s(type_name(type));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool supports_matmul(const Tensor& node) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  if (!a || !b || node.type != DType::F32 || !weights_readable(*a) || !indexable(node, 4)) return false;
  if (node.op == Op::GetRows) return b->type == DType::I32 && indexable(*b, 4);
  if (node.op == Op::MulMat) return b->type == DType::F32 && indexable(*b, 4);
  return false;
}

std::vector<ShaderUse> matmul_shaders(const Tensor& node, bool is_cpu) {
  const DType type = node.src[0]->type;
  if (node.op == Op::GetRows) return {{get_rows_shader(type), 3}};
  return {{mul_mat_shader(type, 1, is_cpu), 3}, {mul_mat_shader(type, kMulMatVecMaxCols + 1, is_cpu), 3}};
}

// Weight blocks are read as half-words (F32 as words): their offset must allow it.
void check_weight_alignment(const Bound& b, const Tensor& w, const char* what) {
  const size_t align = w.type == DType::F32 ? 4 : 2;
  if (b.offset % align != 0)
    throw Error(std::string("vulkan: ") + what + " " + quoted(w) + " is not " + std::to_string(align) + "-byte aligned");
}

void record_mul_mat(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Bound ba = r.bind(a, "weights"), bb = r.bind(b, "activations"), bd = r.bind(node, "result");
  check_weight_alignment(ba, a, "mul_mat weights");
  MulMatPush p{};
  p.K = static_cast<uint32_t>(a.ne[0]);
  p.M = static_cast<uint32_t>(a.ne[1]);
  p.N = static_cast<uint32_t>(b.ne[1]);
  p.ne2 = static_cast<uint32_t>(b.ne[2]);
  p.ne3 = static_cast<uint32_t>(b.ne[3]);
  p.r2 = static_cast<uint32_t>(b.ne[2] / a.ne[2]);
  p.r3 = static_cast<uint32_t>(b.ne[3] / a.ne[3]);
  p.a_off = ba.offset;
  p.a_nb1 = static_cast<uint32_t>(a.nb[1]);
  p.a_nb2 = static_cast<uint32_t>(a.nb[2]);
  p.a_nb3 = static_cast<uint32_t>(a.nb[3]);
  const auto b_nb = element_strides(b, 4);
  p.b_off = bb.offset_in(4, quoted(b));
  p.b_nb0 = b_nb[0];
  p.b_nb1 = b_nb[1];
  p.b_nb2 = b_nb[2];
  p.b_nb3 = b_nb[3];
  const auto d_nb = element_strides(node, 4);
  p.d_off = bd.offset_in(4, quoted(node));
  p.d_nb1 = d_nb[1];
  p.d_nb2 = d_nb[2];
  p.d_nb3 = d_nb[3];
  if (d_nb[0] != 1) throw Error("vulkan: mul_mat result " + quoted(node) + " must have adjacent elements");
  const uint64_t batches = static_cast<uint64_t>(p.ne2) * p.ne3;
  const uint64_t groups = b.ne[1] <= kMulMatVecMaxCols
                              ? static_cast<uint64_t>(p.M) * batches
                              : ceil_div(p.M, kMulMatTileM) * ceil_div(p.N, kMulMatTileN) * batches;
  r.dispatch(mul_mat_shader(a.type, b.ne[1], r.is_cpu()), {ba, bb, bd}, p, groups);
}

void record_get_rows(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& idx = *node.src[1];
  const Bound ba = r.bind(a, "source"), bi = r.bind(idx, "indices"), bd = r.bind(node, "result");
  check_weight_alignment(ba, a, "get_rows source");
  GetRowsPush p{};
  p.K = static_cast<uint32_t>(a.ne[0]);
  p.n_out = static_cast<uint32_t>(idx.ne[0]);
  p.a_rows = static_cast<uint32_t>(a.ne[1]);
  p.a_off = ba.offset;
  p.a_nb1 = static_cast<uint32_t>(a.nb[1]);
  p.idx_off = bi.offset_in(4, quoted(idx));
  p.idx_nb0 = element_strides(idx, 4)[0];
  const auto d_nb = element_strides(node, 4);
  if (d_nb[0] != 1) throw Error("vulkan: get_rows result " + quoted(node) + " must have adjacent elements");
  p.d_off = bd.offset_in(4, quoted(node));
  p.d_nb1 = d_nb[1];
  const uint64_t threads = static_cast<uint64_t>(p.K / sub_size(a.type)) * p.n_out;
  r.dispatch(get_rows_shader(a.type), {ba, bi, bd}, p, ceil_div(threads, kGetRowsGroup));
}

}  // namespace qlens::vulkan
