// The attention ops' shared input checks.
#include "nn/attention_inputs.h"

#include <cmath>

namespace ember::nn::detail {

namespace {
Shape leading(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

}  // namespace

Geometry check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  check_defined(q, op, "q");
  check_defined(k, op, "k");
  check_defined(v, op, "v");
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    fail(op, "expected q [..., L, D], k [..., S, D] and v [..., S, Dv] with at least 2 dims each, got q ", q.shape(),
         ", k ", k.shape(), ", v ", v.shape());
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype())
    fail(op, "expected q, k and v of the same dtype, got q ", dtype_name(q.dtype()), " ", q.shape(), ", k ",
         dtype_name(k.dtype()), " ", k.shape(), ", v ", dtype_name(v.dtype()), " ", v.shape());
  if (!is_computing_float(q.dtype()))
    fail(op, "expected float32 or float64 q, k and v, got ", dtype_name(q.dtype()), " q ", q.shape(), ", k ",
         k.shape(), ", v ", v.shape());
  Geometry g;
  g.L = q.size(-2);
  g.S = k.size(-2);
  g.D = q.size(-1);
  g.Dv = v.size(-1);
  if (k.size(-1) != g.D)
    fail(op, "q ", q.shape(), " and k ", k.shape(), " must have the same feature size D (last dim), got ", g.D,
         " and ", k.size(-1));
  if (v.size(-2) != g.S)
    fail(op, "k ", k.shape(), " and v ", v.shape(), " must have the same number of keys S (dim -2), got ", g.S,
         " and ", v.size(-2));
  try {
    g.batch = broadcast_shapes(broadcast_shapes(leading(q), leading(k), op), leading(v), op);
  } catch (const Error&) {
    fail(op, "the batch dims of q ", q.shape(), ", k ", k.shape(), " and v ", v.shape(), " do not broadcast (",
         leading(q), ", ", leading(k), ", ", leading(v), ")");
  }
  if (mask.defined()) {
    const Tensor& m = mask.blocked();
    if (m.dtype() != kBool)
      fail(op, "expected a bool mask (true = blocked), got ", dtype_name(m.dtype()), " of shape ", m.shape());
    const Shape scores = g.with(g.L, g.S);
    bool ok = m.dim() <= (int64_t)scores.size();
    for (int64_t d = 1; ok && d <= m.dim(); d++) {
      int64_t have = m.shape()[m.dim() - d], want = scores[scores.size() - d];
      ok = have == want || have == 1;
    }
    if (!ok)
      fail(op, "a mask of shape ", m.shape(), " cannot be broadcast to the scores' shape [..., L, S] = ", scores,
           " (q ", q.shape(), ", k ", k.shape(), ")");
  }
  return g;
}

double default_scale(double scale, int64_t D) {
  return scale != 0.0 ? scale : 1.0 / std::sqrt((double)std::max<int64_t>(D, 1));
}

}  // namespace ember::nn::detail
