// Helpers shared by the GGUF reader, writer and inspector (not public API).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace qlens::gguf::detail {

// Shortest decimal text that reads back to the same value ("nan", "inf", "-inf").
std::string format_double(double d);
std::string format_float(float f);

// Escapes quotes, backslashes, control characters and invalid UTF-8 bytes
// (as \xNN) so that any string prints safely on one line.
std::string escape_for_display(std::string_view s);

}  // namespace qlens::gguf::detail
