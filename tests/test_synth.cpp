// qlens synth: every preset writes a file that loads as its architecture,
// with the table's tensors, the preset's hyper-parameters, and initial
// values by role; gemma3 presets have the real Gemma 3 shapes and keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "model/arch/architecture.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/synth/synth.h"

namespace qlens {
namespace {

using Shape = std::array<int64_t, kMaxDims>;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int64_t planned_params(const tools::SynthPreset& p) {
  int64_t n = 0;
  for (const auto& t : tools::synth_tensor_plan(tools::synth_hparams(p), p.tied_output, p.rope_scaling_factor > 0))
    if (t.role != Role::RopeFreqs) n += t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  return n;
}

// Presets small enough to write and load in every test run (160m, 1.1b and
// gemma3-270m are checked through their planned tables instead).
std::vector<tools::SynthPreset> small_presets() {
  std::vector<tools::SynthPreset> small;
  for (const auto& p : tools::synth_presets())
    if (planned_params(p) < 10'000'000) small.push_back(p);
  return small;
}

std::string synth(const std::string& preset, DType type = DType::F16, int64_t n_vocab = 0) {
  const std::string path = test::temp_dir() + "/synth-" + preset + "-" + std::string(type_name(type)) + "-" +
                           std::to_string(n_vocab) + ".gguf";
  tools::SynthOptions o;
  o.preset = preset;
  o.type = type;
  o.n_vocab = n_vocab;
  tools::synth_model(o, path);
  return path;
}

std::map<std::string, Shape> shapes_by_name(const gguf::File& f) {
  std::map<std::string, Shape> shapes;
  for (const auto& t : f.tensors()) shapes[t.name] = t.ne;
  return shapes;
}

std::set<std::string> keys_with_prefix(const gguf::File& f, const std::string& prefix) {
  std::set<std::string> keys;
  for (const auto& kv : f.metadata())
    if (kv.key.rfind(prefix, 0) == 0) keys.insert(kv.key);
  return keys;
}

TEST(Synth, PresetNamesAreUniqueAndTheirArchitecturesKnown) {
  std::set<std::string> names;
  for (const auto& p : tools::synth_presets()) {
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate preset " << p.name;
    EXPECT_NE(find_architecture(p.arch), nullptr) << p.name << ": " << p.arch;
  }
  EXPECT_GE(small_presets().size(), 2u);  // tiny and gemma3-tiny at least
}

TEST(Synth, SmallPresetsLoadWithTheTableAndTheirHyperParameters) {
  for (const auto& p : small_presets()) {
    SCOPED_TRACE(p.name);
    auto m = Model::load(synth(p.name));
    EXPECT_EQ(m->hparams().arch, p.arch);
    // Every row of the architecture's table, with its shape; nothing else.
    const auto plan = tools::synth_tensor_plan(m->hparams(), p.tied_output, false, p.values_are_keys);
    EXPECT_EQ(m->weights().size(), plan.size());
    for (const auto& t : plan) {
      Tensor* w = m->get(t.role, t.layer);
      ASSERT_NE(w, nullptr) << t.name;
      EXPECT_EQ(w->name, t.name);
      EXPECT_EQ(w->ne, t.ne) << t.name;
      const bool f32 = role_reads_f32(t.role) || t.role == Role::FfnGateInp;  // and routers
      EXPECT_EQ(w->type, f32 ? DType::F32 : DType::F16) << t.name;
    }
    EXPECT_EQ(m->output_is_tied(), p.tied_output);
    // The preset's hyper-parameters as Model reads them back; rope mode, the
    // experts' gating and normalization and YaRN's attention factor are the
    // architecture's (or derived from other keys) and have no key of their own.
    HParams expected = tools::synth_hparams(p);
    expected.rope_mode = m->hparams().rope_mode;
    expected.expert_gating = m->hparams().expert_gating;
    expected.expert_weights_norm = m->hparams().expert_weights_norm;
    expected.rope_yarn.attn_factor = m->hparams().rope_yarn.attn_factor;
    EXPECT_EQ(m->hparams().fields(), expected.fields());
    EXPECT_EQ(m->vocab().n_tokens(), p.n_vocab);
  }
}

TEST(Synth, Gemma3TinyReadsBackAsGemma3) {
  auto m = Model::load(synth("gemma3-tiny"));
  const HParams& hp = m->hparams();
  EXPECT_EQ(hp.arch, "gemma3");
  EXPECT_EQ(hp.n_embd, 128);
  EXPECT_EQ(hp.n_layer, 4);
  EXPECT_EQ(hp.n_head, 4);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.head_dim, 64);  // wider than n_embd / n_head = 32
  EXPECT_EQ(hp.n_rot, 64);
  EXPECT_EQ(hp.n_ff, 256);
  EXPECT_EQ(hp.n_vocab, 512);
  EXPECT_EQ(hp.n_ctx_train, 256);
  EXPECT_EQ(hp.n_swa, 32);
  EXPECT_EQ(hp.swa_layers, (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(hp.rope_freq_base, 1e6f);
  EXPECT_EQ(hp.rope_freq_base_swa, 1e4f);
  EXPECT_EQ(hp.rms_eps, 1e-6f);
  EXPECT_EQ(hp.rope_mode, RopeMode::NeoX);
  EXPECT_TRUE(m->output_is_tied());
  EXPECT_EQ(m->file().find_tensor("output.weight"), nullptr);
  Tensor* q_norm = m->get(Role::AttnQNorm, 3);
  ASSERT_NE(q_norm, nullptr);
  EXPECT_EQ(q_norm->ne, (Shape{64, 1, 1, 1}));
  EXPECT_EQ(m->get(Role::AttnQ, 0)->ne, (Shape{128, 256, 1, 1}));
  EXPECT_EQ(m->get(Role::AttnOutput, 0)->ne, (Shape{256, 128, 1, 1}));
}

TEST(Synth, Gemma3TinyDecodesPastItsWindow) {
  auto m = Model::load(synth("gemma3-tiny"));
  ContextOptions o;
  o.n_ctx = 64;
  o.n_batch = 16;  // several batches, the later ones past the 32-token window
  Context ctx(*m, o);
  std::vector<Token> tokens = {1};
  for (int i = 0; i < 47; ++i) tokens.push_back(259 + (i * 37) % 253);
  ASSERT_TRUE(ctx.decode(tokens, true));
  for (size_t i = 0; i < tokens.size(); ++i)
    for (float v : ctx.logits(static_cast<int64_t>(i))) ASSERT_TRUE(std::isfinite(v)) << "token " << i;
  // One more token, generated as a tool would.
  ASSERT_TRUE(ctx.decode(std::vector<Token>{300}, false));
  for (float v : ctx.last_logits()) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(ctx.n_past(), 49);
}

// Norm scales start near 1, the embedding at GPT-2's 0.02, every other
// matrix at N(0, 1/fan_in): the rule is by role, for any architecture.
TEST(Synth, InitialValuesFollowTheRoles) {
  auto m = Model::load(synth("gemma3-tiny", DType::F32));
  for (const auto& [name, w] : m->weights()) {
    const int64_t n = w->ne[0] * w->ne[1];
    const float* x = static_cast<const float*>(w->data);
    double sum = 0, sum2 = 0;
    for (int64_t i = 0; i < n; ++i) sum += x[i];
    const double mean = sum / n;
    for (int64_t i = 0; i < n; ++i) sum2 += (x[i] - mean) * (x[i] - mean);
    const double stddev = std::sqrt(sum2 / n);
    const Role role = m->roles_of(w).front();
    if (role_info(role).reader == Op::Mul) {
      EXPECT_NEAR(mean, 1.0, 0.05) << name;
      EXPECT_NEAR(stddev, 0.1, 0.03) << name;
    } else {
      const double want = role == Role::TokenEmbd ? 0.02 : 1.0 / std::sqrt(static_cast<double>(w->ne[0]));
      EXPECT_NEAR(mean, 0.0, want * 0.05) << name;
      EXPECT_NEAR(stddev, want, want * 0.05) << name;
    }
  }
}

TEST(Synth, SameSeedSameFile) {
  const std::string dir = test::temp_dir();
  tools::SynthOptions o;
  o.preset = "gemma3-tiny";
  auto write = [&](uint64_t seed, const std::string& name) {
    o.seed = seed;
    tools::synth_model(o, dir + "/" + name);
    std::ifstream in(dir + "/" + name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string a = write(42, "a.gguf"), b = write(42, "b.gguf"), c = write(43, "c.gguf");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
}

// The big llama presets keep the order and shapes of the files synth wrote
// before it read the architecture's table (they are byte-identical).
TEST(Synth, BigLlamaPresetsPlanLlamaFiles) {
  const auto& p = tools::find_synth_preset("1.1b");
  const auto plan = tools::synth_tensor_plan(tools::synth_hparams(p), p.tied_output);
  ASSERT_EQ(plan.size(), 1u + 22 * 9 + 2);
  EXPECT_EQ(plan.front().name, "token_embd.weight");
  EXPECT_EQ(plan.front().ne, (Shape{2048, 32000, 1, 1}));
  const std::vector<std::string> layer = {"attn_norm", "attn_q", "attn_k",   "attn_v",  "attn_output",
                                          "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
  for (size_t i = 0; i < layer.size(); ++i) EXPECT_EQ(plan[1 + i].name, "blk.0." + layer[i] + ".weight");
  EXPECT_EQ(plan[3].ne, (Shape{2048, 256, 1, 1}));  // attn_k: 4 KV heads of 64
  EXPECT_EQ(plan[3].n_dims, 2);
  EXPECT_EQ(plan[1].n_dims, 1);
  EXPECT_EQ(plan[plan.size() - 2].name, "output_norm.weight");
  EXPECT_EQ(plan.back().name, "output.weight");
  EXPECT_EQ(planned_params(p), 1'100'048'384);
  EXPECT_EQ(planned_params(tools::find_synth_preset("160m")), 134'105'856);
}

TEST(Synth, Gemma3_270mPlansTheRealShapes) {
  const auto& p = tools::find_synth_preset("gemma3-270m");
  const HParams hp = tools::synth_hparams(p);
  EXPECT_EQ(hp.head_dim, 256);
  EXPECT_EQ(std::count(hp.swa_layers.begin(), hp.swa_layers.end(), false), 3);  // layers 5, 11, 17
  EXPECT_FALSE(hp.is_swa(5));
  EXPECT_TRUE(hp.is_swa(6));
  const auto plan = tools::synth_tensor_plan(hp, p.tied_output);
  EXPECT_EQ(plan.size(), 1u + 18 * 13 + 1);  // no output.weight: tied
  EXPECT_EQ(planned_params(p), 268'098'176);  // Gemma 3 270M
}

// The synthetic Gemma 3 270M against the real file, when it is in the cache:
// every tensor name and shape, and the gemma3.* keys. The synthetic file is
// written with a small vocabulary (a 262144-token file takes seconds and half a
// gigabyte); the full-vocabulary shapes are compared from the plan.
TEST(Synth, Gemma3_270mMatchesTheRealFile) {
  QLENS_REQUIRE_CACHED(real_path, test::kGemma3);
  auto real = Model::load(real_path);
  const auto& p = tools::find_synth_preset("gemma3-270m");
  constexpr int64_t kSmallVocab = 1024;
  auto synthetic = Model::load(synth("gemma3-270m", DType::F16, kSmallVocab));

  const auto real_shapes = shapes_by_name(real->file());
  std::map<std::string, Shape> planned;
  for (const auto& t : tools::synth_tensor_plan(tools::synth_hparams(p), p.tied_output)) planned[t.name] = t.ne;
  EXPECT_EQ(planned, real_shapes);
  auto written = shapes_by_name(synthetic->file());
  ASSERT_EQ(written.count("token_embd.weight"), 1u);
  EXPECT_EQ(written["token_embd.weight"], (Shape{640, kSmallVocab, 1, 1}));
  written["token_embd.weight"][1] = real_shapes.at("token_embd.weight")[1];
  EXPECT_EQ(written, real_shapes);

  // Every key of the real file, with its value; synth adds only keys that
  // spell out what a reader assumes without them.
  const auto real_keys = keys_with_prefix(real->file(), "gemma3.");
  const auto synth_keys = keys_with_prefix(synthetic->file(), "gemma3.");
  for (const auto& key : real_keys) {
    ASSERT_TRUE(synth_keys.count(key)) << key;
    if (key == "gemma3.vocab_size") continue;
    EXPECT_EQ(synthetic->file().try_float(key), real->file().try_float(key)) << key;
  }
  std::set<std::string> added;
  std::set_difference(synth_keys.begin(), synth_keys.end(), real_keys.begin(), real_keys.end(),
                      std::inserter(added, added.end()));
  EXPECT_EQ(added, (std::set<std::string>{"gemma3.attention.sliding_window_pattern", "gemma3.rope.dimension_count",
                                          "gemma3.rope.freq_base_swa", "gemma3.vocab_size"}));
  // ... and they equal those assumptions: both models read back the same.
  auto fields = synthetic->hparams().fields(), real_fields = real->hparams().fields();
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].first != "vocabulary size") {
      EXPECT_EQ(fields[i], real_fields[i]);
    }
  EXPECT_EQ(real->hparams().n_vocab, p.n_vocab);
  EXPECT_TRUE(real->output_is_tied());
}

// gemma3-tiny has the shapes of the shared synthetic gemma3 model that
// llama.cpp's outputs were recorded on.
TEST(Synth, Gemma3TinyHasTheSharedReferenceShapes) {
  QLENS_REQUIRE_SHARED(reference, "reference/synth/gemma3.gguf");
  auto ref = gguf::File::open(reference);
  auto synthetic = gguf::File::open(synth("gemma3-tiny"));
  EXPECT_EQ(shapes_by_name(*synthetic), shapes_by_name(*ref));
  for (const char* key : {"gemma3.attention.sliding_window", "gemma3.attention.sliding_window_pattern",
                          "gemma3.attention.key_length", "gemma3.rope.freq_base", "gemma3.rope.freq_base_swa",
                          "gemma3.attention.layer_norm_rms_epsilon"})
    EXPECT_EQ(synthetic->try_float(key), ref->try_float(key)) << key;
}

TEST(Synth, PresetAndArchitectureMustAgree) {
  EXPECT_EQ(tools::find_synth_preset("", "gemma3").name, "gemma3-tiny");
  EXPECT_EQ(tools::find_synth_preset("", "").name, "tiny");
  EXPECT_EQ(tools::find_synth_preset("gemma3-270m", "gemma3").arch, "gemma3");
  try {
    tools::find_synth_preset("tiny", "gemma3");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'tiny' is a llama model, not gemma3")) << e.what();
    EXPECT_TRUE(contains(e.what(), "gemma3-tiny")) << e.what();
  }
  try {
    tools::find_synth_preset("", "mamba");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "mamba")) << e.what();
  }
  tools::SynthOptions o;
  o.preset = "gemma3-tiny";
  o.arch = "llama";
  EXPECT_THROW(tools::synth_model(o, test::temp_dir() + "/never.gguf"), Error);
  o.arch = "";
  o.n_vocab = 100;  // fewer than the special and byte tokens
  EXPECT_THROW(tools::synth_model(o, test::temp_dir() + "/never.gguf"), Error);
  EXPECT_FALSE(std::filesystem::exists(test::temp_dir() + "/never.gguf"));
}

TEST(Synth, CliListsPresetsWithTheirArchitecture) {
  const std::string qlens = QLENS_BINARY;
  std::string out;
  ASSERT_EQ(test::run_command(qlens + " synth --help", &out), 0) << out;
  EXPECT_TRUE(contains(out, "tiny (llama)")) << out;
  EXPECT_TRUE(contains(out, "gemma3-270m (gemma3)")) << out;
  EXPECT_TRUE(contains(out, "--arch")) << out;
  EXPECT_NE(test::run_command(qlens + " synth --preset 160m --arch gemma3 -o x.gguf", &out), 0);
  EXPECT_TRUE(contains(out, "'160m' is a llama model, not gemma3")) << out;
  const std::string model = test::temp_dir() + "/cli-gemma3.gguf";
  ASSERT_EQ(test::run_command(qlens + " synth --arch gemma3 --type F32 -o " + model, &out), 0) << out;
  EXPECT_TRUE(contains(out, "preset gemma3-tiny (gemma3)")) << out;
  EXPECT_EQ(Model::load(model)->hparams().arch, "gemma3");
}

// The tiny mixtures of experts have the shapes and expert keys of the shared
// synthetic qwen3moe and mixtral models; the Qwen3-30B-A3B preset its layers.
TEST(Synth, MoePresetsHaveTheSharedReferenceShapes) {
  for (const auto& [preset, model] : {std::pair{"qwen3moe-tiny", "qwen3moe"}, std::pair{"mixtral-tiny", "mixtral"}}) {
    QLENS_REQUIRE_SHARED(reference, std::string("reference/synth/") + model + ".gguf");
    auto ref = gguf::File::open(reference);
    auto synthetic = gguf::File::open(synth(preset));
    EXPECT_EQ(shapes_by_name(*synthetic), shapes_by_name(*ref)) << preset;
    const std::string a = *ref->try_string("general.architecture") + ".";
    for (const char* key : {"expert_count", "expert_used_count", "feed_forward_length", "attention.head_count_kv"})
      EXPECT_EQ(synthetic->try_int(a + key), ref->try_int(a + key)) << preset << " " << key;
  }
  const tools::SynthPreset& p = tools::find_synth_preset("qwen3-30b-a3b-4l");
  std::map<std::string, Shape> shapes;
  for (const auto& t : tools::synth_tensor_plan(tools::synth_hparams(p), p.tied_output)) shapes[t.name] = t.ne;
  EXPECT_EQ(shapes.at("blk.3.ffn_gate_exps.weight"), (Shape{2048, 768, 128, 1}));
  EXPECT_EQ(shapes.at("blk.3.ffn_down_exps.weight"), (Shape{768, 2048, 128, 1}));
  EXPECT_EQ(shapes.at("blk.3.ffn_gate_inp.weight"), (Shape{2048, 128, 1, 1}));
  EXPECT_EQ(shapes.at("blk.3.attn_q.weight"), (Shape{2048, 4096, 1, 1}));
  EXPECT_EQ(shapes.at("blk.3.attn_k.weight"), (Shape{2048, 512, 1, 1}));
  EXPECT_EQ(shapes.at("output.weight"), (Shape{2048, 151936, 1, 1}));
}

// The real-model presets have their models' published parameter counts
// (Hugging Face, tied embeddings counted once; rope_freqs is not a parameter)
// and their shapes: q/k/v biases in qwen2, q/k norms of the head size in
// qwen3 and gemma3, a fused q|k|v and gate|up in phi3, rope_freqs in llama.
TEST(Synth, RealModelPresetsHaveTheirModelsParameterCounts) {
  const std::map<std::string, int64_t> published = {{"qwen2.5-0.5b", 494'032'768},  {"qwen3-0.6b", 596'049'920},
                                                    {"llama3.2-1b", 1'235'814'400}, {"phi4-mini", 3'836'021'760},
                                                    {"gemma3-1b", 999'885'952},     {"135m", 134'515'008}};
  for (const auto& [name, count] : published) {
    const tools::SynthPreset& p = tools::find_synth_preset(name);
    EXPECT_EQ(planned_params(p), count) << name;
    std::map<std::string, Shape> shapes;
    for (const auto& t : tools::synth_tensor_plan(tools::synth_hparams(p), p.tied_output, p.rope_scaling_factor > 0))
      shapes[t.name] = t.ne;
    EXPECT_FALSE(shapes.count("output.weight")) << name << ": tied";
    if (name == "qwen2.5-0.5b") {
      EXPECT_EQ(shapes.at("blk.0.attn_k.bias"), (Shape{128, 1, 1, 1}));
    }
    if (name == "qwen3-0.6b") {
      EXPECT_EQ(shapes.at("blk.0.attn_q.weight"), (Shape{1024, 2048, 1, 1}));
    }
    if (name == "phi4-mini") {
      EXPECT_EQ(shapes.at("blk.0.attn_qkv.weight"), (Shape{3072, 5120, 1, 1}));
      EXPECT_EQ(shapes.at("blk.0.ffn_up.weight"), (Shape{3072, 16384, 1, 1}));
      EXPECT_EQ(tools::synth_hparams(p).n_rot, 96);
    }
    if (name == "llama3.2-1b") {
      EXPECT_EQ(shapes.at("rope_freqs.weight"), (Shape{32, 1, 1, 1}));
      // The factors of Llama 3.2's rope scaling (factor 32, low 1, high 4,
      // 8192 original positions): 1 for short wavelengths, 32 for long ones.
      const std::vector<float> f = tools::llama3_rope_factors(p, 64);
      EXPECT_EQ(f.front(), 1.0f);
      EXPECT_EQ(f.back(), 32.0f);
    }
    if (name == "gemma3-1b") {
      EXPECT_EQ(shapes.at("blk.0.attn_k_norm.weight"), (Shape{256, 1, 1, 1}));
    }
  }
  // --arch llama3: the llama presets with Llama 3's rope scaling.
  EXPECT_EQ(tools::find_synth_preset("", "llama3").name, "llama3.2-1b");
  EXPECT_THROW(tools::find_synth_preset("tiny", "llama3"), Error);
  // The synthetic llama3 model's factors (../shared/reference/synth/README.md).
  tools::SynthPreset small = tools::find_synth_preset("llama3.2-1b");
  small.rope_freq_base = 5e5f;
  small.rope_scaling_factor = 8;
  small.rope_original_ctx = 256;
  const std::vector<float> f = tools::llama3_rope_factors(small, 16);
  const std::vector<float> want = {1, 1, 3.568533f, 8, 8, 8, 8, 8};
  ASSERT_EQ(f.size(), want.size());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], want[i], 1e-6) << i;
}

// Gemma 4's real-width presets have E4B's and 26B-A4B's shapes: heads of 256
// on the sliding layers and 512 on the full ones, E4B's per-layer
// embeddings and shared KV layers (no k or v of their own), 26B-A4B's
// experts beside the dense feed-forward and its full layers' values from
// their keys (no attn_v).
TEST(Synth, Gemma4RealWidthPresetsHaveTheReleasedShapes) {
  auto shapes = [](const char* name) {
    const tools::SynthPreset& p = tools::find_synth_preset(name);
    std::map<std::string, Shape> out;
    for (const auto& t : tools::synth_tensor_plan(tools::synth_hparams(p), p.tied_output, false, p.values_are_keys))
      out[t.name] = t.ne;
    return out;
  };
  const auto e4b = shapes("gemma-4-e4b-4l");
  EXPECT_EQ(e4b.at("blk.0.attn_q.weight"), (Shape{2560, 2048, 1, 1}));  // 8 heads of 256
  EXPECT_EQ(e4b.at("blk.0.attn_k.weight"), (Shape{2560, 512, 1, 1}));
  EXPECT_EQ(e4b.at("blk.1.attn_q.weight"), (Shape{2560, 4096, 1, 1}));  // 8 heads of 512
  EXPECT_EQ(e4b.at("blk.1.attn_v.weight"), (Shape{2560, 1024, 1, 1}));
  EXPECT_EQ(e4b.count("blk.2.attn_k.weight"), 0u);  // shares layer 0's cache
  EXPECT_EQ(e4b.count("blk.3.attn_v.weight"), 0u);  // shares layer 1's
  EXPECT_EQ(e4b.at("blk.3.ffn_up.weight"), (Shape{2560, 10240, 1, 1}));
  EXPECT_EQ(e4b.at("blk.0.inp_gate.weight"), (Shape{2560, 256, 1, 1}));
  EXPECT_EQ(e4b.at("blk.0.proj.weight"), (Shape{256, 2560, 1, 1}));
  EXPECT_EQ(e4b.at("per_layer_token_embd.weight"), (Shape{1024, 262144, 1, 1}));  // 256 x 4 layers
  EXPECT_EQ(e4b.at("per_layer_model_proj.weight"), (Shape{2560, 1024, 1, 1}));
  EXPECT_EQ(e4b.at("rope_freqs.weight"), (Shape{256, 1, 1, 1}));
  const auto a4b = shapes("gemma-4-26b-a4b-2l");
  EXPECT_EQ(a4b.at("blk.0.attn_q.weight"), (Shape{2816, 4096, 1, 1}));  // 16 heads of 256
  EXPECT_EQ(a4b.at("blk.0.attn_v.weight"), (Shape{2816, 2048, 1, 1}));  // 8 KV heads
  EXPECT_EQ(a4b.at("blk.1.attn_k.weight"), (Shape{2816, 1024, 1, 1}));  // 2 KV heads of 512
  EXPECT_EQ(a4b.count("blk.1.attn_v.weight"), 0u);
  EXPECT_EQ(a4b.at("blk.1.ffn_gate.weight"), (Shape{2816, 2112, 1, 1}));
  EXPECT_EQ(a4b.at("blk.1.ffn_gate_exps.weight"), (Shape{2816, 704, 128, 1}));
  EXPECT_EQ(a4b.at("blk.1.ffn_down_exps.scale"), (Shape{128, 1, 1, 1}));
  EXPECT_EQ(a4b.at("blk.1.ffn_gate_inp.scale"), (Shape{2816, 1, 1, 1}));
  EXPECT_EQ(a4b.count("per_layer_token_embd.weight"), 0u);
}

}  // namespace
}  // namespace qlens
