// Every op case of backend_ops_cases.cpp on every backend against the
// reference backend, as ggml's test-backend-ops:
//  - the CPU backend at every instruction set this machine has (scalar
//    always), one thread against the reference, and 2, 3 and 7 threads
//    bitwise against one (each output element is computed by one thread in
//    an order that does not depend on the split). The CPU runs without
//    ggml's roundings (CpuOptions::ggml_rounding off), the function the
//    reference computes; test_ops.cpp tests the roundings.
//  - every Vulkan device, through Scheduler({device, reference}) as a model
//    runs (host leaves copied in, device leaves in its memory): every node
//    must run on the device.
// Intermediate results start as NaN on every backend, so unwritten outputs
// show.
//
// A CPU device (lavapipe) runs the cases twice, the second time with the
// Vulkan kernels meant for GPUs ("vulkan:0+gpu-kernels").
//
// One test per op and group (BackendOps.mul_mat/shapes) loops over its
// cases and the backends; a failure names the case and the backend. A
// backend that declines a case (supports_op) is counted as skipped, and the
// test fails where the case says that backend must run it. Each test ends
// with a line per backend: cases run and declined, the worst NMSE and the
// worst matmul error ratio seen, and the CPU seconds each took.
// QLENS_TEST_BACKENDS=cpu or =vulkan keeps only those backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "backend_ops_cases.h"
#include "qlens/backend.h"
#include "qlens/sched.h"
#include "qlens/tensor.h"
#include "test_util.h"
#ifdef QLENS_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

namespace qlens {
namespace {

using namespace opcases;
using Outputs = std::vector<std::vector<float>>;

// =============================================================================
// Backends

struct TestBackend {
  std::string name;  // "cpu-avx2", "vulkan:0 (llvmpipe ...)"
  BackendKind kind;
  Backend* backend;  // the CPU's with one thread
  cpu::Isa isa = cpu::Isa::Scalar;
};

Backend& reference() {
  static std::unique_ptr<Backend> b = make_reference_backend();
  return *b;
}

Backend& cpu_backend(cpu::Isa isa, int n_threads) {
  static std::map<std::pair<int, int>, std::unique_ptr<Backend>> cache;
  auto& b = cache[{static_cast<int>(isa), n_threads}];
  CpuOptions exact;  // without ggml's roundings: the reference's function
  exact.ggml_rounding = false;
  if (!b) b = cpu::make_cpu_backend(n_threads, isa, exact);
  return *b;
}

bool wanted(const std::string& kind) {
  const char* only = std::getenv("QLENS_TEST_BACKENDS");
  return !only || std::string(only).find(kind) != std::string::npos;
}

const std::vector<TestBackend>& backends() {
  static const std::vector<TestBackend> list = [] {
    std::vector<TestBackend> v;
    if (wanted("cpu"))
      for (cpu::Isa isa : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512})
        if (cpu::isa_supported(isa))
          v.push_back({std::string("cpu-") + cpu::isa_name(isa), kCpu, &cpu_backend(isa, 1), isa});
#ifdef QLENS_VULKAN
    // The Vulkan kernels meant for GPUs (shared memory, barriers) are chosen
    // on GPUs only; a CPU device (lavapipe) runs the table a second time
    // with them forced (VulkanOptions::cpu_kernels false), against the same
    // references. QLENS_VULKAN_CPU_KERNELS, when set, chooses alone.
    static std::vector<std::unique_ptr<Backend>> devices;  // pipelines are built once per process
    const std::vector<DeviceInfo> infos = wanted("vulkan") ? vulkan::devices() : std::vector<DeviceInfo>{};
    const VulkanOptions options = test::vulkan_options();
    for (size_t i = 0; i < infos.size(); ++i) {
      devices.push_back(vulkan::make_backend(static_cast<int>(i), options));
      v.push_back({infos[i].id + " (" + infos[i].name + ")", kVulkan, devices.back().get()});
      if (options.cpu_kernels || infos[i].kind.rfind("cpu", 0) != 0) continue;
      VulkanOptions gpu_kernels = options;
      gpu_kernels.cpu_kernels = false;
      devices.push_back(vulkan::make_backend(static_cast<int>(i), gpu_kernels));
      v.push_back({infos[i].id + "+gpu-kernels (" + infos[i].name + ")", kVulkan, devices.back().get()});
    }
#endif
    return v;
  }();
  return list;
}

// =============================================================================
// Running a case

// A case built for one run: its graph and the tensors to compare.
struct Built {
  std::unique_ptr<CaseGraph> cg;
  std::vector<Tensor*> outs;
};

Built build(const OpCase& c, CaseMemo* memo, Backend* device, Values values = Values::Drawn) {
  Built b{std::make_unique<CaseGraph>(c.seed, device, values, false, memo), {}};
  b.outs = c.build(*b.cg);
  for (Tensor* t : b.outs) {
    if (t->op != Op::None) t->flags |= kFlagOutput;  // (a leaf a cpy wrote into needs no flag)
    b.cg->g.build(t);
  }
  return b;
}

bool supports(const Backend& b, const Graph& g) {
  return std::all_of(g.nodes().begin(), g.nodes().end(),
                     [&](const Tensor* n) { return op_is_view(n->op) || b.supports_op(*n); });
}

Outputs read(const std::vector<Tensor*>& outs) {
  Outputs v;
  for (const Tensor* t : outs) v.push_back(tensor_to_f32(*t));
  return v;
}

// A backend that computes in host memory (the CPU's, the reference): the
// intermediates planned in one buffer that starts as NaN. Nullopt when the
// backend declines a node.
std::optional<Outputs> run_on_host(const OpCase& c, CaseMemo& memo, Backend& b, Values values = Values::Drawn) {
  Built x = build(c, &memo, nullptr, values);
  if (!supports(b, x.cg->g)) return std::nullopt;
  std::vector<char> buf;
  test::plan_into(x.cg->g, buf, static_cast<char>(0xff));
  b.compute(x.cg->g);
  return read(x.outs);
}

// A device: through the scheduler, with the reference as the host backend;
// its intermediates start as NaN (a cpy writes into its destination).
std::optional<Outputs> run_on_device(const OpCase& c, CaseMemo& memo, Backend& b) {
  Built x = build(c, &memo, &b);
  Graph& g = x.cg->g;
  if (!supports(b, g)) return std::nullopt;
  Scheduler sched({&b, &reference()});
  sched.allocate(g);
  for (const Tensor* n : g.nodes())
    if (!op_is_view(n->op) && n->op != Op::Cpy && sched.backend_of(*n) == &b) {
      const std::vector<char> nan(n->nbytes(), static_cast<char>(0xff));
      tensor_write(*n, nan.data(), 0, nan.size());
    }
  EXPECT_EQ(sched.compute(g), ComputeStatus::Done);
  for (const Tensor* n : g.nodes())
    if (!op_is_view(n->op)) {
      EXPECT_EQ(sched.backend_of(*n), &b) << "node '" << n->name << "' (" << op_name(n->op) << ") ran elsewhere";
    }
  return read(x.outs);
}

// =============================================================================
// Comparing

bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// What the reference computed for a case: its results and, for the matmul
// bounds, its products of magnitudes and of activation steps.
struct Expected {
  Outputs ref, mag, steps;
};

// What a backend's results looked like over a test's cases.
struct Tally {
  int run = 0;
  std::vector<std::string> declined, not_run;
  double worst_nmse = 0;   // over the cases held to an NMSE
  double worst_ratio = 0;  // |got - ref| / sum|a||b| over the matmul cases
  double seconds = 0;      // CPU time: building, running (more threads too) and checking
};

// The process's CPU time (every thread's: thread pools, the Vulkan driver's),
// which is what a test costs on a loaded 2-core CI machine.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// sum (got - ref)^2 / sum ref^2 over the elements where ref is a number;
// infinite where NaNs differ.
double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(ref[i])) return INFINITY;
    if (std::isnan(ref[i])) continue;
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

void check_exact(const std::vector<float>& got, const std::vector<float>& ref) {
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!same_bits(got[i], ref[i]) && bad++ < 5) ADD_FAILURE() << "element " << i << ": " << got[i] << " != " << ref[i];
  EXPECT_EQ(bad, 0u) << "elements differ, of " << ref.size();
}

// The NMSE, NaNs and exact zeros where the reference has them, and the
// matmul bound where the case has one.
void check_close(const std::vector<float>& got, const Expected& want, size_t k, const Bound& b, Tally& tally) {
  const std::vector<float>& ref = want.ref[k];
  const double e = nmse(got, ref);
  EXPECT_LE(e, b.nmse) << "NMSE";
  tally.worst_nmse = std::max(tally.worst_nmse, e);
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if ((std::isnan(got[i]) != std::isnan(ref[i]) || (b.zeros && ref[i] == 0 && got[i] != 0)) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << ref[i];
    if (b.matmul == 0) continue;
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]), mag = want.mag[k][i];
    const double steps = b.quantized_activations ? want.steps[k][i] : 0.0;
    if (mag > 0 && !b.quantized_activations) tally.worst_ratio = std::max(tally.worst_ratio, err / mag);
    if (!(err <= b.matmul * mag + steps + 1e-30) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << ref[i] << " (sum |a||b| " << mag
                    << ", activation steps " << steps << ")";
  }
  EXPECT_EQ(bad, 0u) << "elements off, of " << ref.size();
}

void check(const Outputs& got, const Expected& want, const Bound& b, Tally& tally) {
  ASSERT_EQ(got.size(), want.ref.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (b.ignored_outputs & (1u << k)) continue;
    SCOPED_TRACE("output " + std::to_string(k));
    ASSERT_EQ(got[k].size(), want.ref[k].size());
    if (b.exact)
      check_exact(got[k], want.ref[k]);
    else
      check_close(got[k], want, k, b, tally);
  }
}

// A case as a test runs it: its values (drawn and converted once), what the
// reference computed, and what the backend being tested computed (the CPU's
// single-threaded results, which more threads must give bit for bit).
struct CaseState {
  const OpCase* c;
  CaseMemo memo;
  Expected want;
  std::optional<Outputs> got;
};

// The bounds the backends being tested are held to ask for magnitudes and
// activation steps (the CPU's, with quantized weights).
Expected expected(const OpCase& c, CaseMemo& memo) {
  Expected e{*run_on_host(c, memo, reference()), {}, {}};
  bool mag = false, steps = false;
  for (const TestBackend& tb : backends()) {
    const Bound& b = tb.kind == kCpu ? c.tol.cpu : c.tol.device;
    mag = mag || b.matmul > 0;
    steps = steps || b.quantized_activations;
  }
  if (mag) e.mag = *run_on_host(c, memo, reference(), Values::Magnitudes);
  if (steps) e.steps = *run_on_host(c, memo, reference(), Values::ActivationSteps);
  return e;
}

// The case on the backend, against the reference; s.got keeps the results.
void run_on(CaseState& s, const TestBackend& tb, Tally& tally) {
  const OpCase& c = *s.c;
  s.got.reset();
  if (c.not_run_on & tb.kind) {
    tally.not_run.push_back(c.name);
    return;
  }
  const bool on_cpu = tb.kind == kCpu;
  const Restore restore = on_cpu && c.cpu_setting ? c.cpu_setting() : Restore();
  try {
    s.got = on_cpu ? run_on_host(c, s.memo, *tb.backend) : run_on_device(c, s.memo, *tb.backend);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
    return;
  }
  if (!s.got) {
    tally.declined.push_back(c.name);
    EXPECT_FALSE(c.must_run & tb.kind) << "declined by supports_op, but this backend must run it";
    return;
  }
  ++tally.run;
  check(*s.got, s.want, on_cpu ? c.tol.cpu : c.tol.device, tally);
}

// n threads give the single-threaded results, bit for bit.
void check_threads(CaseState& s, cpu::Isa isa, int n) {
  if (!s.got) return;
  const Restore restore = s.c->cpu_setting ? s.c->cpu_setting() : Restore();
  const std::optional<Outputs> many = run_on_host(*s.c, s.memo, cpu_backend(isa, n));
  ASSERT_TRUE(many) << "declined on " << n << " threads";
  for (size_t k = 0; k < s.got->size(); ++k) {
    size_t bad = 0;
    for (size_t i = 0; i < s.got->at(k).size(); ++i) bad += !same_bits(many->at(k)[i], s.got->at(k)[i]);
    EXPECT_EQ(bad, 0u) << "output " << k << ": elements differ from one thread's";
  }
}

void print_tallies(const std::map<std::string, Tally>& tallies, double reference_seconds) {
  std::printf("[ %-20s ] %.2f s CPU\n", "reference", reference_seconds);
  for (const TestBackend& tb : backends()) {
    const Tally& t = tallies.at(tb.name);
    std::printf(
        "[ %-20s ] %d run, %zu declined, %zu not run; worst NMSE %.2e, matmul |err| / sum|a||b| %.2e; %.2f s CPU\n",
        tb.name.substr(0, tb.name.find(' ')).c_str(), t.run, t.declined.size(), t.not_run.size(), t.worst_nmse,
        t.worst_ratio, t.seconds);
    for (const std::string& name : t.declined) std::printf("    declined: %s\n", name.c_str());
    for (const std::string& name : t.not_run) std::printf("    not run (a known gap): %s\n", name.c_str());
  }
}

// =============================================================================
// The tests

class GroupTest : public testing::Test {
 public:
  explicit GroupTest(std::vector<const OpCase*> cases) : cases_(std::move(cases)) {}

  // The references first, then each backend through all cases (the CPU's
  // thread pools stay warm: on 2 cores, idle spinning workers of other
  // pools would take turns from the work).
  void TestBody() override {
    if (backends().empty()) GTEST_SKIP() << "no backend to test (QLENS_TEST_BACKENDS, or no Vulkan device)";
    double start = cpu_seconds();
    std::vector<CaseState> states(cases_.size());
    for (size_t i = 0; i < cases_.size(); ++i) {
      states[i].c = cases_[i];
      states[i].want = expected(*cases_[i], states[i].memo);
    }
    const double reference_seconds = cpu_seconds() - start;
    std::map<std::string, Tally> tallies;
    for (const TestBackend& tb : backends()) {
      start = cpu_seconds();
      for (CaseState& s : states) {
        SCOPED_TRACE(s.c->op + " '" + s.c->name + "' on " + tb.name);
        run_on(s, tb, tallies[tb.name]);
      }
      if (tb.kind != kCpu) {
        tallies[tb.name].seconds = cpu_seconds() - start;
        continue;
      }
      for (int n : {2, 3, 7})
        for (CaseState& s : states) {
          if (std::find(s.c->cpu_threads.begin(), s.c->cpu_threads.end(), n) == s.c->cpu_threads.end()) continue;
          SCOPED_TRACE(s.c->op + " '" + s.c->name + "' on " + tb.name + " with " + std::to_string(n) + " threads");
          check_threads(s, tb.isa, n);
        }
      tallies[tb.name].seconds = cpu_seconds() - start;
    }
    print_tallies(tallies, reference_seconds);
  }

 private:
  std::vector<const OpCase*> cases_;
};

// One test per op and group, in the table's order: BackendOps.<op>/<group>.
const bool registered = [] {
  std::vector<std::pair<std::string, std::vector<const OpCase*>>> groups;
  for (const OpCase& c : op_cases()) {
    const std::string name = c.group.empty() ? c.op : c.op + "/" + c.group;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == name; });
    if (it == groups.end()) it = groups.insert(groups.end(), {name, {}});
    it->second.push_back(&c);
  }
  for (auto& [name, cases] : groups)
    testing::RegisterTest("BackendOps", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                          [cases = cases]() -> testing::Test* { return new GroupTest(cases); });
  return true;
}();

// Every op the engine has (views aside) is in some case's graph, so that a
// new op cannot go untested on some backend.
TEST(BackendOps, EveryOpHasACase) {
  std::set<Op> seen;
  for (const OpCase& c : op_cases()) {
    const Built b = build(c, nullptr, nullptr, Values::Shapes);
    for (const Tensor* n : b.cg->g.nodes()) seen.insert(n->op);
  }
  for (int i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<Op>(i);
    if (op != Op::None && !op_is_view(op)) {
      EXPECT_TRUE(seen.count(op)) << op_name(op) << " has no case";
    }
  }
  std::map<std::string, int> per_op;
  for (const OpCase& c : op_cases()) ++per_op[c.op];
  for (const auto& [op, n] : per_op) std::printf("  %-10s %d cases\n", op.c_str(), n);
}

}  // namespace
}  // namespace qlens
