// Dropout's loops over raw pointers: the decisions drawn from DropoutDraws (core/random.h)
// for each element of rows of a contiguous tensor, applied in one pass with no mask in
// memory, or the decisions of an earlier pass applied again from a byte an element; and
// relu_dropout's backward. The ops (ember::dropout, relu_dropout and their packed forms)
// are in core/ops/softmax_dropout.cpp.
#pragma once
#include <cstdint>

#include "core/random.h"

namespace ember::kernel {

// out (rows, cols) <- x (rows, cols), keys (rows): element c of row r is dropped (0) when
// draw keys[r] + c of draws.gen falls below the threshold, else scaled by draws.scale;
// with relu, relu first (NaN: 0). kept (rows, cols), when not null, gets 1 where kept and
// 0 where dropped (relu must then be false).
void dropout_rows(float* out, uint8_t* kept, const float* x, const uint64_t* keys, int64_t rows, int64_t cols,
                  const DropoutDraws& draws, bool relu);
void dropout_rows(double* out, uint8_t* kept, const double* x, const uint64_t* keys, int64_t rows, int64_t cols,
                  const DropoutDraws& draws, bool relu);

// out (n) <- x (n), kept (n): x * scale where kept[i], else 0 (an earlier dropout_rows' decisions)
void dropout_kept(float* out, const float* x, const uint8_t* kept, int64_t n, float scale);
void dropout_kept(double* out, const double* x, const uint8_t* kept, int64_t n, double scale);

// dx (n) <- dy (n), y (n): relu_dropout's gradient, dy * scale where its output y > 0, else 0
void relu_dropout_backward(float* dx, const float* dy, const float* y, int64_t n, float scale);
void relu_dropout_backward(double* dx, const double* dy, const double* y, int64_t n, double scale);

}  // namespace ember::kernel
