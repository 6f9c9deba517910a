// View ops (view, reshape, flatten, transpose, permute, slice, narrow, select, diagonal,
// unsqueeze, squeeze, expand), each recording the inverse view as its backward; diag_embed,
// diagonal's inverse; and the copies (contiguous, clone, to, fill_, copy_).
#include "core/tensor.h"

#include <algorithm>
#include <climits>
#include <optional>

#include "core/autograd.h"
#include "core/forward_ad.h"
#include "core/kernels/dispatch.h"
#include "core/kernels/elementwise.h"

namespace ember {

// Replaces a single -1 by the size that keeps numel.
static Shape infer_shape(Shape shape, int64_t numel, const char* op, const Shape& from) {
  int64_t infer = -1;
  for (size_t i = 0; i < shape.size(); i++) {
    if (shape[i] == -1) {
      if (infer >= 0) fail(op, "only one dimension can be -1, got ", shape);
      infer = (int64_t)i;
    } else if (shape[i] < 0) {
      fail(op, "invalid size ", shape[i], " in shape ", shape);
    }
  }
  Shape sized = shape;
  if (infer >= 0) sized[infer] = 1;
  const int64_t known = checked_numel(sized, op);
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      fail(op, "shape ", shape, " is invalid for an input of shape ", from, " (", numel, " elements)");
    shape[infer] = numel / known;
  } else if (known != numel) {
    fail(op, "shape ", shape, " is invalid for an input of shape ", from, " (", numel, " elements)");
  }
  return shape;
}

// Strides that let `shape` view the memory of t (laid out as t's shape and strides), or
// nothing when no strides can.
static std::optional<Shape> view_strides(const Tensor& t, const Shape& shape) {
  const Shape& old_shape = t.shape();
  const Shape& old_strides = t.strides();
  if (numel_of(old_shape) == 0 || old_shape.empty()) return contiguous_strides(shape);
  Shape out(shape.size(), 0);
  int64_t vd = (int64_t)shape.size() - 1;
  int64_t base = old_strides.back();
  int64_t tnumel = 1, vnumel = 1;
  for (int64_t td = (int64_t)old_shape.size() - 1; td >= 0; td--) {
    tnumel *= old_shape[td];
    // a chunk of old dims ends where the next-outer dim is not contiguous with it
    if (td == 0 || (old_shape[td - 1] != 1 && old_strides[td - 1] != tnumel * base)) {
      while (vd >= 0 && (vnumel < tnumel || shape[vd] == 1)) {
        out[vd] = vnumel * base;
        vnumel *= shape[vd];
        vd--;
      }
      if (vnumel != tnumel) return std::nullopt;
      if (td > 0) {
        base = old_strides[td - 1];
        tnumel = 1;
        vnumel = 1;
      }
    }
  }
  if (vd != -1) return std::nullopt;
  return out;
}

// ---------------------------------------------------------------- views
// A view of this tensor's storage with new geometry (no history yet).
static Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  auto p = std::make_shared<TensorImpl>();
  p->storage = t.storage();
  p->shape = std::move(shape);
  p->strides = std::move(strides);
  p->offset = offset;
  p->dtype = t.dtype();
  return Tensor(p);
}

static const Loc kNoLoc{};

Tensor Tensor::view(Shape shape) const {
  live("view");
  shape = infer_shape(std::move(shape), numel(), "view", this->shape());
  const std::optional<Shape> st = view_strides(*this, shape);
  if (!st)
    fail("view", "cannot view a tensor of shape ", this->shape(), " and strides ", strides(), " as shape ",
         shape, " without a copy (the tensor is not contiguous); use reshape() or contiguous() first");
  Tensor out = make_view(*this, shape, *st, offset());
  Shape in_shape = this->shape();
  return record("view", kNoLoc, out, {*this},
                wants_grad(*this) ? BackwardFn([in_shape](const Tensor& g) {
                  return std::vector<Tensor>{g.reshape(in_shape)};
                })
                                  : nullptr,
                {}, [&](const std::vector<Tensor>& t) { return t[0].reshape(shape); });
}

Tensor Tensor::reshape(Shape shape) const {
  live("reshape");
  shape = infer_shape(std::move(shape), numel(), "reshape", this->shape());
  if (view_strides(*this, shape)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  live("flatten");
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  if (start > end) fail("flatten", "start_dim ", start, " must not come after end_dim ", end);
  Shape s(shape().begin(), shape().begin() + start);
  int64_t m = 1;
  for (int64_t d = start; d <= end; d++) m *= size(d);
  s.push_back(m);
  s.insert(s.end(), shape().begin() + end + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  live("transpose");
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  if (dim() == 0) return *this;
  Shape s = shape(), st = strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  Tensor out = make_view(*this, s, st, offset());
  return record("transpose", kNoLoc, out, {*this},
                wants_grad(*this) ? BackwardFn([d0, d1](const Tensor& g) {
                  return std::vector<Tensor>{g.transpose(d0, d1)};
                })
                                  : nullptr,
                {}, [&](const std::vector<Tensor>& t) { return t[0].transpose(d0, d1); });
}

Tensor Tensor::t() const {
  live("t");
  if (dim() > 2) fail("t", "expects a tensor with at most 2 dims, got shape ", shape());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::mT() const {
  live("mT");
  if (dim() < 2) fail("mT", "expects a tensor with at least 2 dims, got shape ", shape());
  return transpose(-2, -1);
}

Tensor Tensor::permute(std::vector<int64_t> dims) const {
  live("permute");
  if ((int64_t)dims.size() != dim())
    fail("permute", "expected ", dim(), " dims for a tensor of shape ", shape(), ", got ", (Shape)dims);
  std::vector<bool> seen(dim(), false);
  Shape s(dim()), st(dim());
  for (int64_t i = 0; i < dim(); i++) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    if (seen[d]) fail("permute", "dims ", (Shape)dims, " repeat dim ", d);
    seen[d] = true;
    dims[i] = d;
    s[i] = size(d);
    st[i] = stride(d);
  }
  Tensor out = make_view(*this, s, st, offset());
  return record("permute", kNoLoc, out, {*this},
                wants_grad(*this) ? BackwardFn([dims](const Tensor& g) {
                  std::vector<int64_t> inv(dims.size());
                  for (size_t i = 0; i < dims.size(); i++) inv[dims[i]] = (int64_t)i;
                  return std::vector<Tensor>{g.permute(inv)};
                })
                                  : nullptr,
                {}, [&](const std::vector<Tensor>& t) { return t[0].permute(dims); });
}

// The gradient of narrow/slice/select/diagonal: g placed in a zero tensor of shape s at
// the viewed place; an op whose own backward is the view again.
static Tensor embed(const Tensor& g, const Shape& s, const std::function<Tensor(const Tensor&)>& same_view,
                    const char* name = "embed") {
  Tensor gx = zeros(s, g.dtype());
  same_view(gx).copy_(g.detach());
  return record(name, kNoLoc, gx, {g},
                wants_grad(g) ? BackwardFn([same_view](const Tensor& h) { return std::vector<Tensor>{same_view(h)}; })
                              : nullptr,
                {}, [&](const std::vector<Tensor>& t) { return embed(t[0], s, same_view, name); });
}

static BackwardFn embed_back(const Tensor& in, std::function<Tensor(const Tensor&)> same_view) {
  return [s = in.shape(), same_view](const Tensor& g) { return std::vector<Tensor>{embed(g, s, same_view)}; };
}

Tensor Tensor::slice(int64_t d, const Slice& range) const {
  live("slice");
  int64_t start = range.start, end = range.end;
  const int64_t step = range.step;
  d = wrap_indexed_dim(d, dim(), "slice");
  if (step <= 0) fail("slice", "step must be positive, got ", step);
  int64_t n = size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape(), st = strides();
  s[d] = end == start ? 0 : (end - start - 1) / step + 1;  // no overflow, whatever the step
  if (s[d] > 1) st[d] *= step;                             // step < n here: within the storage
  Tensor out = make_view(*this, s, st, offset() + start * stride(d));
  return record("slice", kNoLoc, out, {*this},
                wants_grad(*this) ? embed_back(*this, [=](const Tensor& z) { return z.slice(d, {.start = start, .end = end, .step = step}); })
                                  : nullptr,
                {}, [&](const std::vector<Tensor>& t) { return t[0].slice(d, {.start = start, .end = end, .step = step}); });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  live("narrow");
  d = wrap_indexed_dim(d, dim(), "narrow");
  int64_t n = size(d);
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start > n || length > n - start)
    fail("narrow", "start ", start, " and length ", length, " are out of range for dim ", d, " of size ", n,
         " (shape ", shape(), ")");
  return slice(d, {.start = start, .end = start + length});
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  live("select");
  d = wrap_indexed_dim(d, dim(), "select");
  int64_t n = size(d);
  if (index < -n || index >= n)
    fail("select", "index ", index, " is out of range for dim ", d, " of size ", n, " (shape ", shape(), ")");
  if (index < 0) index += n;
  Shape s = shape(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(*this, s, st, offset() + index * stride(d));
  return record("select", kNoLoc, out, {*this},
                wants_grad(*this) ? embed_back(*this, [=](const Tensor& z) { return z.select(d, index); })
                                  : nullptr,
                {}, [&](const std::vector<Tensor>& t) { return t[0].select(d, index); });
}

Tensor Tensor::diagonal(int64_t offset, int64_t dim1, int64_t dim2) const {
  live("diagonal");
  if (dim() < 2) fail("diagonal", "expected a tensor of at least 2 dims, got shape ", shape());
  const int64_t d1 = wrap_dim(dim1, dim(), "diagonal"), d2 = wrap_dim(dim2, dim(), "diagonal");
  if (d1 == d2) fail("diagonal", "dim1 and dim2 must differ, got ", dim1, " and ", dim2, " (shape ", shape(), ")");
  const int64_t n1 = size(d1), n2 = size(d2);
  // elements (i, i + offset): offset > 0 above the main diagonal, < 0 below
  int64_t length = 0, start = this->offset();
  if (offset >= 0 && offset < n2) length = std::min(n1, n2 - offset), start += offset * stride(d2);
  if (offset < 0 && offset > -n1) length = std::min(n1 + offset, n2), start -= offset * stride(d1);
  if (length == 0) start = this->offset();
  Shape s, st;
  for (int64_t d = 0; d < dim(); d++)
    if (d != d1 && d != d2) s.push_back(size(d)), st.push_back(stride(d));
  s.push_back(length);
  st.push_back(stride(d1) + stride(d2));
  Tensor out = make_view(*this, s, st, start);
  return record("diagonal", kNoLoc, out, {*this},
                wants_grad(*this) ? embed_back(*this, [=](const Tensor& z) { return z.diagonal(offset, dim1, dim2); })
                                  : nullptr,
                {}, [&](const std::vector<Tensor>& t) { return t[0].diagonal(offset, dim1, dim2); });
}

Tensor diag_embed(const Tensor& a, int64_t offset, int64_t dim1, int64_t dim2) {
  check_defined(a, "diag_embed", "the input");
  if (a.dim() < 1) fail("diag_embed", "expected a tensor of at least 1 dim, got shape ", a.shape());
  const int64_t n = a.size(-1);
  if (offset > INT64_MAX - n || offset < n - INT64_MAX)
    fail("diag_embed", "offset ", offset, " makes a matrix too large for int64 sizes (last dim ", n, ")");
  const int64_t side = n + (offset < 0 ? -offset : offset);
  const int64_t d1 = wrap_dim(dim1, a.dim() + 1, "diag_embed"), d2 = wrap_dim(dim2, a.dim() + 1, "diag_embed");
  if (d1 == d2) fail("diag_embed", "dim1 and dim2 must differ, got ", dim1, " and ", dim2, " (shape ", a.shape(), ")");
  Shape s(a.shape().begin(), a.shape().end() - 1);
  s.insert(s.begin() + std::min(d1, d2), side);
  s.insert(s.begin() + std::max(d1, d2), side);
  return embed(a, s, [=](const Tensor& z) { return z.diagonal(offset, d1, d2); }, "diag_embed");
}

Tensor Tensor::unsqueeze(int64_t d) const {
  live("unsqueeze");
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape(), st = strides();
  int64_t new_stride = d < dim() ? size(d) * stride(d) : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  Tensor out = make_view(*this, s, st, offset());
  Shape in_shape = shape();
  return record("unsqueeze", kNoLoc, out, {*this},
                wants_grad(*this) ? BackwardFn([in_shape](const Tensor& g) {
                  return std::vector<Tensor>{g.reshape(in_shape)};
                })
                                  : nullptr,
                {}, [&](const std::vector<Tensor>& t) { return t[0].unsqueeze(d); });
}

static Tensor squeeze_dims(const Tensor& t, const std::vector<bool>& drop) {
  Shape s, st;
  for (int64_t d = 0; d < t.dim(); d++)
    if (!drop[d]) {
      s.push_back(t.size(d));
      st.push_back(t.stride(d));
    }
  Tensor out = make_view(t, s, st, t.offset());
  Shape in_shape = t.shape();
  return record("squeeze", kNoLoc, out, {t},
                wants_grad(t) ? BackwardFn([in_shape](const Tensor& g) {
                  return std::vector<Tensor>{g.reshape(in_shape)};
                })
                              : nullptr,
                {}, [&](const std::vector<Tensor>& tangent) { return tangent[0].reshape(s); });
}

Tensor Tensor::squeeze(int64_t d) const {
  live("squeeze");
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  std::vector<bool> drop(dim(), false);
  drop[d] = size(d) == 1;
  return squeeze_dims(*this, drop);
}

Tensor Tensor::squeeze() const {
  live("squeeze");
  std::vector<bool> drop(dim());
  for (int64_t d = 0; d < dim(); d++) drop[d] = size(d) == 1;
  return squeeze_dims(*this, drop);
}

Tensor Tensor::expand(Shape shape) const {
  live("expand");
  if ((int64_t)shape.size() < dim())
    fail("expand", "the target shape ", shape, " has fewer dims than the tensor's shape ", this->shape());
  const int64_t lead = (int64_t)shape.size() - dim();
  Shape st(shape.size(), 0);
  for (int64_t i = 0; i < (int64_t)shape.size(); i++) {
    if (i < lead) {
      if (shape[i] < 0) fail("expand", "-1 is not allowed for a new leading dim, got ", shape);
      continue;
    }
    int64_t have = size(i - lead);
    if (shape[i] == -1) shape[i] = have;
    if (have == shape[i]) st[i] = stride(i - lead);
    else if (have == 1) st[i] = 0;
    else fail("expand", "cannot expand shape ", this->shape(), " to ", shape, " (dim ", i, ": ", have,
              " is not 1)");
  }
  checked_numel(shape, "expand");
  Tensor out = make_view(*this, shape, st, offset());
  // the engine sums the gradient back to the input shape
  return record("expand", kNoLoc, out, {*this},
                wants_grad(*this) ? BackwardFn([](const Tensor& g) { return std::vector<Tensor>{g}; }) : nullptr,
                {}, [&](const std::vector<Tensor>& t) { return t[0].expand(shape); });
}

Tensor Tensor::contiguous() const {
  live("contiguous");
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  live("clone");
  Tensor out = empty(shape(), dtype());
  kernel::copy(out, *this);
  return record("clone", kNoLoc, out, {*this},
                wants_grad(*this) ? BackwardFn([](const Tensor& g) { return std::vector<Tensor>{g}; }) : nullptr, {},
                [](const std::vector<Tensor>& t) { return t[0].clone(); });
}

Tensor Tensor::to(DType dt) const {
  live("to");
  if (dt == dtype()) return *this;
  if (dt == kInt64) check_fits_int64(*this, "to");
  Tensor out = empty(shape(), dt);
  kernel::copy(out, *this);
  DType src = dtype();
  bool grad = wants_grad(*this) && is_computing_float(dt);
  return record("to", kNoLoc, out, {*this},
                grad ? BackwardFn([src](const Tensor& g) { return std::vector<Tensor>{g.to(src)}; }) : nullptr, {},
                [&](const std::vector<Tensor>& t) { return is_computing_float(dt) ? t[0].to(dt) : Tensor(); });
}

// In-place ops are not recorded: on a tensor that requires grad, in grad mode, they would
// change what the graph computed behind its back. Refused there, as PyTorch refuses them
// on a leaf; under NoGradGuard (initialisers, optimizers, loading) they are allowed.
static void check_in_place(const Tensor& t, const char* op, const Tensor& src = Tensor()) {
  // a tangent would no longer match the values
  if (forward_detail::active() && (forward_detail::tangent_of(t).defined() || forward_detail::tangent_of(src).defined()))
    [[unlikely]] forward_detail::fail_unsupported(op);
  if (!grad_enabled() || !t.requires_grad()) return;
  if (t.is_leaf())
    fail(op, "a leaf tensor that requires grad (shape ", t.shape(),
         ") cannot be changed in place while grad mode is on; change it under NoGradGuard, as initialisers "
         "and optimizers do");
  fail(op, "a tensor that requires grad (shape ", t.shape(), ", computed by ", t.grad_fn()->name,
       ") cannot be changed in place while grad mode is on: in-place ops are not recorded in the graph; "
       "use an op that returns a new tensor");
}

Tensor& Tensor::fill_(double v) {
  live("fill_");
  check_in_place(*this, "fill_");
  if (dtype() == kInt64) scalar_as<int64_t>(v, "fill_", /*integral=*/false);
  kernel::fill(*this, v);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  live("copy_");
  check_defined(src, "copy_", "the source");
  check_in_place(*this, "copy_", src);
  if (grad_enabled() && src.requires_grad())
    fail("copy_", "the source requires grad (shape ", src.shape(), ") and copy_ is not recorded in the graph, so its "
         "gradient would be lost; copy detach() of it, or under NoGradGuard, or use an op that returns a new tensor");
  Shape bs = broadcast_shapes(shape(), src.shape(), "copy_");
  if (bs != shape()) fail("copy_", "cannot copy a tensor of shape ", src.shape(), " into shape ", shape());
  for (int64_t d = 0; d < dim(); d++)
    if (stride(d) == 0 && size(d) > 1)
      fail("copy_", "several elements of the destination (shape ", shape(), ", strides ", strides(),
           ") are one memory location; clone() it first");
  // a source whose elements may be among the destination's (a.copy_(a.t())) is read whole
  // first; views of one storage that lie apart (two halves of a tensor) need no copy
  auto span = [](const Tensor& t) {  // the first and last element t can reach (strides are >= 0)
    int64_t last = t.offset();
    for (int64_t d = 0; d < t.dim(); d++) last += (t.size(d) - 1) * t.stride(d);
    return std::pair<int64_t, int64_t>{t.offset(), last};
  };
  bool overlap = src.storage() == storage() && numel() > 0 && src.numel() > 0;
  if (overlap) {
    const auto [a0, a1] = span(*this);
    const auto [b0, b1] = span(src);
    overlap = a0 <= b1 && b0 <= a1;
  }
  const Tensor from = overlap ? src.detach().clone() : src.detach();
  if (dtype() == kInt64) check_fits_int64(from, "copy_");
  kernel::copy(*this, from.expand(shape()));
  return *this;
}

}  // namespace ember
