// Derivatives of whole functions, built on ember::grad and double backward (as
// torch.autograd.functional). Each takes f and a point - one tensor, or several - which is
// not modified and whose .grad is not touched (f is evaluated at fresh leaves with the
// point's values). The results carry no graph (as PyTorch's without create_graph): a
// function that calls jacobian or hessian inside is a constant to an outer one. Parts of
// the output that do not depend on an input get zero derivatives. With several inputs,
// results come per input, in order.
//
//   jacobian(f, x)     f: x -> y of any shape; J [y.shape..., x.shape...],
//                      J[i..., j...] = d y[i...] / d x[j...]  (several x: one J per x)
//   hessian(f, x)      f: x -> a one-element y; H [x.shape..., x.shape...]
//                      (several x: the blocks H[a][b] = d2 y / dx_a dx_b, as PyTorch's)
//   vjp(f, x, v)       (f(x), v^T J) for v of y's shape: one backward pass
//   jvp(f, x, t)       (f(x), J t) for t of x's shape: two backward passes (the vjp is
//                      linear in v, so J t is its gradient along t), no J in memory
//   hvp(f, x, v)       (f(x), H v) for v of x's shape: two backward passes, no H in memory
//
// Each throws Error when f is empty or returns an undefined or non-float tensor, when there
// is no input or an input is undefined or not float32/float64, and when a vector (v, t)
// does not have the shape and dtype it multiplies.
#pragma once
#include <functional>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember {

// A function of one tensor, or of several, to one tensor.
///@{
using TensorFn = std::function<Tensor(const Tensor&)>;
using TensorsFn = std::function<Tensor(const std::vector<Tensor>&)>;
///@}

// The Jacobian of f at x (several x: one per input), as torch.autograd.functional.jacobian.
///@{
Tensor jacobian(const TensorFn& f, const Tensor& x);
std::vector<Tensor> jacobian(const TensorsFn& f, const std::vector<Tensor>& xs);
///@}

// The Hessian of a one-element f at x (several x: the blocks H[a][b]); an Error when f's
// value does not have exactly one element.
///@{
Tensor hessian(const TensorFn& f, const Tensor& x);
std::vector<std::vector<Tensor>> hessian(const TensorsFn& f, const std::vector<Tensor>& xs);
///@}

// (f(x), v^T J), v of the shape and dtype of f(x). Unlike PyTorch's, v is required even when
// f(x) has one element.
///@{
std::pair<Tensor, Tensor> vjp(const TensorFn& f, const Tensor& x, const Tensor& v);
std::pair<Tensor, std::vector<Tensor>> vjp(const TensorsFn& f, const std::vector<Tensor>& xs, const Tensor& v);
///@}

// (f(x), J t), t of x's shape and dtype (several x: one tangent per input, else an Error).
///@{
std::pair<Tensor, Tensor> jvp(const TensorFn& f, const Tensor& x, const Tensor& t);
std::pair<Tensor, Tensor> jvp(const TensorsFn& f, const std::vector<Tensor>& xs, const std::vector<Tensor>& ts);
///@}

// (f(x), H v) for a one-element f, v of x's shape and dtype (several x: one v per input,
// else an Error); an Error when f's value does not have exactly one element.
///@{
std::pair<Tensor, Tensor> hvp(const TensorFn& f, const Tensor& x, const Tensor& v);
std::pair<Tensor, std::vector<Tensor>> hvp(const TensorsFn& f, const std::vector<Tensor>& xs,
                                           const std::vector<Tensor>& vs);
///@}

}  // namespace ember
