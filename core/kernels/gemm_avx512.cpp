// The float panel kernel for tiles with a short sum, on AVX-512 (see kPanelMaxK in
// gemm_internal.h): C 32 columns at a time, 8 rows a step, the sums held in registers.
#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/kernels/gemm_internal.h"

namespace ember::kernel::gemm_detail {

namespace {

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

}  // namespace

// C [M, N] (+)= A [M, K] B [K, N] on the calling thread (g's layouts, float); with a bias
// [N], C = bias + A B (each sum starting from its column's bias)
void panel_gemm(const Gemm<float>& g, const float* bias) {
  thread_local std::vector<float> packed;
  const int64_t ar = g.trans_a ? 1 : g.lda, ac = g.trans_a ? g.lda : 1;
  for (int64_t n0 = 0; n0 < g.N; n0 += kPanelWidth) {
    const int64_t w = std::min(kPanelWidth, g.N - n0);
    PanelTile t{.a = g.a, .ar = ar, .ac = ac, .p = g.b + n0, .ldp = g.ldb, .c = g.c + n0, .ldc = g.ldc, .K = g.K,
                .bias = bias ? bias + n0 : nullptr, .lo = lane_masks(w).lo, .hi = lane_masks(w).hi,
                .accumulate = g.accumulate};
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

}  // namespace ember::kernel::gemm_detail
#endif
