// The backward engine, grad mode and anomaly mode.
#include "core/autograd.h"

#include <atomic>
#include <unordered_map>

#include "core/kernels.h"
#include "core/ops.h"

namespace ember {

namespace {
thread_local bool t_grad_enabled = true;
std::atomic<bool> g_anomaly{false};
std::atomic<int64_t> g_live_nodes{0};
// Set while backward functions run. The ops they call are internal: anomaly mode checks
// their results once, as the gradient of the node being run, named and located as that node.
thread_local bool t_in_backward = false;
struct InBackward {
  bool prev = t_in_backward;
  InBackward() { t_in_backward = true; }
  ~InBackward() { t_in_backward = prev; }
};

std::string shapes_of(const std::vector<Edge>& inputs) {
  std::string s;
  for (size_t i = 0; i < inputs.size(); i++) {
    if (i) s += ", ";
    s += shape_str(inputs[i].shape);
  }
  return s;
}
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }
bool anomaly_enabled() { return g_anomaly.load(std::memory_order_relaxed); }
void set_anomaly_enabled(bool on) { g_anomaly = on; }

std::string format_loc(const Loc& loc) {
  if (!loc.file_name() || !*loc.file_name()) return "an unknown place";
  return cat_str(loc.file_name(), ":", loc.line(), " (", loc.function_name(), ")");
}

int64_t Node::live_count() { return g_live_nodes.load(); }

Node::~Node() {
  // Dropping the last reference to a long chain would destroy it recursively, one stack
  // frame per node; instead, move the inputs we alone own onto a heap stack and let each
  // die with its own inputs already taken away.
  std::vector<std::shared_ptr<Node>> pending;
  auto take = [&](Node& n) {
    for (Edge& e : n.inputs)
      if (e.fn && e.fn.use_count() == 1) pending.push_back(std::move(e.fn));
    n.inputs.clear();
  };
  take(*this);
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    take(*n);
  }
  g_live_nodes--;
}

bool wants_grad_list(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(const char* op, const Loc& loc, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward,
              const std::vector<Tensor>& saved) {
  if (anomaly_enabled() && !t_in_backward && !kernel::all_finite(out)) {
    std::string shapes;
    for (size_t i = 0; i < inputs.size(); i++) shapes += (i ? ", " : "") + shape_str(inputs[i].shape());
    fail(op, "produced NaN or Inf in its forward (anomaly mode); input shapes ", shapes, "; output shape ",
         out.shape(), "; called at ", format_loc(loc));
  }
  if (!backward) return out;
  auto node = std::make_shared<Node>();
  g_live_nodes++;
  node->name = op;
  node->where = loc;
  node->out_shape = out.shape();
  node->backward = std::move(backward);
  for (const Tensor& t : saved)
    if (t.defined()) node->saved.push_back({t.storage(), t.storage()->version, t.shape(), t.dtype()});
  node->inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined()) {
      e.shape = t.shape();
      e.dtype = t.dtype();
      if (t.requires_grad()) {
        if (t.grad_fn()) e.fn = t.grad_fn();
        else e.leaf = t.impl_ptr();
      }
    }
    node->inputs.push_back(std::move(e));
  }
  TensorImpl* o = out.impl();
  o->grad_fn = std::move(node);
  o->requires_grad = true;
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - (int64_t)shape.size();
  if (lead < 0) fail("backward", "internal: gradient of shape ", g.shape(), " cannot be summed to ", shape);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < g.dim(); d++) {
    if (d < lead) dims.push_back(d);
    else if (shape[d - lead] == 1 && g.size(d) != 1) dims.push_back(d);
    else if (shape[d - lead] != g.size(d))
      fail("backward", "internal: gradient of shape ", g.shape(), " cannot be summed to ", shape);
  }
  Tensor r = dims.empty() ? g : sum(g, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

namespace {

// The leaf's first gradient is g itself when nothing else can see g's memory (the only
// reference to a dense tensor, of a storage no view shares), else a copy: g may alias
// another gradient, or a tensor a backward function keeps.
void accumulate_leaf(TensorImpl* leaf, Tensor g) {
  if (!leaf->grad) {
    const bool owned = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && !g.impl()->grad_fn &&
                       !g.impl()->requires_grad && g.is_contiguous() && g.impl()->offset == 0 &&
                       (size_t)(g.numel() * dtype_size(g.dtype())) == g.storage()->nbytes;
    leaf->grad = owned ? g.impl_ptr() : g.clone().impl_ptr();
  } else {
    Tensor acc(leaf->grad);
    kernel::add_inplace(acc, g);
  }
}

// The gradient reaching a tensor, through its hooks in registration order (on a copy of
// the list: a hook may remove itself).
Tensor run_hooks(const std::shared_ptr<GradHooks>& hooks, Tensor g) {
  if (!hooks || hooks->pre.empty()) return g;
  const auto pre = hooks->pre;
  for (const auto& [id, fn] : pre) {
    Tensor r = fn(g);
    if (!r.defined()) continue;
    if (r.shape() != g.shape() || r.dtype() != g.dtype())
      fail("register_hook", "a hook returned a gradient of shape ", r.shape(), " and dtype ", dtype_name(r.dtype()),
           "; expected shape ", g.shape(), " and dtype ", dtype_name(g.dtype()), " (the gradient it was given)");
    g = r;
  }
  return g;
}

// A leaf's share of the gradient: its hooks, accumulation, then its post-accumulate hooks.
void reach_leaf(const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
  g = run_hooks(leaf->hooks, std::move(g));
  accumulate_leaf(leaf.get(), std::move(g));
  if (leaf->hooks && !leaf->hooks->post.empty()) {
    const auto post = leaf->hooks->post;
    for (const auto& [id, fn] : post) fn(Tensor(leaf));
  }
}

void check_finite_backward(const Node& n, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); i++)
    if (grads[i].defined() && !kernel::all_finite(grads[i]))
      fail(n.name, "produced NaN or Inf in its backward (anomaly mode), in the gradient of input ", i,
           "; input shapes ", shapes_of(n.inputs), "; output shape ", n.out_shape, "; the op was called at ",
           format_loc(n.where));
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  const char* op = "backward";
  if (!root.defined()) fail(op, "called on an undefined tensor");
  if (!root.requires_grad())
    fail(op, "the tensor does not require grad and has no grad_fn (shape ", root.shape(),
         "); set requires_grad on a leaf it depends on");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    if (root.numel() != 1)
      fail(op, "grad can be implicitly created only for scalar outputs; got a tensor of shape ", root.shape(),
           " (pass a gradient of that shape)");
    grad = ones(root.shape(), root.dtype());
  } else if (grad.shape() != root.shape() || grad.dtype() != root.dtype()) {
    fail(op, "expected a gradient of shape ", root.shape(), " and dtype ", dtype_name(root.dtype()), ", got shape ",
         grad.shape(), " and dtype ", dtype_name(grad.dtype()));
  }
  NoGradGuard no_grad;
  InBackward in_backward;
  if (!root.grad_fn()) {
    reach_leaf(root.impl_ptr(), grad);
    return;
  }

  // Count, for every node reachable from the root, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root.grad_fn().get()};
  deps[root.grad_fn().get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Edge& e : n->inputs) {
      if (!e.fn) continue;
      auto [it, inserted] = deps.try_emplace(e.fn.get(), 0);
      it->second++;
      if (inserted) stack.push_back(e.fn.get());
    }
  }

  // Process nodes once all their consumers have contributed their gradient.
  std::unordered_map<Node*, Tensor> grads;
  grads[root.grad_fn().get()] = grad;
  std::vector<Node*> ready{root.grad_fn().get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor g = std::move(grads[n]);
    grads.erase(n);
    if (n->released)
      fail(op, "trying to backward through the graph a second time (through ", n->name, " called at ",
           format_loc(n->where), "); its saved values were freed after the first backward. Pass ",
           "retain_graph=true to the first backward to keep them");
    // the gradient that reached the node's output tensor: its hooks, then .grad() if it
    // retains it (a copy: g itself flows on, and may be shared with an input's gradient)
    g = run_hooks(n->hooks, std::move(g));
    if (auto t = n->retained.lock()) {
      if (!t->grad) t->grad = g.clone().impl_ptr();
      else {
        Tensor acc(t->grad);
        kernel::add_inplace(acc, g);
      }
    }
    for (const SavedVersion& s : n->saved)
      if (s.storage->version != s.version)
        fail(op, "a ", dtype_name(s.dtype), " tensor of shape ", s.shape, " that ", n->name, " (called at ",
             format_loc(n->where), ") saved for its backward was modified in place after it was saved (version ",
             s.version, ", now ", s.storage->version, "); compute the gradient first, or modify a clone()");
    std::vector<Tensor> in_grads = n->backward(g);
    if (in_grads.size() != n->inputs.size())
      fail(n->name, "internal: backward returned ", (int64_t)in_grads.size(), " gradients for ",
           (int64_t)n->inputs.size(), " inputs");
    if (anomaly_enabled()) check_finite_backward(*n, in_grads);
    if (!retain_graph) {
      n->backward = nullptr;
      n->saved.clear();
      n->released = true;
    }
    for (size_t i = 0; i < n->inputs.size(); i++) {
      Edge& e = n->inputs[i];
      if (!e.needs_grad()) continue;
      if (in_grads[i].defined()) {
        Tensor gi = sum_to(in_grads[i], e.shape);
        if (gi.dtype() != e.dtype) gi = gi.to(e.dtype);
        if (e.leaf) {
          in_grads[i] = Tensor();  // so that gi may be the only reference
          reach_leaf(e.leaf, std::move(gi));
        } else {
          auto it = grads.find(e.fn.get());
          if (it == grads.end()) grads.emplace(e.fn.get(), gi);
          else it->second = add(it->second, gi);
        }
      }
      if (e.fn && --deps[e.fn.get()] == 0) {
        if (grads.count(e.fn.get())) ready.push_back(e.fn.get());
        else {
          // no gradient reached it (all paths gave undefined gradients): still release it
          if (!retain_graph && !e.fn->released) { e.fn->backward = nullptr; e.fn->saved.clear(); e.fn->released = true; }
        }
      }
    }
  }
}

}  // namespace ember
