// The Vulkan backend: device discovery and creation. This header is free of
// Vulkan types so that code built with QLENS_VULKAN can include it without
// the Vulkan headers.
#pragma once

#include <memory>
#include <vector>

#include "qlens/backend.h"

namespace qlens::vulkan {

// The usable Vulkan devices ("vulkan:0", ...): Vulkan 1.2 with a compute
// queue and 8/16-bit storage buffer access. Never throws: without a loader
// or a device the list is empty.
std::vector<DeviceInfo> devices();

// The backend of devices()[index]; throws qlens::Error naming the index and
// the devices there are when it cannot be created.
std::unique_ptr<Backend> make_backend(int index, const VulkanOptions& options = {});

}  // namespace qlens::vulkan
