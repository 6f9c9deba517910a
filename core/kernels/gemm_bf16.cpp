// bfloat16 products with float32 sums on AVX512_BF16 (Autocast, core/autocast.h). Both
// operands are converted (rounded to nearest even) while they are copied into the layout
// the dot-product instruction reads: vdpbf16ps multiplies 16 lanes of pairs (two
// consecutive k) and adds each lane's two products to a float32 sum. So B is packed in
// panels of 32 columns as a pair of k per 32-bit word, [k/2][32 columns], and A either
// row by row, [rows][k/2] (A's rows along k: a plain conversion), or, when A is stored
// transposed (a weight gradient's dY^T), in panels of 8 rows, [k/2][8 rows] (its columns
// are contiguous there: no transpose needed); a missing k, row or column is 0. An 8 x 32
// block of C is 16 float32 vectors held in registers over a block of the sum, 2 loads of
// B and 8 broadcasts of A a pair of k. The sum runs over k in order, in blocks of
// kPairBlock pairs (C written between them), fixed by the shape: the same bits on any
// threads.
#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/kernels/gemm_internal.h"

// (transpose16's shuffles, inlined into pack_pairs, trip GCC 12's headers as gemm_internal.h says)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace ember::kernel::gemm_detail {

namespace {

constexpr int kRows = 8;         // rows of C a step (an A panel)
constexpr int64_t kCols = 32;    // columns of C a step (a B panel)
constexpr int64_t kPairBlock = 256;  // pairs of k summed in registers before C is written
constexpr int64_t kRowBlock = 256;   // rows of A whose block of the sum stays in L2 while B's panels pass
constexpr size_t kKeepWords = size_t(1) << 20;  // a thread's pack buffers kept between products (4 MB each)

// 16 floats from two rows (k, k + 1) of 16 columns to 16 words (pair of column j in word j)
__attribute__((target("avx512bf16,avx512bw"))) inline __m512i pairs_of(__m512 k0, __m512 k1) {
  // bf16 lanes 0..15 from k0, 16..31 from k1; then interleaved: (k0[0], k1[0]), (k0[1], k1[1]) ...
  const __m512i bf = (__m512i)_mm512_cvtne2ps_pbh(k1, k0);
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                              23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave, bf);
}

// 32 floats along k (k0 .. k0 + 31 of one row, n of them there) to 16 words, pairs in order
__attribute__((target("avx512bf16,avx512bw"))) inline __m512i pairs_along(const float* x, int64_t n) {
  const LaneMasks m = lane_masks(n);
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m.hi, x + 16), _mm512_maskz_loadu_ps(m.lo, x));
}

// A matrix S (element (k, j) at s[k * sk + j * sj], k < K, j < J, sk or sj 1) as bfloat16
// pairs in panels of w columns: out[(j / w) * pairs * w + (k / 2) * w + j % w] holds
// S(k, j) and S(k + 1, j); what lies beyond K or J is 0. w is 8 or 32.
template <int64_t w>
__attribute__((target("avx512bf16,avx512bw"))) void pack_pairs(const float* s, int64_t sk, int64_t sj, int64_t K,
                                                                int64_t J, uint32_t* out) {
  const int64_t pairs = (K + 1) / 2, Jw = (J + w - 1) / w * w;
  // 16 words for columns j0 .. j0 + 15 of pair p (j0 a multiple of 16, or of 8 below Jw - 8): to their panel(s)
  auto put = [&](int64_t p, int64_t j0, __m512i words) {
    uint32_t* o = out + (j0 / w) * pairs * w + p * w + j0 % w;
    if constexpr (w >= 16) {
      _mm512_storeu_si512(o, words);
    } else {
      _mm256_storeu_si256((__m256i*)o, _mm512_castsi512_si256(words));
      if (j0 + 8 < Jw) _mm256_storeu_si256((__m256i*)(o + pairs * w), _mm512_extracti64x4_epi64(words, 1));
    }
  };
  if (sj == 1) {  // rows along k: each pair of rows, 16 columns at a time
    for (int64_t p = 0; p < pairs; p++) {
      const float* r0 = s + 2 * p * sk;
      const bool second = 2 * p + 1 < K;
      int64_t j0 = 0;
      for (; j0 + 16 <= J; j0 += 16)
        put(p, j0, pairs_of(_mm512_loadu_ps(r0 + j0), second ? _mm512_loadu_ps(r0 + sk + j0) : _mm512_setzero_ps()));
      for (; j0 < Jw; j0 += 16) {  // the last columns, and the panel's zeros after them
        const __mmask16 m = __mmask16((1u << std::clamp<int64_t>(J - j0, 0, 16)) - 1);
        const __m512 k1 = second ? _mm512_maskz_loadu_ps(m, r0 + sk + j0) : _mm512_setzero_ps();
        put(p, j0, pairs_of(_mm512_maskz_loadu_ps(m, r0 + j0), k1));
      }
    }
    return;
  }
  // columns along k (sk == 1): 16 columns' 16 pairs converted, then transposed
  alignas(64) float block[16 * 16], turned[16 * 16];
  for (int64_t j0 = 0; j0 < Jw; j0 += 16)
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
      for (int64_t c = 0; c < 16; c++) {
        const __m512i x = j0 + c < J ? pairs_along(s + (j0 + c) * sj + 2 * p0, K - 2 * p0) : _mm512_setzero_si512();
        _mm512_store_si512(block + 16 * c, x);
      }
      transpose16(block, 16, turned, 16);
      for (int64_t p = p0; p < std::min(pairs, p0 + 16); p++) put(p, j0, _mm512_load_si512(turned + 16 * (p - p0)));
    }
}

// One block of C: 8 rows of A times a B panel over `pairs` pairs of k. A's word for row r
// and pair p is at ap[p * 8 + r] (a panel) or ap[r * lda + p] (rows). The sums start from
// the bias, from C (load_c), or from 0; rows beyond `rows` are not written.
template <bool kPanelA>
__attribute__((target("avx512bf16,avx512bw"), noinline)) void block(const uint32_t* ap, int64_t lda,
                                                                     const uint32_t* bp, int64_t pairs, float* c,
                                                                     int64_t ldc, int rows, __mmask16 lo, __mmask16 hi,
                                                                     const float* bias, bool load_c) {
  __m512 acc0[kRows], acc1[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; r++) {
    if (bias) {
      acc0[r] = _mm512_maskz_loadu_ps(lo, bias);
      acc1[r] = _mm512_maskz_loadu_ps(hi, bias + 16);
    } else if (load_c && r < rows) {
      acc0[r] = _mm512_maskz_loadu_ps(lo, c + r * ldc);
      acc1[r] = _mm512_maskz_loadu_ps(hi, c + r * ldc + 16);
    } else {
      acc0[r] = acc1[r] = _mm512_setzero_ps();
    }
  }
  for (int64_t p = 0; p < pairs; p++) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + p * kCols), b1 = (__m512bh)_mm512_loadu_si512(bp + p * kCols + 16);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; r++) {
      const uint32_t word = kPanelA ? ap[p * kRows + r] : ap[r * lda + p];
      const __m512bh a = (__m512bh)_mm512_set1_epi32(int(word));
      acc0[r] = _mm512_dpbf16_ps(acc0[r], a, b0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], a, b1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; r++)
    if (r < rows) {
      _mm512_mask_storeu_ps(c + r * ldc, lo, acc0[r]);
      _mm512_mask_storeu_ps(c + r * ldc + 16, hi, acc1[r]);
    }
}

// Rows of A along k (A(m, k) at a[m * lda + k]) as words of pairs, row m at out[m * pairs]:
// rows M .. up to the next multiple of 8 are 0
__attribute__((target("avx512bf16,avx512bw"))) void pack_rows(const float* a, int64_t lda, int64_t M, int64_t K,
                                                               uint32_t* out) {
  const int64_t pairs = (K + 1) / 2, Mr = (M + kRows - 1) / kRows * kRows;
  for (int64_t m = 0; m < Mr; m++) {
    uint32_t* o = out + m * pairs;
    if (m >= M) {
      std::fill(o, o + pairs, 0u);
      continue;
    }
    int64_t p = 0;
    for (; p + 16 <= pairs; p += 16) _mm512_storeu_si512(o + p, pairs_along(a + m * lda + 2 * p, K - 2 * p));
    if (p < pairs)
      _mm512_mask_storeu_epi32(o + p, __mmask16((1u << (pairs - p)) - 1), pairs_along(a + m * lda + 2 * p, K - 2 * p));
  }
}

}  // namespace

void bf16_gemm(const Gemm<float>& g, const float* bias) {
  if (g.M == 0 || g.N == 0) return;
  const int64_t pairs = (g.K + 1) / 2;
  const int64_t row_panels = (g.M + kRows - 1) / kRows, col_panels = (g.N + kCols - 1) / kCols;
  // B whole (every block of rows reads all of it), A a block of kRowBlock rows at a time
  thread_local std::vector<uint32_t> pa, pb;
  pa.resize(size_t(std::min(row_panels * kRows, kRowBlock) * pairs));
  pb.resize(size_t(col_panels * kCols * pairs));
  // B(k, n) at b[k * ldb + n], or b[n * ldb + k] transposed
  pack_pairs<kCols>(g.b, g.trans_b ? 1 : g.ldb, g.trans_b ? g.ldb : 1, g.K, g.N, pb.data());
  // A(m, k) at a[m * lda + k]: rows; or a[k * lda + m] (transposed): panels, as S(k, j = m)
  const bool a_panels = g.trans_a;
  for (int64_t m0 = 0; m0 < g.M; m0 += kRowBlock) {
    const int64_t m1 = std::min(g.M, m0 + kRowBlock);
    if (a_panels) pack_pairs<kRows>(g.a + m0, g.lda, 1, g.K, m1 - m0, pa.data());
    else pack_rows(g.a + m0 * g.lda, g.lda, m1 - m0, g.K, pa.data());
    for (int64_t p0 = 0; p0 < std::max<int64_t>(pairs, 1); p0 += kPairBlock) {
      const int64_t n_pairs = std::min(kPairBlock, pairs - p0);
      for (int64_t cp = 0; cp < col_panels; cp++) {
        const int64_t n0 = cp * kCols;
        const auto [lo, hi] = lane_masks(std::min(kCols, g.N - n0));
        const uint32_t* bp = pb.data() + cp * pairs * kCols + p0 * kCols;
        const float* bias_n = p0 == 0 && bias ? bias + n0 : nullptr;
        for (int64_t m = m0; m < m1; m += kRows) {
          float* c = g.c + m * g.ldc + n0;
          const int rows = int(std::min<int64_t>(kRows, g.M - m));
          const uint32_t* ap = pa.data() + (m - m0) * pairs;  // (a panel of 8 rows starts there too)
          if (a_panels)
            block<true>(ap + p0 * kRows, 0, bp, n_pairs, c, g.ldc, rows, lo, hi, bias_n, p0 > 0 || g.accumulate);
          else
            block<false>(ap + p0, pairs, bp, n_pairs, c, g.ldc, rows, lo, hi, bias_n, p0 > 0 || g.accumulate);
        }
      }
    }
  }
  // what one large product needed is given back rather than held by the thread for good
  if (pa.capacity() > kKeepWords) std::vector<uint32_t>().swap(pa);
  if (pb.capacity() > kKeepWords) std::vector<uint32_t>().swap(pb);
}

}  // namespace ember::kernel::gemm_detail
#endif
