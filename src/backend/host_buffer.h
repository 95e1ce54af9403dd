// Host memory as a backend buffer: what the CPU backends allocate.
#pragma once

#include <memory>

#include "qlens/backend.h"

namespace qlens {

// 64-byte aligned host memory owned by `backend`.
std::unique_ptr<Buffer> make_host_buffer(Backend& backend, size_t bytes);

}  // namespace qlens
