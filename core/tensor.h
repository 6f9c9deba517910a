// Tensor: a typed, strided view into shared storage, plus the autograd metadata
// (requires_grad, grad, the node that produced it). Tensor is a cheap handle: copies
// share the same TensorImpl, as Python references to a torch.Tensor do.
//
// Shapes are outermost first and row-major; strides count elements. View ops (view,
// reshape when possible, transpose, permute, narrow, slice, select, unsqueeze, squeeze,
// expand) never copy; contiguous() copies only when needed. Negative dims count from
// the end, as in PyTorch.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace ember {

struct Node;
class Tensor;
class Generator;

// Where an op was called from, captured by a default argument `Loc loc = Loc::current()`
// at the call site; backward errors and anomaly reports name it. The same interface as
// std::source_location, built on the compiler builtins so that every supported compiler
// (clang 14 included, which lacks std::source_location) has it.
class Loc {
 public:
  static constexpr Loc current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE(),
                               const char* function = __builtin_FUNCTION()) noexcept {
    Loc l;
    l.file_ = file;
    l.line_ = line;
    l.function_ = function;
    return l;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  unsigned line_ = 0;
  const char* function_ = "";
};

// A range of indices along one dimension, as Python's start:end:step (see Tensor::slice).
struct Slice {
  int64_t start = 0;
  int64_t end = INT64_MAX;  // past the last index: to the end
  int64_t step = 1;
};

// A function the gradient reaching a tensor passes through during backward
// (Tensor::register_hook): it may return a replacement of the same shape and dtype, or an
// undefined tensor to leave the gradient as it is.
using GradHook = std::function<Tensor(const Tensor& grad)>;
// Called with a leaf once a backward has accumulated its gradient into .grad().
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;

// The hooks of one tensor, in registration order (a leaf's live in its TensorImpl, a
// non-leaf's in the Node that produced it).
struct GradHooks {
  std::vector<std::pair<int64_t, GradHook>> pre;
  std::vector<std::pair<int64_t, PostAccumulateHook>> post;
  int64_t next_id = 0;
};

// Removes the hook it was returned for; removing twice, or after the tensor is gone, is
// harmless.
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  void remove() {
    if (!remove_) return;
    auto f = std::move(remove_);
    remove_ = nullptr;
    f();
  }

 private:
  std::function<void()> remove_;
};

// Throws Error: "<op>: <what> is undefined: <t.why_undefined()>".
[[noreturn]] void fail_undefined(const Tensor& t, const char* op, const char* what);

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::Float32;
  bool requires_grad = false;
  bool grad_cleared = false;          // zero_grad() or set_grad(undefined) dropped the gradient
  std::shared_ptr<TensorImpl> grad;   // accumulated gradient of a leaf (or of a non-leaf that retains it)
  std::shared_ptr<Node> grad_fn;      // the op that produced this tensor, if recorded
  std::shared_ptr<GradHooks> hooks;   // a leaf's hooks, when any
};

class Tensor {
 public:
  Tensor() : why_undefined_(nullptr) {}  // an undefined tensor (like None)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)), why_undefined_(nullptr) {}
  // An undefined tensor that remembers why it is undefined (a static string, such as
  // "it is the grad() of a leaf that no backward has reached yet"); every error about it
  // repeats the reason.
  static Tensor undefined(const char* why);

  // Every member but defined(), impl(), same(), to_string() and the printing operator
  // throws Error on an undefined tensor, naming the member and why the tensor is undefined.
  bool defined() const { return impl_ != nullptr; }
  const char* why_undefined() const;  // nullptr when defined
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  // --- metadata
  const Shape& shape() const { return live("Tensor::shape").shape; }
  const Shape& strides() const { return live("Tensor::strides").strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return live("Tensor::offset").offset; }
  int64_t dim() const { return (int64_t)live("Tensor::dim").shape.size(); }
  int64_t numel() const;
  DType dtype() const { return live("Tensor::dtype").dtype; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return live("Tensor::storage").storage; }

  // --- element access. data<T>() points at element [0,...,0]; T must match dtype.
  template <class T> T* data() const;
  void* raw_data() const;
  double item() const;  // the value of a one-element tensor, converted to double
  template <class T> T item() const { return static_cast<T>(item()); }
  template <class T> std::vector<T> to_vector() const;  // row-major values, converted
  double at(std::initializer_list<int64_t> index) const;  // one element, as double

  // --- autograd
  bool requires_grad() const { return live("Tensor::requires_grad").requires_grad; }
  Tensor& requires_grad_(bool on = true);  // only on leaves
  bool is_leaf() const;
  Tensor grad() const;  // undefined until a backward reaches this leaf (the reason kept)
  void set_grad(const Tensor& g);
  void zero_grad();     // drops the gradient (PyTorch's set_to_none)
  const std::shared_ptr<Node>& grad_fn() const { return live("Tensor::grad_fn").grad_fn; }
  // A non-leaf keeps the gradient that reaches it in .grad() (accumulated over backward
  // calls, after its hooks); a no-op on a leaf, which always does.
  void retain_grad() const;
  bool retains_grad() const;
  // fn sees the gradient reaching this tensor during backward and may replace it (see
  // GradHook). Hooks run in registration order; a leaf's before its .grad() accumulates.
  HookHandle register_hook(GradHook fn) const;
  // A leaf only: fn runs after each backward has accumulated this leaf's gradient.
  HookHandle register_post_accumulate_grad_hook(PostAccumulateHook fn) const;
  // Backpropagates from this tensor, accumulating into the .grad() of the leaves it
  // depends on. grad may be omitted only for one-element tensors. The graph is freed
  // afterwards unless retain_graph is set (by default: create_graph). With create_graph
  // the backward is itself recorded: the gradients have a graph and can be differentiated
  // again (see ember::grad in core/autograd.h).
  void backward(const Tensor& grad = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  Tensor detach() const;  // same storage, no history, requires_grad false

  // --- views (share storage, never copy) and copies
  Tensor view(Shape shape) const;       // fails when strides make a copy necessary
  Tensor reshape(Shape shape) const;    // view when possible, otherwise a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;                     // transpose of a 2-D tensor
  Tensor mT() const;                    // swaps the last two dims
  Tensor permute(std::vector<int64_t> dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // x.slice(1, {.start = 1, .end = 6, .step = 2}) is PyTorch's x[:, 1:6:2]; negative
  // bounds count from the end, and bounds past either end are clamped.
  Tensor slice(int64_t dim, const Slice& range) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor expand(Shape shape) const;     // -1 keeps a size; broadcasts size-1 dims
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor contiguous() const;            // this tensor itself when already contiguous
  Tensor clone() const;                 // always a fresh contiguous copy
  Tensor to(DType dtype) const;         // differentiable between float types

  // --- in-place, outside autograd (initialisation, optimizer updates)
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);     // src is broadcast to this shape and converted

  std::string to_string() const;

 private:
  TensorImpl& live(const char* op) const {
    if (!impl_) [[unlikely]] fail_undefined(*this, op, "the tensor");
    return *impl_;
  }

  std::shared_ptr<TensorImpl> impl_;
  const char* why_undefined_;
};

inline Tensor Tensor::undefined(const char* why) {
  Tensor t;
  t.why_undefined_ = why;
  return t;
}

// Ops call this on each tensor argument first: "sum: the input is undefined: ...".
inline void check_defined(const Tensor& t, const char* op, const char* what = "the input") {
  if (!t.defined()) [[unlikely]] fail_undefined(t, op, what);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// --- creation
// Uninitialised contents (like torch.empty): for outputs that are overwritten whole.
Tensor empty(const Shape& shape, DType dtype = kFloat32);
Tensor zeros(const Shape& shape, DType dtype = kFloat32);
Tensor ones(const Shape& shape, DType dtype = kFloat32);
Tensor full(const Shape& shape, double value, DType dtype = kFloat32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, DType dtype = kFloat32);
// [start, end) in steps of step
Tensor arange(double start, double end, double step = 1.0, DType dtype = kInt64);
Tensor arange(int64_t end, DType dtype = kInt64);
// Copies values (row-major) into a new tensor of the given shape.
Tensor from_vector(const std::vector<float>& values, const Shape& shape);
Tensor from_vector(const std::vector<double>& values, const Shape& shape);
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype);
Tensor from_bools(const std::vector<bool>& values, const Shape& shape);
// Random tensors from a generator (the default one when none is given).
Tensor randn(const Shape& shape, DType dtype = kFloat32, Generator* gen = nullptr);
Tensor rand(const Shape& shape, DType dtype = kFloat32, Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, DType dtype = kFloat32,
               Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double std, DType dtype = kFloat32,
              Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr);

// --- template definitions
template <class T>
T* Tensor::data() const {
  live("Tensor::data");
  if (dtype_of<T>::value != impl_->dtype)
    fail("Tensor::data", "requested ", dtype_name(dtype_of<T>::value), " but the tensor is ",
         dtype_name(impl_->dtype));
  return static_cast<T*>(impl_->storage->data) + impl_->offset;
}

}  // namespace ember
