// Gradients as values and gradients of gradients: ember::grad with PyTorch's semantics
// case by case, create_graph (double backward) through every kind of op and layer
// (gradgradcheck), Hessians and Hessian-vector products against finite differences of the
// gradient, custom differentiable ops, module forward hooks, reentrant backward, and the
// memory of double-backward graphs.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/autograd_functional.h"
#include "core/function.h"
#include "core/gradcheck.h"
#include "core/kernels/elementwise.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "nn/multihead_attention.h"
#include "nn/transformer.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

using Inputs = std::vector<Tensor>;

Tensor leaf(std::vector<double> v, Shape s) { return from_vector(v, s).to(kFloat64).requires_grad_(); }
Tensor randn64(const Shape& s, uint64_t seed, double scale = 1.0) {
  Generator g(seed);
  return mul(randn(s, kFloat64, &g), scale).detach();
}
std::vector<double> vals(const Tensor& t) { return t.contiguous().to_vector<double>(); }

Tensor diag_of(const Tensor& p) {
  const int64_t n = p.numel();
  std::vector<double> d((size_t)(n * n), 0.0);
  const auto pv = vals(p);
  for (int64_t i = 0; i < n; i++) d[(size_t)(i * n + i)] = pv[(size_t)i];
  return from_vector(d, {n, n});
}

void check_passes(const GradcheckReport& r) {
  INFO(r.to_string());
  CHECK(r.passed);
}

// Central differences of x -> grad(f)(x) along v: (g(x + eps v) - g(x - eps v)) / (2 eps).
Tensor fd_of_gradient(const TensorFn& f, const Tensor& x, const Tensor& v, double eps = 1e-5) {
  auto gradient_at = [&](const Tensor& at) {
    Tensor xl = at.detach().clone().requires_grad_();
    return grad({f(xl)}, {xl})[0].detach();
  };
  NoGradGuard ng;
  Tensor plus = add(x, mul(v, eps)), minus = sub(x, mul(v, eps));
  GradModeGuard on(true);
  Tensor gp = gradient_at(plus), gm = gradient_at(minus);
  NoGradGuard ng2;
  return div(sub(gp, gm), 2 * eps);
}

// |a - b| <= tol * max|b|, elementwise.
void check_close_relative(const Tensor& a, const Tensor& b, double tol) {
  double scale = 0;
  for (double x : vals(b)) scale = std::max(scale, std::fabs(x));
  INFO("max |diff| " << max_abs_diff(a, b) << " against a scale of " << scale);
  CHECK(scale > 0);
  CHECK(max_abs_diff(a, b) <= tol * scale);
}

}  // namespace

// ------------------------------------------------------------------ grad()
TEST_CASE("grad returns the gradients with respect to leaves and non-leaves and touches no .grad") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = mul(x, x);  // non-leaf
  Tensor z = sum(mul(y, 3.0));
  auto g = grad({z}, {x, y}, {}, {.retain_graph = true});
  REQUIRE(g.size() == 2);
  CHECK(vals(g[0]) == std::vector<double>{6, 12, 18});  // 3 * 2x
  CHECK(vals(g[1]) == std::vector<double>{3, 3, 3});
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(g[0].requires_grad());  // no create_graph: plain values
  // the same input twice gets the same gradient twice
  auto twice = grad({z}, {x, x}, {}, {.retain_graph = true});
  CHECK(vals(twice[0]) == vals(twice[1]));
  // grad_outputs weight a non-scalar output
  auto w = grad({y}, {x}, {from_vector(std::vector<double>{1, 0, -1}, {3})});
  CHECK(vals(w[0]) == std::vector<double>{2, 0, -6});
}

TEST_CASE("grad of a non-leaf input stops there: the part of the graph behind it is not evaluated") {
  Tensor x = leaf({1, 2}, {2});
  int evaluated = 0;
  Tensor h = mul(x, 2.0);
  h.register_hook([&](const Tensor&) {
    evaluated++;
    return Tensor();
  });
  Tensor y = mul(h, h);
  Tensor l = sum(y);
  // the hook on h runs only when a gradient flows through h
  auto gy = grad({l}, {y}, {}, {.retain_graph = true});
  CHECK(vals(gy[0]) == std::vector<double>{1, 1});
  CHECK(evaluated == 0);
  grad({l}, {x}, {}, {.retain_graph = true});
  CHECK(evaluated == 1);
}

TEST_CASE("grad with several outputs sums their weighted gradients") {
  Tensor x = leaf({1, 2}, {2});
  Tensor a = sum(mul(x, x)), b = sum(mul(x, 5.0));
  auto g = grad({a, b}, {x}, {scalar_tensor(2.0, kFloat64), scalar_tensor(1.0, kFloat64)});
  CHECK(vals(g[0]) == std::vector<double>{4 * 1 + 5, 4 * 2 + 5});
}

TEST_CASE("grad of an unused input is an error naming it, or undefined with allow_unused") {
  Tensor x = leaf({1, 2}, {2}), unused = leaf({3}, {1});
  Tensor z = sum(x);
  CHECK_THAT(error_of([&] { grad({z}, {x, unused}, {}, {.retain_graph = true}); }),
             StartsWith("grad: input 1 (shape [1]) was not used to compute the outputs") && Contains("allow_unused"));
  auto g = grad({z}, {x, unused}, {}, {.allow_unused = true});
  CHECK(g[0].defined());
  CHECK_FALSE(g[1].defined());
}

TEST_CASE("grad rejects inputs without grad, gradients of the wrong shape and non-scalar outputs without one") {
  Tensor x = leaf({1, 2}, {2});
  Tensor c = from_vector(std::vector<double>{1, 2}, {2});
  Tensor y = mul(x, 2.0);
  CHECK_THAT(error_of([&] { grad({sum(y)}, {c}); }),
             StartsWith("grad: input 0 (shape [2]) does not require grad"));
  CHECK_THAT(error_of([&] { grad({y}, {x}); }), StartsWith("grad: grad can be implicitly created only for scalar outputs"));
  CHECK_THAT(error_of([&] { grad({y}, {x}, {zeros({3}, kFloat64)}); }),
             StartsWith("grad: expected a gradient of shape [2] and dtype float64, got shape [3]"));
  CHECK_THAT(error_of([&] { grad({y}, {x}, {zeros({2}, kFloat64), zeros({2}, kFloat64)}); }),
             StartsWith("grad: got 1 outputs but 2 gradients"));
  CHECK_THAT(error_of([&] { grad({sum(c)}, {x}); }), StartsWith("grad: output 0 does not require grad"));
}

TEST_CASE("grad twice on a retained graph gives the same gradients, on a freed one a clear error") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor z = sum(exp(x));
  auto a = grad({z}, {x}, {}, {.retain_graph = true});
  auto b = grad({z}, {x});
  CHECK(equal(a[0], b[0]));
  CHECK_THAT(error_of([&] { grad({z}, {x}); }),
             StartsWith("grad: trying to backward through the graph a second time") && Contains("retain_graph"));
}

TEST_CASE("grad runs the tensors' hooks on the way but no post-accumulate hook and no retain_grad") {
  Tensor x = leaf({1, 2}, {2});
  int post = 0;
  x.register_hook([](const Tensor& g) { return mul(g, 10.0); });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { post++; });
  Tensor y = mul(x, 3.0);
  y.retain_grad();
  auto g = grad({sum(y)}, {x});
  CHECK(vals(g[0]) == std::vector<double>{30, 30});  // the leaf's hook replaced it
  CHECK(post == 0);
  CHECK_FALSE(y.grad().defined());
  CHECK_FALSE(x.grad().defined());
}

// ------------------------------------------------------------------ create_graph
TEST_CASE("create_graph: the second and third derivatives of x^3 are 6x and 6") {
  Tensor x = leaf({-1.5, 0.5, 2}, {3});
  Tensor y = sum(pow(x, 3.0));
  Tensor g1 = grad({y}, {x}, {}, {.create_graph = true})[0];
  CHECK(g1.requires_grad());
  CHECK(vals(g1) == std::vector<double>{3 * 2.25, 3 * 0.25, 12});
  Tensor g2 = grad({sum(g1)}, {x}, {}, {.create_graph = true})[0];
  CHECK(vals(g2) == std::vector<double>{-9, 3, 12});
  Tensor g3 = grad({sum(g2)}, {x})[0];
  CHECK(vals(g3) == std::vector<double>{6, 6, 6});
}

TEST_CASE("backward with create_graph leaves .grad with a graph, accumulated out of place") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(mul(mul(x, x), x));  // dy/dx = 3x^2
  y.backward(Tensor(), std::nullopt, /*create_graph=*/true);
  Tensor gx = x.grad();
  REQUIRE(gx.defined());
  CHECK(gx.requires_grad());
  CHECK(vals(gx) == std::vector<double>{3, 12});
  Tensor first = gx;
  // the graph was retained (create_graph implies it): a second backward accumulates
  y.backward(Tensor(), std::nullopt, true);
  CHECK(vals(x.grad()) == std::vector<double>{6, 24});
  CHECK(vals(first) == std::vector<double>{3, 12});  // not modified in place
  // and the gradient differentiates: d/dx sum(6x^2) = 12x
  Tensor g = x.grad();
  x.zero_grad();
  sum(g).backward();
  CHECK(vals(x.grad()) == std::vector<double>{12, 24});
}

TEST_CASE("dropping a double-backward graph frees every node, even one stored in .grad") {
  const int64_t before = Node::live_count();
  {
    Tensor x = randn64({4, 3}, 1).requires_grad_();
    Tensor w = randn64({3, 3}, 2).requires_grad_();
    Tensor loss = sum(tanh(matmul(softmax(matmul(x, w), -1), w)));
    Tensor gx = grad({loss}, {x}, {}, {.create_graph = true})[0];
    Tensor hv = grad({sum(mul(gx, gx))}, {w}, {}, {.create_graph = true})[0];
    CHECK(Node::live_count() > before);
    // the cycle PyTorch warns about: x.grad's graph reads x
    loss.backward(Tensor(), std::nullopt, /*create_graph=*/true);
    CHECK(x.grad().requires_grad());
  }
  CHECK(Node::live_count() == before);
}

TEST_CASE("double backward of a fully masked attention row is finite, and zero for that row") {
  Tensor q = randn64({2, 3, 4}, 3).requires_grad_(), k = randn64({2, 5, 4}, 4).requires_grad_(),
         v = randn64({2, 5, 4}, 5).requires_grad_();
  std::vector<bool> blocked(2 * 3 * 5, false);
  for (int j = 0; j < 5; j++) blocked[1 * 15 + 2 * 5 + j] = true;  // batch 1, query 2: every key blocked
  for (int j = 3; j < 5; j++) blocked[0 * 15 + 0 * 5 + j] = true;
  auto mask = nn::AttentionMask::blocked(from_bools(blocked, {2, 3, 5}));
  for (bool tiled : {false, true}) {
    INFO((tiled ? "tiled" : "fused"));
    auto attend = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return tiled ? nn::scaled_dot_product_attention_tiled(a, b, c, mask)
                   : nn::scaled_dot_product_attention(a, b, c, mask).output;
    };
    Tensor out = attend(q, k, v);
    auto g = grad({sum(square(out))}, {q, k, v}, {}, {.create_graph = true});
    auto h = grad({sum(square(g[0])) + sum(square(g[1])) + sum(square(g[2]))}, {q, k, v});
    for (const Tensor& t : h) CHECK(kernel::all_finite(t));
    CHECK(vals(h[0].select(0, 1).select(0, 2)) == std::vector<double>(4, 0.0));
  }
}

// ------------------------------------------------------------------ gradgradcheck of fused ops and layers
TEST_CASE("gradgradcheck: layer_norm, cross_entropy, linear, embedding and dropout with its mask") {
  Tensor x = randn64({3, 5}, 10).requires_grad_(), w = randn64({5}, 11).requires_grad_(),
         b = randn64({5}, 12).requires_grad_();
  check_passes(gradgradcheck([](const Inputs& in) { return nn::layer_norm(in[0], in[1], in[2]); }, {x, w, b}));
  Tensor xt = randn64({5, 3}, 13).t().detach().requires_grad_();
  check_passes(gradgradcheck([](const Inputs& in) { return nn::layer_norm(in[0], Tensor(), Tensor()); }, {xt}));

  Tensor logits = randn64({4, 6}, 14).requires_grad_();
  Tensor target = from_vector(std::vector<int64_t>{1, -100, 5, 0}, {4});
  check_passes(gradgradcheck([&](const Inputs& in) { return nn::cross_entropy(in[0], target, -100, 0.1); }, {logits}));

  Tensor xl = randn64({2, 3, 4}, 15).requires_grad_(), wl = randn64({5, 4}, 16).requires_grad_(),
         bl = randn64({5}, 17).requires_grad_();
  check_passes(gradgradcheck([](const Inputs& in) { return tanh(linear(in[0], in[1], in[2])); }, {xl, wl, bl}));

  Tensor table = randn64({6, 3}, 18).requires_grad_();
  Tensor ids = from_vector(std::vector<int64_t>{1, 4, 1, 0}, {2, 2});
  check_passes(gradgradcheck([&](const Inputs& in) { return square(embedding_lookup(in[0], ids)); }, {table}));

  Tensor xd = randn64({4, 5}, 19).requires_grad_();
  check_passes(gradgradcheck([](const Inputs& in) {
    Generator g(7);  // the same mask at every evaluation
    return square(dropout(in[0], 0.4, true, &g));
  }, {xd}));
  check_passes(gradgradcheck([](const Inputs& in) {
    Generator g(7);
    return square(relu_dropout(in[0], 0.4, true, &g));
  }, {xd}));
}

TEST_CASE("gradgradcheck: fused and tiled attention with masks, broadcast and transposed inputs") {
  Tensor q = randn64({2, 2, 3, 4}, 20).requires_grad_(), k = randn64({2, 1, 5, 4}, 21).requires_grad_();
  Tensor v = randn64({2, 1, 3, 5}, 22).transpose(-1, -2).detach().requires_grad_();  // [2,1,5,3], transposed
  std::vector<bool> pad(2 * 5, false);
  pad[4] = pad[5 + 3] = pad[5 + 4] = true;
  auto padding = nn::AttentionMask::blocked(from_bools(pad, {2, 1, 1, 5}));
  std::vector<bool> rows(3 * 5, false);
  for (int j = 0; j < 5; j++) rows[1 * 5 + j] = true;  // query 1 sees nothing
  auto full_row = nn::AttentionMask::blocked(from_bools(rows, {3, 5}));
  for (const auto& mask : {nn::AttentionMask(), padding, full_row}) {
    check_passes(gradgradcheck([&](const Inputs& in) {
      return nn::scaled_dot_product_attention(in[0], in[1], in[2], mask).output;
    }, {q, k, v}, {}, {"q", "k", "v"}));
    check_passes(gradgradcheck([&](const Inputs& in) {
      return nn::scaled_dot_product_attention_tiled(in[0], in[1], in[2], mask);
    }, {q, k, v}, {}, {"q", "k", "v"}));
  }
  // attention dropout: the same decisions in the backward's backward
  check_passes(gradgradcheck([&](const Inputs& in) {
    Generator g(3);
    return nn::scaled_dot_product_attention(in[0], in[1], in[2], padding, 0.3, true, &g).output;
  }, {q, k, v}));
  check_passes(gradgradcheck([&](const Inputs& in) {
    Generator g(3);
    return nn::scaled_dot_product_attention_tiled(in[0], in[1], in[2], padding, 0.3, true, &g);
  }, {q, k, v}));
}

TEST_CASE("gradgradcheck: MultiHeadAttention with kdim, vdim and masks, encoder and decoder layers") {
  Generator g(30);
  auto mha = std::make_shared<nn::MultiHeadAttention>(nn::MultiHeadAttentionOptions{
      .embed_dim = 6, .num_heads = 2, .kdim = 4, .vdim = 3, .gen = &g, .dtype = kFloat64});
  Tensor query = randn64({2, 3, 6}, 31).requires_grad_(), key = randn64({2, 4, 4}, 32).requires_grad_(),
         value = randn64({2, 4, 3}, 33).requires_grad_();
  std::vector<bool> pad(8, false);
  pad[3] = pad[4 + 0] = pad[4 + 1] = pad[4 + 2] = pad[4 + 3] = true;  // batch 1: every key blocked
  auto padding = nn::AttentionMask::blocked(from_bools(pad, {2, 4}));
  Inputs in{query, key, value, mha->q_proj->weight, mha->k_proj->weight, mha->out_proj->bias};
  check_passes(gradgradcheck([&](const Inputs&) {
    return mha->forward(query, key, value, {.key_padding_mask = padding}).output;
  }, in));

  nn::LayerConfig cfg{.d_model = 4, .num_heads = 2, .dim_feedforward = 6, .dropout_p = 0.0,
                      .activation = nn::Activation::GELU};
  auto enc = std::make_shared<nn::EncoderLayer>(cfg, &g, kFloat64);
  auto dec = std::make_shared<nn::DecoderLayer>(cfg, &g, kFloat64);
  Tensor x = randn64({2, 3, 4}, 34).requires_grad_(), mem = randn64({2, 4, 4}, 35).requires_grad_();
  auto causal = nn::AttentionMask::blocked(gt(sub(arange(3).unsqueeze(0), arange(3).unsqueeze(1)), 0.0));
  check_passes(gradgradcheck([&](const Inputs&) { return enc->forward(x, {}, causal); },
                             {x, enc->self_attn->q_proj->weight, enc->norm1->weight}));
  check_passes(gradgradcheck([&](const Inputs&) {
    return dec->forward(x, mem, {.memory_key_padding_mask = padding, .causal = true});
  }, {x, mem, dec->cross_attn->k_proj->weight}));
}

TEST_CASE("gradgradcheck catches a backward that is not recorded, naming the input") {
  const Function unrecorded{
      .name = "square_unrecorded",
      .forward = [](FunctionCtx& ctx, const Inputs& in) {
        ctx.save_for_backward({in[0]});
        return square(in[0]);
      },
      .backward = [](FunctionCtx& ctx, const Tensor& g) {
        // the saved input's data only: nothing of this is recorded
        return Inputs{mul(g, mul(ctx.saved_tensors()[0].detach(), 2.0))};
      }};
  Tensor x = randn64({2, 3}, 40).requires_grad_();
  check_passes(gradcheck([&](const Inputs& in) { return unrecorded.apply({in[0]}); }, {x}));
  GradcheckReport r = gradgradcheck([&](const Inputs& in) { return unrecorded.apply({in[0]}); }, {x}, {}, {"x"});
  CHECK_FALSE(r.passed);
  REQUIRE(r.inputs.size() == 2);
  CHECK(r.inputs[0].name == "x");
  CHECK_FALSE(r.inputs[0].passed);
  CHECK(r.inputs[1].name == "grad_output");
  CHECK(r.inputs[1].passed);
  CHECK_THAT(r.to_string(), StartsWith("gradgradcheck FAILED"));
}

// ------------------------------------------------------------------ Hessians
TEST_CASE("the Hessian of a small MLP's loss agrees with finite differences of its gradient") {
  Tensor w1 = randn64({4, 3}, 50, 0.7), w2 = randn64({2, 4}, 51, 0.7);
  Tensor data = randn64({5, 3}, 52);
  Tensor target = from_vector(std::vector<int64_t>{0, 1, 1, 0, 1}, {5});
  // the loss as a function of w1 (flattened), w2 fixed
  TensorFn loss = [&](const Tensor& p) {
    Tensor h = gelu(linear(data, p.view({4, 3})));
    return nn::cross_entropy(linear(h, w2), target);
  };
  Tensor p = w1.reshape({12});
  Tensor H = hessian(loss, p);
  REQUIRE(H.shape() == Shape{12, 12});
  CHECK(max_abs_diff(H, H.t()) < 1e-12);  // symmetric
  for (int64_t j = 0; j < 12; j++) {
    Tensor e = zeros({12}, kFloat64);
    e.select(0, j).fill_(1.0);
    INFO("column " << j);
    check_close_relative(H.select(1, j), fd_of_gradient(loss, p, e), 1e-6);
  }
  // hvp agrees with H v
  Tensor v = randn64({12}, 53);
  CHECK(max_abs_diff(hvp(loss, p, v).second, matmul(H, v)) < 1e-12);
}

TEST_CASE("a Hessian-vector product through MultiHeadAttention agrees with finite differences of the gradient") {
  Generator g(60);
  auto mha = std::make_shared<nn::MultiHeadAttention>(
      nn::MultiHeadAttentionOptions{.embed_dim = 8, .num_heads = 2, .gen = &g, .dtype = kFloat64});
  Tensor key = randn64({2, 5, 8}, 61);
  std::vector<bool> pad(10, false);
  pad[4] = pad[8] = pad[9] = true;
  auto padding = nn::AttentionMask::blocked(from_bools(pad, {2, 5}));
  TensorFn loss = [&](const Tensor& query) {
    Tensor out = mha->forward(query, key, key, {.key_padding_mask = padding}).output;
    return sum(square(tanh(out)));
  };
  Tensor query = randn64({2, 3, 8}, 62), v = randn64({2, 3, 8}, 63);
  check_close_relative(hvp(loss, query, v).second, fd_of_gradient(loss, query, v), 1e-6);
}

TEST_CASE("the Hessian of logsumexp is the softmax Jacobian diag(p) - p p^T, and so is cross-entropy's") {
  Tensor x = randn64({5}, 70, 2.0);
  Tensor p = softmax(x, 0);
  Tensor closed = sub(diag_of(p), matmul(p.unsqueeze(1), p.unsqueeze(0)));
  TensorFn lse = [](const Tensor& z) { return add(log(sum(exp(sub(z, amax(z))))), amax(z)); };
  CHECK(max_abs_diff(hessian(lse, x), closed) < 1e-12);
  CHECK(max_abs_diff(jacobian([](const Tensor& z) { return softmax(z, 0); }, x), closed) < 1e-12);
  Tensor t = from_vector(std::vector<int64_t>{3}, {1});
  TensorFn ce = [&](const Tensor& z) { return nn::cross_entropy(z.unsqueeze(0), t); };
  CHECK(max_abs_diff(hessian(ce, x), closed) < 1e-12);
}

TEST_CASE("jacobian, hessian and hvp leave x alone and reject what they cannot take") {
  Tensor x = randn64({3}, 80).requires_grad_();
  const auto before = vals(x);
  TensorFn f = [](const Tensor& z) { return sum(pow(z, 4.0)); };
  Tensor H = hessian(f, x);
  CHECK(vals(x) == before);
  CHECK_FALSE(x.grad().defined());
  for (int64_t i = 0; i < 3; i++) CHECK(H.at({i, i}) == Approx(12 * before[i] * before[i]).epsilon(1e-12));
  CHECK(H.at({0, 1}) == 0.0);
  // a function of x that is linear, or constant, has zero second derivatives
  CHECK(vals(hessian([](const Tensor& z) { return sum(mul(z, 3.0)); }, x)) == std::vector<double>(9, 0.0));
  CHECK(vals(jacobian([](const Tensor& z) { return ones({2}, kFloat64); }, x)) == std::vector<double>(6, 0.0));
  CHECK_THAT(error_of([&] { hessian([](const Tensor& z) { return z; }, x); }),
             StartsWith("hessian: expected the function to return one element (a scalar loss), got shape [3]"));
  CHECK_THAT(error_of([&] { hvp(f, x, zeros({4}, kFloat64)); }),
             StartsWith("hvp: expected v of x's shape [3] and dtype float64, got shape [4]"));
  CHECK_THAT(error_of([&] { jacobian(f, zeros({2}, kInt64)); }), StartsWith("jacobian: expected a float32 or float64 x"));
  // an integer value has no derivative: refused, not answered with zeros
  const TensorFn to_int = [](const Tensor& z) { return argmax(z, 0); };
  CHECK_THAT(error_of([&] { jacobian(to_int, x); }),
             StartsWith("jacobian: the function returned a tensor of dtype int64 and shape []; expected float32 or float64"));
  CHECK_THAT(error_of([&] { hvp(to_int, x, x.detach()); }), StartsWith("hvp: the function returned a tensor of dtype int64"));
  CHECK_THAT(error_of([&] { hessian(to_int, x); }), StartsWith("hessian: the function returned a tensor of dtype int64"));
}

TEST_CASE("jacobian, hessian, vjp, jvp and hvp of several inputs give PyTorch's blocks and products") {
  const Tensor a = randn64({3}, 90), b = randn64({2, 3}, 91);
  // f(a, b) = sum(tanh(b a) * (b a)), a function of both, non-linear in each
  const TensorsFn f = [](const std::vector<Tensor>& in) {
    const Tensor z = matmul(in[1], in[0]);
    return sum(mul(tanh(z), z));
  };
  const TensorsFn g = [](const std::vector<Tensor>& in) { return tanh(matmul(in[1], in[0])); };  // [2]
  // the blocks against a flat Hessian of the concatenated inputs
  const Tensor ab = cat({a, b.reshape({6})}, 0);
  const TensorFn flat = [&](const Tensor& z) { return f({z.narrow(0, 0, 3), z.narrow(0, 3, 6).view({2, 3})}); };
  const Tensor H = hessian(flat, ab);
  const auto blocks = hessian(f, {a, b});
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0][0].shape() == Shape{3, 3});
  CHECK(blocks[0][1].shape() == Shape{3, 2, 3});
  CHECK(blocks[1][0].shape() == Shape{2, 3, 3});
  CHECK(blocks[1][1].shape() == Shape{2, 3, 2, 3});
  CHECK(max_abs_diff(blocks[0][1].reshape({3, 6}), H.narrow(0, 0, 3).narrow(1, 3, 6)) < 1e-13);
  CHECK(max_abs_diff(blocks[1][1].reshape({6, 6}), H.narrow(0, 3, 6).narrow(1, 3, 6)) < 1e-13);
  CHECK(max_abs_diff(blocks[1][0].reshape({6, 3}), blocks[0][1].reshape({3, 6}).t()) < 1e-13);  // symmetric
  // hvp: (f(x), H v), per input
  const Tensor va = randn64({3}, 92), vb = randn64({2, 3}, 93);
  const auto [fx, hv] = hvp(f, {a, b}, {va, vb});
  CHECK(fx.item() == Approx(f({a, b}).item()).epsilon(1e-15));
  const Tensor Hv = matmul(H, cat({va, vb.reshape({6})}, 0));
  CHECK(max_abs_diff(hv[0], Hv.narrow(0, 0, 3)) < 1e-13);
  CHECK(max_abs_diff(hv[1].reshape({6}), Hv.narrow(0, 3, 6)) < 1e-13);
  // jacobian per input; vjp = v^T J and jvp = J t against it
  const auto J = jacobian(g, {a, b});
  CHECK(J[0].shape() == Shape{2, 3});
  CHECK(J[1].shape() == Shape{2, 2, 3});
  const Tensor u = randn64({2}, 94);
  const auto [gy, vj] = vjp(g, {a, b}, u);
  CHECK(max_abs_diff(gy, g({a, b})) == 0);
  CHECK(max_abs_diff(vj[0], matmul(u, J[0])) < 1e-14);
  CHECK(max_abs_diff(vj[1].reshape({6}), matmul(u, J[1].reshape({2, 6}))) < 1e-14);
  const auto [jy, jt] = jvp(g, {a, b}, {va, vb});
  CHECK(max_abs_diff(jt, add(matmul(J[0], va), matmul(J[1].reshape({2, 6}), vb.reshape({6})))) < 1e-14);
  // one input: the same functions, and the inputs untouched
  const Tensor x = randn64({4}, 95).requires_grad_();
  const TensorFn h = [](const Tensor& z) { return softmax(z, 0); };
  const Tensor t = randn64({4}, 96);
  CHECK(max_abs_diff(jvp(h, x, t).second, matmul(jacobian(h, x), t)) < 1e-15);
  CHECK(max_abs_diff(vjp(h, x, t).second, matmul(t, jacobian(h, x))) < 1e-15);
  CHECK_FALSE(x.grad().defined());
  // a function not depending on an input gives zeros for it
  const TensorsFn only_a = [](const std::vector<Tensor>& in) { return sum(square(in[0])); };
  CHECK(vals(hessian(only_a, {a, b})[1][1]) == std::vector<double>(36, 0.0));
  CHECK(vals(jvp(only_a, {a, b}, {zeros({3}, kFloat64), vb}).second) == std::vector<double>{0.0});
  CHECK_THAT(error_of([&] { (void)jvp(g, {a, b}, {va}); }), StartsWith("jvp: expected 2 tangents (one per input), got 1"));
  CHECK_THAT(error_of([&] { (void)jvp(g, {a, b}, {va, va}); }),
             StartsWith("jvp: expected tangent 1 of input 1's shape [2,3] and dtype float64, got shape [3]"));
  CHECK_THAT(error_of([&] { (void)vjp(g, {a, b}, zeros({3}, kFloat64)); }),
             StartsWith("vjp: expected v of the function's value's shape [2]"));
  CHECK_THAT(error_of([&] { (void)hvp(f, {a, b}, {va}); }), StartsWith("hvp: expected 2 vectors v (one per input), got 1"));
  CHECK_THAT(error_of([&] { (void)hessian(f, {}); }), StartsWith("hessian: expected at least one input"));
}

// ------------------------------------------------------------------ custom functions
// (docs/tensors-and-autograd.md's example, y = x^3, is checked there, contiguous and not.)
TEST_CASE("a custom Function with a saved output and saved data is gradient-checked to the first and second order") {
  Tensor x = randn64({3, 4}, 90).requires_grad_();
  // y = s * exp(x), dy/dx = y
  const Function scaled_exp{
      .name = "scaled_exp",
      .forward = [](FunctionCtx& ctx, const Inputs& in) {
        Tensor y = mul(exp(in[0]), in[1].item());
        ctx.save_for_backward({y});
        ctx.saved_data["scale"] = in[1].item();
        return y;
      },
      .backward = [](FunctionCtx& ctx, const Tensor& g) {
        CHECK(std::any_cast<double>(ctx.saved_data.at("scale")) == 2.5);
        CHECK_FALSE(ctx.needs_input_grad(1));
        return Inputs{mul(g, ctx.saved_tensors()[0]), Tensor()};
      }};
  Tensor s = scalar_tensor(2.5, kFloat64);
  check_passes(gradcheck([&](const Inputs& i) { return scaled_exp.apply({i[0], s}); }, {x}));
  check_passes(gradgradcheck([&](const Inputs& i) { return scaled_exp.apply({i[0], s}); }, {x}));
}

TEST_CASE("a custom Function's errors name it: wrong gradient count, shape, in-place change, anomaly") {
  auto make = [](std::function<Inputs(const Tensor&)> bw) {
    return Function{.name = "my_op",
                    .forward = [](FunctionCtx& ctx, const Inputs& in) {
                      ctx.save_for_backward({in[0]});
                      return mul(in[0], 2.0);
                    },
                    .backward = [bw](FunctionCtx&, const Tensor& g) { return bw(g); }};
  };
  Tensor x = randn64({3}, 92).requires_grad_();
  CHECK_THAT(error_of([&] { sum(make([](const Tensor& g) { return Inputs{g, g}; }).apply({x})).backward(); }),
             StartsWith("my_op: backward returned 2 gradients; expected 1"));
  CHECK_THAT(error_of([&] { sum(make([](const Tensor& g) { return Inputs{g.unsqueeze(0)}; }).apply({x})).backward(); }),
             StartsWith("my_op: backward returned a gradient of shape [1,3]") && Contains("expected shape [3]"));
  Tensor y = make([](const Tensor& g) { return Inputs{mul(g, 2.0)}; }).apply({x});
  x.detach().fill_(1.0);  // the saved input, changed in place
  CHECK_THAT(error_of([&] { sum(y).backward(); }), Contains("that my_op (called at") && Contains("modified in place"));
  AnomalyGuard anomaly;
  Tensor z = make([](const Tensor& g) { return Inputs{div(g, 0.0)}; }).apply({x});
  CHECK_THAT(error_of([&] { sum(z).backward(); }),
             StartsWith("my_op: produced NaN or Inf in its backward") && Contains("test_higher_order.cpp"));
  const Function empty_fn{.name = "half"};
  CHECK_THAT(error_of([&] { empty_fn.apply({x}); }), StartsWith("half: a Function needs both a forward and a backward"));
}

// ------------------------------------------------------------------ module forward hooks
TEST_CASE("forward hooks see every layer's inputs, output and attention weights, and are removable") {
  Generator g(100);
  nn::LayerConfig cfg{.d_model = 8, .num_heads = 2, .dim_feedforward = 16, .dropout_p = 0.0};
  nn::Encoder enc(cfg, 2, &g, kFloat64);
  Tensor x = randn64({2, 5, 8}, 101);
  std::vector<Tensor> weights;
  std::vector<HookHandle> handles;
  for (size_t i = 0; i < 2; i++)
    handles.push_back(enc.layer(i)->self_attn->register_forward_hook(
        [&](nn::Module&, const Inputs& in, const Inputs& out) {
          CHECK(in.size() == 3);
          REQUIRE(out.size() == 2);
          weights.push_back(out[1]);
        }));
  int calls = 0;
  Tensor seen_in, seen_out;
  HookHandle whole = enc.register_forward_hook([&](nn::Module& m, const Inputs& in, const Inputs& out) {
    calls++;
    CHECK(&m == &enc);
    seen_in = in[0];
    seen_out = out[0];
  });
  Tensor y = enc.forward(x);
  REQUIRE(weights.size() == 2);
  for (const Tensor& w : weights) {
    CHECK(w.shape() == Shape{2, 2, 5, 5});
    CHECK(max_abs_diff(sum(w, {-1}), ones({2, 2, 5}, kFloat64)) < 1e-12);  // rows of probabilities
  }
  CHECK(calls == 1);
  CHECK(seen_in.same(x));
  CHECK(seen_out.same(y));
  // a hook changes nothing computed
  whole.remove();
  for (auto& h : handles) h.remove();
  Tensor again = enc.forward(x);
  CHECK(equal(again, y));
  CHECK(calls == 1);
  CHECK(weights.size() == 2);
  whole.remove();  // twice is harmless
}

// A hook that returns outputs (which PyTorch would use in place of the module's) does not
// compile, rather than being silently ignored; one that returns nothing does.
struct ObservingHook {
  void operator()(nn::Module&, const Inputs&, const Inputs&) const {}
};
struct ReplacingHook {
  Inputs operator()(nn::Module&, const Inputs&, const Inputs& out) const { return out; }
};
template <class Fn>
constexpr bool registers = requires(nn::Module& m, Fn fn) { m.register_forward_hook(fn); };
static_assert(registers<ObservingHook>);
static_assert(registers<nn::Module::ForwardHook>);
static_assert(!registers<ReplacingHook>);

// ------------------------------------------------------------------ reentrancy and safety
TEST_CASE("hooks may run ops and even a backward of their own, with grad enabled") {
  Tensor x = leaf({1, 2}, {2});
  Tensor inner = leaf({3}, {1});
  Tensor y = mul(x, x);
  y.register_hook([&](const Tensor& gr) {
    GradModeGuard on(true);
    Tensor side = sum(mul(inner, inner));
    side.backward();  // a whole other backward, inside this one
    return mul(gr, 2.0);
  });
  sum(y).backward();
  CHECK(vals(x.grad()) == std::vector<double>{4, 8});  // 2 * 2x
  CHECK(vals(inner.grad()) == std::vector<double>{6});
}

TEST_CASE("backward through a tensor whose graph was freed is a clear error, before its hook runs") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = exp(x);
  Tensor z = sum(y);
  z.backward();
  int runs = 0;
  y.register_hook([&](const Tensor& gr) {
    runs++;
    return gr;
  });
  CHECK_THAT(error_of([&] { z.backward(); }), Contains("a second time"));
  CHECK_THAT(error_of([&] { sum(y).backward(); }), Contains("a second time") && Contains("exp"));
  CHECK(runs == 0);  // the freed node refuses before its tensor's hooks see anything
}

TEST_CASE("first-order gradients are bitwise the same with and without create_graph through softmax") {
  Tensor x = randn64({3, 7}, 110, 3.0).requires_grad_();
  Tensor u = randn64({3, 7}, 111);
  Tensor plain = grad({softmax(x, -1)}, {x}, {u})[0];
  Tensor recorded = grad({softmax(x, -1)}, {x}, {u}, {.create_graph = true})[0];
  CHECK(equal(plain, recorded.detach()));
  Tensor lplain = grad({log_softmax(x, 0)}, {x}, {u})[0];
  Tensor lrecorded = grad({log_softmax(x, 0)}, {x}, {u}, {.create_graph = true})[0];
  CHECK(equal(lplain, lrecorded.detach()));
}

// ------------------------------------------------------------------ one derivative, written twice
// Each unary op writes its derivative twice: as a scalar function for a plain backward (one
// kernel pass) and as ops for a backward that is itself recorded (create_graph). The two
// must give the same gradient, at points where each op is smooth.
TEST_CASE("each unary op's derivative as a kernel equals its derivative written with ops") {
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, true); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }},
      {"pow -1.5", [](const Tensor& x) { return pow(x, -1.5); }},
      {"pow 0", [](const Tensor& x) { return pow(x, 0.0); }},
      {"rdiv", [](const Tensor& x) { return rdiv(2.5, x); }},
  };
  // positive points away from 0 (log, sqrt, pow of a fraction) and a non-uniform upstream
  // gradient; a transposed view too, so that strided reads take part
  Generator gen(5);
  const Tensor base = add(mul(rand({3, 4}, kFloat64, &gen), 2.0), 0.25);
  const Tensor up = randn64({3, 4}, 11);
  for (bool transposed : {false, true}) {
    for (const auto& [name, f] : ops) {
      INFO(name << (transposed ? ", transposed" : ""));
      for (double sign : {1.0, -1.0}) {
        if (sign < 0 && (name == "log" || name == "sqrt" || name == "rsqrt" || name.rfind("pow -", 0) == 0)) continue;
        Tensor x0 = mul(base, sign);
        if (transposed) x0 = x0.t().contiguous().t();
        Tensor x = x0.detach().requires_grad_();
        const Tensor plain = grad({f(x)}, {x}, {up})[0];
        const Tensor recorded = grad({f(x)}, {x}, {up}, {.create_graph = true})[0];
        const double largest = max_abs_diff(plain, zeros_like(plain));
        CHECK(max_abs_diff(plain, recorded.detach()) <= 1e-13 * (1.0 + largest));
      }
    }
  }
}

namespace {
ember::Loc fallback_loc() { return ember::Loc::current("script.py", 7, "<module>"); }
ember::Loc empty_loc() { return ember::Loc(); }
}  // namespace

TEST_CASE("a CallerLoc names the driving language's line in the nodes recorded under it, and errors") {
  Tensor x = randn64({3}, 93).requires_grad_();
  Tensor y;
  {
    const CallerLoc caller(Loc::current("train.py", 42, "step"));
    REQUIRE(CallerLoc::current() != nullptr);
    y = mul(x, x);
    {
      const CallerLoc inner(Loc::current("inner.py", 3, "f"));
      CHECK(CallerLoc::current()->line() == 3);
    }
    CHECK(CallerLoc::current()->line() == 42);  // the outer one restored
  }
  CHECK(CallerLoc::current() == nullptr);
  CHECK(std::string(y.grad_fn()->where.file_name()) == "train.py");
  CHECK(y.grad_fn()->where.line() == 42);
  Tensor z = mul(x, x);  // none set: the C++ caller, this file
  CHECK_THAT(std::string(z.grad_fn()->where.file_name()), Contains("test_higher_order.cpp"));
  sum(y).backward();
  CHECK_THAT(error_of([&] { sum(y).backward(); }), Contains("train.py:42 (step)"));
  // the fallback is asked when none is set; an empty answer leaves the C++ location
  CallerLoc::set_fallback(&fallback_loc);
  Tensor w = mul(x, x);
  CallerLoc::set_fallback(&empty_loc);
  Tensor v = mul(x, x);
  CallerLoc::set_fallback(nullptr);
  CHECK(std::string(w.grad_fn()->where.file_name()) == "script.py");
  CHECK_THAT(std::string(v.grad_fn()->where.file_name()), Contains("test_higher_order.cpp"));
  {
    AnomalyGuard anomaly;
    const CallerLoc caller(Loc::current("nan.py", 5, "g"));
    CHECK_THAT(error_of([&] { (void)log(sub(x, 1000.0)); }), Contains("called at nan.py:5 (g)"));
  }
}
