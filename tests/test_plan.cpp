// qlens plan: the budgeted type choice against a brute-force optimum, the
// Lagrangian lower bound on random problems, infeasible budgets, the
// tensor-type file (escaping, and that both qlens's and llama.cpp's readers
// take it), and loading a sensitivity table from a file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "qlens/error.h"
#include "test_util.h"
#include "core/json_reader.h"
#include "core/text_file.h"
#include "tools/plan/plan.h"
#include "tools/plan/plan_curve.h"
#include "tools/plan/plan_json.h"
#include "tools/quantize/quantize.h"

namespace qlens {
namespace {

using tools::Plan;
using tools::PlanOption;
using tools::PlanTensor;
using tools::SensitivityTable;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

PlanTensor tensor(const std::string& name, int layer, std::vector<PlanOption> options) {
  PlanTensor t;
  t.name = name;
  t.role = "role";
  t.layer = layer;
  t.n_elements = 64;
  t.options = std::move(options);
  return t;
}

// The hand-made problem. Per tensor, (bytes, ΔKLD) by type; the lower convex
// hull's steps and their gains per byte are worked out beside each.
SensitivityTable three_tensor_problem() {
  SensitivityTable table;
  table.model = "hand-made";
  table.fixed_bytes = 100;
  // A: steps 20->30 gains 0.030/B, 30->40 0.012/B, 40->60 0.003/B, 60->80 0.001/B.
  table.tensors.push_back(tensor("blk.0.attn_q.weight", 0,
                                 {{DType::Q2_K, 20, 0.50},
                                  {DType::Q3_K, 30, 0.20},
                                  {DType::Q4_K, 40, 0.08},
                                  {DType::Q6_K, 60, 0.02},
                                  {DType::Q8_0, 80, 0.00}}));
  // B: steps 10->20 0.060/B, 20->40 0.0125/B, 40->80 0.00125/B. Q4_0 (25 bytes)
  // lies above the hull, IQ4_XS duplicates Q4_K, Q5_0 is dominated by Q4_K.
  table.tensors.push_back(tensor("blk.0.ffn_down.weight", 0,
                                 {{DType::Q2_K, 10, 0.90},
                                  {DType::Q3_K, 20, 0.30},
                                  {DType::Q4_0, 25, 0.28},
                                  {DType::Q4_K, 40, 0.05},
                                  {DType::IQ4_XS, 40, 0.05},
                                  {DType::Q5_0, 45, 0.06},
                                  {DType::Q8_0, 80, 0.00}}));
  // C: steps 15->30 0.004/B, 30->60 0.001/B.
  table.tensors.push_back(tensor("output.weight", -1,
                                 {{DType::Q4_K, 15, 0.10}, {DType::Q6_K, 30, 0.04}, {DType::Q8_0, 60, 0.01}}));
  table.n_weights_total = 1000;
  return table;
}

struct BruteForce {
  double best_delta_kld = std::numeric_limits<double>::infinity();
  uint64_t bytes = 0;
};

// Every combination of options: the exact optimum for the budget.
BruteForce brute_force(const SensitivityTable& table, uint64_t budget) {
  BruteForce best;
  std::vector<size_t> choice(table.tensors.size(), 0);
  for (;;) {
    uint64_t bytes = table.fixed_bytes;
    double delta = 0;
    for (size_t t = 0; t < choice.size(); ++t) {
      bytes += table.tensors[t].options[choice[t]].bytes;
      delta += table.tensors[t].options[choice[t]].delta_kld;
    }
    if (bytes <= budget && delta < best.best_delta_kld) best = {delta, bytes};
    size_t t = 0;
    while (t < choice.size() && ++choice[t] == table.tensors[t].options.size()) choice[t++] = 0;
    if (t == choice.size()) return best;
  }
}

// Checks the plan's own bookkeeping: its totals are those of its choices.
void expect_consistent(const SensitivityTable& table, const Plan& plan) {
  ASSERT_EQ(plan.choice.size(), table.tensors.size());
  uint64_t bytes = table.fixed_bytes;
  double delta = 0;
  for (size_t t = 0; t < table.tensors.size(); ++t) {
    ASSERT_LT(plan.choice[t], table.tensors[t].options.size());
    bytes += table.tensors[t].options[plan.choice[t]].bytes;
    delta += table.tensors[t].options[plan.choice[t]].delta_kld;
  }
  EXPECT_EQ(plan.total_bytes, bytes);
  EXPECT_NEAR(plan.predicted_delta_kld, delta, 1e-12);
  EXPECT_LE(plan.total_bytes, plan.budget_bytes);
  EXPECT_DOUBLE_EQ(plan.bits_per_weight, 8.0 * static_cast<double>(bytes) / static_cast<double>(table.n_weights_total));
}

// ---- optimality ----

TEST(Plan, MatchesBruteForceOnTheHandMadeProblem) {
  const SensitivityTable table = three_tensor_problem();
  // Budgets this small fit in byte-sized buckets, where the knapsack solver
  // is exact: every budget must give the optimum. (The relaxation alone was
  // exact at 176 of the 196, all 196 with its exchange pass.)
  int budgets = 0, exact = 0;
  double worst_gap = 0;
  for (uint64_t budget = 145; budget <= 340; ++budget) {
    const Plan plan = tools::solve_plan(table, budget);
    expect_consistent(table, plan);
    const BruteForce best = brute_force(table, budget);
    const double gap = plan.predicted_delta_kld - best.best_delta_kld;
    EXPECT_GE(gap, -1e-12) << "budget " << budget;  // nothing beats the optimum
    EXPECT_TRUE(gap <= 0.05 * best.best_delta_kld + 1e-12 || gap <= 0.005)
        << "budget " << budget << ": plan " << plan.predicted_delta_kld << ", optimum " << best.best_delta_kld;
    ++budgets;
    if (gap <= 1e-12) ++exact;
    worst_gap = std::max(worst_gap, gap);
  }
  std::cout << "hand-made problem: exact at " << exact << " of " << budgets << " budgets, worst gap " << worst_gap
            << "\n";
  EXPECT_EQ(exact, budgets);

  // Breakpoints: fixed 100 + the smallest options (45), then the hull steps in
  // decreasing gain per byte: +10 (B), +10 (A), +20 (B), +10 (A), +15 (C),
  // +20 (A), +40 (B), +20 (A), +30 (C).
  for (uint64_t budget : {145, 155, 165, 185, 195, 210, 230, 270, 290, 320}) {
    const Plan plan = tools::solve_plan(table, budget);
    EXPECT_NEAR(plan.predicted_delta_kld, brute_force(table, budget).best_delta_kld, 1e-12) << "budget " << budget;
    EXPECT_EQ(plan.total_bytes, budget) << "a breakpoint budget is spent exactly";
  }
  // Unlimited: every tensor at its lowest ΔKLD (A and B at Q8_0: 0, C at Q8_0: 0.01).
  const Plan all = tools::solve_plan(table, 1000);
  EXPECT_NEAR(all.predicted_delta_kld, 0.01, 1e-15);
  EXPECT_EQ(all.lambda, 0.0);
}

TEST(Plan, SpendsTheBudgetLeftBetweenBreakpoints) {
  const SensitivityTable table = three_tensor_problem();
  // 150 bytes: the relaxed plan stops at 145 (B's first step costs 10 and 5
  // remain, λ = 0.06); nothing costs 5 or less, so 145 stays.
  Plan plan = tools::solve_plan(table, 150);
  EXPECT_EQ(plan.total_bytes, 145u);
  EXPECT_NEAR(plan.lambda, 0.06, 1e-12);
  // 170 bytes: the relaxed plan is at 165 (A at Q3_K, B at Q3_K), 5 left: B's
  // Q4_0 (25 bytes, off the hull) is exactly 5 more and gains 0.02.
  plan = tools::solve_plan(table, 170);
  EXPECT_EQ(plan.total_bytes, 170u);
  EXPECT_EQ(table.tensors[1].options[plan.choice[1]].type, DType::Q4_0);
  EXPECT_NEAR(plan.predicted_delta_kld, 0.20 + 0.28 + 0.10, 1e-12);
  EXPECT_NEAR(plan.predicted_delta_kld, brute_force(table, 170).best_delta_kld, 1e-12);
}

TEST(Plan, ExchangesPayForABiggerStep) {
  const SensitivityTable table = three_tensor_problem();
  // 300 bytes: the relaxed plan stops at 290 (A and B at Q8_0, C at Q6_K,
  // ΔKLD 0.04) and no single upgrade fits the 10 bytes left. The optimum
  // takes A down to Q6_K (+0.02, frees 20) to pay for C's Q8_0 (-0.03, +30).
  const Plan plan = tools::solve_plan(table, 300);
  EXPECT_EQ(table.tensors[0].options[plan.choice[0]].type, DType::Q6_K);
  EXPECT_EQ(table.tensors[2].options[plan.choice[2]].type, DType::Q8_0);
  EXPECT_EQ(plan.total_bytes, 300u);
  EXPECT_NEAR(plan.predicted_delta_kld, 0.03, 1e-12);
}

// Random small problems: beside the brute-force comparison, a certificate
// that holds for any problem: Lagrangian duality bounds the optimum from
// below by L(λ) = Σ_t min_j(ΔKLD_tj + λ·bytes_tj) − λ·(budget − fixed), and
// the relaxed plan is within one hull step of it.
TEST(Plan, RandomProblemsAgainstBruteForceAndTheDualBound) {
  std::mt19937_64 rng(42);
  int cases = 0, exact = 0, within_5_percent = 0;
  double worst_relative = 0;
  for (int instance = 0; instance < 300; ++instance) {
    SensitivityTable table;
    table.fixed_bytes = rng() % 50;
    const int n_tensors = 2 + static_cast<int>(rng() % 3);
    double largest_range = 0;
    for (int t = 0; t < n_tensors; ++t) {
      std::vector<PlanOption> options;
      const int n_options = 1 + static_cast<int>(rng() % 5);
      double lo = 1e9, hi = -1e9;
      for (int j = 0; j < n_options; ++j) {
        const uint64_t bytes = 5 + rng() % 60;
        // ΔKLD falls with bytes, with noise: some options off the hull or dominated.
        const double delta = 3.0 / static_cast<double>(bytes) + std::uniform_real_distribution<double>(-0.02, 0.05)(rng);
        options.push_back({DType::Q4_0, bytes, delta});
        lo = std::min(lo, delta);
        hi = std::max(hi, delta);
      }
      largest_range = std::max(largest_range, hi - lo);
      table.tensors.push_back(tensor("blk." + std::to_string(t) + ".ffn_up.weight", t, options));
    }
    table.n_weights_total = 64 * n_tensors;
    const uint64_t minimum = tools::min_plan_bytes(table);
    for (uint64_t budget = minimum; budget <= minimum + 150; budget += 7) {
      const Plan plan = tools::solve_plan(table, budget);
      expect_consistent(table, plan);
      const double optimum = brute_force(table, budget).best_delta_kld;
      const double gap = plan.predicted_delta_kld - optimum;
      EXPECT_GE(gap, -1e-12);
      EXPECT_LE(gap, largest_range + 1e-12);
      double dual = -plan.lambda * static_cast<double>(budget - table.fixed_bytes);
      for (const PlanTensor& t : table.tensors) {
        double best = std::numeric_limits<double>::infinity();
        for (const PlanOption& o : t.options) best = std::min(best, o.delta_kld + plan.lambda * static_cast<double>(o.bytes));
        dual += best;
      }
      EXPECT_LE(dual, optimum + 1e-9) << "the dual bound is a lower bound";
      ++cases;
      if (gap <= 1e-12) ++exact;
      const double relative = gap / std::max(std::fabs(optimum), 1e-9);
      if (gap <= 1e-12 || relative <= 0.05) ++within_5_percent;
      worst_relative = std::max(worst_relative, relative);
    }
  }
  std::cout << "random problems: " << cases << " budgets, exact " << exact << ", within 5% " << within_5_percent
            << ", worst relative gap " << worst_relative << "\n";
  // Byte-sized buckets: the knapsack solver is exact on all of them. (The
  // relaxation alone was exact at 6535 of the 6600: the misses need two
  // tensors to step down to pay for a third.)
  EXPECT_EQ(exact, cases);
  EXPECT_EQ(within_5_percent, cases);
}

// One large tensor (a tied embedding) whose only step gains less per byte
// than the small tensors' steps: the relaxation takes the small steps first,
// then the large one no longer fits, and no exchange of one tensor for
// another frees enough to take it. The optimum skips the small steps.
TEST(Plan, TakesOneLargeStepInPlaceOfManySmallOnes) {
  SensitivityTable table;
  table.tensors.push_back(tensor("token_embd.weight", -1,
                                 {{DType::Q5_0, 600'000'000, 0.020}, {DType::Q8_0, 1'000'000'000, 0.0}}));
  for (int t = 0; t < 4; ++t)
    table.tensors.push_back(tensor("blk." + std::to_string(t) + ".ffn_down.weight", t,
                                   {{DType::Q4_K, 50'000'000, 0.004}, {DType::Q6_K, 100'000'000, 0.0}}));
  table.n_weights_total = 2'000'000'000;
  // 1.2 GB: the embedding at Q8_0 and every small tensor at Q4_K (0.016), or
  // the embedding at Q5_0 and every small tensor at Q6_K (0.020, 200 MB left).
  const Plan plan = tools::solve_plan(table, 1'200'000'000);
  expect_consistent(table, plan);
  EXPECT_EQ(table.tensors[0].options[plan.choice[0]].type, DType::Q8_0);
  EXPECT_NEAR(plan.predicted_delta_kld, 0.016, 1e-12);
  EXPECT_EQ(plan.total_bytes, 1'200'000'000u);
  // Bytes that are not multiples of a bucket (18311 of them here): the
  // rounding may strand some bytes, not the large step.
  table.tensors[0].options[1].bytes += 12345;
  const Plan rounded = tools::solve_plan(table, 1'200'012'345);
  EXPECT_EQ(table.tensors[0].options[rounded.choice[0]].type, DType::Q8_0);
  EXPECT_NEAR(rounded.predicted_delta_kld, 0.016, 1e-12);
}

TEST(Plan, ManyTensorsSolveQuicklyWithinTheBudget) {
  std::mt19937_64 rng(7);
  SensitivityTable table;
  table.fixed_bytes = 123456;
  const DType types[] = {DType::Q2_K, DType::Q3_K, DType::IQ4_XS, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0, DType::F16};
  const double bits[] = {2.625, 3.4375, 4.25, 4.5, 5.5, 6.5625, 8.5, 16};
  for (int t = 0; t < 3000; ++t) {
    const double n = 4096.0 * (1 + static_cast<double>(rng() % 16));
    const double sensitivity = std::exp(std::normal_distribution<double>(0, 1.5)(rng));
    std::vector<PlanOption> options;
    for (int k = 0; k < 8; ++k)
      options.push_back({types[k], static_cast<uint64_t>(n * bits[k] / 8), sensitivity * std::exp2(-2 * bits[k])});
    table.tensors.push_back(tensor("blk." + std::to_string(t / 7) + ".t" + std::to_string(t) + ".weight", t / 7, options));
    table.tensors.back().n_elements = static_cast<int64_t>(n);
    table.n_weights_total += static_cast<int64_t>(n);
  }
  const auto start = std::chrono::steady_clock::now();
  const Plan plan = tools::solve_plan(table, tools::budget_from_bpw(table, 4.8));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_consistent(table, plan);
  EXPECT_LE(plan.bits_per_weight, 4.8);
  EXPECT_GT(plan.bits_per_weight, 4.79);  // the greedy pass leaves little unspent
  EXPECT_LT(seconds, 2.0);
}

// ---- robustness ----

TEST(Plan, InfeasibleBudgetSaysTheMinimum) {
  const SensitivityTable table = three_tensor_problem();
  EXPECT_EQ(tools::min_plan_bytes(table), 145u);
  const std::string e = error_of([&] { tools::solve_plan(table, 144); });
  EXPECT_TRUE(contains(e, "below the smallest plan possible: 145 bytes")) << e;
  EXPECT_TRUE(contains(e, "144 bytes")) << e;
  EXPECT_TRUE(contains(error_of([&] { tools::solve_plan(table, 50); }), "145 bytes"));  // below even the fixed bytes
  EXPECT_NO_THROW(tools::solve_plan(table, 145));
}

TEST(Plan, DuplicatesTiesNegativesAndSingleOptions) {
  SensitivityTable table;
  table.n_weights_total = 256;
  // Equal bytes: the lower ΔKLD is the one to take. Negative ΔKLD (noise) is fine.
  table.tensors.push_back(tensor("blk.0.a.weight", 0, {{DType::Q4_0, 10, 0.3}, {DType::Q4_K, 10, 0.1}, {DType::Q8_0, 20, -0.01}}));
  table.tensors.push_back(tensor("blk.0.b.weight", 0, {{DType::F16, 40, 0.0}}));  // nothing to choose
  // All options identical.
  table.tensors.push_back(tensor("blk.0.c.weight", 0, {{DType::Q6_K, 15, 0.2}, {DType::Q6_K, 15, 0.2}}));
  Plan plan = tools::solve_plan(table, 65);
  EXPECT_EQ(table.tensors[0].options[plan.choice[0]].type, DType::Q4_K);
  EXPECT_NEAR(plan.predicted_delta_kld, 0.3, 1e-12);
  plan = tools::solve_plan(table, 75);
  EXPECT_EQ(table.tensors[0].options[plan.choice[0]].type, DType::Q8_0);
  EXPECT_NEAR(plan.predicted_delta_kld, 0.19, 1e-12);

  SensitivityTable empty_options = table;
  empty_options.tensors[1].options.clear();
  EXPECT_TRUE(contains(error_of([&] { tools::solve_plan(empty_options, 1000); }), "blk.0.b.weight has no options"));
}

TEST(Plan, BitsPerWeightAndBytes) {
  SensitivityTable table = three_tensor_problem();  // 1000 weights
  EXPECT_EQ(tools::budget_from_bpw(table, 4.5), 562u);  // 562.5 rounded down
  EXPECT_EQ(tools::budget_from_bpw(table, 8), 1000u);
  EXPECT_DOUBLE_EQ(tools::bpw_from_bytes(table, 562), 4.496);
  EXPECT_THROW(tools::budget_from_bpw(table, 0), Error);
  EXPECT_THROW(tools::budget_from_bpw(table, -1), Error);
  EXPECT_THROW(tools::budget_from_bpw(table, std::nan("")), Error);
}

// ---- the tensor-type file ----

TEST(Plan, RegexEscapingMatchesTheNameOnly) {
  EXPECT_EQ(tools::regex_escape_name("blk.0.attn_q.weight"), "blk\\.0\\.attn_q\\.weight");
  for (const std::string name : {"blk.0.attn_q.weight", "a+b(c)[d]{e}|f^g$h*i?j\\k", "x.y/z-w", "MiXed.Case",
                                 "with space=odd", "caf\xC3\xA9.weight"}) {
    const std::string pattern = "^" + tools::regex_escape_name(name) + "$";
    EXPECT_TRUE(std::regex_search(name, std::regex(pattern))) << pattern;
    EXPECT_FALSE(std::regex_search(name + "x", std::regex(pattern))) << pattern;
    EXPECT_FALSE(std::regex_search("x" + name, std::regex(pattern))) << pattern;
    // llama.cpp lower-cases the pattern and splits on whitespace and the first '='.
    std::string lowered = pattern;
    for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_TRUE(std::regex_search(name, std::regex(lowered))) << lowered;
    EXPECT_EQ(pattern.find_first_of(" \t\n\r="), std::string::npos) << pattern;
  }
  // The escaped dot matches a dot only.
  EXPECT_FALSE(std::regex_search("blkX0.attn_q.weight", std::regex("^" + tools::regex_escape_name("blk.0.attn_q.weight") + "$")));
}

TEST(Plan, TensorTypeFileIsReadByQlensAndLlamaCpp) {
  const SensitivityTable table = three_tensor_problem();
  const Plan plan = tools::solve_plan(table, 195);  // A Q4_K, B Q4_K, C Q4_K
  const std::string file = tools::tensor_type_file(table, plan);
  EXPECT_EQ(file,
            "^blk\\.0\\.attn_q\\.weight$=q4_k\n"
            "^blk\\.0\\.ffn_down\\.weight$=q4_k\n"
            "^output\\.weight$=q4_k\n");
  // qlens quantize --tensor-type-file reads it back to the chosen types.
  const auto rules = tools::parse_tensor_type_rules(file, "plan.txt");
  ASSERT_EQ(rules.size(), table.tensors.size());
  for (size_t t = 0; t < rules.size(); ++t) {
    EXPECT_TRUE(std::regex_search(table.tensors[t].name, std::regex(rules[t].first)));
    EXPECT_EQ(type_from_name(rules[t].second), table.tensors[t].options[plan.choice[t]].type);
  }
  // llama-quantize reads whitespace-separated tokens, each REGEX=TYPE split at
  // the first '=' (there is no comment syntax): every token must be a rule.
  std::istringstream tokens(file);
  std::string token;
  size_t n_tokens = 0;
  while (tokens >> token) {
    ++n_tokens;
    EXPECT_NE(token[0], '#');
    EXPECT_EQ(token.find('='), token.rfind('=')) << token;
  }
  EXPECT_EQ(n_tokens, table.tensors.size());
  const std::string summary = tools::plan_summary(table, plan);
  EXPECT_TRUE(contains(summary, "hand-made")) << summary;
  EXPECT_TRUE(contains(summary, "195 bytes")) << summary;
}

TEST(Plan, PrintPlanSortsByLayerAndTotals) {
  const SensitivityTable table = three_tensor_problem();
  const Plan plan = tools::solve_plan(table, 210);  // A Q4_K, B Q4_K, C Q6_K
  std::ostringstream out;
  tools::print_plan(out, table, plan);
  const std::string text = out.str();
  // output.weight (layer -1) first, then layer 0 by name.
  EXPECT_LT(text.find("output.weight"), text.find("blk.0.attn_q.weight"));
  EXPECT_LT(text.find("blk.0.attn_q.weight"), text.find("blk.0.ffn_down.weight"));
  EXPECT_TRUE(contains(text, "size: 210 bytes")) << text;
  EXPECT_TRUE(contains(text, "100 of them fixed")) << text;
  EXPECT_TRUE(contains(text, "bits per weight: 1.6800")) << text;
  EXPECT_TRUE(contains(text, "predicted ΔKLD: 0.17 (sum over tensors)")) << text;
  EXPECT_TRUE(contains(text, "types: Q4_K x2 (0.00 MiB) Q6_K x1 (0.00 MiB)")) << text;
}

// ---- loading ----

const char* kSensitivityJson = R"({"schema_version": 1, "tool": "qlens sensitivity", "model": "m.gguf", "mode": "quant",
 "imatrix": null, "complete": true, "reference": {"n_tokens": 4032, "ppl": 4.97},
 "fixed_bytes": 1536, "n_weights_total": 8576,
 "tensors": [
  {"name": "blk.0.attn_q.weight", "role": "attn_q", "layer": 0, "n_elements": 4096, "shape": [64, 64],
   "source_type": "F32",
   "candidates": [
     {"type": "Q4_0", "bytes": 2304, "bpw": 4.5, "delta_kld": 0.0012, "delta_kld_error": 0.0001, "delta_ppl": 0.004, "measured": true},
     {"type": "Q8_0", "bytes": 4352, "bpw": 8.5, "delta_kld": 0.0001, "delta_kld_error": null, "delta_ppl": null, "measured": false},
     {"type": "Q6_K", "bytes": 3360, "bpw": 6.5625, "delta_kld": null, "delta_kld_error": null, "delta_ppl": null, "measured": false},
     {"type": "F32", "bytes": 16384, "bpw": 32, "delta_kld": 0, "delta_kld_error": 0, "delta_ppl": 0, "measured": true}]},
  {"name": "output.weight", "role": "output", "layer": -1, "n_elements": 4096, "shape": [64, 64],
   "source_type": "F32",
   "candidates": [
     {"type": "q4_k", "bytes": 2304, "bpw": 4.5, "delta_kld": 0.004, "measured": true},
     {"type": "Q8_0", "bytes": 4352, "bpw": 8.5, "delta_kld": 0.0003, "measured": true}]}]})";

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Plan, LoadsASensitivityFileAndSolves) {
  const std::string path = write_temp("sens.json", kSensitivityJson);
  const SensitivityTable table = tools::load_sensitivity_json(path);
  EXPECT_EQ(table.model, "m.gguf");
  EXPECT_EQ(table.fixed_bytes, 1536u);
  EXPECT_EQ(table.n_weights_total, 8576);
  ASSERT_EQ(table.tensors.size(), 2u);
  const PlanTensor& q = table.tensors[0];
  EXPECT_EQ(q.name, "blk.0.attn_q.weight");
  EXPECT_EQ(q.role, "attn_q");
  EXPECT_EQ(q.layer, 0);
  EXPECT_EQ(q.n_elements, 4096);
  ASSERT_EQ(q.options.size(), 3u);  // Q6_K skipped: its delta_kld is null
  EXPECT_EQ(q.options[2].type, DType::F32);
  EXPECT_EQ(table.tensors[1].options[0].type, DType::Q4_K);  // type names are case-insensitive
  EXPECT_EQ(table.tensors[1].layer, -1);
  ASSERT_EQ(table.notes.size(), 1u);
  EXPECT_TRUE(contains(table.notes[0], "blk.0.attn_q.weight: Q6_K skipped: delta_kld is null")) << table.notes[0];
  EXPECT_TRUE(contains(table.notes[0], "tensors[0].candidates[2].delta_kld")) << table.notes[0];

  // 4.5 bpw of 8576 weights = 4824 bytes: 1536 fixed + 2304 + 2304 = 6144 does not fit...
  EXPECT_TRUE(contains(error_of([&] { tools::solve_plan(table, tools::budget_from_bpw(table, 4.5)); }), "6144 bytes"));
  // ...8192 bytes let one tensor go to Q8_0: output.weight, whose ΔKLD drops more per byte.
  const Plan plan = tools::solve_plan(table, 8192);
  EXPECT_EQ(plan.total_bytes, 8192u);
  EXPECT_EQ(tools::tensor_type_file(table, plan), "^blk\\.0\\.attn_q\\.weight$=q4_0\n^output\\.weight$=q8_0\n");
  EXPECT_NEAR(plan.predicted_delta_kld, 0.0012 + 0.0003, 1e-15);
}

TEST(Plan, LoadErrorsNameTheFileAndPath) {
  const auto load_error = [](const std::string& text) {
    return error_of([&] { tools::parse_sensitivity_json(text, "s.json"); });
  };
  const auto with_candidate = [](const std::string& candidate) {
    return R"({"schema_version":1,"model":"m","fixed_bytes":0,"tensors":[{"name":"a.weight","n_elements":32,"candidates":[)" +
           candidate + "]}]}";
  };
  std::string e = load_error(with_candidate(R"({"type":"Q4_0","bytes":18,"delta_kld":0.1},{"type":"Q9_9","bytes":1,"delta_kld":0})"));
  EXPECT_EQ(e, "s.json: tensors[0].candidates[1].type: unknown type 'Q9_9'");
  e = load_error(with_candidate(R"({"type":"Q4_0","bytes":-18,"delta_kld":0.1})"));
  EXPECT_EQ(e, "s.json: tensors[0].candidates[0].bytes: bytes must be >= 0, found -18");
  e = load_error(with_candidate(R"({"type":"Q4_0","delta_kld":0.1})"));
  EXPECT_TRUE(contains(e, "s.json: tensors[0].candidates[0].bytes: missing")) << e;
  e = load_error(with_candidate(""));
  EXPECT_EQ(e, "s.json: tensors[0].candidates: tensor a.weight has no candidates");
  e = load_error(with_candidate(R"({"type":"Q4_0","bytes":18,"delta_kld":null})"));
  EXPECT_TRUE(contains(e, "tensor a.weight has no usable candidate")) << e;
  e = load_error(with_candidate(R"({"type":"Q4_0","bytes":18.5,"delta_kld":0.1})"));
  EXPECT_TRUE(contains(e, "tensors[0].candidates[0].bytes: expected an integer, found 18.5")) << e;
  e = load_error(R"({"schema_version":3,"fixed_bytes":0,"tensors":[]})");
  EXPECT_EQ(e, "s.json: schema_version: schema_version 3 of a qlens sensitivity table is not one this qlens reads "
               "(1 to 2; a newer qlens wrote it?)");
  e = load_error(R"({"schema_version":1,"fixed_bytes":0,"tensors":[]})");
  EXPECT_EQ(e, "s.json: tensors: no tensors to plan");
  e = load_error(R"({"schema_version":1,"fixed_bytes":0,"tensors":[
      {"name":"a","n_elements":1,"candidates":[{"type":"F32","bytes":4,"delta_kld":0}]},
      {"name":"a","n_elements":1,"candidates":[{"type":"F32","bytes":4,"delta_kld":0}]}]})");
  EXPECT_EQ(e, "s.json: tensors[1]: tensor a appears twice");
  e = load_error(R"({"schema_version":1,"fixed_bytes":0,"n_weights_total":1,"tensors":[
      {"name":"a","n_elements":32,"candidates":[{"type":"F32","bytes":128,"delta_kld":0}]}]})");
  EXPECT_TRUE(contains(e, "n_weights_total: 1 is less than the planned tensors' elements (32)")) << e;
  e = load_error(R"([1,2])");
  EXPECT_TRUE(contains(e, "expected a JSON object")) << e;
  e = load_error(R"({"schema_version":1,)");
  EXPECT_TRUE(contains(e, "s.json:1:21 (byte 20): expected a string key, found end of input")) << e;
  e = error_of([] { tools::load_sensitivity_json("/nonexistent/sens.json"); });
  EXPECT_TRUE(contains(e, "/nonexistent/sens.json")) << e;
}

TEST(Plan, IncompleteRunsAreNoted) {
  const SensitivityTable table = tools::parse_sensitivity_json(
      R"({"schema_version":1,"complete":false,"fixed_bytes":0,"tensors":[
      {"name":"a","n_elements":1,"candidates":[{"type":"F32","bytes":4,"delta_kld":0}]}]})",
      "s.json");
  EXPECT_FALSE(table.complete);
  ASSERT_EQ(table.notes.size(), 1u);
  EXPECT_TRUE(contains(table.notes[0], "interrupted"));
  EXPECT_EQ(table.n_weights_total, 1);  // no n_weights_total: the planned elements
}

// qlens plan --json: every tensor, the totals, the header, and the
// validation rows (null where unknown), as qlens report reads them.
TEST(Plan, JsonHasEveryTensorTheTotalsAndTheValidation) {
  const SensitivityTable table = three_tensor_problem();
  const Plan plan = tools::solve_plan(table, 200);
  tools::PlanJsonContext context;
  context.sensitivity_path = "sens.json";
  context.model_path = "m.gguf";
  context.tensor_type_file = "plan.txt";
  context.target_bits_per_weight = 1.6;
  context.types = {"Q4_K", "Q8_0"};
  std::vector<tools::ValidationRow> rows(2);
  rows[0].name = "plan";
  rows[0].bytes = 200;
  rows[0].bpw = 1.6;
  rows[0].predicted_kld = plan.predicted_delta_kld;
  rows[0].measured_kld = 0.25;
  rows[0].measured_kld_error = 0.01;
  rows[0].same_top = 0.9;
  rows[0].ppl = 4.5;
  rows[1].name = "Q4_K_M";
  rows[1].predicted_kld = std::numeric_limits<double>::quiet_NaN();  // a type not probed
  rows[0].path = "plan.gguf";
  const JsonValue doc = parse_json(tools::plan_json(table, plan, context, &rows), "plan.json");
  EXPECT_EQ(doc.at("tool").as_string(), "qlens plan");
  EXPECT_EQ(doc.at("schema_version").as_int(), 2);
  EXPECT_FALSE(doc.at("qlens_version").as_string().empty());
  EXPECT_EQ(doc.at("inputs").at("sensitivity").as_string(), "sens.json");
  EXPECT_TRUE(doc.at("inputs").at("imatrix").is_null());
  EXPECT_TRUE(doc.at("inputs").at("held_out_text").is_null());
  EXPECT_EQ(doc.at("settings").at("target_bits_per_weight").as_number(), 1.6);
  EXPECT_TRUE(doc.at("settings").at("target_size_bytes").is_null());
  EXPECT_EQ(doc.at("settings").at("types").at(1).as_string(), "Q8_0");
  EXPECT_EQ(doc.at("outputs").at("tensor_type_file").as_string(), "plan.txt");
  // Paths only under inputs and outputs (docs/JSON.md): the validation's models by mix.
  EXPECT_EQ(doc.at("outputs").at("validation_models").at("plan").as_string(), "plan.gguf");
  EXPECT_TRUE(doc.at("outputs").at("validation_models").at("Q4_K_M").is_null());
  EXPECT_EQ(doc.find("sensitivity_model"), nullptr);
  EXPECT_EQ(doc.at("validation").find("held_out_text"), nullptr);

  const JsonValue& totals = doc.at("totals");
  EXPECT_EQ(totals.at("bytes").as_int(), static_cast<int64_t>(plan.total_bytes));
  EXPECT_EQ(totals.at("budget_bytes").as_int(), 200);
  EXPECT_EQ(totals.at("fixed_bytes").as_int(), 100);
  EXPECT_DOUBLE_EQ(totals.at("bits_per_weight").as_number(), plan.bits_per_weight);
  EXPECT_DOUBLE_EQ(totals.at("predicted_kld").as_number(), plan.predicted_delta_kld);
  EXPECT_EQ(totals.at("n_tensors").as_int(), 3);

  const JsonValue& tensors = doc.at("tensors");
  ASSERT_EQ(tensors.size(), 3u);
  int64_t types_total = 0;
  for (size_t t = 0; t < 3; ++t) {
    const JsonValue& j = tensors.at(t);
    const PlanOption& o = table.tensors[t].options[plan.choice[t]];
    EXPECT_EQ(j.at("tensor").as_string(), table.tensors[t].name);
    EXPECT_EQ(j.at("role").as_string(), "role");
    EXPECT_EQ(j.at("type").as_string(), std::string(type_name(o.type)));
    EXPECT_EQ(j.at("bytes").as_int(), static_cast<int64_t>(o.bytes));
    EXPECT_DOUBLE_EQ(j.at("bits_per_weight").as_number(), 8.0 * static_cast<double>(o.bytes) / 64);
    EXPECT_DOUBLE_EQ(j.at("predicted_delta_kld").as_number(), o.delta_kld);
  }
  EXPECT_EQ(tensors.at(0).at("layer").as_int(), 0);
  EXPECT_TRUE(tensors.at(2).at("layer").is_null());  // output.weight: outside the blocks
  for (const JsonValue& t : doc.at("types").as_array()) types_total += t.at("tensors").as_int();
  EXPECT_EQ(types_total, 3);

  const JsonValue& v = doc.at("validation").at("rows");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v.at(0).at("mix").as_string(), "plan");
  EXPECT_EQ(v.at(0).find("path"), nullptr);
  EXPECT_DOUBLE_EQ(v.at(0).at("kld").at("value").as_number(), 0.25);
  EXPECT_DOUBLE_EQ(v.at(0).at("kld").at("error").as_number(), 0.01);
  EXPECT_DOUBLE_EQ(v.at(0).at("same_top").at("value").as_number(), 0.9);
  EXPECT_DOUBLE_EQ(v.at(0).at("ppl").at("value").as_number(), 4.5);
  EXPECT_TRUE(v.at(1).at("predicted_kld").is_null());

  const JsonValue plain = parse_json(tools::plan_json(table, plan, tools::PlanJsonContext{}, nullptr), "p.json");
  EXPECT_TRUE(plain.at("validation").is_null());
  EXPECT_TRUE(plain.at("settings").at("target_bits_per_weight").is_null());
  EXPECT_TRUE(plain.at("settings").at("types").is_null());
}

// --json is checked with the other outputs before any work: never an input,
// nor the tensor-type file.
TEST(Plan, JsonOutputIsCheckedBeforeAnyWork) {
  const std::string sens = write_temp("sens-for-json.json", kSensitivityJson);
  const std::string dir = test::temp_dir();
  std::string out;
  EXPECT_NE(test::run_command(std::string(QLENS_BINARY) + " plan --sensitivity " + sens + " --target-bpw 8 --json " + sens,
                              &out),
            0);
  EXPECT_TRUE(contains(out, "--json " + sens + " is the same file as the input --sensitivity")) << out;
  std::ofstream(dir + "/rules.txt") << "";
  EXPECT_NE(test::run_command(std::string(QLENS_BINARY) + " plan --sensitivity " + sens + " --target-bpw 8 -o " +
                                  dir + "/rules.txt --json " + dir + "/./rules.txt",
                              &out),
            0);
  EXPECT_TRUE(contains(out, "is the same file as the input -o")) << out;
  ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " plan --sensitivity " + sens + " --target-bpw 8 -o " + dir +
                                  "/p.txt --json " + dir + "/p.json",
                              &out),
            0)
      << out;
  const JsonValue doc = parse_json(read_text_file(dir + "/p.json"), "p.json");
  EXPECT_EQ(doc.at("tensors").size(), 2u);
  EXPECT_EQ(doc.at("outputs").at("tensor_type_file").as_string(), dir + "/p.txt");
}

TEST(Plan, RestrictedTypesKeepTheirOrderAndEveryTensorAnOption) {
  SensitivityTable table = three_tensor_problem();
  table.tensors.push_back(tensor("blk.1.attn_k.weight", 1, {}));  // no candidate at all
  tools::restrict_plan_types(table, {DType::Q8_0, DType::Q4_K, DType::Q2_K});
  const auto types = [&](size_t i) {
    std::vector<DType> t;
    for (const PlanOption& o : table.tensors[i].options) t.push_back(o.type);
    return t;
  };
  EXPECT_EQ(types(0), (std::vector<DType>{DType::Q2_K, DType::Q4_K, DType::Q8_0}));  // the table's order
  EXPECT_EQ(types(1), (std::vector<DType>{DType::Q2_K, DType::Q4_K, DType::Q8_0}));
  EXPECT_EQ(table.tensors[1].options[1].bytes, 40u);
  EXPECT_EQ(types(2), (std::vector<DType>{DType::Q4_K, DType::Q8_0}));
  EXPECT_TRUE(table.tensors[3].options.empty());
  // A tensor none of the types fits keeps its first option.
  tools::restrict_plan_types(table, {DType::IQ4_XS});
  EXPECT_EQ(types(0), (std::vector<DType>{DType::Q2_K}));
  EXPECT_EQ(types(2), (std::vector<DType>{DType::Q4_K}));
  EXPECT_EQ(table.tensors[2].options[0].delta_kld, 0.10);
}

// qlens curve's points: mixes by name, sizes in bits per weight or bytes;
// anything else is refused with what is accepted.
TEST(Curve, PointsAreMixesOrSizes) {
  const tools::CurvePoint mix = tools::parse_curve_point("IQ2_M");
  EXPECT_TRUE(mix.is_mix);
  const tools::CurvePoint bpw = tools::parse_curve_point("3.25bpw");
  EXPECT_FALSE(bpw.is_mix);
  EXPECT_EQ(bpw.target_bpw, 3.25);
  EXPECT_EQ(tools::parse_curve_point("250M").target_bytes, 250u << 20);
  EXPECT_EQ(tools::parse_curve_point("1.5G").target_bytes, uint64_t{3} << 29);
  EXPECT_EQ(tools::parse_curve_point("123456").target_bytes, 123456u);
  for (const char* bad : {"IQ2_QQ", "0bpw", "40bpw", "-3M", "3Q", ""}) {
    const std::string e = test::error_of([&] { tools::parse_curve_point(bad); });
    EXPECT_NE(e.find("is neither a mix"), std::string::npos) << bad << ": " << e;
  }
  // The default points are llama.cpp's mixes, every one known to qlens quantize.
  const std::vector<std::string> known = tools::mix_names();
  for (const std::string& m : tools::default_curve_mixes())
    EXPECT_NE(std::find(known.begin(), known.end(), m), known.end()) << m;
}

// The curve's JSON reads back as written (unknown values as null), and a
// file of another tool or a bad kind is refused naming the file.
TEST(Curve, JsonRoundTrips) {
  std::vector<tools::CurveRow> rows(2);
  rows[0].point = "IQ2_M";
  rows[0].kind = "plan";
  rows[0].budget_bytes = 1234567;
  rows[0].measured = true;
  rows[0].result.name = "plan";
  rows[0].result.path = "/w/curve-plan-IQ2_M.gguf";
  rows[0].result.bytes = 1200000;
  rows[0].result.bpw = 2.75;
  rows[0].result.predicted_kld = std::numeric_limits<double>::quiet_NaN();
  rows[0].result.measured_kld = 0.125;
  rows[0].result.measured_kld_error = 0.0025;
  rows[0].result.same_top = 0.8;
  rows[0].result.same_top_error = 0.01;
  rows[0].result.ppl = 21.5;
  rows[0].result.ppl_error = 0.5;
  rows[0].result.ppl_ratio = 1.0625;
  rows[1].point = "1bpw";
  rows[1].kind = "plan";
  rows[1].budget_bytes = 99;
  rows[1].note = "below the smallest plan";
  rows[1].result.measured_kld = std::numeric_limits<double>::quiet_NaN();
  tools::CurveJsonContext c;
  c.sensitivity_path = "s.json";
  c.n_ctx = 512;
  c.max_chunks = 10;
  c.complete = false;
  const std::string text = tools::curve_json(rows, c);
  const JsonValue doc = parse_json(text, "curve.json");
  EXPECT_EQ(doc.at("tool").as_string(), "qlens curve");
  EXPECT_FALSE(doc.at("complete").as_bool());
  EXPECT_TRUE(doc.at("rows").at(0).at("predicted_kld").is_null());
  EXPECT_TRUE(doc.at("rows").at(1).at("bytes").is_null());
  const std::vector<tools::CurveRow> back = tools::parse_curve_json(text, "curve.json");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].point, "IQ2_M");
  EXPECT_EQ(back[0].budget_bytes, 1234567u);
  EXPECT_EQ(back[0].result.bytes, 1200000u);
  EXPECT_EQ(back[0].result.measured_kld, 0.125);
  EXPECT_EQ(back[0].result.ppl_ratio, 1.0625);
  EXPECT_TRUE(std::isnan(back[0].result.predicted_kld));
  EXPECT_FALSE(back[1].measured);
  EXPECT_EQ(back[1].note, "below the smallest plan");
  EXPECT_TRUE(std::isnan(back[1].result.measured_kld));

  std::string bad = text;
  bad.replace(bad.find("\"kind\": \"plan\""), 16, "\"kind\": \"both\"");
  EXPECT_NE(test::error_of([&] { tools::parse_curve_json(bad, "c.json"); }).find("c.json"), std::string::npos);
}

}  // namespace
}  // namespace qlens
