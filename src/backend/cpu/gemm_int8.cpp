// The int8 GEMM path's driver (see gemm_int8.h): activation quantization and
// packing, weight repacking per work item, the loops around the micro-kernel.
#include "backend/cpu/gemm_int8.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/ops.h"
#include "backend/cpu/vec.h"

namespace qlens::cpu {

namespace {

int64_t ceil_div(int64_t n, int64_t m) { return (n + m - 1) / m; }

// K block of the micro-kernel calls, in elements: the whole row for the 1.1B
// model's K = 2048 (N = 512, Q4_0 and Q4_K at K = 2048 and 5632, 2 threads,
// dev-2c 2026-12-02: 3-5% faster than 512, measured twice each, interleaved).
constexpr int64_t kKc = 2048;

struct I8Shape {
  int64_t K, M, N, B2, B3, r2, r3;
  int mr, nr;       // the type's micro-tile
  int64_t nu;       // units per row
  int64_t npanels;  // activation panels per batch
  int64_t mc;       // weight rows repacked at a time
  size_t x_panel;   // bytes of one activation panel (all units)
  size_t w_panel;   // bytes of one weight panel (all units)
  int64_t nbatch() const { return B2 * B3; }
};

I8Shape i8_shape(const Tensor& node, const GemmKernels& gk) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Int8Gemm& e = gk.i8[static_cast<int>(a.type)];
  I8Shape s{};
  s.K = a.ne[0];
  s.M = a.ne[1];
  s.N = b.ne[1];
  s.B2 = b.ne[2];
  s.B3 = b.ne[3];
  s.r2 = b.ne[2] / a.ne[2];
  s.r3 = b.ne[3] / a.ne[3];
  s.nu = e.unit > 0 ? s.K / e.unit : 0;
  s.mr = e.mr;
  s.nr = e.nr;
  s.npanels = ceil_div(s.N, e.mr);
  s.mc = 4 * static_cast<int64_t>(e.nr);
  s.x_panel = static_cast<size_t>(s.nu) * e.x_unit_bytes;
  s.w_panel = static_cast<size_t>(s.nu) * e.w_unit_bytes;
  return s;
}

size_t shared_bytes(const I8Shape& s) { return align_scratch(static_cast<size_t>(s.nbatch() * s.npanels) * s.x_panel); }

struct I8Scratch {
  char* xrow;      // one quantized activation row
  uint8_t* wp;     // mc / nr weight panels
  float* tile;     // an edge tile (mr x nr)
};

size_t scratch_layout(const Tensor& node, const I8Shape& s, char* base, I8Scratch* out) {
  const DType xt = type_traits(node.src[0]->type).vec_dot_type;
  const size_t xrow = align_scratch(row_bytes(xt, s.K));
  const size_t wp = align_scratch(static_cast<size_t>(s.mc / s.nr) * s.w_panel);
  const size_t tile = align_scratch(static_cast<size_t>(s.mr * s.nr) * sizeof(float));
  if (out) {
    out->xrow = base;
    out->wp = reinterpret_cast<uint8_t*>(base + xrow);
    out->tile = reinterpret_cast<float*>(base + xrow + wp);
  }
  return xrow + wp + tile;
}

// Activation panel t (batch t / npanels, panel t % npanels) of all units.
void pack_activations(const Tensor& node, const I8Shape& s, const GemmKernels& gk, const VecOps& vo, int64_t t,
                      char* xrow, uint8_t* panel) {
  const Tensor& b = *node.src[1];
  const Int8Gemm& e = gk.i8[static_cast<int>(node.src[0]->type)];
  const DType xt = type_traits(node.src[0]->type).vec_dot_type;
  const FromFloatFn from_float =
      vo.from_float[static_cast<int>(xt)] ? vo.from_float[static_cast<int>(xt)] : type_traits(xt).from_float;
  const int64_t batch = t / s.npanels, p0 = t % s.npanels * s.mr;
  // Rows past N stay zero: zero codes, scales and starts contribute nothing.
  std::memset(panel, 0, s.x_panel);
  for (int r = 0; r < s.mr && p0 + r < s.N; ++r) {
    from_float(reinterpret_cast<const float*>(b.at(0, p0 + r, batch % s.B2, batch / s.B2)), xrow, s.K);
    e.pack_x(xrow, r, s.nu, panel);
  }
}

// One micro-tile: activation rows [j0, j0 + rows) x weight rows [i0, i0 +
// cols) of c (ldc floats per activation row), units [u0, u0 + nu). Edge tiles
// go through the tile buffer with the same kernel and accumulation.
void tile(const Int8Gemm& e, int64_t nu, const uint8_t* wp, const uint8_t* xp, float* c,
          int64_t ldc, int64_t rows, int64_t cols, bool accumulate, float* buf) {
  if (rows == e.mr && cols == e.nr) {
    e.micro(nu, wp, xp, c, ldc, accumulate);
    return;
  }
  const int nr = e.nr;
  if (accumulate)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(buf + r * nr, c + r * ldc, cols * sizeof(float));
  e.micro(nu, wp, xp, buf, nr, accumulate);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(c + r * ldc, buf + r * nr, cols * sizeof(float));
}

// Output rows [m0, m1) of one batch (activations packed at xb).
void compute_item(const Tensor& node, const I8Shape& s, const GemmKernels& gk, int64_t i12, int64_t i13, int64_t m0,
                  int64_t m1, const uint8_t* xb, const I8Scratch& sc) {
  const Tensor& a = *node.src[0];
  const Tensor& d = node;
  const Int8Gemm& e = gk.i8[static_cast<int>(a.type)];
  const int mr = e.mr, nr = e.nr;
  const int64_t ldc = static_cast<int64_t>(d.nb[1] / sizeof(float));
  const int64_t kcu = std::max<int64_t>(1, kKc / e.unit);
  float* c = reinterpret_cast<float*>(d.at(0, 0, i12, i13));
  for (int64_t jc = m0; jc < m1; jc += s.mc) {
    const int64_t jc1 = std::min(m1, jc + s.mc);
    for (int64_t q0 = jc; q0 < jc1; q0 += nr)
      e.pack_w(a.at(0, q0, i12 / s.r2, i13 / s.r3), a.nb[1], std::min<int64_t>(nr, jc1 - q0), 0, s.nu,
               sc.wp + (q0 - jc) / nr * s.w_panel);
    for (int64_t u0 = 0; u0 < s.nu; u0 += kcu) {
      const int64_t nu = std::min(kcu, s.nu - u0);
      for (int64_t q0 = jc; q0 < jc1; q0 += nr) {
        const uint8_t* wp = sc.wp + (q0 - jc) / nr * s.w_panel + u0 * e.w_unit_bytes;
        const int64_t cols = std::min<int64_t>(nr, jc1 - q0);
        for (int64_t p = 0; p < s.npanels; ++p) {
          const uint8_t* xp = xb + p * s.x_panel + u0 * e.x_unit_bytes;
          const int64_t rows = std::min<int64_t>(mr, s.N - p * mr);
          tile(e, nu, wp, xp, c + p * mr * ldc + q0, ldc, rows, cols, u0 > 0, sc.tile);
        }
      }
    }
  }
}

}  // namespace

bool int8_applies(const Tensor& node, const GemmKernels& gk, const KernelOptions& options) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Int8Gemm& e = gk.i8[static_cast<int>(a.type)];
  // The options may turn the path off (the F32 panels serve, to set its
  // results beside theirs); without ggml's rounding of activations the GEMM
  // path multiplies them unquantized: the F32 panels too.
  if (!options.int8_gemm || !e.pack_w || !options.ggml_rounding) return false;
  if (b.type != DType::F32 || b.nb[0] != sizeof(float) || a.nb[0] != type_traits(a.type).block_bytes) return false;
  if (a.ne[0] % e.unit != 0 || node.nb[0] != sizeof(float)) return false;
  return shared_bytes(i8_shape(node, gk)) <= int8_max_shared();
}

size_t int8_scratch(const Tensor& node, const GemmKernels& gk) {
  return scratch_layout(node, i8_shape(node, gk), nullptr, nullptr);
}

size_t int8_shared_scratch(const Tensor& node, const GemmKernels& gk) { return shared_bytes(i8_shape(node, gk)); }

void int8_gemm(const Tensor& node, const KernelCtx& c, const GemmKernels& gk) {
  const I8Shape s = i8_shape(node, gk);
  I8Scratch sc;
  scratch_layout(node, s, c.scratch, &sc);
  auto* shared = reinterpret_cast<uint8_t*>(c.shared);
  const int64_t total = s.nbatch() * s.npanels;
  for (int64_t t = total * c.ith / c.nth; t < total * (c.ith + 1) / c.nth; ++t)
    pack_activations(node, s, gk, *c.vec, t, sc.xrow, shared + t * s.x_panel);
  c.barrier();
  // Chunks of weight rows (multiples of nr), about 4 per thread.
  const int64_t nr = s.nr;
  const int64_t want = std::max<int64_t>(1, c.nth * 4 / s.nbatch());
  const int64_t rows = std::max(nr, ceil_div(ceil_div(s.M, want), nr) * nr);
  const int64_t nchunk = ceil_div(s.M, rows), count = nchunk * s.nbatch();
  for (int64_t it = c.next_item(); it < count; it = c.next_item()) {
    const int64_t batch = it / nchunk, m0 = (it - batch * nchunk) * rows;
    compute_item(node, s, gk, batch % s.B2, batch / s.B2, m0, std::min(s.M, m0 + rows),
                 shared + batch * s.npanels * s.x_panel, sc);
  }
}

}  // namespace qlens::cpu
