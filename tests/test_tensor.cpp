// Tensor basics as a specification: creation and dtypes, views that share storage (with
// exact shapes, strides and offsets), copies, broadcasting, dtype conversion, seeded
// random tensors, printing, and element access.
#include <catch2/catch.hpp>

#include <array>
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "core/kernels/gemm.h"
#include "core/ops.h"
#include "core/random.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;
using ember::testing::error_of;

namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

Tensor floats(std::vector<float> v, const Shape& shape) { return from_vector(v, shape); }

// 0, 1, ..., n-1 as float32 with the given shape.
Tensor iota(const Shape& shape) { return arange(0.0, (double)numel_of(shape), 1.0, kFloat32).view(shape); }

double sample_mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / (double)v.size();
}

double sample_std(const std::vector<double>& v) {
  const double m = sample_mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (double)(v.size() - 1));
}

size_t count_of(const std::string& s, char c) { return (size_t)std::count(s.begin(), s.end(), c); }

}  // namespace

// ============================================================== dtypes

TEST_CASE("dtype_size gives the bytes per element of each dtype") {
  CHECK(dtype_size(kFloat32) == 4);
  CHECK(dtype_size(kFloat64) == 8);
  CHECK(dtype_size(kInt64) == 8);
  CHECK(dtype_size(kBool) == 1);
}

TEST_CASE("dtype_name gives the PyTorch name of each dtype") {
  CHECK(std::string(dtype_name(kFloat32)) == "float32");
  CHECK(std::string(dtype_name(kFloat64)) == "float64");
  CHECK(std::string(dtype_name(kInt64)) == "int64");
  CHECK(std::string(dtype_name(kBool)) == "bool");
}

TEST_CASE("only float32 and float64 are floating dtypes") {
  CHECK(is_floating(kFloat32));
  CHECK(is_floating(kFloat64));
  CHECK_FALSE(is_floating(kInt64));
  CHECK_FALSE(is_floating(kBool));
}

// ============================================================== creation

TEST_CASE("zeros makes a contiguous float32 tensor of zeros by default") {
  Tensor t = zeros({2, 3});
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.strides() == Shape{3, 1});
  CHECK(t.offset() == 0);
  CHECK(t.dim() == 2);
  CHECK(t.numel() == 6);
  CHECK(t.dtype() == kFloat32);
  CHECK(t.is_contiguous());
  CHECK(vals(t) == std::vector<double>(6, 0.0));
  CHECK(t.storage()->nbytes == 6 * sizeof(float));
}

TEST_CASE("zeros, ones and full honour the requested dtype") {
  CHECK(zeros({2}, kInt64).dtype() == kInt64);
  CHECK(ones({3}, kFloat64).dtype() == kFloat64);
  CHECK(vals(ones({3}, kFloat64)) == std::vector<double>{1, 1, 1});
  CHECK(vals(ones({2}, kInt64)) == std::vector<double>{1, 1});
  CHECK(ones({2}, kBool).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1});
  CHECK(zeros({2}, kBool).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0});
}

TEST_CASE("full fills every element with the value, converted to the dtype") {
  CHECK(vals(full({2, 2}, 7.5)) == std::vector<double>(4, 7.5));
  CHECK(full({2, 2}, 7.5).shape() == Shape{2, 2});
  CHECK(vals(full({3}, -2.25, kFloat64)) == std::vector<double>(3, -2.25));
  CHECK(full({2}, 3.9, kInt64).to_vector<int64_t>() == std::vector<int64_t>{3, 3});
  CHECK(full({2}, 0.5, kBool).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1});
}

TEST_CASE("tensors with a zero-sized dim have no elements") {
  Tensor t = zeros({3, 0, 2});
  CHECK(t.numel() == 0);
  CHECK(t.shape() == Shape{3, 0, 2});
  CHECK(t.to_vector<float>().empty());
}

TEST_CASE("arange(end) counts from 0 as int64 by default") {
  Tensor t = arange(5);
  CHECK(t.dtype() == kInt64);
  CHECK(t.shape() == Shape{5});
  CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("arange(start, end, step) stops before end") {
  CHECK(arange(2, 9, 3).to_vector<int64_t>() == std::vector<int64_t>{2, 5, 8});
  CHECK(arange(2, 8, 3).to_vector<int64_t>() == std::vector<int64_t>{2, 5});
}

TEST_CASE("arange makes float tensors with fractional steps") {
  Tensor f = arange(0.0, 1.0, 0.25, kFloat32);
  CHECK(f.dtype() == kFloat32);
  CHECK(vals(f) == std::vector<double>{0.0, 0.25, 0.5, 0.75});
  Tensor d = arange(-1.0, 0.5, 0.5, kFloat64);
  CHECK(d.dtype() == kFloat64);
  CHECK(vals(d) == std::vector<double>{-1.0, -0.5, 0.0});
  CHECK(arange(4, kFloat64).dtype() == kFloat64);
  CHECK(vals(arange(4, kFloat64)) == std::vector<double>{0, 1, 2, 3});
  // without a dtype, a bound or step that is not whole makes float32, as torch.arange
  Tensor tenths = arange(0, 1, 0.1);
  CHECK(tenths.dtype() == kFloat32);
  CHECK(tenths.numel() == 10);
  CHECK(tenths.to_vector<float>()[3] == 0.3f);
  CHECK(arange(0.5, 3).dtype() == kFloat32);
  CHECK(vals(arange(0.5, 3)) == std::vector<double>{0.5, 1.5, 2.5});
  CHECK(arange(0.0, 3.0).dtype() == kInt64);  // whole numbers: int64
}

TEST_CASE("arange counts down with a negative step") {
  CHECK(arange(5, 0, -1).to_vector<int64_t>() == std::vector<int64_t>{5, 4, 3, 2, 1});
  CHECK(vals(arange(1.0, 0.0, -0.25, kFloat64)) == std::vector<double>{1.0, 0.75, 0.5, 0.25});
}

TEST_CASE("arange is empty when the step points away from end") {
  CHECK(arange(3, 0).shape() == Shape{0});
  CHECK(arange(0, 3, -1).shape() == Shape{0});
  CHECK(arange(0).shape() == Shape{0});
}

TEST_CASE("from_vector of floats makes a float32 tensor of the given shape") {
  Tensor t = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.dtype() == kFloat32);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.strides() == Shape{3, 1});
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("from_vector of doubles makes a float64 tensor") {
  Tensor t = from_vector(std::vector<double>{0.1, -0.2}, {2, 1});
  CHECK(t.dtype() == kFloat64);
  CHECK(t.shape() == Shape{2, 1});
  CHECK(vals(t) == std::vector<double>{0.1, -0.2});  // no rounding through float
}

TEST_CASE("from_vector of int64 makes an int64 tensor") {
  Tensor t = from_vector(std::vector<int64_t>{7, -3, 1'000'000'000'000}, {3});
  CHECK(t.dtype() == kInt64);
  CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{7, -3, 1'000'000'000'000});
}

TEST_CASE("from_vector with a dtype converts the values to it") {
  Tensor f = from_vector(std::vector<double>{1.5, -2.5}, {2}, kFloat32);
  CHECK(f.dtype() == kFloat32);
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, -2.5f});
  Tensor i = from_vector(std::vector<double>{1.9, -2.9, 3}, {3}, kInt64);
  CHECK(i.dtype() == kInt64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3});  // truncated toward zero
}

TEST_CASE("from_vector into bool maps every nonzero value to true") {
  // torch.tensor([0, 0.5, -2, 3], dtype=torch.bool) -> [False, True, True, True]
  Tensor b = from_vector(std::vector<double>{0, 0.5, -2, 3}, {4}, kBool);
  CHECK(b.dtype() == kBool);
  CHECK(b.to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 1, 1});
}

TEST_CASE("from_vector with an empty shape makes a one-element scalar") {
  Tensor s = from_vector(std::vector<float>{4.5f}, {});
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 4.5);
}

TEST_CASE("from_bools makes a bool tensor") {
  Tensor b = from_bools({true, false, false, true}, {2, 2});
  CHECK(b.dtype() == kBool);
  CHECK(b.shape() == Shape{2, 2});
  CHECK(b.to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 0, 1});
  CHECK(b.at({1, 1}) == 1.0);
  CHECK(b.at({0, 1}) == 0.0);
}

TEST_CASE("scalar_tensor makes a zero-dim tensor") {
  Tensor s = scalar_tensor(3.5);
  CHECK(s.dim() == 0);
  CHECK(s.shape().empty());
  CHECK(s.strides().empty());
  CHECK(s.numel() == 1);
  CHECK(s.dtype() == kFloat32);
  CHECK(s.item() == 3.5);
  Tensor i = scalar_tensor(-4, kInt64);
  CHECK(i.dtype() == kInt64);
  CHECK(i.item<int64_t>() == -4);
}

TEST_CASE("zeros_like, ones_like and full_like copy shape and dtype into new storage") {
  Tensor t = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor z = zeros_like(t);
  CHECK(z.shape() == Shape{3, 2});
  CHECK(z.dtype() == kFloat64);
  CHECK(z.storage() != t.storage());
  CHECK(vals(z) == std::vector<double>(6, 0.0));
  CHECK(vals(ones_like(t)) == std::vector<double>(6, 1.0));
  CHECK(vals(full_like(t, -1.5)) == std::vector<double>(6, -1.5));
  CHECK(zeros_like(arange(3)).dtype() == kInt64);
}

TEST_CASE("zeros_like of a non-contiguous view is contiguous") {
  Tensor z = zeros_like(iota({2, 3}).t());
  CHECK(z.shape() == Shape{3, 2});
  CHECK(z.strides() == Shape{2, 1});
}

// ============================================================== views

TEST_CASE("view shares storage and has contiguous strides") {
  Tensor a = iota({12});
  Tensor v = a.view({3, 4});
  CHECK(v.storage() == a.storage());
  CHECK(v.shape() == Shape{3, 4});
  CHECK(v.strides() == Shape{4, 1});
  CHECK(v.offset() == 0);
  CHECK(v.at({2, 1}) == 9.0);
}

TEST_CASE("view infers one -1 size from the element count") {
  Tensor a = iota({12});
  CHECK(a.view({2, -1}).shape() == Shape{2, 6});
  CHECK(a.view({-1, 3, 2}).shape() == Shape{2, 3, 2});
  CHECK(a.view({3, 4}).view({-1}).shape() == Shape{12});
}

TEST_CASE("writing through a view changes the base tensor") {
  Tensor a = zeros({6});
  Tensor v = a.view({2, 3});
  v.fill_(2.0);
  CHECK(vals(a) == std::vector<double>(6, 2.0));
  v.copy_(floats({1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK(vals(a) == std::vector<double>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("reshape of a contiguous tensor is a view") {
  Tensor a = iota({2, 3, 4});
  Tensor r = a.reshape({4, -1});
  CHECK(r.shape() == Shape{4, 6});
  CHECK(r.strides() == Shape{6, 1});
  CHECK(r.storage() == a.storage());
  r.fill_(-1.0);
  CHECK(a.at({1, 2, 3}) == -1.0);
}

TEST_CASE("reshape of a non-contiguous tensor copies when no view fits") {
  Tensor a = iota({2, 3});
  Tensor r = a.t().reshape({6});
  CHECK(r.storage() != a.storage());
  CHECK(r.is_contiguous());
  CHECK(vals(r) == std::vector<double>{0, 3, 1, 4, 2, 5});
  r.fill_(9.0);
  CHECK(vals(a) == std::vector<double>{0, 1, 2, 3, 4, 5});  // the copy is independent
}

TEST_CASE("reshape of a non-contiguous tensor is a view when strides allow it") {
  // [3,2,4] with strides [4,12,1]: the last dim is contiguous, so splitting it is a view
  Tensor a = iota({2, 3, 4}).transpose(0, 1);
  REQUIRE_FALSE(a.is_contiguous());
  Tensor r = a.reshape({3, 2, 2, 2});
  CHECK(r.storage() == a.storage());
  CHECK(r.strides() == Shape{4, 12, 2, 1});
  CHECK(r.at({2, 1, 1, 0}) == a.at({2, 1, 2}));
}

TEST_CASE("transpose swaps two dims' sizes and strides without copying") {
  Tensor a = iota({2, 3, 4});
  Tensor t = a.transpose(0, 2);
  CHECK(t.storage() == a.storage());
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.strides() == Shape{1, 4, 12});
  CHECK(t.offset() == 0);
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 3; j++)
      for (int64_t k = 0; k < 2; k++) CHECK(t.at({i, j, k}) == a.at({k, j, i}));
}

TEST_CASE("transpose accepts negative dims") {
  Tensor a = iota({2, 3, 4});
  CHECK(a.transpose(-1, -3).shape() == Shape{4, 3, 2});
  CHECK(a.transpose(1, 1).strides() == Shape{12, 4, 1});
}

TEST_CASE("t() transposes a 2-D tensor and leaves a 1-D one alone") {
  Tensor a = iota({2, 3});
  Tensor t = a.t();
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.strides() == Shape{1, 3});
  CHECK(t.storage() == a.storage());
  Tensor v = iota({3});
  CHECK(v.t().shape() == Shape{3});
  CHECK(v.t().storage() == v.storage());
}

TEST_CASE("mT swaps the last two dims of a batch of matrices") {
  Tensor a = iota({2, 3, 4});
  Tensor m = a.mT();
  CHECK(m.shape() == Shape{2, 4, 3});
  CHECK(m.strides() == Shape{12, 1, 4});
  CHECK(m.storage() == a.storage());
  CHECK(m.at({1, 3, 2}) == a.at({1, 2, 3}));
}

TEST_CASE("writing through a transposed view lands transposed in the base") {
  Tensor a = zeros({2, 3});
  a.t().copy_(floats({1, 2, 3, 4, 5, 6}, {3, 2}));
  CHECK(vals(a) == std::vector<double>{1, 3, 5, 2, 4, 6});
}

TEST_CASE("permute reorders sizes and strides") {
  Tensor a = iota({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  CHECK(p.storage() == a.storage());
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.at({3, 1, 2}) == a.at({1, 2, 3}));
  CHECK(a.permute({-1, -2, -3}).shape() == Shape{4, 3, 2});
}

TEST_CASE("narrow takes a contiguous range of one dim, moving the offset") {
  Tensor a = iota({3, 4});
  Tensor n = a.narrow(1, 1, 2);
  CHECK(n.storage() == a.storage());
  CHECK(n.shape() == Shape{3, 2});
  CHECK(n.strides() == Shape{4, 1});
  CHECK(n.offset() == 1);
  CHECK(vals(n) == std::vector<double>{1, 2, 5, 6, 9, 10});
  Tensor rows = a.narrow(0, 1, 2);
  CHECK(rows.offset() == 4);
  CHECK(rows.shape() == Shape{2, 4});
}

TEST_CASE("writing through narrow changes only that range of the base") {
  Tensor a = zeros({3, 4});
  a.narrow(1, 1, 2).fill_(-1.0);
  CHECK(vals(a) == std::vector<double>{0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1, 0});
}

TEST_CASE("slice with a step multiplies the stride") {
  Tensor a = iota({3, 4});
  Tensor s = a.slice(1, {.start = 0, .end = 4, .step = 2});
  CHECK(s.storage() == a.storage());
  CHECK(s.shape() == Shape{3, 2});
  CHECK(s.strides() == Shape{4, 2});
  CHECK(s.offset() == 0);
  CHECK(vals(s) == std::vector<double>{0, 2, 4, 6, 8, 10});
  Tensor odd = iota({10}).slice(0, {.start = 1, .end = 10, .step = 3});
  CHECK(odd.shape() == Shape{3});
  CHECK(odd.strides() == Shape{3});
  CHECK(odd.offset() == 1);
  CHECK(vals(odd) == std::vector<double>{1, 4, 7});
}

TEST_CASE("slice counts negative bounds from the end and clamps out-of-range ones") {
  Tensor a = iota({6});
  CHECK(vals(a.slice(0, {.start = -2, .end = 6})) == std::vector<double>{4, 5});
  CHECK(vals(a.slice(0, {.start = 1, .end = -1})) == std::vector<double>{1, 2, 3, 4});
  CHECK(vals(a.slice(0, {.start = 4, .end = 100})) == std::vector<double>{4, 5});
  CHECK(a.slice(0, {.start = 5, .end = 2}).shape() == Shape{0});
}

TEST_CASE("writing through a strided slice changes every step-th element") {
  Tensor a = zeros({6});
  a.slice(0, {.start = 1, .end = 6, .step = 2}).fill_(1.0);
  CHECK(vals(a) == std::vector<double>{0, 1, 0, 1, 0, 1});
}

TEST_CASE("select drops a dim and moves the offset to the chosen index") {
  Tensor a = iota({3, 4});
  Tensor row = a.select(0, 1);
  CHECK(row.storage() == a.storage());
  CHECK(row.shape() == Shape{4});
  CHECK(row.strides() == Shape{1});
  CHECK(row.offset() == 4);
  CHECK(vals(row) == std::vector<double>{4, 5, 6, 7});
  Tensor col = a.select(1, -1);
  CHECK(col.shape() == Shape{3});
  CHECK(col.strides() == Shape{4});
  CHECK(col.offset() == 3);
  CHECK(vals(col) == std::vector<double>{3, 7, 11});
}

TEST_CASE("select on a 1-D tensor gives a zero-dim view of one element") {
  Tensor a = iota({5});
  Tensor e = a.select(0, 2);
  CHECK(e.dim() == 0);
  CHECK(e.offset() == 2);
  e.fill_(42.0);
  CHECK(a.at({2}) == 42.0);
}

TEST_CASE("unsqueeze inserts a size-1 dim") {
  Tensor a = iota({3, 4});
  Tensor u0 = a.unsqueeze(0);
  CHECK(u0.shape() == Shape{1, 3, 4});
  CHECK(u0.strides() == Shape{12, 4, 1});
  CHECK(u0.storage() == a.storage());
  Tensor u1 = a.unsqueeze(1);
  CHECK(u1.shape() == Shape{3, 1, 4});
  CHECK(u1.strides() == Shape{4, 4, 1});
  Tensor ul = a.unsqueeze(-1);
  CHECK(ul.shape() == Shape{3, 4, 1});
  CHECK(ul.strides() == Shape{4, 1, 1});
  CHECK(scalar_tensor(1).unsqueeze(0).shape() == Shape{1});
}

TEST_CASE("squeeze(dim) drops that dim only when its size is 1") {
  Tensor a = iota({1, 3, 1});
  Tensor s0 = a.squeeze(0);
  CHECK(s0.shape() == Shape{3, 1});
  CHECK(s0.strides() == Shape{1, 1});
  CHECK(s0.storage() == a.storage());
  CHECK(a.squeeze(-1).shape() == Shape{1, 3});
  CHECK(a.squeeze(1).shape() == Shape{1, 3, 1});  // size 3 stays
}

TEST_CASE("squeeze() drops every size-1 dim") {
  Tensor a = iota({1, 3, 1, 2});
  Tensor s = a.squeeze();
  CHECK(s.shape() == Shape{3, 2});
  CHECK(s.strides() == Shape{2, 1});
  CHECK(s.storage() == a.storage());
  CHECK(iota({1, 1}).squeeze().dim() == 0);
}

TEST_CASE("expand broadcasts size-1 dims with stride 0") {
  Tensor a = floats({1, 2, 3}, {3, 1});
  Tensor e = a.expand({2, 3, 4});
  CHECK(e.storage() == a.storage());
  CHECK(e.shape() == Shape{2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(e.offset() == 0);
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 3; j++)
      for (int64_t k = 0; k < 4; k++) CHECK(e.at({i, j, k}) == a.at({j, 0}));
}

TEST_CASE("expand keeps a size given as -1") {
  Tensor e = iota({3, 1}).expand({-1, 5});
  CHECK(e.shape() == Shape{3, 5});
  CHECK(e.strides() == Shape{1, 0});
  CHECK(iota({2}).expand_as(zeros({4, 2})).shape() == Shape{4, 2});
}

TEST_CASE("flatten merges a range of dims") {
  Tensor a = iota({2, 3, 4});
  Tensor all = a.flatten();
  CHECK(all.shape() == Shape{24});
  CHECK(all.storage() == a.storage());
  CHECK(a.flatten(1).shape() == Shape{2, 12});
  CHECK(a.flatten(0, 1).shape() == Shape{6, 4});
  CHECK(a.flatten(0, 1).strides() == Shape{4, 1});
  CHECK(a.flatten(-2, -1).shape() == Shape{2, 12});
  CHECK(scalar_tensor(2).flatten().shape() == Shape{1});
}

TEST_CASE("flatten of a transposed tensor copies in the view's order") {
  Tensor a = iota({2, 3});
  Tensor f = a.t().flatten();
  CHECK(f.storage() != a.storage());
  CHECK(vals(f) == std::vector<double>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("views of views compose offsets and strides") {
  Tensor a = iota({4, 6});
  Tensor v = a.narrow(0, 1, 3).slice(1, {.start = 1, .end = 6, .step = 2}).t();  // rows 1..3, cols 1,3,5
  CHECK(v.shape() == Shape{3, 3});
  CHECK(v.strides() == Shape{2, 6});
  CHECK(v.offset() == 7);
  CHECK(vals(v) == std::vector<double>{7, 13, 19, 9, 15, 21, 11, 17, 23});
}

// ============================================================== contiguity and copies

TEST_CASE("contiguous() returns the very same tensor when already contiguous") {
  Tensor a = iota({2, 3});
  CHECK(a.contiguous().same(a));
  Tensor rows = a.narrow(0, 1, 1);  // contiguous despite its offset
  CHECK(rows.contiguous().same(rows));
}

TEST_CASE("contiguous() copies a non-contiguous tensor into row-major order") {
  Tensor a = iota({2, 3});
  Tensor t = a.t();
  Tensor c = t.contiguous();
  CHECK_FALSE(c.same(t));
  CHECK(c.storage() != a.storage());
  CHECK(c.is_contiguous());
  CHECK(c.shape() == Shape{3, 2});
  CHECK(c.strides() == Shape{2, 1});
  CHECK(c.offset() == 0);
  CHECK(vals(c) == std::vector<double>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("is_contiguous is false for transposed, expanded and strided views") {
  Tensor a = iota({3, 4});
  CHECK(a.is_contiguous());
  CHECK_FALSE(a.t().is_contiguous());
  CHECK_FALSE(a.permute({1, 0}).is_contiguous());
  CHECK_FALSE(iota({3, 1}).expand({3, 4}).is_contiguous());
  CHECK_FALSE(a.slice(1, {.start = 0, .end = 4, .step = 2}).is_contiguous());
  CHECK_FALSE(a.narrow(1, 0, 2).is_contiguous());
  CHECK_FALSE(a.select(1, 0).is_contiguous());
}

TEST_CASE("is_contiguous is true for row ranges and size-1 dims of any stride") {
  Tensor a = iota({3, 4});
  CHECK(a.narrow(0, 1, 2).is_contiguous());
  CHECK(a.select(0, 2).is_contiguous());
  CHECK(a.unsqueeze(1).is_contiguous());
  CHECK(iota({1, 4}).t().is_contiguous());  // [4,1] with strides [1,4]
  CHECK(iota({4}).expand({1, 4}).is_contiguous());
}

TEST_CASE("clone always makes fresh contiguous storage with the same values") {
  Tensor a = iota({2, 3});
  Tensor c = a.clone();
  CHECK_FALSE(c.same(a));
  CHECK(c.storage() != a.storage());
  CHECK(equal(c, a));
  c.fill_(0.0);
  CHECK(vals(a) == std::vector<double>{0, 1, 2, 3, 4, 5});
  Tensor ct = a.t().clone();
  CHECK(ct.strides() == Shape{2, 1});
  CHECK(vals(ct) == std::vector<double>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("copy_ broadcasts and converts the source") {
  Tensor a = zeros({2, 3}, kFloat64);
  a.copy_(arange(3));  // int64 [3] into float64 [2,3]
  CHECK(vals(a) == std::vector<double>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("in-place writes bump the storage version") {
  Tensor a = zeros({3});
  const uint64_t v0 = a.storage()->version;
  a.fill_(1.0);
  CHECK(a.storage()->version > v0);
  const uint64_t v1 = a.storage()->version;
  a.narrow(0, 0, 1).copy_(scalar_tensor(5.0));
  CHECK(a.storage()->version > v1);
}

// ============================================================== broadcasting

TEST_CASE("broadcast_shapes aligns trailing dims and stretches size-1 dims") {
  CHECK(broadcast_shapes({2, 1, 4}, {3, 1}, "test") == Shape{2, 3, 4});
  CHECK(broadcast_shapes({5, 1}, {1, 6}, "test") == Shape{5, 6});
  CHECK(broadcast_shapes({4}, {3, 4}, "test") == Shape{3, 4});
  CHECK(broadcast_shapes({3, 4}, {4}, "test") == Shape{3, 4});
  CHECK(broadcast_shapes({8, 1, 6, 1}, {7, 1, 5}, "test") == Shape{8, 7, 6, 5});
  CHECK(broadcast_shapes({2, 3}, {2, 3}, "test") == Shape{2, 3});
}

TEST_CASE("broadcast_shapes treats a scalar shape as broadcasting to anything") {
  CHECK(broadcast_shapes({}, {2, 3}, "test") == Shape{2, 3});
  CHECK(broadcast_shapes({2, 3}, {}, "test") == Shape{2, 3});
  CHECK(broadcast_shapes({}, {}, "test") == Shape{});
}

TEST_CASE("broadcast_shapes lets size 1 stretch to size 0") {
  CHECK(broadcast_shapes({0}, {1}, "test") == Shape{0});
  CHECK(broadcast_shapes({2, 1}, {0}, "test") == Shape{2, 0});
}

TEST_CASE("broadcast_shapes rejects unequal sizes neither of which is 1") {
  CHECK_THROWS_AS(broadcast_shapes({2, 3}, {4}, "test"), Error);
  CHECK_THROWS_AS(broadcast_shapes({2, 1}, {3, 1}, "test"), Error);
}

TEST_CASE("add broadcasts a row across every row") {
  Tensor a = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = floats({10, 20, 30}, {3});
  Tensor c = add(a, b);
  CHECK(c.shape() == Shape{2, 3});
  CHECK(vals(c) == std::vector<double>{11, 22, 33, 14, 25, 36});
}

TEST_CASE("mul broadcasts a column and a row into an outer product") {
  Tensor col = floats({1, 2, 3}, {3, 1});
  Tensor row = floats({1, 10, 100, 1000}, {1, 4});
  Tensor p = mul(col, row);
  CHECK(p.shape() == Shape{3, 4});
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 4; j++) CHECK(p.at({i, j}) == col.at({i, 0}) * row.at({0, j}));
}

TEST_CASE("binary ops broadcast a zero-dim tensor and leading dims") {
  Tensor a = floats({1, 2, 3, 4}, {2, 2});
  CHECK(vals(add(a, scalar_tensor(0.5))) == std::vector<double>{1.5, 2.5, 3.5, 4.5});
  Tensor batch = mul(iota({2, 1, 3}), floats({1, -1}, {2, 1}));
  CHECK(batch.shape() == Shape{2, 2, 3});
  CHECK(vals(batch) == std::vector<double>{0, 1, 2, 0, -1, -2, 3, 4, 5, -3, -4, -5});
}

TEST_CASE("binary ops broadcast int64 tensors too") {
  Tensor s = add(arange(3).view({3, 1}), mul(arange(2), 10.0));
  CHECK(s.dtype() == kInt64);
  CHECK(s.to_vector<int64_t>() == std::vector<int64_t>{0, 10, 1, 11, 2, 12});
}

TEST_CASE("binary ops read non-contiguous operands through their strides") {
  Tensor a = iota({2, 3});
  Tensor s = add(a.t(), floats({100, 200}, {2}));
  CHECK(vals(s) == std::vector<double>{100, 203, 101, 204, 102, 205});
}

// ============================================================== dtype conversion

TEST_CASE("to(int64) truncates floats toward zero") {
  Tensor i = floats({1.7f, -1.7f, 2.5f, -0.2f, 0.0f}, {5}).to(kInt64);
  CHECK(i.dtype() == kInt64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, -1, 2, 0, 0});
}

TEST_CASE("to(bool) maps nonzero to true") {
  Tensor b = floats({0.0f, 0.5f, -2.0f, 0.0f}, {4}).to(kBool);
  CHECK(b.dtype() == kBool);
  CHECK(b.to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 1, 0});
  CHECK(from_vector(std::vector<int64_t>{0, 7}, {2}).to(kBool).to_vector<uint8_t>() ==
        std::vector<uint8_t>{0, 1});
}

TEST_CASE("to(float) converts bools to 0 and 1 and int64 exactly") {
  CHECK(vals(from_bools({true, false}, {2}).to(kFloat32)) == std::vector<double>{1, 0});
  Tensor d = from_vector(std::vector<int64_t>{-3, 1 << 20}, {2}).to(kFloat64);
  CHECK(d.dtype() == kFloat64);
  CHECK(vals(d) == std::vector<double>{-3, 1 << 20});
}

TEST_CASE("to between float types rounds to the narrower type") {
  Tensor f = from_vector(std::vector<double>{0.1, -2.5}, {2}).to(kFloat32);
  CHECK(f.dtype() == kFloat32);
  CHECK(f.to_vector<float>() == std::vector<float>{0.1f, -2.5f});
  CHECK(f.to(kFloat64).to_vector<double>()[0] == (double)0.1f);
}

TEST_CASE("to the same dtype returns the tensor itself") {
  Tensor a = iota({3});
  CHECK(a.to(kFloat32).same(a));
}

TEST_CASE("to another dtype makes new contiguous storage, also from a view") {
  Tensor a = iota({2, 3});
  Tensor d = a.t().to(kFloat64);
  CHECK(d.storage() != a.storage());
  CHECK(d.strides() == Shape{2, 1});
  CHECK(vals(d) == std::vector<double>{0, 3, 1, 4, 2, 5});
}

// ============================================================== random

TEST_CASE("randn with the same seed gives identical tensors") {
  Generator g1(42), g2(42);
  Tensor a = randn({4, 5}, kFloat32, &g1);
  Tensor b = randn({4, 5}, kFloat32, &g2);
  CHECK(a.shape() == Shape{4, 5});
  CHECK(equal(a, b));
}

TEST_CASE("randn with different seeds gives different tensors") {
  Generator g1(1), g2(2);
  CHECK_FALSE(equal(randn({100}, kFloat32, &g1), randn({100}, kFloat32, &g2)));
}

TEST_CASE("successive draws from one generator differ") {
  Generator g(5);
  Tensor a = rand({50}, kFloat32, &g);
  Tensor b = rand({50}, kFloat32, &g);
  CHECK_FALSE(equal(a, b));
}

TEST_CASE("rand, uniform, normal and randint are reproducible from a seed") {
  Generator g1(9), g2(9);
  CHECK(equal(rand({7}, kFloat64, &g1), rand({7}, kFloat64, &g2)));
  CHECK(equal(uniform({3, 3}, -1, 1, kFloat32, &g1), uniform({3, 3}, -1, 1, kFloat32, &g2)));
  CHECK(equal(normal({5}, 2, 3, kFloat64, &g1), normal({5}, 2, 3, kFloat64, &g2)));
  CHECK(equal(randint(0, 100, {11}, &g1), randint(0, 100, {11}, &g2)));
  Generator g3(10);
  CHECK_FALSE(equal(randint(0, 1000, {20}, &g3), randint(0, 1000, {20}, &g1)));
}

TEST_CASE("a tensor of n uniform draws is the first n of a longer one") {
  Generator g1(77), g2(77);
  auto small = rand({3}, kFloat64, &g1).to_vector<double>();
  auto large = rand({10}, kFloat64, &g2).to_vector<double>();
  CHECK(std::equal(small.begin(), small.end(), large.begin()));
}

TEST_CASE("set_state(get_state()) resumes the same stream") {
  Generator g(123);
  randn({3}, kFloat32, &g);  // advance past the start
  const std::vector<uint64_t> state = g.get_state();
  Tensor a = randn({6}, kFloat32, &g);
  Tensor a2 = rand({4}, kFloat32, &g);
  g.set_state(state);
  CHECK(equal(randn({6}, kFloat32, &g), a));
  CHECK(equal(rand({4}, kFloat32, &g), a2));
}

TEST_CASE("a generator given another's state continues its stream") {
  Generator g(31), h(0);
  rand({5}, kFloat32, &g);
  h.set_state(g.get_state());
  CHECK(h.seed() == 31);
  CHECK(equal(randint(0, 1 << 30, {8}, &g), randint(0, 1 << 30, {8}, &h)));
}

TEST_CASE("manual_seed restarts a generator's stream") {
  Generator g(4);
  Tensor a = rand({5}, kFloat32, &g);
  g.manual_seed(4);
  CHECK(equal(rand({5}, kFloat32, &g), a));
  CHECK(g.get_state() == std::vector<uint64_t>{4, 5});
}

TEST_CASE("manual_seed on the default generator makes ops without a generator reproducible") {
  manual_seed(2024);
  Tensor a = randn({8});
  Tensor u = rand({8});
  manual_seed(2024);
  CHECK(equal(randn({8}), a));
  CHECK(equal(rand({8}), u));
  CHECK(default_generator().seed() == 2024);
}

TEST_CASE("dropout's row keys made in a run equal each row's own key, from any first row") {
  Generator source(17);
  const BatchOffset offset(5);
  for (const Shape& shape : {Shape{3, 4, 5, 6}, Shape{2, 7}, Shape{9}, Shape{4, 1, 3, 2}}) {
    const DropoutDraws d = DropoutDraws::take(source, 0.3, shape);
    const int64_t rows = numel_of(shape) / shape.back();
    for (int64_t first : {int64_t(0), int64_t(1), rows / 2, rows - 1}) {
      std::vector<uint64_t> keys((size_t)(rows - first));
      d.row_keys(first, rows - first, keys.data());
      for (int64_t r = first; r < rows; r++) CHECK(keys[(size_t)(r - first)] == d.row_key(r));
    }
  }
}

TEST_CASE("randn of 100k elements has mean near 0 and std near 1") {
  Generator g(2);
  auto v = randn({100000}, kFloat64, &g).to_vector<double>();
  CHECK(std::fabs(sample_mean(v)) < 0.02);  // standard error 0.003
  CHECK(std::fabs(sample_std(v) - 1.0) < 0.02);
  size_t within_one = (size_t)std::count_if(v.begin(), v.end(), [](double x) { return std::fabs(x) < 1; });
  CHECK(std::fabs((double)within_one / v.size() - 0.6827) < 0.01);
}

TEST_CASE("normal shifts and scales the standard normal") {
  Generator g(3);
  auto v = normal({50000}, 5.0, 2.0, kFloat32, &g).to_vector<double>();
  CHECK(std::fabs(sample_mean(v) - 5.0) < 0.05);
  CHECK(std::fabs(sample_std(v) - 2.0) < 0.05);
}

TEST_CASE("an odd number of normal draws is as reproducible as an even one") {
  Generator g1(8), g2(8);
  auto odd = randn({5}, kFloat64, &g1).to_vector<double>();
  auto even = randn({6}, kFloat64, &g2).to_vector<double>();
  CHECK(std::equal(odd.begin(), odd.end(), even.begin()));
  for (double x : odd) CHECK(std::isfinite(x));
}

TEST_CASE("uniform stays within low..high (high excluded) and fills it evenly") {
  Generator g(4);
  auto v = uniform({100000}, -2.0, 3.0, kFloat32, &g).to_vector<double>();
  CHECK(*std::min_element(v.begin(), v.end()) >= -2.0);
  CHECK(*std::max_element(v.begin(), v.end()) < 3.0);
  CHECK(std::fabs(sample_mean(v) - 0.5) < 0.03);
  CHECK(std::fabs(sample_std(v) - 5.0 / std::sqrt(12.0)) < 0.03);
}

TEST_CASE("rand stays within 0..1 (1 excluded)") {
  Generator g(6);
  auto v = rand({10000}, kFloat64, &g).to_vector<double>();
  CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
  CHECK(*std::max_element(v.begin(), v.end()) < 1.0);
  CHECK(std::fabs(sample_mean(v) - 0.5) < 0.02);
}

TEST_CASE("randint draws int64 values in low..high (high excluded), hitting each one") {
  Generator g(11);
  Tensor t = randint(3, 7, {2000}, &g);
  CHECK(t.dtype() == kInt64);
  auto v = t.to_vector<int64_t>();
  for (int64_t k = 3; k < 7; k++) CHECK(std::count(v.begin(), v.end(), k) > 400);  // ~500 each
  CHECK(*std::min_element(v.begin(), v.end()) == 3);
  CHECK(*std::max_element(v.begin(), v.end()) == 6);
}

TEST_CASE("random tensors honour the requested float dtype") {
  Generator g(1);
  CHECK(randn({2}, kFloat64, &g).dtype() == kFloat64);
  CHECK(rand({2}, kFloat32, &g).dtype() == kFloat32);
  CHECK(uniform({2}, 0, 1, kFloat64, &g).dtype() == kFloat64);
}

// ============================================================== printing

TEST_CASE("a float matrix prints like PyTorch, with its shape and dtype") {
  Tensor t = floats({1, 2.5f, 3, 4}, {2, 2});
  CHECK(t.to_string() ==
        "tensor([[1.0000, 2.5000],\n"
        "        [3.0000, 4.0000]], shape=[2,2], dtype=float32)");
}

TEST_CASE("operator<< prints what to_string returns") {
  Tensor t = from_vector(std::vector<double>{0.5, -1}, {2});
  std::ostringstream os;
  os << t;
  CHECK(os.str() == t.to_string());
  CHECK_THAT(os.str(), StartsWith("tensor([ 0.5000, -1.0000]") && Contains("dtype=float64"));
}

TEST_CASE("whole-number floats print with a trailing dot") {
  CHECK(floats({1, 2, 3}, {3}).to_string() == "tensor([1., 2., 3.], shape=[3], dtype=float32)");
  CHECK(floats({-10, 2}, {2}).to_string() == "tensor([-10.,   2.], shape=[2], dtype=float32)");
}

TEST_CASE("values are right-aligned to the widest one") {
  CHECK_THAT(floats({-1.5f, 2, 10.25f}, {3}).to_string(), StartsWith("tensor([-1.5000,  2.0000, 10.2500]"));
}

TEST_CASE("very small or widely spread values print in scientific notation") {
  CHECK_THAT(floats({1e-5f, 1}, {2}).to_string(), StartsWith("tensor([1.0000e-05, 1.0000e+00]"));
  CHECK_THAT(from_vector(std::vector<double>{1.5e9, 2}, {2}).to_string(),
             StartsWith("tensor([1.5000e+09, 2.0000e+00]"));
}

TEST_CASE("nan and inf print by name") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK_THAT(floats({nan, 1.5f, -inf}, {3}).to_string(), StartsWith("tensor([   nan, 1.5000,   -inf]"));
}

TEST_CASE("int64 tensors print as integers") {
  CHECK(arange(4).to_string() == "tensor([0, 1, 2, 3], shape=[4], dtype=int64)");
  CHECK(from_vector(std::vector<int64_t>{-5, 10, 3}, {3}).to_string() ==
        "tensor([-5, 10,  3], shape=[3], dtype=int64)");
}

TEST_CASE("bool tensors print True and False") {
  CHECK(from_bools({true, false}, {2}).to_string() == "tensor([ True, False], shape=[2], dtype=bool)");
}

TEST_CASE("a zero-dim tensor prints its value without brackets") {
  CHECK(scalar_tensor(3.5).to_string() == "tensor(3.5000, shape=[], dtype=float32)");
  CHECK(scalar_tensor(7, kInt64).to_string() == "tensor(7, shape=[], dtype=int64)");
}

TEST_CASE("empty and undefined tensors print") {
  CHECK(zeros({0}).to_string() == "tensor([], shape=[0], dtype=float32)");
  CHECK(zeros({2, 0}, kInt64).to_string() == "tensor([], shape=[2,0], dtype=int64)");
  CHECK(Tensor().to_string() == "tensor(undefined)");
}

TEST_CASE("a 3-D tensor separates its matrices with a blank line") {
  CHECK(arange(8).view({2, 2, 2}).to_string() ==
        "tensor([[[0, 1],\n"
        "         [2, 3]],\n"
        "\n"
        "        [[4, 5],\n"
        "         [6, 7]]], shape=[2,2,2], dtype=int64)");
}

TEST_CASE("a non-contiguous view prints in its own index order") {
  CHECK_THAT(arange(6).view({2, 3}).t().to_string(),
             StartsWith("tensor([[0, 3],\n        [1, 4],\n        [2, 5]]"));
}

TEST_CASE("tensors of more than 1000 elements print abbreviated with ...") {
  const std::string s = arange(2000).to_string();
  CHECK_THAT(s, StartsWith("tensor([   0,    1,    2,") && Contains("...") &&
                    Contains("1997, 1998, 1999]") && Contains("shape=[2000]"));
  CHECK_THAT(s, !Contains("1000,"));
  CHECK(s.size() < 120);
}

TEST_CASE("tensors of exactly 1000 elements print in full") {
  const std::string s = arange(1000).to_string();
  CHECK_THAT(s, !Contains("..."));
  CHECK_THAT(s, Contains(" 500,"));
}

TEST_CASE("abbreviated matrices show three rows and columns at each edge") {
  const std::string s = arange(2000).view({100, 20}).to_string();
  CHECK(count_of(s, '\n') == 6);  // 3 rows, the ... row, 3 rows
  CHECK_THAT(s, StartsWith("tensor([[   0,    1,    2, ...,   17,   18,   19],"));
  CHECK_THAT(s, Contains("[1980, 1981, 1982, ..., 1997, 1998, 1999]]"));
}

TEST_CASE("a leaf that requires grad says so when printed") {
  Tensor x = ones({2});
  CHECK_THAT(x.to_string(), !Contains("requires_grad"));
  x.requires_grad_();
  CHECK_THAT(x.to_string(), Contains(", requires_grad=True)"));
}

TEST_CASE("a tensor produced by a recorded op names its grad_fn") {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = mul(x, x);
  CHECK_THAT(y.to_string(), Contains(", grad_fn=<mul>)"));
  CHECK_THAT(y.to_string(), !Contains("requires_grad"));
  NoGradGuard off;
  CHECK_THAT(mul(x, x).to_string(), !Contains("grad_fn"));
}

// ============================================================== element access

TEST_CASE("item returns the value of a one-element tensor") {
  CHECK(scalar_tensor(2.5).item() == 2.5);
  CHECK(scalar_tensor(2.5).item<float>() == 2.5f);
  CHECK(from_vector(std::vector<int64_t>{-9}, {1, 1}).item<int64_t>() == -9);
  CHECK(from_bools({true}, {1}).item() == 1.0);
  CHECK(iota({3, 4}).select(0, 2).select(0, 1).item() == 9.0);
}

TEST_CASE("at reads one element through the tensor's strides") {
  Tensor a = iota({3, 4});
  CHECK(a.at({0, 0}) == 0.0);
  CHECK(a.at({1, 2}) == 6.0);
  CHECK(a.at({-1, -1}) == 11.0);
  CHECK(a.t().at({2, 1}) == 6.0);
  CHECK(a.narrow(1, 1, 2).at({2, 0}) == 9.0);
  CHECK(scalar_tensor(4).at({}) == 4.0);
}

TEST_CASE("to_vector gives row-major values converted to the requested type") {
  Tensor a = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  CHECK(a.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(a.to_vector<int>() == std::vector<int>{1, 2, 3, 4, 5, 6});
  CHECK(a.t().to_vector<double>() == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(floats({1.9f, -1.9f}, {2}).to_vector<int>() == std::vector<int>{1, -1});
}

TEST_CASE("data points at the view's first element") {
  Tensor a = iota({3, 4});
  Tensor row = a.select(0, 2);
  CHECK(row.data<float>() == a.data<float>() + 8);
  CHECK(*row.data<float>() == 8.0f);
  CHECK(row.raw_data() == static_cast<void*>(a.data<float>() + 8));
}

TEST_CASE("the integer Bernoulli test agrees with uniform(i) < p") {
  Generator gen(2026);
  // probabilities at and around exact binary fractions, tiny and near-one ones, 0 and 1
  const double ps[] = {0.0, 1e-300, 0x1.0p-53, 0x1.8p-53, 0.1, 0.25, 0.5, 0.3333333333333333,
                       0.9, std::nextafter(1.0, 0.0), 1.0, 2.0, -0.5};
  for (double p : ps) {
    const uint64_t thr = Generator::below_threshold(p);
    int64_t hits = 0;
    for (uint64_t i = 0; i < 20000; i++) {
      INFO("p = " << p << ", draw " << i);
      REQUIRE(gen.below(i, thr) == (gen.uniform(i) < p));
      hits += gen.below(i, thr);
    }
    if (p == 0.5) CHECK(std::abs(hits - 10000) < 400);
  }
  // the boundary itself: u * 2^-53 < p for the u just below ceil(p * 2^53), not for that u
  for (double p : {0.1, 0.5, 0.75, 0.123456789}) {
    const uint64_t thr = Generator::below_threshold(p);
    CHECK((double)(thr - 1) * 0x1.0p-53 < p);
    CHECK(!((double)thr * 0x1.0p-53 < p));
  }
}

// C = A B by the textbook loop in float64, for A [M, K] and B [K, N] given as float32.
static Tensor naive_matmul(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> av = a.contiguous().to(kFloat64).to_vector<double>(), bv = b.contiguous().to(kFloat64).to_vector<double>(),
                      c((size_t)(M * N), 0.0);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < K; k++) c[(size_t)(m * N + n)] += av[(size_t)(m * K + k)] * bv[(size_t)(k * N + n)];
  return from_vector(c, {M, N});
}

TEST_CASE("ember's skinny products keep the sign of zero: -0 times anything added to -0 is -0") {
  // few rows and a short sum against a large operand (ember's kernels, not BLAS's), float32
  // and float64, whole vectors and tails
  for (DType dtype : {kFloat32, kFloat64})
    for (auto [M, K, N] : {std::array<int64_t, 3>{1, 64, 520}, {3, 512, 64}, {512, 8, 80}}) {
      INFO(dtype_name(dtype) << " M " << M << " K " << K << " N " << N);
      Tensor a = mul(ones({M, K}, dtype), -0.0), b = ones({K, N}, dtype), c = mul(ones({M, N}, dtype), -0.0);
      kernel::gemm_batched(c, a, b, /*accumulate=*/true);
      Tensor flat = c.reshape({-1}).to(kFloat64);
      int64_t negative_zeros = 0;
      for (int64_t i = 0; i < flat.numel(); i++) negative_zeros += std::signbit(flat.at({i})) ? 1 : 0;
      CHECK(negative_zeros == M * N);
    }
}

TEST_CASE("float products with a short sum (ember's panel kernel on AVX-512) agree with a float64 loop") {
  // Sums of up to 1536 terms over at least 2^20 multiply-adds a tile: 8 rows of C a step
  // (and 1 .. 7 at the end), 32 columns a panel (and tails of 1 .. 31, below and above
  // 16), a transposed B copied panel by panel in 16 x 16 blocks (and K's and the panel's
  // edges one by one), operands read through row strides wider than their rows.
  // (400, 128, 200) is cut in tiles along its rows, (200, 130, 300) along its columns;
  // (400, 8, 400) copies a transposed B of fewer than 16 terms. With a transposed A and a
  // long sum (a weight gradient's shape), the sum is cut in two halves at a multiple of
  // 16, the second computed apart and added: (256, 700, 128), (100, 2000, 90) - whose
  // whole sum is too long for one call of the kernel - and (48, 3000, 40).
  const std::vector<std::array<int64_t, 3>> shapes = {{200, 130, 300}, {129, 77, 150}, {67, 1000, 48},
                                                      {333, 128, 512}, {41, 1536, 33}, {150, 100, 80},
                                                      {400, 128, 200}, {400, 8, 400}, {256, 700, 128},
                                                      {100, 2000, 90}, {48, 3000, 40}};
  for (auto [M, K, N] : shapes)
    for (int layout = 0; layout < 4; layout++) {
      INFO("M " << M << " K " << K << " N " << N << " layout " << layout);
      const bool ta = layout & 1, tb = layout & 2;
      // each operand a view into a wider tensor: its rows further apart than their length
      Tensor a = ta ? randn({K, M + 5}).narrow(1, 2, M).t() : randn({M, K + 3}).narrow(1, 1, K);
      Tensor b = tb ? randn({N, K + 7}).narrow(1, 3, K).t() : randn({K, N + 9}).narrow(1, 4, N);
      Tensor expected = naive_matmul(a, b);
      const double tol = 1e-5 * std::sqrt((double)K);
      CHECK(allclose(matmul(a, b).to(kFloat64), expected, tol, tol));
      // C = A B over a C that holds NaN (never read), C += A B, and C = bias + A B (linear)
      Tensor c = full({M, N}, std::nan(""));
      kernel::gemm_batched(c, a, b);
      CHECK(allclose(c.to(kFloat64), expected, tol, tol));
      c = randn({M, N});
      Tensor before = c.to(kFloat64);
      kernel::gemm_batched(c, a, b, /*accumulate=*/true);
      CHECK(allclose(c.to(kFloat64), add(before, expected), tol, tol));
      // a batch of two
      Tensor cb = matmul(stack({a, mul(a, -1.0)}, 0), stack({b, b}, 0)).to(kFloat64);
      CHECK(allclose(cb.select(0, 0), expected, tol, tol));
      CHECK(allclose(cb.select(0, 1), mul(expected, -1.0), tol, tol));
      Tensor bias = randn({N});
      CHECK(allclose(linear(a, b.t(), bias).to(kFloat64), add(expected, bias.to(kFloat64)), tol, tol));
    }
}

TEST_CASE("gemm_serial (attention's per-head products) agrees with a float64 loop, in every layout") {
  // the small products a tiled attention computes per head: a row-major or transposed B
  // (the panel kernel on AVX-512 for a row-major B, OpenBLAS otherwise), A transposed or
  // not, rows further apart than their length, C written or added to
  Generator gen(7);
  for (auto [M, N, K] : {std::array<int64_t, 3>{11, 32, 11}, {16, 16, 32}, {30, 32, 30}, {7, 40, 5}, {1, 33, 64}})
    for (int layout = 0; layout < 8; layout++) {
      const bool ta = layout & 1, tb = layout & 2, accumulate = layout & 4;
      INFO("M " << M << " N " << N << " K " << K << " layout " << layout);
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
      std::vector<float> a((size_t)((ta ? K : M) * lda)), b((size_t)((tb ? N : K) * ldb)), c((size_t)(M * ldc));
      for (auto* v : {&a, &b, &c})
        for (float& x : *v) x = float(gen.uniform(gen.reserve(1)) * 2 - 1);
      std::vector<double> expected((size_t)(M * N));
      for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
          double sum = accumulate ? c[(size_t)(m * ldc + n)] : 0.0;
          for (int64_t k = 0; k < K; k++)
            sum += double(a[(size_t)(ta ? k * lda + m : m * lda + k)]) * double(b[(size_t)(tb ? n * ldb + k : k * ldb + n)]);
          expected[(size_t)(m * N + n)] = sum;
        }
      const std::vector<float> before = c;
      kernel::gemm_serial(kernel::Gemm<float>{.M = M, .N = N, .K = K, .a = a.data(), .lda = lda, .trans_a = ta,
                                              .b = b.data(), .ldb = ldb, .trans_b = tb, .c = c.data(), .ldc = ldc,
                                              .accumulate = accumulate});
      double worst = 0;
      for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++)
          worst = std::max(worst, std::abs(double(c[(size_t)(m * ldc + n)]) - expected[(size_t)(m * N + n)]));
        for (int64_t n = N; n < ldc; n++) CHECK(c[(size_t)(m * ldc + n)] == before[(size_t)(m * ldc + n)]);  // untouched
      }
      CHECK(worst < 1e-5 * std::sqrt(double(K)) * 4);
    }
}

TEST_CASE("matmul and linear agree with a float64 loop at skinny and regular shapes, in every layout") {
  // few rows (M <= 16) or a short sum (K <= 16) against a large other operand take
  // ember's own kernels; the rest BLAS. Odd sizes exercise the blocks' tails.
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 300, 130}, {3, 257, 200}, {4, 512, 130}, {16, 129, 300},
                                                      {10, 64, 64},  {17, 200, 200}, {300, 7, 130}, {129, 16, 300},
                                                      {45, 3, 66},   {1, 1, 1},      {64, 64, 64}, {2, 300, 130},
                                                      {5, 260, 140}, {6, 200, 170}, {7, 300, 111}, {13, 257, 129},
                                                      // blocks of C ending in 48, 32 and 16 columns
                                                      {3, 512, 112}, {200, 10, 96}, {2, 300, 80}};
  for (auto [M, K, N] : shapes)
    for (int layout = 0; layout < 4; layout++) {
      INFO("M " << M << " K " << K << " N " << N << " layout " << layout);
      const bool ta = layout & 1, tb = layout & 2;
      Tensor a = ta ? randn({K, M}).t() : randn({M, K});
      Tensor b = tb ? randn({N, K}).t() : randn({K, N});
      Tensor expected = naive_matmul(a, b);
      const double tol = 1e-5 * std::sqrt((double)K);
      CHECK(allclose(matmul(a, b).to(kFloat64), expected, tol, tol));
      // batched, with the batch as a leading dim of a strided view
      Tensor ab = stack({a, mul(a, 2.0)}, 0), bb = stack({b, b}, 0);
      Tensor cb = matmul(ab, bb).to(kFloat64);
      CHECK(allclose(cb.select(0, 0), expected, tol, tol));
      CHECK(allclose(cb.select(0, 1), mul(expected, 2.0), 2 * tol, 2 * tol));
      // linear: x W^T + bias, the bias summed by the GEMM itself
      Tensor w = b.t(), bias = randn({N});
      Tensor y = linear(a, w, bias).to(kFloat64);
      CHECK(allclose(y, add(expected, bias.to(kFloat64)), tol, tol));
      // float64 (vectors of half the lanes)
      Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64);
      if (ta) a64 = a64.t().contiguous().t();
      if (tb) b64 = b64.t().contiguous().t();
      CHECK(allclose(matmul(a64, b64), expected, 1e-12, 1e-12));
    }
}

// ------------------------------------------------------------------ numbers in and out
TEST_CASE("tensor() takes nested braces as torch.tensor does, with PyTorch's default dtypes") {
  const Tensor m = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  CHECK(m.shape() == Shape{2, 3});
  CHECK(m.dtype() == kFloat32);  // torch.tensor's default for reals
  CHECK(m.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(tensor({{1.0, 2.0}}, kFloat64).dtype() == kFloat64);
  CHECK(tensor({1, 2}).dtype() == kInt64);
  CHECK(tensor({true, false}).dtype() == kBool);
  CHECK(tensor({INT64_MAX, INT64_MIN}).to_vector<int64_t>() == std::vector<int64_t>{INT64_MAX, INT64_MIN});  // exact
  const Tensor s = tensor(2.5, kFloat64);
  CHECK(s.dim() == 0);
  CHECK(s.item() == 2.5);
  const Tensor deep = tensor({{{{{{1, 2}}}}}});  // six levels
  CHECK(deep.shape() == Shape{1, 1, 1, 1, 1, 2});
  CHECK(tensor({{{1.5, -2.7}}}, kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, -2});  // toward zero
  CHECK(tensor({{1.0}, {2.0}}).shape() == Shape{2, 1});
  CHECK_THAT(error_of([] { (void)tensor({{1.0, 2.0}, {3.0}}); }),
             StartsWith("tensor: expected lists of equal length at each level: a list at level 1 has 1 elements "
                        "where an earlier one has 2"));
  CHECK_THAT(error_of([] { (void)tensor({1e300}, kInt64); }), StartsWith("tensor: value 0 (1e+300) cannot be converted to int64"));
  CHECK_THAT(error_of([] { (void)tensor({std::nan("")}, kInt64); }), StartsWith("tensor: value 0 (nan)"));
  // a flat list with a shape: the list's own type decides, with no ambiguity
  CHECK(from_vector({1.0, 2.0}, {2}).dtype() == kFloat64);
  CHECK(from_vector({1.0f, 2.0f}, {1, 2}).dtype() == kFloat32);
  CHECK(from_vector({1, 2, 3, 4}, {2, 2}).dtype() == kInt64);
  CHECK_THAT(error_of([] { (void)from_vector({1.0, 2.0}, {3}); }), StartsWith("from_vector: shape [3] needs 3 values, got 2"));
  CHECK_THAT(error_of([] { (void)from_vector(std::vector<double>{NAN}, {1}, kInt64); }),
             StartsWith("from_vector: value 0 (nan) cannot be converted to int64"));
}

TEST_CASE("tolist gives nested vectors of the tensor's depth, and integer reads refuse what does not fit") {
  const Tensor m = arange(0.0, 6.0, 1.0, kFloat64).reshape({2, 3}).t();  // strided: read in logical order
  const std::vector<std::vector<double>> rows = m.tolist<double, 2>();
  CHECK(rows == std::vector<std::vector<double>>{{0, 3}, {1, 4}, {2, 5}});
  CHECK(tensor(7).tolist<int64_t, 0>() == 7);
  CHECK(zeros({2, 0}).tolist<float, 2>() == std::vector<std::vector<float>>{{}, {}});
  CHECK_THAT(error_of([&] { (void)m.tolist<double, 1>(); }),
             StartsWith("tolist: asked for 1 levels of nesting, but the tensor of shape [3,2] has 2 dims"));
  CHECK(tensor({int64_t(1) << 60}).item<int64_t>() == int64_t(1) << 60);  // not through a double
  CHECK(tensor(-3.9).item<int>() == -3);
  CHECK_THAT(error_of([] { (void)tensor(std::nan("")).item<int64_t>(); }),
             StartsWith("item: element 0 (nan) of a float32 tensor does not fit the integer type asked for (range [-9223372036854775808, 9223372036854775807])"));
  CHECK_THAT(error_of([] { (void)tensor({1.0, 3e9}).to_vector<int>(); }),
             StartsWith("to_vector: element 1 (3e+09) of a float32 tensor does not fit the integer type asked for "
                        "(range [-2147483648, 2147483647])"));
  CHECK_THAT(error_of([] { (void)tensor({INFINITY}).to_vector<int64_t>(); }), StartsWith("to_vector: element 0 (inf)"));
}

TEST_CASE("set_printoptions sets digits, summarising and notation for the process, as torch.set_printoptions") {
  const Tensor x = tensor({0.1, 1.0 / 3}, kFloat64);
  CHECK(x.to_string() == "tensor([0.1000, 0.3333], shape=[2], dtype=float64)");
  set_printoptions({.precision = 17});
  CHECK(x.to_string() == "tensor([0.10000000000000001, 0.33333333333333331], shape=[2], dtype=float64)");
  set_printoptions({.precision = 2, .sci_mode = true});
  CHECK(x.to_string() == "tensor([1.00e-01, 3.33e-01], shape=[2], dtype=float64)");
  set_printoptions({.threshold = 5, .edgeitems = 1});
  CHECK(arange(10).to_string() == "tensor([0, ..., 9], shape=[10], dtype=int64)");
  CHECK(get_printoptions().edgeitems == 1);
  set_printoptions({});
  CHECK(x.to_string() == "tensor([0.1000, 0.3333], shape=[2], dtype=float64)");
  CHECK_THAT(error_of([] { set_printoptions({.precision = -1}); }), StartsWith("set_printoptions: precision must be in [0, 30]"));
  CHECK_THAT(error_of([] { set_printoptions({.edgeitems = 0}); }), StartsWith("set_printoptions: edgeitems must be in"));
  CHECK(get_printoptions().precision == 4);  // a refused call changes nothing
  std::ostringstream os;
  os << Shape{2, 3} << " " << Shape{};
  CHECK(os.str() == "[2,3] []");
}

TEST_CASE("int64 tensors print their exact values, and arange refuses int64 values past 2^63") {
  const Tensor big = tensor({INT64_MAX, INT64_MIN, int64_t(1) << 53 | 1});
  CHECK(big.to_string() ==
        "tensor([ 9223372036854775807, -9223372036854775808,     9007199254740993], shape=[3], dtype=int64)");
  CHECK(tensor(INT64_MAX - 1).to_string() == "tensor(9223372036854775806, shape=[], dtype=int64)");
  CHECK_THAT(error_of([] { (void)arange(0, 1e300, 1e299, kInt64); }), StartsWith("arange: [0, 1e+300) in steps of 1e+299 has values int64 cannot hold"));
  CHECK(arange(0, 1e300, 1e299, kFloat64).numel() == 10);
}

TEST_CASE("printing takes time linear in the number of dims, and prints at most 2^20 elements whatever the options or sizes") {
  const int64_t D = 100000;
  const Tensor deep = zeros(Shape(D, 1));
  const std::string s = deep.to_string();
  CHECK(std::count(s.begin(), s.end(), '[') == D + 1);  // D brackets and the shape's
  CHECK(s.find("0.") != std::string::npos);
  const Tensor two = zeros({2}).view({2, 1, 1});
  CHECK(two.to_string() == "tensor([[[0.]],\n\n        [[0.]]], shape=[2,1,1], dtype=float32)");

  set_printoptions({.threshold = 0, .edgeitems = 1000000});
  const Tensor huge = ones({1}).expand({1000000, 1000000});
  const std::string h = huge.to_string();
  set_printoptions({});
  CHECK(h.size() < 30'000'000);
  CHECK_THAT(h, Contains("... (printing stops at 1048576 elements)]]"));
  CHECK_THAT(h, EndsWith("shape=[1000000,1000000], dtype=float32)"));
  set_printoptions({.threshold = INT64_MAX});
  const std::string wide = ones({1}).expand({int64_t(1) << 50, 64}).to_string();  // sizes are never listed
  const std::string flat = ones({1}).expand({int64_t(1) << 28, int64_t(1) << 27}).to_string();
  set_printoptions({.precision = 30, .sci_mode = false});
  const std::string digits = tensor({1e70, 1e308}, kFloat64).to_string();
  set_printoptions({});
  CHECK_THAT(wide, Contains("(printing stops at 1048576 elements)"));
  CHECK_THAT(flat, Contains("(printing stops at 1048576 elements)"));
  CHECK_THAT(digits, Contains("10000000000000000725314363815292351261583744096465219555182101554790400."));
  CHECK(digits.size() > 2 * 309);  // every digit of 1e308, not cut at 63 characters
  CHECK(ones({1}).expand({1000000, 1000000}).to_string() ==
        "tensor([[1., 1., 1., ..., 1., 1., 1.],\n        [1., 1., 1., ..., 1., 1., 1.],\n"
        "        [1., 1., 1., ..., 1., 1., 1.],\n        ...,\n        [1., 1., 1., ..., 1., 1., 1.],\n"
        "        [1., 1., 1., ..., 1., 1., 1.],\n        [1., 1., 1., ..., 1., 1., 1.]], shape=[1000000,1000000], dtype=float32)");
}
