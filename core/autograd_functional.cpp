// jacobian, hessian, vjp, jvp and hvp: backward passes over fresh leaves, one per output
// element for a Jacobian, two for a product with a vector.
#include "core/autograd_functional.h"

#include "core/autograd.h"
#include "core/ops.h"

namespace ember {

namespace {

// Fresh leaves with the point's values, refused when a tensor is undefined or not float.
std::vector<Tensor> fresh_leaves(const char* op, const std::vector<Tensor>& xs) {
  if (xs.empty()) fail(op, "expected at least one input");
  std::vector<Tensor> out;
  for (size_t i = 0; i < xs.size(); i++) {
    const std::string what = xs.size() == 1 ? "x" : cat_str("input ", (int64_t)i);
    check_defined(xs[i], op, what.c_str());
    if (!is_computing_float(xs[i].dtype()))
      fail(op, "expected a float32 or float64 ", what, ", got ", dtype_name(xs[i].dtype()), " of shape ", xs[i].shape());
    out.push_back(xs[i].detach().clone().requires_grad_());
  }
  return out;
}

Tensor value_of(const char* op, const TensorsFn& f, const std::vector<Tensor>& xs) {
  if (!f) fail(op, "got an empty function");
  Tensor y = f(xs);
  if (!y.defined()) fail(op, "the function returned an undefined tensor");
  if (!is_computing_float(y.dtype()))
    fail(op, "the function returned a tensor of dtype ", dtype_name(y.dtype()), " and shape ", y.shape(),
         "; expected float32 or float64 (only a float value has a derivative)");
  return y;
}

Tensor one_element(const char* op, const TensorsFn& f, const std::vector<Tensor>& xs) {
  Tensor y = value_of(op, f, xs);
  if (y.numel() != 1)
    fail(op, "expected the function to return one element (a scalar loss), got shape ", y.shape());
  return y;
}

// v must have the shape and dtype of `like` (named what).
void check_like(const char* op, const Tensor& v, const Tensor& like, const std::string& what, const std::string& of) {
  check_defined(v, op, what.c_str());
  if (v.shape() != like.shape() || v.dtype() != like.dtype())
    fail(op, "expected ", what, " of ", of, "'s shape ", like.shape(), " and dtype ", dtype_name(like.dtype()),
         ", got shape ", v.shape(), " and dtype ", dtype_name(v.dtype()));
}

// The gradients of y (weighted by w) with respect to each x, zeros where y does not
// depend on one.
std::vector<Tensor> grads_or_zeros(const Tensor& y, const std::vector<Tensor>& xs, const Tensor& w, bool create) {
  std::vector<Tensor> g(xs.size());
  if (y.requires_grad()) g = grad({y}, xs, {w}, {.retain_graph = true, .create_graph = create, .allow_unused = true});
  for (size_t i = 0; i < xs.size(); i++)
    if (!g[i].defined()) g[i] = zeros(xs[i].shape(), xs[i].dtype());
  return g;
}

// The rows d y[i] / d x for every element i of y, stacked, per x: [y.shape..., x.shape...].
std::vector<Tensor> rows_of(const Tensor& y, const std::vector<Tensor>& xs) {
  std::vector<Tensor> J, flat;
  for (const Tensor& x : xs) {
    Shape s = y.shape();
    s.insert(s.end(), x.shape().begin(), x.shape().end());
    J.push_back(zeros(s, x.dtype()));
    flat.push_back(J.back().view({y.numel(), x.numel()}));
  }
  if (!y.requires_grad()) return J;
  for (int64_t i = 0; i < y.numel(); i++) {
    Tensor e = zeros({y.numel()}, y.dtype());
    e.select(0, i).fill_(1.0);
    const std::vector<Tensor> g = grad({y}, xs, {e.view(y.shape())}, {.retain_graph = true, .allow_unused = true});
    for (size_t k = 0; k < xs.size(); k++)
      if (g[k].defined()) flat[k].select(0, i).copy_(g[k].detach().reshape({xs[k].numel()}));
  }
  return J;
}

std::vector<Tensor> detached(const std::vector<Tensor>& ts) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) r.push_back(t.detach());
  return r;
}

TensorsFn of_one(const TensorFn& f) {
  if (!f) return nullptr;
  return [f](const std::vector<Tensor>& in) { return f(in[0]); };
}

}  // namespace

std::vector<Tensor> jacobian(const TensorsFn& f, const std::vector<Tensor>& xs) {
  const char* op = "jacobian";
  const std::vector<Tensor> leaves = fresh_leaves(op, xs);
  GradModeGuard on(true);
  return rows_of(value_of(op, f, leaves), leaves);
}

Tensor jacobian(const TensorFn& f, const Tensor& x) { return jacobian(of_one(f), std::vector<Tensor>{x})[0]; }

std::vector<std::vector<Tensor>> hessian(const TensorsFn& f, const std::vector<Tensor>& xs) {
  const char* op = "hessian";
  const std::vector<Tensor> leaves = fresh_leaves(op, xs);
  GradModeGuard on(true);
  const Tensor y = one_element(op, f, leaves);
  const std::vector<Tensor> g = grads_or_zeros(y, leaves, Tensor(), /*create=*/true);
  std::vector<std::vector<Tensor>> H;
  for (const Tensor& ga : g) H.push_back(rows_of(ga, leaves));  // H[a][b] = d ga / d xb
  return H;
}

Tensor hessian(const TensorFn& f, const Tensor& x) { return hessian(of_one(f), std::vector<Tensor>{x})[0][0]; }

std::pair<Tensor, std::vector<Tensor>> vjp(const TensorsFn& f, const std::vector<Tensor>& xs, const Tensor& v) {
  const char* op = "vjp";
  const std::vector<Tensor> leaves = fresh_leaves(op, xs);
  GradModeGuard on(true);
  const Tensor y = value_of(op, f, leaves);
  check_like(op, v, y, "v", "the function's value");
  return {y.detach(), detached(grads_or_zeros(y, leaves, v.detach(), false))};
}

std::pair<Tensor, Tensor> vjp(const TensorFn& f, const Tensor& x, const Tensor& v) {
  auto [y, g] = vjp(of_one(f), std::vector<Tensor>{x}, v);
  return {y, g[0]};
}

std::pair<Tensor, Tensor> jvp(const TensorsFn& f, const std::vector<Tensor>& xs, const std::vector<Tensor>& ts) {
  const char* op = "jvp";
  const std::vector<Tensor> leaves = fresh_leaves(op, xs);
  if (ts.size() != xs.size()) fail(op, "expected ", (int64_t)xs.size(), " tangents (one per input), got ", (int64_t)ts.size());
  for (size_t i = 0; i < ts.size(); i++)
    check_like(op, ts[i], xs[i], xs.size() == 1 ? "t" : cat_str("tangent ", (int64_t)i), xs.size() == 1 ? "x" : cat_str("input ", (int64_t)i));
  GradModeGuard on(true);
  const Tensor y = value_of(op, f, leaves);
  // u -> J^T u is linear in u; the gradient of <J^T u, t> with respect to u is J t
  const Tensor u = zeros(y.shape(), y.dtype()).requires_grad_();
  const std::vector<Tensor> g = grads_or_zeros(y, leaves, u, /*create=*/true);
  Tensor dot = zeros({}, y.dtype());
  for (size_t i = 0; i < g.size(); i++) dot = add(dot, sum(mul(g[i], ts[i].detach())));
  Tensor jt;
  if (dot.requires_grad()) jt = grad({dot}, {u}, {}, {.allow_unused = true})[0];
  return {y.detach(), jt.defined() ? jt.detach() : zeros(y.shape(), y.dtype())};
}

std::pair<Tensor, Tensor> jvp(const TensorFn& f, const Tensor& x, const Tensor& t) {
  return jvp(of_one(f), std::vector<Tensor>{x}, std::vector<Tensor>{t});
}

std::pair<Tensor, std::vector<Tensor>> hvp(const TensorsFn& f, const std::vector<Tensor>& xs,
                                           const std::vector<Tensor>& vs) {
  const char* op = "hvp";
  const std::vector<Tensor> leaves = fresh_leaves(op, xs);
  if (vs.size() != xs.size()) fail(op, "expected ", (int64_t)xs.size(), " vectors v (one per input), got ", (int64_t)vs.size());
  for (size_t i = 0; i < vs.size(); i++)
    check_like(op, vs[i], xs[i], xs.size() == 1 ? "v" : cat_str("v ", (int64_t)i), xs.size() == 1 ? "x" : cat_str("input ", (int64_t)i));
  GradModeGuard on(true);
  const Tensor y = one_element(op, f, leaves);
  const std::vector<Tensor> g = grads_or_zeros(y, leaves, Tensor(), /*create=*/true);
  // H v = the gradient of <g, v>
  Tensor dot = zeros({}, y.dtype());
  for (size_t i = 0; i < g.size(); i++) dot = add(dot, sum(mul(g[i], vs[i].detach())));
  return {y.detach(), detached(grads_or_zeros(dot, leaves, Tensor(), false))};
}

std::pair<Tensor, Tensor> hvp(const TensorFn& f, const Tensor& x, const Tensor& v) {
  auto [y, hv] = hvp(of_one(f), std::vector<Tensor>{x}, std::vector<Tensor>{v});
  return {y, hv[0]};
}

}  // namespace ember
