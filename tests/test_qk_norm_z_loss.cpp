// The cures for logit growth: MultiHeadAttention's qk_norm (each head's queries and keys
// layer-normalised before the scores) against the same computation written by hand,
// through every attention path (fused, tiled, composed, packed rows, a key-value cache),
// with its first and second derivatives and forward mode; and seq2seq::z_loss's value and
// derivatives.
#include <catch2/catch.hpp>
#include "test_util.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "lib/seq2seq/seq2seq.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/multihead_attention.h"
#include "nn/packing.h"
#include "nn/transformer.h"

using namespace ember;
using namespace ember::nn;
using namespace ember::testing;

namespace {

constexpr int64_t kE = 8, kH = 2, kD = 4;

// An attention with qk_norm whose LayerNorms hold values other than their initial ones
// (so that a gain or bias left out would show).
std::shared_ptr<MultiHeadAttention> qk_attention(Generator& init) {
  auto mha = std::make_shared<MultiHeadAttention>(
      MultiHeadAttentionOptions{.embed_dim = kE, .num_heads = kH, .qk_norm = true, .gen = &init, .dtype = kFloat64});
  NoGradGuard no_grad;
  for (Tensor* p : {&mha->q_norm->weight, &mha->k_norm->weight}) init::uniform_(*p, 0.5, 2.0, &init);
  for (Tensor* p : {&mha->q_norm->bias, &mha->k_norm->bias}) init::normal_(*p, 0.0, 0.5, &init);
  return mha;
}

// The module's computation written out: project, layer-normalise each head's features of
// the queries and keys, attend (the composed reference), merge, project.
Tensor by_hand(MultiHeadAttention& m, const Tensor& query, const Tensor& key, const Tensor& value,
               const AttentionMask& mask) {
  auto heads = [&](const Tensor& x) { return x.reshape({x.size(0), x.size(1), kH, kD}); };
  Tensor q = layer_norm(heads(linear(query, m.q_proj->weight, m.q_proj->bias)), m.q_norm->weight, m.q_norm->bias);
  Tensor k = layer_norm(heads(linear(key, m.k_proj->weight, m.k_proj->bias)), m.k_norm->weight, m.k_norm->bias);
  Tensor v = heads(linear(value, m.v_proj->weight, m.v_proj->bias));
  AttentionImplGuard composed(AttentionImpl::Composed);
  Tensor o = scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask, 0.0, false,
                                          nullptr, m.scale())
                 .output;
  return linear(o.transpose(1, 2).reshape({query.size(0), query.size(1), kE}), m.out_proj->weight, m.out_proj->bias);
}

// ids [4, 5] with pad 0: a full sequence, a short one, one with padding inside, a short one
Tensor key_ids() {
  return from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 1, 2, 0, 0, 0, 3, 0, 4, 5, 0, 2, 0, 0, 0, 0}, {4, 5});
}

void check_passed(const GradcheckReport& r) {
  INFO(r.to_string());
  CHECK(r.passed);
}

}  // namespace

TEST_CASE("qk_norm adds a LayerNorm [head_dim] for the queries and one for the keys, and checks its eps") {
  Generator init(1);
  MultiHeadAttention plain({.embed_dim = kE, .num_heads = kH, .gen = &init});
  CHECK(!plain.q_norm);
  CHECK(!plain.k_norm);
  CHECK(plain.named_parameters().size() == 8);
  MultiHeadAttention normed({.embed_dim = kE, .num_heads = kH, .qk_norm = true, .gen = &init});
  std::vector<std::string> names;
  for (const auto& [name, p] : normed.named_parameters())
    if (name.find("norm") != std::string::npos) names.push_back(name + " " + shape_str(p.shape()));
  CHECK(names == std::vector<std::string>{"q_norm.weight [4]", "q_norm.bias [4]", "k_norm.weight [4]",
                                          "k_norm.bias [4]"});
  CHECK_THAT(error_of([&] { MultiHeadAttention({.embed_dim = kE, .num_heads = kH, .qk_norm = true, .qk_norm_eps = -1}); }),
             Catch::Contains("MultiHeadAttention: qk_norm_eps must be non-negative and finite, got -1"));
  // a Transformer layer passes it on to its attentions, with its LayerNorms' eps
  DecoderLayer layer({.d_model = kE, .num_heads = kH, .dim_feedforward = 16, .layer_norm_eps = 1e-3, .qk_norm = true});
  REQUIRE(layer.self_attn->q_norm);
  REQUIRE(layer.cross_attn->k_norm);
  CHECK(layer.cross_attn->k_norm->eps == 1e-3);
}

TEST_CASE("with qk_norm, every attention path equals the computation written by hand") {
  Generator init(2), gen(3);
  const auto owner = qk_attention(init);
  MultiHeadAttention& mha = *owner;
  const int64_t B = 4, L = 3, S = 5;
  const Tensor query = normal({B, L, kE}, 0.0, 1.0, kFloat64, &gen), key = normal({B, S, kE}, 0.0, 1.0, kFloat64, &gen);
  const Tensor value = normal({B, S, kE}, 0.0, 1.0, kFloat64, &gen);
  const Packing kvp = Packing::of(key_ids(), 0);
  const AttentionMask pad = kvp.padding;
  const Tensor want = by_hand(mha, query, key, value, pad.reshape({B, 1, 1, S}));
  for (AttentionImpl impl : {AttentionImpl::Composed, AttentionImpl::Fused, AttentionImpl::Tiled}) {
    INFO("implementation " << (int)impl);
    AttentionImplGuard guard(impl);
    CHECK(max_abs_diff(mha.forward(query, key, value, {.key_padding_mask = pad}).output, want) < 1e-12);
  }
  // self-attention: the fused projection of one input
  const Tensor self_want = by_hand(mha, key, key, key, pad.reshape({B, 1, 1, S}));
  CHECK(max_abs_diff(mha.forward(key, key, key, {.key_padding_mask = pad}).output, self_want) < 1e-12);
  // packed keys and values: attention over rows
  const Tensor rows = mha.forward(query, kvp.pack(key), kvp.pack(value), {.kv_packing = &kvp}).output;
  CHECK(max_abs_diff(rows, want) < 1e-12);
  // packed self-attention rows (one input, the fused projection), queries packed too
  const Tensor packed_self = mha.forward(kvp.pack(key), kvp.pack(key), kvp.pack(key),
                                         {.query_packing = &kvp, .kv_packing = &kvp})
                                 .output;
  CHECK(max_abs_diff(packed_self, kvp.pack(self_want)) < 1e-12);
}

TEST_CASE("with qk_norm, decoding with a key-value cache gives the causal forward's outputs") {
  Generator init(4), gen(5);
  const auto owner = qk_attention(init);
  MultiHeadAttention& mha = *owner;
  const int64_t B = 2, T = 4;
  const Tensor x = normal({B, T, kE}, 0.0, 1.0, kFloat64, &gen);
  const Tensor full = mha.forward(x, x, x, {.is_causal = true}).output;
  KVCache cache;
  for (int64_t t = 0; t < T; t++) {
    const Tensor step = x.narrow(1, t, 1);
    const Tensor y = mha.forward(step, step, step, {.cache = &cache}).output;
    INFO("position " << t);
    CHECK(max_abs_diff(y, full.narrow(1, t, 1)) < 1e-12);
  }
}

TEST_CASE("with qk_norm, attention's derivatives pass gradcheck, gradgradcheck and forward mode on non-contiguous inputs") {
  Generator init(6), gen(7);
  const auto owner = qk_attention(init);
  MultiHeadAttention& mha = *owner;
  const int64_t B = 2, L = 3, S = 4;
  const AttentionMask pad =
      AttentionMask::blocked(from_bools({false, false, false, false, false, false, true, true}, {B, S}));
  // query given as [B, E, L] and used transposed, key as [S, B, E] and used permuted: both
  // reach the module as views that are not contiguous; then the LayerNorms' parameters
  const std::vector<Tensor> inputs = {normal({B, kE, L}, 0.0, 1.0, kFloat64, &gen).requires_grad_(),
                                      normal({S, B, kE}, 0.0, 1.0, kFloat64, &gen).requires_grad_(),
                                      mha.q_norm->weight.detach().clone().requires_grad_(),
                                      mha.k_norm->bias.detach().clone().requires_grad_()};
  const std::vector<std::string> names = {"query", "key", "q_norm.weight", "k_norm.bias"};
  for (AttentionImpl impl : {AttentionImpl::Composed, AttentionImpl::Fused, AttentionImpl::Tiled}) {
    INFO("implementation " << (int)impl);
    GradcheckFn f = [&mha, &pad, impl](const std::vector<Tensor>& in) {
      AttentionImplGuard guard(impl);
      const Tensor saved_w = mha.q_norm->weight, saved_b = mha.k_norm->bias;
      mha.q_norm->weight = in[2], mha.k_norm->bias = in[3];
      const Tensor key = in[1].permute({1, 0, 2});
      Tensor y = mha.forward(in[0].transpose(1, 2), key, key, {.key_padding_mask = pad}).output;
      mha.q_norm->weight = saved_w, mha.k_norm->bias = saved_b;
      return y;
    };
    check_passed(gradcheck(f, inputs, {.check_forward_ad = true}, names));
    check_passed(gradgradcheck(f, inputs, {.check_forward_ad = true}, names));
  }
  // attention over packed rows
  const Packing kvp = Packing::of(key_ids(), 0);
  const std::vector<Tensor> packed = {normal({4, kE, 2}, 0.0, 1.0, kFloat64, &gen).requires_grad_(),
                                      normal({kvp.count, kE}, 0.0, 1.0, kFloat64, &gen).requires_grad_()};
  GradcheckFn rows = [&mha, &kvp](const std::vector<Tensor>& in) {
    return mha.forward(in[0].transpose(1, 2), in[1], in[1], {.kv_packing = &kvp}).output;
  };
  check_passed(gradcheck(rows, packed, {.check_forward_ad = true}, {"query", "key rows"}));
  check_passed(gradgradcheck(rows, packed, {.check_forward_ad = true}, {"query", "key rows"}));
}

TEST_CASE("z_loss is the mean over predicted positions of logsumexp(logits)^2") {
  Generator gen(8);
  const Tensor logits = mul(normal({5, 6}, 0.0, 1.0, kFloat64, &gen), 3.0);
  const Tensor targets = from_vector(std::vector<int64_t>{2, 0, 5, 1, 0}, {5});
  const std::vector<double> v = logits.to_vector<double>();
  double want = 0;
  for (int64_t i : {0, 2, 3}) {
    double z = 0;
    for (int64_t j = 0; j < 6; j++) z += std::exp(v[(size_t)(i * 6 + j)]);
    want += std::log(z) * std::log(z) / 3;
  }
  CHECK(seq2seq::z_loss(logits, targets, 0).item() == Approx(want).epsilon(1e-14));
  CHECK(seq2seq::z_loss(logits, zeros({5}, kInt64), 0).item() == 0);
  CHECK_THAT(error_of([&] { seq2seq::z_loss(logits, zeros({4}, kInt64), 0); }),
             Catch::Contains("seq2seq::z_loss: expected logits [N, V] and int64 targets [N], got logits [5,6] and "
                             "targets [4] int64"));
}

TEST_CASE("z_loss's derivatives pass gradcheck and gradgradcheck, contiguous and not, with forward mode") {
  Generator gen(9);
  const Tensor targets = from_vector(std::vector<int64_t>{2, 0, 5, 1, 0}, {5});
  GradcheckFn f = [&targets](const std::vector<Tensor>& in) { return seq2seq::z_loss(in[0], targets, 0); };
  GradcheckFn transposed = [&targets](const std::vector<Tensor>& in) {
    return seq2seq::z_loss(in[0].transpose(0, 1), targets, 0);
  };
  const Tensor logits = mul(normal({5, 6}, 0.0, 1.0, kFloat64, &gen), 3.0).requires_grad_();
  const Tensor logits_t = mul(normal({6, 5}, 0.0, 1.0, kFloat64, &gen), 3.0).requires_grad_();
  check_passed(gradcheck(f, {logits}, {.check_forward_ad = true}));
  check_passed(gradgradcheck(f, {logits}, {.check_forward_ad = true}));
  check_passed(gradcheck(transposed, {logits_t}, {.check_forward_ad = true}));
  check_passed(gradgradcheck(transposed, {logits_t}, {.check_forward_ad = true}));
  // the gradient is 2 log Z softmax(logits) / count at the predicted rows, 0 at the ignored ones
  const Tensor g = grad({f({logits})}, {logits})[0];
  const Tensor lse = logsumexp(logits.detach(), {1}, true);
  const Tensor kept = ne(targets, 0.0).to(kFloat64).reshape({5, 1});
  const Tensor want = mul(mul(mul(lse, softmax(logits.detach(), 1)), kept), 2.0 / 3.0);
  CHECK(max_abs_diff(g, want) < 1e-14);
}
