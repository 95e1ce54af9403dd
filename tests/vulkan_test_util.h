// What the Vulkan test suites share: one Vulkan backend per process, the
// reference backend, random leaves (in host or device memory), and
// compare(): a graph run on Vulkan (+ reference fallback) against the
// reference backend alone. Only included where QLENS_VULKAN is defined.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/vulkan/vulkan_backend.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/sched.h"
#include "qlens/tensor.h"

namespace qlens::vktest {

// One backend for the whole suite: pipelines are built once.
inline Backend* vulkan_backend() {
  static std::unique_ptr<Backend> backend = vulkan::devices().empty() ? nullptr : vulkan::make_backend(0);
  return backend.get();
}

inline Backend& reference() {
  static std::unique_ptr<Backend> backend = make_reference_backend();
  return *backend;
}

#define REQUIRE_VULKAN()                                                                          \
  if (!vulkan_backend())                                                                          \
  GTEST_SKIP() << "no Vulkan device (install a driver, e.g. mesa-vulkan-drivers for lavapipe)"

// Leaves with random data from a seed, so that two graphs built with the same
// seed get the same inputs. Leaves live in host memory unless `device` is
// given (then in a buffer of that backend).
class Leaves {
 public:
  explicit Leaves(uint32_t seed, Backend* device = nullptr) : rng_(seed), device_(device) {}

  Tensor* random(Graph& g, DType type, std::array<int64_t, 4> ne, float scale = 1.0f, bool in_device = false) {
    Tensor* t = g.new_tensor(type, ne, "leaf" + std::to_string(++count_));
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(t->nelements());
    for (float& x : v) x = d(rng_);
    const TypeTraits& tt = type_traits(type);
    std::vector<char> bytes(t->nbytes());
    tt.from_float(v.data(), bytes.data(), t->nelements());
    place(*t, bytes, in_device);
    return t;
  }

  Tensor* indices(Graph& g, std::vector<int32_t> values) {
    return indices(g, values, {static_cast<int64_t>(values.size()), 1, 1, 1});
  }
  // I32 values of shape ne (dim 0 fastest), in host memory unless in_device.
  Tensor* indices(Graph& g, const std::vector<int32_t>& values, std::array<int64_t, 4> ne, bool in_device = false) {
    Tensor* t = g.new_tensor(DType::I32, ne, "idx" + std::to_string(++count_));
    if (static_cast<int64_t>(values.size()) != t->nelements()) throw Error("indices: values do not fill the shape");
    std::vector<char> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    place(*t, bytes, in_device);
    return t;
  }

 private:
  void place(Tensor& t, const std::vector<char>& bytes, bool in_device) {
    if (in_device && device_) {
      auto& buf = buffers_.emplace_back(device_->alloc_buffer(bytes.size()));
      t.buffer = buf.get();
      t.data = buf->base();
      tensor_write(t, bytes.data(), 0, bytes.size());
    } else {
      t.data = storage_.emplace_back(bytes).data();
    }
  }

  std::mt19937 rng_;
  Backend* device_;
  int count_ = 0;
  std::deque<std::vector<char>> storage_;
  std::deque<std::unique_ptr<Buffer>> buffers_;
};

using Build = std::function<std::vector<Tensor*>(Graph&, Leaves&)>;

inline double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

// Runs `build` on Vulkan (+ reference fallback) and on the reference alone;
// checks every computing node ran on Vulkan (unless `on_vulkan` is false) and
// returns the worst NMSE. `bitwise` asks for identical values.
inline double compare(const std::string& what, const Build& build, bool bitwise = false, bool on_vulkan = true) {
  constexpr uint32_t kSeed = 1234;
  Graph g_vk, g_ref;
  Leaves l_vk(kSeed, vulkan_backend()), l_ref(kSeed);
  const auto outs_vk = build(g_vk, l_vk);
  const auto outs_ref = build(g_ref, l_ref);
  for (Tensor* t : outs_vk) g_vk.build(t), t->flags |= kFlagOutput;
  for (Tensor* t : outs_ref) g_ref.build(t), t->flags |= kFlagOutput;
  Scheduler both({vulkan_backend(), &reference()});
  both.allocate(g_vk);
  EXPECT_EQ(both.compute(g_vk), ComputeStatus::Done);
  Scheduler alone(reference());
  alone.allocate(g_ref);
  alone.compute(g_ref);
  if (on_vulkan) {
    for (const Tensor* n : g_vk.nodes())  // views of host leaves stay with their leaf: no work anyway
      if (!op_is_view(n->op)) {
        EXPECT_EQ(both.backend_of(*n), vulkan_backend()) << what << ": node '" << n->name << "' ran elsewhere";
      }
  }
  double worst = 0;
  for (size_t i = 0; i < outs_vk.size(); ++i) {
    const std::vector<float> got = tensor_to_f32(*outs_vk[i]), ref = tensor_to_f32(*outs_ref[i]);
    EXPECT_EQ(got.size(), ref.size());
    if (bitwise) {
      for (size_t k = 0; k < ref.size(); ++k)
        if (!(got[k] == ref[k] || (std::isnan(got[k]) && std::isnan(ref[k])))) {
          ADD_FAILURE() << what << ": element " << k << " is " << got[k] << ", expected " << ref[k];
          break;
        }
    }
    worst = std::max(worst, nmse(got, ref));
  }
  std::printf("  %-58s nmse %.2e\n", what.c_str(), worst);
  EXPECT_LE(worst, 1e-7) << what;
  return worst;
}

}  // namespace qlens::vktest
