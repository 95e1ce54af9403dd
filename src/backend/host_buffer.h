// Host memory as a backend buffer: what the CPU backends allocate.
#pragma once

#include <memory>

#include "qlens/backend.h"

namespace qlens {

// 64-byte aligned host memory owned by `backend` (alloc_host_memory: large
// buffers advised as huge pages unless huge_pages is false).
std::unique_ptr<Buffer> make_host_buffer(Backend& backend, size_t bytes, bool huge_pages = true);

}  // namespace qlens
