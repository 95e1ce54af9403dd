// The scheduler: backend assignment and splits across a simulated device,
// the observe callback (grouping, readability, stopping, no effect when
// absent) and taps (CPU kernels against the host reference and against the
// host-callback path).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "backend/host_buffer.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "qlens/sched.h"
#include "qlens/tap.h"
#include "test_util.h"

namespace qlens {
namespace {

// Counts the compute calls and the nodes handed to a wrapped backend.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "counting-" + inner_->name(); }
  std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override { return inner_->alloc_buffer(bytes); }
  bool uses_host_memory() const override { return true; }
  bool supports_op(const Tensor& node) const override { return inner_->supports_op(node); }
  void compute_async(std::span<Tensor* const> nodes, std::span<const TapWork> taps) override {
    ++calls;
    call_sizes.push_back(nodes.size());
    for (const Tensor* n : nodes) computed.push_back(n->name);
    inner_->compute_async(nodes, taps);
  }
  void synchronize() override {
    ++syncs;
    inner_->synchronize();
  }
  std::unique_ptr<TapState> make_tap_state(TapKind kind, int64_t n) override {
    return inner_->make_tap_state(kind, n);
  }
  void read_tap(TapState& s, TapResult& into, bool reset) override { inner_->read_tap(s, into, reset); }

  int calls = 0, syncs = 0;
  std::vector<size_t> call_sizes;
  std::vector<std::string> computed;

 private:
  std::unique_ptr<Backend> inner_;
};

// Memory the CPU must not touch directly: a stand-in for a GPU. It computes
// with the reference kernels, supports no SOFT_MAX and no GET_ROWS, and
// fails when a node reads a tensor outside its own buffers, so that missing
// copies cannot go unnoticed. It has no taps (the scheduler falls back).
class ShadowDevice final : public Backend {
  class DeviceBuffer final : public Buffer {
   public:
    DeviceBuffer(ShadowDevice& b, size_t n) : backend_(b), host_(make_host_buffer(b, n)) {}
    Backend& backend() const override { return backend_; }
    char* base() const override { return host_->base(); }
    size_t size() const override { return host_->size(); }
    bool is_host() const override { return false; }
    void write(size_t off, const void* src, size_t n) override { host_->write(off, src, n); }
    void read(size_t off, void* dst, size_t n) const override { host_->read(off, dst, n); }

   private:
    ShadowDevice& backend_;
    std::unique_ptr<Buffer> host_;
  };

 public:
  std::string name() const override { return "shadow"; }
  std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override { return std::make_unique<DeviceBuffer>(*this, bytes); }
  bool uses_host_memory() const override { return false; }
  bool supports_op(const Tensor& node) const override {
    return node.op != Op::SoftMax && node.op != Op::GetRows && node.op != Op::None;
  }
  void compute_async(std::span<Tensor* const> nodes, std::span<const TapWork> taps) override {
    EXPECT_TRUE(taps.empty());
    for (const Tensor* n : nodes) {
      auto mine = [&](const Tensor* t) {
        const Tensor* o = t->view_src ? t->view_src : t;
        return o->buffer && &o->buffer->backend() == this;
      };
      if (!mine(n)) throw Error("shadow device: node '" + n->name + "' is not in device memory");
      for (const Tensor* s : n->src)
        if (s && !mine(s)) throw Error("shadow device: '" + n->name + "' reads '" + s->name + "' from host memory");
      ++nodes_run;
      ran.insert(n->name);
    }
    reference_->compute_async(nodes, {});
  }

  int nodes_run = 0;
  std::set<std::string> ran;

 private:
  std::unique_ptr<Backend> reference_ = make_reference_backend();
};

void fill_random(Tensor& t, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(t.nelements());
  for (float& x : v) x = d(rng);
  tensor_write(t, v.data(), 0, v.size() * sizeof(float));
}

// A small graph of named nodes with a host weight, an input, a soft_max and a
// cpy into a host "cache": y = softmax((W1 x) * s) ; out = W2 y + b.
struct SmallGraph {
  Graph g;
  std::vector<float> w1, w2, bias;
  Tensor* x = nullptr;
  Tensor* out = nullptr;
  std::vector<float> cache;

  explicit SmallGraph(uint32_t seed = 1) {
    std::mt19937 rng(seed);
    const int64_t K = 24, M = 20, N = 5;
    auto weight = [&](std::vector<float>& store, std::initializer_list<int64_t> ne, const char* name) {
      Tensor* t = g.new_tensor(DType::F32, ne, name);
      store.resize(t->nelements());
      std::normal_distribution<float> d(0.0f, 0.3f);
      for (float& v : store) v = d(rng);
      t->data = store.data();
      t->flags |= kFlagWeight;
      return t;
    };
    Tensor* W1 = weight(w1, {K, M}, "w1.weight");
    Tensor* W2 = weight(w2, {M, M}, "w2.weight");
    Tensor* b = weight(bias, {M}, "b.weight");
    x = g.new_tensor(DType::F32, {K, N}, "x");
    x->flags |= kFlagInput;
    cache.assign(M * N, 0.0f);
    Tensor* c = g.new_tensor(DType::F32, {M * N}, "cache");
    c->data = cache.data();
    Tensor* h = named(mul_mat(g, W1, x), "h");
    Tensor* hs = named(scale(g, h, 0.5f), "hs");
    Tensor* p = named(soft_max(g, hs, nullptr, 1.0f), "p");
    Tensor* st = named(cpy(g, p, named(view(g, c, {M, N}, {M * sizeof(float)}, 0), "cache_view")), "store");
    Tensor* y = named(mul_mat(g, W2, p), "y");
    Tensor* yb = named(add(g, y, b), "yb");
    out = named(silu(g, yb), "out");
    g.build(st);
    g.build(out);
  }
};

std::vector<float> run_small(Scheduler& sched, SmallGraph& sg, uint32_t seed = 7) {
  sched.allocate(sg.g);
  std::mt19937 rng(seed);
  fill_random(*sg.x, rng);
  EXPECT_EQ(sched.compute(sg.g), ComputeStatus::Done);
  return tensor_to_f32(*sg.out);
}


// ---------------------------------------------------------------------------
// The observe callback

TEST(ObserveCallback, NoCallbackIsOneCallAndNoExtraSync) {
  CountingBackend be(make_cpu_backend(2));
  Scheduler sched(be);
  SmallGraph sg;
  run_small(sched, sg);
  EXPECT_EQ(be.calls, 1);
  EXPECT_EQ(be.call_sizes[0], sg.g.nodes().size());
  EXPECT_EQ(be.syncs, 1);  // the one at the end, which compute always needs
}

TEST(ObserveCallback, CallsFollowTheGroupingRule) {
  // Wanting nodes at positions P splits the node list after each of them:
  // calls = |P| + (1 if unwanted nodes follow the last wanted one).
  SmallGraph probe;
  const auto& order = probe.g.nodes();
  const size_t n = order.size();
  ASSERT_GE(n, 6u);
  const std::vector<std::set<size_t>> cases = {{}, {0}, {n - 1}, {1, 2}, {0, 2, n - 1}, {1, 3, 4}};
  for (const auto& wanted_pos : cases) {
    CountingBackend be(make_cpu_backend(2));
    Scheduler sched(be);
    SmallGraph sg;
    std::set<std::string> wanted;
    for (size_t p : wanted_pos) wanted.insert(sg.g.nodes()[p]->name);
    int asks = 0, observed = 0;
    sched.set_observe_callback([&](const Tensor& t, bool ask) {
      if (ask) {
        ++asks;
        return wanted.count(t.name) > 0;
      }
      EXPECT_TRUE(wanted.count(t.name)) << t.name;
      ++observed;
      return true;
    });
    run_small(sched, sg);
    const size_t last = wanted_pos.empty() ? 0 : *wanted_pos.rbegin() + 1;
    const int expect_calls = static_cast<int>(wanted_pos.size()) + (last < n ? 1 : 0);
    EXPECT_EQ(be.calls, expect_calls) << "wanted " << wanted_pos.size();
    EXPECT_EQ(asks, static_cast<int>(n));
    EXPECT_EQ(observed, static_cast<int>(wanted_pos.size()));
    EXPECT_EQ(be.computed.size(), n);  // every node exactly once
    // A wanted node is the last node of its call.
    size_t pos = 0;
    for (size_t size : be.call_sizes) {
      pos += size;
      if (pos < n || wanted_pos.count(n - 1)) {
        EXPECT_TRUE(wanted_pos.count(pos - 1)) << pos;
      }
    }
  }
}

TEST(ObserveCallback, StopEndsTheWholeComputation) {
  CountingBackend be(make_cpu_backend(2));
  Scheduler sched(be);
  SmallGraph sg;
  sched.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask) return t.name == "hs" || t.name == "y";
    return t.name != "hs";  // stop at the first
  });
  sched.allocate(sg.g);
  std::mt19937 rng(3);
  fill_random(*sg.x, rng);
  EXPECT_EQ(sched.compute(sg.g), ComputeStatus::Stopped);
  EXPECT_EQ(be.calls, 1);
  EXPECT_EQ(be.computed.back(), "hs");
  EXPECT_EQ(std::count(be.computed.begin(), be.computed.end(), "y"), 0);
}

using test::tiny_model_path;

std::vector<Token> some_tokens(const Model& m, size_t n) { return test::spread_tokens(m.hparams().n_vocab, n); }

TEST(ObserveCallback, WantingEveryNodeChangesNothingAndSeesCorrectValues) {
  auto m = Model::load(tiny_model_path());
  const auto tokens = some_tokens(*m, 19);
  ContextOptions opt;
  opt.n_ctx = 64;
  opt.n_batch = 8;  // three graphs, the KV cache carried between them
  opt.n_threads = 2;

  // The truth: every intermediate kept (no buffer reuse), read after compute.
  std::vector<std::vector<float>> kept;
  std::vector<float> logits_plain;
  {
    ContextOptions o = opt;
    o.keep_intermediates = true;
    Context ctx(*m, o);
    ctx.set_observer([&](const Graph& g) {
      for (const Tensor* t : g.nodes()) kept.push_back(tensor_to_f32(*t));
    });
    ASSERT_TRUE(ctx.decode(tokens, true));
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto l = ctx.logits(static_cast<int64_t>(i));
      logits_plain.insert(logits_plain.end(), l.begin(), l.end());
    }
  }
  // Buffers reused as usual; each node read in its callback must equal the
  // kept value (nothing overwritten it before the callback returned), and
  // the logits must be bit-identical.
  Context ctx(*m, opt);
  size_t seen = 0, mismatched = 0;
  ctx.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask) return true;
    // Views of the KV cache are written by later nodes (their CPY): their
    // final content is only there after compute.
    const bool written_later = t.view_src && t.view_src->op == Op::None;
    if (seen < kept.size() && !written_later && tensor_to_f32(t) != kept[seen]) {
      ++mismatched;
      ADD_FAILURE() << "node " << t.name << " differs in its callback";
    }
    ++seen;
    return true;
  });
  ASSERT_TRUE(ctx.decode(tokens, true));
  EXPECT_EQ(seen, kept.size());
  EXPECT_EQ(mismatched, 0u);
  std::vector<float> logits_cb;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto l = ctx.logits(static_cast<int64_t>(i));
    logits_cb.insert(logits_cb.end(), l.begin(), l.end());
  }
  EXPECT_EQ(logits_cb, logits_plain);  // bit-identical
}

TEST(ObserveCallback, StoppedDecodeLeavesTheSequenceUsable) {
  auto m = Model::load(tiny_model_path());
  const auto tokens = some_tokens(*m, 6);
  ContextOptions opt;
  opt.n_ctx = 32;
  opt.n_threads = 2;
  Context ref(*m, opt);
  ASSERT_TRUE(ref.decode(tokens, false));
  const std::vector<float> want(ref.last_logits().begin(), ref.last_logits().end());

  Context ctx(*m, opt);
  bool stop = true;
  ctx.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask) return t.name == "ffn_out-0";
    return !stop;
  });
  EXPECT_FALSE(ctx.decode(tokens, false));
  EXPECT_EQ(ctx.n_past(), 0);
  EXPECT_THROW(ctx.last_logits(), Error);
  stop = false;
  ASSERT_TRUE(ctx.decode(tokens, false));
  const std::vector<float> got(ctx.last_logits().begin(), ctx.last_logits().end());
  EXPECT_EQ(got, want);
}

// ---------------------------------------------------------------------------
// Splits across backends

TEST(Scheduler, SplitsAcrossADeviceAndCopiesInputs) {
  ShadowDevice dev;
  auto ref = make_reference_backend();
  // The weights of the first mul_mat live on the device.
  SmallGraph sg;
  SmallGraph plain;
  auto dev_buf = dev.alloc_buffer(sg.w1.size() * sizeof(float));
  Tensor* w1 = sg.g.find("w1.weight");
  w1->buffer = dev_buf.get();
  w1->data = dev_buf->base();
  tensor_write(*w1, sg.w1.data(), 0, sg.w1.size() * sizeof(float));

  Scheduler both({&dev, ref.get()});
  const std::vector<float> got = run_small(both, sg);
  Scheduler host_only(*ref);
  const std::vector<float> want = run_small(host_only, plain);
  EXPECT_EQ(got, want);  // the same reference kernels on both sides: bit-identical

  // h and hs run on the device (h where its weight is, hs after it), p on the
  // host (no soft_max on the device), the rest follows p on the host.
  EXPECT_EQ(both.backend_of(*sg.g.find("h")), &dev);
  EXPECT_EQ(both.backend_of(*sg.g.find("hs")), &dev);
  EXPECT_EQ(both.backend_of(*sg.g.find("p")), ref.get());
  EXPECT_EQ(both.backend_of(*sg.g.find("y")), ref.get());
  ASSERT_EQ(both.splits().size(), 2u);
  EXPECT_EQ(both.splits()[0].backend, &dev);
  // The input x lives where its first reader runs (the device); the host
  // split reads hs from the device through a copy.
  std::set<std::string> copied0, copied1;
  for (const auto& [src, copy] : both.splits()[0].copies) copied0.insert(src->name);
  for (const auto& [src, copy] : both.splits()[1].copies) copied1.insert(src->name);
  EXPECT_TRUE(copied0.empty());
  ASSERT_NE(sg.x->buffer, nullptr);
  EXPECT_EQ(&sg.x->buffer->backend(), &dev);
  EXPECT_EQ(copied1, (std::set<std::string>{"hs"}));
  EXPECT_GT(dev.nodes_run, 0);
  // The host cache was written by the host split.
  EXPECT_EQ(sg.cache, plain.cache);

  // Allocated again (its nodes read the copies of the first allocation, which
  // are freed): the same splits and copies, the same result.
  EXPECT_EQ(run_small(both, sg), want);
  ASSERT_EQ(both.splits().size(), 2u);
  ASSERT_EQ(both.splits()[1].copies.size(), 1u);
  EXPECT_EQ(both.splits()[1].copies[0].first->name, "hs");
}

TEST(Scheduler, CallbackAndTapsWorkOnDeviceNodes) {
  ShadowDevice dev;
  CountingBackend host(make_cpu_backend(2));
  SmallGraph sg;
  auto dev_buf = dev.alloc_buffer(sg.w1.size() * sizeof(float));
  Tensor* w1 = sg.g.find("w1.weight");
  w1->buffer = dev_buf.get();
  w1->data = dev_buf->base();
  tensor_write(*w1, sg.w1.data(), 0, sg.w1.size() * sizeof(float));
  Scheduler sched({&dev, &host});
  std::map<std::string, std::vector<float>> seen;
  sched.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask) return t.name == "hs" || t.name == "y";
    seen[t.name] = tensor_to_f32(t);
    return true;
  });
  sched.set_tap_selector([](const Tensor& t, std::vector<TapRequest>& r) {
    if (t.op == Op::MulMat) r.push_back({TapKind::ColumnSumSq, t.src[0]->name + "/cols"});
    if (t.name == "hs" || t.name == "out") r.push_back({TapKind::Stats, t.name});
  });
  const std::vector<float> out = run_small(sched, sg);
  ASSERT_EQ(seen.size(), 2u);
  auto taps = sched.read_taps();
  ASSERT_EQ(taps.size(), 4u);
  // Stats of hs (device, host fallback) and out (CPU tap) equal a host pass.
  auto stats_of = [](const std::vector<float>& v) {
    NodeStats s;
    for (float x : v) s.add(x);
    return s;
  };
  const NodeStats hs = stats_of(seen["hs"]), o = stats_of(out);
  EXPECT_EQ(taps["hs"].stats.count, hs.count);
  EXPECT_DOUBLE_EQ(taps["hs"].stats.sum_sq, hs.sum_sq);
  EXPECT_EQ(taps["out"].stats.count, o.count);
  EXPECT_NEAR(taps["out"].stats.sum, o.sum, 1e-9 * (1 + std::fabs(o.sum)));
  EXPECT_DOUBLE_EQ(taps["out"].stats.max, o.max);
  // Column sums of x (device mul_mat h: host fallback) and of p (host mul_mat y).
  EXPECT_EQ(taps["w1.weight/cols"].rows, 5);
  EXPECT_EQ(taps["w2.weight/cols"].rows, 5);
  double sum_x = 0;
  for (float v : tensor_to_f32(*sg.x)) sum_x += static_cast<double>(v) * v;
  double tap_sum = 0;
  for (double v : taps["w1.weight/cols"].column_sum_sq) tap_sum += v;
  EXPECT_NEAR(tap_sum, sum_x, 1e-9 * sum_x);
  // read_taps reset them.
  auto again = sched.read_taps();
  EXPECT_EQ(again["hs"].stats.count, 0);
  EXPECT_EQ(again["w1.weight/cols"].rows, 0);
}

TEST(Scheduler, NoHostBackendIsAnError) {
  ShadowDevice dev;
  EXPECT_THROW(Scheduler(std::vector<Backend*>{&dev}), Error);
}

// ---------------------------------------------------------------------------
// Taps: CPU kernels against the host reference

struct TapCase {
  Graph g;
  Tensor* node = nullptr;
  Tensor* other = nullptr;
  std::vector<std::vector<float>> store;

  Tensor* leaf(std::initializer_list<int64_t> ne, std::mt19937& rng, const char* name, bool specials = false) {
    Tensor* t = g.new_tensor(DType::F32, ne, name);
    auto& v = store.emplace_back(t->nelements());
    std::normal_distribution<float> d(0.0f, 2.0f);
    for (float& x : v) x = d(rng);
    if (specials && v.size() > 10) {
      v[3] = std::numeric_limits<float>::quiet_NaN();
      v[7] = std::numeric_limits<float>::infinity();
      v[9] = -std::numeric_limits<float>::infinity();
    }
    t->data = v.data();
    return t;
  }
};

TEST(Taps, CpuKernelsEqualTheHostReference) {
  for (int nth : {1, 2, 3, 7}) {
    // Scalar and SIMD row kernels in turn (odd thread counts take the SIMD ones).
    const cpu::Isa isa = nth % 2 == 0 || !cpu::isa_supported(cpu::Isa::Avx2) ? cpu::Isa::Scalar : cpu::Isa::Avx2;
    auto cpu = cpu::make_cpu_backend(nth, isa);
    std::mt19937 rng(11 + nth);
    TapCase c;
    Tensor* w = c.leaf({37, 9}, rng, "w");
    Tensor* xt = c.leaf({13, 37}, rng, "xt");
    // Non-contiguous activations: a transposed view, made contiguous by no one.
    Tensor* x = transpose(c.g, xt);
    Tensor* mm = named(mul_mat(c.g, w, named(cont(c.g, x), "xc")), "mm");
    Tensor* a = c.leaf({29, 3, 2}, rng, "a", true);
    Tensor* b = c.leaf({29, 3, 2}, rng, "b");
    Tensor* sa = named(scale(c.g, a, 1.0f), "sa");
    Tensor* sb = named(scale(c.g, b, 1.0f), "sb");
    Tensor* pa = named(permute(c.g, sa, 1, 0, 2, 3), "pa");  // strided node for stats
    c.g.build(mm);
    c.g.build(sa);  // the second tensor of an error tap is computed first
    c.g.build(sb);
    c.g.build(pa);
    // The host reference reads every node after compute: keep them all.
    for (Tensor* t : c.g.nodes()) t->flags |= kFlagOutput;
    Scheduler sched(*cpu);
    sched.allocate(c.g);
    sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
      if (&t == mm) r.push_back({TapKind::ColumnSumSq, "cols"});
      if (&t == pa) r.push_back({TapKind::Stats, "stats"});
      if (&t == sb) r.push_back({TapKind::ErrorStats, "err", sa});
    });
    for (int rep = 0; rep < 2; ++rep) ASSERT_EQ(sched.compute(c.g), ComputeStatus::Done);
    auto taps = sched.read_taps();

    TapResult cols, stats, err;
    for (int rep = 0; rep < 2; ++rep) {
      tap_accumulate_host(TapKind::ColumnSumSq, *mm, nullptr, cols);
      tap_accumulate_host(TapKind::Stats, *pa, nullptr, stats);
      tap_accumulate_host(TapKind::ErrorStats, *sb, sa, err);
    }
    EXPECT_EQ(taps["cols"].column_sum_sq, cols.column_sum_sq) << nth;  // same order per column: exact
    EXPECT_EQ(taps["cols"].rows, 2 * 13);
    const NodeStats& s = taps["stats"].stats;
    EXPECT_EQ(s.count, stats.stats.count);
    EXPECT_EQ(s.nan, 2);
    EXPECT_EQ(s.inf, 4);
    EXPECT_EQ(s.min, stats.stats.min);
    EXPECT_EQ(s.max, stats.stats.max);
    EXPECT_NEAR(s.sum, stats.stats.sum, 1e-12 * stats.stats.sum_sq);
    EXPECT_NEAR(s.sum_sq, stats.stats.sum_sq, 1e-12 * stats.stats.sum_sq);
    const ErrorStats& e = taps["err"].error;
    EXPECT_EQ(e.count, err.error.count);
    EXPECT_EQ(e.non_finite, 6);
    EXPECT_NEAR(e.sum_sq_diff, err.error.sum_sq_diff, 1e-12 * err.error.sum_sq_diff);
    EXPECT_NEAR(e.sum_ab, err.error.sum_ab, 1e-12 * err.error.sum_sq_a);
    EXPECT_EQ(e.max_abs_diff, err.error.max_abs_diff);
    EXPECT_EQ(e.row_nmse.counts, err.error.row_nmse.counts);  // same rows, same buckets
    EXPECT_EQ(e.row_nmse.total(), 3 * 2 * 2u);                 // rows x 2 computes
  }
}

TEST(Taps, ColumnSumsEqualTheCallbackPathOnAModel) {
  auto m = Model::load(tiny_model_path());
  const auto tokens = some_tokens(*m, 40);
  ContextOptions opt;
  opt.n_ctx = 64;
  opt.n_batch = 16;
  opt.n_threads = 2;
  auto is_weight_matmul = [](const Tensor& t) {
    return t.op == Op::MulMat && t.src[0] && (t.src[0]->flags & kFlagWeight);
  };

  Context by_taps(*m, opt);
  by_taps.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
    if (is_weight_matmul(t)) r.push_back({TapKind::ColumnSumSq, t.src[0]->name});
  });
  ASSERT_TRUE(by_taps.decode(tokens, true));
  auto taps = by_taps.read_taps();

  Context by_callback(*m, opt);
  std::map<std::string, TapResult> host;
  by_callback.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask) return is_weight_matmul(t);
    TapResult& r = host[t.src[0]->name];
    tap_accumulate_values(TapKind::ColumnSumSq, tensor_to_f32(*t.src[1]), t.src[1]->ne[0], nullptr, r);
    r.kind = TapKind::ColumnSumSq;
    return true;
  });
  ASSERT_TRUE(by_callback.decode(tokens, true));

  ASSERT_EQ(taps.size(), host.size());
  ASSERT_GE(taps.size(), 7u * static_cast<size_t>(m->hparams().n_layer));
  for (const auto& [name, r] : host) {
    ASSERT_TRUE(taps.count(name)) << name;
    EXPECT_EQ(taps[name].rows, r.rows) << name;
    EXPECT_EQ(taps[name].column_sum_sq, r.column_sum_sq) << name;
  }
}

}  // namespace
}  // namespace qlens

namespace qlens {
namespace {

// A model offloaded to the simulated device, wholly and in part: the same
// logits as on the CPU (the device runs the reference kernels, so up to
// float rounding), and the splits are where the layers are.
TEST(Offload, ModelOnASimulatedDeviceMatchesTheCpu) {
  auto m = Model::load(tiny_model_path());
  const auto tokens = some_tokens(*m, 21);
  ContextOptions opt;
  opt.n_ctx = 64;
  opt.n_batch = 8;
  opt.n_threads = 2;
  // The reference kernels do not round as ggml does; neither does the CPU here.
  opt.cpu.ggml_rounding = false;
  Context cpu(*m, opt);
  ASSERT_TRUE(cpu.decode(tokens, true));
  const int64_t n_layer = m->hparams().n_layer;
  for (int ngl : {-1, 1, 0}) {
    ShadowDevice dev;
    ContextOptions o = opt;
    o.device_backend = &dev;
    o.n_gpu_layers = ngl;
    Context ctx(*m, o);
    EXPECT_EQ(ctx.n_offloaded_layers(), ngl < 0 ? n_layer : ngl);
    ASSERT_TRUE(ctx.decode(tokens, true));
    double err = 0, ref = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto a = cpu.logits(static_cast<int64_t>(i)), b = ctx.logits(static_cast<int64_t>(i));
      for (size_t j = 0; j < a.size(); ++j) {
        err += (a[j] - b[j]) * double(a[j] - b[j]);
        ref += a[j] * double(a[j]);
      }
    }
    EXPECT_LE(err / ref, 1e-8) << "ngl " << ngl;  // reference vs SIMD kernels: float rounding
    // Projections run where their layer's weights are.
    const std::string last = std::to_string(n_layer - 1);
    EXPECT_EQ(dev.ran.count("Qcur-" + last), ngl != 0 ? 1u : 0u) << ngl;
    EXPECT_EQ(dev.ran.count("ffn_out-0"), ngl < 0 || ngl >= n_layer ? 1u : 0u) << ngl;
    EXPECT_EQ(dev.ran.count("result_output"), ngl < 0 ? 1u : 0u) << ngl;
    EXPECT_EQ(dev.ran.count("kq_soft_max-0"), 0u);  // not supported there: on the CPU
  }
}

}  // namespace
}  // namespace qlens

namespace qlens {
namespace {

TEST(LogHistogram, BucketsAndQuantilesWithinTheirRelativeAccuracy) {
  LogHistogram h;
  EXPECT_EQ(h.quantile(0.5), 0.0);  // empty
  h.add(0.0);
  h.add(-1.0);
  EXPECT_EQ(h.counts[0], 2u);
  LogHistogram g;
  std::vector<double> values;
  for (int i = 1; i <= 1000; ++i) values.push_back(1e-6 * i * i);
  for (double v : values) g.add(v);
  EXPECT_EQ(g.total(), 1000u);
  for (double q : {0.01, 0.1, 0.5, 0.9, 0.99, 1.0}) {
    const double exact = values[static_cast<size_t>(std::ceil(q * 1000)) - 1];
    const double got = g.quantile(q);
    EXPECT_LE(std::fabs(std::log2(got / exact)), 1.0 / 16 + 1e-12) << q << ": " << got << " vs " << exact;
  }
  LogHistogram a, b;
  for (size_t i = 0; i < values.size(); ++i) (i % 2 ? a : b).add(values[i]);
  a.merge(b);
  EXPECT_EQ(a.counts, g.counts);
  EXPECT_EQ(LogHistogram::bucket(std::nan("")), LogHistogram::kBuckets - 1);
  EXPECT_EQ(LogHistogram::bucket(1e300), LogHistogram::kBuckets - 1);
}

}  // namespace
}  // namespace qlens
