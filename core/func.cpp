// func::jvp, jacfwd, hvp and hessian: forward passes carrying tangents, and for the
// second derivatives a backward pass under create_graph whose ops carry them on.
#include "core/func.h"

#include <string>

#include "core/autograd.h"
#include "core/forward_ad.h"
#include "core/ops.h"

namespace ember::func {

namespace {

std::string input_name(const std::vector<Tensor>& xs, size_t i) {
  return xs.size() == 1 ? "x" : cat_str("input ", (int64_t)i);
}

// The point's values, checked: defined and float. Detached, so f's graph starts here.
std::vector<Tensor> point_of(const char* op, const TensorsFn& f, const std::vector<Tensor>& xs) {
  if (!f) fail(op, "got an empty function");
  if (xs.empty()) fail(op, "expected at least one input");
  std::vector<Tensor> out;
  for (size_t i = 0; i < xs.size(); i++) {
    const std::string what = input_name(xs, i);
    check_defined(xs[i], op, what.c_str());
    if (!is_computing_float(xs[i].dtype()))
      fail(op, "expected a float32 or float64 ", what, ", got ", dtype_name(xs[i].dtype()), " of shape ", xs[i].shape());
    out.push_back(xs[i].detach());
  }
  return out;
}

// One vector per input, each of its input's shape and dtype (named what: "t", "v").
void check_vectors(const char* op, const std::vector<Tensor>& vs, const std::vector<Tensor>& xs, const char* what) {
  if (vs.size() != xs.size())
    fail(op, "expected ", (int64_t)xs.size(), xs.size() == 1 ? " vector " : " vectors ", what, " (one per input), got ",
         (int64_t)vs.size());
  for (size_t i = 0; i < vs.size(); i++) {
    const std::string name = xs.size() == 1 ? std::string(what) : cat_str(what, " ", (int64_t)i);
    check_defined(vs[i], op, name.c_str());
    if (vs[i].shape() != xs[i].shape() || vs[i].dtype() != xs[i].dtype())
      fail(op, "expected ", name, " of ", input_name(xs, i), "'s shape ", xs[i].shape(), " and dtype ",
           dtype_name(xs[i].dtype()), ", got shape ", vs[i].shape(), " and dtype ", dtype_name(vs[i].dtype()));
  }
}

Tensor checked_value(const char* op, const Tensor& y, bool one_element) {
  if (!y.defined()) fail(op, "the function returned an undefined tensor");
  if (!is_computing_float(y.dtype()))
    fail(op, "the function returned a tensor of dtype ", dtype_name(y.dtype()), " and shape ", y.shape(),
         "; expected float32 or float64 (only a float value has a derivative)");
  if (one_element && y.numel() != 1)
    fail(op, "expected the function to return one element (a scalar loss), got shape ", y.shape());
  return y;
}

// The tangent t carries at the open level, detached; zeros of like's shape when none.
Tensor tangent_or_zeros(const Tensor& t, const Tensor& like) {
  Tensor tangent = forward_detail::tangent_of(t);
  return tangent.defined() ? tangent.detach().contiguous() : zeros(like.shape(), like.dtype());
}

// Opens a level, refusing one open already by op's name (checked before the member opens it).
struct Level {
  explicit Level(const char* op) : checked(check(op)) {}
  static bool check(const char* op) {
    if (dual_level_open()) fail(op, "a dual level is open already; nested dual levels are not supported yet");
    return true;
  }
  bool checked;
  DualLevel level;
};

// (f(x), J t) at the point xs (checked), in its own level.
std::pair<Tensor, Tensor> forward_pass(const char* op, const TensorsFn& f, const std::vector<Tensor>& xs,
                                       const std::vector<Tensor>& ts) {
  Level level(op);
  std::vector<Tensor> duals;
  for (size_t i = 0; i < xs.size(); i++) duals.push_back(make_dual(xs[i], ts[i].detach()));
  Tensor y = checked_value(op, f(duals), false);
  return {y.detach(), tangent_or_zeros(y, y)};
}

// (f(x), H v) at the point xs (checked), in its own level: the gradient of f at leaves whose
// duals carry v, computed under create_graph so that its ops carry the tangents on.
std::pair<Tensor, std::vector<Tensor>> forward_over_reverse(const char* op, const TensorsFn& f,
                                                            const std::vector<Tensor>& xs,
                                                            const std::vector<Tensor>& vs) {
  Level level(op);
  GradModeGuard on(true);
  std::vector<Tensor> leaves, duals;
  for (size_t i = 0; i < xs.size(); i++) {
    leaves.push_back(xs[i].clone().requires_grad_());
    duals.push_back(make_dual(leaves.back(), vs[i].detach()));
  }
  Tensor y = checked_value(op, f(duals), true);
  std::vector<Tensor> g(xs.size());
  if (y.requires_grad()) g = grad({y}, leaves, {}, {.retain_graph = false, .create_graph = true, .allow_unused = true});
  std::vector<Tensor> hv;
  for (size_t i = 0; i < xs.size(); i++)
    hv.push_back(g[i].defined() ? tangent_or_zeros(g[i], xs[i]) : zeros(xs[i].shape(), xs[i].dtype()));
  return {y.detach(), hv};
}

// One-hot tangents: for each element j of input a, the tangents (e_j for a, zeros for the
// others) handed to fn.
template <class Fn>
void each_basis_vector(const std::vector<Tensor>& xs, const Fn& fn) {
  for (size_t a = 0; a < xs.size(); a++)
    for (int64_t j = 0; j < xs[a].numel(); j++) {
      std::vector<Tensor> ts;
      for (size_t b = 0; b < xs.size(); b++) ts.push_back(zeros(xs[b].shape(), xs[b].dtype()));
      ts[a].view({xs[a].numel()}).select(0, j).fill_(1.0);
      fn(a, j, ts);
    }
}

// The name a linearized function's calls report.
const char* op_of_linearized() { return "func::linearize's jvp"; }

TensorsFn of_one(const TensorFn& f) {
  if (!f) return nullptr;
  return [f](const std::vector<Tensor>& in) { return f(in[0]); };
}

}  // namespace

std::pair<Tensor, Tensor> jvp(const TensorsFn& f, const std::vector<Tensor>& xs, const std::vector<Tensor>& ts) {
  const char* op = "func::jvp";
  const std::vector<Tensor> point = point_of(op, f, xs);
  check_vectors(op, ts, point, "t");
  return forward_pass(op, f, point, ts);
}

std::pair<Tensor, Tensor> jvp(const TensorFn& f, const Tensor& x, const Tensor& t) {
  return func::jvp(of_one(f), std::vector<Tensor>{x}, std::vector<Tensor>{t});
}

std::pair<Tensor, std::function<Tensor(const std::vector<Tensor>&)>> linearize(const TensorsFn& f,
                                                                              const std::vector<Tensor>& xs) {
  const char* op = "func::linearize";
  std::vector<Tensor> point = point_of(op, f, xs);
  for (Tensor& x : point) x = x.clone();  // the point stays where it was
  Tensor y;
  {
    NoGradGuard no_grad;
    y = checked_value(op, f(point), false).detach();
  }
  auto jv = [f, point](const std::vector<Tensor>& ts) {
    check_vectors(op_of_linearized(), ts, point, "t");
    return forward_pass(op_of_linearized(), f, point, ts).second;
  };
  return {y, jv};
}

std::pair<Tensor, std::function<Tensor(const Tensor&)>> linearize(const TensorFn& f, const Tensor& x) {
  auto linear = func::linearize(of_one(f), std::vector<Tensor>{x});
  return {linear.first, [jv = std::move(linear.second)](const Tensor& t) { return jv(std::vector<Tensor>{t}); }};
}

std::vector<Tensor> jacfwd(const TensorsFn& f, const std::vector<Tensor>& xs) {
  const char* op = "func::jacfwd";
  const std::vector<Tensor> point = point_of(op, f, xs);
  // J[a] viewed as [y.numel(), x_a.numel()]: column j is J e_j
  std::vector<Tensor> J, flat;
  Shape y_shape;
  bool first = true;
  each_basis_vector(point, [&](size_t a, int64_t j, const std::vector<Tensor>& ts) {
    auto [y, jt] = forward_pass(op, f, point, ts);
    if (first) {
      first = false;
      y_shape = y.shape();
      for (const Tensor& x : point) {
        Shape s = y_shape;
        s.insert(s.end(), x.shape().begin(), x.shape().end());
        J.push_back(zeros(s, y.dtype()));
        flat.push_back(J.back().view({y.numel(), x.numel()}));
      }
    }
    if (y.shape() != y_shape)
      fail(op, "the function returned shape ", y.shape(), " on one call and ", y_shape, " on another");
    flat[a].select(1, j).copy_(jt.reshape({y.numel()}).to(flat[a].dtype()));
  });
  if (first) {  // every input is empty: f's value gives the Jacobians' shape
    NoGradGuard no_grad;
    const Tensor y = checked_value(op, f(point), false);
    for (const Tensor& x : point) {
      Shape s = y.shape();
      s.insert(s.end(), x.shape().begin(), x.shape().end());
      J.push_back(zeros(s, y.dtype()));
    }
  }
  return J;
}

Tensor jacfwd(const TensorFn& f, const Tensor& x) { return func::jacfwd(of_one(f), std::vector<Tensor>{x})[0]; }

std::pair<Tensor, std::vector<Tensor>> hvp(const TensorsFn& f, const std::vector<Tensor>& xs,
                                           const std::vector<Tensor>& vs) {
  const char* op = "func::hvp";
  const std::vector<Tensor> point = point_of(op, f, xs);
  check_vectors(op, vs, point, "v");
  return forward_over_reverse(op, f, point, vs);
}

std::pair<Tensor, Tensor> hvp(const TensorFn& f, const Tensor& x, const Tensor& v) {
  auto [y, hv] = func::hvp(of_one(f), std::vector<Tensor>{x}, std::vector<Tensor>{v});
  return {y, hv[0]};
}

std::vector<std::vector<Tensor>> hessian(const TensorsFn& f, const std::vector<Tensor>& xs) {
  const char* op = "func::hessian";
  const std::vector<Tensor> point = point_of(op, f, xs);
  // H[a][b] viewed as [x_a.numel(), x_b.numel()]: H e_j (j in input b) fills column j of
  // every block H[a][b], the Hessian being symmetric
  std::vector<std::vector<Tensor>> H(point.size()), flat(point.size());
  for (size_t a = 0; a < point.size(); a++)
    for (size_t b = 0; b < point.size(); b++) {
      Shape s = point[a].shape();
      s.insert(s.end(), point[b].shape().begin(), point[b].shape().end());
      H[a].push_back(zeros(s, point[a].dtype()));
      flat[a].push_back(H[a].back().view({point[a].numel(), point[b].numel()}));
    }
  bool checked = false;
  each_basis_vector(point, [&](size_t b, int64_t j, const std::vector<Tensor>& vs) {
    auto [y, hv] = forward_over_reverse(op, f, point, vs);
    checked = true;
    for (size_t a = 0; a < point.size(); a++)
      flat[a][b].select(1, j).copy_(hv[a].reshape({point[a].numel()}));
  });
  if (!checked) {  // every input is empty: still check f's value
    NoGradGuard no_grad;
    checked_value(op, f(point), true);
  }
  return H;
}

Tensor hessian(const TensorFn& f, const Tensor& x) { return func::hessian(of_one(f), std::vector<Tensor>{x})[0][0]; }

}  // namespace ember::func
