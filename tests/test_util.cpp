#include "test_util.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <stdexcept>

#include <gtest/gtest.h>

#include "core/text_file.h"
#include "qlens/gguf.h"
#include "tools/synth/synth.h"

namespace qlens::test {

std::string shared_path(const std::string& relative) {
  std::filesystem::path p = std::filesystem::path(QLENS_SHARED_DIR) / relative;
  return std::filesystem::exists(p) ? p.string() : std::string();
}

std::string cache_path(const std::string& name) {
  const char* env = std::getenv("QLENS_CACHE");
  const char* home = std::getenv("HOME");
  std::filesystem::path dir = env && *env ? std::filesystem::path(env)
                              : home      ? std::filesystem::path(home) / ".cache" / "qlens"
                                          : std::filesystem::path();
  if (dir.empty()) return "";
  std::filesystem::path p = dir / name;
  return std::filesystem::exists(p) ? p.string() : std::string();
}

CpuOptions cpu_options() { return cpu_options_from_env(); }

VulkanOptions vulkan_options() { return vulkan_options_from_env(); }

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> order(v.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t i, size_t j) { return v[i] < v[j]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < order.size(); ++i) r[order[i]] = static_cast<double>(i);
    return r;
  };
  const auto ra = ranks(a), rb = ranks(b);
  double d2 = 0;
  for (size_t i = 0; i < ra.size(); ++i) d2 += (ra[i] - rb[i]) * (ra[i] - rb[i]);
  const double n = static_cast<double>(a.size());
  return 1 - 6 * d2 / (n * (n * n - 1));
}

bool slow_tests_enabled() {
  const char* v = std::getenv("QLENS_SLOW_TESTS");
  return !(v && std::string(v) == "0");
}

namespace {
struct TempRoot {
  std::filesystem::path path;
  TempRoot() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "qlens-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    path = tmpl;
  }
  ~TempRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

std::string tiny_model_path() {
  static std::string file;
  if (file.empty()) {
    file = temp_dir() + "/tiny-f32.gguf";
    tools::SynthOptions o;
    o.preset = "tiny";
    o.type = DType::F32;
    tools::synth_model(o, file);
  }
  return file;
}

namespace {

// The tiny models the architecture references were made from.
struct MadeModel {
  const char* name;
  uint64_t seed;
  uint64_t fnv1a;  // of the file the references were made from
};
const MadeModel kArchReferenceModels[] = {
    {"gpt-oss-tiny", 1, 0x3e752bb27ad18ffbull},   {"deepseek2-tiny", 3, 0x847562c51c5660deull},
    {"glm4moe-tiny", 4, 0xd8eb1650f41b11f1ull},   {"qwen35-tiny", 42, 0x349326caf427ef8bull},
    {"qwen35moe-tiny", 4, 0x3c7a955a04f99965ull}, {"gemma4-tiny", 42, 0x35352fa6962c4558ull},
    {"gemma4moe-tiny", 28, 0x854e8af307d6d106ull}};

}  // namespace

bool is_arch_reference(const std::string& name) {
  for (const MadeModel& m : kArchReferenceModels)
    if (name == m.name) return true;
  return false;
}

std::string arch_reference_model(const std::string& name) {
  for (const MadeModel& m : kArchReferenceModels) {
    if (name != m.name) continue;
    const std::string file = temp_dir() + "/" + name + ".gguf";
    if (std::filesystem::exists(file)) return file;
    tools::SynthOptions o;
    o.preset = name;
    o.type = DType::F32;
    o.seed = m.seed;
    tools::synth_model(o, file);
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : read_text_file(file)) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    EXPECT_EQ(h, m.fnv1a) << "qlens synth no longer writes the " << name
                          << " that tests/data's llama.cpp outputs were made from (tests/data/README.md)";
    return file;
  }
  throw std::runtime_error("no architecture reference model '" + name + "'");
}

std::vector<Token> spread_tokens(int64_t n_vocab, size_t n, size_t salt) {
  std::vector<Token> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<Token>((i * 7919 + 3 + salt) % n_vocab);
  return t;
}

void plan_into(Graph& g, std::vector<char>& buf, char fill) {
  const MemoryPlan plan = plan_memory(g);
  buf.assign(plan.size + 64, fill);
  apply_memory_plan(g, plan, buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64);
}

std::string temp_dir() {
  static TempRoot root;
  static int counter = 0;
  auto dir = root.path / std::to_string(counter++);
  std::filesystem::create_directories(dir);
  return dir.string();
}

int run_command(const std::string& cmd, std::string* out) {
  std::string full = cmd + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buf;
  std::string text;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) text.append(buf.data(), n);
  int status = pclose(pipe);
  if (out) *out = std::move(text);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}


MainJob run_main_job(const std::string& model, const std::string& text_path, const std::string& env) {
  MainJob job;
  const std::string dir = temp_dir(), text = dir + "/text.txt";
  write_file_atomic(text, read_text_file(text_path).substr(0, 60000));
  auto run = [&](const std::string& args) {
    std::string out;
    const bool ok = run_command(env + std::string(QLENS_BINARY) + " " + args, &out) == 0;
    if (!ok) ADD_FAILURE() << "qlens " << args << ":\n" << out;
    return ok ? out : std::string();
  };
  auto ppl_of = [&](const std::string& path) {
    std::smatch match;
    const std::string out = run("perplexity -m " + path + " -f " + text + " -c 128 -t 2");
    return std::regex_search(out, match, std::regex(R"(PPL = ([0-9.]+))")) ? std::stod(match[1]) : 0.0;
  };
  if (run("imatrix -m " + model + " -f " + text + " -c 128 --chunks 4 -t 2 --no-ppl -o " + dir + "/im.gguf").empty())
    return job;
  const auto imatrix = gguf::File::open(dir + "/im.gguf");
  for (const auto& t : imatrix->tensors())
    job.imatrix_tensors.insert(t.name.substr(0, t.name.rfind('.')));
  if (run("sensitivity -m " + model + " -f " + text + " -c 128 --chunks 2 -t 2 --mode noise --imatrix " + dir +
          "/im.gguf --json " + dir + "/s.json --top 0")
          .empty() ||
      run("plan --sensitivity " + dir + "/s.json --target-bpw 5 -o " + dir + "/plan.txt").empty() ||
      run("quantize --pure --imatrix " + dir + "/im.gguf --tensor-type-file " + dir + "/plan.txt " + model + " " + dir +
          "/q.gguf Q4_K_M")
          .empty())
    return job;
  job.ppl = ppl_of(model);
  job.ppl_planned = ppl_of(dir + "/q.gguf");
  return job;
}

}  // namespace qlens::test
