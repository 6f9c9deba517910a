// GEMM: batched products cut into tiles fixed by the shape and shared over our threads (so
// results never depend on the thread count), each tile an OpenBLAS call or, for float
// products with a short sum on AVX-512, our own panel kernel (under Autocast, the bfloat16
// kernel of gemm_bf16.cpp); and our own kernels for skinny products (few rows of C, or a
// short sum) that stream one large operand.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/gemm_internal.h"
#include "core/parallel.h"

extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);

namespace ember::kernel {

using namespace gemm_detail;

namespace {

// Counted per thread, each count on a cache line of its own (one shared count would pass
// its line between the cores at every small product of a parallel attention), summed
// when read.
struct alignas(64) FlopCount {
  std::atomic<int64_t> n{0};
};
constexpr int kFlopCounts = 64;
FlopCount flops_run[kFlopCounts];
void count_flops(int64_t M, int64_t N, int64_t K, int64_t products) {
  flops_run[omp_get_thread_num() % kFlopCounts].n.fetch_add(2 * M * N * K * products, std::memory_order_relaxed);
}

// The layout of t's last two dims, [rows, cols]: rows contiguous, or columns contiguous
// (a transpose), or neither (not ok).
MatLayout layout_of(const Tensor& t, int64_t rows, int64_t cols) {
  const int64_t rs = t.stride(t.dim() - 2), cs = t.stride(t.dim() - 1);
  MatLayout m;
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= std::max<int64_t>(cols, 1))) {
    m.ok = true;
    m.trans = false;
    m.ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    return m;
  }
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= std::max<int64_t>(rows, 1))) {
    m.ok = true;
    m.trans = true;
    m.ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
  }
  return m;
}

// OpenBLAS always runs on one thread: which kernel it picks, and how it blocks a GEMM,
// depend on its own thread count (and on the processor), so a GEMM it threads itself
// may round differently with 1 and 2 threads. We split the work instead, into tiles
// that depend on the shape only, and run the tiles on our OpenMP threads. Inside our
// parallel regions OpenBLAS keeps to one thread by itself. Outside them its OpenMP build
// takes its thread count from OpenMP's at every call: this holds OpenMP's at 1 around
// such a call, then puts back the counts the process had, OpenMP's and OpenBLAS's (which
// a program calling OpenBLAS itself may have chosen): ember changes neither.
class OneBlasThread {
 public:
  OneBlasThread() : omp_(omp_get_max_threads()), blas_(openblas_get_num_threads()) {
    if (omp_ != 1) omp_set_num_threads(1);
  }
  ~OneBlasThread() {
    if (openblas_get_num_threads() != blas_) openblas_set_num_threads(blas_);  // sets OpenMP's too
    if (omp_get_max_threads() != omp_) omp_set_num_threads(omp_);
  }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int omp_, blas_;
};

// c = a b, or c += a b with accumulate (BLAS's beta 1)
inline void blas_gemm(const Gemm<float>& g) {
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
              (blasint)g.M, (blasint)g.N, (blasint)g.K, 1.0f, g.a, (blasint)g.lda, g.b, (blasint)g.ldb,
              g.accumulate ? 1.0f : 0.0f, g.c, (blasint)g.ldc);
}
inline void blas_gemm(const Gemm<double>& g) {
  cblas_dgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
              (blasint)g.M, (blasint)g.N, (blasint)g.K, 1.0, g.a, (blasint)g.lda, g.b, (blasint)g.ldb,
              g.accumulate ? 1.0 : 0.0, g.c, (blasint)g.ldc);
}

// A GEMM is cut along the longer of M and N (never along K, which would change the
// sums) into tiles with boundaries at multiples of kGemmTileAlign (BLAS's register block),
// as even as that allows (tiles run in parallel: the largest sets the time): none below
// cost::kGemmSplitFlops, else two - each tile repacks the other operand, so more cost
// more - and up to kGemmMaxTiles for GEMMs of kGemmFlopsPerTile flops a tile.
constexpr int64_t kGemmMaxTiles = 8;
constexpr double kGemmFlopsPerTile = 128e6;

struct GemmTiles {
  bool along_m = true;
  int64_t length = 0;  // M or N
  int64_t count = 1;
  // tile t: rows (along M) or columns (along N) [begin(t), begin(t + 1))
  int64_t begin(int64_t t) const {
    const int64_t units = (length + kGemmTileAlign - 1) / kGemmTileAlign;
    return std::min(length, t * units / count * kGemmTileAlign);
  }
};

GemmTiles gemm_tiles(int64_t M, int64_t N, int64_t K) {
  GemmTiles t;
  t.along_m = M >= N;
  t.length = t.along_m ? M : N;
  const double flops = 2.0 * double(M) * double(N) * double(K);
  int64_t want = flops < cost::kGemmSplitFlops ? 1 : std::clamp<int64_t>(int64_t(flops / kGemmFlopsPerTile), 2, kGemmMaxTiles);
  t.count = std::max<int64_t>(1, std::min<int64_t>(want, t.length / kGemmTileAlign));
  return t;
}


// One product cut into the tasks it runs as: tiles (each one single-threaded call of BLAS
// or of the panel kernel), blocks of a skinny kernel, or the two halves of a long sum
// (then added by finish). Each task writes its own part of C, or its own half, the same
// bits whichever thread runs it and whatever else runs beside it.
struct PlannedProduct {
  int64_t tasks = 0;
  bool parallel = false;  // whether it is worth threads by itself
  bool blas = false;      // its tasks call BLAS (run serially, BLAS is held to one thread)
  std::function<void(int64_t)> run;
  std::function<void()> finish;  // what is left once every task has run, if anything
};

PlannedProduct plan_product(const Product& pr) {
  const Tensor& c = pr.c;
  bool accumulate = pr.accumulate;
  const int64_t nd = c.dim();
  const int64_t M = c.size(nd - 2), N = c.size(nd - 1), K = pr.a.size(nd - 1);
  Tensor a = pr.a, b = pr.b;
  MatLayout la = layout_of(a, M, K);
  if (!la.ok) { a = a.contiguous(); la = layout_of(a, M, K); }
  MatLayout lb = layout_of(b, K, N);
  if (!lb.ok) { b = b.contiguous(); lb = layout_of(b, K, N); }
  Shape batch(c.shape().begin(), c.shape().end() - 2);
  const int64_t nb = numel_of(batch);
  PlannedProduct plan;
  if (nb == 0 || M == 0 || N == 0) return plan;
  count_flops(M, N, K, nb);
  // element offset of batch element i's matrix in t
  auto offset = [batch, sa = a.strides(), sb = b.strides()](bool of_a, int64_t i) {
    const Shape& st = of_a ? sa : sb;
    int64_t off = 0;
    for (int64_t d = (int64_t)batch.size() - 1; d >= 0; d--) {
      off += (i % batch[d]) * st[d];
      i /= batch[d];
    }
    return off;
  };
  dispatch_float(c.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
#if defined(__AVX512F__)
    // under Autocast, float products take bfloat16 inputs (decided here, on the caller's
    // thread, for the whole product), but for the smallest
    const bool bf16 = std::is_same_v<T, float> && autocast_enabled() && bf16_products_available() &&
                      double(M) * double(N) * double(K) >= kBf16MinWork;
#endif
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = c.data<T>();
    // with a bias, rows [m0, m1) and columns [n0, n1) of product i start as the bias
    const T* pbias = pr.bias.defined() ? pr.bias.data<T>() : nullptr;
    auto set_bias = [=](int64_t i, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
      for (int64_t m = m0; m < m1; m++) std::memcpy(pc + i * M * N + m * N + n0, pbias + n0, sizeof(T) * (n1 - n0));
    };
    if (pbias) accumulate = true;
    if (K == 0) {  // no sum: C is the bias, zeros, or stays
      if (pbias) {
        for (int64_t i = 0; i < nb; i++) set_bias(i, 0, M, 0, N);
      } else if (!accumulate) {
        std::fill(pc, pc + nb * M * N, T(0));
      }
      return;
    }
    // (a and b hold the data the tasks read: captured, they stay alive with the plan)
    if (Skinny<T>::usable(la, lb, M, N, K)) {
      Skinny<T> sk{.pa = pa, .pb = pb, .pc = pc, .la = la, .lb = lb, .M = M, .N = N, .K = K, .accumulate = accumulate,
                   .dot = false};
      sk.plan();
      const int64_t per = sk.tasks();
      const int64_t work_per_task = 2 * M * N * K / per / cost::kFlopsPerOperation;
      plan.tasks = nb * per;
      plan.parallel = worth_threads(plan.tasks, double(plan.tasks) * double(work_per_task), double(kParallelGrain));
      plan.run = [=, keep = std::make_pair(a, b)](int64_t task) {
        const int64_t i = task / per, t = task % per;
        Skinny<T> one = sk;
        one.pa = pa + offset(true, i), one.pb = pb + offset(false, i), one.pc = pc + i * M * N;
        if (pbias) {  // the task's block of C: columns for all rows, or rows for all columns
          if (sk.cols) set_bias(i, 0, M, t * sk.cols, std::min(N, (t + 1) * sk.cols));
          else set_bias(i, t * sk.rows, std::min(M, (t + 1) * sk.rows), 0, N);
        }
        one.run(t);
      };
      return;
    }
#if defined(__AVX512F__)
    // A weight gradient's shape, dY^T X (A transposed, the sum over a batch's rows of
    // tokens), is cut along its sum rather than along C: the first half of the tokens
    // summed into C, the second into a scratch C that is added to it after the tasks. A
    // thread then reads the rows of dY and X that the ops before it wrote on that thread
    // (they cut the tokens in the same halves), not the other thread's: on a machine whose
    // cores are far apart, crossing between them costs more than the extra pass. The
    // halves are fixed by the shape and added in one order: the same bits on any threads.
    if constexpr (std::is_same_v<T, float>) {
      const int64_t half = K / 2 / kGemmTileAlign * kGemmTileAlign;
      if (nb == 1 && la.trans && !lb.trans && !pbias && half >= kSplitMinK && K - half <= kPanelMaxK &&
          double(M) * double(N) * double(half) >= kPanelMinWork &&
          2.0 * double(M) * double(N) * double(K) >= cost::kGemmSplitFlops) {
        Tensor scratch = empty({M, N}, c.dtype());
        float* ps = scratch.data<float>();
        plan.tasks = 2;
        plan.parallel = true;
        plan.run = [=, keep = std::make_pair(a, b)](int64_t task) {
          const int64_t k0 = task == 0 ? 0 : half, k1 = task == 0 ? half : K;
          const Gemm<T> g{.M = M, .N = N, .K = k1 - k0, .a = pa + k0 * la.ld, .lda = la.ld, .trans_a = true,
                          .b = pb + k0 * lb.ld, .ldb = lb.ld, .c = task == 0 ? pc : ps, .ldc = N,
                          .accumulate = task == 0 && accumulate};
          bf16 ? bf16_gemm(g, nullptr) : panel_gemm(g, nullptr);
        };
        plan.finish = [=, keep = scratch] {
          parallel_for(M * N, cost::kCopy, [&](int64_t b0, int64_t e0) {
            for (int64_t i = b0; i < e0; i++) pc[i] += ps[i];
          });
        };
        return;
      }
    }
#endif
    const GemmTiles tiles = gemm_tiles(M, N, K);
    plan.tasks = nb * tiles.count;
    const double flops = 2.0 * double(M) * double(N) * double(K) * double(nb);
    // a batch of products shares out without extra cost (no tile repacks an operand)
    plan.parallel = worth_threads(plan.tasks, flops, nb > 1 ? cost::kBatchSplitFlops : cost::kGemmSplitFlops);
    plan.blas = true;
    plan.run = [=, keep = std::make_pair(a, b)](int64_t task) {
      // Element (r, col) of a row-major matrix with layout l starts at r*ld+col, or at
      // col*ld+r when l is transposed.
      auto at = [](const MatLayout& l, int64_t r, int64_t col) { return l.trans ? col * l.ld + r : r * l.ld + col; };
      const int64_t i = task / tiles.count, t = task % tiles.count;
      const int64_t begin = tiles.begin(t), extent = tiles.begin(t + 1) - begin;
      if (extent == 0) return;
      const T* ai = pa + offset(true, i);
      const T* bi = pb + offset(false, i);
      T* ci = pc + i * M * N;
      Gemm<T> g;
      if (tiles.along_m) {
        g = Gemm<T>{.M = extent, .N = N, .K = K, .a = ai + at(la, begin, 0), .lda = la.ld, .trans_a = la.trans,
                    .b = bi, .ldb = lb.ld, .trans_b = lb.trans, .c = ci + begin * N, .ldc = N,
                    .accumulate = accumulate};
      } else {
        g = Gemm<T>{.M = M, .N = extent, .K = K, .a = ai, .lda = la.ld, .trans_a = la.trans,
                    .b = bi + at(lb, 0, begin), .ldb = lb.ld, .trans_b = lb.trans, .c = ci + begin, .ldc = N,
                    .accumulate = accumulate};
      }
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>) {
        if (bf16) return bf16_gemm(g, pbias ? pbias + (tiles.along_m ? 0 : begin) : nullptr);
        if (K <= kPanelMaxK && double(g.M) * double(g.N) * double(K) >= kPanelMinWork)
          return panel_gemm(g, pbias ? pbias + (tiles.along_m ? 0 : begin) : nullptr);
      }
#endif
      if (pbias) {
        if (tiles.along_m) set_bias(i, begin, begin + extent, 0, N);
        else set_bias(i, 0, M, begin, begin + extent);
      }
      blas_gemm(g);
    };
  });
  return plan;
}

}  // namespace

void gemm_batched(const Tensor& c, const Tensor& a, const Tensor& b, bool accumulate, const Tensor& bias) {
  gemm_together({Product{.c = c, .a = a, .b = b, .accumulate = accumulate, .bias = bias}});
}

void gemm_together(const std::vector<Product>& products, const ExtraTasks& extra) {
  std::vector<PlannedProduct> plans;
  int64_t total = extra.tasks;
  bool parallel = extra.tasks > 0 && worth_threads(extra.tasks, extra.work, double(kParallelGrain)), blas = false;
  for (const Product& p : products) {
    plans.push_back(plan_product(p));
    total += plans.back().tasks;
    parallel = parallel || plans.back().parallel;
    blas = blas || plans.back().blas;
  }
  // task t: the products' tasks in turn, then the extra ones
  auto run = [&](int64_t t) {
    for (const PlannedProduct& p : plans) {
      if (t < p.tasks) return p.run(t);
      t -= p.tasks;
    }
    extra.run(t);
  };
  // One product: each thread a run of consecutive tiles (the rows the next op's threads
  // will read where they were written). Several: tasks dealt in turn, so that each
  // product's tiles (equal in size) are spread over the threads.
  const bool threads = parallel && worth_threads(total, 1.0, 1.0);
  if (threads && plans.size() == 1 && extra.tasks == 0) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < total; t++) run(t);
  } else if (threads) {
#pragma omp parallel for schedule(static, 1)
    for (int64_t t = 0; t < total; t++) run(t);
  } else if (blas && !in_parallel_region()) {
    OneBlasThread one;
    for (int64_t t = 0; t < total; t++) run(t);
  } else {
    for (int64_t t = 0; t < total; t++) run(t);
  }
  for (const PlannedProduct& p : plans)  // (a sum's second half added to its first)
    if (p.finish) p.finish();
}

template <class T>
void gemm_serial_impl(const Gemm<T>& g) {
  if (g.M == 0 || g.N == 0) return;
  count_flops(g.M, g.N, g.K, 1);
  if (g.K == 0) {
    if (!g.accumulate)
      for (int64_t m = 0; m < g.M; m++) std::fill(g.c + m * g.ldc, g.c + m * g.ldc + g.N, T(0));
    return;
  }
#if defined(__AVX512F__)
  // Attention's products (o += p v, dv += pd^T dout, dq += ds k, dk += ds^T q, and the
  // scores q k^T with B transposed, copied panel by panel first): the panel kernel,
  // whatever the size; on these few-row products it is faster than OpenBLAS's small-matrix
  // path (15-25% on attention's forward and backward for L = 128 .. 1024).
  if constexpr (std::is_same_v<T, float>) {
    if (autocast_enabled() && bf16_products_available() && double(g.M) * double(g.N) * double(g.K) >= kBf16MinWork)
      return bf16_gemm(g, nullptr);
    if (g.K <= kPanelMaxK) return panel_gemm(g, nullptr);
  }
#endif
  if (in_parallel_region()) {  // OpenBLAS runs on one thread inside our parallel regions
    blas_gemm(g);
    return;
  }
  OneBlasThread one;
  blas_gemm(g);
}

void gemm_serial(const Gemm<float>& g) { gemm_serial_impl(g); }
void gemm_serial(const Gemm<double>& g) { gemm_serial_impl(g); }

int64_t matmul_flops() {
  int64_t total = 0;
  for (auto& c : flops_run) total += c.n.load(std::memory_order_relaxed);
  return total;
}

}  // namespace ember::kernel
