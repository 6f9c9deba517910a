// MultiHeadAttention, batch-first, with PyTorch's parameters and semantics:
//   query [B, L, E], key [B, S, kdim], value [B, S, vdim]
//   q = query Wq^T + bq, k = key Wk^T + bk, v = value Wv^T + bv     (each [B, *, E])
//   split into H heads of d = E / H features: head h uses features [h*d, (h+1)*d)
//   with qk_norm, each head's q and k rows are layer-normalised over their d features
//   (q_norm, k_norm: one gain and bias [d] each, shared by the heads)
//   per head: softmax(score_scale * q k^T / sqrt(d), blocked pairs removed) v   -> [B, H, L, d]
//   merge the heads back to [B, L, E], then out = merged Wo^T + bo
// Masks use one polarity (true = blocked): key_padding_mask [B, S], attn_mask [L, S] or
// [B, L, S]. A query whose keys are all blocked gets zero weights and a zero attention
// output, so its output row is out_proj.bias (PyTorch gives NaN there).
//
// For token-by-token decoding, forward takes an optional KVCache: self-attention appends
// the new keys and values to it; cross-attention projects the memory once and reuses it.
//
// Packed inputs: with query_packing, query holds only the kept positions of a padded
// [B, L] batch as rows [N, E] (see Packing) and the output is rows [N, E] as well; with
// kv_packing, key and value are rows [M, kdim] and [M, vdim] of a padded [B, S] batch,
// and kv_packing's padding is the key padding mask. The projections then run on the rows
// only; attention itself runs on the padded layout.
//
// When no weights are asked for and L * S >= kTiledMinPairs, attention runs tiled (see
// scaled_dot_product_attention_tiled): its memory then grows linearly in L and S.
//
// Attention hooks (register_attention_hook) see what attention computed inside a forward:
// its scores and weights as tensors of the autograd graph, so that the gradient of a loss
// reaching them can be read (retain_grad, or autograd::grad with them as inputs). A module
// with an attention hook computes attention from primitive ops (the reference
// composition), which gives the fused op's results to rounding.
#pragma once
#include <memory>

#include "nn/attention.h"
#include "nn/layers.h"

namespace ember::nn {

// Which attention weights a forward returns: none, per head [B, H, L, S], or averaged over
// the heads [B, L, S] (PyTorch's need_weights with average_attn_weights). Unlike PyTorch,
// the default is None.
enum class AttnWeights { None, PerHead, Averaged };

// What MultiHeadAttention::forward returns.
struct MultiHeadAttentionOutput {
  Tensor output;  // [B, L, E] (rows [N, E] for a packed query)
  // [B, H, L, S] per head, [B, L, S] averaged, or undefined. As PyTorch's: the weights
  // the values were averaged with, so in training with dropout they are the dropped ones
  // (zeros and 1/(1-p) scaling; an attention hook sees them before dropout). In forward
  // mode they carry their tangent.
  Tensor weights;
};

// Projected keys and values of the positions seen so far, [B, H, S, d].
struct KVCache {
  // The keys and values, undefined before the first forward.
  ///@{
  Tensor k, v;
  ///@}
  bool fixed = false;  // true: computed once from a fixed memory (cross-attention) and reused
};

// MultiHeadAttention({.embed_dim = 512, .num_heads = 8, .kdim = 256, .dropout_p = 0.1})
struct MultiHeadAttentionOptions {
  int64_t embed_dim = 0;  // E, which must be set (positive)
  int64_t num_heads = 1;  // H, which must divide embed_dim
  // The feature sizes of key and value; 0: embed_dim.
  ///@{
  int64_t kdim = 0, vdim = 0;
  ///@}
  bool bias = true;  // whether the four projections have biases
  double dropout_p = 0.0;  // attention dropout's probability, in [0, 1)
  // Multiplies the scores on top of 1/sqrt(head_dim): sqrt(head_dim) leaves them unscaled;
  // positive and finite.
  double score_scale = 1.0;
  // LayerNorm over each head's d features of the projected queries and keys, before the
  // scores (qk-layernorm: Dehghani et al. 2023, Wortsman et al. 2023); the keys are cached
  // normalised.
  bool qk_norm = false;
  double qk_norm_eps = 1e-5;  // the qk LayerNorms' eps, non-negative and finite
  Generator* gen = nullptr;  // initialisation (the default generator when null)
  // Attention dropout masks (the default generator when null); must outlive the module.
  Generator* dropout_gen = nullptr;
  DType dtype = kFloat32;  // of the parameters
};

// What a forward call takes besides query, key and value, every part optional:
// mha.forward(h, h, h, {.key_padding_mask = pad, .need_weights = AttnWeights::PerHead})
struct AttentionCall {
  AttentionMask key_padding_mask = {};  // [B, S]
  AttentionMask attn_mask = {};  // [L, S] or [B, L, S]
  AttnWeights need_weights = AttnWeights::None;  // which weights to return
  KVCache* cache = nullptr;  // token-by-token decoding
  bool fixed_memory = false;  // the cache holds a fixed memory's keys and values (cross-attention)
  const Packing* query_packing = nullptr;  // query given as packed rows [N, E]
  const Packing* kv_packing = nullptr;  // key and value given as packed rows
  // Each query sees only the keys up to its own position (causal_mask(L, S), on top of
  // the other masks), without a mask tensor: packed rows keep their fast path.
  bool is_causal = false;
};

// What attention computed in one forward, per head; the tensors are part of the graph.
struct AttentionInternals {
  // [B, H, L, S] the softmax's input: q k^T * score_scale / sqrt(d), blocked pairs at the
  // dtype's lowest finite value.
  Tensor scores;
  Tensor weights;  // [B, H, L, S] the softmax's output (before dropout), 0 at blocked pairs
  // bool, broadcasts to [B, H, L, S]: the pairs that may not be used (undefined: none is
  // blocked).
  Tensor blocked;
};

// Multi-head attention as described in multihead_attention.h (torch.nn.MultiheadAttention
// with batch_first=True and separate q_proj, k_proj, v_proj, out_proj Linear layers
// instead of one in_proj_weight, so parameter names differ from PyTorch's).
class MultiHeadAttention : public Module {
 public:
  // From this many (query, key) pairs on, forward without weights runs
  // scaled_dot_product_attention_tiled, whose memory is linear in L and S.
  static constexpr int64_t kTiledMinPairs = 128 * 128;

  // Error when embed_dim or num_heads is not positive, num_heads does not divide
  // embed_dim, kdim or vdim is negative, dropout_p is outside [0, 1), or score_scale is
  // not positive and finite, or qk_norm_eps is negative or not finite.
  explicit MultiHeadAttention(const MultiHeadAttentionOptions& options);
  // The default options with embed_dim and num_heads.
  MultiHeadAttention(int64_t embed_dim, int64_t num_heads)
      : MultiHeadAttention(MultiHeadAttentionOptions{.embed_dim = embed_dim, .num_heads = num_heads}) {}

  // Attention of query over key and value (shapes in multihead_attention.h), with the
  // masks, cache and packings of call. Error when a shape does not match embed_dim, kdim
  // or vdim, batch sizes or key and value lengths differ, a mask has another shape, packed
  // key and value come with a key_padding_mask, or is_causal has more queries than keys.
  MultiHeadAttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionCall& call = {});

  // fn(module, internals) after the attention of every forward, in registration order; the
  // handle removes it.
  using AttentionHook = std::function<void(MultiHeadAttention& module, const AttentionInternals& internals)>;
  HookHandle register_attention_hook(AttentionHook fn);  // Error when fn is empty
  bool has_attention_hooks() const { return attention_hooks_.any(); }  // whether one is registered

  // The factor the scores are multiplied by before the softmax: score_scale / sqrt(head_dim).
  double scale() const;

  // The sizes: E, H, key and value features (resolved from 0), and d = E / H.
  ///@{
  int64_t embed_dim, num_heads, kdim, vdim, head_dim;
  ///@}
  // The options' dropout_p and score_scale.
  ///@{
  double dropout_p, score_scale;
  ///@}
  Generator* dropout_gen = nullptr;  // masks from here (the default generator when null)
  // The projections: q_proj E -> E, k_proj kdim -> E, v_proj vdim -> E, out_proj E -> E.
  ///@{
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;
  ///@}
  // With qk_norm, the LayerNorms [head_dim] of the queries and of the keys (null without).
  ///@{
  std::shared_ptr<LayerNorm> q_norm, k_norm;
  ///@}

 private:
  HookList<AttentionHook> attention_hooks_;
};

}  // namespace ember::nn
