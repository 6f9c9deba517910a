// Layer implementations.
#include "nn/layers.h"

#include <cmath>
#include <type_traits>

#include "nn/functional.h"
#include "nn/init.h"

namespace ember::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator* gen, DType dtype)
    : in_features(in), out_features(out) {
  if (in <= 0 || out <= 0) fail("Linear", "features must be positive, got in ", in, " and out ", out);
  weight = empty({out, in}, dtype);
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  register_parameter("weight", weight);
  if (with_bias) {
    bias = empty({out}, dtype);
    double bound = 1.0 / std::sqrt((double)in);
    init::uniform_(bias, -bound, bound, gen);
    register_parameter("bias", bias);
  }
}

Tensor Linear::forward(const Tensor& x) {
  check_defined(x, "Linear::forward", "the input");
  if (x.dim() == 0 || x.size(-1) != in_features)
    fail("Linear::forward", "expected input [..., ", in_features, "], got shape ", x.shape());
  return hooked({x}, linear(x, weight, bias));
}

Embedding::Embedding(int64_t num, int64_t dim, int64_t pad, Generator* gen, DType dtype)
    : num_embeddings(num), embedding_dim(dim), padding_idx(pad) {
  if (num <= 0 || dim <= 0) fail("Embedding", "sizes must be positive, got ", num, " x ", dim);
  if (pad >= num || pad < -1)
    fail("Embedding", "padding_idx ", pad, " is out of range for ", num, " embeddings (use -1 for none)");
  weight = empty({num, dim}, dtype);
  init::normal_(weight, 0.0, 1.0, gen);
  if (pad >= 0) weight.select(0, pad).detach().fill_(0.0);
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& ids) {
  check_defined(ids, "Embedding::forward", "the input");
  if (ids.dtype() != kInt64)
    fail("Embedding::forward", "expected int64 ids, got ", dtype_name(ids.dtype()), " of shape ", ids.shape());
  if (padding_idx < 0 || !weight.requires_grad() || !grad_enabled()) return hooked({ids}, embedding_lookup(weight, ids));
  // Same values; no gradient reaches the padding row. Cut on the smaller side: the table's
  // rows (the padding row's gradient is dropped after the others are summed, which gives
  // the same bits) or the rows looked up.
  if (weight.dim() == 2 && weight.size(0) <= ids.numel()) {
    Tensor keep = ne(arange(weight.size(0)), (double)padding_idx).unsqueeze(-1);
    return hooked({ids}, embedding_lookup(where(keep, weight, weight.detach()), ids));
  }
  Tensor rows = embedding_lookup(weight, ids);
  Tensor keep = ne(ids, (double)padding_idx).unsqueeze(-1);
  return hooked({ids}, where(keep, rows, rows.detach()));
}

Dropout::Dropout(double p_, Generator* g) : p(p_), gen(g) {
  if (!(p >= 0.0 && p <= 1.0)) fail("Dropout", "probability must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  check_defined(x, "Dropout::forward", "the input");
  return hooked({x}, dropout(x, p, is_training(), gen));
}
Tensor Dropout::forward(const Tensor& rows, const Packing& packing) {
  check_defined(rows, "Dropout::forward", "the input");
  return hooked({rows}, dropout_packed(rows, packing.rows, packing.length, p, is_training(), gen));
}

LayerNorm::LayerNorm(int64_t n, double eps_, bool affine, DType dtype) : normalized_shape(n), eps(eps_) {
  if (n <= 0) fail("LayerNorm", "normalized_shape must be positive, got ", n);
  if (!(eps_ >= 0 && std::isfinite(eps_))) fail("LayerNorm", "eps must be non-negative and finite, got ", eps_);
  if (affine) {
    weight = ones({n}, dtype);
    bias = zeros({n}, dtype);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_defined(x, "LayerNorm::forward", "the input");
  if (x.dim() == 0 || x.size(-1) != normalized_shape)
    fail("LayerNorm::forward", "expected input [..., ", normalized_shape, "], got shape ", x.shape());
  return hooked({x}, layer_norm(x, weight, bias, eps));
}

PositionalEncoding::PositionalEncoding(int64_t d, int64_t max_len_, DType dtype) : d_model(d), max_len(max_len_) {
  if (d <= 0 || max_len <= 0) fail("PositionalEncoding", "d_model and max_len must be positive, got ", d, " and ", max_len);
  // the table is made in place: its size is checked (and refused past 2^56 elements, or
  // past memory) before anything is computed
  if (!is_computing_float(dtype)) fail("PositionalEncoding", "expected a float dtype, got ", dtype_name(dtype));
  pe = empty({max_len, d}, dtype);
  auto fill = [&](auto* table) {
    using T = std::remove_pointer_t<decltype(table)>;
    for (int64_t pos = 0; pos < max_len; pos++)
      for (int64_t i = 0; i < d; i += 2) {
        double angle = (double)pos / std::pow(10000.0, (double)i / (double)d);
        table[pos * d + i] = T(std::sin(angle));
        if (i + 1 < d) table[pos * d + i + 1] = T(std::cos(angle));
      }
  };
  if (dtype == kFloat32) fill(pe.data<float>());
  else fill(pe.data<double>());
  register_buffer("pe", pe, /*persistent=*/false);
}

Tensor PositionalEncoding::forward(const Tensor& x, int64_t start) {
  check_defined(x, "PositionalEncoding::forward", "the input");
  if (x.dim() < 2 || x.size(-1) != d_model)
    fail("PositionalEncoding::forward", "expected input [..., L, ", d_model, "], got shape ", x.shape());
  int64_t L = x.size(-2);
  if (start < 0 || start > max_len - L)
    fail("PositionalEncoding::forward", "expected 0 <= start <= max_len - L = ", max_len - L, " for an input of ", L,
         " positions, got start ", start, " (max_len ", max_len, ")");
  return hooked({x}, add(x, pe.narrow(0, start, L)));
}

FeedForward::FeedForward(const FeedForwardOptions& o) : activation(o.activation) {
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model, o.d_ff, true, o.gen, o.dtype));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout_p, o.dropout_gen));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.d_ff, o.d_model, true, o.gen, o.dtype));
}

// ReLU and dropout run as one op (one pass each way) unless a hook on the dropout wants
// to see its input.
Tensor FeedForward::forward(const Tensor& x) {
  check_defined(x, "FeedForward::forward", "the input");
  Tensor h = linear1->forward(x);
  if (activation == Activation::ReLU && !dropout->has_forward_hooks())
    return hooked({x}, linear2->forward(relu_dropout(h, dropout->p, dropout->is_training(), dropout->gen)));
  h = activation == Activation::GELU ? gelu(h) : relu(h);
  return hooked({x}, linear2->forward(dropout->forward(h)));
}
Tensor FeedForward::forward(const Tensor& rows, const Packing& packing) {
  check_defined(rows, "FeedForward::forward", "the input");
  Tensor h = linear1->forward(rows);
  if (activation == Activation::ReLU && !dropout->has_forward_hooks())
    return hooked({rows}, linear2->forward(relu_dropout_packed(h, packing.rows, packing.length, dropout->p,
                                                               dropout->is_training(), dropout->gen)));
  h = activation == Activation::GELU ? gelu(h) : relu(h);
  return hooked({rows}, linear2->forward(dropout->forward(h, packing)));
}

}  // namespace ember::nn
