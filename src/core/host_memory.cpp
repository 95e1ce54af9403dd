#include "core/host_memory.h"
#include "core/round_up.h"

#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace qlens {

namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

void HostMemoryFree::operator()(char* p) const noexcept { std::free(p); }

HostMemory alloc_host_memory(size_t bytes, bool huge_pages) {
  bytes = bytes == 0 ? 1 : bytes;
  const bool large = bytes >= kHugePage;
  const size_t alignment = large ? kHugePage : kAlignment;
  if (bytes > SIZE_MAX - alignment) throw std::bad_alloc();
  const size_t rounded = round_up(bytes, alignment);
  HostMemory p(static_cast<char*>(std::aligned_alloc(alignment, rounded)));
  if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: where THP is off, or no huge page is free, the kernel uses
  // small pages and nothing else changes.
  if (large && huge_pages) ::madvise(p.get(), rounded, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace qlens
