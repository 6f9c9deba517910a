// The backward graph of a model, drawn with its modules: GraphScopes labels each op a
// forward records with the module that ran it, and draw_graph / graph_dot name the leaves
// by the model's parameters and group the ops in one Graphviz cluster per module (the
// drawing itself is core's, core/graph_draw.h).
//
//   nn::GraphScopes scopes(model);                   // while it lives, forwards label ops
//   Tensor loss = sum(model.forward(x));
//   nn::draw_graph(loss, model, "graph.svg");
//
// Which module ran an op: each module's forward ends in a call that forward hooks see;
// there, the ops recorded between its outputs and its inputs that no sub-module claimed
// before it are its own. So a module's ops are exactly those of its forward, sub-modules'
// apart, as long as the forward reads no other tensor with a graph than its inputs (the
// ops behind such a tensor, when no module claimed them, would be counted in too). Each
// forward walks its part of the graph once, so a model nested d deep walks it d times; no
// forward hook is registered, so the modules compute what they compute without one (the
// fused attention op stays fused). Without a GraphScopes a forward pays one branch.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/graph_draw.h"
#include "nn/module.h"

namespace ember::nn {

// While it lives, the forwards of model and its descendants that this thread runs label
// the ops they record (Node::scope) with the module's dotted name: "encoder.layers.0.
// self_attn". The model's own ops get `name` (none when empty). Scopes nest: the innermost
// applies to the modules it knows. Not copied or moved.
class GraphScopes {
 public:
  explicit GraphScopes(const Module& model, const std::string& name = "");  // Starts labelling.
  ~GraphScopes();  // Stops labelling (restores the one before).
  GraphScopes(const GraphScopes&) = delete;
  GraphScopes& operator=(const GraphScopes&) = delete;
  // The name of m's ops, or null when m is not part of the model (or is the unnamed model).
  const std::shared_ptr<const std::string>* name_of(const Module& m) const;

 private:
  std::unordered_map<const Module*, std::shared_ptr<const std::string>> names_;
  mutable const GraphScopes* prev_;  // the one before (mutable: unlinked when one is destroyed out of order)
};

// Labels the ops between inputs and outputs that carry no label yet with scope: what a
// GraphScopes does at the end of each module's forward, for modules that are not C++
// ones (the Python module's). Ops recorded before the inputs are left alone.
void label_ops(const std::string& scope, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

// options with the model's parameters as names for the leaves (model.named_parameters(),
// each prefixed with name and a dot when name is not empty), after those options has.
GraphDrawOptions with_parameters(const Module& model, GraphDrawOptions options = {}, const std::string& name = "");

// draw_graph and graph_dot of core/graph_draw.h, with the leaves named by the model's
// parameters (prefixed with `name` as GraphScopes prefixes them); clusters come from a forward run
// under GraphScopes.
///@{
std::string draw_graph(const Tensor& root, const Module& model, const std::string& path,
                       const GraphDrawOptions& options = {}, const std::string& name = "");
std::string graph_dot(const Tensor& root, const Module& model, const GraphDrawOptions& options = {},
                      const std::string& name = "");
///@}

}  // namespace ember::nn
