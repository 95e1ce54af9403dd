// Whole-file reading and atomic writing (temporary file, then rename), with
// errors that name the path.
#pragma once

#include <string>

namespace qlens {

std::string read_text_file(const std::string& path);
// All or nothing (core/atomic_file.h): PATH.tmp, flushed, then renamed to PATH.
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace qlens
