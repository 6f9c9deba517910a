// Attention masks: from bool tensors of either polarity, padding and look-ahead masks.
#include "nn/attention_mask.h"

namespace ember::nn {

AttentionMask AttentionMask::blocked(const Tensor& blocked_bool) {
  const char* op = "AttentionMask::blocked";
  check_defined(blocked_bool, op, "the mask");
  if (blocked_bool.dtype() != kBool)
    fail(op, "expected a bool tensor (true = blocked), got ", dtype_name(blocked_bool.dtype()), " of shape ",
         blocked_bool.shape());
  AttentionMask m;
  m.blocked_ = blocked_bool.detach();
  return m;
}

AttentionMask AttentionMask::allowed(const Tensor& allowed_bool) {
  const char* op = "AttentionMask::allowed";
  check_defined(allowed_bool, op, "the mask");
  if (allowed_bool.dtype() != kBool)
    fail(op, "expected a bool tensor (true = may attend), got ", dtype_name(allowed_bool.dtype()), " of shape ",
         allowed_bool.shape());
  AttentionMask m;
  m.blocked_ = logical_not(allowed_bool.detach());
  return m;
}

AttentionMask AttentionMask::operator|(const AttentionMask& other) const {
  if (!defined()) return other;
  if (!other.defined()) return *this;
  AttentionMask m;
  m.blocked_ = logical_or(blocked_, other.blocked_);
  return m;
}

AttentionMask AttentionMask::reshape(const Shape& shape) const {
  if (!defined()) return *this;
  AttentionMask m;
  m.blocked_ = blocked_.reshape(shape);
  return m;
}

AttentionMask padding_mask(const Tensor& tokens, int64_t pad_id) {
  check_defined(tokens, "padding_mask", "the input");
  const char* op = "padding_mask";
  if (!tokens.defined()) fail(op, "got undefined tokens");
  if (tokens.dtype() != kInt64 || tokens.dim() != 2)
    fail(op, "expected int64 tokens [B, S], got ", dtype_name(tokens.dtype()), " of shape ", tokens.shape());
  return AttentionMask::blocked(eq(tokens.detach(), from_vector(std::vector<int64_t>{pad_id}, Shape{})));
}

AttentionMask causal_mask(int64_t L, int64_t S) {
  if (L < 0 || S < 0 || L > S)
    fail("causal_mask", "expected 0 <= L <= S (queries are the last L of S positions), got L = ", L, ", S = ", S);
  Tensor m = empty({L, S}, kBool);
  uint8_t* p = m.data<uint8_t>();
  for (int64_t i = 0; i < L; i++)
    for (int64_t j = 0; j < S; j++) p[i * S + j] = j > i + (S - L);
  return AttentionMask::blocked(m);
}

}  // namespace ember::nn
