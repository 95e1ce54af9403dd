#include <cstdio>

#include "args.h"
#include "commands.h"
#include "core/human_bytes.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/generate/generate.h"

namespace qlens::cli {

int cmd_generate(int argc, char** argv) {
  std::string model_path, prompt;
  tools::GenerateOptions opt;
  int64_t seed = -1;
  int threads = 0;
  bool quiet = false;
  ArgParser p("generate", "qlens generate -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]",
              "Generates text from a prompt. Greedy (always the most likely token) at --temp 0.");
  p.add({"-m", "--model"}, &model_path, "FILE", "model GGUF file (required)");
  p.add({"-p", "--prompt"}, &prompt, "TEXT", "prompt (BOS is added as the model asks)");
  p.add({"-n", "--n-predict"}, &opt.n_predict, "N", "tokens to generate (default 128; -1: until EOS or full context)");
  p.add({"--temp"}, &opt.sampler.temperature, "T", "temperature (default 0.8; 0: greedy)");
  p.add({"--top-k"}, &opt.sampler.top_k, "K", "keep the K most likely tokens (default 40; 0: off)");
  p.add({"--top-p"}, &opt.sampler.top_p, "P", "keep the smallest set of tokens with probability >= P (default 0.95)");
  p.add({"--seed"}, &seed, "S", "random seed (default: random)");
  p.add({"-c", "--ctx-size"}, &opt.n_ctx, "N", "context size (default: the model's, at most 4096)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "prompt tokens per evaluation (default 512)");
  p.add({"-t", "--threads"}, &threads, "N", "threads (default: one per core)");
  add_cache_type_option(p, &opt.cache_type);
  DeviceFlags dev;
  add_device_options(p, &dev);
  p.add_switch({"--no-stats"}, &quiet, "do not print timings to stderr");
  if (!p.parse(argc, argv)) return 0;
  if (model_path.empty()) throw Error("qlens generate: -m MODEL is required");
  if (opt.sampler.top_p <= 0 || opt.sampler.top_p > 1) throw Error("qlens generate: --top-p must be in (0, 1]");
  opt.n_threads = threads;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  opt.cpu = dev.cpu;
  opt.vulkan = dev.vulkan;
  opt.sampler.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();

  auto model = Model::load(model_path);
  std::printf("%s", prompt.c_str());
  std::fflush(stdout);
  auto r = tools::generate(*model, prompt, opt, [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  std::fflush(stdout);
  if (!quiet) {
    const double n_prompt = static_cast<double>(r.prompt_tokens.size());
    std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.1f tokens/s); generated: %zu tokens in %.3f s (%.1f tokens/s)\n",
                 r.prompt_tokens.size(), r.prompt_seconds, r.prompt_seconds > 0 ? n_prompt / r.prompt_seconds : 0,
                 r.tokens.size(), r.generate_seconds,
                 r.generate_seconds > 0 ? r.tokens.size() / r.generate_seconds : 0);
    if (r.packed_bytes > 0)
      std::fprintf(stderr, "generation: %s of weights packed for the CPU's matrix-vector kernels (QLENS_CPU_PACK=0: none)\n",
                   human_bytes(r.packed_bytes).c_str());
  }
  return 0;
}

}  // namespace qlens::cli
