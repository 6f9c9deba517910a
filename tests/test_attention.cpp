// Scaled dot-product attention: the fused op against the same computation composed of
// primitive ops (values and every input's gradient), finite-difference checks, the
// masking policy (blocked = weight exactly 0; a fully blocked query row = zero weights,
// zero output, finite gradients), the mask helpers, dropout, the default scale, thread
// independence and the error messages.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/kernels/elementwise.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "nn/attention.h"

using namespace ember;
using namespace ember::testing;
using namespace ember::nn;
using Catch::Contains;

namespace {

Tensor seeded_randn(const Shape& shape, uint64_t seed, DType dtype = kFloat64) {
  Generator gen(seed);
  return randn(shape, dtype, &gen);
}

// Values of the given shape held in a transposed layout (the last two dims swapped in
// memory), so the tensor is not contiguous.
Tensor transposed_randn(Shape shape, uint64_t seed, DType dtype = kFloat64) {
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  Tensor t = seeded_randn(shape, seed, dtype).mT().detach();
  REQUIRE_FALSE(t.is_contiguous());
  return t;
}

// A new leaf over the same values (and the same strides).
Tensor leaf(const Tensor& values) { return values.detach().requires_grad_(); }


struct Run {
  Tensor output, weights, dq, dk, dv;
};

using AttentionFn = std::function<AttentionResult(const Tensor&, const Tensor&, const Tensor&)>;

// Runs attention on fresh leaves holding the given values and backpropagates a fixed,
// non-uniform upstream gradient.
Run run(const AttentionFn& attention, const Tensor& qv, const Tensor& kv, const Tensor& vv) {
  Tensor q = leaf(qv), k = leaf(kv), v = leaf(vv);
  AttentionResult r = attention(q, k, v);
  r.output.backward(seeded_randn(r.output.shape(), 99, r.output.dtype()));
  return {r.output.detach(), r.weights, q.grad(), k.grad(), v.grad()};
}

Run run_fused(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask = {}) {
  return run([&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return scaled_dot_product_attention(a, b, c, mask);
  }, q, k, v);
}

Run run_reference(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask = {}) {
  return run([&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return scaled_dot_product_attention_reference(a, b, c, mask);
  }, q, k, v);
}

// The fused op and the reference agree on the output, the weights and the gradients of
// q, k and v.
void check_matches_reference(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask = {},
                             double tol = 1e-12) {
  Run f = run_fused(q, k, v, mask), r = run_reference(q, k, v, mask);
  CHECK(max_abs_diff(f.output, r.output) <= tol);
  CHECK(max_abs_diff(f.weights, r.weights) <= tol);
  CHECK(max_abs_diff(f.dq, r.dq) <= tol);
  CHECK(max_abs_diff(f.dk, r.dk) <= tol);
  CHECK(max_abs_diff(f.dv, r.dv) <= tol);
}

// Padding tokens: row b has `lengths[b]` real tokens, then pad (0).
Tensor tokens_with_lengths(const std::vector<int64_t>& lengths, int64_t S) {
  std::vector<int64_t> t;
  for (int64_t len : lengths)
    for (int64_t j = 0; j < S; j++) t.push_back(j < len ? 7 + j : 0);
  return from_vector(t, {(int64_t)lengths.size(), S});
}

// [L, S] with every pair of query row `row` blocked and nothing else.
AttentionMask block_row(int64_t L, int64_t S, int64_t row) {
  std::vector<bool> b(L * S, false);
  for (int64_t j = 0; j < S; j++) b[row * S + j] = true;
  return AttentionMask::blocked(from_bools(b, {L, S}));
}

// gradcheck of the fused op's output with respect to q, k and v.
void check_gradients(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask = {}) {
  GradcheckReport rep = gradcheck(
      [&](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], mask).output; },
      {leaf(q), leaf(k), leaf(v)}, {}, {"q", "k", "v"});
  INFO(rep);
  CHECK(rep.passed);
}

std::vector<bool> bools_of(const Tensor& t) {
  std::vector<bool> b;
  for (int64_t x : t.to_vector<int64_t>()) b.push_back(x != 0);
  return b;
}


}  // namespace

// ------------------------------------------------------------------ fused == reference
TEST_CASE("fused attention equals the reference without a mask") {
  check_matches_reference(seeded_randn({2, 3, 5, 4}, 1), seeded_randn({2, 3, 5, 4}, 2), seeded_randn({2, 3, 5, 4}, 3));
}

TEST_CASE("fused attention equals the reference with a [B,1,1,S] padding mask") {
  AttentionMask pad = padding_mask(tokens_with_lengths({5, 3}, 5), 0).reshape({2, 1, 1, 5});
  check_matches_reference(seeded_randn({2, 3, 5, 4}, 4), seeded_randn({2, 3, 5, 4}, 5), seeded_randn({2, 3, 5, 4}, 6),
                          pad);
}

TEST_CASE("fused attention equals the reference with a causal [L,S] mask") {
  check_matches_reference(seeded_randn({2, 3, 5, 4}, 7), seeded_randn({2, 3, 5, 4}, 8), seeded_randn({2, 3, 5, 4}, 9),
                          causal_mask(5, 5));
}

TEST_CASE("fused attention equals the reference with padding | causal") {
  AttentionMask m = padding_mask(tokens_with_lengths({4, 2}, 5), 0).reshape({2, 1, 1, 5}) | causal_mask(5, 5);
  check_matches_reference(seeded_randn({2, 3, 5, 4}, 10), seeded_randn({2, 3, 5, 4}, 11),
                          seeded_randn({2, 3, 5, 4}, 12), m);
}

TEST_CASE("fused attention equals the reference when L != S (incremental causal)") {
  check_matches_reference(seeded_randn({2, 2, 3, 4}, 13), seeded_randn({2, 2, 7, 4}, 14),
                          seeded_randn({2, 2, 7, 4}, 15), causal_mask(3, 7));
  check_matches_reference(seeded_randn({2, 2, 6, 4}, 16), seeded_randn({2, 2, 3, 4}, 17),
                          seeded_randn({2, 2, 3, 4}, 18));
}

TEST_CASE("fused attention equals the reference when Dv != D") {
  check_matches_reference(seeded_randn({2, 4, 6}, 19), seeded_randn({2, 5, 6}, 20), seeded_randn({2, 5, 3}, 21),
                          padding_mask(tokens_with_lengths({5, 2}, 5), 0).reshape({2, 1, 5}));
}

TEST_CASE("fused attention equals the reference for 2-D, 3-D and 4-D inputs") {
  check_matches_reference(seeded_randn({4, 3}, 22), seeded_randn({6, 3}, 23), seeded_randn({6, 2}, 24),
                          causal_mask(4, 6));
  check_matches_reference(seeded_randn({3, 4, 5}, 25), seeded_randn({3, 4, 5}, 26), seeded_randn({3, 4, 5}, 27),
                          causal_mask(4, 4));
  check_matches_reference(seeded_randn({2, 3, 4, 5}, 28), seeded_randn({2, 3, 4, 5}, 29),
                          seeded_randn({2, 3, 4, 5}, 30), causal_mask(4, 4));
}

TEST_CASE("fused attention equals the reference with broadcast batch dims") {
  // keys and values shared by every head; q broadcast over the batch
  check_matches_reference(seeded_randn({2, 3, 4, 5}, 31), seeded_randn({2, 1, 6, 5}, 32),
                          seeded_randn({2, 1, 6, 3}, 33), causal_mask(4, 6));
  check_matches_reference(seeded_randn({3, 4, 5}, 34), seeded_randn({2, 3, 6, 5}, 35), seeded_randn({6, 3}, 36));
}

TEST_CASE("fused attention equals the reference on non-contiguous (transposed) inputs") {
  AttentionMask m = padding_mask(tokens_with_lengths({6, 3}, 6), 0).reshape({2, 1, 1, 6}) | causal_mask(6, 6);
  check_matches_reference(transposed_randn({2, 3, 6, 4}, 37), transposed_randn({2, 3, 6, 4}, 38),
                          transposed_randn({2, 3, 6, 5}, 39), m);
  // a head-split layout: [B, S, H, D] viewed as [B, H, S, D]
  Tensor q = seeded_randn({2, 6, 3, 4}, 40).transpose(1, 2).detach();
  Tensor k = seeded_randn({2, 6, 3, 4}, 41).transpose(1, 2).detach();
  Tensor v = seeded_randn({2, 6, 3, 4}, 42).transpose(1, 2).detach();
  check_matches_reference(q, k, v, m);
}

TEST_CASE("fused attention equals the reference with a [B,L,S] mask and an explicit scale") {
  Tensor blocked = lt(seeded_randn({2, 1, 4, 5}, 43), -0.5);
  Run f = run([&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return scaled_dot_product_attention(a, b, c, AttentionMask::blocked(blocked), 0.0, false, nullptr, 0.3);
  }, seeded_randn({2, 3, 4, 5}, 44), seeded_randn({2, 3, 5, 5}, 45), seeded_randn({2, 3, 5, 5}, 46));
  Run r = run([&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return scaled_dot_product_attention_reference(a, b, c, AttentionMask::blocked(blocked), 0.3);
  }, seeded_randn({2, 3, 4, 5}, 44), seeded_randn({2, 3, 5, 5}, 45), seeded_randn({2, 3, 5, 5}, 46));
  CHECK(max_abs_diff(f.output, r.output) <= 1e-12);
  CHECK(max_abs_diff(f.dq, r.dq) <= 1e-12);
  CHECK(max_abs_diff(f.dk, r.dk) <= 1e-12);
  CHECK(max_abs_diff(f.dv, r.dv) <= 1e-12);
}

TEST_CASE("fused attention in float32 is close to the float64 reference") {
  Tensor q = seeded_randn({2, 3, 6, 8}, 47), k = seeded_randn({2, 3, 6, 8}, 48), v = seeded_randn({2, 3, 6, 8}, 49);
  AttentionMask m = causal_mask(6, 6);
  Run f = run_fused(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), m), r = run_reference(q, k, v, m);
  CHECK(f.output.dtype() == kFloat32);
  CHECK(f.dq.dtype() == kFloat32);
  CHECK(max_abs_diff(f.output, r.output) <= 1e-5);
  CHECK(max_abs_diff(f.dq, r.dq) <= 1e-4);
  CHECK(max_abs_diff(f.dk, r.dk) <= 1e-4);
  CHECK(max_abs_diff(f.dv, r.dv) <= 1e-4);
}

// ------------------------------------------------------------------ finite differences
TEST_CASE("fused attention passes gradcheck with a padding mask") {
  check_gradients(seeded_randn({2, 2, 3, 4}, 50), seeded_randn({2, 2, 4, 4}, 51), seeded_randn({2, 2, 4, 3}, 52),
                  padding_mask(tokens_with_lengths({4, 2}, 4), 0).reshape({2, 1, 1, 4}));
}

TEST_CASE("fused attention passes gradcheck with a causal mask") {
  check_gradients(seeded_randn({2, 2, 4, 3}, 53), seeded_randn({2, 2, 4, 3}, 54), seeded_randn({2, 2, 4, 3}, 55),
                  causal_mask(4, 4));
  check_gradients(seeded_randn({2, 2, 3, 3}, 56), seeded_randn({2, 2, 5, 3}, 57), seeded_randn({2, 2, 5, 3}, 58),
                  causal_mask(3, 5));
}

TEST_CASE("fused attention passes gradcheck with a fully blocked query row") {
  check_gradients(seeded_randn({2, 4, 3}, 59), seeded_randn({2, 5, 3}, 60), seeded_randn({2, 5, 3}, 61),
                  block_row(4, 5, 2) | padding_mask(tokens_with_lengths({5, 3}, 5), 0).reshape({2, 1, 5}));
}

TEST_CASE("fused attention passes gradcheck on non-contiguous inputs") {
  AttentionMask m = block_row(4, 4, 1) | causal_mask(4, 4) |
                    padding_mask(tokens_with_lengths({4, 3}, 4), 0).reshape({2, 1, 1, 4});
  check_gradients(transposed_randn({2, 2, 4, 3}, 62), transposed_randn({2, 2, 4, 3}, 63),
                  transposed_randn({2, 2, 4, 2}, 64), m);
}

TEST_CASE("fused attention passes gradcheck with broadcast batch dims") {
  check_gradients(seeded_randn({2, 2, 3, 3}, 65), seeded_randn({2, 1, 4, 3}, 66), seeded_randn({4, 2}, 67),
                  causal_mask(3, 4));
}

// ------------------------------------------------------------------ masking policy
TEST_CASE("blocked pairs get weight exactly 0") {
  for (DType dt : {kFloat32, kFloat64}) {
    INFO(dtype_name(dt));
    AttentionMask m = causal_mask(5, 5) | padding_mask(tokens_with_lengths({5, 3}, 5), 0).reshape({2, 1, 1, 5});
    Tensor q = seeded_randn({2, 2, 5, 4}, 68, dt), k = seeded_randn({2, 2, 5, 4}, 69, dt);
    Tensor v = seeded_randn({2, 2, 5, 4}, 70, dt);
    for (const AttentionResult& r : {scaled_dot_product_attention(q, k, v, m),
                                     scaled_dot_product_attention_reference(q, k, v, m)}) {
      std::vector<bool> blocked = bools_of(m.blocked().expand({2, 2, 5, 5}).contiguous().to(kInt64));
      std::vector<double> w = r.weights.to_vector<double>();
      REQUIRE(w.size() == blocked.size());
      for (size_t i = 0; i < w.size(); i++) {
        if (blocked[i]) CHECK(w[i] == 0.0);
        else CHECK(w[i] > 0.0);
      }
      // every row still sums to 1
      for (double s : sum(r.weights, {-1}).to_vector<double>()) CHECK(s == Approx(1.0).epsilon(1e-6));
    }
  }
}

TEST_CASE("a fully blocked query row gets zero weights, a zero output and finite gradients") {
  AnomalyGuard anomaly;  // no NaN or Inf anywhere, forward or backward, in either version
  for (DType dt : {kFloat32, kFloat64}) {
    INFO(dtype_name(dt));
    const int64_t L = 4, S = 5, row = 1;
    AttentionMask m = block_row(L, S, row) | causal_mask(L, S);
    Tensor q = seeded_randn({2, L, 3}, 71, dt), k = seeded_randn({2, S, 3}, 72, dt);
    Tensor v = seeded_randn({2, S, 3}, 73, dt);
    Run f = run_fused(q, k, v, m), r = run_reference(q, k, v, m);
    for (const Run* x : {&f, &r}) {
      for (int64_t b = 0; b < 2; b++) {
        for (int64_t j = 0; j < S; j++) CHECK(x->weights.at({b, row, j}) == 0.0);
        for (int64_t d = 0; d < 3; d++) CHECK(x->output.at({b, row, d}) == 0.0);
        for (int64_t d = 0; d < 3; d++) CHECK(x->dq.at({b, row, d}) == 0.0);  // the row does not depend on q
      }
      CHECK(kernel::all_finite(x->dq));
      CHECK(kernel::all_finite(x->dk));
      CHECK(kernel::all_finite(x->dv));
    }
    const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
    CHECK(max_abs_diff(f.output, r.output) <= tol);
    CHECK(max_abs_diff(f.weights, r.weights) <= tol);
    CHECK(max_abs_diff(f.dq, r.dq) <= tol);
    CHECK(max_abs_diff(f.dk, r.dk) <= tol);
    CHECK(max_abs_diff(f.dv, r.dv) <= tol);
  }
}

TEST_CASE("a query row with every key padded is zero and its batch entry's gradients finite") {
  // batch entry 1 is all padding: every one of its queries is fully blocked
  AttentionMask m = padding_mask(tokens_with_lengths({3, 0}, 3), 0).reshape({2, 1, 1, 3});
  Tensor q = seeded_randn({2, 2, 3, 4}, 74, kFloat32), k = seeded_randn({2, 2, 3, 4}, 75, kFloat32);
  Tensor v = seeded_randn({2, 2, 3, 4}, 76, kFloat32);
  Run f = run_fused(q, k, v, m);
  for (double x : f.output.select(0, 1).contiguous().to_vector<double>()) CHECK(x == 0.0);
  for (double x : f.dk.select(0, 1).contiguous().to_vector<double>()) CHECK(x == 0.0);
  for (double x : f.dv.select(0, 1).contiguous().to_vector<double>()) CHECK(x == 0.0);
  CHECK(kernel::all_finite(f.dq));
}

// ------------------------------------------------------------------ mask helpers
TEST_CASE("padding_mask blocks the pad tokens, shaped [B,S]") {
  AttentionMask m = padding_mask(from_vector(std::vector<int64_t>{5, 6, 1, 1, 7, 1, 1, 1}, {2, 4}), 1);
  REQUIRE(m.defined());
  CHECK(m.blocked().dtype() == kBool);
  CHECK(m.blocked().shape() == Shape{2, 4});
  CHECK(bools_of(m.blocked().to(kInt64)) == std::vector<bool>{false, false, true, true, false, true, true, true});
}

TEST_CASE("causal_mask blocks the future, shaped [L,S], also with L < S") {
  AttentionMask sq = causal_mask(3, 3);
  CHECK(sq.blocked().shape() == Shape{3, 3});
  CHECK(bools_of(sq.blocked().to(kInt64)) ==
        std::vector<bool>{false, true, true, false, false, true, false, false, false});
  // two new queries at positions 2 and 3 of 4: query 0 sees keys 0..2, query 1 sees all
  AttentionMask inc = causal_mask(2, 4);
  CHECK(inc.blocked().shape() == Shape{2, 4});
  CHECK(bools_of(inc.blocked().to(kInt64)) == std::vector<bool>{false, false, false, true, false, false, false, false});
  CHECK(causal_mask(1, 5).blocked().to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 0, 0});
}

TEST_CASE("AttentionMask::allowed stores the inverted mask") {
  Tensor allowed = from_bools({true, false, true, true, false, false}, {2, 3});
  AttentionMask m = AttentionMask::allowed(allowed);
  CHECK(bools_of(m.blocked().to(kInt64)) == std::vector<bool>{false, true, false, false, true, true});
  CHECK(bools_of(AttentionMask::blocked(allowed).blocked().to(kInt64)) == bools_of(allowed.to(kInt64)));
}

TEST_CASE("AttentionMask::operator| blocks where either blocks, broadcasting, and none is the identity") {
  AttentionMask none;
  CHECK_FALSE(none.defined());
  CHECK_FALSE((none | none).defined());
  AttentionMask c = causal_mask(3, 3);
  CHECK((none | c).blocked().same(c.blocked()));
  CHECK((c | none).blocked().same(c.blocked()));
  AttentionMask pad = padding_mask(from_vector(std::vector<int64_t>{4, 4, 0, 4, 0, 0}, {2, 3}), 0).reshape({2, 1, 3});
  AttentionMask both = pad | c;
  CHECK(both.blocked().shape() == Shape{2, 3, 3});
  CHECK(bools_of(both.blocked().to(kInt64)) == std::vector<bool>{false, true, true,  false, false, true,
                                                                 false, false, true, false, true, true,
                                                                 false, true,  true, false, true, true});
}

TEST_CASE("AttentionMask::reshape keeps the values, and none stays none") {
  AttentionMask pad = padding_mask(from_vector(std::vector<int64_t>{4, 0, 4, 4}, {2, 2}), 0);
  AttentionMask r = pad.reshape({2, 1, 1, 2});
  CHECK(r.blocked().shape() == Shape{2, 1, 1, 2});
  CHECK(bools_of(r.blocked().to(kInt64)) == std::vector<bool>{false, true, false, false});
  CHECK_FALSE(AttentionMask().reshape({2, 1, 1, 2}).defined());
}

TEST_CASE("masks must be bool, tokens int64, and causal_mask needs L <= S") {
  CHECK_THROWS_WITH(AttentionMask::blocked(zeros({2, 3}, kInt64)),
                    Contains("AttentionMask::blocked") && Contains("bool") && Contains("int64") && Contains("[2,3]"));
  CHECK_THROWS_WITH(AttentionMask::allowed(zeros({4}, kFloat32)),
                    Contains("AttentionMask::allowed") && Contains("bool") && Contains("float32") && Contains("[4]"));
  CHECK_THROWS_WITH(padding_mask(zeros({2, 3}, kFloat32), 0), Contains("padding_mask") && Contains("[2,3]"));
  CHECK_THROWS_WITH(padding_mask(zeros({6}, kInt64), 0), Contains("padding_mask") && Contains("[6]"));
  CHECK_THROWS_WITH(causal_mask(5, 3), Contains("causal_mask") && Contains("L = 5") && Contains("S = 3"));
}

// ------------------------------------------------------------------ dropout
TEST_CASE("attention dropout is the identity in eval mode") {
  Tensor q = seeded_randn({2, 2, 4, 3}, 77), k = seeded_randn({2, 2, 4, 3}, 78), v = seeded_randn({2, 2, 4, 3}, 79);
  Generator gen(80);
  AttentionResult plain = scaled_dot_product_attention(q, k, v, causal_mask(4, 4));
  AttentionResult eval = scaled_dot_product_attention(q, k, v, causal_mask(4, 4), 0.5, /*training=*/false, &gen);
  AttentionResult zero_p = scaled_dot_product_attention(q, k, v, causal_mask(4, 4), 0.0, /*training=*/true, &gen);
  CHECK(equal(plain.output, eval.output));
  CHECK(equal(plain.weights, eval.weights));
  CHECK(equal(plain.output, zero_p.output));
  CHECK(gen.get_state()[1] == 0);  // nothing was drawn
}

TEST_CASE("attention dropout in training is deterministic for a seed and matches ember::dropout on the weights") {
  Tensor q = seeded_randn({2, 2, 5, 3}, 81), k = seeded_randn({2, 2, 5, 3}, 82), v = seeded_randn({2, 2, 5, 4}, 83);
  AttentionMask m = causal_mask(5, 5);
  auto with_seed = [&](uint64_t seed) {
    Generator gen(seed);
    return scaled_dot_product_attention(q, k, v, m, 0.4, /*training=*/true, &gen);
  };
  AttentionResult a = with_seed(7), b = with_seed(7), c = with_seed(8);
  CHECK(equal(a.output, b.output));
  CHECK_FALSE(equal(a.output, c.output));
  // weights are reported before dropout
  AttentionResult plain = scaled_dot_product_attention(q, k, v, m);
  CHECK(equal(a.weights, plain.weights));
  // the same draws as dropout applied to the weights, then the weighted sum
  Generator gen(7);
  Tensor expected = matmul(dropout(plain.weights, 0.4, /*training=*/true, &gen), v);
  CHECK(max_abs_diff(a.output, expected) <= 1e-12);
}

TEST_CASE("attention dropout's gradient passes gradcheck when the generator is re-seeded inside f") {
  AttentionMask m = causal_mask(4, 4) | padding_mask(tokens_with_lengths({4, 3}, 4), 0).reshape({2, 1, 1, 4});
  Generator gen(84);
  GradcheckReport rep = gradcheck(
      [&](const std::vector<Tensor>& x) {
        gen.manual_seed(85);
        return scaled_dot_product_attention(x[0], x[1], x[2], m, 0.3, /*training=*/true, &gen).output;
      },
      {leaf(seeded_randn({2, 2, 4, 3}, 86)), leaf(seeded_randn({2, 2, 4, 3}, 87)),
       leaf(seeded_randn({2, 2, 4, 3}, 88))},
      {}, {"q", "k", "v"});
  INFO(rep);
  CHECK(rep.passed);
}

// ------------------------------------------------------------------ scale
TEST_CASE("the default scale is 1/sqrt(D)") {
  Tensor q = seeded_randn({2, 4, 9}, 89), k = seeded_randn({2, 5, 9}, 90), v = seeded_randn({2, 5, 3}, 91);
  AttentionResult by_default = scaled_dot_product_attention(q, k, v);
  AttentionResult explicit_scale = scaled_dot_product_attention(q, k, v, {}, 0.0, false, nullptr, 1.0 / 3.0);
  AttentionResult other = scaled_dot_product_attention(q, k, v, {}, 0.0, false, nullptr, 1.0);
  CHECK(equal(by_default.output, explicit_scale.output));
  CHECK(equal(by_default.weights, explicit_scale.weights));
  CHECK_FALSE(equal(by_default.output, other.output));
  CHECK(max_abs_diff(scaled_dot_product_attention_reference(q, k, v).output, by_default.output) <= 1e-12);
}

// ------------------------------------------------------------------ threads
TEST_CASE("fused attention gives the same bits with 1 and 2 threads, forward and backward") {
  Tensor qv = seeded_randn({8, 4, 64, 32}, 92, kFloat32), kv = seeded_randn({8, 4, 64, 32}, 93, kFloat32);
  Tensor vv = seeded_randn({8, 4, 64, 32}, 94, kFloat32), gy = seeded_randn({8, 4, 64, 32}, 95, kFloat32);
  std::vector<int64_t> lengths = {64, 60, 50, 40, 30, 20, 10, 1};
  AttentionMask m = causal_mask(64, 64) | padding_mask(tokens_with_lengths(lengths, 64), 0).reshape({8, 1, 1, 64});
  auto compute = [&] {
    Generator gen(96);
    Tensor q = leaf(qv), k = leaf(kv), v = leaf(vv);
    AttentionResult r = scaled_dot_product_attention(q, k, v, m, 0.1, /*training=*/true, &gen);
    r.output.backward(gy);
    return std::vector<Tensor>{r.output, r.weights, q.grad(), k.grad(), v.grad()};
  };
  std::vector<Tensor> one, two;
  {
    NumThreadsGuard threads(1);
    one = compute();
  }
  {
    NumThreadsGuard threads(2);
    REQUIRE(num_threads() == 2);
    two = compute();
  }
  for (size_t i = 0; i < one.size(); i++) {
    INFO("result " << i);
    CHECK(equal(one[i], two[i]));
  }
}

// ------------------------------------------------------------------ errors
TEST_CASE("attention errors name the op and show the shapes") {
  Tensor q = zeros({2, 3, 4}, kFloat64), k = zeros({2, 5, 4}, kFloat64), v = zeros({2, 5, 6}, kFloat64);
  const auto op = Contains("scaled_dot_product_attention");
  SECTION("q and k with different D") {
    CHECK_THROWS_WITH(scaled_dot_product_attention(q, zeros({2, 5, 7}, kFloat64), v),
                      op && Contains("[2,3,4]") && Contains("[2,5,7]") && Contains("D"));
  }
  SECTION("k and v with different S") {
    CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, zeros({2, 6, 6}, kFloat64)),
                      op && Contains("[2,5,4]") && Contains("[2,6,6]") && Contains("S"));
  }
  SECTION("batch dims that do not broadcast") {
    CHECK_THROWS_WITH(scaled_dot_product_attention(q, zeros({3, 5, 4}, kFloat64), zeros({3, 5, 6}, kFloat64)),
                      op && Contains("batch") && Contains("[2,3,4]") && Contains("[3,5,4]"));
  }
  SECTION("a mask that does not broadcast to [..., L, S]") {
    AttentionMask m = causal_mask(4, 5);
    CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, m), op && Contains("[4,5]") && Contains("[2,3,5]"));
    CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, m.reshape({1, 1, 4, 5})),
                      op && Contains("[1,1,4,5]") && Contains("[2,3,5]"));
  }
  SECTION("a non-bool mask cannot be made") {
    CHECK_THROWS_WITH(AttentionMask::blocked(zeros({3, 5}, kFloat64)), Contains("bool") && Contains("float64"));
  }
  SECTION("mixed dtypes") {
    CHECK_THROWS_WITH(scaled_dot_product_attention(q, k.to(kFloat32), v),
                      op && Contains("float64") && Contains("float32") && Contains("[2,5,4]"));
  }
  SECTION("integer inputs") {
    CHECK_THROWS_WITH(scaled_dot_product_attention(q.to(kInt64), k.to(kInt64), v.to(kInt64)),
                      op && Contains("int64"));
  }
  SECTION("fewer than 2 dims") {
    CHECK_THROWS_WITH(scaled_dot_product_attention(zeros({4}, kFloat64), k, v),
                      op && Contains("at least 2 dims") && Contains("[4]"));
  }
  SECTION("a dropout probability outside [0, 1]") {
    CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {}, 1.5, true), op && Contains("1.5"));
  }
  SECTION("the reference checks the same") {
    CHECK_THROWS_WITH(scaled_dot_product_attention_reference(q, zeros({2, 5, 7}, kFloat64), v),
                      Contains("scaled_dot_product_attention_reference") && Contains("[2,5,7]"));
  }
}

TEST_CASE("modifying the returned weights in place before backward is an error") {
  Tensor q = leaf(seeded_randn({2, 3, 4}, 97)), k = leaf(seeded_randn({2, 3, 4}, 98));
  Tensor v = leaf(seeded_randn({2, 3, 4}, 99));
  AttentionResult r = scaled_dot_product_attention(q, k, v);
  r.weights.fill_(0.0);
  CHECK_THROWS_WITH(sum(r.output).backward(), Contains("scaled_dot_product_attention") && Contains("in place"));
}

TEST_CASE("attention with no keys or no queries gives empty or zero results") {
  Tensor q = leaf(seeded_randn({2, 3, 4}, 100));
  Tensor k = leaf(zeros({2, 0, 4}, kFloat64)), v = leaf(zeros({2, 0, 5}, kFloat64));
  AttentionResult r = scaled_dot_product_attention(q, k, v);
  CHECK(r.output.shape() == Shape{2, 3, 5});
  CHECK(r.weights.shape() == Shape{2, 3, 0});
  for (double x : r.output.to_vector<double>()) CHECK(x == 0.0);
  sum(r.output).backward();
  for (double x : q.grad().to_vector<double>()) CHECK(x == 0.0);
  AttentionResult none = scaled_dot_product_attention(zeros({2, 0, 4}, kFloat64), seeded_randn({2, 3, 4}, 101),
                                                      seeded_randn({2, 3, 5}, 102));
  CHECK(none.output.shape() == Shape{2, 0, 5});
}

// ------------------------------------------------------------------ the tiled op
namespace {

struct TiledCase {
  const char* name;
  Shape q, k, v;
  AttentionMask mask;
};

// Shapes that span several query blocks (64) and key blocks (128), with tails; masks
// that block whole rows; k and v broadcast over heads. Keys in one block (S <= 128): the
// forward keeps the weights for the backward; in several, the backward computes them again.
std::vector<TiledCase> tiled_cases() {
  Generator gen(71);
  Tensor pad = lt(uniform({3, 1, 1, 150}, 0.0, 1.0, kFloat32, &gen), 0.3);
  Tensor pad100 = lt(uniform({3, 1, 1, 100}, 0.0, 1.0, kFloat32, &gen), 0.3);
  // sample 1 blocks every key: its queries get zero weights
  pad = logical_or(pad, eq(from_vector(std::vector<int64_t>{0, 1, 0}, {3, 1, 1, 1}), 1.0));
  pad100 = logical_or(pad100, eq(from_vector(std::vector<int64_t>{0, 1, 0}, {3, 1, 1, 1}), 1.0));
  return {
      {"one key block, padding mask with a fully blocked sample", {3, 2, 70, 8}, {3, 2, 100, 8}, {3, 2, 100, 6},
       AttentionMask::blocked(pad100)},
      {"one key block, causal, L = S = 90", {2, 90, 4}, {2, 90, 4}, {2, 90, 4}, causal_mask(90, 90)},
      {"no mask, L 70, S 150", {3, 2, 70, 8}, {3, 2, 150, 8}, {3, 2, 150, 6}, {}},
      {"padding mask with a fully blocked sample", {3, 2, 70, 8}, {3, 2, 150, 8}, {3, 2, 150, 6},
       AttentionMask::blocked(pad)},
      {"causal, L = S = 140", {2, 140, 4}, {2, 140, 4}, {2, 140, 4}, causal_mask(140, 140)},
      {"k and v shared by the heads", {2, 3, 20, 4}, {2, 1, 130, 4}, {2, 1, 130, 5}, {}},
  };
}

}  // namespace

TEST_CASE("tiled attention equals the fused op: output and gradients, masks, broadcast, float32 and float64") {
  for (DType dt : {kFloat32, kFloat64}) {
    for (const auto& c : tiled_cases()) {
      INFO(c.name << ", " << dtype_name(dt));
      Generator gen(5);
      Tensor qv = normal(c.q, 0.0, 2.0, dt, &gen), kv = normal(c.k, 0.0, 2.0, dt, &gen), vv = normal(c.v, 0.0, 1.0, dt, &gen);
      Shape os = c.q;
      os.back() = c.v.back();
      Tensor u = normal(os, 0.0, 1.0, dt, &gen);
      auto run = [&](bool tiled) {
        Tensor q = qv.detach().requires_grad_(), k = kv.detach().requires_grad_(), v = vv.detach().requires_grad_();
        Tensor out = tiled ? scaled_dot_product_attention_tiled(q, k, v, c.mask)
                           : scaled_dot_product_attention(q, k, v, c.mask).output;
        sum(mul(out, u)).backward();
        return std::vector<Tensor>{out, q.grad(), k.grad(), v.grad()};
      };
      auto a = run(false), b = run(true);
      const double tol = dt == kFloat32 ? 2e-5 : 1e-12;
      for (size_t i = 0; i < a.size(); i++) {
        INFO("tensor " << i << " max diff " << max_abs_diff(a[i], b[i]));
        CHECK(allclose(a[i], b[i], tol, tol));
      }
    }
  }
}

TEST_CASE("tiled attention equals the fused op on inputs broadcast along their rows (row stride 0)") {
  Generator gen(13);
  Tensor q = normal({2, 1, 4}, 0.0, 1.0, kFloat64, &gen).expand({2, 70, 4});
  Tensor k = normal({2, 1, 4}, 0.0, 1.0, kFloat64, &gen).expand({2, 150, 4});
  Tensor v = normal({2, 150, 1}, 0.0, 1.0, kFloat64, &gen).expand({2, 150, 3});
  Tensor fused = scaled_dot_product_attention(q, k, v).output, tiled = scaled_dot_product_attention_tiled(q, k, v);
  INFO("max diff " << max_abs_diff(fused, tiled));
  CHECK(allclose(fused, tiled, 1e-12, 1e-12));
}

TEST_CASE("tiled attention drops the same weights as the fused op from the same generator state") {
  // keys in two blocks (weights computed again in backward), and in one (kept)
  for (int64_t S : {150, 100}) {
  INFO("S " << S);
  Generator init(8);
  Tensor qv = randn({2, 2, 70, 8}, kFloat64, &init), kv = randn({2, 2, S, 8}, kFloat64, &init),
         vv = randn({2, 2, S, 8}, kFloat64, &init), u = randn({2, 2, 70, 8}, kFloat64, &init);
  auto run = [&](bool tiled) {
    Generator gen(99);
    Tensor q = qv.detach().requires_grad_(), k = kv.detach().requires_grad_(), v = vv.detach().requires_grad_();
    Tensor out = tiled ? scaled_dot_product_attention_tiled(q, k, v, {}, 0.3, true, &gen)
                       : scaled_dot_product_attention(q, k, v, {}, 0.3, true, &gen).output;
    sum(mul(out, u)).backward();
    CHECK(gen.get_state()[1] == 1u);  // both take one draw per call, whatever the size
    return std::vector<Tensor>{out, q.grad(), k.grad(), v.grad()};
  };
  auto a = run(false), b = run(true);
  for (size_t i = 0; i < a.size(); i++) {
    INFO("tensor " << i);
    CHECK(allclose(a[i], b[i], 1e-12, 1e-12));
  }
  // and dropout is really on: without it the output differs
  Tensor plain = scaled_dot_product_attention_tiled(qv, kv, vv);
  CHECK_FALSE(allclose(plain, a[0], 1e-3, 1e-3));
  }
}

TEST_CASE("gradcheck: tiled attention with a mask, on contiguous and non-contiguous inputs") {
  Generator gen(12);
  // S spans two key blocks; a query whose keys are all blocked among them
  Tensor blocked = lt(uniform({2, 1, 3, 130}, 0.0, 1.0, kFloat32, &gen), 0.5);
  blocked = logical_or(blocked, eq(from_vector(std::vector<int64_t>{0, 1, 0}, {1, 1, 3, 1}), 1.0));
  AttentionMask mask = AttentionMask::blocked(blocked);
  Tensor q = normal({2, 2, 3, 4}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  Tensor k = normal({2, 2, 130, 4}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  Tensor v = normal({2, 2, 130, 3}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  // the same shapes as transposed views
  Tensor qt = normal({2, 2, 4, 3}, 0.0, 1.0, kFloat64, &gen).transpose(-1, -2).detach().requires_grad_();
  Tensor kt = normal({4, 130, 2, 2}, 0.0, 1.0, kFloat64, &gen).permute({2, 3, 1, 0}).detach().requires_grad_();
  Tensor vt = normal({2, 2, 3, 130}, 0.0, 1.0, kFloat64, &gen).transpose(-1, -2).detach().requires_grad_();
  REQUIRE_FALSE(kt.is_contiguous());
  for (auto inputs : {std::vector<Tensor>{q, k, v}, std::vector<Tensor>{qt, kt, vt}}) {
    auto r = gradcheck([&](const std::vector<Tensor>& in) {
      return scaled_dot_product_attention_tiled(in[0], in[1], in[2], mask);
    }, inputs, {}, {"q", "k", "v"});
    INFO(r.to_string());
    CHECK(r.passed);
  }
  // keys in one block: the backward uses the weights its forward kept
  AttentionMask short_mask = AttentionMask::blocked(blocked.narrow(-1, 0, 9));
  auto first9 = [](const Tensor& t) { return t.narrow(2, 0, 9).detach().requires_grad_(); };  // views, not copies
  for (auto inputs : {std::vector<Tensor>{q, first9(k), first9(v)}, std::vector<Tensor>{qt, first9(kt), first9(vt)}}) {
    auto r = gradcheck([&](const std::vector<Tensor>& in) {
      return scaled_dot_product_attention_tiled(in[0], in[1], in[2], short_mask);
    }, inputs, {}, {"q", "k", "v"});
    INFO(r.to_string());
    CHECK(r.passed);
  }
}

TEST_CASE("tiled attention keeps no L x S tensor for backward, unlike the fused op") {
  const int64_t L = 512;
  Generator gen(3);
  Tensor q = randn({1, 2, L, 16}, kFloat32, &gen).requires_grad_();
  Tensor k = randn({1, 2, L, 16}, kFloat32, &gen).requires_grad_();
  Tensor v = randn({1, 2, L, 16}, kFloat32, &gen).requires_grad_();
  const int64_t weights = 2 * L * L * 4;  // bytes of the [1, 2, L, L] weights
  const int64_t before = Storage::live_bytes();
  Tensor tiled = scaled_dot_product_attention_tiled(q, k, v);
  const int64_t tiled_kept = Storage::live_bytes() - before;
  CHECK(tiled_kept < weights / 16);
  Tensor fused = scaled_dot_product_attention(q, k, v).output;
  CHECK(Storage::live_bytes() - before - tiled_kept >= weights);
  CHECK(allclose(tiled, fused, 1e-5, 1e-5));
}

TEST_CASE("tiled attention checks its inputs like the fused op") {
  CHECK_THAT(error_of([] { scaled_dot_product_attention_tiled(randn({2, 3, 4}), randn({2, 5, 3}), randn({2, 5, 4})); }),
             Contains("scaled_dot_product_attention_tiled") && Contains("feature size D"));
  CHECK_THAT(error_of([] {
               scaled_dot_product_attention_tiled(randn({2, 3, 4}), randn({2, 5, 4}), randn({2, 5, 4}),
                                                  AttentionMask::blocked(zeros({3, 4}, kBool)));
             }),
             Contains("cannot be broadcast"));
  CHECK_THAT(error_of([] { scaled_dot_product_attention_tiled(randn({2, 3, 4}), randn({2, 5, 4}), randn({2, 5, 4}), {}, 1.5); }),
             Contains("dropout_p must be in [0, 1], got 1.5"));
}

TEST_CASE("tiled attention over no keys gives zero rows and zero query gradients, as the fused op") {
  Generator gen(5);
  Tensor q = randn({2, 3, 4}, kFloat64, &gen).requires_grad_();
  Tensor k = zeros({2, 0, 4}, kFloat64), v = zeros({2, 0, 5}, kFloat64);
  Tensor tiled = scaled_dot_product_attention_tiled(q, k, v);
  Tensor fused = scaled_dot_product_attention(q, k, v).output;
  CHECK(tiled.shape() == Shape{2, 3, 5});
  CHECK(max_abs_diff(tiled, fused) == 0.0);
  sum(tiled).backward();
  REQUIRE(q.grad().defined());
  CHECK(max_abs_diff(q.grad(), zeros({2, 3, 4}, kFloat64)) == 0.0);
}
