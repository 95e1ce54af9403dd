#include <cstdio>
#include <filesystem>

#include "args.h"
#include "commands.h"
#include "qlens/error.h"
#include "tools/synth.h"

namespace qlens::cli {

int cmd_synth(int argc, char** argv) {
  std::string preset = "tiny", out, type_name_arg = "F16", vocab;
  int64_t seed = 42;
  ArgParser p("synth", "qlens synth --preset NAME -o FILE [--type F16|F32|BF16] [--seed S] [--vocab FILE]",
              "Writes a llama GGUF with random weights of realistic shapes and a working vocabulary,\n"
              "for tests and benchmarks.");
  std::string presets;
  for (const auto& s : tools::synth_presets())
    presets += "  " + s.name + ": n_embd " + std::to_string(s.n_embd) + ", n_ff " + std::to_string(s.n_ff) + ", " +
               std::to_string(s.n_layer) + " layers, " + std::to_string(s.n_head) + " heads (" +
               std::to_string(s.n_head_kv) + " KV), vocab " + std::to_string(s.n_vocab) + "\n";
  p.add({"--preset"}, &preset, "NAME", "model shape (default tiny)");
  p.add({"-o", "--output"}, &out, "FILE", "output GGUF file (required)");
  p.add({"--type"}, &type_name_arg, "TYPE", "type of the weight matrices: F16 (default), F32 or BF16");
  p.add({"--seed"}, &seed, "S", "random seed (default 42)");
  p.add({"--vocab"}, &vocab, "FILE",
        "copy the tokenizer from this GGUF (default for 160m and 1.1b: ../shared's llama-spm vocabulary when "
        "present; otherwise a generated SentencePiece vocabulary)");
  p.add_note("presets:\n" + presets);
  if (!p.parse(argc, argv)) return 0;
  if (out.empty()) throw Error("qlens synth: -o FILE is required");
  auto type = type_from_name(type_name_arg);
  if (!type) throw Error("qlens synth: --type: unknown type '" + type_name_arg + "'");

  tools::SynthOptions opt;
  opt.preset = preset;
  opt.type = *type;
  opt.seed = static_cast<uint64_t>(seed);
  opt.vocab_file = vocab;
  if (vocab.empty() && preset != "tiny") {
    // The 32000-token llama vocabulary, when the shared data is beside us.
    for (const char* dir : {"../shared", "../../shared"}) {
      auto candidate = std::filesystem::path(dir) / "models/llama-vocab/ggml-vocab-llama-spm.gguf";
      if (std::filesystem::exists(candidate)) {
        opt.vocab_file = candidate.string();
        break;
      }
    }
  }
  int64_t n = tools::synth_model(opt, out);
  std::printf("wrote %s: preset %s, %s weights, %.1fM parameters%s%s\n", out.c_str(), preset.c_str(),
              type_name_arg.c_str(), n / 1e6, opt.vocab_file.empty() ? "" : ", vocabulary from ",
              opt.vocab_file.c_str());
  return 0;
}

}  // namespace qlens::cli
