// Finite-difference gradient checking, as a library feature.
//
// gradcheck(f, inputs) evaluates f on float64 inputs, draws a random non-uniform
// upstream gradient u of the output's shape, and compares, for every input that
// requires grad, the analytic gradient of sum(f(x) * u) (ember::grad; no .grad is
// touched) with the central difference (F(x + eps) - F(x - eps)) / (2 eps), element by
// element. Inputs may be non-contiguous views (e.g. transposed); each element is
// perturbed in place. gradgradcheck does the same one derivative higher.
//
// With check_forward_ad (PyTorch's gradcheck(check_forward_ad=True)), forward mode is
// checked too: for every element i of each input that requires grad, one jvp of f with
// the tangent e_i on that input (the others tangent-free) gives J e_i (core/forward_ad.h),
// and <u, J e_i> is compared with the same central difference.
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
  // Also check forward mode (gradcheck only; see the top of this file). A function that
  // reaches an op without a forward rule makes gradcheck throw, as PyTorch raises.
  bool check_forward_ad = false;
};

// Forward mode's result for one input (GradcheckOptions::check_forward_ad): <u, J e_i>
// from a jvp per element against the numeric derivative, with the same tolerances.
struct ForwardGradCheck {
  bool passed = true;  // Whether every element is within the tolerance.
  // The largest absolute and relative differences between forward-mode and numeric values.
  ///@{
  double max_abs_err = 0, max_rel_err = 0;
  ///@}
  Shape worst_index;  // the element furthest outside the tolerance (or largest error)
  // The forward-mode and numeric values at the worst element.
  ///@{
  double forward = 0, numeric = 0;
  ///@}
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
  ForwardGradCheck forward;  // forward mode's result, when options.check_forward_ad (passed otherwise)
};

// What gradcheck and gradgradcheck found: unlike PyTorch's, which return a bool and raise
// on a mismatch, they return this report and throw only on misuse.
struct GradcheckReport {
  bool passed = true;  // Whether every input passed (in forward mode too, when checked).
  int order = 1;  // 2 for gradgradcheck
  std::vector<InputGradCheck> inputs;  // one per input that requires grad
  GradcheckOptions options;  // The options the check ran with.
  // A table: a summary line, then one row per input (and one for its forward-mode check
  // after it, "<name> (forward)", when options.check_forward_ad).
  std::string to_string() const;
};

std::ostream& operator<<(std::ostream& os, const GradcheckReport& r);  // Writes to_string().

// The function checked: the inputs in, one tensor out.
using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks f's first derivatives at inputs, as torch.autograd.gradcheck (see the top of this
// file); names, when given, label the inputs in the report (default "input 0", ...). An
// Error when an input that requires grad is not float64, not a leaf or an expanded view,
// when no input requires grad, when f's output is not float64 or depends on no such
// input, or when an option is out of range; with check_forward_ad, also when a dual level
// is open already, or when f fails under forward mode (an op without a forward rule),
// the Error naming gradcheck, the input and f's own message.
GradcheckReport gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {},
                          const std::vector<std::string>& names = {});

// Second derivatives, as torch.autograd.gradgradcheck: gradcheck applied to the first
// derivative G(x, u) = d<f(x), u>/dx, with u a random non-uniform upstream gradient that
// is itself an input (reported as "grad_output"). The analytic side differentiates G by
// double backward (create_graph); the numeric side takes central differences of the
// analytic first derivatives. Same report as gradcheck. With check_forward_ad, G's forward
// mode too: its jvps run the backward inside a dual level under create_graph, so this
// checks forward over reverse (PyTorch's check_fwd_over_rev) against the same differences.
GradcheckReport gradgradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {},
                              const std::vector<std::string>& names = {});

}  // namespace ember
