// Ops along rows: RmsNorm and SoftMax (a workgroup per row, reductions in
// shared memory), Rope (a thread per element), SumRows (a thread per row)
// and ArgSort (a thread per element, counting the elements before it).
#include <cmath>

#include "backend/vulkan/vk_ops.h"
#include "ops/op_table.h"
#include "qlens/error.h"

namespace qlens::vulkan {

namespace {

constexpr uint64_t kRopeGroup = 256;  // local_size_x of shaders/rope.comp
constexpr uint64_t kRowsGroup = 64;   // local_size_x of the ROW_PER_INVOCATION variants and sum_rows
constexpr uint64_t kArgSortGroup = 256;  // local_size_x of shaders/argsort.comp
// ArgSort's invocations each read their whole row: longer rows (the cost
// grows with the square of their length) stay with the CPU.
constexpr int64_t kArgSortMaxRow = 4096;

// RmsNorm and SoftMax: a workgroup per row, or on CPU devices (where
// barriers are slow) an invocation per row.
std::string row_shader(const char* base, bool is_cpu) { return is_cpu ? std::string(base) + "_rows" : base; }

void dispatch_rows(Recorder& r, const char* shader, std::initializer_list<Bound> buffers, const auto& push,
                   uint64_t rows) {
  r.dispatch(row_shader(shader, r.is_cpu()), buffers, push, r.is_cpu() ? ceil_div(rows, kRowsGroup) : rows);
}

const char* rope_shader(bool has_float64) { return has_float64 ? "rope_f64" : "rope_f32"; }
const char* sum_rows_shader(bool has_float64) { return has_float64 ? "sum_rows_f64" : "sum_rows_f32"; }

struct RmsNormPush {
  uint32_t ne[4];
  uint32_t a_nb[4];
  uint32_t d_nb[4];
  uint32_t a_off, d_off;
  float eps;
};

// SumRows and ArgSort.
struct RowsPush {
  uint32_t ne[4];
  uint32_t a_nb[4];
  uint32_t d_nb[4];
  uint32_t a_off, d_off;
};

struct SoftMaxPush {
  uint32_t ne[4];
  uint32_t a_nb[4];
  uint32_t d_nb[4];
  uint32_t m_ne[4];
  uint32_t m_nb[4];
  uint32_t a_off, d_off, m_off, has_mask;
  float scale;
  uint32_t s_off, s_nb0, has_sinks;
};

struct RopePush {
  uint32_t ne[4];
  uint32_t a_nb[4];
  uint32_t d_nb[4];
  uint32_t sections[4];  // the multi-section modes'
  uint32_t a_off, d_off, pos_off, pos_nb0;
  uint32_t n_dims, mode;  // 0 normal, 1 NeoX, 2 MRope, 3 IMRope
  float freq_scale, theta_scale_hi, theta_scale_lo;
  uint32_t f_off, has_factors;
  float ext_factor, mscale, corr_low, corr_high;
};

void copy4(uint32_t (&dst)[4], const std::array<uint32_t, 4>& src) {
  for (int i = 0; i < 4; ++i) dst[i] = src[i];
}

std::string quoted(const Tensor& t) { return "'" + t.name + "'"; }

}  // namespace

namespace {

// An F32 row op's source and result.
bool f32_rows_indexable(const Tensor& node) {
  const Tensor* a = node.src[0];
  return a && a->type == DType::F32 && indexable(*a, 4) && indexable(node, 4);
}

}  // namespace

bool supports_f32_row_op(const Tensor& node) { return f32_rows_indexable(node) && node.type == DType::F32; }

bool supports_soft_max(const Tensor& node) {
  const Tensor* mask = node.src[1];
  const Tensor* sinks = node.src[2];
  return supports_f32_row_op(node) && (!mask || (mask->type == DType::F32 && indexable(*mask, 4))) &&
         (!sinks || (sinks->type == DType::F32 && indexable(*sinks, 4)));
}

bool supports_rope(const Tensor& node) {
  const Tensor* pos = node.src[1];
  const Tensor* factors = node.src[2];
  return supports_f32_row_op(node) && pos && pos->type == DType::I32 && indexable(*pos, 4) &&
         (!factors || (factors->type == DType::F32 && indexable(*factors, 4)));
}

bool supports_argsort(const Tensor& node) {
  return f32_rows_indexable(node) && node.type == DType::I32 && node.src[0]->ne[0] <= kArgSortMaxRow;
}

std::vector<ShaderUse> rms_norm_shaders(const Tensor&, bool is_cpu, bool) {
  return {{row_shader("rms_norm", is_cpu), 2}};
}
std::vector<ShaderUse> l2_norm_shaders(const Tensor&, bool is_cpu, bool) {
  return {{row_shader("l2_norm", is_cpu), 2}};
}
std::vector<ShaderUse> soft_max_shaders(const Tensor&, bool is_cpu, bool) {
  return {{row_shader("soft_max", is_cpu), 4}};
}
std::vector<ShaderUse> rope_shaders(const Tensor&, bool, bool has_float64) { return {{rope_shader(has_float64), 4}}; }
std::vector<ShaderUse> sum_rows_shaders(const Tensor&, bool, bool has_float64) {
  return {{sum_rows_shader(has_float64), 2}};
}
std::vector<ShaderUse> argsort_shaders(const Tensor&, bool, bool) { return {{"argsort", 2}}; }

void record_rms_norm(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Bound ba = r.bind(a, "source"), bd = r.bind(node, "result");
  RmsNormPush p{};
  copy4(p.ne, shape_u32(node));
  copy4(p.a_nb, element_strides(a, 4));
  copy4(p.d_nb, element_strides(node, 4));
  p.a_off = ba.offset_in(4, quoted(a));
  p.d_off = bd.offset_in(4, quoted(node));
  p.eps = node.param_f(0);
  dispatch_rows(r, node.op == Op::L2Norm ? "l2_norm" : "rms_norm", {ba, bd}, p, static_cast<uint64_t>(node.nrows()));
}

void record_soft_max(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor* mask = node.src[1];
  const Bound ba = r.bind(a, "source"), bd = r.bind(node, "result");
  const Bound bm = mask ? r.bind(*mask, "mask") : ba;  // without a mask the shader does not read it
  SoftMaxPush p{};
  copy4(p.ne, shape_u32(node));
  copy4(p.a_nb, element_strides(a, 4));
  copy4(p.d_nb, element_strides(node, 4));
  copy4(p.m_ne, mask ? shape_u32(*mask) : std::array<uint32_t, 4>{1, 1, 1, 1});
  copy4(p.m_nb, mask ? element_strides(*mask, 4) : std::array<uint32_t, 4>{0, 0, 0, 0});
  p.a_off = ba.offset_in(4, quoted(a));
  p.d_off = bd.offset_in(4, quoted(node));
  p.m_off = mask ? bm.offset_in(4, quoted(*mask)) : 0;
  p.has_mask = mask ? 1 : 0;
  p.scale = node.param_f(0);
  const Tensor* sinks = node.src[2];
  const Bound bs = sinks ? r.bind(*sinks, "sinks") : ba;  // without sinks the shader does not read them
  p.s_off = sinks ? bs.offset_in(4, quoted(*sinks)) : 0;
  p.s_nb0 = sinks ? element_strides(*sinks, 4)[0] : 0;
  p.has_sinks = sinks ? 1 : 0;
  dispatch_rows(r, "soft_max", {ba, bm, bs, bd}, p, static_cast<uint64_t>(node.nrows()));
}

void record_rope(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& pos = *node.src[1];
  const Tensor* factors = node.src[2];
  const Bound ba = r.bind(a, "source"), bp = r.bind(pos, "positions"), bd = r.bind(node, "result");
  const Bound bf = factors ? r.bind(*factors, "frequency factors") : ba;  // not read without factors
  RopePush p{};
  p.f_off = factors ? bf.offset_in(4, quoted(*factors)) : 0;
  p.has_factors = factors ? 1 : 0;
  copy4(p.ne, shape_u32(node));
  copy4(p.a_nb, element_strides(a, 4));
  copy4(p.d_nb, element_strides(node, 4));
  p.a_off = ba.offset_in(4, quoted(a));
  p.d_off = bd.offset_in(4, quoted(node));
  p.pos_off = bp.offset_in(4, quoted(pos));
  p.pos_nb0 = element_strides(pos, 4)[0];
  p.n_dims = static_cast<uint32_t>(node.params[0]);
  const RopeMode mode = rope_mode(node);
  p.mode = mode == RopeMode::Normal ? 0 : mode == RopeMode::NeoX ? 1 : mode == RopeMode::MRope ? 2 : 3;
  const RopeSections sections = rope_sections(node);
  for (int i = 0; i < 4; ++i) p.sections[i] = static_cast<uint32_t>(sections[i]);
  p.freq_scale = node.param_f(3);
  // theta_scale = base^(-2/n_dims) in double, handed over as hi + lo floats.
  const double theta_scale = std::pow(static_cast<double>(node.param_f(2)), -2.0 / static_cast<double>(p.n_dims));
  p.theta_scale_hi = static_cast<float>(theta_scale);
  p.theta_scale_lo = static_cast<float>(theta_scale - static_cast<double>(p.theta_scale_hi));
  const RopeYarnParams yarn = rope_yarn_params(node);
  p.ext_factor = yarn.ext_factor;
  p.mscale = yarn.mscale;
  p.corr_low = yarn.low;
  p.corr_high = yarn.high;
  r.dispatch(rope_shader(r.has_float64()), {ba, bp, bf, bd}, p,
             ceil_div(static_cast<uint64_t>(node.nelements()), kRopeGroup));
}

namespace {

RowsPush rows_push(const Tensor& node, const Bound& ba, const Bound& bd) {
  const Tensor& a = *node.src[0];
  RowsPush p{};
  copy4(p.ne, shape_u32(a));
  copy4(p.a_nb, element_strides(a, 4));
  copy4(p.d_nb, element_strides(node, 4));
  p.a_off = ba.offset_in(4, quoted(a));
  p.d_off = bd.offset_in(4, quoted(node));
  return p;
}

}  // namespace

void record_sum_rows(Recorder& r, const Tensor& node) {
  const Bound ba = r.bind(*node.src[0], "source"), bd = r.bind(node, "result");
  r.dispatch(sum_rows_shader(r.has_float64()), {ba, bd}, rows_push(node, ba, bd),
             ceil_div(static_cast<uint64_t>(node.nrows()), kRowsGroup));
}

void record_argsort(Recorder& r, const Tensor& node) {
  const Bound ba = r.bind(*node.src[0], "source"), bd = r.bind(node, "result");
  r.dispatch("argsort", {ba, bd}, rows_push(node, ba, bd),
             ceil_div(static_cast<uint64_t>(node.nelements()), kArgSortGroup));
}

}  // namespace qlens::vulkan
