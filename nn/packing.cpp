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

// ------------------------------------------------------------------ packed dropout
namespace {

void check_packed(const char* op, const Tensor& rows, const Tensor& grid_rows, int64_t grid_len, double p) {
  check_defined(rows, op, "rows");
  check_defined(grid_rows, op, "grid_rows");
  if (!is_computing_float(rows.dtype()))
    fail(op, "expected a float32 or float64 tensor, got ", dtype_name(rows.dtype()), " of shape ", rows.shape());
  if (!(p >= 0.0 && p <= 1.0)) fail(op, "probability must be in [0, 1], got ", p);
  if (rows.dim() != 2) fail(op, "expected packed rows [N, C], got shape ", rows.shape());
  if (grid_rows.dtype() != kInt64 || grid_rows.dim() != 1 || grid_rows.size(0) != rows.size(0))
    fail(op, "expected int64 grid_rows [N] with N = ", rows.size(0), ", got ", dtype_name(grid_rows.dtype()), " ",
         grid_rows.shape());
  if (grid_len <= 0) fail(op, "grid_len must be positive, got ", grid_len);
}

// The draws for rows [N, C] and each row's key: that of its place (b, s) in the grid.
Tensor packed(const char* op, const Tensor& rows, const Tensor& grid_rows, int64_t grid_len, double p, bool relu,
              Generator* gen, const Loc& loc) {
  const DropoutDraws draws = DropoutDraws::take(gen ? *gen : default_generator(), p, rows.shape());
  const std::vector<int64_t> at = grid_rows.contiguous().to_vector<int64_t>();
  std::vector<uint64_t> keys(at.size());
  for (size_t n = 0; n < at.size(); n++) {
    if (at[n] < 0) fail(op, "grid_rows[", (int64_t)n, "] = ", at[n], " is negative");
    keys[n] = draws.row_key(at[n] / grid_len, at[n] % grid_len);
  }
  return dropout_keyed(rows, draws, std::move(keys), relu, loc);
}

}  // namespace

Tensor dropout_packed(const Tensor& rows, const Tensor& grid_rows, int64_t grid_len, double p, bool training,
                      Generator* gen, Loc loc) {
  const char* op = "dropout_packed";
  check_packed(op, rows, grid_rows, grid_len, p);
  if (!training || p == 0.0) return rows;
  return packed(op, rows, grid_rows, grid_len, p, false, gen, loc);
}

Tensor relu_dropout_packed(const Tensor& rows, const Tensor& grid_rows, int64_t grid_len, double p, bool training,
                           Generator* gen, Loc loc) {
  const char* op = "relu_dropout_packed";
  check_packed(op, rows, grid_rows, grid_len, p);
  if (!training || p == 0.0) return relu(rows, loc);
  return packed(op, rows, grid_rows, grid_len, p, true, gen, loc);
}

}  // namespace ember::nn
