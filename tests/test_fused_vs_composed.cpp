// The fused softmax and log_softmax against the same computation composed of primitive
// ops (exp, sum, div, log), values and gradients, in float64; and the small facts that
// had no test: argmin, and the storage allocation counter.
#include <catch2/catch.hpp>

#include "core/ops.h"
#include "core/storage.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;

namespace {

// softmax along dim from primitives: exp(x - max) / sum(exp(x - max))
Tensor composed_softmax(const Tensor& x, int64_t dim) {
  Tensor e = exp(sub(x, amax(x, {dim}, true).detach()));
  return div(e, sum(e, {dim}, true));
}
Tensor composed_log_softmax(const Tensor& x, int64_t dim) {
  Tensor shifted = sub(x, amax(x, {dim}, true).detach());
  return sub(shifted, log(sum(exp(shifted), {dim}, true)));
}

// The value and the gradient (under a non-uniform upstream gradient) of f at x.
std::pair<Tensor, Tensor> value_and_grad(const std::function<Tensor(const Tensor&)>& f, const Tensor& x_in,
                                         const Tensor& upstream) {
  Tensor x = x_in.detach().requires_grad_();
  Tensor y = f(x);
  sum(mul(y, upstream)).backward();
  return {y.detach(), x.grad()};
}

}  // namespace

TEST_CASE("the fused softmax and log_softmax equal their composition from exp, sum, div and log") {
  Generator gen(7);
  const Tensor base = mul(randn({3, 5, 7}, kFloat64, &gen), 4.0);
  const Tensor strided = base.transpose(0, 2);  // [7, 5, 3], not contiguous
  for (const Tensor& x : {base, strided}) {
    for (int64_t dim : {int64_t(0), int64_t(-1), int64_t(1)}) {
      const Tensor up = randn(x.shape(), kFloat64, &gen);
      auto [fv, fg] = value_and_grad([dim](const Tensor& t) { return softmax(t, dim); }, x, up);
      auto [cv, cg] = value_and_grad([dim](const Tensor& t) { return composed_softmax(t, dim); }, x, up);
      CHECK(max_abs_diff(fv, cv) < 1e-14);
      CHECK(max_abs_diff(fg, cg) < 1e-13);
      auto [lv, lg] = value_and_grad([dim](const Tensor& t) { return log_softmax(t, dim); }, x, up);
      auto [clv, clg] = value_and_grad([dim](const Tensor& t) { return composed_log_softmax(t, dim); }, x, up);
      CHECK(max_abs_diff(lv, clv) < 1e-13);
      CHECK(max_abs_diff(lg, clg) < 1e-12);
    }
  }
}

TEST_CASE("argmin gives the index of the first smallest element along a dim") {
  Tensor x = from_vector(std::vector<double>{3, 1, 2, 1, 0, 5, 0, 4}, {2, 4}, kFloat64);
  CHECK(argmin(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});   // ties: the first
  CHECK(argmin(x, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1, 0});
  CHECK(argmin(x, -1, true).shape() == Shape{2, 1});
  CHECK(argmin(x, 1).dtype() == kInt64);
  CHECK_THAT(error_of([&] { argmin(x, 2); }), Catch::Contains("out of range"));
}

TEST_CASE("Storage counts every allocation, and a freed graph gives its storages back") {
  const int64_t before = Storage::total_allocations(), live = Storage::live_count();
  {
    Tensor a = zeros({4, 4}), b = ones({4, 4});
    Tensor c = add(a, b);
    CHECK(Storage::total_allocations() - before >= 3);
    CHECK(Storage::live_count() - live >= 3);
  }
  CHECK(Storage::live_count() == live);
}
