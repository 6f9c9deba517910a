// Looking inside backward: retain_grad, tensor hooks (non-leaf and leaf), and hooks after
// a leaf's accumulation, with PyTorch's semantics; and the gradient that reaches softmax's
// scores and weights, seen through them.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

Tensor leaf(std::vector<double> v, Shape s) { return from_vector(v, s).to(kFloat64).requires_grad_(); }

std::vector<double> vals(const Tensor& t) { return t.contiguous().to_vector<double>(); }

}  // namespace

TEST_CASE("retain_grad keeps the gradient that reaches a non-leaf, accumulated over backward calls") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = mul(x, 2.0);  // dz/dy = 2y for z = sum(y^2)
  CHECK_FALSE(y.retains_grad());
  y.retain_grad();
  CHECK(y.retains_grad());
  Tensor z = sum(mul(y, y));
  z.backward(Tensor(), /*retain_graph=*/true);
  CHECK(vals(y.grad()) == std::vector<double>{4, 8, 12});
  CHECK(vals(x.grad()) == std::vector<double>{8, 16, 24});
  z.backward();
  CHECK(vals(y.grad()) == std::vector<double>{8, 16, 24});  // accumulated, as PyTorch does

  // without retain_grad, a non-leaf's grad stays undefined
  Tensor w = mul(x, 3.0);
  sum(w).backward();
  CHECK_FALSE(w.grad().defined());
  // retaining does not share memory with what flows on: the leaf's gradient is its own
  Tensor a = leaf({1, 1}, {2});
  Tensor b = add(a, 0.0);
  b.retain_grad();
  sum(b).backward();
  b.grad().fill_(7.0);
  CHECK(vals(a.grad()) == std::vector<double>{1, 1});
}

TEST_CASE("retain_grad on a leaf is a no-op and on a tensor without grad an error") {
  Tensor x = leaf({1}, {1});
  x.retain_grad();
  CHECK_FALSE(x.retains_grad());
  Tensor c = from_vector(std::vector<double>{1}, {1});
  CHECK_THAT(error_of([&] { c.retain_grad(); }), StartsWith("retain_grad: the tensor (shape [1]) does not require grad"));
  CHECK_THAT(error_of([&] { c.register_hook([](const Tensor& g) { return g; }); }),
             StartsWith("register_hook: the tensor (shape [1]) does not require grad"));
}

TEST_CASE("a hook on a non-leaf sees its gradient and may replace it, in registration order") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, x);  // dy/dx = 2x
  std::vector<std::vector<double>> seen;
  y.register_hook([&](const Tensor& g) {
    seen.push_back(vals(g));
    return mul(g, 10.0);
  });
  y.register_hook([&](const Tensor& g) {
    seen.push_back(vals(g));  // the first hook's output
    return Tensor();          // leave it
  });
  y.retain_grad();
  sum(mul(y, from_vector(std::vector<double>{1, 3}, {2}).to(kFloat64))).backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == std::vector<double>{1, 3});
  CHECK(seen[1] == std::vector<double>{10, 30});
  CHECK(vals(y.grad()) == std::vector<double>{10, 30});  // .grad() after the hooks
  CHECK(vals(x.grad()) == std::vector<double>{20, 120});
}

TEST_CASE("a removed hook no longer runs, and removing it twice is harmless") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 1.0);
  int calls = 0;
  HookHandle h = y.register_hook([&](const Tensor&) {
    calls++;
    return Tensor();
  });
  h.remove();
  h.remove();
  sum(y).backward();
  CHECK(calls == 0);
}

TEST_CASE("a leaf's hooks run before its gradient accumulates, post-accumulate hooks after") {
  Tensor x = leaf({1, 2}, {2});
  std::vector<double> after;
  x.register_hook([](const Tensor& g) { return mul(g, 3.0); });
  HookHandle post = x.register_post_accumulate_grad_hook([&](const Tensor& t) { after = vals(t.grad()); });
  sum(mul(x, x)).backward();
  CHECK(vals(x.grad()) == std::vector<double>{6, 12});
  CHECK(after == std::vector<double>{6, 12});
  sum(x).backward();  // the leaf is the root's only input: the hooks run there too
  CHECK(vals(x.grad()) == std::vector<double>{9, 15});
  CHECK(after == std::vector<double>{9, 15});
  post.remove();
  x.backward(from_vector(std::vector<double>{1, 1}, {2}).to(kFloat64));  // x itself as the root
  CHECK(vals(x.grad()) == std::vector<double>{12, 18});
  CHECK(after == std::vector<double>{9, 15});

  Tensor y = mul(x, 2.0);
  CHECK_THAT(error_of([&] { y.register_post_accumulate_grad_hook([](const Tensor&) {}); }),
             StartsWith("register_post_accumulate_grad_hook: expected a leaf tensor that requires grad"));
}

TEST_CASE("a leaf used along several paths gets its hooks once per backward, on the summed gradient") {
  Tensor w = leaf({1, 2, 3, 4}, {4});
  std::vector<std::vector<double>> seen, after;
  w.register_hook([&](const Tensor& g) {
    seen.push_back(vals(g));
    return g;
  });
  w.register_post_accumulate_grad_hook([&](const Tensor& t) { after.push_back(vals(t.grad())); });
  // three edges into w: two slices and w itself
  Tensor a = w.narrow(0, 0, 2), b = w.narrow(0, 2, 2);
  Tensor z = add(sum(mul(a, b)), sum(mul(w, 0.5)));  // dz/dw = [b + .5, a + .5]
  z.backward();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<double>{3.5, 4.5, 1.5, 2.5});
  REQUIRE(after.size() == 1);
  CHECK(after[0] == std::vector<double>{3.5, 4.5, 1.5, 2.5});
}

TEST_CASE("a leaf's post-accumulate hook runs as soon as its last edge is done, before the rest of backward") {
  // w1's only edge is into the last op; w2 sits at the bottom of a chain, reached later
  Tensor w1 = leaf({1, 2}, {2}), w2 = leaf({0.5, -0.5}, {2});
  std::vector<std::string> order;
  bool w2_had_grad = true;
  w1.register_post_accumulate_grad_hook([&](const Tensor&) {
    order.push_back("w1");
    w2_had_grad = w2.grad().defined();
  });
  w2.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("w2"); });
  sum(mul(w1, exp(exp(mul(w2, 2.0))))).backward();
  CHECK(order == std::vector<std::string>{"w1", "w2"});
  CHECK_FALSE(w2_had_grad);
}

TEST_CASE("queue_callback runs after every leaf of the pass is complete, and only during backward") {
  Tensor w1 = leaf({1, 2}, {2}), w2 = leaf({3, 4}, {2});
  std::vector<std::string> events;
  w1.register_post_accumulate_grad_hook([&](const Tensor&) {
    events.push_back("w1");
    queue_callback([&] {
      events.push_back(cat_str("callback ", w1.grad().defined() && w2.grad().defined() ? "both" : "missing"));
      queue_callback([&] { events.push_back("second"); });  // one may queue another
    });
  });
  w2.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("w2"); });
  sum(mul(w1, w2)).backward();
  REQUIRE(events.size() == 4);
  CHECK(events[2] == "callback both");
  CHECK(events[3] == "second");
  CHECK_THAT(error_of([] { queue_callback([] {}); }), StartsWith("queue_callback: called outside a backward pass"));
}

TEST_CASE("a hook that returns a gradient of another shape is an error naming both shapes") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = mul(x, 2.0);
  y.register_hook([](const Tensor&) { return zeros({2}, kFloat64); });
  const std::string e = error_of([&] { sum(y).backward(); });
  CHECK_THAT(e, StartsWith("register_hook: a hook returned a gradient of shape [2]"));
  CHECK_THAT(e, Contains("expected shape [3]"));
}

TEST_CASE("a hook may run ops, and sees the gradient of every path summed") {
  Tensor x = leaf({0.5, -1}, {2});
  Tensor y = exp(x);
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = vals(g);
    return mul(g, sigmoid(g));  // ops inside a hook record nothing (backward runs without grad)
  });
  Tensor z = add(sum(y), sum(mul(y, 2.0)));  // two paths into y: 1 + 2
  z.backward();
  CHECK(seen == std::vector<double>{3, 3});
  const double s = 3.0 / (1.0 + std::exp(-3.0));
  CHECK(x.grad().at({0}) == Approx(s * std::exp(0.5)).epsilon(1e-14));
}

TEST_CASE("through retain_grad: the gradient reaching softmax's scores is p * (g - sum(g * p))") {
  Generator gen(5);
  Tensor s = randn({3, 5}, kFloat64, &gen).requires_grad_();
  Tensor scores = mul(s, 1.0 / std::sqrt(5.0));
  Tensor p = softmax(scores, -1);
  scores.retain_grad();
  p.retain_grad();
  Tensor up = randn({3, 5}, kFloat64, &gen);
  sum(mul(p, up)).backward();
  auto pv = vals(p), gv = vals(p.grad()), sv = vals(scores.grad());
  CHECK(gv == vals(up));  // what reaches the weights is the upstream gradient
  for (int r = 0; r < 3; r++) {
    double dot = 0;
    for (int c = 0; c < 5; c++) dot += gv[r * 5 + c] * pv[r * 5 + c];
    for (int c = 0; c < 5; c++) CHECK(sv[r * 5 + c] == Approx(pv[r * 5 + c] * (gv[r * 5 + c] - dot)).margin(1e-15));
  }
}

TEST_CASE("backward called from a hook on what the hook computed says where it is, not only that the tensor has no graph") {
  Tensor x = full({2}, 3.0, kFloat64).requires_grad_();
  Tensor y = mul(x, x);
  y.register_hook([](const Tensor& g) {
    sum(mul(g, g)).backward();  // g carries no graph in a plain backward
    return g;
  });
  CHECK_THAT(error_of([&] { sum(y).backward(); }),
             StartsWith("backward: called inside a backward pass (from a hook or a Function's backward), where grad "
                        "mode is off: the tensor (shape []) was computed there and has no graph"));
  // a hook may still run a backward of its own graph
  Tensor w = full({1}, 2.0, kFloat64).requires_grad_();
  Tensor z = mul(x, x);
  z.register_hook([&](const Tensor& g) {
    GradModeGuard on(true);
    sum(mul(w, w)).backward();
    return g;
  });
  sum(z).backward();
  CHECK(w.grad().item<double>() == 4.0);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6.0, 6.0});
}
