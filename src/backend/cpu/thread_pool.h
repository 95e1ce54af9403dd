// Persistent worker threads for the CPU backend.
//
// run(fn) executes fn(ith) on all threads at once (the calling thread is
// thread 0) and returns when every thread has finished. Inside fn, barrier()
// waits for all threads; it spins briefly (nodes are often short) and then
// sleeps on the futex behind std::atomic::wait, so oversubscribed machines
// are not burned by spinning.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace qlens::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1, including the caller
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  // fn must not throw.
  void run(const std::function<void(int ith)>& fn);
  // All threads of the current run() must call it the same number of times.
  void barrier();

 private:
  void worker(int ith);

  const int n_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint32_t> job_gen_{0};  // bumped for each run() (and to stop)
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};      // threads blocked in a wait
  // The barrier: arrivals in this phase, and the phase counter.
  alignas(64) std::atomic<int> count_{0};
  alignas(64) std::atomic<uint32_t> phase_{0};
};

}  // namespace qlens::cpu
