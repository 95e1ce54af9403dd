// Importance-matrix combining and statistics: figures checked against values
// worked out by hand, combining in memory and through both file formats, and
// the text and JSON reports.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "qlens/error.h"
#include "test_util.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/imatrix/imatrix_stats.h"

namespace qlens {
namespace {

using tools::Imatrix;
using tools::ImatrixEntry;
using tools::ImatrixStatistics;
using tools::ImatrixTensorStats;

// A dense entry whose per-column mean square is `mean_squares`, seen over `rows` rows.
ImatrixEntry dense_entry(const std::vector<double>& mean_squares, double rows = 1) {
  ImatrixEntry e;
  e.n_cols = static_cast<int64_t>(mean_squares.size());
  e.n_mat = 1;
  for (double v : mean_squares) e.sum2.push_back(v * rows);
  e.counts = {rows};
  return e;
}

const ImatrixTensorStats& find_tensor(const ImatrixStatistics& s, const std::string& name) {
  for (const auto& t : s.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no statistics for " + name);
}

ImatrixStatistics statistics_of_one(const std::vector<double>& mean_squares, double rows = 1) {
  Imatrix m;
  m.entries["blk.0.attn_q.weight"] = dense_entry(mean_squares, rows);
  return tools::compute_imatrix_statistics(m);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- statistics, one tensor ----

TEST(ImatrixStats, UniformColumnsSpreadImportanceEvenly) {
  const auto s = statistics_of_one(std::vector<double>(8, 3.0));
  ASSERT_EQ(s.tensors.size(), 1u);
  const auto& t = s.tensors[0];
  EXPECT_EQ(t.layer, 0);
  EXPECT_EQ(t.kind, "attn_q.weight");
  EXPECT_DOUBLE_EQ(t.sum, 24.0);
  EXPECT_DOUBLE_EQ(t.min, 3.0);
  EXPECT_DOUBLE_EQ(t.max, 3.0);
  EXPECT_DOUBLE_EQ(t.mean, 3.0);
  EXPECT_DOUBLE_EQ(t.std, 0.0);
  EXPECT_DOUBLE_EQ(t.active_fraction, 1.0);
  EXPECT_NEAR(t.entropy, 3.0, 1e-12);  // log2(8)
  EXPECT_NEAR(t.normalized_entropy, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(t.zscore_above_1_fraction, 0.0);
  EXPECT_TRUE(std::isnan(t.cosine_prev_layer));  // layer 0 has no previous layer
}

TEST(ImatrixStats, OneHotColumnHasZeroEntropy) {
  const auto s = statistics_of_one({0, 0, 5, 0});
  const auto& t = s.tensors.at(0);
  EXPECT_DOUBLE_EQ(t.entropy, 0.0);
  EXPECT_DOUBLE_EQ(t.normalized_entropy, 0.0);
  EXPECT_DOUBLE_EQ(t.min, 0.0);
  EXPECT_DOUBLE_EQ(t.max, 5.0);
  EXPECT_DOUBLE_EQ(t.active_fraction, 0.25);  // only the hot column is above 1e-5 x mean
}

TEST(ImatrixStats, KnownSmallVectorByHand) {
  // v = {1, 2, 3, 4, 10} over 2 rows (sum2 = 2 v): sum 20, mean 4,
  // deviations -3 -2 -1 0 6, variance 50 / 5 = 10, std sqrt(10) = 3.1623;
  // only the deviation 6 exceeds one std: 1 of 5 columns.
  // p = .05 .1 .15 .2 .5: H = 1.9232197 bits, H / log2(5) = 0.8282856.
  const auto s = statistics_of_one({1, 2, 3, 4, 10}, /*rows=*/2);
  const auto& t = s.tensors.at(0);
  EXPECT_DOUBLE_EQ(t.rows, 2.0);
  EXPECT_DOUBLE_EQ(t.sum, 20.0);
  EXPECT_DOUBLE_EQ(t.min, 1.0);
  EXPECT_DOUBLE_EQ(t.max, 10.0);
  EXPECT_DOUBLE_EQ(t.mean, 4.0);
  EXPECT_NEAR(t.std, std::sqrt(10.0), 1e-12);
  EXPECT_DOUBLE_EQ(t.zscore_above_1_fraction, 0.2);
  EXPECT_NEAR(t.entropy, 1.9232197, 1e-6);
  EXPECT_NEAR(t.normalized_entropy, 0.8282856, 1e-6);
  EXPECT_DOUBLE_EQ(t.active_fraction, 1.0);
}

TEST(ImatrixStats, TopColumnsLargestFirstTiesByIndex) {
  const auto s = statistics_of_one({1, 7, 3, 7, 10, 0, 2, 5, 4, 6, 8});
  const auto& top = s.tensors.at(0).top_columns;
  ASSERT_EQ(top.size(), tools::kImatrixTopColumns);
  const std::vector<int64_t> expected = {4, 10, 1, 3, 9, 7, 8, 2};  // 10, 8, 7 (col 1 before 3), 7, 6, 5, 4, 3
  for (size_t i = 0; i < top.size(); ++i) EXPECT_EQ(top[i].index, expected[i]) << i;
  EXPECT_DOUBLE_EQ(top[0].value, 10.0);
  EXPECT_EQ(statistics_of_one({2, 1}).tensors.at(0).top_columns.size(), 2u);  // fewer columns than kept
}

TEST(ImatrixStats, ActiveIsRelativeToTheMean) {
  // mean = (1 + 1 + 1e-9 + 0) / 4 ~ 0.5: 1e-9 and 0 fall below 1e-5 x mean.
  const auto s = statistics_of_one({1, 1, 1e-9, 0});
  EXPECT_DOUBLE_EQ(s.tensors.at(0).active_fraction, 0.5);
  // The same shape at a tiny scale counts the same columns active.
  const auto small = statistics_of_one({1e-8, 1e-8, 1e-17, 0});
  EXPECT_DOUBLE_EQ(small.tensors.at(0).active_fraction, 0.5);
}

TEST(ImatrixStats, TensorsWithoutRowsAreSkippedAndNamed) {
  Imatrix m;
  m.entries["blk.0.attn_k.weight"] = dense_entry({1, 2}, 0);
  m.entries["blk.0.attn_q.weight"] = dense_entry({1, 2});
  const auto s = tools::compute_imatrix_statistics(m);
  ASSERT_EQ(s.tensors.size(), 1u);
  EXPECT_EQ(s.tensors[0].name, "blk.0.attn_q.weight");
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_EQ(s.skipped[0], "blk.0.attn_k.weight");
}

TEST(ImatrixStats, ExpertsArePooled) {
  Imatrix m;
  ImatrixEntry& e = m.entries["blk.0.ffn_up_exps.weight"];
  e.n_cols = 2;
  e.n_mat = 3;
  e.sum2 = {4, 0, /*expert 1*/ 2, 6, /*expert 2, unused*/ 0, 0};
  e.counts = {1, 3, 0};
  const auto s = tools::compute_imatrix_statistics(m);
  const auto& t = s.tensors.at(0);
  EXPECT_EQ(t.n_mat, 3);
  EXPECT_EQ(t.unused_experts, 1);
  EXPECT_DOUBLE_EQ(t.rows, 4.0);
  EXPECT_DOUBLE_EQ(t.min, 1.5);  // (4 + 2) / 4
  EXPECT_DOUBLE_EQ(t.max, 1.5);  // (0 + 6) / 4
  EXPECT_NEAR(t.normalized_entropy, 1.0, 1e-12);

  std::ostringstream out;
  tools::print_imatrix_statistics(out, s);
  EXPECT_TRUE(contains(out.str(), "experts used")) << out.str();
  EXPECT_TRUE(contains(out.str(), "2/3")) << out.str();
  EXPECT_TRUE(contains(out.str(), "pooled")) << out.str();
}

TEST(ImatrixStats, InconsistentEntryIsAnError) {
  Imatrix m;
  ImatrixEntry e = dense_entry({1, 2, 3});
  e.sum2.pop_back();
  m.entries["blk.0.attn_q.weight"] = e;
  try {
    tools::compute_imatrix_statistics(m);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_TRUE(contains(err.what(), "blk.0.attn_q.weight")) << err.what();
  }
}

// ---- across layers ----

TEST(ImatrixStats, CosineWithThePreviousLayer) {
  Imatrix m;
  m.entries["blk.0.attn_q.weight"] = dense_entry({1, 2, 3});
  m.entries["blk.1.attn_q.weight"] = dense_entry({1, 2, 3});
  m.entries["blk.2.attn_q.weight"] = dense_entry({2, 4, 6}, 5);  // same direction, other scale
  m.entries["blk.0.ffn_up.weight"] = dense_entry({1, 0});
  m.entries["blk.1.ffn_up.weight"] = dense_entry({0, 1});        // orthogonal
  m.entries["blk.2.ffn_up.weight"] = dense_entry({0, 1, 0});     // other width: not comparable
  const auto s = tools::compute_imatrix_statistics(m);
  EXPECT_TRUE(std::isnan(find_tensor(s, "blk.0.attn_q.weight").cosine_prev_layer));
  EXPECT_NEAR(find_tensor(s, "blk.1.attn_q.weight").cosine_prev_layer, 1.0, 1e-12);
  EXPECT_NEAR(find_tensor(s, "blk.2.attn_q.weight").cosine_prev_layer, 1.0, 1e-12);
  EXPECT_NEAR(find_tensor(s, "blk.1.ffn_up.weight").cosine_prev_layer, 0.0, 1e-12);
  EXPECT_TRUE(std::isnan(find_tensor(s, "blk.2.ffn_up.weight").cosine_prev_layer));

  ASSERT_EQ(s.layers.size(), 3u);
  EXPECT_TRUE(std::isnan(s.layers[0].mean_cosine_prev_layer));
  EXPECT_NEAR(s.layers[1].mean_cosine_prev_layer, 0.5, 1e-12);  // (1 + 0) / 2
  EXPECT_NEAR(s.layers[2].mean_cosine_prev_layer, 1.0, 1e-12);  // the NaN is left out
}

TEST(ImatrixStats, LayersInNumericOrderThenOtherTensors) {
  Imatrix m;
  m.entries["token_embd.weight"] = dense_entry({1, 1});
  m.entries["output.weight"] = dense_entry({1, 1});
  m.entries["blk.10.ffn_down.weight"] = dense_entry({1, 1});
  m.entries["blk.2.ffn_up.weight"] = dense_entry({1, 1});
  m.entries["blk.2.attn_q.weight"] = dense_entry({0, 4});  // one hot: norm.H 0, z 0
  m.entries["blk.9x.weird"] = dense_entry({1, 1});         // not a block name
  const auto s = tools::compute_imatrix_statistics(m);
  std::vector<std::string> names;
  for (const auto& t : s.tensors) names.push_back(t.name);
  const std::vector<std::string> expected = {"blk.2.attn_q.weight", "blk.2.ffn_up.weight", "blk.10.ffn_down.weight",
                                             "blk.9x.weird", "output.weight", "token_embd.weight"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(find_tensor(s, "output.weight").layer, -1);
  EXPECT_EQ(find_tensor(s, "output.weight").kind, "output.weight");

  ASSERT_EQ(s.layers.size(), 2u);
  EXPECT_EQ(s.layers[0].layer, 2);
  EXPECT_EQ(s.layers[0].n_tensors, 2);
  EXPECT_NEAR(s.layers[0].mean_normalized_entropy, 0.5, 1e-12);  // (0 + 1) / 2
  EXPECT_DOUBLE_EQ(s.layers[0].sum, 6.0);                        // 4 + 2
  EXPECT_EQ(s.layers[1].layer, 10);
  EXPECT_EQ(s.layers[1].n_tensors, 1);
}

// ---- combining ----

TEST(ImatrixCombine, SumsKeepsOneSidedAndUnitesMetadata) {
  Imatrix a;
  a.path = "a.gguf";
  a.datasets = {"wiki", "code"};
  a.chunk_count = 3;
  a.chunk_size = 0;
  a.entries["blk.0.attn_q.weight"] = dense_entry({1, 2}, 2);  // sum2 {2, 4}
  a.entries["only_a.weight"] = dense_entry({7}, 1);
  Imatrix b;
  b.path = "b.gguf";
  b.datasets = {"code", "chat"};
  b.chunk_count = 4;
  b.chunk_size = 512;
  b.entries["blk.0.attn_q.weight"] = dense_entry({3, 5}, 1);  // sum2 {3, 5}
  b.entries["only_b.weight"] = dense_entry({9, 9}, 3);

  tools::combine_imatrix(a, b);
  EXPECT_EQ(a.path, "a.gguf");
  const ImatrixEntry& q = a.entries.at("blk.0.attn_q.weight");
  EXPECT_EQ(q.sum2, (std::vector<double>{5, 9}));
  EXPECT_EQ(q.counts, (std::vector<double>{3}));
  EXPECT_EQ(a.entries.at("only_a.weight").sum2, (std::vector<double>{7}));
  EXPECT_EQ(a.entries.at("only_b.weight").sum2, (std::vector<double>{27, 27}));
  EXPECT_EQ(a.entries.at("only_b.weight").counts, (std::vector<double>{3}));
  EXPECT_EQ(a.datasets, (std::vector<std::string>{"wiki", "code", "chat"}));
  EXPECT_EQ(a.chunk_count, 7);
  EXPECT_EQ(a.chunk_size, 512);  // 0 (unknown) takes the other's
}

TEST(ImatrixCombine, DifferentColumnCountsNameTheTensorAndFiles) {
  Imatrix a;
  a.path = "model-a.imatrix";
  a.entries["blk.3.ffn_down.weight"] = dense_entry({1, 2, 3, 4});
  Imatrix b;
  b.path = "model-b.imatrix";
  b.entries["blk.3.ffn_down.weight"] = dense_entry({1, 2});
  b.entries["blk.0.new.weight"] = dense_entry({1});
  try {
    tools::combine_imatrix(a, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "blk.3.ffn_down.weight")) << msg;
    EXPECT_TRUE(contains(msg, "4 columns")) << msg;
    EXPECT_TRUE(contains(msg, "2 columns")) << msg;
    EXPECT_TRUE(contains(msg, "model-a.imatrix")) << msg;
    EXPECT_TRUE(contains(msg, "model-b.imatrix")) << msg;
  }
  EXPECT_EQ(a.entries.size(), 1u);  // a failed combine changes nothing
}

TEST(ImatrixCombine, DifferentExpertCountsAreAnError) {
  Imatrix a, b;
  a.entries["blk.0.ffn_up_exps.weight"] = dense_entry({1, 2});
  ImatrixEntry& e = b.entries["blk.0.ffn_up_exps.weight"];
  e.n_cols = 2;
  e.n_mat = 2;
  e.sum2 = {1, 2, 3, 4};
  e.counts = {1, 1};
  EXPECT_THROW(tools::combine_imatrix(a, b), Error);
}

TEST(ImatrixCombine, DifferentChunkSizesAreAnError) {
  Imatrix a, b;
  a.path = "a.gguf";
  a.chunk_size = 512;
  a.chunk_count = 1;
  a.entries["x.weight"] = dense_entry({1});
  b.path = "b.gguf";
  b.chunk_size = 256;
  b.entries["x.weight"] = dense_entry({1});
  try {
    tools::combine_imatrix(a, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "512") && contains(msg, "256")) << msg;
    EXPECT_TRUE(contains(msg, "a.gguf") && contains(msg, "b.gguf")) << msg;
  }
  EXPECT_EQ(a.chunk_count, 1);
  EXPECT_EQ(a.entries.at("x.weight").counts, (std::vector<double>{1}));
}

TEST(ImatrixCombine, FilesInBothFormatsRoundTrip) {
  const std::string dir = test::temp_dir();  // removed when the test program exits
  Imatrix a;
  a.datasets = {"wiki.train.raw"};
  a.chunk_count = 10;
  a.chunk_size = 512;
  a.entries["blk.0.attn_q.weight"] = dense_entry({1, 2, 3}, 2048);
  a.entries["output.weight"] = dense_entry({0.5, 0.25}, 2);
  Imatrix b;
  b.datasets = {"code.txt"};
  b.chunk_count = 5;
  b.chunk_size = 512;  // written to the .dat as ncall = rows / 512, which it does not record
  b.entries["blk.0.attn_q.weight"] = dense_entry({3, 2, 1}, 2048);
  b.entries["blk.1.attn_q.weight"] = dense_entry({1, 1, 1}, 1024);
  tools::save_imatrix_gguf(a, dir + "/a.gguf");
  tools::save_imatrix_dat(b, dir + "/b.dat");

  // The .dat counts chunks; combined with a GGUF (rows) it is converted with
  // the GGUF's chunk size: counts = ncall * 512.
  const Imatrix c = tools::combine_imatrix_files({dir + "/a.gguf", dir + "/b.dat"});
  EXPECT_EQ(c.path, dir + "/a.gguf + " + dir + "/b.dat");
  EXPECT_EQ(c.datasets, (std::vector<std::string>{"wiki.train.raw", "code.txt"}));
  EXPECT_EQ(c.chunk_count, 15);
  EXPECT_EQ(c.chunk_size, 512);
  EXPECT_FALSE(c.counts_in_chunks);
  ASSERT_EQ(c.entries.size(), 3u);
  const ImatrixEntry& q = c.entries.at("blk.0.attn_q.weight");
  EXPECT_EQ(q.counts, (std::vector<double>{4096}));
  EXPECT_EQ(q.sum2, (std::vector<double>{8192, 8192, 8192}));  // 2048 * {1,2,3} + 2048 * {3,2,1}
  const auto w = c.importance("blk.0.attn_q.weight", 3);
  for (float x : w) EXPECT_FLOAT_EQ(x, 2.0f);
  EXPECT_EQ(c.entries.at("blk.1.attn_q.weight").counts, (std::vector<double>{1024}));
  EXPECT_EQ(c.entries.at("output.weight").sum2, (std::vector<double>{1.0, 0.5}));

  // The combined matrix saves and loads back unchanged.
  tools::save_imatrix_gguf(c, dir + "/c.gguf");
  const Imatrix back = tools::load_imatrix(dir + "/c.gguf");
  EXPECT_EQ(back.entries.at("blk.0.attn_q.weight").sum2, q.sum2);
  EXPECT_EQ(back.chunk_count, 15);
  EXPECT_EQ(back.datasets, c.datasets);
}

TEST(ImatrixCombine, EmptyListOrMissingFileIsAnError) {
  EXPECT_THROW(tools::combine_imatrix_files({}), Error);
  EXPECT_THROW(tools::combine_imatrix_files({test::temp_dir() + "/absent.gguf"}), Error);
}

// ---- reports ----

Imatrix two_layer_imatrix() {
  Imatrix m;
  m.path = "two-layers.gguf";
  m.datasets = {"wiki.train.raw"};
  m.chunk_count = 12;
  m.chunk_size = 512;
  m.entries["blk.0.attn_q.weight"] = dense_entry({1, 2, 3, 4, 10});
  m.entries["blk.1.attn_q.weight"] = dense_entry({1, 2, 3, 4, 10});
  m.entries["blk.1.ffn_down.weight"] = dense_entry({0, 0, 5});
  m.entries["output.weight"] = dense_entry({1, 1, 1, 1, 1});
  m.entries["blk.1.attn_k.weight"] = dense_entry({1, 1}, 0);
  return m;
}

TEST(ImatrixReport, TextHasAlignedTablesAndALegend) {
  std::ostringstream out;
  tools::print_imatrix_statistics(out, tools::compute_imatrix_statistics(two_layer_imatrix()));
  const std::string text = out.str();
  EXPECT_TRUE(contains(text, "two-layers.gguf")) << text;
  EXPECT_TRUE(contains(text, "wiki.train.raw")) << text;
  EXPECT_TRUE(contains(text, "ffn_down.weight")) << text;
  EXPECT_TRUE(contains(text, "How to read these tables")) << text;
  EXPECT_TRUE(contains(text, "a few input columns dominate")) << text;
  EXPECT_TRUE(contains(text, "this layer sees inputs like the previous one")) << text;
  EXPECT_TRUE(contains(text, "blk.1.attn_k.weight")) << text;  // listed as skipped

  // The tensor table: header and its rows end in the same column.
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line) && !contains(line, "sum(act^2)")) {
  }
  const size_t header_width = line.size();
  int rows = 0;
  while (std::getline(lines, line) && !line.empty()) {
    EXPECT_EQ(line.size(), header_width) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 4);
}

TEST(ImatrixReport, JsonHasTheFiguresAndNullForMissingValues) {
  std::ostringstream out;
  tools::write_imatrix_statistics_json(out, tools::compute_imatrix_statistics(two_layer_imatrix()));
  const std::string json = out.str();
  for (const char* key : {"\"schema_version\": 2", "\"imatrix\": ", "\"datasets\"", "\"chunk_count\": 12", "\"chunk_size\": 512", "\"tensors\"",
                          "\"layers\"", "\"skipped_tensors\"", "\"normalized_entropy\"", "\"zscore_above_1_fraction\"",
                          "\"cosine_prev_layer\": null", "\"cosine_prev_layer\": 1", "\"mean_cosine_prev_layer\"",
                          "\"sum_act2\": 20", "\"layer\": null", "\"blk.1.attn_k.weight\"", "\"top_columns\"",
                          "\"column\": 0", "\"tensor\": \"blk.1.attn_q.weight\"", "\"role\": \"attn_q\""})
    EXPECT_TRUE(contains(json, key)) << key << "\n" << json;
  // Schema 1's names are gone (docs/JSON.md).
  for (const char* key : {"\"file\"", "\"name\"", "\"kind\""}) EXPECT_FALSE(contains(json, key)) << key;
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.substr(json.size() - 2), "}\n");
}

}  // namespace
}  // namespace qlens
