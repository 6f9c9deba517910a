// User-defined differentiable ops (see function.h).
#include "core/function.h"

#include <memory>
#include <mutex>
#include <set>

#include "core/forward_ad.h"

namespace ember {

namespace {
// Nodes name their op with a C string that must outlive them; a function's name is kept
// here for the life of the process (names are few).
const char* interned(const std::string& name) {
  static std::mutex m;
  static std::set<std::string> names;
  std::lock_guard<std::mutex> lock(m);
  return names.insert(name).first->c_str();
}
}  // namespace

void FunctionCtx::save_for_backward(std::vector<Tensor> tensors) { to_save_ = std::move(tensors); }

std::vector<Tensor> FunctionCtx::saved_tensors() const {
  std::vector<Tensor> r;
  r.reserve(saved_.size());
  for (const SavedTensor& s : saved_) r.push_back(s.get());
  return r;
}

Tensor Function::apply(const std::vector<Tensor>& inputs, Loc loc) const {
  const char* op = interned(name.empty() ? std::string("Function") : name);
  if (!forward || !backward) fail(op, "a Function needs both a forward and a backward");
  for (size_t i = 0; i < inputs.size(); i++)
    if (!inputs[i].defined()) fail_undefined(inputs[i], op, cat_str("input ", (int64_t)i).c_str());
  auto ctx = std::make_shared<FunctionCtx>();
  const bool record_node = wants_grad_list(inputs);
  for (const Tensor& t : inputs) ctx->needs_.push_back(record_node && t.defined() && t.requires_grad());
  Tensor out;
  {
    NoGradGuard no_grad;
    forward_detail::Suspend primals_only;  // the output's tangent comes from jvp
    out = forward(*ctx, inputs);
  }
  if (!out.defined()) fail(op, "forward returned an undefined tensor");
  // an input returned as it is becomes a new tensor of the same data, so that the
  // input's own history is left alone
  for (const Tensor& t : inputs)
    if (t.defined() && out.same(t)) out = out.detach();
  // forward mode: the rule, or an Error naming the Function when a tangent comes without one
  auto rule = [&](const std::vector<Tensor>& tangents) {
    Tensor t = jvp(*ctx, inputs, tangents);
    if (t.defined() && (t.shape() != out.shape() || t.dtype() != out.dtype()))
      fail(op, "jvp returned a tangent of shape ", t.shape(), " and dtype ", dtype_name(t.dtype()),
           "; expected shape ", out.shape(), " and dtype ", dtype_name(out.dtype()), " (the output's)");
    return t;
  };
  if (!jvp && forward_detail::active())
    for (const Tensor& t : inputs)
      if (forward_detail::tangent_of(t).defined())
        fail(op, "forward-mode differentiation (a tangent) is not supported yet: the Function has no jvp rule");
  const JvpRule jvp_rule = jvp ? JvpRule(rule) : JvpRule();
  if (!record_node) {
    // no node: what forward saved is still there for the jvp rule
    if (jvp_rule && forward_detail::active())
      for (const Tensor& t : ctx->to_save_) ctx->saved_.emplace_back(t.defined() ? t.detach() : Tensor());
    return record(op, loc, out, inputs, nullptr, {}, jvp_rule);
  }
  std::vector<Tensor> versions;
  for (const Tensor& t : ctx->to_save_) {
    if (!t.defined()) {
      ctx->saved_.emplace_back();
      continue;
    }
    versions.push_back(t);
    const Tensor* input = nullptr;
    for (const Tensor& in : inputs)
      if (in.defined() && t.same(in)) input = &in;
    if (input) ctx->saved_.emplace_back(*input);
    else if (t.same(out)) ctx->saved_.emplace_back(out, /*is_output=*/true);
    else ctx->saved_.emplace_back(t.detach());
  }
  ctx->to_save_.clear();
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.defined() ? t.shape() : Shape{});
    dtypes.push_back(t.defined() ? t.dtype() : kFloat32);
  }
  BackwardFn bw = [ctx, fn = backward, op, shapes, dtypes](const Tensor& g) {
    std::vector<Tensor> grads = fn(*ctx, g);
    if (grads.size() != shapes.size())
      fail(op, "backward returned ", (int64_t)grads.size(), grads.size() == 1 ? " gradient" : " gradients", "; expected ",
           (int64_t)shapes.size(),
           " (one per input, undefined where there is none)");
    for (size_t i = 0; i < grads.size(); i++) {
      if (!grads[i].defined()) continue;
      if (!ctx->needs_input_grad(i)) {
        grads[i] = Tensor();  // an input that does not require grad has no use for it
        continue;
      }
      if (grads[i].shape() != shapes[i] || grads[i].dtype() != dtypes[i])
        fail(op, "backward returned a gradient of shape ", grads[i].shape(), " and dtype ",
             dtype_name(grads[i].dtype()), " for input ", (int64_t)i, "; expected shape ", shapes[i], " and dtype ",
             dtype_name(dtypes[i]), " (the input's)");
    }
    return grads;
  };
  return record(op, loc, out, inputs, std::move(bw), versions, jvp_rule);
}

}  // namespace ember
