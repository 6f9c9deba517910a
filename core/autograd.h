// The reverse-mode autograd engine.
//
// Each recorded op creates one Node: its name, where in the user's code it was called,
// one Edge per input (the input's own Node, or the leaf tensor whose .grad it feeds),
// and a backward function that maps the gradient of the op's output to the gradients of
// its inputs. Backward functions capture what they need (detached input data, sizes),
// never the output tensor, so graphs hold no reference cycles.
//
// backward() sorts the graph topologically with an explicit stack and walks it once in
// reverse: no recursion, so a chain of 100,000 ops is fine. Gradients whose shape differs
// from their input's (broadcasting) are summed back to that shape here, in one place.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember {

struct Edge {
  std::shared_ptr<Node> fn;          // the input's producer, when it has one
  std::shared_ptr<TensorImpl> leaf;  // or the leaf that accumulates the gradient
  Shape shape;                       // the input's shape (gradients are summed to it)
  DType dtype = DType::Float32;
  bool needs_grad() const { return fn || leaf; }
};

// Gradient of the output -> gradient of each input (undefined where not needed).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// A tensor an op's backward reads, and its storage's version when the op ran: an in-place
// change between the forward and the backward would make the gradient silently wrong,
// so the engine checks every one before running the backward (as PyTorch does).
struct SavedVersion {
  std::shared_ptr<Storage> storage;
  uint64_t version = 0;
  Shape shape;
  DType dtype = DType::Float32;
};

struct Node {
  const char* name = "";
  Loc where;
  std::vector<Edge> inputs;
  BackwardFn backward;
  std::vector<SavedVersion> saved;
  Shape out_shape;
  bool released = false;  // backward already ran and freed what it had saved
  std::shared_ptr<GradHooks> hooks;  // the output tensor's hooks (Tensor::register_hook)
  std::weak_ptr<TensorImpl> retained;  // the output tensor, when it retains its gradient

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // tears long chains down iteratively

  static int64_t live_count();
};

// --- grad mode: when off, ops record nothing (like torch.no_grad()).
bool grad_enabled();
void set_grad_enabled(bool on);
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
 private:
  bool prev_;
};

// --- anomaly mode (like torch.autograd.detect_anomaly): the first op whose forward or
// backward produces NaN or Inf throws an Error naming the op, its input shapes and the
// source line that created it. Off by default; when off it costs one branch per op.
bool anomaly_enabled();
void set_anomaly_enabled(bool on);
class AnomalyGuard {
 public:
  explicit AnomalyGuard(bool on = true) : prev_(anomaly_enabled()) { set_anomaly_enabled(on); }
  ~AnomalyGuard() { set_anomaly_enabled(prev_); }
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;
 private:
  bool prev_;
};

// --- helpers for writing ops
// True when the op must record a node: grad mode is on and some input requires grad.
template <class... T>
bool wants_grad(const T&... inputs) {
  return grad_enabled() && (... || (inputs.defined() && inputs.requires_grad()));
}
bool wants_grad_list(const std::vector<Tensor>& inputs);

// Finishes an op: runs the anomaly check on its output and, when backward is given,
// records the node that makes `out` differentiable with respect to `inputs`. `saved`
// lists the tensors the backward reads (inputs, or the output itself): modifying one in
// place before the backward runs makes that backward an error naming the op.
Tensor record(const char* op, const Loc& loc, Tensor out, const std::vector<Tensor>& inputs,
              BackwardFn backward, const std::vector<Tensor>& saved = {});

// Runs backward from `root` with upstream gradient `grad`.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Sums a broadcast gradient back to `shape` (leading dims and size-1 dims).
Tensor sum_to(const Tensor& grad, const Shape& shape);

// "file.cpp:42 (function)"
std::string format_loc(const Loc& loc);

}  // namespace ember
