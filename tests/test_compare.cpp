// Comparing two models node by node: the paired graph (both models, one
// graph, layer by layer), error taps between partner nodes against a brute
// force over full host dumps, and mismatched models.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "qlens/backend.h"
#include "qlens/context_pair.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/synth/synth.h"

namespace qlens {
namespace {

std::string synth_path(uint64_t seed, DType type = DType::F32) {
  static std::map<std::pair<uint64_t, int>, std::string> made;
  auto& path = made[{seed, static_cast<int>(type)}];
  if (path.empty()) {
    path = test::temp_dir() + "/tiny-" + std::to_string(seed) + "-" + std::to_string(static_cast<int>(type)) + ".gguf";
    tools::SynthOptions o;
    o.preset = "tiny";
    o.type = type;
    o.seed = seed;
    tools::synth_model(o, path);
  }
  return path;
}

std::vector<Token> some_tokens(const Model& m, size_t n, size_t salt = 0) {
  return test::spread_tokens(m.hparams().n_vocab, n, salt);
}

ContextOptions options() {
  ContextOptions o;
  o.n_ctx = 64;
  o.n_batch = 16;
  o.n_threads = 2;
  return o;
}

// Error and stats taps on every paired node; keys are the labels.
void select_everything(ContextPair& pair) {
  pair.scheduler().set_tap_selector([&pair](const Tensor& t, std::vector<TapRequest>& r) {
    if (op_is_view(t.op) || t.type != DType::F32) return;
    const ContextPair::Side side = pair.side_of(t);
    if (side == ContextPair::Side::Test)
      if (const Tensor* ref = pair.reference_of(t)) r.push_back({TapKind::ErrorStats, pair.label(t), ref});
  });
}

TEST(ContextPair, AModelAgainstItselfHasNoErrorAnywhere) {
  auto m = Model::load(synth_path(42));
  Context a(*m, options()), b(*m, options());
  ContextPair pair(a, b);
  select_everything(pair);
  const auto tokens = some_tokens(*m, 40);
  ASSERT_TRUE(pair.decode(tokens));
  EXPECT_EQ(a.n_past(), 40);
  EXPECT_EQ(b.n_past(), 40);
  auto taps = pair.scheduler().read_taps();
  ASSERT_GT(taps.size(), 20u * static_cast<size_t>(m->hparams().n_layer));
  EXPECT_TRUE(taps.count("Qcur-0") && taps.count("Qcur-0#2") && taps.count("l_out-1") && taps.count("result_output"));
  for (const auto& [label, r] : taps) {
    EXPECT_EQ(r.error.sum_sq_diff, 0.0) << label;
    EXPECT_EQ(r.error.max_abs_diff, 0.0) << label;
    EXPECT_GT(r.error.count, 0) << label;
  }
  for (int64_t i = 0; i < 40; ++i) {
    auto x = pair.ref_logits(i), y = pair.test_logits(i);
    ASSERT_TRUE(std::equal(x.begin(), x.end(), y.begin())) << i;
  }
}

// Perplexity and compare ask for the scored tokens' logits only: the output
// rows of tokens 0..first_logit-1 are not computed, in batches wholly before
// the first wanted token (16 and 16 of 40) and in the batch that straddles it.
// Bit for bit while the output's rows take the same matrix path; one row (39)
// is a matrix-vector product, with its own summation order.
TEST(ContextPair, LogitsFromATokenOnwardsEqualThoseOfEveryToken) {
  auto ref_model = Model::load(synth_path(42));
  auto test_model = Model::load(synth_path(42, DType::F16));
  const auto tokens = some_tokens(*ref_model, 40);
  Context a(*ref_model, options()), b(*test_model, options());
  ContextPair all(a, b);
  ASSERT_TRUE(all.decode(tokens));
  ASSERT_EQ(all.n_rows(), 40);
  std::vector<std::vector<float>> ref_rows, test_rows;
  for (int64_t i = 0; i < 40; ++i) {
    auto x = all.ref_logits(i), y = all.test_logits(i);
    ref_rows.emplace_back(x.begin(), x.end());
    test_rows.emplace_back(y.begin(), y.end());
  }
  auto same = [](std::span<const float> x, const std::vector<float>& y, bool exact) {
    for (size_t k = 0; k < x.size(); ++k)
      if (exact ? x[k] != y[k] : std::fabs(x[k] - y[k]) > 1e-4f * (1 + std::fabs(y[k]))) return false;
    return true;
  };
  for (int64_t first : {1, 20, 32, 39}) {
    const bool exact = first < 39;
    Context c(*ref_model, options()), d(*test_model, options());
    ContextPair some(c, d);
    ASSERT_TRUE(some.decode(tokens, first));
    EXPECT_EQ(c.n_past(), 40);
    EXPECT_EQ(some.n_rows(), 40 - first);
    EXPECT_THROW(some.ref_logits(first - 1), Error);
    for (int64_t i = first; i < 40; ++i) {
      auto x = some.ref_logits(i), y = some.test_logits(i);
      ASSERT_TRUE(same(x, ref_rows[i], exact)) << first << " " << i;
      ASSERT_TRUE(same(y, test_rows[i], exact)) << first << " " << i;
    }
    // Plain contexts agree.
    Context e(*test_model, options());
    ASSERT_TRUE(e.decode_logits_from(tokens, first));
    for (int64_t i = first; i < 40; ++i) {
      auto z = e.logits(i);
      ASSERT_TRUE(same(z, test_rows[i], exact)) << first << " " << i;
    }
    EXPECT_THROW(e.logits(first - 1), Error);
  }
  Context f(*ref_model, options()), h(*test_model, options());
  ContextPair bad(f, h);
  EXPECT_THROW(bad.decode(tokens, 40), Error);
  EXPECT_THROW(bad.decode(tokens, -1), Error);
}

TEST(ContextPair, ErrorTapsEqualABruteForceOverHostDumps) {
  auto ref_model = Model::load(synth_path(42));
  auto test_model = Model::load(synth_path(42, DType::F16));
  const auto tokens = some_tokens(*ref_model, 37);

  // Brute force: each model alone, every node kept and dumped per batch.
  auto dump = [&](const Model& m) {
    ContextOptions o = options();
    o.keep_intermediates = true;
    Context ctx(m, o);
    std::map<std::string, std::vector<float>> values;  // label -> all batches' values, concatenated
    ctx.set_observer([&](const Graph& g) {
      std::map<std::string, int> seen;
      for (const Tensor* t : g.nodes()) {
        if (t->name.empty() || op_is_view(t->op) || t->type != DType::F32) {
          if (!t->name.empty()) ++seen[t->name];
          continue;
        }
        const int k = ++seen[t->name];
        const std::string label = k == 1 ? t->name : t->name + "#" + std::to_string(k);
        auto v = tensor_to_f32(*t);
        auto& all = values[label];
        all.insert(all.end(), v.begin(), v.end());
      }
    });
    EXPECT_TRUE(ctx.decode(tokens, true));
    return values;
  };
  const auto ref_dump = dump(*ref_model), test_dump = dump(*test_model);

  Context a(*ref_model, options()), b(*test_model, options());
  ContextPair pair(a, b);
  select_everything(pair);
  ASSERT_TRUE(pair.decode(tokens));
  auto taps = pair.scheduler().read_taps();
  int checked = 0;
  for (const auto& [label, r] : taps) {
    ASSERT_TRUE(ref_dump.count(label) && test_dump.count(label)) << label;
    const auto& x = ref_dump.at(label);
    const auto& y = test_dump.at(label);
    ASSERT_EQ(x.size(), y.size()) << label;
    ErrorStats want;
    for (size_t i = 0; i < x.size(); ++i) want.add(y[i], x[i]);  // the tap runs on the test node: a = test
    EXPECT_EQ(r.error.count, want.count) << label;
    EXPECT_NEAR(r.error.sum_sq_diff, want.sum_sq_diff, 1e-5 * want.sum_sq_diff + 1e-30) << label;
    EXPECT_NEAR(r.error.sum_sq_a, want.sum_sq_a, 1e-5 * want.sum_sq_a) << label;
    EXPECT_NEAR(r.error.sum_ab, want.sum_ab, 1e-5 * std::sqrt(want.sum_sq_a * want.sum_sq_b)) << label;
    EXPECT_FLOAT_EQ(static_cast<float>(r.error.max_abs_diff), static_cast<float>(want.max_abs_diff)) << label;
    ++checked;
  }
  EXPECT_GT(checked, 20 * static_cast<int>(ref_model->hparams().n_layer));
  // F16 weights against F32: small but nonzero errors.
  EXPECT_GT(taps.at("result_output").error.sum_sq_diff, 0.0);
  EXPECT_LT(taps.at("result_output").error.sum_sq_diff / taps.at("result_output").error.sum_sq_a, 1e-4);
}

TEST(ContextPair, MismatchedModelsNameTheFirstDifference) {
  auto tiny = Model::load(synth_path(42));
  QLENS_REQUIRE_SHARED(stories, "models/stories260K.gguf");
  auto other = Model::load(stories);
  const std::string diff = first_model_difference(*tiny, *other);
  EXPECT_FALSE(diff.empty());
  Context a(*tiny, options());
  ContextOptions o = options();
  Context b(*other, o);
  try {
    ContextPair pair(a, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(diff), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("stories260K"), std::string::npos) << e.what();
  }
  EXPECT_EQ(first_model_difference(*tiny, *tiny), "");
}

}  // namespace
}  // namespace qlens

// ---------------------------------------------------------------------------
// qlens compare on stories260K, as a user runs it.

#include <fstream>
#include <regex>
#include <sstream>

#include "core/text_file.h"
#include "tools/compare/llama_logits.h"

namespace qlens {
namespace {

int qlens_cli(const std::string& args, std::string* out) {
  return test::run_command(std::string(QLENS_BINARY) + " " + args, out);
}

// name -> column -> value, from the CSV compare writes.
std::map<std::string, std::map<std::string, double>> read_csv(const std::string& path) {
  std::istringstream in(read_text_file(path));
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  for (std::stringstream h(line); std::getline(h, line, ',');) header.push_back(line);
  std::map<std::string, std::map<std::string, double>> rows;
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string name, field;
    std::getline(fields, name, ',');
    for (size_t c = 1; std::getline(fields, field, ',') && c < header.size(); ++c)
      rows[name][header[c]] = field.empty() ? NAN : std::strtod(field.c_str(), nullptr);  // strtod reads inf, nan
  }
  return rows;
}

double mean_kld(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(Mean\s+KLD:\s+([0-9.eE+-]+))"))) return -1;
  return std::stod(m[1]);
}

class CompareStories : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = test::shared_path("models/stories260K.gguf");
    text_ = test::shared_path("data/tinystories/tinystories_val.txt");
    if (model_.empty() || text_.empty()) GTEST_SKIP() << "needs ../shared/models/stories260K.gguf and tinystories_val.txt";
    dir_ = test::temp_dir();
  }
  std::string quantized(const std::string& type) {
    const std::string path = dir_ + "/" + type + ".gguf";
    std::string out;
    if (!std::ifstream(path)) {
      EXPECT_EQ(qlens_cli("quantize " + model_ + " " + path + " " + type, &out), 0) << out;
    }
    return path;
  }
  std::string compare(const std::string& test_model, const std::string& extra, int* rc = nullptr) {
    std::string out;
    const int status = qlens_cli("compare --ref " + model_ + " -m " + test_model + " -f " + text_ +
                                     " -c 128 -b 128 -t 2 " + extra,
                                 &out);
    if (rc)
      *rc = status;
    else
      EXPECT_EQ(status, 0) << out;
    return out;
  }
  std::string model_, text_, dir_;
};

TEST_F(CompareStories, AModelWithItselfIsExactlyEqual) {
  const std::string out = compare(model_, "--chunks 4 --csv " + dir_ + "/self.csv --json " + dir_ + "/self.json");
  EXPECT_EQ(mean_kld(out), 0.0) << out;
  EXPECT_NE(out.find("Same top p: 100.000"), std::string::npos) << out;
  const auto rows = read_csv(dir_ + "/self.csv");
  ASSERT_GT(rows.size(), 80u);
  for (const auto& [name, row] : rows) {
    EXPECT_EQ(row.at("nmse"), 0.0) << name;
    EXPECT_EQ(row.at("max_abs"), 0.0) << name;
    EXPECT_EQ(row.at("cosine"), 1.0) << name;
  }
}

double figure(const std::string& out, const std::string& label) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(label + R"(\s*:\s+([0-9.eE+-]+))"))) return -1;
  return std::stod(m[1]);
}

// compare --kl-divergence-base: with --ref it writes the reference's
// log-probabilities in llama.cpp's format; without, it reads them as the
// reference. The test model's perplexity is the same either way (the same
// chunks), and the KLD differs only by the file's 16-bit rounding of log p.
TEST_F(CompareStories, KlDivergenceBaseFileIsWrittenAndRead) {
  const std::string q = quantized("Q4_0");
  const std::string base = dir_ + "/ref.kld";
  const std::string live = compare(q, "--chunks 4 --top 0 --kl-divergence-base " + base);
  const auto file = tools::LlamaLogitsFile::load(base);
  EXPECT_EQ(file.n_ctx(), 128);
  EXPECT_EQ(file.n_chunk(), 4);
  std::string out;
  ASSERT_EQ(qlens_cli("compare -m " + q + " --kl-divergence-base " + base + " -t 2 --json " + dir_ + "/file.json", &out), 0)
      << out;
  EXPECT_NE(out.find("252 tokens scored against " + base), std::string::npos) << out;
  const double kld_live = mean_kld(live), kld_file = mean_kld(out);
  ASSERT_GT(kld_live, 0) << live;
  EXPECT_NEAR(kld_file, kld_live, 0.02 * kld_live + 2e-5) << out;
  EXPECT_NEAR(figure(out, R"(Mean PPL\(Q\))"), figure(live, R"(Mean PPL\(Q\))"), 1e-4 * figure(live, R"(Mean PPL\(Q\))"));
  EXPECT_NEAR(figure(out, "Same top p"), figure(live, "Same top p"), 1.0);  // percent
  const std::string json = read_text_file(dir_ + "/file.json");
  EXPECT_NE(json.find(base), std::string::npos) << json.substr(0, 400);
  // A model of another vocabulary, --csv (no nodes) and a missing file are errors.
  EXPECT_NE(qlens_cli("compare -m " + q + " --kl-divergence-base " + base + " --csv " + dir_ + "/x.csv", &out), 0);
  EXPECT_NE(out.find("--csv"), std::string::npos) << out;
  EXPECT_NE(qlens_cli("compare -m " + q + " --kl-divergence-base " + dir_ + "/none.kld", &out), 0);
  EXPECT_NE(out.find("none.kld"), std::string::npos) << out;
}

TEST_F(CompareStories, MeanKldOrdersAsTheBitsDo) {
  // Bits per weight on this model (its rows of 64 and 172 fit no K type, so
  // Q2_K falls back to IQ4_NL, and ffn_down to F16 in the 4- and 5-bit types):
  // Q8_0 9.97 > Q5_0 7.87 > Q4_1 7.52 > Q4_0 7.18 = "Q2_K" 7.18.
  std::map<std::string, double> kld;
  for (const char* type : {"Q8_0", "Q5_0", "Q4_1", "Q4_0", "Q2_K"})
    kld[type] = mean_kld(compare(quantized(type), "--chunks 30 --top 0"));
  EXPECT_LT(kld["Q8_0"], 0.1 * kld["Q5_0"]);
  EXPECT_LT(kld["Q5_0"], kld["Q4_1"]);
  EXPECT_LT(kld["Q4_1"], kld["Q4_0"]);
  EXPECT_LT(kld["Q5_0"], kld["Q2_K"]);
  for (const auto& [type, v] : kld) std::printf("%s: mean KLD %.6f\n", type.c_str(), v);
}

TEST_F(CompareStories, TapsEqualHostReductionsAndTheTablesAreWritten) {
  const std::string q = quantized("Q4_0");
  const std::string out = compare(q, "--chunks 3 --csv " + dir_ + "/taps.csv --json " + dir_ + "/taps.json");
  compare(q, "--chunks 3 --host-reductions --csv " + dir_ + "/host.csv");
  const auto taps = read_csv(dir_ + "/taps.csv"), host = read_csv(dir_ + "/host.csv");
  ASSERT_EQ(taps.size(), host.size());
  for (const auto& [name, row] : host)
    for (const char* col : {"nmse", "rmse", "cosine", "max_abs", "ref_mean", "ref_std", "test_min", "test_max"}) {
      const double want = row.at(col), got = taps.at(name).at(col);
      EXPECT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-12) << name << " " << col;
    }
  // The l_out error table in the text, and in the JSON (loaded back).
  EXPECT_NE(out.find("l_out"), std::string::npos) << out;
  EXPECT_NE(out.find("Where the error grows"), std::string::npos) << out;
  std::string py;
  if (test::run_command("python3 -c 'import json'", &py) != 0) GTEST_SKIP() << "python3 is absent: JSON not loaded back";
  const std::string script = dir_ + "/check.py";
  write_file_atomic(script,
                    "import json, sys\n"
                    "d = json.load(open(sys.argv[1]))\n"
                    "assert d['schema_version'] == 2\n"
                    "lo = [n for n in d['nodes'] if n['kind'] == 'l_out']\n"
                    "assert len(lo) == 5, len(lo)\n"
                    "assert all(n['nmse'] > 0 for n in lo)\n"
                    "assert len(d['growth']['layers']) == 5\n"
                    "assert d['logits']['kld']['mean']['value'] > 0\n"
                    "print('ok')\n");
  EXPECT_EQ(test::run_command("python3 " + script + " " + dir_ + "/taps.json", &py), 0) << py;
}

TEST_F(CompareStories, MismatchedModelsAreAClearError) {
  std::string out;
  tools::SynthOptions o;
  const std::string tiny = dir_ + "/tiny.gguf";
  tools::synth_model(o, tiny);
  int rc = 0;
  out = compare(tiny, "--chunks 1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("cannot compare"), std::string::npos) << out;
}

}  // namespace
}  // namespace qlens
