// An undefined tensor (a gradient no backward has reached, a default-constructed Tensor)
// given to any member or op: an Error naming the function and saying why the tensor is
// undefined, never a crash.
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/autograd_functional.h"
#include "core/function.h"
#include "core/gradcheck.h"
#include "nn/attention.h"
#include "nn/attention_mask.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/multihead_attention.h"
#include "nn/packing.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;

namespace {

// A leaf whose gradient zero_grad() has dropped.
Tensor cleared_grad() {
  Tensor x = ones({2, 3}).requires_grad_();
  sum(x).backward();
  x.zero_grad();
  return x.grad();
}

const char* kCleared = "it is the grad() of a leaf that no backward has reached since zero_grad()";

// f(u) must throw an Error that starts with "<op>: " and names the reason.
void expect_refused(const std::string& op, const std::function<void(const Tensor&)>& f) {
  INFO("op " << op);
  const std::string message = error_of([&] { f(cleared_grad()); });
  CHECK_THAT(message, StartsWith(op + ": "));
  CHECK_THAT(message, Contains("is undefined: " + std::string(kCleared)));
}

}  // namespace

TEST_CASE("grad() says why it is undefined: before any backward, after zero_grad, on a non-leaf") {
  Tensor x = ones({2, 3}).requires_grad_();
  CHECK_THAT(error_of([&] { (void)x.grad().numel(); }),
             Equals("Tensor::numel: the tensor is undefined: it is the grad() of a leaf that no backward has "
                    "reached yet"));
  Tensor y = mul(x, 2.0);
  sum(y).backward();
  CHECK(x.grad().defined());
  CHECK_THAT(error_of([&] { (void)y.grad().shape(); }),
             Equals("Tensor::shape: the tensor is undefined: it is the grad() of a non-leaf tensor, which keeps its "
                    "gradient only when retain_grad() is called on it before backward"));
  CHECK_THAT(error_of([&] { (void)y.grad().to_vector<float>(); }), StartsWith("to_vector: the tensor is undefined"));
  x.zero_grad();
  CHECK_THAT(error_of([&] { (void)x.grad().dim(); }),
             Equals(std::string("Tensor::dim: the tensor is undefined: ") + kCleared));
  CHECK_THAT(error_of([&] { (void)x.grad().to_vector<float>(); }),
             Equals(std::string("to_vector: the tensor is undefined: ") + kCleared));
  CHECK_THAT(error_of([] { (void)ones({2}).grad().numel(); }), Contains("does not require grad"));
  CHECK_THAT(error_of([] { (void)Tensor().shape(); }), Contains("a default-constructed Tensor"));

  Tensor z = mul(x, 3.0);
  z.retain_grad();
  CHECK_THAT(error_of([&] { (void)z.grad().shape(); }),
             Contains("the grad() of a non-leaf that no backward has reached yet"));
  sum(z).backward();
  CHECK(z.grad().defined());

  x.set_grad(Tensor());
  CHECK_THAT(error_of([&] { (void)x.grad().shape(); }), Contains("since zero_grad()"));
  sum(mul(x, 2.0)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(6, 2.0f));
}

TEST_CASE("every Tensor member refuses an undefined tensor by name") {
  using T = const Tensor&;
  const std::vector<std::pair<std::string, std::function<void(T)>>> members = {
      {"Tensor::shape", [](T u) { (void)u.shape(); }},
      {"Tensor::strides", [](T u) { (void)u.strides(); }},
      {"diagonal", [](T u) { (void)u.diagonal(); }},
      {"Tensor::size", [](T u) { (void)u.size(0); }},
      {"Tensor::stride", [](T u) { (void)u.stride(0); }},
      {"Tensor::offset", [](T u) { (void)u.offset(); }},
      {"Tensor::dim", [](T u) { (void)u.dim(); }},
      {"Tensor::numel", [](T u) { (void)u.numel(); }},
      {"Tensor::dtype", [](T u) { (void)u.dtype(); }},
      {"Tensor::is_contiguous", [](T u) { (void)u.is_contiguous(); }},
      {"Tensor::storage", [](T u) { (void)u.storage(); }},
      {"Tensor::data", [](T u) { (void)u.data<float>(); }},
      {"Tensor::raw_data", [](T u) { (void)u.raw_data(); }},
      {"item", [](T u) { (void)u.item(); }},
      {"item", [](T u) { (void)u.item<float>(); }},
      {"to_vector", [](T u) { (void)u.to_vector<double>(); }},
      {"to_vector", [](T u) { (void)u.to_vector<int64_t>(); }},
      {"at", [](T u) { (void)u.at({0, 0}); }},
      {"Tensor::requires_grad", [](T u) { (void)u.requires_grad(); }},
      {"requires_grad_", [](T u) { Tensor(u).requires_grad_(); }},
      {"is_leaf", [](T u) { (void)u.is_leaf(); }},
      {"grad", [](T u) { (void)u.grad(); }},
      {"set_grad", [](T u) { Tensor(u).set_grad(Tensor()); }},
      {"zero_grad", [](T u) { Tensor(u).zero_grad(); }},
      {"Tensor::grad_fn", [](T u) { (void)u.grad_fn(); }},
      {"retain_grad", [](T u) { u.retain_grad(); }},
      {"retains_grad", [](T u) { (void)u.retains_grad(); }},
      {"register_hook", [](T u) { u.register_hook([](const Tensor& g) { return g; }); }},
      {"register_post_accumulate_grad_hook", [](T u) { u.register_post_accumulate_grad_hook([](const Tensor&) {}); }},
      {"backward", [](T u) { u.backward(); }},
      {"detach", [](T u) { (void)u.detach(); }},
      {"view", [](T u) { (void)u.view({6}); }},
      {"reshape", [](T u) { (void)u.reshape({6}); }},
      {"flatten", [](T u) { (void)u.flatten(); }},
      {"transpose", [](T u) { (void)u.transpose(0, 1); }},
      {"t", [](T u) { (void)u.t(); }},
      {"mT", [](T u) { (void)u.mT(); }},
      {"permute", [](T u) { (void)u.permute({1, 0}); }},
      {"narrow", [](T u) { (void)u.narrow(0, 0, 1); }},
      {"slice", [](T u) { (void)u.slice(0, {}); }},
      {"select", [](T u) { (void)u.select(0, 0); }},
      {"unsqueeze", [](T u) { (void)u.unsqueeze(0); }},
      {"squeeze", [](T u) { (void)u.squeeze(0); }},
      {"squeeze", [](T u) { (void)u.squeeze(); }},
      {"expand", [](T u) { (void)u.expand({2, 3}); }},
      {"expand", [](T u) { (void)u.expand_as(ones({2, 3})); }},
      {"contiguous", [](T u) { (void)u.contiguous(); }},
      {"clone", [](T u) { (void)u.clone(); }},
      {"to", [](T u) { (void)u.to(kFloat64); }},
      {"fill_", [](T u) { Tensor(u).fill_(1.0); }},
      {"fill_", [](T u) { Tensor(u).zero_(); }},
      {"copy_", [](T u) { Tensor(u).copy_(ones({2, 3})); }},
      {"copy_", [](T u) { ones({2, 3}).copy_(u); }},
  };
  for (const auto& [op, f] : members) expect_refused(op, f);
  // printing an undefined tensor is not an error, as printing None is not
  CHECK(cleared_grad().to_string() == "tensor(undefined)");
}

TEST_CASE("every op refuses an undefined tensor by name, whichever argument it is") {
  using T = const Tensor&;
  const Tensor a = ones({2, 3});
  const Tensor mask = from_bools({true, false, true, false, true, false}, {2, 3});
  const Tensor idx = from_vector(std::vector<int64_t>{0, 1}, {2});
  const std::vector<std::pair<std::string, std::function<void(T)>>> ops = {
      {"add", [&](T u) { (void)add(u, a); }},          {"add", [&](T u) { (void)add(a, u); }},
      {"sub", [&](T u) { (void)sub(u, a); }},          {"sub", [&](T u) { (void)sub(a, u); }},
      {"mul", [&](T u) { (void)mul(u, a); }},          {"mul", [&](T u) { (void)mul(a, u); }},
      {"div", [&](T u) { (void)div(u, a); }},          {"div", [&](T u) { (void)div(a, u); }},
      {"pow", [&](T u) { (void)pow(u, a); }},          {"pow", [&](T u) { (void)pow(a, u); }},
      {"maximum", [&](T u) { (void)maximum(u, a); }},  {"minimum", [&](T u) { (void)minimum(a, u); }},
      {"add", [](T u) { (void)add(u, 1.0); }},         {"sub", [](T u) { (void)sub(u, 1.0); }},
      {"rsub", [](T u) { (void)rsub(1.0, u); }},       {"mul", [](T u) { (void)mul(u, 2.0); }},
      {"div", [](T u) { (void)div(u, 2.0); }},         {"rdiv", [](T u) { (void)rdiv(2.0, u); }},
      {"pow", [](T u) { (void)pow(u, 2.0); }},         {"neg", [](T u) { (void)neg(u); }},
      {"exp", [](T u) { (void)exp(u); }},              {"log", [](T u) { (void)log(u); }},
      {"sqrt", [](T u) { (void)sqrt(u); }},            {"rsqrt", [](T u) { (void)rsqrt(u); }},
      {"abs", [](T u) { (void)abs(u); }},              {"tanh", [](T u) { (void)tanh(u); }},
      {"sin", [](T u) { (void)sin(u); }},              {"cos", [](T u) { (void)cos(u); }},
      {"sigmoid", [](T u) { (void)sigmoid(u); }},      {"relu", [](T u) { (void)relu(u); }},
      {"gelu", [](T u) { (void)gelu(u); }},            {"square", [](T u) { (void)square(u); }},
      {"add", [&](T u) { (void)(u + a); }},            {"rsub", [](T u) { (void)(1.0 - u); }},
      {"mul", [](T u) { (void)(u * 2.0); }},           {"rdiv", [](T u) { (void)(1.0 / u); }},
      {"neg", [](T u) { (void)(-u); }},
      {"outer", [&](T u) { (void)outer(u, a); }},      {"outer", [&](T u) { (void)outer(a, u); }},
      {"diag", [](T u) { (void)diag(u); }},            {"diag_embed", [](T u) { (void)diag_embed(u); }},
      {"trace", [](T u) { (void)trace(u); }},          {"tril", [](T u) { (void)tril(u); }},
      {"triu", [](T u) { (void)triu(u); }},            {"norm", [](T u) { (void)norm(u); }},
      {"logsumexp", [](T u) { (void)logsumexp(u, {0}); }},
      {"cumsum", [](T u) { (void)cumsum(u, 0); }},
      {"isclose", [&](T u) { (void)isclose(u, a); }},  {"isclose", [&](T u) { (void)isclose(a, u); }},
      {"allclose", [&](T u) { (void)allclose(u, a); }},
      {"eq", [&](T u) { (void)eq(u, a); }},            {"ne", [&](T u) { (void)ne(a, u); }},
      {"lt", [&](T u) { (void)lt(u, a); }},            {"le", [&](T u) { (void)le(a, u); }},
      {"gt", [&](T u) { (void)gt(u, a); }},            {"ge", [&](T u) { (void)ge(a, u); }},
      {"eq", [](T u) { (void)eq(u, 1.0); }},           {"ne", [](T u) { (void)ne(u, 1.0); }},
      {"lt", [](T u) { (void)lt(u, 1.0); }},           {"le", [](T u) { (void)le(u, 1.0); }},
      {"gt", [](T u) { (void)gt(u, 1.0); }},           {"ge", [](T u) { (void)ge(u, 1.0); }},
      {"logical_and", [&](T u) { (void)logical_and(u, mask); }},
      {"logical_or", [&](T u) { (void)logical_or(mask, u); }},
      {"logical_not", [](T u) { (void)logical_not(u); }},
      {"allclose", [&](T u) { (void)allclose(u, a); }}, {"equal", [&](T u) { (void)equal(a, u); }},
      {"sum", [](T u) { (void)sum(u); }},              {"sum", [](T u) { (void)sum(u, {0}, true); }},
      {"mean", [](T u) { (void)mean(u); }},            {"mean", [](T u) { (void)mean(u, {1}); }},
      {"amax", [](T u) { (void)amax(u); }},            {"amin", [](T u) { (void)amin(u, {0}); }},
      {"max", [](T u) { (void)max(u); }},              {"max", [](T u) { (void)max(u, 1); }},
      {"argmax", [](T u) { (void)argmax(u, 0); }},     {"argmin", [](T u) { (void)argmin(u, 0); }},
      {"var", [](T u) { (void)var(u, {0}); }},
      {"matmul", [&](T u) { (void)matmul(u, a.t()); }}, {"matmul", [&](T u) { (void)matmul(a, u); }},
      {"linear", [&](T u) { (void)linear(u, a); }},     {"linear", [&](T u) { (void)linear(a, u); }},
      {"softmax", [](T u) { (void)softmax(u, -1); }},   {"log_softmax", [](T u) { (void)log_softmax(u, -1); }},
      {"softmax_backward", [&](T u) { (void)softmax_backward(u, a, -1); }},
      {"softmax_backward", [&](T u) { (void)softmax_backward(a, u, -1); }},
      {"masked_fill", [&](T u) { (void)masked_fill(u, mask, 0.0); }},
      {"masked_fill", [&](T u) { (void)masked_fill(a, u, 0.0); }},
      {"where", [&](T u) { (void)where(u, a, a); }},    {"where", [&](T u) { (void)where(mask, u, a); }},
      {"where", [&](T u) { (void)where(mask, a, u); }}, {"where", [&](T u) { (void)where(mask, u, 0.0); }},
      {"cat", [&](T u) { (void)cat({a, u}); }},         {"stack", [&](T u) { (void)stack({u, a}); }},
      {"split", [](T u) { (void)split(u, 1); }},        {"split", [](T u) { (void)split(u, {1, 1}); }},
      {"chunk", [](T u) { (void)chunk(u, 2); }},
      {"index_select", [&](T u) { (void)index_select(u, 0, idx); }},
      {"index_select", [&](T u) { (void)index_select(a, 0, u); }},
      {"gather", [&](T u) { (void)gather(u, 0, idx.unsqueeze(1)); }},
      {"gather", [&](T u) { (void)gather(a, 0, u); }},
      {"embedding_lookup", [&](T u) { (void)embedding_lookup(u, idx); }},
      {"embedding_lookup", [&](T u) { (void)embedding_lookup(a, u); }},
      {"dropout", [](T u) { (void)dropout(u, 0.5); }},  {"relu_dropout", [](T u) { (void)relu_dropout(u, 0.5); }},
      {"dropout_packed", [&](T u) { (void)nn::dropout_packed(u, idx, 2, 0.5); }},
      {"relu_dropout_packed", [&](T u) { (void)nn::relu_dropout_packed(a, u, 2, 0.5); }},
      {"zeros_like", [](T u) { (void)zeros_like(u); }}, {"ones_like", [](T u) { (void)ones_like(u); }},
      {"full_like", [](T u) { (void)full_like(u, 2.0); }},
  };
  for (const auto& [op, f] : ops) expect_refused(op, f);
}

TEST_CASE("nn ops, layers, autograd functions and checks refuse an undefined tensor by name") {
  using T = const Tensor&;
  const Tensor x = ones({1, 2, 4});
  const std::vector<std::pair<std::string, std::function<void(T)>>> calls = {
      {"layer_norm", [](T u) { (void)nn::layer_norm(u, Tensor(), Tensor()); }},
      {"cross_entropy", [](T u) { (void)nn::cross_entropy(u, zeros({2}, kInt64)); }},
      {"cross_entropy", [](T u) { (void)nn::cross_entropy(ones({2, 3}), u); }},
      {"scaled_dot_product_attention", [&](T u) { (void)nn::scaled_dot_product_attention(u, x, x); }},
      {"scaled_dot_product_attention", [&](T u) { (void)nn::scaled_dot_product_attention(x, x, u); }},
      {"scaled_dot_product_attention_tiled", [&](T u) { (void)nn::scaled_dot_product_attention_tiled(x, u, x); }},
      {"scaled_dot_product_attention_reference",
       [&](T u) { (void)nn::scaled_dot_product_attention_reference(x, x, u); }},
      {"AttentionMask::blocked", [](T u) { (void)nn::AttentionMask::blocked(u); }},
      {"AttentionMask::allowed", [](T u) { (void)nn::AttentionMask::allowed(u); }},
      {"padding_mask", [](T u) { (void)nn::padding_mask(u, 0); }},
      {"fans", [](T u) { (void)nn::init::fans(u); }},
      {"uniform_", [](T u) { Tensor w = u; nn::init::uniform_(w, 0, 1); }},
      {"normal_", [](T u) { Tensor w = u; nn::init::normal_(w, 0, 1); }},
      {"zeros_", [](T u) { Tensor w = u; nn::init::zeros_(w); }},
      {"ones_", [](T u) { Tensor w = u; nn::init::ones_(w); }},
      {"kaiming_uniform_", [](T u) { Tensor w = u; nn::init::kaiming_uniform_(w); }},
      {"xavier_uniform_", [](T u) { Tensor w = u; nn::init::xavier_uniform_(w); }},
      {"Linear::forward", [](T u) { nn::Linear lin(3, 2); (void)lin.forward(u); }},
      {"Embedding::forward", [](T u) { nn::Embedding emb(5, 2); (void)emb.forward(u); }},
      {"LayerNorm::forward", [](T u) { nn::LayerNorm ln(3); (void)ln.forward(u); }},
      {"Dropout::forward", [](T u) { nn::Dropout d(0.5); (void)d.forward(u); }},
      {"MultiHeadAttention::forward", [&](T u) { nn::MultiHeadAttention m(4, 2); (void)m.forward(x, u, x); }},
      {"EncoderLayer::forward",
       [](T u) { nn::EncoderLayer l({.d_model = 4, .num_heads = 2, .dim_feedforward = 8}); (void)l.forward(u); }},
      {"DecoderLayer::forward", [&](T u) {
         nn::DecoderLayer l({.d_model = 4, .num_heads = 2, .dim_feedforward = 8});
         (void)l.forward(x, u);
       }},
      {"jacobian", [](T u) { (void)jacobian([](const Tensor& t) { return t; }, u); }},
      {"hessian", [](T u) { (void)hessian([](const Tensor& t) { return sum(t); }, u); }},
      {"hvp", [](T u) { (void)hvp([](const Tensor& t) { return sum(t); }, u, ones({2, 3})); }},
      {"hvp", [](T u) { (void)hvp([](const Tensor& t) { return sum(square(t)); }, ones({2, 3}, kFloat64), u); }},
      {"backward", [](T u) { run_backward({u}, {Tensor()}, false, false); }},
      {"grad", [](T u) { (void)grad({sum(ones({2}).requires_grad_())}, {u}); }},
      {"grad", [](T u) { (void)grad({u}, {ones({2}).requires_grad_()}); }},
  };
  for (const auto& [op, f] : calls) expect_refused(op, f);
}

TEST_CASE("grad's undefined result for an unused input (allow_unused) says why") {
  Tensor x = ones({2}).requires_grad_(), unused = ones({2}).requires_grad_();
  auto g = grad({sum(x)}, {x, unused}, {}, {.allow_unused = true});
  REQUIRE_FALSE(g[1].defined());
  CHECK_THAT(error_of([&] { (void)g[1].shape(); }), Contains("the outputs do not depend on (allow_unused)"));
}

TEST_CASE("modules, optimizers, packings, custom functions and gradcheck refuse an undefined tensor") {
  using T = const Tensor&;
  const std::vector<std::pair<std::string, std::function<void(T)>>> calls = {
      {"Packing::of", [](T u) { (void)nn::Packing::of(u, 0); }},
      {"Packing::pack", [](T u) {
         nn::Packing p = nn::Packing::of(from_vector(std::vector<int64_t>{1, 0}, {1, 2}), 0);
         (void)p.pack(u);
       }},
      {"Packing::unpack", [](T u) {
         nn::Packing p = nn::Packing::of(from_vector(std::vector<int64_t>{1, 0}, {1, 2}), 0);
         (void)p.unpack(u);
       }},
      {"SGD", [](T u) { optim::SGD sgd({{"w", u}}, {.lr = 0.1}); }},
      {"Adam", [](T u) { optim::Adam adam({{"w", u}}); }},
      {"clip_grad_norm", [](T u) { (void)optim::clip_grad_norm({u}, 1.0); }},
      {"cube", [](T u) {
         const Function cube{.name = "cube",
                             .forward = [](FunctionCtx&, const std::vector<Tensor>& in) { return mul(in[0], in[0]); },
                             .backward = [](FunctionCtx&, const Tensor& g) { return std::vector<Tensor>{g}; }};
         (void)cube.apply({u});
       }},
  };
  for (const auto& [op, f] : calls) expect_refused(op, f);
  // gradcheck passes an undefined input through to the function (an absent bias, say)
  const GradcheckFn first = [](const std::vector<Tensor>& in) { return in[0]; };
  CHECK_THAT(error_of([&] { (void)gradcheck(first, {cleared_grad()}); }), Equals("gradcheck: no input requires grad"));
  CHECK_THAT(error_of([&] { (void)gradgradcheck(first, {cleared_grad()}); }),
             Equals("gradgradcheck: no input requires grad"));
}

TEST_CASE("the Transformer's encode, decode and decoding steps name an undefined argument") {
  nn::Transformer model(testing::tiny_transformer({.src_vocab = 6, .tgt_vocab = 6, .d_model = 8, .dim_feedforward = 16}));
  const Tensor src = from_vector(std::vector<int64_t>{1, 2, 3}, {1, 3});
  CHECK_THAT(error_of([&] { (void)model.encode(cleared_grad()); }),
             StartsWith(std::string("Transformer::encode: src is undefined: ") + kCleared));
  CHECK_THAT(error_of([&] { (void)model.decode(cleared_grad(), model.encode(src), {}); }),
             StartsWith("Transformer::decode: tgt is undefined"));
  CHECK_THAT(error_of([&] { (void)model.decode(src, cleared_grad(), {}); }),
             StartsWith("Transformer::decode: memory is undefined"));
  CHECK_THAT(error_of([&] { (void)model.start_decoding(cleared_grad()); }),
             StartsWith("Transformer::start_decoding: src is undefined"));
  nn::DecoderState state = model.start_decoding(src);
  CHECK_THAT(error_of([&] { (void)model.decode_step(state, cleared_grad()); }),
             StartsWith("Transformer::decode_step: tokens is undefined"));
}

TEST_CASE("a module whose parameter was replaced by an undefined tensor names it, and leaves out an undefined buffer") {
  nn::Linear lin(3, 2);
  lin.weight = Tensor();
  const std::string expected = "Module: parameter 'weight' is undefined";
  CHECK_THAT(error_of([&] { (void)lin.named_parameters(); }), StartsWith(expected));
  CHECK_THAT(error_of([&] { (void)lin.num_parameters(); }), StartsWith(expected));
  CHECK_THAT(error_of([&] { lin.zero_grad(); }), StartsWith(expected));
  CHECK_THAT(error_of([&] { lin.to(kFloat64); }), StartsWith(expected));
  CHECK_THAT(error_of([&] { (void)lin.state_dict(); }), StartsWith(expected));
  CHECK_THAT(error_of([&] { lin.load_state_dict({}); }), StartsWith(expected));

  nn::PositionalEncoding pe(4, 8);
  CHECK(pe.named_buffers().size() == 1);
  pe.pe = Tensor();
  CHECK(pe.named_buffers().empty());
  CHECK(pe.state_dict().empty());
}
