// GatedDeltaNet (shaders/gated_delta_net.comp): the recurrent form, an
// invocation per value dimension of a head, holding that column of the
// state in shared memory through the tokens.
#include <cmath>

#include "backend/vulkan/vk_ops.h"

namespace qlens::vulkan {

namespace {

// shaders/gated_delta_net.comp's workgroup: 32 value dimensions (columns of
// the state) of one head, each of up to 128 keys in shared memory.
constexpr int64_t kColumnsPerGroup = 32;
constexpr int64_t kMaxHeadSize = 128;

struct DeltaNetPush {
  uint32_t q_at[4], k_at[4], v_at[4], g_at[4], b_at[4], s_at[4];  // offset, strides of dims 1-3
  uint32_t d_off, S, H, T;
  uint32_t H_k, seqs, per_key_gate;
  float scale;
};

bool adjacent_f32(const Tensor* t) { return t && t->type == DType::F32 && indexable(*t, 4) && t->nb[0] == 4; }

}  // namespace

bool supports_gated_delta_net(const Tensor& node) {
  for (int i = 0; i < 6; ++i)
    if (!node.src[i] || node.src[i]->type != DType::F32 || !indexable(*node.src[i], 4)) return false;
  const Tensor* gate = node.src[3];
  return node.type == DType::F32 && indexable(node, 4) && node.src[2]->ne[0] <= kMaxHeadSize &&
         adjacent_f32(node.src[0]) && adjacent_f32(node.src[1]) && adjacent_f32(node.src[2]) &&
         adjacent_f32(node.src[5]) && (gate->ne[0] == 1 || adjacent_f32(gate));
}

std::vector<ShaderUse> gated_delta_net_shaders(const Tensor&, bool, bool) { return {{"gated_delta_net", 7}}; }

void record_gated_delta_net(Recorder& r, const Tensor& node) {
  const Tensor& v = *node.src[2];
  const char* roles[6] = {"queries", "keys", "values", "gate", "beta", "state"};
  DeltaNetPush p{};
  uint32_t* ats[6] = {p.q_at, p.k_at, p.v_at, p.g_at, p.b_at, p.s_at};
  Bound bound[6];
  for (int i = 0; i < 6; ++i) {  // each source's window, offset and strides of dims 1-3
    const Tensor& t = *node.src[i];
    bound[i] = r.bind(t, roles[i]);
    const std::array<uint32_t, 4> nb = element_strides(t, 4);
    ats[i][0] = bound[i].offset_in(4, "'" + t.name + "'");
    for (int d = 1; d < 4; ++d) ats[i][d] = nb[d];
  }
  const Bound bd = r.bind(node, "result");
  p.d_off = bd.offset_in(4, "'" + node.name + "'");
  p.S = static_cast<uint32_t>(v.ne[0]);
  p.H = static_cast<uint32_t>(v.ne[1]);
  p.T = static_cast<uint32_t>(v.ne[2]);
  p.seqs = static_cast<uint32_t>(v.ne[3]);
  p.H_k = static_cast<uint32_t>(node.src[0]->ne[1]);
  p.per_key_gate = node.src[3]->ne[0] > 1 ? 1 : 0;
  p.scale = 1.0f / std::sqrt(static_cast<float>(v.ne[0]));
  const auto groups = static_cast<uint64_t>((v.ne[0] + kColumnsPerGroup - 1) / kColumnsPerGroup * v.ne[1] * v.ne[3]);
  r.dispatch("gated_delta_net", {bound[0], bound[1], bound[2], bound[3], bound[4], bound[5], bd}, p, groups);
}

}  // namespace qlens::vulkan
