// The block types of 2026 (the 1- to 3-bit i-quants, ternary, MXFP4, NVFP4,
// Q1_0, Q2_0): their tables are ggml's, and qlens dequantizes blocks that
// llama-quantize wrote exactly as llama.cpp does (tests/data/lowbit-blocks.gguf;
// tests/data/README.md says how it was made).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "qlens/types.h"
#include "quant/fp4.h"
#include "quant/iq_grids.h"
#include "core/text_file.h"
#include "test_util.h"

namespace qlens {
namespace {

const std::string kBlocks = std::string(QLENS_SOURCE_DIR) + "/tests/data/lowbit-blocks.gguf";

const DType kLowBitTypes[] = {DType::IQ1_S, DType::IQ1_M, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,
                              DType::IQ3_XXS, DType::IQ3_S, DType::TQ1_0, DType::TQ2_0, DType::MXFP4,
                              DType::NVFP4, DType::Q1_0, DType::Q2_0};

// The blocks of `type` in the test file and llama.cpp's values of them.
struct Sample {
  std::vector<uint8_t> blocks;
  std::vector<float> expected;
};
Sample sample(const gguf::File& file, DType type) {
  const std::string name(type_name(type));
  const gguf::TensorInfo* blocks = file.find_tensor(name);
  const gguf::TensorInfo* values = file.find_tensor(name + ".dequantized");
  EXPECT_TRUE(blocks && values) << name;
  if (!blocks || !values) return {};
  EXPECT_EQ(blocks->type, type);
  EXPECT_EQ(values->type, DType::F32);
  Sample s;
  const uint8_t* b = file.tensor_data(*blocks);
  s.blocks.assign(b, b + blocks->nbytes);
  s.expected.resize(values->nbytes / sizeof(float));
  std::memcpy(s.expected.data(), file.tensor_data(*values), values->nbytes);
  return s;
}

std::vector<float> dequantize(DType type, const std::vector<uint8_t>& blocks, size_t n) {
  std::vector<float> out(n);
  type_traits(type).to_float(blocks.data(), out.data(), static_cast<int64_t>(n));
  return out;
}

size_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]);
  return bad;
}

TEST(LowBitTypes, DequantizeAsLlamaCppBitForBit) {
  const auto file = gguf::File::open(kBlocks);
  for (DType type : kLowBitTypes) {
    SCOPED_TRACE(std::string(type_name(type)));
    const Sample s = sample(*file, type);
    ASSERT_FALSE(s.expected.empty());
    ASSERT_NE(type_traits(type).to_float, nullptr);
    const std::vector<float> got = dequantize(type, s.blocks, s.expected.size());
    EXPECT_EQ(bit_mismatches(got, s.expected), 0u);
    // The sample is not degenerate: values of both signs, an eighth of them
    // or more nonzero (the ternary types set most small weights to 0).
    const auto nonzero = std::count_if(s.expected.begin(), s.expected.end(), [](float v) { return v != 0; });
    EXPECT_GT(nonzero, static_cast<long>(s.expected.size() / 8));
    EXPECT_LT(*std::min_element(s.expected.begin(), s.expected.end()), 0.f);
    EXPECT_GT(*std::max_element(s.expected.begin(), s.expected.end()), 0.f);
  }
}

// The comparison can fail: one flipped bit in the codes of each block type
// changes the values (a decoder that ignored it would pass the test above
// only by accident).
TEST(LowBitTypes, AFlippedCodeBitChangesTheValues) {
  const auto file = gguf::File::open(kBlocks);
  for (DType type : kLowBitTypes) {
    SCOPED_TRACE(std::string(type_name(type)));
    Sample s = sample(*file, type);
    ASSERT_FALSE(s.blocks.empty());
    // A byte well inside the first block, past any leading scale.
    s.blocks[type_traits(type).block_bytes / 2] ^= 0x01;
    const std::vector<float> got = dequantize(type, s.blocks, s.expected.size());
    EXPECT_GT(bit_mismatches(got, s.expected), 0u);
  }
}

// The types whose llama.cpp quantizers are its reference ones (no search,
// importance ignored): the blocks in the file are ggml's reference
// quantization of the source rows, which from_float reproduces.
const DType kReferenceQuantized[] = {DType::Q1_0, DType::Q2_0, DType::TQ1_0, DType::TQ2_0, DType::MXFP4, DType::NVFP4};

std::vector<float> tensor_values(const gguf::File& file, const std::string& name) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  EXPECT_TRUE(t && t->type == DType::F32) << name;
  if (!t) return {};
  std::vector<float> v(t->nbytes / sizeof(float));
  std::memcpy(v.data(), file.tensor_data(*t), t->nbytes);
  return v;
}

TEST(LowBitTypes, FromFloatIsGgmlsReferenceQuantizer) {
  const auto file = gguf::File::open(kBlocks);
  const std::vector<float> source = tensor_values(*file, "source");
  for (DType type : kReferenceQuantized) {
    SCOPED_TRACE(std::string(type_name(type)));
    const Sample s = sample(*file, type);
    ASSERT_EQ(source.size(), s.expected.size());
    std::vector<uint8_t> blocks(s.blocks.size());
    ASSERT_NE(type_traits(type).from_float, nullptr);
    type_traits(type).from_float(source.data(), blocks.data(), static_cast<int64_t>(source.size()));
    EXPECT_EQ(blocks, s.blocks);
  }
}

// sum_j w_{j mod width} (x_j - y_j)^2.
double weighted_error(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& w) {
  double err = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    const double e = static_cast<double>(x[j]) - y[j];
    err += (w.empty() ? 1.0 : w[j % w.size()]) * e * e;
  }
  return err;
}

std::vector<float> quantized_values(DType type, const std::vector<float>& x, int64_t width, const float* importance) {
  const TypeTraits& t = type_traits(type);
  std::vector<uint8_t> q(row_bytes(type, width) * (x.size() / width));
  t.quantize(x.data(), q.data(), static_cast<int64_t>(x.size()) / width, width, importance);
  return dequantize(type, q, x.size());
}

// With the importance llama-quantize had, the weighted error of qlens's
// quantization is below that of llama.cpp's blocks. Without one, for the
// types whose llama.cpp quantizer is the reference one (which ignores
// importance), the plain squared error is at most that of ggml's reference
// quantization (for Q1_0 ggml's scale, the mean |x|, is the unweighted
// optimum: equal).
TEST(LowBitTypes, WeightedQuantizersBeatLlamaCpps) {
  const auto file = gguf::File::open(kBlocks);
  const std::vector<float> source = tensor_values(*file, "source");
  const std::vector<float> importance = tensor_values(*file, "importance");
  ASSERT_EQ(importance.size(), 256u);
  for (DType type : kLowBitTypes) {
    ASSERT_NE(type_traits(type).quantize, nullptr);
    SCOPED_TRACE(std::string(type_name(type)));
    const Sample s = sample(*file, type);
    const double theirs = weighted_error(source, s.expected, importance);
    const double ours = weighted_error(source, quantized_values(type, source, 256, importance.data()), importance);
    EXPECT_LT(ours, theirs);
    std::printf("%-7s weighted error / llama.cpp's: %.4f", std::string(type_name(type)).c_str(), ours / theirs);
    if (std::find(std::begin(kReferenceQuantized), std::end(kReferenceQuantized), type) !=
        std::end(kReferenceQuantized)) {
      const double theirs_plain = weighted_error(source, s.expected, {});
      const double ours_plain = weighted_error(source, quantized_values(type, source, 256, nullptr), {});
      EXPECT_LE(ours_plain, theirs_plain);
      std::printf(", plain squared error without importance: %.4f", ours_plain / theirs_plain);
    }
    std::printf("\n");
  }
}

// Values a type holds exactly come back exactly; an all-zero row stays zero;
// a row length off the block size is refused.
TEST(LowBitTypes, QuantizersKeepWhatTheTypeHolds) {
  struct Case {
    DType type;
    std::vector<float> levels;  // values the type can hold in one block (with its scale)
  };
  const Case cases[] = {
      {DType::Q1_0, {-0.5f, 0.5f}},
      {DType::Q2_0, {-0.25f, 0.0f, 0.25f, 0.5f}},
      {DType::TQ1_0, {-0.125f, 0.0f, 0.125f}},
      {DType::TQ2_0, {-0.125f, 0.0f, 0.125f}},
      {DType::MXFP4, {-3.0f, -1.0f, -0.25f, 0.0f, 0.5f, 1.5f, 2.0f, 3.0f}},
      {DType::NVFP4, {-6.0f, -4.0f, -1.5f, 0.0f, 0.5f, 1.0f, 3.0f, 6.0f}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(type_name(c.type)));
    std::vector<float> x(512);
    for (size_t j = 0; j < x.size(); ++j) x[j] = c.levels[(j * 7 + j / 3) % c.levels.size()];
    // every block holds the largest magnitude, so that its scale is the one of the levels
    for (size_t j = 0; j < x.size(); j += 16) x[j] = c.levels.back();
    EXPECT_EQ(bit_mismatches(quantized_values(c.type, x, 256, nullptr), x), 0u);
    const std::vector<float> zero(512, 0.0f);
    EXPECT_EQ(bit_mismatches(quantized_values(c.type, zero, 256, nullptr), zero), 0u);
    std::vector<uint8_t> q(4096);
    const int64_t block = type_traits(c.type).block_size;
    EXPECT_THROW(type_traits(c.type).quantize(x.data(), q.data(), 1, block + 1, nullptr), Error);
  }
}

TEST(LowBitTypes, ComputeWithGgmlsActivationTypes) {
  for (DType type : kLowBitTypes) {
    SCOPED_TRACE(std::string(type_name(type)));
    const bool super_block = type_traits(type).block_size == 256;
    // ggml-cpu's vec_dot_type: Q8_K for the super-block types, Q8_0 for the rest.
    EXPECT_EQ(type_traits(type).vec_dot_type, super_block ? DType::Q8_K : DType::Q8_0);
  }
}

// The lattice points are data (scripts/iq-grids.py copied them from ggml and
// checked the expansion against ggml's tables); these are their properties.
template <size_t N>
void check_points(const uint16_t (&points)[N], int bits, int coords, int max_digit, bool even_sum) {
  EXPECT_TRUE(std::is_sorted(std::begin(points), std::end(points), std::less_equal<>()) &&
              std::adjacent_find(std::begin(points), std::end(points)) == std::end(points))
      << "points are distinct and ascending";
  for (uint16_t p : points) {
    EXPECT_EQ(p >> (bits * coords), 0) << p;
    int sum = 0;
    for (int j = 0; j < coords; ++j) {
      const int digit = (p >> (bits * j)) & ((1 << bits) - 1);
      EXPECT_LE(digit, max_digit) << p;
      sum += digit;
    }
    if (even_sum) {
      EXPECT_EQ(sum % 2, 0) << p;
    }
  }
}

TEST(LowBitTypes, LatticePointsHaveTheirProperties) {
  check_points(quant::iq::kIq2xxsPoints, 2, 8, 2, true);
  check_points(quant::iq::kIq2xsPoints, 2, 8, 2, true);
  check_points(quant::iq::kIq2sPoints, 2, 8, 2, true);
  check_points(quant::iq::kIq1sPoints, 2, 8, 2, false);
  check_points(quant::iq::kIq3xxsPoints, 3, 4, 7, false);
  check_points(quant::iq::kIq3sPoints, 3, 4, 7, false);
  // The expansion: ggml's first and last entries of each table.
  EXPECT_EQ(quant::iq::kIq2xxsGrid[0], 0x0808080808080808ull);
  EXPECT_EQ(quant::iq::kIq2xxsGrid[255], 0x2b2b2b1908081908ull);
  EXPECT_EQ(quant::iq::kIq2sGrid[1023], 0x2b2b2b2b2b2b2b2bull);
  EXPECT_EQ(quant::iq::kIq1sGrid[0], 0xffffffffffffffffull);
  EXPECT_EQ(quant::iq::kIq1sGrid[2047], 0x0101010101010101ull);
  EXPECT_EQ(quant::iq::kIq3xxsGrid[0], 0x04040404u);
  EXPECT_EQ(quant::iq::kIq3sGrid[0], 0x01010101u);
  EXPECT_EQ(quant::iq::kIq3sGrid[511], 0x0f0f0101u);
  EXPECT_EQ(quant::iq::kIq3xxsGrid[255], 0x3e341c04u);
}

TEST(LowBitTypes, SignTableKeepsAnEvenCountOfMinusSigns) {
  std::set<uint8_t> seen;
  for (int i = 0; i < 128; ++i) {
    const uint8_t s = quant::iq::kSigns[i];
    EXPECT_EQ(s & 127, i);
    EXPECT_EQ(std::popcount(static_cast<unsigned>(s)) % 2, 0);
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 128u);
}

TEST(LowBitTypes, Fp4ScalesAreExact) {
  using quant::fp4::e8m0_half;
  using quant::fp4::ue4m3_half;
  EXPECT_EQ(e8m0_half(127), 0.5f);
  EXPECT_EQ(e8m0_half(128), 1.0f);
  EXPECT_EQ(e8m0_half(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_half(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(e8m0_half(254), std::ldexp(1.0f, 126));
  EXPECT_EQ(ue4m3_half(0), 0.0f);
  EXPECT_EQ(ue4m3_half(0x7F), 0.0f);
  EXPECT_EQ(ue4m3_half(0x38), 0.5f);                     // exponent 7, mantissa 0: 1.0
  EXPECT_EQ(ue4m3_half(0x01), std::ldexp(1.0f, -10));    // the smallest subnormal, 2^-9
  EXPECT_EQ(ue4m3_half(0x7E), 448.0f / 2);               // the largest finite
  EXPECT_EQ(quant::fp4::kE2M1Doubled[7], 12);            // 6.0
  EXPECT_EQ(quant::fp4::kE2M1Doubled[15], -12);
}

// NVFP4 files as published carry a per-tensor ".scale" beside each projection
// and general.tensor_extra.prec_a4 (tests/data/README.md: qwen2-nvfp4.gguf by
// llama-quantize, qwen2-nvfp4-scaled.gguf by make_nvfp4_scaled.py from it).
// qlens's perplexity equals llama.cpp's within twice the spread of llama.cpp's
// own runs (flash attention on and off) on both; the scales move it by 4.8%,
// far beyond that. llama.cpp's qwen2 graph multiplies the attention
// projections by their scales and loads, but does not use, the feed-forward
// ones: so does qlens.
TEST(LowBitTypes, Nvfp4ScalesAsLlamaCppLoadsThem) {
  QLENS_REQUIRE_SHARED(text, "data/tinystories/tinystories_val.txt");
  const std::string dir = test::temp_dir();
  write_file_atomic(dir + "/ts.txt", read_text_file(text).substr(0, 200000));
  struct Case {
    const char* file;
    double llama_fa_on, llama_fa_off;  // llama-perplexity -c 128 -b 128 --chunks 8 -t 2 -fa on / off
  };
  const std::string data = std::string(QLENS_SOURCE_DIR) + "/tests/data/";
  for (const Case& c : {Case{"qwen2-nvfp4.gguf", 1715.8750, 1713.8593},
                        Case{"qwen2-nvfp4-scaled.gguf", 1797.7835, 1799.2841}}) {
    SCOPED_TRACE(c.file);
    std::string out;
    ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " perplexity -m " + data + c.file + " -f " + dir +
                                    "/ts.txt -c 128 -b 128 --chunks 8 -t 2",
                                &out),
              0)
        << out;
    const size_t at = out.find("Final estimate: PPL = ");
    ASSERT_NE(at, std::string::npos) << out;
    const double ppl = std::stod(out.substr(at + 22));
    const double lo = std::min(c.llama_fa_on, c.llama_fa_off), hi = std::max(c.llama_fa_on, c.llama_fa_off);
    EXPECT_GE(ppl, lo - 2 * (hi - lo));
    EXPECT_LE(ppl, hi + 2 * (hi - lo));
  }
  auto m = Model::load(data + "qwen2-nvfp4-scaled.gguf");
  const Tensor* s = m->scale_of(m->get(Role::AttnQ, 0));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->name, "blk.0.attn_q.scale");
  EXPECT_NE(m->scale_of(m->get(Role::FfnDown, 1)), nullptr);
  EXPECT_EQ(m->scale_of(m->get(Role::TokenEmbd)), nullptr);
  auto plain = Model::load(data + "qwen2-nvfp4.gguf");
  EXPECT_EQ(plain->scale_of(plain->get(Role::AttnQ, 0)), nullptr);
}

// The scaled file with one thing broken, through gguf::Writer.
std::string broken_nvfp4(const std::string& out, const std::string& drop_key, const gguf::Value* set_value,
                         const std::string& scale_as_f16) {
  const auto in = gguf::File::open(std::string(QLENS_SOURCE_DIR) + "/tests/data/qwen2-nvfp4-scaled.gguf");
  gguf::Writer w;
  for (const auto& kv : in->metadata())
    if (kv.key != drop_key) w.set(kv.key, kv.value);
  if (set_value) w.set("general.tensor_extra.prec_a4", *set_value);
  static std::vector<std::vector<uint8_t>> keep;
  static const uint16_t kHalfOne = 0x3c00;
  for (const auto& t : in->tensors()) {
    const uint8_t* data = in->tensor_data(t);
    if (t.name == scale_as_f16) {
      const int64_t one = 1;
      w.add_tensor(t.name, DType::F16, std::span<const int64_t>(&one, 1), &kHalfOne, 2);
      continue;
    }
    keep.emplace_back(data, data + t.nbytes);
    w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne.data(), t.n_dims), keep.back().data(), t.nbytes);
  }
  w.write(out);
  return out;
}

// What llama.cpp refuses in the extras, qlens refuses when loading, naming the
// file and the key or tensor.
TEST(LowBitTypes, Nvfp4ExtrasThatDoNotFitAreRefused) {
  const std::string dir = test::temp_dir();
  auto error_loading = [](const std::string& path) { return test::error_of([&] { Model::load(path); }); };
  std::string e = error_loading(broken_nvfp4(dir + "/a.gguf", "general.tensor_extra.prec_a4", nullptr, ""));
  EXPECT_NE(e.find("general.tensor_extra.prec_a4 must be a bool array"), std::string::npos) << e;
  const gguf::Value short_array = gguf::Value::make_array(gguf::ValueType::Bool, {gguf::Value::make_bool(true)});
  e = error_loading(broken_nvfp4(dir + "/b.gguf", "", &short_array, ""));
  EXPECT_NE(e.find("tensor/value length mismatch (14 vs 1)"), std::string::npos) << e;
  e = error_loading(broken_nvfp4(dir + "/c.gguf", "", nullptr, "blk.1.attn_v.scale"));
  EXPECT_NE(e.find("c.gguf: tensor 'blk.1.attn_v.scale' must be one F32 value, is F16"), std::string::npos) << e;
}

}  // namespace
}  // namespace qlens
