// Module: the base of every layer. A module registers its parameters, buffers and
// sub-modules by name in its constructor; named_parameters() then yields dotted names
// (encoder.layers.0.self_attn.q_proj.weight) in registration order, which are also the
// keys of state_dict() and of checkpoints.
//
// Registration stores a pointer to the member tensor, so a module must stay where it
// was built: modules are neither copied nor moved, and are held by shared_ptr.
#pragma once
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/ops.h"

namespace ember::nn {

class Module;
class GraphScopes;
namespace detail {
// The GraphScopes alive on this thread (nn/graph_draw.h), or null.
extern thread_local constinit const GraphScopes* t_graph_scopes;
// Labels the ops between a forward's inputs and outputs with the module's name (GraphScopes).
void label_ops(const Module& m, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);
}  // namespace detail

// Tensors by dotted name, in registration order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// Tensors by dotted name, sorted by name: what state_dict() returns and checkpoints store.
using StateDict = std::map<std::string, Tensor>;

// Functions registered on a module, called in registration order; add() returns the
// handle that removes one (harmless after the module is gone).
template <class Fn>
class HookList {
 public:
  // Appends fn; the handle's remove() takes it out again.
  HookHandle add(Fn fn) {
    if (!hooks_) hooks_ = std::make_shared<List>();  // moved from
    const std::lock_guard<std::mutex> lock(hooks_->mutex);
    const int64_t id = hooks_->next_id++;
    hooks_->list.emplace_back(id, std::move(fn));
    return HookHandle([weak = std::weak_ptr<List>(hooks_), id] {
      if (auto h = weak.lock()) {
        const std::lock_guard<std::mutex> lock(h->mutex);
        for (auto it = h->list.begin(); it != h->list.end(); ++it)
          if (it->first == id) {
            h->list.erase(it);
            break;
          }
      }
    });
  }
  // Whether any function is registered.
  bool any() const {
    if (!hooks_) return false;
    const std::lock_guard<std::mutex> lock(hooks_->mutex);
    return !hooks_->list.empty();
  }
  // Calls every function with args, in registration order; a function may remove itself
  // (and another thread add or remove one meanwhile: the calls are of the list as it was).
  template <class... Args>
  void run(Args&&... args) const {
    std::vector<std::pair<int64_t, Fn>> copy;
    if (!hooks_) return;
    {
      const std::lock_guard<std::mutex> lock(hooks_->mutex);
      if (hooks_->list.empty()) return;
      copy = hooks_->list;
    }
    for (const auto& entry : copy) entry.second(args...);
  }

 private:
  struct List {
    std::mutex mutex;
    std::vector<std::pair<int64_t, Fn>> list;
    int64_t next_id = 0;
  };
  std::shared_ptr<List> hooks_ = std::make_shared<List>();
};

// Converts t's values to dtype in place, held by t itself: every handle to it (an
// optimizer's copy, a Python Parameter) sees the new storage, dtype and strides, as
// PyTorch's param.data = param.data.to(dtype) does, and its gradient is converted alike.
// Module::to converts with this. Error unless t and dtype are float32 or float64.
void convert_in_place(const Tensor& t, DType dtype);

// The base of every layer: holds its parameters, buffers and sub-modules, registered by
// name in the constructor, its training mode and forward hooks. Registration keeps a
// pointer to the member tensor, so a module is neither copied nor moved; hold it by
// shared_ptr.
class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The parameters of this module and every descendant, depth-first in registration order,
  // with dotted names. A tensor registered under two names (tied weights) is listed once,
  // under the first, as PyTorch's (state_dict keeps both names). Throws Error when a
  // parameter member was replaced by an undefined tensor after registration.
  ///@{
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  ///@}
  NamedTensors named_buffers() const;  // every defined buffer, persistent and not, with dotted names
  // The direct sub-modules with their names, in registration order.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  int64_t num_parameters() const;  // the total number of elements of parameters()

  // Sets training mode (dropout active) for this module and every descendant: train(true)
  // or train(), eval() = train(false); is_training() reads this module's mode. Modules
  // start in training mode.
  ///@{
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  ///@}

  void zero_grad();  // drops every parameter's gradient

  // Parameters and persistent buffers, by dotted name. The tensors are the module's own
  // (not copies).
  StateDict state_dict() const;
  // Copies values into the module's tensors. With strict, every missing, unexpected,
  // shape- or dtype-mismatched name is reported in one Error, and nothing is changed
  // unless everything matches. Non-strict loads what matches and ignores the rest -
  // unlike PyTorch, which raises on a shape mismatch even when not strict. Either way,
  // Error when destinations overlap in memory (tied tensors given different values, or
  // an expanded view).
  void load_state_dict(const StateDict& state, bool strict = true);

  // Converts every parameter and floating buffer to dtype (e.g. float64 for gradient
  // checks) in place, as torch.nn.Module.to does: each keeps its handle, so an optimizer
  // built before goes on updating it (its state must then be of the new dtype too).
  // Error unless dtype is float32 or float64; integer buffers are left as they are.
  void to(DType dtype);

  // Runs fn with some of the module's parameters and buffers replaced by the tensors given
  // by dotted name, as torch.func.functional_call runs a module with other parameters:
  // the forward then computes with them, so a gradient, Jacobian or Hessian with respect
  // to a layer's weights needs no member swapping:
  //   auto loss = [&](const Tensor& w) {
  //     return model.functional_call({{"proj.weight", w}}, [&] { return sum(model.forward(x)); });
  //   };
  //   Tensor H = hessian(loss, model.proj->weight);
  // Each given tensor must match the shape and dtype of what it replaces (names it does
  // not know are an error naming them); names not given keep the module's own. The
  // module's tensors are back in place when fn returns or throws - so fn must not change
  // the module itself: a to() or load_state_dict() inside it acts on the replacements and
  // is undone with them.
  template <class F>
  auto functional_call(const StateDict& replacements, F&& fn) -> decltype(fn()) {
    Swap swap(*this, replacements);
    return fn();
  }

  // A function called after every forward of this module with the module, the tensors the
  // forward was given and those it returned (torch.nn.Module.register_forward_hook), in
  // registration order; the handle removes it. MultiHeadAttention passes {query, key,
  // value} and {output, weights}, the weights per head [B, H, L, S]: a module with a hook
  // always computes them, so one run can capture every layer's attention weights.
  using ForwardHook =
      std::function<void(Module& module, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs)>;
  // Registers a ForwardHook; Error when fn is empty.
  HookHandle register_forward_hook(ForwardHook fn);
  // A forward hook only observes: one that returns a value (which PyTorch would put in
  // place of the module's output) does not compile here, rather than being ignored. To
  // change what a module returns, wrap it in a module of your own. There are no forward
  // pre-hooks.
  template <class Fn>
    requires(!std::is_void_v<
             std::invoke_result_t<Fn&, Module&, const std::vector<Tensor>&, const std::vector<Tensor>&>>)
  HookHandle register_forward_hook(Fn fn) = delete;
  bool has_forward_hooks() const { return forward_hooks_.any(); }  // whether a forward hook is registered

 protected:
  // Every forward returns through this: out, after the forward hooks have seen it (and
  // its ops were labelled with this module, under a GraphScopes).
  Tensor hooked(std::initializer_list<Tensor> inputs, Tensor out) {
    if (detail::t_graph_scopes) [[unlikely]] detail::label_ops(*this, std::vector<Tensor>(inputs), {out});
    if (has_forward_hooks()) run_forward_hooks(std::vector<Tensor>(inputs), {out});
    return out;
  }
  // Calls every forward hook with this module, inputs and outputs.
  void run_forward_hooks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

  // Registers a member tensor as a trainable parameter (requires_grad is set). This and
  // the two below throw Error when the name is empty, contains '.', or is already taken
  // by a parameter, buffer or sub-module; an undefined parameter is an Error too.
  void register_parameter(const std::string& name, Tensor& member);
  // Registers a member tensor as a buffer: saved in state_dict when persistent, never
  // trained.
  void register_buffer(const std::string& name, Tensor& member, bool persistent = true);
  // Registers a sub-module under name and returns it.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    check_name(name);
    children_.emplace_back(name, m);
    return m;
  }

 private:
  // functional_call's exchange of tensors, undone by the destructor
  class Swap {
   public:
    Swap(Module& m, const StateDict& replacements);
    ~Swap();
    Swap(const Swap&) = delete;
    Swap& operator=(const Swap&) = delete;

   private:
    std::vector<std::pair<Tensor*, Tensor>> saved_;  // slot, its own tensor
  };
  // Every parameter and buffer slot by dotted name.
  void slots(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);

  void check_name(const std::string& name) const;
  void collect(const std::string& prefix, NamedTensors& out, bool params, bool only_persistent) const;

  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::tuple<std::string, Tensor*, bool>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  HookList<ForwardHook> forward_hooks_;

  friend class ModuleList;
};

// An indexed list of modules, registered as "0", "1", ...
class ModuleList : public Module {
 public:
  ModuleList() = default;
  // Appends m, registered under its index, and returns it.
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    items_.push_back(m);
    return register_module(std::to_string(items_.size() - 1), m);
  }
  size_t size() const { return items_.size(); }  // the number of modules
  // The i-th module; std::out_of_range (not ember::Error) when i >= size().
  const std::shared_ptr<Module>& operator[](size_t i) const { return items_.at(i); }
  // The i-th module as an M, or null when it is not one; std::out_of_range when i >= size().
  template <class M>
  std::shared_ptr<M> at(size_t i) const { return std::dynamic_pointer_cast<M>(items_.at(i)); }
  // Iteration over the modules, as shared_ptr<Module>.
  ///@{
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  ///@}

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// A module with a single-tensor forward.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;  // the module applied to x
  Tensor operator()(const Tensor& x) { return forward(x); }  // forward(x)
};

// Applies its modules in order.
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  // A Sequential of mods, registered as "0", "1", ...
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> mods) {
    for (auto& m : mods) push_back(m);
  }
  // Appends m, registered under its index.
  void push_back(std::shared_ptr<UnaryModule> m) {
    items_.push_back(m);
    register_module(std::to_string(items_.size() - 1), m);
  }
  // x through every module in order; x itself when empty.
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (auto& m : items_) y = m->forward(y);
    return hooked({x}, y);
  }
  size_t size() const { return items_.size(); }  // the number of modules

 private:
  std::vector<std::shared_ptr<UnaryModule>> items_;
};

}  // namespace ember::nn
