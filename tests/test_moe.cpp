// Mixtures of experts on the synthetic qwen3moe and mixtral models of
// ../shared/reference/synth (issue 14): the expert matmul against each
// expert's own product, importance matrices per expert against a brute force
// over every token's selected experts, and experts no calibration token
// reaches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "core/text_file.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "test_util.h"
#include "tools/chunks.h"
#include "tools/imatrix.h"
#include "tools/imatrix_file.h"

namespace qlens {
namespace {

// ---- the expert matmul, every weight type ---------------------------------

// A graph of leaves in host memory, planned and ready to compute.
struct HostGraph {
  Graph g;
  std::vector<std::vector<char>> storage;
  std::vector<char> buf;

  Tensor* leaf(DType type, std::array<int64_t, kMaxDims> ne, const void* data, const char* name) {
    Tensor* t = g.new_tensor(type, ne, name);
    auto& s = storage.emplace_back(t->nbytes() + 64, 0);
    t->data = s.data() + (64 - reinterpret_cast<uintptr_t>(s.data()) % 64) % 64;
    std::memcpy(t->data, data, t->nbytes());
    return t;
  }
  std::vector<float> run(Tensor* out, Backend& b) {
    out->flags |= kFlagOutput;
    g.build(out);
    const MemoryPlan plan = plan_memory(g);
    buf.assign(plan.size + 64, 0);
    apply_memory_plan(g, plan, buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64);
    b.compute(g);
    std::vector<float> v(out->nelements());
    std::memcpy(v.data(), out->data, v.size() * sizeof(float));
    return v;
  }
};

// Row (u, t) of mul_mat_id is expert ids[u, t]'s product with b's row: the
// same bits as that expert's mul_mat over the rows routed to it, in token
// order (which is how the kernel groups them), for every weight type, both
// matmul paths (N = 1, 6 and 48 tokens), b per slot or shared, on every
// instruction set and thread count.
TEST(MulMatId, EqualsEachExpertsMulMat) {
  const DType types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,   DType::Q5_0,
                         DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K,   DType::Q5_K,
                         DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};
  const int64_t K = 256, M = 24, E = 5, U = 2;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<cpu::Isa> isas = {cpu::Isa::Scalar};
  for (cpu::Isa isa : {cpu::Isa::Avx2, cpu::Isa::Avx512})
    if (cpu::isa_supported(isa)) isas.push_back(isa);
  for (DType type : types)
    for (int64_t N : {1, 6, 48})
      for (int64_t b1 : {int64_t{1}, U}) {
        SCOPED_TRACE(std::string(type_name(type)) + " N=" + std::to_string(N) + " b1=" + std::to_string(b1));
        std::vector<float> wf(K * M * E), x(K * b1 * N);
        for (float& v : wf) v = nd(rng);
        for (float& v : x) v = nd(rng);
        std::vector<uint8_t> w(row_bytes(type, K) * M * E);
        type_traits(type).quantize(wf.data(), w.data(), M * E, K, nullptr);
        std::vector<int32_t> ids(U * N);
        for (int64_t t = 0; t < N; ++t) {  // expert 4 never chosen
          ids[U * t] = static_cast<int32_t>(t % 3);
          ids[U * t + 1] = static_cast<int32_t>((t + 1 + t / 3) % 4 == t % 3 ? 3 : (t + 1 + t / 3) % 4);
        }
        for (cpu::Isa isa : isas)
          for (int nth : {1, 3}) {
            auto backend = cpu::make_cpu_backend(nth, isa);
            HostGraph id_graph;
            Tensor* as = id_graph.leaf(type, {K, M, E, 1}, w.data(), "as");
            Tensor* b = id_graph.leaf(DType::F32, {K, b1, N, 1}, x.data(), "b");
            Tensor* idt = id_graph.leaf(DType::I32, {U, N, 1, 1}, ids.data(), "ids");
            const std::vector<float> got = id_graph.run(mul_mat_id(id_graph.g, as, b, idt), *backend);
            for (int64_t e = 0; e < E; ++e) {
              std::vector<float> rows;
              std::vector<int64_t> places;
              for (int64_t t = 0; t < N; ++t)
                for (int64_t u = 0; u < U; ++u)
                  if (ids[U * t + u] == e) {
                    rows.insert(rows.end(), x.begin() + (t * b1 + u % b1) * K, x.begin() + (t * b1 + u % b1 + 1) * K);
                    places.push_back(t * U + u);
                  }
              if (places.empty()) continue;
              HostGraph one;
              Tensor* we = one.leaf(type, {K, M, 1, 1}, w.data() + e * M * row_bytes(type, K), "w");
              Tensor* xe = one.leaf(DType::F32, {K, static_cast<int64_t>(places.size()), 1, 1}, rows.data(), "x");
              const std::vector<float> want = one.run(mul_mat(one.g, we, xe), *backend);
              for (size_t j = 0; j < places.size(); ++j)
                ASSERT_EQ(std::memcmp(got.data() + places[j] * M, want.data() + j * M, M * sizeof(float)), 0)
                    << cpu::isa_name(isa) << " " << nth << " threads, expert " << e << " row " << j;
            }
          }
      }
}

TEST(MulMatId, ExpertIdsOutOfRangeAreErrors) {
  const float w[2 * 4 * 2] = {};
  const float x[2 * 1 * 3] = {};
  const int32_t ids[3] = {0, 2, 1};  // 2 of 2 experts
  HostGraph g;
  Tensor* as = g.leaf(DType::F32, {2, 4, 2, 1}, w, "as");
  Tensor* b = g.leaf(DType::F32, {2, 1, 3, 1}, x, "b");
  Tensor* idt = g.leaf(DType::I32, {1, 3, 1, 1}, ids, "ids");
  auto backend = make_cpu_backend(1);
  try {
    g.run(mul_mat_id(g.g, as, b, idt), *backend);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert id 2 out of range for 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mul_mat_id(g.g, as, g.leaf(DType::F32, {3, 1, 3, 1}, x, "wide"), idt), Error);
}

// ---- importance matrices per expert ----------------------------------------

std::string synth(const char* model) { return std::string("reference/synth/") + model + ".gguf"; }

struct ExpertSums {
  std::vector<double> sum2;     // [n_expert][K]
  std::vector<double> counts;   // [n_expert]
};

// Every MUL_MAT_ID of an expert weight, read back node by node: each token's
// row added to the experts its slots chose, in double.
std::map<std::string, ExpertSums> brute_force(const Model& model, const std::vector<Token>& tokens, int64_t n_ctx,
                                              int64_t n_chunks) {
  std::map<std::string, ExpertSums> out;
  ContextOptions copt;
  copt.n_ctx = n_ctx;
  copt.n_batch = n_ctx;
  copt.n_threads = 2;
  copt.cache_type = DType::F32;  // as collect_imatrix
  Context ctx(model, copt);
  ctx.set_observe_callback([&](const Tensor& t, bool ask) {
    if (t.op != Op::MulMatId) return false;
    if (ask) return true;
    const Tensor& x = *t.src[1];
    const Tensor& ids = *t.src[2];
    const std::vector<float> xv = tensor_to_f32(x);
    const int64_t K = x.ne[0], E = t.src[0]->ne[2];
    ExpertSums& s = out[t.src[0]->name];
    s.sum2.resize(K * E);
    s.counts.resize(E);
    for (int64_t tok = 0; tok < ids.ne[1]; ++tok)
      for (int64_t u = 0; u < ids.ne[0]; ++u) {
        int32_t e;
        tensor_read(ids, &e, u * ids.nb[0] + tok * ids.nb[1], sizeof e);
        const float* row = xv.data() + (tok * x.ne[1] + u % x.ne[1]) * K;
        for (int64_t k = 0; k < K; ++k) s.sum2[e * K + k] += static_cast<double>(row[k]) * row[k];
        s.counts[e] += 1;
      }
    return true;
  });
  tools::TextChunks chunks(tokens, n_ctx, model.vocab(), "test");
  for (int64_t c = 0; c < n_chunks; ++c) {
    ctx.clear();
    EXPECT_TRUE(ctx.decode(chunks.chunk(c), true));
  }
  return out;
}

// -c 128 --chunks 8 on the first 200,000 bytes of tinystories_val, taps and
// the callback path, against the brute force: counts equal, sums within the
// F32 rounding the file does after each chunk.
TEST(MoeImatrix, PerExpertSumsAndCountsEqualBruteForce) {
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  const std::string text = read_text_file(text_path).substr(0, 200000);
  for (const char* name : {"qwen3moe", "mixtral"}) {
    QLENS_REQUIRE_SHARED(path, synth(name));
    auto model = Model::load(path);
    const auto tokens = model->vocab().tokenize(text, true);
    const auto want = brute_force(*model, tokens, 128, 8);
    ASSERT_EQ(want.size(), 3u * model->hparams().n_layer) << name;
    for (auto collect : {tools::ImatrixCollect::Taps, tools::ImatrixCollect::Callback}) {
      SCOPED_TRACE(std::string(name) + (collect == tools::ImatrixCollect::Taps ? " taps" : " callback"));
      tools::ImatrixOptions opt;
      opt.n_ctx = 128;
      opt.max_chunks = 8;
      opt.n_threads = 2;
      opt.compute_ppl = false;
      opt.collect = collect;
      tools::Imatrix m;
      tools::collect_imatrix(*model, tokens, opt, m);
      for (const auto& [weight, s] : want) {
        const auto it = m.entries.find(weight);
        ASSERT_NE(it, m.entries.end()) << weight;
        const tools::ImatrixEntry& e = it->second;
        const int64_t E = model->weights().at(weight)->ne[2];
        ASSERT_EQ(e.n_mat, E) << weight;
        ASSERT_EQ(e.n_cols * E, static_cast<int64_t>(s.sum2.size())) << weight;
        double total = 0;
        for (int64_t x = 0; x < E; ++x) {
          EXPECT_EQ(e.counts[x], s.counts[x]) << weight << " expert " << x;
          total += s.counts[x];
        }
        EXPECT_EQ(total, 8.0 * 128 * model->hparams().n_expert_used) << weight;
        double worst = 0;
        for (size_t k = 0; k < s.sum2.size(); ++k)
          worst = std::max(worst, std::fabs(e.sum2[k] - s.sum2[k]) / std::max(s.sum2[k], 1e-30));
        EXPECT_LT(worst, 1e-6) << weight;
      }
    }
  }
}

}  // namespace
}  // namespace qlens
