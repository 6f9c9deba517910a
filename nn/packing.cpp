// Packing: the kept positions of a padded batch, and gathering to and from them.
#include "nn/packing.h"

namespace ember::nn {

Packing Packing::of(const Tensor& ids, int64_t pad_id) {
  check_defined(ids, "Packing::of", "ids");
  AttentionMask padding = padding_mask(ids, pad_id);  // checks int64 [B, S]
  Packing p;
  p.batch = ids.size(0), p.length = ids.size(1);
  const int64_t total = p.batch * p.length;
  Tensor flat = ids.detach().contiguous();
  const int64_t* id = flat.data<int64_t>();
  std::vector<int64_t> rows, positions, slots((size_t)total);
  for (int64_t i = 0; i < total; i++) {
    const bool kept = id[i] != pad_id;
    slots[(size_t)i] = kept ? (int64_t)rows.size() : -1;
    if (kept) rows.push_back(i), positions.push_back(i % p.length);
  }
  p.count = (int64_t)rows.size();
  for (auto& s : slots)
    if (s < 0) s = p.count;
  p.rows = from_vector(rows, {p.count});
  p.positions = from_vector(positions, {p.count});
  p.slots = from_vector(slots, {total});
  p.padding = padding;
  return p;
}

Tensor Packing::pack(const Tensor& padded) const {
  check_defined(padded, "Packing::pack");
  if (padded.dim() < 2 || padded.size(0) != batch || padded.size(1) != length)
    fail("Packing::pack", "expected [B, S, ...] = [", batch, ", ", length, ", ...], got shape ", padded.shape());
  Shape rest(padded.shape().begin() + 2, padded.shape().end()), flat{batch * length}, out{count};
  flat.insert(flat.end(), rest.begin(), rest.end());
  out.insert(out.end(), rest.begin(), rest.end());
  if (count == batch * length) return padded.reshape(out);
  return index_select(padded.reshape(flat), 0, rows);
}

Tensor Packing::unpack(const Tensor& packed) const {
  check_defined(packed, "Packing::unpack");
  if (packed.dim() < 1 || packed.size(0) != count)
    fail("Packing::unpack", "expected [N, ...] with N = ", count, " kept positions, got shape ", packed.shape());
  Shape rest(packed.shape().begin() + 1, packed.shape().end()), out{batch, length}, pad{1};
  out.insert(out.end(), rest.begin(), rest.end());
  pad.insert(pad.end(), rest.begin(), rest.end());
  if (count == batch * length) return packed.reshape(out);
  // row N of [packed; 0] is the zero every padding slot points at
  return index_select(cat({packed, zeros(pad, packed.dtype())}, 0), 0, slots).reshape(out);
}

}  // namespace ember::nn
