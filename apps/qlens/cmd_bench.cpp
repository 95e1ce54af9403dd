#include <cstdio>

#include "args.h"
#include "commands.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/bench.h"

namespace qlens::cli {

int cmd_bench(int argc, char** argv) {
  std::string model_path;
  tools::BenchOptions opt;
  ArgParser p("bench", "qlens bench -m MODEL [-p N] [-n N] [-b N] [-r N] [-t N]",
              "Prompt-processing and generation speed, as llama-bench measures them: pp = a batch of -p\n"
              "tokens from an empty cache, tg = -n tokens generated one at a time.");
  p.add({"-m", "--model"}, &model_path, "FILE", "model GGUF file (required)");
  p.add({"-p", "--n-prompt"}, &opt.n_prompt, "N", "prompt tokens (default 512; 0: skip)");
  p.add({"-n", "--n-gen"}, &opt.n_gen, "N", "generated tokens (default 128; 0: skip)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 512)");
  p.add({"-r", "--repetitions"}, &opt.repetitions, "N", "repetitions (default 3)");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  DeviceFlags dev;
  add_device_options(p, &dev);
  if (!p.parse(argc, argv)) return 0;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  if (model_path.empty()) throw Error("qlens bench: -m MODEL is required");
  auto model = Model::load(model_path);
  auto r = tools::bench(*model, opt);
  std::printf("| model | params | backend | threads | test | tokens/s |\n|---|---|---|---|---|---|\n");
  const int threads = opt.n_threads > 0 ? opt.n_threads : default_threads();
  auto row = [&](const char* kind, int64_t n, const tools::BenchFigure& f) {
    std::printf("| %s | %.1fM | %s | %d | %s%lld | %.2f ± %.2f |\n", model_path.c_str(), model->n_params() / 1e6,
                r.backend.c_str(), threads, kind, static_cast<long long>(n), f.mean, f.stddev);
  };
  if (opt.n_prompt > 0) row("pp", opt.n_prompt, r.prompt);
  if (opt.n_gen > 0) row("tg", opt.n_gen, r.generation);
  return 0;
}

}  // namespace qlens::cli
