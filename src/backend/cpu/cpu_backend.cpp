// The CPU backend: runs a graph's nodes in order on a pool of threads. All
// threads take part in every node (each computes its share) and meet at a
// barrier before the next one; view nodes need no work and no barrier.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/taps.h"
#include "backend/cpu/thread_pool.h"
#include "backend/host_buffer.h"
#include "qlens/error.h"

namespace qlens {

namespace cpu {

namespace {

[[noreturn]] void fail(const Tensor& node, const std::string& what) {
  throw Error(std::string("cpu backend: ") + op_name(node.op) + " '" + node.name + "' " + shape_string(node) + ": " +
              what);
}

// Checks the types and shapes the kernels rely on, so that they never need
// to fail. Throws Error naming the node and the reason.
void check_op(const Tensor& n) {
  if (op_is_view(n.op)) return;
  const Tensor* a = n.src[0];
  const Tensor* b = n.src[1];
  const DType result_type = n.op == Op::ArgSort ? DType::I32 : DType::F32;
  if (n.op != Op::Cpy && n.op != Op::Cont && (n.type != result_type || n.nb[0] != sizeof(float)))
    fail(n, std::string("result must be ") + type_name(result_type).data() + " with adjacent elements");
  auto need_f32 = [&](const Tensor* t) {
    if (!t || t->type != DType::F32) fail(n, "source must be F32");
  };
  switch (n.op) {
    case Op::GetRows: {
      const TypeTraits& tt = type_traits(a->type);
      if (!tt.to_float) fail(n, "cannot read rows of type " + std::string(tt.name));
      if (tt.block_size > 1 && a->nb[0] != tt.block_bytes) fail(n, "rows of a quantized source must be contiguous");
      if (b->type != DType::I32) fail(n, "indices must be I32");
      break;
    }
    case Op::MulMat: {
      const TypeTraits& tt = type_traits(a->type);
      if (!tt.to_float) fail(n, "cannot read weights of type " + std::string(tt.name));
      if (tt.block_size > 1 && a->nb[0] != tt.block_bytes) fail(n, "rows of quantized weights must be contiguous");
      if (!type_traits(tt.vec_dot_type).from_float && tt.vec_dot_type != DType::F32)
        fail(n, "cannot convert activations to " + std::string(type_name(tt.vec_dot_type)));
      need_f32(b);
      if (a->ne[0] != b->ne[0] || b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0) fail(n, "shapes do not match");
      break;
    }
    case Op::MulMatId: {
      const TypeTraits& tt = type_traits(a->type);
      const Tensor* ids = n.src[2];
      if (!tt.to_float) fail(n, "cannot read weights of type " + std::string(tt.name));
      if (tt.block_size > 1 && a->nb[0] != tt.block_bytes) fail(n, "rows of quantized weights must be contiguous");
      need_f32(b);
      if (!ids || ids->type != DType::I32) fail(n, "expert ids must be I32");
      if (a->ne[0] != b->ne[0] || b->ne[2] != ids->ne[1] || (b->ne[1] != 1 && b->ne[1] != ids->ne[0]) ||
          n.ne[0] != a->ne[1] || n.ne[1] != ids->ne[0] || n.ne[2] != ids->ne[1])
        fail(n, "shapes do not match");
      break;
    }
    case Op::Add:
    case Op::Mul:
    case Op::Div:
      need_f32(a);
      need_f32(b);
      for (int i = 0; i < kMaxDims; ++i)
        if (b->ne[i] == 0 || a->ne[i] % b->ne[i] != 0) fail(n, "cannot broadcast b");
      break;
    case Op::Scale:
    case Op::RmsNorm:
    case Op::Silu:
    case Op::Gelu:
    case Op::Clamp:
    case Op::SumRows:
    case Op::ArgSort:
      need_f32(a);
      break;
    case Op::Rope:
      need_f32(a);
      if (b->type != DType::I32 || b->ne[0] != a->ne[2]) fail(n, "positions must be I32, one per token");
      if (n.params[0] <= 0 || n.params[0] % 2 != 0 || n.params[0] > a->ne[0]) fail(n, "bad rotated dims");
      if (n.params[1] != static_cast<int32_t>(RopeMode::Normal) && n.params[1] != static_cast<int32_t>(RopeMode::NeoX))
        fail(n, "unknown rope mode " + std::to_string(n.params[1]));
      if (n.src[2] && (n.src[2]->type != DType::F32 || n.src[2]->nb[0] != sizeof(float) ||
                       n.src[2]->ne[0] < n.params[0] / 2))
        fail(n, "frequency factors must be a contiguous F32 vector of n_dims / 2 entries");
      break;
    case Op::SoftMax:
      need_f32(a);
      if (b && (b->type != DType::F32 || b->ne[0] != a->ne[0] || b->ne[1] < a->ne[1]))
        fail(n, "mask does not cover the input");
      break;
    case Op::Cpy:
    case Op::Cont: {
      const Tensor& d = n.op == Op::Cpy ? *b : n;
      if (!is_float_type(a->type) || !is_float_type(d.type)) fail(n, "copies F32, F16 and BF16 only");
      if (a->nelements() != d.nelements()) fail(n, "element counts differ");
      break;
    }
    default:
      fail(n, "unsupported operation");
  }
}

// Checks a node about to run: its op, and the data it reads.
void check_node(const Tensor& n) {
  if (!n.data) fail(n, "has no data (apply a memory plan first)");
  for (const Tensor* s : n.src)
    if (s && !s->data) fail(n, "source '" + s->name + "' has no data");
  for (const Tensor* s : {&n, static_cast<const Tensor*>(n.src[0]), static_cast<const Tensor*>(n.src[1]),
                          static_cast<const Tensor*>(n.src[2])})
    if (s && s->buffer && !s->buffer->is_host()) fail(n, "'" + s->name + "' lies in device memory");
  check_op(n);
  // Indices are data: those of an input are checked here, before any node
  // runs; an argsort's (the router's) lie below its row length.
  auto check_indices = [&](const Tensor& idx, int64_t limit, const char* what) {
    const Tensor& owner = idx.view_src ? *idx.view_src : idx;
    if (owner.op == Op::ArgSort) {
      if (owner.ne[0] > limit)
        fail(n, std::string(what) + "s come from an argsort of " + std::to_string(owner.ne[0]) +
                    " columns, more than " + std::to_string(limit));
      return;
    }
    if (owner.op != Op::None) fail(n, std::string(what) + "s must be an input or come from an argsort");
    for (int64_t j = 0; j < idx.ne[1]; ++j)
      for (int64_t i = 0; i < idx.ne[0]; ++i) {
        const int32_t r = *reinterpret_cast<const int32_t*>(idx.at(i, j));
        if (r < 0 || r >= limit)
          fail(n, std::string(what) + " " + std::to_string(r) + " out of range for " + std::to_string(limit));
      }
  };
  if (n.op == Op::GetRows) check_indices(*n.src[1], n.src[0]->ne[1], "index");
  if (n.op == Op::MulMatId) check_indices(*n.src[2], n.src[0]->ne[2], "expert id");
}

bool op_supported(const Tensor& n) {
  try {
    check_op(n);
    return true;
  } catch (const Error&) {
    return false;
  }
}

void run_node(const Tensor& n, const KernelCtx& c) {
  switch (n.op) {
    case Op::GetRows: op_get_rows(n, c); break;
    case Op::MulMat: matmul(n, c); break;
    case Op::MulMatId: matmul_id(n, c); break;
    case Op::Add: op_add(n, c); break;
    case Op::Mul: op_mul(n, c); break;
    case Op::Div: op_div(n, c); break;
    case Op::Clamp: op_clamp(n, c); break;
    case Op::SumRows: op_sum_rows(n, c); break;
    case Op::ArgSort: op_argsort(n, c); break;
    case Op::Scale: op_scale(n, c); break;
    case Op::RmsNorm: op_rms_norm(n, c); break;
    case Op::Rope: op_rope(n, c); break;
    case Op::SoftMax: op_soft_max(n, c); break;
    case Op::Silu: op_silu(n, c); break;
    case Op::Gelu: op_gelu(n, c); break;
    case Op::Cpy:
    case Op::Cont: op_cpy(n, c); break;
    default: break;  // views: nothing to do
  }
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int n_threads, Isa isa) : pool_(n_threads), isa_(isa), vec_(&vec_ops(isa)) {}

  std::string name() const override { return std::string("cpu-") + isa_name(isa_); }
  int n_threads() const override { return pool_.size(); }

  std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override { return make_host_buffer(*this, bytes); }
  bool uses_host_memory() const override { return true; }
  bool supports_op(const Tensor& node) const override { return op_supported(node); }

  std::unique_ptr<TapState> make_tap_state(TapKind kind, int64_t n_columns) override {
    return std::make_unique<CpuTapState>(kind, n_columns, pool_.size());
  }
  void read_tap(TapState& state, TapResult& into, bool reset) override {
    static_cast<CpuTapState&>(state).read(into, reset);
  }

  // Runs synchronously: the pool is the CPU, there is nothing to overlap with.
  void compute_async(std::span<Tensor* const> nodes, std::span<const TapWork> taps) override {
    const int nth = pool_.size();
    // Work items in order: each computing node, each tap right after its node.
    struct Item {
      const Tensor* node;
      const TapWork* tap;  // null: compute the node
    };
    std::vector<Item> work;
    size_t per_thread = 0, shared = 0;
    size_t next_tap = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Tensor* n = nodes[i];
      if (!op_is_view(n->op)) {
        check_node(*n);
        work.push_back({n, nullptr});
        per_thread = std::max(per_thread, align_scratch(scratch_bytes(*n, nth, isa_)));
        shared = std::max(shared, align_scratch(shared_scratch_bytes(*n, nth, isa_)));
      }
      for (; next_tap < taps.size() && taps[next_tap].node_index == i; ++next_tap) {
        check_tap(taps[next_tap], *n);
        work.push_back({n, &taps[next_tap]});
      }
    }
    if (next_tap != taps.size()) throw Error("cpu backend: taps must be sorted by node and name nodes of the call");
    if (work.empty()) return;
    const size_t need = per_thread * nth + shared + kScratchAlign;
    if (scratch_.size() < need) {
      scratch_.clear();
      scratch_.shrink_to_fit();
      scratch_.resize(need);
    }
    char* base = scratch_.data();
    base += round_up<uintptr_t>(reinterpret_cast<uintptr_t>(base), kScratchAlign) - reinterpret_cast<uintptr_t>(base);
    char* shared_base = base + per_thread * nth;

    // Node k takes work from counters_[k % 2]; thread 0 resets the other
    // counter while node k runs (its last user, node k - 1, is finished), and
    // the barrier before node k + 1 publishes the reset. Taps split their work
    // statically and use no counter.
    counters_[0].store(0, std::memory_order_relaxed);
    counters_[1].store(0, std::memory_order_relaxed);
    pool_.run([&](int ith) {
      KernelCtx c{ith, nth, base + ith * per_thread, shared_base, nullptr, &pool_, vec_, isa_};
      size_t node_no = 0;
      for (size_t i = 0; i < work.size(); ++i) {
        const TapWork* tap = work[i].tap;
        // A column-sum tap reads the mul_mat's activations, complete before
        // the mul_mat started and alive until it ends: threads go on to it
        // without waiting for the others (no barrier, almost no cost).
        // Further taps of the same node go on as well: they only read.
        const bool follows_own_tap = tap && work[i - (i > 0)].tap && work[i - (i > 0)].node == work[i].node;
        const bool needs_barrier = i > 0 && !(tap && (tap->kind == TapKind::ColumnSumSq || follows_own_tap));
        if (needs_barrier) pool_.barrier();
        if (tap) {
          run_tap(*tap, *work[i].node, ith, nth, isa_);
          continue;
        }
        if (ith == 0) counters_[(node_no + 1) % 2].store(0, std::memory_order_relaxed);
        c.counter = &counters_[node_no % 2];
        run_node(*work[i].node, c);
        ++node_no;
      }
    });
  }

 private:
  ThreadPool pool_;
  Isa isa_;
  const VecOps* vec_;
  std::vector<char> scratch_;
  std::atomic<int64_t> counters_[2];
};

}  // namespace

size_t scratch_bytes(const Tensor& n, int nth, Isa isa) {
  const int64_t row = n.src[0] ? n.src[0]->ne[0] : 0;
  switch (n.op) {
    case Op::MulMat: return matmul_scratch(n, nth, isa);
    case Op::MulMatId: return matmul_id_scratch(n, nth, isa);
    case Op::Add:
    case Op::Mul:
    case Op::Div: return 2 * row * sizeof(float);
    case Op::Clamp:
    case Op::Scale:
    case Op::Silu:
    case Op::Gelu:
    case Op::RmsNorm:
    case Op::SoftMax: return row * sizeof(float);
    case Op::Rope: return (n.params[0] / 2) * (sizeof(double) + 2 * sizeof(float));
    case Op::Cpy:
    case Op::Cont: return 1024 * sizeof(float);
    default: return 0;
  }
}

size_t shared_scratch_bytes(const Tensor& n, int nth, Isa isa) {
  switch (n.op) {
    case Op::MulMat: return matmul_shared_scratch(n, nth, isa);
    case Op::MulMatId: return matmul_id_shared_scratch(n, nth, isa);
    default: return 0;
  }
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads, Isa isa) {
  if (!isa_supported(isa)) throw Error(std::string("cpu backend: this CPU cannot run ") + isa_name(isa) + " kernels");
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuBackend>(n_threads, isa);
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return cpu::make_cpu_backend(n_threads, cpu::best_isa()); }

}  // namespace qlens
