// Matrix products on raw data and on strided tensors, the one place ember calls BLAS.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember::kernel {

// Batched GEMM: c[b] = a[b] @ b[b] with a [.., M, K], b [.., K, N], c [.., M, N] contiguous,
// where a and b already carry the broadcast batch shape of c (stride 0 where broadcast).
// Matrices whose last two strides are a transpose are passed to BLAS as transpose flags.
// With accumulate, c[b] += a[b] @ b[b] instead.
void gemm_batched(const Tensor& c, const Tensor& a, const Tensor& b, bool accumulate = false);

// One GEMM on raw row-major matrices, computed on the calling thread alone:
// c = op(a) op(b), or c += op(a) op(b) with accumulate; op transposes where ta / tb.
// For kernels that cut a larger computation into tiles and run them on their own threads.
void gemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool accumulate);
void gemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* a, int64_t lda, const double* b,
                 int64_t ldb, double* c, int64_t ldc, bool accumulate);

}  // namespace ember::kernel
