// The command line's way to the CPU backend's options: QLENS_CPU_* variables,
// read here once per call. Nothing in the engine calls this (its kernels get
// CpuOptions from whoever makes the backend); the qlens tool does.
#include <cstdlib>
#include <cstring>

#include "qlens/backend.h"

namespace qlens {

namespace {

// A switch that only "0" turns off, as the variables always read.
bool off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "0") == 0;
}

// Plain decimal digits up to 65536; anything else (empty, signs, spaces,
// suffixes, overflow) leaves the default.
std::optional<size_t> prefetch_from(const char* v) {
  if (!v || *v < '0' || *v > '9') return std::nullopt;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  if (*end != '\0' || n > 65536) return std::nullopt;
  return n;
}

}  // namespace

CpuOptions cpu_options_from_env() {
  CpuOptions o;
  if (const char* isa = std::getenv("QLENS_CPU_ISA")) {
    if (std::strcmp(isa, "scalar") == 0) o.isa = CpuIsa::Scalar;
    else if (std::strcmp(isa, "avx2") == 0) o.isa = CpuIsa::Avx2;
    else if (std::strcmp(isa, "avx512") == 0) o.isa = CpuIsa::Avx512;
  }
  o.vnni = !off("QLENS_CPU_VNNI");
  o.int8_gemm = !off("QLENS_CPU_INT8");
  o.pack = !off("QLENS_CPU_PACK");
  o.prefetch_bytes = prefetch_from(std::getenv("QLENS_CPU_PREFETCH"));
  o.ggml_rounding = !off("QLENS_CPU_ROUND_ACTIVATIONS");
  return o;
}

}  // namespace qlens
