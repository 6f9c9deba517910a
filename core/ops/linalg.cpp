// Products: matmul (batched, broadcasting) and linear, both through the GEMM kernels with
// transposes passed as flags; outer. Backward recorded only when needed; backward
// functions run with grad mode off and may use other ops. Matrix structure: diag, trace,
// tril and triu, composed of views and masks (so differentiable to any order).
#include "core/ops.h"

#include <algorithm>

#include "core/forward_ad.h"
#include "core/kernels/gemm.h"
#include "core/kernels/reduce_softmax.h"
#include "core/ops/helpers.h"

namespace ember {

using ops_detail::need_computing;
using ops_detail::need_float;
using ops_detail::same_dtype;

// ------------------------------------------------------------------ matmul
Tensor matmul(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "matmul", "the first operand");
  check_defined(b, "matmul", "the second operand");
  if (a.dim() == 0 || b.dim() == 0)
    fail("matmul", "both operands need at least 1 dim, got shapes ", a.shape(), " and ", b.shape());
  int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  if (ka != kb)
    fail("matmul", "shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (", ka, " != ", kb, ")");
  same_dtype("matmul", a, b);
  need_float("matmul", a);
  if (a.dim() == 1 && b.dim() == 1) return matmul(a.unsqueeze(0), b.unsqueeze(1), loc).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b, loc).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(1), loc).squeeze(-1);

  const int64_t M = a.size(-2), K = ka, N = b.size(-1);
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, "matmul");
  } catch (const Error&) {
    fail("matmul", "shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied: batch dims ", ba, " and ", bb,
         " do not broadcast");
  }
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  so.insert(so.end(), {M, N});
  Tensor out = empty(so, a.dtype());
  kernel::gemm_batched(out, a.detach().expand(sa), b.detach().expand(sb));
  BackwardFn bw;
  Tensor xa, xb;
  if (wants_grad(a, b)) {
    xa = b.requires_grad() ? a : Tensor();
    xb = a.requires_grad() ? b : Tensor();
    // b given as a transposed view (a Linear layer's x @ W^T): its gradient is made as
    // the transpose of a contiguous [N, K] product, so that it reaches W without a copy.
    const bool b_transposed = b.dim() == 2 && b.stride(0) == 1 && b.stride(1) != 1;
    const int64_t b_dim = b.dim();
    bw = [sa = SavedTensor(xa), sb = SavedTensor(xb), b_transposed, b_dim, K, N](const Tensor& g) {
      Tensor xa = sa.get(), xb = sb.get();
      Tensor ga = xb.defined() ? matmul(g, xb.mT()) : Tensor(), gb;
      if (xa.defined()) {
        if (b_dim == 2 && xa.dim() > 2) {
          // b is shared by every matrix of the batch: one product over all their rows
          // instead of one per matrix summed afterwards
          Tensor a2 = xa.reshape({-1, K}), g2 = g.reshape({-1, N});
          gb = b_transposed ? matmul(g2.mT(), a2).mT() : matmul(a2.mT(), g2);
        } else {
          gb = b_transposed && xa.dim() == 2 ? matmul(g.mT(), xa).mT() : matmul(xa.mT(), g);
        }
      }
      // the engine sums broadcast batch dims back to each operand's shape
      return std::vector<Tensor>{ga, gb};
    };
  }
  auto jvp = [&](const std::vector<Tensor>& t) {  // ta @ b + a @ tb
    return forward_detail::add_tangents(t[0].defined() ? matmul(t[0], b) : Tensor(),
                                        t[1].defined() ? matmul(a, t[1]) : Tensor());
  };
  return record("matmul", loc, out, {a, b}, std::move(bw), {xa, xb}, jvp);
}

// ------------------------------------------------------------------ linear
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Loc loc) {
  check_defined(x, "linear", "x");
  check_defined(weight, "linear", "weight");
  const char* op = "linear";
  if (weight.dim() != 2) fail(op, "expected weight [out, in], got shape ", weight.shape());
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  if (x.dim() == 0 || x.size(-1) != in_f)
    fail(op, "expected input [..., ", in_f, "] for weight ", weight.shape(), ", got shape ", x.shape());
  if (bias.defined() && bias.shape() != Shape{out_f})
    fail(op, "expected bias [", out_f, "] for weight ", weight.shape(), ", got shape ", bias.shape());
  same_dtype(op, x, weight);
  if (bias.defined()) same_dtype(op, x, bias);
  need_float(op, x);
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  const int64_t rows = numel_of(Shape(x.shape().begin(), x.shape().end() - 1));  // (whatever in_f and out_f, 0 too)
  Tensor x2 = x.detach().reshape({rows, in_f});
  Tensor w = weight.detach();
  Tensor y = empty({rows, out_f}, x.dtype());
  // every row of y starts as the bias, and the GEMM adds into it
  kernel::gemm_batched(y, x2, w.t(), /*accumulate=*/false, bias.defined() ? bias.detach().contiguous() : Tensor());
  BackwardFn bw;
  Tensor saved_x, saved_w;
  if (wants_grad(x, weight, bias)) {
    const bool gx = x.requires_grad(), gw = weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
    // x as the [rows, in] matrix the GEMMs read, recorded as a reshape of x when x
    // requires grad, so that a recorded backward reaches x through it
    saved_x = gw ? (x.dim() == 2 ? x : x.reshape({rows, in_f})) : Tensor();
    saved_w = gx ? weight : Tensor();
    const Shape x_shape = x.shape();
    bw = [sx = SavedTensor(saved_x), sw = SavedTensor(saved_w), gx, gw, gb, rows, in_f, out_f,
          x_shape](const Tensor& g) {
      Tensor g2 = g.reshape({rows, out_f});
      Tensor dx, dw, db;
      if (grad_enabled()) {  // recorded: the same products as ops
        if (gx) dx = matmul(g2, sw.get()).view(x_shape);
        if (gw) dw = matmul(g2.t(), sx.get());
        if (gb) db = sum(g2, {0});
        return std::vector<Tensor>{dx, dw, db};
      }
      // the two products and the bias's column sums in one parallel region
      std::vector<kernel::Product> products;
      if (gx) {
        dx = empty({rows, in_f}, g.dtype());
        products.push_back({.c = dx, .a = g2, .b = sw.data()});  // [rows, out] @ [out, in]
      }
      if (gw) {
        dw = empty({out_f, in_f}, g.dtype());
        products.push_back({.c = dw, .a = g2.t(), .b = sx.data()});  // [out, rows] @ [rows, in]
      }
      kernel::ExtraTasks column_sums;
      if (gb && g2.is_contiguous()) {
        db = empty({out_f}, g.dtype());
        column_sums = {.tasks = kernel::sum_rows_blocks(out_f),
                       .work = double(rows) * double(out_f),
                       .run = [&](int64_t block) { kernel::sum_rows_block(db, g2, block); }};
      } else if (gb) {
        db = sum(g2, {0});
      }
      kernel::gemm_together(products, column_sums);
      if (gx) dx = dx.view(x_shape);
      return std::vector<Tensor>{dx, dw, db};
    };
  }
  auto jvp = [&](const std::vector<Tensor>& t) {  // tx @ w^T + x @ tw^T + tbias
    Tensor tw = t[1].defined() ? linear(x, t[1], t[2]) : Tensor();
    if (!tw.defined() && t[2].defined()) tw = t[2];
    return forward_detail::add_tangents(t[0].defined() ? linear(t[0], weight) : Tensor(), tw);
  };
  return record(op, loc, y.view(out_shape), {x, weight, bias}, std::move(bw), {saved_x, saved_w}, jvp);
}

// ------------------------------------------------------------------ structure
Tensor outer(const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(a, "outer", "the first operand");
  check_defined(b, "outer", "the second operand");
  if (a.dim() != 1 || b.dim() != 1)
    fail("outer", "expected two 1-D tensors, got shapes ", a.shape(), " and ", b.shape());
  same_dtype("outer", a, b);
  need_computing("outer", a);  // (mul would name itself)
  return mul(a.unsqueeze(1), b.unsqueeze(0), loc);
}

Tensor diag(const Tensor& a, int64_t offset) {
  check_defined(a, "diag", "the input");
  if (a.dim() == 1) return diag_embed(a, offset, 0, 1);
  if (a.dim() == 2) return a.diagonal(offset).clone();
  fail("diag", "expected a 1-D tensor (to make a matrix) or a 2-D one (to take its diagonal), got shape ", a.shape());
}

Tensor trace(const Tensor& a, Loc loc) {
  check_defined(a, "trace", "the input");
  if (a.dim() != 2) fail("trace", "expected a 2-D tensor, got shape ", a.shape());
  need_computing("trace", a);  // (sum would name itself)
  return sum(a.diagonal(), loc);
}

namespace {
// Zeroes the elements (i, j) of the last two dims where j - i > k (tril) or j - i < k (triu).
Tensor triangle(const Tensor& a, int64_t k, bool lower, const char* op) {
  check_defined(a, op, "the input");
  if (a.dim() < 2) fail(op, "expected a tensor of at least 2 dims, got shape ", a.shape());
  const Tensor i = arange(0, (double)a.size(-2)).unsqueeze(1), j = arange(0, (double)a.size(-1)).unsqueeze(0);
  const Tensor diff = sub(j, i);  // int64, exact
  // k far outside the matrix keeps all or nothing; as a double it compares exactly enough
  const Tensor drop = lower ? gt(diff, (double)k) : lt(diff, (double)k);
  if (a.dtype() == kBool) return logical_and(a, logical_not(drop));  // false is a bool's zero
  return masked_fill(a, drop, 0.0);
}
}  // namespace

Tensor tril(const Tensor& a, int64_t k) { return triangle(a, k, true, "tril"); }
Tensor triu(const Tensor& a, int64_t k) { return triangle(a, k, false, "triu"); }

}  // namespace ember
