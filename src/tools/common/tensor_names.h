// What a GGUF weight's name says, as every JSON file writes it (docs/JSON.md):
// its role ("attn_q" of "blk.3.attn_q.weight", "output" of "output.weight")
// and its layer (3; -1 outside the blocks, written as null).
#pragma once

#include <string>

namespace qlens::tools {

std::string tensor_role(const std::string& name);
int tensor_layer(const std::string& name);
// Matrices llama.cpp's quantize never quantizes whatever the mix: the
// router ("ffn_gate_inp": its logits pick the experts; it is tiny) and the
// short convolution's kernels ("ssm_conv1d": tiny, and ssm_conv reads F32
// only). quantize keeps them; sensitivity does not probe them.
bool never_quantized(const std::string& role);

}  // namespace qlens::tools
