// The taps on Vulkan against the host reference (tap_accumulate_values):
// ColumnSumSq within 1e-5 relative (1e-12 seen, in double); Stats and
// ErrorStats within 1e-9 relative, counts exact; also the observe callback on
// a Vulkan node. Every test skips when qlens::vulkan::devices() is empty.
#include <gtest/gtest.h>

#ifdef QLENS_VULKAN

#include "vulkan_test_util.h"

namespace qlens {
namespace {

using namespace vktest;

// A graph whose nodes run on Vulkan with the taps of each kind, run twice.
struct TapGraph {
  Graph g;
  Leaves leaves{77, vulkan_backend()};
  Tensor *x, *y, *z, *other;
  TapGraph() {
    x = permute(g, leaves.random(g, DType::F32, {64, 3, 5, 1}), 0, 2, 1, 3);  // activations {64,5,3}
    Tensor* w = leaves.random(g, DType::Q8_0, {64, 20, 1, 1});
    y = named(mul_mat(g, w, x), "y");                                         // {20,5,3}
    z = named(silu(g, y), "z");
    other = leaves.random(g, DType::F32, {20, 5, 3, 1}, 1.0f, true);          // in device memory
    g.build(z);
  }
};

TEST(VulkanTaps, MatchTheHostReference) {
  REQUIRE_VULKAN();
  TapGraph tg;
  Scheduler sched({vulkan_backend(), &reference()});
  sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
    if (&t == tg.y) r.push_back({TapKind::ColumnSumSq, "imatrix", nullptr});
    if (&t == tg.z) r.push_back({TapKind::Stats, "stats", nullptr});
    if (&t == tg.z) r.push_back({TapKind::ErrorStats, "error", tg.other});
  });
  sched.allocate(tg.g);
  int calls = 0;
  // The observe callback on a Vulkan node: y is read back after its call.
  std::vector<float> y_seen;
  sched.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask) return &t == tg.y;
    y_seen = tensor_to_f32(t);
    ++calls;
    return true;
  });
  TapResult want_cols, want_stats, want_error;
  for (int run = 0; run < 2; ++run) {
    ASSERT_EQ(sched.compute(tg.g), ComputeStatus::Done);
    EXPECT_EQ(sched.backend_of(*tg.z), vulkan_backend());
    const std::vector<float> x = tensor_to_f32(*tg.x), z = tensor_to_f32(*tg.z), o = tensor_to_f32(*tg.other);
    EXPECT_EQ(y_seen, tensor_to_f32(*tg.y));
    tap_accumulate_values(TapKind::ColumnSumSq, x, 64, nullptr, want_cols);
    tap_accumulate_values(TapKind::Stats, z, 20, nullptr, want_stats);
    tap_accumulate_values(TapKind::ErrorStats, z, 20, &o, want_error);
  }
  EXPECT_EQ(calls, 2);
  auto taps = sched.read_taps(true);
  const TapResult& cols = taps.at("imatrix");
  ASSERT_EQ(cols.column_sum_sq.size(), 64u);
  EXPECT_EQ(cols.rows, want_cols.rows);
  double worst = 0;
  for (size_t k = 0; k < 64; ++k)
    worst = std::max(worst, std::fabs(cols.column_sum_sq[k] - want_cols.column_sum_sq[k]) / want_cols.column_sum_sq[k]);
  std::printf("  column_sum_sq worst relative difference %.2e\n", worst);
  EXPECT_LE(worst, 1e-5);
  const NodeStats& s = taps.at("stats").stats;
  EXPECT_EQ(s.count, want_stats.stats.count);
  EXPECT_EQ(s.nan, 0);
  EXPECT_EQ(s.inf, 0);
  EXPECT_DOUBLE_EQ(s.min, want_stats.stats.min);
  EXPECT_DOUBLE_EQ(s.max, want_stats.stats.max);
  EXPECT_NEAR(s.sum, want_stats.stats.sum, 1e-9 * std::fabs(want_stats.stats.sum_sq));
  EXPECT_NEAR(s.sum_sq, want_stats.stats.sum_sq, 1e-9 * want_stats.stats.sum_sq);
  const ErrorStats& e = taps.at("error").error;
  EXPECT_EQ(e.count, want_error.error.count);
  EXPECT_EQ(e.non_finite, 0);
  EXPECT_NEAR(e.sum_sq_diff, want_error.error.sum_sq_diff, 1e-9 * want_error.error.sum_sq_diff);
  EXPECT_NEAR(e.sum_sq_a, want_error.error.sum_sq_a, 1e-9 * want_error.error.sum_sq_a);
  EXPECT_NEAR(e.sum_sq_b, want_error.error.sum_sq_b, 1e-9 * want_error.error.sum_sq_b);
  EXPECT_NEAR(e.sum_ab, want_error.error.sum_ab, 1e-9 * want_error.error.sum_sq_a);
  EXPECT_DOUBLE_EQ(e.max_abs_diff, want_error.error.max_abs_diff);
  // Reset: nothing accumulated after.
  taps = sched.read_taps(true);
  EXPECT_EQ(taps.at("imatrix").rows, 0);
  EXPECT_EQ(taps.at("stats").stats.count, 0);
  EXPECT_EQ(taps.at("error").error.count, 0);
}

TEST(VulkanTaps, StatsCountNonFiniteValues) {
  REQUIRE_VULKAN();
  Graph g;
  Leaves l(3);
  Tensor* x = l.random(g, DType::F32, {300, 7, 1, 1});
  auto* v = static_cast<float*>(x->data);
  v[5] = NAN;
  v[100] = INFINITY;
  v[2000] = -INFINITY;
  Tensor* y = scale(g, x, 2.0f);
  g.build(y);
  Scheduler sched({vulkan_backend(), &reference()});
  sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
    if (&t == y) r.push_back({TapKind::Stats, "s", nullptr});
  });
  sched.allocate(g);
  sched.compute(g);
  TapResult want;
  tap_accumulate_values(TapKind::Stats, tensor_to_f32(*y), 300, nullptr, want);
  const NodeStats s = sched.read_taps().at("s").stats;
  EXPECT_EQ(s.count, want.stats.count);
  EXPECT_EQ(s.nan, 1);
  EXPECT_EQ(s.inf, 2);
  EXPECT_DOUBLE_EQ(s.max, want.stats.max);
  EXPECT_NEAR(s.sum_sq, want.stats.sum_sq, 1e-9 * want.stats.sum_sq);
}

}  // namespace
}  // namespace qlens

#else  // !QLENS_VULKAN

TEST(VulkanTaps, NotBuilt) { GTEST_SKIP() << "built without Vulkan (QLENS_VULKAN=OFF)"; }

#endif
