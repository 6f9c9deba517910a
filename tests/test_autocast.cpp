// Autocast: float32 matrix products take bfloat16 inputs and sum in float32. Checked
// against float64: the products of the rounded inputs to float32's summation error, and of
// the inputs themselves to the bound docs/mixed-precision.md states, on random and on
// adversarial (wide dynamic range, cancelling) inputs; in every layout, with a bias,
// adding to C, over several blocks of the sum; backward at the forward's precision; the
// same bits on 1 and 2 threads. Skipped where the processor has no AVX512_BF16.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <cmath>
#include <cstring>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/kernels/gemm.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "nn/attention.h"
#include "nn/layers.h"
#include "nn/per_sample.h"

using namespace ember;
using namespace ember::testing;

namespace {

// x rounded to bfloat16 (to nearest even), as a float; subnormals flushed to zero, as
// the products' conversion does
float bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

Tensor rounded(const Tensor& x) {
  Tensor r = x.contiguous().clone();
  float* p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); i++) p[i] = bf16(p[i]);
  return r;
}

struct Bounds {
  double worst_rounded = 0;  // max |C - (rounded A)(rounded B)| / bound, float32 summation
  double worst_exact = 0;    // max |C - A B| / bound, the inputs' rounding included
};

// C (float32, computed under Autocast) against float64 products of A and B [M, K] x [K, N]
// (any layouts; bias [N] or none; c0 the C it was added to, or none)
Bounds check_product(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor& bias = {},
                     const Tensor& c0 = {}) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  Tensor a64 = a.to(kFloat64).contiguous(), b64 = b.to(kFloat64).contiguous();
  Tensor ar = rounded(a).to(kFloat64), br = rounded(b).to(kFloat64);
  Tensor exact = matmul(a64, b64), of_rounded = matmul(ar, br), mags = matmul(abs(a64), abs(b64));
  Tensor start = bias.defined() ? bias.to(kFloat64).expand({M, N}).contiguous()
                 : c0.defined() ? c0.to(kFloat64).contiguous() : zeros({M, N}, kFloat64);
  Tensor got = c.to(kFloat64).contiguous();
  const double *pe = exact.data<double>(), *pr = of_rounded.data<double>(), *pm = mags.data<double>(),
               *ps = start.data<double>(), *pg = got.data<double>();
  Bounds out;
  const double u32 = std::ldexp(1.0, -24), u16 = std::ldexp(1.0, -8);
  for (int64_t i = 0; i < M * N; i++) {
    const double mag = pm[i] + std::abs(ps[i]), sum = pg[i] - ps[i];
    // float32 sums of exact products: one rounding a step, K + 1 steps
    const double sum_bound = double(K + 2) * u32 * mag + 1e-38;
    out.worst_rounded = std::max(out.worst_rounded, std::abs(sum - pr[i]) / sum_bound);
    const double exact_bound = (2 * u16 + u16 * u16) * pm[i] + sum_bound;
    out.worst_exact = std::max(out.worst_exact, std::abs(sum - pe[i]) / exact_bound);
  }
  return out;
}

}  // namespace

TEST_CASE("products under Autocast are bfloat16 products summed in float32, in every layout") {
  if (!bf16_products_available()) {
    WARN("no AVX512_BF16 on this processor: not checked");
    return;
  }
  Generator gen(3);
  struct Case {
    int64_t M, N, K;
    bool ta, tb;
  };
  // edges of the 8 x 32 blocks, an odd sum, sums over several blocks of 256 pairs, rows
  // over several blocks of 256
  for (Case cs : {Case{3, 5, 7, false, false}, Case{37, 70, 129, false, true}, Case{300, 45, 1100, true, false},
                  Case{64, 96, 513, true, true}, Case{130, 257, 64, false, false}, Case{9, 33, 1, false, true},
                  Case{67, 35, 61, true, false}, Case{19, 45, 157, false, false}}) {
    INFO("M " << cs.M << " N " << cs.N << " K " << cs.K << " trans_a " << cs.ta << " trans_b " << cs.tb);
    Tensor a = cs.ta ? randn({cs.K, cs.M}, kFloat32, &gen).t() : randn({cs.M, cs.K}, kFloat32, &gen);
    Tensor b = cs.tb ? randn({cs.N, cs.K}, kFloat32, &gen).t() : randn({cs.K, cs.N}, kFloat32, &gen);
    Tensor plain = matmul(a, b);
    Tensor c;
    {
      Autocast autocast;
      c = matmul(a, b);
    }
    // the smallest products (fewer than 2^17 multiply-adds) stay float32
    const bool bf16 = double(cs.M) * double(cs.N) * double(cs.K) >= double(1 << 17);
    Tensor bias = randn({cs.N}, kFloat32, &gen), c0 = randn({cs.M, cs.N}, kFloat32, &gen);
    Tensor with_bias = empty({cs.M, cs.N}), added = c0.clone();
    {
      Autocast autocast;
      kernel::gemm_batched(with_bias, a, b, false, bias);
      kernel::gemm_batched(added, a, b, true);
    }
    if (!bf16) {
      CHECK(allclose(c, plain, 0, 0));
      continue;
    }
    CHECK(!allclose(c, plain, 0, 0));  // it really ran in bfloat16
    Bounds e = check_product(c, a, b);
    CHECK(e.worst_rounded <= 1.0);
    CHECK(e.worst_exact <= 1.0);
    // with a bias, and added to C
    CHECK(check_product(with_bias, a, b, bias).worst_rounded <= 1.0);
    CHECK(check_product(added, a, b, {}, c0).worst_rounded <= 1.0);
  }
}

TEST_CASE("Autocast's error bound holds on adversarial inputs: wide dynamic range and cancellation") {
  if (!bf16_products_available()) {
    WARN("no AVX512_BF16 on this processor: not checked");
    return;
  }
  Generator gen(5);
  const int64_t M = 40, N = 48, K = 300;
  // magnitudes from 2^-40 to 2^40, random signs
  Tensor scale_a = exp(mul(uniform({M, K}, -40, 40, kFloat32, &gen), std::log(2.0))), scale_b = exp(mul(uniform({K, N}, -40, 40, kFloat32, &gen), std::log(2.0)));
  Tensor a = mul(randn({M, K}, kFloat32, &gen), scale_a), b = mul(randn({K, N}, kFloat32, &gen), scale_b);
  // rows [x, -(x + d)] against columns [y; y], d a thousandth of x: sums of +-x y cancel
  // to a small remainder, which bfloat16's rounding of x and x + d changes entirely
  Tensor x = randn({M, K / 2}, kFloat32, &gen), y = randn({K / 2, N}, kFloat32, &gen);
  Tensor cancel = cat({x, neg(add(x, mul(randn({M, K / 2}, kFloat32, &gen), 1e-3)))}, 1), twice = cat({y, y}, 0);
  for (auto [lhs, rhs] : {std::pair{a, b}, std::pair{cancel, twice}}) {
    Tensor c;
    {
      Autocast bf16;
      c = matmul(lhs, rhs);
    }
    Bounds e = check_product(c, lhs, rhs);
    CHECK(e.worst_rounded <= 1.0);
    CHECK(e.worst_exact <= 1.0);
  }
  // a subnormal input counts as 0, as the instructions flush it
  Tensor tiny = full({64, 64}, 1e-39f), two = full({64, 64}, 2.0f);
  Autocast bf16;
  CHECK(max(abs(matmul(tiny, two))).item<float>() == 0.0f);
}

TEST_CASE("Autocast: backward runs at the forward's precision, float64 and scope exits untouched") {
  if (!bf16_products_available()) {
    WARN("no AVX512_BF16 on this processor: not checked");
    return;
  }
  Generator gen(7);
  Tensor a0 = randn({70, 90}, kFloat32, &gen), b0 = randn({90, 60}, kFloat32, &gen), gy = randn({70, 60}, kFloat32, &gen);
  auto grads = [&](bool forward_bf16, bool backward_bf16) {
    Tensor a = a0.detach().requires_grad_(), b = b0.detach().requires_grad_();
    Tensor y;
    {
      Autocast scope(forward_bf16);
      y = matmul(a, b);
    }
    Autocast scope(backward_bf16);
    y.backward(gy);
    return std::pair{a.grad(), b.grad()};
  };
  auto [ga, gb] = grads(true, false);  // backward() outside the scope: still bfloat16
  CHECK(check_product(ga, gy, b0.t()).worst_rounded <= 1.0);
  CHECK(check_product(gb, a0.t(), gy).worst_rounded <= 1.0);
  auto [fa, fb] = grads(false, true);  // a float32 forward: a float32 backward inside a scope too
  Tensor a = a0.detach().requires_grad_(), b = b0.detach().requires_grad_();
  matmul(a, b).backward(gy);
  CHECK(allclose(fa, a.grad(), 0, 0));
  CHECK(allclose(fb, b.grad(), 0, 0));
  CHECK(!autocast_enabled());
  // float64 products never change
  Tensor d = randn({30, 40}, kFloat64, &gen), e = randn({40, 20}, kFloat64, &gen);
  Tensor plain = matmul(d, e);
  Autocast bf16;
  CHECK(autocast_enabled());
  CHECK(allclose(matmul(d, e), plain, 0, 0));
  {
    Autocast off(false);
    CHECK(!autocast_enabled());
  }
  CHECK(autocast_enabled());
}

TEST_CASE("Autocast: attention's products in bfloat16, the same bits on 1 and 2 threads") {
  if (!bf16_products_available()) {
    WARN("no AVX512_BF16 on this processor: not checked");
    return;
  }
  Generator gen(9);
  Tensor q = randn({4, 4, 96, 32}, kFloat32, &gen), k = randn({4, 4, 80, 32}, kFloat32, &gen),
         v = randn({4, 4, 80, 32}, kFloat32, &gen), gy = randn({4, 4, 96, 32}, kFloat32, &gen);
  Tensor exact = nn::scaled_dot_product_attention(q.to(kFloat64), k.to(kFloat64), v.to(kFloat64)).output;
  auto run = [&](int threads, bool bf16) {
    set_num_threads(threads);
    Tensor ql = q.detach().requires_grad_(), kl = k.detach().requires_grad_(), vl = v.detach().requires_grad_();
    Autocast scope(bf16);
    Tensor out = nn::scaled_dot_product_attention_tiled(ql, kl, vl);
    Tensor big = matmul(randn({600, 256}, kFloat32, &gen).requires_grad_(), randn({256, 300}, kFloat32, &gen));
    out.backward(gy);
    return std::vector<Tensor>{out, ql.grad(), kl.grad(), vl.grad(), big};
  };
  const int before = num_threads();
  const uint64_t seed = gen.seed();
  gen.manual_seed(seed);
  auto one = run(1, true);
  gen.manual_seed(seed);
  auto two = run(2, true);
  set_num_threads(before);
  for (size_t i = 0; i < one.size(); i++) CHECK(allclose(one[i], two[i], 0, 0));
  auto fp32 = run(before, false);
  CHECK(!allclose(one[0], fp32[0], 0, 0));
  // the weights' rounding: a few parts in a thousand of the output's scale
  const double err = max(abs(sub(one[0].to(kFloat64), exact))).item<double>();
  CHECK(err < 2e-2);
  CHECK(err > 1e-5);
}

TEST_CASE("Autocast: per-example gradients of a batch whose products ran in bfloat16") {
  Generator gen(11);
  nn::Linear lin(256, 256, true, &gen);
  const int64_t B = 16, rows = 8;
  Tensor x = randn({B, rows, 256}, kFloat32, &gen), target = randn({B, rows, 256}, kFloat32, &gen);
  auto losses = [&] { return sum(mul(lin.forward(x), target), {1, 2}); };
  nn::NamedTensors plain = nn::per_sample_grads(lin, B, losses), mixed;
  {
    Autocast autocast;  // the batch's products in bfloat16, the examples' short sums in float32
    mixed = nn::per_sample_grads(lin, B, losses);
  }
  for (size_t i = 0; i < plain.size(); i++) {
    const double scale = max(abs(plain[i].second)).item<double>();
    CHECK(max(abs(sub(mixed[i].second, plain[i].second))).item<double>() <= 2e-2 * scale);
  }
}

#if defined(__GLIBC__)
TEST_CASE("Autocast: a large product's bfloat16 pack buffers are given back, not held by the thread") {
  if (!bf16_products_available()) {
    WARN("no AVX512_BF16 on this processor: not checked");
    return;
  }
  Generator gen(12);
  // each tile of C (64 of its 512 rows) packs all of B as bfloat16 pairs: 8 MB, more than a
  // thread keeps
  Tensor a = randn({512, 16384}, kFloat32, &gen), b = randn({16384, 256}, kFloat32, &gen);
  const size_t before = mallinfo2().uordblks;
  {
    Autocast autocast;
    Tensor c = matmul(a, b);
    CHECK(c.size(1) == 256);
  }
  const size_t after = mallinfo2().uordblks;
  INFO("heap in use before " << before << " bytes, after " << after);
  // kept: A's row blocks (2 MB a thread); held, B's packs would add 8 MB a thread
  CHECK(after < before + (size_t(6) << 20));
}
#endif
