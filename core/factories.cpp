// Creating tensors: empty, zeros, ones, full, arange, from values, and random ones from a
// Generator (rand, uniform, normal, randn, randint).
#include "core/tensor.h"

#include <bit>
#include <cmath>

#include "core/kernels/dispatch.h"
#include "core/parallel.h"
#include "core/random.h"

namespace ember {

// ---------------------------------------------------------------- creation
static Tensor allocate(const Shape& shape, DType dtype, bool zero_fill, const char* op) {
  const int64_t bytes = checked_numel(shape, op) * (int64_t)dtype_size(dtype);
  auto p = std::make_shared<TensorImpl>();
  try {
    p->storage = std::make_shared<Storage>((size_t)bytes, zero_fill);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(cat_str("out of memory: a ", shape, " ", dtype_name(dtype), " tensor of ", bytes, " bytes"));
  }
  p->shape = shape;
  p->strides = contiguous_strides(shape);
  p->dtype = dtype;
  return Tensor(p);
}

Tensor empty(const Shape& shape, DType dtype) { return allocate(shape, dtype, false, "empty"); }
Tensor zeros(const Shape& shape, DType dtype) { return allocate(shape, dtype, true, "zeros"); }
Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor full(const Shape& shape, double v, DType dtype) {
  if (v == 0) return zeros(shape, dtype);
  Tensor t = allocate(shape, dtype, false, "full");
  t.fill_(v);
  return t;
}
Tensor eye(int64_t n, int64_t m, DType dtype) {
  if (m == -1) m = n;
  if (n < 0 || m < 0) fail("eye", "expected non-negative sizes, got n = ", n, " and m = ", m);
  Tensor t = zeros({n, m}, dtype);
  if (n > 0 && m > 0) t.diagonal().fill_(1.0);
  return t;
}
Tensor zeros_like(const Tensor& t) {
  check_defined(t, "zeros_like");
  return zeros(t.shape(), t.dtype());
}
Tensor ones_like(const Tensor& t) {
  check_defined(t, "ones_like");
  return ones(t.shape(), t.dtype());
}
Tensor full_like(const Tensor& t, double v) {
  check_defined(t, "full_like");
  return full(t.shape(), v, t.dtype());
}
Tensor scalar_tensor(double v, DType dtype) { return full({}, v, dtype); }

Tensor arange(double start, double end, double step, std::optional<DType> given) {
  if (step == 0) fail("arange", "step must be nonzero");
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    fail("arange", "start, end and step must be finite, got ", start, ", ", end, " and ", step);
  auto whole = [](double x) { return x == std::floor(x); };
  const DType dtype = given ? *given : whole(start) && whole(end) && whole(step) ? kInt64 : kFloat32;
  const double n = std::ceil((end - start) / step);
  if (!(n <= double(kMaxElements)))
    fail("arange", "[", start, ", ", end, ") in steps of ", step, " would have more than 2^56 elements");
  const int64_t len = n > 0 ? (int64_t)n : 0;
  if (dtype == kInt64 && len > 0 && !(fits_int64(start) && fits_int64(start + double(len - 1) * step)))
    fail("arange", "[", start, ", ", end, ") in steps of ", step, " has values int64 cannot hold");
  Tensor t = empty({len}, dtype);
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < len; i++) p[i] = static_cast<T>(start + i * step);
  });
  return t;
}
Tensor arange(int64_t end, DType dtype) { return arange(0.0, (double)end, 1.0, dtype); }

template <class T>
static Tensor from_values(const std::vector<T>& v, const Shape& shape, DType dt, const char* op = "from_vector") {
  const int64_t n = checked_numel(shape, op);
  if ((int64_t)v.size() != n) fail(op, "shape ", shape, " needs ", n, " values, got ", (int64_t)v.size());
  if constexpr (std::is_floating_point_v<T>)
    if (dt == kInt64)
      for (size_t i = 0; i < v.size(); i++)
        if (!fits_int64((double)v[i]))
          fail(op, "value ", (int64_t)i, " (", (double)v[i], ")", int64_refusal((double)v[i]));
  Tensor t = empty(shape, dt);
  dispatch_all(dt, [&](auto tag) {
    using S = decltype(tag);
    S* p = t.data<S>();
    // bool holds 0 or 1: any nonzero value is true, as in copy() and fill()
    for (size_t i = 0; i < v.size(); i++) p[i] = std::is_same_v<S, uint8_t> ? S(v[i] != 0) : static_cast<S>(v[i]);
  });
  return t;
}
Tensor from_vector(const std::vector<float>& v, const Shape& s) { return from_values(v, s, kFloat32); }
Tensor from_vector(const std::vector<double>& v, const Shape& s) { return from_values(v, s, kFloat64); }
Tensor from_vector(const std::vector<int64_t>& v, const Shape& s) { return from_values(v, s, kInt64); }
Tensor from_vector(const std::vector<double>& v, const Shape& s, DType dt) { return from_values(v, s, dt); }
namespace literal_detail {
Tensor make(const std::vector<double>& v, const Shape& s, DType dt, const char* op) { return from_values(v, s, dt, op); }
Tensor make(const std::vector<int64_t>& v, const Shape& s, DType dt, const char* op) { return from_values(v, s, dt, op); }
Tensor make(const std::vector<uint8_t>& v, const Shape& s, DType dt, const char* op) { return from_values(v, s, dt, op); }
void fail_unsigned(unsigned long long value, const char* op) {
  fail(op, "the value ", std::to_string(value), " does not fit int64");
}
void fail_ragged(const Shape& shape, size_t level, size_t got) {
  fail("tensor", "expected lists of equal length at each level: a list at level ", (int64_t)level, " has ",
       (int64_t)got, " elements where an earlier one has ", shape[level], " (sizes so far ", shape, ")");
}
}  // namespace literal_detail

Tensor from_bools(const std::vector<bool>& v, const Shape& s) {
  std::vector<uint8_t> u(v.begin(), v.end());
  return from_values(u, s, kBool, "from_bools");
}

// ---------------------------------------------------------------- random
static Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }

// Float32 draws in [lo, hi) to bfloat16, each rounded down to the grid, so that a value x
// stands for the draws in [x, the next bfloat16) and none reaches hi (rounded to nearest,
// those in hi's last half step would); a draw that falls below lo then (lo between two
// bfloat16) takes the first bfloat16 from lo, or lo rounded if [lo, hi) holds none.
static Tensor bf16_below(const Tensor& draws, double lo, double hi) {
  auto down = [](float v) {  // the largest bfloat16 <= v (v finite)
    const uint32_t u = std::bit_cast<uint32_t>(v), top = u >> 16;
    return uint16_t((u & 0xffffu) && (u >> 31) ? top + 1 : top);
  };
  auto up = [](float v) {  // the smallest bfloat16 >= v (v finite)
    const uint32_t u = std::bit_cast<uint32_t>(v), top = u >> 16;
    return uint16_t((u & 0xffffu) && !(u >> 31) ? top + 1 : top);
  };
  const float flo = static_cast<float>(lo);
  const uint16_t first = bf16_to_float(up(flo)) < hi ? up(flo) : float_to_bf16(flo);
  Tensor t = allocate(draws.shape(), kBFloat16, false, "uniform");
  const float* src = draws.data<float>();
  BFloat16* dst = t.data<BFloat16>();
  parallel_for(t.numel(), cost::kCopy, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      const uint16_t x = down(src[i]);
      dst[i] = BFloat16::from_bits(bf16_to_float(x) < lo ? first : x);
    }
  });
  return t;
}

Tensor rand(const Shape& shape, DType dtype, Generator* gen) {
  if (!is_floating(dtype)) fail("rand", "expected a float dtype, got ", dtype_name(dtype));
  return uniform(shape, 0.0, 1.0, dtype, gen);
}

Tensor uniform(const Shape& shape, double lo, double hi, DType dtype, Generator* g) {
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo <= hi))
    fail("uniform", "expected finite bounds low <= high, got ", lo, " and ", hi);
  if (dtype == kBFloat16) return bf16_below(uniform(shape, lo, hi, kFloat32, g), lo, hi);
  Tensor t = allocate(shape, dtype, false, "uniform");
  Generator& gen = gen_or_default(g);
  const int64_t n = t.numel();
  const uint64_t first = gen.reserve(n);
  dispatch_float(dtype, "uniform", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    parallel_for(n, cost::kExp, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) {
        T v = static_cast<T>(lo + (hi - lo) * gen.uniform(first + i));
        p[i] = v < static_cast<T>(hi) ? v : static_cast<T>(lo);  // float rounding may reach hi
      }
    });
  });
  return t;
}

Tensor normal(const Shape& shape, double mean, double std, DType dtype, Generator* g) {
  if (!(std::isfinite(mean) && std::isfinite(std) && std >= 0))
    fail("normal", "expected a finite mean and a finite std >= 0, got ", mean, " and ", std);
  if (dtype == kBFloat16) return normal(shape, mean, std, kFloat32, g).to(kBFloat16);
  Tensor t = allocate(shape, dtype, false, "normal");
  Generator& gen = gen_or_default(g);
  const int64_t n = t.numel();
  const uint64_t first = gen.reserve(2 * ((n + 1) / 2));
  // Box-Muller: draws 2i and 2i+1 give elements 2i and 2i+1.
  dispatch_float(dtype, "normal", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    parallel_for((n + 1) / 2, cost::kTwoDraws, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) {
        double u1 = 1.0 - gen.uniform(first + 2 * i), u2 = gen.uniform(first + 2 * i + 1);
        double r = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
        p[2 * i] = static_cast<T>(mean + std * r * std::cos(th));
        if (2 * i + 1 < n) p[2 * i + 1] = static_cast<T>(mean + std * r * std::sin(th));
      }
    });
  });
  return t;
}

Tensor randn(const Shape& shape, DType dtype, Generator* gen) {
  if (!is_floating(dtype)) fail("randn", "expected a float dtype, got ", dtype_name(dtype));
  return normal(shape, 0.0, 1.0, dtype, gen);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* g) {
  if (high <= low) fail("randint", "expected low < high, got low ", low, " and high ", high);
  Tensor t = allocate(shape, kInt64, false, "randint");
  Generator& gen = gen_or_default(g);
  const int64_t n = t.numel();
  const uint64_t first = gen.reserve(n);
  // in uint64, where high - low and low + draw cannot overflow (the range may exceed 2^63)
  const uint64_t range = (uint64_t)high - (uint64_t)low;
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < n; i++) p[i] = (int64_t)((uint64_t)low + gen.draw(first + i) % range);
  return t;
}

}  // namespace ember
