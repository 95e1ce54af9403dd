// stories260K, Gemma 3, the dense and the mixture-of-experts synthetic
// families on the Vulkan backend (lavapipe in CI): logits, greedy text,
// partial offload, imatrix, perplexity and compare against the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "core/text_file.h"
#include "qlens/backend.h"
#include "qlens/context_pair.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/compare/compare.h"
#include "tools/imatrix/imatrix.h"
#include "tools/perplexity/perplexity.h"
#include "tools/quantize/quantize.h"

namespace qlens {
namespace {

constexpr const char* kStories = "models/stories260K.gguf";
constexpr const char* kText = "data/tinystories/tinystories_val.txt";

bool have_vulkan() {
  for (const DeviceInfo& d : list_devices())
    if (d.id.rfind("vulkan:", 0) == 0) return true;
  return false;
}

#define QLENS_REQUIRE_VULKAN()                                                                        \
  if (!have_vulkan())                                                                                 \
  GTEST_SKIP() << "no Vulkan device (build without Vulkan, or no driver: install mesa-vulkan-drivers)"

// exact: the CPU backend without ggml's roundings (CpuOptions::ggml_rounding),
// as the Vulkan kernels compute: like with like.
ContextOptions opts(const std::string& device, int ngl = -1, bool exact = false) {
  ContextOptions o;
  o.n_ctx = 256;
  o.n_batch = 128;
  o.n_threads = 2;
  o.device = device;
  o.n_gpu_layers = ngl;
  o.cpu.ggml_rounding = !exact;
  return o;
}

double nmse(std::span<const float> ref, std::span<const float> x) {
  double e = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    e += (double(ref[i]) - x[i]) * (double(ref[i]) - x[i]);
    r += double(ref[i]) * ref[i];
  }
  return e / r;
}

std::vector<Token> greedy(Context& ctx, std::vector<Token> prompt, int n) {
  std::vector<Token> out;
  EXPECT_TRUE(ctx.decode(prompt, false));
  for (int i = 0; i < n; ++i) {
    auto l = ctx.last_logits();
    const Token t = static_cast<Token>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(t);
    const Token one[1] = {t};
    EXPECT_TRUE(ctx.decode(one, false));
  }
  return out;
}

TEST(VulkanModel, LogitsAndGreedyTextMatchTheCpuFullyAndPartlyOffloaded) {
  // The Vulkan kernels do not round as ggml's CPU does: compare like with like
  // (exact options on every context, the CPU part of the offloaded ones too).
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto m = Model::load(path);
  auto tokens = m->vocab().tokenize(read_text_file(text_path), true);
  tokens.resize(128);
  Context cpu(*m, opts("cpu", -1, true));
  ASSERT_TRUE(cpu.decode(tokens, true));
  for (int ngl : {-1, 2}) {
    Context vk(*m, opts("vulkan:0", ngl, true));
    EXPECT_EQ(vk.n_offloaded_layers(), ngl < 0 ? m->hparams().n_layer : 2);
    ASSERT_TRUE(vk.decode(tokens, true));
    double worst = 0;
    for (int64_t i = 0; i < 128; ++i) worst = std::max(worst, nmse(cpu.logits(i), vk.logits(i)));
    EXPECT_LE(worst, 1e-6) << "ngl " << ngl;
    std::printf("ngl %d: worst per-token logits NMSE %.3g\n", ngl, worst);
  }
  const std::vector<Token> prompt = m->vocab().tokenize("Once upon a time", true);
  Context c1(*m, opts("cpu", -1, true)), c2(*m, opts("vulkan:0", -1, true));
  EXPECT_EQ(greedy(c1, prompt, 40), greedy(c2, prompt, 40));
}

// Sensitivity's swap of one weight: on a fully offloaded context the
// replacement (here Q8_0) is copied to the device and its mul_mat runs there;
// logits follow the CPU with the same replacement; restoring brings back the
// original logits.
TEST(VulkanModel, ReplacedWeightsRunOnTheDevice) {
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto m = Model::load(path);
  auto tokens = m->vocab().tokenize(read_text_file(text_path), true);
  tokens.resize(64);
  const Tensor* wq = m->get(Role::AttnQ, 1);
  const std::vector<float> values = tensor_to_f32(*wq);
  Tensor rep = *wq;
  rep.type = DType::Q8_0;
  rep.nb = contiguous_strides(rep.type, rep.ne);
  std::vector<char> bytes(rep.nbytes());
  type_traits(DType::Q8_0).from_float(values.data(), bytes.data(), static_cast<int64_t>(values.size()));
  rep.data = bytes.data();

  Context vk(*m, opts("vulkan:0"));
  ASSERT_TRUE(vk.decode(tokens, true));
  const std::vector<float> original(vk.logits(63).begin(), vk.logits(63).end());
  vk.clear();
  vk.replace_weight(wq, &rep);
  const Backend* ran_on = nullptr;
  vk.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask && t.name == "Qcur-1" && t.op == Op::MulMat) ran_on = vk.scheduler().backend_of(t);
    return false;
  });
  ASSERT_TRUE(vk.decode(tokens, true));
  vk.set_observe_callback(nullptr);
  EXPECT_EQ(ran_on, vk.device());
  Context cpu(*m, opts("cpu"));
  cpu.replace_weight(wq, &rep);
  ASSERT_TRUE(cpu.decode(tokens, true));
  EXPECT_LE(nmse(cpu.logits(63), vk.logits(63)), 1e-6);
  EXPECT_GT(nmse(original, vk.logits(63)), 1e-9);  // the replacement made a difference
  vk.restore_weight(wq);
  vk.clear();
  ASSERT_TRUE(vk.decode(tokens, true));
  EXPECT_LE(nmse(original, vk.logits(63)), 1e-12);
}

TEST(VulkanModel, PerplexityAndImatrixEqualTheCpu) {
  // The Vulkan kernels do not round as ggml's CPU does: compare like with like.
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto m = Model::load(path);
  const auto tokens = m->vocab().tokenize(read_text_file(text_path), true);
  tools::PerplexityOptions po;
  po.n_ctx = 128;
  po.n_batch = 128;
  po.max_chunks = 3;
  po.n_threads = 2;
  po.cpu.ggml_rounding = false;
  const double ppl_cpu = tools::perplexity(*m, tokens, po).ppl;
  po.device = "vulkan:0";
  const double ppl_vk = tools::perplexity(*m, tokens, po).ppl;
  EXPECT_LE(std::fabs(ppl_vk / ppl_cpu - 1), 1e-4) << ppl_cpu << " vs " << ppl_vk;

  // imatrix's default options: an F32 KV cache (ImatrixOptions says why).
  tools::ImatrixOptions io;
  io.n_ctx = 128;
  io.n_batch = 128;
  io.max_chunks = 2;
  io.n_threads = 2;
  io.cpu.ggml_rounding = false;
  tools::Imatrix on_cpu, on_vk;
  tools::collect_imatrix(*m, tokens, io, on_cpu);
  io.device = "vulkan:0";
  tools::collect_imatrix(*m, tokens, io, on_vk);
  ASSERT_EQ(on_cpu.entries.size(), on_vk.entries.size());
  for (const auto& [name, e] : on_cpu.entries) {
    const auto& v = on_vk.entries.at(name);
    EXPECT_EQ(v.counts, e.counts) << name;
    for (int64_t k = 0; k < e.n_cols; ++k)
      ASSERT_LE(std::fabs(v.sum2[k] - e.sum2[k]), 1e-5 * std::fabs(e.sum2[k])) << name << " column " << k;
  }
}

TEST(VulkanModel, CompareCpuWithVulkanShowsOnlyRounding) {
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto m = Model::load(path);
  const auto tokens = m->vocab().tokenize(read_text_file(text_path), true);
  tools::CompareOptions co;
  co.cache_type = DType::F32;  // with F16, a last-bit difference in a key can round to another half
  co.n_ctx = 128;
  co.n_batch = 128;
  co.max_chunks = 2;
  co.n_threads = 2;
  co.device_ref = "cpu";
  co.device = "vulkan:0";
  const auto r = tools::compare_models(*m, *m, tokens, co);
  ASSERT_GT(r.nodes.size(), 80u);
  double worst = 0;
  std::string where;
  for (const auto& n : r.nodes)
    if (n.nmse() > worst) {
      worst = n.nmse();
      where = n.name;
    }
  std::printf("CPU vs Vulkan: worst node NMSE %.3g (%s), mean KLD %.3g\n", worst, where.c_str(),
              r.logits.kld_mean.value);
  EXPECT_LE(worst, 1e-9) << where;
  EXPECT_LE(r.logits.kld_mean.value, 1e-8);
  EXPECT_GE(r.logits.same_top.value, 0.99);
}

// Both models on vulkan:0 share one backend, so the error taps reduce on the
// device; node by node the figures equal those of both models on the CPU
// (an F32 cache: no half-rounding flips), per-token quantiles included.
TEST(VulkanModel, CompareOnOneDeviceEqualsTheCpu) {
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string q8 = test::temp_dir() + "/q8.gguf";
  tools::QuantizeOptions qo;
  qo.mix = "Q8_0";
  std::ostringstream log;
  tools::quantize_model(path, q8, qo, log);
  auto m = Model::load(path), t = Model::load(q8);
  const auto tokens = m->vocab().tokenize(read_text_file(text_path), true);
  // The CPU rounds F32 activations through the weights' partner type (Q8_0)
  // as ggml does; the Vulkan kernels do not yet: compare like with like.
  tools::CompareOptions co;
  co.cache_type = DType::F32;
  co.n_ctx = 128;
  co.n_batch = 128;
  co.max_chunks = 2;
  co.n_threads = 2;
  co.cpu.ggml_rounding = false;
  const auto on_cpu = tools::compare_models(*m, *t, tokens, co);
  co.device_ref = co.device = "vulkan:0";
  const auto on_vk = tools::compare_models(*m, *t, tokens, co);
  ASSERT_EQ(on_cpu.nodes.size(), on_vk.nodes.size());
  double worst = 0;
  for (size_t i = 0; i < on_cpu.nodes.size(); ++i) {
    const auto &c = on_cpu.nodes[i], &v = on_vk.nodes[i];
    ASSERT_EQ(c.name, v.name);
    EXPECT_EQ(c.error.count, v.error.count) << c.name;
    EXPECT_EQ(c.error.row_nmse.total(), v.error.row_nmse.total()) << c.name;
    worst = std::max(worst, std::fabs(v.nmse() / c.nmse() - 1));
    // Quantiles are buckets 9% wide: at most one bucket apart.
    EXPECT_NEAR(v.token_nmse_median(), c.token_nmse_median(), 0.1 * c.token_nmse_median()) << c.name;
  }
  std::printf("Q8_0 vs F32, CPU vs vulkan:0: worst relative NMSE difference %.3g\n", worst);
  EXPECT_LE(worst, 1e-3);
}

// Gemma 3's ops (GELU, per-head q/k norms, the sliding-window mask, local
// and global rope) on the device: the synthetic model's 128-token chunks
// pass its 32-token window; the real 270M on 3 short chunks when installed.
// The CPU's rounding of activations through the weights' partner type is
// off: the Vulkan kernels do not round them yet.
void expect_vulkan_perplexity_equals_cpu(const std::string& path, const std::vector<Token>& tokens, int64_t n_ctx,
                                         int64_t chunks) {
  auto m = Model::load(path);
  tools::PerplexityOptions po;
  po.n_ctx = n_ctx;
  po.n_batch = n_ctx;
  po.max_chunks = chunks;
  po.n_threads = 2;
  po.cpu.ggml_rounding = false;
  const double cpu = tools::perplexity(*m, tokens, po).ppl;
  po.device = "vulkan:0";
  const double vk = tools::perplexity(*m, tokens, po).ppl;
  std::printf("%s: perplexity cpu %.6f, vulkan:0 %.6f\n", path.c_str(), cpu, vk);
  EXPECT_NEAR(vk, cpu, 1e-4 * cpu);
}

TEST(VulkanModel, Gemma3PerplexityEqualsTheCpu) {
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(path, "reference/synth/gemma3.gguf");
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto m = Model::load(path);
  const auto tokens = m->vocab().tokenize(read_text_file(text_path).substr(0, 200000), true);
  expect_vulkan_perplexity_equals_cpu(path, tokens, 128, 8);
}

// The dense families (q/k/v biases, per-head q/k norms, rope frequency
// factors, fused qkv and gate|up, partial rotary), F32 and F16, fully
// offloaded.
TEST(VulkanModel, DenseFamiliesPerplexityEqualsTheCpu) {
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string text = read_text_file(text_path).substr(0, 200000);
  for (const char* name : {"qwen2", "qwen3", "llama3", "phi3"})
    for (const char* variant : {"", ".f16"}) {
      QLENS_REQUIRE_SHARED(path, std::string("reference/synth/") + name + variant + ".gguf");
      auto m = Model::load(path);
      ContextOptions co;
      co.device = "vulkan:0";
      Context ctx(*m, co);
      EXPECT_EQ(ctx.n_offloaded_layers(), m->hparams().n_layer) << path;
      expect_vulkan_perplexity_equals_cpu(path, m->vocab().tokenize(text, true), 128, 8);
    }
}

// Where a fully offloaded context runs a decode's nodes: those before the
// first node on the device (the token embedding's lookup in host memory, and
// what the scheduler puts after it), those after it that run elsewhere
// ("name (OP)": fallbacks), and the experts' matmuls, each checked to read
// its experts from device memory.
struct Placement {
  std::vector<std::string> before_device, elsewhere;
  int expert_matmuls = 0;
  std::vector<std::string> host_experts;
};

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Placement placement_of_decode(Context& ctx, std::span<const Token> tokens) {
  Placement p;
  bool seen_device = false;
  ctx.set_observe_callback([&](const Tensor& t, bool ask) {
    if (!ask || op_is_view(t.op)) return false;
    const bool on_device = ctx.scheduler().backend_of(t) == ctx.device();
    if (!on_device) (seen_device ? p.elsewhere : p.before_device).push_back(t.name + " (" + op_name(t.op) + ")");
    seen_device |= on_device;
    if (t.op == Op::MulMatId) {
      ++p.expert_matmuls;
      const Tensor& experts = *t.src[0];
      if (!experts.buffer || experts.buffer->is_host()) p.host_experts.push_back(experts.name);
    }
    return false;
  });
  EXPECT_TRUE(ctx.decode(tokens, false));
  ctx.set_observe_callback(nullptr);
  return p;
}

// The mixture-of-experts families (qwen3moe; mixtral, llama with experts),
// F32 and F16, fully offloaded: the expert weights are in device memory and
// every node from the first layer's attention on runs on the device, for a
// prompt and for generation (the router's softmax, argsort, batched
// get_rows, sum_rows, clamp and div, both paths of the expert matmuls);
// perplexity (3 chunks of 128) equals the CPU's.
TEST(VulkanModel, MoeFamiliesRunOnTheDeviceAndPerplexityEqualsTheCpu) {
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string text = read_text_file(text_path).substr(0, 200000);
  for (const char* name : {"qwen3moe", "mixtral"})
    for (const char* variant : {"", ".f16"}) {
      QLENS_REQUIRE_SHARED(path, std::string("reference/synth/") + name + variant + ".gguf");
      SCOPED_TRACE(path);
      auto m = Model::load(path);
      const auto tokens = m->vocab().tokenize(text, true);
      Context ctx(*m, opts("vulkan:0"));
      const int64_t n_layer = m->hparams().n_layer;
      EXPECT_EQ(ctx.n_offloaded_layers(), n_layer);
      for (size_t n : {size_t{100}, size_t{1}}) {
        const auto batch = std::span<const Token>(tokens).subspan(static_cast<size_t>(ctx.n_past()), n);
        const Placement p = placement_of_decode(ctx, batch);
        EXPECT_EQ(p.expert_matmuls, 3 * n_layer) << n << " tokens";
        EXPECT_TRUE(p.host_experts.empty()) << "experts in host memory: " << joined(p.host_experts);
        EXPECT_TRUE(p.elsewhere.empty()) << n << " tokens, not on the device: " << joined(p.elsewhere);
        EXPECT_LE(p.before_device.size(), 2u) << joined(p.before_device);  // inp_embd, norm-0
      }
      expect_vulkan_perplexity_equals_cpu(path, tokens, 128, 3);
    }
}

// The architectures of 2026 (tests/data, the models of
// tests/test_arch_references.cpp) and their quantized files, fully
// offloaded: every node from the first layer's attention on runs on the
// device, experts read from device memory, for a prompt and for generation;
// perplexity (4 chunks of 128) equals the CPU's.
TEST(VulkanModel, ArchReferencesRunOnTheDeviceAndPerplexityEqualsTheCpu) {
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string text = read_text_file(text_path).substr(0, 200000);
  const std::string data = std::string(QLENS_SOURCE_DIR) + "/tests/data/";
  for (const char* name :
       {"gpt-oss-tiny", "gpt-oss-tiny.mxfp4", "deepseek2-tiny", "glm4moe-tiny", "qwen35-tiny", "qwen35moe-tiny", "gemma4-tiny",
        "gemma4moe-tiny"}) {
    // The models are made at test time; gpt-oss's MXFP4 file is committed.
    const std::string path = test::is_arch_reference(name) ? test::arch_reference_model(name) : data + name + ".gguf";
    SCOPED_TRACE(path);
    auto m = Model::load(path);
    const auto tokens = m->vocab().tokenize(text, true);
    Context ctx(*m, opts("vulkan:0"));
    EXPECT_EQ(ctx.n_offloaded_layers(), m->hparams().n_layer);
    for (size_t n : {size_t{100}, size_t{1}}) {
      const auto batch = std::span<const Token>(tokens).subspan(static_cast<size_t>(ctx.n_past()), n);
      const Placement p = placement_of_decode(ctx, batch);
      EXPECT_TRUE(p.host_experts.empty()) << "experts in host memory: " << joined(p.host_experts);
      EXPECT_TRUE(p.elsewhere.empty()) << n << " tokens, not on the device: " << joined(p.elsewhere);
      EXPECT_LE(p.before_device.size(), 2u) << joined(p.before_device);  // inp_embd, norm-0
    }
    expect_vulkan_perplexity_equals_cpu(path, tokens, 128, 4);
  }
}

// imatrix on the MoE families fully offloaded, through the per-expert
// ColumnSumSq taps on the device: the same entries as on the CPU, rows per
// expert exact, sums within 1e-5 relative.
TEST(VulkanModel, MoeImatrixEqualsTheCpu) {
  QLENS_REQUIRE_VULKAN();
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string text = read_text_file(text_path).substr(0, 200000);
  for (const char* name : {"qwen3moe", "mixtral"}) {
    QLENS_REQUIRE_SHARED(path, std::string("reference/synth/") + name + ".gguf");
    SCOPED_TRACE(path);
    auto m = Model::load(path);
    const auto tokens = m->vocab().tokenize(text, true);
    tools::ImatrixOptions io;
    io.n_ctx = 128;
    io.n_batch = 128;
    io.max_chunks = 2;
    io.n_threads = 2;
    io.cpu.ggml_rounding = false;  // as the Vulkan kernels: like with like
    tools::Imatrix on_cpu, on_vk;
    tools::collect_imatrix(*m, tokens, io, on_cpu);
    io.device = "vulkan:0";
    tools::collect_imatrix(*m, tokens, io, on_vk);
    ASSERT_EQ(on_cpu.entries.size(), on_vk.entries.size());
    int expert_entries = 0;
    for (const auto& [tensor, e] : on_cpu.entries) {
      const auto& v = on_vk.entries.at(tensor);
      expert_entries += e.n_mat > 1;
      EXPECT_EQ(v.n_mat, e.n_mat) << tensor;
      EXPECT_EQ(v.counts, e.counts) << tensor;
      ASSERT_EQ(v.sum2.size(), e.sum2.size()) << tensor;
      for (size_t k = 0; k < e.sum2.size(); ++k)
        ASSERT_LE(std::fabs(v.sum2[k] - e.sum2[k]), 1e-5 * std::fabs(e.sum2[k])) << tensor << " value " << k;
    }
    EXPECT_EQ(expert_entries, 3 * m->hparams().n_layer);
  }
}

TEST(VulkanModel, RealGemma3PerplexityEqualsTheCpu) {
  QLENS_REQUIRE_VULKAN();
  // About 3 minutes on lavapipe with 2 cores (the 262,144-row output matrix).
  if (!test::slow_tests_enabled()) GTEST_SKIP() << "QLENS_SLOW_TESTS=0";
  QLENS_REQUIRE_CACHED(path, test::kGemma3);
  QLENS_REQUIRE_SHARED(text_path, "data/wikitext-2-raw/wiki.test.raw");
  auto m = Model::load(path);
  const auto tokens = m->vocab().tokenize(read_text_file(text_path).substr(0, 60000), true);
  expect_vulkan_perplexity_equals_cpu(path, tokens, 128, 3);
}

}  // namespace
}  // namespace qlens
