// The gradient-check table: every op with a backward, checked by ember::gradcheck
// (central differences in float64 against a random non-uniform upstream gradient) in
// each input layout it meets in practice:
//   contiguous  leaves of the listed shapes;
//   strided     leaves of the same shapes that are transposed, strided views (dims
//               reversed, every stride even, offset 1), so gradcheck perturbs them in
//               place through their strides;
//   expanded    leaves whose last non-trivial dim is 1, expanded to the listed shape
//               inside the function (stride-0 inputs; the engine sums the gradient back);
//   broadcast   leaves of shapes that the op itself broadcasts ([3] with [2,3], ...);
//   constant    (ops with several inputs) the first input does not require grad, so the
//               backward must still produce the others' gradients without it.
// Each run checks forward mode too (check_forward_ad: a jvp per element against the same
// central differences): every op of the table has a forward rule.
// A failure names the op, the layout, the leaves' shapes and strides, and prints the report.
// The tests at the end check gradcheck itself: it catches a wrong backward and says where,
// and with check_forward_ad a wrong forward rule too.
#include <catch2/catch.hpp>
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/forward_ad.h"
#include "core/function.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "nn/functional.h"
#include "nn/packing.h"

using namespace ember;
using ember::testing::Domain;
using ember::testing::Fn;
using ember::testing::Inputs;
using ember::testing::draw;
using ember::testing::error_of;
using ember::testing::max_abs_diff;
using ember::testing::strided;

namespace {

// The layouts built from the listed shapes; broadcast runs use their own shapes.
enum class Layout { Contiguous, Strided, Expanded, FirstConstant };

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Strided: return "strided";
    case Layout::Expanded: return "expanded";
    case Layout::FirstConstant: return "first input constant";
  }
  return "?";
}

struct OpCase {
  std::string name;
  Fn f;
  std::vector<Shape> shapes;                   // one per input
  std::vector<std::vector<Shape>> broadcasts;  // shapes the op broadcasts; one run each
  std::vector<Domain> domains = {Domain::Any};  // one per input, or one for all
  std::vector<std::string> names = {};          // default: x, or a, b, c, ...
};

Domain domain_of(const OpCase& c, size_t i) {
  return c.domains.size() == 1 ? c.domains[0] : c.domains.at(i);
}

std::vector<std::string> input_names(const OpCase& c) {
  if (!c.names.empty()) return c.names;
  if (c.shapes.size() == 1) return {"x"};
  std::vector<std::string> n;
  for (size_t i = 0; i < c.shapes.size(); i++) n.push_back(std::string(1, char('a' + i)));
  return n;
}

// A leaf of shape s drawn from the domain, in the strided layout of test_util.h's strided().
Tensor strided_leaf(const Shape& s, Domain d, Generator& gen) {
  return strided(draw(s, d, gen)).detach().requires_grad_();
}

// s with its last dim of size > 1 set to 1 (s itself when there is none).
Shape collapse_last(const Shape& s) {
  Shape r = s;
  for (int64_t d = (int64_t)r.size() - 1; d >= 0; d--)
    if (r[d] > 1) {
      r[d] = 1;
      break;
    }
  return r;
}

std::string describe(const Inputs& xs, const std::vector<std::string>& names) {
  std::ostringstream os;
  for (size_t i = 0; i < xs.size(); i++)
    os << "  " << names[i] << ": shape " << shape_str(xs[i].shape()) << " strides " << shape_str(xs[i].strides())
       << "\n";
  return os.str();
}

// Runs one gradcheck of f on the leaves xs, forward mode included, and checks it passed.
// An op that throws fails this check only, so the rest of the table still runs.
void run_check(const std::string& what, const Fn& f, const Inputs& xs, const std::vector<std::string>& names) {
  INFO(what << "\n" << describe(xs, names));
  GradcheckReport r;
  try {
    r = gradcheck(f, xs, {.check_forward_ad = true}, names);
  } catch (const std::exception& e) {
    FAIL_CHECK("threw: " << e.what());
    return;
  }
  INFO(r.to_string());
  const auto with_grad = std::count_if(xs.begin(), xs.end(), [](const Tensor& x) { return x.requires_grad(); });
  CHECK(r.inputs.size() == (size_t)with_grad);
  CHECK(r.passed);
  for (const InputGradCheck& in : r.inputs)  // forward mode ran: its worst element is one of the input's
    CHECK(in.forward.worst_index.size() == (numel_of(in.shape) > 0 ? in.shape.size() : 0));
  // and one derivative higher: the backward, recorded, differentiated again, and carrying
  // tangents (forward over reverse)
  GradcheckReport rr;
  try {
    rr = gradgradcheck(f, xs, {.check_forward_ad = true}, names);
  } catch (const std::exception& e) {
    FAIL_CHECK("gradgradcheck threw: " << e.what());
    return;
  }
  INFO(rr.to_string());
  CHECK(rr.inputs.size() == (size_t)with_grad + 1);  // and the upstream gradient
  CHECK(rr.passed);
}

void check_op(const OpCase& c) {
  const auto names = input_names(c);
  REQUIRE(names.size() == c.shapes.size());
  for (Layout layout : {Layout::Contiguous, Layout::Strided, Layout::Expanded, Layout::FirstConstant}) {
    if (layout == Layout::FirstConstant && c.shapes.size() < 2) continue;
    Generator gen(20240607);
    Inputs xs;
    Fn f = c.f;
    std::vector<Shape> targets = c.shapes;
    for (size_t i = 0; i < c.shapes.size(); i++) {
      const Shape& s = c.shapes[i];
      const Domain d = domain_of(c, i);
      if (layout == Layout::Strided) {
        Tensor x = strided_leaf(s, d, gen);
        // the layout really is non-contiguous whenever it can be
        if (numel_of(s) > 1) REQUIRE_FALSE(x.is_contiguous());
        xs.push_back(x);
      } else if (layout == Layout::Expanded) {
        xs.push_back(draw(collapse_last(s), d, gen).requires_grad_());
      } else {
        xs.push_back(draw(s, d, gen).requires_grad_(layout != Layout::FirstConstant || i > 0));
      }
    }
    if (layout == Layout::Expanded) {
      bool any = false;
      for (const Shape& s : c.shapes) any = any || collapse_last(s) != s;
      if (!any) continue;
      f = [inner = c.f, targets](const Inputs& in) {
        Inputs e;
        for (size_t i = 0; i < in.size(); i++) e.push_back(in[i].expand(targets[i]));
        return inner(e);
      };
    }
    run_check(c.name + " [" + layout_name(layout) + "]", f, xs, names);
  }
  for (const auto& shapes : c.broadcasts) {
    REQUIRE(shapes.size() == c.shapes.size());
    Generator gen(777);
    Inputs xs;
    std::string label;
    for (size_t i = 0; i < shapes.size(); i++) {
      xs.push_back(draw(shapes[i], domain_of(c, i), gen).requires_grad_());
      label += (i ? " with " : "") + shape_str(shapes[i]);
    }
    run_check(c.name + " [broadcast " + label + "]", c.f, xs, names);
  }
}

void check_ops(const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases) check_op(c);
}

// --- table builders
using F1 = std::function<Tensor(const Tensor&)>;
using F2 = std::function<Tensor(const Tensor&, const Tensor&)>;

OpCase unary(std::string name, F1 f, Shape s, Domain d = Domain::Any) {
  return {std::move(name), [f](const Inputs& in) { return f(in[0]); }, {std::move(s)}, {}, {d}};
}

OpCase binary(std::string name, F2 f, std::vector<Domain> d = {Domain::Any}) {
  return {std::move(name),
          [f](const Inputs& in) { return f(in[0], in[1]); },
          {{2, 3}, {2, 3}},
          {{{3}, {2, 3}}, {{2, 3}, {1, 3}}, {{2, 1, 4}, {3, 1}}},
          std::move(d)};
}

Tensor bools(const std::vector<bool>& v, const Shape& s) { return from_bools(v, s); }
Tensor ids(const std::vector<int64_t>& v, const Shape& s) { return from_vector(v, s); }

}  // namespace

TEST_CASE("binary elementwise ops have correct gradients in every layout and when broadcasting") {
  const Domain any = Domain::Any, pos = Domain::Positive, nz = Domain::AwayFromZero;
  check_ops({
      binary("add", [](const Tensor& a, const Tensor& b) { return add(a, b); }),
      binary("sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }),
      binary("mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }),
      binary("div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, {any, nz}),
      binary("pow (tensor exponent, positive base)", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
             {pos, any}),
      binary("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }),
      binary("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }),
      binary("operator+ - * / composed",
             [](const Tensor& a, const Tensor& b) { return (a + b) * (a - b) / (b * b + 1.0); }),
  });
}

TEST_CASE("ops with a scalar operand have correct gradients in every layout") {
  const Shape s{3, 4};
  const Domain pos = Domain::Positive, nz = Domain::AwayFromZero;
  check_ops({
      unary("add(x, 1.5)", [](const Tensor& x) { return add(x, 1.5); }, s),
      unary("sub(x, 0.7)", [](const Tensor& x) { return sub(x, 0.7); }, s),
      unary("rsub(2, x)", [](const Tensor& x) { return rsub(2.0, x); }, s),
      unary("mul(x, -1.3)", [](const Tensor& x) { return mul(x, -1.3); }, s),
      unary("div(x, 2.5)", [](const Tensor& x) { return div(x, 2.5); }, s),
      unary("rdiv(1.7, x)", [](const Tensor& x) { return rdiv(1.7, x); }, s, nz),
      unary("pow(x, 2.5)", [](const Tensor& x) { return pow(x, 2.5); }, s, pos),
      unary("pow(x, -1.5)", [](const Tensor& x) { return pow(x, -1.5); }, s, pos),
      unary("pow(x, 3) on any sign", [](const Tensor& x) { return pow(x, 3.0); }, s),
      unary("2 - x / 4 + x * 3 (operators)", [](const Tensor& x) { return 2.0 - x / 4.0 + x * 3.0; }, s),
      unary("1.5 / x (operator)", [](const Tensor& x) { return 1.5 / x; }, s, nz),
  });
}

TEST_CASE("unary elementwise ops have correct gradients in every layout") {
  const Shape s{3, 4};
  const Domain pos = Domain::Positive, nz = Domain::AwayFromZero;
  check_ops({
      unary("neg", [](const Tensor& x) { return neg(x); }, s),
      unary("operator- (unary)", [](const Tensor& x) { return -x; }, s),
      unary("exp", [](const Tensor& x) { return exp(x); }, s),
      unary("log", [](const Tensor& x) { return log(x); }, s, pos),
      unary("sqrt", [](const Tensor& x) { return sqrt(x); }, s, pos),
      unary("rsqrt", [](const Tensor& x) { return rsqrt(x); }, s, pos),
      unary("abs", [](const Tensor& x) { return abs(x); }, s, nz),
      unary("tanh", [](const Tensor& x) { return tanh(x); }, s),
      unary("sin", [](const Tensor& x) { return sin(x); }, s),
      unary("cos", [](const Tensor& x) { return cos(x); }, s),
      unary("sigmoid", [](const Tensor& x) { return sigmoid(x); }, s),
      unary("relu", [](const Tensor& x) { return relu(x); }, s, nz),
      unary("gelu (erf form)", [](const Tensor& x) { return gelu(x); }, s),
      unary("gelu (tanh approximation)", [](const Tensor& x) { return gelu(x, true); }, s),
      unary("square", [](const Tensor& x) { return square(x); }, s),
  });
}

TEST_CASE("sum and mean have correct gradients over all dims, given dims, negative dims, with and without keepdim") {
  const Shape s{2, 3, 4};
  check_ops({
      unary("sum(x)", [](const Tensor& x) { return sum(x); }, s),
      unary("sum(x, {}, keepdim)", [](const Tensor& x) { return sum(x, {}, true); }, s),
      unary("sum(x, {1})", [](const Tensor& x) { return sum(x, {1}); }, s),
      unary("sum(x, {0, 2})", [](const Tensor& x) { return sum(x, {0, 2}); }, s),
      unary("sum(x, {-1}, keepdim)", [](const Tensor& x) { return sum(x, {-1}, true); }, s),
      unary("sum(x, {-3, -1})", [](const Tensor& x) { return sum(x, {-3, -1}); }, s),
      unary("sum(x, {1, 2}, keepdim)", [](const Tensor& x) { return sum(x, {1, 2}, true); }, s),
      unary("mean(x)", [](const Tensor& x) { return mean(x); }, s),
      unary("mean(x, {}, keepdim)", [](const Tensor& x) { return mean(x, {}, true); }, s),
      unary("mean(x, {1})", [](const Tensor& x) { return mean(x, {1}); }, s),
      unary("mean(x, {0, 2})", [](const Tensor& x) { return mean(x, {0, 2}); }, s),
      unary("mean(x, {-1}, keepdim)", [](const Tensor& x) { return mean(x, {-1}, true); }, s),
      unary("mean(x, {-2, 0}, keepdim)", [](const Tensor& x) { return mean(x, {-2, 0}, true); }, s),
  });
}

TEST_CASE("amax, amin and max along a dim route the gradient to the extreme element") {
  // normal draws in float64 have no ties; the gaps are far larger than eps
  const Shape s{2, 3, 4};
  check_ops({
      unary("amax(x)", [](const Tensor& x) { return amax(x); }, s),
      unary("amax(x, {1})", [](const Tensor& x) { return amax(x, {1}); }, s),
      unary("amax(x, {-1}, keepdim)", [](const Tensor& x) { return amax(x, {-1}, true); }, s),
      unary("amax(x, {0, 2})", [](const Tensor& x) { return amax(x, {0, 2}); }, s),
      unary("amin(x)", [](const Tensor& x) { return amin(x); }, s),
      unary("amin(x, {1})", [](const Tensor& x) { return amin(x, {1}); }, s),
      unary("amin(x, {-1}, keepdim)", [](const Tensor& x) { return amin(x, {-1}, true); }, s),
      unary("amin(x, {0, 2}, keepdim)", [](const Tensor& x) { return amin(x, {0, 2}, true); }, s),
      unary("max(x)", [](const Tensor& x) { return max(x); }, s),
      unary("max(x, 1).values", [](const Tensor& x) { return max(x, 1).first; }, s),
      unary("max(x, -1, keepdim).values", [](const Tensor& x) { return max(x, -1, true).first; }, s),
      unary("max(x, 0).values", [](const Tensor& x) { return max(x, 0).first; }, s),
  });
}

TEST_CASE("var has correct gradients with correction 0 and 1, with and without keepdim") {
  const Shape s{2, 3, 4};
  check_ops({
      unary("var(x, {-1})", [](const Tensor& x) { return var(x, {-1}); }, s),
      unary("var(x, {-1}, correction 0)", [](const Tensor& x) { return var(x, {-1}, 0); }, s),
      unary("var(x, {1}, correction 1, keepdim)", [](const Tensor& x) { return var(x, {1}, 1, true); }, s),
      unary("var(x, {0, 2}, correction 0, keepdim)", [](const Tensor& x) { return var(x, {0, 2}, 0, true); }, s),
      unary("var(x, {}) (all dims)", [](const Tensor& x) { return var(x, {}); }, s),
  });
}

TEST_CASE("the matrix-structure ops, norms, logsumexp and cumsum have correct gradients in every layout") {
  const Shape s{2, 3, 4};
  check_ops({
      unary("diagonal(x, 1, 1, 2)", [](const Tensor& x) { return x.diagonal(1, 1, 2); }, s),
      unary("diagonal(x, -1, 2, 0)", [](const Tensor& x) { return x.diagonal(-1, 2, 0); }, s),
      unary("diag(v, 1)", [](const Tensor& x) { return diag(x, 1); }, {4}),
      unary("diag(m, -1)", [](const Tensor& x) { return diag(x, -1); }, {4, 3}),
      unary("diag_embed(x)", [](const Tensor& x) { return diag_embed(x); }, {2, 3}),
      unary("diag_embed(x, 2, 0, 1)", [](const Tensor& x) { return diag_embed(x, 2, 0, 1); }, {2, 3}),
      unary("trace(x)", [](const Tensor& x) { return trace(x); }, {3, 4}),
      unary("tril(x, 0)", [](const Tensor& x) { return tril(x); }, s),
      unary("triu(x, -1)", [](const Tensor& x) { return triu(x, -1); }, s),
      {"outer(a, b)", [](const Inputs& in) { return outer(in[0], in[1]); }, {{3}, {4}}},
      unary("norm(x)", [](const Tensor& x) { return norm(x); }, s),
      unary("norm(x, 3, {1})", [](const Tensor& x) { return norm(x, 3, {1}); }, s),
      unary("norm(x, 1.5, {-1}, keepdim)", [](const Tensor& x) { return norm(x, 1.5, {-1}, true); }, s),
      unary("norm(x, 1, {0, 2})", [](const Tensor& x) { return norm(x, 1, {0, 2}); }, s),
      unary("norm(x, inf, {1})", [](const Tensor& x) { return norm(x, INFINITY, {1}); }, s),
      unary("logsumexp(x, {1})", [](const Tensor& x) { return logsumexp(x, {1}); }, s),
      unary("logsumexp(x, {0, 2}, keepdim)", [](const Tensor& x) { return logsumexp(x, {0, 2}, true); }, s),
      unary("cumsum(x, 1)", [](const Tensor& x) { return cumsum(x, 1); }, s),
      unary("cumsum(x, -1)", [](const Tensor& x) { return cumsum(x, -1); }, s),
  });
}

TEST_CASE("matmul has correct gradients for 1-D, 2-D, batched, broadcast and transposed operands") {
  auto mm = [](const Inputs& in) { return matmul(in[0], in[1]); };
  check_ops({
      {"matmul 1-D . 1-D", mm, {{4}, {4}}, {}},
      {"matmul 2-D @ 2-D", mm, {{3, 4}, {4, 5}}, {}},
      {"matmul 1-D @ 2-D", mm, {{4}, {4, 5}}, {}},
      {"matmul 2-D @ 1-D", mm, {{3, 4}, {4}}, {}},
      {"matmul 2-D @ 2-D with a column vector", mm, {{3, 4}, {4, 1}}, {}},
      {"matmul batched 3-D @ 3-D", mm, {{2, 3, 4}, {2, 4, 5}}, {{{3, 4}, {2, 4, 5}}, {{2, 3, 4}, {4, 5}}}},
      {"matmul broadcast batch dims", mm, {{2, 1, 3, 4}, {5, 4, 2}}, {{{1, 3, 4}, {2, 5, 4, 2}}}},
      {"matmul batched 3-D @ 1-D", mm, {{2, 3, 4}, {4}}, {}},
      {"matmul a @ b.mT()", [](const Inputs& in) { return matmul(in[0], in[1].mT()); }, {{3, 4}, {5, 4}}, {}},
      {"matmul a.mT() @ b", [](const Inputs& in) { return matmul(in[0].mT(), in[1]); }, {{4, 3}, {4, 5}}, {}},
      {"matmul a.mT() @ b.mT()", [](const Inputs& in) { return matmul(in[0].mT(), in[1].mT()); },
       {{4, 3}, {5, 4}}, {}},
      {"matmul batched a @ b.mT()", [](const Inputs& in) { return matmul(in[0], in[1].mT()); },
       {{2, 3, 4}, {2, 5, 4}}, {{{2, 3, 4}, {5, 4}}}},
  });
}

TEST_CASE("linear has correct gradients for x, weight and bias, with and without a bias") {
  check_ops({
      {"linear 2-D with bias", [](const Inputs& in) { return linear(in[0], in[1], in[2]); }, {{3, 4}, {5, 4}, {5}}, {}},
      {"linear 3-D with bias", [](const Inputs& in) { return linear(in[0], in[1], in[2]); },
       {{2, 3, 4}, {5, 4}, {5}}, {}},
      {"linear 1-D without bias", [](const Inputs& in) { return linear(in[0], in[1]); }, {{4}, {5, 4}}, {}},
      {"linear 4-D without bias", [](const Inputs& in) { return linear(in[0], in[1]); }, {{2, 2, 3, 4}, {3, 4}}, {}},
  });
}

TEST_CASE("softmax and log_softmax have correct gradients along every dim of a 3-D input") {
  const Shape s{2, 3, 4};
  std::vector<OpCase> cases;
  for (int64_t dim : {0, 1, 2, -1, -2, -3}) {
    const std::string d = std::to_string(dim);
    cases.push_back(unary("softmax(x, " + d + ")", [dim](const Tensor& x) { return softmax(x, dim); }, s));
    cases.push_back(unary("log_softmax(x, " + d + ")", [dim](const Tensor& x) { return log_softmax(x, dim); }, s));
  }
  check_ops(cases);
}

TEST_CASE("masked_fill and where pass the gradient only to the chosen elements, with broadcast masks") {
  const Tensor mask_col = bools({true, false, true}, {3, 1});  // broadcast over [2,3,4]
  Generator gen(11);
  const Tensor mask_full = gt(normal({2, 3, 4}, 0.0, 1.0, kFloat64, &gen), 0.0);
  const Tensor cond = bools({true, false, false, true, false, true, true, false, true, true, false, false}, {3, 4});
  check_ops({
      unary("masked_fill with a [3,1] mask", [mask_col](const Tensor& x) { return masked_fill(x, mask_col, -2.5); },
            {2, 3, 4}),
      unary("masked_fill with a full mask", [mask_full](const Tensor& x) { return masked_fill(x, mask_full, 0.0); },
            {2, 3, 4}),
      {"where(cond [3,4], a, b)",
       [cond](const Inputs& in) { return where(cond, in[0], in[1]); },
       {{2, 3, 4}, {2, 3, 4}},
       {{{2, 1, 4}, {4}}, {{3, 4}, {2, 3, 1}}}},
      unary("where(cond, x, 0.5)", [cond](const Tensor& x) { return where(cond, x, 0.5); }, {2, 3, 4}),
  });
}

TEST_CASE("cat and stack give each input its slice of the gradient") {
  auto cat_along = [](int64_t dim) { return [dim](const Inputs& in) { return cat(in, dim); }; };
  auto stack_along = [](int64_t dim) { return [dim](const Inputs& in) { return stack(in, dim); }; };
  check_ops({
      {"cat dim 0", cat_along(0), {{1, 3}, {2, 3}, {3, 3}}, {}},
      {"cat dim 1", cat_along(1), {{2, 1}, {2, 2}, {2, 3}}, {}},
      {"cat dim -1 of 3-D", cat_along(-1), {{2, 3, 2}, {2, 3, 1}, {2, 3, 3}}, {}},
      {"stack dim 0", stack_along(0), {{2, 3}, {2, 3}, {2, 3}}, {}},
      {"stack dim 1", stack_along(1), {{2, 3}, {2, 3}, {2, 3}}, {}},
      {"stack dim -1", stack_along(-1), {{2, 3}, {2, 3}, {2, 3}}, {}},
      // one input used several times: its slices of the gradient accumulate
      unary("cat of the same input three times", [](const Tensor& x) { return cat({x, x, x}, 1); }, {2, 3}),
      unary("stack of an input and its transpose", [](const Tensor& x) { return stack({x, x.t()}, 0); }, {3, 3}),
  });
}

TEST_CASE("split and chunk pieces each carry their own gradient back") {
  // pieces weighted differently, so a gradient sent to the wrong piece shows
  auto weighted = [](const std::vector<Tensor>& pieces) {
    Tensor total;
    for (size_t k = 0; k < pieces.size(); k++) {
      Tensor term = sum(mul(square(pieces[k]), 0.5 + (double)k));
      total = total.defined() ? add(total, term) : term;
    }
    return total;
  };
  check_ops({
      unary("split(x, 2, 0) into 2+2+1", [weighted](const Tensor& x) { return weighted(split(x, 2, 0)); }, {5, 3}),
      unary("split(x, {1, 3, 1}, 1)",
            [weighted](const Tensor& x) { return weighted(split(x, std::vector<int64_t>{1, 3, 1}, 1)); }, {3, 5}),
      unary("chunk(x, 3, -1) combined elementwise",
            [](const Tensor& x) {
              auto c = chunk(x, 3, -1);
              return add(add(mul(c[0], 1.0), mul(c[1], -2.0)), mul(c[2], 0.5));
            },
            {2, 6}),
      unary("chunk(x, 2, 0) into uneven pieces", [weighted](const Tensor& x) { return weighted(chunk(x, 2, 0)); },
            {3, 4}),
  });
}

TEST_CASE("index_select, gather and embedding_lookup accumulate the gradient of repeated indices") {
  const Tensor rows = ids({2, 0, 2, 3, 2}, {5});
  const Tensor cols = ids({1, 1, 0}, {3});
  const Tensor g1 = ids({0, 3, 3, 1, 0, 2, 2, 2, 1, 1, 3, 0, 0, 0, 3}, {3, 5});
  const Tensor g0 = ids({2, 0, 2, 1, 2, 2, 0, 0}, {2, 4});
  const Tensor tokens = ids({4, 1, 4, 0, 4, 1}, {2, 3});
  check_ops({
      unary("index_select dim 0 with repeats", [rows](const Tensor& x) { return index_select(x, 0, rows); }, {4, 3}),
      unary("index_select dim 1 with repeats", [cols](const Tensor& x) { return index_select(x, 1, cols); }, {4, 3}),
      unary("index_select dim -1 of 3-D", [cols](const Tensor& x) { return index_select(x, -1, cols); }, {2, 2, 3}),
      unary("gather dim 1 with repeats", [g1](const Tensor& x) { return gather(x, 1, g1); }, {3, 4}),
      unary("gather dim 0 with repeats", [g0](const Tensor& x) { return gather(x, 0, g0); }, {3, 4}),
      unary("embedding_lookup with repeated ids", [tokens](const Tensor& w) { return embedding_lookup(w, tokens); },
            {5, 3}),
  });
}

TEST_CASE("dropout with a fixed mask scales the gradient of the kept elements") {
  auto drop = [](const Tensor& x) {
    Generator g(7);  // re-seeded on every evaluation: the same mask each time
    return dropout(x, 0.3, true, &g);
  };
  // the mask is not trivial: it drops some elements and keeps others
  Tensor y = drop(ones({4, 5}, kFloat64));
  const auto v = y.to_vector<double>();
  const auto dropped = std::count(v.begin(), v.end(), 0.0);
  CHECK(dropped > 0);
  CHECK(dropped < (long)v.size());
  check_ops({
      unary("dropout p=0.3", drop, {4, 5}),
      unary("dropout in eval mode is the identity", [](const Tensor& x) { return dropout(x, 0.3, false); }, {4, 5}),
  });
}

TEST_CASE("dropout of packed rows with a fixed mask scales the gradient of the kept elements") {
  // 5 rows kept from a [2, 4] grid
  const Tensor grid_rows = from_vector(std::vector<int64_t>{0, 1, 2, 4, 5}, {5});
  auto drop = [grid_rows](const Tensor& x) {
    Generator g(7);
    return nn::dropout_packed(x, grid_rows, 4, 0.4, true, &g);
  };
  const auto v = drop(ones({5, 6}, kFloat64)).to_vector<double>();
  const auto dropped = std::count(v.begin(), v.end(), 0.0);
  CHECK(dropped > 0);
  CHECK(dropped < (long)v.size());
  check_ops({unary("dropout_packed p=0.4", drop, {5, 6})});
}

TEST_CASE("relu_dropout is dropout(relu(x)) with the same mask, forward and backward, plain and packed") {
  const Tensor grid_rows = from_vector(std::vector<int64_t>{0, 1, 2, 4, 5}, {5});
  auto fused = [grid_rows](const Tensor& x, bool packed) {
    Generator g(9);
    return packed ? nn::relu_dropout_packed(x, grid_rows, 4, 0.35, true, &g) : relu_dropout(x, 0.35, true, &g);
  };
  auto composed = [grid_rows](const Tensor& x, bool packed) {
    Generator g(9);
    return packed ? nn::dropout_packed(relu(x), grid_rows, 4, 0.35, true, &g) : dropout(relu(x), 0.35, true, &g);
  };
  for (bool packed : {false, true}) {
    INFO((packed ? "packed" : "plain"));
    Generator init(3);
    Tensor xv = normal({5, 8}, 0.0, 1.0, kFloat64, &init), u = normal({5, 8}, 0.0, 1.0, kFloat64, &init);
    Tensor a = xv.detach().requires_grad_(), b = xv.detach().requires_grad_();
    Tensor ya = fused(a, packed), yb = composed(b, packed);
    sum(mul(ya, u)).backward();
    sum(mul(yb, u)).backward();
    CHECK(max_abs_diff(ya, yb) == 0.0);
    CHECK(max_abs_diff(a.grad(), b.grad()) == 0.0);
    // the mask is not trivial, and relu zeroes some of what dropout keeps
    const auto v = ya.to_vector<double>();
    CHECK(std::count(v.begin(), v.end(), 0.0) > 10);
    CHECK(std::count_if(v.begin(), v.end(), [](double e) { return e > 0; }) > 5);
  }
  check_ops({
      unary("relu_dropout p=0.35", [&](const Tensor& x) { return fused(x, false); }, {5, 8}),
      unary("relu_dropout_packed p=0.35", [&](const Tensor& x) { return fused(x, true); }, {5, 8}),
      unary("relu_dropout in eval mode is relu", [](const Tensor& x) { return relu_dropout(x, 0.3, false); }, {4, 5}),
  });
  CHECK_THAT(error_of([] { relu_dropout(ones({2}), 1.5); }), Catch::Contains("relu_dropout: probability must be in [0, 1], got 1.5"));
  CHECK_THAT(error_of([] { nn::relu_dropout_packed(ones({2, 3}), zeros({3}, kInt64), 4, 0.1); }),
             Catch::Contains("relu_dropout_packed: expected int64 grid_rows [N] with N = 2"));
}

TEST_CASE("dropout's backward drops what its forward dropped, whatever the generator draws in between") {
  Generator g(11);
  Tensor x = normal({6, 7}, 0.0, 1.0, kFloat64, &g).t().detach().requires_grad_();  // non-contiguous
  Tensor y = dropout(x, 0.4, true, &g);
  Tensor later = dropout(ones({100}), 0.4, true, &g);  // moves the generator on
  Tensor u = normal(y.shape(), 0.0, 1.0, kFloat64, &g);
  sum(mul(y, u)).backward();
  Tensor kept = ne(y, 0.0).to(kFloat64);  // x has no zeros
  CHECK(allclose(x.grad(), mul(mul(u, kept), 1.0 / 0.6), 1e-15, 1e-15));
  CHECK(allclose(y, mul(mul(x.detach(), kept), 1.0 / 0.6), 1e-15, 1e-15));
}

TEST_CASE("view ops pass the gradient back through the inverse view") {
  check_ops({
      unary("view splitting dim 0", [](const Tensor& x) { return x.view({2, 2, 6}); }, {4, 6}),
      unary("view splitting dim 1", [](const Tensor& x) { return x.view({4, 2, 3}); }, {4, 6}),
      unary("reshape merging dims", [](const Tensor& x) { return x.reshape({3, 8}); }, {4, 6}),
      unary("reshape to 1-D", [](const Tensor& x) { return x.reshape({-1}); }, {2, 3, 4}),
      unary("transpose(0, 2)", [](const Tensor& x) { return x.transpose(0, 2); }, {2, 3, 4}),
      unary("transpose(-1, -2)", [](const Tensor& x) { return x.transpose(-1, -2); }, {2, 3, 4}),
      unary("t()", [](const Tensor& x) { return x.t(); }, {3, 4}),
      unary("mT()", [](const Tensor& x) { return x.mT(); }, {2, 3, 4}),
      unary("permute({2, 0, 1})", [](const Tensor& x) { return x.permute({2, 0, 1}); }, {2, 3, 4}),
      unary("narrow(1, 1, 2)", [](const Tensor& x) { return x.narrow(1, 1, 2); }, {2, 4, 3}),
      unary("narrow(-1, -3, 2)", [](const Tensor& x) { return x.narrow(-1, -3, 2); }, {3, 5}),
      unary("slice(1, 0, 6, 2)", [](const Tensor& x) { return x.slice(1, {.start = 0, .end = 6, .step = 2}); }, {3, 6}),
      unary("slice(0, 1, 5, 3)", [](const Tensor& x) { return x.slice(0, {.start = 1, .end = 5, .step = 3}); }, {5, 3}),
      unary("slice(-1, -5, -1, 2)", [](const Tensor& x) { return x.slice(-1, {.start = -5, .end = -1, .step = 2}); }, {2, 6}),
      unary("select(0, 1)", [](const Tensor& x) { return x.select(0, 1); }, {3, 4}),
      unary("select(-1, -2)", [](const Tensor& x) { return x.select(-1, -2); }, {2, 3, 4}),
      unary("unsqueeze(1)", [](const Tensor& x) { return x.unsqueeze(1); }, {3, 4}),
      unary("unsqueeze(-1)", [](const Tensor& x) { return x.unsqueeze(-1); }, {3, 4}),
      unary("squeeze(1)", [](const Tensor& x) { return x.squeeze(1); }, {3, 1, 4}),
      unary("squeeze()", [](const Tensor& x) { return x.squeeze(); }, {1, 3, 1, 4}),
      unary("expand [3,1] to [2,3,4]", [](const Tensor& x) { return x.expand({2, 3, 4}); }, {3, 1}),
      unary("expand with -1", [](const Tensor& x) { return x.expand({2, -1, 5}); }, {1, 3, 1}),
      unary("expand_as", [](const Tensor& x) { return x.expand_as(zeros({4, 3}, kFloat64)); }, {3}),
      unary("flatten()", [](const Tensor& x) { return x.flatten(); }, {2, 3, 4}),
      unary("flatten(1, 2)", [](const Tensor& x) { return x.flatten(1, 2); }, {2, 3, 4}),
      unary("contiguous", [](const Tensor& x) { return x.contiguous(); }, {3, 4}),
      unary("clone", [](const Tensor& x) { return x.clone(); }, {3, 4}),
      unary("to(kFloat64) on float64", [](const Tensor& x) { return x.to(kFloat64); }, {3, 4}),
      unary("views chained, then a nonlinearity",
            [](const Tensor& x) { return tanh(x.transpose(0, 1).slice(0, {.start = 0, .end = 4, .step = 2}).unsqueeze(0).reshape({-1})); },
            {3, 4}),
  });
}

TEST_CASE("to(kFloat64) on a float64 tensor is the identity, the same tensor") {
  // float64 <-> float32 round trips cannot be checked by finite differences in float32
  // precision; the float64 -> float64 conversion is what gradcheck can see.
  Tensor x = normal({3, 4}, 0.0, 1.0, kFloat64).requires_grad_();
  CHECK(x.to(kFloat64).same(x));
}

TEST_CASE("scaled dot-product attention composed of primitives has correct gradients") {
  // q [B,T,D], k and v [B,S,D]; mask [T,S] true where attention is not allowed
  const Tensor mask = bools({false, true, true, true, true,   //
                             false, false, true, false, true,  //
                             false, false, false, false, false},
                            {3, 5});
  auto attention = [mask](const Inputs& in) {
    const Tensor &q = in[0], &k = in[1], &v = in[2];
    Tensor scores = div(matmul(q, k.mT()), std::sqrt((double)q.size(-1)));  // [B,T,S]
    Tensor p = softmax(masked_fill(scores, mask, -1e9), -1);
    return matmul(p, v);  // [B,T,D]
  };
  check_ops({
      {"attention", attention, {{2, 3, 4}, {2, 5, 4}, {2, 5, 4}}, {{{3, 4}, {2, 5, 4}, {5, 4}}}, {Domain::Any},
       {"q", "k", "v"}},
  });
}

// ------------------------------------------------------------------ gradcheck itself
namespace {

// The identity with a deliberately wrong backward: the gradient is scaled by `scale`
// and `bump` is added at the element `at` (row-major index into x's shape).
Tensor bad_identity(const Tensor& x, double scale, int64_t at = -1, double bump = 0.0) {
  Tensor out = x.detach().clone();
  return record("bad_identity", Loc::current(), out, {x}, BackwardFn([scale, at, bump](const Tensor& g) {
                  Tensor gx = mul(g, scale).contiguous();
                  if (at >= 0) gx.data<double>()[at] += bump;
                  return std::vector<Tensor>{gx};
                }));
}

}  // namespace

TEST_CASE("gradcheck passes a correct gradient and fails a wrong one, naming the wrong input") {
  Tensor a = normal({3, 4}, 0.0, 1.0, kFloat64).requires_grad_();
  Tensor b = normal({3, 4}, 0.0, 1.0, kFloat64).requires_grad_();
  auto good = [](const Inputs& in) { return mul(in[0], in[1]); };
  auto bad = [](const Inputs& in) { return mul(in[0], bad_identity(in[1], 2.0)); };

  GradcheckReport ok = gradcheck(good, {a, b}, {}, {"a", "b"});
  INFO(ok.to_string());
  CHECK(ok.passed);

  GradcheckReport r = gradcheck(bad, {a, b}, {}, {"a", "b"});
  INFO(r.to_string());
  CHECK_FALSE(r.passed);
  REQUIRE(r.inputs.size() == 2);
  CHECK(r.inputs[0].name == "a");
  CHECK(r.inputs[0].passed);
  CHECK(r.inputs[1].name == "b");
  CHECK_FALSE(r.inputs[1].passed);
  CHECK(r.inputs[1].shape == Shape{3, 4});
  // the worst element is a real element of b, where the analytic gradient is twice the true one
  REQUIRE(r.inputs[1].worst_index.size() == 2);
  CHECK(r.inputs[1].worst_index[0] >= 0);
  CHECK(r.inputs[1].worst_index[0] < 3);
  CHECK(r.inputs[1].worst_index[1] >= 0);
  CHECK(r.inputs[1].worst_index[1] < 4);
  CHECK(r.inputs[1].analytic == Approx(2 * r.inputs[1].numeric).epsilon(1e-6));
  CHECK(r.inputs[1].max_abs_err > 1e-3);
}

TEST_CASE("gradcheck's worst_index points at the one wrong element, also through a transposed input") {
  auto bumped = [](const Inputs& in) { return tanh(bad_identity(in[0], 1.0, /*at=*/1 * 4 + 2, /*bump=*/0.25)); };
  Tensor contiguous_x = normal({3, 4}, 0.0, 1.0, kFloat64).requires_grad_();
  Tensor transposed_x = normal({4, 3}, 0.0, 1.0, kFloat64).t().detach().requires_grad_();
  REQUIRE_FALSE(transposed_x.is_contiguous());
  for (const Tensor& x : {contiguous_x, transposed_x}) {
    GradcheckReport r = gradcheck(bumped, {x}, {}, {"x"});
    INFO(r.to_string());
    CHECK_FALSE(r.passed);
    REQUIRE(r.inputs.size() == 1);
    CHECK(r.inputs[0].worst_index == Shape{1, 2});
    CHECK(r.inputs[0].analytic - r.inputs[0].numeric == Approx(0.25).epsilon(1e-4));
  }
}

TEST_CASE("gradcheck leaves the inputs' values as they were and their gradients cleared") {
  Tensor x = normal({4, 3}, 0.0, 1.0, kFloat64).t().detach().requires_grad_();
  const auto before = x.to_vector<double>();
  GradcheckReport r = gradcheck([](const Inputs& in) { return exp(in[0]); }, {x});
  CHECK(r.passed);
  CHECK(x.to_vector<double>() == before);
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("a gradcheck report prints readably") {
  Tensor x = normal({2, 5}, 0.0, 1.0, kFloat64).requires_grad_();
  GradcheckReport failed = gradcheck([](const Inputs& in) { return bad_identity(in[0], -1.0); }, {x}, {}, {"weights"});
  const std::string s = failed.to_string();
  CHECK_THAT(s, Catch::Contains("FAILED"));
  CHECK_THAT(s, Catch::Contains("float64"));
  CHECK_THAT(s, Catch::Contains("weights"));
  CHECK_THAT(s, Catch::Contains("[2,5]"));
  CHECK_THAT(s, Catch::Contains("FAIL"));
  std::ostringstream os;
  os << failed;
  CHECK(os.str() == s);

  GradcheckReport passed = gradcheck([](const Inputs& in) { return sigmoid(in[0]); }, {x});
  CHECK_THAT(passed.to_string(), Catch::Contains("PASSED"));
  CHECK_THAT(passed.to_string(), Catch::Contains("input 0"));  // the default name
  CHECK_THAT(passed.to_string(), !Catch::Contains("FAIL"));
}

TEST_CASE("gradcheck rejects float32 inputs, expanded leaves and non-leaves with a clear error") {
  auto f = [](const Inputs& in) { return mul(in[0], 2.0); };
  Tensor x32 = normal({3}, 0.0, 1.0, kFloat32).requires_grad_();
  CHECK_THROWS_AS(gradcheck(f, {x32}), Error);
  CHECK_THROWS_WITH(gradcheck(f, {x32}), Catch::StartsWith("gradcheck:") && Catch::Contains("float32") &&
                                             Catch::Contains("float64"));

  Tensor expanded = normal({3, 1}, 0.0, 1.0, kFloat64).expand({3, 4}).detach().requires_grad_();
  CHECK_THROWS_WITH(gradcheck(f, {expanded}), Catch::StartsWith("gradcheck:") && Catch::Contains("sharing memory"));

  Tensor leaf = normal({3}, 0.0, 1.0, kFloat64).requires_grad_();
  CHECK_THROWS_WITH(gradcheck(f, {mul(leaf, 1.0)}), Catch::StartsWith("gradcheck:") && Catch::Contains("not a leaf"));
}

TEST_CASE("gradcheck fails a derivative it cannot check: a numeric or analytic side that is not finite") {
  // sqrt with a backward 1000 times too large, at a point where x - eps < 0 makes the
  // numeric derivative NaN: the check must fail, not pass on NaN comparisons
  const Function bad_sqrt{.name = "bad_sqrt",
                          .forward = [](FunctionCtx& ctx, const std::vector<Tensor>& in) {
                            Tensor y = sqrt(in[0]);
                            ctx.save_for_backward({y});
                            return y;
                          },
                          .backward = [](FunctionCtx& ctx, const Tensor& g) {
                            return std::vector<Tensor>{div(mul(g, 500.0), ctx.saved_tensors()[0])};
                          }};
  Tensor x = full({2}, 1e-7, kFloat64).requires_grad_();
  auto f = [&](const std::vector<Tensor>& in) { return bad_sqrt.apply({in[0]}); };
  GradcheckReport r = gradcheck(f, {x});
  CHECK_FALSE(r.passed);
  CHECK_FALSE(gradgradcheck(f, {x}).passed);
  // a right backward at the same point fails too: its numeric side is not finite
  CHECK_FALSE(gradcheck([](const std::vector<Tensor>& in) { return sqrt(in[0]); }, {x}).passed);
  // and passes where both sides are finite
  Tensor y = full({2}, 0.5, kFloat64).requires_grad_();
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return sqrt(in[0]); }, {y}).passed);
}

TEST_CASE("gradcheck refuses a step or tolerances that are not positive and finite") {
  Tensor x = full({2}, 0.5, kFloat64).requires_grad_();
  const GradcheckFn f = [](const std::vector<Tensor>& in) { return sqrt(in[0]); };
  CHECK_THAT(error_of([&] { gradcheck(f, {x}, {.eps = 0}); }),
             Catch::Matchers::Equals("gradcheck: eps must be positive and finite, got 0"));
  CHECK_THAT(error_of([&] { gradcheck(f, {x}, {.eps = NAN}); }), Catch::Matchers::StartsWith("gradcheck: eps must be"));
  CHECK_THAT(error_of([&] { gradgradcheck(f, {x}, {.atol = NAN}); }),
             Catch::Matchers::StartsWith("gradgradcheck: atol must be non-negative and finite"));
  CHECK_THAT(error_of([&] { gradcheck(f, {x}, {.rtol = INFINITY}); }),
             Catch::Matchers::StartsWith("gradcheck: rtol must be non-negative and finite"));
}

// ------------------------------------------------------------------ gradcheck's forward mode
namespace {

// x^3 as a Function with a backward of 3 x^2 g times `backward_scale` and a jvp of 3 x^2 v
// times `scale`, plus `bump` times v at the element `at` (row-major index into x's shape)
// when at >= 0: right for scales 1 and no bump.
Function cube_with_jvp(double scale, int64_t at = -1, double bump = 0.0, double backward_scale = 1.0) {
  return Function{.name = "cube",
                  .forward = [](FunctionCtx& ctx, const Inputs& in) {
                    ctx.save_for_backward({in[0]});
                    return mul(square(in[0]), in[0]);
                  },
                  .backward = [backward_scale](FunctionCtx& ctx, const Tensor& g) {
                    return Inputs{mul(g, mul(square(ctx.saved_tensors()[0]), 3.0 * backward_scale))};
                  },
                  .jvp = [scale, at, bump](FunctionCtx&, const Inputs& in, const Inputs& t) {
                    Tensor jv = mul(t[0], mul(square(in[0]), 3.0 * scale));
                    if (at < 0) return jv;
                    Tensor hit = zeros(in[0].shape(), kFloat64);
                    hit.data<double>()[at] = bump;
                    return add(jv, mul(t[0], hit));
                  }};
}

}  // namespace

TEST_CASE("gradcheck with check_forward_ad also checks forward mode, and passes correct rules") {
  Generator gen(31);
  const Tensor a = normal({3, 4}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  const Tensor b = normal({4, 3}, 0.0, 1.0, kFloat64, &gen).t().detach().requires_grad_();  // transposed
  const Tensor w = normal({4}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  auto f = [](const Inputs& in) { return nn::layer_norm(mul(tanh(in[0]), in[1]), in[2], {}); };
  GradcheckReport off = gradcheck(f, {a, b, w}, {}, {"a", "b", "w"});
  GradcheckReport on = gradcheck(f, {a, b, w}, {.check_forward_ad = true}, {"a", "b", "w"});
  INFO(on.to_string());
  CHECK(off.passed);
  CHECK(on.passed);
  CHECK(on.options.check_forward_ad);
  REQUIRE(on.inputs.size() == 3);
  for (size_t i = 0; i < 3; i++) {
    INFO(on.inputs[i].name);
    const ForwardGradCheck& fc = on.inputs[i].forward;
    CHECK(fc.passed);
    CHECK(fc.max_abs_err < 1e-8);
    CHECK(fc.worst_index.size() == on.inputs[i].shape.size());
    CHECK(fc.forward == Approx(fc.numeric).margin(1e-8));
    // the reverse side is the same as without forward mode
    CHECK(on.inputs[i].max_abs_err == off.inputs[i].max_abs_err);
    CHECK(on.inputs[i].worst_index == off.inputs[i].worst_index);
    // without check_forward_ad the forward result is left at its defaults
    CHECK(off.inputs[i].forward.max_abs_err == 0.0);
    CHECK(off.inputs[i].forward.worst_index.empty());
  }
  CHECK_FALSE(dual_level_open());
  CHECK_FALSE(a.impl()->tangent);
}

TEST_CASE("gradcheck's forward mode sees an input the function reaches by another route, as a module's parameter") {
  // f uses the captured w, the same tensor as input 1, not in[1]: the tangent on the input
  // itself reaches it, as the finite differences' in-place perturbation does
  Generator gen(32);
  const Tensor x = normal({2, 3}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  const Tensor w = normal({3, 4}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  GradcheckReport r = gradcheck([w](const Inputs& in) { return sin(matmul(in[0], w)); }, {x, w},
                                {.check_forward_ad = true}, {"x", "w"});
  INFO(r.to_string());
  CHECK(r.passed);
  CHECK(r.inputs[1].forward.passed);
}

TEST_CASE("gradcheck with check_forward_ad catches a wrong jvp, and a wrong backward with a right jvp") {
  Generator gen(33);
  const Tensor x = normal({3, 4}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  const Function twice = cube_with_jvp(2.0);
  GradcheckReport r = gradcheck([&](const Inputs& in) { return twice.apply({in[0]}); }, {x},
                                {.check_forward_ad = true}, {"x"});
  INFO(r.to_string());
  CHECK_FALSE(r.passed);
  REQUIRE(r.inputs.size() == 1);
  CHECK(r.inputs[0].passed);  // the backward is right
  CHECK_FALSE(r.inputs[0].forward.passed);
  CHECK(r.inputs[0].forward.forward == Approx(2 * r.inputs[0].forward.numeric).epsilon(1e-6));
  // a wrong backward with a right forward rule: only the reverse side fails
  const Function wrong_backward = cube_with_jvp(1.0, -1, 0.0, /*backward_scale=*/3.0);
  GradcheckReport rev = gradcheck([&](const Inputs& in) { return wrong_backward.apply({in[0]}); }, {x},
                                  {.check_forward_ad = true}, {"x"});
  INFO(rev.to_string());
  CHECK_FALSE(rev.passed);
  CHECK_FALSE(rev.inputs[0].passed);
  CHECK(rev.inputs[0].forward.passed);
}

TEST_CASE("gradcheck's forward mode points at the one wrong element, also through a transposed input") {
  const Function bumped = cube_with_jvp(1.0, /*at=*/1 * 4 + 2, /*bump=*/0.25);
  Generator gen(34);
  const Tensor contiguous_x = normal({3, 4}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  const Tensor transposed_x = normal({4, 3}, 0.0, 1.0, kFloat64, &gen).t().detach().requires_grad_();
  for (const Tensor& x : {contiguous_x, transposed_x}) {
    GradcheckReport r = gradcheck([&](const Inputs& in) { return bumped.apply({in[0]}); }, {x},
                                  {.check_forward_ad = true}, {"x"});
    INFO(r.to_string());
    CHECK_FALSE(r.passed);
    CHECK(r.inputs[0].passed);
    const ForwardGradCheck& fc = r.inputs[0].forward;
    CHECK_FALSE(fc.passed);
    CHECK(fc.worst_index == Shape{1, 2});
    // the bump, weighted by the upstream gradient there (|u| in [0.5, 1.5))
    CHECK(std::abs(fc.forward - fc.numeric) >= 0.25 * 0.5 - 1e-6);
    CHECK(std::abs(fc.forward - fc.numeric) <= 0.25 * 1.5 + 1e-6);
  }
}

TEST_CASE("gradcheck with check_forward_ad throws, naming the input and the op, when an op has no forward rule") {
  Generator gen(35);
  const Tensor x = normal({2, 3}, 0.0, 1.0, kFloat64, &gen).requires_grad_();
  const auto before = x.to_vector<double>();
  Function no_jvp = cube_with_jvp(1.0);
  no_jvp.jvp = nullptr;
  auto through_function = [&](const Inputs& in) { return exp(no_jvp.apply({in[0]})); };
  CHECK(gradcheck(through_function, {x}).passed);  // reverse mode alone needs no rule
  CHECK(error_of([&] { gradcheck(through_function, {x}, {.check_forward_ad = true}, {"x"}); }) ==
        "gradcheck: checking forward mode (check_forward_ad) for x: cube: forward-mode differentiation (a tangent) "
        "is not supported yet: the Function has no jvp rule");
  CHECK(error_of([&] {
          gradcheck([](const Inputs& in) { return bad_identity(in[0], 1.0); }, {x}, {.check_forward_ad = true});
        }) == "gradcheck: checking forward mode (check_forward_ad) for input 0: bad_identity: forward-mode "
              "differentiation (a tangent) is not supported yet");
  // nothing is left behind: the values, an open level, a tangent on the input
  CHECK(x.to_vector<double>() == before);
  CHECK_FALSE(dual_level_open());
  CHECK_FALSE(x.impl()->tangent);
}

TEST_CASE("check_forward_ad is refused inside an open dual level") {
  const Tensor x = full({2}, 0.5, kFloat64).requires_grad_();
  const GradcheckFn f = [](const Inputs& in) { return sqrt(in[0]); };
  {
    DualLevel level;
    CHECK(error_of([&] { gradcheck(f, {x}, {.check_forward_ad = true}); }) ==
          "gradcheck: check_forward_ad opens dual levels of its own, but one is open already; close it first");
  }
}

TEST_CASE("gradgradcheck with check_forward_ad checks forward over reverse, and catches a backward that drops tangents") {
  const Tensor x = normal({2, 3}, 0.0, 1.0, kFloat64).requires_grad_();
  const GradcheckFn f = [](const Inputs& in) { return mul(exp(in[0]), sin(in[0])); };
  const GradcheckReport r = gradgradcheck(f, {x}, {.check_forward_ad = true}, {"x"});
  INFO(r.to_string());
  CHECK(r.passed);
  CHECK(r.order == 2);
  CHECK(r.inputs.size() == 2);
  CHECK(r.to_string().find("x (forward)") != std::string::npos);
  // a Function whose backward reads a detached copy of its input: right in reverse over
  // reverse's first derivative, but its tangent is lost, so forward over reverse is wrong
  Function lossy{.name = "lossy_square",
                 .forward = [](FunctionCtx& ctx, const Inputs& in) {
                   ctx.save_for_backward({in[0]});
                   return square(in[0]);
                 },
                 .backward = [](FunctionCtx& ctx, const Tensor& g) {
                   return Inputs{mul(g, mul(ctx.saved_tensors()[0].detach(), 2.0))};
                 },
                 .jvp = [](FunctionCtx&, const Inputs& in, const Inputs& t) { return mul(t[0], mul(in[0], 2.0)); }};
  const GradcheckReport bad =
      gradgradcheck([&](const Inputs& in) { return lossy.apply({in[0]}); }, {x}, {.check_forward_ad = true}, {"x"});
  INFO(bad.to_string());
  CHECK_FALSE(bad.inputs[0].forward.passed);
}

TEST_CASE("a gradcheck report with forward mode shows each input's forward row after its own") {
  const Tensor x = normal({2, 5}, 0.0, 1.0, kFloat64).requires_grad_();
  const Function twice = cube_with_jvp(2.0);
  const GradcheckReport failed =
      gradcheck([&](const Inputs& in) { return twice.apply({in[0]}); }, {x}, {.check_forward_ad = true}, {"weights"});
  const std::string s = failed.to_string();
  INFO(s);
  CHECK_THAT(s, Catch::StartsWith("gradcheck FAILED (float64, eps 1e-06, atol 1e-05, rtol 0.001, forward mode too)\n"));
  const auto reverse_row = s.find("\n  weights "), forward_row = s.find("\n  weights (forward) ");
  REQUIRE(reverse_row != std::string::npos);
  REQUIRE(forward_row != std::string::npos);
  CHECK(reverse_row < forward_row);
  CHECK(s.substr(reverse_row, forward_row - reverse_row).find(" ok ") != std::string::npos);
  CHECK(s.substr(forward_row).find(" FAIL ") != std::string::npos);
  CHECK(s.substr(forward_row).find("[2,5]") != std::string::npos);
  // without forward mode, the report is as it was: no forward rows, no note
  const std::string plain = gradcheck([](const Inputs& in) { return sigmoid(in[0]); }, {x}).to_string();
  CHECK_THAT(plain, !Catch::Contains("forward"));
}

TEST_CASE("sin and cos compute the sine and cosine elementwise, in float32 and float64, on views") {
  const Tensor x = from_vector(std::vector<double>{-3.0, -0.5, 0.0, 1e-8, 1.5, 100.0}, {2, 3});
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor v = x.to(dt).t();  // strided
    const std::vector<double> in = v.contiguous().to_vector<double>(), s = sin(v).to_vector<double>(),
                              c = cos(v).to_vector<double>();
    const double tol = dt == kFloat32 ? 1e-6 : 1e-15;
    for (size_t i = 0; i < in.size(); i++) {
      CHECK(std::abs(s[i] - std::sin(in[i])) <= tol);
      CHECK(std::abs(c[i] - std::cos(in[i])) <= tol);
    }
  }
  CHECK_THAT(error_of([] { sin(arange(3)); }), Catch::Matchers::StartsWith("sin:"));
}
