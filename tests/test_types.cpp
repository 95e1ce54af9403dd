// The element types: every type id of ggml 0c1e570 has its row (the list in
// src/core/types.tsv); a model with gpt-oss's MXFP4 experts
// (tests/data/llama-moe-mxfp4.gguf) runs; and a file holding a type the
// engine can name and size but not compute with (tests/data/llama-moe-f64.gguf:
// the same model with F64 experts) is inspected, planned and copied by
// quantize, and refused by name by every tool that would compute with it
// before it does any work.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/json_reader.h"
#include "core/text_file.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "qlens/types.h"
#include "test_util.h"
#include "tools/quantize/quantize_stats.h"

namespace qlens {
namespace {

const std::string kMxfp4Model = std::string(QLENS_SOURCE_DIR) + "/tests/data/llama-moe-mxfp4.gguf";
const std::string kF64Model = std::string(QLENS_SOURCE_DIR) + "/tests/data/llama-moe-f64.gguf";
const char* const kExpertTensors[] = {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight",
                                      "blk.0.ffn_down_exps.weight"};

int qlens(const std::string& args, std::string* out) {
  return test::run_command(std::string(QLENS_BINARY) + " " + args, out);
}

bool is_removed_id(uint32_t id) { return id == 4 || id == 5 || (id >= 31 && id <= 33) || (id >= 36 && id <= 38); }

TEST(Types, EveryGgmlTypeIdHasItsRow) {
  EXPECT_EQ(kDTypeCount, 43u);  // ggml 0c1e570's GGML_TYPE_COUNT
  for (uint32_t id = 0; id < kDTypeCount; ++id) {
    SCOPED_TRACE(id);
    const TypeFormat* format = find_type_format(id);
    const TypeTraits* traits = find_type_traits(id);
    if (is_removed_id(id)) {
      EXPECT_EQ(format, nullptr);
      EXPECT_EQ(traits, nullptr);
      continue;
    }
    ASSERT_NE(format, nullptr);
    ASSERT_NE(traits, nullptr);
    EXPECT_STREQ(traits->name, format->name);
    EXPECT_EQ(traits->block_size, format->block_size);
    EXPECT_EQ(traits->block_bytes, format->block_bytes);
    EXPECT_EQ(format->is_quantized, format->block_size > 1);  // as in ggml's type_traits
    EXPECT_EQ(type_from_name(format->name), static_cast<DType>(id));
  }
  EXPECT_EQ(find_type_format(kDTypeCount), nullptr);
  EXPECT_EQ(find_type_traits(kDTypeCount), nullptr);
}

TEST(Types, NewTypesAreSizedAsGgmlSizesThem) {
  struct Expected {
    DType type;
    uint32_t id;
    const char* name;
    int64_t block;
    size_t bytes;
  };
  // ggml-common.h: block_mxfp4 {e8m0 e; qs[16]}, block_nvfp4 {ue4m3 d[4]; qs[32]},
  // block_q1_0 {half d; qs[16]}, block_q2_0 {half d; qs[16]}.
  for (const Expected& e : {Expected{DType::MXFP4, 39, "MXFP4", 32, 17}, Expected{DType::NVFP4, 40, "NVFP4", 64, 36},
                            Expected{DType::Q1_0, 41, "Q1_0", 128, 18}, Expected{DType::Q2_0, 42, "Q2_0", 64, 18}}) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(static_cast<uint32_t>(e.type), e.id);
    const TypeTraits& t = type_traits(e.type);
    EXPECT_EQ(type_name(e.type), e.name);
    EXPECT_EQ(t.block_size, e.block);
    EXPECT_EQ(t.block_bytes, e.bytes);
    EXPECT_TRUE(t.is_quantized);
    EXPECT_NE(t.to_float, nullptr);  // read (tests/test_quant_lowbit.cpp)
  }
  EXPECT_EQ(type_from_name("mxfp4"), DType::MXFP4);
  EXPECT_EQ(row_bytes(DType::MXFP4, 64), 34u);
}

TEST(Types, Mxfp4FileOpensWithItsTensorsSized) {
  auto f = gguf::File::open(kMxfp4Model);
  for (const char* name : kExpertTensors) {
    const gguf::TensorInfo* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, DType::MXFP4);
    EXPECT_EQ(t->nelements(), 32 * 32 * 2);
    EXPECT_EQ(t->nbytes, 64u * 17u);
  }
}

TEST(Types, Mxfp4ModelRuns) {
  const std::string text = test::temp_dir() + "/letters.txt";
  std::string letters;
  for (int i = 0; i < 40; ++i) letters += "a b c d e f g h a b c d e f g h\n";
  write_file_atomic(text, letters);
  std::string out;
  ASSERT_EQ(qlens("perplexity -m " + kMxfp4Model + " -f " + text + " -c 32", &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "Final estimate: PPL = ")) << out;
  // Quantizing it again is refused as llama-quantize refuses it, by name.
  ASSERT_EQ(qlens("quantize --dry-run " + kMxfp4Model + " Q8_0", &out), 1) << out;
  EXPECT_TRUE(test::contains(out, "'blk.0.ffn_gate_exps.weight' is already MXFP4")) << out;
}

TEST(Types, ModelLoadRefusesAnF64ModelNamingTensorAndType) {
  const std::string err = test::error_of([] { Model::load(kF64Model); });
  EXPECT_TRUE(test::contains(err, "'blk.0.ffn_gate_exps.weight'")) << err;
  EXPECT_TRUE(test::contains(err, "F64")) << err;
  EXPECT_TRUE(test::contains(err, "cannot compute")) << err;
}

TEST(Types, QuantizeStatsRefusesBeforeMeasuringAndMeasuresWhatItCan) {
  const std::string err = test::error_of([] { tools::quantize_stats(kF64Model, {}); });
  EXPECT_TRUE(test::contains(err, "'blk.0.ffn_gate_exps.weight'")) << err;
  EXPECT_TRUE(test::contains(err, "F64")) << err;
  tools::QuantizeStatsOptions attention_only;
  attention_only.tensor_filter = "attn_q";
  attention_only.types = {DType::Q8_0};
  const auto r = tools::quantize_stats(kF64Model, attention_only);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].tensor, "blk.0.attn_q.weight");
}

TEST(Types, InspectNamesF64) {
  std::string out;
  ASSERT_EQ(qlens("inspect " + kF64Model, &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "blk.0.ffn_down_exps.weight  F64   [32, 32, 2]  16384    64.00")) << out;
  ASSERT_EQ(qlens("inspect --json " + kF64Model, &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "\"type\": \"F64\"")) << out;
  ASSERT_EQ(qlens("inspect --check-tensors " + kF64Model, &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "every value of the 10 tensors is finite (3 more of types qlens cannot read")) << out;
}

TEST(Types, QuantizeDryRunPlansF64AsCopied) {
  const std::string json = test::temp_dir() + "/plan.json";
  std::string out;
  ASSERT_EQ(qlens("quantize --dry-run " + kF64Model + " Q8_0 --json " + json, &out), 0) << out;
  EXPECT_TRUE(test::contains(out, "16384  F64: copied as is (qlens cannot compute with it)")) << out;
  const JsonValue plan = parse_json(read_text_file(json), json);
  int copied = 0;
  for (const JsonValue& t : plan.at("tensors").as_array()) {
    if (t.at("source_type").as_string() != "F64") continue;
    EXPECT_EQ(t.at("type").as_string(), "F64");
    EXPECT_TRUE(test::contains(t.at("reason").as_string(), "copied as is")) << t.at("reason").as_string();
    ++copied;
  }
  EXPECT_EQ(copied, 3);
}

TEST(Types, QuantizeCopiesF64TensorsByteForByte) {
  const std::string quantized = test::temp_dir() + "/q8_0.gguf";
  std::string out;
  // A rule for the experts is overruled too: their values cannot be read.
  ASSERT_EQ(qlens("quantize " + kF64Model + " " + quantized + " Q8_0 --tensor-type exps=Q4_0", &out), 0) << out;
  auto in = gguf::File::open(kF64Model);
  auto q = gguf::File::open(quantized);
  for (const char* name : kExpertTensors) {
    SCOPED_TRACE(name);
    const gguf::TensorInfo* a = in->find_tensor(name);
    const gguf::TensorInfo* b = q->find_tensor(name);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->type, DType::F64);
    EXPECT_EQ(b->ne, a->ne);
    ASSERT_EQ(b->nbytes, a->nbytes);
    EXPECT_EQ(std::memcmp(in->tensor_data(*a), q->tensor_data(*b), a->nbytes), 0);
  }
  EXPECT_EQ(q->find_tensor("blk.0.attn_q.weight")->type, DType::Q8_0);
}

// Each tool that would compute with F64 stops before any work: the text
// (which does not exist) is never opened, the error names tensor and type.
TEST(Types, ToolsThatComputeRefuseF64First) {
  const std::string m = kF64Model, text = test::temp_dir() + "/missing.txt";
  const std::string runs[] = {
      "perplexity -m " + m + " -f " + text,
      "imatrix -m " + m + " -f " + text,
      "compare --ref " + m + " -m " + m + " -f " + text,
      "sensitivity -m " + m + " -f " + text,
      "generate -m " + m + " -p hello -n 4",
      "bench -m " + m + " -p 8 -n 2 -r 1",
      "quantize-stats " + m,
  };
  for (const std::string& run : runs) {
    SCOPED_TRACE(run);
    std::string out;
    EXPECT_EQ(qlens(run, &out), 1) << out;
    EXPECT_TRUE(test::contains(out, "tensor 'blk.0.ffn_gate_exps.weight' has type F64")) << out;
    EXPECT_FALSE(test::contains(out, "missing.txt")) << out;
  }
}

}  // namespace
}  // namespace qlens
