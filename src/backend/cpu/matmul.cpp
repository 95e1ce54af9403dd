// MulMat: work split, packing and the two paths (see matmul.h); the scalar dot
// kernels. The SIMD kernels are in matmul_avx2.cpp / matmul_avx512.cpp.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "backend/cpu/elem.h"
#include "backend/cpu/gemm_int8.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/qdot.h"
#include "backend/cpu/qdot_k.h"
#include "backend/cpu/qdot_levels.h"
#include "backend/cpu/vec.h"

namespace qlens::cpu {

namespace {

// ---- scalar kernels -------------------------------------------------------

// Element i of a weight row; F16 through the conversion table.
template <DType WT>
float scalar_weight(const void* w, int64_t i, const float* f16) {
  if constexpr (WT == DType::F16) {
    return f16[static_cast<const uint16_t*>(w)[i]];
  } else {
    return weight_at<WT>(w, i);
  }
}

// Eight partial sums per activation row (a fixed order, and vectorizable);
// activation elements of type XT (F32, or the weight's own 16-bit type).
template <DType WT, DType XT = DType::F32>
void dot_scalar(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  const float* f16 = fp16_table();
  for (int c = 0; c < nc; ++c) {
    const void* xc = static_cast<const char*>(x) + c * x_stride;
    float s[8] = {};
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
      for (int u = 0; u < 8; ++u) s[u] += scalar_weight<WT>(w, i + u, f16) * scalar_weight<XT>(xc, i + u, f16);
    for (int u = 0; i < k; ++i, ++u) s[u] += scalar_weight<WT>(w, i, f16) * scalar_weight<XT>(xc, i, f16);
    out[c] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  }
}

GemmKernels make_scalar() {
  GemmKernels g{};
  g.micro = nullptr;
  g.dot[static_cast<int>(DType::F32)] = dot_scalar<DType::F32>;
  g.dot[static_cast<int>(DType::F16)] = dot_scalar<DType::F16>;
  g.dot[static_cast<int>(DType::BF16)] = dot_scalar<DType::BF16>;
  g.dot_same_x[static_cast<int>(DType::F16)] = dot_scalar<DType::F16, DType::F16>;
  g.dot_same_x[static_cast<int>(DType::BF16)] = dot_scalar<DType::BF16, DType::BF16>;
  // The quantized types: integer dots with Q8_0 / Q8_1 (legacy) or Q8_K
  // (K types, i-quants, ternary) activations.
  for_each_legacy_qtype([&]<DType T>() { g.dot[static_cast<int>(T)] = qdot_scalar<T>; });
  for_each_k_qtype([&]<DType T>() { g.dot[static_cast<int>(T)] = qdot_k_scalar<T>; });
  for_each_level_qtype([&]<DType T>() {
    if (quant::level_format(T)->run != kLevelRun<T>)  // (the kernels' compile-time copy of the format table's)
      throw std::logic_error("qdot_levels: the run length of " + std::string(type_name(T)) + " disagrees");
    g.dot[static_cast<int>(T)] = qdot_levels<T>;
  });
  for_each_scaled_qtype([&]<DType T>() { g.dot[static_cast<int>(T)] = qdot_scaled<T>; });
  for (uint32_t t = 0; t < kDTypeCount; ++t) g.packed_dot[t] = packed_dot_scalar(static_cast<DType>(t));
  return g;
}

GemmKernels merged(const GemmKernels* simd, const GemmKernels& fallback) {
  if (!simd) return fallback;
  GemmKernels g = *simd;
  for (uint32_t t = 0; t < kDTypeCount; ++t) {
    if (!g.dot[t]) {  // the fallback's row kernel goes with its dot kernel
      g.dot[t] = fallback.dot[t];
      g.dot_rows[t] = fallback.dot_rows[t];
      g.dot_same_x[t] = fallback.dot_same_x[t];
    }
    if (!g.pack[t] && fallback.nr == g.nr) g.pack[t] = fallback.pack[t];
    if (!g.packed_dot[t]) g.packed_dot[t] = fallback.packed_dot[t];
  }
  if (!g.pack_act && fallback.mr == g.mr) g.pack_act = fallback.pack_act;
  if (!g.pack_act_f16 && fallback.mr == g.mr) g.pack_act_f16 = fallback.pack_act_f16;
  return g;
}

// ---- shapes and work items -------------------------------------------------

struct Shape {
  int64_t K, M, N;    // row length, weight rows, activation rows
  int64_t B2, B3;     // batch dims of the result (and of b)
  int64_t r2, r3;     // broadcast ratios b/a in dims 2 and 3
  int64_t nbatch() const { return B2 * B3; }
};

Shape shape_of(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  return {a.ne[0], a.ne[1], b.ne[1], b.ne[2], b.ne[3], b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]};
}

bool rows_contiguous(const Tensor& t) { return t.nb[0] == type_traits(t.type).block_bytes; }

// Items are chunks of `rows` weight rows (a multiple of `align`) of one batch.
struct Items {
  int64_t rows;    // weight rows per chunk
  int64_t nchunk;  // chunks per batch
  int64_t count;   // items in all

  // About `per_thread` items per thread, at least `align` rows each.
  static Items make(const Shape& s, int nth, int64_t align, int64_t per_thread) {
    const int64_t want = std::max<int64_t>(1, nth * per_thread / s.nbatch());
    const int64_t rows = std::max(align, round_up((s.M + want - 1) / want, align));
    const int64_t nchunk = (s.M + rows - 1) / rows;
    return {rows, nchunk, nchunk * s.nbatch()};
  }
};

// Calls f(i12, i13, m0, m1) for each item this thread takes.
template <class F>
void for_each_item(const KernelCtx& c, const Shape& s, const Items& items, F&& f) {
  for (int64_t it = c.next_item(); it < items.count; it = c.next_item()) {
    const int64_t batch = it / items.nchunk;
    const int64_t m0 = (it - batch * items.nchunk) * items.rows;
    f(batch % s.B2, batch / s.B2, m0, std::min(s.M, m0 + items.rows));
  }
}

// ---- folded query heads -----------------------------------------------------

// Generation's attention products have one activation row per query head and
// r2 query heads per K/V head (grouped-query attention). Seen as one product
// per K/V head with r2 activation rows, each K or V row is read and converted
// once for all of its query heads instead of once per head; each sum is the
// same. Only the strides change: head h of group g is activation row h of
// batch g, in b and in the result alike.
class FoldedHeads {
 public:
  explicit FoldedHeads(const Tensor& node) : node_(&node) {
    const Tensor& a = *node.src[0];
    const Tensor& b = *node.src[1];
    const int64_t r2 = b.ne[2] / a.ne[2];
    if (r2 < 2 || b.ne[1] != 1 || node.ne[1] != 1) return;
    fold(b, r2, &b_);
    fold(node, r2, &d_);
    d_.op = node.op;
    d_.src = node.src;
    d_.src[1] = &b_;
    node_ = &d_;
  }
  const Tensor& node() const { return *node_; }
  bool is_folded() const { return node_ == &d_; }

 private:
  static void fold(const Tensor& t, int64_t r2, Tensor* into) {
    into->type = t.type;
    into->data = t.data;
    into->ne = {t.ne[0], r2, t.ne[2] / r2, t.ne[3]};
    into->nb = {t.nb[0], t.nb[2], t.nb[2] * r2, t.nb[3]};
  }
  const Tensor* node_;
  Tensor b_, d_;
};

// ---- dot path ---------------------------------------------------------------

// Calls f(i12, i13, m0, m1) for ranges of weight rows this thread claims from
// the shared counter (the rows of all batches one after another; a range
// never crosses a batch). Guided: a range is 1 / (2 nth) of the rows still
// unclaimed, rounded up to `align`, so ranges shrink as the work runs out and
// the threads finish close together. With equal ranges (8 per thread) the
// thread that finished first waited 7 us on average after each weight
// matmul of a 1.1B model's generation, half a range; the results do not
// depend on the ranges.
template <class F>
void for_each_guided(const KernelCtx& c, const Shape& s, int64_t align, F&& f) {
  const int64_t total = s.nbatch() * s.M;
  int64_t p = c.counter->load(std::memory_order_relaxed);
  while (p < total) {
    const int64_t batch = p / s.M, first = batch * s.M;
    const int64_t chunk = round_up(std::max<int64_t>(1, (total - p) / (2 * c.nth)), align);
    const int64_t q = std::min(first + s.M, p + chunk);
    if (!c.counter->compare_exchange_weak(p, q, std::memory_order_relaxed)) continue;
    f(batch % s.B2, batch / s.B2, p - first, q - first);
    p = c.counter->load(std::memory_order_relaxed);
  }
}

struct DotPlan {
  VecDotFn dot;
  VecDotRowsFn dot_rows;  // nullptr: row by row
  PackedDotFn packed_dot;  // for a packed weight (packed.h); nullptr: none
  bool convert_rows;  // weight rows go through to_float into F32 first
  DType x_type;       // type the activation rows must be in
  bool convert_x;     // activations are converted into scratch
  size_t x_row_bytes;
  DType round_type;  // F32 activations rounded through this type first (F32: not rounded)
  int64_t row_block;  // activation rows per cache block
};

// The type ggml's CPU converts activations to for a weight of type `t`: its
// vec_dot_type, which for F16 and BF16 is the type itself (qlens's kernels
// for them take F32 activations: TypeTraits::vec_dot_type says F32).
DType ggml_partner(DType t) { return t == DType::F16 || t == DType::BF16 ? t : type_traits(t).vec_dot_type; }

// round: the backend's ggml_rounding option.
DotPlan dot_plan(const Tensor& node, const GemmKernels& gk, bool round) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t K = a.ne[0];
  DotPlan p{};
  const VecDotFn own = gk.dot[static_cast<int>(a.type)];
  p.convert_rows = !own || !rows_contiguous(a);
  p.dot = p.convert_rows ? gk.dot[static_cast<int>(DType::F32)] : own;
  // Several weight rows per call for a single activation row (generation).
  p.dot_rows = p.convert_rows || b.ne[1] != 1 ? nullptr : gk.dot_rows[static_cast<int>(a.type)];
  p.packed_dot = p.convert_rows || b.ne[1] != 1 ? nullptr : gk.packed_dot[static_cast<int>(a.type)];
  p.x_type = p.convert_rows ? DType::F32 : type_traits(a.type).vec_dot_type;
  // ggml converts activations to the weight type's partner whatever kernel
  // runs (an F16 cache view's queries and probabilities to F16 too); the
  // F32 paths round them through it, so every path computes that function.
  p.round_type = p.x_type == DType::F32 && round ? ggml_partner(a.type) : DType::F32;
  // F16 and BF16 weights: activations kept in the partner type itself are
  // the same values in half the bytes.
  const VecDotFn same_x = gk.dot_same_x[static_cast<int>(a.type)];
  if (!p.convert_rows && same_x && p.round_type == a.type) {
    p.dot = same_x;
    p.x_type = a.type;
    p.round_type = DType::F32;
    if (b.ne[1] == 1) p.dot_rows = gk.dot_rows_same_x[static_cast<int>(a.type)];
  }
  p.convert_x = p.x_type != DType::F32 || b.nb[0] != sizeof(float) || p.round_type != DType::F32;
  p.x_row_bytes = p.convert_x ? row_bytes(p.x_type, K) : b.nb[1];
  // Keep about 256 KiB of activation rows hot while weight rows stream past.
  const size_t x_bytes = std::max<size_t>(1, row_bytes(p.x_type, K));
  p.row_block = std::max<int64_t>(4, static_cast<int64_t>((256 << 10) / x_bytes) / 4 * 4);
  return p;
}

size_t dot_scratch(const Tensor& node, const GemmKernels& gk, bool round) {
  const Shape s = shape_of(node);
  const DotPlan p = dot_plan(node, gk, round);
  size_t bytes = align_scratch(s.K * sizeof(float));  // a converted weight or activation row
  if (p.convert_x) bytes += align_scratch(s.N * p.x_row_bytes);
  if (p.round_type != DType::F32) bytes += align_scratch(row_bytes(p.round_type, s.K));
  return bytes;
}

void dot_path(const Tensor& node, const Shape& s, const KernelCtx& c, const GemmKernels& gk) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& d = node;
  const VecOps& vo = *c.vec;
  const DotPlan p = dot_plan(node, gk, c.options->ggml_rounding);
  float* row = reinterpret_cast<float*>(c.scratch);
  char* xbuf = c.scratch + align_scratch(s.K * sizeof(float));
  char* rounded = xbuf + (p.convert_x ? align_scratch(s.N * p.x_row_bytes) : 0);
  const TypeTraits& rt = type_traits(p.round_type);
  const FromFloatFn x_from_float = vo.from_float[static_cast<int>(p.x_type)];
  int64_t x_batch = -1;  // the batch whose activations are in xbuf

  // Ranges of whole packed groups.
  static_assert(16 % kPackRows == 0);
  const PackedWeight* packed = s.N == 1 && p.packed_dot ? c.packed->find(a) : nullptr;
  const size_t prefetch = c.options->prefetch_bytes;
  for_each_guided(c, s, 16, [&](int64_t i12, int64_t i13, int64_t m0, int64_t m1) {
    const int64_t i02 = i12 / s.r2, i03 = i13 / s.r3;
    const char* x = b.at(0, 0, i12, i13);
    if (p.convert_x) {
      if (x_batch != i12 + i13 * s.B2) {
        x_batch = i12 + i13 * s.B2;
        // Every thread converts the rows it needs itself: for generation (one
        // row) that is well under a microsecond with the SIMD quantizers,
        // less than handing the row over between threads would cost.
        for (int64_t j = 0; j < s.N; ++j) {
          char* dst = xbuf + j * p.x_row_bytes;
          if (p.x_type != DType::F32 && b.nb[0] == sizeof(float)) {  // F32 rows: quantized in place
            x_from_float(reinterpret_cast<const float*>(b.at(0, j, i12, i13)), dst, s.K);
            continue;
          }
          float* f = p.x_type == DType::F32 ? reinterpret_cast<float*>(dst) : row;
          row_to_f32(b, b.at(0, j, i12, i13), 0, s.K, f, vo);
          if (p.x_type != DType::F32) x_from_float(f, dst, s.K);
          if (p.round_type != DType::F32) {
            rt.from_float(f, rounded, s.K);
            rt.to_float(rounded, f, s.K);
          }
        }
      }
      x = xbuf;
    }
    if (packed) {  // N == 1, the weight packed for it: groups of kPackRows rows
      float out[kPackRows];
      for (int64_t g = m0 / kPackRows; g * kPackRows < m1; ++g) {
        p.packed_dot(s.K, packed->group(g), x, out, prefetch);
        const int64_t i0 = g * kPackRows, n = std::min<int64_t>(kPackRows, m1 - i0);
        for (int64_t r = 0; r < n; ++r) *reinterpret_cast<float*>(d.at(i0 + r, 0, i12, i13)) = out[r];
      }
      return;
    }
    float out[4];
    if (p.dot_rows) {  // N == 1: up to 4 weight rows at a time
      for (int64_t i = m0; i < m1; i += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(4, m1 - i));
        p.dot_rows(s.K, a.at(0, i, i02, i03), a.nb[1], x, nr, out);
        for (int r = 0; r < nr; ++r) *reinterpret_cast<float*>(d.at(i + r, 0, i12, i13)) = out[r];
      }
      return;
    }
    for (int64_t j0 = 0; j0 < s.N; j0 += p.row_block) {
      const int64_t j1 = std::min(s.N, j0 + p.row_block);
      for (int64_t i = m0; i < m1; ++i) {
        const void* w = a.at(0, i, i02, i03);
        if (p.convert_rows) {
          row_to_f32(a, static_cast<const char*>(w), 0, s.K, row, vo);
          w = row;
        }
        for (int64_t j = j0; j < j1; j += 4) {
          const int nc = static_cast<int>(std::min<int64_t>(4, j1 - j));
          p.dot(s.K, w, x + j * p.x_row_bytes, p.x_row_bytes, nc, out);
          for (int k = 0; k < nc; ++k) *reinterpret_cast<float*>(d.at(i, j + k, i12, i13)) = out[k];
        }
      }
    }
  });
}

// ---- GEMM path --------------------------------------------------------------

// Activations are packed per K block pc into ceil(N / mr) panels of kc x mr
// (k-major, zero rows past N): panel p0 of block pc at pc * Np + p0 * kc,
// where Np = N rounded up to mr. Shared packing holds every block of every
// batch (used with fewer batches than threads, when that is not too big);
// private packing one block of one batch at a time.
int64_t packed_rows(const Shape& s, const GemmKernels& gk) { return round_up<int64_t>(s.N, gk.mr); }

std::atomic<size_t> g_max_shared{size_t{64} << 20};
std::atomic<int64_t> g_min_n[kDTypeCount];  // 0: the kernels' choice

bool gemm_shared(const Shape& s, int nth, const GemmKernels& gk) {
  return s.nbatch() < nth && static_cast<size_t>(s.nbatch() * packed_rows(s, gk) * s.K) * sizeof(float) <=
                                 g_max_shared.load(std::memory_order_relaxed);
}

struct GemmScratch {
  float* bp;    // private packed activations (one K block), unless shared
  float* wp;    // packed weights: mc / nr panels of kc x nr
  float* row;   // one converted weight row segment (kc)
  float* tile;  // an edge tile (mr x nr)
};

size_t gemm_scratch_layout(const Shape& s, int nth, const GemmKernels& gk, char* base, GemmScratch* out) {
  const size_t bp = gemm_shared(s, nth, gk) ? 0 : align_scratch(packed_rows(s, gk) * gk.kc * sizeof(float));
  const size_t wp = align_scratch(gk.mc * gk.kc * sizeof(float));
  const size_t row = align_scratch(gk.kc * sizeof(float));
  const size_t tile = align_scratch(gk.mr * gk.nr * sizeof(float));
  if (out) {
    out->bp = reinterpret_cast<float*>(base);
    out->wp = reinterpret_cast<float*>(base + bp);
    out->row = reinterpret_cast<float*>(base + bp + wp);
    out->tile = reinterpret_cast<float*>(base + bp + wp + row);
  }
  return bp + wp + row + tile;
}

size_t gemm_shared_bytes(const Shape& s, int nth, const GemmKernels& gk) {
  return gemm_shared(s, nth, gk) ? align_scratch(s.nbatch() * packed_rows(s, gk) * s.K * sizeof(float)) : 0;
}

// Panel of activation rows [p0, p0 + mr), elements [pc, pc + kc). With a
// quantized partner type (the type the dot path converts activations to),
// each row segment is rounded through it first, so that the prompt path
// computes the same function as the dot path and as llama.cpp, whose kernels
// quantize activations for every batch size (kc is a multiple of 256: the
// partner's blocks never straddle a segment).
void pack_activation_panel(const Tensor& b, int64_t i12, int64_t i13, int64_t N, int64_t p0, int64_t pc,
                           int64_t kc, const GemmKernels& gk, DType partner, const VecOps& vo, float* panel) {
  const int mr = gk.mr;
  if (partner == DType::F16 && gk.pack_act_f16 && b.nb[0] == sizeof(float)) {
    gk.pack_act_f16(b.at(0, p0, i12, i13), b.nb[1], std::min<int64_t>(mr, N - p0), pc, kc, panel);
    return;
  }
  if (partner != DType::F32) {
    // Each row segment rounded with the instruction set's conversions, then
    // transposed into the panel as F32 rows are (element by element, the
    // rounding and the scatter cost as much as the products of the F16
    // cache's attention matmuls).
    alignas(64) float rounded[kMaxMr][256];
    alignas(64) uint8_t quantized[256 * 4];
    const FromFloatFn from_float = vo.from_float[static_cast<int>(partner)];
    const ToFloatFn to_float = vo.to_float[static_cast<int>(partner)];
    const int64_t stride = static_cast<int64_t>(b.nb[0] / sizeof(float));
    const int nrows = static_cast<int>(std::min<int64_t>(mr, N - p0));
    for (int r = 0; r < nrows; ++r) {
      const float* src = reinterpret_cast<const float*>(b.at(0, p0 + r, i12, i13)) + pc * stride;
      if (stride != 1) {
        for (int64_t k = 0; k < kc; ++k) rounded[r][k] = src[k * stride];
        src = rounded[r];
      }
      from_float(src, quantized, kc);
      to_float(quantized, rounded[r], kc);
    }
    if (gk.pack_act) {
      gk.pack_act(reinterpret_cast<const char*>(rounded), sizeof rounded[0], nrows, 0, kc, panel);
      return;
    }
    for (int64_t k = 0; k < kc; ++k)
      for (int r = 0; r < mr; ++r) panel[k * mr + r] = r < nrows ? rounded[r][k] : 0.0f;
    return;
  }
  if (gk.pack_act && b.nb[0] == sizeof(float)) {
    gk.pack_act(b.at(0, p0, i12, i13), b.nb[1], std::min<int64_t>(mr, N - p0), pc, kc, panel);
    return;
  }
  const int64_t stride = static_cast<int64_t>(b.nb[0] / sizeof(float));
  for (int r = 0; r < mr; ++r) {
    if (p0 + r < N) {
      const float* src = reinterpret_cast<const float*>(b.at(0, p0 + r, i12, i13)) + pc * stride;
      for (int64_t k = 0; k < kc; ++k) panel[k * mr + r] = src[k * stride];
    } else {
      for (int64_t k = 0; k < kc; ++k) panel[k * mr + r] = 0.0f;
    }
  }
}

// Weight rows [m0, m1) (at most mc), elements [pc, pc + kc), converted to F32
// into panels of nr rows, k-major (zero rows past m1).
void pack_weights(const Tensor& a, int64_t i02, int64_t i03, int64_t m0, int64_t m1, int64_t pc, int64_t kc,
                  const GemmKernels& gk, const VecOps& vo, float* row, float* wp) {
  const int nr = gk.nr;
  const PackFn pack = rows_contiguous(a) ? gk.pack[static_cast<int>(a.type)] : nullptr;
  for (int64_t q0 = m0; q0 < m1; q0 += nr) {
    float* panel = wp + (q0 - m0) * kc;
    if (pack) {
      pack(a.at(0, q0, i02, i03), a.nb[1], std::min<int64_t>(nr, m1 - q0), pc, kc, panel);
      continue;
    }
    for (int i = 0; i < nr; ++i) {
      if (q0 + i < m1) {
        row_to_f32(a, a.at(0, q0 + i, i02, i03), pc, kc, row, vo);
        for (int64_t k = 0; k < kc; ++k) panel[k * nr + i] = row[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) panel[k * nr + i] = 0.0f;
      }
    }
  }
}

// Where an activation panel (kc x mr, k-major) ends, leaving out its
// trailing all-zero k: causal attention's probabilities past a token's
// position (the prompt's kqv), about half of them. Those terms add nothing,
// so the micro-kernel stops there: the same sums (but for the sign of a zero
// one; a NaN or inf is nonzero and stays).
int64_t nonzero_length(const float* bp, int64_t kc, int mr) {
  for (int64_t k = kc; k > 0; --k)
    for (int r = 0; r < mr; ++r)
      if (bp[(k - 1) * mr + r] != 0.0f) return k;
  return 0;
}

// Output rows [m0, m1) of one batch for K block pc, activations packed at bp.
void gemm_block(const Tensor& a, const Tensor& d, const Shape& s, int64_t i12, int64_t i13, int64_t m0, int64_t m1,
                int64_t pc, int64_t kc, const float* bp, const GemmScratch& sc, const GemmKernels& gk,
                const VecOps& vo) {
  const int mr = gk.mr, nr = gk.nr;
  const int64_t ldc = static_cast<int64_t>(d.nb[1] / sizeof(float));
  const bool accumulate = pc > 0;
  float* c = reinterpret_cast<float*>(d.at(0, 0, i12, i13));
  for (int64_t jc = m0; jc < m1; jc += gk.mc) {
    const int64_t jc1 = std::min(m1, jc + gk.mc);
    pack_weights(a, i12 / s.r2, i13 / s.r3, jc, jc1, pc, kc, gk, vo, sc.row, sc.wp);
    for (int64_t ic = 0; ic < s.N; ic += gk.nc) {
      const int64_t ic1 = std::min(s.N, ic + gk.nc);
      int64_t length[kMaxPanelsPerBlock];
      for (int64_t p0 = ic; p0 < ic1; p0 += mr) length[(p0 - ic) / mr] = nonzero_length(bp + p0 * kc, kc, mr);
      for (int64_t q0 = jc; q0 < jc1; q0 += nr) {
        const float* wpanel = sc.wp + (q0 - jc) * kc;
        const int64_t cols = std::min<int64_t>(nr, jc1 - q0);
        for (int64_t p0 = ic; p0 < ic1; p0 += mr) {
          const float* bpanel = bp + p0 * kc;
          const int64_t rows = std::min<int64_t>(mr, s.N - p0);
          const int64_t k_used = length[(p0 - ic) / mr];
          float* ct = c + p0 * ldc + q0;
          if (rows == mr && cols == nr) {
            gk.micro(k_used, wpanel, bpanel, ct, ldc, accumulate);
            continue;
          }
          // Edge tile: the same arithmetic into a buffer, then the valid part.
          gk.micro(k_used, wpanel, bpanel, sc.tile, nr, false);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < cols; ++i) {
              float& dst = ct[r * ldc + i];
              dst = accumulate ? dst + sc.tile[r * nr + i] : sc.tile[r * nr + i];
            }
        }
      }
    }
  }
}

void gemm_path(const Tensor& node, const Shape& s, const KernelCtx& c, const GemmKernels& gk) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const VecOps& vo = *c.vec;
  GemmScratch sc;
  gemm_scratch_layout(s, c.nth, gk, c.scratch, &sc);
  const int64_t np = packed_rows(s, gk);
  const bool round = c.options->ggml_rounding;
  const DotPlan dp = dot_plan(node, gk, round);
  const DType partner = !round ? DType::F32 : dp.x_type != DType::F32 ? dp.x_type : dp.round_type;

  if (gemm_shared(s, c.nth, gk)) {
    // All threads pack all activations once (panels split statically), then
    // take chunks of weight rows.
    float* shared = reinterpret_cast<float*>(c.shared);
    const int64_t nblocks = (s.K + gk.kc - 1) / gk.kc, npanels = np / gk.mr;
    const int64_t total = s.nbatch() * nblocks * npanels;
    for (int64_t t = total * c.ith / c.nth; t < total * (c.ith + 1) / c.nth; ++t) {
      const int64_t batch = t / (nblocks * npanels);
      const int64_t pc = (t / npanels % nblocks) * gk.kc;
      const int64_t p0 = t % npanels * gk.mr;
      const int64_t kc = std::min(gk.kc, s.K - pc);
      pack_activation_panel(b, batch % s.B2, batch / s.B2, s.N, p0, pc, kc, gk, partner, vo,
                            shared + batch * np * s.K + pc * np + p0 * kc);
    }
    c.barrier();
    // Chunks of whole weight blocks where there are enough, about 4 per thread.
    const Items items = Items::make(s, c.nth, gk.nr, 4);
    for_each_item(c, s, items, [&](int64_t i12, int64_t i13, int64_t m0, int64_t m1) {
      const float* bb = shared + (i12 + i13 * s.B2) * np * s.K;
      for (int64_t pc = 0; pc < s.K; pc += gk.kc)
        gemm_block(a, node, s, i12, i13, m0, m1, pc, std::min(gk.kc, s.K - pc), bb + pc * np, sc, gk, vo);
    });
    return;
  }
  // Items pack their own activations: whole batches when there are enough of
  // them, else chunks of weight rows.
  const Items items = Items::make(s, c.nth, gk.nr, 2);
  for_each_item(c, s, items, [&](int64_t i12, int64_t i13, int64_t m0, int64_t m1) {
    for (int64_t pc = 0; pc < s.K; pc += gk.kc) {
      const int64_t kc = std::min(gk.kc, s.K - pc);
      for (int64_t p0 = 0; p0 < np; p0 += gk.mr)
        pack_activation_panel(b, i12, i13, s.N, p0, pc, kc, gk, partner, vo, sc.bp + p0 * kc);
      gemm_block(a, node, s, i12, i13, m0, m1, pc, kc, sc.bp, sc, gk, vo);
    }
  });
}

// From min_n activation rows on (per type where set), or where a test forces
// it. Folded query heads of a float cache from 2/3 of a micro-tile's rows
// on: the packing of a K/V head's rows serves all of its query heads, and
// the dot path converts each activation vector again for every K or V row.
// Measured per token (perf): N = 8 of 12 (a 1.1B llama, 32 heads of 64
// over 4 K/V heads) 2.2% on the GEMM path against 3.9% on the dot path; N = 4
// of 12 (Gemma 3 270M, 4 heads of 256 over 1) 8.7% against 6.5%.
bool uses_gemm(const FoldedHeads& f, const GemmKernels& gk) {
  const Tensor& node = f.node();
  const Tensor& a = *node.src[0];
  const int64_t forced = g_min_n[static_cast<int>(a.type)].load(std::memory_order_relaxed);
  const int64_t own = gk.min_n_type[static_cast<int>(a.type)];
  const int64_t folded = f.is_folded() && is_float_type(a.type) ? (2 * gk.mr + 2) / 3 : 0;
  const int64_t min_n = forced > 0 ? forced : folded > 0 ? folded : own > 0 ? own : gk.min_n;
  return gk.micro && node.src[1]->ne[1] >= min_n && node.nb[0] == sizeof(float) &&
         type_traits(a.type).to_float != nullptr;
}

}  // namespace

// One table per instruction set, VNNI choice (the int8 GEMM's and the
// packed kernels' wrappers; without VNNI on the CPU both choices are equal)
// and way of reading the 3-bit and 1-bit i-quant grids.
const GemmKernels& gemm_kernels(Isa isa, bool vnni, bool grid_gathers) {
  static const GemmKernels scalar = make_scalar();
  // (Asked once: CPUID, which a hypervisor may trap, is no per-node cost.)
  static const bool avx2_ok = isa_supported(Isa::Avx2), avx512_ok = isa_supported(Isa::Avx512);
  using Table = std::array<std::array<GemmKernels, 2>, 2>;  // [vnni][grid_gathers]
  static const Table avx2 = [] {
    Table t;
    for (int v = 0; v < 2; ++v)
      for (int g = 0; g < 2; ++g) t[v][g] = merged(avx2_ok ? gemm_kernels_avx2(v, g) : nullptr, scalar);
    return t;
  }();
  static const Table avx512 = [] {
    Table t;
    for (int v = 0; v < 2; ++v)
      for (int g = 0; g < 2; ++g) t[v][g] = merged(avx512_ok ? gemm_kernels_avx512(v, g) : nullptr, avx2[v][g]);
    return t;
  }();
  switch (isa) {
    case Isa::Scalar: return scalar;
    case Isa::Avx2: return avx2[vnni][grid_gathers];
    case Isa::Avx512: return avx512[vnni][grid_gathers];
  }
  return scalar;
}

const GemmKernels& gemm_kernels(const KernelOptions& o) { return gemm_kernels(o.isa, o.vnni, o.grid_gathers); }

bool matmul_uses_gemm(const Tensor& node, const KernelOptions& o) {
  return uses_gemm(FoldedHeads(node), gemm_kernels(o));
}

bool matmul_uses_gemm(const Tensor& node, Isa isa) { return matmul_uses_gemm(node, kernel_options(isa)); }

bool matmul_uses_int8(const Tensor& unfolded, const KernelOptions& o) {
  const FoldedHeads folded(unfolded);
  const Tensor& node = folded.node();
  const GemmKernels& gk = gemm_kernels(o);
  return uses_gemm(folded, gk) && int8_applies(node, gk, o);
}

bool matmul_uses_int8(const Tensor& node, Isa isa) { return matmul_uses_int8(node, kernel_options(isa)); }

size_t int8_max_shared() { return g_max_shared.load(std::memory_order_relaxed); }

size_t matmul_set_max_shared(size_t bytes) { return g_max_shared.exchange(bytes); }

int64_t matmul_set_min_n(DType type, int64_t n) { return g_min_n[static_cast<int>(type)].exchange(n); }

size_t matmul_scratch(const Tensor& unfolded, int nth, const KernelOptions& o) {
  const FoldedHeads folded(unfolded);
  const Tensor& node = folded.node();
  const GemmKernels& gk = gemm_kernels(o);
  if (uses_gemm(folded, gk) && int8_applies(node, gk, o)) return int8_scratch(node, gk);
  if (uses_gemm(folded, gk)) return gemm_scratch_layout(shape_of(node), nth, gk, nullptr, nullptr);
  return dot_scratch(node, gk, o.ggml_rounding);
}

size_t matmul_scratch_bound(const Tensor& unfolded, int nth, const KernelOptions& o) {
  const FoldedHeads folded(unfolded);
  const Tensor& node = folded.node();
  const GemmKernels& gk = gemm_kernels(o);
  const size_t dot = dot_scratch(node, gk, o.ggml_rounding);
  if (!gk.micro) return dot;
  const size_t i8 = int8_applies(node, gk, o) ? int8_scratch(node, gk) : 0;
  return std::max({dot, i8, gemm_scratch_layout(shape_of(node), nth, gk, nullptr, nullptr)});
}

size_t matmul_shared_scratch_bound(const Tensor& unfolded, int nth, const KernelOptions& o) {
  const FoldedHeads folded(unfolded);
  const Tensor& node = folded.node();
  const GemmKernels& gk = gemm_kernels(o);
  const Shape s = shape_of(node);
  if (!gk.micro) return 0;
  // The int8 path packs activations into shared scratch for any batch count.
  const size_t i8 = int8_applies(node, gk, o) ? int8_shared_scratch(node, gk) : 0;
  if (s.nbatch() >= nth) return i8;
  const size_t packed = static_cast<size_t>(s.nbatch() * packed_rows(s, gk) * s.K) * sizeof(float);
  return std::max(i8, align_scratch(std::min(packed, g_max_shared.load(std::memory_order_relaxed))));
}

size_t matmul_shared_scratch(const Tensor& unfolded, int nth, const KernelOptions& o) {
  const FoldedHeads folded(unfolded);
  const Tensor& node = folded.node();
  const GemmKernels& gk = gemm_kernels(o);
  if (uses_gemm(folded, gk) && int8_applies(node, gk, o)) return int8_shared_scratch(node, gk);
  return uses_gemm(folded, gk) ? gemm_shared_bytes(shape_of(node), nth, gk) : 0;
}

void matmul(const Tensor& unfolded, const KernelCtx& c) {
  const FoldedHeads folded(unfolded);
  const Tensor& node = folded.node();
  const GemmKernels& gk = gemm_kernels(*c.options);
  const Shape s = shape_of(node);
  if (s.M == 0 || s.N == 0 || s.nbatch() == 0) return;
  if (s.K == 0) {  // empty sums
    if (c.ith == 0)
      for (int64_t i3 = 0; i3 < s.B3; ++i3)
        for (int64_t i2 = 0; i2 < s.B2; ++i2)
          for (int64_t j = 0; j < s.N; ++j)
            for (int64_t i = 0; i < s.M; ++i) *reinterpret_cast<float*>(node.at(i, j, i2, i3)) = 0.0f;
    return;
  }
  if (uses_gemm(folded, gk) && int8_applies(node, gk, *c.options))
    int8_gemm(node, c, gk);
  else if (uses_gemm(folded, gk))
    gemm_path(node, s, c, gk);
  else
    dot_path(node, s, c, gk);
}

}  // namespace qlens::cpu
