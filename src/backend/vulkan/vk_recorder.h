// Recording one compute call: where tensors lie for a shader (descriptor
// window and offset), dispatches with their push constants, and a barrier
// after each so that every dispatch sees what the previous ones wrote.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "backend/vulkan/vk_device.h"
#include "backend/vulkan/vk_pipelines.h"
#include "backend/vulkan/vk_profile.h"
#include "qlens/tensor.h"

namespace qlens::vulkan {

// A buffer range as a shader sees it: the descriptor's window, and the byte
// offset of the data inside the window. Windows start at the device's
// storage-offset alignment and span at most its largest storage range, so
// that buffers larger than that range still work.
struct Bound {
  VkDescriptorBufferInfo window{};
  uint32_t offset = 0;  // bytes

  // The offset in elements of `bytes` bytes (throws unless it divides).
  uint32_t offset_in(size_t bytes, const std::string& what) const;
};

// A tensor's strides in elements of `element_bytes` (throws unless each
// stride is a whole number of elements and fits in 32 bits).
std::array<uint32_t, 4> element_strides(const Tensor& t, size_t element_bytes);
std::array<uint32_t, 4> shape_u32(const Tensor& t);

class Recorder {
 public:
  Recorder(Device& device, PipelineCache& pipelines, DescriptorAllocator& descriptors, VkCommandBuffer cmd,
           const DeviceBuffer& lattice, Profiler* profiler = nullptr)
      : device_(device),
        pipelines_(pipelines),
        descriptors_(descriptors),
        cmd_(cmd),
        lattice_(lattice),
        profiler_(profiler) {}

  // The tensor in device memory; throws Error naming it and `role` when it
  // is not in this device's memory or does not fit in one window.
  Bound bind(const Tensor& t, const char* role) const;
  Bound bind(const DeviceBuffer& b) const;
  // The i-quants' lattice points (vulkan.cmake), every weight shader's last binding.
  Bound lattice() const { return bind(lattice_); }

  // Dispatches `groups` workgroups of shader `shader` (spread over x and y,
  // see group_index() in shaders/common.glsl), then a barrier.
  template <class Push>
  void dispatch(const std::string& shader, std::initializer_list<Bound> buffers, const Push& push, uint64_t groups) {
    static_assert(sizeof(Push) <= kPushConstantBytes, "push constants too large");
    dispatch_raw(shader, buffers, &push, sizeof(Push), groups);
  }

  bool has_float64() const { return device_.has_float64(); }
  bool is_cpu() const { return device_.is_cpu(); }
  const std::string& device_name() const { return device_.name(); }
  bool empty() const { return dispatches_ == 0; }

 private:
  void dispatch_raw(const std::string& shader, std::initializer_list<Bound> buffers, const void* push,
                    size_t push_bytes, uint64_t groups);
  Bound window(VkBuffer buffer, VkDeviceSize buffer_size, VkDeviceSize offset, VkDeviceSize bytes,
               const std::string& what) const;

  Device& device_;
  PipelineCache& pipelines_;
  DescriptorAllocator& descriptors_;
  VkCommandBuffer cmd_;
  const DeviceBuffer& lattice_;
  Profiler* profiler_;
  int dispatches_ = 0;
};

uint64_t ceil_div(uint64_t a, uint64_t b);

}  // namespace qlens::vulkan
