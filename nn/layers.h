// The basic layers: Linear, Embedding, Dropout, LayerNorm, sinusoidal positional
// encoding and the position-wise feed-forward block. Parameter names and default
// initialisation follow PyTorch (weight/bias; Linear: Kaiming-uniform weight and
// U(-1/sqrt(in), 1/sqrt(in)) bias; Embedding: N(0, 1); LayerNorm: ones and zeros).
// Every constructor takes an optional generator for its initial values and a dtype.
#pragma once
#include <memory>

#include "nn/module.h"
#include "nn/packing.h"

namespace ember::nn {

// y = x W^T + b, x [..., in] -> y [..., out]. weight [out, in], bias [out].
class Linear : public UnaryModule {
 public:
  // Error unless both sizes are positive. Without bias, the member bias stays undefined.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr,
         DType dtype = kFloat32);
  Tensor forward(const Tensor& x) override;  // Error unless x is [..., in_features]
  // The sizes given to the constructor.
  ///@{
  int64_t in_features, out_features;
  ///@}
  // The parameters, [out, in] and [out] (bias undefined without one).
  ///@{
  Tensor weight, bias;
  ///@}
};

// Looks up rows of weight [num_embeddings, embedding_dim] for int64 ids of any shape.
// With a padding index, that row starts at zero and never receives a gradient.
class Embedding : public UnaryModule {
 public:
  // Error unless the sizes are positive and -1 <= padding_idx < num_embeddings. Unlike
  // PyTorch, -1 means no padding index (a negative index does not count from the end).
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1, Generator* gen = nullptr,
            DType dtype = kFloat32);
  Tensor forward(const Tensor& ids) override;  // [..., embedding_dim]; Error unless ids are int64
  // The constructor's arguments.
  ///@{
  int64_t num_embeddings, embedding_dim, padding_idx;
  ///@}
  Tensor weight;  // [num_embeddings, embedding_dim]
};

// Zeroes elements with probability p in training mode (scaling the rest by 1/(1-p));
// the identity in eval mode.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);  // Error unless 0 <= p <= 1
  Tensor forward(const Tensor& x) override;  // x with dropout applied (x itself in eval mode)
  // On packed rows [N, C]: each row gets the mask of its place in the padded batch.
  Tensor forward(const Tensor& rows, const Packing& packing);
  double p;  // the probability of zeroing an element
  Generator* gen;  // draws masks from here (the default generator when null); must outlive the module
};

// Normalises over the last dim (size normalized_shape), then scales and shifts.
class LayerNorm : public UnaryModule {
 public:
  // Error unless normalized_shape > 0 and eps is non-negative and finite. Unlike PyTorch,
  // only the last dim is normalised (normalized_shape is one size, not a shape).
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     DType dtype = kFloat32);
  Tensor forward(const Tensor& x) override;  // Error unless x is [..., normalized_shape]
  int64_t normalized_shape;  // the size of the last dim
  double eps;  // added to the variance
  // The affine parameters [normalized_shape], ones and zeros at first; undefined
  // without elementwise_affine.
  ///@{
  Tensor weight, bias;
  ///@}
};

// Adds the sinusoidal table of "Attention Is All You Need" to x [B, L, d_model]:
// pe[pos, 2i] = sin(pos / 10000^(2i/d_model)), pe[pos, 2i+1] = cos(pos / 10000^(2i/d_model)).
// The table is a buffer (not a parameter, not saved). start offsets the positions, for
// decoding one token at a time.
class PositionalEncoding : public Module {
 public:
  // Error unless d_model and max_len are positive and dtype is a float type.
  PositionalEncoding(int64_t d_model, int64_t max_len = 5000, DType dtype = kFloat32);
  // x [..., L, d_model] plus the rows start .. start + L - 1 of the table; Error for
  // another shape or when start < 0 or start + L > max_len. The call operator is the same.
  ///@{
  Tensor forward(const Tensor& x, int64_t start = 0);
  Tensor operator()(const Tensor& x, int64_t start = 0) { return forward(x, start); }
  ///@}
  // The constructor's arguments.
  ///@{
  int64_t d_model, max_len;
  ///@}
  Tensor pe;  // [max_len, d_model]
};

// The feed-forward block's activation; GELU is the exact (erf) form.
enum class Activation { ReLU, GELU };

// FeedForward({.d_model = 512, .d_ff = 2048, .dropout_p = 0.1, .dropout_gen = &masks})
struct FeedForwardOptions {
  // The model and hidden sizes; both must be set (positive).
  ///@{
  int64_t d_model = 0, d_ff = 0;
  ///@}
  double dropout_p = 0.0;  // the probability of the Dropout module `dropout`
  Activation activation = Activation::ReLU;  // applied after linear1
  Generator* gen = nullptr;  // initialisation (the default generator when null)
  Generator* dropout_gen = nullptr;  // dropout masks (the default generator when null); must outlive the module
  DType dtype = kFloat32;  // of the parameters
};

// linear2(dropout(activation(linear1(x)))): [.., d_model] -> [.., d_model].
class FeedForward : public UnaryModule {
 public:
  // Error when a size is not positive or dropout_p is outside [0, 1].
  explicit FeedForward(const FeedForwardOptions& options);
  Tensor forward(const Tensor& x) override;  // Error unless x is [..., d_model]
  // On packed rows [N, d_model] (the dropout's masks those of the padded batch).
  Tensor forward(const Tensor& rows, const Packing& packing);
  Activation activation;  // options.activation
  // The projections d_model -> d_ff and d_ff -> d_model.
  ///@{
  std::shared_ptr<Linear> linear1, linear2;
  ///@}
  std::shared_ptr<Dropout> dropout;  // after the activation
};

}  // namespace ember::nn
