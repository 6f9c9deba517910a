// Initialisers.
#include "nn/init.h"

#include <cmath>

#include "core/autograd.h"

namespace ember::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& w) {
  check_defined(w, "fans", "the input");
  if (w.dim() < 2) fail("init::fans", "needs a weight with at least 2 dims, got shape ", w.shape());
  int64_t receptive = 1;
  for (int64_t d = 2; d < w.dim(); d++) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

void uniform_(Tensor& t, double low, double high, Generator* gen) {
  check_defined(t, "uniform_", "the input");
  NoGradGuard ng;
  t.copy_(uniform(t.shape(), low, high, t.dtype(), gen));
}

void normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_defined(t, "normal_", "the input");
  NoGradGuard ng;
  t.copy_(normal(t.shape(), mean, std, t.dtype(), gen));
}

void zeros_(Tensor& t) {
  check_defined(t, "zeros_", "the input");
  NoGradGuard ng;
  t.fill_(0.0);
}
void ones_(Tensor& t) {
  check_defined(t, "ones_", "the input");
  NoGradGuard ng;
  t.fill_(1.0);
}

void kaiming_uniform_(Tensor& w, double a, Generator* gen) {
  check_defined(w, "kaiming_uniform_", "the input");
  auto [fan_in, fan_out] = fans(w);
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  double bound = gain * std::sqrt(3.0 / (double)fan_in);
  uniform_(w, -bound, bound, gen);
}

void xavier_uniform_(Tensor& w, double gain, Generator* gen) {
  check_defined(w, "xavier_uniform_", "the input");
  auto [fan_in, fan_out] = fans(w);
  double bound = gain * std::sqrt(6.0 / (double)(fan_in + fan_out));
  uniform_(w, -bound, bound, gen);
}

}  // namespace ember::nn::init
