// fit_sine: the smallest thing that trains. A 2-layer MLP (1 -> hidden -> 1, tanh)
// learns y = sin(x) on [-pi, pi] by full-batch gradient descent with momentum, and
// prints the falling loss. Every step is the framework's own autograd: forward with
// matmul/add/tanh, mean squared error, backward, then an in-place update under no_grad.
//
//   fit_sine [--steps N] [--hidden H] [--lr LR] [--seed S]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "lib/cli/cli.h"
#include "core/ops.h"

using namespace ember;

namespace {

int fit(int64_t steps, int64_t hidden, double lr, double momentum, uint64_t seed) {
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

  std::printf("fitting sin(x) on [-pi, pi] with a 1-%lld-1 tanh MLP, %lld steps, lr %g, momentum %g\n",
              (long long)hidden, (long long)steps, lr, momentum);
  double first = 0, last = 0;
  for (int64_t step = 1; step <= steps; step++) {
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
    if (!std::isfinite(last))
      fail("fit_sine", "the loss became ", last, " at step ", step, ": --lr ", lr, " is too large for this net");
    if (step == 1) first = last;
    if (step == 1 || step % (steps / 10 > 0 ? steps / 10 : 1) == 0)
      std::printf("step %5lld  loss %.6f\n", (long long)step, last);
  }
  if (!(last < first)) {
    std::fprintf(stderr, "fit_sine: the loss did not fall: %.6f at step 1, %.6f at step %lld\n", first, last,
                 (long long)steps);
    return 1;
  }
  std::printf("loss fell from %.4f to %.6f (%.0fx)\n", first, last, first / last);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("fit_sine", [&] {
    CLI::App app{"Fits y = sin(x) on [-pi, pi] with a 1-hidden-1 tanh MLP, by gradient descent with momentum.",
                 "fit_sine"};
    int64_t steps = 2000, hidden = 32, seed = 0;
    double lr = 0.05;
    const double momentum = 0.9;
    cli::integer(app, "--steps", steps, 2, cli::kMaxSteps, "optimizer steps (the first loss is compared with the last)");
    cli::integer(app, "--hidden", hidden, 1, int64_t(1) << 16, "hidden units");
    cli::real(app, "--lr", lr, 1e-9, 10.0, "learning rate");
    cli::integer(app, "--seed", seed, 0, std::numeric_limits<int64_t>::max(), "random seed of the initial weights");
    cli::parse(app, argc, argv);
    return fit(steps, hidden, lr, momentum, (uint64_t)seed);
  });
}

