// Matrix products on raw data and on strided tensors, the one place ember calls BLAS.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace ember::kernel {

// Batched GEMM: c[b] = a[b] @ b[b] with a [.., M, K], b [.., K, N], c [.., M, N] contiguous,
// where a and b already carry the broadcast batch shape of c (stride 0 where broadcast).
// Matrices whose last two strides are a transpose are passed to BLAS as transpose flags.
// With accumulate, c[b] += a[b] @ b[b] instead; with a bias [N] (contiguous, c's dtype),
// c[b] = bias + a[b] @ b[b], every row of c starting as the bias (set by the thread that
// then computes that part of the product).
void gemm_batched(const Tensor& c, const Tensor& a, const Tensor& b, bool accumulate = false,
                  const Tensor& bias = Tensor());

// Several independent products, each computed as gemm_batched computes it (the same
// tiles, the same bits), in one parallel region: their tiles are shared out together,
// with `extra` tasks the caller adds (such as a bias gradient's column sums) among them.
// One region instead of one a product: one wait at its end, and the threads balance the
// products' unequal work between them.
struct Product {
  Tensor c = {}, a = {}, b = {};
  bool accumulate = false;
  Tensor bias = {};
};
struct ExtraTasks {
  int64_t tasks = 0;
  double work = 0;  // element operations in all, for the cost model (core/parallel.h)
  std::function<void(int64_t task)> run = {};
};
void gemm_together(const std::vector<Product>& products, const ExtraTasks& extra = {});

// One GEMM on raw row-major matrices: c [M, N] = op(a) [M, K] op(b) [K, N], or c += with
// accumulate, where op transposes the stored matrix when trans_a / trans_b; ld* are the
// stored matrices' row strides.
//   gemm_serial(Gemm<float>{.M = m, .N = n, .K = k, .a = q, .lda = k, .b = keys, .ldb = k,
//                           .trans_b = true, .c = scores, .ldc = n});
template <class T>
struct Gemm {
  int64_t M = 0, N = 0, K = 0;
  const T* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const T* b = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  T* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
};

// One GEMM computed on the calling thread alone, for kernels that cut a larger
// computation into tiles and run them on their own threads.
void gemm_serial(const Gemm<float>& g);
void gemm_serial(const Gemm<double>& g);

// The floating-point operations of every matrix product run so far by this process, 2 M N K
// a product (every matmul, Linear, attention product, forward and backward, whatever the
// path): what a benchmark divides by its time for GFLOP/s.
int64_t matmul_flops();

}  // namespace ember::kernel
