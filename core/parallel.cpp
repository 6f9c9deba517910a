// Thread count control for our OpenMP loops (OpenBLAS itself always runs on one thread).
#include "core/parallel.h"

#include <omp.h>
#include <pthread.h>

#include <atomic>

#include "core/error.h"

namespace ember {

namespace {

// A process forked after OpenMP ran a parallel region cannot start one again with more
// than one thread: libgomp's pool belongs to the parent, and the child would wait for its
// threads forever. So a forked child starts at one thread (ember's and anything else's on
// this OpenMP runtime, as PyTorch's), and, when ember's threads had run in the parent,
// refuses more.
std::atomic<bool> threads_started{false};  // whether worth_threads ever said yes
bool forked_after_threads = false;
void one_thread_after_fork() {
  omp_set_num_threads(1);
  forked_after_threads = threads_started.load(std::memory_order_relaxed);
}
[[maybe_unused]] const int fork_handler_registered = pthread_atfork(nullptr, nullptr, one_thread_after_fork);

}  // namespace

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n < 1 || n > kMaxThreads)
    fail("set_num_threads", "expected a thread count in [1, ", kMaxThreads, "], got ", n);
  if (n > 1 && forked_after_threads)
    fail("set_num_threads", "this process was forked after its parent ran ember's threads, and OpenMP cannot start "
         "threads again in it: it runs on 1 thread (start processes with 'spawn' or 'forkserver' for more), got ", n);
  omp_set_num_threads(n);
}

bool in_parallel_region() { return omp_in_parallel(); }

bool worth_threads(int64_t tasks, double work, double threshold) {
  const bool yes = tasks >= 2 && work >= threshold && num_threads() > 1 && !in_parallel_region();
  if (yes && !threads_started.load(std::memory_order_relaxed)) threads_started.store(true, std::memory_order_relaxed);
  return yes;
}

}  // namespace ember
