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
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels.h"
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
  std::vector<T> s((size_t)(nq * kKeyBlock)), o((size_t)(nq * Dv), T(0)), m((size_t)nq), l((size_t)nq, T(0));
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
      const T m_new = std::max(m[(size_t)r], vec::lane_max(x, nk));
      if (m_new == -std::numeric_limits<T>::infinity()) {  // every key so far blocked
        std::fill(x, x + nk, T(0));
        continue;
      }
      const T alpha = m[(size_t)r] == -std::numeric_limits<T>::infinity() ? T(0) : vec::exp(m[(size_t)r] - m_new);
      for (int64_t c = 0; c < nk; c++) x[c] = vec::exp(x[c] - m_new);  // exp(-inf) = 0
      l[(size_t)r] = l[(size_t)r] * alpha + vec::lane_sum<T>(nk, [&](int64_t c) { return x[c]; });
      m[(size_t)r] = m_new;
      T* orow = o.data() + r * Dv;
      for (int64_t c = 0; c < Dv; c++) orow[c] *= alpha;
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
  if (L == 0 || S == 0) return;
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
  std::vector<T> p((size_t)(kQueryBlock * kKeyBlock)), pd(p.size()), keep(p.size()), dp(p.size());
  const T* qh = q + tg.q0[h];
  const T* kh = k + tg.k0[h];
  const T* vh = v + tg.v0[h];
  for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, S - j0);
    for (int64_t i0 = 0; i0 < L; i0 += kQueryBlock) {
      const int64_t nq = std::min(kQueryBlock, L - i0);
      // p = q k^T
      kernel::gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = D, .a = qh + i0 * tg.q_rs, .lda = tg.q_rs,
                                  .b = kh + j0 * tg.k_rs, .ldb = tg.k_rs, .trans_b = true, .c = p.data(), .ldc = nk});
      for (int64_t r = 0; r < nq; r++) {  // the weights P, and Pd = P * keep
        const int64_t row = h * g.L + i0 + r;
        T* x = p.data() + r * nk;
        T* xd = pd.data() + r * nk;
        const T shift = lse[row];
        const uint8_t* blocked = tg.mask ? tg.mask + tg.mask_rows[(size_t)row] + j0 * tg.mask_cs : nullptr;
        for (int64_t c = 0; c < nk; c++) x[c] = vec::exp(x[c] * sc - shift);  // shift = inf: 0
        if (blocked)
          for (int64_t c = 0; c < nk; c++) x[c] = blocked[c * tg.mask_cs] ? T(0) : x[c];
        std::copy(x, x + nk, xd);
        if (tg.dropout) apply_keep<T>(tg, draws, h, keys[(size_t)(i0 + r)], j0, nk, xd, keep.data() + r * nk);
      }
      const T* dout_i = dout + tg.out0[h] + i0 * tg.out_rs;
      // dv += pd^T dout, dp = dout v^T
      kernel::gemm_serial(Gemm<T>{.M = nk, .N = Dv, .K = nq, .a = pd.data(), .lda = nk, .trans_a = true, .b = dout_i,
                                  .ldb = tg.out_rs, .c = dv + j0 * tg.dv_rs, .ldc = tg.dv_rs, .accumulate = true});
      kernel::gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = Dv, .a = dout_i, .lda = tg.out_rs, .b = vh + j0 * tg.v_rs,
                                  .ldb = tg.v_rs, .trans_b = true, .c = dp.data(), .ldc = nk});
      for (int64_t r = 0; r < nq; r++) {  // dS = P * (dP - delta) * scale, dP = dPd * keep
        T* d = dp.data() + r * nk;
        const T* x = p.data() + r * nk;
        const T* kf = keep.data() + r * nk;
        const T dl = delta[(size_t)(i0 + r)];
        if (tg.dropout)
          for (int64_t c = 0; c < nk; c++) d[c] *= kf[c];
        for (int64_t c = 0; c < nk; c++) d[c] = sc * x[c] * (d[c] - dl);
      }
      // dq += ds k, dk += ds^T q
      kernel::gemm_serial(Gemm<T>{.M = nq, .N = D, .K = nk, .a = dp.data(), .lda = nk, .b = kh + j0 * tg.k_rs,
                                  .ldb = tg.k_rs, .c = dq + i0 * tg.dq_rs, .ldc = tg.dq_rs, .accumulate = true});
      kernel::gemm_serial(Gemm<T>{.M = nk, .N = D, .K = nq, .a = dp.data(), .lda = nk, .trans_a = true,
                                  .b = qh + i0 * tg.q_rs, .ldb = tg.q_rs, .c = dk + j0 * tg.dk_rs, .ldc = tg.dk_rs,
                                  .accumulate = true});
    }
  }
}

// A view whose last dim is contiguous (stride 1), copying only when it is not.
Tensor rows_contiguous(const Tensor& t) { return t.stride(-1) == 1 || t.size(-1) == 1 ? t : t.contiguous(); }

}  // namespace

Tensor scaled_dot_product_attention_tiled(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                          double dropout_p, bool training, Generator* gen, double scale, Loc loc) {
  const char* op = "scaled_dot_product_attention_tiled";
  TiledGeometry tg;
  tg.g = check_inputs(op, q, k, v, mask);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) fail(op, "dropout_p must be in [0, 1], got ", dropout_p);
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
  const int64_t qblocks = (g.L + kQueryBlock - 1) / kQueryBlock;
  const double flops = 2.0 * double(std::min(kQueryBlock, g.L)) * double(g.S) * double(g.D + g.Dv);
  dispatch_float(dt, op, [&](auto tag) {
    using T = decltype(tag);
    const Buffers<T> b{.q = qe.data<T>(), .k = ke.data<T>(), .v = ve.data<T>(), .out = out.data<T>(),
                       .lse = lse.data<T>()};
    over_tasks(tg.heads * qblocks, flops,
               [&](int64_t t) { tiled_forward_block<T>(tg, b, t / qblocks, (t % qblocks) * kQueryBlock); });
  });

  BackwardFn bw;
  if (wants_grad(q, k, v)) {
    Tensor saved_out = out.detach();
    bw = [tg, qe, ke, ve, me, lse, saved_out, op, xq = SavedTensor(q), xk = SavedTensor(k), xv = SavedTensor(v),
          mask](const Tensor& dout_in) {
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
      Tensor dq = zeros(g.with(g.L, g.D), dout.dtype()), dk = zeros(g.with(g.S, g.D), dout.dtype()),
             dv = zeros(g.with(g.S, g.Dv), dout.dtype());
      const double flops = 4.0 * double(g.L) * double(g.S) * double(g.D + g.Dv);
      dispatch_float(dout.dtype(), op, [&](auto tag) {
        using T = decltype(tag);
        const Buffers<T> b{.q = qe.data<T>(), .k = ke.data<T>(), .v = ve.data<T>(), .out = saved_out.data<T>(),
                           .lse = lse.data<T>(), .dout = dout.data<T>(), .dq = dq.data<T>(), .dk = dk.data<T>(),
                           .dv = dv.data<T>()};
        over_tasks(tg.heads, flops, [&](int64_t h) { tiled_backward_head<T>(tg, b, h); });
      });
      // broadcast batch dims are summed back to each input's shape by the engine
      return std::vector<Tensor>{dq, dk, dv};
    };
  }
  return record(op, loc, out, {q, k, v}, std::move(bw), {qe, ke, ve, out, me});
}

}  // namespace ember::nn
