// Recording the graph: grad mode and anomaly mode, Node and its live count, record() (what
// every op calls to attach its backward) and saved tensors. Running the graph is in run.cpp.
#include "core/autograd.h"

#include <atomic>

#include "core/autocast.h"
#include "core/autograd/state.h"
#include "core/forward_ad.h"
#include "core/kernels/elementwise.h"

namespace ember {

using autograd_detail::t_current_node;
using autograd_detail::t_in_backward;

namespace {
thread_local bool t_grad_enabled = true;
std::atomic<bool> g_anomaly{false};
std::atomic<int64_t> g_live_nodes{0};
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

namespace {
thread_local const Loc* t_caller_loc = nullptr;
std::atomic<Loc (*)()> g_caller_fallback{nullptr};

// The location a node records: the caller's in the driving language, when known.
Loc where_called(const Loc& cpp) {
  if (t_caller_loc) return *t_caller_loc;
  if (auto* fallback = g_caller_fallback.load(std::memory_order_relaxed)) {
    const Loc l = fallback();
    if (l.file_name() && *l.file_name()) return l;
  }
  return cpp;
}
}  // namespace

CallerLoc::CallerLoc(const Loc& loc) : loc_(loc), prev_(t_caller_loc) { t_caller_loc = &loc_; }
CallerLoc::~CallerLoc() { t_caller_loc = prev_; }
const Loc* CallerLoc::current() { return t_caller_loc; }
void CallerLoc::set_fallback(Loc (*fallback)()) { g_caller_fallback.store(fallback); }

namespace {
// record() without forward mode: the anomaly check and the node.
Tensor attach(const char* op, const Loc& caller_loc, Tensor out, const std::vector<Tensor>& inputs,
              BackwardFn backward, const std::vector<Tensor>& saved) {
  const Loc loc = where_called(caller_loc);
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
  node->autocast = autocast_enabled();
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
}  // namespace

Tensor record(const char* op, const Loc& loc, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward,
              const std::vector<Tensor>& saved, JvpRule jvp) {
  out = attach(op, loc, std::move(out), inputs, std::move(backward), saved);
  // the output's tangent after its node: a rule reading the output is then differentiable
  if (forward_detail::active()) [[unlikely]] forward_detail::propagate(op, out, inputs, jvp);
  return out;
}

// --- saved tensors
SavedTensor::SavedTensor(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  data_ = t.detach();
  output_ = is_output;
  // an input's tangent now; an output gets its tangent after this, kept by its node
  if (!is_output && forward_detail::active()) [[unlikely]] {
    if (Tensor tangent = forward_detail::tangent_of(t); tangent.defined()) {
      tangent_ = tangent.impl_ptr();
      tangent_level_ = t.impl()->tangent_level;
    }
  }
  if (is_output || !t.requires_grad()) return;
  if (t.grad_fn()) fn_ = t.grad_fn();
  else leaf_ = t.impl_ptr();
}

Tensor SavedTensor::get() const {
  if (!grad_enabled() || !data_.defined()) return data_;
  const uint64_t open = forward_detail::g_level.load(std::memory_order_relaxed);
  std::shared_ptr<Node> fn = fn_;
  std::shared_ptr<TensorImpl> tangent = tangent_level_ == open ? tangent_ : nullptr;
  if (output_) {
    if (!t_current_node) return data_;
    fn = *t_current_node;
    if (open != 0 && fn->tangent_level == open) tangent = fn->tangent;
  } else if (!fn) {
    if (auto l = leaf_.lock()) return Tensor(l);  // a leaf carries its own tangent
    if (!tangent) return data_;
  }
  auto p = std::make_shared<TensorImpl>(*data_.impl());
  if (fn) {
    p->requires_grad = true;
    p->grad_fn = std::move(fn);
  }
  if (tangent) {
    p->tangent = std::move(tangent);
    p->tangent_level = open;
  }
  return Tensor(p);
}

}  // namespace ember
