#include "backend/cpu/isa.h"

#include <string>

#include "qlens/error.h"

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
static bool cpuid_intel() {
  unsigned a, b, c, d;
  return __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;  // "GenuineIntel"
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

namespace {

bool cpu_can_run(Isa isa) {
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
      return cpu_can_run(Isa::Avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
      return false;
#endif
  }
  return false;
}

}  // namespace

// Asked once per instruction set: cpu_has_f16c runs cpuid, which a virtual
// machine traps (microseconds), and callers ask per call.
bool isa_supported(Isa isa) {
  static const bool supported[] = {cpu_can_run(Isa::Scalar), cpu_can_run(Isa::Avx2), cpu_can_run(Isa::Avx512)};
  return supported[static_cast<int>(isa)];
}

// The AVX-512 kernels (the AVX2 templates with a 16-lane wrapper) have run on
// AVX-512 hardware: an AMD EPYC with AVX-512 F/BW/VL/DQ passed the whole suite
// with them (2026-12-02), and they are the default where the CPU has them.
// CpuOptions::isa (QLENS_CPU_ISA=avx2|scalar on the command line) caps the
// choice.
constexpr bool kAvx512ByDefault = true;

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  return isa_supported(Isa::Avx512) && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

bool cpu_has_avx_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  return isa_supported(Isa::Avx2) && cpuid_avx_vnni();
#else
  return false;
#endif
}

bool cpu_has_vnni(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return false;
    case Isa::Avx2: return cpu_has_avx_vnni();
    case Isa::Avx512: return cpu_has_avx512_vnni();
  }
  return false;
}

bool cpu_is_intel() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool intel = cpuid_intel();
  return intel;
#else
  return false;
#endif
}

// The 3-bit grids' eight half-points per chunk by one vpgatherdd, or by
// eight loads and inserts: an A/B of bench_ops BM_MulMatVec (K 2048, M 5632,
// in cache, 2 threads), IQ3_S / IQ3_XXS in ms. Intel Xeon (Emerald Rapids,
// 2026-12-07): loads 0.87-0.91 / 0.56-0.72, gathers 0.49-0.59 / 0.47-0.54.
// AMD EPYC (Zen 4, 2026-12-06): loads 0.561 / 0.407, gathers 0.647 / 0.604.
// Gathers are microcoded on Zen 3 and 4, and on Intel's cores before Alder
// Lake and Sapphire Rapids the Downfall (GDS) microcode makes them several
// times slower; those later cores are the Intel ones with AVX-VNNI, so that
// is the test. The 1-bit grids' four 64-bit codes per chunk by one
// vpgatherdq on the Intel machine: IQ1_S 0.475-0.496 -> 0.392-0.397, IQ1_M
// 0.567 -> 0.516-0.520. (The 2-bit grids' four points measured slower
// gathered there, IQ2_S 0.46-0.50 -> 0.64-0.67: they keep their loads.)
bool cpu_has_fast_gathers() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool fast = isa_supported(Isa::Avx2) && cpu_is_intel() && cpuid_avx_vnni();
  return fast;
#else
  return false;
#endif
}

const char* int8_kernel_name(Isa isa, bool vnni) {
  const bool with_vnni = vnni && cpu_has_vnni(isa);
  switch (isa) {
    case Isa::Scalar: return "none";
    case Isa::Avx2: return with_vnni ? "vnni" : "maddubs";
    case Isa::Avx512: return with_vnni ? "vnni" : "none";
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
// was not tried there), so the AVX-512 kernels do not prefetch on AMD. On an
// Intel Xeon (Emerald Rapids, 2026-12-07; `qlens bench -n 128 -t 2`, two
// alternated rounds) prefetching gained far more, best 8 KiB ahead with both
// instruction sets: AVX-512, 135m Q4_0 224 t/s without, 271-294 at 4 KiB,
// 291-296 at 8, 279-294 at 16, 256-269 at 32; Gemma 3 Q4_K_M 77 without,
// 97-106 at 8 KiB; a pure MXFP4 1.1B 26 without, 40 at 2-16 KiB; AVX2, 135m
// 225-281 at 1 KiB, 272-304 at 8, Gemma 3 84-91 at 1 KiB, 95-97 at 8.
size_t packed_prefetch_bytes(Isa isa) {
  if (cpu_is_intel() && isa != Isa::Scalar) return 8192;
  return isa == Isa::Avx2 ? 1024 : 0;
}

Isa isa_for(CpuIsa cap) {
  Isa widest = kAvx512ByDefault ? Isa::Avx512 : Isa::Avx2;
  if (cap == CpuIsa::Scalar) widest = Isa::Scalar;
  else if (cap == CpuIsa::Avx2) widest = Isa::Avx2;
  else if (cap == CpuIsa::Avx512) widest = Isa::Avx512;
  for (int i = static_cast<int>(widest); i > 0; --i)
    if (isa_supported(static_cast<Isa>(i))) return static_cast<Isa>(i);
  return Isa::Scalar;
}

Isa best_isa() { return isa_for(CpuIsa::Best); }

KernelOptions kernel_options(const CpuOptions& options, Isa isa) {
  if (options.prefetch_bytes && *options.prefetch_bytes > kMaxPrefetchBytes)
    throw Error("cpu backend: prefetch distance " + std::to_string(*options.prefetch_bytes) + " bytes is over " +
                std::to_string(kMaxPrefetchBytes));
  KernelOptions k;
  k.isa = isa;
  k.vnni = options.vnni && cpu_has_vnni(isa);
  k.grid_gathers = isa != Isa::Scalar && options.grid_gathers.value_or(cpu_has_fast_gathers());
  k.int8_gemm = options.int8_gemm;
  k.pack = options.pack;
  k.prefetch_bytes = options.prefetch_bytes.value_or(packed_prefetch_bytes(isa));
  k.ggml_rounding = options.ggml_rounding;
  k.profile = options.profile;
  k.huge_pages = options.huge_pages;
  return k;
}

KernelOptions kernel_options(Isa isa) { return kernel_options(CpuOptions{}, isa); }

}  // namespace qlens::cpu
