#include "core/output_path.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "qlens/error.h"

namespace qlens {

void check_output_path(const std::string& command, const NamedPath& output, const std::vector<NamedPath>& inputs) {
  namespace fs = std::filesystem;
  if (output.path.empty()) return;
  const std::string what = command + ": " + output.flag + " " + output.path;
  std::error_code ec;
  const fs::path out(output.path);
  if (fs::is_directory(out, ec)) throw Error(what + " is a directory; give a file name");
  if (fs::exists(out, ec)) {
    for (const NamedPath& in : inputs) {
      if (in.path.empty()) continue;
      std::error_code eq;
      if (fs::equivalent(out, fs::path(in.path), eq))
        throw Error(what + " is the same file as the input " + in.flag + " " + in.path +
                    "; writing it would destroy the input: choose another output");
    }
  }
  fs::path folder = out.parent_path();
  if (folder.empty()) folder = ".";
  if (!fs::is_directory(folder, ec)) throw Error(what + ": the folder " + folder.string() + " does not exist");
  if (::access(folder.c_str(), W_OK) != 0) throw Error(what + ": the folder " + folder.string() + " is not writable");
  if (fs::exists(out, ec) && ::access(out.c_str(), W_OK) != 0 && ::access(folder.c_str(), W_OK) != 0)
    throw Error(what + " is not writable");
}

}  // namespace qlens
