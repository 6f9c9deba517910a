// The tiled attention kernel: an online softmax over blocks of keys (Milakov and
// Gimelshein 2018; Dao et al. 2022), the weights recomputed in backward from the saved
// log-sum-exp, on raw pointers laid out as AttentionTiles says. The ops
// (nn::scaled_dot_product_attention_tiled, nn::attention_rows) are in nn/attention_tiled.cpp.
//
// Forward, per head and block of queries, over blocks of keys j:
//   s = scale * q k_j^T (blocked pairs -inf);  m' = max(m, rowmax s)
//   l = l * exp(m - m') + rowsum exp(s - m');  o = o * exp(m - m') + (exp(s - m') * keep) v_j
//   out = o / l,  lse = m + log l
// Backward, per head: delta = rowsum(dout * out); per block P = exp(scale * q k^T - lse),
//   dv += (P * keep)^T dout,  dP = (dout v^T) * keep,  dS = scale * P * (dP - delta),
//   dq += dS k,  dk += dS^T q.
// Forward-mode tangent (tq, tk, tv the inputs' tangents), per query row i, in a second pass
// over the key blocks with P recomputed from lse (K the keep factors, 1 without dropout):
//   dS_ij = scale (tq_i . k_j + q_i . tk_j),  m_i = sum_j P_ij dS_ij
//   tout_i = sum_j P_ij K_ij dS_ij v_j - m_i out_i + sum_j P_ij K_ij tv_j
// (the softmax's centring m_i needs every key, but times sum_j P_ij K_ij v_j = out_i it
// separates from the sums over blocks), so no [L, S] block outlives its pass either.
#pragma once
#include <cstdint>
#include <vector>

#include "core/random.h"

namespace ember::kernel {

// queries and keys a block
constexpr int64_t kAttentionQueryBlock = 64, kAttentionKeyBlock = 128;

// Where one attention call's operands lie: per head (a flat batch index), the first row
// of q, k, v, out and the mask, each with its row stride; columns are contiguous (the
// mask's column stride aside). A head may use fewer queries and keys than the call's L
// and S (rows of sequences of their own lengths, attention_rows): the others do not exist
// for it. Its output rows and its inputs' gradients may lie anywhere (the columns of a
// head in rows of all heads).
struct AttentionTiles {
  int64_t L = 0, S = 0, D = 0, Dv = 0;  // queries, keys, the q/k width, the v width
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
  // kAttentionKeyBlock values a query), row i of head h at (h * L + i) * S
  bool keep_weights = false;

  int64_t queries(int64_t h) const { return nq.empty() ? L : nq[(size_t)h]; }
  int64_t keys(int64_t h) const { return nk.empty() ? S : nk[(size_t)h]; }
  int64_t q_at(int64_t h, int64_t i) const { return q_pos.empty() ? i : q_pos[(size_t)h][i]; }
  int64_t k_at(int64_t h, int64_t j) const { return k_pos.empty() ? j : k_pos[(size_t)h][j]; }
  // a padded call's layout: every head's L rows of out, dq and its S rows of dk, dv in turn
  void contiguous_outputs() {
    out0.resize((size_t)heads), dq0.resize((size_t)heads), dk0.resize((size_t)heads), dv0.resize((size_t)heads);
    for (int64_t h = 0; h < heads; h++)
      out0[(size_t)h] = h * L * Dv, dq0[(size_t)h] = h * L * D, dk0[(size_t)h] = h * S * D,
      dv0[(size_t)h] = h * S * Dv;
    out_rs = Dv, dq_rs = D, dk_rs = D, dv_rs = Dv;
  }
  // the dropout keys of head h's query rows i0 .. i0 + n - 1
  void dropout_keys(int64_t h, int64_t i0, int64_t n, uint64_t* out) const {
    if (q_pos.empty()) return draws.row_keys(h * L + i0, n, out);
    for (int64_t i = 0; i < n; i++) out[i] = draws.row_key(h * L + q_at(h, i0 + i));
  }
  // the dropout factor of key column j (of the head's keys) in a row with this key
  template <class T>
  T factor(int64_t h, uint64_t key, int64_t j) const {
    return draws.factor<T>(key, k_at(h, j));
  }
};

// The data of every head, laid out as AttentionTiles says: the inputs, the output and
// its per-row log-sum-exp, and in backward the output's gradient and the inputs'.
template <class T>
struct AttentionBuffers {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  T *out = nullptr, *lse = nullptr;
  T* weights = nullptr;  // with keep_weights
  const T* dout = nullptr;
  T *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

// Where the inputs' tangents lie, as AttentionTiles says of q, k and v: per head the first
// row, and the row strides. A tangent that is zero (a null pointer in the buffers) has no
// entries. The output's tangent lies as the output does (AttentionTiles' out0, out_rs).
struct AttentionTangentTiles {
  std::vector<int64_t> q0, k0, v0;  // per head, the first element of tq, tk, tv
  int64_t q_rs = 0, k_rs = 0, v_rs = 0;  // their row strides
};

// The data of a forward-mode tangent: the forward's inputs, output and log-sum-exp, the
// inputs' tangents (null: zero) and the output's tangent, written.
template <class T>
struct AttentionTangentBuffers {
  const T *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *lse = nullptr;
  const T *tq = nullptr, *tk = nullptr, *tv = nullptr;
  T* tout = nullptr;
};

// out (heads, L, Dv) and lse (heads * L) <- q (heads, L, D), k (heads, S, D), v (heads, S, Dv),
// each head's matrices where tg says; weights (heads * L * S) too with tg.keep_weights.
// The heads' query blocks shared out over the threads.
void attention_tiles_forward(const AttentionTiles& tg, const AttentionBuffers<float>& b);
void attention_tiles_forward(const AttentionTiles& tg, const AttentionBuffers<double>& b);
// dq (heads, L, D), dk (heads, S, D), dv (heads, S, Dv) <- dout (heads, L, Dv), and the
// forward's q, k, v, out, lse (and weights); one head a task.
void attention_tiles_backward(const AttentionTiles& tg, const AttentionBuffers<float>& b);
void attention_tiles_backward(const AttentionTiles& tg, const AttentionBuffers<double>& b);
// tout (heads, L, Dv) <- tq (heads, L, D), tk (heads, S, D), tv (heads, S, Dv), and the
// forward's q, k, v, out and lse: the output's tangent, with the forward's masks and
// dropout decisions. The heads' query blocks shared out over the threads, as the forward's.
void attention_tiles_jvp(const AttentionTiles& tg, const AttentionTangentTiles& tt,
                         const AttentionTangentBuffers<float>& b);
void attention_tiles_jvp(const AttentionTiles& tg, const AttentionTangentTiles& tt,
                         const AttentionTangentBuffers<double>& b);

}  // namespace ember::kernel
