// Subcommands of the qlens tool. Each parses its own arguments (after the
// subcommand name) and returns the process exit status; qlens::Error escapes
// to main, which prints it and exits non-zero.
#pragma once

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
int cmd_report(int argc, char** argv);

}  // namespace qlens::cli
