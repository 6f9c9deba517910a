#include "nn/curvature.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn/multihead_attention.h"

namespace ember::nn {
namespace {

std::string describe(const ParameterPart& p) {
  std::ostringstream s;
  s << p.name;
  if (p.dim >= 0) s << " [" << p.start << ", " << p.start + p.length << ") along dim " << p.dim;
  return s.str();
}

void check_part(const char* fn, const ParameterPart& p) {
  if (!p.param.defined()) throw Error(std::string(fn) + ": the parameter " + p.name + " is undefined");
  if (p.dim < -1)
    throw Error(std::string(fn) + ": the part of " + p.name + " has dim " + std::to_string(p.dim) +
                " (expected -1 for the whole tensor, or a dim of its shape " + shape_str(p.param.shape()) + ")");
  if (p.dim < 0) return;
  if (p.dim >= p.param.dim() || p.start < 0 || p.length < 1 || p.start + p.length > p.param.size(p.dim))
    throw Error(std::string(fn) + ": the part " + describe(p) + " is out of range for a parameter of shape " +
                shape_str(p.param.shape()));
}

// The module at a dotted path below model, or null.
const Module* find_module(const Module& model, const std::string& path) {
  const Module* m = &model;
  std::istringstream s(path);
  std::string name;
  while (std::getline(s, name, '.')) {
    const Module* next = nullptr;
    for (const auto& [child_name, child] : m->named_children())
      if (child_name == name) next = child.get();
    if (!next) return nullptr;
    m = next;
  }
  return m;
}

}  // namespace

int64_t ParameterPart::numel() const {
  if (dim < 0) return param.numel();
  return param.numel() / param.size(dim) * length;
}

Tensor ParameterPart::of(const Tensor& full) const { return dim < 0 ? full : full.narrow(dim, start, length); }

int64_t numel(const ParameterSet& set) {
  int64_t n = 0;
  for (const ParameterPart& p : set) n += p.numel();
  return n;
}

ParameterSet parameters_under(const Module& model, const std::string& prefix) {
  ParameterSet set;
  for (const auto& [name, t] : model.named_parameters())
    if (name.compare(0, prefix.size(), prefix) == 0 && t.requires_grad()) set.push_back({name, t});
  if (set.empty()) throw Error("parameters_under: no parameter's name starts with \"" + prefix + "\"");
  return set;
}

ParameterSet head_parameters(const Module& model, const std::string& prefix, int64_t head) {
  const auto* mha = dynamic_cast<const MultiHeadAttention*>(find_module(model, prefix));
  if (!mha) throw Error("head_parameters: \"" + prefix + "\" is not a MultiHeadAttention of the model");
  return head_parameters(*mha, head, prefix);
}

ParameterSet head_parameters(const MultiHeadAttention& attention, int64_t head, const std::string& prefix) {
  const MultiHeadAttention* mha = &attention;
  if (head < 0 || head >= mha->num_heads)
    throw Error("head_parameters: expected a head in [0, " + std::to_string(mha->num_heads) + "), got " +
                std::to_string(head));
  int64_t d = mha->head_dim, start = head * d;
  std::string dot = prefix.empty() ? "" : prefix + ".";
  ParameterSet set;
  for (const auto& [name, proj] :
       {std::pair{"q_proj", mha->q_proj}, std::pair{"k_proj", mha->k_proj}, std::pair{"v_proj", mha->v_proj}}) {
    set.push_back({dot + name + ".weight", proj->weight, 0, start, d});
    if (proj->bias.defined()) set.push_back({dot + name + ".bias", proj->bias, 0, start, d});
  }
  set.push_back({dot + "out_proj.weight", mha->out_proj->weight, 1, start, d});
  return set;
}

LossHessian::LossHessian(const std::function<Tensor()>& loss, const ParameterSet& within) {
  if (within.empty()) throw Error("LossHessian: expected at least one parameter, got none");
  for (const ParameterPart& p : within) {
    check_part("LossHessian", p);
    if (!p.param.requires_grad()) throw Error("LossHessian: the parameter " + p.name + " does not require grad");
    bool seen = false;
    for (const Tensor& t : params_) seen = seen || t.same(p.param);
    if (!seen) params_.push_back(p.param);
  }
  GradModeGuard on(true);
  Tensor value = loss();
  if (!value.defined() || value.numel() != 1 || !is_computing_float(value.dtype()))
    throw Error("LossHessian: expected loss() to return a one-element float tensor, got " +
                (value.defined() ? shape_str(value.shape()) + " " + dtype_name(value.dtype()) : "an undefined tensor"));
  loss_ = value.item();
  if (!value.requires_grad()) {  // no parameter reaches the loss: the Hessian is zero, as PyTorch's
    for (const Tensor& p : params_) grads_.push_back(zeros_like(p));
    return;
  }
  GradOptions options;
  options.create_graph = true;
  options.allow_unused = true;
  grads_ = grad({value}, params_, {}, options);
  for (size_t i = 0; i < grads_.size(); ++i)
    if (!grads_[i].defined()) grads_[i] = zeros_like(params_[i]);
}

curvature::Operator LossHessian::on(const ParameterSet& set) const {
  if (set.empty()) throw Error("LossHessian::on: expected at least one parameter part, got none");
  // Which recorded parameter each part is, and no two parts overlapping.
  std::vector<size_t> index;
  for (size_t i = 0; i < set.size(); ++i) {
    const ParameterPart& p = set[i];
    check_part("LossHessian::on", p);
    size_t k = std::find_if(params_.begin(), params_.end(), [&](const Tensor& t) { return t.same(p.param); }) -
               params_.begin();
    if (k == params_.size())
      throw Error("LossHessian::on: " + p.name + " is not among the parameters the Hessian was recorded for");
    for (size_t j = 0; j < i; ++j) {
      const ParameterPart& q = set[j];
      if (index[j] != k) continue;
      bool disjoint = p.dim >= 0 && q.dim == p.dim &&
                      (p.start + p.length <= q.start || q.start + q.length <= p.start);
      if (!disjoint) throw Error("LossHessian::on: the parts " + describe(q) + " and " + describe(p) + " overlap");
    }
    index.push_back(k);
  }
  // the distinct parameters the set's parts lie in (grad's inputs), each part's among them,
  // and each part's slice of the recorded gradient: worked out once, not per product
  std::vector<Tensor> targets, slices;
  std::vector<size_t> target_of;
  for (size_t i = 0; i < set.size(); ++i) {
    const Tensor& param = params_[index[i]];
    size_t t = std::find_if(targets.begin(), targets.end(), [&](const Tensor& x) { return x.same(param); }) -
               targets.begin();
    if (t == targets.size()) targets.push_back(param);
    target_of.push_back(t);
    slices.push_back(set[i].of(grads_[index[i]]));
  }
  const int64_t n = numel(set);
  return [parts = set, targets, slices, target_of, n, products = products_](const std::vector<double>& v) {
    if (int64_t(v.size()) != n)
      throw Error("LossHessian: expected a vector of length " + std::to_string(n) + ", got " +
                  std::to_string(v.size()));
    GradModeGuard on(true);
    // sum over parts of <gradient part, v part>: its gradient is H v (zero off the set)
    Tensor s;
    int64_t offset = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Tensor& g = slices[i];
      std::vector<double> chunk(v.begin() + offset, v.begin() + offset + parts[i].numel());
      offset += parts[i].numel();
      Tensor term = sum(g * from_vector(chunk, g.shape(), g.dtype()));
      s = s.defined() ? s + term : term;
    }
    GradOptions options;
    options.retain_graph = true;
    options.allow_unused = true;
    // a gradient with no graph (a loss linear in the set, or not reaching it) has zero curvature
    std::vector<Tensor> hv = s.requires_grad() ? grad({s}, targets, {}, options) : std::vector<Tensor>(targets.size());
    ++*products;
    std::vector<double> out;
    out.reserve(n);
    for (size_t i = 0; i < parts.size(); ++i) {
      const Tensor& h = hv[target_of[i]];
      if (!h.defined()) {
        out.insert(out.end(), parts[i].numel(), 0.0);
        continue;
      }
      std::vector<double> part = parts[i].of(h).contiguous().to(DType::Float64).to_vector<double>();
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  };
}

std::vector<double> LossHessian::dense(const ParameterSet& set) const {
  curvature::Operator h = on(set);
  int64_t n = numel(set);
  std::vector<double> out(size_t(n) * n), e(n, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    e[j] = 1.0;
    std::vector<double> col = h(e);
    e[j] = 0.0;
    for (int64_t i = 0; i < n; ++i) out[i * n + j] = col[i];
  }
  return out;
}

std::vector<double> LossHessian::gradient(const ParameterSet& set) const {
  std::vector<double> out;
  for (const ParameterPart& p : set) {
    check_part("LossHessian::gradient", p);
    auto k = std::find_if(params_.begin(), params_.end(), [&](const Tensor& t) { return t.same(p.param); });
    if (k == params_.end())
      throw Error("LossHessian::gradient: " + p.name + " is not among the parameters the Hessian was recorded for");
    std::vector<double> part =
        p.of(grads_[k - params_.begin()]).detach().contiguous().to(DType::Float64).to_vector<double>();
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace ember::nn
