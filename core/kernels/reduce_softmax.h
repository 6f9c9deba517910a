// Reductions (sums, max, min, arg max/min, a bias gradient's column sums) and softmax rows:
// plain and log softmax along a dim, and attention's masked softmax rows.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ember::kernel {

// A bias gradient's sum over rows, out [cols] = sum over r of x [rows, cols] (both
// contiguous, float), in the blocks of columns sum over dim 0 runs in (the same bits):
// sum_rows_blocks(cols) of them, block b by sum_rows_block, for running among other work.
int64_t sum_rows_blocks(int64_t cols);
void sum_rows_block(const Tensor& out, const Tensor& x, int64_t block);

// Reduction of x over the dims where reduce[d] is true. Kinds: sum, max, min.
// Returns a contiguous tensor shaped like x with reduced dims removed. Float sums
// accumulate in double, in chunks of fixed size combined in a fixed order.
enum class ReduceKind { Sum, Max, Min };
Tensor reduce(const Tensor& x, const std::vector<bool>& reduce, ReduceKind kind);
// Index (along `dim`) of the first max (or min) element; x contiguous.
Tensor arg_reduce(const Tensor& x, int64_t dim, bool is_max);

// Running sums along a dim of a contiguous tensor viewed as [outer, n, inner], from the
// first element (or, reverse, from the last): y[k] = x[0] + ... + x[k]. Each line is summed
// in order, in the tensor's type (int64 wraps), so the result never depends on threads.
void cumsum(const Tensor& y, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool reverse);

// Softmax along a dim of a contiguous tensor viewed as [outer, n, inner].
void softmax_forward(const Tensor& y, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log);
// dx = y * (dy - sum(dy * y))  (softmax)  or  dx = dy - exp(y) * sum(dy)  (log_softmax)
void softmax_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, int64_t outer, int64_t n,
                      int64_t inner, bool log);

// p [rows, S]: on entry raw scores, on exit softmax(scale * p) per row with blocked
// entries 0, and a row of zeros where every entry is blocked. Row r is blocked at column j
// where blocked[row_start[r] + j * col_stride] != 0 (nothing blocked when blocked is null).
// Attention's weights.
void masked_softmax_rows(float* p, int64_t rows, int64_t S, float scale, const uint8_t* blocked,
                         const int64_t* row_start, int64_t col_stride);
void masked_softmax_rows(double* p, int64_t rows, int64_t S, double scale, const uint8_t* blocked,
                         const int64_t* row_start, int64_t col_stride);
// d [rows, S]: on entry the gradient of the weights after dropout (dPd), on exit the
// gradient of the raw scores: dP = dPd * keep (keep null: no dropout), then
// dS = scale * P * (dP - sum_j dP_j P_j), with p [rows, S] the weights before dropout.
void masked_softmax_rows_backward(float* d, const float* p, const float* keep, int64_t rows, int64_t S, float scale);
void masked_softmax_rows_backward(double* d, const double* p, const double* keep, int64_t rows, int64_t S,
                                  double scale);

}  // namespace ember::kernel
