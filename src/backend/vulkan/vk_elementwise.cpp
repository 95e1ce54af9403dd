// Add, Mul, Div, Scale, Clamp, Silu, Gelu, Sigmoid, Tanh, Glu
// (shaders/elementwise.comp), AddId (shaders/add_id.comp) and Cpy, Cont
// (shaders/copy.comp): one thread per element, any strides.
#include <limits>

#include "backend/vulkan/vk_ops.h"
#include "qlens/error.h"

namespace qlens::vulkan {

namespace {

constexpr uint64_t kElementwiseGroup = 256;  // local_size_x of both shaders

struct ElementwisePush {
  uint32_t ne[4];
  uint32_t a_nb[4];
  uint32_t b_ne[4];
  uint32_t b_nb[4];
  uint32_t d_nb[4];
  uint32_t a_off, b_off, d_off;
  float param, param2;
};

struct ConcatPush {
  uint32_t ne[4];
  uint32_t a_ne[4];
  uint32_t a_nb[4];
  uint32_t b_nb[4];
  uint32_t d_nb[4];
  uint32_t a_off, b_off, d_off, dim;
};

struct SsmConvPush {
  uint32_t ne[4];
  uint32_t x_nb[4];
  uint32_t c_nb[4];
  uint32_t d_nb[4];
  uint32_t x_off, c_off, d_off, taps;
};

struct AddIdPush {
  uint32_t ne[4];
  uint32_t a_nb[4];
  uint32_t d_nb[4];
  uint32_t b_nb0, b_nb1, ids_nb0, ids_nb1, n_rows_b;
  uint32_t a_off, b_off, ids_off, d_off;
};

struct SetRowsPush {
  uint32_t ne[4];
  uint32_t a_nb[4];
  uint32_t b_nb[4];
  uint32_t d_nb[4];
  uint32_t ids_ne[4];
  uint32_t ids_nb[4];
  uint32_t a_off, b_off, ids_off, d_off;
};

struct CopyPush {
  uint32_t a_ne[4];
  uint32_t a_nb[4];
  uint32_t d_ne[4];
  uint32_t d_nb[4];
  uint32_t a_off, d_off, n;
};

const char* float_type_suffix(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    default: throw Error("vulkan: copy of type " + std::string(type_name(t)));
  }
}

void copy4(uint32_t (&dst)[4], const std::array<uint32_t, 4>& src) {
  for (int i = 0; i < 4; ++i) dst[i] = src[i];
}

// An arithmetic op's shader is its ggml name in lower case ("silu"), Glu's
// its variant's ("swiglu_oai"): one variant of elementwise.comp per OP_<NAME>
// the shader defines (vulkan.cmake reads them from it).
std::string elementwise_shader(const Tensor& node) {
  if (node.op == Op::Glu) return static_cast<GluKind>(node.params[0]) == GluKind::SwigluOai ? "swiglu_oai" : "swiglu";
  return op_lower_name(node.op);
}

// Cpy writes into its destination src[1] (the node is a view of it); Cont
// into the node.
const Tensor& copy_destination(const Tensor& node) { return node.op == Op::Cpy ? *node.src[1] : node; }

std::string copy_shader(const Tensor& node) {
  return std::string("copy_") + float_type_suffix(node.src[0]->type) + "_" +
         float_type_suffix(copy_destination(node).type);
}

}  // namespace

size_t element_bytes(DType type) {
  switch (type) {
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    default: return 0;
  }
}

bool indexable(const Tensor& t, size_t bytes) {
  if (bytes == 0 || t.nelements() > std::numeric_limits<uint32_t>::max()) return false;
  for (int i = 0; i < kMaxDims; ++i)
    if (t.nb[i] % bytes != 0) return false;
  return true;
}

bool supports_binary(const Tensor& node) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  return a && b && a->type == DType::F32 && b->type == DType::F32 && node.type == DType::F32 && indexable(*a, 4) &&
         indexable(*b, 4) && indexable(node, 4);
}

bool supports_unary(const Tensor& node) {
  const Tensor* a = node.src[0];
  return a && a->type == DType::F32 && node.type == DType::F32 && indexable(*a, 4) && indexable(node, 4);
}

bool supports_cpy(const Tensor& node) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  return a && b && is_float_type(a->type) && is_float_type(b->type) && indexable(*a, element_bytes(a->type)) &&
         indexable(*b, element_bytes(b->type));
}

bool supports_cont(const Tensor& node) {
  const Tensor* a = node.src[0];
  return a && is_float_type(a->type) && node.type == a->type && indexable(*a, element_bytes(a->type)) &&
         indexable(node, element_bytes(node.type));
}

std::vector<ShaderUse> elementwise_shaders(const Tensor& node) { return {{elementwise_shader(node), 3}}; }

std::vector<ShaderUse> copy_shaders(const Tensor& node) { return {{copy_shader(node), 2}}; }

void record_elementwise(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  // Unary ops bind a in b's place: the shader does not read it.
  const Tensor& b = node.src[1] ? *node.src[1] : a;
  const Bound ba = r.bind(a, "source"), bb = r.bind(b, "source"), bd = r.bind(node, "result");
  ElementwisePush p{};
  copy4(p.ne, shape_u32(node));
  copy4(p.a_nb, element_strides(a, 4));
  copy4(p.b_ne, shape_u32(b));
  copy4(p.b_nb, element_strides(b, 4));
  copy4(p.d_nb, element_strides(node, 4));
  p.a_off = ba.offset_in(4, "'" + a.name + "'");
  p.b_off = bb.offset_in(4, "'" + b.name + "'");
  p.d_off = bd.offset_in(4, "'" + node.name + "'");
  // An op's float parameters, as the shader's param and param2 (0 for ops
  // without: unset parameters are zero bits); Glu's are its 2 and 3.
  const int first_param = node.op == Op::Glu ? 2 : 0;
  p.param = node.param_f(first_param);
  p.param2 = node.param_f(first_param + 1);
  r.dispatch(elementwise_shader(node), {ba, bb, bd}, p, ceil_div(static_cast<uint64_t>(node.nelements()), kElementwiseGroup));
}

bool supports_concat(const Tensor& node) { return supports_binary(node); }

std::vector<ShaderUse> concat_shaders(const Tensor&, bool, bool) { return {{"concat", 3}}; }

void record_concat(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Bound ba = r.bind(a, "source"), bb = r.bind(b, "source"), bd = r.bind(node, "result");
  ConcatPush p{};
  copy4(p.ne, shape_u32(node));
  copy4(p.a_ne, shape_u32(a));
  copy4(p.a_nb, element_strides(a, 4));
  copy4(p.b_nb, element_strides(b, 4));
  copy4(p.d_nb, element_strides(node, 4));
  p.a_off = ba.offset_in(4, "'" + a.name + "'");
  p.b_off = bb.offset_in(4, "'" + b.name + "'");
  p.d_off = bd.offset_in(4, "'" + node.name + "'");
  p.dim = static_cast<uint32_t>(node.params[0]);
  r.dispatch("concat", {ba, bb, bd}, p, ceil_div(static_cast<uint64_t>(node.nelements()), kElementwiseGroup));
}

std::vector<ShaderUse> ssm_conv_shaders(const Tensor&, bool, bool) { return {{"ssm_conv", 3}}; }

void record_ssm_conv(Recorder& r, const Tensor& node) {
  const Tensor& sx = *node.src[0];
  const Tensor& c = *node.src[1];
  const Bound bx = r.bind(sx, "inputs"), bc = r.bind(c, "kernels"), bd = r.bind(node, "result");
  SsmConvPush p{};
  copy4(p.ne, shape_u32(node));
  copy4(p.x_nb, element_strides(sx, 4));
  copy4(p.c_nb, element_strides(c, 4));
  copy4(p.d_nb, element_strides(node, 4));
  p.x_off = bx.offset_in(4, "'" + sx.name + "'");
  p.c_off = bc.offset_in(4, "'" + c.name + "'");
  p.d_off = bd.offset_in(4, "'" + node.name + "'");
  p.taps = static_cast<uint32_t>(c.ne[0]);
  r.dispatch("ssm_conv", {bx, bc, bd}, p, ceil_div(static_cast<uint64_t>(node.nelements()), kElementwiseGroup));
}

bool supports_add_id(const Tensor& node) {
  const Tensor* ids = node.src[2];
  return supports_binary(node) && ids && ids->type == DType::I32 && indexable(*ids, 4);
}

std::vector<ShaderUse> add_id_shaders(const Tensor&, bool, bool) { return {{"add_id", 4}}; }

void record_add_id(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& ids = *node.src[2];
  const Bound ba = r.bind(a, "source"), bb = r.bind(b, "rows"), bi = r.bind(ids, "ids"), bd = r.bind(node, "result");
  AddIdPush p{};
  copy4(p.ne, shape_u32(node));
  copy4(p.a_nb, element_strides(a, 4));
  copy4(p.d_nb, element_strides(node, 4));
  const auto b_nb = element_strides(b, 4), ids_nb = element_strides(ids, 4);
  p.b_nb0 = b_nb[0];
  p.b_nb1 = b_nb[1];
  p.ids_nb0 = ids_nb[0];
  p.ids_nb1 = ids_nb[1];
  p.n_rows_b = static_cast<uint32_t>(b.ne[1]);
  p.a_off = ba.offset_in(4, "'" + a.name + "'");
  p.b_off = bb.offset_in(4, "'" + b.name + "'");
  p.ids_off = bi.offset_in(4, "'" + ids.name + "'");
  p.d_off = bd.offset_in(4, "'" + node.name + "'");
  r.dispatch("add_id", {ba, bb, bi, bd}, p, ceil_div(static_cast<uint64_t>(node.nelements()), kElementwiseGroup));
}

bool supports_set_rows(const Tensor& node) { return supports_add_id(node); }

std::vector<ShaderUse> set_rows_shaders(const Tensor&, bool, bool) { return {{"set_rows", 4}}; }

void record_set_rows(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& ids = *node.src[2];
  const Bound ba = r.bind(a, "source"), bb = r.bind(b, "rows"), bi = r.bind(ids, "ids"), bd = r.bind(node, "result");
  SetRowsPush p{};
  copy4(p.ne, shape_u32(node));
  copy4(p.a_nb, element_strides(a, 4));
  copy4(p.b_nb, element_strides(b, 4));
  copy4(p.d_nb, element_strides(node, 4));
  copy4(p.ids_ne, shape_u32(ids));
  copy4(p.ids_nb, element_strides(ids, 4));
  p.a_off = ba.offset_in(4, "'" + a.name + "'");
  p.b_off = bb.offset_in(4, "'" + b.name + "'");
  p.ids_off = bi.offset_in(4, "'" + ids.name + "'");
  p.d_off = bd.offset_in(4, "'" + node.name + "'");
  r.dispatch("set_rows", {ba, bb, bi, bd}, p, ceil_div(static_cast<uint64_t>(node.nelements()), kElementwiseGroup));
}

void record_copy(Recorder& r, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& d = copy_destination(node);
  if (a.nelements() != d.nelements())
    throw Error("vulkan: " + std::string(op_name(node.op)) + " '" + node.name + "': element counts differ");
  const size_t ea = element_bytes(a.type), ed = element_bytes(d.type);
  const Bound ba = r.bind(a, "source"), bd = r.bind(d, "destination");
  CopyPush p{};
  copy4(p.a_ne, shape_u32(a));
  copy4(p.a_nb, element_strides(a, ea));
  copy4(p.d_ne, shape_u32(d));
  copy4(p.d_nb, element_strides(d, ed));
  p.a_off = ba.offset_in(ea, "'" + a.name + "'");
  p.d_off = bd.offset_in(ed, "'" + d.name + "'");
  p.n = static_cast<uint32_t>(a.nelements());
  r.dispatch(copy_shader(node), {ba, bd}, p, ceil_div(static_cast<uint64_t>(p.n), kElementwiseGroup));
}

}  // namespace qlens::vulkan
