// The ops a Jacobian or Hessian study reaches for - eye, diagonal, diag, diag_embed, outer,
// tril/triu, trace, norm, logsumexp, cumsum, isclose/allclose - give PyTorch's values
// (the expected numbers below are torch's), refuse what PyTorch refuses, and are
// differentiable twice on contiguous and strided inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/gradcheck.h"
#include "core/ops.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::StartsWith;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

Tensor matrix12() { return arange(0, 12, 1, kFloat64).view({3, 4}); }

// Both checks of f at leaves xs, with a non-uniform upstream gradient (gradcheck's own).
void differentiable_twice(const std::string& what, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& xs) {
  INFO(what);
  const GradcheckReport r = gradcheck(f, xs);
  INFO(r.to_string());
  CHECK(r.passed);
  const GradcheckReport rr = gradgradcheck(f, xs);
  INFO(rr.to_string());
  CHECK(rr.passed);
}

// A float64 leaf of shape s laid out transposed in memory, every other element
// (non-contiguous, whatever its dims).
Tensor strided(const Shape& s, Generator& g) {
  Shape buf(s.rbegin(), s.rend());
  buf.push_back(2);
  std::vector<int64_t> perm(s.size());
  for (size_t i = 0; i < s.size(); i++) perm[i] = (int64_t)(s.size() - 1 - i);
  Tensor t = randn(buf, kFloat64, &g).select(-1, 1).permute(perm).detach().requires_grad_();
  REQUIRE_FALSE(t.is_contiguous());
  return t;
}

}  // namespace

TEST_CASE("eye, diagonal, diag and diag_embed give torch's values") {
  CHECK(values(eye(2, 3)) == std::vector<double>{1, 0, 0, 0, 1, 0});
  CHECK(eye(3).shape() == Shape{3, 3});
  CHECK(eye(0).numel() == 0);
  const Tensor x = matrix12();
  CHECK(values(x.diagonal()) == std::vector<double>{0, 5, 10});
  CHECK(values(x.diagonal(1)) == std::vector<double>{1, 6, 11});
  CHECK(values(x.diagonal(-1)) == std::vector<double>{4, 9});
  CHECK(x.diagonal(5).numel() == 0);
  CHECK(x.diagonal(INT64_MIN).numel() == 0);
  CHECK(x.diagonal().storage() == x.storage());  // a view
  const Tensor y = arange(0, 24, 1, kFloat64).view({2, 3, 4});
  CHECK(values(y.diagonal(0, 0, 2)) == std::vector<double>{0, 13, 4, 17, 8, 21});
  CHECK(y.diagonal(1, 2, 0).shape() == Shape{3, 1});
  CHECK(values(diag(tensor({1.0, 2.0}, kFloat64))) == std::vector<double>{1, 0, 0, 2});
  CHECK(values(diag(tensor({1.0, 2.0}, kFloat64), -1)) == std::vector<double>{0, 0, 0, 1, 0, 0, 0, 2, 0});
  CHECK(values(diag(x, 1)) == std::vector<double>{1, 6, 11});
  const Tensor e = diag_embed(tensor({{1.0, 2.0}, {3.0, 4.0}}, kFloat64), 1, 0, 2);
  CHECK(e.shape() == Shape{3, 2, 3});
  CHECK(values(e) == std::vector<double>{0, 1, 0, 0, 3, 0, 0, 0, 2, 0, 0, 4, 0, 0, 0, 0, 0, 0});
  CHECK(values(trace(x)) == std::vector<double>{15});

  CHECK_THAT(error_of([] { (void)tensor({1.0}).diagonal(); }), StartsWith("diagonal: expected a tensor of at least 2 dims"));
  CHECK_THAT(error_of([&] { (void)x.diagonal(0, 1, -1); }), StartsWith("diagonal: dim1 and dim2 must differ"));
  CHECK_THAT(error_of([] { (void)diag(zeros({2, 2, 2})); }), StartsWith("diag: expected a 1-D tensor"));
  CHECK_THAT(error_of([] { (void)trace(zeros({2})); }), StartsWith("trace: expected a 2-D tensor, got shape [2]"));
  CHECK_THAT(error_of([] { (void)eye(-1); }), StartsWith("eye: expected non-negative sizes"));
  CHECK_THAT(error_of([] { (void)diag_embed(zeros({2}), INT64_MAX); }), StartsWith("diag_embed: offset"));
}

TEST_CASE("outer, tril and triu give torch's values") {
  CHECK(values(outer(tensor({1.0, 2.0}, kFloat64), tensor({3.0, 4.0, 5.0}, kFloat64))) ==
        std::vector<double>{3, 4, 5, 6, 8, 10});
  const Tensor x = matrix12();
  CHECK(values(tril(x, 1)) == std::vector<double>{0, 1, 0, 0, 4, 5, 6, 0, 8, 9, 10, 11});
  CHECK(values(triu(x, -1)) == std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11});
  CHECK(values(tril(x, INT64_MAX)) == values(x));
  CHECK(values(triu(x, INT64_MAX)) == std::vector<double>(12, 0));
  CHECK(tril(zeros({2, 3, 4}, kInt64)).dtype() == kInt64);
  // bool too, as torch.triu(torch.ones(3, 3, dtype=torch.bool), 1): the look-ahead mask
  const Tensor causal = triu(ones({2, 3, 3}, kBool), 1);
  CHECK(causal.dtype() == kBool);
  CHECK(values(causal.select(0, 1)) == std::vector<double>{0, 1, 1, 0, 0, 1, 0, 0, 0});
  CHECK(values(tril(ones({2, 3}, kBool), -1)) == std::vector<double>{0, 0, 0, 1, 0, 0});
  CHECK_THAT(error_of([] { (void)outer(zeros({2, 2}), zeros({2})); }), StartsWith("outer: expected two 1-D tensors"));
  CHECK_THAT(error_of([] { (void)tril(zeros({3})); }), StartsWith("tril: expected a tensor of at least 2 dims"));
}

TEST_CASE("norm, logsumexp and cumsum give torch's values") {
  CHECK(norm(tensor({3.0, -4.0, 0.0}, kFloat64)).item() == 5);
  CHECK(norm(tensor({3.0, -4.0, 0.0}, kFloat64), 3).item() == Approx(std::cbrt(91.0)).epsilon(1e-15));
  CHECK(norm(tensor({3.0, -4.0, 0.0}, kFloat64), INFINITY).item() == 4);
  CHECK(norm(tensor({3.0, -4.0, 0.0}, kFloat64), 1).item() == 7);
  const Tensor m = tensor({{3.0, -4.0}, {1.0, 2.0}}, kFloat64);
  const auto n15 = values(norm(m, 1.5, {1}));
  CHECK(n15[0] == Approx(5.584250450134277).epsilon(1e-7));
  CHECK(n15[1] == Approx(2.447260856628418).epsilon(1e-7));
  CHECK(norm(m, 2, {0}, true).shape() == Shape{1, 2});
  CHECK_THAT(error_of([&] { (void)norm(m, 0); }), StartsWith("norm: p must be positive"));
  CHECK_THAT(error_of([] { (void)norm(zeros({2}, kInt64)); }), StartsWith("norm: expected a float32 or float64 tensor"));

  const auto lse = values(logsumexp(tensor({{1.0, 2.0, 3.0}, {-1e30, 0.0, 1000.0}}, kFloat64), {1}));
  CHECK(lse[0] == Approx(3.4076059644443806).epsilon(1e-14));
  CHECK(lse[1] == 1000);
  const double inf = INFINITY;
  CHECK(logsumexp(tensor({-inf, -inf}, kFloat64), {0}).item() == -inf);
  CHECK(logsumexp(tensor({1.0, inf}, kFloat64), {0}).item() == inf);
  CHECK(logsumexp(zeros({2, 3}), {0, 1}, true).shape() == Shape{1, 1});

  const Tensor c = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(cumsum(c, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 5, 7, 9});
  CHECK(cumsum(c, -1).to_vector<int64_t>() == std::vector<int64_t>{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(tensor({true, false, true}), 0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 2});
  CHECK(cumsum(tensor({INT64_MAX, int64_t(1)}), 0).to_vector<int64_t>()[1] == INT64_MIN);  // wraps
  CHECK(values(cumsum(c.t().to(kFloat64), 1)) == std::vector<double>{1, 5, 2, 7, 3, 9});  // a strided input
  CHECK(cumsum(zeros({0, 3}), 1).shape() == Shape{0, 3});
  CHECK_THAT(error_of([&] { (void)cumsum(c, 2); }), StartsWith("cumsum: dim 2 is out of range"));
}

TEST_CASE("isclose and allclose follow torch: equal infinities are close, NaN only with equal_nan, shapes broadcast") {
  const double inf = INFINITY, nan = NAN;
  const Tensor a = tensor({1.0, inf, nan, 1.0, inf}, kFloat64), b = tensor({1.0 + 1e-9, inf, nan, 1.1, -inf}, kFloat64);
  CHECK(isclose(a, b).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 0, 0});
  CHECK(isclose(a, b, 1e-5, 1e-8, true).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1, 0, 0});
  CHECK(isclose(zeros({2, 1}), zeros({3})).shape() == Shape{2, 3});
  CHECK_FALSE(allclose(tensor({inf}), tensor({-inf})));
  CHECK(allclose(tensor({inf}), tensor({inf})));
  CHECK(allclose(zeros({2, 3}), zeros({3})));
  CHECK_THAT(error_of([] { (void)allclose(zeros({2}), zeros({2}, kFloat64)); }),
             StartsWith("allclose: expected both operands to have the same dtype"));
  CHECK_THAT(error_of([] { (void)isclose(zeros({2}), zeros({2}), -1); }), StartsWith("isclose: rtol and atol"));
}

TEST_CASE("the matrix ops are differentiable twice, on contiguous and strided inputs") {
  Generator g(41);
  for (bool contiguous : {true, false}) {
    INFO((contiguous ? "contiguous" : "strided"));
    auto leaf = [&](const Shape& s) {
      return contiguous ? randn(s, kFloat64, &g).requires_grad_() : strided(s, g);
    };
    using V = const std::vector<Tensor>&;
    differentiable_twice("diagonal(1)", [](V in) { return in[0].diagonal(1); }, {leaf({3, 4})});
    differentiable_twice("diagonal(-1, 0, 2)", [](V in) { return in[0].diagonal(-1, 0, 2); }, {leaf({3, 2, 4})});
    differentiable_twice("diag of a vector", [](V in) { return diag(in[0], 1); }, {leaf({3})});
    differentiable_twice("diag of a matrix", [](V in) { return diag(in[0], -1); }, {leaf({4, 3})});
    differentiable_twice("diag_embed", [](V in) { return diag_embed(in[0], -1, 0, 2); }, {leaf({2, 3})});
    differentiable_twice("outer", [](V in) { return outer(in[0], in[1]); }, {leaf({3}), leaf({4})});
    differentiable_twice("tril", [](V in) { return tril(in[0], -1); }, {leaf({2, 3, 4})});
    differentiable_twice("triu", [](V in) { return triu(in[0], 1); }, {leaf({3, 4})});
    differentiable_twice("trace", [](V in) { return trace(in[0]); }, {leaf({3, 3})});
    differentiable_twice("trace of a product", [](V in) { return trace(matmul(in[0], in[1])); }, {leaf({3, 2}), leaf({2, 3})});
    for (double p : {2.0, 1.0, 3.0, 1.5, (double)INFINITY}) {
      INFO("p = " << p);
      differentiable_twice("norm", [p](V in) { return norm(in[0], p); }, {leaf({2, 3})});
      differentiable_twice("norm over dim 1", [p](V in) { return norm(in[0], p, {1}, true); }, {leaf({2, 3, 2})});
    }
    differentiable_twice("logsumexp", [](V in) { return logsumexp(in[0], {-1}); }, {leaf({2, 3, 4})});
    differentiable_twice("logsumexp over all", [](V in) { return logsumexp(in[0], {0, 1}, true); }, {leaf({3, 4})});
    differentiable_twice("cumsum 0", [](V in) { return cumsum(in[0], 0); }, {leaf({3, 4})});
    differentiable_twice("cumsum -1", [](V in) { return cumsum(in[0], -1); }, {leaf({2, 3, 4})});
  }
}

TEST_CASE("a norm's gradient is 0 where the norm is 0, as PyTorch's, not NaN") {
  for (double p : {2.0, 3.0, 1.5}) {
    Tensor x = zeros({3}, kFloat64).requires_grad_();
    norm(x, p).backward();
    CHECK(values(x.grad()) == std::vector<double>{0, 0, 0});
  }
  Tensor x = tensor({{0.0, 0.0}, {3.0, 4.0}}, kFloat64).requires_grad_();
  sum(norm(x, 2, {1})).backward();
  const auto gx = values(x.grad());
  CHECK(gx[0] == 0);
  CHECK(gx[1] == 0);
  CHECK(gx[2] == Approx(0.6).epsilon(1e-15));
  CHECK(gx[3] == Approx(0.8).epsilon(1e-15));
}

TEST_CASE("isclose compares int64 exactly, norm's gradient is 0 at zero for p < 1, logsumexp of nothing is -inf") {
  const Tensor big = tensor({int64_t(9007199254740993)}), near = tensor({int64_t(9007199254740992)});
  CHECK(isclose(big, near, 0, 0).to_vector<int64_t>() == std::vector<int64_t>{0});
  CHECK(isclose(big, big, 0, 0).to_vector<int64_t>() == std::vector<int64_t>{1});
  CHECK(isclose(big, near, 0, 1).to_vector<int64_t>() == std::vector<int64_t>{1});
  Tensor x = tensor({0.0, 4.0}, kFloat64).requires_grad_();
  norm(x, 0.5).backward();
  CHECK(values(x.grad())[0] == 0);  // torch: [0, 1]
  CHECK(values(x.grad())[1] == Approx(1.0).epsilon(1e-15));
  CHECK(logsumexp(zeros({0}, kFloat64), {0}).item() == -INFINITY);
  CHECK(logsumexp(zeros({2, 0}), {1}).shape() == Shape{2});
  CHECK_THAT(error_of([] { (void)logsumexp(zeros({2, 3}), {1, -1}); }), StartsWith("logsumexp: dim -1 appears more than once"));
}


TEST_CASE("linear with no output or no input features, as torch") {
  Tensor x = randn({5, 3}).requires_grad_(), w = randn({0, 3}).requires_grad_(), b = zeros({0}).requires_grad_();
  Tensor y = linear(x, w, b);
  CHECK(y.shape() == Shape{5, 0});
  sum(y).backward();
  CHECK(x.grad().shape() == Shape{5, 3});
  CHECK(max(abs(x.grad())).item<float>() == 0.0f);
  CHECK(w.grad().shape() == Shape{0, 3});
  // no input features: every row is the bias
  Tensor none = randn({2, 4, 0}), w0 = randn({6, 0}), b6 = randn({6});
  Tensor z = linear(none, w0, b6);
  CHECK(z.shape() == Shape{2, 4, 6});
  CHECK(allclose(z, b6.expand({2, 4, 6}), 0, 0));
}
