// The CPU backend's options (CpuOptions, qlens/backend.h): given when a
// backend or a context is made, they reach the kernels (KernelCtx::options),
// and cpu_options_from_env, the command line's reader, parses the QLENS_CPU_*
// variables as they always read.
//  - each option, set, changes what the kernels do: ggml's rounding (GELU
//    through its F16 table, F16 weights' activations rounded), the int8
//    GEMM (off: the F32 panels, the same product within the GEMM bound),
//    packing (off: no copies), the prefetch distance (the backend's kernels
//    run with it; results do not depend on it), VNNI (off: the kernels of a
//    CPU without), the instruction-set cap;
//  - a context hands its ContextOptions::cpu to its CPU backend;
//  - cpu_options_from_env: unset, every accepted value, and bad values
//    (which leave the defaults);
//  - vulkan_options_from_env, its Vulkan twin: unset, each variable, and
//    memory sizes it cannot read (an Error naming the variable).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/vec.h"
#include "qlens/backend.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/bench/bench.h"
#include "tools/synth/synth.h"

namespace qlens {
namespace {

using cpu::Isa;

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (cpu::isa_supported(isa)) v.push_back(isa);
  return v;
}

CpuOptions with_rounding(bool on) {
  CpuOptions o;
  o.ggml_rounding = on;
  return o;
}

// A one-node graph over leaves the test fills.
struct OneNode {
  Graph g;
  std::vector<std::vector<char>> storage;
  std::vector<char> buf;
  Tensor* out = nullptr;

  Tensor* leaf(DType t, std::initializer_list<int64_t> ne, const void* bytes) {
    Tensor* x = g.new_tensor(t, ne);
    auto& s = storage.emplace_back(x->nbytes() + 64, 0);
    x->data = s.data() + (64 - reinterpret_cast<uintptr_t>(s.data()) % 64) % 64;
    std::memcpy(x->data, bytes, x->nbytes());
    return x;
  }
  void finish(Tensor* node) {
    out = node;
    out->flags |= kFlagOutput;
    g.build(out);
    test::plan_into(g, buf);
  }
  std::vector<float> run(Backend& be) {
    be.compute(g);
    const auto* o = static_cast<const float*>(out->data);
    return std::vector<float>(o, o + out->nelements());
  }
};

std::vector<float> normal_values(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// Rows of K random values quantized to `t`.
std::vector<uint8_t> quantized(DType t, int64_t rows, int64_t k, std::mt19937& rng) {
  const std::vector<float> f = normal_values(rows * k, rng);
  std::vector<uint8_t> q(row_bytes(t, k) * rows);
  type_traits(t).quantize(f.data(), q.data(), rows, k, nullptr);
  return q;
}

// ---- the options reach the kernels ------------------------------------------

// GELU: with ggml's rounding, ggml's F16 table bit for bit; without, the
// exact function (the table's F16 steps are far wider than its error).
TEST(CpuOptions, RoundingSelectsGgmlsGeluTable) {
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -6.0f + 12.0f * static_cast<float>(i) / x.size() + 1e-3f;
  const float* table = cpu::gelu_f16_table();
  for (Isa isa : isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    for (bool round : {true, false}) {
      OneNode n;
      n.finish(gelu(n.g, n.leaf(DType::F32, {static_cast<int64_t>(x.size())}, x.data())));
      auto be = cpu::make_cpu_backend(2, isa, with_rounding(round));
      const std::vector<float> got = n.run(*be);
      size_t off_table = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float t = table[fp32_to_fp16(x[i])];
        const double exact = 0.5 * x[i] * (1 + std::tanh(0.7978845608028654 * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
        if (round) {
          EXPECT_EQ(std::memcmp(&got[i], &t, sizeof t), 0) << "x " << x[i] << " got " << got[i] << " table " << t;
        } else {
          EXPECT_NEAR(got[i], exact, 1e-6 * (1 + std::fabs(exact))) << "x " << x[i];
          off_table += got[i] != t;
        }
      }
      if (!round) {
        EXPECT_GT(off_table, x.size() / 2) << "rounding off still gave the table's values";
      }
    }
  }
}

// F16 weights: with ggml's rounding the activations are rounded to F16 first
// (1 + 2^-12 becomes 1), without they are not; on the dot path (N = 1) and
// the GEMM path (N = 32).
TEST(CpuOptions, RoundingRoundsActivationsOfF16Weights) {
  constexpr int64_t K = 64, M = 16;
  std::vector<uint16_t> w(K * M, fp32_to_fp16(1.0f));
  const float xv = 1.0f + std::ldexp(1.0f, -12);
  for (int64_t N : {1, 32})
    for (Isa isa : isas())
      for (bool round : {true, false}) {
        SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " N=" + std::to_string(N) + (round ? " rounded" : " exact"));
        std::vector<float> x(K * N, xv);
        OneNode n;
        n.finish(mul_mat(n.g, n.leaf(DType::F16, {K, M}, w.data()), n.leaf(DType::F32, {K, N}, x.data())));
        auto be = cpu::make_cpu_backend(2, isa, with_rounding(round));
        const float want = round ? static_cast<float>(K) : K * xv;
        for (float v : n.run(*be)) ASSERT_EQ(v, want);
      }
}

// The int8 GEMM off: the node takes the F32 panels, and the product agrees
// with the int8 path's within the GEMM path's bound (1e-5 sum |w||x|: both
// compute the dequantized weights times the Q8_0-rounded activations).
TEST(CpuOptions, Int8OffTakesTheF32PanelsAndAgrees) {
  constexpr int64_t K = 512, M = 48, N = 64;
  std::mt19937 rng(5);
  const std::vector<uint8_t> w = quantized(DType::Q4_0, M, K, rng);
  const std::vector<float> x = normal_values(K * N, rng);
  std::vector<float> wf(K * M);
  type_traits(DType::Q4_0).to_float(w.data(), wf.data(), K * M);
  bool any_int8 = false;
  for (Isa isa : isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    OneNode n;
    n.finish(mul_mat(n.g, n.leaf(DType::Q4_0, {K, M}, w.data()), n.leaf(DType::F32, {K, N}, x.data())));
    CpuOptions off;
    off.int8_gemm = false;
    const cpu::KernelOptions ko_on = cpu::kernel_options(isa), ko_off = cpu::kernel_options(off, isa);
    const bool has_int8 = cpu::gemm_kernels(ko_on).i8[static_cast<int>(DType::Q4_0)].pack_w != nullptr;
    EXPECT_EQ(cpu::matmul_uses_int8(*n.out, ko_on), has_int8);
    EXPECT_FALSE(cpu::matmul_uses_int8(*n.out, ko_off));
    if (!has_int8) continue;
    any_int8 = true;
    EXPECT_TRUE(cpu::matmul_uses_gemm(*n.out, ko_off));
    auto on_be = cpu::make_cpu_backend(2, isa), off_be = cpu::make_cpu_backend(2, isa, off);
    const std::vector<float> a = n.run(*on_be), b = n.run(*off_be);
    size_t differ = 0;
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = 0; i < M; ++i) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += std::fabs(static_cast<double>(wf[i * K + k]) * x[j * K + k]);
        const size_t o = j * M + i;
        EXPECT_LE(std::fabs(a[o] - b[o]), 1e-5 * s) << "row " << j << " col " << i;
        differ += a[o] != b[o];
      }
    EXPECT_GT(differ, 0u) << "the F32 panels gave the int8 path's bits: did the option reach the kernel?";
  }
  if (!any_int8) GTEST_SKIP() << "no instruction set here has int8 GEMM kernels";
}

// Packing off: prepare_weights keeps no copy, and the matrix-vector product
// is the same as with the copy (the packed kernels equal the plain ones).
TEST(CpuOptions, PackOffKeepsNoCopies) {
  constexpr int64_t K = 256, M = 24;
  std::mt19937 rng(9);
  const std::vector<uint8_t> w = quantized(DType::Q4_0, M, K, rng);
  const std::vector<float> x = normal_values(K, rng);
  for (Isa isa : isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    OneNode n;
    Tensor* wt = n.leaf(DType::Q4_0, {K, M}, w.data());
    n.finish(mul_mat(n.g, wt, n.leaf(DType::F32, {K, 1}, x.data())));
    const Tensor* weights[] = {wt};
    CpuOptions no_pack;
    no_pack.pack = false;
    auto packing = cpu::make_cpu_backend(1, isa), plain = cpu::make_cpu_backend(1, isa, no_pack);
    EXPECT_GT(packing->prepare_weights(weights, Op::MulMat), 0u);
    EXPECT_EQ(plain->prepare_weights(weights, Op::MulMat), 0u);
    const std::vector<float> a = n.run(*packing), b = n.run(*plain);
    for (int64_t i = 0; i < M; ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + std::fabs(b[i]))) << i;
    packing->release_weights(weights);
  }
}

// The prefetch distance: the backend's kernels run with the one it was made
// with (the instruction set's default unless set, up to 65536), and the
// packed product's bits do not depend on it.
TEST(CpuOptions, PrefetchDistanceReachesTheKernels) {
  constexpr int64_t K = 2048, M = 16;
  std::mt19937 rng(13);
  const std::vector<uint8_t> w = quantized(DType::Q4_K, M, K, rng);
  const std::vector<float> x = normal_values(K, rng);
  for (Isa isa : isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    auto by_default = cpu::make_cpu_backend(1, isa);
    EXPECT_EQ(cpu::kernel_options_of(*by_default)->prefetch_bytes, cpu::packed_prefetch_bytes(isa));
    OneNode n;
    Tensor* wt = n.leaf(DType::Q4_K, {K, M}, w.data());
    n.finish(mul_mat(n.g, wt, n.leaf(DType::F32, {K, 1}, x.data())));
    const Tensor* weights[] = {wt};
    ASSERT_GT(by_default->prepare_weights(weights, Op::MulMat), 0u);
    const std::vector<float> want = n.run(*by_default);
    for (size_t distance : {size_t{0}, size_t{64}, size_t{4096}, size_t{65536}}) {
      CpuOptions o;
      o.prefetch_bytes = distance;
      auto be = cpu::make_cpu_backend(1, isa, o);
      EXPECT_EQ(cpu::kernel_options_of(*be)->prefetch_bytes, distance);
      ASSERT_GT(be->prepare_weights(weights, Op::MulMat), 0u);
      const std::vector<float> got = n.run(*be);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << "prefetch " << distance;
    }
    CpuOptions far;
    far.prefetch_bytes = 65537;
    const std::string e = test::error_of([&] { cpu::make_cpu_backend(1, isa, far); });
    EXPECT_NE(e.find("prefetch distance 65537 bytes is over 65536"), std::string::npos) << e;
  }
}

// VNNI off: the int8 GEMM and packed kernels of a CPU without VNNI (AVX2:
// maddubs; AVX-512: the F32 panels, no int8 path). Only where the CPU has it.
TEST(CpuOptions, VnniOffTakesTheKernelsOfACpuWithout) {
  bool any = false;
  for (Isa isa : isas()) {
    if (!cpu::cpu_has_vnni(isa)) continue;
    any = true;
    SCOPED_TRACE(cpu::isa_name(isa));
    CpuOptions off;
    off.vnni = false;
    const cpu::KernelOptions ko = cpu::kernel_options(off, isa);
    EXPECT_FALSE(ko.vnni);
    EXPECT_TRUE(cpu::kernel_options(isa).vnni);
    const auto q4 = static_cast<int>(DType::Q4_0);
    EXPECT_NE(cpu::gemm_kernels(ko).i8[q4].pack_w, cpu::gemm_kernels(isa, true).i8[q4].pack_w);
    EXPECT_NE(cpu::gemm_kernels(ko).packed_dot[q4], cpu::gemm_kernels(isa, true).packed_dot[q4]);
    EXPECT_STREQ(cpu::int8_kernel_name(isa, false), isa == Isa::Avx2 ? "maddubs" : "none");
    EXPECT_STREQ(cpu::int8_kernel_name(isa, true), "vnni");
    auto be = cpu::make_cpu_backend(1, isa, off);
    EXPECT_FALSE(cpu::kernel_options_of(*be)->vnni);
  }
  if (!any) GTEST_SKIP() << "this CPU has no VNNI";
}

// CpuOptions::grid_gathers picks the 3-bit and 1-bit grids' kernels (dot and int8
// repacking) that read by gathers or by loads; unset, the CPU's default;
// the scalar kernels have one way. (Their results: test_qdot's kernel sets.)
TEST(CpuOptions, GridGathersPickTheIq3AndIq1Kernels) {
  for (Isa isa : isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    CpuOptions on, off;
    on.grid_gathers = true;
    off.grid_gathers = false;
    const cpu::KernelOptions ko_on = cpu::kernel_options(on, isa), ko_off = cpu::kernel_options(off, isa);
    EXPECT_EQ(ko_on.grid_gathers, isa != Isa::Scalar);
    EXPECT_FALSE(ko_off.grid_gathers);
    EXPECT_EQ(cpu::kernel_options(isa).grid_gathers, isa != Isa::Scalar && cpu::cpu_has_fast_gathers());
    for (DType t : {DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S, DType::IQ1_M, DType::IQ2_S, DType::Q4_K}) {
      const auto i = static_cast<int>(t);
      const bool differs = isa != Isa::Scalar && t != DType::IQ2_S && t != DType::Q4_K;
      EXPECT_EQ(cpu::gemm_kernels(ko_on).dot[i] != cpu::gemm_kernels(ko_off).dot[i], differs) << type_name(t);
      if (cpu::gemm_kernels(ko_on).i8[i].pack_w)
        EXPECT_EQ(cpu::gemm_kernels(ko_on).i8[i].pack_w != cpu::gemm_kernels(ko_off).i8[i].pack_w, differs)
            << type_name(t);
    }
    auto be = cpu::make_cpu_backend(1, isa, on);
    EXPECT_EQ(cpu::kernel_options_of(*be)->grid_gathers, isa != Isa::Scalar);
  }
}

// The cap: the widest instruction set the CPU has up to it; the device line
// names the kernels a backend with those options runs.
TEST(CpuOptions, IsaCapsTheInstructionSet) {
  for (auto [cap, widest] : {std::pair{CpuIsa::Scalar, Isa::Scalar}, std::pair{CpuIsa::Avx2, Isa::Avx2},
                             std::pair{CpuIsa::Avx512, Isa::Avx512}, std::pair{CpuIsa::Best, Isa::Avx512}}) {
    Isa want = widest;
    while (!cpu::isa_supported(want)) want = static_cast<Isa>(static_cast<int>(want) - 1);
    CpuOptions o;
    o.isa = cap;
    EXPECT_EQ(cpu::isa_for(cap), want);
    EXPECT_EQ(make_cpu_backend(1, o)->name(), std::string("cpu-") + cpu::isa_name(want));
    EXPECT_EQ(make_backend("cpu", 1, o)->name(), std::string("cpu-") + cpu::isa_name(want));
    const std::string line = cpu_device_info(o).name;
    EXPECT_TRUE(test::contains(line, std::string(cpu::isa_name(want)) + " kernels")) << line;
  }
  CpuOptions no_int8;
  no_int8.int8_gemm = false;
  EXPECT_TRUE(test::contains(cpu_device_info(no_int8).name, "int8 GEMM: off")) << cpu_device_info(no_int8).name;
}

// A context hands ContextOptions::cpu to its CPU backend: every field, and
// on an F16 model the rounding changes the logits as it should.
TEST(CpuOptions, ContextHandsThemToItsCpuBackend) {
  const std::string path = test::temp_dir() + "/tiny-f16.gguf";
  tools::SynthOptions so;
  so.preset = "tiny";
  so.type = DType::F16;
  tools::synth_model(so, path);
  auto m = Model::load(path);
  std::vector<Token> tokens(12);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>((i * 7919 + 3) % m->hparams().n_vocab);
  ContextOptions opt;
  opt.n_ctx = 32;
  opt.n_threads = 2;
  opt.cpu.isa = CpuIsa::Scalar;
  opt.cpu.vnni = false;
  opt.cpu.int8_gemm = false;
  opt.cpu.pack = false;
  opt.cpu.prefetch_bytes = 512;
  opt.cpu.ggml_rounding = false;
  Context exact(*m, opt);
  const cpu::KernelOptions* ko = cpu::kernel_options_of(exact.backend());
  ASSERT_NE(ko, nullptr);
  EXPECT_EQ(ko->isa, Isa::Scalar);
  EXPECT_FALSE(ko->vnni);
  EXPECT_FALSE(ko->int8_gemm);
  EXPECT_FALSE(ko->pack);
  EXPECT_EQ(ko->prefetch_bytes, 512u);
  EXPECT_FALSE(ko->ggml_rounding);
  ASSERT_TRUE(exact.decode(tokens, true));
  ContextOptions rounded_opt = opt;
  rounded_opt.cpu.ggml_rounding = true;
  Context rounded(*m, rounded_opt);
  ASSERT_TRUE(rounded.decode(tokens, true));
  const auto a = exact.last_logits(), b = rounded.last_logits();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  EXPECT_GT(diff, 0.0) << "the rounding option did not reach the kernels";
  EXPECT_LT(diff / norm, 1e-4);  // F16's rounding: small
}

// CpuOptions::profile: each compute call's time, its calling thread's
// kernels and barrier waits, and the nodes it computed; nothing without it.
// The same through bench: a generated token's breakdown.
TEST(CpuOptions, ProfileTimesKernelsAndWaitsOnlyWhenAsked) {
  Graph g;
  Tensor* x = g.new_tensor(DType::F32, {4096, 8}, "x");
  Tensor* y = add(g, silu(g, scale(g, x, 0.5f)), x);  // three computed nodes
  y->flags |= kFlagOutput;
  g.build(y);
  std::vector<char> buf;
  test::plan_into(g, buf);
  for (bool profile : {false, true}) {
    SCOPED_TRACE(profile);
    CpuOptions o;
    o.profile = profile;
    const auto be = make_cpu_backend(2, o);
    be->compute(g);
    be->compute(g);
    const Backend::Profile p = be->profile(/*reset=*/true);
    EXPECT_EQ(p.calls, profile ? 2 : 0);
    EXPECT_EQ(p.nodes, profile ? 6 : 0);
    if (profile) {
      EXPECT_GT(p.kernel_s, 0.0);
      EXPECT_LE(p.kernel_s + p.wait_s, p.compute_s);
    } else {
      EXPECT_EQ(p.compute_s, 0.0);
    }
    EXPECT_EQ(be->profile(/*reset=*/false).calls, 0) << "reset";
  }
  const auto model = Model::load(test::tiny_model_path());
  tools::BenchOptions bo;
  bo.n_prompt = 0;
  bo.n_gen = 4;
  bo.repetitions = 1;
  bo.n_threads = 2;
  EXPECT_EQ(tools::bench(*model, bo).token_time.total, 0.0);
  bo.cpu.profile = true;
  const tools::TokenTime t = tools::bench(*model, bo).token_time;
  EXPECT_GT(t.kernels, 0.0);
  EXPECT_GE(t.outside, 0.0);
  EXPECT_GT(t.nodes, 20.0);  // two layers of a dozen computed nodes and the output
  EXPECT_NE(tools::token_time_text(t).find("per generated token:"), std::string::npos);
}

// ---- the command line's reader ----------------------------------------------

// Each QLENS_CPU_* variable unset (in this scope), then set.
class CliEnv {
 public:
  CliEnv() {
    for (const char* name : kNames) {
      saved_.emplace_back(std::make_unique<test::ScopedEnv>(name, ""));  // restores the suite's value after
      unsetenv(name);
    }
  }
  static constexpr const char* kNames[] = {"QLENS_CPU_ISA",      "QLENS_CPU_VNNI",     "QLENS_CPU_GATHER",
                                           "QLENS_CPU_INT8",     "QLENS_CPU_PACK",
                                           "QLENS_CPU_PREFETCH", "QLENS_CPU_ROUND_ACTIVATIONS",
                                           "QLENS_HUGE_PAGES"};

 private:
  std::vector<std::unique_ptr<test::ScopedEnv>> saved_;
};

TEST(CpuOptionsFromEnv, UnsetGivesTheDefaults) {
  const CliEnv env;
  const CpuOptions o = cpu_options_from_env();
  EXPECT_EQ(o.isa, CpuIsa::Best);
  EXPECT_TRUE(o.vnni);
  EXPECT_FALSE(o.grid_gathers.has_value());
  EXPECT_TRUE(o.int8_gemm);
  EXPECT_TRUE(o.pack);
  EXPECT_FALSE(o.prefetch_bytes.has_value());
  EXPECT_TRUE(o.ggml_rounding);
  EXPECT_TRUE(o.huge_pages);
}

TEST(CpuOptionsFromEnv, ReadsTheInstructionSet) {
  const CliEnv env;
  for (auto [value, want] : {std::pair{"scalar", CpuIsa::Scalar}, std::pair{"avx2", CpuIsa::Avx2},
                             std::pair{"avx512", CpuIsa::Avx512}, std::pair{"", CpuIsa::Best},
                             std::pair{"AVX2", CpuIsa::Best}, std::pair{"sse", CpuIsa::Best}}) {
    setenv("QLENS_CPU_ISA", value, 1);
    EXPECT_EQ(cpu_options_from_env().isa, want) << "'" << value << "'";
  }
}

// The switches: only "0" turns one off.
TEST(CpuOptionsFromEnv, ReadsTheSwitches) {
  const CliEnv env;
  struct Switch {
    const char* name;
    bool CpuOptions::*field;
  };
  for (const Switch& s : {Switch{"QLENS_CPU_VNNI", &CpuOptions::vnni}, Switch{"QLENS_CPU_INT8", &CpuOptions::int8_gemm},
                          Switch{"QLENS_CPU_PACK", &CpuOptions::pack},
                          Switch{"QLENS_CPU_ROUND_ACTIVATIONS", &CpuOptions::ggml_rounding},
                          Switch{"QLENS_HUGE_PAGES", &CpuOptions::huge_pages}}) {
    for (auto [value, want] :
         {std::pair{"0", false}, std::pair{"1", true}, std::pair{"", true}, std::pair{"off", true}}) {
      setenv(s.name, value, 1);
      EXPECT_EQ(cpu_options_from_env().*s.field, want) << s.name << "='" << value << "'";
    }
    unsetenv(s.name);
  }
}

// QLENS_CPU_GATHER: "0" or "1" choose; anything else leaves the CPU's default.
TEST(CpuOptionsFromEnv, ReadsTheGridReads) {
  const CliEnv env;
  for (auto [value, want] : {std::pair{"0", std::optional<bool>(false)}, std::pair{"1", std::optional<bool>(true)},
                             std::pair{"", std::optional<bool>()}, std::pair{"yes", std::optional<bool>()}}) {
    setenv("QLENS_CPU_GATHER", value, 1);
    EXPECT_EQ(cpu_options_from_env().grid_gathers, want) << "'" << value << "'";
  }
}

// QLENS_CPU_PREFETCH: plain decimal 0 .. 65536; anything else is the
// default (unset).
TEST(CpuOptionsFromEnv, ReadsThePrefetchDistance) {
  const CliEnv env;
  for (auto [value, want] :
       {std::pair{"0", size_t{0}}, std::pair{"2048", size_t{2048}}, std::pair{"65536", size_t{65536}}}) {
    setenv("QLENS_CPU_PREFETCH", value, 1);
    EXPECT_EQ(cpu_options_from_env().prefetch_bytes, want) << value;
  }
  for (const char* bad : {"", "-64", "65537", "1k", " 512", "99999999999999999999"}) {
    setenv("QLENS_CPU_PREFETCH", bad, 1);
    EXPECT_FALSE(cpu_options_from_env().prefetch_bytes.has_value()) << "'" << bad << "'";
  }
}

// The QLENS_VULKAN_* variables, each unset in this scope, then set.
class VulkanCliEnv {
 public:
  VulkanCliEnv() {
    for (const char* name : {"QLENS_VULKAN_CPU_KERNELS", "QLENS_VULKAN_MEMORY_LIMIT", "QLENS_VULKAN_FAIL_SHADERS",
                             "QLENS_VULKAN_PROFILE"}) {
      saved_.emplace_back(std::make_unique<test::ScopedEnv>(name, ""));
      unsetenv(name);
    }
  }

 private:
  std::vector<std::unique_ptr<test::ScopedEnv>> saved_;
};

TEST(VulkanOptionsFromEnv, UnsetGivesTheDefaults) {
  const VulkanCliEnv env;
  const VulkanOptions o = vulkan_options_from_env();
  EXPECT_FALSE(o.cpu_kernels.has_value());
  EXPECT_EQ(o.memory_limit, 0u);
  EXPECT_TRUE(o.fail_shaders.empty());
  EXPECT_FALSE(o.profile);
}

TEST(VulkanOptionsFromEnv, ReadsEachVariable) {
  const VulkanCliEnv env;
  setenv("QLENS_VULKAN_CPU_KERNELS", "0", 1);
  EXPECT_EQ(vulkan_options_from_env().cpu_kernels, std::optional<bool>(false));
  setenv("QLENS_VULKAN_CPU_KERNELS", "1", 1);
  EXPECT_EQ(vulkan_options_from_env().cpu_kernels, std::optional<bool>(true));
  setenv("QLENS_VULKAN_FAIL_SHADERS", "mul_mat_q8_0,,silu*", 1);
  EXPECT_EQ(vulkan_options_from_env().fail_shaders, (std::vector<std::string>{"mul_mat_q8_0", "silu*"}));
  setenv("QLENS_VULKAN_PROFILE", "1", 1);
  EXPECT_TRUE(vulkan_options_from_env().profile);
  for (auto [value, want] : {std::pair{"4096", uint64_t{4096}}, std::pair{"512K", uint64_t{512} << 10},
                             std::pair{"6G", uint64_t{6} << 30}, std::pair{"1.5M", uint64_t{3} << 19}}) {
    setenv("QLENS_VULKAN_MEMORY_LIMIT", value, 1);
    EXPECT_EQ(vulkan_options_from_env().memory_limit, want) << value;
  }
}

// A limit it cannot read stops the command before any work, naming the variable.
TEST(VulkanOptionsFromEnv, ABadMemoryLimitIsAnError) {
  const VulkanCliEnv env;
  for (const char* bad : {"lots", "", "0", "-1G", "6GB", "6 G", "0.5", "1e30G"}) {
    setenv("QLENS_VULKAN_MEMORY_LIMIT", bad, 1);
    try {
      vulkan_options_from_env();
      ADD_FAILURE() << "'" << bad << "' was read as a size";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("QLENS_VULKAN_MEMORY_LIMIT: '" + std::string(bad) + "' is not a size"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace qlens
