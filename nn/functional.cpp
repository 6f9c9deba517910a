// Fused layer norm and cross-entropy: the ops (checks, dtype dispatch, one recorded node
// per op whose backward calls the matching backward kernel). Formulas are in
// functional.h; the row kernels over raw pointers are core/kernels/layer_norm.cpp and
// core/kernels/cross_entropy.cpp.
#include "nn/functional.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/forward_ad.h"
#include "core/kernels/cross_entropy.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/layer_norm.h"

namespace ember::nn {

namespace {

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Cross-entropy's targets as tensors [R, V] and [R, 1] of dtype: q the smoothed one-hot
// target of each kept row (s / V everywhere, plus 1 - s at the target; ignored rows
// too, which kept zeroes), and kept 1 / count on kept rows and 0 on ignored ones.
std::pair<Tensor, Tensor> smoothed_targets(const Tensor& target, DType dtype, int64_t R, int64_t V,
                                           int64_t ignore_index, double label_smoothing, int64_t count) {
  Tensor q = full({R, V}, label_smoothing / (double)V, dtype);
  Tensor kept = zeros({R, 1}, dtype);
  dispatch_float(dtype, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const int64_t* pt = target.data<int64_t>();
    for (int64_t r = 0; r < R; r++) {
      if (pt[r] == ignore_index) continue;
      q.data<T>()[r * V + pt[r]] += T(1.0 - label_smoothing);
      kept.data<T>()[r] = T(1.0 / (double)count);
    }
  });
  return {q, kept};
}

}  // namespace

// ------------------------------------------------------------------ layer_norm
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Loc loc) {
  check_defined(x, "layer_norm", "the input");
  const char* op = "layer_norm";
  if (!(eps >= 0 && std::isfinite(eps))) fail(op, "eps must be non-negative and finite, got ", eps);
  if (!is_computing_float(x.dtype()))
    fail(op, "expected a float32 or float64 input, got ", dtype_name(x.dtype()), " of shape ", x.shape());
  if (x.dim() == 0) fail(op, "expected an input of shape [..., C], got a 0-dim tensor");
  const int64_t C = x.size(-1);
  const int64_t R = numel_of(Shape(x.shape().begin(), x.shape().end() - 1));
  for (auto [p, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!p->defined()) continue;
    if (p->shape() != Shape{C})
      fail(op, name, " must have shape [", C, "] to match the last dim of input ", x.shape(), ", got ", p->shape());
    if (p->dtype() != x.dtype())
      fail(op, name, " has dtype ", dtype_name(p->dtype()), " but input ", x.shape(), " has dtype ",
           dtype_name(x.dtype()), " (convert one with .to())");
  }

  Tensor x_in = x.contiguous();  // recorded when x requires grad and is not contiguous
  Tensor xc = x_in.detach();
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = empty(x.shape(), x.dtype());
  Tensor mean = empty({R}, kFloat64), rstd = empty({R}, kFloat64);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernel::layer_norm_forward(out.data<T>(), mean.data<double>(), rstd.data<double>(), xc.data<T>(),
                               data_or_null<T>(w), data_or_null<T>(b), R, C, eps);
  });

  BackwardFn bw;
  Tensor w_for_dx;
  if (wants_grad(x, weight, bias)) {
    const bool need_dx = x.requires_grad();
    const bool need_dw = weight.defined() && weight.requires_grad();
    const bool need_db = bias.defined() && bias.requires_grad();
    w_for_dx = need_dx ? w : Tensor();
    bw = [xc, w_for_dx, mean, rstd, R, C, need_dx, need_dw, need_db, eps, sx = SavedTensor(x_in),
          sw = SavedTensor(weight), sb = SavedTensor(bias)](const Tensor& grad) {
      if (grad_enabled())  // recorded: differentiated as its composition is
        return backward_of_composition(
            [eps](const std::vector<Tensor>& in) {
              Tensor centered = sub(in[0], ember::mean(in[0], {-1}, true));
              Tensor y = mul(centered, rsqrt(add(ember::mean(square(centered), {-1}, true), eps)));
              if (in[1].defined()) y = mul(y, in[1]);
              if (in[2].defined()) y = add(y, in[2]);
              return y;
            },
            {sx.get(), sw.get(), sb.get()}, grad);
      Tensor dy = grad.contiguous();
      Tensor dx = need_dx ? empty(xc.shape(), xc.dtype()) : Tensor();
      Tensor dw = need_dw ? empty({C}, xc.dtype()) : Tensor();
      Tensor db = need_db ? empty({C}, xc.dtype()) : Tensor();
      dispatch_float(xc.dtype(), "layer_norm backward", [&](auto tag) {
        using T = decltype(tag);
        kernel::layer_norm_backward(data_or_null<T>(dx), data_or_null<T>(dw), data_or_null<T>(db), dy.data<T>(),
                                    xc.data<T>(), mean.data<double>(), rstd.data<double>(),
                                    data_or_null<T>(w_for_dx), R, C);
      });
      return std::vector<Tensor>{dx, dw, db};
    };
  }
  // Forward mode, from xhat = (x - mean) * rstd recomputed with ops on x (so that the
  // tangent is differentiable backward as x is):
  //   dxhat = rstd * (dx - mean(dx) - xhat * mean(xhat * dx)),  dy = dxhat * w + xhat * dw + db
  auto jvp = [&](const std::vector<Tensor>& t) {
    const Tensor &dx = t[0], &dw = t[1], &db = t[2];
    Tensor dy;
    if (dx.defined() || dw.defined()) {
      Tensor centered = sub(x, ember::mean(x, {-1}, true));
      Tensor r = rsqrt(add(ember::mean(square(centered), {-1}, true), eps));
      Tensor xhat = mul(centered, r);
      if (dx.defined()) {
        Tensor dxhat = mul(r, sub(sub(dx, ember::mean(dx, {-1}, true)),
                                  mul(xhat, ember::mean(mul(xhat, dx), {-1}, true))));
        dy = weight.defined() ? mul(dxhat, weight) : dxhat;
      }
      if (dw.defined()) dy = forward_detail::add_tangents(dy, mul(xhat, dw));
    }
    return forward_detail::add_tangents(dy, db);  // db [C] broadcasts over the rows
  };
  return record(op, loc, out, {x, weight, bias}, std::move(bw), {xc, w_for_dx}, jvp);
}

// ------------------------------------------------------------------ cross_entropy
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                     Loc loc) {
  check_defined(logits, "cross_entropy", "logits");
  check_defined(target, "cross_entropy", "target");
  const char* op = "cross_entropy";
  if (!is_computing_float(logits.dtype()))
    fail(op, "expected float32 or float64 logits, got ", dtype_name(logits.dtype()), " of shape ", logits.shape());
  if (logits.dim() == 0) fail(op, "expected logits of shape [..., V], got a 0-dim tensor");
  if (target.dtype() != kInt64)
    fail(op, "expected int64 targets (class indices), got ", dtype_name(target.dtype()), " of shape ",
         target.shape());
  const Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  if (target.shape() != lead)
    fail(op, "target of shape ", target.shape(), " does not match logits ", logits.shape(), ": expected ", lead);
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
    fail(op, "label_smoothing must be in [0, 1], got ", label_smoothing);
  const int64_t V = logits.size(-1), R = numel_of(lead);

  // Targets are checked here, before any parallel kernel, so the Error is thrown on this thread.
  Tensor t = target.detach().contiguous();
  const int64_t* pt = t.data<int64_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < R; r++) {
    if (pt[r] == ignore_index) continue;
    if (pt[r] < 0 || pt[r] >= V)
      fail(op, "target ", pt[r], " at flat index ", r, " of target ", target.shape(), " is outside [0, ", V,
           ") for logits ", logits.shape(), " and is not ignore_index (", ignore_index, ")");
    count++;
  }

  Tensor z_in = logits.contiguous();  // recorded when the logits require grad and are not contiguous
  Tensor z = z_in.detach();
  Tensor lse = empty({R}, kFloat64);
  std::vector<double> loss_row((size_t)R);
  dispatch_float(z.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    kernel::cross_entropy_forward(loss_row.data(), lse.data<double>(), z.data<T>(), pt, R, V, ignore_index,
                                  label_smoothing);
  });
  double total = 0;
  for (double l : loss_row) total += l;
  Tensor out = scalar_tensor(count > 0 ? total / (double)count : 0.0, logits.dtype());

  BackwardFn bw;
  if (wants_grad(logits)) {
    bw = [z, t, lse, R, V, ignore_index, label_smoothing, count, sz = SavedTensor(z_in)](const Tensor& grad) {
      if (grad_enabled()) {
        // recorded: dz = (softmax(z) - q) * grad / count on kept rows, q the smoothed one-hot target
        auto [q, kept] = smoothed_targets(t, z.dtype(), R, V, ignore_index, label_smoothing, count);
        Tensor p = softmax(sz.get().reshape({R, V}), -1);
        return std::vector<Tensor>{mul(mul(sub(p, q), kept), grad).reshape(z.shape()), Tensor()};
      }
      const double scale = count > 0 ? grad.item() / (double)count : 0.0;
      Tensor dz = empty(z.shape(), z.dtype());
      dispatch_float(z.dtype(), "cross_entropy backward", [&](auto tag) {
        using T = decltype(tag);
        kernel::cross_entropy_backward(dz.data<T>(), z.data<T>(), lse.data<double>(), t.data<int64_t>(), R, V,
                                       ignore_index, label_smoothing, scale);
      });
      return std::vector<Tensor>{dz, Tensor()};
    };
  }
  // Forward mode: dL = sum over kept rows of <softmax(z) - q, dz> / count, with ops on the
  // logits (so that the tangent is differentiable backward as they are); 0 when every
  // row is ignored.
  auto jvp = [&](const std::vector<Tensor>& tangents) {
    const Tensor& dz = tangents[0];
    if (!dz.defined()) return Tensor();
    auto [q, kept] = smoothed_targets(t, z.dtype(), R, V, ignore_index, label_smoothing, count);
    Tensor p = softmax(logits.reshape({R, V}), -1);
    return sum(mul(mul(sub(p, q), kept), dz.reshape({R, V})));
  };
  return record(op, loc, out, {logits, target}, std::move(bw), {z, t}, jvp);
}

}  // namespace ember::nn
