// Byte counts as people read them: "512 B", "1.50 KiB", "3.25 GiB".
#pragma once

#include <cstdint>
#include <string>

namespace qlens {

std::string human_bytes(uint64_t bytes);

}  // namespace qlens
