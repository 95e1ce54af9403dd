#include <cstdio>
#include <filesystem>

#include "core/output_path.h"
#include "args.h"
#include "commands.h"
#include "qlens/error.h"
#include "tools/synth/synth.h"

namespace qlens::cli {

namespace {

// One line of --help: the shape, and what the architecture adds to it.
std::string preset_line(const tools::SynthPreset& s) {
  std::string line = "  " + s.name + " (" + s.arch + "): n_embd " + std::to_string(s.n_embd) + ", n_ff " +
                     std::to_string(s.n_ff) + ", " + std::to_string(s.n_layer) + " layers, " +
                     std::to_string(s.n_head) + " heads (" + std::to_string(s.n_head_kv) + " KV";
  if (s.head_dim > 0) line += ", head_dim " + std::to_string(s.head_dim);
  if (s.n_rot > 0) line += ", rope on " + std::to_string(s.n_rot) + " dims";
  if (s.rope_scaling_factor > 0) line += ", Llama 3 rope scaling";
  line += "), vocab " + std::to_string(s.n_vocab);
  if (s.n_swa > 0)
    line += ", sliding window " + std::to_string(s.n_swa) + " on " + std::to_string(s.swa_period - 1) +
            " of every " + std::to_string(s.swa_period) + " layers";
  if (s.tied_output) line += ", tied output";
  return line + "\n";
}

// The 32000-token llama vocabulary, when the shared data is beside us; "" otherwise.
std::string shared_llama_vocab() {
  for (const char* dir : {"../shared", "../../shared"}) {
    auto candidate = std::filesystem::path(dir) / "models/llama-vocab/ggml-vocab-llama-spm.gguf";
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return "";
}

}  // namespace

int cmd_synth(int argc, char** argv) {
  std::string preset, arch, out, type_name_arg = "F16", vocab;
  int64_t seed = 42, n_vocab = 0;
  ArgParser p("synth",
              "qlens synth --preset NAME -o FILE [--arch ARCH] [--type F16|F32|BF16] [--seed S] [--vocab FILE | "
              "--n-vocab N]",
              "Writes a GGUF model of a preset's architecture (llama, llama3 = llama with rope_freqs, gemma3,\n"
              "qwen2, qwen3, qwen3moe, phi3, gpt-oss, deepseek2, glm4moe, qwen35, qwen35moe, gemma4) with\n"
              "random weights of realistic shapes and a working vocabulary, for tests and benchmarks.");
  std::string presets;
  for (const auto& s : tools::synth_presets()) presets += preset_line(s);
  p.add({"--preset"}, &preset, "NAME", "model shape and architecture (default tiny, or the first preset of --arch)");
  p.add({"--arch"}, &arch, "ARCH", "the architecture the preset must be of (optional check)");
  p.add({"-o", "--output"}, &out, "FILE", "output GGUF file (required)");
  p.add({"--type"}, &type_name_arg, "TYPE", "type of the weight matrices: F16 (default), F32 or BF16");
  p.add({"--seed"}, &seed, "S", "random seed (default 42)");
  p.add({"--vocab"}, &vocab, "FILE",
        "copy the tokenizer from this GGUF (default for the 32000-token llama presets: ../shared's llama-spm "
        "vocabulary when present; otherwise a generated SentencePiece vocabulary)");
  p.add({"--n-vocab"}, &n_vocab, "N", "size of the generated vocabulary instead of the preset's (small test files)");
  p.add_note("presets:\n" + presets);
  if (!p.parse(argc, argv)) return 0;
  if (out.empty()) throw Error("qlens synth: -o FILE is required");
  check_output_path("qlens synth", {"-o", out}, {{"--vocab", vocab}});
  auto type = type_from_name(type_name_arg);
  if (!type) throw Error("qlens synth: --type: unknown type '" + type_name_arg + "'");
  const tools::SynthPreset& chosen = tools::find_synth_preset(preset, arch);

  tools::SynthOptions opt;
  opt.preset = chosen.name;
  opt.arch = arch;
  opt.type = *type;
  opt.seed = static_cast<uint64_t>(seed);
  opt.vocab_file = vocab;
  opt.n_vocab = n_vocab;
  // Real llama files of these shapes carry this vocabulary.
  if (vocab.empty() && n_vocab == 0 && chosen.arch == "llama" && chosen.n_vocab == 32000)
    opt.vocab_file = shared_llama_vocab();
  int64_t n = tools::synth_model(opt, out);
  std::printf("wrote %s: preset %s (%s), %s weights, %.1fM parameters%s%s\n", out.c_str(), chosen.name.c_str(),
              chosen.arch.c_str(), type_name_arg.c_str(), n / 1e6,
              opt.vocab_file.empty() ? "" : ", vocabulary from ", opt.vocab_file.c_str());
  return 0;
}

}  // namespace qlens::cli
