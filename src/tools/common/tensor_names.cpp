#include "tools/common/tensor_names.h"

#include <cstdlib>

namespace qlens::tools {

std::string tensor_role(const std::string& name) {
  std::string s = name;
  if (s.rfind("blk.", 0) == 0) {
    const size_t dot = s.find('.', 4);
    if (dot != std::string::npos) s = s.substr(dot + 1);
  }
  const std::string suffix = ".weight";
  if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    s.resize(s.size() - suffix.size());
  return s;
}

int tensor_layer(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

bool is_token_embedding(const std::string& role) { return role == "token_embd" || role == "per_layer_token_embd"; }

bool never_quantized(const std::string& role) {
  return role == "ffn_gate_inp" || role == "ssm_conv1d" || role == "per_layer_model_proj";
}

}  // namespace qlens::tools
