// Taps on the device (see vk_taps.h and shaders/tap_*.comp).
#include "backend/vulkan/vk_taps.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/vulkan/vk_backend.h"
#include "backend/vulkan/vk_ops.h"
#include "qlens/error.h"

namespace qlens::vulkan {

namespace {

constexpr uint32_t kTapSlots = 64;    // TAP_SLOTS of shaders/tap_common.glsl: workgroups of Stats/ErrorStats
// local_size_x of shaders/tap_column_sum_sq.comp, and UNITS of its _cpu variant
constexpr uint64_t kColumnGroup = 64, kColumnGroupCpu = 8, kColumnUnitsCpu = 4;
constexpr uint32_t kStatsAcc = 4, kStatsCounts = 4;  // per slot: min, max, sum, sum_sq; count, nan, inf, (pad)
constexpr uint32_t kErrorAcc = 5, kErrorCounts = 2;  // per slot: diff^2, a^2, b^2, ab, max|diff|; count, non-finite
// ErrorStats: after the slots' counts, the row_nmse histogram (LOG_BUCKETS of
// shaders/tap_common.glsl).
constexpr uint32_t kErrorHistogram = kTapSlots * kErrorCounts;
constexpr uint32_t kTapWorkgroup = 256;  // TAP_WG of shaders/tap_common.glsl
// Stats on CPU devices: segments of rows, at least this many (when the rows
// can be cut so) of at least kStatsMinSegment elements (or a whole row).
constexpr uint64_t kStatsSegments = 4 * kTapSlots, kStatsMinSegment = 64;

struct ColumnPush {
  uint32_t ne[4];
  uint32_t nb[4];
  uint32_t x_off;
  uint32_t pairs;                     // the _cpu variant
  uint32_t ids_off, ids_nb0, ids_nb1;  // the _experts variant
  uint32_t n_used, n_expert;
};
struct StatsPush {
  uint32_t ne[4];
  uint32_t nb[4];
  uint32_t x_off, n;
  uint32_t seg_len, segs_per_row, segs, pairs;  // the _segments variant
};
struct ErrorPush {
  uint32_t ne[4];
  uint32_t a_nb[4];
  uint32_t b_nb[4];
  uint32_t a_off, b_off, rows, row_shift;
};

void copy4(uint32_t (&dst)[4], const std::array<uint32_t, 4>& src) {
  for (int i = 0; i < 4; ++i) dst[i] = src[i];
}

// The same elements in as few dims as they go, for reductions that do not
// care about the order: dims of one element dropped, the others by stride
// (smallest first), and dim i+1 merged into dim i where it continues it
// (nb[i+1] = ne[i] nb[i]). A contiguous tensor, permuted or not, becomes one
// row.
void merge_dims(uint32_t (&ne)[4], uint32_t (&nb)[4]) {
  uint32_t dim_ne[4], dim_nb[4];
  int n = 0;
  for (int i = 0; i < 4; ++i) {
    if (ne[i] == 1) continue;
    int at = n++;  // insertion by stride
    for (; at > 0 && dim_nb[at - 1] > nb[i]; --at) dim_ne[at] = dim_ne[at - 1], dim_nb[at] = dim_nb[at - 1];
    dim_ne[at] = ne[i];
    dim_nb[at] = nb[i];
  }
  uint32_t out_ne[4] = {1, 1, 1, 1}, out_nb[4] = {0, 0, 0, 0};
  int d = -1;
  for (int i = 0; i < n; ++i) {
    if (d >= 0 && static_cast<uint64_t>(dim_nb[i]) == static_cast<uint64_t>(out_ne[d]) * out_nb[d]) {
      out_ne[d] *= dim_ne[i];
    } else {
      ++d;
      out_ne[d] = dim_ne[i];
      out_nb[d] = dim_nb[i];
    }
  }
  for (int i = 0; i < 4; ++i) ne[i] = out_ne[i], nb[i] = out_nb[i];
}

// The shader variant of a tap kind: the CPU-device variant or the GPU one,
// accumulating in double or float; ColumnSumSq on a MulMatId node
// (`experts`) has one variant for all devices.
std::string tap_shader(TapKind kind, bool is_cpu, bool f64, bool experts = false) {
  std::string name = kind == TapKind::ColumnSumSq ? (experts  ? "tap_column_sum_sq_experts"
                                                     : is_cpu ? "tap_column_sum_sq_cpu"
                                                              : "tap_column_sum_sq")
                     : kind == TapKind::Stats     ? (is_cpu ? "tap_stats_segments" : "tap_stats")
                                                  : (is_cpu ? "tap_error_stats_rows" : "tap_error_stats");
  return name + (f64 ? "_f64" : "_f32");
}

uint32_t tap_buffers(TapKind kind, bool experts = false) {
  return kind == TapKind::ColumnSumSq ? (experts ? 4 : 2) : kind == TapKind::Stats ? 3 : 4;
}

class VulkanTapState final : public TapState {
 public:
  VulkanTapState(VulkanBackend& backend, TapKind k, int64_t n_columns)
      : backend_(backend), kind(k), columns(n_columns), f64(backend.device().has_float64()) {
    const size_t acc_values = kind == TapKind::ColumnSumSq ? static_cast<size_t>(n_columns)
                              : kind == TapKind::Stats     ? kTapSlots * kStatsAcc
                                                           : kTapSlots * kErrorAcc;
    // ColumnSumSq: the rows of each expert on a MulMatId (n_columns = K
    // times the experts: never fewer than they).
    const size_t count_values = kind == TapKind::Stats        ? kTapSlots * kStatsCounts
                                : kind == TapKind::ErrorStats ? kErrorHistogram + LogHistogram::kBuckets
                                                              : std::max<size_t>(static_cast<size_t>(n_columns), 1);
    acc = backend.device().create_buffer(acc_values * acc_bytes(), false, std::string(tap_kind_name(kind)) + " tap");
    counts = backend.device().create_buffer(count_values * 4, false, std::string(tap_kind_name(kind)) + " tap");
    clear();
  }
  ~VulkanTapState() override {
    backend_.synchronize_quietly();
    backend_.device().destroy_buffer(acc);
    backend_.device().destroy_buffer(counts);
  }

  size_t acc_bytes() const { return f64 ? 8 : 4; }
  size_t acc_values() const { return acc.size / acc_bytes(); }

  // The accumulators as doubles, whatever the device accumulates in.
  std::vector<double> read_acc() {
    std::vector<char> raw(acc_values() * acc_bytes());
    backend_.download(acc, 0, raw.data(), raw.size());
    std::vector<double> out(acc_values());
    for (size_t i = 0; i < out.size(); ++i) {
      if (f64) {
        std::memcpy(&out[i], raw.data() + 8 * i, 8);
      } else {
        float f;
        std::memcpy(&f, raw.data() + 4 * i, 4);
        out[i] = f;
      }
    }
    return out;
  }
  std::vector<uint32_t> read_counts() {
    std::vector<uint32_t> out(counts.size / 4);
    backend_.download(counts, 0, out.data(), out.size() * 4);
    return out;
  }

  // Zeros, with min = +Inf and max = -Inf for Stats.
  void clear() {
    std::vector<double> init(acc_values(), 0.0);
    if (kind == TapKind::Stats)
      for (uint32_t s = 0; s < kTapSlots; ++s) {
        init[s * kStatsAcc] = std::numeric_limits<double>::infinity();
        init[s * kStatsAcc + 1] = -std::numeric_limits<double>::infinity();
      }
    std::vector<char> raw(init.size() * acc_bytes());
    for (size_t i = 0; i < init.size(); ++i) {
      if (f64) {
        std::memcpy(raw.data() + 8 * i, &init[i], 8);
      } else {
        const float f = static_cast<float>(init[i]);
        std::memcpy(raw.data() + 4 * i, &f, 4);
      }
    }
    backend_.upload(acc, 0, raw.data(), raw.size());
    const std::vector<uint32_t> zeros(counts.size / 4, 0);
    backend_.upload(counts, 0, zeros.data(), counts.size);
    rows = 0;
  }

  VulkanBackend& backend_;
  TapKind kind;
  int64_t columns;
  bool f64;
  DeviceBuffer acc, counts;
  int64_t rows = 0;  // ColumnSumSq: known when recording
  // ColumnSumSq: the experts of the nodes it was recorded on (0 on MulMat),
  // -1 before the first.
  int64_t experts = -1;
};

}  // namespace

std::vector<ShaderUse> tap_shaders(TapKind kind, bool is_cpu, bool has_float64) {
  std::vector<ShaderUse> out{{tap_shader(kind, is_cpu, has_float64), tap_buffers(kind)}};
  if (kind == TapKind::ColumnSumSq)
    out.push_back({tap_shader(kind, is_cpu, has_float64, true), tap_buffers(kind, true)});
  return out;
}

std::unique_ptr<TapState> make_tap_state(VulkanBackend& backend, TapKind kind, int64_t n_columns) {
  return std::make_unique<VulkanTapState>(backend, kind, n_columns);
}

void read_tap(VulkanBackend& backend, TapState& state, TapResult& into, bool reset) {
  auto* st = dynamic_cast<VulkanTapState*>(&state);
  if (!st) throw Error(backend.name() + ": read_tap on a state of another backend");
  backend.synchronize();
  TapResult mine;
  mine.kind = st->kind;
  const std::vector<double> acc = st->read_acc();
  if (st->kind == TapKind::ColumnSumSq) {
    mine.column_sum_sq = acc;
    mine.rows = st->rows;
    if (st->experts > 0) {
      const std::vector<uint32_t> counts = st->read_counts();
      mine.expert_rows.assign(counts.begin(), counts.begin() + st->experts);
    }
  } else {
    const std::vector<uint32_t> counts = st->read_counts();
    for (uint32_t s = 0; s < kTapSlots; ++s) {
      if (st->kind == TapKind::Stats) {
        NodeStats n;
        n.min = acc[s * kStatsAcc];
        n.max = acc[s * kStatsAcc + 1];
        n.sum = acc[s * kStatsAcc + 2];
        n.sum_sq = acc[s * kStatsAcc + 3];
        n.count = counts[s * kStatsCounts];
        n.nan = counts[s * kStatsCounts + 1];
        n.inf = counts[s * kStatsCounts + 2];
        mine.stats.merge(n);
      } else {
        ErrorStats e;
        e.sum_sq_diff = acc[s * kErrorAcc];
        e.sum_sq_a = acc[s * kErrorAcc + 1];
        e.sum_sq_b = acc[s * kErrorAcc + 2];
        e.sum_ab = acc[s * kErrorAcc + 3];
        e.max_abs_diff = acc[s * kErrorAcc + 4];
        e.count = counts[s * kErrorCounts];
        e.non_finite = counts[s * kErrorCounts + 1];
        mine.error.merge(e);
      }
    }
    if (st->kind == TapKind::ErrorStats) {
      // Left empty when no row was added, as on the host.
      LogHistogram& h = mine.error.row_nmse;
      for (int i = 0; i < LogHistogram::kBuckets; ++i)
        if (const uint32_t c = counts[kErrorHistogram + i]) {
          if (h.counts.empty()) h.counts.assign(LogHistogram::kBuckets, 0);
          h.counts[i] = c;
        }
    }
  }
  into.merge(mine);
  if (reset) st->clear();
}

namespace {

// Per expert on a MulMatId node: a thread per column and expert, over the
// (slot, token) pairs routed to it; its column 0 counts them.
void record_expert_column_sum_sq(Recorder& r, VulkanTapState& st, const Tensor& node, const auto& fail) {
  const Tensor& x = *node.src[1];
  const Tensor* ids = node.src[2];
  const int64_t experts = tap_experts(node);
  if (!ids || ids->type != DType::I32 || !indexable(*ids, 4)) fail("needs I32 expert ids");
  if (x.ne[0] * experts != st.columns)
    fail(std::to_string(experts) + " experts of " + std::to_string(x.ne[0]) + " columns, the tap has " +
         std::to_string(st.columns) + " columns");
  const Bound bx = r.bind(x, "activations"), bi = r.bind(*ids, "expert ids");
  ColumnPush p{};
  copy4(p.ne, shape_u32(x));
  copy4(p.nb, element_strides(x, 4));
  p.x_off = bx.offset_in(4, "'" + x.name + "'");
  const auto ids_nb = element_strides(*ids, 4);
  p.ids_off = bi.offset_in(4, "'" + ids->name + "'");
  p.ids_nb0 = ids_nb[0];
  p.ids_nb1 = ids_nb[1];
  p.n_used = static_cast<uint32_t>(ids->ne[0]);
  p.n_expert = static_cast<uint32_t>(experts);
  r.dispatch(tap_shader(TapKind::ColumnSumSq, r.is_cpu(), st.f64, true), {bx, r.bind(st.acc), bi, r.bind(st.counts)},
             p, ceil_div(static_cast<uint64_t>(st.columns), kColumnGroup));
  st.rows += ids->ne[0] * ids->ne[1];
}

void record_column_sum_sq(Recorder& r, VulkanTapState& st, const Tensor& node, const auto& fail) {
  const Tensor* x = node.src[1];
  if ((node.op != Op::MulMat && node.op != Op::MulMatId) || !x || x->type != DType::F32)
    fail("needs a MUL_MAT or MUL_MAT_ID with F32 activations");
  const int64_t experts = tap_experts(node);
  if (st.experts >= 0 && st.experts != experts)
    fail("the tap was recorded on " + std::to_string(st.experts) + " experts, the node has " + std::to_string(experts));
  st.experts = experts;
  if (node.op == Op::MulMatId) {
    record_expert_column_sum_sq(r, st, node, fail);
    return;
  }
  if (x->ne[0] != st.columns)
    fail(std::to_string(x->ne[0]) + " columns, the tap has " + std::to_string(st.columns));
  const Bound bx = r.bind(*x, "activations"), bacc = r.bind(st.acc);
  ColumnPush p{};
  copy4(p.ne, shape_u32(*x));
  copy4(p.nb, element_strides(*x, 4));
  p.x_off = bx.offset_in(4, "'" + x->name + "'");
  // On CPU devices the _cpu variant: workgroups of 8 invocations with
  // kColumnUnitsCpu units of columns each, a unit two columns where it
  // accumulates in double, dim 0 is contiguous and every row starts 8-byte
  // aligned (the window, x_off and the strides), else one.
  const bool cpu = r.is_cpu();
  p.pairs = cpu && st.f64 && p.nb[0] == 1 && p.x_off % 2 == 0 && bx.window.offset % 8 == 0;
  for (int i = 1; i < 4; ++i) p.pairs = p.pairs && (p.ne[i] == 1 || p.nb[i] % 2 == 0);
  const uint64_t columns = static_cast<uint64_t>(x->ne[0]);
  const uint64_t groups =
      cpu ? std::max<uint64_t>(ceil_div(p.pairs ? columns / 2 : columns, kColumnGroupCpu * kColumnUnitsCpu), 1)
          : ceil_div(columns, kColumnGroup);
  r.dispatch(tap_shader(TapKind::ColumnSumSq, cpu, st.f64), {bx, bacc}, p, groups);
  st.rows += x->nrows();
}

}  // namespace

void record_tap(Recorder& r, const TapWork& tap, const Tensor& node) {
  auto fail = [&](const std::string& what) {
    throw Error(r.device_name() + ": " + tap_kind_name(tap.kind) + " tap on '" + node.name + "': " + what);
  };
  auto* st = dynamic_cast<VulkanTapState*>(tap.state);
  if (!st) fail("the state is not this backend's");
  if (st->kind != tap.kind) fail("state of another kind");
  const std::string shader = tap_shader(tap.kind, r.is_cpu(), st->f64);
  switch (tap.kind) {
    case TapKind::ColumnSumSq: record_column_sum_sq(r, *st, node, fail); break;
    case TapKind::Stats: {
      if (node.type != DType::F32 || !indexable(node, 4)) fail("needs an F32 node");
      const Bound bx = r.bind(node, "node");
      StatsPush p{};
      copy4(p.ne, shape_u32(node));
      copy4(p.nb, element_strides(node, 4));
      p.x_off = bx.offset_in(4, "'" + node.name + "'");
      p.n = static_cast<uint32_t>(node.nelements());
      // On CPU devices the _segments variant: workgroups over segments of
      // rows, at least kStatsSegments of them where the rows can be cut so,
      // none shorter than kStatsMinSegment unless its row is; pairs of floats
      // read at once where the variant accumulates in double, dim 0 is
      // contiguous and the window 8-byte aligned.
      const bool cpu = r.is_cpu();
      if (cpu && p.n > 0) {
        merge_dims(p.ne, p.nb);
        const uint64_t rows = p.n / p.ne[0];
        const uint64_t per_row =
            std::clamp<uint64_t>(ceil_div(kStatsSegments, rows), 1, ceil_div(p.ne[0], kStatsMinSegment));
        p.seg_len = static_cast<uint32_t>(ceil_div(p.ne[0], per_row));
        p.segs_per_row = static_cast<uint32_t>(ceil_div(p.ne[0], p.seg_len));
        p.segs = static_cast<uint32_t>(rows * p.segs_per_row);  // at most n
        p.pairs = st->f64 && p.nb[0] == 1 && bx.window.offset % 8 == 0;
      }
      r.dispatch(shader, {bx, r.bind(st->acc), r.bind(st->counts)}, p, kTapSlots);
      break;
    }
    case TapKind::ErrorStats: {
      const Tensor* other = tap.other;
      if (node.type != DType::F32 || !other || other->type != DType::F32 || !same_shape(node, *other) ||
          !indexable(node, 4) || !indexable(*other, 4))
        fail("needs two F32 tensors of the same shape");
      const Bound ba = r.bind(node, "node"), bb = r.bind(*other, "second tensor");
      ErrorPush p{};
      copy4(p.ne, shape_u32(node));
      copy4(p.a_nb, element_strides(node, 4));
      copy4(p.b_nb, element_strides(*other, 4));
      p.a_off = ba.offset_in(4, "'" + node.name + "'");
      p.b_off = bb.offset_in(4, "'" + other->name + "'");
      const int64_t rows = node.nrows();
      if (rows > std::numeric_limits<uint32_t>::max() - static_cast<int64_t>(kTapSlots) * kTapWorkgroup)
        fail(std::to_string(rows) + " rows are too many");
      p.rows = static_cast<uint32_t>(rows);
      // Workgroups go over rows (one read of both tensors makes the sums and
      // the per-row histogram): as many invocations per row as the row has
      // elements, at most a workgroup; on CPU devices one (barriers are slow
      // there: the _rows variant).
      const bool cpu = r.is_cpu();
      if (!cpu)
        while ((1u << p.row_shift) < kTapWorkgroup && (int64_t{1} << p.row_shift) < node.ne[0]) ++p.row_shift;
      r.dispatch(shader, {ba, bb, r.bind(st->acc), r.bind(st->counts)}, p, kTapSlots);
      break;
    }
  }
}

}  // namespace qlens::vulkan
