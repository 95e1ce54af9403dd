// CPU kernel tests that are not the op table's (test_backend_ops.cpp runs
// every op case on every backend, the CPU at each instruction set and thread
// count, against the reference backend): ggml's roundings (F32 activations
// through an F16 or BF16 weight's type, GELU through its F16 table:
// CpuOptions::ggml_rounding, on by default, off in the op table) against the
// reference fed the rounded values; kernels' shortcuts against their own long
// way (softmax's causal rows, half-precision dots, F16 packing); GELU at
// points worked out to 20 digits and where it saturates; known answers
// (argsort, clamp of NaN); the backends' errors; the thread pool; and the
// SIMD row primitives and matmul kernels against the scalar ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/vec.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/tensor.h"
#include "test_util.h"

namespace qlens {
namespace {

using cpu::Isa;
using Shape4 = std::array<int64_t, kMaxDims>;

std::vector<Isa> simd_isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (cpu::isa_supported(isa)) v.push_back(isa);
  return v;
}

std::vector<Isa> all_isas() {
  std::vector<Isa> v{Isa::Scalar};
  for (Isa isa : simd_isas()) v.push_back(isa);
  return v;
}

// While an F32Kernels lives (below): the backends without ggml's rounding.
bool g_exact_kernels = false;

Backend& cpu_backend(Isa isa, int nth) {
  static std::map<std::pair<int, int>, std::unique_ptr<Backend>> cache;
  auto& b = cache[{static_cast<int>(isa) * 2 + g_exact_kernels, nth}];
  CpuOptions o;
  o.ggml_rounding = !g_exact_kernels;
  if (!b) b = cpu::make_cpu_backend(nth, isa, o);
  return *b;
}

Backend& reference() {
  static std::unique_ptr<Backend> b = make_reference_backend();
  return *b;
}

// ---- reading and writing elements of the plain types ----

double get_elem(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const char* p = t.at(i0, i1, i2, i3);
  switch (t.type) {
    case DType::F32: return *reinterpret_cast<const float*>(p);
    case DType::F16: return fp16_to_fp32(*reinterpret_cast<const uint16_t*>(p));
    case DType::BF16: return bf16_to_fp32(*reinterpret_cast<const uint16_t*>(p));
    case DType::I32: return *reinterpret_cast<const int32_t*>(p);
    default: ADD_FAILURE() << "unexpected type"; return 0;
  }
}

void set_elem(const Tensor& t, float v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  char* p = t.at(i0, i1, i2, i3);
  switch (t.type) {
    case DType::F32: *reinterpret_cast<float*>(p) = v; break;
    case DType::F16: *reinterpret_cast<uint16_t*>(p) = fp32_to_fp16(v); break;
    case DType::BF16: *reinterpret_cast<uint16_t*>(p) = fp32_to_bf16(v); break;
    case DType::I32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    default: ADD_FAILURE() << "unexpected type";
  }
}

template <class F>
void for_each_index(const Tensor& t, F&& f) {
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) f(i0, i1, i2, i3);
}

// All elements in logical order.
std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  v.reserve(t.nelements());
  for_each_index(t, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) { v.push_back(get_elem(t, i0, i1, i2, i3)); });
  return v;
}

// ---- graphs with random leaves ----

// One graph with its leaf storage and intermediate buffer. With `abs`, every
// random value is replaced by its magnitude (used to get sum |a||b| for the
// matmul bound from the reference backend).
class Fixture {
 public:
  Fixture(uint32_t seed, bool abs = false) : rng_(seed), abs_(abs) {}

  Graph g;

  Tensor* leaf(DType type, Shape4 ne, const char* name = "x") {
    Tensor* t = g.new_tensor(type, ne, name);
    t->data = alloc(t->nbytes());
    return t;
  }
  // Uniform values in [lo, hi) (rounded to the type).
  Tensor* rand(DType type, Shape4 ne, float lo = -1.0f, float hi = 1.0f, const char* name = "x") {
    Tensor* t = leaf(type, ne, name);
    fill(*t, lo, hi);
    return t;
  }
  Tensor* ints(const std::vector<int32_t>& v, const char* name = "idx") {
    Tensor* t = leaf(DType::I32, {static_cast<int64_t>(v.size()), 1, 1, 1}, name);
    std::memcpy(t->data, v.data(), v.size() * sizeof(int32_t));
    return t;
  }
  void fill(const Tensor& t, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    for_each_index(t, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
      const float v = u(rng_);
      set_elem(t, abs_ ? std::fabs(v) : v, i0, i1, i2, i3);
    });
  }
  std::mt19937& rng() { return rng_; }

  // Adds `out` to the graph (as an output) and plans its memory.
  void output(Tensor* out) {
    out->flags |= kFlagOutput;
    g.build(out);
  }
  void plan() {
    plan_ = plan_memory(g);
    buf_.assign(plan_.size + 64, 0);
    char* base = buf_.data() + (64 - reinterpret_cast<uintptr_t>(buf_.data()) % 64) % 64;
    apply_memory_plan(g, plan_, base);
    base_ = base;
  }
  // Intermediates start as NaN so that unwritten outputs show.
  void run(Backend& b) {
    std::memset(base_, 0xff, plan_.size);
    b.compute(g);
  }

 private:
  void* alloc(size_t n) {
    auto& s = storage_.emplace_back(n + 64, 0);
    return s.data() + (64 - reinterpret_cast<uintptr_t>(s.data()) % 64) % 64;
  }
  std::mt19937 rng_;
  bool abs_;
  std::vector<std::vector<char>> storage_;
  std::vector<char> buf_;
  char* base_ = nullptr;
  MemoryPlan plan_;
};

// Builds the graph into a fixture and returns the tensor to read afterwards
// (the output node, or the leaf a Cpy wrote into).
using Build = std::function<Tensor*(Fixture&)>;

std::vector<double> eval(const Build& build, uint32_t seed, Backend& b, bool abs = false) {
  Fixture f(seed, abs);
  Tensor* out = build(f);
  f.plan();
  f.run(b);
  return values(*out);
}

bool same_bits(double x, double y) {
  const float a = static_cast<float>(x), b = static_cast<float>(y);
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

double nmse(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(ref[i])) return INFINITY;
    if (std::isnan(ref[i])) continue;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

// Per element |got - ref| <= 1e-5 * sum_k |a_ik||b_kj| (abs_ref: the
// reference on magnitudes), the bound of test_backend_ops's products.
void check_matmul(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& abs_ref) {
  ASSERT_EQ(got.size(), ref.size());
  ASSERT_EQ(abs_ref.size(), ref.size());
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    if (!(err <= 1e-5 * abs_ref[i] + 1e-30) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << ref[i] << " (sum |a||b| " << abs_ref[i] << ")";
  }
  EXPECT_EQ(bad, 0u) << "of " << ref.size();
}

const char* tname(DType t) { return type_name(t).data(); }

// The CPU kernels without ggml's rounding, for the tests against the exact
// reference.
struct F32Kernels {
  F32Kernels() { g_exact_kernels = true; }
  ~F32Kernels() { g_exact_kernels = false; }
  F32Kernels(const F32Kernels&) = delete;
  F32Kernels& operator=(const F32Kernels&) = delete;
};

constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

// =============================================================================
// What the op table (test_backend_ops) does not ask: ggml's roundings,
// kernels' shortcuts against their own long way, known answers

struct MatMulCase {
  int64_t K, M, N;
  int64_t A2 = 1, B2 = 1, A3 = 1, B3 = 1;
};

Tensor* build_mul_mat(Fixture& f, DType wt, const MatMulCase& c) {
  Tensor* a = f.rand(wt, {c.K, c.M, c.A2, c.A3}, -1, 1, "a");
  Tensor* b = f.rand(DType::F32, {c.K, c.N, c.B2, c.B3}, -1, 1, "b");
  Tensor* r = mul_mat(f.g, a, b);
  f.output(r);
  return r;
}

// With ggml's rounding on (the default), an F16 or BF16 weight sees its F32
// activations rounded to its own type first on every path (dot and GEMM,
// contiguous or not), as ggml converts them to its vec_dot_type: the result
// is the reference's product with rounded activations.
// The dot path keeps the activations of F16 and BF16 weights in the weight's
// type (the values ggml rounds them to): those kernels must give, bit for
// bit, what the F32-activation kernels give on the same values widened.
TEST(Ops, HalfActivationDotsEqualWidenedOnes) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (DType type : {DType::F16, DType::BF16})
    for (int64_t K : {1, 7, 64, 65, 2048, 5635}) {
      const int64_t stride = K + 3;  // elements between activation rows
      std::vector<uint16_t> w(K), x16(4 * stride);
      std::vector<float> x32(4 * stride);
      auto to_half = [&](float v) { return type == DType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v); };
      auto widen = [&](uint16_t h) { return type == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h); };
      for (auto& v : w) v = to_half(dist(rng));
      for (int64_t i = 0; i < 4 * stride; ++i) x32[i] = widen(x16[i] = to_half(dist(rng)));
      for (Isa isa : all_isas()) {
        const cpu::GemmKernels& gk = cpu::gemm_kernels(isa);
        const cpu::VecDotFn half = gk.dot_same_x[static_cast<int>(type)];
        ASSERT_NE(half, nullptr) << cpu::isa_name(isa);
        for (int nc = 1; nc <= 4; ++nc) {
          SCOPED_TRACE(std::string(tname(type)) + " " + cpu::isa_name(isa) + " K=" + std::to_string(K) +
                       " nc=" + std::to_string(nc));
          float got[4], want[4];
          half(K, w.data(), x16.data(), stride * sizeof(uint16_t), nc, got);
          gk.dot[static_cast<int>(type)](K, w.data(), x32.data(), stride * sizeof(float), nc, want);
          for (int c = 0; c < nc; ++c) EXPECT_EQ(std::memcmp(&got[c], &want[c], sizeof(float)), 0) << got[c] << " " << want[c];
        }
      }
    }
}

// The GEMM path packs the activations of F16 weights (the attention's F16
// cache) rounding them through F16 in registers: the panel must equal the
// plain packing of rows rounded beforehand by the scalar conversion, ties,
// subnormals and overflow to infinity included, in the vector part and the
// tail alike.
TEST(Ops, F16RoundingPackEqualsPackingRoundedRows) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-2, 2);
  const float specials[] = {65504.0f, 65520.0f, -70000.0f, 1e-8f, -3e-6f, 0.0f, -0.0f, 1.0f + 0x1p-11f,
                            1.0f + 0x1p-11f + 0x1p-20f, 6.1e-5f};
  for (Isa isa : all_isas()) {
    const cpu::GemmKernels& gk = cpu::gemm_kernels(isa);
    if (!gk.pack_act_f16) continue;
    for (int64_t kc : {256, 64, 13})
      for (int nrows : {1, 5, gk.mr}) {
        SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " kc=" + std::to_string(kc) + " rows=" + std::to_string(nrows));
        const int64_t k0 = 3, stride = kc + k0 + 5;
        std::vector<float> raw(nrows * stride), rounded(nrows * stride);
        for (size_t i = 0; i < raw.size(); ++i) {
          raw[i] = rng() % 7 == 0 ? specials[rng() % std::size(specials)] : dist(rng);
          rounded[i] = fp16_to_fp32(fp32_to_fp16(raw[i]));
        }
        std::vector<float> got(kc * gk.mr, -1.0f), want(kc * gk.mr, -2.0f);
        gk.pack_act_f16(reinterpret_cast<const char*>(raw.data()), stride * sizeof(float), nrows, k0, kc, got.data());
        gk.pack_act(reinterpret_cast<const char*>(rounded.data()), stride * sizeof(float), nrows, k0, kc, want.data());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      }
  }
}

TEST(Ops, MulMatRoundsActivationsAsGgml) {
  for (DType type : {DType::F16, DType::BF16})
    for (MatMulCase c : {MatMulCase{65, 17, 1}, MatMulCase{300, 40, 20}, MatMulCase{64, 7, 12, 2, 4, 1, 1}}) {
      SCOPED_TRACE(std::string(tname(type)) + " N=" + std::to_string(c.N));
      // The same random values, the second time rounded through `type`.
      auto build = [&](bool rounded) {
        return [&, rounded](Fixture& f) {
          Tensor* a = f.rand(type, {c.K, c.M, c.A2, c.A3}, -1, 1, "a");
          Tensor* b = f.rand(DType::F32, {c.K, c.N, c.B2, c.B3}, -1, 1, "b");
          if (rounded) {
            float* x = static_cast<float*>(b->data);
            for (int64_t i = 0; i < b->nelements(); ++i)
              x[i] = type == DType::F16 ? fp16_to_fp32(fp32_to_fp16(x[i])) : bf16_to_fp32(fp32_to_bf16(x[i]));
          }
          Tensor* r = mul_mat(f.g, a, b);
          f.output(r);
          return r;
        };
      };
      const std::vector<double> ref = eval(build(true), 31, reference());
      const std::vector<double> abs_ref = eval(build(true), 31, reference(), true);
      const std::vector<double> unrounded = eval(build(false), 31, reference());
      for (Isa isa : all_isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        const std::vector<double> got = eval(build(false), 31, cpu_backend(isa, 2));
        check_matmul(got, ref, abs_ref);
      }
      // The rounding is visible: the unrounded product is another function.
      double diff = 0;
      for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::fabs(ref[i] - unrounded[i]) / abs_ref[i]);
      EXPECT_GT(diff, 1e-5);
    }
}

// gelu of the given values on backend b.
std::vector<double> gelu_of(const std::vector<float>& x, Backend& b) {
  Fixture f(1);
  Tensor* in = f.leaf(DType::F32, {static_cast<int64_t>(x.size()), 1, 1, 1});
  std::memcpy(in->data, x.data(), x.size() * sizeof(float));
  Tensor* r = gelu(f.g, in);
  f.output(r);
  f.plan();
  f.run(b);
  return values(*r);
}

// The reference backend against values worked out to 20 digits (mpmath,
// 120-digit arithmetic; 1e-3 is the float nearest it). The tanh form of
// tensor.h computed in double gives the same to 1e-8 (at -5, 1 + tanh u is
// 9.2e-8: it keeps 9 digits), except at -10 where all of 1 + tanh u (2.4e-38)
// is lost to cancellation, which is why the kernels compute x / (1 + e^-2u).
// The CPU backend's float kernels are held to (1 + 2|u|) * 3e-7 relative: u
// is computed in float (a few roundings, and ggml's float 0.044715 differs
// from the decimal by 4.9e-8), and for negative x the result's relative error
// is 2|u| times u's.
TEST(Ops, GeluAtChosenPoints) {
  const F32Kernels exact;
  struct Point {
    float x;
    double y;
  };
  const Point points[] = {{0.0f, 0.0},
                          {1.0f, 0.84119199060827670478},
                          {-1.0f, -0.15880800939172329522},
                          {3.0f, 2.9963626079182269812},
                          {-3.0f, -0.0036373920817730188378},
                          {10.0f, 10.0},
                          {-10.0f, -1.2040923482098059937e-37},
                          {1e-3f, 0.00050039896600020508968},
                          {-5.0f, -2.2917961966295060456e-7}};
  const double c = std::sqrt(2.0 / std::numbers::pi);
  std::vector<float> x;
  for (const Point& p : points) {
    const double xd = p.x, u = c * (xd + 0.044715 * xd * xd * xd);
    const double tanh_form = 0.5 * xd * (1.0 + std::tanh(u));
    if (p.x == -10.0f) {
      EXPECT_EQ(tanh_form, 0.0);
    } else {
      EXPECT_NEAR(tanh_form, p.y, 1e-8 * std::fabs(p.y)) << "x = " << p.x;
    }
    x.push_back(p.x);
  }
  const std::vector<double> ref = gelu_of(x, reference());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(ref[i], points[i].y, 1e-6 * std::fabs(points[i].y)) << "reference gelu(" << x[i] << ")";
  for (Isa isa : all_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    const std::vector<double> got = gelu_of(x, cpu_backend(isa, 1));
    for (size_t i = 0; i < x.size(); ++i) {
      const double xd = x[i], u = c * (xd + 0.044715 * xd * xd * xd);
      const double bound = (1 + 2 * std::fabs(u)) * 3e-7 * std::fabs(points[i].y);
      EXPECT_NEAR(got[i], points[i].y, bound) << "gelu(" << x[i] << ")";
    }
  }
}

// Far from 0 gelu is x or 0, never NaN: through every vector table (87
// elements: the last 7 go through the scalar tail of the SIMD loops) and the
// reference backend, whose double exponential overflows later: it gives float
// denormals down to x = -10.9.
TEST(Ops, GeluSaturates) {
  const float big = std::numeric_limits<float>::max(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> pos = {inf, big, 1e30f, 3e12f, 1e4f, 120.0f, 20.5f, 12.0f};
  std::vector<float> x;
  for (int rep = 0; rep < 5; ++rep)
    for (float p : pos) {
      x.push_back(p);
      x.push_back(-p);
    }
  for (float e : {inf, -inf, -big, -10.5f, -10.07f, 1e4f, -120.0f}) x.push_back(e);
  const auto expect = [&](const std::vector<double>& y, const char* what, double tiny = 0) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i] > 0) {
        EXPECT_EQ(y[i], x[i]) << what << ": gelu(" << x[i] << ")";
      } else {
        EXPECT_LE(std::fabs(y[i]), tiny) << what << ": gelu(" << x[i] << ")";
      }
    }
  };
  for (Isa isa : all_isas()) {
    std::vector<float> y(x.size());
    cpu::vec_ops(isa).gelu(static_cast<int64_t>(x.size()), y.data(), x.data());
    expect(std::vector<double>(y.begin(), y.end()), cpu::isa_name(isa));
    expect(gelu_of(x, cpu_backend(isa, 3)), cpu::isa_name(isa));
  }
  expect(gelu_of(x, reference()), "reference", 1e-37);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Isa isa : all_isas()) {
    std::vector<float> xn(19, nan), yn(19);
    cpu::vec_ops(isa).gelu(19, yn.data(), xn.data());
    for (float e : yn) EXPECT_TRUE(std::isnan(e)) << cpu::isa_name(isa) << ": NaN stays NaN";
  }
}

// ggml's CPU GELU: x rounded to F16, looked up in a table of the tanh form
// computed in float (1 + 0.044715 x^2 as one fma, as ggml's compiler
// contracts it) and rounded to F16; 0 from -10 down, x from 10 up. Every F16
// input and random floats, on every instruction set, bit for bit; and the op
// (the default, rounding on) within F16 rounding of the exact reference.
// Checked outside the repository against llama.cpp 0c1e570's gelu on all
// 65,536 F16 inputs: equal (the same expression without the fma differs at 1).
TEST(Ops, GeluAsGgmlTable) {
  auto expected = [](float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float h = fp16_to_fp32(fp32_to_fp16(x));
    const float c = 0.79788456080286535588f, a = 0.044715f;
    return fp16_to_fp32(fp32_to_fp16(0.5f * h * (1.0f + std::tanh(c * h * std::fma(a * h, h, 1.0f)))));
  };
  std::vector<float> x;
  for (uint32_t i = 0; i < 65536; ++i) x.push_back(fp16_to_fp32(static_cast<uint16_t>(i)));
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-12, 12);
  for (int i = 0; i < 10007; ++i) x.push_back(u(rng));
  for (Isa isa : all_isas()) {
    std::vector<float> y(x.size());
    cpu::vec_ops(isa).gelu_f16(static_cast<int64_t>(x.size()), y.data(), x.data());
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = expected(x[i]);
      if (!(std::isnan(want) ? std::isnan(y[i]) : std::memcmp(&want, &y[i], sizeof want) == 0) && bad++ < 5)
        ADD_FAILURE() << cpu::isa_name(isa) << ": gelu(" << x[i] << ") = " << y[i] << ", want " << want;
    }
    EXPECT_EQ(bad, 0u) << cpu::isa_name(isa);
  }
  const Build build = [](Fixture& f) {
    Tensor* r = gelu(f.g, f.rand(DType::F32, {257, 4, 1, 1}, -12, 12));
    f.output(r);
    return r;
  };
  const std::vector<double> ref = eval(build, 1, reference());
  for (Isa isa : all_isas()) {
    const std::vector<double> got = eval(build, 1, cpu_backend(isa, 2));
    EXPECT_LE(nmse(got, ref), 1e-6) << cpu::isa_name(isa);
    EXPECT_GT(nmse(got, ref), 1e-12) << cpu::isa_name(isa) << ": the table is in use";
  }
}

// A causal mask [kv, rows] with -inf above the diagonal (offset by kv - rows),
// random values elsewhere, and optionally a fully masked row.
Tensor* causal_mask(Fixture& f, int64_t kv, int64_t rows, bool full_row) {
  Tensor* m = f.rand(DType::F32, {kv, rows, 1, 1}, -1, 1, "mask");
  float* p = static_cast<float*>(m->data);
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t i = 0; i < kv; ++i)
      if (i > j + (kv - rows) || (full_row && j == 1)) p[j * kv + i] = -INFINITY;
  return m;
}

// The CPU's softmax stops its exponentials at a row's last entry above -inf
// (rounded up to 64 entries): the rows must equal those computed over the
// whole row bit for bit. A mask of -FLT_MAX where the causal mask has -inf
// gives the same exact zeros (exp underflows to 0) without the shortcut, on
// every instruction set; row lengths around the 64-entry blocks and the
// kernels' 8 and 16 lanes, scores up to +-30.
TEST(Ops, SoftMaxCausalRowsEqualWholeRows) {
  for (int64_t kv : {63, 64, 65, 130, 200, 513}) {
    SCOPED_TRACE("kv=" + std::to_string(kv));
    const int64_t rows = std::min<int64_t>(kv, 70);
    auto build = [&](bool infinite) {
      return [=](Fixture& f) {
        Tensor* m = causal_mask(f, kv, rows, false);
        if (!infinite) {
          float* p = static_cast<float*>(m->data);
          for (int64_t i = 0; i < kv * rows; ++i)
            if (p[i] == -INFINITY) p[i] = -std::numeric_limits<float>::max();
        }
        Tensor* r = soft_max(f.g, f.rand(DType::F32, {kv, rows, 2, 1}, -30, 30), m, 0.7f);
        f.output(r);
        return r;
      };
    };
    for (Isa isa : all_isas()) {
      SCOPED_TRACE(cpu::isa_name(isa));
      const std::vector<double> cut = eval(build(true), 1, cpu_backend(isa, 2));
      const std::vector<double> whole = eval(build(false), 1, cpu_backend(isa, 2));
      ASSERT_EQ(cut.size(), whole.size());
      size_t bad = 0, zeros = 0;
      for (size_t i = 0; i < cut.size(); ++i) {
        bad += !same_bits(cut[i], whole[i]);
        zeros += cut[i] == 0.0;
      }
      EXPECT_EQ(bad, 0u);
      EXPECT_GT(zeros, 0u);  // the masked entries are there, and zero
    }
  }
}

// A text token's four positions (p, p, p, 0, as llama.cpp lays them out for
// Qwen3.5) make multi-section rope NeoX rope, bit for bit, on the reference
// and on the CPU: every pair turns by p, with the angle of its index.
TEST(Ops, RopeMultiOfTextPositionsIsNeoX) {
  const std::vector<int32_t> p = {0, 1, 7, 100, 2047};
  std::vector<int32_t> p4(p);
  for (int k = 1; k < 4; ++k)
    for (int32_t x : p) p4.push_back(k < 3 ? x : 0);
  for (RopeMode mode : {RopeMode::IMRope, RopeMode::MRope}) {
    const auto build = [&](bool multi) {
      return [=](Fixture& f) {
        Tensor* x = f.rand(DType::F32, {64, 3, 5, 1}, -2, 2);
        Tensor* r = multi ? rope_multi(f.g, x, f.ints(p4), 64, {11, 11, 10, 0}, mode, 1e7f, 1.0f)
                          : rope(f.g, x, f.ints(p), 64, RopeMode::NeoX, 1e7f, 1.0f);
        f.output(r);
        return r;
      };
    };
    for (Backend* b : {&reference(), &cpu_backend(Isa::Scalar, 2)}) {
      const std::vector<double> multi = eval(build(true), 3, *b), neox = eval(build(false), 3, *b);
      ASSERT_EQ(multi.size(), neox.size());
      size_t bad = 0;
      for (size_t i = 0; i < multi.size(); ++i) bad += !same_bits(multi[i], neox[i]);
      EXPECT_EQ(bad, 0u) << b->name();
    }
  }
}

// The gated delta rule on numbers worked out by hand, pinning ggml's
// conventions: S = 2, one head, one token, state S[i, j] at element (i, j)
// (key i, value j), the output scaled by 1/sqrt(2), the final state after
// the outputs. S0 = [[1, 2], [3, 4]] (S[0, 1] = 2), g = ln 0.5, beta = 0.5,
// k = (1, 0), v = (10, 20), q = (0, 1): decayed S = [[0.5, 1], [1.5, 2]];
// S^T k = (0.5, 1); d = 0.5 ((10, 20) - (0.5, 1)) = (4.75, 9.5); S += k d^T
// = [[5.25, 10.5], [1.5, 2]]; o = S^T q / sqrt 2 = (1.5, 2) / sqrt 2. With
// a per-key gate (ln 0.5, ln 1) only key 0's row decays: [[0.5, 1], [3, 4]].
TEST(Ops, GatedDeltaNetOnAWorkedExample) {
  for (bool per_key : {false, true}) {
    const auto build = [&](Fixture& f) {
      const auto put = [&](Shape4 ne, std::vector<float> v) {
        Tensor* t = f.leaf(DType::F32, ne);
        std::memcpy(t->data, v.data(), v.size() * sizeof(float));
        return t;
      };
      Tensor* q = put({2, 1, 1, 1}, {0, 1});
      Tensor* k = put({2, 1, 1, 1}, {1, 0});
      Tensor* v = put({2, 1, 1, 1}, {10, 20});
      Tensor* g = per_key ? put({2, 1, 1, 1}, {std::log(0.5f), 0}) : put({1, 1, 1, 1}, {std::log(0.5f)});
      Tensor* beta = put({1, 1, 1, 1}, {0.5f});
      Tensor* s0 = put({2, 2, 1, 1}, {1, 3, 2, 4});  // element (i, j) at i + 2 j: S[0, 1] = 2
      Tensor* r = gated_delta_net(f.g, q, k, v, g, beta, s0);
      f.output(r);
      return r;
    };
    const double r2 = std::sqrt(2.0);
    // Outputs (j = 0, 1), then the state in the source's layout.
    const std::vector<double> want = per_key ? std::vector<double>{3 / r2, 4 / r2, 5.25, 3, 10.5, 4}
                                             : std::vector<double>{1.5 / r2, 2 / r2, 5.25, 1.5, 10.5, 2};
    for (Backend* b : {&reference(), &cpu_backend(Isa::Scalar, 1)}) {
      const std::vector<double> got = eval(build, 1, *b);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << b->name() << " element " << i;
    }
  }
}

// The order itself, on a row with a known answer (ties keep index order).
TEST(Ops, ArgSortOrdersAKnownRow) {
  Fixture f(1);
  Tensor* x = f.leaf(DType::F32, {6, 1, 1, 1});
  const float v[] = {0.1f, 0.7f, -2.0f, 0.7f, 3.0f, 0.0f};
  std::memcpy(x->data, v, sizeof v);
  Tensor* r = argsort_desc(f.g, x);
  f.output(r);
  f.plan();
  f.run(cpu_backend(Isa::Scalar, 1));
  EXPECT_EQ(values(*r), (std::vector<double>{4, 1, 3, 0, 5, 2}));
}

// NaN clamps to the upper bound, as in ggml.
TEST(Ops, ClampTakesNanToTheUpperBound) {
  Fixture f(1);
  Tensor* x = f.leaf(DType::F32, {2, 1, 1, 1});
  const float v[] = {std::numeric_limits<float>::quiet_NaN(), -5.0f};
  std::memcpy(x->data, v, sizeof v);
  Tensor* r = clamp(f.g, x, -1.0f, 2.0f);
  f.output(r);
  f.plan();
  for (Isa isa : all_isas()) {
    f.run(cpu_backend(isa, 1));
    EXPECT_EQ(values(*r), (std::vector<double>{2.0, -1.0}));
  }
}

TEST(Backend, RejectsBadIndices) {
  for (Isa isa : all_isas()) {
    Fixture f(1);
    Tensor* r = get_rows(f.g, f.rand(DType::F32, {4, 3, 1, 1}), f.ints({0, 3}));
    f.output(r);
    f.plan();
    EXPECT_THROW(cpu_backend(isa, 2).compute(f.g), Error);
  }
}

TEST(Backend, RejectsMissingData) {
  Fixture f(1);
  Tensor* r = silu(f.g, f.rand(DType::F32, {4, 3, 1, 1}));
  f.output(r);  // no memory plan applied
  EXPECT_THROW(cpu_backend(Isa::Scalar, 1).compute(f.g), Error);
}

TEST(Backend, Names) {
  EXPECT_EQ(reference().name(), "reference");
  auto b = make_cpu_backend(3);
  EXPECT_EQ(b->n_threads(), 3);
  EXPECT_EQ(b->name().rfind("cpu-", 0), 0u);
}

// =============================================================================
// The thread pool

TEST(ThreadPool, RunsAllThreadsAndBarriers) {
  for (int n : {1, 2, 3, 7}) {
    cpu::ThreadPool pool(n);
    std::vector<int> slots(n, 0);
    std::atomic<int> phase_errors{0};
    for (int rep = 0; rep < 50; ++rep) {
      std::atomic<int> arrived{0};
      pool.run([&](int ith) {
        slots[ith] += 1;
        arrived.fetch_add(1);
        pool.barrier();
        if (arrived.load() != n) phase_errors.fetch_add(1);
        pool.barrier();
      });
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(slots[i], 50);
    EXPECT_EQ(phase_errors.load(), 0);
  }
}

// =============================================================================
// SIMD kernels against the scalar ones, directly

// Floats over a wide range: normal values of all magnitudes, F16 subnormals,
// around F16's largest values, infinities, signed zeros.
std::vector<float> special_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::uniform_int_distribution<int> e(-30, 18);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.0f, 65520.0f, -65536.0f,
                            6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-40f, 3.0e38f, 1.0f, -2.5f};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = i % 5 == 4 ? specials[(i / 5) % (sizeof specials / sizeof *specials)] : std::ldexp(u(rng), e(rng));
  return v;
}

TEST(Scalar, F16TableIsExact) {
  const float* t = cpu::fp16_table();
  size_t bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) bad += !same_bits(t[i], fp16_to_fp32(static_cast<uint16_t>(i)));
  EXPECT_EQ(bad, 0u);
}

TEST(Simd, ConversionsMatchScalarExactly) {
  const cpu::VecOps& s = cpu::vec_ops(Isa::Scalar);
  for (Isa isa : simd_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    const cpu::VecOps& v = cpu::vec_ops(isa);
    for (size_t n : {0, 1, 7, 8, 15, 16, 17, 31, 33, 1000}) {
      const std::vector<float> x = special_floats(n, static_cast<uint32_t>(n));
      for (DType t : {DType::F16, DType::BF16}) {
        const int ti = static_cast<int>(t);
        std::vector<uint16_t> hs(n + 1, 0x1234), hv(n + 1, 0x1234);
        s.from_float[ti](x.data(), hs.data(), static_cast<int64_t>(n));
        v.from_float[ti](x.data(), hv.data(), static_cast<int64_t>(n));
        EXPECT_EQ(hs, hv) << tname(t) << " from float, n=" << n;
        std::vector<float> fs(n + 1, 7.0f), fv(n + 1, 7.0f);
        s.to_float[ti](hs.data(), fs.data(), static_cast<int64_t>(n));
        v.to_float[ti](hs.data(), fv.data(), static_cast<int64_t>(n));
        EXPECT_EQ(0, std::memcmp(fs.data(), fv.data(), (n + 1) * sizeof(float))) << tname(t) << " to float, n=" << n;
      }
    }
    // Every F16 and BF16 bit pattern.
    std::vector<uint16_t> all(65536);
    for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    for (DType t : {DType::F16, DType::BF16}) {
      std::vector<float> fs(65536), fv(65536);
      s.to_float[static_cast<int>(t)](all.data(), fs.data(), 65536);
      v.to_float[static_cast<int>(t)](all.data(), fv.data(), 65536);
      size_t bad = 0;
      for (int i = 0; i < 65536; ++i) bad += !same_bits(fs[i], fv[i]);
      EXPECT_EQ(bad, 0u) << tname(t);
    }
  }
}

TEST(Simd, ArithmeticMatchesScalarExactly) {
  const cpu::VecOps& s = cpu::vec_ops(Isa::Scalar);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-100, 100);
  for (Isa isa : simd_isas()) {
    const cpu::VecOps& v = cpu::vec_ops(isa);
    for (int64_t n : {0, 1, 5, 8, 9, 31, 64, 1001}) {
      std::vector<float> x(n), y(n);
      for (auto& e : x) e = u(rng);
      for (auto& e : y) e = u(rng);
      std::vector<float> zs(n), zv(n);
      s.add(n, zs.data(), x.data(), y.data());
      v.add(n, zv.data(), x.data(), y.data());
      EXPECT_EQ(zs, zv);
      s.mul(n, zs.data(), x.data(), y.data());
      v.mul(n, zv.data(), x.data(), y.data());
      EXPECT_EQ(zs, zv);
      s.scale(n, zs.data(), x.data(), 0.37f);
      v.scale(n, zv.data(), x.data(), 0.37f);
      EXPECT_EQ(zs, zv);
      EXPECT_EQ(s.max(n, x.data()), v.max(n, x.data()));
    }
  }
}

// Softmax's first pass: the product rounded before the mask is added, as
// two passes (ggml's scale, then add) round it; a fused multiply-add would
// round once and differ in about half of these elements.
TEST(Simd, ScaleAddMaxRoundsTheProductFirst) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-100, 100);
  for (Isa isa : all_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    const cpu::VecOps& v = cpu::vec_ops(isa);
    for (int64_t n : {0, 1, 5, 16, 17, 31, 64, 1001}) {
      std::vector<float> x(n), m(n), want(n), got(n);
      for (auto& e : x) e = u(rng);
      for (auto& e : m) e = u(rng);
      for (const float* mask : {static_cast<const float*>(m.data()), static_cast<const float*>(nullptr)}) {
        volatile float product;
        float want_max = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; ++i) {
          product = x[i] * 0.37f;
          want[i] = mask ? product + mask[i] : product;
          want_max = std::max(want_max, want[i]);
        }
        EXPECT_EQ(v.scale_add_max(n, got.data(), x.data(), 0.37f, mask), want_max);
        EXPECT_EQ(got, want) << (mask ? "with a mask" : "without a mask");
      }
    }
  }
}

// The SIMD gelu against the scalar one: the bound on |simd - scalar| / |scalar|.
// The two round u = sqrt(2/pi) x (1 + 0.044715 x^2) differently (an fma in the
// SIMD one), so their u can be an ulp or two apart, and for negative x the
// result is about x e^2u: its relative error is twice u's absolute one. Two
// ulp of u, doubled, is at most 2^-21 |u| (2.1e-5 at u = -44, where the result
// underflows); 1e-6 covers the exponentials (a few ulp each) and the division.
// Seen (AVX2): at most 0.74 of the bound; 7.8e-6 at x = -8.98 (u = -33, one ulp apart).
// The absolute 1e-36 (in the callers) covers vexp overflowing a little early:
// scalar -3e-38 where SIMD gives -0.
double gelu_simd_rel(float x) {
  const double xd = x, u = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
  return 1e-6 + std::ldexp(std::fabs(u), -21);
}

TEST(Simd, TranscendentalsAndSumsMatchScalar) {
  const cpu::VecOps& s = cpu::vec_ops(Isa::Scalar);
  std::mt19937 rng(4);
  for (Isa isa : simd_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    const cpu::VecOps& v = cpu::vec_ops(isa);
    for (int64_t n : {1, 7, 8, 17, 64, 100, 4097}) {
      std::uniform_real_distribution<float> u(-90, 90);
      std::vector<float> x(n);
      for (auto& e : x) e = u(rng);
      if (n > 3) x[1] = -INFINITY, x[2] = -200.0f, x[3] = 88.0f;
      // silu: relative error per element (the SIMD exp is good to a few ulp;
      // it overflows a little early, at x > 88.37, so silu(x < -88.37) is 0
      // where the scalar one still gives ~1e-37).
      std::vector<float> ys(n), yv(n);
      s.silu(n, ys.data(), x.data());
      v.silu(n, yv.data(), x.data());
      for (int64_t i = 0; i < n; ++i)
        if (std::isfinite(x[i])) {
          EXPECT_NEAR(yv[i], ys[i], 2e-6 * std::fabs(ys[i]) + 1e-36) << "silu(" << x[i] << ")";
        }
      // gelu: relative error per element, the bound of gelu_simd_rel; at -inf
      // both give 0 (the clamp at kGeluLowest), not inf / inf.
      s.gelu(n, ys.data(), x.data());
      v.gelu(n, yv.data(), x.data());
      for (int64_t i = 0; i < n; ++i) {
        if (std::isfinite(x[i])) {
          EXPECT_NEAR(yv[i], ys[i], gelu_simd_rel(x[i]) * std::fabs(ys[i]) + 1e-36) << "gelu(" << x[i] << ")";
        } else {
          EXPECT_EQ(yv[i], 0.0f) << "gelu(" << x[i] << ")";
          EXPECT_EQ(ys[i], 0.0f) << "gelu(" << x[i] << ")";
        }
      }
      // exp(x - max) and its sum.
      const float m = s.max(n, x.data());
      const double ss = s.exp_sum(n, ys.data(), x.data(), m);
      const double sv = v.exp_sum(n, yv.data(), x.data(), m);
      EXPECT_NEAR(sv, ss, 1e-6 * ss);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(yv[i], ys[i], 2e-6 * ys[i] + 1e-37) << "exp(" << x[i] << " - " << m << ")";
        if (ys[i] == 0.0f) {
          EXPECT_EQ(yv[i], 0.0f);
        }
      }
      // sum of squares.
      std::vector<float> z(n);
      for (auto& e : z) e = u(rng) / 90.0f;
      const double qs = s.sum_sq(n, z.data()), qv = v.sum_sq(n, z.data());
      EXPECT_NEAR(qv, qs, 1e-6 * qs);
    }
  }
}

// The normalizer of a log-softmax in double (tools' log_sum_exp): each SIMD
// term within 2 ulp of libm's exp over all of [-708, 0], 0 below -708 and at
// -inf, NaN kept; sums of up to a Gemma 3 vocabulary against libm's terms
// summed in long double.
TEST(Simd, ExpSumF64MatchesScalar) {
  const cpu::VecOps& s = cpu::vec_ops(Isa::Scalar);
  std::mt19937 rng(12);
  for (Isa isa : simd_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    const cpu::VecOps& v = cpu::vec_ops(isa);
    const double m = 31.123456789;
    std::uniform_real_distribution<double> ud(-708.0, 0.0);
    double worst = 0;
    for (int k = 0; k < 200000; ++k) {
      const float x = static_cast<float>(m + (k < 100 ? -0.005 * k : ud(rng)));
      const double want = std::exp(static_cast<double>(x) - m), got = v.exp_sum_f64(1, &x, m);
      worst = std::max(worst, std::fabs(got - want) / want);
    }
    EXPECT_LE(worst, 4.5e-16);
    std::printf("[ %s ] exp_sum_f64 per term: worst relative error %.3g\n", cpu::isa_name(isa), worst);
    for (float x : {-INFINITY, -1000.0f, static_cast<float>(m - 708.5)}) {
      EXPECT_EQ(v.exp_sum_f64(1, &x, m), 0.0) << x;
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(v.exp_sum_f64(1, &nan, m)));
    for (int64_t n : {0, 1, 7, 8, 9, 17, 100, 4097, 262144}) {
      std::uniform_real_distribution<float> u(-40, 30);
      std::vector<float> x(n);
      for (auto& e : x) e = u(rng);
      const double mx = s.max(n, x.data());
      long double exact = 0;  // libm's terms, summed with 11 more bits than either kernel
      for (float e : x) exact += std::exp(static_cast<double>(e) - mx);
      const double want = static_cast<double>(exact), got = v.exp_sum_f64(n, x.data(), mx);
      const double scalar = s.exp_sum_f64(n, x.data(), mx);
      // Seen at n = 262,144 (AVX2): SIMD 1.3e-14, scalar 1.0e-13 (one running sum).
      EXPECT_NEAR(got, want, 3e-14 * want) << "n=" << n;
      EXPECT_NEAR(scalar, want, 3e-13 * want) << "n=" << n;
      if (n > 8) {
        x[n / 2] = nan;
        EXPECT_TRUE(std::isnan(v.exp_sum_f64(n, x.data(), mx))) << "n=" << n;
      }
    }
  }
}

// Floats in steps of 2^-12 over [-12, 12] (all of the range where gelu is
// neither x nor 0 in float), then a random spread to +-1e4: the SIMD gelu
// against the scalar one (gelu_simd_rel), and both against the reference in
// double: their worst relative errors are printed (over results above 1e-30,
// away from where the float exponentials overflow).
TEST(Simd, GeluMatchesScalarEverywhere) {
  std::vector<float> x;
  for (int k = -12 * 4096; k <= 12 * 4096; ++k) x.push_back(static_cast<float>(k) / 4096.0f);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1e4f, 1e4f);
  for (int i = 0; i < 4096; ++i) x.push_back(u(rng));
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<double> ref = gelu_of(x, reference());
  const auto worst_vs_ref = [&](const std::vector<float>& y) {
    double w = 0;
    for (int64_t i = 0; i < n; ++i)
      if (std::fabs(ref[i]) > 1e-30) w = std::max(w, std::fabs(y[i] - ref[i]) / std::fabs(ref[i]));
    return w;
  };
  const cpu::VecOps& s = cpu::vec_ops(Isa::Scalar);
  std::vector<float> ys(n);
  s.gelu(n, ys.data(), x.data());
  std::printf("[ info ] gelu scalar: worst relative error vs reference %.3g\n", worst_vs_ref(ys));
  for (Isa isa : simd_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    std::vector<float> yv(n);
    cpu::vec_ops(isa).gelu(n, yv.data(), x.data());
    double worst = 0, worst_of_bound = 0;
    size_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double err = std::fabs(static_cast<double>(yv[i]) - ys[i]);
      if (std::fabs(ys[i]) > 1e-30) {
        worst = std::max(worst, err / std::fabs(ys[i]));
        worst_of_bound = std::max(worst_of_bound, err / std::fabs(ys[i]) / gelu_simd_rel(x[i]));
      }
      if (!(err <= gelu_simd_rel(x[i]) * std::fabs(ys[i]) + 1e-36) && bad++ < 5)
        ADD_FAILURE() << "gelu(" << x[i] << "): " << yv[i] << " vs " << ys[i];
    }
    EXPECT_EQ(bad, 0u);
    std::printf("[ info ] gelu %s: worst relative error vs scalar %.3g (%.2f of the bound), vs reference %.3g\n",
                cpu::isa_name(isa), worst, worst_of_bound, worst_vs_ref(yv));
  }
}

TEST(Simd, DotKernelsMatchScalar) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  const cpu::GemmKernels& sk = cpu::gemm_kernels(Isa::Scalar);
  for (Isa isa : simd_isas()) {
    const cpu::GemmKernels& gk = cpu::gemm_kernels(isa);
    for (DType t : kFloatTypes)
      for (int64_t k : {1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129, 1000, 4099})
        for (int nc = 1; nc <= 4; ++nc) {
          SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " " + tname(t) + " k=" + std::to_string(k) +
                       " nc=" + std::to_string(nc));
          const size_t es = type_traits(t).block_bytes;
          std::vector<char> w(k * es);
          std::vector<float> wf(k), x(k * nc);
          for (int64_t i = 0; i < k; ++i) {
            Tensor probe;
            probe.type = t;
            probe.data = w.data();
            probe.nb = contiguous_strides(t, {k, 1, 1, 1});
            set_elem(probe, u(rng), i, 0, 0, 0);
            wf[i] = static_cast<float>(get_elem(probe, i, 0, 0, 0));
          }
          for (auto& e : x) e = u(rng);
          float os[4], ov[4];
          const int ti = static_cast<int>(t);
          sk.dot[ti](k, w.data(), x.data(), k * sizeof(float), nc, os);
          gk.dot[ti](k, w.data(), x.data(), k * sizeof(float), nc, ov);
          for (int c = 0; c < nc; ++c) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < k; ++i) {
              exact += static_cast<double>(wf[i]) * x[c * k + i];
              mag += std::fabs(static_cast<double>(wf[i]) * x[c * k + i]);
            }
            EXPECT_NEAR(ov[c], exact, 1e-6 * mag + 1e-30);
            EXPECT_NEAR(os[c], exact, 1e-6 * mag + 1e-30);
          }
        }
  }
}

TEST(Simd, MicroKernelMatchesNaive) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u(-1, 1);
  for (Isa isa : simd_isas()) {
    const cpu::GemmKernels& gk = cpu::gemm_kernels(isa);
    ASSERT_NE(gk.micro, nullptr);
    const int mr = gk.mr, nr = gk.nr;
    for (int64_t kc : {1, 5, 64, 256}) {
      std::vector<float> wp(kc * nr), bp(kc * mr);
      for (auto& e : wp) e = u(rng);
      for (auto& e : bp) e = u(rng);
      const int64_t ldc = nr + 3;
      std::vector<float> c(mr * ldc, 0.5f);
      gk.micro(kc, wp.data(), bp.data(), c.data(), ldc, false);
      std::vector<float> c2 = c;
      gk.micro(kc, wp.data(), bp.data(), c2.data(), ldc, true);
      for (int r = 0; r < mr; ++r) {
        for (int i = 0; i < nr; ++i) {
          double exact = 0, mag = 0;
          for (int64_t k = 0; k < kc; ++k) {
            exact += static_cast<double>(wp[k * nr + i]) * bp[k * mr + r];
            mag += std::fabs(static_cast<double>(wp[k * nr + i]) * bp[k * mr + r]);
          }
          EXPECT_NEAR(c[r * ldc + i], exact, 1e-6 * mag + 1e-30);
          EXPECT_EQ(c2[r * ldc + i], c[r * ldc + i] + c[r * ldc + i]);
        }
        for (int64_t i = nr; i < ldc; ++i) EXPECT_EQ(c[r * ldc + i], 0.5f) << "wrote past the tile";
      }
    }
  }
}

TEST(Simd, PackMatchesNaive) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-1, 1);
  for (Isa isa : simd_isas()) {
    const cpu::GemmKernels& gk = cpu::gemm_kernels(isa);
    for (DType t : kFloatTypes) {
      const int ti = static_cast<int>(t);
      ASSERT_NE(gk.pack[ti], nullptr);
      const int64_t k = 300, stride = k + 5;  // rows with gaps between them
      Tensor probe;
      probe.type = t;
      probe.ne = {stride, gk.nr, 1, 1};
      probe.nb = contiguous_strides(t, probe.ne);
      std::vector<char> data(probe.nb[2]);
      probe.data = data.data();
      for_each_index(probe, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) { set_elem(probe, u(rng), i0, i1, i2, i3); });
      for (int64_t nrows : {int64_t{1}, int64_t{5}, int64_t{gk.nr}})
        for (auto [k0, kc] : {std::pair<int64_t, int64_t>{0, 1}, {0, 8}, {3, 13}, {44, 256}}) {
          SCOPED_TRACE(std::string(tname(t)) + " rows=" + std::to_string(nrows) + " k0=" + std::to_string(k0) +
                       " kc=" + std::to_string(kc));
          std::vector<float> panel(kc * gk.nr + 1, 9.0f);
          gk.pack[ti](static_cast<const char*>(probe.data), probe.nb[1], nrows, k0, kc, panel.data());
          size_t bad = 0;
          for (int64_t kk = 0; kk < kc; ++kk)
            for (int64_t i = 0; i < gk.nr; ++i) {
              const double want = i < nrows ? get_elem(probe, k0 + kk, i, 0, 0) : 0.0;
              bad += panel[kk * gk.nr + i] != want;
            }
          EXPECT_EQ(bad, 0u);
          EXPECT_EQ(panel[kc * gk.nr], 9.0f) << "wrote past the panel";
        }
    }
  }
}

TEST(Simd, PackActivationsMatchesNaive) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1, 1);
  for (Isa isa : simd_isas()) {
    const cpu::GemmKernels& gk = cpu::gemm_kernels(isa);
    ASSERT_NE(gk.pack_act, nullptr);
    const int64_t k = 300, stride = k + 3;
    std::vector<float> rows(stride * gk.mr);
    for (auto& e : rows) e = u(rng);
    for (int64_t nrows = 1; nrows <= gk.mr; ++nrows)
      for (auto [k0, kc] : {std::pair<int64_t, int64_t>{0, 1}, {0, 8}, {3, 13}, {44, 256}}) {
        SCOPED_TRACE("rows=" + std::to_string(nrows) + " k0=" + std::to_string(k0) + " kc=" + std::to_string(kc));
        std::vector<float> panel(kc * gk.mr + 1, 9.0f);
        gk.pack_act(reinterpret_cast<const char*>(rows.data()), stride * sizeof(float), nrows, k0, kc, panel.data());
        size_t bad = 0;
        for (int64_t kk = 0; kk < kc; ++kk)
          for (int64_t r = 0; r < gk.mr; ++r)
            bad += panel[kk * gk.mr + r] != (r < nrows ? rows[r * stride + k0 + kk] : 0.0f);
        EXPECT_EQ(bad, 0u);
        EXPECT_EQ(panel[kc * gk.mr], 9.0f) << "wrote past the panel";
      }
  }
}

TEST(Simd, GemmPathIsTaken) {
  // The op table's shapes (test_backend_ops) exercise both paths: make sure
  // the switch is where they assume (N >= min_n takes the GEMM path on SIMD,
  // never on scalar).
  for (Isa isa : simd_isas()) {
    const int64_t min_n = cpu::gemm_kernels(isa).min_n;
    EXPECT_LE(min_n, 31) << "the op table's mul_mat cases need more activation rows to reach the GEMM path";
    Fixture f(1);
    Tensor* small = build_mul_mat(f, DType::F16, {64, 16, min_n - 1});
    Tensor* big = build_mul_mat(f, DType::F16, {64, 16, min_n});
    EXPECT_FALSE(cpu::matmul_uses_gemm(*small, isa));
    EXPECT_TRUE(cpu::matmul_uses_gemm(*big, isa));
    EXPECT_FALSE(cpu::matmul_uses_gemm(*big, Isa::Scalar));
    // One query row per head, 8 heads per K/V head: folded into 8 activation
    // rows, on the GEMM path; 2 heads per K/V head stay on the dot path.
    const int64_t mr = cpu::gemm_kernels(isa).mr;
    EXPECT_LE(mr, 12) << "8 folded heads must fill 2/3 of a micro-tile";
    EXPECT_TRUE(cpu::matmul_uses_gemm(*build_mul_mat(f, DType::F16, {64, 16, 1, 2, 16}), isa));
    EXPECT_FALSE(cpu::matmul_uses_gemm(*build_mul_mat(f, DType::F16, {64, 16, 1, 2, 4}), isa));
    // A quantized cache keeps its type's rule for 8 activation rows.
    Tensor* q8_cache = f.leaf(DType::Q8_0, {64, 16, 2, 1});
    EXPECT_EQ(cpu::matmul_uses_gemm(*mul_mat(f.g, q8_cache, f.rand(DType::F32, {64, 1, 16, 1})), isa),
              cpu::matmul_uses_gemm(*mul_mat(f.g, q8_cache, f.rand(DType::F32, {64, 8, 2, 1})), isa));
  }
}

}  // namespace
}  // namespace qlens
