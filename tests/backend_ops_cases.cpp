// The op case table (see backend_ops_cases.h): every op on odd sizes, batch
// dims, broadcasts, permuted / transposed / strided views and every weight
// type, plus small graphs of many ops (an attention + feed-forward block, a
// llama layer, a mixture-of-experts feed-forward), each case run on every
// backend against the reference backend.
//
// Tolerances (got = a backend, ref = the reference backend, which sums in
// double):
//  - exact (bitwise): get_rows, add, mul, scale, clamp, cpy, cont, argsort:
//    one rounding per element (or none) in every backend; sum_rows and div on
//    the CPU too (devices: NMSE 1e-7, float sums without shaderFloat64, and
//    Vulkan allows division 2.5 ulp).
//  - NMSE <= 1e-10 on the CPU, 1e-7 on devices: silu, gelu, rms_norm, rope,
//    soft_max (the device's exp, sin and cos are the driver's).
//  - mul_mat, mul_mat_id, per element: |got - ref| <= 1e-5 * sum_k |a_ik||b_kj|
//    (and NMSE <= 1e-7). F32 accumulation in blocks of 256 has a worst-case
//    error of about (256 + K/256) * 2^-24 of that sum (2e-5 at K = 8192);
//    random data sits far below it. Every weight type is compared with its
//    exact dequantization and F32 activations (the CPU without ggml's
//    roundings, which test_ops.cpp tests), except on the CPU's dot path for
//    quantized weights, which takes 8-bit activations (ggml's arithmetic):
//    there the bound adds what that rounding can cost (quantized_activations).
//  - graphs of many ops: NMSE 1e-7 (1e-6 where F16 roundings of computed
//    values, the KV cache's, may differ by an ulp between backends; 2e-3 on
//    the CPU where quantized weights' products take 8-bit activations).
//  - Bound (backend_ops_cases.h) says what each field asks.
#include "backend_ops_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "backend/cpu/delta_net.h"
#include "backend/cpu/matmul.h"
#include "qlens/types.h"
#ifdef QLENS_VULKAN
#include "backend/vulkan/vk_weight_types.h"
#endif

namespace qlens::opcases {

// ---- leaves

CaseGraph::CaseGraph(uint32_t seed, Backend* device, Values values, bool all_in_device, CaseMemo* memo)
    : rng_(seed), device_(device), values_(values), all_in_device_(all_in_device), memo_(memo) {}

// The case's next n values: drawn, or what its first build drew.
std::vector<float> CaseGraph::draw(int64_t n, const std::function<float()>& next) {
  const size_t index = draws_++;
  if (memo_ && index < memo_->draws.size()) return memo_->draws[index];
  std::vector<float> v(static_cast<size_t>(n));
  if (values_ != Values::Shapes)
    for (float& x : v) x = next();
  if (memo_ && index == memo_->draws.size()) memo_->draws.push_back(v);
  return v;
}

std::vector<float> CaseGraph::uniform_values(int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  return draw(n, [&] { return u(rng_); });
}

std::vector<float> CaseGraph::normal_values(int64_t n, float sigma) {
  std::normal_distribution<float> d(0.0f, sigma);
  return draw(n, [&] { return d(rng_); });
}

Tensor* CaseGraph::uniform(DType type, Shape ne, float lo, float hi, Mem mem) {
  return leaf(type, ne, uniform_values(ne[0] * ne[1] * ne[2] * ne[3], lo, hi), mem);
}

Tensor* CaseGraph::normal(DType type, Shape ne, float sigma, Mem mem) {
  return leaf(type, ne, normal_values(ne[0] * ne[1] * ne[2] * ne[3], sigma), mem);
}

// What a leaf holds in the mode other than Drawn, from its drawn bytes: the
// values the backends see (rounded to the type) made positive, a quantized
// leaf as F32 (|x| is not on its grid). Sets type to the leaf's.
std::vector<char> CaseGraph::derive(DType& type, Shape ne, const std::vector<char>& drawn) const {
  const TypeTraits& tt = type_traits(type);
  const int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
  std::vector<float> seen(static_cast<size_t>(n));
  tt.to_float(drawn.data(), seen.data(), n);
  for (float& x : seen) x = std::fabs(x);
  if (values_ == Values::ActivationSteps && !tt.is_quantized && ne[0] > 0)
    for (size_t row = 0; row < seen.size(); row += static_cast<size_t>(ne[0])) {
      const auto first = seen.begin() + static_cast<std::ptrdiff_t>(row), last = first + ne[0];
      std::fill(first, last, *std::max_element(first, last) / 200.0f);
    }
  if (tt.is_quantized) type = DType::F32;
  std::vector<char> bytes(row_bytes(type, n));
  type_traits(type).from_float(seen.data(), bytes.data(), n);
  return bytes;
}

// The leaf's bytes in the drawn values' type, converted once per case (the
// weights' quantization is the slow part), then derived per mode.
Tensor* CaseGraph::leaf(DType type, Shape ne, const std::vector<float>& values, Mem mem) {
  const std::string name = "leaf" + std::to_string(++count_);
  if (values_ == Values::Shapes) return g.new_tensor(type, ne, name);
  CaseMemo scratch;
  CaseMemo& memo = memo_ ? *memo_ : scratch;
  auto [drawn, fresh] = memo.leaves.try_emplace({count_, Values::Drawn});
  if (fresh) {
    const auto n = static_cast<int64_t>(values.size());
    drawn->second = {type, std::vector<char>(row_bytes(type, n))};
    const TypeTraits& tt = type_traits(type);
    if (tt.from_float) {
      tt.from_float(values.data(), drawn->second.second.data(), n);
    } else {  // a weight-only type (the i-quants): its quantizer, row by row
      tt.quantize(values.data(), drawn->second.second.data(), n / ne[0], ne[0], nullptr);
    }
  }
  auto it = drawn;
  if (values_ != Values::Drawn) {
    bool derived_fresh;
    std::tie(it, derived_fresh) = memo.leaves.try_emplace({count_, values_});
    if (derived_fresh) {
      DType t = type;
      std::vector<char> bytes = derive(t, ne, drawn->second.second);
      it->second = {t, std::move(bytes)};
    }
  }
  return place(g.new_tensor(it->second.first, ne, name), it->second.second, mem);
}

Tensor* CaseGraph::ints(const std::vector<int32_t>& values, Shape ne, Mem mem) {
  if (ne[0] == 0) ne[0] = static_cast<int64_t>(values.size());
  Tensor* t = g.new_tensor(DType::I32, ne, "idx" + std::to_string(++count_));
  if (static_cast<int64_t>(values.size()) != t->nelements())
    throw std::logic_error("ints: values do not fill the shape");
  if (values_ == Values::Shapes) return t;
  std::vector<char> bytes(values.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return place(t, bytes, mem);
}

Tensor* CaseGraph::place(Tensor* t, const std::vector<char>& bytes, Mem mem) {
  if (device_ && (mem == Mem::Device || all_in_device_)) {
    auto& buf = buffers_.emplace_back(device_->alloc_buffer(bytes.size()));
    t->buffer = buf.get();
    t->data = buf->base();
    tensor_write(*t, bytes.data(), 0, bytes.size());
  } else {
    // 64-byte aligned, as the CPU's kernels find weights in a mapped file.
    auto& s = host_.emplace_back(bytes.size() + 64);
    char* p = s.data() + (64 - reinterpret_cast<uintptr_t>(s.data()) % 64) % 64;
    if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
    t->data = p;
  }
  return t;
}

namespace {

// ---- tolerances (see the top of the file)

constexpr double kDeviceNmse = 1e-7;
constexpr Bound kExact{.exact = true};
constexpr Bound nmse(double b) { return Bound{.nmse = b, .zeros = true}; }

Tolerance exact() { return {kExact, kExact}; }
Tolerance exact_on_cpu() { return {kExact, nmse(kDeviceNmse)}; }
Tolerance kernel() { return {nmse(1e-10), nmse(kDeviceNmse)}; }
// Vulkan's gelu gives -2e-37 where the reference's underflows to -0 (x near
// -10): no exact zeros asked of devices.
Tolerance gelu_tolerance() {
  Tolerance t = kernel();
  t.device.zeros = false;
  return t;
}
Tolerance matmul() {
  const Bound b{.nmse = kDeviceNmse, .zeros = true, .matmul = 1e-5};
  return {b, b};
}
// Products of weights of `type`: the CPU's dot products with quantized
// weights take activations rounded to 8 bits (Q8_0, Q8_1, Q8_K: ggml's
// arithmetic, ggml_rounding or not), which its bound then allows for.
Tolerance matmul_of(DType type) {
  Tolerance t = matmul();
  if (type_traits(type).is_quantized)
    t.cpu = Bound{.nmse = INFINITY, .zeros = true, .matmul = 1e-5, .quantized_activations = true};
  return t;
}
Tolerance graph_nmse(double b) { return {nmse(b), nmse(b)}; }
// A graph with quantized weights: on the CPU its products take 8-bit
// activations, in chains (gate, up, down): NMSE 2e-3 (seen: 5.4e-4).
Tolerance graph_nmse(double b, bool quantized_weights) { return {nmse(quantized_weights ? 2e-3 : b), nmse(b)}; }

// ---- names

std::string tname(DType t) { return std::string(type_name(t)); }

std::string shape(const Shape& ne) {
  std::ostringstream s;
  s << '{' << ne[0] << ',' << ne[1] << ',' << ne[2] << ',' << ne[3] << '}';
  return s.str();
}

template <class... T>
std::string cat(const T&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

// ---- types

constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

int64_t block_size(DType t) { return type_traits(t).block_size; }

// Every type weights can be quantized to, as qlens quantize takes them (a
// weighted quantizer in the type table, Q8_1 and Q8_K aside: activations'
// types): F32, F16, BF16, the legacy and K quants, IQ4_NL, IQ4_XS. (The rule
// is quantize.cpp's is_weight_target, which the library does not export.)
std::vector<DType> weight_types() {
  std::vector<DType> v;
  for (uint32_t id = 0; id < kDTypeCount; ++id)
    if (const TypeTraits* tt = find_type_traits(id); tt && tt->quantize && tt->to_float)
      if (const auto type = static_cast<DType>(id); type != DType::Q8_1 && type != DType::Q8_K) v.push_back(type);
  return v;
}

// Vulkan must run a weight type's cases where its shaders read the type
// (src/core/types.tsv's vulkan column); the CPU reads them all.
unsigned must_run_type(DType t) {
#ifdef QLENS_VULKAN
  for (const vulkan::WeightType& w : vulkan::kWeightTypes)
    if (w.type == t) return kCpu | kVulkan;
#endif
  (void)t;
  return kCpu;
}

// A case of the weight-type grids: Vulkan must run it where it reads the
// type; more CPU threads are tried with 3 only (an uneven split), the split
// not depending on the type (the float cases try 2, 3 and 7).
OpCase& weight_type_case(OpCase& oc, DType type) {
  oc.must_run = must_run_type(type);
  oc.cpu_threads = {3};
  return oc;
}

// The matmul cases' groups by weight family: three tests of similar length.
std::string family(DType t) {
  const int64_t bs = block_size(t);
  return bs == 1 ? "float" : bs < 256 ? "q32" : "q256";
}

// ---- the table

class Table {
 public:
  using One = std::function<Tensor*(CaseGraph&)>;

  OpCase& add(std::string op, std::string group, std::string name, Tolerance tol, Build build) {
    if (has(op, name)) throw std::logic_error("two op cases named " + op + " '" + name + "'");
    OpCase& c = cases.emplace_back();
    c.op = std::move(op);
    c.group = std::move(group);
    c.name = std::move(name);
    c.build = std::move(build);
    c.tol = tol;
    return c;
  }
  OpCase& add(std::string op, std::string group, std::string name, Tolerance tol, One one) {
    return add(std::move(op), std::move(group), std::move(name), tol,
               [one](CaseGraph& c) { return std::vector<Tensor*>{one(c)}; });
  }
  bool has(const std::string& op, const std::string& name) const {
    return std::any_of(cases.begin(), cases.end(), [&](const OpCase& c) { return c.op == op && c.name == name; });
  }

  std::vector<OpCase> cases;
};

// =============================================================================
// get_rows

// Rows of every weight type by index (token embeddings), and the batched
// form of the router (each token's probabilities of its top-k experts).
void get_rows_cases(Table& t) {
  for (DType type : kFloatTypes)
    for (int64_t k : {1, 7, 64, 129})
      t.add("get_rows", "rows", cat(tname(type), " a", shape({k, 10, 1, 1})), exact(), [=](CaseGraph& c) {
        return get_rows(c.g, c.uniform(type, {k, 10, 1, 1}), c.ints({3, 0, 9, 3, 5, 1, 8}));
      });
  for (DType type : weight_types())
    for (int64_t k : {1, 7, 33, 257, 32, 288, 256, 512}) {
      if (k % block_size(type) != 0) continue;
      OpCase& oc = t.add("get_rows", "rows", cat(tname(type), " a", shape({k, 11, 1, 1})), exact(), [=](CaseGraph& c) {
        return get_rows(c.g, c.normal(type, {k, 11, 1, 1}), c.ints({3, 0, 10, 3, 7}));
      });
      oc.must_run = must_run_type(type);
      if (k == 256)  // a 512-token batch of a 4096-row vocabulary
        oc.perf = [=](CaseGraph& c) {
          std::vector<int32_t> ids(512);
          for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 2654435761u % 4096);
          return std::vector<Tensor*>{get_rows(c.g, c.normal(type, {2048, 4096, 1, 1}), c.ints(ids))};
        };
    }
  for (DType type : kFloatTypes)  // probs [3, 8, 4] by ids [2, 4]
    t.add("get_rows", "batched", cat(tname(type), " a{3,8,4,1} ids{2,4,1,1}"), exact(), [=](CaseGraph& c) {
      return get_rows(c.g, c.uniform(type, {3, 8, 4, 1}), c.ints({7, 0, 3, 3, 1, 6, 0, 0}, {2, 4, 1, 1}));
    });
  // Indices [4, 3] as a view with gaps, at an offset, of a [7, 3] leaf.
  const std::vector<int32_t> idx = {9, 0, 3, 3, 1, 7, 10, 2, 5, 0, 4, 6, 6, 1, 2, 10, 0, 3, 8, 8, 8};
  for (DType type : weight_types())
    for (int64_t k : {1, 33, 32, 256}) {
      if (k % block_size(type) != 0) continue;
      t.add("get_rows", "batched", cat(tname(type), " a", shape({k, 11, 3, 1}), " ids view{4,3}"), exact(),
            [=](CaseGraph& c) {
              Tensor* a = c.normal(type, {k, 11, 3, 1});
              Tensor* rows = c.ints(idx, {7, 3, 1, 1});
              return get_rows(c.g, a, view(c.g, rows, {4, 3}, {rows->nb[1]}, sizeof(int32_t)));
            })
          .must_run = must_run_type(type);
    }
  // The router's form: each token's probabilities of its top-k experts.
  t.add("get_rows", "batched", "top-k probabilities E=8 U=2 N=37", kernel(), [](CaseGraph& c) {
    const int64_t E = 8, U = 2, N = 37;
    Tensor* probs = soft_max(c.g, c.normal(DType::F32, {E, N, 1, 1}, 2.0f), nullptr, 1.0f);
    Tensor* top = top_k(c.g, probs, U);
    return std::vector<Tensor*>{get_rows(c.g, reshape(c.g, probs, {1, E, N}), top), top};
  });
}

// =============================================================================
// mul_mat

struct MatMulShape {
  int64_t K, M, N;
  int64_t A2 = 1, B2 = 1, A3 = 1, B3 = 1;
};

std::string describe(DType type, const MatMulShape& s) {
  std::string name = cat(tname(type), " K=", s.K, " M=", s.M, " N=", s.N);
  if (s.A2 != 1 || s.B2 != 1 || s.A3 != 1 || s.B3 != 1)
    name += cat(" a", shape({s.K, s.M, s.A2, s.A3}), " b", shape({s.K, s.N, s.B2, s.B3}));
  return name;
}

// a [K, M, A2, A3] of `type` times b [K, N, B2, B3]; a drawn first.
Tensor* mul_mat_of(CaseGraph& c, DType type, const MatMulShape& s, bool normal = false) {
  const Shape na{s.K, s.M, s.A2, s.A3}, nb{s.K, s.N, s.B2, s.B3};
  Tensor* a = normal ? c.normal(type, na) : c.uniform(type, na);
  Tensor* b = normal ? c.normal(DType::F32, nb) : c.uniform(DType::F32, nb);
  return mul_mat(c.g, a, b);
}

Build mul_mat_build(DType type, MatMulShape s, bool normal = false) {
  return [=](CaseGraph& c) { return std::vector<Tensor*>{mul_mat_of(c, type, s, normal)}; };
}

void mul_mat_shape_cases(Table& t) {
  // Odd K (tails of vector loops), M around the 16-row panels, N on both
  // sides of the CPU's dot/GEMM switch and around its 6-row tiles.
  const std::pair<int64_t, int64_t> mn[] = {{1, 1}, {17, 3}, {33, 12}, {5, 13}, {65, 7}, {20, 65}};
  for (DType type : kFloatTypes)
    for (int64_t k : {1, 3, 7, 17, 63, 65, 127, 129, 257})
      for (auto [m, n] : mn)
        t.add("mul_mat", "shapes", describe(type, {k, m, n}), matmul(), mul_mat_build(type, {k, m, n})).seed =
            static_cast<uint32_t>(k * 1000 + m * 10 + n);
}

// Sizes past the CPU's blocking: several K blocks with a tail, more weight
// rows than a packed block, more activation rows than an inner block; long
// rows; empty products; activations with zero tails.
void mul_mat_size_cases(Table& t) {
  for (DType type : kFloatTypes)
    for (MatMulShape s : {MatMulShape{300, 130, 100}, MatMulShape{520, 40, 9}, MatMulShape{513, 257, 31}})
      t.add("mul_mat", "sizes", describe(type, s), matmul(), mul_mat_build(type, s)).seed = 7;
  // With fewer batches than threads the CPU packs the activations once into
  // shared scratch unless that would be too big; then each item packs its own.
  for (DType type : {DType::F32, DType::F16})
    for (MatMulShape s : {MatMulShape{300, 70, 20}, MatMulShape{40, 130, 33, 1, 2, 1, 1}}) {
      OpCase& oc =
          t.add("mul_mat", "sizes", describe(type, s) + " (CPU: private packing)", matmul(), mul_mat_build(type, s));
      oc.seed = 13;
      oc.cpu_setting = [] {
        const size_t saved = cpu::matmul_set_max_shared(0);
        return Restore([saved] { cpu::matmul_set_max_shared(saved); });
      };
    }
  for (DType type : {DType::F32, DType::F16})
    for (int64_t k : {4096, 8192})
      for (int64_t n : {1, 9})
        t.add("mul_mat", "sizes", describe(type, {k, 16, n}), matmul(), mul_mat_build(type, {k, 16, n})).seed = 11;
  // Empty sums give zeros; empty results compute nothing. Vulkan declines
  // empty operands (they bind no memory): the CPU computes them.
  for (MatMulShape s : {MatMulShape{0, 5, 3}, MatMulShape{0, 20, 30}, MatMulShape{8, 0, 4}, MatMulShape{8, 4, 0}})
    t.add("mul_mat", "sizes", describe(DType::F16, s), exact(), mul_mat_build(DType::F16, s)).must_run = kCpu;
  // Causal attention's probabilities: activation row j is zero past element
  // 6j, rows 0-4 throughout (whole activation panels of zeros at the end of a
  // K block, partial ones, panels with no nonzero at all; K = 300 spans two K
  // blocks). The CPU's GEMM stops each panel at its last nonzero element; the
  // products are still the reference's, and those of the zero rows exactly 0.
  for (DType type : kFloatTypes)
    t.add("mul_mat", "sizes", cat(tname(type), " K=300 M=40 N=50 a{300,40,2,1} b zero tails"), matmul(),
          [=](CaseGraph& c) {
            Tensor* a = c.uniform(type, {300, 40, 2, 1});
            std::vector<float> b = c.uniform_values(300 * 50 * 2, -1, 1);
            for (int64_t i2 = 0; i2 < 2; ++i2)
              for (int64_t j = 0; j < 50; ++j)
                for (int64_t k = j < 5 ? 0 : 6 * j + 1; k < 300; ++k) b[(i2 * 50 + j) * 300 + k] = 0.0f;
            return mul_mat(c.g, a, c.leaf(DType::F32, {300, 50, 2, 1}, b));
          })
        .seed = 31;
}

// Batches, and grouped-query attention: b has two, three ... times a's heads.
// With one activation row per head (generation) the CPU folds a K/V head's
// query heads into one product: 2, 4 and 8 heads per group take its dot
// path and (from 2/3 of a micro-tile) its GEMM path; with dim-3 batches too.
void mul_mat_broadcast_cases(Table& t) {
  const MatMulShape shapes[] = {
      {16, 9, 5, 2, 4, 1, 1},   {33, 17, 12, 2, 4, 1, 1}, {8, 5, 3, 1, 3, 2, 2},     {24, 20, 10, 1, 3, 2, 2},
      {64, 7, 1, 4, 8, 1, 1},   {64, 70, 20, 4, 8, 1, 1}, {64, 37, 1, 2, 16, 1, 1},  {256, 45, 1, 1, 4, 1, 1},
      {40, 19, 1, 3, 24, 2, 2}, {96, 50, 1, 2, 8, 1, 3},  {130, 33, 1, 1, 12, 1, 1},
  };
  for (DType type : kFloatTypes)
    for (const MatMulShape& s : shapes)
      t.add("mul_mat", "broadcast", describe(type, s), matmul(), mul_mat_build(type, s)).seed = 3;
}

// Non-contiguous operands as attention has them.
void mul_mat_view_cases(Table& t) {
  for (DType type : kFloatTypes)
    for (int64_t n : {1, 5, 12, 40}) {
      const std::string ty = tname(type), nn = cat(" N=", n);
      // b permuted (queries as attention sees them: [D, N, H] from [D, H, N]).
      t.add("mul_mat", "views", ty + nn + " a{32,24,3,1} b permuted", matmul(), [=](CaseGraph& c) {
         Tensor* a = c.uniform(type, {32, 24, 3, 1});
         return mul_mat(c.g, a, permute(c.g, c.uniform(DType::F32, {32, 3, n, 1}), 0, 2, 1, 3));
       }).seed = 21;
      // b transposed: elements of its rows are strided.
      t.add("mul_mat", "views", ty + nn + " a{19,18,1,1} b transposed", matmul(), [=](CaseGraph& c) {
         Tensor* a = c.uniform(type, {19, 18, 1, 1});
         return mul_mat(c.g, a, transpose(c.g, c.uniform(DType::F32, {n, 19, 1, 1})));
       }).seed = 22;
      // a transposed (strided weight rows; Vulkan's kernels read whole rows).
      OpCase& strided =
          t.add("mul_mat", "views", ty + nn + " a transposed{21,35} b{35,N}", matmul(), [=](CaseGraph& c) {
            Tensor* at = c.uniform(type, {21, 35, 1, 1});
            return mul_mat(c.g, transpose(c.g, at), c.uniform(DType::F32, {35, n, 1, 1}));
          });
      strided.seed = 23;
      strided.must_run = kCpu;
      // a a permuted view of a KV cache [D, H_kv, ctx] -> [D, n_kv, H_kv], with
      // GQA broadcast to 2 and 8 query heads per K/V head.
      for (int64_t group : {2, 8})
        t.add("mul_mat", "views", ty + nn + cat(" KV cache view, ", group, " heads per K/V head"), matmul(),
              [=](CaseGraph& c) {
                Tensor* cache = c.uniform(type, {16, 2, 50, 1});
                Tensor* k = view(c.g, cache, {16, 2, 37}, {cache->nb[1], cache->nb[2]}, 0);
                Tensor* q = c.uniform(DType::F32, {16, 2 * group, n, 1});
                return mul_mat(c.g, permute(c.g, k, 0, 2, 1, 3), permute(c.g, q, 0, 2, 1, 3));
              })
            .seed = 24;
    }
}

// Every weight type on a grid of shapes: N <= 8 takes Vulkan's matrix-vector
// path, N > 8 its tiled one (odd M and N at the tile edges); long rows, where
// the float sums' rounding grows with K; broadcast over dims 2 and 3.
void mul_mat_type_cases(Table& t) {
  for (DType type : weight_types()) {
    const int64_t bs = block_size(type);
    const std::string group = "types_" + family(type);
    const std::vector<int64_t> ks = bs == 1    ? std::vector<int64_t>{1, 7, 33, 257}
                                    : bs < 256 ? std::vector<int64_t>{bs, 3 * bs, 9 * bs}
                                               : std::vector<int64_t>{bs, 2 * bs};
    for (int64_t k : ks)
      for (int64_t m : {1, 3, 71})
        for (int64_t n : {1, 2, 8, 9, 33, 130}) {
          if (m == 71 && k > 100 && n > 33) continue;  // keep the reference quick
          const std::string name = describe(type, {k, m, n});
          if (t.has("mul_mat", name)) continue;  // among the shapes above (K = 1, 7, 257, M = N = 1)
          OpCase& oc = weight_type_case(
              t.add("mul_mat", group, name, matmul_of(type), mul_mat_build(type, {k, m, n}, true)), type);
          // Generation's and a prompt's products of a 1.1B llama (dim 2048, FFN 5632).
          if (k == ks[0] && m == 71 && n == 1) oc.perf = mul_mat_build(type, {2048, 5632, 1}, true);
          if (k == ks[0] && m == 71 && n == 130) oc.perf = mul_mat_build(type, {2048, 2048, 512}, true);
        }
    weight_type_case(t.add("mul_mat", group, describe(type, {4096, 67, 12}), matmul_of(type),
                           mul_mat_build(type, {4096, 67, 12}, true)),
                     type);
    const int64_t kb = std::max<int64_t>(64, bs);
    for (int64_t n : {3, 40})
      weight_type_case(t.add("mul_mat", group, describe(type, {kb, 5, n, 2, 6, 1, 2}), matmul_of(type),
                             mul_mat_build(type, {kb, 5, n, 2, 6, 1, 2}, true)),
                       type);
  }
}

// =============================================================================
// mul_mat_id

// Expert choices of N tokens as an argsort's rows [E, N]: each row a
// permutation of the experts, of which an expert-id view takes the first U.
// Skewed: expert 0 leads most rows (so that it gets more than a column tile
// of pairs where N is large), and expert E - 1 comes last (unused while U < E).
std::vector<int32_t> expert_rows(int64_t E, int64_t N, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> rows;
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int32_t> perm;
    for (int32_t e = 0; e < E - 1; ++e) perm.push_back(e);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int32_t lead = t % 4 == 3 ? static_cast<int32_t>(t % (E - 1)) : 0;
    std::iter_swap(perm.begin(), std::find(perm.begin(), perm.end(), lead));
    perm.push_back(static_cast<int32_t>(E - 1));
    rows.insert(rows.end(), perm.begin(), perm.end());
  }
  return rows;
}

struct MoeShape {
  int64_t E, U, b1, N;  // experts, slots per token, activation rows per token (1 or U), tokens
};

// as [K, M, E] times b [K, b1, N] for the first U of each row of an [E, N]
// I32 leaf (the strided view top_k makes).
Build mul_mat_id_build(DType type, int64_t K, int64_t M, MoeShape s) {
  return [=](CaseGraph& c) {
    Tensor* as = c.normal(type, {K, M, s.E, 1});
    Tensor* b = c.normal(DType::F32, {K, s.b1, s.N, 1});
    Tensor* rows = c.ints(expert_rows(s.E, s.N, 7), {s.E, s.N, 1, 1});
    return std::vector<Tensor*>{mul_mat_id(c.g, as, b, view(c.g, rows, {s.U, s.N}, {rows->nb[1]}, 0))};
  };
}

void mul_mat_id_cases(Table& t) {
  // Tokens routed to 2 of 5 experts (some experts get none), b shared by the
  // slots (gate/up) or one row per slot (down); N on both sides of the CPU's
  // dot/GEMM switch.
  for (DType type : kFloatTypes)
    for (int64_t n : {1, 5, 40})
      for (int64_t b1 : {1, 2})
        t.add("mul_mat_id", "float", cat(tname(type), " K=33 M=20 E=6 U=2 b1=", b1, " N=", n, " (5 experts used)"),
              matmul(),
              [=](CaseGraph& c) {
                Tensor* as = c.uniform(type, {33, 20, 6, 1});
                Tensor* b = c.uniform(DType::F32, {33, b1, n, 1});
                std::vector<int32_t> ids;
                for (int64_t tok = 0; tok < n; ++tok) {
                  const auto e0 = static_cast<int32_t>((tok * 7) % 5), e1 = static_cast<int32_t>((tok * 3 + 1) % 5);
                  ids.insert(ids.end(), {e0, e1 == e0 ? (e0 + 1) % 5 : e1});
                }
                return mul_mat_id(c.g, as, b, c.ints(ids, {2, n, 1, 1}));
              })
            .seed = static_cast<uint32_t>(n * 10 + b1);
  // Every weight type: U * N <= 8 takes Vulkan's matrix-vector path, else its
  // tiled one (expert 0 with more than 64 pairs at N = 130).
  const MoeShape shapes[] = {{4, 2, 1, 1}, {4, 2, 2, 3}, {8, 8, 8, 1}, {8, 3, 3, 40}, {4, 2, 1, 130}, {5, 1, 1, 130}};
  for (DType type : weight_types()) {
    const int64_t bs = block_size(type);
    for (int64_t k : bs == 1    ? std::vector<int64_t>{7, 64}
                     : bs < 256 ? std::vector<int64_t>{bs, 3 * bs}
                                : std::vector<int64_t>{bs})
      for (int64_t m : {3, 71})
        for (const MoeShape& s : shapes) {
          OpCase& oc = weight_type_case(
              t.add("mul_mat_id", family(type),
                    cat(tname(type), " K=", k, " M=", m, " E=", s.E, " U=", s.U, " b1=", s.b1, " N=", s.N),
                    matmul_of(type), mul_mat_id_build(type, k, m, s)),
              type);
          // 8 experts of an MoE model's FFN, 2 per token: generation, a prompt.
          if (k == bs && m == 71 && s.N == 1 && s.E == 4) oc.perf = mul_mat_id_build(type, 2048, 2048, {8, 2, 1, 1});
          if (k == bs && m == 71 && s.N == 130 && s.E == 4)
            oc.perf = mul_mat_id_build(type, 2048, 2048, {8, 2, 1, 512});
        }
  }
  // Activations and expert ids that are views with gaps, weights and ids in
  // device memory, the result of a permuted source.
  for (int64_t n : {2, 50})
    t.add("mul_mat_id", "q32", cat("Q8_0 K=64 M=40 E=6 U=3 N=", n, " b and ids views"), matmul_of(DType::Q8_0),
          [=](CaseGraph& c) {
            const int64_t K = 64, M = 40, E = 6, U = 3;
            Tensor* as = c.normal(DType::Q8_0, {K, M, E, 1}, 1.0f, Mem::Device);
            Tensor* x = c.normal(DType::F32, {K + 3, n, U, 1});
            Tensor* b = permute(c.g, view(c.g, x, {K, n, U}, {x->nb[1], x->nb[2]}, 2 * sizeof(float)), 0, 2, 1, 3);
            Tensor* rows = c.ints(expert_rows(E, n, 3), {E, n, 1, 1}, Mem::Device);
            return mul_mat_id(c.g, as, b, view(c.g, rows, {U, n}, {rows->nb[1]}, 2 * sizeof(int32_t)));
          });
}

// =============================================================================
// add, mul, div, scale

using Binary = Tensor* (*)(Graph&, Tensor*, Tensor*);

void binary_cases(Table& t, const std::string& op, Binary f) {
  const std::pair<Shape, Shape> uniform_shapes[] = {
      {{17, 5, 3, 2}, {17, 5, 3, 2}},   {{17, 5, 3, 2}, {17, 1, 1, 1}}, {{17, 5, 3, 2}, {1, 5, 1, 1}},
      {{17, 5, 3, 2}, {17, 5, 1, 2}},   {{64, 3, 1, 1}, {16, 3, 1, 1}}, {{1, 1, 1, 1}, {1, 1, 1, 1}},
      {{257, 4, 1, 1}, {257, 1, 1, 1}},
  };
  for (const auto& [na, nb] : uniform_shapes) {
    OpCase& oc = t.add(op, "", cat("a", shape(na), " b", shape(nb)), exact(), [=](CaseGraph& c) {
      Tensor* a = c.uniform(DType::F32, na);
      return f(c.g, a, c.uniform(DType::F32, nb));
    });
    if (na[0] == 257)  // a 512-token prompt's FFN activations, a row broadcast
      oc.perf = [=](CaseGraph& c) {
        Tensor* a = c.uniform(DType::F32, {5632, 512, 1, 1});
        return std::vector<Tensor*>{f(c.g, a, c.uniform(DType::F32, {5632, 1, 1, 1}))};
      };
  }
  const std::pair<Shape, Shape> normal_shapes[] = {
      {{1, 1, 1, 1}, {1, 1, 1, 1}}, {{33, 7, 3, 2}, {33, 1, 3, 1}}, {{257, 3, 1, 1}, {257, 1, 1, 1}},
      {{7, 5, 4, 1}, {1, 5, 1, 1}}, {{64, 9, 2, 3}, {64, 9, 2, 3}}, {{4096, 3, 1, 1}, {4096, 3, 1, 1}},
  };
  for (const auto& [na, nb] : normal_shapes) {
    if (t.has(op, cat("a", shape(na), " b", shape(nb)))) continue;  // among the shapes above
    t.add(op, "", cat("a", shape(na), " b", shape(nb)), exact(), [=](CaseGraph& c) {
      Tensor* a = c.normal(DType::F32, na);
      return f(c.g, a, c.normal(DType::F32, nb));
    });
  }
  t.add(op, "", "a permuted{9,5,4} b transposed{9,5}", exact(), [=](CaseGraph& c) {
    Tensor* a = permute(c.g, c.uniform(DType::F32, {9, 4, 5, 1}), 0, 2, 1, 3);
    return f(c.g, a, transpose(c.g, c.uniform(DType::F32, {5, 9, 1, 1})));
  });
  t.add(op, "", "a permuted{5,3,7} b transposed{5,3}", exact(), [=](CaseGraph& c) {
    Tensor* a = permute(c.g, c.normal(DType::F32, {5, 7, 3, 1}), 0, 2, 1, 3);
    return f(c.g, a, transpose(c.g, c.normal(DType::F32, {3, 5, 1, 1})));
  });
  t.add(op, "", "a transposed{33,6} b row{33}", exact(), [=](CaseGraph& c) {
    Tensor* a = transpose(c.g, c.uniform(DType::F32, {6, 33, 1, 1}));
    return f(c.g, a, c.uniform(DType::F32, {33, 1, 1, 1}));
  });
}

// Generation's element-wise ops have one row, which the CPU cuts into pieces
// of whole multiples of 64 elements for its threads: rows (one and two) of
// lengths around the pieces, with a broadcast b. Empty rows are no work (and
// cannot be broadcast: no add or mul of them).
void row_piece_cases(Table& t) {
  for (int64_t n : {0, 63, 64, 65, 130, 1000, 5639})
    for (int64_t rows : {1, 2}) {
      const Shape na{n, rows, 1, 1};
      const std::string name = cat("rows a", shape(na), " in pieces");
      if (n > 0) {
        t.add("add", "", name + " b row", exact(), [=](CaseGraph& c) {
          Tensor* a = c.uniform(DType::F32, na, -9, 9);
          return add(c.g, a, c.uniform(DType::F32, {n, 1, 1, 1}));
        });
        t.add("mul", "", name, exact(), [=](CaseGraph& c) {
          Tensor* a = c.uniform(DType::F32, na, -9, 9);
          return mul(c.g, a, c.uniform(DType::F32, na));
        });
      }
      // Empty rows: Vulkan declines them (as empty products).
      const unsigned must_run = n == 0 ? unsigned{kCpu} : kCpu | kVulkan;
      t.add("scale", "", name, exact(), [=](CaseGraph& c) {
         return scale(c.g, c.uniform(DType::F32, na, -9, 9), 0.3f);
       }).must_run = must_run;
      t.add("silu", "", name, kernel(), [=](CaseGraph& c) {
         return silu(c.g, c.uniform(DType::F32, na, -9, 9));
       }).must_run = must_run;
      t.add("gelu", "", name, gelu_tolerance(), [=](CaseGraph& c) {
         return gelu(c.g, c.uniform(DType::F32, na, -9, 9));
       }).must_run = must_run;
    }
}

// x [40, 9] (normal, sigma 3) seen as [13, 9] from element 8 on: rows with gaps.
Tensor* strided_view(CaseGraph& c) {
  Tensor* x = c.normal(DType::F32, {40, 9, 1, 1}, 3.0f);
  return view(c.g, x, {13, 9}, {40 * sizeof(float)}, 8 * sizeof(float));
}

constexpr Shape kNormalUnaryShapes[] = {{1, 1, 1, 1}, {257, 3, 1, 1}, {33, 7, 3, 2}};

void scale_cases(Table& t) {
  for (int64_t n : {1, 7, 33, 257}) {
    const float s = 0.125f * static_cast<float>(n);
    OpCase& oc = t.add("scale", "", cat("a{", n, ",3,2,1} by ", s), exact(), [=](CaseGraph& c) {
      return scale(c.g, c.uniform(DType::F32, {n, 3, 2, 1}, -10, 10), s);
    });
    if (n == 257)
      oc.perf = [=](CaseGraph& c) {
        return std::vector<Tensor*>{scale(c.g, c.uniform(DType::F32, {5632, 512, 1, 1}), s)};
      };
  }
  t.add("scale", "", "a transposed{9,5} by -3.7", exact(), [](CaseGraph& c) {
    return scale(c.g, transpose(c.g, c.uniform(DType::F32, {5, 9, 1, 1}, -10, 10)), -3.7f);
  });
  t.add("scale", "", "a strided view{13,9} by -0.37", exact(),
        [](CaseGraph& c) { return scale(c.g, strided_view(c), -0.37f); });
  for (const Shape& ne : kNormalUnaryShapes)
    t.add("scale", "", cat("a", shape(ne), " by 0.125"), exact(),
          [=](CaseGraph& c) { return scale(c.g, c.normal(DType::F32, ne, 4.0f), 0.125f); });
}

using Unary = Tensor* (*)(Graph&, Tensor*);

// silu and gelu: short rows and vector tails, the saturated ends of the
// exponential (x, and 0 from x = -10 for gelu), permuted and strided sources.
void activation_cases(Table& t, const std::string& op, Unary f) {
  const Tolerance tol = op == "gelu" ? gelu_tolerance() : kernel();
  for (int64_t n : {1, 7, 8, 33, 257})
    t.add(op, "", cat("a{", n, ",4,1,1} in [-12,12)"), tol, [=](CaseGraph& c) {
      return f(c.g, c.uniform(DType::F32, {n, 4, 1, 1}, -12, 12));
    });
  t.add(op, "", "a{64,3,1,1} in [-120,120)", tol, [=](CaseGraph& c) {
     return f(c.g, c.uniform(DType::F32, {64, 3, 1, 1}, -120, 120));
   }).perf = [=](CaseGraph& c) {
    return std::vector<Tensor*>{f(c.g, c.uniform(DType::F32, {5632, 512, 1, 1}, -5, 5))};
  };
  t.add(op, "", "a permuted{7,5,3} in [-5,5)", tol, [=](CaseGraph& c) {
    return f(c.g, permute(c.g, c.uniform(DType::F32, {7, 3, 5, 1}, -5, 5), 0, 2, 1, 3));
  });
  t.add(op, "", "a strided view{13,9} and its transpose", tol, [=](CaseGraph& c) {
    Tensor* v = strided_view(c);
    return std::vector<Tensor*>{f(c.g, v), f(c.g, transpose(c.g, v))};
  });
  for (const Shape& ne : kNormalUnaryShapes)
    t.add(op, "", cat("a", shape(ne), " sigma 4"), tol,
          [=](CaseGraph& c) { return f(c.g, c.normal(DType::F32, ne, 4.0f)); });
}

void rms_norm_cases(Table& t) {
  for (int64_t n : {1, 3, 17, 64, 257, 2048})
    for (float eps : {1e-5f, 1e-6f})
      t.add("rms_norm", "", cat("a{", n, ",5,2,1} eps=", eps), kernel(), [=](CaseGraph& c) {
        return rms_norm(c.g, c.uniform(DType::F32, {n, 5, 2, 1}, -3, 3), eps);
      });
  t.add("rms_norm", "", "a transposed{40,6} eps=1e-05", kernel(), [](CaseGraph& c) {
    return rms_norm(c.g, transpose(c.g, c.uniform(DType::F32, {6, 40, 1, 1})), 1e-5f);
  });
  for (Shape ne : {Shape{1, 1, 1, 1}, {7, 3, 1, 1}, {257, 5, 2, 1}, {4096, 3, 1, 1}, {33, 2, 3, 2}}) {
    const std::string name = cat("a", shape(ne), " eps=1e-05");
    if (t.has("rms_norm", name)) continue;  // among the sizes above
    OpCase& oc = t.add("rms_norm", "", name, kernel(),
                       [=](CaseGraph& c) { return rms_norm(c.g, c.normal(DType::F32, ne), 1e-5f); });
    if (ne[0] == 4096)
      oc.perf = [](CaseGraph& c) {
        return std::vector<Tensor*>{rms_norm(c.g, c.normal(DType::F32, {2048, 512, 1, 1}), 1e-5f)};
      };
  }
  t.add("rms_norm", "", "a transposed{37,6} eps=1e-06", kernel(), [](CaseGraph& c) {
    return rms_norm(c.g, transpose(c.g, c.normal(DType::F32, {6, 37, 1, 1})), 1e-6f);
  });
}

struct RopeParams {
  int n_dims;
  RopeMode mode;
  float base, scale;
};

std::string describe(const RopeParams& p) {
  return cat(" n_dims=", p.n_dims, p.mode == RopeMode::NeoX ? " neox" : " normal", " base=", p.base,
             " scale=", p.scale);
}

// Positions i * 97 + 3 for n tokens.
std::vector<int32_t> spread_positions(int64_t n) {
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i * 97 + 3);
  return pos;
}

// Normal and NeoX modes, partial rotation, base and scale as the model
// families have them, positions up to 4095; permuted sources.
void rope_cases(Table& t) {
  const std::pair<int64_t, RopeParams> cases[] = {
      {64, {64, RopeMode::Normal, 10000.0f, 1.0f}}, {64, {64, RopeMode::NeoX, 10000.0f, 1.0f}},
      {64, {32, RopeMode::Normal, 10000.0f, 1.0f}}, {64, {32, RopeMode::NeoX, 500000.0f, 0.25f}},
      {64, {8, RopeMode::NeoX, 10000.0f, 1.0f}},    {10, {6, RopeMode::Normal, 10000.0f, 0.5f}},
      {10, {6, RopeMode::NeoX, 1000.0f, 2.0f}},     {128, {128, RopeMode::NeoX, 1000000.0f, 1.0f}},
  };
  for (const auto& [head, p] : cases) {
    t.add("rope", "", cat("a", shape({head, 3, 6, 1}), describe(p), " pos 0..4095"), kernel(), [=](CaseGraph& c) {
      Tensor* x = c.uniform(DType::F32, {head, 3, 6, 1}, -2, 2);
      return rope(c.g, x, c.ints({0, 1, 7, 100, 2047, 4095}), p.n_dims, p.mode, p.base, p.scale);
    });
    t.add("rope", "", cat("a permuted", shape({head, 4, 5, 1}), describe(p)), kernel(), [=](CaseGraph& c) {
      Tensor* x = permute(c.g, c.uniform(DType::F32, {head, 5, 4, 1}, -2, 2), 0, 2, 1, 3);
      return rope(c.g, x, c.ints({3, 4, 5, 6, 7}), p.n_dims, p.mode, p.base, p.scale);
    });
  }
  const std::pair<Shape, RopeParams> spread[] = {
      {{64, 4, 5, 1}, {64, RopeMode::Normal, 10000.0f, 0.5f}}, {{64, 4, 5, 1}, {64, RopeMode::NeoX, 10000.0f, 0.5f}},
      {{6, 3, 7, 1}, {4, RopeMode::Normal, 10000.0f, 0.5f}},   {{10, 1, 3, 1}, {6, RopeMode::NeoX, 10000.0f, 0.5f}},
      {{128, 2, 33, 1}, {96, RopeMode::NeoX, 10000.0f, 0.5f}},
  };
  for (const auto& [ne, p] : spread) {
    OpCase& oc = t.add("rope", "", cat("a", shape(ne), describe(p), " pos 3, 100, ..."), kernel(), [=](CaseGraph& c) {
      Tensor* x = c.normal(DType::F32, ne);
      return rope(c.g, x, c.ints(spread_positions(ne[2])), p.n_dims, p.mode, p.base, p.scale);
    });
    if (ne[0] == 64)  // a 512-token prompt's 32 query heads of 64
      oc.perf = [=](CaseGraph& c) {
        Tensor* x = c.normal(DType::F32, {64, 32, 512, 1});
        return std::vector<Tensor*>{rope(c.g, x, c.ints(spread_positions(512)), 64, p.mode, p.base, p.scale)};
      };
  }
  t.add("rope", "", "a permuted{16,3,5,1} n_dims=16 normal base=500000 scale=1 pos 0..500", kernel(), [](CaseGraph& c) {
    Tensor* x = permute(c.g, c.normal(DType::F32, {16, 5, 3, 1}), 0, 2, 1, 3);
    return rope(c.g, x, c.ints({0, 1, 2, 500, 7}), 16, RopeMode::Normal, 500000.0f, 1.0f);
  });
  // YaRN: gpt-oss's (NeoX, base 150000, factor 32 over 4096 tokens, beta
  // 32 / 1), a normal-mode one with frequency factors, and attn_factor alone.
  struct YarnCase {
    int64_t head;
    RopeParams p;
    RopeYarn yarn;
    bool factors;
  };
  const YarnCase yarn_cases[] = {
      {64, {64, RopeMode::NeoX, 150000.0f, 1.0f / 32}, {1.0f, 1.0f, 32.0f, 1.0f, 4096}, false},
      {64, {48, RopeMode::Normal, 10000.0f, 0.25f}, {0.5f, 0.8f, 32.0f, 1.0f, 2048}, true},
      {32, {32, RopeMode::NeoX, 10000.0f, 1.0f}, {0.0f, 1.3f, 32.0f, 1.0f, 0}, false},
  };
  for (const YarnCase& y : yarn_cases)
    t.add("rope", "yarn",
          cat("a", shape({y.head, 4, 6, 1}), describe(y.p), " ext_factor=", y.yarn.ext_factor,
              " attn_factor=", y.yarn.attn_factor, " n_ctx_orig=", y.yarn.n_ctx_orig, y.factors ? " freq factors" : "",
              " pos 0..32767"),
          kernel(), [=](CaseGraph& c) {
            Tensor* x = c.uniform(DType::F32, {y.head, 4, 6, 1}, -2, 2);
            Tensor* f = y.factors ? c.uniform(DType::F32, {y.p.n_dims / 2, 1, 1, 1}, 0.5f, 4.0f) : nullptr;
            return rope(c.g, x, c.ints({0, 1, 70, 4095, 9000, 32767}), y.p.n_dims, y.p.mode, y.p.base, y.p.scale, f,
                        y.yarn);
          });
}

// Multi-section rope (MRope, IMRope): Qwen3.5's IMRope sections {11, 11,
// 10, 0} over 64 rotated dims with a text token's positions (p, p, p, 0,
// which must give NeoX rope) and with four different positions per token;
// an extra section, sections that repeat (summing to fewer than n_dims / 2
// pairs), unequal sections (IMRope's interleave ends at 3 s), partial
// rotation, frequency factors with YaRN, a permuted source.
void rope_multi_cases(Table& t) {
  struct MultiCase {
    int64_t head;
    int n_dims;
    RopeSections sections;
    bool text_positions;  // (p, p, p, 0): llama.cpp's positions of a text token
  };
  const MultiCase cases[] = {
      {64, 64, {11, 11, 10, 0}, true}, {64, 64, {11, 11, 10, 0}, false}, {128, 32, {6, 5, 5, 0}, false},
      {32, 32, {4, 4, 4, 4}, false},   {40, 32, {3, 2, 2, 0}, false},     {32, 32, {8, 4, 2, 2}, false},
      {16, 16, {0, 5, 3, 0}, false},
  };
  const int64_t heads = 3, tokens = 6;
  const auto positions = [](CaseGraph& c, int64_t n, bool text) {
    std::vector<int32_t> pos(static_cast<size_t>(4 * n));
    const std::vector<float> r = c.uniform_values(4 * n, 0, 4096);
    for (int64_t k = 0; k < 4; ++k)
      for (int64_t i = 0; i < n; ++i)
        pos[k * n + i] = text ? (k < 3 ? static_cast<int32_t>(i * 97 + 3) : 0) : static_cast<int32_t>(r[k * n + i]);
    return c.ints(pos);
  };
  for (RopeMode mode : {RopeMode::IMRope, RopeMode::MRope})
    for (const MultiCase& m : cases) {
      const std::string name =
          cat(mode == RopeMode::IMRope ? "imrope" : "mrope", " a", shape({m.head, heads, tokens, 1}), " n_dims=", m.n_dims,
              " sections {", m.sections[0], ",", m.sections[1], ",", m.sections[2], ",", m.sections[3], "}",
              m.text_positions ? " text positions (p,p,p,0)" : " positions 0..4095");
      OpCase& oc = t.add("rope", "multi", name, kernel(), [=](CaseGraph& c) {
        Tensor* x = c.uniform(DType::F32, {m.head, heads, tokens, 1}, -2, 2);
        return rope_multi(c.g, x, positions(c, tokens, m.text_positions), m.n_dims, m.sections, mode, 10000000.0f, 1.0f);
      });
      if (m.text_positions && mode == RopeMode::IMRope)  // Qwen3.5's 16 query heads of 256, 64 rotated, over a 512-token prompt
        oc.perf = [=](CaseGraph& c) {
          Tensor* x = c.normal(DType::F32, {256, 16, 512, 1});
          return std::vector<Tensor*>{
              rope_multi(c.g, x, positions(c, 512, true), 64, m.sections, mode, 10000000.0f, 1.0f)};
        };
    }
  // A text token's positions give NeoX rope: the same node as rope's.
  t.add("rope", "multi", "imrope text positions against neox a{64,3,6,1} n_dims=64", kernel(), [=](CaseGraph& c) {
    Tensor* x = c.uniform(DType::F32, {64, 3, 6, 1}, -2, 2);
    Tensor* multi = rope_multi(c.g, x, positions(c, tokens, true), 64, {11, 11, 10, 0}, RopeMode::IMRope, 10000.0f, 1.0f);
    Tensor* neox = rope(c.g, x, c.ints(spread_positions(tokens)), 64, RopeMode::NeoX, 10000.0f, 1.0f);
    return std::vector<Tensor*>{multi, neox};
  });
  t.add("rope", "multi", "imrope a{64,4,6,1} sections {11,11,10,0} freq factors yarn ext_factor=1 scale=0.25",
        kernel(), [=](CaseGraph& c) {
          Tensor* x = c.uniform(DType::F32, {64, 4, 6, 1}, -2, 2);
          Tensor* f = c.uniform(DType::F32, {32, 1, 1, 1}, 0.5f, 4.0f);
          return rope_multi(c.g, x, positions(c, 6, false), 64, {11, 11, 10, 0}, RopeMode::IMRope, 10000.0f, 0.25f, f,
                            RopeYarn{1.0f, 1.0f, 32.0f, 1.0f, 4096});
        });
  t.add("rope", "multi", "mrope a permuted{32,4,5,1} n_dims=24 sections {4,4,4,0}", kernel(), [=](CaseGraph& c) {
    Tensor* x = permute(c.g, c.uniform(DType::F32, {32, 5, 4, 1}, -2, 2), 0, 2, 1, 3);
    return rope_multi(c.g, x, positions(c, 5, false), 24, {4, 4, 4, 0}, RopeMode::MRope, 10000.0f, 1.0f);
  });
}

// A causal mask [kv, rows]: -inf above the diagonal (offset by kv - rows),
// random values elsewhere, and optionally a fully masked row (row 1).
Tensor* causal_mask(CaseGraph& c, int64_t kv, int64_t rows, bool full_row) {
  std::vector<float> m = c.uniform_values(kv * rows, -1, 1);
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t i = 0; i < kv; ++i)
      if (i > j + (kv - rows) || (full_row && j == 1)) m[j * kv + i] = -INFINITY;
  return c.leaf(DType::F32, {kv, rows, 1, 1}, m);
}

void soft_max_cases(Table& t) {
  for (int64_t k : {1, 5, 8, 32, 33, 257}) {
    t.add("soft_max", "", cat("a{", k, ",7,3,1} scale=1"), kernel(), [=](CaseGraph& c) {
      return soft_max(c.g, c.uniform(DType::F32, {k, 7, 3, 1}, -5, 5), nullptr, 1.0f);
    });
    // A mask with more rows than a, broadcast over heads.
    OpCase& oc =
        t.add("soft_max", "", cat("a{", k, ",7,3,1} causal mask{", k, ",9} scale=0.125"), kernel(), [=](CaseGraph& c) {
          Tensor* mask = causal_mask(c, k, 9, false);
          return soft_max(c.g, c.uniform(DType::F32, {k, 7, 3, 1}, -5, 5), mask, 0.125f);
        });
    if (k == 257)  // a 512-token prompt's scores, 32 heads
      oc.perf = [](CaseGraph& c) {
        Tensor* mask = causal_mask(c, 512, 512, false);
        return std::vector<Tensor*>{soft_max(c.g, c.uniform(DType::F32, {512, 512, 32, 1}, -5, 5), mask, 0.125f)};
      };
    // A fully masked row gives zeros.
    t.add("soft_max", "", cat("a{", k, ",4,2,1} mask with a fully masked row scale=0.5"), kernel(), [=](CaseGraph& c) {
      Tensor* mask = causal_mask(c, k, 4, true);
      return soft_max(c.g, c.uniform(DType::F32, {k, 4, 2, 1}, -30, 30), mask, 0.5f);
    });
  }
  t.add("soft_max", "", "a permuted{12,5,3,1} causal mask scale=0.3", kernel(), [](CaseGraph& c) {
    Tensor* x = permute(c.g, c.uniform(DType::F32, {12, 3, 5, 1}, -4, 4), 0, 2, 1, 3);
    return soft_max(c.g, x, causal_mask(c, 12, 5, false), 0.3f);
  });
  // A NaN stays NaN in its row (as IEEE arithmetic and ggml give), wherever
  // it sits in the SIMD lanes or a GPU's invocations: a kernel that turned it
  // into a number would hide a corrupt weight behind plausible probabilities.
  for (int64_t at : {0, 5, 16, 40})
    t.add("soft_max", "", cat("a{41,3,1,1} NaN at (", at, ",1)"), kernel(), [=](CaseGraph& c) {
       std::vector<float> x = c.uniform_values(41 * 3, -5, 5);
       x[41 + at] = std::numeric_limits<float>::quiet_NaN();
       return soft_max(c.g, c.leaf(DType::F32, {41, 3, 1, 1}, x), nullptr, 1.0f);
     });
  for (Shape ne : {Shape{1, 1, 1, 1}, {7, 3, 1, 1}, {257, 5, 4, 1}, {33, 8, 3, 2}}) {
    t.add("soft_max", "", cat("a", shape(ne), " scale=0.7"), kernel(),
          [=](CaseGraph& c) { return soft_max(c.g, c.normal(DType::F32, ne, 3.0f), nullptr, 0.7f); });
    // A causal mask over two more rows, broadcast over heads; row 0 fully
    // masked where it is wider than one column.
    t.add("soft_max", "", cat("a", shape(ne), " mask{", ne[0], ",", ne[1] + 2, "} row 0 masked scale=0.125"), kernel(),
          [=](CaseGraph& c) {
            Tensor* a = c.normal(DType::F32, ne, 3.0f);
            std::vector<float> m(static_cast<size_t>(ne[0] * (ne[1] + 2)));
            for (int64_t r = 0; r < ne[1] + 2; ++r)
              for (int64_t col = 0; col < ne[0]; ++col)
                m[r * ne[0] + col] = (r == 0 && ne[0] > 1) || col > r + 1 ? -INFINITY : 0.1f * static_cast<float>(col);
            return soft_max(c.g, a, c.leaf(DType::F32, {ne[0], ne[1] + 2, 1, 1}, m), 0.125f);
          });
  }
  t.add("soft_max", "", "a permuted{9,5,4,1} scale=1", kernel(), [](CaseGraph& c) {
    return soft_max(c.g, permute(c.g, c.normal(DType::F32, {9, 4, 5, 1}), 0, 2, 1, 3), nullptr, 1.0f);
  });
  // Attention sinks (gpt-oss): one logit per head beside each row, from far
  // below the row's scores to far above them; with a causal mask and a fully
  // masked row (whose probabilities are then all zero: the sink takes it all).
  for (int64_t k : {1, 5, 33, 257}) {
    t.add("soft_max", "sinks", cat("a{", k, ",7,4,1} sinks{4} in [-8,8) scale=1"), kernel(), [=](CaseGraph& c) {
      return soft_max(c.g, c.uniform(DType::F32, {k, 7, 4, 1}, -5, 5), nullptr, 1.0f,
                      c.uniform(DType::F32, {4, 1, 1, 1}, -8, 8));
    });
    OpCase& oc = t.add("soft_max", "sinks", cat("a{", k, ",4,3,1} causal mask with a fully masked row, sinks{3}"),
                       kernel(), [=](CaseGraph& c) {
                         Tensor* mask = causal_mask(c, k, 4, true);
                         return soft_max(c.g, c.uniform(DType::F32, {k, 4, 3, 1}, -5, 5), mask, 0.125f,
                                         c.leaf(DType::F32, {3, 1, 1, 1}, {-20.0f, 0.5f, 30.0f}));
                       });
    if (k == 257)  // gpt-oss-20b's 64 heads over a 512-token prompt
      oc.perf = [](CaseGraph& c) {
        Tensor* mask = causal_mask(c, 512, 512, false);
        return std::vector<Tensor*>{soft_max(c.g, c.uniform(DType::F32, {512, 512, 64, 1}, -5, 5), mask, 0.125f,
                                             c.uniform(DType::F32, {64, 1, 1, 1}, -2, 2))};
      };
  }
  t.add("soft_max", "sinks", "a permuted{9,5,4,1} sinks{4} scale=0.5", kernel(), [](CaseGraph& c) {
    return soft_max(c.g, permute(c.g, c.normal(DType::F32, {9, 4, 5, 1}), 0, 2, 1, 3), nullptr, 0.5f,
                    c.normal(DType::F32, {4, 1, 1, 1}));
  });
}

// Gated linear units (Op::Glu): gate and value of one shape, values beyond
// gpt-oss's limit of 7 so that the clamps act.
void glu_cases(Table& t) {
  for (GluKind kind : {GluKind::Swiglu, GluKind::SwigluOai}) {
    const std::string name = kind == GluKind::Swiglu ? "swiglu" : "swiglu_oai alpha=1.702 limit=7";
    for (Shape ne : {Shape{1, 1, 1, 1}, {7, 3, 1, 1}, {257, 4, 2, 1}, {64, 3, 2, 2}}) {
      OpCase& oc = t.add("glu", "", cat(name, " x", shape(ne), " y sigma 6"), kernel(), [=](CaseGraph& c) {
        return glu(c.g, kind, c.normal(DType::F32, ne, 6.0f), c.normal(DType::F32, ne, 6.0f), 1.702f, 7.0f);
      });
      if (ne[0] == 257)  // gpt-oss-20b's 4 experts' rows of 2880 over a 512-token prompt
        oc.perf = [=](CaseGraph& c) {
          return std::vector<Tensor*>{glu(c.g, kind, c.normal(DType::F32, {2880, 4, 512, 1}, 3.0f),
                                          c.normal(DType::F32, {2880, 4, 512, 1}, 3.0f), 1.702f, 7.0f)};
        };
    }
    t.add("glu", "", cat(name, " x permuted{9,5,4} y transposed{9,20}"), kernel(), [=](CaseGraph& c) {
      Tensor* x = permute(c.g, c.normal(DType::F32, {9, 4, 5, 1}, 6.0f), 0, 2, 1, 3);
      Tensor* y = reshape(c.g, cont(c.g, transpose(c.g, c.normal(DType::F32, {20, 9, 1, 1}, 6.0f))), {9, 5, 4});
      return glu(c.g, kind, x, y, 1.702f, 7.0f);
    });
  }
}

// The gated DeltaNet layers' row ops: q and k scaled to unit length (eps
// 1e-6 as Qwen3.5's), rows of zeros (the eps takes over), permuted rows.
void l2_norm_cases(Table& t) {
  for (int64_t n : {1, 3, 64, 128, 257})
    t.add("l2_norm", "", cat("a{", n, ",5,2,1} eps=1e-06"), kernel(), [=](CaseGraph& c) {
      return l2_norm(c.g, c.uniform(DType::F32, {n, 5, 2, 1}, -3, 3), 1e-6f);
    });
  t.add("l2_norm", "", "a{16,4,1,1} with a row of zeros and a tiny row eps=1e-06", kernel(), [](CaseGraph& c) {
    std::vector<float> v = c.uniform_values(64, -1, 1);
    for (int i = 16; i < 32; ++i) v[i] = 0.0f;
    for (int i = 32; i < 48; ++i) v[i] *= 1e-9f;
    return l2_norm(c.g, c.leaf(DType::F32, {16, 4, 1, 1}, v), 1e-6f);
  });
  t.add("l2_norm", "", "a permuted{128,4,6,1} eps=1e-06", kernel(), [](CaseGraph& c) {
     return l2_norm(c.g, permute(c.g, c.normal(DType::F32, {128, 6, 4, 1}), 0, 2, 1, 3), 1e-6f);
   }).perf = [](CaseGraph& c) {  // a 512-token prompt's 16 heads of 128 (Qwen3.5's DeltaNet q and k)
    return std::vector<Tensor*>{l2_norm(c.g, c.normal(DType::F32, {128, 16, 512, 1}), 1e-6f)};
  };
}

// Joined along each dimension (the short convolution's state and the new
// tokens: dim 0), sources permuted.
void concat_cases(Table& t) {
  const std::pair<Shape, Shape> shapes[] = {
      {{3, 5, 2, 1}, {4, 5, 2, 1}}, {{7, 2, 3, 2}, {7, 5, 3, 2}}, {{6, 4, 1, 3}, {6, 4, 2, 3}},
      {{5, 3, 2, 1}, {5, 3, 2, 2}}, {{1, 1, 1, 1}, {1, 1, 1, 1}},
  };
  for (int dim = 0; dim < kMaxDims; ++dim)
    for (const auto& [na, nb] : shapes) {
      bool fits = true;
      for (int i = 0; i < kMaxDims; ++i) fits = fits && (i == dim || na[i] == nb[i]);
      if (!fits) continue;
      t.add("concat", "", cat("a", shape(na), " b", shape(nb), " dim ", dim), exact(),
            [=](CaseGraph& c) { return concat(c.g, c.normal(DType::F32, na), c.normal(DType::F32, nb), dim); });
    }
  t.add("concat", "", "a permuted{4,3,5} b transposed{2,3} dim 0 as 3-D", exact(), [](CaseGraph& c) {
    Tensor* a = permute(c.g, c.normal(DType::F32, {4, 5, 3, 1}), 0, 2, 1, 3);
    Tensor* b = reshape(c.g, cont(c.g, transpose(c.g, c.normal(DType::F32, {15, 2, 1, 1}))), {2, 3, 5});
    return concat(c.g, a, b, 0);
  });
}

// The short convolution: Qwen3.5's 4 taps over its channels, one token
// (generation) or a prompt's, one or two sequences; a permuted input.
void ssm_conv_cases(Table& t) {
  for (int64_t taps : {2, 4})
    for (int64_t channels : {1, 8, 33})
      for (int64_t tokens : {1, 5, 17})
        for (int64_t seqs : {1, 2})
          t.add("ssm_conv", "",
                cat("sx{", taps - 1 + tokens, ",", channels, ",", seqs, "} c{", taps, ",", channels, "}"), kernel(),
                [=](CaseGraph& c) {
                  return ssm_conv(c.g, c.normal(DType::F32, {taps - 1 + tokens, channels, seqs, 1}),
                                  c.normal(DType::F32, {taps, channels, 1, 1}));
                });
  t.add("ssm_conv", "", "sx permuted{8,6,2} c{4,6}", kernel(), [](CaseGraph& c) {
     Tensor* sx = permute(c.g, c.normal(DType::F32, {8, 2, 6, 1}), 0, 2, 1, 3);
     return ssm_conv(c.g, sx, c.normal(DType::F32, {4, 6, 1, 1}));
   }).perf = [](CaseGraph& c) {  // Qwen3.5-27B's 10240 conv channels over a 512-token prompt
    return std::vector<Tensor*>{
        ssm_conv(c.g, c.normal(DType::F32, {515, 10240, 1, 1}), c.normal(DType::F32, {4, 10240, 1, 1}))};
  };
}

// The gated delta rule (Qwen3.5's and Kimi's DeltaNet layers): q and k
// rows of unit length (as the layers' l2_norm leaves them), v normal, beta
// in (0, 1), a non-zero initial state; the gate's log-decay strong (ggml's
// test range, most of the state forgotten each token) or weak (the state
// carries across many tokens and chunks). One token (generation) and
// prompts across the chunked form's chunk boundaries (64; 16 with a per-key
// gate), at head sizes 16, 64 and 128, with H_v = H_k, 2 H_k and 4 H_k (the
// tiled broadcast) and two sequences. Forced forms: the CPU's recurrent and
// chunked forms each on the same cases. The outputs and the final state are
// compared apart (each its own NMSE).
struct DeltaNetShape {
  int64_t S, H_k, H_v, T, seqs;
  bool per_key_gate;
  bool weak_decay;
};

std::string describe(const DeltaNetShape& d) {
  return cat("S=", d.S, " H_k=", d.H_k, " H_v=", d.H_v, " T=", d.T, " seqs=", d.seqs,
             d.per_key_gate ? " per-key gate" : " scalar gate", d.weak_decay ? " weak decay" : " strong decay");
}

// Normal values with each row of ne[0] scaled to unit length.
Tensor* unit_rows(CaseGraph& c, Shape ne) {
  std::vector<float> x = c.normal_values(ne[0] * ne[1] * ne[2] * ne[3], 1.0f);
  for (size_t r = 0; r < x.size(); r += static_cast<size_t>(ne[0])) {
    double ss = 0;
    for (int64_t i = 0; i < ne[0]; ++i) ss += static_cast<double>(x[r + i]) * x[r + i];
    const float inv = static_cast<float>(1.0 / std::sqrt(std::max(ss, 1e-30)));
    for (int64_t i = 0; i < ne[0]; ++i) x[r + i] *= inv;
  }
  return c.leaf(DType::F32, ne, x);
}

enum class Layout { Contiguous, Permuted, KeysStrided };

Tensor* delta_net_node(CaseGraph& c, const DeltaNetShape& d, Layout layout = Layout::Contiguous) {
  Tensor *q, *k, *v;
  if (layout == Layout::Permuted) {  // [S, T, H, seqs] seen as [S, H, T, seqs]: rows adjacent, heads strided
    q = permute(c.g, unit_rows(c, {d.S, d.T, d.H_k, d.seqs}), 0, 2, 1, 3);
    k = permute(c.g, unit_rows(c, {d.S, d.T, d.H_k, d.seqs}), 0, 2, 1, 3);
    v = permute(c.g, c.normal(DType::F32, {d.S, d.T, d.H_v, d.seqs}), 0, 2, 1, 3);
  } else {
    q = unit_rows(c, {d.S, d.H_k, d.T, d.seqs});
    k = unit_rows(c, {d.S, d.H_k, d.T, d.seqs});
    v = c.normal(DType::F32, {d.S, d.H_v, d.T, d.seqs});
  }
  if (layout == Layout::KeysStrided)  // a key's elements H_k floats apart: a transposed copy, seen transposed
    k = transpose(c.g, cont(c.g, transpose(c.g, k)));
  const float lo = d.weak_decay ? -0.05f : -20.0f;
  Tensor* gate = c.uniform(DType::F32, {d.per_key_gate ? d.S : 1, d.H_v, d.T, d.seqs}, lo, -1e-4f);
  Tensor* beta = c.uniform(DType::F32, {1, d.H_v, d.T, d.seqs}, 0.0f, 1.0f);
  Tensor* state = c.normal(DType::F32, {d.S, d.S, d.H_v, d.seqs}, 0.5f);
  return gated_delta_net(c.g, q, k, v, gate, beta, state);
}

// The outputs [S, H_v, T, seqs] and the final state [S, S, H_v, seqs] of the
// packed result, as copies (exact on every backend).
std::vector<Tensor*> outputs_and_state(CaseGraph& c, Tensor* r, const DeltaNetShape& d) {
  const size_t f = sizeof(float);
  Tensor* o = view(c.g, r, {d.S, d.H_v, d.T, d.seqs}, {d.S * f, d.S * d.H_v * f, d.S * d.H_v * d.T * f}, 0);
  Tensor* st = view(c.g, r, {d.S, d.S, d.H_v, d.seqs}, {d.S * f, d.S * d.S * f, d.S * d.S * d.H_v * f},
                    d.S * d.H_v * d.T * d.seqs * f);
  return {cont(c.g, o), cont(c.g, st)};
}

// A CPU setting: GatedDeltaNet's form.
std::function<Restore()> delta_net_form(cpu::DeltaNetForm form) {
  return [form] {
    const cpu::DeltaNetForm saved = cpu::delta_net_set_form(form);
    return Restore([saved] { cpu::delta_net_set_form(saved); });
  };
}

void gated_delta_net_cases(Table& t) {
  const auto add = [&](const std::string& group, const DeltaNetShape& d, const std::string& note = "",
                       Layout layout = Layout::Contiguous) -> OpCase& {
    return t.add("gated_delta_net", group, describe(d) + note, kernel(),
                 [=](CaseGraph& c) { return outputs_and_state(c, delta_net_node(c, d, layout), d); });
  };
  // Qwen3.5-9B-like heads (16 key heads, 32 value heads of 128), the perf shapes.
  const auto qwen35 = [](int64_t T) {
    return [T](CaseGraph& c) {
      return std::vector<Tensor*>{delta_net_node(c, {128, 16, 32, T, 1, false, true})};
    };
  };
  // Generation: one token.
  for (int64_t S : {16, 64, 128})
    for (int64_t ratio : {1, 2, 4})
      for (bool per_key : {false, true}) {
        OpCase& oc = add("", {S, 4 / ratio, 4, 1, ratio == 2 ? 2 : 1, per_key, ratio != 4});
        if (S == 128 && ratio == 2 && !per_key) oc.perf = qwen35(1);
      }
  // Prompts across chunk boundaries.
  const DeltaNetShape prompts[] = {
      {16, 2, 2, 7, 1, false, true},    {16, 2, 4, 64, 2, false, true},  {16, 1, 4, 65, 1, false, true},
      {16, 2, 4, 200, 1, false, true},  {16, 2, 2, 7, 2, true, true},    {16, 1, 4, 64, 1, true, true},
      {16, 2, 4, 65, 1, true, false},   {16, 2, 2, 200, 1, true, true},  {64, 2, 4, 7, 2, false, false},
      {64, 1, 2, 65, 1, false, true},   {64, 2, 2, 200, 1, false, false}, {64, 1, 4, 65, 1, true, true},
      {128, 1, 2, 65, 1, false, true},  {128, 1, 1, 65, 1, true, true},
  };
  for (const DeltaNetShape& d : prompts) {
    OpCase& oc = add("", d);
    oc.cpu_threads = {3};
    if (d.S == 128 && !d.per_key_gate) oc.perf = qwen35(512);
  }
  // Each CPU form on the same cases, forced (a node's shape picks one:
  // delta_net.cpp), across chunks and with strong decay (whole chunks'
  // decay underflowing to 0).
  const DeltaNetShape forced[] = {
      {64, 2, 4, 65, 2, false, true},  {64, 1, 2, 130, 1, false, false}, {16, 1, 2, 200, 1, true, true},
      {16, 2, 4, 65, 1, true, false},  {128, 1, 2, 7, 1, false, true},   {16, 2, 2, 1, 1, true, false},
  };
  for (const DeltaNetShape& d : forced) {
    add("forms", d, " (CPU: recurrent form)").cpu_setting = delta_net_form(cpu::DeltaNetForm::Recurrent);
    add("forms", d, " (CPU: chunked form)").cpu_setting = delta_net_form(cpu::DeltaNetForm::Chunked);
  }
  // Views: q, k and v permuted (heads strided); keys whose elements are
  // strided (the CPU copies them; Vulkan takes adjacent elements only).
  add("", {64, 2, 4, 65, 2, false, true}, " q k v permuted", Layout::Permuted);
  add("", {16, 2, 4, 70, 1, true, true}, " q k v permuted", Layout::Permuted);
  for (bool chunked : {false, true}) {
    OpCase& oc = add("", {16, 2, 4, 70, 1, chunked, true},
                     chunked ? " keys strided (CPU: chunked form)" : " keys strided (CPU: recurrent form)",
                     Layout::KeysStrided);
    oc.must_run = kCpu;
    oc.cpu_setting = delta_net_form(chunked ? cpu::DeltaNetForm::Chunked : cpu::DeltaNetForm::Recurrent);
  }
}

// The experts' biases: rows (u, t) of a plus row ids[u, t] of b.
void add_id_cases(Table& t) {
  struct Shape4 {
    int64_t n, used, tokens, experts;
  };
  for (Shape4 s : {Shape4{1, 1, 1, 1}, {64, 4, 5, 8}, {33, 2, 7, 3}, {2880, 4, 3, 32}}) {
    OpCase& oc = t.add("add_id", "", cat("a{", s.n, ",", s.used, ",", s.tokens, "} b{", s.n, ",", s.experts, "} ids"),
                       exact(), [=](CaseGraph& c) {
                         std::vector<int32_t> ids(static_cast<size_t>(s.used * s.tokens));
                         for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 5 + 3) % s.experts);
                         return add_id(c.g, c.normal(DType::F32, {s.n, s.used, s.tokens, 1}),
                                       c.normal(DType::F32, {s.n, s.experts, 1, 1}), c.ints(ids, {s.used, s.tokens, 1, 1}));
                       });
    if (s.n == 2880)  // gpt-oss-20b: 4 of 32 experts, 512 tokens
      oc.perf = [](CaseGraph& c) {
        std::vector<int32_t> ids(4 * 512);
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 2654435761u % 32);
        return std::vector<Tensor*>{add_id(c.g, c.normal(DType::F32, {2880, 4, 512, 1}),
                                           c.normal(DType::F32, {2880, 32, 1, 1}), c.ints(ids, {4, 512, 1, 1}))};
      };
  }
  t.add("add_id", "", "a permuted{16,3,5} b{16,6} ids", exact(), [](CaseGraph& c) {
    Tensor* a = permute(c.g, c.normal(DType::F32, {16, 5, 3, 1}), 0, 2, 1, 3);
    std::vector<int32_t> ids(15);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 1) % 6);
    return add_id(c.g, a, c.normal(DType::F32, {16, 6, 1, 1}), c.ints(ids, {3, 5, 1, 1}));
  });
}

// DeepSeek V3's grouped routing: a tensor of -inf (Fill), and the chosen
// groups' rows written back into it (SetRows), with ids broadcast over a's
// dims 2 and 3, duplicate ids (the last row wins), and a permuted source.
void fill_set_rows_cases(Table& t) {
  for (float v : {0.0f, -2.5f, -std::numeric_limits<float>::infinity()})
    t.add("fill", "", cat("{7,3,2,2} with ", v), exact(),
          [=](CaseGraph& c) { return fill(c.g, c.normal(DType::F32, {7, 3, 2, 2}), v); });
  struct Rows {
    int64_t n, rows_a, rows_b, ne2, ne3, ids_ne2, ids_ne3;
  };
  for (Rows s : {Rows{32, 8, 4, 5, 1, 5, 1}, Rows{4, 8, 4, 512, 1, 512, 1}, Rows{7, 6, 3, 4, 2, 2, 1},
                 Rows{1, 3, 5, 1, 1, 1, 1}}) {
    t.add("set_rows", "",
          cat("a{", s.n, ",", s.rows_a, ",", s.ne2, ",", s.ne3, "} b{", s.n, ",", s.rows_b, "} ids{", s.rows_b, ",",
              s.ids_ne2, ",", s.ids_ne3, "}"),
          exact(), [=](CaseGraph& c) {
            std::vector<int32_t> ids(static_cast<size_t>(s.rows_b * s.ids_ne2 * s.ids_ne3));
            for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 5 + 3) % s.rows_a);
            Tensor* a = fill(c.g, c.normal(DType::F32, {s.n, s.rows_a, s.ne2, s.ne3}), -INFINITY);
            return set_rows(c.g, a, c.normal(DType::F32, {s.n, s.rows_b, s.ne2, s.ne3}),
                            c.ints(ids, {s.rows_b, s.ids_ne2, s.ids_ne3, 1}));
          });
  }
  t.add("set_rows", "", "a permuted{16,5,3} b{16,2,3} ids", exact(), [](CaseGraph& c) {
    Tensor* a = permute(c.g, c.normal(DType::F32, {16, 3, 5, 1}), 0, 2, 1, 3);
    return set_rows(c.g, a, c.normal(DType::F32, {16, 2, 3, 1}), c.ints({4, 1, 0, 0, 2, 3}, {2, 3, 1, 1}));
  });
}

// =============================================================================
// the router's ops (mixtures of experts)

void argsort_cases(Table& t) {
  for (int64_t k : {1, 2, 8, 17, 128}) {
    OpCase& oc = t.add("argsort", "", cat("a{", k, ",9,2,1}"), exact(), [=](CaseGraph& c) {
      return argsort_desc(c.g, c.uniform(DType::F32, {k, 9, 2, 1}, -3, 3));
    });
    if (k == 8 || k == 128)  // a router's 8 or 128 experts for 512 tokens
      oc.perf = [=](CaseGraph& c) {
        return std::vector<Tensor*>{argsort_desc(c.g, c.uniform(DType::F32, {k, 512, 1, 1}))};
      };
    // A view of the first entries, read through get_rows.
    t.add("argsort", "", cat("top-", std::min<int64_t>(k, 2), " of {", k, ",5} to get_rows"), exact(),
          [=](CaseGraph& c) {
            Tensor* probs = c.uniform(DType::F32, {k, 5, 1, 1});
            Tensor* top = top_k(c.g, probs, std::min<int64_t>(k, 2));
            return get_rows(c.g, reshape(c.g, probs, {1, k, 5}), top);
          });
  }
  for (Shape ne :
       {Shape{1, 1, 1, 1}, {2, 3, 1, 1}, {8, 5, 1, 1}, {16, 7, 2, 1}, {33, 3, 2, 2}, {257, 4, 1, 1}, {300, 2, 1, 1}}) {
    t.add("argsort", "", cat("a", shape(ne)), exact(),
          [=](CaseGraph& c) { return argsort_desc(c.g, c.normal(DType::F32, ne)); });
    // Many ties (values in steps of 0.5, some -0 next to 0): the indices in
    // index order among equal values, as the reference's stable sort, where
    // the backend promises that order (the CPU does not: tensor.h leaves it
    // open); the values they pick (get_rows: top-k's are the first k), on
    // every backend.
    const int64_t k = std::min<int64_t>(ne[0], 3);
    OpCase& oc = t.add("argsort", "", cat("a", shape(ne), " with ties, and its top-", k), exact(), [=](CaseGraph& c) {
      std::vector<float> v = c.normal_values(ne[0] * ne[1] * ne[2] * ne[3], 1.0f);
      for (size_t i = 0; i < v.size(); ++i) v[i] = i % 7 == 3 ? -0.0f : std::round(v[i] * 2) / 2;
      Tensor* x = c.leaf(DType::F32, ne, v);
      const int64_t rows = ne[1] * ne[2] * ne[3];
      Tensor* order = argsort_desc(c.g, x);
      Tensor* top = top_k(c.g, x, k);
      Tensor* as_rows = reshape(c.g, x, {1, ne[0], rows});
      return std::vector<Tensor*>{order, top, get_rows(c.g, as_rows, reshape(c.g, order, {ne[0], rows}))};
    });
    oc.tol.cpu = Bound{.nmse = 0, .ignored_outputs = 0b11};  // (-0 and 0 tie: either may come first)
  }
  t.add("argsort", "", "a transposed{19,5}", exact(), [](CaseGraph& c) {
    return argsort_desc(c.g, transpose(c.g, c.normal(DType::F32, {5, 19, 1, 1})));
  });
  // Rows longer than Vulkan's shader takes: it declines them (to the CPU).
  t.add("argsort", "", "a{5000,2,1,1}", exact(), [](CaseGraph& c) {
     return argsort_desc(c.g, c.normal(DType::F32, {5000, 2, 1, 1}));
   }).must_run = kCpu;
}

void sum_rows_clamp_cases(Table& t) {
  for (int64_t k : {1, 2, 8, 33}) {
    t.add("sum_rows", "", cat("a{", k, ",7,3,1}"), exact_on_cpu(), [=](CaseGraph& c) {
      return sum_rows(c.g, c.uniform(DType::F32, {k, 7, 3, 1}));
    });
    t.add("clamp", "", cat("a{", k, ",7,1,1} to [-0.5,0.25]"), exact(), [=](CaseGraph& c) {
      return clamp(c.g, c.uniform(DType::F32, {k, 7, 1, 1}, -2, 2), -0.5f, 0.25f);
    });
  }
  for (Shape ne : {Shape{1, 1, 1, 1}, {2, 7, 1, 1}, {257, 5, 2, 1}, {4096, 3, 1, 1}, {33, 2, 3, 2}})
    t.add("sum_rows", "", cat("a", shape(ne)), exact_on_cpu(),
          [=](CaseGraph& c) { return sum_rows(c.g, c.normal(DType::F32, ne)); });
  t.add("sum_rows", "", "a transposed{37,6}", exact_on_cpu(), [](CaseGraph& c) {
    return sum_rows(c.g, transpose(c.g, c.normal(DType::F32, {6, 37, 1, 1})));
  });
  // NaN becomes hi, as in ggml; Inf and -Inf the bounds.
  for (const Shape& ne : kNormalUnaryShapes)
    t.add("clamp", "", cat("a", shape(ne), " with NaN, inf, -0 to [-1,2], transposed to [-0.5,0.25]"), exact(),
          [=](CaseGraph& c) {
            std::vector<float> v = c.normal_values(ne[0] * ne[1] * ne[2] * ne[3], 3.0f);
            const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f};
            for (size_t i = 0; i < v.size(); i += 5) v[i] = specials[(i / 5) % 4];
            Tensor* x = c.leaf(DType::F32, ne, v);
            return std::vector<Tensor*>{clamp(c.g, x, -1.0f, 2.0f), clamp(c.g, transpose(c.g, x), -0.5f, 0.25f)};
          });
  t.add("clamp", "", "a{1,40,1,1} from the smallest normal half", exact(), [](CaseGraph& c) {
    return clamp(c.g, c.normal(DType::F32, {1, 40, 1, 1}, 1e-4f), 6.103515625e-5f, INFINITY);
  });
}

void div_cases(Table& t) {
  // The routing weights' normalization: [U, N] / [1, N].
  for (int64_t k : {1, 2, 8, 33})
    t.add("div", "", cat("a{", k, ",6,1,1} by its clamped sum_rows"), exact_on_cpu(), [=](CaseGraph& c) {
      Tensor* w = c.uniform(DType::F32, {k, 6, 1, 1}, 0.01f, 1);
      return div(c.g, w, clamp(c.g, sum_rows(c.g, w), 6.103515625e-5f, INFINITY));
    });
  const std::pair<Shape, Shape> shapes[] = {
      {{1, 1, 1, 1}, {1, 1, 1, 1}},   {{33, 7, 3, 2}, {33, 1, 3, 1}},     {{7, 5, 4, 1}, {1, 5, 1, 1}},
      {{2, 37, 1, 1}, {1, 37, 1, 1}}, {{4096, 3, 1, 1}, {4096, 3, 1, 1}},
  };
  for (const auto& [na, nb] : shapes)
    t.add("div", "", cat("a", shape(na), " b", shape(nb), ", and transposed by b^2"), exact_on_cpu(),
          [=](CaseGraph& c) {
            Tensor* a = c.normal(DType::F32, na);
            Tensor* b = c.normal(DType::F32, nb);
            return std::vector<Tensor*>{div(c.g, a, b), div(c.g, transpose(c.g, a), transpose(c.g, mul(c.g, b, b)))};
          });
}

// =============================================================================
// cpy, cont

void cpy_cases(Table& t) {
  for (DType from : kFloatTypes)
    for (DType to : kFloatTypes)
      for (int64_t n : {1, 7, 33, 1000}) {
        OpCase& oc =
            t.add("cpy", "", cat(tname(from), " to ", tname(to), " {", n, ",3,1,1} in [-70000,70000)"), exact(),
                  [=](CaseGraph& c) {  // beyond F16's range too
                    Tensor* a = c.uniform(from, {n, 3, 1, 1}, -70000, 70000);
                    return cpy(c.g, a, c.uniform(to, {n, 3, 1, 1}, -1, 1, Mem::Device));
                  });
        if (from == DType::F32 && to == DType::F16 && n == 1000)  // a 512-token prompt's keys into an F16 cache
          oc.perf = [](CaseGraph& c) {
            Tensor* a = c.uniform(DType::F32, {256, 512, 1, 1});
            return std::vector<Tensor*>{cpy(c.g, a, c.uniform(DType::F16, {256, 512, 1, 1}, -1, 1, Mem::Device))};
          };
      }
  // The KV cache as the models write it, then the whole cache compared
  // (nothing else written). K: [d, h, n] into a 1-D view at the tokens'
  // offset; V: stored transposed, [n, d*h] with rows ctx apart, at column pos0.
  for (DType type : {DType::F16, DType::BF16, DType::F32}) {
    const int64_t d = 8, h = 2, ctx = 20, n = 5, pos0 = 7;
    const size_t es = type_traits(type).block_bytes;
    t.add("cpy", "", cat("F32 keys{8,2,5} into a ", tname(type), " cache{16,20} at 7"), exact(), [=](CaseGraph& c) {
      Tensor* cache = c.uniform(type, {d * h, ctx, 1, 1}, -1, 1, Mem::Device);
      Tensor* k = c.uniform(DType::F32, {d, h, n, 1}, -3, 3);
      c.g.build(cpy(c.g, k, view(c.g, cache, {d * h * n}, {}, pos0 * d * h * es)));
      return std::vector<Tensor*>{cache};
    });
    t.add("cpy", "", cat("F32 values{16,5} transposed into a ", tname(type), " cache{20,16} at 7"), exact(),
          [=](CaseGraph& c) {
            Tensor* cache = c.uniform(type, {ctx, d * h, 1, 1}, -1, 1, Mem::Device);
            Tensor* v = c.uniform(DType::F32, {d * h, n, 1, 1}, -3, 3);
            c.g.build(cpy(c.g, transpose(c.g, v), view(c.g, cache, {n, d * h}, {ctx * es}, pos0 * es)));
            return std::vector<Tensor*>{cache};
          });
    // Keys and values into caches, read back through views that depend on the copies.
    t.add("cpy", "", cat("F32 keys and values into ", tname(type), " caches, read back"), exact(), [=](CaseGraph& c) {
      const int64_t D = 8, H = 2, N = 3, ctx7 = 7, past = 2;
      Tensor* ck = c.normal(type, {D * H * ctx7, 1, 1, 1}, 1.0f, Mem::Device);
      Tensor* cv = c.normal(type, {D * H * ctx7, 1, 1, 1}, 1.0f, Mem::Device);
      Tensor* k = c.normal(DType::F32, {D, H, N, 1});
      Tensor* v = c.normal(DType::F32, {D * H, N, 1, 1});
      Tensor* ks = cpy(c.g, k, view(c.g, ck, {N * D * H}, {}, past * D * H * es));
      Tensor* vs = cpy(c.g, transpose(c.g, v), view(c.g, cv, {N, D * H}, {ctx7 * es}, past * es));
      Tensor* kc = view(c.g, ck, {D, past + N, H}, {D * H * es, D * es}, 0);
      Tensor* vc = view(c.g, cv, {past + N, D, H}, {ctx7 * es, ctx7 * D * es}, 0);
      kc->src[1] = ks;
      vc->src[1] = vs;
      return std::vector<Tensor*>{ks, vs, cont(c.g, kc), cont(c.g, vc)};
    });
  }
  for (DType from : {DType::F16, DType::BF16})
    t.add("cpy", "", cat(tname(from), " transposed{7,3} to F32"), exact(), [=](CaseGraph& c) {
      Tensor* dst = c.normal(DType::F32, {7, 3, 1, 1}, 1.0f, Mem::Device);
      return cpy(c.g, transpose(c.g, c.normal(from, {3, 7, 1, 1})), dst);
    });
  // Other shapes with the same element count, into a strided destination.
  t.add("cpy", "", "F32{6,4} to an F16 view{8,3} with gaps", exact(), [](CaseGraph& c) {
    Tensor* a = c.uniform(DType::F32, {6, 4, 1, 1});
    Tensor* buf = c.uniform(DType::F16, {10, 3, 1, 1}, -1, 1, Mem::Device);
    c.g.build(cpy(c.g, a, view(c.g, buf, {8, 3}, {buf->nb[1]}, 2 * sizeof(uint16_t))));
    return std::vector<Tensor*>{buf};
  });
  t.add("cpy", "", "BF16 permuted{5,7,3} to F32{15,7}", exact(), [](CaseGraph& c) {
    Tensor* a = permute(c.g, c.uniform(DType::BF16, {3, 5, 7, 1}), 2, 0, 1, 3);
    return cpy(c.g, a, c.uniform(DType::F32, {15, 7, 1, 1}, -1, 1, Mem::Device));
  });
}

void cont_cases(Table& t) {
  for (DType type : kFloatTypes) {
    const std::string ty = tname(type);
    t.add("cont", "", ty + " permuted{5,3,7,2}", exact(), [=](CaseGraph& c) {
       return cont(c.g, permute(c.g, c.uniform(type, {5, 7, 3, 2}), 0, 2, 1, 3));
     }).perf = [=](CaseGraph& c) {  // attention's merged heads: [64, 512, 32] -> [64, 32, 512]
      return std::vector<Tensor*>{cont(c.g, permute(c.g, c.uniform(type, {64, 512, 32, 1}), 0, 2, 1, 3))};
    };
    t.add("cont", "", ty + " transposed{17,33}", exact(), [=](CaseGraph& c) {
      return cont(c.g, transpose(c.g, c.uniform(type, {33, 17, 1, 1})));
    });
    t.add("cont", "", ty + " contiguous{9,4}", exact(), [=](CaseGraph& c) {
      return cont(c.g, c.uniform(type, {9, 4, 1, 1}));
    });
    t.add("cont", "", ty + " {5,7,3,2} permuted (2,0,3,1) and transposed", exact(), [=](CaseGraph& c) {
      Tensor* x = c.normal(type, {5, 7, 3, 2});
      return std::vector<Tensor*>{cont(c.g, permute(c.g, x, 2, 0, 3, 1)), cont(c.g, transpose(c.g, x))};
    });
  }
}

// =============================================================================
// graphs of many ops

// An attention + feed-forward block touching every op, with F16 weights and
// an F16 KV cache (in device memory), n_tokens new tokens after pos0 cached
// ones. Its result depends on F16 roundings of computed values (the cache),
// where backends may round differently by one F16 ulp: NMSE 1e-6.
std::vector<Tensor*> transformer_block(CaseGraph& c, int64_t n_tokens, int64_t pos0) {
  const int64_t dim = 64, hd = 16, heads = 4, kv_heads = 2, ctx = 32, ff = 96;
  Graph& g = c.g;
  Tensor* tok_embd = c.uniform(DType::F16, {dim, 50, 1, 1});
  std::vector<int32_t> toks, pos;
  for (int64_t i = 0; i < n_tokens; ++i) {
    toks.push_back(static_cast<int32_t>((i * 7 + 3) % 50));
    pos.push_back(static_cast<int32_t>(pos0 + i));
  }
  Tensor* x = get_rows(g, tok_embd, c.ints(toks));
  Tensor* positions = c.ints(pos);
  Tensor* norm_w = c.uniform(DType::F32, {dim, 1, 1, 1}, 0.5f, 1.5f);
  Tensor* wq = c.uniform(DType::F16, {dim, hd * heads, 1, 1}, -0.2f, 0.2f);
  Tensor* wk = c.uniform(DType::F16, {dim, hd * kv_heads, 1, 1}, -0.2f, 0.2f);
  Tensor* wv = c.uniform(DType::BF16, {dim, hd * kv_heads, 1, 1}, -0.2f, 0.2f);
  Tensor* wo = c.uniform(DType::F32, {hd * heads, dim, 1, 1}, -0.2f, 0.2f);
  Tensor* w_gate = c.uniform(DType::F16, {dim, ff, 1, 1}, -0.2f, 0.2f);
  Tensor* w_up = c.uniform(DType::F16, {dim, ff, 1, 1}, -0.2f, 0.2f);
  Tensor* w_down = c.uniform(DType::F16, {ff, dim, 1, 1}, -0.2f, 0.2f);
  Tensor* k_cache = c.uniform(DType::F16, {hd * kv_heads * ctx, 1, 1, 1}, -1, 1, Mem::Device);
  Tensor* v_cache = c.uniform(DType::F16, {ctx, hd * kv_heads, 1, 1}, -1, 1, Mem::Device);
  const int64_t n_kv = pos0 + n_tokens;
  Tensor* mask = causal_mask(c, n_kv, n_tokens, false);

  Tensor* cur = mul(g, rms_norm(g, x, 1e-5f), norm_w);
  const int hdi = static_cast<int>(hd);
  Tensor* q =
      rope(g, reshape(g, mul_mat(g, wq, cur), {hd, heads, n_tokens}), positions, hdi, RopeMode::NeoX, 10000.0f, 1.0f);
  Tensor* k = rope(g, reshape(g, mul_mat(g, wk, cur), {hd, kv_heads, n_tokens}), positions, hdi, RopeMode::NeoX,
                   10000.0f, 1.0f);
  Tensor* v = mul_mat(g, wv, cur);  // [hd * kv_heads, n_tokens]
  const size_t es = sizeof(uint16_t);
  Tensor* k_store = cpy(g, k, view(g, k_cache, {hd * kv_heads * n_tokens}, {}, pos0 * hd * kv_heads * es));
  Tensor* v_store = cpy(g, transpose(g, v), view(g, v_cache, {n_tokens, hd * kv_heads}, {ctx * es}, pos0 * es));
  Tensor* kv_k = view(g, k_cache, {hd, kv_heads, n_kv}, {hd * es, hd * kv_heads * es}, 0);
  Tensor* kv_v = view(g, v_cache, {n_kv, hd, kv_heads}, {ctx * es, ctx * hd * es}, 0);
  // The views read the cache after the copies wrote it: make them depend on them.
  kv_k->src[1] = k_store;
  kv_v->src[1] = v_store;
  Tensor* kq = mul_mat(g, permute(g, kv_k, 0, 2, 1, 3), permute(g, q, 0, 2, 1, 3));  // [n_kv, n, heads]
  kq = soft_max(g, kq, mask, 1.0f / 4.0f);
  Tensor* kqv = mul_mat(g, kv_v, kq);                   // [hd, n, heads]
  Tensor* attn = cont(g, permute(g, kqv, 0, 2, 1, 3));  // [hd, heads, n]
  attn = mul_mat(g, wo, reshape(g, attn, {hd * heads, n_tokens}));
  Tensor* h = add(g, attn, x);
  Tensor* hn = rms_norm(g, h, 1e-5f);
  Tensor* gate = silu(g, mul_mat(g, w_gate, hn));
  Tensor* up = mul_mat(g, w_up, hn);
  return {add(g, mul_mat(g, w_down, mul(g, gate, up)), scale(g, h, 0.5f))};
}

// One llama layer as the graph builder makes it (grouped-query attention,
// rope, an F16 KV cache in device memory written by cpy and read through
// views, masked softmax, SwiGLU, quantized weights), on N new tokens after 3
// cached ones.
std::vector<Tensor*> llama_layer(CaseGraph& c, int64_t N) {
  const int64_t E = 64, H = 4, Hkv = 2, D = 16, F = 96, ctx = 12, past = 3, n_kv = past + N;
  const size_t es = 2, k_row = Hkv * D * es;
  Graph& g = c.g;
  Tensor* ck = c.normal(DType::F16, {Hkv * D * ctx, 1, 1, 1}, 1.0f, Mem::Device);
  Tensor* cv = c.normal(DType::F16, {Hkv * D * ctx, 1, 1, 1}, 1.0f, Mem::Device);
  Tensor* embd = c.normal(DType::Q8_0, {E, 50, 1, 1});
  Tensor* wq = c.normal(DType::Q4_0, {E, E, 1, 1}, 0.2f);
  Tensor* wk = c.normal(DType::Q8_0, {E, Hkv * D, 1, 1}, 0.2f);
  Tensor* wv = c.normal(DType::F16, {E, Hkv * D, 1, 1}, 0.2f);
  Tensor* wo = c.normal(DType::BF16, {E, E, 1, 1}, 0.2f);
  Tensor* wg = c.normal(DType::Q8_0, {E, F, 1, 1}, 0.2f);
  Tensor* wu = c.normal(DType::Q4_0, {E, F, 1, 1}, 0.2f);
  Tensor* wd = c.normal(DType::F32, {F, E, 1, 1}, 0.2f);
  Tensor* norm_w = c.normal(DType::F32, {E, 1, 1, 1});
  std::vector<int32_t> tokens, positions;
  std::vector<float> m(static_cast<size_t>(n_kv * N));
  for (int64_t j = 0; j < N; ++j) {
    tokens.push_back(static_cast<int32_t>((j * 17 + 5) % 50));
    positions.push_back(static_cast<int32_t>(past + j));
    for (int64_t i = 0; i < n_kv; ++i) m[j * n_kv + i] = i > past + j ? -INFINITY : 0.0f;
  }
  Tensor* pos = c.ints(positions);
  Tensor* mask = c.leaf(DType::F32, {n_kv, N, 1, 1}, m);

  Tensor* x = get_rows(g, embd, c.ints(tokens));
  Tensor* cur = mul(g, rms_norm(g, x, 1e-5f), norm_w);
  Tensor* q = rope(g, reshape(g, mul_mat(g, wq, cur), {D, H, N}), pos, D, RopeMode::Normal, 10000.0f, 1.0f);
  Tensor* k = rope(g, reshape(g, mul_mat(g, wk, cur), {D, Hkv, N}), pos, D, RopeMode::Normal, 10000.0f, 1.0f);
  Tensor* v = mul_mat(g, wv, cur);
  Tensor* ks = cpy(g, k, view(g, ck, {N * Hkv * D}, {}, past * k_row));
  Tensor* vs = cpy(g, transpose(g, v), view(g, cv, {N, Hkv * D}, {ctx * es}, past * es));
  Tensor* kc = view(g, ck, {D, n_kv, Hkv}, {k_row, D * es}, 0);
  Tensor* vc = view(g, cv, {n_kv, D, Hkv}, {ctx * es, ctx * D * es}, 0);
  kc->src[1] = ks;
  vc->src[1] = vs;
  Tensor* kq = soft_max(g, mul_mat(g, kc, permute(g, q, 0, 2, 1, 3)), mask, 0.25f);
  Tensor* merged = cont(g, permute(g, mul_mat(g, vc, kq), 0, 2, 1, 3));
  Tensor* attn = add(g, mul_mat(g, wo, reshape(g, merged, {E, N})), x);
  Tensor* h = mul(g, rms_norm(g, attn, 1e-5f), norm_w);
  Tensor* ffn = mul_mat(g, wd, mul(g, silu(g, mul_mat(g, wg, h)), mul_mat(g, wu, h)));
  return {add(g, ffn, attn), cont(g, kc), cont(g, vc)};
}

// A mixture-of-experts feed-forward block as the graph builder's route and
// experts build it (softmax router, top-k, the selected probabilities
// renormalized by their clamped sum, up / gate / down expert matmuls, slots
// summed), for prompts and generation.
std::vector<Tensor*> moe_ffn(CaseGraph& c, DType type, int64_t N) {
  const int64_t D = 256, F = 256, E = 8, U = 2;
  Graph& g = c.g;
  Tensor* router = c.normal(DType::F32, {D, E, 1, 1}, 0.1f, Mem::Device);
  Tensor* w_up = c.normal(type, {D, F, E, 1}, 0.1f, Mem::Device);
  Tensor* w_gate = c.normal(type, {D, F, E, 1}, 0.1f, Mem::Device);
  Tensor* w_down = c.normal(type, {F, D, E, 1}, 0.1f, Mem::Device);
  Tensor* cur = rms_norm(g, c.normal(DType::F32, {D, N, 1, 1}), 1e-5f);
  Tensor* probs = soft_max(g, mul_mat(g, router, cur), nullptr, 1.0f);
  Tensor* selected = top_k(g, probs, U);
  Tensor* w = reshape(g, get_rows(g, reshape(g, probs, {1, E, N}), selected), {U, N});
  Tensor* sum = clamp(g, sum_rows(g, w), 6.103515625e-5f, INFINITY);
  Tensor* weights = reshape(g, div(g, w, sum), {1, U, N});
  Tensor* x = reshape(g, cur, {D, 1, N});
  Tensor* up = mul_mat_id(g, w_up, x, selected);
  Tensor* gate = silu(g, mul_mat_id(g, w_gate, x, selected));
  Tensor* down = mul_mat_id(g, w_down, mul(g, gate, up), selected);
  Tensor* weighted = mul(g, down, weights);
  Tensor* out = nullptr;
  for (int64_t u = 0; u < U; ++u) {
    Tensor* slot = view(g, weighted, {D, N}, {weighted->nb[2]}, u * weighted->nb[1]);
    out = out ? add(g, out, slot) : slot;
  }
  return {out, selected};
}

// kq = K·Q and kqv = V·softmax with the llama graph's views: a cache view of
// keys, permuted queries, a transposed view of values.
std::vector<Tensor*> attention_views(CaseGraph& c, DType type, int64_t N) {
  const int64_t D = 16, H = 3, ctx = 40, n_kv = 11 + N;
  const size_t es = type_traits(type).block_bytes;
  Graph& g = c.g;
  Tensor* ck = c.normal(type, {D * H * ctx, 1, 1, 1});
  Tensor* cv = c.normal(type, {D * H * ctx, 1, 1, 1});
  Tensor* q = c.normal(DType::F32, {D, H, N, 1});
  Tensor* kc = view(g, ck, {D, n_kv, H}, {D * H * es, D * es}, 0);
  Tensor* vc = view(g, cv, {n_kv, D, H}, {ctx * es, ctx * D * es}, 0);
  Tensor* kq = soft_max(g, mul_mat(g, kc, permute(g, q, 0, 2, 1, 3)), nullptr, 0.25f);
  return {kq, cont(g, permute(g, mul_mat(g, vc, kq), 0, 2, 1, 3))};
}

void block_cases(Table& t) {
  for (auto [n, pos0] : {std::pair<int64_t, int64_t>{1, 9}, {12, 0}, {9, 5}})
    t.add("block", "transformer", cat("attention + feed-forward, ", n, " tokens after ", pos0), graph_nmse(1e-6),
          [=](CaseGraph& c) { return transformer_block(c, n, pos0); })
        .seed = 5;
  for (int64_t n : {4, 1})
    t.add("block", "llama_layer", cat("llama layer, ", n, " tokens after 3"), graph_nmse(1e-7, true),
          [=](CaseGraph& c) { return llama_layer(c, n); });
  for (DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_K})
    for (int64_t n : {1, 3, 70})
      weight_type_case(
          t.add("block", "moe_ffn", cat("MoE feed-forward ", tname(type), " E=8 U=2 N=", n),
                graph_nmse(1e-7, type_traits(type).is_quantized), [=](CaseGraph& c) { return moe_ffn(c, type, n); }),
          type);
  for (DType type : kFloatTypes)
    for (int64_t n : {1, 5, 20})
      t.add("block", "attention", cat("attention views ", tname(type), " N=", n), graph_nmse(1e-7),
            [=](CaseGraph& c) { return attention_views(c, type, n); });
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    Table t;
    get_rows_cases(t);
    mul_mat_shape_cases(t);
    mul_mat_size_cases(t);
    mul_mat_broadcast_cases(t);
    mul_mat_view_cases(t);
    mul_mat_type_cases(t);
    mul_mat_id_cases(t);
    binary_cases(t, "add", add);
    binary_cases(t, "mul", mul);
    row_piece_cases(t);
    scale_cases(t);
    activation_cases(t, "silu", silu);
    activation_cases(t, "gelu", gelu);
    activation_cases(t, "sigmoid", sigmoid);
    activation_cases(t, "softplus", softplus);
    activation_cases(t, "tanh", tanh);
    t.add("gelu", "", "a{257,3,1,1} sigma 120", gelu_tolerance(),
          [](CaseGraph& c) {  // Vulkan's clamps: x, and 0 from x = -10
            return gelu(c.g, c.normal(DType::F32, {257, 3, 1, 1}, 120.0f));
          });
    rms_norm_cases(t);
    rope_cases(t);
    rope_multi_cases(t);
    soft_max_cases(t);
    glu_cases(t);
    add_id_cases(t);
    l2_norm_cases(t);
    concat_cases(t);
    fill_set_rows_cases(t);
    ssm_conv_cases(t);
    gated_delta_net_cases(t);
    argsort_cases(t);
    sum_rows_clamp_cases(t);
    div_cases(t);
    cpy_cases(t);
    cont_cases(t);
    block_cases(t);
    return std::move(t.cases);
  }();
  return cases;
}

}  // namespace qlens::opcases
