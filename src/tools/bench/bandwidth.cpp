#include "tools/bench/bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/host_memory.h"
#include "core/parallel.h"

namespace qlens::tools {

namespace {

// Eight independent sums so the loads, not an addition chain, set the pace.
uint64_t read_slice(const uint64_t* p, size_t n) {
  uint64_t s[8] = {};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) s[u] += p[i + u];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

}  // namespace

double read_bandwidth_gbs(int n_threads, size_t bytes, int repeats) {
  const int threads = n_threads > 0 ? n_threads : default_thread_count();
  const size_t words = bytes / 64 * 8;
  // The memory weights live in (huge pages where the system has them).
  HostMemory memory = alloc_host_memory(words * sizeof(uint64_t));
  auto* const data = reinterpret_cast<uint64_t*>(memory.get());
  // Written by the threads that will read it (first touch places the pages).
  const size_t per = (words / threads) / 8 * 8;
  parallel_for(threads, threads, [&](int64_t t, int) {
    std::memset(data + t * per, 1, per * sizeof(uint64_t));
  });
  double best = 0;
  std::atomic<uint64_t> sink{0};
  for (int r = 0; r < repeats; ++r) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        ready++;
        while (!go.load(std::memory_order_acquire)) {
        }
        sink += read_slice(data + t * per, per);
      });
    while (ready.load() < threads) {
    }
    const auto start = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(per * threads * sizeof(uint64_t)) / s / 1e9);
  }
  return best;  // (the sums went to an atomic: the reads are not optimized away)
}

uint64_t weight_bytes_per_token(const Model& model) {
  uint64_t bytes = 0;
  for (const auto& [name, w] : model.weights()) {
    const std::vector<Role> roles = model.roles_of(w);
    const bool rows_only = roles.size() == 1 && roles.front() == Role::TokenEmbd;
    if (!rows_only) bytes += w->nbytes();
  }
  return bytes;
}

}  // namespace qlens::tools
