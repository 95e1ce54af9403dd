#include "backend/vulkan/vk_pipelines.h"

#include <algorithm>
#include <cstdio>

#include "backend/vulkan/vk_device.h"
#include "backend/vulkan/vk_shaders.h"
#include "qlens/error.h"

namespace qlens::vulkan {

PipelineCache::PipelineCache(Device& device) : device_(device) {}

bool PipelineCache::told_to_fail(const std::string& name) const {
  for (const std::string& pattern : device_.options().fail_shaders) {
    if (pattern.back() == '*' ? name.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0
                              : name == pattern)
      return true;
  }
  return false;
}

PipelineCache::~PipelineCache() {
  for (auto& [name, p] : pipelines_) vkDestroyPipeline(device_.handle(), p.pipeline, nullptr);
  for (auto& [n, l] : layouts_) {
    vkDestroyPipelineLayout(device_.handle(), l.second, nullptr);
    vkDestroyDescriptorSetLayout(device_.handle(), l.first, nullptr);
  }
}

VkDescriptorSetLayout PipelineCache::set_layout(uint32_t n_buffers) {
  auto it = layouts_.find(n_buffers);
  if (it != layouts_.end()) return it->second.first;
  std::vector<VkDescriptorSetLayoutBinding> bindings(n_buffers);
  for (uint32_t i = 0; i < n_buffers; ++i) {
    bindings[i].binding = i;
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  auto info = vk_struct<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  info.bindingCount = n_buffers;
  info.pBindings = bindings.data();
  VkDescriptorSetLayout set_layout;
  check(vkCreateDescriptorSetLayout(device_.handle(), &info, nullptr, &set_layout), "creating a descriptor set layout");
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
  auto layout_info = vk_struct<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &set_layout;
  layout_info.pushConstantRangeCount = 1;
  layout_info.pPushConstantRanges = &range;
  VkPipelineLayout layout;
  if (VkResult r = vkCreatePipelineLayout(device_.handle(), &layout_info, nullptr, &layout); r != VK_SUCCESS) {
    vkDestroyDescriptorSetLayout(device_.handle(), set_layout, nullptr);
    check(r, "creating a pipeline layout");
  }
  layouts_[n_buffers] = {set_layout, layout};
  return set_layout;
}

const Pipeline& PipelineCache::get(const std::string& name, uint32_t n_buffers) {
  auto it = pipelines_.find(name);
  if (it != pipelines_.end()) {
    if (it->second.n_buffers != n_buffers)
      throw Error("vulkan: shader '" + name + "' used with " + std::to_string(n_buffers) + " buffers, made with " +
                  std::to_string(it->second.n_buffers));
    return it->second;
  }
  if (auto f = failed_.find(name); f != failed_.end()) throw Error(f->second);
  try {
    return build(name, n_buffers);
  } catch (const Error& e) {
    failed_.emplace(name, e.what());
    throw;
  }
}

bool PipelineCache::can_build(const std::string& name, uint32_t n_buffers) {
  if (pipelines_.count(name)) return true;
  if (failed_.count(name)) return false;
  try {
    build(name, n_buffers);
    return true;
  } catch (const Error& e) {
    failed_.emplace(name, e.what());
    std::fprintf(stderr, "warning: %s; its ops run on the CPU\n", e.what());
    return false;
  }
}

const Pipeline& PipelineCache::build(const std::string& name, uint32_t n_buffers) {
  const auto shaders = embedded_shaders();
  auto found = std::find_if(shaders.begin(), shaders.end(), [&](const EmbeddedShader& s) { return name == s.name; });
  if (found == shaders.end()) throw Error("vulkan: no shader '" + name + "' is built into this binary");

  if (n_buffers > kMaxBuffers || n_buffers > device_.max_storage_buffers())
    throw Error("vulkan: shader '" + name + "' takes " + std::to_string(n_buffers) + " storage buffers; " +
                device_.name() + " allows " + std::to_string(device_.max_storage_buffers()));
  Pipeline p;
  p.n_buffers = n_buffers;
  p.set_layout = set_layout(n_buffers);
  p.layout = layouts_[n_buffers].second;
  auto module_info = vk_struct<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  module_info.codeSize = found->bytes;
  module_info.pCode = found->code;
  VkShaderModule module;
  check(vkCreateShaderModule(device_.handle(), &module_info, nullptr, &module),
        device_.name() + ": loading shader '" + name + "'");
  auto info = vk_struct<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  info.layout = p.layout;
  const std::string what = device_.name() + ": creating the pipeline of shader '" + name + "'";
  if (told_to_fail(name)) {
    vkDestroyShaderModule(device_.handle(), module, nullptr);
    throw Error("vulkan: " + what + ": made to fail by VulkanOptions::fail_shaders");
  }
  const VkResult r = vkCreateComputePipelines(device_.handle(), VK_NULL_HANDLE, 1, &info, nullptr, &p.pipeline);
  vkDestroyShaderModule(device_.handle(), module, nullptr);
  check(r, what);
  return pipelines_.emplace(name, p).first->second;
}

// ---------------------------------------------------------------------------

DescriptorAllocator::~DescriptorAllocator() {
  for (VkDescriptorPool p : pools_) vkDestroyDescriptorPool(device_.handle(), p, nullptr);
}

VkDescriptorPool DescriptorAllocator::new_pool() {
  constexpr uint32_t kSets = 256;
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSets * kMaxBuffers};
  auto info = vk_struct<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
  info.maxSets = kSets;
  info.poolSizeCount = 1;
  info.pPoolSizes = &size;
  VkDescriptorPool pool;
  check(vkCreateDescriptorPool(device_.handle(), &info, nullptr, &pool), "creating a descriptor pool");
  pools_.push_back(pool);
  return pool;
}

VkDescriptorSet DescriptorAllocator::allocate(VkDescriptorSetLayout layout) {
  // Each set layout has at most kMaxBuffers buffers, so a pool runs out of sets and
  // buffers together: move on to the next pool when this one is full.
  for (;; ++current_) {
    const bool fresh = current_ == pools_.size();
    if (fresh) new_pool();
    auto info = vk_struct<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
    info.descriptorPool = pools_[current_];
    info.descriptorSetCount = 1;
    info.pSetLayouts = &layout;
    VkDescriptorSet set;
    const VkResult r = vkAllocateDescriptorSets(device_.handle(), &info, &set);
    if (r == VK_SUCCESS) return set;
    if (fresh || (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL))
      check(r, "allocating a descriptor set");
  }
}

void DescriptorAllocator::reset() {
  for (VkDescriptorPool p : pools_) vkResetDescriptorPool(device_.handle(), p, 0);
  current_ = 0;
}

}  // namespace qlens::vulkan
