#include "tools/synth.h"

#include <cmath>
#include <memory>

#include "qlens/error.h"
#include "qlens/gguf.h"

namespace qlens::tools {

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> presets = {
      {"tiny", 64, 128, 2, 4, 2, 512, 256, true},
      {"160m", 768, 2048, 12, 12, 12, 32000, 2048, false},
      {"1.1b", 2048, 5632, 22, 32, 4, 32000, 2048, false},
  };
  return presets;
}

namespace {

// splitmix64: small, fast, and good enough for random weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * 0x1.0p-53; }
  // Normal samples by Box-Muller, two at a time.
  float normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u = uniform(), v = uniform();
    double r = std::sqrt(-2.0 * std::log(u > 0 ? u : 1e-300));
    spare_ = static_cast<float>(r * std::sin(2 * M_PI * v));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2 * M_PI * v));
  }

 private:
  uint64_t state_;
  bool has_spare_ = false;
  float spare_ = 0;
};

// A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then
// pieces made of letters (with and without the word-start mark U+2581),
// scored so that longer, earlier pieces are preferred as in real vocabularies.
void generated_vocab(gguf::Writer& w, int64_t n_vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  const std::string mark = "\xE2\x96\x81";
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ0123456789.,!?'\"-:;()";
  std::vector<std::string> pieces = {mark};
  for (char c : letters) pieces.push_back(std::string(1, c));
  for (char c : letters) pieces.push_back(mark + c);
  for (char a : letters)
    for (char b : letters) {
      pieces.push_back(mark + a + b);
      pieces.push_back(std::string(1, a) + b);
    }
  // Three-letter pieces only when a large vocabulary asks for them.
  for (size_t i = 0; pieces.size() < static_cast<size_t>(n_vocab) && i < letters.size() * letters.size(); ++i)
    for (char c : letters) pieces.push_back(mark + letters[i / letters.size()] + letters[i % letters.size()] + c);
  for (size_t i = 0; tokens.size() < static_cast<size_t>(n_vocab); ++i) {
    tokens.push_back(pieces.at(i));
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 259; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i - 259);
  w.set("tokenizer.ggml.model", gguf::Value::make_string("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(tokens));
  w.set("tokenizer.ggml.scores", gguf::Value::make_f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::make_u32(1));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::make_u32(2));
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::make_u32(0));
}

int64_t copied_vocab(gguf::Writer& w, const std::string& path) {
  auto f = gguf::File::open(path);
  int64_t n = 0;
  for (const auto& kv : f->metadata())
    if (kv.key.rfind("tokenizer.", 0) == 0) {
      w.set(kv.key, kv.value);
      if (kv.key == "tokenizer.ggml.tokens") n = static_cast<int64_t>(kv.value.arr.size());
    }
  if (n == 0) throw Error(path + ": no tokenizer.ggml.tokens to copy a vocabulary from");
  return n;
}

}  // namespace

int64_t synth_model(const SynthOptions& opt, const std::string& path) {
  const SynthPreset* preset = nullptr;
  for (const auto& p : synth_presets())
    if (p.name == opt.preset) preset = &p;
  if (!preset) {
    std::string names;
    for (const auto& p : synth_presets()) names += (names.empty() ? "" : ", ") + p.name;
    throw Error("synth: unknown preset '" + opt.preset + "' (known: " + names + ")");
  }
  if (opt.type != DType::F32 && opt.type != DType::F16 && opt.type != DType::BF16)
    throw Error("synth: --type must be F32, F16 or BF16");
  SynthPreset p = *preset;

  gguf::Writer w;
  w.set("general.architecture", gguf::Value::make_string("llama"));
  w.set("general.name", gguf::Value::make_string("qlens-synth-" + p.name));
  w.set("general.file_type", gguf::Value::make_u32(opt.type == DType::F32 ? 0 : opt.type == DType::F16 ? 1 : 32));
  w.set("llama.context_length", gguf::Value::make_u32(static_cast<uint32_t>(p.n_ctx)));
  w.set("llama.embedding_length", gguf::Value::make_u32(static_cast<uint32_t>(p.n_embd)));
  w.set("llama.feed_forward_length", gguf::Value::make_u32(static_cast<uint32_t>(p.n_ff)));
  w.set("llama.block_count", gguf::Value::make_u32(static_cast<uint32_t>(p.n_layer)));
  w.set("llama.attention.head_count", gguf::Value::make_u32(static_cast<uint32_t>(p.n_head)));
  w.set("llama.attention.head_count_kv", gguf::Value::make_u32(static_cast<uint32_t>(p.n_head_kv)));
  w.set("llama.rope.dimension_count", gguf::Value::make_u32(static_cast<uint32_t>(p.n_embd / p.n_head)));
  w.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::make_f32(1e-5f));
  w.set("llama.rope.freq_base", gguf::Value::make_f32(10000.0f));
  if (!opt.vocab_file.empty())
    p.n_vocab = copied_vocab(w, opt.vocab_file);
  else
    generated_vocab(w, p.n_vocab);
  w.set("llama.vocab_size", gguf::Value::make_u32(static_cast<uint32_t>(p.n_vocab)));

  Rng rng(opt.seed);
  std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers;  // keep data alive until write
  int64_t n_params = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, float stddev, bool is_norm) {
    const int64_t n = ne[0] * (ne.size() > 1 ? ne[1] : 1);
    const DType type = is_norm ? DType::F32 : opt.type;
    std::vector<float> values(n);
    for (float& v : values) v = is_norm ? 1.0f + 0.1f * rng.normal() : stddev * rng.normal();
    auto bytes = std::make_unique<std::vector<uint8_t>>(row_bytes(type, n));
    type_traits(type).from_float(values.data(), bytes->data(), n);
    w.add_tensor(name, type, ne, bytes->data(), bytes->size());
    buffers.push_back(std::move(bytes));
    n_params += n;
  };
  const int64_t E = p.n_embd, KV = p.n_embd / p.n_head * p.n_head_kv;
  // GPT-2-style initial scale for embeddings and the output: logits stay small,
  // so an untrained model's perplexity is near its vocabulary size.
  const float s_embd = 0.02f;
  add("token_embd.weight", {E, p.n_vocab}, s_embd, false);
  for (int64_t il = 0; il < p.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const float s_in = 1.0f / std::sqrt(static_cast<float>(E));
    add(b + "attn_norm.weight", {E}, 0, true);
    add(b + "attn_q.weight", {E, E}, s_in, false);
    add(b + "attn_k.weight", {E, KV}, s_in, false);
    add(b + "attn_v.weight", {E, KV}, s_in, false);
    add(b + "attn_output.weight", {E, E}, s_in, false);
    add(b + "ffn_norm.weight", {E}, 0, true);
    add(b + "ffn_gate.weight", {E, p.n_ff}, s_in, false);
    add(b + "ffn_up.weight", {E, p.n_ff}, s_in, false);
    add(b + "ffn_down.weight", {p.n_ff, E}, 1.0f / std::sqrt(static_cast<float>(p.n_ff)), false);
  }
  add("output_norm.weight", {E}, 0, true);
  if (!p.tied_output) add("output.weight", {E, p.n_vocab}, s_embd, false);
  w.write(path);
  return n_params;
}

}  // namespace qlens::tools
