// Dtype dispatch and the element arithmetic every kernel shares: f(T{}) called with the
// C++ type of a tensor's dtype, int64 arithmetic that wraps as PyTorch's does, and the
// checks a scalar or a tensor passes before it becomes int64.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/tensor.h"

namespace ember {

// Refuses, by op, a bfloat16 tensor in an op that computes (bfloat16 is a storage type):
// the one message for it everywhere, with the tensor's shape when the caller has it.
[[noreturn]] inline void fail_bfloat16(const char* op, const Shape* shape = nullptr) {
  constexpr const char* what = "bfloat16 tensors hold and convert values; compute in float32 (.to(kFloat32))";
  if (shape) fail(op, what, ", got bfloat16 of shape ", *shape);
  fail(op, what);
}

// --- dtype dispatch: f(T{}) with T the C++ type of dtype. dispatch_float and
// dispatch_numeric are for ops that compute, and refuse bfloat16 (fail_bfloat16);
// dispatch_all is for kernels that move or convert elements, and gives BFloat16 too.
template <class F>
auto dispatch_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::BFloat16: fail_bfloat16(op);
    default: fail(op, "expected a float32 or float64 tensor, got ", dtype_name(dt));
  }
}
template <class F>
auto dispatch_numeric(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::BFloat16: fail_bfloat16(op);
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
    case DType::BFloat16: return f(BFloat16{});
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
// Why v (that !fits_int64) cannot become an int64, for a message: " cannot be converted ...".
inline const char* int64_refusal(double v) {
  return std::isnan(v) ? " cannot be converted to int64 (it is not a number)"
                       : " cannot be converted to int64 without overflow";
}

// A scalar as an element of type T, refused by op when T is int64 and the value does not
// fit (NaN, infinities, |v| >= 2^63) or, with `integral`, has a fraction (an int64 tensor
// does arithmetic with integers only: convert it with .to(kFloat64) first).
template <class T>
T scalar_as(double v, const char* op, bool integral) {
  if constexpr (std::is_same_v<T, int64_t>) {
    if (!fits_int64(v)) fail(op, "the value ", v, int64_refusal(v));
    if (integral && v != std::trunc(v))
      fail(op, "the scalar ", v, " is not an integer, and the tensor is int64 (convert it with .to(kFloat64) first)");
  }
  return static_cast<T>(v);
}

// Refuses, by op, a float tensor holding a value that int64 cannot hold (for a conversion).
void check_fits_int64(const Tensor& src, const char* op);

}  // namespace ember
