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
#include "test_util.h"
#include "tools/imatrix.h"
#include "tools/imatrix_file.h"
#include "tools/imatrix_stats.h"

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

// The file as earlier qlens versions wrote it: every tensor 2-D, a dense
// weight's in_sum2 [n_cols, 1] and counts [1, 1]; metadata and data as they are.
void write_two_dimensional(const std::string& in, const std::string& out) {
  auto f = gguf::File::open(in);
  gguf::Writer w;
  for (const auto& kv : f->metadata()) w.set(kv.key, kv.value);
  for (const auto& t : f->tensors()) {
    const int64_t ne[2] = {t.ne[0], t.ne[1]};
    w.add_tensor(t.name, t.type, ne, f->tensor_data(t), t.nbytes);
  }
  w.write(out);
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
  write_two_dimensional(dir + "/new.gguf", dir + "/old.gguf");
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
  write_two_dimensional(dir + "/new.gguf", dir + "/old.gguf");
  write_two_dimensional(dir + "/new.gguf.at_2", dir + "/old.gguf.at_2");
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
  if (const char* slow = std::getenv("QLENS_SLOW_TESTS"); slow && std::string(slow) == "0")
    GTEST_SKIP() << "slow test (QLENS_SLOW_TESTS=0)";
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

}  // namespace
}  // namespace qlens
