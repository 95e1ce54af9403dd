// The command line's way to the backends' options: QLENS_CPU_* and
// QLENS_VULKAN_* variables, read here once per call. Nothing in the engine
// calls this (backends get their options from whoever makes them); the qlens
// tool does.
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "qlens/backend.h"
#include "qlens/error.h"

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

// "4096", "512K", "1.5G": bytes, or kibi-, mebi-, gibibytes.
uint64_t memory_size_from(const char* name, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  const double scale = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : 0;
  if (end == text.c_str() || scale == 0 || !(v * scale >= 1) || v * scale > 1.8e19)
    throw Error(std::string(name) + ": '" + text + "' is not a size (bytes, or a number with K, M or G)");
  return static_cast<uint64_t>(v * scale);
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
  if (const char* v = std::getenv("QLENS_CPU_GATHER")) {
    if (std::strcmp(v, "0") == 0) o.grid_gathers = false;
    else if (std::strcmp(v, "1") == 0) o.grid_gathers = true;
  }
  o.int8_gemm = !off("QLENS_CPU_INT8");
  o.pack = !off("QLENS_CPU_PACK");
  o.prefetch_bytes = prefetch_from(std::getenv("QLENS_CPU_PREFETCH"));
  o.ggml_rounding = !off("QLENS_CPU_ROUND_ACTIVATIONS");
  o.huge_pages = !off("QLENS_HUGE_PAGES");
  return o;
}

VulkanOptions vulkan_options_from_env() {
  VulkanOptions o;
  if (const char* v = std::getenv("QLENS_VULKAN_CPU_KERNELS")) o.cpu_kernels = std::strcmp(v, "0") != 0;
  if (const char* v = std::getenv("QLENS_VULKAN_MEMORY_LIMIT"))
    o.memory_limit = memory_size_from("QLENS_VULKAN_MEMORY_LIMIT", v);
  if (const char* v = std::getenv("QLENS_VULKAN_FAIL_SHADERS")) {
    std::stringstream list(v);
    for (std::string name; std::getline(list, name, ',');)
      if (!name.empty()) o.fail_shaders.push_back(name);
  }
  o.profile = std::getenv("QLENS_VULKAN_PROFILE") != nullptr;
  return o;
}

}  // namespace qlens
