// The curvature of a loss with respect to a model's parameters: its Hessian, restricted to
// any set of them - the whole model, a layer, one attention head's rows of Wq, Wk, Wv and
// its columns of Wo - as an operator for core/curvature.h (top eigenvalues, trace, spectral
// density). The Hessian is never formed: each product H v is one backward pass through
// the graph of the loss's gradient, recorded once (double backward), so it goes through
// every op ember differentiates twice - fused and tiled attention included.
//
//   nn::LossHessian h([&] { return loss_of(model); }, nn::parameters_under(model));
//   auto head = nn::head_parameters(model, "encoder.layers.0.self_attn", 2);
//   auto top = curvature::top_eigen(h.on(head), nn::numel(head), 1);
//   auto tr = curvature::hutchinson(h.on(head), nn::numel(head), 20);
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/curvature.h"
#include "nn/module.h"
#include "nn/multihead_attention.h"

namespace ember::nn {

// A part of one parameter: the whole tensor, or `length` indices from `start` along `dim`.
// Its elements enter the flat vector in row-major order of the part.
struct ParameterPart {
  std::string name;  // the parameter's dotted name
  Tensor param;  // the module's own tensor
  int64_t dim = -1;  // -1: the whole tensor
  // The indices along dim (when dim >= 0): length of them from start.
  ///@{
  int64_t start = 0, length = 0;
  ///@}
  int64_t numel() const;  // the number of elements of the part
  Tensor of(const Tensor& full) const;  // the part of a tensor of the parameter's shape (a view)
};
// A set of parameter parts: the coordinates a Hessian is restricted to.
using ParameterSet = std::vector<ParameterPart>;

// The number of elements of a set (the length of its flat vectors).
int64_t numel(const ParameterSet& set);

// Every parameter of model whose dotted name starts with prefix ("": all of them), whole,
// in named_parameters()' order; only those that require grad. An Error when none matches.
ParameterSet parameters_under(const Module& model, const std::string& prefix = "");

// One head's parameters in the MultiHeadAttention at `prefix` of model (a dotted module
// path, "encoder.layers.0.self_attn"): rows head * d_k .. (head + 1) * d_k of q_proj's,
// k_proj's and v_proj's weight and bias, and the same columns of out_proj's weight (out_proj's
// bias is shared by the heads, so it is no head's). An Error naming what is missing when
// prefix is not such a module or head is not in [0, heads).
ParameterSet head_parameters(const Module& model, const std::string& prefix, int64_t head);
// The same for a MultiHeadAttention at hand, its parts named prefix + ".q_proj.weight" etc.
ParameterSet head_parameters(const MultiHeadAttention& attention, int64_t head, const std::string& prefix = "");

// The Hessian of one loss with respect to a set of parameters (`within`), as operators on
// any subset of them. The constructor runs loss() once (grad mode on) and records its
// gradient with create_graph; each product is then one backward pass through that
// gradient's graph (no forward): H v for v on the subset, zero elsewhere, restricted to the
// subset - the subset's diagonal block of the Hessian. Products run in the parameters'
// dtype; vectors are float64. The graph holds the forward's activations until the
// LossHessian is destroyed. An Error when loss() returns other than a one-element float
// tensor, when within is empty, or when a part's indices are out of range.
class LossHessian {
 public:
  // Runs loss() and records its gradient with respect to within's parameters.
  LossHessian(const std::function<Tensor()>& loss, const ParameterSet& within);

  // v -> H v on set, whose parts must lie within the constructor's parameters (the same
  // tensors) and not overlap one another: an Error naming the part otherwise.
  curvature::Operator on(const ParameterSet& set) const;
  // The dense block of the Hessian on set, n x n row-major (n products): for checks on small
  // sets.
  std::vector<double> dense(const ParameterSet& set) const;
  // The gradient on set, flat (from the recorded graph).
  std::vector<double> gradient(const ParameterSet& set) const;

  double loss() const { return loss_; }  // the loss's value
  int64_t products() const { return *products_; }  // the Hessian-vector products run so far

 private:
  double loss_ = 0;
  std::vector<Tensor> params_;  // within's distinct parameters
  std::vector<Tensor> grads_;  // their gradients, with a graph
  std::shared_ptr<int64_t> products_ = std::make_shared<int64_t>(0);
};

}  // namespace ember::nn
