// Mixtures of experts on the synthetic qwen3moe and mixtral models of
// ../shared/reference/synth (issue 14): the expert matmul against each
// expert's own product, importance matrices per expert against a brute force
// over every token's selected experts, and experts no calibration token
// reaches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "core/text_file.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/model.h"
#include "qlens/tap.h"
#include "test_util.h"
#include "tools/common/chunks.h"
#include "tools/compare/compare.h"
#include "tools/imatrix/imatrix.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/imatrix/imatrix_stats.h"
#include "tools/perplexity/perplexity.h"
#include "tools/quantize/quantize.h"
#include "tools/sensitivity/sensitivity.h"

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
    test::plan_into(g, buf);
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
  copt.cpu = test::cpu_options();
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
      opt.cpu = test::cpu_options();
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


// ---- quantizing with per-expert importance ---------------------------------

tools::Imatrix collect(const Model& model, const std::vector<Token>& tokens, int64_t chunks) {
  tools::ImatrixOptions opt;
  opt.n_ctx = 128;
  opt.max_chunks = chunks;
  opt.n_threads = 2;
  opt.cpu = test::cpu_options();
  opt.compute_ppl = false;
  tools::Imatrix m;
  tools::collect_imatrix(model, tokens, opt, m);
  return m;
}

std::vector<Token> tiny_stories(const Model& model, const std::string& path) {
  return model.vocab().tokenize(read_text_file(path).substr(0, 200000), true);
}

// llama-quantize 0c1e570 with llama-imatrix's matrix of the same text (run
// outside the repository): the type of every tensor that is not F32. The
// router (ffn_gate_inp) stays F32; with 8 experts attn_k/attn_v are Q8_0 and
// attn_output Q5_K (here its fallback Q5_1); ffn_down_exps follows ffn_down.
struct MoeMix {
  const char* model;
  const char* mix;
  const char* types;
};
const MoeMix kMoeMixes[] = {
    {"qwen3moe", "Q4_K_M", "blk.0.attn_k.weight=Q8_0 blk.0.attn_output.weight=Q5_1 blk.0.attn_q.weight=Q5_0 blk.0.attn_v.weight=Q8_0 blk.0.ffn_down_exps.weight=Q5_0 blk.0.ffn_gate_exps.weight=Q5_0 blk.0.ffn_up_exps.weight=Q5_0 blk.1.attn_k.weight=Q8_0 blk.1.attn_output.weight=Q5_1 blk.1.attn_q.weight=Q5_0 blk.1.attn_v.weight=Q8_0 blk.1.ffn_down_exps.weight=Q8_0 blk.1.ffn_gate_exps.weight=Q5_0 blk.1.ffn_up_exps.weight=Q5_0 output.weight=Q8_0 token_embd.weight=Q5_0"},
    {"qwen3moe", "Q4_0", "blk.0.attn_k.weight=Q8_0 blk.0.attn_output.weight=Q4_0 blk.0.attn_q.weight=Q4_0 blk.0.attn_v.weight=Q8_0 blk.0.ffn_down_exps.weight=Q4_0 blk.0.ffn_gate_exps.weight=Q4_0 blk.0.ffn_up_exps.weight=Q4_0 blk.1.attn_k.weight=Q8_0 blk.1.attn_output.weight=Q4_0 blk.1.attn_q.weight=Q4_0 blk.1.attn_v.weight=Q8_0 blk.1.ffn_down_exps.weight=Q4_0 blk.1.ffn_gate_exps.weight=Q4_0 blk.1.ffn_up_exps.weight=Q4_0 output.weight=Q8_0 token_embd.weight=Q4_0"},
    {"mixtral", "Q4_K_M", "blk.0.attn_k.weight=Q5_0 blk.0.attn_output.weight=Q5_0 blk.0.attn_q.weight=Q5_0 blk.0.attn_v.weight=Q5_0 blk.0.ffn_down_exps.weight=Q5_0 blk.0.ffn_gate_exps.weight=Q5_0 blk.0.ffn_up_exps.weight=Q5_0 blk.1.attn_k.weight=Q5_0 blk.1.attn_output.weight=Q5_0 blk.1.attn_q.weight=Q5_0 blk.1.attn_v.weight=Q8_0 blk.1.ffn_down_exps.weight=Q8_0 blk.1.ffn_gate_exps.weight=Q5_0 blk.1.ffn_up_exps.weight=Q5_0 output.weight=Q8_0 token_embd.weight=Q5_0"},
    {"mixtral", "Q4_0", "blk.0.attn_k.weight=Q4_0 blk.0.attn_output.weight=Q4_0 blk.0.attn_q.weight=Q4_0 blk.0.attn_v.weight=Q4_0 blk.0.ffn_down_exps.weight=Q4_0 blk.0.ffn_gate_exps.weight=Q4_0 blk.0.ffn_up_exps.weight=Q4_0 blk.1.attn_k.weight=Q4_0 blk.1.attn_output.weight=Q4_0 blk.1.attn_q.weight=Q4_0 blk.1.attn_v.weight=Q4_0 blk.1.ffn_down_exps.weight=Q4_0 blk.1.ffn_gate_exps.weight=Q4_0 blk.1.ffn_up_exps.weight=Q4_0 output.weight=Q8_0 token_embd.weight=Q4_0"},
};

bool python_gguf_available() { return test::run_command("python3 -c 'import gguf.quants, numpy'", nullptr) == 0; }

// Q4_K_M and Q4_0 with the imatrix: llama.cpp's types; every expert's rows
// are exactly what quantizing them with that expert's own importance gives
// (and not what another expert's gives); gguf-py dequantizes the expert
// tensors to qlens's values; the model runs within 15% of the F32 PPL.
TEST(MoeQuantize, LlamaCppTypesAndEachExpertsOwnImportance) {
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  const bool check_py = python_gguf_available();
  const std::string dir = test::temp_dir();
  for (const MoeMix& mix : kMoeMixes) {
    SCOPED_TRACE(std::string(mix.model) + " " + mix.mix);
    QLENS_REQUIRE_SHARED(path, synth(mix.model));
    auto model = Model::load(path);
    const auto tokens = tiny_stories(*model, text_path);
    const tools::Imatrix im = collect(*model, tokens, 8);
    tools::save_imatrix_gguf(im, dir + "/im.gguf");
    tools::QuantizeOptions opt;
    opt.mix = mix.mix;
    opt.imatrix_path = dir + "/im.gguf";
    const std::string out = dir + "/q.gguf";
    std::ostringstream log;
    tools::quantize_model(path, out, opt, log);
    auto q = Model::load(out);
    std::string types;
    for (const auto& [name, t] : q->weights())
      if (t->type != DType::F32) types += (types.empty() ? "" : " ") + name + "=" + std::string(type_name(t->type));
    EXPECT_EQ(types, mix.types);
    EXPECT_EQ(q->weights().at("blk.0.ffn_gate_inp.weight")->type, DType::F32);

    const Tensor& src = *model->weights().at("blk.0.ffn_up_exps.weight");
    const Tensor& dst = *q->weights().at("blk.0.ffn_up_exps.weight");
    const int64_t K = src.ne[0], M = src.ne[1];
    const size_t rb = row_bytes(dst.type, K);
    for (int64_t e = 0; e < src.ne[2]; ++e) {
      const float* x = reinterpret_cast<const float*>(src.data) + e * K * M;
      std::vector<uint8_t> own(rb * M), other(rb * M);
      type_traits(dst.type).quantize(x, own.data(), M, K, im.importance(src.name, K, e).data());
      type_traits(dst.type).quantize(x, other.data(), M, K, im.importance(src.name, K, (e + 1) % src.ne[2]).data());
      const uint8_t* got = static_cast<const uint8_t*>(dst.data) + e * rb * M;
      EXPECT_EQ(std::memcmp(got, own.data(), own.size()), 0) << "expert " << e;
      EXPECT_NE(std::memcmp(got, other.data(), other.size()), 0) << "expert " << e;
    }
    tools::PerplexityOptions popt;
    popt.n_ctx = 128;
    popt.max_chunks = 8;
    popt.cpu = test::cpu_options();
    const double ppl_f32 = tools::perplexity(*model, tokens, popt).ppl, ppl_q = tools::perplexity(*q, tokens, popt).ppl;
    std::printf("%s %s: PPL %.2f, F32 %.2f\n", mix.model, mix.mix, ppl_q, ppl_f32);
    EXPECT_LT(std::fabs(ppl_q / ppl_f32 - 1), 0.15);
    if (!check_py) continue;
    std::string args;
    for (const char* name : {"blk.0.ffn_down_exps.weight", "blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight"}) {
      const Tensor* t = q->weights().at(name);
      std::vector<float> values(t->nelements());
      type_traits(t->type).to_float(t->data, values.data(), t->nelements());
      const std::string raw = dir + "/" + name + ".f32";
      write_file_atomic(raw, std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
      args += std::string(" ") + name + "=" + raw;
    }
    std::string py;
    EXPECT_EQ(test::run_command("python3 " QLENS_SOURCE_DIR "/tests/gguf_model_check.py " + out + args, &py), 0) << py;
  }
  if (!check_py) GTEST_SKIP() << "types and slices checked; the gguf-py check needs `pip install gguf numpy`";
}

// ---- a calibration text that leaves experts without tokens -----------------

// "time time time ...": qwen3moe's router sends it to a few experts only
// (layer 0: none to experts 0, 4, 6). The file keeps their zero counts, the
// .dat stores 1s as llama.cpp's does, quantize gives them importance 1 and
// says so, and the statistics name them.
TEST(MoeImatrix, ExpertsNoTokenReachesAreNamedAndQuantizeWithImportanceOne) {
  QLENS_REQUIRE_SHARED(path, synth("qwen3moe"));
  auto model = Model::load(path);
  std::string text;
  for (int i = 0; i < 400; ++i) text += "time ";
  const auto tokens = model->vocab().tokenize(text, true);
  const tools::Imatrix im = collect(*model, tokens, 2);
  const tools::ImatrixEntry& e = im.entries.at("blk.0.ffn_down_exps.weight");
  std::vector<int64_t> unused;
  for (int64_t x = 0; x < e.n_mat; ++x)
    if (e.counts[x] == 0) unused.push_back(x);
  ASSERT_FALSE(unused.empty()) << "every expert got a token: the test needs another text";
  const int64_t dead = unused.front();
  EXPECT_EQ(im.importance("blk.0.ffn_down_exps.weight", e.n_cols, dead),
            std::vector<float>(e.n_cols, 1.0f));

  const std::string dir = test::temp_dir();
  tools::save_imatrix_gguf(im, dir + "/im.gguf");
  tools::save_imatrix_dat(im, dir + "/im.dat");
  const tools::Imatrix back = tools::load_imatrix(dir + "/im.gguf");
  EXPECT_EQ(back.entries.at("blk.0.ffn_down_exps.weight").counts, e.counts);
  tools::Imatrix dat = tools::load_imatrix(dir + "/im.dat");
  tools::check_imatrix_matches_model(dat, *model);  // gives the flat .dat entry its experts' shape
  const tools::ImatrixEntry& de = dat.entries.at("blk.0.ffn_down_exps.weight");
  ASSERT_EQ(de.n_mat, e.n_mat);
  for (int64_t k = 0; k < de.n_cols; ++k) EXPECT_FLOAT_EQ(de.sum2[dead * de.n_cols + k], de.counts[dead]);

  const std::vector<std::string> lines = tools::describe_unrouted_experts(im);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.front().find("blk.0.ffn_down_exps.weight: " + std::to_string(unused.size()) + " of 8 experts"),
            std::string::npos)
      << lines.front();

  const tools::ImatrixStatistics st = tools::compute_imatrix_statistics(im);
  ASSERT_EQ(st.expert_usage.size(), 2u);
  EXPECT_EQ(st.expert_usage[0].layer, 0);
  EXPECT_EQ(st.expert_usage[0].unused, unused);
  EXPECT_EQ(st.expert_usage[0].total, 2.0 * 128 * 2);
  EXPECT_LT(st.expert_usage[0].normalized_entropy, 0.8);
  std::ostringstream json, table;
  tools::write_imatrix_statistics_json(json, st);
  tools::print_imatrix_statistics(table, st);
  EXPECT_NE(json.str().find("\"unused_experts\""), std::string::npos);
  EXPECT_NE(table.str().find("Expert usage"), std::string::npos);

  tools::QuantizeOptions opt;
  opt.mix = "Q4_0";
  opt.imatrix_path = dir + "/im.gguf";
  std::ostringstream log;
  tools::quantize_model(path, dir + "/q.gguf", opt, log);
  EXPECT_NE(log.str().find("experts without imatrix data"), std::string::npos) << log.str();
  auto q = Model::load(dir + "/q.gguf");
  const Tensor& src = *model->weights().at("blk.0.ffn_down_exps.weight");
  const Tensor& dst = *q->weights().at("blk.0.ffn_down_exps.weight");
  const int64_t K = src.ne[0], M = src.ne[1];
  std::vector<uint8_t> ones(row_bytes(dst.type, K) * M);
  const std::vector<float> one(K, 1.0f);
  type_traits(dst.type).quantize(reinterpret_cast<const float*>(src.data) + dead * K * M, ones.data(), M, K, one.data());
  EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(dst.data) + dead * ones.size(), ones.data(), ones.size()), 0);
}

// Non-finite sums are named by tensor and expert and leave the matrix as it
// was; two halves of a run combine into the whole, expert by expert.
TEST(MoeImatrix, NonFiniteSumsAreNamedAndHalvesCombine) {
  tools::Imatrix m;
  TapResult good;
  good.kind = TapKind::ColumnSumSq;
  good.column_sum_sq.assign(3 * 4, 1.0);
  good.expert_rows = {2, 0, 1};
  good.rows = 3;
  tools::add_column_sums(m, {{"blk.0.ffn_down_exps.weight", good}});
  TapResult bad = good;
  bad.column_sum_sq[2 * 4 + 1] = std::numeric_limits<double>::infinity();
  try {
    tools::add_column_sums(m, {{"blk.0.ffn_down_exps.weight", bad}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_down_exps.weight, expert 2;"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m.entries.at("blk.0.ffn_down_exps.weight").counts, (std::vector<double>{2, 0, 1}));

  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  QLENS_REQUIRE_SHARED(path, synth("mixtral"));
  auto model = Model::load(path);
  const auto tokens = tiny_stories(*model, text_path);
  const tools::Imatrix whole = collect(*model, tokens, 4);
  tools::ImatrixOptions opt;
  opt.n_ctx = 128;
  opt.n_threads = 2;
  opt.compute_ppl = false;
  tools::Imatrix a, b;
  opt.max_chunks = 2;
  tools::collect_imatrix(*model, tokens, opt, a);
  opt.first_chunk = 2;
  tools::collect_imatrix(*model, tokens, opt, b);
  tools::combine_imatrix(a, b);
  for (const auto& [name, e] : whole.entries) {
    const tools::ImatrixEntry& c = a.entries.at(name);
    EXPECT_EQ(c.counts, e.counts) << name;
    for (size_t k = 0; k < e.sum2.size(); ++k) EXPECT_NEAR(c.sum2[k], e.sum2[k], 1e-5 * e.sum2[k]) << name;
  }
}

// ---- sensitivity and compare ------------------------------------------------

TEST(MoeSensitivity, ExpertTensorsAreProbedAloneOrAsALayersGroup) {
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  QLENS_REQUIRE_SHARED(path, synth("mixtral"));
  auto model = Model::load(path);
  const auto tokens = tiny_stories(*model, text_path);
  tools::SensitivityOptions opt;
  opt.n_ctx = 128;
  opt.max_chunks = 1;
  opt.n_threads = 2;
  opt.types = {DType::Q4_0};
  const tools::SensitivityResult per_tensor = tools::measure_sensitivity(*model, tokens, opt);
  std::vector<std::string> names;
  for (const auto& t : per_tensor.tensors) names.push_back(t.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "blk.1.ffn_down_exps.weight"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "blk.1.ffn_gate_inp.weight"), names.end());  // never quantized
  opt.group = tools::SensitivityGroup::Experts;
  const tools::SensitivityResult grouped = tools::measure_sensitivity(*model, tokens, opt);
  const tools::SensitivityTensor* experts = nullptr;
  for (const auto& g : grouped.groups)
    if (g.name == "layer 1 experts") experts = &g;
  ASSERT_NE(experts, nullptr);
  EXPECT_EQ(experts->members.size(), 3u);
  ASSERT_EQ(experts->candidates.size(), 2u);
  // Quantizing the three together costs more than any one of them.
  double worst_alone = 0;
  for (const auto& t : per_tensor.tensors)
    if (t.layer == 1 && t.role.find("_exps") != std::string::npos)
      worst_alone = std::max(worst_alone, t.candidates.back().delta_kld);
  EXPECT_GT(experts->candidates.back().delta_kld, worst_alone);
}

TEST(MoeCompare, RouterAgreement) {
  QLENS_REQUIRE_SHARED(text_path, "data/tinystories/tinystories_val.txt");
  QLENS_REQUIRE_SHARED(path, synth("qwen3moe"));
  auto model = Model::load(path);
  const auto tokens = tiny_stories(*model, text_path);
  const std::string dir = test::temp_dir();
  tools::QuantizeOptions qopt;
  qopt.mix = "Q4_0";
  qopt.pure = true;
  std::ostringstream log;
  tools::quantize_model(path, dir + "/q.gguf", qopt, log);
  auto q = Model::load(dir + "/q.gguf");
  tools::CompareOptions opt;
  opt.n_ctx = 128;
  opt.max_chunks = 2;
  opt.n_threads = 2;
  for (bool host : {false, true}) {
    opt.host_reductions = host;
    const auto self = tools::compare_models(*model, *model, tokens, opt);
    ASSERT_EQ(self.routers.size(), 2u);
    for (const auto& r : self.routers) {
      EXPECT_EQ(r.tokens, 256);
      EXPECT_EQ(r.set_agreement(), 1.0);
    }
    const auto diff = tools::compare_models(*model, *q, tokens, opt);
    ASSERT_EQ(diff.routers.size(), 2u);
    for (const auto& r : diff.routers) {
      std::printf("layer %d: same set %.3f, same first %.3f, same selections %.3f\n", r.layer, r.set_agreement(),
                  r.top1_agreement(), r.selection_agreement());
      EXPECT_LT(r.set_agreement(), 1.0);
      EXPECT_GT(r.selection_agreement(), 0.5);
      EXPECT_LE(r.set_agreement(), r.selection_agreement());
    }
    // And the expert matmuls' outputs are compared node by node.
    bool seen = false;
    for (const auto& n : diff.nodes) seen |= n.name == "ffn_moe_down-1";
    EXPECT_TRUE(seen);
  }
}

}  // namespace
}  // namespace qlens
