// Runs across processes (mpirun): each must give what one process gives, byte
// for byte, and a run a rank died in must resume to the same result. Skips in
// a build without MPI or without mpirun (Debian: openmpi-bin libopenmpi-dev).
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/text_file.h"
#include "dist/comm.h"
#include "test_util.h"
#include "tools/synth/synth.h"

namespace qlens {
namespace {

using test::contains;
using test::run_command;

// What a rank's process runs: qlens, one compute thread (ranks share the
// machine's cores).
const std::string kQlens = std::string(QLENS_BINARY);

class Mpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::built_with_mpi()) GTEST_SKIP() << "built without MPI (-DQLENS_MPI=OFF)";
    if (run_command("command -v mpirun", nullptr) != 0) GTEST_SKIP() << "mpirun not found (Debian: openmpi-bin)";
    dir_ = test::temp_dir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
  }

  // mpirun of N ranks on this machine (CI runs as root, which Open MPI
  // refuses unless told).
  static std::string mpirun(int n_ranks) {
    return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np " +
           std::to_string(n_ranks) + " ";
  }

  // Runs `qlens ARGS` on n_ranks processes (1: plainly); returns stdout and
  // stderr, failing the test on a non-zero exit.
  std::string qlens(int n_ranks, const std::string& args) {
    std::string out;
    const std::string cmd = (n_ranks > 1 ? mpirun(n_ranks) : std::string()) + kQlens + " " + args + " 2>&1";
    const int rc = run_command(cmd, &out);
    EXPECT_EQ(rc, 0) << cmd << "\n" << out;
    return out;
  }

  // Starts `qlens ARGS` on n_ranks processes, SIGKILLs rank `victim` once
  // `wait_for` exists, and returns the job's exit status (its output in
  // DIR/run.log).
  int run_and_kill(int n_ranks, const std::string& args, const std::string& wait_for, int victim) {
    const std::string script = dir_ + "/kill.sh";
    write_file_atomic(script, mpirun(n_ranks) + kQlens + " " + args + " > " + dir_ + "/run.log 2>&1 &\n" +
                                  "pid=$!\n"
                                  "while [ ! -e " + wait_for + " ] && kill -0 $pid 2>/dev/null; do sleep 0.002; done\n"
                                  // The rank among this test's processes (its folder in their command
                                  // lines), found through /proc alone (no procps in a bare Debian).
                                  "for f in $(grep -lzx OMPI_COMM_WORLD_RANK=" + std::to_string(victim) +
                                  " /proc/[0-9]*/environ 2>/dev/null); do\n"
                                  "  d=${f%/environ}\n"
                                  "  if grep -qzF '" + dir_ + "' $d/cmdline 2>/dev/null; then kill -9 \"${d#/proc/}\"; fi\n"
                                  "done\n"
                                  "wait $pid\n");
    return run_command("bash " + script, nullptr);
  }

  std::string dir_;
};

// A model the tests make: a synth preset in F32.
std::string synth_model(const std::string& preset) {
  const std::string file = test::temp_dir() + "/" + preset + ".gguf";
  if (!std::filesystem::exists(file)) {
    tools::SynthOptions o;
    o.preset = preset;
    o.type = DType::F32;
    tools::synth_model(o, file);
  }
  return file;
}

// A text of plain words, different in every chunk (the synth models'
// generated vocabularies tokenize any text).
std::string word_text() {
  const std::string file = test::temp_dir() + "/words.txt";
  if (std::filesystem::exists(file)) return file;
  const std::vector<std::string> words = {"the", "model", "quant", "layer", "tensor", "bits", "of",  "a",
                                          "river", "stone", "light", "runs", "under", "every", "small", "town"};
  std::string text;
  uint64_t x = 12345;
  for (int i = 0; i < 12000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    text += words[(x >> 33) % words.size()];
    text += (x >> 40) % 11 == 0 ? ".\n" : " ";
  }
  write_file_atomic(file, text);
  return file;
}

struct ModelAndText {
  std::string model, text;
};

// stories260K on TinyStories (../shared), and two synth models on the word
// text: a family with sliding-window layers (gemma3) and an MoE.
std::vector<ModelAndText> models() {
  std::vector<ModelAndText> list;
  const std::string stories = test::shared_path("models/stories260K.gguf");
  const std::string tiny_stories = test::shared_path("data/tinystories/tinystories_val.txt");
  if (!stories.empty() && !tiny_stories.empty()) list.push_back({stories, tiny_stories});
  list.push_back({synth_model("gemma3-tiny"), word_text()});
  list.push_back({synth_model("qwen3moe-tiny"), word_text()});
  return list;
}

std::string final_estimate(const std::string& out) {
  const size_t at = out.find("Final estimate");
  return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
}

TEST_F(Mpi, ImatrixEqualsOneProcessByteForByte) {
  if (test::shared_path("models/stories260K.gguf").empty())
    std::printf("note: ../shared absent: stories260K is left out, the synth models run\n");
  for (const ModelAndText& mt : models()) {
    SCOPED_TRACE(mt.model);
    const std::string args = "imatrix -m " + mt.model + " -f " + mt.text + " -c 64 --chunks 7 -t 1 -o ";
    const std::string one = qlens(1, args + dir_ + "/one.gguf");
    for (int n : {2, 3}) {
      const std::string out_path = dir_ + "/np" + std::to_string(n) + ".gguf";
      const std::string out = qlens(n, args + out_path);
      EXPECT_TRUE(contains(out, std::to_string(n) + " processes")) << out;
      EXPECT_EQ(read_text_file(out_path), read_text_file(dir_ + "/one.gguf")) << n << " ranks";
      EXPECT_EQ(final_estimate(out), final_estimate(one)) << n << " ranks";
      EXPECT_FALSE(final_estimate(out).empty()) << out;
    }
  }
}

// Open MPI ends the whole job when a rank dies; rank 0's checkpoints hold
// whole chunks in order, and --resume (on any number of ranks) completes the
// same file as one uninterrupted process.
TEST_F(Mpi, ImatrixKilledRankResumesToTheSameFile) {
  const std::string model = synth_model("gemma3-tiny"), text = word_text();
  const std::string args = "imatrix -m " + model + " -f " + text + " -c 32 --chunks 240 -t 1 ";
  qlens(1, args + "-o " + dir_ + "/one.gguf");

  // Rank 1 killed once the checkpoint after 8 chunks exists.
  const std::string out = dir_ + "/run.gguf";
  ASSERT_NE(run_and_kill(2, args + "--save-frequency 4 -o " + out, out + ".at_8", 1), 0)
      << "the run ended before rank 1 was killed: " << read_text_file(dir_ + "/run.log");

  // The latest whole checkpoint.
  int64_t latest = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string(), prefix = "run.gguf.at_";
    if (name.rfind(prefix, 0) == 0 && name.find(".tmp") == std::string::npos)
      latest = std::max<int64_t>(latest, std::stoll(name.substr(prefix.size())));
  }
  std::printf("killed after checkpoint %lld of 240 chunks\n", static_cast<long long>(latest));
  ASSERT_GE(latest, 8);
  ASSERT_LT(latest, 240);
  const std::string resumed = qlens(3, args + "--resume " + out + ".at_" + std::to_string(latest) + " -o " + out);
  EXPECT_TRUE(contains(resumed, "(resumed)")) << resumed;
  EXPECT_EQ(read_text_file(out), read_text_file(dir_ + "/one.gguf"));
}

// --split-layers: one model across the ranks by layers (each rank its
// layers' weights): one process's perplexity, and its imatrix byte for byte,
// checkpoints included; a checkpoint resumes on other ranks, split or not.
TEST_F(Mpi, SplitLayersGiveOneProcesssPerplexityAndImatrix) {
  for (const ModelAndText& mt : models()) {
    SCOPED_TRACE(mt.model);
    const std::string ppl_args = "perplexity -m " + mt.model + " -f " + mt.text + " -c 64 --chunks 5 -t 1";
    const std::string one = final_estimate(qlens(1, ppl_args));
    EXPECT_FALSE(one.empty());
    const std::string im_args =
        "imatrix -m " + mt.model + " -f " + mt.text + " -c 64 --chunks 5 -t 1 --process-output --save-frequency 2 -o ";
    qlens(1, im_args + dir_ + "/one.gguf");
    const int max_ranks = mt.model.find("qwen3moe") != std::string::npos ? 2 : 3;  // its 2 layers
    for (int n = 2; n <= max_ranks; ++n) {
      SCOPED_TRACE(std::to_string(n) + " ranks");
      const std::string out = qlens(n, ppl_args + " --split-layers");
      EXPECT_EQ(final_estimate(out), one) << out;
      EXPECT_TRUE(contains(out, "rank " + std::to_string(n - 1) + ": layer")) << out;
      const std::string path = dir_ + "/split" + std::to_string(n) + ".gguf";
      qlens(n, im_args + path + " --split-layers");
      EXPECT_EQ(read_text_file(path), read_text_file(dir_ + "/one.gguf"));
      EXPECT_EQ(read_text_file(path + ".at_4"), read_text_file(dir_ + "/one.gguf.at_4"));
      // The checkpoint after 2 chunks, resumed split on n ranks and by chunks on 3.
      qlens(n, im_args + dir_ + "/resumed.gguf --split-layers --resume " + path + ".at_2");
      EXPECT_EQ(read_text_file(dir_ + "/resumed.gguf"), read_text_file(dir_ + "/one.gguf"));
      qlens(3, im_args + dir_ + "/resumed.gguf --resume " + path + ".at_2");
      EXPECT_EQ(read_text_file(dir_ + "/resumed.gguf"), read_text_file(dir_ + "/one.gguf"));
    }
  }
  // More ranks than layers, and a run under mpirun without --split-layers, are clear errors.
  std::string out;
  EXPECT_NE(run_command(mpirun(3) + kQlens + " perplexity -m " + synth_model("qwen3moe-tiny") + " -f " + word_text() +
                            " -c 64 --chunks 1 --split-layers 2>&1",
                        &out),
            0);
  EXPECT_TRUE(contains(out, "3 ranks for the 2 layers")) << out;
  EXPECT_NE(run_command(mpirun(2) + kQlens + " perplexity -m " + synth_model("gemma3-tiny") + " -f " + word_text() +
                            " -c 64 --chunks 1 2>&1",
                        &out),
            0);
  EXPECT_TRUE(contains(out, "give --split-layers")) << out;
}

// compare --split-layers: both models' layers split alike over the ranks,
// the two streams passed on together; every node's figures (each measured on
// the rank of its layer), the routers' agreement and the KL divergence equal
// one process's, as the report, the JSON and the CSV show.
TEST_F(Mpi, SplitLayersCompareGivesOneProcesssNodesAndKld) {
  for (const ModelAndText& mt : models()) {
    SCOPED_TRACE(mt.model);
    const std::string quant = dir_ + "/q4.gguf";
    qlens(1, "quantize " + mt.model + " " + quant + " Q4_0");
    const std::string args = "compare --ref " + mt.model + " -m " + quant + " -f " + mt.text + " -c 64 --chunks 4 -t 1";
    const std::string report = qlens(1, args + " --json " + dir_ + "/one.json --csv " + dir_ + "/one.csv");
    ASSERT_TRUE(contains(report, "worst nodes")) << report;
    const int max_ranks = mt.model.find("qwen3moe") != std::string::npos ? 2 : 3;  // its 2 layers
    for (int n = 2; n <= max_ranks; ++n) {
      SCOPED_TRACE(std::to_string(n) + " ranks");
      const std::string out = qlens(n, args + " --split-layers --json " + dir_ + "/split.json --csv " + dir_ + "/split.csv");
      EXPECT_TRUE(contains(out, "worst nodes")) << out;
      EXPECT_EQ(read_text_file(dir_ + "/split.json"), read_text_file(dir_ + "/one.json"));
      EXPECT_EQ(read_text_file(dir_ + "/split.csv"), read_text_file(dir_ + "/one.csv"));
    }
  }
  // Without --split-layers, several ranks would each compare everything.
  std::string out;
  EXPECT_NE(run_command(mpirun(2) + kQlens + " compare --ref " + synth_model("gemma3-tiny") + " -m " +
                            synth_model("gemma3-tiny") + " -f " + word_text() + " -c 64 --chunks 1 2>&1",
                        &out),
            0);
  EXPECT_TRUE(contains(out, "give --split-layers")) << out;
  // The reference logits exist on the last rank only: --kl-divergence-base is refused with the split.
  EXPECT_NE(run_command(mpirun(2) + kQlens + " compare --ref " + synth_model("gemma3-tiny") + " -m " +
                            synth_model("gemma3-tiny") + " -f " + word_text() + " -c 64 --chunks 1 --split-layers " +
                            "--kl-divergence-base " + dir_ + "/base.kld 2>&1",
                        &out),
            0);
  EXPECT_TRUE(contains(out, "--kl-divergence-base is not written there")) << out;
}

// Sensitivity: each rank makes the reference and probes its share; rank 0's
// JSON is one process's, byte for byte (quant and noise mode, tensors and
// groups), and the ranks' checkpoints are gone at the end.
TEST_F(Mpi, SensitivityEqualsOneProcessByteForByte) {
  for (const ModelAndText& mt : models()) {
    SCOPED_TRACE(mt.model);
    const std::string base = "sensitivity -m " + mt.model + " -f " + mt.text + " -c 64 --chunks 2 -t 1 ";
    std::vector<std::string> runs = {"--types Q4_0,Q8_0", "--mode noise --noise-levels 0.02,0.08 --types Q4_0,Q5_1"};
    if (mt.model.find("moe") != std::string::npos) runs.push_back("--types Q4_0,Q8_0 --group experts");
    // Gemma 3's output is its token embedding: under --split-layers the last
    // rank reads it too, and must get each of its replacements.
    if (mt.model.find("gemma3") != std::string::npos) runs.push_back("--types Q4_0 --group role");
    for (const std::string& flags : runs) {
      SCOPED_TRACE(flags);
      qlens(1, base + flags + " --json " + dir_ + "/one.json");
      for (int n : {2, 3}) {
        const std::string json = dir_ + "/np" + std::to_string(n) + ".json";
        qlens(n, base + flags + " --json " + json);
        EXPECT_EQ(read_text_file(json), read_text_file(dir_ + "/one.json")) << n << " ranks";
        for (int r = 1; r < n; ++r)
          EXPECT_FALSE(std::filesystem::exists(json + ".rank" + std::to_string(r))) << "rank " << r << "'s checkpoint";
        // The model split by layers: each rank probes its layers' tensors.
        if (n == 3 && mt.model.find("qwen3moe") != std::string::npos) continue;  // its 2 layers
        qlens(n, base + flags + " --split-layers --json " + json);
        EXPECT_EQ(read_text_file(json), read_text_file(dir_ + "/one.json")) << n << " ranks, --split-layers";
      }
    }
  }
}

// A rank killed mid-run ends the job; every rank checkpointed each finished
// tensor (JSON, JSON.rank<R>), and --resume on another number of ranks
// completes the table as one uninterrupted process makes it.
TEST_F(Mpi, SensitivityKilledRankResumesToTheSameTable) {
  const std::string model = synth_model("gemma3-tiny"), text = word_text();
  const std::string args = "sensitivity -m " + model + " -f " + text +
                           " -c 64 --chunks 4 -t 1 --types Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,IQ4_NL --json ";
  qlens(1, args + dir_ + "/one.json");

  const std::string json = dir_ + "/run.json";
  ASSERT_NE(run_and_kill(3, args + json, json + ".rank2", 2), 0)
      << "the run ended before rank 2 was killed: " << read_text_file(dir_ + "/run.log");
  ASSERT_TRUE(std::filesystem::exists(json + ".rank2"));
  const std::string resumed = qlens(2, args + json + " --resume");
  EXPECT_TRUE(contains(resumed, "resuming: ")) << resumed;
  EXPECT_EQ(read_text_file(json), read_text_file(dir_ + "/one.json"));
  for (int r = 1; r <= 2; ++r) EXPECT_FALSE(std::filesystem::exists(json + ".rank" + std::to_string(r)));

  // The same with the model split by layers: rank 2, the last (which
  // scores every probe), killed after its first tensor; resumed split.
  const std::string split_json = dir_ + "/split.json";
  ASSERT_NE(run_and_kill(3, args + split_json + " --split-layers", split_json + ".rank2", 2), 0)
      << "the run ended before rank 2 was killed: " << read_text_file(dir_ + "/run.log");
  const std::string split_resumed = qlens(3, args + split_json + " --split-layers --resume");
  EXPECT_TRUE(contains(split_resumed, "resuming: ")) << split_resumed;
  EXPECT_EQ(read_text_file(split_json), read_text_file(dir_ + "/one.json"));
}

// An error on the ranks (here a missing model) ends the run with a non-zero
// exit and the message, naming the file and the rank.
TEST_F(Mpi, AnErrorEndsEveryRankWithItsMessage) {
  std::string out;
  const int rc = run_command(mpirun(2) + kQlens + " imatrix -m " + dir_ + "/missing.gguf -f " + word_text() +
                                 " -o " + dir_ + "/x.gguf 2>&1",
                             &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(contains(out, "missing.gguf")) << out;
  EXPECT_TRUE(contains(out, " of 2: ")) << out;
  // A command that does not split its work refuses to run on several ranks
  // (each would write the same files).
  EXPECT_NE(run_command(mpirun(2) + kQlens + " synth --preset tiny -o " + dir_ + "/t.gguf 2>&1", &out), 0);
  EXPECT_TRUE(contains(out, "qlens synth runs as one process")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/t.gguf"));
}

}  // namespace
}  // namespace qlens
