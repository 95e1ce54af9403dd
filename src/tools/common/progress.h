// Progress with rate and ETA on stderr, for long runs: a bar redrawn in
// place on a terminal; otherwise (a log file, nohup, CI) plain lines, as log
// files want: one saying up front how much there is to do, then one per 5%
// of the work or per minute, whichever comes first, and one at the end.
// QLENS_PROGRESS=0 silences both, =1 forces the lines.
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
  enum class Mode { Off, Bar, Lines };
  static Mode default_mode();

 private:
  void line(int64_t done, const std::string& status, std::chrono::steady_clock::time_point now);

  std::string label_, unit_;
  int64_t total_;
  Mode mode_;
  bool finished_ = false;
  int64_t done_ = 0;
  int last_step_ = 0;  // Lines: the last 5% step written
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace qlens::tools
