#include "qlens/tensor.h"

#include <algorithm>
#include <sstream>

#include "qlens/error.h"

namespace qlens {

namespace {

[[noreturn]] void fail(const std::string& op, const std::string& what) {
  throw Error(op + ": " + what);
}

std::string describe(const Tensor* t) {
  return "'" + (t->name.empty() ? std::string("(unnamed)") : t->name) + "' " + shape_string(*t);
}

Tensor* make_result(Graph& g, Op op, const std::array<int64_t, kMaxDims>& ne, Tensor* a,
                    Tensor* b = nullptr, DType type = DType::F32) {
  Tensor* t = g.new_tensor(type, ne);
  t->op = op;
  t->src[0] = a;
  t->src[1] = b;
  return t;
}

// A view of `src` sharing its memory (possibly through a chain of views).
// Views are named after their source as ggml names them ("Qcur-0 (reshaped)")
// until the caller names them.
const char* view_suffix(Op op) {
  switch (op) {
    case Op::Reshape: return " (reshaped)";
    case Op::Permute: return " (permuted)";
    case Op::Transpose: return " (transposed)";
    default: return " (view)";
  }
}

Tensor* make_view(Graph& g, Op op, Tensor* src, const std::array<int64_t, kMaxDims>& ne,
                  const std::array<size_t, kMaxDims>& nb, size_t offset) {
  Tensor* t = g.new_tensor(src->type, ne, src->name + view_suffix(op));
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

// Core knows the formats, not the kernels (src/quant): sizes and strides
// come from the format facts; whether a backend can read a type is the op
// table's rule (src/ops).
const TypeFormat& format_of(DType type) {
  const TypeFormat* f = find_type_format(static_cast<uint32_t>(type));
  if (!f) throw Error("unknown type id " + std::to_string(static_cast<uint32_t>(type)));
  return *f;
}

void require_f32(const char* op, const Tensor* t) {
  if (t->type != DType::F32) fail(op, describe(t) + " must be F32, is " + std::string(type_name(t->type)));
}

}  // namespace

std::array<size_t, kMaxDims> contiguous_strides(DType type, const std::array<int64_t, kMaxDims>& ne) {
  const TypeFormat& tf = format_of(type);
  std::array<size_t, kMaxDims> nb{};
  nb[0] = tf.block_bytes;
  nb[1] = row_bytes(type, ne[0]);
  nb[2] = nb[1] * ne[1];
  nb[3] = nb[2] * ne[2];
  return nb;
}

size_t Tensor::nbytes() const {
  if (nelements() == 0) return 0;
  const TypeFormat& tf = format_of(type);
  // Blocks of a row are contiguous; single elements may be strided (transposed views).
  size_t bytes = tf.block_size == 1 ? tf.block_bytes + (ne[0] - 1) * nb[0]
                                    : static_cast<size_t>(ne[0] / tf.block_size) * nb[0];
  for (int i = 1; i < kMaxDims; ++i) bytes += (ne[i] - 1) * nb[i];
  return bytes;
}

bool Tensor::is_contiguous() const {
  const auto expect = contiguous_strides(type, ne);
  for (int i = 0; i < kMaxDims; ++i)
    if (ne[i] > 1 && nb[i] != expect[i]) return false;
  return true;
}

int Tensor::n_dims() const {
  for (int i = kMaxDims - 1; i >= 1; --i)
    if (ne[i] > 1) return i + 1;
  return 1;
}

bool same_shape(const Tensor& a, const Tensor& b) { return a.ne == b.ne; }

std::string shape_string(const Tensor& t) {
  std::ostringstream s;
  s << "{" << t.ne[0] << ", " << t.ne[1] << ", " << t.ne[2] << ", " << t.ne[3] << "}";
  return s.str();
}

// ---------------------------------------------------------------------------
// Graph

Tensor* Graph::new_tensor(DType type, const std::array<int64_t, kMaxDims>& ne, std::string name) {
  const TypeFormat* tt = find_type_format(static_cast<uint32_t>(type));
  if (!tt) throw Error("new tensor '" + name + "': unknown type id " + std::to_string(static_cast<uint32_t>(type)));
  for (int i = 0; i < kMaxDims; ++i)
    if (ne[i] < 0) throw Error("new tensor '" + name + "': negative dimension");
  if (ne[0] % tt->block_size != 0)
    throw Error("new tensor '" + name + "': row length " + std::to_string(ne[0]) +
                " is not a multiple of the block size " + std::to_string(tt->block_size) + " of " + tt->name);
  Tensor& t = next_tensor();
  t.type = type;
  t.ne = ne;
  t.nb = contiguous_strides(type, ne);
  t.name = std::move(name);
  return &t;
}

Tensor* Graph::new_tensor(DType type, std::initializer_list<int64_t> ne, std::string name) {
  std::array<int64_t, kMaxDims> n{1, 1, 1, 1};
  if (ne.size() > kMaxDims) throw Error("new tensor '" + name + "': more than 4 dimensions");
  std::copy(ne.begin(), ne.end(), n.begin());
  return new_tensor(type, n, std::move(name));
}

Tensor* Graph::external(const Tensor& like, void* data) {
  Tensor* t = new_tensor(like.type, like.ne, like.name);
  t->nb = like.nb;
  t->flags = like.flags;
  t->data = data;
  t->buffer = data == like.data ? like.buffer : nullptr;
  return t;
}

Tensor& Graph::next_tensor() {
  if (used_ == chunks_.size() * kChunk) chunks_.push_back(std::make_unique<Tensor[]>(kChunk));
  Tensor& t = chunks_[used_ / kChunk][used_ % kChunk];
  ++used_;
  t = Tensor{};  // a tensor of the graph before clear()
  return t;
}

void Graph::clear() {
  used_ = 0;
  nodes_.clear();
  leaves_.clear();
  visited_.clear();
  kept_.clear();
}

void Graph::build(Tensor* out) {
  visit(out);
}

void Graph::visit(Tensor* t) {
  // Iterative post-order DFS: graphs are deep (one chain per layer).
  struct Frame {
    Tensor* t;
    int next_src;
  };
  if (!visited_.insert(t, 1).second) return;
  std::vector<Frame> stack{{t, 0}};
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next_src < kMaxSrc) {
      Tensor* s = f.t->src[f.next_src++];
      if (s && visited_.insert(s, 1).second) stack.push_back({s, 0});
      continue;
    }
    if (f.t->op == Op::None)
      leaves_.push_back(f.t);
    else
      nodes_.push_back(f.t);
    stack.pop_back();
  }
}

Tensor* Graph::find(const std::string& name) const {
  for (Tensor* t : nodes_)
    if (t->name == name) return t;
  for (Tensor* t : leaves_)
    if (t->name == name) return t;
  return nullptr;
}

// ---------------------------------------------------------------------------
// Build functions

Tensor* get_rows(Graph& g, Tensor* a, Tensor* idx) {
  if (idx->type != DType::I32) fail("get_rows", "index " + describe(idx) + " must be I32");
  if (idx->ne[2] != 1 || idx->ne[3] != 1) fail("get_rows", "index " + describe(idx) + " must be 1-D or 2-D");
  if (a->ne[3] != 1 || (idx->ne[1] == 1 ? a->ne[2] != 1 : a->ne[2] != idx->ne[1]))
    fail("get_rows", describe(a) + " must have one slice per index column of " + describe(idx));
  return make_result(g, Op::GetRows, {a->ne[0], idx->ne[0], idx->ne[1], 1}, a, idx);
}

Tensor* mul_mat_id(Graph& g, Tensor* as, Tensor* b, Tensor* ids) {
  if (ids->type != DType::I32 || ids->ne[2] != 1 || ids->ne[3] != 1)
    fail("mul_mat_id", "expert ids " + describe(ids) + " must be I32 [n_used, n_tokens]");
  if (as->ne[3] != 1) fail("mul_mat_id", "experts " + describe(as) + " must be [K, M, n_expert]");
  if (b->ne[0] != as->ne[0] || b->ne[2] != ids->ne[1] || b->ne[3] != 1 ||
      (b->ne[1] != 1 && b->ne[1] != ids->ne[0]))
    fail("mul_mat_id", describe(b) + " must be [" + std::to_string(as->ne[0]) + ", 1 or " +
                           std::to_string(ids->ne[0]) + ", " + std::to_string(ids->ne[1]) + "] for experts " +
                           describe(as) + " and ids " + describe(ids));
  require_f32("mul_mat_id", b);
  Tensor* t = make_result(g, Op::MulMatId, {as->ne[1], ids->ne[0], ids->ne[1], 1}, as, b);
  t->src[2] = ids;
  return t;
}

Tensor* mul_mat(Graph& g, Tensor* a, Tensor* b) {
  if (a->ne[0] != b->ne[0])
    fail("mul_mat", "row lengths differ: " + describe(a) + " and " + describe(b));
  if (b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0)
    fail("mul_mat", describe(a) + " cannot be broadcast to " + describe(b));
  require_f32("mul_mat", b);
  return make_result(g, Op::MulMat, {a->ne[1], b->ne[1], b->ne[2], b->ne[3]}, a, b);
}

static Tensor* binary(Graph& g, Op op, const char* name, Tensor* a, Tensor* b) {
  for (int i = 0; i < kMaxDims; ++i)
    if (b->ne[i] == 0 || a->ne[i] % b->ne[i] != 0)
      fail(name, describe(b) + " cannot be broadcast to " + describe(a));
  require_f32(name, a);
  require_f32(name, b);
  return make_result(g, op, a->ne, a, b);
}

Tensor* add(Graph& g, Tensor* a, Tensor* b) { return binary(g, Op::Add, "add", a, b); }
Tensor* mul(Graph& g, Tensor* a, Tensor* b) { return binary(g, Op::Mul, "mul", a, b); }
Tensor* div(Graph& g, Tensor* a, Tensor* b) { return binary(g, Op::Div, "div", a, b); }

Tensor* argsort_desc(Graph& g, Tensor* a) {
  require_f32("argsort", a);
  return make_result(g, Op::ArgSort, a->ne, a, nullptr, DType::I32);
}

Tensor* top_k(Graph& g, Tensor* a, int64_t k) {
  if (k < 1 || k > a->ne[0]) fail("top_k", std::to_string(k) + " of the " + std::to_string(a->ne[0]) +
                                               " elements of the rows of " + describe(a));
  Tensor* sorted = argsort_desc(g, a);
  return make_view(g, Op::View, sorted, {k, a->ne[1], a->ne[2], a->ne[3]}, sorted->nb, 0);
}

Tensor* sum_rows(Graph& g, Tensor* a) {
  require_f32("sum_rows", a);
  return make_result(g, Op::SumRows, {1, a->ne[1], a->ne[2], a->ne[3]}, a);
}

Tensor* clamp(Graph& g, Tensor* a, float lo, float hi) {
  require_f32("clamp", a);
  Tensor* t = make_result(g, Op::Clamp, a->ne, a);
  t->set_param_f(0, lo);
  t->set_param_f(1, hi);
  return t;
}

Tensor* scale(Graph& g, Tensor* a, float s) {
  require_f32("scale", a);
  Tensor* t = make_result(g, Op::Scale, a->ne, a);
  t->set_param_f(0, s);
  return t;
}

Tensor* rms_norm(Graph& g, Tensor* a, float eps) {
  require_f32("rms_norm", a);
  Tensor* t = make_result(g, Op::RmsNorm, a->ne, a);
  t->set_param_f(0, eps);
  return t;
}

Tensor* rope(Graph& g, Tensor* a, Tensor* pos, int n_dims, RopeMode mode, float freq_base, float freq_scale,
             Tensor* freq_factors) {
  require_f32("rope", a);
  if (pos->type != DType::I32 || pos->ne[0] != a->ne[2])
    fail("rope", "positions " + describe(pos) + " must be I32 with one entry per token of " + describe(a));
  if (n_dims <= 0 || n_dims > a->ne[0] || n_dims % 2 != 0)
    fail("rope", "rotated dims " + std::to_string(n_dims) + " must be even and at most the head size of " +
                     describe(a));
  if (freq_factors && (freq_factors->type != DType::F32 || freq_factors->ne[0] < n_dims / 2 ||
                       freq_factors->nelements() != freq_factors->ne[0]))
    fail("rope", "frequency factors " + describe(freq_factors) + " must be an F32 vector of at least " +
                     std::to_string(n_dims / 2) + " entries");
  Tensor* t = make_result(g, Op::Rope, a->ne, a, pos);
  t->src[2] = freq_factors;
  t->params[0] = n_dims;
  t->params[1] = static_cast<int32_t>(mode);
  t->set_param_f(2, freq_base);
  t->set_param_f(3, freq_scale);
  return t;
}

Tensor* soft_max(Graph& g, Tensor* a, Tensor* mask, float scale) {
  require_f32("soft_max", a);
  if (mask) {
    require_f32("soft_max", mask);
    if (mask->ne[0] != a->ne[0] || mask->ne[1] < a->ne[1])
      fail("soft_max", "mask " + describe(mask) + " does not cover " + describe(a));
  }
  Tensor* t = make_result(g, Op::SoftMax, a->ne, a, mask);
  t->set_param_f(0, scale);
  return t;
}

Tensor* unary(Graph& g, Op op, Tensor* a) {
  if (a->type != DType::F32) require_f32(op_lower_name(op).c_str(), a);  // the name only for the error
  return make_result(g, op, a->ne, a);
}

Tensor* cpy(Graph& g, Tensor* a, Tensor* b) {
  if (a->nelements() != b->nelements())
    fail("cpy", "element counts differ: " + describe(a) + " into " + describe(b));
  for (const Tensor* t : {a, b})
    if (t->type != DType::F32 && t->type != DType::F16 && t->type != DType::BF16)
      fail("cpy", describe(t) + " must be F32, F16 or BF16");
  // The result is b itself, seen as the node that wrote it.
  Tensor* t = make_view(g, Op::Cpy, b, b->ne, b->nb, 0);
  t->name = b->name + " (copy of " + a->name + ")";
  t->src[0] = a;
  t->src[1] = b;
  return t;
}

Tensor* cont(Graph& g, Tensor* a) {
  if (a->type != DType::F32 && a->type != DType::F16 && a->type != DType::BF16)
    fail("cont", describe(a) + " must be F32, F16 or BF16");
  Tensor* t = make_result(g, Op::Cont, a->ne, a, nullptr, a->type);
  t->name = a->name + " (cont)";
  return t;
}

Tensor* reshape(Graph& g, Tensor* a, std::initializer_list<int64_t> ne) {
  std::array<int64_t, kMaxDims> n{1, 1, 1, 1};
  if (ne.size() > kMaxDims) fail("reshape", "more than 4 dimensions");
  std::copy(ne.begin(), ne.end(), n.begin());
  if (n[0] * n[1] * n[2] * n[3] != a->nelements())
    fail("reshape", "element counts differ for " + describe(a));
  if (!a->is_contiguous()) fail("reshape", describe(a) + " is not contiguous");
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
    fail("view", "view of " + describe(a) + " at offset " + std::to_string(offset) + " runs past its end");
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
  t->name = a->name + view_suffix(Op::Transpose);
  return t;
}

Tensor* named(Tensor* t, const std::string& base, int layer) {
  t->name = layer < 0 ? base : base + "-" + std::to_string(layer);
  return t;
}

}  // namespace qlens
