// MulMatId, the expert matmul: the rows of the tokens routed to each expert
// are gathered into one matrix and multiplied by that expert's weights with
// the MulMat kernel (so every weight type and both paths come for free, and
// a prompt's tokens are grouped per expert as ggml groups them), then each
// result row goes back to its (slot, token) place.
//
// Shared scratch: per expert its row count, the start of its rows in the
// gathered order and a work counter; the gathered rows' (slot, token) places;
// the gathered activations and results; the sub-products' own shared scratch.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"

namespace qlens::cpu {

namespace {

struct IdShape {
  int64_t K, M, E;  // row length, rows per expert, experts
  int64_t U, N;     // slots (experts used) per token, tokens
  int64_t rows() const { return U * N; }
};

IdShape id_shape(const Tensor& node) {
  const Tensor& as = *node.src[0];
  const Tensor& ids = *node.src[2];
  return {as.ne[0], as.ne[1], as.ne[2], ids.ne[0], ids.ne[1]};
}

struct IdLayout {
  size_t start, count, counter, place, x, y, sub, total;

  explicit IdLayout(const IdShape& s, size_t sub_bytes) {
    size_t at = 0;
    auto take = [&](size_t bytes) {
      const size_t here = at;
      at += align_scratch(bytes);
      return here;
    };
    start = take((s.E + 1) * sizeof(int64_t));
    count = take(s.E * sizeof(int64_t));
    counter = take(s.E * sizeof(std::atomic<int64_t>));
    place = take(s.rows() * sizeof(int32_t));
    x = take(s.rows() * s.K * sizeof(float));
    y = take(s.rows() * s.M * sizeof(float));
    sub = take(sub_bytes);
    total = at;
  }
};

// The sub-product of expert e on n gathered rows: weights [K, M] (a slice of
// the experts), activations [K, n] and results [M, n], contiguous F32.
struct SubProduct {
  Tensor w, x, y;

  SubProduct(const Tensor& as, const IdShape& s, int64_t e, int64_t n, float* xdata, float* ydata) {
    w.type = as.type;
    w.ne = {s.K, s.M, 1, 1};
    w.nb = as.nb;
    w.data = static_cast<char*>(as.data) + e * as.nb[2];
    w.name = as.name;
    x.ne = {s.K, n, 1, 1};
    x.nb = contiguous_strides(DType::F32, x.ne);
    x.data = xdata;
    y.op = Op::MulMat;
    y.ne = {s.M, n, 1, 1};
    y.nb = contiguous_strides(DType::F32, y.ne);
    y.data = ydata;
    y.src[0] = &w;
    y.src[1] = &x;
  }
};

// A sub-product with as many rows as the node has: what bounds the scratch.
size_t sub_scratch(const Tensor& node, int nth, const KernelOptions& o, bool shared) {
  const IdShape s = id_shape(node);
  SubProduct p(*node.src[0], s, 0, s.rows(), nullptr, nullptr);
  return shared ? matmul_shared_scratch_bound(p.y, nth, o) : matmul_scratch_bound(p.y, nth, o);
}

}  // namespace

size_t matmul_id_scratch(const Tensor& node, int nth, const KernelOptions& o) {
  return sub_scratch(node, nth, o, false);
}

size_t matmul_id_shared_scratch(const Tensor& node, int nth, const KernelOptions& o) {
  return IdLayout(id_shape(node), sub_scratch(node, nth, o, true)).total;
}

void matmul_id(const Tensor& node, const KernelCtx& c) {
  const Tensor& as = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& ids = *node.src[2];
  const IdShape s = id_shape(node);
  if (s.rows() == 0 || s.M == 0) return;
  const IdLayout lay(s, 0);  // the offsets (the sub-products' scratch comes last, sized by the caller)
  int64_t* start = reinterpret_cast<int64_t*>(c.shared + lay.start);
  int64_t* count = reinterpret_cast<int64_t*>(c.shared + lay.count);
  auto* counter = reinterpret_cast<std::atomic<int64_t>*>(c.shared + lay.counter);
  int32_t* place = reinterpret_cast<int32_t*>(c.shared + lay.place);
  float* x = reinterpret_cast<float*>(c.shared + lay.x);
  float* y = reinterpret_cast<float*>(c.shared + lay.y);
  auto expert_of = [&](int64_t r) { return *reinterpret_cast<const int32_t*>(ids.at(r % s.U, r / s.U)); };

  // Rows by expert, each expert's in token order (slot r = u + U * t).
  if (c.ith == 0) {
    std::fill(count, count + s.E, 0);
    for (int64_t r = 0; r < s.rows(); ++r) ++count[expert_of(r)];
    start[0] = 0;
    for (int64_t e = 0; e < s.E; ++e) {
      start[e + 1] = start[e] + count[e];
      new (&counter[e]) std::atomic<int64_t>(0);
    }
    std::fill(count, count + s.E, 0);
    for (int64_t r = 0; r < s.rows(); ++r) {
      const int64_t e = expert_of(r);
      place[start[e] + count[e]++] = static_cast<int32_t>(r);
    }
  }
  c.barrier();

  int64_t r0, r1;
  split_range(s.rows(), c.ith, c.nth, &r0, &r1);
  for (int64_t g = r0; g < r1; ++g) {
    const int64_t r = place[g];
    row_to_f32(b, b.at(0, (r % s.U) % b.ne[1], r / s.U), 0, s.K, x + g * s.K, *c.vec);
  }
  c.barrier();

  // Every thread takes part in every expert's product, in the same order (the
  // MulMat kernel may wait at barriers); the barrier after each one frees the
  // sub-products' shared scratch for the next.
  for (int64_t e = 0; e < s.E; ++e) {
    if (count[e] == 0) continue;
    SubProduct p(as, s, e, count[e], x + start[e] * s.K, y + start[e] * s.M);
    KernelCtx sub = c;
    sub.shared = c.shared + lay.sub;
    sub.counter = &counter[e];
    matmul(p.y, sub);
    c.barrier();
  }

  for (int64_t g = r0; g < r1; ++g) {
    const int64_t r = place[g];
    std::memcpy(node.at(0, r % s.U, r / s.U), y + g * s.M, s.M * sizeof(float));
  }
}

}  // namespace qlens::cpu
