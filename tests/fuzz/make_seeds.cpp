// Writes the generated part of the fuzz targets' seed corpora:
//   fuzz_make_seeds CORPUS_DIR   (tests/fuzz/corpus)
// - gguf/: complete tiny models (a few KB) of every architecture, in F32,
//   F16, BF16 and block-quantized types, so that the gguf target's inputs
//   reach model loading and graph computation from the start;
// - imatrix_gguf/, imatrix_dat/: small importance matrices in both formats
//   (a dense tensor and an expert tensor, with and without checkpoint keys;
//   the checkpoint also in the 2-D form earlier qlens versions wrote).
// The other seeds are hand-made files or the headers of real files (see
// docs/ROBUSTNESS.md). Deterministic: rerunning rewrites the same bytes.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../imatrix_two_dimensional.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/synth/synth.h"

using namespace qlens;

namespace {

struct Seed {
  const char* file;
  tools::SynthPreset preset;
  DType type;
};

void write_model(const Seed& s, const std::string& path) {
  const tools::SynthPreset& p = s.preset;
  HParams hp = tools::synth_hparams(p);
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::make_string(hp.arch));
  w.set("general.name", gguf::Value::make_string(std::string("fuzz-seed-") + s.file));
  write_architecture_hparams(w, hp);
  // A SentencePiece vocabulary of n_vocab tokens, without byte tokens.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81"};
  std::vector<int32_t> types = {2, 3, 3, 1};
  for (char c = 'a'; tokens.size() < static_cast<size_t>(hp.n_vocab); ++c) {
    tokens.push_back(std::string(1, c));
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  w.set("tokenizer.ggml.model", gguf::Value::make_string("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(tokens));
  w.set("tokenizer.ggml.scores", gguf::Value::make_f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
  w.set(hp.arch + ".vocab_size", gguf::Value::make_u32(static_cast<uint32_t>(hp.n_vocab)));

  std::vector<std::unique_ptr<std::vector<uint8_t>>> keep;
  uint64_t state = 1;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(state >> 40) - (1ll << 23)) / static_cast<float>(1ll << 25);
  };
  for (const tools::SynthTensor& t : tools::synth_tensor_plan(hp, p.tied_output, false, p.values_are_keys)) {
    int64_t n = 1;
    for (int d = 0; d < t.n_dims; ++d) n *= t.ne[d];
    const Op reader = role_info(t.role).reader;
    const bool plain = role_reads_f32(t.role) || t.role == Role::FfnGateInp;
    const DType type = plain ? DType::F32 : s.type;
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = reader == Op::Mul ? 1.0f + 0.1f * next() : next();
    auto bytes = std::make_unique<std::vector<uint8_t>>(row_bytes(type, n));
    type_traits(type).from_float(values.data(), bytes->data(), n);
    w.add_tensor(t.name, type, std::span<const int64_t>(t.ne.data(), t.n_dims), bytes->data(), bytes->size());
    keep.push_back(std::move(bytes));
  }
  w.write(path);
}

tools::SynthPreset tiny(const char* arch, int64_t n_embd = 8, int64_t n_head = 2, int64_t n_head_kv = 1) {
  tools::SynthPreset p;
  p.name = arch;
  p.arch = arch;
  p.n_embd = n_embd;
  p.n_ff = 2 * n_embd;
  p.n_layer = 1;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.n_vocab = 12;
  p.n_ctx = 16;
  return p;
}


void write_imatrices(const std::string& dir) {
  tools::Imatrix m;
  m.datasets = {"wiki.train.raw"};
  m.chunk_count = 3;
  m.chunk_size = 512;
  tools::ImatrixEntry dense;
  dense.n_cols = 8;
  dense.n_mat = 1;
  for (int j = 0; j < 8; ++j) dense.sum2.push_back(0.5 * (j + 1));
  dense.counts = {1536};
  m.entries["blk.0.attn_q.weight"] = dense;
  tools::ImatrixEntry experts;
  experts.n_cols = 4;
  experts.n_mat = 3;
  for (int j = 0; j < 12; ++j) experts.sum2.push_back(j < 8 ? 0.25 * j : 0.0);
  experts.counts = {700, 836, 0};  // the third expert got no rows
  m.entries["blk.0.ffn_up_exps.weight"] = experts;
  std::filesystem::create_directories(dir + "/imatrix_gguf");
  std::filesystem::create_directories(dir + "/imatrix_dat");
  tools::save_imatrix_gguf(m, dir + "/imatrix_gguf/two-entries.gguf");
  tools::save_imatrix_dat(m, dir + "/imatrix_dat/two-entries.dat");
  m.run.next_chunk = 3;
  m.run.nll_sum = 7.5;
  m.run.nll_sq_sum = 20.25;
  m.run.n_scored = 1533;
  tools::save_imatrix_gguf(m, dir + "/imatrix_gguf/checkpoint.gguf");
  test::write_imatrix_two_dimensional(dir + "/imatrix_gguf/checkpoint.gguf", dir + "/imatrix_gguf/checkpoint-2d.gguf");
  m.entries.erase("blk.0.ffn_up_exps.weight");
  m.datasets.clear();
  tools::save_imatrix_dat(m, dir + "/imatrix_dat/one-entry-no-dataset.dat");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    std::vector<Seed> seeds;
    seeds.push_back({"llama-f32.gguf", tiny("llama"), DType::F32});
    tools::SynthPreset tied = tiny("llama");
    tied.tied_output = true;
    seeds.push_back({"llama-tied-f16.gguf", tied, DType::F16});
    seeds.push_back({"llama-bf16.gguf", tiny("llama"), DType::BF16});
    seeds.push_back({"llama-q8_0.gguf", tiny("llama", 32, 4, 2), DType::Q8_0});
    seeds.push_back({"llama-q4_0.gguf", tiny("llama", 32, 4, 2), DType::Q4_0});
    tools::SynthPreset moe = tiny("llama");
    moe.n_expert = 2;
    moe.n_expert_used = 1;
    moe.n_ff_exp = 8;
    seeds.push_back({"mixtral-f16.gguf", moe, DType::F16});
    tools::SynthPreset gemma = tiny("gemma3");
    gemma.n_layer = 2;
    gemma.n_swa = 2;
    gemma.swa_period = 2;
    gemma.tied_output = true;
    seeds.push_back({"gemma3-f16.gguf", gemma, DType::F16});
    seeds.push_back({"qwen2-f32.gguf", tiny("qwen2"), DType::F32});
    seeds.push_back({"qwen3-f16.gguf", tiny("qwen3"), DType::F16});
    seeds.push_back({"phi3-f16.gguf", tiny("phi3"), DType::F16});
    tools::SynthPreset qmoe = tiny("qwen3moe");
    qmoe.n_expert = 2;
    qmoe.n_expert_used = 2;
    qmoe.n_ff_exp = 8;
    seeds.push_back({"qwen3moe-f32.gguf", qmoe, DType::F32});
    // The architectures of 2026: their own keys and tables (sinks and
    // biases; latent attention with expert groups and a shared expert; a
    // NextN layer; DeltaNet layers beside gated attention).
    tools::SynthPreset oss = tiny("gpt-oss", 8, 2, 1);
    oss.n_layer = 2;
    oss.n_swa = 2;
    oss.swa_period = 2;
    oss.n_expert = 2;
    oss.n_expert_used = 1;
    oss.n_ff_exp = 8;
    oss.rope_yarn_factor = 4;
    oss.rope_yarn_original_ctx = 8;
    seeds.push_back({"gpt-oss-f16.gguf", oss, DType::F16});
    tools::SynthPreset ds = tiny("deepseek2", 8, 2, 1);
    ds.n_layer = 2;
    ds.head_dim = 12;  // the cached row: kv latent 8 + rope key 4
    ds.n_rot = 4;
    ds.n_lora_q = 8;
    ds.n_lora_kv = 8;
    ds.head_dim_k_mla = 12;
    ds.head_dim_v_mla = 8;
    ds.n_expert = 4;
    ds.n_expert_used = 2;
    ds.n_ff_exp = 8;
    ds.sigmoid_gating = true;
    ds.n_expert_groups = 2;
    ds.n_group_used = 1;
    ds.n_expert_shared = 1;
    ds.n_layer_dense_lead = 1;
    ds.expert_weights_scale = 2.5f;
    seeds.push_back({"deepseek2-f32.gguf", ds, DType::F32});
    tools::SynthPreset glm = tiny("glm4moe", 8, 2, 1);
    glm.n_layer = 2;
    glm.n_rot = 2;
    glm.n_expert = 2;
    glm.n_expert_used = 1;
    glm.n_ff_exp = 8;
    glm.sigmoid_gating = true;
    glm.n_expert_shared = 1;
    glm.n_layer_dense_lead = 1;
    glm.n_layer_nextn = 1;
    seeds.push_back({"glm4moe-f16.gguf", glm, DType::F16});
    tools::SynthPreset q35 = tools::find_synth_preset("qwen35-tiny");
    q35.n_embd = 16;
    q35.n_ff = 16;
    q35.n_layer = 2;
    q35.n_head = 2;
    q35.n_head_kv = 1;
    q35.head_dim = 8;
    q35.n_rot = 4;
    q35.n_vocab = 12;
    q35.n_ctx = 16;
    q35.ssm_d_state = 4;
    q35.ssm_v_heads = 2;
    q35.ssm_k_heads = 1;
    q35.full_attention_interval = 2;
    q35.rope_sections = {1, 1, 0, 0};
    seeds.push_back({"qwen35-f16.gguf", q35, DType::F16});
    // Gemma 4 with every feature at once: sliding layers 0, 1, 3 of heads
    // of 4 and a full layer 2 of 8 (one KV head, values from its keys),
    // layer 3 sharing layer 1's cache, per-layer embeddings, experts beside
    // the dense feed-forward, soft-capped logits.
    tools::SynthPreset g4 = tiny("gemma4", 8, 2, 2);
    g4.n_layer = 4;
    g4.head_dim = 8;
    g4.head_dim_swa = 4;
    g4.n_head_kv_full = 1;
    g4.n_swa = 4;
    g4.swa_period = 3;
    g4.n_shared_kv_layers = 1;
    g4.n_embd_per_layer = 2;
    g4.n_expert = 2;
    g4.n_expert_used = 1;
    g4.n_ff_exp = 8;
    g4.values_are_keys = true;
    g4.rope_partial_full = 0.5f;
    g4.final_logit_softcap = 30.0f;
    g4.tied_output = true;
    seeds.push_back({"gemma4-f16.gguf", g4, DType::F16});
    std::filesystem::create_directories(dir + "/gguf");
    for (const Seed& s : seeds) write_model(s, dir + "/gguf/" + s.file);
    write_imatrices(dir);
  } catch (const Error& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
