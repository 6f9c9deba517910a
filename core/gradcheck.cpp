// Central-difference gradient checking with a random upstream gradient.
#include "core/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/random.h"

namespace ember {

namespace {

double weighted_sum(const Tensor& out, const std::vector<double>& u) {
  std::vector<double> v = out.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); i++) s += v[i] * u[i];
  return s;
}

// Storage offsets of every element of t, in row-major order of its shape.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offs;
  offs.reserve(t.numel());
  Shape idx(t.dim(), 0);
  for (int64_t k = 0; k < t.numel(); k++) {
    int64_t off = t.offset();
    for (int64_t d = 0; d < t.dim(); d++) off += idx[d] * t.stride(d);
    offs.push_back(off);
    for (int64_t d = t.dim() - 1; d >= 0; d--) {
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  return offs;
}

Shape unravel(int64_t k, const Shape& shape) {
  Shape idx(shape.size());
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; d--) {
    idx[d] = k % shape[d];
    k /= shape[d];
  }
  return idx;
}

}  // namespace

GradcheckReport gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt,
                          const std::vector<std::string>& names) {
  GradcheckReport report;
  report.options = opt;
  bool any = false;
  for (size_t i = 0; i < inputs.size(); i++) {
    const Tensor& x = inputs[i];
    if (!x.defined()) continue;
    if (x.requires_grad() && x.dtype() != kFloat64)
      fail("gradcheck", "input ", (int64_t)i, " is ", dtype_name(x.dtype()),
           "; finite differences need float64 inputs (use .to(kFloat64))");
    if (x.requires_grad() && !x.is_leaf())
      fail("gradcheck", "input ", (int64_t)i, " is not a leaf; pass tensors created with requires_grad_()");
    if (x.requires_grad()) {
      any = true;
      auto offs = element_offsets(x);
      std::vector<int64_t> sorted = offs;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        fail("gradcheck", "input ", (int64_t)i, " of shape ", x.shape(), " and strides ", x.strides(),
             " has elements sharing memory (an expanded view); pass a tensor that owns each element");
    }
  }
  if (!any) fail("gradcheck", "no input requires grad");

  for (const Tensor& x : inputs)
    if (x.defined()) Tensor(x).zero_grad();
  Tensor out = f(inputs);
  if (!out.defined() || out.dtype() != kFloat64)
    fail("gradcheck", "the function must return a float64 tensor, got ",
         out.defined() ? dtype_name(out.dtype()) : "an undefined tensor");
  if (!out.requires_grad()) fail("gradcheck", "the function's output does not depend on any input requiring grad");
  Generator gen(opt.seed);
  // non-uniform upstream gradient in [0.5, 1.5) with random signs
  Tensor u = uniform(out.shape(), 0.5, 1.5, kFloat64, &gen);
  Tensor sign = uniform(out.shape(), -1.0, 1.0, kFloat64, &gen);
  {
    NoGradGuard ng;
    u = where(lt(sign, 0.0), neg(u), u);
  }
  std::vector<double> uv = u.to_vector<double>();
  out.backward(u);

  NoGradGuard ng;
  for (size_t i = 0; i < inputs.size(); i++) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    InputGradCheck c;
    c.name = i < names.size() ? names[i] : cat_str("input ", i);
    c.shape = x.shape();
    std::vector<double> ana = x.grad().defined() ? x.grad().to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    double* base = static_cast<double*>(x.storage()->data);
    auto offs = element_offsets(x);
    double worst_excess = -INFINITY;
    for (int64_t k = 0; k < x.numel(); k++) {
      double& v = base[offs[k]];
      const double saved = v;
      v = saved + opt.eps;
      double fp = weighted_sum(f(inputs), uv);
      v = saved - opt.eps;
      double fm = weighted_sum(f(inputs), uv);
      v = saved;
      double num = (fp - fm) / (2 * opt.eps);
      double err = std::fabs(ana[k] - num);
      if (std::isnan(ana[k]) || std::isnan(num)) err = INFINITY;
      double rel = err / std::max(std::fabs(num), 1e-12);
      double excess = err - (opt.atol + opt.rtol * std::fabs(num));
      c.max_abs_err = std::max(c.max_abs_err, err);
      c.max_rel_err = std::max(c.max_rel_err, std::fabs(num) > opt.atol ? rel : 0.0);
      if (excess > 0) c.passed = false;
      if (excess > worst_excess) {
        worst_excess = excess;
        c.worst_index = unravel(k, x.shape());
        c.analytic = ana[k];
        c.numeric = num;
      }
    }
    if (!c.passed) report.passed = false;
    report.inputs.push_back(c);
  }
  for (const Tensor& x : inputs)
    if (x.defined()) Tensor(x).zero_grad();
  return report;
}

std::string GradcheckReport::to_string() const {
  std::ostringstream os;
  char buf[256];
  os << "gradcheck " << (passed ? "PASSED" : "FAILED") << " (float64, eps " << options.eps << ", atol "
     << options.atol << ", rtol " << options.rtol << ")\n";
  int width = 14;  // the name column fits the longest name
  for (const auto& c : inputs) width = std::max(width, (int)c.name.size());
  std::snprintf(buf, sizeof buf, "  %-*s %-16s %-6s %12s %12s  %-12s %14s %14s\n", width, "input", "shape", "result",
                "max_abs_err", "max_rel_err", "worst", "analytic", "numeric");
  os << buf;
  for (const auto& c : inputs) {
    std::snprintf(buf, sizeof buf, "  %-*s %-16s %-6s %12.3e %12.3e  %-12s %14.6e %14.6e\n", width, c.name.c_str(),
                  shape_str(c.shape).c_str(), c.passed ? "ok" : "FAIL", c.max_abs_err, c.max_rel_err,
                  shape_str(c.worst_index).c_str(), c.analytic, c.numeric);
    os << buf;
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const GradcheckReport& r) { return os << r.to_string(); }

}  // namespace ember
