// Masking, joining and indexing: masked_fill, where, cat, stack, split, chunk,
// index_select, gather, embedding_lookup. Forward through kernels, backward recorded only
// when needed; backward functions run with grad mode off and may use other ops.
#include "core/ops.h"

#include <algorithm>

#include "core/forward_ad.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/index.h"
#include "core/ops/helpers.h"

namespace ember {

using kernel::map2;
using kernel::map3;
using ops_detail::same_dtype;

// ------------------------------------------------------------------ masking
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value, Loc loc) {
  check_defined(a, "masked_fill", "a");
  check_defined(mask, "masked_fill", "mask");
  if (mask.dtype() != kBool)
    fail("masked_fill", "expected a bool mask, got ", dtype_name(mask.dtype()), " of shape ", mask.shape());
  Shape s = broadcast_shapes(a.shape(), mask.shape(), "masked_fill");
  if (s != a.shape())
    fail("masked_fill", "a mask of shape ", mask.shape(), " cannot be broadcast to the input's shape ", a.shape());
  Tensor me = mask.detach().expand(s);
  Tensor out = empty(s, a.dtype());
  if (a.dtype() == kBFloat16) {  // moves elements, computes nothing: the value rounded to bfloat16
    const BFloat16 v((float)value);
    map2<BFloat16, BFloat16, uint8_t>(out, a.detach(), me, [v](BFloat16 x, uint8_t m) { return m ? v : x; });
  } else {
    dispatch_numeric(a.dtype(), "masked_fill", [&](auto tag) {
      using T = decltype(tag);
      const T v = scalar_as<T>(value, "masked_fill", /*integral=*/false);
      map2<T, T, uint8_t>(out, a.detach(), me, [v](T x, uint8_t m) { return m ? v : x; });
    });
  }
  BackwardFn bw;
  if (wants_grad(a)) bw = [me](const Tensor& g) { return std::vector<Tensor>{masked_fill(g, me, 0.0)}; };
  return record("masked_fill", loc, out, {a}, std::move(bw), {me},
                [&](const std::vector<Tensor>& t) { return masked_fill(t[0], me, 0.0); });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Loc loc) {
  check_defined(cond, "where", "cond");
  check_defined(a, "where", "a");
  check_defined(b, "where", "b");
  if (cond.dtype() != kBool)
    fail("where", "expected a bool condition, got ", dtype_name(cond.dtype()), " of shape ", cond.shape());
  same_dtype("where", a, b);
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor ce = cond.detach().expand(s);
  Tensor out = empty(s, a.dtype());
  dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map3<T, uint8_t, T, T>(out, ce, a.detach().expand(s), b.detach().expand(s),
                           [](uint8_t c, T x, T y) { return c ? x : y; });
  });
  BackwardFn bw;
  if (wants_grad(a, b)) {
    bool ga = a.requires_grad(), gb = b.requires_grad();
    bw = [ce, ga, gb](const Tensor& g) {
      Tensor z = zeros({}, g.dtype());
      return std::vector<Tensor>{Tensor(), ga ? where(ce, g, z) : Tensor(), gb ? where(ce, z, g) : Tensor()};
    };
  }
  auto jvp = [&](const std::vector<Tensor>& t) {
    Tensor z = zeros({}, a.dtype());
    return where(ce, t[1].defined() ? t[1] : z, t[2].defined() ? t[2] : z);
  };
  return record("where", loc, out, {cond, a, b}, std::move(bw), {ce}, jvp);
}

Tensor where(const Tensor& cond, const Tensor& a, double b, Loc loc) {
  check_defined(cond, "where", "cond");
  check_defined(a, "where", "a");
  if (a.dtype() == kInt64) (void)scalar_as<int64_t>(b, "where", /*integral=*/true);
  if (a.dtype() == kBool && b != 0 && b != 1)
    fail("where", "the scalar ", b, " is not a bool (0 or 1), and the tensor is bool");
  return where(cond, a, full({}, b, a.dtype()), loc);
}

// ------------------------------------------------------------------ joining, splitting
static void check_all_defined(const std::vector<Tensor>& ts, const char* op) {
  for (size_t i = 0; i < ts.size(); i++)
    if (!ts[i].defined()) fail_undefined(ts[i], op, cat_str("tensor ", (int64_t)i, " of the list").c_str());
}

Tensor cat(const std::vector<Tensor>& ts, int64_t dim, Loc loc) {
  if (ts.empty()) fail("cat", "expected a non-empty list of tensors");
  check_all_defined(ts, "cat");
  const Tensor& t0 = ts[0];
  dim = wrap_dim(dim, t0.dim(), "cat");
  if (t0.dim() == 0) fail("cat", "zero-dim tensors cannot be concatenated; use stack");
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); i++) {
    const Tensor& t = ts[i];
    if (t.dtype() != t0.dtype())
      fail("cat", "expected all tensors to have dtype ", dtype_name(t0.dtype()), ", but tensor ", (int64_t)i, " is ",
           dtype_name(t.dtype()));
    bool ok = t.dim() == t0.dim();
    for (int64_t d = 0; ok && d < t.dim(); d++)
      if (d != dim && t.size(d) != t0.size(d)) ok = false;
    if (!ok)
      fail("cat", "sizes must match except in dim ", dim, ": tensor 0 has shape ", t0.shape(), " but tensor ",
           (int64_t)i, " has shape ", t.shape());
    if (__builtin_add_overflow(total, t.size(dim), &total))
      fail("cat", "the sizes in dim ", dim, " of ", (int64_t)ts.size(), " tensors of shape ", t0.shape(),
           " ... add up to more than 2^63");
  }
  Shape s = t0.shape();
  s[dim] = total;
  checked_numel(s, "cat");
  Tensor out = empty(s, t0.dtype());
  std::vector<int64_t> sizes;
  int64_t off = 0;
  for (const Tensor& t : ts) {
    out.narrow(dim, off, t.size(dim)).copy_(t.detach());
    sizes.push_back(t.size(dim));
    off += t.size(dim);
  }
  BackwardFn bw;
  if (wants_grad_list(ts)) {
    bw = [sizes, dim](const Tensor& g) {
      std::vector<Tensor> r;
      int64_t o = 0;
      for (int64_t n : sizes) {
        r.push_back(g.narrow(dim, o, n));
        o += n;
      }
      return r;
    };
  }
  auto jvp = [&](const std::vector<Tensor>& t) {  // the tangents joined, zeros for the tensors without one
    std::vector<Tensor> parts;
    for (size_t i = 0; i < ts.size(); i++) parts.push_back(t[i].defined() ? t[i] : zeros(ts[i].shape(), ts[i].dtype()));
    return cat(parts, dim);
  };
  return record("cat", loc, out, ts, std::move(bw), {}, jvp);
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim, Loc loc) {
  if (ts.empty()) fail("stack", "expected a non-empty list of tensors");
  check_all_defined(ts, "stack");
  for (size_t i = 1; i < ts.size(); i++)
    if (ts[i].shape() != ts[0].shape())
      fail("stack", "expected all tensors to have shape ", ts[0].shape(), ", but tensor ", (int64_t)i, " has shape ",
           ts[i].shape());
  dim = wrap_dim(dim, ts[0].dim() + 1, "stack");
  std::vector<Tensor> u;
  for (const Tensor& t : ts) u.push_back(t.unsqueeze(dim));
  return cat(u, dim, loc);
}

std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined(a, "split", "the input");
  dim = wrap_indexed_dim(dim, a.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail("split", "sizes must be non-negative, got ", (Shape)sizes);
    if (__builtin_add_overflow(total, s, &total))
      fail("split", "sizes ", (Shape)sizes, " add up to more than 2^63, but dim ", dim, " of shape ", a.shape(),
           " has size ", a.size(dim));
  }
  if (total != a.size(dim))
    fail("split", "sizes ", (Shape)sizes, " add up to ", total, " but dim ", dim, " of shape ", a.shape(), " has size ",
         a.size(dim));
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    out.push_back(a.narrow(dim, off, s));
    off += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  check_defined(a, "split", "the input");
  dim = wrap_indexed_dim(dim, a.dim(), "split");
  if (split_size <= 0) fail("split", "split_size must be positive, got ", split_size);
  std::vector<int64_t> sizes;
  for (int64_t r = a.size(dim); r > 0; r -= split_size) sizes.push_back(std::min(r, split_size));
  if (sizes.empty()) sizes.push_back(0);
  return split(a, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  check_defined(a, "chunk", "the input");
  if (chunks <= 0) fail("chunk", "chunks must be positive, got ", chunks);
  dim = wrap_indexed_dim(dim, a.dim(), "chunk");
  int64_t n = a.size(dim);
  return split(a, std::max<int64_t>(1, n / chunks + (n % chunks != 0)), dim);
}

// ------------------------------------------------------------------ indexing
static void check_index(const char* op, const Tensor& index, int64_t n, int64_t dim, const Tensor& a) {
  if (index.dtype() != kInt64)
    fail(op, "expected an int64 index, got ", dtype_name(index.dtype()), " of shape ", index.shape());
  const int64_t* p = index.data<int64_t>();
  for (int64_t i = 0; i < index.numel(); i++)
    if (p[i] < 0 || p[i] >= n)
      fail(op, "index ", p[i], " is out of range for dim ", dim, " of size ", n, " (input shape ", a.shape(), ")");
}

// The backward of index_select (index_add of g into zeros of shape `in` at idx along dim)
// or of gather (scatter_add), as an op whose own backward is the selection again.
static Tensor scatter_rows(const Tensor& g, const Shape& in, int64_t dim, const Tensor& idx, bool elementwise) {
  Tensor gx = zeros(in, g.dtype());
  if (elementwise) kernel::scatter_add(gx, dim, idx, g.detach().contiguous());
  else kernel::index_add(gx, dim, idx, g.detach().contiguous());
  BackwardFn bw;
  if (wants_grad(g))
    bw = [idx, dim, elementwise](const Tensor& h) {
      return std::vector<Tensor>{elementwise ? gather(h, dim, idx) : index_select(h, dim, idx)};
    };
  return record(elementwise ? "gather_backward" : "index_select_backward", Loc::current(), gx, {g}, std::move(bw), {},
                [&](const std::vector<Tensor>& t) { return scatter_rows(t[0], in, dim, idx, elementwise); });
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index_in, Loc loc) {
  check_defined(a, "index_select", "a");
  check_defined(index_in, "index_select", "index");
  dim = wrap_indexed_dim(dim, a.dim(), "index_select");
  if (index_in.dim() > 1) fail("index_select", "expected a 1-D index, got shape ", index_in.shape());
  Tensor index = index_in.contiguous().reshape({-1});
  check_index("index_select", index, a.size(dim), dim, a);
  Shape s = a.shape();
  s[dim] = index.numel();
  Tensor out = empty(s, a.dtype());
  kernel::index_select(out, a.detach().contiguous(), dim, index);
  BackwardFn bw;
  if (wants_grad(a)) {
    Shape in = a.shape();
    Tensor idx = index.detach();
    bw = [in, idx, dim](const Tensor& g) { return std::vector<Tensor>{scatter_rows(g, in, dim, idx, false)}; };
  }
  return record("index_select", loc, out, {a}, std::move(bw), {index},
                [&](const std::vector<Tensor>& t) { return index_select(t[0], dim, index); });
}

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index_in, Loc loc) {
  check_defined(a, "gather", "a");
  check_defined(index_in, "gather", "index");
  dim = wrap_indexed_dim(dim, a.dim(), "gather");
  bool ok = index_in.dim() == a.dim();
  for (int64_t d = 0; ok && d < a.dim(); d++)
    if (d != dim && index_in.size(d) != a.size(d)) ok = false;
  if (!ok)
    fail("gather", "expected an index with the input's shape ", a.shape(), " except in dim ", dim, ", got shape ",
         index_in.shape());
  Tensor index = index_in.contiguous();
  check_index("gather", index, a.size(dim), dim, a);
  Tensor out = empty(index.shape(), a.dtype());
  kernel::gather(out, a.detach().contiguous(), dim, index);
  BackwardFn bw;
  if (wants_grad(a)) {
    Shape in = a.shape();
    Tensor idx = index.detach();
    bw = [in, idx, dim](const Tensor& g) { return std::vector<Tensor>{scatter_rows(g, in, dim, idx, true)}; };
  }
  return record("gather", loc, out, {a}, std::move(bw), {index},
                [&](const std::vector<Tensor>& t) { return gather(t[0], dim, index); });
}

Tensor embedding_lookup(const Tensor& weight, const Tensor& ids, Loc loc) {
  check_defined(weight, "embedding_lookup", "weight");
  check_defined(ids, "embedding_lookup", "ids");
  if (weight.dim() != 2) fail("embedding_lookup", "expected a 2-D weight [V, E], got shape ", weight.shape());
  check_index("embedding_lookup", ids.contiguous(), weight.size(0), 0, weight);  // errors name this op
  Shape s = ids.shape();
  s.push_back(weight.size(1));
  return index_select(weight, 0, ids.reshape({-1}), loc).reshape(s);
}

}  // namespace ember
