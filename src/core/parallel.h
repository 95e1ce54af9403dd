// A parallel loop for the tools' host-side work (scoring logits, quantizing
// rows): items handed out from a shared counter, so a thread that gets less
// CPU time does fewer of them. What f computes per item must not depend on
// the thread that runs it; results that are summed should be written per
// item and summed in item order afterwards, so they do not depend on the
// number of threads either.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace qlens {

inline int default_thread_count() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// Calls f(item, worker) for every item < n, with worker < n_threads (for
// per-thread scratch); n_threads <= 0: one per core. The first exception
// thrown by f is rethrown after every thread has stopped.
template <class F>
void parallel_for(int64_t n, int n_threads, F&& f) {
  if (n <= 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(n, n_threads > 0 ? n_threads : default_thread_count()));
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](int worker) {
    try {
      for (int64_t i = next++; i < n; i = next++) f(i, worker);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace qlens
