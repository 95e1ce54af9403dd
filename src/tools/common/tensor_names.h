// What a GGUF weight's name says, as every JSON file writes it (docs/JSON.md):
// its role ("attn_q" of "blk.3.attn_q.weight", "output" of "output.weight")
// and its layer (3; -1 outside the blocks, written as null).
#pragma once

#include <string>

namespace qlens::tools {

std::string tensor_role(const std::string& name);
int tensor_layer(const std::string& name);
// Matrices llama.cpp's quantize never quantizes whatever the mix: the
// router ("ffn_gate_inp": its logits pick the experts; it is tiny), the
// short convolution's kernels ("ssm_conv1d": tiny, and ssm_conv reads F32
// only) and Gemma 4's projection into the per-layer embeddings
// ("per_layer_model_proj"). quantize keeps them; sensitivity does not probe
// them.
bool never_quantized(const std::string& role);
// The token embeddings, as llama.cpp's quantize groups them: token_embd and
// Gemma 4's per-layer table (per_layer_token_embd) take the same rules and
// --token-embedding-type, and need no imatrix.
bool is_token_embedding(const std::string& role);

}  // namespace qlens::tools
