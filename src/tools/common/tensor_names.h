// What a GGUF weight's name says, as every JSON file writes it (docs/JSON.md):
// its role ("attn_q" of "blk.3.attn_q.weight", "output" of "output.weight")
// and its layer (3; -1 outside the blocks, written as null).
#pragma once

#include <string>

namespace qlens::tools {

std::string tensor_role(const std::string& name);
int tensor_layer(const std::string& name);

}  // namespace qlens::tools
