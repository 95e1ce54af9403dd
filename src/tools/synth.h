// Synthetic llama models: real shapes, random weights, a working vocabulary.
// For tests and benchmarks where the numbers need not mean anything but the
// shapes, types and file layout must be those of real models.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qlens/types.h"

namespace qlens::tools {

struct SynthPreset {
  std::string name;
  int64_t n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab, n_ctx;
  bool tied_output;
};

const std::vector<SynthPreset>& synth_presets();

struct SynthOptions {
  std::string preset = "tiny";
  DType type = DType::F16;  // type of the 2-D weights; norms stay F32
  uint64_t seed = 42;
  // GGUF file whose tokenizer.* metadata to copy; empty: a generated
  // SentencePiece vocabulary (byte fallback plus letter pieces).
  std::string vocab_file;
};

// Writes the model to `path` (atomically). Returns the number of parameters.
int64_t synth_model(const SynthOptions& opt, const std::string& path);

}  // namespace qlens::tools
