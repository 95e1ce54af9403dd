// How the Vulkan backend fails: bad buffer accesses and out-of-memory are
// Errors that name what was asked. Every test skips when
// qlens::vulkan::devices() is empty.
#include <gtest/gtest.h>

#ifdef QLENS_VULKAN

#include "vulkan_test_util.h"

namespace qlens {
namespace {

using namespace vktest;

TEST(VulkanErrors, Buffers) {
  REQUIRE_VULKAN();
  auto buf = vulkan_backend()->alloc_buffer(1024);
  EXPECT_FALSE(buf->is_host());
  std::vector<char> data(2048, 1);
  EXPECT_THROW(buf->write(512, data.data(), 1024), Error);
  EXPECT_THROW(buf->read(0, data.data(), 2048), Error);
  buf->write(100, "hello", 5);
  char back[5];
  buf->read(100, back, 5);
  EXPECT_EQ(std::string(back, 5), "hello");
  EXPECT_THROW(vulkan_backend()->alloc_buffer(size_t{1} << 50), Error);  // 1 PiB: out of memory, an Error
}

}  // namespace
}  // namespace qlens

#else  // !QLENS_VULKAN

TEST(VulkanErrors, NotBuilt) { GTEST_SKIP() << "built without Vulkan (QLENS_VULKAN=OFF)"; }

#endif
