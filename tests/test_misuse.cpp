// Misuse found by hostile runs: ops given a 0-dim tensor where they index a dim, bounds
// that overflow, a copy whose source shares the destination's memory, values that are not
// finite where a finite one is needed. Each is an Error naming the function, or right.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("ops that index a dim refuse a 0-dim tensor, and slice and narrow never overflow") {
  const Tensor s = scalar_tensor(1.0);
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"select", [&] { (void)s.select(0, 0); }},      {"select", [&] { (void)s.select(-1, 0); }},
      {"narrow", [&] { (void)s.narrow(0, 0, 1); }},   {"slice", [&] { (void)s.slice(0, {}); }},
      {"Tensor::size", [&] { (void)s.size(0); }},     {"Tensor::stride", [&] { (void)s.stride(-1); }},
      {"split", [&] { (void)split(s, 1); }},           {"chunk", [&] { (void)chunk(s, 1); }},
      {"index_select", [&] { (void)index_select(s, 0, zeros({1}, kInt64)); }},
      {"gather", [&] { (void)gather(s, 0, zeros({}, kInt64)); }},
  };
  for (const auto& [op, f] : calls) {
    INFO(op);
    CHECK_THAT(error_of(f), StartsWith(op + ": dim ") && Contains("out of range for a tensor of 0 dims"));
  }
  const Tensor x = arange(6).reshape({2, 3});
  Tensor big_step = x.slice(1, {.start = 0, .end = INT64_MAX, .step = INT64_MAX});
  CHECK(big_step.shape() == Shape{2, 1});
  CHECK(big_step.contiguous().to_vector<int64_t>() == std::vector<int64_t>{0, 3});
  CHECK(x.slice(1, {.start = 1, .end = 3, .step = 5}).shape() == Shape{2, 1});
  CHECK(x.slice(1, {.start = 2, .end = 1}).shape() == Shape{2, 0});
  CHECK_THAT(error_of([&] { (void)x.narrow(1, INT64_MAX, 2); }), StartsWith("narrow: start 9223372036854775807"));
  CHECK_THAT(error_of([&] { (void)x.narrow(1, 1, INT64_MAX); }), StartsWith("narrow: start 1 and length"));
}

TEST_CASE("copy_ from a source sharing the destination's memory copies the source's values") {
  Tensor a = arange(4).reshape({2, 2});
  a.copy_(a.t());
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 1, 3});
  Tensor b = arange(5, kFloat64);
  b.narrow(0, 1, 4).copy_(b.narrow(0, 0, 4));  // overlapping, shifted by one
  CHECK(b.to_vector<double>() == std::vector<double>{0, 0, 1, 2, 3});
  Tensor e = zeros({1, 3}).expand({4, 3});
  CHECK_THAT(error_of([&] { e.copy_(ones({4, 3})); }),
             StartsWith("copy_: several elements of the destination (shape [4,3], strides [0,1])"));
}

TEST_CASE("arange refuses bounds that are not finite and lengths past 2^56") {
  CHECK_THAT(error_of([] { (void)arange(0, INFINITY); }), StartsWith("arange: start, end and step must be finite"));
  CHECK_THAT(error_of([] { (void)arange(0, NAN); }), StartsWith("arange: start, end and step must be finite"));
  CHECK_THAT(error_of([] { (void)arange(0, 1e30); }), Contains("would have more than 2^56 elements"));
  CHECK_THAT(error_of([] { (void)arange(0, 1, 1e-300); }), Contains("would have more than 2^56 elements"));
  CHECK(arange(0, 5, 2).to_vector<int64_t>() == std::vector<int64_t>{0, 2, 4});
  CHECK(arange(3, 0, 1).numel() == 0);
}

TEST_CASE("values that must be finite are refused by name: attention's scale, LayerNorm's eps, random bounds") {
  const Tensor q = ones({1, 2, 4});
  CHECK_THAT(error_of([&] { (void)nn::scaled_dot_product_attention(q, q, q, {}, 0.0, false, nullptr, NAN); }),
             StartsWith("scaled_dot_product_attention: scale must be finite"));
  CHECK_THAT(error_of([&] { (void)nn::scaled_dot_product_attention_tiled(q, q, q, {}, 0.0, false, nullptr, INFINITY); }),
             StartsWith("scaled_dot_product_attention_tiled: scale must be finite"));
  CHECK_THAT(error_of([&] { (void)nn::layer_norm(q, Tensor(), Tensor(), -1e-5); }),
             StartsWith("layer_norm: eps must be non-negative and finite, got -1e-05"));
  CHECK_THAT(error_of([&] { (void)nn::layer_norm(q, Tensor(), Tensor(), NAN); }), StartsWith("layer_norm: eps must be"));
  CHECK_THAT(error_of([] { (void)uniform({2}, 1.0, 0.0); }), StartsWith("uniform: expected finite bounds low <= high"));
  CHECK_THAT(error_of([] { (void)uniform({2}, NAN, 1.0); }), StartsWith("uniform: expected finite bounds"));
  CHECK_THAT(error_of([] { (void)normal({2}, 0.0, NAN); }), StartsWith("normal: expected a finite mean and a finite std"));
  CHECK_THAT(error_of([] { (void)normal({2}, 0.0, -1.0); }), StartsWith("normal: expected a finite mean"));
  CHECK(uniform({3}, 0.5, 0.5).to_vector<float>() == std::vector<float>(3, 0.5f));
}
