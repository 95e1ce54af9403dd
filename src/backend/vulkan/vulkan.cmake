# The Vulkan backend: shaders compiled to SPIR-V by glslc at build time and
# embedded into the library as byte arrays (a generated .cpp in the build
# tree). Included by the root CMakeLists when QLENS_VULKAN is ON.

set(QLENS_VK_DIR ${CMAKE_SOURCE_DIR}/src/backend/vulkan)
set(QLENS_VK_SHADER_DIR ${QLENS_VK_DIR}/shaders)
set(QLENS_VK_OUT ${CMAKE_BINARY_DIR}/vulkan_shaders)
file(MAKE_DIRECTORY ${QLENS_VK_OUT})

# Variants: "name|source|defines" (defines separated by spaces).
set(QLENS_VK_VARIANTS
  "rms_norm|rms_norm.comp|"
  "rms_norm_rows|rms_norm.comp|-DROW_PER_INVOCATION"
  "l2_norm|rms_norm.comp|-DL2_NORM"
  "l2_norm_rows|rms_norm.comp|-DL2_NORM -DROW_PER_INVOCATION"
  "soft_max|soft_max.comp|"
  "soft_max_rows|soft_max.comp|-DROW_PER_INVOCATION"
  "rope_f32|rope.comp|"
  "rope_f64|rope.comp|-DROPE_F64"
  "argsort|argsort.comp|"
  "sum_rows_f32|sum_rows.comp|"
  "sum_rows_f64|sum_rows.comp|-DSUM_F64"
  "add_id|add_id.comp|"
  "concat|concat.comp|"
  "set_rows|set_rows.comp|"
  "ssm_conv|ssm_conv.comp|"
  "gated_delta_net|gated_delta_net.comp|"
)
# The element-wise ops: one variant per OP_<NAME> that elementwise.comp
# defines, named as the op's ggml name in lower case ("silu"), which is what
# vk_elementwise.cpp dispatches; a new op is a section of the shader.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${QLENS_VK_SHADER_DIR}/elementwise.comp)
file(STRINGS ${QLENS_VK_SHADER_DIR}/elementwise.comp QLENS_VK_ELEMENTWISE_LINES REGEX "defined\\(OP_[A-Z0-9_]+\\)")
foreach(line ${QLENS_VK_ELEMENTWISE_LINES})
  string(REGEX MATCH "OP_([A-Z0-9_]+)" _ "${line}")
  string(TOLOWER "${CMAKE_MATCH_1}" name)
  list(APPEND QLENS_VK_VARIANTS "${name}|elementwise.comp|-DOP_${CMAKE_MATCH_1}")
endforeach()
foreach(src F32 F16 BF16)
  foreach(dst F32 F16 BF16)
    string(TOLOWER "copy_${src}_${dst}" name)
    list(APPEND QLENS_VK_VARIANTS "${name}|copy.comp|-DSRC_${src} -DDST_${dst}")
  endforeach()
endforeach()
# The weight types of mul_mat, mul_mat_id and get_rows: the types with a
# vulkan column in src/core/types.tsv (src/core/types.cmake reads it), each
# one section of shaders/weight_types.glsl, which checks its block size,
# bytes and SUB_SIZE against the list's (LIST_*). The host reads the same list
# from the generated backend/vulkan/vk_weight_types.h.
set(QLENS_VK_WEIGHT_ROWS "")
foreach(type sub IN ZIP_LISTS QLENS_VULKAN_WEIGHT_TYPES QLENS_VULKAN_SUB_SIZES)
  list(FIND QLENS_TYPE_NAMES ${type} i)
  list(GET QLENS_TYPE_BLOCKS ${i} block)
  list(GET QLENS_TYPE_BYTES ${i} bytes)
  string(APPEND QLENS_VK_WEIGHT_ROWS "    {DType::${type}, ${sub}},\n")
  string(TOLOWER ${type} t)
  set(defines "-DTYPE_${type} -DLIST_BLOCK_SIZE=${block}u -DLIST_BLOCK_BYTES=${bytes}u -DLIST_SUB_SIZE=${sub}u")
  list(APPEND QLENS_VK_VARIANTS
    "get_rows_${t}|get_rows.comp|${defines}"
    "mul_mat_vec_${t}|mul_mat_vec.comp|${defines}"
    "mul_mat_${t}|mul_mat.comp|${defines}"
    "mul_mat_direct_${t}|mul_mat.comp|${defines} -DDIRECT"
    "mul_mat_id_vec_${t}|mul_mat_vec.comp|${defines} -DMUL_MAT_ID"
    "mul_mat_id_${t}|mul_mat.comp|${defines} -DMUL_MAT_ID"
    "mul_mat_id_direct_${t}|mul_mat.comp|${defines} -DDIRECT -DMUL_MAT_ID")
endforeach()
file(CONFIGURE OUTPUT ${QLENS_GENERATED_DIR}/backend/vulkan/vk_weight_types.h
  CONTENT "// The weight types the Vulkan shaders are built for, with their SUB_SIZE.
// Written by src/backend/vulkan/vulkan.cmake from src/core/types.tsv's vulkan
// column: edit the list, not this file.
#pragma once

#include <cstdint>

#include \"qlens/types.h\"

namespace qlens::vulkan {

struct WeightType {
  DType type;
  uint32_t sub_size;  // elements one dequantize_sub call produces (shaders/weight_types.glsl)
};

inline constexpr WeightType kWeightTypes[] = {
${QLENS_VK_WEIGHT_ROWS}};

}  // namespace qlens::vulkan
")
foreach(tap column_sum_sq stats error_stats)
  list(APPEND QLENS_VK_VARIANTS
    "tap_${tap}_f32|tap_${tap}.comp|"
    "tap_${tap}_f64|tap_${tap}.comp|-DACC_F64")
endforeach()
list(APPEND QLENS_VK_VARIANTS
  "tap_error_stats_rows_f32|tap_error_stats.comp|-DROW_PER_INVOCATION"
  "tap_error_stats_rows_f64|tap_error_stats.comp|-DACC_F64 -DROW_PER_INVOCATION"
  "tap_stats_segments_f32|tap_stats.comp|-DSEGMENTS"
  "tap_stats_segments_f64|tap_stats.comp|-DACC_F64 -DSEGMENTS"
  "tap_column_sum_sq_cpu_f32|tap_column_sum_sq.comp|-DCPU_DEVICE"
  "tap_column_sum_sq_cpu_f64|tap_column_sum_sq.comp|-DACC_F64 -DCPU_DEVICE"
  "tap_column_sum_sq_experts_f32|tap_column_sum_sq.comp|-DEXPERTS"
  "tap_column_sum_sq_experts_f64|tap_column_sum_sq.comp|-DACC_F64 -DEXPERTS")

# The i-quants' lattice points (the compact lists of src/quant/iq_grids_data.h,
# the one copy of that data): the backend uploads them, concatenated, into one
# buffer that every weight shader takes as its last binding (a constant array
# in the shader would do on GPUs, but lavapipe turns each lookup into a ladder
# of branches that LLVM takes minutes to compile). Written here: the list of
# arrays for the host (vk_lattice.h) and each one's offset for the shaders
# (iq_grids.glsl), from the same loop so that they agree.
set(QLENS_IQ_GRIDS_DATA ${CMAKE_SOURCE_DIR}/src/quant/iq_grids_data.h)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${QLENS_IQ_GRIDS_DATA})
file(READ ${QLENS_IQ_GRIDS_DATA} grids_text)
string(REGEX MATCHALL "k[A-Za-z0-9]+Points\\[[0-9]+\\]" grid_arrays "${grids_text}")
set(grids_glsl "// Generated by src/backend/vulkan/vulkan.cmake: where each of src/quant/iq_grids_data.h's\n// point lists starts in the lattice buffer (uint16 elements).\n")
set(grids_cpp "")
set(grid_offset 0)
foreach(array IN LISTS grid_arrays)
  string(REGEX MATCH "^k([A-Za-z0-9]+)Points\\[([0-9]+)\\]" _ "${array}")
  string(TOUPPER "${CMAKE_MATCH_1}" grid)
  string(APPEND grids_glsl "const uint ${grid}_POINTS = ${grid_offset}u;\n")
  string(APPEND grids_cpp "    quant::iq::k${CMAKE_MATCH_1}Points,\n")
  math(EXPR grid_offset "${grid_offset} + ${CMAKE_MATCH_2}")
endforeach()
list(LENGTH grid_arrays n_grids)
if(NOT n_grids EQUAL 6)
  message(FATAL_ERROR "${QLENS_IQ_GRIDS_DATA}: expected 6 point lists, found ${n_grids}")
endif()
file(CONFIGURE OUTPUT ${QLENS_VK_OUT}/iq_grids.glsl CONTENT "${grids_glsl}")
file(CONFIGURE OUTPUT ${QLENS_GENERATED_DIR}/backend/vulkan/vk_lattice.h
  CONTENT "// The i-quants' point lists in the lattice buffer's order (iq_grids.glsl
// holds their offsets). Written by src/backend/vulkan/vulkan.cmake.
#pragma once

#include <cstdint>
#include <span>

#include \"quant/iq_grids_data.h\"

namespace qlens::vulkan {

inline constexpr std::span<const uint16_t> kLatticeLists[] = {
${grids_cpp}};

}  // namespace qlens::vulkan
")

file(GLOB QLENS_VK_SHADER_SOURCES CONFIGURE_DEPENDS ${QLENS_VK_SHADER_DIR}/*.comp ${QLENS_VK_SHADER_DIR}/*.glsl)
set(QLENS_VK_SPV)
set(QLENS_VK_NAMES)
foreach(variant ${QLENS_VK_VARIANTS})
  string(REPLACE "|" ";" parts "${variant}")
  list(GET parts 0 name)
  list(GET parts 1 source)
  list(LENGTH parts n)
  set(defines)
  if(n GREATER 2)
    list(GET parts 2 define_string)
    separate_arguments(defines UNIX_COMMAND "${define_string}")
  endif()
  set(spv ${QLENS_VK_OUT}/${name}.spv)
  add_custom_command(
    OUTPUT ${spv}
    COMMAND ${QLENS_GLSLC} --target-env=vulkan1.2 -O -Werror ${defines} -I ${QLENS_VK_SHADER_DIR} -I ${QLENS_VK_OUT}
            -o ${spv} ${QLENS_VK_SHADER_DIR}/${source}
    DEPENDS ${QLENS_VK_SHADER_SOURCES} ${QLENS_VK_OUT}/iq_grids.glsl
    COMMENT "glslc ${name}"
    VERBATIM)
  list(APPEND QLENS_VK_SPV ${spv})
  list(APPEND QLENS_VK_NAMES ${name})
endforeach()

set(QLENS_VK_EMBEDDED ${QLENS_VK_OUT}/vk_shaders_embedded.cpp)
add_custom_command(
  OUTPUT ${QLENS_VK_EMBEDDED}
  COMMAND ${CMAKE_COMMAND} -DSPV_DIR=${QLENS_VK_OUT} "-DNAMES=${QLENS_VK_NAMES}" -DOUTPUT=${QLENS_VK_EMBEDDED}
          -P ${QLENS_VK_DIR}/embed_spirv.cmake
  DEPENDS ${QLENS_VK_SPV} ${QLENS_VK_DIR}/embed_spirv.cmake
  COMMENT "Embedding the SPIR-V shaders"
  VERBATIM)

target_sources(qlens_lib PRIVATE ${QLENS_VK_EMBEDDED})
target_compile_definitions(qlens_lib PUBLIC QLENS_VULKAN)
target_link_libraries(qlens_lib PUBLIC Vulkan::Vulkan)
