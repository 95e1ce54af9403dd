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
#include "tools/synth.h"

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
  std::vector<Token> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<Token>((i * 7919 + 3 + salt) % m.hparams().n_vocab);
  return t;
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
