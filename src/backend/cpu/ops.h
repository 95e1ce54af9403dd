// Node kernels of the CPU backend (internal).
//
// Every thread calls a node's kernel with the same node; thread ith of nth
// computes its share (a static range of rows, or items taken from a shared
// counter) using `scratch`, its private buffer of scratch_bytes(node) bytes,
// and `shared`, one buffer of shared_scratch_bytes(node) bytes for all threads
// (both 64-byte aligned). Kernels do not throw: the backend checks nodes
// before it starts the threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/cpu/isa.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec.h"
#include "core/round_up.h"
#include "qlens/tensor.h"

namespace qlens::cpu {

// Scratch regions start on cache lines.
constexpr size_t kScratchAlign = 64;
inline size_t align_scratch(size_t n) { return round_up(n, kScratchAlign); }

struct KernelCtx {
  int ith;
  int nth;
  char* scratch;                  // private to this thread
  char* shared;                   // shared by the node's threads
  std::atomic<int64_t>* counter;  // 0 when the node starts; for taking work items
  ThreadPool* pool;               // pool->barrier() inside a kernel: every thread must call it
  const VecOps* vec;
  // What the backend was made with (CpuOptions resolved: isa.h): the
  // kernels' only source of settings.
  const KernelOptions* options;
  const PackedWeights* packed;  // the backend's packed copies of weights (packed.h)

  void barrier() const { pool->barrier(); }
  // The next unclaimed item (>= n when none are left).
  int64_t next_item() const { return counter->fetch_add(1, std::memory_order_relaxed); }
};

void op_get_rows(const Tensor& node, const KernelCtx& c);
void op_add(const Tensor& node, const KernelCtx& c);
void op_mul(const Tensor& node, const KernelCtx& c);
void op_scale(const Tensor& node, const KernelCtx& c);
void op_silu(const Tensor& node, const KernelCtx& c);
void op_gelu(const Tensor& node, const KernelCtx& c);
void op_sigmoid(const Tensor& node, const KernelCtx& c);
void op_tanh(const Tensor& node, const KernelCtx& c);
void op_glu(const Tensor& node, const KernelCtx& c);
void op_add_id(const Tensor& node, const KernelCtx& c);
void op_softplus(const Tensor& node, const KernelCtx& c);
void op_l2_norm(const Tensor& node, const KernelCtx& c);
void op_concat(const Tensor& node, const KernelCtx& c);
void op_fill(const Tensor& node, const KernelCtx& c);
void op_set_rows(const Tensor& node, const KernelCtx& c);
void op_ssm_conv(const Tensor& node, const KernelCtx& c);
void op_gated_delta_net(const Tensor& node, const KernelCtx& c);  // delta_net.h
void op_rms_norm(const Tensor& node, const KernelCtx& c);
void op_rope(const Tensor& node, const KernelCtx& c);
void op_soft_max(const Tensor& node, const KernelCtx& c);
void op_cpy(const Tensor& node, const KernelCtx& c);   // Cpy and Cont
void op_div(const Tensor& node, const KernelCtx& c);
void op_clamp(const Tensor& node, const KernelCtx& c);
void op_sum_rows(const Tensor& node, const KernelCtx& c);
void op_argsort(const Tensor& node, const KernelCtx& c);

// Bytes of private scratch each thread needs for the node, and of shared
// scratch, with the backend's options (which choose the paths).
size_t scratch_bytes(const Tensor& node, int nth, const KernelOptions& options);
size_t shared_scratch_bytes(const Tensor& node, int nth, const KernelOptions& options);

// ---- helpers shared by the kernels (portable code only) ----

// Elements [k0, k0 + n) of the row of `t` starting at `row`, as floats: with the
// type's row conversion when the row's elements (or blocks) are adjacent, else
// element by element (plain types only). k0 is a multiple of the block size.
void row_to_f32(const Tensor& t, const char* row, int64_t k0, int64_t n, float* out, const VecOps& v);

// Thread ith's share [*begin, *end) of n items.
inline void split_range(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
  *begin = n * ith / nth;
  *end = n * (ith + 1) / nth;
}

// Row r of a tensor with dims ne[1..3] as (i1, i2, i3).
inline void row_coords(const Tensor& t, int64_t r, int64_t* i1, int64_t* i2, int64_t* i3) {
  *i1 = r % t.ne[1];
  r /= t.ne[1];
  *i2 = r % t.ne[2];
  *i3 = r / t.ne[2];
}

// Whether elements of each row are adjacent (F32 rows can go to vector code).
inline bool f32_rows(const Tensor& t) { return t.nb[0] == sizeof(float); }

// The work of an element-wise node (or a norm): its rows, each cut into pieces where
// there are fewer rows than threads (generation's single rows: otherwise one
// thread does the node while the others wait at the barrier). Pieces are
// whole multiples of 64 elements, so each vector kernel sees the same
// vectors and the same scalar tail as on the whole row, whatever the
// thread count.
struct Pieces {
  int64_t length, per_row, count;
  Pieces(int64_t rows, int64_t n, int nth) {
    const int64_t wanted = rows >= nth ? 1 : (nth + rows - 1) / rows;  // pieces per row
    length = wanted == 1 || n <= 64 ? std::max<int64_t>(n, 1) : round_up<int64_t>((n + wanted - 1) / wanted, 64);
    per_row = std::max<int64_t>(1, (n + length - 1) / length);
    count = rows * per_row;
  }
};

// Calls f(i1, i2, i3, e0, e1) for the pieces this thread takes: elements
// [e0, e1) of row (i1, i2, i3) of t.
template <class F>
void for_each_piece(const Tensor& t, const KernelCtx& c, F&& f) {
  const int64_t n = t.ne[0];
  const Pieces pieces(t.nrows(), n, c.nth);
  int64_t p0, p1;
  split_range(pieces.count, c.ith, c.nth, &p0, &p1);
  for (int64_t p = p0; p < p1; ++p) {
    int64_t i1, i2, i3;
    row_coords(t, p / pieces.per_row, &i1, &i2, &i3);
    const int64_t e0 = p % pieces.per_row * pieces.length;
    f(i1, i2, i3, e0, std::min(n, e0 + pieces.length));
  }
}

// How a kernel shares a node among its threads, as far as the barriers
// between nodes need to know (barriers.h): with pieces, thread ith writes
// the same elements of any node of the same shape.
enum class Split : uint8_t {
  Any,           // no promise (work counters, other ranges)
  Pieces,        // for_each_piece over the node; reads its sources of the node's shape element for element
  PiecesOfRows,  // for_each_piece over the node; reads whole rows of its sources (the norms)
};


}  // namespace qlens::cpu
