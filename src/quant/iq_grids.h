// The tables of ggml's i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S): their lattice points expanded to the bytes the formats
// multiply by, and the sign table of the 2- and 3-bit formats.
//
// A point is stored compact (iq_grids_data.h: 2- or 3-bit digits, one per
// coordinate); a coordinate's value is its digit's level:
//   2-bit grids (IQ2_*)   levels 8, 25, 43 (digits 0..2; every point's digits
//                          sum to an even number)
//   1-bit grid (IQ1_*)    levels -1, 0, 1 (the format adds +-1/8 per run or point)
//   3-bit grids (IQ3_*)   IQ3_XXS 4, 12, ..., 52, 62; IQ3_S 1, 3, ..., 15
// The expanded tables hold, for point i, coordinate j in byte j (the 2- and
// 1-bit grids in a uint64, the 3-bit grids in a uint32), as ggml's
// iq2xxs_grid .. iq1s_grid do; they are built at compile time from the
// compact lists, and tests/test_quant_iq.cpp checks the lists' properties.
//
// Signs: the 2- and 3-bit formats store 7 sign bits per group of 8 and the
// eighth as their parity (an even count of minus signs): kSigns[i] is i with
// that parity bit as bit 7.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "quant/iq_grids_data.h"

namespace qlens::quant::iq {

inline constexpr int8_t kLevels2bit[3] = {8, 25, 43};
inline constexpr int8_t kLevels1bit[3] = {-1, 0, 1};
inline constexpr int8_t kLevelsIq3xxs[8] = {4, 12, 20, 28, 36, 44, 52, 62};
inline constexpr int8_t kLevelsIq3s[8] = {1, 3, 5, 7, 9, 11, 13, 15};

// Each point's coordinates as bytes (two's complement for negative levels),
// coordinate j in byte j.
template <class Word, size_t N, size_t L>
constexpr std::array<Word, N> expand(const uint16_t (&points)[N], const int8_t (&levels)[L], int bits) {
  constexpr int coords = sizeof(Word);
  std::array<Word, N> out{};
  for (size_t i = 0; i < N; ++i) {
    Word w = 0;
    for (int j = 0; j < coords; ++j) {
      const uint8_t byte = static_cast<uint8_t>(levels[(points[i] >> (bits * j)) & ((1 << bits) - 1)]);
      w |= static_cast<Word>(byte) << (8 * j);
    }
    out[i] = w;
  }
  return out;
}

inline constexpr auto kIq2xxsGrid = expand<uint64_t>(kIq2xxsPoints, kLevels2bit, 2);
inline constexpr auto kIq2xsGrid = expand<uint64_t>(kIq2xsPoints, kLevels2bit, 2);
inline constexpr auto kIq2sGrid = expand<uint64_t>(kIq2sPoints, kLevels2bit, 2);
inline constexpr auto kIq1sGrid = expand<uint64_t>(kIq1sPoints, kLevels1bit, 2);
inline constexpr auto kIq3xxsGrid = expand<uint32_t>(kIq3xxsPoints, kLevelsIq3xxs, 3);
inline constexpr auto kIq3sGrid = expand<uint32_t>(kIq3sPoints, kLevelsIq3s, 3);

constexpr std::array<uint8_t, 128> make_signs() {
  std::array<uint8_t, 128> s{};
  for (int i = 0; i < 128; ++i) s[i] = static_cast<uint8_t>(i | ((std::popcount(static_cast<unsigned>(i)) & 1) << 7));
  return s;
}
inline constexpr std::array<uint8_t, 128> kSigns = make_signs();

// A sign byte as a mask of 8 bytes (0xFF where the element is negated), so
// that 8 levels are signed at once: (levels ^ mask) + (mask & 0x01..01),
// each byte its own two's complement negation (levels below 128: no carry).
constexpr std::array<uint64_t, 256> make_sign_masks() {
  std::array<uint64_t, 256> m{};
  for (int s = 0; s < 256; ++s)
    for (int j = 0; j < 8; ++j)
      if (s >> j & 1) m[s] |= uint64_t{0xFF} << (8 * j);
  return m;
}
inline constexpr std::array<uint64_t, 256> kSignMasks = make_sign_masks();

constexpr uint64_t signed_bytes(uint64_t levels, uint8_t signs) {
  const uint64_t mask = kSignMasks[signs];
  return (levels ^ mask) + (mask & 0x0101010101010101ull);
}

// Coordinate j of a point of an expanded grid.
template <class Word>
constexpr int coordinate(Word point, int j) {
  return static_cast<int8_t>(static_cast<uint8_t>(point >> (8 * j)));
}

}  // namespace qlens::quant::iq
