// Scaled dot-product attention: the fused op (batched GEMMs through core's kernel, a
// masked softmax row kernel, a hand-written backward) and the reference composed of
// primitive ops. The tiled op is in attention_tiled.cpp, masks in attention_mask.cpp.
//
// Fused forward, per batch entry (P the weights, K the dropout's keep factors 0 or 1/(1-p)):
//   S  = scale * q k^T, blocked pairs removed      [L, S]
//   P  = softmax(S) per row; all zeros when every key of the row is blocked
//   Pd = P * K                                     (P itself without dropout)
//   out = Pd v                                     [L, Dv]
// Backward (dO the output's gradient):
//   dv  = Pd^T dO
//   dPd = dO v^T,  dP = dPd * K
//   dS  = P * (dP - rowsum(dP * P))                (softmax backward; 0 where blocked, as P is)
//   dq  = scale * dS k,  dk = scale * dS^T q
// Forward mode (tq, tk, tv the inputs' tangents; detail::attention_tangent):
//   dS  = scale * (tq k^T + q tk^T)
//   dP  = P * (dS - rowsum(P * dS))                (softmax's tangent; 0 where blocked)
//   tout = (dP * K) v + Pd tv
#include "nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/forward_ad.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/gemm.h"
#include "core/kernels/reduce_softmax.h"
#include "core/parallel.h"
#include "nn/attention_inputs.h"

namespace ember::nn {

using detail::check_inputs;
using detail::default_scale;
using detail::Geometry;

namespace {
constexpr const char* kOp = "scaled_dot_product_attention";
}  // namespace

namespace detail {

Tensor dropout_keep(const Shape& shape, DType dtype, const DropoutDraws& draws) {
  Tensor keep = empty(shape, dtype);
  dispatch_float(dtype, kOp, [&](auto tag) {
    using T = decltype(tag);
    T* k = keep.data<T>();
    const int64_t cols = shape.back(), rows = cols == 0 ? 0 : keep.numel() / cols;
    parallel_for(rows, cols * cost::kExp, [&](int64_t b, int64_t e) {
      std::vector<uint64_t> keys((size_t)(e - b));
      draws.row_keys(b, e - b, keys.data());
      for (int64_t r = b; r < e; r++) {
        const uint64_t key = keys[(size_t)(r - b)];
        for (int64_t c = 0; c < cols; c++) k[r * cols + c] = draws.factor<T>(key, c);
      }
    });
  });
  return keep;
}

Composed composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale,
                            const Tensor& keep) {
  Tensor scores = mul(matmul(q, k.mT()), scale);  // [..., L, S]
  Tensor w;
  if (!mask.defined()) {
    w = softmax(scores, -1);
  } else {
    // The lowest finite value rather than -inf: a fully blocked row then gives a uniform
    // softmax instead of NaN (none even in intermediates, nor in their derivatives), and
    // where() replaces it by zeros.
    const double lowest = q.dtype() == kFloat32 ? (double)std::numeric_limits<float>::lowest()
                                                : std::numeric_limits<double>::lowest();
    const Tensor& blocked = mask.blocked();
    scores = masked_fill(scores, blocked, lowest);
    const double S = (double)k.size(-2);
    Tensor all_blocked = eq(sum(blocked.expand(scores.shape()), {-1}, /*keepdim=*/true), S);  // [..., L, 1]
    w = where(all_blocked, zeros({}, q.dtype()), softmax(scores, -1));
  }
  Tensor dropped = keep.defined() ? mul(w, keep) : w;
  return {matmul(dropped, v), w, scores, dropped};
}

Tensor attention_tangent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tq, const Tensor& tk,
                         const Tensor& tv, const Tensor& weights, const Tensor& keep, double scale) {
  Tensor t;
  if (tq.defined() || tk.defined()) {
    Tensor ds = forward_detail::add_tangents(tq.defined() ? matmul(tq, k.mT()) : Tensor(),
                                             tk.defined() ? matmul(q, tk.mT()) : Tensor());
    ds = mul(ds, scale);
    // (blocked pairs: the weights are 0 there, whatever dS is)
    Tensor dp = mul(weights, sub(ds, sum(mul(weights, ds), {-1}, /*keepdim=*/true)));
    t = matmul(keep.defined() ? mul(dp, keep) : dp, v);
  }
  if (tv.defined()) t = forward_detail::add_tangents(t, matmul(keep.defined() ? mul(weights, keep) : weights, tv));
  return t;
}

Tensor composed_attention_tangent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tq,
                                  const Tensor& tk, const Tensor& tv, const AttentionMask& mask, double scale,
                                  const Tensor& keep) {
  const Tensor weights = composed_attention(q, k, v, mask, scale, Tensor()).weights;
  return attention_tangent(q, k, v, tq, tk, tv, weights, keep, scale);
}

}  // namespace detail

// ------------------------------------------------------------------ choosing one
namespace {
thread_local AttentionImpl t_attention_impl = AttentionImpl::Auto;
}
AttentionImplGuard::AttentionImplGuard(AttentionImpl impl) : prev_(t_attention_impl) {
  if (impl != AttentionImpl::Auto && impl != AttentionImpl::Fused && impl != AttentionImpl::Tiled &&
      impl != AttentionImpl::Composed)
    fail("AttentionImplGuard", "unknown implementation ", (int)impl, " (expected Auto, Fused, Tiled or Composed)");
  t_attention_impl = impl;
}
AttentionImplGuard::~AttentionImplGuard() { t_attention_impl = prev_; }
AttentionImpl attention_impl() { return t_attention_impl; }

// ------------------------------------------------------------------ the fused op
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionMask& mask, double dropout_p, bool training,
                                             Generator* gen, double scale, Loc loc) {
  check_defined(q, "scaled_dot_product_attention", "q");
  check_defined(k, "scaled_dot_product_attention", "k");
  check_defined(v, "scaled_dot_product_attention", "v");
  const Geometry g = check_inputs(kOp, q, k, v, mask);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) fail(kOp, "dropout_p must be in [0, 1], got ", dropout_p);
  if (!std::isfinite(scale)) fail(kOp, "scale must be finite (0 for 1/sqrt(D)), got ", scale);
  const double sc = default_scale(scale, g.D);
  const DType dt = q.dtype();
  const int64_t rows = numel_of(g.batch) * g.L;

  // every operand carries the broadcast batch shape (stride 0 where broadcast)
  Tensor qe = q.detach().expand(g.with(g.L, g.D));
  Tensor ke = k.detach().expand(g.with(g.S, g.D));
  Tensor ve = v.detach().expand(g.with(g.S, g.Dv));

  Tensor p = empty(g.with(g.L, g.S), dt);  // raw scores, then the weights in place
  kernel::gemm_batched(p, qe, ke.mT());
  Tensor me;
  std::vector<int64_t> mask_rows;
  if (mask.defined()) {
    me = mask.blocked().expand(p.shape());
    mask_rows = kernel::row_starts(me);
  }
  dispatch_float(dt, kOp, [&](auto tag) {
    using T = decltype(tag);
    kernel::masked_softmax_rows(p.data<T>(), rows, g.S, T(sc), me.defined() ? me.data<uint8_t>() : nullptr,
                                mask_rows.data(), me.defined() ? me.stride(-1) : 0);
  });

  Tensor keep, pd = p;
  if (training && dropout_p > 0.0) {
    keep = detail::dropout_keep(p.shape(), dt,
                                DropoutDraws::take(gen ? *gen : default_generator(), dropout_p, p.shape()));
    NoGradGuard no_grad;
    pd = mul(p, keep);
  }
  Tensor out = empty(g.with(g.L, g.Dv), dt);
  kernel::gemm_batched(out, pd, ve);

  BackwardFn bw;
  std::vector<Tensor> saved;
  if (wants_grad(q, k, v)) {
    const bool gq = q.requires_grad(), gk = k.requires_grad(), gv = v.requires_grad();
    // save only what the needed gradients use
    Tensor saved_q = gk ? qe : Tensor(), saved_k = gq ? ke : Tensor(), saved_v = (gq || gk) ? ve : Tensor();
    saved = {p, saved_q, saved_k, saved_v};
    bw = [g, rows, sc, gq, gk, gv, p, keep, saved_q, saved_k, saved_v, xq = SavedTensor(q), xk = SavedTensor(k),
          xv = SavedTensor(v), mask](const Tensor& dout) {
      if (grad_enabled())  // recorded: differentiated as its composition is
        return backward_of_composition(
            [&](const std::vector<Tensor>& in) { return detail::composed_attention(in[0], in[1], in[2], mask, sc, keep).output; },
            {xq.get(), xk.get(), xv.get()}, dout);
      Tensor dq, dk, dv, ds;
      std::vector<kernel::Product> products;  // independent products run together
      if (gv) {
        Tensor pdrop = keep.defined() ? mul(p, keep) : p;
        dv = empty(g.with(g.S, g.Dv), dout.dtype());
        products.push_back({.c = dv, .a = pdrop.mT(), .b = dout});
      }
      if (gq || gk) {
        ds = empty(g.with(g.L, g.S), dout.dtype());
        products.push_back({.c = ds, .a = dout, .b = saved_v.mT()});
      }
      kernel::gemm_together(products);
      if (gq || gk) {
        dispatch_float(ds.dtype(), kOp, [&](auto tag) {
          using T = decltype(tag);
          kernel::masked_softmax_rows_backward(ds.data<T>(), p.data<T>(), keep.defined() ? keep.data<T>() : nullptr,
                                               rows, g.S, T(sc));
        });
        products.clear();
        if (gq) {
          dq = empty(g.with(g.L, g.D), dout.dtype());
          products.push_back({.c = dq, .a = ds, .b = saved_k});
        }
        if (gk) {
          dk = empty(g.with(g.S, g.D), dout.dtype());
          products.push_back({.c = dk, .a = ds.mT(), .b = saved_q});
        }
        kernel::gemm_together(products);
      }
      // broadcast batch dims are summed back to each input's shape by the engine
      return std::vector<Tensor>{dq, dk, dv};
    };
  }
  // The tangent from the weights in hand; composed (weights included) when it joins the
  // graph, so that it is differentiable backward as the ops' tangents are.
  auto jvp = [&](const std::vector<Tensor>& t) {
    if (wants_grad(q, k, v, t[0], t[1], t[2]))
      return detail::composed_attention_tangent(q, k, v, t[0], t[1], t[2], mask, sc, keep);
    return detail::attention_tangent(q, k, v, t[0], t[1], t[2], p, keep, sc);
  };
  out = record(kOp, loc, out, {q, k, v}, std::move(bw), saved, jvp);
  if (!saved.empty() && out.grad_fn()) out.grad_fn()->probs_dim = (int)p.dim() - 1;  // p is saved[0], fresh and dense
  return {out, p};
}

// ------------------------------------------------------------------ the reference
AttentionResult scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const AttentionMask& mask, double scale) {
  check_defined(q, "scaled_dot_product_attention_reference", "q");
  check_defined(k, "scaled_dot_product_attention_reference", "k");
  check_defined(v, "scaled_dot_product_attention_reference", "v");
  const char* op = "scaled_dot_product_attention_reference";
  const Geometry g = check_inputs(op, q, k, v, mask);
  detail::Composed c = detail::composed_attention(q, k, v, mask, default_scale(scale, g.D), Tensor());
  return {c.output, c.weights.detach()};
}

}  // namespace ember::nn
