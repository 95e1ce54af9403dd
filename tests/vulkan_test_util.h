// What the Vulkan test suites share: one Vulkan backend per process, the
// reference backend, random leaves (in host or device memory) and the NMSE.
// (The op cases, on every backend: backend_ops_cases.h.) Only included where
// QLENS_VULKAN is defined.
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
#include "test_util.h"

namespace qlens::vktest {

// One backend for the whole suite: pipelines are built once.
inline Backend* vulkan_backend() {
  static std::unique_ptr<Backend> backend =
      vulkan::devices().empty() ? nullptr : vulkan::make_backend(0, test::vulkan_options());
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

inline double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace qlens::vktest
