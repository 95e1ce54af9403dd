// MulMat and MulMatId (a matrix-vector path for few activation rows, a tiled
// matrix-matrix path otherwise) and GetRows, for every weight type of
// shaders/weight_types.glsl (kWeightTypes: the generated list of the types
// src/core/types.tsv gives a Vulkan SUB_SIZE). Activations stay F32: results
// differ from the reference's double sums only by float rounding.
#include <cctype>
#include <limits>

#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_weight_types.h"
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

// The MUL_MAT_ID variants' (the same file).
struct MulMatIdPush {
  MulMatPush mm;
  uint32_t ids_off, ids_nb0, ids_nb1;
  uint32_t n_used, b_ne1, n_expert;
};

struct GetRowsPush {
  uint32_t K, n_out, n_slices, a_rows, a_off, a_nb1, a_nb2, idx_off, idx_nb0, idx_nb1, d_off, d_nb1, d_nb2;
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

// The alignment the shaders read a weight type's blocks with: F32 as words,
// blocks of an even size (fp16 scales) as half words, MXFP4's 17-byte blocks
// as bytes alone.
size_t weight_alignment(DType type) {
  if (type == DType::F32) return 4;
  return type_traits(type).block_bytes % 2 == 0 ? 2 : 1;
}

// Weights: whole blocks along rows, rows aligned as the type is read, byte
// strides that fit the shaders' 32-bit offsets.
bool weights_readable(const Tensor& a) {
  const TypeTraits& tt = type_traits(a.type);
  if (!is_weight_type(a.type) || a.nb[0] != tt.block_bytes) return false;
  const size_t align = weight_alignment(a.type);
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

// The expert matmul's variants: the matrix-vector one while the (slot, token)
// pairs are few (generation), else the tiled one, per expert.
std::string mul_mat_id_shader(DType type, int64_t n_pairs, bool is_cpu) {
  const char* path = n_pairs <= kMulMatVecMaxCols ? "mul_mat_id_vec_" : is_cpu ? "mul_mat_id_direct_" : "mul_mat_id_";
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
  if (node.op == Op::MulMatId) {
    const Tensor* ids = node.src[2];
    return b->type == DType::F32 && indexable(*b, 4) && ids && ids->type == DType::I32 && indexable(*ids, 4);
  }
  return false;
}

std::vector<ShaderUse> matmul_shaders(const Tensor& node, bool is_cpu) {
  const DType type = node.src[0]->type;
  // Each takes its buffers and the lattice (Recorder::lattice) last.
  if (node.op == Op::GetRows) return {{get_rows_shader(type), 4}};
  if (node.op == Op::MulMatId)
    return {{mul_mat_id_shader(type, 1, is_cpu), 5}, {mul_mat_id_shader(type, kMulMatVecMaxCols + 1, is_cpu), 5}};
  return {{mul_mat_shader(type, 1, is_cpu), 4}, {mul_mat_shader(type, kMulMatVecMaxCols + 1, is_cpu), 4}};
}

// The weights' offset must allow the reads of weight_alignment.
void check_weight_alignment(const Bound& b, const Tensor& w, const char* what) {
  const size_t align = weight_alignment(w.type);
  if (b.offset % align != 0)
    throw Error(std::string("vulkan: ") + what + " " + quoted(w) + " is not " + std::to_string(align) + "-byte aligned");
}

namespace {

// The parts of both mul_mat paths' parameters that MulMat and MulMatId share:
// sizes and the strides of dims 0..2 (MulMat's batch dims are set apart).
MulMatPush mul_mat_push(const Tensor& node, const Bound& ba, const Bound& bb, const Bound& bd) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  check_weight_alignment(ba, a, node.op == Op::MulMatId ? "mul_mat_id experts" : "mul_mat weights");
  MulMatPush p{};
  p.K = static_cast<uint32_t>(a.ne[0]);
  p.M = static_cast<uint32_t>(a.ne[1]);
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
  if (d_nb[0] != 1)
    throw Error(std::string("vulkan: ") + op_name(node.op) + " result " + quoted(node) +
                " must have adjacent elements");
  p.d_off = bd.offset_in(4, quoted(node));
  p.d_nb1 = d_nb[1];
  p.d_nb2 = d_nb[2];
  p.d_nb3 = d_nb[3];
  return p;
}

}  // namespace

void record_mul_mat(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Bound ba = r.bind(a, "weights"), bb = r.bind(b, "activations"), bd = r.bind(node, "result");
  MulMatPush p = mul_mat_push(node, ba, bb, bd);
  p.N = static_cast<uint32_t>(b.ne[1]);
  p.ne2 = static_cast<uint32_t>(b.ne[2]);
  p.ne3 = static_cast<uint32_t>(b.ne[3]);
  p.r2 = static_cast<uint32_t>(b.ne[2] / a.ne[2]);
  p.r3 = static_cast<uint32_t>(b.ne[3] / a.ne[3]);
  const uint64_t batches = static_cast<uint64_t>(p.ne2) * p.ne3;
  const uint64_t groups = b.ne[1] <= kMulMatVecMaxCols
                              ? static_cast<uint64_t>(p.M) * batches
                              : ceil_div(p.M, kMulMatTileM) * ceil_div(p.N, kMulMatTileN) * batches;
  r.dispatch(mul_mat_shader(a.type, b.ne[1], r.is_cpu()), {ba, bb, bd, r.lattice()}, p, groups);
}

void record_mul_mat_id(Recorder& r, const Tensor& node) {
  const Tensor& as = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& ids = *node.src[2];
  const Bound ba = r.bind(as, "experts"), bb = r.bind(b, "activations"), bd = r.bind(node, "result");
  const Bound bi = r.bind(ids, "expert ids");
  MulMatIdPush p{};
  p.mm = mul_mat_push(node, ba, bb, bd);
  const uint64_t pairs = static_cast<uint64_t>(ids.ne[0]) * static_cast<uint64_t>(ids.ne[1]);
  p.mm.N = static_cast<uint32_t>(pairs);
  p.mm.ne2 = p.mm.ne3 = p.mm.r2 = p.mm.r3 = 1;
  const auto ids_nb = element_strides(ids, 4);
  p.ids_off = bi.offset_in(4, quoted(ids));
  p.ids_nb0 = ids_nb[0];
  p.ids_nb1 = ids_nb[1];
  p.n_used = static_cast<uint32_t>(ids.ne[0]);
  p.b_ne1 = static_cast<uint32_t>(b.ne[1]);
  p.n_expert = static_cast<uint32_t>(as.ne[2]);
  // The tiled path: every expert's slice, and one for ids out of range, over
  // as many column tiles as all pairs would fill.
  const uint64_t groups = pairs <= static_cast<uint64_t>(kMulMatVecMaxCols)
                              ? static_cast<uint64_t>(p.mm.M) * pairs
                              : ceil_div(p.mm.M, kMulMatTileM) * ceil_div(pairs, kMulMatTileN) * (p.n_expert + 1);
  r.dispatch(mul_mat_id_shader(as.type, static_cast<int64_t>(pairs), r.is_cpu()), {ba, bb, bd, bi, r.lattice()}, p,
             groups);
}

void record_get_rows(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& idx = *node.src[1];
  const Bound ba = r.bind(a, "source"), bi = r.bind(idx, "indices"), bd = r.bind(node, "result");
  check_weight_alignment(ba, a, "get_rows source");
  GetRowsPush p{};
  p.K = static_cast<uint32_t>(a.ne[0]);
  p.n_out = static_cast<uint32_t>(idx.ne[0]);
  p.n_slices = static_cast<uint32_t>(idx.ne[1]);
  p.a_rows = static_cast<uint32_t>(a.ne[1]);
  p.a_off = ba.offset;
  p.a_nb1 = static_cast<uint32_t>(a.nb[1]);
  p.a_nb2 = static_cast<uint32_t>(a.nb[2]);
  const auto idx_nb = element_strides(idx, 4);
  p.idx_off = bi.offset_in(4, quoted(idx));
  p.idx_nb0 = idx_nb[0];
  p.idx_nb1 = idx_nb[1];
  const auto d_nb = element_strides(node, 4);
  if (d_nb[0] != 1) throw Error("vulkan: get_rows result " + quoted(node) + " must have adjacent elements");
  p.d_off = bd.offset_in(4, quoted(node));
  p.d_nb1 = d_nb[1];
  p.d_nb2 = d_nb[2];
  const uint64_t threads = static_cast<uint64_t>(p.K / sub_size(a.type)) * p.n_out * p.n_slices;
  r.dispatch(get_rows_shader(a.type), {ba, bi, bd, r.lattice()}, p, ceil_div(threads, kGetRowsGroup));
}

}  // namespace qlens::vulkan
