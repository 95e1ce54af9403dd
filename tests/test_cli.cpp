// The qlens command line, run as a user runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/json_reader.h"
#include "core/text_file.h"
#include "test_util.h"

namespace qlens {
namespace {

int qlens(const std::string& args, std::string* out) {
  return test::run_command(std::string(QLENS_BINARY) + " " + args, out);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Cli, HelpOnEverySubcommand) {
  std::string out;
  EXPECT_EQ(qlens("--help", &out), 0);
  for (const char* cmd : {"inspect", "generate", "perplexity", "synth", "bench", "quantize", "quantize-stats", "imatrix", "devices", "report"}) {
    EXPECT_TRUE(contains(out, cmd)) << cmd;
    std::string help;
    EXPECT_EQ(qlens(std::string(cmd) + " --help", &help), 0) << cmd;
    EXPECT_TRUE(contains(help, "usage: qlens " + std::string(cmd))) << help;
  }
}

TEST(Cli, BadFlagsNameTheFlag) {
  std::string out;
  EXPECT_NE(qlens("frobnicate", &out), 0);
  EXPECT_TRUE(contains(out, "unknown command 'frobnicate'")) << out;
  EXPECT_NE(qlens("perplexity --bogus 3", &out), 0);
  EXPECT_TRUE(contains(out, "--bogus")) << out;
  EXPECT_NE(qlens("perplexity -m x.gguf -f t.txt -c abc", &out), 0);
  EXPECT_TRUE(contains(out, "-c")) << out;
  EXPECT_TRUE(contains(out, "abc")) << out;
  EXPECT_NE(qlens("generate -m", &out), 0);
  EXPECT_TRUE(contains(out, "needs a value")) << out;
  EXPECT_NE(qlens("generate -p hi", &out), 0);
  EXPECT_TRUE(contains(out, "-m")) << out;
  EXPECT_NE(qlens("inspect /nonexistent/file.gguf", &out), 0);
  EXPECT_TRUE(contains(out, "/nonexistent/file.gguf")) << out;
  EXPECT_NE(qlens("synth --preset huge -o x.gguf", &out), 0);
  EXPECT_TRUE(contains(out, "huge")) << out;
}

TEST(Cli, SynthInspectGeneratePerplexity) {
  const std::string dir = test::temp_dir();
  const std::string model = dir + "/tiny.gguf";
  std::string out;
  ASSERT_EQ(qlens("synth --preset tiny --type F32 -o " + model, &out), 0) << out;
  EXPECT_FALSE(std::filesystem::exists(model + ".tmp"));
  ASSERT_EQ(qlens("inspect " + model, &out), 0) << out;
  EXPECT_TRUE(contains(out, "blk.1.ffn_down.weight")) << out;
  ASSERT_EQ(qlens("inspect --json " + model, &out), 0) << out;
  EXPECT_TRUE(contains(out, "\"general.architecture\"")) << out;
  ASSERT_EQ(qlens("generate -m " + model + " -p 'the cat' -n 8 --temp 0 --no-stats", &out), 0) << out;
  std::string again;
  ASSERT_EQ(qlens("generate -m " + model + " -p 'the cat' -n 8 --temp 0 --no-stats", &again), 0);
  EXPECT_EQ(out, again);  // greedy is deterministic
  ASSERT_EQ(qlens("generate -m " + model + " -p 'the cat' -n 8 --temp 1.0 --seed 5 --no-stats", &out), 0);

  const std::string text = dir + "/text.txt";
  {
    std::ofstream t(text);
    for (int i = 0; i < 200; ++i) t << "the cat sat on the mat number " << i << ".\n";
  }
  const std::string json = dir + "/ppl.json";
  ASSERT_EQ(qlens("perplexity -m " + model + " -f " + text + " -c 64 -b 32 --chunks 3 --json " + json, &out), 0)
      << out;
  EXPECT_TRUE(contains(out, "Final estimate: PPL = ")) << out;
  const std::string js = read_text_file(json);
  EXPECT_TRUE(contains(js, "\"tool\": \"qlens perplexity\"")) << js;
  EXPECT_TRUE(contains(js, "\"n_chunks\": 3")) << js;
  EXPECT_TRUE(contains(js, "\"max_chunks\": 3")) << js;
  EXPECT_TRUE(contains(js, "\"ppl\": {")) << js;
}

TEST(Cli, QuantizeDryRunAndErrors) {
  const std::string dir = test::temp_dir();
  const std::string model = dir + "/tiny.gguf";
  std::string out;
  ASSERT_EQ(qlens("synth --preset tiny --type F32 -o " + model, &out), 0) << out;
  ASSERT_EQ(qlens("quantize " + model + " F16 --dry-run --tensor-type 'ffn_up=BF16'", &out), 0) << out;
  EXPECT_TRUE(contains(out, "blk.0.ffn_up.weight")) << out;
  EXPECT_TRUE(contains(out, "rule ffn_up")) << out;
  EXPECT_TRUE(contains(out, "bits per weight")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/F16"));
  EXPECT_NE(qlens("quantize " + model + " " + dir + "/o.gguf Q9_9", &out), 0);
  EXPECT_TRUE(contains(out, "Q9_9")) << out;
  EXPECT_NE(qlens("quantize " + model + " " + dir + "/o.gguf F16 --tensor-type nonsense", &out), 0);
  EXPECT_TRUE(contains(out, "REGEX=TYPE")) << out;
  EXPECT_NE(qlens("quantize " + model + " " + dir + "/o.gguf F16 --imatrix /nonexistent.dat", &out), 0);
  EXPECT_TRUE(contains(out, "/nonexistent.dat")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/o.gguf"));
  ASSERT_EQ(qlens("quantize " + model + " " + dir + "/o.gguf BF16", &out), 0) << out;
  ASSERT_EQ(qlens("generate -m " + dir + "/o.gguf -p 'the cat' -n 4 --temp 0 --no-stats", &out), 0) << out;
}

// An output that is one of the inputs (by inode: another spelling, a hard
// link) is refused before any work, and the input is left as it was; so are
// outputs in a missing folder or naming a directory.
TEST(Cli, OutputsNeverOverwriteInputs) {
  QLENS_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string dir = test::temp_dir();
  const std::string m = dir + "/m.gguf", text = dir + "/t.txt", sens = dir + "/s.json";
  std::filesystem::copy_file(model, m);
  { std::ofstream(text) << "Once upon a time there was a little dog."; }
  { std::ofstream(sens) << "{}"; }
  std::filesystem::create_hard_link(m, dir + "/hard.gguf");
  const std::string same_m = dir + "/./m.gguf";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"quantize " + m + " " + same_m + " Q8_0", "IN"},
      {"quantize " + m + " " + dir + "/hard.gguf Q8_0", "IN"},
      {"imatrix -m " + m + " -f " + text + " -o " + same_m, "-m"},
      {"imatrix -m " + m + " -f " + text + " -o " + text, "-f"},
      {"perplexity -m " + m + " -f " + text + " --json " + same_m, "-m"},
      {"perplexity -m " + m + " -f " + text + " --kl-divergence-base " + text, "-f"},
      {"compare --ref " + m + " -m " + m + " -f " + text + " --json " + text, "-f"},
      {"sensitivity -m " + m + " -f " + text + " --json " + same_m, "-m"},
      {"plan --sensitivity " + sens + " --target-bpw 5 -o " + sens, "--sensitivity"},
      {"plan --sensitivity " + sens + " --target-bpw 5 --json " + sens, "--sensitivity"},
      {"report --sensitivity " + sens + " -o " + sens, "--sensitivity"},
      {"quantize-stats " + m + " --json " + same_m, "MODEL"},
  };
  const auto before = read_text_file(m);
  for (const auto& [args, input] : cases) {
    std::string out;
    EXPECT_NE(qlens(args, &out), 0) << args;
    EXPECT_NE(out.find("is the same file as the input " + input), std::string::npos) << args << "\n" << out;
  }
  EXPECT_EQ(read_text_file(m), before);
  std::string out;
  EXPECT_NE(qlens("quantize " + m + " " + dir + "/missing/q.gguf Q8_0", &out), 0);
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
  EXPECT_NE(qlens("quantize " + m + " " + dir + " Q8_0", &out), 0);
  EXPECT_NE(out.find("is a directory"), std::string::npos) << out;
}

// Shared flags mean the same on every command, and meaningless values are
// refused before any work with a message naming the flag; filters that
// match nothing are errors, not empty results.
TEST(Cli, MeaninglessValuesAreRefused) {
  QLENS_REQUIRE_SHARED(model, "models/stories260K.gguf");
  QLENS_REQUIRE_SHARED(text, "data/tinystories/tinystories_val.txt");
  const std::string run = "perplexity -m " + model + " -f " + text + " -c 128 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {run + "-b 0", "-b 0: the batch size must be 1 or more"},
      {run + "-c -5", "-c -5: the context size must be positive"},
      {run + "--chunks 0", "--chunks 0: the number of chunks must be 1 or more (-1: all of them)"},
      {run + "--chunks -7", "--chunks -7"},
      {run + "-ngl -2", "-ngl -2: the number of layers must be 0 or more"},
      {"sensitivity -m " + model + " -f " + text + " --chunks 0", "--chunks 0"},
      {"imatrix -m " + model + " -f " + text + " -b 0", "-b 0"},
      {"plan --sensitivity x.json --target-bpw 0", "--target-bpw 0: the budget must be above 0"},
      {"plan --sensitivity x.json --target-bpw 100", "--target-bpw 100"},
      {"sensitivity -m " + model + " -f " + text + " -c 128 --chunks 1 --tensors zzz",
       "--tensors 'zzz' matches no matrix"},
      {"compare --ref " + model + " -m " + model + " -f " + text + " -c 128 --chunks 2 --nodes zzz",
       "--nodes 'zzz' matches no node"},
  };
  for (const auto& [args, message] : cases) {
    std::string out;
    EXPECT_NE(qlens(args, &out), 0) << args;
    EXPECT_TRUE(contains(out, message)) << args << "\n" << out;
  }
  // -1 chunks: all of them, as in llama.cpp (of a short text).
  const std::string short_text = test::temp_dir() + "/short.txt";
  { std::ofstream(short_text) << read_text_file(text).substr(0, 6000); }
  std::string out;
  ASSERT_EQ(qlens("perplexity -m " + model + " -f " + short_text + " -c 128 --chunks -1", &out), 0) << out;
  EXPECT_TRUE(contains(out, "Final estimate: PPL")) << out;
  // -c 0: the model's training context, as in llama.cpp (stories260K: 2048 tokens).
  ASSERT_EQ(qlens("perplexity -m " + model + " -f " + text + " -c 0 -b 512 --chunks 1", &out), 0) << out;
  EXPECT_TRUE(contains(out, "-c 0: the model's training context, 2048 tokens")) << out;
  EXPECT_TRUE(contains(out, "1 chunks of 2048")) << out;
  EXPECT_TRUE(contains(out, "Final estimate: PPL")) << out;
}

// A text over 64 MiB is read only as far as the chunks asked for need (the
// same tokens, so the same figures), and asked for all of it, the error says
// what to do instead of taking 50 bytes of memory per byte of text.
TEST(Cli, HugeTextsAreReadAsFarAsNeeded) {
  QLENS_REQUIRE_SHARED(model, "models/stories260K.gguf");
  QLENS_REQUIRE_SHARED(text, "data/tinystories/tinystories_val.txt");
  const std::string huge = test::temp_dir() + "/huge.txt";
  {
    const std::string once = read_text_file(text);
    std::ofstream out(huge, std::ios::binary);
    for (int64_t written = 0; written <= (int64_t{64} << 20); written += static_cast<int64_t>(once.size())) out << once;
  }
  std::string small, big;
  ASSERT_EQ(qlens("perplexity -m " + model + " -f " + text + " -c 128 --chunks 3", &small), 0) << small;
  ASSERT_EQ(qlens("perplexity -m " + model + " -f " + huge + " -c 128 --chunks 3", &big), 0) << big;
  EXPECT_TRUE(contains(big, "tokenized its first 1.00 MiB, enough for the chunks asked for")) << big;
  const auto final_line = [](const std::string& out) { return out.substr(out.find("Final estimate")); };
  EXPECT_EQ(final_line(big), final_line(small));
  EXPECT_NE(qlens("perplexity -m " + model + " -f " + huge + " -c 128", &big), 0);
  EXPECT_TRUE(contains(big, "qlens tokenizes a whole text only up to 64.00 MiB")) << big;
  EXPECT_TRUE(contains(big, "give --chunks N")) << big;
}

// Not on a terminal (a log file), long runs still say how much there is to
// do and write plain progress lines with rate and ETA; QLENS_PROGRESS=0
// silences them.
TEST(Cli, ProgressLinesWhenNotATerminal) {
  QLENS_REQUIRE_SHARED(model, "models/stories260K.gguf");
  QLENS_REQUIRE_SHARED(text, "data/tinystories/tinystories_val.txt");
  const std::string short_text = test::temp_dir() + "/short.txt";
  { std::ofstream(short_text) << read_text_file(text).substr(0, 20000); }
  const std::string run = "perplexity -m " + model + " -f " + short_text + " -c 128 --chunks 6";
  std::string out;
  ASSERT_EQ(qlens(run, &out), 0) << out;
  EXPECT_TRUE(contains(out, "perplexity: 6 chunks to do")) << out;
  EXPECT_TRUE(contains(out, "perplexity: 6/6 chunks (100%)")) << out;
  EXPECT_TRUE(contains(out, "ETA")) << out;
  ASSERT_EQ(test::run_command("QLENS_PROGRESS=0 " + std::string(QLENS_BINARY) + " " + run, &out), 0) << out;
  EXPECT_FALSE(contains(out, "chunks to do")) << out;
}

// qlens plan > plan.txt is a tensor-type file (the table goes to stderr), and
// a plan that covers every matrix quantizes without a TYPE.
TEST(Cli, PlanOnStdoutIsATensorTypeFile) {
  QLENS_REQUIRE_SHARED(model, "models/stories260K.gguf");
  QLENS_REQUIRE_SHARED(text, "data/tinystories/tinystories_val.txt");
  const std::string dir = test::temp_dir();
  std::string out;
  ASSERT_EQ(qlens("sensitivity -m " + model + " -f " + text + " -c 128 --chunks 1 --types Q4_0,Q8_0 --json " + dir +
                      "/s.json",
                  &out),
            0)
      << out;
  // (in a subshell: run_command's 2>&1 then takes its stderr, not the file)
  ASSERT_EQ(test::run_command("(" + std::string(QLENS_BINARY) + " plan --sensitivity " + dir +
                                  "/s.json --target-bpw 12 > " + dir + "/plan.txt)",
                              &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "predicted ΔKLD")) << out;  // the table, on stderr
  const std::string plan = read_text_file(dir + "/plan.txt");
  EXPECT_FALSE(contains(plan, "predicted")) << plan;
  EXPECT_EQ(plan.front(), '^') << plan;
  ASSERT_EQ(qlens("quantize " + model + " " + dir + "/q.gguf --tensor-type-file " + dir + "/plan.txt", &out), 0)
      << out;
}

TEST(Cli, GreedyStoriesContinuation) {
  QLENS_REQUIRE_SHARED(model, "models/stories260K.gguf");
  std::string out;
  ASSERT_EQ(qlens("generate -m " + model + " -p 'Once upon a time' -n 40 --temp 0 --no-stats", &out), 0) << out;
  EXPECT_TRUE(contains(out,
                       "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
                       "park. One day, she saw a big, red ball."))
      << out;
}

TEST(Cli, Synth11bLoadsAndGenerates) {
  if (!test::slow_tests_enabled()) GTEST_SKIP() << "QLENS_SLOW_TESTS=0";
  const std::string model = test::temp_dir() + "/1.1b.gguf";
  std::string out;
  ASSERT_EQ(qlens("synth --preset 1.1b -o " + model, &out), 0) << out;
  EXPECT_GT(std::filesystem::file_size(model), 2'000'000'000u);
  ASSERT_EQ(qlens("generate -m " + model + " -p 'Hello' -n 2 --temp 0 -c 64", &out), 0) << out;
  std::filesystem::remove(model);
}

}  // namespace
}  // namespace qlens

namespace qlens {
namespace {

TEST(Cli, DevicesListsTheCpuAndBadDevicesAreErrors) {
  std::string out;
  ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " devices", &out), 0) << out;
  EXPECT_NE(out.find("cpu"), std::string::npos) << out;
  EXPECT_NE(test::run_command(std::string(QLENS_BINARY) + " perplexity -m x.gguf -f y.txt --device tpu:3", &out), 0);
  EXPECT_NE(out.find("tpu:3"), std::string::npos) << out;
}

// Two parsed JSON values hold the same thing (members in the same order).
bool same_json(const JsonValue& a, const JsonValue& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case JsonValue::Kind::Null: return true;
    case JsonValue::Kind::Bool: return a.as_bool() == b.as_bool();
    case JsonValue::Kind::Number: return a.as_number() == b.as_number();
    case JsonValue::Kind::String: return a.as_string() == b.as_string();
    case JsonValue::Kind::Array:
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!same_json(a.at(i), b.at(i))) return false;
      return true;
    case JsonValue::Kind::Object:
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (a.as_object()[i].first != b.as_object()[i].first ||
            !same_json(a.as_object()[i].second, b.as_object()[i].second))
          return false;
      return true;
  }
  return false;
}

// `bench -o json` prints what `llama-bench -o json` prints: a bare array, one
// object per test, llama-bench's field names; --json FILE wraps the very same
// objects in qlens's header, and -o csv's columns are their keys.
TEST(Cli, BenchJsonIsLlamaBenchsArrayOfRows) {
  const std::string dir = test::temp_dir();
  const std::string model = dir + "/tiny.gguf";
  std::string out;
  ASSERT_EQ(qlens("synth --preset tiny --type F32 -o " + model, &out), 0) << out;
  const std::string bench = std::string(QLENS_BINARY) + " bench -m " + model + " -p 8 -n 2 -r 1 -t 1";
  // stdout alone into the file; stderr (device, packing) to the captured text.
  ASSERT_EQ(test::run_command("(" + bench + " -o json --json " + dir + "/bench.json > " + dir + "/rows.json)", &out),
            0)
      << out;
  const JsonValue rows = parse_json(read_text_file(dir + "/rows.json"), "rows.json");
  ASSERT_TRUE(rows.is_array()) << "-o json must print a bare array, as llama-bench does";
  ASSERT_EQ(rows.size(), 2u);
  const char* tests[] = {"pp8", "tg2"};
  for (size_t i = 0; i < 2; ++i) {
    const JsonValue& row = rows.at(i);
    ASSERT_TRUE(row.is_object());
    for (const char* key : {"model_filename", "model_size", "model_n_params", "backends", "cpu_info", "n_batch",
                            "n_threads", "n_gpu_layers", "n_prompt", "n_gen", "avg_ts", "stddev_ts"})
      EXPECT_NE(row.find(key), nullptr) << "llama-bench's field " << key << " missing from row " << i;
    for (const char* key : {"test", "weights_gb_per_s", "read_bandwidth_gb_per_s", "share_of_read_bandwidth"})
      EXPECT_NE(row.find(key), nullptr) << "qlens's field " << key << " missing from row " << i;
    EXPECT_EQ(row.at("test").as_string(), tests[i]);
    EXPECT_EQ(row.at("model_filename").as_string(), model);
    EXPECT_EQ(row.at("n_prompt").as_int(), i == 0 ? 8 : 0);
    EXPECT_EQ(row.at("n_gen").as_int(), i == 0 ? 0 : 2);
    EXPECT_EQ(row.at("n_threads").as_int(), 1);
    EXPECT_GT(row.at("avg_ts").as_number(), 0);
  }
  EXPECT_TRUE(rows.at(0).at("weights_gb_per_s").is_null()) << "prompts stream no weights per token";
  EXPECT_GT(rows.at(1).at("weights_gb_per_s").as_number(), 0);

  const JsonValue doc = parse_json(read_text_file(dir + "/bench.json"), "bench.json");
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc.at("tool").as_string(), "qlens bench");
  EXPECT_EQ(doc.at("schema_version").as_int(), 1);
  EXPECT_EQ(doc.at("inputs").at("model").as_string(), model);
  EXPECT_EQ(doc.at("settings").at("repetitions").as_int(), 1);
  EXPECT_TRUE(same_json(doc.at("results"), rows)) << "--json's results differ from the -o json rows of the same run";

  ASSERT_EQ(test::run_command("(" + bench + " -o csv > " + dir + "/rows.csv)", &out), 0) << out;
  const std::string csv = read_text_file(dir + "/rows.csv");
  std::string keys;
  for (const auto& [key, value] : rows.at(0).as_object()) keys += (keys.empty() ? "" : ",") + key;
  EXPECT_EQ(csv.substr(0, csv.find('\n')), keys) << "-o csv's columns are the JSON rows' keys";
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;
}

// A machine without Vulkan devices (the loader pointed at no driver): only the
// CPU is listed, --device vulkan:0 is an error naming what exists, and -ngl
// says it runs on the CPU and does.
TEST(Cli, WithoutAVulkanDeviceEverythingRunsOnTheCpu) {
  QLENS_REQUIRE_SHARED(model, "models/stories260K.gguf");
  QLENS_REQUIRE_SHARED(text, "data/tinystories/tinystories_val.txt");
  const std::string no_driver = "VK_ICD_FILENAMES=/nonexistent/icd.json VK_DRIVER_FILES=/nonexistent/icd.json ";
  const std::string qlens = no_driver + QLENS_BINARY;
  std::string out;
  ASSERT_EQ(test::run_command(qlens + " devices", &out), 0) << out;
  EXPECT_EQ(out.find("vulkan:"), std::string::npos) << out;
  const std::string run = qlens + " perplexity -m " + model + " -f " + text + " -c 128 --chunks 1 ";
  EXPECT_NE(test::run_command(run + "--device vulkan:0", &out), 0) << out;
  EXPECT_NE(out.find("--device vulkan:0: no such device (devices here: cpu"), std::string::npos) << out;
  ASSERT_EQ(test::run_command(run + "-ngl 99", &out), 0) << out;
  EXPECT_NE(out.find("-ngl 99: no GPU device found, running on the CPU"), std::string::npos) << out;
  EXPECT_NE(out.find("device: cpu, "), std::string::npos) << out;
  EXPECT_NE(out.find("Final estimate: PPL"), std::string::npos) << out;
  // Every command that runs a model says where, also without -ngl.
  for (const std::string& command :
       {run, qlens + " generate -m " + model + " -p hello -n 2", qlens + " bench -m " + model + " -p 8 -n 2 -r 1"}) {
    ASSERT_EQ(test::run_command(command, &out), 0) << out;
    EXPECT_NE(out.find("device: cpu, "), std::string::npos) << command << "\n" << out;
  }
}

// A software Vulkan device (lavapipe) is never chosen implicitly: -ngl 99
// without --device runs on the CPU and says so; --device picks it.
TEST(Cli, SoftwareVulkanIsUsedOnlyWhenNamed) {
  QLENS_REQUIRE_SHARED(model, "models/stories260K.gguf");
  QLENS_REQUIRE_SHARED(text, "data/tinystories/tinystories_val.txt");
  std::string out;
  ASSERT_EQ(test::run_command(std::string(QLENS_BINARY) + " devices", &out), 0) << out;
  if (out.find("software vulkan") == std::string::npos || out.find("gpu") != std::string::npos)
    GTEST_SKIP() << "needs a machine whose only Vulkan device is a software one:\n" << out;
  const std::string run = std::string(QLENS_BINARY) + " perplexity -m " + model + " -f " + text + " -c 128 --chunks 1 ";
  ASSERT_EQ(test::run_command(run + "-ngl 99", &out), 0) << out;
  EXPECT_NE(out.find("running on the CPU (software Vulkan devices are used only with --device)"), std::string::npos)
      << out;
  ASSERT_EQ(test::run_command(run + "--device vulkan:0", &out), 0) << out;
  EXPECT_NE(out.find("device: vulkan:0, "), std::string::npos) << out;
  EXPECT_NE(out.find("(every layer; the rest on the CPU)"), std::string::npos) << out;
}

}  // namespace
}  // namespace qlens
