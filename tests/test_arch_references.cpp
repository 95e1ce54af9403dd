// The architectures of 2026 against llama.cpp 0c1e570's outputs on tiny
// synthetic models committed in tests/data (../shared covers the older
// families only; tests/data/README.md says how each file was made): the whole
// distribution at every scored position of its perplexity run, every node of
// its eval-callback dump, its greedy text, its importance matrix, and the same
// for the quantized files its publishers use (gpt-oss's MXFP4_MOE).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "core/text_file.h"
#include "eval_dump.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/compare/llama_logits.h"
#include "tools/generate/generate.h"
#include "tools/imatrix/imatrix.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/perplexity/perplexity.h"

namespace qlens {
namespace {

const std::string kData = std::string(QLENS_SOURCE_DIR) + "/tests/data/";

struct ArchReference {
  const char* model;  // tests/data/<model>.gguf, .kld, .eval-callback.txt, .greedy.txt, .imatrix.gguf
  const char* arch;
  // A quantized file llama-quantize wrote from the model (tests/data/<model>.<quantized>.gguf,
  // with llama.cpp's perplexity log against the .kld and its greedy text), or null.
  const char* quantized = nullptr;
  // Bounds where llama.cpp's own runs spread wider than the defaults (1e-3
  // for nodes and imatrix values, no routing difference): measured and
  // stated in tests/data/README.md.
  double node_bound = 1e-3;     // of a node's scale, every kernel set
  double imatrix_bound = 1e-3;  // relative, per value of the matrices whose counts agree
  // Mean KLD against the .kld (the maximum: 100 times it). The models'
  // logits have a standard deviation near 1.5, and the .kld keeps each
  // log-probability in 16 bits: llama.cpp's own reruns reach a maximum of
  // 1e-5 against it too (tests/data/README.md).
  double kld_bound = 1e-6;
  // The quantized file's perplexity against llama.cpp's (relative): 1e-4,
  // or twice llama.cpp's own spread where its -fa on / -fa off runs move it
  // more (gpt-oss-tiny's MXFP4 file: 1.9e-3, its routers' near-ties).
  double quantized_bound = 1e-4;
};

// The references' matrices are F32 (as the issue asks), so llama.cpp and
// qlens differ by the order of F32 sums alone: the five older models' nodes
// agree within 2.1e-6 of a node's scale and their imatrix values within
// 8e-5. Gemma 4's unscaled attention scores amplify those differences: its
// nodes agree within 5.5e-4. gemma4moe-tiny: llama.cpp's own -fa on run
// moves its imatrix values by up to 4.9e-3 (the last layer's experts),
// qlens's differ by 1.1e-3 (tests/data/README.md).
const ArchReference kReferences[] = {{"gpt-oss-tiny", "gpt-oss", "mxfp4", 1e-3, 1e-3, 1e-6, 4e-3},
                                     {"deepseek2-tiny", "deepseek2"},
                                     {"glm4moe-tiny", "glm4moe"},
                                     {"qwen35-tiny", "qwen35"},
                                     {"qwen35moe-tiny", "qwen35moe"},
                                     {"gemma4-tiny", "gemma4"},
                                     {"gemma4moe-tiny", "gemma4", nullptr, 1e-3, 5e-3}};

class ArchReferenceTest : public testing::TestWithParam<ArchReference> {
 protected:
  std::string file(const std::string& suffix) const { return kData + GetParam().model + suffix; }
  // The model (made at test time: test::arch_reference_model), or its
  // quantized file (variant ".mxfp4", committed).
  std::string model(const std::string& variant = "") const {
    return variant.empty() ? test::arch_reference_model(GetParam().model) : file(variant + ".gguf");
  }
};

// llama.cpp's perplexity runs: -c 128 --chunks 4 on the first 200,000 bytes of
// tinystories_val.
std::vector<Token> reference_text(const Model& m) {
  const std::string path = test::shared_path("data/tinystories/tinystories_val.txt");
  return m.vocab().tokenize(read_text_file(path).substr(0, 200000), true);
}

// qlens agrees with each .kld to a mean KLD of at most 4.2e-7; each
// architecture's features, switched off one at a time, move it by 1e-4 to 1
// (tests/data/README.md), so the bound of 1e-6 sees any of them.
TEST_P(ArchReferenceTest, LogProbabilitiesMatchLlamaCpp) {
  const auto base = tools::LlamaLogitsFile::load(file(".kld"));
  auto m = Model::load(model());
  EXPECT_EQ(m->hparams().arch, GetParam().arch);
  tools::KldOptions ko;
  ko.cpu = test::cpu_options();
  ko.cache_type = DType::F32;
  const auto r = tools::kld_against_file(*m, base, ko);
  std::printf("%s: mean KLD %.3g, max %.3g, same top %.2f%%, PPL %.4f (file %.4f)\n", GetParam().model, r.mean_kld,
              r.max_kld, 100 * r.same_top, r.ppl, r.ppl_base);
  EXPECT_EQ(r.n_scored, base.n_chunk() * base.n_scored_per_chunk());
  EXPECT_LT(r.mean_kld, GetParam().kld_bound);
  EXPECT_LT(r.max_kld, 100 * GetParam().kld_bound);
  EXPECT_GE(r.same_top, 0.99);
  EXPECT_NEAR(r.ppl, r.ppl_base, r.ppl_base * 1e-4);
}

// llama-eval-callback -fa off with an F32 cache: every node qlens names as
// llama.cpp does within 1e-3 of the node's scale (node_bound), sums within
// 5e-3. These
// graphs name "attn_out" themselves where llama.cpp's do (gpt-oss: after the
// output bias), so that alias of the llama graph's dumps is left out.
TEST_P(ArchReferenceTest, EveryNodeMatchesLlamaCppDump) {
  auto aliases = test::kLlamaCppAliases;
  aliases.erase("attn_out");
  const auto matches = test::compare_model_with_dump(model(), file(".eval-callback.txt"), "Once upon a time",
                                                     aliases, test::cpu_options(), DType::F32);
  ASSERT_GT(matches.size(), 20u);
  const test::NodeMatch* worst = &matches[0];
  for (const auto& m : matches) {
    EXPECT_LE(m.worst_value_rel, GetParam().node_bound) << m.name << ": " << m.worst_ours << " vs " << m.worst_ref;
    EXPECT_LE(m.sum_rel, 5e-3) << m.name << " sum";
    if (m.worst_value_rel > worst->worst_value_rel) worst = &m;
  }
  std::printf("%s: %zu nodes; worst %s %.3g\n", GetParam().model, matches.size(), worst->name.c_str(),
              worst->worst_value_rel);
}

// llama-completion's 24 greedy tokens, for the model and its quantized file.
TEST_P(ArchReferenceTest, GreedyTextMatchesLlamaCpp) {
  std::vector<std::string> variants = {""};
  if (GetParam().quantized) variants.push_back(std::string(".") + GetParam().quantized);
  for (const std::string& variant : variants) {
    auto m = Model::load(model(variant));
    tools::GenerateOptions opt;
    opt.n_predict = 24;
    opt.sampler.temperature = 0;
    opt.cache_type = DType::F32;
    opt.cpu = test::cpu_options();
    auto r = tools::generate(*m, "Once upon a time", opt);
    // llama-completion echoes the prompt with SentencePiece's leading space
    // and ends with a blank line; it prints pieces as C strings, so a byte
    // token <0x00> shows as nothing.
    std::string expected = read_text_file(file(variant + ".greedy.txt"));
    while (!expected.empty() && expected.back() == '\n') expected.pop_back();
    std::erase(r.text, '\0');
    // llama-completion marks a stop at the end-of-sequence token with
    // " [end of text]"; qlens generate stops there (fewer tokens than asked)
    // without printing it.
    if (r.tokens.size() < static_cast<size_t>(opt.n_predict)) r.text += " [end of text]";
    EXPECT_EQ(" Once upon a time" + r.text, expected) << variant;
  }
}

// llama-imatrix -c 128 --chunks 4 (-fa off, F32 cache): the same entries
// and counts, every value within 1e-3 relative (imatrix_bound).
TEST_P(ArchReferenceTest, ImatrixMatchesLlamaCpp) {
  QLENS_REQUIRE_SHARED(text, "data/tinystories/tinystories_val.txt");
  tools::Imatrix ref = tools::load_imatrix(file(".imatrix.gguf"));
  auto m = Model::load(model());
  tools::check_imatrix_matches_model(ref, *m);  // llama-imatrix's one-count 3-D entries get their matrices
  tools::ImatrixOptions opt;
  opt.n_ctx = 128;
  opt.max_chunks = 4;
  opt.n_threads = 2;
  opt.cpu = test::cpu_options();
  opt.compute_ppl = false;
  tools::Imatrix ours;
  tools::collect_imatrix(*m, reference_text(*m), opt, ours);
  ASSERT_EQ(ours.entries.size(), ref.entries.size());
  double worst = 0;
  for (const auto& [name, want] : ref.entries) {
    ASSERT_TRUE(ours.entries.count(name)) << name;
    const tools::ImatrixEntry& got = ours.entries.at(name);
    ASSERT_EQ(got.n_mat, want.n_mat) << name;
    ASSERT_EQ(got.sum2.size(), want.sum2.size()) << name;
    EXPECT_EQ(got.one_count, want.one_count) << name;
    EXPECT_EQ(got.counts, want.counts) << name;
    for (int64_t x = 0; x < want.n_mat; ++x) {
      for (int64_t k = 0; k < want.n_cols; ++k) {
        const double a = got.sum2[x * want.n_cols + k], b = want.sum2[x * want.n_cols + k];
        const double rel = std::fabs(a - b) / std::max(std::fabs(b), 1e-30);
        worst = std::max(worst, rel);
        EXPECT_LE(rel, GetParam().imatrix_bound) << name << " matrix " << x << " column " << k;
      }
    }
  }
  std::printf("%s: %zu imatrix entries, worst relative difference %.3g\n", GetParam().model, ref.entries.size(), worst);
}

// The quantized file: llama.cpp's perplexity of it ("Mean PPL(Q)") within
// quantized_bound.
TEST_P(ArchReferenceTest, QuantizedFilePerplexityMatchesLlamaCpp) {
  if (!GetParam().quantized) GTEST_SKIP() << "no quantized reference for " << GetParam().model;
  QLENS_REQUIRE_SHARED(text, "data/tinystories/tinystories_val.txt");
  const std::string variant = std::string(".") + GetParam().quantized;
  std::smatch match;
  const std::string log = read_text_file(file(variant + ".kld.log"));
  ASSERT_TRUE(std::regex_search(log, match, std::regex(R"(Mean PPL\(Q\)\s*: ([0-9.]+))")));
  const double want = std::stod(match[1]);
  auto m = Model::load(model(variant));
  tools::PerplexityOptions opt;
  opt.n_ctx = 128;
  opt.n_batch = 128;
  opt.max_chunks = 4;
  opt.cache_type = DType::F32;
  opt.cpu = test::cpu_options();
  const auto r = tools::perplexity(*m, reference_text(*m), opt);
  std::printf("%s: PPL %.4f, llama.cpp %.4f (%+.2e)\n", variant.c_str(), r.ppl, want, r.ppl / want - 1);
  EXPECT_NEAR(r.ppl, want, want * GetParam().quantized_bound);
}

// The main job on each, through the CLI (test::run_main_job): imatrix,
// sensitivity, a plan at 5 bits per weight, the planned file's perplexity
// within 20% of the model's (these random models' logits of standard
// deviation 1.5 move by up to 11% at 5 bits per weight: a broken plan moves
// them by far more); the imatrix has llama-imatrix's entries.
TEST_P(ArchReferenceTest, TheMainJobRuns) {
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  const test::MainJob job = test::run_main_job(model(), text_path);
  std::set<std::string> llama_entries;  // llama-imatrix's
  for (const auto& [name, entry] : tools::load_imatrix(file(".imatrix.gguf")).entries) llama_entries.insert(name);
  EXPECT_EQ(job.imatrix_tensors, llama_entries);
  std::printf("%s: PPL %.2f, planned at 5 bpw %.2f\n", GetParam().model, job.ppl, job.ppl_planned);
  EXPECT_LT(std::fabs(job.ppl_planned / job.ppl - 1), 0.2);
}

INSTANTIATE_TEST_SUITE_P(Arch, ArchReferenceTest, testing::ValuesIn(kReferences),
                         [](const testing::TestParamInfo<ArchReference>& info) {
                           std::string name = info.param.model;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

// The experts' gate and up matrices fused into one tensor per layer
// (ffn_gate_up_exps: each expert's gate rows then its up rows), as llama.cpp's
// converter writes Gemma 4's experts: the file `path` rewritten so.
// keep: also keep the gate and up tensors (a file refused for both forms).
std::string with_fused_experts(const std::string& path, bool keep = false) {
  auto f = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& kv : f->metadata()) w.set(kv.key, kv.value);
  std::vector<std::vector<uint8_t>> fused;
  fused.reserve(f->tensors().size());
  for (const gguf::TensorInfo& t : f->tensors()) {
    const std::string name = t.name;
    const size_t gate_at = name.find("ffn_gate_exps.weight");
    const bool split = gate_at != std::string::npos || name.find("ffn_up_exps.weight") != std::string::npos;
    if (!split || keep)
      w.add_tensor(name, t.type, std::span<const int64_t>(t.ne.data(), t.n_dims), f->tensor_data(t), t.nbytes);
    if (gate_at == std::string::npos) continue;
    const gguf::TensorInfo* up = f->find_tensor(name.substr(0, gate_at) + "ffn_up_exps.weight");
    const size_t expert = row_bytes(t.type, t.ne[0]) * t.ne[1];
    auto& bytes = fused.emplace_back(2 * expert * t.ne[2]);
    for (int64_t e = 0; e < t.ne[2]; ++e) {
      std::memcpy(bytes.data() + 2 * e * expert, f->tensor_data(t) + e * expert, expert);
      std::memcpy(bytes.data() + (2 * e + 1) * expert, f->tensor_data(*up) + e * expert, expert);
    }
    const std::array<int64_t, 3> ne = {t.ne[0], 2 * t.ne[1], t.ne[2]};
    w.add_tensor(name.substr(0, gate_at) + "ffn_gate_up_exps.weight", t.type, ne, bytes.data(), bytes.size());
  }
  const std::string out =
      test::temp_dir() + (keep ? "/both-" : "/fused-") + std::filesystem::path(path).filename().string();
  w.write(out);
  return out;
}

// A model whose experts' gate and up matrices are one tensor gives the same
// log-probabilities as with two (llama.cpp's perplexity of gemma4moe-tiny
// rewritten so: the same, mean KLD 0 against the .kld); a layer with both
// forms, or half of one, is refused by name.
TEST(ArchFusedExperts, GateUpInOneTensorGivesTheSameLogProbabilities) {
  for (const char* model : {"gemma4moe-tiny", "qwen35moe-tiny"}) {
    SCOPED_TRACE(model);
    const std::string path = test::arch_reference_model(model);
    const auto base = tools::LlamaLogitsFile::load(kData + model + ".kld");
    tools::KldOptions ko;
    ko.cpu = test::cpu_options();
    ko.cache_type = DType::F32;
    auto split = Model::load(path);
    auto fused = Model::load(with_fused_experts(path));
    ASSERT_NE(fused->get(Role::FfnGateUpExps, 1), nullptr);
    EXPECT_EQ(fused->get(Role::FfnGateExps, 1), nullptr);
    const auto a = tools::kld_against_file(*split, base, ko);
    const auto b = tools::kld_against_file(*fused, base, ko);
    EXPECT_NEAR(a.mean_kld, b.mean_kld, 1e-9);
    EXPECT_NEAR(a.ppl, b.ppl, a.ppl * 1e-7);
  }
  try {
    Model::load(with_fused_experts(test::arch_reference_model("gemma4moe-tiny"), /*keep=*/true));
    ADD_FAILURE() << "a layer with both forms of the experts loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_gate_up_exps"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qlens
