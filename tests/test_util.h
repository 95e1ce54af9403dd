// Helpers shared by the test suites.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/vocab.h"

namespace qlens::test {

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// What f throws as qlens::Error, or "" when it throws nothing.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Path of a file under ../shared, or "" when the shared folder is absent.
std::string shared_path(const std::string& relative);

// Skips the current test with a clear message when a shared file is missing.
#define QLENS_REQUIRE_SHARED(var, relative)                                             \
  const std::string var = ::qlens::test::shared_path(relative);                         \
  if (var.empty()) GTEST_SKIP() << "needs ../shared/" << (relative)                     \
                                << " (the shared data folder is absent; see DATA.md)"

// Path of a file in qlens's model cache ($QLENS_CACHE, else ~/.cache/qlens),
// where scripts/fetch-gemma3.sh installs Gemma 3 270M; "" when absent.
std::string cache_path(const std::string& name);
constexpr const char* kGemma3 = "gemma-3-270m-q4_k_m.gguf";
constexpr const char* kGemma3F32 = "gemma-3-270m-f32.gguf";

#define QLENS_REQUIRE_CACHED(var, name)                                                          \
  const std::string var = ::qlens::test::cache_path(name);                                      \
  if (var.empty()) GTEST_SKIP() << "needs " << (name) << " in the model cache (~/.cache/qlens); " \
                                << "scripts/fetch-gemma3.sh installs it (make test runs it)"

// The CPU options of the contexts and backends a model suite builds: the
// QLENS_CPU_* variables as the qlens tool reads them (cpu_options_from_env).
// ctest reruns the model suites with QLENS_CPU_ISA=avx2|scalar (*.avx2,
// *.scalar: tests/CMakeLists.txt); the variable reaches the engine through
// these options, which the test harness chooses, and the suites' CLI runs
// through the CLI's own reading of it. The engine reads no environment.
CpuOptions cpu_options();
// The same for a Vulkan backend: the QLENS_VULKAN_* variables as the qlens
// tool reads them (vulkan_options_from_env). ctest reruns the Vulkan and tap
// suites with QLENS_VULKAN_CPU_KERNELS=0 (*.gpu_kernels), which reaches the
// backend through these options.
VulkanOptions vulkan_options();

// Sets an environment variable for the life of the object (the CLI's
// variables, for its readers' tests and the qlens runs a test makes).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    setenv(name, value, 1);
  }
  // Restores what was there (a suite may run under QLENS_CPU_ISA=..., say).
  ~ScopedEnv() {
    if (previous_)
      setenv(name_, previous_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

// False when QLENS_SLOW_TESTS=0 asks to skip the slowest tests.
bool slow_tests_enabled();

// Spearman's rank correlation of two series of the same length (no ties).
double spearman(const std::vector<double>& a, const std::vector<double>& b);

// A fresh temporary directory for this test (removed at process exit).
std::string temp_dir();

// The synthetic `tiny` llama (2 layers, grouped-query attention, 512
// tokens) in F32, written once per test process.
std::string tiny_model_path();

// The tiny model of one of tests/data's architecture references
// (tests/data/README.md: "gpt-oss-tiny", ..., "gemma4moe-tiny"): not
// committed but made here by qlens synth (F32, the preset of that name, the
// seed the references were made with), once per test process, and checked
// byte for byte (by hash) against the file llama.cpp's outputs were made
// from. Throws for another name; fails the test when synth no longer writes
// that file.
std::string arch_reference_model(const std::string& name);
bool is_arch_reference(const std::string& name);
// n token ids spread over a vocabulary of n_vocab (a fixed sequence; salt
// shifts it).
std::vector<Token> spread_tokens(int64_t n_vocab, size_t n, size_t salt = 0);

// Plans the memory of g's nodes (built) into buf, 64-byte aligned, every
// byte set to `fill`, as the scheduler would for one backend.
void plan_into(Graph& g, std::vector<char>& buf, char fill = 0);

// Runs a shell command, returns its exit status; output captured into *out.
int run_command(const std::string& cmd, std::string* out);

// The main job through the CLI, as a user runs it: imatrix on the first
// 60,000 bytes of `text_path` (4 chunks of 128), sensitivity (noise mode),
// a plan at 5 bits per weight, quantization with it, and perplexity of the
// model and of the planned file. `env` prefixes each command (e.g.
// "QLENS_CPU_ISA=scalar "). Fails the calling test (ADD_FAILURE) on a
// command's error, with its output.
struct MainJob {
  std::set<std::string> imatrix_tensors;  // the weights the imatrix has entries of
  double ppl = 0, ppl_planned = 0;
};
MainJob run_main_job(const std::string& model, const std::string& text_path, const std::string& env = "");

// A fixture for tests that run the tools on stories260K and the TinyStories
// validation text (../shared): skips without them; a fresh folder per test.
class StoriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = shared_path("models/stories260K.gguf");
    text_ = shared_path("data/tinystories/tinystories_val.txt");
    if (model_.empty() || text_.empty())
      GTEST_SKIP() << "needs ../shared/models/stories260K.gguf and ../shared/data/tinystories/tinystories_val.txt";
    dir_ = temp_dir();
  }
  std::string model_, text_, dir_;
};

}  // namespace qlens::test
