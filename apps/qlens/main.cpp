// qlens: measure and improve the quantization of large language models.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "dist/comm.h"
#include "qlens/error.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
  bool across_processes = false;  // splits its work over mpirun's ranks (docs/CLUSTER.md)
};

constexpr Command kCommands[] = {
    {"inspect", qlens::cli::cmd_inspect, "show a GGUF file's metadata and tensors"},
    {"generate", qlens::cli::cmd_generate, "generate text from a prompt"},
    {"perplexity", qlens::cli::cmd_perplexity, "perplexity of a model over a text, as llama.cpp computes it", true},
    {"imatrix", qlens::cli::cmd_imatrix, "collect an importance matrix (or combine, or show its statistics)", true},
    {"quantize", qlens::cli::cmd_quantize, "quantize a model into llama.cpp's block formats"},
    {"quantize-stats", qlens::cli::cmd_quantize_stats, "quantization error of every weight for each type"},
    {"bench", qlens::cli::cmd_bench, "prompt-processing and generation speed, as llama-bench measures them"},
    {"compare", qlens::cli::cmd_compare, "compare a reference and a test model node by node, with KL divergence",
     true},
    {"sensitivity", qlens::cli::cmd_sensitivity, "how much each tensor matters: KL divergence when only it is quantized",
     true},
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

// Runs a command; an error is printed (by a rank other than 0 with its
// rank) and, when the run has several processes, ends them all: the others
// would wait for this one forever.
int run_command(const Command& c, int argc, char** argv) {
  std::string error;
  try {
    // The others would each do the whole job and write the same files.
    if (!c.across_processes && qlens::dist::world().size() > 1)
      throw qlens::Error(std::string("qlens ") + c.name + " runs as one process; under mpirun run imatrix, "
                         "sensitivity, or perplexity and compare with --split-layers (docs/CLUSTER.md)");
    return c.run(argc, argv);
  } catch (const qlens::Error& e) {
    error = e.what();
  } catch (const std::bad_alloc&) {
    error = "out of memory";
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::fprintf(stderr, "\nerror: %s%s\n", qlens::dist::rank_prefix().c_str(), error.c_str());
  if (qlens::dist::world().size() > 1) {
    std::fflush(stderr);
    qlens::dist::world().abort(1);
  }
  return 1;
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
    // Under an MPI launcher (a build with MPI), the ranks join here.
    qlens::dist::start(&argc, &argv);
    const int rc = run_command(c, argc - 2, argv + 2);
    qlens::dist::finish();
    return rc;
  }
  std::fprintf(stderr, "qlens: unknown command '%s'\n\n", name.c_str());
  usage(stderr);
  return 2;
}
