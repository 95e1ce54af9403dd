// qlens report: pages built from the JSON of real runs on stories260K
// (imatrix statistics, sensitivity, plan --validate, compare, perplexity, run
// through the CLI once for the suite), checked for their sections, charts and
// values; errors that name the file and field; never overwriting an input;
// and the HTML/SVG building blocks on their own. The page in a real browser:
// tests/report_browser_check.py (ctest ReportBrowser.*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "test_util.h"
#include "tools/report/report.h"
#include "tools/report/report_html.h"

namespace qlens {
namespace {

namespace html = tools::html;

using test::contains;

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

using test::error_of;

int qlens_cli(const std::string& args, std::string* out) {
  return test::run_command(std::string(QLENS_BINARY) + " " + args, out);
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

tools::ReportOptions fixed_date() {
  tools::ReportOptions o;
  o.generated_at = "2026-12-02 12:00 UTC";
  return o;
}

// The JSON files of one small real run, made once for the suite.
class ReportOfARun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = test::shared_path("models/stories260K.gguf");
    const std::string text = test::shared_path("data/tinystories/tinystories_val.txt");
    if (model_.empty() || text.empty()) return;
    dir_ = test::temp_dir();
    const std::string all = read_text_file(text);
    const size_t cut = all.find('\n', all.size() / 2) + 1;
    write_file_atomic(dir_ + "/calibration.txt", all.substr(0, cut));
    write_file_atomic(dir_ + "/held-out.txt", all.substr(cut));
    const std::string d = dir_ + "/";
    const std::vector<std::string> steps = {
        "imatrix -m " + model_ + " -f " + d + "calibration.txt -c 128 -b 128 --chunks 8 -t 2 --no-ppl -o " + d +
            "im.gguf",
        "imatrix --in-file " + d + "im.gguf --show-statistics --json " + d + "imatrix-stats.json",
        "sensitivity -m " + model_ + " -f " + d + "calibration.txt -c 128 --chunks 1 -t 2 --types Q4_0,Q8_0 --imatrix " +
            d + "im.gguf --json " + d + "sensitivity.json --top 0",
        "plan --sensitivity " + d + "sensitivity.json --target-bpw 12 -o " + d + "plan.txt --json " + d +
            "plan.json --validate -f " + d + "held-out.txt -c 128 --chunks 4 -t 2 --imatrix " + d + "im.gguf --work-dir " +
            dir_,
        "plan --sensitivity " + d + "sensitivity.json --target-bpw 12 -o " + d + "plan-only.txt --json " + d +
            "plan-only.json",
        "compare --ref " + model_ + " -m " + d + "validate-plan.gguf -f " + d + "held-out.txt -c 128 --chunks 4 -t 2 " +
            "--top 0 --json " + d + "compare.json",
        "perplexity -m " + model_ + " -f " + d + "held-out.txt -c 128 --chunks 4 -t 2 --json " + d + "ppl-f32.json",
        "perplexity -m " + d + "validate-plan.gguf -f " + d + "held-out.txt -c 128 --chunks 4 -t 2 --json " + d +
            "ppl-plan.json",
        // The curve's table has F16 too: the ffn rows of 172 fit no block
        // type, and llama.cpp's mixes keep them F16. Two mixes, a size
        // between them and one below any plan; then again with --resume
        // (nothing measured twice) and one more point.
        "sensitivity -m " + model_ + " -f " + d + "calibration.txt -c 128 --chunks 1 -t 2 --types Q4_0,Q8_0,F16 " +
            "--imatrix " + d + "im.gguf --json " + d + "sensitivity-f16.json --top 0",
        "curve --sensitivity " + d + "sensitivity-f16.json -f " + d + "held-out.txt -c 128 --chunks 2 -t 2 --imatrix " +
            d + "im.gguf --points Q8_0,Q4_0,8bpw,1bpw --json " + d + "curve.json --work-dir " + dir_,
        "curve --sensitivity " + d + "sensitivity-f16.json -f " + d + "held-out.txt -c 128 --chunks 2 -t 2 --imatrix " +
            d + "im.gguf --points Q8_0,Q4_0,8bpw,1bpw,Q5_0 --json " + d + "curve-more.json --work-dir " + dir_,
    };
    for (const std::string& step : steps) {
      std::string out;
      if (step.find("curve-more.json") != std::string::npos) {
        std::filesystem::copy_file(d + "curve.json", d + "curve-more.json");
        std::string resumed;
        if (qlens_cli(step + " --resume", &resumed) != 0) {
          failure_ = "qlens " + step + " --resume\n" + resumed;
          return;
        }
        resume_log_ = resumed;
        continue;
      }
      if (qlens_cli(step, &out) != 0) {
        failure_ = "qlens " + step + "\n" + out;
        return;
      }
    }
    ok_ = true;
  }
  void SetUp() override {
    if (model_.empty()) GTEST_SKIP() << "needs ../shared/models/stories260K.gguf and tinystories_val.txt";
    ASSERT_TRUE(ok_) << "the run behind the report failed: " << failure_;
  }
  static std::string path(const std::string& name) { return dir_ + "/" + name; }
  static JsonValue json(const std::string& name) { return parse_json(read_text_file(path(name)), name); }
  static tools::ReportInputs all_inputs() {
    tools::ReportInputs in;
    in.compare = path("compare.json");
    in.sensitivity = path("sensitivity.json");
    in.plan = path("plan.json");
    in.imatrix_stats = path("imatrix-stats.json");
    in.perplexity = {path("ppl-f32.json"), path("ppl-plan.json")};
    return in;
  }

  static std::string model_, dir_, failure_, resume_log_;
  static bool ok_;
};
std::string ReportOfARun::model_, ReportOfARun::dir_, ReportOfARun::failure_, ReportOfARun::resume_log_;
bool ReportOfARun::ok_ = false;

TEST_F(ReportOfARun, CompareSectionDrawsTheDepthTheGrowthAndTheKld) {
  tools::ReportInputs in;
  in.compare = path("compare.json");
  const std::string page = tools::build_report_html(in, fixed_date());
  EXPECT_TRUE(contains(page, "data-section=\"compare\"")) << page.substr(0, 2000);
  EXPECT_FALSE(contains(page, "data-section=\"sensitivity\""));
  for (const char* chart : {"compare-error-depth", "compare-l-out-growth", "compare-kld-percentiles"})
    EXPECT_TRUE(contains(page, std::string("data-chart=\"") + chart + "\"")) << chart;
  EXPECT_TRUE(contains(page, "data-table=\"compare-worst-nodes\""));

  const JsonValue doc = json("compare.json");
  // One line per node kind inside the layers, and every compared node is a hover point.
  for (const JsonValue& n : doc.at("nodes").as_array())
    if (!n.at("layer").is_null()) {
      EXPECT_TRUE(contains(page, "data-series=\"" + html::escape(n.at("kind").as_string()) + "\"")) << n.at("kind").as_string();
      EXPECT_TRUE(contains(page, "<title>" + html::escape(n.at("node").as_string()) + ": NMSE ")) << n.at("node").as_string();
    }
  // The figures of the file, as the page formats them.
  const JsonValue& logits = doc.at("logits");
  EXPECT_TRUE(contains(page, html::format_number(logits.at("kld").at("mean").at("value").as_number()) + " ± ")) << "mean KLD";
  EXPECT_TRUE(contains(page, html::format_number(logits.at("kld").at("p99").as_number())));
  EXPECT_TRUE(contains(page, html::format_percent(logits.at("same_top").at("value").as_number())));
  // The worst node by NMSE heads its table.
  std::string worst;
  double worst_nmse = -1;
  for (const JsonValue& n : doc.at("nodes").as_array())
    if (n.at("nmse").as_number() > worst_nmse) {
      worst_nmse = n.at("nmse").as_number();
      worst = n.at("node").as_string();
    }
  const size_t table = page.find("data-table=\"compare-worst-nodes\"");
  ASSERT_NE(table, std::string::npos);
  EXPECT_TRUE(contains(page.substr(table, 1200), "<td>" + html::escape(worst) + "</td>")) << worst;
  for (const JsonValue& l : doc.at("growth").at("layers").as_array())
    EXPECT_TRUE(contains(page, "<title>l_out-" + std::to_string(l.at("layer").as_int()) + ": NMSE "));
  EXPECT_EQ(count_of(page, "How to read this:"), 3u);

  tools::ReportOptions sqnr = fixed_date();
  sqnr.metric = tools::Metric::SQNR;
  EXPECT_TRUE(contains(tools::build_report_html(in, sqnr), "SQNR (dB)"));
}

TEST_F(ReportOfARun, SensitivityHasAHeatmapPerProbedTypeAndTheTopTensors) {
  tools::ReportInputs in;
  in.sensitivity = path("sensitivity.json");
  const std::string page = tools::build_report_html(in, fixed_date());
  EXPECT_TRUE(contains(page, "data-section=\"sensitivity\""));
  EXPECT_TRUE(contains(page, "data-chart=\"sensitivity-heatmap-Q4_0\""));
  EXPECT_TRUE(contains(page, "data-chart=\"sensitivity-heatmap-Q8_0\""));
  EXPECT_FALSE(contains(page, "data-chart=\"sensitivity-heatmap-F32\"")) << "the source type is not a probe";
  EXPECT_TRUE(contains(page, "ΔKLD (nats, log scale)"));
  EXPECT_TRUE(contains(page, "data-table=\"sensitivity-top-tensors\""));
  EXPECT_TRUE(contains(page, "(no layer)"));  // token_embd and output

  // Every probed (tensor, type) is a cell whose hover gives its ΔKLD.
  const JsonValue doc = json("sensitivity.json");
  std::string most_sensitive;
  double largest = -1;
  for (const JsonValue& t : doc.at("tensors").as_array())
    for (const JsonValue& c : t.at("candidates").as_array()) {
      if (c.at("type").as_string() == t.at("source_type").as_string()) continue;
      const std::string hover = t.at("tensor").as_string() + " (" + t.at("role").as_string();
      EXPECT_TRUE(contains(page, "<title>" + html::escape(hover))) << hover;
      EXPECT_TRUE(contains(page, "at " + c.at("type").as_string() + ": ΔKLD " +
                                     html::format_number(c.at("delta_kld").as_number())))
          << hover;
      if (c.at("delta_kld").as_number() > largest) {
        largest = c.at("delta_kld").as_number();
        most_sensitive = t.at("tensor").as_string();
      }
    }
  const size_t table = page.find("data-table=\"sensitivity-top-tensors\"");
  ASSERT_NE(table, std::string::npos);
  EXPECT_TRUE(contains(page.substr(table, 1200), "<td>" + most_sensitive + "</td>")) << most_sensitive;
  EXPECT_EQ(count_of(page, "How to read this:"), 2u);
}

TEST_F(ReportOfARun, PlanJsonHoldsEveryTensorAndTheValidation) {
  const JsonValue doc = json("plan.json");
  EXPECT_EQ(doc.at("tool").as_string(), "qlens plan");
  EXPECT_EQ(doc.at("schema_version").as_int(), 2);
  EXPECT_FALSE(doc.at("qlens_version").as_string().empty());
  EXPECT_EQ(doc.at("inputs").at("sensitivity").as_string(), path("sensitivity.json"));
  EXPECT_EQ(doc.at("inputs").at("model").as_string(), model_);
  EXPECT_EQ(doc.at("settings").at("target_bits_per_weight").as_number(), 12);
  EXPECT_TRUE(doc.at("settings").at("target_size_bytes").is_null());
  const JsonValue sens = json("sensitivity.json");
  ASSERT_EQ(doc.at("tensors").size(), sens.at("tensors").size());
  uint64_t bytes = static_cast<uint64_t>(doc.at("totals").at("fixed_bytes").as_int());
  double predicted = 0;
  for (const JsonValue& t : doc.at("tensors").as_array()) {
    bytes += static_cast<uint64_t>(t.at("bytes").as_int());
    predicted += t.at("predicted_delta_kld").as_number();
    EXPECT_NEAR(t.at("bits_per_weight").as_number(),
                8.0 * static_cast<double>(t.at("bytes").as_int()) / static_cast<double>(t.at("n_elements").as_int()), 1e-12);
    if (t.at("tensor").as_string().rfind("blk.", 0) != 0) {
      EXPECT_TRUE(t.at("layer").is_null()) << t.at("tensor").as_string();
    }
  }
  EXPECT_EQ(bytes, static_cast<uint64_t>(doc.at("totals").at("bytes").as_int()));
  EXPECT_NEAR(predicted, doc.at("totals").at("predicted_kld").as_number(), 1e-12);
  const JsonValue& rows = doc.at("validation").at("rows");
  ASSERT_GE(rows.size(), 2u);  // the plan and at least one mix
  EXPECT_EQ(rows.at(0).at("mix").as_string(), "plan");
  for (const JsonValue& r : rows.as_array()) {
    EXPECT_GT(r.at("kld").at("value").as_number(), 0);
    EXPECT_GT(r.at("ppl").at("value").as_number(), 1);
    EXPECT_GT(r.at("same_top").at("value").as_number(), 0.5);
  }
  EXPECT_TRUE(json("plan-only.json").at("validation").is_null());
}

TEST_F(ReportOfARun, PlanSectionHasTheTypeGridAndThePlanAgainstTheMixes) {
  tools::ReportInputs in;
  in.plan = path("plan.json");
  const std::string page = tools::build_report_html(in, fixed_date());
  EXPECT_TRUE(contains(page, "data-chart=\"plan-type-grid\""));
  EXPECT_TRUE(contains(page, "data-chart=\"plan-kld-vs-size\""));
  EXPECT_TRUE(contains(page, "data-table=\"plan-validation\""));
  EXPECT_TRUE(contains(page, "the plan (measured)"));
  const JsonValue doc = json("plan.json");
  for (const JsonValue& t : doc.at("tensors").as_array())
    EXPECT_TRUE(contains(page, "<title>" + t.at("tensor").as_string() + ": " + t.at("type").as_string() + ", "))
        << t.at("tensor").as_string();
  for (const JsonValue& r : doc.at("validation").at("rows").as_array()) {
    EXPECT_TRUE(contains(page, "<td>" + r.at("mix").as_string() + "</td>"));
    EXPECT_TRUE(contains(page, html::format_with_error(r.at("kld").at("value").as_number(),
                                                       r.at("kld").at("error").as_number())));
  }
  EXPECT_FALSE(contains(page, "was not validated"));

  in.plan = path("plan-only.json");
  const std::string unvalidated = tools::build_report_html(in, fixed_date());
  EXPECT_TRUE(contains(unvalidated, "This plan was not validated"));
  EXPECT_TRUE(contains(unvalidated, "data-chart=\"plan-type-grid\""));
  EXPECT_FALSE(contains(unvalidated, "data-chart=\"plan-kld-vs-size\""));
}

// qlens curve: a plan and a mix per mix point, the plan at no more bytes
// than the mix; a size alone gets a plan; a size below every plan a note;
// --resume measures only what is new.
TEST_F(ReportOfARun, CurveHasAPlanAtEachMixSizeAndResumes) {
  const JsonValue doc = json("curve.json");
  EXPECT_EQ(doc.at("tool").as_string(), "qlens curve");
  EXPECT_TRUE(doc.at("complete").as_bool());
  EXPECT_EQ(doc.at("inputs").at("model").as_string(), model_);
  const JsonValue& rows = doc.at("rows");
  ASSERT_EQ(rows.size(), 6u);  // 1bpw (plan: none), Q4_0 (plan, mix), 8bpw (plan), Q8_0 (plan, mix)
  std::map<std::string, const JsonValue*> by;
  uint64_t last_budget = 0;
  for (const JsonValue& r : rows.as_array()) {
    by[r.at("point").as_string() + "/" + r.at("kind").as_string()] = &r;
    const auto budget = static_cast<uint64_t>(r.at("budget_bytes").as_int());
    EXPECT_GE(budget, last_budget) << "points run from the smallest";
    last_budget = budget;
  }
  ASSERT_TRUE(by.count("1bpw/plan"));
  EXPECT_FALSE(by["1bpw/plan"]->at("measured").as_bool());
  EXPECT_TRUE(contains(by["1bpw/plan"]->at("note").as_string(), "below the smallest plan"));
  for (const char* mix : {"Q4_0", "Q8_0"}) {
    ASSERT_TRUE(by.count(std::string(mix) + "/plan") && by.count(std::string(mix) + "/mix")) << mix;
    const JsonValue& plan = *by[std::string(mix) + "/plan"];
    const JsonValue& m = *by[std::string(mix) + "/mix"];
    EXPECT_EQ(plan.at("budget_bytes").as_int(), m.at("bytes").as_int()) << mix << ": the budget is the mix's size";
    EXPECT_LE(plan.at("bytes").as_int(), m.at("bytes").as_int()) << mix;
    for (const JsonValue* r : {&plan, &m}) {
      EXPECT_TRUE(r->at("measured").as_bool());
      EXPECT_GT(r->at("kld").at("value").as_number(), 0) << mix;
      EXPECT_GT(r->at("ppl").at("value").as_number(), 1) << mix;
      EXPECT_TRUE(std::filesystem::exists(r->at("model").as_string())) << mix;
    }
  }
  ASSERT_TRUE(by.count("8bpw/plan"));
  EXPECT_TRUE(by["8bpw/plan"]->at("measured").as_bool());
  EXPECT_LE(by["8bpw/plan"]->at("bits_per_weight").as_number(), 8.0);
  EXPECT_GT(by["8bpw/plan"]->at("bits_per_weight").as_number(), 7.5);
  EXPECT_EQ(by.count("8bpw/mix"), 0u);

  // Resumed with one more point: the earlier rows unchanged, 6 of them
  // reused, the new point's two measured.
  const JsonValue more = json("curve-more.json");
  ASSERT_EQ(more.at("rows").size(), 8u);
  EXPECT_EQ(count_of(resume_log_, "(resumed)"), 6u) << resume_log_;
  EXPECT_EQ(count_of(resume_log_, "quantizing "), 2u) << resume_log_;
  for (const JsonValue& r : more.at("rows").as_array()) {
    const std::string key = r.at("point").as_string() + "/" + r.at("kind").as_string();
    if (!by.count(key)) continue;
    EXPECT_EQ(r.at("kld").at("value").is_null() ? -1.0 : r.at("kld").at("value").as_number(),
              by[key]->at("kld").at("value").is_null() ? -1.0 : by[key]->at("kld").at("value").as_number())
        << key;
  }

  tools::ReportInputs in;
  in.curve = path("curve.json");
  const std::string page = tools::build_report_html(in, fixed_date());
  for (const char* id : {"data-chart=\"curve-kld\"", "data-chart=\"curve-ppl\"", "data-table=\"curve-table\""})
    EXPECT_TRUE(contains(page, id)) << id;
  EXPECT_TRUE(contains(page, "no plan: smaller than the table allows"));
  EXPECT_TRUE(contains(page, html::format_with_error(by["Q4_0/plan"]->at("kld").at("value").as_number(),
                                                     by["Q4_0/plan"]->at("kld").at("error").as_number())));
}

TEST_F(ReportOfARun, ImatrixSectionHasLayersTensorsAndColumns) {
  tools::ReportInputs in;
  in.imatrix_stats = path("imatrix-stats.json");
  const std::string page = tools::build_report_html(in, fixed_date());
  for (const char* id : {"data-chart=\"imatrix-layer-importance\"", "data-chart=\"imatrix-layer-shape\"",
                         "data-table=\"imatrix-top-tensors\"", "data-table=\"imatrix-top-columns\""})
    EXPECT_TRUE(contains(page, id)) << id;
  const JsonValue doc = json("imatrix-stats.json");
  for (const JsonValue& l : doc.at("layers").as_array())
    EXPECT_TRUE(contains(page, "<title>layer " + std::to_string(l.at("layer").as_int()) + ": Σ act² " +
                                   html::format_number(l.at("sum_act2").as_number())));
  // attn_q, attn_k and attn_v read the same input: one row names all three.
  EXPECT_TRUE(contains(page, "(same input: attn_q.weight attn_v.weight)"));
}

TEST_F(ReportOfARun, PerplexityFilesAreOneRowEach) {
  tools::ReportInputs in;
  in.perplexity = {path("ppl-f32.json"), path("ppl-plan.json")};
  const std::string page = tools::build_report_html(in, fixed_date());
  const size_t table = page.find("data-table=\"perplexity\"");
  ASSERT_NE(table, std::string::npos);
  EXPECT_EQ(count_of(page.substr(table), "<tr>"), 3u);  // header + 2
  for (const char* name : {"ppl-f32.json", "ppl-plan.json"}) {
    const JsonValue doc = json(name);
    EXPECT_TRUE(contains(page, html::format_with_error(doc.at("ppl").at("value").as_number(), doc.at("ppl").at("error").as_number())))
        << name;
  }
}

TEST_F(ReportOfARun, OnePageSelfContainedWithEverySection) {
  const std::string page = tools::build_report_html(all_inputs(), fixed_date());
  size_t last = 0;
  for (const char* id : {"compare", "sensitivity", "plan", "imatrix", "perplexity"}) {
    const size_t at = page.find(std::string("<section class=\"report-section\" id=\"") + id + "\"");
    ASSERT_NE(at, std::string::npos) << id;
    EXPECT_GT(at, last) << id << " out of order";
    last = at;
    EXPECT_TRUE(contains(page, std::string("<a href=\"#") + id + "\">")) << id;
  }
  EXPECT_TRUE(contains(page, "generated 2026-12-02 12:00 UTC by qlens "));
  for (const NamedPath& in : tools::report_input_paths(all_inputs()))
    EXPECT_TRUE(contains(page, "<th>" + in.flag + "</th><td>" + in.path + "</td>")) << in.path;
  // Nothing loaded from elsewhere: no script, stylesheet, image or font reference,
  // and URLs only as the SVG namespace; a CSP forbids the rest.
  for (const char* banned : {"<script", "<link", " src=", "url(", "@import", "<img", "<iframe"})
    EXPECT_FALSE(contains(page, banned)) << banned;
  EXPECT_EQ(count_of(page, "http://") + count_of(page, "https://") + count_of(page, "file:"),
            count_of(page, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_TRUE(contains(page, "Content-Security-Policy\" content=\"default-src 'none'"));
  EXPECT_EQ(count_of(page, "<svg "), count_of(page, "</svg>"));
  EXPECT_EQ(count_of(page, "<svg "), 9u);
  EXPECT_EQ(count_of(page, "How to read this:"), 9u);  // one per chart
  // Through the CLI, to a file, atomically.
  std::string out;
  const std::string html_path = path("report.html");
  ASSERT_EQ(qlens_cli("report --compare " + path("compare.json") + " --sensitivity " + path("sensitivity.json") +
                          " --plan " + path("plan.json") + " --imatrix-stats " + path("imatrix-stats.json") +
                          " --perplexity " + path("ppl-f32.json") + " --perplexity " + path("ppl-plan.json") +
                          " -o " + html_path,
                      &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "wrote " + html_path)) << out;
  EXPECT_FALSE(std::filesystem::exists(html_path + ".tmp"));
  EXPECT_EQ(count_of(read_text_file(html_path), "<svg "), 9u);
}

TEST_F(ReportOfARun, NeverOverwritesAnInput) {
  const tools::ReportInputs in = all_inputs();
  const std::string before = read_text_file(in.sensitivity);
  std::string e = error_of([&] { tools::write_report(in, fixed_date(), in.sensitivity); });
  EXPECT_TRUE(contains(e, "is the same file as the input --sensitivity " + in.sensitivity)) << e;
  e = error_of([&] { tools::write_report(in, fixed_date(), dir_ + "/./ppl-plan.json"); });
  EXPECT_TRUE(contains(e, "is the same file as the input --perplexity")) << e;
  EXPECT_EQ(read_text_file(in.sensitivity), before);
  e = error_of([&] { tools::write_report(in, fixed_date(), dir_ + "/missing/report.html"); });
  EXPECT_TRUE(contains(e, "does not exist")) << e;
  std::string out;
  EXPECT_NE(qlens_cli("report --compare " + in.compare + " -o " + in.compare, &out), 0);
  EXPECT_TRUE(contains(out, "is the same file as the input --compare")) << out;
}

// ---- errors (no run needed) ----

TEST(Report, BadInputsNameTheFileAndTheField) {
  const auto build = [](const tools::ReportInputs& in) {
    return error_of([&] { tools::build_report_html(in, fixed_date()); });
  };
  EXPECT_TRUE(contains(build({}), "no input")) << build({});
  tools::ReportInputs in;
  in.compare = "/nonexistent/compare.json";
  EXPECT_TRUE(contains(build(in), "/nonexistent/compare.json")) << build(in);

  in.compare = write_temp("broken.json", "{\"nodes\": [");
  EXPECT_TRUE(contains(build(in), "broken.json:1:")) << build(in);

  in.compare = write_temp("sens-as-compare.json", R"({"schema_version": 1, "tool": "qlens sensitivity", "tensors": []})");
  std::string e = build(in);
  EXPECT_TRUE(contains(e, "sens-as-compare.json: tool: \"qlens sensitivity\" is not a compare file")) << e;
  EXPECT_TRUE(contains(e, "--compare takes the --json file of qlens compare")) << e;

  in.compare = write_temp("no-nodes.json", R"({"schema_version": 1, "tool": "qlens compare", "logits": {"n_tokens": 0}})");
  e = build(in);
  EXPECT_TRUE(contains(e, "no-nodes.json: nodes: missing")) << e;

  in.compare = write_temp("bad-nmse.json", R"({"tool": "qlens compare", "logits": {"n_tokens": 0},
      "nodes": [{"name": "l_out-0", "layer": 0, "kind": "l_out", "nmse": "small"}]})");
  e = build(in);
  EXPECT_TRUE(contains(e, "bad-nmse.json: nodes[0].nmse: expected a number, found a string")) << e;

  in = {};
  in.plan = write_temp("plan-v3.json", R"({"tool": "plan", "schema_version": 3, "tensors": []})");
  e = build(in);
  EXPECT_TRUE(contains(e, "plan-v3.json: schema_version: unsupported schema_version 3")) << e;

  in = {};
  in.perplexity = {write_temp("ppl.json", R"({"model": "m.gguf", "n_ctx": 128})")};
  e = build(in);
  EXPECT_TRUE(contains(e, "ppl.json: ppl: missing")) << e;

  in = {};
  in.sensitivity = write_temp("array.json", "[1, 2]");
  e = build(in);
  EXPECT_TRUE(contains(e, "array.json: expected a JSON object")) << e;

  std::string out;
  EXPECT_NE(qlens_cli("report -o " + test::temp_dir() + "/r.html", &out), 0);
  EXPECT_TRUE(contains(out, "no input")) << out;
  EXPECT_NE(qlens_cli("report --compare x.json --metric rmse", &out), 0);
  EXPECT_TRUE(contains(out, "--metric must be nmse or sqnr")) << out;
}

// Files of another layout (the future JSON convention: null layers outside
// the blocks, {value, error} objects, inputs.*) read the same.
TEST(Report, PerplexityReadsBothSpellingsOfAValueWithItsError) {
  tools::ReportInputs in;
  in.perplexity = {write_temp("p1.json", R"({"model": "a.gguf", "ppl": 4.5, "ppl_error": 0.25, "n_scored": 252})"),
                   write_temp("p2.json", R"({"tool": "perplexity", "inputs": {"model": "b.gguf"},
                       "ppl": {"value": 5.5, "error": 0.5}, "n_scored": 100, "settings": {"n_ctx": 64}})")};
  const std::string page = tools::build_report_html(in, fixed_date());
  EXPECT_TRUE(contains(page, "<td>a.gguf</td>"));
  EXPECT_TRUE(contains(page, "<td>b.gguf</td>"));
  EXPECT_TRUE(contains(page, "4.50 ± 0.25"));
  EXPECT_TRUE(contains(page, "5.50 ± 0.50"));
  EXPECT_TRUE(contains(page, "<td class=\"num\">64</td>"));
}

// ---- the building blocks ----

TEST(ReportHtml, NumbersForPeople) {
  EXPECT_EQ(html::format_number(0.013659), "0.0137");
  EXPECT_EQ(html::format_number(4.789), "4.79");
  EXPECT_EQ(html::format_number(1234.7), "1235");
  EXPECT_EQ(html::format_number(2.27e-5), "2.27e-5");
  EXPECT_EQ(html::format_number(3.5e6), "3.50e6");
  EXPECT_EQ(html::format_number(0), "0");
  EXPECT_EQ(html::format_number(html::kNaN), "–");
  EXPECT_EQ(html::format_number(INFINITY), "inf");
  EXPECT_EQ(html::format_integer(401504), "401,504");
  EXPECT_EQ(html::format_integer(999), "999");
  EXPECT_EQ(html::format_integer(-1234567), "-1,234,567");
  EXPECT_EQ(html::format_percent(0.94444), "94.44%");
  EXPECT_EQ(html::format_bytes(832), "832 B");
  EXPECT_EQ(html::format_bytes(401504), "392.1 KiB");
  EXPECT_EQ(html::format_bytes(1.16e9), "1.08 GiB");
  EXPECT_EQ(html::format_with_error(0.0282, 0.00162), "0.0282 ± 0.0016");
  EXPECT_EQ(html::escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
}

TEST(ReportHtml, LogAxesLeaveOutWhatTheyCannotDrawAndBreakTheLine) {
  html::XYChart chart;
  chart.id = "t";
  chart.x.label = "layer";
  chart.x.integer = true;
  chart.y.label = "NMSE";
  chart.y.log = true;
  html::Series s("kind<1>");
  for (int i = 0; i < 5; ++i) s.points.push_back({double(i), i == 2 ? 0.0 : std::pow(10.0, -i), html::kNaN, html::kNaN, "", "p" + std::to_string(i)});
  chart.series.push_back(s);
  const std::string svg = html::xy_chart_svg(chart);
  EXPECT_EQ(count_of(svg, "<circle class=\"point\""), 4u);  // the zero is left out
  EXPECT_TRUE(contains(svg, "<title>p3</title>"));
  EXPECT_FALSE(contains(svg, "<title>p2</title>"));
  const std::smatch m = [&] {
    std::smatch r;
    std::regex_search(svg, r, std::regex("d=\"(M[^\"]*)\""));
    return r;
  }();
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(count_of(m[1].str(), "M"), 2u) << "the line breaks at the missing point: " << m[1].str();
  EXPECT_TRUE(contains(svg, ">0</text>"));  // layer ticks start at 0...
  EXPECT_FALSE(contains(svg, ">-0</text>"));  // ...not at "-0"
  EXPECT_TRUE(contains(svg, ">1e-4</text>"));  // a decade tick
  EXPECT_TRUE(contains(svg, "data-chart=\"t\""));
  EXPECT_FALSE(contains(svg, "class=\"legend\"")) << "one series needs no legend";
}

TEST(ReportHtml, HeatmapCellsSayWhatTheyHold) {
  html::Heatmap map;
  map.id = "h";
  map.row_axis = "layer";
  map.column_axis = "role";
  map.value_label = "ΔKLD (nats)";
  map.rows = {"0", "1"};
  map.columns = {"attn_q", "ffn_down"};
  map.values = {{1e-3, html::kNaN}, {-1e-6, 1e-1}};
  map.hovers = {{"a", "b"}, {"c", "d"}};
  map.low = 1e-3;
  map.high = 1e-1;
  const std::string svg = html::heatmap_svg(map);
  EXPECT_EQ(count_of(svg, "<g class=\"cell\">"), 4u);
  EXPECT_TRUE(contains(svg, ">–</text><title>b</title>"));  // no value
  EXPECT_TRUE(contains(svg, ">≤0</text><title>c</title>"));  // below any log scale
  EXPECT_TRUE(contains(svg, "fill=\"" + html::sequential_colour(0) + "\""));  // the low end
  EXPECT_TRUE(contains(svg, "fill=\"" + html::sequential_colour(1) + "\""));  // the high end
  EXPECT_TRUE(contains(svg, ">0.01</text>"));  // a colour-bar tick
}

}  // namespace
}  // namespace qlens
