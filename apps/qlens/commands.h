// Subcommands of the qlens tool. Each parses its own arguments (after the
// subcommand name) and returns the process exit status; qlens::Error escapes
// to main, which prints it and exits non-zero.
#pragma once

#include "tools/compare/llama_logits.h"

namespace qlens::cli {

int cmd_inspect(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_quantize_stats(int argc, char** argv);
int cmd_imatrix(int argc, char** argv);
int cmd_devices(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_sensitivity(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_curve(int argc, char** argv);
int cmd_report(int argc, char** argv);

// A model against a llama.cpp log-probability file, with a progress line per
// chunk labelled `label` (perplexity --kl-divergence, compare without --ref).
tools::KldResult kld_with_progress(const Model& model, const tools::LlamaLogitsFile& base,
                                   const tools::KldOptions& options, const char* label);

}  // namespace qlens::cli
