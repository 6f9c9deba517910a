// Optimizers over named parameters, with PyTorch's update rules (torch.optim, single
// parameter group). An optimizer keeps a per-parameter state - its step count and named
// slot tensors such as "exp_avg" - that checkpoints save and restore by parameter name.
//
//   SGD    g = grad + wd*p;  buf = g (first step) | momentum*buf + (1-dampening)*g
//          d = nesterov ? g + momentum*buf : buf;  p -= lr*d
//   Adam   g = grad + wd*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
//          vhat = amsgrad ? (vmax = max(vmax, v)) : v
//          p -= lr/(1-b1^t) * m / (sqrt(vhat)/sqrt(1-b2^t) + eps)
//   AdamW  p *= 1 - lr*wd first (decoupled decay), then Adam with wd = 0
//
// Updates are elementwise, so results never depend on the thread count.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember::optim {

// Parameters with their names, as Module::named_parameters() gives them.
using NamedParams = std::vector<std::pair<std::string, Tensor>>;

// The most steps a parameter's state counts (2^62): load_state refuses more, so the count
// cannot overflow however long training goes on.
constexpr int64_t kMaxStep = int64_t(1) << 62;

// What a checkpoint stores of one parameter's optimizer state.
struct ParamState {
  int64_t step = 0;  // updates applied to this parameter
  std::map<std::string, Tensor> slots;  // e.g. exp_avg, exp_avg_sq, max_exp_avg_sq, momentum_buffer
};

// The whole optimizer state: its kind, hyper-parameters, and per-parameter state
// (parameters that never received an update have none, as in PyTorch).
struct OptimizerState {
  std::string kind;  // "SGD", "Adam" or "AdamW"
  std::map<std::string, double> hyper;  // lr, beta1, beta2, eps, weight_decay, ... (bools as 0/1)
  std::map<std::string, ParamState> params;  // by parameter name
};

// The base of the optimizers: a fixed list of named parameters (one group; PyTorch's
// parameter groups and per-group options do not exist here) and their state.
class Optimizer {
 public:
  // Checks the parameters; op (the optimizer's name) prefixes any error. Error when the
  // list is empty, a name is empty, contains '/' or appears twice, or a parameter is
  // undefined, not float32/float64, not a leaf that requires grad, not contiguous, or
  // shares memory with another (PyTorch accepts non-contiguous parameters).
  Optimizer(NamedParams params, const char* op);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter that has a gradient. Error, before anything
  // changes, when a hyper-parameter set through options() is out of range, a parameter
  // has counted kMaxStep steps, or its state is of another dtype (the parameter was
  // converted with Module::to after the first step).
  virtual void step() = 0;
  void zero_grad();  // drops every parameter's gradient

  virtual std::string kind() const = 0;  // "SGD", "Adam" or "AdamW"
  // The learning rate; set_lr throws Error when lr is negative or NaN.
  ///@{
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;
  ///@}
  // Hyper-parameters by name, flags as 0 or 1; set_hyper throws Error on an unknown name,
  // a value out of range, or a flag other than 0 or 1, and then changes nothing.
  ///@{
  virtual std::map<std::string, double> hyper() const = 0;
  virtual void set_hyper(const std::string& name, double value) = 0;
  ///@}

  const NamedParams& named_parameters() const { return params_; }  // the parameters, as given

  // The state, as tensors owned by the optimizer (save them, do not modify them).
  OptimizerState state() const;
  // Replaces the state - hyper-parameters included, as PyTorch's load_state_dict does -
  // after checking everything (kind, hyper-parameter names and values, every parameter
  // name, slot names, shapes and dtypes, step counts in [1, kMaxStep], slot values finite
  // and second moments not negative); on any mismatch throws Error and changes nothing.
  // The slots are copied.
  void load_state(const OptimizerState& state);

 protected:
  // The slot names this optimizer keeps for a parameter that has been stepped.
  virtual std::vector<std::string> slot_names() const = 0;
  ParamState& state_of(size_t i) { return state_[i]; }  // indexed like params_

  NamedParams params_;  // the parameters, in the order given
  std::vector<ParamState> state_;  // each parameter's state, indexed like params_
};

// SGD's hyper-parameters (formulas in optimizer.h); every number must be >= 0.
struct SGDOptions {
  double lr = 1e-2;  // learning rate
  double momentum = 0.0;  // 0: no momentum buffer
  double dampening = 0.0;  // scales the gradient's share of the momentum buffer by 1 - dampening
  double weight_decay = 0.0;  // L2 penalty added to the gradient
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
};

// Stochastic gradient descent with optional momentum, dampening, Nesterov momentum and
// L2 weight decay (torch.optim.SGD); its slot is "momentum_buffer" when momentum > 0.
class SGD : public Optimizer {
 public:
  // Error for the parameters as Optimizer, or for options out of range (a negative or
  // NaN number, nesterov without momentum > 0 and dampening 0).
  SGD(NamedParams params, SGDOptions options = {});
  void step() override;
  std::string kind() const override { return "SGD"; }  // "SGD"
  double lr() const override { return opt_.lr; }  // options().lr
  void set_lr(double lr) override;  // sets options().lr; Error when lr is negative or NaN
  std::map<std::string, double> hyper() const override;  // lr, momentum, dampening, weight_decay, nesterov
  void set_hyper(const std::string& name, double value) override;  // see Optimizer::set_hyper
  // The options, changeable between steps (checked by the next step()).
  ///@{
  SGDOptions& options() { return opt_; }
  const SGDOptions& options() const { return opt_; }
  ///@}

 protected:
  std::vector<std::string> slot_names() const override;

 private:
  SGDOptions opt_;
};

// Adam's and AdamW's hyper-parameters (formulas in optimizer.h). lr, eps and weight_decay
// must be >= 0, the betas in [0, 1). Note that weight_decay defaults to 0 here even for
// AdamW: AdamW's 1e-2 is only the default of its whole options argument.
struct AdamOptions {
  double lr = 1e-3;  // learning rate
  double beta1 = 0.9;  // decay of the first-moment average
  double beta2 = 0.999;  // decay of the second-moment average
  double eps = 1e-8;  // added to the denominator
  double weight_decay = 0.0;  // Adam: L2 added to the gradient; AdamW: decoupled
  bool amsgrad = false;  // keep and use the maximum of the second moments (slot max_exp_avg_sq)
};

// Adam (torch.optim.Adam, with amsgrad); its slots are "exp_avg", "exp_avg_sq" and, with
// amsgrad, "max_exp_avg_sq".
class Adam : public Optimizer {
 public:
  // Error for the parameters as Optimizer, or for options out of range.
  Adam(NamedParams params, AdamOptions options = {});
  void step() override;
  std::string kind() const override { return "Adam"; }  // "Adam"
  double lr() const override { return opt_.lr; }  // options().lr
  void set_lr(double lr) override;  // sets options().lr; Error when lr is negative or NaN
  std::map<std::string, double> hyper() const override;  // lr, beta1, beta2, eps, weight_decay, amsgrad
  // See Optimizer::set_hyper; amsgrad cannot change once a parameter has been stepped.
  void set_hyper(const std::string& name, double value) override;
  // The options, changeable between steps (checked by the next step(); do not switch
  // amsgrad after the first step - use set_hyper, which refuses it).
  ///@{
  AdamOptions& options() { return opt_; }
  const AdamOptions& options() const { return opt_; }
  ///@}

 protected:
  // Adam, or AdamW when decoupled.
  Adam(NamedParams params, AdamOptions options, bool decoupled);
  std::vector<std::string> slot_names() const override;

 private:
  AdamOptions opt_;
  bool decoupled_ = false;
};

// Adam with decoupled weight decay (Loshchilov & Hutter); PyTorch's default decay 1e-2.
class AdamW : public Adam {
 public:
  // As Adam's. The default options have weight_decay 1e-2, but options given without
  // weight_decay have 0 (AdamOptions' default), unlike torch.optim.AdamW(lr=...).
  AdamW(NamedParams params, AdamOptions options = {.lr = 1e-3, .weight_decay = 1e-2});
  std::string kind() const override { return "AdamW"; }  // "AdamW"
};

// Scales every gradient by max_norm / (total_norm + 1e-6) when the global norm (over
// all gradients together, of the given order; inf for the max norm) exceeds max_norm.
// Returns the norm before clipping. Parameters without a gradient are skipped. A NaN norm
// leaves the gradients as they are (PyTorch would scale them by NaN). Error when max_norm
// is negative or NaN, norm_type is not positive, a parameter is undefined or given twice
// (or shares memory with another), two gradients share memory, or a gradient is not
// float32/float64.
///@{
double clip_grad_norm(const NamedParams& params, double max_norm, double norm_type = 2.0);
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);
///@}

}  // namespace ember::optim
