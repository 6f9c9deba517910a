// A tensor an op saved for its backward and then modified in place would give a silently
// wrong gradient; the engine refuses that backward, naming the op, as PyTorch does. A
// tensor the backward does not read may be modified freely.
#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include "core/ops.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;

namespace {

struct Case {
  std::string op;
  // builds the graph from x (requires grad) and returns the loss; then `modify` runs
  std::function<Tensor(const Tensor& x, Tensor& saved)> build;
};

}  // namespace

TEST_CASE("modifying a tensor an op saved for backward makes the backward an error naming the op") {
  Generator gen(3);
  const std::vector<Case> cases = {
      {"exp", [](const Tensor& x, Tensor& s) { s = exp(x); return sum(s); }},  // saves its output
      {"mul", [&](const Tensor& x, Tensor& s) { s = randn({3, 4}, kFloat64, &gen); return sum(mul(x, s)); }},
      {"softmax",
       [&](const Tensor& x, Tensor& s) {
         s = softmax(x, -1);  // saves its output
         return sum(mul(s, randn({3, 4}, kFloat64, &gen)));
       }},
      {"matmul", [&](const Tensor& x, Tensor& s) { s = randn({4, 2}, kFloat64, &gen); return sum(matmul(x, s)); }},
      {"masked_fill",
       [](const Tensor& x, Tensor& s) {
         s = from_bools({true, false, false, true}, {4});
         return sum(mul(masked_fill(x, s, 0.0), full({3, 4}, 2.0, kFloat64)));
       }},
      {"layer_norm",
       [&](const Tensor& x, Tensor& s) {
         s = x.detach();  // the input itself
         return sum(mul(nn::layer_norm(x, Tensor(), Tensor()), randn({3, 4}, kFloat64, &gen)));
       }},
      {"scaled_dot_product_attention",
       [](const Tensor& x, Tensor& s) {
         Tensor q = x.reshape({1, 3, 4});
         nn::AttentionResult r = nn::scaled_dot_product_attention(q, q, q);
         s = r.weights;  // shares memory with what backward saved
         return sum(r.output);
       }},
  };
  for (const Case& c : cases) {
    INFO(c.op);
    Tensor x = randn({3, 4}, kFloat64, &gen).requires_grad_();
    Tensor saved;
    Tensor loss = c.build(x, saved);
    // in place, after the forward
    if (saved.dtype() == kBool) saved.detach().copy_(logical_not(saved));
    else saved.detach().copy_(mul(saved.detach(), 2.0));
    const std::string msg = error_of([&] { loss.backward(); });
    CHECK_THAT(msg, Catch::Contains(c.op) && Catch::Contains("modified in place") &&
                        Catch::Contains("test_saved_versions.cpp"));
  }
}

TEST_CASE("modifying a tensor no backward reads is allowed, as in PyTorch") {
  Tensor x = ones({2, 3}, kFloat64).requires_grad_();
  Tensor b = ones({2, 3}, kFloat64);
  Tensor y = add(x, b);     // add saves nothing
  b.fill_(5.0);
  Tensor w = ones({2, 3}, kFloat64);   // mul saves w only when x needs a gradient: it does,
  Tensor z = mul(x, w);                // so w is saved; x is not (w needs no gradient)
  x.detach().copy_(x.detach());        // x changed (its version moves), not read by mul's backward
  sum(add(y, z)).backward();
  CHECK(max_abs_diff(x.grad(), full({2, 3}, 2.0, kFloat64)) == 0);
}
