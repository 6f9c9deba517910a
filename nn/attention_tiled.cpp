// The tiled attention op: an online softmax over blocks of keys (Milakov and Gimelshein
// 2018; Dao et al. 2022), the weights recomputed in backward from the saved log-sum-exp.
//
// Forward, per head and block of queries, over blocks of keys j:
//   s = scale * q k_j^T (blocked pairs -inf);  m' = max(m, rowmax s)
//   l = l * exp(m - m') + rowsum exp(s - m');  o = o * exp(m - m') + (exp(s - m') * keep) v_j
//   out = o / l,  lse = m + log l
// Backward, per head: delta = rowsum(dout * out); per block P = exp(scale * q k^T - lse),
//   dv += (P * keep)^T dout,  dP = (dout v^T) * keep,  dS = scale * P * (dP - delta),
//   dq += dS k,  dk += dS^T q.
#include <algorithm>
#include <array>
#include <optional>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/dispatch.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/gemm.h"
#include "core/parallel.h"
#include "core/vec.h"
#include "nn/attention.h"
#include "nn/attention_inputs.h"

namespace ember::nn {

using detail::check_inputs;
using detail::default_scale;
using detail::Geometry;
using kernel::Gemm;

namespace {

constexpr int64_t kQueryBlock = 64, kKeyBlock = 128;

// Where one attention call's operands lie: per head (a flat batch index), the first row
// of q, k, v, out and the mask, each with its row stride; columns are contiguous (the
// mask's column stride aside). A head may use fewer queries and keys than the call's L
// and S (rows of sequences of their own lengths, attention_rows): the others do not exist
// for it. Its output rows and its inputs' gradients may lie anywhere (the columns of a
// head in rows of all heads).
struct TiledGeometry {
  Geometry g;
  int64_t heads = 0;
  std::vector<int64_t> q0, k0, v0, mask_rows;  // mask_rows: one per (head, query)
  int64_t q_rs = 0, k_rs = 0, v_rs = 0, mask_cs = 0;
  const uint8_t* mask = nullptr;
  double scale = 1;
  // per head: its queries and keys (empty: L and S for every head)
  std::vector<int64_t> nq, nk;
  // per head: where its output, and its q, k and v gradients start; with their row strides
  std::vector<int64_t> out0, dq0, dk0, dv0;
  int64_t out_rs = 0, dq_rs = 0, dk_rs = 0, dv_rs = 0;
  // dropout: the decisions of ember::dropout on the weights [..., L, S]; query i and key j
  // of head h are at the grid's row h * L + q_pos[h][i] and column k_pos[h][j] (empty: i, j)
  bool dropout = false;
  DropoutDraws draws;
  std::vector<const int64_t*> q_pos, k_pos;
  // query i of head h sees only the keys j with k_at(h, j) <= q_at(h, i)
  bool causal = false;
  // the gradients' blocks are not zeroed beforehand: each head writes its own first, then
  // adds (heads' blocks must not overlap)
  bool write_grads = false;
  // the forward keeps the weights P (before dropout) for the backward, which then need not
  // compute them again: when every head's keys fit in one block (P is then at most
  // kKeyBlock values a query), row i of head h at (h * L + i) * S
  bool keep_weights = false;

  int64_t queries(int64_t h) const { return nq.empty() ? g.L : nq[(size_t)h]; }
  int64_t keys(int64_t h) const { return nk.empty() ? g.S : nk[(size_t)h]; }
  int64_t q_at(int64_t h, int64_t i) const { return q_pos.empty() ? i : q_pos[(size_t)h][i]; }
  int64_t k_at(int64_t h, int64_t j) const { return k_pos.empty() ? j : k_pos[(size_t)h][j]; }
  // a padded call's layout: every head's L rows of out, dq and its S rows of dk, dv in turn
  void contiguous_outputs() {
    out0.resize((size_t)heads), dq0.resize((size_t)heads), dk0.resize((size_t)heads), dv0.resize((size_t)heads);
    for (int64_t h = 0; h < heads; h++)
      out0[(size_t)h] = h * g.L * g.Dv, dq0[(size_t)h] = h * g.L * g.D, dk0[(size_t)h] = h * g.S * g.D,
      dv0[(size_t)h] = h * g.S * g.Dv;
    out_rs = g.Dv, dq_rs = g.D, dk_rs = g.D, dv_rs = g.Dv;
  }
  // the dropout keys of head h's query rows i0 .. i0 + n - 1
  void dropout_keys(int64_t h, int64_t i0, int64_t n, uint64_t* out) const {
    if (q_pos.empty()) return draws.row_keys(h * g.L + i0, n, out);
    for (int64_t i = 0; i < n; i++) out[i] = draws.row_key(h * g.L + q_at(h, i0 + i));
  }
  // the dropout factor of key column j (of the head's keys) in a row with this key
  template <class T>
  T factor(int64_t h, uint64_t key, int64_t j) const {
    return draws.factor<T>(key, k_at(h, j));
  }
};

// The first element of every head's matrix in t [batch.., R, C] (stride 0 where broadcast).
std::vector<int64_t> head_starts(const Tensor& t, int64_t heads) {
  std::vector<int64_t> rows = kernel::row_starts(t), out((size_t)heads);
  const int64_t R = t.size(-2);
  if (rows.empty()) return out;  // no rows (no keys): nothing is read
  for (int64_t h = 0; h < heads; h++) out[(size_t)h] = rows[(size_t)(h * R)];
  return out;
}

template <class F>
void over_tasks(int64_t tasks, double flops_each, F&& f) {
  if (worth_threads(tasks, flops_each * double(tasks), cost::kTaskSplitFlops)) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; t++) f(t);
  } else {
    for (int64_t t = 0; t < tasks; t++) f(t);
  }
}

// The data of every head, laid out as TiledGeometry says: the inputs, the output and
// its per-row log-sum-exp, and in backward the output's gradient and the inputs'.
template <class T>
struct Buffers {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  T *out = nullptr, *lse = nullptr;
  T* weights = nullptr;  // with keep_weights
  const T* dout = nullptr;
  T *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

// Row r's dropout factors for keys j0 .. j0 + n - 1 of head h, multiplied into x (and
// written to keep when it is not null).
template <class T>
void apply_keep(const TiledGeometry& tg, const DropoutDraws& draws, int64_t h, uint64_t key, int64_t j0, int64_t n,
                T* x, T* keep) {
  if (tg.k_pos.empty()) {
    if (keep) {
      for (int64_t c = 0; c < n; c++) keep[c] = draws.factor<T>(key, j0 + c);
      for (int64_t c = 0; c < n; c++) x[c] *= keep[c];
    } else {
      for (int64_t c = 0; c < n; c++) x[c] *= draws.factor<T>(key, j0 + c);
    }
    return;
  }
  const int64_t* pos = tg.k_pos[(size_t)h] + j0;
  for (int64_t c = 0; c < n; c++) {
    const T f = draws.factor<T>(key, pos[c]);
    if (keep) keep[c] = f;
    x[c] *= f;
  }
}

// One query block of one head: out rows and their log-sum-exp.
template <class T>
void tiled_forward_block(const TiledGeometry& tg, const Buffers<T>& b, int64_t h, int64_t i0) {
  const T *q = b.q, *k = b.k, *v = b.v;
  T *out = b.out, *lse = b.lse;
  const Geometry& g = tg.g;
  const int64_t L = tg.queries(h), S = tg.keys(h);
  if (i0 >= L) return;
  const int64_t nq = std::min(kQueryBlock, L - i0), Dv = g.Dv;
  std::vector<T> s((size_t)(nq * std::min(kKeyBlock, S))), o((size_t)(nq * Dv), T(0)), m((size_t)nq), l((size_t)nq, T(0));
  std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
  const T sc = T(tg.scale);
  const DropoutDraws draws = tg.draws;  // a local copy: the loops below vectorise
  std::vector<uint64_t> keys(tg.dropout ? (size_t)nq : 0);  // each query row's dropout key
  if (tg.dropout) tg.dropout_keys(h, i0, nq, keys.data());
  for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, S - j0);
    // s = q k^T
    kernel::gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = g.D, .a = q + tg.q0[h] + i0 * tg.q_rs, .lda = tg.q_rs,
                                .b = k + tg.k0[h] + j0 * tg.k_rs, .ldb = tg.k_rs, .trans_b = true, .c = s.data(),
                                .ldc = nk});
    for (int64_t r = 0; r < nq; r++) {
      T* x = s.data() + r * nk;
      const int64_t row = h * g.L + i0 + r;
      const uint8_t* blocked = tg.mask ? tg.mask + tg.mask_rows[(size_t)row] + j0 * tg.mask_cs : nullptr;
      if (blocked) {
        for (int64_t c = 0; c < nk; c++)
          x[c] = blocked[c * tg.mask_cs] ? -std::numeric_limits<T>::infinity() : x[c] * sc;
      } else {
        for (int64_t c = 0; c < nk; c++) x[c] *= sc;
      }
      if (tg.causal) {
        const int64_t at = tg.q_at(h, i0 + r);
        for (int64_t c = 0; c < nk; c++)
          if (tg.k_at(h, j0 + c) > at) x[c] = -std::numeric_limits<T>::infinity();
      }
      T* saved = tg.keep_weights ? b.weights + (h * g.L + i0 + r) * g.S : nullptr;  // (one key block: j0 = 0)
      const T m_new = std::max(m[(size_t)r], vec::lane_max(x, nk));
      if (m_new == -std::numeric_limits<T>::infinity()) {  // every key so far blocked
        std::fill(x, x + nk, T(0));
        if (saved) std::fill(saved, saved + nk, T(0));
        continue;
      }
      const T alpha = m[(size_t)r] == -std::numeric_limits<T>::infinity() ? T(0) : vec::exp(m[(size_t)r] - m_new);
      for (int64_t c = 0; c < nk; c++) x[c] = vec::exp(x[c] - m_new);  // exp(-inf) = 0
      l[(size_t)r] = l[(size_t)r] * alpha + vec::lane_sum<T>(nk, [&](int64_t c) { return x[c]; });
      m[(size_t)r] = m_new;
      T* orow = o.data() + r * Dv;
      if (j0 > 0)  // (o is still 0 in the first key block)
        for (int64_t c = 0; c < Dv; c++) orow[c] *= alpha;
      if (saved) {  // one key block: the row's sum is whole, and the weights normalised now
        const T lr = l[(size_t)r], inv = lr > 0 ? T(1) / lr : T(0);
        for (int64_t c = 0; c < nk; c++) saved[c] = x[c] * inv;
      }
      if (tg.dropout) apply_keep<T>(tg, draws, h, keys[(size_t)r], j0, nk, x, nullptr);
    }
    // o += p v
    kernel::gemm_serial(Gemm<T>{.M = nq, .N = Dv, .K = nk, .a = s.data(), .lda = nk, .b = v + tg.v0[h] + j0 * tg.v_rs,
                                .ldb = tg.v_rs, .c = o.data(), .ldc = Dv, .accumulate = true});
  }
  for (int64_t r = 0; r < nq; r++) {
    const T lr = l[(size_t)r], inv = lr > 0 ? T(1) / lr : T(0);
    T* dst = out + tg.out0[h] + (i0 + r) * tg.out_rs;
    for (int64_t c = 0; c < Dv; c++) dst[c] = o[(size_t)(r * Dv + c)] * inv;
    lse[h * g.L + i0 + r] = lr > 0 ? m[(size_t)r] + std::log(lr) : std::numeric_limits<T>::infinity();
  }
}

// One head's gradients, key block by key block, query block by query block.
template <class T>
void tiled_backward_head(const TiledGeometry& tg, const Buffers<T>& b, int64_t h) {
  const T *q = b.q, *k = b.k, *v = b.v, *out = b.out, *lse = b.lse, *dout = b.dout;
  T *dq = b.dq + tg.dq0[h], *dk = b.dk + tg.dk0[h], *dv = b.dv + tg.dv0[h];
  const Geometry& g = tg.g;
  const int64_t D = g.D, Dv = g.Dv, L = tg.queries(h), S = tg.keys(h);
  if (L == 0 || S == 0) {  // no weights: zero gradients
    if (tg.write_grads) {
      for (int64_t i = 0; i < L; i++) std::fill_n(dq + i * tg.dq_rs, D, T(0));
      for (int64_t j = 0; j < S; j++) std::fill_n(dk + j * tg.dk_rs, D, T(0)), std::fill_n(dv + j * tg.dv_rs, Dv, T(0));
    }
    return;
  }
  const T sc = T(tg.scale);
  const DropoutDraws draws = tg.draws;
  std::vector<uint64_t> keys(tg.dropout ? (size_t)L : 0);  // each query row's dropout key
  if (tg.dropout) tg.dropout_keys(h, 0, L, keys.data());
  std::vector<T> delta((size_t)L);  // sum_c dout * out per query: sum_j P_ij dP_ij
  for (int64_t i = 0; i < L; i++) {
    const T* a = dout + tg.out0[h] + i * tg.out_rs;
    const T* b = out + tg.out0[h] + i * tg.out_rs;
    delta[(size_t)i] = vec::lane_sum<T>(Dv, [&](int64_t c) { return a[c] * b[c]; });
  }
  // per block: the weights P, P * keep, the keep factors (0 or 1/(1-p)), and dP then dS
  const size_t block = (size_t)(std::min(kQueryBlock, L) * std::min(kKeyBlock, S));  // no larger than used
  std::vector<T> p(block), pd(block), keep(tg.dropout ? block : 0), dp(block);
  const T* qh = q + tg.q0[h];
  const T* kh = k + tg.k0[h];
  const T* vh = v + tg.v0[h];
  for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, S - j0);
    for (int64_t i0 = 0; i0 < L; i0 += kQueryBlock) {
      const int64_t nq = std::min(kQueryBlock, L - i0);
      // p = q k^T, unless the forward kept P
      if (!tg.keep_weights)
        kernel::gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = D, .a = qh + i0 * tg.q_rs, .lda = tg.q_rs,
                                    .b = kh + j0 * tg.k_rs, .ldb = tg.k_rs, .trans_b = true, .c = p.data(),
                                    .ldc = nk});
      for (int64_t r = 0; r < nq; r++) {  // the weights P, and Pd = P * keep
        const int64_t row = h * g.L + i0 + r;
        T* x = p.data() + r * nk;
        T* xd = pd.data() + r * nk;
        if (tg.keep_weights) {  // (read in place below; Pd from them)
          const T* saved = b.weights + row * g.S;
          std::copy(saved, saved + nk, xd);
          if (tg.dropout) apply_keep<T>(tg, draws, h, keys[(size_t)(i0 + r)], j0, nk, xd, keep.data() + r * nk);
          continue;
        }
        const T shift = lse[row];
        const uint8_t* blocked = tg.mask ? tg.mask + tg.mask_rows[(size_t)row] + j0 * tg.mask_cs : nullptr;
        for (int64_t c = 0; c < nk; c++) x[c] = vec::exp(x[c] * sc - shift);  // shift = inf: 0
        if (blocked)
          for (int64_t c = 0; c < nk; c++) x[c] = blocked[c * tg.mask_cs] ? T(0) : x[c];
        if (tg.causal) {
          const int64_t at = tg.q_at(h, i0 + r);
          for (int64_t c = 0; c < nk; c++)
            if (tg.k_at(h, j0 + c) > at) x[c] = T(0);
        }
        std::copy(x, x + nk, xd);
        if (tg.dropout) apply_keep<T>(tg, draws, h, keys[(size_t)(i0 + r)], j0, nk, xd, keep.data() + r * nk);
      }
      const T* dout_i = dout + tg.out0[h] + i0 * tg.out_rs;
      // dv += pd^T dout, dp = dout v^T
      kernel::gemm_serial(Gemm<T>{.M = nk, .N = Dv, .K = nq, .a = pd.data(), .lda = nk, .trans_a = true, .b = dout_i,
                                  .ldb = tg.out_rs, .c = dv + j0 * tg.dv_rs, .ldc = tg.dv_rs,
                                  .accumulate = i0 > 0 || !tg.write_grads});
      kernel::gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = Dv, .a = dout_i, .lda = tg.out_rs, .b = vh + j0 * tg.v_rs,
                                  .ldb = tg.v_rs, .trans_b = true, .c = dp.data(), .ldc = nk});
      for (int64_t r = 0; r < nq; r++) {  // dS = P * (dP - delta) * scale, dP = dPd * keep
        T* d = dp.data() + r * nk;
        const T* x = tg.keep_weights ? b.weights + (h * g.L + i0 + r) * g.S : p.data() + r * nk;
        const T* kf = tg.dropout ? keep.data() + r * nk : nullptr;
        const T dl = delta[(size_t)(i0 + r)];
        if (tg.dropout)
          for (int64_t c = 0; c < nk; c++) d[c] *= kf[c];
        for (int64_t c = 0; c < nk; c++) d[c] = sc * x[c] * (d[c] - dl);
      }
      // dq += ds k, dk += ds^T q
      kernel::gemm_serial(Gemm<T>{.M = nq, .N = D, .K = nk, .a = dp.data(), .lda = nk, .b = kh + j0 * tg.k_rs,
                                  .ldb = tg.k_rs, .c = dq + i0 * tg.dq_rs, .ldc = tg.dq_rs,
                                  .accumulate = j0 > 0 || !tg.write_grads});
      kernel::gemm_serial(Gemm<T>{.M = nk, .N = D, .K = nq, .a = dp.data(), .lda = nk, .trans_a = true,
                                  .b = qh + i0 * tg.q_rs, .ldb = tg.q_rs, .c = dk + j0 * tg.dk_rs, .ldc = tg.dk_rs,
                                  .accumulate = i0 > 0 || !tg.write_grads});
    }
  }
}

// Every head's forward (its query blocks shared out), and every head's backward.
template <class T>
void tiled_forward(const TiledGeometry& tg, const Buffers<T>& b) {
  const Geometry& g = tg.g;
  const int64_t qblocks = (g.L + kQueryBlock - 1) / kQueryBlock;
  const double flops = 2.0 * double(std::min(kQueryBlock, g.L)) * double(g.S) * double(g.D + g.Dv);
  over_tasks(tg.heads * qblocks, flops,
             [&](int64_t t) { tiled_forward_block<T>(tg, b, t / qblocks, (t % qblocks) * kQueryBlock); });
}
template <class T>
void tiled_backward(const TiledGeometry& tg, const Buffers<T>& b) {
  const Geometry& g = tg.g;
  const double flops = 4.0 * double(g.L) * double(g.S) * double(g.D + g.Dv);
  over_tasks(tg.heads, flops, [&](int64_t h) { tiled_backward_head<T>(tg, b, h); });
}

// A view in BLAS's layout - each row contiguous (stride 1), rows at least a row apart -
// copying only when it is not (a transposed view, or rows broadcast with stride 0).
Tensor rows_contiguous(const Tensor& t) {
  const bool rows = t.stride(-1) == 1 || t.size(-1) == 1;
  const bool apart = t.stride(-2) >= std::max<int64_t>(t.size(-1), 1);
  return rows && apart ? t : t.contiguous();
}

}  // namespace

Tensor scaled_dot_product_attention_tiled(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                          double dropout_p, bool training, Generator* gen, double scale, Loc loc) {
  check_defined(q, "scaled_dot_product_attention_tiled", "q");
  check_defined(k, "scaled_dot_product_attention_tiled", "k");
  check_defined(v, "scaled_dot_product_attention_tiled", "v");
  const char* op = "scaled_dot_product_attention_tiled";
  TiledGeometry tg;
  tg.g = check_inputs(op, q, k, v, mask);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) fail(op, "dropout_p must be in [0, 1], got ", dropout_p);
  if (!std::isfinite(scale)) fail(op, "scale must be finite (0 for 1/sqrt(D)), got ", scale);
  const Geometry& g = tg.g;
  tg.scale = default_scale(scale, g.D);
  tg.heads = numel_of(g.batch);
  const DType dt = q.dtype();
  Tensor qe = rows_contiguous(q.detach().expand(g.with(g.L, g.D)));
  Tensor ke = rows_contiguous(k.detach().expand(g.with(g.S, g.D)));
  Tensor ve = rows_contiguous(v.detach().expand(g.with(g.S, g.Dv)));
  tg.q_rs = qe.stride(-2), tg.k_rs = ke.stride(-2), tg.v_rs = ve.stride(-2);
  Tensor out = empty(g.with(g.L, g.Dv), dt), lse = empty({tg.heads * g.L}, dt);
  if (tg.heads == 0 || g.L == 0) return record(op, loc, out, {q, k, v}, nullptr);
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
  tg.keep_weights = grads && g.S <= kKeyBlock;
  Tensor weights = tg.keep_weights ? empty({tg.heads * g.L * g.S}, dt) : Tensor();
  dispatch_float(dt, op, [&](auto tag) {
    using T = decltype(tag);
    tiled_forward<T>(tg, {.q = qe.data<T>(), .k = ke.data<T>(), .v = ve.data<T>(), .out = out.data<T>(),
                          .lse = lse.data<T>(), .weights = weights.defined() ? weights.data<T>() : nullptr});
  });

  BackwardFn bw;
  if (grads) {
    Tensor saved_out = out.detach();
    bw = [tg, qe, ke, ve, me, lse, saved_out, weights, op, xq = SavedTensor(q), xk = SavedTensor(k),
          xv = SavedTensor(v), mask](const Tensor& dout_in) {
      const Geometry& g = tg.g;
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
        const Buffers<T> b{.q = qe.data<T>(), .k = ke.data<T>(), .v = ve.data<T>(), .out = saved_out.data<T>(),
                           .lse = lse.data<T>(), .weights = weights.defined() ? weights.data<T>() : nullptr,
                           .dout = dout.data<T>(), .dq = dq.data<T>(), .dk = dk.data<T>(), .dv = dv.data<T>()};
        tiled_backward<T>(tg, b);
      });
      // broadcast batch dims are summed back to each input's shape by the engine
      return std::vector<Tensor>{dq, dk, dv};
    };
  }
  return record(op, loc, out, {q, k, v}, std::move(bw), {qe, ke, ve, out, me});
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
Tensor composed_rows(const std::vector<Tensor>& in, const std::array<int, 3>& which, const std::array<int64_t, 3>& col,
                     int64_t heads, int64_t D, const Packing* q_packing, int64_t q_length, const Packing& kv_packing,
                     double scale, bool causal, const Tensor& keep) {
  const int64_t B = kv_packing.batch, E = heads * D;
  auto split = [&](int i, const Packing* p, int64_t length) {
    Tensor x = in[(size_t)which[(size_t)i]].narrow(1, col[(size_t)i], E);
    Tensor padded = p ? p->unpack(x) : x.reshape({B, length, E});
    return padded.view({B, padded.size(1), heads, D}).transpose(1, 2);
  };
  Tensor q = split(0, q_packing, q_length), k = split(1, &kv_packing, 0), v = split(2, &kv_packing, 0);
  AttentionMask mask = kv_packing.padding.reshape({B, 1, 1, kv_packing.length});
  if (causal) mask = mask | causal_mask(q.size(2), kv_packing.length);
  Tensor out = detail::composed_attention(q, k, v, mask, scale, keep).output;
  Tensor merged = out.transpose(1, 2).reshape({B, q.size(2), E});
  return q_packing ? q_packing->pack(merged) : merged.reshape({B * q.size(2), E});
}

}  // namespace

Tensor attention_rows(const AttentionRows& q, const AttentionRows& k, const AttentionRows& v, int64_t heads,
                      int64_t head_dim, const Packing* q_packing, int64_t q_length, const Packing& kv_packing,
                      double dropout_p, bool training, Generator* gen, double scale, bool causal, Loc loc) {
  const char* op = "attention_rows";
  const int64_t H = heads, D = head_dim, E = H * D, B = kv_packing.batch;
  if (H <= 0 || D <= 0) fail(op, "heads and head_dim must be positive, got ", H, " and ", D);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) fail(op, "dropout_p must be in [0, 1], got ", dropout_p);
  if (!std::isfinite(scale)) fail(op, "scale must be finite (0 for 1/sqrt(D)), got ", scale);
  if (q_packing && q_packing->batch != B)
    fail(op, "the query packing has batch ", q_packing->batch, ", the key and value packing ", B);
  if (!q_packing && q_length < 0) fail(op, "q_length must not be negative, got ", q_length);
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
    if (t.dim() != 2 || t.size(0) != want || c < 0 || c + E > t.size(1))
      fail(op, "expected ", names[i], " rows [", want, ", >= ", c + E, "] (", H, " heads of ", D, " from column ", c,
           "), got shape ", t.shape());
    if (t.dtype() != q.rows.dtype() || !is_floating(t.dtype()))
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
  TiledGeometry tg;
  tg.g.batch = {B, H};
  tg.g.L = q_packing ? q_packing->length : q_length, tg.g.S = kv_packing.length, tg.g.D = D, tg.g.Dv = D;
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
    tg.draws = DropoutDraws::take(gen ? *gen : default_generator(), dropout_p, {B, H, tg.g.L, tg.g.S});
  }
  const DType dt = q.rows.dtype();
  Tensor out = empty({NQ, E}, dt), lse = empty({tg.heads * tg.g.L}, dt);
  const bool grads = wants_grad_list(in);
  tg.keep_weights = grads && tg.g.S <= kKeyBlock;
  Tensor weights = tg.keep_weights ? empty({tg.heads * tg.g.L * tg.g.S}, dt) : Tensor();
  dispatch_float(dt, op, [&](auto tag) {  // (queries of a sequence without keys get zero rows, as in the padded op)
    using T = decltype(tag);
    tiled_forward<T>(tg, {.q = dq_src.data<T>(), .k = dk_src.data<T>(), .v = dv_src.data<T>(), .out = out.data<T>(),
                          .lse = lse.data<T>(), .weights = weights.defined() ? weights.data<T>() : nullptr});
  });

  BackwardFn bw;
  if (grads) {
    Tensor saved_out = out.detach();  // not out itself: its node would hold it (a cycle)
    const Packing kvp = kv_packing;
    const std::optional<Packing> qp = q_packing ? std::optional<Packing>(*q_packing) : std::nullopt;
    std::vector<SavedTensor> saved_in(in.begin(), in.end());
    // the dropout positions tg points into live as long as the backward
    bw = [tg, data, which, col, lse, saved_out, weights, saved_in, kvp, qp, q_length, op, q_pos = qs.positions,
          k_pos = ks.positions](const Tensor& dout_in) {
      std::vector<Tensor> xs;
      for (auto& s : saved_in) xs.push_back(s.get());
      if (grad_enabled()) {  // recorded: differentiated as its composition is, same dropout decisions
        const Shape grid{tg.g.batch[0], tg.g.batch[1], tg.g.L, tg.g.S};
        Tensor keep = tg.dropout ? detail::dropout_keep(grid, dout_in.dtype(), tg.draws) : Tensor();
        return backward_of_composition(
            [&](const std::vector<Tensor>& x) {
              return composed_rows(x, which, col, tg.g.batch[1], tg.g.D, qp ? &*qp : nullptr, q_length, kvp,
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
        const Buffers<T> b{.q = data[(size_t)which[0]].data<T>(), .k = data[(size_t)which[1]].data<T>(),
                           .v = data[(size_t)which[2]].data<T>(), .out = saved_out.data<T>(), .lse = lse.data<T>(),
                           .weights = weights.defined() ? weights.data<T>() : nullptr, .dout = dout.data<T>(),
                           .dq = grads[(size_t)which[0]].data<T>(), .dk = grads[(size_t)which[1]].data<T>(),
                           .dv = grads[(size_t)which[2]].data<T>()};
        tiled_backward<T>(tg, b);
      });
      return grads;
    };
  }
  std::vector<Tensor> keep_alive = data;
  keep_alive.push_back(out);
  return record(op, loc, out, in, std::move(bw), keep_alive);
}

}  // namespace ember::nn
