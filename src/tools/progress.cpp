#include "tools/progress.h"

#include <cstdio>
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

bool Progress::enabled_by_default() { return isatty(STDERR_FILENO) == 1; }

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), enabled_(enabled_by_default()) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done, const std::string& status) {
  if (!enabled_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
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
  if (!enabled_ || finished_) return;
  finished_ = true;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace qlens::tools
