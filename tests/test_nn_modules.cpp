// Modules: registration and names, modes, state dicts, initialisation, the basic layers,
// MultiHeadAttention's checks, gradient checks of every layer, and decoding parity.
#include <catch2/catch.hpp>

#include "test_util.h"
#include "tiny_model.h"

#include <cmath>
#include <set>

#include "core/autograd_functional.h"
#include "core/gradcheck.h"
#include "nn/attention.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"

using namespace ember;
using namespace ember::testing;
using namespace ember::nn;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;


static TransformerConfig tiny_config() {
  return testing::tiny_transformer({.num_heads = 4, .layers = 2, .max_len = 64});
}

static bool has_name(const NamedTensors& named, const std::string& n) {
  for (auto& [k, v] : named)
    if (k == n) return true;
  return false;
}

// Gradient check of a module's forward with respect to its input(s) and every parameter.
static GradcheckReport check_module(Module& m, const std::vector<Tensor>& xs,
                                    const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  std::vector<Tensor> inputs = xs;
  std::vector<std::string> names;
  for (size_t i = 0; i < xs.size(); i++) names.push_back("x" + std::to_string(i));
  for (auto& [n, p] : m.named_parameters()) {
    inputs.push_back(p);
    names.push_back(n);
  }
  return gradcheck(f, inputs, {}, names);
}

TEST_CASE("named_parameters yields dotted names in registration order") {
  Generator g(1);
  Transformer model(tiny_config(), &g);
  auto named = model.named_parameters();
  CHECK(named.front().first == "src_embed.weight");
  CHECK(has_name(named, "encoder.layers.0.self_attn.q_proj.weight"));
  CHECK(has_name(named, "encoder.layers.1.ffn.linear2.bias"));
  CHECK(has_name(named, "decoder.layers.1.cross_attn.out_proj.bias"));
  CHECK(has_name(named, "decoder.layers.0.norm3.weight"));
  CHECK(named.back().first == "out_proj.bias");
  int64_t total = 0;
  for (auto& [n, p] : named) {
    total += p.numel();
    CHECK(p.requires_grad());
  }
  CHECK(model.num_parameters() == total);
  CHECK(model.parameters().size() == named.size());
}

TEST_CASE("buffers such as the positional table are not parameters and are not saved") {
  PositionalEncoding pe(8, 20);
  CHECK(pe.named_parameters().empty());
  REQUIRE(pe.named_buffers().size() == 1);
  CHECK(pe.named_buffers()[0].first == "pe");
  CHECK(pe.state_dict().empty());
  Generator g(1);
  Transformer model(tiny_config(), &g);
  CHECK(!model.state_dict().count("pos.pe"));
}

TEST_CASE("train and eval reach every descendant") {
  Transformer model(tiny_config());
  model.eval();
  CHECK(!model.is_training());
  CHECK(!model.decoder->layer(1)->ffn->dropout->is_training());
  model.train();
  CHECK(model.decoder->layer(1)->ffn->dropout->is_training());
}

TEST_CASE("zero_grad drops every parameter's gradient") {
  Linear lin(3, 2);
  sum(lin.forward(ones({4, 3}))).backward();
  CHECK(lin.weight.grad().defined());
  lin.zero_grad();
  CHECK(!lin.weight.grad().defined());
  CHECK(!lin.bias.grad().defined());
}

TEST_CASE("a state dict round trip reproduces the model exactly") {
  Generator g1(1), g2(2);
  Transformer a(tiny_config(), &g1), b(tiny_config(), &g2);
  a.eval();
  b.eval();
  Tensor src = from_vector(std::vector<int64_t>{3, 4, 5, 0, 6, 7, 8, 9}, {2, 4});
  Tensor tgt = from_vector(std::vector<int64_t>{1, 2, 3, 1, 4, 0}, {2, 3});
  CHECK(!equal(a.forward(src, tgt), b.forward(src, tgt)));
  Tensor w_before = b.out_proj->weight;
  b.load_state_dict(a.state_dict());
  CHECK(b.out_proj->weight.same(w_before));  // loaded in place: optimizers keep their tensors
  CHECK(equal(a.forward(src, tgt), b.forward(src, tgt)));
}

TEST_CASE("a strict load reports every missing, unexpected and mismatched name at once and changes nothing") {
  Linear a(3, 2), b(3, 2);
  StateDict s = a.state_dict();
  s.erase("bias");
  s["extra"] = zeros({1});
  s["weight"] = zeros({2, 4});
  Tensor before = b.weight.clone();
  std::string msg = error_of([&] { b.load_state_dict(s); });
  CHECK_THAT(msg, StartsWith("load_state_dict:"));
  CHECK_THAT(msg, Contains("Missing (1): bias"));
  CHECK_THAT(msg, Contains("Unexpected (1): extra"));
  CHECK_THAT(msg, Contains("weight: expected [2,3] float32, got [2,4] float32"));
  CHECK(equal(b.weight, before));
}

TEST_CASE("a non-strict load takes what matches and ignores the rest") {
  Linear a(3, 2), b(3, 2);
  StateDict s = a.state_dict();
  s.erase("bias");
  s["extra"] = zeros({1});
  Tensor bias_before = b.bias.clone();
  b.load_state_dict(s, /*strict=*/false);
  CHECK(equal(b.weight, a.weight));
  CHECK(equal(b.bias, bias_before));
}

TEST_CASE("Linear initialises as PyTorch does and is reproducible from a seed") {
  Generator g1(5), g2(5);
  Linear a(64, 32, true, &g1), b(64, 32, true, &g2);
  CHECK(equal(a.weight, b.weight));
  CHECK(equal(a.bias, b.bias));
  const double bound = 1.0 / std::sqrt(64.0);
  CHECK(amax(abs(a.weight)).item() <= bound);
  CHECK(amax(abs(a.weight)).item() > 0.9 * bound);
  CHECK(amax(abs(a.bias)).item() <= bound);
}

TEST_CASE("Linear computes x W^T + b over any leading dims, with or without bias") {
  Linear lin(4, 3);
  Tensor x = randn({2, 5, 4});
  Tensor expect = add(matmul(x, lin.weight.t()), lin.bias);
  CHECK(allclose(lin.forward(x), expect, 1e-5, 1e-6));
  Linear nob(4, 3, false);
  CHECK(nob.named_parameters().size() == 1);
  CHECK(allclose(nob.forward(x), matmul(x, nob.weight.t()), 1e-5, 1e-6));
  CHECK_THAT(error_of([&] { lin.forward(ones({2, 5})); }), StartsWith("Linear::forward: expected input [..., 4]"));
}

TEST_CASE("MultiHeadAttention initialises projections Xavier-uniform with zero biases") {
  Generator g(3);
  MultiHeadAttention mha({.embed_dim = 32, .num_heads = 4, .gen = &g});
  const double bound = std::sqrt(6.0 / 64.0);
  for (auto& p : {mha.q_proj, mha.k_proj, mha.v_proj}) {
    CHECK(amax(abs(p->weight)).item() <= bound);
    CHECK(amax(abs(p->bias)).item() == 0.0);
  }
  CHECK(amax(abs(mha.out_proj->bias)).item() == 0.0);
}

TEST_CASE("LayerNorm starts with ones and zeros") {
  LayerNorm ln(6);
  CHECK(equal(ln.weight, ones({6})));
  CHECK(equal(ln.bias, zeros({6})));
  LayerNorm plain(6, 1e-5, false);
  CHECK(plain.named_parameters().empty());
}

TEST_CASE("Embedding's padding row starts at zero and never receives a gradient") {
  Embedding emb(10, 4, /*padding_idx=*/0);
  CHECK(amax(abs(emb.weight.select(0, 0))).item() == 0.0);
  Tensor ids = from_vector(std::vector<int64_t>{0, 3, 3, 0, 5}, {5});
  Tensor y = emb.forward(ids);
  CHECK(y.shape() == Shape{5, 4});
  sum(mul(y, randn({5, 4}))).backward();
  Tensor g = emb.weight.grad();
  CHECK(amax(abs(g.select(0, 0))).item() == 0.0);
  CHECK(amax(abs(g.select(0, 3))).item() > 0.0);
  CHECK(amax(abs(g.select(0, 1))).item() == 0.0);
}

TEST_CASE("Embedding with a padding row: its values are read, its gradient is zero, for small and large tables") {
  // a table smaller than the lookups is masked on the table's side, a larger one on the
  // rows' side: both give the lookups' values and the sums of the non-padding gradients
  for (auto [V, N] : {std::pair<int64_t, int64_t>{4, 12}, {20, 5}}) {
    INFO("V " << V << " N " << N);
    Embedding emb(V, 3, /*padding_idx=*/2, nullptr, kFloat64);
    emb.weight.detach().select(0, 2).fill_(0.5);  // a padding row the user changed is still read
    std::vector<int64_t> idv;
    for (int64_t i = 0; i < N; i++) idv.push_back((i * 7) % std::min<int64_t>(V, 5));
    Tensor ids = from_vector(idv, {N});
    Tensor y = emb.forward(ids);
    Tensor up = randn({N, 3}, kFloat64);
    sum(mul(y, up)).backward();
    Tensor g = emb.weight.grad();
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < 3; j++) CHECK(y.at({i, j}) == emb.weight.at({idv[(size_t)i], j}));
    for (int64_t v = 0; v < V; v++)
      for (int64_t j = 0; j < 3; j++) {
        double expected = 0;
        for (int64_t i = 0; i < N; i++)
          if (idv[(size_t)i] == v && v != 2) expected += up.at({i, j});
        CHECK(g.at({v, j}) == Approx(expected).margin(1e-12));
      }
  }
}

TEST_CASE("Embedding with a padding row reads a table the user swapped for one of another size") {
  Embedding emb(4, 3, /*padding_idx=*/1);
  emb.weight = randn({10, 3}).requires_grad_();
  for (int64_t n : {2, 12}) {  // fewer lookups than rows, and more
    std::vector<int64_t> idv;
    for (int64_t i = 0; i < n; i++) idv.push_back(i % 10);
    Tensor ids = from_vector(idv, {n});
    Tensor y = emb.forward(ids);
    CHECK(equal(y, index_select(emb.weight.detach(), 0, ids)));
    emb.weight.zero_grad();
    sum(y).backward();
    CHECK(amax(abs(emb.weight.grad().select(0, 1))).item() == 0.0);
    CHECK(emb.weight.grad().at({0, 0}) == Approx(double((n + 9) / 10)));
  }
}

TEST_CASE("the positional table puts sin on even and cos on odd features") {
  PositionalEncoding pe(6, 10, kFloat64);
  for (int64_t pos : {0, 3, 9})
    for (int64_t i = 0; i < 6; i += 2) {
      double angle = pos / std::pow(10000.0, i / 6.0);
      CHECK(pe.pe.at({pos, i}) == Approx(std::sin(angle)).margin(1e-12));
      CHECK(pe.pe.at({pos, i + 1}) == Approx(std::cos(angle)).margin(1e-12));
    }
  Tensor x = zeros({2, 4, 6}, kFloat64);
  CHECK(equal(pe.forward(x, 3).select(0, 1), pe.pe.narrow(0, 3, 4)));
  CHECK_THAT(error_of([&] { pe.forward(zeros({1, 4, 6}, kFloat64), 8); }),
             Contains("expected 0 <= start <= max_len - L = 6") && Contains("got start 8"));
  for (int64_t start : {INT64_MAX - 1, INT64_MIN, int64_t(-1)})
    CHECK_THAT(error_of([&] { pe.forward(zeros({1, 4, 6}, kFloat64), start); }),
               Contains("got start " + std::to_string(start)));
}

TEST_CASE("Dropout is the identity in eval mode and drops and rescales in training") {
  Dropout d(0.5);
  Tensor x = ones({1000});
  d.eval();
  CHECK(d.forward(x).same(x));
  d.train();
  Tensor y = d.forward(x);
  auto v = y.to_vector<double>();
  int zeros_seen = 0;
  for (double e : v) {
    CHECK((e == 0.0 || e == 2.0));
    zeros_seen += e == 0.0;
  }
  CHECK(zeros_seen > 400);
  CHECK(zeros_seen < 600);
}

TEST_CASE("FeedForward is linear2(activation(linear1(x)))") {
  for (Activation act : {Activation::ReLU, Activation::GELU}) {
    FeedForward ff({.d_model = 4, .d_ff = 8, .activation = act});
    Tensor x = randn({3, 4});
    Tensor h = ff.linear1->forward(x);
    Tensor expect = ff.linear2->forward(act == Activation::ReLU ? relu(h) : gelu(h));
    CHECK(equal(ff.forward(x), expect));
  }
}

TEST_CASE("MultiHeadAttention rejects bad configurations and inputs with clear errors") {
  CHECK_THAT(error_of([] { MultiHeadAttention m(10, 3); }),
             StartsWith("MultiHeadAttention: embed_dim 10 is not divisible by num_heads 3"));
  MultiHeadAttention m({.embed_dim = 8, .num_heads = 2, .kdim = 6, .vdim = 5});
  Tensor q = randn({2, 3, 8}), k = randn({2, 4, 6}), v = randn({2, 4, 5});
  CHECK_NOTHROW(m.forward(q, k, v));
  CHECK_THAT(error_of([&] { m.forward(randn({2, 3, 7}), k, v); }), Contains("expected query [B, L, 8], got shape [2,3,7]"));
  CHECK_THAT(error_of([&] { m.forward(q, randn({2, 4, 8}), v); }), Contains("expected key [B, S, 6]"));
  CHECK_THAT(error_of([&] { m.forward(q, k, randn({2, 4, 6})); }), Contains("expected value [B, S, 5]"));
  CHECK_THAT(error_of([&] { m.forward(q, k, randn({2, 5, 5})); }), Contains("same length S"));
  auto bad_pad = AttentionMask::blocked(zeros({2, 5}, kBool));
  CHECK_THAT(error_of([&] { m.forward(q, k, v, {.key_padding_mask = bad_pad}); }), Contains("key_padding_mask [B, S] = [2,4], got shape [2,5]"));
  auto bad_attn = AttentionMask::blocked(zeros({4, 3}, kBool));
  CHECK_THAT(error_of([&] { m.forward(q, k, v, {.attn_mask = bad_attn}); }), Contains("attn_mask [L, S] = [3,4]"));
}

TEST_CASE("MultiHeadAttention returns weights per head or averaged over heads") {
  MultiHeadAttention m(8, 2);
  Tensor x = randn({2, 3, 8});
  auto per = m.forward(x, x, x, {.need_weights = AttnWeights::PerHead});
  auto avg = m.forward(x, x, x, {.need_weights = AttnWeights::Averaged});
  auto none = m.forward(x, x, x);
  CHECK(per.weights.shape() == Shape{2, 2, 3, 3});
  CHECK(allclose(avg.weights, mean(per.weights, {1}), 1e-6, 1e-7));
  CHECK(!none.weights.defined());
  // weights in the graph come from attention composed of ops, the output without them from
  // the fused op: the same values up to rounding (as PyTorch's paths are)
  CHECK(allclose(per.output, none.output, 1e-6, 1e-7));
  NoGradGuard ng;
  CHECK(equal(m.forward(x, x, x, {.need_weights = AttnWeights::PerHead}).output, m.forward(x, x, x).output));
}

TEST_CASE("MultiHeadAttention's returned weights are in the graph: a loss on them reaches inputs and parameters") {
  Generator gen(31);
  MultiHeadAttention m({.embed_dim = 6, .num_heads = 2, .kdim = 5, .vdim = 4, .gen = &gen, .dtype = kFloat64});
  Tensor q = randn({2, 3, 6}, kFloat64, &gen).requires_grad_();
  Tensor k = randn({2, 4, 5}, kFloat64, &gen).requires_grad_();
  Tensor v = randn({2, 4, 4}, kFloat64, &gen).requires_grad_();
  const Tensor up_w = randn({2, 2, 3, 4}, kFloat64, &gen), up_o = randn({2, 3, 6}, kFloat64, &gen);
  auto pad = AttentionMask::blocked(from_bools({false, false, true, false, false, false, false, true}, {2, 4}));
  for (AttnWeights how : {AttnWeights::PerHead, AttnWeights::Averaged}) {
    INFO((how == AttnWeights::PerHead ? "per head" : "averaged"));
    // a loss on the weights alone (attention supervision), and one mixing weights and output
    for (bool mixed : {false, true}) {
      auto r = check_module(m, {q, k, v}, [&](const std::vector<Tensor>& in) {
        auto out = m.forward(in[0], in[1], in[2], {.key_padding_mask = pad, .need_weights = how});
        Tensor w = how == AttnWeights::PerHead ? out.weights : out.weights.unsqueeze(1);
        Tensor loss = sum(mul(w, how == AttnWeights::PerHead ? up_w : mean(up_w, {1}, true)));
        return mixed ? add(loss, sum(mul(out.output, up_o))) : loss;
      });
      INFO(r.to_string());
      CHECK(r.passed);
    }
    auto out = m.forward(q, k, v, {.need_weights = how});
    REQUIRE(out.weights.requires_grad());
    sum(mul(out.weights, out.weights)).backward();
    CHECK(k.grad().defined());
    CHECK_FALSE(v.grad().defined());  // the weights do not depend on the values
    q.zero_grad(), k.zero_grad();
    for (auto& [name, p] : m.named_parameters()) p.zero_grad();
  }
}

TEST_CASE("MultiHeadAttention's weights in training with dropout are the dropped ones the values were averaged with, as PyTorch's") {
  const double p = 0.4;
  Generator init(5);
  MultiHeadAttention m({.embed_dim = 8, .num_heads = 2, .dropout_p = p, .gen = &init, .dtype = kFloat64});
  const Tensor x = randn({2, 5, 8}, kFloat64, &init);
  m.eval();
  const Tensor plain = m.forward(x, x, x, {.need_weights = AttnWeights::PerHead}).weights;
  m.train();
  for (bool grad : {false, true}) {
    INFO("grad mode " << grad);
    std::optional<NoGradGuard> ng;
    if (!grad) ng.emplace();
    Generator g1(9), g2(9);
    m.dropout_gen = &g1;
    const auto out = m.forward(x, x, x, {.need_weights = AttnWeights::PerHead});
    m.dropout_gen = &g2;
    const Tensor fused = m.forward(x, x, x).output;
    m.dropout_gen = nullptr;
    CHECK(allclose(out.output, fused, 1e-12, 1e-13));  // the same draws as the fused op
    const auto w = out.weights.to_vector<double>(), w0 = plain.to_vector<double>();
    int dropped = 0;
    for (size_t i = 0; i < w.size(); i++) {
      if (w[i] == 0) dropped++;
      else CHECK(w[i] == Approx(w0[i] / (1 - p)).epsilon(1e-12));
    }
    CHECK(dropped > 0);
    CHECK(dropped < (int)w.size());
    CHECK(out.weights.requires_grad() == grad);
  }
}

TEST_CASE("gradcheck: Linear, Embedding and LayerNorm modules") {
  Linear lin(3, 4, true, nullptr, kFloat64);
  Tensor x = randn({2, 3}, kFloat64).requires_grad_();
  auto r1 = check_module(lin, {x}, [&](const std::vector<Tensor>& in) { return lin.forward(in[0]); });
  INFO(r1.to_string());
  CHECK(r1.passed);
  Embedding emb(6, 3, -1, nullptr, kFloat64);  // a padding row would (by design) get no gradient
  Tensor ids = from_vector(std::vector<int64_t>{1, 0, 4, 1}, {2, 2});
  auto r2 = check_module(emb, {}, [&](const std::vector<Tensor>&) { return emb.forward(ids); });
  INFO(r2.to_string());
  CHECK(r2.passed);
  LayerNorm ln(5, 1e-5, true, kFloat64);
  Tensor z = randn({5, 3}, kFloat64).t().detach().requires_grad_();  // non-contiguous [3,5]
  auto r3 = check_module(ln, {z}, [&](const std::vector<Tensor>& in) { return ln.forward(in[0]); });
  INFO(r3.to_string());
  CHECK(r3.passed);
}

TEST_CASE("gradcheck: MultiHeadAttention, self and cross with kdim, vdim and L != S, with masks") {
  MultiHeadAttention self({.embed_dim = 8, .num_heads = 2, .dtype = kFloat64});
  Tensor x = randn({2, 3, 8}, kFloat64).requires_grad_();
  auto causal = causal_mask(3, 3);
  auto r1 = check_module(self, {x}, [&](const std::vector<Tensor>& in) {
    return self.forward(in[0], in[0], in[0], {.attn_mask = causal}).output;
  });
  INFO(r1.to_string());
  CHECK(r1.passed);

  MultiHeadAttention cross({.embed_dim = 6, .num_heads = 3, .kdim = 5, .vdim = 4, .dtype = kFloat64});
  Tensor q = randn({2, 2, 6}, kFloat64).requires_grad_();
  Tensor k = randn({2, 4, 5}, kFloat64).requires_grad_();
  Tensor v = randn({2, 4, 4}, kFloat64).requires_grad_();
  auto pad = AttentionMask::blocked(from_bools({false, false, true, true, false, true, true, true}, {2, 4}));
  auto r2 = check_module(cross, {q, k, v}, [&](const std::vector<Tensor>& in) {
    return cross.forward(in[0], in[1], in[2], {.key_padding_mask = pad}).output;
  });
  INFO(r2.to_string());
  CHECK(r2.passed);
}

TEST_CASE("gradcheck: EncoderLayer and DecoderLayer, post-norm and pre-norm") {
  for (bool pre : {false, true}) {
    LayerConfig c{.d_model = 8, .num_heads = 2, .dim_feedforward = 12, .dropout_p = 0.0, .activation = Activation::GELU, .norm_first = pre};
    EncoderLayer enc(c, nullptr, kFloat64);
    Tensor x = randn({2, 3, 8}, kFloat64).requires_grad_();
    auto pad = AttentionMask::blocked(from_bools({false, false, true, false, false, false}, {2, 3}));
    auto r1 = check_module(enc, {x}, [&](const std::vector<Tensor>& in) { return enc.forward(in[0], pad); });
    INFO("norm_first " << pre << "\n" << r1.to_string());
    CHECK(r1.passed);

    DecoderLayer dec(c, nullptr, kFloat64);
    Tensor y = randn({2, 2, 8}, kFloat64).requires_grad_();
    Tensor mem = randn({2, 3, 8}, kFloat64).requires_grad_();
    auto r2 = check_module(dec, {y, mem}, [&](const std::vector<Tensor>& in) {
      return dec.forward(in[0], in[1], {.memory_key_padding_mask = pad});
    });
    INFO(r2.to_string());
    CHECK(r2.passed);
  }
}

TEST_CASE("Packing keeps the non-padding positions in order and puts them back with zeros at padding") {
  Tensor ids = from_vector(std::vector<int64_t>{3, 4, 0, 0, 5, 0, 6, 7}, {2, 4});
  Packing p = Packing::of(ids, 0);
  CHECK(p.batch == 2);
  CHECK(p.length == 4);
  CHECK(p.count == 5);
  CHECK(equal(p.rows, from_vector(std::vector<int64_t>{0, 1, 4, 6, 7}, {5})));
  CHECK(equal(p.positions, from_vector(std::vector<int64_t>{0, 1, 0, 2, 3}, {5})));
  CHECK(equal(p.padding.blocked(), eq(ids, from_vector(std::vector<int64_t>{0}, Shape{}))));
  Tensor x = randn({2, 4, 3}, kFloat64);
  Tensor rows = p.pack(x);
  REQUIRE(rows.shape() == Shape{5, 3});
  CHECK(equal(rows.select(0, 3), x.select(0, 1).select(0, 2)));
  Tensor back = p.unpack(rows);
  REQUIRE(back.shape() == Shape{2, 4, 3});
  Tensor kept = logical_not(p.padding.blocked()).unsqueeze(-1).to(kFloat64);
  CHECK(allclose(back, mul(x, kept), 0.0, 0.0));
  // no padding at all: views, no copies
  Packing full = Packing::of(from_vector(std::vector<int64_t>{1, 2, 3, 4}, {2, 2}), 0);
  CHECK(full.count == 4);
  Tensor y = randn({2, 2, 3});
  CHECK(full.pack(y).data<float>() == y.data<float>());
  CHECK_THAT(error_of([&] { p.pack(randn({2, 3, 3})); }), Contains("Packing::pack") && Contains("[2,3,3]"));
  CHECK_THAT(error_of([&] { p.unpack(randn({4, 3})); }), Contains("Packing::unpack") && Contains("N = 5"));
  CHECK_THAT(error_of([&] { Packing::of(ids.to(kFloat32), 0); }), Contains("int64"));
}

TEST_CASE("gradcheck: Packing::pack and unpack, on contiguous and non-contiguous inputs") {
  Tensor ids = from_vector(std::vector<int64_t>{3, 0, 4, 5, 0, 0}, {2, 3});
  Packing p = Packing::of(ids, 0);
  Tensor padded = randn({2, 3, 4}, kFloat64).requires_grad_();
  Tensor padded_t = randn({4, 3, 2}, kFloat64).permute({2, 1, 0}).detach().requires_grad_();
  Tensor rows = randn({3, 4}, kFloat64).requires_grad_();
  Tensor rows_t = randn({4, 3}, kFloat64).t().detach().requires_grad_();
  for (const Tensor& x : {padded, padded_t}) {
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return p.pack(in[0]); }, {x});
    INFO(r.to_string());
    CHECK(r.passed);
  }
  for (const Tensor& x : {rows, rows_t}) {
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return p.unpack(in[0]); }, {x});
    INFO(r.to_string());
    CHECK(r.passed);
  }
}

// Gradients of every parameter of m after backward of sum(out * u).
static std::vector<Tensor> parameter_grads(Module& m, const Tensor& out, const Tensor& u) {
  m.zero_grad();
  sum(mul(out, u)).backward();
  std::vector<Tensor> g;
  for (auto& [n, p] : m.named_parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : zeros_like(p));
  return g;
}

TEST_CASE("packed encoder and decoder layers equal the padded ones at every kept position, gradients included") {
  for (bool pre : {false, true}) {
    INFO("norm_first " << pre);
    LayerConfig c{.d_model = 8, .num_heads = 2, .dim_feedforward = 12, .dropout_p = 0.0, .activation = Activation::ReLU, .norm_first = pre};
    Generator g(5);
    Tensor ids = from_vector(std::vector<int64_t>{3, 4, 5, 0, 6, 0, 0, 0, 7, 8, 9, 1}, {3, 4});
    Packing p = Packing::of(ids, 0);
    Tensor x = normal({3, 4, 8}, 0.0, 1.0, kFloat64, &g);
    EncoderLayer enc(c, &g, kFloat64);
    Tensor padded_out = p.pack(enc.forward(x, p.padding));
    Tensor u = normal(padded_out.shape(), 0.0, 1.0, kFloat64, &g);
    auto padded_grads = parameter_grads(enc, padded_out, u);
    Tensor packed_out = enc.forward(p.pack(x), p);
    CHECK(allclose(packed_out, padded_out, 1e-12, 1e-12));
    auto packed_grads = parameter_grads(enc, packed_out, u);
    for (size_t i = 0; i < packed_grads.size(); i++) CHECK(allclose(packed_grads[i], padded_grads[i], 1e-10, 1e-12));

    DecoderLayer dec(c, &g, kFloat64);
    Tensor y = normal({3, 2, 8}, 0.0, 1.0, kFloat64, &g);
    Tensor mem = normal({3, 4, 8}, 0.0, 1.0, kFloat64, &g);
    Tensor a = dec.forward(y, mem, {.memory_key_padding_mask = p.padding});
    Tensor w = normal(a.shape(), 0.0, 1.0, kFloat64, &g);
    auto grads_a = parameter_grads(dec, a, w);
    Tensor b = dec.forward(y, p.pack(mem), {.memory_packing = &p});
    CHECK(allclose(a, b, 1e-12, 1e-12));
    auto grads_b = parameter_grads(dec, b, w);
    for (size_t i = 0; i < grads_b.size(); i++) CHECK(allclose(grads_a[i], grads_b[i], 1e-10, 1e-12));
    CHECK_THAT(error_of([&] { dec.forward(y, p.pack(mem), {.memory_key_padding_mask = p.padding, .memory_packing = &p}); }),
               Contains("expected no key_padding_mask"));
    CHECK_THAT(error_of([&] { dec.forward(y, mem, {.memory_packing = &p}); }),
               Contains("expected packed key rows [M, 8] with M = 8") && Contains("[3,4,8]"));
  }
}

TEST_CASE("a decoder layer on packed target rows equals the padded one at every kept position, with dropout") {
  for (bool pre : {false, true}) {
    INFO("norm_first " << pre);
    Generator drops(21);
    LayerConfig c{.d_model = 8, .num_heads = 2, .dim_feedforward = 12, .dropout_p = 0.25, .activation = Activation::ReLU,
                  .norm_first = pre, .dropout_gen = &drops};
    Generator g(6);
    DecoderLayer dec(c, &g, kFloat64);
    // targets of 3, 1, 3 and 4 tokens (one padded inside the row: each kept query sees the
    // kept keys at or before its place), memory packed as well
    Tensor tgt = from_vector(std::vector<int64_t>{5, 6, 7, 0, 8, 0, 0, 0, 1, 0, 2, 3, 4, 5, 6, 9}, {4, 4});
    Tensor src = from_vector(std::vector<int64_t>{3, 4, 0, 6, 0, 0, 7, 8, 9, 1, 2, 0}, {4, 3});
    Packing t = Packing::of(tgt, 0), m = Packing::of(src, 0);
    Tensor y = normal({4, 4, 8}, 0.0, 1.0, kFloat64, &g);
    Tensor mem = normal({4, 3, 8}, 0.0, 1.0, kFloat64, &g);
    const Generator before = drops;
    Tensor a = t.pack(dec.forward(y, m.pack(mem), {.tgt_key_padding_mask = t.padding, .memory_packing = &m}));
    Tensor u = normal(a.shape(), 0.0, 1.0, kFloat64, &g);
    auto grads_a = parameter_grads(dec, a, u);
    drops = before;  // the same draws again
    Tensor b = dec.forward(t.pack(y), m.pack(mem), {.memory_packing = &m, .tgt_packing = &t});
    CHECK(b.shape() == Shape{t.count, 8});
    CHECK(allclose(a, b, 1e-12, 1e-12));
    auto grads_b = parameter_grads(dec, b, u);
    for (size_t i = 0; i < grads_b.size(); i++) CHECK(allclose(grads_a[i], grads_b[i], 1e-10, 1e-12));
    // what it needs, named
    CHECK_THAT(error_of([&] { dec.forward(t.pack(y), m.pack(mem), {.tgt_key_padding_mask = t.padding, .memory_packing = &m, .tgt_packing = &t}); }),
               Contains("DecoderLayer::forward") && Contains("expected no tgt_key_padding_mask"));
    CHECK_THAT(error_of([&] { dec.forward(y, m.pack(mem), {.memory_packing = &m, .tgt_packing = &t}); }),
               Contains("expected packed target rows [N, 8] with N = 11") && Contains("[4,4,8]"));
    LayerCache cache;
    CHECK_THAT(error_of([&] { dec.forward(t.pack(y), m.pack(mem), {.cache = &cache, .memory_packing = &m, .tgt_packing = &t}); }),
               Contains("cannot be decoded with a cache"));
  }
}

TEST_CASE("MultiHeadAttention's is_causal equals an explicit causal mask, padded and packed, values and gradients") {
  Generator g(8);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2, .gen = &g, .dtype = kFloat64});
  Tensor ids = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 0}, {2, 4});
  Packing p = Packing::of(ids, 0);
  Tensor x = normal({2, 4, 8}, 0.0, 1.0, kFloat64, &g).requires_grad_();
  Tensor u = normal({2, 4, 8}, 0.0, 1.0, kFloat64, &g);
  auto grad_of = [&](const Tensor& out, const Tensor& w) {
    x.zero_grad();
    sum(mul(out, w)).backward();
    return x.grad().clone();
  };
  Tensor want = mha.forward(x, x, x, {.key_padding_mask = p.padding, .attn_mask = causal_mask(4, 4)}).output;
  Tensor want_grad = grad_of(want, u);
  Tensor got = mha.forward(x, x, x, {.key_padding_mask = p.padding, .is_causal = true}).output;
  CHECK(allclose(got, want, 1e-12, 1e-12));
  CHECK(allclose(grad_of(got, u), want_grad, 1e-12, 1e-12));
  // packed rows: the kept positions of the padded result
  Tensor rows = p.pack(x);
  Tensor packed = mha.forward(rows, rows, rows, {.query_packing = &p, .kv_packing = &p, .is_causal = true}).output;
  CHECK(allclose(packed, p.pack(want), 1e-12, 1e-12));
  Tensor u_kept = p.unpack(p.pack(u));  // zeros at padding
  Tensor packed_grad = grad_of(packed, p.pack(u));
  Tensor again = mha.forward(x, x, x, {.key_padding_mask = p.padding, .attn_mask = causal_mask(4, 4)}).output;
  CHECK(allclose(packed_grad, grad_of(again, u_kept), 1e-12, 1e-12));
  // fewer queries than keys: the queries are the last positions
  Tensor q = x.narrow(1, 2, 2);
  Tensor last = mha.forward(q, x, x, {.is_causal = true}).output;
  CHECK(allclose(last, mha.forward(q, x, x, {.attn_mask = causal_mask(2, 4)}).output, 1e-12, 1e-12));
  CHECK_THAT(error_of([&] { mha.forward(x, q, q, {.is_causal = true}); }),
             Contains("MultiHeadAttention::forward") && Contains("is_causal") && Contains("L = 4 and S = 2"));
}

TEST_CASE("Transformer's packed encoder gives the logits of the padded computation") {
  for (bool pre : {false, true}) {
    TransformerConfig c = tiny_config();
    c.layer.norm_first = pre;
    c.layer.dropout_p = 0.0;
    Generator g(4);
    Transformer model(c, &g, kFloat64);
    Tensor src = from_vector(std::vector<int64_t>{3, 4, 5, 0, 6, 0, 0, 0, 7, 8, 9, 10}, {3, 4});
    Tensor tgt = from_vector(std::vector<int64_t>{1, 2, 3, 1, 4, 0, 1, 5, 6}, {3, 3});
    Tensor logits = model.forward(src, tgt);
    // the padded path: encoder on [B, S, E] with a key padding mask, decoder on padded memory
    AttentionMask pad = padding_mask(src, c.pad_id);
    Tensor x = add(mul(model.src_embed->forward(src), std::sqrt((double)c.layer.d_model)), model.pos->pe.narrow(0, 0, 4));
    Tensor memory = model.encoder->forward(x, pad);
    Tensor expected = model.decode(tgt, memory, pad);
    INFO("norm_first " << pre);
    CHECK(allclose(logits, expected, 1e-12, 1e-12));
    // a target without padding runs through the decoder as packed rows: the same logits
    Tensor full_tgt = from_vector(std::vector<int64_t>{1, 2, 3, 1, 4, 5, 1, 5, 6}, {3, 3});
    CHECK(allclose(model.forward(src, full_tgt), model.decode(full_tgt, memory, pad), 1e-12, 1e-12));
    Tensor encoded = model.encode(src);  // padded, zeros at padding
    CHECK(allclose(encoded.select(0, 0).narrow(0, 0, 3), memory.select(0, 0).narrow(0, 0, 3), 1e-12, 1e-12));
    CHECK(equal(encoded.select(0, 1).narrow(0, 1, 3), zeros({3, c.layer.d_model}, kFloat64)));
  }
}

TEST_CASE("Transformer maps src [B,S] and tgt [B,T] to logits [B,T,V]") {
  Transformer model(tiny_config());
  Tensor src = from_vector(std::vector<int64_t>{3, 4, 5, 0, 6, 7, 8, 9}, {2, 4});
  Tensor tgt = from_vector(std::vector<int64_t>{1, 2, 3, 1, 4, 0}, {2, 3});
  CHECK(model.forward(src, tgt).shape() == Shape{2, 3, 13});
  // empty targets (and so no padding): no rows to run
  CHECK(model.forward(src, zeros({2, 0}, kInt64)).shape() == Shape{2, 0, 13});
  CHECK_THAT(error_of([&] { model.forward(src, tgt.to(kFloat32)); }), Contains("expected int64 target ids"));
}

TEST_CASE("decoding token by token gives the teacher-forced logits on the same prefix") {
  for (bool pre : {false, true}) {
    TransformerConfig c = tiny_config();
    c.layer.norm_first = pre;
    Generator g(9);
    Transformer model(c, &g, kFloat64);
    model.eval();
    Tensor src = from_vector(std::vector<int64_t>{3, 4, 5, 0, 6, 7, 8, 9}, {2, 4});
    Tensor tgt = from_vector(std::vector<int64_t>{1, 2, 3, 7, 1, 4, 5, 6}, {2, 4});
    NoGradGuard ng;
    Tensor full = model.forward(src, tgt);  // [2, 4, V]
    DecoderState state = model.start_decoding(src);
    for (int64_t t = 0; t < 4; t++) {
      Tensor step = model.decode_step(state, tgt.select(1, t).contiguous());
      INFO("norm_first " << pre << ", position " << t);
      CHECK(allclose(step, full.select(1, t), 1e-10, 1e-10));
    }
  }
}

TEST_CASE("Sequential applies its modules in order and names them by index") {
  auto a = std::make_shared<Linear>(3, 5);
  auto b = std::make_shared<Linear>(5, 2);
  Sequential seq({a, b});
  auto named = seq.named_parameters();
  REQUIRE(named.size() == 4);
  CHECK(named[0].first == "0.weight");
  CHECK(named[3].first == "1.bias");
  Tensor x = randn({4, 3});
  CHECK(equal(seq.forward(x), b->forward(a->forward(x))));
}

TEST_CASE("ModuleList registers its items as 0, 1, ... and gives them back typed") {
  ModuleList list;
  list.push_back(std::make_shared<LayerNorm>(4));
  list.push_back(std::make_shared<Linear>(4, 4));
  CHECK(list.size() == 2);
  CHECK(list.at<Linear>(1) != nullptr);
  CHECK(list.at<Linear>(0) == nullptr);
  CHECK(has_name(list.named_parameters(), "1.weight"));
}

TEST_CASE("to(dtype) converts every parameter and buffer, keeping them trainable") {
  TransformerConfig c = tiny_config();
  Transformer model(c);
  model.to(kFloat64);
  for (auto& [n, p] : model.named_parameters()) {
    INFO(n);
    CHECK(p.dtype() == kFloat64);
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  CHECK(model.pos->pe.dtype() == kFloat64);
  Tensor src = from_vector(std::vector<int64_t>{3, 4}, {1, 2});
  CHECK(model.forward(src, src).dtype() == kFloat64);
}

TEST_CASE("registering a name twice or a dotted name is an error") {
  struct Bad : Module {
    Tensor w = zeros({2});
    Tensor v = zeros({2});
    void twice() { register_parameter("w", w); register_parameter("w", v); }
    void dotted() { register_parameter("a.b", w); }
  };
  Bad b1, b2;
  CHECK_THAT(error_of([&] { b1.twice(); }), Contains("'w' is already registered"));
  CHECK_THAT(error_of([&] { b2.dotted(); }), Contains("contain no '.'"));
}

TEST_CASE("MultiHeadAttention without weights runs tiled from kTiledMinPairs on: same result, no L x S memory") {
  const int64_t L = 130;
  REQUIRE(L * L >= MultiHeadAttention::kTiledMinPairs);
  Generator gen(6);
  MultiHeadAttention mha({.embed_dim = 16, .num_heads = 2, .gen = &gen, .dtype = kFloat64});
  Tensor x = normal({2, L, 16}, 0.0, 1.0, kFloat64, &gen);
  AttentionMask pad = AttentionMask::blocked(gt(uniform({2, L}, 0.0, 1.0, kFloat32, &gen), 0.8));
  Tensor u = normal({2, L, 16}, 0.0, 1.0, kFloat64, &gen);
  std::vector<Tensor> out, grads[2];
  int64_t kept[2];
  for (int w = 0; w < 2; w++) {
    Tensor xi = x.detach().requires_grad_();
    const int64_t before = Storage::live_bytes();
    auto r = mha.forward(xi, xi, xi,
                         {.key_padding_mask = pad,
                          .attn_mask = causal_mask(L, L),
                          .need_weights = w ? AttnWeights::PerHead : AttnWeights::None});
    kept[w] = Storage::live_bytes() - before;
    CHECK(r.weights.defined() == (w == 1));
    grads[w] = parameter_grads(mha, r.output, u);
    out.push_back(r.output);
  }
  CHECK(allclose(out[0], out[1], 1e-12, 1e-12));
  for (size_t i = 0; i < grads[0].size(); i++) CHECK(allclose(grads[0][i], grads[1][i], 1e-10, 1e-12));
  // the [2, 2, L, L] float64 weights are kept only when asked for (the tiled op keeps the
  // bool mask it was given, 1/16 of them)
  CHECK(kept[1] - kept[0] >= 2 * 2 * L * L * 8 * 3 / 4);
}

TEST_CASE("a sample's dropout mask does not depend on the padding or the split of its batch") {
  const Tensor x = ones({4, 5, 6}, kFloat64);
  Generator g(21);
  const std::vector<uint64_t> state = g.get_state();
  Tensor whole = dropout(x, 0.5, true, &g);
  // padded longer along dim 1: the first 5 positions get the same masks
  g.set_state(state);
  Tensor padded = dropout(ones({4, 9, 6}, kFloat64), 0.5, true, &g);
  CHECK(equal(padded.narrow(1, 0, 5), whole));
  // samples 2 and 3 alone, with the generator told where they sit in the batch
  g.set_state(state);
  {
    const BatchOffset offset(2);
    Tensor part = dropout(x.narrow(0, 2, 2), 0.5, true, &g);
    CHECK(equal(part, whole.narrow(0, 2, 2)));
  }
  // ... and without it, other masks
  g.set_state(state);
  CHECK(BatchOffset::current() == 0);
  CHECK_FALSE(equal(dropout(x.narrow(0, 2, 2), 0.5, true, &g), whole.narrow(0, 2, 2)));
  // packed rows get the masks of their places in the padded tensor
  const std::vector<int64_t> places{0, 1, 2, 5, 6, 12, 19};  // b * 5 + s
  g.set_state(state);
  Tensor packed = dropout_packed(ones({7, 6}, kFloat64), from_vector(places, {7}), 5, 0.5, true, &g);
  for (size_t n = 0; n < places.size(); n++)
    CHECK(equal(packed.select(0, (int64_t)n), whole.select(0, places[n] / 5).select(0, places[n] % 5)));
  // and the mask is a real one
  const auto v = whole.to_vector<double>();
  CHECK(std::count(v.begin(), v.end(), 0.0) > 20);
  CHECK(std::count(v.begin(), v.end(), 2.0) > 20);
}

TEST_CASE("attention dropout of a slice of the batch equals that slice of the whole batch's, fused and tiled") {
  Generator init(3);
  Tensor q = randn({4, 2, 40, 8}, kFloat64, &init), k = randn({4, 2, 140, 8}, kFloat64, &init),
         v = randn({4, 2, 140, 8}, kFloat64, &init);
  for (bool tiled : {false, true}) {
    INFO((tiled ? "tiled" : "fused"));
    auto attend = [&](const Tensor& q_, const Tensor& k_, const Tensor& v_, int64_t offset) {
      Generator g(5);
      const BatchOffset batch_offset(offset);
      return tiled ? scaled_dot_product_attention_tiled(q_, k_, v_, {}, 0.3, true, &g)
                   : scaled_dot_product_attention(q_, k_, v_, {}, 0.3, true, &g).output;
    };
    Tensor whole = attend(q, k, v, 0);
    Tensor part = attend(q.narrow(0, 1, 2), k.narrow(0, 1, 2), v.narrow(0, 1, 2), 1);
    CHECK(allclose(part, whole.narrow(0, 1, 2), 1e-14, 1e-14));
    CHECK_FALSE(allclose(whole, scaled_dot_product_attention(q, k, v).output, 1e-3, 1e-3));
  }
}

TEST_CASE("every dropout of a model draws from the generator its configuration names, never the default one") {
  TransformerConfig c = tiny_config();
  c.layer.dropout_p = 0.3;
  Generator init(5);
  Tensor src = from_vector(std::vector<int64_t>{3, 4, 5, 1, 2, 0}, {2, 3});
  Tensor tgt = from_vector(std::vector<int64_t>{1, 6, 7, 2, 3, 0}, {2, 3});
  // The logits of one training forward with dropout drawn from a generator seeded `seed`,
  // and what that forward took from the generator and from the default one.
  auto run = [&](uint64_t seed, uint64_t* drawn, bool* default_touched) {
    Generator g(seed), w(5);
    c.layer.dropout_gen = &g;
    Transformer m(c, &w);
    m.train();
    const auto before = default_generator().get_state();
    Tensor out = m.forward(src, tgt);
    *default_touched = default_generator().get_state() != before;
    *drawn = g.get_state()[1];
    return out.to_vector<float>();
  };
  uint64_t drawn = 0;
  bool touched = true;
  auto a = run(11, &drawn, &touched);
  CHECK(drawn > 0);
  CHECK_FALSE(touched);
  auto b = run(11, &drawn, &touched);
  CHECK(a == b);  // the same stream, the same masks
  auto d = run(12, &drawn, &touched);
  CHECK(a != d);

  // Each kind of layer on its own, through its configuration or options.
  Generator g(3);
  const auto before = default_generator().get_state();
  EncoderLayer enc(LayerConfig{.d_model = 8, .num_heads = 2, .dim_feedforward = 16, .dropout_p = 0.5, .dropout_gen = &g}, &init);
  DecoderLayer dec(LayerConfig{.d_model = 8, .num_heads = 2, .dim_feedforward = 16, .dropout_p = 0.5, .dropout_gen = &g}, &init);
  MultiHeadAttention mha(MultiHeadAttentionOptions{.embed_dim = 8, .num_heads = 2, .dropout_p = 0.5, .gen = &init,
                                                   .dropout_gen = &g});
  Tensor x = randn({2, 3, 8}, kFloat32, &init);
  uint64_t last = g.get_state()[1];
  enc.forward(x);
  CHECK(g.get_state()[1] > last);
  last = g.get_state()[1];
  dec.forward(x, x);
  CHECK(g.get_state()[1] > last);
  last = g.get_state()[1];
  mha.forward(x, x, x);
  CHECK(g.get_state()[1] > last);
  CHECK(default_generator().get_state() == before);
}

TEST_CASE("to(dtype) converts parameters in place, so an optimizer built before updates them") {
  Linear l(2, 1);
  const Tensor w = l.weight;  // a handle taken before, as an optimizer holds it
  optim::SGD opt(l.named_parameters(), {.lr = 0.5});
  sum(l.forward(ones({1, 2}))).backward();  // a float32 gradient, converted with the weight
  l.to(kFloat64);
  CHECK(l.weight.same(w));
  CHECK(w.dtype() == kFloat64);
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  CHECK(w.grad().dtype() == kFloat64);
  opt.zero_grad();
  const Tensor before = l.weight.detach().clone();
  sum(l.forward(ones({1, 2}, kFloat64))).backward();
  opt.step();
  CHECK(equal(l.weight.detach(), sub(before, 0.5)));  // d(sum(x w^T + b))/dw = x = 1
}

TEST_CASE("an optimizer whose state is of a parameter's old dtype refuses the next step, naming both dtypes") {
  // torch.optim would go on with float32 moments; ember refuses to mix them
  Linear l(2, 1);
  optim::Adam opt(l.named_parameters());
  sum(l.forward(ones({1, 2}))).backward();
  opt.step();
  l.to(kFloat64);
  const Tensor before = l.weight.detach().clone();
  sum(l.forward(ones({1, 2}, kFloat64))).backward();
  CHECK_THAT(error_of([&] { opt.step(); }),
             StartsWith("Adam::step") && Contains("is float64 but its state") && Contains("float32"));
  CHECK(equal(l.weight.detach(), before));
  CHECK(opt.state().params.at("weight").step == 1);
}

TEST_CASE("load_state_dict refuses destinations that share memory before it copies anything") {
  struct Two : Module {
    Tensor a, b;
    Two(Tensor x, Tensor y) : a(x), b(y) {
      register_parameter("a", a);
      register_parameter("b", b);
    }
  };
  const StateDict values{{"a", full({4}, 7.0)}, {"b", full({4}, 9.0)}};
  {
    Two m(zeros({4}), zeros({1}).expand({4}));
    CHECK_THAT(error_of([&] { m.load_state_dict(values); }),
               Catch::Matchers::StartsWith("load_state_dict: 'b' (shape [4], strides [0]) has elements that are one memory location"));
    CHECK(m.a.to_vector<float>() == std::vector<float>(4, 0.0f));  // a untouched
  }
  {
    Tensor base = zeros({5});
    Two m(base.narrow(0, 0, 4), base.narrow(0, 1, 4));
    CHECK_THAT(error_of([&] { m.load_state_dict(values); }), Catch::Matchers::Contains("overlap in memory"));
    CHECK(base.to_vector<float>() == std::vector<float>(5, 0.0f));
  }
  {
    Tensor w = zeros({4});
    Two tied(w, w);
    CHECK_THAT(error_of([&] { tied.load_state_dict(values); }), Catch::Matchers::Contains("are one tensor (tied)"));
    tied.load_state_dict({{"a", full({4}, 7.0)}, {"b", full({4}, 7.0)}});  // one value for both: fine
    CHECK(w.to_vector<float>() == std::vector<float>(4, 7.0f));
  }
}

TEST_CASE("functional_call runs a module with other tensors for its parameters, as torch.func.functional_call") {
  Generator g(17);
  Linear lin(3, 2, true, &g, kFloat64);
  const Tensor x = randn({4, 3}, kFloat64, &g);
  const Tensor w_own = lin.weight, b_own = lin.bias;
  // the Hessian of sum((x W^T + b)^2) with respect to W: 2 (I_out kron x^T x), by closed form
  TensorFn loss = [&](const Tensor& w) {
    return lin.functional_call({{"weight", w}}, [&] { return sum(square(lin.forward(x))); });
  };
  const Tensor H = hessian(loss, lin.weight);
  REQUIRE(H.shape() == Shape{2, 3, 2, 3});
  const Tensor xtx = matmul(x.t(), x);
  for (int64_t i = 0; i < 2; i++)
    for (int64_t k = 0; k < 2; k++)
      CHECK(allclose(H.select(0, i).select(1, k), mul(xtx, i == k ? 2.0 : 0.0), 1e-12, 1e-12));
  CHECK(lin.weight.same(w_own));  // put back
  CHECK_FALSE(lin.weight.grad().defined());
  // a tensor in a graph as a parameter: the gradient reaches what it was computed from
  Tensor base = randn({2, 3}, kFloat64, &g).requires_grad_();
  Tensor out = lin.functional_call({{"weight", mul(base, 2.0)}, {"bias", zeros({2}, kFloat64)}},
                                   [&] { return sum(lin.forward(x)); });
  out.backward();
  CHECK(allclose(base.grad(), mul(sum(x, {0}, true).expand({2, 3}), 2.0)));
  CHECK_FALSE(lin.weight.grad().defined());
  CHECK(lin.bias.same(b_own));
  // names are checked, shapes too, and an exception inside still puts everything back
  CHECK_THAT(error_of([&] { lin.functional_call({{"wieght", w_own}}, [] { return 0; }); }),
             Equals("functional_call: the module has no parameter or buffer named wieght; it has weight, bias"));
  CHECK_THAT(error_of([&] { lin.functional_call({{"weight", zeros({3, 2}, kFloat64)}}, [] { return 0; }); }),
             StartsWith("functional_call: 'weight' is float64 [2,3] in the module, got float64 [3,2]"));
  CHECK_THAT(error_of([&] {
               lin.functional_call({{"weight", zeros({2, 3}, kFloat64)}}, [&]() -> int { throw Error("inside"); });
             }),
             Equals("inside"));
  CHECK(lin.weight.same(w_own));
  // nested modules by dotted name
  MultiHeadAttention mha({.embed_dim = 4, .num_heads = 2, .gen = &g, .dtype = kFloat64});
  const Tensor h = randn({1, 3, 4}, kFloat64, &g);
  const Tensor zero_out = zeros({4, 4}, kFloat64);
  const Tensor y = mha.functional_call({{"out_proj.weight", zero_out}}, [&] { return mha.forward(h, h, h).output; });
  CHECK(allclose(y, mha.out_proj->bias.detach().expand({1, 3, 4}), 0, 0));
}

TEST_CASE("AttentionImplGuard chooses fused, tiled or composed attention for a scope, with the same results") {
  Generator g(23);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2, .gen = &g, .dtype = kFloat64});
  Tensor x = randn({2, 5, 8}, kFloat64, &g).requires_grad_();
  auto pad = AttentionMask::blocked(from_bools({false, false, false, true, true, false, false, false, false, false}, {2, 5}));
  // the names of the ops in the graph below the output
  auto ops_of = [](const Tensor& t) {
    std::set<std::string> names;
    std::vector<std::shared_ptr<Node>> todo{t.grad_fn()};
    std::set<Node*> seen;
    while (!todo.empty()) {
      auto n = todo.back();
      todo.pop_back();
      if (!n || !seen.insert(n.get()).second) continue;
      names.insert(n->name);
      for (auto& e : n->inputs) todo.push_back(e.fn);
    }
    return names;
  };
  Tensor reference;
  std::vector<double> reference_grad;
  for (AttentionImpl impl : {AttentionImpl::Auto, AttentionImpl::Fused, AttentionImpl::Tiled, AttentionImpl::Composed}) {
    AttentionImplGuard guard(impl);
    CHECK(attention_impl() == impl);
    const Tensor y = mha.forward(x, x, x, {.key_padding_mask = pad}).output;
    const auto names = ops_of(y);
    const bool fused = names.count("scaled_dot_product_attention") > 0, tiled = names.count("scaled_dot_product_attention_tiled") > 0,
               composed = names.count("softmax") > 0;
    INFO("impl " << (int)impl);
    CHECK(fused == (impl == AttentionImpl::Auto || impl == AttentionImpl::Fused));  // 5 x 5 pairs: fused by default
    CHECK(tiled == (impl == AttentionImpl::Tiled));
    CHECK(composed == (impl == AttentionImpl::Composed));
    x.zero_grad();
    sum(square(y)).backward();
    if (!reference.defined()) {
      reference = y.detach(), reference_grad = x.grad().to_vector<double>();
      continue;
    }
    CHECK(allclose(y, reference, 1e-12, 1e-13));
    const auto gx = x.grad().to_vector<double>();
    for (size_t i = 0; i < gx.size(); i++) CHECK(gx[i] == Approx(reference_grad[i]).epsilon(1e-10).margin(1e-13));
  }
  CHECK(attention_impl() == AttentionImpl::Auto);  // the guard restores it
  CHECK_THAT(error_of([] { AttentionImplGuard bad((AttentionImpl)99); }), StartsWith("AttentionImplGuard: unknown implementation 99"));
  // weights asked for under Tiled come from the fused op
  AttentionImplGuard tiled(AttentionImpl::Tiled);
  NoGradGuard ng;
  CHECK(mha.forward(x, x, x, {.need_weights = AttnWeights::PerHead}).weights.shape() == Shape{2, 2, 5, 5});
}

// Two layers sharing one weight, as a language model ties its embedding and output layer.
struct TiedPair : Module {
  std::shared_ptr<Linear> first, second;
  TiedPair() {
    first = register_module("first", std::make_shared<Linear>(3, 3, true, nullptr, kFloat64));
    second = register_module("second", std::make_shared<Linear>(3, 3, true, nullptr, kFloat64));
    second->weight = first->weight;  // tied
  }
  Tensor forward(const Tensor& x) { return second->forward(first->forward(x)); }
};

TEST_CASE("a tied weight is one parameter, listed once under its first name, and trains as one") {
  TiedPair m;
  std::vector<std::string> names;
  for (auto& [name, t] : m.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"first.weight", "first.bias", "second.bias"});
  CHECK(m.num_parameters() == 9 + 3 + 3);
  CHECK(m.state_dict().size() == 4);  // the state keeps both names, as PyTorch's
  optim::SGD opt(m.named_parameters(), {.lr = 0.1});
  Tensor x = randn({2, 3}, kFloat64);
  sum(m.forward(x)).backward();
  Tensor grad = m.first->weight.grad().clone();
  const Tensor before = m.first->weight.clone();
  opt.step();
  CHECK(m.second->weight.same(m.first->weight));
  CHECK(allclose(m.first->weight, sub(before, mul(grad, 0.1)), 0, 1e-15));
}
