// Thread count control for our OpenMP loops (OpenBLAS itself always runs on one thread).
#include "core/parallel.h"

#include <omp.h>

#include "core/error.h"

namespace ember {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n < 1 || n > kMaxThreads)
    fail("set_num_threads", "expected a thread count in [1, ", kMaxThreads, "], got ", n);
  omp_set_num_threads(n);
}

bool in_parallel_region() { return omp_in_parallel(); }

bool worth_threads(int64_t tasks, double work, double threshold) {
  return tasks >= 2 && work >= threshold && num_threads() > 1 && !in_parallel_region();
}

}  // namespace ember
