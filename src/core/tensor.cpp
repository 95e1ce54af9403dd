#include "qlens/tensor.h"

#include <algorithm>
#include <sstream>

#include "qlens/error.h"

namespace qlens {

namespace {

// Core knows the formats, not the kernels (src/quant): sizes and strides
// come from the format facts; whether a backend can read a type is the op
// table's rule (src/ops).
const TypeFormat& format_of(DType type) {
  const TypeFormat* f = find_type_format(static_cast<uint32_t>(type));
  if (!f) throw Error("unknown type id " + std::to_string(static_cast<uint32_t>(type)));
  return *f;
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

std::string describe(const Tensor& t) {
  return "'" + (t.name.empty() ? std::string("(unnamed)") : t.name) + "' " + shape_string(t);
}

std::string shape_string(const Tensor& t) {
  std::ostringstream s;
  s << "{" << t.ne[0] << ", " << t.ne[1] << ", " << t.ne[2] << ", " << t.ne[3] << "}";
  return s.str();
}

// ---------------------------------------------------------------------------
// Graph

Tensor* Graph::new_tensor(DType type, const std::array<int64_t, kMaxDims>& ne, const std::string& name) {
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
  t.name.assign(name);
  return &t;
}

Tensor* Graph::new_tensor(DType type, std::initializer_list<int64_t> ne, const std::string& name) {
  std::array<int64_t, kMaxDims> n{1, 1, 1, 1};
  if (ne.size() > kMaxDims) throw Error("new tensor '" + name + "': more than 4 dimensions");
  std::copy(ne.begin(), ne.end(), n.begin());
  return new_tensor(type, n, name);
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
  // A tensor of the graph before clear(): reset, its name's memory kept for
  // the name it gets now (most are longer than a string holds inline).
  std::string name = std::move(t.name);
  t = Tensor{};
  name.clear();
  t.name = std::move(name);
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

Tensor* named(Tensor* t, const std::string& base, int layer) {
  t->name.assign(base);
  if (layer >= 0) t->name.append("-").append(std::to_string(layer));
  return t;
}

}  // namespace qlens
