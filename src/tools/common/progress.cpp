#include "tools/common/progress.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unistd.h>

namespace qlens::tools {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "?";
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

Progress::Mode Progress::default_mode() {
  if (const char* v = std::getenv("QLENS_PROGRESS")) {
    if (std::string_view(v) == "0") return Mode::Off;
    if (std::string_view(v) == "1") return Mode::Lines;
  }
  return isatty(STDERR_FILENO) == 1 ? Mode::Bar : Mode::Lines;
}

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), mode_(default_mode()) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
  if (mode_ == Mode::Lines && total_ > 0)
    std::fprintf(stderr, "%s: %lld %s to do\n", label_.c_str(), static_cast<long long>(total_), unit_.c_str());
}

Progress::~Progress() { finish(); }

void Progress::line(int64_t done, const std::string& status, std::chrono::steady_clock::time_point now) {
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? done / elapsed : 0;
  const double eta = rate > 0 ? (total_ - done) / rate : -1;
  std::fprintf(stderr, "%s: %lld/%lld %s (%d%%), %.2f %s/s, %s elapsed, ETA %s%s%s\n", label_.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(),
               total_ > 0 ? static_cast<int>(100.0 * done / total_) : 0, rate, unit_.c_str(),
               format_duration(elapsed).c_str(), format_duration(eta).c_str(), status.empty() ? "" : ", ",
               status.c_str());
  std::fflush(stderr);
}

void Progress::update(int64_t done, const std::string& status) {
  if (mode_ == Mode::Off || finished_) return;
  done_ = done;
  auto now = std::chrono::steady_clock::now();
  if (mode_ == Mode::Lines) {
    const int step = total_ > 0 ? static_cast<int>(20 * done / total_) : 0;  // 5% steps
    if (step > last_step_ || now - last_draw_ >= std::chrono::seconds(60)) {
      last_step_ = step;
      last_draw_ = now;
      line(done, status, now);
    }
    return;
  }
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? done / elapsed : 0;
  const double frac = total_ > 0 ? static_cast<double>(done) / total_ : 0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  const double eta = rate > 0 ? (total_ - done) / rate : -1;
  std::fprintf(stderr, "\r%s [%s] %3d%% %lld/%lld %.1f %s/s ETA %s %s\033[K", label_.c_str(), bar.c_str(),
               static_cast<int>(frac * 100), static_cast<long long>(done), static_cast<long long>(total_), rate,
               unit_.c_str(), format_duration(eta).c_str(), status.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (mode_ == Mode::Off || finished_) return;
  finished_ = true;
  if (mode_ == Mode::Lines) {
    if (last_step_ < 20 && done_ > 0) line(done_, "", std::chrono::steady_clock::now());
    return;
  }
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace qlens::tools
