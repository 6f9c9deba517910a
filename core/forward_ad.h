// Forward-mode differentiation, as torch.autograd.forward_ad: dual tensors carry a
// tangent v next to their values, and every op carries it on to its output as J v (the
// Jacobian-vector product), in the same pass as the values.
//
//   DualLevel level;                         // with fwAD.dual_level():
//   Tensor x = make_dual(primal, v);         //   x = fwAD.make_dual(primal, v)
//   Tensor y = tanh(matmul(x, w));
//   Tensor jv = unpack_dual(y).tangent;      //   d/dt f(primal + t v) at t = 0
//
// Where a tangent lives: in the TensorImpl of the dual tensor (TensorImpl::tangent), tagged
// with the level it belongs to; when the level closes, every tangent set in it vanishes.
// How it moves: each op passes record() a rule (a JvpRule) computing its output's tangent
// from its inputs' with ops; record calls it only while a level is open and some input
// has a tangent. With no level open an op pays one relaxed atomic load, nothing else.
// A tangent reaching an op with no rule yet is an Error naming the op, never a silently
// dropped tangent. Tangents are ordinary tensors: computed with grad mode as it is, they
// can be differentiated backward, and a tangent may itself require grad. The other way
// round, a backward with create_graph inside the level runs every backward formula as
// ops, so the gradients carry tangents: the tangent of a gradient is H v (forward over
// reverse; core/func.h's hvp). A plain backward through an op a tangent went through is
// refused while the level is open, since its kernels would drop the tangents.
//
// One level at a time for now (a nested DualLevel is an Error). The level is one for the
// whole process, as PyTorch's; open and close it on one thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

#include "core/autograd.h"

namespace ember {

// Opens a dual level for its lifetime (fwAD.dual_level()): inside it make_dual attaches
// tangents and ops propagate them; when it closes, every tangent set in it vanishes
// (unpack_dual gives an undefined tangent for them afterwards).
class DualLevel {
 public:
  // Opens the level; an Error when one is open already (nested levels are not supported yet).
  DualLevel();
  ~DualLevel();  // Closes the level, dropping its tangents.
  DualLevel(const DualLevel&) = delete;
  DualLevel& operator=(const DualLevel&) = delete;
  uint64_t level() const { return level_; }  // This level's number (1 for the process's first).

 private:
  uint64_t level_;
};

// Whether a dual level is open now.
bool dual_level_open();

// A view of primal (same storage, differentiable backward as primal is) carrying tangent,
// as fwAD.make_dual. The tangent is kept as it is (not copied; it may require grad). An
// Error when no level is open, either is undefined, the primal is not float32/float64, or
// the tangent's shape or dtype differs from the primal's.
Tensor make_dual(const Tensor& primal, const Tensor& tangent, Loc loc = Loc::current());

// A tensor taken apart, as fwAD.unpack_dual's result.
struct UnpackedDual {
  Tensor primal;  // a view of the tensor without its tangent (differentiable backward)
  Tensor tangent;  // its tangent at the open level; undefined when it has none
};
// The primal and tangent of t; the tangent is undefined when t has none, or no level is
// open. An Error on an undefined t.
UnpackedDual unpack_dual(const Tensor& t);

namespace forward_detail {
// The open level's number, 0 when none (relaxed loads: the ops' fast path).
extern std::atomic<uint64_t> g_level;
// Set on this thread while a rule runs (and a Function's forward): the ops then called
// compute from primals and tangents and propagate nothing themselves.
extern thread_local constinit bool t_suspended;

// Whether ops must look for tangents: a level is open and no rule is running here.
inline bool active() { return g_level.load(std::memory_order_relaxed) != 0 && !t_suspended; }

// t's tangent at the open level (undefined when none, or t is undefined).
Tensor tangent_of(const Tensor& t);
// Sets out's tangent at the open level (tangent of out's shape and dtype); on_node: also
// on out's node (an op's output), whose plain backward is then refused while the level is
// open (its kernels would drop the tangents), and whose saved output carries the tangent
// under create_graph. make_dual's identity node needs neither.
void set_tangent(const Tensor& out, const Tensor& tangent, bool on_node = false);
// Gives out its tangent from the inputs' through jvp, or fails naming op when some input
// has a tangent and there is no rule (record calls it when active()).
void propagate(const char* op, const Tensor& out, const std::vector<Tensor>& inputs, const JvpRule& jvp);
// "<op>: forward-mode differentiation (a tangent) is not supported yet".
[[noreturn]] void fail_unsupported(const char* op);
// The Error of a backward run through a node of the open level (Node::tangent_level), or
// from upstream gradients that carry tangents.
[[noreturn]] void fail_backward_in_level(const char* op);

// Suspends propagation on this thread for a scope.
class Suspend {
 public:
  Suspend() : prev_(t_suspended) { t_suspended = true; }
  ~Suspend() { t_suspended = prev_; }
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  bool prev_;
};

// a + b where either may be undefined (zero); undefined when both are.
Tensor add_tangents(const Tensor& a, const Tensor& b);
}  // namespace forward_detail

}  // namespace ember
