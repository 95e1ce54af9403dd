#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "core/output_path.h"
#include "args.h"
#include "commands.h"
#include "core/json_writer.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "core/parallel.h"
#include "tools/json_header.h"
#include "tools/llama_logits.h"
#include "tools/perplexity.h"
#include "tools/progress.h"
#include "tools/chunks.h"

namespace qlens::cli {

tools::KldResult kld_with_progress(const Model& model, const tools::LlamaLogitsFile& base,
                                   const tools::KldOptions& options, const char* label) {
  const int64_t planned = options.max_chunks >= 0 ? std::min(options.max_chunks, base.n_chunk()) : base.n_chunk();
  tools::Progress progress(label, planned, "chunks");
  const auto r = tools::kld_against_file(model, base, options, [&](int64_t done, int64_t, double kld) {
    char status[64];
    std::snprintf(status, sizeof status, "mean KLD %.6f", kld);
    progress.update(done, status);
  });
  progress.finish();
  return r;
}

int cmd_perplexity(int argc, char** argv) {
  std::string model_path, text_path, json_path;
  tools::PerplexityOptions opt;
  opt.n_ctx = 512;
  ArgParser p("perplexity", "qlens perplexity -m MODEL -f TEXT [-c CTX] [-b BATCH] [--chunks N] [--json FILE]",
              "Perplexity of a model over a text, computed as llama.cpp's perplexity tool does: the text is\n"
              "tokenized once with BOS, cut into whole chunks of CTX tokens, each chunk evaluated from an\n"
              "empty cache with BOS as its first token, and only the second half of each chunk scored.");
  p.add({"-m", "--model"}, &model_path, "FILE", "model GGUF file (required)");
  p.add({"-f", "--file"}, &text_path, "FILE", "text file (required)");
  p.add({"-c", "--ctx-size"}, &opt.n_ctx, "N", "tokens per chunk (default 512; 0: the model's training context)");
  p.add({"-b", "--batch-size"}, &opt.n_batch, "N", "tokens per evaluation (default 2048, at most CTX)");
  p.add({"--chunks"}, &opt.max_chunks, "N", "evaluate at most N chunks (default: all)");
  p.add({"--json"}, &json_path, "FILE", "also write the result as JSON");
  std::string kld_base;
  bool kld = false;
  p.add({"--kl-divergence-base"}, &kld_base, "FILE",
        "llama.cpp's log-probability file: write it (as llama-perplexity does), or with --kl-divergence read it");
  p.add_switch({"--kl-divergence"}, &kld, "score the model against --kl-divergence-base (its tokens; -f not needed)");
  p.add({"-t", "--threads"}, &opt.n_threads, "N", "threads (default: one per core)");
  add_cache_type_option(p, &opt.cache_type);
  DeviceFlags dev;
  add_device_options(p, &dev);
  if (!p.parse(argc, argv)) return 0;
  resolve_device(p, dev);
  opt.device = dev.device;
  opt.n_gpu_layers = dev.n_gpu_layers;
  if (model_path.empty()) throw Error("qlens perplexity: -m MODEL is required");
  if (kld && kld_base.empty()) throw Error("qlens perplexity: --kl-divergence needs --kl-divergence-base FILE");
  const std::vector<NamedPath> inputs = {{"-m", model_path}, {"-f", text_path}};
  check_output_path("qlens perplexity", {"--json", json_path},
                    kld ? std::vector<NamedPath>{{"-m", model_path}, {"--kl-divergence-base", kld_base}} : inputs);
  if (!kld) check_output_path("qlens perplexity", {"--kl-divergence-base", kld_base}, inputs);
  if (kld) {
    auto model = Model::load(model_path);
    const auto base = tools::LlamaLogitsFile::load(kld_base);
    tools::KldOptions ko;
    ko.max_chunks = opt.max_chunks;
    ko.n_threads = opt.n_threads;
    ko.device = opt.device;
    ko.n_gpu_layers = opt.n_gpu_layers;
    ko.cache_type = opt.cache_type;
    const auto r = kld_with_progress(*model, base, ko, "kl-divergence");
    std::printf("%lld positions of %s (n_ctx %lld)\n", static_cast<long long>(r.n_scored), kld_base.c_str(),
                static_cast<long long>(base.n_ctx()));
    std::fflush(stdout);
    tools::print_logit_summary(std::cout, r.summary);
    return 0;
  }
  if (text_path.empty()) throw Error("qlens perplexity: -f TEXT is required");
  if (opt.n_batch < opt.n_ctx && opt.n_batch > 0 && opt.n_ctx % opt.n_batch != 0)
    throw Error("qlens perplexity: -c " + std::to_string(opt.n_ctx) + " must be a multiple of -b " +
                std::to_string(opt.n_batch));

  auto model = Model::load(model_path);
  resolve_context_size(opt.n_ctx, *model, "perplexity");
  if (opt.n_batch < opt.n_ctx && opt.n_batch > 0 && opt.n_ctx % opt.n_batch != 0)
    throw Error("qlens perplexity: -c " + std::to_string(opt.n_ctx) + " (the model's training context) must be a "
                "multiple of -b " + std::to_string(opt.n_batch));
  const auto tokens = tools::tokenize_text_file(model->vocab(), text_path,
                                                opt.max_chunks >= 0 ? opt.max_chunks * opt.n_ctx : -1, "perplexity");
  const int64_t available = static_cast<int64_t>(tokens.size()) / std::max<int64_t>(opt.n_ctx, 1);
  const int64_t planned = opt.max_chunks >= 0 ? std::min(opt.max_chunks, available) : available;
  std::fprintf(stderr, "%s: tokenized %s: %zu tokens; %lld chunks of %lld\n", model_path.c_str(), text_path.c_str(),
               tokens.size(), static_cast<long long>(planned), static_cast<long long>(opt.n_ctx));

  std::unique_ptr<tools::LlamaLogitsWriter> writer;
  if (!kld_base.empty()) {
    writer = std::make_unique<tools::LlamaLogitsWriter>(opt.n_ctx, model->hparams().n_vocab);
    opt.on_chunk_tokens = [&](std::span<const Token> t) { writer->add_chunk(t); };
    opt.on_scored_logits = [&](std::span<const float> l) { writer->add_position(l); };
  }
  tools::Progress progress("perplexity", planned, "chunks");
  const bool bar = tools::Progress::default_mode() == tools::Progress::Mode::Bar;
  auto r = tools::perplexity(*model, tokens, opt, [&](int64_t i, double ppl) {
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
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_error);
  if (writer) {
    writer->write(kld_base);
    std::fprintf(stderr, "wrote %s (llama.cpp's --kl-divergence-base format)\n", kld_base.c_str());
  }
  std::fprintf(stderr, "%lld chunks, %lld tokens scored, %.2f s, %.0f tokens/s\n", static_cast<long long>(r.n_chunks),
               static_cast<long long>(r.n_scored), r.seconds, r.tokens_per_second);

  if (!json_path.empty()) {
    std::ostringstream s;
    JsonWriter w(s, true);
    tools::write_json_header(w, "qlens perplexity", 2, {{"model", model_path}, {"text", text_path}});
    w.key("settings");
    w.begin_object();
    w.key("n_ctx"); w.value(opt.n_ctx);
    w.key("n_batch"); w.value(opt.n_batch);
    w.key("max_chunks");
    if (opt.max_chunks >= 0) w.value(opt.max_chunks); else w.null();
    w.key("n_threads"); w.value(opt.n_threads > 0 ? opt.n_threads : default_thread_count());
    w.key("device"); w.value(opt.device);
    w.end_object();
    w.key("n_chunks"); w.value(r.n_chunks);
    w.key("n_tokens_text"); w.value(r.n_tokens);
    w.key("n_tokens_evaluated"); w.value(r.n_chunks * opt.n_ctx);
    w.key("n_tokens_scored"); w.value(r.n_scored);
    w.key("ppl");
    w.begin_object();
    w.key("value"); w.value(r.ppl);
    w.key("error"); w.value(r.ppl_error);
    w.end_object();
    w.key("mean_nll"); w.value(r.nll);
    w.key("seconds"); w.value(r.seconds);
    w.key("tokens_per_second"); w.value(r.tokens_per_second);
    w.key("running_ppl");
    w.begin_array();
    for (double v : r.running_ppl) w.value(v);
    w.end_array();
    w.end_object();
    s << "\n";
    write_file_atomic(json_path, s.str());
  }
  return 0;
}

}  // namespace qlens::cli
