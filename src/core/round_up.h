// Rounding sizes and offsets up to a multiple (alignment of buffers, scratch
// regions, GGUF data offsets).
#pragma once

#include <concepts>

namespace qlens {

// n rounded up to a multiple of m (m > 0).
template <std::integral T>
constexpr T round_up(T n, T m) {
  return (n + m - 1) / m * m;
}

}  // namespace qlens
