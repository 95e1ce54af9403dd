// Compute pipelines made on first use from the embedded shaders, with their
// descriptor-set layouts (one per number of storage buffers), and the pools
// descriptor sets come from.
#pragma once

#include <vulkan/vulkan.h>

#include <map>
#include <string>
#include <vector>

namespace qlens::vulkan {

class Device;

// Every shader takes its parameters as push constants of at most this size
// (the minimum every Vulkan device guarantees).
constexpr uint32_t kPushConstantBytes = 128;
// The most storage buffers a shader takes (gated_delta_net's six sources and
// result); a device that allows fewer than a shader takes builds no such
// shader.
constexpr uint32_t kMaxBuffers = 7;

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  uint32_t n_buffers = 0;
};

// A shader the driver cannot build is reported once on stderr and remembered:
// can_build() says no from then on, and its ops run on the CPU. For tests,
// VulkanOptions::fail_shaders (names; "name*" matches a prefix) makes shaders
// fail as if the driver had rejected them.
class PipelineCache {
 public:
  explicit PipelineCache(Device& device);
  ~PipelineCache();
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  // The pipeline of shader variant `name` taking `n_buffers` storage buffers
  // (bindings 0..n-1); throws Error naming the shader when it is missing or
  // the device cannot build it.
  const Pipeline& get(const std::string& name, uint32_t n_buffers);
  // Builds the pipeline unless it exists; false (after one warning on
  // stderr) when it cannot be built.
  bool can_build(const std::string& name, uint32_t n_buffers);

 private:
  VkDescriptorSetLayout set_layout(uint32_t n_buffers);
  const Pipeline& build(const std::string& name, uint32_t n_buffers);
  bool told_to_fail(const std::string& name) const;

  Device& device_;
  std::map<std::string, Pipeline> pipelines_;
  std::map<std::string, std::string> failed_;  // shader name -> why
  std::map<uint32_t, std::pair<VkDescriptorSetLayout, VkPipelineLayout>> layouts_;
};

// Descriptor sets for one command buffer's dispatches; reset() once the
// command buffer has completed recycles them all.
class DescriptorAllocator {
 public:
  explicit DescriptorAllocator(Device& device) : device_(device) {}
  ~DescriptorAllocator();
  DescriptorAllocator(const DescriptorAllocator&) = delete;
  DescriptorAllocator& operator=(const DescriptorAllocator&) = delete;

  VkDescriptorSet allocate(VkDescriptorSetLayout layout);
  void reset();

 private:
  VkDescriptorPool new_pool();

  Device& device_;
  std::vector<VkDescriptorPool> pools_;
  size_t current_ = 0;
};

}  // namespace qlens::vulkan
