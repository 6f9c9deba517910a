// Drawing the backward graph reachable from a tensor, as Graphviz DOT (and SVG, PNG or
// PDF through Graphviz's `dot` program when it is installed).
//
// Each op is a box: its name, its output's shape and dtype, the bytes it keeps for its
// backward, the norm of the gradient that reached it in the last backward run under a
// GradNormRecorder, and a red fill where a softmax saturated. Leaves are ellipses named
// by the parameters given (or by shape). Arrows run from an op's inputs to the op, the way
// the forward computed. Ops recorded under nn::GraphScopes are grouped in one cluster per
// module, nested by dotted name. The gradient of a gradient (create_graph) is drawn alike:
// its graph holds the backward's ops.
//
// The bytes an op keeps: the sizes of the distinct storages in Node::saved, the tensors
// record() was told the backward reads (the storage whole, since a saved view keeps all of
// it alive). Storages an op shares with its neighbours count in each; the graph's label
// gives the total over distinct storages. What a backward keeps without listing it for
// record()'s version check (a dropout mask, an index, a shape) is not counted, so the
// figure is a lower bound, exact for most ops. After a backward without retain_graph an
// op has freed them and is drawn as "freed".
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember {

// What draw_graph names and marks.
struct GraphDrawOptions {
  // Names for leaves (parameters), as torchviz's params=dict(model.named_parameters()):
  // a leaf that is one of these tensors is drawn with its name.
  std::vector<std::pair<std::string, Tensor>> params;
  // A softmax row (one query's weights) counts as saturated when its largest weight is
  // above this; an op with such rows is marked with their share.
  double saturation = 0.99;
  std::string title;  // a caption above the graph (none when empty)
};

// One op of a described graph.
struct GraphOp {
  std::string name;  // the op's name ("matmul", "softmax_backward")
  Shape shape;  // its output's shape
  DType dtype = DType::Float32;  // its output's dtype
  int64_t saved_bytes = 0;  // bytes of the distinct storages it saved for backward
  bool released = false;  // a backward ran through it and freed what it saved
  double grad_norm = -1;  // Node::grad_norm: the norm of the gradient that reached it (-1: none)
  std::string scope;  // the module that ran it (nn::GraphScopes), empty when unknown
  std::string where;  // where it was called ("file.cpp:42 (function)")
  // The share of rows whose largest weight is above the saturation threshold, for an op
  // that saved probabilities (softmax, attention with its weights); -1 for other ops.
  double saturated_share = -1;
};

// One leaf of a described graph: a tensor that accumulates a gradient.
struct GraphLeaf {
  std::string name;  // the parameter's name, empty when it was not given
  Shape shape;  // its shape
  DType dtype = DType::Float32;  // its dtype
  double grad_norm = -1;  // the norm of its .grad(), -1 when it has none
};

// One arrow: from an op's input (a producing op, or a leaf) to the op.
struct GraphEdge {
  int from = 0;  // index into ops, or into leaves when from_leaf
  bool from_leaf = false;  // whether from indexes leaves
  int to = 0;  // index into ops
  int input = 0;  // which input of `to` it feeds
};

// The graph reachable from a tensor, as draw_graph walks it: ops[0] produced the tensor
// (or, for a leaf, there are no ops and leaves[0] is the tensor).
struct GraphDescription {
  std::vector<GraphOp> ops;  // in the order reached from the tensor
  std::vector<GraphLeaf> leaves;  // in the order reached
  std::vector<GraphEdge> edges;  // per op, in input order
  int64_t saved_bytes = 0;  // bytes of the distinct storages the whole graph saved
};

// Walks the graph of root (a tensor with a grad_fn, or a leaf that requires grad). Error
// when root is undefined or has no graph (it does not require grad).
GraphDescription describe_graph(const Tensor& root, const GraphDrawOptions& options = {});

// The graph of root as Graphviz DOT text.
///@{
std::string graph_dot(const Tensor& root, const GraphDrawOptions& options = {});
std::string graph_dot(const GraphDescription& graph, const GraphDrawOptions& options = {});
///@}

// Writes the graph of root to path: DOT text for a path ending .dot or .gv; for one ending
// .svg, .png or .pdf the DOT text goes beside it (path + ".dot") and Graphviz's `dot`
// renders it (Error when dot is not installed: the DOT file is written all the same).
// Returns the DOT text. Error naming the file when it cannot be written, and for any other
// ending.
std::string draw_graph(const Tensor& root, const std::string& path, const GraphDrawOptions& options = {});

// Whether Graphviz's `dot` program can be run (found on PATH).
bool graphviz_available();

}  // namespace ember
