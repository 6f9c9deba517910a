// Elementwise kernels over strided tensors: the strided machinery, the map helpers the
// elementwise ops are written with, copies, fill, in-place add, the finiteness check,
// and the row offsets of a strided tensor.
//
// The strided machinery: for_each_strided walks N operands that share one shape, each
// with its own strides (0 for a broadcast dim), after merging dims that are contiguous
// in all operands, and calls body(offsets, count, inner_strides) for runs along the
// innermost dim. Runs are handed out to threads; the body must only touch its run.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/kernels/dispatch.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace ember::kernel {

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

// True when every element of a float tensor is finite.
bool all_finite(const Tensor& t);

// Element offset of the start of every row (all dims but the last) of a strided tensor t,
// rows in row-major order.
std::vector<int64_t> row_starts(const Tensor& t);

}  // namespace ember::kernel
