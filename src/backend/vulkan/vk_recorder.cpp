#include "backend/vulkan/vk_recorder.h"

#include <algorithm>
#include <limits>

#include "backend/vulkan/vk_backend.h"
#include "qlens/error.h"

namespace qlens::vulkan {

namespace {

constexpr uint64_t kMaxGroupsPerDim = 65535;  // the minimum maxComputeWorkGroupCount every device has

std::string quoted(const Tensor& t) { return "'" + (t.name.empty() ? std::string("(unnamed)") : t.name) + "'"; }

}  // namespace

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint32_t Bound::offset_in(size_t bytes, const std::string& what) const {
  if (offset % bytes != 0)
    throw Error("vulkan: " + what + " starts at byte " + std::to_string(offset) + ", not a multiple of " +
                std::to_string(bytes));
  return static_cast<uint32_t>(offset / bytes);
}

std::array<uint32_t, 4> element_strides(const Tensor& t, size_t element_bytes) {
  std::array<uint32_t, 4> out{};
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.nb[i] % element_bytes != 0 || t.nb[i] / element_bytes > std::numeric_limits<uint32_t>::max())
      throw Error("vulkan: tensor " + quoted(t) + " has stride " + std::to_string(t.nb[i]) +
                  " bytes, not a whole number of elements");
    out[i] = static_cast<uint32_t>(t.nb[i] / element_bytes);
  }
  return out;
}

std::array<uint32_t, 4> shape_u32(const Tensor& t) {
  return {static_cast<uint32_t>(t.ne[0]), static_cast<uint32_t>(t.ne[1]), static_cast<uint32_t>(t.ne[2]),
          static_cast<uint32_t>(t.ne[3])};
}

Bound Recorder::window(VkBuffer buffer, VkDeviceSize buffer_size, VkDeviceSize offset, VkDeviceSize bytes,
                       const std::string& what) const {
  const VkDeviceSize align = device_.storage_offset_alignment();
  Bound b;
  b.window.buffer = buffer;
  b.window.offset = offset / align * align;
  b.window.range = std::min<VkDeviceSize>(buffer_size - b.window.offset, device_.max_storage_range());
  const VkDeviceSize inside = offset - b.window.offset;
  if (inside + bytes > b.window.range)
    throw Error("vulkan: " + device_.name() + ": " + what + " spans " + std::to_string(bytes) +
                " bytes, more than one storage-buffer window (" + std::to_string(device_.max_storage_range()) +
                " bytes) can show");
  b.offset = static_cast<uint32_t>(inside);
  return b;
}

Bound Recorder::bind(const Tensor& t, const char* role) const {
  const auto* buffer = dynamic_cast<const VulkanBuffer*>(t.buffer);
  const std::string what = std::string(role) + " " + quoted(t);
  if (!buffer || !t.data)
    throw Error("vulkan: " + device_.name() + ": " + what + " is not in the device's memory");
  const char* p = static_cast<const char*>(t.data);
  if (p < buffer->base() || static_cast<size_t>(p - buffer->base()) + t.nbytes() > buffer->size())
    throw Error("vulkan: " + device_.name() + ": " + what + " lies outside its buffer");
  const DeviceBuffer& db = buffer->device_buffer();
  return window(db.buffer, db.size, static_cast<VkDeviceSize>(p - buffer->base()), std::max<size_t>(t.nbytes(), 1),
                what);
}

Bound Recorder::bind(const DeviceBuffer& b) const { return window(b.buffer, b.size, 0, b.size, "a backend buffer"); }

void Recorder::dispatch_raw(const std::string& shader, std::initializer_list<Bound> buffers, const void* push,
                            size_t push_bytes, uint64_t groups) {
  if (groups == 0) return;
  if (buffers.size() > kMaxBuffers)
    throw Error("vulkan: shader '" + shader + "' takes more than " + std::to_string(kMaxBuffers) + " buffers");
  const uint64_t x = std::min(groups, kMaxGroupsPerDim), y = ceil_div(groups, x);
  if (y > kMaxGroupsPerDim)
    throw Error("vulkan: shader '" + shader + "': " + std::to_string(groups) + " workgroups are too many");
  const Pipeline& p = pipelines_.get(shader, static_cast<uint32_t>(buffers.size()));
  VkDescriptorSet set = descriptors_.allocate(p.set_layout);
  VkWriteDescriptorSet writes[kMaxBuffers];
  uint32_t i = 0;
  for (const Bound& b : buffers) {
    writes[i] = vk_struct<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[i].dstSet = set;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &b.window;
    ++i;
  }
  vkUpdateDescriptorSets(device_.handle(), i, writes, 0, nullptr);
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, static_cast<uint32_t>(push_bytes), push);
  vkCmdDispatch(cmd_, static_cast<uint32_t>(x), static_cast<uint32_t>(y), 1);
  full_barrier(cmd_);
  if (profiler_) profiler_->mark(cmd_, shader);
  ++dispatches_;
}

}  // namespace qlens::vulkan
