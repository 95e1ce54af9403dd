#include <cstdio>
#include <iostream>
#include <memory>

#include "args.h"
#include "commands.h"
#include "core/output_path.h"
#include "core/text_file.h"
#include "dist/comm.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "tools/common/chunks.h"
#include "tools/compare/llama_logits.h"
#include "tools/perplexity/perplexity.h"
#include "tools/common/progress.h"

namespace qlens::cli {

tools::KldResult kld_with_progress(const Model& model, const tools::LlamaLogitsFile& base,
                                   const tools::KldOptions& options, const char* label) {
  tools::Progress progress(label, tools::chunks_to_run(base.n_chunk(), options.max_chunks), "chunks");
  const auto r = tools::kld_against_file(model, base, options, [&](int64_t done, int64_t, double kld) {
    char status[64];
    std::snprintf(status, sizeof status, "mean KLD %.6f", kld);
    progress.update(done, status);
  });
  progress.finish();
  return r;
}

namespace {

struct PerplexityFlags {
  std::string model_path, text_path, json_path, kld_base;
  bool kld = false;
  tools::PerplexityOptions opt;
};

// Parses the flags and settles the device; false when --help was printed.
bool parse_perplexity_flags(int argc, char** argv, PerplexityFlags& f) {
  tools::PerplexityOptions& opt = f.opt;
  opt.n_ctx = 512;
  ArgParser p("perplexity", "qlens perplexity -m MODEL -f TEXT [-c CTX] [-b BATCH] [--chunks N] [--json FILE]",
              "Perplexity of a model over a text, computed as llama.cpp's perplexity tool does: the text is\n"
              "tokenized once with BOS, cut into whole chunks of CTX tokens, each chunk evaluated from an\n"
              "empty cache with BOS as its first token, and only the second half of each chunk scored.");
  p.add({"-m", "--model"}, &f.model_path, "FILE", "model GGUF file (required)");
  p.add({"-f", "--file"}, &f.text_path, "FILE", "text file (required)");
  p.add({"-c", "--ctx-size"}, &opt.n_ctx, "N", "tokens per chunk (default 512; 0: the model's training context)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 2048, at most CTX)");
  p.add({"--chunks"}, &opt.max_chunks, "N", "evaluate at most N chunks (default: all)");
  p.add({"--json"}, &f.json_path, "FILE", "also write the result as JSON");
  p.add({"--kl-divergence-base"}, &f.kld_base, "FILE",
        "llama.cpp's log-probability file: write it (as llama-perplexity does), or with --kl-divergence read it");
  p.add_switch({"--kl-divergence"}, &f.kld,
               "score the model against --kl-divergence-base (its tokens; -f not needed)");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  add_split_layers_option(p, &opt.split_layers);
  add_cache_type_option(p, &opt.cache_type);
  DeviceFlags dev;
  add_device_options(p, &dev);
  if (!p.parse(argc, argv)) return false;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  opt.cpu = dev.cpu;
  opt.vulkan = dev.vulkan;
  return true;
}

// --kl-divergence: the model against a log-probability file, on its tokens.
int score_against_logits_file(const PerplexityFlags& f) {
  auto model = Model::load(f.model_path);
  const auto base = tools::LlamaLogitsFile::load(f.kld_base);
  tools::KldOptions ko;
  ko.max_chunks = f.opt.max_chunks;
  ko.n_threads = f.opt.n_threads;
  ko.device = f.opt.device;
  ko.n_gpu_layers = f.opt.n_gpu_layers;
  ko.cpu = f.opt.cpu;
  ko.vulkan = f.opt.vulkan;
  ko.cache_type = f.opt.cache_type;
  const auto r = kld_with_progress(*model, base, ko, "kl-divergence");
  std::printf("%lld positions of %s (n_ctx %lld)\n", static_cast<long long>(r.n_scored), f.kld_base.c_str(),
              static_cast<long long>(base.n_ctx()));
  std::fflush(stdout);
  tools::print_logit_summary(std::cout, r.summary);
  return 0;
}

// The run with a progress bar (or lines) and llama.cpp's running estimates.
tools::PerplexityResult perplexity_with_progress(const Model& model, const std::vector<Token>& tokens,
                                                 const tools::PerplexityOptions& opt, int64_t planned) {
  tools::Progress progress("perplexity", planned, "chunks");
  const bool bar = tools::Progress::default_mode() == tools::Progress::Mode::Bar;
  auto r = tools::perplexity(model, tokens, opt, [&](int64_t i, double ppl) {
    char status[64];
    std::snprintf(status, sizeof status, "PPL %.4f", ppl);
    progress.update(i + 1, status);
    if (!bar) {  // llama.cpp's running estimates too
      std::printf("[%lld]%.4f,", static_cast<long long>(i + 1), ppl);
      std::fflush(stdout);
    }
  });
  progress.finish();
  if (!bar) std::printf("\n");
  return r;
}

// -f TEXT: the perplexity, and the log-probability file when asked.
int perplexity_of_text(PerplexityFlags& f) {
  tools::PerplexityOptions& opt = f.opt;
  if (f.text_path.empty()) throw Error("qlens perplexity: -f TEXT is required");
  if (opt.n_batch < opt.n_ctx && opt.n_batch > 0 && opt.n_ctx % opt.n_batch != 0)
    throw Error("qlens perplexity: -c " + std::to_string(opt.n_ctx) + " must be a multiple of -b " +
                std::to_string(opt.n_batch));

  auto model = Model::load(f.model_path);
  resolve_context_size(opt.n_ctx, *model, "perplexity");
  if (opt.n_batch < opt.n_ctx && opt.n_batch > 0 && opt.n_ctx % opt.n_batch != 0)
    throw Error("qlens perplexity: -c " + std::to_string(opt.n_ctx) + " (the model's training context) must be a "
                "multiple of -b " + std::to_string(opt.n_batch));
  const auto tokens = tools::tokenize_text_file(model->vocab(), f.text_path,
                                                opt.max_chunks >= 0 ? opt.max_chunks * opt.n_ctx : -1, "perplexity");
  const int64_t planned = tools::chunks_in_text(static_cast<int64_t>(tokens.size()), opt.n_ctx, opt.max_chunks);
  std::fprintf(stderr, "%s: tokenized %s: %zu tokens; %lld chunks of %lld\n", f.model_path.c_str(),
               f.text_path.c_str(), tokens.size(), static_cast<long long>(planned), static_cast<long long>(opt.n_ctx));

  dist::Comm& comm = dist::world();
  cli::check_layer_split_run("qlens perplexity", *model, opt.split_layers);
  if (!comm.is_root()) {
    tools::perplexity(*model, tokens, opt);
    return 0;
  }

  std::unique_ptr<tools::LlamaLogitsWriter> writer;
  if (!f.kld_base.empty()) {
    writer = std::make_unique<tools::LlamaLogitsWriter>(opt.n_ctx, model->hparams().n_vocab);
    opt.on_chunk_tokens = [&](std::span<const Token> t) { writer->add_chunk(t); };
    opt.on_scored_logits = [&](std::span<const float> l) { writer->add_position(l); };
  }
  const auto r = perplexity_with_progress(*model, tokens, opt, planned);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_error);
  if (writer) {
    writer->write(f.kld_base);
    std::fprintf(stderr, "wrote %s (llama.cpp's --kl-divergence-base format)\n", f.kld_base.c_str());
  }
  std::fprintf(stderr, "%lld chunks, %lld tokens scored, %.2f s, %.0f tokens/s\n", static_cast<long long>(r.n_chunks),
               static_cast<long long>(r.n_scored), r.seconds, r.tokens_per_second);
  if (!f.json_path.empty())
    write_file_atomic(f.json_path, tools::perplexity_json(r, opt, f.model_path, f.text_path));
  return 0;
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  PerplexityFlags f;
  if (!parse_perplexity_flags(argc, argv, f)) return 0;
  if (f.model_path.empty()) throw Error("qlens perplexity: -m MODEL is required");
  if (f.kld && f.kld_base.empty()) throw Error("qlens perplexity: --kl-divergence needs --kl-divergence-base FILE");
  const std::vector<NamedPath> inputs = {{"-m", f.model_path}, {"-f", f.text_path}};
  check_output_path("qlens perplexity", {"--json", f.json_path},
                    f.kld ? std::vector<NamedPath>{{"-m", f.model_path}, {"--kl-divergence-base", f.kld_base}}
                          : inputs);
  if (!f.kld) check_output_path("qlens perplexity", {"--kl-divergence-base", f.kld_base}, inputs);
  if (f.kld && dist::world().size() > 1)
    throw Error("qlens perplexity: --kl-divergence runs as one process, not under mpirun");
  if (f.kld) return score_against_logits_file(f);
  return perplexity_of_text(f);
}

}  // namespace qlens::cli
