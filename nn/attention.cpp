// Scaled dot-product attention: the masks, the fused op (batched GEMMs through core's
// kernel, a masked softmax row kernel, a hand-written backward) and the reference
// composed of primitive ops.
//
// Fused forward, per batch entry (P the weights, K the dropout's keep factors 0 or 1/(1-p)):
//   S  = scale * q k^T, blocked pairs removed      [L, S]
//   P  = softmax(S) per row; all zeros when every key of the row is blocked
//   Pd = P * K                                     (P itself without dropout)
//   out = Pd v                                     [L, Dv]
// Backward (dO the output's gradient):
//   dv  = Pd^T dO
//   dPd = dO v^T,  dP = dPd * K
//   dS  = P * (dP - rowsum(dP * P))                (softmax backward; 0 where blocked, as P is)
//   dq  = scale * dS k,  dk = scale * dS^T q
#include "nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels.h"
#include "core/parallel.h"
#include "core/vec.h"

namespace ember::nn {

// ------------------------------------------------------------------ masks
AttentionMask AttentionMask::blocked(const Tensor& blocked_bool) {
  const char* op = "AttentionMask::blocked";
  if (!blocked_bool.defined()) fail(op, "got an undefined tensor");
  if (blocked_bool.dtype() != kBool)
    fail(op, "expected a bool tensor (true = blocked), got ", dtype_name(blocked_bool.dtype()), " of shape ",
         blocked_bool.shape());
  AttentionMask m;
  m.blocked_ = blocked_bool.detach();
  return m;
}

AttentionMask AttentionMask::allowed(const Tensor& allowed_bool) {
  const char* op = "AttentionMask::allowed";
  if (!allowed_bool.defined()) fail(op, "got an undefined tensor");
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
  const char* op = "padding_mask";
  if (!tokens.defined()) fail(op, "got undefined tokens");
  if (tokens.dtype() != kInt64 || tokens.dim() != 2)
    fail(op, "expected int64 tokens [B, S], got ", dtype_name(tokens.dtype()), " of shape ", tokens.shape());
  return AttentionMask::blocked(eq(tokens.detach(), from_vector(std::vector<int64_t>{pad_id}, Shape{})));
}

Packing Packing::of(const Tensor& ids, int64_t pad_id) {
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
  if (padded.dim() < 2 || padded.size(0) != batch || padded.size(1) != length)
    fail("Packing::pack", "expected [B, S, ...] = [", batch, ", ", length, ", ...], got shape ", padded.shape());
  Shape rest(padded.shape().begin() + 2, padded.shape().end()), flat{batch * length}, out{count};
  flat.insert(flat.end(), rest.begin(), rest.end());
  out.insert(out.end(), rest.begin(), rest.end());
  if (count == batch * length) return padded.reshape(out);
  return index_select(padded.reshape(flat), 0, rows);
}

Tensor Packing::unpack(const Tensor& packed) const {
  if (packed.dim() < 1 || packed.size(0) != count)
    fail("Packing::unpack", "expected [N, ...] with N = ", count, " kept positions, got shape ", packed.shape());
  Shape rest(packed.shape().begin() + 1, packed.shape().end()), out{batch, length}, pad{1};
  out.insert(out.end(), rest.begin(), rest.end());
  pad.insert(pad.end(), rest.begin(), rest.end());
  if (count == batch * length) return packed.reshape(out);
  // row N of [packed; 0] is the zero every padding slot points at
  return index_select(cat({packed, zeros(pad, packed.dtype())}, 0), 0, slots).reshape(out);
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

// ------------------------------------------------------------------ shared checks
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Sizes of one attention call: q [batch.., L, D], k [batch.., S, D], v [batch.., S, Dv].
struct Geometry {
  Shape batch;  // the broadcast leading dims of q, k and v
  int64_t L = 0, S = 0, D = 0, Dv = 0;
  Shape with(int64_t rows, int64_t cols) const {
    Shape s = batch;
    s.push_back(rows);
    s.push_back(cols);
    return s;
  }
};

Shape leading(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

Geometry check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  if (!q.defined() || !k.defined() || !v.defined()) fail(op, "got an undefined q, k or v");
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    fail(op, "expected q [..., L, D], k [..., S, D] and v [..., S, Dv] with at least 2 dims each, got q ", q.shape(),
         ", k ", k.shape(), ", v ", v.shape());
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype())
    fail(op, "expected q, k and v of the same dtype, got q ", dtype_name(q.dtype()), " ", q.shape(), ", k ",
         dtype_name(k.dtype()), " ", k.shape(), ", v ", dtype_name(v.dtype()), " ", v.shape());
  if (!is_floating(q.dtype()))
    fail(op, "expected float32 or float64 q, k and v, got ", dtype_name(q.dtype()), " q ", q.shape(), ", k ",
         k.shape(), ", v ", v.shape());
  Geometry g;
  g.L = q.size(-2);
  g.S = k.size(-2);
  g.D = q.size(-1);
  g.Dv = v.size(-1);
  if (k.size(-1) != g.D)
    fail(op, "q ", q.shape(), " and k ", k.shape(), " must have the same feature size D (last dim), got ", g.D,
         " and ", k.size(-1));
  if (v.size(-2) != g.S)
    fail(op, "k ", k.shape(), " and v ", v.shape(), " must have the same number of keys S (dim -2), got ", g.S,
         " and ", v.size(-2));
  try {
    g.batch = broadcast_shapes(broadcast_shapes(leading(q), leading(k), op), leading(v), op);
  } catch (const Error&) {
    fail(op, "the batch dims of q ", q.shape(), ", k ", k.shape(), " and v ", v.shape(), " do not broadcast (",
         leading(q), ", ", leading(k), ", ", leading(v), ")");
  }
  if (mask.defined()) {
    const Tensor& m = mask.blocked();
    if (m.dtype() != kBool)
      fail(op, "expected a bool mask (true = blocked), got ", dtype_name(m.dtype()), " of shape ", m.shape());
    const Shape scores = g.with(g.L, g.S);
    bool ok = m.dim() <= (int64_t)scores.size();
    for (int64_t d = 1; ok && d <= m.dim(); d++) {
      int64_t have = m.shape()[m.dim() - d], want = scores[scores.size() - d];
      ok = have == want || have == 1;
    }
    if (!ok)
      fail(op, "a mask of shape ", m.shape(), " cannot be broadcast to the scores' shape [..., L, S] = ", scores,
           " (q ", q.shape(), ", k ", k.shape(), ")");
  }
  return g;
}

double default_scale(double scale, int64_t D) {
  return scale != 0.0 ? scale : 1.0 / std::sqrt((double)std::max<int64_t>(D, 1));
}

// Element offset of the start of every row (all dims but the last) of a strided tensor,
// rows in row-major order.
std::vector<int64_t> row_starts(const Tensor& t) {
  const int64_t nd = t.dim() - 1;
  int64_t rows = 1;
  for (int64_t d = 0; d < nd; d++) rows *= t.size(d);
  std::vector<int64_t> starts(rows);
  Shape idx(nd, 0);
  int64_t off = 0;
  for (int64_t r = 0; r < rows; r++) {
    starts[r] = off;
    for (int64_t d = nd - 1; d >= 0; d--) {
      off += t.stride(d);
      if (++idx[d] < t.size(d)) break;
      off -= idx[d] * t.stride(d);
      idx[d] = 0;
    }
  }
  return starts;
}

// --- row kernels
// p [rows, S]: on entry the raw scores q k^T, on exit the weights softmax(scale * p) with
// blocked entries 0, and a row of zeros where every entry is blocked. Row r is blocked at
// column j where blocked[row_start[r] + j * col_stride] != 0 (nothing blocked when
// blocked is null).
template <class T>
void masked_softmax_rows(T* p, int64_t rows, int64_t S, T scale, const uint8_t* blocked, const int64_t* row_start,
                         int64_t col_stride) {
  parallel_for(rows, S * 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) {
      T* x = p + r * S;
      const uint8_t* m = blocked ? blocked + row_start[r] : nullptr;
      if (!m) {  // nothing blocked: the vectorised path
        for (int64_t j = 0; j < S; j++) x[j] *= scale;
        const T mx = vec::lane_max(x, S);
        for (int64_t j = 0; j < S; j++) x[j] = vec::exp(x[j] - mx);
        const T inv = T(1) / vec::lane_sum<T>(S, [&](int64_t j) { return x[j]; });
        for (int64_t j = 0; j < S; j++) x[j] *= inv;
        continue;
      }
      auto is_blocked = [&](int64_t j) { return m[j * col_stride] != 0; };
      T mx = -std::numeric_limits<T>::infinity();
      bool any = false;
      for (int64_t j = 0; j < S; j++) {
        if (is_blocked(j)) continue;
        x[j] *= scale;
        mx = std::max(mx, x[j]);
        any = true;
      }
      if (!any) {
        std::fill(x, x + S, T(0));
        continue;
      }
      T sum = 0;
      for (int64_t j = 0; j < S; j++) {
        T w = is_blocked(j) ? T(0) : vec::exp(x[j] - mx);
        x[j] = w;
        sum += w;
      }
      const T inv = T(1) / sum;
      for (int64_t j = 0; j < S; j++) x[j] *= inv;
    }
  });
}

// d [rows, S]: on entry the gradient of the weights after dropout (dPd), on exit the
// gradient of the raw scores q k^T:  dP = dPd * keep (keep null: no dropout),
// dS = P * (dP - sum_j dP_j P_j), times scale.  p [rows, S] the weights before dropout.
template <class T>
void masked_softmax_rows_backward(T* d, const T* p, const T* keep, int64_t rows, int64_t S, T scale) {
  parallel_for(rows, S * 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; r++) {
      T* dr = d + r * S;
      const T* pr = p + r * S;
      if (keep)
        for (int64_t j = 0; j < S; j++) dr[j] *= keep[r * S + j];
      const T dot = vec::lane_sum<T>(S, [&](int64_t j) { return dr[j] * pr[j]; });
      for (int64_t j = 0; j < S; j++) dr[j] = scale * pr[j] * (dr[j] - dot);
    }
  });
}

// The dropout's keep factors for a tensor of the given shape: 0 with probability p,
// else 1/(1-p); the same draws as ember::dropout on a contiguous tensor of that shape.
Tensor dropout_keep(const Shape& shape, DType dtype, double p, Generator& gen) {
  const int64_t n = numel_of(shape);
  const uint64_t first = gen.reserve(n);
  const double kept = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  Tensor keep = empty(shape, dtype);
  dispatch_float(dtype, kOp, [&](auto tag) {
    using T = decltype(tag);
    T* k = keep.data<T>();
    const uint64_t thr = Generator::below_threshold(p);
    parallel_for(n, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) k[i] = gen.below(first + i, thr) ? T(0) : T(kept);
    });
  });
  return keep;
}

}  // namespace

// ------------------------------------------------------------------ the fused op
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionMask& mask, double dropout_p, bool training,
                                             Generator* gen, double scale, Loc loc) {
  const Geometry g = check_inputs(kOp, q, k, v, mask);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) fail(kOp, "dropout_p must be in [0, 1], got ", dropout_p);
  const double sc = default_scale(scale, g.D);
  const DType dt = q.dtype();
  const int64_t rows = numel_of(g.batch) * g.L;

  // every operand carries the broadcast batch shape (stride 0 where broadcast)
  Tensor qe = q.detach().expand(g.with(g.L, g.D));
  Tensor ke = k.detach().expand(g.with(g.S, g.D));
  Tensor ve = v.detach().expand(g.with(g.S, g.Dv));

  Tensor p = empty(g.with(g.L, g.S), dt);  // raw scores, then the weights in place
  kernel::gemm_batched(p, qe, ke.mT());
  Tensor me;
  std::vector<int64_t> mask_rows;
  if (mask.defined()) {
    me = mask.blocked().expand(p.shape());
    mask_rows = row_starts(me);
  }
  dispatch_float(dt, kOp, [&](auto tag) {
    using T = decltype(tag);
    masked_softmax_rows<T>(p.data<T>(), rows, g.S, T(sc), me.defined() ? me.data<uint8_t>() : nullptr,
                           mask_rows.data(), me.defined() ? me.stride(-1) : 0);
  });

  Tensor keep, pd = p;
  if (training && dropout_p > 0.0) {
    keep = dropout_keep(p.shape(), dt, dropout_p, gen ? *gen : default_generator());
    NoGradGuard no_grad;
    pd = mul(p, keep);
  }
  Tensor out = empty(g.with(g.L, g.Dv), dt);
  kernel::gemm_batched(out, pd, ve);

  BackwardFn bw;
  if (wants_grad(q, k, v)) {
    const bool gq = q.requires_grad(), gk = k.requires_grad(), gv = v.requires_grad();
    // save only what the needed gradients use
    Tensor saved_q = gk ? qe : Tensor(), saved_k = gq ? ke : Tensor(), saved_v = (gq || gk) ? ve : Tensor();
    const uint64_t p_version = p.storage()->version;
    bw = [g, rows, sc, gq, gk, gv, p, keep, saved_q, saved_k, saved_v, p_version](const Tensor& dout) {
      if (p.storage()->version != p_version)
        fail(kOp, "the attention weights saved for backward were modified in place after the forward");
      Tensor dq, dk, dv;
      if (gv) {
        Tensor pdrop = keep.defined() ? mul(p, keep) : p;
        dv = empty(g.with(g.S, g.Dv), dout.dtype());
        kernel::gemm_batched(dv, pdrop.mT(), dout);
      }
      if (gq || gk) {
        Tensor ds = empty(g.with(g.L, g.S), dout.dtype());
        kernel::gemm_batched(ds, dout, saved_v.mT());
        dispatch_float(ds.dtype(), kOp, [&](auto tag) {
          using T = decltype(tag);
          masked_softmax_rows_backward<T>(ds.data<T>(), p.data<T>(), keep.defined() ? keep.data<T>() : nullptr, rows,
                                          g.S, T(sc));
        });
        if (gq) {
          dq = empty(g.with(g.L, g.D), dout.dtype());
          kernel::gemm_batched(dq, ds, saved_k);
        }
        if (gk) {
          dk = empty(g.with(g.S, g.D), dout.dtype());
          kernel::gemm_batched(dk, ds.mT(), saved_q);
        }
      }
      // broadcast batch dims are summed back to each input's shape by the engine
      return std::vector<Tensor>{dq, dk, dv};
    };
  }
  return {record(kOp, loc, out, {q, k, v}, std::move(bw)), p};
}

// ------------------------------------------------------------------ the tiled op
namespace {

constexpr int64_t kQueryBlock = 64, kKeyBlock = 128;

// Where one attention call's operands lie: per head (a flat batch index), the first row
// of q, k, v, out and the mask, each with its row stride; columns are contiguous (the
// mask's column stride aside).
struct TiledGeometry {
  Geometry g;
  int64_t heads = 0;
  std::vector<int64_t> q0, k0, v0, mask_rows;  // mask_rows: one per (head, query)
  int64_t q_rs = 0, k_rs = 0, v_rs = 0, mask_cs = 0;
  const uint8_t* mask = nullptr;
  double scale = 1;
  // dropout: keep (i) decided by draw first + i of a generator with this seed, i the
  // flat index of the weight in [..., L, S]
  bool dropout = false;
  uint64_t seed = 0, first = 0, threshold = 0;
  double kept = 1;
};

// The first element of every head's matrix in t [batch.., R, C] (stride 0 where broadcast).
std::vector<int64_t> head_starts(const Tensor& t, int64_t heads) {
  std::vector<int64_t> rows = row_starts(t), out((size_t)heads);
  const int64_t R = t.size(-2);
  for (int64_t h = 0; h < heads; h++) out[(size_t)h] = rows[(size_t)(h * R)];
  return out;
}

template <class F>
void over_tasks(int64_t tasks, double flops_each, F&& f) {
  if (tasks >= 2 && num_threads() > 1 && !in_parallel_region() && flops_each * double(tasks) >= 1e6) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; t++) f(t);
  } else {
    for (int64_t t = 0; t < tasks; t++) f(t);
  }
}

// One query block of one head: out rows and their log-sum-exp.
template <class T>
void tiled_forward_block(const TiledGeometry& tg, const T* q, const T* k, const T* v, T* out, T* lse, int64_t h,
                         int64_t i0) {
  const Geometry& g = tg.g;
  const int64_t nq = std::min(kQueryBlock, g.L - i0), Dv = g.Dv;
  std::vector<T> s((size_t)(nq * kKeyBlock)), o((size_t)(nq * Dv), T(0)), m((size_t)nq), l((size_t)nq, T(0));
  std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
  const T sc = T(tg.scale);
  Generator gen(tg.seed);
  for (int64_t j0 = 0; j0 < g.S; j0 += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, g.S - j0);
    kernel::gemm_serial(false, true, nq, nk, g.D, q + tg.q0[h] + i0 * tg.q_rs, tg.q_rs, k + tg.k0[h] + j0 * tg.k_rs,
                        tg.k_rs, s.data(), nk, false);
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
      if (tg.dropout) {
        const uint64_t base = tg.first + (uint64_t)(row * g.S + j0);
        for (int64_t c = 0; c < nk; c++) x[c] *= gen.below(base + c, tg.threshold) ? T(0) : T(tg.kept);
      }
    }
    kernel::gemm_serial(false, false, nq, Dv, nk, s.data(), nk, v + tg.v0[h] + j0 * tg.v_rs, tg.v_rs, o.data(), Dv,
                        true);
  }
  for (int64_t r = 0; r < nq; r++) {
    const T lr = l[(size_t)r], inv = lr > 0 ? T(1) / lr : T(0);
    T* dst = out + (h * g.L + i0 + r) * Dv;
    for (int64_t c = 0; c < Dv; c++) dst[c] = o[(size_t)(r * Dv + c)] * inv;
    lse[h * g.L + i0 + r] = lr > 0 ? m[(size_t)r] + std::log(lr) : std::numeric_limits<T>::infinity();
  }
}

// One head's gradients, key block by key block, query block by query block.
template <class T>
void tiled_backward_head(const TiledGeometry& tg, const T* q, const T* k, const T* v, const T* out, const T* lse,
                         const T* dout, T* dq, T* dk, T* dv, int64_t h) {
  const Geometry& g = tg.g;
  const int64_t D = g.D, Dv = g.Dv;
  const T sc = T(tg.scale);
  Generator gen(tg.seed);
  std::vector<T> delta((size_t)g.L);  // sum_c dout * out per query: sum_j P_ij dP_ij
  for (int64_t i = 0; i < g.L; i++) {
    const T* a = dout + (h * g.L + i) * Dv;
    const T* b = out + (h * g.L + i) * Dv;
    delta[(size_t)i] = vec::lane_sum<T>(Dv, [&](int64_t c) { return a[c] * b[c]; });
  }
  // per block: the weights P, P * keep, the keep factors (0 or 1/(1-p)), and dP then dS
  std::vector<T> p((size_t)(kQueryBlock * kKeyBlock)), pd(p.size()), keep(p.size()), dp(p.size());
  const T* qh = q + tg.q0[h];
  const T* kh = k + tg.k0[h];
  const T* vh = v + tg.v0[h];
  for (int64_t j0 = 0; j0 < g.S; j0 += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, g.S - j0);
    for (int64_t i0 = 0; i0 < g.L; i0 += kQueryBlock) {
      const int64_t nq = std::min(kQueryBlock, g.L - i0);
      kernel::gemm_serial(false, true, nq, nk, D, qh + i0 * tg.q_rs, tg.q_rs, kh + j0 * tg.k_rs, tg.k_rs, p.data(),
                          nk, false);
      for (int64_t r = 0; r < nq; r++) {  // the weights P, and Pd = P * keep
        const int64_t row = h * g.L + i0 + r;
        T* x = p.data() + r * nk;
        T* xd = pd.data() + r * nk;
        T* kf = keep.data() + r * nk;
        const T shift = lse[row];
        const uint8_t* blocked = tg.mask ? tg.mask + tg.mask_rows[(size_t)row] + j0 * tg.mask_cs : nullptr;
        for (int64_t c = 0; c < nk; c++) x[c] = vec::exp(x[c] * sc - shift);  // shift = inf: 0
        if (blocked)
          for (int64_t c = 0; c < nk; c++) x[c] = blocked[c * tg.mask_cs] ? T(0) : x[c];
        if (tg.dropout) {
          const uint64_t base = tg.first + (uint64_t)(row * g.S + j0);
          for (int64_t c = 0; c < nk; c++) kf[c] = gen.below(base + c, tg.threshold) ? T(0) : T(tg.kept);
          for (int64_t c = 0; c < nk; c++) xd[c] = x[c] * kf[c];
        } else {
          std::copy(x, x + nk, xd);
        }
      }
      const T* dout_i = dout + (h * g.L + i0) * Dv;
      kernel::gemm_serial(true, false, nk, Dv, nq, pd.data(), nk, dout_i, Dv, dv + (h * g.S + j0) * Dv, Dv, true);
      kernel::gemm_serial(false, true, nq, nk, Dv, dout_i, Dv, vh + j0 * tg.v_rs, tg.v_rs, dp.data(), nk, false);
      for (int64_t r = 0; r < nq; r++) {  // dS = P * (dP - delta) * scale, dP = dPd * keep
        T* d = dp.data() + r * nk;
        const T* x = p.data() + r * nk;
        const T* kf = keep.data() + r * nk;
        const T dl = delta[(size_t)(i0 + r)];
        if (tg.dropout)
          for (int64_t c = 0; c < nk; c++) d[c] *= kf[c];
        for (int64_t c = 0; c < nk; c++) d[c] = sc * x[c] * (d[c] - dl);
      }
      kernel::gemm_serial(false, false, nq, D, nk, dp.data(), nk, kh + j0 * tg.k_rs, tg.k_rs, dq + (h * g.L + i0) * D,
                          D, true);
      kernel::gemm_serial(true, false, nk, D, nq, dp.data(), nk, qh + i0 * tg.q_rs, tg.q_rs, dk + (h * g.S + j0) * D,
                          D, true);
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
  Tensor me;
  if (mask.defined()) {
    me = mask.blocked().expand(g.with(g.L, g.S));
    tg.mask_rows = row_starts(me);
    tg.mask_cs = me.stride(-1);
    tg.mask = me.data<uint8_t>();
  }
  if (training && dropout_p > 0.0) {
    Generator& gr = gen ? *gen : default_generator();
    tg.dropout = true;
    tg.seed = gr.seed();
    tg.first = gr.reserve((uint64_t)(tg.heads * g.L * g.S));
    tg.threshold = Generator::below_threshold(dropout_p);
    tg.kept = dropout_p < 1.0 ? 1.0 / (1.0 - dropout_p) : 0.0;
  }
  const int64_t qblocks = (g.L + kQueryBlock - 1) / kQueryBlock;
  const double flops = 2.0 * double(std::min(kQueryBlock, g.L)) * double(g.S) * double(g.D + g.Dv);
  dispatch_float(dt, op, [&](auto tag) {
    using T = decltype(tag);
    over_tasks(tg.heads * qblocks, flops, [&](int64_t t) {
      tiled_forward_block<T>(tg, qe.data<T>(), ke.data<T>(), ve.data<T>(), out.data<T>(), lse.data<T>(), t / qblocks,
                             (t % qblocks) * kQueryBlock);
    });
  });

  BackwardFn bw;
  if (wants_grad(q, k, v)) {
    const uint64_t out_version = out.storage()->version;
    Tensor saved_out = out.detach();
    bw = [tg, qe, ke, ve, me, lse, saved_out, out_version, op](const Tensor& dout_in) {
      if (saved_out.storage()->version != out_version)
        fail(op, "the attention output saved for backward was modified in place after the forward");
      const Geometry& g = tg.g;
      Tensor dout = dout_in.contiguous();
      Tensor dq = zeros(g.with(g.L, g.D), dout.dtype()), dk = zeros(g.with(g.S, g.D), dout.dtype()),
             dv = zeros(g.with(g.S, g.Dv), dout.dtype());
      const double flops = 4.0 * double(g.L) * double(g.S) * double(g.D + g.Dv);
      dispatch_float(dout.dtype(), op, [&](auto tag) {
        using T = decltype(tag);
        over_tasks(tg.heads, flops, [&](int64_t h) {
          tiled_backward_head<T>(tg, qe.data<T>(), ke.data<T>(), ve.data<T>(), saved_out.data<T>(), lse.data<T>(),
                                 dout.data<T>(), dq.data<T>(), dk.data<T>(), dv.data<T>(), h);
        });
      });
      // broadcast batch dims are summed back to each input's shape by the engine
      return std::vector<Tensor>{dq, dk, dv};
    };
  }
  return record(op, loc, out, {q, k, v}, std::move(bw));
}

// ------------------------------------------------------------------ the reference
AttentionResult scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const AttentionMask& mask, double scale) {
  const char* op = "scaled_dot_product_attention_reference";
  const Geometry g = check_inputs(op, q, k, v, mask);
  Tensor scores = mul(matmul(q, k.mT()), default_scale(scale, g.D));  // [..., L, S]
  if (!mask.defined()) {
    Tensor w = softmax(scores, -1);
    return {matmul(w, v), w.detach()};
  }
  // The lowest finite value rather than -inf: a fully blocked row then gives a uniform
  // softmax instead of NaN (none even in intermediates), and where() replaces it by zeros.
  const double lowest = q.dtype() == kFloat32 ? (double)std::numeric_limits<float>::lowest()
                                              : std::numeric_limits<double>::lowest();
  const Tensor& blocked = mask.blocked();
  scores = masked_fill(scores, blocked, lowest);
  Tensor all_blocked = eq(sum(blocked.expand(scores.shape()), {-1}, /*keepdim=*/true), (double)g.S);  // [..., L, 1]
  Tensor w = where(all_blocked, zeros({}, q.dtype()), softmax(scores, -1));
  return {matmul(w, v), w.detach()};
}

}  // namespace ember::nn
