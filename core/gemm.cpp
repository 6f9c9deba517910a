// GEMM: batched products cut into tiles fixed by the shape and shared over our threads (so
// results never depend on the thread count), each tile an OpenBLAS call or, for float
// products with a short sum on AVX-512, our own panel kernel; and our own kernels for
// skinny products (few rows of C, or a short sum) that stream one large operand.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/kernels.h"

extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);

namespace ember::kernel {

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

// How a strided matrix [rows, cols] is handed to row-major BLAS without copying.
struct MatLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

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
constexpr int64_t kGemmTileAlign = 16;

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

// 64-byte vectors (GCC's vector extension): loops written on them keep their
// accumulators in registers, one vector each
typedef float Float64Bytes __attribute__((vector_size(64)));
typedef double Double64Bytes __attribute__((vector_size(64)));
template <class T>
using Vector64 = std::conditional_t<std::is_same_v<T, float>, Float64Bytes, Double64Bytes>;

// Keeps v in a register: the compiler then loads it once, not again at each use (an empty
// asm that claims to change it). Only where 64-byte vectors fit a register (AVX-512).
template <class V>
inline void in_register(V& v) {
#if defined(__AVX512F__)
  asm("" : "+v"(v));
#else
  (void)v;
#endif
}

// Lane i of the result: the sum of v[i]'s lanes, for L vectors of L lanes. A tree of
// pairwise folds: each level adds the lower and upper halves of every group of lanes of
// two vectors into one vector of groups half as wide (L - 1 vector additions in all,
// against L (L - 1) scalar ones), always in the same order.
// Output lane j of a fold with groups of width H: from x's groups (the lower half of the
// lanes) or y's (lanes L.. of the pair), the lower half of its group.
constexpr int fold_source(int L, int H, int j) {
  const int w = j % (L / 2);
  return (j < L / 2 ? 0 : L) + (w / H) * 2 * H + w % H;
}
template <class V, int L, int H, int... J>
inline void fold_halves(V& out, const V& x, const V& y, std::integer_sequence<int, J...>) {
  out = __builtin_shufflevector(x, y, fold_source(L, H, J)...) +
        __builtin_shufflevector(x, y, (fold_source(L, H, J) + H)...);
}
// v[0] <- the lane sums of v[0 .. L) (v is overwritten)
template <class V, int L, int H = L / 2>
inline void lane_sums(V* v, int n = L) {
  for (int i = 0; i < n / 2; i++) {
    V folded;
    fold_halves<V, L, H>(folded, v[2 * i], v[2 * i + 1], std::make_integer_sequence<int, L>());
    v[i] = folded;
  }
  if constexpr (H > 1) lane_sums<V, L, H / 2>(v, n / 2);
}

// Skinny GEMMs - few rows of C (M <= kSkinny: a Linear layer on a handful of tokens) or a
// short sum (K <= kSkinny: its weight gradient) - are mostly the streaming of one big
// operand. OpenBLAS first copies that operand into its packed layout, and cannot split
// such a product over threads without changing its sums, so these run here instead:
// over column blocks of C (each element summed over k in order, whatever the threads),
// with the big operand read once, straight from where it lies.
constexpr int64_t kSkinny = 16;
// elements of the streamed operand below which BLAS is as fast (attention's per-head tiles)
constexpr int64_t kSkinnyMinStream = 32768;

// One skinny product (one batch element); false when its layout is not one of ours.
// tasks() and run(task) split it into column (or row) blocks of a size fixed by the shape.
template <class T>
struct Skinny {
  const T* pa;
  const T* pb;
  T* pc;
  MatLayout la, lb;
  int64_t M, N, K;
  bool accumulate;
  bool dot;          // B transposed and A not: dot products of rows
  int64_t cols = 0;  // columns of C per task (axpy form with few rows, and dot form)
  int64_t rows = 0;  // rows of C per task (axpy form with many rows)

  static bool usable(const MatLayout& la, const MatLayout& lb, int64_t M, int64_t N, int64_t K) {
    // only where the streamed operand is large; small products are BLAS's
    const bool few_rows = M <= kSkinny && N * K >= kSkinnyMinStream;
    const bool short_sum = K <= kSkinny && M * N >= kSkinnyMinStream;
    if (!(few_rows || short_sum)) return false;
    if (!lb.trans) return true;          // B's rows contiguous: axpy form, any A
    return !la.trans && M <= kSkinny;    // dot form
  }
  void plan() {
    dot = lb.trans;
    if (dot) cols = 32;
    else if (M <= kSkinny) cols = 64;
    else rows = 32;
  }
  // C[m, n] (+)= sum_k A(m, k) B[k, n] for m in [m0, m0 + R), n in [n0, n0 + w), with B's rows
  // contiguous (ldb apart) and A(m, k) at pa[m * ar + k * ac].
  template <int R>
  void axpy_block(int64_t m0, int64_t n0, int64_t w) const {
    if constexpr (sizeof(T) == 4) {  // whole vectors: 16, 32, 48 or 64 floats
      switch (w) {
        case 64: return axpy_block_vectors<R, 4>(m0, n0);
        case 48: return axpy_block_vectors<R, 3>(m0, n0);
        case 32: return axpy_block_vectors<R, 2>(m0, n0);
        case 16: return axpy_block_vectors<R, 1>(m0, n0);
        default: break;
      }
    }
    T* c = pc;
    const T *pa = this->pa, *pb = this->pb;
    const int64_t K = this->K, ldc = N, ldb = lb.ld, ar = la.trans ? 1 : la.ld, ac = la.trans ? la.ld : 1;
    const bool accumulate = this->accumulate;
    constexpr int64_t W = 64;
    T acc[R][W];
    for (int r = 0; r < R; r++)
      for (int64_t j = 0; j < W; j++) acc[r][j] = accumulate && j < w ? c[(m0 + r) * ldc + n0 + j] : T(0);
    if (w == W) {  // the loop below with a constant width, which the compiler unrolls
      for (int64_t k = 0; k < K; k++) {
        const T* b = pb + k * ldb + n0;
        for (int r = 0; r < R; r++) {
          const T a = pa[(m0 + r) * ar + k * ac];
          for (int64_t j = 0; j < W; j++) acc[r][j] += a * b[j];
        }
      }
    } else {
      for (int64_t k = 0; k < K; k++) {
        const T* b = pb + k * ldb + n0;
        for (int r = 0; r < R; r++) {
          const T a = pa[(m0 + r) * ar + k * ac];
          for (int64_t j = 0; j < w; j++) acc[r][j] += a * b[j];
        }
      }
    }
    for (int r = 0; r < R; r++)
      for (int64_t j = 0; j < w; j++) c[(m0 + r) * ldc + n0 + j] = acc[r][j];
  }

  // axpy_block over NV vectors a row, the same sums in the same order, with each step's
  // vectors of B loaded once (not once a row) and A's elements broadcast once
  template <int R, int NV>
  void axpy_block_vectors(int64_t m0, int64_t n0) const {
    using V = Vector64<T>;
    constexpr int L = sizeof(V) / sizeof(T);
    T* c = pc;
    const T *pa = this->pa, *pb = this->pb;
    const int64_t K = this->K, ldc = N, ldb = lb.ld, ar = la.trans ? 1 : la.ld, ac = la.trans ? la.ld : 1;
    V acc[R][NV];
    for (int r = 0; r < R; r++)
      for (int v = 0; v < NV; v++) {
        if (accumulate) std::memcpy(&acc[r][v], c + (m0 + r) * ldc + n0 + v * L, sizeof(V));
        else acc[r][v] = V{};
      }
    for (int64_t k = 0; k < K; k++) {
      V b[NV];
      for (int v = 0; v < NV; v++) {
        std::memcpy(&b[v], pb + k * ldb + n0 + v * L, sizeof(V));
        in_register(b[v]);
      }
      for (int r = 0; r < R; r++) {
        // A's element in every lane (x - 0 is x, -0 included; x + 0 would make -0 +0)
        V a = pa[(m0 + r) * ar + k * ac] - V{};
        in_register(a);
        for (int v = 0; v < NV; v++) acc[r][v] += a * b[v];
      }
    }
    for (int r = 0; r < R; r++)
      for (int v = 0; v < NV; v++) std::memcpy(c + (m0 + r) * ldc + n0 + v * L, &acc[r][v], sizeof(V));
  }

  // C[m, n] (+)= dot(A[m, :], Bt[n, :]) for m in [m0, m0 + R), n in [n0, n0 + NC), the rows
  // contiguous; each dot in the lanes of one 64-byte vector (R * NC independent chains, each
  // row of A and of Bt loaded once per step), the vectors' lanes then summed a vector of
  // sums at a time (lane_sums), then the tail.
  template <int R, int NC>
  void dot_block(int64_t m0, int64_t n0) const {
    using V = Vector64<T>;
    constexpr int L = sizeof(V) / sizeof(T);
    constexpr int kAcc = R * NC, kGroups = (kAcc + L - 1) / L;
    T* c = pc;
    const T *pa = this->pa, *pb = this->pb;
    const int64_t K = this->K, ldc = N, lda = la.ld, ldb = lb.ld;
    V acc[kGroups * L] = {};  // dot (r, q) in acc[r * NC + q]; the rest stay zero
    int64_t k = 0;
    for (; k + L <= K; k += L) {
      V b[NC];
      for (int q = 0; q < NC; q++) {
        std::memcpy(&b[q], pb + (n0 + q) * ldb + k, sizeof(V));
        in_register(b[q]);
      }
      for (int r = 0; r < R; r++) {
        V a;
        std::memcpy(&a, pa + (m0 + r) * lda + k, sizeof(V));
        in_register(a);
        for (int q = 0; q < NC; q++) acc[r * NC + q] += a * b[q];
      }
    }
    T sums[kGroups * L];
    for (int g = 0; g < kGroups; g++) {
      lane_sums<V, L>(acc + g * L);
      std::memcpy(sums + g * L, &acc[g * L], sizeof(V));
    }
    for (int r = 0; r < R; r++)
      for (int q = 0; q < NC; q++) {
        T sum = sums[r * NC + q];
        for (int64_t t = k; t < K; t++) sum += pa[(m0 + r) * lda + t] * pb[(n0 + q) * ldb + t];
        T& out = c[(m0 + r) * ldc + n0 + q];
        out = accumulate ? out + sum : sum;
      }
  }
  // dot_block over rows [0, M) of C: four at a time, then the rest together
  template <int NC>
  void dot_rows(int64_t n0) const {
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) dot_block<4, NC>(m, n0);
    switch (M - m) {
      case 3: return dot_block<3, NC>(m, n0);
      case 2: return dot_block<2, NC>(m, n0);
      case 1: return dot_block<1, NC>(m, n0);
      default: return;
    }
  }

  int64_t tasks() const { return cols ? (N + cols - 1) / cols : (M + rows - 1) / rows; }
  void run(int64_t task) const {
    if (dot) {
      const int64_t n_end = std::min(N, (task + 1) * cols);
      int64_t n = task * cols;
      for (; n + 4 <= n_end; n += 4) dot_rows<4>(n);
      switch (n_end - n) {
        case 3: return dot_rows<3>(n);
        case 2: return dot_rows<2>(n);
        case 1: return dot_rows<1>(n);
        default: return;
      }
    }
    const int64_t n_begin = cols ? task * cols : 0, n_end = cols ? std::min(N, n_begin + cols) : N;
    const int64_t m_begin = rows ? task * rows : 0, m_end = rows ? std::min(M, m_begin + rows) : M;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += 64) {
      const int64_t w = std::min<int64_t>(64, n_end - n0);
      int64_t m = m_begin;  // four rows at a time, then the rest together
      for (; m + 4 <= m_end; m += 4) axpy_block<4>(m, n0, w);
      if (m_end - m == 3) axpy_block<3>(m, n0, w);
      if (m_end - m == 2) axpy_block<2>(m, n0, w);
      if (m_end - m == 1) axpy_block<1>(m, n0, w);
    }
  }
};

#if defined(__AVX512F__)
// Float tiles with a short sum (K <= kPanelMaxK: every projection of a small model and its
// input gradient, and the weight gradients over a batch's tokens) run in our own kernel:
// C is computed 32 columns (a panel) at a time, kPanelRows rows at a step, each element's
// sum over k in order by fused multiply-adds, held in registers from the first k to the
// last. Where B's rows are contiguous the kernel reads B and A where they lie; a
// transposed B (a Linear layer's x W^T) is copied panel by panel into the k-major layout
// first. BLAS would copy both operands into its packed layouts, and clear C before a
// product that does not add to it: on these shapes that is a tenth of its time.
constexpr int64_t kPanelMaxK = 1536;
constexpr double kPanelMinWork = 1 << 20;  // multiply-adds: below, BLAS's small-matrix kernels are faster
constexpr int kPanelRows = 8;
constexpr int64_t kPanelWidth = 32;
constexpr int64_t kSplitMinK = 128;  // a sum cut in halves (a weight gradient's) has halves this long at least

struct PanelTile {
  const float* a;
  int64_t ar, ac;  // A(m, k) at a[m * ar + k * ac]
  const float* p;  // B(k, n0 + j) at p[k * ldp + j], j < w
  int64_t ldp;
  float* c;
  int64_t ldc, K;
  const float* bias;  // the panel's bias, or none
  __mmask16 lo, hi;  // the panel's columns in C: the first and the second vector's lanes
  bool accumulate;

  // rows [m0, m0 + R) of the panel
  template <int R>
  __attribute__((noinline)) void rows(int64_t m0) const {
    // What the loop reads, as locals, and the loops over rows unrolled: GCC then holds
    // every accumulator in a register. (Reading the members in the loop - which a store to
    // C might change, for all the compiler knows - it kept the accumulators in memory too,
    // storing all 16 at every step of the sum: half the speed, depending on whether this
    // function was inlined where it is called. It is kept out of line, compiled once.)
    const int64_t K = this->K, ar = this->ar, ac = this->ac, ldp = this->ldp, ldc = this->ldc;
    const float* p = this->p;
    const __mmask16 lo = this->lo, hi = this->hi;
    __m512 acc0[R], acc1[R];
    float* cr = c + m0 * ldc;
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      if (bias) {
        acc0[r] = _mm512_maskz_loadu_ps(lo, bias);
        acc1[r] = _mm512_maskz_loadu_ps(hi, bias + 16);
      } else if (accumulate) {
        acc0[r] = _mm512_maskz_loadu_ps(lo, cr + r * ldc);
        acc1[r] = _mm512_maskz_loadu_ps(hi, cr + r * ldc + 16);
      } else {
        acc0[r] = acc1[r] = _mm512_setzero_ps();
      }
    }
    const float* ar0 = a + m0 * ar;
    for (int64_t k = 0; k < K; k++) {
      const __m512 b0 = _mm512_maskz_loadu_ps(lo, p + k * ldp), b1 = _mm512_maskz_loadu_ps(hi, p + k * ldp + 16);
#pragma GCC unroll 16
      for (int r = 0; r < R; r++) {
        const __m512 x = _mm512_set1_ps(ar0[r * ar + k * ac]);
        acc0[r] = _mm512_fmadd_ps(x, b0, acc0[r]);
        acc1[r] = _mm512_fmadd_ps(x, b1, acc1[r]);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      _mm512_mask_storeu_ps(cr + r * ldc, lo, acc0[r]);
      _mm512_mask_storeu_ps(cr + r * ldc + 16, hi, acc1[r]);
    }
  }
  template <int R = kPanelRows>
  void rest(int64_t m0, int64_t left) const {
    if constexpr (R > 1) {
      if (left == R - 1) return rows<R - 1>(m0);
      return rest<R - 1>(m0, left);
    }
  }
};

// The 16 x 16 block at src (rows ld apart) transposed into dst (rows ldd apart): lanes
// interleaved in pairs, then fours, then the four 128-bit quarters of four vectors.
// (GCC 12's own headers trip -Wuninitialized on these shuffles: their unused merge source)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
inline void transpose16(const float* src, int64_t ld, float* dst, int64_t ldd) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ld);
  for (int i = 0; i < 8; i++) {  // per quarter: (r0[0] r1[0] r0[1] r1[1]), (r0[2] r1[2] r0[3] r1[3])
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {  // r[4i + c]'s quarter q: rows 4i .. 4i + 3 of column 4q + c
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int c = 0; c < 4; c++) {  // column 4q + c: quarter q of r[c], r[4 + c], r[8 + c], r[12 + c]
    const __m512 even_lo = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), even_hi = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    const __m512 odd_lo = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd), odd_hi = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(even_lo, even_hi, 0x88));
    _mm512_storeu_ps(dst + (8 + c) * ldd, _mm512_shuffle_f32x4(even_lo, even_hi, 0xdd));
    _mm512_storeu_ps(dst + (4 + c) * ldd, _mm512_shuffle_f32x4(odd_lo, odd_hi, 0x88));
    _mm512_storeu_ps(dst + (12 + c) * ldd, _mm512_shuffle_f32x4(odd_lo, odd_hi, 0xdd));
  }
}
#pragma GCC diagnostic pop

// packed[k * kPanelWidth + j] = src[j * ld + k] for j < w, k < K: 16 x 16 blocks, then the edges
inline void pack_panel(const float* src, int64_t ld, int64_t w, int64_t K, float* packed) {
  int64_t j = 0;
  for (; j + 16 <= w; j += 16) {
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) transpose16(src + j * ld + k, ld, packed + k * kPanelWidth + j, kPanelWidth);
    for (; k < K; k++)
      for (int64_t i = j; i < j + 16; i++) packed[k * kPanelWidth + i] = src[i * ld + k];
  }
  for (; j < w; j++)
    for (int64_t k = 0; k < K; k++) packed[k * kPanelWidth + j] = src[j * ld + k];
}

// C [M, N] (+)= A [M, K] B [K, N] on the calling thread (g's layouts, float); with a bias
// [N], C = bias + A B (each sum starting from its column's bias)
void panel_gemm(const Gemm<float>& g, const float* bias) {
  thread_local std::vector<float> packed;
  const int64_t ar = g.trans_a ? 1 : g.lda, ac = g.trans_a ? g.lda : 1;
  for (int64_t n0 = 0; n0 < g.N; n0 += kPanelWidth) {
    const int64_t w = std::min(kPanelWidth, g.N - n0);
    PanelTile t{.a = g.a, .ar = ar, .ac = ac, .p = g.b + n0, .ldp = g.ldb, .c = g.c + n0, .ldc = g.ldc, .K = g.K,
                .bias = bias ? bias + n0 : nullptr, .lo = __mmask16(w >= 16 ? 0xffff : (1u << w) - 1),
                .hi = __mmask16(w >= 32 ? 0xffff : w > 16 ? (1u << (w - 16)) - 1 : 0), .accumulate = g.accumulate};
    if (g.trans_b) {  // B(k, n) at b[n * ldb + k]: the panel's columns copied k-major
      if (packed.size() < size_t(g.K * kPanelWidth)) packed.resize(g.K * kPanelWidth);
      pack_panel(g.b + n0 * g.ldb, g.ldb, w, g.K, packed.data());
      t.p = packed.data(), t.ldp = kPanelWidth;
    }
    int64_t m = 0;
    for (; m + kPanelRows <= g.M; m += kPanelRows) t.rows<kPanelRows>(m);
    if (m < g.M) t.rest(m, g.M - m);
  }
}
#endif

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
          panel_gemm(Gemm<T>{.M = M, .N = N, .K = k1 - k0, .a = pa + k0 * la.ld, .lda = la.ld, .trans_a = true,
                             .b = pb + k0 * lb.ld, .ldb = lb.ld, .c = task == 0 ? pc : ps, .ldc = N,
                             .accumulate = task == 0 && accumulate},
                     nullptr);
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
  // A row-major B (attention's o += p v, dv += pd^T dout, dq += ds k, dk += ds^T q): the
  // panel kernel, which reads it in place, whatever the size (on these few-row products
  // it matches OpenBLAS's small-matrix kernels); a transposed B stays with OpenBLAS.
  if constexpr (std::is_same_v<T, float>) {
    if (!g.trans_b && g.K <= kPanelMaxK) return panel_gemm(g, nullptr);
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
