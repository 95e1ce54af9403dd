// Instruction sets the CPU backend has kernels for, and which one to use.
//
// Kernels for one instruction set live in files named *_avx2.cpp / *_avx512.cpp,
// compiled with that set's flags; everything else is portable C++. The scalar
// kernels are always present and are what the SIMD ones are tested against.
// (No inline functions here: the SIMD files include this header, and the
// linker may keep their copy of one.)
#pragma once

#include <cstddef>

#include "qlens/backend.h"

namespace qlens::cpu {

enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };

const char* isa_name(Isa isa);
// Whether this CPU can run the kernels of `isa`.
bool isa_supported(Isa isa);
// The widest instruction set this CPU has up to `cap` (CpuOptions::isa).
Isa isa_for(CpuIsa cap);
// The widest instruction set this CPU has.
Isa best_isa();

// How many bytes ahead of the one they read the packed matrix-vector kernels
// of `isa` (packed.h) prefetch weights by default: on Intel CPUs 8 KiB, on
// others 1024 with AVX2 and none with AVX-512 (measured on Zen 3, Zen 4 and
// Emerald Rapids: isa.cpp). CpuOptions::prefetch_bytes overrides it.
size_t packed_prefetch_bytes(Isa isa);
// The most CpuOptions::prefetch_bytes may ask for.
inline constexpr size_t kMaxPrefetchBytes = 65536;

// Extensions the kernels of an instruction set use where the CPU has them
// (the int8 GEMM path's dot instructions): AVX-512 VNNI (512-bit vpdpbusd)
// and AVX-VNNI (its VEX-encoded 256-bit form).
bool cpu_has_avx512_vnni();
bool cpu_has_avx_vnni();
// The VNNI extension the kernels of `isa` would use, on this CPU.
bool cpu_has_vnni(Isa isa);
// An Intel CPU ("GenuineIntel"): some defaults were measured per vendor.
bool cpu_is_intel();
// Whether vector gathers beat scalar loads on this CPU (Intel cores from
// Alder Lake and Sapphire Rapids on; measured: isa.cpp): the default of
// CpuOptions::grid_gathers.
bool cpu_has_fast_gathers();
// The int8 GEMM's kernels with the kernels of `isa` on this CPU, VNNI
// allowed or not: "vnni", "maddubs" (AVX2 without VNNI) or "none" (the F32
// panels serve).
const char* int8_kernel_name(Isa isa, bool vnni = true);

// CpuOptions resolved for one instruction set on this CPU: what a CPU
// backend's kernels run with (KernelCtx::options), fixed when it is made.
struct KernelOptions {
  Isa isa = Isa::Scalar;
  bool vnni = false;          // VNNI kernels: allowed and the CPU has them for isa
  bool grid_gathers = false;  // the i-quant grids that gather (IQ3_*, IQ1_*) read by vector gathers (CpuOptions::grid_gathers)
  bool int8_gemm = true;      // quantized prompt products on int8 panels (gemm_int8.h)
  bool pack = true;           // packed copies for generation (packed.h)
  size_t prefetch_bytes = 0;  // the packed kernels' prefetch distance
  bool ggml_rounding = true;  // ggml's roundings (CpuOptions::ggml_rounding)
  bool profile = false;       // time kernels and barrier waits (CpuOptions::profile)
  bool huge_pages = true;     // large buffers and packed copies on huge pages (CpuOptions::huge_pages)
};
// `isa` must be supported; throws Error for a prefetch distance over
// kMaxPrefetchBytes.
KernelOptions kernel_options(const CpuOptions& options, Isa isa);
// The defaults for `isa` (tests and benchmarks that name one).
KernelOptions kernel_options(Isa isa);

}  // namespace qlens::cpu
