// The reverse-mode autograd engine.
//
// Each recorded op creates one Node: its name, where in the user's code it was called,
// one Edge per input (the input's own Node, or the leaf tensor whose .grad it feeds),
// and a backward function that maps the gradient of the op's output to the gradients of
// its inputs. Backward functions capture what they need as SavedTensors (the data, and
// how to reattach it to the graph), never the output tensor itself; edges and saved
// tensors refer to leaves weakly. So graphs hold no reference cycles, not even a
// gradient with a graph stored in the .grad of a leaf that graph reads.
//
// The engine sorts the graph topologically with an explicit stack and walks it once in
// reverse: no recursion, so a chain of 100,000 ops is fine. Gradients whose shape differs
// from their input's (broadcasting) are summed back to that shape here, in one place.
//
// Backward functions are written with ops. A plain backward runs them with grad mode off,
// so they record nothing and fused kernels run as they are. With create_graph they run
// with grad mode on, their saved tensors reattached to the graph: the gradients they
// return are recorded in turn and can be differentiated again (double backward).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace ember {

// Where a node sends the gradient of one of its inputs.
struct Edge {
  std::shared_ptr<Node> fn;  // The input's producer, when it has one.
  // Or the leaf that accumulates the gradient (a leaf nobody holds any more gets none).
  std::weak_ptr<TensorImpl> leaf;
  Shape shape;  // The input's shape (gradients are summed to it).
  DType dtype = DType::Float32;  // The input's dtype.
  // Whether a gradient sent here reaches anything: a producer, or a leaf still alive.
  bool needs_grad() const { return fn || !leaf.expired(); }
};

// A tensor a backward function reads. It keeps the data, and what reattaches the data to
// the graph when the backward is itself recorded (create_graph): the node that produced
// the tensor, or the leaf it is (weakly), or - for the op's own output, which a node must
// not own - the node being differentiated, found when the backward runs.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output = false);  // NOLINT: implicit on purpose
  bool defined() const { return data_.defined(); }  // Whether a tensor was saved.
  // The data, when grad mode is off (a plain backward); under create_graph the same
  // values attached to the graph, so what is computed from them is differentiable, and
  // carrying the tangent the tensor had in the dual level still open (forward-over-reverse).
  Tensor get() const;
  // The data, never attached: for what no gradient flows through (masks, indices, shapes).
  const Tensor& data() const { return data_; }

 private:
  Tensor data_;
  std::shared_ptr<Node> fn_;
  std::weak_ptr<TensorImpl> leaf_;
  std::shared_ptr<TensorImpl> tangent_;  // an input's tangent when saved (outputs': the node's)
  uint64_t tangent_level_ = 0;
  bool output_ = false;
};

// Gradient of the output -> gradient of each input (undefined where not needed).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// A tensor an op's backward reads, and its storage's version when the op ran: an in-place
// change between the forward and the backward would make the gradient silently wrong,
// so the engine checks every one before running the backward (as PyTorch does).
struct SavedVersion {
  std::shared_ptr<Storage> storage;  // The saved tensor's storage.
  uint64_t version = 0;  // Its version when the op ran.
  // The tensor's shape and dtype, for the error message.
  ///@{
  Shape shape;
  DType dtype = DType::Float32;
  ///@}
};

// One recorded op in the graph (a tensor's grad_fn).
struct Node {
  const char* name = "";  // The op's name, as errors and anomaly mode report it.
  Loc where;  // Where in the user's code the op was called.
  std::vector<Edge> inputs;  // One edge per input of the op.
  BackwardFn backward;  // The gradient of the output to the gradients of the inputs.
  std::vector<SavedVersion> saved;  // The saved tensors checked before backward runs.
  Shape out_shape;  // The output's shape.
  bool released = false;  // backward already ran and freed what it had saved
  std::shared_ptr<GradHooks> hooks;  // the output tensor's hooks (Tensor::register_hook)
  std::weak_ptr<TensorImpl> retained;  // the output tensor, when it retains its gradient
  // Forward mode: the dual level whose tangent passed through this op (0: none), and the
  // output's tangent at it, which the output saved for backward carries back. While that
  // level is open the node's backward runs only under create_graph, whose ops carry
  // tangents (forward-over-reverse); a plain backward, whose kernels would drop them, is
  // refused. The tangent's own graph may lead back to this node: the tangent is dropped
  // when the node's backward has run (without retain_graph) or its level closes, so a
  // graph that is never run back is freed when the level closes.
  uint64_t tangent_level = 0;
  std::shared_ptr<TensorImpl> tangent;  // the output's tangent at tangent_level (cleared when it closes)
  // What tools that inspect the graph read (draw_graph, core/graph_draw.h); none is set
  // by record(), so recording costs nothing more:
  // the dotted name of the module whose forward ran the op (nn::GraphScopes), or null;
  std::shared_ptr<const std::string> scope;
  // the L2 norm of the gradient that reached the output in the last backward run under a
  // GradNormRecorder (-1: none reached it there);
  double grad_norm = -1;
  // the dim along which saved[0] holds probabilities (a softmax's output, attention's
  // weights), dense from its storage's start; -1 when it does not (set by those ops).
  int probs_dim = -1;
  // whether the op ran under Autocast (core/autocast.h): its backward's products run so too
  bool autocast = false;

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // tears long chains down iteratively

  static int64_t live_count();  // Nodes alive now (tests check that graphs are freed).
};

// --- grad mode: when off, ops record nothing (like torch.no_grad()). It is per thread and
// on by default, as in PyTorch.
///@{
bool grad_enabled();
void set_grad_enabled(bool on);
///@}
// Sets grad mode for a scope (torch.set_grad_enabled); GradModeGuard(true) is enable_grad.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool on) : prev_(grad_enabled()) { set_grad_enabled(on); }  // Sets grad mode to on.
  ~GradModeGuard() { set_grad_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;
 private:
  bool prev_;
};
// Turns grad mode off for a scope, as torch.no_grad().
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};


// --- anomaly mode (like torch.autograd.detect_anomaly): the first op whose forward or
// backward produces NaN or Inf throws an Error naming the op, its input shapes and the
// source line that created it. Off by default; when off it costs one branch per op.
// Unlike grad mode, anomaly mode is one switch for the whole process.
///@{
bool anomaly_enabled();
void set_anomaly_enabled(bool on);
///@}
// Sets anomaly mode for a scope, then restores the previous setting (as detect_anomaly).
class AnomalyGuard {
 public:
  // Turns anomaly mode on, or off when on is false.
  explicit AnomalyGuard(bool on = true) : prev_(anomaly_enabled()) { set_anomaly_enabled(on); }
  ~AnomalyGuard() { set_anomaly_enabled(prev_); }
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;
 private:
  bool prev_;
};

// While a GradNormRecorder lives on a thread, every backward pass (backward() or grad())
// that thread runs stores in each node it evaluates the L2 norm of the gradient that
// reached the node's output, after the output's hooks (Node::grad_norm), so that
// draw_graph can show where gradients grow or vanish. Off, the engine pays one branch per
// node; on, one pass over each gradient. Recorders nest; the outermost ends recording.
class GradNormRecorder {
 public:
  GradNormRecorder();  // Starts recording on this thread.
  ~GradNormRecorder();  // Restores the setting before.
  GradNormRecorder(const GradNormRecorder&) = delete;
  GradNormRecorder& operator=(const GradNormRecorder&) = delete;
  static bool active();  // Whether norms are recorded on this thread now.

 private:
  bool prev_;
};

// --- helpers for writing ops
// True when the op must record a node: grad mode is on and some input requires grad.
template <class... T>
bool wants_grad(const T&... inputs) {
  return grad_enabled() && (... || (inputs.defined() && inputs.requires_grad()));
}
bool wants_grad_list(const std::vector<Tensor>& inputs);  // wants_grad for a list of inputs.

// An op's forward-mode rule (core/forward_ad.h): the tangents of its inputs, in the order
// of record's `inputs` (undefined where an input has none; at least one is defined), to
// the tangent of its output (undefined: zero; of a shape that broadcasts to the output's).
// Written with ops on the primals (as captured by the op) and the tangents, so that a
// tangent can itself be differentiated backward. It refers to a callable without owning
// or copying it (nothing is allocated): record calls it at once, or not at all.
class JvpRule {
 public:
  JvpRule() = default;  // no rule: a tangent reaching the op is an Error naming it
  // Refers to f, which must outlive the call of record it is passed to.
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, JvpRule>)
  JvpRule(const F& f)  // NOLINT: implicit on purpose
      : fn_(&f), call_([](const void* fn, const std::vector<Tensor>& tangents) {
          return (*static_cast<const F*>(fn))(tangents);
        }) {}
  explicit operator bool() const { return call_ != nullptr; }  // Whether a rule is given.
  // The output's tangent from the inputs' tangents.
  Tensor operator()(const std::vector<Tensor>& tangents) const { return call_(fn_, tangents); }

 private:
  const void* fn_ = nullptr;
  Tensor (*call_)(const void*, const std::vector<Tensor>&) = nullptr;
};

// Finishes an op: runs the anomaly check on its output and, when backward is given,
// records the node that makes `out` differentiable with respect to `inputs`. `saved`
// lists the tensors the backward reads (inputs, or the output itself): modifying one in
// place before the backward runs makes that backward an error naming the op. While a
// dual level is open and some input has a tangent, `jvp` gives the output's tangent (no
// rule: an Error naming the op); otherwise it is not called, and costs one relaxed load.
Tensor record(const char* op, const Loc& loc, Tensor out, const std::vector<Tensor>& inputs,
              BackwardFn backward, const std::vector<Tensor>& saved = {}, JvpRule jvp = {});

// Runs backward from `roots`, each with its upstream gradient (undefined: ones, for a
// one-element root), accumulating into the .grad of every leaf reached.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
                  bool create_graph);

// Runs fn once the backward pass now running (the one whose hook calls this) has
// evaluated every node and completed every leaf, before backward() returns; callbacks run
// in the order queued. PyTorch's Variable._execution_engine.queue_callback.
void queue_callback(std::function<void()> fn);

// --- torch.autograd.grad
// Options of grad, as the keyword arguments of torch.autograd.grad.
struct GradOptions {
  std::optional<bool> retain_graph = std::nullopt;  // keep the graph for another backward; default: create_graph
  bool create_graph = false;  // record the backward, so the gradients can be differentiated
  // An input the outputs do not depend on gets an undefined gradient instead of an error.
  bool allow_unused = false;
};

// The gradients of `outputs` (weighted by `grad_outputs`, ones for one-element outputs
// when omitted) with respect to `inputs`, leaves or not, returned in order; no .grad is
// touched. Hooks of the tensors on the way run; post-accumulate hooks do not. Only the
// part of the graph between them is evaluated. An Error when outputs or inputs is empty,
// an input is undefined or does not require grad, an output has no graph, a grad_output's
// shape or dtype differs from its output's, an output of more than one element has no
// grad_output, or an input is unused without allow_unused.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, const GradOptions& options = {});

// For a fused op's backward under create_graph: the gradients of composed(inputs) with
// respect to each input that requires grad (undefined for the others) for upstream g,
// recorded. The fused op is differentiated twice as its composition of primitive ops is.
std::vector<Tensor> backward_of_composition(const std::function<Tensor(const std::vector<Tensor>&)>& composed,
                                            const std::vector<Tensor>& inputs, const Tensor& g);

// Sums a broadcast gradient back to `shape` (leading dims and size-1 dims).
Tensor sum_to(const Tensor& grad, const Shape& shape);

// "file.cpp:42 (function)"
std::string format_loc(const Loc& loc);

// Where the current call came from in a program that drives ember from another language
// (the Python module sets one per call): while a CallerLoc lives on a thread, the ops that
// thread runs record its location in place of the C++ one, so anomaly reports and
// backward errors name the caller's line in that language. The strings must outlive every
// node recorded with them.
class CallerLoc {
 public:
  explicit CallerLoc(const Loc& loc);  // Sets loc for this thread, until destroyed.
  ~CallerLoc();  // Restores the location before.
  CallerLoc(const CallerLoc&) = delete;
  CallerLoc& operator=(const CallerLoc&) = delete;
  static const Loc* current();  // The innermost on this thread, or null.
  // A function asked for the location when no CallerLoc is set (null: none is asked; an
  // empty Loc from it: the C++ location stands).
  static void set_fallback(Loc (*fallback)());

 private:
  Loc loc_;
  const Loc* prev_;
};

}  // namespace ember
