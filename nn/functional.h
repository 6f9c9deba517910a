// Functional forms of the fused ops that layers and losses are built from: layer
// normalisation and cross-entropy, each one autograd node with a hand-written backward,
// plus re-exports of the fused core ops (softmax, log_softmax, masked_fill). Each is
// tested against the same computation composed of primitive ops and by finite
// differences (tests/test_functional.cpp).
//
// Layer norm over the last dim, per row x of C elements (biased variance):
//   mean = sum(x) / C,  var = sum((x - mean)^2) / C,  rstd = 1 / sqrt(var + eps)
//   xhat = (x - mean) * rstd,  y = xhat * weight + bias
//   dbias = sum over rows of dy,  dweight = sum over rows of dy * xhat
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy * weight
//
// Cross-entropy per row of logits z [V] with target t and label smoothing s:
//   lse = log(sum(exp(z))),  q = (1 - s) onehot(t) + s / V
//   loss_row = sum_v q_v (lse - z_v) = lse - (1 - s) z_t - (s / V) sum(z)
//   loss = sum of loss_row over rows whose target is not ignore_index, / their count
//   dz = (softmax(z) - q) / count on kept rows, 0 on ignored ones
//
// Forward mode (core/forward_ad.h), the tangents dx, dweight, dbias and dz to the output's:
//   layer norm:     dxhat = rstd * (dx - mean(dx) - xhat * mean(xhat * dx)),
//                   dy = dxhat * weight + xhat * dweight + dbias
//   cross-entropy:  dloss = sum over kept rows of <softmax(z) - q, dz> / count (0 if none)
//
// Both accept float32 or float64, any strides, and give bitwise the same results for any
// thread count: rows are independent, and every sum across rows runs in a fixed order.
#pragma once
#include <cstdint>

#include "core/ops.h"

namespace ember::nn {

using ember::log_softmax;
using ember::masked_fill;
using ember::softmax;

// Layer normalisation over the last dim of x [..., C]. weight and bias [C] of x's dtype
// may each be undefined (no scale, no shift). Mean and variance are computed in two
// passes with double accumulators, so rows far from zero (x ~ 1000 + N(0, 1) in float32)
// normalise accurately.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5,
                  Loc loc = Loc::current());

// Mean cross-entropy (a scalar of logits' dtype) of logits [..., V] against int64 targets
// of logits' leading shape [...], as torch.nn.functional.cross_entropy with reduction
// "mean". Targets equal to ignore_index contribute nothing and are left out of the mean.
// label_smoothing in [0, 1]. When every target is ignored the loss is 0 and the gradient
// zero (PyTorch gives NaN). Any other target outside [0, V) is an Error.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Loc loc = Loc::current());

}  // namespace ember::nn
