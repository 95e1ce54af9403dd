// The Vulkan backend and its buffers.
#pragma once

#include <memory>

#include "backend/vulkan/vk_device.h"
#include "backend/vulkan/vk_pipelines.h"
#include "backend/vulkan/vk_profile.h"
#include "qlens/backend.h"

namespace qlens::vulkan {

class VulkanBackend;

// Device-local memory. base() is a made-up address, unique to the buffer and
// never dereferenced: tensors placed in the buffer point into
// [base, base + size) and the backend turns their address back into an
// offset.
class VulkanBuffer final : public Buffer {
 public:
  VulkanBuffer(VulkanBackend& backend, size_t bytes);
  ~VulkanBuffer() override;

  Backend& backend() const override;
  char* base() const override { return base_; }
  size_t size() const override { return size_; }
  bool is_host() const override { return false; }
  void write(size_t offset, const void* src, size_t n) override;
  void read(size_t offset, void* dst, size_t n) const override;

  const DeviceBuffer& device_buffer() const { return buffer_; }

 private:
  VulkanBackend& backend_;
  size_t size_;
  char* base_;
  DeviceBuffer buffer_;
};

class VulkanBackend final : public Backend {
 public:
  VulkanBackend(int index, const VulkanOptions& options);
  ~VulkanBackend() override;

  std::string name() const override { return device_->name(); }
  std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override;
  bool uses_host_memory() const override { return false; }
  bool supports_op(const Tensor& node) const override;
  void compute_async(std::span<Tensor* const> nodes, std::span<const TapWork> taps) override;
  void synchronize() override;
  // The same for destructors: errors (a lost device) are left to the next call.
  void synchronize_quietly() noexcept;
  std::unique_ptr<TapState> make_tap_state(TapKind kind, int64_t n_columns) override;
  // Column sums per matrix of a 3-D weight's MulMat are the host's.
  bool supports_tap(TapKind kind, const Tensor& node) const override {
    return kind != TapKind::ColumnSumSq || tap_batch_matrices(node) == 0;
  }
  void read_tap(TapState& state, TapResult& into, bool reset) override;

  Device& device() { return *device_; }
  // Synchronous copies between host memory and device buffers (through a
  // staging buffer), after the computation in flight has finished.
  void upload(const DeviceBuffer& dst, size_t offset, const void* src, size_t n);
  void download(const DeviceBuffer& src, size_t offset, void* dst, size_t n);

 private:
  bool fits_one_window(const Tensor& t) const;
  void upload_lattice();

  std::unique_ptr<Device> device_;
  std::unique_ptr<PipelineCache> pipelines_;
  std::unique_ptr<DescriptorAllocator> descriptors_;
  std::unique_ptr<Profiler> profiler_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  bool in_flight_ = false;
  DeviceBuffer staging_;
  DeviceBuffer lattice_;  // the i-quants' points (Recorder::lattice)
};

}  // namespace qlens::vulkan
