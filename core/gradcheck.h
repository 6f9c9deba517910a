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

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 1234;  // for the upstream gradient
};

struct InputGradCheck {
  std::string name;
  Shape shape;
  bool passed = true;
  double max_abs_err = 0, max_rel_err = 0;
  Shape worst_index;          // the element furthest outside the tolerance (or largest error)
  double analytic = 0, numeric = 0;  // at the worst element
};

struct GradcheckReport {
  bool passed = true;
  int order = 1;  // 2 for gradgradcheck
  std::vector<InputGradCheck> inputs;  // one per input that requires grad
  GradcheckOptions options;
  std::string to_string() const;
};

std::ostream& operator<<(std::ostream& os, const GradcheckReport& r);

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// names, when given, label the inputs in the report (default "input 0", ...).
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
