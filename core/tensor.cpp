// Tensor metadata, element access and the autograd surface (requires_grad, grad, hooks,
// backward, detach). Shapes are in shape.cpp, views and copies in views.cpp, creation in
// factories.cpp, printing in print.cpp.
#include "core/tensor.h"

#include <cmath>
#include <limits>
#include <utility>

#include "core/autograd.h"
#include "core/autograd/state.h"
#include "core/kernels/dispatch.h"

namespace ember {

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
int64_t Tensor::size(int64_t d) const { return live("Tensor::size").shape[wrap_indexed_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const {
  return live("Tensor::stride").strides[wrap_indexed_dim(d, dim(), "Tensor::stride")];
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

// "[-128, 127]": the values integer type T holds.
template <class T>
static std::string integer_range() {
  return cat_str("[", std::to_string(std::numeric_limits<T>::min()), ", ", std::to_string(std::numeric_limits<T>::max()), "]");
}

// The row-major values as T; op names the caller in errors. An integer type must hold
// every value (a float truncated toward zero first).
template <class T>
static std::vector<T> values_as(const Tensor& t, const char* op) {
  if constexpr (!std::is_same_v<T, BFloat16>)  // exact, then as float32's
    if (t.dtype() == kBFloat16) return values_as<T>(t.detach().to(kFloat32), op);
  Tensor c = t.contiguous();
  std::vector<T> out(t.numel());
  dispatch_all(t.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* p = c.data<S>();
    if constexpr (std::is_floating_point_v<S> && std::is_integral_v<T>) {
      // NaN, infinities and values past T's range have no T: refused, not undefined
      const double hi = std::ldexp(1.0, std::numeric_limits<T>::digits), lo = std::is_signed_v<T> ? -hi : 0.0;
      for (size_t i = 0; i < out.size(); i++) {
        if (!(std::trunc(double(p[i])) >= lo && double(p[i]) < hi))
          fail(op, "element ", (int64_t)i, " (", (double)p[i], ") of a ", dtype_name(t.dtype()),
               " tensor does not fit the integer type asked for (range ", integer_range<T>(), ")");
        out[i] = static_cast<T>(p[i]);
      }
    } else if constexpr (std::is_integral_v<S> && std::is_integral_v<T>) {
      for (size_t i = 0; i < out.size(); i++) {
        if (!std::in_range<T>(p[i]))
          fail(op, "element ", (int64_t)i, " (", (int64_t)p[i], ") of a ", dtype_name(t.dtype()),
               " tensor does not fit the integer type asked for (range ", integer_range<T>(), ")");
        out[i] = static_cast<T>(p[i]);
      }
    } else {
      for (size_t i = 0; i < out.size(); i++) out[i] = static_cast<T>(p[i]);
    }
  });
  return out;
}

template <class T>
T Tensor::integer_item() const {
  live("item");
  if (numel() != 1) fail("item", "expected a tensor with one element, got shape ", shape());
  return values_as<T>(*this, "item")[0];
}
template int Tensor::integer_item<int>() const;
template long Tensor::integer_item<long>() const;
template long long Tensor::integer_item<long long>() const;
template unsigned Tensor::integer_item<unsigned>() const;
template unsigned long Tensor::integer_item<unsigned long>() const;
template unsigned long long Tensor::integer_item<unsigned long long>() const;
template short Tensor::integer_item<short>() const;
template unsigned short Tensor::integer_item<unsigned short>() const;
template signed char Tensor::integer_item<signed char>() const;
template unsigned char Tensor::integer_item<unsigned char>() const;

template <class T>
std::vector<T> Tensor::to_vector() const {
  live("to_vector");
  return values_as<T>(*this, "to_vector");
}

namespace literal_detail {
void fail_tolist_depth(const Tensor& t, int depth) {
  fail("tolist", "asked for ", depth, " levels of nesting, but the tensor of shape ", t.shape(), " has ", t.dim(),
       " dims");
}
}  // namespace literal_detail
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int> Tensor::to_vector<int>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;

// ---------------------------------------------------------------- autograd surface
Tensor& Tensor::requires_grad_(bool on) {
  if (live("requires_grad_").grad_fn)
    fail("requires_grad_", "can only be set on leaf tensors; this tensor was produced by ", "an op (",
         "use detach() to make a new leaf)");
  if (on && dtype() == kBFloat16) fail_bfloat16("requires_grad_", &shape());
  if (on && !is_computing_float(dtype()))
    fail("requires_grad_", "only float32 and float64 tensors can require gradients, got ", dtype_name(dtype()));
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return live("is_leaf").grad_fn == nullptr; }

Tensor Tensor::grad() const {
  const TensorImpl& p = live("grad");
  std::shared_ptr<TensorImpl> g;
  {
    const std::lock_guard<std::mutex> lock(autograd_detail::grad_mutex());
    g = p.grad;
  }
  if (g) return Tensor(std::move(g));
  if (!p.requires_grad) return undefined(why::kNoGrad);
  if (p.grad_fn) return undefined(retains_grad() ? why::kRetainedNotReached : why::kNonLeaf);
  return undefined(p.grad_cleared ? why::kCleared : why::kNoBackwardYet);
}

void Tensor::set_grad(const Tensor& g) {
  live("set_grad");
  if (g.defined() && (g.shape() != shape() || g.dtype() != dtype()))
    fail("set_grad", "expected a gradient of shape ", shape(), " and dtype ", dtype_name(dtype()),
         ", got shape ", g.shape(), " and dtype ", dtype_name(g.dtype()));
  const std::lock_guard<std::mutex> lock(autograd_detail::grad_mutex());
  impl_->grad_cleared = !g.defined();
  impl_->grad = g.impl_ptr();
}

void Tensor::zero_grad() {
  live("zero_grad");
  const std::lock_guard<std::mutex> lock(autograd_detail::grad_mutex());
  impl_->grad.reset();
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

}  // namespace ember
