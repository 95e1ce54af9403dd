// Host memory: alignment, and the huge-page advice on large allocations.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/host_memory.h"
#include "qlens/backend.h"

namespace qlens {
namespace {

uintptr_t address(const HostMemory& m) { return reinterpret_cast<uintptr_t>(m.get()); }

TEST(HostMemory, SmallAllocationsAre64ByteAlignedAndLargeOnes2MiB) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, (size_t{2} << 20) - 1}) {
    HostMemory m = alloc_host_memory(n);
    ASSERT_NE(m.get(), nullptr);
    EXPECT_EQ(address(m) % 64, 0u) << n;
    std::memset(m.get(), 0xab, n);  // all of it is usable (ASan checks)
  }
  for (size_t n : {size_t{2} << 20, (size_t{5} << 20) + 3}) {
    HostMemory m = alloc_host_memory(n);
    EXPECT_EQ(address(m) % (size_t{2} << 20), 0u) << n;
    std::memset(m.get(), 0xcd, n);
  }
}

// The kernel's own account of the mapping: /proc/self/smaps says whether the
// area holding the allocation may get huge pages.
std::string smaps_field(uintptr_t addr, const std::string& field) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind(field + ":", 0) == 0) return line.substr(field.size() + 1);
  }
  return "";
}

TEST(HostMemory, LargeAllocationsMayUseHugePages) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off or absent on this system";
  HostMemory m = alloc_host_memory(size_t{8} << 20);
  const std::string eligible = smaps_field(address(m), "THPeligible");
  if (eligible.empty()) GTEST_SKIP() << "this kernel's smaps has no THPeligible field";
  EXPECT_NE(eligible.find('1'), std::string::npos) << "THPeligible:" << eligible;
  // Without the advice, where THP is only given where advised, none.
  if (mode.find("[madvise]") != std::string::npos) {
    HostMemory plain = alloc_host_memory(size_t{8} << 20, /*huge_pages=*/false);
    const std::string not_eligible = smaps_field(address(plain), "THPeligible");
    EXPECT_NE(not_eligible.find('0'), std::string::npos) << "THPeligible:" << not_eligible;
    // The CPU backend's buffers follow its options.
    for (bool huge : {true, false}) {
      CpuOptions o;
      o.huge_pages = huge;
      const auto buffer = make_cpu_backend(1, o)->alloc_buffer(size_t{8} << 20);
      const std::string field = smaps_field(reinterpret_cast<uintptr_t>(buffer->base()), "THPeligible");
      EXPECT_NE(field.find(huge ? '1' : '0'), std::string::npos) << "huge_pages " << huge << ", THPeligible:" << field;
    }
  }
}

}  // namespace
}  // namespace qlens
