// Python's operators on tensors, as PyTorch's: + - * / ** @ with a tensor or a Python
// number on either side, unary - and abs(), comparisons giving bool tensors, & | ~ on
// bool tensors, and the in-place += -= *= /= that write into the tensor (outside
// autograd, as ember's in-place ops are). An operand of another type gives
// NotImplemented, so Python raises its usual TypeError (and t == None is False).
#include "bindings.h"
#include "core/ops.h"

namespace ember::python {

namespace {


// Defines the operator for a tensor and for a number as the other operand.
template <class FT, class FS>
void both(TensorClass& cls, const char* name, FT with_tensor, FS with_number) {
  cls.def(name, with_tensor, py::is_operator(), NoGil());
  cls.def(name, with_number, py::is_operator(), NoGil());
}

// self op= other: the result of the out-of-place op (the same checks: int64 += 1.5 is
// refused as int64 + 1.5 is) written into self, which is returned.
template <class FT, class FS>
void in_place(TensorClass& cls, const char* name, FT with_tensor, FS with_number) {
  cls.def(name, [with_tensor](py::object self, const Tensor& other) {
    Tensor& t = self.cast<Tensor&>();
    t.copy_(with_tensor(t, other));
    return self;
  }, py::is_operator());
  cls.def(name, [with_number](py::object self, double s) {
    Tensor& t = self.cast<Tensor&>();
    t.copy_(with_number(t, s));
    return self;
  }, py::is_operator());
}

}  // namespace

void bind_operators(TensorClass& cls) {
  both(cls, "__add__", [](const Tensor& a, const Tensor& b) { return add(a, b); },
       [](const Tensor& a, double s) { return add(a, s); });
  both(cls, "__sub__", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
       [](const Tensor& a, double s) { return sub(a, s); });
  both(cls, "__mul__", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
       [](const Tensor& a, double s) { return mul(a, s); });
  both(cls, "__truediv__", [](const Tensor& a, const Tensor& b) { return div(a, b); },
       [](const Tensor& a, double s) { return div(a, s); });
  both(cls, "__pow__", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](const Tensor& a, double p) { return pow(a, p); });
  cls.def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, py::is_operator(), NoGil());

  // a number on the left: s + t, s - t, s * t, s / t, s ** t
  cls.def("__radd__", [](const Tensor& a, double s) { return add(a, s); }, py::is_operator(), NoGil());
  cls.def("__rsub__", [](const Tensor& a, double s) { return rsub(s, a); }, py::is_operator(), NoGil());
  cls.def("__rmul__", [](const Tensor& a, double s) { return mul(a, s); }, py::is_operator(), NoGil());
  cls.def("__rtruediv__", [](const Tensor& a, double s) { return rdiv(s, a); }, py::is_operator(), NoGil());
  cls.def("__rpow__", [](const Tensor& a, double s) { return pow(full_like(a, s), a); }, py::is_operator(), NoGil());

  cls.def("__neg__", [](const Tensor& a) { return neg(a); }, NoGil());
  cls.def("__abs__", [](const Tensor& a) { return abs(a); }, NoGil());
  cls.def("__invert__", [](const Tensor& a) { return logical_not(a); }, NoGil());
  both(cls, "__and__", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); },
       [](const Tensor& a, bool s) { return logical_and(a, full({}, s, kBool)); });
  both(cls, "__or__", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); },
       [](const Tensor& a, bool s) { return logical_or(a, full({}, s, kBool)); });

  using Compare = Tensor (*)(const Tensor&, const Tensor&);
  using CompareScalar = Tensor (*)(const Tensor&, double);
  both(cls, "__eq__", (Compare)eq, (CompareScalar)eq);
  both(cls, "__ne__", (Compare)ne, (CompareScalar)ne);
  both(cls, "__lt__", (Compare)lt, (CompareScalar)lt);
  both(cls, "__le__", (Compare)le, (CompareScalar)le);
  both(cls, "__gt__", (Compare)gt, (CompareScalar)gt);
  both(cls, "__ge__", (Compare)ge, (CompareScalar)ge);

  in_place(cls, "__iadd__", [](const Tensor& a, const Tensor& b) { return add(a, b); },
           [](const Tensor& a, double s) { return add(a, s); });
  in_place(cls, "__isub__", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
           [](const Tensor& a, double s) { return sub(a, s); });
  in_place(cls, "__imul__", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
           [](const Tensor& a, double s) { return mul(a, s); });
  in_place(cls, "__itruediv__", [](const Tensor& a, const Tensor& b) { return div(a, b); },
           [](const Tensor& a, double s) { return div(a, s); });
}

}  // namespace ember::python
