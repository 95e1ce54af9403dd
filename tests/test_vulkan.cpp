// The Vulkan backend op by op: each op on many shapes (odd sizes, batch
// dims, permuted / transposed / strided views) runs through
// Scheduler({&vulkan, &reference}) and is compared with the reference
// backend alone. Also weights resident in device memory, the taps, the
// observe callback, the CPU fallback for unsupported ops, and errors.
//
// Bounds (got = Vulkan, ref = reference, which sums in double):
//  - NMSE = sum (got - ref)^2 / sum ref^2 <= 1e-7 for every op and every
//    weight type of mul_mat / get_rows (kWeightTypes: F32, F16, BF16, the
//    legacy quants, IQ4_NL, the K-quants Q2_K..Q6_K and IQ4_XS). The
//    backend dequantizes weights exactly and keeps activations in F32 (no
//    activation quantization), so a quantized or half weight costs no more
//    than an F32 one: the only differences are float rounding of the sums
//    (and of exp/sin/cos). Figures seen on lavapipe are printed ("nmse").
//  - Cpy and Cont round once per element as the reference does: bitwise.
//  - Taps: ColumnSumSq within 1e-5 relative of the host reference (1e-12
//    seen, in double); Stats and ErrorStats within 1e-9 relative, counts exact.
// Every test skips when qlens::vulkan::devices() is empty.
#include <gtest/gtest.h>

#ifdef QLENS_VULKAN

#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "backend/vulkan/vulkan_backend.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/sched.h"
#include "qlens/tensor.h"

namespace qlens {
namespace {

// One backend for the whole suite: pipelines are built once.
Backend* vulkan_backend() {
  static std::unique_ptr<Backend> backend = vulkan::devices().empty() ? nullptr : vulkan::make_backend(0);
  return backend.get();
}

Backend& reference() {
  static std::unique_ptr<Backend> backend = make_reference_backend();
  return *backend;
}

#define REQUIRE_VULKAN()                                                                          \
  if (!vulkan_backend())                                                                          \
  GTEST_SKIP() << "no Vulkan device (install a driver, e.g. mesa-vulkan-drivers for lavapipe)"

// Leaves with random data from a seed, so that two graphs built with the same
// seed get the same inputs. Leaves live in host memory unless `device` is
// given (then in a buffer of that backend).
class Leaves {
 public:
  explicit Leaves(uint32_t seed, Backend* device = nullptr) : rng_(seed), device_(device) {}

  Tensor* random(Graph& g, DType type, std::array<int64_t, 4> ne, float scale = 1.0f, bool in_device = false) {
    Tensor* t = g.new_tensor(type, ne, "leaf" + std::to_string(++count_));
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(t->nelements());
    for (float& x : v) x = d(rng_);
    const TypeTraits& tt = type_traits(type);
    std::vector<char> bytes(t->nbytes());
    tt.from_float(v.data(), bytes.data(), t->nelements());
    place(*t, bytes, in_device);
    return t;
  }

  Tensor* indices(Graph& g, std::vector<int32_t> values) {
    Tensor* t = g.new_tensor(DType::I32, {static_cast<int64_t>(values.size())}, "idx" + std::to_string(++count_));
    std::vector<char> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    place(*t, bytes, false);
    return t;
  }

 private:
  void place(Tensor& t, const std::vector<char>& bytes, bool in_device) {
    if (in_device && device_) {
      auto& buf = buffers_.emplace_back(device_->alloc_buffer(bytes.size()));
      t.buffer = buf.get();
      t.data = buf->base();
      tensor_write(t, bytes.data(), 0, bytes.size());
    } else {
      t.data = storage_.emplace_back(bytes).data();
    }
  }

  std::mt19937 rng_;
  Backend* device_;
  int count_ = 0;
  std::deque<std::vector<char>> storage_;
  std::deque<std::unique_ptr<Buffer>> buffers_;
};

using Build = std::function<std::vector<Tensor*>(Graph&, Leaves&)>;

double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

// Runs `build` on Vulkan (+ reference fallback) and on the reference alone;
// checks every computing node ran on Vulkan (unless `on_vulkan` is false) and
// returns the worst NMSE. `bitwise` asks for identical values.
double compare(const std::string& what, const Build& build, bool bitwise = false, bool on_vulkan = true) {
  constexpr uint32_t kSeed = 1234;
  Graph g_vk, g_ref;
  Leaves l_vk(kSeed, vulkan_backend()), l_ref(kSeed);
  const auto outs_vk = build(g_vk, l_vk);
  const auto outs_ref = build(g_ref, l_ref);
  for (Tensor* t : outs_vk) g_vk.build(t), t->flags |= kFlagOutput;
  for (Tensor* t : outs_ref) g_ref.build(t), t->flags |= kFlagOutput;
  Scheduler both({vulkan_backend(), &reference()});
  both.allocate(g_vk);
  EXPECT_EQ(both.compute(g_vk), ComputeStatus::Done);
  Scheduler alone(reference());
  alone.allocate(g_ref);
  alone.compute(g_ref);
  if (on_vulkan) {
    for (const Tensor* n : g_vk.nodes())  // views of host leaves stay with their leaf: no work anyway
      if (!op_is_view(n->op)) {
        EXPECT_EQ(both.backend_of(*n), vulkan_backend()) << what << ": node '" << n->name << "' ran elsewhere";
      }
  }
  double worst = 0;
  for (size_t i = 0; i < outs_vk.size(); ++i) {
    const std::vector<float> got = tensor_to_f32(*outs_vk[i]), ref = tensor_to_f32(*outs_ref[i]);
    EXPECT_EQ(got.size(), ref.size());
    if (bitwise) {
      for (size_t k = 0; k < ref.size(); ++k)
        if (!(got[k] == ref[k] || (std::isnan(got[k]) && std::isnan(ref[k])))) {
          ADD_FAILURE() << what << ": element " << k << " is " << got[k] << ", expected " << ref[k];
          break;
        }
    }
    worst = std::max(worst, nmse(got, ref));
  }
  std::printf("  %-58s nmse %.2e\n", what.c_str(), worst);
  EXPECT_LE(worst, 1e-7) << what;
  return worst;
}

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                              DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q2_K,
                              DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS};
std::map<DType, double> g_worst;  // per weight type, over mul_mat and get_rows: printed by MulMatAllTypesAndShapes

// " Q8_0" (built by appending: GCC 12 warns falsely on "literal" + string).
std::string type_label(DType t) {
  std::string s = " ";
  s += type_name(t);
  return s;
}

std::string label(const char* op, std::array<int64_t, 4> ne, const std::string& extra = "") {
  return std::string(op) + " {" + std::to_string(ne[0]) + "," + std::to_string(ne[1]) + "," + std::to_string(ne[2]) +
         "," + std::to_string(ne[3]) + "}" + extra;
}

TEST(Vulkan, ListsDevicesAndRejectsBadIndex) {
  const auto devs = vulkan::devices();
  if (devs.empty()) GTEST_SKIP() << "no Vulkan device (install a driver, e.g. mesa-vulkan-drivers for lavapipe)";
  for (size_t i = 0; i < devs.size(); ++i) {
    EXPECT_EQ(devs[i].id, "vulkan:" + std::to_string(i));
    EXPECT_FALSE(devs[i].name.empty());
    EXPECT_FALSE(devs[i].kind.empty());
    std::printf("  %s: %s, %s, %.1f GiB\n", devs[i].id.c_str(), devs[i].name.c_str(), devs[i].kind.c_str(),
                devs[i].memory_bytes / 1073741824.0);
  }
  EXPECT_EQ(list_devices().size(), devs.size() + 1);
  try {
    vulkan::make_backend(99);
    ADD_FAILURE() << "make_backend(99) did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vulkan:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_backend("vulkan:99"), Error);
  EXPECT_NE(make_backend("vulkan:0"), nullptr);
}

TEST(Vulkan, AddMulBroadcast) {
  REQUIRE_VULKAN();
  const std::array<std::array<int64_t, 4>, 2> cases[] = {
      {{{1, 1, 1, 1}, {1, 1, 1, 1}}},   {{{33, 7, 3, 2}, {33, 1, 3, 1}}}, {{{257, 3, 1, 1}, {257, 1, 1, 1}}},
      {{{7, 5, 4, 1}, {1, 5, 1, 1}}},   {{{64, 9, 2, 3}, {64, 9, 2, 3}}}, {{{4096, 3, 1, 1}, {4096, 3, 1, 1}}},
  };
  for (const auto& [na, nb] : cases)
    for (Op op : {Op::Add, Op::Mul})
      compare(label(op == Op::Add ? "add" : "mul", na) + " b " + label("", nb), [&](Graph& g, Leaves& l) {
        Tensor* a = l.random(g, DType::F32, na);
        Tensor* b = l.random(g, DType::F32, nb);
        return std::vector<Tensor*>{op == Op::Add ? add(g, a, b) : mul(g, a, b)};
      }, true);
}

TEST(Vulkan, ElementwiseOnViews) {
  REQUIRE_VULKAN();
  compare("add of permuted + transposed", [](Graph& g, Leaves& l) {
    Tensor* a = permute(g, l.random(g, DType::F32, {5, 7, 3, 1}), 0, 2, 1, 3);  // {5,3,7}
    Tensor* b = transpose(g, l.random(g, DType::F32, {3, 5, 1, 1}));          // {5,3}
    return std::vector<Tensor*>{add(g, a, b), mul(g, a, b)};
  }, true);
  compare("scale, silu of a strided view", [](Graph& g, Leaves& l) {
    Tensor* x = l.random(g, DType::F32, {40, 9, 1, 1}, 3.0f);
    Tensor* v = view(g, x, {13, 9}, {40 * sizeof(float)}, 8 * sizeof(float));
    return std::vector<Tensor*>{scale(g, v, -0.37f), silu(g, v), silu(g, transpose(g, v))};
  });
  for (auto ne : {std::array<int64_t, 4>{1, 1, 1, 1}, {257, 3, 1, 1}, {33, 7, 3, 2}})
    compare(label("scale+silu", ne), [&](Graph& g, Leaves& l) {
      Tensor* x = l.random(g, DType::F32, ne, 4.0f);
      return std::vector<Tensor*>{scale(g, x, 0.125f), silu(g, x)};
    });
}

TEST(Vulkan, RmsNorm) {
  REQUIRE_VULKAN();
  for (auto ne : {std::array<int64_t, 4>{1, 1, 1, 1}, {7, 3, 1, 1}, {257, 5, 2, 1}, {4096, 3, 1, 1}, {33, 2, 3, 2}})
    compare(label("rms_norm", ne), [&](Graph& g, Leaves& l) {
      return std::vector<Tensor*>{rms_norm(g, l.random(g, DType::F32, ne), 1e-5f)};
    });
  compare("rms_norm of transposed", [](Graph& g, Leaves& l) {
    return std::vector<Tensor*>{rms_norm(g, transpose(g, l.random(g, DType::F32, {6, 37, 1, 1})), 1e-6f)};
  });
}

TEST(Vulkan, SoftMax) {
  REQUIRE_VULKAN();
  for (auto ne : {std::array<int64_t, 4>{1, 1, 1, 1}, {7, 3, 1, 1}, {257, 5, 4, 1}, {33, 8, 3, 2}}) {
    compare(label("soft_max", ne), [&](Graph& g, Leaves& l) {
      return std::vector<Tensor*>{soft_max(g, l.random(g, DType::F32, ne, 3.0f), nullptr, 0.7f)};
    });
    compare(label("soft_max masked", ne), [&](Graph& g, Leaves& l) {
      Tensor* a = l.random(g, DType::F32, ne, 3.0f);
      // A causal mask over a larger row count, broadcast over heads; row 0
      // fully masked where it is wider than one column.
      Tensor* mask = g.new_tensor(DType::F32, {ne[0], ne[1] + 2});
      auto* m = static_cast<float*>(l.random(g, DType::F32, {ne[0], ne[1] + 2, 1, 1})->data);
      for (int64_t r = 0; r < ne[1] + 2; ++r)
        for (int64_t c = 0; c < ne[0]; ++c) m[r * ne[0] + c] = (r == 0 && ne[0] > 1) || c > r + 1 ? -INFINITY : 0.1f * c;
      mask->data = m;
      return std::vector<Tensor*>{soft_max(g, a, mask, 0.125f)};
    });
  }
  compare("soft_max of permuted", [](Graph& g, Leaves& l) {
    return std::vector<Tensor*>{soft_max(g, permute(g, l.random(g, DType::F32, {9, 4, 5, 1}), 0, 2, 1, 3), nullptr, 1.0f)};
  });
}

TEST(Vulkan, Rope) {
  REQUIRE_VULKAN();
  struct Case {
    std::array<int64_t, 4> ne;
    int n_dims;
    RopeMode mode;
  };
  for (const Case& c : {Case{{64, 4, 5, 1}, 64, RopeMode::Normal}, Case{{64, 4, 5, 1}, 64, RopeMode::NeoX},
                        Case{{6, 3, 7, 1}, 4, RopeMode::Normal}, Case{{10, 1, 3, 1}, 6, RopeMode::NeoX},
                        Case{{128, 2, 33, 1}, 96, RopeMode::NeoX}})
    compare(label("rope", c.ne, c.mode == RopeMode::NeoX ? " neox" : " normal"), [&](Graph& g, Leaves& l) {
      std::vector<int32_t> pos(c.ne[2]);
      for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i * 97 + 3);  // up to ~3000
      Tensor* x = l.random(g, DType::F32, c.ne);
      Tensor* p = l.indices(g, pos);
      return std::vector<Tensor*>{rope(g, x, p, c.n_dims, c.mode, 10000.0f, 0.5f)};
    });
  compare("rope of a permuted source", [](Graph& g, Leaves& l) {
    Tensor* x = permute(g, l.random(g, DType::F32, {16, 5, 3, 1}), 0, 2, 1, 3);  // {16,3,5}
    return std::vector<Tensor*>{rope(g, x, l.indices(g, {0, 1, 2, 500, 7}), 16, RopeMode::Normal, 500000.0f, 1.0f)};
  });
}

TEST(Vulkan, CpyIntoDeviceCacheAndCont) {
  REQUIRE_VULKAN();
  for (DType ct : {DType::F32, DType::F16, DType::BF16}) {
    const std::string tn(type_name(ct));
    // The KV cache pattern: keys as token rows, values transposed, into a
    // cache that lives in device memory; then views that read it back.
    compare("cpy k/v into " + tn + " cache", [&](Graph& g, Leaves& l) {
      const int64_t D = 8, H = 2, N = 3, ctx = 7, past = 2;
      const size_t es = type_traits(ct).block_bytes;
      Tensor* ck = l.random(g, ct, {D * H * ctx, 1, 1, 1}, 1.0f, true);
      Tensor* cv = l.random(g, ct, {D * H * ctx, 1, 1, 1}, 1.0f, true);
      Tensor* k = l.random(g, DType::F32, {D, H, N, 1});
      Tensor* v = l.random(g, DType::F32, {D * H, N, 1, 1});
      Tensor* kd = view(g, ck, {N * D * H}, {}, past * D * H * es);
      Tensor* vd = view(g, cv, {N, D * H}, {ctx * es}, past * es);
      Tensor* ks = cpy(g, k, kd);
      Tensor* vs = cpy(g, transpose(g, v), vd);
      Tensor* kc = view(g, ck, {D, past + N, H}, {D * H * es, D * es}, 0);
      Tensor* vc = view(g, cv, {past + N, D, H}, {ctx * es, ctx * D * es}, 0);
      kc->src[1] = ks;
      vc->src[1] = vs;
      return std::vector<Tensor*>{ks, vs, cont(g, kc), cont(g, vc)};
    }, true);
    compare("cont of permuted " + tn, [&](Graph& g, Leaves& l) {
      Tensor* x = l.random(g, ct, {5, 7, 3, 2});
      return std::vector<Tensor*>{cont(g, permute(g, x, 2, 0, 3, 1)), cont(g, transpose(g, x))};
    }, true);
  }
  for (DType from : {DType::F16, DType::BF16})
    compare("cpy " + std::string(type_name(from)) + " -> f32 device cache", [&](Graph& g, Leaves& l) {
      Tensor* dst = l.random(g, DType::F32, {7, 3, 1, 1}, 1.0f, true);
      return std::vector<Tensor*>{cpy(g, transpose(g, l.random(g, from, {3, 7, 1, 1})), dst)};
    }, true);
}

TEST(Vulkan, GetRows) {
  REQUIRE_VULKAN();
  for (DType t : kWeightTypes)
    for (int64_t K : {1, 7, 33, 257, 32, 288, 256, 512}) {
      if (K % type_traits(t).block_size != 0) continue;
      double& worst = g_worst[t];
      worst = std::max(worst, compare(label("get_rows", {K, 11, 1, 1}, type_label(t)), [&](Graph& g, Leaves& l) {
        Tensor* a = l.random(g, t, {K, 11, 1, 1});
        return std::vector<Tensor*>{get_rows(g, a, l.indices(g, {3, 0, 10, 3, 7}))};
      }, true));
    }
}

TEST(Vulkan, MulMatAllTypesAndShapes) {
  REQUIRE_VULKAN();
  for (DType t : kWeightTypes) {
    const int64_t bs = type_traits(t).block_size;
    double& worst = g_worst[t];
    // N <= 8: the matrix-vector path; N > 8: the tiled one (odd M and N at the tile edges).
    for (int64_t K : bs == 1 ? std::vector<int64_t>{1, 7, 33, 257}
                   : bs == 32 ? std::vector<int64_t>{32, 96, 288} : std::vector<int64_t>{256, 512})
      for (int64_t M : {1, 3, 71})
        for (int64_t N : {1, 2, 8, 9, 33, 130}) {
          if (M == 71 && K > 100 && N > 33) continue;  // keep the reference quick
          worst = std::max(worst, compare(label("mul_mat", {K, M, N, 1}, type_label(t)), [&](Graph& g, Leaves& l) {
            Tensor* a = l.random(g, t, {K, M, 1, 1});  // drawn before b: both graphs get the same data
            return std::vector<Tensor*>{mul_mat(g, a, l.random(g, DType::F32, {K, N, 1, 1}))};
          }));
        }
    // Long rows: the float sums' rounding grows with K.
    worst = std::max(worst, compare(label("mul_mat", {4096, 67, 12, 1}, type_label(t)), [&](Graph& g, Leaves& l) {
      Tensor* a = l.random(g, t, {4096, 67, 1, 1});
      return std::vector<Tensor*>{mul_mat(g, a, l.random(g, DType::F32, {4096, 12, 1, 1}))};
    }));
    // Broadcast over dims 2 and 3, both paths.
    const int64_t Kb = std::max<int64_t>(64, bs);
    for (int64_t N : {3, 40})
      worst = std::max(worst, compare(label("mul_mat broadcast", {Kb, 5, N, 1}, type_label(t)), [&](Graph& g, Leaves& l) {
        Tensor* a = l.random(g, t, {Kb, 5, 2, 1});
        Tensor* b = l.random(g, DType::F32, {Kb, N, 6, 2});
        return std::vector<Tensor*>{mul_mat(g, a, b)};
      }));
  }
  for (const auto& [t, w] : g_worst)
    std::printf("  worst nmse %-7s %.2e (mul_mat, get_rows)\n", std::string(type_name(t)).c_str(), w);
}

TEST(Vulkan, MulMatAttentionViews) {
  REQUIRE_VULKAN();
  // kq = K·Q and kqv = V·softmax with the llama graph's views: a cache view
  // of keys, permuted queries, a transposed view of values.
  for (DType ct : {DType::F32, DType::F16, DType::BF16})
    for (int64_t N : {1, 5, 20}) {
      compare("attention views " + std::string(type_name(ct)) + " N=" + std::to_string(N), [&](Graph& g, Leaves& l) {
        const int64_t D = 16, H = 3, ctx = 40, n_kv = 11 + N;
        const size_t es = type_traits(ct).block_bytes;
        Tensor* ck = l.random(g, ct, {D * H * ctx, 1, 1, 1});
        Tensor* cv = l.random(g, ct, {D * H * ctx, 1, 1, 1});
        Tensor* q = l.random(g, DType::F32, {D, H, N, 1});
        Tensor* kc = view(g, ck, {D, n_kv, H}, {D * H * es, D * es}, 0);
        Tensor* vc = view(g, cv, {n_kv, D, H}, {ctx * es, ctx * D * es}, 0);
        Tensor* kq = soft_max(g, mul_mat(g, kc, permute(g, q, 0, 2, 1, 3)), nullptr, 0.25f);
        Tensor* kqv = mul_mat(g, vc, kq);
        return std::vector<Tensor*>{kq, cont(g, permute(g, kqv, 0, 2, 1, 3))};
      });
    }
}

// One llama layer as build_graph makes it (grouped-query attention, rope,
// an F16 KV cache in device memory written by cpy and read through views,
// masked softmax, SwiGLU), on 4 new tokens after 3 cached ones.
TEST(Vulkan, LlamaLayer) {
  REQUIRE_VULKAN();
  for (int64_t N : {4, 1})
    compare("llama layer, N=" + std::to_string(N), [&](Graph& g, Leaves& l) {
      const int64_t E = 64, H = 4, Hkv = 2, D = 16, F = 96, ctx = 12, past = 3, n_kv = past + N;
      const DType ct = DType::F16;
      const size_t es = 2, k_row = Hkv * D * es;
      Tensor* ck = l.random(g, ct, {Hkv * D * ctx, 1, 1, 1}, 1.0f, true);
      Tensor* cv = l.random(g, ct, {Hkv * D * ctx, 1, 1, 1}, 1.0f, true);
      Tensor* embd = l.random(g, DType::Q8_0, {E, 50, 1, 1});
      Tensor* wq = l.random(g, DType::Q4_0, {E, E, 1, 1}, 0.2f);
      Tensor* wk = l.random(g, DType::Q8_0, {E, Hkv * D, 1, 1}, 0.2f);
      Tensor* wv = l.random(g, DType::F16, {E, Hkv * D, 1, 1}, 0.2f);
      Tensor* wo = l.random(g, DType::BF16, {E, E, 1, 1}, 0.2f);
      Tensor* wg = l.random(g, DType::Q8_0, {E, F, 1, 1}, 0.2f);
      Tensor* wu = l.random(g, DType::Q4_0, {E, F, 1, 1}, 0.2f);
      Tensor* wd = l.random(g, DType::F32, {F, E, 1, 1}, 0.2f);
      Tensor* norm_w = l.random(g, DType::F32, {E, 1, 1, 1});
      std::vector<int32_t> tokens, positions;
      for (int64_t i = 0; i < N; ++i) tokens.push_back(static_cast<int32_t>((i * 17 + 5) % 50));
      for (int64_t i = 0; i < N; ++i) positions.push_back(static_cast<int32_t>(past + i));
      Tensor* tok = l.indices(g, tokens);
      Tensor* pos = l.indices(g, positions);
      Tensor* mask = l.random(g, DType::F32, {n_kv, N, 1, 1});
      auto* m = static_cast<float*>(mask->data);
      for (int64_t j = 0; j < N; ++j)
        for (int64_t i = 0; i < n_kv; ++i) m[j * n_kv + i] = i > past + j ? -INFINITY : 0.0f;

      Tensor* x = get_rows(g, embd, tok);
      Tensor* cur = mul(g, rms_norm(g, x, 1e-5f), norm_w);
      Tensor* q = rope(g, reshape(g, mul_mat(g, wq, cur), {D, H, N}), pos, D, RopeMode::Normal, 10000.0f, 1.0f);
      Tensor* k = rope(g, reshape(g, mul_mat(g, wk, cur), {D, Hkv, N}), pos, D, RopeMode::Normal, 10000.0f, 1.0f);
      Tensor* v = mul_mat(g, wv, cur);
      Tensor* ks = cpy(g, k, view(g, ck, {N * Hkv * D}, {}, past * k_row));
      Tensor* vs = cpy(g, transpose(g, v), view(g, cv, {N, Hkv * D}, {ctx * es}, past * es));
      Tensor* kc = view(g, ck, {D, n_kv, Hkv}, {k_row, D * es}, 0);
      Tensor* vc = view(g, cv, {n_kv, D, Hkv}, {ctx * es, ctx * D * es}, 0);
      kc->src[1] = ks;
      vc->src[1] = vs;
      Tensor* kq = soft_max(g, mul_mat(g, kc, permute(g, q, 0, 2, 1, 3)), mask, 0.25f);
      Tensor* merged = cont(g, permute(g, mul_mat(g, vc, kq), 0, 2, 1, 3));
      Tensor* attn = add(g, mul_mat(g, wo, reshape(g, merged, {E, N})), x);
      Tensor* h = mul(g, rms_norm(g, attn, 1e-5f), norm_w);
      Tensor* ffn = mul_mat(g, wd, mul(g, silu(g, mul_mat(g, wg, h)), mul_mat(g, wu, h)));
      return std::vector<Tensor*>{add(g, ffn, attn), cont(g, kc), cont(g, vc)};
    });
}

TEST(Vulkan, WeightsInDeviceMemoryNeedNoCopy) {
  REQUIRE_VULKAN();
  for (DType t : {DType::Q8_0, DType::F16}) {
    Graph g;
    Leaves l(5, vulkan_backend()), l_host(5);
    Tensor* w = l.random(g, t, {64, 40, 1, 1}, 1.0f, true);
    w->flags |= kFlagWeight;
    Tensor* x = l.random(g, DType::F32, {64, 6, 1, 1});
    Tensor* y = mul_mat(g, w, x);
    g.build(y);
    Scheduler sched({vulkan_backend(), &reference()});
    sched.allocate(g);
    sched.compute(g);
    EXPECT_EQ(sched.backend_of(*y), vulkan_backend());
    ASSERT_EQ(sched.splits().size(), 1u);
    for (const auto& [src, copy] : sched.splits()[0].copies) EXPECT_NE(src, w) << "the weights were copied";
    Graph g2;
    Tensor* w2 = l_host.random(g2, t, {64, 40, 1, 1});  // in the order of the first graph
    Tensor* y2 = mul_mat(g2, w2, l_host.random(g2, DType::F32, {64, 6, 1, 1}));
    g2.build(y2);
    Scheduler alone(reference());
    alone.allocate(g2);
    alone.compute(g2);
    EXPECT_LE(nmse(tensor_to_f32(*y), tensor_to_f32(*y2)), 1e-7);
  }
}

TEST(Vulkan, UnsupportedOpFallsBackToTheCpu) {
  REQUIRE_VULKAN();
  Graph probe;
  for (DType t : {DType::Q8_1, DType::Q8_K}) {  // readable types no shader reads
    Tensor* a = probe.new_tensor(t, {256, 3});
    EXPECT_FALSE(vulkan_backend()->supports_op(*mul_mat(probe, a, probe.new_tensor(DType::F32, {256, 2}))));
    EXPECT_FALSE(vulkan_backend()->supports_op(*get_rows(probe, a, probe.new_tensor(DType::I32, {2}))));
  }
  compare("Q8_1 mul_mat (on the CPU) between Vulkan ops", [](Graph& g, Leaves& l) {
    Tensor* x = rms_norm(g, l.random(g, DType::F32, {64, 5, 1, 1}), 1e-5f);
    Tensor* y = mul_mat(g, l.random(g, DType::Q8_1, {64, 9, 1, 1}), x);
    return std::vector<Tensor*>{silu(g, y)};
  }, false, false);
}

// A graph whose nodes run on Vulkan with the taps of each kind, run twice.
struct TapGraph {
  Graph g;
  Leaves leaves{77, vulkan_backend()};
  Tensor *x, *y, *z, *other;
  TapGraph() {
    x = permute(g, leaves.random(g, DType::F32, {64, 3, 5, 1}), 0, 2, 1, 3);  // activations {64,5,3}
    Tensor* w = leaves.random(g, DType::Q8_0, {64, 20, 1, 1});
    y = named(mul_mat(g, w, x), "y");                                         // {20,5,3}
    z = named(silu(g, y), "z");
    other = leaves.random(g, DType::F32, {20, 5, 3, 1}, 1.0f, true);          // in device memory
    g.build(z);
  }
};

TEST(Vulkan, TapsMatchTheHostReference) {
  REQUIRE_VULKAN();
  TapGraph tg;
  Scheduler sched({vulkan_backend(), &reference()});
  sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
    if (&t == tg.y) r.push_back({TapKind::ColumnSumSq, "imatrix", nullptr});
    if (&t == tg.z) r.push_back({TapKind::Stats, "stats", nullptr});
    if (&t == tg.z) r.push_back({TapKind::ErrorStats, "error", tg.other});
  });
  sched.allocate(tg.g);
  int calls = 0;
  // The observe callback on a Vulkan node: y is read back after its call.
  std::vector<float> y_seen;
  sched.set_observe_callback([&](const Tensor& t, bool ask) {
    if (ask) return &t == tg.y;
    y_seen = tensor_to_f32(t);
    ++calls;
    return true;
  });
  TapResult want_cols, want_stats, want_error;
  for (int run = 0; run < 2; ++run) {
    ASSERT_EQ(sched.compute(tg.g), ComputeStatus::Done);
    EXPECT_EQ(sched.backend_of(*tg.z), vulkan_backend());
    const std::vector<float> x = tensor_to_f32(*tg.x), z = tensor_to_f32(*tg.z), o = tensor_to_f32(*tg.other);
    EXPECT_EQ(y_seen, tensor_to_f32(*tg.y));
    tap_accumulate_values(TapKind::ColumnSumSq, x, 64, nullptr, want_cols);
    tap_accumulate_values(TapKind::Stats, z, 20, nullptr, want_stats);
    tap_accumulate_values(TapKind::ErrorStats, z, 20, &o, want_error);
  }
  EXPECT_EQ(calls, 2);
  auto taps = sched.read_taps(true);
  const TapResult& cols = taps.at("imatrix");
  ASSERT_EQ(cols.column_sum_sq.size(), 64u);
  EXPECT_EQ(cols.rows, want_cols.rows);
  double worst = 0;
  for (size_t k = 0; k < 64; ++k)
    worst = std::max(worst, std::fabs(cols.column_sum_sq[k] - want_cols.column_sum_sq[k]) / want_cols.column_sum_sq[k]);
  std::printf("  column_sum_sq worst relative difference %.2e\n", worst);
  EXPECT_LE(worst, 1e-5);
  const NodeStats& s = taps.at("stats").stats;
  EXPECT_EQ(s.count, want_stats.stats.count);
  EXPECT_EQ(s.nan, 0);
  EXPECT_EQ(s.inf, 0);
  EXPECT_DOUBLE_EQ(s.min, want_stats.stats.min);
  EXPECT_DOUBLE_EQ(s.max, want_stats.stats.max);
  EXPECT_NEAR(s.sum, want_stats.stats.sum, 1e-9 * std::fabs(want_stats.stats.sum_sq));
  EXPECT_NEAR(s.sum_sq, want_stats.stats.sum_sq, 1e-9 * want_stats.stats.sum_sq);
  const ErrorStats& e = taps.at("error").error;
  EXPECT_EQ(e.count, want_error.error.count);
  EXPECT_EQ(e.non_finite, 0);
  EXPECT_NEAR(e.sum_sq_diff, want_error.error.sum_sq_diff, 1e-9 * want_error.error.sum_sq_diff);
  EXPECT_NEAR(e.sum_sq_a, want_error.error.sum_sq_a, 1e-9 * want_error.error.sum_sq_a);
  EXPECT_NEAR(e.sum_sq_b, want_error.error.sum_sq_b, 1e-9 * want_error.error.sum_sq_b);
  EXPECT_NEAR(e.sum_ab, want_error.error.sum_ab, 1e-9 * want_error.error.sum_sq_a);
  EXPECT_DOUBLE_EQ(e.max_abs_diff, want_error.error.max_abs_diff);
  // Reset: nothing accumulated after.
  taps = sched.read_taps(true);
  EXPECT_EQ(taps.at("imatrix").rows, 0);
  EXPECT_EQ(taps.at("stats").stats.count, 0);
  EXPECT_EQ(taps.at("error").error.count, 0);
}

TEST(Vulkan, StatsCountNonFiniteValues) {
  REQUIRE_VULKAN();
  Graph g;
  Leaves l(3);
  Tensor* x = l.random(g, DType::F32, {300, 7, 1, 1});
  auto* v = static_cast<float*>(x->data);
  v[5] = NAN;
  v[100] = INFINITY;
  v[2000] = -INFINITY;
  Tensor* y = scale(g, x, 2.0f);
  g.build(y);
  Scheduler sched({vulkan_backend(), &reference()});
  sched.set_tap_selector([&](const Tensor& t, std::vector<TapRequest>& r) {
    if (&t == y) r.push_back({TapKind::Stats, "s", nullptr});
  });
  sched.allocate(g);
  sched.compute(g);
  TapResult want;
  tap_accumulate_values(TapKind::Stats, tensor_to_f32(*y), 300, nullptr, want);
  const NodeStats s = sched.read_taps().at("s").stats;
  EXPECT_EQ(s.count, want.stats.count);
  EXPECT_EQ(s.nan, 1);
  EXPECT_EQ(s.inf, 2);
  EXPECT_DOUBLE_EQ(s.max, want.stats.max);
  EXPECT_NEAR(s.sum_sq, want.stats.sum_sq, 1e-9 * want.stats.sum_sq);
}

TEST(Vulkan, BufferErrors) {
  REQUIRE_VULKAN();
  auto buf = vulkan_backend()->alloc_buffer(1024);
  EXPECT_FALSE(buf->is_host());
  std::vector<char> data(2048, 1);
  EXPECT_THROW(buf->write(512, data.data(), 1024), Error);
  EXPECT_THROW(buf->read(0, data.data(), 2048), Error);
  buf->write(100, "hello", 5);
  char back[5];
  buf->read(100, back, 5);
  EXPECT_EQ(std::string(back, 5), "hello");
  EXPECT_THROW(vulkan_backend()->alloc_buffer(size_t{1} << 50), Error);  // 1 PiB: out of memory, an Error
}

}  // namespace
}  // namespace qlens

#else  // !QLENS_VULKAN

TEST(Vulkan, NotBuilt) { GTEST_SKIP() << "built without Vulkan (QLENS_VULKAN=OFF)"; }

#endif
