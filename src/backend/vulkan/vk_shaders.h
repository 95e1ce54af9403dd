// The compute shaders, compiled to SPIR-V at build time and embedded (the
// generated vk_shaders_embedded.cpp in the build tree defines the table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace qlens::vulkan {

struct EmbeddedShader {
  const char* name;  // the variant: "mul_mat_vec_q8_0", "copy_f32_f16", ...
  const uint32_t* code;
  size_t bytes;
};

std::span<const EmbeddedShader> embedded_shaders();

}  // namespace qlens::vulkan
