// What the GEMM files share: how a strided matrix is handed to a kernel (MatLayout), the
// tile alignment, and the kernels gemm_plan.cpp chooses between - the
// skinny kernels (gemm_skinny.cpp) and, on AVX-512, the float panel kernel
// (gemm_avx512.cpp). Not part of the API: included by core/kernels/gemm_*.cpp only.
#pragma once
#include <cstdint>

#include "core/kernels/gemm.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ember::kernel::gemm_detail {

// How a strided matrix [rows, cols] is handed to row-major BLAS without copying.
struct MatLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

// Tile boundaries fall at multiples of this (BLAS's register block); the halves of a
// sum cut in two, too.
constexpr int64_t kGemmTileAlign = 16;

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
  int64_t tasks() const { return cols ? (N + cols - 1) / cols : (M + rows - 1) / rows; }
  // computes task `task`'s block of C (gemm_skinny.cpp; instantiated for float and double)
  void run(int64_t task) const;

  template <int R>
  void axpy_block(int64_t m0, int64_t n0, int64_t w) const;
  template <int R, int NV>
  void axpy_block_vectors(int64_t m0, int64_t n0) const;
  template <int R, int NC>
  void dot_block(int64_t m0, int64_t n0) const;
  template <int NC>
  void dot_rows(int64_t n0) const;
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

// C [M, N] (+)= A [M, K] B [K, N] on the calling thread (g's layouts, float); with a bias
// [N], C = bias + A B (each sum starting from its column's bias)
void panel_gemm(const Gemm<float>& g, const float* bias);

// The lanes of two 16-float vectors that hold the first n (0 .. 32 or more) of 32 values
struct LaneMasks {
  __mmask16 lo, hi;
};
inline LaneMasks lane_masks(int64_t n) {
  return {__mmask16(n >= 16 ? 0xffff : n > 0 ? (1u << n) - 1 : 0), __mmask16(n >= 32 ? 0xffff : n > 16 ? (1u << (n - 16)) - 1 : 0)};
}

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

// C [M, N] (+)= A B as panel_gemm computes it, but with A and B rounded to bfloat16 (to
// nearest even) and each pair of products summed in float32 by AVX512_BF16's dot
// products (gemm_bf16.cpp): only where bf16_products_available() (core/autocast.h).
void bf16_gemm(const Gemm<float>& g, const float* bias);
// multiply-adds below which a product (or a tile) under Autocast stays float32: packing
// its operands would cost about what bfloat16 saves (attention's tiles over short sequences)
constexpr double kBf16MinWork = 1 << 17;
#endif

}  // namespace ember::kernel::gemm_detail
