// llama-quantize's per-tensor rules (mix_rules.h), one function per tensor
// category as llama.cpp 0c1e570's llama_tensor_get_type_impl tests them, in
// its order (each if-else chain stops at the first mix it names).
#include "tools/quantize/mix_rules.h"

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "qlens/error.h"
#include "tools/common/tensor_names.h"

namespace qlens::tools {

Role role_of(const std::string& tensor) { return {tensor_role(tensor), tensor_layer(tensor)}; }

namespace {

bool is_attention_v(const std::string& role) { return role == "attn_v" || role == "attn_qkv" || role == "attn_kv_b"; }

}  // namespace

ModelFacts read_model_facts(const gguf::File& in) {
  const std::string arch = in.try_string("general.architecture").value_or("llama");
  ModelFacts facts;
  facts.n_layer = static_cast<int>(in.try_int(arch + ".block_count").value_or(0));
  const int64_t n_head = in.try_int(arch + ".attention.head_count").value_or(1);
  // A count per layer (Gemma 4): the first layer's, as llama.cpp's n_gqa() reads it.
  const std::string kv_key = arch + ".attention.head_count_kv";
  const gguf::Value* kv = in.find(kv_key);
  int64_t n_head_kv = n_head;
  if (kv && kv->type == gguf::ValueType::Array) {
    if (auto counts = in.try_int_array(kv_key); counts && !counts->empty()) n_head_kv = counts->front();
  } else {
    n_head_kv = in.try_int(kv_key).value_or(n_head);
  }
  facts.n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 1;
  facts.tied_output = in.find_tensor("output.weight") == nullptr;
  facts.n_expert = in.try_int(arch + ".expert_count").value_or(0);
  for (const auto& t : in.tensors()) facts.n_attention_v += is_attention_v(role_of(t.name).name);
  return facts;
}

namespace {

// llama.cpp's heuristic for which layers of a deep stack matter most: the first
// and last eighth, and every third layer between.
bool use_more_bits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

bool one_of(std::string_view m, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names)
    if (m == n) return true;
  return false;
}

// What a category's rule looks at.
struct Ask {
  const std::string& m;  // the mix's name
  DType base;
  const Role& role;
  const std::array<int64_t, 4>& ne;
  const ModelFacts& f;
  bool imatrix;
  MixCounters& counters;
  // A layer for the FFN rules: the tensor's own in a mixture of experts (as
  // llama.cpp parses it from the name), else the category's counter.
  int layer(int counter) const { return f.n_expert > 1 ? role.layer : counter; }
};

// The very-low-bit mixes with their own branch of rules.
bool tiny_mix(std::string_view m) { return one_of(m, {"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"}); }

DType output_rule(const Ask& a) {
  if (a.m == "MXFP4_MOE" || a.ne[0] % type_traits(a.base).block_size != 0) return DType::Q8_0;
  if (one_of(a.m, {"IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"})) return DType::Q5_K;
  return a.base == DType::Q8_0 ? DType::Q8_0 : DType::Q6_K;
}

DType token_embd_rule(const Ask& a) {
  if (one_of(a.m, {"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"})) return DType::Q2_K;
  if (one_of(a.m, {"IQ2_S", "IQ2_M", "IQ3_XXS"})) return DType::IQ3_S;
  if (one_of(a.m, {"TQ1_0", "TQ2_0", "Q2_0"})) return DType::Q4_K;
  return a.base;
}

std::optional<DType> tiny_mix_rule(const Ask& a) {
  const bool s_or_m = one_of(a.m, {"IQ2_S", "IQ2_M"});
  const std::string& r = a.role.name;
  if (is_attention_v(r)) {
    ++a.counters.attention_v;
    if (a.f.n_gqa >= 4 || a.f.n_expert >= 4) return DType::Q4_K;
    return s_or_m ? DType::IQ3_S : DType::Q2_K;
  }
  if (a.f.n_expert == 8 && r == "attn_k") return DType::Q4_K;
  if (r.find("ffn_down") != std::string::npos) {
    const bool first_eighth = a.counters.ffn_down++ < a.f.n_layer / 8;
    if (first_eighth) return s_or_m ? DType::IQ3_S : DType::Q2_K;
    return std::nullopt;
  }
  if (r == "attn_output") {
    if (a.f.n_expert == 8) return DType::Q5_K;
    if (one_of(a.m, {"IQ1_S", "IQ1_M"})) return DType::IQ2_XXS;
    if (s_or_m) return DType::IQ3_S;
  }
  return std::nullopt;
}

std::optional<DType> attention_v_rule(const Ask& a) {
  const int i = a.counters.attention_v++;
  const bool gqa4 = a.f.n_gqa >= 4;
  std::optional<DType> t;
  if (a.m == "Q2_K") t = gqa4 ? DType::Q4_K : DType::Q3_K;
  else if (a.m == "Q2_K_S" && gqa4) t = DType::Q4_K;
  else if (a.m == "IQ3_XXS") t = gqa4 ? DType::Q4_K : !a.imatrix ? DType::IQ3_S : DType::IQ3_XXS;
  else if (one_of(a.m, {"IQ3_XS", "IQ3_S"}) && gqa4) t = DType::Q4_K;
  else if (a.m == "IQ3_M") t = DType::Q4_K;
  else if (a.m == "Q3_K_M") t = i < 2 ? DType::Q5_K : DType::Q4_K;
  else if (a.m == "Q3_K_L") t = DType::Q5_K;
  else if (one_of(a.m, {"IQ4_NL", "IQ4_XS"}) && gqa4) t = DType::Q5_K;
  else if (one_of(a.m, {"Q4_K_M", "Q5_K_M"}) && use_more_bits(i, a.f.n_attention_v)) t = DType::Q6_K;
  else if (a.m == "Q4_K_S" && i < 4) t = DType::Q5_K;
  // "for the 8-expert model, bumping this to Q8_0 trades just ~128MB"
  if (a.f.n_expert == 8) t = DType::Q8_0;
  return t;
}

std::optional<DType> ffn_down_rule(const Ask& a) {
  const int i = a.layer(a.counters.ffn_down++), n = a.f.n_layer;
  const std::string& m = a.m;
  if (m == "Q2_K") return DType::Q3_K;
  if (m == "Q2_K_S") return i < n / 8 ? std::optional(DType::Q4_K) : std::nullopt;
  if (m == "IQ3_XXS" && !a.imatrix) return i < n / 8 ? DType::Q4_K : DType::Q3_K;
  if (m == "Q3_K_M") return i < n / 16 ? DType::Q5_K : DType::Q4_K;  // (Q3_K only for falcon)
  if (m == "IQ3_M" && (i < n / 8 || (a.f.n_expert == 8 && use_more_bits(i, n)))) return DType::Q4_K;
  if (m == "Q3_K_L") return DType::Q5_K;
  if (m == "Q4_K_M") return use_more_bits(i, n) ? std::optional(DType::Q6_K) : std::nullopt;
  if (i < n / 8 && one_of(m, {"IQ4_NL", "IQ4_XS"}) && !a.imatrix) return DType::Q5_K;
  if (m == "Q5_K_M" && use_more_bits(i, n)) return DType::Q6_K;
  if (m == "Q4_K_S" && i < n / 8) return DType::Q5_K;
  // Guards the first ffn_down layers of the legacy 4/5-bit types with an imatrix.
  if (one_of(m, {"Q4_0", "Q5_0"}) && a.imatrix && i < n / 8) return m == "Q4_0" ? DType::Q4_1 : DType::Q5_1;
  return std::nullopt;
}

std::optional<DType> attention_output_rule(const Ask& a) {
  const std::string& m = a.m;
  if (a.f.n_expert == 8) {
    if (one_of(m, {"Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ3_S", "IQ3_M",
                   "IQ4_XS"}))
      return DType::Q5_K;
    return std::nullopt;
  }
  if (m == "Q2_K") return DType::Q3_K;
  if (m == "IQ3_XXS") return DType::IQ3_S;
  if (m == "Q3_K_M") return DType::Q4_K;
  if (m == "Q3_K_L") return DType::Q5_K;
  if (m == "IQ3_M") return DType::Q4_K;
  return std::nullopt;
}

// IQ3_XS's middle layers of ffn_gate and ffn_up.
std::optional<DType> ffn_gate_up_rule(const Ask& a, int& counter) {
  const int i = a.layer(counter++), n = a.f.n_layer;
  if (a.m == "IQ3_XS" && i >= n / 8 && i < 7 * n / 8) return DType::IQ3_XXS;
  return std::nullopt;
}

std::optional<DType> category_rule(const Ask& a) {
  const std::string& r = a.role.name;
  if (a.m == "MXFP4_MOE") return a.ne[2] > 1 ? DType::MXFP4 : DType::Q8_0;
  if (is_token_embedding(r)) return token_embd_rule(a);
  if (tiny_mix(a.m)) return tiny_mix_rule(a);
  if (is_attention_v(r)) return attention_v_rule(a);
  if (r == "attn_k") {
    if (a.f.n_expert == 8) return DType::Q8_0;
    if (a.m == "IQ3_XS") return DType::IQ3_XXS;
    if (a.m == "IQ3_XXS") return DType::IQ2_S;
    return std::nullopt;
  }
  if (r == "attn_q") {
    if (a.m == "IQ3_XS") return DType::IQ3_XXS;
    if (a.m == "IQ3_XXS") return DType::IQ2_S;
    return std::nullopt;
  }
  if (r == "attn_output") return attention_output_rule(a);
  // (llama.cpp's categories by substring, in its order: ffn_up, ffn_gate, ffn_down)
  if (r.find("ffn_up") != std::string::npos) return ffn_gate_up_rule(a, a.counters.ffn_up);
  if (r.find("ffn_gate") != std::string::npos) return ffn_gate_up_rule(a, a.counters.ffn_gate);
  if (r.find("ffn_down") != std::string::npos) return ffn_down_rule(a);
  return std::nullopt;
}

}  // namespace

DType role_type(const QuantMix& mix, const Role& role, const std::array<int64_t, 4>& ne, const ModelFacts& facts,
                bool has_imatrix, MixCounters& counters, std::string* reason) {
  const Ask a{mix.name, mix.base, role, ne, facts, has_imatrix, counters};
  // A tied embedding is the output matrix too, and gets its type.
  const bool output = role.name == "output" || (is_token_embedding(role.name) && facts.tied_output);
  const std::optional<DType> t = output ? std::optional(output_rule(a)) : category_rule(a);
  if (!t || *t == mix.base) return mix.base;
  *reason = "role " + role.name;
  return *t;
}

DType fallback_type(DType wanted, int64_t n, const std::string& tensor) {
  DType t = wanted;
  switch (wanted) {
    case DType::IQ1_S:
    case DType::IQ1_M:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ4_XS: t = DType::IQ4_NL; break;
    case DType::Q2_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::TQ1_0:
    case DType::TQ2_0: t = DType::Q4_0; break;
    case DType::Q4_K: t = DType::Q5_0; break;
    case DType::Q5_K: t = DType::Q5_1; break;
    case DType::Q6_K: t = DType::Q8_0; break;
    default:
      if (type_traits(wanted).block_size > 32)
        throw Error("tensor '" + tensor + "': rows of " + std::to_string(n) + " are not a multiple of " +
                    std::to_string(type_traits(wanted).block_size) + ", and " + std::string(type_name(wanted)) +
                    " has no fallback type (llama-quantize refuses it too)");
      break;
  }
  return n % type_traits(t).block_size == 0 ? t : DType::F16;
}

bool requires_imatrix(const std::string& role, DType type, const QuantMix& mix) {
  if (is_token_embedding(role) || role == "output") return false;
  switch (type) {
    case DType::IQ3_XXS:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ1_M:
    case DType::IQ1_S: return true;
    case DType::Q2_K: return mix.name == "Q2_K_S";
    default: return false;
  }
}

}  // namespace qlens::tools
