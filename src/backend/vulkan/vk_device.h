// The Vulkan runtime under the backend: instance, physical device choice, one
// compute queue, buffers and their memory, and one-off submissions.
#pragma once

#include <vulkan/vulkan.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qlens/backend.h"

namespace qlens::vulkan {

// A zeroed Vulkan structure with its sType set (brace-initializing only the
// sType would leave -Wextra warning about every other field).
template <class T>
T vk_struct(VkStructureType type) {
  T t{};
  t.sType = type;
  return t;
}

// Throws qlens::Error "vulkan: <what>: <result>" unless result is VK_SUCCESS.
void check(VkResult result, const std::string& what);
const char* result_name(VkResult result);

// A VkInstance for the life of the object (one per backend, one per listing).
class Instance {
 public:
  Instance();  // throws Error when there is no loader or no Vulkan 1.2
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
  VkInstance handle() const { return instance_; }
  // Physical devices the backend can use, in the loader's order: the
  // indices of "vulkan:N".
  std::vector<VkPhysicalDevice> usable_devices() const;

 private:
  VkInstance instance_ = VK_NULL_HANDLE;
};

DeviceInfo describe(VkPhysicalDevice device, int index);

// A buffer and the memory bound to it; `mapped` is set for host-visible ones.
struct DeviceBuffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize size = 0;
  void* mapped = nullptr;
  bool counted = false;  // in Device's device-local total
};

// The logical device and its compute queue.
class Device {
 public:
  Device(int index, const VulkanOptions& options);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  VkDevice handle() const { return device_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }
  const std::string& name() const { return name_; }  // "vulkan:0 (llvmpipe ...)"
  bool has_float64() const { return has_float64_; }
  VkDeviceSize storage_offset_alignment() const { return storage_offset_alignment_; }
  VkDeviceSize max_storage_range() const { return max_storage_range_; }
  uint32_t max_storage_buffers() const { return max_storage_buffers_; }  // per shader
  // Nanoseconds per timestamp tick; 0 when compute queues have no timestamps.
  float timestamp_period() const { return timestamp_period_; }
  // A CPU implementation (lavapipe, SwiftShader): invocations run as SIMD
  // lanes of CPU threads, so shaders avoid shared memory and barriers there.
  // VulkanOptions::cpu_kernels overrides the device type (for tests).
  bool is_cpu() const { return is_cpu_; }
  const VulkanOptions& options() const { return options_; }
  // Tests: pretend the largest storage-buffer range is `bytes`.
  void limit_max_storage_range(VkDeviceSize bytes) { max_storage_range_ = std::min(max_storage_range_, bytes); }

  // Device-local (or, when `host_visible`, mapped host-coherent) memory;
  // throws Error naming `what` when the device is out of memory, or when
  // VulkanOptions::memory_limit (to share a GPU) would be passed.
  DeviceBuffer create_buffer(VkDeviceSize size, bool host_visible, const std::string& what);
  void destroy_buffer(DeviceBuffer& buffer);

  // Records commands into a fresh command buffer, submits it and waits.
  void run_now(const std::function<void(VkCommandBuffer)>& record);

 private:
  const VulkanOptions options_;
  Instance instance_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  std::string name_;
  bool has_float64_ = false;
  VkDeviceSize storage_offset_alignment_ = 256;
  uint32_t max_storage_buffers_ = 4;
  VkDeviceSize max_storage_range_ = 1u << 27;
  float timestamp_period_ = 0;
  bool is_cpu_ = false;
  VkDeviceSize max_allocation_ = ~VkDeviceSize{0};
  VkPhysicalDeviceMemoryProperties memory_{};
  VkDeviceSize memory_limit_ = ~VkDeviceSize{0};  // VulkanOptions::memory_limit
  VkDeviceSize device_bytes_ = 0;                 // device-local memory allocated
  VkCommandPool transfer_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer transfer_cmd_ = VK_NULL_HANDLE;
  VkFence transfer_fence_ = VK_NULL_HANDLE;
};

// A barrier making every earlier shader or transfer write visible to every
// later shader or transfer access: the backend's one kind of dependency.
void full_barrier(VkCommandBuffer cmd);

}  // namespace qlens::vulkan
