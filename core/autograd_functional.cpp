// jacobian, hessian and hvp: one backward per output element, or two for a product.
#include "core/autograd_functional.h"

#include "core/autograd.h"
#include "core/ops.h"

namespace ember {

namespace {

Tensor fresh_leaf(const char* op, const Tensor& x) {
  check_defined(x, op, "x");
  if (!is_floating(x.dtype()))
    fail(op, "expected a float32 or float64 x, got ", dtype_name(x.dtype()), " of shape ", x.shape());
  return x.detach().clone().requires_grad_();
}

Tensor value_of(const char* op, const TensorFn& f, const Tensor& x) {
  if (!f) fail(op, "got an empty function");
  Tensor y = f(x);
  if (!y.defined()) fail(op, "the function returned an undefined tensor");
  if (!is_floating(y.dtype()))
    fail(op, "the function returned a tensor of dtype ", dtype_name(y.dtype()), " and shape ", y.shape(),
         "; expected float32 or float64 (only a float value has a derivative)");
  return y;
}

Tensor one_element(const char* op, const TensorFn& f, const Tensor& x) {
  Tensor y = value_of(op, f, x);
  if (y.numel() != 1)
    fail(op, "expected the function to return one element (a scalar loss), got shape ", y.shape());
  return y;
}

// The rows d y[i] / d x for every element i of y, stacked: [y.shape..., x.shape...].
Tensor rows_of(const Tensor& y, const Tensor& x) {
  Shape s = y.shape();
  s.insert(s.end(), x.shape().begin(), x.shape().end());
  Tensor J = zeros(s, x.dtype());
  if (!y.requires_grad()) return J;
  Tensor flat = J.view({y.numel(), x.numel()});
  for (int64_t i = 0; i < y.numel(); i++) {
    Tensor e = zeros({y.numel()}, y.dtype());
    e.select(0, i).fill_(1.0);
    std::vector<Tensor> g = grad({y}, {x}, {e.view(y.shape())}, {.retain_graph = true, .allow_unused = true});
    if (g[0].defined()) flat.select(0, i).copy_(g[0].detach().reshape({x.numel()}));
  }
  return J;
}

}  // namespace

Tensor jacobian(const TensorFn& f, const Tensor& x) {
  check_defined(x, "jacobian", "the input");
  const char* op = "jacobian";
  Tensor xl = fresh_leaf(op, x);
  GradModeGuard on(true);
  return rows_of(value_of(op, f, xl), xl);
}

Tensor hessian(const TensorFn& f, const Tensor& x) {
  check_defined(x, "hessian", "the input");
  const char* op = "hessian";
  Tensor xl = fresh_leaf(op, x);
  GradModeGuard on(true);
  Tensor y = one_element(op, f, xl);
  Tensor g;
  if (y.requires_grad()) g = grad({y}, {xl}, {}, {.create_graph = true, .allow_unused = true})[0];
  if (!g.defined()) g = zeros(x.shape(), x.dtype());
  return rows_of(g, xl);
}

Tensor hvp(const TensorFn& f, const Tensor& x, const Tensor& v) {
  check_defined(x, "hvp", "x");
  check_defined(v, "hvp", "v");
  const char* op = "hvp";
  Tensor xl = fresh_leaf(op, x);
  if (!v.defined() || v.shape() != x.shape() || v.dtype() != x.dtype())
    fail(op, "expected v of x's shape ", x.shape(), " and dtype ", dtype_name(x.dtype()), ", got ",
         v.defined() ? cat_str("shape ", shape_str(v.shape()), " and dtype ", dtype_name(v.dtype()))
                     : std::string("an undefined tensor"));
  GradModeGuard on(true);
  Tensor y = one_element(op, f, xl);
  if (!y.requires_grad()) return zeros(x.shape(), x.dtype());
  Tensor g = grad({y}, {xl}, {}, {.create_graph = true, .allow_unused = true})[0];
  if (!g.defined() || !g.requires_grad()) return zeros(x.shape(), x.dtype());
  Tensor hv = grad({g}, {xl}, {v.detach()}, {.allow_unused = true})[0];
  return hv.defined() ? hv.detach() : zeros(x.shape(), x.dtype());
}

}  // namespace ember
