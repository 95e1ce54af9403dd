#include "quant/search_simd.h"

namespace qlens::quant {

namespace {

bool g_allowed = true;

// The CPU's own answer, not the CPU backend's options: the loops give the
// plain loops' bits, so which one runs changes no file, only the time.
bool cpu_allows() {
#ifdef QLENS_SEARCH_X86
  static const bool ok = __builtin_cpu_supports("avx2");
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
