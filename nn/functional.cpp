// Fused layer norm and cross-entropy: row kernels over raw pointers (llm.c style), then
// one recorded node per op whose backward calls the matching backward kernels. Formulas
// are in functional.h. Sums run in double for both dtypes (in a fixed lane order); a sum across rows runs in
// row order inside one thread, or in chunks of rows fixed by the shape, each in row order, added in order:
// results do not depend on the thread count.
#include "nn/functional.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/dispatch.h"
#include "core/parallel.h"
#include "core/vec.h"

namespace ember::nn {

namespace {

// ------------------------------------------------------------------ layer norm kernels
// Two passes per row (mean, then squared deviations from it): accurate on rows far from
// zero, where E[x^2] - E[x]^2 in float32 cancels catastrophically. Row sums run in double
// in vec::lane_sum's fixed lane order; the elementwise parts run in the input's dtype.
// The buffers of one layer norm over R rows of C: x, out, dy and dx are (R,C); mean and
// rstd (R), in double; weight, bias, dweight and dbias (C), each null when absent.
template <class T>
struct LayerNormBuffers {
  int64_t R = 0, C = 0;
  const T* x = nullptr;
  const T* weight = nullptr;
  const T* bias = nullptr;
  double* mean = nullptr;
  double* rstd = nullptr;
  T* out = nullptr;
  const T* dy = nullptr;
  T* dx = nullptr;
  T* dweight = nullptr;
  T* dbias = nullptr;
};

// out, mean, rstd <- x, weight, bias
template <class T>
void layer_norm_forward(const LayerNormBuffers<T>& buf, double eps) {
  const int64_t R = buf.R, C = buf.C;
  const T *x = buf.x, *weight = buf.weight, *bias = buf.bias;
  T* out = buf.out;
  double *mean = buf.mean, *rstd = buf.rstd;
  parallel_for(R, C * cost::kRowPasses, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; r++) {
      const T* xr = x + r * C;
      const double m = vec::lane_sum<double>(C, [&](int64_t c) { return xr[c]; }) / (double)C;
      const T mt = (T)m;
      const double v = vec::lane_sum<double>(C, [&](int64_t c) {
                         double d = (double)xr[c] - m;
                         return d * d;
                       }) / (double)C;
      const double s = 1.0 / std::sqrt(v + eps);
      const T st = (T)s;
      T* o = out + r * C;
      if (weight && bias)
        for (int64_t c = 0; c < C; c++) o[c] = (xr[c] - mt) * st * weight[c] + bias[c];
      else
        for (int64_t c = 0; c < C; c++) o[c] = ((xr[c] - mt) * st) * (weight ? weight[c] : T(1)) + (bias ? bias[c] : T(0));
      mean[r] = m;
      rstd[r] = s;
    }
  });
}

// For rows [rb, re): dx <- dy, x, mean, rstd, weight (when buf.dx is not null), and the
// rows' terms of dweight and dbias added, in row order, into dw and db (when not null).
template <class T>
void layer_norm_backward_rows(const LayerNormBuffers<T>& buf, int64_t rb, int64_t re, double* dw, double* db) {
  const int64_t C = buf.C;
  const T *dy = buf.dy, *x = buf.x, *weight = buf.weight;
  const double *mean = buf.mean, *rstd = buf.rstd;
  T* dx = buf.dx;
  for (int64_t r = rb; r < re; r++) {
    const T* g = dy + r * C;
    const T* xr = x + r * C;
    const T m = (T)mean[r], s = (T)rstd[r];
    if (dx) {
      T* d = dx + r * C;
      auto dxhat = [&](int64_t c) { return weight ? g[c] * weight[c] : g[c]; };
      const T a = (T)(vec::lane_sum<double>(C, dxhat) / (double)C);
      const T b = (T)(vec::lane_sum<double>(C, [&](int64_t c) { return dxhat(c) * ((xr[c] - m) * s); }) / (double)C);
      for (int64_t c = 0; c < C; c++) d[c] = s * (dxhat(c) - a - (xr[c] - m) * s * b);
    }
    if (dw) {
      for (int64_t c = 0; c < C; c++) {
        db[c] += (double)g[c];
        dw[c] += (double)(g[c] * ((xr[c] - m) * s));
      }
    }
  }
}

// The rows in chunks fixed by R alone, for the sums over rows of dweight and dbias: each
// chunk sums its rows in order, then the chunks' sums are added in order - the same bits
// on any thread count. A chunk's dx rows are computed in the same pass, on the thread
// that normalised those rows in the forward (an even count of chunks: with two threads,
// the halves of the rows parallel_for gives each).
constexpr int64_t kLayerNormChunkRows = 64, kLayerNormMaxChunks = 8;
int64_t layer_norm_chunks(int64_t R) {
  const int64_t n = std::clamp<int64_t>(R / kLayerNormChunkRows, 1, kLayerNormMaxChunks);
  return n > 1 ? n / 2 * 2 : 1;
}

// dx and/or dweight, dbias (either null) in one parallel region.
template <class T>
void layer_norm_backward(const LayerNormBuffers<T>& buf, bool need_dx, bool need_params) {
  const int64_t R = buf.R, C = buf.C;
  LayerNormBuffers<T> b = buf;
  if (!need_dx) b.dx = nullptr;
  if (!need_params) {
    parallel_for(R, C * cost::kRowBackward,
                 [&](int64_t rb, int64_t re) { layer_norm_backward_rows<T>(b, rb, re, nullptr, nullptr); });
    return;
  }
  const int64_t chunks = layer_norm_chunks(R);
  std::vector<double> sums((size_t)(chunks * 2 * C), 0.0);  // per chunk: dweight's C sums, then dbias's
  parallel_for(chunks, (R / chunks + 1) * C * (need_dx ? cost::kRowBackward : cost::kColumnPass),
               [&](int64_t cb, int64_t ce) {
                 for (int64_t i = cb; i < ce; i++) {
                   double* w = sums.data() + i * 2 * C;
                   layer_norm_backward_rows<T>(b, i * R / chunks, (i + 1) * R / chunks, w, w + C);
                 }
               });
  for (int64_t c = 0; c < C; c++) {
    double w = 0, d = 0;
    for (int64_t i = 0; i < chunks; i++) w += sums[(size_t)(i * 2 * C + c)], d += sums[(size_t)(i * 2 * C + C + c)];
    if (b.dweight) b.dweight[c] = (T)w;
    if (b.dbias) b.dbias[c] = (T)d;
  }
}

// ------------------------------------------------------------------ cross-entropy kernels
// loss_row (R), lse (R) <- logits (R,V), target (R); ignored rows get 0 in both.
template <class T>
void cross_entropy_forward(double* loss_row, double* lse, const T* logits, const int64_t* target, int64_t R,
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
void cross_entropy_backward(T* dlogits, const T* logits, const double* lse, const int64_t* target, int64_t R,
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

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

// ------------------------------------------------------------------ layer_norm
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Loc loc) {
  check_defined(x, "layer_norm", "the input");
  const char* op = "layer_norm";
  if (!(eps >= 0 && std::isfinite(eps))) fail(op, "eps must be non-negative and finite, got ", eps);
  if (!is_floating(x.dtype()))
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
    layer_norm_forward<T>({.R = R, .C = C, .x = xc.data<T>(), .weight = data_or_null<T>(w), .bias = data_or_null<T>(b),
                           .mean = mean.data<double>(), .rstd = rstd.data<double>(), .out = out.data<T>()},
                          eps);
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
        const LayerNormBuffers<T> buf{.R = R,
                                      .C = C,
                                      .x = xc.data<T>(),
                                      .weight = data_or_null<T>(w_for_dx),
                                      .mean = mean.data<double>(),
                                      .rstd = rstd.data<double>(),
                                      .dy = dy.data<T>(),
                                      .dx = data_or_null<T>(dx),
                                      .dweight = data_or_null<T>(dw),
                                      .dbias = data_or_null<T>(db)};
        layer_norm_backward<T>(buf, need_dx, need_dw || need_db);
      });
      return std::vector<Tensor>{dx, dw, db};
    };
  }
  return record(op, loc, out, {x, weight, bias}, std::move(bw), {xc, w_for_dx});
}

// ------------------------------------------------------------------ cross_entropy
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                     Loc loc) {
  check_defined(logits, "cross_entropy", "logits");
  check_defined(target, "cross_entropy", "target");
  const char* op = "cross_entropy";
  if (!is_floating(logits.dtype()))
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
    cross_entropy_forward<T>(loss_row.data(), lse.data<double>(), z.data<T>(), pt, R, V, ignore_index,
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
        Tensor q = full({R, V}, label_smoothing / (double)V, z.dtype());
        Tensor kept = zeros({R, 1}, z.dtype());
        dispatch_float(z.dtype(), "cross_entropy backward", [&](auto tag) {
          using T = decltype(tag);
          const int64_t* pt = t.data<int64_t>();
          for (int64_t r = 0; r < R; r++) {
            if (pt[r] == ignore_index) continue;
            q.data<T>()[r * V + pt[r]] += T(1.0 - label_smoothing);
            kept.data<T>()[r] = T(1.0 / (double)count);
          }
        });
        Tensor p = softmax(sz.get().reshape({R, V}), -1);
        return std::vector<Tensor>{mul(mul(sub(p, q), kept), grad).reshape(z.shape()), Tensor()};
      }
      const double scale = count > 0 ? grad.item() / (double)count : 0.0;
      Tensor dz = empty(z.shape(), z.dtype());
      dispatch_float(z.dtype(), "cross_entropy backward", [&](auto tag) {
        using T = decltype(tag);
        cross_entropy_backward<T>(dz.data<T>(), z.data<T>(), lse.data<double>(), t.data<int64_t>(), R, V,
                                  ignore_index, label_smoothing, scale);
      });
      return std::vector<Tensor>{dz, Tensor()};
    };
  }
  return record(op, loc, out, {logits, target}, std::move(bw), {z, t});
}

}  // namespace ember::nn
