// Primitive ops composed into layer norm and cross-entropy reproduce the float64
// reference cases in tests/data (see tests/data/README.md), values and gradients.
#include <catch2/catch.hpp>

#include "test_util.h"

#include "io/h5.h"
#include "core/ops.h"

using namespace ember;
using namespace ember::testing;

static std::string data(const char* f) { return std::string(EMBER_TEST_DATA_DIR) + "/" + f; }


TEST_CASE("layer norm composed of primitives matches the reference case") {
  const std::string f = data("layer_norm.h5");
  REQUIRE(h5::attr_string(f, "/", "kind") == "layer_norm");
  const double eps = h5::attr_double(f, "/", "eps");
  Tensor x = h5::read(f, "input/x").requires_grad_();
  Tensor w = h5::read(f, "params/weight").requires_grad_();
  Tensor b = h5::read(f, "params/bias").requires_grad_();
  Tensor gy = h5::read(f, "input/grad_output");

  Tensor mu = mean(x, {-1}, true);
  Tensor v = var(x, {-1}, /*correction=*/0, true);
  Tensor y = add(mul(mul(sub(x, mu), rsqrt(add(v, eps))), w), b);
  CHECK(max_abs_diff(y, h5::read(f, "expected/output")) < 1e-12);

  y.backward(gy);
  CHECK(max_abs_diff(x.grad(), h5::read(f, "expected/grad/x")) < 1e-12);
  CHECK(max_abs_diff(w.grad(), h5::read(f, "expected/grad/weight")) < 1e-12);
  CHECK(max_abs_diff(b.grad(), h5::read(f, "expected/grad/bias")) < 1e-12);
}

// mean over non-ignored targets of -(1-s) log p[target] - s/V sum_v log p[v]
static void check_cross_entropy(const char* file) {
  const std::string f = data(file);
  REQUIRE(h5::attr_string(f, "/", "kind") == "cross_entropy");
  const double ignore = h5::attr_double(f, "/", "ignore_index");
  const double s = h5::attr_double(f, "/", "label_smoothing");
  Tensor logits = h5::read(f, "input/logits").requires_grad_();
  Tensor target = h5::read(f, "input/target");
  REQUIRE(target.dtype() == kInt64);
  const int64_t V = logits.size(1);

  Tensor keep = ne(target, ignore);                            // [N] bool
  Tensor safe = where(keep, target, zeros({}, kInt64));        // ignored rows read class 0
  Tensor logp = log_softmax(logits, 1);                        // [N, V]
  Tensor nll = neg(gather(logp, 1, safe.unsqueeze(1)).squeeze(1));
  Tensor smooth = neg(mean(logp, {1}));
  Tensor per_row = add(mul(nll, 1.0 - s), mul(smooth, s));
  Tensor w = keep.to(kFloat64);
  Tensor loss = div(sum(mul(per_row, w)), sum(w));
  CHECK(std::fabs(loss.item() - h5::read(f, "expected/loss").item()) < 1e-12);
  loss.backward();
  CHECK(max_abs_diff(logits.grad(), h5::read(f, "expected/grad/logits")) < 1e-12);
  CHECK(V > 1);
}

TEST_CASE("cross-entropy composed of primitives matches the reference case") {
  check_cross_entropy("cross_entropy.h5");
}

TEST_CASE("cross-entropy with label smoothing composed of primitives matches the reference case") {
  check_cross_entropy("cross_entropy_smoothing.h5");
}

TEST_CASE("h5::read names the file and the key when a dataset is missing") {
  const std::string f = data("layer_norm.h5");
  try {
    h5::read(f, "input/nope");
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("h5::read") == 0);
    CHECK(m.find("layer_norm.h5") != std::string::npos);
    CHECK(m.find("input/nope") != std::string::npos);
  }
  CHECK_THROWS_WITH(h5::read(data("does_not_exist.h5"), "x"), Catch::Contains("does_not_exist.h5"));
}
