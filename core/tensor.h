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
#include <type_traits>
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
  // The caller's location, when used as a default argument.
  static constexpr Loc current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE(),
                               const char* function = __builtin_FUNCTION()) noexcept {
    Loc l;
    l.file_ = file;
    l.line_ = line;
    l.function_ = function;
    return l;
  }
  constexpr const char* file_name() const noexcept { return file_; }  // The source file ("" if unknown).
  constexpr unsigned line() const noexcept { return line_; }  // The line (0 if unknown).
  constexpr const char* function_name() const noexcept { return function_; }  // The calling function.

 private:
  const char* file_ = "";
  unsigned line_ = 0;
  const char* function_ = "";
};

// A range of indices along one dimension, as Python's start:end:step (see Tensor::slice).
struct Slice {
  int64_t start = 0;  // the first index
  int64_t end = INT64_MAX;  // past the last index: to the end
  int64_t step = 1;  // positive (PyTorch refuses negative steps too)
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
  std::vector<std::pair<int64_t, GradHook>> pre;  // register_hook's, with their ids
  std::vector<std::pair<int64_t, PostAccumulateHook>> post;  // post-accumulate hooks, with their ids
  int64_t next_id = 0;  // the id the next hook gets
};

// Removes the hook it was returned for; removing twice, or after the tensor is gone, is
// harmless.
class HookHandle {
 public:
  HookHandle() = default;
  // A handle whose remove() calls remove once (a default-constructed one removes nothing).
  explicit HookHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  // Removes the hook (as PyTorch's handle.remove()).
  void remove() {
    if (!remove_) return;
    auto f = std::move(remove_);
    remove_ = nullptr;
    f();
  }

 private:
  std::function<void()> remove_;
};

// Throws Error: "`<op>: <what> is undefined: <t.why_undefined()>`".
[[noreturn]] void fail_undefined(const Tensor& t, const char* op, const char* what);

// What a Tensor handle refers to: the view's geometry over its storage, and its autograd
// state. Shared by every copy of the handle.
struct TensorImpl {
  std::shared_ptr<Storage> storage;  // the memory, shared with other views
  Shape shape;  // sizes, outermost first
  Shape strides;  // in elements
  int64_t offset = 0;  // of element [0,...,0] in the storage, in elements
  DType dtype = DType::Float32;  // the element type
  bool requires_grad = false;  // whether ops on it record a graph
  bool grad_cleared = false;  // zero_grad() or set_grad(undefined) dropped the gradient
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf (or of a non-leaf that retains it)
  std::shared_ptr<Node> grad_fn;  // the op that produced this tensor, if recorded
  std::shared_ptr<GradHooks> hooks;  // a leaf's hooks, when any
  // Forward mode (core/forward_ad.h): the tangent of this tensor, valid while the dual
  // level it was set at (tangent_level) is open; read it with unpack_dual.
  std::shared_ptr<TensorImpl> tangent;
  uint64_t tangent_level = 0;  // the dual level the tangent belongs to (0: none)
};

// An n-dimensional array with autograd, as torch.Tensor (see the top of this file). A
// default-constructed Tensor is undefined, like None.
class Tensor {
 public:
  Tensor() : why_undefined_(nullptr) {}  // an undefined tensor (like None)
  // A handle to impl (undefined when impl is null).
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)), why_undefined_(nullptr) {}
  // An undefined tensor that remembers why it is undefined (a static string, such as
  // "it is the grad() of a leaf that no backward has reached yet"); every error about it
  // repeats the reason.
  static Tensor undefined(const char* why);

  // Every member but defined(), impl(), same(), to_string() and the printing operator
  // throws Error on an undefined tensor, naming the member and why the tensor is undefined.
  bool defined() const { return impl_ != nullptr; }
  const char* why_undefined() const;  // nullptr when defined
  // The TensorImpl this handle refers to (null when undefined).
  ///@{
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  ///@}
  // Whether both handles refer to one TensorImpl (Python's `is`).
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  // --- metadata
  const Shape& shape() const { return live("Tensor::shape").shape; }
  const Shape& strides() const { return live("Tensor::strides").strides; }  // In elements, as PyTorch's.
  // The size or stride of one dim (negative counts from the end); an Error when dim is out
  // of range, and on a 0-dim tensor, which has none.
  ///@{
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  ///@}
  // Of element [0,...,0] in the storage, in elements (PyTorch's storage_offset()).
  int64_t offset() const { return live("Tensor::offset").offset; }
  int64_t dim() const { return (int64_t)live("Tensor::dim").shape.size(); }  // The number of dims.
  int64_t numel() const;  // The number of elements (1 for a 0-dim tensor).
  DType dtype() const { return live("Tensor::dtype").dtype; }  // The element type.
  bool is_contiguous() const;  // Whether the elements lie row-major without gaps (size-1 dims' strides ignored).
  // The memory the tensor views.
  const std::shared_ptr<Storage>& storage() const { return live("Tensor::storage").storage; }

  // --- element access. data<T>() points at element [0,...,0]; T must match dtype.
  template <class T> T* data() const;
  void* raw_data() const;  // data() untyped: the address of element [0,...,0].
  double item() const;  // the value of a one-element tensor, converted to double
  // The value as T: exact for an int64 tensor read as an integer type; a float value read
  // as an integer must fit it (truncated toward zero).
  template <class T> T item() const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return integer_item<T>();
    else return static_cast<T>(item());
  }
  // Row-major values, converted (float, double, int64_t, int, uint8_t); a float value read
  // as an integer type must fit it.
  template <class T> std::vector<T> to_vector() const;
  // Nested vectors of depth D = dim(), as torch's tolist(): t.tolist<double, 2>() is a
  // std::vector<std::vector<double>>; D = 0 gives the value itself.
  template <class T, int D> auto tolist() const;
  double at(std::initializer_list<int64_t> index) const;  // one element, as double
  template <class T> T integer_item() const;  // item() as an integer type T, which must hold it

  // --- autograd
  bool requires_grad() const { return live("Tensor::requires_grad").requires_grad; }
  Tensor& requires_grad_(bool on = true);  // only on float32 and float64 leaves
  bool is_leaf() const;  // Whether no recorded op produced it (grad_fn is null), as in PyTorch.
  Tensor grad() const;  // undefined until a backward reaches this leaf (the reason kept)
  // Sets .grad() (undefined drops it); an Error when g's shape or dtype differs from this one's.
  void set_grad(const Tensor& g);
  void zero_grad();  // drops the gradient (PyTorch's set_to_none)
  // The op that produced it; null for a leaf.
  const std::shared_ptr<Node>& grad_fn() const { return live("Tensor::grad_fn").grad_fn; }
  // A non-leaf keeps the gradient that reaches it in .grad() (accumulated over backward
  // calls, after its hooks); a no-op on a leaf, which always does.
  void retain_grad() const;
  bool retains_grad() const;  // Whether retain_grad() was called on this non-leaf (false for a leaf).
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

  // --- views (share storage, never copy) and copies: each throws Error on a dim out of
  // range, and records its backward when the tensor requires grad.
  //
  // view() and reshape() take one -1 size to infer; an Error when the element counts differ.
  Tensor view(Shape shape) const;  // fails when strides make a copy necessary
  Tensor reshape(Shape shape) const;  // view when possible, otherwise a copy
  // Dims start_dim..end_dim merged into one (a reshape); a 0-dim tensor becomes [1].
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;  // A view with dims dim0 and dim1 swapped.
  Tensor t() const;  // transpose of a 2-D tensor; a tensor of fewer dims as it is; an Error past 2 dims
  Tensor mT() const;  // swaps the last two dims; an Error under 2 dims
  // A view with the dims reordered: dim i of the result is dims[i] of this tensor; an Error
  // unless dims names every dim once.
  Tensor permute(std::vector<int64_t> dims) const;
  // A view of length indices of dim from start; an Error when they pass the dim's end (no
  // clamping, as in PyTorch).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // x.slice(1, {.start = 1, .end = 6, .step = 2}) is PyTorch's x[:, 1:6:2]; negative
  // bounds count from the end, and bounds past either end are clamped.
  Tensor slice(int64_t dim, const Slice& range) const;
  // The view at index (negative counts from the end) of dim, which is removed, as torch.select;
  // an Error when index is out of range.
  Tensor select(int64_t dim, int64_t index) const;
  // The elements (i, i + offset) of dims dim1 and dim2 (offset > 0 above the main
  // diagonal), as a last dim replacing both; a view, as torch.diagonal.
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor unsqueeze(int64_t dim) const;  // A view with a size-1 dim inserted at dim (in [-dim()-1, dim()]).
  // A view without size-1 dim `dim` (unchanged when its size is not 1), or without every
  // size-1 dim.
  ///@{
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  ///@}
  // A view with size-1 dims broadcast to shape (strides 0, no copy), new dims in front; -1
  // keeps a size; an Error when a size is neither 1 nor the target.
  Tensor expand(Shape shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }  // expand(other.shape()).
  Tensor contiguous() const;  // this tensor itself when already contiguous
  Tensor clone() const;  // always a fresh contiguous copy
  // A copy converted to dtype (this tensor itself when it has it already); differentiable
  // between float32 and float64 (a bfloat16 result does not require grad). Into int64 a
  // float truncates toward zero, and a value int64 cannot hold is an Error (PyTorch's
  // result is undefined there). Into bfloat16 a value rounds to nearest even (float64 and
  // int64 through float32, as PyTorch).
  Tensor to(DType dtype) const;

  // --- in-place, outside autograd (initialisation, optimizer updates). Unlike PyTorch's,
  // they are not recorded: on a tensor that requires grad they are an Error while grad
  // mode is on (use NoGradGuard), and so is copy_ from a source that requires grad.
  Tensor& fill_(double value);  // into int64: truncated toward zero, refused past int64
  Tensor& zero_() { return fill_(0.0); }  // fill_(0).
  // Copies src, broadcast to this shape and converted to this dtype, into this tensor; an
  // Error when src does not broadcast to this shape or this tensor is expanded (elements
  // sharing memory). Overlapping src and destination are handled.
  Tensor& copy_(const Tensor& src);

  // The values as text, as the print options say; "tensor(undefined)" for an undefined one.
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

std::ostream& operator<<(std::ostream& os, const Tensor& t);  // Writes t.to_string().

// How tensors print, for the whole process (torch.set_printoptions): digits after the
// point, the element count above which a tensor is summarised with "...", the items kept
// at each edge then, and fixed or scientific notation (chosen from the values if unset).
// Whatever the options, at most 2^20 elements (and about 64 MiB of text) are printed. Set it
// before printing from several threads.
struct PrintOptions {
  int precision = 4;  // digits after the point, in [0, 30]
  int64_t threshold = 1000;  // summarise above this many elements (>= 0)
  int64_t edgeitems = 3;  // items kept at each edge when summarised, in [1, 1000000]
  std::optional<bool> sci_mode;  // scientific notation; unset: chosen from the values
};
// Sets the print options; an Error when one is out of range. PrintOptions{} restores the
// defaults.
void set_printoptions(const PrintOptions& options);
PrintOptions get_printoptions();  // The print options in force.

// --- creation. A new tensor of a negative size, or of more than 2^56 elements, is an
// Error; one the system has no memory for, an OutOfMemory.
//
// Uninitialised contents (like torch.empty): for outputs that are overwritten whole.
Tensor empty(const Shape& shape, DType dtype = kFloat32);
// A new contiguous tensor of zeros, of ones, or of value (converted to dtype: into int64
// truncated toward zero, and an Error when int64 cannot hold it), as torch.zeros/ones/full.
///@{
Tensor zeros(const Shape& shape, DType dtype = kFloat32);
Tensor ones(const Shape& shape, DType dtype = kFloat32);
Tensor full(const Shape& shape, double value, DType dtype = kFloat32);
///@}
// The n x m identity (m = n when -1): ones on the main diagonal, as torch.eye.
Tensor eye(int64_t n, int64_t m = -1, DType dtype = kFloat32);
// zeros, ones or full of t's shape and dtype (contiguous, whatever t's strides); an Error
// when t is undefined.
///@{
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
///@}
Tensor scalar_tensor(double value, DType dtype = kFloat32);  // A 0-dim tensor holding value.
// [start, end) in steps of step, or [0, end). Without a dtype: int64 when start, end and
// step are whole numbers, float32 otherwise, so arange(0, 1, 0.1) holds tenths as
// torch.arange's does (PyTorch looks at the arguments' Python types, which C++ doubles do
// not keep: arange(0.0, 3.0) is int64 here, float32 there). An Error when step is 0, a
// bound is not finite, there would be more than 2^56 values, or an int64 result cannot
// hold them.
///@{
Tensor arange(double start, double end, double step = 1.0, std::optional<DType> dtype = std::nullopt);
Tensor arange(int64_t end, DType dtype = kInt64);
///@}
// Copies values (row-major) into a new tensor of the given shape: float32, float64 or int64
// from the vector's type, or dtype when given. An Error when the count of values differs
// from the shape's, or a value does not fit int64.
///@{
Tensor from_vector(const std::vector<float>& values, const Shape& shape);
Tensor from_vector(const std::vector<double>& values, const Shape& shape);
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype);
///@}
Tensor from_bools(const std::vector<bool>& values, const Shape& shape);  // from_vector for a bool tensor.
// A braced list of numbers: from_vector({1.0, 2.0}, {2}) is float64, ({1, 2}, {2}) int64,
// ({1.0f}, {1}) float32, ({true, false}, {2}) bool.
template <class T>
Tensor from_vector(std::initializer_list<T> values, const Shape& shape);

// A tensor from nested braces, as torch.tensor: tensor({{1.0, 2.0}, {3.0, 4.0}}) is a
// [2, 2] tensor, tensor(2.5) a 0-dim one; up to 6 levels deep. The dtype is PyTorch's
// default for the literals (float32 for reals, int64 for integers, bool for bools) unless
// given; values are converted to it (a real becoming int64 is truncated toward zero, and
// refused when int64 cannot hold it). Lists of one level must have equal lengths, else an
// Error.
///@{
template <class T>
Tensor tensor(T value, std::optional<DType> dtype = std::nullopt)
  requires std::is_arithmetic_v<T>;
template <class T>
Tensor tensor(std::initializer_list<T> values, std::optional<DType> dtype = std::nullopt);
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<T>> values, std::optional<DType> dtype = std::nullopt);
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<T>>> values,
              std::optional<DType> dtype = std::nullopt);
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>> values,
              std::optional<DType> dtype = std::nullopt);
template <class T>
Tensor tensor(
    std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>>>
        values,
    std::optional<DType> dtype = std::nullopt);
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<
                  std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>>>>
                  values,
              std::optional<DType> dtype = std::nullopt);
///@}
// Random tensors from a generator (the default one when none is given): standard normal,
// uniform in [0, 1), uniform in [low, high), normal(mean, std), and int64 integers in
// [low, high). The float ones need a float dtype (bfloat16: float32 draws rounded, so
// that rand may give 1); an Error when low > high (randint:
// low >= high) or a bound, the mean or std is not finite or std is negative. The numbers
// differ from PyTorch's for the same seed.
///@{
Tensor randn(const Shape& shape, DType dtype = kFloat32, Generator* gen = nullptr);
Tensor rand(const Shape& shape, DType dtype = kFloat32, Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, DType dtype = kFloat32,
               Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double std, DType dtype = kFloat32,
              Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr);
///@}

// --- template definitions
namespace literal_detail {
// The values of a literal as one of the three kinds a C++ literal can be, row-major.
Tensor make(const std::vector<double>& values, const Shape& shape, DType dtype, const char* op);
Tensor make(const std::vector<int64_t>& values, const Shape& shape, DType dtype, const char* op);
Tensor make(const std::vector<uint8_t>& values, const Shape& shape, DType dtype, const char* op);
[[noreturn]] void fail_ragged(const Shape& shape, size_t level, size_t got);
[[noreturn]] void fail_unsigned(unsigned long long value, const char* op);

// A literal as the kind it is stored as; an unsigned value past int64 is refused.
template <class Out, class V>
Out literal_value(V v, const char* op) {
  if constexpr (std::is_unsigned_v<V> && !std::is_same_v<V, bool> && sizeof(V) >= sizeof(int64_t))
    if (v > (V)INT64_MAX) fail_unsigned(v, op);
  return static_cast<Out>(v);
}

template <class T>
using Kind = std::conditional_t<std::is_same_v<T, bool>, uint8_t,
                                std::conditional_t<std::is_integral_v<T>, int64_t, double>>;
template <class T>
constexpr DType default_dtype() {
  if constexpr (std::is_same_v<T, bool>) return kBool;
  else if constexpr (std::is_integral_v<T>) return kInt64;
  else return kFloat32;  // torch.tensor's default for reals
}

template <class T>
struct Leaf {
  using type = T;
};
template <class T>
struct Leaf<std::initializer_list<T>> {
  using type = typename Leaf<T>::type;
};

// Appends the values of v (a number or nested lists) to out, sizes to shape as each level
// is first met; a later list of another length at a level is refused.
template <class V, class Out>
void flatten(const V& v, size_t level, Shape& shape, std::vector<Out>& out) {
  if constexpr (std::is_arithmetic_v<V>) {
    out.push_back(literal_value<Out>(v, "tensor"));
  } else {
    if (shape.size() == level) shape.push_back((int64_t)v.size());
    else if (shape[level] != (int64_t)v.size()) fail_ragged(shape, level, v.size());
    for (const auto& e : v) flatten(e, level + 1, shape, out);
  }
}

template <class List>
Tensor from_list(const List& values, std::optional<DType> dtype) {
  using T = typename Leaf<List>::type;
  static_assert(std::is_arithmetic_v<T>, "tensor: expected numbers in the braces");
  std::vector<Kind<T>> flat;
  Shape shape;
  flatten(values, 0, shape, flat);
  return make(flat, shape, dtype.value_or(default_dtype<T>()), "tensor");
}
}  // namespace literal_detail

namespace literal_detail {
template <class T, int D>
struct Nested {
  using type = std::vector<typename Nested<T, D - 1>::type>;
};
template <class T>
struct Nested<T, 0> {
  using type = T;
};
// The block of `flat` starting at `at` with sizes shape[level..], as nested vectors.
template <class T, int D>
typename Nested<T, D>::type build(const std::vector<T>& flat, const Shape& shape, size_t level, int64_t& at) {
  if constexpr (D == 0) {
    return flat[(size_t)at++];
  } else {
    typename Nested<T, D>::type out;
    out.reserve((size_t)shape[level]);
    for (int64_t i = 0; i < shape[level]; i++) out.push_back(build<T, D - 1>(flat, shape, level + 1, at));
    return out;
  }
}
[[noreturn]] void fail_tolist_depth(const Tensor& t, int depth);
}  // namespace literal_detail

template <class T, int D>
auto Tensor::tolist() const {
  static_assert(D >= 0, "tolist: the depth is the tensor's number of dims");
  if (dim() != D) literal_detail::fail_tolist_depth(*this, D);
  const std::vector<T> flat = to_vector<T>();
  int64_t at = 0;
  return literal_detail::build<T, D>(flat, shape(), 0, at);
}

template <class T>
Tensor from_vector(std::initializer_list<T> values, const Shape& shape) {
  static_assert(std::is_arithmetic_v<T>, "from_vector: expected numbers");
  using K = literal_detail::Kind<T>;
  std::vector<K> flat;
  for (const T& v : values) flat.push_back(literal_detail::literal_value<K>(v, "from_vector"));
  const DType dtype = std::is_same_v<T, float> ? kFloat32 : std::is_same_v<K, double> ? kFloat64 : literal_detail::default_dtype<T>();
  return literal_detail::make(flat, shape, dtype, "from_vector");
}

template <class T>
Tensor tensor(T value, std::optional<DType> dtype)
  requires std::is_arithmetic_v<T>
{
  using K = literal_detail::Kind<T>;
  return literal_detail::make(std::vector<K>{literal_detail::literal_value<K>(value, "tensor")}, Shape{},
                              dtype.value_or(literal_detail::default_dtype<T>()), "tensor");
}
template <class T>
Tensor tensor(std::initializer_list<T> values, std::optional<DType> dtype) {
  return literal_detail::from_list(values, dtype);
}
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<T>> values, std::optional<DType> dtype) {
  return literal_detail::from_list(values, dtype);
}
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<T>>> values,
              std::optional<DType> dtype) {
  return literal_detail::from_list(values, dtype);
}
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>> values,
              std::optional<DType> dtype) {
  return literal_detail::from_list(values, dtype);
}
template <class T>
Tensor tensor(
    std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>>>
        values,
    std::optional<DType> dtype) {
  return literal_detail::from_list(values, dtype);
}
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<
                  std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>>>>
                  values,
              std::optional<DType> dtype) {
  return literal_detail::from_list(values, dtype);
}

template <class T>
T* Tensor::data() const {
  live("Tensor::data");
  if (dtype_of<T>::value != impl_->dtype)
    fail("Tensor::data", "requested ", dtype_name(dtype_of<T>::value), " but the tensor is ",
         dtype_name(impl_->dtype));
  return static_cast<T*>(impl_->storage->data) + impl_->offset;
}

}  // namespace ember
