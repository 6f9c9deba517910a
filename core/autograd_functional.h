// Derivatives of whole functions, built on ember::grad and double backward (as
// torch.autograd.functional). Each takes f and a point x; x is not modified and its
// .grad is not touched (f is evaluated at a fresh leaf with x's values).
//
//   jacobian(f, x)    f: x -> y of any shape;   returns J [y.shape..., x.shape...],
//                     J[i..., j...] = d y[i...] / d x[j...]
//   hessian(f, x)     f: x -> a one-element y;  returns H [x.shape..., x.shape...]
//   hvp(f, x, v)      f as for hessian, v of x's shape; returns H v [x.shape...], with
//                     two backward passes and no H in memory
//
// Parts of the output that do not depend on x get zero derivatives.
#pragma once
#include <functional>

#include "core/tensor.h"

namespace ember {

using TensorFn = std::function<Tensor(const Tensor&)>;

Tensor jacobian(const TensorFn& f, const Tensor& x);
Tensor hessian(const TensorFn& f, const Tensor& x);
Tensor hvp(const TensorFn& f, const Tensor& x, const Tensor& v);

}  // namespace ember
