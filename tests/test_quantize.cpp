// qlens quantize: imatrix files in both formats, the per-tensor plan (mixes,
// roles, rules, fallbacks), and the written model.
#include <gtest/gtest.h>


#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "backend/cpu/packed.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/common/tensor_names.h"
#include "tools/quantize/quantize.h"
#include "tools/quantize/mix_rules.h"
#include "tools/perplexity/perplexity.h"
#include "tools/quantize/quantize_stats.h"
#include "tools/synth/synth.h"

namespace qlens {
namespace {

bool can_quantize_to(DType t) { return type_traits(t).quantize != nullptr; }

// ---- imatrix files ----

// A legacy .dat written byte by byte from the format description.
std::string hand_built_dat() {
  std::string b;
  auto i32 = [&](int32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto f32 = [&](float v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  i32(2);  // entries
  const std::string a = "blk.0.attn_q.weight";
  i32(static_cast<int32_t>(a.size()));
  b += a;
  i32(10);  // ncall
  i32(3);   // nval
  f32(10.0f), f32(20.0f), f32(0.0f);  // mean(x^2) * ncall
  const std::string c = "output.weight";
  i32(static_cast<int32_t>(c.size()));
  b += c;
  i32(4);
  i32(2);
  f32(2.0f), f32(8.0f);
  i32(123);  // last chunk
  const std::string ds = "calibration.txt";
  i32(static_cast<int32_t>(ds.size()));
  b += ds;
  return b;
}

TEST(Imatrix, ReadsLegacyDatByTheFormat) {
  const std::string path = test::temp_dir() + "/m.dat";
  write_file_atomic(path, hand_built_dat());
  auto m = tools::load_imatrix(path);
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.chunk_count, 123);
  ASSERT_EQ(m.datasets.size(), 1u);
  EXPECT_EQ(m.datasets[0], "calibration.txt");
  auto w = m.importance("blk.0.attn_q.weight", 3);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_FLOAT_EQ(w[0], 1.0f);  // 10 / ncall 10
  EXPECT_FLOAT_EQ(w[1], 2.0f);
  EXPECT_FLOAT_EQ(w[2], 0.0f);
  auto o = m.importance("output.weight", 2);
  EXPECT_FLOAT_EQ(o[0], 0.5f);
  EXPECT_FLOAT_EQ(o[1], 2.0f);
  EXPECT_TRUE(m.importance("blk.9.ffn_up.weight", 3).empty());
  EXPECT_THROW(m.importance("output.weight", 5), Error);  // wrong row length is named
}

TEST(Imatrix, BrokenDatFilesAreErrors) {
  const std::string good = hand_built_dat();
  const std::string dir = test::temp_dir();
  for (size_t cut : {size_t{0}, size_t{2}, size_t{6}, size_t{20}, size_t{30}, size_t{40}}) {
    const std::string path = dir + "/cut" + std::to_string(cut) + ".dat";
    write_file_atomic(path, good.substr(0, cut));
    EXPECT_THROW(tools::load_imatrix(path), Error) << "cut at " << cut;
  }
  std::string huge = good;
  const int32_t nval = 1 << 30;
  std::memcpy(&huge[4 + 4 + 19 + 4], &nval, 4);
  const std::string path = dir + "/huge.dat";
  write_file_atomic(path, huge);
  try {
    tools::load_imatrix(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
  }
}

TEST(Imatrix, GgufAndDatRoundTrip) {
  tools::Imatrix m;
  m.datasets = {"wiki.train.raw"};
  m.chunk_count = 7;
  m.chunk_size = 512;
  auto& e = m.entries["blk.0.ffn_down.weight"];
  e.n_cols = 4;
  e.n_mat = 1;
  e.sum2 = {4, 8, 12, 16};
  e.counts = {4};
  const std::string dir = test::temp_dir();
  tools::save_imatrix_gguf(m, dir + "/m.gguf");
  tools::save_imatrix_dat(m, dir + "/m.dat");
  for (const char* name : {"/m.gguf", "/m.dat"}) {
    auto back = tools::load_imatrix(dir + name);
    EXPECT_EQ(back.chunk_count, 7) << name;
    EXPECT_EQ(back.datasets, m.datasets) << name;
    auto w = back.importance("blk.0.ffn_down.weight", 4);
    ASSERT_EQ(w.size(), 4u);
    for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(w[j], static_cast<float>(j + 1)) << name;
  }
  auto f = gguf::File::open(dir + "/m.gguf");
  EXPECT_EQ(f->get_string("general.type"), "imatrix");
  // A dense weight's entry has llama-imatrix's dims: in_sum2 [4], counts [1].
  const gguf::TensorInfo* sum2 = f->find_tensor("blk.0.ffn_down.weight.in_sum2");
  const gguf::TensorInfo* counts = f->find_tensor("blk.0.ffn_down.weight.counts");
  ASSERT_TRUE(sum2 && counts);
  EXPECT_EQ(sum2->n_dims, 1);
  EXPECT_EQ(sum2->ne[0], 4);
  EXPECT_EQ(counts->n_dims, 1);
  EXPECT_EQ(counts->ne[0], 1);
}

// ---- plans ----

std::string synth_f32(const std::string& preset = "tiny") {
  const std::string path = test::temp_dir() + "/" + preset + "-f32.gguf";
  tools::SynthOptions o;
  o.preset = preset;
  o.type = DType::F32;
  tools::synth_model(o, path);
  return path;
}

const tools::TensorPlan& find(const tools::QuantizePlan& p, const std::string& name) {
  for (const auto& t : p.tensors)
    if (t.name == name) return t;
  throw Error("no tensor " + name);
}

TEST(QuantizePlan, RulesFlagsAndOneDimensionalTensors) {
  auto in = gguf::File::open(synth_f32());
  tools::QuantizeOptions opt;
  opt.mix = "F16";
  auto plan = tools::plan_quantization(*in, opt);
  for (const auto& t : plan.tensors) {
    const bool one_d = t.ne[1] == 1;
    EXPECT_EQ(t.to, one_d ? DType::F32 : DType::F16) << t.name;
  }
  opt.tensor_types = {{"ffn_.*", "BF16"}, {"blk\\.1\\.ffn_up", "F32"}};
  opt.token_embedding_type = DType::F32;
  plan = tools::plan_quantization(*in, opt);
  EXPECT_EQ(find(plan, "blk.0.ffn_up.weight").to, DType::BF16);
  EXPECT_EQ(find(plan, "blk.1.ffn_up.weight").to, DType::BF16);  // the first match wins, as in llama.cpp
  opt.tensor_types = {{"blk\\.1\\.ffn_up", "F32"}, {"ffn_.*", "BF16"}};
  EXPECT_EQ(find(tools::plan_quantization(*in, opt), "blk.1.ffn_up.weight").to, DType::F32);
  EXPECT_EQ(find(plan, "blk.1.attn_q.weight").to, DType::F16);
  EXPECT_EQ(find(plan, "token_embd.weight").to, DType::F32);
  EXPECT_EQ(find(plan, "blk.0.attn_norm.weight").to, DType::F32);
  // The totals are the sum of the tensors.
  size_t bytes = 0;
  for (const auto& t : plan.tensors) bytes += t.bytes;
  EXPECT_EQ(bytes, plan.total_bytes);
}

// Every mix gives every tensor llama-quantize's type (tests/data/mix-types.txt:
// its --dry-run on the synth families, the MoE synth models, Gemma 3 270M,
// the 1.1B preset, gpt-oss-tiny, deepseek2-tiny, glm4moe-tiny, qwen35-tiny,
// qwen35moe-tiny, gemma4-tiny and gemma4moe-tiny, with and without an imatrix;
// tests/data/README.md), and
// what it refuses (a Q1_0 mix where rows fit no block of 128, a very-low-bit
// type without an imatrix) qlens refuses too, before any work.
std::vector<std::string> expand_types(const std::string& rle) {
  std::vector<std::string> out;
  std::istringstream in(rle);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t star = item.find('*');
    const int count = star == std::string::npos ? 1 : std::stoi(item.substr(star + 1));
    for (int k = 0; k < count; ++k) out.push_back(item.substr(0, star));
  }
  return out;
}

std::string mix_model_path(const std::string& label, const std::string& dir) {
  if (label == "gemma-3-270m") return test::cache_path(test::kGemma3F32);
  // The architectures' tiny references (gpt-oss-tiny, ..., gemma4moe-tiny).
  if (test::is_arch_reference(label)) return test::arch_reference_model(label);
  if (label == "1.1b") {
    if (!test::slow_tests_enabled()) return "";
    const std::string path = dir + "/1.1b.gguf";
    if (!std::filesystem::exists(path)) {
      tools::SynthOptions o;
      o.preset = "1.1b";
      o.type = DType::F16;
      tools::synth_model(o, path);
    }
    return path;
  }
  return test::shared_path("reference/synth/" + label + ".gguf");
}

TEST(QuantizePlan, MixesGiveLlamaQuantizesTypes) {
  const std::string dir = test::temp_dir();
  std::istringstream lines(read_text_file(QLENS_SOURCE_DIR "/tests/data/mix-types.txt"));
  std::string line;
  std::set<std::string> checked, skipped;
  int plans = 0, refusals = 0;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string label, mix, with_imatrix, types;
    std::getline(f, label, '\t');
    std::getline(f, mix, '\t');
    std::getline(f, with_imatrix, '\t');
    std::getline(f, types, '\t');
    const std::string path = mix_model_path(label, dir);
    if (path.empty()) {
      skipped.insert(label);
      continue;
    }
    SCOPED_TRACE(label + " " + mix + (with_imatrix == "1" ? " with an imatrix" : " without"));
    auto in = gguf::File::open(path);
    tools::QuantizeOptions opt;
    opt.mix = mix;
    if (with_imatrix == "1") opt.imatrix_path = "an imatrix";  // (the plan only asks whether there is one)
    const std::vector<std::string> want = types == "refused" ? std::vector<std::string>{} : expand_types(types);
    std::optional<tools::QuantizePlan> plan;
    std::string error;
    try {
      plan = tools::plan_quantization(*in, opt);
    } catch (const Error& e) {
      error = e.what();
    }
    if (types == "refused") {
      EXPECT_FALSE(plan.has_value()) << "llama-quantize refuses it";
      ++refusals;
      continue;
    }
    // Without an imatrix llama-quantize's dry run lists what its real run refuses.
    bool needs_imatrix = false;
    for (size_t i = 0; i < want.size() && i < in->tensors().size(); ++i) {
      const auto t = type_from_name(want[i]);
      needs_imatrix |= t && *t != in->tensors()[i].type &&
                       tools::requires_imatrix(tools::tensor_role(in->tensors()[i].name), *t, *tools::find_mix(mix));
    }
    if (with_imatrix == "0" && needs_imatrix) {
      EXPECT_TRUE(test::contains(error, "needs an importance matrix")) << error;
      ++refusals;
      continue;
    }
    ASSERT_TRUE(plan.has_value()) << error;
    ASSERT_EQ(plan->tensors.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(type_from_name(want[i]), plan->tensors[i].to) << plan->tensors[i].name << ": " << plan->tensors[i].reason;
    ++plans;
    checked.insert(label);
  }
  std::printf("%d plans equal llama-quantize's, %d refusals as llama-quantize's, on %zu models", plans, refusals,
              checked.size());
  for (const auto& s : skipped) std::printf(" (%s skipped: absent or QLENS_SLOW_TESTS=0)", s.c_str());
  std::printf("\n");
  if (checked.empty()) GTEST_SKIP() << "needs ../shared's synth models";
}

// A very-low-bit type needs each tensor's importance: without an imatrix the
// plan is refused, and with one that lacks a tensor the quantization stops
// before it writes anything, naming the tensor.
TEST(QuantizeModel, VeryLowBitTypesNeedTheirImportance) {
  const std::string dir = test::temp_dir();
  const std::string model = synth_f32("gemma3-tiny");  // ffn_down rows of 256
  tools::QuantizeOptions opt;
  opt.mix = "IQ2_XXS";
  EXPECT_TRUE(test::contains(test::error_of([&] { tools::plan_quantization(*gguf::File::open(model), opt); }),
                             "needs an importance matrix"));
  // A dry run shows the plan, marked.
  std::string out;
  ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " quantize " + model + " IQ2_XXS --dry-run", &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "blk.0.ffn_down.weight")) << out;
  EXPECT_TRUE(test::contains(out, "(needs --imatrix)")) << out;
  EXPECT_TRUE(test::contains(out, "note: a real run needs --imatrix")) << out;
  tools::Imatrix m;
  auto& e = m.entries["blk.0.attn_q.weight"];
  e.n_cols = 128;
  e.sum2.assign(128, 1.0);
  e.counts = {1};
  tools::save_imatrix_gguf(m, dir + "/im.gguf");
  opt.imatrix_path = dir + "/im.gguf";
  std::ostringstream log;
  const std::string err = test::error_of([&] { tools::quantize_model(model, dir + "/out.gguf", opt, log); });
  EXPECT_TRUE(test::contains(err, "has no entry for tensor 'blk.0.attn_output.weight', which IQ2_XXS needs")) << err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.gguf"));
}

TEST(QuantizePlan, BadInputsAreNamed) {
  auto in = gguf::File::open(synth_f32());
  tools::QuantizeOptions opt;
  opt.mix = "Q9_X";
  EXPECT_THROW(tools::plan_quantization(*in, opt), Error);
  opt.mix = "F16";
  opt.tensor_types = {{"([", "F16"}};
  try {
    tools::plan_quantization(*in, opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(["), std::string::npos);
  }
  opt.tensor_types = {{"ffn", "Q8_K"}};  // an activation type, not a weight type
  EXPECT_THROW(tools::plan_quantization(*in, opt), Error);
  EXPECT_THROW(tools::parse_tensor_type_rules("ffn_up=F16\nnonsense\n", "rules.txt"), Error);
  auto rules = tools::parse_tensor_type_rules("# comment\n\nffn_up=F16\r\nblk\\.0\\..*=BF16\n", "rules.txt");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[1].first, "blk\\.0\\..*");
  EXPECT_EQ(rules[1].second, "BF16");
}

TEST(QuantizePlan, RowsThatDoNotFitFallBackToTheClosestType) {
  if (!can_quantize_to(DType::Q4_K)) GTEST_SKIP() << "Q4_K quantization is not available in this build";
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto in = gguf::File::open(path);
  for (const char* mix : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K_M", "Q2_K"}) {
    tools::QuantizeOptions opt;
    opt.mix = mix;
    auto plan = tools::plan_quantization(*in, opt);
    for (const auto& t : plan.tensors) {
      EXPECT_EQ(t.ne[0] % type_traits(t.to).block_size, 0) << mix << " " << t.name;
      const DType base = tools::find_mix(mix)->base;
      auto bpw = [](DType d) { return 8.0 * type_traits(d).block_bytes / type_traits(d).block_size; };
      if (t.reason.rfind("fallback", 0) == 0) {
        EXPECT_GE(bpw(t.to), bpw(base)) << mix << " " << t.name;
      }
    }
    // ffn_down rows are 172 long: no block type fits them.
    EXPECT_EQ(find(plan, "blk.0.ffn_down.weight").to, DType::F16) << mix;
  }
}

TEST(QuantizeModel, DryRunTotalMatchesTheWrittenFile) {
  const std::string in = synth_f32();
  for (const char* mix : {"F16", "BF16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K", "IQ4_NL"}) {
    if (!can_quantize_to(tools::find_mix(mix)->base)) continue;
    tools::QuantizeOptions opt;
    opt.mix = mix;
    auto in_file = gguf::File::open(in);
    auto plan = tools::plan_quantization(*in_file, opt);
    const std::string out = test::temp_dir() + "/q.gguf";
    std::ostringstream log;
    auto written = tools::quantize_model(in, out, opt, log);
    EXPECT_EQ(written.total_bytes, plan.total_bytes) << mix;
    auto f = gguf::File::open(out);
    size_t bytes = 0;
    for (const auto& t : f->tensors()) bytes += t.nbytes;
    EXPECT_EQ(bytes, plan.total_bytes) << mix;
    EXPECT_EQ(f->get_int("general.file_type"), tools::find_mix(mix)->file_type) << mix;
    EXPECT_TRUE(f->try_string("quantize.qlens_version").has_value());
    // Every tensor has the planned type, and the model loads and runs.
    for (size_t i = 0; i < plan.tensors.size(); ++i) EXPECT_EQ(f->tensors()[i].type, plan.tensors[i].to) << mix;
    auto m = Model::load(out);
    ContextOptions copt;
    copt.n_ctx = 16;
    Context ctx(*m, copt);
    std::vector<Token> tokens = {1, 300, 301};
    ctx.decode(tokens, false);
    for (float v : ctx.last_logits()) ASSERT_TRUE(std::isfinite(v)) << mix;
  }
}

// Generation's packed weights (backend/cpu/packed.h): Context::pack_for_generation
// packs every packable matrix once (Q4_0 and the Q6_K output of a Q4_0 model;
// Q5_0; Q4_K and Q6_K of a Q4_K_M one, whose rows need multiples of 256; IQ4_XS),
// and token-by-token logits stay those of the unpacked kernels within float
// reordering.
TEST(QuantizeModel, PackedWeightsForGenerationGiveTheSameLogits) {
  if (!cpu::packable(DType::Q4_0)) GTEST_SKIP() << "QLENS_CPU_PACK=0: no packed weights";
  struct Case {
    const char* mix;
    const char* preset;
    std::vector<DType> packed_types;  // each must be among the packed matrices
  };
  std::vector<Case> cases = {Case{"Q4_0", "tiny", {DType::Q4_0}}, Case{"Q5_0", "tiny", {DType::Q5_0}},
                             Case{"Q4_K_M", "160m", {DType::Q4_K, DType::Q6_K}}};
  // Another 160M quantization is most of this test's time under a sanitizer.
  if (test::slow_tests_enabled()) cases.push_back(Case{"IQ4_XS", "160m", {DType::IQ4_XS}});
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.mix) + " " + c.preset);
    tools::QuantizeOptions opt;
    opt.mix = c.mix;
    opt.n_threads = 2;
    const std::string out = test::temp_dir() + "/packed-" + c.mix + ".gguf";
    std::ostringstream log;
    tools::quantize_model(synth_f32(c.preset), out, opt, log);
    auto m = Model::load(out);
    ContextOptions copt;
    copt.n_ctx = 16;
    copt.n_threads = 2;
    const std::vector<Token> tokens = {1, 300, 301, 302, 17, 5};
    // The CPU backend packs each matrix once, all it can, and keeps the
    // copies: the bytes it reports are those of every packable matrix.
    size_t packable_bytes = 0;
    auto token_by_token = [&](bool pack) {
      Context ctx(*m, copt);
      if (pack) {
        EXPECT_EQ(ctx.pack_for_generation(), packable_bytes);
        EXPECT_EQ(ctx.pack_for_generation(), 0u);  // once
      }
      std::vector<std::vector<float>> logits;
      for (Token t : tokens) {
        const Token one[1] = {t};
        ctx.decode(one, false);
        logits.emplace_back(ctx.last_logits().begin(), ctx.last_logits().end());
      }
      return logits;
    };
    const auto plain = token_by_token(false);
    // The matrices the packed kernels multiply (token_embd only when tied).
    auto multiplied = [&](const Tensor* w) {
      for (Role r : m->roles_of(w))
        if (role_info(r).reader == Op::MulMat) return cpu::packable(w->type);
      return false;
    };
    std::map<DType, size_t> of_type;
    for (const auto& [name, w] : m->weights()) {
      of_type[w->type] += multiplied(w);
      if (multiplied(w)) packable_bytes += cpu::pack_weight(*w)->nbytes();
    }
    for (DType t : c.packed_types) EXPECT_GT(of_type[t], 0u) << type_name(t);
    EXPECT_GT(packable_bytes, 0u);
    const auto with_packs = token_by_token(true);
    for (size_t i = 0; i < plain.size(); ++i) {
      float scale = 0;
      for (float v : plain[i]) scale = std::max(scale, std::fabs(v));
      double largest = 0, mean = 0;
      for (size_t j = 0; j < plain[i].size(); ++j) {
        const double diff = std::fabs(with_packs[i][j] - plain[i][j]);
        largest = std::max(largest, diff);
        mean += diff / plain[i].size();
      }
      // Float reordering changes results by about 1e-7. The next layer
      // quantizes its activations again (Q8_0 / Q8_K), and in a model of
      // this size a value now and then lands on the other side of a
      // rounding boundary: one step of one activation, which the layers
      // after it carry on (the 160m model's later tokens differ by 1-2% of
      // the largest logit, 0.2-0.5% on average). The first token, whose
      // attention is one value, has shown none; the tiny model none at all.
      const bool exact = c.preset == std::string("tiny") || i == 0;
      EXPECT_LE(largest, (exact ? 1e-4 : 5e-2) * scale) << "token " << i;
      EXPECT_LE(mean, (exact ? 1e-5 : 1e-2) * scale) << "token " << i;
    }
  }
}

// llama-quantize's habits: the llama_ftype id for the type, the thread count
// as a fourth argument, --leave-output-tensor, and a plan that covers every
// matrix needing no TYPE (general.file_type then names the commonest type).
TEST(QuantizeModel, LlamaCppHabits) {
  EXPECT_EQ(tools::find_mix("15")->name, "Q4_K_M");
  EXPECT_EQ(tools::find_mix("7")->name, "Q8_0");
  EXPECT_FALSE(tools::find_mix("99").has_value());
  const std::string in = synth_f32("160m");
  auto in_file = gguf::File::open(in);
  tools::QuantizeOptions opt;
  opt.mix = "Q4_0";
  opt.leave_output_tensor = true;
  opt.output_type = DType::Q8_0;  // --leave-output-tensor comes first, as in llama.cpp
  EXPECT_EQ(find(tools::plan_quantization(*in_file, opt), "output.weight").to, DType::F32);

  // A plan for every matrix: most of the weights Q4_0, the attention Q8_0.
  tools::QuantizeOptions rules_only;
  rules_only.mix = "";
  rules_only.tensor_types = {{"attn_", "Q8_0"}, {".*", "Q4_0"}};
  const auto plan = tools::plan_quantization(*in_file, rules_only);
  EXPECT_EQ(find(plan, "blk.0.attn_q.weight").to, DType::Q8_0);
  EXPECT_EQ(find(plan, "blk.0.ffn_up.weight").to, DType::Q4_0);
  const std::string dir = test::temp_dir();
  std::ostringstream log;
  tools::quantize_model(in, dir + "/plan.gguf", rules_only, log);
  EXPECT_EQ(gguf::File::open(dir + "/plan.gguf")->get_int("general.file_type"), 2);  // MOSTLY_Q4_0
  rules_only.tensor_types = {{"attn_", "Q8_0"}};
  EXPECT_THROW(tools::plan_quantization(*in_file, rules_only), Error);  // ffn tensors have no type

  std::string out;
  ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " quantize " + in + " " + dir + "/q.gguf 7 2", &out), 0)
      << out;
  EXPECT_EQ(gguf::File::open(dir + "/q.gguf")->get_int("general.file_type"), 7);
  EXPECT_NE(test::run_command(std::string(QLENS_BINARY) + " quantize " + in + " " + dir + "/q.gguf Q8_0 two", &out), 0);
  EXPECT_NE(out.find("NTHREADS must be a thread count"), std::string::npos) << out;
}

// llama.cpp reads files aligned below GGUF's 8, qlens's writer refuses to
// write them: quantize gives such an input the default alignment, and the
// same tensors as the input laid out at 8.
TEST(QuantizeModel, InputAlignedBelowEightGetsTheDefaultAlignment) {
  if (!can_quantize_to(DType::Q8_0)) GTEST_SKIP() << "Q8_0 not available";
  const std::string dir = test::temp_dir();
  auto base = gguf::File::open(synth_f32());
  // The input at alignment 8, then 4 patched into its general.alignment: a
  // pad string makes the header end where 4 and 8 give the same data offset.
  std::string at4;
  for (int pad = 0; pad < 8 && at4.empty(); ++pad) {
    gguf::Writer w;
    for (const auto& kv : base->metadata()) w.set(kv.key, kv.value);
    w.set("general.alignment", gguf::Value::make_u32(8));
    w.set("test.pad", gguf::Value::make_string(std::string(pad, 'p')));
    for (const auto& t : base->tensors())
      w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne.data(), t.n_dims), base->tensor_data(t), t.nbytes);
    w.write(dir + "/a8.gguf");
    std::string bytes = read_text_file(dir + "/a8.gguf");
    const std::string key = "general.alignment";
    const size_t k = bytes.find(key);
    ASSERT_NE(k, std::string::npos);
    const size_t value_at = k + key.size() + 4;  // after the key, the u32 type id
    ASSERT_EQ(bytes[value_at], 8);
    bytes[value_at] = 4;
    {
      std::ofstream(dir + "/a4.gguf", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    if (gguf::File::open(dir + "/a4.gguf")->data_offset() == gguf::File::open(dir + "/a8.gguf")->data_offset())
      at4 = dir + "/a4.gguf";
  }
  ASSERT_FALSE(at4.empty());
  ASSERT_EQ(gguf::File::open(at4)->alignment(), 4u);
  tools::QuantizeOptions opt;
  opt.mix = "Q8_0";
  std::ostringstream log;
  tools::quantize_model(at4, dir + "/from4.gguf", opt, log);
  tools::quantize_model(dir + "/a8.gguf", dir + "/from8.gguf", opt, log);
  auto from4 = gguf::File::open(dir + "/from4.gguf");
  auto from8 = gguf::File::open(dir + "/from8.gguf");
  EXPECT_EQ(from4->alignment(), 32u);
  EXPECT_FALSE(from4->find("general.alignment"));
  EXPECT_EQ(from8->alignment(), 8u);
  ASSERT_EQ(from4->tensors().size(), from8->tensors().size());
  for (size_t i = 0; i < from4->tensors().size(); ++i) {
    const auto& a = from4->tensors()[i];
    const auto& b = from8->tensors()[i];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.nbytes, b.nbytes) << a.name;
    EXPECT_EQ(std::memcmp(from4->tensor_data(a), from8->tensor_data(b), a.nbytes), 0) << a.name;
  }
}

TEST(QuantizeModel, RequantizingNeedsPermission) {
  if (!can_quantize_to(DType::Q8_0) || !can_quantize_to(DType::Q4_0)) GTEST_SKIP() << "Q8_0/Q4_0 not available";
  const std::string dir = test::temp_dir();
  std::ostringstream log;
  tools::QuantizeOptions opt;
  opt.mix = "Q8_0";
  tools::quantize_model(synth_f32(), dir + "/q8.gguf", opt, log);
  opt.mix = "Q4_0";
  EXPECT_THROW(tools::quantize_model(dir + "/q8.gguf", dir + "/q4.gguf", opt, log), Error);
  EXPECT_FALSE(std::filesystem::exists(dir + "/q4.gguf"));
  opt.allow_requantize = true;
  EXPECT_NO_THROW(tools::quantize_model(dir + "/q8.gguf", dir + "/q4.gguf", opt, log));
}

TEST(QuantizeModel, RecordsTheImatrix) {
  const std::string dir = test::temp_dir();
  tools::Imatrix m;
  m.datasets = {"tiny.txt"};
  m.chunk_count = 3;
  auto& e = m.entries["blk.0.attn_q.weight"];
  e.n_cols = 64;
  e.sum2.assign(64, 1.0);
  e.counts = {1};
  tools::save_imatrix_gguf(m, dir + "/im.gguf");
  tools::QuantizeOptions opt;
  opt.mix = "F16";
  opt.imatrix_path = dir + "/im.gguf";
  std::ostringstream log;
  tools::quantize_model(synth_f32(), dir + "/out.gguf", opt, log);
  auto f = gguf::File::open(dir + "/out.gguf");
  EXPECT_EQ(f->get_string("quantize.imatrix.file"), dir + "/im.gguf");
  EXPECT_EQ(f->get_string("quantize.imatrix.dataset"), "tiny.txt");
  EXPECT_EQ(f->get_int("quantize.imatrix.chunks_count"), 3);
}

// An imatrix that covers part of the model, names weights it lacks, and was
// collected on another model: quantize sums it up and warns before any work.
TEST(QuantizeModel, ImatrixCoverageIsSummedUpAndWarned) {
  if (!can_quantize_to(DType::Q8_0)) GTEST_SKIP() << "Q8_0 quantization is not available";
  const std::string dir = test::temp_dir();
  const std::string model = synth_f32();
  const auto in = gguf::File::open(model);
  const int64_t n_embd = in->find_tensor("blk.0.attn_q.weight")->ne[0];
  tools::Imatrix m;
  m.datasets = {"tiny.txt"};
  m.chunk_count = 3;
  m.model_name = "another-model";
  for (const char* name : {"blk.0.attn_q.weight", "blk.99.attn_q.weight"}) {
    auto& e = m.entries[name];
    e.n_cols = n_embd;
    e.sum2.assign(n_embd, 1.0);
    e.counts = {1};
  }
  auto& empty = m.entries["blk.0.attn_k.weight"];
  empty.n_cols = n_embd;
  empty.sum2.assign(n_embd, 0.0);
  empty.counts = {0};
  tools::save_imatrix_gguf(m, dir + "/im.gguf");
  EXPECT_EQ(tools::load_imatrix(dir + "/im.gguf").model_name, "another-model");

  tools::QuantizeOptions opt;
  opt.mix = "Q8_0";
  opt.imatrix_path = dir + "/im.gguf";
  std::ostringstream log;
  const auto plan = tools::quantize_model(model, dir + "/out.gguf", opt, log);
  int64_t quantized = 0;
  for (const auto& t : plan.tensors)
    if (t.to == DType::Q8_0 && t.name != "token_embd.weight") ++quantized;
  const std::string text = log.str();
  const std::string first_line = text.substr(0, text.find('\n'));
  EXPECT_EQ(first_line, "imatrix " + dir + "/im.gguf: 1 of " + std::to_string(quantized) +
                            " weights covered, 3 chunks of tiny.txt, collected on 'another-model'")
      << text;
  EXPECT_TRUE(test::contains(text, "warning: " + dir + "/im.gguf was collected on 'another-model', not on 'qlens-synth-"))
      << text;
  EXPECT_TRUE(test::contains(text, "1 entries that name no weight of this model (blk.99.attn_q.weight)")) << text;
  EXPECT_TRUE(test::contains(text, std::to_string(quantized - 2) + " of " + std::to_string(quantized) +
                                       " weights have no entry"))
      << text;
  EXPECT_TRUE(test::contains(text, "1 weights have entries without data in " + dir + "/im.gguf (blk.0.attn_k.weight)"))
      << text;
  EXPECT_TRUE(test::contains(text, "3 chunks only")) << text;
  // The JSON carries the same.
  ASSERT_TRUE(plan.imatrix_coverage.has_value());
  const std::string json = tools::quantize_plan_json(plan, model, dir + "/out.gguf", opt);
  EXPECT_TRUE(test::contains(json, "\"n_covered\": 1")) << json;
  EXPECT_TRUE(test::contains(json, "\"collected_on\": \"another-model\"")) << json;
  // A matrix of this model that covers it gives a summary and no warning.
  tools::Imatrix full;
  full.chunk_count = 100;
  full.model_name = in->get_string("general.name");
  for (const auto& t : plan.tensors)
    if (t.to == DType::Q8_0 && t.name != "token_embd.weight") {
      auto& e = full.entries[t.name];
      e.n_cols = t.ne[0];
      e.sum2.assign(t.ne[0], 1.0);
      e.counts = {1};
    }
  tools::save_imatrix_gguf(full, dir + "/full.gguf");
  opt.imatrix_path = dir + "/full.gguf";
  std::ostringstream log2;
  tools::quantize_model(model, dir + "/out2.gguf", opt, log2);
  EXPECT_FALSE(test::contains(log2.str(), "warning")) << log2.str();
  EXPECT_TRUE(test::contains(log2.str(), std::to_string(quantized) + " of " + std::to_string(quantized) +
                                             " weights covered, 100 chunks"))
      << log2.str();
}

TEST(QuantizeStats, MeasuresEveryTensorAndTotals) {
  const std::string dir = test::temp_dir();
  const std::string model = synth_f32();
  tools::Imatrix m;
  auto& e = m.entries["blk.0.attn_q.weight"];
  e.n_cols = 64;
  e.sum2.assign(64, 1.0);
  e.sum2[3] = 1000.0;
  e.counts = {1};
  tools::save_imatrix_gguf(m, dir + "/im.gguf");
  tools::QuantizeStatsOptions opt;
  opt.types = {DType::F16, DType::BF16};
  opt.imatrix_path = dir + "/im.gguf";
  auto r = tools::quantize_stats(model, opt);
  ASSERT_EQ(r.totals.size(), 2u);
  int with_weights = 0;
  for (const auto& s : r.tensors) {
    EXPECT_GT(s.rms, 0) << s.tensor;
    EXPECT_LE(s.rmse, s.rms * (s.type == DType::F16 ? 1e-3 : 1e-2)) << s.tensor;
    EXPECT_GE(s.max_error, s.rmse) << s.tensor;
    EXPECT_DOUBLE_EQ(s.bits_per_weight, 16.0);
    with_weights += s.weighted_rmse >= 0;
  }
  EXPECT_EQ(with_weights, 2);  // attn_q of layer 0, for both types
  EXPECT_LT(r.totals[0].rmse, r.totals[1].rmse);  // F16 keeps more bits than BF16
  std::ostringstream js;
  tools::write_quantize_stats_json(r, model, opt, js);
  EXPECT_NE(js.str().find("\"tool\": \"qlens quantize-stats\""), std::string::npos);
  EXPECT_NE(js.str().find("\"imatrix\": \"" + opt.imatrix_path + "\""), std::string::npos);
  EXPECT_NE(js.str().find("\"n_elements\""), std::string::npos);
  EXPECT_NE(js.str().find("\"totals\""), std::string::npos);
  EXPECT_NE(js.str().find("\"weighted_rmse\": null"), std::string::npos);
}

// --against: a file qlens quantized is measured tensor by tensor beside
// qlens's quantization to the same type: the same quantizer and importance
// give ratio 1; the same file measured with an importance it was not
// quantized with is beaten where the importance has weight.
TEST(QuantizeStats, AgainstAFileMeasuresItsTypesBesideQlenss) {
  const std::string dir = test::temp_dir();
  const std::string model = synth_f32();
  tools::Imatrix m;
  auto& e = m.entries["blk.0.attn_q.weight"];
  e.n_cols = 64;
  for (int j = 0; j < 64; ++j) e.sum2.push_back(j % 5 == 0 ? 100.0 : 1.0);
  e.counts = {1};
  tools::save_imatrix_gguf(m, dir + "/im.gguf");
  tools::QuantizeOptions qopt;
  qopt.mix = "Q4_0";
  qopt.pure = true;
  std::ostringstream log;
  tools::quantize_model(model, dir + "/q4_0.gguf", qopt, log);

  tools::QuantizeStatsOptions opt;
  opt.against_path = dir + "/q4_0.gguf";
  auto same = tools::quantize_stats(model, opt);
  ASSERT_FALSE(same.tensors.empty());
  for (const auto& s : same.tensors) {
    EXPECT_EQ(s.type, DType::Q4_0) << s.tensor;
    EXPECT_NEAR(s.error_ratio, 1.0, 1e-9) << s.tensor;  // (sums in another order)
    EXPECT_NEAR(s.against_rmse, s.rmse, 1e-9 * s.rmse) << s.tensor;
  }
  ASSERT_EQ(same.against.size(), 1u);
  EXPECT_EQ(same.against[0].tensors, static_cast<int>(same.tensors.size()));
  EXPECT_EQ(same.against[0].above_one_percent, 0);

  opt.imatrix_path = dir + "/im.gguf";
  auto weighted = tools::quantize_stats(model, opt);
  bool seen = false;
  for (const auto& s : weighted.tensors)
    if (s.tensor == "blk.0.attn_q.weight") {
      seen = true;
      EXPECT_GE(s.against_weighted_rmse, 0);
      EXPECT_LT(s.error_ratio, 1.0);
    }
  EXPECT_TRUE(seen);
  std::ostringstream text, js;
  tools::print_quantize_stats(weighted, text);
  EXPECT_TRUE(test::contains(text.str(), "ERROR RATIO")) << text.str();
  EXPECT_TRUE(test::contains(text.str(), "Q4_0    " + std::to_string(weighted.tensors.size()) + " tensors")) << text.str();
  tools::write_quantize_stats_json(weighted, model, opt, js);
  EXPECT_TRUE(test::contains(js.str(), "\"against\": \"" + opt.against_path + "\"")) << js.str();
  EXPECT_TRUE(test::contains(js.str(), "\"error_ratio\"")) << js.str();

  // A file with nothing to measure is refused before any work.
  opt.against_path = model;
  EXPECT_TRUE(test::contains(test::error_of([&] { tools::quantize_stats(model, opt); }), "has no quantized tensor"));
}

// stories260K in each legacy type: perplexity rises as bits fall, and Q8_0 is
// within 0.5% of F32.
TEST(QuantizeModel, StoriesPerplexityFollowsTheBits) {
  QLENS_REQUIRE_SHARED(model, "models/stories260K.gguf");
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  const std::vector<const char*> mixes = {"Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0"};
  for (const char* mix : mixes)
    if (!can_quantize_to(tools::find_mix(mix)->base)) GTEST_SKIP() << mix << " quantization is not available";
  auto base = Model::load(model);
  const auto tokens = base->vocab().tokenize(read_text_file(text_path), true);
  tools::PerplexityOptions popt;
  popt.n_ctx = 128;
  popt.n_batch = 128;
  popt.max_chunks = test::slow_tests_enabled() ? 400 : 60;
  const double f32 = tools::perplexity(*base, tokens, popt).ppl;
  const std::string dir = test::temp_dir();
  std::vector<double> ppl;
  for (const char* mix : mixes) {
    tools::QuantizeOptions opt;
    opt.mix = mix;
    std::ostringstream log;
    tools::quantize_model(model, dir + "/" + mix + ".gguf", opt, log);
    auto m = Model::load(dir + "/" + mix + ".gguf");
    ppl.push_back(tools::perplexity(*m, tokens, popt).ppl);
    std::printf("%-5s PPL %.4f (F32 %.4f, %+.2f%%)\n", mix, ppl.back(), f32, 100 * (ppl.back() / f32 - 1));
  }
  EXPECT_LT(std::fabs(ppl[0] / f32 - 1), 0.005) << "Q8_0 " << ppl[0] << " vs F32 " << f32;
  EXPECT_LT(ppl[0], ppl[4]);  // Q8_0 better than Q4_0
  EXPECT_LT(ppl[1], ppl[3]);  // Q5_1 better than Q4_1
  EXPECT_LT(ppl[2], ppl[4]);  // Q5_0 better than Q4_0
  EXPECT_LT(ppl[3], ppl[4] * 1.01);  // Q4_1 no worse than Q4_0 (within noise)
}

bool python_gguf_available() {
  return test::run_command("python3 -c 'import gguf.quants, numpy'", nullptr) == 0;
}

// The 160m synthetic model in every type: it loads and runs, and gguf-py
// (llama.cpp's Python reader, an independent implementation) reads the file
// and dequantizes its tensors to the same values as qlens.
TEST(QuantizeModel, EveryTypeRunsAndGgufPyAgrees) {
  if (!test::slow_tests_enabled()) GTEST_SKIP() << "QLENS_SLOW_TESTS=0";
  const bool check_py = python_gguf_available();
  const std::string dir = test::temp_dir();
  const std::string in = dir + "/160m-f16.gguf";
  tools::SynthOptions so;
  so.preset = "160m";
  so.type = DType::F16;
  tools::synth_model(so, in);
  const std::vector<std::string> checked = {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "blk.2.attn_v.weight",
                                            "output.weight", "token_embd.weight"};
  for (const char* mix : {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M",
                          "Q6_K", "IQ4_XS"}) {
    tools::QuantizeOptions opt;
    opt.mix = mix;
    const std::string out = dir + "/q.gguf";
    std::ostringstream log;
    tools::quantize_model(in, out, opt, log);
    auto m = Model::load(out);
    ContextOptions copt;
    copt.n_ctx = 8;
    Context ctx(*m, copt);
    const std::vector<Token> tokens = {1, 450, 4996, 17354};
    ctx.decode(tokens, false);
    for (float v : ctx.last_logits()) ASSERT_TRUE(std::isfinite(v)) << mix;
    if (!check_py) continue;
    std::string args;
    for (const auto& name : checked) {
      const Tensor* t = m->weights().at(name);
      std::vector<float> values(t->nelements());
      type_traits(t->type).to_float(t->data, values.data(), t->nelements());
      const std::string raw = dir + "/" + name + ".f32";
      write_file_atomic(raw, std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
      args += " " + name + "=" + raw;
    }
    std::string py;
    EXPECT_EQ(test::run_command("python3 " QLENS_SOURCE_DIR "/tests/gguf_model_check.py " + out + args, &py), 0)
        << mix << ":\n" << py;
  }
  if (!check_py) GTEST_SKIP() << "every type runs; the gguf-py check needs `pip install gguf numpy`";
}

TEST(Quantize, ClipOutliersPerBlock) {
  std::vector<float> x(64, 0.0f);
  for (int i = 0; i < 64; ++i) x[i] = (i % 2 ? 1.0f : -1.0f);
  x[5] = 100.0f;   // an outlier in the first block
  x[40] = -1.0f;   // the second block has none
  auto before = x;
  tools::clip_outliers(x.data(), 64, 32, 2.0);
  EXPECT_LT(x[5], 100.0f);
  EXPECT_GT(x[5], 1.0f);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(x[i], before[i]);  // within 2 sigma: untouched
}

// ---- the output in parts (--keep-split, --split-max-size, --split-max-tensors) ----

// Every tensor of `path` (a file or a split model's first part): its type, shape and bytes.
std::map<std::string, std::string> tensor_bytes(const std::string& path) {
  auto f = gguf::File::open(path);
  std::map<std::string, std::string> out;
  for (const auto& t : f->tensors())
    out[t.name] = std::string(type_name(t.type)) + std::to_string(t.ne[0]) + "x" + std::to_string(t.ne[1]) + "x" +
                  std::to_string(t.ne[2]) + ":" +
                  std::string(reinterpret_cast<const char*>(f->tensor_data(t)), t.nbytes);
  return out;
}

TEST(QuantizeSplits, PartsHoldTheSingleFilesTensorsAndLlamaCppsPartsRead) {
  const std::string dir = test::temp_dir() + "/splits";
  std::filesystem::create_directories(dir);
  std::ostringstream log;
  tools::QuantizeOptions opt;
  opt.mix = "Q8_0";
  opt.n_threads = 1;
  tools::quantize_model(synth_f32(), dir + "/one.gguf", opt, log);
  const auto single = tensor_bytes(dir + "/one.gguf");

  // gguf-split's parts of that very file (tests/data/split/README.md) read as it.
  EXPECT_EQ(tensor_bytes(std::string(QLENS_SOURCE_DIR) + "/tests/data/split/tiny-q8-split-00001-of-00003.gguf"),
            single);

  opt.split_max_tensors = 7;
  tools::quantize_model(synth_f32(), dir + "/parts.gguf", opt, log);
  EXPECT_FALSE(std::filesystem::exists(dir + "/parts.gguf")) << "the parts are named PREFIX-0000k-of-0000n.gguf";
  auto first = gguf::File::open(dir + "/parts-00001-of-00003.gguf");
  EXPECT_EQ(first->split_count(), 3);
  EXPECT_EQ(first->find("split.tensors.count")->as_int(), 20);
  EXPECT_EQ(tensor_bytes(dir + "/parts-00001-of-00003.gguf"), single);
  for (const auto& t : first->tensors()) EXPECT_EQ(t.split, (&t - first->tensors().data()) / 7) << t.name;

  // --keep-split: the input's parts, requantized part by part.
  tools::QuantizeOptions keep;
  keep.mix = "Q4_0";
  keep.allow_requantize = true;
  keep.keep_split = true;
  tools::quantize_model(dir + "/parts-00001-of-00003.gguf", dir + "/kept.gguf", keep, log);
  auto kept = gguf::File::open(dir + "/kept-00001-of-00003.gguf");
  ASSERT_EQ(kept->tensors().size(), first->tensors().size());
  for (size_t i = 0; i < kept->tensors().size(); ++i) EXPECT_EQ(kept->tensors()[i].split, first->tensors()[i].split);
  keep.keep_split = false;
  tools::quantize_model(dir + "/parts-00001-of-00003.gguf", dir + "/whole.gguf", keep, log);
  EXPECT_EQ(tensor_bytes(dir + "/kept-00001-of-00003.gguf"), tensor_bytes(dir + "/whole.gguf"));
  EXPECT_FALSE(gguf::File::open(dir + "/whole.gguf")->find("split.count")) << "one file has no part keys";

  // The model loads from its parts and computes what the single file computes.
  auto a = Model::load(dir + "/one.gguf");
  auto b = Model::load(dir + "/parts-00001-of-00003.gguf");
  const auto tokens = test::spread_tokens(a->hparams().n_vocab, 64);
  tools::PerplexityOptions po;
  po.n_ctx = 32;
  po.n_threads = 1;
  const double ppl = tools::perplexity(*a, tokens, po).ppl;
  EXPECT_TRUE(std::isfinite(ppl));
  EXPECT_EQ(tools::perplexity(*b, tokens, po).ppl, ppl);
}

TEST(QuantizeSplits, SizesReadAsGgufSplitReadsThem) {
  EXPECT_EQ(tools::parse_split_max_size("500M"), 500000000ull);
  EXPECT_EQ(tools::parse_split_max_size("50G"), 50000000000ull);
  for (const char* bad : {"", "M", "0G", "12", "1.5G", "-3M", "12K"})
    EXPECT_TRUE(test::contains(test::error_of([&] { tools::parse_split_max_size(bad); }), "--split-max-size")) << bad;
}

}  // namespace
}  // namespace qlens
