// Reductions and softmax rows: sums (in double for floats, in chunks of fixed size
// combined in a fixed order), max and min, arg max and min, a bias gradient's column
// sums, softmax and log softmax along a dim, and attention's masked softmax rows.
#include "core/kernels/reduce_softmax.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>

#include "core/kernels/elementwise.h"
#include "core/vec.h"

namespace ember::kernel {

// --- reductions
namespace {

template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<T>, double, T>;

// x permuted so that kept dims come first, then reduced dims; reduced dims coalesced.
struct ReducePlan {
  Shape kept_shape, kept_strides;  // iteration over outputs
  Shape red_shape, red_strides;    // iteration over one output's inputs
  int64_t outputs = 1, per_output = 1;
};

ReducePlan plan_reduce(const Tensor& x, const std::vector<bool>& red) {
  ReducePlan p;
  std::array<Shape, 1> rs;
  for (int64_t d = 0; d < x.dim(); d++) {
    if (red[d]) {
      p.red_shape.push_back(x.size(d));
      rs[0].push_back(x.stride(d));
    } else {
      p.kept_shape.push_back(x.size(d));
      p.kept_strides.push_back(x.stride(d));
    }
  }
  p.outputs = numel_of(p.kept_shape);
  p.per_output = numel_of(p.red_shape);
  coalesce<1>(p.red_shape, rs);
  p.red_strides = rs[0];
  return p;
}

}  // namespace

namespace {

// True when x is contiguous and red reduces a leading run of dims, keeping the rest:
// x is then a row-major [rows, cols] matrix summed over its rows.
bool leading_dims_reduced(const Tensor& x, const std::vector<bool>& red, int64_t& rows, int64_t& cols) {
  if (!x.is_contiguous() || x.dim() < 2) return false;
  int64_t d = 0;
  rows = cols = 1;
  for (; d < x.dim() && red[d]; d++) rows *= x.size(d);
  if (d == 0 || d == x.dim()) return false;
  for (; d < x.dim(); d++) {
    if (red[d]) return false;
    cols *= x.size(d);
  }
  return true;
}

// out [cols] = sum over r of x [rows, cols]: rows in order, columns side by side (so
// the loop vectorizes), in fixed blocks of columns, each on one thread.
constexpr int64_t kSumRowsBlock = 64;
template <class T>
void sum_rows_one_block(T* out, const T* x, int64_t rows, int64_t cols, int64_t blk) {
  acc_t<T> acc[kSumRowsBlock];
  const int64_t c0 = blk * kSumRowsBlock, n = std::min(kSumRowsBlock, cols - c0);
  for (int64_t c = 0; c < n; c++) acc[c] = 0;
  for (int64_t r = 0; r < rows; r++) {
    const T* row = x + r * cols + c0;
    for (int64_t c = 0; c < n; c++) acc[c] = wrapping_add(acc[c], acc_t<T>(row[c]));
  }
  for (int64_t c = 0; c < n; c++) out[c0 + c] = static_cast<T>(acc[c]);
}
template <class T>
void sum_rows(T* out, const T* x, int64_t rows, int64_t cols) {
  parallel_for(sum_rows_blocks(cols), rows * kSumRowsBlock, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; blk++) sum_rows_one_block(out, x, rows, cols, blk);
  });
}

}  // namespace

int64_t sum_rows_blocks(int64_t cols) { return (cols + kSumRowsBlock - 1) / kSumRowsBlock; }

void sum_rows_block(const Tensor& out, const Tensor& x, int64_t block) {
  dispatch_float(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    sum_rows_one_block<T>(out.data<T>(), x.data<T>(), x.size(0), x.size(1), block);
  });
}

Tensor reduce(const Tensor& x, const std::vector<bool>& red, ReduceKind kind) {
  ReducePlan p = plan_reduce(x, red);
  Tensor out = empty(p.kept_shape, x.dtype());
  if (p.outputs == 0) return out;
  int64_t rows = 0, cols = 0;
  if (kind == ReduceKind::Sum && leading_dims_reduced(x, red, rows, cols)) {  // e.g. a bias gradient
    dispatch_numeric(x.dtype(), "sum", [&](auto tag) {
      using T = decltype(tag);
      sum_rows<T>(out.data<T>(), x.data<T>(), rows, cols);
    });
    return out;
  }
  const char* name = kind == ReduceKind::Sum ? "sum" : (kind == ReduceKind::Max ? "max" : "min");
  if (p.per_output == 0 && kind != ReduceKind::Sum)
    fail(name, "cannot reduce over an empty dimension (input shape ", x.shape(), ")");
  dispatch_numeric(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const int64_t chunks = std::max<int64_t>(1, (p.per_output + kReduceChunk - 1) / kReduceChunk);
    // one partial sum per chunk of kReduceChunk inputs: a broadcast input of 2^50
    // elements needs 2^38 of them
    // elements needs 2^38 of them (malloc's null is an error here, where new would abort)
    std::unique_ptr<A[], void (*)(void*)> partial((A*)std::malloc(size_t(p.outputs * chunks) * sizeof(A)), std::free);
    if (!partial)
      throw OutOfMemory(cat_str(name, ": out of memory: reducing a tensor of shape ", x.shape(), " needs ",
                                p.outputs * chunks, " partial results"));
    std::array<Shape, 1> rst{p.red_strides};
    // offset of output o's first input element
    auto base_of = [&](int64_t o) {
      int64_t off = 0;
      for (int64_t d = (int64_t)p.kept_shape.size() - 1; d >= 0; d--) {
        off += (o % p.kept_shape[d]) * p.kept_strides[d];
        o /= p.kept_shape[d];
      }
      return off;
    };
    parallel_for(p.outputs * chunks, std::min<int64_t>(p.per_output, kReduceChunk), [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; u++) {
        int64_t o = u / chunks, c = u % chunks;
        const T* base = px + base_of(o);
        int64_t r0 = c * kReduceChunk, r1 = std::min(p.per_output, r0 + kReduceChunk);
        A acc = kind == ReduceKind::Sum ? A(0)
                                        : static_cast<A>(base[0]);
        auto body = [&](const int64_t* off, int64_t n, const int64_t* s) {
          const T* q = base + off[0];
          if (kind == ReduceKind::Sum) {
            if (s[0] == 1) for (int64_t i = 0; i < n; i++) acc = wrapping_add(acc, A(q[i]));
            else for (int64_t i = 0; i < n; i++) acc = wrapping_add(acc, A(q[i * s[0]]));
          } else if (kind == ReduceKind::Max) {
            for (int64_t i = 0; i < n; i++) { A v = A(q[i * s[0]]); if (v > acc || v != v) acc = v; }
          } else {
            for (int64_t i = 0; i < n; i++) { A v = A(q[i * s[0]]); if (v < acc || v != v) acc = v; }
          }
        };
        if (r1 > r0) walk_range<1>(p.red_shape, rst, r0, r1, body);
        partial[u] = acc;
      }
    });
    for (int64_t o = 0; o < p.outputs; o++) {
      A acc = partial[o * chunks];
      for (int64_t c = 1; c < chunks; c++) {
        A v = partial[o * chunks + c];
        if (kind == ReduceKind::Sum) acc = wrapping_add(acc, v);
        else if (kind == ReduceKind::Max) { if (v > acc || v != v) acc = v; }
        else { if (v < acc || v != v) acc = v; }
      }
      po[o] = static_cast<T>(acc);
    }
  });
  return out;
}

Tensor arg_reduce(const Tensor& x, int64_t dim, bool is_max) {
  Shape os = x.shape();
  int64_t n = os[dim];
  os.erase(os.begin() + dim);
  Tensor out = empty(os, kInt64);
  if (n == 0) fail(is_max ? "argmax" : "argmin", "cannot reduce over an empty dimension (input shape ", x.shape(), ")");
  int64_t inner = 1, outer = 1;
  for (int64_t d = dim + 1; d < x.dim(); d++) inner *= x.size(d);
  for (int64_t d = 0; d < dim; d++) outer *= x.size(d);
  int64_t* po = out.data<int64_t>();
  dispatch_numeric(x.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    parallel_for(outer * inner, n, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; r++) {
        const T* q = px + (r / inner) * n * inner + r % inner;
        int64_t best = 0;
        T bv = q[0];
        for (int64_t k = 1; k < n; k++) {
          T v = q[k * inner];
          if (bv != bv) break;  // NaN wins, as in PyTorch
          if ((is_max ? v > bv : v < bv) || v != v) { bv = v; best = k; }
        }
        po[r] = best;
      }
    });
  });
  return out;
}

// --- softmax
void cumsum(const Tensor& y, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool reverse) {
  dispatch_numeric(x.dtype(), "cumsum", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    parallel_for(outer * inner, n, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; r++) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        T acc = T(0);
        for (int64_t k = 0; k < n; k++) {
          const int64_t at = base + (reverse ? n - 1 - k : k) * inner;
          acc = wrapping_add(acc, px[at]);
          py[at] = acc;
        }
      }
    });
  });
}

void softmax_forward(const Tensor& y, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log) {
  dispatch_float(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    if (inner == 1) {  // softmax over contiguous rows: the vectorised path
      parallel_for(outer, n * cost::kExp, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; r++) {
          const T* xr = px + r * n;
          T* yr = py + r * n;
          const T mx = vec::lane_max(xr, n);
          if (log) {
            const T lse = mx + (T)std::log(vec::lane_sum<T>(n, [&](int64_t k) { return vec::exp(xr[k] - mx); }));
            for (int64_t k = 0; k < n; k++) yr[k] = xr[k] - lse;
          } else {
            for (int64_t k = 0; k < n; k++) yr[k] = vec::exp(xr[k] - mx);
            const T inv = T(1) / vec::lane_sum<T>(n, [&](int64_t k) { return yr[k]; });
            for (int64_t k = 0; k < n; k++) yr[k] *= inv;
          }
        }
      });
      return;
    }
    parallel_for(outer * inner, n * cost::kExp, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; r++) {
        int64_t base = (r / inner) * n * inner + r % inner;
        const T* xr = px + base;
        T* yr = py + base;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t k = 0; k < n; k++) mx = std::max(mx, xr[k * inner]);
        // a row of -inf (all blocked) would give NaN; keep it NaN-free only when asked by
        // the caller (masked attention handles it); here follow PyTorch: exp(-inf - -inf).
        T sum = 0;
        if (log) {
          for (int64_t k = 0; k < n; k++) sum += std::exp(xr[k * inner] - mx);
          T lse = mx + std::log(sum);
          for (int64_t k = 0; k < n; k++) yr[k * inner] = xr[k * inner] - lse;
        } else {
          for (int64_t k = 0; k < n; k++) {
            T v = std::exp(xr[k * inner] - mx);
            yr[k * inner] = v;
            sum += v;
          }
          T inv = T(1) / sum;
          for (int64_t k = 0; k < n; k++) yr[k * inner] *= inv;
        }
      }
    });
  });
}

void softmax_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, int64_t outer, int64_t n,
                      int64_t inner, bool log) {
  dispatch_float(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* py = y.data<T>();
    T* pdx = dx.data<T>();
    if (inner == 1) {
      parallel_for(outer, n * cost::kExp, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; r++) {
          const T* g = pdy + r * n;
          const T* yr = py + r * n;
          T* d = pdx + r * n;
          if (log) {
            const T sum = vec::lane_sum<T>(n, [&](int64_t k) { return g[k]; });
            for (int64_t k = 0; k < n; k++) d[k] = g[k] - vec::exp(yr[k]) * sum;
          } else {
            const T dot = vec::lane_sum<T>(n, [&](int64_t k) { return g[k] * yr[k]; });
            for (int64_t k = 0; k < n; k++) d[k] = yr[k] * (g[k] - dot);
          }
        }
      });
      return;
    }
    parallel_for(outer * inner, n * cost::kExp, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; r++) {
        int64_t base = (r / inner) * n * inner + r % inner;
        const T* g = pdy + base;
        const T* yr = py + base;
        T* d = pdx + base;
        T dot = 0;
        if (log) {
          for (int64_t k = 0; k < n; k++) dot += g[k * inner];
          for (int64_t k = 0; k < n; k++) d[k * inner] = g[k * inner] - std::exp(yr[k * inner]) * dot;
        } else {
          for (int64_t k = 0; k < n; k++) dot += g[k * inner] * yr[k * inner];
          for (int64_t k = 0; k < n; k++) d[k * inner] = yr[k * inner] * (g[k * inner] - dot);
        }
      }
    });
  });
}

// ---------------------------------------------------------------- masked softmax rows
namespace {

template <class T>
void masked_softmax_rows_impl(T* p, int64_t rows, int64_t S, T scale, const uint8_t* blocked, const int64_t* row_start,
                         int64_t col_stride) {
  parallel_for(rows, S * cost::kExp, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) {
      T* x = p + r * S;
      const uint8_t* m = blocked ? blocked + row_start[r] : nullptr;
      if (!m) {  // nothing blocked: the vectorised path
        for (int64_t j = 0; j < S; j++) x[j] *= scale;
        const T mx = vec::lane_max(x, S);
        for (int64_t j = 0; j < S; j++) x[j] = vec::exp(x[j] - mx);
        const T inv = T(1) / vec::lane_sum<T>(S, [&](int64_t j) { return x[j]; });
        for (int64_t j = 0; j < S; j++) x[j] *= inv;
        continue;
      }
      auto is_blocked = [&](int64_t j) { return m[j * col_stride] != 0; };
      T mx = -std::numeric_limits<T>::infinity();
      bool any = false;
      for (int64_t j = 0; j < S; j++) {
        if (is_blocked(j)) continue;
        x[j] *= scale;
        mx = std::max(mx, x[j]);
        any = true;
      }
      if (!any) {
        std::fill(x, x + S, T(0));
        continue;
      }
      T sum = 0;
      for (int64_t j = 0; j < S; j++) {
        T w = is_blocked(j) ? T(0) : vec::exp(x[j] - mx);
        x[j] = w;
        sum += w;
      }
      const T inv = T(1) / sum;
      for (int64_t j = 0; j < S; j++) x[j] *= inv;
    }
  });
}

template <class T>
void masked_softmax_rows_backward_impl(T* d, const T* p, const T* keep, int64_t rows, int64_t S, T scale) {
  parallel_for(rows, S * cost::kRowBackward, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) {
      T* dr = d + r * S;
      const T* pr = p + r * S;
      if (keep)
        for (int64_t j = 0; j < S; j++) dr[j] *= keep[r * S + j];
      const T dot = vec::lane_sum<T>(S, [&](int64_t j) { return dr[j] * pr[j]; });
      for (int64_t j = 0; j < S; j++) dr[j] = scale * pr[j] * (dr[j] - dot);
    }
  });
}

}  // namespace

void masked_softmax_rows(float* p, int64_t rows, int64_t S, float scale, const uint8_t* blocked,
                         const int64_t* row_start, int64_t col_stride) {
  masked_softmax_rows_impl(p, rows, S, scale, blocked, row_start, col_stride);
}
void masked_softmax_rows(double* p, int64_t rows, int64_t S, double scale, const uint8_t* blocked,
                         const int64_t* row_start, int64_t col_stride) {
  masked_softmax_rows_impl(p, rows, S, scale, blocked, row_start, col_stride);
}
void masked_softmax_rows_backward(float* d, const float* p, const float* keep, int64_t rows, int64_t S, float scale) {
  masked_softmax_rows_backward_impl(d, p, keep, rows, S, scale);
}
void masked_softmax_rows_backward(double* d, const double* p, const double* keep, int64_t rows, int64_t S,
                                  double scale) {
  masked_softmax_rows_backward_impl(d, p, keep, rows, S, scale);
}

}  // namespace ember::kernel
