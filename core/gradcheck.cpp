// Central-difference gradient checking with a random upstream gradient.
#include "core/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
#include "core/forward_ad.h"
#include "core/ops.h"
#include "core/random.h"

namespace ember {

namespace {

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

// How far one side (the analytic gradient, or forward mode's values) is from the numeric
// derivatives, element by element: the largest errors and the element furthest outside
// the tolerance.
struct Tally {
  bool passed = true;
  double max_abs_err = 0, max_rel_err = 0;
  double worst_excess = -INFINITY;
  int64_t worst = -1;  // none yet
  double value = 0, numeric = 0;  // at the worst element

  void add(int64_t k, double v, double num, const GradcheckOptions& opt) {
    // a derivative that is not finite on either side cannot be checked: it fails
    const bool finite = std::isfinite(v) && std::isfinite(num);
    const double err = finite ? std::fabs(v - num) : INFINITY;
    const double rel = err / std::max(std::fabs(num), 1e-12);
    const double excess = finite ? err - (opt.atol + opt.rtol * std::fabs(num)) : INFINITY;
    max_abs_err = std::max(max_abs_err, err);
    max_rel_err = std::max(max_rel_err, std::fabs(num) > opt.atol ? rel : 0.0);
    if (excess > 0) passed = false;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = k;
      value = v;
      numeric = num;
    }
  }
};

}  // namespace

namespace {

using MultiFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// The float64 leaves that require grad must own each of their elements.
void check_inputs(const char* op, const std::vector<Tensor>& inputs) {
  bool any = false;
  for (size_t i = 0; i < inputs.size(); i++) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    if (x.dtype() != kFloat64)
      fail(op, "input ", (int64_t)i, " is ", dtype_name(x.dtype()),
           "; finite differences need float64 inputs (use .to(kFloat64))");
    if (!x.is_leaf()) fail(op, "input ", (int64_t)i, " is not a leaf; pass tensors created with requires_grad_()");
    auto offs = element_offsets(x);
    std::sort(offs.begin(), offs.end());
    if (std::adjacent_find(offs.begin(), offs.end()) != offs.end())
      fail(op, "input ", (int64_t)i, " of shape ", x.shape(), " and strides ", x.strides(),
           " has elements sharing memory (an expanded view); pass a tensor that owns each element");
    any = true;
  }
  if (!any) fail(op, "no input requires grad");
}

// Random non-uniform weights in +-[0.5, 1.5) of the given shape.
Tensor upstream(const Shape& shape, Generator& gen) {
  NoGradGuard ng;
  Tensor u = uniform(shape, 0.5, 1.5, kFloat64, &gen);
  Tensor sign = uniform(shape, -1.0, 1.0, kFloat64, &gen);
  return where(lt(sign, 0.0), neg(u), u);
}

// Checks the derivative of F(x) = sum_j <f(x)_j, u_j>, u random, with respect to every
// input that requires grad: analytic (ember::grad) against central differences.
// With opt.check_forward_ad, forward mode too: <u, J e_k> from one jvp per element k.
GradcheckReport check_derivatives(const char* op, const MultiFn& f, const std::vector<Tensor>& inputs,
                                  const GradcheckOptions& opt, const std::vector<std::string>& names) {
  if (!(std::isfinite(opt.eps) && opt.eps > 0)) fail(op, "eps must be positive and finite, got ", opt.eps);
  if (!(std::isfinite(opt.atol) && opt.atol >= 0)) fail(op, "atol must be non-negative and finite, got ", opt.atol);
  if (!(std::isfinite(opt.rtol) && opt.rtol >= 0)) fail(op, "rtol must be non-negative and finite, got ", opt.rtol);
  check_inputs(op, inputs);
  GradcheckReport report;
  report.options = opt;
  std::vector<Tensor> outs = f(inputs);
  Generator gen(opt.seed);
  std::vector<Tensor> us;
  std::vector<std::vector<double>> uv;
  std::vector<Tensor> diff_outs, diff_us, wrt;
  for (const Tensor& o : outs) {
    if (!o.defined() || o.dtype() != kFloat64)
      fail(op, "the function must return float64 tensors, got ",
           o.defined() ? dtype_name(o.dtype()) : "an undefined tensor");
    us.push_back(upstream(o.shape(), gen));
    uv.push_back(us.back().to_vector<double>());
    if (o.requires_grad()) {
      diff_outs.push_back(o);
      diff_us.push_back(us.back());
    }
  }
  if (diff_outs.empty()) fail(op, "the function's output does not depend on any input requiring grad");
  for (const Tensor& x : inputs)
    if (x.defined() && x.requires_grad()) wrt.push_back(x);
  std::vector<Tensor> analytic = grad(diff_outs, wrt, diff_us, {.allow_unused = true});
  // sum_j <o_j, u_j>; an undefined o_j (a zero tangent) adds nothing
  auto weighted = [&](const std::vector<Tensor>& o) {
    double s = 0;
    for (size_t j = 0; j < o.size(); j++) {
      if (!o[j].defined()) continue;
      std::vector<double> v = o[j].to_vector<double>();
      for (size_t i = 0; i < v.size(); i++) s += v[i] * uv[j][i];
    }
    return s;
  };

  NoGradGuard ng;  // the finite differences and jvps need values only
  if (opt.check_forward_ad && dual_level_open())
    fail(op, "check_forward_ad opens dual levels of its own, but one is open already; close it first");
  size_t w = 0;
  for (size_t i = 0; i < inputs.size(); i++) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    InputGradCheck c;
    c.name = i < names.size() ? names[i] : cat_str("input ", i);
    c.shape = x.shape();
    const Tensor& a = analytic[w++];
    std::vector<double> ana = a.defined() ? a.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    double* base = static_cast<double*>(x.storage()->data);
    auto offs = element_offsets(x);
    Tally reverse, forward;
    // <u, J e_k>: f once, in a level of its own, with the tangent e_k on input i and the
    // others tangent-free. The tangent is set on the input itself rather than on a
    // make_dual view of it, so that a function reaching the input by another route (a
    // module's parameter, as the gradcheck program's cases do) sees it too, as the
    // finite differences do.
    auto jvp = [&](int64_t k) {
      Tensor e = zeros(x.shape(), kFloat64);
      e.data<double>()[k] = 1.0;  // contiguous: k is the row-major index
      DualLevel level;
      std::vector<Tensor> tangents;
      try {
        forward_detail::set_tangent(x, e);
        for (const Tensor& o : f(inputs)) tangents.push_back(unpack_dual(o).tangent);
      } catch (const Error& err) {
        fail(op, "checking forward mode (check_forward_ad) for ", c.name, ": ", err.what());
      }
      return weighted(tangents);
    };
    for (int64_t k = 0; k < x.numel(); k++) {
      double& v = base[offs[k]];
      const double saved = v;
      struct Restore {  // the input as it was, also when f throws
        double& v;
        double saved;
        ~Restore() { v = saved; }
      } restore{v, saved};
      v = saved + opt.eps;
      double fp = weighted(f(inputs));
      v = saved - opt.eps;
      double fm = weighted(f(inputs));
      v = saved;
      const double num = (fp - fm) / (2 * opt.eps);
      reverse.add(k, ana[k], num, opt);
      if (opt.check_forward_ad) forward.add(k, jvp(k), num, opt);
    }
    c.passed = reverse.passed;
    c.max_abs_err = reverse.max_abs_err;
    c.max_rel_err = reverse.max_rel_err;
    if (reverse.worst >= 0) c.worst_index = unravel(reverse.worst, x.shape());
    c.analytic = reverse.value;
    c.numeric = reverse.numeric;
    ForwardGradCheck& fc = c.forward;
    fc.passed = forward.passed;
    fc.max_abs_err = forward.max_abs_err;
    fc.max_rel_err = forward.max_rel_err;
    if (forward.worst >= 0) fc.worst_index = unravel(forward.worst, x.shape());
    fc.forward = forward.value;
    fc.numeric = forward.numeric;
    if (!c.passed || !fc.passed) report.passed = false;
    report.inputs.push_back(c);
  }
  return report;
}

}  // namespace

GradcheckReport gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt,
                          const std::vector<std::string>& names) {
  const char* op = "gradcheck";
  return check_derivatives(op, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; }, inputs,
                           opt, names);
}

GradcheckReport gradgradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& opt, const std::vector<std::string>& names) {
  const char* op = "gradgradcheck";
  check_inputs(op, inputs);
  std::vector<size_t> wrt;
  for (size_t i = 0; i < inputs.size(); i++)
    if (inputs[i].defined() && inputs[i].requires_grad()) wrt.push_back(i);
  Tensor out;
  {
    GradModeGuard on(true);
    out = f(inputs);
  }
  if (!out.defined() || out.dtype() != kFloat64)
    fail(op, "the function must return a float64 tensor, got ",
         out.defined() ? dtype_name(out.dtype()) : "an undefined tensor");
  if (!out.requires_grad()) fail(op, "the function's output does not depend on any input requiring grad");
  // the upstream gradient of f is an input of the first derivative too
  Generator gen(opt.seed ^ 0x9e3779b97f4a7c15ULL);
  Tensor u = upstream(out.shape(), gen).requires_grad_();
  std::vector<Tensor> all = inputs;
  all.push_back(u);
  std::vector<std::string> all_names;
  for (size_t i = 0; i < inputs.size(); i++) all_names.push_back(i < names.size() ? names[i] : cat_str("input ", i));
  all_names.push_back("grad_output");
  // G(x, u) = the gradients of <f(x), u> with respect to x: recorded when grad mode is on
  // (the analytic second derivatives) or a dual level is open (check_forward_ad's jvps:
  // forward over reverse, the backward's ops carrying the tangents), values only otherwise
  // (the finite differences)
  auto first = [&](const std::vector<Tensor>& in) {
    const bool record = grad_enabled() || dual_level_open();
    GradModeGuard on(true);
    std::vector<Tensor> xs(in.begin(), in.end() - 1), targets;
    for (size_t i : wrt) targets.push_back(xs[i]);
    std::vector<Tensor> g = grad({f(xs)}, targets, {in.back()}, {.create_graph = record, .allow_unused = true});
    for (size_t j = 0; j < g.size(); j++)
      if (!g[j].defined()) g[j] = zeros(targets[j].shape(), kFloat64);
    return g;
  };
  GradcheckReport r = check_derivatives(op, [&](const std::vector<Tensor>& in) {
    const bool keep = grad_enabled() || dual_level_open();  // a graph, or tangents, to keep
    std::vector<Tensor> g = first(in);
    if (!keep)
      for (Tensor& t : g) t = t.detach();
    return g;
  }, all, opt, all_names);
  r.order = 2;
  return r;
}

std::string GradcheckReport::to_string() const {
  std::ostringstream os;
  char buf[256];
  const bool fwd = options.check_forward_ad;
  const std::string suffix = " (forward)";
  os << (order == 2 ? "gradgradcheck " : "gradcheck ") << (passed ? "PASSED" : "FAILED") << " (float64, eps "
     << options.eps << ", atol "
     << options.atol << ", rtol " << options.rtol << (fwd ? ", forward mode too" : "") << ")\n";
  int width = 14;  // the name column fits the longest name
  for (const auto& c : inputs) width = std::max(width, (int)(c.name.size() + (fwd ? suffix.size() : 0)));
  std::snprintf(buf, sizeof buf, "  %-*s %-16s %-6s %12s %12s  %-12s %14s %14s\n", width, "input", "shape", "result",
                "max_abs_err", "max_rel_err", "worst", "analytic", "numeric");
  os << buf;
  auto row = [&](const std::string& name, const Shape& shape, bool ok, double abs_err, double rel_err,
                 const Shape& worst, double analytic, double numeric) {
    std::snprintf(buf, sizeof buf, "  %-*s %-16s %-6s %12.3e %12.3e  %-12s %14.6e %14.6e\n", width, name.c_str(),
                  shape_str(shape).c_str(), ok ? "ok" : "FAIL", abs_err, rel_err, shape_str(worst).c_str(), analytic,
                  numeric);
    os << buf;
  };
  for (const auto& c : inputs) {
    row(c.name, c.shape, c.passed, c.max_abs_err, c.max_rel_err, c.worst_index, c.analytic, c.numeric);
    const ForwardGradCheck& f = c.forward;
    if (fwd) row(c.name + suffix, c.shape, f.passed, f.max_abs_err, f.max_rel_err, f.worst_index, f.forward, f.numeric);
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const GradcheckReport& r) { return os << r.to_string(); }

}  // namespace ember
