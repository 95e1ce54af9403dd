// The families of ../shared/reference/synth (issues 13 and 14: the dense
// ones and the mixtures of experts), each against
// llama.cpp 0c1e570's outputs on the same file: its hyper-parameters, every
// node of its eval-callback dump, perplexity (from its log), and greedy text,
// for the F32 model and its F16 quantization. One table row per model.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <regex>
#include <sstream>

#include "core/text_file.h"
#include "eval_dump.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/generate/generate.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "tools/compare/llama_logits.h"
#include "tools/quantize/quantize.h"
#include "tools/perplexity/perplexity.h"

namespace qlens {
namespace {

struct Family {
  const char* model;  // reference/synth/<model>.gguf
  const char* arch;
  // The F16 file has a router near-tie that the SIMD kernels' sum order
  // resolves the other way from llama.cpp (see F16NearTie below).
  bool f16_near_tie = false;
};

const Family kFamilies[] = {{"qwen2", "qwen2"}, {"qwen3", "qwen3"},       {"llama3", "llama"},
                            {"phi3", "phi3"},   {"qwen3moe", "qwen3moe"}, {"mixtral", "llama", true}};

// Mixtral's F16 file, chunk 2, position 86, layer 1: experts 0 and 2 are
// second and third at p = 0.12886 within 2e-5 of each other (9.7e-5 in the
// F32 file; rounding the activations to F16 narrows it). The scalar kernels
// and llama.cpp pick expert 0, the AVX2/AVX-512 sum order expert 2; that one
// position then differs by KLD 0.02 (mean over 504 positions 4e-5). The
// exact checks of that file run with the scalar kernels (the options of the
// tools run here; QLENS_CPU_ISA=scalar for the CLI runs); the SIMD run is
// held to what one switched expert can cost.
CpuOptions near_tie_options(const Family& f) {
  CpuOptions o = test::cpu_options();
  if (f.f16_near_tie) o.isa = CpuIsa::Scalar;
  return o;
}
std::string near_tie_env(const Family& f) { return f.f16_near_tie ? "QLENS_CPU_ISA=scalar " : ""; }

class SynthFamily : public testing::TestWithParam<Family> {};

std::string synth(const Family& f, const char* suffix) {
  return std::string("reference/synth/") + f.model + suffix;
}

// A figure from a llama.cpp log: "Final estimate: PPL = 1520.9207 +/- ..."
// (perplexity) or "Mean PPL(Q)                   : 1821.203030 ..." (the
// F16 file's --kl-divergence run).
double logged_figure(const std::string& log, const std::string& pattern) {
  std::smatch m;
  const std::string text = read_text_file(log);
  if (!std::regex_search(text, m, std::regex(pattern))) throw std::runtime_error(log + ": no " + pattern);
  return std::stod(m[1]);
}
const char* const kFinalPpl = R"(Final estimate: PPL = ([0-9.]+))";
const char* const kMeanPplQ = R"(Mean PPL\(Q\)\s*: ([0-9.]+))";

TEST_P(SynthFamily, LoadsAsItsArchitecture) {
  QLENS_REQUIRE_SHARED(path, synth(GetParam(), ".gguf"));
  auto m = Model::load(path);
  EXPECT_EQ(m->hparams().arch, GetParam().arch);
}

// The dumps were made on an AVX-512 machine with flash attention (F16
// accumulation of the values): values within 1e-3 of each node's scale (the
// worst, seen: 9.4e-4 with the SIMD kernels), 1.5e-3 with the scalar ones
// (qwen3moe's ffn_moe_swiglu-1 at 1.03e-3: the F16 accumulation's noise
// lands on another sum order), sums within 5e-3.
TEST_P(SynthFamily, EveryNodeMatchesLlamaCppDump) {
  QLENS_REQUIRE_SHARED(path, synth(GetParam(), ".gguf"));
  QLENS_REQUIRE_SHARED(dump, synth(GetParam(), ".eval-callback.txt"));
  const CpuOptions cpu = test::cpu_options();
  const auto matches = test::compare_model_with_dump(path, dump, "Once upon a time", test::kLlamaCppAliases, cpu);
  ASSERT_GT(matches.size(), 20u);
  const test::NodeMatch* worst = &matches[0];
  const double bound = cpu.isa == CpuIsa::Scalar ? 1.5e-3 : 1e-3;
  for (const auto& m : matches) {
    EXPECT_LE(m.worst_value_rel, bound) << m.name << ": " << m.worst_ours << " vs " << m.worst_ref;
    EXPECT_LE(m.sum_rel, 5e-3) << m.name << " sum";
    if (m.worst_value_rel > worst->worst_value_rel) worst = &m;
  }
  std::printf("%s: %zu nodes; worst %s %.3g\n", GetParam().model, matches.size(), worst->name.c_str(),
              worst->worst_value_rel);
}

// llama-perplexity -c 128 -b 128 --chunks 8 on the first 200,000 bytes of
// tinystories_val, within 1e-4: the F32 file against its log, the F16 file
// against llama.cpp's run of the F16 file.
TEST_P(SynthFamily, PerplexityMatchesLlamaCpp) {
  QLENS_REQUIRE_SHARED(path, synth(GetParam(), ".gguf"));
  QLENS_REQUIRE_SHARED(f16, synth(GetParam(), ".f16.gguf"));
  QLENS_REQUIRE_SHARED(log, synth(GetParam(), ".perplexity.log"));
  QLENS_REQUIRE_SHARED(f16_log, synth(GetParam(), ".f16.kld.log"));
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  const std::string text = read_text_file(text_path).substr(0, 200000);
  tools::PerplexityOptions opt;
  opt.n_ctx = 128;
  opt.n_batch = 128;
  opt.max_chunks = 8;
  for (const auto& [p, want] : {std::pair{path, logged_figure(log, kFinalPpl)}, std::pair{f16, logged_figure(f16_log, kMeanPplQ)}}) {
    opt.cpu = near_tie_options(p == f16 ? GetParam() : Family{});
    auto m = Model::load(p);
    const auto r = tools::perplexity(*m, m->vocab().tokenize(text, true), opt);
    std::printf("%s: PPL %.4f, llama.cpp %.4f (%+.2e)\n", p.c_str(), r.ppl, want, r.ppl / want - 1);
    EXPECT_NEAR(r.ppl, want, want * 1e-4) << p;
  }
}

// Position by position against llama.cpp's full distributions (the .kld
// file of its F32 run): mean KLD under 1e-5 and the same top token at 99.5%
// of the 504 positions, for the F32 file and its F16 quantization (llama.cpp's
// own F16 run: mean KLD 1e-6 or less, same top token 99.4-100%).
TEST_P(SynthFamily, LogProbabilitiesMatchLlamaCpp) {
  QLENS_REQUIRE_SHARED(kld, synth(GetParam(), ".kld"));
  const auto base = tools::LlamaLogitsFile::load(kld);
  EXPECT_EQ(base.n_ctx(), 128);
  EXPECT_EQ(base.n_chunk(), 8);
  for (const char* variant : {"", ".f16"}) {
    QLENS_REQUIRE_SHARED(path, synth(GetParam(), variant) + ".gguf");
    auto m = Model::load(path);
    tools::KldOptions ko;
    ko.cpu = test::cpu_options();
    if (*variant && GetParam().f16_near_tie) {
      const auto simd = tools::kld_against_file(*m, base, ko);
      std::printf("%s, SIMD kernels: mean KLD %.3g, max %.3g\n", path.c_str(), simd.mean_kld, simd.max_kld);
      EXPECT_LT(simd.mean_kld, 1e-4);
      EXPECT_LT(simd.max_kld, 0.05);
    }
    ko.cpu = near_tie_options(*variant ? GetParam() : Family{});
    const auto r = tools::kld_against_file(*m, base, ko);
    std::printf("%s: mean KLD %.3g, max %.3g, same top %.2f%%, PPL %.4f (file %.4f)\n", path.c_str(), r.mean_kld,
                r.max_kld, 100 * r.same_top, r.ppl, r.ppl_base);
    EXPECT_EQ(r.n_scored, 504);
    EXPECT_LT(r.mean_kld, 1e-5) << path;
    EXPECT_GE(r.same_top, 0.995) << path;
  }
}

TEST_P(SynthFamily, GreedyTextMatchesLlamaCpp) {
  for (const char* variant : {"", ".f16"}) {
    QLENS_REQUIRE_SHARED(path, synth(GetParam(), variant) + ".gguf");
    QLENS_REQUIRE_SHARED(greedy, synth(GetParam(), variant) + ".greedy.txt");
    auto m = Model::load(path);
    tools::GenerateOptions opt;
    opt.n_predict = 24;
    opt.sampler.temperature = 0;
    opt.cpu = test::cpu_options();
    const auto r = tools::generate(*m, "Once upon a time", opt);
    // llama-completion echoes the prompt with SentencePiece's leading space
    // and ends with a blank line.
    std::string expected = read_text_file(greedy);
    while (!expected.empty() && expected.back() == '\n') expected.pop_back();
    EXPECT_EQ(" Once upon a time" + r.text, expected) << path;
  }
}

// A file that is not one, or is cut short, is an error naming it.
TEST(LlamaLogitsFile, BadFilesAreClearErrors) {
  QLENS_REQUIRE_SHARED(kld, "reference/synth/qwen2.kld");
  const std::string dir = test::temp_dir();
  const std::string whole = read_text_file(kld);
  write_file_atomic(dir + "/cut.kld", whole.substr(0, 1000));
  write_file_atomic(dir + "/text.kld", "hello\n");
  std::string sizes = whole.substr(0, 20);
  sizes[12] = '\xff';  // n_vocab -> negative
  sizes[13] = sizes[14] = sizes[15] = '\xff';
  write_file_atomic(dir + "/sizes.kld", sizes + whole.substr(20));
  for (const char* name : {"cut.kld", "text.kld", "sizes.kld"}) {
    try {
      tools::LlamaLogitsFile::load(dir + "/" + name);
      ADD_FAILURE() << name << " loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

// Runs the qlens tool; `env`: variable assignments for its command line
// ("QLENS_CPU_ISA=scalar ").
int qlens_cli(const std::string& args, std::string* out, const std::string& env = "");

// qlens perplexity --kl-divergence-base writes llama.cpp's format: run on the
// same text and settings, its file has llama.cpp's tokens, and its records
// decode to llama.cpp's log-probabilities within the engines' own difference
// plus the 16-bit steps of both files (seen: 1.0e-3 to 3.5e-3); read back
// with --kl-divergence it scores the model at KLD ~0.
TEST_P(SynthFamily, WritesLlamaCppsLogProbabilityFile) {
  QLENS_REQUIRE_SHARED(path, synth(GetParam(), ".gguf"));
  QLENS_REQUIRE_SHARED(kld, synth(GetParam(), ".kld"));
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  const std::string dir = test::temp_dir();
  write_file_atomic(dir + "/text.txt", read_text_file(text_path).substr(0, 200000));
  std::string out;
  ASSERT_EQ(qlens_cli("perplexity -m " + path + " -f " + dir + "/text.txt -c 128 -b 128 --chunks 8 -t 2 "
                      "--kl-divergence-base " + dir + "/ours.kld",
                      &out),
            0)
      << out;
  const auto ours = tools::LlamaLogitsFile::load(dir + "/ours.kld");
  const auto theirs = tools::LlamaLogitsFile::load(kld);
  ASSERT_EQ(ours.n_chunk(), theirs.n_chunk());
  double worst = 0;
  for (int64_t c = 0; c < ours.n_chunk(); ++c) {
    EXPECT_EQ(ours.chunk_tokens(c), theirs.chunk_tokens(c)) << "chunk " << c;
    for (int64_t k = 0; k < ours.n_scored_per_chunk(); ++k) {
      const auto a = ours.log_probs(c, k), b = theirs.log_probs(c, k);
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    }
  }
  std::printf("%s: largest log-probability difference %.2e\n", GetParam().model, worst);
  EXPECT_LT(worst, 5e-3);
  ASSERT_EQ(qlens_cli("perplexity -m " + path + " --kl-divergence-base " + dir + "/ours.kld --kl-divergence -t 2", &out), 0)
      << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(Mean\s+KLD:\s+(-?[0-9.]+))"))) << out;
  EXPECT_LT(std::fabs(std::stod(m[1])), 1e-6) << out;
  EXPECT_NE(qlens_cli("perplexity -m " + path + " -f " + dir + "/text.txt --kl-divergence-base " + path, &out), 0);
  EXPECT_NE(out.find("is the same file as the input -m"), std::string::npos) << out;
}

// qlens compare -m F16 --kl-divergence-base <m>.kld reads llama.cpp's file
// as the reference: the file's own perplexity is a property of the file (as
// llama.cpp printed it, to its 6 digits), the F16 model's as llama.cpp's
// --kl-divergence run of it within 1e-4, and the KLD as small.
TEST_P(SynthFamily, CompareReadsLlamaCppsLogProbabilityFile) {
  QLENS_REQUIRE_SHARED(f16, synth(GetParam(), ".f16.gguf"));
  QLENS_REQUIRE_SHARED(kld, synth(GetParam(), ".kld"));
  QLENS_REQUIRE_SHARED(f16_log, synth(GetParam(), ".f16.kld.log"));
  std::string out;
  ASSERT_EQ(qlens_cli("compare -m " + f16 + " --kl-divergence-base " + kld + " -t 2", &out, near_tie_env(GetParam())),
            0)
      << out;
  const auto ours = [&](const char* pattern) {
    std::smatch m;
    if (!std::regex_search(out, m, std::regex(pattern))) throw std::runtime_error(out + ": no " + pattern);
    return std::stod(m[1]);
  };
  const char* const base_ppl = R"(Mean PPL\(base\)\s*: ([0-9.]+))";
  const double want_base = logged_figure(f16_log, base_ppl), want_q = logged_figure(f16_log, kMeanPplQ);
  EXPECT_NEAR(ours(base_ppl), want_base, 2e-6 * want_base) << out;
  EXPECT_NEAR(ours(kMeanPplQ), want_q, 1e-4 * want_q) << out;
  EXPECT_LT(std::fabs(ours(R"(Mean\s+KLD:\s+(-?[0-9.]+))")), 1e-4) << out;
  EXPECT_NE(out.find("504 tokens scored against"), std::string::npos) << out;
}

int qlens_cli(const std::string& args, std::string* out, const std::string& env) {
  return test::run_command(env + std::string(QLENS_BINARY) + " " + args, out);
}

// The main job on each family, through the CLI: imatrix (the fused matrices
// under llama.cpp's names, no biases), sensitivity, a plan at 5 bits per
// weight, quantization with it, and the quantized model's perplexity within
// 10% of the original's.
TEST_P(SynthFamily, TheMainJobRuns) {
  QLENS_REQUIRE_SHARED(path, synth(GetParam(), ".gguf"));
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  const std::string m = GetParam().model;
  const test::MainJob job = test::run_main_job(path, text_path);
  EXPECT_EQ(job.imatrix_tensors.count(m == "phi3" ? "blk.0.attn_qkv.weight" : "blk.0.attn_q.weight"), 1u);
  for (const auto& n : job.imatrix_tensors) EXPECT_EQ(n.find(".bias"), std::string::npos) << n;
  std::printf("%s: PPL %.2f, planned at 5 bpw %.2f\n", m.c_str(), job.ppl, job.ppl_planned);
  EXPECT_LT(std::fabs(job.ppl_planned / job.ppl - 1), 0.1);
}

// The type of every quantized tensor in llama-quantize 0c1e570's output for
// these files and mixes (run outside the repository; every other tensor, the
// norms, biases and rope factors, stays F32). The rows fit no K block (64-,
// 128-, 192- and 320-wide), so this checks the role rules and the fallback
// together, and Phi-3's attn_qkv, which llama.cpp counts as attn_v.
struct LlamaCppMix {
  const char* model;
  const char* mix;
  const char* types;  // "name=TYPE ..." for the non-F32 tensors
};
const LlamaCppMix kLlamaCppMixes[] = {
    {"qwen2", "Q4_K_M", "blk.0.attn_k.weight=Q5_0 blk.0.attn_output.weight=Q5_0 blk.0.attn_q.weight=Q5_0 blk.0.attn_v.weight=Q5_0 blk.0.ffn_down.weight=Q5_0 blk.0.ffn_gate.weight=Q5_0 blk.0.ffn_up.weight=Q5_0 blk.1.attn_k.weight=Q5_0 blk.1.attn_output.weight=Q5_0 blk.1.attn_q.weight=Q5_0 blk.1.attn_v.weight=Q8_0 blk.1.ffn_down.weight=Q8_0 blk.1.ffn_gate.weight=Q5_0 blk.1.ffn_up.weight=Q5_0 token_embd.weight=Q8_0"},
    {"qwen2", "Q3_K_M", "blk.0.attn_k.weight=Q4_0 blk.0.attn_output.weight=Q5_0 blk.0.attn_q.weight=Q4_0 blk.0.attn_v.weight=Q5_1 blk.0.ffn_down.weight=Q5_0 blk.0.ffn_gate.weight=Q4_0 blk.0.ffn_up.weight=Q4_0 blk.1.attn_k.weight=Q4_0 blk.1.attn_output.weight=Q5_0 blk.1.attn_q.weight=Q4_0 blk.1.attn_v.weight=Q5_1 blk.1.ffn_down.weight=Q5_0 blk.1.ffn_gate.weight=Q4_0 blk.1.ffn_up.weight=Q4_0 token_embd.weight=Q8_0"},
    {"qwen2", "Q2_K", "blk.0.attn_k.weight=Q4_0 blk.0.attn_output.weight=Q4_0 blk.0.attn_q.weight=Q4_0 blk.0.attn_v.weight=Q4_0 blk.0.ffn_down.weight=Q4_0 blk.0.ffn_gate.weight=Q4_0 blk.0.ffn_up.weight=Q4_0 blk.1.attn_k.weight=Q4_0 blk.1.attn_output.weight=Q4_0 blk.1.attn_q.weight=Q4_0 blk.1.attn_v.weight=Q4_0 blk.1.ffn_down.weight=Q4_0 blk.1.ffn_gate.weight=Q4_0 blk.1.ffn_up.weight=Q4_0 token_embd.weight=Q8_0"},
    {"qwen2", "Q5_K_S", "blk.0.attn_k.weight=Q5_1 blk.0.attn_output.weight=Q5_1 blk.0.attn_q.weight=Q5_1 blk.0.attn_v.weight=Q5_1 blk.0.ffn_down.weight=Q5_1 blk.0.ffn_gate.weight=Q5_1 blk.0.ffn_up.weight=Q5_1 blk.1.attn_k.weight=Q5_1 blk.1.attn_output.weight=Q5_1 blk.1.attn_q.weight=Q5_1 blk.1.attn_v.weight=Q5_1 blk.1.ffn_down.weight=Q5_1 blk.1.ffn_gate.weight=Q5_1 blk.1.ffn_up.weight=Q5_1 token_embd.weight=Q8_0"},
    {"qwen3", "Q4_K_M", "blk.0.attn_k.weight=Q5_0 blk.0.attn_output.weight=Q5_0 blk.0.attn_q.weight=Q5_0 blk.0.attn_v.weight=Q5_0 blk.0.ffn_down.weight=Q4_K blk.0.ffn_gate.weight=Q5_0 blk.0.ffn_up.weight=Q5_0 blk.1.attn_k.weight=Q5_0 blk.1.attn_output.weight=Q5_0 blk.1.attn_q.weight=Q5_0 blk.1.attn_v.weight=Q5_0 blk.1.ffn_down.weight=Q4_K blk.1.ffn_gate.weight=Q5_0 blk.1.ffn_up.weight=Q5_0 blk.2.attn_k.weight=Q5_0 blk.2.attn_output.weight=Q5_0 blk.2.attn_q.weight=Q5_0 blk.2.attn_v.weight=Q8_0 blk.2.ffn_down.weight=Q6_K blk.2.ffn_gate.weight=Q5_0 blk.2.ffn_up.weight=Q5_0 output.weight=Q8_0 token_embd.weight=Q5_0"},
    {"qwen3", "Q3_K_M", "blk.0.attn_k.weight=Q4_0 blk.0.attn_output.weight=Q5_0 blk.0.attn_q.weight=Q4_0 blk.0.attn_v.weight=Q5_1 blk.0.ffn_down.weight=Q4_K blk.0.ffn_gate.weight=Q4_0 blk.0.ffn_up.weight=Q4_0 blk.1.attn_k.weight=Q4_0 blk.1.attn_output.weight=Q5_0 blk.1.attn_q.weight=Q4_0 blk.1.attn_v.weight=Q5_1 blk.1.ffn_down.weight=Q4_K blk.1.ffn_gate.weight=Q4_0 blk.1.ffn_up.weight=Q4_0 blk.2.attn_k.weight=Q4_0 blk.2.attn_output.weight=Q5_0 blk.2.attn_q.weight=Q4_0 blk.2.attn_v.weight=Q5_0 blk.2.ffn_down.weight=Q4_K blk.2.ffn_gate.weight=Q4_0 blk.2.ffn_up.weight=Q4_0 output.weight=Q8_0 token_embd.weight=Q4_0"},
    {"qwen3", "Q2_K", "blk.0.attn_k.weight=Q4_0 blk.0.attn_output.weight=Q4_0 blk.0.attn_q.weight=Q4_0 blk.0.attn_v.weight=Q4_0 blk.0.ffn_down.weight=Q3_K blk.0.ffn_gate.weight=Q4_0 blk.0.ffn_up.weight=Q4_0 blk.1.attn_k.weight=Q4_0 blk.1.attn_output.weight=Q4_0 blk.1.attn_q.weight=Q4_0 blk.1.attn_v.weight=Q4_0 blk.1.ffn_down.weight=Q3_K blk.1.ffn_gate.weight=Q4_0 blk.1.ffn_up.weight=Q4_0 blk.2.attn_k.weight=Q4_0 blk.2.attn_output.weight=Q4_0 blk.2.attn_q.weight=Q4_0 blk.2.attn_v.weight=Q4_0 blk.2.ffn_down.weight=Q3_K blk.2.ffn_gate.weight=Q4_0 blk.2.ffn_up.weight=Q4_0 output.weight=Q8_0 token_embd.weight=Q4_0"},
    {"qwen3", "Q5_K_S", "blk.0.attn_k.weight=Q5_1 blk.0.attn_output.weight=Q5_1 blk.0.attn_q.weight=Q5_1 blk.0.attn_v.weight=Q5_1 blk.0.ffn_down.weight=Q5_K blk.0.ffn_gate.weight=Q5_1 blk.0.ffn_up.weight=Q5_1 blk.1.attn_k.weight=Q5_1 blk.1.attn_output.weight=Q5_1 blk.1.attn_q.weight=Q5_1 blk.1.attn_v.weight=Q5_1 blk.1.ffn_down.weight=Q5_K blk.1.ffn_gate.weight=Q5_1 blk.1.ffn_up.weight=Q5_1 blk.2.attn_k.weight=Q5_1 blk.2.attn_output.weight=Q5_1 blk.2.attn_q.weight=Q5_1 blk.2.attn_v.weight=Q5_1 blk.2.ffn_down.weight=Q5_K blk.2.ffn_gate.weight=Q5_1 blk.2.ffn_up.weight=Q5_1 output.weight=Q8_0 token_embd.weight=Q5_1"},
    {"llama3", "Q4_K_M", "blk.0.attn_k.weight=Q5_0 blk.0.attn_output.weight=Q5_0 blk.0.attn_q.weight=Q5_0 blk.0.attn_v.weight=Q5_0 blk.0.ffn_down.weight=Q5_0 blk.0.ffn_gate.weight=Q5_0 blk.0.ffn_up.weight=Q5_0 blk.1.attn_k.weight=Q5_0 blk.1.attn_output.weight=Q5_0 blk.1.attn_q.weight=Q5_0 blk.1.attn_v.weight=Q5_0 blk.1.ffn_down.weight=Q5_0 blk.1.ffn_gate.weight=Q5_0 blk.1.ffn_up.weight=Q5_0 blk.2.attn_k.weight=Q5_0 blk.2.attn_output.weight=Q5_0 blk.2.attn_q.weight=Q5_0 blk.2.attn_v.weight=Q8_0 blk.2.ffn_down.weight=Q8_0 blk.2.ffn_gate.weight=Q5_0 blk.2.ffn_up.weight=Q5_0 output.weight=Q8_0 token_embd.weight=Q5_0"},
    {"llama3", "Q3_K_M", "blk.0.attn_k.weight=Q4_0 blk.0.attn_output.weight=Q5_0 blk.0.attn_q.weight=Q4_0 blk.0.attn_v.weight=Q5_1 blk.0.ffn_down.weight=Q5_0 blk.0.ffn_gate.weight=Q4_0 blk.0.ffn_up.weight=Q4_0 blk.1.attn_k.weight=Q4_0 blk.1.attn_output.weight=Q5_0 blk.1.attn_q.weight=Q4_0 blk.1.attn_v.weight=Q5_1 blk.1.ffn_down.weight=Q5_0 blk.1.ffn_gate.weight=Q4_0 blk.1.ffn_up.weight=Q4_0 blk.2.attn_k.weight=Q4_0 blk.2.attn_output.weight=Q5_0 blk.2.attn_q.weight=Q4_0 blk.2.attn_v.weight=Q5_0 blk.2.ffn_down.weight=Q5_0 blk.2.ffn_gate.weight=Q4_0 blk.2.ffn_up.weight=Q4_0 output.weight=Q8_0 token_embd.weight=Q4_0"},
    {"llama3", "Q2_K", "blk.0.attn_k.weight=Q4_0 blk.0.attn_output.weight=Q4_0 blk.0.attn_q.weight=Q4_0 blk.0.attn_v.weight=Q5_0 blk.0.ffn_down.weight=Q4_0 blk.0.ffn_gate.weight=Q4_0 blk.0.ffn_up.weight=Q4_0 blk.1.attn_k.weight=Q4_0 blk.1.attn_output.weight=Q4_0 blk.1.attn_q.weight=Q4_0 blk.1.attn_v.weight=Q5_0 blk.1.ffn_down.weight=Q4_0 blk.1.ffn_gate.weight=Q4_0 blk.1.ffn_up.weight=Q4_0 blk.2.attn_k.weight=Q4_0 blk.2.attn_output.weight=Q4_0 blk.2.attn_q.weight=Q4_0 blk.2.attn_v.weight=Q5_0 blk.2.ffn_down.weight=Q4_0 blk.2.ffn_gate.weight=Q4_0 blk.2.ffn_up.weight=Q4_0 output.weight=Q8_0 token_embd.weight=Q4_0"},
    {"llama3", "Q5_K_S", "blk.0.attn_k.weight=Q5_1 blk.0.attn_output.weight=Q5_1 blk.0.attn_q.weight=Q5_1 blk.0.attn_v.weight=Q5_1 blk.0.ffn_down.weight=Q5_1 blk.0.ffn_gate.weight=Q5_1 blk.0.ffn_up.weight=Q5_1 blk.1.attn_k.weight=Q5_1 blk.1.attn_output.weight=Q5_1 blk.1.attn_q.weight=Q5_1 blk.1.attn_v.weight=Q5_1 blk.1.ffn_down.weight=Q5_1 blk.1.ffn_gate.weight=Q5_1 blk.1.ffn_up.weight=Q5_1 blk.2.attn_k.weight=Q5_1 blk.2.attn_output.weight=Q5_1 blk.2.attn_q.weight=Q5_1 blk.2.attn_v.weight=Q5_1 blk.2.ffn_down.weight=Q5_1 blk.2.ffn_gate.weight=Q5_1 blk.2.ffn_up.weight=Q5_1 output.weight=Q8_0 token_embd.weight=Q5_1"},
    {"phi3", "Q4_K_M", "blk.0.attn_output.weight=Q5_0 blk.0.attn_qkv.weight=Q5_0 blk.0.ffn_down.weight=Q5_0 blk.0.ffn_up.weight=Q5_0 blk.1.attn_output.weight=Q5_0 blk.1.attn_qkv.weight=Q5_0 blk.1.ffn_down.weight=Q5_0 blk.1.ffn_up.weight=Q5_0 blk.2.attn_output.weight=Q5_0 blk.2.attn_qkv.weight=Q8_0 blk.2.ffn_down.weight=Q8_0 blk.2.ffn_up.weight=Q5_0 output.weight=Q8_0 token_embd.weight=Q5_0"},
    {"phi3", "Q3_K_M", "blk.0.attn_output.weight=Q5_0 blk.0.attn_qkv.weight=Q5_1 blk.0.ffn_down.weight=Q5_0 blk.0.ffn_up.weight=Q4_0 blk.1.attn_output.weight=Q5_0 blk.1.attn_qkv.weight=Q5_1 blk.1.ffn_down.weight=Q5_0 blk.1.ffn_up.weight=Q4_0 blk.2.attn_output.weight=Q5_0 blk.2.attn_qkv.weight=Q5_0 blk.2.ffn_down.weight=Q5_0 blk.2.ffn_up.weight=Q4_0 output.weight=Q8_0 token_embd.weight=Q4_0"},
    {"phi3", "Q2_K", "blk.0.attn_output.weight=Q4_0 blk.0.attn_qkv.weight=Q4_0 blk.0.ffn_down.weight=Q4_0 blk.0.ffn_up.weight=Q4_0 blk.1.attn_output.weight=Q4_0 blk.1.attn_qkv.weight=Q4_0 blk.1.ffn_down.weight=Q4_0 blk.1.ffn_up.weight=Q4_0 blk.2.attn_output.weight=Q4_0 blk.2.attn_qkv.weight=Q4_0 blk.2.ffn_down.weight=Q4_0 blk.2.ffn_up.weight=Q4_0 output.weight=Q8_0 token_embd.weight=Q4_0"},
    {"phi3", "Q5_K_S", "blk.0.attn_output.weight=Q5_1 blk.0.attn_qkv.weight=Q5_1 blk.0.ffn_down.weight=Q5_1 blk.0.ffn_up.weight=Q5_1 blk.1.attn_output.weight=Q5_1 blk.1.attn_qkv.weight=Q5_1 blk.1.ffn_down.weight=Q5_1 blk.1.ffn_up.weight=Q5_1 blk.2.attn_output.weight=Q5_1 blk.2.attn_qkv.weight=Q5_1 blk.2.ffn_down.weight=Q5_1 blk.2.ffn_up.weight=Q5_1 output.weight=Q8_0 token_embd.weight=Q5_1"},
};

TEST(SynthFamilies, QuantizeRulesGiveLlamaCppsTypes) {
  for (const LlamaCppMix& want : kLlamaCppMixes) {
    SCOPED_TRACE(std::string(want.model) + " " + want.mix);
    QLENS_REQUIRE_SHARED(path, std::string("reference/synth/") + want.model + ".gguf");
    auto in = gguf::File::open(path);
    tools::QuantizeOptions opt;
    opt.mix = want.mix;
    const tools::QuantizePlan plan = tools::plan_quantization(*in, opt);
    std::map<std::string, std::string> expected;
    std::istringstream words(want.types);
    for (std::string w; words >> w;) expected[w.substr(0, w.find('='))] = w.substr(w.find('=') + 1);
    ASSERT_EQ(plan.tensors.size(), in->tensors().size());
    for (const auto& t : plan.tensors) {
      const auto it = expected.find(t.name);
      EXPECT_EQ(std::string(type_name(t.to)), it == expected.end() ? "F32" : it->second) << t.name << " (" << t.reason << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Synth, SynthFamily, testing::ValuesIn(kFamilies),
                         [](const testing::TestParamInfo<Family>& i) { return std::string(i.param.model); });

}  // namespace
}  // namespace qlens
