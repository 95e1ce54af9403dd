// Perplexity's figures from its sums (llama.cpp's estimate), the chunks a
// run evaluates, and the --json document of qlens perplexity.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/json_reader.h"
#include "core/parallel.h"
#include "test_util.h"
#include "tools/common/chunks.h"
#include "tools/perplexity/perplexity.h"

namespace qlens {
namespace {

TEST(Perplexity, EstimateFromSumsByHand) {
  // NLLs 1, 2, 3: mean 2, population variance 2/3, standard error of the
  // mean sqrt(2/3 / 2); the perplexity's error is that times exp(2).
  const tools::PerplexityEstimate e = tools::perplexity_from_sums(6, 14, 3);
  EXPECT_DOUBLE_EQ(e.nll, 2);
  EXPECT_DOUBLE_EQ(e.ppl, std::exp(2.0));
  EXPECT_DOUBLE_EQ(e.ppl_error, std::sqrt(1.0 / 3) * std::exp(2.0));
  // One prediction, or equal ones: no spread, error 0.
  EXPECT_EQ(tools::perplexity_from_sums(0.5, 0.25, 1).ppl_error, 0);
  EXPECT_EQ(tools::perplexity_from_sums(1.5, 0.75, 3).ppl_error, 0);
  EXPECT_DOUBLE_EQ(tools::perplexity_from_sums(1.5, 0.75, 3).ppl, std::exp(0.5));
  // Nothing scored: no perplexity.
  const tools::PerplexityEstimate none = tools::perplexity_from_sums(0, 0, 0);
  EXPECT_TRUE(std::isnan(none.nll));
  EXPECT_TRUE(std::isnan(none.ppl));
  EXPECT_EQ(none.ppl_error, 0);
}

TEST(Perplexity, ChunksToRunAreCappedByTheText) {
  EXPECT_EQ(tools::chunks_to_run(10, -1), 10);
  EXPECT_EQ(tools::chunks_to_run(10, 4), 4);
  EXPECT_EQ(tools::chunks_to_run(3, 4), 3);
  EXPECT_EQ(tools::chunks_in_text(1000, 128, -1), 7);  // whole chunks only
  EXPECT_EQ(tools::chunks_in_text(1000, 128, 2), 2);
  EXPECT_EQ(tools::chunks_in_text(100, 128, -1), 0);
  EXPECT_EQ(tools::chunks_in_text(5, 0, -1), 5);  // no division by zero
}

TEST(Perplexity, JsonHasTheSettingsTheFiguresAndTheRunningEstimates) {
  tools::PerplexityResult r;
  r.n_tokens = 1000;
  r.n_chunks = 3;
  r.n_scored = 189;
  r.ppl = 4.5;
  r.ppl_error = 0.25;
  r.nll = std::log(4.5);
  r.running_ppl = {5.0, 4.75, 4.5};
  r.seconds = 2;
  r.tokens_per_second = 192;
  tools::PerplexityOptions opt;
  opt.n_ctx = 128;
  opt.n_batch = 64;
  const std::string text = tools::perplexity_json(r, opt, "m.gguf", "t.txt");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const JsonValue doc = parse_json(text, "ppl.json");
  EXPECT_EQ(doc.at("tool").as_string(), "qlens perplexity");
  EXPECT_EQ(doc.at("schema_version").as_int(), tools::kPerplexityJsonSchemaVersion);
  EXPECT_EQ(doc.at("inputs").at("model").as_string(), "m.gguf");
  EXPECT_EQ(doc.at("inputs").at("text").as_string(), "t.txt");
  const JsonValue& settings = doc.at("settings");
  EXPECT_EQ(settings.at("n_ctx").as_int(), 128);
  EXPECT_EQ(settings.at("n_batch").as_int(), 64);
  EXPECT_TRUE(settings.at("max_chunks").is_null());                    // all chunks
  EXPECT_EQ(settings.at("n_threads").as_int(), default_thread_count());  // 0: one per core
  EXPECT_EQ(settings.at("device").as_string(), "cpu");
  EXPECT_EQ(doc.at("n_chunks").as_int(), 3);
  EXPECT_EQ(doc.at("n_tokens_text").as_int(), 1000);
  EXPECT_EQ(doc.at("n_tokens_evaluated").as_int(), 3 * 128);
  EXPECT_EQ(doc.at("n_tokens_scored").as_int(), 189);
  EXPECT_EQ(doc.at("ppl").at("value").as_number(), 4.5);
  EXPECT_EQ(doc.at("ppl").at("error").as_number(), 0.25);
  EXPECT_DOUBLE_EQ(doc.at("mean_nll").as_number(), std::log(4.5));
  EXPECT_EQ(doc.at("seconds").as_number(), 2);
  EXPECT_EQ(doc.at("tokens_per_second").as_number(), 192);
  ASSERT_EQ(doc.at("running_ppl").size(), 3u);
  EXPECT_EQ(doc.at("running_ppl").at(1).as_number(), 4.75);

  opt.max_chunks = 3;
  opt.n_threads = 5;
  r.ppl = std::numeric_limits<double>::quiet_NaN();  // nothing scored
  const JsonValue doc2 = parse_json(tools::perplexity_json(r, opt, "m.gguf", ""), "ppl2.json");
  EXPECT_EQ(doc2.at("settings").at("max_chunks").as_int(), 3);
  EXPECT_EQ(doc2.at("settings").at("n_threads").as_int(), 5);
  EXPECT_TRUE(doc2.at("inputs").at("text").is_null());
  EXPECT_TRUE(doc2.at("ppl").at("value").is_null());
}

}  // namespace
}  // namespace qlens
