// Results do not depend on the thread count: every kernel that runs in parallel gives
// bitwise the same values with 1 and with 2 threads, forward and backward. The tensors
// are larger than kParallelGrain elements, so that the parallel paths really run.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <array>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "core/kernels/gemm.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "nn/attention.h"

using namespace ember;
using namespace ember::testing;

extern "C" void openblas_set_num_threads(int);

namespace {



Tensor seeded_randn(const Shape& shape, uint64_t seed, DType dtype = kFloat32) {
  Generator gen(seed);
  return randn(shape, dtype, &gen);
}

// An input large enough for the parallel paths.
Tensor big_randn(const Shape& shape, uint64_t seed, DType dtype = kFloat32) {
  Tensor t = seeded_randn(shape, seed, dtype);
  REQUIRE(t.numel() > kParallelGrain);
  return t;
}

// A new leaf over the same values, so each run accumulates its own gradient.
Tensor fresh_leaf(const Tensor& values) { return values.detach().requires_grad_(); }

}  // namespace

TEST_CASE("num_threads reports what set_num_threads asked for") {
  const int before = num_threads();
  set_num_threads(1);
  CHECK(num_threads() == 1);
  set_num_threads(2);
  CHECK(num_threads() == 2);
  CHECK_THAT(error_of([] { set_num_threads(0); }),
             Catch::Matchers::Equals("set_num_threads: expected a thread count in [1, 1024], got 0"));
  CHECK_THAT(error_of([] { set_num_threads(INT32_MAX); }),
             Catch::Matchers::StartsWith("set_num_threads: expected a thread count in [1, 1024], got 2147483647"));
  CHECK(num_threads() == 2);  // a refused count changes nothing
  set_num_threads(before);
  CHECK(num_threads() == before);
}

TEST_CASE("elementwise ops give the same bits with 1 and 2 threads") {
  Tensor a = big_randn({256, 1024}, 1), b = big_randn({256, 1024}, 2), bias = seeded_randn({1024}, 3);
  Tensor positive = add(abs(b), 0.5);
  check_same_with_1_and_2_threads([&] {
    return std::vector<Tensor>{add(a, b),       sub(a, b),          mul(a, b),          div(a, positive),
                               exp(a),          log(positive),      sqrt(positive),     rsqrt(positive),
                               tanh(a),         sigmoid(a),         relu(a),            gelu(a),
                               gelu(a, true),   pow(positive, 1.5), pow(a, positive),   square(a),
                               add(a, bias),    add(a.t(), b.t()),  maximum(a, b),      where(gt(a, b), a, b),
                               mul(a, 0.25),    rdiv(1.0, positive), masked_fill(a, lt(b, 0.0), -1.0),
                               a.t().contiguous()};
  });
}

TEST_CASE("elementwise backward gives the same bits with 1 and 2 threads") {
  Tensor xv = big_randn({256, 1024}, 4), yv = big_randn({256, 1024}, 5), gy = big_randn({256, 1024}, 6);
  check_same_with_1_and_2_threads([&] {
    Tensor x = fresh_leaf(xv), y = fresh_leaf(yv);
    Tensor z = add(mul(tanh(x), sigmoid(y)), div(gelu(x), add(exp(y), 1.0)));
    z.backward(gy);
    return std::vector<Tensor>{z, x.grad(), y.grad()};
  });
}

TEST_CASE("sum over everything and over dims gives the same bits with 1 and 2 threads") {
  Tensor a = big_randn({256, 1024}, 7);
  Tensor million = big_randn({1 << 20}, 8);
  Tensor million64 = big_randn({1 << 20}, 9, kFloat64);
  Tensor tall = big_randn({65536, 4}, 10);  // each output sums 65536 elements: several chunks
  check_same_with_1_and_2_threads([&] {
    return std::vector<Tensor>{sum(a),
                               sum(a, {0}),
                               sum(a, {1}),
                               sum(a, {0, 1}, /*keepdim=*/true),
                               sum(a.t(), {1}),
                               sum(million),
                               sum(million64),
                               sum(tall, {0}),
                               sum(million.view({16, 256, 256}), {0, 2})};
  });
}

TEST_CASE("mean and amax give the same bits with 1 and 2 threads, forward and backward") {
  Tensor av = big_randn({256, 1024}, 11);
  Tensor g0 = seeded_randn({1024}, 12), g1 = seeded_randn({256}, 13);
  check_same_with_1_and_2_threads([&] {
    Tensor a = fresh_leaf(av);
    Tensor m_all = mean(a), m0 = mean(a, {0}), x1 = amax(a, {1}), x_all = amax(a);
    add(add(sum(mul(m0, g0)), sum(mul(x1, g1))), add(m_all, x_all)).backward();
    return std::vector<Tensor>{m_all, m0, mean(a, {1}), x1, x_all, amin(a, {0}), a.grad()};
  });
}

TEST_CASE("softmax and log_softmax give the same bits with 1 and 2 threads, forward and backward") {
  Tensor xv = big_randn({256, 1024}, 14), gy = big_randn({256, 1024}, 15);
  for (int64_t dim : {-1, 0}) {
    INFO("dim " << dim);
    check_same_with_1_and_2_threads([&] {
      Tensor x = fresh_leaf(xv), y = fresh_leaf(xv);
      Tensor s = softmax(x, dim), ls = log_softmax(y, dim);
      s.backward(gy);
      ls.backward(gy);
      return std::vector<Tensor>{s, ls, x.grad(), y.grad()};
    });
  }
}

TEST_CASE("matmul gives the same bits with 1 and 2 threads, forward and backward") {
  Tensor av = big_randn({512, 256}, 16), bv = big_randn({256, 384}, 17), gy = big_randn({512, 384}, 18);
  check_same_with_1_and_2_threads([&] {
    Tensor a = fresh_leaf(av), b = fresh_leaf(bv);
    Tensor c = matmul(a, b);
    c.backward(gy);
    return std::vector<Tensor>{c, a.grad(), b.grad()};
  });
}

TEST_CASE("matmul gives the same bits with 1 and 2 threads at shapes that split along M or N, transposed or not") {
  // [M, K] x [K, N]: tall, wide, odd sizes, a long K, and shapes near BLAS's own
  // small-matrix thresholds.
  const std::vector<std::array<int64_t, 3>> shapes = {
      {640, 64, 64}, {40, 512, 1000}, {333, 257, 129}, {64, 2048, 96}, {1000, 8, 1000}, {17, 300, 700},
      // few rows or a short sum: ember's own skinny kernels, not OpenBLAS
      {10, 512, 512}, {3, 1000, 333}, {16, 77, 1030}, {900, 16, 700}, {500, 5, 129}};
  for (auto [M, K, N] : shapes) {
    for (int transposed = 0; transposed < 4; transposed++) {
      INFO("M " << M << " K " << K << " N " << N << " transposed " << transposed);
      const bool ta = transposed & 1, tb = transposed & 2;
      Tensor av = seeded_randn(ta ? Shape{K, M} : Shape{M, K}, 40 + M);
      Tensor bv = seeded_randn(tb ? Shape{N, K} : Shape{K, N}, 41 + N);
      Tensor gy = seeded_randn({M, N}, 42 + K);
      check_same_with_1_and_2_threads([&] {
        Tensor a = fresh_leaf(av), b = fresh_leaf(bv);
        Tensor c = matmul(ta ? a.mT() : a, tb ? b.mT() : b);
        c.backward(gy);
        return std::vector<Tensor>{c, a.grad(), b.grad()};
      });
    }
  }
}

TEST_CASE("matmul keeps the thread count, even after the program set OpenBLAS's own") {
  // OpenBLAS runs on one thread under ember; putting it there must not change the
  // thread count of ember's (OpenMP) loops, which OpenBLAS's OpenMP build shares.
  NumThreadsGuard threads(2);
  openblas_set_num_threads(2);  // as a program that also calls OpenBLAS directly might
  Tensor a = seeded_randn({256, 256}, 50), b = seeded_randn({256, 256}, 51);
  Tensor c = matmul(a, b);
  CHECK(num_threads() == 2);
  CHECK(c.shape() == Shape{256, 256});
}

TEST_CASE("batched matmul gives the same bits with 1 and 2 threads, forward and backward") {
  Tensor av = big_randn({64, 32, 32}, 19), bv = big_randn({64, 32, 32}, 20), gy = big_randn({64, 32, 32}, 21);
  Tensor shared = seeded_randn({32, 32}, 22);  // broadcast over the batch
  check_same_with_1_and_2_threads([&] {
    Tensor a = fresh_leaf(av), b = fresh_leaf(bv), w = fresh_leaf(shared);
    Tensor c = matmul(a, b);
    Tensor d = matmul(a.mT(), w);
    c.backward(gy);
    d.backward(gy);
    return std::vector<Tensor>{c, d, a.grad(), b.grad(), w.grad()};
  });
}

TEST_CASE("the embedding gradient over repeated ids gives the same bits with 1 and 2 threads") {
  Tensor weight = big_randn({1000, 512}, 23);
  Generator gen(24);
  Tensor ids = randint(0, 40, {64, 64}, &gen);  // 4096 lookups of only 40 rows: many repeats
  Tensor gy = big_randn({64, 64, 512}, 25);
  check_same_with_1_and_2_threads([&] {
    Tensor w = fresh_leaf(weight);
    Tensor e = embedding_lookup(w, ids);
    e.backward(gy);
    return std::vector<Tensor>{e, w.grad(), index_select(weight, 1, ids.reshape({-1}).narrow(0, 0, 300))};
  });
}

TEST_CASE("dropout from the same generator state gives the same bits with 1 and 2 threads") {
  Tensor xv = big_randn({256, 1024}, 26), gy = big_randn({256, 1024}, 27);
  check_same_with_1_and_2_threads([&] {
    Generator gen(28);
    Tensor x = fresh_leaf(xv);
    Tensor y = dropout(x, 0.3, /*training=*/true, &gen);
    y.backward(gy);
    return std::vector<Tensor>{y, x.grad()};
  });
}

TEST_CASE("random tensors from the same generator state are the same with 1 and 2 threads") {
  check_same_with_1_and_2_threads([] {
    Generator gen(29);
    Tensor n32 = randn({256, 1024}, kFloat32, &gen);
    Tensor n64 = randn({256, 1023}, kFloat64, &gen);  // odd count: the last Box-Muller pair is half used
    Tensor u = uniform({256, 1024}, -2.0, 3.0, kFloat32, &gen);
    Tensor r = rand({256, 1024}, kFloat64, &gen);
    return std::vector<Tensor>{n32, n64, u, r};
  });
}

TEST_CASE("a two-layer MLP's forward and backward give the same bits with 1 and 2 threads") {
  Tensor xv = big_randn({256, 512}, 30);
  Tensor w1v = mul(big_randn({512, 256}, 31), 0.05), b1v = zeros({256});
  Tensor w2v = mul(big_randn({256, 200}, 32), 0.05), b2v = zeros({200});
  Generator gen(33);
  Tensor targets = randint(0, 200, {256}, &gen);
  check_same_with_1_and_2_threads([&] {
    Tensor w1 = fresh_leaf(w1v), b1 = fresh_leaf(b1v), w2 = fresh_leaf(w2v), b2 = fresh_leaf(b2v);
    Tensor h = gelu(add(matmul(xv, w1), b1));
    Tensor logp = log_softmax(add(matmul(h, w2), b2), -1);
    Tensor loss = neg(mean(gather(logp, 1, targets.unsqueeze(1))));
    loss.backward();
    return std::vector<Tensor>{loss, w1.grad(), b1.grad(), w2.grad(), b2.grad()};
  });
}

TEST_CASE("tiled attention gives the same bits with 1 and 2 threads, forward and backward, with dropout") {
  Tensor qv = big_randn({4, 4, 200, 48}, 60), kv = big_randn({4, 4, 200, 48}, 61), vv = big_randn({4, 4, 200, 48}, 62);
  Tensor gy = big_randn({4, 4, 200, 48}, 63);
  check_same_with_1_and_2_threads([&] {
    Generator gen(64);
    Tensor q = fresh_leaf(qv), k = fresh_leaf(kv), v = fresh_leaf(vv);
    Tensor out = nn::scaled_dot_product_attention_tiled(q, k, v, nn::causal_mask(200, 200), 0.1, true, &gen);
    out.backward(gy);
    return std::vector<Tensor>{out, q.grad(), k.grad(), v.grad()};
  });
}

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

TEST_CASE("matrix products leave OpenBLAS's and OpenMP's thread counts as the process set them") {
  NumThreadsGuard guard(2);
  Generator g(3);
  // a host program's own choice for OpenBLAS, which ember must not overwrite
  for (int host : {3, 1}) {
    openblas_set_num_threads(host);
    set_num_threads(2);
    const int omp_before = num_threads();
    // the shapes of every path: small (one BLAS call here), large (tiles on our threads),
    // batched, skinny (ember's own kernels), and one inside attention's tiles
    for (auto [a, b] : {std::pair<Shape, Shape>{{8, 8}, {8, 8}}, {{512, 256}, {256, 512}}, {{4, 64, 64}, {4, 64, 64}},
                        {{4, 512}, {512, 512}}}) {
      Tensor c = matmul(randn(a, kFloat32, &g), randn(b, kFloat32, &g));
      CHECK(c.numel() > 0);
      CHECK(openblas_get_num_threads() == host);
      CHECK(num_threads() == omp_before);
    }
    Tensor q = randn({2, 2, 200, 16}, kFloat32, &g);
    nn::scaled_dot_product_attention_tiled(q, q, q);
    CHECK(openblas_get_num_threads() == host);
    CHECK(num_threads() == omp_before);
  }
  openblas_set_num_threads(1);
}

TEST_CASE("matmul_flops counts 2 M N K for every product run, forward and backward, on every path") {
  NumThreadsGuard guard(2);
  Generator g(5);
  auto counted = [](const std::function<void()>& f) {
    const int64_t before = kernel::matmul_flops();
    f();
    return kernel::matmul_flops() - before;
  };
  // BLAS tiles on our threads, a batch of products, ember's skinny kernel, and a
  // zero-sized product, which counts nothing
  CHECK(counted([&] { matmul(randn({512, 256}, kFloat32, &g), randn({256, 384}, kFloat32, &g)); }) ==
        2 * 512 * 384 * 256);
  CHECK(counted([&] { matmul(randn({6, 10, 7}, kFloat32, &g), randn({7, 9}, kFloat32, &g)); }) == 2 * 6 * 10 * 9 * 7);
  CHECK(counted([&] { matmul(randn({4, 512}, kFloat32, &g), randn({512, 512}, kFloat32, &g)); }) == 2 * 4 * 512 * 512);
  CHECK(counted([&] { matmul(randn({0, 5}, kFloat32, &g), randn({5, 3}, kFloat32, &g)); }) == 0);
  // a Linear layer: y = x w^T + b forward; dx = dy w and dw = dy^T x backward
  Tensor x = randn({30, 20}, kFloat32, &g).requires_grad_(), w = randn({40, 20}, kFloat32, &g).requires_grad_();
  Tensor b = zeros({40}).requires_grad_();
  Tensor y;
  CHECK(counted([&] { y = linear(x, w, b); }) == 2 * 30 * 40 * 20);
  CHECK(counted([&] { y.backward(randn({30, 40}, kFloat32, &g)); }) == 2 * (2 * 30 * 40 * 20));
  // fused attention [B, H, L, D]: q k^T and P v forward; four products backward
  const int64_t B = 2, H = 3, L = 5, S = 7, D = 4;
  Tensor q = randn({B, H, L, D}, kFloat32, &g).requires_grad_(), k = randn({B, H, S, D}, kFloat32, &g).requires_grad_();
  Tensor v = randn({B, H, S, D}, kFloat32, &g).requires_grad_();
  Tensor out;
  CHECK(counted([&] { out = nn::scaled_dot_product_attention(q, k, v).output; }) == 2 * (2 * B * H * L * S * D));
  CHECK(counted([&] { out.backward(randn({B, H, L, D}, kFloat32, &g)); }) == 4 * (2 * B * H * L * S * D));
  // tiled attention counts its tiles' products: the same forward total
  Tensor qt = randn({1, 1, 300, 8}, kFloat32, &g), kt = randn({1, 1, 300, 8}, kFloat32, &g);
  CHECK(counted([&] { nn::scaled_dot_product_attention_tiled(qt, kt, kt, {}, 0.0, false, nullptr); }) ==
        2 * (2 * 300 * 300 * 8));
}

TEST_CASE("products run together give the bits of each run alone, with 1 and 2 threads, and each extra task once") {
  // a tiled product, a transposed one, a batch, a skinny one (few rows: ember's kernel),
  // one with a bias and one that adds into what C holds
  Tensor a1 = big_randn({300, 200}, 11), b1 = big_randn({200, 180}, 12);
  Tensor a2 = big_randn({200, 300}, 13).t(), b2 = seeded_randn({150, 200}, 14).t();
  Tensor a3 = seeded_randn({4, 60, 70}, 15), b3 = seeded_randn({4, 70, 50}, 16);
  Tensor a4 = seeded_randn({5, 512}, 17), b4 = big_randn({512, 300}, 18).t().contiguous().t();
  Tensor bias = seeded_randn({180}, 19), start = big_randn({300, 180}, 20);
  // and a weight gradient's shape, [256, 700] (transposed) x [700, 128]: its sum in two halves
  Tensor a5 = big_randn({700, 256}, 21).t(), b5 = big_randn({700, 128}, 22), start5 = seeded_randn({256, 128}, 23);
  auto alone = [&] {
    std::vector<Tensor> c = {empty({300, 180}), empty({300, 150}), empty({4, 60, 50}), empty({5, 300}),
                             empty({300, 180}), start.clone(), start5.clone()};
    kernel::gemm_batched(c[0], a1, b1);
    kernel::gemm_batched(c[1], a2, b2);
    kernel::gemm_batched(c[2], a3, b3);
    kernel::gemm_batched(c[3], a4, b4);
    kernel::gemm_batched(c[4], a1, b1, false, bias);
    kernel::gemm_batched(c[5], a1, b1, true);
    kernel::gemm_batched(c[6], a5, b5, true);
    return c;
  };
  auto together = [&] {
    std::vector<Tensor> c = {empty({300, 180}), empty({300, 150}), empty({4, 60, 50}), empty({5, 300}),
                             empty({300, 180}), start.clone(), start5.clone()};
    std::vector<int> runs(7, 0);
    kernel::gemm_together({{.c = c[0], .a = a1, .b = b1},
                           {.c = c[1], .a = a2, .b = b2},
                           {.c = c[2], .a = a3, .b = b3},
                           {.c = c[3], .a = a4, .b = b4},
                           {.c = c[4], .a = a1, .b = b1, .bias = bias},
                           {.c = c[5], .a = a1, .b = b1, .accumulate = true},
                           {.c = c[6], .a = a5, .b = b5, .accumulate = true}},
                          {.tasks = 7, .work = 1e6, .run = [&](int64_t t) { runs[(size_t)t]++; }});
    for (int r : runs) CHECK(r == 1);
    return c;
  };
  std::vector<Tensor> expected = alone();
  // the bias form is the bias plus the product
  CHECK(allclose(expected[4], add(expected[0], bias), 1e-5, 1e-5));
  CHECK(allclose(expected[5], add(expected[0], start), 1e-5, 1e-5));
  CHECK(allclose(expected[6].to(kFloat64), add(matmul(a5.to(kFloat64), b5.to(kFloat64)), start5.to(kFloat64)), 1e-4, 1e-4));
  for (int threads : {1, 2}) {
    NumThreadsGuard guard(threads);
    std::vector<Tensor> got = together();
    for (size_t i = 0; i < got.size(); i++) {
      INFO("product " << i << ", " << threads << " thread(s)");
      CHECK(equal(got[i], expected[i]));
    }
  }
}

TEST_CASE("a product with a bias and an empty sum is the bias in every row") {
  Tensor c = empty({3, 4}), bias = from_vector(std::vector<double>{1, 2, 3, 4}, {4}, kFloat32);
  kernel::gemm_batched(c, empty({3, 0}), empty({0, 4}), false, bias);
  CHECK(equal(c, bias.expand({3, 4}).contiguous()));
}

TEST_CASE("parallel_for_two covers both ranges once, in its pieces, with 1 and 2 threads") {
  for (int threads : {1, 2})
    for (auto [n, m] : {std::pair<int64_t, int64_t>{100000, 7}, {0, 50000}, {3, 0}, {40000, 40000}}) {
      NumThreadsGuard guard(threads);
      std::vector<int> seen_n((size_t)n, 0), seen_m((size_t)m, 0);
      parallel_for_two(
          n, 1, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; i++) seen_n[(size_t)i]++; }, m, 1,
          [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; i++) seen_m[(size_t)i]++; });
      for (int s : seen_n) REQUIRE(s == 1);
      for (int s : seen_m) REQUIRE(s == 1);
    }
}
