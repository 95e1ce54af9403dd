// Bad numbers in well-formed files: a NaN or an infinity in a weight, in the
// activations it causes, or in an importance matrix. Every tool names the
// tensor (or says the output went non-finite) and stops with an error; none
// writes a file or prints a NaN perplexity as if it were a result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "qlens/error.h"
#include "qlens/gguf.h"
#include "test_util.h"
#include "tools/imatrix/imatrix_file.h"

namespace qlens {
namespace {


int qlens_cli(const std::string& args, std::string* out) {
  return test::run_command(std::string(QLENS_BINARY) + " " + args, out);
}

// stories260K with `value` written at element `at` of tensor `name` (F32).
std::string corrupted_copy(const std::string& model, const std::string& name, int64_t at, float value,
                           const std::string& out) {
  const auto in = gguf::File::open(model);
  gguf::Writer w;
  for (const auto& kv : in->metadata()) w.set(kv.key, kv.value);
  std::vector<std::vector<uint8_t>> keep;
  for (const auto& t : in->tensors()) {
    const uint8_t* data = in->tensor_data(t);
    auto& bytes = keep.emplace_back(data, data + t.nbytes);
    if (t.name == name) {
      EXPECT_EQ(t.type, DType::F32) << name;
      std::memcpy(bytes.data() + at * sizeof(float), &value, sizeof value);
    }
    w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne.data(), t.n_dims), bytes.data(), bytes.size());
  }
  w.write(out);
  return out;
}

using BadNumbers = test::StoriesTest;

TEST_F(BadNumbers, ANanWeightIsNamedByEveryTool) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string bad = corrupted_copy(model_, "blk.2.attn_q.weight", 5 * 64 + 3, nan, dir_ + "/nan.gguf");
  std::string out;

  EXPECT_EQ(qlens_cli("inspect " + model_ + " --check-tensors", &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "every value of the")) << out;
  EXPECT_EQ(qlens_cli("inspect " + bad + " --check-tensors", &out), 1) << out;
  EXPECT_TRUE(test::contains(out, "tensor 'blk.2.attn_q.weight' holds 1 NaN and 0 infinities (the first at element 323)"))
      << out;

  EXPECT_NE(qlens_cli("quantize " + bad + " " + dir_ + "/q.gguf Q8_0", &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "tensor 'blk.2.attn_q.weight' holds NaN at row 5, column 3")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/q.gguf"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/q.gguf.tmp"));

  const std::string run = " -m " + bad + " -f " + text_ + " -c 128 -b 128 --chunks 2 -t 2";
  for (const std::string& command : {"perplexity" + run, "compare --ref " + model_ + run,
                                     "sensitivity" + run + " --types Q8_0 --json " + dir_ + "/s.json"}) {
    EXPECT_NE(qlens_cli(command, &out), 0) << command << "\n" << out;
    EXPECT_TRUE(test::contains(out, "output logits hold NaN or an infinity")) << command << "\n" << out;
    EXPECT_FALSE(test::contains(out, "Final estimate")) << command;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/s.json"));
  // imatrix names the tensor whose activations went bad (and keeps what it had).
  EXPECT_NE(qlens_cli("imatrix" + run + " -o " + dir_ + "/im.gguf", &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "blk.2.")) << out;
}

TEST_F(BadNumbers, AnInfiniteNormWeightStopsQuantize) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::string bad = corrupted_copy(model_, "blk.0.attn_norm.weight", 7, -inf, dir_ + "/inf.gguf");
  std::string out;
  // The 1-D norm is copied, not quantized: it is checked all the same.
  EXPECT_NE(qlens_cli("quantize " + bad + " " + dir_ + "/q.gguf Q4_0", &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "tensor 'blk.0.attn_norm.weight' holds an infinity at row 0, column 7")) << out;
  EXPECT_EQ(qlens_cli("inspect " + bad + " --check-tensors", &out), 1) << out;
  EXPECT_TRUE(test::contains(out, "holds 0 NaN and 1 infinities")) << out;
}

TEST_F(BadNumbers, ANanInAnImatrixIsNamed) {
  std::string out;
  ASSERT_EQ(qlens_cli("imatrix -m " + model_ + " -f " + text_ + " -c 128 --chunks 2 -o " + dir_ + "/im.gguf", &out), 0)
      << out;
  tools::Imatrix m = tools::load_imatrix(dir_ + "/im.gguf");
  m.entries.at("blk.1.ffn_up.weight").sum2[9] = std::numeric_limits<double>::quiet_NaN();
  tools::save_imatrix_gguf(m, dir_ + "/bad.gguf");
  const std::string error = test::error_of([&] { tools::load_imatrix(dir_ + "/bad.gguf"); });
  EXPECT_TRUE(test::contains(error, "tensor 'blk.1.ffn_up.weight.in_sum2' holds NaN at element 9")) << error;
  EXPECT_NE(qlens_cli("quantize " + model_ + " " + dir_ + "/q.gguf Q4_0 --imatrix " + dir_ + "/bad.gguf", &out), 0);
  EXPECT_TRUE(test::contains(out, "the importance matrix is corrupt")) << out;
  m.entries.at("blk.1.ffn_up.weight").sum2[9] = -1;
  tools::save_imatrix_gguf(m, dir_ + "/negative.gguf");
  EXPECT_TRUE(test::contains(test::error_of([&] { tools::load_imatrix(dir_ + "/negative.gguf"); }),
                             "holds a negative value at element 9"));
}

}  // namespace
}  // namespace qlens
