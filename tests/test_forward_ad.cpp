// Forward mode (core/forward_ad.h): dual tensors, their scope, and every op's forward rule.
//
// Each op with a rule is checked in float64 with random, non-uniform tangents v in three
// layouts (contiguous inputs; strided, transposed views; the first input without a
// tangent) three ways: the J v that forward mode gives
//   - against reverse mode: <u, J v> == <J^T u, v> for a random u, J^T u from the existing
//     backward, to 1e-12 relative to the size of the terms;
//   - against central differences (f(x + eps v) - f(x - eps v)) / 2 eps, to 1e-6;
//   - and the dual output's primal is bitwise the output computed without a level.
// The fused ops of nn (layer_norm, cross_entropy) are checked the same way. Then the
// scope: tangents vanish when the level closes, make_dual's errors, a nested level, an op
// or Function without a rule failing by name, and nothing changing when no level is open.
#include <catch2/catch.hpp>
#include "test_util.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/forward_ad.h"
#include "core/function.h"
#include "core/ops.h"
#include "core/random.h"
#include "nn/functional.h"

using namespace ember;
using ember::testing::Domain;
using ember::testing::Fn;
using ember::testing::Inputs;
using ember::testing::draw;
using ember::testing::check_jvp;
using ember::testing::error_of;
using ember::testing::max_abs_diff;
using ember::testing::strided;

namespace {

enum class Layout { Contiguous, Strided, FirstWithoutTangent };

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Strided: return "strided";
    case Layout::FirstWithoutTangent: return "first input without a tangent";
  }
  return "?";
}

struct OpCase {
  std::string name;
  Fn f;
  std::vector<Shape> shapes;
  Domain domain = Domain::Any;
  bool strided_ok = true;  // false for view(), which refuses most strided inputs
};

void check_case(const OpCase& c, Layout layout, Generator& gen) {
  INFO(c.name << " (" << layout_name(layout) << ")");
  Inputs x, v;
  for (const Shape& s : c.shapes) {
    Tensor xi = draw(s, c.domain, gen), vi = randn(s, kFloat64, &gen);
    if (layout == Layout::Strided) xi = strided(xi), vi = strided(vi);
    x.push_back(xi);
    v.push_back(vi);
  }
  if (layout == Layout::FirstWithoutTangent) v[0] = Tensor();

  check_jvp(c.f, x, v, gen);
}

void check_all(const std::vector<OpCase>& cases, uint64_t seed) {
  Generator gen(seed);
  for (const OpCase& c : cases)
    for (Layout l : {Layout::Contiguous, Layout::Strided, Layout::FirstWithoutTangent})
      if ((l != Layout::Strided || c.strided_ok) && (l != Layout::FirstWithoutTangent || c.shapes.size() > 1))
        check_case(c, l, gen);
}

Fn unary(Tensor (*op)(const Tensor&, Loc)) {
  return [op](const Inputs& in) { return op(in[0], Loc::current()); };
}
Fn binary(Tensor (*op)(const Tensor&, const Tensor&, Loc)) {
  return [op](const Inputs& in) { return op(in[0], in[1], Loc::current()); };
}

const Shape kM{3, 4};

}  // namespace

TEST_CASE("forward mode through unary elementwise ops equals reverse mode and finite differences") {
  const std::vector<OpCase> cases = {
      {"neg", unary(neg), {kM}},
      {"exp", unary(exp), {kM}},
      {"log", unary(log), {kM}, Domain::Positive},
      {"sqrt", unary(sqrt), {kM}, Domain::Positive},
      {"rsqrt", unary(rsqrt), {kM}, Domain::Positive},
      {"abs", unary(abs), {kM}, Domain::AwayFromZero},
      {"tanh", unary(tanh), {kM}},
      {"sin", unary(sin), {kM}},
      {"cos", unary(cos), {kM}},
      {"sigmoid", unary(sigmoid), {kM}},
      {"relu", unary(relu), {kM}, Domain::AwayFromZero},
      {"square", unary(square), {kM}},
      {"gelu", [](const Inputs& in) { return gelu(in[0]); }, {kM}},
      {"gelu (tanh)", [](const Inputs& in) { return gelu(in[0], true); }, {kM}},
      {"pow(a, 2.5)", [](const Inputs& in) { return pow(in[0], 2.5); }, {kM}, Domain::Positive},
      {"pow(a, 3)", [](const Inputs& in) { return pow(in[0], 3.0); }, {kM}},
      {"add(a, s)", [](const Inputs& in) { return add(in[0], 1.5); }, {kM}},
      {"sub(a, s)", [](const Inputs& in) { return sub(in[0], 1.5); }, {kM}},
      {"rsub(s, a)", [](const Inputs& in) { return rsub(1.5, in[0]); }, {kM}},
      {"mul(a, s)", [](const Inputs& in) { return mul(in[0], -2.5); }, {kM}},
      {"div(a, s)", [](const Inputs& in) { return div(in[0], 3.0); }, {kM}},
      {"rdiv(s, a)", [](const Inputs& in) { return rdiv(2.0, in[0]); }, {kM}, Domain::AwayFromZero},
  };
  check_all(cases, 1);
}

TEST_CASE("forward mode through binary elementwise ops, broadcasting, equals reverse mode and finite differences") {
  std::vector<OpCase> cases;
  const std::vector<std::vector<Shape>> shapes = {{kM, kM}, {kM, {4}}, {{3, 1}, {1, 4}}, {{}, kM}};
  for (const auto& s : shapes) {
    cases.push_back({"add", binary(add), s});
    cases.push_back({"sub", binary(sub), s});
    cases.push_back({"mul", binary(mul), s});
    cases.push_back({"div", binary(div), s, Domain::AwayFromZero});
    cases.push_back({"pow", binary(pow), s, Domain::Positive});
    cases.push_back({"maximum", binary(maximum), s});
    cases.push_back({"minimum", binary(minimum), s});
    cases.push_back({"a * b + a / b", [](const Inputs& in) { return add(mul(in[0], in[1]), div(in[0], in[1])); }, s,
                     Domain::Positive});
  }
  check_all(cases, 2);
}

TEST_CASE("forward mode through reductions equals reverse mode and finite differences") {
  const Shape s3{2, 3, 4};
  const std::vector<OpCase> cases = {
      {"sum", [](const Inputs& in) { return sum(in[0]); }, {s3}},
      {"sum dims", [](const Inputs& in) { return sum(in[0], {0, 2}); }, {s3}},
      {"sum keepdim", [](const Inputs& in) { return sum(in[0], {1}, true); }, {s3}},
      {"mean", [](const Inputs& in) { return mean(in[0]); }, {s3}},
      {"mean dims", [](const Inputs& in) { return mean(in[0], {-1}, true); }, {s3}},
      {"amax", [](const Inputs& in) { return amax(in[0], {1}); }, {s3}},
      {"amin", [](const Inputs& in) { return amin(in[0], {0, 2}, true); }, {s3}},
      {"amax all", [](const Inputs& in) { return amax(in[0]); }, {s3}},
      {"max", [](const Inputs& in) { return max(in[0]); }, {s3}},
      {"max(dim)", [](const Inputs& in) { return max(in[0], 2).first; }, {s3}},
      {"max(dim, keepdim)", [](const Inputs& in) { return max(in[0], 0, true).first; }, {s3}},
      {"var", [](const Inputs& in) { return var(in[0], {1}); }, {s3}},
      {"var all, correction 0", [](const Inputs& in) { return var(in[0], {}, 0); }, {s3}},
      {"std (sqrt of var)", [](const Inputs& in) { return sqrt(var(in[0], {2}, 1, true)); }, {s3}},
      {"norm", [](const Inputs& in) { return norm(in[0]); }, {s3}},
      {"norm dims", [](const Inputs& in) { return norm(in[0], 2, {1}, true); }, {s3}},
      {"norm p=3", [](const Inputs& in) { return norm(in[0], 3, {2}); }, {s3}, Domain::AwayFromZero},
      {"norm p=1.5", [](const Inputs& in) { return norm(in[0], 1.5); }, {s3}, Domain::AwayFromZero},
      {"norm p=1", [](const Inputs& in) { return norm(in[0], 1, {0}); }, {s3}, Domain::AwayFromZero},
      {"norm p=inf", [](const Inputs& in) { return norm(in[0], INFINITY, {1}); }, {s3}},
      {"logsumexp", [](const Inputs& in) { return logsumexp(in[0], {1}); }, {s3}},
      {"logsumexp keepdim", [](const Inputs& in) { return logsumexp(in[0], {0, 2}, true); }, {s3}},
      {"cumsum", [](const Inputs& in) { return cumsum(in[0], 1); }, {s3}},
      {"cumsum last", [](const Inputs& in) { return cumsum(in[0], -1); }, {s3}},
      {"cumsum 0-dim", [](const Inputs& in) { return cumsum(in[0], 0); }, {{}}},
  };
  check_all(cases, 3);
}

TEST_CASE("forward mode through views and copies equals reverse mode and finite differences") {
  const Shape s3{2, 3, 4};
  const std::vector<OpCase> cases = {
      {"view", [](const Inputs& in) { return in[0].view({6, 4}); }, {s3}, Domain::Any, false},
      {"reshape", [](const Inputs& in) { return in[0].reshape({4, -1}); }, {s3}},
      {"flatten", [](const Inputs& in) { return in[0].flatten(1); }, {s3}},
      {"transpose", [](const Inputs& in) { return in[0].transpose(0, 2); }, {s3}},
      {"t", [](const Inputs& in) { return in[0].t(); }, {kM}},
      {"mT", [](const Inputs& in) { return in[0].mT(); }, {s3}},
      {"permute", [](const Inputs& in) { return in[0].permute({2, 0, 1}); }, {s3}},
      {"expand", [](const Inputs& in) { return mul(in[0].expand({2, 3, 4}), in[1]); }, {{3, 1}, s3}},
      {"narrow", [](const Inputs& in) { return in[0].narrow(2, 1, 2); }, {s3}},
      {"select", [](const Inputs& in) { return in[0].select(1, -1); }, {s3}},
      {"slice", [](const Inputs& in) { return in[0].slice(2, {.start = 0, .end = 4, .step = 2}); }, {s3}},
      {"unsqueeze", [](const Inputs& in) { return in[0].unsqueeze(1); }, {s3}},
      {"squeeze", [](const Inputs& in) { return in[0].unsqueeze(0).squeeze(); }, {s3}},
      {"squeeze(dim)", [](const Inputs& in) { return in[0].squeeze(1); }, {{2, 1, 4}}},
      {"diagonal", [](const Inputs& in) { return in[0].diagonal(1, 1, 2); }, {s3}},
      {"diag_embed", [](const Inputs& in) { return diag_embed(in[0], -1); }, {kM}},
      {"diag", [](const Inputs& in) { return diag(in[0]); }, {{3, 3}}},
      {"trace", [](const Inputs& in) { return trace(in[0]); }, {{3, 3}}},
      {"tril", [](const Inputs& in) { return tril(in[0], -1); }, {kM}},
      {"triu", [](const Inputs& in) { return triu(in[0]); }, {kM}},
      {"contiguous", [](const Inputs& in) { return in[0].contiguous(); }, {s3}},
      {"clone", [](const Inputs& in) { return in[0].clone(); }, {s3}},
      {"to float64", [](const Inputs& in) { return in[0].to(kFloat64); }, {s3}},
  };
  check_all(cases, 4);
}

TEST_CASE("forward mode through matmul, linear and outer equals reverse mode and finite differences") {
  const std::vector<OpCase> cases = {
      {"mm", binary(matmul), {{3, 4}, {4, 5}}},
      {"bmm", binary(matmul), {{2, 3, 4}, {2, 4, 5}}},
      {"matmul batched @ matrix", binary(matmul), {{2, 3, 4}, {4, 5}}},
      {"matmul broadcast batch", binary(matmul), {{2, 1, 3, 4}, {3, 4, 2}}},
      {"matmul vector @ matrix", binary(matmul), {{4}, {4, 5}}},
      {"matmul matrix @ vector", binary(matmul), {{3, 4}, {4}}},
      {"matmul dot", binary(matmul), {{4}, {4}}},
      {"outer", binary(outer), {{3}, {4}}},
      {"linear", [](const Inputs& in) { return linear(in[0], in[1], in[2]); }, {{2, 3, 4}, {5, 4}, {5}}},
      {"linear without bias", [](const Inputs& in) { return linear(in[0], in[1]); }, {{3, 4}, {5, 4}}},
      {"linear, only the bias", [](const Inputs& in) { return linear(in[2], in[1], in[0]); }, {{5}, {5, 4}, {3, 4}}},
  };
  check_all(cases, 5);
}

TEST_CASE("forward mode through softmax, masking, joining and indexing equals reverse mode and finite differences") {
  const Shape s3{2, 3, 4};
  const Tensor mask = from_bools({true, false, false, true, false, true, false, false, true, true, false, false}, kM);
  const Tensor rows = tensor({2, 0, 2, 1}, kInt64);
  Generator ig(7);
  const Tensor idx = randint(0, 3, {2, 5, 4}, &ig);
  const std::vector<OpCase> cases = {
      {"softmax", [](const Inputs& in) { return softmax(in[0], -1); }, {s3}},
      {"softmax dim 0", [](const Inputs& in) { return softmax(in[0], 0); }, {s3}},
      {"log_softmax", [](const Inputs& in) { return log_softmax(in[0], 1); }, {s3}},
      {"softmax_backward", [](const Inputs& in) { return softmax_backward(in[0], in[1], -1); }, {s3, s3}},
      {"softmax_backward of softmax", [](const Inputs& in) { return softmax_backward(in[0], softmax(in[1], 1), 1); },
       {s3, s3}},
      {"log_softmax_backward", [](const Inputs& in) { return softmax_backward(in[0], in[1], 0, true); }, {s3, s3}},
      {"masked_fill", [mask](const Inputs& in) { return masked_fill(in[0], mask, -3.0); }, {kM}},
      {"masked_fill broadcast", [mask](const Inputs& in) { return masked_fill(in[0], mask.select(0, 0), 2.0); }, {kM}},
      {"where", [mask](const Inputs& in) { return where(mask, in[0], in[1]); }, {kM, kM}},
      {"where broadcast", [mask](const Inputs& in) { return where(mask, in[0], in[1]); }, {{4}, {3, 1}}},
      {"where scalar", [mask](const Inputs& in) { return where(mask, in[0], 0.5); }, {kM}},
      {"cat", [](const Inputs& in) { return cat({in[0], in[1], in[0]}, 1); }, {{2, 3}, {2, 5}}},
      {"cat dim 0", [](const Inputs& in) { return cat({in[1], in[0]}); }, {{2, 3}, {4, 3}}},
      {"stack", [](const Inputs& in) { return stack({in[0], in[1]}, 1); }, {kM, kM}},
      {"split", [](const Inputs& in) { return mul(split(in[0], {1, 2}, 0)[0], split(in[0], 3, 1)[1]); }, {{3, 4}}},
      {"chunk", [](const Inputs& in) { return chunk(in[0], 2, 2)[0]; }, {s3}},
      {"index_select", [rows](const Inputs& in) { return index_select(in[0], 0, rows); }, {kM}},
      {"index_select dim 1", [rows](const Inputs& in) { return index_select(in[0], 1, rows); }, {s3}},
      {"gather", [idx](const Inputs& in) { return gather(in[0], 1, idx); }, {s3}},
      {"dropout (the same mask)", [](const Inputs& in) {
         Generator g(5);
         return dropout(in[0], 0.4, true, &g);
       }, {s3}},
      {"relu_dropout (the same mask)", [](const Inputs& in) {
         Generator g(6);
         return relu_dropout(in[0], 0.4, true, &g);
       }, {s3}, Domain::AwayFromZero},
      {"dropout, not training", [](const Inputs& in) { return dropout(in[0], 0.4, false); }, {s3}},
      {"embedding_lookup", [idx](const Inputs& in) { return embedding_lookup(in[0], idx.select(2, 0)); }, {{3, 4}}},
  };
  check_all(cases, 6);
}

TEST_CASE("forward mode through a composition (a small network) equals reverse mode and finite differences") {
  const Tensor target = softmax(tensor({{1.0, -1.0}, {0.5, 0.0}, {-2.0, 1.0}, {0.0, 0.0}}, kFloat64), -1);
  const std::vector<OpCase> cases = {
      {"two-layer network with softmax cross-entropy",
       [target](const Inputs& in) {
         Tensor h = gelu(linear(in[0], in[1], in[2]));
         Tensor logits = matmul(h, in[3]);
         return neg(mean(sum(mul(log_softmax(logits, -1), target), {-1})));
       },
       {{4, 3}, {5, 3}, {5}, {5, 2}}},
  };
  check_all(cases, 8);
}

TEST_CASE("forward mode through nn::layer_norm, with and without weight and bias, equals reverse mode and finite "
          "differences") {
  const Shape s3{2, 3, 5}, c{5};
  Generator gen(21);
  const Tensor x0 = randn(s3, kFloat64, &gen), w0 = randn(c, kFloat64, &gen);
  const std::vector<OpCase> cases = {
      {"layer_norm", [](const Inputs& in) { return nn::layer_norm(in[0], in[1], in[2]); }, {s3, c, c}},
      {"layer_norm without weight and bias", [](const Inputs& in) { return nn::layer_norm(in[0], {}, {}); }, {s3}},
      {"layer_norm with weight only", [](const Inputs& in) { return nn::layer_norm(in[0], in[1], {}); }, {s3, c}},
      {"layer_norm with bias only", [](const Inputs& in) { return nn::layer_norm(in[0], {}, in[1], 0.1); }, {s3, c}},
      {"layer_norm, a tangent on the bias only",
       [x0, w0](const Inputs& in) { return nn::layer_norm(x0, w0, in[0]); }, {c}},
      {"layer_norm, a tangent on the weight only, no bias",
       [x0](const Inputs& in) { return nn::layer_norm(x0, in[0], {}); }, {c}},
      {"layer_norm of rows of one element", [](const Inputs& in) { return nn::layer_norm(in[0], in[1], in[2]); },
       {{4, 1}, {1}, {1}}},
  };
  check_all(cases, 9);
}

TEST_CASE("forward mode through nn::cross_entropy, with ignored rows and label smoothing, equals reverse mode and "
          "finite differences") {
  const Tensor target = tensor({{2, -100, 0}, {4, 4, -100}}, kInt64);  // [2, 3], two rows ignored
  const Tensor flat = tensor({1, 3, 0, 3, 2, 4}, kInt64);
  const Tensor none_kept = full({2, 3}, -100.0, kInt64);
  std::vector<OpCase> cases;
  for (double smoothing : {0.0, 0.1}) {
    const std::string s = " (smoothing " + std::to_string(smoothing).substr(0, 3) + ")";
    cases.push_back({"cross_entropy with ignored rows" + s, [target, smoothing](const Inputs& in) {
                       return nn::cross_entropy(in[0], target, -100, smoothing);
                     }, {{2, 3, 5}}});
    cases.push_back({"cross_entropy of 2-D logits" + s, [flat, smoothing](const Inputs& in) {
                       return nn::cross_entropy(in[0], flat, -100, smoothing);
                     }, {{6, 5}}});
    cases.push_back({"cross_entropy of a sum, the other operand without a tangent" + s,
                     [flat, smoothing](const Inputs& in) {
                       return nn::cross_entropy(add(in[0], in[1]), flat, 3, smoothing);
                     }, {{6, 5}, {6, 5}}});
    cases.push_back({"cross_entropy with every row ignored" + s, [none_kept, smoothing](const Inputs& in) {
                       return nn::cross_entropy(in[0], none_kept, -100, smoothing);
                     }, {{2, 3, 5}}});
  }
  check_all(cases, 10);
}

TEST_CASE("nn::cross_entropy's tangent is 0 when every row is ignored, and layer_norm's is J v in float32 too") {
  DualLevel level;
  const Tensor z = make_dual(randn({3, 4}, kFloat64), randn({3, 4}, kFloat64));
  const Tensor t = unpack_dual(nn::cross_entropy(z, full({3}, -1.0, kInt64), -1)).tangent;
  REQUIRE(t.defined());
  CHECK(t.item() == 0.0);
  // float32: the same tangent as float64's, to float32 precision
  Generator gen(3);
  const Tensor x = randn({4, 6}, kFloat64, &gen), v = randn({4, 6}, kFloat64, &gen);
  const Tensor t64 = unpack_dual(nn::layer_norm(make_dual(x, v), {}, {})).tangent;
  const Tensor t32 = unpack_dual(nn::layer_norm(make_dual(x.to(kFloat32), v.to(kFloat32)), {}, {})).tangent;
  REQUIRE(t32.dtype() == kFloat32);
  CHECK(max_abs_diff(t32.to(kFloat64), t64) < 1e-5);
}

TEST_CASE("make_dual attaches a tangent that unpack_dual returns, and it vanishes when the level closes") {
  const Tensor x = tensor({1.0, 2.0, 3.0}, kFloat64), v = tensor({0.5, -1.0, 2.0}, kFloat64);
  Tensor dual, y;
  {
    DualLevel level;
    CHECK(dual_level_open());
    dual = make_dual(x, v);
    CHECK(dual.storage() == x.storage());  // a view of the primal
    UnpackedDual u = unpack_dual(dual);
    CHECK(u.tangent.same(v));  // kept as it is
    CHECK(equal(u.primal, x));
    CHECK_FALSE(unpack_dual(u.primal).tangent.defined());  // the primal carries no tangent
    CHECK_FALSE(unpack_dual(x).tangent.defined());  // nor does x itself
    y = mul(dual, dual);
    CHECK(unpack_dual(y).tangent.to_vector<double>() == std::vector<double>{1.0, -4.0, 12.0});
  }
  CHECK_FALSE(dual_level_open());
  CHECK_FALSE(unpack_dual(dual).tangent.defined());
  CHECK_FALSE(unpack_dual(y).tangent.defined());
  CHECK_FALSE(dual.impl()->tangent);  // dropped, not only hidden
  CHECK_FALSE(y.impl()->tangent);
  CHECK(equal(unpack_dual(y).primal, mul(x, x)));
  DualLevel next;  // nor do they come back in a new level
  CHECK_FALSE(unpack_dual(y).tangent.defined());
}

TEST_CASE("make_dual refuses a closed level, undefined tensors and a tangent of another shape or dtype") {
  const Tensor x = zeros({2, 3}, kFloat64);
  CHECK(error_of([&] { make_dual(x, x); }).rfind("make_dual: no dual level is open", 0) == 0);
  DualLevel level;
  CHECK(error_of([&] { make_dual(x, zeros({3, 2}, kFloat64)); }) ==
        "make_dual: expected a tangent of the primal's shape [2,3] and dtype float64, got shape [3,2] and dtype "
        "float64");
  CHECK(error_of([&] { make_dual(x, zeros({2, 3}, kFloat32)); }) ==
        "make_dual: expected a tangent of the primal's shape [2,3] and dtype float64, got shape [2,3] and dtype "
        "float32");
  CHECK(error_of([&] { make_dual(zeros({2}, kInt64), zeros({2}, kInt64)); }) ==
        "make_dual: expected a float32 or float64 primal, got int64 of shape [2]");
  CHECK(error_of([&] { make_dual(Tensor(), x); }).rfind("make_dual: the primal is undefined", 0) == 0);
  CHECK(error_of([&] { make_dual(x, Tensor()); }).rfind("make_dual: the tangent is undefined", 0) == 0);
  CHECK(error_of([&] { DualLevel inner; }).rfind("DualLevel: dual level ", 0) == 0);
  CHECK(error_of([&] { DualLevel inner; }).find("nested dual levels are not supported yet") != std::string::npos);
}

TEST_CASE("an op without a forward rule fails by name when a tangent reaches it") {
  DualLevel level;
  const Tensor x = make_dual(randn({2, 3}, kFloat64), randn({2, 3}, kFloat64));
  // a rule-less op as nn's fused ones are
  const Function opaque{.name = "opaque",
                        .forward = [](FunctionCtx&, const Inputs& in) { return in[0].clone(); },
                        .backward = [](FunctionCtx&, const Tensor& g) { return Inputs{g}; }};
  auto rule_less = [](const Tensor& in) {
    return record("fused_thing", Loc::current(), in.detach().clone(), {in},
                  wants_grad(in) ? BackwardFn([](const Tensor& g) { return Inputs{g}; }) : nullptr);
  };
  CHECK(error_of([&] { rule_less(x); }) == "fused_thing: forward-mode differentiation (a tangent) is not supported yet");
  CHECK(error_of([&] { rule_less(exp(x)); }) ==
        "fused_thing: forward-mode differentiation (a tangent) is not supported yet");
  CHECK(error_of([&] { rule_less(x.detach()); }) == ember::testing::no_error);  // no tangent: no rule needed
  CHECK(error_of([&] { opaque.apply({x}); }).rfind("opaque: forward-mode differentiation", 0) == 0);
  Tensor y = zeros({2, 3}, kFloat64);
  CHECK(error_of([&] { y.copy_(x); }) == "copy_: forward-mode differentiation (a tangent) is not supported yet");
}

TEST_CASE("a Function without a jvp fails by name under forward mode, and one with a jvp gives its tangent") {
  const Function cube{.name = "cube",
                      .forward = [](FunctionCtx&, const Inputs& in) { return mul(square(in[0]), in[0]); },
                      .backward = [](FunctionCtx&, const Tensor& g) { return Inputs{g}; }};
  Function cube_jvp = cube;
  cube_jvp.jvp = [](FunctionCtx&, const Inputs& in, const Inputs& t) { return mul(t[0], mul(square(in[0]), 3.0)); };
  Function wrong = cube;
  wrong.jvp = [](FunctionCtx&, const Inputs&, const Inputs& t) { return sum(t[0]); };
  const Tensor x = tensor({1.0, -2.0}, kFloat64), v = tensor({1.0, 0.5}, kFloat64);
  DualLevel level;
  const Tensor d = make_dual(x, v);
  CHECK(error_of([&] { cube.apply({d}); }) ==
        "cube: forward-mode differentiation (a tangent) is not supported yet: the Function has no jvp rule");
  CHECK(unpack_dual(cube_jvp.apply({d})).tangent.to_vector<double>() == std::vector<double>{3.0, 6.0});
  CHECK(error_of([&] { wrong.apply({d}); }).rfind("cube: jvp returned a tangent of shape []", 0) == 0);
  CHECK_FALSE(unpack_dual(cube.apply({x})).tangent.defined());  // no tangent in: no rule needed
}

TEST_CASE("softmax of a 0-dim dual tensor has a zero tangent") {
  DualLevel level;
  const Tensor x = make_dual(tensor(0.7, kFloat64), tensor(2.0, kFloat64));
  CHECK_FALSE(unpack_dual(softmax(x, 0)).tangent.defined());
  CHECK_FALSE(unpack_dual(log_softmax(x, 0)).tangent.defined());
}

TEST_CASE("a tangent is an ordinary tensor: reverse mode differentiates it") {
  // t = d/dx sin(x) v = cos(x) v; d(sum t)/dx = -sin(x) v, d(sum t)/dv = cos(x)
  const Tensor x = tensor({0.3, -1.2, 2.0}, kFloat64).requires_grad_();
  const Tensor v = tensor({1.0, 2.0, -0.5}, kFloat64).requires_grad_();
  Tensor t;
  {
    DualLevel level;
    t = unpack_dual(sin(make_dual(x, v))).tangent;
  }
  const std::vector<Tensor> g = grad({sum(t)}, {x, v});
  CHECK(max_abs_diff(g[0], neg(mul(sin(x.detach()), v.detach()))) < 1e-15);
  CHECK(max_abs_diff(g[1], cos(x.detach())) < 1e-15);
}

TEST_CASE("a plain backward through tangents of the open level is refused by name, and runs once it is closed") {
  const Tensor x = tensor({1.0, -2.0}, kFloat64).requires_grad_();
  const Tensor v = tensor({0.5, 3.0}, kFloat64);
  Tensor y;
  {
    DualLevel level;
    y = sum(square(make_dual(x, v)));
    CHECK(error_of([&] { y.backward(Tensor(), true); }) ==
          "sum: a plain backward pass through the tangents of the open dual level would drop them; pass "
          "create_graph=true (forward-over-reverse: the gradients then carry tangents), or close the level first");
    const Tensor z = mul(x, 2.0);  // no tangent on the way: allowed
    CHECK(grad({sum(z)}, {x})[0].to_vector<double>() == std::vector<double>{2.0, 2.0});
    const Tensor g = make_dual(ones({2}, kFloat64), v);
    CHECK(error_of([&] { grad({z}, {x}, {g}); }).rfind("grad: a plain backward pass through the tangents", 0) == 0);
    // reverse over forward, inside the level: the tangent's own graph carries no tangent
    const Tensor t = unpack_dual(sin(make_dual(x, v))).tangent;
    CHECK(max_abs_diff(grad({sum(t)}, {x})[0], neg(mul(sin(x.detach()), v))) < 1e-15);
  }
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, -4.0});
}

TEST_CASE("with no level open, or an open level and no dual inputs, every result is bitwise the same") {
  Generator gen(11);
  const Tensor x = randn({4, 5}, kFloat64, &gen), w = randn({3, 5}, kFloat64, &gen);
  auto run = [&] {
    Tensor h = softmax(tanh(linear(x, w)), -1);
    return std::vector<Tensor>{h, logsumexp(h, {0}), cumsum(h.t(), 1), amax(h, {1}), norm(h, 3.0)};
  };
  const std::vector<Tensor> before = run();
  std::vector<Tensor> inside;
  {
    DualLevel level;
    inside = run();
    for (const Tensor& t : inside) CHECK_FALSE(unpack_dual(t).tangent.defined());
  }
  const std::vector<Tensor> after = run();
  for (size_t i = 0; i < before.size(); i++) {
    CHECK(equal(before[i], inside[i]));
    CHECK(equal(before[i], after[i]));
    CHECK_FALSE(after[i].impl()->tangent);
  }
}

TEST_CASE("a tangent of another layout than its primal propagates correctly") {
  // the tangent transposed and strided, the primal contiguous: views apply to each its own strides
  Generator gen(12);
  const Tensor x = randn({3, 4}, kFloat64, &gen);
  const Tensor v = randn({4, 3}, kFloat64, &gen).t();
  DualLevel level;
  const Tensor y = make_dual(x, v).view({2, 6}).transpose(0, 1).reshape({-1});
  CHECK(equal(unpack_dual(y).tangent.contiguous(), v.contiguous().view({2, 6}).transpose(0, 1).reshape({-1})));
}
