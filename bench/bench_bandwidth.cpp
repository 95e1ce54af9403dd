// The machine's read bandwidth with 1..n threads (the ceiling of generation):
//   ./bench_bandwidth [MiB]        default 1024 MiB
#include <cstdio>
#include <cstdlib>

#include "core/parallel.h"
#include "tools/bench/bandwidth.h"

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const int cores = qlens::default_thread_count();
  std::printf("| threads | read GB/s |\n|---|---|\n");
  for (int t = 1; t <= cores; ++t) std::printf("| %d | %.1f |\n", t, qlens::tools::read_bandwidth_gbs(t, mib << 20));
  return 0;
}
