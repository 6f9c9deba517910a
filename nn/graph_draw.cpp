// GraphScopes (labelling ops with the module that ran them) and the model-aware draw_graph.
#include "nn/graph_draw.h"

#include <unordered_set>

#include "core/autograd.h"

namespace ember::nn {

namespace {
void label_between(const std::shared_ptr<const std::string>& name, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& outputs) {
  // the ops between the outputs and the inputs, not claimed by a sub-module before (the
  // walk goes on through a sub-module's ops, to the ops before its inputs)
  std::unordered_set<const Node*> seen;
  for (const Tensor& t : inputs)
    if (t.defined() && t.grad_fn()) seen.insert(t.grad_fn().get());
  std::vector<Node*> stack;
  for (const Tensor& t : outputs)
    if (t.defined() && t.grad_fn() && seen.insert(t.grad_fn().get()).second) stack.push_back(t.grad_fn().get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!n->scope) n->scope = name;
    for (const Edge& e : n->inputs)
      if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
}
}  // namespace

namespace detail {
thread_local constinit const GraphScopes* t_graph_scopes = nullptr;

void label_ops(const Module& m, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  if (const auto* name = t_graph_scopes->name_of(m)) label_between(*name, inputs, outputs);
}
}  // namespace detail

void label_ops(const std::string& scope, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  if (scope.empty()) fail("label_ops", "expected a module's name, got an empty one");
  label_between(std::make_shared<const std::string>(scope), inputs, outputs);
}

namespace {
void name_modules(const Module& m, const std::string& name,
                  std::unordered_map<const Module*, std::shared_ptr<const std::string>>& names) {
  if (names.count(&m)) return;  // a module registered twice keeps its first name
  names.emplace(&m, name.empty() ? nullptr : std::make_shared<const std::string>(name));
  for (const auto& [child, module] : m.named_children())
    name_modules(*module, name.empty() ? child : name + "." + child, names);
}
}  // namespace

GraphScopes::GraphScopes(const Module& model, const std::string& name) : prev_(detail::t_graph_scopes) {
  name_modules(model, name, names_);
  detail::t_graph_scopes = this;
}

GraphScopes::~GraphScopes() {
  // the innermost: the one before takes over; one destroyed out of order: unlinked from the
  // chain, so no later scope is left pointing at it
  if (detail::t_graph_scopes == this) {
    detail::t_graph_scopes = prev_;
    return;
  }
  for (const GraphScopes* s = detail::t_graph_scopes; s; s = s->prev_)
    if (s->prev_ == this) {
      s->prev_ = prev_;
      return;
    }
}

const std::shared_ptr<const std::string>* GraphScopes::name_of(const Module& m) const {
  auto it = names_.find(&m);
  if (it == names_.end() || !it->second) return nullptr;
  return &it->second;
}

GraphDrawOptions with_parameters(const Module& model, GraphDrawOptions options, const std::string& name) {
  for (const auto& [n, t] : model.named_parameters()) options.params.emplace_back(name.empty() ? n : name + "." + n, t);
  return options;
}

std::string draw_graph(const Tensor& root, const Module& model, const std::string& path,
                       const GraphDrawOptions& options, const std::string& name) {
  return ember::draw_graph(root, path, with_parameters(model, options, name));
}

std::string graph_dot(const Tensor& root, const Module& model, const GraphDrawOptions& options,
                      const std::string& name) {
  return ember::graph_dot(root, with_parameters(model, options, name));
}

}  // namespace ember::nn
