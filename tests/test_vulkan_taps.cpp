// The taps on Vulkan against the host reference (tap_accumulate_values):
// ColumnSumSq within 1e-5 relative (1e-12 seen, in double); Stats and
// ErrorStats within 1e-9 relative (1e-5 where the device accumulates in
// float), counts exact, and the per-row histogram of ErrorStats bucket by
// bucket (exact with shaderFloat64; in float a row's error may fall on the
// other side of a bucket boundary); also the observe callback on a Vulkan
// node, and Stats and ColumnSumSq on views. CPU devices run other variants
// of the tap shaders: QLENS_VULKAN_CPU_KERNELS=0 runs the GPU ones there.
// Every test skips when qlens::vulkan::devices() is empty.
#include <gtest/gtest.h>

#ifdef QLENS_VULKAN

#include <cstdlib>
#include <tuple>

#include "backend/vulkan/vk_backend.h"
#include "vulkan_test_util.h"

namespace qlens {
namespace {

using namespace vktest;

bool device_has_float64() { return static_cast<vulkan::VulkanBackend*>(vulkan_backend())->device().has_float64(); }

// The relative tolerance of the taps' sums against the host's: 1e-9 where the
// device accumulates in double, else 1e-5.
double sum_tolerance() { return device_has_float64() ? 1e-9 : 1e-5; }

// row_nmse against the host's: bucket by bucket where the device accumulates
// in double; in float a row near a boundary may land in the next bucket, so
// the cumulative counts may differ by those rows (1% allowed).
void expect_same_histogram(const LogHistogram& got, const LogHistogram& want, uint64_t rows) {
  ASSERT_EQ(got.counts.size(), want.counts.size());
  EXPECT_EQ(got.total(), rows);
  EXPECT_EQ(want.total(), rows);
  if (device_has_float64()) {
    for (size_t i = 0; i < want.counts.size(); ++i) EXPECT_EQ(got.counts[i], want.counts[i]) << "bucket " << i;
    return;
  }
  // Cumulative counts differ by the rows that crossed one boundary: few.
  int64_t cum_got = 0, cum_want = 0, worst = 0;
  for (size_t i = 0; i < want.counts.size(); ++i) {
    cum_got += static_cast<int64_t>(got.counts[i]);
    cum_want += static_cast<int64_t>(want.counts[i]);
    worst = std::max(worst, std::abs(cum_got - cum_want));
  }
  EXPECT_LE(worst, static_cast<int64_t>(rows / 100 + 2));
}

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
  const double tol = sum_tolerance();
  const NodeStats& s = taps.at("stats").stats;
  EXPECT_EQ(s.count, want_stats.stats.count);
  EXPECT_EQ(s.nan, 0);
  EXPECT_EQ(s.inf, 0);
  EXPECT_DOUBLE_EQ(s.min, want_stats.stats.min);
  EXPECT_DOUBLE_EQ(s.max, want_stats.stats.max);
  EXPECT_NEAR(s.sum, want_stats.stats.sum, tol * std::fabs(want_stats.stats.sum_sq));
  EXPECT_NEAR(s.sum_sq, want_stats.stats.sum_sq, tol * want_stats.stats.sum_sq);
  const ErrorStats& e = taps.at("error").error;
  EXPECT_EQ(e.count, want_error.error.count);
  EXPECT_EQ(e.non_finite, 0);
  EXPECT_NEAR(e.sum_sq_diff, want_error.error.sum_sq_diff, tol * want_error.error.sum_sq_diff);
  EXPECT_NEAR(e.sum_sq_a, want_error.error.sum_sq_a, tol * want_error.error.sum_sq_a);
  EXPECT_NEAR(e.sum_sq_b, want_error.error.sum_sq_b, tol * want_error.error.sum_sq_b);
  EXPECT_NEAR(e.sum_ab, want_error.error.sum_ab, tol * want_error.error.sum_sq_a);
  if (device_has_float64()) {
    EXPECT_DOUBLE_EQ(e.max_abs_diff, want_error.error.max_abs_diff);
  } else {  // |a - b| rounded to float
    EXPECT_NEAR(e.max_abs_diff, want_error.error.max_abs_diff, 1e-7 * want_error.error.max_abs_diff);
  }
  expect_same_histogram(e.row_nmse, want_error.error.row_nmse, 2 * 5 * 3);
  // Reset: nothing accumulated after.
  taps = sched.read_taps(true);
  EXPECT_EQ(taps.at("imatrix").rows, 0);
  EXPECT_EQ(taps.at("stats").stats.count, 0);
  EXPECT_EQ(taps.at("error").error.count, 0);
  EXPECT_TRUE(taps.at("error").error.row_nmse.counts.empty());
}

// row_nmse over 70000 rows (more than one dispatch dimension holds) of
// errors from 2^-52 to 2^32 relative (past both ends of the histogram), with
// a == b, b = 0, NaN/Inf pairs (left out of their row's sums, as on the host)
// and errors on bucket boundaries; a is a permuted node (rows strided by
// 70000 floats), b a strided view of a device leaf at an offset.
TEST(VulkanTaps, RowErrorHistogram) {
  REQUIRE_VULKAN();
  constexpr int64_t n0 = 4, n1 = 350, n2 = 200, rows = n1 * n2;
  std::vector<float> va(n0 * rows), vb(n0 * rows);  // logical order
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> magnitude(-26.0f, 16.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float u = std::exp2(magnitude(rng));
    for (int64_t k = 0; k < n0; ++k) {
      vb[r * n0 + k] = normal(rng);
      va[r * n0 + k] = vb[r * n0 + k] + u * normal(rng);
    }
  }
  auto set_row = [&](int64_t r, std::array<float, 4> a, std::array<float, 4> b) {
    for (int64_t k = 0; k < n0; ++k) va[r * n0 + k] = a[k], vb[r * n0 + k] = b[k];
  };
  const float nan = NAN, inf = INFINITY;
  set_row(0, {1, -2, 3, 0.5f}, {1, -2, 3, 0.5f});                  // a == b: 0, bucket 0
  set_row(1, {0.25f, 0, -1, 2}, {0, 0, 0, 0});                     // b = 0: sum (a-b)^2
  set_row(2, {0, 0, 0, 0}, {0, 0, 0, 0});                          // 0 / 0: bucket 0
  set_row(3, {nan, 1.5f, 2, -1}, {1, 1, 2, -1});                   // NaN left out: 0.25 / 6
  set_row(4, {1, 2, 3, 4}, {1, inf, 3, 4.5f});                     // Inf left out
  set_row(5, {nan, inf, -inf, nan}, {1, 2, 3, nan});               // nothing finite: bucket 0
  set_row(6, {1 + 0x1p-10f, 0, 0, 0}, {1, 0, 0, 0});               // 2^-20 exactly
  set_row(7, {1 + 0x1p-3f, 1, 0, 0}, {1, 1, 0, 0});                // 2^-7 exactly
  set_row(8, {4097, 0, 0, 0}, {1, 0, 0, 0});                       // 2^24: the last bucket
  set_row(9, {1 + 0x1p-20f, 0, 0, 0}, {1, 0, 0, 0});               // 2^-40: bucket 1
  set_row(10, {1 + 0x1p-21f, 0, 0, 0}, {1, 0, 0, 0});              // 2^-42: bucket 0
  set_row(11, {1e30f, -1e30f, 0, 0}, {1e-30f, 0, 0, 0});           // huge: the last bucket
  set_row(rows / 2, {0x1p-30f, 0, 0, 0}, {0, 0, 0, 0});            // b = 0, 2^-60
  set_row(rows - 1, {2, 0, 0, 0}, {1, 0, 0, 0});                   // 1 exactly, in the last row
  // a: A {n2, n1, n0} in host memory, scaled by 1 on Vulkan, permuted to
  // {n0, n1, n2}; b: the elements 2..5 of B {6, n1, n2} in device memory.
  Graph g;
  Leaves l(5, vulkan_backend());
  Tensor* A = l.random(g, DType::F32, {n2, n1, n0, 1});
  auto* pa = static_cast<float*>(A->data);
  Tensor* B = l.random(g, DType::F32, {6, n1, n2, 1}, 1.0f, true);
  std::vector<float> vB(6 * rows, -7.0f);
  for (int64_t i2 = 0; i2 < n2; ++i2)
    for (int64_t i1 = 0; i1 < n1; ++i1)
      for (int64_t k = 0; k < n0; ++k) {
        const int64_t r = i1 + n1 * i2;
        pa[i2 + n2 * (i1 + n1 * k)] = va[r * n0 + k];
        vB[2 + k + 6 * r] = vb[r * n0 + k];
      }
  tensor_write(*B, vB.data(), 0, vB.size() * sizeof(float));
  Tensor* s = named(scale(g, A, 1.0f), "s");
  Tensor* a = named(permute(g, s, 2, 1, 0, 3), "a");
  Tensor* b = view(g, B, {n0, n1, n2}, {6 * sizeof(float), 6 * n1 * sizeof(float)}, 2 * sizeof(float));
  ASSERT_EQ(a->ne, (std::array<int64_t, 4>{n0, n1, n2, 1}));
  ASSERT_EQ(a->nb[0], static_cast<size_t>(n2 * n1 * 4));
  g.build(a);
  g.build(b);  // a view gets its address when the graph is allocated
  Scheduler sched({vulkan_backend(), &reference()});
  sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
    if (&t == a) r.push_back({TapKind::ErrorStats, "error", b});
  });
  sched.allocate(g);
  ASSERT_EQ(sched.compute(g), ComputeStatus::Done);
  ASSERT_EQ(sched.backend_of(*s), vulkan_backend());
  ASSERT_EQ(sched.backend_of(*a), vulkan_backend());
  TapResult want;
  tap_accumulate_values(TapKind::ErrorStats, va, n0, &vb, want);
  auto taps = sched.read_taps(true);
  const ErrorStats& e = taps.at("error").error;
  EXPECT_EQ(e.count, want.error.count);
  EXPECT_EQ(e.non_finite, want.error.non_finite);
  EXPECT_NEAR(e.sum_sq_b, want.error.sum_sq_b, sum_tolerance() * want.error.sum_sq_b);
  expect_same_histogram(e.row_nmse, want.error.row_nmse, rows);
  // The special rows where the host puts them.
  const std::vector<uint64_t>& h = e.row_nmse.counts;
  ASSERT_EQ(h.size(), static_cast<size_t>(LogHistogram::kBuckets));
  EXPECT_GE(h[0], 5u);
  EXPECT_GE(h[1], 1u);
  EXPECT_GE(h[LogHistogram::kBuckets - 1], 2u);
  int filled = 0;
  for (uint64_t c : h) filled += c > 0;
  std::printf("  %d of %d buckets filled\n", filled, LogHistogram::kBuckets);
  EXPECT_EQ(filled, LogHistogram::kBuckets);
  // Reset on read: the histogram is empty after.
  taps = sched.read_taps(true);
  EXPECT_EQ(taps.at("error").error.count, 0);
  EXPECT_TRUE(taps.at("error").error.row_nmse.counts.empty());
  // And accumulates again.
  ASSERT_EQ(sched.compute(g), ComputeStatus::Done);
  ASSERT_EQ(sched.compute(g), ComputeStatus::Done);
  tap_accumulate_values(TapKind::ErrorStats, va, n0, &vb, want);
  expect_same_histogram(sched.read_taps(true).at("error").error.row_nmse, want.error.row_nmse, 2 * rows);
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
  EXPECT_NEAR(s.sum_sq, want.stats.sum_sq, sum_tolerance() * want.stats.sum_sq);
}

// Stats on a node and on views of it against the host reference: a node of
// 601000 elements (more than 65535 * 8) with NaN, Inf and -Inf here and
// there, its transpose, rows of 3 at odd and even offsets, every other
// element, one row at an odd offset and a 4-D view whose dims do not merge
// (on CPU devices: pairs of floats with an odd first or last float, strided
// dim 0, segments of rows and of one row); accumulated over two runs.
// Counts, min and max exact; the sums within sum_tolerance().
TEST(VulkanTaps, StatsOnViews) {
  REQUIRE_VULKAN();
  constexpr int64_t n0 = 1000, n1 = 601;
  Graph g;
  Leaves l(21, vulkan_backend());
  Tensor* A = l.random(g, DType::F32, {n0, n1, 1, 1});
  auto* v = static_cast<float*>(A->data);
  const float specials[3] = {NAN, INFINITY, -INFINITY};
  const int64_t at[] = {0, 1, 2, 3, 6, 7, 8, 1001, 2345, 99999, 300001, 300002, 599999, 600998, 600999};
  for (size_t i = 0; i < std::size(at); ++i) v[at[i]] = specials[i % 3];
  v[4321] = 1e4f;
  v[4322] = -2e4f;
  Tensor* s = named(scale(g, A, 1.0f), "s");
  struct Case {
    const char* what;
    Tensor* t;
  };
  const std::vector<Case> cases = {
      {"node", s},
      {"transposed", permute(g, s, 1, 0, 2, 3)},
      {"rows of 3, 5 apart, from 1", view(g, s, {3, 120000}, {5 * 4}, 1 * 4)},
      {"every other element from 1", view(g, s, {1, 300000}, {2 * 4}, 1 * 4)},
      {"one row from 1", view(g, s, {599999}, {}, 1 * 4)},
      {"4-D from 3", view(g, s, {10, 7, 9, 11}, {12 * 4, 85 * 4, 767 * 4}, 3 * 4)},
  };
  for (const Case& c : cases) g.build(c.t);
  Scheduler sched({vulkan_backend(), &reference()});
  sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
    for (const Case& c : cases)
      if (&t == c.t) r.push_back({TapKind::Stats, c.what, nullptr});
  });
  sched.allocate(g);
  for (int run = 0; run < 2; ++run) ASSERT_EQ(sched.compute(g), ComputeStatus::Done);
  const auto taps = sched.read_taps(true);
  const double tol = sum_tolerance();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(sched.backend_of(*c.t), vulkan_backend());
    TapResult want;
    const std::vector<float> values = tensor_to_f32(*c.t);
    for (int run = 0; run < 2; ++run) tap_accumulate_values(TapKind::Stats, values, c.t->ne[0], nullptr, want);
    const NodeStats& got = taps.at(c.what).stats;
    EXPECT_EQ(got.count, want.stats.count);
    EXPECT_EQ(got.nan, want.stats.nan);
    EXPECT_EQ(got.inf, want.stats.inf);
    EXPECT_GT(want.stats.nan + want.stats.inf, 0);
    EXPECT_EQ(got.min, want.stats.min);
    EXPECT_EQ(got.max, want.stats.max);
    EXPECT_NEAR(got.sum, want.stats.sum, tol * want.stats.sum_sq);
    EXPECT_NEAR(got.sum_sq, want.stats.sum_sq, tol * want.stats.sum_sq);
  }
}

// ColumnSumSq on activations that are views: an odd number of columns in
// rows 68 floats apart (on CPU devices: pairs of columns, the last one
// alone), and the same at an odd offset (one column per invocation).
TEST(VulkanTaps, ColumnSumSqOnViews) {
  REQUIRE_VULKAN();
  constexpr int64_t K = 67;
  Graph g;
  Leaves l(31, vulkan_backend());
  Tensor* B = l.random(g, DType::F32, {K + 1, 33, 2, 1}, 1.0f, true);
  Tensor* w = l.random(g, DType::F32, {K, 4, 1, 1}, 1.0f, true);
  Tensor* x_even = view(g, B, {K, 33, 2}, {(K + 1) * 4, (K + 1) * 33 * 4}, 0);
  Tensor* x_odd = view(g, B, {K, 32, 2}, {(K + 1) * 4, (K + 1) * 33 * 4}, 1 * 4);
  Tensor* y_even = mul_mat(g, w, x_even);
  Tensor* y_odd = mul_mat(g, w, x_odd);
  g.build(y_even);
  g.build(y_odd);
  Scheduler sched({vulkan_backend(), &reference()});
  sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
    if (&t == y_even) r.push_back({TapKind::ColumnSumSq, "even", nullptr});
    if (&t == y_odd) r.push_back({TapKind::ColumnSumSq, "odd", nullptr});
  });
  sched.allocate(g);
  ASSERT_EQ(sched.compute(g), ComputeStatus::Done);
  ASSERT_EQ(sched.backend_of(*y_even), vulkan_backend());
  ASSERT_EQ(sched.backend_of(*y_odd), vulkan_backend());
  const auto taps = sched.read_taps(true);
  for (const auto& [key, x] : {std::pair{"even", x_even}, std::pair{"odd", x_odd}}) {
    SCOPED_TRACE(key);
    TapResult want;
    tap_accumulate_values(TapKind::ColumnSumSq, tensor_to_f32(*x), K, nullptr, want);
    const TapResult& got = taps.at(key);
    EXPECT_EQ(got.rows, want.rows);
    ASSERT_EQ(got.column_sum_sq.size(), static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k)
      EXPECT_NEAR(got.column_sum_sq[k], want.column_sum_sq[k], 1e-5 * want.column_sum_sq[k]) << "column " << k;
  }
}

// ColumnSumSq on MUL_MAT_ID nodes: per expert, over the (slot, token) pairs
// routed to it, on one activation row for all slots (the experts' up
// projection) and one per slot (the down projection, a permuted view), the
// ids a top-k view of an argsort on the device; prompts and generation,
// accumulated over two runs. Against tap_accumulate_host on the same graph
// on the reference backend (the activations are leaves, so both see the same
// values): rows per expert exact, sums within sum_tolerance().
TEST(VulkanTaps, ColumnSumSqPerExpert) {
  REQUIRE_VULKAN();
  ASSERT_NE(vulkan_backend()->make_tap_state(TapKind::ColumnSumSq, 8), nullptr) << "no expert taps on the device";
  constexpr int64_t K = 67, F = 64, E = 5, U = 2;
  for (int64_t N : {1, 3, 90}) {
    SCOPED_TRACE("N " + std::to_string(N));
    struct MoeGraph {
      Graph g;
      Leaves leaves;
      Tensor *up, *down;
      MoeGraph(int64_t n, Backend* device) : leaves(41, device) {
        Tensor* x = leaves.random(g, DType::F32, {K, 1, n, 1});
        Tensor* router = leaves.random(g, DType::F32, {K, E, 1, 1}, 1.0f, true);
        Tensor* probs = soft_max(g, mul_mat(g, router, reshape(g, x, {K, n})), nullptr, 1.0f);
        Tensor* selected = top_k(g, probs, U);
        up = named(mul_mat_id(g, leaves.random(g, DType::F16, {K, F, E, 1}, 1.0f, true), x, selected), "up");
        Tensor* h = permute(g, leaves.random(g, DType::F32, {F, n, U, 1}), 0, 2, 1, 3);  // {F, U, n}
        down = named(mul_mat_id(g, leaves.random(g, DType::Q8_0, {F, K, E, 1}, 1.0f, true), h, selected), "down");
        g.build(up);
        g.build(down);
      }
    };
    MoeGraph vk(N, vulkan_backend()), ref(N, nullptr);
    Scheduler sched({vulkan_backend(), &reference()});
    sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
      if (&t == vk.up) r.push_back({TapKind::ColumnSumSq, "up", nullptr});
      if (&t == vk.down) r.push_back({TapKind::ColumnSumSq, "down", nullptr});
    });
    sched.allocate(vk.g);
    Scheduler alone(reference());
    alone.allocate(ref.g);
    TapResult want_up, want_down;
    for (int run = 0; run < 2; ++run) {
      ASSERT_EQ(sched.compute(vk.g), ComputeStatus::Done);
      ASSERT_EQ(alone.compute(ref.g), ComputeStatus::Done);
      tap_accumulate_host(TapKind::ColumnSumSq, *ref.up, nullptr, want_up);
      tap_accumulate_host(TapKind::ColumnSumSq, *ref.down, nullptr, want_down);
    }
    for (const Tensor* n : vk.g.nodes()) {
      if (op_is_view(n->op)) continue;
      EXPECT_EQ(sched.backend_of(*n), vulkan_backend()) << n->name;
    }
    const auto taps = sched.read_taps(true);
    for (const auto& [key, want, columns] : {std::tuple{"up", &want_up, K}, std::tuple{"down", &want_down, F}}) {
      SCOPED_TRACE(key);
      const TapResult& got = taps.at(key);
      EXPECT_EQ(got.rows, 2 * U * N);
      EXPECT_EQ(got.rows, want->rows);
      EXPECT_EQ(got.expert_rows, want->expert_rows);
      ASSERT_EQ(got.column_sum_sq.size(), static_cast<size_t>(columns * E));
      double worst = 0;
      for (size_t k = 0; k < got.column_sum_sq.size(); ++k) {
        const double w = want->column_sum_sq[k];
        if (w == 0) {
          EXPECT_EQ(got.column_sum_sq[k], 0.0) << "column " << k % columns << " of expert " << k / columns;
          continue;
        }
        worst = std::max(worst, std::fabs(got.column_sum_sq[k] - w) / w);
      }
      std::printf("  %s, N=%ld: per-expert column_sum_sq worst relative difference %.2e\n", key,
                  static_cast<long>(N), worst);
      EXPECT_LE(worst, sum_tolerance());
    }
    // Reset: nothing accumulated after.
    EXPECT_EQ(sched.read_taps(true).at("up").rows, 0);
  }
}

}  // namespace
}  // namespace qlens

#else  // !QLENS_VULKAN

TEST(VulkanTaps, NotBuilt) { GTEST_SKIP() << "built without Vulkan (QLENS_VULKAN=OFF)"; }

#endif
