// The build functions of qlens/tensor.h. Each infers its result's shape and
// type and sets the op's parameters; the node is then checked by its op's
// rules in the op table (op_table.cpp), the same rules every backend checks
// before it runs a node, so they are written once. Views have no rules there:
// their geometry is checked here.
#include <algorithm>
#include <cmath>

#include "ops/op_table.h"
#include "qlens/error.h"
#include "qlens/tensor.h"

namespace qlens {

namespace {

[[noreturn]] void fail(const std::string& op, const std::string& what) { throw Error(op + ": " + what); }

// The node if it keeps its op's rules; an Error naming the op and the rule otherwise.
Tensor* checked(Tensor* t) {
  if (auto why = op_def(t->op).invalid(*t); !why.empty()) fail(op_lower_name(t->op), why);
  return t;
}

Tensor* make_result(Graph& g, Op op, const std::array<int64_t, kMaxDims>& ne, Tensor* a, Tensor* b = nullptr,
                    DType type = DType::F32) {
  Tensor* t = g.new_tensor(type, ne);
  t->op = op;
  t->src[0] = a;
  t->src[1] = b;
  return t;
}

// A view of `src` sharing its memory (possibly through a chain of views).
// Views are named after their source as ggml names them ("Qcur-0 (reshaped)")
// until the caller names them.
void name_view(Tensor& t, Op op, const Tensor& src) {
  const char* suffix = op == Op::Reshape     ? " (reshaped)"
                       : op == Op::Permute   ? " (permuted)"
                       : op == Op::Transpose ? " (transposed)"
                                             : " (view)";
  t.name.assign(src.name).append(suffix);
}

Tensor* make_view(Graph& g, Op op, Tensor* src, const std::array<int64_t, kMaxDims>& ne,
                  const std::array<size_t, kMaxDims>& nb, size_t offset) {
  Tensor* t = g.new_tensor(src->type, ne);
  name_view(*t, op, *src);
  t->op = op;
  t->nb = nb;
  t->src[0] = src;
  Tensor* owner = src->view_src ? src->view_src : src;
  t->view_src = owner;
  t->view_offset = (src->view_src ? src->view_offset : 0) + offset;
  // A leaf's data is known already: resolve the view now.
  if (owner->data) t->data = static_cast<char*>(owner->data) + t->view_offset;
  return t;
}

Tensor* binary(Graph& g, Op op, Tensor* a, Tensor* b) { return checked(make_result(g, op, a->ne, a, b)); }

}  // namespace

Tensor* get_rows(Graph& g, Tensor* a, Tensor* idx) {
  return checked(make_result(g, Op::GetRows, {a->ne[0], idx->ne[0], idx->ne[1], 1}, a, idx));
}

Tensor* mul_mat_id(Graph& g, Tensor* as, Tensor* b, Tensor* ids) {
  Tensor* t = make_result(g, Op::MulMatId, {as->ne[1], ids->ne[0], ids->ne[1], 1}, as, b);
  t->src[2] = ids;
  return checked(t);
}

Tensor* mul_mat(Graph& g, Tensor* a, Tensor* b) {
  return checked(make_result(g, Op::MulMat, {a->ne[1], b->ne[1], b->ne[2], b->ne[3]}, a, b));
}

Tensor* add(Graph& g, Tensor* a, Tensor* b) { return binary(g, Op::Add, a, b); }
Tensor* mul(Graph& g, Tensor* a, Tensor* b) { return binary(g, Op::Mul, a, b); }
Tensor* div(Graph& g, Tensor* a, Tensor* b) { return binary(g, Op::Div, a, b); }

Tensor* argsort_desc(Graph& g, Tensor* a) {
  return checked(make_result(g, Op::ArgSort, a->ne, a, nullptr, DType::I32));
}

Tensor* top_k(Graph& g, Tensor* a, int64_t k) {
  if (k < 1 || k > a->ne[0])
    fail("top_k", std::to_string(k) + " of the " + std::to_string(a->ne[0]) + " elements of the rows of " +
                      describe(*a));
  Tensor* sorted = argsort_desc(g, a);
  return make_view(g, Op::View, sorted, {k, a->ne[1], a->ne[2], a->ne[3]}, sorted->nb, 0);
}

Tensor* sum_rows(Graph& g, Tensor* a) {
  return checked(make_result(g, Op::SumRows, {1, a->ne[1], a->ne[2], a->ne[3]}, a));
}

Tensor* clamp(Graph& g, Tensor* a, float lo, float hi) {
  Tensor* t = make_result(g, Op::Clamp, a->ne, a);
  t->set_param_f(0, lo);
  t->set_param_f(1, hi);
  return checked(t);
}

Tensor* scale(Graph& g, Tensor* a, float s) {
  Tensor* t = make_result(g, Op::Scale, a->ne, a);
  t->set_param_f(0, s);
  return checked(t);
}

Tensor* rms_norm(Graph& g, Tensor* a, float eps) {
  Tensor* t = make_result(g, Op::RmsNorm, a->ne, a);
  t->set_param_f(0, eps);
  return checked(t);
}

namespace {

// ggml's YaRN correction dims: the dims whose wavelength the training
// context holds beta_fast and beta_slow times, in float as ggml computes them.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * std::log(base));
}

// Rope and rope_multi: the node with its sections (zeros but for the
// multi-section modes).
Tensor* rope_node(Graph& g, Tensor* a, Tensor* pos, int n_dims, const RopeSections& sections, RopeMode mode,
                  float freq_base, float freq_scale, Tensor* freq_factors, const RopeYarn& yarn) {
  Tensor* t = make_result(g, Op::Rope, a->ne, a, pos);
  t->src[2] = freq_factors;
  t->params[0] = n_dims;
  t->params[1] = static_cast<int32_t>(mode);
  t->set_param_f(2, freq_base);
  t->set_param_f(3, freq_scale);
  t->set_param_f(4, yarn.ext_factor);
  t->set_param_f(5, yarn.attn_factor);
  float low = 0.0f, high = 0.0f;
  if (yarn.ext_factor != 0.0f) {
    if (yarn.n_ctx_orig <= 0) fail("rope", "YaRN needs the training context length (n_ctx_orig)");
    low = std::max(0.0f, std::floor(yarn_corr_dim(n_dims, yarn.n_ctx_orig, yarn.beta_fast, freq_base)));
    high = std::min(static_cast<float>(n_dims - 1), std::ceil(yarn_corr_dim(n_dims, yarn.n_ctx_orig, yarn.beta_slow, freq_base)));
  }
  t->set_param_f(6, low);
  t->set_param_f(7, high);
  for (int i = 0; i < 4; ++i) t->params[8 + i] = sections[i];
  return checked(t);
}

}  // namespace

Tensor* rope(Graph& g, Tensor* a, Tensor* pos, int n_dims, RopeMode mode, float freq_base, float freq_scale,
             Tensor* freq_factors, const RopeYarn& yarn) {
  if (rope_is_multi(mode)) fail("rope", "the multi-section modes take their sections: rope_multi");
  return rope_node(g, a, pos, n_dims, {0, 0, 0, 0}, mode, freq_base, freq_scale, freq_factors, yarn);
}

Tensor* rope_multi(Graph& g, Tensor* a, Tensor* pos, int n_dims, const RopeSections& sections, RopeMode mode,
                   float freq_base, float freq_scale, Tensor* freq_factors, const RopeYarn& yarn) {
  if (!rope_is_multi(mode)) fail("rope_multi", "mode " + std::to_string(static_cast<int>(mode)) + " is not MRope or IMRope");
  return rope_node(g, a, pos, n_dims, sections, mode, freq_base, freq_scale, freq_factors, yarn);
}

Tensor* soft_max(Graph& g, Tensor* a, Tensor* mask, float scale, Tensor* sinks) {
  Tensor* t = make_result(g, Op::SoftMax, a->ne, a, mask);
  t->src[2] = sinks;
  t->set_param_f(0, scale);
  return checked(t);
}

Tensor* glu(Graph& g, GluKind kind, Tensor* x, Tensor* y, float alpha, float limit) {
  Tensor* t = make_result(g, Op::Glu, x->ne, x, y);
  t->params[0] = static_cast<int32_t>(kind);
  t->set_param_f(2, alpha);
  t->set_param_f(3, limit);
  return checked(t);
}

Tensor* l2_norm(Graph& g, Tensor* a, float eps) {
  Tensor* t = make_result(g, Op::L2Norm, a->ne, a);
  t->set_param_f(0, eps);
  return checked(t);
}

Tensor* concat(Graph& g, Tensor* a, Tensor* b, int dim) {
  if (dim < 0 || dim >= kMaxDims) fail("concat", "dimension " + std::to_string(dim) + " is not 0-3");
  std::array<int64_t, kMaxDims> ne = a->ne;
  ne[dim] += b->ne[dim];
  Tensor* t = make_result(g, Op::Concat, ne, a, b);
  t->params[0] = dim;
  return checked(t);
}

Tensor* fill(Graph& g, Tensor* a, float c) {
  Tensor* t = make_result(g, Op::Fill, a->ne, a);
  t->set_param_f(0, c);
  return checked(t);
}

Tensor* set_rows(Graph& g, Tensor* a, Tensor* b, Tensor* ids) {
  Tensor* t = make_result(g, Op::SetRows, a->ne, a, b);
  t->src[2] = ids;
  return checked(t);
}

Tensor* ssm_conv(Graph& g, Tensor* sx, Tensor* c) {
  return checked(make_result(g, Op::SsmConv, {sx->ne[1], sx->ne[0] - c->ne[0] + 1, sx->ne[2], 1}, sx, c));
}

Tensor* gated_delta_net(Graph& g, Tensor* q, Tensor* k, Tensor* v, Tensor* gate, Tensor* beta, Tensor* state,
                        int64_t snapshots) {
  if (!q || !k || !v || !gate || !beta || !state) fail("gated_delta_net", "a source is missing");
  if (snapshots != 1)
    fail("gated_delta_net", "only the final state is kept (snapshots K = 1); K = " + std::to_string(snapshots) +
                                " (the last K states, for rolling back speculative tokens) is not supported");
  const int64_t S = v->ne[0], H = v->ne[1], T = v->ne[2], seqs = v->ne[3];
  Tensor* t = make_result(g, Op::GatedDeltaNet, {S * H, T * seqs + snapshots * S * seqs, 1, 1}, q, k);
  t->src[2] = v;
  t->src[3] = gate;
  t->src[4] = beta;
  t->src[5] = state;
  t->params[0] = static_cast<int32_t>(snapshots);
  return checked(t);
}

Tensor* add_id(Graph& g, Tensor* a, Tensor* b, Tensor* ids) {
  Tensor* t = make_result(g, Op::AddId, a->ne, a, b);
  t->src[2] = ids;
  return checked(t);
}

Tensor* unary(Graph& g, Op op, Tensor* a) { return checked(make_result(g, op, a->ne, a)); }

Tensor* cpy(Graph& g, Tensor* a, Tensor* b) {
  // The result is b itself, seen as the node that wrote it.
  Tensor* t = make_view(g, Op::Cpy, b, b->ne, b->nb, 0);
  t->name.assign(b->name).append(" (copy of ").append(a->name).append(")");
  t->src[0] = a;
  t->src[1] = b;
  return checked(t);
}

Tensor* cont(Graph& g, Tensor* a) {
  Tensor* t = make_result(g, Op::Cont, a->ne, a, nullptr, is_float_type(a->type) ? a->type : DType::F32);
  t->name.assign(a->name).append(" (cont)");
  return checked(t);
}

Tensor* reshape(Graph& g, Tensor* a, std::initializer_list<int64_t> ne) {
  std::array<int64_t, kMaxDims> n{1, 1, 1, 1};
  if (ne.size() > kMaxDims) fail("reshape", "more than 4 dimensions");
  std::copy(ne.begin(), ne.end(), n.begin());
  if (n[0] * n[1] * n[2] * n[3] != a->nelements()) fail("reshape", "element counts differ for " + describe(*a));
  if (!a->is_contiguous()) fail("reshape", describe(*a) + " is not contiguous");
  return make_view(g, Op::Reshape, a, n, contiguous_strides(a->type, n), 0);
}

Tensor* view(Graph& g, Tensor* a, std::initializer_list<int64_t> ne, std::initializer_list<size_t> nb_upper,
             size_t offset) {
  std::array<int64_t, kMaxDims> n{1, 1, 1, 1};
  if (ne.size() > kMaxDims || ne.size() == 0 || nb_upper.size() + 1 != ne.size())
    fail("view", "needs 1 to 4 dimensions and one stride per dimension after the first");
  std::copy(ne.begin(), ne.end(), n.begin());
  std::array<size_t, kMaxDims> nb = contiguous_strides(a->type, n);
  std::copy(nb_upper.begin(), nb_upper.end(), nb.begin() + 1);
  // Dimensions past those given continue contiguously.
  for (size_t i = ne.size(); i < kMaxDims; ++i) nb[i] = nb[i - 1] * n[i - 1];
  Tensor probe;
  probe.type = a->type;
  probe.ne = n;
  probe.nb = nb;
  if (offset + probe.nbytes() > a->nbytes())
    fail("view", "view of " + describe(*a) + " at offset " + std::to_string(offset) + " runs past its end");
  return make_view(g, Op::View, a, n, nb, offset);
}

Tensor* permute(Graph& g, Tensor* a, int p0, int p1, int p2, int p3) {
  const int p[kMaxDims] = {p0, p1, p2, p3};
  bool used[kMaxDims] = {};
  for (int v : p) {
    if (v < 0 || v >= kMaxDims || used[v]) fail("permute", "axes must be a permutation of 0..3");
    used[v] = true;
  }
  std::array<int64_t, kMaxDims> ne{};
  std::array<size_t, kMaxDims> nb{};
  for (int i = 0; i < kMaxDims; ++i) {
    ne[p[i]] = a->ne[i];
    nb[p[i]] = a->nb[i];
  }
  return make_view(g, Op::Permute, a, ne, nb, 0);
}

Tensor* transpose(Graph& g, Tensor* a) {
  Tensor* t = permute(g, a, 1, 0, 2, 3);
  t->op = Op::Transpose;
  name_view(*t, Op::Transpose, *a);
  return t;
}

}  // namespace qlens
