// Shape helpers: printing a shape, element counts (checked against the largest tensor),
// row-major strides, negative dims, broadcasting.
#include "core/shape.h"

#include <algorithm>
#include <ostream>
#include <string>

#include "core/error.h"

namespace ember {

// ---------------------------------------------------------------- shape helpers
std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); i++) {
    if (i) r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t checked_numel(const Shape& shape, const char* op) {
  // The product leaves zeros out: a tensor of no elements still gets strides, and a view
  // of it an offset, both bounded by that product.
  bool zero = false;
  for (int64_t s : shape) {
    if (s < 0) fail(op, "sizes must be non-negative, got ", shape);
    zero = zero || s == 0;
  }
  int64_t n = 1;
  for (int64_t s : shape)
    if (s > 0 && (__builtin_mul_overflow(n, s, &n) || n > kMaxElements))
      fail(op, "a tensor of shape ", shape,
           zero ? " has sizes whose product (zeros aside) exceeds 2^56" : " would have more than 2^56 elements");
  return zero ? 0 : n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; d--) {
    st[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  if (dim < lo || dim > hi)
    fail(op, "dim ", dim, " is out of range for a tensor of ", ndim, " dims (expected a dim in [", lo,
         ", ", hi, "])");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

int64_t wrap_indexed_dim(int64_t dim, int64_t ndim, const char* op) {
  if (ndim == 0) fail(op, "dim ", dim, " is out of range for a tensor of 0 dims (it has no size or stride to index)");
  return wrap_dim(dim, ndim, op);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; i++) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(op, "shapes ", a, " and ", b, " cannot be broadcast together (dim ", (int64_t)i, ": ", da,
           " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  checked_numel(out, op);
  return out;
}

}  // namespace ember
