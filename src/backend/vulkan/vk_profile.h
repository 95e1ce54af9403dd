// Time per shader from timestamp queries, to find the shaders a model's time
// goes to: on with VulkanOptions::profile (where the device has compute
// timestamps). Each dispatch is timed from the end of
// the previous command to its own end (dispatches are serialized by barriers
// anyway); the totals per shader go to stderr when the backend closes.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace qlens::vulkan {

class Device;

class Profiler {
 public:
  explicit Profiler(Device& device);
  ~Profiler();  // prints the report
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  bool enabled() const { return pool_ != VK_NULL_HANDLE; }
  void begin(VkCommandBuffer cmd);                              // at the start of a command buffer
  void mark(VkCommandBuffer cmd, const std::string& shader);   // after each dispatch
  void collect();                                               // once the command buffer has completed

 private:
  struct Total {
    double ns = 0;
    uint64_t dispatches = 0;
  };
  Device& device_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  std::vector<std::string> pending_;  // shader of timestamp i + 1
  std::map<std::string, Total> totals_;
  uint64_t untimed_ = 0;  // dispatches past the pool's capacity
};

}  // namespace qlens::vulkan
