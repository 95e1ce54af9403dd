#include "backend/vulkan/vk_device.h"

#include <algorithm>

#include "core/human_bytes.h"
#include "qlens/error.h"

namespace qlens::vulkan {

const char* result_name(VkResult result) {
  switch (result) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    case VK_ERROR_UNKNOWN: return "VK_ERROR_UNKNOWN";
    default: return "VkResult error";
  }
}

void check(VkResult result, const std::string& what) {
  if (result != VK_SUCCESS)
    throw Error("vulkan: " + what + ": " + result_name(result) + " (" + std::to_string(static_cast<int>(result)) + ")");
}

// ---------------------------------------------------------------------------
// Instance and device discovery

Instance::Instance() {
  uint32_t version = 0;
  // vkEnumerateInstanceVersion exists from loader 1.1 on; a 1.0 loader is too old anyway.
  if (vkEnumerateInstanceVersion(&version) != VK_SUCCESS || version < VK_API_VERSION_1_2)
    throw Error("vulkan: the Vulkan loader is missing or older than 1.2");
  auto app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "qlens";
  app.pEngineName = "qlens";
  app.apiVersion = VK_API_VERSION_1_2;
  auto info = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  info.pApplicationInfo = &app;
  check(vkCreateInstance(&info, nullptr, &instance_), "creating the instance");
}

Instance::~Instance() {
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

namespace {

struct Features {
  VkPhysicalDeviceFeatures2 base = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  VkPhysicalDeviceVulkan11Features v11 =
      vk_struct<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
  VkPhysicalDeviceVulkan12Features v12 =
      vk_struct<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  Features() {
    base.pNext = &v11;
    v11.pNext = &v12;
  }
  Features(const Features&) = delete;
};

int compute_queue_family(VkPhysicalDevice device) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(device, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  vkGetPhysicalDeviceQueueFamilyProperties(device, &n, families.data());
  // Prefer a compute-only family (asynchronous compute), else any with compute.
  int any = -1;
  for (uint32_t i = 0; i < n; ++i) {
    if (!(families[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
    if (!(families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) return static_cast<int>(i);
    if (any < 0) any = static_cast<int>(i);
  }
  return any;
}

bool usable(VkPhysicalDevice device) {
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(device, &props);
  if (props.apiVersion < VK_API_VERSION_1_2 || compute_queue_family(device) < 0) return false;
  Features f;
  vkGetPhysicalDeviceFeatures2(device, &f.base);
  // Weights and caches are read as 8- and 16-bit arrays (blocks are 2-byte aligned).
  return f.v11.storageBuffer16BitAccess && f.v12.storageBuffer8BitAccess;
}

uint64_t device_local_bytes(VkPhysicalDevice device) {
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(device, &mem);
  uint64_t best = 0;
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) best = std::max<uint64_t>(best, mem.memoryHeaps[i].size);
  return best;
}

}  // namespace

std::vector<VkPhysicalDevice> Instance::usable_devices() const {
  uint32_t n = 0;
  check(vkEnumeratePhysicalDevices(instance_, &n, nullptr), "listing devices");
  std::vector<VkPhysicalDevice> all(n);
  check(vkEnumeratePhysicalDevices(instance_, &n, all.data()), "listing devices");
  all.resize(n);
  std::vector<VkPhysicalDevice> out;
  for (VkPhysicalDevice d : all)
    if (usable(d)) out.push_back(d);
  return out;
}

DeviceInfo describe(VkPhysicalDevice device, int index) {
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(device, &props);
  DeviceInfo info;
  info.id = "vulkan:" + std::to_string(index);
  info.name = props.deviceName;
  switch (props.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: info.kind = "discrete gpu"; break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: info.kind = "integrated gpu"; break;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: info.kind = "virtual gpu"; break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: info.kind = "cpu (software vulkan)"; break;
    default: info.kind = "other"; break;
  }
  info.memory_bytes = device_local_bytes(device);
  return info;
}

std::vector<DeviceInfo> devices() {
  try {
    Instance instance;
    std::vector<DeviceInfo> out;
    const auto found = instance.usable_devices();
    for (size_t i = 0; i < found.size(); ++i) out.push_back(describe(found[i], static_cast<int>(i)));
    return out;
  } catch (...) {
    return {};  // no loader, no driver, no device: no Vulkan devices
  }
}

// ---------------------------------------------------------------------------
// Device

Device::Device(int index, const VulkanOptions& options) : options_(options) {
  const auto found = instance_.usable_devices();
  if (index < 0 || static_cast<size_t>(index) >= found.size())
    throw Error("vulkan: no device vulkan:" + std::to_string(index) + " (" + std::to_string(found.size()) +
                " usable Vulkan device" + (found.size() == 1 ? "" : "s") + " here)");
  physical_ = found[index];
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(physical_, &props);
  name_ = "vulkan:" + std::to_string(index) + " (" + props.deviceName + ")";
  storage_offset_alignment_ = std::max<VkDeviceSize>(props.limits.minStorageBufferOffsetAlignment, 4);
  max_storage_range_ = props.limits.maxStorageBufferRange;
  max_storage_buffers_ = props.limits.maxPerStageDescriptorStorageBuffers;
  if (props.limits.timestampComputeAndGraphics) timestamp_period_ = props.limits.timestampPeriod;
  is_cpu_ = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  if (options.cpu_kernels) is_cpu_ = *options.cpu_kernels;
  if (options.memory_limit > 0) memory_limit_ = options.memory_limit;
  auto m3 = vk_struct<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  auto props2 = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  props2.pNext = &m3;
  vkGetPhysicalDeviceProperties2(physical_, &props2);
  max_allocation_ = m3.maxMemoryAllocationSize;
  vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);

  Features supported;
  vkGetPhysicalDeviceFeatures2(physical_, &supported.base);
  has_float64_ = supported.base.features.shaderFloat64;
  Features wanted;
  wanted.base.features.shaderFloat64 = supported.base.features.shaderFloat64;
  wanted.base.features.shaderInt64 = supported.base.features.shaderInt64;
  wanted.v11.storageBuffer16BitAccess = VK_TRUE;
  wanted.v12.storageBuffer8BitAccess = VK_TRUE;

  queue_family_ = static_cast<uint32_t>(compute_queue_family(physical_));
  const float priority = 1.0f;
  auto queue_info = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  queue_info.queueFamilyIndex = queue_family_;
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;
  auto info = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  info.pNext = &wanted.base;
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue_info;
  check(vkCreateDevice(physical_, &info, nullptr, &device_), "creating device " + name_);
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  try {
    auto pool_info = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool_info.queueFamilyIndex = queue_family_;
    check(vkCreateCommandPool(device_, &pool_info, nullptr, &transfer_pool_), "creating a command pool");
    auto alloc = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    alloc.commandPool = transfer_pool_;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(device_, &alloc, &transfer_cmd_), "allocating a command buffer");
    auto fence_info = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    check(vkCreateFence(device_, &fence_info, nullptr, &transfer_fence_), "creating a fence");
  } catch (...) {
    if (transfer_pool_) vkDestroyCommandPool(device_, transfer_pool_, nullptr);
    vkDestroyDevice(device_, nullptr);
    throw;
  }
}

Device::~Device() {
  vkDeviceWaitIdle(device_);
  vkDestroyFence(device_, transfer_fence_, nullptr);
  vkDestroyCommandPool(device_, transfer_pool_, nullptr);
  vkDestroyDevice(device_, nullptr);
}

DeviceBuffer Device::create_buffer(VkDeviceSize size, bool host_visible, const std::string& what) {
  DeviceBuffer b;
  b.size = std::max<VkDeviceSize>(size, 4);
  auto fail = [&](const std::string& why) {
    destroy_buffer(b);
    throw Error("vulkan: " + name_ + ": cannot allocate " + human_bytes(size) + " for " + what + ": " + why);
  };
  const std::string in_use = human_bytes(device_bytes_) + " of device memory in use by qlens";
  if (b.size > max_allocation_) fail("larger than the device's largest allocation (" + human_bytes(max_allocation_) + ")");
  if (!host_visible && device_bytes_ + b.size > memory_limit_)
    fail("out of device memory (memory limit " + human_bytes(memory_limit_) + ", " + in_use + ")");
  auto info = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  info.size = b.size;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (VkResult r = vkCreateBuffer(device_, &info, nullptr, &b.buffer); r != VK_SUCCESS) fail(result_name(r));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b.buffer, &req);
  const VkMemoryPropertyFlags want =
      host_visible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                   : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  // The first type with the wanted properties; device memory without
  // DEVICE_LOCAL types (none known) falls back to any type.
  int type = -1;
  for (uint32_t i = 0; i < memory_.memoryTypeCount && type < 0; ++i)
    if ((req.memoryTypeBits & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & want) == want) type = static_cast<int>(i);
  for (uint32_t i = 0; i < memory_.memoryTypeCount && type < 0 && !host_visible; ++i)
    if (req.memoryTypeBits & (1u << i)) type = static_cast<int>(i);
  if (type < 0) fail("no suitable memory type");
  auto alloc = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = static_cast<uint32_t>(type);
  if (VkResult r = vkAllocateMemory(device_, &alloc, nullptr, &b.memory); r != VK_SUCCESS)
    fail(r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? std::string("out of device memory (") + in_use + ")" : result_name(r));
  if (!host_visible) {
    device_bytes_ += b.size;
    b.counted = true;
  }
  if (VkResult r = vkBindBufferMemory(device_, b.buffer, b.memory, 0); r != VK_SUCCESS) fail(result_name(r));
  if (host_visible)
    if (VkResult r = vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped); r != VK_SUCCESS)
      fail(result_name(r));
  return b;
}

void Device::destroy_buffer(DeviceBuffer& b) {
  if (b.counted) device_bytes_ -= b.size;
  if (b.buffer) vkDestroyBuffer(device_, b.buffer, nullptr);
  if (b.memory) vkFreeMemory(device_, b.memory, nullptr);  // unmaps too
  b = DeviceBuffer{};
}

void full_barrier(VkCommandBuffer cmd) {
  auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                          VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(cmd, stages, stages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

void Device::run_now(const std::function<void(VkCommandBuffer)>& record) {
  check(vkResetCommandBuffer(transfer_cmd_, 0), "resetting a command buffer");
  auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(transfer_cmd_, &begin), "beginning a command buffer");
  // Earlier computations may have written what this reads, and later ones
  // read what it writes: barriers on both sides.
  full_barrier(transfer_cmd_);
  record(transfer_cmd_);
  full_barrier(transfer_cmd_);
  check(vkEndCommandBuffer(transfer_cmd_), "ending a command buffer");
  auto submit = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &transfer_cmd_;
  check(vkResetFences(device_, 1, &transfer_fence_), "resetting a fence");
  check(vkQueueSubmit(queue_, 1, &submit, transfer_fence_), name_ + ": submitting a transfer");
  check(vkWaitForFences(device_, 1, &transfer_fence_, VK_TRUE, UINT64_MAX), name_ + ": waiting for a transfer");
}

}  // namespace qlens::vulkan
