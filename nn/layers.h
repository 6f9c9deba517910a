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
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr,
         DType dtype = kFloat32);
  Tensor forward(const Tensor& x) override;
  int64_t in_features, out_features;
  Tensor weight, bias;
};

// Looks up rows of weight [num_embeddings, embedding_dim] for int64 ids of any shape.
// With a padding index, that row starts at zero and never receives a gradient.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1, Generator* gen = nullptr,
            DType dtype = kFloat32);
  Tensor forward(const Tensor& ids) override;
  int64_t num_embeddings, embedding_dim, padding_idx;
  Tensor weight;
};

// Zeroes elements with probability p in training mode (scaling the rest by 1/(1-p));
// the identity in eval mode.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  // On packed rows [N, C]: each row gets the mask of its place in the padded batch.
  Tensor forward(const Tensor& rows, const Packing& packing);
  double p;
  Generator* gen;  // draws masks from here (the default generator when null); must outlive the module
};

// Normalises over the last dim (size normalized_shape), then scales and shifts.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     DType dtype = kFloat32);
  Tensor forward(const Tensor& x) override;
  int64_t normalized_shape;
  double eps;
  Tensor weight, bias;  // undefined without affine
};

// Adds the sinusoidal table of "Attention Is All You Need" to x [B, L, d_model]:
// pe[pos, 2i] = sin(pos / 10000^(2i/d_model)), pe[pos, 2i+1] = cos(pos / 10000^(2i/d_model)).
// The table is a buffer (not a parameter, not saved). start offsets the positions, for
// decoding one token at a time.
class PositionalEncoding : public Module {
 public:
  PositionalEncoding(int64_t d_model, int64_t max_len = 5000, DType dtype = kFloat32);
  Tensor forward(const Tensor& x, int64_t start = 0);
  Tensor operator()(const Tensor& x, int64_t start = 0) { return forward(x, start); }
  int64_t d_model, max_len;
  Tensor pe;  // [max_len, d_model]
};

enum class Activation { ReLU, GELU };

// FeedForward({.d_model = 512, .d_ff = 2048, .dropout_p = 0.1, .dropout_gen = &masks})
struct FeedForwardOptions {
  int64_t d_model = 0, d_ff = 0;
  double dropout_p = 0.0;  // the probability of the Dropout module `dropout`
  Activation activation = Activation::ReLU;
  Generator* gen = nullptr;  // initialisation (the default generator when null)
  Generator* dropout_gen = nullptr;  // dropout masks (the default generator when null); must outlive the module
  DType dtype = kFloat32;
};

// linear2(dropout(activation(linear1(x)))): [.., d_model] -> [.., d_model].
class FeedForward : public UnaryModule {
 public:
  explicit FeedForward(const FeedForwardOptions& options);
  Tensor forward(const Tensor& x) override;
  // On packed rows [N, d_model] (the dropout's masks those of the padded batch).
  Tensor forward(const Tensor& rows, const Packing& packing);
  Activation activation;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout;
};

}  // namespace ember::nn
