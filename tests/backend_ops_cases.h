// The op cases every backend is tested on (test_backend_ops.cpp) and timed
// on (bench/bench_backend_ops.cpp), as ggml's test-backend-ops: each case is
// written once, as a graph with random leaves from a seed, the tolerance its
// results are held to against the reference backend, and the backends that
// must run it (a backend may decline a case through supports_op only where
// the case allows it). No gtest here: the benchmark reads the table too.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "qlens/backend.h"
#include "qlens/tensor.h"

namespace qlens::opcases {

using Shape = std::array<int64_t, kMaxDims>;

// The kinds of backend a case runs on: the CPU (every instruction set this
// machine has) and devices (every Vulkan device). A bit set.
enum BackendKind : unsigned { kCpu = 1u << 0, kVulkan = 1u << 1 };

// Where a leaf lives when the case runs on a device: host leaves are copied
// in by the scheduler (as a model's inputs are), device leaves are in the
// device's memory (weights, the KV cache a cpy writes). On the CPU both are
// host memory.
enum class Mem { Host, Device };

// What a case's leaves hold: the values drawn, or what the reference turns
// into the matmul bounds (quantized leaves become F32 of their dequantized
// values' magnitudes in both):
//  - Magnitudes: |x|, so that a product gives sum_k |a_ik||b_kj|;
//  - ActivationSteps: float leaves (activations, where weights are
//    quantized) hold their row's largest magnitude / 200 everywhere, more
//    than the step of 8-bit rounding (Q8_0's d = amax / 127 stored as F16:
//    at most 0.56 d off), so that a product bounds the error of activations
//    rounded to 8 bits: sum_k |a_ik| amax_j / 200.
// Shapes: no data at all (for walking the table's graphs).
enum class Values { Drawn, Magnitudes, ActivationSteps, Shapes };

// What building a case once computed, for its later builds (the reference's
// three, each backend's, each thread count's): the values it drew and the
// bytes of its leaves, so that quantizing weights is done once per case.
struct CaseMemo {
  std::vector<std::vector<float>> draws;
  std::map<std::pair<int, Values>, std::pair<DType, std::vector<char>>> leaves;
};

// The graph of one case and its leaves. Values come from the case's seed in
// the order the leaves are made, so every build of a case (the reference's,
// each backend's) gets the same inputs.
class CaseGraph {
 public:
  // device: where Mem::Device leaves go (null: host memory); all_in_device:
  // every leaf there (the benchmark: only kernels are timed); memo: shared
  // by the builds of one case (null: none).
  explicit CaseGraph(uint32_t seed, Backend* device = nullptr, Values values = Values::Drawn,
                     bool all_in_device = false, CaseMemo* memo = nullptr);

  Graph g;

  // Uniform values in [lo, hi), or normal ones of mean 0, rounded to `type`.
  Tensor* uniform(DType type, Shape ne, float lo = -1.0f, float hi = 1.0f, Mem mem = Mem::Host);
  Tensor* normal(DType type, Shape ne, float sigma = 1.0f, Mem mem = Mem::Host);
  // Given values (logical order), rounded to `type`.
  Tensor* leaf(DType type, Shape ne, const std::vector<float>& values, Mem mem = Mem::Host);
  // I32 values; ne defaults to {values.size()}.
  Tensor* ints(const std::vector<int32_t>& values, Shape ne = {0, 1, 1, 1}, Mem mem = Mem::Host);
  // Draws from the case's stream, for leaves whose values are then edited.
  std::vector<float> uniform_values(int64_t n, float lo, float hi);
  std::vector<float> normal_values(int64_t n, float sigma);

 private:
  std::vector<float> draw(int64_t n, const std::function<float()>& next);
  std::vector<char> derive(DType& type, Shape ne, const std::vector<char>& drawn) const;
  Tensor* place(Tensor* t, const std::vector<char>& bytes, Mem mem);
  std::mt19937 rng_;
  Backend* device_;
  Values values_;
  bool all_in_device_;
  CaseMemo* memo_;
  size_t draws_ = 0;
  int count_ = 0;
  std::deque<std::vector<char>> host_;
  std::deque<std::unique_ptr<Buffer>> buffers_;
};

// How one backend's results must match the reference's.
struct Bound {
  bool exact = false;  // every element the same float bits (NaN matches NaN)
  // Otherwise NMSE = sum (got - ref)^2 / sum ref^2 <= nmse (0: equal as
  // numbers, -0 == 0) and NaN exactly where the reference has NaN...
  double nmse = 0;
  // ...0 where it has 0 (masked softmax entries, empty products)...
  bool zeros = false;
  // ...and, when > 0, per element |got - ref| <= matmul * sum_k |a_ik||b_kj|
  double matmul = 0;
  // (+ sum_k |a_ik| amax_j / 200 where the backend rounds activations to 8
  // bits: the CPU's dot products with quantized weights, as ggml's)
  bool quantized_activations = false;
  // Outputs (bit k: output k) this backend is not held to: an order it does
  // not promise (the CPU's argsort of equal values).
  unsigned ignored_outputs = 0;
};

// The bound on the CPU and on devices: the CPU's kernels round as the
// reference does where one rounding per element is all there is, devices
// may take the driver's exp, sin, cos and division (Vulkan allows them ulps
// of error) and float sums where the reference sums in double.
struct Tolerance {
  Bound cpu, device;
};

// Builds the case into cg and returns the tensors to compare: nodes, or the
// leaf a cpy wrote into (the build then adds the cpy itself with g.build).
using Build = std::function<std::vector<Tensor*>(CaseGraph& cg)>;

// Undoes what a case's CPU setting did when it goes out of scope.
class Restore {
 public:
  explicit Restore(std::function<void()> undo = {}) : undo_(std::move(undo)) {}
  Restore(Restore&& other) noexcept : undo_(std::exchange(other.undo_, nullptr)) {}
  Restore& operator=(Restore&&) = delete;
  ~Restore() {
    if (undo_) undo_();
  }

 private:
  std::function<void()> undo_;
};

struct OpCase {
  std::string op;     // what it tests: "mul_mat", "soft_max", "block" (graphs of many ops)
  std::string group;  // the test that runs it, with its op: "shapes" -> BackendOps.mul_mat/shapes
  std::string name;   // what it is, unique in its op: "F16 K=7 M=17 N=3"
  Build build;
  Tolerance tol;
  unsigned must_run = kCpu | kVulkan;  // the backends that may not decline it
  // Backends it is not run on: a gap it found in a backend, said (and to be
  // fixed) where the case is made. Counted and listed by the test.
  unsigned not_run_on = 0;
  uint32_t seed = 1;
  // The shape bench_backend_ops times it at, where the test's is too small
  // to time (empty: the case is not timed unless asked for).
  Build perf;
  // A CPU setting the case runs under on the CPU backends (empty: none).
  std::function<Restore()> cpu_setting;
  // The thread counts whose results must equal one thread's on the CPU, bit
  // for bit (each output element is computed by one thread in an order that
  // does not depend on the split). 2, 3 and 7 (more threads than cores) cost
  // ten times one thread's run on 2 cores: the weight-type grids take 3 only.
  std::vector<int> cpu_threads = {2, 3, 7};
};

// Every case, grouped by op and group in table order.
const std::vector<OpCase>& op_cases();

}  // namespace qlens::opcases
