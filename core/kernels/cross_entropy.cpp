// Cross-entropy's row kernels (see cross_entropy.h): the forward's log-sum-exp per row
// from its max, the backward's softmax from the saved log-sum-exp.
#include "core/kernels/cross_entropy.h"

#include <cmath>

#include "core/parallel.h"
#include "core/vec.h"

namespace ember::kernel {

namespace {

// loss_row (R), lse (R) <- logits (R,V), target (R); ignored rows get 0 in both.
template <class T>
void forward(double* loss_row, double* lse, const T* logits, const int64_t* target, int64_t R,
                           int64_t V, int64_t ignore_index, double smoothing) {
  parallel_for(R, V * cost::kRowPasses, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; r++) {
      if (target[r] == ignore_index) {
        loss_row[r] = 0;
        lse[r] = 0;
        continue;
      }
      const T* z = logits + r * V;
      const T mx = vec::lane_max(z, V);
      const double sum_exp = vec::lane_sum<double>(V, [&](int64_t v) { return vec::exp(z[v] - mx); });
      const double sum_z = smoothing != 0.0 ? vec::lane_sum<double>(V, [&](int64_t v) { return z[v]; }) : 0.0;
      const double l = (double)mx + std::log(sum_exp);
      lse[r] = l;
      loss_row[r] = l - (1.0 - smoothing) * (double)z[target[r]] - smoothing / (double)V * sum_z;
    }
  });
}

// dlogits (R,V) <- logits (R,V), lse (R), target (R); scale = dloss / count
template <class T>
void backward(T* dlogits, const T* logits, const double* lse, const int64_t* target, int64_t R,
                            int64_t V, int64_t ignore_index, double smoothing, double scale) {
  parallel_for(R, V * cost::kRowPasses, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; r++) {
      T* d = dlogits + r * V;
      if (target[r] == ignore_index) {
        for (int64_t v = 0; v < V; v++) d[v] = 0;
        continue;
      }
      const T* z = logits + r * V;
      const T l = (T)lse[r], sc = (T)scale, uniform = (T)(smoothing / (double)V);
      for (int64_t v = 0; v < V; v++) d[v] = (vec::exp(z[v] - l) - uniform) * sc;
      d[target[r]] -= (T)((1.0 - smoothing) * scale);
    }
  });
}

}  // namespace

void cross_entropy_forward(double* loss_row, double* lse, const float* logits, const int64_t* target, int64_t R,
                           int64_t V, int64_t ignore_index, double smoothing) {
  forward<float>(loss_row, lse, logits, target, R, V, ignore_index, smoothing);
}
void cross_entropy_forward(double* loss_row, double* lse, const double* logits, const int64_t* target, int64_t R,
                           int64_t V, int64_t ignore_index, double smoothing) {
  forward<double>(loss_row, lse, logits, target, R, V, ignore_index, smoothing);
}
void cross_entropy_backward(float* dlogits, const float* logits, const double* lse, const int64_t* target, int64_t R,
                            int64_t V, int64_t ignore_index, double smoothing, double scale) {
  backward<float>(dlogits, logits, lse, target, R, V, ignore_index, smoothing, scale);
}
void cross_entropy_backward(double* dlogits, const double* logits, const double* lse, const int64_t* target,
                            int64_t R, int64_t V, int64_t ignore_index, double smoothing, double scale) {
  backward<double>(dlogits, logits, lse, target, R, V, ignore_index, smoothing, scale);
}

}  // namespace ember::kernel
