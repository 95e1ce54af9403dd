// llama-quantize's per-tensor rules (llama.cpp 0c1e570's
// llama_tensor_get_type_impl, tensor_type_fallback and
// tensor_requires_imatrix): which type a mix gives each tensor, by its role
// and layer and the model's shape. docs/QUANTIZATION.md lists them.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "qlens/gguf.h"
#include "qlens/types.h"
#include "tools/quantize/quantize.h"

namespace qlens::tools {

// What a tensor is for, from llama.cpp's names: "blk.7.ffn_down.weight" ->
// role "ffn_down", layer 7.
struct Role {
  std::string name;
  int layer = -1;
};
Role role_of(const std::string& tensor);

// What llama.cpp's rules look at besides the tensor's role and layer.
struct ModelFacts {
  int n_layer = 0;
  int64_t n_gqa = 1;        // query heads per KV head
  int64_t n_expert = 0;     // a mixture of experts (llama.cpp has rules for 8: Mixtral)
  bool tied_output = true;  // no output.weight: token_embd is also the output matrix
  int n_attention_v = 0;    // attn_v-like tensors (attn_v, attn_qkv, attn_kv_b)
};
ModelFacts read_model_facts(const gguf::File& in);

// llama.cpp's counters of the attn_v-like and FFN tensors its rules have
// seen so far, in file order (its use_more_bits and first-eighth rules count
// tensors, not layers, where a model is dense).
struct MixCounters {
  int attention_v = 0, ffn_down = 0, ffn_gate = 0, ffn_up = 0;
};

// The mix's type for a tensor of this role and shape (ne[0] the row length,
// ne[2] > 1 a 3-D expert tensor), before the fallback for rows that fit no
// block; the base type where the mix has no rule. *reason names the rule.
DType role_type(const QuantMix& mix, const Role& role, const std::array<int64_t, 4>& ne, const ModelFacts& facts,
                bool has_imatrix, MixCounters& counters, std::string* reason);

// llama.cpp's fallback for a type whose block does not divide a row of n:
// the 256-block types to a 32-block type of about their size, then F16 when
// even that does not fit; a type with no fallback (Q1_0, NVFP4) is refused
// naming the tensor, as llama-quantize refuses it.
DType fallback_type(DType wanted, int64_t n, const std::string& tensor);

// The types llama-quantize refuses to write without an importance matrix
// (token_embd and output exempt): the 1-2 bit i-quants and IQ3_XXS, and
// Q2_K in a Q2_K_S file.
bool requires_imatrix(const std::string& role, DType type, const QuantMix& mix);

}  // namespace qlens::tools
