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

using NamedParams = std::vector<std::pair<std::string, Tensor>>;

// The most steps a parameter's state counts (2^62): load_state refuses more, so the count
// cannot overflow however long training goes on.
constexpr int64_t kMaxStep = int64_t(1) << 62;

// What a checkpoint stores of one parameter's optimizer state.
struct ParamState {
  int64_t step = 0;                     // updates applied to this parameter
  std::map<std::string, Tensor> slots;  // e.g. exp_avg, exp_avg_sq, max_exp_avg_sq, momentum_buffer
};

// The whole optimizer state: its kind, hyper-parameters, and per-parameter state
// (parameters that never received an update have none, as in PyTorch).
struct OptimizerState {
  std::string kind;                         // "SGD", "Adam", "AdamW"
  std::map<std::string, double> hyper;      // lr, betas, eps, weight_decay, ... (bools as 0/1)
  std::map<std::string, ParamState> params;  // by parameter name
};

class Optimizer {
 public:
  // Checks the parameters; op (the optimizer's name) prefixes any error.
  Optimizer(NamedParams params, const char* op);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter that has a gradient.
  virtual void step() = 0;
  void zero_grad();  // drops every parameter's gradient

  virtual std::string kind() const = 0;
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;
  // Hyper-parameters by name; set_hyper checks the name and the value's range.
  virtual std::map<std::string, double> hyper() const = 0;
  virtual void set_hyper(const std::string& name, double value) = 0;

  const NamedParams& named_parameters() const { return params_; }

  // The state, as tensors owned by the optimizer (save them, do not modify them).
  OptimizerState state() const;
  // Replaces the state - hyper-parameters included, as PyTorch's load_state_dict does -
  // after checking everything (kind, hyper-parameter names and values, every parameter
  // name, slot names, shapes and dtypes); on any mismatch throws and changes nothing.
  void load_state(const OptimizerState& state);

 protected:
  // The slot names this optimizer keeps for a parameter that has been stepped.
  virtual std::vector<std::string> slot_names() const = 0;
  ParamState& state_of(size_t i) { return state_[i]; }  // indexed like params_

  NamedParams params_;
  std::vector<ParamState> state_;
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
};

class SGD : public Optimizer {
 public:
  SGD(NamedParams params, SGDOptions options = {});
  void step() override;
  std::string kind() const override { return "SGD"; }
  double lr() const override { return opt_.lr; }
  void set_lr(double lr) override;
  std::map<std::string, double> hyper() const override;
  void set_hyper(const std::string& name, double value) override;
  SGDOptions& options() { return opt_; }  // changeable between steps
  const SGDOptions& options() const { return opt_; }

 protected:
  std::vector<std::string> slot_names() const override;

 private:
  SGDOptions opt_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient; AdamW: decoupled
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  Adam(NamedParams params, AdamOptions options = {});
  void step() override;
  std::string kind() const override { return "Adam"; }
  double lr() const override { return opt_.lr; }
  void set_lr(double lr) override;
  std::map<std::string, double> hyper() const override;
  void set_hyper(const std::string& name, double value) override;
  AdamOptions& options() { return opt_; }
  const AdamOptions& options() const { return opt_; }

 protected:
  Adam(NamedParams params, AdamOptions options, bool decoupled);
  std::vector<std::string> slot_names() const override;

 private:
  AdamOptions opt_;
  bool decoupled_ = false;
};

// Adam with decoupled weight decay (Loshchilov & Hutter); PyTorch's default decay 1e-2.
class AdamW : public Adam {
 public:
  AdamW(NamedParams params, AdamOptions options = {.lr = 1e-3, .weight_decay = 1e-2});
  std::string kind() const override { return "AdamW"; }
};

// Scales every gradient by max_norm / (total_norm + 1e-6) when the global norm (over
// all gradients together, of the given order; inf for the max norm) exceeds max_norm.
// Returns the norm before clipping. Parameters without a gradient are skipped.
double clip_grad_norm(const NamedParams& params, double max_norm, double norm_type = 2.0);
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace ember::optim
