// Taps on the Vulkan backend: the reductions of qlens/tap.h computed on the
// device right after their node, accumulated across compute calls in device
// buffers (in double where the device has shaderFloat64, else float) and
// read back by read_tap.
#pragma once

#include <memory>
#include <vector>

#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_recorder.h"
#include "qlens/backend.h"

namespace qlens::vulkan {

class VulkanBackend;

// The shaders a tap kind may run on such a device (ColumnSumSq: on MulMat
// and on MulMatId nodes); VulkanBackend::make_tap_state builds them first:
// if the driver cannot, the tap falls back to the host.
std::vector<ShaderUse> tap_shaders(TapKind kind, bool is_cpu, bool has_float64);
std::unique_ptr<TapState> make_tap_state(VulkanBackend& backend, TapKind kind, int64_t n_columns);
void read_tap(VulkanBackend& backend, TapState& state, TapResult& into, bool reset);
// Throws Error when the tap cannot run on the node (kind, types, shapes,
// memory); else records it.
void record_tap(Recorder& r, const TapWork& tap, const Tensor& node);

}  // namespace qlens::vulkan
