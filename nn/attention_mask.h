// The masks attention takes. One polarity everywhere: true = blocked, the pair (query i,
// key j) may not be used.
#pragma once
#include <cstdint>

#include "core/ops.h"

namespace ember::nn {

// Which (query, key) pairs attention may not use. One polarity everywhere: true = blocked,
// as in torch.nn.MultiheadAttention's bool masks (torch's scaled_dot_product_attention
// takes the opposite: build such a mask with allowed()). Only bool masks exist, no
// additive float masks. The default mask is "none": nothing is blocked, defined() is false.
class AttentionMask {
 public:
  AttentionMask() = default;
  // From a bool tensor where true = blocked (an Error for any other dtype, or undefined).
  static AttentionMask blocked(const Tensor& blocked_bool);
  // From a bool tensor where true = may attend; stored inverted. Error as blocked().
  static AttentionMask allowed(const Tensor& allowed_bool);

  bool defined() const { return blocked_.defined(); }  // false for the "none" mask
  // The bool tensor, true = blocked; undefined for the "none" mask.
  const Tensor& blocked() const { return blocked_; }
  // Blocked where either mask blocks, with broadcasting; none | m = m.
  AttentionMask operator|(const AttentionMask& other) const;
  // The same mask with a new shape (e.g. [B, S] -> [B, 1, 1, S]); none stays none.
  AttentionMask reshape(const Shape& shape) const;

 private:
  Tensor blocked_;
};

// [B, S], blocked where tokens (int64 [B, S]) == pad_id: a key padding mask. Error for
// another dtype or rank.
AttentionMask padding_mask(const Tensor& tokens, int64_t pad_id);

// [L, S], blocked where key j lies in the future of query i: j > i + (S - L). With L == S
// the usual look-ahead mask; with L < S the queries are the last L of S positions
// (incremental decoding with a cache of S - L earlier keys). Error unless 0 <= L <= S.
AttentionMask causal_mask(int64_t L, int64_t S);

}  // namespace ember::nn
