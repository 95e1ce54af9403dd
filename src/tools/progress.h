// A progress bar with rate and ETA on stderr, for long runs. Silent when
// stderr is not a terminal (logs and CI stay clean) unless forced.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace qlens::tools {

class Progress {
 public:
  Progress(std::string label, int64_t total, std::string unit);
  ~Progress();
  // Sets the number of units done; `status` is shown after the bar.
  void update(int64_t done, const std::string& status = {});
  void finish();
  static bool enabled_by_default();

 private:
  std::string label_, unit_;
  int64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace qlens::tools
