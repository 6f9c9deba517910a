// What the attention ops share: the checked sizes of one call and the default scale.
// Internal to nn (the fused and the tiled op); not installed as part of the API.
#pragma once
#include <cstdint>
#include <utility>

#include "core/ops.h"
#include "nn/attention_mask.h"

namespace ember::nn::detail {

// Sizes of one attention call: q [batch.., L, D], k [batch.., S, D], v [batch.., S, Dv].
struct Geometry {
  Shape batch;  // the broadcast leading dims of q, k and v
  int64_t L = 0, S = 0, D = 0, Dv = 0;
  Shape with(int64_t rows, int64_t cols) const {
    Shape s = batch;
    s.push_back(rows);
    s.push_back(cols);
    return s;
  }
};

// Checks q, k, v and the mask (dtypes, shapes, broadcasting), with errors naming op.
Geometry check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask);

// scale, or 1/sqrt(D) when scale is 0.
double default_scale(double scale, int64_t D);

// The dropout's keep factors (0 or 1/(1-p)) for a contiguous tensor of this shape, element
// i from draw i: the decisions both attention ops make.
Tensor dropout_keep(const Shape& shape, DType dtype, const DropoutDraws& draws);

// Attention composed of primitive ops (the reference; and what the fused and the tiled op
// are differentiated through under create_graph): weights = softmax(scale q k^T) with
// blocked pairs removed and fully blocked rows zero, times keep when it is defined, @ v.
// Returns the output, the weights (before keep) and the softmax's input.
struct Composed {
  Tensor output, weights, scores;
  Tensor dropped;  // weights * keep, what the values were averaged with (weights without keep)
};
Composed composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale,
                            const Tensor& keep);

// The forward-mode tangent of attention's output for the tangents tq, tk, tv of q, k, v
// (each may be undefined: zero; at least one defined), composed of ops from the weights
// (before dropout, 0 at blocked pairs and on fully blocked rows) and keep (undefined: no
// dropout):
//   dS = scale (tq k^T + q tk^T),  dP = weights (dS - rowsum(weights dS))
//   tangent = (dP keep) v + (weights keep) tv
// Differentiable in whatever the weights are differentiable in, and in the tangents.
Tensor attention_tangent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tq, const Tensor& tk,
                         const Tensor& tv, const Tensor& weights, const Tensor& keep, double scale);

// The same with the weights of composed_attention: the tangent differentiable in all six
// inputs (what the ops give when the tangent joins the graph).
Tensor composed_attention_tangent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tq,
                                  const Tensor& tk, const Tensor& tv, const AttentionMask& mask, double scale,
                                  const Tensor& keep);

}  // namespace ember::nn::detail
