// Differentiable ops of your own, as torch.autograd.Function: a forward that computes the
// output from the inputs, and a backward that maps the gradient of the output to one
// gradient per input. Both are plain functions (lambdas may capture parameters).
//
//   // y = x^3, dy/dx = 3 x^2
//   const Function cube{
//       .name = "cube",
//       .forward = [](FunctionCtx& ctx, const std::vector<Tensor>& in) {
//         ctx.save_for_backward({in[0]});
//         return mul(square(in[0]), in[0]);
//       },
//       .backward = [](FunctionCtx& ctx, const Tensor& grad) {
//         Tensor x = ctx.saved_tensors()[0];
//         return std::vector<Tensor>{mul(grad, mul(square(x), 3.0))};
//       }};
//   Tensor y = cube.apply({x});
//
// The forward runs with grad mode off: the ops in it record nothing. The backward is
// written with ops; under create_graph it runs with grad mode on and the saved inputs and
// output come back attached to the graph, so a backward written with differentiable ops
// can itself be differentiated (gradgradcheck checks it). A saved intermediate comes back
// as data only: nothing flows through it in a double backward, as in PyTorch.
//
// Forward mode (core/forward_ad.h) goes through a Function only by its optional jvp rule:
// the tangents of the inputs to the output's, written with ops (the forward itself runs
// on the primals and propagates nothing). Without one, a tangent reaching the Function is
// an Error naming it.
//
// The conventions of built-in ops apply: errors name the function; anomaly mode checks
// the forward's output and the backward's gradients for NaN and Inf and names the function
// and the line that applied it; an input or output saved for the backward and modified in
// place before it runs makes the backward an error.
#pragma once
#include <any>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/autograd.h"

namespace ember {

// What a Function's forward hands its backward, as PyTorch's ctx.
class FunctionCtx {
 public:
  // In forward: the tensors the backward will read (inputs, the output, intermediates).
  void save_for_backward(std::vector<Tensor> tensors);
  // In backward: those tensors, in the order saved.
  std::vector<Tensor> saved_tensors() const;
  // Whether input i needs a gradient (the backward may skip the others: undefined).
  bool needs_input_grad(size_t i) const { return i < needs_.size() && needs_[i]; }
  // Other values the backward needs, by name (ctx.saved_data["scale"] = 2.0).
  std::unordered_map<std::string, std::any> saved_data;

 private:
  friend struct Function;
  std::vector<Tensor> to_save_;
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_;
};

// A differentiable op made of a forward and a backward (see the top of this file). Unlike
// torch.autograd.Function, it is a value, not a class to derive from, and forward returns
// one tensor.
struct Function {
  std::string name;  // The name errors and anomaly mode report.
  // The inputs to the output, run with grad mode off.
  std::function<Tensor(FunctionCtx& ctx, const std::vector<Tensor>& inputs)> forward;
  // One gradient per input, of its shape and dtype; undefined where there is none.
  std::function<std::vector<Tensor>(FunctionCtx& ctx, const Tensor& grad_output)> backward;
  // Optional, for forward mode: the output's tangent (of its shape and dtype; undefined
  // for zero) from the inputs and their tangents (undefined where an input has none), with
  // ctx.saved_data as forward left it. Run with grad mode as it is.
  std::function<Tensor(FunctionCtx& ctx, const std::vector<Tensor>& inputs, const std::vector<Tensor>& tangents)>
      jvp;

  // Runs forward on the inputs and, when grad mode is on and some input requires grad,
  // records a node whose backward is `backward`. An Error when forward or backward is
  // empty, forward returns an undefined tensor, or backward returns the wrong number of
  // gradients or one whose shape or dtype differs from its input's, or jvp a tangent whose
  // shape or dtype differs from the output's.
  Tensor apply(const std::vector<Tensor>& inputs, Loc loc = Loc::current()) const;
};

}  // namespace ember
