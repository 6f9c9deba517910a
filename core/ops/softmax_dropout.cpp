// The nn-flavoured ops with fused kernels and hand-written backward: softmax, log_softmax,
// softmax_backward, dropout and relu_dropout (also over packed rows). Backward recorded
// only when needed; backward functions run with grad mode off and may use other ops.
#include "core/ops.h"

#include <algorithm>

#include "core/forward_ad.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/dropout.h"
#include "core/kernels/reduce_softmax.h"
#include "core/ops/helpers.h"

namespace ember {

using ops_detail::need_float;
using ops_detail::same_dtype;

// ------------------------------------------------------------------ softmax
// A contiguous tensor as rows along dim: outer blocks of n elements, inner apart.
struct RowsAlong {
  int64_t outer = 1, n = 1, inner = 1;
};
static RowsAlong rows_along(const Tensor& t, int64_t dim) {
  RowsAlong r;
  r.n = t.size(dim);
  for (int64_t d = 0; d < dim; d++) r.outer *= t.size(d);
  for (int64_t d = dim + 1; d < t.dim(); d++) r.inner *= t.size(d);
  return r;
}

static Tensor softmax_impl(const char* name, const Tensor& a, int64_t dim, const Loc& loc, bool log) {
  need_float(name, a);
  if (a.dim() == 0)  // a constant: a zero tangent
    return record(name, loc, log ? zeros_like(a) : ones_like(a), {a}, nullptr, {},
                  [](const std::vector<Tensor>&) { return Tensor(); });
  dim = wrap_dim(dim, a.dim(), name);
  const RowsAlong r = rows_along(a, dim);
  Tensor x = a.detach().contiguous();
  Tensor out = empty(a.shape(), a.dtype());
  kernel::softmax_forward(out, x, r.outer, r.n, r.inner, log);
  BackwardFn bw;
  if (wants_grad(a)) {
    bw = [y = SavedTensor(out, /*is_output=*/true), dim, log](const Tensor& g) {
      return std::vector<Tensor>{softmax_backward(g, y.get(), dim, log)};
    };
  }
  // softmax: y (t - sum(y t)); log_softmax: t - sum(exp(y) t), sums along dim
  auto jvp = [&](const std::vector<Tensor>& t) {
    const Tensor p = log ? exp(out) : out;
    const Tensor centred = sub(t[0], sum(mul(p, t[0]), {dim}, true));
    return log ? centred : mul(out, centred);
  };
  out = record(name, loc, out, {a}, std::move(bw), {out}, jvp);
  if (!log && out.grad_fn()) out.grad_fn()->probs_dim = (int)dim;  // out is saved[0], fresh and dense
  return out;
}

// The gradient through softmax (or log_softmax) as an op of its own, given the output y
// and the gradient g reaching it, with the fused row kernel:
//   softmax:      dx = y * (g - sum(g * y))
//   log_softmax:  dx = g - exp(y) * sum(g)
// and its own backward (what differentiating through softmax twice uses), for an upstream h:
//   softmax:      dg = y * (h - sum(h * y))  (the same map: it is self-adjoint)
//                 dy = h * (g - sum(g * y)) - g * sum(h * y)
//   log_softmax:  dg = h - sum(h * exp(y)),  dy = -h * exp(y) * sum(g)
// with every sum along dim, kept for broadcasting.
Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log, Loc loc) {
  check_defined(g, "softmax_backward", "g");
  check_defined(y, "softmax_backward", "y");
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  same_dtype(name, g, y);
  need_float(name, y);
  if (g.shape() != y.shape())
    fail(name, "expected a gradient of the output's shape ", y.shape(), ", got ", g.shape());
  if (y.dim() == 0)  // a constant: a zero tangent
    return record(name, loc, zeros_like(y), {g, y}, nullptr, {}, [](const std::vector<Tensor>&) { return Tensor(); });
  dim = wrap_dim(dim, y.dim(), name);
  const RowsAlong r = rows_along(y, dim);
  Tensor yc = y.detach().contiguous();
  Tensor dx = empty(y.shape(), y.dtype());
  kernel::softmax_backward(dx, g.detach().contiguous(), yc, r.outer, r.n, r.inner, log);
  BackwardFn bw;
  if (wants_grad(g, y)) {
    const bool gg = g.requires_grad(), gy = y.requires_grad();
    bw = [sg = SavedTensor(gy ? g : Tensor()), sy = SavedTensor(y), dim, log, gg, gy](const Tensor& h) {
      Tensor yv = sy.get(), dg, dy;
      if (log) {
        Tensor ey = exp(yv);
        if (gg) dg = sub(h, sum(mul(h, ey), {dim}, true));
        if (gy) dy = neg(mul(mul(h, ey), sum(sg.get(), {dim}, true)));
      } else {
        if (gg) dg = softmax_backward(h, yv, dim, false);
        if (gy) {
          Tensor gv = sg.get();
          dy = sub(mul(h, sub(gv, sum(mul(gv, yv), {dim}, true))), mul(gv, sum(mul(h, yv), {dim}, true)));
        }
      }
      return std::vector<Tensor>{dg, dy};
    };
  }
  // bilinear in (g, y): the tangent is the map of tg at y, plus the derivative in y along ty
  //   softmax:      y (tg - sum(tg y)) + ty (g - sum(g y)) - y sum(g ty)
  //   log_softmax:  tg - exp(y) sum(tg) - exp(y) ty sum(g)
  auto jvp = [&](const std::vector<Tensor>& t) {
    Tensor by_g = t[0].defined() ? softmax_backward(t[0], y, dim, log) : Tensor(), by_y;
    if (t[1].defined()) {
      if (log) {
        by_y = neg(mul(mul(exp(y), t[1]), sum(g, {dim}, true)));
      } else {
        by_y = sub(mul(t[1], sub(g, sum(mul(g, y), {dim}, true))), mul(y, sum(mul(g, t[1]), {dim}, true)));
      }
    }
    return forward_detail::add_tangents(by_g, by_y);
  };
  return record(name, loc, dx, {g, y}, std::move(bw), {g, y}, jvp);
}
Tensor softmax(const Tensor& a, int64_t dim, Loc loc) {
  check_defined(a, "softmax", "the input");
  return softmax_impl("softmax", a, dim, loc, false);
}
Tensor log_softmax(const Tensor& a, int64_t dim, Loc loc) {
  check_defined(a, "log_softmax", "the input");
  return softmax_impl("log_softmax", a, dim, loc, true);
}

// ------------------------------------------------------------------ dropout
// One pass each way and no mask in memory: element c of row r (every dim but the last) is
// kept unless draw keys[r] + c of the generator falls below p (DropoutDraws), and the
// backward makes the same decisions again from the same keys. The loops are
// core/kernels/dropout.cpp's.
namespace {
using RowKeys = std::shared_ptr<const std::vector<uint64_t>>;
using KeptMask = std::shared_ptr<const std::vector<uint8_t>>;  // 1 where kept, per element

// Dropout with given draws and row keys. Linear in a with the same mask each time, so its
// backward is itself, and so is every derivative after: the forward keeps its decisions
// (a byte an element) for them, rather than drawing them again. With relu, relu first:
// the gradient then passes, times 1/(1-p), where the output is positive, and nowhere
// else - the backward reads the output, not the draws.
Tensor dropout_with(const Tensor& a, const DropoutDraws& draws, const RowKeys& keys, bool relu, const Loc& loc,
                    KeptMask kept = nullptr) {
  Tensor x = a.detach().contiguous();
  Tensor out = empty(a.shape(), a.dtype());
  const int64_t cols = a.dim() == 0 ? 1 : a.size(-1);
  // the decisions, kept for the backward (and every derivative after) when it will run
  std::shared_ptr<std::vector<uint8_t>> mask;
  if (!kept && !relu && wants_grad(a)) mask = std::make_shared<std::vector<uint8_t>>((size_t)a.numel());
  dispatch_float(a.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    if (a.numel() == 0) return;
    T* y = out.data<T>();
    const T* xp = x.data<T>();
    if (kept) kernel::dropout_kept(y, xp, kept->data(), a.numel(), T(draws.scale));
    else
      kernel::dropout_rows(y, mask ? mask->data() : nullptr, xp, keys->data(), (int64_t)keys->size(), cols, draws,
                           relu);
  });
  if (mask) kept = std::move(mask);
  BackwardFn bw;
  if (wants_grad(a) && !relu)
    bw = [draws, keys, kept, loc](const Tensor& g) {
      return std::vector<Tensor>{dropout_with(g, draws, keys, false, loc, kept)};
    };
  if (wants_grad(a) && relu)
    bw = [s = SavedTensor(out, /*is_output=*/true), scale = draws.scale](const Tensor& g) {
      const Tensor& y = s.data();  // only where it is positive matters: no gradient flows through it
      if (grad_enabled()) return std::vector<Tensor>{mul(g, mul(gt(y, 0.0).to(y.dtype()), scale))};
      Tensor gc = g.contiguous(), dx = empty(y.shape(), y.dtype());
      dispatch_float(y.dtype(), "relu_dropout backward", [&](auto tag) {
        using T = decltype(tag);
        const T *pg = gc.data<T>(), *py = y.data<T>();
        T* pd = dx.data<T>();
        const T sc = T(scale);
        kernel::relu_dropout_backward(pd, pg, py, y.numel(), sc);
      });
      return std::vector<Tensor>{dx};
    };
  // the tangent through the same mask: the same decisions again (or the kept ones), and
  // with relu, times 1/(1-p) where the output is positive
  auto jvp = [&](const std::vector<Tensor>& t) {
    if (relu) return mul(t[0], mul(gt(out.detach(), 0.0).to(out.dtype()), draws.scale));
    return dropout_with(t[0], draws, keys, false, loc, kept);
  };
  return record(relu ? "relu_dropout" : "dropout", loc, out, {a}, std::move(bw), {relu ? out : Tensor()}, jvp);
}

// The draws and every row's key for dropout of a (rows: every dim but the last).
std::pair<DropoutDraws, RowKeys> draws_for(const Tensor& a, double p, Generator* gen) {
  const DropoutDraws draws = DropoutDraws::take(gen ? *gen : default_generator(), p, a.shape());
  const int64_t cols = a.dim() == 0 ? 1 : a.size(-1), rows = cols == 0 ? 0 : a.numel() / cols;
  auto keys = std::make_shared<std::vector<uint64_t>>((size_t)rows);
  draws.row_keys(0, rows, keys->data());
  return {draws, keys};
}

}  // namespace

Tensor dropout(const Tensor& a, double p, bool training, Generator* gen, Loc loc) {
  check_defined(a, "dropout", "the input");
  need_float("dropout", a);
  if (!(p >= 0.0 && p <= 1.0)) fail("dropout", "probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return a;
  auto [draws, keys] = draws_for(a, p, gen);
  return dropout_with(a, draws, keys, false, loc);
}

Tensor relu_dropout(const Tensor& a, double p, bool training, Generator* gen, Loc loc) {
  check_defined(a, "relu_dropout", "the input");
  need_float("relu_dropout", a);
  if (!(p >= 0.0 && p <= 1.0)) fail("relu_dropout", "probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return relu(a, loc);
  auto [draws, keys] = draws_for(a, p, gen);
  return dropout_with(a, draws, keys, true, loc);
}

Tensor dropout_keyed(const Tensor& a, const DropoutDraws& draws, std::vector<uint64_t> row_keys, bool relu,
                     Loc loc) {
  const char* op = relu ? "relu_dropout_keyed" : "dropout_keyed";
  check_defined(a, op, "the input");
  need_float(op, a);
  if (a.dim() != 2) fail(op, "expected rows [N, C], got shape ", a.shape());
  if ((int64_t)row_keys.size() != a.size(0))
    fail(op, "expected a key for each of the ", a.size(0), " rows, got ", (int64_t)row_keys.size());
  return dropout_with(a, draws, std::make_shared<const std::vector<uint64_t>>(std::move(row_keys)), relu, loc);
}

}  // namespace ember
