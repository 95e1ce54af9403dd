// qlens: measure and improve the quantization of large language models.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "qlens/error.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"inspect", qlens::cli::cmd_inspect, "show a GGUF file's metadata and tensors"},
    {"generate", qlens::cli::cmd_generate, "generate text from a prompt"},
    {"perplexity", qlens::cli::cmd_perplexity, "perplexity of a model over a text, as llama.cpp computes it"},
    {"imatrix", qlens::cli::cmd_imatrix, "collect an importance matrix (or combine, or show its statistics)"},
    {"quantize", qlens::cli::cmd_quantize, "quantize a model into llama.cpp's block formats"},
    {"quantize-stats", qlens::cli::cmd_quantize_stats, "quantization error of every weight for each type"},
    {"bench", qlens::cli::cmd_bench, "prompt-processing and generation speed, as llama-bench measures them"},
    {"compare", qlens::cli::cmd_compare, "compare a reference and a test model node by node, with KL divergence"},
    {"sensitivity", qlens::cli::cmd_sensitivity, "how much each tensor matters: KL divergence when only it is quantized"},
    {"plan", qlens::cli::cmd_plan, "choose a type per tensor under a size budget from a sensitivity table"},
    {"curve", qlens::cli::cmd_curve, "the size-quality curve: plans at each mix's size against the mixes, measured"},
    {"report", qlens::cli::cmd_report, "one HTML page with charts from the JSON of compare, sensitivity, plan, ..."},
    {"devices", qlens::cli::cmd_devices, "list the devices models can run on (cpu, vulkan:N)"},
    {"synth", qlens::cli::cmd_synth, "write a model of any architecture with random weights of realistic shapes"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: qlens COMMAND [options]   (qlens COMMAND --help for its options)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-15s %s\n", c.name, c.summary);
  std::fprintf(out, "\nqlens %s\n", QLENS_VERSION);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("qlens %s\n", QLENS_VERSION);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(argc - 2, argv + 2);
    } catch (const qlens::Error& e) {
      std::fprintf(stderr, "\nerror: %s\n", e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "\nerror: out of memory\n");
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "\nerror: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "qlens: unknown command '%s'\n\n", name.c_str());
  usage(stderr);
  return 2;
}
