// Backends compute graphs: the CPU backend, the plain reference backend that
// every kernel is tested against, and device back-ends through the same
// interface. Tensor data helpers read and write tensors wherever they live.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qlens/tap.h"
#include "qlens/tensor.h"

namespace qlens {

class Backend;

// Memory owned by a backend. Tensors placed in it point into [base, base+size)
// (for device memory the address is a handle that only the backend and the
// buffer's read/write functions interpret) and record the buffer in
// Tensor::buffer. Tensors without a buffer live in host memory.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual Backend& backend() const = 0;
  virtual char* base() const = 0;
  virtual size_t size() const = 0;
  // Host memory: the CPU may read and write the tensors directly.
  virtual bool is_host() const = 0;
  // Synchronous copies between host memory and the buffer at `offset`.
  virtual void write(size_t offset, const void* src, size_t n) = 0;
  virtual void read(size_t offset, void* dst, size_t n) const = 0;
};

// Per-backend accumulation state of one tap (see qlens/tap.h).
class TapState {
 public:
  virtual ~TapState() = default;
};

// A tap to run right after a node of a compute call: `node_index` indexes the
// node span handed to compute_async.
struct TapWork {
  size_t node_index = 0;
  TapKind kind = TapKind::Stats;
  const Tensor* other = nullptr;
  TapState* state = nullptr;
};

// The interface every backend implements. Above it, the scheduler decides
// which backend runs which node and moves data between them; nothing above
// the scheduler knows which backends exist.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int n_threads() const { return 1; }

  // ---- memory
  virtual std::unique_ptr<Buffer> alloc_buffer(size_t bytes) = 0;
  // The backend computes on host memory (tensors without a buffer, or in host
  // buffers): the CPU backends. Device backends need their inputs copied in.
  virtual bool uses_host_memory() const = 0;

  // ---- compute
  // Whether the backend can compute this node (its op, types and shapes).
  virtual bool supports_op(const Tensor& node) const = 0;
  // Starts computing `nodes` in order (views among them need no work), then
  // the taps, each right after its node. It may return before the work is
  // done; synchronize() waits. All tensors must have data.
  virtual void compute_async(std::span<Tensor* const> nodes, std::span<const TapWork> taps) = 0;
  virtual void synchronize() {}
  // Convenience: every node of the graph, then synchronize.
  void compute(const Graph& graph);

  // ---- weights
  // A backend may keep its own layout of model weights for the op that reads
  // them (the CPU: matrices' rows interleaved for generation's matrix-vector
  // products), as ggml's extra buffer types do: owned by the backend,
  // invisible to the model and the graph, used only while a weight's data is
  // the data it was made from. Not while the backend computes. Returns the
  // bytes added (0: nothing kept).
  virtual size_t prepare_weights(std::span<const Tensor* const> weights, Op reader) {
    (void)weights;
    (void)reader;
    return 0;
  }
  // Drops what prepare_weights kept for these weights (also dropped with the
  // backend): before their memory is freed while the backend lives on.
  virtual void release_weights(std::span<const Tensor* const> weights) { (void)weights; }

  // Where compute's time went since the last reset, when the backend was
  // made to profile (CpuOptions::profile); all zero otherwise.
  struct Profile {
    int64_t calls = 0;      // compute_async calls
    int64_t nodes = 0;      // nodes computed (views excluded)
    int64_t barriers = 0;   // times the threads met between nodes
    double compute_s = 0;   // inside compute_async
    double kernel_s = 0;    // in kernels (the calling thread)
    double wait_s = 0;      // waiting at barriers for other threads (the calling thread)
    Profile& operator+=(const Profile& o) {
      calls += o.calls;
      nodes += o.nodes;
      barriers += o.barriers;
      compute_s += o.compute_s;
      kernel_s += o.kernel_s;
      wait_s += o.wait_s;
      return *this;
    }
  };
  virtual Profile profile(bool reset) { (void)reset; return {}; }

  // ---- taps (see qlens/tap.h): a backend that returns null here leaves the
  // reduction to the scheduler's host fallback.
  virtual std::unique_ptr<TapState> make_tap_state(TapKind kind, int64_t n_columns);
  // Whether this backend reduces a tap of `kind` on `node` itself; the
  // scheduler reduces the others on the host.
  virtual bool supports_tap(TapKind kind, const Tensor& node) const {
    (void)kind;
    (void)node;
    return true;
  }
  // Adds what the state accumulated to `into` (synchronizes first), then
  // clears the state when `reset`.
  virtual void read_tap(TapState& state, TapResult& into, bool reset);
};

// The widest instruction set the CPU backend may use; it takes the widest one
// the CPU has up to this cap (Best: AVX-512, then AVX2, then scalar).
enum class CpuIsa { Best, Avx512, Avx2, Scalar };

// What the CPU backend's kernels do, fixed when the backend is made: its
// kernels read these and nothing else (no environment). The defaults are the
// fastest paths, with ggml's arithmetic; the other settings exist to compare
// paths and to test them. The CLI fills them from QLENS_CPU_* variables
// (cpu_options_from_env); programs using the library set them directly.
struct CpuOptions {
  CpuIsa isa = CpuIsa::Best;
  // VNNI dot instructions (AVX-512 VNNI, AVX-VNNI) where the CPU has them;
  // off, the int8 kernels of a CPU without them run (AVX2: maddubs).
  bool vnni = true;
  // The 3-bit and 1-bit i-quants' (IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) grid points read by vector
  // gathers instead of scalar loads; unset: where gathers are fast (Intel
  // cores from Alder Lake and Sapphire Rapids on; AMD's measured slower).
  std::optional<bool> grid_gathers;
  // Prompts' products of quantized weights on int8 panels (gemm_int8.h);
  // off, they take the F32 panels.
  bool int8_gemm = true;
  // Generation's packed copies of weights (Backend::prepare_weights); off,
  // prepare_weights keeps nothing and the GGUF layout's kernels run.
  bool pack = true;
  // How many bytes ahead the packed kernels prefetch weights (0: none, at
  // most 65536); unset: the instruction set's measured default (1 KiB with
  // AVX2, none with AVX-512).
  std::optional<size_t> prefetch_bytes;
  // ggml's roundings (activations through the weights' partner type before a
  // product, GELU through its F16 table), so that results are llama.cpp's;
  // off: F32 activations and exact GELU, to compare with a backend that
  // rounds neither (Vulkan today).
  bool ggml_rounding = true;
  // Time the calling thread's kernels and barrier waits (Backend::profile):
  // where a token's time goes. Costs two clock reads per node.
  bool profile = false;
  // Buffers and packed weights of 2 MiB or more advised as transparent huge
  // pages (generation streams every weight per token: fewer TLB misses).
  bool huge_pages = true;
};

// The command line's CPU options: QLENS_CPU_ISA=scalar|avx2|avx512,
// QLENS_CPU_VNNI=0, QLENS_CPU_GATHER=0|1, QLENS_CPU_INT8=0, QLENS_CPU_PACK=0, QLENS_CPU_PREFETCH=N
// (0 .. 65536), QLENS_CPU_ROUND_ACTIVATIONS=0 and QLENS_HUGE_PAGES=0, read once per call; unset,
// unknown or out-of-range values leave the defaults. The engine never calls
// it: the qlens tool does, where it makes its contexts.
CpuOptions cpu_options_from_env();

// What a Vulkan backend does, fixed when it is made (as CpuOptions for the
// CPU): the backend reads these and no environment. The CLI fills them from
// QLENS_VULKAN_* variables (vulkan_options_from_env).
struct VulkanOptions {
  // The kernels meant for GPUs use shared memory and barriers; on a CPU
  // implementation (lavapipe) plain per-invocation kernels run faster.
  // Unset: by the device's type; set: those kernels (true: the CPU ones)
  // whatever the device, to test both sets on one device.
  std::optional<bool> cpu_kernels;
  // Device-local bytes the backend may take (0: all there is), to share a
  // GPU; over it, allocations fail as on a full device.
  uint64_t memory_limit = 0;
  // Shaders whose pipelines fail to build as a broken driver's would, by
  // name or by prefix ending in '*': tests of the fallback to the CPU.
  std::vector<std::string> fail_shaders;
  // Time every shader with timestamps; the table goes to stderr when the
  // backend ends.
  bool profile = false;
};

// The command line's Vulkan options: QLENS_VULKAN_CPU_KERNELS=0|1,
// QLENS_VULKAN_MEMORY_LIMIT=SIZE (bytes, or a number with K, M or G),
// QLENS_VULKAN_FAIL_SHADERS=NAME,PREFIX*,... and QLENS_VULKAN_PROFILE (set:
// on). Throws Error naming the variable for a size it cannot read.
VulkanOptions vulkan_options_from_env();

// n_threads <= 0: one thread per available core. Throws Error for a
// prefetch distance over 65536.
std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0, const CpuOptions& options = {});

// Row loops of the CPU backend's widest instruction set, for the tools'
// log-softmax over a vocabulary (262,144 logits a token made libm's exp a
// sixth of a sensitivity probe on Gemma 3): the row's max (-inf when empty),
// and the sum of e^(x_i - m) in double (each term to about 1 ulp; terms
// below e^-708 may count as 0).
float host_row_max(std::span<const float> x);
double host_exp_sum(std::span<const float> x, double m);

// Devices a model can run on: "cpu" and, in builds with Vulkan, "vulkan:N"
// for each Vulkan device found (lavapipe included).
struct DeviceInfo {
  std::string id;    // "cpu", "vulkan:0"
  std::string name;  // "AMD EPYC 7B13", "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string kind;  // "cpu", "discrete gpu", "integrated gpu", "cpu (software vulkan)", ...
  uint64_t memory_bytes = 0;
};
// The CPU's entry names the kernels a CPU backend made with `cpu` runs.
std::vector<DeviceInfo> list_devices(const CpuOptions& cpu = {});
// The CPU's entry of list_devices() alone (no GPU driver is asked).
DeviceInfo cpu_device_info(const CpuOptions& cpu = {});
// The backend for a device id (`cpu` is for the CPU's); throws Error naming
// the id and the devices there are when it does not exist.
std::unique_ptr<Backend> make_backend(const std::string& device, int n_threads = 0, const CpuOptions& cpu = {},
                                      const VulkanOptions& vulkan = {});
// Single-threaded, scalar, obviously-correct kernels: the test oracle.
std::unique_ptr<Backend> make_reference_backend();

// Memory for a graph's intermediate results. Tensors whose lifetimes do not
// overlap share bytes; outputs (kFlagOutput) and inputs are never reused.
struct MemoryPlan {
  size_t size = 0;  // bytes needed
  std::vector<std::pair<Tensor*, size_t>> offsets;
};
// `include`, when given, selects the tensors to plan (those of one backend);
// lifetimes still count every reader in the graph.
MemoryPlan plan_memory(const Graph& graph, size_t alignment = 64,
                       const std::function<bool(const Tensor*)>& include = {});
// Sets the data pointers of planned tensors into `base` (size >= plan.size,
// aligned) and of all views from their sources.
void apply_memory_plan(const Graph& graph, const MemoryPlan& plan, void* base);

// ---- Tensor data wherever it lives (host memory or a backend buffer).
// Copies n bytes at byte offset `offset` of the tensor's data.
void tensor_write(const Tensor& t, const void* src, size_t offset, size_t n);
void tensor_read(const Tensor& t, void* dst, size_t offset, size_t n);
// The tensor's values as F32 in logical order (dim 0 fastest), whatever its
// type and strides: what an observe callback uses to look at a node.
std::vector<float> tensor_to_f32(const Tensor& t);

}  // namespace qlens
