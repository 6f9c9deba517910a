// Cross-entropy's row kernels over raw pointers: the loss of every row of logits against
// its target class (with label smoothing and an ignored class), and its backward. Row
// sums run in double in vec::lane_sum's fixed lane order. nn::cross_entropy is the op.
#pragma once
#include <cstdint>

namespace ember::kernel {

// loss_row (R), lse (R) <- logits (R,V), target (R); rows whose target is ignore_index
// get 0 in both. lse, each row's log-sum-exp, is what the backward needs.
void cross_entropy_forward(double* loss_row, double* lse, const float* logits, const int64_t* target, int64_t R,
                           int64_t V, int64_t ignore_index, double smoothing);
void cross_entropy_forward(double* loss_row, double* lse, const double* logits, const int64_t* target, int64_t R,
                           int64_t V, int64_t ignore_index, double smoothing);

// dlogits (R,V) <- logits (R,V), lse (R), target (R); scale = dloss / (rows not ignored)
void cross_entropy_backward(float* dlogits, const float* logits, const double* lse, const int64_t* target, int64_t R,
                            int64_t V, int64_t ignore_index, double smoothing, double scale);
void cross_entropy_backward(double* dlogits, const double* logits, const double* lse, const int64_t* target,
                            int64_t R, int64_t V, int64_t ignore_index, double smoothing, double scale);

}  // namespace ember::kernel
