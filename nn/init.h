// Parameter initialisation, in place and outside autograd, as PyTorch's nn.init does.
// Each draws from the given generator (the default one when null), so a model built
// from the same seed has the same weights.
#pragma once
#include <utility>

#include "core/random.h"
#include "core/tensor.h"

namespace ember::nn::init {

// (fan_in, fan_out) of a weight [out, in, ...]: in * receptive field, out * receptive field.
// Error for fewer than 2 dims; this and the two below throw it too.
std::pair<int64_t, int64_t> fans(const Tensor& w);

// Fills t with U(low, high) draws, N(mean, std^2) draws, zeros, or ones. Error when t is
// undefined.
///@{
void uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
void normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);
void zeros_(Tensor& t);
void ones_(Tensor& t);
///@}
// U(-b, b) with b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)). The default
// a = sqrt(5) is nn.Linear's choice and gives b = 1 / sqrt(fan_in).
void kaiming_uniform_(Tensor& w, double a = 2.23606797749979, Generator* gen = nullptr);
// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio, 2010).
void xavier_uniform_(Tensor& w, double gain = 1.0, Generator* gen = nullptr);

}  // namespace ember::nn::init
