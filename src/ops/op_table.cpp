// The op table's rows: the rules of each op and its reference kernel.
#include "ops/op_table.h"

#include <cctype>
#include <cmath>

#include "ops/reference.h"

namespace qlens {

namespace {

// ---- rules shared by several ops; each returns why a node breaks it, or "".

std::string result_of(const Tensor& n, DType type) {
  if (n.type != type || n.nb[0] != type_traits(type).block_bytes)
    return std::string("result must be ") + type_name(type).data() + " with adjacent elements";
  return {};
}

bool is_f32(const Tensor* t) { return t && t->type == DType::F32; }

// Weights the kernels can read: a type with a conversion to float (MXFP4,
// the IQ2/IQ3 types have a format but no kernels yet).
bool readable(const Tensor* t) { return t && type_traits(t->type).to_float; }

// An F32 result of F32 sources.
std::string f32_unary(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  return is_f32(n.src[0]) ? "" : "source must be F32";
}

std::string f32_binary(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  if (!is_f32(a) || !is_f32(b)) return "source must be F32";
  for (int i = 0; i < kMaxDims; ++i)
    if (b->ne[i] == 0 || a->ne[i] % b->ne[i] != 0) return "cannot broadcast b";
  return {};
}

std::string no_rules(const Tensor&) { return {}; }

std::string leaf(const Tensor&) { return "a leaf is not computed"; }

// ---- one function per op whose rules are its own

std::string get_rows(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  if (!n.src[0] || !n.src[1] || n.src[1]->type != DType::I32) return "indices must be I32";
  if (!readable(n.src[0])) return "rows of a type the engine cannot read";
  return {};
}

std::string mul_mat(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  if (!a || !is_f32(b)) return "source must be F32";
  if (!readable(a)) return "weights of a type the engine cannot read";
  if (a->ne[0] != b->ne[0] || b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0) return "shapes do not match";
  return {};
}

std::string mul_mat_id(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  const Tensor* ids = n.src[2];
  if (!a || !is_f32(b)) return "source must be F32";
  if (!readable(a)) return "experts of a type the engine cannot read";
  if (!ids || ids->type != DType::I32) return "expert ids must be I32";
  if (a->ne[0] != b->ne[0] || b->ne[2] != ids->ne[1] || (b->ne[1] != 1 && b->ne[1] != ids->ne[0]) ||
      n.ne[0] != a->ne[1] || n.ne[1] != ids->ne[0] || n.ne[2] != ids->ne[1])
    return "shapes do not match";
  return {};
}

std::string argsort(const Tensor& n) {
  if (auto r = result_of(n, DType::I32); !r.empty()) return r;
  return is_f32(n.src[0]) ? "" : "source must be F32";
}

std::string rope(const Tensor& n) {
  if (auto r = f32_unary(n); !r.empty()) return r;
  const Tensor& a = *n.src[0];
  const Tensor* pos = n.src[1];
  const Tensor* factors = n.src[2];
  if (!pos || pos->type != DType::I32 || pos->ne[0] != a.ne[2]) return "positions must be I32, one per token";
  if (n.params[0] <= 0 || n.params[0] % 2 != 0 || n.params[0] > a.ne[0]) return "bad rotated dims";
  if (n.params[1] != static_cast<int32_t>(RopeMode::Normal) && n.params[1] != static_cast<int32_t>(RopeMode::NeoX))
    return "unknown rope mode " + std::to_string(n.params[1]);
  if (factors && (factors->type != DType::F32 || factors->nb[0] != sizeof(float) || factors->ne[0] < n.params[0] / 2))
    return "frequency factors must be a contiguous F32 vector of n_dims / 2 entries";
  return {};
}

std::string soft_max(const Tensor& n) {
  if (auto r = f32_unary(n); !r.empty()) return r;
  const Tensor* mask = n.src[1];
  if (mask && (mask->type != DType::F32 || mask->ne[0] != n.src[0]->ne[0] || mask->ne[1] < n.src[0]->ne[1]))
    return "mask does not cover the input";
  return {};
}

// Cpy writes its source into src[1] (the node is a view of it), Cont into
// the node.
std::string copy(const Tensor& n) {
  const Tensor* a = n.src[0];
  const Tensor* d = n.op == Op::Cpy ? n.src[1] : &n;
  if (!a || !d || !is_float_type(a->type) || !is_float_type(d->type)) return "copies F32, F16 and BF16 only";
  if (a->nelements() != d->nelements()) return "element counts differ";
  return {};
}

double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// One row per op, in the enum's order.
constexpr std::array<OpDef, kOpCount> kOps = {{
    {Op::None, "NONE", false, leaf, nullptr},
    {Op::GetRows, "GET_ROWS", false, get_rows, reference::get_rows},
    {Op::MulMat, "MUL_MAT", false, mul_mat, reference::mul_mat},
    {Op::Add, "ADD", false, f32_binary, reference::add},
    {Op::Mul, "MUL", false, f32_binary, reference::mul},
    {Op::Scale, "SCALE", false, f32_unary, reference::scale},
    {Op::RmsNorm, "RMS_NORM", false, f32_unary, reference::rms_norm},
    {Op::Rope, "ROPE", false, rope, reference::rope},
    {Op::SoftMax, "SOFT_MAX", false, soft_max, reference::soft_max},
    {Op::Silu, "SILU", false, f32_unary, reference::map_with<reference::silu_of>},
    {Op::Gelu, "GELU", false, f32_unary, reference::map_with<reference::gelu_of>},
    {Op::Cpy, "CPY", false, copy, reference::cpy},
    {Op::Cont, "CONT", false, copy, reference::cont},
    {Op::Reshape, "RESHAPE", true, no_rules, nullptr},
    {Op::View, "VIEW", true, no_rules, nullptr},
    {Op::Permute, "PERMUTE", true, no_rules, nullptr},
    {Op::Transpose, "TRANSPOSE", true, no_rules, nullptr},
    {Op::MulMatId, "MUL_MAT_ID", false, mul_mat_id, reference::mul_mat_id},
    {Op::ArgSort, "ARGSORT", false, argsort, reference::argsort_desc},
    {Op::SumRows, "SUM_ROWS", false, f32_unary, reference::sum_rows},
    {Op::Clamp, "CLAMP", false, f32_unary, reference::clamp},
    {Op::Div, "DIV", false, f32_binary, reference::div},
    {Op::Sigmoid, "SIGMOID", false, f32_unary, reference::map_with<sigmoid_of>},
}};
static_assert(rows_follow_ops(kOps), "kOps needs one row per Op, in the enum's order");

}  // namespace

const OpDef& op_def(Op op) { return kOps[static_cast<size_t>(op)]; }

const char* op_name(Op op) { return op_def(op).name; }

std::string op_lower_name(Op op) {
  std::string name = op_name(op);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

bool op_is_view(Op op) { return op_def(op).is_view; }

}  // namespace qlens
