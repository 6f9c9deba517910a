// Fits y = 3x - 1 with one gradient step loop through the installed library and checks
// the gradient of a small matmul by finite differences.
#include <core/gradcheck.h>
#include <core/ops.h>
#include <nn/multihead_attention.h>

#include <cstdio>

using namespace ember;

int main() {
  Tensor x = from_vector(std::vector<double>{0, 1, 2, 3}, {4, 1});
  Tensor y = from_vector(std::vector<double>{-1, 2, 5, 8}, {4, 1});
  Tensor w = zeros({1, 1}, kFloat64).requires_grad_();
  Tensor b = zeros({1}, kFloat64).requires_grad_();
  for (int step = 0; step < 500; step++) {
    Tensor loss = mean(square(sub(add(matmul(x, w), b), y)));
    loss.backward();
    NoGradGuard ng;
    w.copy_(sub(w, mul(w.grad(), 0.1)));
    b.copy_(sub(b, mul(b.grad(), 0.1)));
    w.zero_grad();
    b.zero_grad();
  }
  std::printf("w = %.4f, b = %.4f\n", w.item(), b.item());
  auto report = gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                          {randn({2, 3}, kFloat64).requires_grad_(), randn({3, 2}, kFloat64).requires_grad_()});
  std::printf("%s", report.to_string().c_str());
  nn::MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2, .dtype = kFloat64});
  Tensor seq = randn({1, 3, 8}, kFloat64).requires_grad_();
  auto mha_report = gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0]).output; }, {seq});
  std::printf("%s", mha_report.to_string().c_str());
  bool ok = std::abs(w.item() - 3) < 1e-3 && std::abs(b.item() + 1) < 1e-3 && report.passed && mha_report.passed;
  std::printf("%s\n", ok ? "consumer OK" : "consumer FAILED");
  return ok ? 0 : 1;
}
