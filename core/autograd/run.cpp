// Running the graph: the backward engine (GraphTask: topological order, one reverse walk,
// gradients summed to their inputs' shapes, hooks, leaf accumulation), backward(), grad(),
// queue_callback and backward_of_composition. Recording the graph is in record.cpp.
#include "core/autograd.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/autocast.h"
#include "core/autograd/state.h"
#include "core/forward_ad.h"
#include "core/kernels/elementwise.h"
#include "core/ops.h"

namespace ember {

namespace autograd_detail {
thread_local constinit bool t_in_backward = false;
thread_local constinit const std::shared_ptr<Node>* t_current_node = nullptr;
std::mutex& grad_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace autograd_detail

using autograd_detail::t_current_node;
using autograd_detail::t_in_backward;

namespace {
// Backward passes run from inside a backward pass (a hook or a Function's backward
// calling backward()) nest on the stack: at most this many at once, so that runaway
// recursion is an error instead of a stack overflow.
constexpr int kMaxBackwardNesting = 100;
thread_local constinit int t_backward_nesting = 0;
thread_local constinit bool t_record_grad_norms = false;  // GradNormRecorder

// The L2 norm of g, in float64, recording nothing.
double norm_of(const Tensor& g) {
  NoGradGuard no_grad;
  return norm(g.detach().to(kFloat64)).item();
}

struct InBackward {
  bool prev = t_in_backward;
  explicit InBackward(const char* op) {
    if (t_backward_nesting >= kMaxBackwardNesting)
      fail(op, "backward passes nest at most ", kMaxBackwardNesting,
           " deep (a hook or a Function's backward starting another one), and ", kMaxBackwardNesting,
           " are running: is a hook calling backward without end?");
    t_backward_nesting++;
    t_in_backward = true;
  }
  ~InBackward() {
    t_in_backward = prev;
    t_backward_nesting--;
  }
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

// The dims of a gradient of shape g to sum so that it becomes shape s (leading dims, and
// dims where s has size 1), or nullopt when s does not broadcast to g.
static std::optional<std::vector<int64_t>> dims_to_sum(const Shape& g, const Shape& s) {
  if (g.size() < s.size()) return std::nullopt;
  const size_t lead = g.size() - s.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < g.size(); d++) {
    if (d < lead || (s[d - lead] == 1 && g[d] != 1)) dims.push_back((int64_t)d);
    else if (s[d - lead] != g[d]) return std::nullopt;
  }
  return dims;
}

static Tensor sum_dims(const Tensor& g, const std::vector<int64_t>& dims, const Shape& shape) {
  return (dims.empty() ? g : sum(g, dims, /*keepdim=*/true)).reshape(shape);
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const auto dims = dims_to_sum(g.shape(), shape);
  if (!dims) fail("sum_to", "a gradient of shape ", g.shape(), " cannot be summed to shape ", shape);
  return sum_dims(g, *dims, shape);
}

namespace {

// Whether nothing but t can see t's memory: the only reference to a dense tensor, of a
// storage no view shares, outside any graph. (A gradient may alias another gradient, or a
// tensor a backward function or a hook keeps.)
bool sole_owner(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && !t.impl()->grad_fn &&
         !t.impl()->requires_grad && t.is_contiguous() && t.impl()->offset == 0 &&
         (size_t)(t.numel() * dtype_size(t.dtype())) == t.storage()->nbytes;
}

// sum + g, in sum's memory when nothing else sees it (the same bits as add(sum, g), without
// a new buffer); out of place under create_graph, whose sums are recorded.
void sum_into(Tensor& sum, const Tensor& g, bool create_graph) {
  if (!create_graph && !grad_enabled() && sole_owner(sum) && g.shape() == sum.shape() && g.dtype() == sum.dtype())
    kernel::add_inplace(sum, g);
  else
    sum = add(sum, g);
}

// Adds g to the gradient kept in *slot. A recorded gradient (create_graph), or one
// already holding a graph, is summed out of place so that its graph stays right.
void accumulate(std::shared_ptr<TensorImpl>& slot, Tensor g, bool create_graph) {
  const std::lock_guard<std::mutex> lock(autograd_detail::grad_mutex());
  if (!slot) {
    // g itself when nothing else can see its memory and it is dense, else a dense copy (an
    // expanded gradient, such as sum's, would make every element one memory location)
    slot = !create_graph && sole_owner(g) && g.is_contiguous() ? g.impl_ptr() : g.clone().impl_ptr();
  } else if (create_graph || slot->requires_grad) {
    slot = add(Tensor(slot), g).impl_ptr();
  } else {
    // in place only when nothing else sees the gradient's memory: not a .grad() the user
    // keeps, not one tensor given to two leaves, not an expanded view (as PyTorch, which
    // adds out of place when the gradient is referenced elsewhere)
    const bool alone = slot.use_count() == 1 && slot->storage.use_count() == 1;
    Tensor acc(slot);
    if (alone && acc.is_contiguous() && acc.offset() == 0 &&
        (size_t)(acc.numel() * dtype_size(acc.dtype())) == acc.storage()->nbytes && g.shape() == acc.shape() &&
        g.dtype() == acc.dtype())
      kernel::add_inplace(acc, g);
    else
      slot = add(acc, g).impl_ptr();
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

void check_finite_backward(const Node& n, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); i++)
    if (grads[i].defined() && !kernel::all_finite(grads[i]))
      fail(n.name, "produced NaN or Inf in its backward (anomaly mode), in the gradient of input ", i,
           "; input shapes ", shapes_of(n.inputs), "; output shape ", n.out_shape, "; the op was called at ",
           format_loc(n.where));
}

void release(Node& n) {
  n.backward = nullptr;
  n.saved.clear();
  n.tangent.reset();  // (its graph may lead back to n: a cycle ends here or when its level closes)
  n.released = true;
}

class GraphTask;
thread_local GraphTask* t_current_task = nullptr;

// One backward pass. Without targets it accumulates into every leaf reached (backward());
// with targets it only collects the gradients reaching them (grad()), and evaluates only
// the nodes from which some target can be reached.
class GraphTask {
 public:
  GraphTask(const char* op, bool retain_graph, bool create_graph)
      : op_(op), retain_(retain_graph), create_(create_graph) {}

  // grad(): the tensors whose gradients are collected, in the caller's order.
  void set_targets(const std::vector<Tensor>& inputs) {
    capturing_ = true;
    captured_.assign(inputs.size(), Tensor());
    for (size_t i = 0; i < inputs.size(); i++) {
      const Tensor& t = inputs[i];
      if (!t.defined()) fail_undefined(t, op_, cat_str("input ", (int64_t)i).c_str());
      if (!t.requires_grad())
        fail(op_, "input ", (int64_t)i, " (shape ", t.shape(), ") does not require grad, so it has no gradient");
      if (t.grad_fn()) node_targets_[t.grad_fn().get()].push_back(i);
      else leaf_targets_[t.impl()].push_back(i);
    }
  }

  void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads_in) {
    if (grads_in.size() != roots.size() && !grads_in.empty())
      fail(op_, "got ", (int64_t)roots.size(), " outputs but ", (int64_t)grads_in.size(), " gradients for them");
    // the seeds, checked before anything runs
    std::vector<Tensor> seeds;
    // backward() has one tensor; grad() names its outputs by index, even a single one
    const bool single = roots.size() == 1 && std::string_view(op_) != "grad";
    for (size_t i = 0; i < roots.size(); i++)
      seeds.push_back(seed(roots[i], grads_in.empty() ? Tensor() : grads_in[i], i, single));
    InBackward in_backward(op_);
    GradModeGuard mode(create_);
    struct Current {  // queue_callback's task
      GraphTask* prev;
      explicit Current(GraphTask* t) : prev(t_current_task) { t_current_task = t; }
      ~Current() { t_current_task = prev; }
    } current(this);
    for (size_t i = 0; i < roots.size(); i++) {
      const Tensor& r = roots[i];
      if (r.grad_fn()) {
        Node* n = r.grad_fn().get();
        auto it = grads_.find(n);
        if (it == grads_.end()) {
          grads_.emplace(n, seeds[i]);
          root_nodes_.push_back(r.grad_fn());
        } else {
          it->second = add(it->second, seeds[i]);
        }
      } else {
        reach_leaf(r.impl_ptr(), seeds[i]);
      }
    }
    if (!root_nodes_.empty()) {
      discover();
      std::vector<std::shared_ptr<Node>> ready;
      for (auto& n : root_nodes_)
        if (needed(n.get()) && deps_[n.get()] == 0) ready.push_back(n);
      while (!ready.empty()) {
        std::shared_ptr<Node> n = std::move(ready.back());
        ready.pop_back();
        evaluate(n, ready);
      }
    }
    // leaves still waiting for an edge whose node was never evaluated, in the order reached
    for (TensorImpl* l : leaf_order_)
      if (auto it = leaf_grads_.find(l); it != leaf_grads_.end()) complete_leaf(it);
    // then the callbacks queued during the pass, in order; one may queue another
    for (size_t i = 0; i < callbacks_.size(); i++) {
      auto fn = std::move(callbacks_[i]);
      fn();
    }
  }

  void queue_callback(std::function<void()> fn) { callbacks_.push_back(std::move(fn)); }

  std::vector<Tensor>& captured() { return captured_; }

 private:
  Tensor seed(const Tensor& root, const Tensor& grad, size_t i, bool single) {
    if (!root.defined())
      fail_undefined(root, op_, single ? "the tensor" : cat_str("output ", (int64_t)i).c_str());
    if (!root.requires_grad() && t_in_backward && !grad_enabled())
      fail(op_, "called inside a backward pass (from a hook or a Function's backward), where grad mode is off: ",
           single ? std::string("the tensor") : cat_str("output ", i), " (shape ", root.shape(),
           ") was computed there and has no graph; compute it outside, or run the outer backward with "
           "create_graph = true");
    if (!root.requires_grad())
      fail(op_, single ? std::string("the tensor") : cat_str("output ", i),
           " does not require grad and has no grad_fn (shape ", root.shape(),
           "); set requires_grad on a leaf it depends on");
    if (!grad.defined()) {
      if (root.numel() != 1)
        fail(op_, "grad can be implicitly created only for scalar outputs; got a tensor of shape ", root.shape(),
             " (pass a gradient of that shape)");
      return ones(root.shape(), root.dtype());
    }
    if (grad.shape() != root.shape() || grad.dtype() != root.dtype())
      fail(op_, "expected a gradient of shape ", root.shape(), " and dtype ", dtype_name(root.dtype()), ", got shape ",
           grad.shape(), " and dtype ", dtype_name(grad.dtype()));
    return grad;
  }

  bool is_target(Node* n) const { return node_targets_.count(n) != 0; }
  bool wanted_leaf(TensorImpl* leaf) const { return !capturing_ || leaf_targets_.count(leaf) != 0; }
  // Whether a gradient sent along e is used: a needed node, or a live leaf that is wanted.
  bool leads_on(const Edge& e) const {
    if (e.fn) return needed(e.fn.get());
    if (!capturing_) return !e.leaf.expired();
    auto leaf = e.leaf.lock();
    return leaf && wanted_leaf(leaf.get());
  }

  // Which nodes to evaluate and, for each, how many evaluated consumers feed it. When
  // collecting, a node is needed only if a target can be reached from it: decided for
  // producers before consumers, in reverse topological order.
  void discover() {
    std::vector<Node*> stack;
    for (auto& r : root_nodes_)
      if (deps_.try_emplace(r.get(), 0).second) stack.push_back(r.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (Edge& e : n->inputs) {
        if (!e.fn) continue;
        auto [it, inserted] = deps_.try_emplace(e.fn.get(), 0);
        it->second++;
        if (inserted) stack.push_back(e.fn.get());
      }
    }
    if (!capturing_) return count_leaf_edges();
    // consumers first (Kahn), on a copy of the counts
    std::unordered_map<Node*, int> left = deps_;
    std::vector<Node*> topo;
    for (auto& r : root_nodes_)
      if (left[r.get()] == 0) stack.push_back(r.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      topo.push_back(n);
      for (Edge& e : n->inputs)
        if (e.fn && --left[e.fn.get()] == 0) stack.push_back(e.fn.get());
    }
    for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
      Node* n = *it;
      bool need = is_target(n);
      for (size_t i = 0; !need && i < n->inputs.size(); i++) {
        const Edge& e = n->inputs[i];
        if (e.fn) need = needed_.count(e.fn.get()) != 0;
        else if (auto l = e.leaf.lock()) need = leaf_targets_.count(l.get()) != 0;
      }
      if (need) needed_.insert(n);
    }
    // the counts again, over the needed nodes only
    deps_.clear();
    for (Node* n : topo) {
      if (!needed(n)) continue;
      deps_.try_emplace(n, 0);
      for (Edge& e : n->inputs)
        if (e.fn && needed(e.fn.get())) deps_[e.fn.get()]++;
    }
    count_leaf_edges();
  }

  bool needed(Node* n) const { return !capturing_ || needed_.count(n) != 0; }

  // A leaf's gradient is the sum of what reaches it along each edge of the pass: its
  // hooks see that sum, once, and its post-accumulate hooks run once, as soon as the last
  // edge into it is evaluated (data-parallel training starts reducing it then).
  void reach_leaf(const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
    add_to_leaf(leaf, std::move(g));
    if (leaf_edges_left(leaf.get()) == 0)
      if (auto it = leaf_grads_.find(leaf.get()); it != leaf_grads_.end()) complete_leaf(it);
  }
  void add_to_leaf(const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
    if (!wanted_leaf(leaf.get())) return;
    auto [it, first] = leaf_grads_.try_emplace(leaf.get(), LeafGrad{leaf, g});
    if (first) leaf_order_.push_back(leaf.get());
    else sum_into(it->second.grad, g, create_);
  }
  // n's edges into leaves are done, whether or not it sent gradients along them.
  void leaf_edges_done(Node* n) {
    for (Edge& e : n->inputs)
      if (!e.fn)
        if (auto l = e.leaf.lock()) leaf_edge_done(l.get());
  }

  // One edge into a leaf is done (its gradient added, or none sent along it).
  void leaf_edge_done(TensorImpl* leaf) {
    auto left = leaf_deps_.find(leaf);
    if (left == leaf_deps_.end() || --left->second > 0) return;
    if (auto it = leaf_grads_.find(leaf); it != leaf_grads_.end()) complete_leaf(it);
  }
  // The edges into leaves of the nodes the pass may evaluate.
  void count_leaf_edges() {
    for (auto& [n, count] : deps_)
      for (Edge& e : n->inputs)
        if (!e.fn)
          if (auto l = e.leaf.lock()) leaf_deps_[l.get()]++;
  }
  int leaf_edges_left(TensorImpl* leaf) const {
    auto it = leaf_deps_.find(leaf);
    return it == leaf_deps_.end() ? 0 : it->second;
  }

  struct LeafGrad {
    std::shared_ptr<TensorImpl> leaf;
    Tensor grad;
  };

  // The leaf's hooks, then accumulation and the post-accumulate hooks (backward), or
  // collection (grad).
  void complete_leaf(std::unordered_map<TensorImpl*, LeafGrad>::iterator it) {
    std::shared_ptr<TensorImpl> leaf = std::move(it->second.leaf);
    Tensor g = std::move(it->second.grad);
    leaf_grads_.erase(it);
    g = run_hooks(leaf->hooks, std::move(g));
    if (capturing_) {
      for (size_t i : leaf_targets_.at(leaf.get())) collect(i, g);
      return;
    }
    accumulate(leaf->grad, std::move(g), create_);
    if (leaf->hooks && !leaf->hooks->post.empty()) {
      const auto post = leaf->hooks->post;
      for (const auto& [id, fn] : post) fn(Tensor(leaf));
    }
  }

  void collect(size_t i, const Tensor& g) { captured_[i] = captured_[i].defined() ? add(captured_[i], g) : g; }

  void evaluate(const std::shared_ptr<Node>& np, std::vector<std::shared_ptr<Node>>& ready) {
    Node* n = np.get();
    Tensor g = std::move(grads_[n]);
    grads_.erase(n);
    if (n->released)
      fail(op_, "trying to backward through the graph a second time (through ", n->name, " called at ",
           format_loc(n->where), "); its saved values were freed after the first backward. Pass ",
           "retain_graph=true to the first backward to keep them");
    // the gradient that reached the node's output tensor: its hooks, then .grad() if it
    // retains it (a copy: g itself flows on, and may be shared with an input's gradient)
    g = run_hooks(n->hooks, std::move(g));
    if (t_record_grad_norms) [[unlikely]] n->grad_norm = norm_of(g);
    if (capturing_) {
      auto t = node_targets_.find(n);
      if (t != node_targets_.end())
        for (size_t i : t->second) collect(i, g);
    } else if (auto t = n->retained.lock()) {
      accumulate(t->grad, g, create_);
    }
    // evaluate the node only when an input leads somewhere wanted
    if (std::none_of(n->inputs.begin(), n->inputs.end(), [&](const Edge& e) { return leads_on(e); })) {
      leaf_edges_done(n);
      finish_inputs(n, ready);
      return;
    }
    for (const SavedVersion& s : n->saved)
      if (s.storage->version != s.version)
        fail(op_, "a ", dtype_name(s.dtype), " tensor of shape ", s.shape, " that ", n->name, " (called at ",
             format_loc(n->where), ") saved for its backward was modified in place after it was saved (version ",
             s.version, ", now ", s.storage->version, "); compute the gradient first, or modify a clone()");
    if (!create_ && n->tangent_level != 0 &&
        n->tangent_level == forward_detail::g_level.load(std::memory_order_relaxed))
      forward_detail::fail_backward_in_level(n->name);
    std::vector<Tensor> in_grads;
    {
      // (run at the precision of the node's forward: Autocast's products stay bfloat16)
      struct Restore {
        const std::shared_ptr<Node>* prev;
        bool autocast;
        ~Restore() { t_current_node = prev, autocast_detail::set_enabled(autocast); }
      } restore{t_current_node, autocast_detail::set_enabled(n->autocast)};
      t_current_node = &np;
      in_grads = n->backward(g);
    }
    // a backward given to record() by hand is checked here (Function::apply checks its own)
    if (in_grads.size() != n->inputs.size())
      fail(n->name, "its backward returned ", (int64_t)in_grads.size(), in_grads.size() == 1 ? " gradient" : " gradients",
           " for ", (int64_t)n->inputs.size(), n->inputs.size() == 1 ? " input" : " inputs",
           " (an undefined tensor stands for an input without one)");
    if (anomaly_enabled()) check_finite_backward(*n, in_grads);
    if (!retain_) release(*n);
    for (size_t i = 0; i < n->inputs.size(); i++) {
      Edge& e = n->inputs[i];
      if (!in_grads[i].defined()) continue;
      if (!leads_on(e)) continue;
      Tensor gi = in_grads[i];
      if (gi.shape() != e.shape) {
        const auto dims = dims_to_sum(gi.shape(), e.shape);
        if (!dims)
          fail(n->name, "its backward returned a gradient of shape ", gi.shape(), " for input ", (int64_t)i,
               " of shape ", e.shape, ", which it cannot be summed to");
        gi = sum_dims(gi, *dims, e.shape);
      }
      if (gi.dtype() != e.dtype) gi = gi.to(e.dtype);
      if (!e.fn) {
        in_grads[i] = Tensor();  // so that gi may be the only reference
        if (auto leaf = e.leaf.lock()) add_to_leaf(leaf, std::move(gi));
      } else {
        auto it = grads_.find(e.fn.get());
        if (it == grads_.end()) grads_.emplace(e.fn.get(), std::move(gi));
        else sum_into(it->second, gi, create_);
      }
    }
    leaf_edges_done(n);
    finish_inputs(n, ready);
  }

  // Counts n's contribution to each producer; a producer whose consumers are all done is
  // evaluated next, or, if no gradient reached it, skipped - and so are its own producers
  // that then have nothing coming - and released (a plain backward).
  void finish_inputs(Node* n, std::vector<std::shared_ptr<Node>>& ready) {
    for (Edge& e : n->inputs) {
      if (!e.fn || !needed(e.fn.get())) continue;
      if (--deps_[e.fn.get()] != 0) continue;
      if (grads_.count(e.fn.get())) {
        ready.push_back(e.fn);
        continue;
      }
      std::shared_ptr<Node> skipped = e.fn;  // release() may drop the edge that holds it
      leaf_edges_done(skipped.get());
      finish_inputs(skipped.get(), ready);
      if (!retain_ && !capturing_ && !skipped->released) release(*skipped);
    }
  }

  const char* op_;
  bool retain_, create_;
  bool capturing_ = false;
  std::unordered_map<Node*, std::vector<size_t>> node_targets_;
  std::unordered_map<TensorImpl*, std::vector<size_t>> leaf_targets_;
  std::vector<Tensor> captured_;
  std::vector<std::shared_ptr<Node>> root_nodes_;
  std::unordered_map<Node*, int> deps_;
  std::unordered_set<Node*> needed_;
  std::unordered_map<Node*, Tensor> grads_;
  std::unordered_map<TensorImpl*, int> leaf_deps_;        // edges into each leaf not yet done
  std::unordered_map<TensorImpl*, LeafGrad> leaf_grads_;  // the sums waiting for them
  std::vector<TensorImpl*> leaf_order_;                   // leaves in the order first reached
  std::vector<std::function<void()>> callbacks_;
};

}  // namespace

GradNormRecorder::GradNormRecorder() : prev_(t_record_grad_norms) { t_record_grad_norms = true; }
GradNormRecorder::~GradNormRecorder() { t_record_grad_norms = prev_; }
bool GradNormRecorder::active() { return t_record_grad_norms; }

void queue_callback(std::function<void()> fn) {
  if (!t_current_task) fail("queue_callback", "called outside a backward pass (from a hook, during backward)");
  if (!fn) fail("queue_callback", "got an empty function");
  t_current_task->queue_callback(std::move(fn));
}

namespace {
// Upstream gradients with tangents: a plain backward would drop them (create_graph keeps them).
void check_upstream_tangents(const char* op, const std::vector<Tensor>& grads, bool create_graph) {
  if (create_graph || !forward_detail::active()) return;
  for (const Tensor& g : grads)
    if (forward_detail::tangent_of(g).defined()) forward_detail::fail_backward_in_level(op);
}
}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
                  bool create_graph) {
  check_upstream_tangents("backward", grads, create_graph);
  GraphTask task("backward", retain_graph, create_graph);
  task.run(roots, grads);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, const GradOptions& options) {
  const char* op = "grad";
  if (outputs.empty()) fail(op, "expected at least one output");
  if (inputs.empty()) fail(op, "expected at least one input");
  check_upstream_tangents(op, grad_outputs, options.create_graph);
  GraphTask task(op, options.retain_graph.value_or(options.create_graph), options.create_graph);
  task.set_targets(inputs);
  task.run(outputs, grad_outputs);
  std::vector<Tensor> r = std::move(task.captured());
  for (size_t i = 0; i < r.size(); i++) {
    if (r[i].defined()) {
      if (r[i].shape() != inputs[i].shape()) r[i] = sum_to(r[i], inputs[i].shape());
      continue;
    }
    if (!options.allow_unused)
      fail(op, "input ", (int64_t)i, " (shape ", inputs[i].shape(), ") was not used to compute the outputs; ",
           "pass allow_unused = true to get an undefined gradient for it");
    r[i] = Tensor::undefined("it is the gradient grad() gives an input the outputs do not depend on (allow_unused)");
  }
  return r;
}

std::vector<Tensor> backward_of_composition(const std::function<Tensor(const std::vector<Tensor>&)>& composed,
                                            const std::vector<Tensor>& inputs, const Tensor& g) {
  // each input that requires grad enters through a node of its own, so that the
  // gradients are partial ones even when one input depends on another
  std::vector<Tensor> fresh;
  std::vector<size_t> which;
  for (size_t i = 0; i < inputs.size(); i++) {
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      fresh.push_back(inputs[i].view(inputs[i].shape()));
      which.push_back(i);
    } else {
      fresh.push_back(inputs[i]);
    }
  }
  std::vector<Tensor> r(inputs.size());
  if (which.empty()) return r;
  Tensor out = composed(fresh);
  std::vector<Tensor> targets;
  for (size_t i : which) targets.push_back(fresh[i]);
  std::vector<Tensor> gs = grad({out}, targets, {g}, {.retain_graph = true, .create_graph = true, .allow_unused = true});
  for (size_t j = 0; j < which.size(); j++) r[which[j]] = gs[j];
  return r;
}

}  // namespace ember
