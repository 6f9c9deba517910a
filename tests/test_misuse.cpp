// Misuse found by hostile runs: ops given a 0-dim tensor where they index a dim, bounds
// that overflow, a copy whose source shares the destination's memory, values that are not
// finite where a finite one is needed. Each is an Error naming the function, or right.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/random.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/transformer.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
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
  Tensor c = arange(5, kFloat64);
  c.narrow(0, 0, 4).copy_(c.narrow(0, 1, 4));  // the other way
  CHECK(c.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 4});
  Tensor h = arange(6, kFloat64);
  h.narrow(0, 0, 3).copy_(h.narrow(0, 3, 3));  // two halves of one storage, apart
  CHECK(h.to_vector<double>() == std::vector<double>{3, 4, 5, 3, 4, 5});
  Tensor m = arange(6, kFloat64).reshape({3, 2});
  m.select(1, 0).copy_(m.select(1, 1));  // interleaved columns
  CHECK(m.contiguous().to_vector<double>() == std::vector<double>{1, 1, 3, 3, 5, 5});
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
  CHECK_THAT(error_of([] { nn::LayerNorm(3, NAN); }), StartsWith("LayerNorm: eps must be non-negative and finite, got nan"));
  CHECK_THAT(error_of([] { (void)uniform({2}, 1.0, 0.0); }), StartsWith("uniform: expected finite bounds low <= high"));
  CHECK_THAT(error_of([] { (void)uniform({2}, NAN, 1.0); }), StartsWith("uniform: expected finite bounds"));
  CHECK_THAT(error_of([] { (void)normal({2}, 0.0, NAN); }), StartsWith("normal: expected a finite mean and a finite std"));
  CHECK_THAT(error_of([] { (void)normal({2}, 0.0, -1.0); }), StartsWith("normal: expected a finite mean"));
  CHECK(uniform({3}, 0.5, 0.5).to_vector<float>() == std::vector<float>(3, 0.5f));
}

TEST_CASE("sizes whose product overflows 64 bits are refused, even in a tensor of no elements") {
  CHECK_THAT(error_of([] { (void)zeros({0, int64_t(1) << 40, int64_t(1) << 40}); }),
             StartsWith("zeros: a tensor of shape [0,1099511627776,1099511627776] has sizes whose product (zeros aside) exceeds 2^56"));
  CHECK(zeros({0, int64_t(1) << 20, int64_t(1) << 20}).numel() == 0);
  const Tensor e = zeros({0, 4});
  CHECK_THAT(error_of([&] { (void)e.view({int64_t(1) << 62, 4, 0}); }), StartsWith("view: a tensor of shape"));
  CHECK_THAT(error_of([&] { (void)e.reshape({-1, int64_t(1) << 62, int64_t(1) << 62}); }), StartsWith("reshape: "));
  CHECK(e.view({2, 0, 3}).shape() == Shape{2, 0, 3});
  const Tensor x = arange(6);
  CHECK_THAT(error_of([&] { (void)split(x, {INT64_MAX, INT64_MAX, 2}); }),
             StartsWith("split: sizes") && Contains("add up to more than 2^63"));
  const std::vector<Tensor> one = chunk(x, INT64_MAX);
  CHECK(one.size() == 6);
  CHECK(chunk(x, 4).size() == 3);
  CHECK(chunk(x, 4)[0].numel() == 2);
}

TEST_CASE("var's correction may be any int64, randint any range inside int64") {
  const Tensor x = arange(0.0, 4.0, 1.0, kFloat64);  // sum of squared deviations 5
  CHECK(var(x, {0}, INT64_MIN).item<double>() == Approx(5.0 / 0x1p63));
  CHECK(std::isinf(var(x, {0}, INT64_MAX).item<double>()));
  CHECK(var(x, {0}, 1).item<double>() == Approx(5.0 / 3));
  Generator g(7);
  const Tensor r = randint(INT64_MIN, INT64_MAX, {1000}, &g);
  const std::vector<int64_t> v = r.to_vector<int64_t>();
  CHECK(*std::min_element(v.begin(), v.end()) < 0);
  CHECK(*std::max_element(v.begin(), v.end()) > 0);
  Generator g1(3), g2(3);  // a small range draws what it always drew
  const std::vector<int64_t> small = randint(-5, 5, {200}, &g1).to_vector<int64_t>();
  for (int64_t s : small) CHECK((s >= -5 && s < 5));
  CHECK(randint(-5, 5, {200}, &g2).to_vector<int64_t>() == small);
}

TEST_CASE("int64 arithmetic wraps around modulo 2^64, as PyTorch's does") {
  const Tensor m = sub(mul(full({2}, 0x1p62, kInt64), 2.0), 1.0);  // INT64_MAX
  // (built without overflow: 2^62 * 2 wraps to INT64_MIN, minus 1 wraps to INT64_MAX)
  CHECK(m.to_vector<int64_t>() == std::vector<int64_t>{INT64_MAX, INT64_MAX});
  CHECK(add(m, 1.0).to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN, INT64_MIN});
  CHECK(add(m, m).to_vector<int64_t>() == std::vector<int64_t>{-2, -2});
  CHECK(mul(m, m).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(sub(neg(m), 2.0).to_vector<int64_t>() == std::vector<int64_t>{INT64_MAX, INT64_MAX});
  CHECK(neg(add(m, 1.0)).to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN, INT64_MIN});
  CHECK(sum(m).item<int64_t>() == -2);
  CHECK(sum(m.view({1, 2}), {0}).to_vector<int64_t>() == std::vector<int64_t>{INT64_MAX, INT64_MAX});
  CHECK(sum(full({3, 70}, 0x1p62, kInt64), {0}).to_vector<int64_t>()[69] == -(int64_t(1) << 62));  // 3 * 2^62 wrapped
}

TEST_CASE("a value int64 cannot hold is refused by the conversion that meets it") {
  const double nan = std::nan("");
  for (double v : {nan, (double)INFINITY, 1e300, -1e19, 0x1p63}) {
    INFO(v);
    CHECK_THAT(error_of([&] { (void)full({2}, v, kInt64); }), StartsWith("fill_: the value ") && Contains("int64"));
    CHECK_THAT(error_of([&] { zeros({2}, kInt64).fill_(v); }), StartsWith("fill_: the value "));
    CHECK_THAT(error_of([&] { (void)full({3}, v, kFloat64).to(kInt64); }),
               StartsWith("to: element 0 (") && Contains("of a float64 tensor of shape [3] cannot be converted to int64"));
    CHECK_THAT(error_of([&] { zeros({3}, kInt64).copy_(full({3}, v, kFloat32)); }), StartsWith("copy_: element 0"));
    CHECK_THAT(error_of([&] { (void)masked_fill(zeros({2}, kInt64), ones({2}, kBool), v); }),
               StartsWith("masked_fill: the value "));
    CHECK_THAT(error_of([&] { (void)add(zeros({2}, kInt64), v); }), StartsWith("add: the value "));
  }
  CHECK(full({2}, -0x1p63, kInt64).to_vector<int64_t>()[0] == INT64_MIN);
  CHECK(full({2}, -2.7, kFloat64).to(kInt64).to_vector<int64_t>()[1] == -2);  // toward zero, as PyTorch
  CHECK(full({2}, 2.5, kInt64).to_vector<int64_t>()[0] == 2);
  const Tensor mask = tensor({true, false});
  CHECK(masked_fill(zeros({2}, kInt64), mask, 2.7).to_vector<int64_t>() == std::vector<int64_t>{2, 0});
  CHECK(masked_fill(zeros({2}, kInt64), mask, -2.7).to_vector<int64_t>() == std::vector<int64_t>{-2, 0});
  CHECK_THAT(error_of([] { (void)mul(ones({2}, kInt64), 0.5); }),
             StartsWith("mul: the scalar 0.5 is not an integer, and the tensor is int64"));
  CHECK(mul(ones({2}, kInt64), 3.0).to_vector<int64_t>()[0] == 3);
}

TEST_CASE("a reduction too large for memory is OutOfMemory, not std::bad_alloc") {
  const Tensor x = ones({1}).expand({int64_t(1) << 55});
  try {
    (void)sum(x);
    FAIL("sum of 2^55 elements returned");
  } catch (const OutOfMemory& e) {
    CHECK_THAT(std::string(e.what()), StartsWith("sum: out of memory: reducing a tensor of shape [36028797018963968]"));
  }
}

TEST_CASE("in-place ops on a tensor that requires grad are refused in grad mode and allowed under NoGradGuard") {
  Tensor w = ones({2, 3}, kFloat64).requires_grad_();
  CHECK_THAT(error_of([&] { w.fill_(2.0); }),
             StartsWith("fill_: a leaf tensor that requires grad (shape [2,3]) cannot be changed in place while grad "
                        "mode is on; change it under NoGradGuard"));
  CHECK_THAT(error_of([&] { w.zero_(); }), StartsWith("fill_: a leaf tensor that requires grad"));
  CHECK_THAT(error_of([&] { w.copy_(zeros({2, 3}, kFloat64)); }), StartsWith("copy_: a leaf tensor that requires grad"));
  // a view of it is part of the graph: refused too, naming the op that made it
  CHECK_THAT(error_of([&] { w.select(0, 1).fill_(5.0); }),
             StartsWith("fill_: a tensor that requires grad (shape [3], computed by select) cannot be changed in place"));
  Tensor y = mul(w, 2.0);
  CHECK_THAT(error_of([&] { y.copy_(zeros({2, 3}, kFloat64)); }), Contains("computed by mul"));
  CHECK(w.to_vector<double>() == std::vector<double>(6, 1.0));  // nothing changed
  {
    NoGradGuard ng;
    w.fill_(3.0);
    w.select(0, 1).copy_(full({3}, 4.0, kFloat64));
  }
  CHECK(w.to_vector<double>() == std::vector<double>{3, 3, 3, 4, 4, 4});
  CHECK(w.requires_grad());
  w.detach().fill_(7.0);  // a detached alias does not require grad: allowed, as in PyTorch
  CHECK(w.to_vector<double>()[0] == 7.0);
  Tensor plain = ones({2});
  plain.fill_(2.0);  // a tensor outside autograd: always allowed
  CHECK(plain.to_vector<float>()[1] == 2.0f);
}

TEST_CASE("a backward given to record() by hand is checked: its gradient count and shapes, naming the op") {
  Tensor x = ones({2, 3}).requires_grad_(), w = ones({2, 3}).requires_grad_();
  auto op = [&](BackwardFn bw) {
    Tensor out = empty({2, 3});
    out.copy_(x.detach());
    return record("myop", Loc::current(), out, {x, w}, std::move(bw));
  };
  Tensor few = op([](const Tensor& g) { return std::vector<Tensor>{g}; });
  CHECK_THAT(error_of([&] { sum(few).backward(); }),
             StartsWith("myop: its backward returned 1 gradient for 2 inputs"));
  Tensor none = op([](const Tensor&) { return std::vector<Tensor>{}; });
  CHECK_THAT(error_of([&] { sum(none).backward(); }), StartsWith("myop: its backward returned 0 gradients for 2 inputs"));
  Tensor flat = op([](const Tensor& g) { return std::vector<Tensor>{g.reshape({6}), g}; });
  CHECK_THAT(error_of([&] { sum(flat).backward(); }),
             StartsWith("myop: its backward returned a gradient of shape [6] for input 0 of shape [2,3]"));
  Tensor wide = op([](const Tensor& g) { return std::vector<Tensor>{g, g.unsqueeze(0).expand({4, 2, 3})}; });
  sum(wide).backward();  // a broadcast gradient is summed to its input, as PyTorch's engine does
  CHECK(w.grad().to_vector<float>() == std::vector<float>(6, 4.0f));
  CHECK_THAT(error_of([] { (void)sum_to(arange(6).to(kFloat32), {2, 3}); }),
             StartsWith("sum_to: a gradient of shape [6] cannot be summed to shape [2,3]"));
}

TEST_CASE("a positional table too large to hold is refused before it is computed") {
  CHECK_THAT(error_of([] { nn::PositionalEncoding pe(4, int64_t(1) << 62); }),
             StartsWith("empty: a tensor of shape [4611686018427387904,4] would have more than 2^56 elements"));
  CHECK_THAT(error_of([] { nn::PositionalEncoding pe(int64_t(1) << 32, int64_t(1) << 32); }), Contains("2^56"));
  try {
    nn::PositionalEncoding pe(1 << 16, int64_t(1) << 36);  // 2^52 elements: past memory
    FAIL("a 2^52-element table was made");
  } catch (const OutOfMemory&) {
  }
}

TEST_CASE("an int64 or bool tensor compares exactly with a number, and where takes no fraction into one") {
  const Tensor z = tensor({int64_t(0), int64_t(1), INT64_MAX});
  auto bools = [](const Tensor& t) { return t.to_vector<uint8_t>(); };
  CHECK(bools(eq(z, 0.5)) == std::vector<uint8_t>{0, 0, 0});
  CHECK(bools(ge(z, 0.5)) == std::vector<uint8_t>{0, 1, 1});
  CHECK(bools(lt(z, 0.5)) == std::vector<uint8_t>{1, 0, 0});
  CHECK(bools(le(z, 1.0)) == std::vector<uint8_t>{1, 1, 0});
  CHECK(bools(eq(z, 0x1p63)) == std::vector<uint8_t>{0, 0, 0});  // INT64_MAX is not 2^63
  CHECK(bools(lt(z, 1e300)) == std::vector<uint8_t>{1, 1, 1});
  CHECK(bools(gt(z, -1e300)) == std::vector<uint8_t>{1, 1, 1});
  CHECK(bools(ne(z, std::nan(""))) == std::vector<uint8_t>{1, 1, 1});
  CHECK(bools(eq(z, std::nan(""))) == std::vector<uint8_t>{0, 0, 0});
  CHECK(bools(eq(tensor({true, false}), 2.0)) == std::vector<uint8_t>{0, 0});
  CHECK(bools(eq(tensor({true, false}), 1.0)) == std::vector<uint8_t>{1, 0});
  // a float tensor compares in its own dtype, as PyTorch's does
  CHECK(bools(eq(tensor({0.1f}), 0.1)) == std::vector<uint8_t>{1});
  const Tensor cond = tensor({true, false, true});
  CHECK_THAT(error_of([&] { (void)where(cond, z, 0.5); }), StartsWith("where: the scalar 0.5 is not an integer"));
  CHECK_THAT(error_of([&] { (void)where(cond, z, 1e300); }), StartsWith("where: the value 1e+300 cannot be converted to int64"));
  CHECK(where(cond, z, -4.0).to_vector<int64_t>() == std::vector<int64_t>{0, -4, INT64_MAX});
  CHECK_THAT(error_of([&] { (void)where(cond, cond, 0.5); }), StartsWith("where: the scalar 0.5 is not a bool"));
}

TEST_CASE("cat refuses sizes whose sum passes 2^63 or 2^56, naming itself") {
  std::vector<Tensor> many(256, zeros({int64_t(1) << 56, 0}));
  CHECK_THAT(error_of([&] { (void)cat(many, 0); }), StartsWith("cat: the sizes in dim 0 of 256 tensors"));
  std::vector<Tensor> three(3, zeros({int64_t(1) << 55, 0}));
  CHECK_THAT(error_of([&] { (void)cat(three, 0); }),
             StartsWith("cat: a tensor of shape [108086391056891904,0] has sizes whose product (zeros aside) exceeds 2^56"));
  CHECK(cat(std::vector<Tensor>(2, zeros({int64_t(1) << 55, 0})), 0).shape() == Shape{int64_t(1) << 56, 0});
}

TEST_CASE("copy_ from a source in the graph is refused in grad mode rather than losing its gradient") {
  Tensor x = ones({3}, kFloat64).requires_grad_();
  Tensor d = zeros({3}, kFloat64);
  CHECK_THAT(error_of([&] { d.copy_(mul(x, 2.0)); }),
             StartsWith("copy_: the source requires grad (shape [3]) and copy_ is not recorded in the graph"));
  Tensor buffer = zeros({2, 3}, kFloat64);
  CHECK_THAT(error_of([&] { buffer.select(0, 1).copy_(x); }), StartsWith("copy_: the source requires grad"));
  d.copy_(mul(x, 2.0).detach());
  CHECK(d.to_vector<double>() == std::vector<double>{2, 2, 2});
  {
    NoGradGuard ng;
    d.copy_(mul(x, 3.0));
  }
  CHECK(d.to_vector<double>() == std::vector<double>{3, 3, 3});
}

TEST_CASE("integer reads refuse what the integer type cannot hold, and unsigned literals past int64 are refused") {
  CHECK_THAT(error_of([] { (void)tensor({INT64_MAX}).item<int>(); }),
             StartsWith("item: element 0 (9223372036854775807) of a int64 tensor does not fit the integer type asked for"));
  CHECK_THAT(error_of([] { (void)full({1}, 3e9).item<int>(); }), StartsWith("item: element 0 (3e+09)"));
  CHECK_THAT(error_of([] { (void)full({1}, -1.0).item<uint8_t>(); }), StartsWith("item: element 0 (-1)"));
  CHECK_THAT(error_of([] { (void)tensor({int64_t(-1)}).item<uint64_t>(); }), StartsWith("item: element 0 (-1)"));
  CHECK_THAT(error_of([] { (void)tensor({INT64_MAX}).to_vector<int>(); }), StartsWith("to_vector: element 0"));
  CHECK_THAT(error_of([] { (void)tensor({int64_t(300)}).to_vector<uint8_t>(); }), StartsWith("to_vector: element 0 (300)"));
  CHECK(tensor({int64_t(-7)}).item<int>() == -7);
  CHECK(full({1}, -0.5).item<unsigned>() == 0u);  // toward zero, and 0 fits
  CHECK(tensor(INT64_MAX).item<uint64_t>() == uint64_t(INT64_MAX));
  CHECK_THAT(error_of([] { (void)tensor({UINT64_MAX}); }), StartsWith("tensor: the value 18446744073709551615 does not fit int64"));
  CHECK_THAT(error_of([] { (void)tensor(uint64_t(1) << 63); }), StartsWith("tensor: the value 9223372036854775808"));
  CHECK_THAT(error_of([] { (void)from_vector({UINT64_MAX, uint64_t(1)}, {2}); }), StartsWith("from_vector: the value 18446744073709551615"));
  CHECK(tensor({uint64_t(5)}).item<int64_t>() == 5);
}

TEST_CASE("DropoutDraws::take refuses a probability outside [0, 1]") {
  Generator g(1);
  for (double p : {-1.0, 2.0, std::nan("")})
    CHECK_THAT(error_of([&] { (void)DropoutDraws::take(g, p, {2, 3}); }), StartsWith("DropoutDraws::take: probability must be in [0, 1]"));
}

TEST_CASE("every layer and stack checks its configuration when built, also in a release build") {
  const nn::LayerConfig odd{.d_model = 10, .num_heads = 3, .dim_feedforward = 16};
  CHECK_THAT(error_of([&] { nn::EncoderLayer l(odd); }), Equals("EncoderLayer: d_model 10 is not divisible by num_heads 3"));
  CHECK_THAT(error_of([&] { nn::DecoderLayer l(odd); }), Equals("DecoderLayer: d_model 10 is not divisible by num_heads 3"));
  CHECK_THAT(error_of([&] { nn::Encoder e({.dropout_p = 1.0}, 2); }), Equals("Encoder: dropout must be in [0, 1), got 1"));
  CHECK_THAT(error_of([&] { nn::Decoder d({.score_scale = 0.0}, 2); }),
             Equals("Decoder: score_scale must be positive and finite, got 0"));
  const nn::LayerConfig small{.d_model = 8, .num_heads = 2, .dim_feedforward = 16};
  CHECK_THAT(error_of([&] { nn::Encoder e(small, 0); }), Equals("Encoder: num_layers must be in [1, 65536], got 0"));
  CHECK_THAT(error_of([&] { nn::Decoder d(small, -3); }), Equals("Decoder: num_layers must be in [1, 65536], got -3"));
  CHECK_THAT(error_of([&] { nn::Encoder e(small, INT64_MAX); }),
             Equals("Encoder: num_layers must be in [1, 65536], got 9223372036854775807"));
  CHECK_THAT(error_of([&] { nn::EncoderLayer l({.d_model = int64_t(1) << 40, .num_heads = 2}); }),
             Equals("EncoderLayer: d_model and dim_feedforward must be at most 2^20, got 1099511627776 and 512"));
  CHECK(nn::Encoder(small, 1).layers->size() == 1);
}
