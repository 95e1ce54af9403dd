#include <iostream>

#include "args.h"
#include "commands.h"
#include "qlens/gguf.h"
#include "tools/inspect.h"

namespace qlens::cli {

int cmd_inspect(int argc, char** argv) {
  std::string path;
  bool json = false;
  ArgParser p("inspect", "qlens inspect FILE [--json]",
              "Shows a GGUF file's metadata (long arrays summarized), its tensors (name, type, shape,\n"
              "bytes, bits per weight) and totals.");
  p.add_positional("FILE", &path, true, "the GGUF file");
  p.add_switch({"--json"}, &json, "print JSON instead of tables");
  if (!p.parse(argc, argv)) return 0;
  auto file = gguf::File::open(path);
  if (json)
    tools::inspect_json(*file, std::cout);
  else
    tools::inspect_text(*file, std::cout);
  return 0;
}

}  // namespace qlens::cli
