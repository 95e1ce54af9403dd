// How the Vulkan backend fails, and what still runs: bad buffer accesses and
// out-of-memory are Errors that say what was asked (and, for a model, which
// -ngl to lower); a shader the driver cannot build (VulkanOptions::fail_shaders
// pretends so) and a tensor larger than one storage-buffer window send their
// ops to the CPU with the same results. Every test skips when
// qlens::vulkan::devices() is empty.
#include <gtest/gtest.h>

#ifdef QLENS_VULKAN

#include <cstdlib>

#include "backend/vulkan/vk_backend.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/perplexity/perplexity.h"
#include "core/text_file.h"
#include "vulkan_test_util.h"

namespace qlens {
namespace {

using namespace vktest;

TEST(VulkanErrors, Buffers) {
  REQUIRE_VULKAN();
  auto buf = vulkan_backend()->alloc_buffer(1024);
  EXPECT_FALSE(buf->is_host());
  std::vector<char> data(2048, 1);
  EXPECT_THROW(buf->write(512, data.data(), 1024), Error);
  EXPECT_THROW(buf->read(0, data.data(), 2048), Error);
  buf->write(100, "hello", 5);
  char back[5];
  buf->read(100, back, 5);
  EXPECT_EQ(std::string(back, 5), "hello");
  EXPECT_THROW(vulkan_backend()->alloc_buffer(size_t{1} << 50), Error);  // 1 PiB: out of memory, an Error
}


std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A small graph: scale (on the device: nothing keeps it off), silu, a
// mul_mat on `weight_type` weights placed in `device` memory, add.
struct MatmulGraph {
  Graph g;
  Leaves leaves;
  Tensor *scaled, *act, *mm, *sum;
  MatmulGraph(DType weight_type, std::array<int64_t, 4> w_ne, Backend* device = nullptr) : leaves(9, device) {
    Tensor* w = leaves.random(g, weight_type, w_ne, 1.0f, device != nullptr);
    w->flags |= kFlagWeight;
    scaled = scale(g, leaves.random(g, DType::F32, {w_ne[0], 12, 1, 1}), 0.5f);
    act = silu(g, scaled);
    mm = mul_mat(g, w, act);
    sum = add(g, mm, leaves.random(g, DType::F32, {w_ne[1], 12, 1, 1}));
    g.build(sum);
  }
};

TEST(VulkanErrors, ShaderThatFailsToBuildRunsOnTheCpu) {
  REQUIRE_VULKAN();
  VulkanOptions options;
  options.fail_shaders = {"mul_mat_vec_q8_0", "mul_mat_direct_q8_0", "mul_mat_q8_0", "silu*"};
  std::unique_ptr<Backend> vk = vulkan::make_backend(0, options);
  testing::internal::CaptureStderr();
  MatmulGraph on_vk(DType::Q8_0, {64, 40, 1, 1}, vk.get());
  Scheduler sched({vk.get(), &reference()});
  sched.allocate(on_vk.g);
  ASSERT_EQ(sched.compute(on_vk.g), ComputeStatus::Done);
  sched.allocate(on_vk.g);  // asked again: no second warning
  const std::string warnings = testing::internal::GetCapturedStderr();
  EXPECT_EQ(sched.backend_of(*on_vk.scaled), vk.get());
  EXPECT_EQ(sched.backend_of(*on_vk.act), &reference());
  EXPECT_EQ(sched.backend_of(*on_vk.mm), &reference());  // its weights copied over
  // One warning per shader, naming it and what happens.
  for (const char* shader : {"'mul_mat_vec_q8_0'", "'silu'"}) {
    const size_t at = warnings.find(shader);
    ASSERT_NE(at, std::string::npos) << warnings;
    EXPECT_EQ(warnings.find(shader, at + 1), std::string::npos) << warnings;
  }
  EXPECT_NE(warnings.find("its ops run on the CPU"), std::string::npos) << warnings;

  MatmulGraph on_ref(DType::Q8_0, {64, 40, 1, 1});
  Scheduler alone(reference());
  alone.allocate(on_ref.g);
  alone.compute(on_ref.g);
  EXPECT_LE(nmse(tensor_to_f32(*on_vk.sum), tensor_to_f32(*on_ref.sum)), 1e-12);

  // Other types' shaders still build and run on the device.
  MatmulGraph q4(DType::Q4_0, {64, 40, 1, 1}, vk.get());
  Scheduler q4_sched({vk.get(), &reference()});
  q4_sched.allocate(q4.g);
  EXPECT_EQ(q4_sched.backend_of(*q4.mm), vk.get());
}

// A tap whose shader fails goes to the scheduler's host fallback: same figures.
TEST(VulkanErrors, TapThatFailsToBuildIsReducedOnTheHost) {
  REQUIRE_VULKAN();
  VulkanOptions options;
  options.fail_shaders = {"tap_stats*"};
  std::unique_ptr<Backend> vk = vulkan::make_backend(0, options);
  MatmulGraph g(DType::Q4_0, {64, 40, 1, 1}, vk.get());
  g.scaled->flags |= kFlagOutput;  // kept for the expected figures
  g.act->flags |= kFlagOutput;
  Scheduler sched({vk.get(), &reference()});
  sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
    if (&t == g.scaled) r.push_back({TapKind::Stats, "stats", nullptr});
    if (&t == g.mm) r.push_back({TapKind::ColumnSumSq, "columns", nullptr});
  });
  testing::internal::CaptureStderr();
  sched.allocate(g.g);
  ASSERT_EQ(sched.compute(g.g), ComputeStatus::Done);
  const std::string warnings = testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("'tap_stats"), std::string::npos) << warnings;
  EXPECT_EQ(sched.backend_of(*g.scaled), vk.get());
  EXPECT_EQ(sched.backend_of(*g.mm), vk.get());
  TapResult want_stats, want_columns;
  tap_accumulate_values(TapKind::Stats, tensor_to_f32(*g.scaled), 64, nullptr, want_stats);
  tap_accumulate_values(TapKind::ColumnSumSq, tensor_to_f32(*g.act), 64, nullptr, want_columns);
  const auto taps = sched.read_taps();
  const NodeStats& s = taps.at("stats").stats;
  EXPECT_EQ(s.count, want_stats.stats.count);
  EXPECT_EQ(s.min, want_stats.stats.min);
  EXPECT_EQ(s.max, want_stats.stats.max);
  EXPECT_NEAR(s.sum_sq, want_stats.stats.sum_sq, 1e-9 * want_stats.stats.sum_sq);
  const TapResult& c = taps.at("columns");
  EXPECT_EQ(c.rows, want_columns.rows);
  ASSERT_EQ(c.column_sum_sq.size(), 64u);
  for (size_t k = 0; k < 64; ++k)
    EXPECT_NEAR(c.column_sum_sq[k], want_columns.column_sum_sq[k], 1e-5 * want_columns.column_sum_sq[k]);
}

TEST(VulkanErrors, TensorsLargerThanAStorageWindowStayOnTheCpu) {
  REQUIRE_VULKAN();
  auto vk = vulkan::make_backend(0);
  static_cast<vulkan::VulkanBackend&>(*vk).device().limit_max_storage_range(64 * 1024);
  Graph probe;
  Tensor* x = probe.new_tensor(DType::F32, {1024, 4});
  EXPECT_TRUE(vk->supports_op(*mul_mat(probe, probe.new_tensor(DType::F16, {1024, 16}), x)));   // 32 KiB
  EXPECT_FALSE(vk->supports_op(*mul_mat(probe, probe.new_tensor(DType::F16, {1024, 64}), x)));  // 128 KiB
  // The big weight's mul_mat runs on the CPU, the rest on the device, results as the reference's.
  MatmulGraph big(DType::F32, {256, 80, 1, 1});  // 80 KiB of weights, in host memory
  Scheduler sched({vk.get(), &reference()});
  sched.allocate(big.g);
  ASSERT_EQ(sched.compute(big.g), ComputeStatus::Done);
  EXPECT_EQ(sched.backend_of(*big.scaled), vk.get());
  EXPECT_EQ(sched.backend_of(*big.mm), &reference());
  MatmulGraph ref(DType::F32, {256, 80, 1, 1});
  Scheduler alone(reference());
  alone.allocate(ref.g);
  alone.compute(ref.g);
  EXPECT_LE(nmse(tensor_to_f32(*big.sum), tensor_to_f32(*ref.sum)), 1e-12);
}

TEST(VulkanErrors, OutOfDeviceMemoryIsAClearError) {
  REQUIRE_VULKAN();
  VulkanOptions options;
  options.memory_limit = 1 << 20;
  std::unique_ptr<Backend> vk = vulkan::make_backend(0, options);
  auto first = vk->alloc_buffer(700 * 1024);
  const std::string what = error_of([&] { vk->alloc_buffer(400 * 1024); });
  EXPECT_NE(what.find("cannot allocate 400.00 KiB for a buffer: out of device memory"), std::string::npos) << what;
  // The 700 KiB and the backend's own tables (the i-quants' lattice, 9 KiB).
  EXPECT_NE(what.find("709.00 KiB of device memory in use"), std::string::npos) << what;
  first.reset();  // freed memory counts no more
  EXPECT_NO_THROW(vk->alloc_buffer(900 * 1024));
}

// The same on a model: offloading more than fits names the sizes and -ngl;
// a shader that cannot be built leaves its ops to the CPU and the
// perplexity as the CPU's.
TEST(VulkanErrors, ModelRunsWithoutAShaderAndSaysWhenItDoesNotFit) {
  REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  auto m = Model::load(path);
  const auto tokens = m->vocab().tokenize(read_text_file(text_path), true);
  tools::PerplexityOptions po;
  po.n_ctx = 128;
  po.n_batch = 128;
  po.max_chunks = 2;
  po.n_threads = 2;
  // The Vulkan kernels do not round as ggml's CPU does: compare like with like.
  po.cpu.ggml_rounding = false;
  const double ppl_cpu = tools::perplexity(*m, tokens, po).ppl;
  po.device = "vulkan:0";
  {
    // (A weight whose mul_mat shaders fail is not offloaded: mul_mats would run on the CPU.)
    po.vulkan.fail_shaders = {"rms_norm*", "soft_max*"};
    testing::internal::CaptureStderr();
    const double ppl_vk = tools::perplexity(*m, tokens, po).ppl;
    const std::string warnings = testing::internal::GetCapturedStderr();
    EXPECT_LE(std::fabs(ppl_vk / ppl_cpu - 1), 1e-4) << ppl_cpu << " vs " << ppl_vk;
    EXPECT_NE(warnings.find("rms_norm"), std::string::npos) << warnings;
    EXPECT_NE(warnings.find("soft_max"), std::string::npos) << warnings;
  }
  {
    po.vulkan = {};
    po.vulkan.memory_limit = 200 * 1024;
    const std::string what = error_of([&] { tools::perplexity(*m, tokens, po); });
    EXPECT_NE(what.find("offloading 5 layers to vulkan:0"), std::string::npos) << what;
    EXPECT_NE(what.find("out of device memory"), std::string::npos) << what;
    EXPECT_NE(what.find("try a smaller -ngl"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace qlens

#else  // !QLENS_VULKAN

TEST(VulkanErrors, NotBuilt) { GTEST_SKIP() << "built without Vulkan (QLENS_VULKAN=OFF)"; }

#endif
