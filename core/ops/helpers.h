// Checks shared by the op files in core/ops/ (internal: not installed, not for users).
// Each throws the op's Error, naming the dtypes and shapes it received.
#pragma once
#include "core/kernels/dispatch.h"
#include "core/ops.h"

namespace ember::ops_detail {

inline void same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    fail(op, "expected both operands to have the same dtype, got ", dtype_name(a.dtype()), " ", a.shape(), " and ",
         dtype_name(b.dtype()), " ", b.shape(), " (convert one with .to())");
}

// An op that computes on float and int64 tensors alike (dispatch_numeric refuses the rest):
// bfloat16 refused here, with its shape.
inline void need_computing(const char* op, const Tensor& a) {
  if (a.dtype() == kBFloat16) fail_bfloat16(op, &a.shape());
}

inline void need_float(const char* op, const Tensor& a) {
  if (a.dtype() == kBFloat16) fail_bfloat16(op, &a.shape());
  if (!is_computing_float(a.dtype()))
    fail(op, "expected a float32 or float64 tensor, got ", dtype_name(a.dtype()), " of shape ", a.shape());
}

}  // namespace ember::ops_detail
