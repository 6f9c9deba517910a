// Finite-difference gradient checking, as a library feature.
//
// gradcheck(f, inputs) evaluates f on float64 inputs, draws a random non-uniform
// upstream gradient u of the output's shape, and compares, for every input that
// requires grad, the analytic gradient of sum(f(x) * u) (ember::grad; no .grad is
// touched) with the central difference (F(x + eps) - F(x - eps)) / (2 eps), element by
// element. Inputs may be non-contiguous views (e.g. transposed); each element is
// perturbed in place. gradgradcheck does the same one derivative higher.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember {

// Settings of gradcheck and gradgradcheck; an Error names a non-finite or out-of-range one.
struct GradcheckOptions {
  double eps = 1e-6;  // The step of the central difference (positive).
  // An element passes when |analytic - numeric| <= atol + rtol * |numeric| (both >= 0), as in
  // torch.allclose.
  ///@{
  double atol = 1e-5;
  double rtol = 1e-3;
  ///@}
  uint64_t seed = 1234;  // for the upstream gradient
};

// The result for one input that requires grad.
struct InputGradCheck {
  std::string name;  // Its label: a given name, or "input i".
  Shape shape;  // Its shape.
  bool passed = true;  // Whether every element is within the tolerance.
  // The largest absolute and relative differences between analytic and numeric gradients.
  ///@{
  double max_abs_err = 0, max_rel_err = 0;
  ///@}
  Shape worst_index;  // the element furthest outside the tolerance (or largest error)
  // The analytic and numeric gradients at the worst element.
  ///@{
  double analytic = 0, numeric = 0;
  ///@}
};

// What gradcheck and gradgradcheck found: unlike PyTorch's, which return a bool and raise
// on a mismatch, they return this report and throw only on misuse.
struct GradcheckReport {
  bool passed = true;  // Whether every input passed.
  int order = 1;  // 2 for gradgradcheck
  std::vector<InputGradCheck> inputs;  // one per input that requires grad
  GradcheckOptions options;  // The options the check ran with.
  std::string to_string() const;  // A table: a summary line, then one row per input.
};

std::ostream& operator<<(std::ostream& os, const GradcheckReport& r);  // Writes to_string().

// The function checked: the inputs in, one tensor out.
using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks f's first derivatives at inputs, as torch.autograd.gradcheck (see the top of this
// file); names, when given, label the inputs in the report (default "input 0", ...). An
// Error when an input that requires grad is not float64, not a leaf or an expanded view,
// when no input requires grad, when f's output is not float64 or depends on no such
// input, or when an option is out of range.
GradcheckReport gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {},
                          const std::vector<std::string>& names = {});

// Second derivatives, as torch.autograd.gradgradcheck: gradcheck applied to the first
// derivative G(x, u) = d<f(x), u>/dx, with u a random non-uniform upstream gradient that
// is itself an input (reported as "grad_output"). The analytic side differentiates G by
// double backward (create_graph); the numeric side takes central differences of the
// analytic first derivatives. Same report as gradcheck.
GradcheckReport gradgradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {},
                              const std::vector<std::string>& names = {});

}  // namespace ember
