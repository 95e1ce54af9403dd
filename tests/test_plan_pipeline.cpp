// The whole pipeline on stories260K: imatrix on one half of tinystories_val,
// sensitivity, a plan at the size of the Q4_K_M and Q3_K_M mixes, both
// quantized and compared on the other half; the plan must win. Also: noise
// predictions rank like quant measurements (Spearman), and quantize applies a
// plan's tensor-type file exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <regex>

#include "core/text_file.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/plan/plan.h"
#include "tools/quantize/quantize.h"
#include "tools/sensitivity/sensitivity.h"

namespace qlens {
namespace {

int qlens_cli(const std::string& args, std::string* out) {
  return test::run_command(std::string(QLENS_BINARY) + " " + args, out);
}

class Pipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = test::shared_path("models/stories260K.gguf");
    const std::string text = test::shared_path("data/tinystories/tinystories_val.txt");
    // The set-up is most of these tests' time: skipped ones must not pay it.
    if (model_.empty() || text.empty() || !test::slow_tests_enabled()) return;
    dir_ = test::temp_dir();
    const std::string all = read_text_file(text);
    const size_t cut = all.find('\n', all.size() / 2) + 1;
    write_file_atomic(dir_ + "/calibration.txt", all.substr(0, cut));
    write_file_atomic(dir_ + "/held-out.txt", all.substr(cut));
    std::string out;
    ok_ = qlens_cli("imatrix -m " + model_ + " -f " + dir_ + "/calibration.txt -c 128 -b 128 -t 2 --no-ppl -o " +
                        dir_ + "/im.gguf",
                    &out) == 0 &&
          qlens_cli("sensitivity -m " + model_ + " -f " + dir_ + "/calibration.txt -c 128 --chunks 4 -t 2 --imatrix " +
                        dir_ + "/im.gguf --json " + dir_ + "/quant.json --top 0",
                    &out) == 0 &&
          qlens_cli("sensitivity -m " + model_ + " -f " + dir_ + "/calibration.txt -c 128 --chunks 4 -t 2 --imatrix " +
                        dir_ + "/im.gguf --mode noise --json " + dir_ + "/noise.json --top 0",
                    &out) == 0;
    if (!ok_) std::fprintf(stderr, "pipeline set-up failed: %s\n", out.c_str());
  }
  void SetUp() override {
    if (model_.empty()) GTEST_SKIP() << "needs ../shared/models/stories260K.gguf and tinystories_val.txt";
    if (!test::slow_tests_enabled()) GTEST_SKIP() << "QLENS_SLOW_TESTS=0";
    ASSERT_TRUE(ok_) << "imatrix or sensitivity failed";
  }
  static double held_out_kld(const std::string& test_model) {
    std::string out;
    EXPECT_EQ(qlens_cli("compare --ref " + model_ + " -m " + test_model + " -f " + dir_ +
                            "/held-out.txt -c 128 -b 128 -t 2 --chunks 300 --logits-only --top 0",
                        &out),
              0)
        << out;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex(R"(Mean\s+KLD:\s+([0-9.eE+-]+))"))) << out;
    return m.empty() ? -1 : std::stod(m[1]);
  }
  static std::string model_, dir_;
  static bool ok_;
};
std::string Pipeline::model_, Pipeline::dir_;
bool Pipeline::ok_ = false;

TEST_F(Pipeline, PlanBeatsTheMixOfItsSize) {
  const tools::SensitivityTable table = tools::load_sensitivity_json(dir_ + "/quant.json");
  for (const char* mix : {"Q4_K_M", "Q3_K_M"}) {
    // The mix, quantized with the same imatrix; its tensor bytes are the budget.
    std::string out;
    const std::string mix_path = dir_ + "/" + mix + ".gguf";
    ASSERT_EQ(qlens_cli("quantize --imatrix " + dir_ + "/im.gguf " + model_ + " " + mix_path + " " + mix, &out), 0)
        << out;
    uint64_t mix_bytes = 0;
    {
      auto f = gguf::File::open(mix_path);
      for (const auto& t : f->tensors()) mix_bytes += t.nbytes;
    }
    const tools::Plan plan = tools::solve_plan(table, mix_bytes);
    EXPECT_LE(plan.total_bytes, mix_bytes);
    write_file_atomic(dir_ + "/plan.txt", tools::tensor_type_file(table, plan));
    const std::string plan_path = dir_ + "/plan-" + mix + ".gguf";
    ASSERT_EQ(qlens_cli("quantize --imatrix " + dir_ + "/im.gguf --pure --tensor-type-file " + dir_ + "/plan.txt " +
                            model_ + " " + plan_path + " F16",
                        &out),
              0)
        << out;
    const double kld_plan = held_out_kld(plan_path), kld_mix = held_out_kld(mix_path);
    std::printf("%s: %llu bytes; mean KLD on held-out text: plan %.5f (predicted %.5f), %s %.5f\n", mix,
                static_cast<unsigned long long>(mix_bytes), kld_plan, plan.predicted_delta_kld, mix, kld_mix);
    EXPECT_LT(kld_plan, kld_mix) << mix;
  }
}

TEST_F(Pipeline, NoisePredictionsRankLikeQuantMeasurements) {
  const auto quant = tools::sensitivity_from_json(read_text_file(dir_ + "/quant.json"), "quant.json");
  const auto noise = tools::sensitivity_from_json(read_text_file(dir_ + "/noise.json"), "noise.json");
  ASSERT_EQ(quant.tensors.size(), noise.tensors.size());
  std::vector<double> measured, predicted;
  for (size_t i = 0; i < quant.tensors.size(); ++i)
    for (const auto& c : quant.tensors[i].candidates) {
      if (c.type == quant.tensors[i].source_type) continue;
      for (const auto& p : noise.tensors[i].candidates)
        if (p.type == c.type) {
          measured.push_back(c.delta_kld);
          predicted.push_back(p.delta_kld);
        }
    }
  ASSERT_GT(measured.size(), 100u);
  const double rho = test::spearman(measured, predicted);
  std::printf("noise vs quant: Spearman %.3f over %zu (tensor, type) pairs\n", rho, measured.size());
  EXPECT_GE(rho, 0.7);
}

TEST_F(Pipeline, QuantizeAppliesAPlanExactly) {
  const tools::SensitivityTable table = tools::load_sensitivity_json(dir_ + "/quant.json");
  const tools::Plan plan = tools::solve_plan(table, tools::budget_from_bpw(table, 7.0));
  write_file_atomic(dir_ + "/plan7.txt", tools::tensor_type_file(table, plan));
  std::string out;
  ASSERT_EQ(qlens_cli("quantize --dry-run --pure --tensor-type-file " + dir_ + "/plan7.txt " + model_ + " " + dir_ +
                          "/x.gguf F16",
                      &out),
            0)
      << out;
  for (size_t i = 0; i < table.tensors.size(); ++i) {
    const std::string type(type_name(table.tensors[i].options[plan.choice[i]].type));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(std::regex_replace(table.tensors[i].name, std::regex(R"(\.)"),
                                                                        R"(\.)") +
                                                     R"(\s+\[[^\]]*\]\s+\S+\s+(\S+))")))
        << table.tensors[i].name << "\n" << out;
    EXPECT_EQ(m[1].str(), type) << table.tensors[i].name;
  }
}

}  // namespace
}  // namespace qlens
