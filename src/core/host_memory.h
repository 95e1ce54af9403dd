// Host memory for large, long-lived data read again and again: weights (the
// CPU backend's buffers, packed weight copies), KV caches, compute buffers.
//
// Allocations of 2 MiB or more are aligned to 2 MiB and advised as
// transparent huge pages (MADV_HUGEPAGE; most distributions enable THP only
// where advised). Generation streams every weight once per token: on 4 KiB
// pages that is a TLB miss every 4 KiB, on 2 MiB pages almost none
// (docs/PERFORMANCE.md, "huge pages": packed Q4_0 generation 31-33 -> 40-47
// tokens/s on Zen 4). The CPU backend's owner may turn the advice off
// (CpuOptions::huge_pages; the CLI's QLENS_HUGE_PAGES=0).
#pragma once

#include <cstddef>
#include <memory>

namespace qlens {

struct HostMemoryFree {
  void operator()(char* p) const noexcept;
};
using HostMemory = std::unique_ptr<char, HostMemoryFree>;

// At least 64-byte aligned; throws std::bad_alloc when the memory is not there.
// With huge_pages, an allocation of 2 MiB or more is advised as huge pages.
HostMemory alloc_host_memory(size_t bytes, bool huge_pages = true);

}  // namespace qlens
