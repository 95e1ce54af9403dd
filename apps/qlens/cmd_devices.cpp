#include <cstdio>

#include "args.h"
#include "commands.h"
#include "qlens/backend.h"

namespace qlens::cli {

int cmd_devices(int argc, char** argv) {
  ArgParser p("devices", "qlens devices",
              "Lists the devices qlens can run models on, with the ids that --device takes.");
  if (!p.parse(argc, argv)) return 0;
  std::printf("%-10s  %-24s  %10s  %s\n", "id", "kind", "memory", "name");
  for (const DeviceInfo& d : list_devices(cpu_options_from_env())) {
    char memory[32] = "-";
    if (d.memory_bytes > 0) std::snprintf(memory, sizeof memory, "%.1f GiB", d.memory_bytes / 1073741824.0);
    std::printf("%-10s  %-24s  %10s  %s\n", d.id.c_str(), d.kind.c_str(), memory, d.name.c_str());
  }
  return 0;
}

}  // namespace qlens::cli
