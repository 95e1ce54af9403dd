// qlens sensitivity: quantization probes one tensor at a time, noise
// predictions against them, the JSON round trip, and resuming.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <random>

#include "core/json_reader.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/sensitivity/sensitivity.h"
#include "tools/sensitivity/pooled_fit.h"
#include "tools/sensitivity/sensitivity_dist.h"
#include "tools/sensitivity/sensitivity_run.h"

namespace qlens {
namespace {

constexpr const char* kStories = "models/stories260K.gguf";
constexpr const char* kText = "data/tinystories/tinystories_val.txt";

tools::SensitivityOptions small_options() {
  tools::SensitivityOptions o;
  o.n_ctx = 128;
  o.n_batch = 128;
  o.max_chunks = 2;
  o.n_threads = 2;
  o.types = {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::F16};
  return o;
}

const tools::SensitivityCandidate* find(const tools::SensitivityTensor& t, DType type) {
  for (const auto& c : t.candidates)
    if (c.type == type) return &c;
  return nullptr;
}

TEST(Sensitivity, QuantProbesOrderAsTheBitsAndRoundTripThroughJson) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto model = Model::load(model_path);
  const auto tokens = model->vocab().tokenize(read_text_file(text_path), true);
  tools::SensitivityOptions opt = small_options();
  opt.tensors_regex = "blk\\.1\\.|^output\\.";
  const auto r = tools::measure_sensitivity(*model, tokens, opt);
  ASSERT_TRUE(r.complete);
  ASSERT_EQ(r.tensors.size(), 8u);  // 7 weights of layer 1 and output.weight
  EXPECT_GT(r.reference_ppl, 1.0);
  EXPECT_EQ(r.n_tokens_scored, 2 * 63);
  for (const auto& t : r.tensors) {
    const auto* src = find(t, t.source_type);
    ASSERT_NE(src, nullptr) << t.name;
    EXPECT_EQ(src->delta_kld, 0.0) << t.name;
    if (t.role == "ffn_down") {  // rows of 172 fit no block type: only F16 besides F32
      EXPECT_EQ(find(t, DType::Q4_0), nullptr);
      EXPECT_NE(find(t, DType::F16), nullptr);
      continue;
    }
    const double q4 = find(t, DType::Q4_0)->delta_kld, q5 = find(t, DType::Q5_0)->delta_kld,
                 q8 = find(t, DType::Q8_0)->delta_kld, f16 = find(t, DType::F16)->delta_kld;
    EXPECT_GT(q4, q5) << t.name;
    EXPECT_GT(q5, q8) << t.name;
    EXPECT_GT(q8, f16) << t.name;
    EXPECT_GT(find(t, DType::Q4_0)->weighted_error, find(t, DType::Q8_0)->weighted_error) << t.name;
    EXPECT_LT(find(t, DType::Q4_0)->bytes, find(t, DType::Q8_0)->bytes) << t.name;
  }
  const std::string json = tools::sensitivity_json(r);
  const auto back = tools::sensitivity_from_json(json, "mem.json");
  EXPECT_EQ(tools::sensitivity_json(back), json);
  EXPECT_THROW(tools::sensitivity_from_json("{\"schema_version\": 2}", "bad.json"), Error);
  EXPECT_THROW(tools::sensitivity_from_json("{\"schema_version\": 3}", "new.json"), Error);

  // Schema 2 (docs/JSON.md): paths under inputs, the settings, the new names.
  const JsonValue doc = parse_json(json, "mem.json");
  EXPECT_EQ(doc.at("schema_version").as_int(), 2);
  EXPECT_EQ(doc.at("inputs").at("model").as_string(), model_path);
  EXPECT_TRUE(doc.at("inputs").at("imatrix").is_null());
  EXPECT_EQ(doc.find("model"), nullptr);
  EXPECT_EQ(doc.at("settings").at("mode").as_string(), "quant");
  EXPECT_EQ(doc.at("settings").at("n_ctx").as_int(), opt.n_ctx);
  EXPECT_EQ(doc.at("reference").at("n_tokens_scored").as_int(), r.n_tokens_scored);
  for (const JsonValue& t : doc.at("tensors").as_array()) {
    EXPECT_EQ(t.find("name"), nullptr);
    const std::string name = t.at("tensor").as_string();
    EXPECT_EQ(t.at("layer").is_null(), name.rfind("blk.", 0) != 0) << name;
    for (const JsonValue& c : t.at("candidates").as_array()) EXPECT_GT(c.at("bits_per_weight").as_number(), 0);
  }
  EXPECT_EQ(back.settings.n_ctx, opt.n_ctx);
  EXPECT_EQ(tools::sensitivity_settings_mismatch(back.settings, r.settings), "");
}

// A schema-1 file (qlens before schema 2) still reads: for --resume, plan and report.
TEST(Sensitivity, ReadsSchemaOneFiles) {
  const std::string v1 = R"({"schema_version": 1, "tool": "qlens sensitivity", "model": "m.gguf", "text": "t.txt",
    "mode": "noise", "imatrix": "i.gguf", "complete": false, "reference": {"n_tokens": 126, "ppl": 4.5},
    "fixed_bytes": 10, "n_weights_total": 100,
    "tensors": [{"name": "output.weight", "role": "output", "layer": -1, "n_elements": 64, "shape": [8, 8],
      "source_type": "F32", "candidates": [{"type": "Q8_0", "bytes": 68, "bpw": 8.5, "weighted_error": 0.1,
      "delta_kld": 0.01, "delta_kld_error": null, "delta_ppl": null, "measured": false}]}]})";
  const auto r = tools::sensitivity_from_json(v1, "v1.json");
  EXPECT_EQ(r.model_path, "m.gguf");
  EXPECT_EQ(r.text_path, "t.txt");
  EXPECT_EQ(r.imatrix_path, "i.gguf");
  EXPECT_EQ(r.mode, tools::SensitivityMode::Noise);
  EXPECT_FALSE(r.settings_recorded);
  EXPECT_EQ(r.n_tokens_scored, 126);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].name, "output.weight");
  EXPECT_EQ(r.tensors[0].layer, -1);
  EXPECT_EQ(r.tensors[0].candidates.at(0).bpw, 8.5);
  // Written back, it is schema 2.
  const JsonValue doc = parse_json(tools::sensitivity_json(r), "v2.json");
  EXPECT_EQ(doc.at("schema_version").as_int(), 2);
  EXPECT_TRUE(doc.at("tensors").at(0).at("layer").is_null());
  EXPECT_EQ(doc.at("tensors").at(0).at("tensor").as_string(), "output.weight");
}

TEST(Sensitivity, SettingsMismatchNamesTheFlags) {
  tools::SensitivityOptions a, b;
  EXPECT_EQ(tools::sensitivity_settings_mismatch(a, b), "");
  b.types = tools::default_sensitivity_types(false);  // the defaults spelt out are the defaults
  EXPECT_EQ(tools::sensitivity_settings_mismatch(a, b), "");
  {  // with an imatrix the defaults reach down to the 1.5-bit i-quants
    tools::SensitivityOptions with;
    with.imatrix_path = "im.gguf";
    const std::vector<DType> t = tools::sensitivity_types(with);
    for (DType low : {DType::IQ1_S, DType::IQ2_XXS, DType::Q1_0, DType::Q2_0})
      EXPECT_NE(std::find(t.begin(), t.end(), low), t.end()) << type_name(low);
    EXPECT_EQ(t.size(), tools::default_sensitivity_types(false).size() + 10);
  }
  b.tensors_regex = "blk";  // a filter changes which tensors, not their results
  EXPECT_EQ(tools::sensitivity_settings_mismatch(a, b), "");
  b.types = {DType::Q4_0, DType::Q8_0};
  b.n_ctx = 128;
  EXPECT_TRUE(test::contains(tools::sensitivity_settings_mismatch(a, b), "-c: 512 in the file, 128 now"));
  EXPECT_TRUE(test::contains(tools::sensitivity_settings_mismatch(a, b), "--types: "));
  EXPECT_TRUE(test::contains(tools::sensitivity_settings_mismatch(a, b), ",Q8_0 now"));
}

TEST(Sensitivity, NoisePredictionsFollowTheMeasuredProbes) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto model = Model::load(model_path);
  const auto tokens = model->vocab().tokenize(read_text_file(text_path), true);
  tools::SensitivityOptions opt = small_options();
  opt.tensors_regex = "blk\\.[02]\\.";
  const auto quant = tools::measure_sensitivity(*model, tokens, opt);
  opt.mode = tools::SensitivityMode::Noise;
  const auto noise = tools::measure_sensitivity(*model, tokens, opt);
  ASSERT_EQ(quant.tensors.size(), noise.tensors.size());
  // log-log correlation of predicted against measured ΔKLD over (tensor, type).
  std::vector<double> x, y;
  for (size_t i = 0; i < quant.tensors.size(); ++i)
    for (const auto& c : quant.tensors[i].candidates) {
      const auto* p = find(noise.tensors[i], c.type);
      ASSERT_NE(p, nullptr);
      if (c.delta_kld > 0 && p->delta_kld > 0) {
        x.push_back(std::log(c.delta_kld));
        y.push_back(std::log(p->delta_kld));
      }
    }
  ASSERT_GT(x.size(), 20u);
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / x.size();
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / y.size();
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  const double corr = sxy / std::sqrt(sxx * syy);
  std::printf("noise vs quant: log-log correlation %.3f over %zu pairs\n", corr, x.size());
  EXPECT_GT(corr, 0.9);
  for (const auto& t : noise.tensors) EXPECT_EQ(t.noise_points.size(), 1u) << t.name;
}

TEST(Sensitivity, GroupsQuantizeEveryMemberAtOnce) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto model = Model::load(model_path);
  const auto tokens = model->vocab().tokenize(read_text_file(text_path), true);
  tools::SensitivityOptions opt = small_options();
  opt.max_chunks = 1;
  opt.types = {DType::Q4_0, DType::Q8_0};
  opt.group = tools::SensitivityGroup::Role;
  const auto r = tools::measure_sensitivity(*model, tokens, opt);
  EXPECT_TRUE(r.tensors.empty());
  ASSERT_EQ(r.groups.size(), 9u);  // 7 block roles, output, token_embd
  std::map<std::string, const tools::SensitivityTensor*> by_name;
  for (const auto& g : r.groups) by_name[g.name] = &g;
  ASSERT_TRUE(by_name.count("attn_v"));
  EXPECT_EQ(by_name["attn_v"]->members.size(), 5u);
  EXPECT_GT(find(*by_name["attn_v"], DType::Q4_0)->delta_kld, find(*by_name["attn_v"], DType::Q8_0)->delta_kld);
  EXPECT_EQ(find(*by_name["ffn_down"], DType::Q4_0), nullptr);  // rows of 172 fit neither
  // Together they matter more than any one of them alone.
  opt.group = tools::SensitivityGroup::Tensor;
  opt.tensors_regex = "attn_v";
  const auto single = tools::measure_sensitivity(*model, tokens, opt);
  for (const auto& t : single.tensors)
    EXPECT_LT(find(t, DType::Q4_0)->delta_kld, find(*by_name["attn_v"], DType::Q4_0)->delta_kld) << t.name;
  const auto back = tools::sensitivity_from_json(tools::sensitivity_json(r), "groups.json");
  EXPECT_EQ(tools::sensitivity_json(back), tools::sensitivity_json(r));
}

// Layer-range decoding composes: the stream leaving layers [0, L) fed to
// layers [L, n_layer) gives the logits of one whole pass, bit for bit, at
// every L, also across batches (the later batches' attention reads the keys
// the range's layers wrote), on llama and on Gemma 3 (sliding window, tied
// output, scaled embedding, softcap).
TEST(Sensitivity, LayerRangesComposeToTheWholeModel) {
  for (const char* name : {kStories, "reference/synth/gemma3.gguf", "reference/synth/qwen3moe.gguf"}) {
    QLENS_REQUIRE_SHARED(model_path, name);
    auto model = Model::load(model_path);
    ContextOptions co;
    co.n_ctx = 96;
    co.n_batch = 40;
    co.n_threads = 2;
    Context ctx(*model, co);
    std::vector<Token> tokens(96);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>((i * 7919 + 3) % model->hparams().n_vocab);
    ASSERT_TRUE(ctx.decode(tokens, true));
    std::vector<float> whole;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto l = ctx.logits(static_cast<int64_t>(i));
      whole.insert(whole.end(), l.begin(), l.end());
    }
    const int n_layer = static_cast<int>(model->hparams().n_layer);
    for (int split = 0; split <= n_layer; ++split) {
      std::vector<float> stream;
      ctx.clear();
      ASSERT_TRUE(ctx.decode_layers(tokens, 0, split, nullptr, &stream));
      ASSERT_EQ(stream.size(), tokens.size() * model->hparams().n_embd);
      ctx.clear();
      ASSERT_TRUE(ctx.decode_layers(tokens, split, n_layer, stream.data(), nullptr));
      for (size_t i = 0; i < tokens.size(); ++i) {
        const auto l = ctx.logits(static_cast<int64_t>(i));
        ASSERT_EQ(0, std::memcmp(l.data(), &whole[i * l.size()], l.size() * sizeof(float)))
            << name << ": split at layer " << split << ", token " << i;
      }
    }
    // The logits of the later tokens only: the output matrix on fewer rows
    // gives the same rows (first_logit inside the second batch, and past it).
    for (int64_t first_logit : {50, 81}) {
      ctx.clear();
      ASSERT_TRUE(ctx.decode_layers(tokens, 0, n_layer, nullptr, nullptr, first_logit));
      EXPECT_THROW(ctx.logits(first_logit - 1), Error);
      for (size_t i = first_logit; i < tokens.size(); ++i) {
        const auto l = ctx.logits(static_cast<int64_t>(i));
        ASSERT_EQ(0, std::memcmp(l.data(), &whole[i * l.size()], l.size() * sizeof(float)))
            << name << ": logits from " << first_logit << ", token " << i;
      }
    }
    EXPECT_THROW(ctx.decode_layers(tokens, 1, 1, nullptr, nullptr), Error);
    EXPECT_THROW(ctx.decode_layers(tokens, 1, n_layer, nullptr, nullptr), Error);
    EXPECT_THROW(ctx.decode_layers(tokens, 0, n_layer + 1, nullptr, nullptr), Error);
  }
}

// The residual cache changes what is computed, not the result: every probe
// (tensors of each layer and the output, noise, layer groups) equals the
// full passes' bit for bit.
TEST(Sensitivity, LayerCacheGivesTheResultsOfFullPasses) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto model = Model::load(model_path);
  const auto tokens = model->vocab().tokenize(read_text_file(text_path), true);
  tools::SensitivityOptions opt = small_options();
  opt.n_batch = 48;  // several batches per chunk
  opt.types = {DType::Q4_0, DType::Q8_0};
  auto both = [&](tools::SensitivityOptions o) {
    o.layer_cache = false;
    const std::string full = tools::sensitivity_json(tools::measure_sensitivity(*model, tokens, o));
    o.layer_cache = true;
    const std::string cached = tools::sensitivity_json(tools::measure_sensitivity(*model, tokens, o));
    EXPECT_EQ(cached, full);
  };
  opt.tensors_regex = "blk\\.[024]\\.attn_[qv]|blk\\.4\\.ffn_up|^output|token_embd";
  both(opt);
  opt.mode = tools::SensitivityMode::Noise;
  both(opt);
  opt.mode = tools::SensitivityMode::Quant;
  opt.tensors_regex = "";
  opt.max_chunks = 1;
  opt.group = tools::SensitivityGroup::Layer;
  both(opt);
}

TEST(Sensitivity, ResumedRunEqualsAFreshOne) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string dir = test::temp_dir();
  const std::string common = "sensitivity -m " + model_path + " -f " + text_path +
                             " -c 128 -b 128 --chunks 1 -t 2 --types Q4_0,Q8_0 --top 0";
  std::string out;
  ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " " + common + " --json " + dir + "/fresh.json", &out), 0)
      << out;
  // An interrupted run: only layer 0 measured so far.
  ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " " + common + " --tensors 'blk\\.0\\.' --json " + dir +
                                  "/resumed.json",
                              &out),
            0)
      << out;
  ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " " + common + " --json " + dir + "/resumed.json --resume",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("resuming: 7 tensors"), std::string::npos) << out;
  EXPECT_EQ(read_text_file(dir + "/resumed.json"), read_text_file(dir + "/fresh.json"));
  // Resuming with settings that change the probes is refused, naming the flag; the file is kept.
  const std::string before = read_text_file(dir + "/resumed.json");
  const std::string other = "sensitivity -m " + model_path + " -f " + text_path +
                            " -c 128 -b 128 --chunks 1 -t 2 --types Q4_0 --top 0";
  EXPECT_NE(test::run_command(std::string(QLENS_BINARY) + " " + other + " --json " + dir + "/resumed.json --resume",
                              &out),
            0);
  EXPECT_TRUE(test::contains(out, "--types: Q4_0,Q8_0 in the file, Q4_0 now")) << out;
  EXPECT_EQ(read_text_file(dir + "/resumed.json"), before);
}

// ---- a run's policy (tools/sensitivity/sensitivity_run.h) ----

tools::SensitivityResult one_tensor_result(const tools::SensitivityOptions& settings) {
  tools::SensitivityResult r;
  r.model_path = "m.gguf";
  r.settings = settings;
  r.mode = settings.mode;
  tools::SensitivityTensor t;
  t.name = "blk.0.attn_q.weight";
  t.role = "attn_q";
  t.layer = 0;
  t.n_elements = 64;
  t.shape = {8, 8};
  tools::SensitivityCandidate c;
  c.type = DType::Q8_0;
  c.bytes = 68;
  c.bpw = 8.5;
  c.delta_kld = 0.01;
  c.measured = true;
  t.candidates.push_back(c);
  r.tensors.push_back(t);
  return r;
}

TEST(SensitivityRun, CheckpointIsResumedOnlyForTheSameModelAndSettings) {
  const std::string dir = test::temp_dir();
  const std::string path = dir + "/s.json";
  tools::SensitivityOptions opt = small_options();
  EXPECT_FALSE(tools::sensitivity_resume_point(path, "m.gguf", opt).has_value()) << "no file: a fresh start";

  tools::write_sensitivity_checkpoint(path, one_tensor_result(opt), "t.txt");
  const auto back = tools::sensitivity_resume_point(path, "m.gguf", opt);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->text_path, "t.txt");  // recorded by the checkpoint
  ASSERT_EQ(back->tensors.size(), 1u);
  EXPECT_EQ(back->tensors[0].name, "blk.0.attn_q.weight");
  EXPECT_EQ(back->tensors[0].candidates.at(0).delta_kld, 0.01);
  tools::SensitivityOptions filtered = opt;
  filtered.tensors_regex = "blk\\.1\\.";  // another filter: the same probes
  EXPECT_TRUE(tools::sensitivity_resume_point(path, "m.gguf", filtered).has_value());

  EXPECT_EQ(test::error_of([&] { tools::sensitivity_resume_point(path, "other.gguf", opt); }),
            "--resume: " + path + " was made for m.gguf, not other.gguf");
  tools::SensitivityOptions longer = opt;
  longer.n_ctx = 256;
  EXPECT_EQ(test::error_of([&] { tools::sensitivity_resume_point(path, "m.gguf", longer); }),
            "--resume: " + path +
                " was made with other settings (-c: 128 in the file, 256 now); give the same flags, or another "
                "--json file to start afresh");
}

TEST(SensitivityRun, SchemaOneCheckpointsRecordTheirModeAlone) {
  const std::string path = test::temp_dir() + "/v1.json";
  write_file_atomic(path, R"({"schema_version": 1, "tool": "qlens sensitivity", "model": "m.gguf", "text": "t.txt",
    "mode": "noise", "imatrix": "i.gguf", "complete": false, "reference": {"n_tokens": 126, "ppl": 4.5},
    "fixed_bytes": 10, "n_weights_total": 100,
    "tensors": [{"name": "output.weight", "role": "output", "layer": -1, "n_elements": 64, "shape": [8, 8],
      "source_type": "F32", "candidates": [{"type": "Q8_0", "bytes": 68, "bpw": 8.5, "weighted_error": 0.1,
      "delta_kld": 0.01, "delta_kld_error": null, "delta_ppl": null, "measured": false}]}]})");
  tools::SensitivityOptions opt = small_options();
  opt.mode = tools::SensitivityMode::Noise;
  opt.n_ctx = 999;  // not recorded: taken as given
  const auto back = tools::sensitivity_resume_point(path, "m.gguf", opt);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->tensors.size(), 1u);
  opt.mode = tools::SensitivityMode::Quant;
  EXPECT_TRUE(test::contains(test::error_of([&] { tools::sensitivity_resume_point(path, "m.gguf", opt); }),
                             "(--mode: noise in the file, quant now)"));
}

TEST(SensitivityRun, TheModelMustBeUnquantizedAndTheImatrixCoverageCountsTheProbes) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  const std::string dir = test::temp_dir();
  const auto model = Model::load(model_path);
  EXPECT_EQ(test::error_of([&] { tools::require_unquantized_model(*model, model_path); }), "");
  std::string out;
  ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " quantize " + model_path + " " + dir + "/q8.gguf Q8_0",
                              &out),
            0)
      << out;
  const auto quantized = Model::load(dir + "/q8.gguf");
  const std::string error = test::error_of([&] { tools::require_unquantized_model(*quantized, "q8.gguf"); });
  EXPECT_EQ(error.rfind("qlens sensitivity: q8.gguf is quantized (", 0), 0u) << error;
  EXPECT_TRUE(test::contains(error, "); give the F32/F16/BF16 model")) << error;

  // An imatrix with one entry, over the probes of two filters.
  tools::Imatrix m;
  tools::ImatrixEntry e;
  e.n_cols = model->weights().at("blk.0.attn_q.weight")->ne[0];
  e.sum2.assign(e.n_cols, 1.0);
  e.counts = {128};
  m.entries["blk.0.attn_q.weight"] = e;
  m.chunk_count = 1;
  m.chunk_size = 128;
  tools::SensitivityOptions opt = small_options();
  opt.imatrix_path = dir + "/im.gguf";
  tools::save_imatrix_gguf(m, opt.imatrix_path);
  opt.tensors_regex = "blk\\.0\\.attn_(q|k)";
  const tools::ImatrixCoverage two = tools::sensitivity_imatrix_coverage(*model, opt);
  EXPECT_EQ(two.n_weights, 2);
  EXPECT_EQ(two.n_covered(), 1);
  EXPECT_EQ(two.missing, (std::vector<std::string>{"blk.0.attn_k.weight"}));
  opt.tensors_regex = "";
  const tools::ImatrixCoverage all = tools::sensitivity_imatrix_coverage(*model, opt);
  int64_t probed = 0;
  for (const Tensor* w : tools::sensitivity_probed_weights(*model, ""))
    probed += tools::tensor_role(w->name) != "token_embd";
  EXPECT_EQ(all.n_weights, probed);  // token_embd's rows are looked up: no importance
  EXPECT_GT(all.n_weights, 2);
  EXPECT_EQ(all.n_covered(), 1);
}


// ---- sharing the probes among ranks (tools/sensitivity/sensitivity_dist.h) ----

TEST(SensitivityDist, SharesBalanceTheCostWithinOneUnit) {
  // Units in the cache's order: later layers cost less (the layer cache).
  std::vector<double> costs;
  for (int layer = 0; layer < 30; ++layer)
    for (int t = 0; t < 7; ++t) costs.push_back(tools::sensitivity_unit_cost(t == 6 ? 4 : 6, layer, 30));
  for (int n_ranks : {1, 2, 3, 8}) {
    const std::vector<int> owner = tools::sensitivity_shares(costs, n_ranks);
    ASSERT_EQ(owner.size(), costs.size());
    std::vector<double> load(n_ranks, 0.0);
    for (size_t i = 0; i < costs.size(); ++i) {
      ASSERT_GE(owner[i], 0);
      ASSERT_LT(owner[i], n_ranks);
      load[owner[i]] += costs[i];
    }
    const double max_cost = *std::max_element(costs.begin(), costs.end());
    EXPECT_LE(*std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end()), max_cost)
        << n_ranks << " ranks";
  }
  EXPECT_EQ(tools::sensitivity_unit_cost(2, 30, 30), 2.0) << "the output matrix: one layer's worth per pass";
  EXPECT_EQ(tools::sensitivity_unit_cost(1, 0, 30), 31.0);
}

TEST(SensitivityDist, UnitsRoundTripAsBytes) {
  tools::SensitivityTensor t;
  t.name = "blk.3.ffn_up_exps.weight";
  t.role = "ffn_up_exps";
  t.layer = 3;
  t.n_elements = 1 << 20;
  t.shape = {64, 128};
  t.source_type = DType::BF16;
  t.noise_coefficient = 1.0 / 3;
  t.noise_exponent = 0.7;
  t.noise_points = {{1e-3, 2e-5}, {4e-3, 9e-5}};
  t.members = {"a", "b"};
  tools::SensitivityCandidate c;
  c.type = DType::IQ2_XXS;
  c.bytes = 12345;
  c.delta_kld = 0.1 + 1e-17;
  c.measured = true;
  t.candidates = {c, c};
  const auto back = tools::parse_sensitivity_units(tools::serialize_sensitivity_units({t, t}) +
                                                   tools::serialize_sensitivity_units({t}));
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(tools::serialize_sensitivity_units({back[2]}), tools::serialize_sensitivity_units({t}));
  EXPECT_EQ(back[0].noise_points, t.noise_points);
  EXPECT_EQ(back[0].members, t.members);
  EXPECT_EQ(back[0].candidates[1].delta_kld, c.delta_kld);
  EXPECT_EQ(back[0].candidates[1].type, DType::IQ2_XXS);
  const std::string bytes = tools::serialize_sensitivity_units({t});
  EXPECT_THROW(tools::parse_sensitivity_units(bytes.substr(0, bytes.size() - 3)), Error) << "a cut message";
}


// ---- --mode pooled's design and fit (tools/sensitivity/pooled_fit.h) ----

TEST(SensitivityPooled, SignsAreBalancedAndSeeded) {
  const auto sign = tools::balanced_signs(126, 30, 7);
  ASSERT_EQ(sign.size(), 30u);
  for (int i = 0; i < 126; ++i) {
    int plus = 0;
    for (const auto& pass : sign) {
      EXPECT_TRUE(pass[i] == 1 || pass[i] == -1);
      plus += pass[i] == 1;
    }
    EXPECT_EQ(plus, 15) << i;
  }
  EXPECT_EQ(tools::balanced_signs(126, 30, 7), sign) << "seeded";
  EXPECT_NE(tools::balanced_signs(126, 30, 8), sign);
  EXPECT_THROW(tools::balanced_signs(10, 7, 7), Error);
}

// Passes made as the model makes them: each unit's own shift v_i (random,
// in a space of 20000 dimensions, so the cross terms are what they are in
// a real run), signed and summed. The fit gives back each unit's |v_i|²/2,
// and ranks the units nearly as their true values do; without the signed
// passes (all +), nothing tells the units apart.
TEST(SensitivityPooled, FitRecoversEachUnitFromTheGram) {
  const int n = 60, m = 24, dims = 20000;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::uniform_real_distribution<double> spread(-2.0, 2.0);
  std::vector<double> truth(n), energy(n);
  std::vector<int> group(n);
  std::vector<std::vector<double>> v(n, std::vector<double>(dims));
  for (int i = 0; i < n; ++i) {
    group[i] = i % 6;
    energy[i] = 1e-6 * (1 + i % 5);
    truth[i] = energy[i] * (1 + group[i]) * std::exp(0.5 * spread(rng));  // ΔKLD of unit i alone
    const double scale = std::sqrt(2 * truth[i] / dims);
    for (double& x : v[i]) x = scale * gauss(rng);
  }
  const auto gram_of = [&](const std::vector<std::vector<int>>& sign) {
    std::vector<std::vector<double>> shift(m, std::vector<double>(dims, 0.0)), g(m, std::vector<double>(m, 0.0));
    for (int p = 0; p < m; ++p)
      for (int i = 0; i < n; ++i)
        for (int d = 0; d < dims; ++d) shift[p][d] += sign[p][i] * v[i][d];
    for (int p = 0; p < m; ++p)
      for (int q = 0; q < m; ++q)
        for (int d = 0; d < dims; ++d) g[p][q] += shift[p][d] * shift[q][d];
    return g;
  };
  const auto sign = tools::balanced_signs(n, m, 3);
  const tools::SignedFit fit = tools::fit_signed(sign, gram_of(sign), energy, group);
  ASSERT_EQ(fit.delta_kld.size(), static_cast<size_t>(n));
  double total = 0, fitted_total = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_GT(fit.delta_kld[i], 0) << i;
    total += truth[i];
    fitted_total += fit.delta_kld[i];
  }
  EXPECT_NEAR(fitted_total / total, 1.0, 0.1);
  EXPECT_GT(test::spearman(fit.delta_kld, truth), 0.9);
  EXPECT_LT(fit.relative_rms, 0.5);
  const std::vector<std::vector<int>> unsigned_passes(m, std::vector<int>(n, 1));
  EXPECT_LT(test::spearman(tools::fit_signed(unsigned_passes, gram_of(unsigned_passes), energy, group).delta_kld, truth),
            0.6);
}

TEST(SensitivityPooled, RunsOnAModelAndPredictsEveryCandidate) {
  auto model = Model::load(test::tiny_model_path());
  const auto tokens = test::spread_tokens(model->hparams().n_vocab, 200);
  tools::SensitivityOptions opt;
  opt.mode = tools::SensitivityMode::Pooled;
  opt.n_ctx = 64;
  opt.n_batch = 64;
  opt.max_chunks = 2;
  opt.n_threads = 1;
  opt.cpu = test::cpu_options();
  opt.types = {DType::Q4_0, DType::Q8_0};
  const tools::SensitivityResult r = tools::measure_sensitivity(*model, tokens, opt);
  const size_t n = tools::sensitivity_probed_weights(*model, "").size();
  ASSERT_EQ(r.tensors.size(), n);
  std::set<std::string> roles;
  for (const auto& t : r.tensors) {
    roles.insert(t.role);
    for (const auto& c : t.candidates) {
      EXPECT_GE(c.delta_kld, 0) << t.name;
      if (c.type != t.source_type) {
        EXPECT_GT(c.weighted_error, 0) << t.name;
      }
    }
  }
  // At least 8 passes: the tensors outside the layers alone, an even number signed.
  size_t outside = 0;
  for (const auto& t : r.tensors) outside += t.layer < 0;
  ASSERT_EQ(r.pooled_alone.size(), outside);
  const int64_t signed_passes = (std::max<int64_t>(8, static_cast<int64_t>(n) / 4) - static_cast<int64_t>(outside)) / 2 * 2;
  EXPECT_EQ(r.pooled_passes, static_cast<int64_t>(outside) + signed_passes);
  for (const auto& t : r.tensors) EXPECT_GT(t.noise_coefficient, 0) << t.name;
  // The table reads back (for qlens plan), its mode kept.
  const tools::SensitivityResult back = tools::sensitivity_from_json(tools::sensitivity_json(r), "pooled.json");
  EXPECT_EQ(back.mode, tools::SensitivityMode::Pooled);
  EXPECT_EQ(back.tensors.size(), n);
  EXPECT_TRUE(test::contains(test::error_of([&] {
    opt.group = tools::SensitivityGroup::Layer;
    tools::measure_sensitivity(*model, tokens, opt);
  }), "--mode pooled probes tensors"));
}
}  // namespace
}  // namespace qlens
