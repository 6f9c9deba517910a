// Module registration, traversal, modes and state dicts.
#include "nn/module.h"

#include <algorithm>
#include <set>

namespace ember::nn {

void Module::check_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    fail("Module::register", "names must be non-empty and contain no '.', got '", name, "'");
  auto taken = [&](const std::string& n) {
    for (auto& p : params_)
      if (p.first == n) return true;
    for (auto& b : buffers_)
      if (std::get<0>(b) == n) return true;
    for (auto& c : children_)
      if (c.first == n) return true;
    return false;
  };
  if (taken(name)) fail("Module::register", "the name '", name, "' is already registered");
}

void Module::register_parameter(const std::string& name, Tensor& member) {
  check_name(name);
  if (!member.defined()) fail("Module::register_parameter", "parameter '", name, "' is undefined");
  if (!member.requires_grad()) member.requires_grad_(true);
  params_.emplace_back(name, &member);
}

void Module::register_buffer(const std::string& name, Tensor& member, bool persistent) {
  check_name(name);
  buffers_.emplace_back(name, &member, persistent);
}

// A parameter member the user replaced by an undefined tensor after registering it.
static void check_parameter(const std::string& name, const Tensor& t) {
  if (!t.defined())
    fail("Module", "parameter '", name, "' is undefined: the member was replaced by an undefined tensor after ",
         "register_parameter");
}

void Module::collect(const std::string& prefix, NamedTensors& out, bool params, bool only_persistent) const {
  if (params) {
    for (auto& [n, t] : params_) {
      check_parameter(prefix + n, *t);
      out.emplace_back(prefix + n, *t);
    }
  } else {  // an undefined buffer (like None in PyTorch) is left out
    for (auto& [n, t, persistent] : buffers_)
      if (t->defined() && (persistent || !only_persistent)) out.emplace_back(prefix + n, *t);
  }
  for (auto& [n, c] : children_) c->collect(prefix + n + ".", out, params, only_persistent);
}

void Module::slots(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  for (auto& [n, t, persistent] : buffers_) out.emplace_back(prefix + n, t);
  for (auto& [n, c] : children_) c->slots(prefix + n + ".", out);
}

Module::Swap::Swap(Module& m, const StateDict& replacements) {
  const char* op = "functional_call";
  std::vector<std::pair<std::string, Tensor*>> all;
  m.slots("", all);
  std::map<std::string, Tensor*> by_name(all.begin(), all.end());
  std::vector<std::pair<Tensor*, Tensor>> plan;
  std::string unknown;
  for (const auto& [name, t] : replacements) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      unknown += (unknown.empty() ? "" : ", ") + name;
      continue;
    }
    check_defined(t, op, cat_str("the tensor for '", name, "'").c_str());
    const Tensor& own = *it->second;
    if (own.defined() && (t.shape() != own.shape() || t.dtype() != own.dtype()))
      fail(op, "'", name, "' is ", dtype_name(own.dtype()), " ", own.shape(), " in the module, got ",
           dtype_name(t.dtype()), " ", t.shape());
    plan.emplace_back(it->second, t);
  }
  if (!unknown.empty()) {
    std::string names;  // what it has, so that a misspelling shows
    for (size_t i = 0; i < all.size() && i < 20; i++) names += (i ? ", " : "") + all[i].first;
    fail(op, "the module has no parameter or buffer named ", unknown, "; it has ",
         all.empty() ? std::string("none") : names + (all.size() > 20 ? cat_str(", ... (", all.size(), " in all)") : ""));
  }
  saved_.reserve(plan.size());
  for (auto& [slot, t] : plan) {  // nothing throws once this starts
    saved_.emplace_back(slot, *slot);
    *slot = t;
  }
}

Module::Swap::~Swap() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) *it->first = it->second;
}

NamedTensors Module::named_parameters() const {
  NamedTensors all;
  collect("", all, true, false);
  NamedTensors out;  // a tensor registered under two names (tied weights) once, under the first
  std::set<const TensorImpl*> seen;
  for (auto& [name, t] : all)
    if (seen.insert(t.impl()).second) out.emplace_back(std::move(name), std::move(t));
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", out, false, false);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) Tensor(t).zero_grad();
}

StateDict Module::state_dict() const {
  StateDict out;
  NamedTensors params;  // every name of a tied weight
  collect("", params, true, false);
  for (auto& [n, t] : params) out[n] = t;
  NamedTensors bufs;
  collect("", bufs, false, true);
  for (auto& [n, t] : bufs) out[n] = t;
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict mine = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (auto& [n, t] : mine) {
    auto it = state.find(n);
    if (it == state.end()) {
      missing.push_back(n);
    } else if (!it->second.defined() || it->second.shape() != t.shape() || it->second.dtype() != t.dtype()) {
      mismatched.push_back(cat_str(n, ": expected ", t.shape(), " ", dtype_name(t.dtype()), ", got ",
                                   it->second.defined() ? shape_str(it->second.shape()) : std::string("undefined"),
                                   " ", it->second.defined() ? dtype_name(it->second.dtype()) : ""));
    }
  }
  for (auto& [n, t] : state)
    if (!mine.count(n)) unexpected.push_back(n);
  if (strict && (!missing.empty() || !unexpected.empty() || !mismatched.empty())) {
    std::string msg = "the state does not match the module; nothing was loaded.";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      msg += cat_str(" ", what, " (", (int64_t)v.size(), "):");
      for (size_t i = 0; i < v.size(); i++) msg += (i ? ", " : " ") + v[i];
      msg += ".";
    };
    list("Missing", missing);
    list("Unexpected", unexpected);
    list("Shape or dtype mismatch", mismatched);
    fail("load_state_dict", msg);
  }
  std::set<std::string> bad(missing.begin(), missing.end());
  for (auto& m : mismatched) bad.insert(m.substr(0, m.find(':')));
  // Destinations that share memory would take the values in turn, the last one winning:
  // refused before anything is copied, unless they are one tensor (tied) given one value.
  struct Span {
    const std::string* name;
    const Tensor* dst;
    int64_t first, last;  // the first and last element it reaches
  };
  std::vector<Span> spans;
  for (auto& [n, t] : mine) {
    if (bad.count(n) || t.numel() == 0) continue;
    int64_t last = t.offset();
    for (int64_t d = 0; d < t.dim(); d++) {
      if (t.stride(d) == 0 && t.size(d) > 1)
        fail("load_state_dict", "'", n, "' (shape ", t.shape(), ", strides ", t.strides(),
             ") has elements that are one memory location (an expanded view); nothing was loaded");
      last += (t.size(d) - 1) * t.stride(d);
    }
    spans.push_back({&n, &t, t.offset(), last});
  }
  for (size_t i = 0; i < spans.size(); i++)
    for (size_t j = 0; j < i; j++) {
      const Span &a = spans[j], &b = spans[i];
      if (a.dst->storage() != b.dst->storage() || a.last < b.first || b.last < a.first) continue;
      const bool tied = a.dst->offset() == b.dst->offset() && a.dst->shape() == b.dst->shape() &&
                        a.dst->strides() == b.dst->strides();
      if (!tied)
        fail("load_state_dict", "'", *a.name, "' and '", *b.name,
             "' overlap in memory, so one would overwrite the other; nothing was loaded");
      if (!equal(state.at(*a.name), state.at(*b.name)))
        fail("load_state_dict", "'", *a.name, "' and '", *b.name,
             "' are one tensor (tied), but the state gives them different values; nothing was loaded");
    }
  NoGradGuard ng;
  for (auto& [n, t] : mine) {
    if (bad.count(n)) continue;
    Tensor dst = t;
    dst.copy_(state.at(n));
  }
}

namespace {

void convert_impl(TensorImpl& t, DType dtype) {
  auto values = std::make_shared<TensorImpl>();  // t's values alone, without its autograd state
  values->storage = t.storage;
  values->shape = t.shape;
  values->strides = t.strides;
  values->offset = t.offset;
  values->dtype = t.dtype;
  const Tensor c = Tensor(values).to(dtype).contiguous();
  t.storage = c.storage();
  t.strides = c.strides();
  t.offset = c.offset();
  t.dtype = dtype;
  if (t.grad) convert_impl(*t.grad, dtype);
}

}  // namespace

void convert_in_place(const Tensor& t, DType dtype) {
  check_defined(t, "convert_in_place", "the tensor");
  if (!is_computing_float(t.dtype()) || !is_computing_float(dtype))
    fail("convert_in_place", "converts float32 and float64 tensors, got ", dtype_name(t.dtype()), " to ",
         dtype_name(dtype));
  if (t.dtype() != dtype) convert_impl(*t.impl(), dtype);
}

void Module::to(DType dtype) {
  for (auto& [n, t] : params_) check_parameter(n, *t);
  if (!is_computing_float(dtype)) fail("Module::to", "parameters must be float32 or float64, got ", dtype_name(dtype));
  NoGradGuard ng;
  for (auto& [n, t] : params_)
    convert_in_place(*t, dtype);
  for (auto& [n, t, p] : buffers_)
    if (t->defined() && is_computing_float(t->dtype())) convert_in_place(*t, dtype);
  for (auto& [n, c] : children_) c->to(dtype);
}

HookHandle Module::register_forward_hook(ForwardHook fn) {
  if (!fn) fail("register_forward_hook", "got an empty function");
  return forward_hooks_.add(std::move(fn));
}

void Module::run_forward_hooks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  forward_hooks_.run(*this, inputs, outputs);
}

}  // namespace ember::nn
