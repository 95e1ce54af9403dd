// Whole-file reading and atomic writing (temporary file, then rename), with
// errors that name the path.
#pragma once

#include <string>

namespace qlens {

std::string read_text_file(const std::string& path);
// Writes PATH.tmp then renames it to PATH; on failure removes the temporary file.
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace qlens
