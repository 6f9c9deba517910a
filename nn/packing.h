// A padded batch's layout without its padding: position-wise layers run on the kept rows.
#pragma once
#include <cstdint>

#include "core/ops.h"
#include "nn/attention_mask.h"

namespace ember::nn {

// The non-padding positions of a padded batch of token ids [B, S], so that position-wise
// layers (projections, feed-forward, LayerNorm, dropout) can run on the N kept positions
// as rows [N, E] instead of on all B * S of [B, S, E]: for a batch whose sequences vary
// in length, the work spent on padding goes away. Rows are kept in order, b-major.
struct Packing {
  // B, S and N: the batch size, the padded length and the number of kept positions.
  ///@{
  int64_t batch = 0, length = 0, count = 0;
  ///@}
  Tensor rows;  // int64 [N]: b * S + s of each kept position
  Tensor slots;  // int64 [B * S]: the row of each position, N for padding
  Tensor positions;  // int64 [N]: s of each kept position
  AttentionMask padding;  // [B, S], blocked at padding

  // From int64 token ids [B, S], keeping the positions != pad_id. Error for another
  // dtype or rank.
  static Packing of(const Tensor& ids, int64_t pad_id);
  // [B, S, ...] -> [N, ...]: the kept positions (with autograd). Error for another shape.
  Tensor pack(const Tensor& padded) const;
  // [N, ...] -> [B, S, ...], zeros at padding (with autograd). Error unless packed is
  // [N, ...].
  Tensor unpack(const Tensor& packed) const;
};

// Dropout of the packed rows [N, C] of a padded [B, S, C] tensor: row n is position
// grid_rows[n] = b * S + s of the grid (S = grid_len) and gets the mask dropout() gives
// that position of the padded tensor (a Packing's rows are such grid rows). Error unless
// rows are float [N, C], grid_rows int64 [N] and not negative, grid_len > 0 and
// 0 <= p <= 1.
Tensor dropout_packed(const Tensor& rows, const Tensor& grid_rows, int64_t grid_len, double p, bool training = true,
                      Generator* gen = nullptr, Loc loc = Loc::current());
// dropout_packed(relu(rows)) in one pass, with the same mask, as relu_dropout.
Tensor relu_dropout_packed(const Tensor& rows, const Tensor& grid_rows, int64_t grid_len, double p,
                           bool training = true, Generator* gen = nullptr, Loc loc = Loc::current());

}  // namespace ember::nn
