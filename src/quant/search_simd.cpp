#include "quant/search_simd.h"

#include <cstdlib>
#include <string_view>

namespace qlens::quant {

namespace {

bool g_allowed = true;

bool cpu_allows() {
#ifdef QLENS_SEARCH_X86
  static const bool ok = [] {
    const char* isa = std::getenv("QLENS_CPU_ISA");
    return __builtin_cpu_supports("avx2") && !(isa && std::string_view(isa) == "scalar");
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace

bool use_search_simd() { return g_allowed && cpu_allows(); }

bool set_search_simd(bool allowed) {
  const bool previous = g_allowed;
  g_allowed = allowed;
  return previous;
}

}  // namespace qlens::quant
