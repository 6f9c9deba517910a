// The tiled attention kernel (see attention_tiles.h): per head and block of queries, the
// products by gemm_serial on the calling thread, the softmax rows in between.
#include "core/kernels/attention_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/autocast.h"
#include "core/kernels/gemm.h"
#include "core/parallel.h"
#include "core/vec.h"

namespace ember::kernel {

namespace {

template <class F>
void over_tasks(int64_t tasks, double flops_each, F&& f) {
  if (worth_threads(tasks, flops_each * double(tasks), cost::kTaskSplitFlops)) {
    const bool autocast = autocast_enabled();  // (the workers' products run as the caller's)
#pragma omp parallel
    {
      const bool before = autocast_detail::set_enabled(autocast);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tasks; t++) f(t);
      autocast_detail::set_enabled(before);
    }
  } else {
    for (int64_t t = 0; t < tasks; t++) f(t);
  }
}

// Row r's dropout factors for keys j0 .. j0 + n - 1 of head h, multiplied into x (and
// written to keep when it is not null).
template <class T>
void apply_keep(const AttentionTiles& tg, const DropoutDraws& draws, int64_t h, uint64_t key, int64_t j0, int64_t n,
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
void tiled_forward_block(const AttentionTiles& tg, const AttentionBuffers<T>& b, int64_t h, int64_t i0) {
  const T *q = b.q, *k = b.k, *v = b.v;
  T *out = b.out, *lse = b.lse;
  const AttentionTiles& g = tg;
  const int64_t L = tg.queries(h), S = tg.keys(h);
  if (i0 >= L) return;
  const int64_t nq = std::min(kAttentionQueryBlock, L - i0), Dv = g.Dv;
  std::vector<T> s((size_t)(nq * std::min(kAttentionKeyBlock, S))), o((size_t)(nq * Dv), T(0)), m((size_t)nq),
      l((size_t)nq, T(0));
  std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
  const T sc = T(tg.scale);
  const DropoutDraws draws = tg.draws;  // a local copy: the loops below vectorise
  std::vector<uint64_t> keys(tg.dropout ? (size_t)nq : 0);  // each query row's dropout key
  if (tg.dropout) tg.dropout_keys(h, i0, nq, keys.data());
  for (int64_t j0 = 0; j0 < S; j0 += kAttentionKeyBlock) {
    const int64_t nk = std::min(kAttentionKeyBlock, S - j0);
    // s = q k^T
    gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = g.D, .a = q + tg.q0[h] + i0 * tg.q_rs, .lda = tg.q_rs,
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
    gemm_serial(Gemm<T>{.M = nq, .N = Dv, .K = nk, .a = s.data(), .lda = nk, .b = v + tg.v0[h] + j0 * tg.v_rs,
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
void tiled_backward_head(const AttentionTiles& tg, const AttentionBuffers<T>& b, int64_t h) {
  const T *q = b.q, *k = b.k, *v = b.v, *out = b.out, *lse = b.lse, *dout = b.dout;
  T *dq = b.dq + tg.dq0[h], *dk = b.dk + tg.dk0[h], *dv = b.dv + tg.dv0[h];
  const AttentionTiles& g = tg;
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
  // no larger than used
  const size_t block = (size_t)(std::min(kAttentionQueryBlock, L) * std::min(kAttentionKeyBlock, S));
  std::vector<T> p(block), pd(block), keep(tg.dropout ? block : 0), dp(block);
  const T* qh = q + tg.q0[h];
  const T* kh = k + tg.k0[h];
  const T* vh = v + tg.v0[h];
  for (int64_t j0 = 0; j0 < S; j0 += kAttentionKeyBlock) {
    const int64_t nk = std::min(kAttentionKeyBlock, S - j0);
    for (int64_t i0 = 0; i0 < L; i0 += kAttentionQueryBlock) {
      const int64_t nq = std::min(kAttentionQueryBlock, L - i0);
      // p = q k^T, unless the forward kept P
      if (!tg.keep_weights)
        gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = D, .a = qh + i0 * tg.q_rs, .lda = tg.q_rs,
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
      gemm_serial(Gemm<T>{.M = nk, .N = Dv, .K = nq, .a = pd.data(), .lda = nk, .trans_a = true, .b = dout_i,
                                  .ldb = tg.out_rs, .c = dv + j0 * tg.dv_rs, .ldc = tg.dv_rs,
                                  .accumulate = i0 > 0 || !tg.write_grads});
      gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = Dv, .a = dout_i, .lda = tg.out_rs, .b = vh + j0 * tg.v_rs,
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
      gemm_serial(Gemm<T>{.M = nq, .N = D, .K = nk, .a = dp.data(), .lda = nk, .b = kh + j0 * tg.k_rs,
                                  .ldb = tg.k_rs, .c = dq + i0 * tg.dq_rs, .ldc = tg.dq_rs,
                                  .accumulate = j0 > 0 || !tg.write_grads});
      gemm_serial(Gemm<T>{.M = nk, .N = D, .K = nq, .a = dp.data(), .lda = nk, .trans_a = true,
                                  .b = qh + i0 * tg.q_rs, .ldb = tg.q_rs, .c = dk + j0 * tg.dk_rs, .ldc = tg.dk_rs,
                                  .accumulate = i0 > 0 || !tg.write_grads});
    }
  }
}

// One query block of one head: the output's tangent. Per key block, P again from lse (as
// the backward does), dS = scale (tq k^T + q tk^T), the row sums m of P dS, and
// o += (P dS keep) v + (P keep) tv; at the end tout = o - m out.
template <class T>
void tiled_jvp_block(const AttentionTiles& tg, const AttentionTangentTiles& tt, const AttentionTangentBuffers<T>& b,
                     int64_t h, int64_t i0) {
  const AttentionTiles& g = tg;
  const int64_t L = tg.queries(h), S = tg.keys(h);
  if (i0 >= L) return;
  const int64_t nq = std::min(kAttentionQueryBlock, L - i0), D = g.D, Dv = g.Dv;
  const bool scores_move = b.tq || b.tk;  // dS is not zero
  const size_t block = (size_t)(nq * std::min(kAttentionKeyBlock, S));
  std::vector<T> p(block), ds(scores_move ? block : 0), keep(tg.dropout ? block : 0), o((size_t)(nq * Dv), T(0)),
      m((size_t)nq, T(0));
  const T sc = T(tg.scale);
  const DropoutDraws draws = tg.draws;
  std::vector<uint64_t> keys(tg.dropout ? (size_t)nq : 0);  // each query row's dropout key
  if (tg.dropout) tg.dropout_keys(h, i0, nq, keys.data());
  const T* qh = b.q + tg.q0[h] + i0 * tg.q_rs;
  const T* kh = b.k + tg.k0[h];
  const T* vh = b.v + tg.v0[h];
  const T* tqh = b.tq ? b.tq + tt.q0[h] + i0 * tt.q_rs : nullptr;
  const T* tkh = b.tk ? b.tk + tt.k0[h] : nullptr;
  const T* tvh = b.tv ? b.tv + tt.v0[h] : nullptr;
  for (int64_t j0 = 0; j0 < S; j0 += kAttentionKeyBlock) {
    const int64_t nk = std::min(kAttentionKeyBlock, S - j0);
    // p = q k^T, then the weights P = exp(scale p - lse), 0 where blocked
    gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = D, .a = qh, .lda = tg.q_rs, .b = kh + j0 * tg.k_rs, .ldb = tg.k_rs,
                        .trans_b = true, .c = p.data(), .ldc = nk});
    for (int64_t r = 0; r < nq; r++) {
      const int64_t row = h * g.L + i0 + r;
      T* x = p.data() + r * nk;
      const T shift = b.lse[row];
      for (int64_t c = 0; c < nk; c++) x[c] = vec::exp(x[c] * sc - shift);  // shift = inf (no key seen): 0
      if (tg.mask) {
        const uint8_t* blocked = tg.mask + tg.mask_rows[(size_t)row] + j0 * tg.mask_cs;
        for (int64_t c = 0; c < nk; c++) x[c] = blocked[c * tg.mask_cs] ? T(0) : x[c];
      }
      if (tg.causal) {
        const int64_t at = tg.q_at(h, i0 + r);
        for (int64_t c = 0; c < nk; c++)
          if (tg.k_at(h, j0 + c) > at) x[c] = T(0);
      }
    }
    if (scores_move) {
      // ds = tq k^T + q tk^T, then P dS (dS = scale ds), summed into m
      if (tqh)
        gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = D, .a = tqh, .lda = tt.q_rs, .b = kh + j0 * tg.k_rs,
                            .ldb = tg.k_rs, .trans_b = true, .c = ds.data(), .ldc = nk});
      if (tkh)
        gemm_serial(Gemm<T>{.M = nq, .N = nk, .K = D, .a = qh, .lda = tg.q_rs, .b = tkh + j0 * tt.k_rs,
                            .ldb = tt.k_rs, .trans_b = true, .c = ds.data(), .ldc = nk, .accumulate = tqh != nullptr});
      for (int64_t r = 0; r < nq; r++) {
        T* d = ds.data() + r * nk;
        const T* x = p.data() + r * nk;
        for (int64_t c = 0; c < nk; c++) d[c] = sc * d[c] * x[c];
        m[(size_t)r] += vec::lane_sum<T>(nk, [&](int64_t c) { return d[c]; });
      }
    }
    if (tg.dropout)  // P keep, and P dS keep
      for (int64_t r = 0; r < nq; r++) {
        T* kf = keep.data() + r * nk;
        apply_keep<T>(tg, draws, h, keys[(size_t)r], j0, nk, p.data() + r * nk, kf);
        if (scores_move) {
          T* d = ds.data() + r * nk;
          for (int64_t c = 0; c < nk; c++) d[c] *= kf[c];
        }
      }
    // o += (P dS keep) v + (P keep) tv
    if (scores_move)
      gemm_serial(Gemm<T>{.M = nq, .N = Dv, .K = nk, .a = ds.data(), .lda = nk, .b = vh + j0 * tg.v_rs,
                          .ldb = tg.v_rs, .c = o.data(), .ldc = Dv, .accumulate = true});
    if (tvh)
      gemm_serial(Gemm<T>{.M = nq, .N = Dv, .K = nk, .a = p.data(), .lda = nk, .b = tvh + j0 * tt.v_rs,
                          .ldb = tt.v_rs, .c = o.data(), .ldc = Dv, .accumulate = true});
  }
  for (int64_t r = 0; r < nq; r++) {  // tout = o - m out
    const int64_t at = tg.out0[h] + (i0 + r) * tg.out_rs;
    const T* y = b.out + at;
    T* dst = b.tout + at;
    const T mr = m[(size_t)r];
    for (int64_t c = 0; c < Dv; c++) dst[c] = o[(size_t)(r * Dv + c)] - mr * y[c];
  }
}

// Every head's forward (its query blocks shared out), and every head's backward.
template <class T>
void tiled_forward(const AttentionTiles& tg, const AttentionBuffers<T>& b) {
  const AttentionTiles& g = tg;
  const int64_t qblocks = (g.L + kAttentionQueryBlock - 1) / kAttentionQueryBlock;
  const double flops = 2.0 * double(std::min(kAttentionQueryBlock, g.L)) * double(g.S) * double(g.D + g.Dv);
  over_tasks(tg.heads * qblocks, flops,
             [&](int64_t t) { tiled_forward_block<T>(tg, b, t / qblocks, (t % qblocks) * kAttentionQueryBlock); });
}
template <class T>
void tiled_backward(const AttentionTiles& tg, const AttentionBuffers<T>& b) {
  const AttentionTiles& g = tg;
  const double flops = 4.0 * double(g.L) * double(g.S) * double(g.D + g.Dv);
  over_tasks(tg.heads, flops, [&](int64_t h) { tiled_backward_head<T>(tg, b, h); });
}

template <class T>
void tiled_jvp(const AttentionTiles& tg, const AttentionTangentTiles& tt, const AttentionTangentBuffers<T>& b) {
  const AttentionTiles& g = tg;
  const int64_t qblocks = (g.L + kAttentionQueryBlock - 1) / kAttentionQueryBlock;
  const double widths = double(g.D) * (1 + (b.tq ? 1 : 0) + (b.tk ? 1 : 0)) +
                        double(g.Dv) * ((b.tq || b.tk ? 1 : 0) + (b.tv ? 1 : 0));
  const double flops = 2.0 * double(std::min(kAttentionQueryBlock, g.L)) * double(g.S) * widths;
  over_tasks(tg.heads * qblocks, flops, [&](int64_t t) {
    tiled_jvp_block<T>(tg, tt, b, t / qblocks, (t % qblocks) * kAttentionQueryBlock);
  });
}

}  // namespace

void attention_tiles_jvp(const AttentionTiles& tg, const AttentionTangentTiles& tt,
                         const AttentionTangentBuffers<float>& b) {
  tiled_jvp<float>(tg, tt, b);
}
void attention_tiles_jvp(const AttentionTiles& tg, const AttentionTangentTiles& tt,
                         const AttentionTangentBuffers<double>& b) {
  tiled_jvp<double>(tg, tt, b);
}
void attention_tiles_forward(const AttentionTiles& tg, const AttentionBuffers<float>& b) {
  tiled_forward<float>(tg, b);
}
void attention_tiles_forward(const AttentionTiles& tg, const AttentionBuffers<double>& b) {
  tiled_forward<double>(tg, b);
}
void attention_tiles_backward(const AttentionTiles& tg, const AttentionBuffers<float>& b) {
  tiled_backward<float>(tg, b);
}
void attention_tiles_backward(const AttentionTiles& tg, const AttentionBuffers<double>& b) {
  tiled_backward<double>(tg, b);
}

}  // namespace ember::kernel
