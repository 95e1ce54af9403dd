// The statistics and reports of `qlens compare`: logit statistics against
// values worked out by hand on three-token vocabularies, node metrics from
// hand-set sums, error growth on a synthetic graph, and the table, JSON and CSV
// outputs.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "qlens/error.h"
#include "test_util.h"
#include "tools/compare/compare.h"
#include "tools/compare/compare_logits.h"
#include "tools/compare/compare_report.h"

namespace qlens {
namespace {

using tools::LogitComparison;
using tools::LogitSummary;
using tools::NodeComparison;

constexpr double kInf = std::numeric_limits<double>::infinity();

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Logits whose softmax is exactly `probabilities` (they sum to 1).
std::vector<float> logits_of(const std::array<double, 3>& probabilities) {
  std::vector<float> logits;
  for (double p : probabilities) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// A node whose error sums give NMSE `nmse` (Σa² = 1).
NodeComparison node_with_nmse(const std::string& name, double nmse) {
  ErrorStats error;
  error.count = 10;
  error.sum_sq_a = 1.0;
  error.sum_sq_b = 1.0;
  error.sum_ab = 1.0 - nmse / 2;
  error.sum_sq_diff = nmse;
  return tools::make_node_comparison(name, NodeStats{}, NodeStats{}, error);
}

// ---- logits ----

TEST(CompareLogits, IdenticalLogitsShowNoDifference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  LogitComparison cmp;
  for (int t = 0; t < 50; ++t) {
    std::vector<float> logits(64);
    for (float& x : logits) x = normal(rng);
    cmp.add_token(logits, logits, t % 64);
  }
  const LogitSummary s = cmp.summary();
  EXPECT_EQ(s.n_tokens, 50);
  for (float kld : cmp.kld_values()) EXPECT_EQ(kld, 0.0f);
  EXPECT_EQ(s.kld_mean.value, 0.0);
  EXPECT_EQ(s.kld_mean.error, 0.0);
  EXPECT_EQ(s.kld_max, 0.0);
  EXPECT_EQ(s.kld_min, 0.0);
  EXPECT_EQ(s.kld_p99, 0.0);
  EXPECT_EQ(s.same_top.value, 1.0);
  EXPECT_EQ(s.same_top.error, 0.0);
  EXPECT_EQ(s.delta_p_mean.value, 0.0);
  EXPECT_EQ(s.delta_p_rms.value, 0.0);
  EXPECT_EQ(s.ln_ppl_ratio.value, 0.0);
  EXPECT_EQ(s.ln_ppl_ratio.error, 0.0);
  EXPECT_EQ(s.ppl_ratio.value, 1.0);
  EXPECT_EQ(s.ppl_ref.value, s.ppl_test.value);
  EXPECT_EQ(s.ppl_diff.value, 0.0);
}

// Three tokens over a vocabulary of three, each statistic computed here from
// its definition on the probabilities.
struct HandToken {
  std::array<double, 3> p_ref, p_test;
  int next;
};
const std::vector<HandToken> kHandTokens = {
    {{0.2, 0.3, 0.5}, {0.25, 0.25, 0.5}, 1},  // same top (2)
    {{0.6, 0.3, 0.1}, {0.3, 0.6, 0.1}, 0},    // top differs (0 vs 1)
    {{0.1, 0.1, 0.8}, {0.2, 0.1, 0.7}, 2},    // same top (2)
};

double hand_kld(const HandToken& t) {
  double kld = 0;
  for (int i = 0; i < 3; ++i) kld += t.p_ref[i] * std::log(t.p_ref[i] / t.p_test[i]);
  return kld;
}

TEST(CompareLogits, HandComputedThreeTokenExample) {
  LogitComparison cmp;
  for (const auto& t : kHandTokens) cmp.add_token(logits_of(t.p_ref), logits_of(t.p_test), t.next);
  const LogitSummary s = cmp.summary();
  constexpr double kTol = 1e-6;  // the logits are floats

  // KLD per token: 0.2 ln(0.2/0.25) + 0.3 ln(0.3/0.25); 0.3 ln 2; 0.1 ln 0.5 + 0.8 ln(8/7).
  const double kld0 = 0.2 * std::log(0.8) + 0.3 * std::log(1.2);
  const double kld1 = 0.3 * std::log(2.0);
  const double kld2 = 0.1 * std::log(0.5) + 0.8 * std::log(8.0 / 7.0);
  for (size_t i = 0; i < kHandTokens.size(); ++i) EXPECT_NEAR(cmp.kld_values()[i], hand_kld(kHandTokens[i]), kTol);
  EXPECT_NEAR(cmp.kld_values()[0], kld0, kTol);
  EXPECT_NEAR(cmp.kld_values()[1], kld1, kTol);
  EXPECT_NEAR(cmp.kld_values()[2], kld2, kTol);
  const double kld_mean = (kld0 + kld1 + kld2) / 3;
  const double kld_var = (kld0 * kld0 + kld1 * kld1 + kld2 * kld2) / 3 - kld_mean * kld_mean;
  EXPECT_NEAR(s.kld_mean.value, kld_mean, kTol);
  EXPECT_NEAR(s.kld_mean.error, std::sqrt(kld_var / 2), kTol);
  EXPECT_NEAR(s.kld_max, std::max({kld0, kld1, kld2}), kTol);
  EXPECT_NEAR(s.kld_min, std::min({kld0, kld1, kld2}), kTol);
  ASSERT_LT(kld0, kld2);  // ≈ 0.010 < 0.038 < 0.208: the median is kld2
  ASSERT_LT(kld2, kld1);
  EXPECT_NEAR(s.kld_median, kld2, kTol);

  EXPECT_NEAR(s.same_top.value, 2.0 / 3, 1e-12);
  EXPECT_NEAR(s.same_top.error, std::sqrt((2.0 / 3) * (1.0 / 3) / 2), 1e-12);

  // Δp = p_test(next) - p_ref(next): -0.05, -0.3, -0.1.
  const double dp[3] = {0.25 - 0.3, 0.3 - 0.6, 0.7 - 0.8};
  const double dp_mean = (dp[0] + dp[1] + dp[2]) / 3;
  const double dp_mean_sq = (dp[0] * dp[0] + dp[1] * dp[1] + dp[2] * dp[2]) / 3;
  EXPECT_NEAR(s.delta_p_mean.value, dp_mean, kTol);
  EXPECT_NEAR(s.delta_p_mean.error, std::sqrt((dp_mean_sq - dp_mean * dp_mean) / 2), kTol);
  EXPECT_NEAR(s.delta_p_rms.value, std::sqrt(dp_mean_sq), kTol);
  EXPECT_NEAR(s.delta_p_min, -0.3, kTol);
  EXPECT_NEAR(s.delta_p_max, -0.05, kTol);

  // nll = -ln p(next): ref 0.3, 0.6, 0.8; test 0.25, 0.3, 0.7.
  const double nll_ref[3] = {-std::log(0.3), -std::log(0.6), -std::log(0.8)};
  const double nll_test[3] = {-std::log(0.25), -std::log(0.3), -std::log(0.7)};
  const double mean_ref = (nll_ref[0] + nll_ref[1] + nll_ref[2]) / 3;
  const double mean_test = (nll_test[0] + nll_test[1] + nll_test[2]) / 3;
  const double var_ref = (nll_ref[0] * nll_ref[0] + nll_ref[1] * nll_ref[1] + nll_ref[2] * nll_ref[2]) / 3 -
                         mean_ref * mean_ref;
  EXPECT_NEAR(s.ppl_ref.value, std::exp(mean_ref), kTol);
  EXPECT_NEAR(s.ppl_ref.value, std::pow(0.3 * 0.6 * 0.8, -1.0 / 3), kTol);
  EXPECT_NEAR(s.ppl_ref.error, std::sqrt(var_ref / 2) * std::exp(mean_ref), kTol);
  EXPECT_NEAR(s.ppl_test.value, std::pow(0.25 * 0.3 * 0.7, -1.0 / 3), kTol);
  const double ln_ratio = (std::log(0.3 / 0.25) + std::log(0.6 / 0.3) + std::log(0.8 / 0.7)) / 3;
  EXPECT_NEAR(s.ln_ppl_ratio.value, ln_ratio, kTol);
  EXPECT_NEAR(s.ln_ppl_ratio.value, mean_test - mean_ref, kTol);
  EXPECT_NEAR(s.ppl_ratio.value, s.ppl_test.value / s.ppl_ref.value, kTol);
  EXPECT_NEAR(s.ppl_diff.value, s.ppl_test.value - s.ppl_ref.value, kTol);
}

TEST(CompareLogits, MergeEqualsOneRunOverAllTokens) {
  LogitComparison all, first, second;
  for (size_t i = 0; i < kHandTokens.size(); ++i) {
    const auto& t = kHandTokens[i];
    all.add_token(logits_of(t.p_ref), logits_of(t.p_test), t.next);
    (i < 1 ? first : second).add_token(logits_of(t.p_ref), logits_of(t.p_test), t.next);
  }
  first.merge(second);
  const LogitSummary a = all.summary(), b = first.summary();
  EXPECT_EQ(b.n_tokens, 3);
  EXPECT_EQ(first.kld_values(), all.kld_values());
  // Sums are added in another order: equal up to rounding.
  constexpr double kTol = 1e-12;
  EXPECT_NEAR(b.kld_mean.value, a.kld_mean.value, kTol);
  EXPECT_EQ(b.same_top.value, a.same_top.value);
  EXPECT_NEAR(b.delta_p_rms.value, a.delta_p_rms.value, kTol);
  EXPECT_EQ(b.delta_p_min, a.delta_p_min);
  EXPECT_NEAR(b.ln_ppl_ratio.error, a.ln_ppl_ratio.error, kTol);
  EXPECT_NEAR(b.ppl_diff.error, a.ppl_diff.error, kTol);
}

// The KL sum from the reference's exponentials (Σ p_i d_i - (lse_ref -
// lse_test)) against the definition term by term, on a vocabulary of 262k
// with large logits, and its edge cases: a -inf logit in both models adds
// nothing, one the reference gives weight and the test model not makes the
// KLD infinite, NaN or +inf logits are refused.
TEST(CompareLogits, KlDivergenceEqualsItsDefinition) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> ref(262144), test(262144);
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = 20 + normal(rng);
    test[i] = ref[i] + 0.3f * normal(rng);
  }
  auto definition = [](const std::vector<float>& r, const std::vector<float>& t) {
    const std::vector<double> lr = tools::log_softmax(r), lt = tools::log_softmax(t);
    double kld = 0;
    for (size_t i = 0; i < lr.size(); ++i)
      if (std::exp(lr[i]) > 0) kld += std::exp(lr[i]) * (lr[i] - lt[i]);
    return kld;
  };
  const double want = definition(ref, test);
  const LogitComparison::TokenStats got = LogitComparison::measure(ref, test, 5);
  EXPECT_NEAR(got.kld, want, 1e-12 + 1e-9 * want);
  EXPECT_NEAR(got.nll_ref, -tools::log_softmax(ref)[5], 1e-9);
  EXPECT_NEAR(got.nll_test, -tools::log_softmax(test)[5], 1e-9);

  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> r = {1, 2, -inf, 0}, t = {1.5f, 1, -inf, 0.5f};
  const std::vector<float> r3 = {1, 2, 0}, t3 = {1.5f, 1, 0.5f};
  EXPECT_NEAR(LogitComparison::measure(r, t, 0).kld, definition(r3, t3), 1e-12);
  t[1] = -inf;
  EXPECT_EQ(LogitComparison::measure(r, t, 0).kld, kInf);
  t[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(LogitComparison::measure(r, t, 0), Error);
  t[1] = inf;
  EXPECT_THROW(LogitComparison::measure(r, t, 0), Error);
  const std::vector<float> none = {-inf, -inf}, zeros = {0.0f, 0.0f};
  EXPECT_THROW(LogitComparison::measure(none, zeros, 0), Error);
}

TEST(CompareLogits, RejectsMismatchedVocabulariesAndTokens) {
  LogitComparison cmp;
  const std::vector<float> three = {0, 1, 2}, four = {0, 1, 2, 3};
  EXPECT_THROW(cmp.add_token(three, four, 0), Error);
  EXPECT_THROW(cmp.add_token(three, three, 3), Error);
  EXPECT_THROW(cmp.add_token(three, three, -1), Error);
  EXPECT_EQ(cmp.n_tokens(), 0);
  EXPECT_EQ(cmp.summary().n_tokens, 0);
  EXPECT_TRUE(std::isnan(cmp.summary().kld_mean.value));
}

TEST(CompareLogits, PercentilesInterpolateBetweenSortedValues) {
  std::vector<float> eleven;
  for (int i = 1; i <= 11; ++i) eleven.push_back(static_cast<float>(i));
  EXPECT_DOUBLE_EQ(tools::percentile_of_sorted(eleven, 0.5), 6.0);
  EXPECT_DOUBLE_EQ(tools::percentile_of_sorted(eleven, 0.1), 2.0);
  EXPECT_NEAR(tools::percentile_of_sorted(eleven, 0.99), 10.9, 1e-12);
  EXPECT_NEAR(tools::percentile_of_sorted(eleven, 0.999), 10.99, 1e-12);
  EXPECT_DOUBLE_EQ(tools::percentile_of_sorted(eleven, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(tools::percentile_of_sorted(eleven, 1.0), 11.0);
  EXPECT_DOUBLE_EQ(tools::percentile_of_sorted({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_TRUE(std::isnan(tools::percentile_of_sorted({}, 0.5)));
}

TEST(CompareLogits, SummaryPrintsLlamaCppLabels) {
  LogitComparison cmp;
  for (const auto& t : kHandTokens) cmp.add_token(logits_of(t.p_ref), logits_of(t.p_test), t.next);
  std::ostringstream out;
  tools::print_logit_summary(out, cmp.summary());
  for (const char* label : {"Mean    KLD", "99.0%   KLD", "Median  KLD", "Same top p", "RMS Δp",
                            "Mean ln(PPL(Q)/PPL(base))", "Mean PPL(Q)", "Mean PPL(base)"})
    EXPECT_TRUE(contains(out.str(), label)) << label << "\n" << out.str();
  EXPECT_TRUE(contains(out.str(), "66.667 ±")) << out.str();  // same top 2/3
}

// ---- node metrics ----

TEST(CompareNodes, SplitNodeName) {
  auto p = tools::split_node_name("ffn_out-12");
  EXPECT_EQ(p.layer, 12);
  EXPECT_EQ(p.kind, "ffn_out");
  p = tools::split_node_name("result_output");
  EXPECT_EQ(p.layer, -1);
  EXPECT_EQ(p.kind, "result_output");
  p = tools::split_node_name("kq_soft_max-0");
  EXPECT_EQ(p.layer, 0);
  EXPECT_EQ(p.kind, "kq_soft_max");
  p = tools::split_node_name("Qcur-0 (reshaped)");
  EXPECT_EQ(p.layer, -1);
  EXPECT_EQ(p.kind, "Qcur-0 (reshaped)");
  EXPECT_EQ(tools::split_node_name("trailing-").layer, -1);
  p = tools::split_node_name("Qcur-3#2");  // the second node named Qcur-3 (after rope)
  EXPECT_EQ(p.layer, 3);
  EXPECT_EQ(p.kind, "Qcur#2");
}

TEST(CompareNodes, MetricsFromHandSetSums) {
  ErrorStats e;
  e.count = 4;
  e.sum_sq_diff = 0.04;
  e.sum_sq_a = 4.0;
  e.sum_sq_b = 3.9;
  e.sum_ab = 3.9;
  e.max_abs_diff = 0.15;
  const NodeComparison n = tools::make_node_comparison("Qcur-3", NodeStats{}, NodeStats{}, e);
  EXPECT_EQ(n.layer, 3);
  EXPECT_EQ(n.kind, "Qcur");
  EXPECT_NEAR(n.rmse(), 0.1, 1e-12);             // sqrt(0.04 / 4)
  EXPECT_NEAR(n.nmse(), 0.01, 1e-12);            // 0.04 / 4
  EXPECT_NEAR(n.sqnr_db(), 20.0, 1e-9);          // 10 log10(4 / 0.04)
  EXPECT_NEAR(n.cosine(), 3.9 / std::sqrt(4.0 * 3.9), 1e-12);
  EXPECT_EQ(n.max_abs(), 0.15);
}

TEST(CompareNodes, EdgeCasesOfZeroSums) {
  NodeComparison exact;
  exact.error.count = 3;
  exact.error.sum_sq_a = exact.error.sum_sq_b = exact.error.sum_ab = 2.0;
  EXPECT_EQ(exact.nmse(), 0.0);
  EXPECT_EQ(exact.sqnr_db(), kInf);
  EXPECT_EQ(exact.rmse(), 0.0);
  EXPECT_DOUBLE_EQ(exact.cosine(), 1.0);

  NodeComparison all_zero;  // both models all zero
  EXPECT_EQ(all_zero.nmse(), 0.0);
  EXPECT_EQ(all_zero.cosine(), 1.0);
  EXPECT_EQ(all_zero.rmse(), 0.0);

  NodeComparison from_nothing;  // the reference is zero, the test is not
  from_nothing.error.count = 2;
  from_nothing.error.sum_sq_diff = from_nothing.error.sum_sq_b = 1.0;
  EXPECT_EQ(from_nothing.nmse(), kInf);
  EXPECT_EQ(from_nothing.sqnr_db(), -kInf);
  EXPECT_EQ(from_nothing.cosine(), 0.0);
}

TEST(CompareNodes, MeanAndStdOfEachModel) {
  NodeStats s;
  for (float x : {1.0f, 2.0f, 3.0f, 4.0f}) s.add(x);
  EXPECT_DOUBLE_EQ(tools::stats_mean(s), 2.5);
  EXPECT_DOUBLE_EQ(tools::stats_std(s), std::sqrt(1.25));  // population: Σ(x-2.5)²/4
  EXPECT_EQ(tools::stats_std(NodeStats{}), 0.0);
}

TEST(CompareNodes, TokenQuantilesComeFromTheRowHistogram) {
  NodeComparison n;
  for (int i = 0; i < 98; ++i) n.error.add_row(1e-4, 1.0);
  for (int i = 0; i < 2; ++i) n.error.add_row(0.5, 1.0);
  EXPECT_NEAR(n.token_nmse_median(), 1e-4, 1e-4 * 0.05);  // buckets are 2^(1/8) wide
  EXPECT_NEAR(n.token_nmse_p99(), 0.5, 0.5 * 0.05);
}

// ---- reports ----

// inp_embd, three layers of attn_norm / ffn_out / l_out, result_output.
std::vector<NodeComparison> synthetic_graph() {
  return {node_with_nmse("inp_embd", 1e-5),
          node_with_nmse("attn_norm-0", 2e-5), node_with_nmse("ffn_out-0", 4e-5), node_with_nmse("l_out-0", 5e-5),
          node_with_nmse("attn_norm-1", 6e-5), node_with_nmse("ffn_out-1", 6e-4), node_with_nmse("l_out-1", 2e-4),
          node_with_nmse("attn_norm-2", 3e-4), node_with_nmse("ffn_out-2", 2e-3), node_with_nmse("l_out-2", 1.5e-3),
          node_with_nmse("result_output", 5e-3)};
}

TEST(CompareReport, GrowthRatiosAndFirstCrossing) {
  const auto growth = tools::analyze_error_growth(synthetic_graph());
  ASSERT_EQ(growth.layers.size(), 3u);
  EXPECT_TRUE(std::isnan(growth.layers[0].l_out_ratio));
  EXPECT_NEAR(growth.layers[1].l_out_ratio, 2e-4 / 5e-5, 1e-9);
  EXPECT_NEAR(growth.layers[2].l_out_ratio, 1.5e-3 / 2e-4, 1e-9);
  EXPECT_EQ(growth.layers[0].jump_from, "attn_norm-0");
  EXPECT_EQ(growth.layers[0].jump_to, "ffn_out-0");
  EXPECT_NEAR(growth.layers[0].jump_ratio, 2.0, 1e-9);
  EXPECT_NEAR(growth.layers[1].jump_ratio, 10.0, 1e-9);
  EXPECT_EQ(growth.largest_jump_index, 1);
  EXPECT_EQ(growth.largest_l_out_index, 2);

  ASSERT_EQ(growth.first_exceeding.size(), 3u);
  EXPECT_EQ(growth.first_exceeding[0].node, "ffn_out-1");  // 1e-4
  EXPECT_EQ(growth.first_exceeding[1].node, "ffn_out-2");  // 1e-3
  EXPECT_EQ(growth.first_exceeding[1].layer, 2);
  EXPECT_EQ(growth.first_exceeding[2].node, "");           // 1e-2: never

  std::ostringstream out;
  tools::print_error_growth(out, growth);
  const std::string text = out.str();
  EXPECT_TRUE(contains(text, "error first exceeds 1e-3 at layer 2 (ffn_out-2)")) << text;
  EXPECT_TRUE(contains(text, "error first exceeds 1e-4 at layer 1 (ffn_out-1)")) << text;
  EXPECT_TRUE(contains(text, "error stays below 1e-2 at every node")) << text;
  EXPECT_TRUE(contains(text, "largest jump: layer 1, attn_norm → ffn_out (×10.0)")) << text;
  EXPECT_TRUE(contains(text, "grows most at layer 2 (×7.5 over layer 1)")) << text;
}

TEST(CompareReport, GrowthNamesNodesOutsideTheLayers) {
  const auto growth = tools::analyze_error_growth({node_with_nmse("inp_embd", 0.5), node_with_nmse("l_out-0", 0.6)},
                                                  {1e-3});
  std::ostringstream out;
  tools::print_error_growth(out, growth);
  EXPECT_TRUE(contains(out.str(), "error first exceeds 1e-3 at inp_embd (outside the layers)")) << out.str();
  EXPECT_EQ(tools::growth_ratio(0, 0), 1.0);
  EXPECT_EQ(tools::growth_ratio(0, 1e-6), kInf);
}

// Splits text into lines, dropping the trailing empty one.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(CompareReport, LayerTableHasALayerPerRowAndAKindPerColumn) {
  auto nodes = synthetic_graph();
  nodes.erase(nodes.begin() + 4);  // attn_norm-1: that cell shows "-"
  std::ostringstream out;
  tools::print_layer_table(out, nodes, tools::Metric::NMSE);
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 6u) << out.str();  // title, header, 3 layers, outside list
  std::istringstream header(lines[1]);
  std::vector<std::string> columns;
  for (std::string c; header >> c;) columns.push_back(c);
  EXPECT_EQ(columns, (std::vector<std::string>{"layer", "attn_norm", "ffn_out", "l_out"}));
  std::istringstream row1(lines[3]);
  std::vector<std::string> cells;
  for (std::string c; row1 >> c;) cells.push_back(c);
  EXPECT_EQ(cells, (std::vector<std::string>{"1", "-", "6.0e-4", "2.0e-4"}));
  EXPECT_TRUE(contains(lines[5], "inp_embd 1.0e-5")) << lines[5];
  EXPECT_TRUE(contains(lines[5], "result_output 5.0e-3")) << lines[5];

  std::ostringstream sqnr;
  tools::print_layer_table(sqnr, {node_with_nmse("ffn_out-0", 0.01)}, tools::Metric::SQNR);
  EXPECT_TRUE(contains(sqnr.str(), "20.0")) << sqnr.str();
}

TEST(CompareReport, TopWorstSortsByNmseThenName) {
  const std::vector<NodeComparison> nodes = {node_with_nmse("b-0", 1e-3), node_with_nmse("a-0", 1e-3),
                                             node_with_nmse("c-0", 1e-2), node_with_nmse("d-0", 1e-5)};
  const auto worst = tools::top_worst(nodes, 3);
  ASSERT_EQ(worst.size(), 3u);
  EXPECT_EQ(worst[0].name, "c-0");
  EXPECT_EQ(worst[1].name, "a-0");
  EXPECT_EQ(worst[2].name, "b-0");
  std::ostringstream out;
  tools::print_top_worst(out, worst);
  EXPECT_EQ(lines_of(out.str()).size(), 5u) << out.str();
  EXPECT_TRUE(contains(out.str(), "1.0e-2")) << out.str();
}

TEST(CompareReport, CompactScientific) {
  EXPECT_EQ(tools::compact_scientific(1.234e-5), "1.2e-5");
  EXPECT_EQ(tools::compact_scientific(1e-3, 0), "1e-3");
  EXPECT_EQ(tools::compact_scientific(250.0), "2.5e2");
  EXPECT_EQ(tools::compact_scientific(0.0), "0");
  EXPECT_EQ(tools::compact_scientific(kInf), "inf");
}

std::vector<NodeComparison> nodes_for_files() {
  auto nodes = synthetic_graph();
  NodeComparison exact;  // zero error: SQNR +inf, written as null
  exact.name = "Kcur-0";
  exact.layer = 0;
  exact.kind = "Kcur";
  exact.error.count = 4;
  exact.error.sum_sq_a = exact.error.sum_sq_b = exact.error.sum_ab = 1.0;
  nodes.push_back(exact);
  return nodes;
}

TEST(CompareReport, JsonParsesAndHasTheDocumentedKeys) {
  if (std::system("command -v python3 > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not found: JSON check skipped";
  const auto nodes = nodes_for_files();
  LogitComparison cmp;
  for (const auto& t : kHandTokens) cmp.add_token(logits_of(t.p_ref), logits_of(t.p_test), t.next);
  tools::CompareMeta meta{"ref.gguf", "test \"q4\".gguf", "wiki.txt", 512, 512, 1, 3};
  const std::string path = test::temp_dir() + "/compare.json";
  {
    std::ofstream file(path);
    tools::write_compare_json(file, meta, nodes, cmp.summary(), tools::analyze_error_growth(nodes));
  }
  // The script goes into a file: its quotes would need escaping on a command line.
  const std::string check =
      "import json,sys\n"
      "d=json.load(open(sys.argv[1]))\n"
      "assert d['schema_version']==2; assert d['inputs']['model']=='test \"q4\".gguf'; "
      "assert d['inputs']['ref']=='ref.gguf' and d['inputs']['text']=='wiki.txt'; assert 'meta' not in d; "
      "assert d['settings']['n_ctx']==512 and d['settings']['n_chunks']==1; assert d['n_tokens_evaluated']==3; "
      "l=d['logits']; assert l['n_tokens_scored']==3; "
      "assert all(k in l['kld'] for k in ['mean','max','p99_9','p99','p90','median','p10','p1','min']); "
      "assert set(l['kld']['mean'])=={'value','error'}; "
      "assert abs(l['same_top']['value']-2/3)<1e-9; "
      "assert all(k in l for k in ['delta_p_mean','delta_p_rms','ppl_ref','ppl_test','ln_ppl_ratio','ppl_ratio']); "
      "n=d['nodes']; assert len(n)==12; assert n[1]['node']=='attn_norm-0' and n[1]['layer']==0; "
      "assert all(x['layer'] is None for x in n if not x['node'][-1].isdigit()); "
      "assert all(k in n[0] for k in ['kind','rmse','nmse','sqnr_db','cosine','max_abs','token_nmse_median',"
      "'token_nmse_p99','count','non_finite','ref','test']); "
      "assert n[-1]['sqnr_db'] is None and n[-1]['nmse']==0; assert 'std' in n[0]['ref']; "
      "g=d['growth']; assert len(g['layers'])==3; assert g['largest_jump_layer']==1; "
      "assert g['first_exceeding'][1]['node']=='ffn_out-2'; assert g['first_exceeding'][2]['node'] is None";
  const std::string script = path + ".check.py";
  std::ofstream(script) << check << "\n";
  std::string output;
  const int rc = test::run_command("python3 " + script + " " + path, &output);
  EXPECT_EQ(rc, 0) << output;
}

TEST(CompareReport, CsvHasAHeaderAndOneLinePerNode) {
  const auto nodes = nodes_for_files();
  std::ostringstream out;
  tools::write_compare_csv(out, nodes);
  const auto lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), nodes.size() + 1);
  EXPECT_EQ(lines[0].rfind("node,layer,kind,count,non_finite,rmse,nmse,sqnr_db,cosine,max_abs", 0), 0u);
  const auto commas = [](const std::string& s) { return std::count(s.begin(), s.end(), ','); };
  for (const auto& line : lines) EXPECT_EQ(commas(line), commas(lines[0])) << line;
  EXPECT_EQ(lines[1].rfind("inp_embd,,inp_embd,10,0,", 0), 0u) << lines[1];  // no layer: an empty field
  EXPECT_TRUE(contains(lines.back(), ",0,inf,1,")) << lines.back();  // nmse 0, SQNR inf, cosine 1
}

tools::CompareResult result_for_files() {
  tools::CompareResult r;
  r.meta = {"ref.gguf", "test.gguf", "wiki.txt", 512, 256, 1, 3};
  r.nodes = nodes_for_files();
  LogitComparison cmp;
  for (const auto& t : kHandTokens) cmp.add_token(logits_of(t.p_ref), logits_of(t.p_test), t.next);
  r.logits = cmp.summary();
  r.growth = tools::analyze_error_growth(r.nodes);
  return r;
}

TEST(CompareReport, PrintedReportHasItsSectionsInOrder) {
  tools::CompareResult r = result_for_files();
  std::ostringstream out;
  tools::print_compare(out, r, tools::Metric::NMSE, 2);
  const std::string s = out.str();
  std::ostringstream logits, table, growth, worst;
  tools::print_logit_summary(logits, r.logits);
  tools::print_layer_table(table, r.nodes, tools::Metric::NMSE);
  tools::print_error_growth(growth, r.growth);
  tools::print_top_worst(worst, tools::top_worst(r.nodes, 2));
  EXPECT_EQ(s, "\n== Logits (3 tokens scored) ==\n" + logits.str() + "\n== NMSE by layer and node ==\n" + table.str() +
                   "\n== Where the error grows ==\n" + growth.str() + "\n== The 2 worst nodes ==\n" + worst.str());

  // SQNR cells, a router's agreement (MoE), no list of the worst.
  tools::RouterAgreement router;
  router.layer = 0;
  router.n_expert = 4;
  router.n_used = 2;
  router.add({0, 1}, {0, 2});
  r.routers.push_back(router);
  std::ostringstream out2;
  tools::print_compare(out2, r, tools::Metric::SQNR, 0);
  std::ostringstream sqnr_table, routers;
  tools::print_layer_table(sqnr_table, r.nodes, tools::Metric::SQNR);
  tools::print_router_agreement(routers, r.routers);
  EXPECT_EQ(out2.str(), "\n== Logits (3 tokens scored) ==\n" + logits.str() + "\n== SQNR (dB) by layer and node ==\n" +
                            sqnr_table.str() + "\n== Where the error grows ==\n" + growth.str() +
                            "\n== Expert routing against the reference ==\n" + routers.str());
}

TEST(CompareReport, JsonOfAResultAndOfALogitsFileComparison) {
  const tools::CompareResult r = result_for_files();
  std::ostringstream direct;
  tools::write_compare_json(direct, r.meta, r.nodes, r.logits, r.growth, r.routers);
  EXPECT_EQ(tools::compare_json(r), direct.str() + "\n");

  const std::string text = tools::compare_logits_file_json("base.kld", "q.gguf", 128, 3, r.logits);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const JsonValue doc = parse_json(text, "compare.json");
  EXPECT_EQ(doc.at("tool").as_string(), "qlens compare");
  EXPECT_EQ(doc.at("inputs").at("ref").as_string(), "base.kld");  // the reference is the file
  EXPECT_EQ(doc.at("inputs").at("model").as_string(), "q.gguf");
  EXPECT_TRUE(doc.at("inputs").at("text").is_null());  // its tokens, no text
  EXPECT_EQ(doc.at("settings").at("n_ctx").as_int(), 128);
  EXPECT_EQ(doc.at("settings").at("n_batch").as_int(), 128);
  EXPECT_EQ(doc.at("settings").at("n_chunks").as_int(), 3);
  EXPECT_EQ(doc.at("n_tokens_evaluated").as_int(), 3 * 128);
  EXPECT_EQ(doc.at("logits").at("n_tokens_scored").as_int(), 3);
  EXPECT_EQ(doc.at("nodes").size(), 0u);
  EXPECT_EQ(doc.at("growth").at("layers").size(), 0u);
  EXPECT_EQ(doc.at("routers").size(), 0u);
}

}  // namespace
}  // namespace qlens
