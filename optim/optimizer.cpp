// Optimizers: PyTorch's single-tensor update rules, applied in place to each parameter's
// data outside autograd. See optimizer.h for the formulas.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/kernels/dispatch.h"
#include "core/parallel.h"

namespace ember::optim {

namespace {

bool is_float(DType t) { return t == kFloat32 || t == kFloat64; }

void check_range(const char* op, const char* name, double v, double lo, double hi, bool hi_open = false) {
  if (!(v >= lo) || (hi_open ? !(v < hi) : !(v <= hi)))
    fail(op, name, " must be in [", lo, ", ", hi, hi_open ? ")" : "]", ", got ", v);
}

// Where a bad value in a slot would lead: why the values cannot come from steps (a
// non-finite value, or a negative one where second_moment), or null.
const char* bad_slot_values(const Tensor& t, bool second_moment) {
  Tensor c = t.contiguous();
  const int64_t n = c.numel();
  auto scan = [&](const auto* x) -> const char* {
    for (int64_t i = 0; i < n; i++) {
      if (!std::isfinite(x[i])) return "holds a value that is not finite";
      if (second_moment && x[i] < 0) return "holds a negative value (a second moment is never negative)";
    }
    return nullptr;
  };
  return c.dtype() == kFloat32 ? scan(c.data<float>()) : scan(c.data<double>());
}

// A slot made for a parameter of another dtype (the parameter was converted since, as
// Module::to does) is refused rather than read as the new type.
void check_slot_dtype(const char* op, const std::string& name, const Tensor& p, const std::string& slot,
                      const Tensor& t) {
  if (t.dtype() != p.dtype())
    fail(op, "parameter '", name, "' is ", dtype_name(p.dtype()), " but its state '", slot, "' is ",
         dtype_name(t.dtype()), " (the parameter was converted after the optimizer's first step); build a new ",
         "optimizer, or load a state of the parameter's dtype");
}

// Before a step changes anything: every parameter about to be updated can count one
// more step, and its slots are of its dtype.
void check_before_step(const char* op, const NamedParams& params, const std::vector<ParamState>& state) {
  for (size_t i = 0; i < params.size(); i++) {
    const auto& [name, p] = params[i];
    if (!p.grad().defined()) continue;
    if (state[i].step >= kMaxStep) fail(op, "parameter '", name, "' has taken ", state[i].step, " steps, the most counted");
    for (auto& [slot, t] : state[i].slots) check_slot_dtype(op, name, p, slot, t);
  }
}

// The first pair (i, j), i < j, of tensors that may touch the same memory (one storage,
// overlapping spans), or nullopt. Only tensors of one storage are compared.
std::optional<std::pair<size_t, size_t>> sharing_memory(const std::vector<Tensor>& ts) {
  auto last = [](const Tensor& t) {  // the furthest element t reaches (strides are >= 0)
    int64_t l = t.offset();
    for (int64_t d = 0; d < t.dim(); d++) l += (t.size(d) - 1) * t.stride(d);
    return l;
  };
  std::map<const Storage*, std::vector<size_t>> by_storage;
  for (size_t i = 0; i < ts.size(); i++)
    if (ts[i].numel() > 0) by_storage[ts[i].storage().get()].push_back(i);
  for (const auto& [storage, idx] : by_storage)
    for (size_t a = 0; a < idx.size(); a++)
      for (size_t b = 0; b < a; b++) {
        const Tensor &x = ts[idx[b]], &y = ts[idx[a]];
        if (x.offset() <= last(y) && y.offset() <= last(x)) return std::pair{idx[b], idx[a]};
      }
  return std::nullopt;
}

// Calls f(begin, end) over a parameter's elements, in parallel for large tensors.
template <class F>
void over(int64_t n, F&& f) {
  parallel_for(n, cost::kOptimizerUpdate, f);
}

}  // namespace

// ---------------------------------------------------------------- Optimizer

Optimizer::Optimizer(NamedParams params, const char* op) : params_(std::move(params)), state_(params_.size()) {
  if (params_.empty()) fail(op, "got no parameters to optimize");
  std::set<std::string> seen;
  for (auto& [name, p] : params_) {
    if (name.empty() || name.find('/') != std::string::npos)
      fail(op, "parameter names must be non-empty and contain no '/', got '", name, "'");
    if (!seen.insert(name).second) fail(op, "the parameter name '", name, "' appears twice");
    if (!p.defined()) fail_undefined(p, op, cat_str("parameter '", name, "'").c_str());
    if (!is_float(p.dtype()))
      fail(op, "parameter '", name, "' must be float32 or float64, got ", dtype_name(p.dtype()));
    if (!p.is_leaf() || !p.requires_grad())
      fail(op, "parameter '", name, "' must be a leaf tensor that requires grad");
    if (!p.is_contiguous()) fail(op, "parameter '", name, "' must be contiguous, got strides ", shape_str(p.strides()));
  }
  // one tensor (or memory shared by two) under two names would be updated twice a step
  std::vector<Tensor> ts;
  for (auto& [name, p] : params_) ts.push_back(p);
  if (auto pair = sharing_memory(ts)) {
    const auto [j, i] = *pair;
    fail(op, "the parameters '", params_[j].first, "' and '", params_[i].first, "' are ",
         ts[j].impl() == ts[i].impl() ? "the same tensor" : "views of the same memory",
         ": each tensor must be given once (it would be updated twice a step)");
  }
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
}

OptimizerState Optimizer::state() const {
  OptimizerState s;
  s.kind = kind();
  s.hyper = hyper();
  for (size_t i = 0; i < params_.size(); i++)
    if (state_[i].step > 0) s.params[params_[i].first] = state_[i];
  return s;
}

void Optimizer::load_state(const OptimizerState& s) {
  const char* op = "Optimizer::load_state";
  if (s.kind != kind()) fail(op, "the state is of a ", s.kind, " optimizer, this is ", kind());
  const std::map<std::string, double> old_hyper = hyper();
  for (auto& [k, v] : s.hyper)
    if (!old_hyper.count(k)) fail(op, "'", k, "' is not a hyper-parameter of ", kind());
  for (auto& [k, v] : old_hyper)
    if (!s.hyper.count(k)) fail(op, "the state lacks the hyper-parameter '", k, "'");

  // The hyper-parameters decide which slots a parameter has (amsgrad), so they are set
  // first, on an optimizer without state; any refusal puts everything back.
  std::vector<ParamState> old_state = std::move(state_);
  state_.assign(params_.size(), ParamState{});
  try {
    for (auto& [k, v] : s.hyper) set_hyper(k, v);
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < params_.size(); i++) index[params_[i].first] = i;
    std::vector<std::string> want = slot_names();
    std::set<std::string> want_set(want.begin(), want.end());
    for (auto& [name, ps] : s.params) {
      auto it = index.find(name);
      if (it == index.end()) fail(op, "state for '", name, "', which is not a parameter of this optimizer");
      const Tensor& p = params_[it->second].second;
      if (ps.step < 1 || ps.step > kMaxStep)
        fail(op, "parameter '", name, "': step must be in [1, 2^62], got ", ps.step);
      std::set<std::string> have;
      for (auto& [slot, t] : ps.slots) have.insert(slot);
      if (have != want_set) {
        std::string h, w;
        for (auto& x : have) h += (h.empty() ? "" : ", ") + x;
        for (auto& x : want_set) w += (w.empty() ? "" : ", ") + x;
        fail(op, "parameter '", name, "': expected slots {", w, "}, got {", h, "}");
      }
      for (auto& [slot, t] : ps.slots)
        if (!t.defined() || t.shape() != p.shape() || t.dtype() != p.dtype())
          fail(op, "parameter '", name, "' slot '", slot, "': expected ", dtype_name(p.dtype()), shape_str(p.shape()),
               ", got ", t.defined() ? cat_str(dtype_name(t.dtype()), shape_str(t.shape())) : std::string("undefined"));
      // what a step can leave in a slot: finite values, and second moments that are not negative
      for (auto& [slot, t] : ps.slots) {
        const bool second_moment = slot == "exp_avg_sq" || slot == "max_exp_avg_sq";
        if (const char* why = bad_slot_values(t, second_moment))
          fail(op, "parameter '", name, "' slot '", slot, "': ", why);
      }
    }
    for (auto& [name, ps] : s.params) {
      ParamState& dst = state_[index.at(name)];
      dst.step = ps.step;
      for (auto& [slot, t] : ps.slots) dst.slots[slot] = t.detach().clone();
    }
  } catch (const Error& e) {
    for (auto& [k, v] : old_hyper) {
      try {
        set_hyper(k, v);  // without state, every old value is accepted again
      } catch (const Error&) {
      }
    }
    state_ = std::move(old_state);
    const std::string msg = e.what();
    if (msg.rfind(op, 0) == 0) throw;
    fail(op, msg);
  }
}

// ---------------------------------------------------------------- SGD

namespace {

void check_sgd(const char* op, const SGDOptions& o) {
  check_range(op, "lr", o.lr, 0, INFINITY);
  check_range(op, "momentum", o.momentum, 0, INFINITY);
  check_range(op, "dampening", o.dampening, 0, INFINITY);
  check_range(op, "weight_decay", o.weight_decay, 0, INFINITY);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    fail(op, "nesterov needs momentum > 0 and dampening 0, got momentum ", o.momentum, " and dampening ", o.dampening);
}

// p, d_p, buf: n elements. buf null without momentum; first: buf is set to d_p.
template <class T>
void sgd_kernel(T* p, const T* grad, T* buf, int64_t n, const SGDOptions& o, bool first) {
  const T lr = (T)o.lr, wd = (T)o.weight_decay, mom = (T)o.momentum, damp = (T)(1 - o.dampening);
  over(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      T g = grad[i];
      if (wd != 0) g = g + wd * p[i];
      if (buf) {
        buf[i] = first ? g : mom * buf[i] + damp * g;
        g = o.nesterov ? g + mom * buf[i] : buf[i];
      }
      p[i] = p[i] - lr * g;
    }
  });
}

}  // namespace

SGD::SGD(NamedParams params, SGDOptions options) : Optimizer(std::move(params), "SGD"), opt_(options) {
  check_sgd("SGD", opt_);
}

void SGD::set_lr(double lr) {
  check_range("SGD::set_lr", "lr", lr, 0, INFINITY);
  opt_.lr = lr;
}

namespace {

// The hyper-parameters of an options struct, each named once: a real number, or a flag
// that hyper() gives as 0 or 1.
template <class O>
struct HyperField {
  const char* name;
  double O::*real;
  bool O::*flag;
};

constexpr HyperField<SGDOptions> kSGDHyper[] = {{"lr", &SGDOptions::lr, nullptr},
                                                {"momentum", &SGDOptions::momentum, nullptr},
                                                {"dampening", &SGDOptions::dampening, nullptr},
                                                {"weight_decay", &SGDOptions::weight_decay, nullptr},
                                                {"nesterov", nullptr, &SGDOptions::nesterov}};
constexpr HyperField<AdamOptions> kAdamHyper[] = {{"lr", &AdamOptions::lr, nullptr},
                                                  {"beta1", &AdamOptions::beta1, nullptr},
                                                  {"beta2", &AdamOptions::beta2, nullptr},
                                                  {"eps", &AdamOptions::eps, nullptr},
                                                  {"weight_decay", &AdamOptions::weight_decay, nullptr},
                                                  {"amsgrad", nullptr, &AdamOptions::amsgrad}};

template <class O, size_t N>
std::map<std::string, double> hyper_of(const O& o, const HyperField<O> (&fields)[N]) {
  std::map<std::string, double> h;
  for (const auto& f : fields) h[f.name] = f.real ? o.*f.real : (o.*f.flag ? 1.0 : 0.0);
  return h;
}

// o with the named hyper-parameter set; an unknown name, or a flag other than 0 or 1, is
// an error naming op.
template <class O, size_t N>
O with_hyper(O o, const HyperField<O> (&fields)[N], const std::string& name, double value, const char* op) {
  for (const auto& f : fields) {
    if (name != f.name) continue;
    if (f.real) {
      o.*f.real = value;
    } else {
      if (value != 0 && value != 1) fail(op, name, " must be 0 or 1, got ", value);
      o.*f.flag = value != 0;
    }
    return o;
  }
  std::string names;
  for (size_t i = 0; i < N; i++) names += (i ? (i + 1 == N ? " or " : ", ") : "") + std::string(fields[i].name);
  fail(op, "unknown hyper-parameter '", name, "' (expected ", names, ")");
}

}  // namespace

std::map<std::string, double> SGD::hyper() const { return hyper_of(opt_, kSGDHyper); }

void SGD::set_hyper(const std::string& name, double value) {
  SGDOptions o = with_hyper(opt_, kSGDHyper, name, value, "SGD::set_hyper");
  check_sgd("SGD::set_hyper", o);
  opt_ = o;
}

std::vector<std::string> SGD::slot_names() const {
  if (opt_.momentum != 0) return {"momentum_buffer"};
  return {};
}

void SGD::step() {
  check_sgd("SGD::step", opt_);
  check_before_step("SGD::step", params_, state_);
  NoGradGuard ng;
  for (size_t i = 0; i < params_.size(); i++) {
    Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g = g.contiguous();
    ParamState& s = state_[i];
    bool first = false;
    Tensor buf;
    if (opt_.momentum != 0) {
      auto it = s.slots.find("momentum_buffer");
      first = it == s.slots.end();
      if (first) s.slots["momentum_buffer"] = empty(p.shape(), p.dtype());
      buf = s.slots["momentum_buffer"];
    }
    s.step += 1;
    if (p.dtype() == kFloat32)
      sgd_kernel(p.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, p.numel(), opt_, first);
    else
      sgd_kernel(p.data<double>(), g.data<double>(), buf.defined() ? buf.data<double>() : nullptr, p.numel(), opt_,
                 first);
  }
}

// ---------------------------------------------------------------- Adam, AdamW

namespace {

void check_adam(const char* op, const AdamOptions& o) {
  check_range(op, "lr", o.lr, 0, INFINITY);
  check_range(op, "beta1", o.beta1, 0, 1, true);
  check_range(op, "beta2", o.beta2, 0, 1, true);
  check_range(op, "eps", o.eps, 0, INFINITY);
  check_range(op, "weight_decay", o.weight_decay, 0, INFINITY);
}

// One parameter's data and Adam's slots for it, n elements each (max_exp_avg_sq null
// without amsgrad).
template <class T>
struct AdamSlots {
  T* param = nullptr;
  const T* grad = nullptr;
  T *exp_avg = nullptr, *exp_avg_sq = nullptr, *max_exp_avg_sq = nullptr;
  int64_t n = 0;
};

// One update of elements [b, e) of one parameter; t is its step (>= 1).
template <class T>
void adam_update(const AdamSlots<T>& s, const AdamOptions& o, bool decoupled, int64_t t, int64_t b, int64_t e) {
  T *p = s.param, *m = s.exp_avg, *v = s.exp_avg_sq, *vmax = s.max_exp_avg_sq;
  const T* grad = s.grad;
  const double bc1 = 1 - std::pow(o.beta1, (double)t), bc2 = 1 - std::pow(o.beta2, (double)t);
  const T step_size = (T)(o.lr / bc1), bc2_sqrt = (T)std::sqrt(bc2), eps = (T)o.eps;
  const T b1 = (T)o.beta1, b2 = (T)o.beta2, wd = (T)o.weight_decay, decay = (T)(1 - o.lr * o.weight_decay);
  if (wd == 0 && !vmax) {  // the usual case, in a loop without branches, which vectorises
    T* __restrict pp = p;  // the stores cannot alias the constants
    T* __restrict mm = m;
    T* __restrict vv = v;
    const T* __restrict gg = grad;
    for (int64_t i = b; i < e; i++) {
      const T g = gg[i];
      mm[i] = b1 * mm[i] + (1 - b1) * g;
      vv[i] = b2 * vv[i] + (1 - b2) * g * g;
      pp[i] = pp[i] - step_size * mm[i] / (std::sqrt(vv[i]) / bc2_sqrt + eps);
    }
    return;
  }
  for (int64_t i = b; i < e; i++) {
    T g = grad[i];
    if (decoupled) {
      if (wd != 0) p[i] = p[i] * decay;
    } else if (wd != 0) {
      g = g + wd * p[i];
    }
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    T vhat = v[i];
    if (vmax) {
      vmax[i] = std::max(vmax[i], v[i]);
      vhat = vmax[i];
    }
    T denom = std::sqrt(vhat) / bc2_sqrt + eps;
    p[i] = p[i] - step_size * m[i] / denom;
  }
}

// One parameter's update, as a piece of the whole step's work.
struct AdamJob {
  AdamSlots<float> f32 = {};  // the parameter's slots, in its dtype (the other one's stays empty)
  AdamSlots<double> f64 = {};
  int64_t step = 0;
  int64_t start = 0;  // its first element in the step's elements, all parameters end to end

  int64_t n() const { return f32.param ? f32.n : f64.n; }
  // elements [b, e) of this parameter
  void update(const AdamOptions& o, bool decoupled, int64_t b, int64_t e) const {
    if (f32.param) adam_update(f32, o, decoupled, step, b, e);
    else adam_update(f64, o, decoupled, step, b, e);
  }
};

}  // namespace

Adam::Adam(NamedParams params, AdamOptions options) : Adam(std::move(params), options, false) {}

Adam::Adam(NamedParams params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params), decoupled ? "AdamW" : "Adam"), opt_(options), decoupled_(decoupled) {
  check_adam(decoupled ? "AdamW" : "Adam", opt_);
}

AdamW::AdamW(NamedParams params, AdamOptions options) : Adam(std::move(params), options, true) {}

void Adam::set_lr(double lr) {
  check_range(decoupled_ ? "AdamW::set_lr" : "Adam::set_lr", "lr", lr, 0, INFINITY);
  opt_.lr = lr;
}

std::map<std::string, double> Adam::hyper() const { return hyper_of(opt_, kAdamHyper); }

void Adam::set_hyper(const std::string& name, double value) {
  const char* op = decoupled_ ? "AdamW::set_hyper" : "Adam::set_hyper";
  AdamOptions o = with_hyper(opt_, kAdamHyper, name, value, op);
  check_adam(op, o);
  if (o.amsgrad != opt_.amsgrad)
    for (auto& s : state_)
      if (s.step > 0) fail(op, "amsgrad cannot change after the first step (its state would be missing)");
  opt_ = o;
}

std::vector<std::string> Adam::slot_names() const {
  if (opt_.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::step() {
  check_adam(decoupled_ ? "AdamW::step" : "Adam::step", opt_);
  check_before_step(decoupled_ ? "AdamW::step" : "Adam::step", params_, state_);
  for (size_t i = 0; i < params_.size(); i++)  // amsgrad set through options() after the first step
    if (state_[i].step > 0 && params_[i].second.grad().defined() &&
        state_[i].slots.count("max_exp_avg_sq") != (opt_.amsgrad ? 1u : 0u))
      fail(decoupled_ ? "AdamW::step" : "Adam::step", "amsgrad was turned ", opt_.amsgrad ? "on" : "off",
           " after the first step: the state of '", params_[i].first, "' ", opt_.amsgrad ? "lacks" : "holds",
           " max_exp_avg_sq. Set amsgrad before the first step, or build a new optimizer");
  NoGradGuard ng;
  // every parameter's update in one parallel region: the elements of all parameters, end
  // to end, shared out in pieces (each element's update is independent of the others)
  std::vector<AdamJob> jobs;
  std::vector<Tensor> grads;  // contiguous gradients, alive until the updates are done
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); i++) {
    Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g = g.contiguous();
    grads.push_back(g);
    ParamState& s = state_[i];
    if (s.step == 0)
      for (auto& name : slot_names()) s.slots[name] = zeros(p.shape(), p.dtype());
    s.step += 1;
    Tensor m = s.slots.at("exp_avg"), v = s.slots.at("exp_avg_sq");
    Tensor vmax = opt_.amsgrad ? s.slots.at("max_exp_avg_sq") : Tensor();
    AdamJob job{.step = s.step, .start = total};
    dispatch_float(p.dtype(), "Adam::step", [&](auto tag) {
      using T = decltype(tag);
      AdamSlots<T> slots{.param = p.data<T>(),
                         .grad = g.data<T>(),
                         .exp_avg = m.data<T>(),
                         .exp_avg_sq = v.data<T>(),
                         .max_exp_avg_sq = vmax.defined() ? vmax.data<T>() : nullptr,
                         .n = p.numel()};
      if constexpr (std::is_same_v<T, float>) job.f32 = slots;
      else job.f64 = slots;
    });
    total += p.numel();
    jobs.push_back(job);
  }
  const AdamOptions o = opt_;
  const bool decoupled = decoupled_;
  // the parameters never share memory (the constructor refuses it), so no two threads
  // update one element
  parallel_for(total, cost::kOptimizerUpdate, [&](int64_t b, int64_t e) {
    // the last job that starts at or before b, then each job's part of [b, e)
    size_t j = std::upper_bound(jobs.begin(), jobs.end(), b, [](int64_t x, const AdamJob& job) { return x < job.start; }) -
               jobs.begin() - 1;
    for (; j < jobs.size() && jobs[j].start < e; j++) {
      const AdamJob& job = jobs[j];
      const int64_t from = std::max<int64_t>(b, job.start) - job.start;
      const int64_t to = std::min<int64_t>(e, job.start + job.n()) - job.start;
      if (from < to) job.update(o, decoupled, from, to);
    }
  });
}

// ---------------------------------------------------------------- clipping

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  const char* op = "clip_grad_norm";
  if (!(max_norm >= 0)) fail(op, "max_norm must be a non-negative number, got ", max_norm);
  if (!(norm_type > 0)) fail(op, "norm_type must be positive (or inf), got ", norm_type);
  for (size_t i = 0; i < params.size(); i++)
    if (!params[i].defined()) fail_undefined(params[i], op, cat_str("parameter ", (int64_t)i).c_str());
  // a tensor given twice, or gradients sharing memory (set_grad with one tensor), would be
  // counted twice in the norm and scaled twice
  if (auto pair = sharing_memory(params))
    fail(op, "parameters ", (int64_t)pair->first, " and ", (int64_t)pair->second, " are ",
         params[pair->first].impl() == params[pair->second].impl() ? "the same tensor" : "views of the same memory",
         ": each must be given once");
  std::vector<Tensor> given;
  std::vector<int64_t> index;
  for (size_t i = 0; i < params.size(); i++)
    if (params[i].grad().defined()) given.push_back(params[i].grad()), index.push_back((int64_t)i);
  if (auto pair = sharing_memory(given))
    fail(op, "the gradients of parameters ", index[pair->first], " and ", index[pair->second],
         " share memory (one tensor given to both with set_grad?): each would be scaled twice");
  bool inf_norm = std::isinf(norm_type);
  // a fixed order and double accumulation: the same norm for any thread count
  double acc = 0;
  std::vector<Tensor> grads;
  auto add = [&](double x) {
    double a = std::fabs(x);
    if (std::isnan(x)) acc = NAN;
    else if (inf_norm) acc = std::max(acc, a);
    else acc += norm_type == 2.0 ? a * a : std::pow(a, norm_type);
  };
  std::vector<Tensor> owners;
  for (auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!is_float(g.dtype())) fail(op, "gradients must be float32 or float64, got ", dtype_name(g.dtype()));
    grads.push_back(g);
    owners.push_back(p);
    Tensor c = g.contiguous();
    int64_t n = c.numel();
    if (c.dtype() == kFloat32)
      for (const float* x = c.data<float>(); n-- > 0; x++) add(*x);
    else
      for (const double* x = c.data<double>(); n-- > 0; x++) add(*x);
  }
  double total = inf_norm ? acc : (norm_type == 2.0 ? std::sqrt(acc) : std::pow(acc, 1.0 / norm_type));
  double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    NoGradGuard ng;
    for (size_t i = 0; i < grads.size(); i++) {
      Tensor g = grads[i];
      bool shared = false;  // an expanded gradient given with set_grad: several elements, one location
      for (int64_t d = 0; d < g.dim(); d++) shared |= g.stride(d) == 0 && g.size(d) > 1;
      if (shared) owners[i].set_grad(mul(g, coef));
      else g.copy_(mul(g, coef));
    }
  }
  return total;
}

double clip_grad_norm(const NamedParams& params, double max_norm, double norm_type) {
  std::vector<Tensor> ps;
  for (auto& [name, p] : params) ps.push_back(p);
  return clip_grad_norm(ps, max_norm, norm_type);
}

}  // namespace ember::optim
