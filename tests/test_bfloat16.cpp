// bfloat16: float32 -> bfloat16 rounds to nearest, ties to even (checked against an exact
// reference over a sweep of float32 bit patterns), special values keep their meaning,
// tensors hold, convert, view, print and save bfloat16 bit for bit, and ops that compute
// refuse it by name.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/bfloat16.h"
#include "core/ops.h"
#include "io/checkpoint.h"
#include "io/tensor_file.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "test_util.h"

using namespace ember;
using namespace ember::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// The bfloat16 nearest to finite x, ties to even, found by comparing x with the two
// bfloat16 around it exactly (in double, which holds x, both neighbours and the
// differences exactly).
uint16_t reference_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t toward_zero = uint16_t(u >> 16), away = uint16_t(toward_zero + 1);
  const double d = std::fabs((double)x);
  const double lo = std::fabs((double)bf16_to_float(toward_zero));
  const double hi = away == 0x7f80 || away == 0xff80 ? 0x1p128 : std::fabs((double)bf16_to_float(away));
  if (d - lo < hi - d) return toward_zero;
  if (d - lo > hi - d) return away;
  return (toward_zero & 1) ? away : toward_zero;
}

// The bit patterns of a bfloat16 tensor, row-major.
std::vector<uint16_t> bits_of(const Tensor& t) {
  std::vector<uint16_t> out;
  for (BFloat16 v : t.to_vector<BFloat16>()) out.push_back(v.bits);
  return out;
}

Tensor from_bf16_bits(const std::vector<uint16_t>& bits) {
  Tensor t = empty({(int64_t)bits.size()}, kBFloat16);
  for (size_t i = 0; i < bits.size(); i++) t.data<BFloat16>()[i] = BFloat16::from_bits(bits[i]);
  return t;
}

bool python_has(const std::string& modules) {
  return std::system(("/usr/bin/python3 -c 'import " + modules + "' 2>/dev/null").c_str()) == 0;
}

}  // namespace

TEST_CASE("float_to_bf16 rounds to nearest with ties to even") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3f80);  // halfway between 1 and 1 + 2^-7: to the even 1
  CHECK(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);  // halfway between 1 + 2^-7 and 1 + 2^-6: up, to even
  CHECK(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);  // just past halfway: up
  CHECK(float_to_bf16(1.0f + 0x1p-8f - 0x1p-20f) == 0x3f80);  // just short of it: down
  CHECK(float_to_bf16(-(1.0f + 3 * 0x1p-8f)) == 0xbf82);  // the sign does not change the rounding
  CHECK(float_to_bf16(0.1f) == 0x3dcd);
  CHECK(bf16_to_float(0x3dcd) == 0.10009765625f);
}

TEST_CASE("float_to_bf16 keeps zeros, subnormals, infinities and NaN, and overflows to infinity") {
  CHECK(float_to_bf16(0.0f) == 0x0000);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  CHECK(float_to_bf16(0x1p-133f) == 0x0001);  // the smallest bfloat16 subnormal, not flushed
  CHECK(float_to_bf16(-0x1p-133f) == 0x8001);
  CHECK(float_to_bf16(0x1p-134f) == 0x0000);  // halfway between 0 and it: to the even 0
  CHECK(float_to_bf16(3 * 0x1p-134f) == 0x0002);  // halfway between 1 and 2 units: to the even 2
  CHECK(float_to_bf16(from_bits(0x00000001)) == 0x0000);  // the smallest float32 subnormal
  CHECK(float_to_bf16(INFINITY) == 0x7f80);
  CHECK(float_to_bf16(-INFINITY) == 0xff80);
  CHECK(float_to_bf16(bf16_to_float(0x7f7f)) == 0x7f7f);  // the largest bfloat16 stays
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // past it: infinity
  CHECK(float_to_bf16(-std::numeric_limits<float>::max()) == 0xff80);
  CHECK(float_to_bf16(from_bits(0x7f7f7fff)) == 0x7f7f);  // just short of halfway to infinity
  CHECK(float_to_bf16(from_bits(0x7f7f8000)) == 0x7f80);  // halfway: to the even, infinity
  // NaN stays NaN, quiet, of its sign, with the payload's top bits; never infinity
  CHECK(float_to_bf16(from_bits(0x7fc00000)) == 0x7fc0);
  CHECK(float_to_bf16(from_bits(0xffc00000)) == 0xffc0);
  CHECK(float_to_bf16(from_bits(0x7f800001)) == 0x7fc0);  // a signalling NaN whose payload is all rounded off
  CHECK(float_to_bf16(from_bits(0x7fffffff)) == 0x7fff);  // rounding would carry into the sign
  CHECK(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f810000)))));
}

TEST_CASE("float_to_bf16 agrees with an exact reference over a sweep of float32 bit patterns") {
  int64_t checked = 0, wrong = 0;
  auto check_one = [&](uint32_t u) {
    const float x = from_bits(u);
    const uint16_t got = float_to_bf16(x);
    bool ok;
    if (std::isnan(x)) ok = std::isnan(bf16_to_float(got)) && (got & 0x40) && (got >> 15) == (u >> 31);
    else ok = got == reference_bf16(x);
    if (!ok && wrong++ < 5) FAIL_CHECK("pattern " << u << ": got " << got << ", expected " << reference_bf16(x));
    checked++;
  };
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4093) check_one((uint32_t)u);  // about a million
  // every bfloat16 with the dropped half just under, at and just over a tie, and zero
  for (uint32_t high = 0; high < 0x10000; high++)
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) check_one(high << 16 | low);
  CHECK(wrong == 0);
  CHECK(checked > 1000000);
}

TEST_CASE("every bfloat16 goes to float32 and back unchanged (NaN quiet)") {
  for (uint32_t b = 0; b < 0x10000; b++) {
    const float f = bf16_to_float((uint16_t)b);
    CHECK(std::bit_cast<uint32_t>(f) == b << 16);  // exact: the top half
    if (!std::isnan(f)) REQUIRE(float_to_bf16(f) == b);
    else REQUIRE(float_to_bf16(f) == (b | 0x40));
  }
}

TEST_CASE("bfloat16 tensors are created, read and converted from and to every dtype") {
  CHECK(dtype_size(kBFloat16) == 2);
  CHECK(std::string(dtype_name(kBFloat16)) == "bfloat16");
  CHECK(is_floating(kBFloat16));
  CHECK_FALSE(is_computing_float(kBFloat16));
  CHECK(bits_of(zeros({2}, kBFloat16)) == std::vector<uint16_t>{0, 0});
  CHECK(bits_of(ones({2}, kBFloat16)) == std::vector<uint16_t>{0x3f80, 0x3f80});
  CHECK(bits_of(full({1}, 0.1, kBFloat16)) == std::vector<uint16_t>{0x3dcd});
  CHECK(bits_of(tensor({0.1, -2.0}, kBFloat16)) == std::vector<uint16_t>{0x3dcd, 0xc000});
  CHECK(bits_of(arange(0, 3, 1, kBFloat16)) == std::vector<uint16_t>{0, 0x3f80, 0x4000});
  CHECK(empty({2, 3}, kBFloat16).storage()->nbytes == 12);
  const Tensor r = randn({1000}, kBFloat16);
  CHECK(r.dtype() == kBFloat16);
  CHECK(std::fabs(mean(r.to(kFloat32)).item()) < 0.2);

  // float32 -> bfloat16 -> float32 is the rounding; float64 and int64 go through float32
  const Tensor x = tensor({0.1f, -3.0f, 1e-40f, 65537.0f, NAN}).to(kBFloat16);
  CHECK(bits_of(x) == std::vector<uint16_t>{0x3dcd, 0xc040, float_to_bf16(1e-40f), 0x4780, 0x7fc0});
  CHECK(bits_of(tensor({0.1, 65537.0}, kFloat64).to(kBFloat16)) == std::vector<uint16_t>{0x3dcd, 0x4780});
  CHECK(bits_of(tensor({int64_t(3), int64_t(-257)}).to(kBFloat16)) == std::vector<uint16_t>{0x4040, 0xc380});
  CHECK(bits_of(tensor({true, false}).to(kBFloat16)) == std::vector<uint16_t>{0x3f80, 0});
  CHECK(x.to(kFloat32).to_vector<float>()[0] == 0.10009765625f);
  CHECK(x.to(kFloat64).to_vector<double>()[3] == 65536.0);
  CHECK(x.slice(0, {.start = 0, .end = 2}).to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, -3});
  CHECK(x.to(kBool).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 1, 1, 1});
  CHECK(tensor({-0.0}).to(kBFloat16).to(kBool).to_vector<uint8_t>() == std::vector<uint8_t>{0});
  CHECK_THROWS_WITH(x.to(kInt64), StartsWith("to: element 4 (nan) of a bfloat16 tensor") && Contains("(it is not a number)"));
  CHECK_THROWS_WITH(tensor({1e30}).to(kBFloat16).to(kInt64), Contains("cannot be converted to int64"));
  CHECK(x.at({1}) == -3.0);
  CHECK(x.select(0, 0).item() == 0.10009765625);
  CHECK(x.to_vector<double>()[2] == (double)bf16_to_float(float_to_bf16(1e-40f)));
}

TEST_CASE("bfloat16 uniform draws round down to the grid and never reach the upper bound") {
  // each value is the float32 draw of the same seed rounded down: x <= draw < next bfloat16
  for (const auto& [lo, hi] : std::vector<std::pair<double, double>>{{0, 1}, {-1, 1}, {-3, -2}, {0.1, 0.2}}) {
    Generator g32(7), g16(7);
    const Tensor draws = uniform({200000}, lo, hi, kFloat32, &g32);
    const Tensor x = uniform({200000}, lo, hi, kBFloat16, &g16);
    const std::vector<float> d = draws.to_vector<float>();
    const std::vector<uint16_t> b = bits_of(x);
    // the bfloat16 next above and next below bit pattern c (finite, not -0 below)
    auto above = [](uint16_t c) { return c == 0x8000 ? bf16_to_float(1) : bf16_to_float(uint16_t(c & 0x8000 ? c - 1 : c + 1)); };
    auto below = [](uint16_t c) { return c == 0 ? -bf16_to_float(1) : bf16_to_float(uint16_t(c & 0x8000 ? c + 1 : c - 1)); };
    int64_t bad = 0, at_top = 0;
    for (size_t i = 0; i < d.size(); i++) {
      const float v = bf16_to_float(b[i]);
      const bool floor = v <= d[i] && d[i] < above(b[i]);
      const bool first = d[i] < v && below(b[i]) < lo;  // a draw below the first bfloat16 from lo
      if (!(v >= lo && v < hi) || !(floor || first)) bad++;
      if (v == float(hi)) at_top++;
    }
    INFO("[" << lo << ", " << hi << ")");
    CHECK(bad == 0);
    CHECK(at_top == 0);
  }
  // rand: 2M draws all in [0, 1), the top value 1 - 2^-8 (to nearest, about 0.2% would be 1)
  Generator g(0);
  const Tensor r = rand({2000000}, kBFloat16, &g).to(kFloat32);
  CHECK(max(r).item() == 1.0 - std::ldexp(1.0, -8));
  CHECK(-max(neg(r)).item() >= 0.0);
  // no bfloat16 in [lo, hi): lo rounded; lo == hi: lo
  CHECK(uniform({3}, 1.001, 1.002, kBFloat16).to(kFloat32).to_vector<float>() == std::vector<float>(3, 1.0f));
  CHECK(uniform({3}, 0.5, 0.5, kBFloat16).to(kFloat32).to_vector<float>() == std::vector<float>(3, 0.5f));
}

TEST_CASE("to() converts non-contiguous tensors to and from bfloat16") {
  const Tensor f = mul(arange(0, 12, 1, kFloat32).view({3, 4}), 0.1);
  const Tensor t = f.t();  // [4, 3], strides [1, 4]
  const Tensor b = t.to(kBFloat16);
  REQUIRE(b.shape() == Shape{4, 3});
  std::vector<uint16_t> expected;
  for (float v : t.to_vector<float>()) expected.push_back(float_to_bf16(v));
  CHECK(bits_of(b) == expected);
  const Tensor back = b.t().to(kFloat32);  // a non-contiguous bfloat16 source
  const std::vector<float> got = back.to_vector<float>();
  const std::vector<float> want = f.to_vector<float>();
  for (size_t i = 0; i < want.size(); i++) CHECK(got[i] == bf16_to_float(float_to_bf16(want[i])));
  const Tensor every_other = arange(0, 8, 1, kFloat64).slice(0, {.step = 2}).to(kBFloat16);
  CHECK(every_other.to_vector<double>() == std::vector<double>{0, 2, 4, 6});
}

TEST_CASE("views, copies and indexing move bfloat16 elements whole") {
  const Tensor x = from_bf16_bits({0x3dcd, 0x7fc1, 0x8000, 0x0001, 0x7f80, 0xc040});
  const Tensor m = x.view({2, 3});
  CHECK(bits_of(m.t().contiguous()) == std::vector<uint16_t>{0x3dcd, 0x0001, 0x7fc1, 0x7f80, 0x8000, 0xc040});
  CHECK(bits_of(m.reshape({3, 2}).clone()) == bits_of(x));
  CHECK(bits_of(m.slice(1, {.start = 1})) == std::vector<uint16_t>{0x7fc1, 0x8000, 0x7f80, 0xc040});
  std::vector<uint16_t> twice = bits_of(x);
  twice.insert(twice.end(), twice.begin(), twice.end());
  CHECK(bits_of(cat({x, x}, 0)) == twice);
  CHECK(bits_of(index_select(x, 0, tensor({int64_t(5), int64_t(0)}))) == std::vector<uint16_t>{0xc040, 0x3dcd});
  CHECK(bits_of(where(tensor({true, false, true, false, true, false}), x, zeros({6}, kBFloat16))) ==
        std::vector<uint16_t>{0x3dcd, 0, 0x8000, 0, 0x7f80, 0});
  CHECK(bits_of(masked_fill(m, tensor({true, false, true}), 0.1)) ==
        std::vector<uint16_t>{0x3dcd, 0x7fc1, 0x3dcd, 0x3dcd, 0x7f80, 0x3dcd});
  CHECK(bits_of(tril(m)) == std::vector<uint16_t>{0x3dcd, 0, 0, 0x0001, 0x7f80, 0});
  Tensor y = zeros({2, 3}, kBFloat16);
  y.copy_(m);
  CHECK(equal(y, m));  // bits, the NaN's payload too
  y.copy_(tensor({0.1, 0.2, 0.3}, kFloat64));  // broadcast and converted
  CHECK(bits_of(y.select(0, 1)) == std::vector<uint16_t>{0x3dcd, 0x3e4d, 0x3e9a});
  y.fill_(-1.5);
  CHECK(bits_of(y.select(0, 0)) == std::vector<uint16_t>{0xbfc0, 0xbfc0, 0xbfc0});
}

TEST_CASE("bfloat16 tensors compare by value, a number rounded to bfloat16 first") {
  const Tensor x = tensor({0.1, 1.0, (double)NAN}).to(kBFloat16);
  CHECK(eq(x, 0.1).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 0});  // 0.1 as a bfloat16, as PyTorch
  CHECK(lt(x, 1.0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 0});
  CHECK(ne(x, x).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 1});
  CHECK(ne(x, NAN).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 1});
  CHECK(ge(tensor({-0.0, 3e38}).to(kBFloat16), 0.0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1});
  // read where they lie, broadcast views too
  CHECK(sum(eq(ones({1}, kBFloat16).expand({1 << 20}), 1.0).to(kInt64)).item() == double(1 << 20));
  CHECK(eq(x.slice(0, {.start = 0, .end = 3, .step = 2}), 0.1).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0});
  CHECK(allclose(x.slice(0, {.end = 2}), tensor({0.1, 1.0}).to(kBFloat16)));
  CHECK_FALSE(allclose(x.slice(0, {.end = 2}), tensor({0.2, 1.0}).to(kBFloat16)));
  CHECK(isclose(x, x, 1e-5, 1e-8, true).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 1});
  CHECK(equal(x, x.clone()));
  CHECK_THROWS_WITH(eq(x, tensor({0.1, 1.0, 0.0})), Contains("same dtype"));
}

TEST_CASE("bfloat16 tensors print as PyTorch prints them") {
  CHECK(tensor({1.0, 0.1}).to(kBFloat16).to_string() == "tensor([1.0000, 0.1001], shape=[2], dtype=bfloat16)");
  CHECK(tensor({1.0, 2.0, 3.0}).to(kBFloat16).to_string() == "tensor([1., 2., 3.], shape=[3], dtype=bfloat16)");
  CHECK(tensor({1e10, 1e-5, 3.0}).to(kBFloat16).to_string() ==
        "tensor([9.9992e+09, 1.0014e-05, 3.0000e+00], shape=[3], dtype=bfloat16)");
  CHECK(tensor({(double)NAN, (double)INFINITY, 1.5}).to(kBFloat16).to_string() == "tensor([   nan,    inf, 1.5000], shape=[3], dtype=bfloat16)");
  CHECK(tensor(0.1).to(kBFloat16).to_string() == "tensor(0.1001, shape=[], dtype=bfloat16)");
  CHECK(zeros({2, 0}, kBFloat16).to_string() == "tensor([], shape=[2,0], dtype=bfloat16)");
}

TEST_CASE("ops that compute refuse bfloat16 by name, saying to convert") {
  const Tensor x = ones({2, 2}, kBFloat16);
  const std::string hint = "bfloat16 tensors hold and convert values; compute in float32 (.to(kFloat32))";
  CHECK_THROWS_WITH(add(x, x), StartsWith("add: " + hint + ", got bfloat16 of shape [2,2]"));
  CHECK_THROWS_WITH(mul(x, 2.0), StartsWith("mul: " + hint + ", got bfloat16 of shape [2,2]"));
  CHECK_THROWS_WITH(exp(x), StartsWith("exp: " + hint));
  CHECK_THROWS_WITH(sum(x), StartsWith("sum: " + hint + ", got bfloat16 of shape [2,2]"));
  CHECK_THROWS_WITH(mean(x), StartsWith("mean: " + hint));
  CHECK_THROWS_WITH(amax(x, {0}), StartsWith("amax: " + hint + ", got bfloat16 of shape [2,2]"));
  CHECK_THROWS_WITH(amin(x, {0}), StartsWith("amin: " + hint));
  CHECK_THROWS_WITH(max(x), StartsWith("max: " + hint));
  CHECK_THROWS_WITH(max(x, 1), StartsWith("max: " + hint + ", got bfloat16 of shape [2,2]"));
  CHECK_THROWS_WITH(neg(x), StartsWith("neg: " + hint + ", got bfloat16 of shape [2,2]"));
  CHECK_THROWS_WITH(trace(x), StartsWith("trace: " + hint + ", got bfloat16 of shape [2,2]"));
  CHECK_THROWS_WITH(outer(x.select(0, 0), x.select(0, 1)), StartsWith("outer: " + hint + ", got bfloat16 of shape [2]"));
  CHECK_THROWS_WITH(matmul(x, x), StartsWith("matmul: " + hint));
  CHECK_THROWS_WITH(softmax(x, -1), StartsWith("softmax: " + hint));
  CHECK_THROWS_WITH(cumsum(x, 0), StartsWith("cumsum: " + hint + ", got bfloat16 of shape [2,2]"));
  CHECK_THROWS_WITH(argmax(x, 0), StartsWith("argmax: " + hint + ", got bfloat16 of shape [2,2]"));
  CHECK_THROWS_WITH(dropout(x, 0.5, true), StartsWith("dropout: " + hint));
  CHECK_THROWS_WITH(nn::layer_norm(x, Tensor(), Tensor()), Contains("float32 or float64"));
  CHECK_THROWS_WITH(nn::cross_entropy(x, tensor({int64_t(0), int64_t(1)})), Contains("float32 or float64"));
  CHECK_THROWS_WITH(uniform({2}, 0, 1, kBool), Contains("uniform"));
  // no gradients: refused on a leaf; a conversion of a tensor that requires grad gives none
  Tensor leaf = ones({2}, kBFloat16);
  CHECK_THROWS_WITH(leaf.requires_grad_(), StartsWith("requires_grad_: bfloat16 tensors hold and convert values"));
  CHECK_FALSE(leaf.requires_grad());
  const Tensor w = ones({2}).requires_grad_();
  CHECK_FALSE(w.to(kBFloat16).requires_grad());
  CHECK(w.to(kBFloat16).to(kFloat32).grad_fn() == nullptr);
  // modules keep float32 or float64 parameters
  nn::Linear lin(2, 2);
  CHECK_THROWS_WITH(lin.to(kBFloat16), Contains("float32 or float64"));
  CHECK_THROWS_WITH(nn::Linear(2, 2, true, nullptr, kBFloat16), Contains("bfloat16"));
}

TEST_CASE("a bfloat16 tensor saved in a tensor file or a checkpoint comes back bit for bit") {
  ScratchDir dir;
  // NaN with payloads (signalling included), -0, a subnormal, infinities, the largest
  const std::vector<uint16_t> bits = {0x3dcd, 0x7fc1, 0x7f81, 0xffc0, 0x8000, 0x0001, 0x7f80, 0xff80, 0x7f7f, 0xc040};
  const Tensor x = from_bf16_bits(bits).view({2, 5});
  io::save(dir.file("t.h5"), x.t());  // non-contiguous
  const Tensor back = io::load(dir.file("t.h5"));
  CHECK(back.dtype() == kBFloat16);
  CHECK(bits_of(back) == bits_of(x.t()));
  CHECK_THROWS_WITH(io::save(dir.file("t.npz"), {{"x", x}}),
                    Contains("t.npz': NumPy has no bfloat16, so the bfloat16 tensor 'x' (shape [2,5])"));
  CHECK_THROWS_WITH(io::save(dir.file("t.npy"), x), Contains("NumPy has no bfloat16"));
  CHECK_FALSE(std::filesystem::exists(dir.file("t.npz")));

  io::Checkpoint c;
  c.model["w"] = x;
  c.model["f"] = tensor({0.1f});
  io::save_checkpoint(dir.file("c.h5"), c);
  const io::Checkpoint r = io::read_checkpoint(dir.file("c.h5"));
  CHECK(r.model.at("w").dtype() == kBFloat16);
  CHECK(bits_of(r.model.at("w")) == bits);
  CHECK(r.model.at("f").dtype() == kFloat32);
  // loading into a bfloat16 tensor restores the bits; into float32, the dtypes are named as a mismatch
  io::ResumeTargets into;
  into.model = {{"w", zeros({2, 5}, kBFloat16)}, {"f", zeros({1})}};
  io::load_checkpoint(dir.file("c.h5"), into);
  CHECK(bits_of(into.model.at("w")) == bits);
  io::ResumeTargets wrong;
  wrong.model = {{"w", zeros({2, 5})}, {"f", zeros({1})}};
  CHECK_THROWS_WITH(io::load_checkpoint(dir.file("c.h5"), wrong),
                    Contains("key '/model/w': bfloat16 [2,5] in the file, float32 [2,5] in the model"));
}

TEST_CASE("h5py reads a saved bfloat16 tensor as float32 marked bfloat16") {
  if (!python_has("numpy, h5py")) {
    WARN("skipped: /usr/bin/python3 lacks numpy or h5py");
    return;
  }
  ScratchDir dir;
  io::save(dir.file("t.h5"), {{"w", tensor({0.1, -2.0, 1e-40, 3.4e38}).to(kBFloat16)}, {"f", tensor({0.1f})}});
  const std::string script = dir.file("check.py");
  std::ofstream(script) << R"(import sys, numpy as np, h5py
with h5py.File(sys.argv[1] + "/t.h5", "r") as h:
    w = h["w"]
    assert w.dtype == np.float32, w.dtype
    assert w.attrs["dtype"] == "bfloat16", dict(w.attrs)
    assert "dtype" not in h["f"].attrs
    bits = w[()].view(np.uint32)
    assert (bits & 0xffff == 0).all(), bits
    assert list(bits >> 16) == [0x3dcd, 0xc000, 0x0001, 0x7f80], [hex(b) for b in bits >> 16]
    # a float32 dataset marked bfloat16 written by h5py, with values that are not bfloat16
    with h5py.File(sys.argv[1] + "/py.h5", "w") as out:
        out["v"] = np.array([0.1, 1.0], dtype=np.float32)
        out["v"].attrs["dtype"] = "bfloat16"
    # the mark on what ember never writes so; attributes named dtype that are not ember's mark
    for name, data, mark in (("py64", np.array([0.5]), "bfloat16"), ("pyint", np.array([3]), "bfloat16"),
                             ("pyarr", np.array([0.5], np.float32), ["bfloat16", "x"]),
                             ("pynum", np.array([0.5], np.float32), 16),
                             ("pyone", np.array([0.5], np.float32), np.array([b"bfloat16"])),
                             ("pynul", np.array([0.5], np.float32), np.bytes_(b"float32\0junk"))):
        with h5py.File(sys.argv[1] + "/" + name + ".h5", "w") as out:
            out["v"] = data
            out["v"].attrs["dtype"] = mark
)";
  REQUIRE(std::system(("/usr/bin/python3 " + script + " " + dir.path.string()).c_str()) == 0);
  const Tensor v = io::load(dir.file("py.h5"));
  CHECK(v.dtype() == kBFloat16);
  CHECK(bits_of(v) == std::vector<uint16_t>{0x3dcd, 0x3f80});  // rounded to nearest
  CHECK_THROWS_WITH(io::load(dir.file("py64.h5")),
                    Contains("dataset '/v' in '" + dir.file("py64.h5") + "' is marked bfloat16 but stored as float64"));
  CHECK_THROWS_WITH(io::load(dir.file("pyint.h5")), Contains("is marked bfloat16 but stored as int64"));
  CHECK(io::load(dir.file("pyarr.h5")).dtype() == kFloat32);
  CHECK(io::load(dir.file("pynum.h5")).dtype() == kFloat32);
  CHECK(io::load(dir.file("pyone.h5")).dtype() == kFloat32);  // (a one-element array: not a scalar)
  CHECK(io::load(dir.file("pynul.h5")).dtype() == kFloat32);  // (text ember never writes)
}
