// The op case table (tests/backend_ops_cases.cpp) timed on every backend,
// as ggml's test-backend-ops -m perf: the CPU backend (the widest instruction
// set, or those --isa names) and every Vulkan device.
//
//   bench_backend_ops [--benchmark_filter=mul_mat/] [--threads=N] [--isa=all|scalar|avx2|avx512] [--all-cases]
//
// A benchmark is named op/case/backend ("mul_mat/Q4_K K=256 M=71 N=1/cpu-avx512"),
// its label says what the timed graph computes. Only the cases that carry a
// perf shape are timed, at that shape (a 1.1B llama's products, a 512-token
// prompt's activations: what the test's small shapes are too small to
// show); --all-cases times every case at its test shape as well. Every leaf
// lives in the backend's memory (the device's on a device), so that only
// kernels are timed. The CPU backend takes its other options from the
// QLENS_CPU_* variables, as the qlens tool does (cpu_options_from_env: ggml's
// roundings on unless QLENS_CPU_ROUND_ACTIVATIONS=0). Counters: GFLOP/s of
// the graph's products, GB/s of the leaves it reads.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "backend_ops_cases.h"
#include "qlens/backend.h"
#include "qlens/sched.h"
#include "qlens/tensor.h"
#ifdef QLENS_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

namespace {

using namespace qlens;
using namespace qlens::opcases;

int g_threads = 0;  // 0: one per core
const CpuOptions g_options = cpu_options_from_env();

struct TimedBackend {
  std::string name;
  std::unique_ptr<Backend> backend;
  bool host;  // computes in host memory (the CPU); else a device, run through the scheduler
};

std::vector<TimedBackend> make_backends(const std::string& isas) {
  std::vector<TimedBackend> v;
  for (cpu::Isa isa : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    const bool chosen = isas == "all"  ? cpu::isa_supported(isa)
                        : isas.empty() ? isa == cpu::isa_for(g_options.isa)
                                       : isas == cpu::isa_name(isa) && cpu::isa_supported(isa);
    if (chosen)
      v.push_back({std::string("cpu-") + cpu::isa_name(isa), cpu::make_cpu_backend(g_threads, isa, g_options), true});
  }
#ifdef QLENS_VULKAN
  const std::vector<DeviceInfo> devices = vulkan::devices();
  for (size_t i = 0; i < devices.size(); ++i)
    v.push_back({devices[i].id, vulkan::make_backend(static_cast<int>(i), vulkan_options_from_env()), false});
#endif
  return v;
}

Backend& host_fallback() {
  static std::unique_ptr<Backend> b = make_reference_backend();
  return *b;
}

// What the timed graph computes: its outputs' ops and their sources.
std::string describe(const std::vector<Tensor*>& outs) {
  std::string s;
  for (const Tensor* t : outs) {
    if (!s.empty()) s += "; ";
    s += op_name(t->op);
    for (const Tensor* src : t->src)
      if (src) {  // (appended piece by piece: GCC 12 warns falsely on " " + string)
        s += ' ';
        s += type_name(src->type);
        s += shape_string(*src);
      }
  }
  return s;
}

// Floating-point operations of the graph's products, bytes of its leaves.
double product_flops(const Graph& g) {
  double flops = 0;
  for (const Tensor* n : g.nodes())
    if (n->op == Op::MulMat || n->op == Op::MulMatId)
      flops += 2.0 * static_cast<double>(n->src[0]->ne[0]) * n->nelements();
  return flops;
}

double leaf_bytes(const Graph& g) {
  double bytes = 0;
  for (const Tensor* t : g.leaves()) bytes += static_cast<double>(t->nbytes());
  return bytes;
}

bool supported(const Backend& b, const Graph& g) {
  for (const Tensor* n : g.nodes())
    if (!op_is_view(n->op) && !b.supports_op(*n)) return false;
  return true;
}

void time_case(benchmark::State& state, const OpCase& c, const Build& build, TimedBackend& tb) {
  CaseGraph cg(c.seed, tb.host ? nullptr : tb.backend.get(), Values::Drawn, true);
  const std::vector<Tensor*> outs = build(cg);
  for (Tensor* t : outs) {
    if (t->op != Op::None) t->flags |= kFlagOutput;
    cg.g.build(t);
  }
  if (!supported(*tb.backend, cg.g)) {
    state.SkipWithError("declined by the backend (supports_op)");
    return;
  }
  std::vector<char> buf;
  std::unique_ptr<Scheduler> sched;
  if (tb.host) {
    const MemoryPlan plan = plan_memory(cg.g);
    buf.assign(plan.size + 64, 0);
    apply_memory_plan(cg.g, plan, buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64);
  } else {
    sched = std::make_unique<Scheduler>(std::vector<Backend*>{tb.backend.get(), &host_fallback()});
    sched->allocate(cg.g);
  }
  const Restore setting = tb.host && c.cpu_setting ? c.cpu_setting() : Restore();  // the case's CPU setting
  const auto run = [&] { tb.host ? tb.backend->compute(cg.g) : static_cast<void>(sched->compute(cg.g)); };
  run();  // warm up: page faults, pipelines, packing buffers
  for (auto _ : state) run();
  const auto iters = static_cast<double>(state.iterations());
  if (const double flops = product_flops(cg.g); flops > 0)
    state.counters["GFLOP/s"] = benchmark::Counter(flops * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(leaf_bytes(cg.g) * iters / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(describe(outs));
}

void register_all(std::vector<TimedBackend>& backends, bool all_cases) {
  for (const OpCase& c : op_cases())
    for (TimedBackend& tb : backends) {
      const std::string stem = c.op + "/" + c.name;
      if (c.perf)
        benchmark::RegisterBenchmark((stem + " (perf shape)/" + tb.name).c_str(),
                                     [&c, &tb](benchmark::State& s) { time_case(s, c, c.perf, tb); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      if (all_cases)
        benchmark::RegisterBenchmark((stem + "/" + tb.name).c_str(),
                                     [&c, &tb](benchmark::State& s) { time_case(s, c, c.build, tb); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flags first; the rest goes to Google Benchmark.
  std::vector<char*> rest;
  std::string isas;
  bool all_cases = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      g_threads = std::atoi(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--isa=", 6) == 0) {
      isas = argv[i] + 6;
    } else if (std::strcmp(argv[i], "--all-cases") == 0) {
      all_cases = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  std::vector<TimedBackend> backends = make_backends(isas);
  register_all(backends, all_cases);
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
