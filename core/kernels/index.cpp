// Index kernels: index_select and its backward (index_add), gather and its backward
// (scatter_add).
#include "core/kernels/index.h"

#include <algorithm>

#include "core/kernels/dispatch.h"
#include "core/parallel.h"

namespace ember::kernel {

// --- index kernels
namespace {
void outer_inner(const Tensor& t, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < dim; d++) outer *= t.size(d);
  for (int64_t d = dim + 1; d < t.dim(); d++) inner *= t.size(d);
}
}  // namespace

void index_select(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  int64_t outer, inner;
  outer_inner(x, dim, outer, inner);
  const int64_t n = x.size(dim), m = index.numel();
  const int64_t* idx = index.data<int64_t>();
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(outer * m, inner, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; r++) {
        int64_t o = r / m, i = r % m;
        const T* src = px + (o * n + idx[i]) * inner;
        std::copy(src, src + inner, po + r * inner);
      }
    });
  });
}

void index_add(const Tensor& gx, int64_t dim, const Tensor& index, const Tensor& g) {
  int64_t outer, inner;
  outer_inner(gx, dim, outer, inner);
  const int64_t n = gx.size(dim), m = index.numel();
  const int64_t* idx = index.data<int64_t>();
  dispatch_float(gx.dtype(), "index_select_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = g.data<T>();
    T* pd = gx.data<T>();
    // Split over (outer, column blocks): each thread owns whole columns and adds the
    // rows in index order, so the sum order is fixed.
    const int64_t cb = 64, nblocks = (inner + cb - 1) / cb;
    parallel_for(outer * nblocks, m * cb, [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; u++) {
        int64_t o = u / nblocks, c0 = (u % nblocks) * cb, c1 = std::min(inner, c0 + cb);
        for (int64_t i = 0; i < m; i++) {
          const T* src = pg + (o * m + i) * inner;
          T* dst = pd + (o * n + idx[i]) * inner;
          for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
        }
      }
    });
  });
}

void gather(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  int64_t outer, inner;
  outer_inner(index, dim, outer, inner);
  const int64_t n = x.size(dim), m = index.size(dim);
  int64_t xo, xi;
  outer_inner(x, dim, xo, xi);
  const int64_t* idx = index.data<int64_t>();
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    // index and x agree on every dim but `dim` (checked by the op)
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < m; j++)
        for (int64_t k = 0; k < inner; k++) {
          int64_t q = (o * m + j) * inner + k;
          po[q] = px[(o * n + idx[q]) * xi + k];
        }
  });
}

void scatter_add(const Tensor& gx, int64_t dim, const Tensor& index, const Tensor& g) {
  int64_t outer, inner;
  outer_inner(index, dim, outer, inner);
  const int64_t n = gx.size(dim), m = index.size(dim);
  int64_t xo, xi;
  outer_inner(gx, dim, xo, xi);
  const int64_t* idx = index.data<int64_t>();
  dispatch_float(gx.dtype(), "gather_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = g.data<T>();
    T* pd = gx.data<T>();
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < m; j++)
        for (int64_t k = 0; k < inner; k++) {
          int64_t q = (o * m + j) * inner + k;
          pd[(o * n + idx[q]) * xi + k] += pg[q];
        }
  });
}

}  // namespace ember::kernel
