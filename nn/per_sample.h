// Per-sample gradients: for every parameter, each example's own gradient, from one batched
// forward - what torch.func.vmap(grad(loss)) or Opacus computes, exactly, through every
// layer of ember's Transformer, attention and padding included.
//
//   auto grads = nn::per_sample_grads(model, B, [&] {
//     Tensor logits = model.forward(src, tgt_in);      // one batch of B examples
//     return per_example_losses(logits, tgt_out);        // [B]: example b's own loss
//   });
//   // grads[i] = {name, [B, ...shape of the parameter]}: row b is d losses[b] / d parameter
//
// How: the forward runs with hooks on every Linear, LayerNorm and Embedding, which keep each
// call's input and the gradient reaching its output. Since example b's loss reaches only
// example b's rows of every activation, a Linear's weight gradient splits into per-example
// sums over those rows (G_b^T X_b), and likewise a bias, LayerNorm's weight and bias and an
// Embedding's rows. Which rows are example b's is read off the gradients themselves: two
// backward passes of the same graph, one with every loss weighted 1 and one with loss b
// weighted about b + 1 (b + 1.2 to b + 1.8, so that a mix of examples shows no single
// example's weight), give each row's gradient and that gradient times its example's weight, so
// the packed rows of ember's encoder, padded batches and reshaped activations need no
// bookkeeping; a row whose gradient mixes examples (a layer coupling them) is an Error.
// Dropout keeps the batch's masks, each example its own; padded positions, whose rows get
// no gradient, contribute nothing.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace ember::nn {

// Each parameter's per-example gradients, in named_parameters()' order: {name, [B, ...]},
// row b the gradient of losses()[b] alone (float64 results to rounding of B separate
// backward passes). losses runs the forward and returns the examples' losses as a float
// tensor [B]; it is called once, with grad mode on; the module's .grad is not touched. An
// Error, naming what is wrong, when batch_size < 1; when a parameter that requires grad
// belongs to a module other than Linear, LayerNorm or Embedding (whose per-example
// gradients are not known); when losses returns another shape; when a row's gradient mixes
// examples, or holds NaN or Inf; when the per-example gradients do not add up to the batch's
// gradient (a parameter read outside its module's forward); and when called again from
// inside losses. Forwards of the same model by other threads meanwhile are not counted.
NamedTensors per_sample_grads(Module& model, int64_t batch_size, const std::function<Tensor()>& losses);
// The same over several modules, each named by a prefix of its parameters' names ("" for
// none): a model assembled from them (the Python module's, whose layers are C++ ones).
NamedTensors per_sample_grads(const std::vector<std::pair<std::string, Module*>>& modules, int64_t batch_size,
                              const std::function<Tensor()>& losses);

// What per-example gradients tell about a batch.

// The norm of each example's whole gradient, every parameter of grads together: [B], in
// float64. An Error when grads is empty or its tensors do not share their first size B.
Tensor per_sample_norms(const NamedTensors& grads);

// Differentially private SGD's gradient (Abadi et al. 2016, without the noise): each
// example's gradient scaled down to norm max_norm when it is longer (its norm over every
// parameter of grads), then the mean over the batch; {name, the parameter's shape}. An
// Error when max_norm is not positive and finite.
NamedTensors clipped_mean(const NamedTensors& grads, double max_norm);

// The gradient noise of a batch, from its per-example gradients g_b (McCandlish et al.
// 2018, "An Empirical Model of Large-Batch Training"), over the parameters whose names start
// with a prefix (a layer, a head's projections; "" for all). With m the batch's mean
// gradient and S = sum_b |g_b - m|^2 / (B - 1) the trace of the examples' covariance:
struct GradientNoise {
  int64_t batch = 0;  // B
  int64_t parameters = 0;  // elements counted
  double mean_norm_sq = 0;  // |m|^2
  double trace_cov = 0;  // S
  double signal = 0;  // |G|^2 estimated without bias: |m|^2 - S / B
  // B_simple = S / signal: the batch size beyond which a larger batch stops paying back
  // (infinite when the signal is not positive)
  double noise_scale = 0;
  // signal / (S / B): the batch gradient's signal to its noise (infinite without noise; NaN
  // for 0 / 0, and wherever a gradient is NaN)
  double snr = 0;
};
// An Error when B < 2, or no parameter has the prefix.
GradientNoise gradient_noise(const NamedTensors& grads, const std::string& prefix = "");

}  // namespace ember::nn
