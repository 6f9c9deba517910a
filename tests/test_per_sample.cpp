// Per-sample gradients (nn/per_sample.h) against their definition: for each example b,
// the gradient of its loss alone, by a backward pass of losses[b] through the same batched
// forward (so dropout keeps the batch's masks). Float64, to 1e-12 relative, through
// Embedding with a padding index, Linear, LayerNorm, MultiheadAttention (fused and tiled,
// padding and causal masks, kdim/vdim) and the whole Transformer in training mode (packed
// encoder rows, padded targets, cross-entropy with label smoothing and ignored positions).
#include <catch2/catch.hpp>
#include "test_util.h"

#include <string>
#include <tuple>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/random.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/multihead_attention.h"
#include "nn/per_sample.h"
#include "nn/transformer.h"

using namespace ember;
using ember::testing::error_of;
using ember::testing::max_abs_diff;

namespace {

// The loop it replaces: example b's gradient by its own backward pass, stacked.
std::vector<Tensor> by_loop(nn::Module& model, const std::function<Tensor()>& losses, int64_t B) {
  std::vector<Tensor> params;
  for (auto& [n, p] : model.named_parameters()) params.push_back(p);
  const Tensor L = losses();
  std::vector<std::vector<Tensor>> rows(params.size());
  for (int64_t b = 0; b < B; b++) {
    auto g = grad({L.select(0, b)}, params, {}, {.retain_graph = true, .allow_unused = true});
    for (size_t i = 0; i < params.size(); i++)
      rows[i].push_back(g[i].defined() ? g[i] : zeros(params[i].shape(), params[i].dtype()));
  }
  std::vector<Tensor> out;
  for (auto& r : rows) out.push_back(stack(r, 0));
  return out;
}

// Checks per_sample_grads against the loop, parameter by parameter.
void check_against_loop(nn::Module& model, const std::function<Tensor()>& losses, int64_t B) {
  const nn::NamedTensors fast = nn::per_sample_grads(model, B, losses);
  const std::vector<Tensor> slow = by_loop(model, losses, B);
  REQUIRE(fast.size() == slow.size());
  for (size_t i = 0; i < fast.size(); i++) {
    INFO(fast[i].first);
    REQUIRE(fast[i].second.shape() == slow[i].shape());
    const double scale = std::max(1.0, max(abs(slow[i])).item());
    CHECK(max_abs_diff(fast[i].second, slow[i]) <= 1e-12 * scale);
  }
}

// An embedding with a padding index, a Linear and a LayerNorm over padded sequences.
struct Small : nn::Module {
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Linear> proj;
  std::shared_ptr<nn::LayerNorm> norm;
  explicit Small(Generator& g) {
    embed = register_module("embed", std::make_shared<nn::Embedding>(9, 6, /*padding_idx=*/0, &g, kFloat64));
    proj = register_module("proj", std::make_shared<nn::Linear>(6, 4, true, &g, kFloat64));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(4, 1e-5, true, kFloat64));
  }
};

// Each example's cross-entropy of logits [B, T, V] against targets [B, T] (its own mean).
Tensor per_example_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore, double smoothing) {
  std::vector<Tensor> l;
  for (int64_t b = 0; b < logits.size(0); b++)
    l.push_back(nn::cross_entropy(logits.select(0, b), targets.select(0, b), ignore, smoothing));
  return stack(l, 0);
}

}  // namespace

TEST_CASE("per-sample gradients through Embedding, Linear and LayerNorm equal one backward per example") {
  Generator g(3);
  Small model(g);
  // ids with padding (0) at different places; the LayerNorm's parameters made non-trivial
  const Tensor ids = tensor({{3, 1, 4, 0, 0}, {5, 0, 2, 6, 8}, {7, 7, 0, 0, 0}}, kInt64);
  {
    NoGradGuard no_grad;
    model.norm->weight.copy_(randn({4}, kFloat64, &g));
    model.norm->bias.copy_(randn({4}, kFloat64, &g));
  }
  const Tensor u = randn({3, 5, 4}, kFloat64, &g);
  auto losses = [&] {
    Tensor h = model.norm->forward(tanh(model.proj->forward(model.embed->forward(ids))));
    return sum(mul(square(h), u), {1, 2});
  };
  check_against_loop(model, losses, 3);
  const nn::NamedTensors grads = nn::per_sample_grads(model, 3, losses);
  CHECK(grads[0].first == "embed.weight");
  CHECK(grads[0].second.shape() == Shape{3, 9, 6});
  // the padding row gets nothing from anyone
  CHECK(max(abs(grads[0].second.select(1, 0))).item() == 0.0);
  // .grad untouched
  for (auto& [n, p] : model.named_parameters()) CHECK(!p.grad().defined());
}

TEST_CASE("per-sample gradients through MultiheadAttention, fused and tiled, with masks and kdim/vdim") {
  Generator g(4);
  const int64_t B = 3, L = 4, S = 5, E = 8;
  nn::MultiHeadAttention mha({.embed_dim = E, .num_heads = 2, .kdim = 6, .vdim = 7, .gen = &g, .dtype = kFloat64});
  const Tensor q = randn({B, L, E}, kFloat64, &g), k = randn({B, S, 6}, kFloat64, &g), v = randn({B, S, 7}, kFloat64, &g);
  const Tensor pad = tensor({{false, false, false, true, true}, {false, false, false, false, false},
                             {false, true, false, false, true}}, kBool);
  const Tensor u = randn({B, L, E}, kFloat64, &g);
  for (auto impl : {nn::AttentionImpl::Fused, nn::AttentionImpl::Tiled}) {
    nn::AttentionImplGuard guard(impl);
    auto losses = [&] {
      Tensor y = mha.forward(q, k, v, {.key_padding_mask = nn::AttentionMask::blocked(pad)}).output;
      return sum(mul(square(y), u), {1, 2});
    };
    check_against_loop(mha, losses, B);
  }
  // self-attention, causal
  auto causal = [&] {
    Tensor y = mha.forward(q, q.narrow(2, 0, 6), q.narrow(2, 1, 7), {.is_causal = true}).output;
    return sum(mul(y, u), {1, 2});
  };
  check_against_loop(mha, causal, B);
}

TEST_CASE("per-sample gradients of the whole Transformer in training mode equal one backward per example") {
  nn::TransformerConfig cfg;
  cfg.src_vocab = 11, cfg.tgt_vocab = 9;
  Generator dropout_gen(8);
  cfg.layer = {.d_model = 8, .num_heads = 2, .dim_feedforward = 12, .dropout_p = 0.2, .dropout_gen = &dropout_gen};
  cfg.num_encoder_layers = 1, cfg.num_decoder_layers = 2, cfg.max_len = 16;
  Generator g(5);
  nn::Transformer model(cfg, &g, kFloat64);
  model.train();
  // sources with padding (pad id 0) packed by the encoder; targets with and without padding
  const Tensor src = tensor({{3, 4, 5, 0}, {6, 2, 0, 0}, {7, 8, 9, 10}}, kInt64);
  for (const Tensor& tgt : {tensor({{1, 2, 3, 0}, {1, 4, 0, 0}, {1, 5, 6, 7}}, kInt64),
                            tensor({{1, 2, 3, 4}, {1, 4, 5, 2}, {1, 5, 6, 7}}, kInt64)}) {
    const Tensor tgt_in = tgt.narrow(1, 0, 3), tgt_out = tgt.narrow(1, 1, 3);
    const uint64_t seed = dropout_gen.seed();
    auto losses = [&] {
      dropout_gen.manual_seed(seed);  // the same masks in every forward
      return per_example_cross_entropy(model.forward(src, tgt_in), tgt_out, /*ignore=*/0, /*smoothing=*/0.1);
    };
    check_against_loop(model, losses, 3);
  }
}

TEST_CASE("per_sample_grads refuses what it cannot compute, by name") {
  Generator g(6);
  Small model(g);
  const Tensor ids = tensor({{3, 1}, {5, 2}}, kInt64);
  auto h = [&] { return model.proj->forward(model.embed->forward(ids)); };
  CHECK(error_of([&] { nn::per_sample_grads(model, 0, [&] { return sum(h(), {1, 2}); }); }) ==
        "per_sample_grads: batch_size must be at least 1, got 0");
  CHECK(error_of([&] { nn::per_sample_grads(model, 2, [&] { return sum(h()); }); }) ==
        "per_sample_grads: expected the losses function to return the 2 examples' losses as a float tensor [2], "
        "got float64 of shape []");
  // a loss that couples the examples: each row's gradient mixes them
  CHECK(error_of([&] {
          nn::per_sample_grads(model, 2, [&] {
            Tensor l = sum(square(h()), {1, 2});
            return add(l, sum(l));
          });
        }).find("mixes examples") != std::string::npos);
  // a parameter outside the known layers
  struct WithOwn : nn::Module {
    Tensor scale = ones({1}, kFloat64).requires_grad_();
    std::shared_ptr<nn::Linear> proj;
    explicit WithOwn(Generator& g) {
      register_parameter("scale", scale);
      proj = register_module("proj", std::make_shared<nn::Linear>(2, 2, true, &g, kFloat64));
    }
  } own(g);
  CHECK(error_of([&] { nn::per_sample_grads(own, 2, [&] { return sum(own.proj->forward(ones({2, 2}, kFloat64)), {1}); }); }) ==
        "per_sample_grads: parameter 'scale' of shape [1] belongs to a module that is not a Linear, LayerNorm or "
        "Embedding, whose per-example gradients are not known");
  // a weight read outside its layer's forward
  CHECK(error_of([&] {
          nn::per_sample_grads(model, 2, [&] { return sum(mul(h(), sum(model.proj->weight)), {1, 2}); });
        }).find("'proj.weight' add up to a tensor") != std::string::npos);
  // ... whose parts cancel over the batch (+1 and -1): caught by the weighted sum
  nn::Linear lin(4, 1, true, nullptr, kFloat64);
  const Tensor x = tensor({{1.0, 2.0, 3.0, 4.0}, {0.5, -1.0, 2.0, 0.0}}, kFloat64);
  const Tensor s = tensor({1.0, -1.0}, kFloat64);
  CHECK(error_of([&] {
          nn::per_sample_grads(lin, 2, [&] { return add(lin.forward(x).reshape({-1}), mul(s, sum(lin.weight))); });
        }).find("away from its weighted batch gradient: the parameter is read outside") != std::string::npos);
}

TEST_CASE("per-example norms, the clipped mean and the gradient noise follow their definitions") {
  // two parameters, three examples: a [3, 2] and b [3, 1]
  const nn::NamedTensors grads = {{"layer.a", tensor({{3.0, 0.0}, {0.0, 0.0}, {1.0, 2.0}}, kFloat64)},
                                  {"b", tensor({{4.0}, {0.0}, {2.0}}, kFloat64)}};
  CHECK(nn::per_sample_norms(grads).to_vector<double>() == std::vector<double>{5.0, 0.0, 3.0});
  // clipped to norm 3: example 0 scaled by 3/5, example 1 (zero) and 2 (norm 3) kept
  const nn::NamedTensors clipped = nn::clipped_mean(grads, 3.0);
  CHECK(max_abs_diff(clipped[0].second, tensor({(1.8 + 0 + 1) / 3, (0 + 0 + 2.0) / 3}, kFloat64)) < 1e-15);
  CHECK(max_abs_diff(clipped[1].second, tensor({(2.4 + 0 + 2) / 3}, kFloat64)) < 1e-15);
  // the mean m = ([4/3, 2/3], [2]); |m|^2 = 16/9 + 4/9 + 4; S = sum |g_b - m|^2 / 2
  const double m2 = 16.0 / 9 + 4.0 / 9 + 4.0;
  double spread = 0;
  for (auto [a0, a1, b] : {std::tuple{3.0, 0.0, 4.0}, {0.0, 0.0, 0.0}, {1.0, 2.0, 2.0}})
    spread += (a0 - 4.0 / 3) * (a0 - 4.0 / 3) + (a1 - 2.0 / 3) * (a1 - 2.0 / 3) + (b - 2.0) * (b - 2.0);
  const nn::GradientNoise all = nn::gradient_noise(grads);
  CHECK(all.batch == 3);
  CHECK(all.parameters == 3);
  CHECK(all.mean_norm_sq == Approx(m2).epsilon(1e-14));
  CHECK(all.trace_cov == Approx(spread / 2).epsilon(1e-14));
  CHECK(all.signal == Approx(m2 - spread / 6).epsilon(1e-14));
  CHECK(all.noise_scale == Approx((spread / 2) / (m2 - spread / 6)).epsilon(1e-14));
  CHECK(all.snr == Approx((m2 - spread / 6) / (spread / 6)).epsilon(1e-14));
  const nn::GradientNoise layer = nn::gradient_noise(grads, "layer.");
  CHECK(layer.parameters == 2);
  CHECK(layer.mean_norm_sq == Approx(20.0 / 9).epsilon(1e-14));
  CHECK(error_of([&] { nn::gradient_noise(grads, "decoder."); }) ==
        "gradient_noise: no parameter's name starts with 'decoder.'");
  CHECK(error_of([&] { nn::gradient_noise({{"a", zeros({1, 2}, kFloat64)}}); }) ==
        "gradient_noise: needs at least 2 examples to estimate the noise, got a batch of 1");
  CHECK(error_of([&] { nn::clipped_mean(grads, 0.0); }) == "clipped_mean: max_norm must be positive and finite, got 0");
  CHECK(error_of([&] { nn::per_sample_norms({{"a", zeros({2, 2})}, {"b", zeros({3})}}); }) ==
        "per_sample_norms: expected per-example gradients [B, ...] sharing B = 2, got 'b' of shape [3]");
}

TEST_CASE("per-sample gradients under Autocast whose examples cancel in the batch are not refused") {
  // rows of about 1005 with losses of opposite signs: the batch gradient is a difference of
  // large terms, bfloat16's rounding left in it; the examples' rows are still their own
  Autocast bf16;
  const int64_t B = 64, D = 64;
  Generator gen(0);
  nn::Linear lin(D, D, true, &gen);
  std::vector<float> xs, signs;
  for (int64_t b = 0; b < B; b++) {
    for (int64_t d = 0; d < D; d++) xs.push_back(b % 2 ? 1004.5f : 1005.5f);
    signs.push_back(b % 2 ? -1.0f : 1.0f);
  }
  const Tensor x = from_vector(xs, {B, D}), s = from_vector(signs, {B});
  const auto grads = nn::per_sample_grads(lin, B, [&] { return mul(sum(lin.forward(x), {1}), s); });
  // d loss_b / d weight = s_b * (a row of ones) x_b^T: every element s_b * x_b
  const std::vector<float> w = grads[0].second.to_vector<float>();
  REQUIRE(grads[0].first == "weight");
  double worst = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t e = 0; e < D * D; e++)
      worst = std::max(worst, double(std::abs(w[b * D * D + e] - signs[b] * xs[b * D]) / std::abs(xs[b * D])));
  CHECK(worst < 1e-2);
}
