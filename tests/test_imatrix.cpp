// Collecting importance matrices: the file conventions on a hand-computable
// case, taps against the host-callback path, combining, kill and resume, bad
// input, and the point of it all: quantizing with an imatrix lowers
// perplexity on held-out text.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/text_file.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/model.h"
#include "qlens/sched.h"
#include "imatrix_two_dimensional.h"
#include "test_util.h"
#include "tools/imatrix/imatrix.h"
#include "core/json_reader.h"
#include "tools/common/chunks.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/imatrix/imatrix_run.h"
#include "tools/imatrix/imatrix_stats.h"

namespace qlens {
namespace {

constexpr const char* kStories = "models/stories260K.gguf";
constexpr const char* kText = "data/tinystories/tinystories_val.txt";

int qlens(const std::string& args, std::string* out) {
  return test::run_command(std::string(QLENS_BINARY) + " " + args, out);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string read_bytes(const std::string& path) { return read_text_file(path); }

// ---------------------------------------------------------------------------
// Conventions, by hand: activations rows (1,2,3) and (4,5,6) into a 3-column
// weight give Σx² = (17, 29, 45) over 2 rows; mean(x²) = (8.5, 14.5, 22.5).

TEST(ImatrixConventions, HandComputedSumsAndBothFileFormats) {
  Graph g;
  std::vector<float> w(3 * 2, 0.5f), x = {1, 2, 3, 4, 5, 6};
  Tensor* W = g.new_tensor(DType::F32, {3, 2}, "blk.0.ffn_up.weight");
  W->data = w.data();
  W->flags |= kFlagWeight;
  Tensor* X = g.new_tensor(DType::F32, {3, 2}, "x");
  X->data = x.data();
  Tensor* y = mul_mat(g, W, X);
  g.build(y);
  auto cpu = make_cpu_backend(2);
  Scheduler sched(*cpu);
  sched.set_tap_selector([](const Tensor& t, std::vector<TapRequest>& r) {
    if (t.op == Op::MulMat) r.push_back({TapKind::ColumnSumSq, t.src[0]->name});
  });
  sched.allocate(g);
  ASSERT_EQ(sched.compute(g), ComputeStatus::Done);

  tools::Imatrix m;
  m.chunk_size = 1;  // one row per chunk: the 2 rows are 2 chunks, ncall = 2
  m.chunk_count = 2;
  m.datasets = {"hand.txt"};
  tools::add_column_sums(m, sched.read_taps());
  ASSERT_EQ(m.entries.size(), 1u);
  const tools::ImatrixEntry& e = m.entries.at("blk.0.ffn_up.weight");
  EXPECT_EQ(e.sum2, (std::vector<double>{17, 29, 45}));
  EXPECT_EQ(e.counts, (std::vector<double>{2}));

  const std::string dir = test::temp_dir();
  tools::save_imatrix_gguf(m, dir + "/hand.gguf");
  auto f = gguf::File::open(dir + "/hand.gguf");
  const gguf::TensorInfo* sum2 = f->find_tensor("blk.0.ffn_up.weight.in_sum2");
  const gguf::TensorInfo* counts = f->find_tensor("blk.0.ffn_up.weight.counts");
  ASSERT_TRUE(sum2 && counts);
  const auto* s = reinterpret_cast<const float*>(f->tensor_data(*sum2));
  EXPECT_EQ(std::vector<float>(s, s + 3), (std::vector<float>{17, 29, 45}));  // in_sum2 = Σx²
  EXPECT_EQ(*reinterpret_cast<const float*>(f->tensor_data(*counts)), 2.0f);  // counts = rows

  // Legacy .dat: value = mean(x²) · ncall with ncall = ceil(rows / chunk_size).
  for (const auto& [chunk_size, ncall] : std::vector<std::pair<int64_t, int32_t>>{{1, 2}, {2, 1}}) {
    m.chunk_size = chunk_size;
    tools::save_imatrix_dat(m, dir + "/hand.dat");
    const std::string bytes = read_bytes(dir + "/hand.dat");
    const std::string name = "blk.0.ffn_up.weight";
    size_t pos = 0;
    auto i32 = [&] {
      int32_t v;
      std::memcpy(&v, bytes.data() + pos, 4);
      pos += 4;
      return v;
    };
    EXPECT_EQ(i32(), 1);
    ASSERT_EQ(i32(), static_cast<int32_t>(name.size()));
    EXPECT_EQ(bytes.substr(pos, name.size()), name);
    pos += name.size();
    EXPECT_EQ(i32(), ncall);
    EXPECT_EQ(i32(), 3);
    float v[3];
    std::memcpy(v, bytes.data() + pos, sizeof v);
    EXPECT_FLOAT_EQ(v[0], 8.5f * ncall);
    EXPECT_FLOAT_EQ(v[1], 14.5f * ncall);
    EXPECT_FLOAT_EQ(v[2], 22.5f * ncall);
    // Read back, the importance is mean(x²) again.
    const tools::Imatrix back = tools::load_imatrix(dir + "/hand.dat");
    const auto imp = back.importance("blk.0.ffn_up.weight", 3);
    EXPECT_FLOAT_EQ(imp[0], 8.5f);
    EXPECT_FLOAT_EQ(imp[2], 22.5f);
  }
}

// ---------------------------------------------------------------------------
// The GGUF file's dims: llama-imatrix's (ggml's writer drops trailing 1s), and
// the 2-D form earlier qlens versions wrote, which users still have.

// A checkpoint-like matrix: a dense weight, an expert weight with an unused
// expert, the metadata and qlens's run state.
tools::Imatrix dense_and_experts() {
  tools::Imatrix m;
  m.datasets = {"wiki.train.raw"};
  m.model_name = "tiny";
  m.chunk_count = 3;
  m.chunk_size = 512;
  m.run = {3, 7.5, 20.25, 1533};
  tools::ImatrixEntry& dense = m.entries["blk.0.attn_q.weight"];
  dense.n_cols = 8;
  for (int j = 0; j < 8; ++j) dense.sum2.push_back(0.5 * (j + 1));
  dense.counts = {1536};
  tools::ImatrixEntry& experts = m.entries["blk.0.ffn_up_exps.weight"];
  experts.n_cols = 4;
  experts.n_mat = 3;
  for (int j = 0; j < 12; ++j) experts.sum2.push_back(j < 8 ? 0.25 * j : 0.0);
  experts.counts = {700, 836, 0};
  return m;
}


void expect_dims(const gguf::File& f, const std::string& name, std::vector<int64_t> want) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(std::vector<int64_t>(t->ne.begin(), t->ne.begin() + t->n_dims), want) << name;
}

void expect_same_matrix(const tools::Imatrix& a, const tools::Imatrix& b) {
  EXPECT_EQ(a.datasets, b.datasets);
  EXPECT_EQ(a.model_name, b.model_name);
  EXPECT_EQ(a.chunk_count, b.chunk_count);
  EXPECT_EQ(a.chunk_size, b.chunk_size);
  EXPECT_EQ(a.run.next_chunk, b.run.next_chunk);
  EXPECT_EQ(a.run.nll_sum, b.run.nll_sum);
  EXPECT_EQ(a.run.nll_sq_sum, b.run.nll_sq_sum);
  EXPECT_EQ(a.run.n_scored, b.run.n_scored);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (const auto& [name, e] : a.entries) {
    ASSERT_TRUE(b.entries.count(name)) << name;
    const tools::ImatrixEntry& o = b.entries.at(name);
    EXPECT_EQ(e.n_cols, o.n_cols) << name;
    EXPECT_EQ(e.n_mat, o.n_mat) << name;
    EXPECT_EQ(e.sum2, o.sum2) << name;
    EXPECT_EQ(e.counts, o.counts) << name;
    EXPECT_EQ(a.tensor_importance(name, e.n_cols, e.n_mat), b.tensor_importance(name, o.n_cols, o.n_mat)) << name;
  }
}

// tools/imatrix/imatrix.cpp makes in_sum2 [nval / nmat, nmat] and counts
// [1, nmat]; gguf_write stores ggml_n_dims of them, so a dense entry is 1-D.
TEST(ImatrixFile, GgufHasLlamaImatrixDims) {
  const std::string dir = test::temp_dir();
  tools::save_imatrix_gguf(dense_and_experts(), dir + "/m.gguf");
  auto f = gguf::File::open(dir + "/m.gguf");
  expect_dims(*f, "blk.0.attn_q.weight.in_sum2", {8});
  expect_dims(*f, "blk.0.attn_q.weight.counts", {1});
  expect_dims(*f, "blk.0.ffn_up_exps.weight.in_sum2", {4, 3});
  expect_dims(*f, "blk.0.ffn_up_exps.weight.counts", {1, 3});
  expect_same_matrix(tools::load_imatrix(dir + "/m.gguf"), dense_and_experts());
}

// Every reader goes through load_imatrix: quantize's importance, --in-file
// (combine), --show-statistics and --resume get the same matrix from the old
// 2-D form as from llama.cpp's, and writing it again gives llama.cpp's dims.
TEST(ImatrixFile, TwoDimensionalFilesOfEarlierVersionsLoadTheSame) {
  const std::string dir = test::temp_dir();
  tools::save_imatrix_gguf(dense_and_experts(), dir + "/new.gguf");
  test::write_imatrix_two_dimensional(dir + "/new.gguf", dir + "/old.gguf");
  auto old_file = gguf::File::open(dir + "/old.gguf");
  expect_dims(*old_file, "blk.0.attn_q.weight.in_sum2", {8, 1});
  expect_dims(*old_file, "blk.0.attn_q.weight.counts", {1, 1});
  const tools::Imatrix fresh = tools::load_imatrix(dir + "/new.gguf");
  const tools::Imatrix old = tools::load_imatrix(dir + "/old.gguf");
  expect_same_matrix(old, fresh);

  tools::Imatrix from_old = old, from_new = fresh;
  tools::combine_imatrix(from_old, old);
  tools::combine_imatrix(from_new, fresh);
  expect_same_matrix(from_old, from_new);
  EXPECT_EQ(from_old.entries.at("blk.0.attn_q.weight").counts, (std::vector<double>{3072}));

  tools::ImatrixStatistics old_stats = tools::compute_imatrix_statistics(old);
  const tools::ImatrixStatistics new_stats = tools::compute_imatrix_statistics(fresh);
  old_stats.path = new_stats.path;  // the file names differ, nothing else may
  std::ostringstream old_text, new_text, old_json, new_json;
  tools::print_imatrix_statistics(old_text, old_stats);
  tools::print_imatrix_statistics(new_text, new_stats);
  tools::write_imatrix_statistics_json(old_json, old_stats);
  tools::write_imatrix_statistics_json(new_json, new_stats);
  EXPECT_TRUE(contains(new_text.str(), "ffn_up_exps.weight")) << new_text.str();
  EXPECT_EQ(old_text.str(), new_text.str());
  EXPECT_EQ(old_json.str(), new_json.str());

  tools::save_imatrix_gguf(old, dir + "/rewritten.gguf");
  EXPECT_TRUE(read_bytes(dir + "/rewritten.gguf") == read_bytes(dir + "/new.gguf"))
      << "an old file written again differs from the one written fresh";
}

// ---------------------------------------------------------------------------
// On stories260K

std::vector<Token> text_tokens(const Model& m, const std::string& path) {
  return m.vocab().tokenize(read_text_file(path), true);
}

TEST(ImatrixStories, TapsEqualTheHostCallbackPath) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  auto model = Model::load(model_path);
  const auto tokens = text_tokens(*model, text_path);
  tools::ImatrixOptions opt;
  opt.n_ctx = 128;
  opt.n_batch = 64;  // two graphs per chunk
  opt.max_chunks = 12;
  opt.n_threads = 2;
  opt.process_output = true;
  tools::Imatrix taps, host;
  tools::collect_imatrix(*model, tokens, opt, taps);
  opt.collect = tools::ImatrixCollect::Callback;
  tools::collect_imatrix(*model, tokens, opt, host);
  // 5 layers x 7 weights, and output.weight (--process-output).
  ASSERT_EQ(taps.entries.size(), model->output_is_tied() ? 35u : 36u);
  ASSERT_EQ(host.entries.size(), taps.entries.size());
  EXPECT_EQ(taps.chunk_count, 12);
  for (const auto& [name, e] : host.entries) {
    const tools::ImatrixEntry& t = taps.entries.at(name);
    EXPECT_EQ(t.counts, e.counts) << name;
    EXPECT_EQ(e.counts[0], 12 * 128) << name;
    for (int64_t k = 0; k < e.n_cols; ++k)
      ASSERT_LE(std::fabs(t.sum2[k] - e.sum2[k]), 1e-5 * std::fabs(e.sum2[k])) << name << " column " << k;
  }
  EXPECT_NEAR(std::exp(taps.run.nll_sum / taps.run.n_scored), std::exp(host.run.nll_sum / host.run.n_scored), 1e-9);
}

TEST(ImatrixStories, CombiningTwoHalvesEqualsTheWhole) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string dir = test::temp_dir();
  const std::string common = " -m " + model_path + " -f " + text_path + " -c 128 -b 128 -t 2 --no-ppl";
  std::string out;
  ASSERT_EQ(qlens("imatrix" + common + " --chunks 20 -o " + dir + "/whole.gguf", &out), 0) << out;
  ASSERT_EQ(qlens("imatrix" + common + " --chunks 10 -o " + dir + "/a.gguf", &out), 0) << out;
  ASSERT_EQ(qlens("imatrix" + common + " --chunk 10 --chunks 10 -o " + dir + "/b.dat", &out), 0) << out;
  ASSERT_EQ(qlens("imatrix --in-file " + dir + "/a.gguf --in-file " + dir + "/b.dat -o " + dir + "/ab.gguf", &out), 0)
      << out;
  const tools::Imatrix whole = tools::load_imatrix(dir + "/whole.gguf");
  const tools::Imatrix ab = tools::load_imatrix(dir + "/ab.gguf");
  EXPECT_EQ(ab.chunk_count, 20);
  // The model it was collected on is recorded (qlens.imatrix.model_name) and kept through a combine.
  const std::string model_name = gguf::File::open(model_path)->try_string("general.name").value_or("");
  EXPECT_EQ(whole.model_name, model_name);
  EXPECT_EQ(ab.model_name, model_name);
  ASSERT_EQ(ab.entries.size(), whole.entries.size());
  for (const auto& [name, e] : whole.entries) {
    // The .dat half stores mean(x²)·ncall in float: compare the importance
    // (mean of x²), which both formats keep.
    const auto want = whole.importance(name, e.n_cols), got = ab.importance(name, e.n_cols);
    for (int64_t k = 0; k < e.n_cols; ++k)
      ASSERT_LE(std::fabs(got[k] - want[k]), 1e-5 * std::fabs(want[k])) << name << " column " << k;
  }
  // Two GGUF halves combine to the whole's Σx² and counts directly.
  ASSERT_EQ(qlens("imatrix" + common + " --chunk 10 --chunks 10 -o " + dir + "/b.gguf", &out), 0) << out;
  ASSERT_EQ(qlens("imatrix --in-file " + dir + "/a.gguf --in-file " + dir + "/b.gguf -o " + dir + "/ab2.gguf", &out),
            0)
      << out;
  const tools::Imatrix ab2 = tools::load_imatrix(dir + "/ab2.gguf");
  for (const auto& [name, e] : whole.entries) {
    const tools::ImatrixEntry& c = ab2.entries.at(name);
    EXPECT_EQ(c.counts, e.counts) << name;
    for (int64_t k = 0; k < e.n_cols; ++k)
      ASSERT_LE(std::fabs(c.sum2[k] - e.sum2[k]), 1e-5 * std::fabs(e.sum2[k])) << name << " column " << k;
  }
  // Statistics of the combination print with their legend.
  ASSERT_EQ(qlens("imatrix --in-file " + dir + "/ab2.gguf --show-statistics --json " + dir + "/s.json", &out), 0)
      << out;
  EXPECT_TRUE(contains(out, "blk.4") || contains(out, "    4  ")) << out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/s.json"));
}

TEST(ImatrixStories, KilledRunResumesToTheSameFile) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string dir = test::temp_dir();
  const std::string args = " -m " + model_path + " -f " + text_path + " -c 128 -b 128 -t 1 --chunks 600" +
                           " --save-frequency 5 --output-frequency 0";
  std::string out;
  ASSERT_EQ(qlens("imatrix" + args + " -o " + dir + "/full.gguf", &out), 0) << out;

  // Start a run, SIGKILL it once a checkpoint exists.
  const std::string killed = dir + "/killed.gguf";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = std::string("exec ") + QLENS_BINARY + " imatrix" + args + " -o " + killed +
                            " >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!std::filesystem::exists(killed + ".at_15") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run finished before it could be killed";
  EXPECT_FALSE(std::filesystem::exists(killed)) << "no final file from a killed run";

  // Resume from the newest checkpoint.
  int64_t newest = -1;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch mt;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, mt, std::regex(R"(killed\.gguf\.at_(\d+))")))
      newest = std::max<int64_t>(newest, std::stoll(mt[1]));
  }
  ASSERT_GE(newest, 15);
  ASSERT_EQ(newest % 5, 0);
  ASSERT_EQ(qlens("imatrix" + args + " -o " + killed + " --resume " + killed + ".at_" + std::to_string(newest), &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "resumed")) << out;
  EXPECT_TRUE(read_bytes(killed) == read_bytes(dir + "/full.gguf")) << "the resumed run's file differs";
  // A checkpoint from another -c is refused.
  EXPECT_NE(qlens("imatrix -m " + model_path + " -f " + text_path + " -c 64 -o " + dir + "/x.gguf --resume " +
                      killed + ".at_" + std::to_string(newest),
                  &out),
            0);
  EXPECT_TRUE(contains(out, "-c 128")) << out;
}

// The old 2-D form through the command line, as users run it on the files
// they have: quantize, --in-file, --show-statistics and --resume give what
// the llama.cpp-shaped file gives.
TEST(ImatrixStories, TwoDimensionalFilesOfEarlierVersionsWorkInEveryCommand) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string dir = test::temp_dir();
  const std::string args = " -m " + model_path + " -f " + text_path + " -c 128 -b 128 -t 2 --chunks 4" +
                           " --save-frequency 2 --output-frequency 0";
  std::string out;
  ASSERT_EQ(qlens("imatrix" + args + " -o " + dir + "/new.gguf", &out), 0) << out;
  expect_dims(*gguf::File::open(dir + "/new.gguf"), "blk.0.attn_q.weight.in_sum2", {64});
  expect_dims(*gguf::File::open(dir + "/new.gguf"), "blk.0.attn_q.weight.counts", {1});
  test::write_imatrix_two_dimensional(dir + "/new.gguf", dir + "/old.gguf");
  test::write_imatrix_two_dimensional(dir + "/new.gguf.at_2", dir + "/old.gguf.at_2");
  expect_dims(*gguf::File::open(dir + "/old.gguf.at_2"), "blk.0.attn_q.weight.in_sum2", {64, 1});

  for (const char* f : {"new", "old"}) {
    const std::string form = f, m = dir + "/" + form + ".gguf";
    ASSERT_EQ(qlens("quantize --imatrix " + m + " " + model_path + " " + dir + "/q-" + form + ".gguf Q4_K_M", &out), 0)
        << out;
    ASSERT_EQ(qlens("imatrix --in-file " + m + " --in-file " + m + " -o " + dir + "/sum-" + form + ".gguf", &out), 0)
        << out;
    ASSERT_EQ(qlens("imatrix --in-file " + m + " --show-statistics > " + dir + "/stats-" + form + ".txt", &out), 0)
        << out;
    ASSERT_EQ(qlens("imatrix" + args + " --resume " + m + ".at_2 -o " + dir + "/resumed-" + form + ".gguf", &out), 0)
        << out;
    EXPECT_TRUE(contains(out, "resumed")) << out;
  }
  auto q_new = gguf::File::open(dir + "/q-new.gguf"), q_old = gguf::File::open(dir + "/q-old.gguf");
  ASSERT_EQ(q_new->tensors().size(), q_old->tensors().size());
  for (size_t i = 0; i < q_new->tensors().size(); ++i) {
    const gguf::TensorInfo &a = q_new->tensors()[i], &b = q_old->tensors()[i];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.nbytes, b.nbytes) << a.name;
    EXPECT_EQ(std::memcmp(q_new->tensor_data(a), q_old->tensor_data(b), a.nbytes), 0) << a.name;
  }
  EXPECT_TRUE(read_bytes(dir + "/sum-old.gguf") == read_bytes(dir + "/sum-new.gguf")) << "--in-file";
  std::string stats_old = read_bytes(dir + "/stats-old.txt");
  const std::string old_path = dir + "/old.gguf";
  for (size_t at; (at = stats_old.find(old_path)) != std::string::npos;)
    stats_old.replace(at, old_path.size(), dir + "/new.gguf");
  EXPECT_EQ(stats_old, read_bytes(dir + "/stats-new.txt")) << "--show-statistics";
  EXPECT_TRUE(read_bytes(dir + "/resumed-old.gguf") == read_bytes(dir + "/new.gguf")) << "--resume";
  EXPECT_TRUE(read_bytes(dir + "/resumed-new.gguf") == read_bytes(dir + "/new.gguf")) << "--resume";
}

TEST(ImatrixStories, BadInputIsAClearError) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  const std::string dir = test::temp_dir();
  std::string out;
  // A text shorter than one chunk.
  write_file_atomic(dir + "/short.txt", "Once upon a time there was a cat.");
  EXPECT_NE(qlens("imatrix -m " + model_path + " -f " + dir + "/short.txt -c 128 -o " + dir + "/o.gguf", &out), 0);
  EXPECT_TRUE(contains(out, "fewer than one chunk")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/o.gguf"));
  // An unwritable output path fails before any work.
  EXPECT_NE(qlens("imatrix -m " + model_path + " -f " + dir + "/short.txt -o /nonexistent/dir/o.gguf", &out), 0);
  EXPECT_TRUE(contains(out, "/nonexistent/dir/o.gguf")) << out;
  // An imatrix of another model.
  tools::Imatrix other;
  other.chunk_size = 128;
  tools::ImatrixEntry e;
  e.n_cols = 4096;
  e.sum2.assign(4096, 1.0);
  e.counts = {10};
  other.entries["blk.0.attn_q.weight"] = e;
  tools::save_imatrix_gguf(other, dir + "/other.gguf");
  QLENS_REQUIRE_SHARED(text_path, kText);
  EXPECT_NE(qlens("imatrix -m " + model_path + " -f " + text_path + " -c 128 --chunks 2 --in-file " + dir +
                      "/other.gguf -o " + dir + "/o.gguf",
                  &out),
            0);
  EXPECT_TRUE(contains(out, "blk.0.attn_q.weight")) << out;
  EXPECT_TRUE(contains(out, "another model")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/o.gguf"));
  // Flags.
  EXPECT_NE(qlens("imatrix -m " + model_path + " -f " + text_path + " --output-format xml", &out), 0);
  EXPECT_TRUE(contains(out, "--output-format")) << out;
  EXPECT_NE(qlens("imatrix -m " + model_path + " -f " + text_path + " --device vulkan:99", &out), 0);
  EXPECT_TRUE(contains(out, "vulkan:99")) << out;
  EXPECT_NE(qlens("imatrix --show-statistics", &out), 0);
  EXPECT_TRUE(contains(out, "--in-file")) << out;
}

// The acceptance test of the whole idea: an imatrix from one half of the
// text lowers the perplexity of Q4_K_M and Q2_K quants on the other half.
TEST(ImatrixStories, QuantizingWithAnImatrixLowersHeldOutPerplexity) {
  if (!test::slow_tests_enabled()) GTEST_SKIP() << "QLENS_SLOW_TESTS=0";
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string dir = test::temp_dir();
  const std::string text = read_text_file(text_path);
  // Split at a story boundary near the middle.
  size_t cut = text.find("\n", text.size() / 2);
  ASSERT_NE(cut, std::string::npos);
  write_file_atomic(dir + "/calib.txt", text.substr(0, cut));
  write_file_atomic(dir + "/held.txt", text.substr(cut + 1));
  std::string out;
  // The whole calibration half, and the whole held-out half: with fewer
  // chunks the difference at 4 bits drowns in sampling noise.
  ASSERT_EQ(qlens("imatrix -m " + model_path + " -f " + dir + "/calib.txt -c 128 -b 128 -t 2 --no-ppl -o " + dir +
                      "/im.gguf",
                  &out),
            0)
      << out;
  // The same matrix in the legacy format.
  tools::save_imatrix_dat(tools::load_imatrix(dir + "/im.gguf"), dir + "/im.dat");
  auto ppl = [&](const std::string& model) {
    std::string o;
    EXPECT_EQ(qlens("perplexity -m " + model + " -f " + dir + "/held.txt -c 128 -b 128 -t 2", &o), 0)
        << o;
    std::smatch mt;
    EXPECT_TRUE(std::regex_search(o, mt, std::regex(R"(PPL = ([0-9.]+))"))) << o;
    return mt.empty() ? 0.0 : std::stod(mt[1]);
  };
  for (const char* type : {"Q4_K_M", "Q2_K"}) {
    const std::string plain = dir + "/plain-" + type + ".gguf";
    ASSERT_EQ(qlens("quantize " + model_path + " " + plain + " " + type, &out), 0) << out;
    const double p_plain = ppl(plain);
    for (const char* im : {"im.gguf", "im.dat"}) {
      if (std::string(type) == "Q2_K" && std::string(im) == "im.dat") continue;  // one format check is enough
      const std::string with = dir + "/with-" + type + "-" + im + ".gguf";
      ASSERT_EQ(qlens("quantize --imatrix " + dir + "/" + im + " " + model_path + " " + with + " " + type, &out), 0)
          << out;
      const double p_with = ppl(with);
      EXPECT_LT(p_with, p_plain) << type << " with " << im << ": " << p_with << " vs " << p_plain << " without";
      std::printf("%s: PPL %.4f without imatrix, %.4f with %s\n", type, p_plain, p_with, im);
    }
  }
}

// ---------------------------------------------------------------------------
// A collecting run's policy (tools/imatrix/imatrix_run.h): format, starting point,
// saves as it goes, the partial file of a failed run, perplexity, JSON.

TEST(ImatrixRun, OutputFormatByFlagElseByName) {
  EXPECT_EQ(tools::imatrix_output_format("", "a/imatrix.dat"), tools::ImatrixFormat::Dat);
  EXPECT_EQ(tools::imatrix_output_format("", "imatrix.gguf"), tools::ImatrixFormat::Gguf);
  EXPECT_EQ(tools::imatrix_output_format("", "imatrix.dat.gguf"), tools::ImatrixFormat::Gguf);
  EXPECT_EQ(tools::imatrix_output_format("gguf", "imatrix.dat"), tools::ImatrixFormat::Gguf);
  EXPECT_EQ(tools::imatrix_output_format("dat", "imatrix.gguf"), tools::ImatrixFormat::Dat);
  EXPECT_EQ(test::error_of([] { tools::imatrix_output_format("GGUF", "x"); }),
            "qlens imatrix: --output-format must be gguf or dat, got 'GGUF'");
}

TEST(ImatrixRun, SavesDueFollowTheFrequenciesOfThisRun) {
  tools::ImatrixSaving s;
  s.out_path = "out.gguf";
  s.output_frequency = 3;
  s.save_frequency = 2;
  std::vector<int64_t> outputs;
  std::vector<std::string> checkpoints;
  // A run resumed at 10 chunks: frequencies count this run's chunks, the
  // checkpoint is named by the matrix's chunks.
  for (int64_t done = 1; done <= 6; ++done) {
    const tools::ImatrixSavesDue due = tools::imatrix_saves_due(s, done, 10 + done);
    if (due.output) outputs.push_back(done);
    if (!due.checkpoint.empty()) checkpoints.push_back(due.checkpoint);
  }
  EXPECT_EQ(outputs, (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(checkpoints, (std::vector<std::string>{"out.gguf.at_12", "out.gguf.at_14", "out.gguf.at_16"}));
  s.output_frequency = s.save_frequency = 0;  // 0: never during the run
  for (int64_t done = 1; done <= 4; ++done) {
    const tools::ImatrixSavesDue due = tools::imatrix_saves_due(s, done, done);
    EXPECT_FALSE(due.output);
    EXPECT_TRUE(due.checkpoint.empty());
  }
  EXPECT_EQ(tools::imatrix_checkpoint_path("a/o.dat", 40), "a/o.dat.at_40");
  EXPECT_EQ(tools::imatrix_partial_path("a/o.dat"), "a/o.dat.partial.gguf");
}

tools::Imatrix small_checkpoint() {
  tools::Imatrix m;
  tools::ImatrixEntry e;
  e.n_cols = 2;
  e.sum2 = {512, 1024};
  e.counts = {256};
  m.entries["blk.0.attn_q.weight"] = e;
  m.datasets = {"t.txt"};
  m.chunk_count = 2;
  m.chunk_size = 128;
  m.run.next_chunk = 3;
  m.run.nll_sum = 7.5;
  m.run.nll_sq_sum = 30.25;
  m.run.n_scored = 5;
  return m;
}

TEST(ImatrixRun, StartsEmptyFromFilesOrFromACheckpoint) {
  const std::string dir = test::temp_dir();
  const tools::Imatrix empty = tools::imatrix_run_start("", {}, 128, dir + "/out.gguf");
  EXPECT_EQ(empty.path, dir + "/out.gguf");
  EXPECT_TRUE(empty.entries.empty());
  EXPECT_EQ(empty.run.next_chunk, -1);

  const std::string ckpt = dir + "/ckpt.gguf", dat = dir + "/m.dat";
  tools::save_imatrix_gguf(small_checkpoint(), ckpt);
  tools::save_imatrix_dat(small_checkpoint(), dat);
  // --in-file: the data without the run's state.
  const tools::Imatrix from_file = tools::imatrix_run_start("", {ckpt}, 128, dir + "/out.gguf");
  ASSERT_EQ(from_file.entries.size(), 1u);
  EXPECT_EQ(from_file.entries.at("blk.0.attn_q.weight").counts, (std::vector<double>{256}));
  EXPECT_EQ(from_file.run.next_chunk, -1);
  EXPECT_EQ(from_file.run.n_scored, 0);
  EXPECT_EQ(from_file.run.nll_sum, 0);
  // A .dat counts chunks: given rows of this run's chunk size.
  const tools::Imatrix from_dat = tools::imatrix_run_start("", {dat}, 128, dir + "/out.gguf");
  EXPECT_FALSE(from_dat.counts_in_chunks);
  EXPECT_EQ(from_dat.entries.at("blk.0.attn_q.weight").counts, (std::vector<double>{256}));
  // --resume: the state goes on.
  const tools::Imatrix resumed = tools::imatrix_run_start(ckpt, {}, 128, dir + "/out.gguf");
  EXPECT_EQ(resumed.run.next_chunk, 3);
  EXPECT_EQ(resumed.run.n_scored, 5);
  EXPECT_EQ(resumed.run.nll_sum, 7.5);
  EXPECT_EQ(resumed.chunk_count, 2);
  EXPECT_EQ(test::error_of([&] { tools::imatrix_run_start(ckpt, {}, 64, "o"); }),
            "qlens imatrix: --resume " + ckpt + " was made with -c 128, this run has -c 64");
  tools::Imatrix finished = small_checkpoint();
  finished.run = {};  // a final file: no state to resume
  tools::save_imatrix_gguf(finished, dir + "/final.gguf");
  EXPECT_EQ(test::error_of([&] { tools::imatrix_run_start(dir + "/final.gguf", {}, 128, "o"); }),
            "qlens imatrix: --resume " + dir +
                "/final.gguf is not a qlens checkpoint (no qlens.imatrix.next_chunk key; checkpoints are GGUF files)");
  EXPECT_TRUE(test::contains(test::error_of([&] { tools::imatrix_run_start(dat, {}, 128, "o"); }),
                             "is not a qlens checkpoint"));
}

TEST(ImatrixRun, PerplexityOfWhatWasScored) {
  tools::Imatrix m = small_checkpoint();
  const auto ppl = tools::imatrix_run_perplexity(m, true);
  ASSERT_TRUE(ppl.has_value());
  // NLLs summing to 7.5 with squares 30.25 over 5: mean 1.5, variance 3.8.
  EXPECT_DOUBLE_EQ(ppl->nll, 1.5);
  EXPECT_DOUBLE_EQ(ppl->ppl, std::exp(1.5));
  EXPECT_DOUBLE_EQ(ppl->ppl_error, std::sqrt(3.8 / 4) * std::exp(1.5));
  EXPECT_FALSE(tools::imatrix_run_perplexity(m, false).has_value());  // --no-ppl
  m.run.n_scored = 0;
  EXPECT_FALSE(tools::imatrix_run_perplexity(m, true).has_value());
}

TEST(ImatrixRun, JsonSummaryHasTheRunItsFiguresAndEveryTensor) {
  tools::Imatrix m = small_checkpoint();
  tools::ImatrixEntry experts;
  experts.n_cols = 2;
  experts.n_mat = 2;
  experts.sum2 = {1, 2, 3, 4};
  experts.counts = {3, 5};
  m.entries["output.weight"] = experts;
  tools::ImatrixRunSummary s;
  s.model_path = "m.gguf";
  s.text_path = "t.txt";
  s.out_path = "o.gguf";
  s.options.n_ctx = 64;
  s.options.n_batch = 32;
  s.options.first_chunk = 3;
  s.options.collect = tools::ImatrixCollect::Callback;
  s.stats.chunks_this_run = 4;
  s.stats.tokens_per_second = 123.5;
  s.unrouted_experts = {"blk.1.ffn_up_exps.weight: expert 3 got no rows"};
  const std::string text = tools::imatrix_run_json(s, m);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const JsonValue doc = parse_json(text, "run.json");
  EXPECT_EQ(doc.at("tool").as_string(), "qlens imatrix");
  EXPECT_EQ(doc.at("schema_version").as_int(), tools::kImatrixStatisticsJsonSchemaVersion);
  EXPECT_EQ(doc.at("inputs").at("model").as_string(), "m.gguf");
  EXPECT_EQ(doc.at("inputs").at("text").as_string(), "t.txt");
  EXPECT_TRUE(doc.at("inputs").at("resume").is_null());
  const JsonValue& settings = doc.at("settings");
  EXPECT_FALSE(settings.at("statistics").as_bool());
  EXPECT_EQ(settings.at("n_ctx").as_int(), 64);
  EXPECT_EQ(settings.at("n_batch").as_int(), 32);
  EXPECT_EQ(settings.at("first_chunk").as_int(), 3);
  EXPECT_TRUE(settings.at("n_chunks").is_null());  // every chunk
  EXPECT_EQ(settings.at("collect").as_string(), "callback");
  EXPECT_EQ(settings.at("device").as_string(), "cpu");
  EXPECT_EQ(doc.at("outputs").at("imatrix").as_string(), "o.gguf");
  EXPECT_EQ(doc.at("chunks_this_run").as_int(), 4);
  EXPECT_EQ(doc.at("chunk_count").as_int(), 2);
  EXPECT_EQ(doc.at("n_tokens_evaluated").as_int(), 4 * 64);
  EXPECT_EQ(doc.at("tokens_per_second").as_number(), 123.5);
  EXPECT_TRUE(doc.at("ppl").at("value").is_null());  // no perplexity given
  EXPECT_TRUE(doc.at("ppl").at("error").is_null());
  EXPECT_EQ(doc.at("n_tokens_scored").as_int(), 5);
  const JsonValue& tensors = doc.at("tensors");
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors.at(0).at("tensor").as_string(), "blk.0.attn_q.weight");
  EXPECT_EQ(tensors.at(0).at("layer").as_int(), 0);
  EXPECT_EQ(tensors.at(0).at("role").as_string(), "attn_q");
  EXPECT_EQ(tensors.at(0).at("n_cols").as_int(), 2);
  EXPECT_EQ(tensors.at(0).at("n_mat").as_int(), 1);
  EXPECT_EQ(tensors.at(0).at("rows").as_number(), 256);
  EXPECT_EQ(tensors.at(1).at("tensor").as_string(), "output.weight");
  EXPECT_TRUE(tensors.at(1).at("layer").is_null());
  EXPECT_EQ(tensors.at(1).at("role").as_string(), "output");
  EXPECT_EQ(tensors.at(1).at("n_mat").as_int(), 2);
  EXPECT_EQ(tensors.at(1).at("rows").as_number(), 8);  // summed over the experts
  ASSERT_EQ(doc.at("unrouted_experts").size(), 1u);
  EXPECT_EQ(doc.at("unrouted_experts").at(0).as_string(), s.unrouted_experts[0]);

  s.resume_path = "r.gguf";
  s.options.max_chunks = 6;
  s.options.collect = tools::ImatrixCollect::Taps;
  s.ppl = tools::PerplexityEstimate{1.5, 4.25, 0.125};
  const JsonValue doc2 = parse_json(tools::imatrix_run_json(s, m), "run2.json");
  EXPECT_EQ(doc2.at("inputs").at("resume").as_string(), "r.gguf");
  EXPECT_EQ(doc2.at("settings").at("n_chunks").as_int(), 6);
  EXPECT_EQ(doc2.at("settings").at("collect").as_string(), "taps");
  EXPECT_EQ(doc2.at("ppl").at("value").as_number(), 4.25);
  EXPECT_EQ(doc2.at("ppl").at("error").as_number(), 0.125);
}

// The files of a run on a real model: checkpoints as they fall due, the
// partial file of a run stopped by an error, and a resumed run that ends
// with what an uninterrupted one collects.
TEST(ImatrixRun, SavesAsItGoesAndAFailedRunResumesToTheSameMatrix) {
  QLENS_REQUIRE_SHARED(model_path, kStories);
  QLENS_REQUIRE_SHARED(text_path, kText);
  const std::string dir = test::temp_dir();
  auto model = Model::load(model_path);
  tools::ImatrixOptions opt;
  opt.n_ctx = opt.n_batch = 128;
  opt.max_chunks = 3;
  opt.n_threads = 2;
  const auto tokens = tools::tokenize_text_file(model->vocab(), text_path, 3 * 128, "imatrix");
  tools::ImatrixSaving saving;
  saving.out_path = dir + "/stopped.gguf";
  saving.output_frequency = 2;
  saving.save_frequency = 1;

  tools::Imatrix stopped = tools::imatrix_run_start("", {}, opt.n_ctx, saving.out_path);
  std::ostringstream log;
  EXPECT_EQ(test::error_of([&] {
              tools::collect_imatrix_saving(*model, tokens, opt, stopped, saving, log,
                                            [](const tools::ImatrixChunkReport& r) {
                                              if (r.done == 2) throw Error("stopped by the test");
                                            });
            }),
            "stopped by the test");
  EXPECT_EQ(stopped.chunk_count, 2);
  EXPECT_TRUE(std::filesystem::exists(saving.out_path + ".at_1"));
  EXPECT_FALSE(std::filesystem::exists(saving.out_path + ".at_2")) << "the failing chunk's saves are not made";
  EXPECT_FALSE(std::filesystem::exists(saving.out_path)) << "the output is due every 2 chunks";
  const std::string partial = saving.out_path + ".partial.gguf";
  EXPECT_EQ(log.str(), "saved the 2 chunks collected so far to " + partial + "\n");
  EXPECT_EQ(tools::load_imatrix(partial).run.next_chunk, 2);

  tools::Imatrix resumed = tools::imatrix_run_start(partial, {}, opt.n_ctx, dir + "/resumed.gguf");
  tools::ImatrixSaving quiet;
  quiet.out_path = dir + "/resumed.gguf";
  quiet.output_frequency = 0;
  std::ostringstream log2;
  const tools::ImatrixRunStats rest = tools::collect_imatrix_saving(*model, tokens, opt, resumed, quiet, log2);
  EXPECT_EQ(rest.chunks_this_run, 1);
  EXPECT_GT(rest.tokens_per_second, 0);
  EXPECT_TRUE(log2.str().empty());
  EXPECT_FALSE(std::filesystem::exists(quiet.out_path));

  tools::Imatrix whole = tools::imatrix_run_start("", {}, opt.n_ctx, dir + "/whole.gguf");
  saving.out_path = dir + "/whole.gguf";
  EXPECT_EQ(tools::collect_imatrix_saving(*model, tokens, opt, whole, saving, log2).chunks_this_run, 3);
  EXPECT_TRUE(std::filesystem::exists(saving.out_path)) << "due after chunk 2";
  EXPECT_TRUE(std::filesystem::exists(saving.out_path + ".at_3"));
  EXPECT_EQ(resumed.chunk_count, whole.chunk_count);
  EXPECT_EQ(resumed.run.n_scored, whole.run.n_scored);
  EXPECT_EQ(resumed.run.nll_sum, whole.run.nll_sum);
  ASSERT_EQ(resumed.entries.size(), whole.entries.size());
  for (const auto& [name, e] : whole.entries) {
    EXPECT_EQ(resumed.entries.at(name).sum2, e.sum2) << name;
    EXPECT_EQ(resumed.entries.at(name).counts, e.counts) << name;
  }
  const auto ppl = tools::imatrix_run_perplexity(whole, true);
  ASSERT_TRUE(ppl.has_value());
  EXPECT_GT(ppl->ppl, 1);
}

}  // namespace
}  // namespace qlens
