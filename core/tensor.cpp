// Tensor metadata, creation, view ops (with their gradients), copies and printing.
#include "core/tensor.h"

#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
#include "core/kernels.h"
#include "core/random.h"

namespace ember {

// ---------------------------------------------------------------- shape helpers
std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); i++) {
    if (i) r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// The largest tensor, in elements and in bytes: far beyond any memory, and small enough
// that sizes, byte counts and their roundings never overflow 64 bits.
constexpr int64_t kMaxElements = int64_t(1) << 56;

int64_t checked_numel(const Shape& shape, const char* op) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t s : shape) {
    if (s < 0) fail(op, "sizes must be non-negative, got ", shape);
    zero = zero || s == 0;
  }
  if (zero) return 0;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(n, s, &n) || n > kMaxElements)
      fail(op, "a tensor of shape ", shape, " would have more than 2^56 elements");
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; d--) {
    st[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  if (dim < lo || dim > hi)
    fail(op, "dim ", dim, " is out of range for a tensor of ", ndim, " dims (expected a dim in [", lo,
         ", ", hi, "])");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; i++) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(op, "shapes ", a, " and ", b, " cannot be broadcast together (dim ", (int64_t)i, ": ", da,
           " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  checked_numel(out, op);
  return out;
}

// Replaces a single -1 by the size that keeps numel.
static Shape infer_shape(Shape shape, int64_t numel, const char* op, const Shape& from) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); i++) {
    if (shape[i] == -1) {
      if (infer >= 0) fail(op, "only one dimension can be -1, got ", shape);
      infer = (int64_t)i;
    } else if (shape[i] < 0) {
      fail(op, "invalid size ", shape[i], " in shape ", shape);
    } else {
      known *= shape[i];
    }
  }
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

// ---------------------------------------------------------------- undefined tensors
namespace why {
const char* const kDefault = "it holds no data (a default-constructed Tensor, like None)";
const char* const kNoBackwardYet = "it is the grad() of a leaf that no backward has reached yet";
const char* const kCleared = "it is the grad() of a leaf that no backward has reached since zero_grad()";
const char* const kNoGrad =
    "it is the grad() of a tensor that does not require grad (call requires_grad_() on the leaf "
    "before the forward pass)";
const char* const kNonLeaf =
    "it is the grad() of a non-leaf tensor, which keeps its gradient only when retain_grad() is called "
    "on it before backward";
const char* const kRetainedNotReached = "it is the grad() of a non-leaf that no backward has reached yet";
}  // namespace why

const char* Tensor::why_undefined() const {
  if (impl_) return nullptr;
  return why_undefined_ ? why_undefined_ : why::kDefault;
}

void fail_undefined(const Tensor& t, const char* op, const char* what) {
  fail(op, what, " is undefined: ", t.defined() ? "(defined)" : t.why_undefined());
}

// ---------------------------------------------------------------- metadata
int64_t Tensor::size(int64_t d) const { return live("Tensor::size").shape[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const {
  return live("Tensor::stride").strides[wrap_dim(d, dim(), "Tensor::stride")];
}
int64_t Tensor::numel() const { return numel_of(live("Tensor::numel").shape); }

bool Tensor::is_contiguous() const {
  live("Tensor::is_contiguous");
  int64_t expect = 1;
  for (int64_t d = dim() - 1; d >= 0; d--) {
    if (impl_->shape[d] == 1) continue;
    if (impl_->strides[d] != expect) return false;
    expect *= impl_->shape[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  live("Tensor::raw_data");
  return static_cast<char*>(impl_->storage->data) + impl_->offset * dtype_size(impl_->dtype);
}

double Tensor::item() const {
  live("item");
  if (numel() != 1) fail("item", "expected a tensor with one element, got shape ", shape());
  return dispatch_all(dtype(), [&](auto tag) { return (double)*data<decltype(tag)>(); });
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  live("at");
  if ((int64_t)index.size() != dim())
    fail("at", "expected ", dim(), " indices for shape ", shape(), ", got ", (int64_t)index.size());
  int64_t off = 0, d = 0;
  for (int64_t i : index) {
    if (i < -size(d) || i >= size(d)) fail("at", "index ", i, " is out of range for dim ", d, " of shape ", shape());
    off += (i < 0 ? i + size(d) : i) * stride(d);
    d++;
  }
  return dispatch_all(dtype(), [&](auto tag) { return (double)data<decltype(tag)>()[off]; });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  live("to_vector");
  Tensor c = contiguous();
  std::vector<T> out(numel());
  dispatch_all(dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* p = c.data<S>();
    for (size_t i = 0; i < out.size(); i++) out[i] = static_cast<T>(p[i]);
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int> Tensor::to_vector<int>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

// ---------------------------------------------------------------- autograd surface
Tensor& Tensor::requires_grad_(bool on) {
  if (live("requires_grad_").grad_fn)
    fail("requires_grad_", "can only be set on leaf tensors; this tensor was produced by ", "an op (",
         "use detach() to make a new leaf)");
  if (on && !is_floating(dtype()))
    fail("requires_grad_", "only float32 and float64 tensors can require gradients, got ", dtype_name(dtype()));
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return live("is_leaf").grad_fn == nullptr; }

Tensor Tensor::grad() const {
  const TensorImpl& p = live("grad");
  if (p.grad) return Tensor(p.grad);
  if (!p.requires_grad) return undefined(why::kNoGrad);
  if (p.grad_fn) return undefined(retains_grad() ? why::kRetainedNotReached : why::kNonLeaf);
  return undefined(p.grad_cleared ? why::kCleared : why::kNoBackwardYet);
}

void Tensor::set_grad(const Tensor& g) {
  live("set_grad");
  impl_->grad_cleared = !g.defined();
  if (g.defined() && (g.shape() != shape() || g.dtype() != dtype()))
    fail("set_grad", "expected a gradient of shape ", shape(), " and dtype ", dtype_name(dtype()),
         ", got shape ", g.shape(), " and dtype ", dtype_name(g.dtype()));
  impl_->grad = g.impl_ptr();
}

void Tensor::zero_grad() {
  live("zero_grad").grad.reset();
  impl_->grad_cleared = true;
}

void Tensor::retain_grad() const {
  live("retain_grad");
  if (!requires_grad())
    fail("retain_grad", "the tensor (shape ", shape(), ") does not require grad, so no gradient reaches it");
  if (is_leaf()) return;
  impl_->grad_fn->retained = impl_;
}

bool Tensor::retains_grad() const {
  return live("retains_grad").grad_fn && impl_->grad_fn->retained.lock() == impl_;
}

namespace {
template <class Fn>
HookHandle add_hook(std::shared_ptr<GradHooks>& slot, std::vector<std::pair<int64_t, Fn>> GradHooks::*list, Fn fn) {
  if (!slot) slot = std::make_shared<GradHooks>();
  const int64_t id = slot->next_id++;
  (slot.get()->*list).emplace_back(id, std::move(fn));
  return HookHandle([weak = std::weak_ptr<GradHooks>(slot), list, id] {
    if (auto h = weak.lock()) {
      auto& v = h.get()->*list;
      for (auto it = v.begin(); it != v.end(); ++it)
        if (it->first == id) {
          v.erase(it);
          break;
        }
    }
  });
}
}  // namespace

HookHandle Tensor::register_hook(GradHook fn) const {
  live("register_hook");
  if (!requires_grad())
    fail("register_hook", "the tensor (shape ", shape(), ") does not require grad, so no gradient reaches it");
  if (!fn) fail("register_hook", "got an empty function");
  return add_hook(is_leaf() ? impl_->hooks : impl_->grad_fn->hooks, &GradHooks::pre, std::move(fn));
}

HookHandle Tensor::register_post_accumulate_grad_hook(PostAccumulateHook fn) const {
  live("register_post_accumulate_grad_hook");
  if (!requires_grad() || !is_leaf())
    fail("register_post_accumulate_grad_hook", "expected a leaf tensor that requires grad, got ",
         is_leaf() ? "a leaf that does not require grad" : "a tensor produced by an op", " (shape ", shape(), ")");
  if (!fn) fail("register_post_accumulate_grad_hook", "got an empty function");
  return add_hook(impl_->hooks, &GradHooks::post, std::move(fn));
}

void Tensor::backward(const Tensor& grad, std::optional<bool> retain_graph, bool create_graph) const {
  live("backward");
  run_backward({*this}, {grad}, retain_graph.value_or(create_graph), create_graph);
}

Tensor Tensor::detach() const {
  live("detach");
  auto p = std::make_shared<TensorImpl>();
  p->storage = impl_->storage;
  p->shape = impl_->shape;
  p->strides = impl_->strides;
  p->offset = impl_->offset;
  p->dtype = impl_->dtype;
  return Tensor(p);
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
                                  : nullptr);
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
                                  : nullptr);
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
                                  : nullptr);
}

// The gradient of narrow/slice/select: g placed in a zero tensor of shape s at the viewed
// place; an op whose own backward is the view again.
static Tensor embed(const Tensor& g, const Shape& s, const std::function<Tensor(const Tensor&)>& same_view) {
  Tensor gx = zeros(s, g.dtype());
  same_view(gx).copy_(g.detach());
  return record("embed", kNoLoc, gx, {g},
                wants_grad(g) ? BackwardFn([same_view](const Tensor& h) { return std::vector<Tensor>{same_view(h)}; })
                              : nullptr);
}

static BackwardFn embed_back(const Tensor& in, std::function<Tensor(const Tensor&)> same_view) {
  return [s = in.shape(), same_view](const Tensor& g) { return std::vector<Tensor>{embed(g, s, same_view)}; };
}

Tensor Tensor::slice(int64_t d, const Slice& range) const {
  live("slice");
  int64_t start = range.start, end = range.end;
  const int64_t step = range.step;
  d = wrap_dim(d, dim(), "slice");
  if (step <= 0) fail("slice", "step must be positive, got ", step);
  int64_t n = size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_view(*this, s, st, offset() + start * stride(d));
  return record("slice", kNoLoc, out, {*this},
                wants_grad(*this) ? embed_back(*this, [=](const Tensor& z) { return z.slice(d, {.start = start, .end = end, .step = step}); })
                                  : nullptr);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  live("narrow");
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = size(d);
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    fail("narrow", "start ", start, " and length ", length, " are out of range for dim ", d, " of size ", n,
         " (shape ", shape(), ")");
  return slice(d, {.start = start, .end = start + length});
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  live("select");
  d = wrap_dim(d, dim(), "select");
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
                                  : nullptr);
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
                                  : nullptr);
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
                              : nullptr);
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
                wants_grad(*this) ? BackwardFn([](const Tensor& g) { return std::vector<Tensor>{g}; }) : nullptr);
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
                wants_grad(*this) ? BackwardFn([](const Tensor& g) { return std::vector<Tensor>{g}; }) : nullptr);
}

Tensor Tensor::to(DType dt) const {
  live("to");
  if (dt == dtype()) return *this;
  Tensor out = empty(shape(), dt);
  kernel::copy(out, *this);
  DType src = dtype();
  bool grad = wants_grad(*this) && is_floating(dt);
  return record("to", kNoLoc, out, {*this},
                grad ? BackwardFn([src](const Tensor& g) { return std::vector<Tensor>{g.to(src)}; }) : nullptr);
}

Tensor& Tensor::fill_(double v) {
  live("fill_");
  kernel::fill(*this, v);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  live("copy_");
  check_defined(src, "copy_", "the source");
  Shape bs = broadcast_shapes(shape(), src.shape(), "copy_");
  if (bs != shape()) fail("copy_", "cannot copy a tensor of shape ", src.shape(), " into shape ", shape());
  kernel::copy(*this, src.expand(shape()).detach());
  return *this;
}

// ---------------------------------------------------------------- creation
static Tensor allocate(const Shape& shape, DType dtype, bool zero_fill, const char* op) {
  const int64_t bytes = checked_numel(shape, op) * (int64_t)dtype_size(dtype);
  auto p = std::make_shared<TensorImpl>();
  try {
    p->storage = std::make_shared<Storage>((size_t)bytes, zero_fill);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(cat_str("out of memory: a ", shape, " ", dtype_name(dtype), " tensor of ", bytes, " bytes"));
  }
  p->shape = shape;
  p->strides = contiguous_strides(shape);
  p->dtype = dtype;
  return Tensor(p);
}

Tensor empty(const Shape& shape, DType dtype) { return allocate(shape, dtype, false, "empty"); }
Tensor zeros(const Shape& shape, DType dtype) { return allocate(shape, dtype, true, "zeros"); }
Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor full(const Shape& shape, double v, DType dtype) {
  if (v == 0) return zeros(shape, dtype);
  Tensor t = allocate(shape, dtype, false, "full");
  t.fill_(v);
  return t;
}
Tensor zeros_like(const Tensor& t) {
  check_defined(t, "zeros_like");
  return zeros(t.shape(), t.dtype());
}
Tensor ones_like(const Tensor& t) {
  check_defined(t, "ones_like");
  return ones(t.shape(), t.dtype());
}
Tensor full_like(const Tensor& t, double v) {
  check_defined(t, "full_like");
  return full(t.shape(), v, t.dtype());
}
Tensor scalar_tensor(double v, DType dtype) { return full({}, v, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  if (step == 0) fail("arange", "step must be nonzero");
  double n = std::ceil((end - start) / step);
  int64_t len = n > 0 ? (int64_t)n : 0;
  Tensor t = empty({len}, dtype);
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < len; i++) p[i] = static_cast<T>(start + i * step);
  });
  return t;
}
Tensor arange(int64_t end, DType dtype) { return arange(0.0, (double)end, 1.0, dtype); }

template <class T>
static Tensor from_values(const std::vector<T>& v, const Shape& shape, DType dt, const char* op = "from_vector") {
  const int64_t n = checked_numel(shape, op);
  if ((int64_t)v.size() != n) fail(op, "shape ", shape, " needs ", n, " values, got ", (int64_t)v.size());
  Tensor t = empty(shape, dt);
  dispatch_all(dt, [&](auto tag) {
    using S = decltype(tag);
    S* p = t.data<S>();
    // bool holds 0 or 1: any nonzero value is true, as in copy() and fill()
    for (size_t i = 0; i < v.size(); i++) p[i] = std::is_same_v<S, uint8_t> ? S(v[i] != 0) : static_cast<S>(v[i]);
  });
  return t;
}
Tensor from_vector(const std::vector<float>& v, const Shape& s) { return from_values(v, s, kFloat32); }
Tensor from_vector(const std::vector<double>& v, const Shape& s) { return from_values(v, s, kFloat64); }
Tensor from_vector(const std::vector<int64_t>& v, const Shape& s) { return from_values(v, s, kInt64); }
Tensor from_vector(const std::vector<double>& v, const Shape& s, DType dt) { return from_values(v, s, dt); }
Tensor from_bools(const std::vector<bool>& v, const Shape& s) {
  std::vector<uint8_t> u(v.begin(), v.end());
  return from_values(u, s, kBool, "from_bools");
}

// ---------------------------------------------------------------- random
static Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }

Tensor rand(const Shape& shape, DType dtype, Generator* gen) {
  if (!is_floating(dtype)) fail("rand", "expected a float dtype, got ", dtype_name(dtype));
  return uniform(shape, 0.0, 1.0, dtype, gen);
}

Tensor uniform(const Shape& shape, double lo, double hi, DType dtype, Generator* g) {
  Tensor t = allocate(shape, dtype, false, "uniform");
  Generator& gen = gen_or_default(g);
  const int64_t n = t.numel();
  const uint64_t first = gen.reserve(n);
  dispatch_float(dtype, "uniform", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    parallel_for(n, cost::kExp, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) {
        T v = static_cast<T>(lo + (hi - lo) * gen.uniform(first + i));
        p[i] = v < static_cast<T>(hi) ? v : static_cast<T>(lo);  // float rounding may reach hi
      }
    });
  });
  return t;
}

Tensor normal(const Shape& shape, double mean, double std, DType dtype, Generator* g) {
  Tensor t = allocate(shape, dtype, false, "normal");
  Generator& gen = gen_or_default(g);
  const int64_t n = t.numel();
  const uint64_t first = gen.reserve(2 * ((n + 1) / 2));
  // Box-Muller: draws 2i and 2i+1 give elements 2i and 2i+1.
  dispatch_float(dtype, "normal", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    parallel_for((n + 1) / 2, cost::kTwoDraws, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) {
        double u1 = 1.0 - gen.uniform(first + 2 * i), u2 = gen.uniform(first + 2 * i + 1);
        double r = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
        p[2 * i] = static_cast<T>(mean + std * r * std::cos(th));
        if (2 * i + 1 < n) p[2 * i + 1] = static_cast<T>(mean + std * r * std::sin(th));
      }
    });
  });
  return t;
}

Tensor randn(const Shape& shape, DType dtype, Generator* gen) {
  if (!is_floating(dtype)) fail("randn", "expected a float dtype, got ", dtype_name(dtype));
  return normal(shape, 0.0, 1.0, dtype, gen);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* g) {
  if (high <= low) fail("randint", "expected low < high, got low ", low, " and high ", high);
  Tensor t = allocate(shape, kInt64, false, "randint");
  Generator& gen = gen_or_default(g);
  const int64_t n = t.numel();
  const uint64_t first = gen.reserve(n);
  const uint64_t range = (uint64_t)(high - low);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < n; i++) p[i] = low + (int64_t)(gen.draw(first + i) % range);
  return t;
}

// ---------------------------------------------------------------- printing
namespace {

struct Formatter {
  enum Mode { Int, Fixed, Sci, Bool, Whole } mode = Fixed;
  int width = 1;

  std::string fmt(double v) const {
    char buf[64];
    if (mode == Bool) return v != 0 ? "True" : "False";
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode) {
      case Int: std::snprintf(buf, sizeof buf, "%lld", (long long)v); break;
      case Whole: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
      case Sci: std::snprintf(buf, sizeof buf, "%.4e", v); break;
      default: std::snprintf(buf, sizeof buf, "%.4f", v); break;
    }
    return buf;
  }
};

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

// Indices of dim d to print (-1 marks the "..." gap).
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> r;
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; i++) r.push_back(i);
    r.push_back(-1);
    for (int64_t i = n - kEdgeItems; i < n; i++) r.push_back(i);
  } else {
    for (int64_t i = 0; i < n; i++) r.push_back(i);
  }
  return r;
}

void collect(const Tensor& t, bool summarize, std::vector<double>& out) {
  if (t.dim() == 0) {
    out.push_back(t.item());
    return;
  }
  for (int64_t i : shown(t.size(0), summarize))
    if (i >= 0) collect(t.select(0, i), summarize, out);
}

void emit(std::ostringstream& os, const Tensor& t, const Formatter& f, bool summarize, int indent) {
  if (t.dim() == 0) {
    std::string s = f.fmt(t.item());
    os << std::string(f.width > (int)s.size() ? f.width - s.size() : 0, ' ') << s;
    return;
  }
  os << "[";
  auto idx = shown(t.size(0), summarize);
  for (size_t k = 0; k < idx.size(); k++) {
    if (k) {
      os << ",";
      if (t.dim() == 1) os << " ";
      else os << std::string(t.dim() - 1, '\n') << std::string(indent + 1, ' ');
    }
    if (idx[k] < 0) os << "...";
    else emit(os, t.select(0, idx[k]), f, summarize, indent + 1);
  }
  os << "]";
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  NoGradGuard ng;
  Tensor t = detach();
  bool summarize = numel() > kSummarizeAbove;
  std::vector<double> vals;
  if (numel() > 0) collect(t, summarize, vals);
  Formatter f;
  if (dtype() == kBool) f.mode = Formatter::Bool;
  else if (dtype() == kInt64) f.mode = Formatter::Int;
  else {
    double mx = 0, mn = INFINITY;
    bool whole = true;
    for (double v : vals) {
      if (!std::isfinite(v)) continue;
      double a = std::fabs(v);
      mx = std::max(mx, a);
      if (a > 0) mn = std::min(mn, a);
      if (v != std::round(v)) whole = false;
    }
    if (whole && mx < 1e8) f.mode = Formatter::Whole;
    else if (mx >= 1e8 || (mn < 1e-4 && mn > 0) || (mn > 0 && mx / mn > 1e4)) f.mode = Formatter::Sci;
    else f.mode = Formatter::Fixed;
  }
  for (double v : vals) f.width = std::max<int>(f.width, (int)f.fmt(v).size());
  std::ostringstream os;
  os << "tensor(";
  if (numel() == 0) os << "[]";
  else emit(os, t, f, summarize, 7);
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
  if (impl_->grad_fn) os << ", grad_fn=<" << impl_->grad_fn->name << ">";
  else if (requires_grad()) os << ", requires_grad=True";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace ember
