// Threading policy. OpenMP runs over outer, independent loops only, and only when the
// work is large enough to pay for waking threads. The thread count comes from
// OMP_NUM_THREADS (or set_num_threads). Every kernel's result is independent of the
// thread count: elementwise work has no order, and reductions split their input into
// chunks of a fixed size (never "one chunk per thread") combined in a fixed order.
#pragma once
#include <algorithm>
#include <cstdint>

namespace ember {

// Elements below which an elementwise or reduction kernel stays on one thread.
constexpr int64_t kParallelGrain = 32768;
// Elements per partial sum in a reduction; fixed so results never depend on threads.
constexpr int64_t kReduceChunk = 16384;

int num_threads();
void set_num_threads(int n);  // our OpenMP loops, GEMM tiles included
bool in_parallel_region();

// Sets the thread count for its lifetime, then restores the previous one.
class NumThreadsGuard {
 public:
  explicit NumThreadsGuard(int n) : prev_(num_threads()) { set_num_threads(n); }
  ~NumThreadsGuard() { set_num_threads(prev_); }
  NumThreadsGuard(const NumThreadsGuard&) = delete;
  NumThreadsGuard& operator=(const NumThreadsGuard&) = delete;

 private:
  int prev_;
};

// Calls f(begin, end) over [0, n) in pieces, in parallel when n * cost >= grain.
template <class F>
void parallel_for(int64_t n, int64_t work_per_item, F&& f) {
  if (n <= 0) return;
  int threads = num_threads();
  if (threads <= 1 || n < 2 || n * work_per_item < kParallelGrain || in_parallel_region()) {
    f(int64_t(0), n);
    return;
  }
  int64_t pieces = std::min<int64_t>(n, int64_t(threads) * 4);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pieces; p++) {
    int64_t b = n * p / pieces, e = n * (p + 1) / pieces;
    if (b < e) f(b, e);
  }
}

}  // namespace ember
