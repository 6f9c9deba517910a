// Reductions: sum, mean, amax/amin, max, argmax/argmin, var, norm, logsumexp; cumsum. Forward through kernels,
// backward recorded only when needed; backward functions run with grad mode off and may
// use other ops.
#include "core/ops.h"

#include <algorithm>
#include <cmath>

#include "core/forward_ad.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/reduce_softmax.h"
#include "core/ops/helpers.h"

namespace ember {

using ops_detail::need_computing;
using ops_detail::need_float;

namespace {

std::vector<bool> dims_mask(const Tensor& a, const Dims& dims, const char* op) {
  std::vector<bool> m(a.dim(), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, a.dim(), op);
    if (a.dim() == 0) continue;
    if (m[w]) fail(op, "dim ", d, " appears more than once in ", (Shape)dims);
    m[w] = true;
  }
  return m;
}

Shape keep_shape(const Tensor& a, const std::vector<bool>& m) {
  Shape s = a.shape();
  for (int64_t d = 0; d < a.dim(); d++)
    if (m[d]) s[d] = 1;
  return s;
}

}  // namespace

// ------------------------------------------------------------------ reductions
Tensor sum(const Tensor& a, Loc loc) {
  check_defined(a, "sum", "the input");
  return sum(a, {}, false, loc);
}

Tensor sum(const Tensor& a, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "sum", "the input");
  if (a.dtype() == kBool) return sum(a.to(kInt64), dims, keepdim, loc);
  need_computing("sum", a);
  auto m = dims_mask(a, dims, "sum");
  Tensor out = kernel::reduce(a.detach(), m, kernel::ReduceKind::Sum);
  Shape ks = keep_shape(a, m);
  if (keepdim) out = out.view(ks);
  BackwardFn bw;
  if (wants_grad(a)) {
    Shape in = a.shape();
    bw = [ks, in](const Tensor& g) { return std::vector<Tensor>{g.reshape(ks).expand(in)}; };
  }
  return record("sum", loc, out, {a}, std::move(bw), {},
                [&](const std::vector<Tensor>& t) { return sum(t[0], dims, keepdim); });
}

Tensor mean(const Tensor& a, Loc loc) {
  check_defined(a, "mean", "the input");
  return mean(a, {}, false, loc);
}

Tensor mean(const Tensor& a, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "mean", "the input");
  need_float("mean", a);
  auto m = dims_mask(a, dims, "mean");
  int64_t n = 1;
  for (int64_t d = 0; d < a.dim(); d++)
    if (m[d]) n *= a.size(d);
  Tensor out = kernel::reduce(a.detach(), m, kernel::ReduceKind::Sum);
  const double inv = 1.0 / (double)n;
  dispatch_float(out.dtype(), "mean", [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); i++) p[i] = static_cast<T>(p[i] * inv);
  });
  Shape ks = keep_shape(a, m);
  if (keepdim) out = out.view(ks);
  BackwardFn bw;
  if (wants_grad(a)) {
    Shape in = a.shape();
    bw = [ks, in, inv](const Tensor& g) { return std::vector<Tensor>{mul(g, inv).reshape(ks).expand(in)}; };
  }
  return record("mean", loc, out, {a}, std::move(bw), {},
                [&](const std::vector<Tensor>& t) { return mean(t[0], dims, keepdim); });
}

static Tensor extreme(const char* name, const Tensor& a, const Dims& dims, bool keepdim, const Loc& loc, bool is_max) {
  need_computing(name, a);  // (the kernel would name max or min)
  auto m = dims_mask(a, dims, name);
  Tensor out = kernel::reduce(a.detach(), m, is_max ? kernel::ReduceKind::Max : kernel::ReduceKind::Min);
  Shape ks = keep_shape(a, m);
  if (keepdim) out = out.view(ks);
  BackwardFn bw;
  if (wants_grad(a)) {
    Tensor sa = a.detach(), so = out.detach().reshape(ks);
    bw = [sa, so, ks, m](const Tensor& g) {
      // evenly among ties, as torch.amax
      Tensor hit = eq(sa, so).to(sa.dtype());
      std::vector<int64_t> rd;
      for (int64_t d = 0; d < (int64_t)m.size(); d++)
        if (m[d]) rd.push_back(d);
      Tensor count = rd.empty() ? ones_like(so) : sum(hit, rd, true);
      return std::vector<Tensor>{mul(hit, div(g.reshape(ks), count))};
    };
  }
  // the tangent of the extreme elements, averaged over ties (the gradient's weights)
  auto jvp = [&](const std::vector<Tensor>& t) {
    Dims rd;
    for (int64_t d = 0; d < (int64_t)m.size(); d++)
      if (m[d]) rd.push_back(d);
    if (rd.empty()) return t[0].reshape(out.shape());
    Tensor hit = eq(a.detach(), out.detach().reshape(ks)).to(a.dtype());
    return div(sum(mul(hit, t[0]), rd, true), sum(hit, rd, true)).reshape(out.shape());
  };
  return record(name, loc, out, {a}, std::move(bw), {a, out}, jvp);
}
Tensor amax(const Tensor& a, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "amax", "the input");
  return extreme("amax", a, dims, keepdim, loc, true);
}
Tensor amin(const Tensor& a, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "amin", "the input");
  return extreme("amin", a, dims, keepdim, loc, false);
}
Tensor max(const Tensor& a, Loc loc) {
  check_defined(a, "max", "the input");
  return extreme("max", a, {}, false, loc, true);
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  check_defined(a, "argmax", "the input");
  need_computing("argmax", a);
  dim = wrap_dim(dim, a.dim(), "argmax");
  if (a.dim() == 0) return zeros({}, kInt64);
  Tensor idx = kernel::arg_reduce(a.detach().contiguous(), dim, true);
  return keepdim ? idx.unsqueeze(dim) : idx;
}
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) {
  check_defined(a, "argmin", "the input");
  need_computing("argmin", a);
  dim = wrap_dim(dim, a.dim(), "argmin");
  if (a.dim() == 0) return zeros({}, kInt64);
  Tensor idx = kernel::arg_reduce(a.detach().contiguous(), dim, false);
  return keepdim ? idx.unsqueeze(dim) : idx;
}

std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim, Loc loc) {
  check_defined(a, "max", "the input");
  need_computing("max", a);
  dim = wrap_dim(dim, a.dim(), "max");
  if (a.dim() == 0) return {a, zeros({}, kInt64)};
  Tensor idx = argmax(a, dim, true);
  Tensor v = gather(a, dim, idx, loc);
  if (!keepdim) {
    v = v.squeeze(dim);
    idx = idx.squeeze(dim);
  }
  return {v, idx};
}

Tensor var(const Tensor& a, const Dims& dims, int64_t correction, bool keepdim, Loc loc) {
  check_defined(a, "var", "the input");
  need_float("var", a);
  auto m = dims_mask(a, dims, "var");
  int64_t n = 1;
  for (int64_t d = 0; d < a.dim(); d++)
    if (m[d]) n *= a.size(d);
  Dims rd;
  for (int64_t d = 0; d < a.dim(); d++)
    if (m[d]) rd.push_back(d);
  Tensor centered = sub(a, mean(a, rd, true, loc), loc);
  Tensor ss = sum(mul(centered, centered, loc), rd, keepdim, loc);
  return div(ss, std::max((double)n - (double)correction, 0.0), loc);  // in double: correction may be any int64
}

// ------------------------------------------------------------------ norms and log-sum-exp
Tensor norm(const Tensor& a, double p, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "norm", "the input");
  need_float("norm", a);
  if (!(p > 0)) fail("norm", "p must be positive (or inf), got ", p);
  if (std::isinf(p)) return amax(abs(a, loc), dims, keepdim, loc);  // amax shares ties' gradient
  if (p == 1) return sum(abs(a, loc), dims, keepdim, loc);
  auto m = dims_mask(a, dims, "norm");
  const Shape ks = keep_shape(a, m);
  Tensor out;
  {
    NoGradGuard ng;
    const Tensor x = a.detach();
    out = p == 2 ? sqrt(sum(square(x), dims, keepdim)) : pow(sum(pow(abs(x), p), dims, keepdim), 1 / p);
  }
  // d|a|_p / da = sign(a) |a|^(p-1) / |a|_p^(p-1), and 0 where the norm is 0 (as PyTorch's):
  // written with ops, so that it is differentiable again
  BackwardFn bw;
  if (wants_grad(a)) {
    SavedTensor sa(a), so(out, /*is_output=*/true);
    bw = [sa, so, p, ks](const Tensor& g) {
      const Tensor x = sa.get(), n = so.get().reshape(ks), gk = g.reshape(ks);
      const Tensor zero = eq(n.detach(), 0.0);
      const Tensor safe = masked_fill(n, zero, 1.0);
      if (p == 2) return std::vector<Tensor>{mul(x, masked_fill(div(gk, safe), zero, 0.0))};
      Tensor sign;
      {
        NoGradGuard ng;
        sign = sub(gt(x.detach(), 0.0).to(x.dtype()), lt(x.detach(), 0.0).to(x.dtype()));
      }
      const Tensor scale = masked_fill(div(gk, pow(safe, p - 1)), zero, 0.0);
      // |a|^(p-1) is infinite at a = 0 when p < 1: 0 there, as PyTorch's (taken at 1, so
      // that no infinity meets a zero in a double backward either)
      const Tensor at_zero = eq(x.detach(), 0.0);
      const Tensor power = masked_fill(pow(masked_fill(abs(x), at_zero, 1.0), p - 1), at_zero, 0.0);
      return std::vector<Tensor>{mul(mul(sign, power), scale)};
    };
  }
  // the gradient's weights summed against the tangent: sum(sign(a) |a|^(p-1) t) / |a|_p^(p-1)
  auto jvp = [&](const std::vector<Tensor>& t) {
    const Tensor n = out.reshape(ks), zero = eq(n.detach(), 0.0), safe = masked_fill(n, zero, 1.0);
    Tensor ratio;
    if (p == 2) {
      ratio = div(sum(mul(a, t[0]), dims, true), safe);
    } else {
      const Tensor x = a.detach();
      const Tensor sign = sub(gt(x, 0.0).to(x.dtype()), lt(x, 0.0).to(x.dtype()));
      const Tensor at_zero = eq(x, 0.0);
      const Tensor power = masked_fill(pow(masked_fill(abs(a), at_zero, 1.0), p - 1), at_zero, 0.0);
      ratio = div(sum(mul(mul(sign, power), t[0]), dims, true), pow(safe, p - 1));
    }
    return masked_fill(ratio, zero, 0.0).reshape(out.shape());
  };
  return record("norm", loc, out, {a}, std::move(bw), {a.detach(), out}, jvp);
}

Tensor logsumexp(const Tensor& a, const Dims& dims, bool keepdim, Loc loc) {
  check_defined(a, "logsumexp", "the input");
  need_float("logsumexp", a);
  const auto m = dims_mask(a, dims, "logsumexp");  // dims checked here, naming logsumexp
  for (int64_t d = 0; d < a.dim(); d++)
    if (m[d] && a.size(d) == 0) return add(sum(a, dims, keepdim, loc), -INFINITY, loc);  // an empty sum: log 0
  // shifted by the largest element (a constant: the result's derivative does not depend on
  // it), or by 0 where that is infinite, so that a row of -inf gives -inf, not NaN
  Tensor shift;
  {
    NoGradGuard ng;
    shift = amax(a.detach(), dims, true);
    shift = masked_fill(shift, eq(abs(shift), INFINITY), 0.0);
  }
  const Tensor s = sum(exp(sub(a, shift, loc), loc), dims, keepdim, loc);
  return add(log(s, loc), shift.reshape(s.shape()), loc);
}

// ------------------------------------------------------------------ running sums
namespace {
Tensor cumsum_along(const Tensor& a, int64_t dim, bool reverse, Loc loc) {
  const char* op = reverse ? "cumsum (reversed)" : "cumsum";
  if (a.dtype() == kBool) return cumsum_along(a.to(kInt64), dim, reverse, loc);
  need_computing(op, a);
  if (a.dim() == 0) return record(op, loc, a.detach().clone(), {a}, wants_grad(a) ? BackwardFn([](const Tensor& g) {
    return std::vector<Tensor>{g};
  }) : nullptr, {}, [](const std::vector<Tensor>& t) { return t[0].clone(); });
  dim = wrap_dim(dim, a.dim(), "cumsum");
  const Tensor x = a.detach().contiguous();
  Tensor out = empty(a.shape(), a.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; d++) outer *= a.size(d);
  for (int64_t d = dim + 1; d < a.dim(); d++) inner *= a.size(d);
  if (out.numel() > 0) kernel::cumsum(out, x, outer, a.size(dim), inner, reverse);
  // the gradient of a running sum is the running sum of g taken from the other end
  return record(op, loc, out, {a}, wants_grad(a) ? BackwardFn([dim, reverse, loc](const Tensor& g) {
    return std::vector<Tensor>{cumsum_along(g, dim, !reverse, loc)};
  }) : nullptr, {}, [&](const std::vector<Tensor>& t) { return cumsum_along(t[0], dim, reverse, loc); });
}
}  // namespace

Tensor cumsum(const Tensor& a, int64_t dim, Loc loc) {
  check_defined(a, "cumsum", "the input");
  return cumsum_along(a, dim, false, loc);
}

}  // namespace ember
