// Crash safety: each tool that writes a file people wait hours for is killed
// (SIGKILL, no chance to clean up) at many random points, and its outputs must
// hold the previous complete file or the new complete file, never a part;
// checkpoints must load, and --resume must end where an uninterrupted run
// does, byte for byte. The kill points are random but seeded
// (QLENS_KILL_SEED, default 17); QLENS_KILL_POINTS sets how many (default 50).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "core/atomic_file.h"
#include "core/text_file.h"
#include "qlens/error.h"
#include "test_util.h"
#include "tools/imatrix/imatrix_file.h"
#include "tools/sensitivity/sensitivity.h"

namespace qlens {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;


int kill_points() {
  const char* n = std::getenv("QLENS_KILL_POINTS");
  return n ? std::max(1, std::atoi(n)) : 50;
}

std::mt19937_64 kill_rng() {
  const char* s = std::getenv("QLENS_KILL_SEED");
  return std::mt19937_64(s ? std::strtoull(s, nullptr, 10) : 17);
}

std::string bytes_of(const std::string& path) { return fs::exists(path) ? read_text_file(path) : std::string(); }

// Runs qlens with `args` (output discarded) until it ends or `after` has
// passed, then SIGKILLs it. True when the run had ended by itself. With
// `once_exists`, `after` counts from when that file appears (a first
// checkpoint), so that the kill lands in the part of the run that matters
// however slow the machine is today.
bool run_killed_after(const std::string& args, std::chrono::microseconds after, const std::string& once_exists = "") {
  const pid_t pid = fork();
  if (pid < 0) throw Error("fork failed");
  if (pid == 0) {
    const std::string cmd = std::string("exec ") + QLENS_BINARY + " " + args + " >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (!once_exists.empty())
    while (!fs::exists(once_exists)) {
      if (waitpid(pid, &status, WNOHANG) == pid) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  const auto deadline = Clock::now() + after;
  while (Clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return !WIFSIGNALED(status);
}

// Times an uninterrupted run (which must succeed), for the range of kill points.
std::chrono::microseconds timed_run(const std::string& args) {
  std::string out;
  const auto t0 = Clock::now();
  const int rc = test::run_command(std::string(QLENS_BINARY) + " " + args, &out);
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0);
  if (rc != 0) throw Error("qlens " + args + " failed:\n" + out);
  return took;
}

// Kill points spread over the whole run: start-up, work, writing, the end.
std::vector<std::chrono::microseconds> kill_delays(std::chrono::microseconds run_time) {
  auto rng = kill_rng();
  std::uniform_int_distribution<int64_t> pick(0, run_time.count() * 11 / 10);
  std::vector<std::chrono::microseconds> delays;
  for (int i = 0; i < kill_points(); ++i) delays.emplace_back(pick(rng));
  return delays;
}

TEST(AtomicFile, CommitReplacesAndAnAbandonedWriteLeavesTheOldFile) {
  const std::string dir = test::temp_dir(), path = dir + "/out.txt";
  write_file_atomic(path, "old");
  {
    AtomicFile f(path);
    f.write("new, unfinished", 15, "the text");
    EXPECT_TRUE(fs::exists(f.temp_path()));
    EXPECT_EQ(read_text_file(path), "old");
  }  // destroyed without commit: an error path
  EXPECT_EQ(read_text_file(path), "old");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // A temporary file a killed run left is replaced, not appended to.
  write_file_atomic(path + ".tmp", "left by a killed run, longer than what comes");
  AtomicFile f(path);
  f.write("new", 3, "the text");
  f.commit();
  EXPECT_EQ(read_text_file(path), "new");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_THROW(f.commit(), Error);
  EXPECT_TRUE(test::contains(test::error_of([&] { AtomicFile(dir + "/no/such/folder/x"); }), "no/such/folder/x"));
}

using CrashSafety = test::StoriesTest;

TEST_F(CrashSafety, KilledQuantizeLeavesThePreviousOrTheNewModel) {
  const std::string out = dir_ + "/out.gguf";
  const auto time = timed_run("quantize " + model_ + " " + dir_ + "/new.gguf Q4_0 2");
  timed_run("quantize " + model_ + " " + dir_ + "/previous.gguf Q8_0 2");
  const std::string previous = bytes_of(dir_ + "/previous.gguf"), fresh = bytes_of(dir_ + "/new.gguf");
  ASSERT_NE(previous, fresh);
  fs::copy_file(dir_ + "/previous.gguf", out);
  int finished = 0, interrupted = 0;
  for (const auto delay : kill_delays(time)) {
    const bool done = run_killed_after("quantize " + model_ + " " + out + " Q4_0 2", delay);
    (done ? finished : interrupted) += 1;
    const std::string now = bytes_of(out);
    ASSERT_TRUE(now == previous || now == fresh) << "a partial file after a kill at " << delay.count() << " us ("
                                                 << now.size() << " bytes)";
    // The next run starts from the previous model again.
    if (now == fresh) fs::copy_file(dir_ + "/previous.gguf", out, fs::copy_options::overwrite_existing);
  }
  EXPECT_GT(interrupted, 0) << "no kill landed inside a run";
  // A run after the kills cleans the temporary file a killed one left.
  timed_run("quantize " + model_ + " " + out + " Q4_0 2");
  EXPECT_EQ(bytes_of(out), fresh);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

// The temporary file reaches the disk before the rename, and the rename
// before the run ends (the folder is flushed after it), as strace shows.
TEST_F(CrashSafety, OutputsAreFlushedBeforeAndAfterTheRename) {
  std::string out;
  if (test::run_command("strace -V", &out) != 0) GTEST_SKIP() << "needs strace (apt install strace)";
  const std::string target = dir_ + "/q.gguf";
  // (LeakSanitizer cannot run under ptrace: off for a sanitizer build.)
  ASSERT_EQ(test::run_command("ASAN_OPTIONS=detect_leaks=0 strace -f -e trace=openat,fsync,fdatasync,rename,renameat,renameat2 " +
                                  std::string(QLENS_BINARY) + " quantize " + model_ + " " + target + " Q8_0 2",
                              &out),
            0)
      << out;
  const auto at = [&](const std::string& what) { return out.find(what); };
  const size_t open_tmp = at("\"" + target + ".tmp\", O_WRONLY|O_CREAT|O_TRUNC");
  ASSERT_NE(open_tmp, std::string::npos) << out;
  const std::string fd = out.substr(out.find("= ", open_tmp) + 2, out.find('\n', open_tmp) - out.find("= ", open_tmp) - 2);
  const size_t sync_tmp = out.find("fsync(" + fd + ")", open_tmp);
  const size_t rename = out.find("rename(\"" + target + ".tmp\", \"" + target + "\")", open_tmp);
  const size_t open_dir = out.find("\"" + dir_ + "\", O_RDONLY|O_CLOEXEC|O_DIRECTORY", open_tmp);
  ASSERT_NE(sync_tmp, std::string::npos) << out;
  ASSERT_NE(rename, std::string::npos) << out;
  ASSERT_NE(open_dir, std::string::npos) << out;
  EXPECT_LT(sync_tmp, rename);
  EXPECT_LT(rename, open_dir);
  EXPECT_NE(out.find("fsync(", open_dir), std::string::npos) << "the folder is not flushed";
}

// imatrix writes a checkpoint every 2 chunks (OUT.at_N) and OUT at the end:
// every file a killed run leaves loads, and resuming from the newest
// checkpoint gives the uninterrupted run's file.
TEST_F(CrashSafety, KilledImatrixLeavesCompleteCheckpointsAndResumes) {
  const std::string args = "imatrix -m " + model_ + " -f " + text_ +
                           " -c 64 -b 64 -t 1 --chunks 24 --save-frequency 2 --output-frequency 0 --no-ppl";
  const auto time = timed_run(args + " -o " + dir_ + "/full.gguf");
  const std::string full = bytes_of(dir_ + "/full.gguf");
  const std::regex checkpoint(R"(im\.gguf\.at_(\d+))");
  int resumed = 0;
  const auto delays = kill_delays(time);
  for (size_t k = 0; k < delays.size(); ++k) {
    const std::string run_dir = dir_ + "/run" + std::to_string(k);
    fs::create_directory(run_dir);
    const std::string out = run_dir + "/im.gguf";
    // Every other kill after the first checkpoint, the rest anywhere.
    run_killed_after(args + " -o " + out, delays[k], k % 2 ? out + ".at_2" : "");
    if (fs::exists(out)) {
      ASSERT_EQ(bytes_of(out), full) << "kill at " << delays[k].count() << " us";
    }
    int64_t newest = -1;
    for (const auto& entry : fs::directory_iterator(run_dir)) {
      std::smatch m;
      const std::string name = entry.path().filename().string();
      if (!std::regex_match(name, m, checkpoint)) continue;
      const int64_t at = std::stoll(m[1]);
      tools::Imatrix saved;
      ASSERT_NO_THROW(saved = tools::load_imatrix(entry.path().string())) << name << ": a partial checkpoint";
      ASSERT_EQ(saved.chunk_count, at) << name;
      newest = std::max(newest, at);
    }
    if (fs::exists(out) || newest < 0) continue;
    timed_run(args + " -o " + out + " --resume " + out + ".at_" + std::to_string(newest));
    ASSERT_EQ(bytes_of(out), full) << "resumed from chunk " << newest << " after a kill at " << delays[k].count();
    ++resumed;
    fs::remove_all(run_dir);
  }
  EXPECT_GT(resumed, 0) << "no kill landed between two checkpoints";
}

// sensitivity rewrites its JSON after every tensor (its checkpoint): after a
// kill it parses as an incomplete or the complete table, and --resume ends
// with the uninterrupted run's file.
TEST_F(CrashSafety, KilledSensitivityLeavesAValidTableAndResumes) {
  const std::string args = "sensitivity -m " + model_ + " -f " + text_ +
                           " -c 64 -b 64 -t 1 --chunks 1 --types Q8_0 --top 0 --json ";
  const auto time = timed_run(args + dir_ + "/full.json");
  const std::string full = bytes_of(dir_ + "/full.json");
  const std::string out = dir_ + "/s.json";
  int resumed = 0;
  const auto delays = kill_delays(time);
  for (size_t k = 0; k < delays.size(); ++k) {
    const auto delay = delays[k];
    fs::remove(out);
    run_killed_after(args + out, delay, k % 2 ? out : "");
    if (!fs::exists(out)) continue;
    const std::string now = bytes_of(out);
    tools::SensitivityResult r;
    ASSERT_NO_THROW(r = tools::sensitivity_from_json(now, out)) << "a partial table after a kill at " << delay.count();
    if (r.complete) {
      ASSERT_EQ(now, full);
      continue;
    }
    timed_run(args + out + " --resume");
    ASSERT_EQ(bytes_of(out), full) << "resumed from " << r.tensors.size() << " tensors";
    ++resumed;
  }
  EXPECT_GT(resumed, 0) << "no kill landed between two tensors";
}

// plan writes the tensor-type file and its JSON once the plan is made: each is
// the previous run's or the new run's.
TEST_F(CrashSafety, KilledPlanLeavesThePreviousOrTheNewFiles) {
  timed_run("sensitivity -m " + model_ + " -f " + text_ + " -c 64 -b 64 -t 1 --chunks 1 --types Q4_0,Q8_0 --top 0 "
            "--json " + dir_ + "/s.json");
  const auto plan = [&](const char* bpw, const std::string& stem) {
    return "plan --sensitivity " + dir_ + "/s.json --target-bpw " + bpw + " -o " + stem + ".txt --json " + stem +
           ".json";
  };
  // Both versions written to the same paths first (the JSON names them).
  const std::string stem = dir_ + "/out";
  timed_run(plan("12", stem));
  const std::string previous_txt = bytes_of(stem + ".txt"), previous_json = bytes_of(stem + ".json");
  const auto time = timed_run(plan("20", stem));
  const std::string new_txt = bytes_of(stem + ".txt"), new_json = bytes_of(stem + ".json");
  ASSERT_NE(previous_txt, new_txt);
  for (const auto delay : kill_delays(time)) {
    write_file_atomic(stem + ".txt", previous_txt);
    write_file_atomic(stem + ".json", previous_json);
    run_killed_after(plan("20", stem), delay);
    const std::string txt = bytes_of(stem + ".txt"), json = bytes_of(stem + ".json");
    ASSERT_TRUE(txt == previous_txt || txt == new_txt) << "a partial tensor-type file after a kill at "
                                                       << delay.count() << " us";
    ASSERT_TRUE(json == previous_json || json == new_json) << "a partial JSON file after a kill at " << delay.count()
                                                           << " us";
  }
}

}  // namespace
}  // namespace qlens
