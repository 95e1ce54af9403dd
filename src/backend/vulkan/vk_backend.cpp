#include "backend/vulkan/vk_backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backend/vulkan/vk_lattice.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_recorder.h"
#include "backend/vulkan/vk_taps.h"
#include "backend/vulkan/vulkan_backend.h"
#include "ops/op_table.h"
#include "qlens/error.h"

namespace qlens::vulkan {

namespace {

// Host copies go through a staging buffer of at most this size, in pieces.
constexpr size_t kStagingBytes = size_t{64} << 20;

// Made-up addresses for the buffers' base(): each buffer gets its own range,
// far from 0, so that a tensor's address names its buffer and offset.
char* reserve_fake_range(size_t bytes) {
  static std::atomic<uintptr_t> next{uintptr_t{1} << 32};
  constexpr uintptr_t kGap = uintptr_t{1} << 16;
  const uintptr_t span = (bytes + 2 * kGap - 1) / kGap * kGap;
  return reinterpret_cast<char*>(next.fetch_add(span));
}

}  // namespace

// ---------------------------------------------------------------------------
// VulkanBuffer

VulkanBuffer::VulkanBuffer(VulkanBackend& backend, size_t bytes)
    : backend_(backend), size_(bytes), base_(reserve_fake_range(bytes)) {
  buffer_ = backend.device().create_buffer(bytes, false, "a buffer");
}

VulkanBuffer::~VulkanBuffer() {
  backend_.synchronize_quietly();
  backend_.device().destroy_buffer(buffer_);
}

Backend& VulkanBuffer::backend() const { return backend_; }

void VulkanBuffer::write(size_t offset, const void* src, size_t n) {
  if (offset + n > size_)
    throw Error("vulkan: write of " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                " runs past a buffer of " + std::to_string(size_));
  backend_.upload(buffer_, offset, src, n);
}

void VulkanBuffer::read(size_t offset, void* dst, size_t n) const {
  if (offset + n > size_)
    throw Error("vulkan: read of " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                " runs past a buffer of " + std::to_string(size_));
  backend_.download(buffer_, offset, dst, n);
}

// ---------------------------------------------------------------------------
// VulkanBackend

VulkanBackend::VulkanBackend(int index, const VulkanOptions& options)
    : device_(std::make_unique<Device>(index, options)) {
  pipelines_ = std::make_unique<PipelineCache>(*device_);
  descriptors_ = std::make_unique<DescriptorAllocator>(*device_);
  profiler_ = std::make_unique<Profiler>(*device_);
  VkDevice dev = device_->handle();
  auto pool_info = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = device_->queue_family();
  check(vkCreateCommandPool(dev, &pool_info, nullptr, &pool_), "creating a command pool");
  auto alloc = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  alloc.commandPool = pool_;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  auto fence_info = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  try {
    check(vkAllocateCommandBuffers(dev, &alloc, &cmd_), "allocating a command buffer");
    check(vkCreateFence(dev, &fence_info, nullptr, &fence_), "creating a fence");
  } catch (...) {
    vkDestroyCommandPool(dev, pool_, nullptr);
    throw;
  }
  try {
    upload_lattice();
  } catch (...) {
    device_->destroy_buffer(staging_);
    device_->destroy_buffer(lattice_);
    vkDestroyFence(dev, fence_, nullptr);
    vkDestroyCommandPool(dev, pool_, nullptr);
    throw;
  }
}

void VulkanBackend::upload_lattice() {
  std::vector<uint16_t> points;
  for (std::span<const uint16_t> list : kLatticeLists) points.insert(points.end(), list.begin(), list.end());
  const size_t bytes = points.size() * sizeof(uint16_t);
  lattice_ = device_->create_buffer(bytes, false, "the i-quants' lattice");
  upload(lattice_, 0, points.data(), bytes);
}

VulkanBackend::~VulkanBackend() {
  synchronize_quietly();
  vkDeviceWaitIdle(device_->handle());
  device_->destroy_buffer(staging_);
  device_->destroy_buffer(lattice_);
  vkDestroyFence(device_->handle(), fence_, nullptr);
  vkDestroyCommandPool(device_->handle(), pool_, nullptr);
  profiler_.reset();
  descriptors_.reset();
  pipelines_.reset();
}

std::unique_ptr<Buffer> VulkanBackend::alloc_buffer(size_t bytes) {
  return std::make_unique<VulkanBuffer>(*this, bytes);
}

void VulkanBackend::synchronize() {
  if (!in_flight_) return;
  in_flight_ = false;
  check(vkWaitForFences(device_->handle(), 1, &fence_, VK_TRUE, UINT64_MAX), name() + ": waiting for a computation");
  profiler_->collect();
}

void VulkanBackend::synchronize_quietly() noexcept {
  try {
    synchronize();
  } catch (...) {
    // Destructors cannot report a lost device; the next call will.
  }
}

void VulkanBackend::upload(const DeviceBuffer& dst, size_t offset, const void* src, size_t n) {
  synchronize();  // a computation in flight may still read or write these bytes
  const auto* from = static_cast<const char*>(src);
  for (size_t done = 0; done < n;) {
    const size_t piece = std::min(n - done, kStagingBytes);
    if (staging_.size < piece) {
      device_->destroy_buffer(staging_);
      staging_ = device_->create_buffer(std::max<size_t>(piece, 1 << 20), true, "the staging buffer");
    }
    std::memcpy(staging_.mapped, from + done, piece);
    device_->run_now([&](VkCommandBuffer cmd) {
      VkBufferCopy region{0, offset + done, piece};
      vkCmdCopyBuffer(cmd, staging_.buffer, dst.buffer, 1, &region);
    });
    done += piece;
  }
}

void VulkanBackend::download(const DeviceBuffer& src, size_t offset, void* dst, size_t n) {
  synchronize();
  auto* to = static_cast<char*>(dst);
  for (size_t done = 0; done < n;) {
    const size_t piece = std::min(n - done, kStagingBytes);
    if (staging_.size < piece) {
      device_->destroy_buffer(staging_);
      staging_ = device_->create_buffer(std::max<size_t>(piece, 1 << 20), true, "the staging buffer");
    }
    device_->run_now([&](VkCommandBuffer cmd) {
      VkBufferCopy region{offset + done, 0, piece};
      vkCmdCopyBuffer(cmd, src.buffer, staging_.buffer, 1, &region);
    });
    std::memcpy(to + done, staging_.mapped, piece);
    done += piece;
  }
}

// A tensor a shader binds must fit in one storage-buffer window (starting at
// an aligned offset below it); larger ones stay with the CPU.
bool VulkanBackend::fits_one_window(const Tensor& t) const {
  return t.nbytes() + device_->storage_offset_alignment() <= device_->max_storage_range();
}

bool VulkanBackend::supports_op(const Tensor& node) const {
  const OpDef& def = op_def(node.op);
  if (def.is_view) return true;
  if (!def.invalid(node).empty()) return false;  // the op's rules first, as every backend
  const Kernel& kernel = kernel_of(node.op);
  if (!kernel.supports || !kernel.supports(node) || !fits_one_window(node)) return false;
  // An empty tensor binds no memory (and an empty product is all zeros):
  // left to the CPU.
  if (node.nelements() == 0) return false;
  for (const Tensor* s : node.src)
    if (s && (!fits_one_window(*s) || s->nelements() == 0)) return false;
  for (const ShaderUse& shader : kernel.shaders(node, device_->is_cpu(), device_->has_float64()))
    if (!pipelines_->can_build(shader.name, shader.n_buffers)) return false;
  return true;
}

void VulkanBackend::compute_async(std::span<Tensor* const> nodes, std::span<const TapWork> taps) {
  synchronize();  // one command buffer in flight: its descriptor sets can be recycled now
  descriptors_->reset();
  check(vkResetCommandBuffer(cmd_, 0), "resetting the command buffer");
  auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(cmd_, &begin), "beginning the command buffer");
  Recorder rec(*device_, *pipelines_, *descriptors_, cmd_, lattice_, profiler_.get());
  profiler_->begin(cmd_);
  try {
    full_barrier(cmd_);  // after the uploads and earlier computations
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Tensor& node = *nodes[i];
      if (!op_is_view(node.op)) {
        if (!node.data) throw Error("vulkan: node '" + node.name + "' has no data");
        // The cheap part of supports_op: its shaders were built when the
        // scheduler asked, and record_node's dispatch names one that failed.
        const Kernel& kernel = kernel_of(node.op);
        if (auto why = op_def(node.op).invalid(node); !why.empty())
          throw Error(name() + ": " + op_name(node.op) + " '" + node.name + "': " + why);
        if (!kernel.supports || !kernel.supports(node))
          throw Error(name() + ": cannot compute node '" + node.name + "' (" + op_name(node.op) + " " +
                      shape_string(node) + ", " + std::string(type_name(node.type)) + ")");
        kernel.record(rec, node);
      }
      for (const TapWork& tap : taps)
        if (tap.node_index == i) record_tap(rec, tap, node);
    }
  } catch (...) {
    vkEndCommandBuffer(cmd_);  // reset at the next call
    throw;
  }
  check(vkEndCommandBuffer(cmd_), "ending the command buffer");
  if (rec.empty()) return;
  auto submit = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cmd_;
  check(vkResetFences(device_->handle(), 1, &fence_), "resetting a fence");
  check(vkQueueSubmit(device_->queue(), 1, &submit, fence_), name() + ": submitting a computation");
  in_flight_ = true;
}

std::unique_ptr<TapState> VulkanBackend::make_tap_state(TapKind kind, int64_t n_columns) {
  // A tap whose shader the driver cannot build is left to the scheduler's
  // host fallback (null), as a backend without taps.
  for (const ShaderUse& shader : tap_shaders(kind, device_->is_cpu(), device_->has_float64()))
    if (!pipelines_->can_build(shader.name, shader.n_buffers)) return nullptr;
  return vulkan::make_tap_state(*this, kind, n_columns);
}

void VulkanBackend::read_tap(TapState& state, TapResult& into, bool reset) {
  vulkan::read_tap(*this, state, into, reset);
}

std::unique_ptr<Backend> make_backend(int index, const VulkanOptions& options) {
  try {
    return std::make_unique<VulkanBackend>(index, options);
  } catch (const Error& e) {
    std::string known;
    for (const DeviceInfo& d : devices()) known += (known.empty() ? "" : ", ") + d.id + " (" + d.name + ")";
    throw Error(std::string("cannot open Vulkan device ") + std::to_string(index) + ": " + e.what() +
                "; Vulkan devices here: " + (known.empty() ? "none" : known));
  }
}

}  // namespace qlens::vulkan
