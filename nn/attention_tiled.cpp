// The tiled attention ops: scaled_dot_product_attention_tiled over padded [..., L, D]
// tensors, and attention_rows over packed rows (sequences of their own lengths). Both lay
// their operands out for the tiled kernel (core/kernels/attention_tiles.h: an online
// softmax over blocks of keys, the weights recomputed in backward from the saved
// log-sum-exp) and record its backward and its forward-mode rule (the tangent by the
// kernel's second pass, from the same log-sum-exp).
#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/attention_tiles.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/elementwise.h"
#include "nn/attention.h"
#include "nn/attention_inputs.h"

namespace ember::nn {

using detail::check_inputs;
using detail::default_scale;
using detail::Geometry;
using kernel::AttentionBuffers;
using kernel::AttentionTangentBuffers;
using kernel::AttentionTangentTiles;
using kernel::AttentionTiles;
using kernel::kAttentionKeyBlock;

namespace {

// The first element of every head's matrix in t [batch.., R, C] (stride 0 where broadcast).
std::vector<int64_t> head_starts(const Tensor& t, int64_t heads) {
  std::vector<int64_t> rows = kernel::row_starts(t), out((size_t)heads);
  const int64_t R = t.size(-2);
  if (rows.empty()) return out;  // no rows (no keys): nothing is read
  for (int64_t h = 0; h < heads; h++) out[(size_t)h] = rows[(size_t)(h * R)];
  return out;
}

// A view in BLAS's layout - each row contiguous (stride 1), rows at least a row apart -
// copying only when it is not (a transposed view, or rows broadcast with stride 0).
Tensor rows_contiguous(const Tensor& t) {
  const bool rows = t.stride(-1) == 1 || t.size(-1) == 1;
  const bool apart = t.stride(-2) >= std::max<int64_t>(t.size(-1), 1);
  return rows && apart ? t : t.contiguous();
}

// The backward of a tangent the kernel computed, for when the tangent joins the graph:
// the gradients of composed (the same tangent composed of ops) at the saved inputs for
// upstream g. In a plain backward (grad mode off) on a graph of its own, built here and
// dropped after, whose [L, S] blocks live only while it runs.
std::vector<Tensor> tangent_backward(const std::function<Tensor(const std::vector<Tensor>&)>& composed,
                                     const std::vector<SavedTensor>& saved, const std::vector<bool>& needs,
                                     const Tensor& g) {
  const bool plain = !grad_enabled();
  std::vector<Tensor> xs;
  for (size_t i = 0; i < saved.size(); i++) {
    Tensor x = saved[i].get();
    if (plain && x.defined() && needs[i]) x = x.detach().requires_grad_();
    xs.push_back(x);
  }
  GradModeGuard on(true);
  std::vector<Tensor> r = backward_of_composition(composed, xs, g);
  if (plain)
    for (Tensor& t : r)
      if (t.defined()) t = t.detach();
  return r;
}

// Records tout, a tangent computed without a graph from ins, as one node whose backward
// is tangent_backward's.
Tensor record_tangent(const char* op, const Loc& loc, const Tensor& tout, const std::vector<Tensor>& ins,
                      std::function<Tensor(const std::vector<Tensor>&)> composed) {
  std::vector<SavedTensor> saved(ins.begin(), ins.end());
  std::vector<bool> needs;
  for (const Tensor& x : ins) needs.push_back(x.defined() && x.requires_grad());
  return record(op, loc, tout, ins,
                [saved, needs, composed = std::move(composed)](const Tensor& g) {
                  return tangent_backward(composed, saved, needs, g);
                },
                ins);
}

}  // namespace

Tensor scaled_dot_product_attention_tiled(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                          double dropout_p, bool training, Generator* gen, double scale, Loc loc) {
  check_defined(q, "scaled_dot_product_attention_tiled", "q");
  check_defined(k, "scaled_dot_product_attention_tiled", "k");
  check_defined(v, "scaled_dot_product_attention_tiled", "v");
  const char* op = "scaled_dot_product_attention_tiled";
  const Geometry g = check_inputs(op, q, k, v, mask);
  AttentionTiles tg;
  tg.L = g.L, tg.S = g.S, tg.D = g.D, tg.Dv = g.Dv;
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) fail(op, "dropout_p must be in [0, 1], got ", dropout_p);
  if (!std::isfinite(scale)) fail(op, "scale must be finite (0 for 1/sqrt(D)), got ", scale);
  tg.scale = default_scale(scale, g.D);
  tg.heads = numel_of(g.batch);
  const DType dt = q.dtype();
  Tensor qe = rows_contiguous(q.detach().expand(g.with(g.L, g.D)));
  Tensor ke = rows_contiguous(k.detach().expand(g.with(g.S, g.D)));
  Tensor ve = rows_contiguous(v.detach().expand(g.with(g.S, g.Dv)));
  tg.q_rs = qe.stride(-2), tg.k_rs = ke.stride(-2), tg.v_rs = ve.stride(-2);
  Tensor out = empty(g.with(g.L, g.Dv), dt), lse = empty({tg.heads * g.L}, dt);
  if (tg.heads == 0 || g.L == 0)  // an empty output: an empty tangent
    return record(op, loc, out, {q, k, v}, nullptr, {}, [&](const std::vector<Tensor>&) { return zeros_like(out); });
  tg.q0 = head_starts(qe, tg.heads), tg.k0 = head_starts(ke, tg.heads), tg.v0 = head_starts(ve, tg.heads);
  tg.contiguous_outputs();
  tg.write_grads = true;  // every head has blocks of its own
  Tensor me;
  if (mask.defined()) {
    me = mask.blocked().expand(g.with(g.L, g.S));
    tg.mask_rows = kernel::row_starts(me);
    tg.mask_cs = me.stride(-1);
    tg.mask = me.data<uint8_t>();
  }
  if (training && dropout_p > 0.0) {
    tg.dropout = true;
    tg.draws = DropoutDraws::take(gen ? *gen : default_generator(), dropout_p, g.with(g.L, g.S));
  }
  const bool grads = wants_grad(q, k, v);
  tg.keep_weights = grads && g.S <= kAttentionKeyBlock;
  Tensor weights = tg.keep_weights ? empty({tg.heads * g.L * g.S}, dt) : Tensor();
  dispatch_float(dt, op, [&](auto tag) {
    using T = decltype(tag);
    kernel::attention_tiles_forward(
        tg, AttentionBuffers<T>{.q = qe.data<T>(), .k = ke.data<T>(), .v = ve.data<T>(), .out = out.data<T>(),
                                .lse = lse.data<T>(), .weights = weights.defined() ? weights.data<T>() : nullptr});
  });

  BackwardFn bw;
  if (grads) {
    Tensor saved_out = out.detach();
    bw = [tg, g, qe, ke, ve, me, lse, saved_out, weights, op, xq = SavedTensor(q), xk = SavedTensor(k),
          xv = SavedTensor(v), mask](const Tensor& dout_in) {
      if (grad_enabled()) {  // recorded: differentiated as its composition is, same dropout decisions
        Tensor keep = tg.dropout ? detail::dropout_keep(g.with(g.L, g.S), dout_in.dtype(), tg.draws) : Tensor();
        return backward_of_composition(
            [&](const std::vector<Tensor>& in) {
              return detail::composed_attention(in[0], in[1], in[2], mask, tg.scale, keep).output;
            },
            {xq.get(), xk.get(), xv.get()}, dout_in);
      }
      Tensor dout = dout_in.contiguous();
      Tensor dq = empty(g.with(g.L, g.D), dout.dtype()), dk = empty(g.with(g.S, g.D), dout.dtype()),
             dv = empty(g.with(g.S, g.Dv), dout.dtype());
      dispatch_float(dout.dtype(), op, [&](auto tag) {
        using T = decltype(tag);
        const AttentionBuffers<T> b{.q = qe.data<T>(), .k = ke.data<T>(), .v = ve.data<T>(),
                                    .out = saved_out.data<T>(), .lse = lse.data<T>(),
                                    .weights = weights.defined() ? weights.data<T>() : nullptr,
                                    .dout = dout.data<T>(), .dq = dq.data<T>(), .dk = dk.data<T>(), .dv = dv.data<T>()};
        kernel::attention_tiles_backward(tg, b);
      });
      // broadcast batch dims are summed back to each input's shape by the engine
      return std::vector<Tensor>{dq, dk, dv};
    };
  }
  // The tangent by the tiled kernel, from the saved log-sum-exp (no [L, S] block kept);
  // when it joins the graph, one node whose backward is that of the composed tangent.
  auto jvp = [&](const std::vector<Tensor>& t) {
    AttentionTangentTiles tt;
    const std::array<Shape, 3> shapes{g.with(g.L, g.D), g.with(g.S, g.D), g.with(g.S, g.Dv)};
    std::array<Tensor, 3> te;  // each tangent in the operands' broadcast shape, rows contiguous
    for (size_t i = 0; i < 3; i++)
      if (t[i].defined()) te[i] = rows_contiguous(t[i].detach().expand(shapes[i]));
    if (te[0].defined()) tt.q0 = head_starts(te[0], tg.heads), tt.q_rs = te[0].stride(-2);
    if (te[1].defined()) tt.k0 = head_starts(te[1], tg.heads), tt.k_rs = te[1].stride(-2);
    if (te[2].defined()) tt.v0 = head_starts(te[2], tg.heads), tt.v_rs = te[2].stride(-2);
    Tensor tout = empty(out.shape(), dt);
    dispatch_float(dt, op, [&](auto tag) {
      using T = decltype(tag);
      auto ptr = [](const Tensor& x) { return x.defined() ? x.data<T>() : nullptr; };
      kernel::attention_tiles_jvp(tg, tt,
                                  AttentionTangentBuffers<T>{.q = qe.data<T>(), .k = ke.data<T>(), .v = ve.data<T>(),
                                                             .out = out.data<T>(), .lse = lse.data<T>(),
                                                             .tq = ptr(te[0]), .tk = ptr(te[1]), .tv = ptr(te[2]),
                                                             .tout = tout.data<T>()});
    });
    if (!wants_grad(q, k, v, t[0], t[1], t[2])) return tout;
    const Shape out_shape = out.shape();
    return record_tangent("scaled_dot_product_attention_tiled_jvp", loc, tout, {q, k, v, t[0], t[1], t[2]},
                          [mask, tg, g, out_shape, dt](const std::vector<Tensor>& x) {
                            Tensor keep = tg.dropout ? detail::dropout_keep(g.with(g.L, g.S), dt, tg.draws) : Tensor();
                            return detail::composed_attention_tangent(x[0], x[1], x[2], x[3], x[4], x[5], mask,
                                                                      tg.scale, keep)
                                .expand(out_shape);
                          });
  };
  return record(op, loc, out, {q, k, v}, std::move(bw), {qe, ke, ve, out, me}, jvp);
}

// ------------------------------------------------------------------ attention over rows
namespace {

// Where each sequence's rows start in a packed batch, how many it has, and their positions.
struct SequenceRows {
  std::vector<int64_t> start, count;
  Tensor positions;         // int64 [N] (undefined: 0, 1, ... in every sequence)
  bool in_order = true;     // every sequence's positions are 0, 1, ...
};

// A Packing's fields are public: what Packing::of makes is checked before its rows are
// read through raw pointers (B, S >= 0; rows int64 [N], increasing, in [0, B * S);
// positions int64 [N], each its row's position).
SequenceRows sequences_of(const Packing& p) {
  const char* op = "attention_rows";
  if (p.batch < 0 || p.length < 0 || p.count < 0 || (p.length == 0 && p.count > 0))
    fail(op, "a Packing of batch ", p.batch, ", length ", p.length, " and count ", p.count, " is not one Packing::of makes");
  for (const Tensor* t : {&p.rows, &p.positions}) {
    check_defined(*t, op, t == &p.rows ? "the Packing's rows" : "the Packing's positions");
    if (t->dtype() != kInt64 || t->shape() != Shape{p.count})
      fail(op, "expected the Packing's ", t == &p.rows ? "rows" : "positions", " int64 [", p.count, "], got ",
           dtype_name(t->dtype()), " ", t->shape());
  }
  SequenceRows r;
  r.start.assign((size_t)p.batch, 0), r.count.assign((size_t)p.batch, 0);
  Tensor rows = p.rows.contiguous(), pos = p.positions.contiguous();
  const int64_t* at = rows.data<int64_t>();
  const int64_t* ps = pos.data<int64_t>();
  for (int64_t n = 0; n < p.count; n++)
    if (at[n] < 0 || at[n] / p.length >= p.batch || (n > 0 && at[n] <= at[n - 1]) || ps[n] != at[n] % p.length)
      fail(op, "the Packing's row ", n, " (position ", at[n], ", at ", ps[n], ") is not what Packing::of makes for batch ",
           p.batch, " and length ", p.length);
  for (int64_t n = p.count; n-- > 0;) {
    const int64_t b = at[n] / p.length;
    r.start[(size_t)b] = n, r.count[(size_t)b]++;
  }
  for (int64_t b = 0; b < p.batch; b++)
    for (int64_t i = 0; i < r.count[(size_t)b]; i++) r.in_order &= ps[r.start[(size_t)b] + i] == i;
  if (!r.in_order) r.positions = pos;
  for (int64_t b = 1; b < p.batch; b++)  // sequences without rows start where the next would
    if (r.count[(size_t)b] == 0) r.start[(size_t)b] = r.start[(size_t)b - 1] + r.count[(size_t)b - 1];
  return r;
}

SequenceRows padded_sequences(int64_t batch, int64_t length) {
  SequenceRows r;
  for (int64_t b = 0; b < batch; b++) r.start.push_back(b * length), r.count.push_back(length);
  return r;
}

// Whether the operands' column blocks [col, col + E) tile each input's columns: no two
// overlap and none is left out. Then every gradient element belongs to one head's block
// (every row is some sequence's) and the heads write them without zeroing first.
bool blocks_tile(const std::vector<Tensor>& in, const std::array<int, 3>& which, const std::array<int64_t, 3>& col,
                 int64_t E) {
  for (size_t t = 0; t < in.size(); t++) {
    std::vector<int64_t> starts;
    for (int i = 0; i < 3; i++)
      if (which[(size_t)i] == (int)t) starts.push_back(col[(size_t)i]);
    std::sort(starts.begin(), starts.end());
    for (size_t i = 0; i < starts.size(); i++)
      if (starts[i] != int64_t(i) * E) return false;
    if (int64_t(starts.size()) * E != in[t].size(1)) return false;
  }
  return true;
}

// The padded computation attention_rows stands for, composed of differentiable ops on its
// distinct inputs: what it is checked against, and differentiated through under create_graph.
// Given the inputs' tangents (undefined: zero), the output's tangent instead, composed too.
Tensor composed_rows(const std::vector<Tensor>& in, const std::array<int, 3>& which, const std::array<int64_t, 3>& col,
                     int64_t heads, int64_t D, const Packing* q_packing, int64_t q_length, const Packing& kv_packing,
                     double scale, bool causal, const Tensor& keep, const std::vector<Tensor>* tangents = nullptr) {
  const int64_t B = kv_packing.batch, E = heads * D;
  auto split = [&](const std::vector<Tensor>& from, int i, const Packing* p, int64_t length) {
    const Tensor& whole = from[(size_t)which[(size_t)i]];
    if (!whole.defined()) return Tensor();
    Tensor x = whole.narrow(1, col[(size_t)i], E);
    Tensor padded = p ? p->unpack(x) : x.reshape({B, length, E});
    return padded.view({B, padded.size(1), heads, D}).transpose(1, 2);
  };
  Tensor q = split(in, 0, q_packing, q_length), k = split(in, 1, &kv_packing, 0), v = split(in, 2, &kv_packing, 0);
  AttentionMask mask = kv_packing.padding.reshape({B, 1, 1, kv_packing.length});
  if (causal) mask = mask | causal_mask(q.size(2), kv_packing.length);
  Tensor out;
  if (tangents) {
    const std::vector<Tensor>& t = *tangents;
    out = detail::composed_attention_tangent(q, k, v, split(t, 0, q_packing, q_length), split(t, 1, &kv_packing, 0),
                                             split(t, 2, &kv_packing, 0), mask, scale, keep)
              .expand({B, heads, q.size(2), D});
  } else {
    out = detail::composed_attention(q, k, v, mask, scale, keep).output;
  }
  Tensor merged = out.transpose(1, 2).reshape({B, q.size(2), E});
  return q_packing ? q_packing->pack(merged) : merged.reshape({B * q.size(2), E});
}

}  // namespace

Tensor attention_rows(const AttentionRows& q, const AttentionRows& k, const AttentionRows& v, int64_t heads,
                      int64_t head_dim, const Packing* q_packing, int64_t q_length, const Packing& kv_packing,
                      double dropout_p, bool training, Generator* gen, double scale, bool causal, Loc loc) {
  const char* op = "attention_rows";
  const int64_t H = heads, D = head_dim, B = kv_packing.batch;
  if (H <= 0 || D <= 0) fail(op, "heads and head_dim must be positive, got ", H, " and ", D);
  const int64_t E = checked_numel({H, D}, op);  // no product below can overflow once these are checked
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) fail(op, "dropout_p must be in [0, 1], got ", dropout_p);
  if (!std::isfinite(scale)) fail(op, "scale must be finite (0 for 1/sqrt(D)), got ", scale);
  if (q_packing && q_packing->batch != B)
    fail(op, "the query packing has batch ", q_packing->batch, ", the key and value packing ", B);
  if (!q_packing && q_length < 0) fail(op, "q_length must not be negative, got ", q_length);
  checked_numel({B, H, std::max(q_packing ? q_packing->length : q_length, kv_packing.length)}, op);
  const int64_t NQ = q_packing ? q_packing->count : B * q_length, NK = kv_packing.count;
  const int64_t grid_L = q_packing ? q_packing->length : q_length;
  if (causal && grid_L != kv_packing.length)
    fail(op, "causal attention needs queries and keys of one padded length, got ", grid_L, " and ",
         kv_packing.length);
  const std::array<const AttentionRows*, 3> operand{&q, &k, &v};
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    const Tensor& t = operand[(size_t)i]->rows;
    const int64_t want = i == 0 ? NQ : NK, c = operand[(size_t)i]->col;
    check_defined(t, op, names[i]);
    if (t.dim() != 2 || t.size(0) != want || c < 0 || c > t.size(1) - E)
      fail(op, "expected ", names[i], " rows [", want, ", >= ", c > INT64_MAX - E ? "2^63" : std::to_string(c + E), "] (", H, " heads of ", D, " from column ", c,
           "), got shape ", t.shape());
    if (t.dtype() != q.rows.dtype() || !is_computing_float(t.dtype()))
      fail(op, "expected float32 or float64 q, k and v of one dtype, got ", dtype_name(q.rows.dtype()), ", ",
           dtype_name(k.rows.dtype()), " and ", dtype_name(v.rows.dtype()));
  }
  // the distinct input tensors, and which one each operand reads
  std::vector<Tensor> in;
  std::array<int, 3> which{};
  for (int i = 0; i < 3; i++) {
    const Tensor& t = operand[(size_t)i]->rows;
    int found = -1;
    for (size_t j = 0; j < in.size(); j++)
      if (in[j].impl() == t.impl()) found = (int)j;
    if (found < 0) found = (int)in.size(), in.push_back(t);
    which[(size_t)i] = found;
  }
  const std::array<int64_t, 3> col{q.col, k.col, v.col};
  std::vector<Tensor> data;  // each row contiguous, rows apart (BLAS's layout)
  for (auto& t : in) {
    const Tensor x = t.detach();
    data.push_back(x.stride(1) == 1 && x.stride(0) >= x.size(1) ? x : x.contiguous());
  }

  const SequenceRows qs = q_packing ? sequences_of(*q_packing) : padded_sequences(B, q_length),
                     ks = sequences_of(kv_packing);
  AttentionTiles tg;
  tg.L = q_packing ? q_packing->length : q_length, tg.S = kv_packing.length, tg.D = D, tg.Dv = D;
  tg.heads = B * H;
  tg.scale = default_scale(scale, D);
  tg.causal = causal;
  tg.write_grads = blocks_tile(in, which, col, E);
  const Tensor& dq_src = data[(size_t)which[0]];
  const Tensor& dk_src = data[(size_t)which[1]];
  const Tensor& dv_src = data[(size_t)which[2]];
  tg.q_rs = dq_src.stride(0), tg.k_rs = dk_src.stride(0), tg.v_rs = dv_src.stride(0), tg.out_rs = E;
  // gradients go to contiguous tensors of the inputs' shapes
  tg.dq_rs = in[(size_t)which[0]].size(1), tg.dk_rs = in[(size_t)which[1]].size(1), tg.dv_rs = in[(size_t)which[2]].size(1);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t qr = qs.start[(size_t)b], kr = ks.start[(size_t)b];
      tg.nq.push_back(qs.count[(size_t)b]), tg.nk.push_back(ks.count[(size_t)b]);
      tg.q0.push_back(qr * tg.q_rs + q.col + h * D), tg.k0.push_back(kr * tg.k_rs + k.col + h * D);
      tg.v0.push_back(kr * tg.v_rs + v.col + h * D), tg.out0.push_back(qr * E + h * D);
      tg.dq0.push_back(qr * tg.dq_rs + q.col + h * D), tg.dk0.push_back(kr * tg.dk_rs + k.col + h * D);
      tg.dv0.push_back(kr * tg.dv_rs + v.col + h * D);
      if (!qs.in_order) tg.q_pos.push_back(qs.positions.data<int64_t>() + qr);
      if (!ks.in_order) tg.k_pos.push_back(ks.positions.data<int64_t>() + kr);
    }
  if (training && dropout_p > 0.0) {
    tg.dropout = true;
    tg.draws = DropoutDraws::take(gen ? *gen : default_generator(), dropout_p, {B, H, tg.L, tg.S});
  }
  const DType dt = q.rows.dtype();
  Tensor out = empty({NQ, E}, dt), lse = empty({tg.heads * tg.L}, dt);
  const bool grads = wants_grad_list(in);
  tg.keep_weights = grads && tg.S <= kAttentionKeyBlock;
  Tensor weights = tg.keep_weights ? empty({tg.heads * tg.L * tg.S}, dt) : Tensor();
  dispatch_float(dt, op, [&](auto tag) {  // (queries of a sequence without keys get zero rows, as in the padded op)
    using T = decltype(tag);
    kernel::attention_tiles_forward(
        tg, AttentionBuffers<T>{.q = dq_src.data<T>(), .k = dk_src.data<T>(), .v = dv_src.data<T>(),
                                .out = out.data<T>(), .lse = lse.data<T>(),
                                .weights = weights.defined() ? weights.data<T>() : nullptr});
  });

  BackwardFn bw;
  if (grads) {
    Tensor saved_out = out.detach();  // not out itself: its node would hold it (a cycle)
    const Packing kvp = kv_packing;
    const std::optional<Packing> qp = q_packing ? std::optional<Packing>(*q_packing) : std::nullopt;
    std::vector<SavedTensor> saved_in(in.begin(), in.end());
    // the dropout positions tg points into live as long as the backward
    bw = [tg, B, H, data, which, col, lse, saved_out, weights, saved_in, kvp, qp, q_length, op, q_pos = qs.positions,
          k_pos = ks.positions](const Tensor& dout_in) {
      std::vector<Tensor> xs;
      for (auto& s : saved_in) xs.push_back(s.get());
      if (grad_enabled()) {  // recorded: differentiated as its composition is, same dropout decisions
        const Shape grid{B, H, tg.L, tg.S};
        Tensor keep = tg.dropout ? detail::dropout_keep(grid, dout_in.dtype(), tg.draws) : Tensor();
        return backward_of_composition(
            [&](const std::vector<Tensor>& x) {
              return composed_rows(x, which, col, H, tg.D, qp ? &*qp : nullptr, q_length, kvp,
                                   tg.scale, tg.causal, keep);
            },
            xs, dout_in);
      }
      Tensor dout = dout_in.contiguous();
      std::vector<Tensor> grads;
      for (auto& x : xs)
        grads.push_back(tg.write_grads ? empty(x.shape(), dout.dtype()) : zeros(x.shape(), dout.dtype()));
      dispatch_float(dout.dtype(), op, [&](auto tag) {
        using T = decltype(tag);
        const AttentionBuffers<T> b{.q = data[(size_t)which[0]].data<T>(), .k = data[(size_t)which[1]].data<T>(),
                                    .v = data[(size_t)which[2]].data<T>(), .out = saved_out.data<T>(),
                                    .lse = lse.data<T>(), .weights = weights.defined() ? weights.data<T>() : nullptr,
                                    .dout = dout.data<T>(), .dq = grads[(size_t)which[0]].data<T>(),
                                    .dk = grads[(size_t)which[1]].data<T>(), .dv = grads[(size_t)which[2]].data<T>()};
        kernel::attention_tiles_backward(tg, b);
      });
      return grads;
    };
  }
  // The tangent by the tiled kernel, from the saved log-sum-exp, each tangent read where
  // its input's operand is; when it joins the graph, one node whose backward is that of
  // the composed tangent.
  auto jvp = [&](const std::vector<Tensor>& t) {
    std::vector<Tensor> td;  // the tangents in BLAS's layout
    for (const Tensor& x : t) {
      const Tensor y = x.defined() ? x.detach() : Tensor();
      td.push_back(!y.defined() || (y.stride(1) == 1 && y.stride(0) >= y.size(1)) ? y : y.contiguous());
    }
    const Tensor &tq = td[(size_t)which[0]], &tk = td[(size_t)which[1]], &tv = td[(size_t)which[2]];
    AttentionTangentTiles tt;
    tt.q_rs = tq.defined() ? tq.stride(0) : 0, tt.k_rs = tk.defined() ? tk.stride(0) : 0;
    tt.v_rs = tv.defined() ? tv.stride(0) : 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++) {
        const int64_t qr = qs.start[(size_t)b], kr = ks.start[(size_t)b];
        if (tq.defined()) tt.q0.push_back(qr * tt.q_rs + q.col + h * D);
        if (tk.defined()) tt.k0.push_back(kr * tt.k_rs + k.col + h * D);
        if (tv.defined()) tt.v0.push_back(kr * tt.v_rs + v.col + h * D);
      }
    Tensor tout = empty({NQ, E}, dt);
    dispatch_float(dt, op, [&](auto tag) {
      using T = decltype(tag);
      auto ptr = [](const Tensor& x) { return x.defined() ? x.data<T>() : nullptr; };
      kernel::attention_tiles_jvp(tg, tt,
                                  AttentionTangentBuffers<T>{.q = dq_src.data<T>(), .k = dk_src.data<T>(),
                                                             .v = dv_src.data<T>(), .out = out.data<T>(),
                                                             .lse = lse.data<T>(), .tq = ptr(tq), .tk = ptr(tk),
                                                             .tv = ptr(tv), .tout = tout.data<T>()});
    });
    std::vector<Tensor> ins = in;
    ins.insert(ins.end(), t.begin(), t.end());
    if (!wants_grad_list(ins)) return tout;
    const Packing kvp = kv_packing;
    const std::optional<Packing> qp = q_packing ? std::optional<Packing>(*q_packing) : std::nullopt;
    const size_t n = in.size();
    return record_tangent("attention_rows_jvp", loc, tout, ins,
                          [n, which, col, H, D, qp, q_length, kvp, tg, B, dt](const std::vector<Tensor>& x) {
                            const std::vector<Tensor> xs(x.begin(), x.begin() + (long)n), ts(x.begin() + (long)n, x.end());
                            Tensor keep = tg.dropout ? detail::dropout_keep({B, H, tg.L, tg.S}, dt, tg.draws) : Tensor();
                            return composed_rows(xs, which, col, H, D, qp ? &*qp : nullptr, q_length, kvp, tg.scale,
                                                 tg.causal, keep, &ts);
                          });
  };
  std::vector<Tensor> keep_alive = data;
  keep_alive.push_back(out);
  return record(op, loc, out, in, std::move(bw), keep_alive, jvp);
}

}  // namespace ember::nn
