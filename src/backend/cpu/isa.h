// Instruction sets the CPU backend has kernels for, and which one to use.
//
// Kernels for one instruction set live in files named *_avx2.cpp / *_avx512.cpp,
// compiled with that set's flags; everything else is portable C++. The scalar
// kernels are always present and are what the SIMD ones are tested against.
#pragma once

#include <cstddef>

namespace qlens::cpu {

enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };

const char* isa_name(Isa isa);
// Whether this CPU can run the kernels of `isa`.
bool isa_supported(Isa isa);
// The instruction set the backend uses by default: the widest supported one;
// QLENS_CPU_ISA=scalar|avx2|avx512 in the environment sets the cap.
Isa best_isa();

// How many bytes ahead of the one they read the packed matrix-vector kernels
// of `isa` (packed.h) prefetch weights: 1024 with AVX2, none with AVX-512
// (measured on Zen 3 and Zen 4: isa.cpp); QLENS_CPU_PREFETCH=N (0 .. 65536)
// in the environment sets it for both.
size_t packed_prefetch_bytes(Isa isa);

// Extensions the kernels of an instruction set use where the CPU has them
// (the int8 GEMM path's dot instructions): AVX-512 VNNI (512-bit vpdpbusd)
// and AVX-VNNI (its VEX-encoded 256-bit form).
bool cpu_has_avx512_vnni();
bool cpu_has_avx_vnni();
// The int8 GEMM's kernels with the kernels of `isa` on this CPU: "vnni",
// "maddubs" (AVX2 without VNNI) or "none" (the F32 panels serve).
const char* int8_kernel_name(Isa isa);

}  // namespace qlens::cpu
