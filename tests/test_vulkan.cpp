// The Vulkan backend op by op: each op on many shapes (odd sizes, batch
// dims, permuted / transposed / strided views) runs through
// Scheduler({&vulkan, &reference}) and is compared with the reference
// backend alone; the mixture-of-experts ops (mul_mat_id, argsort / top-k,
// batched get_rows, sum_rows, clamp, div) also as one MoE feed-forward block
// with every node on the device. Also weights resident in device memory and
// the CPU fallback for unsupported ops. The taps: test_vulkan_taps.cpp; errors:
// test_vulkan_errors.cpp.
//
// Bounds (got = Vulkan, ref = reference, which sums in double):
//  - NMSE = sum (got - ref)^2 / sum ref^2 <= 1e-7 for every op and every
//    weight type of mul_mat / mul_mat_id / get_rows (kWeightTypes: F32, F16, BF16, the
//    legacy quants, IQ4_NL, the K-quants Q2_K..Q6_K and IQ4_XS). The
//    backend dequantizes weights exactly and keeps activations in F32 (no
//    activation quantization), so a quantized or half weight costs no more
//    than an F32 one: the only differences are float rounding of the sums
//    (and of exp/sin/cos). Figures seen on lavapipe are printed ("nmse").
//  - Cpy and Cont round once per element as the reference does: bitwise;
//    so are Add, Mul, Clamp, GetRows (1-D and batched) and ArgSort (ties in
//    index order, as the reference's stable sort). Div is held to the NMSE
//    bound only (Vulkan allows 2.5 ulp; lavapipe's is exact), SumRows too
//    (float sums where the device has no shaderFloat64).
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

#include "vulkan_test_util.h"

namespace qlens {
namespace {

using namespace vktest;

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
  compare("scale, silu, gelu of a strided view", [](Graph& g, Leaves& l) {
    Tensor* x = l.random(g, DType::F32, {40, 9, 1, 1}, 3.0f);
    Tensor* v = view(g, x, {13, 9}, {40 * sizeof(float)}, 8 * sizeof(float));
    return std::vector<Tensor*>{scale(g, v, -0.37f), silu(g, v), silu(g, transpose(g, v)), gelu(g, v),
                                gelu(g, transpose(g, v))};
  });
  for (auto ne : {std::array<int64_t, 4>{1, 1, 1, 1}, {257, 3, 1, 1}, {33, 7, 3, 2}})
    compare(label("scale+silu+gelu", ne), [&](Graph& g, Leaves& l) {
      Tensor* x = l.random(g, DType::F32, ne, 4.0f);
      return std::vector<Tensor*>{scale(g, x, 0.125f), silu(g, x), gelu(g, x)};
    });
  compare("gelu far from 0", [](Graph& g, Leaves& l) {  // the shader's clamps: x, and 0 from x = -10
    return std::vector<Tensor*>{gelu(g, l.random(g, DType::F32, {257, 3, 1, 1}, 120.0f))};
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

// Expert choices of N tokens as an argsort's rows [E, N]: each row a
// permutation of the experts, of which an expert-id view takes the first U.
// Skewed: expert 0 leads most rows (so that it gets more than a column tile
// of pairs where N is large), and expert E - 1 comes last (unused while U < E).
std::vector<int32_t> expert_rows(int64_t E, int64_t N, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> rows;
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int32_t> perm;
    for (int32_t e = 0; e < E - 1; ++e) perm.push_back(e);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int32_t lead = t % 4 == 3 ? static_cast<int32_t>(t % (E - 1)) : 0;
    std::iter_swap(perm.begin(), std::find(perm.begin(), perm.end(), lead));
    perm.push_back(static_cast<int32_t>(E - 1));
    rows.insert(rows.end(), perm.begin(), perm.end());
  }
  return rows;
}

// The first U of each row of an [E, N] I32 leaf: the strided view top_k makes.
Tensor* expert_ids(Graph& g, Leaves& l, int64_t E, int64_t U, int64_t N, uint32_t seed) {
  Tensor* rows = l.indices(g, expert_rows(E, N, seed), {E, N, 1, 1});
  return view(g, rows, {U, N}, {rows->nb[1]}, 0);
}

TEST(Vulkan, MulMatIdAllTypesAndShapes) {
  REQUIRE_VULKAN();
  struct Case {
    int64_t E, U, b1, N;  // experts, slots per token, activation rows per token (1 or U), tokens
  };
  // U * N <= 8: the matrix-vector path; else the tiled one (expert 0 with
  // more than 64 pairs at N = 130).
  const Case cases[] = {{4, 2, 1, 1}, {4, 2, 2, 3}, {8, 8, 8, 1}, {8, 3, 3, 40}, {4, 2, 1, 130}, {5, 1, 1, 130}};
  std::map<DType, double> worst_of;
  for (DType t : kWeightTypes) {
    const int64_t bs = type_traits(t).block_size;
    double& worst = worst_of[t];
    for (int64_t K : bs == 1 ? std::vector<int64_t>{7, 64} : bs == 32 ? std::vector<int64_t>{32, 96}
                                                                       : std::vector<int64_t>{256})
      for (int64_t M : {3, 71})
        for (const Case& c : cases) {
          const std::string what = label("mul_mat_id", {K, M, c.E, 1}, type_label(t)) + " U=" + std::to_string(c.U) +
                                   " b1=" + std::to_string(c.b1) + " N=" + std::to_string(c.N);
          worst = std::max(worst, compare(what, [&](Graph& g, Leaves& l) {
            Tensor* as = l.random(g, t, {K, M, c.E, 1});
            Tensor* b = l.random(g, DType::F32, {K, c.b1, c.N, 1});
            return std::vector<Tensor*>{mul_mat_id(g, as, b, expert_ids(g, l, c.E, c.U, c.N, 7))};
          }));
        }
  }
  for (const auto& [t, w] : worst_of)
    std::printf("  worst nmse %-7s %.2e (mul_mat_id)\n", std::string(type_name(t)).c_str(), w);
  // Activations and expert ids that are views with gaps, weights and ids in
  // device memory, the result of a permuted source.
  for (int64_t N : {2, 50})
    compare("mul_mat_id of views, N=" + std::to_string(N), [&](Graph& g, Leaves& l) {
      const int64_t K = 64, M = 40, E = 6, U = 3;
      Tensor* as = l.random(g, DType::Q8_0, {K, M, E, 1}, 1.0f, true);
      Tensor* x = l.random(g, DType::F32, {K + 3, N, U, 1});
      Tensor* b = permute(g, view(g, x, {K, N, U}, {x->nb[1], x->nb[2]}, 2 * sizeof(float)), 0, 2, 1, 3);
      Tensor* rows = l.indices(g, expert_rows(E, N, 3), {E, N, 1, 1}, true);
      Tensor* ids = view(g, rows, {U, N}, {rows->nb[1]}, 2 * sizeof(int32_t));
      return std::vector<Tensor*>{mul_mat_id(g, as, b, ids)};
    });
}

// Expert ids out of range (from no argsort) give NaN rows on the device,
// as out-of-range get_rows indices do; the other rows are computed.
TEST(Vulkan, MulMatIdOutOfRangeIdsGiveNan) {
  REQUIRE_VULKAN();
  for (int64_t N : {1, 20}) {
    Graph g;
    Leaves l(9, vulkan_backend());
    const int64_t K = 32, M = 5, E = 3, U = 2;
    std::vector<int32_t> ids_values;
    for (int64_t t = 0; t < N; ++t) ids_values.insert(ids_values.end(), {t == 0 ? -1 : 1, t == N - 1 ? 3 : 0});
    Tensor* as = l.random(g, DType::F32, {K, M, E, 1}, 1.0f, true);
    Tensor* b = l.random(g, DType::F32, {K, 1, N, 1}, 1.0f, true);
    Tensor* y = mul_mat_id(g, as, b, l.indices(g, ids_values, {U, N, 1, 1}, true));
    g.build(y);
    Scheduler sched({vulkan_backend(), &reference()});
    sched.allocate(g);
    ASSERT_EQ(sched.compute(g), ComputeStatus::Done);
    ASSERT_EQ(sched.backend_of(*y), vulkan_backend());
    const std::vector<float> v = tensor_to_f32(*y);
    for (int64_t t = 0; t < N; ++t)
      for (int64_t u = 0; u < U; ++u) {
        const bool bad = (u == 0 && t == 0) || (u == 1 && t == N - 1);
        for (int64_t i = 0; i < M; ++i)
          EXPECT_EQ(std::isnan(v[(t * U + u) * M + i]), bad) << "N " << N << " row (" << u << ", " << t << ")";
      }
  }
}

TEST(Vulkan, GetRowsBatched) {
  REQUIRE_VULKAN();
  // Indices [4, 3] as a view with gaps, at an offset, of a [7, 3] leaf.
  const std::vector<int32_t> idx = {9, 0, 3, 3, 1, 7, 10, 2, 5, 0, 4, 6, 6, 1, 2, 10, 0, 3, 8, 8, 8};
  for (DType t : kWeightTypes)
    for (int64_t K : {1, 33, 32, 256}) {
      if (K % type_traits(t).block_size != 0) continue;
      compare(label("get_rows batched", {K, 11, 3, 1}, type_label(t)), [&](Graph& g, Leaves& l) {
        Tensor* a = l.random(g, t, {K, 11, 3, 1});
        Tensor* rows = l.indices(g, idx, {7, 3, 1, 1});
        return std::vector<Tensor*>{get_rows(g, a, view(g, rows, {4, 3}, {rows->nb[1]}, sizeof(int32_t)))};
      }, true);
    }
  // The router's form: each token's probabilities of its top-k experts.
  compare("get_rows of top-k probabilities", [](Graph& g, Leaves& l) {
    const int64_t E = 8, U = 2, N = 37;
    Tensor* probs = soft_max(g, l.random(g, DType::F32, {E, N, 1, 1}, 2.0f), nullptr, 1.0f);
    Tensor* top = top_k(g, probs, U);
    return std::vector<Tensor*>{get_rows(g, reshape(g, probs, {1, E, N}), top), top};
  });
}

TEST(Vulkan, ArgSortAndTopK) {
  REQUIRE_VULKAN();
  for (auto ne : {std::array<int64_t, 4>{1, 1, 1, 1}, {2, 3, 1, 1}, {8, 5, 1, 1}, {16, 7, 2, 1}, {33, 3, 2, 2},
                  {257, 4, 1, 1}, {300, 2, 1, 1}}) {
    compare(label("argsort", ne), [&](Graph& g, Leaves& l) {
      return std::vector<Tensor*>{argsort_desc(g, l.random(g, DType::F32, ne))};
    }, true);
    // Many ties (values in steps of 0.5, some -0 next to 0): index order.
    compare(label("argsort with ties", ne), [&](Graph& g, Leaves& l) {
      Tensor* x = l.random(g, DType::F32, ne);
      auto* v = static_cast<float*>(x->data);
      for (int64_t i = 0; i < x->nelements(); ++i) v[i] = i % 7 == 3 ? -0.0f : std::round(v[i] * 2) / 2;
      return std::vector<Tensor*>{argsort_desc(g, x), top_k(g, x, std::min<int64_t>(ne[0], 3))};
    }, true);
  }
  compare("argsort of a transposed view", [](Graph& g, Leaves& l) {
    return std::vector<Tensor*>{argsort_desc(g, transpose(g, l.random(g, DType::F32, {5, 19, 1, 1})))};
  }, true);
  // Rows longer than the shader takes stay with the CPU.
  Graph probe;
  Tensor* long_rows = argsort_desc(probe, probe.new_tensor(DType::F32, {5000, 2}));
  EXPECT_FALSE(vulkan_backend()->supports_op(*long_rows));
}

TEST(Vulkan, SumRowsClampDiv) {
  REQUIRE_VULKAN();
  for (auto ne : {std::array<int64_t, 4>{1, 1, 1, 1}, {2, 7, 1, 1}, {257, 5, 2, 1}, {4096, 3, 1, 1}, {33, 2, 3, 2}})
    compare(label("sum_rows", ne), [&](Graph& g, Leaves& l) {
      return std::vector<Tensor*>{sum_rows(g, l.random(g, DType::F32, ne))};
    });
  compare("sum_rows of a transposed view", [](Graph& g, Leaves& l) {
    return std::vector<Tensor*>{sum_rows(g, transpose(g, l.random(g, DType::F32, {6, 37, 1, 1})))};
  });
  // NaN becomes hi, as in ggml; Inf and -Inf the bounds.
  for (auto ne : {std::array<int64_t, 4>{1, 1, 1, 1}, {257, 3, 1, 1}, {33, 7, 3, 2}})
    compare(label("clamp", ne), [&](Graph& g, Leaves& l) {
      Tensor* x = l.random(g, DType::F32, ne, 3.0f);
      auto* v = static_cast<float*>(x->data);
      const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f};
      for (int64_t i = 0; i < x->nelements(); i += 5) v[i] = specials[(i / 5) % 4];
      return std::vector<Tensor*>{clamp(g, x, -1.0f, 2.0f), clamp(g, transpose(g, x), -0.5f, 0.25f)};
    }, true);
  compare("clamp from the smallest normal half", [](Graph& g, Leaves& l) {
    return std::vector<Tensor*>{clamp(g, l.random(g, DType::F32, {1, 40, 1, 1}, 1e-4f), 6.103515625e-5f, INFINITY)};
  }, true);
  const std::array<std::array<int64_t, 4>, 2> cases[] = {
      {{{1, 1, 1, 1}, {1, 1, 1, 1}}}, {{{33, 7, 3, 2}, {33, 1, 3, 1}}}, {{{7, 5, 4, 1}, {1, 5, 1, 1}}},
      {{{2, 37, 1, 1}, {1, 37, 1, 1}}}, {{{4096, 3, 1, 1}, {4096, 3, 1, 1}}},
  };
  for (const auto& [na, nb] : cases)
    compare(label("div", na) + " b " + label("", nb), [&](Graph& g, Leaves& l) {
      Tensor* a = l.random(g, DType::F32, na);
      Tensor* b = l.random(g, DType::F32, nb);
      return std::vector<Tensor*>{div(g, a, b), div(g, transpose(g, a), transpose(g, mul(g, b, b)))};
    });
}

// A mixture-of-experts feed-forward block as GraphBuilder::route and
// experts build it (softmax router, top-k, the selected probabilities
// renormalized by their clamped sum, up / gate / down expert matmuls, slots
// summed), for prompts and generation: every node on the device.
TEST(Vulkan, MoeFeedForwardBlock) {
  REQUIRE_VULKAN();
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_K})
    for (int64_t N : {1, 3, 70})
      compare("moe block" + type_label(t) + " N=" + std::to_string(N), [&](Graph& g, Leaves& l) {
        const int64_t D = 256, F = 256, E = 8, U = 2;
        Tensor* router = l.random(g, DType::F32, {D, E, 1, 1}, 0.1f, true);
        Tensor* w_up = l.random(g, t, {D, F, E, 1}, 0.1f, true);
        Tensor* w_gate = l.random(g, t, {D, F, E, 1}, 0.1f, true);
        Tensor* w_down = l.random(g, t, {F, D, E, 1}, 0.1f, true);
        Tensor* cur = rms_norm(g, l.random(g, DType::F32, {D, N, 1, 1}), 1e-5f);
        Tensor* probs = soft_max(g, mul_mat(g, router, cur), nullptr, 1.0f);
        Tensor* selected = top_k(g, probs, U);
        Tensor* w = reshape(g, get_rows(g, reshape(g, probs, {1, E, N}), selected), {U, N});
        Tensor* sum = clamp(g, sum_rows(g, w), 6.103515625e-5f, INFINITY);
        Tensor* weights = reshape(g, div(g, w, sum), {1, U, N});
        Tensor* x = reshape(g, cur, {D, 1, N});
        Tensor* up = mul_mat_id(g, w_up, x, selected);
        Tensor* gate = silu(g, mul_mat_id(g, w_gate, x, selected));
        Tensor* down = mul_mat_id(g, w_down, mul(g, gate, up), selected);
        Tensor* weighted = mul(g, down, weights);
        Tensor* out = nullptr;
        for (int64_t u = 0; u < U; ++u) {
          Tensor* slot = view(g, weighted, {D, N}, {weighted->nb[2]}, u * weighted->nb[1]);
          out = out ? add(g, out, slot) : slot;
        }
        return std::vector<Tensor*>{out, selected};
      });
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

}  // namespace
}  // namespace qlens

#else  // !QLENS_VULKAN

TEST(Vulkan, NotBuilt) { GTEST_SKIP() << "built without Vulkan (QLENS_VULKAN=OFF)"; }

#endif
