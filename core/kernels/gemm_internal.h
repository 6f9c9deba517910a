// What the GEMM files share: how a strided matrix is handed to a kernel (MatLayout), the
// tile alignment, and the kernels gemm_plan.cpp chooses between - the
// skinny kernels (gemm_skinny.cpp) and, on AVX-512, the float panel kernel
// (gemm_avx512.cpp). Not part of the API: included by core/kernels/gemm_*.cpp only.
#pragma once
#include <cstdint>

#include "core/kernels/gemm.h"

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
#endif

}  // namespace ember::kernel::gemm_detail
