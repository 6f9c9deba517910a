// Derivatives of whole functions by forward mode (core/forward_ad.h), as torch.func: each
// opens a dual level, evaluates f once per tangent, and reads the tangent of its value.
// The point is not modified and its .grad is not touched; results carry no graph, as
// those of core/autograd_functional.h (whose jvp and hvp take two backward passes).
//
//   func::jvp(f, x, t)     (f(x), J t): one forward pass carrying t
//   func::linearize(f, x)  (f(x), v -> J v) at a fixed point
//   func::jacfwd(f, x)     J [y.shape..., x.shape...]: one forward pass per element of x
//                          (cheaper than jacobian's backward per element of y when x is
//                          smaller than y)
//   func::hvp(f, x, v)     (f(x), H v) by forward-over-reverse: the gradient, computed
//                          with create_graph inside the level, carries H v as its tangent
//   func::hessian(f, x)    H [x.shape..., x.shape...]: one forward-over-reverse pass per
//                          element of x (the blocks H[a][b] for several x)
//
// Each opens the only dual level, so an Error when one is open already (nested levels are
// not supported); an Error when f is empty or returns an undefined or non-float tensor,
// when an input is undefined or not float32/float64, when a tangent does not have its
// input's shape and dtype, and, for hvp and hessian, when f's value has not exactly one
// element. An op in f without a forward rule fails by name.
#pragma once
#include <functional>
#include <utility>
#include <vector>

#include "core/autograd_functional.h"

namespace ember::func {

// (f(x), J t) by forward mode, t of x's shape and dtype (several x: one tangent per input).
///@{
std::pair<Tensor, Tensor> jvp(const TensorFn& f, const Tensor& x, const Tensor& t);
std::pair<Tensor, Tensor> jvp(const TensorsFn& f, const std::vector<Tensor>& xs, const std::vector<Tensor>& ts);
///@}

// (f(x), v -> J v), as torch.func.linearize: the value now and a function giving the
// Jacobian-vector product at the same point for any tangent (of x's shape and dtype; several
// x: one per input). The point is copied, so later changes to x do not move it; each call
// runs f's forward once more, carrying the tangent (no graph is kept between calls).
///@{
std::pair<Tensor, std::function<Tensor(const Tensor&)>> linearize(const TensorFn& f, const Tensor& x);
std::pair<Tensor, std::function<Tensor(const std::vector<Tensor>&)>> linearize(const TensorsFn& f,
                                                                              const std::vector<Tensor>& xs);
///@}

// The Jacobian of f at x by forward mode, as torch.func.jacfwd (several x: one per input).
///@{
Tensor jacfwd(const TensorFn& f, const Tensor& x);
std::vector<Tensor> jacfwd(const TensorsFn& f, const std::vector<Tensor>& xs);
///@}

// (f(x), H v) for a one-element f by forward-over-reverse (several x: one v per input).
///@{
std::pair<Tensor, Tensor> hvp(const TensorFn& f, const Tensor& x, const Tensor& v);
std::pair<Tensor, std::vector<Tensor>> hvp(const TensorsFn& f, const std::vector<Tensor>& xs,
                                           const std::vector<Tensor>& vs);
///@}

// The Hessian of a one-element f by forward-over-reverse, as torch.func.hessian (several x:
// the blocks H[a][b] = d2 y / dx_a dx_b).
///@{
Tensor hessian(const TensorFn& f, const Tensor& x);
std::vector<std::vector<Tensor>> hessian(const TensorsFn& f, const std::vector<Tensor>& xs);
///@}

}  // namespace ember::func
