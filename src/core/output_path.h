// Checks made on an output path before any work, so that a run of hours
// neither ends unable to write nor overwrites what it read: the output must
// not be (by device and inode, not by spelling) any of the command's input
// files, must not be a directory, and its folder must exist and be writable.
#pragma once

#include <string>
#include <vector>

namespace qlens {

struct NamedPath {
  std::string flag;  // how the user gave it: "-m", "--imatrix", "MODEL"
  std::string path;
};

// Throws Error "COMMAND: OUTFLAG OUT ..." naming the input it would
// overwrite, or what is wrong with the path. Empty paths are skipped.
void check_output_path(const std::string& command, const NamedPath& output, const std::vector<NamedPath>& inputs);

}  // namespace qlens
