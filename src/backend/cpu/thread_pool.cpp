#include "backend/cpu/thread_pool.h"

namespace qlens::cpu {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until value != old for a while, then sleeps until it changes.
void wait_change(std::atomic<uint32_t>& value, uint32_t old, std::atomic<int>& sleepers) {
  constexpr int kSpin = 1 << 14;  // a few tens of microseconds
  for (int i = 0; i < kSpin; ++i) {
    if (value.load(std::memory_order_acquire) != old) return;
    cpu_relax();
    if ((i & 1023) == 1023) std::this_thread::yield();  // let a descheduled peer run
  }
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  while (value.load(std::memory_order_seq_cst) == old) value.wait(old, std::memory_order_seq_cst);
  sleepers.fetch_sub(1, std::memory_order_relaxed);
}

void bump(std::atomic<uint32_t>& value, std::atomic<int>& sleepers) {
  value.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) > 0) value.notify_all();
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_(n_threads < 1 ? 1 : n_threads) {
  threads_.reserve(n_ - 1);
  for (int i = 1; i < n_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  job_gen_.fetch_add(1, std::memory_order_seq_cst);
  job_gen_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (n_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  bump(job_gen_, sleepers_);
  fn(0);
  barrier();  // every worker ends its job here
  job_ = nullptr;
}

void ThreadPool::barrier() {
  if (n_ == 1) return;
  const uint32_t phase = phase_.load(std::memory_order_acquire);
  if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    count_.store(0, std::memory_order_relaxed);
    bump(phase_, sleepers_);
    return;
  }
  wait_change(phase_, phase, sleepers_);
}

void ThreadPool::worker(int ith) {
  uint32_t seen = 0;
  for (;;) {
    wait_change(job_gen_, seen, sleepers_);
    seen = job_gen_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(ith);
    barrier();
  }
}

}  // namespace qlens::cpu
