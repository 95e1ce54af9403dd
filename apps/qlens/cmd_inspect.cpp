#include <cstdio>
#include <iostream>

#include "args.h"
#include "commands.h"
#include "qlens/gguf.h"
#include "tools/inspect/inspect.h"

namespace qlens::cli {

int cmd_inspect(int argc, char** argv) {
  std::string path;
  bool json = false, check = false;
  int64_t n_threads = 0;
  ArgParser p("inspect", "qlens inspect FILE [--json] [--check-tensors]",
              "Shows a GGUF file's metadata (long arrays summarized), its tensors (name, type, shape,\n"
              "bytes, bits per weight) and totals. --check-tensors reads every value and names the\n"
              "tensors holding NaN or an infinity (exit status 1 when there are any).");
  p.add_positional("FILE", &path, true, "the GGUF file");
  p.add_switch({"--json"}, &json, "print JSON instead of tables");
  p.add_switch({"--check-tensors"}, &check, "look for NaN and infinities in every tensor (as llama.cpp's flag)");
  p.add({"-t", "--threads"}, &n_threads, "N", "threads for --check-tensors (default: one per core)");
  if (!p.parse(argc, argv)) return 0;
  auto file = gguf::File::open(path);
  if (check) {
    const auto bad = tools::check_tensors(*file, static_cast<int>(n_threads));
    for (const auto& t : bad)
      std::fprintf(stderr, "%s: tensor '%s' holds %lld NaN and %lld infinities (the first at element %lld)\n",
                   path.c_str(), t.name.c_str(), static_cast<long long>(t.n_nan), static_cast<long long>(t.n_inf),
                   static_cast<long long>(t.first));
    if (!bad.empty()) {
      std::fprintf(stderr, "%s: %zu of %zu tensors hold non-finite values: the file is corrupt\n", path.c_str(),
                   bad.size(), file->tensors().size());
      return 1;
    }
    // Values of a type the engine cannot read (MXFP4 ...) were not looked at: say so.
    size_t unread = 0;
    for (const auto& t : file->tensors()) unread += type_traits(t.type).to_float ? 0 : 1;
    std::fprintf(stderr, "%s: every value of the %zu tensors is finite", path.c_str(), file->tensors().size() - unread);
    if (unread > 0) std::fprintf(stderr, " (%zu more of types qlens cannot read were not checked)", unread);
    std::fprintf(stderr, "\n");
    if (!json) return 0;
  }
  if (json)
    tools::inspect_json(*file, std::cout);
  else
    tools::inspect_text(*file, std::cout);
  return 0;
}

}  // namespace qlens::cli
