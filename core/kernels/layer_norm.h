// Layer norm's row kernels over raw pointers: y = (x - mean) * rstd * weight + bias over
// the last dim, and its backward. Sums run in double (vec::lane_sum's fixed lane order);
// a sum across rows runs in chunks of rows fixed by the shape, each in row order, added
// in order: results do not depend on the thread count. nn::layer_norm is the op.
#pragma once
#include <cstdint>

namespace ember::kernel {

// out (R,C), mean (R), rstd (R) <- x (R,C), weight (C), bias (C); weight and bias null
// when absent. mean and rstd (1 / sqrt(var + eps)) are what the backward needs.
void layer_norm_forward(float* out, double* mean, double* rstd, const float* x, const float* weight,
                        const float* bias, int64_t R, int64_t C, double eps);
void layer_norm_forward(double* out, double* mean, double* rstd, const double* x, const double* weight,
                        const double* bias, int64_t R, int64_t C, double eps);

// dx (R,C), dweight (C), dbias (C) <- dy (R,C), x (R,C), mean (R), rstd (R), weight (C).
// Each output is null when not wanted (dx computed when dx is not null, dweight and
// dbias when either is not); weight null when absent (it is read for dx only).
void layer_norm_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                         const double* mean, const double* rstd, const float* weight, int64_t R, int64_t C);
void layer_norm_backward(double* dx, double* dweight, double* dbias, const double* dy, const double* x,
                         const double* mean, const double* rstd, const double* weight, int64_t R, int64_t C);

}  // namespace ember::kernel
