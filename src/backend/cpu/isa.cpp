#include "backend/cpu/isa.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace qlens::cpu {

#if defined(__x86_64__) || defined(__i386__)
// F16C and AVX-VNNI read from CPUID directly: clang (14) does not know them
// as __builtin_cpu_supports names (GCC does), and the fuzz build uses clang.
static bool cpu_has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;  // CPUID.1:ECX.F16C
}
static bool cpuid_avx_vnni() {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;  // CPUID.(7,1):EAX.AVX-VNNI
}
#endif

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
#if defined(__x86_64__) || defined(__i386__)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
      return false;
#endif
    case Isa::Avx512:
#if defined(__x86_64__) || defined(__i386__)
      return isa_supported(Isa::Avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
      return false;
#endif
  }
  return false;
}

// The AVX-512 kernels (the AVX2 templates with a 16-lane wrapper) have run on
// AVX-512 hardware: an AMD EPYC with AVX-512 F/BW/VL/DQ passed the whole suite
// with them (2026-12-02), and they are the default where the CPU has them.
// QLENS_CPU_ISA=avx2|scalar caps the choice.
constexpr bool kAvx512ByDefault = true;

// QLENS_CPU_VNNI=0 acts as a CPU without VNNI (the int8 GEMM's AVX2 maddubs
// kernels, tested on every machine with AVX2).
static bool vnni_allowed() {
  const char* env = std::getenv("QLENS_CPU_VNNI");
  return !env || std::strcmp(env, "0") != 0;
}

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  return vnni_allowed() && isa_supported(Isa::Avx512) && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

bool cpu_has_avx_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  return vnni_allowed() && isa_supported(Isa::Avx2) && cpuid_avx_vnni();
#else
  return false;
#endif
}

const char* int8_kernel_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "none";
    case Isa::Avx2: return cpu_has_avx_vnni() ? "vnni" : "maddubs";
    case Isa::Avx512: return cpu_has_avx512_vnni() ? "vnni" : "none";
  }
  return "none";
}

// Generation streams the packed weights from memory once per token. On Zen 3
// (AVX2 kernels, 2026-12-04) prefetching each group block's lines 1 KiB ahead
// read 8-21% faster than the hardware prefetcher alone (bench_ops
// BM_MulMatVec, uncached, six to ten alternated rounds, each packed type but
// Q5_0, which shares Q4_0's loop) and generated 14% (Q4_0) and 25% (Q4_K_M)
// faster on the 1.1B model; 512 and 2048 were close. On Zen 4 (AVX-512 kernels, 2026-12-03) 8-40 group blocks ahead
// was equal or up to 8% slower (1 KiB, less than one block of the K types,
// was not tried there), so the AVX-512 kernels do not prefetch until a
// machine with them shows a gain.
size_t packed_prefetch_bytes(Isa isa) {
  if (const char* env = std::getenv("QLENS_CPU_PREFETCH")) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(env, &end, 10);
    if (*env >= '0' && *env <= '9' && *end == '\0' && v <= 65536) return v;
  }
  return isa == Isa::Avx2 ? 1024 : 0;
}

Isa best_isa() {
  Isa cap = kAvx512ByDefault ? Isa::Avx512 : Isa::Avx2;
  if (const char* env = std::getenv("QLENS_CPU_ISA")) {
    if (std::strcmp(env, "scalar") == 0) cap = Isa::Scalar;
    else if (std::strcmp(env, "avx2") == 0) cap = Isa::Avx2;
    else if (std::strcmp(env, "avx512") == 0) cap = Isa::Avx512;
  }
  for (int i = static_cast<int>(cap); i > 0; --i)
    if (isa_supported(static_cast<Isa>(i))) return static_cast<Isa>(i);
  return Isa::Scalar;
}

}  // namespace qlens::cpu
