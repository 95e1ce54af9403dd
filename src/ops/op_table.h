// The op table: each operation defined once, in one row. A row gives the
// op's name as ggml dumps it, whether it is a view (no computation), the
// rules its result, sources and parameters follow, and its reference
// kernel, the plain definition every backend's kernel is tested against.
//
// Backends keep a kernel table of their own with one row per op, in the
// same order (a missing row does not compile): a kernel, or a decline that
// the backend's supports_op answers with. See docs/ARCHITECTURE.md,
// "Adding an op".
#pragma once

#include <array>
#include <cmath>
#include <string>

#include "qlens/tensor.h"

namespace qlens {

struct OpDef {
  Op op;
  const char* name;  // "MUL_MAT", as in ggml's node dumps
  bool is_view;      // shares its source's memory; nothing to compute
  // Why the node breaks the op's rules (its result's and sources' types and
  // shapes, its parameters); empty when it keeps them. What a kernel cannot
  // take beyond that is the backend's to say.
  std::string (*invalid)(const Tensor& node);
  // The reference backend's kernel: the op's semantics, one thread, element
  // by element, sums and transcendental functions in double. Null for views
  // and leaves.
  void (*reference)(const Tensor& node);
};

const OpDef& op_def(Op op);

// A Rope node's YaRN parameters (params 4..7) as the kernels use them: the
// blend's strength and its correction dims, and the factor on cos and sin
// (ggml's mscale: attn_factor, times 1 + 0.1 ln(1 / freq_scale) in float
// while the blend is on).
struct RopeYarnParams {
  float ext_factor, low, high, mscale;
};
inline RopeYarnParams rope_yarn_params(const Tensor& rope) {
  RopeYarnParams p{rope.param_f(4), rope.param_f(6), rope.param_f(7), rope.param_f(5)};
  if (p.ext_factor != 0.0f) p.mscale *= 1.0f + 0.1f * std::log(1.0f / rope.param_f(3));
  return p;
}

// A Rope node's mode (params[1]), and whether it is a multi-section one
// (rope_multi: four positions per token, NeoX pairs).
inline RopeMode rope_mode(const Tensor& rope) { return static_cast<RopeMode>(rope.params[1]); }
inline bool rope_is_multi(RopeMode mode) { return mode == RopeMode::MRope || mode == RopeMode::IMRope; }
inline bool rope_neox_pairs(RopeMode mode) { return mode != RopeMode::Normal; }  // pairs (i, i + n_dims / 2)
// A multi-section Rope node's sections (params 8..11).
inline RopeSections rope_sections(const Tensor& rope) {
  return {rope.params[8], rope.params[9], rope.params[10], rope.params[11]};
}
// Which of its token's four positions (0 time, 1 height, 2 width, 3 extra)
// turns pair `pair` of a multi-section rope, as ggml's rope_multi assigns
// them: sections repeat every s0 + s1 + s2 + s3 pairs; MRope gives each
// section a run of pairs in order, IMRope deals time, height, width in turn
// to pairs 0, 1, 2, 3, ... of a period while its own section lasts (3 s
// pairs), and the extra position the pairs no section claims. 0 for the
// other modes (one position per token).
inline int rope_position_of(RopeMode mode, const RopeSections& s, int64_t pair) {
  if (!rope_is_multi(mode)) return 0;
  const int64_t sector = pair % (static_cast<int64_t>(s[0]) + s[1] + s[2] + s[3]);
  if (mode == RopeMode::IMRope) {
    const int lane = static_cast<int>(sector % 3);  // 0 time, 1 height, 2 width
    return sector < 3 * static_cast<int64_t>(s[lane]) ? lane : 3;
  }
  if (sector < s[0]) return 0;
  if (sector < s[0] + s[1]) return 1;
  if (sector < s[0] + s[1] + s[2]) return 2;
  return 3;
}

// A backend's kernel table must have one row per op in the enum's order,
// each row naming its op: checked at compile time by
// static_assert(rows_follow_ops(table)).
template <class Row, size_t N>
constexpr bool rows_follow_ops(const std::array<Row, N>& rows) {
  if (N != static_cast<size_t>(kOpCount)) return false;
  for (size_t i = 0; i < N; ++i)
    if (static_cast<size_t>(rows[i].op) != i) return false;
  return true;
}

}  // namespace qlens
