// Raw kernels, separate from autograd: strided loops over typed pointers, BLAS calls,
// and the fused row kernels (softmax). Ops in core/ops/ call these and attach gradients.
//
// The strided machinery: for_each_strided walks N operands that share one shape, each
// with its own strides (0 for a broadcast dim), after merging dims that are contiguous
// in all operands, and calls body(offsets, count, inner_strides) for runs along the
// innermost dim. Runs are handed out to threads; the body must only touch its run.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/kernels/gemm.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace ember {

// --- dtype dispatch: f(T{}) with T the C++ type of dtype
template <class F>
auto dispatch_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    default: fail(op, "expected a float32 or float64 tensor, got ", dtype_name(dt));
  }
}
template <class F>
auto dispatch_numeric(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    default: fail(op, "expected a float32, float64 or int64 tensor, got ", dtype_name(dt));
  }
}
template <class F>
auto dispatch_all(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::Bool: return f(uint8_t{});
  }
  return f(uint8_t{});
}

// Integer arithmetic wraps around modulo 2^64, as PyTorch's int64 does (signed overflow
// would be undefined); float arithmetic is plain.
template <class T>
T wrapping_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) return T(uint64_t(a) + uint64_t(b));
  else return a + b;
}
template <class T>
T wrapping_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) return T(uint64_t(a) - uint64_t(b));
  else return a - b;
}
template <class T>
T wrapping_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) return T(uint64_t(a) * uint64_t(b));
  else return a * b;
}

// Whether v converts to int64 without overflow (finite and in [-2^63, 2^63)).
inline bool fits_int64(double v) { return v >= -0x1p63 && v < 0x1p63; }

// A scalar as an element of type T, refused by op when T is int64 and the value does not
// fit (NaN, infinities, |v| >= 2^63) or, with `integral`, has a fraction (an int64 tensor
// does arithmetic with integers only: convert it with .to(kFloat64) first).
template <class T>
T scalar_as(double v, const char* op, bool integral) {
  if constexpr (std::is_same_v<T, int64_t>) {
    if (!fits_int64(v)) fail(op, "the value ", v, " cannot be converted to int64 without overflow");
    if (integral && v != std::trunc(v))
      fail(op, "the scalar ", v, " is not an integer, and the tensor is int64 (convert it with .to(kFloat64) first)");
  }
  return static_cast<T>(v);
}

// Refuses, by op, a float tensor holding a value that int64 cannot hold (for a conversion).
void check_fits_int64(const Tensor& src, const char* op);

namespace kernel {

// Merges dims of `shape` that are contiguous in every operand and drops size-1 dims.
template <size_t N>
void coalesce(Shape& shape, std::array<Shape, N>& st) {
  Shape s2;
  std::array<Shape, N> st2;
  for (size_t d = 0; d < shape.size(); d++) {
    if (shape[d] == 1) continue;
    if (!s2.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; k++)
        if (st2[k].back() != st[k][d] * shape[d]) merge = false;
      if (merge) {
        s2.back() *= shape[d];
        for (size_t k = 0; k < N; k++) st2[k].back() = st[k][d];
        continue;
      }
    }
    s2.push_back(shape[d]);
    for (size_t k = 0; k < N; k++) st2[k].push_back(st[k][d]);
  }
  if (s2.empty()) {
    s2.push_back(1);
    for (size_t k = 0; k < N; k++) st2[k].push_back(0);
  }
  shape = std::move(s2);
  st = std::move(st2);
}

// Walks flat indices [begin, end) of a coalesced iteration space in runs along the last dim.
template <size_t N, class Body>
void walk_range(const Shape& shape, const std::array<Shape, N>& st, int64_t begin, int64_t end,
                Body& body) {
  const int64_t nd = (int64_t)shape.size();
  const int64_t inner = shape[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  int64_t rem = begin;
  for (int64_t d = nd - 1; d >= 0; d--) {
    idx[d] = rem % shape[d];
    rem /= shape[d];
  }
  std::array<int64_t, N> off{}, in{};
  for (size_t k = 0; k < N; k++) {
    in[k] = st[k][nd - 1];
    for (int64_t d = 0; d < nd; d++) off[k] += idx[d] * st[k][d];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = std::min(inner - idx[nd - 1], end - pos);
    body(off.data(), n, in.data());
    pos += n;
    if (pos >= end) break;
    // advance: the last dim wraps to 0, carry into outer dims
    for (size_t k = 0; k < N; k++) off[k] -= idx[nd - 1] * st[k][nd - 1];
    idx[nd - 1] = 0;
    for (int64_t d = nd - 2; d >= 0; d--) {
      idx[d]++;
      for (size_t k = 0; k < N; k++) off[k] += st[k][d];
      if (idx[d] < shape[d]) break;
      for (size_t k = 0; k < N; k++) off[k] -= idx[d] * st[k][d];
      idx[d] = 0;
    }
  }
}

template <size_t N, class Body>
void for_each_strided(Shape shape, std::array<Shape, N> st, Body body, int64_t cost = 1) {
  int64_t n = numel_of(shape);
  if (n == 0) return;
  coalesce<N>(shape, st);
  parallel_for(n, cost, [&](int64_t b, int64_t e) { walk_range<N>(shape, st, b, e, body); });
}

// out[i] = op(a[i]); out and a share out's shape (a may carry broadcast strides).
template <class To, class Ta, class Op>
void map1(const Tensor& out, const Tensor& a, Op op) {
  To* po = out.data<To>();
  const Ta* pa = a.data<Ta>();
  for_each_strided<2>(out.shape(), {out.strides(), a.strides()},
                      [&](const int64_t* off, int64_t n, const int64_t* s) {
                        To* o = po + off[0];
                        const Ta* x = pa + off[1];
                        if (s[0] == 1 && s[1] == 1)
                          for (int64_t i = 0; i < n; i++) o[i] = op(x[i]);
                        else
                          for (int64_t i = 0; i < n; i++) o[i * s[0]] = op(x[i * s[1]]);
                      });
}

// out[i] = op(a[i], b[i])
template <class To, class Ta, class Tb, class Op>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  To* po = out.data<To>();
  const Ta* pa = a.data<Ta>();
  const Tb* pb = b.data<Tb>();
  for_each_strided<3>(out.shape(), {out.strides(), a.strides(), b.strides()},
                      [&](const int64_t* off, int64_t n, const int64_t* s) {
                        To* o = po + off[0];
                        const Ta* x = pa + off[1];
                        const Tb* y = pb + off[2];
                        if (s[0] == 1 && s[1] == 1 && s[2] == 1)
                          for (int64_t i = 0; i < n; i++) o[i] = op(x[i], y[i]);
                        else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
                          const Tb yy = *y;
                          for (int64_t i = 0; i < n; i++) o[i] = op(x[i], yy);
                        } else
                          for (int64_t i = 0; i < n; i++) o[i * s[0]] = op(x[i * s[1]], y[i * s[2]]);
                      });
}

// out[i] = op(a[i], b[i], c[i])
template <class To, class Ta, class Tb, class Tc, class Op>
void map3(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, Op op) {
  To* po = out.data<To>();
  const Ta* pa = a.data<Ta>();
  const Tb* pb = b.data<Tb>();
  const Tc* pc = c.data<Tc>();
  for_each_strided<4>(out.shape(), {out.strides(), a.strides(), b.strides(), c.strides()},
                      [&](const int64_t* off, int64_t n, const int64_t* s) {
                        To* o = po + off[0];
                        const Ta* x = pa + off[1];
                        const Tb* y = pb + off[2];
                        const Tc* z = pc + off[3];
                        for (int64_t i = 0; i < n; i++) o[i * s[0]] = op(x[i * s[1]], y[i * s[2]], z[i * s[3]]);
                      });
}

// Copies src into dst (same shape; src may be broadcast), converting the element type.
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);
// dst += src, elementwise (dst contiguous, same shape)
void add_inplace(const Tensor& dst, const Tensor& src);

// A bias gradient's sum over rows, out [cols] = sum over r of x [rows, cols] (both
// contiguous, float), in the blocks of columns sum over dim 0 runs in (the same bits):
// sum_rows_blocks(cols) of them, block b by sum_rows_block, for running among other work.
int64_t sum_rows_blocks(int64_t cols);
void sum_rows_block(const Tensor& out, const Tensor& x, int64_t block);

// Reduction of x over the dims where reduce[d] is true. Kinds: sum, max, min.
// Returns a contiguous tensor shaped like x with reduced dims removed. Float sums
// accumulate in double, in chunks of fixed size combined in a fixed order.
enum class ReduceKind { Sum, Max, Min };
Tensor reduce(const Tensor& x, const std::vector<bool>& reduce, ReduceKind kind);
// Index (along `dim`) of the first max (or min) element; x contiguous.
Tensor arg_reduce(const Tensor& x, int64_t dim, bool is_max);

// Softmax along a dim of a contiguous tensor viewed as [outer, n, inner].
void softmax_forward(const Tensor& y, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log);
// dx = y * (dy - sum(dy * y))  (softmax)  or  dx = dy - exp(y) * sum(dy)  (log_softmax)
void softmax_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, int64_t outer, int64_t n,
                      int64_t inner, bool log);

// out[.., i, ..] = x[.., index[i], ..] along dim; x contiguous, index int64 1-D.
void index_select(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index);
// gx[.., index[i], ..] += g[.., i, ..]; gx zero-filled contiguous.
void index_add(const Tensor& gx, int64_t dim, const Tensor& index, const Tensor& g);
// out[i][j][k] = x[i][index[i][j][k]][k] (dim = 1); all contiguous.
void gather(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index);
// gx[i][index[i][j][k]][k] += g[i][j][k]
void scatter_add(const Tensor& gx, int64_t dim, const Tensor& index, const Tensor& g);

// True when every element of a float tensor is finite.
bool all_finite(const Tensor& t);

// Element offset of the start of every row (all dims but the last) of a strided tensor t,
// rows in row-major order.
std::vector<int64_t> row_starts(const Tensor& t);

// p [rows, S]: on entry raw scores, on exit softmax(scale * p) per row with blocked
// entries 0, and a row of zeros where every entry is blocked. Row r is blocked at column j
// where blocked[row_start[r] + j * col_stride] != 0 (nothing blocked when blocked is null).
// Attention's weights.
void masked_softmax_rows(float* p, int64_t rows, int64_t S, float scale, const uint8_t* blocked,
                         const int64_t* row_start, int64_t col_stride);
void masked_softmax_rows(double* p, int64_t rows, int64_t S, double scale, const uint8_t* blocked,
                         const int64_t* row_start, int64_t col_stride);
// d [rows, S]: on entry the gradient of the weights after dropout (dPd), on exit the
// gradient of the raw scores: dP = dPd * keep (keep null: no dropout), then
// dS = scale * P * (dP - sum_j dP_j P_j), with p [rows, S] the weights before dropout.
void masked_softmax_rows_backward(float* d, const float* p, const float* keep, int64_t rows, int64_t S, float scale);
void masked_softmax_rows_backward(double* d, const double* p, const double* keep, int64_t rows, int64_t S,
                                  double scale);

}  // namespace kernel
}  // namespace ember
