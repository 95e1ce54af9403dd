// Gemma 3 end to end: the real 270M model (Q4_K_M as published, installed in
// the model cache by scripts/fetch-gemma3.sh) and the synthetic gemma3 model
// of ../shared/reference/synth, against llama.cpp 0c1e570's outputs on them:
// every node of its eval-callback dump, greedy text, perplexity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "core/text_file.h"
#include "eval_dump.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/generate/generate.h"
#include "tools/imatrix/imatrix.h"
#include "tools/perplexity/perplexity.h"
#include "tools/quantize/quantize.h"

namespace qlens {
namespace {

using test::kGemma3;

std::vector<test::NodeMatch> compare_with_dump(const std::string& model_path, const std::string& dump_path,
                                               const std::string& prompt) {
  return test::compare_model_with_dump(model_path, dump_path, prompt, test::kLlamaCppAliases);
}

void expect_close(const std::vector<test::NodeMatch>& matches, double value_tol, double sum_tol,
                  const std::vector<std::string>& must) {
  const test::NodeMatch* worst = nullptr;
  std::set<std::string> names;
  const bool verbose = std::getenv("QLENS_DUMP_VERBOSE") != nullptr;
  for (const auto& m : matches) {
    if (verbose) std::printf("%-24s value %.3g (%g vs %g)  sum %.3g\n", m.name.c_str(), m.worst_value_rel, m.worst_ours, m.worst_ref, m.sum_rel);
    names.insert(m.name);
    EXPECT_LE(m.worst_value_rel, value_tol) << m.name << ": " << m.worst_ours << " vs " << m.worst_ref;
    EXPECT_LE(m.sum_rel, sum_tol) << m.name << " sum";
    if (!worst || m.worst_value_rel > worst->worst_value_rel) worst = &m;
  }
  for (const auto& n : must) EXPECT_TRUE(names.count(n)) << n << " was not compared";
  ASSERT_TRUE(worst);
  std::printf("compared %zu nodes; worst %s: %g relative (%g vs %g)\n", matches.size(), worst->name.c_str(),
              worst->worst_value_rel, worst->worst_ours, worst->worst_ref);
}

TEST(Gemma3Synth, HyperParametersAsLlamaCppReadsThem) {
  QLENS_REQUIRE_SHARED(path, "reference/synth/gemma3.gguf");
  auto m = Model::load(path);
  const HParams& hp = m->hparams();
  EXPECT_EQ(hp.n_layer, 4);
  EXPECT_EQ(hp.head_dim, 64);
  EXPECT_EQ(hp.n_embd_q(), 256);
  EXPECT_EQ(hp.n_swa, 32);
  EXPECT_EQ(hp.swa_layers, (std::vector<bool>{true, true, false, true}));
  EXPECT_FLOAT_EQ(hp.rope_freq_base_swa, 1e4f);  // the local layers' (0, 1, 3)
  EXPECT_FLOAT_EQ(hp.rope_freq_base, 1e6f);      // the global layer's (2)
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 0.125f);
  EXPECT_FLOAT_EQ(hp.rope_freq_scale_swa, 1.0f);
  EXPECT_EQ(hp.rope_mode, RopeMode::NeoX);
  EXPECT_TRUE(m->output_is_tied());
}

TEST(Gemma3Synth, EveryNodeMatchesLlamaCppDump) {
  QLENS_REQUIRE_SHARED(path, "reference/synth/gemma3.gguf");
  QLENS_REQUIRE_SHARED(dump, "reference/synth/gemma3.eval-callback.txt");
  auto matches = compare_with_dump(path, dump, "Once upon a time");
  expect_close(matches, 2e-3, 5e-3,
               {"embd", "inp_scaled", "attn_norm-0", "Qcur_normed-0", "Kcur_normed-0", "attn_post_norm-0", "sa_out-0",
                "ffn_geglu-0", "ffn_post_norm-0", "l_out-0", "l_out-3", "result_norm", "result_output"});
}

TEST(Gemma3Synth, PerplexityMatchesLlamaCpp) {
  QLENS_REQUIRE_SHARED(path, "reference/synth/gemma3.gguf");
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  auto m = Model::load(path);
  tools::PerplexityOptions opt;
  opt.n_ctx = 128;
  opt.n_batch = 128;
  opt.max_chunks = 8;
  const std::string text = read_text_file(text_path).substr(0, 200000);
  auto r = tools::perplexity(*m, m->vocab().tokenize(text, true), opt);
  // llama.cpp: "Final estimate: PPL = 979.7156 +/- 48.37464"; 128-token
  // chunks pass the 32-token window, so this checks the sliding layers.
  EXPECT_NEAR(r.ppl, 979.7156, 979.7156 * 1e-4);
}

TEST(Gemma3Synth, GreedyTextMatchesLlamaCpp) {
  QLENS_REQUIRE_SHARED(path, "reference/synth/gemma3.gguf");
  QLENS_REQUIRE_SHARED(greedy, "reference/synth/gemma3.greedy.txt");
  auto m = Model::load(path);
  tools::GenerateOptions opt;
  opt.n_predict = 24;
  opt.sampler.temperature = 0;
  auto r = tools::generate(*m, "Once upon a time", opt);
  // llama-completion echoes the prompt with SentencePiece's leading space,
  // and ends its output with a blank line.
  std::string expected = read_text_file(greedy);
  while (!expected.empty() && expected.back() == '\n') expected.pop_back();
  EXPECT_EQ(" Once upon a time" + r.text, expected);
}

// The real model's deep layers amplify rounding: llama.cpp's own dumps of
// this prompt with flash attention on and off differ by 15-20% at l_out-17
// (795.26 vs 685.69 in its first value), so only the nodes before the first
// attention can be held to its print precision; after it, every node is held
// to the size of that amplified noise and the logits to 1% of their scale.
// (With the F32 reference, F32 cache and flash attention off on both sides,
// qlens and llama.cpp agree within 3.4e-3 at every node.)
TEST(Gemma3, EveryNodeMatchesLlamaCppDump) {
  QLENS_REQUIRE_CACHED(path, kGemma3);
  QLENS_REQUIRE_SHARED(dump, "reference/gemma3-270m-eval-callback.txt");
  auto matches = compare_with_dump(path, dump, "The capital of France is");
  bool before_attention = true;
  for (const auto& m : matches) {
    if (m.name.rfind("kqv_out", 0) == 0) before_attention = false;
    if (before_attention) {
      EXPECT_LE(m.worst_value_rel, 2e-3) << m.name;
    }
    // llama.cpp's own flash-attention and plain paths differ by 15-20% at
    // l_out-17 on this prompt; the logits stay within a few percent.
    if (m.name == "result_output") {
      EXPECT_LE(m.worst_value_rel, 3e-2);
    }
  }
  expect_close(matches, 0.5, 0.5, {"embd", "inp_scaled", "Qcur_normed-0", "kqv_out-0", "attn_post_norm-0",
                                   "ffn_geglu-0", "l_out-17", "result_output"});
}

// llama.cpp's greedy continuation of "The capital of France is" (48 tokens,
// BOS added), and the margins by which llama.cpp's own top token led at each
// step (llama.cpp 0c1e570, AVX2, flash attention off; outside the repository).
const char* const kGreedyPrompt = "The capital of France is";
const char* const kGreedyText =
    " the capital of the country of France. It is the largest city in France. It is the capital of the "
    "country of France. It is the largest city in France. It is the capital of the country of France. It "
    "is the largest";

// Greedy text is chaotic on this model: a last-bit difference anywhere flips
// Q8_0 activation codes downstream, and llama.cpp's own logits move by up to
// 0.48 between its flash-attention and plain paths (0.07 between F16 and F32
// caches). Its margins at steps 11 and 18 are 0.16 and 0.0006 logits, and
// decoding token by token (other kernels than a whole batch's) leaves steps
// with three candidates within 0.1 logits ("country", "French", "United" at
// step 4 with the AVX2 kernels). So the whole text is checked step by step,
// each step on llama.cpp's own prefix: llama.cpp's token must be qlens's top
// one or within 0.15 logits of it (measured: 0.038); and the free-running
// text, decoded as generation decodes it, must agree with llama.cpp's until a
// step where llama.cpp's token is within 0.15 logits of qlens's choice (a
// near tie: either is right), and tools::generate must write that text.
TEST(Gemma3, GreedyTextMatchesLlamaCpp) {
  QLENS_REQUIRE_CACHED(path, kGemma3);
  auto m = Model::load(path);
  const std::vector<Token> prompt = m->vocab().tokenize(kGreedyPrompt, true);
  const std::vector<Token> text = m->vocab().tokenize(kGreedyText, false);
  ASSERT_EQ(text.size(), 48u);
  std::vector<Token> all = prompt;
  all.insert(all.end(), text.begin(), text.end());
  ContextOptions opt;
  opt.n_ctx = 128;
  Context ctx(*m, opt);
  ctx.decode(all, true);
  double worst = 0;
  int n_top = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto logits = ctx.logits(static_cast<int64_t>(prompt.size() + i - 1));
    const float top = *std::max_element(logits.begin(), logits.end());
    const double gap = top - logits[text[i]];
    EXPECT_LE(gap, 0.15) << "step " << i << ": llama.cpp's token " << m->vocab().token_to_piece(text[i]);
    worst = std::max(worst, gap);
    n_top += gap == 0;
  }
  std::printf("llama.cpp's greedy token is qlens's top token at %d of 48 steps; largest gap %.4f logits\n", n_top, worst);

  // Free-running: the prompt as one batch, then one token at a time, on
  // the weights packed for generation as tools::generate packs them (their
  // kernels round differently: on AVX2 the two paths part at a near tie).
  Context free_ctx(*m, opt);
  free_ctx.pack_for_generation();
  free_ctx.decode(prompt, false);
  std::string agreed;
  size_t steps = 0;
  for (; steps < text.size(); ++steps) {
    const auto logits = free_ctx.last_logits();
    const Token choice = static_cast<Token>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (choice != text[steps]) {
      const double gap = logits[choice] - logits[text[steps]];
      std::printf("free-running: qlens chooses '%s' at step %zu, llama.cpp '%s', %.4f logits behind\n",
                  m->vocab().token_to_piece(choice).c_str(), steps, m->vocab().token_to_piece(text[steps]).c_str(), gap);
      EXPECT_LE(gap, 0.15) << "step " << steps << ": not a near tie";
      break;
    }
    agreed += m->vocab().token_to_piece(choice);
    free_ctx.decode(std::vector<Token>{choice}, false);
  }
  tools::GenerateOptions gen;
  gen.n_predict = 48;
  gen.sampler.temperature = 0;
  const auto r = tools::generate(*m, kGreedyPrompt, gen);
  EXPECT_EQ(r.text.substr(0, agreed.size()), agreed) << r.text;
  std::printf("free-running: %zu of 48 steps as llama.cpp's: %s\n", steps, r.text.c_str());
}

TEST(Gemma3, PerplexityMatchesLlamaCpp) {
  if (!test::slow_tests_enabled()) GTEST_SKIP() << "QLENS_SLOW_TESTS=0";
  QLENS_REQUIRE_CACHED(path, kGemma3);
  QLENS_REQUIRE_SHARED(wiki, "data/wikitext-2-raw/wiki.test.raw");
  std::string text;
  {
    std::istringstream in(read_text_file(wiki));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      if (n >= 2201) text += line + "\n";
  }
  auto m = Model::load(path);
  tools::PerplexityOptions opt;
  opt.n_ctx = 512;
  opt.n_batch = 512;
  opt.max_chunks = 20;
  auto r = tools::perplexity(*m, m->vocab().tokenize(text, true), opt);
  // llama.cpp 0c1e570: PPL = 19.3636 +/- 0.82404 (AVX-512, flash attention).
  // Its own builds spread by 0.13% here: 19.3496 (AVX2, flash attention) and
  // 19.3381 (AVX2, without) on dev-2c. qlens, rounding as ggml's CPU does,
  // gives 19.3917 (+0.145%): the 0.1% does not hold (see
  // docs/PERFORMANCE.md); this holds the result to twice that.
  std::printf("PPL %.4f (llama.cpp 19.3636, %+.3f%%)\n", r.ppl, (r.ppl / 19.3636 - 1) * 100);
  EXPECT_NEAR(r.ppl, 19.3636, 19.3636 * 2e-3);
}

// llama.cpp's Q4_K_M rules on the F32 reference give every tensor the type
// of the published file (which llama.cpp made from the original weights):
// the tied embedding takes the output's Q6_K, falling back to Q8_0 (640 is
// no multiple of 256), attn_v and ffn_down Q6_K on the use-more-bits layers
// (attn_v falls back to Q8_0), Q4_K to Q5_0 on 640-wide rows.
TEST(Gemma3, Q4KMPlanOfTheF32ReferenceIsThePublishedFile) {
  QLENS_REQUIRE_CACHED(published_path, kGemma3);
  QLENS_REQUIRE_CACHED(reference_path, test::kGemma3F32);
  auto published = gguf::File::open(published_path);
  auto reference = gguf::File::open(reference_path);
  tools::QuantizeOptions opt;
  opt.mix = "Q4_K_M";
  const tools::QuantizePlan plan = tools::plan_quantization(*reference, opt);
  size_t published_bytes = 0;
  for (const auto& t : published->tensors()) published_bytes += t.nbytes;
  EXPECT_EQ(published_bytes, 246587904u);
  ASSERT_EQ(plan.tensors.size(), published->tensors().size());
  for (const auto& p : plan.tensors) {
    const gguf::TensorInfo* t = published->find_tensor(p.name);
    ASSERT_TRUE(t) << p.name;
    EXPECT_EQ(p.to, t->type) << p.name << ": " << type_name(p.to) << " (" << p.reason << "), published "
                             << type_name(t->type);
  }
  EXPECT_EQ(plan.total_bytes, published_bytes);
}

// llama.cpp's imatrix conventions on the real model: every matrix of every
// layer and nothing else (the tied embedding is the output matrix under the
// name token_embd.weight, which llama.cpp collects even with
// --process-output never), rows counted per token, and the projections that
// read one input (q, k, v; gate, up) holding the same sums.
TEST(Gemma3, ImatrixFollowsLlamaCppsConventions) {
  QLENS_REQUIRE_CACHED(path, kGemma3);
  QLENS_REQUIRE_SHARED(wiki, "data/wikitext-2-raw/wiki.test.raw");
  auto m = Model::load(path);
  const auto tokens = m->vocab().tokenize(read_text_file(wiki).substr(0, 20000), true);
  tools::ImatrixOptions opt;
  opt.n_ctx = 256;
  opt.max_chunks = 2;
  opt.compute_ppl = false;
  tools::Imatrix im;
  tools::collect_imatrix(*m, tokens, opt, im);
  EXPECT_EQ(im.entries.size(), 18u * 7u);
  EXPECT_FALSE(im.entries.count("token_embd.weight"));
  for (int il = 0; il < 18; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    for (const char* name : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
      const auto& e = im.entries.at(b + name + ".weight");
      EXPECT_EQ(e.counts.at(0), 2 * 256) << b << name;
      const int64_t cols = std::string(name) == "attn_output" ? 1024 : std::string(name) == "ffn_down" ? 2048 : 640;
      ASSERT_EQ(e.n_cols, cols) << b << name;
      for (double v : e.sum2) ASSERT_TRUE(std::isfinite(v) && v >= 0) << b << name;
    }
    EXPECT_EQ(im.entries.at(b + "attn_q.weight").sum2, im.entries.at(b + "attn_k.weight").sum2);
    EXPECT_EQ(im.entries.at(b + "attn_q.weight").sum2, im.entries.at(b + "attn_v.weight").sum2);
    EXPECT_EQ(im.entries.at(b + "ffn_gate.weight").sum2, im.entries.at(b + "ffn_up.weight").sum2);
  }
  opt.process_output = true;
  tools::Imatrix with_output;
  tools::collect_imatrix(*m, tokens, opt, with_output);
  EXPECT_EQ(with_output.entries.size(), im.entries.size());
}

}  // namespace
}  // namespace qlens
