// Misuse as a specification: every error a user can cause throws ember::Error, and the
// message starts with the op's name and says what was expected and what was received,
// with shapes.
#include <catch2/catch.hpp>

#include "test_util.h"

#include <string>

#include "core/ops.h"
#include "core/random.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {


Tensor leaf(const Shape& shape) { return ones(shape).requires_grad_(); }

}  // namespace

TEST_CASE("ember::Error is a std::runtime_error carrying the message") {
  try {
    fail("my_op", "expected ", 3, " got shape ", Shape{2, 4});
    FAIL("fail() returned");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "my_op: expected 3 got shape [2,4]");
  }
}

// ============================================================== shape mismatch in binary ops

TEST_CASE("binary ops name themselves and both shapes when they do not broadcast") {
  const Tensor a = ones({2, 3}), b = ones({4});
  CHECK_THAT(error_of([&] { add(a, b); }), StartsWith("add: shapes [2,3] and [4] cannot be broadcast together"));
  CHECK_THAT(error_of([&] { sub(a, b); }), StartsWith("sub: shapes [2,3] and [4] cannot be broadcast together"));
  CHECK_THAT(error_of([&] { mul(a, b); }), StartsWith("mul: shapes [2,3] and [4] cannot be broadcast together"));
  CHECK_THAT(error_of([&] { div(a, b); }), StartsWith("div: shapes [2,3] and [4] cannot be broadcast together"));
  CHECK_THAT(error_of([&] { pow(a, b); }), StartsWith("pow: shapes [2,3] and [4] cannot be broadcast together"));
  CHECK_THAT(error_of([&] { maximum(a, b); }), StartsWith("maximum: shapes [2,3] and [4]"));
}

TEST_CASE("a broadcast error names the dim and the two sizes that clash") {
  CHECK_THAT(error_of([] { add(ones({2, 3}), ones({4})); }), Contains("(dim 1: 3 vs 4)"));
  CHECK_THAT(error_of([] { mul(ones({5, 2, 1}), ones({3, 7})); }),
             StartsWith("mul: shapes [5,2,1] and [3,7]") && Contains("(dim 1: 2 vs 3)"));
}

TEST_CASE("operators report the op they stand for") {
  const Tensor a = ones({2}), b = ones({3});
  CHECK_THAT(error_of([&] { a + b; }), StartsWith("add: shapes [2] and [3]"));
  CHECK_THAT(error_of([&] { a - b; }), StartsWith("sub: shapes [2] and [3]"));
  CHECK_THAT(error_of([&] { a * b; }), StartsWith("mul: shapes [2] and [3]"));
  CHECK_THAT(error_of([&] { a / b; }), StartsWith("div: shapes [2] and [3]"));
}

TEST_CASE("comparisons report a shape mismatch") {
  const Tensor a = ones({2, 3}), b = ones({2});
  CHECK_THAT(error_of([&] { eq(a, b); }), StartsWith("eq: shapes [2,3] and [2] cannot be broadcast together"));
  CHECK_THAT(error_of([&] { lt(a, b); }), StartsWith("lt: shapes [2,3] and [2]"));
}

TEST_CASE("where reports operands that do not broadcast") {
  const Tensor cond = from_bools({true, false}, {2});
  CHECK_THAT(error_of([&] { where(cond, ones({3}), ones({3})); }),
             StartsWith("where: shapes [2] and [3] cannot be broadcast together"));
  CHECK_THAT(error_of([&] { where(from_bools({true, false, true}, {3}), ones({3}), ones({2, 2})); }),
             StartsWith("where: shapes [3] and [2,2] cannot be broadcast together"));
}

TEST_CASE("masked_fill reports a mask that does not broadcast to the input") {
  CHECK_THAT(error_of([] { masked_fill(ones({2, 3}), zeros({4}, kBool), 0.0); }),
             StartsWith("masked_fill: shapes [2,3] and [4] cannot be broadcast together"));
}

TEST_CASE("masked_fill reports a mask that would enlarge the input") {
  CHECK_THAT(error_of([] { masked_fill(ones({3}), zeros({2, 3}, kBool), 0.0); }),
             StartsWith("masked_fill: a mask of shape [2,3] cannot be broadcast to the input's shape [3]"));
}

TEST_CASE("copy_ reports a source that does not fit the destination") {
  CHECK_THAT(error_of([] { zeros({3}).copy_(ones({2, 3})); }),
             StartsWith("copy_: cannot copy a tensor of shape [2,3] into shape [3]"));
}

// ============================================================== matmul

TEST_CASE("matmul reports inner dims that differ") {
  CHECK_THAT(error_of([] { matmul(ones({2, 3}), ones({4, 5})); }),
             StartsWith("matmul: shapes [2,3] and [4,5] cannot be multiplied") && Contains("3 != 4"));
}

TEST_CASE("matmul reports mismatched vectors and batches") {
  CHECK_THAT(error_of([] { matmul(ones({3}), ones({4})); }), StartsWith("matmul: shapes [3] and [4] cannot be multiplied"));
  CHECK_THAT(error_of([] { matmul(ones({2, 3}), ones({2})); }),
             StartsWith("matmul: shapes [2,3] and [2] cannot be multiplied"));
  CHECK_THAT(error_of([] { matmul(ones({2, 3, 4}), ones({5, 4, 6})); }),
             StartsWith("matmul: shapes [2,3,4] and [5,4,6] cannot be multiplied") && Contains("batch dims [2] and [5]"));
}

TEST_CASE("matmul rejects zero-dim operands") {
  CHECK_THAT(error_of([] { matmul(scalar_tensor(2), ones({2})); }),
             StartsWith("matmul: both operands need at least 1 dim, got shapes [] and [2]"));
}

TEST_CASE("matmul rejects integer operands") {
  CHECK_THAT(error_of([] { matmul(ones({2, 2}, kInt64), ones({2, 2}, kInt64)); }),
             StartsWith("matmul: expected a float32 or float64 tensor, got int64"));
}

// ============================================================== bad dims and indices

TEST_CASE("an out-of-range dim names the op and the valid range") {
  const Tensor a = ones({2, 3});
  CHECK_THAT(error_of([&] { a.transpose(0, 2); }),
             StartsWith("transpose: dim 2 is out of range for a tensor of 2 dims") && Contains("[-2, 1]"));
  CHECK_THAT(error_of([&] { a.transpose(-3, 0); }), StartsWith("transpose: dim -3 is out of range"));
  CHECK_THAT(error_of([&] { sum(a, {3}); }), StartsWith("sum: dim 3 is out of range for a tensor of 2 dims"));
  CHECK_THAT(error_of([&] { mean(a, {-3}); }), StartsWith("mean: dim -3 is out of range"));
  CHECK_THAT(error_of([&] { softmax(a, 2); }), StartsWith("softmax: dim 2 is out of range for a tensor of 2 dims"));
  CHECK_THAT(error_of([&] { log_softmax(a, -3); }), StartsWith("log_softmax: dim -3 is out of range"));
  CHECK_THAT(error_of([&] { a.select(2, 0); }), StartsWith("select: dim 2 is out of range"));
  CHECK_THAT(error_of([&] { a.narrow(5, 0, 1); }), StartsWith("narrow: dim 5 is out of range"));
  CHECK_THAT(error_of([&] { cat({a, a}, 2); }), StartsWith("cat: dim 2 is out of range for a tensor of 2 dims"));
  CHECK_THAT(error_of([&] { a.permute({0, 2}); }), StartsWith("permute: dim 2 is out of range"));
  CHECK_THAT(error_of([&] { a.size(2); }), StartsWith("Tensor::size: dim 2 is out of range"));
}

TEST_CASE("unsqueeze accepts one dim past the end and no further") {
  const Tensor a = ones({2, 3});
  CHECK(a.unsqueeze(2).shape() == Shape{2, 3, 1});
  CHECK(a.unsqueeze(-3).shape() == Shape{1, 2, 3});
  CHECK_THAT(error_of([&] { a.unsqueeze(3); }), StartsWith("unsqueeze: dim 3 is out of range") && Contains("[-3, 2]"));
  CHECK_THAT(error_of([&] { a.unsqueeze(-4); }), StartsWith("unsqueeze: dim -4 is out of range"));
}

TEST_CASE("a repeated dim is rejected by reductions and permute") {
  const Tensor a = ones({2, 3});
  CHECK_THAT(error_of([&] { sum(a, {1, -1}); }), StartsWith("sum: dim -1 appears more than once in [1,-1]"));
  CHECK_THAT(error_of([&] { a.permute({1, 1}); }), StartsWith("permute: dims [1,1] repeat dim 1"));
}

TEST_CASE("select and narrow report indices outside the dim") {
  const Tensor a = ones({2, 3});
  CHECK_THAT(error_of([&] { a.select(1, 3); }),
             StartsWith("select: index 3 is out of range for dim 1 of size 3") && Contains("(shape [2,3])"));
  CHECK_THAT(error_of([&] { a.select(0, -3); }), StartsWith("select: index -3 is out of range for dim 0 of size 2"));
  CHECK_THAT(error_of([&] { a.narrow(1, 2, 2); }),
             StartsWith("narrow: start 2 and length 2 are out of range for dim 1 of size 3") && Contains("[2,3]"));
}

TEST_CASE("at reports a wrong number of indices or one out of range") {
  const Tensor a = ones({2, 3});
  CHECK_THAT(error_of([&] { a.at({1}); }), StartsWith("at: expected 2 indices for shape [2,3], got 1"));
  CHECK_THAT(error_of([&] { a.at({0, 3}); }), StartsWith("at: index 3 is out of range for dim 1 of shape [2,3]"));
}

TEST_CASE("slice rejects a step that is not positive") {
  CHECK_THAT(error_of([] { ones({4}).slice(0, {.start = 0, .end = 4, .step = 0}); }), StartsWith("slice: step must be positive, got 0"));
}

TEST_CASE("t and mT report tensors of the wrong rank") {
  CHECK_THAT(error_of([] { ones({2, 2, 2}).t(); }),
             StartsWith("t: expects a tensor with at most 2 dims, got shape [2,2,2]"));
  CHECK_THAT(error_of([] { ones({2}).mT(); }), StartsWith("mT: expects a tensor with at least 2 dims, got shape [2]"));
}

// ============================================================== views and reshapes

TEST_CASE("view of a non-contiguous tensor says to use reshape") {
  const Tensor t = ones({2, 3}).t();
  CHECK_THAT(error_of([&] { t.view({6}); }),
             StartsWith("view: cannot view a tensor of shape [3,2] and strides [1,3] as shape [6] without a copy") &&
                 Contains("use reshape()"));
  CHECK(t.reshape({6}).shape() == Shape{6});  // the advice works
}

TEST_CASE("view and reshape report a shape with the wrong number of elements") {
  const Tensor a = ones({2, 3});
  CHECK_THAT(error_of([&] { a.view({4}); }), StartsWith("view: shape [4] is invalid for an input of shape [2,3] (6 elements)"));
  CHECK_THAT(error_of([&] { a.reshape({4, -1}); }),
             StartsWith("reshape: shape [4,-1] is invalid for an input of shape [2,3] (6 elements)"));
  CHECK_THAT(error_of([&] { a.reshape({-1, -1}); }), StartsWith("reshape: only one dimension can be -1, got [-1,-1]"));
  CHECK_THAT(error_of([&] { a.view({-2, 3}); }), StartsWith("view: invalid size -2 in shape [-2,3]"));
}

TEST_CASE("expand reports a dim that is neither equal nor 1") {
  CHECK_THAT(error_of([] { ones({2, 3}).expand({4, 3}); }),
             StartsWith("expand: cannot expand shape [2,3] to [4,3] (dim 0: 2 is not 1)"));
  CHECK_THAT(error_of([] { ones({2, 3}).expand({3}); }),
             StartsWith("expand: the target shape [3] has fewer dims than the tensor's shape [2,3]"));
}

TEST_CASE("flatten reports a start after its end") {
  CHECK_THAT(error_of([] { ones({2, 3, 4}).flatten(2, 1); }), StartsWith("flatten: start_dim 2 must not come after end_dim 1"));
}

// ============================================================== dtypes

TEST_CASE("binary ops reject operands of different dtypes, naming both") {
  CHECK_THAT(error_of([] { add(ones({2}), ones({2}, kFloat64)); }),
             StartsWith("add: expected both operands to have the same dtype, got float32 [2] and float64 [2]") &&
                 Contains(".to()"));
  CHECK_THAT(error_of([] { mul(ones({2}, kInt64), ones({3})); }),
             StartsWith("mul: expected both operands to have the same dtype, got int64 [2] and float32 [3]"));
  CHECK_THAT(error_of([] { eq(ones({2}, kInt64), ones({2})); }), StartsWith("eq: expected both operands to have the same dtype"));
}

TEST_CASE("masked_fill rejects a mask that is not bool") {
  CHECK_THAT(error_of([] { masked_fill(ones({2}), ones({2}), 0.0); }),
             StartsWith("masked_fill: expected a bool mask, got float32 of shape [2]"));
}

TEST_CASE("where rejects a condition that is not bool") {
  CHECK_THAT(error_of([] { where(ones({2}), ones({2}), ones({2})); }),
             StartsWith("where: expected a bool condition, got float32 of shape [2]"));
}

TEST_CASE("index ops reject an index that is not int64") {
  CHECK_THAT(error_of([] { index_select(ones({3, 2}), 0, zeros({2})); }),
             StartsWith("index_select: expected an int64 index, got float32 of shape [2]"));
  CHECK_THAT(error_of([] { gather(ones({3, 2}), 1, zeros({3, 1})); }),
             StartsWith("gather: expected an int64 index, got float32 of shape [3,1]"));
  CHECK_THAT(error_of([] { embedding_lookup(ones({5, 2}), zeros({4})); }),
             StartsWith("embedding_lookup: expected an int64 index, got float32 of shape [4]"));
}

TEST_CASE("float-only ops reject integer tensors") {
  const Tensor i = arange(3);
  CHECK_THAT(error_of([&] { exp(i); }), StartsWith("exp: expected a float32 or float64 tensor, got int64 of shape [3]"));
  CHECK_THAT(error_of([&] { mean(i); }), StartsWith("mean: expected a float32 or float64 tensor, got int64"));
  CHECK_THAT(error_of([&] { div(i, i); }), StartsWith("div: expected a float32 or float64 tensor, got int64"));
  CHECK_THAT(error_of([&] { softmax(i, 0); }), StartsWith("softmax: expected a float32 or float64 tensor, got int64"));
}

TEST_CASE("logical ops reject tensors that are not bool") {
  CHECK_THAT(error_of([] { logical_not(ones({2})); }), StartsWith("logical_not: expected a bool tensor, got float32 of shape [2]"));
  CHECK_THAT(error_of([] { logical_and(zeros({2}, kBool), ones({2}, kInt64)); }),
             StartsWith("logical_and: expected a bool tensor, got int64"));
}

TEST_CASE("data<T>() rejects a type other than the tensor's dtype") {
  CHECK_THAT(error_of([] { ones({2}).data<double>(); }), StartsWith("Tensor::data: requested float64 but the tensor is float32"));
}

// ============================================================== autograd misuse

TEST_CASE("backward on a non-scalar without a gradient asks for one") {
  const Tensor x = leaf({2, 2});
  const Tensor y = mul(x, 2.0);
  CHECK_THAT(error_of([&] { y.backward(); }),
             StartsWith("backward: grad can be implicitly created only for scalar outputs; got a tensor of shape [2,2]"));
}

TEST_CASE("backward twice through a freed graph mentions retain_graph") {
  const Tensor x = leaf({3});
  const Tensor y = sum(mul(x, x));
  y.backward();
  CHECK_THAT(error_of([&] { y.backward(); }),
             StartsWith("backward: trying to backward through the graph a second time") && Contains("retain_graph"));
}

TEST_CASE("backward twice works when the first one retains the graph") {
  const Tensor x = leaf({3});
  const Tensor y = sum(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{4, 4, 4});  // 2x, twice
}

TEST_CASE("backward reports a gradient of the wrong shape or dtype") {
  const Tensor x = leaf({2, 3});
  const Tensor y = mul(x, 3.0);
  CHECK_THAT(error_of([&] { y.backward(ones({3, 2})); }),
             StartsWith("backward: expected a gradient of shape [2,3] and dtype float32, got shape [3,2] and dtype float32"));
  CHECK_THAT(error_of([&] { y.backward(ones({2, 3}, kFloat64)); }),
             StartsWith("backward: expected a gradient of shape [2,3] and dtype float32, got shape [2,3] and dtype float64"));
}

TEST_CASE("backward on a tensor that does not require grad says so") {
  CHECK_THAT(error_of([] { sum(ones({2})).backward(); }),
             StartsWith("backward: the tensor does not require grad and has no grad_fn (shape [])"));
}

TEST_CASE("requires_grad_ is only for float tensors") {
  CHECK_THAT(error_of([] { ones({2}, kInt64).requires_grad_(); }),
             StartsWith("requires_grad_: only float32 and float64 tensors can require gradients, got int64"));
  CHECK_THAT(error_of([] { ones({2}, kBool).requires_grad_(); }), Contains("got bool"));
  Tensor i = ones({2}, kInt64);
  i.requires_grad_(false);  // turning it off is always fine
  CHECK_FALSE(i.requires_grad());
}

TEST_CASE("requires_grad_ is only for leaves") {
  Tensor y = mul(leaf({2}), 2.0);
  CHECK_THAT(error_of([&] { y.requires_grad_(); }), StartsWith("requires_grad_: can only be set on leaf tensors") &&
                                                      Contains("detach()"));
}

TEST_CASE("set_grad reports a gradient of the wrong shape") {
  Tensor x = leaf({2});
  CHECK_THAT(error_of([&] { x.set_grad(ones({3})); }),
             StartsWith("set_grad: expected a gradient of shape [2] and dtype float32, got shape [3] and dtype float32"));
}

// ============================================================== indexing out of range

TEST_CASE("index_select reports an index outside the dim") {
  const Tensor a = ones({3, 2});
  const Tensor idx = from_vector(std::vector<int64_t>{0, 3}, {2});
  CHECK_THAT(error_of([&] { index_select(a, 0, idx); }),
             StartsWith("index_select: index 3 is out of range for dim 0 of size 3 (input shape [3,2])"));
  const Tensor neg = from_vector(std::vector<int64_t>{-1}, {1});
  CHECK_THAT(error_of([&] { index_select(a, 1, neg); }),
             StartsWith("index_select: index -1 is out of range for dim 1 of size 2"));
}

TEST_CASE("index_select rejects an index of more than one dim") {
  CHECK_THAT(error_of([] { index_select(ones({3}), 0, zeros({1, 1}, kInt64)); }),
             StartsWith("index_select: expected a 1-D index, got shape [1,1]"));
}

TEST_CASE("gather reports an index outside the dim") {
  const Tensor a = ones({2, 3});
  const Tensor idx = from_vector(std::vector<int64_t>{0, 1, 2, 5}, {2, 2});
  CHECK_THAT(error_of([&] { gather(a, 1, idx); }),
             StartsWith("gather: index 5 is out of range for dim 1 of size 3 (input shape [2,3])"));
}

TEST_CASE("gather reports an index whose shape does not match the input") {
  CHECK_THAT(error_of([] { gather(ones({2, 3}), 1, zeros({3, 1}, kInt64)); }),
             StartsWith("gather: expected an index with the input's shape [2,3] except in dim 1, got shape [3,1]"));
}

TEST_CASE("embedding_lookup reports an id outside the vocabulary") {
  const Tensor weight = ones({5, 3});
  const Tensor ids = from_vector(std::vector<int64_t>{1, 4, 7, 0}, {2, 2});
  CHECK_THAT(error_of([&] { embedding_lookup(weight, ids); }),
             StartsWith("embedding_lookup: index 7 is out of range for dim 0 of size 5") && Contains("[5,3]"));
}

TEST_CASE("embedding_lookup requires a 2-D weight") {
  CHECK_THAT(error_of([] { embedding_lookup(ones({5}), zeros({2}, kInt64)); }),
             StartsWith("embedding_lookup: expected a 2-D weight [V, E], got shape [5]"));
}

// ============================================================== joining and splitting

TEST_CASE("cat reports tensors whose other dims differ") {
  CHECK_THAT(error_of([] { cat({ones({2, 3}), ones({2, 4})}, 0); }),
             StartsWith("cat: sizes must match except in dim 0: tensor 0 has shape [2,3] but tensor 1 has shape [2,4]"));
  CHECK_THAT(error_of([] { cat({ones({2, 3}), ones({2, 3}), ones({3})}, 1); }),
             StartsWith("cat: sizes must match except in dim 1") && Contains("tensor 2 has shape [3]"));
}

TEST_CASE("cat reports tensors of different dtypes and an empty list") {
  CHECK_THAT(error_of([] { cat({ones({2}), ones({2}, kInt64)}); }),
             StartsWith("cat: expected all tensors to have dtype float32, but tensor 1 is int64"));
  CHECK_THAT(error_of([] { cat({}); }), StartsWith("cat: expected a non-empty list of tensors"));
  CHECK_THAT(error_of([] { cat({scalar_tensor(1), scalar_tensor(2)}); }),
             StartsWith("cat: zero-dim tensors cannot be concatenated; use stack"));
}

TEST_CASE("stack reports tensors of different shapes") {
  CHECK_THAT(error_of([] { stack({ones({2, 3}), ones({2, 3}), ones({3, 2})}); }),
             StartsWith("stack: expected all tensors to have shape [2,3], but tensor 2 has shape [3,2]"));
  CHECK_THAT(error_of([] { stack({ones({2}), ones({2})}, 2); }), StartsWith("stack: dim 2 is out of range"));
}

TEST_CASE("split reports sizes that do not add up to the dim") {
  CHECK_THAT(error_of([] { split(ones({5, 2}), std::vector<int64_t>{2, 2}, 0); }),
             StartsWith("split: sizes [2,2] add up to 4 but dim 0 of shape [5,2] has size 5"));
  CHECK_THAT(error_of([] { split(ones({5}), std::vector<int64_t>{3, 3}); }), StartsWith("split: sizes [3,3] add up to 6"));
  CHECK_THAT(error_of([] { split(ones({4}), std::vector<int64_t>{5, -1}); }),
             StartsWith("split: sizes must be non-negative, got [5,-1]"));
  CHECK_THAT(error_of([] { split(ones({4}), 0); }), StartsWith("split: split_size must be positive, got 0"));
  CHECK_THAT(error_of([] { chunk(ones({4}), 0); }), StartsWith("chunk: chunks must be positive, got 0"));
}

// ============================================================== creation and access

TEST_CASE("from_vector reports a value count that does not fit the shape") {
  CHECK_THAT(error_of([] { from_vector(std::vector<float>{1, 2, 3}, {2, 2}); }),
             StartsWith("from_vector: shape [2,2] needs 4 values, got 3"));
  CHECK_THAT(error_of([] { from_vector(std::vector<double>{1, 2, 3, 4, 5}, {2, 2}); }),
             StartsWith("from_vector: shape [2,2] needs 4 values, got 5"));
  CHECK_THAT(error_of([] { from_vector(std::vector<int64_t>{}, {1}); }), StartsWith("from_vector: shape [1] needs 1 values, got 0"));
  CHECK_THAT(error_of([] { from_vector(std::vector<double>{1}, {2}, kFloat32); }),
             StartsWith("from_vector: shape [2] needs 2 values, got 1"));
  CHECK_THAT(error_of([] { from_bools({true}, {3}); }), StartsWith("from_bools: shape [3] needs 3 values, got 1"));
}

TEST_CASE("from_vector rejects negative sizes") {
  CHECK_THAT(error_of([] { from_vector(std::vector<float>{}, {2, -1}); }),
             StartsWith("from_vector: sizes must be non-negative, got [2,-1]"));
}

TEST_CASE("item reports a tensor of more than one element") {
  CHECK_THAT(error_of([] { ones({2, 3}).item(); }), StartsWith("item: expected a tensor with one element, got shape [2,3]"));
  CHECK_THAT(error_of([] { zeros({0}).item(); }), StartsWith("item: expected a tensor with one element, got shape [0]"));
  CHECK_THAT(error_of([] { Tensor().item(); }), StartsWith("item: the tensor is undefined"));
}

TEST_CASE("arange rejects a zero step and randint an empty range") {
  CHECK_THAT(error_of([] { arange(0, 5, 0); }), StartsWith("arange: step must be nonzero"));
  CHECK_THAT(error_of([] { randint(3, 3, {2}); }), StartsWith("randint: expected low < high, got low 3 and high 3"));
}

TEST_CASE("random float tensors reject integer dtypes") {
  Generator g(0);
  CHECK_THAT(error_of([&] { randn({2}, kInt64, &g); }), StartsWith("randn: expected a float dtype, got int64"));
  CHECK_THAT(error_of([&] { rand({2}, kBool, &g); }), StartsWith("rand: expected a float dtype, got bool"));
}

TEST_CASE("Generator::set_state reports a state of the wrong length") {
  Generator g(1);
  CHECK_THAT(error_of([&] { g.set_state({1, 2, 3}); }),
             StartsWith("Generator::set_state: expected a state of 2 integers, got 3"));
  CHECK(g.get_state() == std::vector<uint64_t>{1, 0});  // unchanged
}

TEST_CASE("dropout rejects a probability outside 0..1") {
  CHECK_THAT(error_of([] { dropout(ones({2}), 1.5); }), StartsWith("dropout: probability must be in [0, 1], got 1.5"));
  CHECK_THAT(error_of([] { dropout(ones({2}), -0.1); }), StartsWith("dropout: probability must be in [0, 1], got -0.1"));
}

TEST_CASE("linear names the input, weight and bias shapes it expected and got") {
  CHECK(error_of([] { linear(ones({2, 3}), ones({5, 4})); }) ==
        "linear: expected input [..., 4] for weight [5,4], got shape [2,3]");
  CHECK(error_of([] { linear(ones({2, 4}), ones({5, 4}), ones({4})); }) ==
        "linear: expected bias [5] for weight [5,4], got shape [4]");
  CHECK_THAT(error_of([] { linear(ones({2, 4}), ones({20})); }), StartsWith("linear: expected weight [out, in], got shape [20]"));
  CHECK_THAT(error_of([] { linear(ones({2, 4}), ones({5, 4}, kFloat64)); }), StartsWith("linear: "));
}
