// fit_sine: the smallest thing that trains. A 2-layer MLP (1 -> hidden -> 1, tanh)
// learns y = sin(x) on [-pi, pi] by full-batch gradient descent with momentum, and
// prints the falling loss. Every step is the framework's own autograd: forward with
// matmul/add/tanh, mean squared error, backward, then an in-place update under no_grad.
//
//   fit_sine [--steps N] [--hidden H] [--lr LR] [--seed S]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli/cli.h"
#include "core/ops.h"

using namespace ember;

int main(int argc, char** argv) {
  int steps = 2000, hidden = 32;
  double lr = 0.05, momentum = 0.9;
  uint64_t seed = 0;
  try {
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string k = argv[i], v = argv[i + 1];
      if (k == "--steps") steps = (int)cli::parse_int(k, v, 1);
      else if (k == "--hidden") hidden = (int)cli::parse_int(k, v, 1);
      else if (k == "--lr") lr = cli::parse_real(k, v, 0.0);
      else if (k == "--seed") seed = (uint64_t)cli::parse_int(k, v, 0);
      else {
        std::fprintf(stderr, "fit_sine: unknown flag %s (flags: --steps --hidden --lr --seed)\n", argv[i]);
        return 2;
      }
    }
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "fit_sine: %s\n", e.message.c_str());
    return 2;
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "fit_sine: flag %s needs a value\n", argv[argc - 1]);
    return 2;
  }

  Generator gen(seed);
  // data: n points on [-pi, pi] and their sines
  const int64_t n = 256;
  std::vector<float> xs(n), ys(n);
  for (int64_t i = 0; i < n; i++) {
    xs[i] = float(-M_PI + 2 * M_PI * i / (n - 1));
    ys[i] = std::sin(xs[i]);
  }
  Tensor x = from_vector(xs, {n, 1}), y = from_vector(ys, {n, 1});

  // parameters, initialised as PyTorch's Linear does: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  auto param = [&](Shape shape, int64_t fan_in) {
    double bound = 1.0 / std::sqrt((double)fan_in);
    return uniform(shape, -bound, bound, kFloat32, &gen).requires_grad_();
  };
  Tensor w1 = param({1, hidden}, 1), b1 = param({hidden}, 1);
  Tensor w2 = param({hidden, 1}, hidden), b2 = param({1}, hidden);
  std::vector<Tensor> params{w1, b1, w2, b2}, velocity;
  for (const Tensor& p : params) velocity.push_back(zeros_like(p));

  std::printf("fitting sin(x) on [-pi, pi] with a 1-%d-1 tanh MLP, %d steps, lr %g, momentum %g\n", hidden,
              steps, lr, momentum);
  double first = 0, last = 0;
  for (int step = 1; step <= steps; step++) {
    Tensor pred = add(matmul(tanh(add(matmul(x, w1), b1)), w2), b2);
    Tensor loss = mean(square(sub(pred, y)));
    loss.backward();
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); i++) {
        velocity[i].copy_(add(mul(velocity[i], momentum), params[i].grad()));
        params[i].copy_(sub(params[i], mul(velocity[i], lr)));
        params[i].zero_grad();
      }
    }
    last = loss.item();
    if (step == 1) first = last;
    if (step == 1 || step % (steps / 10 > 0 ? steps / 10 : 1) == 0)
      std::printf("step %5d  loss %.6f\n", step, last);
  }
  std::printf("loss fell from %.4f to %.6f (%.0fx)\n", first, last, first / last);
  return last < first ? 0 : 1;
}
