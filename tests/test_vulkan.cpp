// What the Vulkan backend does beyond computing ops (each op case of
// backend_ops_cases.cpp runs on every Vulkan device in test_backend_ops.cpp,
// against the reference backend): the devices it lists, expert ids out of
// range, weights resident in device memory, and what it declines going to
// the CPU. The taps: test_vulkan_taps.cpp; errors: test_vulkan_errors.cpp.
// Every test skips when qlens::vulkan::devices() is empty.
#include <gtest/gtest.h>

#ifdef QLENS_VULKAN

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/vulkan/vk_backend.h"
#include "vulkan_test_util.h"

namespace qlens {
namespace {

using namespace vktest;

TEST(Vulkan, ListsDevicesAndRejectsBadIndex) {
  const auto devs = vulkan::devices();
  if (devs.empty()) GTEST_SKIP() << "no Vulkan device (install a driver, e.g. mesa-vulkan-drivers for lavapipe)";
  for (size_t i = 0; i < devs.size(); ++i) {
    EXPECT_EQ(devs[i].id, "vulkan:" + std::to_string(i));
    EXPECT_FALSE(devs[i].name.empty());
    EXPECT_FALSE(devs[i].kind.empty());
    std::printf("  %s: %s, %s, %.1f GiB\n", devs[i].id.c_str(), devs[i].name.c_str(), devs[i].kind.c_str(),
                devs[i].memory_bytes / 1073741824.0);
  }
  EXPECT_EQ(list_devices().size(), devs.size() + 1);
  try {
    vulkan::make_backend(99);
    ADD_FAILURE() << "make_backend(99) did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vulkan:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_backend("vulkan:99"), Error);
  EXPECT_NE(make_backend("vulkan:0"), nullptr);
}

// VulkanOptions reach the device they are made with: the kernel set, and
// profiling (a table per shader on stderr when the backend closes). The
// memory limit and the shaders made to fail: test_vulkan_errors.cpp.
TEST(Vulkan, OptionsReachTheDevice) {
  REQUIRE_VULKAN();
  for (bool cpu_kernels : {true, false}) {
    VulkanOptions o;
    o.cpu_kernels = cpu_kernels;
    const auto b = make_backend("vulkan:0", 1, {}, o);
    EXPECT_EQ(static_cast<vulkan::VulkanBackend&>(*b).device().is_cpu(), cpu_kernels);
  }
  VulkanOptions o;
  o.profile = true;
  auto vk = make_backend("vulkan:0", 1, {}, o);
  if (static_cast<vulkan::VulkanBackend&>(*vk).device().timestamp_period() <= 0)
    GTEST_SKIP() << "the device has no compute timestamps";
  {
    Graph g;
    Leaves leaves(3, vk.get());
    Tensor* y = scale(g, leaves.random(g, DType::F32, {64, 4, 1, 1}, 1.0f, true), 2.0f);
    y->flags |= kFlagOutput;
    g.build(y);
    Scheduler sched({vk.get(), &reference()});
    sched.allocate(g);
    ASSERT_EQ(sched.compute(g), ComputeStatus::Done);
    ASSERT_EQ(sched.backend_of(*y), vk.get());
  }
  testing::internal::CaptureStderr();
  vk.reset();
  const std::string table = testing::internal::GetCapturedStderr();
  EXPECT_NE(table.find("time per shader"), std::string::npos) << table;
  EXPECT_NE(table.find("scale"), std::string::npos) << table;
}

// Expert ids out of range (from no argsort) give NaN rows on the device,
// as out-of-range get_rows indices do; the other rows are computed.
TEST(Vulkan, MulMatIdOutOfRangeIdsGiveNan) {
  REQUIRE_VULKAN();
  for (int64_t N : {1, 20}) {
    Graph g;
    Leaves l(9, vulkan_backend());
    const int64_t K = 32, M = 5, E = 3, U = 2;
    std::vector<int32_t> ids_values;
    for (int64_t t = 0; t < N; ++t) ids_values.insert(ids_values.end(), {t == 0 ? -1 : 1, t == N - 1 ? 3 : 0});
    Tensor* as = l.random(g, DType::F32, {K, M, E, 1}, 1.0f, true);
    Tensor* b = l.random(g, DType::F32, {K, 1, N, 1}, 1.0f, true);
    Tensor* y = mul_mat_id(g, as, b, l.indices(g, ids_values, {U, N, 1, 1}, true));
    g.build(y);
    Scheduler sched({vulkan_backend(), &reference()});
    sched.allocate(g);
    ASSERT_EQ(sched.compute(g), ComputeStatus::Done);
    ASSERT_EQ(sched.backend_of(*y), vulkan_backend());
    const std::vector<float> v = tensor_to_f32(*y);
    for (int64_t t = 0; t < N; ++t)
      for (int64_t u = 0; u < U; ++u) {
        const bool bad = (u == 0 && t == 0) || (u == 1 && t == N - 1);
        for (int64_t i = 0; i < M; ++i)
          EXPECT_EQ(std::isnan(v[(t * U + u) * M + i]), bad) << "N " << N << " row (" << u << ", " << t << ")";
      }
  }
}

// Rows longer than the argsort shader takes stay with the CPU (the op
// table's argsort of {5000, 2}, which Vulkan may decline).
TEST(Vulkan, ArgSortDeclinesLongRows) {
  REQUIRE_VULKAN();
  Graph probe;
  Tensor* long_rows = argsort_desc(probe, probe.new_tensor(DType::F32, {5000, 2}));
  EXPECT_FALSE(vulkan_backend()->supports_op(*long_rows));
}

TEST(Vulkan, WeightsInDeviceMemoryNeedNoCopy) {
  REQUIRE_VULKAN();
  for (DType t : {DType::Q8_0, DType::F16}) {
    Graph g;
    Leaves l(5, vulkan_backend()), l_host(5);
    Tensor* w = l.random(g, t, {64, 40, 1, 1}, 1.0f, true);
    w->flags |= kFlagWeight;
    Tensor* x = l.random(g, DType::F32, {64, 6, 1, 1});
    Tensor* y = mul_mat(g, w, x);
    g.build(y);
    Scheduler sched({vulkan_backend(), &reference()});
    sched.allocate(g);
    sched.compute(g);
    EXPECT_EQ(sched.backend_of(*y), vulkan_backend());
    ASSERT_EQ(sched.splits().size(), 1u);
    for (const auto& [src, copy] : sched.splits()[0].copies) EXPECT_NE(src, w) << "the weights were copied";
    Graph g2;
    Tensor* w2 = l_host.random(g2, t, {64, 40, 1, 1});  // in the order of the first graph
    Tensor* y2 = mul_mat(g2, w2, l_host.random(g2, DType::F32, {64, 6, 1, 1}));
    g2.build(y2);
    Scheduler alone(reference());
    alone.allocate(g2);
    alone.compute(g2);
    EXPECT_LE(nmse(tensor_to_f32(*y), tensor_to_f32(*y2)), 1e-7);
  }
}

TEST(Vulkan, UnsupportedOpFallsBackToTheCpu) {
  REQUIRE_VULKAN();
  Graph probe;
  for (DType t : {DType::Q8_1, DType::Q8_K}) {  // readable types no shader reads
    Tensor* a = probe.new_tensor(t, {256, 3});
    EXPECT_FALSE(vulkan_backend()->supports_op(*mul_mat(probe, a, probe.new_tensor(DType::F32, {256, 2}))));
    EXPECT_FALSE(vulkan_backend()->supports_op(*get_rows(probe, a, probe.new_tensor(DType::I32, {2}))));
  }
  // A Q8_1 product between Vulkan ops: the scheduler gives it to the host
  // backend, and the graph's result is the reference's.
  struct Built {
    Tensor* product;
    Tensor* out;
  };
  auto build = [](Graph& g, Leaves& l) {
    Tensor* x = rms_norm(g, l.random(g, DType::F32, {64, 5, 1, 1}), 1e-5f);
    Tensor* y = mul_mat(g, l.random(g, DType::Q8_1, {64, 9, 1, 1}), x);
    Tensor* out = silu(g, y);
    out->flags |= kFlagOutput;
    g.build(out);
    return Built{y, out};
  };
  Graph g_vk, g_ref;
  Leaves l_vk(1234, vulkan_backend()), l_ref(1234);
  const Built on_vk = build(g_vk, l_vk), alone = build(g_ref, l_ref);
  Scheduler both({vulkan_backend(), &reference()});
  both.allocate(g_vk);
  ASSERT_EQ(both.compute(g_vk), ComputeStatus::Done);
  EXPECT_EQ(both.backend_of(*on_vk.product), &reference());
  Scheduler ref(reference());
  ref.allocate(g_ref);
  ref.compute(g_ref);
  EXPECT_LE(nmse(tensor_to_f32(*on_vk.out), tensor_to_f32(*alone.out)), 1e-7);
}

}  // namespace
}  // namespace qlens

#else  // !QLENS_VULKAN

TEST(Vulkan, NotBuilt) { GTEST_SKIP() << "built without Vulkan (QLENS_VULKAN=OFF)"; }

#endif
