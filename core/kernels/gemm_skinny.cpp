// The skinny GEMM kernels: products with few rows of C or a short sum, which stream one
// large operand (see Skinny in gemm_internal.h), on GCC's 64-byte vectors.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/kernels/gemm_internal.h"

namespace ember::kernel::gemm_detail {

namespace {

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

}  // namespace

// C[m, n] (+)= sum_k A(m, k) B[k, n] for m in [m0, m0 + R), n in [n0, n0 + w), with B's rows
// contiguous (ldb apart) and A(m, k) at pa[m * ar + k * ac].
template <class T>
template <int R>
void Skinny<T>::axpy_block(int64_t m0, int64_t n0, int64_t w) const {
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
template <class T>
template <int R, int NV>
void Skinny<T>::axpy_block_vectors(int64_t m0, int64_t n0) const {
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
template <class T>
template <int R, int NC>
void Skinny<T>::dot_block(int64_t m0, int64_t n0) const {
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
template <class T>
template <int NC>
void Skinny<T>::dot_rows(int64_t n0) const {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) dot_block<4, NC>(m, n0);
  switch (M - m) {
    case 3: return dot_block<3, NC>(m, n0);
    case 2: return dot_block<2, NC>(m, n0);
    case 1: return dot_block<1, NC>(m, n0);
    default: return;
  }
}

// task `task`: a block of columns (dot form, axpy form with few rows) or of rows
template <class T>
void Skinny<T>::run(int64_t task) const {
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

template struct Skinny<float>;
template struct Skinny<double>;

}  // namespace ember::kernel::gemm_detail
