// The op table's rows: the rules of each op and its reference kernel.
#include "ops/op_table.h"

#include <cctype>
#include <cmath>

#include "ops/reference.h"

namespace qlens {

namespace {

// ---- rules shared by several ops; each returns why a node breaks it, or "".
// The build functions throw with these words (build.cpp), so they name the
// tensors.

std::string result_of(const Tensor& n, DType type) {
  if (n.type != type || n.nb[0] != type_traits(type).block_bytes)
    return std::string("result must be ") + type_name(type).data() + " with adjacent elements";
  return {};
}

// "" when the source is F32, else why not.
std::string f32_source(const Tensor* t) {
  if (!t) return "a source is missing";
  if (t->type != DType::F32) return describe(*t) + " must be F32, is " + std::string(type_name(t->type));
  return {};
}

// Weights the kernels can read: a type with a conversion to float (MXFP4,
// the IQ2/IQ3 types have a format but no kernels yet).
std::string readable(const Tensor* t, const char* what) {
  if (!t) return "a source is missing";
  if (!type_traits(t->type).to_float)
    return std::string(what) + " " + describe(*t) + " are " + type_name(t->type).data() +
           ", a type the engine cannot compute with";
  return {};
}

// An F32 result of F32 sources.
std::string f32_unary(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  return f32_source(n.src[0]);
}

std::string f32_binary(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  if (auto r = f32_source(a); !r.empty()) return r;
  if (auto r = f32_source(b); !r.empty()) return r;
  for (int i = 0; i < kMaxDims; ++i)
    if (b->ne[i] == 0 || a->ne[i] % b->ne[i] != 0) return describe(*b) + " cannot be broadcast to " + describe(*a);
  return {};
}

std::string no_rules(const Tensor&) { return {}; }

std::string leaf(const Tensor&) { return "a leaf is not computed"; }

// ---- one function per op whose rules are its own

std::string get_rows(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  const Tensor* a = n.src[0];
  const Tensor* idx = n.src[1];
  if (auto r = readable(a, "rows"); !r.empty()) return r;
  if (!idx || idx->type != DType::I32) return "indices must be I32";
  if (idx->ne[2] != 1 || idx->ne[3] != 1) return "index " + describe(*idx) + " must be 1-D or 2-D";
  if (a->ne[3] != 1 || (idx->ne[1] == 1 ? a->ne[2] != 1 : a->ne[2] != idx->ne[1]))
    return describe(*a) + " must have one slice per index column of " + describe(*idx);
  return {};
}

std::string mul_mat(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  if (auto r = readable(a, "weights"); !r.empty()) return r;
  if (auto r = f32_source(b); !r.empty()) return r;
  if (a->ne[0] != b->ne[0]) return "row lengths differ: " + describe(*a) + " and " + describe(*b);
  if (b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0)
    return describe(*a) + " cannot be broadcast to " + describe(*b);
  return {};
}

std::string mul_mat_id(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  const Tensor* as = n.src[0];
  const Tensor* b = n.src[1];
  const Tensor* ids = n.src[2];
  if (auto r = readable(as, "experts"); !r.empty()) return r;
  if (auto r = f32_source(b); !r.empty()) return r;
  if (!ids || ids->type != DType::I32 || ids->ne[2] != 1 || ids->ne[3] != 1)
    return "expert ids must be I32 [n_used, n_tokens]";
  if (as->ne[3] != 1) return "experts " + describe(*as) + " must be [K, M, n_expert]";
  if (b->ne[0] != as->ne[0] || b->ne[2] != ids->ne[1] || b->ne[3] != 1 || (b->ne[1] != 1 && b->ne[1] != ids->ne[0]))
    return describe(*b) + " must be [" + std::to_string(as->ne[0]) + ", 1 or " + std::to_string(ids->ne[0]) + ", " +
           std::to_string(ids->ne[1]) + "] for experts " + describe(*as) + " and ids " + describe(*ids);
  if (n.ne[0] != as->ne[1] || n.ne[1] != ids->ne[0] || n.ne[2] != ids->ne[1]) return "result shape does not match";
  return {};
}

std::string argsort(const Tensor& n) {
  if (auto r = result_of(n, DType::I32); !r.empty()) return r;
  return f32_source(n.src[0]);
}

std::string rope(const Tensor& n) {
  if (auto r = f32_unary(n); !r.empty()) return r;
  const Tensor& a = *n.src[0];
  const Tensor* pos = n.src[1];
  const Tensor* factors = n.src[2];
  const RopeMode mode = rope_mode(n);
  if (mode != RopeMode::Normal && mode != RopeMode::NeoX && !rope_is_multi(mode))
    return "unknown rope mode " + std::to_string(n.params[1]);
  const int64_t per_token = rope_is_multi(mode) ? 4 : 1;
  if (!pos || pos->type != DType::I32 || pos->ne[0] != per_token * a.ne[2] || pos->nelements() != pos->ne[0])
    return "positions " + (pos ? describe(*pos) : std::string("(none)")) + " must be an I32 vector with " +
           (per_token == 1 ? std::string("one entry") : std::string("four entries")) + " per token of " + describe(a);
  const int n_dims = n.params[0];
  if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > a.ne[0])
    return "rotated dims " + std::to_string(n_dims) + " must be even and at most the head size of " + describe(a);
  if (rope_is_multi(mode)) {
    // ggml's bounds: no negative section, some pairs for the three positions
    // a text or image token has, no more pairs in a period than the head has.
    const RopeSections s = rope_sections(n);
    const int64_t total = static_cast<int64_t>(s[0]) + s[1] + s[2] + s[3];
    if (s[0] < 0 || s[1] < 0 || s[2] < 0 || s[3] < 0 || s[0] + s[1] + s[2] == 0 || total > a.ne[0])
      return "sections {" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ", " + std::to_string(s[2]) + ", " +
             std::to_string(s[3]) + "} must be non-negative, not all of the first three 0, and sum to at most " +
             "the head size of " + describe(a);
  }
  if (factors && (factors->type != DType::F32 || factors->nb[0] != sizeof(float) || factors->ne[0] < n_dims / 2 ||
                  factors->nelements() != factors->ne[0]))
    return "frequency factors " + describe(*factors) + " must be a contiguous F32 vector of at least " +
           std::to_string(n_dims / 2) + " entries";
  if (!std::isfinite(n.param_f(4)) || !std::isfinite(n.param_f(5)) || !std::isfinite(n.param_f(6)) ||
      !std::isfinite(n.param_f(7)))
    return "YaRN's parameters must be finite";
  return {};
}

std::string soft_max(const Tensor& n) {
  if (auto r = f32_unary(n); !r.empty()) return r;
  const Tensor* mask = n.src[1];
  const Tensor* sinks = n.src[2];
  if (mask) {
    if (auto r = f32_source(mask); !r.empty()) return r;
    if (mask->ne[0] != n.src[0]->ne[0] || mask->ne[1] < n.src[0]->ne[1])
      return "mask " + describe(*mask) + " does not cover " + describe(*n.src[0]);
  }
  if (sinks && (sinks->type != DType::F32 || sinks->nb[0] != sizeof(float) || sinks->ne[0] != n.src[0]->ne[2] ||
                sinks->nelements() != sinks->ne[0]))
    return "sinks " + describe(*sinks) + " must be an F32 vector with one entry per head (dim 2) of " +
           describe(*n.src[0]);
  return {};
}

std::string glu(const Tensor& n) {
  if (auto r = f32_unary(n); !r.empty()) return r;
  const Tensor* x = n.src[0];
  const Tensor* y = n.src[1];
  if (auto r = f32_source(y); !r.empty()) return r;
  if (x->ne != y->ne) return "gate " + describe(*x) + " and value " + describe(*y) + " differ in shape";
  const auto kind = static_cast<GluKind>(n.params[0]);
  if (kind != GluKind::Swiglu && kind != GluKind::SwigluOai) return "unknown GLU variant " + std::to_string(n.params[0]);
  return {};
}

std::string concat(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  if (auto r = f32_source(a); !r.empty()) return r;
  if (auto r = f32_source(b); !r.empty()) return r;
  const int dim = n.params[0];
  if (dim < 0 || dim >= kMaxDims) return "dimension " + std::to_string(dim) + " is not 0-3";
  for (int i = 0; i < kMaxDims; ++i)
    if (i != dim && a->ne[i] != b->ne[i])
      return describe(*a) + " and " + describe(*b) + " differ outside dimension " + std::to_string(dim);
  if (n.ne[dim] != a->ne[dim] + b->ne[dim]) return "result shape does not match";
  return {};
}

std::string set_rows(const Tensor& n) {
  if (auto r = f32_unary(n); !r.empty()) return r;
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  const Tensor* ids = n.src[2];
  if (auto r = f32_source(b); !r.empty()) return r;
  if (!ids || ids->type != DType::I32 || ids->ne[3] != 1) return "ids must be I32 [rows, ne11, ne12]";
  if (b->ne[0] != a->ne[0] || b->ne[2] != a->ne[2] || b->ne[3] != a->ne[3])
    return "rows " + describe(*b) + " must be [" + std::to_string(a->ne[0]) + ", rows, " + std::to_string(a->ne[2]) +
           ", " + std::to_string(a->ne[3]) + "]";
  if (ids->ne[0] != b->ne[1] || a->ne[2] % ids->ne[1] != 0 || a->ne[3] % ids->ne[2] != 0)
    return "ids " + describe(*ids) + " must have one id per row of " + describe(*b) + ", broadcast over " +
           describe(*a);
  return {};
}

std::string ssm_conv(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  const Tensor* sx = n.src[0];
  const Tensor* c = n.src[1];
  if (auto r = f32_source(sx); !r.empty()) return r;
  if (auto r = f32_source(c); !r.empty()) return r;
  if (c->ne[2] != 1 || c->ne[3] != 1 || sx->ne[3] != 1) return "kernels " + describe(*c) + " must be a matrix and " +
                                                               describe(*sx) + " 3-D";
  if (sx->ne[1] != c->ne[1] || sx->ne[0] < c->ne[0])
    return describe(*sx) + " must hold at least " + std::to_string(c->ne[0]) + " inputs for each of the " +
           std::to_string(c->ne[1]) + " channels of " + describe(*c);
  if (n.ne[0] != c->ne[1] || n.ne[1] != sx->ne[0] - c->ne[0] + 1 || n.ne[2] != sx->ne[2])
    return "result shape does not match";
  return {};
}

std::string gated_delta_net(const Tensor& n) {
  if (auto r = result_of(n, DType::F32); !r.empty()) return r;
  for (int i = 0; i < 6; ++i)
    if (auto r = f32_source(n.src[i]); !r.empty()) return r;
  const Tensor& q = *n.src[0];
  const Tensor& k = *n.src[1];
  const Tensor& v = *n.src[2];
  const Tensor& gate = *n.src[3];
  const Tensor& beta = *n.src[4];
  const Tensor& state = *n.src[5];
  const int64_t S = v.ne[0], H = v.ne[1], T = v.ne[2], seqs = v.ne[3];
  const auto dims = [](std::initializer_list<int64_t> d) {
    std::string s = "[";
    for (int64_t x : d) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
    return s + "]";
  };
  if (v.nelements() == 0) return "values " + describe(v) + " must not be empty";
  if (q.ne != k.ne) return "queries " + describe(q) + " and keys " + describe(k) + " differ in shape";
  if (q.ne[0] != S || q.ne[1] == 0 || H % q.ne[1] != 0 || q.ne[2] != T || q.ne[3] != seqs)
    return "queries and keys " + describe(q) + " must be [" + std::to_string(S) + ", H_k, " + std::to_string(T) +
           ", " + std::to_string(seqs) + "] with H_k dividing the " + std::to_string(H) + " heads of values " +
           describe(v);
  if ((gate.ne[0] != 1 && gate.ne[0] != S) || gate.ne[1] != H || gate.ne[2] != T || gate.ne[3] != seqs)
    return "gate " + describe(gate) + " must be " + dims({1, H, T, seqs}) + " or " + dims({S, H, T, seqs});
  if (beta.ne != std::array<int64_t, kMaxDims>{1, H, T, seqs})
    return "beta " + describe(beta) + " must be " + dims({1, H, T, seqs});
  if (state.ne != std::array<int64_t, kMaxDims>{S, S, H, seqs})
    return "state " + describe(state) + " must be " + dims({S, S, H, seqs});
  if (n.params[0] != 1)
    return "only the final state is kept (snapshots K = 1), not K = " + std::to_string(n.params[0]);
  if (n.ne != std::array<int64_t, kMaxDims>{S * H, T * seqs + S * seqs, 1, 1}) return "result shape does not match";
  return {};
}

std::string add_id(const Tensor& n) {
  if (auto r = f32_unary(n); !r.empty()) return r;
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  const Tensor* ids = n.src[2];
  if (auto r = f32_source(b); !r.empty()) return r;
  if (!ids || ids->type != DType::I32 || ids->ne[2] != 1 || ids->ne[3] != 1) return "ids must be I32 [n_used, n_tokens]";
  if (b->ne[0] != a->ne[0] || b->ne[2] != 1 || b->ne[3] != 1)
    return "rows " + describe(*b) + " must be [" + std::to_string(a->ne[0]) + ", n]";
  if (a->ne[1] != ids->ne[0] || a->ne[2] != ids->ne[1] || a->ne[3] != 1)
    return describe(*a) + " must have one row per id of " + describe(*ids);
  return {};
}

// Cpy writes its source into src[1] (the node is a view of it), Cont into
// the node.
std::string copy(const Tensor& n) {
  const Tensor* a = n.src[0];
  const Tensor* d = n.op == Op::Cpy ? n.src[1] : &n;
  if (!a || !d) return "a source is missing";
  for (const Tensor* t : {a, d})
    if (!is_float_type(t->type)) return describe(*t) + " must be F32, F16 or BF16";
  if (a->nelements() != d->nelements()) return "element counts differ: " + describe(*a) + " into " + describe(*d);
  return {};
}

double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double tanh_of(double x) { return std::tanh(x); }
// ggml's softplus: x itself above 20, where ln(1 + e^x) rounds to it in float.
double softplus_of(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

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
    {Op::Glu, "GLU", false, glu, reference::glu},
    {Op::AddId, "ADD_ID", false, add_id, reference::add_id},
    {Op::Softplus, "SOFTPLUS", false, f32_unary, reference::map_with<softplus_of>},
    {Op::L2Norm, "L2_NORM", false, f32_unary, reference::l2_norm},
    {Op::Concat, "CONCAT", false, concat, reference::concat},
    {Op::SsmConv, "SSM_CONV", false, ssm_conv, reference::ssm_conv},
    {Op::GatedDeltaNet, "GATED_DELTA_NET", false, gated_delta_net, reference::gated_delta_net},
    {Op::Fill, "FILL", false, f32_unary, reference::fill},
    {Op::SetRows, "SET_ROWS", false, set_rows, reference::set_rows},
    {Op::Tanh, "TANH", false, f32_unary, reference::map_with<tanh_of>},
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
