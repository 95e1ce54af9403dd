// Cpy (a into b, any shapes with the same element count) and Cont (a
// contiguous copy), converting between F32, F16 and BF16; Concat; and the
// row conversion helper the other kernels share.
#include <algorithm>
#include <cstring>

#include "backend/cpu/elem.h"
#include "backend/cpu/ops.h"

namespace qlens::cpu {

void row_to_f32(const Tensor& t, const char* row, int64_t k0, int64_t n, float* out, const VecOps& v) {
  const TypeTraits& tt = type_traits(t.type);
  if (t.nb[0] == tt.block_bytes) {
    ToFloatFn f = v.to_float[static_cast<int>(t.type)];
    f(row + k0 / tt.block_size * tt.block_bytes, out, n);
  } else {
    for (int64_t k = 0; k < n; ++k) out[k] = load_elem(t.type, row + (k0 + k) * t.nb[0]);
  }
}

namespace {

constexpr int64_t kChunk = 1024;  // elements converted through the float buffer at a time

// n adjacent elements of type st at src to type dt at dst.
void convert(int64_t n, const char* src, DType st, char* dst, DType dt, float* buf, const VecOps& v) {
  if (st == dt) {
    std::memcpy(dst, src, n * type_traits(st).block_bytes);
  } else if (st == DType::F32) {
    v.from_float[static_cast<int>(dt)](reinterpret_cast<const float*>(src), dst, n);
  } else if (dt == DType::F32) {
    v.to_float[static_cast<int>(st)](src, reinterpret_cast<float*>(dst), n);
  } else {
    const size_t ss = type_traits(st).block_bytes, ds = type_traits(dt).block_bytes;
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t m = std::min(kChunk, n - i);
      v.to_float[static_cast<int>(st)](src + i * ss, buf, m);
      v.from_float[static_cast<int>(dt)](buf, dst + i * ds, m);
    }
  }
}

// Unravels a linear element index into coordinates of t.
void unravel(const Tensor& t, int64_t e, int64_t* i) {
  for (int k = 0; k < kMaxDims; ++k) {
    i[k] = e % t.ne[k];
    e /= t.ne[k];
  }
}

}  // namespace

void op_cpy(const Tensor& node, const KernelCtx& c) {
  const Tensor& a = *node.src[0];
  const Tensor& d = node.op == Op::Cpy ? *node.src[1] : node;
  const VecOps& v = *c.vec;
  float* buf = reinterpret_cast<float*>(c.scratch);
  const size_t as = type_traits(a.type).block_bytes, ds = type_traits(d.type).block_bytes;

  if (a.is_contiguous() && d.is_contiguous()) {  // one flat run
    int64_t e0, e1;
    split_range(a.nelements(), c.ith, c.nth, &e0, &e1);
    if (e1 > e0)
      convert(e1 - e0, static_cast<const char*>(a.data) + e0 * as, a.type,
              static_cast<char*>(d.data) + e0 * ds, d.type, buf, v);
    return;
  }
  if (a.ne[0] == 1 && d.ne[0] == 1 && a.ne[1] == d.ne[1] && a.ne[2] * a.ne[3] == 1 && d.ne[2] * d.ne[3] == 1) {
    // Rows of one element: a token's values stored transposed into the V
    // cache (a row per value dimension). Element by element: a conversion
    // call and two row unravellings per value were most of the copy's time.
    int64_t r0, r1;
    split_range(a.ne[1], c.ith, c.nth, &r0, &r1);
    const char* src = static_cast<const char*>(a.data);
    char* dst = static_cast<char*>(d.data);
    for (int64_t r = r0; r < r1; ++r) store_elem(d.type, dst + r * d.nb[1], load_elem(a.type, src + r * a.nb[1]));
    return;
  }
  if (a.ne[0] == d.ne[0]) {  // row r of a goes to row r of d
    int64_t r0, r1;
    split_range(a.nrows(), c.ith, c.nth, &r0, &r1);
    const bool adjacent = a.nb[0] == as && d.nb[0] == ds;
    for (int64_t r = r0; r < r1; ++r) {
      int64_t a1, a2, a3, d1, d2, d3;
      row_coords(a, r, &a1, &a2, &a3);
      row_coords(d, r, &d1, &d2, &d3);
      const char* src = a.at(0, a1, a2, a3);
      char* dst = d.at(0, d1, d2, d3);
      if (adjacent) {
        convert(a.ne[0], src, a.type, dst, d.type, buf, v);
      } else {
        for (int64_t i = 0; i < a.ne[0]; ++i) store_elem(d.type, dst + i * d.nb[0], load_elem(a.type, src + i * a.nb[0]));
      }
    }
    return;
  }
  // General: element e of a (in its logical order) goes to element e of d.
  int64_t e0, e1;
  split_range(a.nelements(), c.ith, c.nth, &e0, &e1);
  if (e1 <= e0) return;
  int64_t ia[kMaxDims], id[kMaxDims];
  unravel(a, e0, ia);
  unravel(d, e0, id);
  for (int64_t e = e0; e < e1; ++e) {
    store_elem(d.type, d.at(id[0], id[1], id[2], id[3]), load_elem(a.type, a.at(ia[0], ia[1], ia[2], ia[3])));
    for (int k = 0; k < kMaxDims && ++ia[k] == a.ne[k]; ++k) ia[k] = 0;
    for (int k = 0; k < kMaxDims && ++id[k] == d.ne[k]; ++k) id[k] = 0;
  }
}

// Concat: each result row from a or from b along the dimension (rows of a
// and b, or elements within a row for dimension 0).
void op_concat(const Tensor& node, const KernelCtx& c) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int dim = node.params[0];
  int64_t r0, r1;
  split_range(node.nrows(), c.ith, c.nth, &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i[kMaxDims] = {0, 0, 0, 0};
    row_coords(node, r, &i[1], &i[2], &i[3]);
    float* y = reinterpret_cast<float*>(node.at(0, i[1], i[2], i[3]));
    auto copy_row = [&](const Tensor& t, float* out) {
      const char* p = t.at(0, i[1], i[2], i[3]);
      for (int64_t k = 0; k < t.ne[0]; ++k) out[k] = *reinterpret_cast<const float*>(p + k * t.nb[0]);
    };
    if (dim == 0) {
      copy_row(a, y);
      copy_row(b, y + a.ne[0]);
      continue;
    }
    const bool from_a = i[dim] < a.ne[dim];
    if (!from_a) i[dim] -= a.ne[dim];
    copy_row(from_a ? a : b, y);
  }
}

// SetRows: each result row is the last row of b whose id names it, else a's
// (rows split among threads, so no two threads write one row).
void op_set_rows(const Tensor& node, const KernelCtx& c) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& ids = *node.src[2];
  int64_t r0, r1;
  split_range(node.nrows(), c.ith, c.nth, &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    row_coords(node, r, &i1, &i2, &i3);
    int64_t from = -1;
    for (int64_t u = 0; u < b.ne[1]; ++u)
      if (*reinterpret_cast<const int32_t*>(ids.at(u, i2 % ids.ne[1], i3 % ids.ne[2])) == i1) from = u;
    const Tensor& src = from < 0 ? a : b;
    const char* p = src.at(0, from < 0 ? i1 : from, i2, i3);
    float* y = reinterpret_cast<float*>(node.at(0, i1, i2, i3));
    for (int64_t k = 0; k < node.ne[0]; ++k) y[k] = *reinterpret_cast<const float*>(p + k * src.nb[0]);
  }
}

}  // namespace qlens::cpu
