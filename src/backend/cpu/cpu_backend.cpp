// The CPU backend: runs a graph's nodes in order on a pool of threads. All
// threads take part in every node (each computes its share) and meet at a
// barrier only before a node that touches what the nodes since the last
// barrier write (barriers.h); view nodes need no work.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/barriers.h"
#include "backend/cpu/cpu_kernels.h"
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

// Checks a node about to run: its op, and the data it reads.
void check_node(const Tensor& n) {
  if (!n.data) fail(n, "has no data (apply a memory plan first)");
  for (const Tensor* s : n.src)
    if (s && !s->data) fail(n, "source '" + s->name + "' has no data");
  for (const Tensor* s : {&n, static_cast<const Tensor*>(n.src[0]), static_cast<const Tensor*>(n.src[1]),
                          static_cast<const Tensor*>(n.src[2])})
    if (s && s->buffer && !s->buffer->is_host()) fail(n, "'" + s->name + "' lies in device memory");
  if (auto why = cannot_compute(n); !why.empty()) fail(n, why);
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

class CpuBackend final : public Backend {
 public:
  CpuBackend(int n_threads, const KernelOptions& options)
      : pool_(n_threads), options_(options), vec_(&vec_ops(options.isa)), packed_(options.huge_pages) {}

  std::string name() const override { return std::string("cpu-") + isa_name(options_.isa); }
  int n_threads() const override { return pool_.size(); }

  std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override {
    return make_host_buffer(*this, bytes, options_.huge_pages);
  }
  bool uses_host_memory() const override { return true; }
  bool supports_op(const Tensor& node) const override { return cannot_compute(node).empty(); }

  // Generation's matrix-vector kernels read matrices of the packable types
  // from a packed copy (packed.h), unless the options turned packing off.
  size_t prepare_weights(std::span<const Tensor* const> weights, Op reader) override {
    return reader == Op::MulMat && options_.pack ? packed_.add(weights) : 0;
  }
  void release_weights(std::span<const Tensor* const> weights) override { packed_.remove(weights); }

  const KernelOptions& options() const { return options_; }

  std::unique_ptr<TapState> make_tap_state(TapKind kind, int64_t n_columns) override {
    return std::make_unique<CpuTapState>(kind, n_columns, pool_.size());
  }
  void read_tap(TapState& state, TapResult& into, bool reset) override {
    static_cast<CpuTapState&>(state).read(into, reset);
  }

  // Runs synchronously: the pool is the CPU, there is nothing to overlap with.
  void compute_async(std::span<Tensor* const> nodes, std::span<const TapWork> taps) override {
    const int nth = pool_.size();
    // Work items in order: each computing node, each tap right after its node
    // (the lists kept between calls: a generated token's are too large for
    // malloc's heap, and mapping them anew cost page faults every token).
    std::vector<Item>& work = work_;
    std::vector<MemoryAccess>& access = access_;
    work.clear();
    access.clear();
    int64_t n_computed = 0;
    size_t per_thread = 0, shared = 0;
    size_t next_tap = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Tensor* n = nodes[i];
      if (!op_is_view(n->op)) {
        check_node(*n);
        work.push_back({n, nullptr});
        ++n_computed;
        per_thread = std::max(per_thread, align_scratch(scratch_bytes(*n, nth, options_)));
        const size_t node_shared = shared_scratch_bytes(*n, nth, options_);
        shared = std::max(shared, align_scratch(node_shared));
        access.push_back(MemoryAccess::node(*n, kernel_of(n->op).split, node_shared > 0));
      }
      for (; next_tap < taps.size() && taps[next_tap].node_index == i; ++next_tap) {
        check_tap(taps[next_tap], *n);
        work.push_back({n, &taps[next_tap]});
        access.push_back(MemoryAccess::tap(taps[next_tap], *n));
      }
    }
    if (next_tap != taps.size()) throw Error("cpu backend: taps must be sorted by node and name nodes of the call");
    if (work.empty()) return;
    const std::vector<uint8_t> barrier = barriers_before(access);
    const size_t need = per_thread * nth + shared + kScratchAlign;
    if (scratch_.size() < need) {
      scratch_.clear();
      scratch_.shrink_to_fit();
      scratch_.resize(need);
    }
    char* base = scratch_.data();
    base += round_up<uintptr_t>(reinterpret_cast<uintptr_t>(base), kScratchAlign) - reinterpret_cast<uintptr_t>(base);
    char* shared_base = base + per_thread * nth;

    // Each node takes work from its own counter: without a barrier between
    // two nodes, threads may be in either.
    if (counters_.size() < static_cast<size_t>(n_computed)) counters_ = std::vector<Counter>(n_computed);
    for (int64_t k = 0; k < n_computed; ++k) counters_[k].value.store(0, std::memory_order_relaxed);
    const bool timed = options_.profile;
    const Clock::time_point call_start = timed ? Clock::now() : Clock::time_point{};
    pool_.run([&](int ith) {
      const bool timer = timed && ith == 0;
      KernelCtx c{ith, nth, base + ith * per_thread, shared_base, nullptr, &pool_, vec_, &options_, &packed_};
      size_t node_no = 0;
      for (size_t i = 0; i < work.size(); ++i) {
        if (barrier[i]) {
          const Clock::time_point t0 = timer ? Clock::now() : Clock::time_point{};
          pool_.barrier();
          if (timer) profile_.wait_s += seconds(Clock::now() - t0);
        }
        if (const TapWork* tap = work[i].tap) {
          run_tap(*tap, *work[i].node, ith, nth, options_.isa);
          continue;
        }
        c.counter = &counters_[node_no++].value;
        const Clock::time_point t0 = timer ? Clock::now() : Clock::time_point{};
        kernel_of(work[i].node->op).run(*work[i].node, c);
        if (timer) profile_.kernel_s += seconds(Clock::now() - t0);
      }
    });
    if (timed) {
      profile_.calls += 1;
      profile_.nodes += n_computed;
      profile_.barriers += std::count(barrier.begin(), barrier.end(), 1);
      profile_.compute_s += seconds(Clock::now() - call_start);
    }
  }

  Profile profile(bool reset) override {
    const Profile p = profile_;
    if (reset) profile_ = {};
    return p;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

  ThreadPool pool_;
  const KernelOptions options_;
  const VecOps* vec_;
  std::vector<char> scratch_;
  PackedWeights packed_;
  // One per node of a call, each on its own cache line.
  struct alignas(64) Counter {
    std::atomic<int64_t> value{0};
  };
  std::vector<Counter> counters_;
  Profile profile_;
  struct Item {
    const Tensor* node;
    const TapWork* tap;  // null: compute the node
  };
  std::vector<Item> work_;
  std::vector<MemoryAccess> access_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads, Isa isa, const CpuOptions& options) {
  if (!isa_supported(isa)) throw Error(std::string("cpu backend: this CPU cannot run ") + isa_name(isa) + " kernels");
  const KernelOptions resolved = kernel_options(options, isa);
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuBackend>(n_threads, resolved);
}

const KernelOptions* kernel_options_of(const Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return cpu ? &cpu->options() : nullptr;
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(int n_threads, const CpuOptions& options) {
  return cpu::make_cpu_backend(n_threads, cpu::isa_for(options.isa), options);
}

}  // namespace qlens
