// Threading policy. OpenMP runs over outer, independent loops only, and only when the
// work is large enough to pay for waking threads. The thread count comes from
// OMP_NUM_THREADS (or set_num_threads). Every kernel's result is independent of the
// thread count: elementwise work has no order, and reductions split their input into
// chunks of a fixed size (never "one chunk per thread") combined in a fixed order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <exception>

namespace ember {

// ---------------------------------------------------------------- the cost model
// Every "is this worth waking threads for" decision, in one place. Work is counted in
// element operations: one element loaded, combined and stored (a copy, an add). Waking
// the thread pool and meeting at its barrier costs about kParallelGrain of them on the
// machines measured (bench/), so less work than that stays on the calling thread. An
// element that costs more counts more (cost::k...), and a matrix product counts its FLOPs.
constexpr int64_t kParallelGrain = 32768;
// Elements per partial sum in a reduction; fixed so results never depend on threads.
constexpr int64_t kReduceChunk = 16384;

namespace cost {
constexpr int64_t kCopy = 1;             // load, combine, store
constexpr int64_t kColumnPass = 2;       // a column's pass over rows, reading two tensors (LayerNorm's dweight, dbias)
constexpr int64_t kRowPasses = 4;        // a row read in two or three passes (LayerNorm forward, cross-entropy rows)
constexpr int64_t kExp = 8;              // an exp, or a random draw, per element (softmax, dropout, rand)
constexpr int64_t kRowBackward = 8;      // a row's backward: two sums, then a pass that uses both (LayerNorm)
constexpr int64_t kOptimizerUpdate = 8;  // a few multiply-adds, a square root and a division per element
constexpr int64_t kTwoDraws = 16;        // Box-Muller: per pair, two draws, a log, a square root, a sine and a cosine
// A multiply-add vectorises 16-fold on these cores: FLOPs per element operation.
constexpr int64_t kFlopsPerOperation = 16;
// Matrix products share their work out in FLOPs (2 M N K a product), from:
constexpr double kBatchSplitFlops = 5e5;  // a batch of products, each whole on one thread: ~ kParallelGrain operations
constexpr double kTaskSplitFlops = 1e6;   // tiled attention's tasks: two small products and a softmax each
constexpr double kGemmSplitFlops = 8e6;   // one product cut in tiles: each tile packs the other operand again
}  // namespace cost

// Whether work counted this way (in the unit of threshold) over `tasks` pieces is worth
// sharing out now: more than one piece, more than one thread, not already inside a
// parallel region, and at least threshold of it.
bool worth_threads(int64_t tasks, double work, double threshold);

// The thread count our parallel loops use (omp_get_max_threads).
int num_threads();
// The largest count set_num_threads accepts.
constexpr int kMaxThreads = 1024;
// Sets the thread count of our OpenMP loops, GEMM tiles included; a count outside
// [1, kMaxThreads] is an Error (as torch.set_num_threads refuses 0), and so is a count
// above 1 in a process forked after ember's threads ran (it runs on one thread).
void set_num_threads(int n);
// Whether the caller runs inside an OpenMP parallel region.
bool in_parallel_region();

// Sets the thread count for its lifetime, then restores the previous one.
class NumThreadsGuard {
 public:
  // Sets the thread count to n; an Error as set_num_threads when n is out of range.
  explicit NumThreadsGuard(int n) : prev_(num_threads()) { set_num_threads(n); }
  ~NumThreadsGuard() {
    try {
      if (prev_ >= 1 && prev_ <= kMaxThreads) set_num_threads(prev_);
    } catch (const std::exception&) {  // (a process forked inside the guard stays at one thread)
    }
  }
  NumThreadsGuard(const NumThreadsGuard&) = delete;
  NumThreadsGuard& operator=(const NumThreadsGuard&) = delete;

 private:
  int prev_;
};

// Calls f(begin, end) over [0, n) in pieces, in parallel when n * work_per_item (element
// operations) reaches kParallelGrain.
template <class F>
void parallel_for(int64_t n, int64_t work_per_item, F&& f) {
  if (n <= 0) return;
  int threads = num_threads();
  if (!worth_threads(n, double(n) * double(work_per_item), double(kParallelGrain))) {
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

// Two independent loops in one parallel region (one wake-up and one wait where two
// parallel_for calls would take two): f(begin, end) over [0, n) and g(begin, end) over
// [0, m), each cut in the pieces parallel_for would cut it in.
template <class F, class G>
void parallel_for_two(int64_t n, int64_t work_per_n, F&& f, int64_t m, int64_t work_per_m, G&& g) {
  n = std::max<int64_t>(n, 0), m = std::max<int64_t>(m, 0);
  const int threads = num_threads();
  const double work = double(n) * double(work_per_n) + double(m) * double(work_per_m);
  if (!worth_threads(n + m, work, double(kParallelGrain))) {
    if (n > 0) f(int64_t(0), n);
    if (m > 0) g(int64_t(0), m);
    return;
  }
  const int64_t pn = std::min<int64_t>(n, int64_t(threads) * 4), pm = std::min<int64_t>(m, int64_t(threads) * 4);
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t p = 0; p < pn; p++) {
      int64_t b = n * p / pn, e = n * (p + 1) / pn;
      if (b < e) f(b, e);
    }
#pragma omp for schedule(static)
    for (int64_t p = 0; p < pm; p++) {
      int64_t b = m * p / pm, e = m * (p + 1) / pm;
      if (b < e) g(b, e);
    }
  }
}

}  // namespace ember
