// Tests of the activation quantizers of the CPU backend's VecOps tables
// (simd_act_quant.h): from_float for Q8_0, Q8_1 and Q8_K on every
// instruction set this machine has must equal the reference quantizers
// (type_traits(t).from_float, ggml's quantize_row_q8_*_ref) byte for byte:
// the SIMD versions round exactly as the references do (ties away from zero
// for Q8_0 / Q8_1, to even for Q8_K), so no tolerance is needed.
//
// Rows: Gaussian values at scales from 2^-30 to 2^30, values placed exactly
// on rounding ties (x / d = k + 1/2) and next to them, all-zero, single
// non-zero, equal magnitudes of both signs (Q8_K takes the first), values
// large enough to saturate the fp16 scale, subnormals, infinities and NaNs;
// several row lengths and unaligned source and destination addresses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/vec.h"
#include "qlens/types.h"

namespace qlens {
namespace {

using cpu::Isa;

// One block of n values of the given kind.
void fill_block(std::mt19937& rng, int kind, float* x, int n) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 61) - 30);
  for (int j = 0; j < n; ++j) x[j] = g(rng) * scale;
  switch (kind) {
    case 0: break;  // Gaussian
    case 1: {       // ties: amax = 127 * 2^e, so d = 2^e exactly and x / d = k + 1/2
      const float d = std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
      for (int j = 0; j < n; ++j) {
        const float k = static_cast<float>(static_cast<int>(rng() % 253) - 126);
        x[j] = (k + ((rng() & 1) ? 0.5f : -0.5f)) * d;
        if (rng() % 4 == 0) x[j] = std::nextafter(x[j], (rng() & 1) ? 1e30f : -1e30f);
      }
      x[rng() % n] = ((rng() & 1) ? 127.0f : -127.0f) * d;
      break;
    }
    case 2:  // all zero, signs mixed
      for (int j = 0; j < n; ++j) x[j] = (rng() & 1) ? 0.0f : -0.0f;
      break;
    case 3:  // one non-zero value
      for (int j = 0; j < n; ++j) x[j] = 0.0f;
      x[rng() % n] = g(rng);
      break;
    case 4: {  // the largest magnitude twice, with both signs
      const float m = 10.0f * scale;
      x[rng() % n] = (rng() & 1) ? m : -m;
      x[rng() % n] = (rng() & 1) ? m : -m;
      break;
    }
    case 5:  // beyond what the fp16 scale holds
      for (int j = 0; j < n; ++j) x[j] = g(rng) * 1e9f;
      break;
    case 6:  // subnormal
      for (int j = 0; j < n; ++j) x[j] = g(rng) * 1e-39f;
      break;
    case 7:  // infinities
      x[rng() % n] = (rng() & 1) ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
      break;
    case 8:  // NaNs among ordinary values
      x[rng() % n] = std::numeric_limits<float>::quiet_NaN();
      x[rng() % n] = -std::numeric_limits<float>::quiet_NaN();
      break;
    default:  // all NaN
      for (int j = 0; j < n; ++j) x[j] = std::numeric_limits<float>::quiet_NaN();
      break;
  }
}

TEST(ActQuant, SimdFromFloatEqualsReference) {
  std::mt19937 rng(11);
  for (DType t : {DType::Q8_0, DType::Q8_1, DType::Q8_K}) {
    const int bs = static_cast<int>(type_traits(t).block_size);
    const FromFloatFn want_fn = type_traits(t).from_float;
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
      if (!cpu::isa_supported(isa)) continue;
      const FromFloatFn got_fn = cpu::vec_ops(isa).from_float[static_cast<int>(t)];
      ASSERT_NE(got_fn, nullptr);
      for (int64_t nblocks : {1, 3, 8, 23}) {
        for (int rep = 0; rep < 20; ++rep) {
          const int64_t n = nblocks * bs;
          const size_t off_x = rng() % 4, off_y = rng() % 7;  // in floats / bytes
          std::vector<float> xbuf(n + 4);
          float* x = xbuf.data() + off_x;
          for (int64_t b = 0; b < nblocks; ++b) fill_block(rng, static_cast<int>(rng() % 10), x + b * bs, bs);
          const size_t bytes = row_bytes(t, n);
          std::vector<uint8_t> want(bytes), got(bytes + 8, 0xcd);
          want_fn(x, want.data(), n);
          got_fn(x, got.data() + off_y, n);
          SCOPED_TRACE(std::string(type_name(t)) + " " + cpu::isa_name(isa) + " n=" + std::to_string(n));
          size_t first = 0;
          while (first < bytes && got[off_y + first] == want[first]) ++first;
          ASSERT_EQ(first, bytes) << "first difference at byte " << first << ": " << int(got[off_y + first])
                                  << " want " << int(want[first]);
          for (size_t i = 0; i < off_y; ++i) ASSERT_EQ(got[i], 0xcd) << "wrote before the row";
          for (size_t i = off_y + bytes; i < got.size(); ++i) ASSERT_EQ(got[i], 0xcd) << "wrote past the row";
        }
      }
    }
  }
}

}  // namespace
}  // namespace qlens
