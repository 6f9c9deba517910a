// Forward-over-reverse and the forward-mode function transforms (core/func.h): a backward
// under create_graph inside a dual level gives gradients whose tangents are H v; func::jvp,
// jacfwd, hvp and hessian equal their reverse-mode counterparts (core/autograd_functional.h)
// in float64 to rounding, on functions whose ops' backward passes each read saved inputs,
// saved outputs and constants; the level's tangents are freed when it closes.
#include <catch2/catch.hpp>
#include "test_util.h"

#include <vector>

#include "core/autograd.h"
#include "core/autograd_functional.h"
#include "core/forward_ad.h"
#include "core/func.h"
#include "core/ops.h"
#include "core/random.h"

using namespace ember;
using ember::testing::error_of;
using ember::testing::max_abs_diff;

namespace {

// max |a - b| / max(1, max |b|)
double rel_diff(const Tensor& a, const Tensor& b) {
  return max_abs_diff(a, b) / std::max(1.0, max(abs(b)).item());
}

// A scalar loss of two inputs through ops whose backward reads what each saved: a saved
// output (softmax, tanh, exp), saved inputs (mul, matmul, div, log), a constant dual-free
// factor (c), views, a reduction and indexing.
Tensor loss2(const std::vector<Tensor>& in, const Tensor& c) {
  const Tensor& x = in[0];  // [3, 4]
  const Tensor& w = in[1];  // [4, 5]
  Tensor h = tanh(matmul(x, w));                                // [3, 5]
  Tensor p = softmax(mul(h, c), -1);                            // [3, 5]
  Tensor z = div(exp(mul(h, 0.5)), add(square(sum(x, {1}, true)), 1.0));
  Tensor picked = index_select(z.t(), 0, tensor({4, 0, 2}, kInt64));
  return add(sum(mul(log(add(p, 0.1)), z)), sum(square(picked)));
}

}  // namespace

TEST_CASE("a backward with create_graph inside a dual level gives gradients whose tangents are H v") {
  Generator gen(5);
  const Tensor c = randn({3, 5}, kFloat64, &gen);
  const Tensor x0 = randn({3, 4}, kFloat64, &gen), w0 = randn({4, 5}, kFloat64, &gen);
  const Tensor vx = randn({3, 4}, kFloat64, &gen), vw = randn({4, 5}, kFloat64, &gen);
  auto f = [&](const std::vector<Tensor>& in) { return loss2(in, c); };
  const auto [y_ref, hv_ref] = hvp(f, {x0, w0}, {vx, vw});  // reverse over reverse

  SECTION("through grad()") {
    const Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    DualLevel level;
    const Tensor y = f({make_dual(x, vx), make_dual(w, vw)});
    const std::vector<Tensor> g = grad({y}, {x, w}, {}, {.create_graph = true});
    CHECK(rel_diff(unpack_dual(g[0]).tangent, hv_ref[0]) < 1e-12);
    CHECK(rel_diff(unpack_dual(g[1]).tangent, hv_ref[1]) < 1e-12);
  }
  SECTION("through backward() into .grad") {
    const Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    DualLevel level;
    f({make_dual(x, vx), make_dual(w, vw)}).backward(Tensor(), false, /*create_graph=*/true);
    CHECK(rel_diff(unpack_dual(x.grad()).tangent, hv_ref[0]) < 1e-12);
    CHECK(rel_diff(unpack_dual(w.grad()).tangent, hv_ref[1]) < 1e-12);
  }
  SECTION("func::hvp") {
    const auto [y, hv] = func::hvp(f, {x0, w0}, {vx, vw});
    CHECK(max_abs_diff(y, y_ref) == 0);
    CHECK(rel_diff(hv[0], hv_ref[0]) < 1e-12);
    CHECK(rel_diff(hv[1], hv_ref[1]) < 1e-12);
  }
  SECTION("strided inputs and tangents") {
    const Tensor xt = x0.t().contiguous().t(), vt = vx.t().contiguous().t();
    REQUIRE(!xt.is_contiguous());
    const auto [y, hv] = func::hvp(f, {xt, w0}, {vt, vw});
    CHECK(rel_diff(hv[0], hv_ref[0]) < 1e-12);
    CHECK(rel_diff(hv[1], hv_ref[1]) < 1e-12);
  }
}

TEST_CASE("func::jvp and jacfwd equal the reverse-mode jvp and jacobian") {
  Generator gen(6);
  const Tensor c = randn({3, 5}, kFloat64, &gen);
  const Tensor x = randn({3, 4}, kFloat64, &gen), w = randn({4, 5}, kFloat64, &gen);
  const Tensor tx = randn({3, 4}, kFloat64, &gen), tw = randn({4, 5}, kFloat64, &gen);
  // a vector-valued function of both inputs
  auto f = [&](const std::vector<Tensor>& in) {
    return mul(softmax(mul(tanh(matmul(in[0], in[1])), c), -1), sum(in[0], {1}, true));
  };
  const auto [y_ref, jt_ref] = ember::jvp(f, {x, w}, {tx, tw});
  const auto [y, jt] = func::jvp(f, {x, w}, {tx, tw});
  CHECK(max_abs_diff(y, y_ref) == 0);
  CHECK(rel_diff(jt, jt_ref) < 1e-12);

  const std::vector<Tensor> J = func::jacfwd(f, {x, w}), J_ref = jacobian(f, {x, w});
  REQUIRE(J.size() == 2);
  CHECK(J[0].shape() == Shape{3, 5, 3, 4});
  CHECK(J[1].shape() == Shape{3, 5, 4, 5});
  CHECK(rel_diff(J[0], J_ref[0]) < 1e-12);
  CHECK(rel_diff(J[1], J_ref[1]) < 1e-12);

  // an input the value does not depend on: zero columns; a 0-dim input and output
  const Tensor Jc = func::jacfwd([](const Tensor& a) { return sum(mul(a, 0.0)); }, x);
  CHECK(Jc.shape() == Shape{3, 4});
  CHECK(max(abs(Jc)).item() == 0.0);
  const Tensor s = scalar_tensor(0.7, kFloat64);
  CHECK(func::jacfwd([](const Tensor& a) { return sin(a); }, s).item() == Approx(std::cos(0.7)).epsilon(1e-15));
}

TEST_CASE("func::hessian by forward over reverse equals the reverse-over-reverse hessian, blocks included") {
  Generator gen(7);
  const Tensor c = randn({3, 5}, kFloat64, &gen);
  const Tensor x = randn({3, 4}, kFloat64, &gen), w = randn({4, 5}, kFloat64, &gen);
  auto f = [&](const std::vector<Tensor>& in) { return loss2(in, c); };
  const auto H = func::hessian(f, {x, w}), H_ref = hessian(f, {x, w});
  for (size_t a = 0; a < 2; a++)
    for (size_t b = 0; b < 2; b++) {
      CHECK(H[a][b].shape() == H_ref[a][b].shape());
      CHECK(rel_diff(H[a][b], H_ref[a][b]) < 1e-12);
    }
  // one input
  auto g = [](const Tensor& a) { return sum(mul(exp(a), log_softmax(a, 0))); };
  const Tensor v = randn({6}, kFloat64, &gen);
  CHECK(rel_diff(func::hessian(g, v), hessian(g, v)) < 1e-12);
}

TEST_CASE("a dual level's tangents, in tensors and in graph nodes, are freed when it closes") {
  const int64_t before = Node::live_count();
  {
    const Tensor x = tensor({0.5, -1.0, 2.0}, kFloat64).requires_grad_();
    Tensor y, g;
    {
      DualLevel level;
      // softmax's rule reads its own output: the output's node keeps a tangent whose graph
      // leads back to the node, a cycle the level's close ends
      y = sum(mul(softmax(make_dual(x, ones({3}, kFloat64)), 0), tensor({1.0, 2.0, 3.0}, kFloat64)));
      g = grad({y}, {x}, {}, {.create_graph = true})[0];
      CHECK(unpack_dual(g).tangent.defined());
    }
    CHECK(!unpack_dual(g).tangent.defined());
  }
  CHECK(Node::live_count() == before);
}

TEST_CASE("the forward-mode transforms refuse misuse by name") {
  const Tensor x = tensor({1.0, 2.0}, kFloat64);
  auto f = [](const Tensor& a) { return sum(square(a)); };
  CHECK(error_of([&] { func::jvp(f, x, ones({3}, kFloat64)); }) ==
        "func::jvp: expected t of x's shape [2] and dtype float64, got shape [3] and dtype float64");
  CHECK(error_of([&] { func::hvp([](const Tensor& a) { return square(a); }, x, x); }) ==
        "func::hvp: expected the function to return one element (a scalar loss), got shape [2]");
  CHECK(error_of([&] { func::jacfwd(TensorFn(), x); }) == "func::jacfwd: got an empty function");
  CHECK(error_of([&] { func::hessian(f, tensor({1, 2}, kInt64)); }) ==
        "func::hessian: expected a float32 or float64 x, got int64 of shape [2]");
  auto fs = [](const std::vector<Tensor>& in) { return sum(in[0]); };
  CHECK(error_of([&] { func::jvp(fs, {x}, {}); }) == "func::jvp: expected 1 vector t (one per input), got 0");
  CHECK(error_of([&] { func::jvp(f, x, Tensor()); }).rfind("func::jvp:", 0) == 0);
  {
    DualLevel level;
    CHECK(error_of([&] { func::jvp(f, x, x); }) ==
          "func::jvp: a dual level is open already; nested dual levels are not supported yet");
  }
  CHECK(!dual_level_open());
  // an error inside f propagates, and the level is closed after it
  CHECK(error_of([&] { func::jvp([](const Tensor& a) { return matmul(a, ones({3}, kFloat64)); }, x, x); })
            .rfind("matmul:", 0) == 0);
  CHECK(!dual_level_open());
}

TEST_CASE("func::linearize gives the value and J v for any v at a fixed point") {
  Generator gen(8);
  Tensor x = randn({4}, kFloat64, &gen);
  const Tensor v1 = randn({4}, kFloat64, &gen), v2 = randn({4}, kFloat64, &gen);
  auto f = [](const Tensor& a) { return mul(tanh(a), sum(exp(a))); };
  const auto linearized = func::linearize(f, x);
  const Tensor& y = linearized.first;
  const auto& jv = linearized.second;  // (a lambda below captures it: not a structured binding)
  const Tensor x0 = x.clone();
  x.copy_(zeros({4}, kFloat64));  // the point was copied
  CHECK(max_abs_diff(y, f(x0)) == 0);
  CHECK(rel_diff(jv(v1), func::jvp(f, x0, v1).second) < 1e-15);
  CHECK(rel_diff(jv(v2), ember::jvp(f, x0, v2).second) < 1e-12);
  CHECK(error_of([&] { jv(ones({3}, kFloat64)); }).rfind("func::linearize's jvp: expected t of x's shape [4]", 0) == 0);
}
