// Scaled dot-product attention (Vaswani et al. 2017, eq. 1) and the masks it takes.
//
//   weights = softmax(scale * q k^T, over keys, blocked pairs removed)   [..., L, S]
//   output  = dropout(weights) v                                         [..., L, Dv]
//
// Masks have one polarity everywhere: true = blocked, the pair (query i, key j) may not
// be used. A blocked pair gets weight exactly 0. A query whose keys are all blocked gets
// all-zero weights and a zero output, and its gradients are finite (PyTorch gives NaN).
//
// scaled_dot_product_attention is one fused autograd node with a hand-written backward;
// scaled_dot_product_attention_reference is the same computation composed of primitive
// ops, which the fused op is tested against.
//
// Shapes: q [..., L, D], k [..., S, D], v [..., S, Dv]. The leading (batch) dims of q, k
// and v broadcast as in NumPy (e.g. k and v [B, 1, S, D] shared by every head of q
// [B, H, L, D]); the output takes the broadcast batch shape, and the gradient of a
// broadcast input is summed back to its shape. q, k and v must have the same float dtype
// (float32 or float64); any strides are accepted. The mask's blocked() tensor must
// broadcast to the scores' shape [..., L, S] (e.g. [L, S], [B, 1, 1, S], [B, H, L, S]).
#pragma once
#include <cstdint>

#include "core/ops.h"
#include "nn/attention_mask.h"
#include "nn/packing.h"

namespace ember::nn {

// What attention returns: the output and the attention weights.
struct AttentionResult {
  Tensor output;  // [..., L, Dv]
  // [..., L, S], softmax probabilities before dropout; detached, for inspection and
  // pictures (it shares memory with what backward saved: do not modify it in place).
  Tensor weights;
};

// Which implementation of attention MultiHeadAttention (and every layer built on it) runs,
// for a scope on the current thread, as torch.nn.attention.sdpa_kernel chooses one:
//   Auto      the default: fused below kTiledMinPairs (query, key) pairs, tiled from there
//             (or on packed rows), composed where weights join the graph or hooks watch
//   Fused     scaled_dot_product_attention: one node, the [..., L, S] weights in memory
//   Tiled     scaled_dot_product_attention_tiled (attention_rows on packed rows), at any
//             size - to study or test the tiled kernels on small shapes; a forward that
//             returns weights runs fused, since the tiled op never holds them
//   Composed  primitive ops (matmul, masked_fill, softmax, where, matmul): every
//             intermediate in the graph, the reference the fused kernels are checked against
// All give the same results to rounding, and the same dropout decisions.
//   { nn::AttentionImplGuard tiled(nn::AttentionImpl::Tiled); model.forward(...); }
enum class AttentionImpl { Auto, Fused, Tiled, Composed };
// Sets the current thread's AttentionImpl for its lifetime, then restores the previous one.
class AttentionImplGuard {
 public:
  explicit AttentionImplGuard(AttentionImpl impl);  // Error for a value outside the enum
  ~AttentionImplGuard();  // restores the previous choice
  AttentionImplGuard(const AttentionImplGuard&) = delete;
  AttentionImplGuard& operator=(const AttentionImplGuard&) = delete;

 private:
  AttentionImpl prev_;
};
AttentionImpl attention_impl();  // the current thread's choice

// The fused op: one autograd node with inputs q, k, v. scale 0 means 1/sqrt(D). Dropout
// with probability dropout_p, only when training, zeroes weights used for the weighted
// sum and scales the kept ones by 1/(1 - p), drawing from gen (the default generator when
// null) exactly as ember::dropout does on the weights tensor. Unlike PyTorch's
// scaled_dot_product_attention, it returns the weights too, and the scale cannot be 0
// (0 stands for the default). Error when q, k or v is undefined, of another dtype or of
// mismatched sizes, the batch dims or the mask do not broadcast, dropout_p is outside
// [0, 1], or scale is not finite. In forward mode (core/forward_ad.h) the output carries
// a tangent, with the same dropout decisions; the weights, detached, carry none.
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionMask& mask = {}, double dropout_p = 0.0,
                                             bool training = false, Generator* gen = nullptr, double scale = 0.0,
                                             Loc loc = Loc::current());

// The same attention computed in tiles with an online softmax (Milakov and Gimelshein
// 2018; Dao et al. 2022), for when the weights are not wanted: the [..., L, S] weights
// never exist whole. The forward keeps per query a running maximum and sum over blocks of
// keys, and saves only their log-sum-exp [..., L]; the backward recomputes each block of
// weights from q, k and it. Memory beyond the inputs and output grows as L + S, not L * S.
// (Keys that fit one block, S <= 128, are the exception: the forward keeps the weights
// for the backward - at most 128 values a query - rather than have it compute them again.)
// Same arguments, masks, zero-row policy and dropout draws as scaled_dot_product_attention
// (the same keep/drop decisions from the same generator state); the sums run in another
// order, so results agree to rounding. Returns the output [..., L, Dv]. Errors as
// scaled_dot_product_attention. In forward mode (core/forward_ad.h) the output's tangent
// comes from a tiled kernel too, a second pass over the blocks of keys from the saved
// log-sum-exp: the weights never exist whole for it either.
Tensor scaled_dot_product_attention_tiled(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionMask& mask = {}, double dropout_p = 0.0,
                                          bool training = false, Generator* gen = nullptr, double scale = 0.0,
                                          Loc loc = Loc::current());

// One operand of attention_rows: columns col .. of rows.
struct AttentionRows {
  Tensor rows;  // [N, width], rows contiguous
  int64_t col = 0;  // the first column of head 0
};
// Attention over sequences kept as rows, without padding: multi-head attention's core
// where the projections ran on packed rows (Packing). Head h (of heads) of sequence b
// reads columns col + h * head_dim .. + head_dim of its operand's rows: the queries of b
// are its rows in q_packing (or, when q_packing is null, rows b * q_length .. + q_length of
// a padded batch), its keys and values its rows in kv_packing. Returns rows [NQ,
// heads * head_dim], head h's output in its columns: what splitting each operand into
// heads, the tiled op with kv_packing's padding as the key mask, merging the heads and
// packing again would give, without the padding's rows, copies or masks. q, k and v may
// be column blocks of one tensor (a fused projection): it then gets one gradient.
// Dropout draws as the padded op's on the weights [B, heads, L, S] (L and S the padded
// lengths). causal: a query sees only the keys at its position in the padded batch or
// before (causal_mask(L, S) on top of the padding). Error when heads or head_dim is not
// positive, a Packing is not one Packing::of made or the two disagree on the batch, an
// operand's rows are too few or too narrow, the dtypes differ or are not float, or as
// scaled_dot_product_attention for dropout_p and scale; causal needs equal padded lengths.
Tensor attention_rows(const AttentionRows& q, const AttentionRows& k, const AttentionRows& v, int64_t heads,
                      int64_t head_dim, const Packing* q_packing, int64_t q_length, const Packing& kv_packing,
                      double dropout_p = 0.0, bool training = false, Generator* gen = nullptr, double scale = 0.0,
                      bool causal = false, Loc loc = Loc::current());

// The same computation composed of primitive ops (matmul, mul, masked_fill, softmax,
// where, matmul) with autograd through them; same shapes, mask and zero-row policy, no
// dropout. The returned weights are detached, as the fused op's.
AttentionResult scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const AttentionMask& mask = {}, double scale = 0.0);

}  // namespace ember::nn
