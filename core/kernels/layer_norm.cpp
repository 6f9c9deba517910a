// Layer norm's row kernels (see layer_norm.h), llm.c style: one pass over a row for its
// mean, one for its variance, one to normalise; the backward recomputes x-hat from the
// saved mean and rstd.
#include "core/kernels/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "core/vec.h"

namespace ember::kernel {

namespace {

// Two passes per row (mean, then squared deviations from it): accurate on rows far from
// zero, where E[x^2] - E[x]^2 in float32 cancels catastrophically. Row sums run in double
// in vec::lane_sum's fixed lane order; the elementwise parts run in the input's dtype.
// out (R,C), mean (R), rstd (R) <- x (R,C), weight (C), bias (C)
template <class T>
void forward(T* out, double* mean, double* rstd, const T* x, const T* weight, const T* bias, int64_t R, int64_t C,
             double eps) {
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

// The buffers of one layer norm's backward over R rows of C: x, dy and dx are (R,C); mean
// and rstd (R), in double; weight, dweight and dbias (C), each null when absent.
template <class T>
struct LayerNormBuffers {
  int64_t R = 0, C = 0;
  const T* x = nullptr;
  const T* weight = nullptr;
  const double* mean = nullptr;
  const double* rstd = nullptr;
  const T* dy = nullptr;
  T* dx = nullptr;
  T* dweight = nullptr;
  T* dbias = nullptr;
};

// For rows [rb, re): dx <- dy, x, mean, rstd, weight (when buf.dx is not null), and the
// rows' terms of dweight and dbias added, in row order, into dw and db (when not null).
template <class T>
void backward_rows(const LayerNormBuffers<T>& buf, int64_t rb, int64_t re, double* dw, double* db) {
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
void backward(const LayerNormBuffers<T>& buf, bool need_dx, bool need_params) {
  const int64_t R = buf.R, C = buf.C;
  LayerNormBuffers<T> b = buf;
  if (!need_dx) b.dx = nullptr;
  if (!need_params) {
    parallel_for(R, C * cost::kRowBackward,
                 [&](int64_t rb, int64_t re) { backward_rows<T>(b, rb, re, nullptr, nullptr); });
    return;
  }
  const int64_t chunks = layer_norm_chunks(R);
  std::vector<double> sums((size_t)(chunks * 2 * C), 0.0);  // per chunk: dweight's C sums, then dbias's
  parallel_for(chunks, (R / chunks + 1) * C * (need_dx ? cost::kRowBackward : cost::kColumnPass),
               [&](int64_t cb, int64_t ce) {
                 for (int64_t i = cb; i < ce; i++) {
                   double* w = sums.data() + i * 2 * C;
                   backward_rows<T>(b, i * R / chunks, (i + 1) * R / chunks, w, w + C);
                 }
               });
  for (int64_t c = 0; c < C; c++) {
    double w = 0, d = 0;
    for (int64_t i = 0; i < chunks; i++) w += sums[(size_t)(i * 2 * C + c)], d += sums[(size_t)(i * 2 * C + C + c)];
    if (b.dweight) b.dweight[c] = (T)w;
    if (b.dbias) b.dbias[c] = (T)d;
  }
}


template <class T>
void backward_of(T* dx, T* dweight, T* dbias, const T* dy, const T* x, const double* mean, const double* rstd,
                 const T* weight, int64_t R, int64_t C) {
  const LayerNormBuffers<T> buf{.R = R, .C = C, .x = x, .weight = weight, .mean = mean, .rstd = rstd, .dy = dy,
                                .dx = dx, .dweight = dweight, .dbias = dbias};
  backward<T>(buf, dx != nullptr, dweight != nullptr || dbias != nullptr);
}

}  // namespace

void layer_norm_forward(float* out, double* mean, double* rstd, const float* x, const float* weight,
                        const float* bias, int64_t R, int64_t C, double eps) {
  forward(out, mean, rstd, x, weight, bias, R, C, eps);
}
void layer_norm_forward(double* out, double* mean, double* rstd, const double* x, const double* weight,
                        const double* bias, int64_t R, int64_t C, double eps) {
  forward(out, mean, rstd, x, weight, bias, R, C, eps);
}
void layer_norm_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                         const double* mean, const double* rstd, const float* weight, int64_t R, int64_t C) {
  backward_of(dx, dweight, dbias, dy, x, mean, rstd, weight, R, C);
}
void layer_norm_backward(double* dx, double* dweight, double* dbias, const double* dy, const double* x,
                         const double* mean, const double* rstd, const double* weight, int64_t R, int64_t C) {
  backward_of(dx, dweight, dbias, dy, x, mean, rstd, weight, R, C);
}

}  // namespace ember::kernel
