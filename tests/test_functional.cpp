// The fused functional ops, nn::layer_norm and nn::cross_entropy, as a specification:
// they reproduce the float64 reference cases in tests/data, equal the same computation
// composed of primitive ops (values and every gradient), pass finite-difference checks,
// stay accurate in float32 on rows far from zero, give the same bits for any thread
// count, and reject misuse with messages that name the op and show shapes.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/gradcheck.h"
#include "io/h5.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/vec.h"
#include "nn/functional.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

std::string data(const char* f) { return std::string(EMBER_TEST_DATA_DIR) + "/" + f; }


bool all_finite(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

Tensor seeded_randn(const Shape& shape, uint64_t seed, DType dtype = kFloat64) {
  Generator gen(seed);
  return randn(shape, dtype, &gen);
}

// A new leaf over the same values (and strides), so each run accumulates its own gradient.
Tensor leaf(const Tensor& values) { return values.detach().requires_grad_(); }

// Layer norm written with primitive ops, the specification the fused op must meet.
Tensor layer_norm_composed(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor mu = mean(x, {-1}, /*keepdim=*/true);
  Tensor v = var(x, {-1}, /*correction=*/0, /*keepdim=*/true);
  Tensor y = mul(sub(x, mu), rsqrt(add(v, eps)));
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

// Cross-entropy written with primitive ops: the mean over kept rows of
// (1 - s) * -log p[target] + s * mean_v(-log p[v]).
Tensor cross_entropy_composed(const Tensor& logits, const Tensor& target, int64_t ignore_index, double smoothing) {
  const int64_t V = logits.size(-1), N = target.numel();
  Tensor z = logits.reshape({N, V});
  Tensor t = target.reshape({N});
  Tensor keep = ne(t, (double)ignore_index);
  Tensor safe = where(keep, t, zeros({}, kInt64));  // ignored rows read class 0, then drop out
  Tensor logp = log_softmax(z, 1);
  Tensor nll = neg(gather(logp, 1, safe.unsqueeze(1)).squeeze(1));
  Tensor smooth = neg(mean(logp, {1}));
  Tensor per_row = where(keep, add(mul(nll, 1.0 - smoothing), mul(smooth, smoothing)), 0.0);
  return div(sum(per_row), sum(keep.to(logits.dtype())));
}

// Runs fused and composed layer norm on fresh leaves over the same values with the same
// non-uniform upstream gradient; compares the outputs and every gradient.
void check_layer_norm_matches_composed(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  auto fresh = [](const Tensor& t) { return t.defined() ? leaf(t) : Tensor(); };
  Tensor x1 = fresh(x), w1 = fresh(weight), b1 = fresh(bias);
  Tensor x2 = fresh(x), w2 = fresh(weight), b2 = fresh(bias);
  Tensor y1 = nn::layer_norm(x1, w1, b1, eps);
  Tensor y2 = layer_norm_composed(x2, w2, b2, eps);
  CHECK(max_abs_diff(y1, y2) < 1e-12);
  Tensor gy = seeded_randn(x.shape(), 99, x.dtype());
  y1.backward(gy);
  y2.backward(gy);
  CHECK(max_abs_diff(x1.grad(), x2.grad()) < 1e-12);
  if (weight.defined()) CHECK(max_abs_diff(w1.grad(), w2.grad()) < 1e-12);
  if (bias.defined()) CHECK(max_abs_diff(b1.grad(), b2.grad()) < 1e-12);
}

void check_cross_entropy_matches_composed(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                          double smoothing) {
  Tensor z1 = leaf(logits), z2 = leaf(logits);
  Tensor l1 = nn::cross_entropy(z1, target, ignore_index, smoothing);
  Tensor l2 = cross_entropy_composed(z2, target, ignore_index, smoothing);
  CHECK(l1.shape() == Shape{});
  CHECK(std::fabs(l1.item() - l2.item()) < 1e-12);
  l1.backward();
  l2.backward();
  CHECK(max_abs_diff(z1.grad(), z2.grad()) < 1e-12);
}

void check_gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const std::vector<std::string>& names) {
  GradcheckReport r = gradcheck(f, inputs, {}, names);
  INFO(r.to_string());
  CHECK(r.passed);
}

// int64 targets in [0, V) with every `ignore_every`-th one set to ignore_index.
Tensor targets_with_ignored(const Shape& shape, int64_t V, int64_t ignore_index, int64_t ignore_every,
                            uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> t = randint(0, V, shape, &gen).to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); i += (size_t)ignore_every) t[i] = ignore_index;
  return from_vector(t, shape);
}




}  // namespace

// ------------------------------------------------------------------ reference cases
TEST_CASE("layer_norm reproduces the layer_norm.h5 reference case in float64") {
  const std::string f = data("layer_norm.h5");
  REQUIRE(h5::attr_string(f, "/", "kind") == "layer_norm");
  Tensor x = h5::read(f, "input/x").requires_grad_();
  Tensor w = h5::read(f, "params/weight").requires_grad_();
  Tensor b = h5::read(f, "params/bias").requires_grad_();
  REQUIRE(x.dtype() == kFloat64);

  Tensor y = nn::layer_norm(x, w, b, h5::attr_double(f, "/", "eps"));
  CHECK(max_abs_diff(y, h5::read(f, "expected/output")) < 1e-9);
  y.backward(h5::read(f, "input/grad_output"));
  CHECK(max_abs_diff(x.grad(), h5::read(f, "expected/grad/x")) < 1e-9);
  CHECK(max_abs_diff(w.grad(), h5::read(f, "expected/grad/weight")) < 1e-9);
  CHECK(max_abs_diff(b.grad(), h5::read(f, "expected/grad/bias")) < 1e-9);
}

static void check_cross_entropy_reference(const char* file) {
  const std::string f = data(file);
  REQUIRE(h5::attr_string(f, "/", "kind") == "cross_entropy");
  REQUIRE(h5::attr_string(f, "/", "reduction") == "mean");
  const auto ignore_index = (int64_t)h5::attr_double(f, "/", "ignore_index");
  const double smoothing = h5::attr_double(f, "/", "label_smoothing");
  Tensor logits = h5::read(f, "input/logits").requires_grad_();
  Tensor target = h5::read(f, "input/target");

  Tensor loss = nn::cross_entropy(logits, target, ignore_index, smoothing);
  CHECK(std::fabs(loss.item() - h5::read(f, "expected/loss").item()) < 1e-9);
  loss.backward();
  CHECK(max_abs_diff(logits.grad(), h5::read(f, "expected/grad/logits")) < 1e-9);
}

TEST_CASE("cross_entropy reproduces the cross_entropy.h5 reference case (ignore_index 0)") {
  check_cross_entropy_reference("cross_entropy.h5");
}

TEST_CASE("cross_entropy reproduces the cross_entropy_smoothing.h5 reference case (smoothing 0.1)") {
  check_cross_entropy_reference("cross_entropy_smoothing.h5");
}

// ------------------------------------------------------------------ fused == composed
TEST_CASE("fused layer_norm equals layer norm composed of primitives, with weight and bias") {
  check_layer_norm_matches_composed(seeded_randn({3, 4, 7}, 1), seeded_randn({7}, 2), seeded_randn({7}, 3), 1e-5);
}

TEST_CASE("fused layer_norm equals the composed version on a non-contiguous input") {
  Tensor xt = seeded_randn({7, 5}, 4).t();  // [5, 7] with strides [1, 5]
  REQUIRE_FALSE(xt.is_contiguous());
  check_layer_norm_matches_composed(xt, seeded_randn({7}, 5), seeded_randn({7}, 6), 1e-3);
}

TEST_CASE("fused layer_norm equals the composed version without weight or bias") {
  check_layer_norm_matches_composed(seeded_randn({6, 9}, 7), Tensor(), Tensor(), 1e-5);
  check_layer_norm_matches_composed(seeded_randn({6, 9}, 8), seeded_randn({9}, 9), Tensor(), 1e-5);
  check_layer_norm_matches_composed(seeded_randn({6, 9}, 10), Tensor(), seeded_randn({9}, 11), 1e-5);
}

TEST_CASE("layer_norm gives gradients only to the inputs that require them") {
  Tensor x = seeded_randn({4, 6}, 12);
  Tensor w = leaf(seeded_randn({6}, 13)), b = seeded_randn({6}, 14);
  Tensor y = nn::layer_norm(x, w, b);
  y.backward(seeded_randn({4, 6}, 15));
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(b.grad().defined());
  Tensor w2 = leaf(w);
  layer_norm_composed(x, w2, b, 1e-5).backward(seeded_randn({4, 6}, 15));
  CHECK(max_abs_diff(w.grad(), w2.grad()) < 1e-12);
}

TEST_CASE("fused cross_entropy equals the composed version with ignore_index and smoothing") {
  Tensor logits = seeded_randn({10, 7}, 16);
  check_cross_entropy_matches_composed(logits, targets_with_ignored({10}, 7, -100, 3, 17), -100, 0.0);
  check_cross_entropy_matches_composed(logits, targets_with_ignored({10}, 7, 2, 4, 18), 2, 0.25);
  check_cross_entropy_matches_composed(logits, targets_with_ignored({10}, 7, -100, 100, 19), -100, 1.0);
}

TEST_CASE("fused cross_entropy equals the composed version for [B, T, V] logits") {
  Tensor logits = seeded_randn({3, 4, 11}, 20);
  check_cross_entropy_matches_composed(logits, targets_with_ignored({3, 4}, 11, -1, 5, 21), -1, 0.1);
  check_cross_entropy_matches_composed(logits.transpose(0, 1), targets_with_ignored({4, 3}, 11, -1, 5, 22), -1, 0.1);
}

// ------------------------------------------------------------------ finite differences
TEST_CASE("layer_norm passes gradcheck for x, weight and bias, contiguous and transposed x") {
  auto f = [](const std::vector<Tensor>& in) { return nn::layer_norm(in[0], in[1], in[2], 1e-5); };
  Tensor w = leaf(seeded_randn({5}, 24)), b = leaf(seeded_randn({5}, 25));
  check_gradcheck(f, {leaf(seeded_randn({2, 3, 5}, 23)), w, b}, {"x", "weight", "bias"});
  check_gradcheck(f, {leaf(seeded_randn({5, 4}, 26).t()), w, b}, {"x transposed", "weight", "bias"});
  auto no_affine = [](const std::vector<Tensor>& in) { return nn::layer_norm(in[0], Tensor(), Tensor()); };
  check_gradcheck(no_affine, {leaf(seeded_randn({3, 6}, 27))}, {"x"});
}

TEST_CASE("cross_entropy passes gradcheck for logits with ignored targets and smoothing") {
  Tensor target = targets_with_ignored({6}, 5, -100, 4, 28);  // rows 0 and 4 ignored
  auto f = [&](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], target, -100, 0.15); };
  check_gradcheck(f, {leaf(seeded_randn({6, 5}, 29))}, {"logits"});
  Tensor target3 = targets_with_ignored({2, 3}, 4, 1, 4, 30);
  auto f3 = [&](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], target3, 1, 0.0); };
  check_gradcheck(f3, {leaf(seeded_randn({2, 3, 4}, 31))}, {"logits [B, T, V]"});
}

// ------------------------------------------------------------------ float32
// Rows x ~ 1000 + N(0, 1) in float32. The one-pass formula var = E[x^2] - E[x]^2 with
// float32 sums subtracts two numbers near 1e6 whose rounding error (one float32 ulp there
// is 0.06, and C = 512 additions add more) is as large as the variance itself (~1): tried
// on such rows it gave variances of 0.75 and 1.94 where the true ones were 1.00 and 0.99,
// and outputs wrong by up to 11. Two passes (the mean, then squared deviations from it)
// keep the error near float32 rounding.
TEST_CASE("layer_norm in float32 is accurate on rows shifted far from zero") {
  Tensor x64 = add(seeded_randn({64, 512}, 32), 1000.0);
  Tensor w64 = seeded_randn({512}, 33), b64 = seeded_randn({512}, 34);
  Tensor x32 = leaf(x64.to(kFloat32));
  Tensor y32 = nn::layer_norm(x32, w64.to(kFloat32), b64.to(kFloat32));
  REQUIRE(y32.dtype() == kFloat32);
  // float64 reference on the very values float32 holds
  Tensor x_ref = leaf(x32.to(kFloat64));
  Tensor y_ref = layer_norm_composed(x_ref, w64.to(kFloat32).to(kFloat64), b64.to(kFloat32).to(kFloat64), 1e-5);
  CHECK(max_abs_diff(y32, y_ref) < 1e-3);
  Tensor gy = seeded_randn({64, 512}, 35);
  y32.backward(gy.to(kFloat32));
  y_ref.backward(gy);
  CHECK(max_abs_diff(x32.grad(), x_ref.grad()) < 1e-3);
}

TEST_CASE("float32 layer_norm and cross_entropy agree with float64 to float32 precision") {
  Tensor x = seeded_randn({8, 16}, 36), w = seeded_randn({16}, 37), b = seeded_randn({16}, 38);
  Tensor x32 = leaf(x.to(kFloat32)), w32 = leaf(w.to(kFloat32)), b32 = leaf(b.to(kFloat32));
  Tensor x64 = leaf(x), w64 = leaf(w), b64 = leaf(b);
  Tensor gy = seeded_randn({8, 16}, 39);
  nn::layer_norm(x32, w32, b32).backward(gy.to(kFloat32));
  nn::layer_norm(x64, w64, b64).backward(gy);
  CHECK(max_abs_diff(x32.grad(), x64.grad()) < 1e-4);
  CHECK(max_abs_diff(w32.grad(), w64.grad()) < 1e-4);
  CHECK(max_abs_diff(b32.grad(), b64.grad()) < 1e-4);

  Tensor z = seeded_randn({8, 16}, 40), target = targets_with_ignored({8}, 16, -100, 3, 41);
  Tensor z32 = leaf(z.to(kFloat32)), z64 = leaf(z);
  Tensor l32 = nn::cross_entropy(z32, target, -100, 0.1), l64 = nn::cross_entropy(z64, target, -100, 0.1);
  CHECK(l32.dtype() == kFloat32);
  CHECK(std::fabs(l32.item() - l64.item()) < 1e-5);
  l32.backward();
  l64.backward();
  CHECK(max_abs_diff(z32.grad(), z64.grad()) < 1e-6);
}

// ------------------------------------------------------------------ policy
TEST_CASE("cross_entropy with every target ignored gives loss 0 and zero gradient, not NaN") {
  for (double smoothing : {0.0, 0.3}) {
    Tensor logits = leaf(seeded_randn({2, 3, 5}, 42));
    Tensor target = full({2, 3}, -100, kInt64);
    Tensor loss = nn::cross_entropy(logits, target, -100, smoothing);
    CHECK(loss.item() == 0.0);
    loss.backward();
    REQUIRE(logits.grad().defined());
    CHECK(all_finite(logits.grad()));
    CHECK(equal(logits.grad(), zeros({2, 3, 5}, kFloat64)));
  }
}

// ------------------------------------------------------------------ threads
TEST_CASE("layer_norm forward and backward give the same bits with 1 and 2 threads") {
  Tensor x = seeded_randn({4096, 512}, 43, kFloat32), gy = seeded_randn({4096, 512}, 44, kFloat32);
  Tensor w = seeded_randn({512}, 45, kFloat32), b = seeded_randn({512}, 46, kFloat32);
  REQUIRE(x.numel() > kParallelGrain);
  check_same_with_1_and_2_threads([&] {
    Tensor xl = leaf(x), wl = leaf(w), bl = leaf(b);
    Tensor y = nn::layer_norm(xl, wl, bl);
    y.backward(gy);
    return std::vector<Tensor>{y.detach(), xl.grad(), wl.grad(), bl.grad()};
  });
}

TEST_CASE("cross_entropy forward and backward give the same bits with 1 and 2 threads") {
  Tensor logits = seeded_randn({4096, 1000}, 47, kFloat32);
  Tensor target = targets_with_ignored({4096}, 1000, -100, 7, 48);
  check_same_with_1_and_2_threads([&] {
    Tensor z = leaf(logits);
    Tensor loss = nn::cross_entropy(z, target, -100, 0.1);
    loss.backward();
    return std::vector<Tensor>{loss.detach(), z.grad()};
  });
}

// ------------------------------------------------------------------ errors
TEST_CASE("layer_norm rejects weight or bias whose shape is not [C]") {
  Tensor x = ones({2, 3});
  std::string m = error_of([&] { nn::layer_norm(x, ones({4}), Tensor()); });
  CHECK_THAT(m, StartsWith("layer_norm:") && Contains("weight") && Contains("[4]") && Contains("[2,3]"));
  m = error_of([&] { nn::layer_norm(x, ones({3}), ones({1, 3})); });
  CHECK_THAT(m, StartsWith("layer_norm:") && Contains("bias") && Contains("[1,3]") && Contains("[2,3]"));
}

TEST_CASE("layer_norm rejects a 0-dim input") {
  std::string m = error_of([] { nn::layer_norm(scalar_tensor(1.0), Tensor(), Tensor()); });
  CHECK_THAT(m, StartsWith("layer_norm:") && Contains("0-dim"));
}

TEST_CASE("layer_norm rejects parameters of another dtype and non-float inputs") {
  std::string m = error_of([] { nn::layer_norm(ones({2, 3}), ones({3}, kFloat64), Tensor()); });
  CHECK_THAT(m, StartsWith("layer_norm:") && Contains("float64") && Contains("float32") && Contains("[2,3]"));
  m = error_of([] { nn::layer_norm(ones({2, 3}, kInt64), Tensor(), Tensor()); });
  CHECK_THAT(m, StartsWith("layer_norm:") && Contains("int64") && Contains("[2,3]"));
}

TEST_CASE("cross_entropy rejects a target whose shape is not the logits' leading shape") {
  std::string m = error_of([] { nn::cross_entropy(ones({2, 3, 5}), zeros({2, 4}, kInt64)); });
  CHECK_THAT(m, StartsWith("cross_entropy:") && Contains("[2,4]") && Contains("[2,3,5]") && Contains("[2,3]"));
}

TEST_CASE("cross_entropy rejects targets that are not int64") {
  std::string m = error_of([] { nn::cross_entropy(ones({4, 5}), zeros({4})); });
  CHECK_THAT(m, StartsWith("cross_entropy:") && Contains("int64") && Contains("float32") && Contains("[4]"));
}

TEST_CASE("cross_entropy rejects targets outside 0 .. V-1 that are not ignore_index") {
  std::string m = error_of([] { nn::cross_entropy(ones({3, 5}), from_vector(std::vector<int64_t>{0, 5, 1}, {3})); });
  CHECK_THAT(m, StartsWith("cross_entropy:") && Contains("target 5") && Contains("[0, 5)") && Contains("[3,5]"));
  m = error_of([] { nn::cross_entropy(ones({3, 5}), from_vector(std::vector<int64_t>{-1, 2, 1}, {3})); });
  CHECK_THAT(m, StartsWith("cross_entropy:") && Contains("target -1") && Contains("-100"));
  // the same -1 is fine when it is the ignore_index
  CHECK_NOTHROW(nn::cross_entropy(ones({3, 5}), from_vector(std::vector<int64_t>{-1, 2, 1}, {3}), -1));
}

TEST_CASE("cross_entropy rejects label_smoothing outside 0 .. 1") {
  Tensor logits = ones({2, 3}), target = zeros({2}, kInt64);
  for (double s : {-0.1, 1.5, std::nan("")}) {
    std::string m = error_of([&] { nn::cross_entropy(logits, target, -100, s); });
    CHECK_THAT(m, StartsWith("cross_entropy:") && Contains("label_smoothing") && Contains("[0, 1]"));
  }
}

TEST_CASE("vec::exp agrees with std::exp to a few ulp, and gives 0, inf and NaN at the edges") {
  double worst = 0;
  for (float x = -87.0f; x <= 88.5f; x += 0.0137f) {
    const double want = std::exp((double)x), got = ember::vec::exp(x);
    worst = std::max(worst, std::abs(got - want) / want);
  }
  CHECK(worst < 4 * 1.2e-7);  // float's ulp is 2^-23 relative, about 1.2e-7
  CHECK(ember::vec::exp(0.0f) == 1.0f);
  CHECK(ember::vec::exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(ember::vec::exp(-100.0f) == 0.0f);
  CHECK(std::isinf(ember::vec::exp(89.0f)));
  CHECK(std::isinf(ember::vec::exp(std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(ember::vec::exp(std::numeric_limits<float>::quiet_NaN())));
  const float big = ember::vec::exp(88.7f);
  CHECK(std::abs(big / std::exp((double)88.7f) - 1.0) < 1e-6);
}

TEST_CASE("vec::lane_sum and lane_max cover every element, tails included") {
  for (int64_t n : {0, 1, 7, 8, 9, 31}) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; i++) x[i] = float((i * 7) % 11) - 3.0f;
    double want_sum = 0;
    float want_max = -std::numeric_limits<float>::infinity();
    for (float v : x) want_sum += v, want_max = std::max(want_max, v);
    CHECK(ember::vec::lane_sum<double>(n, [&](int64_t i) { return x[i]; }) == want_sum);
    CHECK(ember::vec::lane_max(x.data(), n) == want_max);
  }
}
