// Fuzz target "dequant": block dequantization (TypeTraits::to_float) of every
// type the engine reads, on arbitrary bytes: a file's tensor data is whatever
// the file says (scales NaN or Inf, codes out of any grid). Then the values,
// when all finite, are quantized back to the type both ways the engine does
// (from_float for activations, the weighted quantize for weights, with the
// importance the input's magnitudes give), as requantizing a model does.
//
// The blocks also go through the type's dot kernels (each instruction set
// the machine has, with and without VNNI: the SIMD decoders index grid and
// scale tables with the blocks' bytes) against an activation row made from
// the input's bytes.
//
// Input: byte 0 picks the type among those with a to_float; the rest is
// whole blocks (at most 16; a partial block at the end is dropped). The
// quantizers (a search over scales, the costly part) get the first 256
// values or one block, whichever is more.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "fuzz_util.h"
#include "qlens/types.h"
#include "quant/iq_lattice.h"

using namespace qlens;

namespace {

const std::vector<DType>& readable_types() {
  static const std::vector<DType> types = [] {
    std::vector<DType> v;
    for (uint32_t id = 0; id < kDTypeCount; ++id)
      if (const TypeTraits* t = find_type_traits(id); t && t->to_float) v.push_back(static_cast<DType>(id));
    return v;
  }();
  return types;
}

}  // namespace

// The i-quants' lattices are built on first use, which takes seconds under
// the sanitizers (on a busy machine more than libFuzzer's per-input timeout):
// built here, once, before any input runs.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace quant::iq;
  for (const Lattice& (*lattice)() : {iq2xxs_lattice, iq2xs_lattice, iq2s_lattice, iq3xxs_lattice, iq3s_lattice,
                                      iq1_plus_lattice, iq1_minus_lattice})
    lattice();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const DType type = readable_types()[data[0] % readable_types().size()];
  const TypeTraits& tt = type_traits(type);
  const size_t n_blocks = std::min<size_t>((size - 1) / tt.block_bytes, 16);
  if (n_blocks == 0) return 0;
  const int64_t n = static_cast<int64_t>(n_blocks) * tt.block_size;
  // Tensor data sits at aligned offsets of the file: copy to aligned memory.
  std::vector<uint64_t> src((n_blocks * tt.block_bytes + 7) / 8);
  std::memcpy(src.data(), data + 1, n_blocks * tt.block_bytes);
  std::vector<float> values(static_cast<size_t>(n));
  tt.to_float(src.data(), values.data(), n);

  if (tt.vec_dot_type != DType::F32 && n % type_traits(tt.vec_dot_type).block_size == 0) {
    std::vector<float> x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int8_t>(data[1 + i % (size - 1)])) / 64;
    std::vector<uint64_t> xq((row_bytes(tt.vec_dot_type, n) + 7) / 8);
    type_traits(tt.vec_dot_type).from_float(x.data(), xq.data(), n);
    for (cpu::Isa isa : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512})
      for (bool vnni : {true, false})
        for (bool gathers : {false, true})
          if (cpu::isa_supported(isa))
            if (const cpu::VecDotFn dot = cpu::gemm_kernels(isa, vnni, gathers).dot[static_cast<int>(type)]) {
              float out = 0;
              dot(n, src.data(), xq.data(), 0, 1, &out);
            }
  }

  for (float v : values)
    if (!std::isfinite(v)) return 0;
  const int64_t nq = std::min<int64_t>(n, std::max<int64_t>(tt.block_size, 256 / tt.block_size * tt.block_size));
  std::vector<uint64_t> dst(src.size() + 1);
  if (tt.from_float) tt.from_float(values.data(), dst.data(), nq);
  if (tt.quantize) {
    std::vector<float> importance(static_cast<size_t>(nq));
    for (size_t i = 0; i < importance.size(); ++i) importance[i] = std::fabs(values[i]);
    tt.quantize(values.data(), dst.data(), 1, nq, importance.data());
    tt.quantize(values.data(), dst.data(), nq / tt.block_size, tt.block_size, nullptr);
  }
  return 0;
}
