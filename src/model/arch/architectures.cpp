// The architectures qlens runs, and the hyper-parameters they share.
#include <algorithm>
#include <cmath>

#include "model/arch/architecture.h"
#include "qlens/error.h"

namespace qlens {

namespace {

struct Entry {
  const char* name;  // general.architecture
  const Architecture& (*get)();
};

// Mistral files are llama files under another name.
constexpr Entry kArchitectures[] = {
    {"llama", llama_architecture},
    {"mistral", llama_architecture},
    {"gemma3", gemma3_architecture},
    {"qwen2", qwen2_architecture},
    {"qwen3", qwen3_architecture},
    {"phi3", phi3_architecture},
    {"qwen3moe", qwen3moe_architecture},
    {"gpt-oss", gpt_oss_architecture},
    {"deepseek2", deepseek2_architecture},
    {"glm4moe", glm4moe_architecture},
    {"qwen35", qwen35_architecture},
    {"qwen35moe", qwen35moe_architecture},
    {"gemma4", gemma4_architecture},
};


uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

// One value for every layer, or an array of one per layer where they differ.
gguf::Value per_layer_value(const HParams& hp, int64_t all, const std::vector<int64_t>& per_layer) {
  if (per_layer.empty()) return gguf::Value::make_u32(u32(all));
  std::vector<int32_t> v(per_layer.begin(), per_layer.end());
  v.resize(hp.n_layer + hp.n_layer_nextn, static_cast<int32_t>(all));
  return gguf::Value::make_i32_array(v);
}

}  // namespace

int64_t positive_key(const gguf::File& f, const std::string& key, std::optional<int64_t> fallback) {
  std::optional<int64_t> v = f.try_int(key);
  if (!v) {
    if (fallback) return *fallback;
    throw Error(f.path() + ": missing metadata key '" + key + "'");
  }
  if (*v <= 0 || *v > (int64_t{1} << 31))
    throw Error(f.path() + ": metadata key '" + key + "' has invalid value " + std::to_string(*v));
  return *v;
}

const Architecture* find_architecture(const std::string& name) {
  for (const Entry& e : kArchitectures)
    if (name == e.name) return &e.get();
  return nullptr;
}

namespace {

// A key that is one positive integer for every layer or an array of one per
// layer (llama.cpp's get_key_or_arr over block_count, NextN layers
// included): the first layer's value, and `per_layer` filled when they
// differ (else left empty).
int64_t per_layer_key(const gguf::File& f, const std::string& key, const HParams& hp,
                      std::optional<int64_t> fallback, std::vector<int64_t>& per_layer) {
  per_layer.clear();
  const gguf::Value* v = f.find(key);
  if (!v || v->type != gguf::ValueType::Array) return positive_key(f, key, fallback);
  const auto values = f.try_int_array(key);
  const int64_t n_all = hp.n_layer + hp.n_layer_nextn;
  if (!values || static_cast<int64_t>(values->size()) != n_all)
    throw Error(f.path() + ": metadata key '" + key + "' must hold one integer per layer (" + std::to_string(n_all) +
                ")");
  for (int64_t x : *values)
    if (x <= 0 || x > (int64_t{1} << 31))
      throw Error(f.path() + ": metadata key '" + key + "' has invalid value " + std::to_string(x));
  if (std::any_of(values->begin(), values->end(), [&](int64_t x) { return x != values->front(); }))
    per_layer = *values;
  return values->front();
}

const Architecture& known_architecture(const std::string& name) {
  const Architecture* arch = find_architecture(name);
  if (!arch) throw Error("architecture '" + name + "' is not supported");
  return *arch;
}

}  // namespace

std::vector<TensorSpec> architecture_tensors(const HParams& hp, int il) {
  return known_architecture(hp.arch).tensors(hp, il);
}

void write_architecture_hparams(gguf::Writer& w, const HParams& hp) {
  const Architecture& arch = known_architecture(hp.arch);
  write_common_hparams(w, hp);
  arch.write_hparams(w, hp);
}

std::vector<std::string> architecture_names() {
  std::vector<std::string> names;
  for (const Entry& e : kArchitectures) names.push_back(e.name);
  return names;
}

std::unique_ptr<AttentionBlock> Architecture::attention(const HParams& hp, int il) const {
  return make_standard_attention({.sliding_window = hp.is_swa(il)});
}

Tensor* Architecture::output(GraphBuilder& b, Tensor* in) const {
  Tensor* cur = b.norm(in, Role::OutputNorm, -1, "result_norm");
  return named(mul_mat(b.graph(), b.weight(Role::Output), cur), "result_output");
}

namespace {

// YaRN as llama.cpp sets it up for a file whose rope.scaling.type is "yarn"
// (llama_context's constructor): the blend on (ext_factor 1), and
// attn_factor the scale that, times the 1 + 0.1 ln(factor) ggml's rope
// applies, gives get_mscale(factor) = 1 + 0.1 ln(factor), times
// rope.scaling.attn_factor; betas 32 and 1; the training context before the
// extension from rope.scaling.original_context_length. DeepSeek's files add
// rope.scaling.yarn_log_multiplier (0.1 mscale_all_dim): then the rotation
// is not scaled for deepseek2 whose mscale equals mscale_all_dim, and the
// attention block scales the scores instead (rope_yarn_log_mul). Computed
// in float as llama.cpp does.
void read_yarn(const gguf::File& f, HParams& hp) {
  const std::string a = hp.arch + ".";
  RopeYarn& y = hp.rope_yarn;
  y.ext_factor = 1.0f;
  const float factor = 1.0f / hp.rope_freq_scale;
  auto get_mscale = [factor](float mscale) { return factor <= 1.0f ? 1.0f : 0.1f * mscale * std::log(factor) + 1.0f; };
  if (auto log_mul = f.try_float(a + "rope.scaling.yarn_log_multiplier"); log_mul && *log_mul != 0) {
    hp.rope_yarn_log_mul = static_cast<float>(*log_mul) / 0.1f;
    const float mscale_all_dims = hp.rope_yarn_log_mul;
    const float mscale = hp.arch == "deepseek2" && mscale_all_dims != 1.0f ? mscale_all_dims : 1.0f;
    y.attn_factor = get_mscale(mscale) / get_mscale(mscale_all_dims);
  } else {
    y.attn_factor = get_mscale(1.0f);
  }
  y.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  if (auto af = f.try_float(a + "rope.scaling.attn_factor")) y.attn_factor *= static_cast<float>(*af);
  y.beta_fast = 32.0f;
  y.beta_slow = 1.0f;
  y.n_ctx_orig = static_cast<int>(positive_key(f, a + "rope.scaling.original_context_length", hp.n_ctx_train));
}

}  // namespace

void read_sliding_window(const gguf::File& f, HParams& hp, int64_t default_period) {
  const std::string a = hp.arch + ".";
  auto window = f.try_int(a + "attention.sliding_window");
  if (!window || *window <= 0) return;
  hp.n_swa = *window;
  // llama.cpp: an array marks the sliding layers; else of every n layers
  // (n from the key, or the architecture's) the last is global.
  hp.swa_layers.assign(hp.n_layer, false);
  const std::string pattern_key = a + "attention.sliding_window_pattern";
  const gguf::Value* pattern = f.find(pattern_key);
  if (pattern && pattern->type == gguf::ValueType::Array) {
    const auto marks = f.try_int_array(pattern_key);
    if (!marks || static_cast<int64_t>(marks->size()) != hp.n_layer)
      throw Error(f.path() + ": " + pattern_key + " must hold one integer per layer (" + std::to_string(hp.n_layer) +
                  ")");
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.swa_layers[il] = (*marks)[il] != 0;
  } else {
    const int64_t n = f.try_int(pattern_key).value_or(default_period);
    if (n < 0) throw Error(f.path() + ": " + pattern_key + " is negative");
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.swa_layers[il] = n == 0 || il % n < n - 1;
  }
}

void write_sliding_window(gguf::Writer& w, const HParams& hp) {
  const std::string a = hp.arch + ".";
  if (hp.n_swa <= 0) return;
  w.set(a + "attention.sliding_window", gguf::Value::make_u32(static_cast<uint32_t>(hp.n_swa)));
  int64_t period = 0;  // the pattern as a period when it is one
  for (int64_t n = 1; n <= hp.n_layer && period == 0; ++n) {
    bool fits = true;
    for (int64_t il = 0; il < hp.n_layer; ++il) fits = fits && hp.is_swa(static_cast<int>(il)) == (il % n < n - 1);
    if (fits) period = n;
  }
  if (period > 0) {
    w.set(a + "attention.sliding_window_pattern", gguf::Value::make_u32(static_cast<uint32_t>(period)));
  } else {
    std::vector<int32_t> marks(hp.swa_layers.begin(), hp.swa_layers.end());
    w.set(a + "attention.sliding_window_pattern", gguf::Value::make_i32_array(marks));
  }
}

void read_common_hparams(const gguf::File& f, HParams& hp) {
  const std::string& path = f.path();
  const std::string a = hp.arch + ".";
  hp.n_embd = positive_key(f, a + "embedding_length");
  // Optional in a file of experts, as llama.cpp reads it: the converter
  // writes none where the model has no dense width (Qwen3.5/3.6 MoE).
  const bool experts = f.find(a + "expert_count") != nullptr;
  hp.n_layer = positive_key(f, a + "block_count");
  // Every layer has tensors of its own: a count beyond the file's tensors is
  // hostile or broken, and must fail before per-layer tables are allocated.
  if (hp.n_layer > static_cast<int64_t>(f.tensors().size()))
    throw Error(path + ": metadata key '" + a + "block_count' is " + std::to_string(hp.n_layer) +
                ", more layers than the file's " + std::to_string(f.tensors().size()) + " tensors can hold");
  // llama.cpp's n_layer(): the NextN layers at the end of block_count are not run.
  hp.n_layer_nextn = f.try_int(a + "nextn_predict_layers").value_or(0);
  if (hp.n_layer_nextn < 0 || hp.n_layer_nextn >= hp.n_layer)
    throw Error(path + ": metadata key '" + a + "nextn_predict_layers' is " + std::to_string(hp.n_layer_nextn) +
                ", block_count " + std::to_string(hp.n_layer));
  hp.n_layer -= hp.n_layer_nextn;
  hp.n_head = positive_key(f, a + "attention.head_count");
  hp.n_head_kv = per_layer_key(f, a + "attention.head_count_kv", hp, hp.n_head, hp.n_head_kv_layers);
  hp.n_ff = per_layer_key(f, a + "feed_forward_length", hp, experts ? std::optional<int64_t>(0) : std::nullopt,
                          hp.n_ff_layers);
  hp.n_ctx_train = positive_key(f, a + "context_length", 2048);
  for (int il = 0; il < hp.n_layer; ++il)
    if (hp.n_head % hp.n_head_kv_of(il) != 0)
      throw Error(path + ": head_count " + std::to_string(hp.n_head) + " is not a multiple of head_count_kv " +
                  std::to_string(hp.n_head_kv_of(il)) +
                  (hp.n_head_kv_layers.empty() ? "" : " of layer " + std::to_string(il)));
  hp.head_dim = positive_key(f, a + "attention.key_length", hp.n_embd / hp.n_head);
  if (hp.head_dim * hp.n_head != hp.n_embd && !f.find(a + "attention.key_length"))
    throw Error(path + ": embedding_length " + std::to_string(hp.n_embd) + " is not divisible by head_count " +
                std::to_string(hp.n_head));
  hp.head_dim_v = positive_key(f, a + "attention.value_length", hp.head_dim);
  hp.n_rot = positive_key(f, a + "rope.dimension_count", hp.head_dim);
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
    throw Error(path + ": rope.dimension_count " + std::to_string(hp.n_rot) + " must be even and at most the head size " +
                std::to_string(hp.head_dim));
  if (auto eps = f.try_float(a + "attention.layer_norm_rms_epsilon")) hp.rms_eps = static_cast<float>(*eps);
  if (auto base = f.try_float(a + "rope.freq_base")) hp.rope_freq_base = static_cast<float>(*base);
  const std::string scaling = f.try_string(a + "rope.scaling.type").value_or("linear");
  if (scaling != "none" && scaling != "linear" && scaling != "yarn")
    throw Error(path + ": rope scaling type '" + scaling + "' is not supported");
  if (auto factor = f.try_float(a + "rope.scaling.factor"); factor && *factor > 0) hp.rope_freq_scale = 1.0f / *factor;
  if (auto factor = f.try_float(a + "rope.scale_linear"); factor && *factor > 0) hp.rope_freq_scale = 1.0f / *factor;
  if (scaling == "none") hp.rope_freq_scale = 1.0f;
  if (!(hp.rms_eps > 0) || !(hp.rope_freq_base > 0)) throw Error(path + ": invalid rms epsilon or rope base");
  if (scaling == "yarn") read_yarn(f, hp);
}

void read_expert_hparams(const gguf::File& f, HParams& hp, bool required, int64_t ff_fallback) {
  const std::string a = hp.arch + ".";
  if (!required && !f.find(a + "expert_count")) return;
  hp.n_expert = positive_key(f, a + "expert_count");
  hp.n_expert_used = positive_key(f, a + "expert_used_count");
  if (hp.n_expert_used > hp.n_expert)
    throw Error(f.path() + ": expert_used_count " + std::to_string(hp.n_expert_used) + " exceeds expert_count " +
                std::to_string(hp.n_expert));
  hp.n_ff_exp = positive_key(f, a + "expert_feed_forward_length", ff_fallback);
  if (auto s = f.try_float(a + "expert_weights_scale")) hp.expert_weights_scale = static_cast<float>(*s);
}

std::vector<TensorSpec> global_tensors(const HParams& hp) {
  const int64_t E = hp.n_embd;
  return {{Role::TokenEmbd, {E, hp.n_vocab, 1, 1}},
          {Role::OutputNorm, {E, 1, 1, 1}},
          {Role::Output, {E, hp.n_vocab, 1, 1}, false}};
}

std::vector<TensorSpec> attention_tensors(const HParams& hp, bool qk_norm) {
  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), D = hp.head_dim;
  std::vector<TensorSpec> t = {{Role::AttnNorm, {E, 1, 1, 1}}, {Role::AttnQ, {E, Q, 1, 1}},
                               {Role::AttnK, {E, KV, 1, 1}},   {Role::AttnV, {E, KV, 1, 1}},
                               {Role::AttnOutput, {Q, E, 1, 1}}};
  if (qk_norm) append(t, {{Role::AttnQNorm, {D, 1, 1, 1}}, {Role::AttnKNorm, {D, 1, 1, 1}}});
  return t;
}

std::vector<TensorSpec> expert_tensors(int64_t E, int64_t F, int64_t X) {
  return {{Role::FfnGateExps, {E, F, X, 1}, false, true},
          {Role::FfnUpExps, {E, F, X, 1}, false, true},
          {Role::FfnGateUpExps, {E, 2 * F, X, 1}, false},
          {Role::FfnDownExps, {F, E, X, 1}}};
}

std::vector<TensorSpec> ffn_tensors(const HParams& hp) {
  const int64_t E = hp.n_embd;
  std::vector<TensorSpec> t = {{Role::FfnNorm, {E, 1, 1, 1}}};
  if (hp.n_expert > 0) {
    const int64_t F = hp.n_ff_exp, X = hp.n_expert;
    t.push_back({Role::FfnGateInp, {E, X, 1, 1}});
    append(t, expert_tensors(E, F, X));
  } else {
    const int64_t F = hp.n_ff;
    append(t, {{Role::FfnGate, {E, F, 1, 1}}, {Role::FfnUp, {E, F, 1, 1}}, {Role::FfnDown, {F, E, 1, 1}}});
  }
  return t;
}

void read_deepseek_moe_hparams(const gguf::File& f, HParams& hp, ExpertGating gating) {
  const std::string a = hp.arch + ".";
  hp.n_layer_dense_lead = f.try_int(a + "leading_dense_block_count").value_or(0);
  if (hp.n_layer_dense_lead < 0 || hp.n_layer_dense_lead > hp.n_layer)
    throw Error(f.path() + ": leading_dense_block_count " + std::to_string(hp.n_layer_dense_lead) + " is not in [0, " +
                std::to_string(hp.n_layer) + "]");
  read_expert_hparams(f, hp, true, 0);
  hp.n_expert_shared = f.try_int(a + "expert_shared_count").value_or(0);
  if (hp.n_expert_shared < 0) throw Error(f.path() + ": expert_shared_count is negative");
  hp.expert_weights_norm = f.try_int(a + "expert_weights_norm").value_or(0) != 0;
  hp.expert_gating = gating;
  switch (f.try_int(a + "expert_gating_func").value_or(0)) {
    case 0: break;  // llama.cpp's "none": the architecture's default
    case 1: hp.expert_gating = ExpertGating::Softmax; break;
    case 2: hp.expert_gating = ExpertGating::Sigmoid; break;
    default:
      throw Error(f.path() + ": expert_gating_func must be 1 (softmax) or 2 (sigmoid) for " + hp.arch);
  }
  hp.n_expert_groups = f.try_int(a + "expert_group_count").value_or(0);
  hp.n_group_used = f.try_int(a + "expert_group_used_count").value_or(0);
  if (hp.n_expert_groups > 1 &&
      (hp.n_expert % hp.n_expert_groups != 0 || hp.n_group_used < 1 || hp.n_group_used > hp.n_expert_groups))
    throw Error(f.path() + ": " + std::to_string(hp.n_expert) + " experts in " + std::to_string(hp.n_expert_groups) +
                " groups, " + std::to_string(hp.n_group_used) +
                " used: the groups must divide the experts and at least one be used");
}

void write_deepseek_moe_hparams(gguf::Writer& w, const HParams& hp) {
  const std::string a = hp.arch + ".";
  w.set(a + "leading_dense_block_count", gguf::Value::make_u32(u32(hp.n_layer_dense_lead)));
  w.set(a + "expert_shared_count", gguf::Value::make_u32(u32(hp.n_expert_shared)));
  w.set(a + "expert_weights_scale", gguf::Value::make_f32(hp.expert_weights_scale));
  w.set(a + "expert_weights_norm", gguf::Value::make_bool(hp.expert_weights_norm));
  w.set(a + "expert_gating_func", gguf::Value::make_u32(hp.expert_gating == ExpertGating::Sigmoid ? 2 : 1));
  if (hp.n_expert_groups > 0) {
    w.set(a + "expert_group_count", gguf::Value::make_u32(u32(hp.n_expert_groups)));
    w.set(a + "expert_group_used_count", gguf::Value::make_u32(u32(hp.n_group_used)));
  }
}

std::vector<TensorSpec> deepseek_moe_ffn_tensors(const HParams& hp, int il) {
  const int64_t E = hp.n_embd;
  if (il < hp.n_layer_dense_lead)
    return {{Role::FfnGate, {E, hp.n_ff, 1, 1}}, {Role::FfnUp, {E, hp.n_ff, 1, 1}}, {Role::FfnDown, {hp.n_ff, E, 1, 1}}};
  const int64_t F = hp.n_ff_exp, X = hp.n_expert, S = F * hp.n_expert_shared;
  std::vector<TensorSpec> t = {{Role::FfnGateInp, {E, X, 1, 1}}, {Role::FfnExpProbsB, {X, 1, 1, 1}, false, true}};
  append(t, expert_tensors(E, F, X));
  if (S > 0)
    append(t, {{Role::FfnGateShexp, {E, S, 1, 1}}, {Role::FfnUpShexp, {E, S, 1, 1}}, {Role::FfnDownShexp, {S, E, 1, 1}}});
  return t;
}

std::vector<TensorSpec> nextn_tensors(const HParams& hp) {
  const int64_t E = hp.n_embd, V = hp.n_vocab;
  return {{Role::NextnEhProj, {2 * E, E, 1, 1}},
          {Role::NextnEnorm, {E, 1, 1, 1}},
          {Role::NextnHnorm, {E, 1, 1, 1}},
          {Role::NextnEmbedTokens, {E, V, 1, 1}, false},
          {Role::NextnSharedHeadHead, {E, V, 1, 1}, false},
          {Role::NextnSharedHeadNorm, {E, 1, 1, 1}, false, true}};
}

void append(std::vector<TensorSpec>& rows, const std::vector<TensorSpec>& more) {
  rows.insert(rows.end(), more.begin(), more.end());
}

void write_common_hparams(gguf::Writer& w, const HParams& hp) {
  const std::string a = hp.arch + ".";
  w.set("general.architecture", gguf::Value::make_string(hp.arch));
  w.set(a + "context_length", gguf::Value::make_u32(u32(hp.n_ctx_train)));
  w.set(a + "embedding_length", gguf::Value::make_u32(u32(hp.n_embd)));
  w.set(a + "feed_forward_length", per_layer_value(hp, hp.n_ff, hp.n_ff_layers));
  w.set(a + "block_count", gguf::Value::make_u32(u32(hp.n_layer + hp.n_layer_nextn)));
  if (hp.n_layer_nextn > 0) w.set(a + "nextn_predict_layers", gguf::Value::make_u32(u32(hp.n_layer_nextn)));
  w.set(a + "attention.head_count", gguf::Value::make_u32(u32(hp.n_head)));
  w.set(a + "attention.head_count_kv", per_layer_value(hp, hp.n_head_kv, hp.n_head_kv_layers));
  if (hp.head_dim * hp.n_head != hp.n_embd) {
    w.set(a + "attention.key_length", gguf::Value::make_u32(u32(hp.head_dim)));
  }
  if (hp.head_dim * hp.n_head != hp.n_embd || hp.head_dim_v != hp.head_dim)
    w.set(a + "attention.value_length", gguf::Value::make_u32(u32(hp.head_dim_v ? hp.head_dim_v : hp.head_dim)));
  w.set(a + "rope.dimension_count", gguf::Value::make_u32(u32(hp.n_rot)));
  w.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::make_f32(hp.rms_eps));
  w.set(a + "rope.freq_base", gguf::Value::make_f32(hp.rope_freq_base));
  if (hp.rope_freq_scale != 1.0f || hp.rope_yarn.ext_factor != 0.0f) {
    const bool yarn = hp.rope_yarn.ext_factor != 0.0f;
    w.set(a + "rope.scaling.type", gguf::Value::make_string(yarn ? "yarn" : "linear"));
    w.set(a + "rope.scaling.factor", gguf::Value::make_f32(1.0f / hp.rope_freq_scale));
    if (yarn)
      w.set(a + "rope.scaling.original_context_length", gguf::Value::make_u32(u32(hp.rope_yarn.n_ctx_orig)));
    if (yarn && hp.rope_yarn_log_mul != 0.0f)
      w.set(a + "rope.scaling.yarn_log_multiplier", gguf::Value::make_f32(0.1f * hp.rope_yarn_log_mul));
  }
  if (hp.n_expert > 0) {
    w.set(a + "expert_count", gguf::Value::make_u32(u32(hp.n_expert)));
    w.set(a + "expert_used_count", gguf::Value::make_u32(u32(hp.n_expert_used)));
    w.set(a + "expert_feed_forward_length", gguf::Value::make_u32(u32(hp.n_ff_exp)));
  }
}

}  // namespace qlens
