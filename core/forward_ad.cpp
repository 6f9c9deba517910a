// Forward mode (see forward_ad.h): the dual level, make_dual and unpack_dual, and how
// record() hands an op's rule its inputs' tangents and stores the output's.
#include "core/forward_ad.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "core/ops.h"

namespace ember {

namespace forward_detail {
std::atomic<uint64_t> g_level{0};
thread_local constinit bool t_suspended = false;
}  // namespace forward_detail

using forward_detail::g_level;
using forward_detail::Suspend;

namespace {
std::atomic<uint64_t> g_last_level{0};
// The tensors given a tangent in the open level, so that closing it drops their tangents
// (expired entries are pruned as the list grows).
std::mutex g_mutex;
std::vector<std::weak_ptr<TensorImpl>> g_duals;
std::vector<std::weak_ptr<Node>> g_nodes;  // nodes holding an output's tangent (Node::tangent)
constexpr size_t kFirstPrune = 1024;
size_t g_prune_at = kFirstPrune;

// A view of t's whole storage window, recorded as the identity op `op`.
Tensor alias(const char* op, const Tensor& t, const Loc& loc) {
  auto p = std::make_shared<TensorImpl>();
  p->storage = t.storage();
  p->shape = t.shape();
  p->strides = t.strides();
  p->offset = t.offset();
  p->dtype = t.dtype();
  Suspend suspend;
  return record(op, loc, Tensor(p), {t},
                wants_grad(t) ? BackwardFn([](const Tensor& g) { return std::vector<Tensor>{g}; }) : nullptr);
}
}  // namespace

DualLevel::DualLevel() {
  std::lock_guard<std::mutex> lock(g_mutex);
  const uint64_t open = g_level.load();
  if (open != 0)
    fail("DualLevel", "dual level ", open, " is open already; nested dual levels are not supported yet");
  level_ = ++g_last_level;
  g_level.store(level_);
}

DualLevel::~DualLevel() {
  std::vector<std::weak_ptr<TensorImpl>> duals;
  std::vector<std::weak_ptr<Node>> nodes;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_level.store(0);
    duals.swap(g_duals);
    nodes.swap(g_nodes);
    g_prune_at = kFirstPrune;
  }
  for (const auto& w : duals)
    if (auto p = w.lock(); p && p->tangent_level == level_) {
      p->tangent.reset();
      p->tangent_level = 0;
    }
  // a node's tangent may hold a graph leading back to the node itself: the cycle ends here
  for (const auto& w : nodes)
    if (auto n = w.lock(); n && n->tangent_level == level_) n->tangent.reset();
}

bool dual_level_open() { return g_level.load() != 0; }

Tensor make_dual(const Tensor& primal, const Tensor& tangent, Loc loc) {
  check_defined(primal, "make_dual", "the primal");
  check_defined(tangent, "make_dual", "the tangent");
  if (!dual_level_open()) fail("make_dual", "no dual level is open; open one with DualLevel (as fwAD.dual_level())");
  if (!is_computing_float(primal.dtype()))
    fail("make_dual", "expected a float32 or float64 primal, got ", dtype_name(primal.dtype()), " of shape ",
         primal.shape());
  if (tangent.shape() != primal.shape() || tangent.dtype() != primal.dtype())
    fail("make_dual", "expected a tangent of the primal's shape ", primal.shape(), " and dtype ",
         dtype_name(primal.dtype()), ", got shape ", tangent.shape(), " and dtype ", dtype_name(tangent.dtype()));
  Tensor out = alias("make_dual", primal, loc);
  forward_detail::set_tangent(out, tangent);
  return out;
}

UnpackedDual unpack_dual(const Tensor& t) {
  check_defined(t, "unpack_dual", "the tensor");
  Tensor tangent = forward_detail::tangent_of(t);
  if (!tangent.defined()) return {t, Tensor()};
  return {alias("unpack_dual", t, Loc::current()), tangent};
}

namespace forward_detail {

Tensor tangent_of(const Tensor& t) {
  if (!t.defined()) return Tensor();
  const TensorImpl* i = t.impl();
  if (!i->tangent || i->tangent_level != g_level.load(std::memory_order_relaxed)) return Tensor();
  return Tensor(i->tangent);
}

void set_tangent(const Tensor& out, const Tensor& tangent, bool on_node) {
  TensorImpl* i = out.impl();
  i->tangent = tangent.impl_ptr();
  i->tangent_level = g_level.load();
  // the output's node keeps the tangent too, for the backward that reads the output saved
  Node* node = on_node ? i->grad_fn.get() : nullptr;
  if (node) {
    node->tangent = i->tangent;
    node->tangent_level = i->tangent_level;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_duals.size() + g_nodes.size() >= g_prune_at) {
    std::erase_if(g_duals, [](const std::weak_ptr<TensorImpl>& w) { return w.expired(); });
    std::erase_if(g_nodes, [](const std::weak_ptr<Node>& w) { return w.expired(); });
    g_prune_at = std::max(kFirstPrune, 2 * (g_duals.size() + g_nodes.size()));
  }
  g_duals.push_back(out.impl_ptr());
  if (node) g_nodes.push_back(i->grad_fn);
}

void fail_unsupported(const char* op) { fail(op, "forward-mode differentiation (a tangent) is not supported yet"); }

void propagate(const char* op, const Tensor& out, const std::vector<Tensor>& inputs, const JvpRule& jvp) {
  if (!is_computing_float(out.dtype())) return;  // an integer or bool output has no tangent, as no gradient
  std::vector<Tensor> tangents(inputs.size());
  bool any = false;
  for (size_t i = 0; i < inputs.size(); i++) {
    tangents[i] = tangent_of(inputs[i]);
    any = any || tangents[i].defined();
  }
  if (!any) return;
  if (!jvp) fail_unsupported(op);
  Suspend suspend;
  Tensor t = jvp(tangents);
  if (!t.defined()) return;
  if (t.dtype() != out.dtype())
    fail(op, "its forward-mode rule gave a tangent of dtype ", dtype_name(t.dtype()), " for an output of dtype ",
         dtype_name(out.dtype()));
  if (t.shape() != out.shape()) t = t.expand(out.shape());  // a tangent broadcast over the output
  set_tangent(out, t, /*on_node=*/true);
}

void fail_backward_in_level(const char* op) {
  fail(op, "a plain backward pass through the tangents of the open dual level would drop them; pass "
       "create_graph=true (forward-over-reverse: the gradients then carry tangents), or close the level first");
}

Tensor add_tangents(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}

}  // namespace forward_detail

}  // namespace ember
